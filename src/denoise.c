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

/* A job's event: to the runtime's current job, or a batch's own (j->job). */
static void jemit(c3_runtime *rt, const c3_denoise *j, cosmos3_event *ev) {
    rt_emit_to(rt, j->job, j->on_event, j->user, ev);
}

static void emit_branch(c3_runtime *rt, const c3_denoise *j, int rank, int group, int step,
                        int branch, double sec) {
    cosmos3_event ev = {.kind = COSMOS3_EV_BRANCH,
                        .rank = rank,
                        .group = group,
                        .step = step,
                        .branch = branch,
                        .seconds = sec};
    jemit(rt, j, &ev);
}

/* The UND K/V of ids[L] on this rank: a cache slot computed from the same
 * ids, else the least recently used slot no request of this run holds,
 * computed now. */
static int und_get(c3_rank *rk, const int32_t *ids, int L, c3_undkv **out) {
    size_t bytes = sizeof(int32_t) * (size_t)L;
    int victim = -1;
    for (int s = 0; s < C3_UND_SLOTS; s++) {
        if (rk->und_ids[s] && rk->und[s].L == L && !memcmp(rk->und_ids[s], ids, bytes)) {
            rk->und_used[s] = rk->und_run;
            *out = &rk->und[s];
            return C3_OK;
        }
        if (rk->und_used[s] == rk->und_run && rk->und_ids[s]) continue; /* this run's */
        if (victim < 0 || !rk->und_ids[s] ||
            (rk->und_ids[victim] && rk->und_used[s] < rk->und_used[victim]))
            victim = s;
    }
    if (victim < 0) return c3_fail(C3_EFAIL, "UND: more prompts than %d in one run", C3_UND_SLOTS);
    c3_undkv *u = &rk->und[victim];
    undkv_free(u);
    free(rk->und_ids[victim]);
    rk->und_ids[victim] = NULL;
    int rc = model_und(rk->model, ids, L, u);
    if (rc) {
        undkv_free(u);
        return rc;
    }
    rk->und_ids[victim] = xmalloc(bytes);
    memcpy(rk->und_ids[victim], ids, bytes);
    rk->und_used[victim] = rk->und_run;
    *out = u;
    return C3_OK;
}

/* After a run: only the caches of its first request stay (a run of one
 * keeps what it used, as a single request always did). */
static void und_trim(c3_rank *rk, c3_undkv *const keep[2]) {
    for (int s = 0; s < C3_UND_SLOTS; s++) {
        if (!rk->und_ids[s] || &rk->und[s] == keep[0] || &rk->und[s] == keep[1]) continue;
        undkv_free(&rk->und[s]);
        free(rk->und_ids[s]);
        rk->und_ids[s] = NULL;
        rk->und_used[s] = 0;
    }
}
/* NaN or Inf in host data (denoise.h). */
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

uint64_t denoise_sound_offset(int steps, int64_t n, int64_t ns, int k) {
    return (uint64_t)(steps + 1) * (uint64_t)n + (uint64_t)k * (uint64_t)ns;
}

/* One request's state on one rank. */
typedef struct {
    c3_denoise *j;
    bool live;        /* still stepping */
    bool cfg_on;      /* this step runs its uncond branch */
    c3_undkv *kv[2];  /* cond, uncond (NULL where this rank does not serve it) */
    c3_latent_geom g; /* its grid, pinned frames and sound */
    float *x;         /* [n] its latents [C, T, h, w] */
    float *vbuf;      /* [2 n] velocities [cond | uncond] */
    float *v, *noise; /* [n] the guided velocity; the SDE's draw (NULL: none) */
    c3_sampler *smp;
    c3_stepcache *sc; /* a run of one only */
    int64_t ns;       /* joint sound (a run of one only) */
    float *sx, *sbuf, *sv, *snoise;
    c3_sampler *ssmp;
    float *sout[2];
    double tc, tu; /* this step's branch times */
} djob;

typedef struct {
    c3_denoise *const *js;
    int n;
} dbatch;

