/* random_weights.cu - the backend's fill_random: cosmos3 bench's random
 * weights made where they are used (weights_random.h's stream, the same bits
 * as the host buffer src/checkpoint_random.c fills), so a 64-layer Super needs no 128 GB
 * host copy and no host-to-device transfer. */
#include "cuda_internal.h"

extern "C" {
#include "weights_random.h"
}

/* dst[i] = bf16(c3_random_weight(offset + i, amp)), stored as dt (BF16 or F32). */
__global__ void k_fill_random(void *dst, int dt, int64_t n, int64_t offset, float amp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_st(dst, dt, i, __bfloat162float(__float2bfloat16_rn(c3_random_weight(offset + i, amp))));
}

int cu_fill_random(c3_backend *be, c3_tensor *dst, int64_t offset, float amp) {
    if (dst->dtype != C3_BF16 && dst->dtype != C3_F32)
        return c3_fail(C3_EFAIL, "cuda fill_random: destination of type %s; expected BF16 or F32",
                       c3_dtype_name(dst->dtype));
    CU_ENTER(be);
    int64_t n = c3_numel(dst);
    if (n <= 0) return C3_OK;
    k_fill_random<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(dst->data, dst->dtype, n,
                                                                        offset, amp);
    CU_CHECK_LAUNCH();
    return C3_OK;
}
