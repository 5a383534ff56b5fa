/* engine.c - cosmos3.h: open (plan, then load every rank), generate (tokenize,
 * the denoising loop, decode), cancel, close; the one event emitter. */
#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "backend_cpu.h"
#include "condition.h"
#include "denoise.h"
#include "frames.h"
#include "prompt.h"
#include "request.h"
#include "rng.h"
#include "scheduler.h"
#include "config.h"

/* ------------------------------------------------------------- errors */

/* The status with the thread's message copied into the caller's err. */
static int give_err(int rc, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

const char *cosmos3_version(void) {
    return COSMOS3_VERSION;
}

const char *cosmos3_features(void) {
#if COSMOS3_HAVE_CUDA
    return "cuda nccl";
#else
    return "";
#endif
}

/* ------------------------------------------------------------- events */

void engine_emit(cosmos3_engine *e, cosmos3_event *ev) {
    pthread_mutex_lock(&e->ev_mu);
    ev->job = e->job;
    cosmos3_event_fn fn = e->job ? e->job_fn : e->open_fn;
    void *user = e->job ? e->job_user : e->open_user;
    if (fn) fn(ev, user);
    pthread_mutex_unlock(&e->ev_mu);
}

void engine_emitf(cosmos3_engine *e, cosmos3_event_kind kind, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cosmos3_event ev = {.kind = kind, .text = text};
    engine_emit(e, &ev);
}

static void emit_stage(cosmos3_engine *e, const char *stage, bool begin, double seconds) {
    cosmos3_event ev = {
        .kind = COSMOS3_EV_STAGE, .stage = stage, .begin = begin, .seconds = seconds};
    engine_emit(e, &ev);
}

/* ------------------------------------------------------------- comms */

void engine_comms_abort(cosmos3_engine *e) {
    if (e->groups) comm_shm_abort(e->groups);
    if (e->set) e->set->abort(e->set);
}

int engine_comms_reset(cosmos3_engine *e) {
    if (e->groups) comm_shm_reset(e->groups);
    if (e->set) return e->set->reset(e->set);
    return C3_OK;
}

const c3_ckpt *engine_ckpt_of(const cosmos3_engine *e) {
    return &e->ck;
}
const c3_plan *engine_plan_of(const cosmos3_engine *e) {
    return &e->plan;
}

void cosmos3_cancel(cosmos3_engine *e) {
    if (e) e->cancel = 1;
}

/* ------------------------------------------------------------- models */

/* A built-in model by name (no '/'): the user's data folder, the installed
 * data folder, then the source tree's share/models. */
static bool named_model(const char *name, char *buf, size_t n) {
    if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) return false;
    char user[4096] = "";
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(user, sizeof user, "%s/cosmos3/models", xdg);
    else if (home && *home)
        snprintf(user, sizeof user, "%s/.local/share/cosmos3/models", home);
    const char *roots[] = {user, COSMOS3_DATADIR "/models", COSMOS3_SRCDIR "/share/models"};
    for (size_t i = 0; i < C3_ARRAY_LEN(roots); i++) {
        if (!roots[i][0]) continue;
        snprintf(buf, n, "%s/%s/model_index.json", roots[i], name);
        if (c3_file_exists(buf)) {
            snprintf(buf, n, "%s/%s", roots[i], name);
            return true;
        }
    }
    return false;
}

const char *cosmos3_model_dir(const char *model, char *buf, size_t n) {
    const char *env = getenv("COSMOS3_MODEL");
    const char *m = model && *model ? model : env && *env ? env : "demo";
    /* a folder that exists wins over a built-in name */
    if (c3_file_exists(m) || !named_model(m, buf, n)) snprintf(buf, n, "%s", m);
    return buf;
}

void cosmos3_model(const cosmos3_engine *e, cosmos3_model_info *o) {
    engine_model_info(&e->ck, o);
}

void engine_model_info(const c3_ckpt *ck, cosmos3_model_info *o) {
    const c3_model_card *k = &ck->card;
    memset(o, 0, sizeof *o);
    o->id = ck->model_id;
    o->dir = ck->dir;
    o->about = k->about;
    o->config_hash = ck->t.config_hash;
    o->width = k->width;
    o->height = k->height;
    o->steps = k->steps;
    o->guidance = k->guidance;
    o->shift = k->shift;
    o->schedule = k->schedule;
    o->guidance_interval = k->interval;
    o->guidance_lo = k->interval_lo;
    o->guidance_hi = k->interval_hi;
    o->vocabulary = (const char *const *)k->vocab;
    o->nvocabulary = k->nvocab;
    o->examples = (const char *const *)k->examples;
    o->nexamples = k->nexamples;
    o->default_system_prompt = ck->default_system_prompt;
    o->layers = ck->t.layers;
    o->hidden = ck->t.hidden;
    o->heads = ck->t.heads;
    o->kv_heads = ck->t.kv_heads;
    o->head_dim = ck->t.head_dim;
    o->latent_channels = ck->t.latent_ch;
    o->patch = ck->t.patch;
    o->vae_spatial = ck->v.scale_spatial;
    o->vae_temporal = ck->v.scale_temporal;
    o->sound_dim = ckpt_find(ck, "audio_proj_in.weight") ? ck->t.sound_dim : 0;
    {
        char *sd = c3_path_join(ck->dir, "sound_tokenizer");
        struct stat st;
        o->sound_tokenizer = stat(sd, &st) == 0 && S_ISDIR(st.st_mode);
        free(sd);
    }
    c3_sizes sz;
    ckpt_sizes(ck, &sz);
    o->parameters =
        sz.und_params + sz.gen_params + sz.shared_params + sz.vae_params + sz.other_params;
    o->parameter_bytes =
        sz.und_bytes + sz.gen_bytes + sz.shared_bytes + sz.vae_bytes + sz.other_bytes;
}

