/* repl_commands.c - the prompt's commands: one cmd_<name>() per command,
 * the table, the line dispatcher (repl_exec) and completion. */
#include "repl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cond_input.h"
#include "output.h"
#include "repl_internal.h"
#include "hf_cache.h"
#include "config.h"

#define RANDOM_SEED "random"

/* ----------------------------------------------------------- helpers */

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* A copy of s without surrounding blanks and one pair of quotes. */
static char *unquote(const char *s) {
    s = skip_ws(s);
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    if (n >= 2 && ((s[0] == '"' && s[n - 1] == '"') || (s[0] == '\'' && s[n - 1] == '\''))) {
        s++;
        n -= 2;
    }
    char *o = xmalloc(n + 1);
    memcpy(o, s, n);
    o[n] = 0;
    return o;
}

static const c3_repl_cmd *find_cmd(const char *name, size_t n) {
    for (int i = 0; i < c3_repl_ncmds; i++)
        if (strlen(c3_repl_cmds[i].name) == n && !strncmp(c3_repl_cmds[i].name, name, n)) return &c3_repl_cmds[i];
    if (n == 4 && !strncmp(name, "exit", 4)) return find_cmd("quit", 4);
    return NULL;
}

/* The command a mistyped first word most likely meant: one edit away for
 * words of 3 to 5 letters, two for longer ones; NULL when none is that near. */
static const char *near_cmd(const char *w, size_t n) {
    if (n == 1 && (w[0] == '?' || w[0] == 'h')) return "help";
    if (n == 1 && w[0] == 'q') return "quit";
    if (n < 3) return NULL;
    int limit = n >= 6 ? 2 : 1, best = limit + 1;
    const char *name = NULL;
    for (int i = 0; i < c3_repl_ncmds; i++) {
        int k = c3_edit_distance(w, n, c3_repl_cmds[i].name);
        if (k < best) {
            best = k;
            name = c3_repl_cmds[i].name;
        }
    }
    if (c3_edit_distance(w, n, "exit") < best) name = "exit";
    return name;
}

static bool settable(const c3_option *o) { return o && o->repl && (o->cmds & (CMD_RUN | CMD_GEN)); }

static int need_engine(c3_repl *r) {
    if (r->job == REPL_LOADING)
        return c3_fail(COSMOS3_EUSAGE, "the model is still loading; wait a moment");
    if (!r->e) return c3_fail(COSMOS3_EMODEL, "no model loaded; 'load DIR' loads one");
    return COSMOS3_OK;
}

/* For images, an -o pattern with %d takes the next number that is free. */
static void expand_output(c3_repl *r, c3_settings *s) {
    if (!s->output || s->frames > 1 || !strchr(s->output, '%')) return;
    const char *pct = strchr(s->output, '%');
    const char *q = pct + 1;
    while (*q >= '0' && *q <= '9') q++;
    if (*q != 'd' || strchr(q, '%')) return; /* the engine reports the bad pattern */
    char path[4096];
    for (int tries = 0; tries < 1000000; tries++) {
        int k = r->run_counter++;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(path, sizeof path, s->output, k);
#pragma GCC diagnostic pop
        if (!c3_file_exists(path)) break;
    }
    free(s->output);
    s->output = xstrdup(path);
    s->given[option_index(option_find("output"))] = true;
}

static int generate(c3_repl *r, const char *prompt, bool new_seed) {
    APP_TRY(need_engine(r));
    if (r->job != REPL_IDLE)
        return c3_fail(COSMOS3_EUSAGE, "a generation is running; wait, or cancel it first");
    settings_free(&r->job_s);
    settings_copy(&r->job_s, &r->s);
    free(r->job_s.prompt);
    r->job_s.prompt = xstrdup(prompt);
    if (new_seed) {
        free(r->job_s.seed);
        r->job_s.seed = xstrdup(RANDOM_SEED);
    }
    expand_output(r, &r->job_s);
    /* validate now so a bad value is one line, not a failed run */
    cosmos3_settings st;
    c3_output out;
    APP_TRY(session_check(&r->job_s, r->e, true, NULL, &st));
    APP_TRY(output_plan(&r->job_s, st.frames, st.width, st.height, -1, &out));
    output_free(&out);
    free(r->run_prompt);
    r->run_prompt = xstrdup(prompt);
    monitor_run(&r->mon, st.steps);
    return repl_start_job(r, false);
}

