/* model_internal.h - what the transformer's files share: the weights, the
 * offload ring, the GEN graphs and struct c3_model itself.
 *
 *   model_load.c     checkpoint -> device tensors (TP slices, fused q/k/v and
 *                    gate/up, FP8 codes and scales), model_load / model_free
 *   model_offload.c  layerwise offload: host-resident layers streamed into a
 *                    ring of two device slots per tower
 *   model_graphs.c   the GEN layer loop recorded once and replayed
 *   model.c          the forward: UND tower, GEN tower, positions and RoPE */
#ifndef COSMOS3_MODEL_INTERNAL_H
#define COSMOS3_MODEL_INTERNAL_H

#include "model.h"

#include <string.h>

/* Link names with the module prefix; the files define them under the short names. */
#define tower_views model_tower_views
#define ring_init model_ring_init
#define ring_free model_ring_free
#define ring_begin model_ring_begin
#define tower_acquire model_tower_acquire
#define tower_release model_tower_release
#define ring_collect model_ring_collect
#define gg_free model_gg_free
#define gg_enabled model_gg_enabled
#define gg_buffers model_gg_buffers
#define gg_begin model_gg_begin
#define gg_end model_gg_end
#define gg_abort model_gg_abort
#define gen_acts_alloc model_gen_acts_alloc
#define gen_acts_free model_gen_acts_free

/* ------------------------------------------------------------------ types */

/* One tower's weights in one layer (UND or GEN); local (TP) slices. */
typedef struct {
    c3_tensor in_norm, post_norm; /* [D] */
    c3_tensor wqkv;               /* [(Hq_l + 2 Hkv_l) hd, D]: the q, k, v rows, one product */
    c3_tensor wq, wk, wv;         /* views of wqkv: [Hq_l*hd, D], [Hkv_l*hd, D] x2 */
    c3_tensor q_norm, k_norm;     /* [hd]; present when has_qk_norm */
    c3_tensor k_norm_gen;         /* [hd]; UND of Edge only */
    c3_tensor wo;                 /* [D, Hq_l*hd] */
    c3_tensor wgu;                /* [2 I_l, D] gate then up rows (SwiGLU), [I_l, D] up (ReLU^2) */
    c3_tensor gate, up;           /* views of wgu: [I_l, D] (gate absent for ReLU^2) */
    c3_tensor down;               /* [D, I_l] */
    bool has_qk_norm, has_k_norm_gen;
} tower_w;

typedef struct {
    tower_w und, gen;
} layer_w;

/* Every tensor of a tower that owns storage, in one order (absent ones have
 * no data); the views into wqkv and wgu are set by tower_views. */
#define TOWER_NT 9
static inline void tower_list(tower_w *w, c3_tensor *ts[TOWER_NT]) {
    c3_tensor *l[TOWER_NT] = {&w->in_norm,    &w->post_norm, &w->wqkv, &w->q_norm, &w->k_norm,
                              &w->k_norm_gen, &w->wo,        &w->wgu,  &w->down};
    memcpy(ts, l, sizeof l);
}

/* Layerwise offload: one tower's ring of two device slots. Layer l runs from
 * slot l % 2; its copy (copy queue) waits for `used` of that slot (the
 * compute queue finished layer l - 2) and signals `ready`. */
typedef struct {
    tower_w slot[2];
    void *ready[2], *used[2];
    void **t0, **t1; /* [layers] timing events around each layer's copy */
    bool *timed;     /* [layers] copy recorded and not yet counted */
    int64_t layer_bytes;
} tower_ring;

/* GEN RoPE tables of one (text length, latent grid, fps, token range): the
 * positions do not change between steps, so each branch's tables are
 * computed once per request and reused (a slot per text length of a batch,
 * twice over; a call never evicts a table it already uses). */
