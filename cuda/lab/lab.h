/* lab.h - what the CUDA labs share (ops_check.cu, vae_lab.cu, attention_lab.cu):
 * the fail-fast call checks and the median event timer. A failing call
 * prints file, line, the call and the library's message, then the lab exits
 * 1. Needs only the CUDA runtime (attention_lab builds with nvcc alone); OK
 * (a C3_* status) and CB (cuBLAS) exist where the lab included the
 * library's or cuBLAS's header first. */
#ifndef COSMOS3_LAB_H
#define COSMOS3_LAB_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));               \
    } while (0)
#ifdef COSMOS3_COMMON_H
#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != C3_OK) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, c3_errmsg());         \
    } while (0)
#endif
#ifdef CUBLAS_VER_MAJOR
#define CB(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_));            \
    } while (0)
#endif

/* The median milliseconds of reps calls of f() queued on stream s, after
 * warmup calls; each call timed by events around it. */
template <class F> static float lab_median_ms(cudaStream_t s, int warmup, int reps, F f) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; i++)
        f();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, s));
        f();
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

#endif
