/* scheduler.c - flow-matching sigma and timestep tables (spec section 4).
 *
 * The UniPC schedules are computed in double exactly as diffusers does with
 * numpy (np.linspace's i*step + start, the rational shift k*s/(1+(k-1)*s),
 * Karras rho 7), then the sigmas are stored as float32 by the sampler and
 * the timesteps truncated from the double sigma. The distilled fixed-step
 * table is computed in float32 throughout, as FlowMatchEulerDiscreteScheduler
 * does it (np.float32 sigmas, a Python-float shift, torch float32 timesteps).
 */
#include "scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TRAIN_TIMESTEPS 1000     /* num_train_timesteps of every Cosmos3 scheduler */
#define KARRAS_RHO 7.0           /* Karras et al. rho */
#define FIRST_SIGMA_EPS 1e-6     /* diffusers: sigma_0 within 1e-6 of 1 -> minus 1e-6 */

/* fixed_step_sampler_config.t_list of Cosmos3-Super-{Text2Image,Image2Video}-4Step
 * (shift 5 of linspace(1, 0, 5)[:-1]) */
const double c3_tlist4[C3_TLIST4_N] = {1.0, 0.9375, 0.8333333333333334, 0.625};

/* ------------------------------------------------------------ names */

static const char *const sched_names[] = {"native", "linear", "karras", "flowmatch4"};

const char *sched_name(c3_schedule s) {
    if ((unsigned)s >= C3_ARRAY_LEN(sched_names)) return "?";
    return sched_names[s];
}

int sched_parse(const char *s, c3_schedule *out) {
    if (!s) return -1;
    for (size_t i = 0; i < C3_ARRAY_LEN(sched_names); i++)
        if (strcmp(s, sched_names[i]) == 0) {
            *out = (c3_schedule)i;
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------------ schedules */

/* numpy.linspace(start, stop, num)[i] for i < num - 1 (endpoint=True):
 * step = (stop - start) / (num - 1); y = i * step + start. */
static double np_linspace(double start, double stop, int num, int i) {
    if (num <= 1) return start; /* numpy: y = i * delta + start with i = 0 */
    if (i == num - 1) return stop;
    double step = (stop - start) / (double)(num - 1);
    return (double)i * step + start;
}

static double flow_shift(double k, double s) { return k * s / (1.0 + (k - 1.0) * s); }

int sched_sigmas(c3_schedule kind, int steps, double shift, double sigma_min, double sigma_max,
                 double *sigmas, double *timesteps) {
    if (steps < 1) return c3_fail(C3_EUSAGE, "steps must be at least 1 (got %d)", steps);
    switch (kind) {
    case C3_SCHED_NATIVE:
    case C3_SCHED_LINEAR:
        if (!(shift > 0) || !isfinite(shift))
            return c3_fail(C3_EUSAGE, "flow shift must be a positive number (got %g)", shift);
        for (int i = 0; i < steps; i++) {
            double s;
            if (kind == C3_SCHED_NATIVE) /* linspace(1 - 1/T, 0, N+1)[:-1] */
                s = np_linspace(1.0 - 1.0 / TRAIN_TIMESTEPS, 0.0, steps + 1, i);
            else /* linspace(1, 1/T, N+1)[:-1] */
                s = np_linspace(1.0, 1.0 / TRAIN_TIMESTEPS, steps + 1, i);
            sigmas[i] = flow_shift(shift, s);
        }
        if (fabs(sigmas[0] - 1.0) < FIRST_SIGMA_EPS) sigmas[0] -= FIRST_SIGMA_EPS;
        break;
    case C3_SCHED_KARRAS: {
        if (!(sigma_min > 0) || !(sigma_max > sigma_min) || !isfinite(sigma_max))
            return c3_fail(C3_EUSAGE,
                           "karras schedule needs 0 < sigma_min < sigma_max (got %g, %g); check "
                           "scheduler_config.json",
                           sigma_min, sigma_max);
        double min_inv = pow(sigma_min, 1.0 / KARRAS_RHO), max_inv = pow(sigma_max, 1.0 / KARRAS_RHO);
        for (int i = 0; i < steps; i++) {
            double ramp = np_linspace(0.0, 1.0, steps, i);
            double a = pow(max_inv + ramp * (min_inv - max_inv), KARRAS_RHO);
            sigmas[i] = a / (a + 1.0); /* flow sigma from the VE sigma; no shift */
        }
        break;
    }
    case C3_SCHED_FLOWMATCH4:
        if (steps != C3_TLIST4_N)
            return c3_fail(C3_EUSAGE,
                           "the flowmatch4 schedule has exactly %d steps (got %d); use --steps %d",
                           C3_TLIST4_N, steps, C3_TLIST4_N);
        return sched_fixed(c3_tlist4, C3_TLIST4_N, 1.0, TRAIN_TIMESTEPS, sigmas, timesteps);
    default:
        return c3_fail(C3_EUSAGE, "unknown schedule %d", (int)kind);
    }
    sigmas[steps] = 0.0; /* final_sigmas_type "zero" */
    for (int i = 0; i < steps; i++)
        timesteps[i] = (double)(int64_t)(sigmas[i] * TRAIN_TIMESTEPS);
    return C3_OK;
}

int sched_fixed(const double *t_list, int n, double shift, int num_train, double *sigmas,
                double *timesteps) {
    if (n < 1 || n > C3_MAX_TLIST)
        return c3_fail(C3_EUSAGE, "a fixed-step schedule needs 1..%d sigmas (got %d)", C3_MAX_TLIST,
                       n);
    if (!(shift > 0) || !isfinite(shift))
        return c3_fail(C3_EUSAGE, "flow shift must be a positive number (got %g)", shift);
    /* numpy float32 arithmetic: the Python-float scalars become float32
     * operands (shift and shift - 1, the latter taken in double first) */
    const float k = (float)shift, km1 = (float)(shift - 1.0), nt = (float)num_train;
    for (int i = 0; i < n; i++) {
        float s = (float)t_list[i];
        if (!(s > 0.0f) || s > 1.0f)
            return c3_fail(C3_EUSAGE,
                           "fixed-step sigma %d is %g; every t_list entry must be in (0, 1]", i,
                           t_list[i]);
        float num = k * s;
        float den = 1.0f + km1 * s;
        float sig = num / den;
        sigmas[i] = sig;
        timesteps[i] = (double)(sig * nt); /* torch float32: sigmas * num_train_timesteps */
    }
    sigmas[n] = 0.0;
    return C3_OK;
}
