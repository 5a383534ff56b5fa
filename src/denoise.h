/* denoise.h - the denoising loop: UND once per CFG branch, then every step
 * the GEN tower for each branch this rank serves (in sequence, as one batch,
 * or on the other CFG group), the CFG combine and the sampler step. Every
 * rank runs the same loop so all ranks hold the same latents. */
#ifndef COSMOS3_DENOISE_H
#define COSMOS3_DENOISE_H

#include "condition.h"
#include "runtime.h"
#include "scheduler.h"

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
    float *x_final;          /* [n], written by rank 0 */
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
} c3_denoise;

/* Run the loop on every rank of j->rt (one thread each) and join them; the
 * first real failure wins over the cancellations it caused. Rank 0 checks
 * the latents after the first step with denoise_check_finite. */
int denoise_run(c3_denoise *j);
/* NaN or Inf in host data the engine holds (`where`, e.g. "the final
 * latents"): the noise was checked before, so it came from the weights of
 * `stage` ("transformer", "VAE"); C3_EMODEL naming both, else C3_OK. */
int denoise_check_finite(const float *x, int64_t n, const char *where, const char *stage);
/* Tests only: false skips the re-anchoring above (default true). */
extern bool c3_denoise_reanchor;

#endif
