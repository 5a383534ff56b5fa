/* cosmos3.h - the cosmos3 engine as a C library: a request in, pixels out.
 *
 * The only header a program needs. Link with `pkg-config --cflags --libs cosmos3`.
 *
 *     cosmos3_open_params op;
 *     cosmos3_open_params_init(&op);            // every field "use the default"
 *     op.model = "demo";
 *     cosmos3_engine *e;
 *     char err[512];
 *     if (cosmos3_open(&op, &e, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
 *     cosmos3_request rq;
 *     cosmos3_request_init(&rq);                // the model's defaults for everything
 *     rq.prompt = "a red circle on a blue background, on the right";
 *     rq.seed = 3;
 *     cosmos3_result *r;
 *     if (cosmos3_generate(e, &rq, &r, err, sizeof err) == COSMOS3_OK) {
 *         // r->rgb: r->frames x r->height x r->width x 3 bytes
 *         cosmos3_result_free(r);
 *     }
 *     cosmos3_close(e);
 *
 * Rules every call keeps:
 *   - Errors are a status (cosmos3_status) and a one-line message written to
 *     err (when err is not NULL). The library never prints, never writes a
 *     file it was not asked to write, and never exits.
 *   - A field left at its *_init() value means "what the model (its card,
 *     else the upstream task defaults) says"; the values actually used come
 *     back in the result.
 *   - One engine runs one generation at a time; cosmos3_generate on an
 *     engine that is busy in another thread fails with COSMOS3_EUSAGE.
 *   - cosmos3_cancel may be called from any thread or a signal handler.
 *   - Events arrive through one callback, from the engine's threads, one at
 *     a time (never two at once for one engine); every event of a
 *     generation carries its job id, and each job ends with exactly one of
 *     COSMOS3_EV_DONE, COSMOS3_EV_CANCELLED or COSMOS3_EV_FAILED.
 */
#ifndef COSMOS3_H
#define COSMOS3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COSMOS3_API_VERSION 1

/* Every call below is exported from libcosmos3.so; nothing else is (the
 * library is built with -fvisibility=hidden). */
#if defined(__GNUC__)
#define COSMOS3_API __attribute__((visibility("default")))
#else
#define COSMOS3_API
#endif
#define COSMOS3_MAX_RANKS 64 /* ranks of one engine at most */

/* Status codes; they are also the command line's exit statuses. */
typedef enum {
    COSMOS3_OK = 0,
    COSMOS3_EFAIL = 1,      /* internal or unexpected failure */
    COSMOS3_EUSAGE = 2,     /* a bad parameter or request value */
    COSMOS3_EMODEL = 3,     /* checkpoint missing, malformed or inconsistent */
    COSMOS3_EINPUT = 4,     /* bad input data (prompt, noise, conditioning media) */
    COSMOS3_EOUTPUT = 5,    /* cannot write what was asked (mkmodel, latents) */
    COSMOS3_ERESOURCE = 6,  /* not enough devices or memory for the plan */
    COSMOS3_ECANCEL = 130,  /* cancelled (cosmos3_cancel) */
} cosmos3_status;

/* "0.1.0" */
COSMOS3_API const char *cosmos3_version(void);
/* The features built in, space-separated: "cuda nccl" (library side). */
COSMOS3_API const char *cosmos3_features(void);

typedef struct cosmos3_engine cosmos3_engine;

/* ------------------------------------------------------------- events */

typedef enum {
    COSMOS3_EV_LOG,       /* text: an informational line */
    COSMOS3_EV_WARNING,   /* text: a warning line (another size than trained, unknown words ...) */
    COSMOS3_EV_DEVICE,    /* text: which device runs and why ("cpu: no usable GPU (<driver's reason>)") */
    COSMOS3_EV_PLAN,      /* text: the layout */
    COSMOS3_EV_LOADED,    /* rank, mem_* of that rank, seconds */
    COSMOS3_EV_STAGE,     /* stage, begin (true at its start, false at its end with seconds) */
    COSMOS3_EV_STEP,      /* a denoising step ended: step (1-based), steps, timestep, seconds,
                             cond_s, uncond_s (0 when the uncond branch did not run) */
    COSMOS3_EV_BRANCH,    /* one CFG branch of a step ended: step, branch (0 cond, 1 uncond), rank, group, seconds */
    COSMOS3_EV_VAE,       /* frame chunk decoded: frame (latent frames done), frames (of all), seconds */
    COSMOS3_EV_MEMORY,    /* rank, device, mem_* (this rank's accounting), dev_free, dev_total */
    COSMOS3_EV_DONE,      /* the job finished: seconds */
    COSMOS3_EV_CANCELLED, /* the job was cancelled */
    COSMOS3_EV_FAILED,    /* the job failed: status, text */
} cosmos3_event_kind;

