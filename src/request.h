/* request.h - the one place a request's defaults are resolved and its
 * values checked (the model card first, else vLLM-Omni's task defaults). */
#ifndef COSMOS3_REQUEST_H
#define COSMOS3_REQUEST_H

#include "checkpoint.h"
#include "cosmos3.h"
#include "plan.h"
#include "scheduler.h"

/* The task defaults where a model card is silent (vLLM-Omni's image and
 * video pipelines): one row per task. */
typedef struct {
    int width, height, steps;
    double guidance, shift;
    bool interval; /* CFG only for t in [lo, hi] */
    double interval_lo, interval_hi;
} c3_task_defaults;

extern const c3_task_defaults c3_image_defaults, c3_video_defaults;
#define C3_DEFAULT_FPS 24.0
#define C3_DEFAULT_SCHEDULE "linear"

/* Resolve r against ck (NULL: no card, latent_shape[1] 0). C3_EUSAGE with
 * a one-line message on a bad value. */
int request_resolve(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *out);
/* The same with the failure in parts into er (may be NULL). */
int request_check(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *out,
                  cosmos3_error *er);
/* r initialised and filled with the real values a request of frames frames
 * runs with on ck (NULL: the task defaults); r->literal set. */
int request_defaults(const c3_ckpt *ck, int frames, cosmos3_request *r);
/* The size a plan is checked at before any weight loads: the open
 * parameters' plan_width, plan_height, plan_frames, else the default image
 * (the card's, else the task's), resolved as a request. */
int request_plan_size(const c3_ckpt *ck, const cosmos3_open_params *op, cosmos3_settings *out);
/* The plan open parameters give checkpoint ck at W x H x F (plan.c): what
 * cosmos3_open checks before any weight loads, cosmos3_checkpoint_plan shows
 * and cosmos3_bench's e2e reports (tp, cfg_parallel, ulysses 0: 1; device
 * NULL: "auto"; precision by name, NULL: "auto"). */
int plan_open(c3_plan *p, const c3_ckpt *ck, const cosmos3_open_params *op, int W, int H, int F);
/* One-line warnings where the request leaves what the card knows (another
 * size than trained, words outside its vocabulary), given to warn(). */
void request_warnings(const char *prompt, const cosmos3_settings *s, const c3_ckpt *ck,
                      void (*warn)(void *ud, const char *line), void *ud);

#endif
