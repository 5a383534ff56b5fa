/* denoise.h - the denoising loop: UND once per CFG branch, then every step
 * the GEN tower for each branch this rank serves (in sequence, as one batch,
 * or on the other CFG group), the CFG combine and the sampler step. Every
 * rank runs the same loop so all ranks hold the same latents. */
#ifndef COSMOS3_DENOISE_H
#define COSMOS3_DENOISE_H

#include "condition.h"
#include "runtime.h"
#include "scheduler.h"
#include "stepcache.h"

typedef struct {
    c3_runtime *rt;
    const c3_tconfig *tc; /* the transformer's config (its FP8 policy) */
    const cosmos3_settings *s;
    int32_t *ids[2]; /* cond, uncond prompt ids */
    int L[2];
    int T, h, w; /* latent grid */
    int64_t n;   /* latent floats: C * T * h * w */
    const float *x_init;
    double *sigmas;    /* [steps + 1] */
    double *timesteps; /* [steps]: integers for UniPC, fractional for the fixed-step SDE */
    c3_schedule sched;
    float *x_final;          /* [n], written by this process's first rank */
    const uint8_t *pinned;   /* [T]: latent frames the conditioning gives, or NULL */
    /* the conditioning (its clean x0 on the pinned frames), or NULL: the
     * fixed-step SDE re-noises every position, so after each of its steps
     * the pinned frames are set back to x0 (upstream's
     * Cosmos3DistilledVisionLoopSchedulerStep); UniPC leaves them at x0 */
    const c3_condition *cond;
    const float *step_noise; /* [steps, n]: the SDE's re-noising draws, or NULL: the seed's */
    double t_und, t_loop, step_sum, cond_sum, uncond_sum;
    double step_first;    /* the first step's seconds (rank 0) */
    double host_sum;      /* rank 0's seconds in the steps' host work (CFG combine, sampler) */
    double first_step_at; /* c3_now() when rank 0 began the first step (0: none ran) */
    int steps_run;
    /* the step cache (stepcache.h), or NULL; rank 0 counts the cached steps */
    const c3_cache_kind *cache;
    c3_stepcache_params cache_params;
    int steps_cached;
    /* joint sound (0: none): Ts sound latent frames, ns = sound_dim * Ts
     * floats [sound_dim, Ts], stepped beside the latents with the same
     * guidance by a sampler of their own (upstream: a copy of the scheduler
     * made after set_timesteps, its own multistep history) */
    int Ts;
    int64_t ns;
    const float *s_init;
    float *s_final; /* [ns], written by rank 0 */
    /* a request of a batch (denoise_run_batch): its job's events (job 0:
     * the runtime's current job, rt_emit), its own cancel flag (NULL:
     * none), and how it ended: rc C3_OK (x_final written), C3_ECANCEL (its
     * flag) or its own failure, err the one line */
    uint64_t job;
    cosmos3_event_fn on_event;
    void *user;
    const volatile int *cancel;
    int rc;
    char err[512];
} c3_denoise;

/* Run the loop on every rank of j->rt (one thread each) and join them; the
 * first real failure wins over the cancellations it caused. The latents
 * after the first step are checked with denoise_check_finite. */
int denoise_run(c3_denoise *j);
/* n requests (1 .. C3_BATCH_MAX, one shape: grid, steps, timesteps) in
 * lockstep on the same ranks: every step one GEN forward over all their
 * live branches (in calls of up to model_gen_max() branches where the model
 * batches, else one call per branch), each request its own UND K/V,
 * latents, guidance, sampler and noise. Several requests only without
 * sound and the step cache (j->cache NULL). A request whose cancel flag is
 * set, or whose latents turn non-finite, ends alone (its rc) at the next
 * step; the return is what stopped all of them (cosmos3_cancel, a rank's
 * failure), else C3_OK with each js[k]->rc saying how it ended. */
int denoise_run_batch(c3_denoise *const *js, int n);
/* NaN or Inf in host data the engine holds (`where`, e.g. "the final
 * latents"): the noise was checked before, so it came from the weights of
 * `stage` ("transformer", "VAE"); C3_EMODEL naming both, else C3_OK. */
int denoise_check_finite(const float *x, int64_t n, const char *where, const char *stage);
/* Where the seed's stream gives the sound's draws: the latents take [0, n)
 * and the SDE's step i [(i + 1) n, (i + 2) n); after them, the initial
 * sound noise (k 0) and the SDE's sound draws of step k - 1, ns each. */
uint64_t denoise_sound_offset(int steps, int64_t n, int64_t ns, int k);
/* Tests only: false skips the re-anchoring above (default true). */
extern bool c3_denoise_reanchor;

#endif
