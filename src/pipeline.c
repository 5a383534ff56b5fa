/* pipeline.c - engine: plan, load, and one generation over the ranks. */
#include "pipeline.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "comm_shm.h"
#include "cuda/comm_cuda.h"
#include "model.h"
#include "png_io.h"
#include "prompt.h"
#include "rng.h"
#include "sampler.h"
#include "scheduler.h"
#include "tokenizer.h"
#include "wan_vae.h"
#include "config.h"

/* Fault injection for the tests: rank c3_inject_fail_rank fails at step 2. */
int c3_inject_fail_rank = -1;

/* ------------------------------------------------------------------ ranks */

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

struct c3_engine {
    c3_ckpt ck;
    c3_tokenizer *tok;
    c3_plan plan;
    c3_rank ranks[C3_MAX_RANKS];
    c3_comm_kind comm;     /* which communicator the ranks use */
    c3_comm_group *groups; /* C3_COMM_SHM */
    c3_comm_set *set;      /* C3_COMM_NCCL, C3_COMM_DEVICE */
    c3_vae *vae;
    c3_events *ev;
    volatile int cancel;
    c3_settings base; /* settings the engine was opened with */
};

const c3_ckpt *engine_ckpt(const c3_engine *e) { return &e->ck; }

/* Wake every rank waiting in a collective (a rank failed or was cancelled). */
static void comms_abort(c3_engine *e) {
    if (e->groups) comm_shm_abort(e->groups);
    if (e->set) e->set->abort(e->set);
}

static int comms_reset(c3_engine *e) {
    if (e->groups) comm_shm_reset(e->groups);
    if (e->set) return e->set->reset(e->set);
    return C3_OK;
}
const c3_plan *engine_plan(const c3_engine *e) { return &e->plan; }
void engine_cancel(c3_engine *e) { e->cancel = 1; }

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

const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n) {
    const char *env = getenv("COSMOS3_MODEL");
    const char *m = s->model && *s->model ? s->model : env && *env ? env : C3_DEFAULT_MODEL;
    /* a folder that exists wins over a built-in name */
    if (c3_file_exists(m) || !named_model(m, buf, n)) snprintf(buf, n, "%s", m);
    return buf;
}

/* ------------------------------------------------------------- settings */

static bool is_video(const c3_settings *s) { return s->frames > 1; }

/* A distilled checkpoint fixes what upstream fixes (diffusers'
 * Cosmos3DistilledSetTimestepsStep, vLLM-Omni's distilled checks): the step
 * count is its t_list's, guidance is baked in (1: one forward per step), the
 * schedule is the fixed-step SDE one with the scheduler's own shift, and
 * there is no second branch to run on a CFG-parallel group. Other values are
 * refused; the negative prompt and --shift are ignored with a warning
 * (settings_warnings). */
static int distilled_resolve(c3_settings *s, const c3_sconfig *sc) {
#define GIVEN(name) s->given[option_index(option_find(name))]
    int n = sc->n_tlist;
    if (GIVEN("steps") && s->steps != n)
        return c3_fail(C3_EUSAGE,
                       "--steps %d: this distilled checkpoint samples exactly %d steps (its "
                       "fixed_step_sampler_config.t_list); leave --steps out or give --steps %d",
                       s->steps, n, n);
    if (GIVEN("guidance") && s->guidance != 1.0)
        return c3_fail(
            C3_EUSAGE,
            "--guidance %g: this distilled checkpoint has guidance baked into its weights; leave "
            "--guidance out or give --guidance 1",
            s->guidance);
    if (GIVEN("schedule") && strcmp(s->schedule, "flowmatch4") != 0)
        return c3_fail(
            C3_EUSAGE,
            "--schedule %s: this distilled checkpoint samples with its fixed t_list; leave "
            "--schedule out (or give flowmatch4)",
            s->schedule);
    if (s->cfg_parallel > 1)
        return c3_fail(C3_EUSAGE,
                       "--cfg-parallel %d: this distilled checkpoint runs one forward per step (no "
                       "unconditional branch); use --cfg-parallel 1 and --tp or --ulysses instead",
                       s->cfg_parallel);
    s->steps = n;
    s->guidance = 1.0;
    s->guidance_interval.on = false;
    s->shift = sc->flow_shift;
    free(s->schedule);
    s->schedule = xstrdup("flowmatch4");
    return C3_OK;
#undef GIVEN
}

