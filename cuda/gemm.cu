/* gemm.cu - matrix products: the linear layer through cuBLASLt (bf16
 * operands, fp32 accumulation, bias fused in the epilogue, accumulate as
 * beta = 1) and a plain row-major GEMM through cublasGemmEx for conv3d.
 * cuBLASLt plans (descriptors, layouts, the chosen algorithm) are cached by
 * shape so a step's repeated calls skip the heuristic query. */
#include "cuda_internal.h"

#include <cuda_fp8.h>
#include <stdlib.h>

/* Plans kept per backend; the model has a handful of distinct shapes per
 * tower, so a small table with round-robin replacement is enough. */
#define CU_GEMM_PLANS 64
/* Pointer alignment (bytes) beyond which cuBLASLt gains nothing. */
#define GEMM_MAX_ALIGN 256

typedef struct {
    bool used;
    int64_t M, N, K;
    c3_dtype yt;
    bool bias, accumulate;
    bool fp8; /* E4M3 x E4M3 operands (bf16 D, ld ldc) */
    int64_t ldc;
    uint32_t align; /* smallest operand pointer alignment (bytes) the plan assumes */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} cu_plan;

/* COSMOS3_FP8_CALIBRATE=N (--precision fp8, weights without an input_scale):
 * the first N calls of each FP8 weight take max|x| into that weight's own
 * device slot (the max over those calls); later calls quantise with the slot
 * as a static scale and skip the amax pass. Unset or 0: every call its own
 * max|x| / 448. A weight is known by its storage and its scale (offload
 * reuses storage for other layers). The GEN layer graph is recorded on the
 * second step, so with graphs N = 1 is what freezes the scale (N > 1 would
 * record the calibrating amax and keep raising the scale on every replay). */
#define CU_CALIB_MAX 8192
typedef struct {
    const void *w;
    float ws;
    int calls;
} cu_calib;

struct cu_gemm_cache {
    cu_plan plan[CU_GEMM_PLANS];
    int next;
    cu_calib *cal; /* [ncal]; slot i is amax_dev[i] */
    int ncal;
    unsigned *amax_dev; /* [CU_CALIB_MAX], zeroed */
};

static int calib_calls(void) { return c3_env()->fp8_calibrate; }

/* The calibration slot of w (NULL: calibration off, or no slot left) and
 * whether its scale is frozen (the calibrating calls are done). */
static int calib_slot(c3_backend *be, const c3_tensor *w, unsigned **slot, bool *frozen) {
    *slot = NULL, *frozen = false;
    int n = calib_calls();
    if (n <= 0) return C3_OK;
    cu_ctx *c = cu_of(be);
    if (!c->gemm) c->gemm = (struct cu_gemm_cache *)xcalloc(1, sizeof *c->gemm);
    struct cu_gemm_cache *g = c->gemm;
    if (!g->amax_dev) {
        CU_CHECK(cudaMalloc(&g->amax_dev, CU_CALIB_MAX * sizeof(unsigned)));
        CU_CHECK(cudaMemsetAsync(g->amax_dev, 0, CU_CALIB_MAX * sizeof(unsigned), c->stream));
        g->cal = (cu_calib *)xcalloc(CU_CALIB_MAX, sizeof *g->cal);
    }
    int i = 0;
    while (i < g->ncal && !(g->cal[i].w == w->data && g->cal[i].ws == w->fp8.wscale[0])) i++;
    if (i == g->ncal) {
        if (g->ncal == CU_CALIB_MAX) return C3_OK;
        g->cal[g->ncal++] = (cu_calib){w->data, w->fp8.wscale[0], 0};
    }
    *slot = g->amax_dev + i;
    *frozen = g->cal[i].calls >= n;
    g->cal[i].calls++;
    return C3_OK;
}

