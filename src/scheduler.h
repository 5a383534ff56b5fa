/* scheduler.h - flow-matching sigma and timestep tables (spec section 4).
 *
 * Schedules (sigmas has steps+1 entries, the last 0):
 *   NATIVE  s_i = linspace(1 - 1/1000, 0, N+1)[i], sigma = shift(s)
 *   LINEAR  s_i = 1 - i (1 - 1/1000)/N, sigma = shift(s), sigma_0 -= 1e-6 if ~1
 *   KARRAS  rho 7 between sigma_max and sigma_min of the config, sigma = a/(1+a), no shift
 *   FLOWMATCH4  the distilled fixed-step schedule: a t_list of sigmas (the
 *           checkpoint's fixed_step_sampler_config.t_list, or for a base
 *           checkpoint the 4-step students' [1, 0.9375, 0.8333.., 0.625]),
 *           shifted by the FlowMatch scheduler's own shift, then 0.
 * Timesteps: UniPC schedules give trunc(sigma_i * 1000) from the float64
 * sigma (integers); FLOWMATCH4 gives 1000 * sigma in float32, fractional,
 * as diffusers' FlowMatchEulerDiscreteScheduler. Both are carried as double.
 * The samplers that walk these tables are in sampler.h.
 */
#ifndef COSMOS3_SCHEDULER_H
#define COSMOS3_SCHEDULER_H

#include "common.h"

typedef enum { C3_SCHED_NATIVE, C3_SCHED_LINEAR, C3_SCHED_KARRAS, C3_SCHED_FLOWMATCH4 } c3_schedule;

/* The most t_list entries a distilled scheduler config may hold. */
#define C3_MAX_TLIST 64
/* The t_list of the published 4-step students. */
#define C3_TLIST4_N 4
extern const double c3_tlist4[C3_TLIST4_N];

const char *sched_name(c3_schedule s);          /* "native", "linear", "karras", "flowmatch4" */
int sched_parse(const char *s, c3_schedule *out); /* 0 ok */

/* sigmas [steps+1] and timesteps [steps]. FLOWMATCH4 here is the 4-step
 * students' t_list with shift 1 (steps must be 4). */
int sched_sigmas(c3_schedule kind, int steps, double shift, double sigma_min, double sigma_max,
                 double *sigmas, double *timesteps);

/* The fixed-step table of a distilled checkpoint, exactly as diffusers'
 * FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=t_list) computes it
 * in float32: sigma = shift s / (1 + (shift - 1) s), then 0; timesteps =
 * sigma * num_train (fractional). sigmas [n+1], timesteps [n]. */
int sched_fixed(const double *t_list, int n, double shift, int num_train, double *sigmas,
                double *timesteps);

#endif
