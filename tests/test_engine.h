/* test_engine.h - what the engine-level tests share: the small generation
 * every layout test runs (80x48: a 3x5 latent grid, 6 GEN tokens, so
 * ulysses 4 pads) as a cosmos3_request, the open parameters of a layout,
 * and its tiny8 checkpoint. */
#ifndef COSMOS3_TEST_ENGINE_H
#define COSMOS3_TEST_ENGINE_H

#include "cosmos3.h"
#include "events.h"
#include "mkmodel.h"
#include "test_util.h"

/* The request: 80x48, 3 steps at guidance 5 on every step, seed 11, the
 * final latents returned. */
static inline void t_engine_request(cosmos3_request *rq) {
    cosmos3_request_init(rq);
    rq->prompt = "A red fox jumps over a frozen creek at dawn.";
    rq->negative_prompt = "blurry";
    rq->width = 80;
    rq->height = 48;
    rq->steps = 3;
    rq->guidance = 5;
    rq->guidance_interval = 0; /* CFG on every step */
    rq->seed = 11;
    rq->want_latents = true;
}

/* The engine's events into the application's queue (user: a c3_events). */
static inline void t_engine_queue(const cosmos3_event *ev, void *user) {
    events_push_engine(user, ev);
}

/* model on device ("cpu", "cuda") as tp x cfg x ulysses ranks, the plan
 * checked at the request's size; events to q (NULL: none). */
static inline void t_engine_open_params(cosmos3_open_params *op, const char *model,
                                        const char *device, int tp, int cfg, int sp, c3_events *q) {
    cosmos3_open_params_init(op);
    op->model = model;
    op->device = device;
    op->tp = tp;
    op->cfg_parallel = cfg;
    op->ulysses = sp;
    op->plan_width = 80;
    op->plan_height = 48;
    op->plan_frames = 1;
    op->on_event = q ? t_engine_queue : NULL;
    op->user = q;
}

/* The final latents of r as a malloc'd copy; *n floats. */
static inline float *t_result_latents(const cosmos3_result *r, int64_t *n) {
    if (!r || !r->latents) return NULL;
    int64_t k = 1;
    for (int i = 0; i < 5; i++)
        k *= r->latent_shape[i];
    float *x = xmalloc((size_t)k * sizeof *x);
    memcpy(x, r->latents, (size_t)k * sizeof *x);
    *n = k;
    return x;
}

/* A `mkmodel --preset tiny` checkpoint (8 KV heads, 2 layers) in dir/tiny8,
 * with the tokenizer of the source tree; out gets its path. */
static inline int t_make_tiny8(const char *dir, char *out, size_t n) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char tokdir[4096];
    snprintf(out, n, "%s/tiny8", dir);
    snprintf(tokdir, sizeof tokdir, "%s/share/tokenizer", src ? src : ".");
    c3_mkmodel_opts mo = {
        .preset = "tiny", .layers = 2, .seed = 5, .out_dir = out, .tokenizer_dir = tokdir};
    return mkmodel_write(&mo);
}

#endif
