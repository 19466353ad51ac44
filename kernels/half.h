/*
 * half.h — fp16/bf16 <-> fp32 conversions as branch-free inline bit arithmetic, for every CPU
 * loop that converts (kernels/cpu/convert.c's exported zk_* functions and shard/reduce.c's
 * reduction loops), so there is one definition of the rounding.
 *
 * Round to nearest even everywhere. Widening is exact. For a non-nan input the narrowing results
 * are the one right answer (the same bits as the F16C instructions and as _Float16 casts); for a
 * nan they are unspecified — callers that can see nans (zk_f32_to_f16 / zk_f32_to_bf16) handle
 * them first. Written with masks instead of branches so that loops over them vectorise.
 */
#ifndef ZINC_KERNELS_HALF_H
#define ZINC_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline float zh_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t zh_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float zh_bf16_to_f32(uint16_t b) { return zh_bits_f32((uint32_t)b << 16); }

/* Exact fp16 -> fp32 (nans keep their payload, quiet bit as stored). Normal and inf/nan: move
 * the exponent and mantissa into place and rebias. Subnormal: the value is mant * 2^-24, exactly
 * representable, so an int->float conversion and a power-of-two multiply give it. */
static inline float zh_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t exp = em & 0x7c00u;
    uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
    uint32_t infnan = (em << 13) | 0x7f800000u;
    float sub = (float)(int32_t)em * 0x1p-24f;
    uint32_t is_infnan = 0u - (uint32_t)(exp == 0x7c00u);
    uint32_t is_sub = 0u - (uint32_t)(exp == 0);
    uint32_t mag = (infnan & is_infnan) | (normal & ~is_infnan);
    mag = (zh_f32_bits(sub) & is_sub) | (mag & ~is_sub);
    return zh_bits_f32(sign | mag);
}

/* fp32 -> bf16 of a non-nan value (overflow carries into inf by itself). */
static inline uint16_t zh_f32_to_bf16(float f)
{
    uint32_t u = zh_f32_bits(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* fp32 -> fp16 of a non-nan value.
 *  - |f| >= 65520 (the midpoint above the largest half, 65504): inf.
 *  - |f| < 2^-14 (half subnormals): adding 0.5 makes the FPU round f to a multiple of 2^-24 with
 *    ties to even (the default rounding mode); the low mantissa bits are then the half's bits.
 *  - otherwise: rebias the exponent and round the 13 dropped mantissa bits to nearest even by
 *    integer addition (a carry into the exponent is the right answer, up to inf at 65520). */
static inline uint16_t zh_f32_to_f16(float f)
{
    uint32_t u = zh_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t normal = (a - ((uint32_t)(127 - 15) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    uint32_t sub = zh_f32_bits(zh_bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000u);
    uint32_t is_inf = 0u - (uint32_t)(a >= 0x477ff000u);
    uint32_t mag = (sub & is_sub) | (normal & ~is_sub);
    mag = (0x7c00u & is_inf) | (mag & ~is_inf);
    return (uint16_t)(sign | mag);
}

#endif
