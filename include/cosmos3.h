/* cosmos3.h - the cosmos3 engine as a C library: a request in, pixels out.
 *
 * The only header a program that generates needs. Link with `pkg-config
 * --cflags --libs cosmos3`. The tools' calls (checkpoint inspection, the
 * tokenizer, mkmodel, bench) are in cosmos3_tools.h, without an ABI promise.
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
    COSMOS3_EFAIL = 1,     /* internal or unexpected failure */
    COSMOS3_EUSAGE = 2,    /* a bad parameter or request value */
    COSMOS3_EMODEL = 3,    /* checkpoint missing, malformed or inconsistent */
    COSMOS3_EINPUT = 4,    /* bad input data (prompt, noise, conditioning media) */
    COSMOS3_EOUTPUT = 5,   /* cannot write what was asked (mkmodel, latents) */
    COSMOS3_ERESOURCE = 6, /* not enough devices or memory for the plan */
    COSMOS3_ECANCEL = 130, /* cancelled (cosmos3_cancel) */
} cosmos3_status;

/* "0.1.0" */
COSMOS3_API const char *cosmos3_version(void);
/* The features built in, space-separated: "cuda nccl mpi" (library side). */
COSMOS3_API const char *cosmos3_features(void);

typedef struct cosmos3_engine cosmos3_engine;

/* ------------------------------------------------------------- events */

typedef enum {
    COSMOS3_EV_LOG,     /* text: an informational line */
    COSMOS3_EV_WARNING, /* text: a warning line (another size than trained, unknown words ...) */
    COSMOS3_EV_DEVICE, /* text: which device runs and why ("cpu: no usable GPU (<driver's reason>)")
                        */
    COSMOS3_EV_PLAN,   /* text: the layout */
    COSMOS3_EV_LOADED, /* rank, mem_* of that rank, seconds */
    COSMOS3_EV_STAGE,  /* stage, begin (true at its start, false at its end with seconds) */
    COSMOS3_EV_STEP,   /* a denoising step ended: step (1-based), steps, timestep, seconds,
                          cond_s, uncond_s (0 when the uncond branch did not run) */
    COSMOS3_EV_BRANCH, /* one CFG branch of a step ended: step, branch (0 cond, 1 uncond), rank,
                          group, seconds */
    COSMOS3_EV_VAE, /* frame chunk decoded: frame (latent frames done), frames (of all), seconds */
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
    /* COSMOS3_EV_STEP (appended): the step cache skipped the GEN block stack
     * and added its cached residual (--cache) */
    bool cached;
} cosmos3_event;

typedef void (*cosmos3_event_fn)(const cosmos3_event *ev, void *user);

/* ------------------------------------------------------------- opening */

typedef struct {
    const char *model;     /* a checkpoint folder or a built-in name ("demo"); NULL: $COSMOS3_MODEL,
                              else "demo" */
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
    cosmos3_event_fn
        on_event; /* loading events (job 0), and every job's events when a request sets none */
    void *user;
    /* the GEN tower's attention: "bf16" (NULL) or "fp8" (Q, K, P, V in E4M3 with
     * per-head scales, fp32 accumulation; CUDA on Hopper, head_dim 128; the
     * CPU emulates it). Where FP8 cannot run, 16 bits do and a result warning
     * says so; the UND tower's causal attention is always 16 bits. */
    const char *attention;
    /* ranks in several processes (mpirun, srun): how many ranks each process
     * holds (0: world / processes; the world must be this times the
     * processes), and whether a TP or Ulysses group may span hosts (refused
     * by default: their exchanges run every layer) */
    int ranks_per_process;
    bool allow_cross_host;
} cosmos3_open_params;

COSMOS3_API void cosmos3_open_params_init(cosmos3_open_params *p);

/* Check the plan (devices, divisibility, memory) before any weight is read,
 * then load. On failure *out is NULL. */
COSMOS3_API int cosmos3_open(const cosmos3_open_params *p, cosmos3_engine **out, char *err,
                             size_t errlen);
