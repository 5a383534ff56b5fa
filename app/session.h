/* session.h - the applications' engine: cosmos3.h driven by the options'
 * settings, its events turned into the event queue the front ends read, and
 * its frames written by the output module.
 *
 * engine_open / engine_generate / engine_cancel / engine_close keep the
 * shape the REPL, the TUI, serve and the tests use; underneath they are
 * cosmos3_open / cosmos3_generate / cosmos3_cancel / cosmos3_close. */
#ifndef COSMOS3_SESSION_H
#define COSMOS3_SESSION_H

#include <jansson.h>

#include "cosmos3.h"
#include "events.h"
#include "options.h"

typedef struct c3_engine c3_engine;

/* What a finished generation produced. */
typedef struct {
    char **paths; /* files written ("-": standard output) */
    int npaths;
    uint64_t seed;
    int width, height, frames, steps;
    double guidance, shift;
    char schedule[16];
    int L_cond, L_uncond;
    /* seconds per stage */
    double t_tokenize, t_und, t_denoise, t_vae, t_write, t_total;
    double t_step_mean, t_cond_mean, t_uncond_mean;
    /* the phases (result_json's "phases"; phases_line): t_write holds
     * t_media_encode (a container encoded in memory, inside the write) */
    double t_load, t_load_read, t_load_backends, t_load_weights, t_load_vae, t_load_tokenizer;
    int64_t load_prefault_bytes;
    double t_cond_encode, t_step_first, t_step_rest_mean, t_step_host_mean, t_media_encode;
    double t_generate; /* the engine's generation (t_total less the write) */
    /* CLOCK_MONOTONIC seconds (cosmos3_result's clock_*); process start to
     * first step and to the end are set by the program (gen) where it knows
     * them, else stay < 0 */
    double clock_open, clock_generate, clock_first_step;
    double t_launch_first_step, t_launch_total;
    int64_t mem_peak;
    /* --offload on GPUs: rank 0's weight stream (host -> device) */
    int64_t h2d_bytes;
    double h2d_seconds, h2d_gbps;
    char *png_parameters; /* the A1111 text */
    char *meta_json;      /* the "cosmos3" metadata object */
    cosmos3_result *out;  /* the engine's result: frames in memory, the settings used */
} c3_result;
void result_free(c3_result *r);
/* What a finished generation reports, the one shape gen --json, serve's
 * metrics and the REPL's `last` use: {seed, width, height, frames, steps,
 * guidance, shift, schedule, L_cond, L_uncond, seconds: {tokenize, und,
 * denoise, step_mean, cond_mean, uncond_mean, vae, write, total},
 * mem_peak_bytes, offload: {h2d_bytes, h2d_seconds, h2d_gbps}, phases:
 * {load: {total, read, backends, weights, vae, tokenizer, prefault_bytes},
 * tokenize, und, cond_encode, steps: {total, count, first, mean,
 * rest_mean, host_mean}, decode, other, encode, write, generate, start,
 * launch_to_first_step, total}} (the weights streamed, --offload; in
 * phases "generate" is the whole request with its write, "other" what the
 * engine spent outside the named phases, "encode" the media encode inside
 * "write"; start (the process's start to the load's), launch_to_first_step
 * and total appear only where the program set them). A new reference. */
json_t *result_json(const c3_result *r);
/* The phases as one text line: "phases: load 8.1 s (read ..., ...), ...". */
void result_phases_line(const c3_result *r, char *buf, size_t n);
/* CLOCK_MONOTONIC seconds when this process started (its exec, from
 * /proc/self/stat; else when the program's constructors ran). */
double session_process_start(void);

/* The built-in default model (share/models/demo, installed with cosmos3). */
#define C3_DEFAULT_MODEL "demo"

/* The model folder a run uses: -m, else $COSMOS3_MODEL, else the default. */
const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n);
/* The open parameters the settings give (model, devices, layout, threads). */
void session_open_params(const c3_settings *s, cosmos3_open_params *op);

int engine_open(c3_engine **out, const c3_settings *s, c3_events *ev);
void engine_close(c3_engine *e);
const cosmos3_layout *engine_layout(const c3_engine *e);
const cosmos3_model_info *engine_model(const c3_engine *e);
cosmos3_engine *engine_library(c3_engine *e);
/* Run one generation with settings s and write its frames (s->output, any
 * format output.c writes). */
int engine_generate(c3_engine *e, const c3_settings *s, c3_result *r);
/* The same without files: the frames stay in r->out (serve, previews);
 * s->output and the overwrite rules play no part. */
int engine_generate_frames(c3_engine *e, const c3_settings *s, c3_result *r);
/* Conditioning frames already in memory (the server's decoded
 * input_reference / image_reference / video_reference). */
typedef struct {
    const uint8_t *rgb; /* [frames, height, width, 3] */
    int width, height, frames;
    bool video;       /* a clip (video-to-video), else a picture (image-to-video) */
    const char *name; /* for the metadata, e.g. "input_reference" */
} c3_cond_frames;
/* engine_generate_frames conditioned on frames in memory (in: NULL for none). */
int engine_generate_frames_with(c3_engine *e, const c3_settings *s, const c3_cond_frames *in,
                                c3_result *r);
/* Ask the generation in flight to stop (async-signal-safe). */
void engine_cancel(c3_engine *e);

/* The seed a setting names: -1 for "random", else 0..2^63-1 (COSMOS3_EUSAGE). */
int settings_seed(const char *text, int64_t *seed);
/* The request settings s describe (strings point into s; noise not read). */
void settings_request(const c3_settings *s, cosmos3_request *rq);
/* Fill the task defaults (cosmos3_resolve on e, or without a model when
 * NULL) into s for the options the user did not give, and check every
 * value: COSMOS3_EUSAGE with a one-line message naming the option. */
int settings_resolve(c3_settings *s, const c3_engine *e);

#endif