typedef struct {
    cosmos3_event_kind kind;
    uint64_t job;      /* the generation's id (cosmos3_result.job); 0 outside a generation (open) */
    const char *stage; /* COSMOS3_EV_STAGE: "load", "tokenize", "encode" (conditioning), "und",
                          "denoise", "vae" */
    bool begin;
    int step, steps;
    double timestep;
    int branch, rank, group, device;
    int frame, frames;
    double seconds, cond_s, uncond_s;
    int64_t mem_weights, mem_kv, mem_act; /* bytes */
    int64_t dev_free, dev_total;          /* bytes; -1 when unknown */
    int status;
    const char *text; /* valid during the call only */
} cosmos3_event;

typedef void (*cosmos3_event_fn)(const cosmos3_event *ev, void *user);

/* ------------------------------------------------------------- opening */

typedef struct {
    const char *model;     /* a checkpoint folder or a built-in name ("demo"); NULL: $COSMOS3_MODEL, else "demo" */
    const char *device;    /* "auto" (NULL), "cpu" or "cuda" */
    const char *gpus;      /* "0,1,2,3" (NULL: every visible GPU, in order) */
    int tp;                /* tensor parallel ranks (0: 1) */
    int cfg_parallel;      /* 1 or 2 (0: 1) */
    int ulysses;           /* sequence parallel ranks (0: 1) */
    bool offload;          /* stream block weights from pinned host memory */
    int threads;           /* CPU threads (0: all cores) */
    const char *precision; /* "auto" (NULL: as stored), "bf16" or "fp8" (quantise at load) */
    /* the size the memory plan is checked at (0: the model's default image size) */
    int plan_width, plan_height, plan_frames;
    cosmos3_event_fn on_event; /* loading events (job 0), and every job's events when a request sets none */
    void *user;
    /* the GEN tower's attention: "bf16" (NULL) or "fp8" (Q, K, P, V in E4M3 with
     * per-head scales, fp32 accumulation; CUDA on Hopper, head_dim 128; the
     * CPU emulates it). Where FP8 cannot run, 16 bits do and a result warning
     * says so; the UND tower's causal attention is always 16 bits. */
    const char *attention;
} cosmos3_open_params;

COSMOS3_API void cosmos3_open_params_init(cosmos3_open_params *p);

/* Check the plan (devices, divisibility, memory) before any weight is read,
 * then load. On failure *out is NULL. */
COSMOS3_API int cosmos3_open(const cosmos3_open_params *p, cosmos3_engine **out, char *err,
                             size_t errlen);
COSMOS3_API void cosmos3_close(cosmos3_engine *e);

/* The model folder a name stands for: a folder that exists is itself; a
 * name without '/' is looked up as a built-in model (the user's data folder
 * $XDG_DATA_HOME/cosmos3/models, the installed data folder, the source
 * tree's share/models); NULL: $COSMOS3_MODEL, else "demo". Returns buf. */
COSMOS3_API const char *cosmos3_model_dir(const char *model, char *buf, size_t n);

/* What a loaded model is (valid until cosmos3_close). */
typedef struct {
    const char *id;    /* the folder's name */
    const char *dir;   /* the folder */
    const char *about; /* the card's one line, or NULL */
    uint64_t config_hash;
    /* the card's defaults: 0 / < 0 / "" where it gives none */
    int width, height, steps;
    double guidance, shift;
    const char *schedule;
    int guidance_interval; /* 0: none given, 1: [lo, hi], 2: CFG on every step */
    double guidance_lo, guidance_hi;
    const char *const *vocabulary; /* words the model knows (NULL: any) */
    int nvocabulary;
    const char *const *examples;
    int nexamples;
    bool default_system_prompt;
    /* geometry */
    int layers, hidden, heads, kv_heads, head_dim, latent_channels, patch;
    int vae_spatial, vae_temporal;       /* pixels per latent cell, frames per latent frame */
    int64_t parameters, parameter_bytes; /* as stored, both towers and the VAE */
    /* joint sound (appended): the transformer's sound latent width (0: no
     * sound heads) and whether the folder holds sound_tokenizer/ */
    int sound_dim;
    bool sound_tokenizer;
} cosmos3_model_info;

