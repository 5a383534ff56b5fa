/* frames.c - float planes to interleaved uint8 RGB. */
#include "frames.h"

#include <math.h>
#include <stddef.h>

void frames_to_rgb(const float *pixels, int F, int H, int W, uint8_t *rgb) {
    size_t plane = (size_t)F * H * W; /* one channel of every frame */
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float v = pixels[(size_t)c * plane + i] * 0.5f + 0.5f;
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            rgb[i * 3 + c] = (uint8_t)lrintf(v * 255.0f);
        }
}
