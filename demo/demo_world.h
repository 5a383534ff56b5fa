/* demo_world.h - the synthetic world of the built-in demo model (issue 13):
 * 64x64 RGB pictures of one object (circle, square, triangle apex up) on a
 * plain background, eight fixed sRGB colours, five places. A seeded renderer
 * for ground truth and the caption builder. See demo/demo_world.md. */
#ifndef COSMOS3_DEMO_WORLD_H
#define COSMOS3_DEMO_WORLD_H

#include <stddef.h>
#include <stdint.h>

#define DEMO_SIZE 64        /* picture side, pixels */
#define DEMO_CHANNELS 3     /* RGB, 8 bits each */
#define DEMO_CENTRE 32      /* x and y of the centre place */
#define DEMO_PLACE_STEP 10  /* offset of the four outer places from the centre, px */
#define DEMO_JITTER 2       /* +- jitter of the object's centre, px */
#define DEMO_SIZE_MIN 10    /* object "radius" / half side, px (inclusive) */
#define DEMO_SIZE_MAX 15

enum demo_shape { DEMO_CIRCLE, DEMO_SQUARE, DEMO_TRIANGLE, DEMO_N_SHAPES };
enum demo_colour {
    DEMO_RED, DEMO_GREEN, DEMO_BLUE, DEMO_YELLOW,
    DEMO_PURPLE, DEMO_ORANGE, DEMO_WHITE, DEMO_BLACK, DEMO_N_COLOURS
};
/* The order of the place phrases below; DEMO_NO_PLACE = caption without one. */
enum demo_place { DEMO_CENTER, DEMO_LEFT, DEMO_RIGHT, DEMO_TOP, DEMO_BOTTOM, DEMO_N_PLACES };
#define DEMO_NO_PLACE (-1)

extern const char *const demo_shape_names[DEMO_N_SHAPES];   /* "circle", ... */
extern const char *const demo_colour_names[DEMO_N_COLOURS]; /* "red", ... */
extern const char *const demo_place_phrases[DEMO_N_PLACES]; /* "in the center", ... */
extern const uint8_t demo_palette[DEMO_N_COLOURS][DEMO_CHANNELS]; /* sRGB */
extern const int demo_place_dx[DEMO_N_PLACES], demo_place_dy[DEMO_N_PLACES];

/* What the renderer chose from its seed: object centre (px, y grows down)
 * and size ("radius" / half side). */
typedef struct {
    int cx, cy, size;
} demo_geom;

/* The geometry that seed gives at place: size uniform in [DEMO_SIZE_MIN,
 * DEMO_SIZE_MAX], centre = place + jitter uniform in [-DEMO_JITTER, DEMO_JITTER]. */
demo_geom demo_geometry(int place, uint64_t seed);

/* Draw shape in colour on bg at place (jitter and size from seed) into
 * rgb [DEMO_SIZE, DEMO_SIZE, 3], row-major, top row first. Pixel (x, y) is
 * object when its centre (x + 0.5, y + 0.5) lies inside the shape. Returns 0,
 * or -1 (rgb untouched) when an argument is out of range or colour == bg. */
int demo_render(int shape, int colour, int bg, int place, uint64_t seed, uint8_t *rgb);

/* "a {colour} {shape} on a {bg} background[, {place phrase}]" into buf
 * (place DEMO_NO_PLACE: no phrase). Returns the length, or -1 on a bad
 * argument or when buf (n bytes) is too small. */
int demo_caption(int shape, int colour, int bg, int place, char *buf, size_t n);

/* ---- clips (issue 22 item 4: the demo model learns motion) ----
 * DEMO_CLIP_FRAMES frames of DEMO_SIZE x DEMO_SIZE; the object (one
 * geometry from the seed, at the centre place) moves DEMO_MOTION_STEP px a
 * frame in one direction, from half the travel before the centre to half
 * after it, or stands still. */
#define DEMO_CLIP_FRAMES 9 /* 1 + 4 * 2: three latent frames */
#define DEMO_MOTION_STEP 2 /* px a frame: 16 px over the clip */
enum demo_motion {
    DEMO_STILL,
    DEMO_MOVE_RIGHT,
    DEMO_MOVE_LEFT,
    DEMO_MOVE_UP,
    DEMO_MOVE_DOWN,
    DEMO_N_MOTIONS
};
extern const char
    *const demo_motion_phrases[DEMO_N_MOTIONS]; /* "not moving", "moving to the right", ... */
extern const int demo_motion_dx[DEMO_N_MOTIONS], demo_motion_dy[DEMO_N_MOTIONS]; /* unit steps */

/* The object's geometry in frame f of a clip. */
demo_geom demo_clip_geometry(int motion, uint64_t seed, int f);

/* Draw the clip into rgb [DEMO_CLIP_FRAMES, DEMO_SIZE, DEMO_SIZE, 3].
 * Returns 0, or -1 (rgb untouched) on a bad argument or colour == bg. */
int demo_render_clip(int shape, int colour, int bg, int motion, uint64_t seed, uint8_t *rgb);

/* "a {colour} {shape} on a {bg} background, {motion phrase}" into buf.
 * Returns the length, or -1 on a bad argument or a short buffer. */
int demo_clip_caption(int shape, int colour, int bg, int motion, char *buf, size_t n);

#endif