int settings_resolve(c3_settings *s, const c3_ckpt *ck) {
#define GIVEN(name) s->given[option_index(option_find(name))]
    bool video = is_video(s);
    /* the model's own defaults (model_index.json "cosmos3.defaults") first */
    const c3_model_card *k = ck ? &ck->card : NULL;
    if (!GIVEN("templates")) s->templates = true; /* gen: on unless --no-templates */
    if (!GIVEN("width")) s->width = k && k->width ? k->width : video ? 1280 : 1024;
    if (!GIVEN("height")) s->height = k && k->height ? k->height : video ? 720 : 1024;
    if (!GIVEN("steps")) s->steps = k && k->steps ? k->steps : video ? 35 : 50;
    if (!GIVEN("guidance")) s->guidance = k && k->guidance >= 0 ? k->guidance : video ? 6.0 : 7.0;
    if (!GIVEN("shift")) s->shift = k && k->shift >= 0 ? k->shift : video ? 10.0 : 3.0;
    if (!GIVEN("schedule") && k && k->schedule[0]) {
        free(s->schedule);
        s->schedule = xstrdup(k->schedule);
    }
    if (!GIVEN("guidance-interval")) {
        s->guidance_interval.on = k && k->interval ? k->interval == 1 : !video;
        s->guidance_interval.lo = k && k->interval == 1 ? k->interval_lo : 400;
        s->guidance_interval.hi = k && k->interval == 1 ? k->interval_hi : 1000;
    }
    if (ck && ck->s.distilled) C3_TRY(distilled_resolve(s, &ck->s));
#undef GIVEN
    if (s->width < 16 || s->width % 16 || s->width > 16384)
        return c3_fail(C3_EUSAGE, "--width %d must be a positive multiple of 16 (e.g. %d)", s->width,
                       s->width < 16 ? 16 : (s->width / 16) * 16);
    if (s->height < 16 || s->height % 16 || s->height > 16384)
        return c3_fail(C3_EUSAGE, "--height %d must be a positive multiple of 16 (e.g. %d)", s->height,
                       s->height < 16 ? 16 : (s->height / 16) * 16);
    if (s->frames < 1 || (s->frames - 1) % 4 || s->frames > 4097)
        return c3_fail(C3_EUSAGE, "--frames %d must be 1 (image) or 1 + 4k (e.g. %d)", s->frames,
                       s->frames < 1 ? 1 : ((s->frames - 1) / 4) * 4 + 1);
    if (s->fps <= 0 || s->fps > 1000) return c3_fail(C3_EUSAGE, "--fps %g must be in (0, 1000]", s->fps);
    if (s->steps < 1 || s->steps > 1000) return c3_fail(C3_EUSAGE, "--steps %d must be in 1..1000", s->steps);
    if (!(s->guidance >= 0) || s->guidance > 100)
        return c3_fail(C3_EUSAGE, "--guidance %g must be in [0, 100] (1 turns CFG off)", s->guidance);
    if (!(s->shift > 0) || s->shift > 1000) return c3_fail(C3_EUSAGE, "--shift %g must be in (0, 1000]", s->shift);
    c3_schedule sch;
    if (sched_parse(s->schedule, &sch) != 0)
        return c3_fail(C3_EUSAGE, "--schedule '%s' is not native, linear, karras or flowmatch4", s->schedule);
    if (sch == C3_SCHED_FLOWMATCH4 && s->steps != 4)
        return c3_fail(C3_EUSAGE, "--schedule flowmatch4 is the distilled 4-step sampler; use --steps 4");
    if (strcmp(s->seed, "random") != 0) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s->seed, &end, 10);
        if (errno || end == s->seed || *end || s->seed[0] == '-' || v > (unsigned long long)INT64_MAX)
            return c3_fail(C3_EUSAGE, "--seed '%s' must be an integer in 0..2^63-1 or 'random'", s->seed);
    }
    if (s->tp < 1 || s->cfg_parallel < 1 || s->ulysses < 1)
        return c3_fail(C3_EUSAGE, "--tp, --cfg-parallel and --ulysses must be at least 1");
    if (s->threads < 0) return c3_fail(C3_EUSAGE, "--threads %d must be 0 (all cores) or more", s->threads);
    if (ck && ck->t.patch != 2 && (s->width / 16) % ck->t.patch)
        return c3_fail(C3_EUSAGE, "size must be a multiple of %d pixels for this model", 16 * ck->t.patch);
    return C3_OK;
}

/* One-line warnings where a request leaves what the model card says it
 * knows: another size, words outside its vocabulary. It still generates. */
void settings_warnings(const c3_settings *s, const c3_ckpt *ck, c3_events *ev) {
    const c3_model_card *k = &ck->card;
    if (ck->s.distilled) {
#define GIVEN(name) s->given[option_index(option_find(name))]
        if (GIVEN("negative-prompt") && s->negative && s->negative[0])
            events_emit(ev, EV_LOG, 0,
                        "warning: %s is distilled (no unconditional branch): the negative prompt "
                        "is ignored",
                        ck->model_id);
        if (GIVEN("shift"))
            events_emit(
                ev, EV_LOG, 0,
                "warning: %s is distilled: --shift is ignored, its scheduler's shift %g applies",
                ck->model_id, ck->s.flow_shift);
#undef GIVEN
    }
    if (k->width && k->height && (s->width != k->width || s->height != k->height))
        events_emit(
            ev, EV_LOG, 0,
            "warning: %s was trained at %dx%d only; at %dx%d it may not draw what the prompt says",
            ck->model_id, k->width, k->height, s->width, s->height);
    if (!k->nvocab || !s->prompt) return;
    char unknown[512] = "", word[64];
    size_t nu = 0;
    int nbad = 0;
    for (const char *p = s->prompt; *p;) {
        if (!(isalpha((unsigned char)*p) || (unsigned char)*p >= 0x80)) {
            p++;
            continue;
        }
        size_t n = 0;
        for (; isalpha((unsigned char)*p) || (unsigned char)*p >= 0x80; p++)
            if (n + 1 < sizeof word) word[n++] = (char)tolower((unsigned char)*p);
        word[n] = 0;
        bool known = false;
        for (int i = 0; i < k->nvocab && !known; i++)
            known = !strcmp(word, k->vocab[i]);
        char quoted[sizeof word + 2];
        snprintf(quoted, sizeof quoted, "\"%s\"", word);
        if (known || strstr(unknown, quoted)) continue;
        if (nbad++ < 6) {
            int w = snprintf(unknown + nu, sizeof unknown - nu, "%s\"%s\"", nu ? ", " : "", word);
            if (w > 0 && nu + (size_t)w < sizeof unknown) nu += (size_t)w;
        }
    }
    if (!nbad) return;
    char known[1024] = "";
    size_t nk = 0;
    for (int i = 0; i < k->nvocab; i++) {
        int w = snprintf(known + nk, sizeof known - nk, "%s%s", i ? " " : "", k->vocab[i]);
        if (w > 0 && nk + (size_t)w < sizeof known) nk += (size_t)w;
    }
    events_emit(ev, EV_LOG, 0, "warning: %s does not know %s%s; it knows: %s (cosmos3 info -m %s)",
                ck->model_id, unknown, nbad > 6 ? " and more" : "", known, ck->model_id);
}

