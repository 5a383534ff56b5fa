/* preview.c - sixel and half-block previews of finished images. */
#include "preview.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "png_io.h"
#include "config.h"

#ifdef COSMOS3_HAVE_SIXEL
#include <sixel.h>
#endif

#define DA1_QUERY "\033[c"
#define TMUX_DA1_QUERY "\033Ptmux;\033\033[c\033\\"
#define DA1_SIXEL_ATTR 4
#define SIXEL_COLORS 256
#define PREVIEW_HEIGHT_NUM 3 /* images take at most 3/4 of the terminal's height */
#define PREVIEW_HEIGHT_DEN 4
#define REPLY_MAX 256

/* the ASCII ramp for NO_COLOR, dark to light */
static const char ascii_ramp[] = " .:-=+*#%@";

const char *preview_kind_name(c3_preview_kind k) {
    switch (k) {
    case C3_PREVIEW_SIXEL: return "sixel";
    case C3_PREVIEW_BLOCKS: return "blocks";
    default: return "off";
    }
}

bool preview_have_sixel(void) {
#ifdef COSMOS3_HAVE_SIXEL
    return true;
#else
    return false;
#endif
}

/* ----------------------------------------------------------- detection */

bool preview_da1_sixel(const char *reply, size_t n) {
    for (size_t i = 0; i + 2 < n; i++) {
        if (reply[i] != '\033' || reply[i + 1] != '[' || reply[i + 2] != '?') continue;
        /* parameters up to 'c' */
        size_t j = i + 3;
        long v = 0;
        bool digits = false;
        for (; j < n; j++) {
            char ch = reply[j];
            if (ch >= '0' && ch <= '9') {
                v = v * 10 + (ch - '0');
                digits = true;
            } else if (ch == ';' || ch == 'c') {
                if (digits && v == DA1_SIXEL_ATTR) return true;
                v = 0;
                digits = false;
                if (ch == 'c') break;
            } else {
                break;
            }
        }
    }
    return false;
}

/* Send a query and collect the reply up to a final 'c' after ESC [ ?. */
static size_t ask(int in_fd, int out_fd, const char *q, double timeout, char *buf, size_t cap) {
    size_t n = 0;
    if (write(out_fd, q, strlen(q)) != (ssize_t)strlen(q)) return 0;
    double end = c3_now() + timeout;
    for (;;) {
        double left = end - c3_now();
        if (left <= 0) break;
        struct pollfd p = {.fd = in_fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            break;
        }
        ssize_t k = read(in_fd, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        const char *s = strstr(buf, "\033[?");
        if (s && strchr(s, 'c')) break;
        if (n + 1 >= cap) break;
    }
    buf[n] = 0;
    return n;
}

/* The bytes of a probe's read that are not the terminal's reply (ESC [ ?
 * ... c) are keys typed meanwhile: kept in t->typed. */
static void keep_typed(c3_term *t, const char *buf, size_t n) {
    const char *rs = NULL, *re = NULL;
    for (size_t i = 0; i + 2 < n && !rs; i++)
        if (buf[i] == '\033' && buf[i + 1] == '[' && buf[i + 2] == '?') rs = buf + i;
    if (rs) {
        re = memchr(rs, 'c', n - (size_t)(rs - buf));
        re = re ? re + 1 : buf + n;
    }
    for (size_t i = 0; i < n; i++) {
        if (rs && buf + i >= rs && buf + i < re) continue;
        if (t->ntyped < (int)sizeof t->typed) t->typed[t->ntyped++] = buf[i];
    }
}

static void term_size(int fd, c3_term *t) {
    struct winsize ws;
    t->cols = 80;
    t->rows = 24;
    t->px_w = t->px_h = 0;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
        t->cols = ws.ws_col;
        t->rows = ws.ws_row;
        t->px_w = ws.ws_xpixel;
        t->px_h = ws.ws_ypixel;
    }
}

void preview_probe(const char *setting, int in_fd, int out_fd, double timeout, c3_term *t) {
    memset(t, 0, sizeof *t);
    const char *nc = getenv("NO_COLOR");
    t->color = !(nc && *nc);
    term_size(out_fd, t);
    bool tmux = getenv("TMUX") && *getenv("TMUX");
    if (!setting) setting = "auto";
    if (!strcmp(setting, "off") || !isatty(out_fd)) {
        t->kind = C3_PREVIEW_OFF;
        return;
    }
    if (!strcmp(setting, "blocks")) {
        t->kind = C3_PREVIEW_BLOCKS;
        return;
    }
    if (!strcmp(setting, "sixel")) {
        t->kind = preview_have_sixel() ? C3_PREVIEW_SIXEL : C3_PREVIEW_BLOCKS;
        t->tmux_wrap = tmux;
        return;
    }
    t->kind = C3_PREVIEW_BLOCKS;
    if (!preview_have_sixel() || !isatty(in_fd)) return;
    struct termios old, raw;
    if (tcgetattr(in_fd, &old) != 0) return;
    raw = old;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(in_fd, TCSANOW, &raw) != 0) return;
    char buf[REPLY_MAX];
    size_t n = ask(in_fd, out_fd, DA1_QUERY, timeout, buf, sizeof buf);
    keep_typed(t, buf, n);
    if (preview_da1_sixel(buf, n)) {
        t->kind = C3_PREVIEW_SIXEL;
    } else if (tmux) {
        n = ask(in_fd, out_fd, TMUX_DA1_QUERY, timeout, buf, sizeof buf);
        keep_typed(t, buf, n);
        if (preview_da1_sixel(buf, n)) {
            t->kind = C3_PREVIEW_SIXEL;
            t->tmux_wrap = true;
        }
    }
    tcsetattr(in_fd, TCSANOW, &old);
}

