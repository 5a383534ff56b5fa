/* common.h - the engine's base: c3base.h (errors as values, checked libc
 * calls, allocation, files, time) and the tensor element types.
 */
#ifndef COSMOS3_COMMON_H
#define COSMOS3_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/c3base.h"

/* Element types of stored tensors. */
/* C3_F8E4M3: FP8 E4M3 ("F8_E4M3", torch.float8_e4m3fn: no infinities, max 448). */
typedef enum { C3_F32, C3_BF16, C3_F16, C3_I64, C3_I32, C3_U8, C3_F8E4M3, C3_NDTYPE } c3_dtype;
size_t c3_dtype_size(c3_dtype t);
const char *c3_dtype_name(c3_dtype t);     /* safetensors spelling: "F32", "BF16", ... */
int c3_dtype_parse(const char *s, c3_dtype *out); /* 0 on success */

static inline float c3_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t c3_f32_to_bf16(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float c3_f16_to_f32(uint16_t h);
/* FP8 E4M3 <-> float: round to nearest even, saturating to +-448 (NaN stays NaN). */
float c3_e4m3_to_f32(uint8_t v);
uint8_t c3_f32_to_e4m3(float f);
#define C3_E4M3_MAX 448.0f
uint16_t c3_f32_to_f16(float f);
/* Convert n elements of `src` (type t) to float. */
void c3_to_f32(float *dst, const void *src, c3_dtype t, size_t n);

/* The index of the first NaN or infinity in x[0..n), or n (by the bits, so
 * that no compiler flag can fold the test away). */
size_t c3_first_nonfinite(const float *x, size_t n);

#endif
