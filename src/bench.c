/* bench.c - cosmos3_bench: time the GEN CFG step of a preset's geometry on
 * random weights, with no checkpoint on disk (the measurement behind
 * `cosmos3 bench`; app/bench.c parses, formats and prints).
 *
 * The transformer checkpoint is built in memory: the configuration comes from
 * the mkmodel preset table (mkmodel.h), and every tensor of the Diffusers
 * layout points into one shared random bf16 buffer as large as the largest
 * tensor (the values do not matter for timing), so model_load runs unchanged.
 * Then: tokenize the prompt (cond and uncond), run the UND tower once per
 * branch, warm-up CFG steps, `steps` timed CFG steps (cond + uncond GEN
 * calls), and one profiled step in which a wrapper backend synchronises
 * around every backend call and times matrix products (linear), attention
 * and the rest. FLOPs are counted as ../shared/PERF-TARGETS.md says: 2 x
 * weights applied per token x tokens for the linears plus 4 x S x (L + S) x
 * Hq x head_dim per GEN layer for attention (2 x L^2 x Hq x head_dim per
 * causal UND layer). Time outside the loop is reported separately: tokenize,
 * load, UND, and (unless skip_vae) a VAE decode of that size on a random VAE
 * of the preset's geometry (written by mkmodel into a temporary folder under
 * $TMPDIR, removed before returning); the decoded first frame is returned.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "checkpoint_random.h"
#include "mkmodel.h"
#include "model.h"
#include "plan.h"
#include "request.h"
#include "prompt.h"
#include "rng.h"
#include "scheduler.h"
#include "stepcache.h"
#include "tokenizer.h"
#include "wan_vae.h"
#include "weights_random.h"
#include "cosmos3_tools.h"
#include "config.h"
#include "engine.h"

#define BENCH_DEFAULT_PX 1024 /* -W/-H when not given: the T2I size */
#define BENCH_DEFAULT_STEPS 3 /* timed CFG steps when --steps is not given */
#define BENCH_WARMUP_STEPS 2  /* untimed CFG steps first (plans, caches; graphs: seen, recorded) */
#define BENCH_TIMESTEP 500    /* integer timestep of the timed GEN calls */
#define BENCH_E2E_SEED 1      /* the e2e request's noise seed */
#define BENCH_WEIGHT_AMPLITUDE CKPT_RANDOM_AMPLITUDE /* random weights are uniform in +-this */
#define BENCH_VAE_VOCAB 64 /* vocab of the throw-away mkmodel checkpoint that carries the VAE */
#define BENCH_VAE_LAYERS 1
#define BENCH_FULL_VAE_BASE 256 /* decoder_base_dim of the full Wan2.2 VAE (nano, super, edge) */
#define BENCH_DEFAULT_PROMPT                                                                       \
    "A red fox jumps over a frozen creek at dawn, low sun behind snowy pines, breath visible in "  \
    "the "                                                                                         \
    "cold air, shallow depth of field, cinematic lighting."
#define BENCH_DEFAULT_NEGATIVE                                                                     \
    "blurry, low quality, distorted, watermark, text overlay, jpeg artifacts."
#define TFLOP 1e12
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ------------------------------------------------- in-memory checkpoint */

/* The preset's transformer/config.json, parsed by the checkpoint reader so
 * every derived field is what a folder on disk would give. */
