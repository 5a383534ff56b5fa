/* test_batch.c - batched denoising and the deferred decode (issue 32), on the
 * demo model and a `mkmodel --preset tiny` checkpoint, on the CPU:
 *   - defer_decode: the result holds the latents and no frames; cosmos3_decode
 *     gives the same bytes as the decode inside cosmos3_generate, also on a
 *     thread while the same engine runs the next generation;
 *   - a batch of 3 (other prompts, seeds, guidance scales, one of them 1:
 *     no uncond branch; one negative prompt longer than the others) on one
 *     rank, CFG-parallel, TP and Ulysses (one after another) layouts, equals
 *     each request run alone: the
 *     latents within 1e-5 relative L2, the pixels equal but for single-level
 *     flips (counted and bounded);
 *   - one request cancelled (its flag) after step 2 ends cancelled alone,
 *     the other two still equal to alone;
 *   - a request of another batch key is refused alone with one line;
 *   - cosmos3_batch_key equal for the same shape, different for another
 *     size or step count; cosmos3_batch_max at least 1.
 * COSMOS3_TEST_DEVICE=cuda runs the same on the CUDA backend (bf16; the
 * layouts as ranks sharing GPU 0), held to the bf16 drift the goldens allow
 * over several steps (latents 6e-2 relative L2, pixels 3 levels on average)
 * instead of the CPU's 1e-5 and single-level flips. */
#include <pthread.h>

#include "test_engine.h"

#define REL_L2_MAX 1e-5
#define FLIP_FRACTION_MAX 0.01 /* single-level pixel flips of a batched picture, of its bytes */
#define CUDA_REL_L2_MAX 6e-2   /* bf16: the goldens' bound over six steps */
#define CUDA_MEAN_LEVELS_MAX 3.0

static const char *device = "cpu"; /* COSMOS3_TEST_DEVICE */
static bool on_cuda(void) {
    return strcmp(device, "cpu") != 0;
}

/* ------------------------------------------------------------- helpers */

/* One request's events: the steps seen, its one terminal event, and the
 * cancel flag set once step cancel_at ended. */
typedef struct {
    int cancel_at; /* 0: never */
    volatile int flag;
    int steps, terminal, last_terminal;
    uint64_t job;
    bool after_terminal; /* an event came after the terminal one */
    double und, denoise;   /* the result's timings */
    cosmos3_engine *stop;  /* cosmos3_cancel(stop) once step cancel_at ended */
} req_ev;

