/*
 * kern_portable.c — the CPU kernels in plain C: CPUs without AVX2, and ZINC_CPU_ISA=portable.
 * The loops are the elem.h sequence; the dtype switch is hoisted out of the loops by inlining
 * one specialised loop per dtype combination, which is all the speed this path asks for.
 */
#include <stdint.h>

#include "kernels/cpu/block_hash.h"
#include "kernels/cpu/cpu.h"

#define ZK_INLINE static inline __attribute__((always_inline))

ZK_INLINE void adam_loop(const zk_adam_args *a, const zk_adam_consts *c, size_t lo, size_t hi,
                         zinc_dtype gdt, zinc_dtype pdt, int out)
{
    for (size_t i = lo; i < hi; i++) {
        zk_adam_elem(c, zk_load(a->grad, gdt, i), &a->master[i], &a->m[i], &a->v[i]);
        if (out) zk_store(a->param_out, pdt, i, a->master[i]);
    }
}

#include "kernels/cpu/adam_dtypes.h"

static void stats(const void *g, zinc_dtype dt, size_t n, size_t blk_lo, size_t blk_hi,
                  double *sums)
{
    for (size_t b = blk_lo; b < blk_hi; b++) {
        size_t b0 = b * ZK_STATS_BLOCK;
        size_t b1 = n - b0 < ZK_STATS_BLOCK ? n : b0 + ZK_STATS_BLOCK;
        double lanes[16] = {0};
        zk_stats_lanes(g, dt, b0, b0, b1, lanes);
        sums[b - blk_lo] = zk_lanes_sum(lanes);
    }
}

static void cast(void *dst, zinc_dtype ddt, const void *src, zinc_dtype sdt, float scale,
                 size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) zk_store(dst, ddt, i, zk_load(src, sdt, i) * scale);
}

static void accumulate(void *acc, zinc_dtype adt, const void *x, zinc_dtype xdt, size_t lo,
                       size_t hi)
{
    if (adt == ZINC_DTYPE_FP32 && xdt == ZINC_DTYPE_FP32) {
        float *a = acc;
        const float *b = x;
        for (size_t i = lo; i < hi; i++) a[i] = a[i] + b[i];
        return;
    }
    for (size_t i = lo; i < hi; i++)
        zk_store(acc, adt, i, zk_load(acc, adt, i) + zk_load(x, xdt, i));
}

static void triad(float *a, const float *b, const float *c, float s, size_t lo, size_t hi)
{
    /* Not part of the bitwise contract: a plain loop the compiler vectorises. */
    for (size_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
}

const zk_kernels zk_kernels_portable = {
    .isa = "portable",
    .adam = adam,
    .stats = stats,
    .cast = cast,
    .accumulate = accumulate,
    .triad = triad,
    .block_hash = block_hash,
};
