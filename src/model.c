/* model.c - the Cosmos3 MoT transformer (spec section 3) on the backend table.
 *
 * UND tower: embed ids, per layer pre-norm causal GQA attention with text RoPE
 * and a SwiGLU/ReLU^2 MLP; each layer's K (post-norm, post-RoPE; Edge: the
 * k_norm_und_for_gen form) and V are kept as the branch's cache.
 * GEN tower: patchify, proj_in + timestep embedding, per layer attention of
 * the GEN queries over [UND K/V | GEN K/V] with 3-D interleaved mRoPE, MLP,
 * final norm, proj_out, unpatchify.
 *
 * Every size comes from c3_tconfig and the safetensors headers. Tensor
 * parallelism: q/k/v, gate/up are split by output rows, to_out/down by input
 * columns (then all-reduced over shard.tp). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void (*model_trace_hook)(const char *name, int layer, const c3_tensor *t);

/* ------------------------------------------------------------------ types */

/* One tower's weights in one layer (UND or GEN); local (TP) slices. */
typedef struct {
    c3_tensor in_norm, post_norm;     /* [D] */
    c3_tensor wqkv;                   /* [(Hq_l + 2 Hkv_l) hd, D]: the q, k, v rows, one product */
    c3_tensor wq, wk, wv;             /* views of wqkv: [Hq_l*hd, D], [Hkv_l*hd, D] x2 */
    c3_tensor q_norm, k_norm;         /* [hd]; present when has_qk_norm */
    c3_tensor k_norm_gen;             /* [hd]; UND of Edge only */
    c3_tensor wo;                     /* [D, Hq_l*hd] */
    c3_tensor wgu;      /* [2 I_l, D] gate then up rows (SwiGLU), [I_l, D] up (ReLU^2) */
    c3_tensor gate, up; /* views of wgu: [I_l, D] (gate absent for ReLU^2) */
    c3_tensor down;     /* [D, I_l] */
    bool has_qk_norm, has_k_norm_gen;
} tower_w;

typedef struct {
    tower_w und, gen;
} layer_w;

/* Every tensor of a tower that owns storage, in one order (absent ones have
 * no data); the views into wqkv and wgu are set by tower_views. */
#define TOWER_NT 9
static void tower_list(tower_w *w, c3_tensor *ts[TOWER_NT]) {
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
 * positions do not change between steps, so each CFG branch's tables are
 * computed once per request and reused (two slots: cond and uncond). */
typedef struct {
    bool valid;
    int L;
    c3_latent_geom g;
    int64_t t0, S;
    c3_tensor cs, sn; /* [S, hd] */
} rope_cache;
/* Branches one GEN call batches (CFG: cond and uncond). */
#define GEN_MAX_BATCH 2
#define ROPE_CACHE_SLOTS GEN_MAX_BATCH

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
    int rope_next;
    c3_tconfig c;
    c3_shard shard;
    int hq, hkv, inter; /* local (per TP rank) heads and MLP width */
    layer_w *lw;        /* [layers] */
    c3_tensor embed;    /* [V, D]; sparse checkpoints: [n + 1, D], the last row zero */
    int32_t *embed_map; /* sparse: token id -> row of embed (n for ids without a row); else NULL */
    int32_t *ids_buf;   /* sparse: the remapped ids of one prompt */
    int ids_cap;
    c3_tensor norm_gen; /* [D] */
    c3_tensor proj_in;  /* [D, patch_dim] */
    c3_tensor proj_out, proj_out_b; /* [patch_dim, D], [patch_dim] */
    float *proj_in_b;   /* host [D] */
    /* timestep embedder, host fp32 */
    int te_in;                   /* sinusoidal width (256) */
    float *te_w1, *te_b1;        /* [D, te_in], [D] (host, freed once uploaded) */
    float *te_w2, *te_b2;        /* [D, D], [D] */
    /* the timestep MLP and proj_in's bias on the device, F32 (spec: fp32) */
    c3_tensor te_w1d, te_b1d, te_w2d, te_b2d, proj_in_bd;
    float *inv_freq;             /* [hd/2] */
    int *rope_axis;              /* [hd/2]: 0 = T, 1 = H, 2 = W */
    /* layerwise offload: lw[] holds host tensors (pinned, be == NULL) */
    bool offload, loading_host;
    tower_ring ring[2]; /* 0: UND, 1: GEN */
    gen_graphs gg;
    bool no_batch; /* model_batch(m, false) */
    bool fp8_any;  /* some layer weight is FP8 */
    bool gen_w8a8, und_w8a8; /* FP8 x FP8 products in the GEN / UND tower (else W8A16) */
    int64_t h2d_bytes;
    double h2d_seconds;
};

const c3_tconfig *model_config(const c3_model *m) { return &m->c; }

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)) != C3_OK) goto done;                                                        \
    } while (0)

static void trace(const char *name, int layer, const c3_tensor *t) {
    if (model_trace_hook) model_trace_hook(name, layer, t);
}

/* ------------------------------------------------------------------ load */

/* n elements of type st -> dt in host memory, rounding as the backend's
 * upload does (bf16/f16: round to nearest even), so offloaded weights are
 * bit-identical to resident ones. */
static void host_convert(void *dst, c3_dtype dt, const void *src, c3_dtype st, size_t n) {
    if (dt == st) {
        memcpy(dst, src, n * c3_dtype_size(dt));
        return;
    }
    enum { CHUNK = 4096 };
    float f[CHUNK];
    size_t ss = c3_dtype_size(st);
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t k = C3_MIN((size_t)CHUNK, n - off);
        c3_to_f32(f, (const char *)src + off * ss, st, k);
        for (size_t i = 0; i < k; i++) {
            if (dt == C3_F32) ((float *)dst)[off + i] = f[i];
            else if (dt == C3_BF16) ((uint16_t *)dst)[off + i] = c3_f32_to_bf16(f[i]);
            else ((uint16_t *)dst)[off + i] = c3_f32_to_f16(f[i]);
        }
    }
}

/* A weight that lives in pinned host memory (offload): no backend owns it. */
static int host_tensor(c3_model *m, c3_tensor *t, c3_dtype dt, int ndim, const int64_t *ne) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->ne[i] = ne[i];
    return m->be->host_alloc(m->be, &t->data, (size_t)c3_numel(t) * c3_dtype_size(t->dtype));
}

/* How a weight is split over TP ranks. */
typedef enum { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS } split_kind;

/* A weight's storage: pinned host memory while loading for offload, else the backend's. */
static int weight_alloc_dt(c3_model *m, c3_tensor *dst, c3_dtype dt, int ndim, const int64_t *ne) {
    if (m->loading_host) return host_tensor(m, dst, dt, ndim, ne);
    return m->be->alloc(m->be, dst, dt, ndim, ne, C3_MEM_WEIGHTS);
}

/* ------------------------------------------------------------ FP8 weights */

/* How a layer weight stored as t loads: 0 16-bit (an FP8 one dequantised),
 * 1 FP8 as stored, 2 quantised here (--precision fp8). */
static int fp8_mode(const c3_model *m, const st_tensor *t) {
    if (t->dtype == C3_F8E4M3) return m->shard.precision == C3_PREC_BF16 ? 0 : 1;
    return m->shard.precision == C3_PREC_FP8 &&
                   (t->dtype == C3_BF16 || t->dtype == C3_F16 || t->dtype == C3_F32)
               ? 2
               : 0;
}
/* Whether the backend keeps E4M3 codes (CUDA) or dequantised floats (CPU,
 * and the CUDA fp32 check path). */
static bool fp8_codes(const c3_model *m) {
    return m->be->weight_dtype != C3_F32;
}

/* A ModelOpt scale beside weight `name` ("....weight" -> "....weight_scale"
 * / "....input_scale"): one positive finite float, any float dtype. */
static int fp8_scale(const c3_ckpt *ck, const char *name, const char *which, bool need,
                     float *out) {
    char nm[300];
    size_t L = strlen(name);
    if (L > 7 && !strcmp(name + L - 7, ".weight")) L -= 7;
    snprintf(nm, sizeof nm, "%.*s.%s", (int)L, name, which);
    const st_tensor *t = ckpt_find(ck, nm);
    *out = 0;
    if (!t)
        return need ? c3_fail(C3_EMODEL, "transformer tensor %s: missing (an FP8 weight needs it)",
                              nm)
                    : C3_OK;
    if (st_numel(t) != 1 || (t->dtype != C3_F32 && t->dtype != C3_BF16 && t->dtype != C3_F16))
        return c3_fail(
            C3_EMODEL,
            "transformer tensor %s: expected one F32/BF16/F16 value (a per-tensor scale)", nm);
    c3_to_f32(out, t->data, t->dtype, 1);
    if (!(*out > 0) || !isfinite(*out))
        return c3_fail(C3_EMODEL, "transformer tensor %s: %g is not a positive scale", nm,
                       (double)*out);
    return C3_OK;
}

/* max |v| over a whole stored tensor (the per-tensor scale of --precision fp8). */
static float tensor_amax(const st_tensor *t) {
    enum { CHUNK = 4096 };
    float f[CHUNK], amax = 0;
    int64_t n = st_numel(t);
    size_t es = c3_dtype_size(t->dtype);
    for (int64_t off = 0; off < n; off += CHUNK) {
        int64_t k = C3_MIN((int64_t)CHUNK, n - off);
        c3_to_f32(f, (const char *)t->data + (size_t)off * es, t->dtype, (size_t)k);
        for (int64_t i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(f[i]));
    }
    return amax;
}

/* The views of a tower's fused weights (wq, wk, wv in wqkv; gate, up in wgu). */
static void tower_views(const c3_model *m, tower_w *w) {
    int64_t D = m->c.hidden, qr = (int64_t)m->hq * m->c.head_dim,
            kr = (int64_t)m->hkv * m->c.head_dim, I = m->inter;
    int64_t qne[] = {qr, D}, kne[] = {kr, D}, ine[] = {I, D};
    w->wq = c3_view(&w->wqkv, 0, 2, qne);
    w->wk = c3_view(&w->wqkv, qr * D, 2, kne);
    w->wv = c3_view(&w->wqkv, (qr + kr) * D, 2, kne);
    bool g = m->c.mlp_gated;
    if (g) w->gate = c3_view(&w->wgu, 0, 2, ine);
    w->up = c3_view(&w->wgu, g ? I * D : 0, 2, ine);
    /* FP8: each view carries its segment's scale */
    const c3_fp8 *a = &w->wqkv.fp8, *b = &w->wgu.fp8;
    c3_tensor *qkv[3] = {&w->wq, &w->wk, &w->wv}, *gu[2] = {&w->gate, &w->up};
    for (int i = 0; i < a->nseg && i < 3; i++)
        qkv[i]->fp8 = (c3_fp8){
            .nseg = 1, .rows = {qkv[i]->ne[0]}, .wscale = {a->wscale[i]}, .xscale = a->xscale};
    for (int i = 0; i < b->nseg && i < 2; i++)
        gu[i + (g ? 0 : 1)]->fp8 = (c3_fp8){.nseg = 1,
                                            .rows = {gu[i + (g ? 0 : 1)]->ne[0]},
                                            .wscale = {b->wscale[i]},
                                            .xscale = b->xscale};
}

