/* demo_judge.c - judge a demo-world picture (see demo_judge.h). */
#include "demo_judge.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NPIX (DEMO_SIZE * DEMO_SIZE)
#define BORDER 2              /* border ring width used for the background, px */
#define FIRST_THRESHOLD 40.0f /* pass-1 object threshold: distance to the bg median */
#define MAJORITY 5            /* of the 9 pixels of a 3x3 window */
#define SQUARE_FILL 0.85f     /* fill above: square (circle pi/4 ~ 0.785, square 1.0) */
#define TRIANGLE_FILL 0.68f   /* fill below: triangle (0.5) */
#define TRIANGLE_TAPER 2.0f   /* bottom/top width ratio above: triangle (~5; others ~1) */

static int cmp_u8(const void *a, const void *b) {
    return (int)*(const uint8_t *)a - (int)*(const uint8_t *)b;
}

/* Per-channel median of the pixels idx[0..n) into med. */
static void median_rgb(const uint8_t *rgb, const int *idx, int n, float med[DEMO_CHANNELS]) {
    uint8_t *vals = malloc((size_t)(n > 0 ? n : 1));
    for (int k = 0; k < DEMO_CHANNELS; k++) {
        for (int i = 0; i < n; i++) vals[i] = rgb[(size_t)idx[i] * DEMO_CHANNELS + k];
        qsort(vals, (size_t)n, 1, cmp_u8);
        med[k] = n ? (n & 1 ? vals[n / 2] : 0.5f * (vals[n / 2 - 1] + vals[n / 2])) : 0;
    }
    free(vals);
}

static float dist2(const uint8_t *p, const float c[DEMO_CHANNELS]) {
    float s = 0;
    for (int k = 0; k < DEMO_CHANNELS; k++) s += (p[k] - c[k]) * (p[k] - c[k]);
    return s;
}

/* Nearest palette colour to c, skipping colour `except` (-1: none). */
static int nearest_colour(const float c[DEMO_CHANNELS], int except) {
    int best = -1;
    float bd = 0;
    for (int i = 0; i < DEMO_N_COLOURS; i++) {
        if (i == except) continue;
        float d = 0;
        for (int k = 0; k < DEMO_CHANNELS; k++) d += (demo_palette[i][k] - c[k]) * (demo_palette[i][k] - c[k]);
        if (best < 0 || d < bd) best = i, bd = d;
    }
    return best;
}

/* Keep only the largest 4-connected component of mask (in place); returns its area. */
static int largest_component(uint8_t *mask) {
    static const int dx[4] = {1, -1, 0, 0}, dy[4] = {0, 0, 1, -1};
    int *label = calloc(NPIX, sizeof *label), *stack = malloc(NPIX * sizeof *stack);
    int nlab = 0, best = 0, best_area = 0;
    for (int s = 0; s < NPIX; s++) {
        if (!mask[s] || label[s]) continue;
        int top = 0, area = 0;
        label[s] = ++nlab;
        stack[top++] = s;
        while (top) {
            int p = stack[--top], x = p % DEMO_SIZE, y = p / DEMO_SIZE;
            area++;
            for (int d = 0; d < 4; d++) {
                int nx = x + dx[d], ny = y + dy[d];
                if (nx < 0 || ny < 0 || nx >= DEMO_SIZE || ny >= DEMO_SIZE) continue;
                int q = ny * DEMO_SIZE + nx;
                if (mask[q] && !label[q]) label[q] = nlab, stack[top++] = q;
            }
        }
        if (area > best_area) best_area = area, best = nlab;
    }
    for (int p = 0; p < NPIX; p++) mask[p] = best && label[p] == best;
    free(label);
    free(stack);
    return best_area;
}

/* 3x3 majority vote (in place; out-of-image neighbours count as background):
 * noise leaves single-pixel spurs and holes on the edge that widen the box. */
static void majority3(uint8_t *mask) {
    uint8_t src[NPIX];
    memcpy(src, mask, NPIX);
    for (int y = 0; y < DEMO_SIZE; y++)
        for (int x = 0; x < DEMO_SIZE; x++) {
            int votes = 0;
            for (int j = -1; j <= 1; j++)
                for (int i = -1; i <= 1; i++) {
                    int xx = x + i, yy = y + j;
                    if (xx >= 0 && yy >= 0 && xx < DEMO_SIZE && yy < DEMO_SIZE) votes += src[yy * DEMO_SIZE + xx];
                }
            mask[y * DEMO_SIZE + x] = votes >= MAJORITY;
        }
}

