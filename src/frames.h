/* frames.h - decoded pixels to the frames a caller gets. */
#ifndef COSMOS3_FRAMES_H
#define COSMOS3_FRAMES_H

#include <stdint.h>

/* pixels: [3, F, H, W] floats in [-1, 1] -> rgb: [F, H, W, 3] uint8
 * (x / 2 + 1/2, clamped, rounded to nearest). */
void frames_to_rgb(const float *pixels, int F, int H, int W, uint8_t *rgb);

#endif
