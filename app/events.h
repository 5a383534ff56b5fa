/* events.h - the one queue through which workers report to frontends.
 *
 * Ranks push events (loaded, step begin/end per branch with times, memory
 * per device, preview ready, done, error, cancelled); the progress line, the
 * REPL and the TUI pop them. Nothing in the engine prints. Thread-safe. */
#ifndef COSMOS3_EVENTS_H
#define COSMOS3_EVENTS_H

#include "util.h"

typedef enum {
    EV_LOG,        /* text: an informational line */
    EV_PLAN,       /* text: the layout */
    EV_LOADED,     /* rank, bytes[] = weights/kv/act, seconds */
    EV_STAGE,      /* text: stage name ("tokenize", "und", "denoise", "vae", "write"), code:
                      EV_STAGE_BEGIN,      EV_STAGE_END (seconds) or EV_STAGE_CHUNK (vae: step of steps
                      latent      frames done) */
    EV_STEP_BEGIN, /* step, steps */
    EV_BRANCH,     /* step, branch (0 cond, 1 uncond), rank, group, seconds */
    EV_STEP_END,   /* step, steps, seconds, cond_s, uncond_s, combine_s, timestep */
    EV_MEMORY,     /* rank, device, bytes[], dev_free, dev_total */
    EV_PREVIEW,    /* text: path of a finished image */
    EV_DONE,       /* seconds */
    EV_ERROR,      /* code, text */
    EV_CANCELLED,
    EV_FINISHED, /* a task's call returned (task.h) */
} c3_event_kind;

enum { EV_STAGE_END = 0, EV_STAGE_BEGIN = 1, EV_STAGE_CHUNK = 2 };

typedef struct {
    c3_event_kind kind;
    int rank, group, device;
    int step, steps, branch;
    int64_t timestep;
    double seconds, cond_s, uncond_s, combine_s;
    int64_t bytes[3];
    int64_t dev_free, dev_total;
    int code;
    bool cached; /* EV_STEP_END: the step cache skipped the block stack (--cache) */
    double when; /* c3_now() at push */
    char text[512];
} c3_event;

typedef struct c3_events c3_events;

c3_events *events_new(int capacity);
void events_free(c3_events *q);
/* Push (never blocks: when full, the oldest event is dropped). */
void events_push(c3_events *q, const c3_event *e);
/* Pop the next event, waiting up to timeout seconds (<0: forever). false on timeout. */
bool events_pop(c3_events *q, c3_event *e, double timeout);
/* Convenience: push a kind with a formatted text. */
void events_emit(c3_events *q, c3_event_kind kind, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
