/* api_outside.c - a program outside the tree on the installed library:
 * includes only <cosmos3.h>, <cosmos3_tools.h> (the tokenizer, mkmodel,
 * checkpoint and bench calls) and the demo world's judge, links with
 * `pkg-config --cflags --libs cosmos3`; run by tests/test_install.sh.
 *
 *   api_outside MODEL_DIR [WORK_DIR]
 *
 * Asserts: the demo model opens; "a red circle on a blue background, on the
 * right" at seed 3 comes back in memory as a 64x64 picture of a red object
 * right of centre on blue, with the card's 20 steps each reported once
 * through the callback; every event carries its job id; each stage begins
 * and ends; each job ends with exactly one terminal event; a second request
 * cancelled from its callback at step 5 returns COSMOS3_ECANCEL; the engine
 * then generates the first picture again, byte for byte. The tokenizer gives
 * the known ids of "a red circle"; with WORK_DIR, cosmos3_mkmodel writes a
 * one-layer distilled tiny checkpoint there that cosmos3_checkpoint_open reads
 * back (geometry, FlowMatch scheduler), and cosmos3_bench times a 64x64 step
 * of the tiny preset (4 GEN tokens, its FLOP count adds up, a 64x64 frame). */
#include <cosmos3.h>
#include <cosmos3_tools.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_judge.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

typedef struct {
    cosmos3_engine *e;
    uint64_t job;  /* the job id every event must carry (0 while opening) */
    int wrong_job; /* events with another id */
    int steps[64]; /* COSMOS3_EV_STEP per step number */
    int nsteps, branches, vae, memory;
    int stage_open[8]; /* begin minus end per stage */
    int ends, end_kind;
    int cancel_at;
} watch;

static const char *const stages[] = {"load", "tokenize", "und", "denoise", "vae"};

