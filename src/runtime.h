/* runtime.h - the rank runtime of a run, below the engine (engine.c,
 * loader.c) and the denoising loop (denoise.c): the plan's ranks, one
 * thread each; their communicators (one c3_comm_set, whatever carries it);
 * cancel, abort and reset; and the one event emitter, serialised, with the
 * job id filled in. Nothing here knows the checkpoint, the tokenizer or the
 * VAE. */
#ifndef COSMOS3_RUNTIME_H
#define COSMOS3_RUNTIME_H

#include <pthread.h>

#include "comm.h"
#include "cosmos3.h"
#include "model.h"
#include "plan.h"

/* The most requests one batch runs (cosmos3_generate_batch), and the UND
 * caches a rank holds during it (two branches each). */
#define C3_BATCH_MAX 16
#define C3_UND_SLOTS (2 * C3_BATCH_MAX)

typedef struct {
    int rank;
    c3_backend *be;
    c3_model *model;
    c3_comm *tp, *sp, *cfg, *world;
    c3_shard shard;
    pthread_t thread;
    int rc;
    char err[1024];
    /* UND K/V caches and the ids each was computed from: a request with
     * the same ids (the same negative prompt, a repeated prompt) reuses
     * one, and with it the GEN graphs recorded over it. A run holds one per
     * distinct prompt of its requests; after it only the first request's
     * (two at most) are kept (denoise.c). */
    c3_undkv und[C3_UND_SLOTS];
    int32_t *und_ids[C3_UND_SLOTS];
    uint64_t und_used[C3_UND_SLOTS]; /* the run (und_run) that last used the slot */
    uint64_t und_run;
} c3_rank;

typedef struct c3_runtime c3_runtime;
struct c3_runtime {
    c3_plan plan;
    c3_procs procs;              /* the processes of the run (one unless a launcher started more) */
    int lo, nlocal;              /* this process's ranks: [lo, lo + nlocal) of the plan's world */
    c3_rank ranks[C3_MAX_RANKS]; /* [lo, lo + nlocal) in use */
    c3_comm_kind comm;           /* which communicator the ranks use */
    c3_comm_set *set;            /* NULL for one rank */
    volatile int cancel;
    /* events: the open's callback, the job's (one at a time, under ev_mu) */
    pthread_mutex_t ev_mu;
    cosmos3_event_fn open_fn, job_fn;
    void *open_user, *job_user;
    uint64_t job, next_job;
    int threads; /* CPU threads of each rank's parallel loops (0: OpenMP's default) */
};

/* An empty runtime whose events go to fn (the open's callback). */
void rt_init(c3_runtime *rt, cosmos3_event_fn fn, void *user);
/* The ranks' UND caches, models, communicators and backends, in that order
 * (the communicators use the backends' streams). */
void rt_free(c3_runtime *rt);

/* This process's ranks of the plan: all of them for one process (pr NULL
 * or of size 1), else the block of world / pr->size ranks of pr->rank. */
void rt_place(c3_runtime *rt, const c3_procs *pr);
/* The first of this process's ranks (its results and rank 0's events). */
static inline c3_rank *rt_lead(c3_runtime *rt) {
    return &rt->ranks[rt->lo];
}

/* The communicators of this process's ranks, once each has its backend:
 * fills each rank's world, tp, sp and cfg. */
int rt_comms_open(c3_runtime *rt);
/* Wake every rank waiting in a collective (a rank failed or was cancelled);
 * reset makes the communicators usable again before the next run. */
void rt_abort(c3_runtime *rt);
int rt_reset(c3_runtime *rt);
/* Ranks in several processes: the line naming a process that ended
 * mid-run (the processes' watch), or NULL. */
const char *rt_lost(const c3_runtime *rt);

/* Run fn(rt, rank, ud) on every rank of this process, one thread each, and join them: the
 * one place the ranks' threads start and carry their errors back. A failing
 * rank stops the others (cancel, communicators aborted); the first real
 * failure wins over the cancellations it caused, its message prefixed with
 * "rank N: " when prefix is set. */
int rt_run_ranks(c3_runtime *rt, int (*fn)(c3_runtime *rt, c3_rank *rk, void *ud), void *ud,
                 bool prefix);

/* A job's events go to fn (NULL: the open's callback) under a new job id,
 * until rt_job_end; returns the id. */
uint64_t rt_job_begin(c3_runtime *rt, cosmos3_event_fn fn, void *user);
void rt_job_end(c3_runtime *rt);
/* A batch's jobs: a new id (no events go to it yet), and the job whose
 * events rt_emit sends from now (fn NULL: the open's callback). */
uint64_t rt_job_new(c3_runtime *rt);
void rt_job_set(c3_runtime *rt, uint64_t job, cosmos3_event_fn fn, void *user);
/* Send one event to the job's callback (job id filled in); serialised. */
void rt_emit(c3_runtime *rt, cosmos3_event *ev);
/* The same to a given job of a batch (job 0: as rt_emit); fn NULL: the
 * open's callback. */
void rt_emit_to(c3_runtime *rt, uint64_t job, cosmos3_event_fn fn, void *user, cosmos3_event *ev);
/* The same with kind and text. */
void rt_emitf(c3_runtime *rt, cosmos3_event_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A stage's begin or end (seconds: its time, at the end). */
void rt_emit_stage(c3_runtime *rt, const char *stage, bool begin, double seconds);

/* Tests only: the rank that fails on purpose at step 2 (-1: none). */
extern int c3_inject_fail_rank;

#endif
