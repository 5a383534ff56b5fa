/* test_preview.c - terminal previews: DA1 parsing, fitting, area resize,
 * half-blocks parsed back to colours, and sixel decoded back to pixels by an
 * independent decoder here, including the whole path through a fake sixel
 * terminal (a pty whose master answers DA1 like xterm -ti vt340 would, and,
 * for $TMUX, only through tmux's passthrough). */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "preview.h"
#include "test_util.h"
#include "config.h"
#ifdef COSMOS3_HAVE_SIXEL
#include <sixel.h>
#endif

/* ------------------------------------------------ a small sixel decoder */

typedef struct {
    int w, h;
    uint8_t *rgb; /* [h, w, 3] */
} image;

static int num(const char **p, const char *end) {
    int v = 0;
    while (*p < end && **p >= '0' && **p <= '9') v = v * 10 + (*(*p)++ - '0');
    return v;
}

/* Decode one DCS sixel string (ESC P ... q ... ESC \). Returns 0 on success. */
static int sx_decode(const char *s, size_t n, image *img) {
    const char *p = s, *end = s + n;
    const char *q = NULL;
    if (n < 3 || p[0] != '\033' || p[1] != 'P') return -1;
    for (const char *k = p + 2; k < end; k++)
        if (*k == 'q') {
            q = k + 1;
            break;
        } else if (!((*k >= '0' && *k <= '9') || *k == ';')) {
            return -1;
        }
    if (!q) return -1;
    p = q;
    uint8_t pal[256][3] = {{0}};
    int cur = 0, x = 0, y = 0;
    img->w = img->h = 0;
    img->rgb = NULL;
    int cap_w = 0, cap_h = 0;
    for (;;) {
        if (p >= end) return -1; /* no ST */
        char ch = *p;
        if (ch == '\033') {
            if (p + 1 < end && p[1] == '\\') break;
            return -1;
        }
        if (ch == '"') {
            p++;
            int v[4] = {0};
            for (int i = 0; i < 4; i++) {
                v[i] = num(&p, end);
                if (p < end && *p == ';') p++;
            }
            cap_w = v[2];
            cap_h = v[3];
            img->rgb = calloc((size_t)cap_w * cap_h * 3, 1);
            img->w = cap_w;
            img->h = cap_h;
            continue;
        }
        if (ch == '#') {
            p++;
            int c = num(&p, end);
            if (p < end && *p == ';') {
                p++;
                int u = num(&p, end);
                int v[3];
                for (int i = 0; i < 3; i++) {
                    if (p < end && *p == ';') p++;
                    v[i] = num(&p, end);
                }
                if (u != 2 || c < 0 || c > 255) return -2; /* only RGB percent */
                for (int i = 0; i < 3; i++) pal[c][i] = (uint8_t)((v[i] * 255 + 50) / 100);
            }
            cur = c;
            continue;
        }
        int rep = 1;
        if (ch == '!') {
            p++;
            rep = num(&p, end);
            if (p >= end) return -1;
            ch = *p;
        }
        p++;
        if (ch == '$') {
            x = 0;
        } else if (ch == '-') {
            x = 0;
            y += 6;
        } else if (ch >= '?' && ch <= '~') {
            int bits = ch - '?';
            for (int r = 0; r < rep; r++, x++)
                for (int b = 0; b < 6; b++)
                    if (bits & (1 << b)) {
                        int yy = y + b;
                        if (x >= cap_w || yy >= cap_h) return -3; /* outside the raster */
                        memcpy(img->rgb + ((size_t)yy * cap_w + x) * 3, pal[cur], 3);
                    }
        } else if (ch == '\n' || ch == '\r') {
            /* ignored */
        } else {
            return -4;
        }
    }
    return img->rgb ? 0 : -5;
}

/* Strip a tmux passthrough envelope (ESC P tmux; ... ESC \ with ESC doubled). */
static char *tmux_unwrap(const char *s, size_t n, size_t *out_n) {
    const char head[] = "\033Ptmux;";
    if (n < sizeof head + 1 || memcmp(s, head, sizeof head - 1) != 0) return NULL;
    char *o = malloc(n), *w = o;
    for (size_t i = sizeof head - 1; i + 2 < n; i++) {
        if (s[i] == '\033') i++; /* the doubled ESC */
        *w++ = s[i];
    }
    *out_n = (size_t)(w - o);
    return o;
}

