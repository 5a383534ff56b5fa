/* sampler.c - the UniPC bh2 sampler and the distilled FlowMatch Euler SDE
 * sampler (spec section 4).
 *
 * The UniPC step mirrors diffusers' UniPCMultistepScheduler.step() with
 * flow sigmas, predict_x0, solver_type bh2, solver_order 2 and
 * lower_order_final: every coefficient is computed in float32 from the
 * float32 sigmas, in the same operation order as the reference (which runs
 * on torch float32 scalars), so the latents agree to a few float32 ulps.
 * The FlowMatch step is FlowMatchEulerDiscreteScheduler.step() with
 * stochastic_sampling, in float32. Long latents are stepped on the OpenMP
 * threads (element by element: the same numbers as one thread's).
 */
#include "sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define UNIPC_ORDER 2 /* solver_order of the base checkpoints */
/* Latents from this many floats are stepped on the OpenMP threads (a 720p
 * video's 8.3 M floats: 47 ms a UniPC step and 14 ms a CFG combine on one
 * core of the build machine, inside every step's time; memory-bound, so
 * the gain is the host's bandwidth over one core's). Each element's
 * arithmetic is the same on any thread: bit-identical to one thread's. */
#define C3_SAMPLER_PAR_MIN 65536

struct c3_sampler {
    c3_sampler_kind kind;
    int steps;
    float *sig; /* [steps+1] sigmas as float32, as the reference stores them */
    int64_t n;  /* latent floats */
    int next;   /* the step expected next */
    /* UniPC state */
    float *m1, *m2; /* [n] model_outputs[-1] (m_{i-1}) and [-2] (m_{i-2}) */
    float *last;    /* [n] last_sample: the sample after the previous corrector */
    float *m;       /* [n] scratch: m_i */
    int lower_order_nums;
    int this_order;
};

c3_sampler *sampler_new(c3_sampler_kind kind, int steps, const double *sigmas, int64_t n) {
    if (steps < 1 || n < 0 || !sigmas) return NULL;
    c3_sampler *s = xcalloc(1, sizeof *s);
    s->kind = kind;
    s->steps = steps;
    s->n = n;
    s->sig = xmalloc((size_t)(steps + 1) * sizeof *s->sig);
    for (int i = 0; i <= steps; i++)
        s->sig[i] = (float)sigmas[i];
    if (kind == C3_SAMPLER_UNIPC) {
        size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
        s->m1 = xmalloc(bytes);
        s->m2 = xmalloc(bytes);
        s->last = xmalloc(bytes);
        s->m = xmalloc(bytes);
    }
    return s;
}

void sampler_free(c3_sampler *s) {
    if (!s) return;
    free(s->sig);
    free(s->m1);
    free(s->m2);
    free(s->last);
    free(s->m);
    free(s);
}

int sampler_order(const c3_sampler *s) {
    return s->kind == C3_SAMPLER_UNIPC ? s->this_order : 1;
}

bool sampler_needs_noise(const c3_sampler *s, int i) {
    return s && s->kind == C3_SAMPLER_FLOWMATCH && i >= 0 && i < s->steps && s->sig[i + 1] > 0;
}

/* lambda(sigma) = log(alpha) - log(sigma), alpha = 1 - sigma, in float32. */
static float lambda_of(float sigma) {
    float alpha = 1.0f - sigma;
    return logf(alpha) - logf(sigma);
}

/* torch.linalg.solve of the 2x2 system [[1, 1], [r, 1]] rho = [b0, b1] by LU
 * with partial pivoting (LAPACK gesv), in float32. */
static void solve2(float r, float b0, float b1, float *rho0, float *rho1) {
    float a00 = 1.0f, a01 = 1.0f, a10 = r, a11 = 1.0f, y0 = b0, y1 = b1;
    if (fabsf(r) > 1.0f) { /* swap rows */
        a00 = r;
        a01 = 1.0f;
        a10 = 1.0f;
        a11 = 1.0f;
        y0 = b1;
        y1 = b0;
    }
    float l = a10 * (1.0f / a00);
    float u11 = a11 - l * a01;
    y1 = y1 - l * y0;
    *rho1 = y1 / u11;
    *rho0 = (y0 - a01 * *rho1) / a00;
}

