/* cuda_check.h - one check macro per library for every CUDA runtime, cuBLAS,
 * cuBLASLt and NCCL call. On failure it records "file:line: call: reason"
 * with c3_fail() and returns the status from the calling function (which
 * must return int). Out-of-memory maps to C3_ERESOURCE with the fix named. */
#ifndef COSMOS3_CUDA_CHECK_H
#define COSMOS3_CUDA_CHECK_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "common.h"
}

#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t cu_e_ = (call);                                                                \
        if (cu_e_ != cudaSuccess) {                                                                \
            (void)cudaGetLastError(); /* clear a sticky-free error so the next call is clean */    \
            if (cu_e_ == cudaErrorMemoryAllocation)                                                \
                return c3_fail(C3_ERESOURCE,                                                       \
                               "%s:%d: %s: out of GPU memory; use a smaller size, more GPUs "      \
                               "(--tp/--ulysses) or --offload",                                    \
                               __FILE__, __LINE__, #call);                                         \
            return c3_fail(C3_EFAIL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                   \
                           cudaGetErrorString(cu_e_));                                             \
        }                                                                                          \
    } while (0)

/* After a kernel launch: launch-configuration errors show up here. */
#define CU_CHECK_LAUNCH() CU_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t cb_s_ = (call);                                                             \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS)                                                        \
            return c3_fail(cb_s_ == CUBLAS_STATUS_ALLOC_FAILED ? C3_ERESOURCE : C3_EFAIL,          \
                           "%s:%d: %s: %s", __FILE__, __LINE__, #call,                             \
                           cublasGetStatusString(cb_s_));                                          \
    } while (0)

/* NCCL is checked the same way where it is used (include <nccl.h> first). */
#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t nc_r_ = (call);                                                               \
        if (nc_r_ != ncclSuccess)                                                                  \
            return c3_fail(C3_EFAIL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                   \
                           ncclGetErrorString(nc_r_));                                             \
    } while (0)

#endif