static int preset_tconfig(const c3_mkmodel_preset *p, int layers, c3_tconfig *t) {
    json_t *j = json_object(), *rs = json_object(), *ms = json_array();
    json_object_set_new(j, "hidden_size", json_integer(p->hidden));
    json_object_set_new(j, "num_hidden_layers", json_integer(layers ? layers : p->layers));
    json_object_set_new(j, "num_attention_heads", json_integer(p->heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(p->kv_heads));
    json_object_set_new(j, "head_dim", json_integer(p->head_dim));
    json_object_set_new(j, "intermediate_size", json_integer(p->inter));
    json_object_set_new(j, "vocab_size", json_integer(p->vocab));
    json_object_set_new(j, "hidden_act", json_string(p->gated ? "silu" : "relu2"));
    if (p->nemotron)
        json_object_set_new(j, "backbone_type", json_string("cosmos3_edge_nemotron_dense"));
    json_object_set_new(j, "qk_norm_for_text", json_boolean(!p->nemotron));
    json_object_set_new(j, "use_und_k_norm_for_gen", json_boolean(p->nemotron));
    json_object_set_new(j, "rms_norm_eps", json_real(p->eps));
    json_object_set_new(j, "rope_theta", json_real(p->theta));
    for (int i = 0; i < 3; i++)
        json_array_append_new(ms, json_integer(p->mrope[i]));
    json_object_set_new(rs, "mrope_section", ms);
    json_object_set_new(rs, "mrope_interleaved", json_true());
    json_object_set_new(j, "rope_scaling", rs);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    int rc = ckpt_parse_tconfig(t, text, strlen(text), "(bench preset config)");
    free(text);
    return rc;
}

/* A checkpoint with no files: configs from the preset, the tensors made in
 * memory as a folder with transformer/random.json makes them
 * (checkpoint_random.c: one random bf16 buffer as large as the largest
 * tensor); ckpt_close frees it. */
static int mem_ckpt_make(c3_ckpt *ck, const c3_mkmodel_preset *p, int layers) {
    memset(ck, 0, sizeof *ck);
    ck->dir = xstrdup("(bench: no checkpoint on disk)");
    ck->model_id = xstrdup(p->name);
    ck->default_system_prompt = p->system_prompt;
    ck->native_flow_schedule = p->native_schedule;
    C3_TRY(preset_tconfig(p, layers, &ck->t));
    return ckpt_random_tensors(ck, BENCH_WEIGHT_AMPLITUDE);
}

/* ------------------------------------------------ timing wrapper backend */

/* The ops the device-time breakdown names (the rest are counted under "other"). */
enum {
    OP_LINEAR,
    OP_ATTENTION,
    OP_RMSNORM,
    OP_QKV_ROPE,
    OP_GLU,
    OP_ADD,
    OP_COPY,
    OP_PERMUTE,
    OP_UPLOAD,
    OP_DOWNLOAD,
    OP_OTHER,
    OP_N
};
_Static_assert(OP_N == COSMOS3_BENCH_NOPS, "cosmos3_tools.h's COSMOS3_BENCH_NOPS counts these ops");
static const char *const op_names[OP_N] = {
    "matrix products", "attention", "rmsnorm",  "qkv_rope", "glu", "add", "copy",
    "permute",         "upload",    "download", "other"};
/* Event pairs one event-timed step may record (a Nano step queues ~450 ops). */
#define BENCH_EV_MAX 4096

/* Forwards every op to the real backend; while `on`, synchronises around
 * linear and attention calls and adds their wall time and executed FLOPs;
 * while `ev_on`, records a timing event before and after every op. */
typedef struct {
    c3_backend w; /* first: the table the model sees (a copy of the real one) */
    c3_backend *real;
    c3_backend ops; /* the real table's ops, called with the wrapper as `be` */
    bool on;        /* host-synchronised timing of linear and attention */
    double s_linear, s_attn, f_linear, f_attn;
    int n_linear, n_attn;
    /* the random checkpoint's host buffer: an upload from it is made on the
     * device instead where the backend has fill_random (same bits, no copy) */
    const uint16_t *rand_buf;
    int64_t rand_n;
    /* device-time timing: an event before and after every op, no host syncs */
    bool ev_on;
    void *ev[2 * BENCH_EV_MAX];
    int ev_op[BENCH_EV_MAX], nev, ev_cap, ev_made;
} bench_be;

/* Before op `op` while device-timing: record the opening event; -1 when off. */
static int ev_begin(bench_be *b, int op) {
    if (!b->ev_on || b->nev >= b->ev_cap) return -1;
    int i = b->nev++;
    b->ev_op[i] = op;
    if (b->ops.event_record(&b->w, b->ev[2 * i], C3_Q_COMPUTE) != C3_OK) return b->nev--, -1;
    return i;
}
static int ev_end(bench_be *b, int i, int rc) {
    if (i >= 0 && b->ops.event_record(&b->w, b->ev[2 * i + 1], C3_Q_COMPUTE) != C3_OK)
        b->ev_op[i] = -1;
    return rc;
}
#define EV_WRAP(op, OPID, params, args)                                                            \
    static int wrap_##op params {                                                                  \
        bench_be *b = (bench_be *)be;                                                              \
        int i_ = ev_begin(b, OPID);                                                                \
        return ev_end(b, i_, b->ops.op args);                                                      \
    }
EV_WRAP(rmsnorm, OP_RMSNORM,
        (c3_backend * be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim, float eps,
         bool m),
        (be, y, x, w, dim, eps, m))
EV_WRAP(qkv_rope, OP_QKV_ROPE,
        (c3_backend * be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
         const c3_tensor *qn, const c3_tensor *kn, const c3_tensor *cs, const c3_tensor *sn,
         float eps, bool m),
        (be, q, k, v, qkv, qn, kn, cs, sn, eps, m))
EV_WRAP(glu, OP_GLU, (c3_backend * be, c3_tensor *out, const c3_tensor *gu, c3_act act),
        (be, out, gu, act))
EV_WRAP(add, OP_ADD, (c3_backend * be, c3_tensor *y, const c3_tensor *x), (be, y, x))
EV_WRAP(copy, OP_COPY, (c3_backend * be, c3_tensor *y, const c3_tensor *x), (be, y, x))
EV_WRAP(permute, OP_PERMUTE, (c3_backend * be, c3_tensor *y, const c3_tensor *x, const int *perm),
        (be, y, x, perm))
/* An upload from the random buffer (a weight of the in-memory checkpoint)
 * is made where it lands: element i of the buffer is c3_random_weight(i). */
static int wrap_upload(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype st) {
    bench_be *b = (bench_be *)be;
    uintptr_t p = (uintptr_t)src, b0 = (uintptr_t)b->rand_buf;
    int64_t off = (int64_t)(p - b0) / (int64_t)sizeof(uint16_t);
    if (b->rand_buf && c3_has(&b->ops, C3_CAP_RANDOM) && st == C3_BF16 && p >= b0 &&
        (p - b0) % 2 == 0 && off + c3_numel(dst) <= b->rand_n &&
        (dst->dtype == C3_BF16 || dst->dtype == C3_F32)) {
        return b->ops.fill_random(be, dst, off, (float)BENCH_WEIGHT_AMPLITUDE);
    }
    int i = ev_begin(b, OP_UPLOAD);
    return ev_end(b, i, b->ops.upload(be, dst, src, st));
}
EV_WRAP(download, OP_DOWNLOAD, (c3_backend * be, float *dst, const c3_tensor *src), (be, dst, src))
EV_WRAP(silu, OP_OTHER, (c3_backend * be, c3_tensor *y, const c3_tensor *x), (be, y, x))
EV_WRAP(rope, OP_OTHER, (c3_backend * be, c3_tensor *x, const c3_tensor *c, const c3_tensor *sn),
        (be, x, c, sn))

