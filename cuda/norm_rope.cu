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

/* Eight bf16 values of a row: their sum of squares, and their normalised,
 * weighted form (the rounding points of k_rmsnorm). */
static __device__ __forceinline__ float rms_ss8(uint4 u) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float2 f = __bfloat1622float2(h[e]);
        ss += f.x * f.x + f.y * f.y;
    }
    return ss;
}
static __device__ __forceinline__ uint4 rms_out8(uint4 u, uint4 g, float r, int mul_fp32) {
    uint4 o;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u, *gw = (const __nv_bfloat162 *)&g;
    __nv_bfloat162 *oh = (__nv_bfloat162 *)&o;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float2 f = __bfloat1622float2(h[e]), wf = __bfloat1622float2(gw[e]);
        f.x *= r, f.y *= r;
        if (!mul_fp32) f.x = cu_round(C3_BF16, f.x), f.y = cu_round(C3_BF16, f.y);
        oh[e] = __floats2bfloat162_rn(wf.x * f.x, wf.y * f.y);
    }
    return o;
}

/* The same for bf16 x, y, w with dim a multiple of 8 * WARP: 16-byte loads,
 * eight values per lane per step. REG: the row is held in registers (dim <=
 * 8 * WARP * RMS_REG_CHUNKS; one read of x, every load in flight at once, but
 * 1 block per SM); else the second pass reads the row again. */
#define RMS_REG_CHUNKS 20 /* up to 5,120 (Super's hidden size) */
template <bool REG>
__global__ void k_rmsnorm_bf16(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                               int64_t rows, int dim, float eps, int mul_fp32) {
    int64_t row = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= rows) return;
    const uint4 *xr = (const uint4 *)(x + row * dim), *wr = (const uint4 *)w;
    uint4 *yr = (uint4 *)(y + row * dim);
    int n8 = dim / 8;
    float ss = 0.0f;
    if constexpr (REG) {
        uint4 u[RMS_REG_CHUNKS];
#pragma unroll
        for (int i = 0; i < RMS_REG_CHUNKS; i++)
            if (lane + i * WARP < n8) u[i] = xr[lane + i * WARP];
#pragma unroll
        for (int i = 0; i < RMS_REG_CHUNKS; i++)
            if (lane + i * WARP < n8) ss += rms_ss8(u[i]);
        float r = rsqrtf(warp_sum(ss) / (float)dim + eps);
#pragma unroll
        for (int i = 0; i < RMS_REG_CHUNKS; i++)
            if (lane + i * WARP < n8)
                yr[lane + i * WARP] = rms_out8(u[i], wr[lane + i * WARP], r, mul_fp32);
    } else {
        for (int c = lane; c < n8; c += WARP)
            ss += rms_ss8(xr[c]);
        float r = rsqrtf(warp_sum(ss) / (float)dim + eps);
        for (int c = lane; c < n8; c += WARP)
            yr[c] = rms_out8(xr[c], wr[c], r, mul_fp32);
    }
}

/* The same with one block of RMS_BLOCK threads per row (blocks stride over
 * rows) and the row in registers: CH chunks of eight values per thread, every
 * load of the row in flight at once, one read of x, the sum of squares
 * reduced through shared memory. For rows of 1,024 to 8,192 (CH = 1..8):
 * small register count, so unlike the warp-per-row REG form it keeps the SMs
 * full at any row count (that one held 1 block per SM and read the row twice
 * below ~17k rows). */
#define RMS_BLOCK 128
template <int CH>
__global__ void __launch_bounds__(RMS_BLOCK)
    k_rmsnorm_block(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *__restrict__ w,
                    int64_t rows, int dim, float eps, int mul_fp32) {
    __shared__ float part[RMS_BLOCK / WARP];
    const int n8 = dim / 8, t = threadIdx.x;
    const uint4 *wr = (const uint4 *)w;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const uint4 *xr = (const uint4 *)(x + row * dim);
        uint4 *yr = (uint4 *)(y + row * dim);
        uint4 u[CH];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < CH; i++)
            if (t + i * RMS_BLOCK < n8) u[i] = xr[t + i * RMS_BLOCK];
