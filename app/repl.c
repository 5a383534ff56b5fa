/* repl.c - the `cosmos3 > ` prompt: state, one cmd_<name>() per command,
 * the table, completion, history, the worker and the event pump. */
#include "repl.h"

#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "media.h"
#include "output.h"
#include "cond_input.h"
#include "config.h"

#ifdef COSMOS3_HAVE_TUI
#include <readline/history.h>
#include <readline/readline.h>
#endif

#define DOUBLE_CTRL_C_S 1.0         /* two Ctrl-C within this many seconds exit */
#define POLL_MS 100                 /* the prompt loop's only wait */
#define HISTORY_KEEP 1000           /* lines kept in the history file */
#define RANDOM_SEED "random"

/* ------------------------------------------------------------- output */

static void emit_line(c3_repl *r, int level, const char *line) {
    if (r->sink) {
        r->sink(r->sink_ctx, level, line);
    } else if (level == 1) {
        fprintf(stderr, "cosmos3: %s\n", line);
    } else {
        printf("%s\n", line);
        fflush(stdout);
    }
}

void repl_print(c3_repl *r, int level, const char *fmt, ...) {
    char *buf = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    /* one call per line */
    char *p = buf;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        emit_line(r, level, p);
        if (!nl) break;
        p = nl + 1;
    }
    free(buf);
}

/* Print a FILE-producing function's text through the sink. */
static void print_stream(c3_repl *r, void (*fn)(FILE *, const void *), const void *arg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    fn(f, arg);
    fclose(f);
    if (len && buf[len - 1] == '\n') buf[len - 1] = 0;
    repl_print(r, 0, "%s", buf);
    free(buf);
}

/* ------------------------------------------------------------ history */

void repl_history_path(char *buf, size_t n) {
    const char *x = getenv("XDG_STATE_HOME");
    if (x && *x) {
        snprintf(buf, n, "%s/cosmos3/history", x);
        return;
    }
    const char *h = getenv("HOME");
    snprintf(buf, n, "%s/.local/state/cosmos3/history", h && *h ? h : ".");
}