static int wrap_linear(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                       const c3_tensor *bias, bool acc) {
    bench_be *b = (bench_be *)be;
    if (!b->on) {
        int i = ev_begin(b, OP_LINEAR);
        return ev_end(b, i, b->ops.linear(be, y, x, w, bias, acc));
    }
    C3_TRY(be->sync(be));
    double t0 = c3_now();
    C3_TRY(b->ops.linear(be, y, x, w, bias, acc));
    C3_TRY(be->sync(be));
    b->s_linear += c3_now() - t0;
    int64_t N = w->ne[0], K = w->ne[1], M = c3_numel(x) / K; /* x [M, K] . w [N, K]^T */
    b->f_linear += 2.0 * (double)M * (double)N * (double)K;
    b->n_linear++;
    return C3_OK;
}

static int wrap_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv,
                          int nseg, bool causal, float scale) {
    bench_be *b = (bench_be *)be;
    if (!b->on) {
        int i = ev_begin(b, OP_ATTENTION);
        return ev_end(b, i, b->ops.attention(be, out, q, kv, nseg, causal, scale));
    }
    C3_TRY(be->sync(be));
    double t0 = c3_now();
    C3_TRY(b->ops.attention(be, out, q, kv, nseg, causal, scale));
    C3_TRY(be->sync(be));
    b->s_attn += c3_now() - t0;
    /* q [Sq, Hq, D]: 2 flops x (QK^T + PV) per (query, key, head, dim); causal halves it */
    double keys = 0;
    for (int i = 0; i < nseg; i++)
        keys += (double)kv[i].valid;
    double f = 4.0 * (double)q->ne[0] * keys * (double)q->ne[1] * (double)q->ne[2];
    b->f_attn += causal ? f / 2 : f;
    b->n_attn++;
    return C3_OK;
}

static bench_be *wrap_backend(c3_backend *real) {
    bench_be *b = xcalloc(1, sizeof *b);
    b->w = *real;
    b->real = real;
    b->ops = *real;
    b->w.linear = wrap_linear;
    b->w.attention = wrap_attention;
    b->w.rmsnorm = wrap_rmsnorm;
    b->w.qkv_rope = wrap_qkv_rope;
    b->w.glu = wrap_glu;
    b->w.add = wrap_add;
    b->w.copy = wrap_copy;
    b->w.permute = wrap_permute;
    b->w.upload = wrap_upload;
    b->w.download = wrap_download;
    b->w.silu = wrap_silu;
    b->w.rope = wrap_rope;
    b->w.destroy = NULL; /* the real backend is destroyed through its own pointer */
    /* device timing where the backend has timing events (CUDA) */
    if (c3_has(real, C3_CAP_EVENTS)) {
        int n = 0;
        while (n < 2 * BENCH_EV_MAX && real->event_new(real, &b->ev[n], true) == C3_OK)
            n++;
        b->ev_made = n;
        b->ev_cap = n / 2;
    }
    return b;
}

static void wrap_free(bench_be *b) {
    if (!b) return;
    for (int i = 0; i < b->ev_made; i++)
        b->real->event_free(b->real, b->ev[i]);
    free(b);
}

/* --------------------------------------------------------- FLOP counting */

/* Weights applied per GEN token (linears of one GEN forward, per token). */
static double gen_weights_per_token(const c3_tconfig *c) {
    double D = c->hidden, I = c->inter, Q = (double)c->heads * c->head_dim,
           KV = (double)c->kv_heads * c->head_dim;
    double layer = D * Q + 2 * D * KV + Q * D + (c->mlp_gated ? 3 : 2) * D * I;
    return c->layers * layer + 2.0 * D * c->patch_dim; /* + proj_in, proj_out */
}
/* UND: the same layer linears per text token (the last layer's are run too). */
static double und_weights_per_token(const c3_tconfig *c) {
    double D = c->hidden, I = c->inter, Q = (double)c->heads * c->head_dim,
           KV = (double)c->kv_heads * c->head_dim;
    return c->layers * (D * Q + 2 * D * KV + Q * D + (c->mlp_gated ? 3 : 2) * D * I);
}
static double gen_attn_flops(const c3_tconfig *c, double S, double L) {
    return 4.0 * S * (L + S) * c->heads * c->head_dim * c->layers;
}
static double und_attn_flops(const c3_tconfig *c, double L) {
    return 2.0 * L * L * c->heads * c->head_dim * c->layers;
}

/* ------------------------------------------------------------ helpers */

static int find_tokenizer(char *out, size_t n) {
    if (ckpt_share_path("tokenizer/tokenizer.json", out, n)) return C3_OK;
    return c3_fail(
        C3_EMODEL,
        "bench: the Qwen3 tokenizer files are missing (share/tokenizer); reinstall cosmos3");
}

static int open_backend(const cosmos3_bench_params *s, c3_backend **be) {
    int dev = 0;
    if (s->gpus && *s->gpus) dev = atoi(s->gpus);
    const char *d = s->device ? s->device : "auto";
    bool cuda = !strcmp(d, "cuda") || (!strcmp(d, "auto") && c3_gpu_count() > 0);
    if (!cuda) {
        *be = c3_backend_cpu();
        return C3_OK;
    }
    return c3_backend_cuda(dev, be);
}

