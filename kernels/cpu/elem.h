/*
 * elem.h — the exact operation sequence of every kernel, per element: THE numeric definition.
 *
 * Every path (the scalar reference, portable C, AVX2, AVX-512, every thread count, and the CUDA
 * kernels) performs exactly these IEEE fp32 operations in this order, each rounded to nearest
 * even, so element i comes out with the same bits whatever path, thread count or position in the
 * buffer. What makes that hold:
 *   - the per-call scalars are computed once, by zk_adam_prep, and passed to every path;
 *   - every multiply-add that is fused is written fmaf() here and fma in SIMD/CUDA; every other
 *     product is rounded on its own (no a*b+c appears outside fmaf, so -ffp-contract cannot
 *     fuse anything behind our back; CUDA code must use __fmul_rn/__fadd_rn or
 *     -fmad=false where it is not an explicit fma);
 *   - sqrt and division are the correctly rounded IEEE ones (sqrtf, '/', vsqrtps, vdivps);
 *   - conversions to fp16/bf16 round to nearest even, keep subnormals, overflow to inf and keep
 *     a NaN a quiet NaN with its sign and top payload bits (what F16C does; convert.c).
 *
 * Fused Adam/AdamW (zk_adam_args in device.h), scalars computed once per call in fp32:
 *     step_size = lr / bias_c1
 *     rsqrt_bc2 = 1 / sqrtf(bias_c2)
 *     omb1 = 1 - beta1,  omb2 = 1 - beta2
 *     decay = fmaf(-lr, weight_decay, 1)                  (AdamW only)
 * then per element, with G the gradient loaded as fp32:
 *     g  = G * grad_scale
 *     if Adam with weight_decay != 0:   g = fmaf(weight_decay, p, g)
 *     if AdamW with weight_decay != 0:  p = p * decay
 *     m  = fmaf(beta1, m, omb1 * g)
 *     v  = fmaf(beta2, v, (omb2 * g) * g)
 *     d  = fmaf(sqrtf(v), rsqrt_bc2, eps)          eps after bias correction, as PyTorch
 *     p  = fmaf(-step_size, m / d, p)              the one division
 *     param_out = round_to_param_dtype(p)
 * Without bias correction bias_c1 = bias_c2 = 1, so step_size = lr and rsqrt_bc2 = 1 exactly.
 *
 * grad_stats: the buffer is cut into blocks of ZK_STATS_BLOCK elements from its start. Inside a
 * block, element k goes to lane k % 16; each lane sums (double)x * (double)x in element order
 * (the product is exact in double, so fma and mul+add agree); the block sum is the fixed tree
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) + ... over 16 lanes (zk_lanes_sum); the total is
 * 0 + block0 + block1 + ... in block order. nonfinite is "the total is not finite": a square of
 * a finite float cannot overflow a double, and no buffer is large enough for the sum to.
 *
 * cast:       dst = round_to_dst_dtype(src * scale)            (one fp32 multiply)
 * accumulate: acc = round_to_acc_dtype(acc + x)                (one fp32 add; acc fp32 or x's dtype)
 *
 * The one freedom: where an operation meets two NaN operands (accumulate of two NaNs, an Adam
 * step on a NaN gradient and a NaN moment), the result is a quiet NaN in every path but whose
 * payload survives depends on operand order, which C compilers may swap. A NaN gradient never
 * reaches adam_step in a step that is applied (it is an overflow, the step is skipped).
 */
#ifndef ZINC_KERNELS_CPU_ELEM_H
#define ZINC_KERNELS_CPU_ELEM_H

#include <math.h>

#include "kernels/device.h"

typedef struct zk_adam_consts {
    float grad_scale, beta1, beta2, omb1, omb2, eps, wd;
    float step_size;        /* lr / bias_c1 */
    float rsqrt_bc2;        /* 1 / sqrtf(bias_c2) */
    float decay;            /* fmaf(-lr, wd, 1): AdamW's factor on the pre-update weight */
    int l2;                 /* Adam with weight decay: add wd * p to the gradient */
    int decoupled;          /* AdamW with weight decay: multiply p by decay */
} zk_adam_consts;

/* Computes the per-call scalars of a step (kernels/cpu/ref.c); every backend uses it. */
void zk_adam_prep(const zk_adam_args *a, zk_adam_consts *c);

/* One element of the fused step; G is the gradient as loaded (fp32). */
static inline void zk_adam_elem(const zk_adam_consts *c, float G, float *p, float *m, float *v)
{
    float g = G * c->grad_scale;
    float w = *p;
    if (c->l2) g = fmaf(c->wd, w, g);
    if (c->decoupled) w = w * c->decay;
    float mm = fmaf(c->beta1, *m, c->omb1 * g);
    float gg = c->omb2 * g;
    float vv = fmaf(c->beta2, *v, gg * g);
    float d = fmaf(sqrtf(vv), c->rsqrt_bc2, c->eps);
    w = fmaf(-c->step_size, mm / d, w);
    *p = w;
    *m = mm;
    *v = vv;
}

/* The fixed reduction tree of the 16 lane sums of one grad_stats block. */
static inline double zk_lanes_sum(const double l[16])
{
    double a = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    double b = ((l[8] + l[9]) + (l[10] + l[11])) + ((l[12] + l[13]) + (l[14] + l[15]));
    return a + b;
}

/* Scalar sum of squares of elements [lo, hi) of one block, added lane by lane into l
 * (lane = (i - block start) % 16): the tails of the SIMD paths and the reference. */
static inline void zk_stats_lanes(const void *g, zinc_dtype dt, size_t blk_start, size_t lo,
                                  size_t hi, double l[16])
{
    for (size_t i = lo; i < hi; i++) {
        double x = (double)zk_load(g, dt, i);
        l[(i - blk_start) % 16] += x * x;
    }
}

#endif