/* --------------------------------------------------------------- engine */

static void *load_rank(void *arg) {
    c3_engine *e = ((void **)arg)[0];
    c3_rank *r = ((void **)arg)[1];
    r->rc = model_load(&r->model, &e->ck, r->be, &r->shard);
    if (r->rc == C3_OK) model_batch(r->model, e->plan.cfg_batch);
    if (r->rc) snprintf(r->err, sizeof r->err, "%s", c3_errmsg());
    return NULL;
}

typedef struct {
    const char *path;
    pthread_t thread;
    bool started;
    c3_tokenizer *tok;
    int rc;
    char err[1024];
} tok_job;

static void *tok_thread(void *arg) {
    tok_job *j = arg;
    j->rc = tok_load(&j->tok, j->path);
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

int engine_open(c3_engine **out, const c3_settings *s, c3_events *ev) {
    tok_job tj = {0};
    c3_engine *e = xcalloc(1, sizeof *e);
    e->ev = ev;
    settings_copy(&e->base, s);
    char dir[4096];
    pipeline_model_dir(s, dir, sizeof dir);
    double t0 = c3_now();
    int rc = ckpt_open(&e->ck, dir, true);
    if (rc) goto fail;
    /* plan before any weight is read */
    c3_sizes sz;
    ckpt_sizes(&e->ck, &sz);
    c3_settings tmp;
    settings_copy(&tmp, s);
    rc = settings_resolve(&tmp, &e->ck);
    if (rc == C3_OK)
        rc = plan_make(&e->plan, &e->ck.t, &sz, s->tp, s->cfg_parallel, s->ulysses, s->device, s->gpus, s->offload,
                       tmp.width, tmp.height, tmp.frames);
    settings_free(&tmp);
    if (rc) goto fail;
    /* the tokenizer loads on its own thread while the weights load */
    tj.path = e->ck.tokenizer_json;
    if (pthread_create(&tj.thread, NULL, tok_thread, &tj) != 0) {
        rc = c3_fail(C3_EFAIL, "cannot start the tokenizer thread");
        goto fail;
    }
    tj.started = true;
    /* backends and communicators */
    const c3_plan *p = &e->plan;
    for (int r = 0; r < p->world; r++) {
        c3_rank *rk = &e->ranks[r];
        rk->rank = r;
        if (p->cuda) {
            rc = c3_backend_cuda(p->devices[r], &rk->be);
            if (rc) goto fail;
        } else {
            rk->be = c3_backend_cpu();
        }
    }
    e->comm = comm_choose(p->cuda, p->world, p->devices);
    /* COSMOS3_COMM=device: the device-memory communicator on distinct GPUs too */
    const char *force = getenv("COSMOS3_COMM");
    if (e->comm == C3_COMM_NCCL && force && !strcmp(force, "device")) e->comm = C3_COMM_DEVICE;
    c3_backend *bes[C3_MAX_RANKS];
    for (int r = 0; r < p->world; r++) bes[r] = e->ranks[r].be;
    if (e->comm == C3_COMM_SHM) rc = comm_shm_create(p, &e->groups);
    if (e->comm == C3_COMM_NCCL) rc = comm_nccl_create(p, bes, &e->set);
    if (e->comm == C3_COMM_DEVICE) rc = comm_dev_create(p, bes, &e->set);
    if (rc) goto fail;
    if (p->offload && !p->cuda)
        events_emit(ev, EV_LOG, 0, "note: --offload does nothing on the CPU backend (weights live in host memory)");
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
                               .cancel = &e->cancel};
    }
    /* load every rank in parallel */
    void *args[C3_MAX_RANKS][2];
    for (int r = 0; r < p->world; r++) {
        args[r][0] = e;
        args[r][1] = &e->ranks[r];
        if (pthread_create(&e->ranks[r].thread, NULL, load_rank, args[r]) != 0) {
            rc = c3_fail(C3_EFAIL, "cannot start rank thread %d", r);
            for (int q = 0; q < r; q++) pthread_join(e->ranks[q].thread, NULL);
            goto fail;
        }
    }
    for (int r = 0; r < p->world; r++) pthread_join(e->ranks[r].thread, NULL);
    for (int r = 0; r < p->world; r++)
        if (e->ranks[r].rc) {
            rc = c3_fail(e->ranks[r].rc, "rank %d: %s", r, e->ranks[r].err);
            goto fail;
        }
    rc = vae_load(&e->vae, &e->ck, e->ranks[0].be);
    if (rc) goto fail;
    rc = tok_join(&tj, &e->tok);
    if (rc) goto fail;
    for (int r = 0; r < p->world; r++) {
        c3_event ev1 = {.kind = EV_LOADED, .rank = r, .device = p->devices[r], .seconds = c3_now() - t0};
        for (int c = 0; c < 3; c++) ev1.bytes[c] = e->ranks[r].be->mem[c];
        ev1.dev_total = p->dev_total[r];
        ev1.dev_free = p->dev_free[r];
        snprintf(ev1.text, sizeof ev1.text, "%s", p->dev_name[r]);
        events_push(ev, &ev1);
    }
    *out = e;
    return C3_OK;
fail:
    if (tj.started) {
        int rc2 = rc;
        c3_tokenizer *t = NULL;
        tok_join(&tj, &t);
        tok_free(t);
        rc = rc2;
    }
    engine_close(e);
    return rc;
}

