/* comm_mpi.c - the processes of a run (comm.h's c3_procs) and the CPU
 * communicators between them: Open MPI (or any MPI) for the groups that
 * span processes, the shared-memory communicator (comm_shm.c) for the
 * groups inside one. Every MPI call goes through MPI_TRY. Collectives are
 * non-blocking calls polled with the abort flag and a timeout, so a failed
 * or vanished peer never leaves a rank waiting forever; a reduction
 * gathers and sums in rank order, as comm_shm does, so every rank of every
 * process gets the same bits as the threads would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "env.h"
#include "config.h"

/* ------------------------------------------------------------- layout */

/* Rank r's group of kind `which` (0 world, 1 tp, 2 sp, 3 cfg): its first
 * member, the stride between members and their count (plan.h's numbering). */
static void group_of(const c3_plan *p, int r, int which, int *first, int *stride, int *size) {
    switch (which) {
    case 1:
        *stride = p->sp, *size = p->tp;
        *first = r - plan_tp_rank(p, r) * p->sp;
        return;
    case 2:
        *stride = 1, *size = p->sp;
        *first = r - plan_sp_rank(p, r);
        return;
    case 3:
        *stride = p->sp * p->tp, *size = p->cfg;
        *first = r - plan_cfg_rank(p, r) * p->sp * p->tp;
        return;
    default:
        *first = 0, *stride = 1, *size = p->world;
    }
}

typedef enum { G_LOCAL, G_SPREAD, G_MIXED } g_kind;

/* Inside one process's block of n ranks, one member in each of its
 * processes (at the same thread index), or neither. */
static g_kind group_kind(const c3_plan *p, int r, int which, int n) {
    int first, stride, size;
    group_of(p, r, which, &first, &stride, &size);
    if (first / n == (first + (size - 1) * stride) / n) return G_LOCAL;
    if (stride % n == 0) return G_SPREAD;
    return G_MIXED;
}

int comm_hosts_check(const c3_plan *p, int n, int nprocs, const char *(*host)(int proc)) {
    if (p->cross_host || nprocs <= 1) return C3_OK;
    static const char *const flags[] = {"world", "tp", "ulysses"};
    for (int r = 0; r < p->world; r++)
        for (int k = 1; k <= 2; k++) { /* TP, then Ulysses: their members on r's host */
            int first, stride, size;
            group_of(p, r, k, &first, &stride, &size);
            const char *h0 = host(first / n);
            for (int m = 1; m < size; m++) {
                int q = first + m * stride;
                const char *h = host(q / n);
                if (strcmp(h, "?") && strcmp(h0, "?") && strcmp(h, h0))
                    return c3_fail(
                        C3_EUSAGE,
                        "the --%s group of ranks %d and %d would span hosts %s and %s (its "
                        "exchange runs every layer); lower --%s, use more GPUs per host "
                        "(--cfg-parallel crosses hosts once per step), or pass "
                        "--allow-cross-host",
                        flags[k], first, q, h0, h, flags[k]);
            }
        }
    return C3_OK;
}

