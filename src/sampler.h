/* sampler.h - the steps that walk a sigma table (spec section 4).
 *
 *   UNIPC      UniPC bh2 (order 2, predict-x0, lower order first/last step,
 *              last step returns x0): the base checkpoints.
 *   FLOWMATCH  FlowMatch Euler with stochastic sampling (the distilled
 *              students' fixed-step SDE): x0 = x - sigma v;
 *              x' = (1 - sigma') x0 + sigma' eps, a fresh eps every step.
 * All sampler state is fp32 on the host; every rank runs the same steps on
 * the same numbers. The tables come from scheduler.h.
 */
#ifndef COSMOS3_SAMPLER_H
#define COSMOS3_SAMPLER_H

#include "common.h"

typedef enum { C3_SAMPLER_UNIPC, C3_SAMPLER_FLOWMATCH } c3_sampler_kind;

typedef struct c3_sampler c3_sampler;
/* A sampler over n latent floats; sigmas [steps+1] (stored as float32). */
c3_sampler *sampler_new(c3_sampler_kind kind, int steps, const double *sigmas, int64_t n);
void sampler_free(c3_sampler *s);
/* Whether the sampler draws noise at step i (FLOWMATCH with sigma' > 0). */
bool sampler_needs_noise(const c3_sampler *s, int i);
/* One step: x (in/out, n floats) given the model output v for step i.
 * For UniPC: corrector then predictor as diffusers' step(). For FlowMatch:
 * x' = (1 - s') (x - s v) + s' eps, with eps from `noise` (n floats, may be
 * NULL when sampler_needs_noise is false). Optional debug outputs (may be
 * NULL): x0_pred (m_i before the corrector) and x_corrected (sample after
 * the corrector). */
int sampler_step(c3_sampler *s, int i, const float *v, float *x, const float *noise, float *x0_pred,
                 float *x_corrected);
/* Order used at step i (after the call for i). */
int sampler_order(const c3_sampler *s);

/* CFG: out = u + g (c - u). */
void cfg_combine(float *out, const float *cond, const float *uncond, float g, int64_t n);

#endif
