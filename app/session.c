/* session.c - settings -> cosmos3_request, engine events -> the queue,
 * frames -> the files -o names (output.c, any format) with their metadata
 * (metadata.c). */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cond_input.h"
#include "metadata.h"
#include "output.h"

struct c3_engine {
    cosmos3_engine *e;
    c3_events *ev;
    cosmos3_layout layout;
    cosmos3_model_info model;
};

const cosmos3_layout *engine_layout(const c3_engine *e) {
    return &e->layout;
}
const cosmos3_model_info *engine_model(const c3_engine *e) {
    return &e->model;
}
cosmos3_engine *engine_library(c3_engine *e) {
    return e->e;
}
void engine_cancel(c3_engine *e) {
    if (e) cosmos3_cancel(e->e);
}

const char *pipeline_model_dir(const c3_settings *s, char *buf, size_t n) {
    return cosmos3_model_dir(s->model, buf, n);
}

/* ------------------------------------------------------------- settings */

#define GIVEN(s, name) ((s)->given[option_index(option_find(name))])

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

/* -1 is the library's "default" (COSMOS3_DEFAULT): a user's -1 goes in as
 * another value the library refuses in the same words (0 for counts, -2
 * for the rest), and option_fail() puts the -1 back into the message. */
#define USER_INT(v) ((v) == COSMOS3_DEFAULT ? 0 : (v))
#define USER_REAL(v) ((v) == COSMOS3_DEFAULT ? -2.0 : (v))

void settings_request(const c3_settings *s, cosmos3_request *rq) {
    cosmos3_request_init(rq);
    rq->prompt = s->prompt;
    rq->negative_prompt = s->negative;
    if (GIVEN(s, "width")) rq->width = USER_INT(s->width);
    if (GIVEN(s, "height")) rq->height = USER_INT(s->height);
    rq->frames = USER_INT(s->frames);
    rq->fps = USER_REAL(s->fps);
    if (GIVEN(s, "steps")) rq->steps = USER_INT(s->steps);
    if (GIVEN(s, "guidance")) rq->guidance = USER_REAL(s->guidance);
    if (GIVEN(s, "shift")) rq->shift = USER_REAL(s->shift);
    if (GIVEN(s, "schedule")) rq->schedule = s->schedule;
    if (GIVEN(s, "guidance-interval")) {
        rq->guidance_interval = s->guidance_interval.on;
        rq->guidance_lo = s->guidance_interval.lo;
        rq->guidance_hi = s->guidance_interval.hi;
    }
    int64_t seed;
    if (settings_seed(s->seed, &seed) == COSMOS3_OK) rq->seed = seed;
    if (s->system_prompt && strcmp(s->system_prompt, "auto"))
        rq->system_prompt = !strcmp(s->system_prompt, "on");
    if (GIVEN(s, "templates")) rq->templates = s->templates;
}

/* The library names a request's field ("steps 0 must be ..."); the
 * applications speak in options ("--steps 0 must be ..."). */
static int option_fail(const c3_settings *s, const char *msg) {
    static const struct {
        const char *field;
        bool count; /* an int (USER_INT) or a real (USER_REAL) */
    } fields[] = {{"width", true},  {"height", true},    {"frames", true},
                  {"steps", true},  {"fps", false},      {"guidance", false},
                  {"shift", false}, {"schedule", false}, {"seed", false}};
    char out[1024];
    size_t n = 0;
    for (const char *p = msg; *p && n + 3 < sizeof out;) {
        bool word = p == msg || p[-1] == ' ';
        size_t k = 0;
        size_t i = 0;
        for (; word && i < C3_ARRAY_LEN(fields); i++) {
            k = strlen(fields[i].field);
            if (!strncmp(p, fields[i].field, k) && p[k] == ' ' &&
                (p == msg || !strncmp(p - 4, "use ", 4)))
                break;
        }
        if (!word || i == C3_ARRAY_LEN(fields)) {
            out[n++] = *p++;
            continue;
        }
        /* "--FIELD", and a value the user gave as -1 back to -1 */
        const char *sub = fields[i].count ? "0 " : "-2 ";
        const c3_option *o = option_find(fields[i].field);
        double v = 0;
        if (o && o->type == OPT_INT) v = *(const int *)((const char *)s + o->offset);
        if (o && o->type == OPT_FLOAT) v = *(const double *)((const char *)s + o->offset);
        bool was_default =
            o && (o->type == OPT_INT || o->type == OPT_FLOAT) && v == COSMOS3_DEFAULT;
        int w = snprintf(out + n, sizeof out - n, "--%.*s ", (int)k, p);
        if (w > 0) n = C3_MIN(n + (size_t)w, sizeof out - 1);
        p += k + 1;
        if (was_default && !strncmp(p, sub, strlen(sub))) {
            w = snprintf(out + n, sizeof out - n, "-1 ");
            if (w > 0) n = C3_MIN(n + (size_t)w, sizeof out - 1);
            p += strlen(sub);
        }
    }
    out[n] = 0;
    return c3_fail(COSMOS3_EUSAGE, "%s", out);
}

