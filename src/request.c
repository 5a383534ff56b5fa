/* request.c - task defaults and request validation, in one place. */
#include "request.h"

#include "prompt.h"
#include "stepcache.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define C3_MAX_SIDE 16384 /* pixels, either side */

const c3_task_defaults c3_image_defaults = {1024, 1024, 50, 7.0, 3.0, true, 400, 1000};
const c3_task_defaults c3_video_defaults = {1280, 720, 35, 6.0, 10.0, false, 400, 1000};

void cosmos3_request_init(cosmos3_request *r) {
    memset(r, 0, sizeof *r);
    r->width = r->height = r->frames = r->steps = COSMOS3_DEFAULT;
    r->fps = r->guidance = r->shift = COSMOS3_DEFAULT;
    r->guidance_interval = COSMOS3_DEFAULT;
    r->guidance_lo = r->guidance_hi = COSMOS3_DEFAULT;
    r->seed = COSMOS3_DEFAULT;
    r->system_prompt = r->templates = COSMOS3_DEFAULT;
    r->condition_keep = COSMOS3_KEEP_FIRST;
    r->cache_threshold = NAN; /* the cache kind's own */
    r->cache_max_skip = r->cache_warmup = COSMOS3_DEFAULT;
}


static const char *const field_names[COSMOS3_FIELD_COUNT] = {
    [COSMOS3_FIELD_NONE] = "",
    [COSMOS3_FIELD_PROMPT] = "prompt",
    [COSMOS3_FIELD_NEGATIVE_PROMPT] = "negative_prompt",
    [COSMOS3_FIELD_WIDTH] = "width",
    [COSMOS3_FIELD_HEIGHT] = "height",
    [COSMOS3_FIELD_FRAMES] = "frames",
    [COSMOS3_FIELD_FPS] = "fps",
    [COSMOS3_FIELD_STEPS] = "steps",
    [COSMOS3_FIELD_GUIDANCE] = "guidance",
    [COSMOS3_FIELD_SHIFT] = "shift",
    [COSMOS3_FIELD_SCHEDULE] = "schedule",
    [COSMOS3_FIELD_GUIDANCE_INTERVAL] = "guidance_interval",
    [COSMOS3_FIELD_SEED] = "seed",
    [COSMOS3_FIELD_SYSTEM_PROMPT] = "system_prompt",
    [COSMOS3_FIELD_TEMPLATES] = "templates",
    [COSMOS3_FIELD_NOISE] = "noise",
    [COSMOS3_FIELD_STEP_NOISE] = "step_noise",
    [COSMOS3_FIELD_IMAGE] = "image",
    [COSMOS3_FIELD_VIDEO] = "video",
    [COSMOS3_FIELD_CONDITION_FRAMES] = "condition_frames",
    [COSMOS3_FIELD_MAX_SEQUENCE_LENGTH] = "max_sequence_length",
};

const char *cosmos3_field_name(cosmos3_field f) {
    return (unsigned)f < COSMOS3_FIELD_COUNT ? field_names[f] : "";
}

/* A refusal of field f (its value as text, "" for none): the parts into
 * er (may be NULL), the one line into c3_fail. fix names the field the
 * fix sets to fix_value ("": leave it out), COSMOS3_FIELD_NONE for none. */
__attribute__((format(printf, 7, 8))) static int
field_fail(cosmos3_error *er, int status, cosmos3_field f, const char *value, cosmos3_field fix,
           const char *fix_value, const char *fmt, ...) {
    cosmos3_error x = {.status = status, .field = f, .fix = fix};
    snprintf(x.value, sizeof x.value, "%s", value);
    snprintf(x.fix_value, sizeof x.fix_value, "%s", fix_value ? fix_value : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x.reason, sizeof x.reason, fmt, ap);
    va_end(ap);
    char tail[96] = "";
    if (fix != COSMOS3_FIELD_NONE && x.fix_value[0])
        snprintf(tail, sizeof tail, "; use %s %s", cosmos3_field_name(fix), x.fix_value);
    else if (fix != COSMOS3_FIELD_NONE)
        snprintf(tail, sizeof tail, "; leave %s out", cosmos3_field_name(fix));
    snprintf(x.message, sizeof x.message, "%s%s%s%s%s%s", cosmos3_field_name(f),
             f != COSMOS3_FIELD_NONE ? " " : "", x.value, x.value[0] ? " " : "", x.reason, tail);
    if (er) *er = x;
    return c3_fail(status, "%s", x.message);
}

