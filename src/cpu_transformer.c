/* cpu_transformer.c - CPU linear (BLAS), RMSNorm, RoPE, attention.
 *
 * All math in fp32 on F32 host tensors. The attention is blocked with an
 * online (streaming) softmax: each task owns one (head, query block) and walks
 * the keys in blocks, so scratch memory is O(Q_BLOCK * K_BLOCK) per thread
 * whatever the sequence lengths. */
#include "backend_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Attention tiling: queries per task and keys per inner block. */
enum { ATT_QBLOCK = 32, ATT_KBLOCK = 128 };

/* Declared in backend_cpu.h; lives here because this file owns the OpenMP
 * loops of the transformer. 0 keeps the OpenMP default (all cores). */
void cpu_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

/* ------------------------------------------------------------------ linear */

/* cpu_gemm's tiles: rows x columns of y. Fixed, so a run gives the same bits
 * on 1 or 64 threads; large enough that each sgemm runs at speed. */
enum { GEMM_TILE_M = 128, GEMM_TILE_N = 512 };
/* Multiply-adds below which the product stays one tile on one thread. */
#define GEMM_TILE_PAR_MIN (1 << 22)

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { /* the threads are cpu_gemm's own */
    openblas_set_num_threads(1);
}

void cpu_gemm(bool b_trans, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *y, int64_t ldy) {
    pthread_once(&blas_once, blas_single);
    int64_t tm = (M + GEMM_TILE_M - 1) / GEMM_TILE_M, tn = (N + GEMM_TILE_N - 1) / GEMM_TILE_N;
#pragma omp parallel for schedule(dynamic, 1) if (tm * tn > 1 && M * N * K > GEMM_TILE_PAR_MIN)
    for (int64_t t = 0; t < tm * tn; t++) {
        int64_t i0 = t / tn * GEMM_TILE_M, j0 = t % tn * GEMM_TILE_N;
        int64_t m = C3_MIN((int64_t)GEMM_TILE_M, M - i0), n = C3_MIN((int64_t)GEMM_TILE_N, N - j0);
        const float *bt = b_trans ? b + j0 * ldb : b + j0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, b_trans ? CblasTrans : CblasNoTrans, (blasint)m,
                    (blasint)n, (blasint)K, 1.0f, a + i0 * lda, (blasint)lda, bt, (blasint)ldb,
                    beta, y + i0 * ldy + j0, (blasint)ldy);
    }
}

/* COSMOS3_FP8_CALIBRATE=N, as on CUDA (cuda/gemm.cu): the first N calls of
 * each FP8 weight without an input scale set its static activation scale
 * (the max |x| over them); later calls use it. */
#define CPU_CALIB_MAX 8192
static struct {
    pthread_mutex_t mu;
    int n, ncal;
    struct {
        const void *w;
        float ws, amax;
        int calls;
    } cal[CPU_CALIB_MAX];
} cpu_calib = {.mu = PTHREAD_MUTEX_INITIALIZER, .n = -1};

/* The calibrated scale of w for this call: *s > 0 when frozen; else
 * *slot >= 0 is the entry that this call's amax must raise. */
static void calib_scale(const c3_tensor *w, float *s, int *slot) {
    *s = 0, *slot = -1;
    pthread_mutex_lock(&cpu_calib.mu);
    if (cpu_calib.n < 0) {
        const char *e = getenv("COSMOS3_FP8_CALIBRATE");
        cpu_calib.n = e && *e && atoi(e) > 0 ? atoi(e) : 0;
    }
    if (cpu_calib.n > 0) {
        int i = 0;
        while (i < cpu_calib.ncal &&
               !(cpu_calib.cal[i].w == w->data && cpu_calib.cal[i].ws == w->fp8.wscale[0]))
            i++;
        if (i == cpu_calib.ncal && i < CPU_CALIB_MAX) {
            cpu_calib.cal[i].w = w->data, cpu_calib.cal[i].ws = w->fp8.wscale[0];
            cpu_calib.cal[i].amax = 0, cpu_calib.cal[i].calls = 0;
            cpu_calib.ncal++;
        }
        if (i < cpu_calib.ncal) {
            if (cpu_calib.cal[i].calls >= cpu_calib.n) {
                float a = cpu_calib.cal[i].amax;
                *s = a > 0 ? a / C3_E4M3_MAX : 1.0f;
            } else {
                *slot = i;
            }
            cpu_calib.cal[i].calls++;
        }
    }
    pthread_mutex_unlock(&cpu_calib.mu);
}

