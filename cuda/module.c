/* module.c - the entry of libcosmos3-cuda.so (src/cuda_module.h).
 *
 * The module holds the CUDA backend's files and src/rendezvous.c; the few
 * library helpers they call are answered here by the library's own, through
 * the host table it hands over: so an error the module records is the
 * library's thread-local message, and the environment is the library's one
 * reading. Only cosmos3_cuda_module_init is exported. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "cuda_module.h"
#include "env.h"

static const c3_cuda_host *host;

int c3_fail(int code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->fail(code, "%s", msg);
}

size_t c3_dtype_size(c3_dtype t) {
    return host->dtype_size(t);
}
const char *c3_dtype_name(c3_dtype t) {
    return host->dtype_name(t);
}
void *c3_xcalloc_(size_t n, size_t size, const char *file, int line) {
    return host->calloc_at(n, size, file, line);
}
const c3_env_values *c3_env(void) {
    return host->env();
}

static const c3_cuda_module table = {
    .abi = C3_CUDA_MODULE_ABI,
    .version = COSMOS3_VERSION,
    .backend_size = sizeof(c3_backend),
    .tensor_size = sizeof(c3_tensor),
    .plan_size = sizeof(c3_plan),
    .backend_new = cuda_backend_new,
    .gpu_count = cuda_gpu_count,
    .gpu_probe = cuda_gpu_probe,
    .gpu_info = cuda_gpu_info,
    .comm_nccl = cuda_comm_nccl,
    .comm_dev = cuda_comm_dev,
    .gpu_id = cuda_gpu_id,
};

__attribute__((visibility("default"))) const c3_cuda_module *
cosmos3_cuda_module_init(const c3_cuda_host *h, char *why, size_t n) {
    if (h->abi != C3_CUDA_MODULE_ABI || strcmp(h->version, COSMOS3_VERSION) ||
        h->backend_size != sizeof(c3_backend) || h->tensor_size != sizeof(c3_tensor) ||
        h->plan_size != sizeof(c3_plan)) {
        snprintf(why, n, "built for cosmos3 %s (interface %d), not this %s (interface %d)",
                 COSMOS3_VERSION, C3_CUDA_MODULE_ABI, h->version, h->abi);
        return NULL;
    }
    host = h;
    return &table;
}