/* The fused weight's segments from its parts' scales (all FP8 or none). */
static int fuse_fp8(c3_tensor *fused, const c3_fp8 *parts, const int64_t *rows, int n,
                    const char *what, int layer) {
    memset(&fused->fp8, 0, sizeof fused->fp8);
    int k = 0;
    for (int i = 0; i < n; i++)
        k += parts[i].nseg > 0;
    if (k == 0) return C3_OK;
    if (k != n)
        return c3_fail(C3_EMODEL,
                       "layer %d: the %s weights are partly FP8; all of them or none must be",
                       layer, what);
    fused->fp8.nseg = n;
    for (int i = 0; i < n; i++) {
        fused->fp8.rows[i] = rows[i];
        fused->fp8.wscale[i] = parts[i].wscale[0];
        /* one input for all parts: their calibrated scales agree; the largest covers them */
        fused->fp8.xscale = fmaxf(fused->fp8.xscale, parts[i].xscale);
    }
    for (int i = 0; i < n; i++) /* dynamic for one part: dynamic for all */
        if (parts[i].xscale == 0) fused->fp8.xscale = 0;
    return C3_OK;
}

/* Upload `name` (full shape ndim/shape; a -1 entry accepts any size and is
 * returned in shape) into dst, keeping only this rank's slice. dst is
 * allocated here, or is already a view of that slice's size (fused weights). */
static int load_weight(c3_model *m, const c3_ckpt *ck, c3_tensor *dst, const char *name, int ndim,
                       int64_t *shape, split_kind split, c3_fp8 *fp8);
static int load_tensor(c3_model *m, const c3_ckpt *ck, c3_tensor *dst, const char *name, int ndim,
                       int64_t *shape, split_kind split) {
    return load_weight(m, ck, dst, name, ndim, shape, split, NULL);
}

/* load_tensor for a layer weight: with fp8 non-NULL an FP8 weight (or one
 * --precision fp8 quantises) loads as E4M3 codes (CUDA) or dequantised
 * floats (CPU), and fp8 gets its scale (one segment). */
static int load_weight(c3_model *m, const c3_ckpt *ck, c3_tensor *dst, const char *name, int ndim,
                       int64_t *shape, split_kind split, c3_fp8 *fp8) {
    const st_tensor *t = ckpt_get(ck, NULL, name, ndim, shape);
    if (!t) return C3_EMODEL;
    int mode = fp8 ? fp8_mode(m, t) : 0;
    if (t->dtype == C3_F8E4M3 && !fp8)
        return c3_fail(C3_EMODEL,
                       "transformer tensor %s: F8_E4M3 where only layer weights may be FP8", name);
    float ws = 1, xs = 0;
    if (t->dtype == C3_F8E4M3) C3_TRY(fp8_scale(ck, name, "weight_scale", true, &ws));
    if (mode == 1) C3_TRY(fp8_scale(ck, name, "input_scale", false, &xs));
    if (mode == 2 && !m->be->meta) {
        float amax = tensor_amax(t);
        ws = amax > 0 ? amax / C3_E4M3_MAX : 1.0f;
    }
    bool codes = mode && fp8_codes(m);
    if (fp8) {
        memset(fp8, 0, sizeof *fp8);
        if (mode) *fp8 = (c3_fp8){.nseg = 1, .rows = {0}, .wscale = {ws}, .xscale = xs};
    }
    for (int i = 0; i < ndim; i++) shape[i] = t->shape[i];
    int tp = m->shard.tp_size, r = m->shard.tp_rank;
    int64_t ne[C3_MAX_DIMS];
    for (int i = 0; i < ndim; i++) ne[i] = shape[i];
    size_t es = c3_dtype_size(t->dtype);
    int sd = split == SPLIT_ROWS ? 0 : split == SPLIT_COLS ? 1 : -1;
    if (sd >= 0 && (ndim != 2 || shape[sd] % tp))
        return c3_fail(C3_EMODEL, "transformer tensor %s: dimension %d (%lld) does not split over tp %d", name, sd,
                       (long long)shape[sd], tp);
    if (sd >= 0) ne[sd] = shape[sd] / tp;
    int rc = C3_OK;
    if (!dst->data) {
        rc = weight_alloc_dt(m, dst, codes ? C3_F8E4M3 : m->be->weight_dtype, ndim, ne);
    } else if ((dst->dtype == C3_F8E4M3) != codes) {
        rc = c3_fail(C3_EMODEL, "transformer tensor %s: %s where the fused weight it joins is %s",
                     name, codes ? "FP8" : "16-bit", codes ? "16-bit" : "FP8");
    } else {
        int64_t n = 1;
        for (int i = 0; i < ndim; i++)
            n *= ne[i];
        if (n != c3_numel(dst))
            rc = c3_fail(
                C3_EMODEL,
                "transformer tensor %s: %lld elements where the fused weight has room for %lld",
                name, (long long)n, (long long)c3_numel(dst));
    }
    if (rc) return c3_context(rc, "loading %s", name);
    if (m->be->meta) return C3_OK; /* checked only: nothing to convert or slice */
    const void *src = t->data;
    char *buf = NULL;
    if (sd == 0 && tp > 1) {
        size_t row = (size_t)shape[1] * es;
        src = (const char *)t->data + (size_t)(r * ne[0]) * row;
    } else if (sd == 1 && tp > 1) {
        /* gather the column slice row by row from the mapping */
        size_t cols = (size_t)ne[1] * es, row = (size_t)shape[1] * es;
        buf = xmalloc((size_t)ne[0] * cols);
        for (int64_t i = 0; i < ne[0]; i++)
            memcpy(buf + (size_t)i * cols, (const char *)t->data + (size_t)i * row + (size_t)(r * ne[1]) * es, cols);
        src = buf;
    }
    c3_dtype sdt = t->dtype;
    void *conv = NULL;
    if (t->dtype == C3_F8E4M3 || mode) { /* codes or dequantised floats, this rank's slice */
        size_t n = (size_t)c3_numel(dst);
        conv = xmalloc(n * (codes ? 1 : sizeof(float)));
        enum { CHUNK = 4096 };
        float f[CHUNK];
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t k = C3_MIN((size_t)CHUNK, n - off);
            const char *sp = (const char *)src + off * es;
            if (t->dtype == C3_F8E4M3 && codes) {
                memcpy((uint8_t *)conv + off, sp, k);
                continue;
            }
            c3_to_f32(f, sp, t->dtype, k);
            for (size_t i = 0; i < k; i++) {
                if (t->dtype == C3_F8E4M3) /* f holds the codes' values */
                    ((float *)conv)[off + i] = f[i] * ws;
                else if (codes)
                    ((uint8_t *)conv)[off + i] = c3_f32_to_e4m3(f[i] / ws);
                else /* quantised, held dequantised */
                    ((float *)conv)[off + i] = c3_e4m3_to_f32(c3_f32_to_e4m3(f[i] / ws)) * ws;
            }
        }
        src = conv;
        sdt = codes ? C3_F8E4M3 : C3_F32;
    }
    if (m->loading_host)
        host_convert(dst->data, dst->dtype, src, sdt, (size_t)c3_numel(dst));
    else
        rc = m->be->upload(m->be, dst, src, sdt);
    free(conv);
    free(buf);
    if (rc) return c3_context(rc, "uploading %s", name);
    return C3_OK;
}

/* A whole tensor as host floats (shape checked). */
static int load_host(const c3_ckpt *ck, float **dst, const char *name, int ndim, int64_t *shape) {
    const st_tensor *t = ckpt_get(ck, NULL, name, ndim, shape);
    if (!t) return C3_EMODEL;
    for (int i = 0; i < ndim; i++) shape[i] = t->shape[i];
    *dst = st_to_f32(t);
    return C3_OK;
}

/* A sparse embedding (embed_tokens.rows [n, D] + embed_tokens.ids [n], the
 * shipped demo model's form): the n rows plus one zero row on the device,
 * and a host map from token id to row (ids without a row read the zero row:
 * exactly the dense table with zeros elsewhere). */
static int load_sparse_embed(c3_model *m, const c3_ckpt *ck) {
    const c3_tconfig *c = &m->c;
    int64_t D = c->hidden, sr[] = {-1, D}, si[] = {-1};
    const st_tensor *rows = ckpt_get(ck, NULL, "embed_tokens.rows", 2, sr);
    if (!rows) return C3_EMODEL;
    const st_tensor *ids = ckpt_get(ck, NULL, "embed_tokens.ids", 1, si);
    if (!ids) return C3_EMODEL;
    int64_t n = rows->shape[0];
    if (ids->shape[0] != n || n > c->vocab || (ids->dtype != C3_I32 && ids->dtype != C3_I64))
        return c3_fail(C3_EMODEL,
                       "transformer tensors embed_tokens.rows [%lld, %lld] and embed_tokens.ids "
                       "[%lld]: expected one "
                       "I32 or I64 token id per row, at most vocab_size (%d) rows",
                       (long long)n, (long long)D, (long long)ids->shape[0], c->vocab);
    m->embed_map = xmalloc(sizeof *m->embed_map * (size_t)c->vocab);
    for (int i = 0; i < c->vocab; i++)
        m->embed_map[i] = (int32_t)n;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids->dtype == C3_I32 ? ((const int32_t *)ids->data)[i]
                                          : ((const int64_t *)ids->data)[i];
        if (id < 0 || id >= c->vocab || m->embed_map[id] != n)
            return c3_fail(C3_EMODEL,
                           "transformer tensor embed_tokens.ids: id %lld at row %lld is %s",
                           (long long)id, (long long)i,
                           id < 0 || id >= c->vocab ? "outside the vocabulary" : "repeated");
        m->embed_map[id] = (int32_t)i;
    }
    size_t es = c3_dtype_size(rows->dtype), rb = (size_t)D * es;
    char *buf = xcalloc((size_t)(n + 1), rb); /* the rows, then the zero row */
    memcpy(buf, rows->data, (size_t)n * rb);
    int64_t ne[] = {n + 1, D};
    int rc = m->be->alloc(m->be, &m->embed, m->be->weight_dtype, 2, ne, C3_MEM_WEIGHTS);
    if (rc == C3_OK) rc = m->be->upload(m->be, &m->embed, buf, rows->dtype);
    free(buf);
    return rc ? c3_context(rc, "loading embed_tokens.rows") : C3_OK;
}

