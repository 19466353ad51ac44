/*
 * reduce.c — the reduction arithmetic every CPU comm backend shares (see zreduce_sum in comm.h):
 * out[i] = round_t(scale * (in[0][i] + ... + in[nin-1][i])), summed in fp32 (fp64 for ZDT_F64)
 * in the order given, the scale applied once, rounded once.
 *
 * Both backends call this one function over the same operands in the same order, so `local`
 * and `mpi` give the same bits.
 *
 * Speed: this runs over every gradient, so the work goes block by block through a small fp32
 * accumulator on the stack. Every loop then has one simple shape the compiler can vectorise,
 * and `out` may alias an input, because a block of `out` is written only after all inputs of
 * that block have been read.
 * The 16-bit conversions are kernels/half.h's branch-free inline ones (the same definition as
 * kernels/device.h's zk_f32_to_f16 / zk_f32_to_bf16); a nan's bits are up to the implementation,
 * so nan results go through those scalar functions instead.
 * fp16 uses the F16C instructions where the CPU has them (ZINC_CPU_ISA=portable turns that off);
 * fp16 through portable bit arithmetic is several times slower than memory.
 */
/* The build's -O2 uses GCC's "very cheap" vectorizer cost model, which skips loops like these
 * (they need a scalar epilogue); ask for the full vectorizer in this file only. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ZR_HAVE_F16C_PATH 1
#endif

#include "base/cpu_isa.h"
#include "kernels/device.h"
#include "kernels/half.h"
#include "shard/comm.h"

enum { ZR_BLOCK = 512 };   /* elements per block: 2 KiB of fp32 accumulator */

#ifdef ZR_HAVE_F16C_PATH
/* fp16 with the F16C instructions (compiled for them here, called only when the CPU has them):
 * the portable bit arithmetic above costs several times more than the memory traffic. Widening is
 * exact and VCVTPS2PH with round-to-nearest-even gives the one right answer for non-nan values,
 * as the portable path does; nan results are replaced by the caller either way. */
__attribute__((target("avx2,f16c"))) static void zr_f16_sum_f16c(float *acc,
                                                                const void *const *in, int nin,
                                                                size_t base, size_t m)
{
    const uint16_t *x0 = (const uint16_t *)in[0] + base;
    size_t j = 0;
    for (; j + 8 <= m; j += 8)
        _mm256_storeu_ps(acc + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + j))));
    for (; j < m; j++) acc[j] = zh_f16_to_f32(x0[j]);
    for (int k = 1; k < nin; k++) {
        const uint16_t *x = (const uint16_t *)in[k] + base;
        for (j = 0; j + 8 <= m; j += 8) {
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + j)));
            _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), v));
        }
        for (; j < m; j++) acc[j] += zh_f16_to_f32(x[j]);
    }
}

