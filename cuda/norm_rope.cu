/* norm_rope.cu - row RMSNorm (Qwen and Nemotron rounding), rotate-half RoPE
 * and the VAE's channel RMS norm. Statistics and angles in fp32. */
#include "cuda_internal.h"

#define WARP 32
/* Rows handled per block by the warp-per-row RMSNorm (one warp each). */
#define NORM_ROWS_PER_BLOCK 8
/* Floor of the channel norm's denominator (F.normalize's eps). */
#define CHAN_NORM_EPS 1e-12f

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* x, y [rows, dim]; w [dim]. One warp per row. */
__global__ void k_rmsnorm(void *y, int yt, const void *x, int xt, const void *w, int wt, int64_t rows, int dim,
                          float eps, int mul_fp32) {
    int64_t row = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int64_t base = row * dim;
    float ss = 0.0f;
    for (int d = lane; d < dim; d += WARP) {
        float v = cu_ld(x, xt, base + d);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)dim + eps);
    for (int d = lane; d < dim; d += WARP) {
        float n = cu_ld(x, xt, base + d) * r;
        if (!mul_fp32) n = cu_round(yt, n); /* Qwen: normalised x is cast before the multiply */
        cu_st(y, yt, base + d, cu_ld(w, wt, d) * n);
    }
}

/* The same for bf16 x, y, w with dim a multiple of 8 * WARP: 16-byte loads,
 * eight values per lane per step; the second pass reads the row from L1. */
__global__ void k_rmsnorm_bf16x8(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t rows,
                                 int dim, float eps, int mul_fp32) {
    int64_t row = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    const uint4 *xr = (const uint4 *)(x + row * dim), *wr = (const uint4 *)w;
    uint4 *yr = (uint4 *)(y + row * dim);
    int n8 = dim / 8;
    float ss = 0.0f;
    for (int c = lane; c < n8; c += WARP) {
        uint4 u = xr[c];
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 f = __bfloat1622float2(h[e]);
            ss += f.x * f.x + f.y * f.y;
        }
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)dim + eps);
    for (int c = lane; c < n8; c += WARP) {
        uint4 u = xr[c], g = wr[c], o;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u, *gw = (const __nv_bfloat162 *)&g;
        __nv_bfloat162 *oh = (__nv_bfloat162 *)&o;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 f = __bfloat1622float2(h[e]), wf = __bfloat1622float2(gw[e]);
            f.x *= r, f.y *= r;
            if (!mul_fp32) f.x = cu_round(C3_BF16, f.x), f.y = cu_round(C3_BF16, f.y);
            oh[e] = __floats2bfloat162_rn(wf.x * f.x, wf.y * f.y);
        }
        yr[c] = o;
    }
}

/* The same with the row held in registers (dim <= 8 * WARP * RMS_REG_CHUNKS):
 * one read of x, all of a lane's 16-byte loads in flight at once. */
#define RMS_REG_CHUNKS 20 /* up to 5,120 (Super's hidden size) */
__global__ void k_rmsnorm_bf16_reg(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int64_t rows,
                                   int dim, float eps, int mul_fp32) {
    int64_t row = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    const uint4 *xr = (const uint4 *)(x + row * dim), *wr = (const uint4 *)w;
    uint4 *yr = (uint4 *)(y + row * dim);
    int n8 = dim / 8;
    uint4 u[RMS_REG_CHUNKS];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RMS_REG_CHUNKS; i++) {
        int c = lane + i * WARP;
        if (c < n8) u[i] = xr[c];
    }
#pragma unroll
    for (int i = 0; i < RMS_REG_CHUNKS; i++) {
        if (lane + i * WARP >= n8) break;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u[i];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 f = __bfloat1622float2(h[e]);
            ss += f.x * f.x + f.y * f.y;
        }
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)dim + eps);
#pragma unroll
    for (int i = 0; i < RMS_REG_CHUNKS; i++) {
        int c = lane + i * WARP;
        if (c >= n8) break;
        uint4 g = wr[c], o;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u[i], *gw = (const __nv_bfloat162 *)&g;
        __nv_bfloat162 *oh = (__nv_bfloat162 *)&o;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 f = __bfloat1622float2(h[e]), wf = __bfloat1622float2(gw[e]);
            f.x *= r, f.y *= r;
            if (!mul_fp32) f.x = cu_round(C3_BF16, f.x), f.y = cu_round(C3_BF16, f.y);
            oh[e] = __floats2bfloat162_rn(wf.x * f.x, wf.y * f.y);
        }
        yr[c] = o;
    }
}