static void history_load(c3_repl *r) {
    FILE *f = fopen(r->hist_path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t k;
    while ((k = getline(&line, &cap, f)) > 0) {
        if (line[k - 1] == '\n') line[k - 1] = 0;
        if (!*line) continue;
        r->hist = xrealloc(r->hist, (size_t)(r->nhist + 1) * sizeof(char *));
        r->hist[r->nhist++] = xstrdup(line);
    }
    free(line);
    fclose(f);
    /* keep the newest HISTORY_KEEP */
    if (r->nhist > HISTORY_KEEP) {
        int drop = r->nhist - HISTORY_KEEP;
        for (int i = 0; i < drop; i++) free(r->hist[i]);
        memmove(r->hist, r->hist + drop, (size_t)HISTORY_KEEP * sizeof(char *));
        r->nhist = HISTORY_KEEP;
        FILE *w = fopen(r->hist_path, "w");
        if (w) {
            for (int i = 0; i < r->nhist; i++) fprintf(w, "%s\n", r->hist[i]);
            fclose(w);
        }
    }
#ifdef COSMOS3_HAVE_TUI
    for (int i = 0; i < r->nhist; i++) add_history(r->hist[i]);
#endif
}

void repl_history_add(c3_repl *r, const char *text) {
    /* kept as typed, without the blanks completion leaves at the end */
    size_t n = strlen(text);
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\t')) n--;
    char line[4096];
    if (n == 0 || n >= sizeof line || memchr(text, '\n', n)) return;
    memcpy(line, text, n);
    line[n] = 0;
    if (r->nhist && !strcmp(r->hist[r->nhist - 1], line)) return;
    r->hist = xrealloc(r->hist, (size_t)(r->nhist + 1) * sizeof(char *));
    r->hist[r->nhist++] = xstrdup(line);
#ifdef COSMOS3_HAVE_TUI
    add_history(line);
#endif
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", r->hist_path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        if (c3_mkdir_p(dir) != COSMOS3_OK) return; /* history is a convenience: no error */
    }
    /* the prompts are the user's own: 0600, and an older file is made so too */
    int fd = open(r->hist_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return;
    (void)fchmod(fd, 0600); /* a convenience: a file we cannot chmod is still written */
    FILE *f = fdopen(fd, "a");
    if (!f) {
        close(fd);
        return;
    }
    fprintf(f, "%s\n", line);
    fclose(f);
}

/* ------------------------------------------------------------- worker */

static int job_load(void *arg) {
    c3_repl *r = arg;
    return engine_open(&r->e_next, &r->job_s, r->ev);
}

static int job_run(void *arg) {
    c3_repl *r = arg;
    int rc = engine_generate(r->e, &r->job_s, &r->job_r);
    cosmos3_result *out = r->job_r.out;
    if (rc == COSMOS3_OK && out && out->rgb) { /* keep a preview, not every frame */
        media_strip(out->rgb, out->width, out->height, out->frames, &r->job_img, &r->job_img_w);
        r->job_img_h = out->height;
        free(out->rgb);
        out->rgb = NULL;
    }
    return rc;
}

static int start_job(c3_repl *r, bool load) {
    r->job = load ? REPL_LOADING : REPL_RUNNING;
    r->job_rc = 0;
    r->job_err[0] = 0;
    r->job_t0 = c3_now();
    if (task_start(&r->task, load ? job_load : job_run, r, r->ev) != COSMOS3_OK) {
        r->job = REPL_IDLE;
        return c3_fail(COSMOS3_EFAIL, "cannot start the worker thread");
    }
    return COSMOS3_OK;
}

int repl_load_start(c3_repl *r) {
    if (r->job != REPL_IDLE)
        return c3_fail(COSMOS3_EUSAGE, "busy: wait for the run to finish or press c to cancel");
    /* the loaded model stays until the new one is ready (finish_job swaps) */
    snprintf(r->prev_model_dir, sizeof r->prev_model_dir, "%s", r->model_dir);
    settings_free(&r->job_s);
    settings_copy(&r->job_s, &r->s);
    pipeline_model_dir(&r->s, r->model_dir, sizeof r->model_dir);
    return start_job(r, true);
}

void repl_cancel(c3_repl *r) {
    if (r->job == REPL_RUNNING && r->e) engine_cancel(r->e);
}

static void finish_job(c3_repl *r) {
    if (r->task.live) {
        r->job_rc = task_join(&r->task);
        snprintf(r->job_err, sizeof r->job_err, "%s", r->job_rc ? r->task.err : "");
    }
    c3_repl_job was = r->job;
    r->job = REPL_IDLE;
    int rc = r->job_rc;
    if (rc) r->status = rc;
    if (was == REPL_LOADING && rc == COSMOS3_ERESOURCE && r->e) {
        /* no room for two models: give the old one up and try again */
        repl_print(r, 2, "%s; unloading %s to make room", r->job_err, r->prev_model_dir);
        engine_close(r->e);
        r->e = NULL;
        r->job_rc = engine_open(&r->e_next, &r->job_s, r->ev);
        rc = r->job_rc;
        if (rc) snprintf(r->job_err, sizeof r->job_err, "%s", c3_errmsg());
        if (rc) r->status = rc;
    }
    if (was == REPL_LOADING) {
        if (rc) {
            r->e_next = NULL;
            if (!r->quiet_load_error) repl_print(r, 1, "%s", r->job_err);
            if (r->e) { /* the model loaded before is still there */
                snprintf(r->model_dir, sizeof r->model_dir, "%s", r->prev_model_dir);
                free(r->s.model);
                r->s.model = r->prev_model;
                r->prev_model = NULL;
                repl_print(r, 2, "kept %s loaded", r->model_dir);
            }
        } else {
            if (r->e) engine_close(r->e);
            r->e = r->e_next;
            r->e_next = NULL;
            monitor_engine(&r->mon, engine_layout(r->e));
            free(r->prev_model);
            r->prev_model = NULL;
            r->load_seconds = c3_now() - r->job_t0;
            repl_print(r, 2, "loaded %s (%s, %.1f s)", engine_model(r->e)->id, r->model_dir,
                       r->load_seconds);
        }
        return;
    }
    /* a generation */
    settings_free(&r->last_s);
    settings_copy(&r->last_s, &r->job_s);
    result_free(&r->last_r);
    r->last_r = r->job_r;
    memset(&r->job_r, 0, sizeof r->job_r);
    r->last_rc = rc;
    snprintf(r->last_err, sizeof r->last_err, "%s", r->job_err);
    r->have_last = true;
    if (rc == COSMOS3_ECANCEL) {
        repl_print(r, 2, "cancelled; the model is still loaded");
    } else if (rc) {
        repl_print(r, 1, "%s", r->job_err);
    } else {
        const c3_result *res = &r->last_r;
        if (res->npaths == 1 && res->frames > 1)
            repl_print(r, 0, "wrote %s (%d frames, %g fps, seed %llu, %.1f s)", res->paths[0],
                       res->frames, res->out ? res->out->fps : 0, (unsigned long long)res->seed,
                       res->t_total);
        else if (res->npaths == 1)
            repl_print(r, 0, "wrote %s (seed %llu, %.1f s)", res->paths[0], (unsigned long long)res->seed,
                       res->t_total);
        else if (res->npaths > 1)
            repl_print(r, 0, "wrote %d frames %s .. %s (seed %llu, %.1f s)", res->npaths, res->paths[0],
                       res->paths[res->npaths - 1], (unsigned long long)res->seed, res->t_total);
        if (res->npaths > 0) {
            free(r->last_png);
            r->last_png = xstrdup(res->paths[res->npaths - 1]);
            free(r->last_img);
            r->last_img = r->job_img;
            r->last_img_w = r->job_img_w;
            r->last_img_h = r->job_img_h;
            r->job_img = NULL;
            r->image_serial++;
        }
    }
}

bool repl_pump(c3_repl *r, c3_event *out, double timeout) {
    c3_event x;
    if (!events_pop(r->ev, &x, timeout)) return false;
    monitor_event(&r->mon, &x);
    switch (x.kind) {
    case EV_FINISHED:
        finish_job(r);
        break;
    default: break;
    }
    if (out) *out = x;
    return true;
}

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

/* Optimal string alignment distance (edits, transpositions counting one)
 * between a[0..n) and b, both short (longer words count as far apart). */
static int edit_distance(const char *a, size_t n, const char *b) {
    size_t m = strlen(b);
    enum { MAXW = 32 };
    if (n >= MAXW || m >= MAXW) return 99;
    int d[MAXW + 1][MAXW + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != b[j - 1];
            int v = C3_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1);
            v = C3_MIN(v, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == b[j - 2] &&
                tolower((unsigned char)a[i - 2]) == b[j - 1])
                v = C3_MIN(v, d[i - 2][j - 2] + 1);
            d[i][j] = v;
        }
    return d[n][m];
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
        int k = edit_distance(w, n, c3_repl_cmds[i].name);
        if (k < best) {
            best = k;
            name = c3_repl_cmds[i].name;
        }
    }
    if (edit_distance(w, n, "exit") < best) name = "exit";
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
    c3_settings tmp;
    settings_copy(&tmp, &r->job_s);
    int rc = settings_resolve(&tmp, r->e);
    c3_output out;
    if (rc == COSMOS3_OK &&
        (rc = output_plan(&tmp, tmp.frames, tmp.width, tmp.height, -1, &out)) == COSMOS3_OK)
        output_free(&out);
    settings_free(&tmp);
    if (rc) return rc;
    free(r->run_prompt);
    r->run_prompt = xstrdup(prompt);
    monitor_run(&r->mon, r->job_s.steps);
    return start_job(r, false);
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
        c3_settings tmp;
        settings_copy(&tmp, &r->s);
        rc = settings_resolve(&tmp, r->e);
        settings_free(&tmp);
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
    settings_resolve(&eff, r->e);
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