COSMOS3_API void cosmos3_model(const cosmos3_engine *e, cosmos3_model_info *out);

/* The layout the engine runs on. */
typedef struct {
    int tp, cfg_parallel, ulysses, world;
    char device[8];        /* "cpu", "cuda" */
    char device_note[384]; /* which device runs and why, one line ("device: cpu (no usable GPU:
                              ...)") */
    bool offload;
    bool cfg_batch;                 /* both CFG branches as one batch on each rank */
    int64_t weights, kv, act, need; /* bytes per rank (the plan's estimate) */
    struct {
        int device; /* GPU ordinal (0 on the CPU) */
        char name[64];
        int64_t total, free; /* bytes at open; -1 unknown */
    } ranks[COSMOS3_MAX_RANKS];
} cosmos3_layout;

COSMOS3_API void cosmos3_layout_get(const cosmos3_engine *e, cosmos3_layout *out);
/* The layout as text lines (ranks, devices, bytes per rank), as `cosmos3
 * info` shows it; malloc'd. */
COSMOS3_API char *cosmos3_layout_text(const cosmos3_engine *e);
/* A GPU's memory now (the one poll a monitor makes): COSMOS3_OK, or
 * COSMOS3_ERESOURCE without CUDA or that device. */
COSMOS3_API int cosmos3_device_memory(int device, int64_t *free_bytes, int64_t *total_bytes);
/* The GPUs this process sees (0 without CUDA or a usable driver). */
COSMOS3_API int cosmos3_device_count(void);
/* One GPU's name and memory now: COSMOS3_ERESOURCE (naming why) for a device
 * that is not there or that the driver cannot query. */
COSMOS3_API int cosmos3_device_info(int device, char *name, size_t n, int64_t *free_bytes,
                                    int64_t *total_bytes, char *err, size_t errlen);

/* ------------------------------------------------------------- requests */

#define COSMOS3_DEFAULT (-1) /* for the int/double fields below: "the model's default" */

typedef enum { COSMOS3_KEEP_FIRST = 0, COSMOS3_KEEP_LAST = 1 } cosmos3_keep;

/* Frames in memory: uint8 RGB, [frames, height, width, 3], row-major. */
typedef struct {
    const uint8_t *rgb;
    int width, height, frames;
    double fps; /* 0: unknown */
} cosmos3_frames;

typedef struct {
    const char *prompt;          /* required */
    const char *negative_prompt; /* NULL: the model's default */
    int width, height;           /* COSMOS3_DEFAULT: the task default */
    int frames;                  /* 1: an image; 1 + 4k: a video; COSMOS3_DEFAULT: an image */
    double fps;                  /* COSMOS3_DEFAULT: 24 */
    int steps;                   /* COSMOS3_DEFAULT */
    double guidance;             /* classifier-free guidance scale; COSMOS3_DEFAULT */
    double shift;                /* flow shift; COSMOS3_DEFAULT */
    const char *schedule;        /* "linear", "karras", "native"; NULL: default */
    int guidance_interval;       /* COSMOS3_DEFAULT, 0: CFG on every step, 1: only for t in [lo, hi] */
    double guidance_lo, guidance_hi;
    int64_t seed;                /* COSMOS3_DEFAULT: random (below 2^53); else 0..2^63-1 */
    int system_prompt;           /* COSMOS3_DEFAULT: as the checkpoint says; 0 off; 1 on */
    int templates;               /* COSMOS3_DEFAULT (on), 0, 1: the resolution/duration sentences */
    /* initial noise instead of the seed's: [1, C, T, H/16, W/16] floats */
    const float *noise;
    size_t noise_len;
    /* distilled checkpoints: the re-noising draws [steps, 1, C, T, h, w] (NULL: from the seed) */
    const float *step_noise;
    size_t step_noise_len;
    /* conditioning: a picture (image-to-video) or a clip (video-to-video), not both */
    const cosmos3_frames *image;
    const cosmos3_frames *video;
    const int *condition_frames; /* latent frame indexes pinned from the clip (NULL: 0 and 1) */
    int ncondition_frames;
    cosmos3_keep condition_keep;
    bool want_latents;           /* return the final latents too */
    cosmos3_event_fn on_event;   /* NULL: the engine's (open params) */
    void *user;
    /* joint sound (appended): generate the clip's sound with it. The
     * checkpoint needs sound_tokenizer/ and the transformer's audio heads
     * (COSMOS3_EMODEL naming what is missing). sound_noise: the initial
     * sound latents [sound_dim, T_s] instead of the seed's (T_s: upstream's
     * ceil(int(frames / fps * rate) / hop)). */
    bool sound;
    const float *sound_noise;
    size_t sound_noise_len;
} cosmos3_request;