int cu_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim, float eps,
               bool mul_fp32) {
    C3_TRY(cu_check_float("rmsnorm", y, "y"));
    C3_TRY(cu_check_float("rmsnorm", x, "x"));
    C3_TRY(cu_check_float("rmsnorm", w, "weight"));
    int64_t n = c3_numel(x);
    if (dim <= 0 || n % dim || c3_numel(y) != n || c3_numel(w) != dim)
        return c3_fail(C3_EFAIL, "cuda rmsnorm: x %lld, y %lld, weight %lld elements for rows of %d",
                       (long long)n, (long long)c3_numel(y), (long long)c3_numel(w), dim);
    CU_ENTER(be);
    int64_t rows = n / dim;
    if (rows == 0) return C3_OK;
    unsigned grid = (unsigned)((rows + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    if (x->dtype == C3_BF16 && y->dtype == C3_BF16 && w->dtype == C3_BF16 && dim % (8 * WARP) == 0 &&
        ((uintptr_t)x->data | (uintptr_t)y->data | (uintptr_t)w->data) % 16 == 0) {
        if (dim <= 8 * WARP * RMS_REG_CHUNKS)
            k_rmsnorm_bf16_reg<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
                (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data, (const __nv_bfloat16 *)w->data, rows, dim,
                eps, mul_fp32);
        else
            k_rmsnorm_bf16x8<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
                (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data, (const __nv_bfloat16 *)w->data, rows, dim,
                eps, mul_fp32);
        CU_CHECK_LAUNCH();
        return C3_OK;
    }
    k_rmsnorm<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data, x->dtype,
                                                                           w->data, w->dtype, rows, dim, eps,
                                                                           mul_fp32);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* x [N, H, D] in place; cos, sin [N, D]. One thread per rotated pair (j, j + D/2). */
__global__ void k_rope(void *x, int xt, const void *cs, int ct, const void *sn, int st, int64_t N, int64_t H,
                       int D) {
    int half = D / 2;
    int64_t total = N * H * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(i % half);
        int64_t nh = i / half, n = nh / H;
        int64_t xo = nh * D, co = n * D;
        float x1 = cu_ld(x, xt, xo + j), x2 = cu_ld(x, xt, xo + j + half);
        float c1 = cu_ld(cs, ct, co + j), c2 = cu_ld(cs, ct, co + j + half);
        float s1 = cu_ld(sn, st, co + j), s2 = cu_ld(sn, st, co + j + half);
        cu_st(x, xt, xo + j, x1 * c1 - x2 * s1);        /* rot(x)[j] = -x[j + D/2] */
        cu_st(x, xt, xo + j + half, x2 * c2 + x1 * s2); /* rot(x)[j + D/2] = x[j] */
    }
}

int cu_rope(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin) {
    C3_TRY(cu_check_float("rope", x, "x"));
    C3_TRY(cu_check_float("rope", cos, "cos"));
    C3_TRY(cu_check_float("rope", sin, "sin"));
    if (x->ndim < 2) return c3_fail(C3_EFAIL, "cuda rope: x has %d dimensions, expected [N, H, D]", x->ndim);
    int64_t N = x->ne[0], D = x->ne[x->ndim - 1];
    if (D % 2 || N * D == 0 || c3_numel(x) % (N * D))
        return c3_fail(C3_EFAIL, "cuda rope: x of %lld elements is not [%lld, H, %lld] with even D",
                       (long long)c3_numel(x), (long long)N, (long long)D);
    if (c3_numel(cos) != N * D || c3_numel(sin) != N * D)
        return c3_fail(C3_EFAIL, "cuda rope: cos/sin have %lld/%lld elements, expected %lld x %lld",
                       (long long)c3_numel(cos), (long long)c3_numel(sin), (long long)N, (long long)D);
    CU_ENTER(be);
    int64_t H = c3_numel(x) / (N * D);
    k_rope<<<cu_grid(be, N * H * D / 2), CU_THREADS, 0, cu_of(be)->stream>>>(
        x->data, x->dtype, cos->data, cos->dtype, sin->data, sin->dtype, N, H, (int)D);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* The attention inputs from the fused q/k/v product (see backend.h qkv_rope):
 * one warp per (token, head) of qkv [N, Hq + 2 Hkv, D]; the q and k heads are
 * normalised (rounded to the output type as cu_rmsnorm stores them) and
 * rotated, the v heads copied. Each lane owns the pairs (j, j + D/2). */
__global__ void k_qkv_rope(void *q, void *k, void *v, int ot, const void *qkv, int it, const void *qn,
                           const void *kn, int wt, const void *cs, const void *sn, int ct, int64_t N, int Hq,
                           int Hkv, int D, float eps, int mul_fp32) {
    int64_t wid = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP, Hall = Hq + 2 * Hkv, half = D / 2;
    if (wid >= N * Hall) return;
    int64_t n = wid / Hall, src = wid * D;
    int h = (int)(wid - n * Hall);
    if (h >= Hq + Hkv) {
        int64_t dst = (n * Hkv + h - Hq - Hkv) * D;
        for (int d = lane; d < D; d += WARP) cu_st(v, ot, dst + d, cu_ld(qkv, it, src + d));
        return;
    }
    bool isq = h < Hq;
    void *out = isq ? q : k;
    const void *w = isq ? qn : kn;
    int64_t dst = isq ? (n * Hq + h) * D : (n * Hkv + h - Hq) * D;
    float r = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int d = lane; d < D; d += WARP) {
            float e = cu_ld(qkv, it, src + d);
            ss += e * e;
        }
        r = rsqrtf(warp_sum(ss) / (float)D + eps);
    }
    for (int j = lane; j < half; j += WARP) {
        float a = cu_ld(qkv, it, src + j), b = cu_ld(qkv, it, src + j + half);
        if (w) {
            a *= r, b *= r;
            if (!mul_fp32) a = cu_round(ot, a), b = cu_round(ot, b);
            a = cu_round(ot, cu_ld(w, wt, j) * a);
            b = cu_round(ot, cu_ld(w, wt, j + half) * b);
        }
        if (cs) {
            int64_t co = n * D;
            float c1 = cu_ld(cs, ct, co + j), c2 = cu_ld(cs, ct, co + j + half);
            float s1 = cu_ld(sn, ct, co + j), s2 = cu_ld(sn, ct, co + j + half);
            float a2 = a * c1 - b * s1;
            b = b * c2 + a * s2;
            a = a2;
        }
        cu_st(out, ot, dst + j, a);
        cu_st(out, ot, dst + j + half, b);
    }
}

