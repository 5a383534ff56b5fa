/* comm_cuda.h - communicators between GPU ranks, seen from C.
 *
 * Two implementations of comm.h for ranks whose tensors live in device memory:
 *   comm_nccl.cu  NCCL: ncclCommInitAll over the ranks' devices (all distinct:
 *                 NCCL refuses two ranks on one device), split into the TP,
 *                 Ulysses and CFG groups with plan.h's rank numbering.
 *   comm_dev.cu   device memory: a host rendezvous (like comm_shm) plus
 *                 stream-ordered peer copies; ranks may share a device, and
 *                 any mix of devices works.
 * Both queue their work on each rank's backend stream (ordered after the ops
 * that produced the data) and reduce in rank order, so every rank gets the
 * same result. Plain C declarations: no CUDA header crosses into src/.
 * Builds without CUDA get stubs (src/no_cuda.c) that fail with the fix. */
#ifndef COSMOS3_COMM_CUDA_H
#define COSMOS3_COMM_CUDA_H

#include "backend.h"
#include "comm.h"
#include "plan.h"

/* All communicators of one run: per rank its world, tp, sp and cfg comm. */
typedef struct c3_comm_set c3_comm_set;
struct c3_comm_set {
    const char *kind; /* "nccl" or "device" */
    int world;
    /* which: 0 world, 1 tp, 2 sp (Ulysses), 3 cfg */
    c3_comm *(*get)(c3_comm_set *s, int rank, int which);
    /* Wake or stop every rank waiting in a collective (a rank failed). */
    void (*abort)(c3_comm_set *s);
    /* Make the set usable again after an abort (before the next run). */
    int (*reset)(c3_comm_set *s);
    void (*destroy)(c3_comm_set *s);
};

/* bes[r]: rank r's CUDA backend (its device and stream), r < p->world. */
int comm_nccl_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out);
int comm_dev_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out);

#endif
