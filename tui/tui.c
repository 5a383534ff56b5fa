/* tui.c - the live dashboard: devices, the run, CFG branch timings, a log,
 * the finished image and an input line, on one ncurses screen. */
#include "tui/tui.h"

#include "config.h"

#ifndef COSMOS3_HAVE_TUI

int tui_main(c3_settings *s, char **pos, int npos) {
    (void)s;
    (void)pos;
    (void)npos;
    return c3_fail(C3_EUSAGE,
                   "this cosmos3 was built without ncurses and readline; install libncurses-dev and "
                   "libreadline-dev and rebuild, or use 'cosmos3 repl'");
}

#else

#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "plan.h"
#include "png_io.h"
#include "repl.h"

/* ------------------------------------------------------------ constants */

#define FRAME_S 0.1            /* input timeout = the loop's only sleep */
#define DRIVER_POLL_S 1.0      /* driver memory refresh */
#define LOG_KEEP 500           /* log lines kept */
#define BRANCH_ROWS_MAX 4      /* steps shown in the CFG panel */
#define MIN_IMG_COLS 24        /* the image pane needs this many columns */
#define ESC_DELAY_MS 25
#define KEY_ESC 27
#define KEY_CTRL_D 4

enum { PAIR_TITLE = 1, PAIR_ERR, PAIR_W, PAIR_KV, PAIR_ACT, PAIR_OTHER, PAIR_OK, PAIR_DIM, PAIR_FIRST_IMG };

typedef struct {
    int level;
    char *text;
} log_line;

typedef struct {
    c3_repl r;
    /* terminal */
    bool color, utf8, sixel;
    c3_term term;
    WINDOW *w_top, *w_log, *w_img, *w_keys, *w_in;
    int top_h, img_w;
    /* log */
    log_line log[LOG_KEEP];
    int nlog;
    /* image */
    uint8_t *img;
    int img_W, img_H, img_serial;
    bool show_img, sixel_due;
    int img_pairs_used;
    short pair_of[512];   /* fg*? : cache for 8-colour terminals */
    /* input */
    bool input_mode;
    bool input_dirty;
    /* driver view, refreshed by collection */
    double t_driver;
    /* frame */
    bool relayout, dirty;
    int exit_code;
    bool quit;
} tui;

static tui *g_tui;
static volatile sig_atomic_t g_sigint, g_exit130, g_term;
static volatile double g_last_sigint;

/* --------------------------------------------------------------- log */

static void log_add(tui *t, int level, const char *line) {
    if (t->nlog == LOG_KEEP) {
        free(t->log[0].text);
        memmove(t->log, t->log + 1, (LOG_KEEP - 1) * sizeof(log_line));
        t->nlog--;
    }
    t->log[t->nlog++] = (log_line){level, xstrdup(line)};
    t->dirty = true;
}

static void sink_log(void *ctx, int level, const char *line) { log_add(ctx, level, line); }

/* ---------------------------------------------------------- collection */

/* Everything the frame shows comes from here: the engine's events through
 * the REPL pump, the driver's free memory, the finished image. */
