/* test_parallel.c - every layout gives the world-1 latents (CPU ranks over
 * the shared-memory communicator), the CFG branches run on different rank
 * groups, cancellation and a failing rank end every rank cleanly, and
 * impossible layouts are refused before loading.
 *
 * Models: tiny-a (2 KV heads: tp 1-2) when the fixtures are present, and a
 * `mkmodel --preset tiny` checkpoint (8 KV heads: tp 1-8) always. The size
 * 80x48 gives a 3x5 latent grid -> 2x3 = 6 GEN tokens, so ulysses 4 pads to 8. */
#include <pthread.h>

#include "engine.h"
#include "events.h"
#include "mkmodel.h"
#include "test_engine.h"

static char tmpd[64];

/* Run one layout of the shared request (interval: CFG only for t in
 * [990, 1000]); returns the final latents (or NULL) and the status. */
static float *run_layout(const char *model, int tp, int cfg, int sp, bool interval, int64_t *n,
                         int *rc_out, c3_events **ev_out) {
    c3_events *ev = events_new(100000);
    cosmos3_open_params op;
    t_engine_open_params(&op, model, "cpu", tp, cfg, sp, ev);
    cosmos3_request rq;
    t_engine_request(&rq);
    if (interval) {
        rq.guidance_interval = 1;
        rq.guidance_lo = 990;
        rq.guidance_hi = 1000;
    }
    cosmos3_engine *e = NULL;
    char err[1024];
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    float *x = NULL;
    if (rc == C3_OK) {
        cosmos3_result *r = NULL;
        rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
        if (rc == C3_OK) x = t_result_latents(r, n);
        cosmos3_result_free(r);
        cosmos3_close(e);
    }
    if (rc) c3_fail(rc, "%s", err); /* the message for the caller's checks */
    if (rc) fprintf(stderr, "  layout tp %d cfg %d sp %d: %s\n", tp, cfg, sp, c3_errmsg());
    *rc_out = rc;
    if (ev_out)
        *ev_out = ev;
    else
        events_free(ev);
    return x;
}

static void matrix(const char *model, int kv_heads, double *worst) {
    int64_t n0 = 0, n = 0;
    int rc;
    float *ref = run_layout(model, 1, 1, 1, false, &n0, &rc, NULL);
    T_CHECK(ref != NULL, "%s: world-1 run failed", model);
    if (!ref) return;
    int tps[] = {1, 2, 4, 8}, sps[] = {1, 2, 4};
    for (int a = 0; a < 4; a++)
        for (int c = 1; c <= 2; c++)
            for (int b = 0; b < 3; b++) {
                int tp = tps[a], sp = sps[b];
                if (tp * c * sp > 8 || (tp == 1 && c == 1 && sp == 1)) continue;
                if (kv_heads % tp || (kv_heads / tp) % sp) continue;
                float *x = run_layout(model, tp, c, sp, false, &n, &rc, NULL);
                T_CHECK(x && n == n0, "%s: layout tp %d cfg %d ulysses %d failed", model, tp, c, sp);
                if (x && n == n0) {
                    double e = t_rel_l2(x, ref, n);
                    if (e > *worst) *worst = e;
                    fprintf(stderr, "  %s tp %d x cfg %d x ulysses %d: rel L2 %.2e\n", model, tp, c, sp, e);
                    T_CHECK(e <= 1e-5, "tp %d cfg %d ulysses %d: rel L2 %.3e", tp, c, sp, e);
                }
                free(x);
            }
    free(ref);
}

typedef struct {
    cosmos3_engine *e;
    const cosmos3_request *rq;
    int rc;
    bool frames; /* the result held frames */
    char err[1024];
} gen_arg;
static void *gen_main(void *p) {
    gen_arg *a = p;
    cosmos3_result *r = NULL;
    a->err[0] = 0;
    a->rc = cosmos3_generate(a->e, a->rq, &r, a->err, sizeof a->err);
    a->frames = r && r->rgb && r->frames == 1;
    cosmos3_result_free(r);
    return NULL;
}

