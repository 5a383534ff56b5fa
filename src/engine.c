/* engine.c - cosmos3.h: open and close (loader.c does the work), generate
 * (stage by stage: settings, tokenize, noise, encode, schedule, the
 * denoising loop on the runtime's ranks, decode, result), cancel. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "backend.h"
#include "condition.h"
#include "denoise.h"
#include "forward.h"
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
#if COSMOS3_HAVE_CUDA && COSMOS3_HAVE_MPI
    return "cuda nccl mpi";
#elif COSMOS3_HAVE_CUDA
    return "cuda nccl";
#elif COSMOS3_HAVE_MPI
    return "mpi";
#else
    return "";
#endif
}

/* ------------------------------------------------------------- views */

const c3_ckpt *engine_ckpt_of(const cosmos3_engine *e) {
    return &e->ck;
}
const c3_plan *engine_plan_of(const cosmos3_engine *e) {
    return &e->rt.plan;
}

void cosmos3_cancel(cosmos3_engine *e) {
    if (e) e->rt.cancel = 1;
}

/* ------------------------------------------------------------- models */

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
    engine_plan_layout(&e->rt.plan, o);
    o->process = e->rt.procs.rank;
    o->processes = e->rt.procs.size;
    o->rank_lo = e->rt.lo;
    o->rank_n = e->rt.nlocal;
    snprintf(o->host, sizeof o->host, "%s", e->rt.procs.host);
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
    return engine_procs_text(&e->rt.plan, &e->rt.procs);
}

char *engine_procs_text(const c3_plan *p, const c3_procs *pr) {
    char *text = engine_plan_text(p);
    if (pr->size <= 1 || p->world % pr->size) return text;
    /* ranks in several processes: where each rank runs and its groups */
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) return text;
    int nlocal = p->world / pr->size;
    fprintf(f, "%sprocesses: %d (%s), %d rank%s each, in CFG > TP > Ulysses order%s\n", text,
            pr->size, pr->from, nlocal, nlocal == 1 ? "" : "s",
            p->cross_host ? " (--allow-cross-host)" : "");
    free(text);
    for (int r = 0; r < p->world; r++) {
        int proc = r / nlocal, cg = plan_cfg_rank(p, r), tg = plan_tp_rank(p, r),
            sg = plan_sp_rank(p, r);
        /* group numbers: the TP group is (cfg, ulysses rank), the Ulysses group (cfg, tp rank) */
        fprintf(f,
                "  rank %d: host %s, process %d, %s %d, cfg group %d (%s), tp group %d rank %d, "
                "ulysses group %d rank %d\n",
                r, comm_procs_host(proc), proc, p->cuda ? "GPU" : "cpu",
                p->cuda ? p->devices[r] : 0, cg, p->cfg == 2 ? (cg ? "uncond" : "cond") : "both",
                cg * p->sp + sg, tg, cg * p->tp + tg, sg);
    }
    fclose(f);
    return out;
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

int cosmos3_open(const cosmos3_open_params *p, cosmos3_engine **out, char *err, size_t errlen) {
    cosmos3_open_params def;
    if (!p) {
        cosmos3_open_params_init(&def);
        p = &def;
    }
    if (!out) return give_err(c3_fail(C3_EUSAGE, "cosmos3_open: out is NULL"), err, errlen);
    return give_err(loader_open(p, out), err, errlen);
}

void cosmos3_close(cosmos3_engine *e) {
    /* process 0: the others stop (unless one is gone: the broadcast would wait for it) */
    if (e && e->rt.procs.size > 1 && !rt_lost(&e->rt)) (void)forward_stop();
    loader_close(e);
}

/* ------------------------------------------------------------- requests */

