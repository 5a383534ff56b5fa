/* plan.c - layout checks and the per-rank memory estimate. */
#include "plan.h"

#include <stdlib.h>

#include "comm.h"
#include "model.h"
#include "request.h"

#define PLAN_VAE_BUFFERS 4                /* live activations of the decoder's largest block */
#define PLAN_VAE_CHUNK_FRAMES 4           /* frames decoded at once (one latent frame) */
#define PLAN_TOKENIZER_BYTES (64ll << 20) /* a loaded Qwen3 tokenizer, measured ~40 MiB */

/* The communicator a layout uses (declared in comm.h). */

c3_comm_kind comm_choose(bool cuda, int world, const int *devices) {
    if (world <= 1) return C3_COMM_NONE;
    if (!cuda) return C3_COMM_SHM;
    for (int a = 0; a < world; a++)
        for (int b = 0; b < a; b++)
            if (devices[a] == devices[b]) return C3_COMM_DEVICE; /* NCCL refuses two ranks on one GPU */
    return C3_COMM_NCCL;
}

const char *comm_kind_name(c3_comm_kind k) {
    switch (k) {
    case C3_COMM_NONE: return "none (one rank)";
    case C3_COMM_SHM: return "shared memory (CPU ranks)";
    case C3_COMM_NCCL: return "NCCL (one rank per GPU)";
    case C3_COMM_DEVICE: return "device memory (ranks sharing a GPU)";
    case C3_COMM_MPI: return "MPI between processes, shared memory inside each (CPU ranks)";
    }
    return "?";
}

static int64_t host_memory(int64_t *avail) {
    FILE *f = fopen("/proc/meminfo", "r");
    int64_t total = 0, av = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "MemTotal: %lld kB", &v) == 1) total = v * 1024;
        if (sscanf(line, "MemAvailable: %lld kB", &v) == 1) av = v * 1024;
    }
    if (f) fclose(f);
    *avail = av;
    return total;
}

/* Ranks in several processes (plan_open): the ranks each process holds,
 * where this one's GPUs start among its host's and the processes on it. */
static _Thread_local struct { int ranks, base, procs; } g_here;

/* Ranks q and r share a device: the same one in the same process (processes
 * never share a GPU). */
static bool plan_sharing(const c3_plan *p, int q, int r) {
    return p->devices[q] == p->devices[r] &&
           (!g_here.ranks || q / g_here.ranks == r / g_here.ranks);
}

/* Free memory of rank r's device (or the host): ranks sharing it divide it. */
static int64_t plan_rank_free(const c3_plan *p, int r) {
    int sharing = 0;
    for (int q = 0; q < p->world; q++)
        sharing += plan_sharing(p, q, r);
    return p->dev_free[r] / sharing;
}

int plan_precision(const char *s) {
    return !s || !strcmp(s, "auto") ? C3_PREC_AUTO
           : !strcmp(s, "bf16")     ? C3_PREC_BF16
           : !strcmp(s, "fp8")      ? C3_PREC_FP8
                                    : -1;
}

int plan_open(c3_plan *p, const c3_ckpt *ck, const cosmos3_open_params *op, int W, int H, int F) {
    c3_sizes sz;
    ckpt_sizes(ck, &sz);
    int world = (op->tp ? op->tp : 1) * (op->cfg_parallel ? op->cfg_parallel : 1) *
                (op->ulysses ? op->ulysses : 1);
    c3_procs pr;
    if (comm_procs(&pr) != C3_OK) pr.size = 1; /* comm_mpi_check reports it */
    if (pr.size > 1 && world % pr.size == 0)
        g_here.ranks = world / pr.size, g_here.base = pr.local_rank * g_here.ranks,
        g_here.procs = pr.local_size;
    int rc = plan_make(p, &ck->t, &sz, op->tp ? op->tp : 1, op->cfg_parallel ? op->cfg_parallel : 1,
                       op->ulysses ? op->ulysses : 1, op->device ? op->device : "auto", op->gpus,
                       op->offload, plan_precision(op->precision), W, H, F);
    g_here.ranks = g_here.base = g_here.procs = 0;
    p->cross_host = op->allow_cross_host;
    p->ranks_per_process = op->ranks_per_process;
    p->nprocs = pr.size > 1 ? pr.size : 1;
    return rc;
}

