/* events.c - a bounded ring of events guarded by a mutex and a condition. */
#include "events.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct c3_events {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    c3_event *ring;
    int cap, head, count;
};

c3_events *events_new(int capacity) {
    c3_events *q = xcalloc(1, sizeof *q);
    q->cap = capacity > 16 ? capacity : 16;
    q->ring = xcalloc((size_t)q->cap, sizeof *q->ring);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    return q;
}

void events_free(c3_events *q) {
    if (!q) return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->ring);
    free(q);
}

/* The engine event's strings are the slot's own copies. */
static void repoint(c3_event *x) {
    if (x->kind != EV_ENGINE) return;
    if (x->ev.text) x->ev.text = x->text;
    if (x->ev.stage) x->ev.stage = x->stage;
}

void events_push_engine(c3_events *q, const cosmos3_event *ev) {
    c3_event x = {.kind = EV_ENGINE, .ev = *ev};
    if (ev->text) snprintf(x.text, sizeof x.text, "%s", ev->text);
    if (ev->stage) snprintf(x.stage, sizeof x.stage, "%s", ev->stage);
    events_push(q, &x);
}

void events_push(c3_events *q, const c3_event *e) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    if (q->count == q->cap) { /* drop the oldest */
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    c3_event *slot = &q->ring[(q->head + q->count) % q->cap];
    *slot = *e;
    repoint(slot);
    slot->when = c3_now();
    q->count++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

bool events_pop(c3_events *q, c3_event *e, double timeout) {
    pthread_mutex_lock(&q->mu);
    if (q->count == 0 && timeout != 0) {
        if (timeout < 0) {
            while (q->count == 0)
                pthread_cond_wait(&q->cv, &q->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + timeout;
            ts.tv_sec = (time_t)t;
            ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
            while (q->count == 0)
                if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) != 0) break;
        }
    }
    bool ok = q->count > 0;
    if (ok) {
        *e = q->ring[q->head];
        repoint(e);
        q->head = (q->head + 1) % q->cap;
        q->count--;
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void events_emit(c3_events *q, c3_event_kind kind, int code, const char *fmt, ...) {
    c3_event e = {.kind = kind, .code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.text, sizeof e.text, fmt, ap);
    va_end(ap);
    events_push(q, &e);
}
