/* test_demo_cache.c - what the speed knobs cost on the demo model (issue 34).
 *
 * Held-out prompts (the model card's combinations the training never saw,
 * each with a place phrase or none) x seeds: every picture runs plainly and
 * with each knob; the judge (tests/demo_judge.c) decides colours, shape and
 * place from each picture alone, and the knob's picture is compared with
 * the plain one (PSNR).
 *
 * CI (no argument): --cache sea at its defaults over 60 pictures must keep
 * the colour, shape and place rates at >= 95 % of the plain run's and skip
 * >= 25 % of the 20 steps.
 * --all (bench/price_list.sh): every knob (--cache sea at two thresholds,
 * --cache fb, --precision fp8, --attention fp8, combinations), one markdown
 * table row each on stdout; nothing asserted but that each ran. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "demo_card.h"
#include "demo_judge.h"
#include "demo_world.h"
#include "events.h"
#include "options.h"
#include "session.h"
#include "test_util.h"

#define N_PROMPTS 20
#define N_SEEDS 3
#define MAX_HELD 64
#define MIN_RATE_RATIO 0.95
#define MIN_SKIPPED 0.25

typedef struct {
    const char *name, *cache, *threshold, *precision, *attention;
} knob;

typedef struct {
    int n, colours, shape, n_place, place, cached, steps;
    double t_denoise, psnr_sum;
    int psnr_inf;
} tally;

static double psnr(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++)
        se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 / (se / (double)n));
}

/* One knob over every prompt and seed; plain[] holds (or receives, for the
 * plain knob) the plain pictures. */
static int run_knob(const char *model, const knob *k, int held[][3], int nheld, uint8_t **plain,
                    tally *t) {
    memset(t, 0, sizeof *t);
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = model;
    op.device = "cpu";
    op.precision = k->precision;
    op.attention = k->attention;
    cosmos3_engine *e = NULL;
    char err[1024];
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    T_CHECK(rc == C3_OK, "%s: cosmos3_open: %s", k->name, err);
    if (rc) return rc;
    cosmos3_request rq;
    cosmos3_request_defaults(e, 1, &rq); /* the model's own defaults, as gen uses them */
    rq.cache = k->cache;
    if (k->threshold) rq.cache_threshold = atof(k->threshold);
    for (int p = 0; p < N_PROMPTS && rc == C3_OK; p++) {
        const int *c = held[p % nheld];
        int place = (p / nheld + p) % (DEMO_N_PLACES + 1) - 1; /* DEMO_NO_PLACE .. DEMO_BOTTOM */
        char prompt[160];
        demo_caption(c[0], c[1], c[2], place, prompt, sizeof prompt);
        for (int q = 1; q <= N_SEEDS && rc == C3_OK; q++) {
            rq.prompt = prompt;
            rq.seed = 100 + q;
            cosmos3_result *o = NULL;
            rc = cosmos3_generate(e, &rq, &o, err, sizeof err);
            T_CHECK(rc == C3_OK, "%s: %s seed %d: %s", k->name, prompt, q, err);
            if (rc) break;
            size_t bytes = (size_t)o->width * o->height * 3;
            T_CHECK(o->width == DEMO_SIZE && o->height == DEMO_SIZE, "%s: %dx%d", k->name, o->width,
                    o->height);
            demo_verdict v;
            memset(&v, -1, sizeof v);
            demo_judge(o->rgb, &v);
            t->n++;
            t->colours += v.bg == c[2] && v.colour == c[1];
            t->shape += v.shape == c[0];
            if (place != DEMO_NO_PLACE) t->n_place++, t->place += v.place == place;
            t->cached += o->steps_cached;
            t->steps += o->steps;
            t->t_denoise += o->timings.denoise;
            uint8_t **ref = &plain[p * N_SEEDS + q - 1];
            if (!*ref) {
                *ref = xmalloc(bytes);
                memcpy(*ref, o->rgb, bytes);
            } else {
                double db = psnr(*ref, o->rgb, bytes);
                if (isinf(db))
                    t->psnr_inf++;
                else
                    t->psnr_sum += db;
            }
            cosmos3_result_free(o);
        }
    }
    cosmos3_close(e);
    return rc;
}

static double rate(int a, int n) {
    return n ? (double)a / n : 0;
}

