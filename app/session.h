/* session.h - a session on the engine for the applications: the options'
 * settings made into a cosmos3_request (the model's defaults, the user's
 * options over them), the engine's events queued as they come, and its
 * frames written by the output module.
 *
 * session_open / session_generate / session_cancel / session_close are
 * cosmos3_open / cosmos3_generate / cosmos3_cancel / cosmos3_close with the
 * inputs read (noise, conditioning media) and the outputs written. */
#ifndef COSMOS3_SESSION_H
#define COSMOS3_SESSION_H

#include <jansson.h>

#include "cosmos3.h"
#include "events.h"
#include "options.h"

typedef struct c3_session c3_session;

/* What a finished generation produced: the library's result, and what the
 * application added to it (the files, their writing, the metadata text). */
typedef struct {
    cosmos3_result *out; /* the engine's: frames, the settings used, timings (NULL on failure) */
    char **paths;        /* files written ("-": standard output) */
    int npaths;
    double t_write;        /* the metadata and the files (t_media_encode inside it) */
    double t_media_encode; /* a container encoded in memory, inside the write */
    double t_total;        /* the whole request: the engine's call and the write */
    /* the process's start to the first step and to the end, set by the
     * program (gen) where it knows them, else < 0 */
    double t_launch_first_step, t_launch_total;
    char *png_parameters; /* the A1111 text */
    char *meta_json;      /* the "cosmos3" metadata object */
} session_result;
void result_free(session_result *r);
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
json_t *result_json(const session_result *r);
/* "wrote PATH (seed N, 1.2 s)" (a clip: its frames and fps; PNG frames:
 * the first and last); false when nothing was written. */
bool result_wrote_line(const session_result *r, char *buf, size_t n);
/* The phases as one text line: "phases: load 8.1 s (read ..., ...), ...". */
void result_phases_line(const session_result *r, char *buf, size_t n);
/* CLOCK_MONOTONIC seconds when this process started (its exec, from
 * /proc/self/stat; else when the program's constructors ran). */
double session_process_start(void);

/* The built-in default model (share/models/demo, installed with cosmos3). */
#define C3_DEFAULT_MODEL "demo"

/* The model folder a run uses: -m, else $COSMOS3_MODEL, else the default. */
const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n);
/* The open parameters the settings give (model, devices, layout, threads). */
void session_open_params(const c3_settings *s, cosmos3_open_params *op);

/* Open the engine the settings name (cosmos3_open); its events go to ev. */
int session_open(c3_session **out, const c3_settings *s, c3_events *ev);
void session_close(c3_session *e);
const cosmos3_layout *session_layout(const c3_session *e);
const cosmos3_model_info *session_model(const c3_session *e);
cosmos3_engine *session_library(c3_session *e);
/* Run one generation with settings s and write its frames (s->output, any
 * format output.c writes). */
int session_generate(c3_session *e, const c3_settings *s, session_result *r);
/* The same without files: the frames stay in r->out (serve, previews);
 * s->output and the overwrite rules play no part. */
int session_generate_frames(c3_session *e, const c3_settings *s, session_result *r);
/* Conditioning frames already in memory (the server's decoded
 * input_reference / image_reference / video_reference). */
typedef struct {
    const uint8_t *rgb; /* [frames, height, width, 3] */
    int width, height, frames;
    bool video;       /* a clip (video-to-video), else a picture (image-to-video) */
    const char *name; /* for the metadata, e.g. "input_reference" */
} c3_cond_frames;
/* session_generate_frames conditioned on frames in memory (in: NULL for none). */
int session_generate_frames_with(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                                 session_result *r);
/* A request made ready for the engine without running it (serve's batches,
 * cosmos3_generate_batch): s checked, the seed drawn, its inputs read (noise,
 * conditioning frames in memory: in may be NULL). s and in must outlive it. */
typedef struct session_req session_req;
int session_prepare(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                    session_req **out);
/* Its request, for the caller to add to (cancel flag, events, defer_decode)
 * and hand to the engine. */
cosmos3_request *session_req_request(session_req *q);
/* After the engine's call: res gets the result (out, owned from here on)
 * and its metadata text, as session_generate_frames fills it. */
int session_req_finish(c3_session *e, session_req *q, cosmos3_result *out, session_result *res);
void session_req_free(session_req *q);
/* Ask the generation in flight to stop (async-signal-safe). */
void session_cancel(c3_session *e);

/* The seed a setting names: -1 for "random", else 0..2^63-1 (COSMOS3_EUSAGE). */
int settings_seed(const char *text, int64_t *seed);
/* The request settings s give on e (NULL: without a model): the model's
 * defaults for the task (cosmos3_request_defaults), the options the user
 * gave over them, checked once (cosmos3_request_check) into *st (may be
 * NULL). need_prompt: a request without a prompt is refused. rq (may be
 * NULL) gets the request; its strings point into s. COSMOS3_EUSAGE with a
 * one-line message naming the option. */
int session_check(const c3_settings *s, const c3_session *e, bool need_prompt, cosmos3_request *rq,
                  cosmos3_settings *st);
/* For display (the REPL's `show`): s's values with the resolved ones in
 * place of the defaults (dst: a copy of s to fill). */
void settings_show_resolved(c3_settings *dst, const cosmos3_settings *st);

#endif