/* Compare decoded pixels with the source. */
static void cmp_img(const char *what, const image *img, const uint8_t *ref, int w, int h, int max_tol,
                    double mean_tol) {
    T_CHECK(img->w == w && img->h == h, "%s: decoded %dx%d, want %dx%d", what, img->w, img->h, w, h);
    if (img->w != w || img->h != h) return;
    int worst = 0;
    double sum = 0;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        int d = abs((int)img->rgb[i] - (int)ref[i]);
        worst = d > worst ? d : worst;
        sum += d;
    }
    double mean = sum / ((double)w * h * 3);
    T_CHECK(worst <= max_tol, "%s: max |diff| %d > %d", what, worst, max_tol);
    T_CHECK(mean <= mean_tol, "%s: mean |diff| %.2f > %.2f", what, mean, mean_tol);
    fprintf(stderr, "%s: %dx%d, max |diff| %d, mean %.3f\n", what, w, h, worst, mean);
}

/* Six flat colours in bands. libsixel 1.10 builds its palette from a 5-bit
 * per channel histogram (255 -> 248), and the sixel colour registers are
 * percent (2.55 per step): a flat colour may move by up to 7 + 1.3, so the
 * tolerance is 10 per channel. (Its histogram also samples pixels, so
 * images of a few pixels lose colours; previews are fitted to the terminal
 * width and are never that small.) */
#define SIXEL_TOL 10
static uint8_t *bands(int w, int h) {
    static const uint8_t cols[6][3] = {{255, 0, 0}, {0, 200, 0}, {10, 20, 240}, {255, 255, 255}, {0, 0, 0},
                                       {128, 64, 32}};
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) memcpy(p + ((size_t)y * w + x) * 3, cols[(x * 3 / w) + 3 * (y * 2 / h)], 3);
    return p;
}

static uint8_t *gradient(int w, int h) {
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(x * 255 / (w - 1));
            q[1] = (uint8_t)(y * 255 / (h - 1));
            q[2] = (uint8_t)((x + y) * 255 / (w + h - 2));
        }
    return p;
}

/* Our decoder must agree with libsixel's own decoder on what we emitted. */
static void same_as_libsixel(const char *what, const char *txt, size_t n, const image *mine) {
#ifdef COSMOS3_HAVE_SIXEL
    unsigned char *idx = NULL, *pal = NULL;
    int w = 0, h = 0, nc = 0;
    SIXELSTATUS st = sixel_decode_raw((unsigned char *)txt, (int)n, &idx, &w, &h, &pal, &nc, NULL);
    T_CHECK(!SIXEL_FAILED(st), "%s: libsixel cannot decode our sixel", what);
    if (SIXEL_FAILED(st)) return;
    T_CHECK(w == mine->w && h == mine->h, "%s: libsixel decodes %dx%d, we %dx%d", what, w, h, mine->w, mine->h);
    int diff = 0;
    for (int i = 0; w == mine->w && h == mine->h && i < w * h; i++)
        for (int c = 0; c < 3; c++) diff += abs((int)pal[idx[i] * 3 + c] - (int)mine->rgb[i * 3 + c]) > 1;
    T_CHECK(diff == 0, "%s: %d channels differ between libsixel's decoder and ours", what, diff);
    free(idx);
    free(pal);
#else
    (void)what, (void)txt, (void)n, (void)mine;
#endif
}

/* ------------------------------------------------------ a fake terminal */

typedef struct {
    int master;
    bool answer_plain;  /* reply with sixel to a plain DA1 */
    bool answer_tmux;   /* reply with sixel to the tmux-passthrough DA1 */
    char *got;          /* everything the program wrote */
    size_t n, cap;
    volatile int stop;
} fake_term;

static void *fake_main(void *arg) {
    fake_term *ft = arg;
    size_t scanned = 0;
    while (!ft->stop) {
        char buf[4096];
        ssize_t k = read(ft->master, buf, sizeof buf);
        if (k <= 0) {
            if (k < 0 && errno == EAGAIN) {
                usleep(2000);
                continue;
            }
            break;
        }
        if (ft->n + (size_t)k + 1 > ft->cap) {
            ft->cap = (ft->n + (size_t)k + 1) * 2;
            ft->got = realloc(ft->got, ft->cap);
        }
        memcpy(ft->got + ft->n, buf, (size_t)k);
        ft->n += (size_t)k;
        ft->got[ft->n] = 0;
        /* answer the queries seen so far, in order */
        for (;;) {
            char *plain = strstr(ft->got + scanned, "\033[c");
            char *tm = strstr(ft->got + scanned, "\033Ptmux;\033\033[c\033\\");
            if (!plain && !tm) break;
            const char *reply;
            if (tm && (!plain || tm < plain)) {
                reply = ft->answer_tmux ? "\033[?62;4;9;22c" : NULL; /* silent when passthrough is off */
                scanned = (size_t)(tm - ft->got) + strlen("\033Ptmux;\033\033[c\033\\");
            } else {
                reply = ft->answer_plain ? "\033[?62;4;9;22c" : "\033[?1;2c";
                scanned = (size_t)(plain - ft->got) + 3;
            }
            if (reply && write(ft->master, reply, strlen(reply)) < 0) break;
        }
    }
    return NULL;
}