/* ----------------------------------------------------------- commands */

static int cmd_set(c3_repl *r, const char *arg) {
    arg = skip_ws(arg);
    const char *sp = strpbrk(arg, " \t");
    if (!*arg || !sp)
        return c3_fail(COSMOS3_EUSAGE,
                       "set NAME VALUE (e.g. set steps 30); 'show' lists the names");
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(sp - arg), arg);
    const c3_option *o = option_find_for(name, CMD_REPL);
    if (!o) return c3_fail(COSMOS3_EUSAGE, "set: unknown option '%s'; 'show' lists them", name);
    if (!settable(o))
        return c3_fail(COSMOS3_EUSAGE,
                       "set: %s cannot change in a session; start cosmos3 with --%s", name,
                       o->name);
    char *v = unquote(sp);
    c3_settings keep;
    settings_copy(&keep, &r->s);
    int rc = settings_set(&r->s, o->name, v, o->cmds);
    if (rc == COSMOS3_OK) {
        cosmos3_settings st;
        rc = session_check(&r->s, r->e, false, NULL, &st);
        /* the destination now, not after the next run: a missing folder, -o - on a terminal */
        c3_output out;
        if (rc == COSMOS3_OK && !strcmp(o->name, "output") &&
            (rc = output_plan(&r->s, st.frames, st.width, st.height, -1, &out)) == COSMOS3_OK)
            output_free(&out);
    }
    if (rc) {
        settings_free(&r->s);
        r->s = keep;
    } else {
        settings_free(&keep);
        char *now = settings_get(&r->s, o);
        repl_print(r, 0, "%s = %s", o->name, now);
        free(now);
        if (!strcmp(o->name, "preview")) preview_probe(r->s.preview, 0, 1, 0.3, &r->term);
    }
    free(v);
    return rc;
}

static int cmd_show(c3_repl *r, const char *arg) {
    char *name = unquote(arg);
    /* show the values a run would use: the task defaults resolved */
    c3_settings eff;
    settings_copy(&eff, &r->s);
    cosmos3_settings st;
    if (session_check(&r->s, r->e, false, NULL, &st) == COSMOS3_OK) settings_show_resolved(&eff, &st);
    int rc = COSMOS3_OK;
    if (*name) {
        const c3_option *o = option_find_for(name, CMD_REPL);
        if (!o || !settable(o)) {
            rc = c3_fail(COSMOS3_EUSAGE, "show: unknown option '%s'; 'show' lists them", name);
        } else {
            char *v = settings_get(&eff, o);
            repl_print(r, 0, "%s = %s", o->name, v);
            free(v);
        }
    } else {
        for (int i = 0; i < c3_noptions; i++) {
            const c3_option *o = &c3_options[i];
            if (!settable(o) || !strcmp(o->name, "prompt")) continue;
            char *v = settings_get(&eff, o);
            repl_print(r, 0, "%-18s %s", o->name, v);
            free(v);
        }
        repl_print(r, 0, "%-18s %s", "model", r->model_dir);
    }
    settings_free(&eff);
    free(name);
    return rc;
}

static int cmd_seed(c3_repl *r, const char *arg) {
    char *v = unquote(arg);
    int rc = COSMOS3_OK;
    if (!*v) {
        repl_print(r, 0, "seed = %s", r->s.seed);
    } else {
        char buf[128];
        snprintf(buf, sizeof buf, "seed %s", v);
        rc = cmd_set(r, buf);
    }
    free(v);
    return rc;
}