COSMOS3_API void cosmos3_close(cosmos3_engine *e);
/* The processes a launcher started for one run (mpirun, srun: MPI starts
 * here, once per process; RANK/WORLD_SIZE otherwise): this one's rank and
 * their count; 0 of 1 for a plain start. A front end on a process other
 * than 0 opens its engine and runs cosmos3_follow, nothing else. */
COSMOS3_API int cosmos3_processes(int *rank, int *size, char *err, size_t errlen);
/* Whether every process of the run reached this call within timeout
 * seconds (a barrier that gives up): before exiting on an error that every
 * process meets (a layout that does not fit), process 0 says it and the
 * others stay quiet when this is true. true at once for one process. */
COSMOS3_API bool cosmos3_processes_together(double timeout);
/* false when a process of the run ended mid-run (killed, crashed), with the
 * one line that names it in why: every later request fails with it (serve's
 * /health answers 503 with it). true for one process. */
COSMOS3_API bool cosmos3_processes_healthy(char *why, size_t n);
/* fn(line, user) runs once, on a thread of the library, the moment a
 * process of the run is seen to end mid-run, with the line that names it:
 * a front end can say it before the launcher ends this process too (Open
 * MPI's mpirun sends SIGTERM, then SIGKILL a second later). NULL: none. */
COSMOS3_API void cosmos3_processes_on_lost(void (*fn)(const char *line, void *user), void *user);

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
    /* the processes of the run (mpirun, srun: 1 otherwise): this one, how
     * many, and its ranks [rank_lo, rank_lo + rank_n); only process 0
     * writes results */
    int process, processes, rank_lo, rank_n;
    char host[64]; /* this process's host */
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
    int guidance_interval; /* COSMOS3_DEFAULT, 0: CFG on every step, 1: only for t in [lo, hi] */
    double guidance_lo, guidance_hi;
    int64_t seed;      /* COSMOS3_DEFAULT: random (below 2^53); else 0..2^63-1 */
    int system_prompt; /* COSMOS3_DEFAULT: as the checkpoint says; 0 off; 1 on */
    int templates;     /* COSMOS3_DEFAULT (on), 0, 1: the resolution/duration sentences */
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
    bool want_latents;         /* return the final latents too */
    cosmos3_event_fn on_event; /* NULL: the engine's (open params) */
    void *user;
    /* (appended) every value above is meant as written, COSMOS3_DEFAULT
     * included (-1 is then checked as -1), but for seed, where it still
     * means "random"; cosmos3_request_defaults sets it */
    bool literal;
    /* the step cache (appended): "none" (NULL), "sea" (SeaCache) or "fb"
     * (first-block cache); the accumulated relative change below which a
     * step is skipped (NAN, as cosmos3_request_init sets it: the kind's own,
     * sea 0.25, fb 0.08), the most
     * consecutive skipped steps (COSMOS3_DEFAULT: 2) and the first steps
     * always computed (COSMOS3_DEFAULT: 1) */
    const char *cache;
    double cache_threshold;
    int cache_max_skip, cache_warmup;
    /* joint sound (appended): generate the clip's sound with it. The
     * checkpoint needs sound_tokenizer/ and the transformer's audio heads
     * (COSMOS3_EMODEL naming what is missing). sound_noise: the initial
     * sound latents [sound_dim, T_s] instead of the seed's (T_s: upstream's
     * ceil(int(frames / fps * rate) / hop)). */
    bool sound;
    const float *sound_noise;
    size_t sound_noise_len;
    /* (appended) this request alone stops (COSMOS3_ECANCEL) once *cancel is
     * nonzero, at the next denoising step, e.g. one request of a batch while
     * the others run on; NULL: only cosmos3_cancel stops it. With ranks in
     * several processes it is not read (cosmos3_cancel stops the run). */
    const volatile int *cancel;
    /* (appended) leave the VAE decode to cosmos3_decode: the result holds
     * the final latents (latents, latent_shape) and no frames yet, so a
     * server decodes and encodes one job while the next one denoises */
    bool defer_decode;
    /* (appended) vLLM-Omni's max_sequence_length: each prompt's ids through
     * the chat template (the system message and the template sentences
     * included) are cut to this many before <|im_end|> and <|vision_start|>
     * are appended, with a warning saying so; 0 (as cosmos3_request_init
     * leaves it) or COSMOS3_DEFAULT: 4096, upstream's default, which is also
     * the engine's limit (a larger value is that limit) */
    int max_sequence_length;
} cosmos3_request;

