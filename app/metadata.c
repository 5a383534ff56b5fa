/* metadata.c - result settings -> "parameters" text and "cosmos3" JSON. */
#include "metadata.h"

#include "media.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "options.h"
#include "png_io.h"

char *metadata_parameters(const cosmos3_result *r) {
    size_t cap = strlen(r->prompt) + strlen(r->negative_prompt) + strlen(r->model_id) + 1024;
    char *buf = xmalloc(cap);
    char interval[64] = "", seed[48] = "";
    if (r->guidance_interval)
        snprintf(interval, sizeof interval, ", CFG interval: %g-%g", r->guidance_lo,
                 r->guidance_hi);
    if (!r->noise_given) snprintf(seed, sizeof seed, " Seed: %llu,", (unsigned long long)r->seed);
    snprintf(buf, cap,
             "%s\nNegative prompt: %s\nSteps: %d, CFG scale: %g,%s Size: %dx%d, Model: %s, "
             "Sampler: %s, Schedule: %s, Shift: %g%s",
             r->prompt, r->negative_prompt, r->steps, r->guidance, seed, r->width, r->height,
             r->model_id, r->sampler, r->schedule, r->shift, interval);
    if (r->frames > 1) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, ", Frames: %d, FPS: %g", r->frames, r->fps);
    }
    if (r->cache[0] && strcmp(r->cache, "none")) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, ", Cache: %s %g (%d of %d steps cached)", r->cache,
                 r->cache_threshold, r->steps_cached, r->steps);
    }
    return buf;
}

char *metadata_json(const cosmos3_result *r, const c3_meta_extra *x) {
    json_t *o = json_object();
    json_object_set_new(o, "version", json_string(cosmos3_version()));
    char h[32];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)r->config_hash);
    json_object_set_new(o, "model", json_pack("{s:s,s:s}", "id", r->model_id, "config_hash", h));
    json_t *st = json_object();
    json_object_set_new(st, "prompt", json_string(r->prompt));
    json_object_set_new(st, "negative_prompt", json_string(r->negative_prompt));
    json_object_set_new(st, "width", json_integer(r->width));
    json_object_set_new(st, "height", json_integer(r->height));
    json_object_set_new(st, "frames", json_integer(r->frames));
    json_object_set_new(st, "fps", json_real(r->fps));
    json_object_set_new(st, "steps", json_integer(r->steps));
    json_object_set_new(st, "guidance", json_real(r->guidance));
    json_object_set_new(st, "shift", json_real(r->shift));
    json_object_set_new(st, "schedule", json_string(r->schedule));
    char gi[64];
    if (r->guidance_interval)
        snprintf(gi, sizeof gi, "%g,%g", r->guidance_lo, r->guidance_hi);
    else
        snprintf(gi, sizeof gi, "none");
    json_object_set_new(st, "guidance_interval", json_string(gi));
    if (!r->noise_given) json_object_set_new(st, "seed", json_integer((json_int_t)r->seed));
    const char *sys = x && x->system_prompt ? x->system_prompt : r->system_prompt ? "on" : "off";
    json_object_set_new(st, "system_prompt", json_string(sys));
    json_object_set_new(st, "templates", json_boolean(r->templates));
    if (r->max_sequence_length > 0) /* the prompts' ids were cut there */
        json_object_set_new(st, "max_sequence_length", json_integer(r->max_sequence_length));
    if (r->cache[0] && strcmp(r->cache, "none")) { /* the step cache and its settings */
        json_object_set_new(st, "cache", json_string(r->cache));
        json_object_set_new(st, "cache_threshold", json_real(r->cache_threshold));
        json_object_set_new(st, "cache_max_skip", json_integer(r->cache_max_skip));
        json_object_set_new(st, "cache_warmup", json_integer(r->cache_warmup));
    }
    if (r->sound) json_object_set_new(st, "sound", json_true()); /* --sound */
    if (x && x->noise) json_object_set_new(st, "noise", json_string(x->noise));
    if (x && (x->image || x->video)) { /* the conditioning input: file and hash of its bytes */
        json_t *c = json_object();
        json_object_set_new(c, x->image ? "image" : "video",
                            json_string(x->image ? x->image : x->video));
        char h[32];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)x->condition_hash);
        json_object_set_new(c, "fnv1a", json_string(h));
        if (x->video && x->condition_frames)
            json_object_set_new(c, "frames", json_string(x->condition_frames));
        if (x->video && x->condition_keep)
            json_object_set_new(c, "keep", json_string(x->condition_keep));
        json_object_set_new(st, "condition", c);
    }
    if (x && x->first && x->last) { /* first-last: both ends and the hash of their files */
        char h[32];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)x->condition_hash);
        json_object_set_new(
            st, "condition",
            json_pack("{s:[s,s],s:s}", "first_last", x->first, x->last, "fnv1a", h));
    }
    json_object_set_new(o, "settings", st);
    json_object_set_new(o, "layout",
                        json_pack("{s:i,s:i,s:i,s:s,s:s,s:s}", "tp", r->tp, "cfg_parallel",
                                  r->cfg_parallel, "ulysses", r->ulysses, "device", r->device,
                                  "precision", r->precision, "attention", r->attention));
    json_object_set_new(o, "L_cond", json_integer(r->L_cond));
    json_object_set_new(o, "L_uncond", json_integer(r->L_uncond));
    if (r->cache[0] && strcmp(r->cache, "none"))
        json_object_set_new(o, "steps_cached", json_integer(r->steps_cached));
    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return txt;
}