int settings_resolve(c3_settings *s, const c3_engine *e) {
    int64_t seed;
    APP_TRY(settings_seed(s->seed, &seed));
    if (s->tp < 1 || s->cfg_parallel < 1 || s->ulysses < 1)
        return c3_fail(COSMOS3_EUSAGE, "--tp, --cfg-parallel and --ulysses must be at least 1");
    if (s->threads < 0)
        return c3_fail(COSMOS3_EUSAGE, "--threads %d must be 0 (all cores) or more", s->threads);
    cosmos3_request rq;
    settings_request(s, &rq);
    cosmos3_settings st;
    char err[1024];
    if (cosmos3_resolve(e ? e->e : NULL, &rq, &st, err, sizeof err)) return option_fail(s, err);
    s->width = st.width;
    s->height = st.height;
    s->steps = st.steps;
    s->guidance = st.guidance;
    s->shift = st.shift;
    free(s->schedule);
    s->schedule = xstrdup(st.schedule);
    s->guidance_interval.on = st.guidance_interval;
    s->guidance_interval.lo = st.guidance_lo;
    s->guidance_interval.hi = st.guidance_hi;
    s->templates = st.templates;
    return COSMOS3_OK;
}

/* ------------------------------------------------------------- events */

static void push_text(c3_events *q, c3_event_kind kind, const char *prefix, const char *text) {
    c3_event x = {.kind = kind};
    snprintf(x.text, sizeof x.text, "%s%s", prefix, text ? text : "");
    events_push(q, &x);
}

/* The engine's events as the queue's; the terminal ones are the session's
 * (pushed after the frames are written). A GPU's memory now is the
 * monitor's poll (monitor.h), on the thread that draws. */
static void on_event(const cosmos3_event *ev, void *user) {
    c3_engine *s = user;
    c3_event x = {.rank = ev->rank,
                  .group = ev->group,
                  .device = ev->device,
                  .step = ev->step,
                  .steps = ev->steps,
                  .branch = ev->branch,
                  .seconds = ev->seconds,
                  .cond_s = ev->cond_s,
                  .uncond_s = ev->uncond_s,
                  .timestep = (int64_t)ev->timestep,
                  .bytes = {ev->mem_weights, ev->mem_kv, ev->mem_act},
                  .dev_free = ev->dev_free,
                  .dev_total = ev->dev_total};
    switch (ev->kind) {
    case COSMOS3_EV_LOG:
    case COSMOS3_EV_DEVICE:
    case COSMOS3_EV_PLAN:
        push_text(s->ev, EV_LOG, "", ev->text);
        return;
    case COSMOS3_EV_WARNING:
        push_text(s->ev, EV_LOG, "warning: ", ev->text);
        return;
    case COSMOS3_EV_LOADED:
        x.kind = EV_LOADED;
        snprintf(x.text, sizeof x.text, "%s", ev->text ? ev->text : "");
        break;
    case COSMOS3_EV_STAGE:
        if (!strcmp(ev->stage, "denoise") && ev->begin) {
            x.kind = EV_STEP_BEGIN;
            x.step = 1;
        } else {
            x.kind = EV_STAGE;
            x.code = ev->begin ? EV_STAGE_BEGIN : EV_STAGE_END;
            snprintf(x.text, sizeof x.text, "%s", ev->stage);
        }
        break;
    case COSMOS3_EV_VAE: /* a chunk of frames decoded: the progress line shows it */
        x.kind = EV_STAGE;
        x.code = EV_STAGE_CHUNK;
        x.step = ev->frame;
        x.steps = ev->frames;
        snprintf(x.text, sizeof x.text, "vae");
        break;
    case COSMOS3_EV_STEP:
        x.kind = EV_STEP_END;
        events_push(s->ev, &x);
        if (ev->step >= ev->steps) return;
        x = (c3_event){.kind = EV_STEP_BEGIN, .step = ev->step + 1, .steps = ev->steps};
        break;
    case COSMOS3_EV_BRANCH:
        x.kind = EV_BRANCH;
        break;
    case COSMOS3_EV_MEMORY:
        x.kind = EV_MEMORY;
        break;
    default:
        return; /* VAE chunks; the job's end is the session's */
    }
    events_push(s->ev, &x);
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
    op->precision = s->precision;
    op->attention = s->attention;
    op->threads = s->threads;
}

