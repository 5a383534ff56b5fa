/* cosmos3_tools.h - the library's calls for the tools beside generation:
 * checkpoint inspection (`cosmos3 info`, `check`), the tokenizer (`cosmos3
 * tokenize`), random-weight checkpoints (`cosmos3 mkmodel`) and the step
 * benchmark (`cosmos3 bench`).
 *
 * Installed beside cosmos3.h (which it includes) and exported from the same
 * libcosmos3.so, but with no ABI promise: these structs and calls change with
 * the tools that use them, COSMOS3_API_VERSION does not count them, and a
 * program built against one release's cosmos3_tools.h must be rebuilt for the
 * next. A program that only generates needs cosmos3.h alone. The rules of
 * cosmos3.h hold here too (a status and a one-line err, no printing).
 */
#ifndef COSMOS3_TOOLS_H
#define COSMOS3_TOOLS_H

#include "cosmos3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- inspecting */

/* A checkpoint read and checked (configs, tensor names, shapes and dtypes)
 * without loading weights: what `cosmos3 info` shows. */
typedef struct cosmos3_checkpoint cosmos3_checkpoint;

/* What cosmos3_model_info does not say. */
typedef struct {
    const char *mlp; /* "swiglu" or "relu2" */
    int intermediate, vocab, patch_dim;
    double rms_eps, rope_theta;
    int mrope[3];
    bool und_qk_norm, und_k_norm_for_gen;
    /* parameters and bytes as stored, per part ("unused": heads generation never reads) */
    int64_t und_params, gen_params, vae_params, unused_params;
    int64_t und_bytes, gen_bytes, vae_bytes, unused_bytes;
    const char *scheduler; /* the scheduler's class name */
    bool karras_sigmas;
    const char *const *fillers; /* words read that change nothing it draws */
    int nfillers;
    const char *scores_json; /* the card's measured scores (compact JSON), or NULL */
    /* NVIDIA ModelOpt FP8 (transformer/config.json quantization_config): E4M3
     * layer weights with per-tensor scales, counted at 1 byte each above */
    bool fp8;
    int64_t fp8_tensors, fp8_params; /* the weights stored as F8_E4M3 */
    /* its runtime.diffusion_step_policy: the first / last N steps run with
     * 16-bit activations (the weights dequantised); none: every step FP8 */
    bool fp8_policy;
    int fp8_first, fp8_last;
    /* transformer/random.json: no stored transformer weights; they are made
     * in memory on load (generator "c3_random_weight", uniform in
     * +-random_amplitude, bf16): the pictures are noise */
    bool random_weights;
    double random_amplitude;
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
    bool raw;          /* bare BPE ids: no chat template, eos or vision_start */
    bool negative;     /* the negative prompt's template */
    int system_prompt; /* -1 = the checkpoint's default, 0 off, 1 on */
    bool templates;    /* the resolution/duration sentences */
    int width, height; /* 0 = the task default (image 1024x1024, video 1280x720) */
    int frames;        /* 1 = image */
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
    const char *preset; /* "tiny", "demo", "edge", "nano", "super" */
    int layers;         /* 0 = the preset's */
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
    /* no transformer shards: transformer/random.json, the weights made in
     * memory when the folder opens (bf16 c3_random_weight, amplitude 0.03) */
    bool random_transformer;
} cosmos3_mkmodel_params;

COSMOS3_API void cosmos3_mkmodel_params_init(cosmos3_mkmodel_params *p);
/* COSMOS3_EUSAGE (preset, values), COSMOS3_EINPUT (tokenizer), COSMOS3_EOUTPUT. */
COSMOS3_API int cosmos3_mkmodel(const cosmos3_mkmodel_params *p, char *err, size_t errlen);

/* --------------------------------------------------------------- bench */

/* Time the GEN CFG step of a mkmodel preset's geometry on random weights held
 * in memory (no checkpoint on disk): what `cosmos3 bench` prints. One rank.
 * FLOPs are model FLOPs: 2 x weights applied per token x tokens for the
 * linears, 4 x S x (L + S) x Hq x head_dim per GEN layer for attention (S GEN
 * tokens, L prompt tokens; the softmax and the elementwise ops not counted). Unless skip_vae, a
 * random VAE of the preset's geometry is written by mkmodel into a temporary folder under $TMPDIR
 * (removed before the call returns) and decodes the last latents once. */
#define COSMOS3_BENCH_NOPS 11          /* op kinds of the device-timed step */
#define COSMOS3_BENCH_E2E_MAX_STEPS 16 /* steps of an e2e request whose times are kept */

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
    bool mlp_gated;  /* SwiGLU; false: ReLU^2 */
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
    double e2e_wall;                 /* around cosmos3_generate (the result's copies included) */
    double e2e_first_total;          /* the warm-up: the first request after the load */
    int64_t plan_need, plan_weights; /* bytes per rank the plan counted */
    /* the GEN attention that ran: "bf16", "fp8", or "bf16 (fp8 declined: <why>)" */
    char attention[128];
    /* seconds of a CFG step the step cache serves (beside step_mean, a
     * computed one): --cache sea (the SEA filter, the block stack skipped)
     * and --cache fb (the first block probed, the rest skipped) */
    double step_cached_sea, step_cached_fb;
    /* e2e: the timed request's final latents [1, C, T, h, w] (malloc'd) */
    float *e2e_latents;
    int e2e_latent_shape[5];
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
