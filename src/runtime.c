/* runtime.c - the ranks' threads, their communicators, cancel / abort /
 * reset and the event emitter (runtime.h). */
#include "runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_cpu.h"
#include "env.h"

void rt_init(c3_runtime *rt, cosmos3_event_fn fn, void *user) {
    memset(rt, 0, sizeof *rt);
    pthread_mutex_init(&rt->ev_mu, NULL);
    rt->open_fn = fn;
    rt->open_user = user;
}

void rt_free(c3_runtime *rt) {
    if (rt->procs.size > 1) /* the watch's callbacks point here */
        watch_set(comm_procs_watch(), &(c3_watch_fns){.lost = comm_procs_lost}, NULL);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        for (int b = 0; b < C3_UND_SLOTS; b++) {
            undkv_free(&rt->ranks[r].und[b]);
            free(rt->ranks[r].und_ids[b]);
        }
    for (int r = 0; r < C3_MAX_RANKS; r++)
        model_free(rt->ranks[r].model);
    /* communicators use the backends' streams: they go first */
    if (rt->set) rt->set->destroy(rt->set);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        if (rt->ranks[r].be) c3_backend_destroy(rt->ranks[r].be);
    pthread_mutex_destroy(&rt->ev_mu);
}

void rt_place(c3_runtime *rt, const c3_procs *pr) {
    if (pr)
        rt->procs = *pr;
    else
        rt->procs = (c3_procs){.rank = 0, .size = 1, .local_size = 1, .from = "one process"};
    int size = rt->procs.size > 1 ? rt->procs.size : 1;
    rt->nlocal = rt->plan.world / size;
    rt->lo = rt->procs.rank * rt->nlocal;
}

/* ------------------------------------------------------------- events */

uint64_t rt_job_new(c3_runtime *rt) {
    pthread_mutex_lock(&rt->ev_mu);
    uint64_t job = ++rt->next_job;
    pthread_mutex_unlock(&rt->ev_mu);
    return job;
}

void rt_job_set(c3_runtime *rt, uint64_t job, cosmos3_event_fn fn, void *user) {
    pthread_mutex_lock(&rt->ev_mu);
    rt->job = job;
    rt->job_fn = fn ? fn : rt->open_fn;
    rt->job_user = fn ? user : rt->open_user;
    pthread_mutex_unlock(&rt->ev_mu);
}

void rt_emit_to(c3_runtime *rt, uint64_t job, cosmos3_event_fn fn, void *user, cosmos3_event *ev) {
    if (!job) {
        rt_emit(rt, ev);
        return;
    }
    pthread_mutex_lock(&rt->ev_mu);
    ev->job = job;
    if (!fn) {
        fn = rt->open_fn;
        user = rt->open_user;
    }
    if (fn) fn(ev, user);
    pthread_mutex_unlock(&rt->ev_mu);
}

uint64_t rt_job_begin(c3_runtime *rt, cosmos3_event_fn fn, void *user) {
    pthread_mutex_lock(&rt->ev_mu);
    uint64_t job = rt->job = ++rt->next_job;
    rt->job_fn = fn ? fn : rt->open_fn;
    rt->job_user = fn ? user : rt->open_user;
    pthread_mutex_unlock(&rt->ev_mu);
    return job;
}

void rt_job_end(c3_runtime *rt) {
    pthread_mutex_lock(&rt->ev_mu);
    rt->job = 0;
    pthread_mutex_unlock(&rt->ev_mu);
}

/* A rank's own event on a process other than 0 also goes to process 0
 * (its memory, its branch timings): the struct without its pointers, then
 * the text. */
static void forward_event(c3_runtime *rt, const cosmos3_event *ev) {
    c3_watch *w = rt->procs.size > 1 && rt->procs.rank != 0 ? comm_procs_watch() : NULL;
    if (!w || (ev->kind != COSMOS3_EV_LOADED && ev->kind != COSMOS3_EV_MEMORY &&
               ev->kind != COSMOS3_EV_BRANCH))
        return;
    char buf[sizeof *ev + 256];
    cosmos3_event flat = *ev;
    flat.stage = flat.text = NULL;
    memcpy(buf, &flat, sizeof flat);
    size_t n = sizeof flat;
    if (ev->text) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", ev->text) + 1;
    watch_event(w, buf, C3_MIN(n, sizeof buf));
}