int cosmos3_resolve(const cosmos3_engine *e, const cosmos3_request *r, cosmos3_settings *out,
                    char *err, size_t errlen) {
    if (!r || !out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_resolve: NULL argument"), err, errlen);
    return give_err(request_resolve(r, e ? &e->ck : NULL, out), err, errlen);
}

int cosmos3_request_defaults(const cosmos3_engine *e, int frames, cosmos3_request *r) {
    if (!r) return C3_EUSAGE;
    return request_defaults(e ? &e->ck : NULL, frames, r);
}

int cosmos3_request_check(const cosmos3_engine *e, const cosmos3_request *r, cosmos3_settings *out,
                          cosmos3_error *err) {
    if (!r || !out) {
        int rc = c3_fail(C3_EUSAGE, "cosmos3_request_check: NULL argument");
        if (err) {
            *err = (cosmos3_error){.status = rc};
            snprintf(err->message, sizeof err->message, "%s", c3_errmsg());
        }
        return rc;
    }
    return request_check(r, e ? &e->ck : NULL, out, err);
}

static void add_warning(void *ud, const char *line) {
    cosmos3_engine *e = ud;
    e->warnings = xrealloc(e->warnings, sizeof(char *) * (size_t)(e->nwarnings + 1));
    e->warnings[e->nwarnings++] = xstrdup(line);
    rt_emitf(&e->rt, COSMOS3_EV_WARNING, "%s", line);
}

/* VAE progress: one event per latent frame; a cancel stops the decode. */
typedef struct {
    c3_runtime *rt;
    double t0;
} vae_progress;

static int on_vae_frame(void *ud, int t, int T) {
    vae_progress *vp = ud;
    cosmos3_event ev = {
        .kind = COSMOS3_EV_VAE, .frame = t + 1, .frames = T, .seconds = c3_now() - vp->t0};
    rt_emit(vp->rt, &ev);
    return vp->rt->cancel ? c3_fail(C3_ECANCEL, "cancelled") : C3_OK;
}

/* --attention fp8: once per engine, a warning when a GEN attention call ran
 * in 16 bits instead (the reason the backend gave), and a log line saying
 * which attention ran. True when every GEN call took the FP8 path. */
static bool attn_fp8_note(cosmos3_engine *e) {
    if (!e->attn_fp8) return false;
    const c3_plan *p = &e->rt.plan;
    int64_t calls = 0, declined = 0;
    const char *why = NULL;
    for (int r = e->rt.lo; r < e->rt.lo + e->rt.nlocal; r++) {
        const c3_backend *be = e->rt.ranks[r].be;
        calls += be->attn_fp8_calls;
        declined += be->attn_fp8_declined;
        if (!why) why = be->attn_fp8_why;
    }
    if (declined && !e->attn_warned) {
        char w[256];
        snprintf(w, sizeof w,
                 "--attention fp8: %s; %lld GEN attention calls ran in %s instead (%lld in FP8)",
                 why ? why : "not taken", (long long)declined, p->cuda ? "bf16" : "fp32",
                 (long long)calls);
        add_warning(e, w);
        e->attn_warned = true;
    } else if (!declined) {
        rt_emitf(&e->rt, COSMOS3_EV_LOG,
                 "attention: fp8 on %lld GEN calls (the UND tower's causal attention in %s)",
                 (long long)calls, p->cuda ? "bf16" : "fp32");
    }
    return !declined && calls > 0;
}

/* ----------------------------------------------------------- generation */

/* One generation's state, from the request to the result; each stage below
 * fills its part. */
typedef struct {
    cosmos3_engine *e;
    const cosmos3_request *rq;
    cosmos3_result *res;
    double t_start;
    cosmos3_settings s;
    c3_media media;   /* the conditioning picture or clip (condition.c) */
    c3_cond_input ci; /* the request's conditioning, over media */
    c3_condition cd;  /* the conditioning encoded */
    c3_denoise j;     /* the loop's input and output */
    float *x0;        /* [1, C, T, h, w] the initial latents */
    float *sx0;       /* [sound_dim, T_s] the initial sound latents (joint sound) */
    int64_t h2d_bytes0;
    double h2d_sec0;
    char **warnings; /* a batch's request: its warnings while another's stages run */
    int nwarnings;
} gen_job;

/* The load's times, the settings resolved and checked, the warnings, the seed. */
static int gen_settings(gen_job *g) {
    const cosmos3_request *rq = g->rq;
    cosmos3_engine *e = g->e;
    cosmos3_result *res = g->res;
    const c3_load_times *ld = &e->load;
    res->timings.clock_open = ld->open_at;
    res->timings.clock_generate = g->t_start;
    res->timings.load = ld->total;
    res->timings.load_read = ld->read;
    res->timings.load_backends = ld->backends;
    res->timings.load_weights = ld->weights;
    res->timings.load_vae = ld->vae;
    res->timings.load_tokenizer = ld->tokenizer;
    res->timings.load_prefault_bytes = ld->prefault_bytes;
    const cosmos3_frames *cm = rq->image ? rq->image : rq->video;
    if (cm)
        g->media = (c3_media){
            .rgb = cm->rgb, .width = cm->width, .height = cm->height, .frames = cm->frames};
    g->ci = (c3_cond_input){.image = rq->image ? &g->media : NULL,
                            .video = rq->video ? &g->media : NULL,
                            .indexes = rq->condition_frames,
                            .nindexes = rq->condition_frames ? rq->ncondition_frames : 0,
                            .keep = rq->condition_keep == COSMOS3_KEEP_LAST ? C3_KEEP_LAST
                                                                            : C3_KEEP_FIRST};
    cosmos3_settings *s = &g->s;
    C3_TRY(request_resolve(rq, &e->ck, s));
    if (!rq->prompt || !rq->prompt[0])
        return c3_fail(C3_EUSAGE, "no prompt; give the request a prompt");
    C3_TRY(cond_check(&g->ci, s->frames, s->width, s->height, e->ck.v.scale_temporal));
    request_warnings(rq->prompt, s, &e->ck, add_warning, e);
    /* random seeds stay below 2^53 so every JSON reader keeps them exact */
    if (!s->seed_given) s->seed = rng_random_seed() & ((1ull << 53) - 1);
    /* ranks in several processes: process 0's seed on all (drawn ones differ) */
    C3_TRY(comm_procs_bcast(&s->seed, sizeof s->seed));
    /* the seed when the run starts (a long run can be reproduced before it ends) */
    if (!rq->noise) rt_emitf(&e->rt, COSMOS3_EV_LOG, "seed %llu", (unsigned long long)s->seed);
    return C3_OK;
}

/* The prompt and the negative prompt through the chat template to ids. */
static int gen_tokenize(gen_job *g) {
    cosmos3_engine *e = g->e;
    const cosmos3_settings *s = &g->s;
    c3_denoise *j = &g->j;
    double t0 = c3_now();
    rt_emit_stage(&e->rt, "tokenize", true, 0);
    c3_prompt_opts po = {.system_prompt = s->system_prompt,
                         .templates = s->templates,
                         .width = s->width,
                         .height = s->height,
                         .frames = s->frames,
                         .fps = s->fps,
                         .max_seq = g->rq->max_sequence_length};
    int full[2] = {0, 0}; /* each prompt's template ids before the cut */
    po.full = &full[0];
    C3_TRY(prompt_ids(e->tok, g->rq->prompt, false, &po, &j->ids[0], &j->L[0]));
    po.full = &full[1];
    C3_TRY(prompt_ids(e->tok, s->negative_prompt, true, &po, &j->ids[1], &j->L[1]));
    /* prompt_ids keeps the first max_sequence_length (at most C3_MAX_SEQ) ids and appends two */
    int cap = g->rq->max_sequence_length;
    bool asked = cap > 0 && cap < C3_MAX_SEQ;
    for (int b = 0; b < 2; b++) {
        if (full[b] <= j->L[b] - 2) continue;
        char w[256];
        if (asked)
            snprintf(w, sizeof w,
                     "the %s prompt (with its chat template) is %d tokens; max_sequence_length %d "
                     "cut it to its first %d",
                     b ? "negative" : "positive", full[b], cap, cap);
        else
            snprintf(w, sizeof w,
                     "the %s prompt (with its template) reaches the %d-token limit; the rest of it "
                     "is cut off",
                     b ? "negative" : "positive", C3_MAX_SEQ);
        add_warning(e, w);
    }
    g->res->L_cond = j->L[0];
    g->res->L_uncond = j->L[1];
    g->res->timings.tokenize = c3_now() - t0;
    rt_emit_stage(&e->rt, "tokenize", false, g->res->timings.tokenize);
    return C3_OK;
}

/* The initial latents [1, C, T, h, w]: the request's noise (checked) or the seed's. */
static int gen_noise(gen_job *g) {
    const cosmos3_request *rq = g->rq;
    const c3_tconfig *tc = &g->e->ck.t;
    c3_denoise *j = &g->j;
    j->T = g->s.latent_shape[2];
    j->h = g->s.latent_shape[3];
    j->w = g->s.latent_shape[4];
    j->n = (int64_t)tc->latent_ch * j->T * j->h * j->w;
    g->x0 = xmalloc((size_t)j->n * sizeof(float));
    if (!rq->noise) {
        rng_normal(g->s.seed, 0, g->x0, j->n);
        return C3_OK;
    }
    if (rq->noise_len != (size_t)j->n)
        return c3_fail(C3_EINPUT,
                       "noise has %zu floats; this size needs [1, %d, %d, %d, %d] = %lld",
                       rq->noise_len, tc->latent_ch, j->T, j->h, j->w, (long long)j->n);
    memcpy(g->x0, rq->noise, (size_t)j->n * sizeof(float));
    size_t bad = c3_first_nonfinite(g->x0, (size_t)j->n);
    if (bad < (size_t)j->n)
        return c3_fail(C3_EINPUT, "noise holds %g at element %zu; noise must be finite numbers",
                       (double)g->x0[bad], bad);
    return C3_OK;
}

/* A conditioned request: the media through the VAE encoder, x0 on the
 * pinned frames (mask * x0 + (1 - mask) * noise). */
static int gen_encode(gen_job *g) {
    if (!cond_given(&g->ci)) return C3_OK;
    cosmos3_engine *e = g->e;
    const cosmos3_settings *s = &g->s;
    rt_emit_stage(&e->rt, "encode", true, 0);
    double t0 = c3_now();
    if (!e->venc) C3_TRY(vae_enc_load(&e->venc, &e->ck, rt_lead(&e->rt)->be));
    C3_TRY(cond_prepare(&g->ci, e->venc, s->frames, s->width, s->height, e->ck.v.scale_temporal,
                        &g->cd));
    cond_mix(&g->cd, g->x0);
    g->j.pinned = g->cd.pinned;
    g->j.cond = &g->cd; /* the distilled sampler re-anchors the pinned frames after each step */
    g->res->timings.encode = c3_now() - t0;
    rt_emit_stage(&e->rt, "encode", false, g->res->timings.encode);
    return C3_OK;
}

/* The sigmas and timesteps: the checkpoint's fixed list (distilled) or the schedule's. */
static int gen_schedule(gen_job *g) {
    const c3_ckpt *ck = &g->e->ck;
    const cosmos3_settings *s = &g->s;
    c3_denoise *j = &g->j;
    j->x_init = g->x0;
    j->x_final = xmalloc((size_t)j->n * sizeof(float));
    sched_parse(s->schedule, &j->sched);
    j->sigmas = xmalloc((size_t)(s->steps + 1) * sizeof(double));
    j->timesteps = xmalloc((size_t)s->steps * sizeof(double));
    j->step_noise = g->rq->step_noise;
    if (ck->s.distilled) /* the checkpoint's t_list and shift */
        return sched_fixed(ck->s.t_list, ck->s.n_tlist, ck->s.flow_shift, ck->s.num_train_timesteps,
                           j->sigmas, j->timesteps);
    return sched_sigmas(j->sched, s->steps, s->shift, ck->s.sigma_min, ck->s.sigma_max, j->sigmas,
                        j->timesteps);
}

/* Joint sound: the sound decoder (loaded by the first sound request), the
 * clip's sound length and its initial noise (the request's, or the seed's
 * after every draw of the latents) into j. C3_EMODEL with one line when the
 * checkpoint cannot make sound. */
static int gen_sound(gen_job *g) {
    if (!g->rq->sound) return C3_OK;
    cosmos3_engine *e = g->e;
    const cosmos3_request *rq = g->rq;
    const cosmos3_settings *s = &g->s;
    const c3_tconfig *tc = &e->ck.t;
    c3_denoise *j = &g->j;
    if (!model_has_sound(e->rt.ranks[0].model))
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
    g->sx0 = xmalloc((size_t)j->ns * sizeof(float));
    if (rq->sound_noise) {
        if (rq->sound_noise_len != (size_t)j->ns)
            return c3_fail(C3_EINPUT,
                           "sound noise has %zu floats; this clip needs [%d, %lld] = %lld",
                           rq->sound_noise_len, tc->sound_dim, (long long)Ts, (long long)j->ns);
        memcpy(g->sx0, rq->sound_noise, (size_t)j->ns * sizeof(float));
        size_t bad = c3_first_nonfinite(g->sx0, (size_t)j->ns);
        if (bad < (size_t)j->ns)
            return c3_fail(C3_EINPUT,
                           "sound noise holds %g at element %zu; noise must be finite numbers",
                           (double)g->sx0[bad], bad);
    } else {
        rng_normal(s->seed, denoise_sound_offset(s->steps, j->n, j->ns, 0), g->sx0, j->ns);
    }
    j->s_init = g->sx0;
    j->s_final = xmalloc((size_t)j->ns * sizeof(float));
    return C3_OK;
}

/* The denoising loop on every rank (denoise.c), its times into the result. */
static int gen_denoise_prep(gen_job *g) {
    cosmos3_engine *e = g->e;
    const c3_plan *p = &e->rt.plan;
    c3_denoise *j = &g->j;
    j->cancel = g->rq->cancel; /* the request's own flag */
    bool offload = p->offload && p->cuda;
    if (offload) model_offload_stats(rt_lead(&e->rt)->model, &g->h2d_bytes0, &g->h2d_sec0);
    /* the step cache, off where it cannot help (said once) */
    j->cache = stepcache_kind(g->s.cache);
    j->cache_params = (c3_stepcache_params){.threshold = g->s.cache_threshold,
                                            .max_skip = g->s.cache_max_skip,
                                            .warmup = g->s.cache_warmup};
    if (j->cache && j->Ts > 0) {
        add_warning(e, "cache: off with --sound (a skipped step would reuse the video tokens' "
                       "residual without the sound's)");
        j->cache = NULL;
    } else if (j->cache && j->sched == C3_SCHED_FLOWMATCH4) {
        add_warning(e, "cache: off for the distilled 4-step sampler (each of its steps re-noises "
                       "the latents; none can be skipped)");
        j->cache = NULL;
    } else if (j->cache && g->s.steps < g->s.cache_warmup + 2) {
        add_warning(e, "cache: off (no step between the warm-up steps and the last one to skip)");
        j->cache = NULL;
    } else if (j->cache && j->pinned) {
        bool any = false;
        for (int f = 0; f < j->T; f++)
            any |= !j->pinned[f];
        if (!any) {
            add_warning(e, "cache: off (every latent frame is given by the conditioning)");
            j->cache = NULL;
        }
    }
    return C3_OK;
}

/* After the loop: the final latents checked, the loop's times into the result. */
static int gen_denoise_post(gen_job *g) {
    cosmos3_result *res = g->res;
    c3_denoise *j = &g->j;
    C3_TRY(denoise_check_finite(j->x_final, j->n, "the final latents", "transformer"));
    if (j->ns)
        C3_TRY(denoise_check_finite(j->s_final, j->ns, "the final sound latents", "transformer"));
    res->timings.und = j->t_und;
    res->timings.denoise = j->t_loop;
    if (j->steps_run) {
        res->timings.step_mean = j->step_sum / j->steps_run;
        res->timings.cond_mean = j->cond_sum / j->steps_run;
        res->timings.uncond_mean = j->uncond_sum / j->steps_run;
        res->timings.step_first = j->step_first;
        res->timings.step_host_mean = j->host_sum / j->steps_run;
        if (j->steps_run > 1)
            res->timings.step_rest_mean = (j->step_sum - j->step_first) / (j->steps_run - 1);
    }
    res->timings.clock_first_step = j->first_step_at;
    return C3_OK;
}

/* Latents [C, T, h, w] through the VAE decoder into res's RGB frames and
 * timings.vae, under the engine's decode lock (the VAE on its own backend:
 * generate's decode and cosmos3_decode's on another thread take turns). vp:
 * the progress events and the cancel check of a generation, or NULL. */
static int decode_frames(cosmos3_engine *e, const float *lat, int T, int h, int w, double fps,
                         cosmos3_result *res, vae_progress *vp) {
    double t0 = c3_now();
    int F, H, W;
    float *pixels = NULL;
    pthread_mutex_lock(&e->vae_mu);
    int rc = vae_decode(e->vae, lat, T, h, w, &pixels, &F, &H, &W, vp ? on_vae_frame : NULL, vp);
    pthread_mutex_unlock(&e->vae_mu);
    if (rc == C3_OK && vp && vp->rt->cancel) rc = c3_fail(C3_ECANCEL, "cancelled");
    if (rc == C3_OK)
        rc = denoise_check_finite(pixels, (int64_t)F * H * W * 3, "the decoded pixels", "VAE");
    if (rc == C3_OK) {
        res->rgb = xmalloc((size_t)F * H * W * 3);
        frames_to_rgb(pixels, F, H, W, res->rgb);
        res->width = W;
        res->height = H;
        res->frames = F;
        res->fps = fps;
        res->timings.vae = c3_now() - t0;
    }
    free(pixels);
    return rc;
}

/* The final sound latents [sound_dim, Ts] through the sound decoder into
 * res's waveform and timings.sound (under the decode lock). */
static int decode_sound(cosmos3_engine *e, const float *slat, int Ts, cosmos3_result *res) {
    double t0 = c3_now();
    const c3_aconfig *ac = avae_config(e->avae);
    res->sound_channels = ac->out_channels;
    res->sound_rate = ac->sampling_rate;
    res->sound_samples = (int64_t)Ts * ac->hop;
    res->sound = xmalloc((size_t)(res->sound_channels * res->sound_samples) * sizeof(float));
    pthread_mutex_lock(&e->vae_mu);
    int rc = avae_decode(e->avae, slat, Ts, res->sound, NULL);
    pthread_mutex_unlock(&e->vae_mu);
    if (rc == C3_OK)
        rc = denoise_check_finite(res->sound, res->sound_channels * res->sound_samples,
                                  "the decoded sound", "sound tokenizer");
    res->timings.sound = c3_now() - t0;
    return rc;
}

/* The final sound latents through the sound decoder: [channels, T_s hop] PCM. */
static int gen_sound_decode(gen_job *g) {
    const c3_denoise *j = &g->j;
    if (!j->ns || g->rq->defer_decode) return C3_OK;
    cosmos3_engine *e = g->e;
    rt_emit_stage(&e->rt, "sound", true, 0);
    C3_TRY(decode_sound(e, j->s_final, j->Ts, g->res));
    rt_emit_stage(&e->rt, "sound", false, g->res->timings.sound);
    return C3_OK;
}

/* The final latents through the VAE decoder to the result's RGB frames
 * (with defer_decode: left to cosmos3_decode, the latents kept). */
static int gen_decode(gen_job *g) {
    cosmos3_engine *e = g->e;
    const c3_denoise *j = &g->j;
    g->res->fps = g->s.fps;
    if (g->rq->defer_decode) return C3_OK;
    rt_emit_stage(&e->rt, "vae", true, 0);
    vae_progress vp = {&e->rt, c3_now()};
    C3_TRY(decode_frames(e, j->x_final, j->T, j->h, j->w, g->s.fps, g->res, &vp));
    rt_emit_stage(&e->rt, "vae", false, g->res->timings.vae);
    return C3_OK;
}

/* The latents when asked, the settings used, the layout and the numerics. */
static void gen_result(gen_job *g) {
    cosmos3_engine *e = g->e;
    const cosmos3_request *rq = g->rq;
    const cosmos3_settings *s = &g->s;
    const c3_plan *p = &e->rt.plan;
    cosmos3_result *res = g->res;
    if (rq->want_latents || rq->defer_decode) { /* cosmos3_decode reads them */
        res->latents = g->j.x_final;
        g->j.x_final = NULL;
        memcpy(res->latent_shape, s->latent_shape, sizeof res->latent_shape);
        if (g->j.ns) {
            res->sound_latents = g->j.s_final;
            g->j.s_final = NULL;
            res->sound_latent_shape[0] = e->ck.t.sound_dim;
            res->sound_latent_shape[1] = g->j.Ts;
        }
    }
    res->prompt = xstrdup(rq->prompt);
    res->negative_prompt = xstrdup(s->negative_prompt);
    res->seed = s->seed;
    res->noise_given = rq->noise != NULL;
    res->steps = s->steps;
    res->guidance = s->guidance;
    res->shift = s->shift;
    snprintf(res->schedule, sizeof res->schedule, "%s", s->schedule);
    snprintf(res->sampler, sizeof res->sampler, "%s", s->sampler);
    res->guidance_interval = s->guidance_interval;
    res->guidance_lo = s->guidance_lo;
    res->guidance_hi = s->guidance_hi;
    res->system_prompt = s->system_prompt;
    res->templates = s->templates;
    if (rq->max_sequence_length > 0 && rq->max_sequence_length < C3_MAX_SEQ)
        res->max_sequence_length = rq->max_sequence_length;
    snprintf(res->model_id, sizeof res->model_id, "%s", e->ck.model_id);
    res->config_hash = e->ck.t.config_hash;
    res->tp = p->tp;
    res->cfg_parallel = p->cfg;
    res->ulysses = p->sp;
    snprintf(res->device, sizeof res->device, "%s", p->cuda ? "cuda" : "cpu");
    pthread_mutex_lock(&e->vae_mu); /* the VAE's backend: a decode may run beside */
    const c3_backend *lb = rt_lead(&e->rt)->be;
    res->mem_peak = lb->mem_peak + (e->vbe && e->vbe != lb ? e->vbe->mem_peak : 0);
    pthread_mutex_unlock(&e->vae_mu);
    snprintf(res->attention, sizeof res->attention, "%s",
             attn_fp8_note(e) ? "fp8"
             : p->cuda        ? "bf16"
                              : "fp32");
    snprintf(res->cache, sizeof res->cache, "%s", s->cache);
    res->cache_threshold = s->cache_threshold;
    res->cache_max_skip = s->cache_max_skip;
    res->cache_warmup = s->cache_warmup;
    res->steps_cached = g->j.steps_cached;
    snprintf(res->precision, sizeof res->precision, "%s",
             e->precision == C3_PREC_FP8    ? "fp8"
             : e->precision == C3_PREC_BF16 ? "bf16"
                                            : "auto");
    if (p->offload && p->cuda) { /* rank 0's weight stream over this generation */
        int64_t bytes;
        double sec;
        model_offload_stats(rt_lead(&e->rt)->model, &bytes, &sec);
        res->h2d_bytes = bytes - g->h2d_bytes0;
        res->h2d_seconds = sec - g->h2d_sec0;
    }
    res->timings.total = c3_now() - g->t_start;
}

static void gen_free(gen_job *g) {
    for (int i = 0; i < g->nwarnings; i++)
        free(g->warnings[i]);
    free(g->warnings);
    g->warnings = NULL;
    g->nwarnings = 0;
    cond_free(&g->cd);
    free(g->j.ids[0]);
    free(g->j.ids[1]);
    free(g->x0);
    free(g->j.x_final);
    free(g->sx0);
    free(g->j.s_final);
    free(g->j.sigmas);
    free(g->j.timesteps);
}

/* The current job's one end (the message kept: a callback may record its
 * own): the warnings into res, the terminal event, *out = res or res freed;
 * returns rc with msg as the thread's message. */
static int job_end(cosmos3_engine *e, int rc, const char *why, cosmos3_result *res,
                   cosmos3_result **out) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? why : "");
    res->warnings = e->warnings;
    res->nwarnings = e->nwarnings;
    e->warnings = NULL;
    e->nwarnings = 0;
    if (rc == C3_ECANCEL) {
        cosmos3_event ev = {.kind = COSMOS3_EV_CANCELLED, .status = rc};
        rt_emit(&e->rt, &ev);
    } else if (rc) {
        cosmos3_event ev = {.kind = COSMOS3_EV_FAILED, .status = rc, .text = msg};
        rt_emit(&e->rt, &ev);
    } else {
        cosmos3_event ev = {.kind = COSMOS3_EV_DONE, .seconds = res->timings.total};
        rt_emit(&e->rt, &ev);
    }
    rt_job_end(&e->rt);
    if (rc)
        cosmos3_result_free(res);
    else
        *out = res;
    return rc ? c3_fail(rc, "%s", msg) : C3_OK;
}