static void plan_release(cu_plan *p) {
    if (!p->used) return;
    (void)cublasLtMatmulDescDestroy(p->desc);
    (void)cublasLtMatrixLayoutDestroy(p->la);
    (void)cublasLtMatrixLayoutDestroy(p->lb);
    (void)cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

void cu_gemm_cache_free(c3_backend *be) {
    cu_ctx *c = cu_of(be);
    if (!c->gemm) return;
    for (int i = 0; i < CU_GEMM_PLANS; i++) plan_release(&c->gemm->plan[i]);
    if (c->gemm->amax_dev) (void)cudaFree(c->gemm->amax_dev);
    free(c->gemm->cal);
    free(c->gemm);
    c->gemm = NULL;
}

static cudaDataType_t cuda_type(c3_dtype t) {
    return t == C3_F32 ? CUDA_R_32F : t == C3_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* Build the plan for y[M,N] = x[M,K] . w[N,K]^T (+bias) (+y). In cuBLAS's
 * column-major terms: D (N x M, ld N) = op_T(w: K x N, ld K) . (x: K x M, ld K). */
static int plan_make(c3_backend *be, cu_plan *p, int64_t M, int64_t N, int64_t K, c3_dtype yt,
                     bool bias, bool accumulate, uint32_t align, bool fp8, int64_t ldc) {
    cu_ctx *c = cu_of(be);
    memset(p, 0, sizeof *p);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    if (bias) {
        cudaDataType_t bt = cuda_type(yt);
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)K, (uint64_t)N, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)K, (uint64_t)M, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(yt), (uint64_t)N, (uint64_t)M, ldc));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CU_LT_WORKSPACE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t al[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (size_t i = 0; i < C3_ARRAY_LEN(al) && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    p->used = true; /* so plan_release frees what was made */
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        plan_release(p);
        return c3_fail(C3_EFAIL, "cuda linear: cuBLASLt has no algorithm for [%lld x %lld] . [%lld x %lld]^T (%s)",
                       (long long)M, (long long)K, (long long)N, (long long)K,
                       st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(st) : "none found");
    }
    p->algo = res.algo;
    p->M = M, p->N = N, p->K = K, p->yt = yt, p->bias = bias, p->accumulate = accumulate, p->align = align;
    p->fp8 = fp8, p->ldc = ldc;
    return C3_OK;
}

static int plan_get(c3_backend *be, int64_t M, int64_t N, int64_t K, c3_dtype yt, bool bias,
                    bool accumulate, uint32_t align, cu_plan **out, bool fp8 = false,
                    int64_t ldc = 0) {
    if (!ldc) ldc = N;
    cu_ctx *c = cu_of(be);
    if (!c->gemm) c->gemm = (struct cu_gemm_cache *)xcalloc(1, sizeof *c->gemm);
    for (int i = 0; i < CU_GEMM_PLANS; i++) {
        cu_plan *p = &c->gemm->plan[i];
        if (p->used && p->M == M && p->N == N && p->K == K && p->yt == yt && p->bias == bias &&
            p->accumulate == accumulate && p->align == align && p->fp8 == fp8 && p->ldc == ldc) {
            *out = p;
            return C3_OK;
        }
    }
    cu_plan *p = &c->gemm->plan[c->gemm->next];
    c->gemm->next = (c->gemm->next + 1) % CU_GEMM_PLANS;
    plan_release(p);
    C3_TRY(plan_make(be, p, M, N, K, yt, bias, accumulate, align, fp8, ldc));
    *out = p;
    return C3_OK;
}

/* ------------------------------------------------------------- FP8 weights */

/* max |x| of n bf16 values into *amax (float bits; x >= 0 orders as uint). */
__global__ void k_amax(const __nv_bfloat16 *x, int64_t n, unsigned *amax) {
    float m = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(__bfloat162float(x[i])));
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(amax, __float_as_uint(m));
}

/* q = E4M3(x / s), saturating, s = the static scale, or max|x| / 448 from
 * *amax; s is also left in *slot for the product's B scale. */
__global__ void k_quant(const __nv_bfloat16 *x, int64_t n, __nv_fp8_storage_t *q, float xs,
                        const unsigned *amax, float *slot) {
    float s = xs;
    if (amax) {
        float a = __uint_as_float(*amax);
        s = a > 0 ? a / 448.0f : 1.0f;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *slot = s;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        q[i] = __nv_cvt_float_to_fp8(__bfloat162float(x[i]) / s, __NV_SATFINITE, __NV_E4M3);
}

/* out[r, k] = bf16(code * wscale of row r's segment), rows [N, K]. */
__global__ void k_dequant(const __nv_fp8_storage_t *w, __nv_bfloat16 *out, int64_t K, int64_t n,
                          int64_t r1, int64_t r2, float s0, float s1, float s2) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / K;
        float s = r < r1 ? s0 : r < r2 ? s1 : s2;
        __nv_fp8_e4m3 v;
        v.__x = w[i];
        out[i] = __float2bfloat16_rn((float)v * s);
    }
}

