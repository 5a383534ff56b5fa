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

int main(void) {
    test_world();
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