/* One generation into res (allocated by the caller), stage by stage. */
static int generate(cosmos3_engine *e, const cosmos3_request *rq, cosmos3_result *res) {
    gen_job g = {.e = e, .rq = rq, .res = res, .t_start = c3_now()};
    g.j = (c3_denoise){.rt = &e->rt, .tc = &e->ck.t, .s = &g.s};
    int rc = gen_settings(&g);
    if (rc == C3_OK) rc = gen_tokenize(&g);
    if (rc == C3_OK) rc = gen_noise(&g);
    if (rc == C3_OK) rc = gen_encode(&g);
    if (rc == C3_OK) rc = gen_schedule(&g);
    if (rc == C3_OK) rc = gen_sound(&g);
    if (rc == C3_OK) rc = gen_denoise_prep(&g);
    if (rc == C3_OK) rc = denoise_run(&g.j);
    if (rc == C3_OK) rc = gen_denoise_post(&g);
    if (rc == C3_OK) rc = gen_decode(&g);
    if (rc == C3_OK) rc = gen_sound_decode(&g);
    if (rc == C3_OK) gen_result(&g);
    gen_free(&g);
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
    e->rt.cancel = 0;
    /* a process is gone: nothing to send it; the job fails with its line */
    const char *lost = rt_lost(&e->rt);
    int frc = e->rt.procs.size > 1 && !lost ? forward_send(r) /* process 0: the others run it too */
                                            : C3_OK;
    if (frc) {
        __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
        return give_err(frc, err, errlen);
    }
    uint64_t job = rt_job_begin(&e->rt, r->on_event, r->user);
    cosmos3_result *res = xcalloc(1, sizeof *res);
    res->job = job;
    int rc = lost ? C3_EFAIL : generate(e, r, res);
    lost = rc ? rt_lost(&e->rt) : NULL;
    if (lost) rc = c3_fail(C3_EFAIL, "%s", lost); /* the cause, not the ranks' cancels */
    rc = job_end(e, rc, rc ? c3_errmsg() : "", res, out);
    __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
    return give_err(rc, err, errlen);
}

