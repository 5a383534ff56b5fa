/* loader.h - cosmos3_open's work: the checkpoint read and planned, then
 * beside each other the shards' prefault threads, the tokenizer's thread
 * and every rank's backend and communicators; then the ranks' weights (one
 * thread each, through the runtime) and the VAE. */
#ifndef COSMOS3_LOADER_H
#define COSMOS3_LOADER_H

#include <stdint.h>

#include "cosmos3.h"

/* Where cosmos3_open's time went (cosmos3_result's t_load*). The shard
 * prefault and the tokenizer run on threads of their own beside the
 * backends' creation, so the parts overlap and need not sum to total. */
typedef struct {
    double total;           /* cosmos3_open, start to end */
    double open_at;         /* c3_now() when it started */
    double read;            /* the checkpoint's headers parsed and its shards mapped + prefaulted */
    double backends;        /* backends (CUDA contexts, cuBLAS) and communicators */
    double weights;         /* every rank's weights converted and uploaded */
    double vae;             /* the VAE decoder's weights */
    double tokenizer;       /* the tokenizer (its own thread) */
    int64_t prefault_bytes; /* bytes prefaulted (0: COSMOS3_PREFAULT=0 or nothing mapped) */
} c3_load_times;

/* A loaded engine for op (checked first), or the error; nothing is left
 * allocated on failure. */
int loader_open(const cosmos3_open_params *op, cosmos3_engine **out);
/* Everything loader_open made (NULL: nothing). */
void loader_close(cosmos3_engine *e);

#endif