/* The backend's quantize_e4m3 (--precision fp8 at load): max|src| by k_amax,
 * brought to the host, the scale computed there as model_load.c's host path
 * does (amax / 448 in float, 1 for an all-zero tensor), then k_quant with it
 * as a static scale: the codes of c3_f32_to_e4m3(x / s), bit for bit
 * (ops_check --quant). */
int cu_quantize_e4m3(c3_backend *be, c3_tensor *dst, const c3_tensor *src, float *scale) {
    int64_t n = c3_numel(src);
    if (src->dtype != C3_BF16 || dst->dtype != C3_F8E4M3 || c3_numel(dst) != n)
        return c3_fail(C3_EFAIL,
                       "cuda quantize_e4m3: needs BF16 src and F8_E4M3 dst of the same size "
                       "(%s %lld, %s %lld)",
                       c3_dtype_name(src->dtype), (long long)n, c3_dtype_name(dst->dtype),
                       (long long)c3_numel(dst));
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    char *tmp;
    C3_TRY(cu_scratch(be, 2 * GEMM_MAX_ALIGN, (void **)&tmp));
    float *slot = (float *)tmp; /* k_quant leaves the scale here (unused) */
    unsigned *amax = (unsigned *)(tmp + GEMM_MAX_ALIGN);
    float s = *scale;
    if (!(s > 0)) {
        CU_CHECK(cudaMemsetAsync(amax, 0, sizeof *amax, c->stream));
        if (n > 0) {
            k_amax<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>(
                (const __nv_bfloat16 *)src->data, n, amax);
            CU_CHECK(cudaGetLastError());
        }
        unsigned bits = 0;
        CU_CHECK(cudaMemcpyAsync(&bits, amax, sizeof bits, cudaMemcpyDeviceToHost, c->stream));
        CU_CHECK(cudaStreamSynchronize(c->stream));
        float a;
        memcpy(&a, &bits, sizeof a);
        s = a > 0 ? a / C3_E4M3_MAX : 1.0f;
    }
    if (n > 0) {
        k_quant<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>(
            (const __nv_bfloat16 *)src->data, n, (__nv_fp8_storage_t *)dst->data, s, NULL, slot);
        CU_CHECK(cudaGetLastError());
    }
    *scale = s;
    return C3_OK;
}

/* y = x . w^T (+y) with w E4M3 codes: FP8 x FP8 through cuBLASLt (each
 * segment one product into its columns of y, alpha = its weight scale, the
 * activations' scale as B's scale), or (be->fp8_act false) the dequantised
 * bf16 weight through the bf16 product. */
