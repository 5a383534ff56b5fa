/* engine.h - the engine behind cosmos3.h (internal): a loaded model on its
 * ranks, the job in flight and the one event emitter.
 *
 *   prompt --tokenizer + chat template (prompt.c)--> ids (cond, uncond)
 *     --UND tower, once per branch (denoise.c)--> per-layer K/V cache
 *   noise --GEN tower x steps, CFG combine, sampler step (denoise.c)--> latents
 *     --Wan2.2 VAE decode (wan_vae.c)--> pixels --frames.c--> uint8 RGB
 */
#ifndef COSMOS3_ENGINE_H
#define COSMOS3_ENGINE_H

#include <pthread.h>

#include "audio_vae.h"
#include "checkpoint.h"
#include "comm.h"
#include "comm_shm.h"
#include "cosmos3.h"
#include "cuda/comm_cuda.h"
#include "model.h"
#include "plan.h"
#include "tokenizer.h"
#include "wan_vae.h"
#include "wan_vae_encode.h"

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

typedef struct {
    int rank;
    c3_backend *be;
    c3_model *model;
    c3_comm *tp, *sp, *cfg, *world;
    c3_shard shard;
    pthread_t thread;
    int rc;
    char err[1024];
    /* the last UND K/V of each branch and the ids it was computed from: a
     * request with the same ids (the same negative prompt, a repeated
     * prompt) reuses it, and with it the GEN graphs recorded over it */
    c3_undkv und[2];
    int32_t *und_ids[2];
} c3_rank;

struct cosmos3_engine {
    c3_ckpt ck;
    c3_tokenizer *tok;
    c3_plan plan;
    c3_rank ranks[C3_MAX_RANKS];
    c3_comm_kind comm;     /* which communicator the ranks use */
    c3_comm_group *groups; /* C3_COMM_SHM */
    c3_comm_set *set;      /* C3_COMM_NCCL, C3_COMM_DEVICE */
    c3_vae *vae;
    c3_vae_enc *venc; /* the VAE encoder, loaded by the first conditioned request */
    c3_audio_vae *avae; /* the sound decoder, loaded by the first sound request */
    volatile int cancel;
    int precision;    /* C3_PREC_* (model.h) */
    bool attn_fp8;    /* --attention fp8 (every rank's backend: attn_fp8) */
    bool attn_warned; /* the FP8 attention's decline warned (once per engine) */
    int busy;         /* a generation is in flight (atomic) */
    /* events: the open's callback, the job's (one at a time, under ev_mu) */
    pthread_mutex_t ev_mu;
    cosmos3_event_fn open_fn, job_fn;
    void *open_user, *job_user;
    uint64_t job, next_job;
    /* the load's phases (cosmos3_open), seconds; copied into every result */
    c3_load_times load;
    /* the warnings of the job in flight (to the result) */
    char **warnings;
    int nwarnings;
};

/* Send one event to the job's callback (job id filled in); serialised. */
/* The public structs from a checkpoint / a plan (also for cosmos3_checkpoint_*). */
void engine_model_info(const c3_ckpt *ck, cosmos3_model_info *out);
void engine_plan_layout(const c3_plan *p, cosmos3_layout *out);
char *engine_plan_text(const c3_plan *p); /* xmalloc'd */
void engine_emit(cosmos3_engine *e, cosmos3_event *ev);
/* The same with kind and text. */
void engine_emitf(cosmos3_engine *e, cosmos3_event_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Wake every rank waiting in a collective (a rank failed or was cancelled). */
void engine_comms_abort(cosmos3_engine *e);
int engine_comms_reset(cosmos3_engine *e);

/* Run fn(e, rank, ud) on every rank, one thread each, and join them: the
 * one place the ranks' threads start and carry their errors back. A failing
 * rank stops the others (cancel, communicators aborted); the first real
 * failure wins over the cancellations it caused, its message prefixed with
 * "rank N: " when prefix is set. */
int engine_run_ranks(cosmos3_engine *e, int (*fn)(cosmos3_engine *e, c3_rank *rk, void *ud),
                     void *ud, bool prefix);

/* Tests only: the rank that fails on purpose at step 2 (-1: none). */
extern int c3_inject_fail_rank;

/* The internal view for the library's own tools (bench, tests). */
const c3_ckpt *engine_ckpt_of(const cosmos3_engine *e);
const c3_plan *engine_plan_of(const cosmos3_engine *e);

#endif