COSMOS3_API void cosmos3_request_init(cosmos3_request *r);

/* The settings a request resolves to on an engine (NULL: without a model,
 * the upstream task defaults only). */
typedef struct {
    int width, height, frames;
    double fps;
    int steps;
    double guidance, shift;
    char schedule[16];
    char sampler[32];
    bool guidance_interval;
    double guidance_lo, guidance_hi;
    bool seed_given; /* false: drawn when the request runs */
    uint64_t seed;
    bool system_prompt, templates;
    const char *negative_prompt; /* the request's, or "" (valid while the request is) */
    int latent_shape[5];         /* [1, C, T, h, w] of noise and latents (C 0 without an engine) */
} cosmos3_settings;

/* Fill the defaults of r (the model card, else the task's) and check every
 * value, without generating: COSMOS3_EUSAGE with a one-line message naming
 * the field and the fix. The prompt is not required here. */
COSMOS3_API int cosmos3_resolve(const cosmos3_engine *e, const cosmos3_request *r,
                                cosmos3_settings *out, char *err, size_t errlen);

/* First-last conditioning: a clip of frames x height x width (frames 1 + k
 * vae_temporal, k >= 1) whose leading frames come from start and trailing
 * frames from end (a picture or a clip each), preprocessed as upstream's
 * conditioning frames; pass it as the request's video with condition_frames
 * = idx[0..n) (at most max) and COSMOS3_KEEP_FIRST. *rgb (malloc'd) holds
 * its [frames, height, width, 3] bytes. COSMOS3_EUSAGE when the two ends
 * overlap on the latent timeline. */
COSMOS3_API int cosmos3_first_last(const cosmos3_frames *start, const cosmos3_frames *end,
                                   int frames, int width, int height, int vae_temporal,
                                   uint8_t **rgb, int *idx, int max, int *n, char *err,
                                   size_t errlen);

/* ------------------------------------------------------------- results */

