/* test_demo_judge.c - the demo world's judge on rendered ground truth:
 * every shape x object colour x background x place, clean, with Gaussian
 * pixel noise (sigma 12), with a 3x3 box blur, and blurred then noisy (as a
 * generated picture would be). Each of background colour, object colour,
 * shape and place must be right on >= 99 % of the pictures. Also checks the
 * renderer's geometry and the captions. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "demo_judge.h"
#include "demo_world.h"
#include "test_util.h"

#define NOISE_SIGMA 12.0
#define MIN_ACCURACY 0.99
enum { V_CLEAN, V_NOISE, V_BLUR, V_BLUR_NOISE, N_VARIANTS };
static const char *const variant_names[N_VARIANTS] = {"clean", "noise", "blur", "blur+noise"};

static uint64_t rng_state;
static double rng_uniform(void) { /* (0, 1) */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}
static double rng_normal(void) {
    return sqrt(-2.0 * log(rng_uniform())) * cos(2.0 * M_PI * rng_uniform());
}
static uint8_t clamp_u8(double v) { return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)lrint(v); }

static void add_noise(uint8_t *rgb) {
    for (int i = 0; i < DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS; i++)
        rgb[i] = clamp_u8(rgb[i] + NOISE_SIGMA * rng_normal());
}
/* 3x3 box blur, edges clamped */
static void box_blur(uint8_t *rgb) {
    static uint8_t src[DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS];
    memcpy(src, rgb, sizeof src);
    for (int y = 0; y < DEMO_SIZE; y++)
        for (int x = 0; x < DEMO_SIZE; x++)
            for (int k = 0; k < DEMO_CHANNELS; k++) {
                double s = 0;
                for (int j = -1; j <= 1; j++)
                    for (int i = -1; i <= 1; i++) {
                        int yy = y + j < 0 ? 0 : y + j >= DEMO_SIZE ? DEMO_SIZE - 1 : y + j;
                        int xx = x + i < 0 ? 0 : x + i >= DEMO_SIZE ? DEMO_SIZE - 1 : x + i;
                        s += src[(yy * DEMO_SIZE + xx) * DEMO_CHANNELS + k];
                    }
                rgb[(y * DEMO_SIZE + x) * DEMO_CHANNELS + k] = clamp_u8(s / 9.0);
            }
}

static void test_world(void) {
    char buf[128];
    T_CHECK(demo_caption(DEMO_TRIANGLE, DEMO_RED, DEMO_BLUE, DEMO_NO_PLACE, buf, sizeof buf) > 0 &&
                strcmp(buf, "a red triangle on a blue background") == 0, "got '%s'", buf);
    T_CHECK(demo_caption(DEMO_CIRCLE, DEMO_WHITE, DEMO_BLACK, DEMO_TOP, buf, sizeof buf) > 0 &&
                strcmp(buf, "a white circle on a black background, at the top") == 0, "got '%s'", buf);
    T_CHECK(demo_caption(DEMO_SQUARE, DEMO_ORANGE, DEMO_PURPLE, DEMO_CENTER, buf, sizeof buf) > 0 &&
                strcmp(buf, "a orange square on a purple background, in the center") == 0, "got '%s'", buf);
    T_CHECK(demo_caption(DEMO_SQUARE, DEMO_RED, DEMO_GREEN, DEMO_LEFT, buf, 10) == -1, "short buffer accepted");
    uint8_t rgb[DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS];
    T_CHECK(demo_render(DEMO_SQUARE, DEMO_RED, DEMO_RED, DEMO_LEFT, 1, rgb) == -1, "same colours accepted");
    T_CHECK(demo_render(DEMO_N_SHAPES, DEMO_RED, DEMO_BLUE, DEMO_LEFT, 1, rgb) == -1, "bad shape accepted");

    /* geometry: sizes and jitter cover their ranges; a square's pixel count is (2r)^2 */
    int seen_size[DEMO_SIZE_MAX + 1] = {0}, seen_jit[2 * DEMO_JITTER + 1] = {0};
    for (uint64_t s = 0; s < 200; s++) {
        demo_geom g = demo_geometry(DEMO_RIGHT, s);
        T_CHECK(g.size >= DEMO_SIZE_MIN && g.size <= DEMO_SIZE_MAX, "size %d", g.size);
        int jx = g.cx - (DEMO_CENTRE + DEMO_PLACE_STEP), jy = g.cy - DEMO_CENTRE;
        T_CHECK(jx >= -DEMO_JITTER && jx <= DEMO_JITTER && jy >= -DEMO_JITTER && jy <= DEMO_JITTER,
                "jitter %d %d", jx, jy);
        if (g.size >= DEMO_SIZE_MIN && g.size <= DEMO_SIZE_MAX) seen_size[g.size]++;
        if (jx >= -DEMO_JITTER && jx <= DEMO_JITTER) seen_jit[jx + DEMO_JITTER]++;
    }
    for (int r = DEMO_SIZE_MIN; r <= DEMO_SIZE_MAX; r++) T_CHECK(seen_size[r] > 0, "size %d never drawn", r);
    for (int j = 0; j <= 2 * DEMO_JITTER; j++) T_CHECK(seen_jit[j] > 0, "jitter %d never drawn", j - DEMO_JITTER);
    T_CHECK(demo_render(DEMO_SQUARE, DEMO_YELLOW, DEMO_BLACK, DEMO_BOTTOM, 7, rgb) == 0, "render failed");
    demo_geom g = demo_geometry(DEMO_BOTTOM, 7);
    int count = 0;
    for (int p = 0; p < DEMO_SIZE * DEMO_SIZE; p++) count += rgb[p * DEMO_CHANNELS] == demo_palette[DEMO_YELLOW][0];
    T_CHECK(count == 4 * g.size * g.size, "square area %d, want %d", count, 4 * g.size * g.size);
    /* apex up: the triangle's top object row is narrower than its bottom one */
    T_CHECK(demo_render(DEMO_TRIANGLE, DEMO_WHITE, DEMO_BLACK, DEMO_CENTER, 3, rgb) == 0, "render failed");
    int first = -1, last = -1, wf = 0, wl = 0;
    for (int y = 0; y < DEMO_SIZE; y++) {
        int w = 0;
        for (int x = 0; x < DEMO_SIZE; x++) w += rgb[(y * DEMO_SIZE + x) * DEMO_CHANNELS] == 245;
        if (w && first < 0) first = y, wf = w;
        if (w) last = y, wl = w;
    }
    T_CHECK(first >= 0 && wf < wl && last > first, "triangle rows %d..%d widths %d..%d", first, last, wf, wl);
}