/* -------------------------------------------------------------- sizing */

void preview_fit(int W, int H, int bw, int bh, int *w, int *h) {
    if (W < 1) W = 1;
    if (H < 1) H = 1;
    if (bw < 1) bw = 1;
    if (bh < 1) bh = 1;
    /* scale = min(bw/W, bh/H), computed without floating error at the edges */
    if ((int64_t)bw * H <= (int64_t)bh * W) {
        *w = bw;
        *h = (int)(((int64_t)H * bw + W / 2) / W);
    } else {
        *h = bh;
        *w = (int)(((int64_t)W * bh + H / 2) / H);
    }
    if (*w < 1) *w = 1;
    if (*h < 1) *h = 1;
}

void preview_resize(const uint8_t *src, int W, int H, uint8_t *dst, int w, int h) {
    for (int y = 0; y < h; y++) {
        int y0 = (int)((int64_t)y * H / h), y1 = (int)((int64_t)(y + 1) * H / h);
        if (y1 <= y0) y1 = y0 + 1;
        for (int x = 0; x < w; x++) {
            int x0 = (int)((int64_t)x * W / w), x1 = (int)((int64_t)(x + 1) * W / w);
            if (x1 <= x0) x1 = x0 + 1;
            uint32_t acc[3] = {0, 0, 0};
            for (int yy = y0; yy < y1; yy++)
                for (int xx = x0; xx < x1; xx++)
                    for (int c = 0; c < 3; c++) acc[c] += src[((size_t)yy * W + xx) * 3 + c];
            uint32_t cnt = (uint32_t)((y1 - y0) * (x1 - x0));
            for (int c = 0; c < 3; c++) dst[((size_t)y * w + x) * 3 + c] = (uint8_t)((acc[c] + cnt / 2) / cnt);
        }
    }
}

/* -------------------------------------------------------------- render */

char *preview_tmux_wrap(const char *s, size_t n, size_t *out_n) {
    static const char head[] = "\033Ptmux;", tail[] = "\033\\";
    size_t esc = 0;
    for (size_t i = 0; i < n; i++) esc += s[i] == '\033';
    size_t cap = sizeof head - 1 + n + esc + sizeof tail;
    char *o = xmalloc(cap), *p = o;
    memcpy(p, head, sizeof head - 1);
    p += sizeof head - 1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\033') *p++ = '\033';
        *p++ = s[i];
    }
    memcpy(p, tail, sizeof tail - 1);
    p += sizeof tail - 1;
    *p = 0;
    *out_n = (size_t)(p - o);
    return o;
}

#ifdef COSMOS3_HAVE_SIXEL
static int sixel_sink(char *data, int size, void *priv) {
    FILE *f = priv;
    return fwrite(data, 1, (size_t)size, f) == (size_t)size ? 0 : -1;
}
#endif

int preview_sixel(const uint8_t *rgb, int w, int h, bool tmux_wrap, char **out, size_t *n) {
    *out = NULL;
    *n = 0;
#ifdef COSMOS3_HAVE_SIXEL
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return c3_fail(COSMOS3_EFAIL, "preview: open_memstream: %s", strerror(errno));
    sixel_output_t *o = NULL;
    sixel_dither_t *d = NULL;
    /* libsixel does not change the pixels it is given, but its API is not const */
    unsigned char *px = xmalloc((size_t)w * h * 3);
    memcpy(px, rgb, (size_t)w * h * 3);
    SIXELSTATUS st = sixel_output_new(&o, sixel_sink, f, NULL);
    if (!SIXEL_FAILED(st)) st = sixel_dither_new(&d, SIXEL_COLORS, NULL);
    if (!SIXEL_FAILED(st))
        st = sixel_dither_initialize(d, px, w, h, SIXEL_PIXELFORMAT_RGB888, SIXEL_LARGE_AUTO, SIXEL_REP_AUTO,
                                     SIXEL_QUALITY_HIGH);
    if (!SIXEL_FAILED(st)) st = sixel_encode(px, w, h, 3, d, o);
    if (d) sixel_dither_unref(d);
    if (o) sixel_output_unref(o);
    free(px);
    fclose(f);
    if (SIXEL_FAILED(st)) {
        free(buf);
        return c3_fail(COSMOS3_EFAIL,
                       "preview: libsixel could not encode a %dx%d image (status 0x%x)", w, h,
                       (unsigned)st);
    }
    if (tmux_wrap) {
        *out = preview_tmux_wrap(buf, len, n);
        free(buf);
    } else {
        *out = buf;
        *n = len;
    }
    return COSMOS3_OK;
#else
    (void)rgb;
    (void)w;
    (void)h;
    (void)tmux_wrap;
    return c3_fail(COSMOS3_EFAIL,
                   "this cosmos3 was built without libsixel; use 'set preview blocks'");
#endif
}

