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

/* Which communicator the ranks of a run use: none for one rank; shared
 * memory for CPU ranks (comm_shm.c); NCCL for CUDA ranks on distinct GPUs
 * (cuda/comm_nccl.cu); device memory when CUDA ranks share a GPU, which NCCL
 * refuses (cuda/comm_dev.cu). devices[r]: rank r's GPU. */
typedef enum { C3_COMM_NONE, C3_COMM_SHM, C3_COMM_NCCL, C3_COMM_DEVICE } c3_comm_kind;
c3_comm_kind comm_choose(bool cuda, int world, const int *devices);
const char *comm_kind_name(c3_comm_kind k);

#endif