/* The same for bf16 everything, head dim D a multiple of 4 and at most
 * 4 * 4 * WARP: one warp per (token, head), lane t owning the bf16 pairs
 * 2t, 2t+1 of each half (so its rotation partners are its own), every load
 * issued at once into registers, one reduction, no second pass over memory
 * (the generic kernel's lane-strided scalar passes were latency-bound). */
#define QKV_MAXT 4
__global__ void k_qkv_rope_bf16(__nv_bfloat162 *q, __nv_bfloat162 *k, __nv_bfloat162 *v, const __nv_bfloat162 *qkv,
                                const __nv_bfloat162 *qn, const __nv_bfloat162 *kn, const __nv_bfloat162 *cs,
                                const __nv_bfloat162 *sn, int64_t N, int Hq, int Hkv, int D, float eps, int mul_fp32) {
    int64_t wid = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP, Hall = Hq + 2 * Hkv, q2 = D / 4; /* bf16 pairs per half */
    if (wid >= N * Hall) return;
    int64_t n = wid / Hall;
    int h = (int)(wid - n * Hall);
    const __nv_bfloat162 *x = qkv + wid * (D / 2);
    if (h >= Hq + Hkv) {
        __nv_bfloat162 *o = v + (n * Hkv + h - Hq - Hkv) * (D / 2);
        for (int t = lane; t < D / 2; t += WARP) o[t] = x[t];
        return;
    }
    bool isq = h < Hq;
    __nv_bfloat162 *o = isq ? q + (n * Hq + h) * (D / 2) : k + (n * Hkv + h - Hq) * (D / 2);
    const __nv_bfloat162 *w = isq ? qn : kn, *c = cs ? cs + n * (D / 2) : NULL, *sr = sn ? sn + n * (D / 2) : NULL;
    float2 a[QKV_MAXT], b[QKV_MAXT], c1[QKV_MAXT], c2[QKV_MAXT], s1[QKV_MAXT], s2[QKV_MAXT], w1[QKV_MAXT],
        w2[QKV_MAXT];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < QKV_MAXT; i++) {
        int t = lane + i * WARP;
        if (t >= q2) break;
        a[i] = __bfloat1622float2(x[t]);
        b[i] = __bfloat1622float2(x[q2 + t]);
        if (w) w1[i] = __bfloat1622float2(w[t]), w2[i] = __bfloat1622float2(w[q2 + t]);
        if (c) {
            c1[i] = __bfloat1622float2(c[t]), c2[i] = __bfloat1622float2(c[q2 + t]);
            s1[i] = __bfloat1622float2(sr[t]), s2[i] = __bfloat1622float2(sr[q2 + t]);
        }
        ss += a[i].x * a[i].x + a[i].y * a[i].y + b[i].x * b[i].x + b[i].y * b[i].y;
    }
    float r = w ? rsqrtf(warp_sum(ss) / (float)D + eps) : 1.0f;