int engine_open(c3_engine **out, const c3_settings *s, c3_events *ev) {
    *out = NULL;
    c3_engine *e = xcalloc(1, sizeof *e);
    e->ev = ev;
    cosmos3_open_params op;
    session_open_params(s, &op);
    if (GIVEN(s, "width")) op.plan_width = s->width;
    if (GIVEN(s, "height")) op.plan_height = s->height;
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
    *out = e;
    return COSMOS3_OK;
}

void engine_close(c3_engine *e) {
    if (!e) return;
    cosmos3_close(e->e);
    free(e);
}

json_t *result_json(const c3_result *r) {
    json_t *o = json_pack("{s:I,s:i,s:i,s:i,s:i,s:f,s:f,s:s,s:i,s:i}", "seed", (json_int_t)r->seed,
                          "width", r->width, "height", r->height, "frames", r->frames, "steps",
                          r->steps, "guidance", r->guidance, "shift", r->shift, "schedule",
                          r->schedule, "L_cond", r->L_cond, "L_uncond", r->L_uncond);
    json_object_set_new(o, "seconds",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "tokenize",
                                  r->t_tokenize, "und", r->t_und, "denoise", r->t_denoise,
                                  "step_mean", r->t_step_mean, "cond_mean", r->t_cond_mean,
                                  "uncond_mean", r->t_uncond_mean, "vae", r->t_vae, "write",
                                  r->t_write, "total", r->t_total));
    json_object_set_new(o, "mem_peak_bytes", json_integer(r->mem_peak));
    json_object_set_new(o, "offload",
                        json_pack("{s:I,s:f,s:f}", "h2d_bytes", (json_int_t)r->h2d_bytes,
                                  "h2d_seconds", r->h2d_seconds, "h2d_gbps", r->h2d_gbps));
    json_t *ph = json_object();
    json_object_set_new(ph, "load",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I}", "total", r->t_load, "read",
                                  r->t_load_read, "backends", r->t_load_backends, "weights",
                                  r->t_load_weights, "vae", r->t_load_vae, "tokenizer",
                                  r->t_load_tokenizer, "prefault_bytes",
                                  (json_int_t)r->load_prefault_bytes));
    json_object_set_new(ph, "tokenize", json_real(r->t_tokenize));
    json_object_set_new(ph, "und", json_real(r->t_und));
    json_object_set_new(ph, "cond_encode", json_real(r->t_cond_encode));
    json_object_set_new(ph, "steps",
                        json_pack("{s:f,s:i,s:f,s:f,s:f,s:f}", "total", r->t_denoise, "count",
                                  r->steps, "first", r->t_step_first, "mean", r->t_step_mean,
                                  "rest_mean", r->t_step_rest_mean, "host_mean",
                                  r->t_step_host_mean));
    json_object_set_new(ph, "decode", json_real(r->t_vae));
    double named = r->t_tokenize + r->t_und + r->t_cond_encode + r->t_denoise + r->t_vae;
    json_object_set_new(ph, "other", json_real(C3_MAX(0.0, r->t_generate - named)));
    json_object_set_new(ph, "encode", json_real(r->t_media_encode));
    json_object_set_new(ph, "write", json_real(r->t_write));
    json_object_set_new(ph, "generate", json_real(r->t_total));
    if (r->t_launch_first_step >= 0) { /* the process's start to the load's, and to step 1 */
        json_object_set_new(
            ph, "start",
            json_real(C3_MAX(0.0, r->t_launch_first_step - (r->clock_first_step - r->clock_open))));
        json_object_set_new(ph, "launch_to_first_step", json_real(r->t_launch_first_step));
    }
    if (r->t_launch_total >= 0) json_object_set_new(ph, "total", json_real(r->t_launch_total));
    json_object_set_new(o, "phases", ph);
    return o;
}