void engine_close(c3_engine *e) {
    if (!e) return;
    vae_free(e->vae);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        for (int b = 0; b < 2; b++) {
            undkv_free(&e->ranks[r].und[b]);
            free(e->ranks[r].und_ids[b]);
        }
    for (int r = 0; r < C3_MAX_RANKS; r++) model_free(e->ranks[r].model);
    /* communicators use the backends' streams: they go first */
    if (e->set) e->set->destroy(e->set);
    if (e->groups) comm_shm_destroy(e->groups);
    for (int r = 0; r < C3_MAX_RANKS; r++)
        if (e->ranks[r].be) c3_backend_destroy(e->ranks[r].be);
    tok_free(e->tok);
    ckpt_close(&e->ck);
    settings_free(&e->base);
    free(e);
}

void result_free(c3_result *r) {
    for (int i = 0; i < r->npaths; i++) free(r->paths[i]);
    free(r->paths);
    free(r->png_parameters);
    memset(r, 0, sizeof *r);
}

/* ----------------------------------------------------------- generation */

typedef struct {
    c3_engine *e;
    const c3_settings *s;
    int32_t *ids[2];
    int L[2];
    int T, h, w;
    int64_t n; /* latent floats */
    const float *x_init;
    double *sigmas;
    double *timesteps; /* fractional for the fixed-step SDE sampler */
    c3_schedule sched;
    uint64_t seed;
    const float *step_noise; /* [steps, n] re-noising draws from --noise, or NULL: the seed's */
    float *x_final; /* written by rank 0 */
    double t_und, t_loop, step_sum, cond_sum, uncond_sum;
    int steps_run;
} c3_job;

static bool cfg_active(const c3_settings *s, double t) {
    if (s->guidance == 1.0) return false;
    if (!s->guidance_interval.on) return true;
    return (double)t >= s->guidance_interval.lo && (double)t <= s->guidance_interval.hi;
}

static void emit_branch(c3_engine *e, int rank, int group, int step, int branch, double sec) {
    c3_event ev = {.kind = EV_BRANCH, .rank = rank, .group = group, .step = step, .branch = branch, .seconds = sec};
    events_push(e->ev, &ev);
}

/* Every rank runs this loop: its CFG group's branches, the exchange, and the
 * same sampler step, so all ranks hold the same x. */