typedef struct {
    bool valid;
    int L;
    c3_latent_geom g;
    int64_t t0, S;
    c3_tensor cs, sn; /* [S, hd] */
    uint64_t used;    /* m->rope_tick when last handed out */
    uint64_t call;    /* m->rope_call that last handed it out */
} rope_cache;
/* Branches one GEN call batches: the CFG branches (cond, uncond) of up to
 * GEN_MAX_BATCH / 2 requests of a batch, each over its own latents. */
#define GEN_MAX_BATCH C3_GEN_MAX_BATCH
#define ROPE_CACHE_SLOTS (2 * GEN_MAX_BATCH)

/* Scratch for the MLP of one tower over n tokens. */
typedef struct {
    c3_tensor xn, tmp; /* [n, D]; tmp only with tp > 1 (the row-parallel partial sums) */
    c3_tensor gu, h;   /* [n, 2 I_l] (gate | up; [n, I_l] for ReLU^2), [n, I_l] */
} mlp_scratch;

/* The activations of one GEN call over nb branches of S tokens (n = nb S
 * rows): eager calls allocate them per call, graphs keep them (gg_buffers). */
typedef struct {
    c3_tensor lat, out;      /* latents [C, T, hp, p, wp, p]; velocities [nb, C, T, hp, p, wp, p] */
    c3_tensor x, qkv;        /* [n, D], [n, (Hq_l + 2 Hkv_l) hd] */
    c3_tensor q, a, k, v, y; /* [n, Hq_l, hd] x2, [n, Hkv_l, hd] x2, [n, P] */
    mlp_scratch s;
} gen_acts;

/* The GEN forward as replayable graphs (backends with graph ops, one rank
 * per branch, no offload, no tracing): the activations live in buffers kept
 * across calls, sized for one latent grid, so that the layer loop's ops can
 * be recorded once per (UND cache, RoPE tables, grid) and replayed after.
 * The first call with a key runs eagerly (cuBLAS choices, scratch growth),
 * the second records, the later ones replay. COSMOS3_GRAPHS=0 turns it off. */
#define GEN_GRAPH_SLOTS 4
typedef struct {
    int64_t T, hp, wp; /* the grid the buffers are for (0: none yet) */
    int nb;            /* and the branches batched in one call */
    gen_acts buf;
    struct {
        uint64_t key;
        int state; /* 0 free, 1 seen once (eager), 2 recorded */
        void *exec;
        uint64_t used;
    } slot[GEN_GRAPH_SLOTS];
    uint64_t tick;
    bool off; /* model_graphs(m, false) */
} gen_graphs;

