/* events.h - the one queue through which workers report to frontends.
 *
 * The engine's events (cosmos3_event: loaded, stages, steps per branch
 * with times, memory per device, done, cancelled, failed) as they come, and
 * a few of the applications' own (a file written, a request refused before
 * the engine had it, a task's end); the progress line, the REPL, the TUI
 * and serve pop them. Nothing in the engine prints. Thread-safe. */
#ifndef COSMOS3_EVENTS_H
#define COSMOS3_EVENTS_H

#include "util.h"

typedef enum {
    EV_ENGINE,   /* ev: the library's event as it came (cosmos3.h); ev.text and ev.stage point
                    into text and stage */
    EV_WROTE,    /* text: a file the request wrote */
    EV_ERROR,    /* code, text: a request that failed before the engine had it (its settings, its
                    inputs): the job's one terminal event, as the engine's are */
    EV_FINISHED, /* a task's call returned (task.h) */
} c3_event_kind;

typedef struct {
    c3_event_kind kind;
    cosmos3_event ev; /* EV_ENGINE */
    int code;
    bool cached;  /* EV_STEP_END: the step cache skipped the block stack (--cache) */
    double when;  /* c3_now() at push */
    uint64_t tag; /* the pusher's own mark (serve: the request it belongs to; 0: none) */
    char stage[16];
    char text[512];
} c3_event;

/* Whether x is the engine's event of kind k. */
static inline bool ev_is(const c3_event *x, cosmos3_event_kind k) {
    return x->kind == EV_ENGINE && x->ev.kind == k;
}

typedef struct c3_events c3_events;

c3_events *events_new(int capacity);
void events_free(c3_events *q);
/* Push (never blocks: when full, the oldest event is dropped). */
void events_push(c3_events *q, const c3_event *e);
/* Pop the next event, waiting up to timeout seconds (<0: forever). false on timeout. */
bool events_pop(c3_events *q, c3_event *e, double timeout);
/* Push the library's event (its text copied). */
void events_push_engine(c3_events *q, const cosmos3_event *ev);
/* Push an application kind with a formatted text. */
void events_emit(c3_events *q, c3_event_kind kind, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
