/* cuda_internal.h - private state and helpers shared by the CUDA backend's
 * files: backend_cuda.cu (memory, transfers, elementwise ops, the table),
 * gemm.cu (cuBLASLt linear), norm_rope.cu (RMSNorm, RoPE, channel norm),
 * attention.cu (flash attention), conv.cu (conv3d, permute, upsample).
 * Nothing outside cuda/ includes this; the C side sees only backend.h. */
#ifndef COSMOS3_CUDA_INTERNAL_H
#define COSMOS3_CUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.h"

extern "C" {
#include "backend.h"
#include "cuda_module.h"
#include "env.h"
}

/* Threads per block of the elementwise kernels, and how many blocks per
 * multiprocessor a grid-stride launch asks for at most. */
#define CU_THREADS 256
#define CU_BLOCKS_PER_SM 8
/* cuBLASLt workspace (bytes); Hopper kernels want 32 MiB. */
#define CU_LT_WORKSPACE (32u << 20)

typedef struct {
    int device;
    int sm_count;
    size_t smem_optin;   /* largest dynamic shared memory a block may ask for */
    cudaStream_t stream; /* every op is queued here, in order */
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_ws;
    void *scratch; /* per-op temporary space, stream-ordered reuse */
    size_t scratch_bytes;
    struct cu_gemm_cache *gemm; /* cuBLASLt plans by shape (gemm.cu) */
    cudaStream_t copy_stream; /* layerwise offload: host->device weight copies */
    /* graphs: while recording, scratch cannot grow; once a recorded graph
     * names the scratch buffer, a larger one no longer frees it (kept in
     * retired until the backend goes) */
    bool recording, scratch_in_graph;
    void *retired[16];
    int nretired;
} cu_ctx;

static inline cu_ctx *cu_of(c3_backend *be) { return (cu_ctx *)be->ctx; }

/* Make `be`'s device current on this thread (cheap when already current). */
#define CU_ENTER(be) CU_CHECK(cudaSetDevice(cu_of(be)->device))

/* Scratch space of at least `bytes`, valid until the next cu_scratch call on
 * this backend (later ops are ordered after earlier ones on the stream). */
int cu_scratch(c3_backend *be, size_t bytes, void **out);

/* Grid size for a grid-stride loop over n items. */
static inline unsigned cu_grid(c3_backend *be, int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    int64_t cap = (int64_t)cu_of(be)->sm_count * CU_BLOCKS_PER_SM;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* Grid of a kernel whose blocks stride over n items (rows): as many blocks as
 * fit on the device at once (the occupancy of `kern` at `threads`), at most
 * n. The count per SM is asked once per kernel (the same on every GPU of a
 * machine: one architecture). */
template <auto kern>
static inline unsigned cu_resident_grid(c3_backend *be, int threads, int64_t n) {
    static int per_sm; /* per kernel; 0: not asked yet (a racing second ask stores the same) */
    if (!per_sm) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, threads, 0) != cudaSuccess ||
            b < 1) {
            (void)cudaGetLastError();
            b = 1;
        }
        per_sm = b;
    }
    int64_t g = (int64_t)cu_of(be)->sm_count * per_sm;
    return (unsigned)(n < g ? (n < 1 ? 1 : n) : g);
}