static const char *int_text(char *buf, int v) {
    snprintf(buf, 32, "%d", v);
    return buf;
}
static const char *real_text(char *buf, double v) {
    snprintf(buf, 32, "%g", v);
    return buf;
}

/* One message per check: too large, or not a positive multiple of m (the
 * nearest multiple as the example). */
static int size_fail(cosmos3_error *er, cosmos3_field f, int v, int m) {
    char b[32];
    if (v > 16384)
        return field_fail(er, C3_EUSAGE, f, int_text(b, v), COSMOS3_FIELD_NONE, NULL,
                          "is larger than 16384, the largest side (e.g. 16384)");
    int near = v < m ? m : (int)(((int64_t)v + m / 2) / m * m);
    if (near > 16384) near = 16384;
    return field_fail(er, C3_EUSAGE, f, int_text(b, v), COSMOS3_FIELD_NONE, NULL,
                      "must be a positive multiple of %d (e.g. %d)", m, near);
}

/* The step cache's defaults: the most consecutive skipped steps and the
 * first steps always computed (vLLM-Omni's Cosmos3 SeaCache). */
enum { C3_CACHE_MAX_SKIP = 2, C3_CACHE_WARMUP = 1 };

/* The step cache's settings (stepcache.h). */
static int cache_resolve(const cosmos3_request *r, cosmos3_settings *s, cosmos3_error *er) {
    const char *name = r->cache ? r->cache : "none";
    const c3_cache_kind *k = stepcache_kind(name);
    if (!k && strcmp(name, "none"))
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_NONE, "", COSMOS3_FIELD_NONE, NULL,
                          "cache '%s' is not none, sea or fb", name);
    snprintf(s->cache, sizeof s->cache, "%s", name);
    s->cache_threshold = !isnan(r->cache_threshold) ? r->cache_threshold
                         : k                         ? k->threshold
                                                     : 0;
    s->cache_max_skip = r->cache_max_skip != COSMOS3_DEFAULT ? r->cache_max_skip : C3_CACHE_MAX_SKIP;
    s->cache_warmup = r->cache_warmup != COSMOS3_DEFAULT ? r->cache_warmup : C3_CACHE_WARMUP;
    if (!(s->cache_threshold >= 0) || s->cache_threshold > 10)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_NONE, "", COSMOS3_FIELD_NONE, NULL,
                          "cache threshold %g must be in [0, 10] (0 never skips)",
                       s->cache_threshold);
    if (s->cache_max_skip < 0 || s->cache_max_skip > 1000)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_NONE, "", COSMOS3_FIELD_NONE, NULL,
                          "cache max skip %d must be in 0..1000", s->cache_max_skip);
    if (s->cache_warmup < 0 || s->cache_warmup > 1000)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_NONE, "", COSMOS3_FIELD_NONE, NULL,
                          "cache warmup %d must be in 0..1000", s->cache_warmup);
    return C3_OK;
}

/* A value the caller left to the model: COSMOS3_DEFAULT, unless the
 * request is literal (every value as written). */
#define DEFAULTED(r, v) (!(r)->literal && (v) == COSMOS3_DEFAULT)

/* A distilled checkpoint fixes what upstream fixes (diffusers'
 * Cosmos3DistilledSetTimestepsStep, vLLM-Omni's distilled checks): the step
 * count is its t_list's, guidance is baked in (1: one forward per step, no
 * guidance interval), and the schedule is the fixed-step SDE one with the
 * scheduler's own shift. Another step count, guidance or schedule is
 * refused; the negative prompt and a shift are ignored (request_warnings). */
