/* monitor.h - the engine's progress events turned into the state every front
 * end draws: the progress line (gen, the REPL), the REPL's `mem` and `steps`,
 * the TUI's panels and serve's /metrics.
 *
 * Feed it every event popped from the queue (monitor_event); it keeps the
 * memory of each rank's device (our accounting from the engine, the
 * driver's free and total), the run's steps with their branch times, and
 * the totals since the start. It is the one place that asks the driver for
 * a device's memory (cosmos3_device_memory): on each memory event of a GPU
 * rank, and when a front end that draws without events asks
 * (monitor_poll: the TUI's clock). Not thread-safe: one owner, the thread
 * that pops the events (or under the owner's lock). */
#ifndef COSMOS3_MONITOR_H
#define COSMOS3_MONITOR_H

#include "events.h"

#define MONITOR_MAX_STEPS 1000 /* step timings kept per run (the --steps limit) */

/* One denoising step as the front ends show it. */
typedef struct {
    double seconds, cond_s, uncond_s, combine_s;
    int cond_group, uncond_group; /* rank group that ran the branch (-1: not run) */
} c3_mon_step;

/* Memory of one rank's device: our accounting and the driver's view. Each
 * part has a valid bit: missing data shows as N/A, not as a wrong number. */
typedef struct {
    bool valid, driver_valid;
    int device;
    char name[64];
    int64_t bytes[3]; /* weights, K/V cache, activations (our accounting) */
    int64_t dev_total, dev_free;
} c3_mon_dev;

typedef struct {
    bool cuda;        /* the ranks run on GPUs: poll the driver (else the host's memory) */
    int cfg_parallel; /* 2: the uncond time of a step is its branch event's */
    /* devices, per rank */
    int nranks;
    c3_mon_dev dev[COSMOS3_MAX_RANKS];
    /* the run in flight (or the last one) */
    int step, steps;
    double t_first_step;                   /* c3_now() when its first step began */
    c3_mon_step st[MONITOR_MAX_STEPS + 1]; /* 1-based */
    double uncond_last;                    /* the last uncond branch's seconds */
    /* totals since monitor_init */
    uint64_t steps_total;
    double step_s, cond_s, uncond_s, last_step_s;
} c3_monitor;

void monitor_init(c3_monitor *m);
/* A new engine (its layout): the devices are forgotten. */
void monitor_engine(c3_monitor *m, const cosmos3_layout *layout);
/* A new run of `steps` steps: its step table is cleared. */
void monitor_run(c3_monitor *m, int steps);
/* Apply one event (the engine's; the others pass by). For COSMOS3_EV_STEP,
 * x->ev.uncond_s is set to the step's uncond seconds as drawn (the branch
 * event's with --cfg-parallel 2); for COSMOS3_EV_MEMORY on GPUs, dev_free
 * and dev_total to the driver's now. */
void monitor_event(c3_monitor *m, c3_event *x);
/* Refresh the driver's (or, on the CPU, the host's) free and total memory of
 * every known rank. */
void monitor_poll(c3_monitor *m);
/* The host's memory now, bytes: total and available (the CPU's "device"). */
void monitor_host_memory(int64_t *total, int64_t *avail);
/* This process's CPU time so far (user + system), seconds. */
double monitor_cpu_seconds(void);

#endif
