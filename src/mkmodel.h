/* mkmodel.h - write a random-weight Cosmos3 checkpoint in the Diffusers layout.
 *
 * For tests, benchmarks and plan checks without the real weights: the folder
 * has exactly the structure, names, shapes and dtypes of a published
 * checkpoint (checkpoint.h), so everything up to the image runs; the image is
 * noise.
 *
 *   DIR/model_index.json                 Cosmos3OmniPipeline
 *   DIR/transformer/config.json          same keys as the published config
 *   DIR/transformer/ *.safetensors       bf16, sharded at 5 GB (+ .index.json),
 *                                        or one diffusion_pytorch_model.safetensors
 *   DIR/vae/config.json + diffusion_pytorch_model.safetensors   f32, encoder + decoder
 *   DIR/scheduler/scheduler_config.json  UniPC, as the base checkpoints
 *   DIR/text_tokenizer/                  copied from opts.tokenizer_dir
 *
 * Presets (transformer geometry per tower; all: latent 48, patch 2, 3D mRoPE
 * interleaved, vocab 151936 because only the Qwen3 tokenizer is shipped):
 *
 *   name   hidden layers  q/kv heads  head_dim  intermediate  MLP     eps   theta  mrope     VAE
 *   tiny     128      2     8 / 8         16        256       SwiGLU  1e-6  5e6    [4,2,2]   tiny
 * (tiny-a geometry) demo     256      4     8 / 4         32        768       SwiGLU  1e-6  5e6
 * [8,4,4]   base 16 (the demo model's) nano    4096     36    32 / 8        128      12288 SwiGLU
 * 1e-6  5e6    [24,20,20] Wan2.2-TI2V-5B super   5120     64    64 / 8        128      25600 SwiGLU
 * 1e-6  5e6    [24,20,20] Wan2.2-TI2V-5B edge    2048     28    16 / 8        128       9216 ReLU^2
 * 1e-5  1e8    [24,20,20] Wan2.2-TI2V-5B
 *
 * Edge is the Nemotron backbone: no UND norm_q/norm_k, a k_norm_und_for_gen
 * per layer, qk_norm_for_text false, use_und_k_norm_for_gen true; its model
 * index sets default_use_system_prompt false and use_native_flow_schedule
 * true (the published Edge flags); the others set true / false.
 * Sizes: nano ~14.5 B transformer parameters (~29 GB), super ~62 B (~125 GB),
 * edge ~3 B (~6 GB); the full VAE adds ~0.7 B f32 parameters (~2.8 GB).
 *
 * Initialisation (as ../shared/fixtures/README.md): embed_tokens N(0,1),
 * linear and conv weights N(0, 1/fan_in), norm weights 1 + N(0, 0.1^2),
 * biases N(0, 0.1^2). Not written: lm_head, sound and action tensors
 * (generation never reads them; config sets sound_gen/action_gen false).
 *
 * Values come from a seeded xoshiro256** generator with a ziggurat normal
 * sampler, seeded per (seed, tensor name, chunk): the bytes depend only on the
 * seed and the geometry, not on thread count or sharding. Generation streams
 * batches of chunks (two 32 MB buffers; never a whole shard in memory): OpenMP
 * fills one batch while a writer thread writes the previous one. The sampler
 * alone runs at ~200 M values/s per thread; on slow disks the write dominates.
 *
 * Atomicity: everything is written into DIR.tmp.PID beside DIR and renamed to
 * DIR at the end; on failure the temporary folder is removed. An existing DIR
 * is refused unless overwrite, and even then only replaced when it is empty
 * or a checkpoint (holds model_index.json).
 */
#ifndef COSMOS3_MKMODEL_H
#define COSMOS3_MKMODEL_H

#include "common.h"

typedef struct {
    const char *name;
    const char *about;         /* one line for listings */
    int hidden, layers, heads, kv_heads, head_dim, inter, vocab;
    bool gated;                /* SwiGLU (gate/up/down); false: ReLU^2 (up/down) */
    bool nemotron;             /* Edge backbone: see above */
    double eps, theta;
    int mrope[3];              /* mrope_section (T, H, W), frequency pairs */
    int vae_base, vae_decoder_base; /* Wan VAE channel bases: 8/8 tiny-a, 16/16 demo, 160/256
                                       Wan2.2-TI2V-5B */
    bool system_prompt;        /* model_index default_use_system_prompt */
    bool native_schedule;      /* model_index use_native_flow_schedule */
} c3_mkmodel_preset;

/* VAE choice in the options. */
enum { MKMODEL_VAE_PRESET = 0, MKMODEL_VAE_TINY = 1, MKMODEL_VAE_FULL = 2 };

typedef struct {
    const char *preset;        /* "tiny", "nano", "super", "edge" */
    int layers;                /* 0 = the preset's */
    uint64_t seed;
    const char *out_dir;
    const char *tokenizer_dir; /* holds tokenizer.json (+ tokenizer_config.json), or a
                                  checkpoint folder whose text_tokenizer/ does */
    bool overwrite;
    /* Optional (zero = default): */
    int64_t shard_bytes;       /* max shard size; 0 = 5 GB (5e9 bytes, as save_pretrained) */
    int vocab;                 /* 0 = the preset's (for small test checkpoints) */
    int vae;                   /* MKMODEL_VAE_*; 0 = the preset's */
    bool distilled; /* the 4-step students' FlowMatch scheduler (fixed_step_sampler_config) */
    bool fp8;       /* ModelOpt FP8 layer weights (see mkmodel.c) */
    /* transformer/random.json instead of the shards: the weights are made in
     * memory when the folder opens (checkpoint_random.h); the rest as usual */
    bool random_transformer;
    /* Called after each block of data is written (from the calling thread). */
    void (*progress)(void *user, int64_t done_bytes, int64_t total_bytes);
    void *progress_user;
} c3_mkmodel_opts;

/* Sizes of what mkmodel_write would write. */
typedef struct {
    int64_t transformer_params, transformer_bytes;
    int64_t vae_params, vae_bytes;
    int transformer_tensors, vae_tensors;
    int shards;                /* 1 = a single diffusion_pytorch_model.safetensors */
} c3_mkmodel_size;

/* The preset table (n entries) and lookup by name (NULL if unknown). */
const c3_mkmodel_preset *mkmodel_presets(int *n);
const c3_mkmodel_preset *mkmodel_preset(const char *name);

/* Compute sizes without writing. C3_EUSAGE for an unknown preset or bad override. */
int mkmodel_size(const c3_mkmodel_opts *o, c3_mkmodel_size *s);

/* Write the checkpoint. Errors: C3_EUSAGE (preset, options), C3_EINPUT
 * (tokenizer folder), C3_EOUTPUT (exists, permission, disk space). */
int mkmodel_write(const c3_mkmodel_opts *o);

#endif
