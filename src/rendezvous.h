/* rendezvous.h - the host side of the thread communicators (comm_shm.c for
 * host tensors, cuda/comm_dev.cu for device tensors): one rendezvous per
 * communicator of a run, the world and its TP, Ulysses and CFG groups
 * (plan.h's rank numbering). Member ranks publish a pointer in their slot,
 * meet at a barrier, copy from each other's slots between begin_read and
 * end_read, and meet again. An abort wakes every waiter with C3_ECANCEL; an
 * aborting rank leaves only after the peers' copies from its slot are done
 * (its caller frees the buffer once it returns). */
#ifndef COSMOS3_RENDEZVOUS_H
#define COSMOS3_RENDEZVOUS_H

#include <pthread.h>

#include "common.h"
#include "plan.h"

typedef struct c3_rdv c3_rdv;
struct c3_rdv {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, count;
    unsigned gen;
    const void **slot; /* [size] published pointers */
    int readers;       /* ranks copying from the slots right now */
    volatile int *aborted;
    /* what an aborting rank also waits for, with mu held (the device
     * copies of comm_dev), or NULL; ud is the communicator's */
    void (*drain)(c3_rdv *r);
    void *ud;
};

/* The rendezvous of a plan, in one array: [0] the world, then cfg*sp TP
 * groups, cfg*tp Ulysses groups and tp*sp CFG groups; one abort flag. */
#define RDV_NCOMM 4 /* per rank: world, tp, sp, cfg (c3_comm_set.get order) */
typedef struct {
    c3_rdv *r;
    int n;
    volatile int aborted;
} c3_rdv_set;

void rdv_set_init(c3_rdv_set *s, const c3_plan *p);
/* Rank r's rendezvous in world, tp, sp, cfg order, its rank and the size in each. */
void rdv_set_rank(c3_rdv_set *s, const c3_plan *p, int r, c3_rdv *blk[RDV_NCOMM],
                  int rank[RDV_NCOMM], int size[RDV_NCOMM]);
/* Wake every waiter (a rank failed); reset makes the set usable again. */
void rdv_set_abort(c3_rdv_set *s);
void rdv_set_reset(c3_rdv_set *s);
void rdv_set_free(c3_rdv_set *s);

int rdv_barrier(c3_rdv *r);
/* Bracket copies from the peers' slots (between two barriers). */
int rdv_begin_read(c3_rdv *r);
void rdv_end_read(c3_rdv *r);
/* Host memory: out [size * b] = every member's in [b], in rank order. */
int rdv_allgather_bytes(c3_rdv *r, int rank, void *out, const void *in, size_t b);

#endif
