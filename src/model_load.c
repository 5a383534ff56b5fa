/* model_load.c - the transformer's weights from the checkpoint (spec section 3).
 *
 * Every layer weight is read from the mapping as this rank's slice (tensor
 * parallelism: q/k/v and gate/up split by output rows, to_out and down by
 * input columns); q/k/v and gate/up land in one fused tensor each. FP8:
 * ModelOpt E4M3 weights keep their codes and per-tensor scales (or are
 * dequantised for --precision bf16), bf16 ones are quantised for --precision
 * fp8. With offload the layers load into pinned host memory and the ring
 * (model_offload.c) is made. model_free releases everything. */
#include "env.h"
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ load */

/* ------------------------------------------------------ pinned staging
 *
 * By default (COSMOS3_PINNED_LOAD=0: off) a weight that needs no conversion (bf16 stored,
 * bf16 on the device; FP8 codes) goes to the device through a ring of
 * pinned buffers instead of one pageable copy from the mapping: the host
 * fills a buffer from the mapping (on the OpenMP threads) while the copy
 * queue sends the previous ones; a buffer is refilled only after its copy
 * ended (a timing event pair, waited on the host). The copy queue first
 * waits for the compute queue (the weight's stream-ordered allocation),
 * and model_load waits for every copy before it returns. The bytes are
 * the same as the plain upload's. COSMOS3_PINNED_SLOT_BYTES sets the
 * buffer size (tests: small buffers, many turns of the ring). */
#define PIN_SLOTS 4
#define PIN_SLOT_BYTES ((size_t)64 << 20)

typedef struct {
    c3_backend *be;
    size_t slot_bytes;
    void *buf[PIN_SLOTS];
    void *ev0[PIN_SLOTS], *ev1[PIN_SLOTS]; /* around each slot's last copy */
    bool busy[PIN_SLOTS];
    void *order; /* compute -> copy, and copy -> compute at the end */
    int next;
} pin_stage;

static bool pin_wanted(const c3_backend *be, const c3_shard *sh) {
    /* on by default: the Nano 30 GB upload 4.9 -> 1.1 s on an H200, the
       same picture bit for bit (bench/HISTORY.md, session 8) */
    return c3_env()->pinned_load && !be->meta && !sh->offload &&
           c3_has(be, C3_CAP_PINNED | C3_CAP_ASYNC_UPLOAD | C3_CAP_EVENTS);
}

/* Wait for every slot's copy, then order the compute queue after them. */
static int pin_drain(pin_stage *ps) {
    c3_backend *be = ps->be;
    for (int i = 0; i < PIN_SLOTS; i++) {
        if (!ps->busy[i]) continue;
        float ms;
        C3_TRY(be->event_ms(be, ps->ev0[i], ps->ev1[i], &ms));
        ps->busy[i] = false;
    }
    C3_TRY(be->event_record(be, ps->order, C3_Q_COPY));
    return be->event_wait(be, ps->order, C3_Q_COMPUTE);
}

static void pin_free(pin_stage *ps) {
    if (!ps) return;
    c3_backend *be = ps->be;
    for (int i = 0; i < PIN_SLOTS; i++) {
        if (ps->buf[i]) be->host_free(be, ps->buf[i]);
        if (ps->ev0[i]) be->event_free(be, ps->ev0[i]);
        if (ps->ev1[i]) be->event_free(be, ps->ev1[i]);
    }
    if (ps->order) be->event_free(be, ps->order);
    free(ps);
}

static int pin_new(c3_backend *be, pin_stage **out) {
    pin_stage *ps = xcalloc(1, sizeof *ps);
    ps->be = be;
    int64_t sb = c3_env()->pinned_slot_bytes;
    ps->slot_bytes = sb ? (size_t)sb : PIN_SLOT_BYTES;
    int rc = be->event_new(be, &ps->order, false);
    for (int i = 0; rc == C3_OK && i < PIN_SLOTS; i++) {
        rc = be->host_alloc(be, &ps->buf[i], ps->slot_bytes);
        if (rc == C3_OK) rc = be->event_new(be, &ps->ev0[i], true);
        if (rc == C3_OK) rc = be->event_new(be, &ps->ev1[i], true);
    }
    if (rc) {
        pin_free(ps);
        return rc;
    }
    *out = ps;
    return C3_OK;
}

