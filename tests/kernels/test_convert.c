/*
 * test_convert.c — the scalar conversions of kernels/cpu/convert.c against independent
 * references, and the SIMD conversions (through the cast kernel) against the scalar ones:
 *   - all 65536 fp16 patterns: fp16 -> fp32 equals the compiler's _Float16 conversion (gcc 12,
 *     x86-64) and F16C's VCVTPH2PS, and fp32 -> fp16 gives the pattern back (NaNs: quieted);
 *   - fp32 -> fp16 equals (_Float16)x on edge cases (ties, subnormals, overflow, inf) and on
 *     millions of random floats; NaN results are quiet NaNs with the sign and top payload bits
 *     (checked against F16C's VCVTPS2PH where the CPU has it);
 *   - fp32 -> bf16 equals a nearest-of-two-candidates reference computed in double;
 *   - every ISA's cast kernel converts every fp16 and bf16 pattern and the same random floats
 *     with the same bits as the scalar code.
 */
#include <immintrin.h>
#include <stdlib.h>

#include "base/cpu_isa.h"
#include "kt.h"

static uint16_t h_of(_Float16 h)
{
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

static _Float16 h_from(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, sizeof h);
    return h;
}

__attribute__((target("f16c"))) static uint16_t f16c_to_half(float x)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(x), _MM_FROUND_TO_NEAREST_INT), 0);
}

__attribute__((target("f16c"))) static float f16c_to_float(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16((short)h)));
}

/* bf16 reference: of the two bf16 values around |x| (truncation t and t + 1), the nearer one,
 * the even one on a tie; the value above the largest finite bf16 is inf and counts as 2^128 in
 * the distance. Differences of such values are exact in double. */
static uint16_t bf16_ref(float x)
{
    uint32_t u = kt_f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t au = u & 0x7fffffffu;
    if (au > 0x7f800000u) return (uint16_t)(sign | 0x7fc0u | ((au >> 16) & 0x3fu));
    if (au == 0x7f800000u) return (uint16_t)(sign | 0x7f80u);
    uint16_t t = (uint16_t)(au >> 16);
    double ax = fabs((double)x);
    double lo = (double)kt_u2f((uint32_t)t << 16);
    double hi = t + 1 == 0x7f80 ? 0x1p128 : (double)kt_u2f((uint32_t)(t + 1) << 16);
    double dl = ax - lo, dh = hi - ax;
    uint16_t q = (dl < dh || (dl == dh && (t & 1) == 0)) ? t : (uint16_t)(t + 1);
    return (uint16_t)(sign | q);
}