typedef struct {
    uint64_t job;
    /* the frames: [frames, height, width, 3] uint8 RGB */
    uint8_t *rgb;
    int width, height, frames;
    double fps;
    /* the final latents when asked: [1, C, T, h, w] */
    float *latents;
    int latent_shape[5];
    /* the settings actually used */
    char *prompt, *negative_prompt;
    uint64_t seed;  /* the seed (meaningless when noise_given) */
    bool noise_given;
    int steps;
    double guidance, shift;
    char schedule[16];
    char sampler[32]; /* "UniPC", "FlowMatch Euler SDE" */
    bool guidance_interval;
    double guidance_lo, guidance_hi;
    bool system_prompt, templates;
    char model_id[256];
    uint64_t config_hash;
    int L_cond, L_uncond;      /* prompt lengths in tokens */
    int tp, cfg_parallel, ulysses;
    char device[8];            /* "cpu", "cuda" */
    /* seconds per stage */
    double t_tokenize, t_und, t_denoise, t_vae, t_total;
    double t_step_mean, t_cond_mean, t_uncond_mean;
    int64_t mem_peak;
    int64_t h2d_bytes; /* --offload: rank 0's weight stream */
    double h2d_seconds;
    /* warnings given for this request, one line each */
    char **warnings;
    int nwarnings;
    /* ---- the phases (appended; seconds, 0 where a phase did not run) ----
     * The engine's load (cosmos3_open; the same in every result of one
     * engine): the whole of it, and its parts. The shards are mapped and
     * prefaulted on threads of their own while the backends start, and the
     * tokenizer loads on its own thread, so the parts overlap:
     * t_load_read and t_load_tokenizer need not add to the rest. */
    double t_load;
    double t_load_read;          /* checkpoint headers parsed, shards mapped and prefaulted */
    double t_load_backends;      /* the backends (CUDA context, cuBLAS) and communicators */
    double t_load_weights;       /* the transformer's weights converted and uploaded, every rank */
    double t_load_vae;           /* the VAE decoder's weights */
    double t_load_tokenizer;     /* the tokenizer (its own thread) */
    int64_t load_prefault_bytes; /* what the prefault mapped (0: COSMOS3_PREFAULT=0) */
    double t_encode;             /* the conditioning picture or clip through the VAE encoder */
    double t_step_first;         /* the first denoising step (CUDA graphs recorded, plans made) */
    double t_step_rest_mean;     /* the mean of the steps after the first (0: one step) */
    /* CLOCK_MONOTONIC seconds (clock_gettime) when cosmos3_open began, when
     * this generation began and when its first denoising step began (0:
     * none ran): a program relates them to its own start, e.g. launch to
     * the first step */
    double clock_open, clock_generate, clock_first_step;
    /* the mean of each step's host work inside t_step_mean (the CFG combine
     * and the sampler step on the host latents) */
    double t_step_host_mean;
    /* the numerics it ran with (appended): the weights' precision the engine
     * was opened with ("auto": as stored, "bf16", "fp8") and the GEN
     * attention that ran ("fp8" when every GEN call took the FP8 path, on the
     * CPU its emulation; else "bf16", "fp32" on the CPU) */
    char precision[8];
    char attention[8];
    /* joint sound (appended; NULL and 0 without it): the waveform
     * [sound_channels, sound_samples] float PCM in [-1, 1] at sound_rate Hz
     * (T_s latents x hop samples: upstream does not trim it to the video),
     * and with want_latents the final sound latents [sound_latent_shape] */
    float *sound;
    int sound_channels;
    int64_t sound_samples;
    int sound_rate;
    float *sound_latents;
    int sound_latent_shape[2]; /* [sound_dim, T_s] */
    double t_sound;            /* seconds in the sound decoder */
} cosmos3_result;

/* Run one generation. *out is NULL on failure; COSMOS3_ECANCEL when
 * cancelled (the engine stays usable). */
COSMOS3_API int cosmos3_generate(cosmos3_engine *e, const cosmos3_request *r, cosmos3_result **out,
                                 char *err, size_t errlen);
/* Ask the generation in flight to stop (async-signal-safe; no effect when idle). */
COSMOS3_API void cosmos3_cancel(cosmos3_engine *e);
COSMOS3_API void cosmos3_result_free(cosmos3_result *r);

/* Latents as a safetensors file with one tensor "latents" [1, C, T, h, w]
 * (float32): written atomically, an existing file kept unless overwrite. */
COSMOS3_API int cosmos3_latents_write(const char *path, const float *latents, const int shape[5],
                                      bool overwrite, char *err, size_t errlen);
/* Read one: shape must match want (COSMOS3_EUSAGE naming both otherwise:
 * the request's size does not fit the file), F32 with every value finite
 * (COSMOS3_EINPUT naming the dtype, or the first bad element's index);
 * *out is malloc'd, n floats. */
COSMOS3_API int cosmos3_latents_read(const char *path, const int want[5], float **out, size_t *n,
                                     char *err, size_t errlen);
/* The re-noising draws of the fixed-step SDE sampler from the same file:
 * "step_noise" [steps, 1, C, T, h, w] with want = the latents' shape. A file
 * without one gives *out NULL, n 0 and COSMOS3_OK; a wrong shape is
 * COSMOS3_EUSAGE, a dtype or value as for the latents COSMOS3_EINPUT. */
COSMOS3_API int cosmos3_step_noise_read(const char *path, int steps, const int want[5], float **out,
                                        size_t *n, char *err, size_t errlen);

