/* test_replicas.c - several engines in one process (serve --replicas), and the
 * calls serve's scheduler makes on each (issue 32 item 1 and 3).
 *
 * The demo model, opened twice (one CPU thread each, as serve divides the
 * cores). Four requests (different prompts, seeds and guidance scales) are
 * first run alone, one after the other on engine A: the references. Then:
 *   1. two threads generate at once, two requests each, one on A and one on
 *      B: their calls overlap in time, and every result equals its reference
 *      (latents within 1e-6 relative L2, pixels the same uint8 but for
 *      single-level flips);
 *   2. on B, the four as one cosmos3_generate_batch with defer_decode, then
 *      cosmos3_decode of each on another thread while B runs the next
 *      cosmos3_generate (serve's finishing thread): the same bounds;
 *   3. a request whose cancel flag is set before the batch runs ends
 *      COSMOS3_ECANCEL alone, the others as their references;
 *   4. every picture judged by the demo judge: the prompt's background,
 *      colour and shape. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cosmos3.h"
#include "demo_judge.h"
#include "demo_world.h"
#include "test_util.h"

#define NREQ 4
#define MAX_FLIPS 0.01 /* of the bytes of a picture: single-level flips at most this many */

typedef struct {
    int shape, colour, bg;
    uint64_t seed;
    double guidance;
} spec;

static const spec specs[NREQ] = {
    {DEMO_CIRCLE, DEMO_RED, DEMO_BLUE, 1, -1},
    {DEMO_SQUARE, DEMO_YELLOW, DEMO_BLACK, 2, 5.0},
    {DEMO_TRIANGLE, DEMO_WHITE, DEMO_GREEN, 3, -1},
    {DEMO_SQUARE, DEMO_ORANGE, DEMO_PURPLE, 4, 4.0},
};

static char prompts[NREQ][160];

static void request(cosmos3_engine *e, int i, cosmos3_request *rq) {
    cosmos3_request_defaults(e, 1, rq);
    rq->prompt = prompts[i];
    rq->seed = (int64_t)specs[i].seed;
    if (specs[i].guidance > 0) rq->guidance = specs[i].guidance;
    rq->want_latents = true;
}

static size_t latent_n(const cosmos3_result *r) {
    size_t n = 1;
    for (int k = 0; k < 5; k++)
        n *= (size_t)r->latent_shape[k];
    return n;
}

/* r against the reference: latents and pixels within the bounds; its picture judged. */
static void same(const char *what, int i, const cosmos3_result *r, const cosmos3_result *ref) {
    T_CHECK(r && r->rgb && ref && ref->rgb, "%s %d: no picture", what, i);
    if (!r || !r->rgb || !ref || !ref->rgb) return;
    T_CHECK(r->width == ref->width && r->height == ref->height, "%s %d: %dx%d, want %dx%d", what, i,
            r->width, r->height, ref->width, ref->height);
    if (r->width != ref->width || r->height != ref->height) return;
    if (r->latents && ref->latents && latent_n(r) == latent_n(ref)) {
        double d = 0, n = 0;
        for (size_t k = 0; k < latent_n(r); k++) {
            double x = (double)r->latents[k] - ref->latents[k];
            d += x * x;
            n += (double)ref->latents[k] * ref->latents[k];
        }
        double rel = sqrt(d / (n > 0 ? n : 1));
        T_CHECK(rel <= 1e-6, "%s %d: latents %.3g relative L2 from the request alone", what, i,
                rel);
    } else {
        T_CHECK(0, "%s %d: no latents to compare", what, i);
    }
    size_t nb = (size_t)r->width * r->height * 3, flips = 0, worse = 0;
    for (size_t k = 0; k < nb; k++) {
        int x = abs((int)r->rgb[k] - (int)ref->rgb[k]);
        flips += x == 1;
        worse += x > 1;
    }
    T_CHECK(worse == 0 && flips <= (size_t)(MAX_FLIPS * (double)nb),
            "%s %d: %zu bytes differ by more than one level, %zu single-level flips (of %zu)", what,
            i, worse, flips, nb);
    demo_verdict v;
    memset(&v, -1, sizeof v);
    if (r->width == DEMO_SIZE && r->height == DEMO_SIZE) demo_judge(r->rgb, &v);
    T_CHECK(v.bg == specs[i].bg && v.colour == specs[i].colour && v.shape == specs[i].shape,
            "%s %d: '%s' judged bg %d colour %d shape %d", what, i, prompts[i], v.bg, v.colour,
            v.shape);
}

/* ------------------------------------------------------------ 1: two at once */

typedef struct {
    cosmos3_engine *e;
    int first; /* requests first, first + 1 */
    cosmos3_result *out[2];
    int rc[2];
    char err[2][512];
    double t0, t1;
} gen_thread;

static void *gen_main(void *arg) {
    gen_thread *g = arg;
    g->t0 = c3_now();
    for (int k = 0; k < 2; k++) {
        cosmos3_request rq;
        request(g->e, g->first + k, &rq);
        g->rc[k] = cosmos3_generate(g->e, &rq, &g->out[k], g->err[k], sizeof g->err[k]);
    }
    g->t1 = c3_now();
    return NULL;
}

/* ------------------------------------------------- 2: decode while generating */

typedef struct {
    cosmos3_engine *e;
    cosmos3_result **res;
    int n, rc[NREQ];
    char err[NREQ][512];
} decode_thread;

static void *decode_main(void *arg) {
    decode_thread *d = arg;
    for (int i = 0; i < d->n; i++)
        d->rc[i] = d->res[i] ? cosmos3_decode(d->e, d->res[i], d->err[i], sizeof d->err[i])
                             : COSMOS3_EFAIL;
    return NULL;
}