static void on_req_event(const cosmos3_event *ev, void *user) {
    req_ev *r = user;
    if (r->terminal) r->after_terminal = true;
    if (ev->job) r->job = ev->job;
    if (ev->kind == COSMOS3_EV_STEP) {
        r->steps++;
        if (r->cancel_at && ev->step == r->cancel_at) {
            r->flag = 1;
            if (r->stop) cosmos3_cancel(r->stop);
        }
    }
    if (ev->kind == COSMOS3_EV_DONE || ev->kind == COSMOS3_EV_CANCELLED ||
        ev->kind == COSMOS3_EV_FAILED) {
        r->terminal++;
        r->last_terminal = ev->kind;
    }
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int64_t latent_n(const cosmos3_result *r) {
    int64_t k = 1;
    for (int i = 0; i < 5; i++)
        k *= r->latent_shape[i];
    return k;
}

static size_t rgb_bytes(const cosmos3_result *r) {
    return (size_t)r->frames * r->height * r->width * 3;
}

/* a batched result against the same request alone: latents and pixels */
static void check_same(const char *what, const cosmos3_result *b, const cosmos3_result *a,
                       int64_t *flips_total) {
    T_CHECK(b && a, "%s: a result is missing", what);
    if (!b || !a) return;
    T_CHECK(b->latents && a->latents && latent_n(b) == latent_n(a), "%s: latents", what);
    if (b->latents && a->latents && latent_n(b) == latent_n(a)) {
        double e = rel_l2(b->latents, a->latents, latent_n(a));
        double bound = on_cuda() ? CUDA_REL_L2_MAX : REL_L2_MAX;
        T_CHECK(e <= bound, "%s: latents differ from alone by %.3g relative L2 (bound %g)", what, e,
                bound);
        fprintf(stderr, "%s: latents relative L2 %.3g\n", what, e);
    }
    T_CHECK(b->rgb && a->rgb && rgb_bytes(b) == rgb_bytes(a), "%s: frames", what);
    if (!(b->rgb && a->rgb && rgb_bytes(b) == rgb_bytes(a))) return;
    size_t n = rgb_bytes(a), flips = 0, big = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)b->rgb[i] - (int)a->rgb[i]);
        flips += d == 1;
        big += d > 1;
        sum += d;
    }
    if (on_cuda()) { /* bf16: levels move, on average a little */
        T_CHECK(sum / (double)n <= CUDA_MEAN_LEVELS_MAX, "%s: pixels differ by %.2f levels on average",
                what, sum / (double)n);
        fprintf(stderr, "%s: pixels differ by %.3f levels on average\n", what, sum / (double)n);
        T_CHECK(b->seed == a->seed && b->guidance == a->guidance, "%s: settings", what);
        return;
    }
    T_CHECK(big == 0, "%s: %zu pixel bytes differ by more than one level", what, big);
    T_CHECK((double)flips <= FLIP_FRACTION_MAX * (double)n,
            "%s: %zu of %zu pixel bytes flipped one level", what, flips, n);
    fprintf(stderr, "%s: %zu of %zu pixel bytes flipped one level\n", what, flips, n);
    *flips_total += (int64_t)flips;
    T_CHECK(b->seed == a->seed && b->guidance == a->guidance, "%s: settings", what);
}

static cosmos3_engine *open_layout(const char *model, int w, int h, int tp, int cfg, int sp) {
    cosmos3_open_params op;
    t_engine_open_params(&op, model, device, tp, cfg, sp, NULL);
    if (on_cuda() && tp * cfg * sp > 1) op.gpus = tp * cfg * sp == 2 ? "0,0" : "0,0,0,0";
    op.plan_width = w;
    op.plan_height = h;
    cosmos3_engine *e = NULL;
    char err[512];
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    T_CHECK(rc == C3_OK, "open %s: %s", model, err);
    return e;
}

/* The three requests of a batch: other prompts, seeds and guidance scales;
 * request 2's negative prompt longer than the others. */
static void three_requests(cosmos3_request rq[3], int w, int h, int steps, const char *p[3]) {
    static const char *neg[3] = {
        "blurry", "blurry",
        "blurry, low quality, washed-out colours, two objects, a gradient background, noise, "
        "jpeg artefacts, a cropped shape, text, a watermark"};
    static const double guid[3] = {5, 1, 7}; /* 1: no uncond branch for request 1 */
    for (int i = 0; i < 3; i++) {
        t_engine_request(&rq[i]);
        rq[i].prompt = p[i];
        rq[i].negative_prompt = neg[i];
        rq[i].width = w;
        rq[i].height = h;
        rq[i].steps = steps;
        rq[i].guidance = guid[i];
        rq[i].seed = 21 + 7 * i;
    }
}

/* ------------------------------------------------------- deferred decode */

typedef struct {
    cosmos3_engine *e;
    cosmos3_result *res;       /* deferred: decoded again and again */
    const cosmos3_result *ref; /* its pixels decoded inside generate */
    volatile int stop;
    int decodes, wrong, rc;
} decode_loop;

static void *decode_thread(void *arg) {
    decode_loop *d = arg;
    char err[512];
    do {
        free(d->res->rgb);
        d->res->rgb = NULL;
        d->rc = cosmos3_decode(d->e, d->res, err, sizeof err);
        if (d->rc) break;
        d->decodes++;
        d->wrong += rgb_bytes(d->res) != rgb_bytes(d->ref) ||
                    memcmp(d->res->rgb, d->ref->rgb, rgb_bytes(d->ref)) != 0;
    } while (!d->stop);
    return NULL;
}

