/*
 * kt.h — helpers shared by the kernel tests: the instruction sets this CPU runs, random data with
 * the awkward values kernels get wrong (subnormals, rounding ties, huge and tiny magnitudes),
 * and bit comparisons that name the first differing element.
 */
#ifndef ZINC_TESTS_KERNELS_KT_H
#define ZINC_TESTS_KERNELS_KT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "testutil.h"

static const char *const kt_all_isas[] = {"portable", "avx2", "avx512"};
static const zinc_dtype kt_dtypes[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_FP16, ZINC_DTYPE_BF16};

static inline size_t kt_dsize(zinc_dtype dt) { return dt == ZINC_DTYPE_FP32 ? 4 : 2; }

static inline float kt_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t kt_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A finite float of random sign and magnitude spread over 2^-30 .. 2^10, with some exact zeros,
 * fp16/bf16 subnormal-range values and values that sit on a rounding tie of fp16 or bf16. */
static inline float kt_value(zt_rng *r)
{
    uint64_t k = zt_next(r) % 16;
    float s = (zt_next(r) & 1) ? -1.0f : 1.0f;
    if (k == 0) return 0.0f * s;
    if (k == 1) return s * ldexpf((float)(zt_next(r) % 1024), -24 - (int)(zt_next(r) % 3));
    if (k == 2) /* an fp16 tie: 11 significant bits plus a half */
        return s * ldexpf((float)(2 * (1024 + zt_next(r) % 1024) + 1), -12 + (int)(zt_next(r) % 8));
    if (k == 3) /* a bf16 tie */
        return s * ldexpf((float)(2 * (128 + zt_next(r) % 128) + 1), -9 + (int)(zt_next(r) % 8));
    return s * (float)ldexp(0.5 + zt_uniform(r), -30 + (int)(zt_next(r) % 41));
}

/* Fills n elements of dtype dt with kt_value()s (rounded to dt). */
static inline void kt_fill(void *p, zinc_dtype dt, size_t n, zt_rng *r)
{
    for (size_t i = 0; i < n; i++) zk_store(p, dt, i, kt_value(r));
}

/* 0 when equal; else prints what differs at the first differing element and returns 1. */
static inline int kt_diff(const char *what, const void *a, const void *b, zinc_dtype dt, size_t n)
{
    size_t es = kt_dsize(dt);
    if (memcmp(a, b, n * es) == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0) {
            fprintf(stderr, "%s: element %zu of %zu differs: %.9g vs %.9g\n", what, i, n,
                    (double)zk_load(a, dt, i), (double)zk_load(b, dt, i));
            break;
        }
    }
    return 1;
}

#endif