static void djob_free(djob *d) {
    sampler_free(d->smp);
    stepcache_free(d->sc);
    sampler_free(d->ssmp);
    free(d->sx);
    free(d->sbuf);
    free(d->sv);
    free(d->snoise);
    free(d->x);
    free(d->vbuf);
    free(d->v);
    free(d->noise);
}

static void djob_init(djob *d, c3_denoise *j) {
    const cosmos3_settings *s = j->s;
    bool sde = j->sched == C3_SCHED_FLOWMATCH4;
    *d = (djob){.j = j, .live = true};
    d->g = (c3_latent_geom){.T = j->T, .h = j->h, .w = j->w, .fps = s->fps, .pinned = j->pinned};
    d->x = xmalloc((size_t)j->n * sizeof(float));
    d->vbuf = xmalloc((size_t)j->n * 2 * sizeof(float));
    d->v = xmalloc((size_t)j->n * sizeof(float));
    d->noise = sde && !j->step_noise ? xmalloc((size_t)j->n * sizeof(float)) : NULL;
    memcpy(d->x, j->x_init, (size_t)j->n * sizeof(float));
    d->smp = sampler_new(sde ? C3_SAMPLER_FLOWMATCH : C3_SAMPLER_UNIPC, s->steps, j->sigmas, j->n);
    d->sc = j->cache ? stepcache_new(j->cache, &j->cache_params) : NULL;
    d->ns = j->Ts > 0 ? j->ns : 0;
    if (d->ns) { /* joint sound: its latents sx, velocities [cond | uncond], and sampler */
        int64_t ns = d->ns;
        d->sx = xmalloc((size_t)ns * sizeof(float));
        d->sbuf = xmalloc((size_t)ns * 2 * sizeof(float));
        d->sv = xmalloc((size_t)ns * sizeof(float));
        if (sde) d->snoise = xmalloc((size_t)ns * sizeof(float));
        memcpy(d->sx, j->s_init, (size_t)ns * sizeof(float));
        d->ssmp =
            sampler_new(sde ? C3_SAMPLER_FLOWMATCH : C3_SAMPLER_UNIPC, s->steps, j->sigmas, ns);
        d->g.sound_T = j->Ts;
        d->g.sound = d->sx;
        d->g.sound_vel = d->sout;
    }
}

/* This rank's part of one step for the live requests: the branches it
 * serves (cond: CFG group 0 or no CFG parallelism; uncond where the
 * request's guidance runs this step: group 1 or none), batched in calls of
 * up to C3_GEN_MAX_BATCH where the model batches, else one call each. */