static int rank_loop(c3_job *j, c3_rank *rk) {
    c3_engine *e = j->e;
    const c3_plan *p = &e->plan;
    const c3_settings *s = j->s;
    int group = plan_cfg_rank(p, rk->rank);
    bool lead = plan_tp_rank(p, rk->rank) == 0 && plan_sp_rank(p, rk->rank) == 0;
    c3_undkv *kv[2] = {NULL, NULL};
    c3_latent_geom g = {.T = j->T, .h = j->h, .w = j->w, .fps = s->fps};
    float *x = xmalloc((size_t)j->n * sizeof(float));
    float *vbuf = xmalloc((size_t)j->n * 2 * sizeof(float)); /* [cond | uncond] */
    float *v = xmalloc((size_t)j->n * sizeof(float));
    float *noise = j->sched == C3_SCHED_FLOWMATCH4 && !j->step_noise
                       ? xmalloc((size_t)j->n * sizeof(float))
                       : NULL;
    memcpy(x, j->x_init, (size_t)j->n * sizeof(float));
    c3_sampler *smp = sampler_new(j->sched == C3_SCHED_FLOWMATCH4 ? C3_SAMPLER_FLOWMATCH : C3_SAMPLER_UNIPC,
                                  s->steps, j->sigmas, j->n);
    int rc = C3_OK;
    bool need_uncond = false;
    for (int i = 0; i < s->steps; i++) need_uncond |= cfg_active(s, j->timesteps[i]);
    /* UND once per branch this rank serves */
    double t0 = c3_now();
    for (int b = 0; b < 2 && rc == C3_OK; b++) {
        if (p->cfg == 2 && b != group) continue;
        if (b == 1 && !need_uncond) continue;
        c3_undkv *u = &rk->und[b];
        if (!(u->L == j->L[b] && rk->und_ids[b] &&
              !memcmp(rk->und_ids[b], j->ids[b], sizeof(int32_t) * (size_t)j->L[b]))) {
            undkv_free(u);
            free(rk->und_ids[b]);
            rk->und_ids[b] = NULL;
            rc = model_und(rk->model, j->ids[b], j->L[b], u);
            if (rc) {
                undkv_free(u);
                break;
            }
            rk->und_ids[b] = xmalloc(sizeof(int32_t) * (size_t)j->L[b]);
            memcpy(rk->und_ids[b], j->ids[b], sizeof(int32_t) * (size_t)j->L[b]);
        }
        kv[b] = u;
    }
    if (rk->rank == 0) j->t_und = c3_now() - t0;
    double tl = c3_now();
    for (int i = 0; i < s->steps && rc == C3_OK; i++) {
        if (e->cancel) {
            rc = c3_fail(C3_ECANCEL, "cancelled");
            break;
        }
        if (rk->rank == c3_inject_fail_rank && i == 1) {
            rc = c3_fail(C3_EFAIL, "rank %d: injected failure", rk->rank);
            break;
        }
        double t = j->timesteps[i];
        bool cfg_on = cfg_active(s, t);
        double ts = c3_now(), tc = 0, tu = 0, tx = 0;
        if (rk->rank == 0) {
            c3_event ev = {
                .kind = EV_STEP_BEGIN, .step = i + 1, .steps = s->steps, .timestep = (int64_t)t};
            events_push(e->ev, &ev);
        }
        if (p->cfg == 1 && cfg_on && model_batches(rk->model)) {
            /* both branches as one batch: the step's time is theirs together,
             * reported half to each */
            double a = c3_now();
            const c3_undkv *both[2] = {kv[0], kv[1]};
            float *out[2] = {vbuf, vbuf + j->n};
            rc = model_gen_batch(rk->model, 2, both, x, &g, t, out);
            tc = tu = (c3_now() - a) / 2;
            if (lead && rc == C3_OK) {
                emit_branch(e, rk->rank, 0, i + 1, 0, tc);
                emit_branch(e, rk->rank, 0, i + 1, 1, tu);
            }
        } else if (p->cfg == 1) {
            double a = c3_now();
            rc = model_gen(rk->model, kv[0], x, &g, t, vbuf);
            tc = c3_now() - a;
            if (lead && rc == C3_OK) emit_branch(e, rk->rank, 0, i + 1, 0, tc);
            if (rc == C3_OK && cfg_on) {
                a = c3_now();
                rc = model_gen(rk->model, kv[1], x, &g, t, vbuf + j->n);
                tu = c3_now() - a;
                if (lead && rc == C3_OK) emit_branch(e, rk->rank, 0, i + 1, 1, tu);
            }
        } else {
            /* group 0: cond; group 1: uncond, idle outside the guidance interval */
            float *mine = vbuf + (group ? j->n : 0);
            double a = c3_now();
            if (group == 0 || cfg_on) rc = model_gen(rk->model, kv[group], x, &g, t, mine);
            double sec = c3_now() - a;
            if (group == 0) tc = sec; else tu = sec;
            if (lead && rc == C3_OK && (group == 0 || cfg_on)) emit_branch(e, rk->rank, group, i + 1, group, sec);
            /* exchange: all-gather over the CFG pair (cond | uncond) */
            a = c3_now();
            if (rc == C3_OK) rc = rk->cfg->allgather_host(rk->cfg, vbuf, mine, j->n);
            tx = c3_now() - a;
        }
        if (rc) break;
        double a = c3_now();
        if (cfg_on)
            cfg_combine(v, vbuf, vbuf + j->n, (float)s->guidance, j->n);
        else
            memcpy(v, vbuf, (size_t)j->n * sizeof(float));
        const float *eps = NULL;
        if (sampler_needs_noise(smp, i)) {
            /* step i's draw: elements [(i+1) n, (i+2) n) of the seed's stream
             * (the initial noise is [0, n)); every rank draws the same */
            if (j->step_noise)
                eps = j->step_noise + (size_t)i * (size_t)j->n;
            else
                rng_normal(j->seed, (uint64_t)(i + 1) * (uint64_t)j->n, noise, j->n);
            if (!eps) eps = noise;
        }
        rc = sampler_step(smp, i, v, x, eps, NULL, NULL);
        tx += c3_now() - a;
        if (rc == C3_OK) { /* memory of this rank's device, from our own accounting */
            c3_event mev = {.kind = EV_MEMORY, .rank = rk->rank, .group = group, .device = p->devices[rk->rank],
                            .step = i + 1, .steps = s->steps, .dev_total = p->dev_total[rk->rank],
                            .dev_free = p->dev_free[rk->rank]};
            for (int c = 0; c < 3; c++) mev.bytes[c] = rk->be->mem[c];
            if (p->cuda) {
                char nm[64];
                int64_t tot, fr;
                if (c3_gpu_info(p->devices[rk->rank], nm, sizeof nm, &tot, &fr) == C3_OK) {
                    mev.dev_total = tot;
                    mev.dev_free = fr;
                }
            }
            events_push(e->ev, &mev);
        }
        if (rk->rank == 0 && rc == C3_OK) {
            double st = c3_now() - ts;
            c3_event ev = {.kind = EV_STEP_END,
                           .step = i + 1,
                           .steps = s->steps,
                           .seconds = st,
                           .cond_s = tc,
                           .uncond_s = tu,
                           .combine_s = tx,
                           .timestep = (int64_t)t};
            if (p->cfg == 2) ev.uncond_s = 0; /* reported by the other group's EV_BRANCH */
            events_push(e->ev, &ev);
            j->step_sum += st;
            j->cond_sum += tc;
            j->uncond_sum += tu;
            j->steps_run++;
        }
    }
    if (rk->rank == 0) {
        j->t_loop = c3_now() - tl;
        if (rc == C3_OK) memcpy(j->x_final, x, (size_t)j->n * sizeof(float));
    }
    sampler_free(smp);
    free(x);
    free(vbuf);
    free(v);
    free(noise);
    return rc;
}

typedef struct {
    c3_job *j;
    c3_rank *rk;
} rank_arg;

static void *rank_main(void *arg) {
    rank_arg *a = arg;
    a->rk->rc = rank_loop(a->j, a->rk);
    if (a->rk->rc) {
        snprintf(a->rk->err, sizeof a->rk->err, "%s", c3_errmsg());
        /* a failing rank stops the others: they see cancel between layers,
         * and the communicator is aborted so no one waits forever */
        a->j->e->cancel = 1;
        comms_abort(a->j->e);
    }
    return NULL;
}

/* ------------------------------------------------------------- outputs */