static int open_pty(int *master, int *slave) {
    *master = posix_openpt(O_RDWR | O_NOCTTY);
    if (*master < 0 || grantpt(*master) || unlockpt(*master)) return -1;
    *slave = open(ptsname(*master), O_RDWR | O_NOCTTY);
    if (*slave < 0) return -1;
    fcntl(*master, F_SETFL, fcntl(*master, F_GETFL) | O_NONBLOCK);
    return 0;
}

/* Run probe + show through a fake terminal; returns what it received. */
static void through_terminal(const char *label, bool plain, bool tmux_env, bool tmux_pass, const uint8_t *img,
                             int W, int H, c3_preview_kind want_kind, bool want_wrap) {
    int m, s;
    if (open_pty(&m, &s) != 0) {
        fprintf(stderr, "%s: no pty available; skipped\n", label);
        return;
    }
    struct winsize ws = {.ws_row = 24, .ws_col = 80, .ws_xpixel = 800, .ws_ypixel = 480};
    ioctl(m, TIOCSWINSZ, &ws);
    fake_term ft = {.master = m, .answer_plain = plain, .answer_tmux = tmux_pass};
    pthread_t th;
    pthread_create(&th, NULL, fake_main, &ft);
    if (tmux_env)
        setenv("TMUX", "/tmp/tmux-test/default,1,0", 1);
    else
        unsetenv("TMUX");
    c3_term t;
    preview_probe("auto", s, s, 0.5, &t);
    T_CHECK(t.kind == want_kind, "%s: detected %s, want %s", label, preview_kind_name(t.kind),
            preview_kind_name(want_kind));
    T_CHECK(t.tmux_wrap == want_wrap, "%s: tmux_wrap %d, want %d", label, t.tmux_wrap, want_wrap);
    T_CHECK(t.cols == 80 && t.rows == 24 && t.px_w == 800 && t.px_h == 480, "%s: size %dx%d (%dx%d px)", label,
            t.cols, t.rows, t.px_w, t.px_h);
    size_t before = ft.n;
    int rc = preview_show_rgb(img, W, H, &t, s);
    T_CHECK(rc == C3_OK, "%s: show: %s", label, c3_errmsg());
    usleep(100000);
    ft.stop = 1;
    pthread_join(th, NULL);
    const char *out = ft.got ? ft.got + before : "";
    size_t n = ft.n - before;
    /* the terminal's line discipline turns \n into \r\n; both are fine */
    if (want_kind == C3_PREVIEW_SIXEL) {
        const char *dcs = want_wrap ? strstr(out, "\033Ptmux;") : strstr(out, "\033P");
        T_CHECK(dcs != NULL, "%s: no DCS in the output", label);
        if (dcs) {
            size_t len = n - (size_t)(dcs - out);
            size_t un = len;
            char *raw = want_wrap ? tmux_unwrap(dcs, len, &un) : NULL;
            image im;
            int w, h;
            /* 24 rows * 3/4 = 18 rows of 20 px = 360 px high, 800 wide */
            preview_fit(W, H, 800, 18 * (480 / 24), &w, &h);
            uint8_t *ref = malloc((size_t)w * h * 3);
            preview_resize(img, W, H, ref, w, h);
            int d = sx_decode(raw ? raw : dcs, un, &im);
            T_CHECK(d == 0, "%s: the sixel does not decode (%d)", label, d);
            if (d == 0) cmp_img(label, &im, ref, w, h, SIXEL_TOL, 4.0);
            free(im.rgb);
            free(ref);
            free(raw);
        }
    } else if (want_kind == C3_PREVIEW_BLOCKS) {
        T_CHECK(strstr(out, "\xe2\x96\x80") != NULL, "%s: no half blocks written", label);
    }
    free(ft.got);
    close(s);
    close(m);
    unsetenv("TMUX");
}

