/* task.c - a call on a thread with its error carried back (task.h). */
#include "task.h"

#include <stdio.h>

static void *task_main(void *arg) {
    c3_task *t = arg;
    t->rc = t->fn(t->arg);
    if (t->rc) snprintf(t->err, sizeof t->err, "%s", c3_errmsg());
    c3_event x = {.kind = EV_FINISHED};
    events_push(t->ev, &x);
    return NULL;
}

int task_start(c3_task *t, c3_task_fn fn, void *arg, c3_events *ev) {
    *t = (c3_task){.fn = fn, .arg = arg, .ev = ev};
    if (pthread_create(&t->th, NULL, task_main, t) != 0)
        return c3_fail(COSMOS3_EFAIL, "cannot start a thread: %s", strerror(errno));
    t->live = true;
    return COSMOS3_OK;
}

int task_join(c3_task *t) {
    if (!t->live) return t->rc;
    pthread_join(t->th, NULL);
    t->live = false;
    if (t->rc) c3_fail(t->rc, "%s", t->err);
    return t->rc;
}