static int cmd_neg(c3_repl *r, const char *arg) {
    char *v = unquote(arg);
    free(r->s.negative);
    r->s.negative = v;
    r->s.given[option_index(option_find("negative-prompt"))] = true;
    repl_print(r, 0, *v ? "negative prompt = %s" : "negative prompt cleared%s", v);
    return COSMOS3_OK;
}

/* The conditioning of the next prompts: one of image, video, first-last. */
static void drop_condition(c3_settings *s) {
    static const char *const names[] = {"image", "video", "first-last"};
    char **fields[] = {&s->image, &s->video, &s->first_last};
    for (size_t i = 0; i < C3_ARRAY_LEN(names); i++) {
        free(*fields[i]);
        *fields[i] = NULL;
        s->given[option_index(option_find(names[i]))] = false;
    }
}

/* image FILE / video FILE|DIR: the file is read now, so a typo (or a prompt
   that starts with the word) is refused before any run. */
static int set_condition(c3_repl *r, const char *arg, bool clip) {
    const char *what = clip ? "video" : "image";
    char *path = unquote(arg);
    if (!*path) {
        free(path);
        return c3_fail(COSMOS3_EUSAGE,
                       "%s %s: give a %s; 'clear' drops the conditioning (quote a prompt that "
                       "starts with '%s')",
                       what, clip ? "FILE|DIR" : "FILE", clip ? "clip" : "picture", what);
    }
    c3_cond_file cf = {0};
    int rc = cond_file_read(path, clip, &cf);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", c3_errmsg());
        free(path);
        return c3_fail(rc, "%s: %s (a prompt that starts with '%s': quote it)", what, msg, what);
    }
    int w = cf.media.width, h = cf.media.height, n = cf.media.frames;
    cond_file_free(&cf);
    drop_condition(&r->s);
    if (clip)
        r->s.video = path;
    else
        r->s.image = path;
    r->s.given[option_index(option_find(what))] = true;
    char frames[32] = "";
    if (clip) snprintf(frames, sizeof frames, ", %d frame%s", n, n == 1 ? "" : "s");
    repl_print(r, 0, "%s = %s (%dx%d%s); 'clear' drops it", what, path, w, h, frames);
    if (r->s.frames <= 1)
        repl_print(r, 0, "note: frames is %d; conditioning makes a video: set frames 9 (1 + 4k)",
                   r->s.frames);
    return COSMOS3_OK;
}

static int cmd_image(c3_repl *r, const char *arg) {
    return set_condition(r, arg, false);
}
static int cmd_video(c3_repl *r, const char *arg) {
    return set_condition(r, arg, true);
}

static int cmd_clear(c3_repl *r, const char *arg) {
    (void)arg;
    bool had = r->s.image || r->s.video || r->s.first_last;
    drop_condition(&r->s);
    repl_print(r, 0,
               had ? "conditioning cleared: the next prompts start from noise"
                   : "no conditioning to clear");
    return COSMOS3_OK;
}

static int cmd_again(c3_repl *r, const char *arg) {
    (void)arg;
    if (!r->have_last || !r->last_s.prompt)
        return c3_fail(COSMOS3_EUSAGE, "again: nothing ran yet; type a prompt");
    char *p = xstrdup(r->last_s.prompt);
    int rc = generate(r, p, true);
    free(p);
    return rc;
}