int main(void) {
    /* DA1 replies */
    T_CHECK(preview_da1_sixel("\033[?62;4;22c", 11), "vt340-like reply lists sixel");
    T_CHECK(preview_da1_sixel("\033[?4c", 5), "bare 4");
    T_CHECK(preview_da1_sixel("junk\033[?64;1;2;4;6;9;15;18;21;22c", 33), "4 among many");
    T_CHECK(!preview_da1_sixel("\033[?1;2c", 7), "xterm without sixel");
    T_CHECK(!preview_da1_sixel("\033[?62;14;44c", 13), "14 and 44 are not 4");
    T_CHECK(!preview_da1_sixel("\033[?62;4", 7), "unterminated reply still lists 4 only with a ; or c");
    T_CHECK(!preview_da1_sixel("", 0), "empty reply");

    /* fitting */
    int w, h;
    preview_fit(1024, 1024, 800, 360, &w, &h);
    T_CHECK(w == 360 && h == 360, "square into 800x360 -> %dx%d", w, h);
    preview_fit(1280, 720, 80, 36, &w, &h);
    T_CHECK(w == 64 && h == 36, "16:9 into 80x36 -> %dx%d", w, h);
    preview_fit(32, 16, 80, 100, &w, &h);
    T_CHECK(w == 80 && h == 40, "grows to the width: %dx%d", w, h);
    preview_fit(1000, 1, 10, 10, &w, &h);
    T_CHECK(w == 10 && h == 1, "never below one pixel: %dx%d", w, h);

    /* area resize: 4x2 -> 2x1 averages 2x2 boxes */
    uint8_t src[4 * 2 * 3], dst[2 * 3];
    for (int i = 0; i < 24; i++) src[i] = (uint8_t)(i * 10);
    preview_resize(src, 4, 2, dst, 2, 1);
    /* pixel (0,0): mean of src px 0,1,4,5 channel 0 = (0+30+120+150)/4 = 75 */
    T_CHECK(dst[0] == 75 && dst[3] == 135, "area mean: %d %d (want 75 135)", dst[0], dst[3]);

    /* half blocks: parse the SGR colours back */
    uint8_t *g = gradient(5, 3);
    char *txt;
    size_t n;
    T_CHECK(preview_blocks(g, 5, 3, true, &txt, &n) == C3_OK, "blocks");
    int lines = 0, cells = 0, bad = 0;
    const char *p = txt;
    for (int y = 0; y < 3; y += 2)
        for (int x = 0; x < 5; x++) {
            int r1, g1, b1, r2, g2, b2, used = 0;
            const uint8_t *a = g + ((size_t)y * 5 + x) * 3;
            if (y + 1 < 3) {
                const uint8_t *b = g + ((size_t)(y + 1) * 5 + x) * 3;
                if (sscanf(p, "\033[38;2;%d;%d;%dm\033[48;2;%d;%d;%dm\xe2\x96\x80%n", &r1, &g1, &b1, &r2, &g2, &b2,
                           &used) != 6 ||
                    !used || r1 != a[0] || g1 != a[1] || b1 != a[2] || r2 != b[0] || g2 != b[1] || b2 != b[2])
                    bad++;
            } else if (sscanf(p, "\033[38;2;%d;%d;%dm\033[49m\xe2\x96\x80%n", &r1, &g1, &b1, &used) != 3 || !used ||
                       r1 != a[0] || g1 != a[1] || b1 != a[2]) {
                bad++;
            }
            if (!used) break;
            p += used;
            cells++;
            if (x == 4) {
                if (strncmp(p, "\033[0m\n", 5) == 0) lines++;
                p += 5;
            }
        }
    T_CHECK(bad == 0 && cells == 10 && lines == 2, "blocks parse back: %d cells, %d lines, %d wrong", cells, lines,
            bad);
    T_CHECK((size_t)(p - txt) == n, "blocks: %zu bytes unparsed", n - (size_t)(p - txt));
    free(txt);
    free(g);
    /* NO_COLOR: an ASCII ramp, black -> ' ', white -> '@' */
    uint8_t bw[2 * 2 * 3] = {0, 0, 0, 255, 255, 255, 0, 0, 0, 255, 255, 255};
    T_CHECK(preview_blocks(bw, 2, 2, false, &txt, &n) == C3_OK && n == 3 && memcmp(txt, " @\n", 3) == 0,
            "ASCII ramp: '%.*s'", (int)n, txt);
    free(txt);
    /* NO_COLOR, red on blue (lumas 76 and 29, one ramp step apart unstretched): the
       picture's own range spans the ramp, so the disc and its ground are ' ' and '@' */
    uint8_t rb[4 * 2 * 3] = {0, 0, 255, 255, 0, 0, 255, 0, 0, 0, 0, 255,
                             0, 0, 255, 255, 0, 0, 255, 0, 0, 0, 0, 255};
    T_CHECK(preview_blocks(rb, 4, 2, false, &txt, &n) == C3_OK && n == 5 && memcmp(txt, " @@ \n", 5) == 0,
            "NO_COLOR red on blue: '%.*s'", (int)n, txt);
    free(txt);

    /* tmux wrap round trip */
    size_t wn, un;
    char *wrapped = preview_tmux_wrap("\033Pq#0\033\\", 7, &wn);
    char *unw = tmux_unwrap(wrapped, wn, &un);
    T_CHECK(unw && un == 7 && memcmp(unw, "\033Pq#0\033\\", 7) == 0, "tmux wrap round trip");
    free(wrapped);
    free(unw);

    /* not a terminal: nothing */
    int pp[2];
    if (pipe(pp) == 0) {
        c3_term t;
        preview_probe("auto", pp[0], pp[1], 0.1, &t);
        T_CHECK(t.kind == C3_PREVIEW_OFF, "a pipe gets no preview (%s)", preview_kind_name(t.kind));
        preview_probe("sixel", pp[0], pp[1], 0.1, &t);
        T_CHECK(t.kind == C3_PREVIEW_OFF, "not even when sixel is forced");
        close(pp[0]);
        close(pp[1]);
    }
    setenv("NO_COLOR", "1", 1);
    {
        c3_term t;
        preview_probe("off", 0, 1, 0.1, &t);
        T_CHECK(!t.color && t.kind == C3_PREVIEW_OFF, "NO_COLOR and off");
    }
    unsetenv("NO_COLOR");

    if (!preview_have_sixel()) {
        T_CHECK(preview_sixel(bw, 2, 2, false, &txt, &n) == C3_EFAIL, "without libsixel: an error naming the fix");
        uint8_t *img = bands(30, 20);
        through_terminal("fake sixel terminal (no libsixel)", true, false, false, img, 30, 20, C3_PREVIEW_BLOCKS,
                         false);
        free(img);
        return t_done("preview");
    }

    /* sixel encodings decoded back */
    int sizes[][2] = {{37, 23}, {64, 7}, {48, 48}, {300, 200}};
    for (size_t k = 0; k < C3_ARRAY_LEN(sizes); k++) {
        int W = sizes[k][0], H = sizes[k][1];
        uint8_t *img = bands(W, H);
        T_CHECK(preview_sixel(img, W, H, false, &txt, &n) == C3_OK, "sixel %dx%d: %s", W, H, c3_errmsg());
        image im;
        int d = sx_decode(txt, n, &im);
        char label[64];
        snprintf(label, sizeof label, "sixel bands %dx%d", W, H);
        T_CHECK(d == 0, "%s: decode %d", label, d);
        if (d == 0) cmp_img(label, &im, img, W, H, SIXEL_TOL, 4.0);
        if (d == 0) same_as_libsixel(label, txt, n, &im);
        free(im.rgb);
        free(txt);
        free(img);
    }
    uint8_t *grad = gradient(64, 48);
    T_CHECK(preview_sixel(grad, 64, 48, false, &txt, &n) == C3_OK, "sixel gradient");
    image im;
    T_CHECK(sx_decode(txt, n, &im) == 0, "gradient decodes");
    cmp_img("sixel gradient 64x48 (256-colour palette)", &im, grad, 64, 48, 24, 6.0);
    same_as_libsixel("gradient", txt, n, &im);
    free(im.rgb);
    free(txt);

    /* the whole path through fake terminals */
    uint8_t *img = bands(120, 90);
    through_terminal("fake sixel terminal", true, false, false, img, 120, 90, C3_PREVIEW_SIXEL, false);
    through_terminal("fake terminal without sixel", false, false, false, img, 120, 90, C3_PREVIEW_BLOCKS, false);
    through_terminal("tmux, outer terminal with sixel", false, true, true, img, 120, 90, C3_PREVIEW_SIXEL, true);
    through_terminal("tmux, passthrough off", false, true, false, img, 120, 90, C3_PREVIEW_BLOCKS, false);
    free(img);
    free(grad);
    return t_done("preview");
}