int cosmos3_processes(int *rank, int *size, char *err, size_t errlen) {
    c3_procs pr;
    int rc = comm_procs(&pr);
    if (rank) *rank = rc ? 0 : pr.rank;
    if (size) *size = rc ? 1 : pr.size;
    return give_err(rc, err, errlen);
}

bool cosmos3_processes_healthy(char *why, size_t n) {
    const char *lost = watch_lost(comm_procs_watch(), NULL);
    if (why && n) snprintf(why, n, "%s", lost ? lost : "");
    return lost == NULL;
}

void cosmos3_processes_on_lost(void (*fn)(const char *line, void *user), void *user) {
    comm_procs_on_lost(fn, user);
}

bool cosmos3_processes_together(double timeout) {
    return comm_procs_together(timeout);
}

int cosmos3_follow(cosmos3_engine *e, char *err, size_t errlen) {
    if (!e) return give_err(c3_fail(C3_EUSAGE, "cosmos3_follow: NULL engine"), err, errlen);
    if (e->rt.procs.size <= 1 || e->rt.procs.rank == 0) return C3_OK;
    for (;;) {
        c3_forwarded f;
        bool stop;
        int rc = forward_recv(&f, &stop);
        if (rc || stop) {
            forward_free(&f);
            return give_err(rc, err, errlen);
        }
        cosmos3_result *res = NULL;
        /* a failure here is process 0's too (the same request, the same ranks'
         * collectives): it decides; this process waits for the next request */
        (void)cosmos3_generate(e, &f.rq, &res, NULL, 0);
        cosmos3_result_free(res);
        forward_free(&f);
    }
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

/* ------------------------------------------------------------- batches */

static uint64_t key_mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL; /* FNV-1a */
    return h;
}