void result_phases_line(const c3_result *r, char *buf, size_t n) {
    char launch[128] = "";
    if (r->t_launch_first_step >= 0 && r->t_launch_total >= 0)
        snprintf(launch, sizeof launch, ", launch to first step %.2f, total %.2f",
                 r->t_launch_first_step, r->t_launch_total);
    char enc[48] = "";
    if (r->t_cond_encode > 0) snprintf(enc, sizeof enc, ", cond encode %.2f", r->t_cond_encode);
    snprintf(buf, n,
             "phases: load %.2f (read %.2f, backends %.2f, weights %.2f, vae %.2f, tokenizer "
             "%.2f), tokenize %.3f, und %.3f%s, steps %.2f (%d: first %.3f, mean %.3f, rest "
             "%.3f), decode %.2f, write %.2f (encode %.2f), generate %.2f%s s",
             r->t_load, r->t_load_read, r->t_load_backends, r->t_load_weights, r->t_load_vae,
             r->t_load_tokenizer, r->t_tokenize, r->t_und, enc, r->t_denoise, r->steps,
             r->t_step_first, r->t_step_mean, r->t_step_rest_mean, r->t_vae, r->t_write,
             r->t_media_encode, r->t_total, launch);
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

void result_free(c3_result *r) {
    for (int i = 0; i < r->npaths; i++)
        free(r->paths[i]);
    free(r->paths);
    free(r->png_parameters);
    free(r->meta_json);
    cosmos3_result_free(r->out);
    memset(r, 0, sizeof *r);
}

/* A random seed below 2^53 (every JSON reader keeps it exact). */
static uint64_t random_seed(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)(c3_now() * 1e9);
    return v & ((1ull << 53) - 1);
}

/* One generation; its frames are written as s->output says when write is
 * set (output.c), else they stay in res->out for the caller to encode. */
