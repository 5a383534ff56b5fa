/* session.c - a session on the engine: settings -> cosmos3_request (the
 * model's defaults, the user's options over them), the engine's events
 * queued, its inputs read (noise, conditioning media, first-last) and its
 * frames written to the files -o names (output.c, any format) with their
 * metadata (metadata.c). */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cond_input.h"
#include "metadata.h"
#include "output.h"

struct c3_session {
    cosmos3_engine *e;
    c3_events *ev;
    cosmos3_layout layout;
    cosmos3_model_info model;
};

const cosmos3_layout *session_layout(const c3_session *e) {
    return &e->layout;
}
const cosmos3_model_info *session_model(const c3_session *e) {
    return &e->model;
}
cosmos3_engine *session_library(c3_session *e) {
    return e->e;
}
void session_cancel(c3_session *e) {
    if (e) cosmos3_cancel(e->e);
}

const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n) {
    return cosmos3_model_dir(s->model, buf, n);
}

/* ------------------------------------------------------------- settings */

int settings_seed(const char *text, int64_t *seed) {
    *seed = -1;
    if (!text || !strcmp(text, "random")) return COSMOS3_OK;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v > (unsigned long long)INT64_MAX)
        return c3_fail(COSMOS3_EUSAGE, "--seed '%s' must be an integer in 0..2^63-1 or 'random'",
                       text);
    *seed = (int64_t)v;
    return COSMOS3_OK;
}

/* One option the user gave, over the model's default in rq. */
static void give(cosmos3_request *rq, const c3_settings *s, cosmos3_field f) {
    switch (f) {
    case COSMOS3_FIELD_WIDTH:
        rq->width = s->width;
        break;
    case COSMOS3_FIELD_HEIGHT:
        rq->height = s->height;
        break;
    case COSMOS3_FIELD_STEPS:
        rq->steps = s->steps;
        break;
    case COSMOS3_FIELD_GUIDANCE:
        rq->guidance = s->guidance;
        break;
    case COSMOS3_FIELD_SHIFT:
        rq->shift = s->shift;
        break;
    case COSMOS3_FIELD_SCHEDULE:
        rq->schedule = s->schedule;
        break;
    case COSMOS3_FIELD_GUIDANCE_INTERVAL:
        rq->guidance_interval = s->guidance_interval.on;
        rq->guidance_lo = s->guidance_interval.lo;
        rq->guidance_hi = s->guidance_interval.hi;
        break;
    case COSMOS3_FIELD_TEMPLATES:
        rq->templates = s->templates;
        break;
    default:
        break; /* the rest are set from s whether given or not */
    }
}

/* The request s gives on e: the model's real defaults for the task, then
 * every option the user gave (the options table says which field each
 * fills), each value as written. Strings point into s. */
static void settings_request(const c3_settings *s, const c3_session *e, cosmos3_request *rq) {
    cosmos3_request_defaults(e ? e->e : NULL, s->frames, rq);
    for (int i = 0; i < c3_noptions; i++)
        if (s->given[i]) give(rq, s, c3_options[i].field);
    rq->prompt = s->prompt;
    rq->negative_prompt = s->negative;
    rq->frames = s->frames;
    rq->fps = s->fps;
    int64_t seed;
    if (settings_seed(s->seed, &seed) == COSMOS3_OK) rq->seed = seed;
    if (s->system_prompt && strcmp(s->system_prompt, "auto"))
        rq->system_prompt = !strcmp(s->system_prompt, "on");
    /* the step cache */
    if (s->cache && strcmp(s->cache, "none")) rq->cache = s->cache;
    if (s->given[option_index(option_find("cache-threshold"))]) /* as written: -1 is refused */
        rq->cache_threshold = s->cache_threshold;
    rq->cache_max_skip = s->cache_max_skip;
    rq->cache_warmup = s->cache_warmup;
    rq->sound = s->sound;
    rq->max_sequence_length = s->max_seq;
}

/* The library's refusal in the options' words: the option that fills the
 * field (the options table), its value, the reason, the fix's option. */
