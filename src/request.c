/* request.c - task defaults and request validation, in one place. */
#include "request.h"

#include <ctype.h>
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
}

/* One message per check: too large, or not a positive multiple of m (the
 * nearest multiple as the example). */
static int size_fail(const char *what, int v, int m) {
    if (v > C3_MAX_SIDE)
        return c3_fail(C3_EUSAGE, "%s %d is larger than %d, the largest side (e.g. %d)", what, v,
                       C3_MAX_SIDE, C3_MAX_SIDE);
    int near = v < m ? m : (int)(((int64_t)v + m / 2) / m * m);
    if (near > C3_MAX_SIDE) near = C3_MAX_SIDE;
    return c3_fail(C3_EUSAGE, "%s %d must be a positive multiple of %d (e.g. %d)", what, v, m,
                   near);
}

/* A distilled checkpoint fixes what upstream fixes (diffusers'
 * Cosmos3DistilledSetTimestepsStep, vLLM-Omni's distilled checks): the step
 * count is its t_list's, guidance is baked in (1: one forward per step, no
 * guidance interval), and the schedule is the fixed-step SDE one with the
 * scheduler's own shift. Another step count, guidance or schedule is
 * refused; the negative prompt and a shift are ignored (request_warnings). */
static int distilled_resolve(const cosmos3_request *r, const c3_sconfig *sc, cosmos3_settings *s,
                             const char **sch) {
    int n = sc->n_tlist;
    if (r->steps != COSMOS3_DEFAULT && r->steps != n)
        return c3_fail(C3_EUSAGE,
                       "steps %d: this distilled checkpoint samples exactly %d steps (its "
                       "fixed_step_sampler_config.t_list); leave steps out or give --steps %d",
                       r->steps, n, n);
    if (r->guidance != COSMOS3_DEFAULT && r->guidance != 1.0)
        return c3_fail(C3_EUSAGE,
                       "guidance %g: this distilled checkpoint has guidance baked into its "
                       "weights; leave guidance out or give --guidance 1",
                       r->guidance);
    if (r->schedule && strcmp(r->schedule, "flowmatch4") != 0)
        return c3_fail(
            C3_EUSAGE,
            "schedule %s: this distilled checkpoint samples with its fixed t_list; leave "
            "--schedule out (or give flowmatch4)",
            r->schedule);
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

int request_resolve(const cosmos3_request *r, const c3_ckpt *ck, cosmos3_settings *s) {
    memset(s, 0, sizeof *s);
    const c3_model_card *k = ck ? &ck->card : NULL;
    s->frames = r->frames == COSMOS3_DEFAULT ? 1 : r->frames;
    bool video = s->frames > 1;
    const c3_task_defaults *d = video ? &c3_video_defaults : &c3_image_defaults;
    s->width = r->width != COSMOS3_DEFAULT ? r->width : k && k->width ? k->width : d->width;
    s->height = r->height != COSMOS3_DEFAULT ? r->height : k && k->height ? k->height : d->height;
    s->fps = r->fps != COSMOS3_DEFAULT ? r->fps : C3_DEFAULT_FPS;
    s->steps = r->steps != COSMOS3_DEFAULT ? r->steps : k && k->steps ? k->steps : d->steps;
    s->guidance = r->guidance != COSMOS3_DEFAULT ? r->guidance
                  : k && k->guidance >= 0        ? k->guidance
                                                 : d->guidance;
    s->shift = r->shift != COSMOS3_DEFAULT ? r->shift : k && k->shift >= 0 ? k->shift : d->shift;
    const char *sch = r->schedule           ? r->schedule
                      : k && k->schedule[0] ? k->schedule
                                            : C3_DEFAULT_SCHEDULE;
    if (r->guidance_interval == COSMOS3_DEFAULT) {
        s->guidance_interval = k && k->interval ? k->interval == 1 : d->interval;
        s->guidance_lo = k && k->interval == 1 ? k->interval_lo : d->interval_lo;
        s->guidance_hi = k && k->interval == 1 ? k->interval_hi : d->interval_hi;
    } else {
        s->guidance_interval = r->guidance_interval != 0;
        s->guidance_lo = r->guidance_lo != COSMOS3_DEFAULT ? r->guidance_lo : d->interval_lo;
        s->guidance_hi = r->guidance_hi != COSMOS3_DEFAULT ? r->guidance_hi : d->interval_hi;
    }
    s->seed_given = r->seed != COSMOS3_DEFAULT;
    s->seed = s->seed_given ? (uint64_t)r->seed : 0;
    s->system_prompt = r->system_prompt == COSMOS3_DEFAULT ? ck && ck->default_system_prompt
                                                           : r->system_prompt != 0;
    s->templates = r->templates != 0; /* COSMOS3_DEFAULT: on */
    s->negative_prompt = r->negative_prompt ? r->negative_prompt : "";
    if (ck && ck->s.distilled) C3_TRY(distilled_resolve(r, &ck->s, s, &sch));

    /* the latent grid: pixels per latent cell and frames per latent frame
     * from the VAE config (the Wan2.2 VAE's before a model is known) */
    int ss = ck && ck->v.scale_spatial > 0 ? ck->v.scale_spatial : C3_WAN_SCALE_SPATIAL;
    int st = ck && ck->v.scale_temporal > 0 ? ck->v.scale_temporal : C3_WAN_SCALE_TEMPORAL;
    if (s->width < ss || s->width % ss || s->width > C3_MAX_SIDE)
        return size_fail("width", s->width, ss);
    if (s->height < ss || s->height % ss || s->height > C3_MAX_SIDE)
        return size_fail("height", s->height, ss);
    if (s->frames < 1 || (s->frames - 1) % st || s->frames > 4097)
        return c3_fail(C3_EUSAGE, "frames %d must be 1 (image) or 1 + %dk (e.g. %d)", s->frames, st,
                       s->frames < 1      ? 1
                       : s->frames > 4097 ? 4097
                                          : ((s->frames - 1 + st / 2) / st) * st + 1);
    if (!(s->fps > 0) || s->fps > 1000)
        return c3_fail(C3_EUSAGE, "fps %g must be in (0, 1000]", s->fps);
    if (s->steps < 1 || s->steps > 1000)
        return c3_fail(C3_EUSAGE, "steps %d must be in 1..1000", s->steps);
    if (!(s->guidance >= 0) || s->guidance > 100)
        return c3_fail(C3_EUSAGE, "guidance %g must be in [0, 100] (1 turns CFG off)", s->guidance);
    if (!(s->shift > 0) || s->shift > 1000)
        return c3_fail(C3_EUSAGE, "shift %g must be in (0, 1000]", s->shift);
    c3_schedule kind;
    if (sched_parse(sch, &kind) != 0)
        return c3_fail(C3_EUSAGE, "schedule '%s' is not native, linear, karras or flowmatch4", sch);
    if (kind == C3_SCHED_FLOWMATCH4 && s->steps != 4 && !(ck && ck->s.distilled))
        return c3_fail(C3_EUSAGE,
                       "schedule flowmatch4 is the distilled 4-step sampler; use steps 4");
    snprintf(s->schedule, sizeof s->schedule, "%s", sched_name(kind));
    snprintf(s->sampler, sizeof s->sampler, "%s",
             kind == C3_SCHED_FLOWMATCH4 ? "FlowMatch Euler SDE" : "UniPC");
    if (s->seed_given && r->seed < 0)
        return c3_fail(C3_EUSAGE, "seed %lld must be in 0..2^63-1 (or COSMOS3_DEFAULT: random)",
                       (long long)r->seed);
    /* patch 2 pads odd latent sizes; other patches need whole patches */
    if (ck && ck->t.patch != 2 && (s->width / ss) % ck->t.patch)
        return c3_fail(C3_EUSAGE, "size must be a multiple of %d pixels for this model",
                       ss * ck->t.patch);
    if (r->image && r->video)
        return c3_fail(C3_EUSAGE, "give a conditioning image or a video, not both");
    if ((r->image || r->video) && (r->image ? r->image : r->video)->frames < 1)
        return c3_fail(C3_EINPUT, "the conditioning %s has no frames",
                       r->image ? "image" : "video");
    if (r->condition_frames && !r->video)
        return c3_fail(C3_EUSAGE,
                       "condition frames apply to a video; an image always gives latent frame 0");
    if (ck) {
        s->latent_shape[0] = 1;
        s->latent_shape[1] = ck->t.latent_ch;
        s->latent_shape[2] = (s->frames - 1) / st + 1;
        s->latent_shape[3] = s->height / ss;
        s->latent_shape[4] = s->width / ss;
    }
    if (r->step_noise) { /* the re-noising draws [steps, 1, C, T, h, w] */
        if (kind != C3_SCHED_FLOWMATCH4)
            return c3_fail(C3_EUSAGE, "step_noise is for the fixed-step SDE sampler (a distilled "
                                      "checkpoint or schedule flowmatch4); this run uses UniPC");
        size_t n = (size_t)s->steps;
        for (int i = 1; ck && i < 5; i++)
            n *= (size_t)s->latent_shape[i];
        if (ck && r->step_noise_len != n)
            return c3_fail(
                C3_EINPUT,
                "step_noise has %zu floats; this run needs [%d, 1, %d, %d, %d, %d] = %zu",
                r->step_noise_len, s->steps, s->latent_shape[1], s->latent_shape[2],
                s->latent_shape[3], s->latent_shape[4], n);
    }
    return C3_OK;
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
    warn(ud, line);
}