static char *parameters_text(const c3_settings *s, const c3_ckpt *ck, uint64_t seed) {
    size_t cap = strlen(s->prompt) + strlen(s->negative) + strlen(ck->model_id) + 1024;
    char *buf = xmalloc(cap);
    char interval[64];
    if (s->guidance_interval.on)
        snprintf(interval, sizeof interval, ", CFG interval: %g-%g", s->guidance_interval.lo, s->guidance_interval.hi);
    else
        interval[0] = 0;
    snprintf(buf, cap,
             "%s\nNegative prompt: %s\nSteps: %d, CFG scale: %g, Seed: %llu, Size: %dx%d, Model: "
             "%s, Sampler: %s, "
             "Schedule: %s, Shift: %g%s%s",
             s->prompt, s->negative, s->steps, s->guidance, (unsigned long long)seed, s->width,
             s->height, ck->model_id,
             strcmp(s->schedule, "flowmatch4") == 0 ? "FlowMatch Euler SDE" : "UniPC", s->schedule,
             s->shift, interval, s->frames > 1 ? "" : "");
    if (s->frames > 1) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, ", Frames: %d, FPS: %g", s->frames, s->fps);
    }
    return buf;
}

static char *cosmos3_json(const c3_settings *s, const c3_ckpt *ck, const c3_plan *p, uint64_t seed,
                          const c3_result *r) {
    json_t *o = json_object();
    json_object_set_new(o, "version", json_string(COSMOS3_VERSION));
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(ck->model_id));
    char h[32];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)ck->t.config_hash);
    json_object_set_new(m, "config_hash", json_string(h));
    json_object_set_new(o, "model", m);
    json_t *st = json_object();
    json_object_set_new(st, "prompt", json_string(s->prompt));
    json_object_set_new(st, "negative_prompt", json_string(s->negative));
    json_object_set_new(st, "width", json_integer(s->width));
    json_object_set_new(st, "height", json_integer(s->height));
    json_object_set_new(st, "frames", json_integer(s->frames));
    json_object_set_new(st, "fps", json_real(s->fps));
    json_object_set_new(st, "steps", json_integer(s->steps));
    json_object_set_new(st, "guidance", json_real(s->guidance));
    json_object_set_new(st, "shift", json_real(s->shift));
    json_object_set_new(st, "schedule", json_string(s->schedule));
    char gi[64];
    if (s->guidance_interval.on)
        snprintf(gi, sizeof gi, "%g,%g", s->guidance_interval.lo, s->guidance_interval.hi);
    else
        snprintf(gi, sizeof gi, "none");
    json_object_set_new(st, "guidance_interval", json_string(gi));
    json_object_set_new(st, "seed", json_integer((json_int_t)seed));
    json_object_set_new(st, "system_prompt", json_string(s->system_prompt));
    json_object_set_new(st, "templates", json_boolean(s->templates));
    if (s->noise) json_object_set_new(st, "noise", json_string(s->noise));
    json_object_set_new(o, "settings", st);
    json_t *l = json_object();
    json_object_set_new(l, "tp", json_integer(p->tp));
    json_object_set_new(l, "cfg_parallel", json_integer(p->cfg));
    json_object_set_new(l, "ulysses", json_integer(p->sp));
    json_object_set_new(l, "device", json_string(p->cuda ? "cuda" : "cpu"));
    json_object_set_new(o, "layout", l);
    json_object_set_new(o, "L_cond", json_integer(r->L_cond));
    json_object_set_new(o, "L_uncond", json_integer(r->L_uncond));
    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return txt;
}

/* Output paths: image -> s->output or cosmos3-SEED.png; video -> a folder
 * (frame_0000.png ...) or a pattern containing %04d (any %0Nd). */
static int frame_path(const c3_settings *s, uint64_t seed, int f, char *buf, size_t n, char *dir, size_t dn) {
    dir[0] = 0;
    const char *o = s->output;
    if (s->frames == 1) {
        if (o && *o)
            snprintf(buf, n, "%s", o);
        else
            snprintf(buf, n, "cosmos3-%llu.png", (unsigned long long)seed);
        return C3_OK;
    }
    char base[2048];
    if (o && *o)
        snprintf(base, sizeof base, "%s", o);
    else
        snprintf(base, sizeof base, "cosmos3-%llu", (unsigned long long)seed);
    const char *pct = strchr(base, '%');
    if (pct) {
        /* one %0Nd conversion only */
        const char *q = pct + 1;
        while (*q >= '0' && *q <= '9') q++;
        if (*q != 'd' || strchr(q, '%'))
            return c3_fail(C3_EUSAGE, "-o '%s': a frame pattern takes one %%d conversion (e.g. shots/%%04d.png)", base);
        snprintf(buf, n, base, f);
        const char *slash = strrchr(buf, '/');
        if (slash) snprintf(dir, dn, "%.*s", (int)(slash - buf), buf);
    } else {
        size_t L = strlen(base);
        if (L > 4 && strcmp(base + L - 4, ".png") == 0)
            return c3_fail(C3_EUSAGE, "-o %s: a video needs a folder or a pattern such as frames/%%04d.png", base);
        snprintf(buf, n, "%s/frame_%04d.png", base, f);
        snprintf(dir, dn, "%s", base);
    }
    return C3_OK;
}

/* --noise FILE: 'latents' [1, C, T, h, w] (the initial noise) and, for the
 * fixed-step SDE sampler, optionally 'step_noise' [steps, 1, C, T, h, w]
 * (the re-noising draws; *step_noise is then a new [steps, n] array). */