static int step_branches(c3_runtime *rt, c3_rank *rk, djob *d, int nj, int group, bool lead,
                         int step, double t) {
    const c3_plan *p = &rt->plan;
    int bj[2 * C3_BATCH_MAX], bb[2 * C3_BATCH_MAX], nbr = 0;
    for (int k = 0; k < nj; k++) {
        d[k].tc = d[k].tu = 0;
        if (!d[k].live) continue;
        if (p->cfg == 1 || group == 0) bj[nbr] = k, bb[nbr++] = 0;
        if (d[k].cfg_on && (p->cfg == 1 || group == 1)) bj[nbr] = k, bb[nbr++] = 1;
    }
    int per = model_batches(rk->model) ? C3_GEN_MAX_BATCH : 1;
    for (int q0 = 0; q0 < nbr; q0 += per) {
        int nb = C3_MIN(per, nbr - q0);
        const c3_undkv *kvs[C3_GEN_MAX_BATCH];
        const float *lats[C3_GEN_MAX_BATCH];
        float *out[C3_GEN_MAX_BATCH], *sout[C3_GEN_MAX_BATCH];
        int lat_of[C3_GEN_MAX_BATCH], nl = 0;
        for (int q = 0; q < nb; q++) {
            djob *dk = &d[bj[q0 + q]];
            int b = bb[q0 + q];
            kvs[q] = dk->kv[b];
            out[q] = dk->vbuf + (b ? dk->j->n : 0);
            sout[q] = dk->ns ? dk->sbuf + (b ? dk->ns : 0) : NULL;
            if (nl == 0 || lats[nl - 1] != dk->x) lats[nl++] = dk->x;
            lat_of[q] = nl - 1;
        }
        djob *d0 = &d[bj[q0]];
        double a = c3_now();
        int rc;
        if (nl == 1) { /* one request: through its step cache, as a single request always ran */
            c3_latent_geom g = d0->g;
            if (d0->ns) g.sound_vel = sout;
            c3_gen_cache io;
            if (d0->sc) stepcache_gen(d0->sc, bb[q0], nb, &io);
            rc = model_gen_cached(rk->model, nb, kvs, d0->x, &g, t, out, d0->sc ? &io : NULL);
        } else {
            rc = model_gen_multi(rk->model, nb, kvs, nl, lats, lat_of, &d0->g, t, out, NULL);
        }
        C3_TRY(rc);
        /* a batched call's time is its branches' together, reported in equal parts */
        double sec = (c3_now() - a) / nb;
        for (int q = 0; q < nb; q++) {
            djob *dk = &d[bj[q0 + q]];
            int b = bb[q0 + q];
            if (b)
                dk->tu += sec;
            else
                dk->tc += sec;
            if (lead) emit_branch(rt, dk->j, rk->rank, p->cfg == 2 ? group : 0, step, b, sec);
        }
    }
    return C3_OK;
}

/* CFG parallelism: the two groups' predictions of the live requests
 * all-gathered (group 0 cond, group 1 uncond) into every request's vbuf. */
static int step_exchange(c3_rank *rk, djob *d, int nj, int group) {
    int64_t n = d[0].j->n;
    int live = 0;
    for (int k = 0; k < nj; k++)
        live += d[k].live;
    float *mine = xmalloc((size_t)(live * n) * sizeof(float));
    float *all = xmalloc((size_t)(2 * live * n) * sizeof(float));
    for (int k = 0, i = 0; k < nj; k++)
        if (d[k].live)
            memcpy(mine + (size_t)(i++ * n), d[k].vbuf + (group ? n : 0),
                   (size_t)n * sizeof(float));
    int rc = rk->cfg->allgather_host(rk->cfg, all, mine, live * n);
    for (int k = 0, i = 0; k < nj && rc == C3_OK; k++) {
        if (!d[k].live) continue;
        memcpy(d[k].vbuf, all + (size_t)(i * n), (size_t)n * sizeof(float));
        memcpy(d[k].vbuf + n, all + (size_t)((live + i) * n), (size_t)n * sizeof(float));
        i++;
        if (d[k].ns) /* joint sound (a run of one): its own exchange */
            rc = rk->cfg->allgather_host(rk->cfg, d[k].sbuf, d[k].sbuf + (group ? d[k].ns : 0),
                                         d[k].ns);
    }
    free(mine);
    free(all);
    return rc;
}

/* The requests' own cancel flags, the same on every rank (the world's OR):
 * true where request k stops now. */
static int step_cancels(const c3_runtime *rt, c3_rank *rk, djob *d, int nj, bool *stop) {
    float mine[C3_BATCH_MAX], all[C3_BATCH_MAX * C3_MAX_RANKS];
    bool any = false;
    /* ranks in several processes: the flag lives in process 0's request
     * only (the others get a copy without it), so it is not read there */
    bool read = rt->procs.size <= 1;
    for (int k = 0; k < nj; k++) {
        mine[k] = read && d[k].live && d[k].j->cancel && *d[k].j->cancel ? 1.0f : 0.0f;
        any |= read && d[k].j->cancel != NULL;
        stop[k] = mine[k] != 0;
    }
    /* every rank sees the same requests, so they agree on whether to ask */
    if (!any || !rk->world || rk->world->size <= 1) return C3_OK;
    C3_TRY(rk->world->allgather_host(rk->world, all, mine, nj));
    for (int r = 0; r < rk->world->size; r++)
        for (int k = 0; k < nj; k++)
            stop[k] |= all[r * nj + k] != 0;
    return C3_OK;
}