/* dst (contiguous, allocated) = the n bytes at src, dst->dtype already. */
static int pin_upload(pin_stage *ps, c3_tensor *dst, const void *src) {
    c3_backend *be = ps->be;
    size_t es = c3_dtype_size(dst->dtype);
    int64_t n = c3_numel(dst), per = (int64_t)(ps->slot_bytes / es);
    C3_TRY(be->event_record(be, ps->order, C3_Q_COMPUTE)); /* dst's allocation first */
    C3_TRY(be->event_wait(be, ps->order, C3_Q_COPY));
    for (int64_t off = 0; off < n; off += per) {
        int64_t k = C3_MIN(per, n - off);
        int sl = ps->next;
        ps->next = (sl + 1) % PIN_SLOTS;
        if (ps->busy[sl]) { /* its last copy has to end before it is refilled */
            float ms;
            C3_TRY(be->event_ms(be, ps->ev0[sl], ps->ev1[sl], &ms));
            ps->busy[sl] = false;
        }
        const char *from = (const char *)src + (size_t)off * es;
        char *to = ps->buf[sl];
        size_t bytes = (size_t)k * es, piece = (size_t)1 << 20;
        int64_t np = (int64_t)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static) if (np > 4)
        for (int64_t q = 0; q < np; q++) {
            size_t o = (size_t)q * piece;
            memcpy(to + o, from + o, C3_MIN(piece, bytes - o));
        }
        c3_tensor part = c3_view(dst, off, 1, &k);
        C3_TRY(be->event_record(be, ps->ev0[sl], C3_Q_COPY));
        C3_TRY(be->upload_async(be, &part, to));
        C3_TRY(be->event_record(be, ps->ev1[sl], C3_Q_COPY));
        ps->busy[sl] = true;
    }
    return C3_OK;
}

/* The ring of the model_load in flight on this thread (one per rank thread). */
static _Thread_local pin_stage *t_pin;

/* The CPU backend's upload is a conversion on the host (c3_to_f32 into its
 * F32 tensors), safe to run on disjoint slices at once: a large weight
 * converts in slices on the OpenMP threads (the same floats). Other
 * backends upload on one queue from one thread. */
#define CPU_SLICE ((int64_t)1 << 18)
static int upload_weight(c3_model *m, c3_tensor *dst, const void *src, c3_dtype sdt) {
    int64_t n = c3_numel(dst);
    if (strcmp(m->be->name, "cpu") != 0 || n < 4 * CPU_SLICE)
        return m->be->upload(m->be, dst, src, sdt);
    int64_t ns = (n + CPU_SLICE - 1) / CPU_SLICE;
    size_t ss = c3_dtype_size(sdt);
    int rc = C3_OK;
#pragma omp parallel for schedule(static) reduction(max : rc)
    for (int64_t q = 0; q < ns; q++) {
        int64_t off = q * CPU_SLICE, k = C3_MIN(CPU_SLICE, n - off);
        c3_tensor part = c3_view(dst, off, 1, &k);
        int r = m->be->upload(m->be, &part, (const char *)src + (size_t)off * ss, sdt);
        rc = C3_MAX(rc, r); /* the CPU upload does not fail; any code would be kept */
    }
    return rc;
}

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
            if (dt == C3_F32)
                ((float *)dst)[off + i] = f[i];
            else if (dt == C3_BF16)
                ((uint16_t *)dst)[off + i] = c3_f32_to_bf16(f[i]);
            else
                ((uint16_t *)dst)[off + i] = c3_f32_to_f16(f[i]);
        }
    }
}

/* A weight that lives in pinned host memory (offload): no backend owns it. */
static int host_tensor(c3_model *m, c3_tensor *t, c3_dtype dt, int ndim, const int64_t *ne) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->ne[i] = ne[i];
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
    float amax = 0;
    int64_t n = st_numel(t);
    size_t es = c3_dtype_size(t->dtype);
#pragma omp parallel for schedule(static) reduction(max : amax) if (n > (1 << 20))
    for (int64_t off = 0; off < n; off += CHUNK) {
        float f[CHUNK];
        int64_t k = C3_MIN((int64_t)CHUNK, n - off);
        c3_to_f32(f, (const char *)t->data + (size_t)off * es, t->dtype, (size_t)k);
        for (int64_t i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(f[i]));
    }
    return amax;
}

/* A weight of transformer/random.json's buffer (checkpoint_random.h) going to
 * a backend that makes those weights itself (fill_random: CUDA): the element
 * offset of src in the buffer, so that dst is made where it lands, the bits
 * the upload would give, with no host copy and no transfer (Super: 125 GB);
 * -1 for anything else (stored weights, a gathered column slice, a host
 * conversion, a backend without it). */
static int64_t random_at(const c3_model *m, const c3_ckpt *ck, const void *src, c3_dtype sdt,
                         const c3_tensor *dst) {
    if (!ck->random || m->loading_host || m->be->meta || sdt != C3_BF16 ||
        !c3_has(m->be, C3_CAP_RANDOM) || (dst->dtype != C3_BF16 && dst->dtype != C3_F32))
        return -1;
    uintptr_t p = (uintptr_t)src, b0 = (uintptr_t)ck->random_buf;
    if (p < b0 || (p - b0) % sizeof *ck->random_buf) return -1;
    int64_t off = (int64_t)((p - b0) / sizeof *ck->random_buf);
    return off + c3_numel(dst) <= ck->random_n ? off : -1;
}