static int option_error(const cosmos3_error *er) {
    const c3_option *o = option_for_field(er->field);
    if (!o) return c3_fail(er->status, "%s", er->message);
    char fix[96] = "";
    const c3_option *fo = option_for_field(er->fix);
    if (fo && er->fix_value[0])
        snprintf(fix, sizeof fix, "; use --%s %s", fo->name, er->fix_value);
    else if (fo)
        snprintf(fix, sizeof fix, "; leave --%s out", fo->name);
    return c3_fail(er->status, "--%s%s%s %s%s", o->name, er->value[0] ? " " : "", er->value,
                   er->reason, fix);
}

int session_check(const c3_settings *s, const c3_session *e, bool need_prompt, cosmos3_request *rq,
                  cosmos3_settings *st) {
    if (need_prompt && !s->prompt)
        return c3_fail(COSMOS3_EUSAGE, "no prompt; give one with -p \"a red fox in the snow\"");
    int64_t seed;
    APP_TRY(settings_seed(s->seed, &seed));
    if (s->tp < 1 || s->cfg_parallel < 1 || s->ulysses < 1)
        return c3_fail(COSMOS3_EUSAGE, "--tp, --cfg-parallel and --ulysses must be at least 1");
    if (s->threads < 0)
        return c3_fail(COSMOS3_EUSAGE, "--threads %d must be 0 (all cores) or more", s->threads);
    cosmos3_request own;
    cosmos3_settings own_st;
    if (!rq) rq = &own;
    if (!st) st = &own_st;
    settings_request(s, e, rq);
    cosmos3_error er;
    if (cosmos3_request_check(e ? e->e : NULL, rq, st, &er)) return option_error(&er);
    return COSMOS3_OK;
}

void settings_show_resolved(c3_settings *d, const cosmos3_settings *st) {
    d->width = st->width;
    d->height = st->height;
    d->steps = st->steps;
    d->guidance = st->guidance;
    d->shift = st->shift;
    free(d->schedule);
    d->schedule = xstrdup(st->schedule);
    d->guidance_interval.on = st->guidance_interval;
    d->guidance_interval.lo = st->guidance_lo;
    d->guidance_interval.hi = st->guidance_hi;
    d->templates = st->templates;
}

/* ------------------------------------------------------------- events */

/* The engine's events, queued as they come; a GPU's memory now is the
 * monitor's poll (monitor.h), on the thread that draws. */
static void on_event(const cosmos3_event *ev, void *user) {
    c3_session *s = user;
    events_push_engine(s->ev, ev);
}

/* ------------------------------------------------------------- engine */

void session_open_params(const c3_settings *s, cosmos3_open_params *op) {
    cosmos3_open_params_init(op);
    op->model = s->model;
    op->device = s->device;
    op->gpus = s->gpus;
    op->tp = s->tp;
    op->cfg_parallel = s->cfg_parallel;
    op->ulysses = s->ulysses;
    op->offload = s->offload;
    op->ranks_per_process = s->ranks_per_process;
    op->allow_cross_host = s->allow_cross_host;
    op->precision = s->precision;
    op->attention = s->attention;
    op->threads = s->threads;
}

int session_open(c3_session **out, const c3_settings *s, c3_events *ev) {
    *out = NULL;
    c3_session *e = xcalloc(1, sizeof *e);
    e->ev = ev;
    cosmos3_open_params op;
    session_open_params(s, &op);
    if (settings_given(s, COSMOS3_FIELD_WIDTH)) op.plan_width = s->width;
    if (settings_given(s, COSMOS3_FIELD_HEIGHT)) op.plan_height = s->height;
    op.plan_frames = s->frames;
    op.on_event = on_event;
    op.user = e;
    char err[1024];
    int rc = cosmos3_open(&op, &e->e, err, sizeof err);
    if (rc) {
        free(e);
        return c3_fail(rc, "%s", err);
    }
    cosmos3_layout_get(e->e, &e->layout);
    cosmos3_model(e->e, &e->model);
    if (e->layout.process != 0) { /* ranks in several processes: this one follows process 0 */
        rc = cosmos3_follow(e->e, err, sizeof err);
        cosmos3_close(e->e);
        if (rc) fprintf(stderr, "cosmos3: process %d: %s\n", e->layout.process, err);
        exit(rc ? rc : 0);
    }
    *out = e;
    return COSMOS3_OK;
}