/* A request ends alone (its cancel flag, its latents): every rank drops it
 * the same way; the lead rank keeps its status and message. */
static void drop(djob *d, bool lead, int rc) {
    d->live = false;
    if (!lead) return;
    d->j->rc = rc;
    snprintf(d->j->err, sizeof d->j->err, "%s", rc == C3_ECANCEL ? "cancelled" : c3_errmsg());
}

/* One step's host work of one request: the CFG combine with its guidance,
 * its noise, its sampler step (and its sound's), the pinned frames back. */
static int step_host(djob *d, int i, double t) {
    c3_denoise *j = d->j;
    const cosmos3_settings *s = j->s;
    bool sde = j->sched == C3_SCHED_FLOWMATCH4;
    (void)t;
    if (d->cfg_on)
        cfg_combine(d->v, d->vbuf, d->vbuf + j->n, (float)s->guidance, j->n);
    else
        memcpy(d->v, d->vbuf, (size_t)j->n * sizeof(float));
    const float *eps = NULL;
    if (sampler_needs_noise(d->smp, i)) {
        /* step i's draw: the given one, or elements [(i+1) n, (i+2) n) of
         * the seed's stream (the initial noise is [0, n)); every rank
         * draws the same numbers */
        if (j->step_noise) {
            eps = j->step_noise + (size_t)i * (size_t)j->n;
        } else {
            rng_normal(s->seed, (uint64_t)(i + 1) * (uint64_t)j->n, d->noise, j->n);
            eps = d->noise;
        }
    }
    C3_TRY(sampler_step(d->smp, i, d->v, d->x, eps, NULL, NULL));
    if (d->ns) { /* the sound: the same guidance, its own sampler */
        int64_t ns = d->ns;
        if (d->cfg_on)
            cfg_combine(d->sv, d->sbuf, d->sbuf + ns, (float)s->guidance, ns);
        else
            memcpy(d->sv, d->sbuf, (size_t)ns * sizeof(float));
        const float *seps = NULL;
        if (sampler_needs_noise(d->ssmp, i)) { /* after the initial sound noise */
            rng_normal(s->seed, denoise_sound_offset(s->steps, j->n, ns, i + 1), d->snoise, ns);
            seps = d->snoise;
        }
        C3_TRY(sampler_step(d->ssmp, i, d->sv, d->sx, seps, NULL, NULL));
    }
    /* the SDE step re-noised the pinned frames with the rest (their draws
     * come from the stream too, as upstream's generator draws the whole
     * tensor): back to the clean x0, mask * x0 + (1 - mask) * x */
    if (sde && j->cond && c3_denoise_reanchor) cond_mix(j->cond, d->x);
    return C3_OK;
}