COSMOS3_API void cosmos3_request_init(cosmos3_request *r);

/* The model's defaults for a task, by value: r is initialised
 * (cosmos3_request_init) and filled with the values a request of frames
 * frames (1: an image; 1 + 4k: a video) runs with on e: width, height,
 * frames, fps, steps, guidance, shift, schedule, the guidance interval,
 * system_prompt and templates, from the model card (a distilled
 * checkpoint's fixed sampler), else the upstream task defaults (e NULL: the
 * task defaults only); the seed stays random. r->literal is set, so a
 * caller sets what its user gave and cosmos3_request_check checks each
 * value as written. COSMOS3_EUSAGE only for a NULL r. */
COSMOS3_API int cosmos3_request_defaults(const cosmos3_engine *e, int frames, cosmos3_request *r);

/* The request fields an error can name. */
typedef enum {
    COSMOS3_FIELD_NONE = 0, /* not one field (or not a request's) */
    COSMOS3_FIELD_PROMPT,
    COSMOS3_FIELD_NEGATIVE_PROMPT,
    COSMOS3_FIELD_WIDTH,
    COSMOS3_FIELD_HEIGHT,
    COSMOS3_FIELD_FRAMES,
    COSMOS3_FIELD_FPS,
    COSMOS3_FIELD_STEPS,
    COSMOS3_FIELD_GUIDANCE,
    COSMOS3_FIELD_SHIFT,
    COSMOS3_FIELD_SCHEDULE,
    COSMOS3_FIELD_GUIDANCE_INTERVAL,
    COSMOS3_FIELD_SEED,
    COSMOS3_FIELD_SYSTEM_PROMPT,
    COSMOS3_FIELD_TEMPLATES,
    COSMOS3_FIELD_NOISE,
    COSMOS3_FIELD_STEP_NOISE,
    COSMOS3_FIELD_IMAGE,
    COSMOS3_FIELD_VIDEO,
    COSMOS3_FIELD_CONDITION_FRAMES,
    COSMOS3_FIELD_MAX_SEQUENCE_LENGTH, /* (appended) */
    COSMOS3_FIELD_COUNT
} cosmos3_field;

/* The field's name in cosmos3_request ("steps", "guidance_interval"); ""
 * for COSMOS3_FIELD_NONE or an unknown value. */
COSMOS3_API const char *cosmos3_field_name(cosmos3_field f);

/* A refused request, in parts a front end can say in its own words: the
 * whole line is "<name(field)> <value> <reason>", then "; use <name(fix)>
 * <fix_value>" or, with fix_value "", "; leave <name(fix)> out" when fix is
 * not COSMOS3_FIELD_NONE. With field COSMOS3_FIELD_NONE the message is the
 * whole story. */
typedef struct {
    int status;          /* the cosmos3_status returned */
    cosmos3_field field; /* the field whose value failed */
    char value[64];      /* that value as checked, as text ("" where no one value) */
    char reason[384];    /* what is wrong with it: "must be in 1..1000" */
    cosmos3_field fix;   /* the field the fix names (COSMOS3_FIELD_NONE: none) */
    char fix_value[32];  /* what to give it ("": leave it out) */
    char message[640];   /* the one line, fields by their names */
} cosmos3_error;

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
    /* the step cache (appended): "none", "sea" or "fb" and its settings */
    char cache[8];
    double cache_threshold;
    int cache_max_skip, cache_warmup;
} cosmos3_settings;

