/*
 * kern_avx2.c — the CPU kernels with AVX2 + FMA + F16C, 8 fp32 lanes. Compiled with those flags
 * (CMakeLists.txt, by file name) and only called after cpu_device.c checked the CPU. Each loop is
 * elem.h's sequence on 8 elements at once; the last < 8 elements of a range go through the scalar
 * elem.h code, which gives the same bits. fp16 uses F16C (round to nearest even); bf16 rounding
 * is integer code, as in convert.c.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/block_hash.h"
#include "kernels/cpu/cpu.h"

#define ZK_INLINE static inline __attribute__((always_inline))
#define W 8

ZK_INLINE __m256 ld(const void *p, zinc_dtype dt, size_t i)
{
    if (dt == ZINC_DTYPE_FP16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    if (dt == ZINC_DTYPE_BF16) {
        const __m128i *q = (const __m128i *)((const uint16_t *)p + i);
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(q));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    return _mm256_loadu_ps((const float *)p + i);
}

ZK_INLINE void st(void *p, zinc_dtype dt, size_t i, __m256 x)
{
    if (dt == ZINC_DTYPE_FP16) {
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), h);
    } else if (dt == ZINC_DTYPE_BF16) {
        __m256i b = _mm256_castps_si256(x);
        __m256i hi = _mm256_srli_epi32(b, 16);
        __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
        r = _mm256_srli_epi32(r, 16);
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
        /* Every lane is <= 0xffff, so the unsigned saturating pack is a plain narrowing. */
        __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), h);
    } else {
        _mm256_storeu_ps((float *)p + i, x);
    }
}

ZK_INLINE void adam_loop(const zk_adam_args *a, const zk_adam_consts *c, size_t lo, size_t hi,
                         zinc_dtype gdt, zinc_dtype pdt, int out)
{
    const __m256 scale = _mm256_set1_ps(c->grad_scale), wd = _mm256_set1_ps(c->wd);
    const __m256 decay = _mm256_set1_ps(c->decay);
    const __m256 b1 = _mm256_set1_ps(c->beta1), omb1 = _mm256_set1_ps(c->omb1);
    const __m256 b2 = _mm256_set1_ps(c->beta2), omb2 = _mm256_set1_ps(c->omb2);
    const __m256 rs = _mm256_set1_ps(c->rsqrt_bc2), eps = _mm256_set1_ps(c->eps);
    const __m256 step = _mm256_set1_ps(c->step_size);
    const int l2 = c->l2, dec = c->decoupled;
    size_t i = lo;
    for (; i + W <= hi; i += W) {
        __m256 g = _mm256_mul_ps(ld(a->grad, gdt, i), scale);
        __m256 w = _mm256_loadu_ps(a->master + i);
        if (l2) g = _mm256_fmadd_ps(wd, w, g);
        if (dec) w = _mm256_mul_ps(w, decay);
        __m256 m = _mm256_fmadd_ps(b1, _mm256_loadu_ps(a->m + i), _mm256_mul_ps(omb1, g));
        __m256 gg = _mm256_mul_ps(omb2, g);
        __m256 v = _mm256_fmadd_ps(b2, _mm256_loadu_ps(a->v + i), _mm256_mul_ps(gg, g));
        __m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(v), rs, eps);
        w = _mm256_fnmadd_ps(step, _mm256_div_ps(m, d), w);
        _mm256_storeu_ps(a->m + i, m);
        _mm256_storeu_ps(a->v + i, v);
        _mm256_storeu_ps(a->master + i, w);
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
        /* acc0..acc3 hold lanes 0-3, 4-7, 8-11, 12-15: element b0 + 16k + j lands in lane j. */
        __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
        __m256d acc2 = _mm256_setzero_pd(), acc3 = _mm256_setzero_pd();
        size_t i = b0;
        for (; i + 16 <= b1; i += 16) {
            __m256 x = ld(g, dt, i), y = ld(g, dt, i + 8);
            __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
            __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
            __m256d y0 = _mm256_cvtps_pd(_mm256_castps256_ps128(y));
            __m256d y1 = _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1));
            acc0 = _mm256_fmadd_pd(x0, x0, acc0);
            acc1 = _mm256_fmadd_pd(x1, x1, acc1);
            acc2 = _mm256_fmadd_pd(y0, y0, acc2);
            acc3 = _mm256_fmadd_pd(y1, y1, acc3);
        }
        double lanes[16];
        _mm256_storeu_pd(lanes, acc0);
        _mm256_storeu_pd(lanes + 4, acc1);
        _mm256_storeu_pd(lanes + 8, acc2);
        _mm256_storeu_pd(lanes + 12, acc3);
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
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = lo;
    for (; i + W <= hi; i += W) st(dst, ddt, i, _mm256_mul_ps(ld(src, sdt, i), s));
    for (; i < hi; i++) zk_store(dst, ddt, i, zk_load(src, sdt, i) * scale);
}

static void accumulate(void *acc, zinc_dtype adt, const void *x, zinc_dtype xdt, size_t lo,
                       size_t hi)
{
    size_t i = lo;
    for (; i + W <= hi; i += W) st(acc, adt, i, _mm256_add_ps(ld(acc, adt, i), ld(x, xdt, i)));
    for (; i < hi; i++) zk_store(acc, adt, i, zk_load(acc, adt, i) + zk_load(x, xdt, i));
}

static void triad(float *a, const float *b, const float *c, float s, size_t lo, size_t hi)
{
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = lo;
    for (; i + W <= hi; i += W)
        _mm256_storeu_ps(a + i,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
    for (; i < hi; i++) a[i] = b[i] + s * c[i];
}

const zk_kernels zk_kernels_avx2 = {
    .isa = "avx2",
    .adam = adam,
    .stats = stats,
    .cast = cast,
    .accumulate = accumulate,
    .triad = triad,
    .block_hash = block_hash,
};