void session_close(c3_session *e) {
    if (!e) return;
    cosmos3_close(e->e);
    free(e);
}

/* ------------------------------------------------------------- results */

json_t *result_json(const session_result *res) {
    static const cosmos3_result none;
    const cosmos3_result *r = res->out ? res->out : &none;
    const cosmos3_timings *t = &r->timings;
    json_t *o = json_pack("{s:I,s:i,s:i,s:i,s:i,s:f,s:f,s:s,s:i,s:i}", "seed", (json_int_t)r->seed,
                          "width", r->width, "height", r->height, "frames", r->frames, "steps",
                          r->steps, "guidance", r->guidance, "shift", r->shift, "schedule",
                          r->schedule, "L_cond", r->L_cond, "L_uncond", r->L_uncond);
    json_object_set_new(o, "seconds",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "tokenize", t->tokenize,
                                  "und", t->und, "denoise", t->denoise, "step_mean", t->step_mean,
                                  "cond_mean", t->cond_mean, "uncond_mean", t->uncond_mean, "vae",
                                  t->vae, "write", res->t_write, "total", res->t_total));
    json_object_set_new(o, "mem_peak_bytes", json_integer(r->mem_peak));
    if (r->cache[0] && strcmp(r->cache, "none")) /* the step cache */
        json_object_set_new(o, "cache",
                            json_pack("{s:s,s:f,s:i,s:i,s:i}", "kind", r->cache, "threshold",
                                      r->cache_threshold, "max_skip", r->cache_max_skip, "warmup",
                                      r->cache_warmup, "steps_cached", r->steps_cached));
    double gbps = r->h2d_seconds > 0 ? (double)r->h2d_bytes / r->h2d_seconds / 1e9 : 0;
    json_object_set_new(o, "offload",
                        json_pack("{s:I,s:f,s:f}", "h2d_bytes", (json_int_t)r->h2d_bytes,
                                  "h2d_seconds", r->h2d_seconds, "h2d_gbps", gbps));
    json_t *ph = json_object();
    json_object_set_new(ph, "load",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I}", "total", t->load, "read",
                                  t->load_read, "backends", t->load_backends, "weights",
                                  t->load_weights, "vae", t->load_vae, "tokenizer",
                                  t->load_tokenizer, "prefault_bytes",
                                  (json_int_t)t->load_prefault_bytes));
    json_object_set_new(ph, "tokenize", json_real(t->tokenize));
    json_object_set_new(ph, "und", json_real(t->und));
    json_object_set_new(ph, "cond_encode", json_real(t->encode));
    json_object_set_new(ph, "steps",
                        json_pack("{s:f,s:i,s:f,s:f,s:f,s:f}", "total", t->denoise, "count",
                                  r->steps, "first", t->step_first, "mean", t->step_mean,
                                  "rest_mean", t->step_rest_mean, "host_mean", t->step_host_mean));
    json_object_set_new(ph, "decode", json_real(t->vae));
    double named = t->tokenize + t->und + t->encode + t->denoise + t->vae;
    json_object_set_new(ph, "other", json_real(C3_MAX(0.0, t->total - named)));
    json_object_set_new(ph, "encode", json_real(res->t_media_encode));
    json_object_set_new(ph, "write", json_real(res->t_write));
    json_object_set_new(ph, "generate", json_real(res->t_total));
    if (res->t_launch_first_step >= 0) { /* the process's start to the load's, and to step 1 */
        json_object_set_new(ph, "start",
                            json_real(C3_MAX(0.0, res->t_launch_first_step -
                                                      (t->clock_first_step - t->clock_open))));
        json_object_set_new(ph, "launch_to_first_step", json_real(res->t_launch_first_step));
    }
    if (res->t_launch_total >= 0) json_object_set_new(ph, "total", json_real(res->t_launch_total));
    json_object_set_new(o, "phases", ph);
    return o;
}

