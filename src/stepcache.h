/* stepcache.h - the step cache: on steps whose input barely changed since
 * the last computed one, the GEN block stack is skipped and its cached
 * residual (output - input, per CFG branch, extrapolated linearly from the
 * last two computed steps) added to the stack's input instead.
 *
 * One small interface between the denoising loop and the caches: a cache
 * kind (cache_sea.c, cache_fb.c) gives a per-branch change signal; this
 * file accumulates its relative L1 change (TeaCache's rule: accumulate,
 * skip while below the threshold, reset when a step is computed), forces
 * the warm-up steps, the last step and a step after max_skip cached ones,
 * and keeps the residuals. Every rank calls stepcache_decide on every step
 * (collective): the ranks' partial sums of the distance are gathered once
 * over the world, so every rank and branch agrees on each skip and every
 * parallel layout skips the steps world 1 skips. */
#ifndef COSMOS3_STEPCACHE_H
#define COSMOS3_STEPCACHE_H

#include "comm.h"
#include "model.h"

/* what the loop knows of one step on one rank */
typedef struct {
    c3_model *model;
    c3_backend *be;
    int rank, tp_rank; /* world rank, tensor-parallel rank */
    const c3_undkv *kv[2];
    bool serve[2];  /* the branches this rank computes on this step */
    bool active[2]; /* the branches the step uses (1: CFG on) */
    const float *x; /* [C, T, h, w] host latents (every rank holds the same) */
    const c3_latent_geom *g;
    int C;
    double timestep, sigma;
    int step, steps;
} c3_stepcache_step;

/* A cache kind: the change signal of the branches this rank serves. */
typedef struct {
    const char *name;
    double threshold; /* default */
    /* true: the signal is of the whole latent, the same on every rank, and
     * rank 0 alone computes it; false: of this rank's GEN rows, computed by
     * every rank serving the branch (the tensor-parallel ranks' first
     * tp_rank gives its sums) */
    bool whole;
    /* floats of one branch's signal on this rank */
    int64_t (*size)(const c3_stepcache_step *st);
    /* sig[b] for the branches want[b] */
    int (*signal)(const c3_stepcache_step *st, const bool want[2], float *const sig[2]);
} c3_cache_kind;

extern const c3_cache_kind c3_cache_sea, c3_cache_fb;
/* "sea", "fb" -> the kind; NULL for another name ("none" included) */
const c3_cache_kind *stepcache_kind(const char *name);

typedef struct {
    double threshold;
    int max_skip; /* most consecutive cached steps */
    int warmup;   /* first steps always computed */
} c3_stepcache_params;

typedef struct c3_stepcache c3_stepcache;

c3_stepcache *stepcache_new(const c3_cache_kind *k, const c3_stepcache_params *p);
void stepcache_free(c3_stepcache *c);
/* Collective over world (NULL for one rank): *cached = the step skips the
 * block stack. */
int stepcache_decide(c3_stepcache *c, const c3_stepcache_step *st, c3_comm *world, bool *cached);
/* The GEN call of branches b0 .. b0 + nb - 1 on this step. */
void stepcache_gen(c3_stepcache *c, int b0, int nb, c3_gen_cache *io);
/* The step ran (computed or cached): the history moves on. */
void stepcache_commit(c3_stepcache *c, const c3_stepcache_step *st, bool cached);
int stepcache_cached_steps(const c3_stepcache *c);

/* The SEA filter (SeaCache, arXiv 2602.18993) of x [C, T, H, W] in place:
 * per axis the Wiener gain g(f) = s P(f) / (s^2 P(f) + sigma^2), s = 1 -
 * sigma, P(f) = 1 / |f|^power (f as numpy's fftfreq), normalised to mean
 * 1, applied as the circular convolution it is (the real kernels of the
 * separable gain). */
void sea_filter(float *x, int C, int T, int H, int W, double sigma, double power);

#endif
