/* repl_term.c - the prompt on a terminal: Ctrl-C, the progress line while
 * a run goes, previews, readline (or plain lines from a pipe) and
 * repl_main. */
#include "repl.h"
#include "precheck.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "config.h"

#ifdef COSMOS3_HAVE_TUI
#include <readline/history.h>
#include <readline/readline.h>
#endif

#define DOUBLE_CTRL_C_S 1.0 /* two Ctrl-C within this many seconds exit */
#define POLL_MS 100         /* the prompt loop's only wait */

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
    if (r && r->job == REPL_RUNNING && r->e) session_cancel(r->e);
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
    if (r->mon.steps_cached) /* the step cache: this step's state, the run's count */
        fprintf(stderr, "  %s (%d cached)", s->cached ? "cached" : "computed",
                r->mon.steps_cached);
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
        if (ev_is(&x, COSMOS3_EV_STEP)) {
            progress(r, tty);
            shown = tty;
        }
        if (x.kind == EV_FINISHED) break;
        /* the engine's notes and warnings */
        if (ev_is(&x, COSMOS3_EV_LOG) || ev_is(&x, COSMOS3_EV_DEVICE) || ev_is(&x, COSMOS3_EV_PLAN))
            repl_print(r, 2, "%s", x.text);
        if (ev_is(&x, COSMOS3_EV_WARNING)) repl_print(r, 2, "warning: %s", x.text);
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
    APP_TRY(precheck_session(s)); /* before the model loads */
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
