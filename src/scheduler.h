/* scheduler.h - flow-matching sigma schedules and samplers (spec section 4).
 *
 * Schedules (sigmas has steps+1 entries, the last 0; timesteps[i] =
 * trunc(sigma_i * 1000) taken from the float64 sigma):
 *   NATIVE  s_i = linspace(1 - 1/1000, 0, N+1)[i], sigma = shift(s)
 *   LINEAR  s_i = 1 - i (1 - 1/1000)/N, sigma = shift(s), sigma_0 -= 1e-6 if ~1
 *   KARRAS  rho 7 between sigma_max and sigma_min of the config, sigma = a/(1+a), no shift
 * Samplers: UniPC bh2 (order 2, predict-x0, lower order first/last step,
 * last step returns x0) and the distilled FlowMatch Euler 4-step SDE sampler.
 * All sampler state is fp32/fp64 on the host.
 */
#ifndef COSMOS3_SCHEDULER_H
#define COSMOS3_SCHEDULER_H

#include "common.h"

typedef enum { C3_SCHED_NATIVE, C3_SCHED_LINEAR, C3_SCHED_KARRAS, C3_SCHED_FLOWMATCH4 } c3_schedule;
typedef enum { C3_SAMPLER_UNIPC, C3_SAMPLER_FLOWMATCH } c3_sampler_kind;

const char *sched_name(c3_schedule s);          /* "native", "linear", "karras", "flowmatch4" */
int sched_parse(const char *s, c3_schedule *out); /* 0 ok */

/* sigmas [steps+1] (double) and timesteps [steps] (int64). */
int sched_sigmas(c3_schedule kind, int steps, double shift, double sigma_min, double sigma_max,
                 double *sigmas, int64_t *timesteps);

typedef struct c3_sampler c3_sampler;
/* A sampler over n latent floats. */
c3_sampler *sampler_new(c3_sampler_kind kind, int steps, const double *sigmas, int64_t n);
void sampler_free(c3_sampler *s);
/* One step: x (in/out, n floats) given the model output v for step i.
 * For UniPC: corrector then predictor as diffusers' step(). For FlowMatch:
 * x' = (1 - s') (x - s v) + s' eps, with eps from `noise` (n floats, may be
 * NULL on the last step). Optional debug outputs (may be NULL):
 * x0_pred (m_i before the corrector) and x_corrected (sample after the corrector). */
int sampler_step(c3_sampler *s, int i, const float *v, float *x, const float *noise,
                 float *x0_pred, float *x_corrected);
/* Order used at step i (after the call for i). */
int sampler_order(const c3_sampler *s);

/* CFG: out = u + g (c - u). */
void cfg_combine(float *out, const float *cond, const float *uncond, float g, int64_t n);

#endif