int preview_blocks(const uint8_t *rgb, int w, int h, bool color, char **out, size_t *n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return c3_fail(COSMOS3_EFAIL, "preview: open_memstream: %s", strerror(errno));
    const int nramp = (int)sizeof ascii_ramp - 1;
    /* NO_COLOR: the picture's own luma range stretched over the whole ramp,
       so that two colours of near luma (red on blue) still differ */
    int lo = 255, hi = 0;
    for (size_t i = 0; !color && i < (size_t)w * h; i++) {
        int l = (299 * rgb[3 * i] + 587 * rgb[3 * i + 1] + 114 * rgb[3 * i + 2]) / 1000;
        lo = l < lo ? l : lo;
        hi = l > hi ? l : hi;
    }
    int span = hi - lo < 1 ? 1 : hi - lo;
    for (int y = 0; y < h; y += 2) {
        for (int x = 0; x < w; x++) {
            const uint8_t *a = rgb + ((size_t)y * w + x) * 3;
            const uint8_t *b = y + 1 < h ? rgb + ((size_t)(y + 1) * w + x) * 3 : NULL;
            if (color) {
                if (b)
                    fprintf(f, "\033[38;2;%d;%d;%dm\033[48;2;%d;%d;%dm\xe2\x96\x80", a[0], a[1], a[2], b[0], b[1],
                            b[2]);
                else /* odd last row: upper half only, default background */
                    fprintf(f, "\033[38;2;%d;%d;%dm\033[49m\xe2\x96\x80", a[0], a[1], a[2]);
            } else {
                /* Rec. 601 luma of the cell's mean */
                int la = (299 * a[0] + 587 * a[1] + 114 * a[2]) / 1000;
                int lb = b ? (299 * b[0] + 587 * b[1] + 114 * b[2]) / 1000 : la;
                int l = ((la + lb) / 2 - lo) * 255 / span;
                l = l < 0 ? 0 : l > 255 ? 255 : l;
                fputc(ascii_ramp[l * nramp / 256], f);
            }
        }
        fputs(color ? "\033[0m\n" : "\n", f);
    }
    fclose(f);
    *out = buf;
    *n = len;
    return COSMOS3_OK;
}

/* ---------------------------------------------------------------- show */

static int write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return c3_fail(COSMOS3_EOUTPUT, "preview: write: %s", strerror(errno));
        }
        s += k;
        n -= (size_t)k;
    }
    return COSMOS3_OK;
}

int preview_show_rgb(const uint8_t *rgb, int W, int H, const c3_term *t, int fd) {
    if (t->kind == C3_PREVIEW_OFF) return COSMOS3_OK;
    int rows = t->rows * PREVIEW_HEIGHT_NUM / PREVIEW_HEIGHT_DEN;
    if (rows < 1) rows = 1;
    int w, h;
    char *txt = NULL;
    size_t n = 0;
    int rc;
    if (t->kind == C3_PREVIEW_SIXEL) {
        int pw = t->px_w > 0 ? t->px_w : t->cols * C3_CELL_W_PX;
        int cell_h = t->px_h > 0 && t->rows > 0 ? t->px_h / t->rows : C3_CELL_H_PX;
        preview_fit(W, H, pw, rows * cell_h, &w, &h);
    } else {
        preview_fit(W, H, t->cols, rows * 2, &w, &h);
    }
    uint8_t *px = xmalloc((size_t)w * h * 3);
    preview_resize(rgb, W, H, px, w, h);
    if (t->kind == C3_PREVIEW_SIXEL)
        rc = preview_sixel(px, w, h, t->tmux_wrap, &txt, &n);
    else
        rc = preview_blocks(px, w, h, t->color, &txt, &n);
    free(px);
    if (rc == COSMOS3_OK) {
        rc = write_all(fd, txt, n);
        if (rc == COSMOS3_OK && t->kind == C3_PREVIEW_SIXEL) rc = write_all(fd, "\n", 1);
    }
    free(txt);
    return rc;
}
