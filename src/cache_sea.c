/* cache_sea.c - SeaCache's change signal (--cache sea): the latents through
 * the timestep-dependent spectral (Wiener) filter of "SeaCache: Spectral-
 * Evolution-Aware Cache for Accelerating Diffusion Models" (arXiv
 * 2602.18993), as vLLM-Omni's Cosmos3 SeaCache applies it: a separable gain
 * over the (T, H, W) grid of each latent channel that keeps the content's
 * low frequencies and damps what the noise level sigma hides, normalised to
 * mean 1 so distances compare across steps. Conditioned (pinned) frames do
 * not change and are left out of the signal. */
#include "stepcache.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

/* The axis' circulant filter [N, N] (symmetric). */
static void sea_kernel(int N, double sigma, double power, float *K) {
    double *g = xmalloc(sizeof(double) * (size_t)N), *k = xmalloc(sizeof(double) * (size_t)N);
    double s = 1.0 - sigma, mean = 0;
    for (int i = 0; i < N; i++) {
        double f = (double)C3_MIN(i, N - i) / N; /* |fftfreq| */
        double P = 1.0 / (pow(f, power) + 1e-16);
        g[i] = s * P / (s * s * P + sigma * sigma + 1e-16);
        mean += g[i] / N;
    }
    for (int d = 0; d < N; d++) {
        double acc = 0;
        for (int i = 0; i < N; i++)
            acc += g[i] / mean * cos(2.0 * M_PI * (double)i * d / N);
        k[d] = acc / N;
    }
    for (int r = 0; r < N; r++)
        for (int c = 0; c < N; c++)
            K[(size_t)r * N + c] = (float)k[((r - c) % N + N) % N];
    free(g);
    free(k);
}

void sea_filter(float *x, int C, int T, int H, int W, double sigma, double power) {
    sigma = C3_MAX(1e-6, C3_MIN(1.0 - 1e-6, sigma));
    int64_t HW = (int64_t)H * W, n = (int64_t)C * T * HW;
    float *tmp = xmalloc(sizeof(float) * (size_t)n);
    int dims[3] = {W, H, T};
    for (int a = 0; a < 3; a++) {
        int N = dims[a];
        if (N < 2) continue; /* one point: the normalised gain is 1 */
        float *K = xmalloc(sizeof(float) * (size_t)N * N);
        sea_kernel(N, sigma, power, K);
        if (a == 0) { /* rows [C T H, W] x K */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)(n / W), W, W, 1.0f, x,
                        W, K, W, 0.0f, tmp, W);
        } else if (a == 1) { /* per (c, t): K [H, H] x [H, W] */
            for (int64_t ct = 0; ct < (int64_t)C * T; ct++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, W, H, 1.0f, K, H,
                            x + ct * HW, W, 0.0f, tmp + ct * HW, W);
        } else { /* per c: K [T, T] x [T, H W] */
            for (int c = 0; c < C; c++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, (blasint)HW, T, 1.0f, K,
                            T, x + (int64_t)c * T * HW, (blasint)HW, 0.0f,
                            tmp + (int64_t)c * T * HW, (blasint)HW);
        }
        memcpy(x, tmp, sizeof(float) * (size_t)n);
        free(K);
    }
    free(tmp);
}

/* SeaCache's spectral exponent (vLLM-Omni's sea_power_exp default) */
#define SEA_POWER 3.0

static int64_t sea_frames(const c3_stepcache_step *st) {
    int64_t f = 0;
    for (int t = 0; t < st->g->T; t++)
        f += !(st->g->pinned && st->g->pinned[t]);
    return f;
}

static int64_t sea_size(const c3_stepcache_step *st) {
    return (int64_t)st->C * sea_frames(st) * st->g->h * st->g->w;
}

static int sea_signal(const c3_stepcache_step *st, const bool want[2], float *const sig[2]) {
    int C = st->C, T = st->g->T, H = st->g->h, W = st->g->w;
    int64_t HW = (int64_t)H * W, n = (int64_t)C * T * HW;
    float *f = xmalloc(sizeof(float) * (size_t)n);
    memcpy(f, st->x, sizeof(float) * (size_t)n);
    sea_filter(f, C, T, H, W, st->sigma, SEA_POWER);
    for (int b = 0; b < 2; b++) {
        if (!want[b]) continue;
        float *o = sig[b];
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) {
                if (st->g->pinned && st->g->pinned[t]) continue;
                memcpy(o, f + ((int64_t)c * T + t) * HW, sizeof(float) * (size_t)HW);
                o += HW;
            }
    }
    free(f);
    return C3_OK;
}

/* vLLM-Omni's Cosmos3 SeaCache default threshold */
const c3_cache_kind c3_cache_sea = {
    .name = "sea", .threshold = 0.25, .whole = true, .size = sea_size, .signal = sea_signal};