int main(int argc, char **argv) {
    bool all = argc > 1 && !strcmp(argv[1], "--all");
    const char *src = getenv("COSMOS3_SRCDIR");
    char model[4096];
    snprintf(model, sizeof model, "%s/share/models/demo", src ? src : ".");
    int held[MAX_HELD][3];
    int nheld = demo_card_held_out(model, held, MAX_HELD, NULL);
    T_CHECK(nheld >= 8, "%s: %d held-out combinations (need >= 8)", model, nheld);
    if (nheld < 8) return t_done("demo_cache");
    static const knob ci[] = {{"plain", "none", NULL, NULL, NULL},
                              {"--cache sea", "sea", NULL, NULL, NULL}};
    static const knob every[] = {
        {"plain", "none", NULL, NULL, NULL},
        {"--cache sea", "sea", NULL, NULL, NULL},
        {"--cache sea --cache-threshold 0.5", "sea", "0.5", NULL, NULL},
        {"--cache fb", "fb", NULL, NULL, NULL},
        {"--precision fp8", "none", NULL, "fp8", NULL},
        {"--attention fp8", "none", NULL, NULL, "fp8"},
        {"--precision fp8 --attention fp8", "none", NULL, "fp8", "fp8"},
        {"--cache sea --precision fp8 --attention fp8", "sea", NULL, "fp8", "fp8"},
    };
    const knob *ks = all ? every : ci;
    int nk = all ? (int)C3_ARRAY_LEN(every) : (int)C3_ARRAY_LEN(ci);
    uint8_t *plain[N_PROMPTS * N_SEEDS] = {0};
    tally t0 = {0};
    if (all)
        printf("| knob | steps skipped | denoise time | colours | shape | place | PSNR vs plain |\n"
               "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nk; i++) {
        tally t;
        if (run_knob(model, &ks[i], held, nheld, plain, &t)) break;
        if (i == 0) t0 = t;
        int npsnr = t.n - t.psnr_inf;
        char db[32];
        if (i == 0)
            snprintf(db, sizeof db, "-");
        else if (npsnr)
            snprintf(db, sizeof db, "%.1f dB%s", t.psnr_sum / npsnr,
                     t.psnr_inf ? " (some equal)" : "");
        else
            snprintf(db, sizeof db, "equal");
        fprintf(stderr,
                "demo_cache: %-44s %d pictures: skipped %d of %d steps (%.1f %%), denoise %.3f s, "
                "colours %.1f %%, shape %.1f %%, place %.1f %%, PSNR %s\n",
                ks[i].name, t.n, t.cached, t.steps, 100 * rate(t.cached, t.steps), t.t_denoise,
                100 * rate(t.colours, t.n), 100 * rate(t.shape, t.n),
                100 * rate(t.place, t.n_place), db);
        if (all)
            printf("| `%s` | %.0f %% | %.2fx | %.1f %% | %.1f %% | %.1f %% | %s |\n", ks[i].name,
                   100 * rate(t.cached, t.steps), t0.t_denoise > 0 ? t.t_denoise / t0.t_denoise : 0,
                   100 * rate(t.colours, t.n), 100 * rate(t.shape, t.n),
                   100 * rate(t.place, t.n_place), db);
        if (!all && i == 1) { /* the bars */
            T_CHECK(t.n == N_PROMPTS * N_SEEDS, "%d pictures", t.n);
            T_CHECK(rate(t.colours, t.n) >= MIN_RATE_RATIO * rate(t0.colours, t0.n),
                    "sea colours %d of %d < 95 %% of plain %d", t.colours, t.n, t0.colours);
            T_CHECK(rate(t.shape, t.n) >= MIN_RATE_RATIO * rate(t0.shape, t0.n),
                    "sea shape %d of %d < 95 %% of plain %d", t.shape, t.n, t0.shape);
            T_CHECK(rate(t.place, t.n_place) >= MIN_RATE_RATIO * rate(t0.place, t0.n_place),
                    "sea place %d of %d < 95 %% of plain %d", t.place, t.n_place, t0.place);
            T_CHECK(rate(t.cached, t.steps) >= MIN_SKIPPED, "sea skipped %d of %d steps < 25 %%",
                    t.cached, t.steps);
            T_CHECK(t0.cached == 0, "the plain run skipped %d steps", t0.cached);
        }
    }
    for (int i = 0; i < N_PROMPTS * N_SEEDS; i++)
        free(plain[i]);
    return t_done("demo_cache");
}
