/* pipeline.h - the engine: a loaded model on its ranks, and one generation.
 *
 *   prompt --tokenizer + chat template--> ids (cond, uncond)
 *     --UND tower, once per branch--> per-layer K/V cache
 *   noise --GEN tower x steps (CFG combine, sampler step)--> latents
 *     --Wan2.2 VAE decode--> pixels --> PNG (metadata) / frames
 *
 * engine_open checks the plan (devices, divisibility, memory) before any
 * weight is read, then loads every rank. engine_generate runs one request;
 * the REPL and the server call it many times on one engine. Progress goes to
 * the event queue; the engine never prints.
 */
#ifndef COSMOS3_PIPELINE_H
#define COSMOS3_PIPELINE_H

#include "checkpoint.h"
#include "events.h"
#include "options.h"
#include "plan.h"

typedef struct c3_engine c3_engine;

/* What a finished generation produced. The engine writes no file: the
 * frames come back in rgb and the application writes them (app/output.c,
 * which fills paths and t_write). */
typedef struct {
    uint8_t *rgb; /* [frames, height, width, 3] uint8 RGB */
    double fps;
    char **paths; /* files the application wrote */
    int npaths;
    uint64_t seed;
    int width, height, frames, steps;
    double guidance, shift;
    char schedule[16];
    int L_cond, L_uncond;
    /* seconds per stage */
    double t_tokenize, t_und, t_denoise, t_vae, t_write, t_total;
    double t_step_mean, t_cond_mean, t_uncond_mean;
    int64_t mem_peak;
    /* --offload on GPUs: rank 0's weight stream (host -> device) */
    int64_t h2d_bytes;
    double h2d_seconds, h2d_gbps;
    char *png_parameters; /* the A1111 text */
    char *meta_json;      /* the cosmos3 JSON: everything needed to reproduce the result */
} c3_result;
void result_free(c3_result *r);

/* The built-in default model (share/models/demo, installed with cosmos3). */
#define C3_DEFAULT_MODEL "demo"

/* The model folder a run uses: -m, else $COSMOS3_MODEL, else the default;
 * a name without '/' that is no folder here names a built-in model. */
const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n);

int engine_open(c3_engine **out, const c3_settings *s, c3_events *ev);
void engine_close(c3_engine *e);
const c3_ckpt *engine_ckpt(const c3_engine *e);
const c3_plan *engine_plan(const c3_engine *e);
/* Run one generation with settings s (task defaults resolved inside). */
int engine_generate(c3_engine *e, const c3_settings *s, c3_result *r);
/* Ask the generation in flight to stop (async-signal-safe). */
void engine_cancel(c3_engine *e);

/* Tests only: the rank that fails on purpose at step 2 (-1: none). */
extern int c3_inject_fail_rank;

/* Fill the task defaults (image or video) for options the user did not give,
 * and validate every value. C3_EUSAGE with a one-line message and the fix. */
int settings_resolve(c3_settings *s, const c3_ckpt *ck);
/* Warn (events, one line each) when s leaves what ck's model card knows:
 * another size than it was trained at, words outside its vocabulary. */
void settings_warnings(const c3_settings *s, const c3_ckpt *ck, c3_events *ev);

#endif