/* process 0: another process's event, emitted here as its ranks' own */
static void on_peer_event(void *ud, int from, const void *buf, size_t n) {
    c3_runtime *rt = ud;
    (void)from;
    if (n < sizeof(cosmos3_event)) return;
    cosmos3_event ev;
    memcpy(&ev, buf, sizeof ev);
    char text[256] = "";
    if (n > sizeof ev)
        snprintf(text, sizeof text, "%.*s", (int)(n - sizeof ev), (const char *)buf + sizeof ev);
    ev.stage = NULL;
    ev.text = n > sizeof ev ? text : NULL;
    if (ev.rank < 0 || ev.rank >= rt->plan.world) return;
    rt_emit(rt, &ev);
}

/* a process was lost, or process 0 cancelled: every rank here stops */
static void on_peer_stop(void *ud) {
    c3_runtime *rt = ud;
    rt->cancel = 1;
    rt_abort(rt);
}

static void on_peer_lost(void *ud, int proc, const char *line) {
    comm_procs_lost(NULL, proc, line); /* the front end may say it at once */
    on_peer_stop(ud);
}

const char *rt_lost(const c3_runtime *rt) {
    return rt->procs.size > 1 ? watch_lost(comm_procs_watch(), NULL) : NULL;
}

void rt_emit(c3_runtime *rt, cosmos3_event *ev) {
    forward_event(rt, ev);
    pthread_mutex_lock(&rt->ev_mu);
    ev->job = rt->job;
    cosmos3_event_fn fn = rt->job ? rt->job_fn : rt->open_fn;
    void *user = rt->job ? rt->job_user : rt->open_user;
    if (fn) fn(ev, user);
    pthread_mutex_unlock(&rt->ev_mu);
}

void rt_emitf(c3_runtime *rt, cosmos3_event_kind kind, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cosmos3_event ev = {.kind = kind, .text = text};
    rt_emit(rt, &ev);
}

void rt_emit_stage(c3_runtime *rt, const char *stage, bool begin, double seconds) {
    cosmos3_event ev = {
        .kind = COSMOS3_EV_STAGE, .stage = stage, .begin = begin, .seconds = seconds};
    rt_emit(rt, &ev);
}

/* ------------------------------------------------------------- comms */

int rt_comms_open(c3_runtime *rt) {
    const c3_plan *p = &rt->plan;
    /* the other processes' events and stops, before any collective lets them run ahead */
    c3_watch *w = rt->procs.size > 1 ? comm_procs_watch() : NULL;
    if (w) {
        c3_watch_fns fns = {.lost = on_peer_lost,
                            .cancel = on_peer_stop,
                            .event = on_peer_event,
                            .ud = rt,
                            .cancel_flag = &rt->cancel};
        watch_set(w, &fns, NULL);
    }
    if (rt->procs.size > 1 && p->cuda) { /* ranks in several processes: NCCL joined by rank */
        rt->comm = C3_COMM_NCCL;
        c3_backend *bes[C3_MAX_RANKS] = {0};
        for (int r = rt->lo; r < rt->lo + rt->nlocal; r++)
            bes[r] = rt->ranks[r].be;
        C3_TRY(comm_nccl_create_procs(p, rt->lo, rt->nlocal, bes, comm_procs_share_id, &rt->set));
    } else if (rt->procs.size > 1) { /* on the CPU: MPI between them */
        rt->comm = C3_COMM_MPI;
        C3_TRY(comm_mpi_create(p, rt->lo, rt->nlocal, &rt->set));
    } else {
        rt->comm = comm_choose(p->cuda, p->world, p->devices);
        /* COSMOS3_COMM=device: the device-memory communicator on distinct GPUs too */
        const char *force = c3_env()->comm;
        if (rt->comm == C3_COMM_NCCL && force && !strcmp(force, "device"))
            rt->comm = C3_COMM_DEVICE;
        c3_backend *bes[C3_MAX_RANKS];
        for (int r = 0; r < p->world; r++)
            bes[r] = rt->ranks[r].be;
        if (rt->comm == C3_COMM_SHM) C3_TRY(comm_shm_create(p, &rt->set));
        if (rt->comm == C3_COMM_NCCL) C3_TRY(comm_nccl_create(p, bes, &rt->set));
        if (rt->comm == C3_COMM_DEVICE) C3_TRY(comm_dev_create(p, bes, &rt->set));
    }
    if (!rt->set) return C3_OK;
    for (int r = rt->lo; r < rt->lo + rt->nlocal; r++) {
        c3_rank *rk = &rt->ranks[r];
        rk->world = rt->set->get(rt->set, r, 0);
        rk->tp = rt->set->get(rt->set, r, 1);
        rk->sp = rt->set->get(rt->set, r, 2);
        rk->cfg = rt->set->get(rt->set, r, 3);
    }
    return C3_OK;
}