int cpu_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, bool accumulate) {
    if (w->ndim != 2) return c3_fail(C3_EFAIL, "cpu linear: weight has %d dimensions, expected 2", w->ndim);
    int64_t N = w->ne[0], K = w->ne[1];
    /* x is [M, K] whatever its shape (e.g. [S, H, hd] with K = H * hd) */
    if (K <= 0 || c3_numel(x) % K)
        return c3_fail(C3_EFAIL, "cpu linear: input of %lld elements is not rows of the weight's width %lld",
                       (long long)c3_numel(x), (long long)K);
    int64_t M = c3_numel(x) / K;
    if (c3_numel(y) != M * N)
        return c3_fail(C3_EFAIL, "cpu linear: output holds %lld elements, expected %lld x %lld",
                       (long long)c3_numel(y), (long long)M, (long long)N);
    if (bias && c3_numel(bias) != N)
        return c3_fail(C3_EFAIL, "cpu linear: bias holds %lld elements, expected %lld",
                       (long long)c3_numel(bias), (long long)N);
    if (M == 0 || N == 0) return C3_OK;
    float *yd = y->data;
    /* FP8 x FP8 (W8A8): the weight is held dequantised; the activations are
     * quantised to E4M3 with the weight's input scale (or max|x| / 448 when
     * it has none) and taken back to float: the products the GPU computes. */
    const float *xd = x->data;
    float *xq = NULL;
    if (w->fp8.nseg && be->fp8_act) {
        int64_t n = M * K;
        float s = w->fp8.xscale;
        int slot = -1;
        if (!(s > 0)) calib_scale(w, &s, &slot);
        if (!(s > 0)) {
            float amax = 0;
            for (int64_t i = 0; i < n; i++)
                amax = fmaxf(amax, fabsf(xd[i]));
            if (slot >= 0) { /* calibrating: the max over the first calls */
                pthread_mutex_lock(&cpu_calib.mu);
                cpu_calib.cal[slot].amax = amax = fmaxf(cpu_calib.cal[slot].amax, amax);
                pthread_mutex_unlock(&cpu_calib.mu);
            }
            s = amax > 0 ? amax / C3_E4M3_MAX : 1.0f;
        }
        xq = xmalloc((size_t)n * sizeof(float));
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            xq[i] = c3_e4m3_to_f32(c3_f32_to_e4m3(xd[i] / s)) * s;
        xd = xq;
    }
    /* y[M,N] = x[M,K] . w[N,K]^T */
    cpu_gemm(true, M, N, K, xd, K, w->data, K, accumulate ? 1.0f : 0.0f, yd, N);
    free(xq);
    if (bias) {
        const float *b = bias->data;
#pragma omp parallel for schedule(static) if (M * N > 65536)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) yd[i * N + j] += b[j];
    }
    return C3_OK;
}

/* ----------------------------------------------------------------- rmsnorm */

/* y[0..dim) = w * x / sqrt(mean(x^2) + eps) (w NULL: 1); y may alias x. */
static void norm_row(float *y, const float *x, const float *w, int64_t dim, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++)
        ss += (double)x[i] * (double)x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t i = 0; i < dim; i++) {
        float n = x[i] * inv;
        y[i] = w ? w[i] * n : n;
    }
}