/* One CFG step: the cond and the uncond GEN call on the same latents. */
static int cfg_step(c3_model *m, const c3_undkv *kc, const c3_undkv *ku, const float *lat,
                    const c3_latent_geom *g, float *vc, float *vu, double *t_cond,
                    double *t_uncond) {
    double t0 = c3_now();
    if (model_batches(m)) { /* one batch: half the time to each branch */
        const c3_undkv *kv[2] = {kc, ku};
        float *v[2] = {vc, vu};
        C3_TRY(model_gen_batch(m, 2, kv, lat, g, BENCH_TIMESTEP, v));
        *t_cond = *t_uncond = (c3_now() - t0) / 2;
        return C3_OK;
    }
    C3_TRY(model_gen(m, kc, lat, g, BENCH_TIMESTEP, vc));
    double t1 = c3_now();
    C3_TRY(model_gen(m, ku, lat, g, BENCH_TIMESTEP, vu));
    *t_cond = t1 - t0;
    *t_uncond = c3_now() - t1;
    return C3_OK;
}

/* A CFG step's GEN calls through the step cache's io (record, reuse or
 * probe), batched as cfg_step batches them. */
static int cached_call(c3_model *m, const c3_undkv *kc, const c3_undkv *ku, const float *lat,
                       const c3_latent_geom *g, float *vc, float *vu, c3_gen_cache io[2]) {
    const c3_undkv *kv[2] = {kc, ku};
    float *v[2] = {vc, vu};
    if (model_batches(m)) {
        c3_gen_cache both = io[0];
        both.res[1] = io[1].res[0];
        both.probe[1] = io[1].probe[0];
        return model_gen_cached(m, 2, kv, lat, g, BENCH_TIMESTEP, v, &both);
    }
    for (int b = 0; b < 2; b++)
        C3_TRY(model_gen_cached(m, 1, &kv[b], lat, g, BENCH_TIMESTEP, &v[b], &io[b]));
    return C3_OK;
}

/* Seconds of a CFG step the step cache serves (mean of n): sea (the SEA
 * filter of the latents and their change, then the block stack skipped)
 * and fb (the first block probed, then the rest skipped). */
static int cached_steps(c3_model *m, const c3_undkv *kc, const c3_undkv *ku, const float *lat,
                        const c3_latent_geom *g, int C, float *vc, float *vu, int n, double *sea,
                        double *fb) {
    c3_tensor res[2] = {{0}};
    c3_gen_cache io[2] = {{.res = {&res[0]}}, {.res = {&res[1]}}};
    int64_t nl = (int64_t)C * g->T * g->h * g->w, S, D;
    model_gen_rows(m, g, &S, &D);
    float *f = xmalloc(sizeof(float) * (size_t)nl), *prev = xcalloc((size_t)nl, sizeof(float));
    float *pr[2] = {xmalloc(sizeof(float) * (size_t)(S * D)), xmalloc(sizeof(float) * (size_t)(S * D))};
    int rc = cached_call(m, kc, ku, lat, g, vc, vu, io); /* record the residuals */
    double t0 = c3_now();
    for (int i = 0; i < n && rc == C3_OK; i++) {
        memcpy(f, lat, sizeof(float) * (size_t)nl);
        sea_filter(f, C, g->T, g->h, g->w, 0.5, 3.0);
        double num = 0, den = 0; /* the change against the last signal, as stepcache.c */
        for (int64_t k = 0; k < nl; k++) num += fabsf(f[k] - prev[k]), den += fabsf(prev[k]);
        float *t = prev;
        prev = f;
        f = t;
        if (!(num >= 0 && den >= 0)) rc = c3_fail(C3_EFAIL, "bench: a non-finite SEA signal");
        io[0].reuse = io[1].reuse = true;
        if (rc == C3_OK) rc = cached_call(m, kc, ku, lat, g, vc, vu, io);
    }
    *sea = n ? (c3_now() - t0) / n : 0;
    t0 = c3_now();
    for (int i = 0; i < n && rc == C3_OK; i++) {
        c3_gen_cache probe[2] = {{.probe = {pr[0]}}, {.probe = {pr[1]}}};
        rc = cached_call(m, kc, ku, lat, g, NULL, NULL, probe);
        if (rc == C3_OK) rc = cached_call(m, kc, ku, lat, g, vc, vu, io);
    }
    *fb = n ? (c3_now() - t0) / n : 0;
    c3_free(&res[0]);
    c3_free(&res[1]);
    free(f);
    free(prev);
    free(pr[0]);
    free(pr[1]);
    return rc;
}

/* ------------------------------------------------------ end to end (e2e) */

/* The step times of a request, from its events. */
typedef struct {
    double step[COSMOS3_BENCH_E2E_MAX_STEPS];
    int n;
} e2e_steps;

static void e2e_event(const cosmos3_event *ev, void *user) {
    e2e_steps *st = user;
    if (ev->kind == COSMOS3_EV_STEP && ev->step >= 1 && ev->step <= COSMOS3_BENCH_E2E_MAX_STEPS) {
        st->step[ev->step - 1] = ev->seconds;
        st->n = C3_MAX(st->n, ev->step);
    }
}

/* One rank's engine around what bench_run loaded (the in-memory transformer,
 * the distilled scheduler, VAE config and card of the throw-away folder vck),
 * so the request runs cosmos3_generate as `gen` does. Owns nothing it is
 * given; e2e_engine_free releases only its own parts. */