bool result_wrote_line(const session_result *r, char *buf, size_t n) {
    const cosmos3_result *o = r->out;
    if (!o || r->npaths < 1) return false;
    const char *first = !strcmp(r->paths[0], "-") ? "standard output" : r->paths[0];
    /* with --noise the seed drew nothing: no seed is named */
    char seed[48] = "";
    if (!o->noise_given) snprintf(seed, sizeof seed, "seed %llu, ", (unsigned long long)o->seed);
    if (r->npaths == 1 && o->frames > 1)
        snprintf(buf, n, "wrote %s (%d frames, %g fps, %s%.1f s)", first, o->frames, o->fps, seed,
                 r->t_total);
    else if (r->npaths == 1)
        snprintf(buf, n, "wrote %s (%s%.1f s)", first, seed, r->t_total);
    else
        snprintf(buf, n, "wrote %d frames %s .. %s (%s%.1f s)", r->npaths, r->paths[0],
                 r->paths[r->npaths - 1], seed, r->t_total);
    return true;
}

void result_phases_line(const session_result *res, char *buf, size_t n) {
    static const cosmos3_result none;
    const cosmos3_result *r = res->out ? res->out : &none;
    const cosmos3_timings *t = &r->timings;
    char launch[128] = "";
    if (res->t_launch_first_step >= 0 && res->t_launch_total >= 0)
        snprintf(launch, sizeof launch, ", launch to first step %.2f, total %.2f",
                 res->t_launch_first_step, res->t_launch_total);
    char enc[48] = "";
    if (t->encode > 0) snprintf(enc, sizeof enc, ", cond encode %.2f", t->encode);
    snprintf(buf, n,
             "phases: load %.2f (read %.2f, backends %.2f, weights %.2f, vae %.2f, tokenizer "
             "%.2f), tokenize %.3f, und %.3f%s, steps %.2f (%d: first %.3f, mean %.3f, rest "
             "%.3f), decode %.2f, write %.2f (encode %.2f), generate %.2f%s s",
             t->load, t->load_read, t->load_backends, t->load_weights, t->load_vae,
             t->load_tokenizer, t->tokenize, t->und, enc, t->denoise, r->steps, t->step_first,
             t->step_mean, t->step_rest_mean, t->vae, res->t_write, res->t_media_encode,
             res->t_total, launch);
}

static double g_ctor_clock;
__attribute__((constructor)) static void record_ctor_clock(void) {
    g_ctor_clock = c3_now();
}

double session_process_start(void) {
    /* /proc/self/stat field 22: the start in clock ticks after boot (CLOCK_BOOTTIME) */
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[got] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ticks = 0;
    bool ok = p != NULL;
    for (int field = 3; ok && field <= 22; field++) { /* p: just before field 3 */
        p = strchr(p + 1, ' ');
        ok = p != NULL;
    }
    if (ok) ok = sscanf(p, " %llu", &ticks) == 1; /* p: the space before field 22 */
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec bt, mt;
    if (!ok || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &bt) || clock_gettime(CLOCK_MONOTONIC, &mt))
        return g_ctor_clock;
    double boot_minus_mono =
        (double)(bt.tv_sec - mt.tv_sec) + 1e-9 * (double)(bt.tv_nsec - mt.tv_nsec);
    double start = (double)ticks / (double)hz - boot_minus_mono;
    /* the tick count is 10 ms coarse: never later than the constructors; a
       start long before them is another clock's (a time namespace): theirs */
    if (start > g_ctor_clock || g_ctor_clock - start > 30) return g_ctor_clock;
    return start;
}

void result_free(session_result *r) {
    for (int i = 0; i < r->npaths; i++)
        free(r->paths[i]);
    free(r->paths);
    free(r->png_parameters);
    free(r->meta_json);
    cosmos3_result_free(r->out);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------- generate */

/* A random seed below 2^53 (every JSON reader keeps it exact). */
static uint64_t random_seed(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)(c3_now() * 1e9);
    return v & ((1ull << 53) - 1);
}

/* What a request reads before the call: the initial noise (and the
 * fixed-step sampler's draws), the conditioning picture or clip (files, or
 * frames in memory), first-last's clip of both ends. */