static int cmd_gpus(c3_repl *r, const char *arg) {
    (void)arg;
    char a[32], b[32], c[32], d[32];
    int n = cosmos3_device_count();
    for (int g = 0; g < n; g++) {
        char name[64], err[512];
        int64_t total = 0, fr = 0;
        if (cosmos3_device_info(g, name, sizeof name, &fr, &total, err, sizeof err) != COSMOS3_OK) {
            repl_print(r, 0, "GPU %d: N/A (%s)", g, err);
            continue;
        }
        c3_bytes_text(total - fr, a, sizeof a);
        c3_bytes_text(total, b, sizeof b);
        c3_bytes_text(fr, c, sizeof c);
        repl_print(r, 0, "GPU %d: %s  used %s / %s, free %s (driver); utilisation N/A", g, name, a, b, c);
    }
    if (n == 0) {
        /* the CPU: process CPU time over the last second, host memory */
        double c0 = monitor_cpu_seconds(), t0 = c3_now();
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double util = (monitor_cpu_seconds() - c0) / (c3_now() - t0) * 100.0;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        int64_t total, avail;
        monitor_host_memory(&total, &avail);
        c3_bytes_text(total - avail, a, sizeof a);
        c3_bytes_text(total, b, sizeof b);
        c3_bytes_text(avail, c, sizeof c);
        repl_print(r, 0, "cpu: %ld cores, this process %.0f%% (of one core)  memory used %s / %s, free %s", ncpu,
                   util, a, b, c);
    }
    for (int k = 0; k < r->mon.nranks; k++) {
        const c3_mon_dev *dv = &r->mon.dev[k];
        if (!dv->valid) continue;
        c3_bytes_text(dv->bytes[0], a, sizeof a);
        c3_bytes_text(dv->bytes[1], b, sizeof b);
        c3_bytes_text(dv->bytes[2], c, sizeof c);
        c3_bytes_text(dv->bytes[0] + dv->bytes[1] + dv->bytes[2], d, sizeof d);
        char where[96];
        if (dv->device >= 0)
            snprintf(where, sizeof where, "%s %d", dv->name, dv->device);
        else
            snprintf(where, sizeof where, "%s", dv->name);
        repl_print(r, 0, "  rank %d (%s): weights %s, K/V %s, activations %s = %s (our accounting)", k, where, a, b,
                   c, d);
    }
    if (r->have_last && r->last_r.out && r->last_r.out->mem_peak > 0) {
        c3_bytes_text(r->last_r.out->mem_peak, a, sizeof a);
        repl_print(r, 0, "  peak of the last run on rank 0: %s", a);
    }
    return COSMOS3_OK;
}

static void plan_to(FILE *f, const void *text) {
    fputs(text, f);
}

static int cmd_plan(c3_repl *r, const char *arg) {
    (void)arg;
    APP_TRY(need_engine(r));
    char *text = cosmos3_layout_text(session_library(r->e));
    repl_print_stream(r, plan_to, text);
    free(text);
    return COSMOS3_OK;
}

static int cmd_last(c3_repl *r, const char *arg) {
    (void)arg;
    if (!r->have_last) return c3_fail(COSMOS3_EUSAGE, "last: nothing ran yet; type a prompt");
    const c3_settings *s = &r->last_s;
    const session_result *x = &r->last_r;
    char a[32];
    repl_print(r, 0, "prompt: %s", s->prompt ? s->prompt : "");
    if (s->image || s->video)
        repl_print(r, 0, "conditioned on the %s %s", s->image ? "picture" : "clip",
                   s->image ? s->image : s->video);
    if (s->negative && *s->negative) repl_print(r, 0, "negative: %s", s->negative);
    if (r->last_rc) {
        repl_print(r, 0, "outcome: %s", r->last_rc == COSMOS3_ECANCEL ? "cancelled" : r->last_err);
        return COSMOS3_OK;
    }
    /* the report gen --json and serve's metrics give (result_json) */
    json_t *o = result_json(x), *t = json_object_get(o, "seconds");
#define NUM(obj, key) json_number_value(json_object_get(obj, key))
    int frames = (int)NUM(o, "frames");
    repl_print(r, 0, "seed %llu, %dx%d, %d frame%s, %d steps, guidance %g, shift %g, schedule %s",
               (unsigned long long)json_integer_value(json_object_get(o, "seed")),
               (int)NUM(o, "width"), (int)NUM(o, "height"), frames, frames == 1 ? "" : "s",
               (int)NUM(o, "steps"), NUM(o, "guidance"), NUM(o, "shift"),
               json_string_value(json_object_get(o, "schedule")));
    for (int i = 0; i < x->npaths && i < 3; i++) repl_print(r, 0, "wrote %s", x->paths[i]);
    if (x->npaths > 3) repl_print(r, 0, "... %d files", x->npaths);
    repl_print(r, 0,
               "seconds: tokenize %.3f, und %.3f, denoise %.3f (%.3f s/step: cond %.3f, uncond "
               "%.3f), vae %.3f, "
               "write %.3f, total %.3f",
               NUM(t, "tokenize"), NUM(t, "und"), NUM(t, "denoise"), NUM(t, "step_mean"),
               NUM(t, "cond_mean"), NUM(t, "uncond_mean"), NUM(t, "vae"), NUM(t, "write"),
               NUM(t, "total"));
    c3_bytes_text((int64_t)json_integer_value(json_object_get(o, "mem_peak_bytes")), a, sizeof a);
    repl_print(r, 0, "memory peak (rank 0): %s; prompt tokens cond %d, uncond %d", a,
               (int)NUM(o, "L_cond"), (int)NUM(o, "L_uncond"));
#undef NUM
    json_decref(o);
    return COSMOS3_OK;
}