void rt_abort(c3_runtime *rt) {
    if (rt->set) rt->set->abort(rt->set);
}

int rt_reset(c3_runtime *rt) {
    const char *lost = rt_lost(rt);
    if (lost) return c3_fail(C3_EFAIL, "%s", lost);
    return rt->set ? rt->set->reset(rt->set) : C3_OK;
}

/* ------------------------------------------------------------- threads */

typedef struct {
    c3_runtime *rt;
    c3_rank *rk;
    int (*fn)(c3_runtime *, c3_rank *, void *);
    void *ud;
} rank_thread;

static void *rank_main(void *arg) {
    rank_thread *a = arg;
    /* the engine's thread count holds on its own threads (OpenMP's setting is per thread):
       engines of one process (serve --replicas) divide the cores */
    cpu_set_threads(a->rt->threads);
    a->rk->rc = a->fn(a->rt, a->rk, a->ud);
    if (a->rk->rc) {
        snprintf(a->rk->err, sizeof a->rk->err, "%s", c3_errmsg());
        /* a failing rank stops the others: they see cancel between layers,
         * and the communicator is aborted so no one waits forever */
        a->rt->cancel = 1;
        rt_abort(a->rt);
        /* other processes: stopped at exit (a cancel too: a process may
           still wait in a collective this one left, e.g. a Ctrl-C that
           reached process 0 before its watch could tell the others) */
        comm_procs_failed(a->rk->rc == C3_ECANCEL);
    }
    return NULL;
}

int rt_run_ranks(c3_runtime *rt, int (*fn)(c3_runtime *rt, c3_rank *rk, void *ud), void *ud,
                 bool prefix) {
    const c3_plan *p = &rt->plan;
    int lo = rt->lo, hi = rt->lo + rt->nlocal;
    rank_thread args[C3_MAX_RANKS];
    for (int r = lo; r < hi; r++) {
        args[r] = (rank_thread){rt, &rt->ranks[r], fn, ud};
        rt->ranks[r].rc = 0;
        if (pthread_create(&rt->ranks[r].thread, NULL, rank_main, &args[r]) != 0) {
            rt->cancel = 1;
            rt_abort(rt);
            for (int q = lo; q < r; q++)
                pthread_join(rt->ranks[q].thread, NULL);
            return c3_fail(C3_EFAIL, "cannot start rank thread %d", r);
        }
    }
    for (int r = lo; r < hi; r++)
        pthread_join(rt->ranks[r].thread, NULL);
    for (int pass = 0; pass < 2; pass++)
        for (int r = lo; r < hi; r++) {
            const c3_rank *rk = &rt->ranks[r];
            if (rk->rc && (pass == 1 || rk->rc != C3_ECANCEL))
                return prefix && p->world > 1 ? c3_fail(rk->rc, "rank %d: %s", r, rk->err)
                                              : c3_fail(rk->rc, "%s", rk->err);
        }
    return C3_OK;
}
