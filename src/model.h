/* model.h - the Cosmos3 MoT transformer (spec section 3) on the backend table
 * (model.c the forward, model_load.c the weights, model_offload.c and
 * model_graphs.c; model_internal.h what they share).
 *
 * Two towers of the same geometry: UND reads the prompt ids with causal
 * attention and leaves each layer's K/V (the cache, once per CFG branch);
 * GEN reads the patchified latents and attends, without a mask, to
 * [UND K/V of that layer | GEN K/V]. Every size comes from c3_tconfig.
 *
 * One c3_model holds one rank's weights on one backend. With tensor
 * parallelism (shard.tp_size > 1) the rank holds heads [r*H/tp, (r+1)*H/tp)
 * of q/k/v (column-parallel), the matching input columns of to_out/down
 * (row-parallel, followed by an all-reduce on shard.tp) and the matching
 * slice of gate/up; norms, proj_in/out, time_embedder and embed_tokens are
 * replicated. Only the rank's slice of each weight is read from the mapping.
 * With Ulysses (shard.sp_size > 1) the GEN sequence is split over shard.sp.
 */
#ifndef COSMOS3_MODEL_H
#define COSMOS3_MODEL_H

#include "backend.h"
#include "checkpoint.h"
#include "comm.h"

typedef struct {
    int tp_rank, tp_size; /* 0, 1 without tensor parallelism */
    c3_comm *tp;          /* NULL when tp_size == 1 */
    int sp_rank, sp_size; /* Ulysses */
    c3_comm *sp;
    const volatile int *cancel; /* checked between layers; non-zero stops with C3_ECANCEL */
    bool offload;               /* layerwise offload (backends with the offload ops; else ignored) */
    int precision;              /* C3_PREC_*: how FP8 and bf16 layer weights load */
} c3_shard;

/* Layer weights (q/k/v/o, gate/up/down of both towers) at load:
 *   AUTO  as stored: ModelOpt FP8 weights (E4M3 + weight_scale, input_scale)
 *         run FP8, others bf16;
 *   BF16  FP8 weights dequantised at load (16-bit products throughout);
 *   FP8   bf16 weights quantised at load to E4M3 with a per-tensor scale
 *         max|W| / 448; their activations get a scale per call, max|x| / 448
 *         (no calibration data: dynamic per-tensor scaling). */
enum { C3_PREC_AUTO = 0, C3_PREC_BF16 = 1, C3_PREC_FP8 = 2 };

typedef struct c3_model c3_model;

int model_load(c3_model **out, const c3_ckpt *ck, c3_backend *be, const c3_shard *shard);
void model_free(c3_model *m);
const c3_tconfig *model_config(const c3_model *m);
/* Layerwise offload (model_offload.c): block weights of both towers in
 * pinned host memory, a ring of two device slots per tower; layer l+1 is
 * copied on the copy queue while layer l computes (ordered by events).
 * model_offload_stats: totals so far of the bytes streamed host -> device
 * and the seconds the copies took (0, 0 when the model is resident). */
bool model_offloaded(const c3_model *m);
void model_offload_stats(const c3_model *m, int64_t *bytes, double *seconds);
/* Replay the GEN layer loop as a recorded graph where the backend can
 * (model_graphs.c; on by default, COSMOS3_GRAPHS=0 turns it off for every
 * model). Off: every op is queued one by one, as a profiler that times each
 * op needs. */
void model_graphs(c3_model *m, bool on);
/* Products with FP8 weights in the GEN tower run W8A8 (true) or W8A16 (the
 * step policy's first/last steps); the UND tower follows the policy's
 * reasoner mode (model_und). Whether the model holds FP8 weights at all. */
void model_fp8_gen_act(c3_model *m, bool w8a8);
void model_fp8_und_act(c3_model *m, bool w8a8);
bool model_fp8(const c3_model *m);
/* The checkpoint's step policy: whether denoising step i of n runs FP8 x
 * FP8 (true) or W8A16 (its first/last steps; a 1-step run stays FP8, as
 * diffusers and vLLM-Omni). No policy: every step FP8 x FP8. */
bool model_fp8_step_w8a8(const c3_tconfig *c, int i, int n);

/* The UND K/V cache of one branch: per layer k, v [L, Hkv_local, head_dim]
 * (K after QK-norm and RoPE, or for Edge the k_norm_und_for_gen form GEN
 * needs; V raw). */
typedef struct {
    int L, layers;
    c3_tensor *k, *v; /* [layers] */
} c3_undkv;

/* Run the UND tower over ids[L]; fills kv (free with undkv_free). */
int model_und(c3_model *m, const int32_t *ids, int L, c3_undkv *kv);
void undkv_free(c3_undkv *kv);