static int cmd_load(c3_repl *r, const char *arg) {
    char *dir = unquote(arg);
    if (!*dir) {
        free(dir);
        return c3_fail(COSMOS3_EUSAGE, "load DIR: give a Diffusers-format Cosmos3 folder");
    }
    if (r->job != REPL_IDLE) {
        free(dir);
        return c3_fail(COSMOS3_EUSAGE, "busy: wait for the run to finish or cancel it first");
    }
    if (hf_is_model_id(dir)) { /* a Hugging Face model id, from the local cache (as -m) */
        char snap[4096];
        int rc = hf_resolve(dir, NULL, snap, sizeof snap);
        free(dir);
        if (rc) return rc;
        dir = xstrdup(snap);
    }
    free(r->prev_model);
    r->prev_model = r->s.model; /* back if the load fails */
    r->s.model = dir;
    repl_print(r, 2, "loading %s ...", dir);
    return repl_load_start(r);
}

static int cmd_history(c3_repl *r, const char *arg) {
    (void)arg;
    int from = r->nhist > 50 ? r->nhist - 50 : 0;
    for (int i = from; i < r->nhist; i++) repl_print(r, 0, "%5d  %s", i + 1, r->hist[i]);
    return COSMOS3_OK;
}

static int cmd_help(c3_repl *r, const char *arg) {
    char *name = unquote(arg);
    int rc = COSMOS3_OK;
    if (*name) {
        const c3_repl_cmd *c = find_cmd(name, strlen(name));
        if (!c) {
            rc = c3_fail(COSMOS3_EUSAGE, "help: no command '%s'; 'help' lists them", name);
        } else {
            repl_print(r, 0, "%s %s\n  %s", c->name, c->args, c->help);
            if (c->complete == COMPLETE_OPTION || c->complete == COMPLETE_OPTION_VALUE) {
                repl_print(r, 0, "options:");
                for (int i = 0; i < c3_noptions; i++) {
                    const c3_option *o = &c3_options[i];
                    if (!settable(o) || !strcmp(o->name, "prompt")) continue;
                    repl_print(r, 0, "  %-18s %s%s%s%s", o->name, o->help, o->values ? " [" : "",
                               o->values ? o->values : "", o->values ? "]" : "");
                }
            }
        }
    } else {
        repl_print(r, 0, "Type a prompt to generate with the current settings, or a command:");
        for (int i = 0; i < c3_repl_ncmds; i++) {
            char left[64];
            snprintf(left, sizeof left, "%s %s", c3_repl_cmds[i].name, c3_repl_cmds[i].args);
            repl_print(r, 0, "  %-22s %s", left, c3_repl_cmds[i].help);
        }
        repl_print(r, 0,
                   "A line is a prompt unless its first word is a command. Lines that look like a "
                   "mistyped");
        repl_print(
            r, 0,
            "command are refused with a suggestion instead of generating: a first word one letter");
        repl_print(
            r, 0,
            "from a command (two for long words, e.g. 'sett steps 4'), or a line of one word");
        repl_print(
            r, 0,
            "('clear', '?'). A line that starts with \" is always a prompt: \"fox\" draws a fox.");
        repl_print(r, 0, "Tab completes commands, option names and values, and paths after load.");
        repl_print(
            r, 0,
            "Ctrl-C cancels a generation or clears the line; twice within a second it exits.");
        repl_print(r, 0, "Ctrl-D (or quit) leaves.");
    }
    free(name);
    return rc;
}