int64_t plan_weight_bytes(const c3_tconfig *t, const c3_sizes *sz, bool cuda, int precision, int tp,
                          bool offload) {
    double stored = cuda ? 1.0 : 2.0; /* stored bf16 -> f32 on the CPU */
    int64_t replicated = (int64_t)((double)sz->shared_bytes * stored);
    /* embed_tokens, norms and proj/time MLP are replicated; layer weights split by tp */
    int64_t embed = (int64_t)((double)sz->embed_params * (cuda ? 2.0 : 4.0));
    /* the linear layer weights by what the device holds; their scales stay on the host */
    int64_t e8 = sz->fp8_params, e16 = sz->lin_params - sz->fp8_params;
    int64_t lin = !cuda                       ? 4 * sz->lin_params
                  : precision == C3_PREC_FP8  ? sz->lin_params
                  : precision == C3_PREC_BF16 ? 2 * sz->lin_params
                                              : e8 + 2 * e16;
    int64_t rest =
        (int64_t)((double)(sz->und_bytes + sz->gen_bytes - sz->lin_bytes) * stored) - embed;
    int64_t layer_bytes = C3_MAX(rest, (int64_t)0) + lin;
    if (offload && cuda && t->layers > 0)
        return replicated + embed + 4 * layer_bytes / ((int64_t)tp * 2 * t->layers);
    return replicated + embed + layer_bytes / tp;
}

/* The GEN activations of one branch of S tokens on one rank. */
static int64_t plan_act_bytes(const c3_tconfig *t, int tp, int sp, double esz, int64_t S) {
    int64_t s_local = (S + sp - 1) / sp;
    /* per token: x, xn, the TP partial sum; q, attention out, fused qkv, k, v; gate|up, GLU out */
    int64_t width = (int64_t)t->hidden * 3 +
                    ((int64_t)t->heads * 3 + (int64_t)t->kv_heads * 4) * t->head_dim / tp +
                    (int64_t)t->inter * 3 / tp;
    return s_local * width * (int64_t)esz + S * t->heads / tp * t->head_dim * 4 * (int64_t)esz;
}

#define PLAN_CPU_BATCH_MAX 8

int plan_batch_max(const c3_plan *p, const c3_tconfig *t, int W, int H, int F, int cap,
                   int branches_per_call) {
    double esz = p->cuda ? 2.0 : 4.0;
    int T = (F - 1) / 4 + 1, h = (H / 16 + 1) / 2, w = (W / 16 + 1) / 2;
    int64_t S = (int64_t)T * h * w;
    int br = p->cfg == 2 ? 1 : 2; /* branches of one request on a rank */
    int64_t kv1 = (int64_t)br * t->layers * p->L_est * (t->kv_heads / p->tp) * t->head_dim * 2 *
                  (int64_t)esz;
    int64_t act1 = plan_act_bytes(t, p->tp, p->sp, esz, S);
    /* the VAE decode: the plan's estimate (one decode at a time) */
    int64_t vae = p->vae;
    int best = 1;
    if (!p->cuda) cap = C3_MIN(cap, PLAN_CPU_BATCH_MAX);
    for (int b = 2; b <= cap; b++) {
        int64_t calls = C3_MIN((int64_t)b * br, (int64_t)branches_per_call);
        int64_t need = p->weights + b * kv1 + calls * act1 + vae;
        bool fits = true;
        for (int r = 0; r < p->world; r++) {
            int64_t have = plan_rank_free(p, r);
            if (have > 0 && need > have) fits = false;
        }
        if (!fits) break;
        best = b;
    }
    return best;
}

