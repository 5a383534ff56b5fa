/* weights_random.h - the random weights of cosmos3 bench's in-memory
 * checkpoint: element i of the stream is uniform in [-amp, amp), from the
 * splitmix64 finaliser of i. One definition for the host (src/bench.c) and
 * the device (cuda/random_weights.cu, the backend's fill_random), so a
 * weight made on the GPU has the bits the host buffer holds. Every step is
 * exact or rounded once to nearest (the double arithmetic is exact, then
 * one float conversion and one float product). */
#ifndef COSMOS3_WEIGHTS_RANDOM_H
#define COSMOS3_WEIGHTS_RANDOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define C3_HOSTDEV __host__ __device__
#else
#define C3_HOSTDEV
#endif

static inline C3_HOSTDEV uint64_t c3_random_mix64(uint64_t x) { /* splitmix64 finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Element i, before its bf16 rounding. */
static inline C3_HOSTDEV float c3_random_weight(int64_t i, float amp) {
    double u = (double)(c3_random_mix64((uint64_t)i) >> 11) * 0x1.0p-53; /* [0, 1) */
    return (float)(2.0 * u - 1.0) * amp;
}

#endif