static cosmos3_engine *e2e_engine(const c3_ckpt *ck, const c3_ckpt *vck, const c3_plan *plan,
                                  c3_backend *be, c3_model *m, c3_vae *vae, c3_tokenizer *tok,
                                  const c3_shard *shard) {
    cosmos3_engine *e = xcalloc(1, sizeof *e);
    rt_init(&e->rt, NULL, NULL);
    e->ck = *ck;
    e->ck.v = vck->v;
    e->ck.s = vck->s;
    e->ck.card = vck->card;
    e->ck.has_vae = true;
    e->rt.plan = *plan;
    rt_place(&e->rt, NULL);
    e->tok = tok;
    e->vae = vae;
    e->vbe = be; /* the VAE was loaded on the rank's backend (the bench owns both) */
    pthread_mutex_init(&e->vae_mu, NULL);
    e->precision = shard->precision;
    e->rt.ranks[0] = (c3_rank){.rank = 0, .be = be, .model = m, .shard = *shard};
    model_batch(m, plan->cfg_batch);
    return e;
}

/* The rank's UND cache (a request with the same ids reuses it): dropped so
 * the timed request runs its UND as a new prompt does. */
static void e2e_forget_und(cosmos3_engine *e) {
    for (int b = 0; b < C3_UND_SLOTS; b++) {
        undkv_free(&e->rt.ranks[0].und[b]);
        free(e->rt.ranks[0].und_ids[b]);
        e->rt.ranks[0].und_ids[b] = NULL;
    }
}

static void e2e_engine_free(cosmos3_engine *e) {
    if (!e) return;
    e2e_forget_und(e);
    pthread_mutex_destroy(&e->rt.ev_mu);
    pthread_mutex_destroy(&e->vae_mu);
    free(e);
}

/* The warm-up request, then the timed one (a fresh UND); the decoded frame
 * of the timed one into r->frame_rgb. */
static int e2e_requests(cosmos3_engine *e, const cosmos3_bench_params *s, cosmos3_bench_result *r) {
    cosmos3_result *res = NULL;
    char err[1024];
    for (int run = 0; run < 2; run++) {
        e2e_steps st = {.n = 0};
        cosmos3_request rq;
        cosmos3_request_init(&rq);
        rq.prompt = s->prompt && *s->prompt ? s->prompt : BENCH_DEFAULT_PROMPT;
        rq.width = r->width;
        rq.height = r->height;
        rq.frames = 1;
        rq.seed = BENCH_E2E_SEED;
        rq.on_event = e2e_event;
        rq.user = &st;
        rq.want_latents = run == 1;
        e2e_forget_und(e);
        double t0 = c3_now();
        int rc = cosmos3_generate(e, &rq, &res, err, sizeof err);
        double wall = c3_now() - t0;
        if (rc) return rc; /* recorded by cosmos3_generate */
        if (run == 0) {
            r->e2e_first_total = res->timings.total;
            cosmos3_result_free(res);
            continue;
        }
        r->e2e_steps = res->steps;
        for (int i = 0; i < st.n; i++)
            r->e2e_step[i] = st.step[i];
        r->e2e_tokenize = res->timings.tokenize;
        r->e2e_und = res->timings.und;
        r->e2e_denoise = res->timings.denoise;
        r->e2e_vae = res->timings.vae;
        r->e2e_total = res->timings.total;
        r->e2e_wall = wall;
        r->L_cond = res->L_cond;
        r->L_uncond = 0; /* one forward per step: no unconditional branch */
        r->frame_width = res->width;
        r->frame_height = res->height;
        size_t nb = (size_t)res->width * res->height * 3;
        r->frame_rgb = xmalloc(nb);
        memcpy(r->frame_rgb, res->rgb, nb);
        if (res->latents) {
            size_t nl = 1;
            for (int i = 0; i < 5; i++)
                nl *= (size_t)(r->e2e_latent_shape[i] = res->latent_shape[i]);
            r->e2e_latents = xmalloc(nl * sizeof(float));
            memcpy(r->e2e_latents, res->latents, nl * sizeof(float));
        }
        cosmos3_result_free(res);
    }
    return C3_OK;
}

/* The device's memory as the run left it, and the backend's accounting. */
static void note_memory(cosmos3_bench_result *r, c3_backend *real, const c3_backend *be) {
    if (real->device >= 0) {
        char nm[64];
        int64_t tot = 0, fr = 0;
        if (c3_gpu_info(real->device, nm, sizeof nm, &tot, &fr) == C3_OK) {
            r->dev_total = tot;
            r->dev_used = tot - fr;
        }
    }
    r->mem_weights = be->mem[C3_MEM_WEIGHTS];
    r->mem_kv = be->mem[C3_MEM_KV];
    r->mem_act = be->mem[C3_MEM_ACT];
    r->mem_peak = be->mem_peak;
}

/* ------------------------------------------------------------ command */