int main(void) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char model[4096];
    snprintf(model, sizeof model, "%s/share/models/demo", src ? src : ".");
    for (int i = 0; i < NREQ; i++)
        demo_caption(specs[i].shape, specs[i].colour, specs[i].bg, DEMO_NO_PLACE, prompts[i],
                     sizeof prompts[i]);
    cosmos3_engine *ea = NULL, *eb = NULL;
    char err[1024];
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = model;
    op.device = "cpu";
    op.threads = 1; /* serve --replicas 2 on two cores */
    int rc = cosmos3_open(&op, &ea, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "open A: %s", err);
    if (rc == COSMOS3_OK) rc = cosmos3_open(&op, &eb, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "open B: %s", err);
    if (rc) {
        cosmos3_close(ea);
        return t_done("replicas");
    }

    /* the references: each request alone on A */
    cosmos3_result *ref[NREQ] = {0};
    for (int i = 0; i < NREQ; i++) {
        cosmos3_request rq;
        request(ea, i, &rq);
        rc = cosmos3_generate(ea, &rq, &ref[i], err, sizeof err);
        T_CHECK(rc == COSMOS3_OK, "reference %d: %s", i, err);
        same("alone", i, ref[i], ref[i]);
    }

    /* 1: two engines at once, two threads */
    gen_thread g[2] = {{.e = ea, .first = 0}, {.e = eb, .first = 2}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        T_CHECK(pthread_create(&th[k], NULL, gen_main, &g[k]) == 0, "thread %d", k);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    T_CHECK(C3_MAX(g[0].t0, g[1].t0) < C3_MIN(g[0].t1, g[1].t1),
            "the two engines' calls did not overlap (A %.3f..%.3f, B %.3f..%.3f)", g[0].t0, g[0].t1,
            g[1].t0, g[1].t1);
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 2; q++) {
            int i = g[k].first + q;
            T_CHECK(g[k].rc[q] == COSMOS3_OK, "concurrent %d: %s", i, g[k].err[q]);
            same("concurrent", i, g[k].out[q], ref[i]);
            cosmos3_result_free(g[k].out[q]);
        }

    /* 2: a batch on B with the decode deferred, decoded on another thread
       while B generates the next request */
    cosmos3_request rqs[NREQ];
    const cosmos3_request *rp[NREQ];
    cosmos3_result *out[NREQ] = {0};
    int rcs[NREQ];
    char *errs = calloc(NREQ, 512);
    uint64_t key0 = 0;
    for (int i = 0; i < NREQ; i++) {
        request(eb, i, &rqs[i]);
        rqs[i].defer_decode = true;
        rp[i] = &rqs[i];
        uint64_t key = 0;
        T_CHECK(cosmos3_batch_key(eb, &rqs[i], &key, err, sizeof err) == COSMOS3_OK,
                "batch key %d: %s", i, err);
        if (i == 0) key0 = key;
        T_CHECK(key == key0, "request %d: another batch key than request 0's", i);
    }
    int bmax = cosmos3_batch_max(eb, &rqs[0]);
    T_CHECK(bmax >= 1, "cosmos3_batch_max %d", bmax);
    int n = C3_MIN(NREQ, bmax);
    rc = cosmos3_generate_batch(eb, n, rp, out, rcs, errs, 512);
    T_CHECK(rc == COSMOS3_OK, "generate_batch: %s", errs);
    decode_thread d = {.e = eb, .res = out, .n = n};
    pthread_t dt;
    T_CHECK(pthread_create(&dt, NULL, decode_main, &d) == 0, "decode thread");
    cosmos3_request next;
    request(eb, 0, &next);
    cosmos3_result *again = NULL;
    rc = cosmos3_generate(eb, &next, &again, err, sizeof err); /* while the decodes run */
    T_CHECK(rc == COSMOS3_OK, "generate during the decodes: %s", err);
    pthread_join(dt, NULL);
    same("generated during the decodes", 0, again, ref[0]);
    cosmos3_result_free(again);
    for (int i = 0; i < n; i++) {
        T_CHECK(rcs[i] == COSMOS3_OK, "batch %d: %s", i, errs + i * 512);
        T_CHECK(d.rc[i] == COSMOS3_OK, "decode %d: %s", i, d.err[i]);
        same("batch + deferred decode", i, out[i], ref[i]);
        cosmos3_result_free(out[i]);
        out[i] = NULL;
    }

    /* 3: one request of a batch cancelled (its flag) before the batch runs */
    volatile int cancel1 = 1, keep = 0;
    for (int i = 0; i < n; i++) {
        rqs[i].defer_decode = false;
        rqs[i].cancel = i == 1 ? &cancel1 : &keep;
    }
    if (n >= 2) {
        rc = cosmos3_generate_batch(eb, n, rp, out, rcs, errs, 512);
        T_CHECK(rc == COSMOS3_OK, "generate_batch with one cancelled: %s", errs);
        for (int i = 0; i < n; i++) {
            if (i == 1) {
                T_CHECK(rcs[i] == COSMOS3_ECANCEL && !out[i], "the cancelled request: rc %d",
                        rcs[i]);
            } else {
                T_CHECK(rcs[i] == COSMOS3_OK, "batch %d beside the cancelled one: %s", i,
                        errs + i * 512);
                same("beside a cancelled one", i, out[i], ref[i]);
            }
            cosmos3_result_free(out[i]);
        }
    }
    free(errs);
    for (int i = 0; i < NREQ; i++)
        cosmos3_result_free(ref[i]);
    cosmos3_close(eb);
    cosmos3_close(ea);
    return t_done("replicas");
}
