/*
 * half.h — fp16/bf16 <-> fp32 conversions for the model's own use. The model reaches the engine
 * only through include/zinc.h, so it converts the engine's 16-bit views itself: round to nearest
 * even, NaN stays NaN, overflow to infinity (fp16).
 */
#ifndef ZINC_MODELS_HALF_H
#define ZINC_MODELS_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "zinc.h"

static inline uint32_t zm_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static inline float zm_from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t zm_f32_to_f16(float f)
{
    uint32_t x = zm_bits(f), ax = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {
        /* below the smallest normal half (2^-14): multiples of 2^-24; the scaling is exact and
         * nearbyintf rounds half to even in the default rounding mode. */
        return (uint16_t)(sign | (uint16_t)nearbyintf(zm_from_bits(ax) * 16777216.0f));
    }
    /* Drop 13 mantissa bits with round-to-nearest-even, then rebias the exponent 127 -> 15;
     * a carry out of the mantissa correctly bumps the exponent. */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float zm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f; /* 2^-24 */
        return sign ? -f : f;
    }
    if (e == 31) return zm_from_bits(sign | 0x7f800000u | (m << 13));
    return zm_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t zm_f32_to_bf16(float f)
{
    uint32_t x = zm_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float zm_bf16_to_f32(uint16_t b) { return zm_from_bits((uint32_t)b << 16); }

/* n elements of dtype dt at src -> fp32 dst. */
static inline void zm_load(float *dst, const void *src, zinc_dtype dt, size_t n)
{
    if (dt == ZINC_DTYPE_FP32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (dt == ZINC_DTYPE_FP16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = zm_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = zm_bf16_to_f32(s[i]);
    }
}

/* dst[i] += src[i] in dtype dt (one rounding per element). */
static inline void zm_add_into(void *dst, const float *src, zinc_dtype dt, size_t n)
{
    if (dt == ZINC_DTYPE_FP32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] += src[i];
    } else if (dt == ZINC_DTYPE_FP16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = zm_f32_to_f16(zm_f16_to_f32(d[i]) + src[i]);
    } else {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = zm_f32_to_bf16(zm_bf16_to_f32(d[i]) + src[i]);
    }
}

#endif
