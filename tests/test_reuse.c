/* test_reuse.c - one engine serves requests of changing prompt and negative
 * prompt lengths exactly as fresh engines do (issue 36: a negative prompt
 * longer in tokens than the previous request's gave NaN latents and HTTP 500).
 *
 * On the demo model and a random tiny checkpoint: a sequence of requests
 * whose prompt and negative prompt grow and shrink (and repeat, so the
 * engine's reuse of the UND K/V is exercised too) runs on one engine; each
 * request's final latents must be finite and within 1e-6 relative L2 of the
 * same request on a fresh engine. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cosmos3.h"
#include "test_engine.h"
#include "test_util.h"

#define TOL 1e-6

typedef struct {
    const char *prompt, *negative; /* negative NULL: the model's default */
} t_case;

static const t_case cases[] = {
    {"a red circle", ""},
    {"a red circle", "blurry, dark, low quality, a blue square on a green background"},
    {"a blue square on a green background", "blurry"},
    {"a green triangle at the top on a red background",
     "blurry, dark, low quality, noisy, a blue square, a yellow circle, a red triangle on a "
     "white background at the bottom, washed out"},
    {"a red circle", ""},
    {"a yellow circle", NULL},
    {"a red circle", "blurry, dark, low quality, a blue square on a green background"},
    {"a blue square on a green background at the bottom, sharp and bright, a clean picture", "x"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void fill(cosmos3_request *rq, const t_case *c, int w, int h, int steps) {
    cosmos3_request_init(rq);
    rq->prompt = c->prompt;
    rq->negative_prompt = c->negative;
    rq->width = w;
    rq->height = h;
    rq->steps = steps;
    rq->guidance = 4;
    rq->guidance_interval = 0; /* CFG on every step: the negative branch always runs */
    rq->seed = 3;
    rq->want_latents = true;
}

static int open_engine(const char *model, cosmos3_engine **e) {
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = model;
    op.device = "cpu";
    char err[1024];
    int rc = cosmos3_open(&op, e, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "cosmos3_open %s: %s", model, err);
    return rc;
}

/* Request c's latents on e (NULL on failure, counted); *n floats. */
static float *run(cosmos3_engine *e, const t_case *c, int w, int h, int steps, int64_t *n) {
    cosmos3_request rq;
    fill(&rq, c, w, h, steps);
    cosmos3_result *r = NULL;
    char err[1024];
    int rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "\"%s\" / \"%s\": %s", c->prompt,
            c->negative ? c->negative : "(default)", err);
    float *x = rc == COSMOS3_OK ? t_result_latents(r, n) : NULL;
    cosmos3_result_free(r);
    return x;
}

static void check_model(const char *label, const char *model, int w, int h, int steps) {
    cosmos3_engine *shared = NULL;
    if (open_engine(model, &shared)) return;
    for (int i = 0; i < NCASES; i++) {
        int64_t n = 0, nf = 0;
        float *x = run(shared, &cases[i], w, h, steps, &n);
        cosmos3_engine *fresh = NULL;
        float *ref = NULL;
        if (open_engine(model, &fresh) == COSMOS3_OK) {
            ref = run(fresh, &cases[i], w, h, steps, &nf);
            cosmos3_close(fresh);
        }
        if (x && ref) {
            T_CHECK(n == nf, "%s case %d: %lld latents vs %lld", label, i, (long long)n,
                    (long long)nf);
            double d = 0, s = 0;
            bool finite = true;
            for (int64_t k = 0; k < n && n == nf; k++) {
                finite &= isfinite(x[k]) && isfinite(ref[k]);
                d += ((double)x[k] - ref[k]) * ((double)x[k] - ref[k]);
                s += (double)ref[k] * ref[k];
            }
            double rel = s > 0 ? sqrt(d / s) : sqrt(d);
            T_CHECK(finite, "%s case %d: non-finite latents", label, i);
            T_CHECK(finite && rel <= TOL,
                    "%s case %d (\"%s\" / \"%s\"): rel L2 %.3g vs a fresh engine", label, i,
                    cases[i].prompt, cases[i].negative ? cases[i].negative : "(default)", rel);
            fprintf(stderr, "%s case %d: rel L2 %.3g\n", label, i, rel);
        }
        free(x);
        free(ref);
    }
    cosmos3_close(shared);
}

int main(void) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char demo[4096];
    snprintf(demo, sizeof demo, "%s/share/models/demo", src ? src : ".");
    check_model("demo", demo, 64, 64, 4);

    char tmpd[] = "/tmp/c3reuseXXXXXX", tiny[4200];
    if (!mkdtemp(tmpd)) return fprintf(stderr, "mkdtemp failed\n"), 1;
    int rc = t_make_tiny8(tmpd, tiny, sizeof tiny);
    T_CHECK(rc == C3_OK, "mkmodel: %s", c3_errmsg());
    if (rc == C3_OK) check_model("tiny", tiny, 80, 48, 3);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpd);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpd);
    return t_done("reuse");
}
