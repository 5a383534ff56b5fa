/* monitor.c - events to the state the front ends draw (monitor.h). */
#include "monitor.h"

#include <stdio.h>
#include <sys/resource.h>
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
    monitor_host_memory(&d->dev_total, &d->dev_free);
    d->driver_valid = d->dev_total > 0;
}

void monitor_poll(c3_monitor *m) {
    for (int k = 0; k < m->nranks; k++)
        if (m->dev[k].valid) poll_dev(m, &m->dev[k]);
}

void monitor_event(c3_monitor *m, c3_event *x) {
    if (x->kind != EV_ENGINE) return;
    cosmos3_event *ev = &x->ev;
    switch (ev->kind) {
    case COSMOS3_EV_LOADED:
    case COSMOS3_EV_MEMORY:
        if (ev->rank >= 0 && ev->rank < COSMOS3_MAX_RANKS) {
            c3_mon_dev *d = &m->dev[ev->rank];
            d->valid = true;
            d->device = ev->device;
            d->bytes[0] = ev->mem_weights;
            d->bytes[1] = ev->mem_kv;
            d->bytes[2] = ev->mem_act;
            if (ev->dev_total > 0) { /* the engine's figure (the plan's, at open) */
                d->driver_valid = true;
                d->dev_total = ev->dev_total;
                d->dev_free = ev->dev_free;
            }
            if (ev->kind == COSMOS3_EV_LOADED)
                snprintf(d->name, sizeof d->name, "%.63s", ev->text ? ev->text : "");
            if (ev->kind == COSMOS3_EV_MEMORY && m->cuda) { /* a GPU's memory now */
                poll_dev(m, d);
                ev->dev_free = d->dev_free;
                ev->dev_total = d->dev_total;
            }
            if (ev->rank + 1 > m->nranks) m->nranks = ev->rank + 1;
        }
        break;
    case COSMOS3_EV_STAGE: /* the denoising loop begins: its first step */
        if (ev->begin && ev->stage && !strcmp(ev->stage, "denoise")) {
            m->steps = ev->steps;
            m->t_first_step = c3_now();
        }
        break;
    case COSMOS3_EV_BRANCH:
        if (ev->branch == 1) m->uncond_last = ev->seconds;
        if (ev->step >= 1 && ev->step <= MONITOR_MAX_STEPS) {
            c3_mon_step *s = &m->st[ev->step];
            if (ev->branch == 0) {
                s->cond_s = ev->seconds;
                s->cond_group = ev->group;
            } else {
                s->uncond_s = ev->seconds;
                s->uncond_group = ev->group;
            }
        }
        break;
    case COSMOS3_EV_STEP:
        if (m->cfg_parallel == 2) ev->uncond_s = m->uncond_last;
        m->step = ev->step;
        m->steps = ev->steps;
        if (ev->step >= 1 && ev->step <= MONITOR_MAX_STEPS) {
            c3_mon_step *s = &m->st[ev->step];
            s->seconds = ev->seconds;
            if (ev->cond_s > 0) s->cond_s = ev->cond_s;
            if (ev->uncond_s > 0) s->uncond_s = ev->uncond_s;
        }
        m->steps_total++;
        m->step_s += ev->seconds;
        m->cond_s += ev->cond_s;
        m->uncond_s += ev->uncond_s;
        m->last_step_s = ev->seconds;
        break;
    default:
        break;
    }
}

void monitor_host_memory(int64_t *total, int64_t *avail) {
    *total = (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    *avail = (int64_t)sysconf(_SC_AVPHYS_PAGES) * sysconf(_SC_PAGESIZE);
}

double monitor_cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}
