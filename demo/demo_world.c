/* demo_world.c - the demo model's synthetic world: renderer and captions. */
#include "demo_world.h"

#include <stdio.h>

const char *const demo_shape_names[DEMO_N_SHAPES] = {"circle", "square", "triangle"};
const char *const demo_colour_names[DEMO_N_COLOURS] = {"red",    "green",  "blue",  "yellow",
                                                       "purple", "orange", "white", "black"};
const char *const demo_place_phrases[DEMO_N_PLACES] = {
    "in the center", "on the left", "on the right", "at the top", "at the bottom"};
const uint8_t demo_palette[DEMO_N_COLOURS][DEMO_CHANNELS] = {
    {215, 25, 35},  {30, 170, 50},  {40, 70, 220},   {250, 225, 40},
    {140, 50, 170}, {245, 130, 20}, {245, 245, 245}, {20, 20, 20}};
const int demo_place_dx[DEMO_N_PLACES] = {0, -DEMO_PLACE_STEP, DEMO_PLACE_STEP, 0, 0};
const int demo_place_dy[DEMO_N_PLACES] = {0, 0, 0, -DEMO_PLACE_STEP, DEMO_PLACE_STEP};

/* splitmix64: one well-mixed 64-bit value per call */
static uint64_t mix_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int uniform_int(uint64_t *s, int lo, int hi) { /* inclusive */
    return lo + (int)(mix_next(s) % (uint64_t)(hi - lo + 1));
}

demo_geom demo_geometry(int place, uint64_t seed) {
    demo_geom g = {DEMO_CENTRE, DEMO_CENTRE, DEMO_SIZE_MIN};
    if (place < 0 || place >= DEMO_N_PLACES) return g;
    uint64_t s = seed;
    g.size = uniform_int(&s, DEMO_SIZE_MIN, DEMO_SIZE_MAX);
    g.cx = DEMO_CENTRE + demo_place_dx[place] + uniform_int(&s, -DEMO_JITTER, DEMO_JITTER);
    g.cy = DEMO_CENTRE + demo_place_dy[place] + uniform_int(&s, -DEMO_JITTER, DEMO_JITTER);
    return g;
}

/* Is the point (px, py) inside the shape of geometry g? */
static int inside(int shape, demo_geom g, double px, double py) {
    double dx = px - g.cx, dy = py - g.cy, r = g.size;
    switch (shape) {
    case DEMO_CIRCLE: return dx * dx + dy * dy <= r * r;
    case DEMO_SQUARE: return dx >= -r && dx <= r && dy >= -r && dy <= r;
    case DEMO_TRIANGLE: /* apex (cx, cy - r), base y = cy + r, base width 2r */
        if (dy < -r || dy > r) return 0;
        return (dx < 0 ? -dx : dx) <= (dy + r) / 2;
    default: return 0;
    }
}

int demo_render(int shape, int colour, int bg, int place, uint64_t seed, uint8_t *rgb) {
    if (shape < 0 || shape >= DEMO_N_SHAPES || colour < 0 || colour >= DEMO_N_COLOURS || bg < 0 ||
        bg >= DEMO_N_COLOURS || colour == bg || place < 0 || place >= DEMO_N_PLACES || !rgb)
        return -1;
    demo_geom g = demo_geometry(place, seed);
    for (int y = 0; y < DEMO_SIZE; y++)
        for (int x = 0; x < DEMO_SIZE; x++) {
            const uint8_t *c = demo_palette[inside(shape, g, x + 0.5, y + 0.5) ? colour : bg];
            uint8_t *p = rgb + ((size_t)y * DEMO_SIZE + x) * DEMO_CHANNELS;
            for (int k = 0; k < DEMO_CHANNELS; k++) p[k] = c[k];
        }
    return 0;
}

int demo_caption(int shape, int colour, int bg, int place, char *buf, size_t n) {
    if (shape < 0 || shape >= DEMO_N_SHAPES || colour < 0 || colour >= DEMO_N_COLOURS || bg < 0 ||
        bg >= DEMO_N_COLOURS || place < DEMO_NO_PLACE || place >= DEMO_N_PLACES || !buf)
        return -1;
    int len = snprintf(buf, n, "a %s %s on a %s background%s%s", demo_colour_names[colour],
                       demo_shape_names[shape], demo_colour_names[bg],
                       place == DEMO_NO_PLACE ? "" : ", ",
                       place == DEMO_NO_PLACE ? "" : demo_place_phrases[place]);
    return len < 0 || (size_t)len >= n ? -1 : len;
}

/* ------------------------------------------------------------ clips */

const char *const demo_motion_phrases[DEMO_N_MOTIONS] = {
    "not moving", "moving to the right", "moving to the left", "moving up", "moving down"};
const int demo_motion_dx[DEMO_N_MOTIONS] = {0, 1, -1, 0, 0};
const int demo_motion_dy[DEMO_N_MOTIONS] = {0, 0, 0, -1, 1};

demo_geom demo_clip_geometry(int motion, uint64_t seed, int f) {
    demo_geom g = demo_geometry(DEMO_CENTER, seed);
    if (motion < 0 || motion >= DEMO_N_MOTIONS) return g;
    int k = (f - (DEMO_CLIP_FRAMES - 1) / 2) * DEMO_MOTION_STEP; /* -8 .. 8 px */
    g.cx += demo_motion_dx[motion] * k;
    g.cy += demo_motion_dy[motion] * k;
    return g;
}

int demo_render_clip(int shape, int colour, int bg, int motion, uint64_t seed, uint8_t *rgb) {
    if (shape < 0 || shape >= DEMO_N_SHAPES || colour < 0 || colour >= DEMO_N_COLOURS || bg < 0 ||
        bg >= DEMO_N_COLOURS || colour == bg || motion < 0 || motion >= DEMO_N_MOTIONS || !rgb)
        return -1;
    for (int f = 0; f < DEMO_CLIP_FRAMES; f++) {
        demo_geom g = demo_clip_geometry(motion, seed, f);
        uint8_t *fr = rgb + (size_t)f * DEMO_SIZE * DEMO_SIZE * DEMO_CHANNELS;
        for (int y = 0; y < DEMO_SIZE; y++)
            for (int x = 0; x < DEMO_SIZE; x++) {
                const uint8_t *c = demo_palette[inside(shape, g, x + 0.5, y + 0.5) ? colour : bg];
                uint8_t *p = fr + ((size_t)y * DEMO_SIZE + x) * DEMO_CHANNELS;
                for (int k = 0; k < DEMO_CHANNELS; k++)
                    p[k] = c[k];
            }
    }
    return 0;
}

int demo_clip_caption(int shape, int colour, int bg, int motion, char *buf, size_t n) {
    if (shape < 0 || shape >= DEMO_N_SHAPES || colour < 0 || colour >= DEMO_N_COLOURS || bg < 0 ||
        bg >= DEMO_N_COLOURS || motion < 0 || motion >= DEMO_N_MOTIONS || !buf)
        return -1;
    int len = snprintf(buf, n, "a %s %s on a %s background, %s", demo_colour_names[colour],
                       demo_shape_names[shape], demo_colour_names[bg], demo_motion_phrases[motion]);
    return len < 0 || (size_t)len >= n ? -1 : len;
}
