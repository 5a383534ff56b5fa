/* monitor.c - events to the state the front ends draw (monitor.h). */
#include "monitor.h"

#include <stdio.h>
#include <unistd.h>

void monitor_init(c3_monitor *m) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i <= MONITOR_MAX_STEPS; i++)
        m->st[i].cond_group = m->st[i].uncond_group = -1;
}

void monitor_engine(c3_monitor *m, const cosmos3_layout *layout) {
    m->nranks = 0;
    memset(m->dev, 0, sizeof m->dev);
    m->cuda = layout && !strcmp(layout->device, "cuda");
    m->cfg_parallel = layout ? layout->cfg_parallel : 1;
}

void monitor_run(c3_monitor *m, int steps) {
    m->step = 0;
    m->steps = steps;
    m->steps_cached = 0;
    memset(m->st, 0, sizeof m->st);
    for (int i = 0; i <= MONITOR_MAX_STEPS; i++)
        m->st[i].cond_group = m->st[i].uncond_group = -1;
}

/* The driver's view of one rank's device: a GPU's free memory now (the one
 * poll), or the host's memory for a CPU rank. */
static void poll_dev(const c3_monitor *m, c3_mon_dev *d) {
    if (m->cuda) {
        int64_t fr, tot;
        if (cosmos3_device_memory(d->device, &fr, &tot) == COSMOS3_OK) {
            d->dev_total = tot;
            d->dev_free = fr;
            d->driver_valid = true;
        }
        return;
    }
    d->dev_total = (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    d->dev_free = (int64_t)sysconf(_SC_AVPHYS_PAGES) * sysconf(_SC_PAGESIZE);
    d->driver_valid = d->dev_total > 0;
}

void monitor_poll(c3_monitor *m) {
    for (int k = 0; k < m->nranks; k++)
        if (m->dev[k].valid) poll_dev(m, &m->dev[k]);
}

void monitor_event(c3_monitor *m, c3_event *x) {
    switch (x->kind) {
    case EV_LOADED:
    case EV_MEMORY:
        if (x->rank >= 0 && x->rank < COSMOS3_MAX_RANKS) {
            c3_mon_dev *d = &m->dev[x->rank];
            d->valid = true;
            d->device = x->device;
            for (int c = 0; c < 3; c++)
                d->bytes[c] = x->bytes[c];
            if (x->dev_total > 0) { /* the engine's figure (the plan's, at open) */
                d->driver_valid = true;
                d->dev_total = x->dev_total;
                d->dev_free = x->dev_free;
            }
            if (x->kind == EV_LOADED) snprintf(d->name, sizeof d->name, "%.63s", x->text);
            if (x->kind == EV_MEMORY && m->cuda) { /* a GPU's memory now */
                poll_dev(m, d);
                x->dev_free = d->dev_free;
                x->dev_total = d->dev_total;
            }
            if (x->rank + 1 > m->nranks) m->nranks = x->rank + 1;
        }
        break;
    case EV_STEP_BEGIN:
        m->steps = x->steps;
        if (x->step == 1) m->t_first_step = c3_now();
        break;
    case EV_BRANCH:
        if (x->branch == 1) m->uncond_last = x->seconds;
        if (x->step >= 1 && x->step <= MONITOR_MAX_STEPS) {
            c3_mon_step *s = &m->st[x->step];
            if (x->branch == 0) {
                s->cond_s = x->seconds;
                s->cond_group = x->group;
            } else {
                s->uncond_s = x->seconds;
                s->uncond_group = x->group;
            }
        }
        break;
    case EV_STEP_END:
        if (m->cfg_parallel == 2) x->uncond_s = m->uncond_last;
        m->step = x->step;
        m->steps = x->steps;
        if (x->step >= 1 && x->step <= MONITOR_MAX_STEPS) {
            c3_mon_step *s = &m->st[x->step];
            s->seconds = x->seconds;
            s->combine_s = x->combine_s;
            s->cached = x->cached;
            if (x->cond_s > 0) s->cond_s = x->cond_s;
            if (x->uncond_s > 0) s->uncond_s = x->uncond_s;
        }
        m->steps_total++;
        m->steps_cached += x->cached;
        m->step_s += x->seconds;
        m->cond_s += x->cond_s;
        m->uncond_s += x->uncond_s;
        m->last_step_s = x->seconds;
        break;
    default:
        break;
    }
}