static int cmd_quit(c3_repl *r, const char *arg) {
    (void)arg;
    r->quit = true;
    return COSMOS3_OK;
}

const c3_repl_cmd c3_repl_cmds[] = {
    {"set", "NAME VALUE", "change a generation option (the long option names of 'cosmos3 gen')",
     cmd_set, COMPLETE_OPTION_VALUE},
    {"show", "[NAME]", "the current value of one option, or of all", cmd_show, COMPLETE_OPTION},
    {"seed", "random|N", "the noise seed of the next runs", cmd_seed, COMPLETE_SEED},
    {"neg", "[TEXT]", "set the negative prompt (no TEXT clears it)", cmd_neg, COMPLETE_NONE},
    {"image", "FILE", "continue this picture (PNG, JPEG, WebP) in the next prompts (image-to-video)", cmd_image,
     COMPLETE_PATH},
    {"video", "FILE|DIR", "continue this clip (MP4, WebM, MOV, or PNG frames) in the next prompts (video-to-video)",
     cmd_video, COMPLETE_PATH},
    {"clear", "", "drop the picture or clip: the next prompts start from noise", cmd_clear,
     COMPLETE_NONE},
    {"again", "", "run the last prompt again with a new seed", cmd_again, COMPLETE_NONE},
    {"gpus", "", "per-device memory and utilisation now", cmd_gpus, COMPLETE_NONE},
    {"plan", "", "the parallel layout and the bytes per rank", cmd_plan, COMPLETE_NONE},
    {"last", "", "the settings and timings of the last run", cmd_last, COMPLETE_NONE},
    {"load", "DIR", "load another checkpoint folder", cmd_load, COMPLETE_PATH},
    {"history", "", "the lines typed before (kept across sessions)", cmd_history, COMPLETE_NONE},
    {"help", "[COMMAND]", "this list, or one command", cmd_help, COMPLETE_COMMAND},
    {"quit", "", "leave (also: exit, Ctrl-D)", cmd_quit, COMPLETE_NONE},
};
const int c3_repl_ncmds = (int)C3_ARRAY_LEN(c3_repl_cmds);

int repl_exec(c3_repl *r, const char *line) {
    const char *p = skip_ws(line);
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n' || p[n - 1] == '\r')) n--;
    if (n == 0 || p[0] == '#') return COSMOS3_OK;
    char *txt = xmalloc(n + 1);
    memcpy(txt, p, n);
    txt[n] = 0;
    int rc;
    size_t w = strcspn(txt, " \t");
    const c3_repl_cmd *c = txt[0] == '"' ? NULL : find_cmd(txt, w);
    const char *near = c || txt[0] == '"' ? NULL : near_cmd(txt, w);
    bool one_word = !txt[w];
    if (c) {
        rc = c->run(r, txt + w);
    } else if (txt[0] != '"' && near && !one_word) { /* a typo of a command: nothing generates */
        rc = c3_fail(COSMOS3_EUSAGE,
                     "'%.*s' is not a command; did you mean '%s%s'? (a prompt that starts so needs "
                     "a \" first)",
                     (int)w, txt, near, txt + w);
    } else if (txt[0] != '"' && one_word) {
        if (near)
            rc = c3_fail(COSMOS3_EUSAGE,
                         "'%s' is not a command; did you mean '%s'? (a one-word prompt needs "
                         "quotes: \"%s\")",
                         txt, near, txt);
        else
            rc = c3_fail(
                COSMOS3_EUSAGE,
                "'%s' is not a command ('help' lists them); a one-word prompt needs quotes: \"%s\"",
                txt, txt);
    } else {
        char *prompt = unquote(txt);
        rc = generate(r, prompt, false);
        free(prompt);
    }
    free(txt);
    if (rc) {
        r->status = rc;
        repl_print(r, 1, "%s", c3_errmsg());
    }
    return rc;
}