#pragma unroll
    for (int i = 0; i < QKV_MAXT; i++) {
        int t = lane + i * WARP;
        if (t >= q2) break;
        float2 A = a[i], B = b[i];
        if (w) {
            A.x *= r, A.y *= r, B.x *= r, B.y *= r;
            if (!mul_fp32)
                A.x = cu_round(C3_BF16, A.x), A.y = cu_round(C3_BF16, A.y), B.x = cu_round(C3_BF16, B.x),
                B.y = cu_round(C3_BF16, B.y);
            A.x = cu_round(C3_BF16, w1[i].x * A.x), A.y = cu_round(C3_BF16, w1[i].y * A.y);
            B.x = cu_round(C3_BF16, w2[i].x * B.x), B.y = cu_round(C3_BF16, w2[i].y * B.y);
        }
        if (c) {
            float2 A2 = {A.x * c1[i].x - B.x * s1[i].x, A.y * c1[i].y - B.y * s1[i].y};
            B = make_float2(B.x * c2[i].x + A.x * s2[i].x, B.y * c2[i].y + A.y * s2[i].y);
            A = A2;
        }
        o[t] = __floats2bfloat162_rn(A.x, A.y);
        o[q2 + t] = __floats2bfloat162_rn(B.x, B.y);
    }
}