void cosmos3_layout_get(const cosmos3_engine *e, cosmos3_layout *o) {
    engine_plan_layout(&e->plan, o);
}

void engine_plan_layout(const c3_plan *p, cosmos3_layout *o) {
    memset(o, 0, sizeof *o);
    o->tp = p->tp;
    o->cfg_parallel = p->cfg;
    o->ulysses = p->sp;
    o->world = p->world;
    snprintf(o->device, sizeof o->device, "%s", p->cuda ? "cuda" : "cpu");
    snprintf(o->device_note, sizeof o->device_note, "%s", p->device_note);
    o->offload = p->offload;
    o->cfg_batch = p->cfg_batch;
    o->weights = p->weights;
    o->kv = p->kv;
    o->act = p->act;
    o->need = p->need;
    for (int r = 0; r < p->world && r < (int)C3_ARRAY_LEN(o->ranks); r++) {
        o->ranks[r].device = p->devices[r];
        snprintf(o->ranks[r].name, sizeof o->ranks[r].name, "%s", p->dev_name[r]);
        o->ranks[r].total = p->dev_total[r];
        o->ranks[r].free = p->dev_free[r];
    }
}

char *cosmos3_layout_text(const cosmos3_engine *e) {
    return engine_plan_text(&e->plan);
}

char *engine_plan_text(const c3_plan *p) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return xstrdup("");
    plan_print(f, p);
    fclose(f);
    return text;
}

int cosmos3_device_memory(int device, int64_t *free_bytes, int64_t *total_bytes) {
    char name[64];
    int64_t tot = -1, fr = -1;
    int rc = c3_gpu_count() > device && device >= 0
                 ? c3_gpu_info(device, name, sizeof name, &tot, &fr)
                 : C3_ERESOURCE;
    if (free_bytes) *free_bytes = rc ? -1 : fr;
    if (total_bytes) *total_bytes = rc ? -1 : tot;
    return rc ? C3_ERESOURCE : C3_OK;
}

int cosmos3_device_count(void) {
    return c3_gpu_count();
}

int cosmos3_device_info(int device, char *name, size_t n, int64_t *free_bytes, int64_t *total_bytes,
                        char *err, size_t errlen) {
    char nm[64] = "";
    int64_t tot = -1, fr = -1;
    int rc = device >= 0 && device < c3_gpu_count()
                 ? c3_gpu_info(device, nm, sizeof nm, &tot, &fr)
                 : c3_fail(C3_ERESOURCE, "no GPU %d (%d visible)", device, c3_gpu_count());
    if (name && n) snprintf(name, n, "%s", rc ? "" : nm);
    if (free_bytes) *free_bytes = rc ? -1 : fr;
    if (total_bytes) *total_bytes = rc ? -1 : tot;
    return give_err(rc, err, errlen);
}

/* ------------------------------------------------------------- opening */

void cosmos3_open_params_init(cosmos3_open_params *p) {
    memset(p, 0, sizeof *p);
}

static int load_rank(cosmos3_engine *e, c3_rank *r, void *ud) {
    (void)ud;
    C3_TRY(model_load(&r->model, &e->ck, r->be, &r->shard));
    model_batch(r->model, e->plan.cfg_batch);
    return C3_OK;
}

typedef struct {
    cosmos3_engine *e;
    c3_rank *rk;
    int (*fn)(cosmos3_engine *, c3_rank *, void *);
    void *ud;
} rank_thread;

static void *rank_main(void *arg) {
    rank_thread *a = arg;
    a->rk->rc = a->fn(a->e, a->rk, a->ud);
    if (a->rk->rc) {
        snprintf(a->rk->err, sizeof a->rk->err, "%s", c3_errmsg());
        /* a failing rank stops the others: they see cancel between layers,
         * and the communicator is aborted so no one waits forever */
        a->e->cancel = 1;
        engine_comms_abort(a->e);
    }
    return NULL;
}

int engine_run_ranks(cosmos3_engine *e, int (*fn)(cosmos3_engine *e, c3_rank *rk, void *ud),
                     void *ud, bool prefix) {
    const c3_plan *p = &e->plan;
    rank_thread args[C3_MAX_RANKS];
    for (int r = 0; r < p->world; r++) {
        args[r] = (rank_thread){e, &e->ranks[r], fn, ud};
        e->ranks[r].rc = 0;
        if (pthread_create(&e->ranks[r].thread, NULL, rank_main, &args[r]) != 0) {
            e->cancel = 1;
            engine_comms_abort(e);
            for (int q = 0; q < r; q++)
                pthread_join(e->ranks[q].thread, NULL);
            return c3_fail(C3_EFAIL, "cannot start rank thread %d", r);
        }
    }
    for (int r = 0; r < p->world; r++)
        pthread_join(e->ranks[r].thread, NULL);
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < p->world; r++) {
            const c3_rank *rk = &e->ranks[r];
            if (rk->rc && (pass == 1 || rk->rc != C3_ECANCEL))
                return prefix && p->world > 1 ? c3_fail(rk->rc, "rank %d: %s", r, rk->err)
                                              : c3_fail(rk->rc, "%s", rk->err);
        }
    return C3_OK;
}

