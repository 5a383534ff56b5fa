/* comm.h - the communicator interface between ranks of one run.
 *
 * Implementations: shared memory between CPU threads (comm_shm.c), NCCL
 * (cuda/comm_nccl.cu) and device memory between ranks sharing one GPU.
 * Every call is collective over the communicator's ranks. Tensors live on
 * the calling rank's backend.
 */
#ifndef COSMOS3_COMM_H
#define COSMOS3_COMM_H

#include "backend.h"
#include "plan.h"

typedef struct c3_comm c3_comm;
struct c3_comm {
    int rank, size;
    const char *name; /* "tp", "cfg", "sp", "world" */
    void *ctx;
    /* t = sum over ranks of t (in place). */
    int (*allreduce_sum)(c3_comm *c, c3_tensor *t);
    /* out = concat over ranks (rank order) of in, along the flat element axis:
     * numel(out) = size * numel(in). */
    int (*allgather)(c3_comm *c, c3_tensor *out, const c3_tensor *in);
    /* in is split into `size` equal chunks; chunk j is sent to rank j; out is
     * the concat of the chunks received, in rank order. */
    int (*alltoall)(c3_comm *c, c3_tensor *out, const c3_tensor *in);
    int (*broadcast)(c3_comm *c, c3_tensor *t, int root);
    int (*barrier)(c3_comm *c);
    /* Host-memory all-gather of n floats per rank (the per-step CFG exchange
     * of predictions): out[size * n] in rank order. */
    int (*allgather_host)(c3_comm *c, float *out, const float *in, int64_t n);
    void (*destroy)(c3_comm *c);
};

/* All communicators of one run, whatever carries them: per rank its world,
 * TP, Ulysses (sp) and CFG communicator (plan.h's rank numbering). The
 * runtime (runtime.c) holds one and never asks which kind it is. */
typedef struct c3_comm_set c3_comm_set;
struct c3_comm_set {
    const char *kind; /* "shm", "nccl" or "device" */
    int world;
    /* which: 0 world, 1 tp, 2 sp (Ulysses), 3 cfg */
    c3_comm *(*get)(c3_comm_set *s, int rank, int which);
    /* Wake or stop every rank waiting in a collective (a rank failed). */
    void (*abort)(c3_comm_set *s);
    /* Make the set usable again after an abort (before the next run). */
    int (*reset)(c3_comm_set *s);
    void (*destroy)(c3_comm_set *s);
};

/* The implementations. Shared memory between CPU rank threads (comm_shm.c):
 * collectives rendezvous on a barrier, every rank reduces in rank order, so
 * all ranks get bit-identical results; an abort wakes every waiter with an
 * error. NCCL over distinct GPUs (cuda/comm_nccl.cu) and device memory
 * between ranks that may share a GPU (cuda/comm_dev.cu): bes[r] is rank r's
 * CUDA backend (its device and stream), r < p->world; builds without CUDA
 * get stubs that fail with the fix (no_cuda.c). */
int comm_shm_create(const c3_plan *p, c3_comm_set **out);
int comm_nccl_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out);
int comm_dev_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out);
/* NCCL over the ranks [lo, lo + n) of this process when the world spans
 * several: share_id hands process 0's ncclUniqueId to every process
 * (comm_procs_share_id), then each rank joins with ncclCommInitRank. */
int comm_nccl_create_procs(const c3_plan *p, int lo, int n, c3_backend *const *bes,
                           int (*share_id)(void *buf, size_t n), c3_comm_set **out);

/* The processes of a run: one (rank 0 of 1), or those a launcher started
 * (mpirun, srun: MPI is initialised here, once). Ranks are dealt to them in
 * contiguous blocks of world / size, so with the plan's numbering a CFG
 * group is outermost and Ulysses innermost. */
typedef struct {
    int rank, size;
    bool mpi;                   /* MPI runs the collectives between processes */
    char host[64];              /* this process's host (COSMOS3_HOSTNAME stands in for it) */
    int local_rank, local_size; /* this process among those on its host */
    const char *from;           /* what said so: "mpi", "torchrun env" or "one process" */
} c3_procs;
int comm_procs(c3_procs *out);
/* Tell the other processes this one failed (or, cancelled, was stopped)
 * before it exits (MPI: they are stopped instead of waiting in a collective;
 * after a cancel without a failure they are told it was no loss); nothing
 * for one process. */
void comm_procs_failed(bool cancelled);
/* GPU ids (c3_gpu_id) of n ranks per process, rank r's at ids[r]: two ranks
 * of different processes on one GPU (NCCL cannot join them, and each would
 * plan the whole GPU's memory as its own) are refused, naming the ranks,
 * processes, host and the fix; ranks of one process may share one (the
 * device-memory communicator). */
#define C3_GPU_ID 96
int comm_devices_check(int world, int n, const char (*ids)[C3_GPU_ID],
                       const char *(*host)(int proc));
/* Ranks in several processes on GPUs: the ids of this process's ranks
 * [lo, lo + n) gathered from every process (MPI) and checked so. */
int comm_procs_devices(const c3_plan *p, int lo, int n);