/* --------------------------------------------------------- completion */

static void add_cand(char ***v, int *n, const char *s, size_t len) {
    *v = xrealloc(*v, (size_t)(*n + 2) * sizeof(char *));
    char *c = xmalloc(len + 1);
    memcpy(c, s, len);
    c[len] = 0;
    (*v)[(*n)++] = c;
    (*v)[*n] = NULL;
}

char **repl_complete(const char *line, int start, const char *text, bool *want_path) {
    *want_path = false;
    /* the words before the one being completed */
    char *head = xmalloc((size_t)start + 1);
    memcpy(head, line, (size_t)start);
    head[start] = 0;
    char *words[3] = {NULL, NULL, NULL};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(head, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (nw < 3) words[nw] = t;
        nw++;
    }
    size_t tl = strlen(text);
    char **v = xcalloc(1, sizeof(char *));
    int n = 0;
    if (nw == 0) {
        for (int i = 0; i < c3_repl_ncmds; i++)
            if (!strncmp(c3_repl_cmds[i].name, text, tl)) add_cand(&v, &n, c3_repl_cmds[i].name, strlen(c3_repl_cmds[i].name));
    } else {
        const c3_repl_cmd *c = find_cmd(words[0], strlen(words[0]));
        int kind = c ? (int)c->complete : COMPLETE_NONE;
        if ((kind == COMPLETE_OPTION || kind == COMPLETE_OPTION_VALUE) && nw == 1) {
            for (int i = 0; i < c3_noptions; i++) {
                const c3_option *o = &c3_options[i];
                if (settable(o) && strcmp(o->name, "prompt") && !strncmp(o->name, text, tl))
                    add_cand(&v, &n, o->name, strlen(o->name));
            }
        } else if (kind == COMPLETE_OPTION_VALUE && nw == 2) {
            const c3_option *o = option_find_for(words[1], CMD_REPL);
            const char *vals = NULL;
            if (o && o->type == OPT_ENUM) vals = o->values;
            if (o && o->type == OPT_FLAG) vals = "on|off";
            if (o && o->type == OPT_RANGE) vals = "none|400,1000";
            if (o && !strcmp(o->name, "seed")) vals = RANDOM_SEED;
            if (o && o->type == OPT_STR && o->metavar && (!strcmp(o->metavar, "FILE") || !strcmp(o->metavar, "PATH")))
                *want_path = true;
            for (const char *p = vals; p && *p;) {
                const char *e = strchr(p, '|');
                size_t len = e ? (size_t)(e - p) : strlen(p);
                if (len >= tl && !strncmp(p, text, tl)) add_cand(&v, &n, p, len);
                if (!e) break;
                p = e + 1;
            }
        } else if (kind == COMPLETE_COMMAND && nw == 1) {
            for (int i = 0; i < c3_repl_ncmds; i++)
                if (!strncmp(c3_repl_cmds[i].name, text, tl))
                    add_cand(&v, &n, c3_repl_cmds[i].name, strlen(c3_repl_cmds[i].name));
        } else if (kind == COMPLETE_SEED && nw == 1) {
            if (!strncmp(RANDOM_SEED, text, tl)) add_cand(&v, &n, RANDOM_SEED, strlen(RANDOM_SEED));
        } else if (kind == COMPLETE_PATH) {
            *want_path = true;
        }
    }
    free(head);
    if (*want_path) {
        free(v);
        return NULL;
    }
    return v;
}