static void on_event(const cosmos3_event *ev, void *user) {
    watch *w = user;
    if (ev->job != w->job) w->wrong_job++;
    switch (ev->kind) {
    case COSMOS3_EV_STAGE:
        for (int i = 0; i < 5; i++)
            if (!strcmp(ev->stage, stages[i])) w->stage_open[i] += ev->begin ? 1 : -1;
        break;
    case COSMOS3_EV_STEP:
        if (ev->step >= 1 && ev->step < 64) w->steps[ev->step]++;
        w->nsteps++;
        if (w->cancel_at && ev->step == w->cancel_at) cosmos3_cancel(w->e);
        break;
    case COSMOS3_EV_BRANCH:
        w->branches++;
        break;
    case COSMOS3_EV_VAE:
        w->vae++;
        break;
    case COSMOS3_EV_MEMORY:
        w->memory++;
        break;
    case COSMOS3_EV_DONE:
    case COSMOS3_EV_CANCELLED:
    case COSMOS3_EV_FAILED:
        w->ends++;
        w->end_kind = ev->kind;
        break;
    default:
        break;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: api_outside MODEL_DIR\n");
        return 2;
    }
    char err[512] = "";
    watch w = {0};
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = argv[1];
    op.device = "cpu";
    op.on_event = on_event;
    op.user = &w;
    cosmos3_engine *e = NULL;
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    CHECK(rc == COSMOS3_OK && e, "open %s: %s", argv[1], err);
    if (!e) return 1;
    w.e = e;
    CHECK(w.wrong_job == 0 && w.stage_open[0] == 0,
          "open: events with job 0, load begun and ended");
    cosmos3_model_info mi;
    cosmos3_model(e, &mi);
    CHECK(mi.steps == 20 && mi.width == 64 && mi.vae_spatial == 16, "model card: %d steps %dx%d",
          mi.steps, mi.width, mi.height);

    cosmos3_request rq;
    cosmos3_request_init(&rq);
    rq.prompt = "a red circle on a blue background, on the right";
    rq.seed = 3;
    /* the request's callback: the open's (rq.on_event NULL) */
    w.job = 1;
    cosmos3_result *r = NULL;
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    CHECK(rc == COSMOS3_OK && r, "generate: %s", err);
    if (!r) return 1;
    CHECK(r->job == 1 && w.wrong_job == 0, "job id 1 on every event (%d wrong)", w.wrong_job);
    CHECK(r->width == 64 && r->height == 64 && r->frames == 1, "size %dx%dx%d", r->width, r->height,
          r->frames);
    CHECK(r->steps == 20 && w.nsteps == 20, "steps: result %d, events %d", r->steps, w.nsteps);
    for (int i = 1; i <= 20; i++)
        CHECK(w.steps[i] == 1, "step %d reported %d times", i, w.steps[i]);
    CHECK(w.branches >= 20 && w.memory >= 20 && w.vae >= 1, "branch %d memory %d vae %d events",
          w.branches, w.memory, w.vae);
    for (int i = 1; i < 5; i++)
        CHECK(w.stage_open[i] == 0, "stage %s begun and ended", stages[i]);
    CHECK(w.ends == 1 && w.end_kind == COSMOS3_EV_DONE, "one DONE (%d ends)", w.ends);
    CHECK(r->seed == 3 && !r->noise_given && !strcmp(r->model_id, "demo"), "settings used");
    demo_verdict v;
    int jr = demo_judge(r->rgb, &v);
    CHECK(jr == 0 && v.bg == DEMO_BLUE && v.colour == DEMO_RED && v.place == DEMO_RIGHT &&
              v.cx > DEMO_CENTRE,
          "judge: bg %d colour %d place %d cx %.1f (want blue, red, right)", v.bg, v.colour,
          v.place, v.cx);
    size_t bytes = (size_t)r->width * r->height * 3;
    unsigned char *first = malloc(bytes);
    memcpy(first, r->rgb, bytes);
    cosmos3_result_free(r);

    /* a second request, cancelled at step 5 from its own callback */
    watch w2 = {.e = e, .job = 2, .cancel_at = 5};
    rq.on_event = on_event;
    rq.user = &w2;
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    CHECK(rc == COSMOS3_ECANCEL && r == NULL, "cancel: rc %d (%s)", rc, err);
    CHECK(w2.nsteps == 5 && w2.ends == 1 && w2.end_kind == COSMOS3_EV_CANCELLED &&
              w2.wrong_job == 0,
          "cancelled after 5 steps: %d steps, %d ends, kind %d", w2.nsteps, w2.ends, w2.end_kind);
    CHECK(w.nsteps == 20, "the open's callback saw nothing of job 2");

    /* the engine stays usable: the first picture again */
    watch w3 = {.e = e, .job = 3};
    rq.user = &w3;
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    CHECK(rc == COSMOS3_OK && r && w3.ends == 1 && w3.end_kind == COSMOS3_EV_DONE,
          "after the cancel: %s", err);
    if (r) CHECK(!memcmp(r->rgb, first, bytes), "the same seed gives the same picture");
    cosmos3_result_free(r);
    free(first);

    /* a bad request: a status and a message, nothing else */
    rq.width = 17;
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    CHECK(rc == COSMOS3_EUSAGE && r == NULL && strstr(err, "width 17"), "bad width: %d %s", rc,
          err);

    /* the model's defaults for a task, by value; a refusal in parts */
    cosmos3_request d;
    rc = cosmos3_request_defaults(e, 1, &d);
    CHECK(rc == COSMOS3_OK && d.literal && d.width == 64 && d.height == 64 && d.frames == 1 &&
              d.steps == 20 && d.guidance >= 0 && d.shift > 0 && d.schedule &&
              d.seed == COSMOS3_DEFAULT && d.fps > 0,
          "defaults: %dx%d x%d, %d steps, guidance %g, shift %g", d.width, d.height, d.frames,
          d.steps, d.guidance, d.shift);
    cosmos3_settings st;
    cosmos3_error er;
    rc = cosmos3_request_check(e, &d, &st, &er);
    CHECK(rc == COSMOS3_OK && st.steps == d.steps && st.guidance == d.guidance &&
              st.shift == d.shift && !strcmp(st.schedule, d.schedule) && !st.seed_given,
          "the defaults resolve to themselves: %d %s", rc, er.message);
    d.steps = COSMOS3_DEFAULT; /* literal: -1 is checked as -1, not taken as "the default" */
    rc = cosmos3_request_check(e, &d, &st, &er);
    CHECK(rc == COSMOS3_EUSAGE && er.status == rc && er.field == COSMOS3_FIELD_STEPS &&
              !strcmp(er.value, "-1") && strstr(er.reason, "1..1000") &&
              er.fix == COSMOS3_FIELD_NONE && !strcmp(cosmos3_field_name(er.field), "steps") &&
              !strcmp(er.message, "steps -1 must be in 1..1000"),
          "steps -1: %d field %d value '%s' reason '%s' message '%s'", rc, er.field, er.value,
          er.reason, er.message);
    d.steps = 6;
    d.schedule = "flowmatch4";
    rc = cosmos3_request_check(e, &d, &st, &er);
    CHECK(rc == COSMOS3_EUSAGE && er.field == COSMOS3_FIELD_SCHEDULE &&
              !strcmp(er.value, "flowmatch4") && er.fix == COSMOS3_FIELD_STEPS &&
              !strcmp(er.fix_value, "4") && strstr(er.message, "; use steps 4"),
          "flowmatch4 at 6 steps: field %d fix %d '%s': %s", er.field, er.fix, er.fix_value,
          er.message);
    /* without an engine: the task's (a video: 1280x720, 35 steps, guidance 6, shift 10) */
    rc = cosmos3_request_defaults(NULL, 5, &d);
    CHECK(rc == COSMOS3_OK && d.width == 1280 && d.height == 720 && d.frames == 5 &&
              d.steps == 35 && d.guidance == 6 && d.shift == 10 && d.guidance_interval == 0,
          "video task defaults: %dx%d, %d steps, guidance %g, shift %g", d.width, d.height,
          d.steps, d.guidance, d.shift);
    cosmos3_close(e);

    /* the tokenizer without weights: BPE ids of a known text, and the templated prompt */
    cosmos3_tokenizer *tk = NULL;
    rc = cosmos3_tokenizer_open(argv[1], &tk, err, sizeof err);
    CHECK(rc == COSMOS3_OK && tk, "tokenizer_open: %s", err);
    if (tk) {
        cosmos3_tokenize_params tp;
        cosmos3_tokenize_params_init(&tp);
        tp.raw = true;
        int32_t *ids = NULL;
        int n = 0;
        rc = cosmos3_tokenize(tk, &tp, "a red circle", 12, &ids, &n, err, sizeof err);
        CHECK(rc == COSMOS3_OK && n == 3 && ids[0] == 64 && ids[1] == 2518 && ids[2] == 12671,
              "raw ids of 'a red circle' (want 64 2518 12671): n %d %s", n, err);
        free(ids);
        tp.raw = false;
        rc = cosmos3_tokenize(tk, &tp, "a red circle", 12, &ids, &n, err, sizeof err);
        /* chat template: starts <|im_start|>, ends vision_start */
        CHECK(rc == COSMOS3_OK && n > 10 && ids[0] == 151644 && ids[n - 1] == 151652,
              "templated ids: n %d first %d last %d %s", n, n ? ids[0] : -1, n ? ids[n - 1] : -1,
              err);
        free(ids);
        cosmos3_tokenizer_close(tk);
    }

    /* the checkpoint without weights: geometry and a CPU plan */
    cosmos3_checkpoint *ck = NULL;
    cosmos3_open_params_init(&op);
    op.model = argv[1];
    op.device = "cpu";
    rc = cosmos3_checkpoint_open(&op, &ck, err, sizeof err);
    CHECK(rc == COSMOS3_OK && ck, "checkpoint_open: %s", err);
    if (ck) {
        cosmos3_model_info ci;
        cosmos3_checkpoint_details cd;
        cosmos3_checkpoint_model(ck, &ci, &cd);
        CHECK(ci.layers == 4 && ci.hidden == 256 && !strcmp(cd.mlp, "swiglu") &&
                  cd.intermediate == 768,
              "demo geometry: %d layers hidden %d %s %d", ci.layers, ci.hidden, cd.mlp,
              cd.intermediate);
        cosmos3_layout lay;
        char *text = NULL;
        rc = cosmos3_checkpoint_plan(ck, &op, 64, 64, 1, &lay, &text, err, sizeof err);
        CHECK(rc == COSMOS3_OK && lay.world == 1 && !strcmp(lay.device, "cpu") && lay.weights > 0 && text,
              "cpu plan: %s", err);
        free(text);
        /* gen's load checks without the weights (what plain `cosmos3 info` runs) */
        int64_t nt = -1, nv = -1;
        rc = cosmos3_checkpoint_check(ck, &op, false, &nt, &nv, err, sizeof err);
        CHECK(rc == COSMOS3_OK && nt == 0 && nv == 0 && !cd.fp8 && cd.fp8_tensors == 0,
              "checkpoint_check: %d %s", rc, err);
        op.tp = 3; /* 8 heads do not split in 3 */
        rc = cosmos3_checkpoint_plan(ck, &op, 64, 64, 1, &lay, &text, err, sizeof err);
        CHECK(rc != COSMOS3_OK && text == NULL && err[0], "tp 3 refused: %d", rc);
        cosmos3_checkpoint_close(ck);
    }

    /* mkmodel: a bad preset is refused with a message, nothing written */
    cosmos3_mkmodel_params mp;
    cosmos3_mkmodel_params_init(&mp);
    mp.preset = "huge";
    mp.out_dir = "/nonexistent-cosmos3-dir/x";
    rc = cosmos3_mkmodel(&mp, err, sizeof err);
    CHECK(rc == COSMOS3_EUSAGE && strstr(err, "huge"), "mkmodel bad preset: %d %s", rc, err);
    if (argc > 2) {
        /* mkmodel for real: one layer of tiny, the distilled scheduler, read back */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tiny1", argv[2]);
        cosmos3_mkmodel_params_init(&mp);
        mp.preset = "tiny";
        mp.layers = 1;
        mp.vocab = 256;
        mp.distilled = true;
        mp.out_dir = dir;
        rc = cosmos3_mkmodel(&mp, err, sizeof err);
        CHECK(rc == COSMOS3_OK, "mkmodel tiny: %s", err);
        cosmos3_open_params_init(&op);
        op.model = dir;
        op.device = "cpu";
        rc = rc ? rc : cosmos3_checkpoint_open(&op, &ck, err, sizeof err);
        CHECK(rc == COSMOS3_OK, "checkpoint_open of the mkmodel folder: %s", err);
        if (rc == COSMOS3_OK) {
            cosmos3_model_info ci;
            cosmos3_checkpoint_details cd;
            cosmos3_checkpoint_model(ck, &ci, &cd);
            CHECK(ci.layers == 1 && ci.hidden == 128 && cd.vocab == 256 &&
                      !strcmp(cd.scheduler, "FlowMatchEulerDiscreteScheduler"),
                  "mkmodel tiny: %d layers, hidden %d, vocab %d, scheduler %s", ci.layers,
                  ci.hidden, cd.vocab, cd.scheduler);
            cosmos3_checkpoint_close(ck);
        }
        /* the benchmark as a call: numbers, nothing printed */
        cosmos3_bench_params bp;
        cosmos3_bench_params_init(&bp);
        bp.preset = "tiny";
        bp.layers = 1;
        bp.device = "cpu";
        bp.width = bp.height = 64;
        bp.steps = 1;
        cosmos3_bench_result br;
        rc = cosmos3_bench(&bp, &br, err, sizeof err);
        CHECK(rc == COSMOS3_OK, "bench: %s", err);
        if (rc == COSMOS3_OK) {
            double sum = br.flop_step_linear + br.flop_step_attn;
            CHECK(br.gen_tokens == 4 && br.layers == 1 && br.L_cond > 10 && br.step_mean > 0 &&
                      br.flop_step > 0 && br.flop_step - sum < 1e-9 * sum &&
                      sum - br.flop_step < 1e-9 * sum && br.vae && br.frame_rgb &&
                      br.frame_width == 64 && br.frame_height == 64 && br.mem_weights > 0,
                  "bench numbers: S %d, layers %d, L %d, step %g s, %g FLOP, frame %dx%d",
                  br.gen_tokens, br.layers, br.L_cond, br.step_mean, br.flop_step, br.frame_width,
                  br.frame_height);
            CHECK(!strcmp(cosmos3_bench_op_name(0), "matrix products"), "op 0 is %s",
                  cosmos3_bench_op_name(0));
            cosmos3_bench_result_free(&br);
        }
        bp.width = 100;
        rc = cosmos3_bench(&bp, &br, err, sizeof err);
        CHECK(rc == COSMOS3_EUSAGE && strstr(err, "multiple of 16"), "bench 100x64: %d %s", rc,
              err);
    }
    CHECK(cosmos3_device_count() >= 0, "device count");
    if (!failures) printf("api_outside: all checks passed\n");
    return failures ? 1 : 0;
}