/* Joint sound: the latents file with the final sound latents beside them
 * ("sound_latents" [sound_dim, T_s]; sound NULL: as cosmos3_latents_write). */
COSMOS3_API int cosmos3_latents_write_sound(const char *path, const float *latents,
                                            const int shape[5], const float *sound,
                                            const int sound_shape[2], bool overwrite, char *err,
                                            size_t errlen);
/* The initial sound noise from the same file: "sound_latents" [sound_dim,
 * T_s] F32 (the engine checks T_s against the clip). A file without one
 * gives *out NULL, n 0 and COSMOS3_OK; errors as cosmos3_latents_read. */
COSMOS3_API int cosmos3_sound_noise_read(const char *path, int sound_dim, float **out, size_t *n,
                                         char *err, size_t errlen);

/* ---------------------------------------------------------- inspecting */

/* A checkpoint read and checked (configs, tensor names, shapes and dtypes)
 * without loading weights: what `cosmos3 info` shows. */
typedef struct cosmos3_checkpoint cosmos3_checkpoint;

/* What cosmos3_model_info does not say. */
typedef struct {
    const char *mlp;           /* "swiglu" or "relu2" */
    int intermediate, vocab, patch_dim;
    double rms_eps, rope_theta;
    int mrope[3];
    bool und_qk_norm, und_k_norm_for_gen;
    /* parameters and bytes as stored, per part ("unused": heads generation never reads) */
    int64_t und_params, gen_params, vae_params, unused_params;
    int64_t und_bytes, gen_bytes, vae_bytes, unused_bytes;
    const char *scheduler;     /* the scheduler's class name */
    bool karras_sigmas;
    const char *const *fillers; /* words read that change nothing it draws */
    int nfillers;
    const char *scores_json;   /* the card's measured scores (compact JSON), or NULL */
    /* NVIDIA ModelOpt FP8 (transformer/config.json quantization_config): E4M3
     * layer weights with per-tensor scales, counted at 1 byte each above */
    bool fp8;
    int64_t fp8_tensors, fp8_params; /* the weights stored as F8_E4M3 */
    /* its runtime.diffusion_step_policy: the first / last N steps run with
     * 16-bit activations (the weights dequantised); none: every step FP8 */
    bool fp8_policy;
    int fp8_first, fp8_last;
} cosmos3_checkpoint_details;

/* p->model names the folder (as cosmos3_open); the rest is for the plan. */
COSMOS3_API int cosmos3_checkpoint_open(const cosmos3_open_params *p, cosmos3_checkpoint **out,
                                        char *err, size_t errlen);
COSMOS3_API void cosmos3_checkpoint_close(cosmos3_checkpoint *c);
/* Valid until cosmos3_checkpoint_close; details may be NULL. */
COSMOS3_API void cosmos3_checkpoint_model(const cosmos3_checkpoint *c, cosmos3_model_info *out,
                                          cosmos3_checkpoint_details *details);
/* What gen's load would refuse, with gen's code and one-line message: the
 * card's defaults as a request resolves them, every tensor gen loads (name,
 * shape, dtype, FP8 scales; the VAE's too) through the loader itself on a
 * backend that stores nothing, and the tokenizer. deep adds every stored
 * value (the dtype table, NaN/Inf; *tensors and *values say how many were
 * read, either may be NULL) and then the whole load cosmos3_open(p) does. */
COSMOS3_API int cosmos3_checkpoint_check(const cosmos3_checkpoint *c, const cosmos3_open_params *p,
                                         bool deep, int64_t *tensors, int64_t *values, char *err,
                                         size_t errlen);
/* The plan p (devices, ranks, offload) gives for W x H x frames, checked as
 * cosmos3_open checks it; *text (malloc'd, may be NULL) as cosmos3_layout_text. */
COSMOS3_API int cosmos3_checkpoint_plan(const cosmos3_checkpoint *c, const cosmos3_open_params *p,
                                        int width, int height, int frames, cosmos3_layout *out,
                                        char **text, char *err, size_t errlen);

/* ------------------------------------------------------------ tokenizer */

/* A checkpoint's text tokenizer (its text_tokenizer/ or the shipped Qwen3
 * one), without loading any weights. */
typedef struct cosmos3_tokenizer cosmos3_tokenizer;