static int bench_run(const cosmos3_bench_params *s, const c3_mkmodel_preset *p,
                     cosmos3_bench_result *r) {
    int rc = C3_OK;
    c3_ckpt mc = {0};
    c3_ckpt vck;
    bool have_vck = false;
    c3_backend *real = NULL;
    bench_be *b = NULL;
    c3_model *m = NULL;
    c3_vae *vae = NULL;
    c3_tokenizer *tok = NULL;
    c3_undkv kc = {0}, ku = {0};
    int32_t *ids_c = NULL, *ids_u = NULL;
    float *lat = NULL, *vc = NULL, *vu = NULL, *pix = NULL;
    char tokpath[4096], vdir[4096] = "";
#define B_TRY(x)                                                                                   \
    do {                                                                                           \
        if ((rc = (x)) != C3_OK) goto out;                                                         \
    } while (0)

    B_TRY(find_tokenizer(tokpath, sizeof tokpath));
    B_TRY(mem_ckpt_make(&mc, p, s->layers));
    const c3_tconfig *c = &mc.t;
    snprintf(r->preset, sizeof r->preset, "%s", p->name);
    r->layers = c->layers;
    r->hidden = c->hidden;
    r->heads = c->heads;
    r->kv_heads = c->kv_heads;
    r->head_dim = c->head_dim;
    r->intermediate = c->inter;
    r->mlp_gated = c->mlp_gated;

    /* the VAE of the preset's geometry: a throw-away mkmodel folder */
    /* the latent grid from the VAE config (the Wan2.2 factors when --skip-vae leaves none) */
    int sp = C3_WAN_SCALE_SPATIAL, st = C3_WAN_SCALE_TEMPORAL;
    r->vae = !s->skip_vae;
    if (r->vae) {
        const char *tmp = getenv("TMPDIR");
        snprintf(vdir, sizeof vdir, "%s/cosmos3-bench-vae.%d", tmp && *tmp ? tmp : "/tmp",
                 (int)getpid());
        char tdir[4096];
        snprintf(tdir, sizeof tdir, "%s", tokpath);
        *strrchr(tdir, '/') = 0;
        /* the preset's own VAE geometry (nano, super, edge: the full Wan2.2 VAE), carried by a
         * small transformer: tiny's, or the preset's own where its VAE is not the full one */
        bool full_vae = p->vae_decoder_base >= BENCH_FULL_VAE_BASE;
        c3_mkmodel_opts o = {.preset = full_vae ? "tiny" : p->name,
                             .layers = BENCH_VAE_LAYERS,
                             .vocab = BENCH_VAE_VOCAB,
                             .vae = full_vae ? MKMODEL_VAE_FULL : MKMODEL_VAE_PRESET,
                             .seed = 1,
                             .distilled = s->e2e, /* the scheduler the e2e request reads */
                             .out_dir = vdir,
                             .tokenizer_dir = tdir,
                             .overwrite = true};
        B_TRY(mkmodel_write(&o));
        B_TRY(ckpt_open(&vck, vdir, true));
        have_vck = true;
        sp = vck.v.scale_spatial;
        st = vck.v.scale_temporal;
    }

    /* size */
    r->width = s->width > 0 ? s->width : BENCH_DEFAULT_PX;
    r->height = s->height > 0 ? s->height : BENCH_DEFAULT_PX;
    r->frames = s->frames > 0 ? s->frames : 1;
    if (r->width % sp || r->height % sp) {
        rc = c3_fail(C3_EUSAGE,
                     "bench: %dx%d is not a multiple of %d; pick -W and -H multiples of %d",
                     r->width, r->height, sp, sp);
        goto out;
    }
    if ((r->frames - 1) % st) {
        rc = c3_fail(C3_EUSAGE, "bench: --frames %d must be 1 + %d k (e.g. %d)", r->frames, st,
                     1 + st * 23);
        goto out;
    }
    r->latent_t = (r->frames - 1) / st + 1;
    r->latent_h = r->height / sp;
    r->latent_w = r->width / sp;
    r->gen_tokens = r->latent_t * ((r->latent_h + c->patch - 1) / c->patch) *
                    ((r->latent_w + c->patch - 1) / c->patch);
    r->steps = s->steps > 0 ? s->steps : BENCH_DEFAULT_STEPS;

    /* backend (wrapped) */
    B_TRY(open_backend(s, &real));
    if (real->device >= 0) {
        char nm[64] = "?";
        int64_t tot = 0, fr = 0;
        c3_gpu_info(real->device, nm, sizeof nm, &tot, &fr);
        snprintf(r->device, sizeof r->device, "cuda:%d %s", real->device, nm);
    } else {
        snprintf(r->device, sizeof r->device, "cpu");
    }
    b = wrap_backend(real);
    b->rand_buf = mc.random_buf;
    b->rand_n = mc.random_n;
    c3_backend *be = &b->w;
    be->attn_fp8 = s->attention && !strcmp(s->attention, "fp8");

    /* tokenize */
    double t0 = c3_now();
    B_TRY(tok_load(&tok, tokpath));
    c3_prompt_opts po = {.system_prompt = p->system_prompt,
                         .templates = true,
                         .width = r->width,
                         .height = r->height,
                         .frames = r->frames,
                         .fps = s->fps > 0 ? s->fps : 24};
    B_TRY(prompt_ids(tok, s->prompt && *s->prompt ? s->prompt : BENCH_DEFAULT_PROMPT, false, &po,
                     &ids_c, &r->L_cond));
    B_TRY(prompt_ids(tok, BENCH_DEFAULT_NEGATIVE, true, &po, &ids_u, &r->L_uncond));
    r->t_tokenize = c3_now() - t0;

    /* load */
    c3_shard one = {.tp_size = 1,
                    .sp_size = 1,
                    .offload = s->offload && real->device >= 0,
                    .precision = plan_precision(s->precision)};
    c3_plan plan;
    if (s->e2e) { /* the plan gen checks before any weight loads, at this size */
        cosmos3_open_params op;
        cosmos3_open_params_init(&op);
        op.device = real->device >= 0 ? "cuda" : "cpu";
        op.gpus = s->gpus;
        op.offload = one.offload;
        op.precision = s->precision;
        B_TRY(plan_open(&plan, &mc, &op, r->width, r->height, r->frames));
        r->plan_text = engine_plan_text(&plan);
        r->plan_need = plan.need;
        r->plan_weights = plan.weights;
    }
    t0 = c3_now();
    B_TRY(model_load(&m, &mc, be, &one));
    r->offload = model_offloaded(m);
    r->cfg_batch = model_batches(m);
    B_TRY(be->sync(be));
    r->t_load = c3_now() - t0;

    if (s->e2e) { /* the VAE, then the two requests; no CFG-step timing */
        t0 = c3_now();
        B_TRY(vae_load(&vae, &vck, be));
        B_TRY(be->sync(be));
        r->t_vae_load = c3_now() - t0;
        r->e2e = true;
        cosmos3_engine *e = e2e_engine(&mc, &vck, &plan, be, m, vae, tok, &one);
        rc = e2e_requests(e, s, r);
        e2e_engine_free(e);
        if (rc) goto out;
        r->t_vae = r->e2e_vae;
        note_memory(r, real, be);
        goto out;
    }

    /* UND, once per branch */
    t0 = c3_now();
    B_TRY(model_und(m, ids_c, r->L_cond, &kc));
    B_TRY(be->sync(be));
    double t1 = c3_now();
    B_TRY(model_und(m, ids_u, r->L_uncond, &ku));
    B_TRY(be->sync(be));
    r->t_und_cond = t1 - t0;
    r->t_und_uncond = c3_now() - t1;

    /* FLOPs per CFG step */
    double wt = gen_weights_per_token(c);
    /* plus the timestep MLP (linear_1 D x te_in, linear_2 D x D), applied once
     * per GEN call rather than per token: tiny, but executed on the device */
    const st_tensor *te1 = ckpt_find(&mc, "time_embedder.linear_1.weight");
    double te_in = te1 && te1->ndim == 2 ? (double)te1->shape[1] : 256.0;
    double temb = 2.0 * ((double)c->hidden * te_in + (double)c->hidden * (double)c->hidden);
    r->flop_step_linear = 2.0 * wt * r->gen_tokens * 2 + 2 * temb;
    r->flop_step_attn =
        gen_attn_flops(c, r->gen_tokens, r->L_cond) + gen_attn_flops(c, r->gen_tokens, r->L_uncond);
    r->flop_step = r->flop_step_linear + r->flop_step_attn;
    r->flop_und = 2.0 * und_weights_per_token(c) * (r->L_cond + r->L_uncond) +
                  und_attn_flops(c, r->L_cond) + und_attn_flops(c, r->L_uncond);

    /* the steps */
    int64_t nlat = (int64_t)c->latent_ch * r->latent_t * r->latent_h * r->latent_w;
    lat = xmalloc((size_t)nlat * sizeof *lat);
    vc = xmalloc((size_t)nlat * sizeof *vc);
    vu = xmalloc((size_t)nlat * sizeof *vu);
    rng_normal(1, 0, lat, nlat);
    c3_latent_geom g = {.T = r->latent_t, .h = r->latent_h, .w = r->latent_w, .fps = po.fps};
    double tc, tu;
    for (int i = 0; i < BENCH_WARMUP_STEPS; i++)
        B_TRY(cfg_step(m, &kc, &ku, lat, &g, vc, vu, &tc, &tu));
    r->step_min = INFINITY;
    double sum = 0, sc = 0, su = 0, h2d_s0 = 0;
    int64_t h2d_b0 = 0;
    model_offload_stats(m, &h2d_b0, &h2d_s0);
    for (int i = 0; i < r->steps; i++) {
        B_TRY(cfg_step(m, &kc, &ku, lat, &g, vc, vu, &tc, &tu));
        double t = tc + tu;
        sum += t, sc += tc, su += tu;
        r->step_min = C3_MIN(r->step_min, t);
        r->step_max = C3_MAX(r->step_max, t);
    }
    r->step_mean = sum / r->steps;
    model_offload_stats(m, &r->h2d_bytes, &r->h2d_seconds);
    r->h2d_bytes -= h2d_b0;
    r->h2d_seconds -= h2d_s0;
    r->cond_mean = sc / r->steps;
    r->uncond_mean = su / r->steps;
    /* the step cache: a served step's cost beside the computed one's */
    B_TRY(cached_steps(m, &kc, &ku, lat, &g, c->latent_ch, vc, vu, r->steps, &r->step_cached_sea,
                       &r->step_cached_fb));
    for (int64_t i = 0; i < nlat; i++)
        if (!isfinite(vc[i]) || !isfinite(vu[i])) {
            rc = c3_fail(C3_EFAIL,
                         "bench: the GEN output has a non-finite value at %lld (backend bug)",
                         (long long)i);
            goto out;
        }
    /* the profiled step */
    b->on = true; /* every op timed on its own: no graph replay */
    model_graphs(m, false);
    B_TRY(cfg_step(m, &kc, &ku, lat, &g, vc, vu, &tc, &tu));
    b->on = false;
    r->prof_total = tc + tu;
    r->prof_linear = b->s_linear;
    r->prof_attn = b->s_attn;
    r->prof_flop_linear = b->f_linear;
    r->prof_flop_attn = b->f_attn;
    r->prof_n_linear = b->n_linear;
    r->prof_n_attn = b->n_attn;
    /* the device-timed step: events around every op, queued without host
     * syncs (op by op, as the graph would run them) */
    if (b->ev_cap > 0) {
        b->ev_on = true;
        b->nev = 0;
        B_TRY(cfg_step(m, &kc, &ku, lat, &g, vc, vu, &tc, &tu));
        b->ev_on = false;
        r->dev_wall = tc + tu;
        B_TRY(be->sync(be));
        for (int i = 0; i < b->nev; i++) {
            float ms = 0;
            if (b->ev_op[i] < 0 ||
                real->event_ms(real, b->ev[2 * i], b->ev[2 * i + 1], &ms) != C3_OK)
                continue;
            r->dev_op_ms[b->ev_op[i]] += ms;
            r->dev_op_n[b->ev_op[i]]++;
        }
        float span = 0;
        if (b->nev > 0 && real->event_ms(real, b->ev[0], b->ev[2 * b->nev - 1], &span) == C3_OK)
            r->dev_span_ms = span;
        r->dev_timed = b->nev > 0 && b->nev < b->ev_cap;
    }
    note_memory(r, real, be);

    /* VAE decode of that size and a PNG of the first frame */
    if (r->vae) {
        t0 = c3_now();
        B_TRY(vae_load(&vae, &vck, be));
        B_TRY(be->sync(be));
        r->t_vae_load = c3_now() - t0;
        int F, H, W;
        t0 = c3_now();
        B_TRY(vae_decode(vae, lat, r->latent_t, r->latent_h, r->latent_w, &pix, &F, &H, &W, NULL,
                         NULL));
        r->t_vae = c3_now() - t0;
        /* again, warm (as a reference that times after a warm-up decode) */
        free(pix);
        pix = NULL;
        t0 = c3_now();
        B_TRY(vae_decode(vae, lat, r->latent_t, r->latent_h, r->latent_w, &pix, &F, &H, &W, NULL,
                         NULL));
        r->t_vae_warm = c3_now() - t0;
        /* the first frame as RGB: pix [3, F, H, W] */
        r->frame_rgb = xmalloc((size_t)H * W * 3);
        r->frame_width = W;
        r->frame_height = H;
        int64_t plane = (int64_t)F * H * W;
        for (int64_t i = 0; i < (int64_t)H * W; i++)
            for (int ch = 0; ch < 3; ch++) {
                float v = pix[ch * plane + i] * 0.5f + 0.5f;
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                r->frame_rgb[i * 3 + ch] = (uint8_t)lrintf(v * 255.0f);
            }
    }
    r->mem_peak = be->mem_peak;
    if (be->attn_fp8 && be->attn_fp8_declined)
        snprintf(r->attention, sizeof r->attention, "%s (fp8 declined: %s)",
                 be->act_dtype == C3_F32 ? "fp32" : "bf16",
                 be->attn_fp8_why ? be->attn_fp8_why : "?");
    else
        snprintf(r->attention, sizeof r->attention, "%s",
                 be->attn_fp8              ? "fp8"
                 : be->act_dtype == C3_F32 ? "fp32"
                                           : "bf16");

out:
    free(pix);
    vae_free(vae);
    undkv_free(&kc);
    undkv_free(&ku);
    model_free(m);
    free(lat), free(vc), free(vu), free(ids_c), free(ids_u);
    tok_free(tok);
    if (have_vck) ckpt_close(&vck);
    if (*vdir) c3_rm_tree(vdir);
    wrap_free(b);
    c3_backend_destroy(real);
    ckpt_close(&mc);
    return rc;
#undef B_TRY
}