/* Latent geometry of a GEN call. */
typedef struct {
    int T, h, w; /* latent frames and latent height/width (before patch padding) */
    double fps;  /* video fps for the temporal positions (T > 1) */
    /* [T] or NULL: the latent frames the conditioning gives (image/video to
     * video). Their tokens enter clean, without the timestep embedding, and
     * their velocity comes out zero, as upstream's noisy-frame indexes. */
    const uint8_t *pinned;
    /* Joint sound (model_has_sound): sound_T sound latent frames, one GEN
     * token each after the vision tokens (0: none). Their input is
     * audio_proj_in(z_k) + audio_modality_embed + the timestep embedding;
     * positions (t, 0, 0) from vision frame 0's t at sound_latent_fps. */
    int sound_T;
    const float *sound;      /* [sound_dim, sound_T] host floats (the noisy sound latents) */
    float *const *sound_vel; /* [nb] outputs, each [sound_dim, sound_T] host floats */
} c3_latent_geom;

/* One GEN forward: latents [C, T, h, w] (host floats, normalised space),
 * timestep t (an integer for UniPC, fractional for the fixed-step
 * sampler; scaled by timestep_scale in float32 as upstream), the branch's UND cache (its L sets the
 * GEN position offset). velocity: host floats [C, T, h, w]. */
int model_gen(c3_model *m, const c3_undkv *kv, const float *latents, const c3_latent_geom *g,
              double timestep, float *velocity);
/* nb (1 .. C3_GEN_MAX_BATCH) GEN forwards on the same latents and timestep, one per UND
 * cache kvs[b], as one batch: every matrix product runs once over all the
 * branches' tokens (the weights are read once), attention per branch.
 * velocity[b] as model_gen's. Only without Ulysses (model_batches). */
int model_gen_batch(c3_model *m, int nb, const c3_undkv *const *kvs, const float *latents,
                    const c3_latent_geom *g, double timestep, float *const *velocity);
/* A step cache's part in one GEN forward (stepcache.c drives it); entry b
 * belongs to the call's branch b. Probe: probe[0] non-NULL; only the first
 * block runs and probe[b] (host floats [S, D], this rank's rows; see
 * model_gen_rows) gets its residual, output - input; velocity is not
 * written. Reuse: the block stack is skipped, res[b] [S, D] added to its
 * input instead. Record (neither): the stack runs and res[b] = its output -
 * input (res[b] allocated on the rank's backend on first use; the caller
 * frees it with c3_free). Graph replay is used only when recording. */
typedef struct {
    float *probe[2];
    bool reuse;
    c3_tensor *res[2];
} c3_gen_cache;
int model_gen_cached(c3_model *m, int nb, const c3_undkv *const *kvs, const float *latents,
                     const c3_latent_geom *g, double timestep, float *const *velocity,
                     const c3_gen_cache *gc);
/* The most branches one GEN call batches: the CFG branches of up to 8
 * requests of a batch. */
#define C3_GEN_MAX_BATCH 16
/* The batch of several requests: nb GEN forwards (1 .. C3_GEN_MAX_BATCH)
 * at one timestep as one batch over nl latents (all of grid g): branch b
 * reads the UND cache kvs[b] and the latents lats[lat_of[b]] (lat_of NULL:
 * all read lats[0]; nl 1 is model_gen_cached). Each branch's rows are what
 * its own call would compute: the products run once over every branch's
 * tokens, attention per branch. Several latents only without Ulysses, sound
 * tokens or a step cache (gc NULL). */
int model_gen_multi(c3_model *m, int nb, const c3_undkv *const *kvs, int nl,
                    const float *const *lats, const int *lat_of, const c3_latent_geom *g,
                    double timestep, float *const *velocity, const c3_gen_cache *gc);

/* The GEN rows this rank holds for grid g (the sequence's Ulysses shard)
 * and the hidden size: a probe's [S, D]. */
void model_gen_rows(const c3_model *m, const c3_latent_geom *g, int64_t *S, int64_t *D);
/* Whether the CFG branches should run as one model_gen_batch: no Ulysses,
 * not turned off by model_batch(m, false) (the plan, when the doubled
 * activations do not fit) or COSMOS3_CFG_BATCH=0. */
bool model_batches(const c3_model *m);
void model_batch(c3_model *m, bool on);

/* Whether the transformer holds the sound heads (audio_proj_in/out,
 * audio_modality_embed); their width is model_config(m)->sound_dim. */
bool model_has_sound(const c3_model *m);

/* Debug taps for the golden tests (NULL = off): called with a name from
 * trace.safetensors ("layer_in.gen", "layers.und_q" with layer index, ...),
 * the layer (-1 for non-layer tensors) and the tensor. */
extern void (*model_trace_hook)(const char *name, int layer, const c3_tensor *t);

/* Position ids / RoPE tables, exposed for tests: the [3] (t, h, w) positions
 * of GEN token j of a grid, given the branch text length L. */
void model_gen_position(const c3_tconfig *c, int L, const c3_latent_geom *g, int64_t token,
                        double pos[3]);

#endif