/* The object's colour: median of the component's interior (pixels whose four
 * neighbours are object too; blur mixes the edge), else of all of it. */
static void object_median(const uint8_t *rgb, const uint8_t *mask, int *idx, float med[DEMO_CHANNELS]) {
    int n = 0;
    for (int y = 1; y < DEMO_SIZE - 1; y++)
        for (int x = 1; x < DEMO_SIZE - 1; x++) {
            int p = y * DEMO_SIZE + x;
            if (mask[p] && mask[p - 1] && mask[p + 1] && mask[p - DEMO_SIZE] && mask[p + DEMO_SIZE])
                idx[n++] = p;
        }
    if (n == 0)
        for (int p = 0; p < NPIX; p++)
            if (mask[p]) idx[n++] = p;
    median_rgb(rgb, idx, n, med);
}

int demo_judge(const uint8_t *rgb, demo_verdict *v) {
    int *idx = malloc(NPIX * sizeof *idx);
    uint8_t *mask = malloc(NPIX);
    float bgm[DEMO_CHANNELS], obm[DEMO_CHANNELS];
    memset(v, 0, sizeof *v);
    v->colour = v->shape = v->place = -1;

    /* background: the border ring's median */
    int n = 0;
    for (int y = 0; y < DEMO_SIZE; y++)
        for (int x = 0; x < DEMO_SIZE; x++)
            if (x < BORDER || y < BORDER || x >= DEMO_SIZE - BORDER || y >= DEMO_SIZE - BORDER)
                idx[n++] = y * DEMO_SIZE + x;
    median_rgb(rgb, idx, n, bgm);
    v->bg = nearest_colour(bgm, -1);

    /* pass 1: far from the background median */
    for (int p = 0; p < NPIX; p++)
        mask[p] = dist2(rgb + (size_t)p * DEMO_CHANNELS, bgm) > FIRST_THRESHOLD * FIRST_THRESHOLD;
    int area = largest_component(mask);
    if (area < DEMO_JUDGE_MIN_AREA) goto none;
    object_median(rgb, mask, idx, obm);

    /* pass 2: each pixel to the nearer of the two measured colours (the
     * half-way threshold keeps blurred edges unbiased) */
    for (int p = 0; p < NPIX; p++) {
        const uint8_t *px = rgb + (size_t)p * DEMO_CHANNELS;
        mask[p] = dist2(px, obm) < dist2(px, bgm);
    }
    majority3(mask);
    area = largest_component(mask);
    if (area < DEMO_JUDGE_MIN_AREA) goto none;
    object_median(rgb, mask, idx, obm);
    v->colour = nearest_colour(obm, v->bg);
    v->area = area;

    /* geometry: bounding box, centroid, row widths */
    int x0 = DEMO_SIZE, x1 = -1, y0 = DEMO_SIZE, y1 = -1;
    double sx = 0, sy = 0;
    int rows[DEMO_SIZE] = {0};
    for (int y = 0; y < DEMO_SIZE; y++)
        for (int x = 0; x < DEMO_SIZE; x++)
            if (mask[y * DEMO_SIZE + x]) {
                if (x < x0) x0 = x;
                if (x > x1) x1 = x;
                if (y < y0) y0 = y;
                if (y > y1) y1 = y;
                sx += x + 0.5;
                sy += y + 0.5;
                rows[y]++;
            }
    int w = x1 - x0 + 1, h = y1 - y0 + 1, third = h / 3 > 0 ? h / 3 : 1;
    double top = 0, bot = 0;
    for (int i = 0; i < third; i++) top += rows[y0 + i], bot += rows[y1 - i];
    v->fill = (float)area / (float)(w * h);
    v->taper = (float)((bot + 1.0) / (top + 1.0));
    if (v->taper > TRIANGLE_TAPER || v->fill < TRIANGLE_FILL)
        v->shape = DEMO_TRIANGLE;
    else
        v->shape = v->fill > SQUARE_FILL ? DEMO_SQUARE : DEMO_CIRCLE;

    /* place: the centroid; a triangle's centroid sits h/6 below its box centre */
    v->cx = (float)(sx / area);
    v->cy = (float)(sy / area) - (v->shape == DEMO_TRIANGLE ? (float)h / 6.0f : 0.0f);
    float bd = 0;
    for (int i = 0; i < DEMO_N_PLACES; i++) {
        float ex = v->cx - (DEMO_CENTRE + demo_place_dx[i]), ey = v->cy - (DEMO_CENTRE + demo_place_dy[i]);
        if (v->place < 0 || ex * ex + ey * ey < bd) v->place = i, bd = ex * ex + ey * ey;
    }
    free(idx);
    free(mask);
    return 0;
none:
    v->colour = v->shape = v->place = -1;
    v->area = 0;
    free(idx);
    free(mask);
    return -1;
}