/* What a batch key is made of (cosmos3_batch_key), resolved on e. */
typedef struct {
    int task; /* 0 image, 1 video, 2 image-to-video, 3 video-to-video */
    cosmos3_settings s;
    bool sound;
} batch_shape;

static const char *const task_names[] = {"text-to-image", "text-to-video", "image-to-video",
                                         "video-to-video"};

static int batch_shape_of(const cosmos3_engine *e, const cosmos3_request *r, batch_shape *b) {
    C3_TRY(request_resolve(r, &e->ck, &b->s));
    b->task = r->video ? 3 : r->image ? 2 : b->s.frames > 1 ? 1 : 0;
    b->sound = r->sound;
    return C3_OK;
}

static uint64_t batch_key_of(const cosmos3_engine *e, const batch_shape *b) {
    const cosmos3_settings *s = &b->s;
    int ints[] = {b->task,  s->width,         s->height, s->frames, s->steps, s->guidance_interval,
                  b->sound, e->ck.s.distilled};
    double dbl[] = {s->shift, s->guidance_interval ? s->guidance_lo : 0,
                    s->guidance_interval ? s->guidance_hi : 0};
    uint64_t h = 1469598103934665603ULL;
    h = key_mix(h, &e->ck.t.config_hash, sizeof e->ck.t.config_hash);
    h = key_mix(h, ints, sizeof ints);
    h = key_mix(h, dbl, sizeof dbl);
    h = key_mix(h, s->schedule, strlen(s->schedule));
    return h;
}