int plan_make(c3_plan *p, const c3_tconfig *t, const c3_sizes *sz, int tp, int cfg, int sp,
              const char *device, const char *gpus, bool offload, int precision, int W, int H,
              int F) {
    memset(p, 0, sizeof *p);
    p->tp = tp;
    p->cfg = cfg;
    p->sp = sp;
    p->offload = offload;
    if (tp < 1 || cfg < 1 || sp < 1)
        return c3_fail(C3_EUSAGE, "--tp, --cfg-parallel and --ulysses must be at least 1");
    if (cfg > 2) return c3_fail(C3_EUSAGE, "--cfg-parallel is 1 or 2 (two branches: cond and uncond)");
    p->world = tp * cfg * sp;
    if (p->world > C3_MAX_RANKS) return c3_fail(C3_EUSAGE, "world size %d is above %d", p->world, C3_MAX_RANKS);
    /* divisibility against the checkpoint */
    if (t->kv_heads % tp)
        return c3_fail(C3_EUSAGE, "--tp %d does not divide the model's %d KV heads; use --tp 1, 2%s", tp,
                       t->kv_heads, t->kv_heads % 4 == 0 ? ", 4 or 8" : t->kv_heads % 2 == 0 ? "" : "");
    if ((t->kv_heads / tp) % sp)
        return c3_fail(C3_EUSAGE,
                       "--ulysses %d does not divide the %d KV heads per TP rank (%d KV heads / tp %d); "
                       "lower --ulysses or --tp",
                       sp, t->kv_heads / tp, t->kv_heads, tp);
    /* devices: which, and a line saying why */
    bool want_cuda;
    char why[256] = "";
    int ngpu = strcmp(device, "cpu") ? c3_gpu_probe(why, sizeof why) : 0;
    bool gpus_given = gpus && *gpus;
    if (!strcmp(device, "cpu") && gpus_given)
        return c3_fail(C3_EUSAGE,
                       "--gpus %s chooses GPUs, but --device cpu runs on the CPU; drop one of them",
                       gpus);
    if (!strcmp(device, "cuda") && ngpu == 0)
        return c3_fail(C3_ERESOURCE, "--device cuda: no usable GPU (%s); use --device cpu", why);
    if (gpus_given && ngpu == 0)
        return c3_fail(C3_ERESOURCE, "--gpus %s: no usable GPU (%s); drop --gpus to run on the CPU",
                       gpus, why);
    if (!strcmp(device, "cuda"))
        want_cuda = true;
    else if (!strcmp(device, "cpu"))
        want_cuda = false;
    else
        want_cuda = ngpu > 0;
    p->cuda = want_cuda;
    if (!strcmp(device, "cpu")) {
        snprintf(p->device_note, sizeof p->device_note, "device: cpu (--device cpu)");
    } else if (!want_cuda) {
        p->device_warn = strstr(why, "without CUDA") == NULL; /* a CUDA build that found none */
        snprintf(p->device_note, sizeof p->device_note, "device: cpu (no usable GPU: %s%s)", why,
                 p->device_warn ? "; --device cpu runs there without this warning" : "");
    }
    int list[C3_MAX_RANKS], nlist = 0;
    if (want_cuda) {
        if (gpus && *gpus) {
            char *dup = xstrdup(gpus), *save = NULL;
            for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                char *end;
                long v = strtol(tok, &end, 10);
                if (*end || v < 0 || nlist >= C3_MAX_RANKS) {
                    free(dup);
                    return c3_fail(C3_EUSAGE, "--gpus: '%s' is not a comma list of GPU numbers (e.g. 0,1)", gpus);
                }
                if (v >= ngpu) {
                    free(dup);
                    return c3_fail(C3_ERESOURCE, "--gpus: GPU %ld does not exist (found %d)", v, ngpu);
                }
                list[nlist++] = (int)v;
            }
            free(dup);
        } else {
            for (int i = 0; i < ngpu && i < C3_MAX_RANKS; i++) list[nlist++] = i;
        }
        p->ndev = nlist;
        if (g_here.ranks && nlist < g_here.procs * g_here.ranks) /* several processes */
            return c3_fail(C3_ERESOURCE,
                           "this host runs %d process%s of %d rank%s each (%d GPUs), but %d "
                           "GPU%s found; start fewer processes on it, use --gpus with repeated "
                           "GPUs, or a smaller layout",
                           g_here.procs, g_here.procs == 1 ? "" : "es", g_here.ranks,
                           g_here.ranks == 1 ? "" : "s", g_here.procs * g_here.ranks, nlist,
                           nlist == 1 ? " is" : "s are");
        if (!g_here.ranks && nlist < p->world) {
            /* suggest lowering only what is above 1 */
            char lower[96] = "";
            if (tp > 1) strcat(lower, " --tp 1");
            if (cfg > 1) strcat(lower, " --cfg-parallel 1");
            if (sp > 1) strcat(lower, " --ulysses 1");
            return c3_fail(C3_ERESOURCE,
                           "not enough GPUs: tp %d x cfg-parallel %d x ulysses %d needs %d, found "
                           "%d; use%s%s, "
                           "--gpus with repeated GPUs (e.g. 0,0) to share one, or --device cpu",
                           tp, cfg, sp, p->world, nlist, lower, nlist ? " --offload" : "");
        }
        for (int r = 0; r < p->world; r++) { /* several processes: each its block of the host's */
            int g = g_here.ranks ? g_here.base + r % g_here.ranks : r;
            p->devices[r] = list[g];
            C3_TRY(c3_gpu_info(list[g], p->dev_name[r], sizeof p->dev_name[r], &p->dev_total[r],
                               &p->dev_free[r]));
        }
        size_t k = (size_t)snprintf(p->device_note, sizeof p->device_note, "device: cuda, GPU%s",
                                    p->world > 1 ? "s" : "");
        for (int r = 0; r < p->world && k < sizeof p->device_note; r++) {
            bool seen = false;
            for (int q = 0; q < r; q++)
                seen |= list[q] == list[r];
            if (!seen)
                k += (size_t)snprintf(p->device_note + k, sizeof p->device_note - k, "%s %d",
                                      r ? "," : "", list[r]);
        }
        if (k < sizeof p->device_note)
            snprintf(p->device_note + k, sizeof p->device_note - k, " (%s; %s)", p->dev_name[0],
                     !strcmp(device, "cuda") ? "--device cuda"
                     : gpus_given            ? "--gpus"
                                  : "--device auto found a GPU; --device cpu runs on the CPU");
    } else {
        p->ndev = 1;
        int64_t avail;
        int64_t total = host_memory(&avail);
        for (int r = 0; r < p->world; r++) {
            p->devices[r] = -1;
            snprintf(p->dev_name[r], sizeof p->dev_name[r], "cpu");
            p->dev_total[r] = total;
            p->dev_free[r] = avail;
        }
    }
    /* bytes per rank, as stored on the device (bf16 or FP8 on GPUs, fp32 on the CPU) */
    double esz = want_cuda ? 2.0 : 4.0;
    if (precision < C3_PREC_AUTO || precision > C3_PREC_FP8)
        return c3_fail(C3_EUSAGE, "precision must be auto, bf16 or fp8");
    p->weights = plan_weight_bytes(t, sz, want_cuda, precision, tp, offload);
    /* text length estimate: the chat template + templates, ~ 64 ids, plus user text */
    p->L_est = 512;
    int T = (F - 1) / 4 + 1, h = (H / 16 + 1) / 2, w = (W / 16 + 1) / 2;
    p->S = T * h * w;
    int branches = cfg == 2 ? 1 : 2;
    p->kv = (int64_t)branches * t->layers * p->L_est * (t->kv_heads / tp) * t->head_dim * 2 * (int64_t)esz;
    p->act = plan_act_bytes(t, tp, sp, esz, p->S);
    /* one rank computing both CFG branches (no Ulysses) runs them as one
     * batch, twice the activations, where that still fits every rank */
    p->cfg_batch = cfg == 1 && sp == 1;
    for (int r = 0; r < p->world && p->cfg_batch; r++) {
        int64_t have = plan_rank_free(p, r);
        if (have > 0 && p->weights + p->kv + 2 * p->act > have) p->cfg_batch = false;
    }
    if (p->cfg_batch) p->act *= 2;
    /* what the groups move per step, per rank (plan.h) */
    int64_t passes = cfg == 2 ? 1 : 2, latent = (int64_t)t->latent_ch * T * (H / 16) * (W / 16);
    int64_t s_local = (p->S + sp - 1) / sp;
    if (tp > 1) p->step_tp = passes * t->layers * 2 * s_local * t->hidden * 4;
    if (sp > 1)
        p->step_sp = passes * t->layers * s_local * t->head_dim *
                     (2 * (int64_t)t->heads + 2 * (int64_t)t->kv_heads) / tp * (int64_t)esz;
    if (cfg > 1) p->step_cfg = latent * 4;
    /* the VAE decode on rank 0: PLAN_VAE_BUFFERS activations of its largest
     * block (one latent frame's chunk of up to 4 frames), the float pixels
     * and the 8-bit frame; on the demo model at 2048^2 this is ~0.86 GiB
     * with the rest, against 732 MiB peak RSS measured (audit D16) */
    int64_t chunk = F < PLAN_VAE_CHUNK_FRAMES ? F : PLAN_VAE_CHUNK_FRAMES;
    int64_t latent_px = (int64_t)(H / 16) * (W / 16) * chunk;
    p->vae = PLAN_VAE_BUFFERS * sz->vae_per_latent * latent_px * (int64_t)esz +
             (int64_t)F * H * W * 3 * (int64_t)sizeof(float) + (int64_t)H * W * 3;
    if (!want_cuda) p->vae += PLAN_TOKENIZER_BYTES;
    p->need = p->weights + p->kv + p->act + p->vae;
    /* the VAE encoder (conditioned requests, rank 0): weights as floats (its
     * ops run in f32 on the CPU, bf16 on GPUs) and, for one chunk of 4 frames
     * plus the 2 cached ones of each causal conv at the first stage's size
     * (base_dim channels at H/p x W/p), the input, output and residual of a
     * block, the causal caches, a strided conv's im2col (9 taps of a
     * quarter-size output) and the later, smaller stages: ~10 such volumes
     * (the CPU encode of 9 frames at 64x64 peaks at 8.6 on tiny-a:
     * test_cond). Not in `need`: the encoder is only loaded by the first
     * conditioned request. */
    p->enc_weights = (int64_t)((double)sz->vae_enc_values * esz);
    if (sz->vae_enc_dim > 0 && sz->vae_patch > 0) {
        int64_t vol =
            (int64_t)sz->vae_enc_dim * (4 + 2) * (H / sz->vae_patch) * (W / sz->vae_patch);
        p->enc_act = 10 * vol * (int64_t)esz;
    }
    for (int r = 0; r < p->world; r++) {
        int sharing = 0;
        for (int q = 0; q < p->world; q++)
            sharing += plan_sharing(p, q, r);
        int64_t have = plan_rank_free(p, r);
        if (have > 0 && p->need > have) {
            char a[32], b[32], dev[32];
            if (want_cuda)
                snprintf(dev, sizeof dev, "GPU %d", p->devices[r]);
            else
                snprintf(dev, sizeof dev, "the host");
            return c3_fail(
                C3_ERESOURCE,
                "rank %d needs %s (weights + K/V + activations + VAE decode) but %s has %s "
                "free%s; use a smaller -W/-H/--frames, a larger --tp%s, or --offload",
                r, c3_bytes_text(p->need, a, sizeof a), dev, c3_bytes_text(have, b, sizeof b),
                sharing > 1 ? " for each of the ranks sharing it" : "",
                want_cuda ? "" : " on GPUs");
        }
    }
    return C3_OK;
}