struct c3_model {
    c3_backend *be;
    rope_cache rope[ROPE_CACHE_SLOTS];
    uint64_t rope_tick, rope_call;
    c3_tconfig c;
    c3_shard shard;
    int hq, hkv, inter; /* local (per TP rank) heads and MLP width */
    layer_w *lw;        /* [layers] */
    c3_tensor embed;    /* [V, D]; sparse checkpoints: [n + 1, D], the last row zero */
    int32_t *embed_map; /* sparse: token id -> row of embed (n for ids without a row); else NULL */
    int32_t *ids_buf;   /* sparse: the remapped ids of one prompt */
    int ids_cap;
    c3_tensor norm_gen;             /* [D] */
    c3_tensor proj_in;              /* [D, patch_dim] */
    c3_tensor proj_out, proj_out_b; /* [patch_dim, D], [patch_dim] */
    float *proj_in_b;               /* host [D] */
    /* timestep embedder, host fp32 */
    int te_in;            /* sinusoidal width (256) */
    float *te_w1, *te_b1; /* [D, te_in], [D] (host, freed once uploaded) */
    float *te_w2, *te_b2; /* [D, D], [D] */
    /* the timestep MLP and proj_in's bias on the device, F32 (spec: fp32) */
    c3_tensor te_w1d, te_b1d, te_w2d, te_b2d, proj_in_bd;
    float *inv_freq; /* [hd/2] */
    int *rope_axis;  /* [hd/2]: 0 = T, 1 = H, 2 = W */
    /* layerwise offload: lw[] holds host tensors (pinned, be == NULL) */
    bool offload, loading_host;
    tower_ring ring[2]; /* 0: UND, 1: GEN */
    gen_graphs gg;
    bool no_batch;           /* model_batch(m, false) */
    /* host staging of a GEN call's latents when h or w is odd (padded up,
     * cropped down): kept across calls, grown as needed. A fresh allocation
     * of a 720p latent's 34 MB page-faulted on every step (the velocity came
     * down at 2.7 GB/s against a warm copy's 14). */
    float *stage_up, *stage_down;
    size_t stage_up_n, stage_down_n; /* floats */
    bool fp8_any;            /* some layer weight is FP8 */
    bool gen_w8a8, und_w8a8; /* FP8 x FP8 products in the GEN / UND tower (else W8A16) */
    int64_t h2d_bytes;
    double h2d_seconds;
    /* joint sound (the checkpoint holds audio_proj_in): the sound tokens'
     * projections and modality embedding */
    bool has_sound;
    c3_tensor a_in, a_out, a_out_b; /* [D, sound_dim], [sound_dim, D], [sound_dim] */
    c3_tensor a_in_b, a_me;         /* F32 [D]: audio_proj_in.bias, audio_modality_embed */
};

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)) != C3_OK) goto done;                                                        \
    } while (0)

/* ------------------------------------------------------------ model_load.c */

/* The views of a tower's fused weights (wq, wk, wv in wqkv; gate, up in wgu). */
void tower_views(const c3_model *m, tower_w *w);

/* --------------------------------------------------------- model_offload.c */

/* The two slots of ring g shaped as proto's weights, and its events. */
int ring_init(c3_model *m, tower_ring *g, tower_w *proto);
void ring_free(c3_model *m, tower_ring *g);
/* Tower 0 is UND, 1 GEN. Without offload these return at once (acquire:
 * the resident weights). Start of a forward: nothing queued so far may be
 * overwritten by a copy; queues layer 0. */
int ring_begin(c3_model *m, int tower);
/* The weights of layer l, ready for the compute queue; queues layer l + 1. */
int tower_acquire(c3_model *m, int tower, int l, const tower_w **w);
/* The compute queue is done with layer l's slot after the work queued so far. */
int tower_release(c3_model *m, int tower, int l);
/* Add the finished copies' bytes and times to the totals. */
int ring_collect(c3_model *m, int tower);

/* ---------------------------------------------------------- model_graphs.c */

void gg_free(c3_model *m);
bool gg_enabled(const c3_model *m);
/* The buffers (m->gg.buf) for grid (T, hp, wp) and nb branches. */
int gg_buffers(c3_model *m, int64_t T, int64_t hp, int64_t wp, int nb);
/* Before the layer loop of a call on the buffers, whose RoPE tables are
 * cs[nb], sn[nb]: replays the recorded graph of its key (*replayed: skip
 * the loop), or on the key's second sight starts recording (*recording),
 * or on its first sees the loop run eagerly. *slot is the key's slot. */
int gg_begin(c3_model *m, int nb, const c3_undkv *const *kvs, const c3_tensor *cs,
             const c3_tensor *sn, int *slot, bool *recording, bool *replayed);
/* After the loop: ends a recording (then launches it), or marks the key seen. */
int gg_end(c3_model *m, int slot, bool *recording);
/* An error while recording: end it, drop the graph. */
void gg_abort(c3_model *m, int slot);

/* ---------------------------------------------------------------- model.c */

/* The activations of one GEN call (n rows: nb branches of T hp wp tokens). */
int gen_acts_alloc(c3_model *m, gen_acts *g, int64_t T, int64_t hp, int64_t wp, int nb, int64_t n);
void gen_acts_free(gen_acts *g);

#endif