static int load_tower(c3_model *m, const c3_ckpt *ck, int l, bool gen, tower_w *w) {
    const c3_tconfig *c = &m->c;
    int64_t D = c->hidden, hd = c->head_dim;
    int64_t qw = (int64_t)c->heads * hd, kw = (int64_t)c->kv_heads * hd, I = c->inter;
    char nm[256];
    /* name parts that differ between the towers */
    const char *in_n = gen ? "input_layernorm_moe_gen" : "input_layernorm";
    const char *post_n = gen ? "post_attention_layernorm_moe_gen" : "post_attention_layernorm";
    const char *q_n = gen ? "add_q_proj" : "to_q", *k_n = gen ? "add_k_proj" : "to_k";
    const char *v_n = gen ? "add_v_proj" : "to_v", *o_n = gen ? "to_add_out" : "to_out";
    const char *qn_n = gen ? "norm_added_q" : "norm_q", *kn_n = gen ? "norm_added_k" : "norm_k";
    const char *mlp = gen ? "mlp_moe_gen" : "mlp";
#define LOAD(dst, split, nd, ...)                                                                  \
    do {                                                                                           \
        int64_t sh_[] = {__VA_ARGS__};                                                             \
        C3_TRY(load_tensor(m, ck, dst, nm, nd, sh_, split));                                       \
    } while (0)
#define LOADW(dst, f8, split, nd, ...)                                                             \
    do {                                                                                           \
        int64_t sh_[] = {__VA_ARGS__};                                                             \
        C3_TRY(load_weight(m, ck, dst, nm, nd, sh_, split, f8));                                   \
    } while (0)
    /* the fused storage first (E4M3 codes when its parts are FP8 on a backend
     * that keeps codes); q/k/v and gate/up load into its views */
    {
        int64_t qkv[] = {((int64_t)m->hq + 2 * m->hkv) * hd, D},
                gu[] = {(c->mlp_gated ? 2 : 1) * (int64_t)m->inter, D};
        snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, q_n);
        const st_tensor *tq = ckpt_find(ck, nm);
        snprintf(nm, sizeof nm, "layers.%d.%s.up_proj.weight", l, mlp);
        const st_tensor *tu = ckpt_find(ck, nm);
        c3_dtype dq = tq && fp8_mode(m, tq) && fp8_codes(m) ? C3_F8E4M3 : m->be->weight_dtype;
        c3_dtype du = tu && fp8_mode(m, tu) && fp8_codes(m) ? C3_F8E4M3 : m->be->weight_dtype;
        int rc = weight_alloc_dt(m, &w->wqkv, dq, 2, qkv);
        if (rc == C3_OK) rc = weight_alloc_dt(m, &w->wgu, du, 2, gu);
        if (rc)
            return c3_context(rc, "layer %d: allocating the fused q/k/v and gate/up weights", l);
        tower_views(m, w);
    }
    c3_fp8 f8[3], g8[2];
    snprintf(nm, sizeof nm, "layers.%d.%s.weight", l, in_n);
    LOAD(&w->in_norm, SPLIT_NONE, 1, D);
    snprintf(nm, sizeof nm, "layers.%d.%s.weight", l, post_n);
    LOAD(&w->post_norm, SPLIT_NONE, 1, D);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, q_n);
    LOADW(&w->wq, &f8[0], SPLIT_ROWS, 2, qw, D);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, k_n);
    LOADW(&w->wk, &f8[1], SPLIT_ROWS, 2, kw, D);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, v_n);
    LOADW(&w->wv, &f8[2], SPLIT_ROWS, 2, kw, D);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, o_n);
    c3_fp8 o8, d8;
    LOADW(&w->wo, &o8, SPLIT_COLS, 2, D, qw);
    w->wo.fp8 = o8;
    w->wo.fp8.rows[0] = w->wo.ne[0];
    w->has_qk_norm = gen || c->und_qk_norm;
    if (w->has_qk_norm) {
        snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, qn_n);
        LOAD(&w->q_norm, SPLIT_NONE, 1, hd);
        snprintf(nm, sizeof nm, "layers.%d.self_attn.%s.weight", l, kn_n);
        LOAD(&w->k_norm, SPLIT_NONE, 1, hd);
    }
    w->has_k_norm_gen = !gen && c->und_k_norm_for_gen;
    if (w->has_k_norm_gen) {
        snprintf(nm, sizeof nm, "layers.%d.self_attn.k_norm_und_for_gen.weight", l);
        if (!ckpt_find(ck, nm)) snprintf(nm, sizeof nm, "layers.%d.self_attn.k_norm_und_for_gen", l);
        LOAD(&w->k_norm_gen, SPLIT_NONE, 1, hd);
    }
    int ng = 0;
    if (c->mlp_gated) {
        snprintf(nm, sizeof nm, "layers.%d.%s.gate_proj.weight", l, mlp);
        LOADW(&w->gate, &g8[ng++], SPLIT_ROWS, 2, I, D);
    }
    snprintf(nm, sizeof nm, "layers.%d.%s.up_proj.weight", l, mlp);
    LOADW(&w->up, &g8[ng++], SPLIT_ROWS, 2, I, D);
    snprintf(nm, sizeof nm, "layers.%d.%s.down_proj.weight", l, mlp);
    LOADW(&w->down, &d8, SPLIT_COLS, 2, D, I);
    w->down.fp8 = d8;
    w->down.fp8.rows[0] = w->down.ne[0];
    const int64_t qkv_rows[3] = {w->wq.ne[0], w->wk.ne[0], w->wv.ne[0]},
                  gu_rows[2] = {w->up.ne[0], w->up.ne[0]};
    C3_TRY(fuse_fp8(&w->wqkv, f8, qkv_rows, 3, "q/k/v", l));
    C3_TRY(fuse_fp8(&w->wgu, g8, gu_rows, ng, "gate/up", l));
    tower_views(m, w);
    m->fp8_any |= w->wqkv.fp8.nseg || w->wgu.fp8.nseg || w->wo.fp8.nseg || w->down.fp8.nseg;
    return C3_OK;
}

static void free_tower(c3_model *m, tower_w *w) {
    c3_tensor *ts[TOWER_NT];
    tower_list(w, ts);
    for (int i = 0; i < TOWER_NT; i++) {
        if (m->offload && !ts[i]->be && ts[i]->data) m->be->host_free(m->be, ts[i]->data); /* pinned host */
        c3_free(ts[i]);
    }
}

/* ------------------------------------------------------ layerwise offload */

static int ring_init(c3_model *m, tower_ring *g, tower_w *proto) {
    c3_backend *be = m->be;
    c3_tensor *src[TOWER_NT];
    tower_list(proto, src);
    g->t0 = xcalloc((size_t)m->c.layers, sizeof(void *));
    g->t1 = xcalloc((size_t)m->c.layers, sizeof(void *));
    g->timed = xcalloc((size_t)m->c.layers, sizeof(bool));
    g->layer_bytes = 0;
    for (int i = 0; i < TOWER_NT; i++)
        if (src[i]->data) g->layer_bytes += c3_numel(src[i]) * (int64_t)c3_dtype_size(src[i]->dtype);
    for (int s = 0; s < 2; s++) {
        c3_tensor *dst[TOWER_NT];
        g->slot[s].has_qk_norm = proto->has_qk_norm;
        g->slot[s].has_k_norm_gen = proto->has_k_norm_gen;
        tower_list(&g->slot[s], dst);
        for (int i = 0; i < TOWER_NT; i++)
            if (src[i]->data) {
                C3_TRY(
                    be->alloc(be, dst[i], src[i]->dtype, src[i]->ndim, src[i]->ne, C3_MEM_WEIGHTS));
                dst[i]->fp8 = src[i]->fp8;
            }
        tower_views(m, &g->slot[s]);
        C3_TRY(be->event_new(be, &g->ready[s], false));
        C3_TRY(be->event_new(be, &g->used[s], false));
    }
    for (int l = 0; l < m->c.layers; l++) {
        C3_TRY(be->event_new(be, &g->t0[l], true));
        C3_TRY(be->event_new(be, &g->t1[l], true));
    }
    return C3_OK;
}

static void ring_free(c3_model *m, tower_ring *g) {
    c3_backend *be = m->be;
    for (int s = 0; s < 2; s++) /* copies still in flight finish before the slots go */
        if (g->ready[s]) (void)be->event_wait(be, g->ready[s], C3_Q_COMPUTE);
    (void)be->sync(be);
    for (int s = 0; s < 2; s++) {
        c3_tensor *ts[TOWER_NT];
        tower_list(&g->slot[s], ts);
        for (int i = 0; i < TOWER_NT; i++) c3_free(ts[i]);
        be->event_free(be, g->ready[s]);
        be->event_free(be, g->used[s]);
    }
    for (int l = 0; g->t0 && l < m->c.layers; l++) {
        be->event_free(be, g->t0[l]);
        be->event_free(be, g->t1[l]);
    }
    free(g->t0);
    free(g->t1);
    free(g->timed);
}

static tower_w *host_tower(c3_model *m, int tower, int l) { return tower ? &m->lw[l].gen : &m->lw[l].und; }

/* Queue the copy of layer l into its slot on the copy queue. */
static int ring_prefetch(c3_model *m, int tower, int l) {
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    int s = l % 2;
    c3_tensor *src[TOWER_NT], *dst[TOWER_NT];
    tower_list(host_tower(m, tower, l), src);
    tower_list(&g->slot[s], dst);
    C3_TRY(be->event_wait(be, g->used[s], C3_Q_COPY)); /* the slot's last layer is done */
    C3_TRY(be->event_record(be, g->t0[l], C3_Q_COPY));
    for (int i = 0; i < TOWER_NT; i++)
        if (src[i]->data) C3_TRY(be->upload_async(be, dst[i], src[i]->data));
    C3_TRY(be->event_record(be, g->t1[l], C3_Q_COPY));
    g->timed[l] = true;
    return be->event_record(be, g->ready[s], C3_Q_COPY);
}

/* Start of a forward: nothing queued so far may be overwritten by a copy. */
static int ring_begin(c3_model *m, int tower) {
    if (!m->offload) return C3_OK;
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    for (int s = 0; s < 2; s++) C3_TRY(be->event_record(be, g->used[s], C3_Q_COMPUTE));
    return ring_prefetch(m, tower, 0);
}

/* The weights of layer l, ready for the compute queue; queues layer l + 1. */
static int tower_acquire(c3_model *m, int tower, int l, const tower_w **w) {
    if (!m->offload) {
        *w = host_tower(m, tower, l);
        return C3_OK;
    }
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    C3_TRY(be->event_wait(be, g->ready[l % 2], C3_Q_COMPUTE));
    if (l + 1 < m->c.layers) C3_TRY(ring_prefetch(m, tower, l + 1));
    *w = &g->slot[l % 2];
    return C3_OK;
}