/* Rotate-half RoPE of one head v[0..2 half) with that token's cos/sin rows. */
static void rope_row(float *v, const float *c, const float *s, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        float a = v[i], b = v[i + half];
        /* rot(x) = [-x[half:], x[:half]] */
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i + half] + a * s[i + half];
    }
}

int cpu_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim,
                float eps, bool mul_fp32) {
    (void)be;
    (void)mul_fp32; /* everything is fp32 here: both roundings coincide */
    if (dim <= 0 || c3_numel(x) % dim)
        return c3_fail(C3_EFAIL, "cpu rmsnorm: %lld elements are not rows of %d", (long long)c3_numel(x), dim);
    if (c3_numel(y) != c3_numel(x))
        return c3_fail(C3_EFAIL, "cpu rmsnorm: output holds %lld elements, input %lld",
                       (long long)c3_numel(y), (long long)c3_numel(x));
    if (w && c3_numel(w) != dim)
        return c3_fail(C3_EFAIL, "cpu rmsnorm: weight holds %lld elements, expected %d",
                       (long long)c3_numel(w), dim);
    int64_t rows = c3_numel(x) / dim;
    const float *xd = x->data, *wd = w ? w->data : NULL;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (int64_t r = 0; r < rows; r++)
        norm_row(yd + r * dim, xd + r * dim, wd, dim, eps);
    return C3_OK;
}

/* -------------------------------------------------------------------- rope */

static int rope_tables_ok(const char *op, const c3_tensor *cos, const c3_tensor *sin, int64_t N,
                          int64_t D) {
    if (c3_numel(cos) != N * D || c3_numel(sin) != N * D)
        return c3_fail(C3_EFAIL, "cpu %s: cos/sin hold %lld/%lld elements, expected %lld x %lld",
                       op, (long long)c3_numel(cos), (long long)c3_numel(sin), (long long)N,
                       (long long)D);
    return C3_OK;
}

int cpu_rope(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin) {
    (void)be;
    if (x->ndim != 3) return c3_fail(C3_EFAIL, "cpu rope: input has %d dimensions, expected [N, H, D]", x->ndim);
    int64_t N = x->ne[0], H = x->ne[1], D = x->ne[2];
    if (D % 2) return c3_fail(C3_EFAIL, "cpu rope: head dimension %lld is odd", (long long)D);
    C3_TRY(rope_tables_ok("rope", cos, sin, N, D));
    float *xd = x->data;
    const float *cd = cos->data, *sd = sin->data;
#pragma omp parallel for schedule(static) if (N * H * D > 65536)
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            rope_row(xd + (n * H + h) * D, cd + n * D, sd + n * D, D / 2);
    return C3_OK;
}

int cpu_qkv_rope(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                 const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos,
                 const c3_tensor *sin, float eps, bool mul_fp32) {
    (void)be;
    (void)mul_fp32; /* fp32 throughout: both roundings coincide */
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->ne[1] != v->ne[1] ||
        q->ne[2] != k->ne[2] || k->ne[2] != v->ne[2] || q->ne[0] != k->ne[0] ||
        k->ne[0] != v->ne[0])
        return c3_fail(C3_EFAIL,
                       "cpu qkv_rope: q, k, v are not [N, Hq, D], [N, Hkv, D], [N, Hkv, D]");
    int64_t N = q->ne[0], Hq = q->ne[1], Hkv = k->ne[1], D = q->ne[2], Hall = Hq + 2 * Hkv;
    if (D % 2 || c3_numel(qkv) != N * Hall * D)
        return c3_fail(
            C3_EFAIL, "cpu qkv_rope: qkv holds %lld elements, expected %lld x %lld x %lld (D even)",
            (long long)c3_numel(qkv), (long long)N, (long long)Hall, (long long)D);
    if ((q_norm && c3_numel(q_norm) != D) || (k_norm && c3_numel(k_norm) != D))
        return c3_fail(C3_EFAIL,
                       "cpu qkv_rope: the q/k norm weights are not of the head dimension %lld",
                       (long long)D);
    if ((cos == NULL) != (sin == NULL))
        return c3_fail(C3_EFAIL, "cpu qkv_rope: cos and sin come together");
    if (cos) C3_TRY(rope_tables_ok("qkv_rope", cos, sin, N, D));
    const float *src = qkv->data, *qw = q_norm ? q_norm->data : NULL,
                *kw = k_norm ? k_norm->data : NULL;
    float *qd = q->data, *kd = k->data, *vd = v->data;