static double cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
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
        double c0 = cpu_seconds(), t0 = c3_now();
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double util = (cpu_seconds() - c0) / (c3_now() - t0) * 100.0;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        int64_t total = (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
        int64_t avail = (int64_t)sysconf(_SC_AVPHYS_PAGES) * sysconf(_SC_PAGESIZE);
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
    if (r->have_last && r->last_r.mem_peak > 0) {
        c3_bytes_text(r->last_r.mem_peak, a, sizeof a);
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
    char *text = cosmos3_layout_text(engine_library(r->e));
    print_stream(r, plan_to, text);
    free(text);
    return COSMOS3_OK;
}

static int cmd_last(c3_repl *r, const char *arg) {
    (void)arg;
    if (!r->have_last) return c3_fail(COSMOS3_EUSAGE, "last: nothing ran yet; type a prompt");
    const c3_settings *s = &r->last_s;
    const c3_result *x = &r->last_r;
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
    repl_print(r, 0, "seed %llu, %dx%d, %d frame%s, %d steps, guidance %g, shift %g, schedule %s",
               (unsigned long long)x->seed, x->width, x->height, x->frames, x->frames == 1 ? "" : "s", x->steps,
               x->guidance, x->shift, x->schedule);
    for (int i = 0; i < x->npaths && i < 3; i++) repl_print(r, 0, "wrote %s", x->paths[i]);
    if (x->npaths > 3) repl_print(r, 0, "... %d files", x->npaths);
    repl_print(r, 0,
               "seconds: tokenize %.3f, und %.3f, denoise %.3f (%.3f s/step: cond %.3f, uncond %.3f), vae %.3f, "
               "write %.3f, total %.3f",
               x->t_tokenize, x->t_und, x->t_denoise, x->t_step_mean, x->t_cond_mean, x->t_uncond_mean, x->t_vae,
               x->t_write, x->t_total);
    c3_bytes_text(x->mem_peak, a, sizeof a);
    repl_print(r, 0, "memory peak (rank 0): %s; prompt tokens cond %d, uncond %d", a, x->L_cond, x->L_uncond);
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
    {"image", "FILE", "continue this picture (PNG) in the next prompts (image-to-video)", cmd_image,
     COMPLETE_PATH},
    {"video", "FILE|DIR", "continue this clip of PNG frames in the next prompts (video-to-video)",
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

/* ------------------------------------------------------------ session */

void repl_init(c3_repl *r, const c3_settings *s) {
    memset(r, 0, sizeof *r);
    monitor_init(&r->mon);
    settings_copy(&r->s, s);
    r->ev = events_new(4096);
    pipeline_model_dir(&r->s, r->model_dir, sizeof r->model_dir);
    repl_history_path(r->hist_path, sizeof r->hist_path);
    history_load(r);
}

void repl_free(c3_repl *r) {
    if (r->task.live) {
        repl_cancel(r);
        while (r->task.live)
            repl_pump(r, NULL, 0.1);
    }
    if (r->e) engine_close(r->e);
    if (r->e_next) engine_close(r->e_next);
    free(r->prev_model);
    events_free(r->ev);
    settings_free(&r->s);
    settings_free(&r->job_s);
    settings_free(&r->last_s);
    result_free(&r->job_r);
    result_free(&r->last_r);
    for (int i = 0; i < r->nhist; i++) free(r->hist[i]);
    free(r->hist);
    free(r->run_prompt);
    free(r->last_png);
    free(r->last_img);
    free(r->job_img);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------ the prompt loop */

static c3_repl *volatile g_repl;
static volatile sig_atomic_t g_sigint, g_exit130;
static volatile double g_last_sigint;

bool repl_second_ctrl_c(volatile double *last) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    bool twice = *last > 0 && now - *last < DOUBLE_CTRL_C_S;
    *last = now;
    return twice;
}

static void on_sigint(int sig) {
    (void)sig;
    if (repl_second_ctrl_c(&g_last_sigint)) g_exit130 = 1;
    g_sigint = 1;
    c3_repl *r = g_repl;
    if (r && r->job == REPL_RUNNING && r->e) engine_cancel(r->e);
}

static void progress(c3_repl *r, bool tty) {
    if (!tty || r->mon.step < 1) return;
    double el = c3_now() - r->mon.t_first_step;
    double per = el / r->mon.step;
    const c3_mon_step *s = &r->mon.st[r->mon.step];
    fprintf(stderr, "\r\033[Kstep %d/%d  %.2f s/step  ETA %.0fs  cond %.2fs  uncond ", r->mon.step,
            r->mon.steps, s->seconds, per * (r->mon.steps - r->mon.step), s->cond_s);
    if (s->uncond_group >= 0)
        fprintf(stderr, "%.2fs", s->uncond_s);
    else
        fputc('-', stderr);
    fflush(stderr);
}

/* Wait for the worker, drawing the progress line; Ctrl-C cancels. */
static void wait_job(c3_repl *r) {
    bool tty = isatty(2);
    int shown = 0;
    while (r->job != REPL_IDLE) {
        c3_event x;
        if (g_exit130) break;
        if (!repl_pump(r, &x, 0.1)) continue;
        if (x.kind == EV_STEP_END) {
            progress(r, tty);
            shown = tty;
        }
        if (x.kind == EV_FINISHED) break;
        if (x.kind == EV_LOG) repl_print(r, 2, "%s", x.text); /* the engine's notes and warnings */
        /* repl_pump printed the outcome; the newline goes before it */
    }
    (void)shown;
}

static void show_preview(c3_repl *r, int serial_before) {
    if (r->image_serial == serial_before || !r->last_img || r->term.kind == C3_PREVIEW_OFF) return;
    fflush(stdout);
    if (preview_show_rgb(r->last_img, r->last_img_w, r->last_img_h, &r->term, 1) != COSMOS3_OK)
        repl_print(r, 1, "preview: %s", c3_errmsg());
}

/* Progress lines end with \r; the next message needs a fresh line. */
static void sink_plain(void *ctx, int level, const char *line) {
    (void)ctx;
    if (isatty(2)) fputs("\r\033[K", stderr);
    if (level == 1)
        fprintf(stderr, "cosmos3: %s\n", line);
    else if (level == 2)
        fprintf(stderr, "%s\n", line);
    else {
        printf("%s\n", line);
        fflush(stdout);
    }
}

static int run_line(c3_repl *r, const char *line) {
    int serial = r->image_serial;
    g_sigint = 0;
    int rc = repl_exec(r, line);
    if (r->job != REPL_IDLE) {
        wait_job(r);
        if (r->job == REPL_IDLE && r->last_rc) rc = r->last_rc;
    }
    show_preview(r, serial);
    return rc;
}

#ifdef COSMOS3_HAVE_TUI
static c3_repl *g_rl_repl;
static bool g_rl_line_done;

/* readline's generator over repl_complete(); the TUI's input line uses it too. */
char *repl_rl_generator(const char *text, int state) {
    static char **cands;
    static int idx;
    if (!state) {
        if (cands)
            for (int i = 0; cands[i]; i++) free(cands[i]);
        free(cands);
        bool path;
        cands = repl_complete(rl_line_buffer, rl_point - (int)strlen(text), text, &path);
        idx = 0;
        if (!cands) return NULL;
    }
    if (!cands || !cands[idx]) return NULL;
    return strdup(cands[idx++]);
}

static char **rl_complete_hook(const char *text, int start, int end) {
    (void)end;
    bool path;
    char **c = repl_complete(rl_line_buffer, start, text, &path);
    if (path) {
        rl_attempted_completion_over = 0; /* readline's file names */
        return NULL;
    }
    for (int i = 0; c && c[i]; i++) free(c[i]);
    free(c);
    rl_attempted_completion_over = 1;
    return rl_completion_matches(text, repl_rl_generator);
}

static void on_line(char *line) {
    c3_repl *r = g_rl_repl;
    g_rl_line_done = true;
    if (!line) { /* Ctrl-D */
        r->quit = true;
        printf("\n");
        return;
    }
    repl_history_add(r, line);
    rl_callback_handler_remove();
    run_line(r, line);
    free(line);
    if (!g_exit130) g_sigint = 0; /* the Ctrl-C that cancelled the run is spent */
    if (!r->quit && !g_exit130) rl_callback_handler_install(REPL_PROMPT, on_line);
}

static int loop_readline(c3_repl *r) {
    g_rl_repl = r;
    rl_catch_signals = 0;
    rl_readline_name = "cosmos3";
    rl_attempted_completion_function = rl_complete_hook;
    rl_completer_word_break_characters = " \t";
    rl_callback_handler_install(REPL_PROMPT, on_line);
    bool hinted = false;
    while (!r->quit && !g_exit130) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int k = poll(&p, 1, POLL_MS);
        if (g_sigint) {
            g_sigint = 0;
            if (g_exit130) break; /* twice within a second */
            /* a half-typed line is dropped, an empty one stays: like a shell */
            rl_replace_line("", 0);
            printf("^C\n");
            if (!hinted) printf("(Ctrl-D or quit leaves; Ctrl-C twice within a second exits)\n");
            hinted = true;
            rl_on_new_line();
            rl_redisplay();
        }
        if (k > 0 && (p.revents & (POLLIN | POLLHUP))) rl_callback_read_char();
    }
    rl_callback_handler_remove();
    return g_exit130 ? COSMOS3_ECANCEL : COSMOS3_OK;
}
#endif

static int loop_plain(c3_repl *r, bool interactive) {
    char *line = NULL;
    size_t cap = 0;
    while (!r->quit && !g_exit130) {
        if (interactive) {
            fputs(REPL_PROMPT, stdout);
            fflush(stdout);
        }
        g_sigint = 0;
        errno = 0;
        ssize_t k = getline(&line, &cap, stdin);
        if (k < 0) {
            if (errno == EINTR && interactive && !g_exit130) { /* Ctrl-C at the prompt: a new one */
                clearerr(stdin);
                fputs("^C\n", stdout);
                continue;
            }
            break;
        }
        if (k && line[k - 1] == '\n') line[k - 1] = 0;
        if (interactive) repl_history_add(r, line);
        run_line(r, line);
    }
    free(line);
    if (g_exit130) return COSMOS3_ECANCEL;
    return interactive ? COSMOS3_OK : r->status;
}

int repl_main(c3_settings *s, char **pos, int npos) {
    if (npos)
        return c3_fail(COSMOS3_EUSAGE, "repl: unexpected argument '%s'; type prompts at the prompt",
                       pos[0]);
    c3_repl *r = xmalloc(sizeof *r);
    repl_init(r, s);
    r->interactive = isatty(0);
    r->sink = sink_plain;
    g_repl = r;
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: getline returns on Ctrl-C */
    preview_probe(r->s.preview, 0, 1, 0.3, &r->term);
    if (r->interactive)
        repl_print(r, 2, "cosmos3 %s: loading %s ... (help lists the commands)", COSMOS3_VERSION, r->model_dir);
    /* a script stops when the model cannot load (main prints the message);
     * an interactive session prints it and still takes `load DIR` */
    r->quiet_load_error = !r->interactive;
    int rc = repl_load_start(r);
    if (rc == COSMOS3_OK) {
        wait_job(r);
        rc = r->e ? COSMOS3_OK : r->job_rc;
    }
    r->quiet_load_error = false;
    if (rc && !g_exit130 && !r->interactive) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", r->job_err[0] ? r->job_err : c3_errmsg());
        g_repl = NULL;
        repl_free(r);
        free(r);
        return c3_fail(rc, "%s", msg);
    }
    r->status = 0;
#ifdef COSMOS3_HAVE_TUI
    if (r->interactive && !g_exit130)
        rc = loop_readline(r);
    else
#endif
        rc = g_exit130 ? COSMOS3_ECANCEL : loop_plain(r, r->interactive);
    if (g_exit130) {
        repl_cancel(r);
        rc = COSMOS3_ECANCEL;
    }
    g_repl = NULL;
    repl_free(r);
    free(r);
    if (rc == COSMOS3_ECANCEL) return COSMOS3_ECANCEL;
    if (rc) return c3_fail(rc, "the last failing line ended with status %d", rc);
    return COSMOS3_OK;
}
