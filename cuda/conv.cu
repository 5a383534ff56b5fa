/* conv.cu - VAE operations: 3-D convolution as im2col + cuBLAS GEMM (bf16
 * operands, fp32 accumulation, the column buffer built in chunks of output
 * positions so its size stays bounded), permute, nearest 2x upsample. */
#include "cuda_internal.h"

/* Largest im2col buffer (bytes) one conv3d chunk may use. */
#define CONV_COL_BYTES ((size_t)256 << 20)
#define SCRATCH_ALIGN 256

/* col [Kc, pc] for output positions [p0, p0+pc): x [Cin, T, H, W]. */
__global__ void k_im2col(void *col, int ct, const void *x, int xt, int64_t T, int64_t H, int64_t W, int kt,
                         int kh, int kw, int ph, int pw, int64_t Ho, int64_t Wo, int64_t p0, int64_t pc,
                         int64_t Kc) {
    (void)T;
    int64_t total = Kc * pc;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t kk = i / pc, pl = i - kk * pc, p = p0 + pl;
        int cc = (int)(kk % kw), b = (int)(kk / kw % kh), a = (int)(kk / ((int64_t)kw * kh) % kt);
        int64_t ci = kk / ((int64_t)kw * kh * kt);
        int64_t wo = p % Wo, ho = p / Wo % Ho, to = p / (Wo * Ho);
        int64_t hi = ho + b - ph, wi = wo + cc - pw;
        float v = 0.0f;
        if (hi >= 0 && hi < H && wi >= 0 && wi < W) v = cu_ld(x, xt, ((ci * T + to + a) * H + hi) * W + wi);
        cu_st(col, ct, i, v);
    }
}

/* y [Cout, P] += bias[c] */
__global__ void k_bias_rows(void *y, int yt, const void *b, int bt, int64_t Cout, int64_t P) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < Cout * P;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_st(y, yt, i, cu_ld(y, yt, i) + cu_ld(b, bt, i / P));
}

int cu_conv3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, const c3_tensor *bias, int ph,
              int pw) {
    C3_TRY(cu_check_float("conv3d", y, "y"));
    C3_TRY(cu_check_float("conv3d", x, "x"));
    C3_TRY(cu_check_float("conv3d", w, "weight"));
    if (x->ndim != 4 || w->ndim != 5)
        return c3_fail(C3_EFAIL, "cuda conv3d: x has %d dims (want [Cin,T,H,W]), weight %d (want 5)", x->ndim,
                       w->ndim);
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    int64_t Cout = w->ne[0];
    int kt = (int)w->ne[2], kh = (int)w->ne[3], kw = (int)w->ne[4];
    int64_t To = T - kt + 1, Ho = H + 2 * ph - kh + 1, Wo = W + 2 * pw - kw + 1;
    if (w->ne[1] != Cin || To <= 0 || Ho <= 0 || Wo <= 0 || ph < 0 || pw < 0)
        return c3_fail(C3_EFAIL, "cuda conv3d: weight [%lld,%lld,%d,%d,%d] does not fit x [%lld,%lld,%lld,%lld]",
                       (long long)Cout, (long long)w->ne[1], kt, kh, kw, (long long)Cin, (long long)T, (long long)H,
                       (long long)W);
    int64_t P = To * Ho * Wo, Kc = Cin * kt * kh * kw;
    if (c3_numel(y) != Cout * P)
        return c3_fail(C3_EFAIL, "cuda conv3d: y has %lld elements, expected [%lld,%lld,%lld,%lld]",
                       (long long)c3_numel(y), (long long)Cout, (long long)To, (long long)Ho, (long long)Wo);
    if (bias) {
        C3_TRY(cu_check_float("conv3d", bias, "bias"));
        if (c3_numel(bias) != Cout)
            return c3_fail(C3_EFAIL, "cuda conv3d: bias has %lld elements, expected %lld", (long long)c3_numel(bias),
                           (long long)Cout);
    }
    if (y->dtype == C3_F16) return c3_fail(C3_EFAIL, "cuda conv3d: F16 output is not supported; use BF16 or F32");
    CU_ENTER(be);
    cudaStream_t s = cu_of(be)->stream;

    /* The fp32 check path (COSMOS3_CUDA_FP32=1): all-F32 operands, an F32
     * column buffer and an fp32 GEMM without TF32. */
    if (x->dtype == C3_F32 && w->dtype == C3_F32 && y->dtype == C3_F32) {
        int64_t pc32 = C3_MAX((int64_t)1, C3_MIN(P, (int64_t)(CONV_COL_BYTES / 4 / (size_t)Kc)));
        float *col32;
        C3_TRY(cu_scratch(be, (size_t)Kc * (size_t)pc32 * 4, (void **)&col32));
        cu_ctx *c = cu_of(be);
        CUBLAS_CHECK(cublasSetStream(c->blas, s));
        const float one = 1.0f, zero = 0.0f;
        for (int64_t p0 = 0; p0 < P; p0 += pc32) {
            int64_t n = C3_MIN(pc32, P - p0);
            k_im2col<<<cu_grid(be, Kc * n), CU_THREADS, 0, s>>>(col32, C3_F32, x->data, x->dtype, T, H, W, kt, kh,
                                                                 kw, ph, pw, Ho, Wo, p0, n, Kc);
            CU_CHECK_LAUNCH();
            /* row-major y[:, p0:p0+n] = w [Cout, Kc] . col [Kc, n] -> column-major y^T = col^T . w^T */
            CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)Cout, (int)Kc, &one, col32,
                                      CUDA_R_32F, (int)n, w->data, CUDA_R_32F, (int)Kc, &zero,
                                      (float *)y->data + p0, CUDA_R_32F, (int)P, CUBLAS_COMPUTE_32F_PEDANTIC,
                                      CUBLAS_GEMM_DEFAULT));
        }
        if (bias) {
            k_bias_rows<<<cu_grid(be, Cout * P), CU_THREADS, 0, s>>>(y->data, y->dtype, bias->data, bias->dtype,
                                                                     Cout, P);
            CU_CHECK_LAUNCH();
        }
        return C3_OK;
    }
    bool pointwise = kt == 1 && kh == 1 && kw == 1 && ph == 0 && pw == 0 && x->dtype == C3_BF16;
    int64_t pc = pointwise ? P : C3_MAX((int64_t)1, C3_MIN(P, (int64_t)(CONV_COL_BYTES / 2 / (size_t)Kc)));
    size_t wb = w->dtype == C3_BF16 ? 0 : ((size_t)c3_numel(w) * 2 + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
    size_t cb = pointwise ? 0 : (size_t)Kc * (size_t)pc * 2;
    char *tmp = NULL;
    if (wb + cb) C3_TRY(cu_scratch(be, wb + cb, (void **)&tmp));
    const __nv_bfloat16 *wd;
    C3_TRY(cu_as_bf16(be, w, tmp, &wd));
    __nv_bfloat16 *col = (__nv_bfloat16 *)(tmp + wb);
    size_t ys = c3_dtype_size(y->dtype);
    for (int64_t p0 = 0; p0 < P; p0 += pc) {
        int64_t n = C3_MIN(pc, P - p0);
        const void *B;
        int64_t ldb;
        if (pointwise) {
            B = (const __nv_bfloat16 *)x->data + p0;
            ldb = P;
        } else {
            k_im2col<<<cu_grid(be, Kc * n), CU_THREADS, 0, s>>>(col, C3_BF16, x->data, x->dtype, T, H, W, kt, kh,
                                                                 kw, ph, pw, Ho, Wo, p0, n, Kc);
            CU_CHECK_LAUNCH();
            B = col;
            ldb = n;
        }
        /* y[:, p0:p0+n] (ld P) = w [Cout, Kc] . col [Kc, n] */
        C3_TRY(cu_gemm_nn(be, Cout, n, Kc, wd, Kc, B, ldb, (char *)y->data + (size_t)p0 * ys, y->dtype, P, 0.0f));
    }
    if (bias) {
        k_bias_rows<<<cu_grid(be, Cout * P), CU_THREADS, 0, s>>>(y->data, y->dtype, bias->data, bias->dtype, Cout, P);
        CU_CHECK_LAUNCH();
    }
    return C3_OK;
}