#pragma omp parallel for schedule(static) if (N * Hall * D > 65536)
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < Hall; h++) {
            const float *x = src + (n * Hall + h) * D;
            bool isq = h < Hq, isk = !isq && h < Hq + Hkv;
            float *y = isq   ? qd + (n * Hq + h) * D
                       : isk ? kd + (n * Hkv + h - Hq) * D
                             : vd + (n * Hkv + h - Hq - Hkv) * D;
            const float *w = isq ? qw : kw;
            if (!isq && !isk) {
                memcpy(y, x, sizeof(float) * (size_t)D);
                continue;
            }
            if (w)
                norm_row(y, x, w, D, eps);
            else
                memcpy(y, x, sizeof(float) * (size_t)D);
            if (cos)
                rope_row(y, (const float *)cos->data + n * D, (const float *)sin->data + n * D,
                         D / 2);
        }
    return C3_OK;
}

/* --------------------------------------------------------------- attention */

/* The keys of one block, gathered from the segments: pointers to row 0 of
 * head hk of each key (k and v). */
typedef struct {
    const float *k, *v;
} key_ref;

/* FP8 attention (be->attn_fp8 on a GEN call), as cuda/attention_fp8.cuh
 * computes it: per head scale s = max |x| / 448 (1 where it is 0) over
 * every row of q and the visible rows of all key segments of k and of v,
 * each value rounded to E4M3 as x * (1 / s) and taken back times s; the
 * probabilities exp(score - running max) rounded to E4M3 after a 2^8
 * scale for the products with v, their row sums unrounded. The key blocks
 * (ATT_KBLOCK = 128 from each segment's start) are the GPU kernel's tiles,
 * so the running max each probability is rounded against is the same. */
#define CPU_FP8_POFF 256.0f
static float fp8_scale(float amax) {
    return amax > 0 ? amax / C3_E4M3_MAX : 1.0f;
}
static float fp8_round(float x, float inv, float s) {
    return c3_e4m3_to_f32(c3_f32_to_e4m3(x * inv)) * s;
}
/* per head amax of x [rows, H, D] into amax[H] (the max with what it holds) */
static void fp8_amax(const float *x, int64_t rows, int64_t H, int64_t D, float *amax) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < H; h++) {
            const float *xr = x + (r * H + h) * D;
            for (int64_t d = 0; d < D; d++)
                amax[h] = fmaxf(amax[h], fabsf(xr[d]));
        }
}
/* y [rows, H, D] = x rounded to E4M3 with the per head scales of amax */
static float *fp8_copy(const float *x, int64_t rows, int64_t H, int64_t D, const float *amax) {
    float *y = xmalloc((size_t)C3_MAX(rows * H * D, 1) * sizeof(float));
#pragma omp parallel for schedule(static) if (rows * H * D > 65536)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < H; h++) {
            float sc = fp8_scale(amax[h]), inv = 1.0f / sc;
            for (int64_t d = 0; d < D; d++)
                y[(r * H + h) * D + d] = fp8_round(x[(r * H + h) * D + d], inv, sc);
        }
    return y;
}

