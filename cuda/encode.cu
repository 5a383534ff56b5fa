/* encode.cu - the VAE encoder's operations: the strided 3-D convolution of
 * its downsamplers (im2col with strides and zero padding on chosen sides,
 * then the GEMM as conv.cu does it: bf16 operands with fp32 accumulation, or
 * all-fp32 on the COSMOS3_CUDA_FP32 check path) and AvgDown3D, the
 * shortcut's space/time-to-channel average. */
#include "cuda_internal.h"

/* Largest im2col buffer (bytes) one chunk of output positions may use. */
#define ENC_COL_BYTES ((size_t)256 << 20)
#define ENC_SCRATCH_ALIGN 256

/* col [Kc, pc] for output positions [p0, p0 + pc): x [Cin, T, H, W]. */
static __global__ void k_im2col_strided(void *col, int ct, const void *x, int xt, int64_t T,
                                        int64_t H, int64_t W, int kt, int kh, int kw, int st,
                                        int sh, int sw, int top, int left, int64_t Ho, int64_t Wo,
                                        int64_t p0, int64_t pc, int64_t Kc) {
    int64_t total = Kc * pc;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t kk = i / pc, p = p0 + (i - kk * pc);
        int dx = (int)(kk % kw), dy = (int)(kk / kw % kh), dt = (int)(kk / ((int64_t)kw * kh) % kt);
        int64_t ci = kk / ((int64_t)kw * kh * kt);
        int64_t wo = p % Wo, ho = p / Wo % Ho, to = p / (Wo * Ho);
        int64_t hi = ho * sh + dy - top, wi = wo * sw + dx - left, ti = to * st + dt;
        float v = 0.0f;
        if (hi >= 0 && hi < H && wi >= 0 && wi < W)
            v = cu_ld(x, xt, ((ci * T + ti) * H + hi) * W + wi);
        cu_st(col, ct, i, v);
    }
}

/* y [Cout, P] += bias[c] */
static __global__ void k_enc_bias(void *y, int yt, const void *b, int bt, int64_t Cout, int64_t P) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < Cout * P;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_st(y, yt, i, cu_ld(y, yt, i) + cu_ld(b, bt, i / P));
}

/* y[o, t, h, w] = mean over the G inputs of output channel o (backend.h). */
static __global__ void k_avgdown(void *y, int yt, const void *x, int xt, int64_t T, int64_t H,
                                 int64_t W, int64_t To, int64_t Ho, int64_t Wo, int ft, int fs,
                                 int64_t G, int64_t pad, int64_t n) {
    int64_t F = (int64_t)ft * fs * fs;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = i % Wo, oh = i / Wo % Ho, ot = i / (Wo * Ho) % To, o = i / (Wo * Ho * To);
        float s = 0.0f;
        for (int64_t g = 0; g < G; g++) {
            int64_t idx = o * G + g, c = idx / F, r = idx % F;
            int64_t a = r / (fs * fs), b = r / fs % fs, d = r % fs, t = ot * ft + a - pad;
            if (t >= 0) s += cu_ld(x, xt, ((c * T + t) * H + oh * fs + b) * W + ow * fs + d);
        }
        cu_st(y, yt, i, s / (float)G);
    }
}