static int linear_fp8(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                      const c3_tensor *bias, bool accumulate) {
    int64_t N = w->ne[0], K = w->ne[1];
    if (w->ndim != 2 || K <= 0 || c3_numel(x) % K)
        return c3_fail(C3_EFAIL,
                       "cuda linear (fp8): weight [%lld, %lld] does not fit x of %lld elements",
                       (long long)N, (long long)K, (long long)c3_numel(x));
    int64_t M = c3_numel(x) / K;
    /* y F32: the row-parallel partial sums of TP (linear_rowpar) */
    if (x->dtype != C3_BF16 || (y->dtype != C3_BF16 && y->dtype != C3_F32) ||
        c3_numel(y) != M * N || bias)
        return c3_fail(C3_EFAIL,
                       "cuda linear (fp8): needs bf16 x, bf16 or f32 y [%lld, %lld] and no bias",
                       (long long)M, (long long)N);
    const c3_fp8 *f = &w->fp8;
    if (f->nseg < 1 || f->nseg > C3_FP8_MAX_SEG)
        return c3_fail(C3_EFAIL, "cuda linear (fp8): the weight has no scales");
    CU_ENTER(be);
    if (M == 0 || N == 0) return C3_OK;
    cu_ctx *c = cu_of(be);
    int64_t r1 = f->rows[0], r2 = f->nseg > 1 ? r1 + f->rows[1] : N;
    if (f->nseg == 1) r1 = r2 = N;
    if (!be->fp8_act) { /* W8A16 */
        void *wb;
        C3_TRY(cu_scratch(be, (size_t)N * K * 2, &wb));
        int64_t n = N * K;
        k_dequant<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>(
            (const __nv_fp8_storage_t *)w->data, (__nv_bfloat16 *)wb, K, n, r1, r2, f->wscale[0],
            f->nseg > 1 ? f->wscale[1] : f->wscale[0], f->nseg > 2 ? f->wscale[2] : f->wscale[0]);
        CU_CHECK(cudaGetLastError());
        c3_tensor wd = *w;
        wd.data = wb;
        wd.dtype = C3_BF16;
        memset(&wd.fp8, 0, sizeof wd.fp8);
        return cu_linear(be, y, x, &wd, NULL, accumulate);
    }
    size_t qb = ((size_t)M * K + GEMM_MAX_ALIGN - 1) / GEMM_MAX_ALIGN * GEMM_MAX_ALIGN;
    char *tmp;
    C3_TRY(cu_scratch(be, qb + GEMM_MAX_ALIGN, (void **)&tmp));
    __nv_fp8_storage_t *xq = (__nv_fp8_storage_t *)tmp;
    float *slot = (float *)(tmp + qb);
    unsigned *amax = (unsigned *)(tmp + qb + 16);
    int64_t n = M * K;
    if (!(f->xscale > 0)) {
        unsigned *cal;
        bool frozen;
        C3_TRY(calib_slot(be, w, &cal, &frozen));
        if (cal) amax = cal; /* the max over the calibrating calls, then fixed */
        else CU_CHECK(cudaMemsetAsync(amax, 0, sizeof *amax, c->stream));
        if (!frozen) {
            k_amax<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>((const __nv_bfloat16 *)x->data,
                                                                 n, amax);
            CU_CHECK(cudaGetLastError());
        }
    }
    k_quant<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>(
        (const __nv_bfloat16 *)x->data, n, xq, f->xscale, f->xscale > 0 ? NULL : amax, slot);
    CU_CHECK(cudaGetLastError());
    int64_t r0 = 0;
    for (int sgi = 0; sgi < f->nseg; sgi++) {
        int64_t Ns = f->nseg == 1 ? N : f->rows[sgi];
        const void *wa = (const uint8_t *)w->data + (size_t)r0 * K;
        void *yd = (char *)y->data + (size_t)r0 * c3_dtype_size(y->dtype);
        uintptr_t bits = (uintptr_t)wa | (uintptr_t)xq | (uintptr_t)yd | GEMM_MAX_ALIGN;
        uint32_t align = (uint32_t)(bits & (~bits + 1));
        cu_plan *p;
        C3_TRY(plan_get(be, M, Ns, K, y->dtype, false, accumulate, align, &p, true, N));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                    &slot, sizeof slot));
        float alpha = f->wscale[sgi], beta = accumulate ? 1.0f : 0.0f;
        CUBLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &alpha, wa, p->la, xq, p->lb, &beta, yd, p->lc,
                                    yd, p->lc, &p->algo, c->lt_ws, CU_LT_WORKSPACE, c->stream));
        r0 += Ns;
    }
    return C3_OK;
}