typedef struct {
    bool raw;                  /* bare BPE ids: no chat template, eos or vision_start */
    bool negative;             /* the negative prompt's template */
    int system_prompt;         /* -1 = the checkpoint's default, 0 off, 1 on */
    bool templates;            /* the resolution/duration sentences */
    int width, height;         /* 0 = the task default (image 1024x1024, video 1280x720) */
    int frames;                /* 1 = image */
    double fps;
} cosmos3_tokenize_params;

COSMOS3_API void cosmos3_tokenize_params_init(cosmos3_tokenize_params *p);
/* model: a folder or a built-in name (cosmos3_model_dir). */
COSMOS3_API int cosmos3_tokenizer_open(const char *model, cosmos3_tokenizer **out, char *err,
                                       size_t errlen);
COSMOS3_API void cosmos3_tokenizer_close(cosmos3_tokenizer *t);
/* The ids that reach the transformer for text (len bytes); *ids malloc'd. */
COSMOS3_API int cosmos3_tokenize(const cosmos3_tokenizer *t, const cosmos3_tokenize_params *p,
                                 const char *text, size_t len, int32_t **ids, int *n, char *err,
                                 size_t errlen);

/* ------------------------------------------------------------- mkmodel */

/* A random-weight checkpoint in the Diffusers layout (for tests, benchmarks
 * and plan checks): written into out_dir atomically (a temporary folder
 * renamed at the end). A field left at zero is the preset's. */
typedef struct {
    const char *preset;        /* "tiny", "demo", "edge", "nano", "super" */
    int layers;                /* 0 = the preset's */
    uint64_t seed;
    const char *out_dir;
    const char *tokenizer_dir; /* NULL = the installed Qwen3 tokenizer */
    bool overwrite;            /* replace an existing checkpoint (or empty folder) */
    int64_t shard_bytes;       /* 0 = 5 GB */
    int vocab;                 /* 0 = the preset's */
    bool distilled; /* the 4-step students' FlowMatch scheduler (fixed_step_sampler_config) */
    bool fp8;       /* ModelOpt FP8 layer weights (float8_e4m3fn + per-tensor scales) */
    void (*progress)(void *user, int64_t done_bytes, int64_t total_bytes);
    void *progress_user;
} cosmos3_mkmodel_params;

COSMOS3_API void cosmos3_mkmodel_params_init(cosmos3_mkmodel_params *p);
/* COSMOS3_EUSAGE (preset, values), COSMOS3_EINPUT (tokenizer), COSMOS3_EOUTPUT. */
COSMOS3_API int cosmos3_mkmodel(const cosmos3_mkmodel_params *p, char *err, size_t errlen);

/* --------------------------------------------------------------- bench */

/* Time the GEN CFG step of a mkmodel preset's geometry on random weights held
 * in memory (no checkpoint on disk): what `cosmos3 bench` prints. One rank.
 * FLOPs are counted as ../shared/PERF-TARGETS.md says (2 x weights applied
 * per token x tokens for the linears, 4 x S x (L + S) x Hq x head_dim per GEN
 * layer for attention). Unless skip_vae, a random VAE of the preset's
 * geometry is written by mkmodel into a temporary folder under $TMPDIR
 * (removed before the call returns) and decodes the last latents once. */
#define COSMOS3_BENCH_PEAK_TFLOPS 989.0 /* H200 dense bf16 peak (MFU's denominator) */
#define COSMOS3_BENCH_NOPS 11           /* op kinds of the device-timed step */
#define COSMOS3_BENCH_E2E_MAX_STEPS 16  /* steps of an e2e request whose times are kept */

typedef struct {
    const char *preset;    /* "tiny", "demo", "edge", "nano", "super" (NULL: "tiny") */
    int layers;            /* 0 = the preset's */
    const char *device;    /* "auto" (NULL), "cpu" or "cuda" */
    const char *gpus;      /* the first ordinal is used (NULL: 0) */
    bool offload;          /* stream block weights from pinned host memory (CUDA) */
    const char *precision; /* "auto" (NULL), "bf16" or "fp8" */
    int width, height;     /* 0 = 1024 */
    int frames;            /* 0 = 1 */
    double fps;            /* 0 = 24 */
    int steps;             /* timed CFG steps; 0 = 3 */
    const char *prompt;    /* NULL: a built-in prompt */
    bool skip_vae;
    /* instead of the CFG step: one distilled 4-step request as `gen` runs it
     * (tokenize, UND, one forward per step with the fixed-step SDE sampler,
     * the preset's real VAE decode; frames 1), once as warm-up and once
     * timed, on the engine's own generate path; the memory plan is checked
     * (and returned) before the load. Random weights are made on the device
     * where the backend can (no host copy). */
    bool e2e;
    const char *attention; /* "bf16" (NULL) or "fp8": as cosmos3_open_params.attention */
} cosmos3_bench_params;