static void test_defer(const char *name, const char *model, int w, int h, int steps,
                       const char *prompt) {
    cosmos3_engine *e = open_layout(model, w, h, 1, 1, 1);
    if (!e) return;
    char err[512];
    cosmos3_request rq;
    t_engine_request(&rq);
    rq.prompt = prompt;
    rq.width = w;
    rq.height = h;
    rq.steps = steps;
    rq.want_latents = false;
    cosmos3_result *plain = NULL, *late = NULL, *next_ref = NULL, *next = NULL;
    int rc = cosmos3_generate(e, &rq, &plain, err, sizeof err);
    T_CHECK(rc == C3_OK, "%s: plain: %s", name, err);
    rq.defer_decode = true;
    rc = cosmos3_generate(e, &rq, &late, err, sizeof err);
    T_CHECK(rc == C3_OK, "%s: deferred: %s", name, err);
    if (!plain || !late) goto out;
    T_CHECK(!late->rgb && late->latents && late->latent_shape[1] > 0,
            "%s: a deferred result holds latents and no frames", name);
    T_CHECK(late->timings.vae == 0, "%s: a deferred result has no decode time yet", name);
    double total0 = late->timings.total;
    rc = cosmos3_decode(e, late, err, sizeof err);
    T_CHECK(rc == C3_OK, "%s: cosmos3_decode: %s", name, err);
    T_CHECK(late->rgb && rgb_bytes(late) == rgb_bytes(plain) &&
                !memcmp(late->rgb, plain->rgb, rgb_bytes(plain)),
            "%s: decoded later differs from decoded in generate", name);
    T_CHECK(late->timings.vae > 0 && late->timings.total >= total0 + late->timings.vae - 1e-9,
            "%s: timings.vae %g, total %g (before %g)", name, late->timings.vae,
            late->timings.total, total0);
    T_CHECK(cosmos3_decode(e, late, err, sizeof err) == C3_OK, "%s: a second decode", name);
    T_CHECK(cosmos3_decode(e, plain, err, sizeof err) == C3_OK,
            "%s: decoding a decoded result is OK at once", name);
    /* a decode on a thread while the engine runs the next generation */
    cosmos3_request rq2 = rq;
    rq2.defer_decode = false;
    rq2.seed = rq.seed + 100;
    rq2.prompt = prompt;
    rc = cosmos3_generate(e, &rq2, &next_ref, err, sizeof err);
    T_CHECK(rc == C3_OK, "%s: next alone: %s", name, err);
    decode_loop d = {.e = e, .res = late, .ref = plain};
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, decode_thread, &d) == 0, "%s: thread", name);
    rc = cosmos3_generate(e, &rq2, &next, err, sizeof err);
    d.stop = 1;
    pthread_join(th, NULL);
    T_CHECK(rc == C3_OK, "%s: generate beside a decode: %s", name, err);
    T_CHECK(d.rc == C3_OK && d.decodes >= 1 && d.wrong == 0,
            "%s: decodes beside a generation: rc %d, %d decodes, %d wrong", name, d.rc, d.decodes,
            d.wrong);
    fprintf(stderr, "%s: %d decodes ran beside one generation\n", name, d.decodes);
    T_CHECK(next && next_ref && rgb_bytes(next) == rgb_bytes(next_ref) &&
                !memcmp(next->rgb, next_ref->rgb, rgb_bytes(next_ref)),
            "%s: the generation beside a decode differs from alone", name);
out:
    cosmos3_result_free(plain);
    cosmos3_result_free(late);
    cosmos3_result_free(next);
    cosmos3_result_free(next_ref);
    cosmos3_close(e);
}

/* --------------------------------------------------------------- batches */

