/* plan.h - the parallel layout of a run, checked before any weight loads.
 *
 * world = tp x cfg-parallel x ulysses ranks. Rank r has
 *   sp_rank  = r % ulysses
 *   tp_rank  = (r / ulysses) % tp
 *   cfg_rank = r / (ulysses * tp)         (0: cond branch, 1: uncond)
 * so a CFG group is a contiguous block of tp*ulysses ranks (one GPU group).
 * The check compares the world with the devices, the checkpoint's head
 * counts with tp and ulysses, and each rank's bytes (weights + K/V cache +
 * activations at the requested size) with the device memory, naming the fix.
 */
#ifndef COSMOS3_PLAN_H
#define COSMOS3_PLAN_H

#include <stdio.h>

#include "checkpoint.h"

#define C3_MAX_RANKS 64 /* = COSMOS3_MAX_RANKS */

typedef struct {
    int tp, cfg, sp, world;
    bool cuda;
    bool offload;
    int ndev;                     /* devices available (GPUs, or 1 for the CPU) */
    int devices[C3_MAX_RANKS];    /* device of each rank */
    int64_t dev_total[C3_MAX_RANKS], dev_free[C3_MAX_RANKS];
    char dev_name[C3_MAX_RANKS][64];
    /* bytes per rank (as stored on the device) */
    int64_t weights, kv, act, vae,
        need;     /* vae: the decode (rank 0) and, on the CPU, the tokenizer */
    /* rank 0 only, once a request is conditioned (the encoder loads lazily):
       the VAE encoder's weights and its activations for one chunk at the size */
    int64_t enc_weights, enc_act;
    int L_est, S; /* text length estimate and GEN tokens */
    bool cfg_batch; /* one rank runs both CFG branches as one batch (fits in memory) */
    /* bytes each rank hands its groups per denoising step (both branches
     * where a rank runs both): the TP all-reduces (2 per GEN layer, fp32
     * partial sums), the Ulysses all-to-alls (q, k, v and the attention
     * output per layer) and the CFG all-gather of the prediction (fp32) */
    int64_t step_tp, step_sp, step_cfg;
    bool cross_host;       /* ranks in several processes: TP / Ulysses groups may span hosts */
    int nprocs;            /* the processes the launcher started (1: one) */
    int ranks_per_process; /* asked for (--ranks-per-process; 0: world / processes) */
    /* which device runs and why, one line for the user ("device: cpu (...)");
     * device_warn: a GPU was looked for and none is usable (a silent CPU run
     * would hide it) */
    char device_note[384];
    bool device_warn;
} c3_plan;

static inline int plan_sp_rank(const c3_plan *p, int r) { return r % p->sp; }
static inline int plan_tp_rank(const c3_plan *p, int r) { return (r / p->sp) % p->tp; }
static inline int plan_cfg_rank(const c3_plan *p, int r) { return r / (p->sp * p->tp); }

/* Devices: count and memory of the visible GPUs (0 when built without CUDA
 * or none present). */
int c3_gpu_count(void);
/* The number of usable GPUs; when 0, why (the driver's words, or the build
 * without CUDA) in why[0..n). */
int c3_gpu_probe(char *why, size_t n);
int c3_gpu_info(int dev, char *name, size_t n, int64_t *total, int64_t *free_b);
/* GPU dev's PCI bus id and UUID as one string: the same GPU seen by two
 * processes gives the same id. */
int c3_gpu_id(int dev, char *id, size_t n);

/* Build and check a plan. device: "auto", "cpu" or "cuda"; gpus: NULL or a
 * comma list; precision: C3_PREC_* (model.h: how the layer weights load, FP8
 * at one byte on GPUs). W, H, F: the requested size (for K/V and activation
 * bytes). */
int plan_make(c3_plan *p, const c3_tconfig *t, const c3_sizes *sz, int tp, int cfg, int sp,
              const char *device, const char *gpus, bool offload, int precision, int W, int H,
              int F);
/* The bytes of one rank's weights on the device: embed and the replicated
 * tensors whole, the layers' share for tp (with offload: the two slots of
 * each tower's ring), the linear layer weights at 1 byte where they stay FP8
 * on a GPU (an FP8 checkpoint but --precision bf16, or a 16-bit one with
 * --precision fp8), 2 bytes where 16-bit on a GPU, 4 on the CPU (F32). */
int64_t plan_weight_bytes(const c3_tconfig *t, const c3_sizes *sz, bool cuda, int precision, int tp,
                          bool offload);
/* The most requests of W x H x F one batch may hold on every rank of p
 * (1 .. cap): the weights and the VAE decode once, the UND K/V of each
 * request's branches, the GEN activations of its branches (up to
 * branches_per_call at once). On the CPU at most 8 (the cores are shared:
 * more only lengthens every request). */
int plan_batch_max(const c3_plan *p, const c3_tconfig *t, int W, int H, int F, int cap,
                   int branches_per_call);
/* "auto" (or NULL), "bf16", "fp8" as C3_PREC_*; -1 for anything else. */
int plan_precision(const char *s);
/* The plan as text lines (for `info`, `plan` and the log). */
void plan_print(FILE *f, const c3_plan *p);

#endif