static int rank_loop(const dbatch *bt, c3_rank *rk) {
    c3_runtime *rt = bt->js[0]->rt;
    const c3_plan *p = &rt->plan;
    const c3_denoise *j0 = bt->js[0];
    const cosmos3_settings *s0 = j0->s;
    int nj = bt->n, steps = s0->steps;
    int group = plan_cfg_rank(p, rk->rank);
    bool lead = plan_tp_rank(p, rk->rank) == 0 && plan_sp_rank(p, rk->rank) == 0;
    bool first = rk->rank == rt->lo; /* this process's first rank: the events, the results */
    djob *d = xcalloc((size_t)nj, sizeof *d);
    for (int k = 0; k < nj; k++)
        djob_init(&d[k], bt->js[k]);
    double t0 = c3_now();
    if (first)
        for (int k = 0; k < nj; k++) {
            cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "und", .begin = true};
            jemit(rt, d[k].j, &ev);
        }
    /* UND once per prompt this rank serves (shared by requests with the same ids) */
    model_fp8_und_act(rk->model, !(j0->tc->fp8_policy && j0->tc->fp8_reasoner_a16));
    rk->und_run++;
    int rc = C3_OK;
    for (int k = 0; k < nj && rc == C3_OK; k++) {
        c3_denoise *j = d[k].j;
        bool need_uncond = false;
        for (int i = 0; i < steps; i++)
            need_uncond |= cfg_active(j->s, j->timesteps[i]);
        for (int b = 0; b < 2 && rc == C3_OK; b++) {
            if (p->cfg == 2 && b != group) continue;
            if (b == 1 && !need_uncond) continue;
            rc = und_get(rk, j->ids[b], j->L[b], &d[k].kv[b]);
        }
    }
    double t_und = c3_now() - t0;
    if (first && rc == C3_OK)
        for (int k = 0; k < nj; k++) {
            d[k].j->t_und = t_und;
            cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "und", .seconds = t_und};
            jemit(rt, d[k].j, &ev);
            cosmos3_event ev2 = {
                .kind = COSMOS3_EV_STAGE, .stage = "denoise", .begin = true, .steps = steps};
            jemit(rt, d[k].j, &ev2);
        }
    double tl = c3_now();
    bool stop[C3_BATCH_MAX];
    for (int i = 0; i < steps && rc == C3_OK; i++) {
        if (rt->cancel) {
            rc = c3_fail(C3_ECANCEL, "cancelled");
            break;
        }
        if (rk->rank == c3_inject_fail_rank && i == 1) {
            rc = c3_fail(C3_EFAIL, "rank %d: injected failure", rk->rank);
            break;
        }
        /* a request whose own flag is set stops here, alone */
        if ((rc = step_cancels(rt, rk, d, nj, stop))) break;
        int live = 0;
        for (int k = 0; k < nj; k++) {
            if (stop[k] && d[k].live) drop(&d[k], first, C3_ECANCEL);
            live += d[k].live;
        }
        if (!live) break;
        double t = j0->timesteps[i];
        for (int k = 0; k < nj; k++)
            d[k].cfg_on = cfg_active(d[k].j->s, t);
        /* FP8 weights: this step's products, W8A8 or W8A16 (the checkpoint's policy) */
        model_fp8_gen_act(rk->model, model_fp8_step_w8a8(j0->tc, i, steps));
        double ts = c3_now();
        if (i == 0 && first)
            for (int k = 0; k < nj; k++)
                d[k].j->first_step_at = ts;
        /* the step cache (a run of one): every rank agrees whether the block stack runs */
        bool cached = false;
        djob *c0 = &d[0];
        c3_stepcache_step cst = {
            .model = rk->model,
            .be = rk->be,
            .rank = rk->rank,
            .tp_rank = plan_tp_rank(p, rk->rank),
            .kv = {c0->kv[0], c0->kv[1]},
            .serve = {p->cfg == 1 || group == 0, c0->cfg_on && (p->cfg == 1 || group == 1)},
            .active = {true, c0->cfg_on},
            .x = c0->x,
            .g = &c0->g,
            .C = (int)(j0->n / ((int64_t)j0->T * j0->h * j0->w)),
            .timestep = t,
            .sigma = j0->sigmas[i],
            .step = i,
            .steps = steps};
        if (c0->sc && (rc = stepcache_decide(c0->sc, &cst, rk->world, &cached))) break;
        if ((rc = step_branches(rt, rk, d, nj, group, lead, i + 1, t))) break;
        /* exchange: all-gather over the CFG pair (cond | uncond) */
        if (p->cfg == 2 && (rc = step_exchange(rk, d, nj, group))) break;
        double th = c3_now(); /* the step's host work: CFG combine, noise, the sampler */
        for (int k = 0; k < nj && rc == C3_OK; k++) {
            if (!d[k].live) continue;
            rc = step_host(&d[k], i, t);
            if (rc == C3_OK && d[k].sc) stepcache_commit(d[k].sc, &cst, cached);
            /* cheap: one pass over the latents, on every rank so all agree */
            if (rc == C3_OK && i == 0 &&
                denoise_check_finite(d[k].x, d[k].j->n, "the latents after the first step",
                                     "transformer"))
                drop(&d[k], first, C3_EMODEL);
        }
        if (rc) break;
        double host = c3_now() - th, st = c3_now() - ts;
        for (int k = 0; k < nj; k++) {
            if (!d[k].live) continue;
            c3_denoise *j = d[k].j;
            /* this rank's memory, from our own accounting */
            int dev = p->devices[rk->rank];
            cosmos3_event mev = {.kind = COSMOS3_EV_MEMORY,
                                 .rank = rk->rank,
                                 .group = group,
                                 .device = dev,
                                 .step = i + 1,
                                 .steps = steps,
                                 .mem_weights = rk->be->mem[0],
                                 .mem_kv = rk->be->mem[1],
                                 .mem_act = rk->be->mem[2],
                                 .dev_total = p->dev_total[rk->rank],
                                 .dev_free = p->dev_free[rk->rank]};
            jemit(rt, j, &mev);
            if (!first) continue;
            cosmos3_event ev = {.kind = COSMOS3_EV_STEP,
                                .step = i + 1,
                                .steps = steps,
                                .seconds = st,
                                .cond_s = d[k].tc,
                                .uncond_s = d[k].tu,
                                .timestep = t,
                                .cached = cached};
            if (p->cfg == 2) ev.uncond_s = 0; /* the other group's COSMOS3_EV_BRANCH says it */
            jemit(rt, j, &ev);
            j->host_sum += host;
            if (i == 0) j->step_first = st;
            j->step_sum += st;
            j->cond_sum += d[k].tc;
            j->uncond_sum += d[k].tu;
            j->steps_run++;
            j->steps_cached += cached;
        }
    }
    if (first) {
        double t_loop = c3_now() - tl;
        for (int k = 0; k < nj; k++) {
            c3_denoise *j = d[k].j;
            j->t_loop = t_loop;
            if (rc != C3_OK || !d[k].live) continue;
            j->rc = C3_OK;
            memcpy(j->x_final, d[k].x, (size_t)j->n * sizeof(float));
            if (d[k].ns) memcpy(j->s_final, d[k].sx, (size_t)d[k].ns * sizeof(float));
            cosmos3_event ev = {.kind = COSMOS3_EV_STAGE, .stage = "denoise", .seconds = t_loop};
            jemit(rt, j, &ev);
        }
    }
    und_trim(rk, d[0].kv);
    for (int k = 0; k < nj; k++)
        djob_free(&d[k]);
    free(d);
    return rc;
}