typedef struct {
    float *noise, *step_noise, *sound_noise;
    c3_cond_file cf;      /* the conditioning frames (first-last: its clip) */
    cosmos3_frames media; /* what the request points at */
    int cidx[64], ncidx;
    char *fl_a, *fl_b; /* --first-last START END (fl_b points into fl_a) */
    uint64_t hash;     /* the conditioning files' (the metadata's) */
} gen_inputs;

static void inputs_free(gen_inputs *gi) {
    free(gi->noise);
    free(gi->sound_noise);
    free(gi->step_noise);
    cond_file_free(&gi->cf);
    free(gi->fl_a);
    memset(gi, 0, sizeof *gi);
}

/* --noise FILE: the latents (and step_noise) into rq. */
static int noise_load(const c3_settings *s, const cosmos3_settings *st, int sound_dim,
                      cosmos3_request *rq, gen_inputs *gi) {
    char err[1024];
    size_t n;
    int rc = cosmos3_latents_read(s->noise, st->latent_shape, &gi->noise, &n, err, sizeof err);
    if (rc) /* exit 4 for any bad noise; only a shape the size decides names the options */
        return c3_fail(COSMOS3_EINPUT, "--noise %s%s", err,
                       rc == COSMOS3_EUSAGE ? "; check -W/-H/--frames" : "");
    rq->noise = gi->noise;
    rq->noise_len = n;
    /* the fixed-step SDE sampler's re-noising draws, when the file has them */
    if (!strcmp(st->schedule, "flowmatch4") &&
        (rc = cosmos3_step_noise_read(s->noise, st->steps, st->latent_shape, &gi->step_noise, &n,
                                      err, sizeof err)))
        return c3_fail(COSMOS3_EINPUT, "--noise %s%s", err, /* the steps decide its first size */
                       rc == COSMOS3_EUSAGE ? "; check -W/-H/--frames and --steps" : "");
    rq->step_noise = gi->step_noise;
    rq->step_noise_len = n;
    /* the initial sound noise, when the file has it and sound is asked */
    if (s->sound && sound_dim > 0) {
        if ((rc = cosmos3_sound_noise_read(s->noise, sound_dim, &gi->sound_noise, &n, err,
                                           sizeof err)))
            return c3_fail(COSMOS3_EINPUT, "--noise %s", err);
        rq->sound_noise = gi->sound_noise;
        rq->sound_noise_len = n;
    }
    return COSMOS3_OK;
}

/* The conditioning input into rq: frames in memory (in), a picture or clip
 * from files (--image, --video), or first-last's clip of both ends. */