int cu_qkv_rope(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos, const c3_tensor *sin,
                float eps, bool mul_fp32) {
    C3_TRY(cu_check_float("qkv_rope", q, "q"));
    C3_TRY(cu_check_float("qkv_rope", k, "k"));
    C3_TRY(cu_check_float("qkv_rope", v, "v"));
    C3_TRY(cu_check_float("qkv_rope", qkv, "qkv"));
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->ne[1] != v->ne[1] || q->ne[2] != k->ne[2] ||
        k->ne[2] != v->ne[2] || q->ne[0] != k->ne[0] || k->ne[0] != v->ne[0] || q->dtype != k->dtype ||
        k->dtype != v->dtype)
        return c3_fail(C3_EFAIL, "cuda qkv_rope: q, k, v are not [N, Hq, D], [N, Hkv, D], [N, Hkv, D] of one type");
    int64_t N = q->ne[0], Hq = q->ne[1], Hkv = k->ne[1], D = q->ne[2], Hall = Hq + 2 * Hkv;
    if (D % 2 || c3_numel(qkv) != N * Hall * D)
        return c3_fail(C3_EFAIL, "cuda qkv_rope: qkv holds %lld elements, expected %lld x %lld x %lld (D even)",
                       (long long)c3_numel(qkv), (long long)N, (long long)Hall, (long long)D);
    if ((q_norm && c3_numel(q_norm) != D) || (k_norm && c3_numel(k_norm) != D) ||
        (q_norm && k_norm && q_norm->dtype != k_norm->dtype))
        return c3_fail(C3_EFAIL, "cuda qkv_rope: the q/k norm weights are not [%lld] of one type", (long long)D);
    if ((cos == NULL) != (sin == NULL) ||
        (cos && (c3_numel(cos) != N * D || c3_numel(sin) != N * D || cos->dtype != sin->dtype)))
        return c3_fail(C3_EFAIL, "cuda qkv_rope: cos/sin are not both [%lld, %lld] of one type", (long long)N,
                       (long long)D);
    CU_ENTER(be);
    if (N == 0) return C3_OK;
    const c3_tensor *nw = q_norm ? q_norm : k_norm;
    int64_t warps = N * Hall;
    unsigned grid = (unsigned)((warps + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    const c3_tensor *all[] = {q, k, v, qkv, q_norm, k_norm, cos, sin};
    bool fast = D % 4 == 0 && D <= 4 * QKV_MAXT * WARP && (q_norm == NULL) == (k_norm == NULL);
    for (size_t i = 0; i < sizeof all / sizeof all[0] && fast; i++)
        if (all[i]) fast = all[i]->dtype == C3_BF16 && (uintptr_t)all[i]->data % 4 == 0;
    if (fast) {
        typedef __nv_bfloat162 b2;
        k_qkv_rope_bf16<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
            (b2 *)q->data, (b2 *)k->data, (b2 *)v->data, (const b2 *)qkv->data,
            q_norm ? (const b2 *)q_norm->data : NULL, k_norm ? (const b2 *)k_norm->data : NULL,
            cos ? (const b2 *)cos->data : NULL, sin ? (const b2 *)sin->data : NULL, N, (int)Hq, (int)Hkv, (int)D, eps,
            mul_fp32);
        CU_CHECK_LAUNCH();
        return C3_OK;
    }
    k_qkv_rope<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
        q->data, k->data, v->data, q->dtype, qkv->data, qkv->dtype, q_norm ? q_norm->data : NULL,
        k_norm ? k_norm->data : NULL, nw ? nw->dtype : C3_F32, cos ? cos->data : NULL, sin ? sin->data : NULL,
        cos ? cos->dtype : C3_F32, N, (int)Hq, (int)Hkv, (int)D, eps, mul_fp32);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* x, y [C, N]: one thread per position n, looping over channels (coalesced in n). */
__global__ void k_chan_rmsnorm(void *y, int yt, const void *x, int xt, const void *g, int gt, const void *b,
                               int bt, int C, int64_t N) {
    float scale = sqrtf((float)C);
    for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
        float ss = 0.0f;
        for (int c = 0; c < C; c++) {
            float v = cu_ld(x, xt, (int64_t)c * N + n);
            ss += v * v;
        }
        float r = scale / fmaxf(sqrtf(ss), CHAN_NORM_EPS);
        for (int c = 0; c < C; c++) {
            int64_t i = (int64_t)c * N + n;
            float v = cu_ld(x, xt, i) * r * cu_ld(g, gt, c);
            if (b) v += cu_ld(b, bt, c);
            cu_st(y, yt, i, v);
        }
    }
}

int cu_chan_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                    const c3_tensor *bias) {
    C3_TRY(cu_check_float("chan_rmsnorm", y, "y"));
    C3_TRY(cu_check_float("chan_rmsnorm", x, "x"));
    C3_TRY(cu_check_float("chan_rmsnorm", gamma, "gamma"));
    if (bias) C3_TRY(cu_check_float("chan_rmsnorm", bias, "bias"));
    int64_t C = c3_numel(gamma), n = c3_numel(x);
    if (C == 0 || n % C || c3_numel(y) != n || (bias && c3_numel(bias) != C))
        return c3_fail(C3_EFAIL, "cuda chan_rmsnorm: x %lld, y %lld elements for %lld channels (bias %lld)",
                       (long long)n, (long long)c3_numel(y), (long long)C, bias ? (long long)c3_numel(bias) : 0LL);
    CU_ENTER(be);
    int64_t N = n / C;
    if (N == 0) return C3_OK;
    k_chan_rmsnorm<<<cu_grid(be, N), CU_THREADS, 0, cu_of(be)->stream>>>(
        y->data, y->dtype, x->data, x->dtype, gamma->data, gamma->dtype, bias ? bias->data : NULL,
        bias ? bias->dtype : C3_F32, (int)C, N);
    CU_CHECK_LAUNCH();
    return C3_OK;
}
