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

/* Which communicator the ranks of a run use: none for one rank; shared
 * memory for CPU ranks (comm_shm.c); NCCL for CUDA ranks on distinct GPUs
 * (cuda/comm_nccl.cu); device memory when CUDA ranks share a GPU, which NCCL
 * refuses (cuda/comm_dev.cu). devices[r]: rank r's GPU. */
typedef enum { C3_COMM_NONE, C3_COMM_SHM, C3_COMM_NCCL, C3_COMM_DEVICE } c3_comm_kind;
c3_comm_kind comm_choose(bool cuda, int world, const int *devices);
const char *comm_kind_name(c3_comm_kind k);

#endif