__attribute__((target("avx2,f16c"))) static void zr_f16_store_f16c(uint16_t *o, const float *acc,
                                                                  size_t m)
{
    size_t j = 0;
    for (; j + 8 <= m; j += 8)
        _mm_storeu_si128((__m128i *)(o + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(acc + j),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; j < m; j++) o[j] = zh_f32_to_f16(acc[j]);
}
#endif

/* Whether to use the F16C path: when the CPU has it, unless ZINC_CPU_ISA=portable (the switch
 * the CPU kernels honour too, so that tests can run the portable code on any machine). */
static int zr_use_f16c;
static pthread_once_t zr_once = PTHREAD_ONCE_INIT;

static void zr_pick(void)
{
#ifdef ZR_HAVE_F16C_PATH
    const char *isa = getenv("ZINC_CPU_ISA");
    __builtin_cpu_init();
    zr_use_f16c = __builtin_cpu_supports("avx2") && zisa_has_f16c() &&
                  !(isa && strcmp(isa, "portable") == 0);
#endif
}

/* Sums one block of m <= ZR_BLOCK elements starting at element `base` into acc[]. */
static void zr_sum_block(float *acc, const void *const *in, int nin, size_t base, size_t m, zdt t)
{
    switch (t) {
    case ZDT_F32:
        for (size_t j = 0; j < m; j++) acc[j] = ((const float *)in[0])[base + j];
        for (int k = 1; k < nin; k++) {
            const float *x = (const float *)in[k] + base;
            for (size_t j = 0; j < m; j++) acc[j] += x[j];
        }
        break;
    case ZDT_F16:
        for (size_t j = 0; j < m; j++)
            acc[j] = zh_f16_to_f32(((const uint16_t *)in[0])[base + j]);
        for (int k = 1; k < nin; k++) {
            const uint16_t *x = (const uint16_t *)in[k] + base;
            for (size_t j = 0; j < m; j++) acc[j] += zh_f16_to_f32(x[j]);
        }
        break;
    case ZDT_BF16:
        for (size_t j = 0; j < m; j++)
            acc[j] = zh_bf16_to_f32(((const uint16_t *)in[0])[base + j]);
        for (int k = 1; k < nin; k++) {
            const uint16_t *x = (const uint16_t *)in[k] + base;
            for (size_t j = 0; j < m; j++) acc[j] += zh_bf16_to_f32(x[j]);
        }
        break;
    default:
        break;
    }
}

static void zr_f64(double *out, const void *const *in, int nin, size_t n, double scale)
{
    double acc[ZR_BLOCK];
    for (size_t base = 0; base < n; base += ZR_BLOCK) {
        size_t m = n - base < ZR_BLOCK ? n - base : ZR_BLOCK;
        for (size_t j = 0; j < m; j++) acc[j] = ((const double *)in[0])[base + j];
        for (int k = 1; k < nin; k++) {
            const double *x = (const double *)in[k] + base;
            for (size_t j = 0; j < m; j++) acc[j] += x[j];
        }
        for (size_t j = 0; j < m; j++) out[base + j] = acc[j] * scale;
    }
}

void zreduce_sum(void *out, const void *const *in, int nin, size_t n, zdt t, float scale)
{
    if (n == 0) return;
    if (nin <= 0) {   /* an empty sum is zero; every dtype's zero is all-zero bits */
        memset(out, 0, n * zdt_size(t));
        return;
    }
    if (t == ZDT_F64) {
        zr_f64((double *)out, in, nin, n, (double)scale);
        return;
    }
    pthread_once(&zr_once, zr_pick);
    int f16c = zr_use_f16c && t == ZDT_F16;
    float acc[ZR_BLOCK];
    for (size_t base = 0; base < n; base += ZR_BLOCK) {
        size_t m = n - base < ZR_BLOCK ? n - base : ZR_BLOCK;
#ifdef ZR_HAVE_F16C_PATH
        if (f16c) zr_f16_sum_f16c(acc, in, nin, base, m);
        else
#endif
            zr_sum_block(acc, in, nin, base, m, t);
        int any_nan = 0;
        for (size_t j = 0; j < m; j++) {
            acc[j] *= scale;
            any_nan |= acc[j] != acc[j];
        }
        if (t == ZDT_F32) {
            memcpy((float *)out + base, acc, m * sizeof(float));
            continue;
        }
        uint16_t *o = (uint16_t *)out + base;
        if (f16c) {
#ifdef ZR_HAVE_F16C_PATH
            zr_f16_store_f16c(o, acc, m);
#endif
        } else if (t == ZDT_F16)
            for (size_t j = 0; j < m; j++) o[j] = zh_f32_to_f16(acc[j]);
        else
            for (size_t j = 0; j < m; j++) o[j] = zh_f32_to_bf16(acc[j]);
        if (any_nan)
            for (size_t j = 0; j < m; j++)
                if (isnan(acc[j]))
                    o[j] = t == ZDT_F16 ? zk_f32_to_f16(acc[j]) : zk_f32_to_bf16(acc[j]);
    }
}