/* The compute queue is done with layer l's slot after the work queued so far. */
static int tower_release(c3_model *m, int tower, int l) {
    if (!m->offload) return C3_OK;
    return m->be->event_record(m->be, m->ring[tower].used[l % 2], C3_Q_COMPUTE);
}

/* Add the finished copies' bytes and times to the totals. */
static int ring_collect(c3_model *m, int tower) {
    if (!m->offload) return C3_OK;
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    for (int l = 0; l < m->c.layers; l++) {
        if (!g->timed[l]) continue;
        float ms = 0;
        C3_TRY(be->event_ms(be, g->t0[l], g->t1[l], &ms));
        g->timed[l] = false;
        m->h2d_bytes += g->layer_bytes;
        m->h2d_seconds += ms * 1e-3;
    }
    return C3_OK;
}

bool model_offloaded(const c3_model *m) { return m && m->offload; }

void model_graphs(c3_model *m, bool on) {
    m->gg.off = !on;
}

void model_fp8_gen_act(c3_model *m, bool w8a8) {
    m->gen_w8a8 = w8a8;
}
void model_fp8_und_act(c3_model *m, bool w8a8) {
    m->und_w8a8 = w8a8;
}
bool model_fp8(const c3_model *m) {
    return m && m->fp8_any;
}

bool model_fp8_step_w8a8(const c3_tconfig *c, int i, int n) {
    if (!c->fp8_policy || n <= 1) return true;
    bool first = i < c->fp8_first, last = i >= n - c->fp8_last;
    if (first && last) return !c->fp8_overlap_a16;
    return !(first || last);
}

void model_offload_stats(const c3_model *m, int64_t *bytes, double *seconds) {
    *bytes = m && m->offload ? m->h2d_bytes : 0;
    *seconds = m && m->offload ? m->h2d_seconds : 0;
}

static void mlp_free(mlp_scratch *s);
static void gg_free(c3_model *m);

void model_free(c3_model *m) {
    if (!m) return;
    gg_free(m);
    if (m->offload)
        for (int t = 0; t < 2; t++) ring_free(m, &m->ring[t]);
    if (m->lw)
        for (int l = 0; l < m->c.layers; l++) {
            free_tower(m, &m->lw[l].und);
            free_tower(m, &m->lw[l].gen);
        }
    free(m->lw);
    c3_free(&m->embed);
    free(m->embed_map);
    free(m->ids_buf);
    c3_free(&m->norm_gen);
    c3_free(&m->proj_in);
    c3_free(&m->proj_out);
    c3_free(&m->proj_out_b);
    free(m->proj_in_b);
    free(m->te_w1);
    free(m->te_b1);
    free(m->te_w2);
    free(m->te_b2);
    c3_free(&m->te_w1d);
    c3_free(&m->te_b1d);
    c3_free(&m->te_w2d);
    c3_free(&m->te_b2d);
    c3_free(&m->proj_in_bd);
    for (int i = 0; i < ROPE_CACHE_SLOTS; i++) {
        c3_free(&m->rope[i].cs);
        c3_free(&m->rope[i].sn);
    }
    free(m->inv_freq);
    free(m->rope_axis);
    free(m);
}

/* RoPE frequencies in fp32 as the reference computes them, and the axis of
 * each frequency under the interleaved mRoPE split: H for j % 3 == 1 below
 * 3 * mrope[1], W for j % 3 == 2 below 3 * mrope[2], T otherwise. */
static void rope_setup(c3_model *m) {
    int half = m->c.head_dim / 2;
    m->inv_freq = xmalloc(sizeof(float) * (size_t)half);
    m->rope_axis = xmalloc(sizeof(int) * (size_t)half);
    for (int j = 0; j < half; j++) {
        float e = (float)(2 * j) / (float)m->c.head_dim;
        float p = (float)pow(m->c.rope_theta, (double)e);
        m->inv_freq[j] = 1.0f / p;
        int a = 0;
        if (j % 3 == 1 && j < 3 * m->c.mrope[1]) a = 1;
        else if (j % 3 == 2 && j < 3 * m->c.mrope[2]) a = 2;
        m->rope_axis[j] = a;
    }
}

/* An F32 weight on the device, whatever the backend's weight type. */
static int upload_f32(c3_backend *be, c3_tensor *t, const float *src, int ndim, const int64_t *ne) {
    C3_TRY(be->alloc(be, t, C3_F32, ndim, ne, C3_MEM_WEIGHTS));
    return be->upload(be, t, src, C3_F32);
}

int model_load(c3_model **out, const c3_ckpt *ck, c3_backend *be, const c3_shard *shard) {
    *out = NULL;
    c3_shard one = {.tp_rank = 0, .tp_size = 1, .sp_rank = 0, .sp_size = 1};
    if (!shard) shard = &one;
    const c3_tconfig *c = &ck->t;
    int tp = shard->tp_size;
    if (tp < 1 || shard->tp_rank < 0 || shard->tp_rank >= tp)
        return c3_fail(C3_EUSAGE, "tensor parallel rank %d of %d is invalid", shard->tp_rank, tp);
    if (c->kv_heads % tp)
        return c3_fail(C3_EUSAGE, "tp %d does not divide the model's %d KV heads; use a tp that divides %d", tp,
                       c->kv_heads, c->kv_heads);
    if (c->inter % tp)
        return c3_fail(C3_EUSAGE, "tp %d does not divide the MLP width %d; use a tp that divides it", tp, c->inter);
    if (tp > 1 && (!shard->tp || !shard->tp->allreduce_sum))
        return c3_fail(C3_EFAIL, "tp %d needs a TP communicator (none was given)", tp);
    if (shard->sp_size > 1) {
        int hkv = c->kv_heads / tp;
        if (hkv % shard->sp_size)
            return c3_fail(C3_EUSAGE,
                           "ulysses %d does not divide the %d KV heads per tensor-parallel rank; lower --ulysses",
                           shard->sp_size, hkv);
        if (!shard->sp || !shard->sp->alltoall || !shard->sp->allgather_host)
            return c3_fail(C3_EFAIL, "ulysses %d needs a sequence-parallel communicator (none was given)",
                           shard->sp_size);
    }
    c3_model *m = xcalloc(1, sizeof *m);
    m->be = be;
    m->c = *c;
    m->shard = *shard;
    m->gen_w8a8 = m->und_w8a8 = true; /* FP8 x FP8 unless a step policy says W8A16 */
    if (m->shard.sp_size < 1) m->shard.sp_size = 1;
    m->hq = c->heads / tp;
    m->hkv = c->kv_heads / tp;
    m->inter = c->inter / tp;
    m->lw = xcalloc((size_t)c->layers, sizeof *m->lw);
    int rc = C3_OK;
    int64_t D = c->hidden, P = c->patch_dim;
    m->offload = shard->offload && be->host_alloc && be->host_free && be->event_new && be->event_free &&
                 be->event_record && be->event_wait && be->event_ms && be->upload_async;
    m->loading_host = m->offload;
    for (int l = 0; l < c->layers; l++) {
        TRY(load_tower(m, ck, l, false, &m->lw[l].und));
        TRY(load_tower(m, ck, l, true, &m->lw[l].gen));
    }
    m->loading_host = false;
    if (m->offload) {
        TRY(ring_init(m, &m->ring[0], &m->lw[0].und));
        TRY(ring_init(m, &m->ring[1], &m->lw[0].gen));
        TRY(be->sync(be)); /* the slots exist before the copy queue writes them */
    }
    if (ck->sparse_embed) {
        TRY(load_sparse_embed(m, ck));
    } else {
        int64_t s[] = {c->vocab, D};
        TRY(load_tensor(m, ck, &m->embed, "embed_tokens.weight", 2, s, SPLIT_NONE));
    }
    {
        int64_t s[] = {D};
        TRY(load_tensor(m, ck, &m->norm_gen, "norm_moe_gen.weight", 1, s, SPLIT_NONE));
    }
    {
        int64_t s[] = {D, P}, sb[] = {D};
        TRY(load_tensor(m, ck, &m->proj_in, "proj_in.weight", 2, s, SPLIT_NONE));
        TRY(load_host(ck, &m->proj_in_b, "proj_in.bias", 1, sb));
    }
    {
        int64_t s[] = {P, D}, sb[] = {P};
        TRY(load_tensor(m, ck, &m->proj_out, "proj_out.weight", 2, s, SPLIT_NONE));
        TRY(load_tensor(m, ck, &m->proj_out_b, "proj_out.bias", 1, sb, SPLIT_NONE));
    }
    {
        int64_t s1[] = {D, -1}, b[] = {D}, s2[] = {D, D};
        TRY(load_host(ck, &m->te_w1, "time_embedder.linear_1.weight", 2, s1));
        m->te_in = (int)s1[1];
        if (m->te_in <= 0 || m->te_in % 2) {
            rc = c3_fail(C3_EMODEL, "transformer tensor time_embedder.linear_1.weight: input width %d must be even",
                         m->te_in);
            goto done;
        }
        TRY(load_host(ck, &m->te_b1, "time_embedder.linear_1.bias", 1, b));
        TRY(load_host(ck, &m->te_w2, "time_embedder.linear_2.weight", 2, s2));
        TRY(load_host(ck, &m->te_b2, "time_embedder.linear_2.bias", 1, b));
        int64_t w1[] = {D, m->te_in}, w2[] = {D, D};
        TRY(upload_f32(be, &m->te_w1d, m->te_w1, 2, w1));
        TRY(upload_f32(be, &m->te_b1d, m->te_b1, 1, b));
        TRY(upload_f32(be, &m->te_w2d, m->te_w2, 2, w2));
        TRY(upload_f32(be, &m->te_b2d, m->te_b2, 1, b));
        TRY(upload_f32(be, &m->proj_in_bd, m->proj_in_b, 1, b));
        free(m->te_w1);
        free(m->te_b1);
        free(m->te_w2);
        free(m->te_b2);
        m->te_w1 = m->te_b1 = m->te_w2 = m->te_b2 = NULL;
    }
    rope_setup(m);
done:
    if (rc) {
        model_free(m);
        return rc;
    }
    *out = m;
    return C3_OK;
}

/* ------------------------------------------------------------ positions */

void model_gen_position(const c3_tconfig *c, int L, const c3_latent_geom *g, int64_t token,
                        double pos[3]) {
    int64_t hp = (g->h + c->patch - 1) / c->patch, wp = (g->w + c->patch - 1) / c->patch;
    int64_t f = token / (hp * wp), r = (token / wp) % hp, col = token % wp;
    int64_t o = (int64_t)L + c->temporal_margin;
    if (g->T > 1 && c->fps_modulation && g->fps > 0) {
        /* fp32, as the reference computes it: o + f * (base_fps / fps) */
        float ratio = (float)(c->base_fps / g->fps);
        float pt = (float)o + (float)f * ratio;
        pos[0] = pt;
    } else {
        pos[0] = (double)(o + f);
    }
    pos[1] = (double)r;
    pos[2] = (double)col;
}