static int rank_run(c3_runtime *rt, c3_rank *rk, void *ud) {
    (void)rt;
    return rank_loop(ud, rk);
}

int denoise_run_batch(c3_denoise *const *js, int n) {
    if (n < 1 || n > C3_BATCH_MAX)
        return c3_fail(C3_EFAIL, "denoise: %d requests in one run (1 to %d)", n, C3_BATCH_MAX);
    for (int k = 0; k < n; k++) {
        const c3_denoise *j = js[k];
        if (n > 1 && (j->Ts > 0 || j->cache || j->pinned || j->n != js[0]->n || j->T != js[0]->T ||
                      j->h != js[0]->h || j->w != js[0]->w || j->s->steps != js[0]->s->steps))
            return c3_fail(C3_EFAIL,
                           "denoise: request %d cannot run in this batch (another grid or step "
                           "count, conditioning, sound or the step cache)",
                           k);
        js[k]->rc = C3_EFAIL; /* until its loop ends (C3_OK) or it ends alone */
        snprintf(js[k]->err, sizeof js[k]->err, "the batch stopped before it ended");
    }
    C3_TRY(rt_reset(js[0]->rt));
    dbatch bt = {js, n};
    return rt_run_ranks(js[0]->rt, rank_run, &bt, false);
}

int denoise_run(c3_denoise *j) {
    C3_TRY(denoise_run_batch(&j, 1));
    return j->rc ? c3_fail(j->rc, "%s", j->err) : C3_OK;
}