/* Clips: every shape, colour pair and motion, clean / noisy / blurred and
 * noisy: the judge names the motion and the object on >= 99 %; a clip run
 * backwards names the opposite motion; a clip whose object jumps back
 * half-way, or drifts diagonally, has no motion; an image-to-video start
 * away from the given picture's object is measured. */
static const int opposite[DEMO_N_MOTIONS] = {DEMO_STILL, DEMO_MOVE_LEFT, DEMO_MOVE_RIGHT,
                                             DEMO_MOVE_DOWN, DEMO_MOVE_UP};
enum {
    CLIP_BYTES = DEMO_CLIP_FRAMES * DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS,
    FRAME_BYTES = DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS
};

static void test_clips(void) {
    static uint8_t clip[CLIP_BYTES], rev[CLIP_BYTES];
    char buf[160];
    T_CHECK(demo_clip_caption(DEMO_CIRCLE, DEMO_RED, DEMO_BLUE, DEMO_MOVE_RIGHT, buf, sizeof buf) >
                    0 &&
                !strcmp(buf, "a red circle on a blue background, moving to the right"),
            "clip caption '%s'", buf);
    T_CHECK(demo_render_clip(DEMO_CIRCLE, DEMO_RED, DEMO_RED, DEMO_STILL, 1, clip) == -1,
            "same colours accepted");
    T_CHECK(demo_render_clip(DEMO_CIRCLE, DEMO_RED, DEMO_BLUE, DEMO_N_MOTIONS, 1, clip) == -1,
            "bad motion accepted");
    /* the renderer: the centre moves DEMO_MOTION_STEP a frame and stays inside */
    for (int m = 0; m < DEMO_N_MOTIONS; m++)
        for (int f = 1; f < DEMO_CLIP_FRAMES; f++) {
            demo_geom a = demo_clip_geometry(m, 5, f - 1), b = demo_clip_geometry(m, 5, f);
            T_CHECK(b.cx - a.cx == DEMO_MOTION_STEP * demo_motion_dx[m] &&
                        b.cy - a.cy == DEMO_MOTION_STEP * demo_motion_dy[m],
                    "motion %d frame %d: step (%d, %d)", m, f, b.cx - a.cx, b.cy - a.cy);
            T_CHECK(b.cx - b.size >= 0 && b.cx + b.size < DEMO_SIZE && b.cy - b.size >= 0 &&
                        b.cy + b.size < DEMO_SIZE,
                    "motion %d frame %d leaves the picture", m, f);
        }
    int total = 0, right = 0, right_rev = 0, right_obj = 0;
    uint64_t seed = 11;
    for (int variant = 0; variant < 3; variant++)
        for (int sh = 0; sh < DEMO_N_SHAPES; sh++)
            for (int c = 0; c < DEMO_N_COLOURS; c += 3)
                for (int b = 1; b < DEMO_N_COLOURS; b += 3) {
                    if (b == c) continue;
                    for (int m = 0; m < DEMO_N_MOTIONS; m++) {
                        T_CHECK(demo_render_clip(sh, c, b, m, seed++, clip) == 0, "render clip");
                        for (int f = 0; f < DEMO_CLIP_FRAMES; f++) {
                            if (variant == 2) box_blur(clip + (size_t)f * FRAME_BYTES);
                            if (variant >= 1) add_noise(clip + (size_t)f * FRAME_BYTES);
                        }
                        for (int f = 0; f < DEMO_CLIP_FRAMES; f++)
                            memcpy(rev + (size_t)f * FRAME_BYTES,
                                   clip + (size_t)(DEMO_CLIP_FRAMES - 1 - f) * FRAME_BYTES,
                                   FRAME_BYTES);
                        demo_clip_verdict v, r;
                        int rc = demo_judge_clip(clip, DEMO_CLIP_FRAMES, NULL, &v);
                        demo_judge_clip(rev, DEMO_CLIP_FRAMES, NULL, &r);
                        total++;
                        right += rc == 0 && v.motion == m;
                        right_rev += r.motion == opposite[m];
                        right_obj += v.colour == c && v.bg == b && v.shape == sh &&
                                     v.consistent == DEMO_CLIP_FRAMES;
                    }
                }
    fprintf(stderr, "clips: %d judged, motion %.2f%%, reversed %.2f%%, object %.2f%%\n", total,
            100.0 * right / total, 100.0 * right_rev / total, 100.0 * right_obj / total);
    T_CHECK(total >= 300, "only %d clips", total);
    T_CHECK(right >= 0.99 * total && right_rev >= 0.99 * total && right_obj >= 0.99 * total,
            "clips: motion %d, reversed %d, object %d of %d", right, right_rev, right_obj, total);
    /* a jump back half-way: no motion */
    demo_clip_verdict v;
    demo_render_clip(DEMO_SQUARE, DEMO_YELLOW, DEMO_BLACK, DEMO_MOVE_RIGHT, 3, clip);
    memcpy(clip + 5 * (size_t)FRAME_BYTES, clip + 1 * (size_t)FRAME_BYTES, FRAME_BYTES);
    demo_judge_clip(clip, DEMO_CLIP_FRAMES, NULL, &v);
    T_CHECK(v.motion == -1, "a clip that jumps back judged motion %d", v.motion);
    /* diagonal drift: right and down frame after frame is neither */
    demo_render_clip(DEMO_SQUARE, DEMO_YELLOW, DEMO_BLACK, DEMO_MOVE_RIGHT, 3, clip);
    for (int f = 0; f < DEMO_CLIP_FRAMES; f++) {
        uint8_t *fr = clip + (size_t)f * FRAME_BYTES;
        int dy = 2 * f; /* shift the frame down by 2f rows, background on top */
        memmove(fr + (size_t)dy * DEMO_SIZE * DEMO_CHANNELS, fr,
                (size_t)(DEMO_SIZE - dy) * DEMO_SIZE * DEMO_CHANNELS);
        for (int y = 0; y < dy; y++)
            for (int x = 0; x < DEMO_SIZE; x++)
                memcpy(fr + ((size_t)y * DEMO_SIZE + x) * DEMO_CHANNELS, demo_palette[DEMO_BLACK],
                       DEMO_CHANNELS);
    }
    demo_judge_clip(clip, DEMO_CLIP_FRAMES, NULL, &v);
    T_CHECK(v.motion == -1, "a diagonal clip judged motion %d (steps %.2f, %.2f)", v.motion,
            v.step_x, v.step_y);
    /* image-to-video: the start against the given picture */
    demo_verdict ref;
    demo_render_clip(DEMO_CIRCLE, DEMO_RED, DEMO_BLUE, DEMO_MOVE_UP, 9, clip);
    demo_judge(clip, &ref);
    demo_judge_clip(clip, DEMO_CLIP_FRAMES, &ref, &v);
    T_CHECK(v.start_dist < 0.5f && v.motion == DEMO_MOVE_UP, "start %.2f px from the picture",
            v.start_dist);
    demo_judge(clip + 8 * (size_t)FRAME_BYTES,
               &ref); /* the last frame as the given picture: 16 px away */
    demo_judge_clip(clip, DEMO_CLIP_FRAMES, &ref, &v);
    T_CHECK(fabsf(v.start_dist - 8 * DEMO_MOTION_STEP) < 1.0f,
            "start %.2f px from a picture 16 px away", v.start_dist);
}