/* cos/sin tables [n, hd] for positions pos[n][3] (fp32 angles). */
static void rope_tables(const c3_model *m, const double (*pos)[3], int64_t n, float *cs, float *sn) {
    int hd = m->c.head_dim, half = hd / 2;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            float p = (float)pos[i][m->rope_axis[j]];
            float ang = p * m->inv_freq[j];
            float cv = (float)cos((double)ang), sv = (float)sin((double)ang);
            cs[i * hd + j] = cs[i * hd + j + half] = cv;
            sn[i * hd + j] = sn[i * hd + j + half] = sv;
        }
}

/* Upload host floats into a new activation tensor. */
static int upload_new(c3_backend *be, c3_tensor *t, const float *src, c3_memcat cat, int ndim, const int64_t *ne) {
    C3_TRY(be->alloc(be, t, be->act_dtype, ndim, ne, cat));
    return be->upload(be, t, src, C3_F32);
}

/* cos/sin tables [n, hd] of the positions pos[n][3] (t, h, w), uploaded. */
static int upload_rope(c3_model *m, double (*pos)[3], int64_t n, c3_tensor *cs, c3_tensor *sn) {
    int64_t hd = m->c.head_dim;
    float *hc = xmalloc(sizeof(float) * (size_t)(n * hd)), *hs = xmalloc(sizeof(float) * (size_t)(n * hd));
    rope_tables(m, (const double(*)[3])pos, n, hc, hs);
    int64_t ne[] = {n, hd};
    int rc = upload_new(m->be, cs, hc, C3_MEM_ACT, 2, ne);
    if (!rc) rc = upload_new(m->be, sn, hs, C3_MEM_ACT, 2, ne);
    free(hc);
    free(hs);
    return rc;
}

static int check_cancel(const c3_model *m) {
    if (m->shard.cancel && *m->shard.cancel) return c3_fail(C3_ECANCEL, "cancelled");
    return C3_OK;
}

/* y = x . w^T (row-parallel under TP: all-reduce the partial sums). */
static int linear_rowpar(c3_model *m, c3_tensor *y, const c3_tensor *x, const c3_tensor *w) {
    c3_backend *be = m->be;
    if (m->shard.tp_size <= 1) return be->linear(be, y, x, w, NULL, false);
    if (y->dtype == C3_F32) {
        C3_TRY(be->linear(be, y, x, w, NULL, false));
        return m->shard.tp->allreduce_sum(m->shard.tp, y);
    }
    /* bf16 activations: the partial sums stay fp32 through the all-reduce and
     * are rounded once, as the one unsplit product would be */
    c3_tensor acc = {0};
    C3_TRY(be->alloc(be, &acc, C3_F32, y->ndim, y->ne, C3_MEM_ACT));
    int rc = be->linear(be, &acc, x, w, NULL, false);
    if (rc == C3_OK) rc = m->shard.tp->allreduce_sum(m->shard.tp, &acc);
    if (rc == C3_OK) rc = be->copy(be, y, &acc);
    c3_free(&acc);
    return rc;
}

static int mlp_alloc(c3_model *m, mlp_scratch *s, int64_t n) {
    c3_backend *be = m->be;
    int64_t D = m->c.hidden, I = m->inter;
    C3_TRY(c3_alloc(be, &s->xn, be->act_dtype, C3_MEM_ACT, 2, n, D));
    if (m->shard.tp_size > 1) C3_TRY(c3_alloc(be, &s->tmp, be->act_dtype, C3_MEM_ACT, 2, n, D));
    C3_TRY(c3_alloc(be, &s->gu, be->act_dtype, C3_MEM_ACT, 2, n, (m->c.mlp_gated ? 2 : 1) * I));
    C3_TRY(c3_alloc(be, &s->h, be->act_dtype, C3_MEM_ACT, 2, n, I));
    return C3_OK;
}
static void mlp_free(mlp_scratch *s) {
    c3_free(&s->xn);
    c3_free(&s->tmp);
    c3_free(&s->gu);
    c3_free(&s->h);
}