int cu_conv3d_strided(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                      const c3_tensor *bias, const int stride[3], const int pad[4]) {
    C3_TRY(cu_check_float("conv3d_strided", y, "y"));
    C3_TRY(cu_check_float("conv3d_strided", x, "x"));
    C3_TRY(cu_check_float("conv3d_strided", w, "weight"));
    if (x->ndim != 4 || w->ndim != 5)
        return c3_fail(C3_EFAIL,
                       "cuda conv3d_strided: x has %d dims (want [Cin,T,H,W]), weight %d (want 5)",
                       x->ndim, w->ndim);
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], Cout = w->ne[0];
    int kt = (int)w->ne[2], kh = (int)w->ne[3], kw = (int)w->ne[4];
    int st = stride[0], sh = stride[1], sw = stride[2];
    if (st < 1 || sh < 1 || sw < 1 || pad[0] < 0 || pad[1] < 0 || pad[2] < 0 || pad[3] < 0)
        return c3_fail(C3_EFAIL,
                       "cuda conv3d_strided: strides must be positive and padding not negative");
    int64_t Hp = H + pad[0] + pad[1], Wp = W + pad[2] + pad[3];
    if (w->ne[1] != Cin || T < kt || Hp < kh || Wp < kw)
        return c3_fail(
            C3_EFAIL,
            "cuda conv3d_strided: weight [%lld,%lld,%d,%d,%d] does not fit x [%lld,%lld,%lld,%lld]",
            (long long)Cout, (long long)w->ne[1], kt, kh, kw, (long long)Cin, (long long)T,
            (long long)H, (long long)W);
    int64_t To = (T - kt) / st + 1, Ho = (Hp - kh) / sh + 1, Wo = (Wp - kw) / sw + 1;
    int64_t P = To * Ho * Wo, Kc = Cin * kt * kh * kw;
    if (y->ndim != 4 || y->ne[0] != Cout || y->ne[1] != To || y->ne[2] != Ho || y->ne[3] != Wo)
        return c3_fail(C3_EFAIL, "cuda conv3d_strided: y is not [%lld, %lld, %lld, %lld]",
                       (long long)Cout, (long long)To, (long long)Ho, (long long)Wo);
    if (bias) {
        C3_TRY(cu_check_float("conv3d_strided", bias, "bias"));
        if (c3_numel(bias) != Cout)
            return c3_fail(C3_EFAIL, "cuda conv3d_strided: bias has %lld elements, expected %lld",
                           (long long)c3_numel(bias), (long long)Cout);
    }
    if (y->dtype == C3_F16)
        return c3_fail(C3_EFAIL, "cuda conv3d_strided: F16 output is not supported");
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    cudaStream_t s = c->stream;
    if (x->dtype == C3_F32 && w->dtype == C3_F32 && y->dtype == C3_F32) { /* the fp32 check path */
        int64_t pc = C3_MAX((int64_t)1, C3_MIN(P, (int64_t)(ENC_COL_BYTES / 4 / (size_t)Kc)));
        float *col;
        C3_TRY(cu_scratch(be, (size_t)Kc * (size_t)pc * 4, (void **)&col));
        CUBLAS_CHECK(cublasSetStream(c->blas, s));
        const float one = 1.0f, zero = 0.0f;
        for (int64_t p0 = 0; p0 < P; p0 += pc) {
            int64_t n = C3_MIN(pc, P - p0);
            k_im2col_strided<<<cu_grid(be, Kc * n), CU_THREADS, 0, s>>>(
                col, C3_F32, x->data, x->dtype, T, H, W, kt, kh, kw, st, sh, sw, pad[0], pad[2], Ho,
                Wo, p0, n, Kc);
            CU_CHECK_LAUNCH();
            /* row-major y[:, p0:p0+n] = w [Cout, Kc] . col [Kc, n] (column-major: y^T = col^T .
             * w^T) */
            CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)Cout, (int)Kc,
                                      &one, col, CUDA_R_32F, (int)n, w->data, CUDA_R_32F, (int)Kc,
                                      &zero, (float *)y->data + p0, CUDA_R_32F, (int)P,
                                      CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
        }
    } else {
        int64_t pc = C3_MAX((int64_t)1, C3_MIN(P, (int64_t)(ENC_COL_BYTES / 2 / (size_t)Kc)));
        size_t wb = w->dtype == C3_BF16 ? 0
                                        : ((size_t)c3_numel(w) * 2 + ENC_SCRATCH_ALIGN - 1) /
                                              ENC_SCRATCH_ALIGN * ENC_SCRATCH_ALIGN;
        char *tmp;
        C3_TRY(cu_scratch(be, wb + (size_t)Kc * (size_t)pc * 2, (void **)&tmp));
        const __nv_bfloat16 *wd;
        C3_TRY(cu_as_bf16(be, w, tmp, &wd));
        __nv_bfloat16 *col = (__nv_bfloat16 *)(tmp + wb);
        size_t ys = c3_dtype_size(y->dtype);
        for (int64_t p0 = 0; p0 < P; p0 += pc) {
            int64_t n = C3_MIN(pc, P - p0);
            k_im2col_strided<<<cu_grid(be, Kc * n), CU_THREADS, 0, s>>>(
                col, C3_BF16, x->data, x->dtype, T, H, W, kt, kh, kw, st, sh, sw, pad[0], pad[2],
                Ho, Wo, p0, n, Kc);
            CU_CHECK_LAUNCH();
            C3_TRY(cu_gemm_nn(be, Cout, n, Kc, wd, Kc, col, n, (char *)y->data + (size_t)p0 * ys,
                              y->dtype, P, 0.0f));
        }
    }
    if (bias) {
        k_enc_bias<<<cu_grid(be, Cout * P), CU_THREADS, 0, s>>>(y->data, y->dtype, bias->data,
                                                                bias->dtype, Cout, P);
        CU_CHECK_LAUNCH();
    }
    return C3_OK;
}

int cu_avgdown3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, int ft, int fs) {
    C3_TRY(cu_check_float("avgdown3d", y, "y"));
    C3_TRY(cu_check_float("avgdown3d", x, "x"));
    if (x->ndim != 4 || y->ndim != 4 || ft < 1 || fs < 1)
        return c3_fail(C3_EFAIL, "cuda avgdown3d: expected x, y [C, T, H, W] and positive factors");
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], Cout = y->ne[0];
    int64_t Tp = (T + ft - 1) / ft * ft, F = (int64_t)ft * fs * fs;
    if (H % fs || W % fs || Cout < 1 || (Cin * F) % Cout || y->ne[1] != Tp / ft ||
        y->ne[2] != H / fs || y->ne[3] != W / fs)
        return c3_fail(C3_EFAIL,
                       "cuda avgdown3d: [%lld, %lld, %lld, %lld] by %d x %d x %d does not give y",
                       (long long)Cin, (long long)T, (long long)H, (long long)W, ft, fs, fs);
    CU_ENTER(be);
    int64_t n = c3_numel(y);
    k_avgdown<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(
        y->data, y->dtype, x->data, x->dtype, T, H, W, Tp / ft, H / fs, W / fs, ft, fs,
        Cin * F / Cout, Tp - T, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}