/* UniPC bh2 step i: diffusers UniPCMultistepScheduler.step(v, t_i, x). */
static void unipc_step(c3_sampler *s, int i, const float *v, float *x, float *x0_pred,
                       float *x_corrected) {
    const int64_t n = s->n;
    const float *sig = s->sig;
    float *m = s->m;
    /* convert_model_output (flow_prediction, predict_x0): m_i = x - sigma_i v */
    const float sigma_i = sig[i];
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
    for (int64_t k = 0; k < n; k++)
        m[k] = x[k] - sigma_i * v[k];
    if (x0_pred) memcpy(x0_pred, m, (size_t)n * sizeof(float));

    /* Corrector (UniC), with the order chosen at step i-1, from last_sample. */
    if (i > 0) {
        const int order = s->this_order;
        const float sigma_t = sig[i], sigma_s0 = sig[i - 1];
        const float alpha_t = 1.0f - sigma_t;
        const float lambda_t = lambda_of(sigma_t), lambda_s0 = lambda_of(sigma_s0);
        const float h = lambda_t - lambda_s0;
        const float hh = -h;
        const float h_phi_1 = expm1f(hh);
        const float b_h = expm1f(hh);
        float h_phi_k = h_phi_1 / hh - 1.0f;
        const float b0 = h_phi_k * 1.0f / b_h;
        h_phi_k = h_phi_k / hh - 1.0f / 2.0f;
        const float b1 = h_phi_k * 2.0f / b_h;
        const float ratio = sigma_t / sigma_s0, c_m0 = alpha_t * h_phi_1, c_res = alpha_t * b_h;
        const float *m0 = s->m1;
        if (order == 1) {
            const float rho_c = 0.5f;
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
            for (int64_t k = 0; k < n; k++) {
                float xt_ = ratio * s->last[k] - c_m0 * m0[k];
                x[k] = xt_ - c_res * (rho_c * (m[k] - m0[k]));
            }
        } else {
            const float lambda_s1 = lambda_of(sig[i - 2]);
            const float rk = (lambda_s1 - lambda_s0) / h;
            float rho0, rho1;
            solve2(rk, b0, b1, &rho0, &rho1);
            const float *mm1 = s->m2;
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
            for (int64_t k = 0; k < n; k++) {
                float d1 = (mm1[k] - m0[k]) / rk;
                float xt_ = ratio * s->last[k] - c_m0 * m0[k];
                float corr = rho0 * d1;
                x[k] = xt_ - c_res * (corr + rho1 * (m[k] - m0[k]));
            }
        }
    }
    if (x_corrected) memcpy(x_corrected, x, (size_t)n * sizeof(float));

    /* History: model_outputs shift left, m_i becomes [-1]. */
    float *t = s->m2;
    s->m2 = s->m1;
    s->m1 = m;
    s->m = t;
    const float *mi = s->m1, *mprev = s->m2;

    int order = C3_MIN(UNIPC_ORDER, s->steps - i); /* lower_order_final */
    s->this_order = C3_MIN(order, s->lower_order_nums + 1);
    memcpy(s->last, x, (size_t)n * sizeof(float));

    /* Predictor (UniP) from sigma_i to sigma_{i+1}. */
    {
        const float sigma_t = sig[i + 1], sigma_s0 = sig[i];
        const float alpha_t = 1.0f - sigma_t;
        const float lambda_t = lambda_of(sigma_t), lambda_s0 = lambda_of(sigma_s0);
        const float h = lambda_t - lambda_s0; /* +inf on the last step (sigma 0) */
        const float hh = -h;
        const float h_phi_1 = expm1f(hh);
        const float b_h = expm1f(hh);
        const float ratio = sigma_t / sigma_s0, c_m0 = alpha_t * h_phi_1, c_res = alpha_t * b_h;
        if (s->this_order == 1) {
            /* On the last step ratio = 0 and c_m0 = -1: x_N = m_{N-1} exactly. */
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
            for (int64_t k = 0; k < n; k++)
                x[k] = ratio * x[k] - c_m0 * mi[k];
        } else {
            const float lambda_s1 = lambda_of(sig[i - 1]);
            const float rk = (lambda_s1 - lambda_s0) / h;
            const float rho_p = 0.5f;
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
            for (int64_t k = 0; k < n; k++) {
                float d1 = (mprev[k] - mi[k]) / rk;
                float xt_ = ratio * x[k] - c_m0 * mi[k];
                x[k] = xt_ - c_res * (rho_p * d1);
            }
        }
    }
    if (s->lower_order_nums < UNIPC_ORDER) s->lower_order_nums++;
}

/* FlowMatch Euler SDE: x' = (1 - s') (x - s v) + s' eps, in diffusers'
 * operation order (float32); on the last step s' = 0 and x' = x0. */
static void flowmatch_step(c3_sampler *s, int i, const float *v, float *x, const float *noise,
                           float *x0_pred, float *x_corrected) {
    const float sigma = s->sig[i], sigma_next = s->sig[i + 1];
    const float keep = 1.0f - sigma_next;
#pragma omp parallel for schedule(static) if (s->n > C3_SAMPLER_PAR_MIN)
    for (int64_t k = 0; k < s->n; k++) {
        float x0 = x[k] - sigma * v[k];
        if (x0_pred) x0_pred[k] = x0;
        if (x_corrected) x_corrected[k] = x[k];
        x[k] = sigma_next > 0 ? keep * x0 + sigma_next * noise[k] : x0;
    }
}

int sampler_step(c3_sampler *s, int i, const float *v, float *x, const float *noise, float *x0_pred,
                 float *x_corrected) {
    if (!s) return c3_fail(C3_EFAIL, "sampler_step: no sampler");
    if (i < 0 || i >= s->steps)
        return c3_fail(C3_EFAIL, "sampler_step: step %d is outside 0..%d", i, s->steps - 1);
    if (i == 0) { /* a new run */
        s->next = 0;
        s->lower_order_nums = 0;
        s->this_order = 0;
    }
    if (i != s->next)
        return c3_fail(C3_EFAIL, "sampler_step: step %d called out of order (expected step %d)", i,
                       s->next);
    if (s->kind == C3_SAMPLER_UNIPC) {
        unipc_step(s, i, v, x, x0_pred, x_corrected);
    } else if (s->kind == C3_SAMPLER_FLOWMATCH) {
        if (!noise && s->sig[i + 1] > 0)
            return c3_fail(C3_EINPUT, "flowmatch sampler: step %d needs noise (sigma' = %g)", i,
                           (double)s->sig[i + 1]);
        flowmatch_step(s, i, v, x, noise, x0_pred, x_corrected);
    } else {
        return c3_fail(C3_EFAIL, "sampler_step: unknown sampler kind %d", (int)s->kind);
    }
    s->next = i + 1;
    return C3_OK;
}

/* ------------------------------------------------------------ CFG */

void cfg_combine(float *out, const float *cond, const float *uncond, float g, int64_t n) {
    /* u + g (c - u), the reference's operation order */
#pragma omp parallel for schedule(static) if (n > C3_SAMPLER_PAR_MIN)
    for (int64_t k = 0; k < n; k++)
        out[k] = uncond[k] + g * (cond[k] - uncond[k]);
}