int main(void) {
    snprintf(tmpd, sizeof tmpd, "/tmp/c3_par_XXXXXX");
    if (!mkdtemp(tmpd)) return 1;
    char tiny[128];
    int rc = t_make_tiny8(tmpd, tiny, sizeof tiny);
    T_CHECK(rc == C3_OK, "mkmodel: %s", c3_errmsg());
    double worst = 0;
    if (rc == C3_OK) matrix(tiny, 8, &worst);
    const char *fx = t_fixtures();
    char tinya[4096];
    if (fx) {
        snprintf(tinya, sizeof tinya, "%s/tiny-a/model", fx);
        matrix(tinya, 2, &worst);
    } else {
        fprintf(stderr, "fixtures absent: tiny-a layouts skipped\n");
    }
    fprintf(stderr, "largest relative L2 over the layout matrix: %.3e\n", worst);

    /* the CFG branches on different groups: cond events on ranks 0..3, uncond on 4..7 */
    int64_t n;
    c3_events *ev = NULL;
    float *x = run_layout(tiny, 2, 2, 2, false, &n, &rc, &ev);
    free(x);
    int cond_ranks = 0, uncond_ranks = 0, bad = 0;
    c3_event e;
    while (ev && events_pop(ev, &e, 0))
        if (ev_is(&e, COSMOS3_EV_BRANCH)) {
            if (e.ev.branch == 0) cond_ranks |= 1 << e.ev.rank;
            if (e.ev.branch == 1) uncond_ranks |= 1 << e.ev.rank;
            if ((e.ev.branch == 0) != (e.ev.rank < 4)) bad++;
        }
    events_free(ev);
    T_CHECK(rc == C3_OK && cond_ranks && uncond_ranks && !(cond_ranks & uncond_ranks) && !bad,
            "cfg-parallel events: cond ranks %#x, uncond ranks %#x", cond_ranks, uncond_ranks);
    /* guidance interval: the uncond group idles outside it */
    ev = NULL;
    x = run_layout(tiny, 1, 2, 1, true, &n, &rc, &ev);
    free(x);
    int uncond_steps = 0, steps = 0;
    while (ev && events_pop(ev, &e, 0)) {
        if (ev_is(&e, COSMOS3_EV_BRANCH) && e.ev.branch == 1) uncond_steps++;
        if (ev_is(&e, COSMOS3_EV_STEP)) steps++;
    }
    events_free(ev);
    T_CHECK(rc == C3_OK && steps == 3 && uncond_steps == 1, "interval: %d uncond of %d steps", uncond_steps, steps);

    /* impossible layouts are refused before loading */
    x = run_layout(tiny, 3, 1, 1, false, &n, &rc, NULL);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "does not divide"), "tp 3: %d %s", rc, c3_errmsg());
    free(x);
    x = run_layout(tiny, 1, 3, 1, false, &n, &rc, NULL);
    T_CHECK(rc == C3_EUSAGE, "cfg 3 refused: %d", rc);
    free(x);
    x = run_layout(tiny, 8, 1, 2, false, &n, &rc, NULL);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "ulysses"), "tp 8 ulysses 2: %s", c3_errmsg());
    free(x);

    /* cancel mid-run, and an injected rank failure, in several layouts */
    int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}};
    for (size_t k = 0; k < C3_ARRAY_LEN(layouts); k++) {
        int tp = layouts[k][0], cfg = layouts[k][1], sp = layouts[k][2];
        c3_events *q = events_new(100000);
        cosmos3_open_params op;
        t_engine_open_params(&op, tiny, "cpu", tp, cfg, sp, q);
        cosmos3_request rq;
        t_engine_request(&rq);
        rq.want_latents = false;
        rq.steps = 40;
        cosmos3_engine *eng = NULL;
        char err[1024];
        rc = cosmos3_open(&op, &eng, err, sizeof err);
        T_CHECK(rc == C3_OK, "open: %s", err);
        if (rc) {
            events_free(q);
            continue;
        }
        gen_arg a = {eng, &rq, -1, false, ""};
        pthread_t th;
        pthread_create(&th, NULL, gen_main, &a);
        for (;;) { /* cancel after the second step */
            if (events_pop(q, &e, 5.0) && ev_is(&e, COSMOS3_EV_STEP) && e.ev.step >= 2) break;
        }
        cosmos3_cancel(eng);
        pthread_join(th, NULL);
        T_CHECK(a.rc == C3_ECANCEL, "cancel tp %d cfg %d sp %d: rc %d", tp, cfg, sp, a.rc);
        T_CHECK(!a.frames, "cancelled run gave frames");
        /* the engine keeps working after a cancel */
        rq.steps = 2;
        pthread_create(&th, NULL, gen_main, &a);
        pthread_join(th, NULL);
        T_CHECK(a.rc == C3_OK && a.frames, "generation after cancel: %s", a.err);
        /* a failing rank stops all ranks with its reason */
        int world = tp * cfg * sp;
        c3_inject_fail_rank = world - 1;
        rq.steps = 4;
        pthread_create(&th, NULL, gen_main, &a);
        pthread_join(th, NULL);
        c3_inject_fail_rank = -1;
        T_CHECK(a.rc == C3_EFAIL && strstr(a.err, "injected failure"), "failing rank: rc %d: %s", a.rc, a.err);
        T_CHECK(!a.frames, "failed run gave frames");
        cosmos3_close(eng);
        events_free(q);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpd);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return t_done("parallel");
}