/* ------------------------------------------------------------ clips */

static int majority_of(const int *vals, int n, int nvals) {
    int best = -1, bc = 0;
    for (int c = 0; c < nvals; c++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            k += vals[i] == c;
        if (k > bc) best = c, bc = k;
    }
    return 2 * bc > n ? best : -1;
}

int demo_judge_clip(const uint8_t *frames, int nframes, const demo_verdict *ref,
                    demo_clip_verdict *v) {
    memset(v, 0, sizeof *v);
    v->bg = v->colour = v->shape = v->motion = -1;
    if (nframes < 2) return -1;
    demo_verdict *fv = calloc((size_t)nframes, sizeof *fv);
    int *bg = malloc(sizeof(int) * (size_t)nframes), *col = malloc(sizeof(int) * (size_t)nframes),
        *sh = malloc(sizeof(int) * (size_t)nframes);
    for (int f = 0; f < nframes; f++) {
        if (demo_judge(frames + (size_t)f * NPIX * DEMO_CHANNELS, &fv[f]) == 0) v->frames_found++;
        bg[f] = fv[f].bg, col[f] = fv[f].colour, sh[f] = fv[f].shape;
    }
    v->bg = majority_of(bg, nframes, DEMO_N_COLOURS);
    v->colour = majority_of(col, nframes, DEMO_N_COLOURS);
    v->shape = majority_of(sh, nframes, DEMO_N_SHAPES);
    for (int f = 0; f < nframes; f++)
        v->consistent +=
            bg[f] == v->bg && col[f] == v->colour && sh[f] == v->shape && v->colour >= 0;
    int rc = v->frames_found == nframes ? 0 : -1;
    if (rc == 0) {
        v->step_x = (fv[nframes - 1].cx - fv[0].cx) / (float)(nframes - 1);
        v->step_y = (fv[nframes - 1].cy - fv[0].cy) / (float)(nframes - 1);
        if (ref && ref->colour >= 0) v->start_dist = hypotf(fv[0].cx - ref->cx, fv[0].cy - ref->cy);
        float ax = fabsf(v->step_x), ay = fabsf(v->step_y);
        if (ax < DEMO_MOTION_MIN / 2 && ay < DEMO_MOTION_MIN / 2) {
            v->motion = DEMO_STILL;
        } else if (ax >= DEMO_MOTION_MIN || ay >= DEMO_MOTION_MIN) {
            bool horiz = ax >= ay;
            float dir = horiz ? (v->step_x > 0 ? 1.0f : -1.0f) : (v->step_y > 0 ? 1.0f : -1.0f);
            bool ok = (horiz ? ay : ax) <= (horiz ? ax : ay) / 2; /* the other axis holds */
            for (int f = 1; f < nframes && ok; f++) { /* frame after frame, no step back */
                float d = horiz ? fv[f].cx - fv[f - 1].cx : fv[f].cy - fv[f - 1].cy;
                ok = d * dir >= -DEMO_MOTION_SLACK;
            }
            if (ok)
                v->motion = horiz ? (dir > 0 ? DEMO_MOVE_RIGHT : DEMO_MOVE_LEFT)
                                  : (dir > 0 ? DEMO_MOVE_DOWN : DEMO_MOVE_UP);
        }
    }
    free(fv);
    free(bg);
    free(col);
    free(sh);
    return rc;
}
