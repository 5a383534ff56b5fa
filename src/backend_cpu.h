/* backend_cpu.h - the CPU backend's operations, split across files:
 * backend_cpu.c (memory, elementwise, table), cpu_transformer.c (linear,
 * rmsnorm, rope, attention), cpu_conv.c (VAE: conv3d, channel norm, permute,
 * upsample). All math in fp32; tensors are F32 on the host. */
#ifndef COSMOS3_BACKEND_CPU_H
#define COSMOS3_BACKEND_CPU_H

#include "backend.h"

/* Number of worker threads for CPU loops (OpenMP); 0 = all cores. */
void cpu_set_threads(int n);

/* y[M, N] (row stride ldy) = a[M, K] (lda) . op(b) + beta y, row-major
 * floats; op(b) is b[N, K]^T (ldb) when b_trans, else b[K, N] (ldb). The
 * same bits whatever the thread count: OpenBLAS's result for an element
 * depends on how a call is blocked and threaded, so the product is cut into
 * tiles of a fixed size (never one per thread), each one single-threaded
 * sgemm, and the tiles are spread over the OpenMP threads. */
void cpu_gemm(bool b_trans, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *y, int64_t ldy);

int cpu_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, bool accumulate);
int cpu_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim,
                float eps, bool mul_fp32);
int cpu_rope(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin);
int cpu_qkv_rope(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                 const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos,
                 const c3_tensor *sin, float eps, bool mul_fp32);
int cpu_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg,
                  bool causal, float scale);

int cpu_conv3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, int ph, int pw);
int cpu_chan_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                     const c3_tensor *bias);
int cpu_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm);
int cpu_upsample2x(c3_backend *be, c3_tensor *y, const c3_tensor *x);
int cpu_conv3d_strided(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                       const c3_tensor *bias, const int stride[3], const int pad[4]);
int cpu_avgdown3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, int ft, int fs);

#endif
