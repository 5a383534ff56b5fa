/* cpu_conv.c - CPU VAE operations: 3-D convolution, channel RMS norm,
 * permute, nearest upsample. */
#include "backend_cpu.h"

int cpu_conv3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, int ph, int pw) {
    (void)be; (void)y; (void)x; (void)w; (void)bias; (void)ph; (void)pw;
    return c3_fail(C3_EFAIL, "cpu conv3d: not implemented yet");
}
int cpu_chan_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                     const c3_tensor *bias) {
    (void)be; (void)y; (void)x; (void)gamma; (void)bias;
    return c3_fail(C3_EFAIL, "cpu chan_rmsnorm: not implemented yet");
}
int cpu_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm) {
    (void)be; (void)y; (void)x; (void)perm;
    return c3_fail(C3_EFAIL, "cpu permute: not implemented yet");
}
int cpu_upsample2x(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    (void)be; (void)y; (void)x;
    return c3_fail(C3_EFAIL, "cpu upsample2x: not implemented yet");
}
