/*
 * elem_math.h — the per-element arithmetic of the fused Adam kernel, written once for both the
 * device (adam.cu) and the host (tests/gpu/test_cuda_elem.c), so that a machine without a GPU can
 * still check that the CUDA kernel performs kernels/cpu/elem.h's operation sequence.
 *
 * On the device every operation is an explicitly rounded intrinsic (__fmul_rn, __fmaf_rn,
 * __fsqrt_rn, __fdiv_rn): IEEE round-to-nearest whatever nvcc's flags, never contracted. On the
 * host the same macros are plain C operators and fmaf/sqrtf, which are the same IEEE operations
 * when the file is compiled without FP contraction (-ffp-contract=off). No CUDA headers here.
 */
#ifndef ZINC_KERNELS_CUDA_ELEM_MATH_H
#define ZINC_KERNELS_CUDA_ELEM_MATH_H

#ifndef __CUDA_ARCH__
#include <math.h>
#endif

/* The per-call scalars of zk_adam_prep (kernels/cpu/elem.h), copied field by field. */
typedef struct zcu_adam_consts {
    float grad_scale, beta1, beta2, omb1, omb2, eps, wd, step_size, rsqrt_bc2, decay;
    int l2, decoupled;
} zcu_adam_consts;

#ifdef __CUDACC__
#define ZCU_HD __host__ __device__ __forceinline__
#else
#define ZCU_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define ZCU_MUL(a, b) __fmul_rn((a), (b))
#define ZCU_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define ZCU_SQRT(a) __fsqrt_rn(a)
#define ZCU_DIV(a, b) __fdiv_rn((a), (b))
#else
#define ZCU_MUL(a, b) ((a) * (b))
#define ZCU_FMA(a, b, c) fmaf((a), (b), (c))
#define ZCU_SQRT(a) sqrtf(a)
#define ZCU_DIV(a, b) ((a) / (b))
#endif

/* One element of the fused step: elem.h's zk_adam_elem, operation for operation. */
ZCU_HD void zcu_adam_elem(const zcu_adam_consts *c, float G, float *p, float *m, float *v)
{
    float g = ZCU_MUL(G, c->grad_scale);
    float w = *p;
    if (c->l2) g = ZCU_FMA(c->wd, w, g);
    if (c->decoupled) w = ZCU_MUL(w, c->decay);
    float mm = ZCU_FMA(c->beta1, *m, ZCU_MUL(c->omb1, g));
    float gg = ZCU_MUL(c->omb2, g);
    float vv = ZCU_FMA(c->beta2, *v, ZCU_MUL(gg, g));
    float d = ZCU_FMA(ZCU_SQRT(vv), c->rsqrt_bc2, c->eps);
    w = ZCU_FMA(-c->step_size, ZCU_DIV(mm, d), w);
    *p = w;
    *m = mm;
    *v = vv;
}

#endif
