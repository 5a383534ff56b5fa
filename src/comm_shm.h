/* comm_shm.h - the shared-memory communicator between CPU rank threads.
 * One c3_comm_group holds the world and its TP, Ulysses and CFG
 * sub-communicators (see plan.h for the rank numbering). Collectives
 * rendezvous on a barrier; every rank reduces in rank order, so all ranks
 * get bit-identical results. comm_shm_abort wakes every waiter with an error
 * (a failed rank must never leave the others hanging). */
#ifndef COSMOS3_COMM_SHM_H
#define COSMOS3_COMM_SHM_H

#include "comm.h"
#include "plan.h"

typedef struct c3_comm_group c3_comm_group;

int comm_shm_create(const c3_plan *p, c3_comm_group **out);
void comm_shm_rank(c3_comm_group *g, int rank, c3_comm **world, c3_comm **tp, c3_comm **sp, c3_comm **cfg);
void comm_shm_abort(c3_comm_group *g);
void comm_shm_reset(c3_comm_group *g);
void comm_shm_destroy(c3_comm_group *g);

#endif