typedef struct {
    const char *path;
    pthread_t thread;
    bool started;
    c3_tokenizer *tok;
    int rc;
    double seconds; /* the load's own time */
    char err[1024];
} tok_job;

static void *tok_thread(void *arg) {
    tok_job *j = arg;
    double t0 = c3_now();
    j->rc = tok_load(&j->tok, j->path);
    j->seconds = c3_now() - t0;
    if (j->rc) snprintf(j->err, sizeof j->err, "%s", c3_errmsg());
    return NULL;
}
/* Wait for the tokenizer thread; its error becomes this thread's. */
static int tok_join(tok_job *j, c3_tokenizer **out) {
    pthread_join(j->thread, NULL);
    j->started = false;
    *out = j->tok;
    return j->rc ? c3_fail(j->rc, "%s", j->err) : C3_OK;
}

/* Backends and communicators of every rank of the plan. */
static int make_ranks(cosmos3_engine *e) {
    const c3_plan *p = &e->plan;
    for (int r = 0; r < p->world; r++) {
        c3_rank *rk = &e->ranks[r];
        rk->rank = r;
        if (p->cuda)
            C3_TRY(c3_backend_cuda(p->devices[r], &rk->be));
        else
            rk->be = c3_backend_cpu();
        rk->be->attn_fp8 = e->attn_fp8;
    }
    e->comm = comm_choose(p->cuda, p->world, p->devices);
    /* COSMOS3_COMM=device: the device-memory communicator on distinct GPUs too */
    const char *force = getenv("COSMOS3_COMM");
    if (e->comm == C3_COMM_NCCL && force && !strcmp(force, "device")) e->comm = C3_COMM_DEVICE;
    c3_backend *bes[C3_MAX_RANKS];
    for (int r = 0; r < p->world; r++)
        bes[r] = e->ranks[r].be;
    if (e->comm == C3_COMM_SHM) C3_TRY(comm_shm_create(p, &e->groups));
    if (e->comm == C3_COMM_NCCL) C3_TRY(comm_nccl_create(p, bes, &e->set));
    if (e->comm == C3_COMM_DEVICE) C3_TRY(comm_dev_create(p, bes, &e->set));
    for (int r = 0; r < p->world; r++) {
        c3_rank *rk = &e->ranks[r];
        if (e->groups) comm_shm_rank(e->groups, r, &rk->world, &rk->tp, &rk->sp, &rk->cfg);
        if (e->set) {
            rk->world = e->set->get(e->set, r, 0);
            rk->tp = e->set->get(e->set, r, 1);
            rk->sp = e->set->get(e->set, r, 2);
            rk->cfg = e->set->get(e->set, r, 3);
        }
        rk->shard = (c3_shard){.tp_rank = plan_tp_rank(p, r),
                               .tp_size = p->tp,
                               .tp = p->tp > 1 ? rk->tp : NULL,
                               .sp_rank = plan_sp_rank(p, r),
                               .sp_size = p->sp,
                               .sp = p->sp > 1 ? rk->sp : NULL,
                               .offload = p->offload && p->cuda,
                               .precision = e->precision,
                               .cancel = &e->cancel};
    }
    return C3_OK;
}

/* COSMOS3_PREFAULT=0: no prefault threads (the loader faults the pages in
 * as it reads them, the comparison for the launch measurement). */
static bool prefault_wanted(void) {
    const char *v = getenv("COSMOS3_PREFAULT");
    return !(v && !strcmp(v, "0"));
}

/* Every mapped file of the checkpoint (the shards, the VAE) prefaulted on
 * threads of their own while the backends and the tokenizer start; not
 * when they exceed half the memory (the first pages would be evicted
 * before the loader reads them, and read twice). */
static st_prefault *prefault_start(const c3_ckpt *ck) {
    if (!prefault_wanted()) return NULL;
    const st_file **f = xcalloc((size_t)ck->nshards + 1, sizeof *f);
    int n = 0;
    double bytes = 0;
    for (int i = 0; i < ck->nshards; i++) {
        f[n++] = &ck->shards[i];
        bytes += (double)ck->shards[i].size;
    }
    if (ck->has_vae) {
        f[n++] = &ck->vae;
        bytes += (double)ck->vae.size;
    }
    long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    if (pages > 0 && pg > 0 && bytes > 0.5 * (double)pages * (double)pg) n = 0;
    st_prefault *pf = st_prefault_start(f, n, 0);
    free(f);
    return pf;
}

