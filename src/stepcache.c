/* stepcache.c - the step cache's rule and residuals (see stepcache.h). */
#include "stepcache.h"

#include <math.h>
#include <stdlib.h>

const c3_cache_kind *stepcache_kind(const char *name) {
    if (!name) return NULL;
    if (!strcmp(name, "sea")) return &c3_cache_sea;
    if (!strcmp(name, "fb")) return &c3_cache_fb;
    return NULL;
}

struct c3_stepcache {
    const c3_cache_kind *k;
    c3_stepcache_params p;
    /* per branch: the last signal (this rank's, where it computes it) */
    float *prev[2], *cur[2];
    int64_t len;
    bool have_prev[2]; /* every rank: the branch gave a signal on the last step */
    double acc[2];     /* the accumulated relative L1 change (every rank alike) */
    /* the residual history: res[b][slot], the steps they were computed at */
    c3_tensor res[2][2], ext[2];
    int hstep[2][2], nh[2], newest[2];
    bool cached;     /* this step's decision */
    int consecutive; /* cached steps in a row */
    int ncached;
};

c3_stepcache *stepcache_new(const c3_cache_kind *k, const c3_stepcache_params *p) {
    c3_stepcache *c = xcalloc(1, sizeof *c);
    c->k = k;
    c->p = *p;
    return c;
}

void stepcache_free(c3_stepcache *c) {
    if (!c) return;
    for (int b = 0; b < 2; b++) {
        free(c->prev[b]);
        free(c->cur[b]);
        c3_free(&c->res[b][0]);
        c3_free(&c->res[b][1]);
        c3_free(&c->ext[b]);
    }
    free(c);
}

int stepcache_cached_steps(const c3_stepcache *c) {
    return c ? c->ncached : 0;
}

/* The extrapolated residual of branch b at step: linear through the last
 * two computed steps (vLLM-Omni's Cosmos3 residual order 1), else the last. */
static int extrapolate(c3_stepcache *c, c3_backend *be, int b, int step) {
    int nw = c->newest[b];
    c3_tensor *rn = &c->res[b][nw], *e = &c->ext[b];
    if (!e->data) C3_TRY(c3_alloc(be, e, rn->dtype, C3_MEM_ACT, 2, rn->ne[0], rn->ne[1]));
    if (c->nh[b] < 2 || c->hstep[b][nw] == c->hstep[b][!nw]) return be->copy(be, e, rn);
    const c3_tensor *ro = &c->res[b][!nw];
    /* e = rn + a (rn - ro) = (1 + a) (rn - a / (1 + a) ro) */
    float a = (float)(step - c->hstep[b][nw]) / (float)(c->hstep[b][nw] - c->hstep[b][!nw]);
    float s0 = -a / (1 + a), s1 = 1 + a;
    C3_TRY(be->affine(be, e, ro, &s0, NULL, 1));
    C3_TRY(be->add(be, e, rn));
    return be->affine(be, e, e, &s1, NULL, 1);
}

/* a double as two floats, so the gather over float channels keeps it */
static void put2(float *o, double v) {
    o[0] = (float)v;
    o[1] = (float)(v - (double)o[0]);
}