/* Fill the defaults of r (the model card, else the task's) and check every
 * value, without generating: COSMOS3_EUSAGE with a one-line message naming
 * the field and the fix. The prompt is not required here. */
COSMOS3_API int cosmos3_resolve(const cosmos3_engine *e, const cosmos3_request *r,
                                cosmos3_settings *out, char *err, size_t errlen);
/* cosmos3_resolve with the failure in parts: err (may be NULL) says which
 * field failed, its value and why, so a front end names its own option. */
COSMOS3_API int cosmos3_request_check(const cosmos3_engine *e, const cosmos3_request *r,
                                      cosmos3_settings *out, cosmos3_error *err);

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

/* Where a generation's time went: seconds, 0 where a phase did not run. */
typedef struct {
    /* the stages of this generation */
    double tokenize, und, denoise, vae;
    double encode; /* the conditioning picture or clip through the VAE encoder */
    double total;  /* the whole of cosmos3_generate */
    /* the denoising steps: mean per step and per branch; the first step
     * (CUDA graphs recorded, plans made); the mean of the steps after it (0:
     * one step); the mean host work inside a step (the CFG combine and the
     * sampler step on the host latents) */
    double step_mean, cond_mean, uncond_mean, step_first, step_rest_mean, step_host_mean;
    /* The engine's load (cosmos3_open; the same in every result of one
     * engine): the whole of it, and its parts. The shards are mapped and
     * prefaulted on threads of their own while the backends start, and the
     * tokenizer loads on its own thread, so the parts overlap: load_read and
     * load_tokenizer need not add to the rest. */
    double load;
    double load_read;            /* checkpoint headers parsed, shards mapped and prefaulted */
    double load_backends;        /* the backends (CUDA context, cuBLAS) and communicators */
    double load_weights;         /* the transformer's weights converted and uploaded, every rank */
    double load_vae;             /* the VAE decoder's weights */
    double load_tokenizer;       /* the tokenizer (its own thread) */
    int64_t load_prefault_bytes; /* what the prefault mapped (0: COSMOS3_PREFAULT=0) */
    /* CLOCK_MONOTONIC seconds (clock_gettime) when cosmos3_open began, when
     * this generation began and when its first denoising step began (0:
     * none ran): a program relates them to its own start, e.g. launch to
     * the first step */
    double clock_open, clock_generate, clock_first_step;
    double sound; /* the sound decoder (0 without sound) */
} cosmos3_timings;

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
    uint64_t seed; /* the seed (meaningless when noise_given) */
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
    int L_cond, L_uncond; /* prompt lengths in tokens */
    int tp, cfg_parallel, ulysses;
    char device[8];          /* "cpu", "cuda" */
    cosmos3_timings timings; /* where the time went */
    int64_t mem_peak;
    int64_t h2d_bytes; /* --offload: rank 0's weight stream */
    double h2d_seconds;
    /* warnings given for this request, one line each */
    char **warnings;
    int nwarnings;
    /* the numerics it ran with (appended): the weights' precision the engine
     * was opened with ("auto": as stored, "bf16", "fp8") and the GEN
     * attention that ran ("fp8" when every GEN call took the FP8 path, on the
     * CPU its emulation; else "bf16", "fp32" on the CPU) */
    char precision[8];
    char attention[8];
    /* the step cache (appended): the request's ("none", "sea", "fb") and
     * its settings, and how many of the steps it skipped (0: it was off,
     * e.g. for the distilled sampler, with a warning saying so) */
    char cache[8];
    double cache_threshold;
    int cache_max_skip, cache_warmup;
    int steps_cached;
    /* joint sound (appended; NULL and 0 without it): the waveform
     * [sound_channels, sound_samples] float PCM in [-1, 1] at sound_rate Hz
     * (T_s latents x hop samples: upstream does not trim it to the video),
     * and with want_latents the final sound latents [sound_latent_shape] */
    float *sound;
    int sound_channels;
    int64_t sound_samples;
    int sound_rate;
    float *sound_latents;
    int sound_latent_shape[2]; /* [sound_dim, T_s]; its decoder's time: timings.sound */
    /* (appended) the request's max_sequence_length when below the engine's
     * 4096-token limit, else 0 */
    int max_sequence_length;
} cosmos3_result;