static int distilled_resolve(const cosmos3_request *r, const c3_sconfig *sc, cosmos3_settings *s,
                             const char **sch, cosmos3_error *er) {
    int n = sc->n_tlist;
    char b[32], nb[32];
    if (!DEFAULTED(r, r->steps) && r->steps != n)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_STEPS, int_text(b, r->steps),
                          COSMOS3_FIELD_STEPS, int_text(nb, n),
                          "is not this distilled checkpoint's: it samples exactly %d steps (its "
                          "fixed_step_sampler_config.t_list)",
                          n);
    if (!DEFAULTED(r, r->guidance) && r->guidance != 1.0)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_GUIDANCE, real_text(b, r->guidance),
                          COSMOS3_FIELD_GUIDANCE, "1",
                          "does not apply: this distilled checkpoint has guidance baked into its "
                          "weights");
    if (r->schedule && strcmp(r->schedule, "flowmatch4") != 0)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_SCHEDULE, r->schedule,
                          COSMOS3_FIELD_SCHEDULE, "",
                          "does not apply: this distilled checkpoint samples with its fixed "
                          "t_list (flowmatch4)");
    s->steps = n;
    s->guidance = 1.0;
    s->guidance_interval = false;
    s->shift = sc->flow_shift;
    *sch = "flowmatch4";
    return C3_OK;
}

int request_plan_size(const c3_ckpt *ck, const cosmos3_open_params *op, cosmos3_settings *out) {
    cosmos3_request rq;
    cosmos3_request_init(&rq);
    if (op->plan_width > 0) rq.width = op->plan_width;
    if (op->plan_height > 0) rq.height = op->plan_height;
    if (op->plan_frames > 0) rq.frames = op->plan_frames;
    return request_resolve(&rq, ck, out);
}

/* The defaults r leaves, filled from the card (k, may be NULL) and the
 * task's; *sch: the schedule's name. Nothing is checked here. */
static void fill_defaults(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *s,
                          const char **sch) {
    memset(s, 0, sizeof *s);
    const c3_model_card *k = ck ? &ck->card : NULL;
    s->frames = DEFAULTED(r, r->frames) ? 1 : r->frames;
    bool video = s->frames > 1;
    const c3_task_defaults *d = video ? &c3_video_defaults : &c3_image_defaults;
    s->width = !DEFAULTED(r, r->width) ? r->width : k && k->width ? k->width : d->width;
    s->height = !DEFAULTED(r, r->height) ? r->height : k && k->height ? k->height : d->height;
    s->fps = !DEFAULTED(r, r->fps) ? r->fps : C3_DEFAULT_FPS;
    s->steps = !DEFAULTED(r, r->steps) ? r->steps : k && k->steps ? k->steps : d->steps;
    s->guidance = !DEFAULTED(r, r->guidance) ? r->guidance
                  : k && k->guidance >= 0    ? k->guidance
                                             : d->guidance;
    s->shift = !DEFAULTED(r, r->shift) ? r->shift : k && k->shift >= 0 ? k->shift : d->shift;
    *sch = r->schedule ? r->schedule : k && k->schedule[0] ? k->schedule : C3_DEFAULT_SCHEDULE;
    if (DEFAULTED(r, r->guidance_interval)) {
        s->guidance_interval = k && k->interval ? k->interval == 1 : d->interval;
        s->guidance_lo = k && k->interval == 1 ? k->interval_lo : d->interval_lo;
        s->guidance_hi = k && k->interval == 1 ? k->interval_hi : d->interval_hi;
    } else {
        s->guidance_interval = r->guidance_interval != 0;
        s->guidance_lo = !DEFAULTED(r, r->guidance_lo) ? r->guidance_lo : d->interval_lo;
        s->guidance_hi = !DEFAULTED(r, r->guidance_hi) ? r->guidance_hi : d->interval_hi;
    }
    /* the seed: COSMOS3_DEFAULT is "random" in a literal request too */
    s->seed_given = r->seed != COSMOS3_DEFAULT;
    s->seed = s->seed_given ? (uint64_t)r->seed : 0;
    s->system_prompt =
        DEFAULTED(r, r->system_prompt) ? ck && ck->default_system_prompt : r->system_prompt != 0;
    s->templates = r->templates != 0; /* COSMOS3_DEFAULT: on */
    s->negative_prompt = r->negative_prompt ? r->negative_prompt : "";
}

