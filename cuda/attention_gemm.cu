/* attention_gemm.cu - attention for head dims the flash kernels do not take
 * (the Wan2.2 VAE's mid-block attention is one head of 1024 channels over the
 * h*w tokens of a latent frame): scores with cuBLAS, a row softmax in fp32,
 * then P.V with cuBLAS. The [Sq, Skv] score matrix is materialised, which is
 * fine at VAE sizes (4096 x 4096 fp32 = 64 MiB) and never used for the GEN
 * tower (head dim 128 goes to attention.cu).
 *
 * Row-major tensors seen by column-major cuBLAS: X_rm [r, c] is X^T in
 * column-major with ld = row stride. Per head h (kv head h / group):
 *   S^T [Skv, Sq] = K_h^T(op T) . Q_h          (m Skv, n Sq, k D)
 *   O_h^T [D, Sq] = V_h . P^T                   (m D,   n Sq, k Skv)
 */
#include "cuda_internal.h"

#define ATTG_THREADS 256

/* p[i, j] = exp(scale * s[i, j] - max_j) / sum_j, written as bf16. */
__global__ void attg_softmax(const float *s, __nv_bfloat16 *p, int64_t rows, int64_t cols, float scale) {
    __shared__ float red[ATTG_THREADS / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = s + r * cols;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j] * scale);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        if (threadIdx.x < 32) {
            float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : -INFINITY;
            for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
            if (threadIdx.x == 0) red[0] = v;
        }
        __syncthreads();
        m = red[0];
        __syncthreads();
        float sum = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += __expf(row[j] * scale - m);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
        __syncthreads();
        if (threadIdx.x < 32) {
            float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (threadIdx.x == 0) red[0] = v;
        }
        __syncthreads();
        float inv = 1.f / red[0];
        __syncthreads();
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            p[r * cols + j] = __float2bfloat16_rn(__expf(row[j] * scale - m) * inv);
    }
}

static cudaDataType_t cu_type(c3_dtype t) { return t == C3_F32 ? CUDA_R_32F : t == C3_F16 ? CUDA_R_16F : CUDA_R_16BF; }

/* One key segment, no causal mask, keys beyond `valid` ignored. */
int cu_attention_gemm(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, float scale) {
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    int64_t Sq = q->ne[0], Hq = q->ne[1], D = q->ne[2];
    int64_t Skv = kv->valid, Hkv = kv->k->ne[1];
    if (Hkv <= 0 || Hq % Hkv || kv->k->ne[2] != D || kv->v->ne[2] != D)
        return c3_fail(C3_EFAIL, "cuda attention (gemm): q [%lld, %lld, %lld] does not match k/v heads %lld",
                       (long long)Sq, (long long)Hq, (long long)D, (long long)Hkv);
    if (Skv <= 0 || Sq <= 0) return C3_OK;
    int64_t group = Hq / Hkv;
    /* scratch: q, k, v as bf16 (when they are not), S fp32, P bf16 */
    size_t nq = (size_t)c3_numel(q), nk = (size_t)c3_numel(kv->k), nv = (size_t)c3_numel(kv->v);
    size_t sbytes = (size_t)Sq * (size_t)Skv * sizeof(float), pbytes = (size_t)Sq * (size_t)Skv * 2;
    size_t qb = (nq * 2 + 255) & ~(size_t)255, kb = (nk * 2 + 255) & ~(size_t)255, vb = (nv * 2 + 255) & ~(size_t)255;
    size_t sb = (sbytes + 255) & ~(size_t)255;
    void *scr;
    C3_TRY(cu_scratch(be, qb + kb + vb + sb + pbytes, &scr));
    char *base = (char *)scr;
    const __nv_bfloat16 *Q, *K, *V;
    C3_TRY(cu_as_bf16(be, q, base, &Q));
    C3_TRY(cu_as_bf16(be, kv->k, base + qb, &K));
    C3_TRY(cu_as_bf16(be, kv->v, base + qb + kb, &V));
    float *S = (float *)(base + qb + kb + vb);
    __nv_bfloat16 *P = (__nv_bfloat16 *)(base + qb + kb + vb + sb);
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    const float one = 1.f, zero = 0.f;
    for (int64_t h = 0; h < Hq; h++) {
        int64_t hk = h / group;
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Skv, (int)Sq, (int)D, &one,
                                  K + hk * D, CUDA_R_16BF, (int)(Hkv * D), Q + h * D, CUDA_R_16BF, (int)(Hq * D),
                                  &zero, S, CUDA_R_32F, (int)Skv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        unsigned grid = (unsigned)(Sq < (int64_t)c->sm_count * 8 ? Sq : (int64_t)c->sm_count * 8);
        attg_softmax<<<grid, ATTG_THREADS, 0, c->stream>>>(S, P, Sq, Skv, scale);
        CU_CHECK_LAUNCH();
        char *o = (char *)out->data + (size_t)(h * D) * c3_dtype_size(out->dtype);
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)Sq, (int)Skv, &one,
                                  V + hk * D, CUDA_R_16BF, (int)(Hkv * D), P, CUDA_R_16BF, (int)Skv, &zero, o,
                                  cu_type(out->dtype), (int)(Hq * D), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return C3_OK;
}