static int load_noise(const char *path, const c3_ckpt *ck, int T, int h, int w, float *x, int steps,
                      float **step_noise) {
    st_file f;
    int rc = st_open(&f, path);
    if (rc) return c3_fail(C3_EINPUT, "--noise: %s", c3_errmsg());
    const st_tensor *sn = st_find(&f, "step_noise");
    if (sn && step_noise) {
        int64_t want[6] = {steps, 1, ck->t.latent_ch, T, h, w};
        bool ok = sn->ndim == 6;
        for (int i = 0; ok && i < 6; i++)
            ok = sn->shape[i] == want[i];
        if (!ok) {
            st_close(&f);
            return c3_fail(
                C3_EINPUT,
                "--noise %s: 'step_noise' must have shape [%d, 1, %d, %d, %d, %d] (steps, 1, C, T, "
                "H/16, W/16) for this run",
                path, steps, ck->t.latent_ch, T, h, w);
        }
        *step_noise = xmalloc((size_t)st_numel(sn) * sizeof(float));
        c3_to_f32(*step_noise, sn->data, sn->dtype, (size_t)st_numel(sn));
    }
    const st_tensor *t = st_find(&f, "latents");
    int64_t want[5] = {1, ck->t.latent_ch, T, h, w};
    bool ok = t && t->ndim == 5;
    for (int i = 0; ok && i < 5; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        st_close(&f);
        return c3_fail(C3_EINPUT,
                       "--noise %s: needs a tensor 'latents' of shape [1, %d, %d, %d, %d] for this size; "
                       "check -W/-H/--frames",
                       path, ck->t.latent_ch, T, h, w);
    }
    c3_to_f32(x, t->data, t->dtype, (size_t)st_numel(t));
    st_close(&f);
    return C3_OK;
}

