/* denoise.c - the GEN step loop and the CFG dispatch, on every rank. */
#include "denoise.h"

#include <stdio.h>
#include <stdlib.h>

#include "rng.h"
#include "sampler.h"

/* Fault injection for the tests: rank c3_inject_fail_rank fails at step 2. */
int c3_inject_fail_rank = -1;
bool c3_denoise_reanchor = true;

static bool cfg_active(const cosmos3_settings *s, double t) {
    if (s->guidance == 1.0) return false;
    if (!s->guidance_interval) return true;
    return (double)t >= s->guidance_lo && (double)t <= s->guidance_hi;
}

static void emit_branch(c3_runtime *rt, int rank, int group, int step, int branch, double sec) {
    cosmos3_event ev = {.kind = COSMOS3_EV_BRANCH,
                        .rank = rank,
                        .group = group,
                        .step = step,
                        .branch = branch,
                        .seconds = sec};
    rt_emit(rt, &ev);
}

/* UND once per branch this rank serves, reusing the K/V of the same ids. */
static int und_branches(c3_denoise *j, c3_rank *rk, int group, bool need_uncond, c3_undkv *kv[2]) {
    const c3_plan *p = &j->rt->plan;
    for (int b = 0; b < 2; b++) {
        if (p->cfg == 2 && b != group) continue;
        if (b == 1 && !need_uncond) continue;
        c3_undkv *u = &rk->und[b];
        size_t bytes = sizeof(int32_t) * (size_t)j->L[b];
        if (!(u->L == j->L[b] && rk->und_ids[b] && !memcmp(rk->und_ids[b], j->ids[b], bytes))) {
            undkv_free(u);
            free(rk->und_ids[b]);
            rk->und_ids[b] = NULL;
            int rc = model_und(rk->model, j->ids[b], j->L[b], u);
            if (rc) {
                undkv_free(u);
                return rc;
            }
            rk->und_ids[b] = xmalloc(bytes);
            memcpy(rk->und_ids[b], j->ids[b], bytes);
        }
        kv[b] = u;
    }
    return C3_OK;
}

/* One rank's loop: its CFG group's branches, the exchange, and the same
 * sampler step, so all ranks hold the same x. */
int denoise_check_finite(const float *x, int64_t n, const char *where, const char *stage) {
    /* in chunks on the OpenMP threads (a 720p video's pixels are 522 M
     * floats); the first bad element over all chunks, as one pass finds it */
    enum { CHUNK = 1 << 20 };
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
    size_t bad = (size_t)n;
#pragma omp parallel for schedule(static) reduction(min : bad) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        size_t off = (size_t)c * CHUNK, k = (size_t)C3_MIN((int64_t)CHUNK, n - (int64_t)off);
        size_t b = c3_first_nonfinite(x + off, k);
        if (b < k && off + b < bad) bad = off + b;
    }
    if (bad == (size_t)n) return C3_OK;
    return c3_fail(C3_EMODEL,
                   "%s hold %g at element %zu: the %s weights hold NaN or Inf values; check the "
                   "checkpoint with 'cosmos3 info --check -m DIR' and re-copy it",
                   where, (double)x[bad], bad, stage);
}