int cpu_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg,
                  bool causal, float scale) {
    if (q->ndim != 3) return c3_fail(C3_EFAIL, "cpu attention: q has %d dimensions, expected [S, H, D]", q->ndim);
    int64_t Sq = q->ne[0], Hq = q->ne[1], D = q->ne[2];
    if (c3_numel(out) != Sq * Hq * D)
        return c3_fail(C3_EFAIL, "cpu attention: output holds %lld elements, expected %lld",
                       (long long)c3_numel(out), (long long)(Sq * Hq * D));
    if (nseg < 1) return c3_fail(C3_EFAIL, "cpu attention: no key/value segments");
    if (causal && nseg != 1) return c3_fail(C3_EFAIL, "cpu attention: causal masking takes one key segment");
    int64_t Hkv = kv[0].k->ndim == 3 ? kv[0].k->ne[1] : 0;
    if (Hkv <= 0 || Hq % Hkv)
        return c3_fail(C3_EFAIL, "cpu attention: %lld query heads are not a multiple of %lld key heads",
                       (long long)Hq, (long long)Hkv);
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) {
        const c3_tensor *k = kv[s].k, *v = kv[s].v;
        if (k->ndim != 3 || v->ndim != 3 || k->ne[1] != Hkv || v->ne[1] != Hkv || k->ne[2] != D ||
            v->ne[2] != D || k->ne[0] < kv[s].n || v->ne[0] < kv[s].n)
            return c3_fail(C3_EFAIL, "cpu attention: segment %d k/v shape does not match [%lld, %lld, %lld]", s,
                           (long long)kv[s].n, (long long)Hkv, (long long)D);
        if (kv[s].valid < 0 || kv[s].valid > kv[s].n)
            return c3_fail(C3_EFAIL, "cpu attention: segment %d valid %lld outside [0, %lld]", s,
                           (long long)kv[s].valid, (long long)kv[s].n);
        total += kv[s].n;
    }
    int64_t causal_shift = total - Sq; /* query i sees keys j <= i + shift */
    int64_t group = Hq / Hkv;
    int64_t nqb = (Sq + ATT_QBLOCK - 1) / ATT_QBLOCK;
    const float *qd = q->data;
    /* FP8: rounded copies of q, k, v (what the GPU's codes stand for) */
    bool fp8 = false;
    float *q8 = NULL, **k8 = NULL, **v8 = NULL;
    if (be->attn_fp8 && be->attn_gen) {
        if (causal) { /* every head_dim emulates (the GPU kernel takes 128 only) */
            be->attn_fp8_declined++;
            if (!be->attn_fp8_why) be->attn_fp8_why = "causal attention has no FP8 kernel";
        } else {
            fp8 = true;
            be->attn_fp8_calls++;
        }
    }
    if (fp8) {
        float *am = xcalloc((size_t)(Hq + 2 * Hkv), sizeof(float)); /* q [Hq], k [Hkv], v [Hkv] */
        fp8_amax(qd, Sq, Hq, D, am);
        for (int s = 0; s < nseg; s++) {
            fp8_amax(kv[s].k->data, kv[s].valid, Hkv, D, am + Hq);
            fp8_amax(kv[s].v->data, kv[s].valid, Hkv, D, am + Hq + Hkv);
        }
        q8 = fp8_copy(qd, Sq, Hq, D, am);
        k8 = xcalloc((size_t)nseg, sizeof *k8);
        v8 = xcalloc((size_t)nseg, sizeof *v8);
        for (int s = 0; s < nseg; s++) {
            k8[s] = fp8_copy(kv[s].k->data, kv[s].valid, Hkv, D, am + Hq);
            v8[s] = fp8_copy(kv[s].v->data, kv[s].valid, Hkv, D, am + Hq + Hkv);
        }
        free(am);
        qd = q8;
    }
    float *od = out->data;
    int64_t ntask = Hq * nqb;