/* ------------------------------------------------------- the public call */

static int give_err(int rc, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

void cosmos3_bench_params_init(cosmos3_bench_params *p) {
    memset(p, 0, sizeof *p);
    p->preset = "tiny";
    p->device = "auto";
}

const char *cosmos3_bench_op_name(int i) {
    return i >= 0 && i < OP_N ? op_names[i] : "?";
}

void cosmos3_bench_result_free(cosmos3_bench_result *r) {
    if (!r) return;
    free(r->frame_rgb);
    r->frame_rgb = NULL;
    free(r->e2e_latents);
    r->e2e_latents = NULL;
    free(r->plan_text);
    r->plan_text = NULL;
}

static int bench_call(const cosmos3_bench_params *s, cosmos3_bench_result *r) {
    const char *name = s->preset ? s->preset : "tiny";
    const c3_mkmodel_preset *p = mkmodel_preset(name);
    if (!p)
        return c3_fail(C3_EUSAGE, "bench: unknown --preset '%s' (tiny, edge, nano or super)", name);
    if (s->layers < 0 || s->layers > 1024)
        return c3_fail(C3_EUSAGE, "bench: --layers %d must be in 0..1024", s->layers);
    if (s->steps < 0 || s->steps > 10000)
        return c3_fail(C3_EUSAGE, "bench: --steps %d must be in 1..10000", s->steps);
    if (s->e2e && s->skip_vae)
        return c3_fail(C3_EUSAGE,
                       "bench --e2e: the request ends in the VAE decode; drop --skip-vae");
    if (s->e2e && s->frames > 1)
        return c3_fail(C3_EUSAGE, "bench --e2e: times an image, prompt to PNG; drop --frames %d",
                       s->frames);
    if (s->e2e && s->steps && s->steps != C3_TLIST4_N)
        return c3_fail(
            C3_EUSAGE,
            "bench --e2e: the distilled request samples its %d fixed steps; drop --steps "
            "%d",
            C3_TLIST4_N, s->steps);
    if (s->attention && strcmp(s->attention, "bf16") && strcmp(s->attention, "fp8"))
        return c3_fail(C3_EUSAGE, "bench: attention '%s' must be bf16 or fp8", s->attention);
    if (plan_precision(s->precision) < 0)
        return c3_fail(C3_EUSAGE, "bench: precision '%s' must be auto, bf16 or fp8", s->precision);
    int rc = bench_run(s, p, r);
    if (rc) cosmos3_bench_result_free(r);
    return rc;
}

int cosmos3_bench(const cosmos3_bench_params *p, cosmos3_bench_result *out, char *err,
                  size_t errlen) {
    if (!p || !out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_bench: NULL argument"), err, errlen);
    memset(out, 0, sizeof *out);
    return give_err(bench_call(p, out), err, errlen);
}