static int gen_acts_alloc(c3_model *m, gen_acts *g, int64_t T, int64_t hp, int64_t wp, int nb,
                          int64_t n) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    int64_t p = c->patch, D = c->hidden, hd = c->head_dim, C = c->latent_ch;
    c3_dtype at = be->act_dtype;
    C3_TRY(c3_alloc(be, &g->lat, at, C3_MEM_ACT, 6, C, T, hp, p, wp, p));
    C3_TRY(c3_alloc(be, &g->out, at, C3_MEM_ACT, 6, (int64_t)nb * C, T, hp, p, wp, p));
    C3_TRY(c3_alloc(be, &g->x, at, C3_MEM_ACT, 2, n, D));
    C3_TRY(c3_alloc(be, &g->qkv, at, C3_MEM_ACT, 2, n, ((int64_t)m->hq + 2 * m->hkv) * hd));
    C3_TRY(c3_alloc(be, &g->q, at, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    C3_TRY(c3_alloc(be, &g->a, at, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    C3_TRY(c3_alloc(be, &g->k, at, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    C3_TRY(c3_alloc(be, &g->v, at, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    C3_TRY(c3_alloc(be, &g->y, at, C3_MEM_ACT, 2, n, (int64_t)c->patch_dim));
    return mlp_alloc(m, &g->s, n);
}
static void gen_acts_free(gen_acts *g) {
    c3_tensor *t[] = {&g->lat, &g->out, &g->x, &g->qkv, &g->q, &g->a, &g->k, &g->v, &g->y};
    for (size_t i = 0; i < C3_ARRAY_LEN(t); i++)
        c3_free(t[i]);
    mlp_free(&g->s);
}

/* ------------------------------------------------------- GEN graphs */

static void gg_forget(c3_model *m) {
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        if (m->gg.slot[i].exec) m->be->graph_free(m->be, m->gg.slot[i].exec);
        memset(&m->gg.slot[i], 0, sizeof m->gg.slot[i]);
    }
}
static void gg_free(c3_model *m) {
    if (m->be && m->be->graph_free) gg_forget(m);
    gen_acts_free(&m->gg.buf);
    m->gg.T = m->gg.hp = m->gg.wp = 0;
    m->gg.nb = 0;
}
static bool gg_enabled(const c3_model *m) {
    const char *e = getenv("COSMOS3_GRAPHS");
    return m->be->graph_begin && m->be->graph_end && m->be->graph_launch && m->be->graph_free &&
           m->shard.sp_size <= 1 && m->shard.tp_size <= 1 && !m->offload && !model_trace_hook &&
           !m->gg.off && !(e && !strcmp(e, "0"));
}
/* The buffers for grid (T, hp, wp) and nb branches: kept when they fit it,
 * else remade (and every recorded graph, which names the old ones, forgotten). */
static int gg_buffers(c3_model *m, int64_t T, int64_t hp, int64_t wp, int nb) {
    gen_graphs *g = &m->gg;
    if (g->T == T && g->hp == hp && g->wp == wp && g->nb == nb) return C3_OK;
    gg_free(m);
    int rc = gen_acts_alloc(m, &g->buf, T, hp, wp, nb, nb * T * hp * wp);
    if (rc) {
        gen_acts_free(&g->buf);
        return rc;
    }
    g->T = T, g->hp = hp, g->wp = wp, g->nb = nb;
    return C3_OK;
}
/* The key of one GEN layer loop: every buffer it reads that is not the
 * model's own (each branch's UND cache of each layer and RoPE tables) and
 * their sizes. */
static uint64_t gg_key(int nb, const c3_undkv *const *kvs, const c3_tensor *cs,
                       const c3_tensor *sn) {
    uint64_t h = c3_fnv1a(&nb, sizeof nb, C3_FNV_INIT);
    for (int b = 0; b < nb; b++) {
        const c3_undkv *kv = kvs[b];
        for (int l = 0; l < kv->layers; l++) {
            h = c3_fnv1a(&kv->k[l].data, sizeof(void *), h);
            h = c3_fnv1a(&kv->v[l].data, sizeof(void *), h);
        }
        h = c3_fnv1a(&kv->L, sizeof kv->L, h);
        h = c3_fnv1a(&cs[b].data, sizeof(void *), h);
        h = c3_fnv1a(&sn[b].data, sizeof(void *), h);
        h = c3_fnv1a(cs[b].ne, sizeof cs[b].ne, h);
    }
    return h;
}
/* The slot of key: found, else the least recently used one, reset. */
static int gg_slot(c3_model *m, uint64_t key) {
    gen_graphs *g = &m->gg;
    int lru = 0;
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        if (g->slot[i].state && g->slot[i].key == key) {
            g->slot[i].used = ++g->tick;
            return i;
        }
        if (g->slot[i].used < g->slot[lru].used) lru = i;
    }
    if (g->slot[lru].exec) m->be->graph_free(m->be, g->slot[lru].exec);
    memset(&g->slot[lru], 0, sizeof g->slot[lru]);
    g->slot[lru].key = key;
    g->slot[lru].used = ++g->tick;
    return lru;
}

/* x += in . w^T: one accumulating product on one rank (the residual add in
 * the GEMM epilogue); with tp > 1 the row-parallel sum into tmp, then added. */
static int residual_linear(c3_model *m, c3_tensor *x, const c3_tensor *in, const c3_tensor *w,
                           c3_tensor *tmp) {
    if (m->shard.tp_size <= 1) return m->be->linear(m->be, x, in, w, NULL, true);
    C3_TRY(linear_rowpar(m, tmp, in, w));
    return m->be->add(m->be, x, tmp);
}

/* x += attn_out . wo^T ; x += MLP(RMS_post(x)). `a` is the attention output;
 * gate and up are one product (wgu), then the GLU. */
static int attn_out_and_mlp(c3_model *m, const tower_w *w, c3_tensor *x, const c3_tensor *a, mlp_scratch *s) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    C3_TRY(residual_linear(m, x, a, &w->wo, &s->tmp));
    C3_TRY(be->rmsnorm(be, &s->xn, x, &w->post_norm, c->hidden, c->eps, c->norm_mul_fp32));
    C3_TRY(be->linear(be, &s->gu, &s->xn, &w->wgu, NULL, false));
    C3_TRY(be->glu(be, &s->h, &s->gu, c->mlp_gated ? C3_ACT_SWIGLU : C3_ACT_RELU2));
    return residual_linear(m, x, &s->h, &w->down, &s->tmp);
}

/* ------------------------------------------------------------- UND tower */

void undkv_free(c3_undkv *kv) {
    if (!kv) return;
    if (kv->k)
        for (int l = 0; l < kv->layers; l++) c3_free(&kv->k[l]);
    if (kv->v)
        for (int l = 0; l < kv->layers; l++) c3_free(&kv->v[l]);
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

int model_und(c3_model *m, const int32_t *ids, int L, c3_undkv *kv) {
    memset(kv, 0, sizeof *kv);
    if (L <= 0) return c3_fail(C3_EINPUT, "the prompt has no tokens");
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    int64_t D = c->hidden, hd = c->head_dim, n = L;
    int rc = C3_OK;
    c3_tensor x = {0}, q = {0}, kr = {0}, a = {0}, cs = {0}, sn = {0};
    mlp_scratch s = {0};
    be->fp8_act = m->und_w8a8;
    kv->L = L;
    kv->layers = c->layers;
    kv->k = xcalloc((size_t)c->layers, sizeof *kv->k);
    kv->v = xcalloc((size_t)c->layers, sizeof *kv->v);

    /* text positions (n, n, n): the interleaved mRoPE reduces to 1-D */
    {
        double (*pos)[3] = xmalloc(sizeof *pos * (size_t)n);
        for (int64_t i = 0; i < n; i++) pos[i][0] = pos[i][1] = pos[i][2] = (double)i;
        rc = upload_rope(m, pos, n, &cs, &sn);
        free(pos);
        if (rc) goto done;
    }
    trace("rope.cos_und", -1, &cs);
    trace("rope.sin_und", -1, &sn);

    TRY(c3_alloc(be, &x, be->act_dtype, C3_MEM_ACT, 2, n, D));
    TRY(c3_alloc(be, &q, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    TRY(c3_alloc(be, &a, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    if (c->und_k_norm_for_gen) TRY(c3_alloc(be, &kr, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    TRY(mlp_alloc(m, &s, n));
    if (m->embed_map) { /* sparse embedding: token ids -> rows */
        if (L > m->ids_cap) {
            m->ids_buf = xrealloc(m->ids_buf, sizeof *m->ids_buf * (size_t)L);
            m->ids_cap = L;
        }
        for (int i = 0; i < L; i++)
            m->ids_buf[i] = ids[i] >= 0 && ids[i] < c->vocab ? m->embed_map[ids[i]]
                                                             : (int32_t)(m->embed.ne[0] - 1);
        ids = m->ids_buf;
    }
    TRY(be->embed(be, &x, &m->embed, ids, L));
    trace("layer_in.und", -1, &x);

    TRY(ring_begin(m, 0));
    for (int l = 0; l < c->layers; l++) {
        TRY(check_cancel(m));
        const tower_w *w;
        TRY(tower_acquire(m, 0, l, &w));
        c3_tensor *kc = &kv->k[l], *vc = &kv->v[l];
        TRY(c3_alloc(be, kc, be->act_dtype, C3_MEM_KV, 3, n, (int64_t)m->hkv, hd));
        TRY(c3_alloc(be, vc, be->act_dtype, C3_MEM_KV, 3, n, (int64_t)m->hkv, hd));
        /* k used by UND attention: the cache itself, or (Edge) a scratch */
        c3_tensor *k = c->und_k_norm_for_gen ? &kr : kc;
        TRY(be->rmsnorm(be, &s.xn, &x, &w->in_norm, (int)D, c->eps, c->norm_mul_fp32));
        TRY(be->linear(be, &q, &s.xn, &w->wq, NULL, false)); /* [n, Hq_l, hd] */
        TRY(be->linear(be, k, &s.xn, &w->wk, NULL, false));  /* [n, Hkv_l, hd] */
        TRY(be->linear(be, vc, &s.xn, &w->wv, NULL, false)); /* [n, Hkv_l, hd] */
        if (w->has_k_norm_gen) /* GEN sees RoPE(k_norm_und_for_gen(raw k)) */
            TRY(be->rmsnorm(be, kc, k, &w->k_norm_gen, (int)hd, c->eps, c->norm_mul_fp32));
        if (w->has_qk_norm) {
            TRY(be->rmsnorm(be, &q, &q, &w->q_norm, (int)hd, c->eps, c->norm_mul_fp32));
            TRY(be->rmsnorm(be, k, k, &w->k_norm, (int)hd, c->eps, c->norm_mul_fp32));
        }
        trace("layers.und_q_prerope", l, &q);
        trace("layers.und_k_prerope", l, k);
        TRY(be->rope(be, &q, &cs, &sn));
        TRY(be->rope(be, k, &cs, &sn));
        if (w->has_k_norm_gen) TRY(be->rope(be, kc, &cs, &sn));
        trace("layers.und_q", l, &q);
        trace("layers.und_k", l, kc);
        trace("layers.und_v", l, vc);
        /* the last layer's attention output and MLP feed nothing GEN reads */
        if (l == c->layers - 1 && !model_trace_hook) {
            TRY(tower_release(m, 0, l));
            break;
        }
        c3_kvseg seg = {k, vc, n, n};
        TRY(be->attention(be, &a, &q, &seg, 1, true, 1.0f / sqrtf((float)hd)));
        trace("layers.und_attn", l, &a);
        TRY(attn_out_and_mlp(m, w, &x, &a, &s));
        trace("layers.und_out", l, &x);
        TRY(tower_release(m, 0, l));
    }
    TRY(ring_collect(m, 0));
done:
    c3_free(&x);
    c3_free(&q);
    c3_free(&kr);
    c3_free(&a);
    c3_free(&cs);
    c3_free(&sn);
    mlp_free(&s);
    if (rc) undkv_free(kv);
    return rc;
}

/* ------------------------------------------------------------- GEN tower */

/* The timestep's sinusoidal features (fp32, cos first): s = t * timestep_scale
 * as upstream's float32 tensor times a Python float (both float32 operands;
 * t is fractional for the fixed-step sampler), f_k = exp(-ln(10000) k / half),
 * e = [cos(s f), sin(s f)]. The MLP runs on the device (time_embed). */
static void time_sinusoid(const c3_model *m, double timestep, float *e) {
    int half = m->te_in / 2;
    float s = (float)timestep * (float)m->c.timestep_scale;
    float lmax = (float)log(10000.0);
    for (int k = 0; k < half; k++) {
        float f = expf(-lmax * (float)k / (float)half);
        float arg = s * f;
        e[k] = (float)cos((double)arg);
        e[k + half] = (float)sin((double)arg);
    }
}

/* temb [1, D] (F32, on the device) = linear_2(SiLU(linear_1(e))). */
static int time_embed(c3_model *m, const float *e, c3_tensor *temb) {
    c3_backend *be = m->be;
    int64_t D = m->c.hidden;
    c3_tensor ed = {0}, h = {0};
    int64_t ne[] = {1, m->te_in};
    int rc = be->alloc(be, &ed, C3_F32, 2, ne, C3_MEM_ACT);
    if (!rc) rc = be->upload(be, &ed, e, C3_F32);
    if (!rc) rc = c3_alloc(be, &h, C3_F32, C3_MEM_ACT, 2, (int64_t)1, D);
    if (!rc) rc = be->linear(be, &h, &ed, &m->te_w1d, &m->te_b1d, false);
    if (!rc) rc = be->silu(be, &h, &h);
    if (!rc) rc = c3_alloc(be, temb, C3_F32, C3_MEM_ACT, 2, (int64_t)1, D);
    if (!rc) rc = be->linear(be, temb, &h, &m->te_w2d, &m->te_b2d, false);
    c3_free(&ed);
    c3_free(&h);
    return rc;
}

/* Trace a host [D]-vector broadcast to n rows (debug only). */
static void trace_rows(c3_backend *be, const char *name, const float *v, int64_t n, int64_t D) {
    if (!model_trace_hook) return;
    float *buf = xmalloc(sizeof(float) * (size_t)(n * D));
    for (int64_t i = 0; i < n; i++) memcpy(buf + i * D, v, sizeof(float) * (size_t)D);
    c3_tensor t = {0};
    int64_t ne[] = {n, D};
    if (upload_new(be, &t, buf, C3_MEM_ACT, 2, ne) == C3_OK) trace(name, -1, &t);
    c3_free(&t);
    free(buf);
}

/* Ulysses: local tokens x all local heads <-> all tokens x a slice of heads.
 * scatter: in [Sl, H, hd] -> out [S_pad, H/sp, hd] (tmp [sp, Sl, H/sp*hd]);
 * gather is the inverse. Token block j of the padded sequence lives on
 * sequence rank j; head slice j is computed by sequence rank j. */
static int ulysses_scatter(c3_model *m, c3_tensor *out, const c3_tensor *in, c3_tensor *tmp) {
    c3_backend *be = m->be;
    int sp = m->shard.sp_size;
    int64_t Sl = in->ne[0], H = in->ne[1], hd = in->ne[2];
    int64_t ne[3] = {Sl, sp, H / sp * hd};
    c3_tensor v = c3_view(in, 0, 3, ne);
    static const int perm[3] = {1, 0, 2};
    int64_t tne[3] = {sp, Sl, H / sp * hd};
    c3_tensor t = c3_view(tmp, 0, 3, tne);
    C3_TRY(be->permute(be, &t, &v, perm));                /* [sp, Sl, H/sp*hd] */
    return m->shard.sp->alltoall(m->shard.sp, out, &t); /* [sp * Sl, H/sp, hd] */
}

static int ulysses_gather(c3_model *m, c3_tensor *out, const c3_tensor *in, c3_tensor *tmp) {
    c3_backend *be = m->be;
    int sp = m->shard.sp_size;
    int64_t Sl = out->ne[0], H = out->ne[1], hd = out->ne[2];
    int64_t tne[3] = {sp, Sl, H / sp * hd};
    c3_tensor t = c3_view(tmp, 0, 3, tne);
    C3_TRY(m->shard.sp->alltoall(m->shard.sp, &t, in)); /* [sp(head slice), Sl, H/sp*hd] */
    static const int perm[3] = {1, 0, 2};
    int64_t one[3] = {Sl, sp, H / sp * hd};
    c3_tensor o = c3_view(out, 0, 3, one);
    return be->permute(be, &o, &t, perm);               /* [Sl, H, hd] */
}

/* Scratch for the Ulysses exchange of one GEN call. */
typedef struct {
    c3_tensor qh, kh, vh, ah;  /* [S_pad, H/sp, hd] */
    c3_tensor tmp;             /* [sp, Sl, Hq_l/sp*hd] (largest) */
    c3_tensor uk, uv, utmp;    /* UND head slice [L, Hkv_l/sp, hd], tmp [sp, L, Hkv_l/sp*hd] */
    int64_t S, S_pad;
} ulysses_scratch;

static void ulysses_free(ulysses_scratch *u) {
    c3_free(&u->qh);
    c3_free(&u->kh);
    c3_free(&u->vh);
    c3_free(&u->ah);
    c3_free(&u->tmp);
    c3_free(&u->uk);
    c3_free(&u->uv);
    c3_free(&u->utmp);
}

/* The GEN attention of layer l: q [S, Hq_l, hd] over [UND K/V | GEN K/V].
 * With Ulysses (sp > 1) q, k, v hold this rank's Sl tokens: they are swapped
 * to all S_pad tokens of H/sp heads, attention runs on the head slice with
 * the UND K/V head-sliced and the padded keys masked, and the output is
 * swapped back. */
static int gen_attention(c3_model *m, int l, const c3_undkv *kv, c3_tensor *out, const c3_tensor *q,
                         const c3_tensor *k, const c3_tensor *v, ulysses_scratch *u) {
    c3_backend *be = m->be;
    float scale = 1.0f / sqrtf((float)m->c.head_dim);
    int sp = m->shard.sp_size;
    if (sp <= 1) {
        int64_t S = q->ne[0];
        c3_kvseg seg[2] = {{&kv->k[l], &kv->v[l], kv->L, kv->L}, {k, v, S, S}};
        return be->attention(be, out, q, seg, 2, false, scale);
    }
    int r = m->shard.sp_rank;
    int64_t L = kv->L, hs = m->hkv / sp, hd = m->c.head_dim;
    /* this rank's head slice of the replicated UND K/V */
    static const int perm[3] = {1, 0, 2};
    int64_t vne[3] = {L, sp, hs * hd}, tne[3] = {sp, L, hs * hd}, sne[3] = {L, hs, hd};
    c3_tensor t = c3_view(&u->utmp, 0, 3, tne);
    c3_tensor src = c3_view(&kv->k[l], 0, 3, vne);
    C3_TRY(be->permute(be, &t, &src, perm));
    c3_tensor sl = c3_view(&t, (int64_t)r * L * hs * hd, 3, sne);
    C3_TRY(be->copy(be, &u->uk, &sl));
    src = c3_view(&kv->v[l], 0, 3, vne);
    C3_TRY(be->permute(be, &t, &src, perm));
    sl = c3_view(&t, (int64_t)r * L * hs * hd, 3, sne);
    C3_TRY(be->copy(be, &u->uv, &sl));
    /* sequence shards -> head shards */
    C3_TRY(ulysses_scatter(m, &u->qh, q, &u->tmp));
    C3_TRY(ulysses_scatter(m, &u->kh, k, &u->tmp));
    C3_TRY(ulysses_scatter(m, &u->vh, v, &u->tmp));
    c3_kvseg seg[2] = {{&u->uk, &u->uv, L, L}, {&u->kh, &u->vh, u->S_pad, u->S}};
    C3_TRY(be->attention(be, &u->ah, &u->qh, seg, 2, false, scale)); /* [S_pad, Hq_l/sp, hd] */
    return ulysses_gather(m, out, &u->ah, &u->tmp);
}

/* Trace [UND K|GEN K] concatenated, as the reference's attention receives it. */
static void trace_concat(c3_model *m, const char *name, int l, const c3_tensor *a, const c3_tensor *b) {
    if (!model_trace_hook) return;
    c3_backend *be = m->be;
    c3_tensor t = {0};
    if (c3_alloc(be, &t, be->act_dtype, C3_MEM_ACT, 3, a->ne[0] + b->ne[0], a->ne[1], a->ne[2]) != C3_OK) return;
    c3_tensor va = c3_view(&t, 0, 3, a->ne), vb = c3_view(&t, c3_numel(a), 3, b->ne);
    if (be->copy(be, &va, a) == C3_OK && be->copy(be, &vb, b) == C3_OK) trace(name, l, &t);
    c3_free(&t);
}

/* The RoPE tables of one branch's GEN tokens [t0, t0 + S) (views; the cache
 * owns them): found in rope_cache, else computed into the next slot. */
static int gen_rope(c3_model *m, int L, const c3_latent_geom *g, int64_t t0, int64_t S,
                    c3_tensor *cs, c3_tensor *sn) {
    rope_cache *hit = NULL;
    for (int i = 0; i < ROPE_CACHE_SLOTS && !hit; i++) {
        rope_cache *r = &m->rope[i];
        if (r->valid && r->L == L && r->t0 == t0 && r->S == S && r->g.T == g->T && r->g.h == g->h &&
            r->g.w == g->w && (g->T <= 1 || r->g.fps == g->fps))
            hit = r;
    }
    if (!hit) {
        hit = &m->rope[m->rope_next];
        m->rope_next = (m->rope_next + 1) % ROPE_CACHE_SLOTS;
        c3_free(&hit->cs);
        c3_free(&hit->sn);
        hit->valid = false;
        double(*pos)[3] = xmalloc(sizeof *pos * (size_t)S);
        for (int64_t i = 0; i < S; i++)
            model_gen_position(&m->c, L, g, t0 + i, pos[i]);
        int rc = upload_rope(m, pos, S, &hit->cs, &hit->sn);
        free(pos);
        C3_TRY(rc);
        *hit = (rope_cache){
            .valid = true, .L = L, .g = *g, .t0 = t0, .S = S, .cs = hit->cs, .sn = hit->sn};
    }
    *cs = c3_view(&hit->cs, 0, 2, hit->cs.ne);
    *sn = c3_view(&hit->sn, 0, 2, hit->sn.ne);
    return C3_OK;
}

bool model_batches(const c3_model *m) {
    const char *e = getenv("COSMOS3_CFG_BATCH");
    return m->shard.sp_size <= 1 && !m->no_batch && !(e && !strcmp(e, "0"));
}
void model_batch(c3_model *m, bool on) {
    m->no_batch = !on;
}

int model_gen(c3_model *m, const c3_undkv *kv, const float *latents, const c3_latent_geom *g,
              double timestep, float *velocity) {
    return model_gen_batch(m, 1, &kv, latents, g, timestep, &velocity);
}

int model_gen_batch(c3_model *m, int nb, const c3_undkv *const *kvs, const float *latents,
                    const c3_latent_geom *g, double timestep, float *const *velocity) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    be->fp8_act = m->gen_w8a8;
    if (nb < 1 || nb > GEN_MAX_BATCH)
        return c3_fail(C3_EFAIL, "GEN forward: %d branches (1 to %d)", nb, GEN_MAX_BATCH);
    for (int b = 0; b < nb; b++)
        if (!kvs[b] || kvs[b]->layers != c->layers || kvs[b]->L <= 0)
            return c3_fail(C3_EFAIL, "GEN forward: the UND cache does not belong to this model");
    if (g->T <= 0 || g->h <= 0 || g->w <= 0)
        return c3_fail(C3_EINPUT, "GEN forward: latent grid %dx%dx%d is empty", g->T, g->h, g->w);
    int64_t C = c->latent_ch, p = c->patch, P = c->patch_dim, D = c->hidden;
    int64_t T = g->T, h = g->h, w = g->w;
    int64_t hp = (h + p - 1) / p, wp = (w + p - 1) / p, S_all = T * hp * wp;
    /* Ulysses: this rank holds tokens [t0, t0 + S) of the sequence padded to S_pad */
    int sp = m->shard.sp_size > 1 ? m->shard.sp_size : 1;
    if (nb > 1 && sp > 1)
        return c3_fail(C3_EFAIL, "GEN forward: branches are batched only without Ulysses");
    int64_t S = (S_all + sp - 1) / sp, S_pad = S * sp, t0 = (int64_t)m->shard.sp_rank * S;
    if (sp == 1) t0 = 0;
    int64_t n = nb * S; /* rows: branch b holds [b S, (b + 1) S) */
    int rc = C3_OK;
    /* replayable layer loop (see gen_graphs): buffers kept across calls */
    bool graphs = sp == 1 && gg_enabled(m), recording = false;
    if (graphs) C3_TRY(gg_buffers(m, T, hp, wp, nb));
    gen_acts own = {0}, A = {0};                    /* A: views of the graph buffers, or of own */
    c3_tensor tok = {0}, tok_all = {0}, bias = {0}; /* tokens [S_pad, P]: this rank's [S, P] */
    c3_tensor cs[GEN_MAX_BATCH] = {{0}}, sn[GEN_MAX_BATCH] = {{0}};
    ulysses_scratch u = {.S = S_all, .S_pad = S_pad};
    float *host = NULL, *e = NULL, *temb = NULL, *all = NULL;
    if (!graphs) TRY(gen_acts_alloc(m, &own, T, hp, wp, nb, n));
    {
        const gen_acts *src = graphs ? &m->gg.buf : &own;
        c3_tensor *d[] = {&A.lat, &A.out, &A.x,    &A.qkv,   &A.q,    &A.a,  &A.k,
                          &A.v,   &A.y,   &A.s.xn, &A.s.tmp, &A.s.gu, &A.s.h};
        const c3_tensor *f[] = {&src->lat,   &src->out,  &src->x,  &src->qkv, &src->q,
                                &src->a,     &src->k,    &src->v,  &src->y,   &src->s.xn,
                                &src->s.tmp, &src->s.gu, &src->s.h};
        for (size_t i = 0; i < C3_ARRAY_LEN(d); i++)
            *d[i] = c3_view(f[i], 0, f[i]->ndim, f[i]->ne);
    }

    /* patchify on the device: latents [C, T, hp*p, wp*p] (zero-padded on the
     * host only when h or w is odd) seen as [C, T, hp, p, wp, p], permuted to
     * tokens [T, hp, wp, p, p, C] = [S_all, P] (feature (ph * p + pw) * C + ch) */
    {
        int64_t Hp = hp * p, Wp = wp * p;
        const float *src = latents;
        float *padded = NULL;
        if (Hp != h || Wp != w) {
            padded = xcalloc((size_t)(C * T * Hp * Wp), sizeof(float));
            for (int64_t ct = 0; ct < C * T; ct++)
                for (int64_t yy = 0; yy < h; yy++)
                    memcpy(padded + (ct * Hp + yy) * Wp, latents + (ct * h + yy) * w, sizeof(float) * (size_t)w);
            src = padded;
        }
        rc = be->upload(be, &A.lat, src, C3_F32);
        free(padded);
        if (rc) goto done;
        static const int to_tokens[6] = {1, 2, 4, 3, 5, 0};
        TRY(c3_alloc(be, &tok_all, be->act_dtype, C3_MEM_ACT, 2, S_pad, P));
        int64_t pne[] = {T, hp, wp, p, p, C};
        c3_tensor body = c3_view(&tok_all, 0, 6, pne);
        TRY(be->permute(be, &body, &A.lat, to_tokens));
        if (S_pad > S_all) { /* Ulysses padding rows: zeros */
            float *z = xcalloc((size_t)((S_pad - S_all) * P), sizeof(float));
            c3_tensor pad = c3_rows(&tok_all, S_all, S_pad - S_all);
            rc = be->upload(be, &pad, z, C3_F32);
            free(z);
            if (rc) goto done;
        }
        tok = c3_rows(&tok_all, t0, S); /* this rank's [S, P] (a view) */
    }
    /* host staging only where it is used: the Ulysses gather, or a crop of odd h / w */
    if (sp > 1) host = xcalloc((size_t)(S * P), sizeof(float));
    if (sp > 1 || hp * p != h || wp * p != w) all = xcalloc((size_t)(S_pad * P), sizeof(float));
    trace("gen.patchified_tokens", -1, &tok);

    /* GEN positions and RoPE tables (cached per branch: see rope_cache) */
    for (int b = 0; b < nb; b++)
        TRY(gen_rope(m, kvs[b]->L, g, t0, S, &cs[b], &sn[b]));
    trace("rope.cos_gen", -1, &cs[0]);
    trace("rope.sin_gen", -1, &sn[0]);

    /* x = proj_in(tok) + temb: the timestep embedding joins the bias; every
     * branch starts from the same rows */
    e = xmalloc(sizeof(float) * (size_t)m->te_in);
    time_sinusoid(m, timestep, e);
    TRY(time_embed(m, e, &bias)); /* [1, D] F32 */
    c3_tensor x0 = c3_rows(&A.x, 0, S);
    if (model_trace_hook) {
        temb = xmalloc(sizeof(float) * (size_t)D);
        TRY(be->download(be, temb, &bias));
        trace_rows(be, "gen.time_proj", e, S, m->te_in);
        trace_rows(be, "gen.time_embedder", temb, S, D);
        TRY(be->linear(be, &x0, &tok, &m->proj_in, &m->proj_in_bd, false));
        trace("gen.proj_in", -1, &x0);
    }
    TRY(be->add(be, &bias, &m->proj_in_bd)); /* temb + proj_in bias: one bias vector */
    if (!g->pinned) {
        TRY(be->linear(be, &x0, &tok, &m->proj_in, &bias, false)); /* [S, D] */
    } else { /* pinned frames' tokens without the timestep: runs of rows by frame */
        int64_t fs = hp * wp;
        for (int64_t r0 = 0, r1; r0 < S; r0 = r1) {
            int64_t j = t0 + r0;
            bool pin = j < S_all && g->pinned[j / fs];
            r1 = j < S_all ? C3_MIN(S, (j / fs + 1) * fs - t0) : S;
            c3_tensor xr = c3_rows(&x0, r0, r1 - r0), tr = c3_rows(&tok, r0, r1 - r0);
            TRY(be->linear(be, &xr, &tr, &m->proj_in, pin ? &m->proj_in_bd : &bias, false));
        }
    }
    for (int b = 1; b < nb; b++) {
        c3_tensor xb = c3_rows(&A.x, b * S, S);
        TRY(be->copy(be, &xb, &x0));
    }
    trace("layer_in.gen", -1, &A.x);

    if (sp > 1) {
        int64_t hq_s = m->hq / sp, hkv_s = m->hkv / sp, hd = c->head_dim, L = kvs[0]->L;
        TRY(c3_alloc(be, &u.qh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hq_s, hd));
        TRY(c3_alloc(be, &u.ah, be->act_dtype, C3_MEM_ACT, 3, S_pad, hq_s, hd));
        TRY(c3_alloc(be, &u.kh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hkv_s, hd));
        TRY(c3_alloc(be, &u.vh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hkv_s, hd));
        TRY(c3_alloc(be, &u.tmp, be->act_dtype, C3_MEM_ACT, 1, S * m->hq * hd));
        TRY(c3_alloc(be, &u.uk, be->act_dtype, C3_MEM_ACT, 3, L, hkv_s, hd));
        TRY(c3_alloc(be, &u.uv, be->act_dtype, C3_MEM_ACT, 3, L, hkv_s, hd));
        TRY(c3_alloc(be, &u.utmp, be->act_dtype, C3_MEM_ACT, 1, L * m->hkv * hd));
    }
    int slot = -1;
    if (graphs) { /* replay, record, or (first sight of this key) run eagerly */
        slot = gg_slot(m, gg_key(nb, kvs, cs, sn) ^ (m->gen_w8a8 ? 0x9e3779b97f4a7c15ull : 0));
        if (m->gg.slot[slot].state == 2) {
            TRY(be->graph_launch(be, m->gg.slot[slot].exec));
            goto layers_done;
        }
        if (m->gg.slot[slot].state == 1) {
            TRY(be->graph_begin(be));
            recording = true;
        }
    }
    TRY(ring_begin(m, 1));
    for (int l = 0; l < c->layers; l++) {
        TRY(check_cancel(m));
        const tower_w *wl;
        TRY(tower_acquire(m, 1, l, &wl));
        TRY(be->rmsnorm(be, &A.s.xn, &A.x, &wl->in_norm, (int)D, c->eps, c->norm_mul_fp32));
        TRY(be->linear(be, &A.qkv, &A.s.xn, &wl->wqkv, NULL, false)); /* [n, (Hq_l + 2 Hkv_l) hd] */
        const c3_tensor *qn = wl->has_qk_norm ? &wl->q_norm : NULL,
                        *kn = wl->has_qk_norm ? &wl->k_norm : NULL;
        for (int b = 0; b < nb; b++) {
            const c3_undkv *kv = kvs[b];
            if (kv->k[l].ne[0] != kv->L || kv->k[l].ne[1] != m->hkv) {
                rc = c3_fail(C3_EFAIL, "GEN forward: UND cache layer %d has the wrong shape", l);
                goto done;
            }
            c3_tensor qkv = c3_rows(&A.qkv, b * S, S), q = c3_rows(&A.q, b * S, S),
                      k = c3_rows(&A.k, b * S, S), v = c3_rows(&A.v, b * S, S),
                      a = c3_rows(&A.a, b * S, S);
            if (model_trace_hook) { /* the normalised q, k before the rotation */
                TRY(be->qkv_rope(be, &q, &k, &v, &qkv, qn, kn, NULL, NULL, c->eps,
                                 c->norm_mul_fp32));
                trace("layers.gen_q_prerope", l, &q);
                trace("layers.gen_k_prerope", l, &k);
            }
            TRY(be->qkv_rope(be, &q, &k, &v, &qkv, qn, kn, &cs[b], &sn[b], c->eps,
                             c->norm_mul_fp32));
            trace("layers.gen_q", l, &q);
            trace_concat(m, "layers.gen_k_all", l, &kv->k[l], &k);
            trace_concat(m, "layers.gen_v_all", l, &kv->v[l], &v);
            TRY(gen_attention(m, l, kv, &a, &q, &k, &v, &u));
        }
        trace("layers.gen_attn", l, &A.a);
        TRY(attn_out_and_mlp(m, wl, &A.x, &A.a, &A.s));
        trace("layers.gen_out", l, &A.x);
        TRY(tower_release(m, 1, l));
    }
    /* output: norm_moe_gen, proj_out + bias, unpatchify, crop */
    TRY(be->rmsnorm(be, &A.s.xn, &A.x, &m->norm_gen, (int)D, c->eps, c->norm_mul_fp32));
    trace("gen.final_norm", -1, &A.s.xn);
    TRY(be->linear(be, &A.y, &A.s.xn, &m->proj_out, &m->proj_out_b, false)); /* [n, P] */
    trace("gen.proj_out", -1, &A.y);
    TRY(ring_collect(m, 1));
    if (sp > 1) { /* gather the sequence shards, unpatchify on the host */
        TRY(be->download(be, host, &A.y));
        TRY(m->shard.sp->allgather_host(m->shard.sp, all, host, S * P)); /* [S_pad, P] */
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t f = 0; f < T; f++)
                for (int64_t yy = 0; yy < h; yy++)
                    for (int64_t xx = 0; xx < w; xx++) {
                        int64_t t = (f * hp + yy / p) * wp + xx / p;
                        int64_t feat = ((yy % p) * p + xx % p) * C + ch;
                        velocity[0][((ch * T + f) * h + yy) * w + xx] = all[t * P + feat];
                    }
    } else { /* unpatchify on the device: [T, hp, wp, p, p, C] -> [C, T, hp, p, wp, p], then crop */
        static const int to_latent[6] = {5, 0, 1, 3, 2, 4};
        int64_t yne[] = {T, hp, wp, p, p, C}, one = c3_numel(&A.lat);
        for (int b = 0; b < nb; b++) {
            c3_tensor yv = c3_view(&A.y, b * S * P, 6, yne),
                      ob = c3_view(&A.out, b * one, 6, A.lat.ne);
            TRY(be->permute(be, &ob, &yv, to_latent)); /* [C, T, hp, p, wp, p] */
        }
        if (recording) {
            void *exec = NULL;
            recording = false;
            TRY(be->graph_end(be, &exec));
            m->gg.slot[slot].exec = exec;
            m->gg.slot[slot].state = 2;
            TRY(be->graph_launch(be, exec));
        } else if (graphs) {
            m->gg.slot[slot].state = 1;
        }
    layers_done:;
        int64_t Hp = hp * p, Wp = wp * p;
        for (int b = 0; b < nb; b++) {
            c3_tensor ob = c3_view(&A.out, b * c3_numel(&A.lat), 6, A.lat.ne);
            if (Hp == h && Wp == w) {
                TRY(be->download(be, velocity[b], &ob));
            } else {
                TRY(be->download(be, all, &ob)); /* [C, T, Hp, Wp] (S_pad * P floats) */
                for (int64_t ct = 0; ct < C * T; ct++)
                    for (int64_t yy = 0; yy < h; yy++)
                        memcpy(velocity[b] + (ct * h + yy) * w, all + (ct * Hp + yy) * Wp,
                               sizeof(float) * (size_t)w);
            }
        }
    }
    if (g->pinned) /* the pinned frames' velocity is zero (upstream predicts noisy frames only) */
        for (int b = 0; b < nb; b++)
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t f = 0; f < T; f++)
                    if (g->pinned[f])
                        memset(velocity[b] + (ch * T + f) * h * w, 0,
                               sizeof(float) * (size_t)(h * w));
done:
    if (recording) { /* an error while recording: end it, drop the graph */
        void *exec = NULL;
        (void)be->graph_end(be, &exec);
        if (exec) be->graph_free(be, exec);
        m->gg.slot[slot].state = 0;
    }
    gen_acts_free(&own);
    c3_free(&tok_all);
    c3_free(&bias);
    ulysses_free(&u);
    free(host);
    free(all);
    free(e);
    free(temb);
    return rc;
}
