/* test_monitor.c - app/monitor.c: the events of a run become the state the
 * front ends draw. A made-up two-rank run: the step table with its branch
 * times and groups, the cfg-parallel 2 rule (a step's uncond time is its
 * branch event's), the totals across runs, memory per rank with the valid
 * bits, a new run clearing the table, a new engine forgetting the devices,
 * and the CPU poll reading the host's memory. */
#include <unistd.h>

#include "monitor.h"
#include "test_util.h"

/* The engine's event of kind k as the session queues it. */
static c3_event ev(cosmos3_event_kind k) {
    return (c3_event){.kind = EV_ENGINE, .ev = {.kind = k}};
}

int main(void) {
    c3_monitor *m = xmalloc(sizeof *m);
    monitor_init(m);
    cosmos3_layout lay = {.cfg_parallel = 2, .world = 2};
    snprintf(lay.device, sizeof lay.device, "cpu");
    monitor_engine(m, &lay);
    T_CHECK(!m->cuda && m->cfg_parallel == 2 && m->nranks == 0, "engine: cuda %d cfgp %d", m->cuda,
            m->cfg_parallel);
    T_CHECK(m->st[1].cond_group == -1 && m->st[1].uncond_group == -1, "branches not run: -1");

    /* loading: rank 1 reports first, with the plan's device figures */
    c3_event x = ev(COSMOS3_EV_LOADED);
    x.ev.rank = 1;
    x.ev.device = 0;
    x.ev.mem_weights = 1000;
    x.ev.dev_total = 8000;
    x.ev.dev_free = 5000;
    snprintf(x.text, sizeof x.text, "cpu");
    x.ev.text = x.text;
    monitor_event(m, &x);
    T_CHECK(m->nranks == 2 && m->dev[1].valid && !m->dev[0].valid, "ranks %d, valid %d %d",
            m->nranks, m->dev[1].valid, m->dev[0].valid);
    T_CHECK(m->dev[1].driver_valid && m->dev[1].dev_total == 8000 && m->dev[1].dev_free == 5000 &&
                !strcmp(m->dev[1].name, "cpu") && m->dev[1].bytes[0] == 1000,
            "rank 1 memory");
    x = ev(COSMOS3_EV_MEMORY); /* no driver figure: the last one stays */
    x.ev.rank = 1;
    x.ev.mem_weights = 1000;
    x.ev.mem_act = 77;
    monitor_event(m, &x);
    T_CHECK(m->dev[1].bytes[2] == 77 && m->dev[1].dev_free == 5000,
            "memory event: act %lld free %lld", (long long)m->dev[1].bytes[2],
            (long long)m->dev[1].dev_free);

    /* a run of 3 steps: cond on group 0, uncond on group 1 (cfg-parallel 2) */
    monitor_run(m, 3);
    double t0 = c3_now();
    for (int i = 1; i <= 3; i++) {
        if (i == 1) { /* the denoising loop begins: its first step */
            x = ev(COSMOS3_EV_STAGE);
            x.ev.stage = "denoise";
            x.ev.begin = true;
            monitor_event(m, &x);
        }
        for (int b = 0; b < 2; b++) { /* cond on group 0 (0.25 i s), uncond on group 1 (0.5 i s) */
            x = (c3_event){.kind = EV_ENGINE,
                           .ev = {.kind = COSMOS3_EV_BRANCH,
                                  .step = i,
                                  .branch = b,
                                  .group = b,
                                  .seconds = (b ? 0.5 : 0.25) * i}};
            monitor_event(m, &x);
        }
        x = ev(COSMOS3_EV_STEP);
        x.ev.step = i;
        x.ev.steps = 3;
        x.ev.seconds = 1.0 * i;
        x.ev.cond_s = 0.25 * i;
        x.ev.uncond_s = 0; /* rank 0 does not see the other group's time */
        monitor_event(m, &x);
        T_CHECK(x.ev.uncond_s == 0.5 * i, "step %d: uncond as drawn %g, want %g", i, x.ev.uncond_s,
                0.5 * i);
    }
    T_CHECK(m->t_first_step >= t0 && m->t_first_step <= c3_now(), "first step's start");
    T_CHECK(m->step == 3 && m->steps == 3, "step %d of %d", m->step, m->steps);
    T_CHECK(m->st[2].seconds == 2.0 && m->st[2].cond_s == 0.5 && m->st[2].uncond_s == 1.0 &&
                m->st[2].cond_group == 0 && m->st[2].uncond_group == 1,
            "step 2: %g %g %g groups %d %d", m->st[2].seconds, m->st[2].cond_s, m->st[2].uncond_s,
            m->st[2].cond_group, m->st[2].uncond_group);
    T_CHECK(m->steps_total == 3 && m->step_s == 6.0 && m->cond_s == 1.5 && m->uncond_s == 3.0 &&
                m->last_step_s == 3.0,
            "totals: %llu steps, %g s, cond %g, uncond %g, last %g",
            (unsigned long long)m->steps_total, m->step_s, m->cond_s, m->uncond_s, m->last_step_s);

    /* a second run: the table is cleared, the totals go on */
    monitor_run(m, 5);
    T_CHECK(m->step == 0 && m->steps == 5 && m->st[2].seconds == 0 && m->st[2].uncond_group == -1,
            "new run: step %d steps %d", m->step, m->steps);
    T_CHECK(m->steps_total == 3, "totals kept: %llu", (unsigned long long)m->steps_total);

    /* the CPU poll: the host's memory */
    monitor_poll(m);
    long pages = sysconf(_SC_PHYS_PAGES);
    T_CHECK(
        m->dev[1].driver_valid && m->dev[1].dev_total == (int64_t)pages * sysconf(_SC_PAGESIZE) &&
            m->dev[1].dev_free > 0 && m->dev[1].dev_free <= m->dev[1].dev_total,
        "host memory: %lld of %lld", (long long)m->dev[1].dev_free, (long long)m->dev[1].dev_total);
    T_CHECK(!m->dev[0].driver_valid, "rank 0 never reported: still N/A");

    /* a new engine forgets the devices */
    lay.cfg_parallel = 1;
    monitor_engine(m, &lay);
    T_CHECK(m->nranks == 0 && !m->dev[1].valid && m->cfg_parallel == 1, "engine reset");
    x = ev(COSMOS3_EV_STEP); /* cfg-parallel 1: the event's own uncond time */
    x.ev.step = 1;
    x.ev.steps = 1;
    x.ev.uncond_s = 0.125;
    monitor_event(m, &x);
    T_CHECK(x.ev.uncond_s == 0.125, "cfg-parallel 1 keeps the event's uncond %g", x.ev.uncond_s);
    free(m);
    return t_done("monitor");
}