typedef struct {
    int ndim;
    int64_t yne[C3_MAX_DIMS];   /* output shape */
    int64_t xstr[C3_MAX_DIMS];  /* input stride of the dim that output dim i reads */
} perm_args;

__global__ void k_permute(void *y, int yt, const void *x, int xt, perm_args a, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t q = r / a.yne[d];
            off += (r - q * a.yne[d]) * a.xstr[d];
            r = q;
        }
        cu_st(y, yt, i, cu_ld(x, xt, off));
    }
}

int cu_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm) {
    C3_TRY(cu_check_float("permute", y, "y"));
    C3_TRY(cu_check_float("permute", x, "x"));
    int nd = x->ndim;
    if (y->data == x->data) return c3_fail(C3_EFAIL, "cuda permute: y must not alias x");
    perm_args a;
    memset(&a, 0, sizeof a);
    a.ndim = nd;
    int64_t xs[C3_MAX_DIMS];
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) xs[d] = st, st *= x->ne[d];
    bool seen[C3_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]])
            return c3_fail(C3_EFAIL, "cuda permute: perm is not a permutation of %d dims", nd);
        seen[perm[i]] = true;
        a.yne[i] = x->ne[perm[i]];
        a.xstr[i] = xs[perm[i]];
    }
    if (c3_numel(y) != c3_numel(x)) return c3_fail(C3_EFAIL, "cuda permute: y and x differ in size");
    CU_ENTER(be);
    int64_t n = c3_numel(x);
    if (n == 0) return C3_OK;
    k_permute<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data, x->dtype, a, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* x [CT, H, W] -> y [CT, 2H, 2W], nearest. */
__global__ void k_upsample2x(void *y, int yt, const void *x, int xt, int64_t CT, int64_t H, int64_t W) {
    int64_t n = CT * 4 * H * W;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t wo = i % (2 * W), ho = i / (2 * W) % (2 * H), c = i / (4 * H * W);
        cu_st(y, yt, i, cu_ld(x, xt, (c * H + ho / 2) * W + wo / 2));
    }
}

int cu_upsample2x(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    C3_TRY(cu_check_float("upsample2x", y, "y"));
    C3_TRY(cu_check_float("upsample2x", x, "x"));
    if (x->ndim < 2) return c3_fail(C3_EFAIL, "cuda upsample2x: x has %d dimensions", x->ndim);
    int64_t H = x->ne[x->ndim - 2], W = x->ne[x->ndim - 1];
    int64_t CT = (H * W != 0) ? c3_numel(x) / (H * W) : 0;
    if (c3_numel(y) != 4 * c3_numel(x))
        return c3_fail(C3_EFAIL, "cuda upsample2x: y has %lld elements, expected 4 x %lld", (long long)c3_numel(y),
                       (long long)c3_numel(x));
    CU_ENTER(be);
    if (CT == 0) return C3_OK;
    k_upsample2x<<<cu_grid(be, c3_numel(y)), CU_THREADS, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data,
                                                                                x->dtype, CT, H, W);
    CU_CHECK_LAUNCH();
    return C3_OK;
}
