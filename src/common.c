/* common.c - the tensor element types and their conversions (the rest of
 * the base is base/c3base.c). */
#include "common.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[C3_NDTYPE] = {
    [C3_F32] = {"F32", 4},        [C3_BF16] = {"BF16", 2}, [C3_F16] = {"F16", 2},
    [C3_I64] = {"I64", 8},        [C3_I32] = {"I32", 4},   [C3_U8] = {"U8", 1},
    [C3_F8E4M3] = {"F8_E4M3", 1},
};
size_t c3_dtype_size(c3_dtype t) { return (unsigned)t < C3_NDTYPE ? dtypes[t].size : 0; }
const char *c3_dtype_name(c3_dtype t) { return (unsigned)t < C3_NDTYPE ? dtypes[t].name : "?"; }
int c3_dtype_parse(const char *s, c3_dtype *out) {
    for (int i = 0; i < C3_NDTYPE; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (c3_dtype)i;
            return 0;
        }
    return -1;
}

float c3_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t c3_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

float c3_e4m3_to_f32(uint8_t v) {
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    if (exp == 0xf && man == 7) return NAN;
    float m = exp ? ldexpf(1.0f + (float)man / 8.0f, exp - 7) : ldexpf((float)man / 8.0f, -6);
    return sign ? -m : m;
}

uint8_t c3_f32_to_e4m3(float f) {
    /* on the float's bits (the load path quantises billions of values):
     * round to nearest even at the E4M3 quantum, saturating to 448 */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint8_t sign = (uint8_t)(u >> 24) & 0x80;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;         /* NaN */
    if (a >= 0x43e00000u) return sign | 0x7e; /* >= 448 (and inf): saturate */
    if (a < 0x3c800000u) {                    /* below 2^-6: subnormal quanta of 2^-9 */
        float v;
        memcpy(&v, &a, sizeof v);
        return sign | (uint8_t)(int)rintf(v * 512.0f); /* 8 is 2^-6 itself: code 0x08 */
    }
    /* normal: keep 3 of the 23 mantissa bits, ties to even; a carry moves the
     * exponent up, as it should; rebias 127 -> 7 */
    a += 0x7ffffu + ((a >> 20) & 1);
    uint32_t c = (a >> 20) - ((127 - 7) << 3);
    return sign | (uint8_t)(c > 0x7e ? 0x7e : c);
}

void c3_to_f32(float *dst, const void *src, c3_dtype t, size_t n) {
    switch (t) {
    case C3_F32: memcpy(dst, src, n * 4); break;
    case C3_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = c3_bf16_to_f32(s[i]);
        break;
    }
    case C3_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = c3_f16_to_f32(s[i]);
        break;
    }
    case C3_I64: {
        const int64_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        break;
    }
    case C3_I32: {
        const int32_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        break;
    }
    case C3_U8: {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        break;
    }
    case C3_F8E4M3: {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = c3_e4m3_to_f32(s[i]);
        break;
    }
    default: memset(dst, 0, n * 4);
    }
}

size_t c3_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