/* --precision fp8 on a backend with quantize_e4m3 (CUDA): this rank's bf16
 * slice src uploaded as stored (or made there: random_at) into a temporary
 * and quantised there into dst's codes: the codes and scale the host loop of
 * load_weight gives (*ws > 0: that scale, the whole tensor's; 0: the slice's
 * max / 448, returned). */
static int quantize_on_device(c3_model *m, const c3_ckpt *ck, c3_tensor *dst, const void *src,
                              float *ws) {
    c3_tensor tmp;
    int rc = m->be->alloc(m->be, &tmp, C3_BF16, dst->ndim, dst->ne, C3_MEM_ACT);
    if (rc) return rc;
    int64_t roff = random_at(m, ck, src, C3_BF16, &tmp);
    rc = roff >= 0 ? m->be->fill_random(m->be, &tmp, roff, (float)ck->random_amp)
                   : m->be->upload(m->be, &tmp, src, C3_BF16);
    if (rc == C3_OK) rc = m->be->quantize_e4m3(m->be, dst, &tmp, ws);
    m->be->free(m->be, &tmp);
    return rc;
}

/* The views of a tower's fused weights (wq, wk, wv in wqkv; gate, up in wgu). */
void tower_views(const c3_model *m, tower_w *w) {
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
    bool codes = mode && fp8_codes(m);
    /* --precision fp8 quantised on the device where the backend can (a bf16
     * weight loading resident): the slice's own max there for tp 1, the
     * whole tensor's from the host for a TP slice; else on the host below */
    bool dev_q = mode == 2 && codes && !m->loading_host && !m->be->meta &&
                 c3_has(m->be, C3_CAP_FP8) && t->dtype == C3_BF16;
    if (mode == 2 && !m->be->meta && (!dev_q || (m->shard.tp_size > 1 && split != SPLIT_NONE))) {
        float amax = tensor_amax(t);
        ws = amax > 0 ? amax / C3_E4M3_MAX : 1.0f;
    } else if (dev_q) {
        ws = 0; /* the device's */
    }
    if (fp8) {
        memset(fp8, 0, sizeof *fp8);
        if (mode) *fp8 = (c3_fp8){.nseg = 1, .rows = {0}, .wscale = {ws}, .xscale = xs};
    }
    for (int i = 0; i < ndim; i++)
        shape[i] = t->shape[i];
    int tp = m->shard.tp_size, r = m->shard.tp_rank;
    int64_t ne[C3_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        ne[i] = shape[i];
    size_t es = c3_dtype_size(t->dtype);
    int sd = split == SPLIT_ROWS ? 0 : split == SPLIT_COLS ? 1 : -1;
    if (sd >= 0 && (ndim != 2 || shape[sd] % tp))
        return c3_fail(C3_EMODEL,
                       "transformer tensor %s: dimension %d (%lld) does not split over tp %d", name,
                       sd, (long long)shape[sd], tp);
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
            memcpy(buf + (size_t)i * cols,
                   (const char *)t->data + (size_t)i * row + (size_t)(r * ne[1]) * es, cols);
        src = buf;
    }
    c3_dtype sdt = t->dtype;
    void *conv = NULL;
    if (dev_q) {
        rc = quantize_on_device(m, ck, dst, src, &ws);
        if (fp8) fp8->wscale[0] = ws;
        free(buf);
        return rc ? c3_context(rc, "quantising %s", name) : C3_OK;
    }
    if (t->dtype == C3_F8E4M3 || mode) { /* codes or dequantised floats, this rank's slice */
        size_t n = (size_t)c3_numel(dst);
        conv = xmalloc(n * (codes ? 1 : sizeof(float)));
        enum { CHUNK = 4096 };
        /* chunks in parallel: --precision fp8 quantises every layer weight here */
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (size_t off = 0; off < n; off += CHUNK) {
            float f[CHUNK];
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
    int64_t roff = random_at(m, ck, src, sdt, dst);
    if (m->loading_host)
        host_convert(dst->data, dst->dtype, src, sdt, (size_t)c3_numel(dst));
    else if (roff >= 0)
        rc = m->be->fill_random(m->be, dst, roff, (float)ck->random_amp);
    else if (t_pin && sdt == dst->dtype)
        rc = pin_upload(t_pin, dst, src);
    else
        rc = upload_weight(m, dst, src, sdt);
    free(conv);
    free(buf);
    if (rc) return c3_context(rc, "uploading %s", name);
    return C3_OK;
}

/* A whole tensor as host floats (shape checked). */
static int load_host(const c3_ckpt *ck, float **dst, const char *name, int ndim, int64_t *shape) {
    const st_tensor *t = ckpt_get(ck, NULL, name, ndim, shape);
    if (!t) return C3_EMODEL;
    for (int i = 0; i < ndim; i++)
        shape[i] = t->shape[i];
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
        if (!ckpt_find(ck, nm))
            snprintf(nm, sizeof nm, "layers.%d.self_attn.k_norm_und_for_gen", l);
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
        if (m->offload && !ts[i]->be && ts[i]->data)
            m->be->host_free(m->be, ts[i]->data); /* pinned host */
        c3_free(ts[i]);
    }
}

void model_free(c3_model *m) {
    if (!m) return;
    gg_free(m);
    if (m->offload)
        for (int t = 0; t < 2; t++)
            ring_free(m, &m->ring[t]);
    if (m->lw)
        for (int l = 0; l < m->c.layers; l++) {
            free_tower(m, &m->lw[l].und);
            free_tower(m, &m->lw[l].gen);
        }
    free(m->lw);
    c3_free(&m->embed);
    free(m->embed_map);
    free(m->ids_buf);
    free(m->stage_up);
    free(m->stage_down);
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
    c3_free(&m->a_in);
    c3_free(&m->a_out);
    c3_free(&m->a_out_b);
    c3_free(&m->a_in_b);
    c3_free(&m->a_me);
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
        if (j % 3 == 1 && j < 3 * m->c.mrope[1])
            a = 1;
        else if (j % 3 == 2 && j < 3 * m->c.mrope[2])
            a = 2;
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
        return c3_fail(C3_EUSAGE,
                       "tp %d does not divide the model's %d KV heads; use a tp that divides %d",
                       tp, c->kv_heads, c->kv_heads);
    if (c->inter % tp)
        return c3_fail(C3_EUSAGE,
                       "tp %d does not divide the MLP width %d; use a tp that divides it", tp,
                       c->inter);
    if (tp > 1 && (!shard->tp || !shard->tp->allreduce_sum))
        return c3_fail(C3_EFAIL, "tp %d needs a TP communicator (none was given)", tp);
    if (shard->sp_size > 1) {
        int hkv = c->kv_heads / tp;
        if (hkv % shard->sp_size)
            return c3_fail(C3_EUSAGE,
                           "ulysses %d does not divide the %d KV heads per tensor-parallel rank; "
                           "lower --ulysses",
                           shard->sp_size, hkv);
        if (!shard->sp || !shard->sp->alltoall || !shard->sp->allgather_host)
            return c3_fail(C3_EFAIL,
                           "ulysses %d needs a sequence-parallel communicator (none was given)",
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
    m->offload = shard->offload && c3_has(be, C3_CAP_PINNED | C3_CAP_EVENTS | C3_CAP_ASYNC_UPLOAD);
    m->loading_host = m->offload;
    if (pin_wanted(be, shard)) TRY(pin_new(be, &t_pin));
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
            rc = c3_fail(
                C3_EMODEL,
                "transformer tensor time_embedder.linear_1.weight: input width %d must be even",
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
    if (ckpt_find(ck, "audio_proj_in.weight")) { /* the sound heads (replicated, small) */
        int64_t si[] = {D, c->sound_dim}, so[] = {c->sound_dim, D}, sb[] = {c->sound_dim},
                db[] = {D};
        float *ab = NULL, *me = NULL;
        TRY(load_tensor(m, ck, &m->a_in, "audio_proj_in.weight", 2, si, SPLIT_NONE));
        TRY(load_tensor(m, ck, &m->a_out, "audio_proj_out.weight", 2, so, SPLIT_NONE));
        TRY(load_tensor(m, ck, &m->a_out_b, "audio_proj_out.bias", 1, sb, SPLIT_NONE));
        rc = load_host(ck, &ab, "audio_proj_in.bias", 1, db);
        if (!rc) rc = load_host(ck, &me, "audio_modality_embed", 1, db);
        if (!rc) rc = upload_f32(be, &m->a_in_b, ab, 1, db);
        if (!rc) rc = upload_f32(be, &m->a_me, me, 1, db);
        free(ab);
        free(me);
        if (rc) goto done;
        m->has_sound = true;
    }
    rope_setup(m);
done:
    if (t_pin) { /* every staged copy ends before the weights are used (or freed) */
        int rc2 = pin_drain(t_pin);
        if (rc == C3_OK) rc = rc2;
        pin_free(t_pin);
        t_pin = NULL;
    }
    if (rc) {
        model_free(m);
        return rc;
    }
    *out = m;
    return C3_OK;
}