/* Whether every process reached this call within timeout seconds (MPI: a
 * polled barrier); true for one process. */
bool comm_procs_together(double timeout);
/* Process proc's host ("?" when unknown: without MPI, another process's). */
const char *comm_procs_host(int proc);
/* n bytes of process 0's buf to every process (nothing for one process);
 * called by each process's main thread. */
int comm_procs_bcast(void *buf, size_t n);
/* n bytes of every process in process order (out[size * n]); in may be
 * this process's own block of out. */
int comm_procs_allgather(const void *in, void *out, size_t n);
/* The same for NCCL's unique id: MPI's broadcast when MPI launched the
 * processes, else the MASTER_ADDR:MASTER_PORT exchange (comm_boot.c). */
int comm_procs_share_id(void *buf, size_t n);

/* The CPU ranks [lo, lo + n) of this process over MPI between processes:
 * each group (TP, Ulysses, CFG) lies in this process (shared memory) or
 * has one member in each of its processes (an MPI communicator); any other
 * layout is refused, naming the fix. comm_mpi.c; without MPI a stub that
 * says how to build it. */
int comm_mpi_create(const c3_plan *p, int lo, int n, c3_comm_set **out);
/* Whether plan p on procs->size processes fits (before anything loads):
 * the world divides into the processes and every group is local or one
 * member per process. */
int comm_mpi_check(const c3_plan *p, const c3_procs *procs);
/* Unless p->cross_host: every TP and Ulysses group inside one host, with n
 * ranks in each of nprocs processes and host(proc) each one's host ("?"
 * unknown: not checked); refused naming the group, the hosts and the fix. */
int comm_hosts_check(const c3_plan *p, int n, int nprocs, const char *(*host)(int proc));

/* Without MPI (a launcher's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT):
 * process 0's n bytes (NCCL's unique id) to every process of size over TCP,
 * process 0 listening on addr:port; fails naming the fix after timeout
 * seconds (comm_boot.c). */
int comm_boot_exchange(const char *addr, int port, int rank, int size, void *buf, size_t n,
                       double timeout);

/* The processes' watch (comm_watch.c): one TCP link from each process to
 * process 0 beside MPI / NCCL. A process that ends without a goodbye
 * (killed, crashed) is seen at once by process 0 (and process 0's end by
 * the others): fns.lost runs on the watch's thread with the one line that
 * names it. Process 0's watch_cancel reaches fns.cancel on every other
 * process; another process's watch_event reaches fns.event on process 0
 * (from = its number). share hands process 0's n bytes (where it listens)
 * to every process (MPI's broadcast; a stand-in in tests). */
typedef struct c3_watch c3_watch;
typedef struct {
    void (*lost)(void *ud, int proc, const char *line);
    void (*cancel)(void *ud);
    void (*event)(void *ud, int from, const void *buf, size_t n);
    void *ud;
    /* process 0: the run's cancel flag, looked at ten times a second; when
     * it turns on, fns.cancel runs here and on every other process */
    const volatile int *cancel_flag;
} c3_watch_fns;
int watch_open(c3_watch **out, int rank, int size, double timeout,
               int (*share)(void *buf, size_t n, void *ud), void *ud);
/* The callbacks (fns NULL: kept; all NULL: none, and none runs after this
 * returns) and each process's host for the line (hosts NULL: kept); a loss
 * seen before is told to the new fns.lost at once. */
void watch_set(c3_watch *w, const c3_watch_fns *fns, char (*hosts)[64]);
void watch_cancel(c3_watch *w);
void watch_event(c3_watch *w, const void *buf, size_t n);
/* The line naming a lost process (its number in *proc), or NULL. */
const char *watch_lost(const c3_watch *w, int *proc);
/* bye: the others see an orderly end, not a loss. */
void watch_close(c3_watch *w, bool bye);

/* fn(line, user) once, when the watch sees a process end mid-run (before
 * the run is stopped: the front end may say it at once). */
void comm_procs_on_lost(void (*fn)(const char *line, void *user), void *user);
/* The watch's fns.lost that tells it (a runtime's calls it too). */
void comm_procs_lost(void *ud, int proc, const char *line);

/* The run's watch over its processes (NULL for one process or without
 * MPI): comm_mpi.c opens it with MPI, closes it at exit. */
c3_watch *comm_procs_watch(void);

/* Which communicator the ranks of a run use: none for one rank; shared
 * memory for CPU ranks (comm_shm.c); NCCL for CUDA ranks on distinct GPUs
 * (cuda/comm_nccl.cu); device memory when CUDA ranks share a GPU, which NCCL
 * refuses (cuda/comm_dev.cu). devices[r]: rank r's GPU. */
typedef enum {
    C3_COMM_NONE,
    C3_COMM_SHM,
    C3_COMM_NCCL,
    C3_COMM_DEVICE,
    C3_COMM_MPI /* ranks in several processes (comm_mpi.c) */
} c3_comm_kind;
c3_comm_kind comm_choose(bool cuda, int world, const int *devices);
const char *comm_kind_name(c3_comm_kind k);

#endif
