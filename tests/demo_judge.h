/* demo_judge.h - the picture judge of the demo world (issue 13): from one
 * DEMO_SIZE x DEMO_SIZE RGB image alone, decide background colour, object
 * colour, shape and place. Robust to the noise and blur of generated
 * pictures: medians, colour-distance thresholds, the largest connected
 * component. Rules in tests/demo_world.md. */
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

#endif
