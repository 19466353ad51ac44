/*
 * convert.c — scalar fp32 <-> fp16/bf16 conversions and typed element access.
 *
 * These are bit-exact twins of what the SIMD paths do in hardware or integer code: round to
 * nearest even, subnormals kept, overflow to inf, NaN made quiet with its sign and top payload
 * bits kept (F16C's VCVTPS2PH / VCVTPH2PS behaviour). The rounding itself is kernels/half.h's,
 * shared with the reduction loops; it assumes the default FPU rounding mode (nearest even).
 */
#include <stdint.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/half.h"

/* Non-nan values go through kernels/half.h, the one definition of the rounding; nans are
 * handled here, keeping the quiet bit set and as much payload as fits (as F16C does). */
uint16_t zk_f32_to_f16(float f)
{
    uint32_t x = zh_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
    return zh_f32_to_f16(f);
}

float zk_f16_to_f32(uint16_t h)
{
    /* A nan keeps its payload with the quiet bit set, as F16C's widening does. */
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        return zh_bits_f32(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ffu) << 13));
    return zh_f16_to_f32(h);
}

uint16_t zk_f32_to_bf16(float f)
{
    uint32_t x = zh_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return zh_f32_to_bf16(f);
}

float zk_bf16_to_f32(uint16_t b) { return zh_bf16_to_f32(b); }

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
