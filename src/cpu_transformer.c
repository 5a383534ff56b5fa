/* cpu_transformer.c - CPU linear (BLAS), RMSNorm, RoPE, attention. */
#include "backend_cpu.h"

int cpu_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, bool accumulate) {
    (void)be; (void)y; (void)x; (void)w; (void)bias; (void)accumulate;
    return c3_fail(C3_EFAIL, "cpu linear: not implemented yet");
}
int cpu_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim,
                float eps, bool mul_fp32) {
    (void)be; (void)y; (void)x; (void)w; (void)dim; (void)eps; (void)mul_fp32;
    return c3_fail(C3_EFAIL, "cpu rmsnorm: not implemented yet");
}
int cpu_rope(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin) {
    (void)be; (void)x; (void)cos; (void)sin;
    return c3_fail(C3_EFAIL, "cpu rope: not implemented yet");
}
int cpu_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg,
                  bool causal, float scale) {
    (void)be; (void)out; (void)q; (void)kv; (void)nseg; (void)causal; (void)scale;
    return c3_fail(C3_EFAIL, "cpu attention: not implemented yet");
}