#pragma unroll
        for (int i = 0; i < CH; i++)
            if (t + i * RMS_BLOCK < n8) ss += rms_ss8(u[i]);
        ss = warp_sum(ss);
        if (t % WARP == 0) part[t / WARP] = ss;
        __syncthreads();
        float tot = 0.0f;
#pragma unroll
        for (int i = 0; i < RMS_BLOCK / WARP; i++)
            tot += part[i];
        __syncthreads(); /* part is written again by the next row */
        float r = rsqrtf(tot / (float)dim + eps);
#pragma unroll
        for (int i = 0; i < CH; i++)
            if (t + i * RMS_BLOCK < n8)
                yr[t + i * RMS_BLOCK] = rms_out8(u[i], wr[t + i * RMS_BLOCK], r, mul_fp32);
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
    if (x->dtype == C3_BF16 && y->dtype == C3_BF16 && w->dtype == C3_BF16 &&
        dim % (8 * WARP) == 0 &&
        ((uintptr_t)x->data | (uintptr_t)y->data | (uintptr_t)w->data) % 16 == 0) {
        int ch = (dim / 8 + RMS_BLOCK - 1) / RMS_BLOCK; /* chunks of eight per thread */
        if (dim >= 8 * RMS_BLOCK && ch <= 8) {
            auto kb = ch <= 1   ? k_rmsnorm_block<1>
                      : ch <= 2 ? k_rmsnorm_block<2>
                      : ch <= 4 ? k_rmsnorm_block<4>
                                : k_rmsnorm_block<8>;
            unsigned blocks = ch <= 1   ? cu_resident_grid<k_rmsnorm_block<1>>(be, RMS_BLOCK, rows)
                              : ch <= 2 ? cu_resident_grid<k_rmsnorm_block<2>>(be, RMS_BLOCK, rows)
                              : ch <= 4 ? cu_resident_grid<k_rmsnorm_block<4>>(be, RMS_BLOCK, rows)
                                        : cu_resident_grid<k_rmsnorm_block<8>>(be, RMS_BLOCK, rows);
            kb<<<blocks, RMS_BLOCK, 0, cu_of(be)->stream>>>(
                (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data,
                (const __nv_bfloat16 *)w->data, rows, dim, eps, mul_fp32);
            CU_CHECK_LAUNCH();
            return C3_OK;
        }
        /* the register version holds 1 block per SM: worth it only with rows to spare */
        bool reg = dim <= 8 * WARP * RMS_REG_CHUNKS &&
                   rows >= (int64_t)cu_of(be)->sm_count * NORM_ROWS_PER_BLOCK * 16;
        auto kern = reg ? k_rmsnorm_bf16<true> : k_rmsnorm_bf16<false>;
        kern<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
            (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data,
            (const __nv_bfloat16 *)w->data, rows, dim, eps, mul_fp32);
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
__global__ void k_qkv_rope(void *q, void *k, void *v, int ot, const void *qkv, int it,
                           const void *qn, const void *kn, int wt, const void *cs, const void *sn,
                           int ct, int64_t N, int Hq, int Hkv, int D, float eps, int mul_fp32) {
    int64_t wid = (int64_t)blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP, Hall = Hq + 2 * Hkv, half = D / 2;
    if (wid >= N * Hall) return;
    int64_t n = wid / Hall, src = wid * D;
    int h = (int)(wid - n * Hall);
    if (h >= Hq + Hkv) {
        int64_t dst = (n * Hkv + h - Hq - Hkv) * D;
        for (int d = lane; d < D; d += WARP)
            cu_st(v, ot, dst + d, cu_ld(qkv, it, src + d));
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

/* The same for bf16 everything with D = 16 G (G = 1, 2, .., 32 threads per
 * head): thread g of a head's group owns the eight values 8g.. of each half
 * (16-byte loads; its rotation partners are its own), the group reduces the
 * norm with shuffles, and a grid-stride loop gives every thread many heads,
 * so loads stay in flight (one warp per head was latency- and launch-bound:
 * 0.7 TB/s). */
__global__ void k_qkv_rope_bf16(uint4 *q, uint4 *k, uint4 *v, const uint4 *qkv, const uint4 *qn,
                                const uint4 *kn, const uint4 *cs, const uint4 *sn, int64_t N,
                                int Hq, int Hkv, int G, float eps, int mul_fp32) {
    const int Hall = Hq + 2 * Hkv, D = 16 * G, c16 = D / 8; /* 16-byte chunks per head row */
    const int g = threadIdx.x % G, lane = threadIdx.x % WARP;
    const int64_t heads = N * Hall, stride = (int64_t)gridDim.x * blockDim.x / G;
    /* warp-uniform trip count: every lane reaches the shuffles below */
    for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x - lane) / G; base < heads;
         base += stride) {
        int64_t hid = base + lane / G;
        bool act = hid < heads;
        int64_t n = act ? hid / Hall : 0;
        int h = act ? (int)(hid - n * Hall) : Hq + Hkv;
        bool isv = h >= Hq + Hkv, isq = h < Hq;
        const uint4 *x = qkv + (act ? hid : 0) * c16;
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (act) lo = x[g], hi = x[G + g];
        uint4 *o = isv   ? v + (n * Hkv + h - Hq - Hkv) * c16
                   : isq ? q + (n * Hq + h) * c16
                         : k + (n * Hkv + h - Hq) * c16;
        const uint4 *w = isv ? NULL : isq ? qn : kn;
        uint4 wl, wh, cl, ch, sl, sh;
        if (w) wl = w[g], wh = w[G + g];
        if (cs && !isv)
            cl = cs[n * c16 + g], ch = cs[n * c16 + G + g], sl = sn[n * c16 + g],
            sh = sn[n * c16 + G + g];
        float a[8], b[8];
        const __nv_bfloat162 *la = (const __nv_bfloat162 *)&lo, *lb = (const __nv_bfloat162 *)&hi;
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 fa = __bfloat1622float2(la[e]), fb = __bfloat1622float2(lb[e]);
            a[2 * e] = fa.x, a[2 * e + 1] = fa.y, b[2 * e] = fb.x, b[2 * e + 1] = fb.y;
            ss += fa.x * fa.x + fa.y * fa.y + fb.x * fb.x + fb.y * fb.y;
        }
        for (int off = 1; off < G; off <<= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, off);
        if (!act) continue;
        if (isv) {
            o[g] = lo, o[G + g] = hi;
            continue;
        }
        if (w) {
            float r = rsqrtf(ss / (float)D + eps);
            const __nv_bfloat16 *w1 = (const __nv_bfloat16 *)&wl, *w2 = (const __nv_bfloat16 *)&wh;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float A = a[e] * r, B = b[e] * r;
                if (!mul_fp32) A = cu_round(C3_BF16, A), B = cu_round(C3_BF16, B);
                a[e] = cu_round(C3_BF16, __bfloat162float(w1[e]) * A);
                b[e] = cu_round(C3_BF16, __bfloat162float(w2[e]) * B);
            }
        }
        if (cs) { /* (isv has left) */
            const __nv_bfloat16 *c1 = (const __nv_bfloat16 *)&cl, *c2 = (const __nv_bfloat16 *)&ch;
            const __nv_bfloat16 *s1 = (const __nv_bfloat16 *)&sl, *s2 = (const __nv_bfloat16 *)&sh;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float A = a[e] * __bfloat162float(c1[e]) - b[e] * __bfloat162float(s1[e]);
                b[e] = b[e] * __bfloat162float(c2[e]) + a[e] * __bfloat162float(s2[e]);
                a[e] = A;
            }
        }
        uint4 oa, ob;
        __nv_bfloat162 *pa = (__nv_bfloat162 *)&oa, *pb = (__nv_bfloat162 *)&ob;
#pragma unroll
        for (int e = 0; e < 4; e++)
            pa[e] = __floats2bfloat162_rn(a[2 * e], a[2 * e + 1]),
            pb[e] = __floats2bfloat162_rn(b[2 * e], b[2 * e + 1]);
        o[g] = oa, o[G + g] = ob;
    }
}

