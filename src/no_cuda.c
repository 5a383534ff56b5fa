/* no_cuda.c - the CUDA entry points for builds without the CUDA backend:
 * each fails with a message naming the rebuild. */
#include <stdio.h>

#include "backend.h"
#include "plan.h"
#include "comm.h"

#define NO_CUDA_FIX "this cosmos3 was built without CUDA; rebuild with -Dcuda=enabled"

int c3_backend_cuda(int device, c3_backend **out) {
    (void)device;
    *out = NULL;
    return c3_fail(C3_ERESOURCE, NO_CUDA_FIX);
}

int comm_nccl_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out) {
    (void)p;
    (void)bes;
    *out = NULL;
    return c3_fail(C3_ERESOURCE, "NCCL communicator: " NO_CUDA_FIX);
}

int comm_dev_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out) {
    (void)p;
    (void)bes;
    *out = NULL;
    return c3_fail(C3_ERESOURCE, "device-memory communicator: " NO_CUDA_FIX);
}

int c3_gpu_count(void) { return 0; }

int c3_gpu_probe(char *why, size_t n) {
    snprintf(why, n, "this cosmos3 was built without CUDA");
    return 0;
}

int c3_gpu_info(int dev, char *name, size_t n, int64_t *total, int64_t *free_b) {
    (void)dev;
    snprintf(name, n, "none");
    *total = *free_b = 0;
    return c3_fail(C3_ERESOURCE, NO_CUDA_FIX);
}