static int cond_load(const c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                     const cosmos3_settings *st, cosmos3_request *rq, gen_inputs *gi) {
    bool cond_image = in ? !in->video : s->image != NULL,
         cond_video = in ? in->video : s->video != NULL;
    if (s->first_last) {
        gi->fl_a = xstrdup(s->first_last);
        if ((gi->fl_b = strchr(gi->fl_a, '\n'))) *gi->fl_b++ = 0;
    }
    if (!!s->image + !!s->video + !!s->first_last > 1 || (in && (s->image || s->video || gi->fl_a)))
        return c3_fail(COSMOS3_EUSAGE, "%s and %s together; give one conditioning input, not both",
                       s->image ? "--image" : "--video",
                       s->first_last ? "--first-last" : "--video");
    if (gi->fl_a && !gi->fl_b)
        return c3_fail(COSMOS3_EUSAGE, "--first-last needs two values (START END)");
    if (in) { /* frames in memory (the server's decoded references) */
        gi->cf.media = (cosmos3_frames){
            .rgb = in->rgb, .width = in->width, .height = in->height, .frames = in->frames};
        gi->cf.hash =
            c3_fnv1a(in->rgb, (size_t)in->width * in->height * 3 * (size_t)in->frames, C3_FNV_INIT);
    } else if (s->image || s->video) {
        c3_cond_use use = {st->width, st->height, st->frames,
                           s->condition_keep && !strcmp(s->condition_keep, "last")};
        APP_TRY(cond_file_read_for(s->image ? s->image : s->video, s->video != NULL, &use, &gi->cf));
    }
    if (cond_video) APP_TRY(cond_parse_frames(s->condition_frames, gi->cidx, 64, &gi->ncidx));
    if (gi->fl_a) { /* both ends, as one clip of the request's size */
        /* the start's first frames, the end's last ones */
        c3_cond_use fl_use = {st->width, st->height, st->frames, false},
                    fl_end = {st->width, st->height, st->frames, true};
        c3_cond_file cb = {0};
        APP_TRY(cond_file_read_use_as(gi->fl_a, true, &fl_use, "first-last", &gi->cf));
        int rc = cond_file_read_use_as(gi->fl_b, true, &fl_end, "first-last", &cb);
        uint8_t *fl_rgb = NULL;
        char err[1024];
        if (rc == COSMOS3_OK &&
            (rc = cosmos3_first_last(&gi->cf.media, &cb.media, st->frames, st->width, st->height,
                                     e->model.vae_temporal, &fl_rgb, gi->cidx, 64, &gi->ncidx, err,
                                     sizeof err)))
            rc = c3_fail(rc, "%s", err);
        if (rc == COSMOS3_OK) {
            gi->cf.hash = gi->cf.hash * 0x100000001b3ull ^ cb.hash; /* both ends' files */
            free(gi->cf.rgb);
            gi->cf.rgb = fl_rgb; /* freed with cf */
            gi->cf.media = (cosmos3_frames){
                .rgb = fl_rgb, .width = st->width, .height = st->height, .frames = st->frames};
        }
        cond_file_free(&cb);
        APP_TRY(rc);
    }
    gi->hash = gi->cf.hash;
    if (!cond_image && !cond_video && !gi->fl_a) return COSMOS3_OK;
    gi->media = gi->cf.media;
    if (cond_image) rq->image = &gi->media;
    if (cond_video || gi->fl_a) {
        rq->video = &gi->media;
        rq->condition_frames = gi->cidx;
        rq->ncondition_frames = gi->ncidx;
        rq->condition_keep = s->condition_keep && !strcmp(s->condition_keep, "last") && !gi->fl_a
                                 ? COSMOS3_KEEP_LAST
                                 : COSMOS3_KEEP_FIRST;
    }
    return COSMOS3_OK;
}

/* After the call: the latents (--save-latents), the metadata, and the
 * files (when o is not NULL), each announced on the queue. */
static int outputs_write(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                         const gen_inputs *gi, const c3_output *o, session_result *res) {
    const cosmos3_result *r = res->out;
    char err[1024];
    if (e->layout.process == 0 && s->save_latents &&
        cosmos3_latents_write_sound(s->save_latents, r->latents, r->latent_shape, r->sound_latents,
                                    r->sound_latent_shape, s->overwrite, err, sizeof err))
        return c3_fail(COSMOS3_EOUTPUT, "%s", err);
    double t0 = c3_now();
    res->png_parameters = metadata_parameters(r);
    c3_meta_extra x = {.system_prompt = s->system_prompt,
                       .noise = s->noise,
                       .image = in && !in->video ? in->name : s->image,
                       .video = in && in->video ? in->name : s->video,
                       .condition_frames = s->condition_frames,
                       .condition_keep = s->condition_keep,
                       .first = gi->fl_a,
                       .last = gi->fl_b,
                       .condition_hash = gi->hash};
    res->meta_json = metadata_json(r, &x);
    c3_media_meta m = {res->png_parameters, res->meta_json};
    int rc = COSMOS3_OK;
    if (o) rc = output_write_timed(o, r, &m, &res->paths, &res->npaths, &res->t_media_encode);
    for (int i = 0; rc == COSMOS3_OK && i < res->npaths; i++)
        events_emit(e->ev, EV_WROTE, 0, "%s", res->paths[i]);
    res->t_write = c3_now() - t0;
    return rc;
}

/* One generation: the request checked, its inputs read, the engine's call,
 * its outputs written (the files only when write). *called: the engine had
 * the request (its events end the job). */