void plan_print(FILE *f, const c3_plan *p) {
    char a[32], b[32], c[32], d[32];
    fprintf(f, "layout: tp %d x cfg-parallel %d x ulysses %d = %d rank%s on %s%s\n", p->tp, p->cfg, p->sp, p->world,
            p->world == 1 ? "" : "s", p->cuda ? "cuda" : "cpu", p->offload ? " (layerwise offload)" : "");
    for (int r = 0; r < p->world; r++) {
        int g = plan_cfg_rank(p, r);
        fprintf(f, "  rank %d: %s %d, branch %s, tp rank %d, ulysses rank %d\n", r,
                p->cuda ? "GPU" : "cpu", p->cuda ? p->devices[r] : 0,
                p->cfg == 2    ? (g ? "uncond" : "cond")
                : p->cfg_batch ? "cond+uncond (one batch)"
                               : "cond+uncond",
                plan_tp_rank(p, r), plan_sp_rank(p, r));
    }
    char e[32];
    fprintf(f, "per rank: weights %s, K/V cache ~%s, activations ~%s, VAE decode ~%s, total ~%s\n",
            c3_bytes_text(p->weights, a, sizeof a), c3_bytes_text(p->kv, b, sizeof b),
            c3_bytes_text(p->act, c, sizeof c), c3_bytes_text(p->vae, e, sizeof e),
            c3_bytes_text(p->need, d, sizeof d));
    if (p->enc_weights > 0)
        fprintf(f, "rank 0 for image/video conditioning: VAE encoder weights %s, activations ~%s\n",
                c3_bytes_text(p->enc_weights, a, sizeof a), c3_bytes_text(p->enc_act, b, sizeof b));
    if (p->world > 1)
        fprintf(f, "communicator: %s\n",
                p->nprocs > 1 && p->cuda ? "NCCL across processes (ncclCommInitRank)"
                : p->nprocs > 1          ? comm_kind_name(C3_COMM_MPI)
                                : comm_kind_name(comm_choose(p->cuda, p->world, p->devices)));
    if (p->world > 1) { /* what each group moves: CFG may cross hosts, TP and Ulysses should not */
        fprintf(f, "per rank and step:");
        if (p->tp > 1) fprintf(f, " TP all-reduce %s", c3_bytes_text(p->step_tp, a, sizeof a));
        if (p->sp > 1)
            fprintf(f, "%s Ulysses all-to-all %s", p->tp > 1 ? "," : "",
                    c3_bytes_text(p->step_sp, b, sizeof b));
        if (p->cfg > 1)
            fprintf(f, "%s CFG all-gather %s", p->tp > 1 || p->sp > 1 ? "," : "",
                    c3_bytes_text(p->step_cfg, c, sizeof c));
        fprintf(f, "\n");
    }
    if (p->offload && !p->cuda)
        fprintf(f, "note: --offload does nothing on the CPU backend (the weights already live in host memory)\n");
}
