/* preview.h - finished images in the terminal: sixel (libsixel) where the
 * terminal says it can (DA1 reply lists 4), else colour half-blocks, and
 * nothing when the output is not a terminal.
 *
 *   probe:  ESC [ c  ->  ESC [ ? 62 ; 4 ; 22 c     ("4" = sixel graphics)
 *   tmux:   tmux answers DA1 itself; when it lacks sixel the query is sent
 *           through its passthrough (ESC P tmux; ... ESC \) to the outer
 *           terminal, and the image is wrapped the same way.
 *   blocks: one cell = "▀" with foreground = upper pixel, background = lower
 *           pixel (24-bit SGR), or an ASCII ramp under NO_COLOR.
 *
 * Everything renders into memory first (testable); preview_show writes it.
 */
#ifndef COSMOS3_PREVIEW_H
#define COSMOS3_PREVIEW_H

#include "util.h"

typedef enum { C3_PREVIEW_OFF, C3_PREVIEW_SIXEL, C3_PREVIEW_BLOCKS } c3_preview_kind;

/* What the terminal on an fd can show, and how big it is. */
typedef struct {
    c3_preview_kind kind;
    bool tmux_wrap;   /* sixel goes through tmux's passthrough */
    bool color;       /* false under NO_COLOR: blocks use an ASCII ramp */
    int cols, rows;   /* cells */
    int px_w, px_h;   /* pixels (0: unknown) */
    /* keys the user typed while the probe waited for the terminal's answer:
     * the caller feeds them to its input line, so none is lost */
    char typed[256];
    int ntyped;
} c3_term;

/* Default cell size in pixels when the terminal does not report one. */
#define C3_CELL_W_PX 10
#define C3_CELL_H_PX 20

/* The kind name ("off", "sixel", "blocks"). */
const char *preview_kind_name(c3_preview_kind k);
/* True when libsixel was built in. */
bool preview_have_sixel(void);

/* Does a DA1 reply (ESC [ ? a ; b ; ... c, possibly among other bytes) list
 * attribute 4? */
bool preview_da1_sixel(const char *reply, size_t n);

/* Decide the preview for `setting` (auto|off|sixel|blocks) on a terminal:
 * out_fd not a tty -> off; auto -> ask in_fd/out_fd with DA1 (waits up to
 * timeout seconds per query). Never fails: unknown -> blocks. */
void preview_probe(const char *setting, int in_fd, int out_fd, double timeout, c3_term *t);

/* Fit W x H into a bw x bh box keeping the aspect ratio (at least 1x1). */
void preview_fit(int W, int H, int bw, int bh, int *w, int *h);
/* Resize RGB8 [H, W, 3] to [h, w, 3] by area averaging (nearest when growing). */
void preview_resize(const uint8_t *src, int W, int H, uint8_t *dst, int w, int h);

/* Sixel text for rgb [h, w, 3] (DCS ... ST), wrapped for tmux when asked.
 * COSMOS3_EFAIL when built without libsixel. *out is xmalloc'd. */
int preview_sixel(const uint8_t *rgb, int w, int h, bool tmux_wrap, char **out, size_t *n);
/* Half-block text for rgb [h, w, 3]: ceil(h/2) lines of w cells, each line
 * ending in "\033[0m\n" (colour) or "\n" (ASCII ramp). */
int preview_blocks(const uint8_t *rgb, int w, int h, bool color, char **out, size_t *n);
/* Wrap a DCS string for tmux passthrough (every ESC doubled). */
char *preview_tmux_wrap(const char *s, size_t n, size_t *out_n);

/* Fit pixels (W x H x 3 in memory) to the terminal (width, and 3/4 of the
 * height) and write them to fd as t->kind says. COSMOS3_OK and nothing written
 * when off. */
int preview_show_rgb(const uint8_t *rgb, int W, int H, const c3_term *t, int fd);

#endif