int request_defaults(const c3_ckpt *ck, int frames, cosmos3_request *r) {
    cosmos3_request_init(r);
    r->frames = frames;
    cosmos3_settings s;
    const char *sch;
    fill_defaults(r, ck, &s, &sch);
    if (ck && ck->s.distilled)
        distilled_resolve(r, &ck->s, &s, &sch, NULL); /* nothing given: never fails */
    c3_schedule kind;
    r->width = s.width;
    r->height = s.height;
    r->fps = s.fps;
    r->steps = s.steps;
    r->guidance = s.guidance;
    r->shift = s.shift;
    /* a static name where it parses, else the card's own (refused by the check) */
    r->schedule = sched_parse(sch, &kind) == 0 ? sched_name(kind) : sch;
    r->guidance_interval = s.guidance_interval;
    r->guidance_lo = s.guidance_lo;
    r->guidance_hi = s.guidance_hi;
    r->system_prompt = s.system_prompt;
    r->templates = s.templates;
    r->cache_max_skip = C3_CACHE_MAX_SKIP; /* the threshold stays NAN: the cache kind's */
    r->cache_warmup = C3_CACHE_WARMUP;
    r->literal = true;
    return C3_OK;
}

int request_check(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *s,
                  cosmos3_error *er) {
    const char *sch;
    fill_defaults(r, ck, s, &sch);
    if (ck && ck->s.distilled) C3_TRY(distilled_resolve(r, &ck->s, s, &sch, er));
    C3_TRY(cache_resolve(r, s, er));
    char b[32];

    /* the latent grid: pixels per latent cell and frames per latent frame
     * from the VAE config (the Wan2.2 VAE's before a model is known) */
    int ss = ck && ck->v.scale_spatial > 0 ? ck->v.scale_spatial : C3_WAN_SCALE_SPATIAL;
    int st = ck && ck->v.scale_temporal > 0 ? ck->v.scale_temporal : C3_WAN_SCALE_TEMPORAL;
    if (s->width < ss || s->width % ss || s->width > 16384)
        return size_fail(er, COSMOS3_FIELD_WIDTH, s->width, ss);
    if (s->height < ss || s->height % ss || s->height > 16384)
        return size_fail(er, COSMOS3_FIELD_HEIGHT, s->height, ss);
    if (s->frames < 1 || (s->frames - 1) % st || s->frames > 4097)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_FRAMES, int_text(b, s->frames),
                          COSMOS3_FIELD_NONE, NULL, "must be 1 (image) or 1 + %dk (e.g. %d)", st,
                          s->frames < 1      ? 1
                          : s->frames > 4097 ? 4097
                                             : ((s->frames - 1 + st / 2) / st) * st + 1);
    /* below 1 a "video" of a few frames would last minutes to hours */
    if (!(s->fps >= 1) || s->fps > 1000)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_FPS, real_text(b, s->fps),
                          COSMOS3_FIELD_NONE, NULL, "must be in [1, 1000]");
    if (s->steps < 1 || s->steps > 1000)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_STEPS, int_text(b, s->steps),
                          COSMOS3_FIELD_NONE, NULL, "must be in 1..1000");
    if (!(s->guidance >= 0) || s->guidance > 100)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_GUIDANCE, real_text(b, s->guidance),
                          COSMOS3_FIELD_NONE, NULL, "must be in [0, 100] (1 turns CFG off)");
    if (!(s->shift > 0) || s->shift > 1000)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_SHIFT, real_text(b, s->shift),
                          COSMOS3_FIELD_NONE, NULL, "must be in (0, 1000]");
    c3_schedule kind;
    if (sched_parse(sch, &kind) != 0)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_SCHEDULE, sch, COSMOS3_FIELD_NONE, NULL,
                          "is not native, linear, karras or flowmatch4");
    if (kind == C3_SCHED_FLOWMATCH4 && s->steps != 4 && !(ck && ck->s.distilled))
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_SCHEDULE, sch, COSMOS3_FIELD_STEPS, "4",
                          "is the distilled 4-step sampler");
    snprintf(s->schedule, sizeof s->schedule, "%s", sched_name(kind));
    snprintf(s->sampler, sizeof s->sampler, "%s",
             kind == C3_SCHED_FLOWMATCH4 ? "FlowMatch Euler SDE" : "UniPC");
    if (s->seed_given && r->seed < 0) {
        snprintf(b, sizeof b, "%lld", (long long)r->seed);
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_SEED, b, COSMOS3_FIELD_NONE, NULL,
                          "must be in 0..2^63-1 (or COSMOS3_DEFAULT: random)");
    }
    /* patch 2 pads odd latent sizes; other patches need whole patches */
    if (ck && ck->t.patch != 2 && (s->width / ss) % ck->t.patch)
        return size_fail(er, COSMOS3_FIELD_WIDTH, s->width, ss * ck->t.patch);
    if (r->image && r->video)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_NONE, "", COSMOS3_FIELD_NONE, NULL,
                          "give a conditioning image or a video, not both");
    if ((r->image || r->video) && (r->image ? r->image : r->video)->frames < 1)
        return field_fail(er, C3_EINPUT, r->image ? COSMOS3_FIELD_IMAGE : COSMOS3_FIELD_VIDEO, "",
                          COSMOS3_FIELD_NONE, NULL, "has no frames");
    if (r->max_sequence_length < COSMOS3_DEFAULT)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_MAX_SEQUENCE_LENGTH,
                          int_text(b, r->max_sequence_length), COSMOS3_FIELD_NONE, NULL,
                          "must be a positive number of tokens (0: the default, %d)", C3_MAX_SEQ);
    if (r->condition_frames && !r->video)
        return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_CONDITION_FRAMES, "", COSMOS3_FIELD_NONE,
                          NULL, "apply to a video; an image always gives latent frame 0");
    if (ck) {
        s->latent_shape[0] = 1;
        s->latent_shape[1] = ck->t.latent_ch;
        s->latent_shape[2] = (s->frames - 1) / st + 1;
        s->latent_shape[3] = s->height / ss;
        s->latent_shape[4] = s->width / ss;
    }
    if (r->step_noise) { /* the re-noising draws [steps, 1, C, T, h, w] */
        if (kind != C3_SCHED_FLOWMATCH4)
            return field_fail(er, C3_EUSAGE, COSMOS3_FIELD_STEP_NOISE, "", COSMOS3_FIELD_NONE, NULL,
                              "is for the fixed-step SDE sampler (a distilled checkpoint or "
                              "schedule flowmatch4); this run uses UniPC");
        size_t n = (size_t)s->steps;
        for (int i = 1; ck && i < 5; i++)
            n *= (size_t)s->latent_shape[i];
        if (ck && r->step_noise_len != n)
            return field_fail(er, C3_EINPUT, COSMOS3_FIELD_STEP_NOISE, "", COSMOS3_FIELD_NONE, NULL,
                              "has %zu floats; this run needs [%d, 1, %d, %d, %d, %d] = %zu",
                              r->step_noise_len, s->steps, s->latent_shape[1], s->latent_shape[2],
                              s->latent_shape[3], s->latent_shape[4], n);
    }
    return C3_OK;
}