static int rank_loop(c3_denoise *j, c3_rank *rk) {
    c3_runtime *rt = j->rt;
    const c3_plan *p = &rt->plan;
    const cosmos3_settings *s = j->s;
    int group = plan_cfg_rank(p, rk->rank);
    bool lead = plan_tp_rank(p, rk->rank) == 0 && plan_sp_rank(p, rk->rank) == 0;
    bool sde = j->sched == C3_SCHED_FLOWMATCH4;
    c3_undkv *kv[2] = {NULL, NULL};
    c3_latent_geom g = {.T = j->T, .h = j->h, .w = j->w, .fps = s->fps, .pinned = j->pinned};
    float *x = xmalloc((size_t)j->n * sizeof(float));        /* [C, T, h, w] */
    float *vbuf = xmalloc((size_t)j->n * 2 * sizeof(float)); /* [cond | uncond] */
    float *v = xmalloc((size_t)j->n * sizeof(float));
    float *noise = sde && !j->step_noise ? xmalloc((size_t)j->n * sizeof(float)) : NULL;
    memcpy(x, j->x_init, (size_t)j->n * sizeof(float));
    c3_sampler *smp =
        sampler_new(sde ? C3_SAMPLER_FLOWMATCH : C3_SAMPLER_UNIPC, s->steps, j->sigmas, j->n);
    bool need_uncond = false;
    for (int i = 0; i < s->steps; i++)
        need_uncond |= cfg_active(s, j->timesteps[i]);
    double t0 = c3_now();
    if (rk->rank == 0) {
        cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "und", .begin = true};
        rt_emit(rt, &ev);
    }
    model_fp8_und_act(rk->model, !(j->tc->fp8_policy && j->tc->fp8_reasoner_a16));
    int rc = und_branches(j, rk, group, need_uncond, kv);
    if (rk->rank == 0) {
        j->t_und = c3_now() - t0;
        cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "und", .seconds = j->t_und};
        if (rc == C3_OK) rt_emit(rt, &ev);
        cosmos3_event ev2 = {
            .kind = COSMOS3_EV_STAGE, .stage = "denoise", .begin = true, .steps = s->steps};
        if (rc == C3_OK) rt_emit(rt, &ev2);
    }
    double tl = c3_now();
    for (int i = 0; i < s->steps && rc == C3_OK; i++) {
        if (rt->cancel) {
            rc = c3_fail(C3_ECANCEL, "cancelled");
            break;
        }
        if (rk->rank == c3_inject_fail_rank && i == 1) {
            rc = c3_fail(C3_EFAIL, "rank %d: injected failure", rk->rank);
            break;
        }
        double t = j->timesteps[i];
        bool cfg_on = cfg_active(s, t);
        /* FP8 weights: this step's products, W8A8 or W8A16 (the checkpoint's policy) */
        model_fp8_gen_act(rk->model, model_fp8_step_w8a8(j->tc, i, s->steps));
        double ts = c3_now(), tc = 0, tu = 0;
        if (i == 0 && rk->rank == 0) j->first_step_at = ts;
        if (p->cfg == 1 && cfg_on && model_batches(rk->model)) {
            /* both branches as one batch: the step's time is theirs together,
             * reported half to each */
            double a = c3_now();
            const c3_undkv *both[2] = {kv[0], kv[1]};
            float *out[2] = {vbuf, vbuf + j->n};
            rc = model_gen_batch(rk->model, 2, both, x, &g, t, out);
            tc = tu = (c3_now() - a) / 2;
            if (lead && rc == C3_OK) {
                emit_branch(rt, rk->rank, 0, i + 1, 0, tc);
                emit_branch(rt, rk->rank, 0, i + 1, 1, tu);
            }
        } else if (p->cfg == 1) {
            double a = c3_now();
            rc = model_gen(rk->model, kv[0], x, &g, t, vbuf);
            tc = c3_now() - a;
            if (lead && rc == C3_OK) emit_branch(rt, rk->rank, 0, i + 1, 0, tc);
            if (rc == C3_OK && cfg_on) {
                a = c3_now();
                rc = model_gen(rk->model, kv[1], x, &g, t, vbuf + j->n);
                tu = c3_now() - a;
                if (lead && rc == C3_OK) emit_branch(rt, rk->rank, 0, i + 1, 1, tu);
            }
        } else {
            /* group 0: cond; group 1: uncond, idle outside the guidance interval */
            float *mine = vbuf + (group ? j->n : 0);
            double a = c3_now();
            if (group == 0 || cfg_on) rc = model_gen(rk->model, kv[group], x, &g, t, mine);
            double sec = c3_now() - a;
            if (group == 0)
                tc = sec;
            else
                tu = sec;
            if (lead && rc == C3_OK && (group == 0 || cfg_on))
                emit_branch(rt, rk->rank, group, i + 1, group, sec);
            /* exchange: all-gather over the CFG pair (cond | uncond) */
            if (rc == C3_OK) rc = rk->cfg->allgather_host(rk->cfg, vbuf, mine, j->n);
        }
        if (rc) break;
        double th = c3_now(); /* the step's host work: CFG combine, noise, the sampler */
        if (cfg_on)
            cfg_combine(v, vbuf, vbuf + j->n, (float)s->guidance, j->n);
        else
            memcpy(v, vbuf, (size_t)j->n * sizeof(float));
        const float *eps = NULL;
        if (sampler_needs_noise(smp, i)) {
            /* step i's draw: the given one, or elements [(i+1) n, (i+2) n) of
             * the seed's stream (the initial noise is [0, n)); every rank
             * draws the same numbers */
            if (j->step_noise) {
                eps = j->step_noise + (size_t)i * (size_t)j->n;
            } else {
                rng_normal(s->seed, (uint64_t)(i + 1) * (uint64_t)j->n, noise, j->n);
                eps = noise;
            }
        }
        rc = sampler_step(smp, i, v, x, eps, NULL, NULL);
        /* the SDE step re-noised the pinned frames with the rest (their draws
         * come from the stream too, as upstream's generator draws the whole
         * tensor): back to the clean x0, mask * x0 + (1 - mask) * x */
        if (rc == C3_OK && sde && j->cond && c3_denoise_reanchor) cond_mix(j->cond, x);
        if (rk->rank == 0) j->host_sum += c3_now() - th;
        if (rc == C3_OK && i == 0 && rk->rank == 0) /* cheap: one pass over the latents */
            rc = denoise_check_finite(x, j->n, "the latents after the first step", "transformer");
        if (rc == C3_OK) { /* this rank's memory, from our own accounting */
            int dev = p->devices[rk->rank];
            cosmos3_event mev = {.kind = COSMOS3_EV_MEMORY,
                                 .rank = rk->rank,
                                 .group = group,
                                 .device = dev,
                                 .step = i + 1,
                                 .steps = s->steps,
                                 .mem_weights = rk->be->mem[0],
                                 .mem_kv = rk->be->mem[1],
                                 .mem_act = rk->be->mem[2],
                                 .dev_total = p->dev_total[rk->rank],
                                 .dev_free = p->dev_free[rk->rank]};
            rt_emit(rt, &mev);
        }
        if (rk->rank == 0 && rc == C3_OK) {
            double st = c3_now() - ts;
            cosmos3_event ev = {.kind = COSMOS3_EV_STEP,
                                .step = i + 1,
                                .steps = s->steps,
                                .seconds = st,
                                .cond_s = tc,
                                .uncond_s = tu,
                                .timestep = t};
            if (p->cfg == 2) ev.uncond_s = 0; /* the other group's COSMOS3_EV_BRANCH says it */
            rt_emit(rt, &ev);
            if (i == 0) j->step_first = st;
            j->step_sum += st;
            j->cond_sum += tc;
            j->uncond_sum += tu;
            j->steps_run++;
        }
    }
    if (rk->rank == 0) {
        j->t_loop = c3_now() - tl;
        if (rc == C3_OK) {
            memcpy(j->x_final, x, (size_t)j->n * sizeof(float));
            cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "denoise", .seconds = j->t_loop};
            rt_emit(rt, &ev);
        }
    }
    sampler_free(smp);
    free(x);
    free(vbuf);
    free(v);
    free(noise);
    return rc;
}

static int rank_run(c3_runtime *rt, c3_rank *rk, void *ud) {
    (void)rt;
    return rank_loop(ud, rk);
}

int denoise_run(c3_denoise *j) {
    C3_TRY(rt_reset(j->rt));
    return rt_run_ranks(j->rt, rank_run, j, false);
}