static void test_batch(const char *name, const char *model, int w, int h, int steps,
                       const char *prompts[3], int tp, int cfg, int sp, bool distilled) {
    cosmos3_engine *e = open_layout(model, w, h, tp, cfg, sp);
    if (!e) return;
    char err[512], errs[4 * 512];
    cosmos3_request rq[4];
    three_requests(rq, w, h, steps, prompts);
    if (distilled) /* the fixed sampler: its own steps, one branch, the seed's step noise */
        for (int i = 0; i < 3; i++) {
            rq[i].steps = COSMOS3_DEFAULT;
            rq[i].guidance = COSMOS3_DEFAULT;
            rq[i].guidance_interval = COSMOS3_DEFAULT;
        }

    /* keys and the bound */
    uint64_t k0 = 0, k1 = 0, k2 = 0, k3 = 0;
    T_CHECK(cosmos3_batch_key(e, &rq[0], &k0, err, sizeof err) == C3_OK, "%s: key: %s", name, err);
    T_CHECK(cosmos3_batch_key(e, &rq[2], &k1, err, sizeof err) == C3_OK, "%s: key: %s", name, err);
    T_CHECK(k0 == k1, "%s: the same shape has another batch key", name);
    cosmos3_request other = rq[0];
    other.height = h + 16;
    T_CHECK(cosmos3_batch_key(e, &other, &k2, err, sizeof err) == C3_OK && k2 != k0,
            "%s: another size has the same batch key", name);
    other = rq[0];
    other.steps = steps + 1; /* (the distilled checkpoint runs its own steps only) */
    T_CHECK(distilled || (cosmos3_batch_key(e, &other, &k3, err, sizeof err) == C3_OK && k3 != k0),
            "%s: another step count has the same batch key", name);
    int bmax = cosmos3_batch_max(e, &rq[0]);
    T_CHECK(bmax >= 1, "%s: batch_max %d", name, bmax);
    fprintf(stderr, "%s: batch_max %d\n", name, bmax);

    /* each alone */
    cosmos3_result *alone[3] = {0};
    for (int i = 0; i < 3; i++) {
        int rc = cosmos3_generate(e, &rq[i], &alone[i], err, sizeof err);
        T_CHECK(rc == C3_OK, "%s: request %d alone: %s", name, i, err);
    }

    /* the three as one batch */
    int n = bmax >= 3 || sp > 1 ? 3 : bmax; /* Ulysses: one after another, any number */
    const cosmos3_request *rp[4] = {&rq[0], &rq[1], &rq[2], NULL};
    cosmos3_result *out[4] = {0};
    int rcs[4] = {0};
    req_ev ev[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        rq[i < 3 ? i : 0].on_event = on_req_event;
    }
    for (int i = 0; i < 3; i++)
        rq[i].user = &ev[i];
    int rc = cosmos3_generate_batch(e, n, rp, out, rcs, errs, 512);
    T_CHECK(rc == C3_OK, "%s: batch: %s", name, errs);
    int64_t flips = 0;
    for (int i = 0; i < n; i++) {
        T_CHECK(rcs[i] == C3_OK, "%s: batch request %d: %s", name, i, errs + i * 512);
        char what[64];
        snprintf(what, sizeof what, "%s: batch request %d", name, i);
        check_same(what, out[i], alone[i], &flips);
        T_CHECK(ev[i].terminal == 1 && ev[i].last_terminal == COSMOS3_EV_DONE &&
                    !ev[i].after_terminal && ev[i].steps == steps,
                "%s: request %d's events: %d terminal, %d steps", name, i, ev[i].terminal,
                ev[i].steps);
        T_CHECK(out[i] && ev[i].job == out[i]->job, "%s: request %d's events carry its job", name,
                i);
        if (out[i]) {
            ev[i].und = out[i]->timings.und;
            ev[i].denoise = out[i]->timings.denoise;
        }
        cosmos3_result_free(out[i]);
        out[i] = NULL;
    }
    fprintf(stderr, "%s: batch of %d: %lld single-level flips in all\n", name, n, (long long)flips);
    /* they ran as one batch: one UND stage and one loop, the same times in each */
    T_CHECK(n < 2 || sp > 1 ||
                (ev[0].und == ev[1].und && ev[0].denoise == ev[n - 1].denoise && ev[0].denoise > 0),
            "%s: the batch's requests report other loop times (%g, %g): not run as one", name,
            ev[0].denoise, ev[n - 1].denoise);
    T_CHECK(n < 2 || ev[0].job != ev[1].job, "%s: two requests of a batch share a job id", name);

    /* request 1 cancelled once its step 2 ended: the others as alone */
    if (n == 3) {
        memset(ev, 0, sizeof ev);
        ev[1].cancel_at = 2;
        rq[1].cancel = &ev[1].flag;
        rc = cosmos3_generate_batch(e, 3, rp, out, rcs, errs, 512);
        T_CHECK(rc == C3_OK, "%s: batch with a cancel: %s", name, errs);
        T_CHECK(rcs[1] == C3_ECANCEL && !out[1], "%s: the cancelled request: rc %d", name, rcs[1]);
        T_CHECK(ev[1].terminal == 1 && ev[1].last_terminal == COSMOS3_EV_CANCELLED &&
                    ev[1].steps <= 3,
                "%s: the cancelled request's events: %d terminal (%d), %d steps", name,
                ev[1].terminal, ev[1].last_terminal, ev[1].steps);
        flips = 0;
        for (int i = 0; i < 3; i += 2) {
            T_CHECK(rcs[i] == C3_OK, "%s: request %d beside a cancel: %s", name, i, errs + i * 512);
            char what[64];
            snprintf(what, sizeof what, "%s: request %d beside a cancel", name, i);
            check_same(what, out[i], alone[i], &flips);
            T_CHECK(ev[i].terminal == 1 && ev[i].last_terminal == COSMOS3_EV_DONE,
                    "%s: request %d ends done", name, i);
        }
        for (int i = 0; i < 3; i++) {
            cosmos3_result_free(out[i]);
            out[i] = NULL;
        }
        rq[1].cancel = NULL;
    }

    /* cosmos3_cancel stops every request of the batch */
    if (n >= 2) {
        memset(ev, 0, sizeof ev);
        ev[0].cancel_at = 1;
        ev[0].stop = e;
        rc = cosmos3_generate_batch(e, n, rp, out, rcs, errs, 512);
        for (int i = 0; i < n; i++) {
            T_CHECK(rcs[i] == C3_ECANCEL && !out[i] && ev[i].terminal == 1 &&
                        ev[i].last_terminal == COSMOS3_EV_CANCELLED,
                    "%s: cosmos3_cancel: request %d rc %d, %d terminal (%d)", name, i, rcs[i],
                    ev[i].terminal, ev[i].last_terminal);
            cosmos3_result_free(out[i]);
            out[i] = NULL;
        }
        /* the engine runs the next batch as before */
        memset(ev, 0, sizeof ev);
        rc = cosmos3_generate_batch(e, n, rp, out, rcs, errs, 512);
        for (int i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s: after a cancel, request %d", name, i);
            T_CHECK(rcs[i] == C3_OK, "%s: %s", what, errs + i * 512);
            check_same(what, out[i], alone[i], &flips);
            cosmos3_result_free(out[i]);
            out[i] = NULL;
        }
    }

    /* a request of another shape in the batch: refused alone, one line */
    if (n >= 2) {
        memset(ev, 0, sizeof ev);
        cosmos3_request odd = rq[2], mute = rq[1];
        odd.height = h + 16;
        odd.user = &ev[1];
        mute.prompt = NULL; /* resolves (the key is the same), fails its own check */
        mute.user = &ev[2];
        rq[0].user = &ev[0];
        const cosmos3_request *rp2[3] = {&rq[0], &odd, &mute};
        rc = cosmos3_generate_batch(e, n, rp2, out, rcs, errs, 512);
        if (n >= 3) {
            T_CHECK(rcs[2] == C3_EUSAGE && !out[2] && strstr(errs + 1024, "prompt"),
                    "%s: no prompt: rc %d, '%s'", name, rcs[2], errs + 1024);
            T_CHECK(ev[2].terminal == 1 && ev[2].last_terminal == COSMOS3_EV_FAILED,
                    "%s: the request without a prompt ends failed (%d terminal)", name,
                    ev[2].terminal);
        }
        T_CHECK(ev[1].terminal == 1 && ev[1].last_terminal == COSMOS3_EV_FAILED,
                "%s: the refused request ends failed (%d terminal)", name, ev[1].terminal);
        T_CHECK(ev[0].terminal == 1 && ev[0].last_terminal == COSMOS3_EV_DONE,
                "%s: the request beside them ends done", name);
        T_CHECK(rc == C3_OK, "%s: batch with an odd one: %s", name, errs);
        T_CHECK(rcs[1] == C3_EUSAGE && !out[1] && errs[512] && !strchr(errs + 512, '\n'),
                "%s: the other shape: rc %d, '%s'", name, rcs[1], errs + 512);
        fprintf(stderr, "%s: refused: %s\n", name, errs + 512);
        T_CHECK(rcs[0] == C3_OK && out[0], "%s: the request beside it: %s", name, errs);
        if (out[0] && alone[0]) check_same("beside a refused one", out[0], alone[0], &flips);
        cosmos3_result_free(out[0]);
        cosmos3_result_free(out[1]);
    }
    for (int i = 0; i < 3; i++)
        cosmos3_result_free(alone[i]);
    cosmos3_close(e);
}

