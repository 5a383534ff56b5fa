/* cuda_module.h - the CUDA backend as a module of its own.
 *
 * The CUDA backend (cuda/: kernels, cuBLAS/cuBLASLt, NCCL) is built into
 * libcosmos3-cuda.so, which alone links the CUDA libraries. libcosmos3 opens
 * it with dlopen() the first time a GPU is looked for (src/cuda_module.c),
 * so a command that uses no GPU never maps them and a machine without them
 * runs everything on the CPU. The module exports one symbol,
 * C3_CUDA_MODULE_INIT, that takes what it needs from the library (the
 * error recorder, the dtype table, allocation, the environment settings)
 * and returns its entry points. The tables cross by pointer between two
 * builds of the same tree: the ABI number and the sizes of the structures
 * they share are checked, so a stale module is refused instead of run.
 */
#ifndef COSMOS3_CUDA_MODULE_H
#define COSMOS3_CUDA_MODULE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "env.h"
#include "plan.h"

/* Raise when c3_cuda_host, c3_cuda_module or what they point at changes. */
#define C3_CUDA_MODULE_ABI 2
#define C3_CUDA_MODULE_FILE "libcosmos3-cuda.so"
#define C3_CUDA_MODULE_INIT "cosmos3_cuda_module_init"

struct c3_comm_set;

/* The library, as the module sees it. */
typedef struct {
    int abi;
    const char *version;
    size_t backend_size, tensor_size, plan_size; /* sizeof in the library's build */
    int (*fail)(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    size_t (*dtype_size)(c3_dtype t);
    const char *(*dtype_name)(c3_dtype t);
    void *(*calloc_at)(size_t n, size_t size, const char *file, int line);
    const c3_env_values *(*env)(void);
} c3_cuda_host;

/* The module's entry points (as backend.h, plan.h and comm.h declare
 * the library's calls of the same names). */
typedef struct {
    int abi;
    const char *version;
    size_t backend_size, tensor_size, plan_size; /* sizeof in the module's build */
    int (*backend_new)(int device, c3_backend **out);
    int (*gpu_count)(void);
    int (*gpu_probe)(char *why, size_t n);
    int (*gpu_info)(int dev, char *name, size_t n, int64_t *total, int64_t *free_b);
    /* ranks lo .. lo + n - 1 of this process (all of them: lo 0, n world,
     * share_id NULL); share_id hands process 0's NCCL id to the others */
    int (*comm_nccl)(const c3_plan *p, int lo, int n, c3_backend *const *bes,
                     int (*share_id)(void *buf, size_t n), struct c3_comm_set **out);
    int (*comm_dev)(const c3_plan *p, c3_backend *const *bes, struct c3_comm_set **out);
    /* GPU dev's PCI bus id and UUID, one string (two processes given the same GPU) */
    int (*gpu_id)(int dev, char *id, size_t n);
} c3_cuda_module;

/* The exported init: keeps host, returns the module's table, or NULL (and
 * a reason in why) when host's ABI differs. */
typedef const c3_cuda_module *(*c3_cuda_module_init_fn)(const c3_cuda_host *host, char *why,
                                                        size_t n);

/* The module's own definitions of the entry points (cuda/, hidden in the
 * module; the labs link them directly). */
int cuda_backend_new(int device, c3_backend **out);
int cuda_gpu_count(void);
int cuda_gpu_probe(char *why, size_t n);
int cuda_gpu_info(int dev, char *name, size_t n, int64_t *total, int64_t *free_b);
int cuda_comm_nccl(const c3_plan *p, int lo, int n, c3_backend *const *bes,
                   int (*share_id)(void *buf, size_t n), struct c3_comm_set **out);
int cuda_comm_dev(const c3_plan *p, c3_backend *const *bes, struct c3_comm_set **out);
int cuda_gpu_id(int dev, char *id, size_t n);

#ifdef __cplusplus
}
#endif

#endif
