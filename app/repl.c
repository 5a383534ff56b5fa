/* repl.c - the `cosmos3 > ` prompt's state: output to the sink, the
 * history file, the worker (a load or a run on a thread) and the event pump.
 * The commands are repl_commands.c's, the terminal repl_term.c's. */
#include "repl.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "media.h"
#include "output.h"
#include "repl_internal.h"
#include "wav.h"
#include "config.h"

#ifdef COSMOS3_HAVE_TUI
#include <readline/history.h>
#endif

#define HISTORY_KEEP 1000 /* lines kept in the history file */

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
void repl_print_stream(c3_repl *r, void (*fn)(FILE *, const void *), const void *arg) {
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
    return session_open(&r->e_next, &r->job_s, r->ev);
}

static int job_run(void *arg) {
    c3_repl *r = arg;
    int rc = session_generate(r->e, &r->job_s, &r->job_r);
    cosmos3_result *out = r->job_r.out;
    if (rc == COSMOS3_OK && out && out->rgb) { /* keep a preview, not every frame */
        media_strip(out->rgb, out->width, out->height, out->frames, &r->job_img, &r->job_img_w);
        r->job_img_h = out->height;
        free(out->rgb);
        out->rgb = NULL;
    }
    return rc;
}

int repl_start_job(c3_repl *r, bool load) {
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
    return repl_start_job(r, true);
}

void repl_cancel(c3_repl *r) {
    if (r->job == REPL_RUNNING && r->e) session_cancel(r->e);
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
        session_close(r->e);
        r->e = NULL;
        r->job_rc = session_open(&r->e_next, &r->job_s, r->ev);
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
            if (r->e) session_close(r->e);
            r->e = r->e_next;
            r->e_next = NULL;
            /* the new engine's ranks came with its EV_LOADED events, before this:
               kept, so that the devices show from the start (not after a first run) */
            int nr = r->mon.nranks;
            c3_mon_dev *keep = xmalloc(sizeof r->mon.dev);
            memcpy(keep, r->mon.dev, sizeof r->mon.dev);
            const cosmos3_layout *lay = session_layout(r->e);
            monitor_engine(&r->mon, lay);
            memcpy(r->mon.dev, keep, sizeof r->mon.dev);
            free(keep);
            r->mon.nranks = nr < lay->world ? nr : lay->world;
            free(r->prev_model);
            r->prev_model = NULL;
            r->load_seconds = c3_now() - r->job_t0;
            repl_print(r, 2, "loaded %s (%s, %.1f s)", session_model(r->e)->id, r->model_dir,
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
        const session_result *res = &r->last_r;
        char line[4096 + 128];
        if (result_wrote_line(res, line, sizeof line)) repl_print(r, 0, "%s", line);
        if (res->out && res->out->sound) { /* the level meter of the clip's sound */
            char lv[256];
            wav_level_line(res->out->sound, res->out->sound_channels, res->out->sound_samples,
                           res->out->sound_rate, lv, sizeof lv);
            repl_print(r, 0, "%s", lv);
        }
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
    if (r->e) session_close(r->e);
    if (r->e_next) session_close(r->e_next);
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