static int engine_open(const cosmos3_open_params *op, cosmos3_engine **out) {
    *out = NULL;
    tok_job tj = {0};
    st_prefault *pf = NULL;
    cosmos3_engine *e = xcalloc(1, sizeof *e);
    pthread_mutex_init(&e->ev_mu, NULL);
    e->open_fn = op->on_event;
    e->open_user = op->user;
    int tp = op->tp ? op->tp : 1, cfg = op->cfg_parallel ? op->cfg_parallel : 1;
    int sp = op->ulysses ? op->ulysses : 1;
    int rc = C3_OK;
    if (tp < 1 || cfg < 1 || sp < 1)
        rc = c3_fail(C3_EUSAGE, "tp, cfg-parallel and ulysses must be at least 1");
    else if (op->threads < 0)
        rc = c3_fail(C3_EUSAGE, "threads %d must be 0 (all cores) or more", op->threads);
    else if (op->precision && strcmp(op->precision, "auto") && strcmp(op->precision, "bf16") &&
             strcmp(op->precision, "fp8"))
        rc = c3_fail(C3_EUSAGE, "precision '%s' must be auto, bf16 or fp8", op->precision);
    else if (op->attention && strcmp(op->attention, "bf16") && strcmp(op->attention, "fp8"))
        rc = c3_fail(C3_EUSAGE, "attention '%s' must be bf16 or fp8", op->attention);
    e->attn_fp8 = op->attention && !strcmp(op->attention, "fp8");
    e->precision = !op->precision || !strcmp(op->precision, "auto") ? C3_PREC_AUTO
                   : !strcmp(op->precision, "bf16")                 ? C3_PREC_BF16
                                                                    : C3_PREC_FP8;
    if (rc) goto fail;
    cpu_set_threads(op->threads);
    char dir[4096];
    cosmos3_model_dir(op->model, dir, sizeof dir);
    double t0 = c3_now();
    e->load.open_at = t0;
    emit_stage(e, "load", true, 0);
    rc = ckpt_open(&e->ck, dir, true);
    if (rc) goto fail;
    double t_read = c3_now() - t0; /* the headers parsed, the shards mapped */
    /* plan before any weight is read, at the size asked (the model's default image) */
    cosmos3_request rq;
    cosmos3_request_init(&rq);
    if (op->plan_width > 0) rq.width = op->plan_width;
    if (op->plan_height > 0) rq.height = op->plan_height;
    if (op->plan_frames > 0) rq.frames = op->plan_frames;
    cosmos3_settings st;
    rc = request_resolve(&rq, &e->ck, &st);
    if (rc) goto fail;
    if (e->ck.s.distilled && cfg > 1) { /* vLLM-Omni refuses it too */
        rc = c3_fail(C3_EUSAGE,
                     "--cfg-parallel %d: this distilled checkpoint runs one forward per step (no "
                     "unconditional branch); use --cfg-parallel 1 and --tp or --ulysses instead",
                     cfg);
        goto fail;
    }
    c3_sizes sz;
    ckpt_sizes(&e->ck, &sz);
    rc = plan_make(&e->plan, &e->ck.t, &sz, tp, cfg, sp, op->device ? op->device : "auto", op->gpus,
                   op->offload, e->precision, st.width, st.height, st.frames);
    if (rc) goto fail;
    /* which device runs and why: once, before anything loads (--device cpu: the user said so) */
    if (!op->device || strcmp(op->device, "cpu") != 0)
        engine_emitf(e, e->plan.device_warn ? COSMOS3_EV_WARNING : COSMOS3_EV_DEVICE, "%s",
                     e->plan.device_note);
    /* the tokenizer loads on its own thread while the weights load */
    tj.path = e->ck.tokenizer_json;
    if (pthread_create(&tj.thread, NULL, tok_thread, &tj) != 0) {
        rc = c3_fail(C3_EFAIL, "cannot start the tokenizer thread");
        goto fail;
    }
    tj.started = true;
    /* the shards' pages mapped beside the backends' creation and the tokenizer */
    pf = prefault_start(&e->ck);
    double ta = c3_now();
    rc = make_ranks(e);
    e->load.backends = c3_now() - ta;
    if (rc) goto fail;
    double t_pf = 0;
    st_prefault_join(pf, &e->load.prefault_bytes, &t_pf);
    pf = NULL;
    e->load.read = t_read + t_pf;
    if (e->plan.offload && !e->plan.cuda)
        engine_emitf(
            e, COSMOS3_EV_LOG,
            "note: --offload does nothing on the CPU backend (weights live in host memory)");
    ta = c3_now();
    rc = engine_run_ranks(e, load_rank, NULL, true); /* every rank in parallel */
    e->load.weights = c3_now() - ta;
    ta = c3_now();
    if (rc == C3_OK) rc = vae_load(&e->vae, &e->ck, e->ranks[0].be);
    e->load.vae = c3_now() - ta;
    if (rc == C3_OK) rc = tok_join(&tj, &e->tok);
    e->load.tokenizer = tj.seconds;
    if (rc) goto fail;
    const c3_plan *p = &e->plan;
    for (int r = 0; r < p->world; r++) {
        const c3_backend *be = e->ranks[r].be;
        cosmos3_event ev = {.kind = COSMOS3_EV_LOADED,
                            .rank = r,
                            .device = p->devices[r],
                            .seconds = c3_now() - t0,
                            .mem_weights = be->mem[0],
                            .mem_kv = be->mem[1],
                            .mem_act = be->mem[2],
                            .dev_total = p->dev_total[r],
                            .dev_free = p->dev_free[r],
                            .text = p->dev_name[r]};
        engine_emit(e, &ev);
    }
    e->load.total = c3_now() - t0;
    emit_stage(e, "load", false, e->load.total);
    *out = e;
    return C3_OK;
fail:
    st_prefault_join(pf, NULL, NULL);
    if (tj.started) {
        int rc2 = rc;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", c3_errmsg());
        c3_tokenizer *t = NULL;
        tok_join(&tj, &t);
        tok_free(t);
        rc = c3_fail(rc2, "%s", msg);
    }
    cosmos3_close(e);
    return rc;
}

int cosmos3_open(const cosmos3_open_params *p, cosmos3_engine **out, char *err, size_t errlen) {
    cosmos3_open_params def;
    if (!p) {
        cosmos3_open_params_init(&def);
        p = &def;
    }
    if (!out) return give_err(c3_fail(C3_EUSAGE, "cosmos3_open: out is NULL"), err, errlen);
    return give_err(engine_open(p, out), err, errlen);
}