int metadata_read(const char *path, char **json, char **parameters) {
    *json = *parameters = NULL;
    APP_TRY(media_read_meta(path, parameters, json)); /* every format cosmos3 writes */
    if (!*json && !*parameters)
        return c3_fail(COSMOS3_EINPUT, "%s: no cosmos3 metadata (was it written by cosmos3?)",
                       path);
    return COSMOS3_OK;
}

/* One stored setting (JSON key, value) into s as option `name`. */
static int apply_one(c3_settings *s, const char *name, json_t *v, unsigned cmds, const char *path) {
    const c3_option *o = option_find_for(name, cmds);
    if (!o || !(option_cli_cmds(o) & cmds)) return COSMOS3_OK; /* not this command's */
    char buf[64];
    const char *text = buf;
    if (json_is_string(v))
        text = json_string_value(v);
    else if (json_is_integer(v))
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "on" : "off");
    else
        return COSMOS3_OK;
    /* a stored input file named relative to where the run was made: when it is
       not here but is beside the --from file, that one */
    char beside[4200];
    if (json_is_string(v) && text[0] && text[0] != '/' && access(text, F_OK) != 0 &&
        (!strcmp(o->name, "noise") || !strcmp(o->name, "image") || !strcmp(o->name, "video"))) {
        const char *slash = strrchr(path, '/');
        if (slash) {
            snprintf(beside, sizeof beside, "%.*s/%s", (int)(slash - path), path, text);
            if (access(beside, F_OK) == 0) text = beside;
        }
    }
    if (settings_set(s, o->name, text, cmds) != COSMOS3_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", c3_errmsg());
        return c3_fail(COSMOS3_EINPUT, "--from %s: the stored %s: %s", path, name, why);
    }
    return COSMOS3_OK;
}

int metadata_apply(const char *path, c3_settings *s, unsigned cmds) {
    char *js, *params;
    APP_TRY(metadata_read(path, &js, &params));
    free(params);
    if (!js)
        return c3_fail(COSMOS3_EINPUT,
                       "--from %s: only an A1111 'parameters' text, no cosmos3 settings", path);
    json_error_t err;
    json_t *o = json_loads(js, 0, &err);
    free(js);
    json_t *st = o ? json_object_get(o, "settings") : NULL;
    if (!json_is_object(st)) {
        json_decref(o);
        return c3_fail(COSMOS3_EINPUT, "--from %s: the cosmos3 metadata has no settings object",
                       path);
    }
    int rc = COSMOS3_OK;
    /* the model, when it is the built-in one (a checkpoint's folder is not stored: give -m) */
    json_t *m = json_object_get(o, "model");
    const char *id = json_string_value(json_object_get(m, "id"));
    if (id && !strcmp(id, "demo")) rc = apply_one(s, "model", json_object_get(m, "id"), cmds, path);
    const char *k;
    json_t *v;
    json_object_foreach(st, k, v) {
        if (rc) break;
        char name[64];
        snprintf(name, sizeof name, "%s", k);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        if (!strcmp(name, "condition") && json_is_object(v)) { /* the conditioning input */
            const char *ck;
            json_t *cv;
            json_object_foreach(v, ck, cv) {
                char cname[64];
                snprintf(cname, sizeof cname, "%s%s",
                         strcmp(ck, "image") && strcmp(ck, "video") ? "condition-" : "", ck);
                if (!rc) rc = apply_one(s, cname, cv, cmds, path);
            }
            continue;
        }
        rc = apply_one(s, name, v, cmds, path);
    }
    json_decref(o);
    return rc;
}