static int generate(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                    session_result *res, bool write, bool *called) {
    double t_start = c3_now();
    /* ranks in several processes (mpirun, srun): process 0 writes, the others nothing */
    bool lead = e->layout.process == 0;
    if (!lead) write = false;
    cosmos3_request rq;
    cosmos3_settings st;
    APP_TRY(session_check(s, e, true, &rq, &st));
    /* the seed is drawn here: it names the output before any work */
    if (rq.seed < 0) rq.seed = (int64_t)random_seed();
    rq.want_latents = s->save_latents != NULL;
    c3_output o = {0};
    if (write) APP_TRY(output_plan(s, st.frames, st.width, st.height, rq.seed, &o));
    gen_inputs gi = {0};
    int rc = COSMOS3_OK;
    if (lead && s->save_latents && !s->overwrite && c3_file_exists(s->save_latents))
        rc =
            c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another --save-latents",
                    s->save_latents);
    if (rc == COSMOS3_OK && s->noise) rc = noise_load(s, &st, e->model.sound_dim, &rq, &gi);
    if (rc == COSMOS3_OK) rc = cond_load(e, s, in, &st, &rq, &gi);
    if (rc == COSMOS3_OK) {
        char err[1024];
        *called = true;
        rc = cosmos3_generate(e->e, &rq, &res->out, err, sizeof err);
        if (rc) c3_fail(rc, "%s", err);
    }
    if (rc == COSMOS3_OK) rc = outputs_write(e, s, in, &gi, write ? &o : NULL, res);
    inputs_free(&gi);
    output_free(&o);
    res->t_total = c3_now() - t_start;
    return rc;
}

/* A job: one generation. The engine's events end it once it had the
 * request; a refusal before that is the application's EV_ERROR. */
static int generate_job(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                        session_result *res, bool write) {
    memset(res, 0, sizeof *res);
    res->t_launch_first_step = res->t_launch_total = -1; /* the program's to set */
    bool called = false;
    int rc = generate(e, s, in, res, write, &called);
    if (rc && !called) events_emit(e->ev, EV_ERROR, rc, "%s", c3_errmsg());
    return rc;
}

int session_generate(c3_session *e, const c3_settings *s, session_result *res) {
    return generate_job(e, s, NULL, res, true);
}

int session_generate_frames(c3_session *e, const c3_settings *s, session_result *res) {
    return generate_job(e, s, NULL, res, false);
}

int session_generate_frames_with(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                                 session_result *res) {
    return generate_job(e, s, in, res, false);
}

/* ------------------------------------------------------------- batches */

struct session_req {
    const c3_settings *s;
    const c3_cond_frames *in;
    cosmos3_request rq;
    cosmos3_settings st;
    gen_inputs gi;
    double t_start;
};

int session_prepare(c3_session *e, const c3_settings *s, const c3_cond_frames *in,
                    session_req **out) {
    *out = NULL;
    session_req *q = xcalloc(1, sizeof *q);
    q->s = s;
    q->in = in;
    q->t_start = c3_now();
    int rc = session_check(s, e, true, &q->rq, &q->st);
    if (rc == COSMOS3_OK && q->rq.seed < 0) q->rq.seed = (int64_t)random_seed();
    if (rc == COSMOS3_OK && s->noise)
        rc = noise_load(s, &q->st, e->model.sound_dim, &q->rq, &q->gi);
    if (rc == COSMOS3_OK) rc = cond_load(e, s, in, &q->st, &q->rq, &q->gi);
    if (rc) {
        session_req_free(q);
        return rc;
    }
    *out = q;
    return COSMOS3_OK;
}

cosmos3_request *session_req_request(session_req *q) {
    return &q->rq;
}

int session_req_finish(c3_session *e, session_req *q, cosmos3_result *out, session_result *res) {
    memset(res, 0, sizeof *res);
    res->t_launch_first_step = res->t_launch_total = -1;
    res->out = out;
    int rc = outputs_write(e, q->s, q->in, &q->gi, NULL, res);
    res->t_total = c3_now() - q->t_start;
    return rc;
}

void session_req_free(session_req *q) {
    if (!q) return;
    inputs_free(&q->gi);
    free(q);
}