int comm_mpi_check(const c3_plan *p, const c3_procs *pr) {
    int rpp = p->ranks_per_process, np = pr->size > 1 ? pr->size : 1;
    if (rpp < 0) return c3_fail(C3_EUSAGE, "--ranks-per-process %d must be 0 (all) or more", rpp);
    if (rpp && rpp * np != p->world) {
        char fix[96];
        if (p->world % rpp)
            snprintf(fix, sizeof fix, "give --ranks-per-process a divisor of %d", p->world);
        else
            snprintf(fix, sizeof fix, "start %d processes (mpirun -np %d)", p->world / rpp,
                     p->world / rpp);
        return c3_fail(C3_EUSAGE,
                       "--ranks-per-process %d on %d process%s makes %d ranks, but the layout "
                       "(tp %d x cfg-parallel %d x ulysses %d) has %d; %s or change the layout",
                       rpp, np, np == 1 ? "" : "es", rpp * np, p->tp, p->cfg, p->sp, p->world, fix);
    }
    if (pr->size <= 1) return C3_OK;
    if (!pr->mpi && !p->cuda)
        return c3_fail(C3_EUSAGE,
                       "%s started %d processes, but ranks in several processes on the CPU need "
                       "MPI; launch with mpirun or srun (this cosmos3 %s MPI)",
                       pr->from, pr->size, COSMOS3_HAVE_MPI ? "has" : "was built without");
    if (p->world % pr->size)
        return c3_fail(C3_EUSAGE,
                       "the layout's world of %d ranks (tp %d x cfg-parallel %d x ulysses %d) does "
                       "not divide into the %d processes the launcher started; start %d processes "
                       "(mpirun -np %d) or change the layout",
                       p->world, p->tp, p->cfg, p->sp, pr->size, p->world, p->world);
    int n = p->world / pr->size;
    C3_TRY(comm_hosts_check(p, n, pr->size, comm_procs_host));
    if (p->cuda) return C3_OK; /* NCCL joins any group shape across processes */
    static const char *const names[] = {"world", "tp", "ulysses", "cfg-parallel"};
    for (int r = 0; r < p->world; r++)
        for (int k = 1; k < 4; k++)
            if (group_kind(p, r, k, n) == G_MIXED)
                return c3_fail(C3_EUSAGE,
                               "with %d ranks in each of %d processes a --%s group would have "
                               "several members in some processes and span others; use one rank "
                               "per process (mpirun -np %d) or keep --%s inside one process",
                               n, pr->size, names[k], p->world, names[k]);
    return C3_OK;
}

/* Without MPI: this process among those of its host, as the launcher says
 * (torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE), else alone on it. */
static void launcher_local(c3_procs *pr) {
    const char *lr = getenv("LOCAL_RANK"), *ls = getenv("LOCAL_WORLD_SIZE");
    pr->local_rank = lr ? atoi(lr) : 0;
    pr->local_size = ls && atoi(ls) > 0 ? atoi(ls) : 1;
}

/* This process's host name for the layout (COSMOS3_HOSTNAME stands in for
 * it in tests). */
static void procs_hostname(char *out, size_t n) {
    const char *h = c3_env()->hostname;
    if (h)
        snprintf(out, n, "%s", h);
    else if (gethostname(out, n - 1))
        snprintf(out, n, "?");
}

int comm_devices_check(int world, int n, const char (*ids)[C3_GPU_ID],
                       const char *(*host)(int proc)) {
    for (int a = 0; a < world; a++)
        for (int b = a + 1; b < world; b++)
            if (a / n != b / n && ids[a][0] && strcmp(ids[a], "?") && !strcmp(ids[a], ids[b]))
                return c3_fail(C3_EUSAGE,
                               "ranks %d (process %d) and %d (process %d) on host %s are both "
                               "given GPU %s; give each process its own GPUs (one "
                               "CUDA_VISIBLE_DEVICES per process, srun --gpus-per-task, or "
                               "--ranks-per-process with all of a host's GPUs)",
                               a, a / n, b, b / n, host(a / n), ids[a]);
    return C3_OK;
}

int comm_procs_devices(const c3_plan *p, int lo, int n) {
    c3_procs pr;
    C3_TRY(comm_procs(&pr));
    if (!p->cuda || pr.size <= 1 || !pr.mpi) return C3_OK; /* without MPI NCCL refuses it */
    char(*ids)[C3_GPU_ID] = xcalloc((size_t)p->world, C3_GPU_ID);
    for (int r = lo; r < lo + n; r++)
        (void)c3_gpu_id(p->devices[r], ids[r], C3_GPU_ID); /* "?" when unknown: not checked */
    int rc = comm_procs_allgather(ids[lo], ids, (size_t)n * C3_GPU_ID);
    if (rc == C3_OK)
        rc = comm_devices_check(p->world, n, (const char(*)[C3_GPU_ID])ids, comm_procs_host);
    free(ids);
    return rc;
}

