/* tui.c - the live dashboard: devices, the run, CFG branch timings, a log,
 * the finished image and an input line, on one ncurses screen. */
#include "tui/tui.h"

#include "config.h"

#ifndef COSMOS3_HAVE_TUI

int tui_main(c3_settings *s, char **pos, int npos) {
    (void)s;
    (void)pos;
    (void)npos;
    return c3_fail(
        COSMOS3_EUSAGE,
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

#include "repl.h"
#include "precheck.h"

/* ------------------------------------------------------------ constants */

#define FRAME_S 0.1            /* input timeout = the loop's only sleep */
#define DRIVER_POLL_S 1.0      /* driver memory refresh */
#define LOG_KEEP 500           /* log lines kept */
#define BRANCH_ROWS_MAX 4      /* steps shown in the CFG panel */
#define MIN_IMG_COLS 24        /* the image pane needs this many columns */
#define ESC_DELAY_MS 25
#define KEY_ESC 27
#define KEY_CTRL_D 4
/* Dashboard actions sit on keys a prompt cannot contain: every key that can
 * be typed goes to the input line. */
#define KEY_PREVIEW KEY_F(2)
#define KEY_QUIT KEY_F(10)

/* Colours: only foregrounds, on the terminal's own background (-1), and none
 * for plain text, so light and dark terminals both read. */
enum { PAIR_ERR = 1, PAIR_W, PAIR_KV, PAIR_ACT, PAIR_OK, PAIR_FIRST_IMG };

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
    /* input: always live; a line entered while a job runs waits here */
    bool input_dirty;
    char *pending;
    bool ask_quit; /* "quit and lose the generation?" is on the key bar */
    int top_want;  /* rows the top panel used in the last frame */
    /* driver view, refreshed by collection */
    double t_driver;
    /* frame */
    bool relayout, dirty;
    int exit_code;
    bool quit;
    bool quit_cancelled; /* quit confirmed during a generation */
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
        /* a failure or a cancel is not logged: the REPL reports the job's outcome once
           ("cancelled; the model is still loaded") */
        /* the engine's notes and warnings */
        if (ev_is(&x, COSMOS3_EV_LOG) || ev_is(&x, COSMOS3_EV_DEVICE) || ev_is(&x, COSMOS3_EV_PLAN))
            log_add(t, 2, x.text);
        if (ev_is(&x, COSMOS3_EV_WARNING)) {
            char w[560];
            snprintf(w, sizeof w, "warning: %s", x.text);
            log_add(t, 2, w);
        }
    }
    double now = c3_now();
    if (now - t->t_driver >= DRIVER_POLL_S) { /* the driver's view between events */
        t->t_driver = now;
        monitor_poll(&t->r.mon);
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

/* Fields (texts that must not be cut) from column x of row y, separated by
 * sep, onto as many rows as they need: a field that does not fit the rest
 * of the row starts the next one, indented by 4. Returns the next row. */
static int put_fields(WINDOW *w, int y, int x, const char *sep, const char *const *fields, int n) {
    int cols = getmaxx(w), rows = getmaxy(w);
    int at = x;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(fields[i]), gap = at > x && at > 4 ? (int)strlen(sep) : 0;
        if (at > 4 && at + gap + len >= cols) {
            y++;
            at = 4;
            gap = 0;
        }
        if (y < rows) mvwprintw(w, y, at, "%s%.*s", gap ? sep : "", cols - at - gap - 1, fields[i]);
        at += gap + len;
    }
    return y + 1;
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
    const cosmos3_layout *p = r->e ? session_layout(r->e) : NULL;
    if (r->mon.nranks == 0) {
        mvwprintw(w, y++, 0, "devices: %s", r->job == REPL_LOADING ? "loading the model ..." : "N/A (no model)");
        return y;
    }
    char a[32], b[32], c[32], d[32], e[32];
    for (int k = 0; k < r->mon.nranks; k++) {
        const c3_mon_dev *dv = &r->mon.dev[k];
        if (!dv->valid) continue;
        /* ranks on the same device share one panel line: show each rank */
        int64_t ours = dv->bytes[0] + dv->bytes[1] + dv->bytes[2];
        int64_t total = dv->driver_valid ? dv->dev_total : ours;
        int64_t other = dv->driver_valid ? total - dv->dev_free - ours : 0;
        if (other < 0) other = 0;
        wmove(w, y, 0);
        wattron(w, A_BOLD);
        if (p && !strcmp(p->device, "cuda"))
            wprintw(w, "GPU %d", dv->device);
        else
            wprintw(w, "CPU");
        wattroff(w, A_BOLD);
        wprintw(w, " %-.24s rank %d ", dv->name, k);
        int bw = cols - getcurx(w) - 26;
        if (bw > 50) bw = 50;
        if (bw >= 8) {
            int64_t seg[4] = {dv->bytes[0], dv->bytes[1], dv->bytes[2], other};
            int pairs[4] = {PAIR_W, PAIR_KV, PAIR_ACT,
                            0}; /* other use: the terminal's own colour */
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
        char f[5][96];
        snprintf(f[0], sizeof f[0], "weights %s", a);
        snprintf(f[1], sizeof f[1], "K/V %s", b);
        snprintf(f[2], sizeof f[2], "activations %s", c);
        snprintf(f[3], sizeof f[3], "free %s (%s)", d,
                 p && !strcmp(p->device, "cuda") ? "driver" : "host");
        int nf = 4;
        if (p) {
            c3_bytes_text(p->kv, e, sizeof e);
            c3_bytes_text(p->act, c, sizeof c);
            snprintf(f[nf++], sizeof f[4], "plan: K/V ~%s act ~%s", e, c);
        }
        const char *fields[5];
        for (int i = 0; i < nf; i++)
            fields[i] = f[i];
        y = put_fields(w, y, 2, "  ", fields, nf);
    }
    return y;
}

static void sparkline(tui *t, WINDOW *w, int width) {
    const c3_repl *r = &t->r;
    static const char *bars[] = {"\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                 "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88"};
    static const char ascii[] = "_.-=+*#@";
    int n = r->mon.step;
    int from = n > width ? n - width + 1 : 1;
    double hi = 0;
    for (int i = from; i <= n; i++)
        hi = C3_MAX(hi, r->mon.st[i].seconds);
    for (int i = from; i <= n; i++) {
        int k = hi > 0 ? (int)(r->mon.st[i].seconds / hi * 7.0 + 0.5) : 0;
        if (t->utf8)
            waddstr(w, bars[k]);
        else
            waddch(w, (chtype)ascii[k]);
    }
}

static int draw_run(tui *t, WINDOW *w, int y) {
    const c3_repl *r = &t->r;
    int cols = getmaxx(w);
    const cosmos3_layout *p = r->e ? session_layout(r->e) : NULL;
    int plen = r->run_prompt ? (int)strlen(r->run_prompt) : 0;
    if (!r->run_prompt)
        mvwprintw(w, y++, 0, "prompt: (type one on the input line below and press Enter)");
    else if (plen <= cols - 9)
        mvwprintw(w, y++, 0, "prompt: %s", r->run_prompt);
    else /* the end of a long prompt is cut, and says so */
        mvwprintw(w, y++, 0, "prompt: %.*s...", cols - 12, r->run_prompt);
    if (p) {
        char f[2][160];
        snprintf(f[0], sizeof f[0], "layout: tp %d x cfg %d x ulysses %d = %d rank%s on %s;", p->tp,
                 p->cfg_parallel, p->ulysses, p->world, p->world == 1 ? "" : "s",
                 !strcmp(p->device, "cuda") ? "cuda" : "cpu");
        char ranks[32];
        if (p->world == 1)
            snprintf(ranks, sizeof ranks, "rank 0");
        else
            snprintf(ranks, sizeof ranks, "ranks 0-%d", p->world - 1);
        if (p->cfg_parallel == 2) {
            int g = p->tp * p->ulysses;
            snprintf(f[1], sizeof f[1], "cond: ranks 0-%d, uncond: ranks %d-%d", g - 1, g,
                     2 * g - 1);
        } else {
            snprintf(f[1], sizeof f[1], "cond and uncond %s on %s",
                     p->cfg_batch ? "as one batch" : "in turn", ranks);
        }
        const char *fields[2] = {f[0], f[1]};
        y = put_fields(w, y, 0, " ", fields, 2);
    } else {
        mvwprintw(w, y++, 0, "layout: N/A");
    }
    /* progress */
    int steps = r->mon.steps > 0 ? r->mon.steps : 0, step = r->mon.step;
    double per = 0, eta = 0;
    if (step > 0) {
        double sum = 0;
        for (int i = 1; i <= step; i++)
            sum += r->mon.st[i].seconds;
        per = sum / step;
        eta = per * (steps - step);
    }
    wmove(w, y++, 0);
    int bw = cols - 52; /* the numbers after the bar keep their room */
    if (bw > 60) bw = 60;
    if (bw >= 10 && steps > 0) {
        int64_t seg[1] = {step};
        int pairs[1] = {PAIR_OK};
        draw_bar(t, w, bw, seg, pairs, "#", 1, steps);
    }
    const char *state = r->job == REPL_LOADING ? "loading" : r->job == REPL_RUNNING ? "running" : "idle";
    wprintw(w, " %d/%d steps  %.3f s/step  ETA %.0fs  %s", step, steps, per, eta, state);
    if (r->mon.steps_cached) wprintw(w, "  %d cached", r->mon.steps_cached);
    wmove(w, y++, 0);
    wprintw(w, "step times: ");
    sparkline(t, w, cols - 14);
    return y;
}

static int draw_branches(tui *t, WINDOW *w, int y, int rows) {
    const c3_repl *r = &t->r;
    const cosmos3_layout *p = r->e ? session_layout(r->e) : NULL;
    wattron(w, A_BOLD);
    mvwprintw(w, y++, 0, "CFG branches (%s)",
              p && p->cfg_parallel == 2 ? "in parallel on two groups"
              : p && p->cfg_batch       ? "one batch"
                                        : "in sequence");
    wattroff(w, A_BOLD);
    int from = r->mon.step - rows + 1;
    if (from < 1) from = 1;
    for (int i = from; i <= r->mon.step; i++) {
        const c3_mon_step *s = &r->mon.st[i];
        wmove(w, y++, 0);
        wprintw(w, "step %3d: cond %.3fs", i, s->cond_s);
        if (s->cond_group >= 0) wprintw(w, " (group %d)", s->cond_group);
        if (s->uncond_group >= 0)
            wprintw(w, "  uncond %.3fs (group %d)", s->uncond_s, s->uncond_group);
        else
            wprintw(w, "  uncond -");
        wprintw(w, "  gather+combine %.3fs", s->combine_s);
        if (s->cached) wprintw(w, "  cached");
    }
    if (r->mon.step == 0) mvwprintw(w, y++, 0, "(no steps yet)");
    return y;
}

/* Steps in the CFG panel: fewer on a short terminal, for the log's sake. */
static int branch_rows(void) {
    return LINES >= 36 ? BRANCH_ROWS_MAX : LINES >= 28 ? 3 : 2;
}

static void draw_top(tui *t) {
    WINDOW *w = t->w_top;
    werase(w);
    int cols = getmaxx(w);
    wattron(w, A_REVERSE);
    mvwhline(w, 0, 0, ' ', cols);
    mvwprintw(w, 0, 0, " cosmos3 tui  %.*s", cols - 15,
              t->r.e ? session_model(t->r.e)->id : t->r.model_dir);
    wattroff(w, A_REVERSE);
    int y = draw_devices(t, w, 1);
    y = draw_run(t, w, y);
    /* the panel grows (or shrinks) to what it drew: the next layout fits it */
    int want = y + 1 + branch_rows() + 1;
    if (want != t->top_want) {
        t->top_want = want;
        t->relayout = true;
    }
    int left = getmaxy(w) - y - 1;
    if (left > 0) draw_branches(t, w, y, C3_MIN(left, branch_rows()));
    wnoutrefresh(w);
}

/* Where a log line of `len` bytes breaks into rows of `width`: at the last
 * blank that fits, else mid-word. Returns the bytes of the first row. */
static int wrap_at(const char *s, int len, int width) {
    if (len <= width) return len;
    for (int k = width; k > width / 2; k--)
        if (s[k] == ' ') return k;
    while (width > 1 && ((unsigned char)s[width] & 0xC0) == 0x80)
        width--; /* not inside a UTF-8 character */
    return width;
}

static int log_rows(const char *s, int width) {
    int rows = 0, len = (int)strlen(s);
    do {
        int k = wrap_at(s, len, width);
        s += k;
        len -= k;
        while (len > 0 && *s == ' ')
            s++, len--;
        rows++;
    } while (len > 0);
    return rows;
}

/* The newest lines that fit, each wrapped onto the rows it needs: a path or
 * a seed at the end of a line is never cut off. */
static void draw_log(tui *t) {
    WINDOW *w = t->w_log;
    werase(w);
    int h = getmaxy(w), width = getmaxx(w) - 1;
    if (width < 8) width = 8;
    int from = t->nlog, used = 0;
    while (from > 0 && used + log_rows(t->log[from - 1].text, width) <= h)
        used += log_rows(t->log[--from].text, width);
    for (int i = from, y = 0; i < t->nlog; i++) {
        bool err = t->log[i].level == 1;
        if (err) style_on(t, w, PAIR_ERR, A_BOLD);
        const char *s = t->log[i].text;
        int len = (int)strlen(s);
        do {
            int k = wrap_at(s, len, width);
            mvwaddnstr(w, y++, 0, s, k);
            s += k;
            len -= k;
            while (len > 0 && *s == ' ')
                s++, len--;
        } while (len > 0 && y < h);
        if (err) style_off(t, w, PAIR_ERR, A_BOLD);
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
        mvwprintw(w, 0, 0, "%.*s", cols, "(the image shows here)");
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
    int cols = getmaxx(w);
    wattron(w, A_REVERSE);
    mvwhline(w, 0, 0, ' ', cols);
    if (t->ask_quit)
        mvwprintw(w, 0, 0, " %.*s", cols - 2,
                  "A generation is running. Quit and lose it? y quits, any other key goes on");
    else if (t->pending)
        mvwprintw(w, 0, 0, " %.*s", cols - 2,
                  "1 line queued (runs next)  Ctrl-C cancels the run  F10 quit");
    else
        mvwprintw(w, 0, 0, " %.*s", cols - 2,
                  t->show_img
                      ? "Enter runs  Tab completes  Ctrl-C cancels  F2 preview on  F10 quit"
                      : "Enter runs  Tab completes  Ctrl-C cancels  F2 preview off  F10 quit");
    wattroff(w, A_REVERSE);
    wnoutrefresh(w);
}

static void draw_input(tui *t) {
    WINDOW *w = t->w_in;
    werase(w);
    int cols = getmaxx(w);
    const char *line = rl_line_buffer ? rl_line_buffer : "";
    int plen = (int)strlen(REPL_PROMPT);
    int point = rl_point;
    int off = point + plen >= cols ? point + plen - cols + 1 : 0;
    mvwaddstr(w, 0, 0, REPL_PROMPT);
    mvwaddnstr(w, 0, plen, line + off, cols - plen - 1);
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
    curs_set(1);
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
    int ndev = t->r.mon.nranks > 0 ? t->r.mon.nranks : 1;
    int want_top = t->top_want > 0 ? t->top_want : 1 + 2 * ndev + 4 + 1 + BRANCH_ROWS_MAX;
    int top = C3_MIN(want_top, rows - 6); /* the log keeps 4 rows */
    if (top < 1) top = 1;
    t->top_h = top;
    int body = rows - top - 2;
    if (body < 1) body = 1;
    /* the image takes half the width, but the log keeps 50 columns at 80 */
    t->img_w = t->show_img && cols >= 2 * MIN_IMG_COLS ? C3_MIN(cols / 2, cols - 50) : 0;
    if (t->img_w < MIN_IMG_COLS)
        t->img_w = t->show_img && cols >= 2 * MIN_IMG_COLS ? MIN_IMG_COLS : 0;
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

static bool is_quit_line(const char *line) {
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = strcspn(line, " \t");
    return (n == 4 && (!strncmp(line, "quit", 4) || !strncmp(line, "exit", 4))) &&
           !line[n + strspn(line + n, " \t")];
}

/* Quit now when idle; with a generation in flight, ask on the key bar. */
static void want_quit(tui *t) {
    if (t->r.job == REPL_RUNNING)
        t->ask_quit = true;
    else
        t->quit = true;
    t->dirty = true;
}

static void run_input(tui *t, const char *line) {
    log_add(t, 0, "");
    char echo[600];
    snprintf(echo, sizeof echo, "%s%s", REPL_PROMPT, line);
    log_add(t, 2, echo);
    repl_exec(&t->r, line);
    if (t->r.quit) t->quit = true;
    t->relayout = true; /* a load may change the number of devices */
}

static void tui_on_line(char *line) {
    tui *t = g_tui;
    if (!line) return; /* Ctrl-D: handled as a key */
    repl_history_add(&t->r, line);
    if (is_quit_line(line)) {
        want_quit(t);
    } else if (t->r.job != REPL_IDLE || t->pending) {
        /* typed while the model loads or a generation runs: kept, run next */
        if (t->pending) {
            log_add(t, 1, "one line is already queued; this one is back on the input line");
            rl_replace_line(line, 0);
            rl_point = rl_end;
        } else {
            t->pending = xstrdup(line);
            char note[600];
            snprintf(note, sizeof note, "queued (runs when the %s): %s",
                     t->r.job == REPL_LOADING ? "model has loaded" : "generation ends", line);
            log_add(t, 2, note);
        }
    } else {
        run_input(t, line);
    }
    free(line);
    t->input_dirty = true;
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
    if (t->ask_quit) { /* the question on the key bar takes this key */
        t->ask_quit = false;
        t->dirty = true;
        if (ch == 'y' || ch == 'Y') {
            t->quit = true;
            t->quit_cancelled = true;
        } else {
            log_add(t, 2, "not quitting; the generation goes on");
        }
        return;
    }
    switch (ch) {
    case KEY_QUIT:
        want_quit(t);
        return;
    case KEY_PREVIEW:
        t->show_img = !t->show_img;
        t->relayout = true;
        return;
    case KEY_ESC:
        return; /* a lone Esc would become readline's Meta prefix */
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
            if (ch == KEY_CTRL_D &&
                rl_end == 0) { /* Ctrl-D on an empty line quits, as in a shell */
                want_quit(t);
                return;
            }
            feed(one);
        }
    }
}

/* ------------------------------------------------------------- signals */

static void on_sigint(int sig) {
    (void)sig;
    if (repl_second_ctrl_c(&g_last_sigint)) g_exit130 = 1;
    g_sigint = 1;
    tui *t = g_tui;
    if (t && t->r.job == REPL_RUNNING && t->r.e) session_cancel(t->r.e);
}

static void on_term(int sig) {
    g_term = sig; /* SIGTERM or SIGHUP */
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
    if (npos)
        return c3_fail(COSMOS3_EUSAGE, "tui: unexpected argument '%s'; give the prompt with -p",
                       pos[0]);
    if (!isatty(0) || !isatty(1))
        return c3_fail(
            COSMOS3_EUSAGE,
            "tui: needs a terminal on standard input and output; use 'cosmos3 repl' in scripts");
    APP_TRY(precheck_session(s)); /* before the model loads and curses takes the screen */
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
        return c3_fail(COSMOS3_EFAIL, "tui: cannot initialise the terminal (is TERM set?)");
    }
    g_curses_on = true;
    /* keys typed while the terminal was probed go first (ungetch is a stack) */
    for (int i = t->term.ntyped - 1; i >= 0; i--)
        ungetch((unsigned char)t->term.typed[i]);
    cbreak(); /* Ctrl-C stays a signal */
    noecho();
    nonl();
    set_escdelay(ESC_DELAY_MS);
    t->color = has_colors() && !(nc && *nc);
    if (t->color) {
        start_color();
        use_default_colors();
        init_pair(PAIR_ERR, COLOR_RED, -1);
        init_pair(PAIR_W, COLOR_BLUE, -1);
        init_pair(PAIR_KV, COLOR_MAGENTA, -1);
        init_pair(PAIR_ACT, COLOR_CYAN, -1);
        init_pair(PAIR_OK, COLOR_GREEN, -1);
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
    if (repl_load_start(&t->r) != COSMOS3_OK) log_add(t, 1, c3_errmsg());
    bool start_prompt = s->prompt && *s->prompt;
    tui_layout(t);
    int loaded_ranks = -1;
    double t_frame = 0;
    while (!t->quit && !g_term && !g_exit130) {
        tui_collect(t);
        if (t->r.mon.nranks != loaded_ranks) {
            loaded_ranks = t->r.mon.nranks;
            t->relayout = true;
        }
        if (start_prompt && t->r.e && t->r.job == REPL_IDLE) {
            start_prompt = false;
            char echo[600];
            snprintf(echo, sizeof echo, "%s%s", REPL_PROMPT, s->prompt);
            log_add(t, 2, echo);
            repl_exec(&t->r, s->prompt);
        }
        if (t->pending && !start_prompt && t->r.job == REPL_IDLE) {
            char *line = t->pending;
            t->pending = NULL;
            run_input(t, line);
            free(line);
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
            if (t->pending) { /* Ctrl-C stops the queue too; the line is not lost */
                if (rl_end == 0) {
                    rl_replace_line(t->pending, 0);
                    rl_point = rl_end;
                    log_add(t, 2, "the queued line is back on the input line");
                } else {
                    log_add(t, 2, "the queued line is not run (Up recalls it)");
                }
                free(t->pending);
                t->pending = NULL;
            } else if (t->r.job != REPL_RUNNING &&
                       rl_end > 0) { /* a half-typed line: dropped, as in a shell */
                rl_replace_line("", 0);
                rl_point = 0;
            }
            if (t->r.job == REPL_RUNNING) {
                log_add(t, 2, "cancelling (Ctrl-C again within a second quits) ...");
            } else if (!g_exit130 && rl_end == 0) {
                log_add(t, 2, "nothing to cancel; F10 or Ctrl-D on an empty line quits");
            }
            t->input_dirty = true;
        }
        if (ch == ERR) continue;
        if (ch == KEY_RESIZE) {
            t->relayout = true;
            continue;
        }
        key_input(t, ch);
    }
    rl_callback_handler_remove();
    restore_terminal();
    if (devnull) {
        rl_outstream = stdout;
        fclose(devnull);
    }
    int rc = g_exit130 || t->quit_cancelled ? COSMOS3_ECANCEL : COSMOS3_OK;
    bool busy = t->r.job != REPL_IDLE; /* a signal that stops a job is not a success */
    if (g_exit130 || g_term || t->quit_cancelled) repl_cancel(&t->r);
    free(t->pending);
    /* a session that never had a model: why, on the terminal after the screen
       closes (an error the log showed while the model ran was seen there) */
    if (!t->r.e)
        for (int i = t->nlog > 5 ? t->nlog - 5 : 0; i < t->nlog; i++)
            if (t->log[i].level == 1) fprintf(stderr, "cosmos3: %s\n", t->log[i].text);
    g_tui = NULL;
    del_windows(t);
    repl_free(&t->r);
    for (int i = 0; i < t->nlog; i++) free(t->log[i].text);
    free(t->img);
    free(t);
    if (g_term &&
        busy) { /* as gen: the signal's own status (143 for SIGTERM), the screen restored */
        signal(g_term, SIG_DFL);
        raise(g_term);
    }
    return rc;
}

#endif