/* Why b's key differs from the batch's ref, in the user's words. */
static void batch_differs(const batch_shape *b, const batch_shape *ref, char *out, size_t n) {
    const cosmos3_settings *s = &b->s, *r = &ref->s;
    if (b->task != ref->task)
        snprintf(out, n, "is %s, the batch %s", task_names[b->task], task_names[ref->task]);
    else if (s->width != r->width || s->height != r->height)
        snprintf(out, n, "is %dx%d, the batch %dx%d", s->width, s->height, r->width, r->height);
    else if (s->frames != r->frames)
        snprintf(out, n, "has %d frames, the batch %d", s->frames, r->frames);
    else if (s->steps != r->steps)
        snprintf(out, n, "has %d steps, the batch %d", s->steps, r->steps);
    else if (strcmp(s->schedule, r->schedule))
        snprintf(out, n, "has schedule %s, the batch %s", s->schedule, r->schedule);
    else if (s->shift != r->shift)
        snprintf(out, n, "has shift %g, the batch %g", s->shift, r->shift);
    else if (b->sound != ref->sound)
        snprintf(out, n, "%s sound, the batch %s", b->sound ? "asks for" : "has no",
                 ref->sound ? "does" : "does not");
    else
        snprintf(out, n, "has another guidance interval than the batch");
}

