/* no_cuda.c - c3_backend_cuda() for builds without the CUDA backend. */
#include "backend.h"

int c3_backend_cuda(int device, c3_backend **out) {
    (void)device;
    *out = NULL;
    return c3_fail(C3_ERESOURCE, "this cosmos3 was built without CUDA; rebuild with -Dcuda=enabled");
}