int engine_generate(c3_engine *e, const c3_settings *s_in, c3_result *res) {
    memset(res, 0, sizeof *res);
    e->cancel = 0;
    double t_start = c3_now();
    c3_settings s;
    settings_copy(&s, s_in);
    int rc = settings_resolve(&s, &e->ck);
    if (rc == C3_OK) settings_warnings(&s, &e->ck, e->ev);
    c3_job j = {.e = e, .s = &s};
    float *x0 = NULL, *step_noise = NULL;
    float *pixels = NULL;
    if (rc) goto out;
    if (!s.prompt) {
        rc = c3_fail(C3_EUSAGE, "no prompt; give one with -p TEXT");
        goto out;
    }
    /* plan for this size: memory check again (size may differ from open) */
    const c3_tconfig *tc = &e->ck.t;
    /* random seeds stay below 2^53 so every JSON reader keeps them exact */
    uint64_t seed = strcmp(s.seed, "random") == 0 ? (rng_random_seed() & ((1ull << 53) - 1))
                                                  : strtoull(s.seed, NULL, 10);
    char seedtxt[32];
    snprintf(seedtxt, sizeof seedtxt, "%llu", (unsigned long long)seed);
    free(s.seed);
    s.seed = xstrdup(seedtxt);
    res->seed = seed;
    /* outputs: refuse existing files before any work */
    char path[4096], dir[4096];
    for (int f = 0; f < s.frames; f++) {
        rc = frame_path(&s, seed, f, path, sizeof path, dir, sizeof dir);
        if (rc) goto out;
        if (!s.overwrite && c3_file_exists(path)) {
            rc = c3_fail(C3_EOUTPUT, "%s already exists; use --overwrite or another -o", path);
            goto out;
        }
        if (s.frames > 4 && f == 0) { /* checking the first frame is enough for a fresh folder */
            if (!c3_file_exists(dir)) break;
        }
    }
    if (s.save_latents && !s.overwrite && c3_file_exists(s.save_latents)) {
        rc = c3_fail(C3_EOUTPUT, "%s already exists; use --overwrite or another --save-latents", s.save_latents);
        goto out;
    }
    /* tokenize */
    double t0 = c3_now();
    c3_prompt_opts po = {
        .system_prompt = !strcmp(s.system_prompt, "auto") ? e->ck.default_system_prompt : !strcmp(s.system_prompt, "on"),
        .templates = s.templates,
        .width = s.width,
        .height = s.height,
        .frames = s.frames,
        .fps = s.fps};
    rc = prompt_ids(e->tok, s.prompt, false, &po, &j.ids[0], &j.L[0]);
    if (rc == C3_OK) rc = prompt_ids(e->tok, s.negative, true, &po, &j.ids[1], &j.L[1]);
    if (rc) goto out;
    res->L_cond = j.L[0];
    res->L_uncond = j.L[1];
    res->t_tokenize = c3_now() - t0;
    /* latents */
    j.T = (s.frames - 1) / 4 + 1;
    j.h = s.height / 16;
    j.w = s.width / 16;
    j.n = (int64_t)tc->latent_ch * j.T * j.h * j.w;
    x0 = xmalloc((size_t)j.n * sizeof(float));
    if (s.noise) {
        sched_parse(s.schedule, &j.sched);
        rc = load_noise(s.noise, &e->ck, j.T, j.h, j.w, x0, s.steps,
                        j.sched == C3_SCHED_FLOWMATCH4 ? &step_noise : NULL);
        j.step_noise = step_noise;
        if (rc) goto out;
    } else {
        rng_normal(seed, 0, x0, j.n);
    }
    j.x_init = x0;
    j.x_final = xmalloc((size_t)j.n * sizeof(float));
    /* schedule */
    sched_parse(s.schedule, &j.sched);
    j.sigmas = xmalloc((size_t)(s.steps + 1) * sizeof(double));
    j.timesteps = xmalloc((size_t)s.steps * sizeof(double));
    j.seed = seed;
    if (e->ck.s.distilled) /* the checkpoint's t_list and shift */
        rc = sched_fixed(e->ck.s.t_list, e->ck.s.n_tlist, e->ck.s.flow_shift,
                         e->ck.s.num_train_timesteps, j.sigmas, j.timesteps);
    else
        rc = sched_sigmas(j.sched, s.steps, s.shift, e->ck.s.sigma_min, e->ck.s.sigma_max, j.sigmas,
                          j.timesteps);
    if (rc) goto out;
    /* run the ranks */
    const c3_plan *p = &e->plan;
    rank_arg args[C3_MAX_RANKS];
    rc = comms_reset(e);
    if (rc) goto out;
    int64_t h2d_bytes0 = 0;
    double h2d_sec0 = 0;
    if (p->offload && p->cuda) model_offload_stats(e->ranks[0].model, &h2d_bytes0, &h2d_sec0);
    for (int r = 0; r < p->world; r++) {
        args[r] = (rank_arg){&j, &e->ranks[r]};
        e->ranks[r].rc = 0;
        if (pthread_create(&e->ranks[r].thread, NULL, rank_main, &args[r]) != 0) {
            e->cancel = 1;
            comms_abort(e);
            for (int q = 0; q < r; q++) pthread_join(e->ranks[q].thread, NULL);
            rc = c3_fail(C3_EFAIL, "cannot start rank thread %d", r);
            goto out;
        }
    }
    for (int r = 0; r < p->world; r++) pthread_join(e->ranks[r].thread, NULL);
    /* the first real failure wins over the cancellations it caused */
    for (int r = 0; r < p->world; r++)
        if (e->ranks[r].rc && e->ranks[r].rc != C3_ECANCEL && !rc)
            rc = c3_fail(e->ranks[r].rc, "%s%s", p->world > 1 ? "" : "", e->ranks[r].err);
    for (int r = 0; r < p->world && !rc; r++)
        if (e->ranks[r].rc) rc = c3_fail(e->ranks[r].rc, "%s", e->ranks[r].err);
    if (rc) goto out;
    res->t_und = j.t_und;
    res->t_denoise = j.t_loop;
    if (j.steps_run) {
        res->t_step_mean = j.step_sum / j.steps_run;
        res->t_cond_mean = j.cond_sum / j.steps_run;
        res->t_uncond_mean = j.uncond_sum / j.steps_run;
    }
    if (s.save_latents) {
        st_wtensor wt = {.name = "latents", .dtype = C3_F32, .ndim = 5,
                         .shape = {1, tc->latent_ch, j.T, j.h, j.w}, .data = j.x_final};
        rc = st_write(s.save_latents, &wt, 1, NULL, 0, s.overwrite);
        if (rc) goto out;
    }
    /* decode */
    t0 = c3_now();
    int F, H, W;
    rc = vae_decode(e->vae, j.x_final, j.T, j.h, j.w, &pixels, &F, &H, &W, NULL, NULL);
    if (rc) goto out;
    res->t_vae = c3_now() - t0;
    if (e->cancel) {
        rc = c3_fail(C3_ECANCEL, "cancelled");
        goto out;
    }
    /* write */
    t0 = c3_now();
    res->png_parameters = parameters_text(&s, &e->ck, seed);
    res->width = W;
    res->height = H;
    res->frames = F;
    res->steps = s.steps;
    res->guidance = s.guidance;
    res->shift = s.shift;
    snprintf(res->schedule, sizeof res->schedule, "%s", s.schedule);
    char *meta = cosmos3_json(&s, &e->ck, p, seed, res);
    uint8_t *rgb = xmalloc((size_t)H * W * 3);
    res->paths = xcalloc((size_t)F, sizeof(char *));
    size_t plane = (size_t)F * H * W;
    for (int f = 0; f < F && rc == C3_OK; f++) {
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++)
                for (int c = 0; c < 3; c++) {
                    float v = pixels[(size_t)c * plane + ((size_t)f * H + y) * W + xx] * 0.5f + 0.5f;
                    v = v < 0 ? 0 : v > 1 ? 1 : v;
                    rgb[((size_t)y * W + xx) * 3 + c] = (uint8_t)lrintf(v * 255.0f);
                }
        rc = frame_path(&s, seed, f, path, sizeof path, dir, sizeof dir);
        if (rc == C3_OK && dir[0]) rc = c3_mkdir_p(dir);
        if (rc) break;
        c3_png_text texts[2] = {{"parameters", res->png_parameters, false}, {"cosmos3", meta, true}};
        rc = png_write(path, rgb, W, H, texts, f == 0 ? 2 : 0, s.overwrite);
        if (rc == C3_OK) {
            res->paths[res->npaths++] = xstrdup(path);
            events_emit(e->ev, EV_PREVIEW, 0, "%s", path);
        }
    }
    free(rgb);
    free(meta);
    if (rc) { /* nothing half-written: a video is all its frames or none */
        for (int i = 0; i < res->npaths; i++) unlink(res->paths[i]);
    }
    res->t_write = c3_now() - t0;
    res->t_total = c3_now() - t_start;
    res->mem_peak = e->ranks[0].be->mem_peak;
    if (p->offload && p->cuda) { /* rank 0's weight stream over this generation */
        int64_t bytes;
        double sec;
        model_offload_stats(e->ranks[0].model, &bytes, &sec);
        res->h2d_bytes = bytes - h2d_bytes0;
        res->h2d_seconds = sec - h2d_sec0;
        res->h2d_gbps = res->h2d_seconds > 0 ? (double)res->h2d_bytes / res->h2d_seconds / 1e9 : 0;
    }
out:
    free(j.ids[0]);
    free(j.ids[1]);
    free(x0);
    free(j.x_final);
    free(j.sigmas);
    free(j.timesteps);
    free(step_noise);
    free(pixels);
    settings_free(&s);
    if (rc == C3_ECANCEL) {
        c3_event ev = {.kind = EV_CANCELLED};
        events_push(e->ev, &ev);
    } else if (rc) {
        c3_event ev = {.kind = EV_ERROR, .code = rc};
        snprintf(ev.text, sizeof ev.text, "%s", c3_errmsg());
        events_push(e->ev, &ev);
    } else {
        c3_event ev = {.kind = EV_DONE, .seconds = res->t_total};
        events_push(e->ev, &ev);
    }
    return rc;
}