int cu_qkv_rope(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos,
                const c3_tensor *sin, float eps, bool mul_fp32) {
    C3_TRY(cu_check_float("qkv_rope", q, "q"));
    C3_TRY(cu_check_float("qkv_rope", k, "k"));
    C3_TRY(cu_check_float("qkv_rope", v, "v"));
    C3_TRY(cu_check_float("qkv_rope", qkv, "qkv"));
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->ne[1] != v->ne[1] ||
        q->ne[2] != k->ne[2] || k->ne[2] != v->ne[2] || q->ne[0] != k->ne[0] ||
        k->ne[0] != v->ne[0] || q->dtype != k->dtype || k->dtype != v->dtype)
        return c3_fail(
            C3_EFAIL,
            "cuda qkv_rope: q, k, v are not [N, Hq, D], [N, Hkv, D], [N, Hkv, D] of one type");
    int64_t N = q->ne[0], Hq = q->ne[1], Hkv = k->ne[1], D = q->ne[2], Hall = Hq + 2 * Hkv;
    if (D % 2 || c3_numel(qkv) != N * Hall * D)
        return c3_fail(
            C3_EFAIL,
            "cuda qkv_rope: qkv holds %lld elements, expected %lld x %lld x %lld (D even)",
            (long long)c3_numel(qkv), (long long)N, (long long)Hall, (long long)D);
    if ((q_norm && c3_numel(q_norm) != D) || (k_norm && c3_numel(k_norm) != D) ||
        (q_norm && k_norm && q_norm->dtype != k_norm->dtype))
        return c3_fail(C3_EFAIL, "cuda qkv_rope: the q/k norm weights are not [%lld] of one type",
                       (long long)D);
    if ((cos == NULL) != (sin == NULL) ||
        (cos && (c3_numel(cos) != N * D || c3_numel(sin) != N * D || cos->dtype != sin->dtype)))
        return c3_fail(C3_EFAIL, "cuda qkv_rope: cos/sin are not both [%lld, %lld] of one type",
                       (long long)N, (long long)D);
    CU_ENTER(be);
    if (N == 0) return C3_OK;
    const c3_tensor *nw = q_norm ? q_norm : k_norm;
    int64_t warps = N * Hall;
    unsigned grid = (unsigned)((warps + NORM_ROWS_PER_BLOCK - 1) / NORM_ROWS_PER_BLOCK);
    const c3_tensor *all[] = {q, k, v, qkv, q_norm, k_norm, cos, sin};
    int G = (int)(D / 16);
    bool fast = D % 16 == 0 && G >= 1 && G <= WARP && (G & (G - 1)) == 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && fast; i++)
        if (all[i]) fast = all[i]->dtype == C3_BF16 && (uintptr_t)all[i]->data % 16 == 0;
    if (fast) {
        int64_t threads = warps * G;
        unsigned blocks = (unsigned)C3_MIN((threads + CU_THREADS - 1) / CU_THREADS,
                                           (int64_t)cu_of(be)->sm_count * 16);
        k_qkv_rope_bf16<<<blocks, CU_THREADS, 0, cu_of(be)->stream>>>(
            (uint4 *)q->data, (uint4 *)k->data, (uint4 *)v->data, (const uint4 *)qkv->data,
            q_norm ? (const uint4 *)q_norm->data : NULL,
            k_norm ? (const uint4 *)k_norm->data : NULL, cos ? (const uint4 *)cos->data : NULL,
            sin ? (const uint4 *)sin->data : NULL, N, (int)Hq, (int)Hkv, G, eps, mul_fp32);
        CU_CHECK_LAUNCH();
        return C3_OK;
    }
    k_qkv_rope<<<grid, NORM_ROWS_PER_BLOCK * WARP, 0, cu_of(be)->stream>>>(
        q->data, k->data, v->data, q->dtype, qkv->data, qkv->dtype, q_norm ? q_norm->data : NULL,
        k_norm ? k_norm->data : NULL, nw ? nw->dtype : C3_F32, cos ? cos->data : NULL,
        sin ? sin->data : NULL, cos ? cos->dtype : C3_F32, N, (int)Hq, (int)Hkv, (int)D, eps,
        mul_fp32);
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