int main(void) {
    test_world();
    test_clips();
    uint8_t rgb[DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS];
    int total[N_VARIANTS] = {0}, ok[N_VARIANTS][4] = {{0}};
    int all = 0, all_ok[4] = {0}, shown = 0;
    float fill_lo[DEMO_N_SHAPES], fill_hi[DEMO_N_SHAPES], taper_lo[DEMO_N_SHAPES], taper_hi[DEMO_N_SHAPES];
    for (int sh = 0; sh < DEMO_N_SHAPES; sh++) fill_lo[sh] = taper_lo[sh] = 1e9f, fill_hi[sh] = taper_hi[sh] = -1e9f;
    rng_state = 12345;
    uint64_t seed = 1;
    for (int v = 0; v < N_VARIANTS; v++)
        for (int sh = 0; sh < DEMO_N_SHAPES; sh++)
            for (int c = 0; c < DEMO_N_COLOURS; c++)
                for (int b = 0; b < DEMO_N_COLOURS; b++) {
                    if (b == c) continue;
                    for (int pl = 0; pl < DEMO_N_PLACES; pl++, seed++) {
                        if (demo_render(sh, c, b, pl, seed, rgb) != 0) {
                            T_CHECK(0, "render %d %d %d %d failed", sh, c, b, pl);
                            continue;
                        }
                        if (v == V_BLUR || v == V_BLUR_NOISE) box_blur(rgb);
                        if (v == V_NOISE || v == V_BLUR_NOISE) add_noise(rgb);
                        demo_verdict d;
                        demo_judge(rgb, &d);
                        int right[4] = {d.bg == b, d.colour == c, d.shape == sh, d.place == pl};
                        total[v]++;
                        fill_lo[sh] = fminf(fill_lo[sh], d.fill), fill_hi[sh] = fmaxf(fill_hi[sh], d.fill);
                        taper_lo[sh] = fminf(taper_lo[sh], d.taper), taper_hi[sh] = fmaxf(taper_hi[sh], d.taper);
                        all++;
                        for (int k = 0; k < 4; k++) ok[v][k] += right[k], all_ok[k] += right[k];
                        if (!(right[0] && right[1] && right[2] && right[3]) && shown++ < 10)
                            fprintf(stderr,
                                    "miss (%s): %s %s on %s %s -> %d %d %d %d (fill %.3f taper %.2f "
                                    "at %.1f,%.1f)\n",
                                    variant_names[v], demo_colour_names[c], demo_shape_names[sh],
                                    demo_colour_names[b], demo_place_phrases[pl], d.colour, d.shape,
                                    d.bg, d.place, d.fill, d.taper, d.cx, d.cy);
                    }
                }
    static const char *const what[4] = {"background", "object colour", "shape", "place"};
    for (int v = 0; v < N_VARIANTS; v++)
        fprintf(stderr, "%-10s %4d pictures: bg %.2f%%  colour %.2f%%  shape %.2f%%  place %.2f%%\n",
                variant_names[v], total[v], 100.0 * ok[v][0] / total[v], 100.0 * ok[v][1] / total[v],
                100.0 * ok[v][2] / total[v], 100.0 * ok[v][3] / total[v]);
    for (int sh = 0; sh < DEMO_N_SHAPES; sh++)
        fprintf(stderr, "%-8s fill %.3f..%.3f  taper %.2f..%.2f\n", demo_shape_names[sh], fill_lo[sh],
                fill_hi[sh], taper_lo[sh], taper_hi[sh]);
    T_CHECK(all >= 600, "only %d pictures", all);
    for (int k = 0; k < 4; k++) {
        double acc = (double)all_ok[k] / all;
        fprintf(stderr, "all %d pictures: %s %.2f%%\n", all, what[k], 100.0 * acc);
        T_CHECK(acc >= MIN_ACCURACY, "%s right on %.2f%% < 99%%", what[k], 100.0 * acc);
        for (int v = 0; v < N_VARIANTS; v++)
            T_CHECK((double)ok[v][k] / total[v] >= MIN_ACCURACY, "%s (%s) right on %.2f%%", what[k],
                    variant_names[v], 100.0 * ok[v][k] / total[v]);
    }
    return t_done("judge");
}