int stepcache_decide(c3_stepcache *c, const c3_stepcache_step *st, c3_comm *world, bool *cached) {
    bool want[2], give[2];
    for (int b = 0; b < 2; b++) {
        want[b] = st->active[b] && (c->k->whole ? st->rank == 0 : st->serve[b]);
        give[b] = want[b] && (c->k->whole || st->tp_rank == 0);
    }
    if (want[0] || want[1]) {
        int64_t len = c->k->size(st);
        if (len != c->len)
            for (int b = 0; b < 2; b++) {
                free(c->prev[b]);
                free(c->cur[b]);
                c->prev[b] = c->cur[b] = NULL;
            }
        c->len = len;
        for (int b = 0; b < 2; b++)
            if (want[b] && !c->cur[b]) c->cur[b] = xmalloc(sizeof(float) * (size_t)len);
        C3_TRY(c->k->signal(st, want, c->cur));
    }
    /* this rank's sums: sum |cur - prev|, sum |prev| per branch */
    float mine[8] = {0};
    for (int b = 0; b < 2; b++) {
        if (!give[b] || !c->have_prev[b] || !c->prev[b]) continue;
        double num = 0, den = 0;
        const float *x = c->cur[b], *y = c->prev[b];
#pragma omp parallel for reduction(+ : num, den) if (c->len > 65536)
        for (int64_t i = 0; i < c->len; i++) {
            num += fabs((double)x[i] - (double)y[i]);
            den += fabs((double)y[i]);
        }
        put2(mine + 4 * b, num);
        put2(mine + 4 * b + 2, den);
    }
    for (int b = 0; b < 2; b++)
        if (want[b]) { /* the current signal becomes the previous one */
            float *t = c->prev[b];
            c->prev[b] = c->cur[b];
            c->cur[b] = t;
        }
    /* the one exchange: every rank's sums, added in rank order */
    double sum[4] = {0};
    int W = world ? world->size : 1;
    float *all = xmalloc(sizeof(float) * 8 * (size_t)W);
    int rc = world && W > 1 ? world->allgather_host(world, all, mine, 8) : C3_OK;
    if (W == 1) memcpy(all, mine, sizeof mine);
    for (int r = 0; r < W && rc == C3_OK; r++)
        for (int i = 0; i < 4; i++)
            sum[i] += (double)all[8 * r + 2 * i] + all[8 * r + 2 * i + 1];
    free(all);
    if (rc) return rc;
    /* the rule, alike on every rank */
    bool forced =
        st->step < c->p.warmup || st->step >= st->steps - 1 || c->consecutive >= c->p.max_skip;
    for (int b = 0; b < 2; b++)
        if (st->active[b] && (!c->have_prev[b] || c->nh[b] == 0)) forced = true;
    bool skip = !forced;
    for (int b = 0; b < 2; b++) {
        if (!st->active[b]) continue;
        double d = sum[2 * b] / (sum[2 * b + 1] + 1e-16);
        if (!isfinite(d)) d = INFINITY;
        c->acc[b] = forced ? 0 : c->acc[b] + d;
        if (!(c->acc[b] < c->p.threshold)) skip = false;
    }
    if (!skip)
        for (int b = 0; b < 2; b++)
            c->acc[b] = 0;
    for (int b = 0; b < 2; b++)
        c->have_prev[b] = st->active[b];
    c->cached = *cached = skip;
    if (skip)
        for (int b = 0; b < 2; b++)
            if (st->active[b] && st->serve[b]) C3_TRY(extrapolate(c, st->be, b, st->step));
    return C3_OK;
}

void stepcache_gen(c3_stepcache *c, int b0, int nb, c3_gen_cache *io) {
    memset(io, 0, sizeof *io);
    io->reuse = c->cached;
    for (int k = 0; k < nb && k < 2; k++) {
        int b = b0 + k;
        /* record into the older slot (the free one while there are fewer than two) */
        int slot = c->nh[b] < 2 ? c->nh[b] : !c->newest[b];
        io->res[k] = c->cached ? &c->ext[b] : &c->res[b][slot];
    }
}

void stepcache_commit(c3_stepcache *c, const c3_stepcache_step *st, bool cached) {
    if (cached) {
        c->consecutive++;
        c->ncached++;
        return;
    }
    c->consecutive = 0;
    for (int b = 0; b < 2; b++) {
        if (!st->active[b]) continue;
        int slot = c->nh[b] < 2 ? c->nh[b] : !c->newest[b];
        c->hstep[b][slot] = st->step;
        c->newest[b] = slot;
        if (c->nh[b] < 2) c->nh[b]++;
    }
}