#pragma omp parallel
    {
        float *sc = malloc(sizeof(float) * ATT_QBLOCK * ATT_KBLOCK); /* scores */
        float *acc = malloc(sizeof(float) * ATT_QBLOCK * (size_t)D); /* unnormalised out */
        float mx[ATT_QBLOCK], den[ATT_QBLOCK];
        key_ref *keys = malloc(sizeof(key_ref) * ATT_KBLOCK);
        if (!sc || !acc || !keys) abort();
#pragma omp for schedule(dynamic)
        for (int64_t task = 0; task < ntask; task++) {
            int64_t h = task / nqb, q0 = (task % nqb) * ATT_QBLOCK;
            int64_t nq = C3_MIN((int64_t)ATT_QBLOCK, Sq - q0);
            int64_t hk = h / group;
            for (int64_t i = 0; i < nq; i++) {
                mx[i] = -INFINITY;
                den[i] = 0;
            }
            memset(acc, 0, sizeof(float) * (size_t)(nq * D));
            /* walk the keys of every segment in blocks of ATT_KBLOCK */
            int64_t base = 0; /* global index of the segment's first key */
            for (int s = 0; s < nseg; s++) {
                int64_t valid = kv[s].valid;
                if (causal) valid = C3_MIN(valid, q0 + nq - 1 + causal_shift + 1);
                const float *kd = fp8 ? k8[s] : kv[s].k->data, *vd = fp8 ? v8[s] : kv[s].v->data;
                for (int64_t k0 = 0; k0 < valid; k0 += ATT_KBLOCK) {
                    int64_t nk = C3_MIN((int64_t)ATT_KBLOCK, valid - k0);
                    for (int64_t j = 0; j < nk; j++) {
                        keys[j].k = kd + ((k0 + j) * Hkv + hk) * D;
                        keys[j].v = vd + ((k0 + j) * Hkv + hk) * D;
                    }
                    for (int64_t i = 0; i < nq; i++) {
                        const float *qi = qd + ((q0 + i) * Hq + h) * D;
                        float *si = sc + i * ATT_KBLOCK;
                        /* keys visible to this query in the block */
                        int64_t lim = nk;
                        if (causal) lim = C3_MIN(nk, q0 + i + causal_shift + 1 - (base + k0));
                        if (lim <= 0) continue;
                        float bmax = -INFINITY;
                        for (int64_t j = 0; j < lim; j++) {
                            const float *kj = keys[j].k;
                            float dot = 0;
#pragma omp simd reduction(+ : dot)
                            for (int64_t d = 0; d < D; d++) dot += qi[d] * kj[d];
                            si[j] = dot * scale;
                            if (si[j] > bmax) bmax = si[j];
                        }
                        float mnew = bmax > mx[i] ? bmax : mx[i];
                        float corr = expf(mx[i] - mnew); /* 0 when mx was -inf */
                        float *ai = acc + i * D;
                        if (corr != 1.0f)
                            for (int64_t d = 0; d < D; d++) ai[d] *= corr;
                        float sum = 0;
                        for (int64_t j = 0; j < lim; j++) {
                            float p = expf(si[j] - mnew);
                            sum += p;
                            if (fp8) /* E4M3 of 2^8 p, exactly rescaled */
                                p = c3_e4m3_to_f32(c3_f32_to_e4m3(p * CPU_FP8_POFF)) / CPU_FP8_POFF;
                            const float *vj = keys[j].v;
#pragma omp simd
                            for (int64_t d = 0; d < D; d++) ai[d] += p * vj[d];
                        }
                        den[i] = den[i] * corr + sum;
                        mx[i] = mnew;
                    }
                }
                base += kv[s].n;
            }
            for (int64_t i = 0; i < nq; i++) {
                float *o = od + ((q0 + i) * Hq + h) * D;
                const float *ai = acc + i * D;
                float inv = den[i] > 0 ? 1.0f / den[i] : 0.0f; /* fully masked row: zeros */
                for (int64_t d = 0; d < D; d++) o[d] = ai[d] * inv;
            }
        }
        free(sc);
        free(acc);
        free(keys);
    }
    if (fp8) {
        for (int s = 0; s < nseg; s++) {
            free(k8[s]);
            free(v8[s]);
        }
        free(k8);
        free(v8);
        free(q8);
    }
    return C3_OK;
}
