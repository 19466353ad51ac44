/*
 * adam.cu — the fused Adam/AdamW step over a shard (device.h's zk_adam_args), one pass over
 * master, m, v and the gradient, writing the 16-bit (or fp32) working copy in the same pass.
 *
 * The arithmetic is kernels/cpu/elem.h's zk_adam_elem, operation for operation (zcu_adam_elem in
 * elem_math.h, shared with a host test), with the rounding spelled out: __fmul_rn / __fmaf_rn /
 * __fsqrt_rn / __fdiv_rn are IEEE round-to-nearest whatever the nvcc flags (-use_fast_math,
 * -fmad, -prec-div, -prec-sqrt cannot touch them), and nothing else does arithmetic. Subnormals
 * are kept (no -ftz). So for finite inputs every output is bit-identical to zk_ref_adam_step; a
 * NaN comes out as a NaN but not necessarily with the CPU's payload (GPU arithmetic returns the
 * canonical NaN). No stack, 48 registers (ptxas -v, sm_90).
 *
 * Memory: each thread takes 8 consecutive elements per iteration with 16-byte loads and stores;
 * a scalar head makes every stream 16-byte aligned first, a scalar tail takes the rest. Grid-stride,
 * so one launch covers any n.
 */
#include "kernels/cuda/vec.cuh"
#include "kernels/cuda/zcuda.h"

namespace {

template <typename G, typename P>
__global__ void __launch_bounds__(ZCU_THREADS)
adam_kernel(zcu_adam_consts c, float *__restrict__ master, float *__restrict__ m,
            float *__restrict__ v, const G *__restrict__ grad, P *__restrict__ out, size_t n,
            size_t head, size_t nvec, const double *skip)
{
    /* The overflow flag of the all-reduced statistics: a skipped step costs one launch. */
    if (skip && (skip[1] != 0.0 || !isfinite(skip[0]))) return;
    const size_t t0 = zcu::tid(), stride = zcu::nthreads();
    const size_t vend = head + 8 * nvec, scalar = head + (n - vend);
    for (size_t i = t0; i < scalar; i += stride) {      /* head, then tail: one by one */
        const size_t k = i < head ? i : vend + (i - head);
        float p = master[k], mm = m[k], vv = v[k];
        zcu_adam_elem(&c, zcu::ld1(grad, k), &p, &mm, &vv);
        master[k] = p;
        m[k] = mm;
        v[k] = vv;
        if (out) zcu::st1(out, k, p);
    }
    for (size_t j = t0; j < nvec; j += stride) {
        const size_t i = head + 8 * j;
        float p[8], mm[8], vv[8], g[8];
        zcu::ld8(grad, i, g);
        zcu::ld8(master, i, p);
        zcu::ld8(m, i, mm);
        zcu::ld8(v, i, vv);
#pragma unroll
        for (int k = 0; k < 8; k++) zcu_adam_elem(&c, g[k], &p[k], &mm[k], &vv[k]);
        zcu::st8(master, i, p);
        zcu::st8(m, i, mm);
        zcu::st8(v, i, vv);
        if (out) zcu::st8(out, i, p);
    }
}

}  // namespace

extern "C" cudaError_t zcu_adam_launch(const zcu_adam_consts *k, float *master, float *m, float *v,
                                       const void *grad, int grad_dt, void *param_out,
                                       int param_dt, size_t n, long head, const double *skip,
                                       int grid_cap, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    size_t h = n, nvec = 0;
    if (head >= 0 && (size_t)head < n) {
        h = (size_t)head;
        nvec = (n - h) / 8;
    }
    const size_t scalar = n - 8 * nvec;
    unsigned blocks = zcu_blocks(nvec > scalar ? nvec : scalar, 1, grid_cap);
    ZCU_DISPATCH(grad_dt, G, ZCU_DISPATCH(param_out ? param_dt : 0, P,
        adam_kernel<G, P><<<blocks, ZCU_THREADS, 0, s>>>(*k, master, m, v, (const G *)grad,
                                                         (P *)param_out, n, h, nvec, skip)))
    return cudaGetLastError();
}