void cosmos3_close(cosmos3_engine *e) {
    if (!e) return;
    vae_free(e->vae);
    vae_enc_free(e->venc);
    avae_free(e->avae);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        for (int b = 0; b < 2; b++) {
            undkv_free(&e->ranks[r].und[b]);
            free(e->ranks[r].und_ids[b]);
        }
    for (int r = 0; r < C3_MAX_RANKS; r++)
        model_free(e->ranks[r].model);
    /* communicators use the backends' streams: they go first */
    if (e->set) e->set->destroy(e->set);
    if (e->groups) comm_shm_destroy(e->groups);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        if (e->ranks[r].be) c3_backend_destroy(e->ranks[r].be);
    tok_free(e->tok);
    ckpt_close(&e->ck);
    pthread_mutex_destroy(&e->ev_mu);
    free(e);
}

/* ------------------------------------------------------------- requests */

int cosmos3_resolve(const cosmos3_engine *e, const cosmos3_request *r, cosmos3_settings *out,
                    char *err, size_t errlen) {
    if (!r || !out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_resolve: NULL argument"), err, errlen);
    return give_err(request_resolve(r, e ? &e->ck : NULL, out), err, errlen);
}

static void add_warning(void *ud, const char *line) {
    cosmos3_engine *e = ud;
    e->warnings = xrealloc(e->warnings, sizeof(char *) * (size_t)(e->nwarnings + 1));
    e->warnings[e->nwarnings++] = xstrdup(line);
    engine_emitf(e, COSMOS3_EV_WARNING, "%s", line);
}

/* VAE progress: one event per latent frame; a cancel stops the decode. */
typedef struct {
    cosmos3_engine *e;
    double t0;
} vae_progress;

static int on_vae_frame(void *ud, int t, int T) {
    vae_progress *vp = ud;
    cosmos3_event ev = {
        .kind = COSMOS3_EV_VAE, .frame = t + 1, .frames = T, .seconds = c3_now() - vp->t0};
    engine_emit(vp->e, &ev);
    return vp->e->cancel ? c3_fail(C3_ECANCEL, "cancelled") : C3_OK;
}

/* --attention fp8: once per engine, a warning when a GEN attention call ran
 * in 16 bits instead (the reason the backend gave), and a log line saying
 * which attention ran. True when every GEN call took the FP8 path. */
static bool attn_fp8_note(cosmos3_engine *e) {
    if (!e->attn_fp8) return false;
    int64_t calls = 0, declined = 0;
    const char *why = NULL;
    for (int r = 0; r < e->plan.world; r++) {
        const c3_backend *be = e->ranks[r].be;
        calls += be->attn_fp8_calls;
        declined += be->attn_fp8_declined;
        if (!why) why = be->attn_fp8_why;
    }
    if (declined && !e->attn_warned) {
        char w[256];
        snprintf(w, sizeof w,
                 "--attention fp8: %s; %lld GEN attention calls ran in %s instead (%lld in FP8)",
                 why ? why : "not taken", (long long)declined, e->plan.cuda ? "bf16" : "fp32",
                 (long long)calls);
        add_warning(e, w);
        e->attn_warned = true;
    } else if (!declined) {
        engine_emitf(e, COSMOS3_EV_LOG,
                     "attention: fp8 on %lld GEN calls (the UND tower's causal attention in %s)",
                     (long long)calls, e->plan.cuda ? "bf16" : "fp32");
    }
    return !declined && calls > 0;
}

/* Joint sound: the sound decoder (loaded by the first sound request), the
 * clip's sound length and its initial noise (*s0, the request's or the
 * seed's after every draw of the latents) into j. C3_EMODEL with one line
 * when the checkpoint cannot make sound. */
static int sound_setup(cosmos3_engine *e, const cosmos3_request *rq, const cosmos3_settings *s,
                       c3_denoise *j, float **s0) {
    const c3_tconfig *tc = &e->ck.t;
    if (!model_has_sound(e->ranks[0].model))
        return c3_fail(
            C3_EMODEL,
            "%s: the transformer has no sound heads (audio_proj_in, audio_proj_out); this "
            "checkpoint makes no sound: leave out --sound",
            e->ck.dir);
    if (!e->avae) {
        char *dir = c3_path_join(e->ck.dir, "sound_tokenizer");
        struct stat st;
        int rc;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            rc =
                c3_fail(C3_EMODEL,
                        "%s: no sound_tokenizer/ folder; this checkpoint makes no sound: leave out "
                        "--sound or use a checkpoint with its sound tokenizer",
                        e->ck.dir);
        else
            rc = avae_load(&e->avae, dir);
        free(dir);
        C3_TRY(rc);
    }
    const c3_aconfig *ac = avae_config(e->avae);
    if (ac->latent_dim != tc->sound_dim)
        return c3_fail(C3_EMODEL,
                       "%s/sound_tokenizer/config.json: vocoder_input_dim %d differs from the "
                       "transformer's sound_dim %d",
                       e->ck.dir, ac->latent_dim, tc->sound_dim);
    int64_t Ts = avae_sound_len(s->frames, s->fps, ac->sampling_rate, ac->hop);
    if (Ts < 1 || Ts > (1 << 20))
        return c3_fail(C3_EUSAGE, "sound: %d frames at %g fps give no sound latents", s->frames,
                       s->fps);
    j->Ts = (int)Ts;
    j->ns = (int64_t)tc->sound_dim * Ts;
    *s0 = xmalloc((size_t)j->ns * sizeof(float));
    if (rq->sound_noise) {
        if (rq->sound_noise_len != (size_t)j->ns)
            return c3_fail(C3_EINPUT,
                           "sound noise has %zu floats; this clip needs [%d, %lld] = %lld",
                           rq->sound_noise_len, tc->sound_dim, (long long)Ts, (long long)j->ns);
        memcpy(*s0, rq->sound_noise, (size_t)j->ns * sizeof(float));
        size_t bad = c3_first_nonfinite(*s0, (size_t)j->ns);
        if (bad < (size_t)j->ns)
            return c3_fail(C3_EINPUT,
                           "sound noise holds %g at element %zu; noise must be finite numbers",
                           (double)(*s0)[bad], bad);
    } else {
        rng_normal(s->seed, denoise_sound_offset(s->steps, j->n, j->ns, 0), *s0, j->ns);
    }
    j->s_init = *s0;
    j->s_final = xmalloc((size_t)j->ns * sizeof(float));
    return C3_OK;
}

/* The steps of one generation into res (allocated by the caller). */
static int generate(cosmos3_engine *e, const cosmos3_request *rq, cosmos3_result *res) {
    double t_start = c3_now();
    const c3_load_times *ld = &e->load;
    res->clock_open = ld->open_at;
    res->clock_generate = t_start;
    res->t_load = ld->total;
    res->t_load_read = ld->read;
    res->t_load_backends = ld->backends;
    res->t_load_weights = ld->weights;
    res->t_load_vae = ld->vae;
    res->t_load_tokenizer = ld->tokenizer;
    res->load_prefault_bytes = ld->prefault_bytes;
    const c3_tconfig *tc = &e->ck.t;
    cosmos3_settings s;
    c3_denoise j = {.e = e, .s = &s};
    float *x0 = NULL, *pixels = NULL, *sx0 = NULL;
    c3_condition cd = {0};
    /* the conditioning picture or clip (condition.c) */
    const cosmos3_frames *cm = rq->image ? rq->image : rq->video;
    c3_media media = {0};
    if (cm)
        media = (c3_media){
            .rgb = cm->rgb, .width = cm->width, .height = cm->height, .frames = cm->frames};
    c3_cond_input ci = {.image = rq->image ? &media : NULL,
                        .video = rq->video ? &media : NULL,
                        .indexes = rq->condition_frames,
                        .nindexes = rq->condition_frames ? rq->ncondition_frames : 0,
                        .keep =
                            rq->condition_keep == COSMOS3_KEEP_LAST ? C3_KEEP_LAST : C3_KEEP_FIRST};
    int rc = request_resolve(rq, &e->ck, &s);
    if (rc == C3_OK && (!rq->prompt || !rq->prompt[0]))
        rc = c3_fail(C3_EUSAGE, "no prompt; give the request a prompt");
    if (rc == C3_OK) rc = cond_check(&ci, s.frames, s.width, s.height, e->ck.v.scale_temporal);
    if (rc) goto out;
    request_warnings(rq->prompt, &s, &e->ck, add_warning, e);
    /* random seeds stay below 2^53 so every JSON reader keeps them exact */
    if (!s.seed_given) s.seed = rng_random_seed() & ((1ull << 53) - 1);
    /* the seed when the run starts (a long run can be reproduced before it ends) */
    if (!rq->noise) engine_emitf(e, COSMOS3_EV_LOG, "seed %llu", (unsigned long long)s.seed);
    /* tokenize */
    double t0 = c3_now();
    emit_stage(e, "tokenize", true, 0);
    c3_prompt_opts po = {.system_prompt = s.system_prompt,
                         .templates = s.templates,
                         .width = s.width,
                         .height = s.height,
                         .frames = s.frames,
                         .fps = s.fps};
    rc = prompt_ids(e->tok, rq->prompt, false, &po, &j.ids[0], &j.L[0]);
    if (rc == C3_OK) rc = prompt_ids(e->tok, s.negative_prompt, true, &po, &j.ids[1], &j.L[1]);
    if (rc) goto out;
    for (int b = 0; b < 2; b++) { /* prompt_ids keeps the first C3_MAX_SEQ ids and appends two */
        if (j.L[b] < C3_MAX_SEQ + 2) continue;
        char w[160];
        snprintf(w, sizeof w,
                 "the %s prompt (with its template) reaches the %d-token limit; the rest of it is "
                 "cut off",
                 b ? "negative" : "positive", C3_MAX_SEQ);
        add_warning(e, w);
    }
    res->L_cond = j.L[0];
    res->L_uncond = j.L[1];
    res->t_tokenize = c3_now() - t0;
    emit_stage(e, "tokenize", false, res->t_tokenize);
    /* latents [1, C, T, h, w] */
    j.T = s.latent_shape[2];
    j.h = s.latent_shape[3];
    j.w = s.latent_shape[4];
    j.n = (int64_t)tc->latent_ch * j.T * j.h * j.w;
    x0 = xmalloc((size_t)j.n * sizeof(float));
    if (rq->noise) {
        if (rq->noise_len != (size_t)j.n) {
            rc = c3_fail(C3_EINPUT,
                         "noise has %zu floats; this size needs [1, %d, %d, %d, %d] = %lld",
                         rq->noise_len, tc->latent_ch, j.T, j.h, j.w, (long long)j.n);
            goto out;
        }
        memcpy(x0, rq->noise, (size_t)j.n * sizeof(float));
        size_t bad = c3_first_nonfinite(x0, (size_t)j.n);
        if (bad < (size_t)j.n) {
            rc = c3_fail(C3_EINPUT, "noise holds %g at element %zu; noise must be finite numbers",
                         (double)x0[bad], bad);
            goto out;
        }
    } else {
        rng_normal(s.seed, 0, x0, j.n);
    }
    if (cond_given(&ci)) { /* x0 on the pinned frames: mask * x0 + (1 - mask) * noise */
        emit_stage(e, "encode", true, 0);
        t0 = c3_now();
        if (!e->venc) rc = vae_enc_load(&e->venc, &e->ck, e->ranks[0].be);
        if (rc == C3_OK)
            rc = cond_prepare(&ci, e->venc, s.frames, s.width, s.height, e->ck.v.scale_temporal,
                              &cd);
        if (rc) goto out;
        cond_mix(&cd, x0);
        j.pinned = cd.pinned;
        j.cond = &cd; /* the distilled sampler re-anchors the pinned frames after each step */
        res->t_encode = c3_now() - t0;
        emit_stage(e, "encode", false, res->t_encode);
    }
    j.x_init = x0;
    j.x_final = xmalloc((size_t)j.n * sizeof(float));
    if (rq->sound && (rc = sound_setup(e, rq, &s, &j, &sx0))) goto out;
    /* schedule */
    sched_parse(s.schedule, &j.sched);
    j.sigmas = xmalloc((size_t)(s.steps + 1) * sizeof(double));
    j.timesteps = xmalloc((size_t)s.steps * sizeof(double));
    j.step_noise = rq->step_noise;
    if (e->ck.s.distilled) /* the checkpoint's t_list and shift */
        rc = sched_fixed(e->ck.s.t_list, e->ck.s.n_tlist, e->ck.s.flow_shift,
                         e->ck.s.num_train_timesteps, j.sigmas, j.timesteps);
    else
        rc = sched_sigmas(j.sched, s.steps, s.shift, e->ck.s.sigma_min, e->ck.s.sigma_max, j.sigmas,
                          j.timesteps);
    if (rc) goto out;
    const c3_plan *p = &e->plan;
    int64_t h2d_bytes0 = 0;
    double h2d_sec0 = 0;
    if (p->offload && p->cuda) model_offload_stats(e->ranks[0].model, &h2d_bytes0, &h2d_sec0);
    rc = denoise_run(&j);
    if (rc == C3_OK) rc = denoise_check_finite(j.x_final, j.n, "the final latents", "transformer");
    if (rc == C3_OK && j.ns)
        rc = denoise_check_finite(j.s_final, j.ns, "the final sound latents", "transformer");
    if (rc) goto out;
    res->t_und = j.t_und;
    res->t_denoise = j.t_loop;
    if (j.steps_run) {
        res->t_step_mean = j.step_sum / j.steps_run;
        res->t_cond_mean = j.cond_sum / j.steps_run;
        res->t_uncond_mean = j.uncond_sum / j.steps_run;
        res->t_step_first = j.step_first;
        res->t_step_host_mean = j.host_sum / j.steps_run;
        if (j.steps_run > 1)
            res->t_step_rest_mean = (j.step_sum - j.step_first) / (j.steps_run - 1);
    }
    res->clock_first_step = j.first_step_at;
    /* decode */
    t0 = c3_now();
    emit_stage(e, "vae", true, 0);
    int F, H, W;
    vae_progress vp = {e, t0};
    rc = vae_decode(e->vae, j.x_final, j.T, j.h, j.w, &pixels, &F, &H, &W, on_vae_frame, &vp);
    if (rc == C3_OK && e->cancel) rc = c3_fail(C3_ECANCEL, "cancelled");
    if (rc == C3_OK)
        rc = denoise_check_finite(pixels, (int64_t)F * H * W * 3, "the decoded pixels", "VAE");
    if (rc) goto out;
    res->t_vae = c3_now() - t0;
    emit_stage(e, "vae", false, res->t_vae);
    res->rgb = xmalloc((size_t)F * H * W * 3);
    frames_to_rgb(pixels, F, H, W, res->rgb);
    res->width = W;
    res->height = H;
    res->frames = F;
    res->fps = s.fps;
    if (rq->want_latents) {
        res->latents = j.x_final;
        j.x_final = NULL;
        memcpy(res->latent_shape, s.latent_shape, sizeof res->latent_shape);
    }
    if (j.ns) { /* the sound decoder: [channels, Ts * hop] PCM */
        t0 = c3_now();
        emit_stage(e, "sound", true, 0);
        const c3_aconfig *ac = avae_config(e->avae);
        res->sound_channels = ac->out_channels;
        res->sound_rate = ac->sampling_rate;
        res->sound_samples = (int64_t)j.Ts * ac->hop;
        res->sound = xmalloc((size_t)(res->sound_channels * res->sound_samples) * sizeof(float));
        rc = avae_decode(e->avae, j.s_final, j.Ts, res->sound, NULL);
        if (rc == C3_OK)
            rc = denoise_check_finite(res->sound, res->sound_channels * res->sound_samples,
                                      "the decoded sound", "sound tokenizer");
        if (rc) goto out;
        res->t_sound = c3_now() - t0;
        emit_stage(e, "sound", false, res->t_sound);
        if (rq->want_latents) {
            res->sound_latents = j.s_final;
            j.s_final = NULL;
            res->sound_latent_shape[0] = e->ck.t.sound_dim;
            res->sound_latent_shape[1] = j.Ts;
        }
    }
    /* the settings used */
    res->prompt = xstrdup(rq->prompt);
    res->negative_prompt = xstrdup(s.negative_prompt);
    res->seed = s.seed;
    res->noise_given = rq->noise != NULL;
    res->steps = s.steps;
    res->guidance = s.guidance;
    res->shift = s.shift;
    snprintf(res->schedule, sizeof res->schedule, "%s", s.schedule);
    snprintf(res->sampler, sizeof res->sampler, "%s", s.sampler);
    res->guidance_interval = s.guidance_interval;
    res->guidance_lo = s.guidance_lo;
    res->guidance_hi = s.guidance_hi;
    res->system_prompt = s.system_prompt;
    res->templates = s.templates;
    snprintf(res->model_id, sizeof res->model_id, "%s", e->ck.model_id);
    res->config_hash = tc->config_hash;
    res->tp = p->tp;
    res->cfg_parallel = p->cfg;
    res->ulysses = p->sp;
    snprintf(res->device, sizeof res->device, "%s", p->cuda ? "cuda" : "cpu");
    res->mem_peak = e->ranks[0].be->mem_peak;
    snprintf(res->attention, sizeof res->attention, "%s",
             attn_fp8_note(e) ? "fp8"
             : p->cuda        ? "bf16"
                              : "fp32");
    snprintf(res->precision, sizeof res->precision, "%s",
             e->precision == C3_PREC_FP8    ? "fp8"
             : e->precision == C3_PREC_BF16 ? "bf16"
                                            : "auto");
    if (p->offload && p->cuda) { /* rank 0's weight stream over this generation */
        int64_t bytes;
        double sec;
        model_offload_stats(e->ranks[0].model, &bytes, &sec);
        res->h2d_bytes = bytes - h2d_bytes0;
        res->h2d_seconds = sec - h2d_sec0;
    }
    res->t_total = c3_now() - t_start;
out:
    cond_free(&cd);
    free(j.ids[0]);
    free(j.ids[1]);
    free(x0);
    free(j.x_final);
    free(sx0);
    free(j.s_final);
    free(j.sigmas);
    free(j.timesteps);
    free(pixels);
    return rc;
}

int cosmos3_generate(cosmos3_engine *e, const cosmos3_request *r, cosmos3_result **out, char *err,
                     size_t errlen) {
    if (out) *out = NULL;
    if (!e || !r || !out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_generate: NULL argument"), err, errlen);
    int idle = 0;
    if (!__atomic_compare_exchange_n(&e->busy, &idle, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return give_err(c3_fail(C3_EUSAGE, "the engine is busy with another generation"), err,
                        errlen);
    e->cancel = 0;
    pthread_mutex_lock(&e->ev_mu);
    e->job = ++e->next_job;
    e->job_fn = r->on_event ? r->on_event : e->open_fn;
    e->job_user = r->on_event ? r->user : e->open_user;
    pthread_mutex_unlock(&e->ev_mu);
    cosmos3_result *res = xcalloc(1, sizeof *res);
    res->job = e->job;
    int rc = generate(e, r, res);
    res->warnings = e->warnings;
    res->nwarnings = e->nwarnings;
    e->warnings = NULL;
    e->nwarnings = 0;
    /* the job's one end (the message kept: a callback may record its own) */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? c3_errmsg() : "");
    if (rc == C3_ECANCEL) {
        cosmos3_event ev = {.kind = COSMOS3_EV_CANCELLED, .status = rc};
        engine_emit(e, &ev);
    } else if (rc) {
        cosmos3_event ev = {.kind = COSMOS3_EV_FAILED, .status = rc, .text = msg};
        engine_emit(e, &ev);
    } else {
        cosmos3_event ev = {.kind = COSMOS3_EV_DONE, .seconds = res->t_total};
        engine_emit(e, &ev);
    }
    pthread_mutex_lock(&e->ev_mu);
    e->job = 0;
    pthread_mutex_unlock(&e->ev_mu);
    if (rc)
        cosmos3_result_free(res);
    else
        *out = res;
    __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
    if (rc) c3_fail(rc, "%s", msg);
    return give_err(rc, err, errlen);
}

void cosmos3_result_free(cosmos3_result *r) {
    if (!r) return;
    free(r->rgb);
    free(r->latents);
    free(r->sound);
    free(r->sound_latents);
    free(r->prompt);
    free(r->negative_prompt);
    for (int i = 0; i < r->nwarnings; i++)
        free(r->warnings[i]);
    free(r->warnings);
    free(r);
}

/* ------------------------------------------------------ first-last clip */

int cosmos3_first_last(const cosmos3_frames *start, const cosmos3_frames *end, int frames,
                       int width, int height, int vae_temporal, uint8_t **rgb, int *idx, int max,
                       int *n, char *err, size_t errlen) {
    if (!start || !end || !rgb || !idx || !n)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_first_last: NULL argument"), err, errlen);
    c3_media a = {.rgb = start->rgb,
                  .width = start->width,
                  .height = start->height,
                  .frames = start->frames},
             b = {.rgb = end->rgb,
                  .width = end->width,
                  .height = end->height,
                  .frames = end->frames},
             clip;
    return give_err(
        cond_first_last(&a, &b, frames, width, height, vae_temporal, rgb, &clip, idx, max, n), err,
        errlen);
}