int comm_procs_share_id(void *buf, size_t n) {
    c3_procs pr;
    C3_TRY(comm_procs(&pr));
    if (pr.size <= 1) return C3_OK;
    if (pr.mpi) return comm_procs_bcast(buf, n);
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    return comm_boot_exchange(addr, port ? atoi(port) : 0, pr.rank, pr.size, buf, n,
                              c3_env()->comm_timeout);
}

#if COSMOS3_HAVE_MPI

#include <limits.h>
#include <mpi.h>

/* The one check for MPI calls: the MPI error's text in the message. */
#define MPI_TRY(call)                                                                              \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) {                                                              \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                   \
            int mpi_len_ = 0;                                                                      \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                        \
            return c3_fail(C3_EFAIL, "MPI: %s: %.*s", #call, mpi_len_, mpi_msg_);                  \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------- processes */

static c3_procs g_procs;
static bool g_done, g_failed, g_cancel_only;
static char (*g_hosts)[64]; /* [size]: every process's host */

const char *comm_procs_host(int proc) {
    return g_hosts && proc >= 0 && proc < g_procs.size ? g_hosts[proc]
           : proc == g_procs.rank                      ? g_procs.host
                                                       : "?";
}

static c3_watch *g_watch;
static void (*g_lost_fn)(const char *line, void *user);
static void *g_lost_user;

c3_watch *comm_procs_watch(void) {
    return g_watch;
}

static int g_lost_told;

void comm_procs_lost(void *ud, int proc, const char *line) {
    (void)ud, (void)proc;
    void (*fn)(const char *, void *) = __atomic_load_n(&g_lost_fn, __ATOMIC_ACQUIRE);
    if (fn && !__atomic_exchange_n(&g_lost_told, 1, __ATOMIC_ACQ_REL)) fn(line, g_lost_user);
}

void comm_procs_on_lost(void (*fn)(const char *line, void *user), void *user) {
    g_lost_user = user;
    __atomic_store_n(&g_lost_fn, fn, __ATOMIC_RELEASE);
    const char *lost = watch_lost(g_watch, NULL);
    if (lost) comm_procs_lost(NULL, 0, lost); /* seen already */
}

static void procs_exit(void) {
    int fin = 1;
    MPI_Finalized(&fin);
    if (fin) return;
    /* a lost process: MPI's finalize would wait for it and its abort adds
     * lines of its own; the launcher (or the others' watch) ends the rest */
    bool lost = watch_lost(g_watch, NULL) != NULL;
    watch_close(g_watch, (!g_failed || g_cancel_only) && !lost); /* a cancel: no loss */
    g_watch = NULL;
    if (lost) return;
    /* a failed process stops the others (they may wait in a collective) */
    if (g_failed)
        MPI_Abort(MPI_COMM_WORLD, 1);
    else
        MPI_Finalize();
}

static int share_bcast(void *buf, size_t n, void *ud) {
    (void)ud;
    return comm_procs_bcast(buf, n);
}

void comm_procs_failed(bool cancelled) {
    /* a cancel stops the others from process 0 alone (it prints the line;
       another process's abort could end it before that) */
    if (cancelled && g_procs.rank != 0) return;
    g_cancel_only = cancelled && (g_cancel_only || !g_failed);
    g_failed = g_procs.mpi && g_procs.size > 1;
}

static bool launched_by_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < C3_ARRAY_LEN(vars); i++)
        if (getenv(vars[i])) return true;
    const char *n = getenv("SLURM_NTASKS");
    return getenv("SLURM_PROCID") && n && atoi(n) > 1;
}

