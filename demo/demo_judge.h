/* demo_judge.h - the picture judge of the demo world (issue 13): from one
 * DEMO_SIZE x DEMO_SIZE RGB image alone, decide background colour, object
 * colour, shape and place. Robust to the noise and blur of generated
 * pictures: medians, colour-distance thresholds, the largest connected
 * component. Rules in demo/demo_world.md. */
#ifndef COSMOS3_DEMO_JUDGE_H
#define COSMOS3_DEMO_JUDGE_H

#include <stdint.h>

#include "demo_world.h"

/* Fewer object pixels than this: no object found. */
#define DEMO_JUDGE_MIN_AREA 40

typedef struct {
    int bg;          /* enum demo_colour */
    int colour;      /* enum demo_colour, never == bg; -1 when no object */
    int shape;       /* enum demo_shape; -1 when no object */
    int place;       /* enum demo_place; -1 when no object */
    float cx, cy;    /* the object's place estimate, px */
    float fill;      /* object area / bounding-box area */
    float taper;     /* mean width of the bottom third / of the top third */
    int area;        /* pixels in the object's component */
} demo_verdict;

/* Judge rgb [DEMO_SIZE, DEMO_SIZE, 3]. Returns 0 with every field set, or -1
 * when no object was found (bg still set, the rest -1 / 0). */
int demo_judge(const uint8_t *rgb, demo_verdict *v);

/* ---- clips: each frame judged as a picture, then the motion ---- */
#define DEMO_MOTION_MIN 1.0f    /* px a frame along the axis: below, the clip is still */
#define DEMO_MOTION_SLACK 0.75f /* px a frame may step back against the direction */

typedef struct {
    int bg, colour, shape; /* the frames' majority verdicts; -1 if none has a majority */
    int frames_found;      /* frames with an object */
    int consistent;        /* frames whose bg, colour and shape equal the majority */
    int motion;            /* enum demo_motion; -1 when the steps do not agree */
    float step_x, step_y;  /* mean step of the centre, px a frame */
    float start_dist;      /* frame 0's centre to (ref_cx, ref_cy), px; 0 without a ref */
} demo_clip_verdict;

/* Judge nframes frames [nframes, DEMO_SIZE, DEMO_SIZE, 3]. The motion is the
 * axis of the larger mean step when it reaches DEMO_MOTION_MIN and no frame
 * steps back by more than DEMO_MOTION_SLACK along it (nor the other axis
 * drifts by more than the mean); still when both mean steps are below
 * DEMO_MOTION_MIN / 2; else -1. ref: the given first picture's verdict
 * (image-to-video: the clip must start where it has the object), or NULL.
 * Returns 0, or -1 when an object is missing in some frame. */
int demo_judge_clip(const uint8_t *frames, int nframes, const demo_verdict *ref,
                    demo_clip_verdict *v);

#endif