/* ---- dtype-generic element access (the dtype switch is warp-uniform) ---- */
static __device__ __forceinline__ float cu_ld(const void *p, int dt, int64_t i) {
    if (dt == C3_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == C3_F32) return ((const float *)p)[i];
    return __half2float(((const __half *)p)[i]);
}
static __device__ __forceinline__ void cu_st(void *p, int dt, int64_t i, float v) {
    if (dt == C3_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == C3_F32)
        ((float *)p)[i] = v;
    else
        ((__half *)p)[i] = __float2half_rn(v);
}
/* Round v as storing it in dtype dt would (the bf16 rounding points of the spec). */
static __device__ __forceinline__ float cu_round(int dt, float v) {
    if (dt == C3_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (dt == C3_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* Floating storage types the kernels read and write. */
static inline bool cu_float_type(c3_dtype t) { return t == C3_F32 || t == C3_BF16 || t == C3_F16; }
int cu_check_float(const char *op, const c3_tensor *t, const char *name);

/* Convert n elements of any float type into bf16 at dst (device). */
int cu_convert(c3_backend *be, void *dst, c3_dtype dt, const void *src, c3_dtype st, int64_t n);
/* A bf16 copy of t's data: t's own storage when it is bf16, else converted
 * into `buf` (which must hold numel(t) bf16). */
int cu_as_bf16(c3_backend *be, const c3_tensor *t, void *buf, const __nv_bfloat16 **out);

/* ---- ops implemented in the other files ---- */
/* The table's fill_random (random_weights.cu) and quantize_e4m3 (gemm.cu). */
int cu_fill_random(c3_backend *be, c3_tensor *dst, int64_t offset, float amp);
int cu_quantize_e4m3(c3_backend *be, c3_tensor *dst, const c3_tensor *src, float *scale);
void cu_gemm_cache_free(c3_backend *be);
int cu_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
              const c3_tensor *bias, bool accumulate);
/* Row-major C[M,N] (ldc) = A[M,K] . B[K,N] (+ beta C) in bf16 with fp32
 * accumulation; A, B bf16 on the device, C of type ct (BF16 or F32). */
int cu_gemm_nn(c3_backend *be, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
               const void *B, int64_t ldb, void *C, c3_dtype ct, int64_t ldc, float beta);
int cu_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim,
               float eps, bool mul_fp32);
int cu_rope(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin);
int cu_qkv_rope(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos,
                const c3_tensor *sin, float eps, bool mul_fp32);
int cu_chan_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                    const c3_tensor *bias);
int cu_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg,
                 bool causal, float scale);
/* y[M, N] (F32) += bias[N] broadcast over rows. */
int cu_add_bias_rows(c3_backend *be, c3_tensor *y, const c3_tensor *bias, int64_t M, int64_t N);
/* Largest head dim attention.cu takes; above it (one segment, not causal)
 * attention_gemm.cu materialises the scores with cuBLAS. */
#define CU_ATT_FLASH_MAXD 512
int cu_attention_gemm(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, float scale);
int cu_conv3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
              const c3_tensor *bias, int ph, int pw);
int cu_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm);
int cu_upsample2x(c3_backend *be, c3_tensor *y, const c3_tensor *x);
/* The channels-last VAE ops (vae_cl.cu; backend.h vcl_*). */
int cu_vcl_weight(c3_backend *be, c3_tensor *wcl, const c3_tensor *w);
int cu_vcl_conv(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *wcl,
                const c3_tensor *bias, const c3_tensor *res, const c3_vcl_geom *g);
int cu_vcl_norm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma, int64_t N,
                int C, bool silu);
int cu_vcl_upsample(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int C,
                    bool interleave);
int cu_vcl_dupup(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int Cin,
                 int Cout, int ft, int fs, bool trim);
int cu_vcl_zero(c3_backend *be, c3_tensor *y);
int cu_vcl_layout(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int C,
                  int patch, bool to_cl, float lo, float hi);
/* encode.cu: the VAE encoder's strided conv and AvgDown3D (backend.h) */
int cu_conv3d_strided(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                      const c3_tensor *bias, const int stride[3], const int pad[4]);
int cu_avgdown3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, int ft, int fs);

/* For the labs: the stream every op of `be` is queued on, and a choice of
 * attention kernel (0 = automatic, 1 = mma.sync flash, 2 = generic, 3 = Hopper wgmma). */
extern "C" cudaStream_t c3_cuda_stream(c3_backend *be);
extern "C" void c3_cuda_attention_kernel(int which);
/* vcl_conv tile: 0 = automatic, 1 = 128x128, 2 = 128x256, 3 = 128x64. */
extern "C" void c3_cuda_vcl_variant(int which);

#endif