static int procs_init(void) {
    g_procs = (c3_procs){.rank = 0, .size = 1, .local_size = 1, .from = "one process"};
    procs_hostname(g_procs.host, sizeof g_procs.host);
    const char *ws = getenv("WORLD_SIZE"), *rk = getenv("RANK");
    if (!launched_by_mpi()) {
        if (ws && atoi(ws) > 1)
            g_procs = (c3_procs){.rank = rk ? atoi(rk) : 0,
                                 .size = atoi(ws),
                                 .from = "the launcher (RANK/WORLD_SIZE)"};
        procs_hostname(g_procs.host, sizeof g_procs.host);
        launcher_local(&g_procs);
        return C3_OK;
    }
    int init = 0, level = 0;
    MPI_TRY(MPI_Initialized(&init));
    if (!init) MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level));
    atexit(procs_exit);
    MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (!init && level < MPI_THREAD_MULTIPLE)
        return c3_fail(C3_ERESOURCE,
                       "this MPI gives thread level %d; cosmos3's rank threads need "
                       "MPI_THREAD_MULTIPLE (Open MPI from Debian has it)",
                       level);
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &g_procs.rank));
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &g_procs.size));
    /* every process's host, for the layout text */
    g_hosts = xcalloc((size_t)g_procs.size, sizeof g_procs.host);
    MPI_TRY(MPI_Allgather(g_procs.host, (int)sizeof g_procs.host, MPI_CHAR, g_hosts,
                          (int)sizeof g_procs.host, MPI_CHAR, MPI_COMM_WORLD));
    g_procs.mpi = true;
    g_procs.from = "mpi";
    /* this process among those of its host (its GPUs start after theirs) */
    g_procs.local_rank = 0, g_procs.local_size = 0;
    for (int q = 0; q < g_procs.size; q++)
        if (!strcmp(g_hosts[q], g_procs.host)) {
            g_procs.local_rank += q < g_procs.rank;
            g_procs.local_size++;
        }
    /* the watch over the processes: a killed one is named at once */
    C3_TRY(watch_open(&g_watch, g_procs.rank, g_procs.size, c3_env()->comm_timeout, share_bcast,
                      NULL));
    c3_watch_fns fns = {.lost = comm_procs_lost};
    watch_set(g_watch, &fns, g_hosts);
    return C3_OK;
}

int comm_procs(c3_procs *out) {
    static int rc;
    static char msg[1024];
    if (!g_done) { /* once: MPI starts once per process */
        g_done = true;
        rc = procs_init();
        if (rc) snprintf(msg, sizeof msg, "%s", c3_errmsg());
    }
    *out = g_procs;
    return rc ? c3_fail(rc, "%s", msg) : C3_OK;
}