typedef struct {
    char preset[16];
    /* geometry (per tower) */
    int layers, hidden, heads, kv_heads, head_dim, intermediate;
    bool mlp_gated; /* SwiGLU; false: ReLU^2 */
    char device[96]; /* "cpu", "cuda:0 NVIDIA H200" */
    int width, height, frames;
    int latent_t, latent_h, latent_w, gen_tokens, L_cond, L_uncond;
    int steps; /* timed */
    /* model FLOPs per CFG step and of the UND calls */
    double flop_step, flop_step_linear, flop_step_attn, flop_und;
    /* seconds per CFG step (cond + uncond) and per branch */
    double step_mean, step_min, step_max, cond_mean, uncond_mean;
    /* the profiled step (synchronised around every matrix product and attention call) */
    double prof_total, prof_linear, prof_attn; /* seconds */
    double prof_flop_linear, prof_flop_attn;   /* FLOPs those calls executed */
    int prof_n_linear, prof_n_attn;
    /* the device-timed step (backends with timing events): per op kind */
    bool dev_timed;
    double dev_op_ms[COSMOS3_BENCH_NOPS];
    int dev_op_n[COSMOS3_BENCH_NOPS];
    double dev_span_ms; /* first op start to last op end */
    double dev_wall;    /* seconds */
    /* outside the loop, seconds */
    double t_tokenize, t_load, t_und_cond, t_und_uncond, t_vae_load, t_vae;
    double t_vae_warm; /* a second decode of the same latents (pool and plans warm) */
    bool vae, offload, cfg_batch;
    int64_t h2d_bytes; /* streamed during the timed steps (offload) */
    double h2d_seconds;
    int64_t mem_peak, mem_weights, mem_kv, mem_act; /* bytes, the backend's accounting */
    int64_t dev_used, dev_total;                    /* bytes; dev_total 0 when unknown */
    /* the decoded first frame (vae): [frame_height, frame_width, 3] uint8 RGB, malloc'd */
    uint8_t *frame_rgb;
    int frame_width, frame_height;
    /* e2e (params.e2e): the timed request's phases, seconds (cosmos3_result's) */
    bool e2e;
    char *plan_text; /* the plan checked before the load, lines of text (malloc'd) */
    int e2e_steps;   /* forwards (the t_list) */
    double e2e_step[COSMOS3_BENCH_E2E_MAX_STEPS];
    double e2e_tokenize, e2e_und, e2e_denoise, e2e_vae, e2e_total;
    double e2e_wall;        /* around cosmos3_generate (the result's copies included) */
    double e2e_first_total; /* the warm-up: the first request after the load */
    int64_t plan_need, plan_weights; /* bytes per rank the plan counted */
    /* the GEN attention that ran: "bf16", "fp8", or "bf16 (fp8 declined: <why>)" */
    char attention[128];
} cosmos3_bench_result;

COSMOS3_API void cosmos3_bench_params_init(cosmos3_bench_params *p);
/* COSMOS3_EUSAGE (preset, layers 0..1024, steps 0..10000, size not a multiple
 * of the VAE's, frames not 1 + 4k); *out is zeroed first and owns frame_rgb
 * on success (cosmos3_bench_result_free). */
COSMOS3_API int cosmos3_bench(const cosmos3_bench_params *p, cosmos3_bench_result *out, char *err,
                              size_t errlen);
COSMOS3_API void cosmos3_bench_result_free(cosmos3_bench_result *r);
/* The name of device-timed op kind i ("matrix products", "attention", ...). */
COSMOS3_API const char *cosmos3_bench_op_name(int i);

#ifdef __cplusplus
}
#endif

#endif