int main(void) {
    const char *src = getenv("COSMOS3_SRCDIR");
    const char *dev = getenv("COSMOS3_TEST_DEVICE");
    if (dev && *dev) device = dev;
    fprintf(stderr, "test_batch: engines on %s\n", device);
    char demo[4096];
    snprintf(demo, sizeof demo, "%s/share/models/demo", src ? src : ".");
    static const char *demo_prompts[3] = {"a red circle on a blue background",
                                          "a white square on a black background, on the left",
                                          "a yellow triangle on a purple background, at the top"};
    test_defer("demo defer", demo, 64, 64, 6, demo_prompts[0]);
    test_batch("demo", demo, 64, 64, 6, demo_prompts, 1, 1, 1, false);

    char tmpd[] = "/tmp/c3batchXXXXXX", tiny[128];
    if (!mkdtemp(tmpd)) {
        T_CHECK(0, "mkdtemp");
        return t_done("batch");
    }
    int rc = t_make_tiny8(tmpd, tiny, sizeof tiny);
    T_CHECK(rc == C3_OK, "mkmodel: %s", c3_errmsg());
    char dist[160], tokdir[4096];
    snprintf(dist, sizeof dist, "%s/tinyd", tmpd);
    snprintf(tokdir, sizeof tokdir, "%s/share/tokenizer", src ? src : ".");
    c3_mkmodel_opts mo = {.preset = "tiny",
                          .layers = 2,
                          .seed = 6,
                          .distilled = true,
                          .out_dir = dist,
                          .tokenizer_dir = tokdir};
    int rcd = mkmodel_write(&mo);
    T_CHECK(rcd == C3_OK, "mkmodel --distilled: %s", c3_errmsg());
    static const char *tiny_prompts[3] = {"A red fox jumps over a frozen creek at dawn.",
                                          "A lighthouse in a storm.",
                                          "Two cats on a sofa, watching the rain outside."};
    if (rc == C3_OK) {
        test_defer("tiny defer", tiny, 80, 48, 4, tiny_prompts[0]);
        test_batch("tiny", tiny, 80, 48, 5, tiny_prompts, 1, 1, 1, false);
        /* the layouts: the CFG groups exchange the batch's predictions, TP
         * ranks agree on a cancel; Ulysses runs the requests one after another */
        test_batch("tiny cfg 2", tiny, 80, 48, 5, tiny_prompts, 1, 2, 1, false);
        test_batch("tiny tp 2", tiny, 80, 48, 5, tiny_prompts, 2, 1, 1, false);
        test_batch("tiny ulysses 2", tiny, 80, 48, 5, tiny_prompts, 1, 1, 2, false);
    }
    if (rcd == C3_OK) { /* the distilled sampler: each request its own step noise */
        test_batch("tiny distilled", dist, 80, 48, 4, tiny_prompts, 1, 1, 1, true);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpd);
    return t_done("batch");
}