static int generate(c3_engine *e, const c3_settings *s, const c3_cond_frames *in, c3_result *res,
                    double t_start, bool write) {
    cosmos3_request rq;
    settings_request(s, &rq);
    APP_TRY(settings_seed(s->seed, &rq.seed));
    /* the seed is drawn here: it names the output before any work */
    if (rq.seed < 0) rq.seed = (int64_t)random_seed();
    cosmos3_settings st;
    char err[1024];
    int rc = cosmos3_resolve(e->e, &rq, &st, err, sizeof err);
    if (rc) return option_fail(s, err);
    if (!s->prompt) return c3_fail(COSMOS3_EUSAGE, "no prompt; give one with -p TEXT");
    c3_output o = {0};
    if (write) APP_TRY(output_plan(s, st.frames, st.width, st.height, rq.seed, &o));
    if (s->save_latents && !s->overwrite && c3_file_exists(s->save_latents)) {
        output_free(&o);
        return c3_fail(COSMOS3_EOUTPUT,
                       "%s already exists; use --overwrite or another --save-latents",
                       s->save_latents);
    }
    float *noise = NULL, *step_noise = NULL;
    if (s->noise) {
        size_t n;
        int nrc = cosmos3_latents_read(s->noise, st.latent_shape, &noise, &n, err, sizeof err);
        if (nrc) { /* exit 4 for any bad noise; only a shape the size decides names the options */
            output_free(&o);
            return c3_fail(COSMOS3_EINPUT, "--noise %s%s", err,
                           nrc == COSMOS3_EUSAGE ? "; check -W/-H/--frames" : "");
        }
        rq.noise = noise;
        rq.noise_len = n;
        /* the fixed-step SDE sampler's re-noising draws, when the file has them */
        if (!strcmp(st.schedule, "flowmatch4") &&
            (nrc = cosmos3_step_noise_read(s->noise, st.steps, st.latent_shape, &step_noise, &n,
                                           err, sizeof err))) {
            free(noise);
            output_free(&o);
            return c3_fail(COSMOS3_EINPUT, "--noise %s%s", err, /* the steps decide its first size */
                           nrc == COSMOS3_EUSAGE ? "; check -W/-H/--frames and --steps" : "");
        }
        rq.step_noise = step_noise;
        rq.step_noise_len = n;
    }
    rq.want_latents = s->save_latents != NULL;
    /* the conditioning picture or clip, read from its PNG files; first-last
       builds its clip of both ends here and passes it as a video */
    c3_cond_file cf = {0}, cb = {0};
    cosmos3_frames media = {0};
    int cidx[64], ncidx = 0;
    bool cond_image = in ? !in->video : s->image != NULL,
         cond_video = in ? in->video : s->video != NULL;
    uint8_t *fl_rgb = NULL;
    char *fl_a = s->first_last ? xstrdup(s->first_last) : NULL, *fl_b = NULL;
    if (fl_a && (fl_b = strchr(fl_a, '\n'))) *fl_b++ = 0;
    if (!!s->image + !!s->video + !!s->first_last > 1 || (in && (s->image || s->video || fl_a)))
        rc = c3_fail(COSMOS3_EUSAGE, "%s and %s together; give one conditioning input, not both",
                     s->image ? "--image" : "--video", s->first_last ? "--first-last" : "--video");
    else if (fl_a && !fl_b)
        rc = c3_fail(COSMOS3_EUSAGE, "--first-last needs two values (START END)");
    if (rc == COSMOS3_OK && in) { /* frames in memory (the server's decoded references) */
        cf.media = (cosmos3_frames){
            .rgb = in->rgb, .width = in->width, .height = in->height, .frames = in->frames};
        cf.hash =
            c3_fnv1a(in->rgb, (size_t)in->width * in->height * 3 * (size_t)in->frames, C3_FNV_INIT);
    } else if (rc == COSMOS3_OK && (s->image || s->video)) {
        rc = cond_file_read(s->image ? s->image : s->video, s->video != NULL, &cf);
    }
    if (rc == COSMOS3_OK && cond_video)
        rc = cond_parse_frames(s->condition_frames, cidx, 64, &ncidx);
    if (rc == COSMOS3_OK && fl_a) rc = cond_file_read_as(fl_a, true, "first-last", &cf);
    if (rc == COSMOS3_OK && fl_a) rc = cond_file_read_as(fl_b, true, "first-last", &cb);
    if (rc == COSMOS3_OK && fl_a &&
        (rc =
             cosmos3_first_last(&cf.media, &cb.media, st.frames, st.width, st.height,
                                e->model.vae_temporal, &fl_rgb, cidx, 64, &ncidx, err, sizeof err)))
        rc = c3_fail(rc, "%s", err);
    if (rc) {
        cond_file_free(&cf);
        cond_file_free(&cb);
        free(fl_a);
        free(noise);
        free(step_noise);
        output_free(&o);
        return rc;
    }
    if (fl_a) {
        cf.hash = cf.hash * 0x100000001b3ull ^ cb.hash; /* both ends' files */
        cond_file_free(&cb);
        free(cf.rgb);
        cf.rgb = fl_rgb; /* freed with cf */
        cf.media = (cosmos3_frames){
            .rgb = fl_rgb, .width = st.width, .height = st.height, .frames = st.frames};
    }
    if (cond_image || cond_video || fl_a) {
        media = (cosmos3_frames){.rgb = cf.media.rgb,
                                 .width = cf.media.width,
                                 .height = cf.media.height,
                                 .frames = cf.media.frames};
        if (cond_image) rq.image = &media;
        if (cond_video || fl_a) {
            rq.video = &media;
            rq.condition_frames = cidx;
            rq.ncondition_frames = ncidx;
            rq.condition_keep = s->condition_keep && !strcmp(s->condition_keep, "last") && !fl_a
                                    ? COSMOS3_KEEP_LAST
                                    : COSMOS3_KEEP_FIRST;
        }
    }
    rc = cosmos3_generate(e->e, &rq, &res->out, err, sizeof err);
    uint64_t cf_hash = cf.hash;
    cond_file_free(&cf);
    free(noise);
    free(step_noise);
    if (rc) {
        output_free(&o);
        free(fl_a);
        return c3_fail(rc, "%s", err);
    }
    const cosmos3_result *r = res->out;
    if (s->save_latents && cosmos3_latents_write(s->save_latents, r->latents, r->latent_shape,
                                                 s->overwrite, err, sizeof err)) {
        output_free(&o);
        free(fl_a);
        return c3_fail(COSMOS3_EOUTPUT, "%s", err);
    }
    res->seed = r->seed;
    res->width = r->width;
    res->height = r->height;
    res->frames = r->frames;
    res->steps = r->steps;
    res->guidance = r->guidance;
    res->shift = r->shift;
    snprintf(res->schedule, sizeof res->schedule, "%s", r->schedule);
    res->L_cond = r->L_cond;
    res->L_uncond = r->L_uncond;
    res->t_tokenize = r->t_tokenize;
    res->t_und = r->t_und;
    res->t_denoise = r->t_denoise;
    res->t_vae = r->t_vae;
    res->t_step_mean = r->t_step_mean;
    res->t_cond_mean = r->t_cond_mean;
    res->t_uncond_mean = r->t_uncond_mean;
    res->t_load = r->t_load;
    res->t_load_read = r->t_load_read;
    res->t_load_backends = r->t_load_backends;
    res->t_load_weights = r->t_load_weights;
    res->t_load_vae = r->t_load_vae;
    res->t_load_tokenizer = r->t_load_tokenizer;
    res->load_prefault_bytes = r->load_prefault_bytes;
    res->t_cond_encode = r->t_encode;
    res->t_step_first = r->t_step_first;
    res->t_step_rest_mean = r->t_step_rest_mean;
    res->t_step_host_mean = r->t_step_host_mean;
    res->t_generate = r->t_total;
    res->clock_open = r->clock_open;
    res->clock_generate = r->clock_generate;
    res->clock_first_step = r->clock_first_step;
    res->t_launch_first_step = res->t_launch_total = -1; /* the program's to set */
    res->mem_peak = r->mem_peak;
    res->h2d_bytes = r->h2d_bytes;
    res->h2d_seconds = r->h2d_seconds;
    res->h2d_gbps = r->h2d_seconds > 0 ? (double)r->h2d_bytes / r->h2d_seconds / 1e9 : 0;
    /* write */
    double t0 = c3_now();
    res->png_parameters = metadata_parameters(r);
    c3_meta_extra x = {.system_prompt = s->system_prompt,
                       .noise = s->noise,
                       .image = in && !in->video ? in->name : s->image,
                       .video = in && in->video ? in->name : s->video,
                       .condition_frames = s->condition_frames,
                       .condition_keep = s->condition_keep,
                       .first = fl_a,
                       .last = fl_b,
                       .condition_hash = cf_hash};
    res->meta_json = metadata_json(r, &x);
    free(fl_a); /* fl_b points into it */
    c3_media_meta m = {res->png_parameters, res->meta_json};
    if (write) rc = output_write_timed(&o, r, &m, &res->paths, &res->npaths, &res->t_media_encode);
    output_free(&o);
    for (int i = 0; rc == COSMOS3_OK && i < res->npaths; i++)
        push_text(e->ev, EV_PREVIEW, "", res->paths[i]);
    res->t_write = c3_now() - t0;
    res->t_total = c3_now() - t_start;
    return rc;
}

static int generate_job(c3_engine *e, const c3_settings *s, const c3_cond_frames *in,
                        c3_result *res, bool write) {
    memset(res, 0, sizeof *res);
    int rc = generate(e, s, in, res, c3_now(), write);
    if (rc == COSMOS3_ECANCEL) {
        c3_event x = {.kind = EV_CANCELLED};
        events_push(e->ev, &x);
    } else if (rc) {
        c3_event x = {.kind = EV_ERROR, .code = rc};
        snprintf(x.text, sizeof x.text, "%s", c3_errmsg());
        events_push(e->ev, &x);
    } else {
        c3_event x = {.kind = EV_DONE, .seconds = res->t_total};
        events_push(e->ev, &x);
    }
    return rc;
}

int engine_generate(c3_engine *e, const c3_settings *s, c3_result *res) {
    return generate_job(e, s, NULL, res, true);
}

int engine_generate_frames(c3_engine *e, const c3_settings *s, c3_result *res) {
    return generate_job(e, s, NULL, res, false);
}

int engine_generate_frames_with(c3_engine *e, const c3_settings *s, const c3_cond_frames *in,
                                c3_result *res) {
    return generate_job(e, s, in, res, false);
}
