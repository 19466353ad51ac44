/*
 * kern_avx512.c — the CPU kernels with AVX-512 (F, BW, VL, DQ), 16 fp32 lanes. Compiled with
 * the AVX-512 flags (CMakeLists.txt, by file name) and only called after cpu_device.c checked the
 * CPU. Each loop is elem.h's sequence on 16 elements at once; the last < 16 elements of a range
 * go through the scalar elem.h code, which gives the same bits. fp16 uses the hardware
 * conversions (VCVTPH2PS/VCVTPS2PH, round to nearest even); bf16 rounding is integer code, not
 * VCVTNEPS2BF16, because that instruction flushes subnormals to zero.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/block_hash.h"
#include "kernels/cpu/cpu.h"

#define ZK_INLINE static inline __attribute__((always_inline))
#define W 16

ZK_INLINE __m512 ld(const void *p, zinc_dtype dt, size_t i)
{
    if (dt == ZINC_DTYPE_FP16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    if (dt == ZINC_DTYPE_BF16) {
        const __m256i *q = (const __m256i *)((const uint16_t *)p + i);
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(q));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
    return _mm512_loadu_ps((const float *)p + i);
}

ZK_INLINE void st(void *p, zinc_dtype dt, size_t i, __m512 x)
{
    if (dt == ZINC_DTYPE_FP16) {
        __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), h);
    } else if (dt == ZINC_DTYPE_BF16) {
        __m512i b = _mm512_castps_si512(x);
        __m512i hi = _mm512_srli_epi32(b, 16);
        __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
        r = _mm512_srli_epi32(r, 16);
        __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
        _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), _mm512_cvtepi32_epi16(r));
    } else {
        _mm512_storeu_ps((float *)p + i, x);
    }
}

ZK_INLINE void adam_loop(const zk_adam_args *a, const zk_adam_consts *c, size_t lo, size_t hi,
                         zinc_dtype gdt, zinc_dtype pdt, int out)
{
    const __m512 scale = _mm512_set1_ps(c->grad_scale), wd = _mm512_set1_ps(c->wd);
    const __m512 decay = _mm512_set1_ps(c->decay);
    const __m512 b1 = _mm512_set1_ps(c->beta1), omb1 = _mm512_set1_ps(c->omb1);
    const __m512 b2 = _mm512_set1_ps(c->beta2), omb2 = _mm512_set1_ps(c->omb2);
    const __m512 rs = _mm512_set1_ps(c->rsqrt_bc2), eps = _mm512_set1_ps(c->eps);
    const __m512 step = _mm512_set1_ps(c->step_size);
    const int l2 = c->l2, dec = c->decoupled;
    size_t i = lo;
    for (; i + W <= hi; i += W) {
        __m512 g = _mm512_mul_ps(ld(a->grad, gdt, i), scale);
        __m512 w = _mm512_loadu_ps(a->master + i);
        if (l2) g = _mm512_fmadd_ps(wd, w, g);
        if (dec) w = _mm512_mul_ps(w, decay);
        __m512 m = _mm512_fmadd_ps(b1, _mm512_loadu_ps(a->m + i), _mm512_mul_ps(omb1, g));
        __m512 gg = _mm512_mul_ps(omb2, g);
        __m512 v = _mm512_fmadd_ps(b2, _mm512_loadu_ps(a->v + i), _mm512_mul_ps(gg, g));
        __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v), rs, eps);
        w = _mm512_fnmadd_ps(step, _mm512_div_ps(m, d), w);
        _mm512_storeu_ps(a->m + i, m);
        _mm512_storeu_ps(a->v + i, v);
        _mm512_storeu_ps(a->master + i, w);
        if (out) st(a->param_out, pdt, i, w);
    }
    for (; i < hi; i++) {
        zk_adam_elem(c, zk_load(a->grad, gdt, i), &a->master[i], &a->m[i], &a->v[i]);
        if (out) zk_store(a->param_out, pdt, i, a->master[i]);
    }
}

#include "kernels/cpu/adam_dtypes.h"

ZK_INLINE void stats_loop(const void *g, zinc_dtype dt, size_t n, size_t blk_lo, size_t blk_hi,
                          double *sums)
{
    for (size_t b = blk_lo; b < blk_hi; b++) {
        size_t b0 = b * ZK_STATS_BLOCK;
        size_t b1 = n - b0 < ZK_STATS_BLOCK ? n : b0 + ZK_STATS_BLOCK;
        /* acc0 holds lanes 0-7, acc1 lanes 8-15: element b0 + 16k + j lands in lane j. */
        __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
        size_t i = b0;
        for (; i + W <= b1; i += W) {
            __m512 x = ld(g, dt, i);
            __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
            __m512d x1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
            acc0 = _mm512_fmadd_pd(x0, x0, acc0);
            acc1 = _mm512_fmadd_pd(x1, x1, acc1);
        }
        double lanes[16];
        _mm512_storeu_pd(lanes, acc0);
        _mm512_storeu_pd(lanes + 8, acc1);
        zk_stats_lanes(g, dt, b0, i, b1, lanes);
        sums[b - blk_lo] = zk_lanes_sum(lanes);
    }
}

static void stats(const void *g, zinc_dtype dt, size_t n, size_t blk_lo, size_t blk_hi,
                  double *sums)
{
    switch (dt) {
    case ZINC_DTYPE_FP16: stats_loop(g, ZINC_DTYPE_FP16, n, blk_lo, blk_hi, sums); break;
    case ZINC_DTYPE_BF16: stats_loop(g, ZINC_DTYPE_BF16, n, blk_lo, blk_hi, sums); break;
    default: stats_loop(g, ZINC_DTYPE_FP32, n, blk_lo, blk_hi, sums); break;
    }
}

/* cast and accumulate are bandwidth-bound; one loop with the dtype tests inside is enough (the
 * branches are perfectly predicted). */
static void cast(void *dst, zinc_dtype ddt, const void *src, zinc_dtype sdt, float scale,
                 size_t lo, size_t hi)
{
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = lo;
    for (; i + W <= hi; i += W) st(dst, ddt, i, _mm512_mul_ps(ld(src, sdt, i), s));
    for (; i < hi; i++) zk_store(dst, ddt, i, zk_load(src, sdt, i) * scale);
}

static void accumulate(void *acc, zinc_dtype adt, const void *x, zinc_dtype xdt, size_t lo,
                       size_t hi)
{
    size_t i = lo;
    for (; i + W <= hi; i += W) st(acc, adt, i, _mm512_add_ps(ld(acc, adt, i), ld(x, xdt, i)));
    for (; i < hi; i++) zk_store(acc, adt, i, zk_load(acc, adt, i) + zk_load(x, xdt, i));
}

static void triad(float *a, const float *b, const float *c, float s, size_t lo, size_t hi)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = lo;
    for (; i + W <= hi; i += W)
        _mm512_storeu_ps(a + i,
                         _mm512_fmadd_ps(vs, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
    for (; i < hi; i++) a[i] = b[i] + s * c[i];
}

const zk_kernels zk_kernels_avx512 = {
    .isa = "avx512",
    .adam = adam,
    .stats = stats,
    .cast = cast,
    .accumulate = accumulate,
    .triad = triad,
    .block_hash = block_hash,
};
