/* loader.c - cosmos3_open's work (loader.h): the model folder found, the
 * checkpoint read and planned, the prefault and tokenizer threads beside
 * the ranks' backends and communicators, the ranks' weights, the VAE. */
#include "loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "backend_cpu.h"
#include "engine.h"
#include "env.h"
#include "request.h"
#include "config.h"

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
    const char *env = c3_env()->model;
    const char *m = model && *model ? model : env ? env : "demo";
    /* a folder that exists wins over a built-in name */
    if (c3_file_exists(m) || !named_model(m, buf, n)) snprintf(buf, n, "%s", m);
    return buf;
}

/* ------------------------------------------------------------- opening */

static int load_rank(c3_runtime *rt, c3_rank *r, void *ud) {
    const cosmos3_engine *e = ud;
    C3_TRY(model_load(&r->model, &e->ck, r->be, &r->shard));
    /* branches as one batch: both CFG branches on one rank where the plan
     * fits them; with CFG parallelism (no Ulysses) a batch's requests' */
    const c3_plan *p = &rt->plan;
    model_batch(r->model, p->cfg_batch || (p->cfg == 2 && p->sp == 1));
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

/* Backends, communicators and weight shards of every rank of the plan. */
static int make_ranks(cosmos3_engine *e) {
    c3_runtime *rt = &e->rt;
    const c3_plan *p = &rt->plan;
    for (int r = rt->lo; r < rt->lo + rt->nlocal; r++) {
        c3_rank *rk = &rt->ranks[r];
        rk->rank = r;
        if (p->cuda)
            C3_TRY(c3_backend_cuda(p->devices[r], &rk->be));
        else
            rk->be = c3_backend_cpu();
        rk->be->attn_fp8 = e->attn_fp8;
    }
    C3_TRY(rt_comms_open(rt));
    for (int r = rt->lo; r < rt->lo + rt->nlocal; r++) {
        c3_rank *rk = &rt->ranks[r];
        rk->shard = (c3_shard){.tp_rank = plan_tp_rank(p, r),
                               .tp_size = p->tp,
                               .tp = p->tp > 1 ? rk->tp : NULL,
                               .sp_rank = plan_sp_rank(p, r),
                               .sp_size = p->sp,
                               .sp = p->sp > 1 ? rk->sp : NULL,
                               .offload = p->offload && p->cuda,
                               .precision = e->precision,
                               .cancel = &rt->cancel};
    }
    return C3_OK;
}

/* COSMOS3_PREFAULT=0: no prefault threads (the loader faults the pages in
 * as it reads them, the comparison for the launch measurement). */
static bool prefault_wanted(void) { return c3_env()->prefault; }

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

int loader_open(const cosmos3_open_params *op, cosmos3_engine **out) {
    *out = NULL;
    tok_job tj = {0};
    st_prefault *pf = NULL;
    cosmos3_engine *e = xcalloc(1, sizeof *e);
    rt_init(&e->rt, op->on_event, op->user);
    pthread_mutex_init(&e->vae_mu, NULL);
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
    e->rt.threads = op->threads;
    char dir[4096];
    cosmos3_model_dir(op->model, dir, sizeof dir);
    double t0 = c3_now();
    e->load.open_at = t0;
    rt_emit_stage(&e->rt, "load", true, 0);
    rc = ckpt_open(&e->ck, dir, true);
    if (rc) goto fail;
    double t_read = c3_now() - t0; /* the headers parsed, the shards mapped */
    /* plan before any weight is read, at the size asked (the model's default image) */
    cosmos3_settings st;
    rc = request_plan_size(&e->ck, op, &st);
    if (rc) goto fail;
    if (e->ck.s.distilled && cfg > 1) { /* vLLM-Omni refuses it too */
        rc = c3_fail(C3_EUSAGE,
                     "--cfg-parallel %d: this distilled checkpoint runs one forward per step (no "
                     "unconditional branch); use --cfg-parallel 1 and --tp or --ulysses instead",
                     cfg);
        goto fail;
    }
    rc = plan_open(&e->rt.plan, &e->ck, op, st.width, st.height, st.frames);
    if (rc) goto fail;
    /* the launcher's processes (mpirun, srun): the layout must fit them before anything loads */
    c3_procs procs;
    rc = comm_procs(&procs);
    if (rc == C3_OK) rc = comm_mpi_check(&e->rt.plan, &procs);
    if (rc) goto fail;
    rt_place(&e->rt, &procs);
    rc = comm_procs_devices(&e->rt.plan, e->rt.lo, e->rt.nlocal); /* no GPU in two processes */
    if (rc) goto fail;
    if (procs.size > 1 && procs.rank == 0) { /* the plan across processes and hosts, once */
        char *text = engine_procs_text(&e->rt.plan, &procs), *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            cosmos3_event ev = {.kind = COSMOS3_EV_PLAN, .text = line}; /* a line each */
            rt_emit(&e->rt, &ev);
        }
        free(text);
    }
    /* which device runs and why: once, before anything loads (--device cpu: the user said so) */
    if (!op->device || strcmp(op->device, "cpu") != 0)
        rt_emitf(&e->rt, e->rt.plan.device_warn ? COSMOS3_EV_WARNING : COSMOS3_EV_DEVICE, "%s",
                 e->rt.plan.device_note);
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
    if (e->rt.plan.offload && !e->rt.plan.cuda)
        rt_emitf(&e->rt, COSMOS3_EV_LOG,
                 "note: --offload does nothing on the CPU backend (weights live in host memory)");
    ta = c3_now();
    rc = rt_run_ranks(&e->rt, load_rank, e, true); /* every rank in parallel */
    e->load.weights = c3_now() - ta;
    ta = c3_now();
    /* the VAE decoder on a backend of its own (the lead rank's device; on
     * CUDA its own stream and buffers), so cosmos3_decode can run on
     * another thread while the ranks run the next generation */
    if (rc == C3_OK && e->rt.plan.cuda)
        rc = c3_backend_cuda(e->rt.plan.devices[e->rt.lo], &e->vbe);
    else if (rc == C3_OK)
        e->vbe = c3_backend_cpu();
    if (rc == C3_OK) rc = vae_load(&e->vae, &e->ck, e->vbe);
    e->load.vae = c3_now() - ta;
    if (rc == C3_OK) rc = tok_join(&tj, &e->tok);
    e->load.tokenizer = tj.seconds;
    if (rc) goto fail;
    const c3_plan *p = &e->rt.plan;
    for (int r = e->rt.lo; r < e->rt.lo + e->rt.nlocal; r++) {
        const c3_backend *be = e->rt.ranks[r].be;
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
        rt_emit(&e->rt, &ev);
    }
    e->load.total = c3_now() - t0;
    rt_emit_stage(&e->rt, "load", false, e->load.total);
    *out = e;
    return C3_OK;
fail:
    if (rc && rt_lost(&e->rt)) rc = c3_fail(C3_EFAIL, "%s", rt_lost(&e->rt)); /* the cause */
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
    loader_close(e);
    return rc;
}

void loader_close(cosmos3_engine *e) {
    if (!e) return;
    vae_free(e->vae);
    c3_backend_destroy(e->vbe); /* after the VAE's tensors */
    pthread_mutex_destroy(&e->vae_mu);
    vae_enc_free(e->venc);
    avae_free(e->avae);
    rt_free(&e->rt);
    tok_free(e->tok);
    ckpt_close(&e->ck);
    free(e);
}