static int check_f16(float x)
{
    uint16_t got = zk_f32_to_f16(x);
    if (isnan(x)) {
        /* sign, quiet bit, top payload bits: what F16C does */
        uint32_t u = kt_f2u(x);
        uint16_t want = (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
        return got == want;
    }
    return got == h_of((_Float16)x);
}

static float random_float(zt_rng *r)
{
    switch (zt_next(r) % 4) {
    case 0: return kt_u2f((uint32_t)zt_next(r)); /* any bit pattern */
    case 1: /* the fp16 range, subnormals included */
        return ((zt_next(r) & 1) ? -1.0f : 1.0f) * ldexpf((float)zt_uniform(r), -26 + (int)(zt_next(r) % 44));
    case 2: /* exactly between two fp16 values or one bit off it */
    {
        uint16_t h = (uint16_t)(zt_next(r) & 0x7bffu);
        float a = zk_f16_to_f32(h), b = zk_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        int k = (int)(zt_next(r) % 3) - 1;
        return k ? nextafterf(mid, k > 0 ? INFINITY : 0.0f) : mid;
    }
    default: return kt_value(r);
    }
}

int main(void)
{
    __builtin_cpu_init();
    int has_f16c = zisa_has_f16c();
    if (!has_f16c) printf("test_convert: no F16C on this CPU; hardware comparisons skipped\n");

    /* All fp16 patterns. */
    int bad_up = 0, bad_rt = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = zk_f16_to_f32((uint16_t)h);
        float want = (float)h_from((uint16_t)h);
        int isn = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (isn ? !isnan(f) || (kt_f2u(f) >> 31) != (h >> 15) : kt_f2u(f) != kt_f2u(want)) bad_up++;
        uint16_t back = zk_f32_to_f16(f);
        if (back != (isn ? (h | 0x200u) : h)) bad_rt++;
        if (has_f16c && kt_f2u(f16c_to_float((uint16_t)h)) != kt_f2u(f)) bad_hw++;
    }
    ZT_CHECK(bad_up == 0, "%d fp16 patterns convert to fp32 unlike _Float16", bad_up);
    ZT_CHECK(bad_rt == 0, "%d fp16 patterns do not round-trip through fp32", bad_rt);
    ZT_CHECK(bad_hw == 0, "%d fp16 patterns convert unlike F16C", bad_hw);

    /* Edge cases of fp32 -> fp16, each against _Float16. */
    const float edges[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f, 1e10f,
        3.4e38f, INFINITY, -INFINITY, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f,
        0x1.4p-23f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f, 0x1.ff4p-15f, 1.0f + 0x1p-11f,
        1.0f + 0x1.8p-10f, 1.0f + 0x1p-11f + 0x1p-23f, 2049.0f, 2051.0f, 0x1p-149f, 0x1p-126f,
        -0x1p-140f, 0x1.ffep-16f, 0x1.ffcp-16f, 0x1.ff8p-16f, 1.0009765625f, 0.099975586f,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        ZT_CHECK(check_f16(edges[i]), "f32 %a -> f16 %04x, _Float16 says %04x", (double)edges[i],
                 zk_f32_to_f16(edges[i]), h_of((_Float16)edges[i]));
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fbfffffu, 0xffffffffu,
                             0x7f812345u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float x = kt_u2f(nans[i]);
        ZT_CHECK(check_f16(x), "NaN %08x -> f16 %04x", nans[i], zk_f32_to_f16(x));
        if (has_f16c) ZT_CHECK(zk_f32_to_f16(x) == f16c_to_half(x), "NaN %08x: F16C says %04x", nans[i], f16c_to_half(x));
        uint16_t b = zk_f32_to_bf16(x);
        ZT_CHECK((b & 0x7fc0u) == 0x7fc0u && (b >> 15) == (nans[i] >> 31) && b == bf16_ref(x),
                 "NaN %08x -> bf16 %04x", nans[i], b);
    }

    /* Random floats. */
    zt_rng r = {7};
    const int NR = 3000000;
    int bad16 = 0, badhw = 0, badbf = 0;
    for (int i = 0; i < NR; i++) {
        float x = random_float(&r);
        if (!check_f16(x) && bad16++ < 5)
            fprintf(stderr, "f32 %a -> f16 %04x, _Float16 says %04x\n", (double)x, zk_f32_to_f16(x), h_of((_Float16)x));
        if (has_f16c && zk_f32_to_f16(x) != f16c_to_half(x)) badhw++;
        if (zk_f32_to_bf16(x) != bf16_ref(x) && badbf++ < 5)
            fprintf(stderr, "f32 %a -> bf16 %04x, reference %04x\n", (double)x, zk_f32_to_bf16(x), bf16_ref(x));
    }
    ZT_CHECK(bad16 == 0, "%d of %d random floats convert to fp16 unlike _Float16", bad16, NR);
    ZT_CHECK(badhw == 0, "%d of %d random floats convert to fp16 unlike F16C", badhw, NR);
    ZT_CHECK(badbf == 0, "%d of %d random floats convert to bf16 unlike the reference", badbf, NR);

    /* bf16 edges: ties both ways, the overflow boundary, subnormals. */
    const uint32_t bedges[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7f7fffu, 0x7f7f8000u,
                               0x7f7fffffu, 0xff7f8000u, 0x00008000u, 0x00018000u, 0x00000001u,
                               0x007fffffu, 0x80008001u, 0x7f800000u, 0x00000000u, 0x80000000u};
    for (size_t i = 0; i < sizeof bedges / sizeof bedges[0]; i++) {
        float x = kt_u2f(bedges[i]);
        ZT_CHECK(zk_f32_to_bf16(x) == bf16_ref(x), "bf16 edge %08x -> %04x, reference %04x",
                 bedges[i], zk_f32_to_bf16(x), bf16_ref(x));
    }
    for (uint32_t b = 0; b < 65536; b++) {
        float f = zk_bf16_to_f32((uint16_t)b);
        if (kt_f2u(f) != b << 16) { ZT_CHECK(0, "bf16 %04x -> f32 %08x", b, kt_f2u(f)); break; }
    }

    /* Every ISA's vector conversions (the cast kernel) against the scalar ones. */
    const size_t n = 65536 + 1000;
    uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2), *hr = malloc(n * 2);
    float *f = malloc(n * 4), *fr = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    for (int k = 0; k < 3; k++) {
        if (!zk_cpu_has_isa(kt_all_isas[k])) continue;
        zdev_t *d = NULL;
        ZT_OK(zk_cpu_open_isa(2, kt_all_isas[k], &d));
        if (!d) continue;
        for (int t = 1; t < 3; t++) {
            zinc_dtype dt = kt_dtypes[t];
            ZT_OK(d->iface->cast(d, f, ZINC_DTYPE_FP32, h, dt, n, 1.0f));
            /* cast multiplies by scale even when it is 1, which quiets a signaling NaN
             * (bf16 7f81 -> 7fc10000); volatile keeps the compiler from folding x * 1. */
            volatile float one = 1.0f;
            for (size_t i = 0; i < n; i++) fr[i] = zk_load(h, dt, i) * one;
            ZT_CHECK(!kt_diff("cast 16->32", f, fr, ZINC_DTYPE_FP32, n), "%s: %s -> fp32 of "
                     "every pattern", kt_all_isas[k], zinc_dtype_name(dt));
            zt_rng rr = {99};
            for (size_t i = 0; i < n; i++) f[i] = random_float(&rr);
            ZT_OK(d->iface->cast(d, h2, dt, f, ZINC_DTYPE_FP32, n, 1.0f));
            for (size_t i = 0; i < n; i++) zk_store(hr, dt, i, f[i]);
            ZT_CHECK(!kt_diff("cast 32->16", h2, hr, dt, n), "%s: fp32 -> %s of random floats",
                     kt_all_isas[k], zinc_dtype_name(dt));
        }
        zdev_close(d);
    }
    free(h), free(h2), free(hr), free(f), free(fr);
    return zt_finish("test_convert");
}