int request_resolve(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *s) {
    return request_check(r, ck, s, NULL);
}

/* One-line warnings where a request leaves what the model card says it
 * knows: another size, words outside its vocabulary. It still generates. */
void request_warnings(const char *prompt, const cosmos3_settings *s, const c3_ckpt *ck,
                      void (*warn)(void *ud, const char *line), void *ud) {
    const c3_model_card *k = &ck->card;
    char line[2048];
    if (ck->s.distilled && s->negative_prompt && s->negative_prompt[0]) {
        snprintf(line, sizeof line,
                 "%s is distilled (no unconditional branch): the negative prompt is ignored",
                 ck->model_id);
        warn(ud, line);
    }
    if (k->width && k->height && (s->width != k->width || s->height != k->height)) {
        snprintf(line, sizeof line,
                 "%s was trained at %dx%d only; at %dx%d it may not draw what the prompt says",
                 ck->model_id, k->width, k->height, s->width, s->height);
        warn(ud, line);
    }
    if (!k->nvocab || !prompt) return;
    /* the prompt as the model reads it: its words, less the ones it drops */
    char unknown[512] = "", word[64], reads[1024];
    size_t nu = 0, nr = 0;
    int nbad = 0;
    for (const char *p = prompt; *p;) {
        if (!(isalpha((unsigned char)*p) || (unsigned char)*p >= 0x80)) {
            /* separators: one blank for a run of blanks left by a dropped word */
            bool blank = *p == ' ' || *p == '\t' || *p == '\n';
            if (nr + 1 < sizeof reads && !(blank && (nr == 0 || reads[nr - 1] == ' '))) {
                if (*p == ',' && nr && reads[nr - 1] == ' ') nr--;
                reads[nr++] = blank ? ' ' : *p;
            }
            p++;
            continue;
        }
        const char *w0 = p;
        size_t n = 0;
        for (; isalpha((unsigned char)*p) || (unsigned char)*p >= 0x80; p++)
            if (n + 1 < sizeof word) word[n++] = (char)tolower((unsigned char)*p);
        word[n] = 0;
        bool known = false;
        for (int i = 0; i < k->nvocab && !known; i++)
            known = !strcmp(word, k->vocab[i]);
        for (int i = 0; i < k->nfillers && !known; i++)
            known = !strcmp(word, k->fillers[i]);
        if (known) {
            size_t len = (size_t)(p - w0);
            if (nr + len < sizeof reads) {
                memcpy(reads + nr, w0, len);
                nr += len;
            }
            continue;
        }
        char quoted[sizeof word + 2];
        snprintf(quoted, sizeof quoted, "\"%s\"", word);
        if (strstr(unknown, quoted)) continue;
        if (nbad++ < 6) {
            int w = snprintf(unknown + nu, sizeof unknown - nu, "%s\"%s\"", nu ? ", " : "", word);
            if (w > 0 && nu + (size_t)w < sizeof unknown) nu += (size_t)w;
        }
    }
    if (!nbad) return;
    while (nr && (reads[nr - 1] == ' ' || reads[nr - 1] == ','))
        nr--;
    reads[nr] = 0;
    const char *from = reads;
    while (*from == ' ' || *from == ',')
        from++;
    char known[1024] = "";
    size_t nk = 0;
    for (int i = 0; i < k->nvocab; i++) {
        int w = snprintf(known + nk, sizeof known - nk, "%s%s", i ? " " : "", k->vocab[i]);
        if (w > 0 && nk + (size_t)w < sizeof known) nk += (size_t)w;
    }
    snprintf(
        line, sizeof line,
        "%s does not know %s%s and drops %s, so it reads \"%s\"; it knows: %s (cosmos3 info -m %s)",
        ck->model_id, unknown, nbad > 6 ? " and more" : "", nbad == 1 ? "it" : "them", from, known,
        ck->model_id);
    /* the prompt's words are echoed: its control characters (a terminal's
       escape sequences) as \xHH, as `meta` prints them */
    char safe[sizeof line];
    size_t ns = 0;
    for (const unsigned char *c = (const unsigned char *)line; *c && ns + 5 < sizeof safe; c++) {
        if (*c < 0x20 || *c == 0x7f)
            ns += (size_t)snprintf(safe + ns, sizeof safe - ns, "\\x%02x", *c);
        else
            safe[ns++] = (char)*c;
    }
    safe[ns] = 0;
    warn(ud, safe);
}