/* Run one generation. *out is NULL on failure; COSMOS3_ECANCEL when
 * cancelled (the engine stays usable). */
COSMOS3_API int cosmos3_generate(cosmos3_engine *e, const cosmos3_request *r, cosmos3_result **out,
                                 char *err, size_t errlen);
/* Batches. Requests with the same batch key (the model, the task, width,
 * height, frames, steps, schedule, shift, the guidance interval, distilled
 * or not, as they resolve on e) may run as one batch: B requests x their CFG
 * branches through the GEN tower in one forward, each with its own prompt,
 * seed, noise and guidance scale. A request's result does not depend on
 * what it ran with (on the CPU within 1e-5 relative L2 of its latents run
 * alone). COSMOS3_EUSAGE (naming the field) when r does not resolve. */
COSMOS3_API int cosmos3_batch_key(const cosmos3_engine *e, const cosmos3_request *r, uint64_t *key,
                                  char *err, size_t errlen);
/* The most requests like r one batch may hold on e (the memory plan
 * counting the batch's activations); at least 1. On the CPU at most 8; 1
 * where the requests would run one after another (Ulysses, ranks in several
 * processes, conditioning, sound). */
COSMOS3_API int cosmos3_batch_max(const cosmos3_engine *e, const cosmos3_request *r);
/* Run n requests (1 .. cosmos3_batch_max, one batch key) as one batch. Each
 * request ends on its own: rc[i] its status, out[i] its result (NULL on
 * failure), err + i * errlen its one-line message; one cancelled (its
 * cancel flag) or failing request leaves the others running. Returns
 * COSMOS3_OK when the batch ran (see rc[]), else the error that stopped
 * every request (then also in each rc[i]). Events go to each request's own
 * on_event, each request its own job. A request that does not resolve, has
 * another batch key than the first that does (named in its message), or
 * fails its own checks ends alone before the batch starts. More than
 * cosmos3_batch_max run as several batches; where batches cannot run in
 * lockstep (see cosmos3_batch_max) the requests run one after another. The
 * step cache is off inside a batch of more than one (a warning says so). */
COSMOS3_API int cosmos3_generate_batch(cosmos3_engine *e, int n, const cosmos3_request *const *r,
                                       cosmos3_result **out, int *rc, char *err, size_t errlen);
/* The VAE decode of a result generated with defer_decode: fills rgb,
 * width, height, frames and timings.vae (and with sound the waveform and
 * timings.sound; timings.total grows by both). Safe to call on another
 * thread while e runs the next cosmos3_generate (the VAE has a backend of
 * its own: on CUDA its own stream and buffers); decodes of one engine take
 * turns. COSMOS3_OK at once when res already has its frames. It emits no
 * events (the job ended with its COSMOS3_EV_DONE) and cosmos3_cancel does
 * not stop it; the latents stay in res. The same pixels as the decode
 * inside cosmos3_generate. */
COSMOS3_API int cosmos3_decode(cosmos3_engine *e, cosmos3_result *res, char *err, size_t errlen);

/* Ranks in several processes (mpirun, srun; cosmos3_layout's processes):
 * process 0's cosmos3_generate first sends the request to the others, and
 * every other process runs cosmos3_follow instead of generating on its own:
 * it runs each request process 0 sends (the results are process 0's) until
 * process 0 closes its engine. COSMOS3_OK at once on process 0 and for one
 * process. */
COSMOS3_API int cosmos3_follow(cosmos3_engine *e, char *err, size_t errlen);
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

#ifdef __cplusplus
}
#endif

#endif
