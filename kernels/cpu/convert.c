/*
 * convert.c — scalar fp32 <-> fp16/bf16 conversions and typed element access.
 *
 * These are bit-exact twins of what the SIMD paths do in hardware or integer code: round to
 * nearest even, subnormals kept, overflow to inf, NaN made quiet with its sign and top payload
 * bits kept (F16C's VCVTPS2PH / VCVTPH2PS behaviour). Integer-only, so the result never depends
 * on the FPU mode or the compiler flags.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/device.h"

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t zk_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet bit set, top 9 payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: ties to even go up, to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Below 2^-14: an fp16 subnormal (or zero), counted in units of 2^-24. The value is
         * mant * 2^(e - 150), i.e. mant >> (126 - e) units, rounded to nearest even. */
        uint32_t e = ax >> 23;
        uint32_t shift = 126u - e;
        if (shift > 24u) return (uint16_t)sign; /* < 2^-25 (ties at 2^-25 go to even 0) */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++; /* q may reach 0x400: min normal */
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent (127 -> 15) and round 13 mantissa bits away; a carry into
     * the exponent is the correct result. */
    uint32_t r = ax - 0x38000000u;
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}

float zk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        /* Zero or subnormal: m * 2^-24 is exact in fp32. */
        float f = (float)m * 0x1p-24f;
        return u2f(f2u(f) | sign);
    }
    if (e == 31)
        return u2f(sign | (m ? 0x7fc00000u | (m << 13) : 0x7f800000u));
    return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t zk_f32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    /* Round to nearest even on the low 16 bits; overflow carries into inf by itself. */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float zk_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

float zk_load(const void *p, zinc_dtype dt, size_t i)
{
    switch (dt) {
    case ZINC_DTYPE_FP16: return zk_f16_to_f32(((const uint16_t *)p)[i]);
    case ZINC_DTYPE_BF16: return zk_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void zk_store(void *p, zinc_dtype dt, size_t i, float x)
{
    switch (dt) {
    case ZINC_DTYPE_FP16: ((uint16_t *)p)[i] = zk_f32_to_f16(x); break;
    case ZINC_DTYPE_BF16: ((uint16_t *)p)[i] = zk_f32_to_bf16(x); break;
    default: ((float *)p)[i] = x; break;
    }
}
