/* forward.h - ranks in several processes serve one request stream: process
 * 0's cosmos3_generate sends each request to the other processes first
 * (MPI broadcast), and they run it too (cosmos3_follow); cosmos3_close on
 * process 0 tells them to stop. Nothing for one process. */
#ifndef COSMOS3_FORWARD_H
#define COSMOS3_FORWARD_H

#include "cosmos3.h"

/* A request received: its pointers point into mem. */
typedef struct {
    cosmos3_request rq;
    cosmos3_frames image, video;
    void *mem;
} c3_forwarded;

/* Process 0: rq to every other process (no-op elsewhere or for one process). */
int forward_send(const cosmos3_request *rq);
/* Process 0: no more requests. */
int forward_stop(void);
/* The other processes: the next request, or *stop. */
int forward_recv(c3_forwarded *f, bool *stop);
void forward_free(c3_forwarded *f);

#endif