static void tui_collect(tui *t) {
    c3_event x;
    while (repl_pump(&t->r, &x, 0)) {
        t->dirty = true;
        if (x.kind == EV_ERROR) log_add(t, 1, x.text);
        if (x.kind == EV_CANCELLED) log_add(t, 2, "generation cancelled");
    }
    double now = c3_now();
    if (now - t->t_driver >= DRIVER_POLL_S) {
        t->t_driver = now;
        const cosmos3_layout *p = t->r.e ? engine_layout(t->r.e) : NULL;
        for (int k = 0; k < t->r.nranks; k++) {
            c3_repl_dev *d = &t->r.dev[k];
            if (!d->valid) continue;
            if (p && !strcmp(p->device, "cuda")) {
                int64_t tot, fr;
                if (cosmos3_device_memory(d->device, &fr, &tot) == COSMOS3_OK) {
                    d->dev_total = tot;
                    d->dev_free = fr;
                    d->driver_valid = true;
                }
            } else {
                d->dev_total = (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
                d->dev_free = (int64_t)sysconf(_SC_AVPHYS_PAGES) * sysconf(_SC_PAGESIZE);
                d->driver_valid = d->dev_total > 0;
            }
        }
        t->dirty = true;
    }
    if (t->r.image_serial != t->img_serial && t->r.last_img) {
        t->img_serial = t->r.image_serial;
        free(t->img);
        /* the REPL's preview: the picture, or a video's first / middle / last frames */
        t->img_W = t->r.last_img_w;
        t->img_H = t->r.last_img_h;
        t->img = xmalloc((size_t)t->img_W * t->img_H * 3);
        memcpy(t->img, t->r.last_img, (size_t)t->img_W * t->img_H * 3);
        t->sixel_due = true;
        t->dirty = true;
    }
}

/* ------------------------------------------------------------- drawing */

static void style_on(tui *t, WINDOW *w, int pair, int extra) {
    if (t->color) wattron(w, COLOR_PAIR(pair));
    if (extra) wattron(w, extra);
}
static void style_off(tui *t, WINDOW *w, int pair, int extra) {
    if (t->color) wattroff(w, COLOR_PAIR(pair));
    if (extra) wattroff(w, extra);
}

/* A bar of `width` cells split into segments (bytes) of a total. */
static void draw_bar(tui *t, WINDOW *w, int width, const int64_t *seg, const int *pairs, const char *glyphs,
                     int nseg, int64_t total) {
    waddch(w, '[');
    int used = 0;
    for (int i = 0; i < nseg && total > 0; i++) {
        int cells = (int)((double)seg[i] / (double)total * width + 0.5);
        if (seg[i] > 0 && cells == 0) cells = 1;
        if (used + cells > width) cells = width - used;
        style_on(t, w, pairs[i], A_BOLD);
        for (int c = 0; c < cells; c++) waddch(w, (chtype)(unsigned char)glyphs[i]);
        style_off(t, w, pairs[i], A_BOLD);
        used += cells;
    }
    for (; used < width; used++) waddch(w, '.');
    waddch(w, ']');
}

static int draw_devices(tui *t, WINDOW *w, int y) {
    const c3_repl *r = &t->r;
    int cols = getmaxx(w);
    const cosmos3_layout *p = r->e ? engine_layout(r->e) : NULL;
    if (r->nranks == 0) {
        mvwprintw(w, y++, 0, "devices: %s", r->job == REPL_LOADING ? "loading the model ..." : "N/A (no model)");
        return y;
    }
    char a[32], b[32], c[32], d[32], e[32];
    for (int k = 0; k < r->nranks; k++) {
        const c3_repl_dev *dv = &r->dev[k];
        if (!dv->valid) continue;
        /* ranks on the same device share one panel line: show each rank */
        int64_t ours = dv->bytes[0] + dv->bytes[1] + dv->bytes[2];
        int64_t total = dv->driver_valid ? dv->dev_total : ours;
        int64_t other = dv->driver_valid ? total - dv->dev_free - ours : 0;
        if (other < 0) other = 0;
        wmove(w, y, 0);
        style_on(t, w, PAIR_TITLE, A_BOLD);
        if (p && !strcmp(p->device, "cuda"))
            wprintw(w, "GPU %d", dv->device);
        else
            wprintw(w, "CPU");
        style_off(t, w, PAIR_TITLE, A_BOLD);
        wprintw(w, " %-.24s rank %d ", dv->name, k);
        int bw = cols - getcurx(w) - 40;
        if (bw > 50) bw = 50;
        if (bw >= 8) {
            int64_t seg[4] = {dv->bytes[0], dv->bytes[1], dv->bytes[2], other};
            int pairs[4] = {PAIR_W, PAIR_KV, PAIR_ACT, PAIR_OTHER};
            draw_bar(t, w, bw, seg, pairs, "WKA-", 4, total);
        }
        c3_bytes_text(dv->driver_valid ? total - dv->dev_free : ours, a, sizeof a);
        c3_bytes_text(total, b, sizeof b);
        wprintw(w, " %s / %s", a, b);
        y++;
        c3_bytes_text(dv->bytes[0], a, sizeof a);
        c3_bytes_text(dv->bytes[1], b, sizeof b);
        c3_bytes_text(dv->bytes[2], c, sizeof c);
        if (dv->driver_valid)
            c3_bytes_text(dv->dev_free, d, sizeof d);
        else
            snprintf(d, sizeof d, "N/A");
        mvwprintw(w, y, 2, "weights %s  K/V %s  activations %s  free %s (driver)", a, b, c, d);
        if (p) {
            c3_bytes_text(p->kv, e, sizeof e);
            c3_bytes_text(p->act, c, sizeof c);
            if (getcurx(w) + 34 < cols) wprintw(w, "  plan: K/V ~%s act ~%s", e, c);
        }
        y++;
    }
    return y;
}

static void sparkline(tui *t, WINDOW *w, int width) {
    const c3_repl *r = &t->r;
    static const char *bars[] = {"\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                 "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88"};
    static const char ascii[] = "_.-=+*#@";
    int n = r->step;
    int from = n > width ? n - width + 1 : 1;
    double hi = 0;
    for (int i = from; i <= n; i++) hi = C3_MAX(hi, r->st[i].seconds);
    for (int i = from; i <= n; i++) {
        int k = hi > 0 ? (int)(r->st[i].seconds / hi * 7.0 + 0.5) : 0;
        if (t->utf8)
            waddstr(w, bars[k]);
        else
            waddch(w, (chtype)ascii[k]);
    }
}

static int draw_run(tui *t, WINDOW *w, int y) {
    const c3_repl *r = &t->r;
    int cols = getmaxx(w);
    const cosmos3_layout *p = r->e ? engine_layout(r->e) : NULL;
    mvwprintw(w, y++, 0, "prompt: %.*s", cols - 9, r->run_prompt ? r->run_prompt : "(type : then a prompt)");
    if (p) {
        wmove(w, y++, 0);
        wprintw(w, "layout: tp %d x cfg %d x ulysses %d = %d rank%s on %s;", p->tp, p->cfg_parallel, p->ulysses, p->world,
                p->world == 1 ? "" : "s", !strcmp(p->device, "cuda") ? "cuda" : "cpu");
        if (p->cfg_parallel == 2) {
            int g = p->tp * p->ulysses;
            wprintw(w, " cond: ranks 0-%d, uncond: ranks %d-%d", g - 1, g, 2 * g - 1);
        } else {
            wprintw(w, " cond and uncond in turn on ranks 0-%d", p->world - 1);
        }
    } else {
        mvwprintw(w, y++, 0, "layout: N/A");
    }
    /* progress */
    int steps = r->steps > 0 ? r->steps : 0, step = r->step;
    double per = 0, eta = 0;
    if (step > 0) {
        double sum = 0;
        for (int i = 1; i <= step; i++) sum += r->st[i].seconds;
        per = sum / step;
        eta = per * (steps - step);
    }
    wmove(w, y++, 0);
    int bw = cols - 46;
    if (bw > 60) bw = 60;
    if (bw >= 10 && steps > 0) {
        int64_t seg[1] = {step};
        int pairs[1] = {PAIR_OK};
        draw_bar(t, w, bw, seg, pairs, "#", 1, steps);
    }
    const char *state = r->job == REPL_LOADING ? "loading" : r->job == REPL_RUNNING ? "running" : "idle";
    wprintw(w, " %d/%d steps  %.3f s/step  ETA %.0fs  %s", step, steps, per, eta, state);
    wmove(w, y++, 0);
    wprintw(w, "step times: ");
    sparkline(t, w, cols - 14);
    return y;
}

static int draw_branches(tui *t, WINDOW *w, int y, int rows) {
    const c3_repl *r = &t->r;
    const cosmos3_layout *p = r->e ? engine_layout(r->e) : NULL;
    style_on(t, w, PAIR_TITLE, A_BOLD);
    mvwprintw(w, y++, 0, "CFG branches (%s)", p && p->cfg_parallel == 2 ? "in parallel on two groups" : "in sequence");
    style_off(t, w, PAIR_TITLE, A_BOLD);
    int from = r->step - rows + 1;
    if (from < 1) from = 1;
    for (int i = from; i <= r->step; i++) {
        const c3_repl_step *s = &r->st[i];
        wmove(w, y++, 0);
        wprintw(w, "step %3d: cond %.3fs", i, s->cond_s);
        if (s->cond_group >= 0) wprintw(w, " (group %d)", s->cond_group);
        if (s->uncond_group >= 0)
            wprintw(w, "  uncond %.3fs (group %d)", s->uncond_s, s->uncond_group);
        else
            wprintw(w, "  uncond -");
        wprintw(w, "  gather+combine %.3fs", s->combine_s);
    }
    if (r->step == 0) mvwprintw(w, y++, 0, "(no steps yet)");
    return y;
}

static void draw_top(tui *t) {
    WINDOW *w = t->w_top;
    werase(w);
    int cols = getmaxx(w);
    style_on(t, w, PAIR_TITLE, A_REVERSE);
    mvwhline(w, 0, 0, ' ', cols);
    mvwprintw(w, 0, 0, " cosmos3 tui  %s", t->r.e ? engine_model(t->r.e)->id : t->r.model_dir);
    style_off(t, w, PAIR_TITLE, A_REVERSE);
    int y = draw_devices(t, w, 1);
    y = draw_run(t, w, y);
    int left = getmaxy(w) - y - 1;
    if (left > 0) draw_branches(t, w, y, C3_MIN(left, BRANCH_ROWS_MAX));
    wnoutrefresh(w);
}

static void draw_log(tui *t) {
    WINDOW *w = t->w_log;
    werase(w);
    int h = getmaxy(w), cols = getmaxx(w);
    int from = t->nlog > h ? t->nlog - h : 0;
    for (int i = from, y = 0; i < t->nlog; i++, y++) {
        int pair = t->log[i].level == 1 ? PAIR_ERR : t->log[i].level == 2 ? PAIR_DIM : 0;
        if (pair) style_on(t, w, pair, t->log[i].level == 1 ? A_BOLD : 0);
        mvwaddnstr(w, y, 0, t->log[i].text, cols - 1);
        if (pair) style_off(t, w, pair, t->log[i].level == 1 ? A_BOLD : 0);
    }
    wnoutrefresh(w);
}

/* Nearest colour: the xterm 256-colour cube (16..231) or the 8 basic ones. */
static short nearest_color(const uint8_t *c) {
    if (COLORS >= 256) {
        int q[3];
        for (int i = 0; i < 3; i++) q[i] = c[i] < 48 ? 0 : c[i] < 115 ? 1 : (c[i] - 35) / 40;
        return (short)(16 + 36 * q[0] + 6 * q[1] + q[2]);
    }
    return (short)((c[0] > 127 ? 1 : 0) | (c[1] > 127 ? 2 : 0) | (c[2] > 127 ? 4 : 0));
}

static int pair_for(tui *t, short fg, short bg) {
    /* pairs are allocated on first use and cached in a small open table */
    static short cache_fg[4096], cache_bg[4096];
    static int cache_pair[4096];
    unsigned h = ((unsigned)fg * 257u + (unsigned)bg) % 4096u;
    for (int probe = 0; probe < 4096; probe++, h = (h + 1) % 4096u) {
        if (cache_pair[h] && cache_fg[h] == fg && cache_bg[h] == bg) return cache_pair[h];
        if (!cache_pair[h]) {
            int pair = PAIR_FIRST_IMG + t->img_pairs_used;
            if (pair >= COLOR_PAIRS || pair > 32767) return 0;
            if (init_pair((short)pair, fg, bg) == ERR) return 0;
            t->img_pairs_used++;
            cache_fg[h] = fg;
            cache_bg[h] = bg;
            cache_pair[h] = pair;
            return pair;
        }
    }
    return 0;
}

static void draw_image(tui *t) {
    WINDOW *w = t->w_img;
    if (!w) return;
    werase(w);
    int h = getmaxy(w), cols = getmaxx(w);
    if (!t->img) {
        mvwprintw(w, 0, 0, "(the finished image shows here)");
    } else if (t->sixel) {
        mvwprintw(w, 0, 0, "%.*s", cols, t->r.last_png);
    } else {
        mvwprintw(w, 0, 0, "%.*s", cols, t->r.last_png);
        int iw, ih;
        preview_fit(t->img_W, t->img_H, cols, (h - 1) * 2, &iw, &ih);
        uint8_t *px = xmalloc((size_t)iw * ih * 3);
        preview_resize(t->img, t->img_W, t->img_H, px, iw, ih);
        static const char ramp[] = " .:-=+*#%@";
        for (int y = 0; y < ih; y += 2)
            for (int x = 0; x < iw; x++) {
                const uint8_t *a = px + ((size_t)y * iw + x) * 3;
                const uint8_t *b = y + 1 < ih ? px + ((size_t)(y + 1) * iw + x) * 3 : a;
                wmove(w, 1 + y / 2, x);
                if (t->color) {
                    int pair = pair_for(t, nearest_color(a), nearest_color(b));
                    wattron(w, COLOR_PAIR(pair));
                    if (t->utf8)
                        waddstr(w, "\xe2\x96\x80");
                    else
                        waddch(w, ' ');
                    wattroff(w, COLOR_PAIR(pair));
                } else {
                    int l = ((299 * a[0] + 587 * a[1] + 114 * a[2]) + (299 * b[0] + 587 * b[1] + 114 * b[2])) / 2000;
                    waddch(w, (chtype)ramp[l * 10 / 256]);
                }
            }
        free(px);
    }
    wnoutrefresh(w);
}

static void draw_keys(tui *t) {
    WINDOW *w = t->w_keys;
    werase(w);
    style_on(t, w, PAIR_DIM, A_REVERSE);
    mvwhline(w, 0, 0, ' ', getmaxx(w));
    if (t->input_mode)
        mvwprintw(w, 0, 0, " typing: Enter runs the line, Tab completes, Esc leaves the input line, Ctrl-C cancels");
    else
        mvwprintw(w, 0, 0, " keys: : or Enter type a prompt or command   p preview %s   c cancel   q quit",
                  t->show_img ? "on" : "off");
    style_off(t, w, PAIR_DIM, A_REVERSE);
    wnoutrefresh(w);
}

static void draw_input(tui *t) {
    WINDOW *w = t->w_in;
    werase(w);
    int cols = getmaxx(w);
    const char *line = rl_line_buffer ? rl_line_buffer : "";
    int plen = (int)strlen(REPL_PROMPT);
    int point = t->input_mode ? rl_point : 0;
    int off = point + plen >= cols ? point + plen - cols + 1 : 0;
    mvwaddstr(w, 0, 0, REPL_PROMPT);
    if (t->input_mode) mvwaddnstr(w, 0, plen, line + off, cols - plen - 1);
    wmove(w, 0, plen + point - off);
    wnoutrefresh(w);
}

/* The one frame: stage every window, one doupdate, then the sixel image. */
static void tui_draw(tui *t) {
    draw_top(t);
    draw_log(t);
    if (t->show_img) draw_image(t);
    draw_keys(t);
    draw_input(t);
    curs_set(t->input_mode ? 1 : 0);
    doupdate();
    if (t->sixel && t->sixel_due && t->show_img && t->img && t->w_img) {
        int by, bx;
        getbegyx(t->w_img, by, bx);
        int cols = getmaxx(t->w_img), h = getmaxy(t->w_img) - 1;
        c3_term tt = t->term;
        tt.cols = cols;
        tt.rows = h * 4 / 3; /* preview_show_rgb takes 3/4 of the rows */
        tt.px_w = t->term.px_w > 0 ? t->term.px_w * cols / COLS : 0;
        tt.px_h = t->term.px_h > 0 ? t->term.px_h * tt.rows / LINES : 0;
        printf("\0337\033[%d;%dH", by + 2, bx + 1);
        fflush(stdout);
        preview_show_rgb(t->img, t->img_W, t->img_H, &tt, 1);
        printf("\0338");
        fflush(stdout);
        t->sixel_due = false;
    }
    t->dirty = false;
    t->input_dirty = false;
}

/* ------------------------------------------------------------- layout */

static void del_windows(tui *t) {
    WINDOW **ws[] = {&t->w_top, &t->w_log, &t->w_img, &t->w_keys, &t->w_in};
    for (size_t i = 0; i < C3_ARRAY_LEN(ws); i++)
        if (*ws[i]) {
            delwin(*ws[i]);
            *ws[i] = NULL;
        }
}

static void tui_layout(tui *t) {
    del_windows(t);
    int rows = LINES, cols = COLS;
    int ndev = t->r.nranks > 0 ? t->r.nranks : 1;
    int want_top = 1 + 2 * ndev + 4 + 1 + BRANCH_ROWS_MAX;
    int top = C3_MIN(want_top, rows - 4);
    if (top < 1) top = 1;
    t->top_h = top;
    int body = rows - top - 2;
    if (body < 1) body = 1;
    t->img_w = t->show_img && cols >= 2 * MIN_IMG_COLS ? cols / 2 : 0;
    t->w_top = newwin(top, cols, 0, 0);
    t->w_log = newwin(body, cols - t->img_w, top, 0);
    if (t->img_w) t->w_img = newwin(body, t->img_w - 1, top, cols - t->img_w + 1);
    t->w_keys = newwin(1, cols, rows - 2, 0);
    t->w_in = newwin(1, cols, rows - 1, 0);
    keypad(t->w_in, TRUE);
    wtimeout(t->w_in, (int)(FRAME_S * 1000));
    clearok(curscr, TRUE);
    t->relayout = false;
    t->dirty = true;
    t->sixel_due = true;
}

/* ------------------------------------------------- readline in curses */

static int rl_char;
static bool rl_avail;

static int tui_rl_getc(FILE *f) {
    (void)f;
    rl_avail = false;
    return rl_char;
}
static int tui_rl_avail(void) { return rl_avail; }
static void tui_rl_redisplay(void) {
    if (g_tui) g_tui->input_dirty = true;
}
static void tui_rl_prep(int meta) { (void)meta; }
static void tui_rl_deprep(void) {}

static void tui_rl_matches(char **matches, int n, int max) {
    (void)max;
    if (!g_tui) return;
    char buf[1024];
    size_t k = (size_t)snprintf(buf, sizeof buf, "completions:");
    for (int i = 1; i <= n && k < sizeof buf - 2; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, " %s", matches[i]);
    log_add(g_tui, 2, buf);
}

static char **tui_rl_complete(const char *text, int start, int end) {
    (void)end;
    bool path;
    char **c = repl_complete(rl_line_buffer, start, text, &path);
    for (int i = 0; c && c[i]; i++) free(c[i]);
    free(c);
    if (path) {
        rl_attempted_completion_over = 0;
        return NULL;
    }
    rl_attempted_completion_over = 1;
    return rl_completion_matches(text, repl_rl_generator);
}

static void tui_on_line(char *line) {
    tui *t = g_tui;
    if (!line) {
        t->input_mode = false;
        return;
    }
    repl_history_add(&t->r, line);
    log_add(t, 0, "");
    char echo[600];
    snprintf(echo, sizeof echo, "%s%s", REPL_PROMPT, line);
    log_add(t, 2, echo);
    repl_exec(&t->r, line);
    free(line);
    if (t->r.quit) t->quit = true;
    t->input_mode = false;
    t->relayout = true; /* a load may change the number of devices */
}

static void feed(const char *bytes) {
    for (const char *p = bytes; *p; p++) {
        rl_char = (unsigned char)*p;
        rl_avail = true;
        rl_callback_read_char();
    }
}

static void key_input(tui *t, int ch) {
    char one[2] = {0, 0};
    switch (ch) {
    case KEY_ESC:
        t->input_mode = false;
        return;
    case KEY_UP: feed("\033[A"); return;
    case KEY_DOWN: feed("\033[B"); return;
    case KEY_RIGHT: feed("\033[C"); return;
    case KEY_LEFT: feed("\033[D"); return;
    case KEY_HOME: feed("\001"); return;
    case KEY_END: feed("\005"); return;
    case KEY_DC: feed("\004"); return;
    case KEY_BACKSPACE:
    case 127:
    case 8: feed("\177"); return;
    case KEY_ENTER: feed("\n"); return;
    default:
        if (ch >= 0 && ch < 256) {
            one[0] = (char)ch;
            if (ch == KEY_CTRL_D && rl_end == 0) { /* Ctrl-D on an empty line leaves the input */
                t->input_mode = false;
                return;
            }
            feed(one);
        }
    }
}

static void key_command(tui *t, int ch) {
    switch (ch) {
    case 'q': t->quit = true; break;
    case 'c':
        if (t->r.job == REPL_RUNNING) {
            repl_cancel(&t->r);
            log_add(t, 2, "cancelling ...");
        }
        break;
    case 'p':
        t->show_img = !t->show_img;
        t->relayout = true;
        break;
    case ':':
    case '\n':
    case '\r':
    case KEY_ENTER:
    case 'i':
        t->input_mode = true;
        break;
    default: break;
    }
    t->dirty = true;
}

/* ------------------------------------------------------------- signals */

static void on_sigint(int sig) {
    (void)sig;
    if (repl_second_ctrl_c(&g_last_sigint)) g_exit130 = 1;
    g_sigint = 1;
    tui *t = g_tui;
    if (t && t->r.job == REPL_RUNNING && t->r.e) engine_cancel(t->r.e);
}

static void on_term(int sig) {
    (void)sig;
    g_term = 1;
}

static bool g_curses_on;
static void restore_terminal(void) {
    if (g_curses_on) {
        endwin();
        g_curses_on = false;
    }
}

/* ---------------------------------------------------------------- main */

int tui_main(c3_settings *s, char **pos, int npos) {
    if (npos) return c3_fail(C3_EUSAGE, "tui: unexpected argument '%s'; give the prompt with -p", pos[0]);
    if (!isatty(0) || !isatty(1))
        return c3_fail(C3_EUSAGE, "tui: needs a terminal on standard input and output; use 'cosmos3 repl' in scripts");
    tui *t = xcalloc(1, sizeof *t);
    g_tui = t;
    repl_init(&t->r, s);
    t->r.sink = sink_log;
    t->r.sink_ctx = t;
    t->r.interactive = true;
    t->show_img = strcmp(s->preview, "off") != 0;
    /* the terminal, before curses takes it */
    preview_probe(s->preview, 0, 1, 0.3, &t->term);
    t->sixel = t->term.kind == C3_PREVIEW_SIXEL;
    setlocale(LC_ALL, "");
    t->utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    const char *nc = getenv("NO_COLOR");
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction st = {.sa_handler = on_term};
    sigemptyset(&st.sa_mask);
    sigaction(SIGTERM, &st, NULL);
    sigaction(SIGHUP, &st, NULL);
    atexit(restore_terminal);
    if (!initscr()) {
        repl_free(&t->r);
        free(t);
        return c3_fail(C3_EFAIL, "tui: cannot initialise the terminal (is TERM set?)");
    }
    g_curses_on = true;
    cbreak(); /* Ctrl-C stays a signal */
    noecho();
    nonl();
    set_escdelay(ESC_DELAY_MS);
    t->color = has_colors() && !(nc && *nc);
    if (t->color) {
        start_color();
        use_default_colors();
        init_pair(PAIR_TITLE, COLOR_CYAN, -1);
        init_pair(PAIR_ERR, COLOR_RED, -1);
        init_pair(PAIR_W, COLOR_BLUE, -1);
        init_pair(PAIR_KV, COLOR_MAGENTA, -1);
        init_pair(PAIR_ACT, COLOR_YELLOW, -1);
        init_pair(PAIR_OTHER, COLOR_WHITE, -1);
        init_pair(PAIR_OK, COLOR_GREEN, -1);
        init_pair(PAIR_DIM, COLOR_WHITE, -1);
    }
    /* readline in callback mode, drawing through us */
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_readline_name = "cosmos3";
    rl_getc_function = tui_rl_getc;
    rl_input_available_hook = tui_rl_avail;
    rl_redisplay_function = tui_rl_redisplay;
    rl_prep_term_function = tui_rl_prep;
    rl_deprep_term_function = tui_rl_deprep;
    rl_completion_display_matches_hook = tui_rl_matches;
    rl_attempted_completion_function = tui_rl_complete;
    rl_completer_word_break_characters = " \t";
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull) rl_outstream = devnull;
    rl_callback_handler_install(REPL_PROMPT, tui_on_line);

    log_add(t, 2, "loading the model ...");
    if (repl_load_start(&t->r) != C3_OK) log_add(t, 1, c3_errmsg());
    bool start_prompt = s->prompt && *s->prompt;
    tui_layout(t);
    int loaded_ranks = -1;
    double t_frame = 0;
    while (!t->quit && !g_term && !g_exit130) {
        tui_collect(t);
        if (t->r.nranks != loaded_ranks) {
            loaded_ranks = t->r.nranks;
            t->relayout = true;
        }
        if (start_prompt && t->r.e && t->r.job == REPL_IDLE) {
            start_prompt = false;
            char echo[600];
            snprintf(echo, sizeof echo, "%s%s", REPL_PROMPT, s->prompt);
            log_add(t, 2, echo);
            repl_exec(&t->r, s->prompt);
        }
        if (t->relayout) tui_layout(t);
        double now = c3_now();
        if (t->dirty || t->input_dirty || now - t_frame >= FRAME_S) {
            tui_draw(t);
            t_frame = now;
        }
        int ch = wgetch(t->w_in); /* the loop's only wait */
        if (g_sigint) {
            g_sigint = 0;
            if (t->r.job == REPL_RUNNING) {
                log_add(t, 2, "cancelling (Ctrl-C again within a second quits) ...");
            } else if (t->input_mode && rl_end > 0) {
                rl_replace_line("", 0);
                t->input_dirty = true;
            } else {
                g_exit130 = 1;
            }
        }
        if (ch == ERR) continue;
        if (ch == KEY_RESIZE) {
            t->relayout = true;
            continue;
        }
        if (t->input_mode)
            key_input(t, ch);
        else
            key_command(t, ch);
    }
    rl_callback_handler_remove();
    restore_terminal();
    if (devnull) {
        rl_outstream = stdout;
        fclose(devnull);
    }
    int rc = g_exit130 ? C3_ECANCEL : C3_OK;
    if (g_exit130 || g_term) repl_cancel(&t->r);
    /* the last few log lines stay on the terminal after the screen closes */
    for (int i = t->nlog > 5 ? t->nlog - 5 : 0; i < t->nlog; i++)
        if (t->log[i].level == 1) fprintf(stderr, "cosmos3: %s\n", t->log[i].text);
    g_tui = NULL;
    del_windows(t);
    repl_free(&t->r);
    for (int i = 0; i < t->nlog; i++) free(t->log[i].text);
    free(t->img);
    free(t);
    return rc;
}

#endif