bool comm_procs_together(double timeout) {
    if (!g_done || !g_procs.mpi || g_procs.size <= 1) return true;
    MPI_Request rq;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &rq) != MPI_SUCCESS) return false;
    double t0 = c3_now();
    for (;;) {
        int done = 0;
        if (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
        if (done) return true;
        if (c3_now() - t0 > timeout || watch_lost(g_watch, NULL)) {
            g_failed = true; /* the barrier stays pending: no finalize */
            return false;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int comm_procs_allgather(const void *in, void *out, size_t n) {
    if (!g_procs.mpi || g_procs.size <= 1) {
        memmove(out, in, n);
        return C3_OK;
    }
    if (n > (size_t)INT_MAX) return c3_fail(C3_EFAIL, "MPI all-gather: %zu bytes", n);
    /* in may lie inside out (its own block): MPI_IN_PLACE then */
    const char *o = out;
    bool inside = (const char *)in == o + (size_t)g_procs.rank * n;
    MPI_TRY(MPI_Allgather(inside ? MPI_IN_PLACE : in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE,
                          MPI_COMM_WORLD));
    return C3_OK;
}

int comm_procs_bcast(void *buf, size_t n) {
    if (!g_procs.mpi || g_procs.size <= 1) return C3_OK;
    if (n > (size_t)INT_MAX) return c3_fail(C3_EFAIL, "MPI broadcast: %zu bytes", n);
    MPI_TRY(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    return C3_OK;
}

/* ------------------------------------------------------------- collectives */

typedef struct mpi_set mpi_set;
typedef struct {
    c3_comm pub;
    MPI_Comm mc;
    mpi_set *set;
} mpi_comm;

struct mpi_set {
    c3_comm_set pub;
    c3_comm_set *shm; /* the groups inside this process */
    int lo, n;
    mpi_comm *comms; /* [n * 4]: world, tp, sp, cfg of each local rank */
    bool *spread;    /* [n * 4]: that group spans processes */
    volatile int aborted;
    volatile int broken; /* a collective was left pending: the set cannot run again */
    double timeout;      /* seconds a collective waits for the other processes */
};

/* Wait for one collective, polling the abort flag and the timeout. */
static int mpi_wait(mpi_comm *m, MPI_Request *rq, const char *what) {
    mpi_set *s = m->set;
    double t0 = c3_now();
    for (unsigned spin = 0;; spin++) {
        int done = 0;
        MPI_TRY(MPI_Test(rq, &done, MPI_STATUS_IGNORE));
        if (done) return C3_OK;
        const char *lost = watch_lost(comm_procs_watch(), NULL);
        if (lost) {
            s->broken = 1;
            return c3_fail(C3_EFAIL, "%s", lost);
        }
        if (s->aborted) {
            s->broken = 1;
            return c3_fail(C3_ECANCEL, "cancelled");
        }
        if (c3_now() - t0 > s->timeout) {
            s->broken = 1;
            comm_procs_failed(false);
            return c3_fail(C3_EFAIL,
                           "MPI %s over the %s group: no answer from the other processes in %.0f "
                           "s (a process died or hangs); set COSMOS3_COMM_TIMEOUT for slower runs",
                           what, m->pub.name, s->timeout);
        }
        if (spin > 64) { /* the others are still computing: give the cores back */
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

static int count_of(size_t b, const char *what, int *out) {
    if (b > (size_t)INT_MAX)
        return c3_fail(C3_EFAIL, "MPI %s: %zu bytes exceed one call's count", what, b);
    *out = (int)b;
    return C3_OK;
}

static size_t bytes_of(const c3_tensor *t) {
    return (size_t)c3_numel(t) * c3_dtype_size(t->dtype);
}

static int gather_bytes(c3_comm *c, void *out, const void *in, size_t b, const char *what) {
    mpi_comm *m = (mpi_comm *)c;
    int n = 0;
    C3_TRY(count_of(b, what, &n));
    MPI_Request rq;
    MPI_TRY(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, m->mc, &rq));
    return mpi_wait(m, &rq, what);
}

static int mpi_allreduce(c3_comm *c, c3_tensor *t) {
    if (t->dtype != C3_F32) return c3_fail(C3_EFAIL, "MPI all-reduce: only F32 tensors");
    int64_t n = c3_numel(t);
    float *all = xmalloc((size_t)n * (size_t)c->size * sizeof(float)); /* [size, n] */
    int rc = gather_bytes(c, all, t->data, (size_t)n * sizeof(float), "all-reduce");
    if (rc == C3_OK) { /* in rank order, as comm_shm sums */
        float *acc = t->data;
        memcpy(acc, all, (size_t)n * sizeof(float));
        for (int r = 1; r < c->size; r++) {
            const float *src = all + (size_t)r * (size_t)n;
            for (int64_t i = 0; i < n; i++)
                acc[i] += src[i];
        }
    }
    free(all);
    return rc;
}

static int mpi_allgather(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    if (bytes_of(out) != bytes_of(in) * (size_t)c->size)
        return c3_fail(C3_EFAIL, "MPI all-gather: output holds %zu bytes, need %zu", bytes_of(out),
                       bytes_of(in) * (size_t)c->size);
    return gather_bytes(c, out->data, in->data, bytes_of(in), "all-gather");
}

static int mpi_allgather_host(c3_comm *c, float *out, const float *in, int64_t n) {
    return gather_bytes(c, out, in, (size_t)n * sizeof(float), "all-gather");
}

static int mpi_alltoall(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    mpi_comm *m = (mpi_comm *)c;
    size_t b = bytes_of(in);
    if (b % (size_t)c->size || bytes_of(out) != b)
        return c3_fail(C3_EFAIL, "MPI all-to-all: %zu bytes do not split into %d equal chunks", b,
                       c->size);
    int n = 0;
    C3_TRY(count_of(b / (size_t)c->size, "all-to-all", &n));
    MPI_Request rq;
    MPI_TRY(MPI_Ialltoall(in->data, n, MPI_BYTE, out->data, n, MPI_BYTE, m->mc, &rq));
    return mpi_wait(m, &rq, "all-to-all");
}

static int mpi_broadcast(c3_comm *c, c3_tensor *t, int root) {
    mpi_comm *m = (mpi_comm *)c;
    int n = 0;
    C3_TRY(count_of(bytes_of(t), "broadcast", &n));
    MPI_Request rq;
    MPI_TRY(MPI_Ibcast(t->data, n, MPI_BYTE, root, m->mc, &rq));
    return mpi_wait(m, &rq, "broadcast");
}

static int mpi_barrier(c3_comm *c) {
    mpi_comm *m = (mpi_comm *)c;
    MPI_Request rq;
    MPI_TRY(MPI_Ibarrier(m->mc, &rq));
    return mpi_wait(m, &rq, "barrier");
}

static void mpi_comm_destroy(c3_comm *c) {
    (void)c;
}

/* ------------------------------------------------------------- the set */

static c3_comm *set_get(c3_comm_set *ps, int rank, int which) {
    mpi_set *s = (mpi_set *)ps;
    int i = (rank - s->lo) * 4 + which;
    if (s->spread[i]) return &s->comms[i].pub;
    if (which == 0 && s->n > 1 && ps->world > s->n)
        return NULL; /* a world of threads and processes: unused */
    return s->shm->get(s->shm, rank, which);
}

static void set_abort(c3_comm_set *ps) {
    mpi_set *s = (mpi_set *)ps;
    s->aborted = 1;
    s->shm->abort(s->shm);
}

static int set_reset(c3_comm_set *ps) {
    mpi_set *s = (mpi_set *)ps;
    if (s->broken)
        return c3_fail(C3_EFAIL, "a failure stopped the processes' communicators mid-collective; "
                                 "start the run again");
    s->aborted = 0;
    return s->shm->reset(s->shm);
}

static void set_destroy(c3_comm_set *ps) {
    mpi_set *s = (mpi_set *)ps;
    if (!s) return;
    for (int i = 0; i < s->n * 4; i++)
        if (s->spread[i] && s->comms[i].mc != MPI_COMM_NULL) MPI_Comm_free(&s->comms[i].mc);
    if (s->shm) s->shm->destroy(s->shm);
    free(s->comms);
    free(s->spread);
    free(s);
}

static int set_split(mpi_set *s, const c3_plan *p) {
    static const char *const names[4] = {"world", "tp", "sp", "cfg"};
    /* the same calls in the same order on every process: thread index i,
     * then kind k; a group spanning processes is colored by its first member */
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < 4; k++) {
            int r = s->lo + i, first, stride, size;
            group_of(p, r, k, &first, &stride, &size);
            bool spread = group_kind(p, r, k, s->n) == G_SPREAD && size > 1;
            mpi_comm *m = &s->comms[i * 4 + k];
            m->mc = MPI_COMM_NULL;
            MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, spread ? first : MPI_UNDEFINED, r, &m->mc));
            if (!spread) continue;
            s->spread[i * 4 + k] = true;
            MPI_TRY(MPI_Comm_set_errhandler(m->mc, MPI_ERRORS_RETURN));
            int rank, sz;
            MPI_TRY(MPI_Comm_rank(m->mc, &rank));
            MPI_TRY(MPI_Comm_size(m->mc, &sz));
            m->set = s;
            m->pub = (c3_comm){.rank = rank,
                               .size = sz,
                               .name = names[k],
                               .ctx = m,
                               .allreduce_sum = mpi_allreduce,
                               .allgather = mpi_allgather,
                               .alltoall = mpi_alltoall,
                               .broadcast = mpi_broadcast,
                               .barrier = mpi_barrier,
                               .allgather_host = mpi_allgather_host,
                               .destroy = mpi_comm_destroy};
        }
    return C3_OK;
}

int comm_mpi_create(const c3_plan *p, int lo, int n, c3_comm_set **out) {
    *out = NULL;
    c3_procs pr;
    C3_TRY(comm_procs(&pr));
    C3_TRY(comm_mpi_check(p, &pr));
    mpi_set *s = xcalloc(1, sizeof *s);
    s->pub = (c3_comm_set){.kind = "mpi",
                           .world = p->world,
                           .get = set_get,
                           .abort = set_abort,
                           .reset = set_reset,
                           .destroy = set_destroy};
    s->lo = lo;
    s->n = n;
    s->timeout = c3_env()->comm_timeout;
    s->comms = xcalloc((size_t)n * 4, sizeof *s->comms);
    s->spread = xcalloc((size_t)n * 4, sizeof *s->spread);
    int rc = comm_shm_create(p, &s->shm);
    if (rc == C3_OK) rc = set_split(s, p);
    if (rc) {
        set_destroy(&s->pub);
        return rc;
    }
    *out = &s->pub;
    return C3_OK;
}

#else /* !COSMOS3_HAVE_MPI */

#define NO_MPI_FIX                                                                                 \
    "this cosmos3 was built without MPI; rebuild with -Dmpi=enabled (Debian: libopenmpi-dev)"

c3_watch *comm_procs_watch(void) {
    return NULL;
}

int comm_procs(c3_procs *out) {
    *out = (c3_procs){.rank = 0, .size = 1, .local_size = 1, .from = "one process"};
    procs_hostname(out->host, sizeof out->host);
    static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"};
    for (size_t i = 0; i < C3_ARRAY_LEN(size_vars); i++) {
        const char *v = getenv(size_vars[i]);
        if (v && atoi(v) > 1) {
            static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"};
            const char *rk = getenv(rank_vars[i]);
            out->rank = rk ? atoi(rk) : 0;
            out->size = atoi(v);
            out->from = i < 2 ? "the MPI launcher" : "the launcher (RANK/WORLD_SIZE)";
            launcher_local(out);
            return C3_OK;
        }
    }
    return C3_OK;
}

void comm_procs_failed(bool cancelled) {
    (void)cancelled;
}

bool comm_procs_together(double timeout) {
    (void)timeout;
    return true;
}

void comm_procs_on_lost(void (*fn)(const char *line, void *user), void *user) {
    (void)fn, (void)user;
}

void comm_procs_lost(void *ud, int proc, const char *line) {
    (void)ud, (void)proc, (void)line;
}

const char *comm_procs_host(int proc) {
    static char host[64];
    if (!host[0]) procs_hostname(host, sizeof host);
    return proc == 0 ? host : "?";
}

int comm_procs_bcast(void *buf, size_t n) {
    (void)buf, (void)n;
    return C3_OK;
}

int comm_procs_allgather(const void *in, void *out, size_t n) {
    memmove(out, in, n);
    return C3_OK;
}

int comm_mpi_create(const c3_plan *p, int lo, int n, c3_comm_set **out) {
    (void)p, (void)lo, (void)n;
    *out = NULL;
    return c3_fail(C3_EUSAGE, "ranks in several processes: " NO_MPI_FIX);
}

#endif
