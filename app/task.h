/* task.h - one call on a thread of its own, its status and message carried
 * back: the generation of `gen`, the REPL's (and TUI's) load and run.
 *
 * The call's message is thread-local (c3_fail), so the thread copies it into
 * the task when the call fails, then pushes EV_FINISHED to the queue: the
 * front end that pops it calls task_join, which records the message again on
 * its own thread. */
#ifndef COSMOS3_TASK_H
#define COSMOS3_TASK_H

#include <pthread.h>

#include "events.h"

typedef int (*c3_task_fn)(void *arg);

typedef struct {
    c3_task_fn fn;
    void *arg;
    c3_events *ev; /* gets EV_FINISHED when fn returns (may be NULL) */
    int rc;
    char err[1024]; /* fn's message when rc != 0 */
    pthread_t th;
    bool live; /* started and not joined */
} c3_task;

/* Run fn(arg) on a new thread. COSMOS3_EFAIL when no thread can start. */
int task_start(c3_task *t, c3_task_fn fn, void *arg, c3_events *ev);
/* Wait for it (at once when it has finished) and return its status; a
 * failure's message is recorded on this thread (c3_errmsg). 0 when never
 * started. */
int task_join(c3_task *t);

#endif
