/* engine.h - the engine behind cosmos3.h (internal): a loaded model on its
 * ranks (the runtime, runtime.h), loaded by loader.c, and the job in flight.
 *
 *   prompt --tokenizer + chat template (prompt.c)--> ids (cond, uncond)
 *     --UND tower, once per branch (denoise.c)--> per-layer K/V cache
 *   noise --GEN tower x steps, CFG combine, sampler step (denoise.c)--> latents
 *     --Wan2.2 VAE decode (wan_vae.c)--> pixels --frames.c--> uint8 RGB
 */
#ifndef COSMOS3_ENGINE_H
#define COSMOS3_ENGINE_H

#include "audio_vae.h"
#include "checkpoint.h"
#include "cosmos3.h"
#include "loader.h"
#include "runtime.h"
#include "tokenizer.h"
#include "wan_vae.h"
#include "wan_vae_encode.h"

struct cosmos3_engine {
    c3_ckpt ck;
    c3_tokenizer *tok;
    c3_runtime rt; /* the plan, its ranks and communicators, cancel, the events */
    c3_vae *vae;
    c3_backend *vbe;        /* the VAE decoder's own backend (the lead rank's device) */
    pthread_mutex_t vae_mu; /* one decode at a time (generate's or cosmos3_decode's) */
    c3_vae_enc *venc;       /* the VAE encoder, loaded by the first conditioned request */
    c3_audio_vae *avae;     /* the sound decoder, loaded by the first sound request */
    int precision;          /* C3_PREC_* (model.h) */
    bool attn_fp8;          /* --attention fp8 (every rank's backend: attn_fp8) */
    bool attn_warned;       /* the FP8 attention's decline warned (once per engine) */
    int busy;               /* a generation is in flight (atomic) */
    /* the load's phases (cosmos3_open), seconds; copied into every result */
    c3_load_times load;
    /* the warnings of the job in flight (to the result) */
    char **warnings;
    int nwarnings;
};

/* The public structs from a checkpoint / a plan (also for cosmos3_checkpoint_*). */
void engine_model_info(const c3_ckpt *ck, cosmos3_model_info *out);
void engine_plan_layout(const c3_plan *p, cosmos3_layout *out);
char *engine_plan_text(const c3_plan *p); /* xmalloc'd */
/* The plan's text and, for ranks in several processes, each rank's host,
 * process, device and groups (xmalloc'd). */
char *engine_procs_text(const c3_plan *p, const c3_procs *pr);

/* The internal view for the library's own tools (bench, tests). */
const c3_ckpt *engine_ckpt_of(const cosmos3_engine *e);
const c3_plan *engine_plan_of(const cosmos3_engine *e);

#endif