int cosmos3_batch_key(const cosmos3_engine *e, const cosmos3_request *r, uint64_t *key, char *err,
                      size_t errlen) {
    if (!e || !r || !key)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_batch_key: NULL argument"), err, errlen);
    batch_shape b;
    C3_TRY(give_err(batch_shape_of(e, r, &b), err, errlen));
    *key = batch_key_of(e, &b);
    return C3_OK;
}

/* Whether a batch runs in lockstep on this engine: one process, no
 * Ulysses, branches batched (the plan's), without conditioning or sound;
 * else cosmos3_generate_batch runs its requests one after another. */
static bool batch_lockstep(const cosmos3_engine *e, const batch_shape *b) {
    const c3_runtime *rt = &e->rt;
    return rt->procs.size <= 1 && rt->plan.sp == 1 && b->task < 2 && !b->sound &&
           model_batches(rt->ranks[rt->lo].model);
}

int cosmos3_batch_max(const cosmos3_engine *e, const cosmos3_request *r) {
    if (!e || !r) return 1;
    batch_shape b;
    if (batch_shape_of(e, r, &b) || !batch_lockstep(e, &b)) return 1;
    return plan_batch_max(&e->rt.plan, &e->ck.t, b.s.width, b.s.height, b.s.frames, C3_BATCH_MAX,
                          C3_GEN_MAX_BATCH);
}

/* Move the engine's warnings (the job in flight) into g's, or back. */
static void warn_stash(cosmos3_engine *e, gen_job *g) {
    g->warnings = e->warnings;
    g->nwarnings = e->nwarnings;
    e->warnings = NULL;
    e->nwarnings = 0;
}
static void warn_restore(cosmos3_engine *e, gen_job *g) {
    for (int i = 0; i < e->nwarnings; i++) /* none expected: the last job took them */
        free(e->warnings[i]);
    free(e->warnings);
    e->warnings = g->warnings;
    e->nwarnings = g->nwarnings;
    g->warnings = NULL;
    g->nwarnings = 0;
}

/* The requests of one batch key in lockstep (batch_lockstep): each its own
 * job; the stages before the loop one request after another (a failure
 * ends that request alone), the loop over all of them (denoise_run_batch),
 * then each request's decode and result. */
static void generate_lockstep(cosmos3_engine *e, int n, const cosmos3_request *const *r,
                              const bool *skip, cosmos3_result **out, int *rc, char *err,
                              size_t errlen) {
    c3_runtime *rt = &e->rt;
    gen_job *g = xcalloc((size_t)n, sizeof *g);
    uint64_t *job = xcalloc((size_t)n, sizeof *job);
    c3_denoise *js[C3_BATCH_MAX];
    int idx[C3_BATCH_MAX], m = 0;
    for (int i = 0; i < n; i++) {
        if (skip[i]) continue;
        job[i] = rt_job_new(rt);
        rt_job_set(rt, job[i], r[i]->on_event, r[i]->user);
        g[i] = (gen_job){.e = e, .rq = r[i], .t_start = c3_now()};
        g[i].res = xcalloc(1, sizeof *g[i].res);
        g[i].res->job = job[i];
        g[i].j = (c3_denoise){.rt = rt, .tc = &e->ck.t, .s = &g[i].s};
        int k = gen_settings(&g[i]);
        if (k == C3_OK) k = gen_tokenize(&g[i]);
        if (k == C3_OK) k = gen_noise(&g[i]);
        if (k == C3_OK) k = gen_schedule(&g[i]);
        if (k == C3_OK) k = gen_denoise_prep(&g[i]);
        if (k == C3_OK && r[i]->cancel && *r[i]->cancel) k = c3_fail(C3_ECANCEL, "cancelled");
        if (k) { /* this request ends alone, before the batch starts */
            rc[i] = job_end(e, k, c3_errmsg(), g[i].res, &out[i]);
            g[i].res = NULL;
            if (err) snprintf(err + (size_t)i * errlen, errlen, "%s", c3_errmsg());
            gen_free(&g[i]);
            continue;
        }
        idx[m++] = i;
        warn_stash(e, &g[i]);
    }
    for (int q = 0; q < m; q++) { /* the loop's events go to each request's job */
        gen_job *gi = &g[idx[q]];
        gi->j.job = job[idx[q]];
        gi->j.on_event = gi->rq->on_event;
        gi->j.user = gi->rq->user;
        if (m > 1 && gi->j.cache) { /* the step cache decides per call; a batch shares them */
            rt_job_set(rt, job[idx[q]], gi->rq->on_event, gi->rq->user);
            warn_restore(e, gi);
            char w[160];
            snprintf(w, sizeof w,
                     "cache: off inside a batch of %d requests (each step's GEN call is "
                     "shared, so no request skips one alone)",
                     m);
            add_warning(e, w);
            warn_stash(e, gi);
            gi->j.cache = NULL;
        }
        js[q] = &gi->j;
    }
    rt_job_set(rt, 0, NULL, NULL);
    int all = m ? denoise_run_batch(js, m) : C3_OK;
    char allmsg[1024];
    snprintf(allmsg, sizeof allmsg, "%s", all ? c3_errmsg() : "");
    for (int q = 0; q < m; q++) {
        int i = idx[q];
        gen_job *gi = &g[i];
        rt_job_set(rt, job[i], r[i]->on_event, r[i]->user);
        warn_restore(e, gi);
        int k = all        ? c3_fail(all, "%s", allmsg)
                : gi->j.rc ? c3_fail(gi->j.rc, "%s", gi->j.err)
                           : C3_OK;
        if (k == C3_OK) k = gen_denoise_post(gi);
        if (k == C3_OK) k = gen_decode(gi);
        if (k == C3_OK) gen_result(gi);
        rc[i] = job_end(e, k, k ? c3_errmsg() : "", gi->res, &out[i]);
        gi->res = NULL;
        if (rc[i] && err) snprintf(err + (size_t)i * errlen, errlen, "%s", c3_errmsg());
        gen_free(gi);
    }
    free(g);
    free(job);
}