int cu_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, const c3_tensor *bias,
              bool accumulate) {
    if (w->dtype == C3_F8E4M3) return linear_fp8(be, y, x, w, bias, accumulate);
    C3_TRY(cu_check_float("linear", y, "y"));
    C3_TRY(cu_check_float("linear", x, "x"));
    C3_TRY(cu_check_float("linear", w, "w"));
    if (w->ndim != 2) return c3_fail(C3_EFAIL, "cuda linear: weight has %d dimensions, expected 2", w->ndim);
    int64_t N = w->ne[0], K = w->ne[1]; /* w [N, K] */
    if (K <= 0 || c3_numel(x) % K)
        return c3_fail(C3_EFAIL, "cuda linear: x has %lld elements, not rows of %lld", (long long)c3_numel(x),
                       (long long)K);
    int64_t M = c3_numel(x) / K; /* x [M, K], y [M, N] */
    if (c3_numel(y) != M * N)
        return c3_fail(C3_EFAIL, "cuda linear: y has %lld elements, expected %lld x %lld", (long long)c3_numel(y),
                       (long long)M, (long long)N);
    if (bias) {
        C3_TRY(cu_check_float("linear", bias, "bias"));
        if (c3_numel(bias) != N)
            return c3_fail(C3_EFAIL, "cuda linear: bias has %lld elements, expected %lld",
                           (long long)c3_numel(bias), (long long)N);
    }
    if (y->dtype == C3_F16) return c3_fail(C3_EFAIL, "cuda linear: F16 output is not supported; use BF16 or F32");
    CU_ENTER(be);
    if (M == 0 || N == 0) return C3_OK;
    cu_ctx *c = cu_of(be);

    /* The fp32 check path (COSMOS3_CUDA_FP32=1): all-F32 operands take a full
     * fp32 GEMM without TF32, so CUDA results can be held to the fp32 goldens. */
    if (x->dtype == C3_F32 && w->dtype == C3_F32 && y->dtype == C3_F32) {
        if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
            return c3_fail(C3_EFAIL, "cuda linear: %lld x %lld x %lld exceeds cuBLAS's int range", (long long)M,
                           (long long)N, (long long)K);
        float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
        /* row-major y[M,N] = x[M,K] . w[N,K]^T is column-major y^T = w . x^T */
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, w->data,
                                  CUDA_R_32F, (int)K, x->data, CUDA_R_32F, (int)K, &beta, y->data, CUDA_R_32F,
                                  (int)N, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
        if (bias) C3_TRY(cu_add_bias_rows(be, y, bias, M, N));
        return C3_OK;
    }

    /* Operands not already bf16 (and a bias not in y's type) go through scratch. */
    size_t xb = x->dtype == C3_BF16 ? 0 : (size_t)c3_numel(x) * 2;
    size_t wb = w->dtype == C3_BF16 ? 0 : (size_t)c3_numel(w) * 2;
    size_t bb = (bias && bias->dtype != y->dtype) ? (size_t)N * c3_dtype_size(y->dtype) : 0;
    xb = (xb + GEMM_MAX_ALIGN - 1) / GEMM_MAX_ALIGN * GEMM_MAX_ALIGN;
    wb = (wb + GEMM_MAX_ALIGN - 1) / GEMM_MAX_ALIGN * GEMM_MAX_ALIGN;
    char *tmp = NULL;
    if (xb + wb + bb) C3_TRY(cu_scratch(be, xb + wb + bb, (void **)&tmp));
    const __nv_bfloat16 *xd, *wd;
    C3_TRY(cu_as_bf16(be, x, tmp, &xd));
    C3_TRY(cu_as_bf16(be, w, tmp + xb, &wd));
    const void *bd = bias ? bias->data : NULL;
    if (bias && bb) {
        C3_TRY(cu_convert(be, tmp + xb + wb, y->dtype, bias->data, bias->dtype, N));
        bd = tmp + xb + wb;
    }

    /* Views can start anywhere: plan for the alignment the pointers really have. */
    uintptr_t bits = (uintptr_t)xd | (uintptr_t)wd | (uintptr_t)y->data | (uintptr_t)bd | GEMM_MAX_ALIGN;
    uint32_t align = (uint32_t)(bits & (~bits + 1));
    cu_plan *p;
    C3_TRY(plan_get(be, M, N, K, y->dtype, bias != NULL, accumulate, align, &p));
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bd, sizeof bd));
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &alpha, wd, p->la, xd, p->lb, &beta, y->data, p->lc, y->data,
                                p->lc, &p->algo, c->lt_ws, CU_LT_WORKSPACE, c->stream));
    return C3_OK;
}

int cu_gemm_nn(c3_backend *be, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
               int64_t ldb, void *C, c3_dtype ct, int64_t ldc, float beta) {
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return c3_fail(C3_EFAIL, "cuda gemm: %lld x %lld x %lld exceeds cuBLAS's int range", (long long)M,
                       (long long)N, (long long)K);
    cu_ctx *c = cu_of(be);
    float alpha = 1.0f;
    /* Row-major C = A . B is column-major C^T = B^T . A^T, both stored as-is. */
    CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B, CUDA_R_16BF,
                              (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C, cuda_type(ct), (int)ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return C3_OK;
}