int cosmos3_generate_batch(cosmos3_engine *e, int n, const cosmos3_request *const *r,
                           cosmos3_result **out, int *rc, char *err, size_t errlen) {
    if (!e || !r || !out || !rc || n < 1)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_generate_batch: NULL argument or n < 1"), err,
                        errlen);
    for (int i = 0; i < n; i++) {
        out[i] = NULL;
        rc[i] = C3_OK;
        if (err && errlen) err[(size_t)i * errlen] = 0;
    }
    int top = C3_OK;
    for (int i = 0; i < n && !top; i++)
        if (!r[i]) top = c3_fail(C3_EUSAGE, "cosmos3_generate_batch: request %d is NULL", i);
    /* every request's shape: those that do not resolve, or differ from the
     * first that does, are refused alone */
    batch_shape *sh = xcalloc((size_t)n, sizeof *sh);
    bool *skip = xcalloc((size_t)n, sizeof *skip);
    int ref = -1, max = 1;
    uint64_t key0 = 0;
    for (int i = 0; i < n && !top; i++) {
        char *ei = err ? err + (size_t)i * errlen : NULL;
        int k = batch_shape_of(e, r[i], &sh[i]);
        if (k == C3_OK && ref < 0) {
            ref = i;
            key0 = batch_key_of(e, &sh[i]);
            max = cosmos3_batch_max(e, r[i]);
        } else if (k == C3_OK && batch_key_of(e, &sh[i]) != key0) {
            char why[160];
            batch_differs(&sh[i], &sh[ref], why, sizeof why);
            k = c3_fail(C3_EUSAGE,
                        "request %d %s; a batch holds requests of one batch key "
                        "(cosmos3_batch_key): run it in another batch",
                        i, why);
        }
        if (k) { /* its own job, ended at once (another may be running: no current job) */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", c3_errmsg());
            cosmos3_event ev = {.kind = COSMOS3_EV_FAILED, .status = k, .text = msg};
            rt_emit_to(&e->rt, rt_job_new(&e->rt), r[i]->on_event, r[i]->user, &ev);
            rc[i] = give_err(c3_fail(k, "%s", msg), ei, errlen);
            skip[i] = true;
        }
    }
    int idle = 0;
    if (!top && ref >= 0 && batch_lockstep(e, &sh[ref]) && n > 1) {
        if (!__atomic_compare_exchange_n(&e->busy, &idle, 1, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            top = c3_fail(C3_EUSAGE, "the engine is busy with another generation");
        } else {
            /* more than the plan allows in one: several batches, one after
             * another (a cosmos3_cancel stops the later ones too) */
            e->rt.cancel = 0;
            for (int o = 0; o < n; o += max) {
                generate_lockstep(e, C3_MIN(max, n - o), r + o, skip + o, out + o, rc + o,
                                  err ? err + (size_t)o * errlen : NULL, errlen);
            }
            __atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
        }
    } else if (!top) {
        /* one after another (Ulysses, processes, conditioning, sound, one
         * request); cosmos3_cancel (not a request's own flag) stops the rest */
        bool stopped = false;
        for (int i = 0; i < n; i++) {
            if (skip[i]) continue;
            char *ei = err ? err + (size_t)i * errlen : NULL;
            if (stopped) {
                cosmos3_event ev = {.kind = COSMOS3_EV_CANCELLED, .status = C3_ECANCEL};
                rt_emit_to(&e->rt, rt_job_new(&e->rt), r[i]->on_event, r[i]->user, &ev);
                rc[i] = give_err(c3_fail(C3_ECANCEL, "cancelled"), ei, errlen);
                continue;
            }
            rc[i] = cosmos3_generate(e, r[i], &out[i], ei, errlen);
            stopped = rc[i] == C3_ECANCEL && !(r[i]->cancel && *r[i]->cancel);
        }
    }
    free(sh);
    free(skip);
    if (top) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", c3_errmsg());
        for (int i = 0; i < n; i++) {
            rc[i] = top;
            if (err && errlen) snprintf(err + (size_t)i * errlen, errlen, "%s", msg);
        }
        return top;
    }
    return C3_OK;
}

int cosmos3_decode(cosmos3_engine *e, cosmos3_result *res, char *err, size_t errlen) {
    if (!e || !res)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_decode: NULL argument"), err, errlen);
    if (res->rgb) return C3_OK; /* decoded already (in cosmos3_generate, or before) */
    const int *ls = res->latent_shape;
    if (!res->latents || ls[1] != e->ck.t.latent_ch || ls[2] < 1 || ls[3] < 1 || ls[4] < 1)
        return give_err(c3_fail(C3_EUSAGE,
                                "cosmos3_decode: the result holds no latents of this model to "
                                "decode; generate it with defer_decode on this engine"),
                        err, errlen);
    /* no events and no cancel here: the job ended with its COSMOS3_EV_DONE,
     * and cosmos3_cancel stops the generation in flight, not this decode */
    int rc = decode_frames(e, res->latents, ls[2], ls[3], ls[4], res->fps, res, NULL);
    if (rc == C3_OK && res->sound_latents && !res->sound && e->avae)
        rc = decode_sound(e, res->sound_latents, res->sound_latent_shape[1], res);
    if (rc) {
        free(res->rgb);
        res->rgb = NULL;
        free(res->sound);
        res->sound = NULL;
        return give_err(rc, err, errlen);
    }
    res->timings.total += res->timings.vae + res->timings.sound;
    return C3_OK;
}
