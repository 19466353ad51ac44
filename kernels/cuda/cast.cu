/*
 * cast.cu — element-wise conversions: cast with a scale (dst = round(src * scale), one fp32
 * multiply, as elem.h defines), accumulate (acc = round(acc + x), one fp32 add; acc may be fp32
 * over a 16-bit x), and the fp64
 * scaling the NCCL backend applies after a reduction. The multiply and add are __fmul_rn /
 * __fadd_rn, so no flag can fuse or flush them: finite results are bit-identical to the CPU's.
 * Same memory pattern as adam.cu: a scalar head to 16-byte alignment, 8 elements per thread.
 */
#include "kernels/cuda/vec.cuh"
#include "kernels/cuda/zcuda.h"

namespace {

/* dst and src may be the same buffer (in-place scaling), so no __restrict__ here. */
template <typename D, typename S>
__global__ void __launch_bounds__(ZCU_THREADS)
cast_kernel(D *dst, const S *src, size_t n, size_t head, size_t nvec, float scale)
{
    const size_t t0 = zcu::tid(), stride = zcu::nthreads();
    const size_t vend = head + 8 * nvec, scalar = head + (n - vend);
    for (size_t i = t0; i < scalar; i += stride) {
        const size_t k = i < head ? i : vend + (i - head);
        zcu::st1(dst, k, __fmul_rn(zcu::ld1(src, k), scale));
    }
    for (size_t j = t0; j < nvec; j += stride) {
        const size_t i = head + 8 * j;
        float x[8];
        zcu::ld8(src, i, x);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = __fmul_rn(x[k], scale);
        zcu::st8(dst, i, x);
    }
}

template <typename A, typename X>
__global__ void __launch_bounds__(ZCU_THREADS)
accumulate_kernel(A *__restrict__ acc, const X *__restrict__ x, size_t n, size_t head,
                  size_t nvec)
{
    const size_t t0 = zcu::tid(), stride = zcu::nthreads();
    const size_t vend = head + 8 * nvec, scalar = head + (n - vend);
    for (size_t i = t0; i < scalar; i += stride) {
        const size_t k = i < head ? i : vend + (i - head);
        zcu::st1(acc, k, __fadd_rn(zcu::ld1(acc, k), zcu::ld1(x, k)));
    }
    for (size_t j = t0; j < nvec; j += stride) {
        const size_t i = head + 8 * j;
        float a[8], b[8];
        zcu::ld8(acc, i, a);
        zcu::ld8(x, i, b);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = __fadd_rn(a[k], b[k]);
        zcu::st8(acc, i, a);
    }
}

__global__ void scale_f64_kernel(double *buf, size_t n, double scale)
{
    for (size_t i = zcu::tid(); i < n; i += zcu::nthreads()) buf[i] = __dmul_rn(buf[i], scale);
}

/* Splits n into a scalar head, 8-wide groups and a scalar tail (see zcu_adam_launch). */
void split(size_t n, long head, size_t *h, size_t *nvec)
{
    *h = n;
    *nvec = 0;
    if (head >= 0 && (size_t)head < n) {
        *h = (size_t)head;
        *nvec = (n - *h) / 8;
    }
}

unsigned grid_for(size_t n, size_t nvec, int grid_cap)
{
    size_t scalar = n - 8 * nvec;
    return zcu_blocks(nvec > scalar ? nvec : scalar, 1, grid_cap);
}

}  // namespace

extern "C" cudaError_t zcu_cast_launch(void *dst, int dst_dt, const void *src, int src_dt,
                                       size_t n, float scale, long head, int grid_cap,
                                       cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    size_t h, nvec;
    split(n, head, &h, &nvec);
    unsigned blocks = grid_for(n, nvec, grid_cap);
    ZCU_DISPATCH(dst_dt, D, ZCU_DISPATCH(src_dt, S,
        cast_kernel<D, S><<<blocks, ZCU_THREADS, 0, s>>>((D *)dst, (const S *)src, n, h, nvec, scale)))
    return cudaGetLastError();
}

extern "C" cudaError_t zcu_accumulate_launch(void *acc, int acc_dt, const void *x, int x_dt,
                                             size_t n, long head, int grid_cap, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    size_t h, nvec;
    split(n, head, &h, &nvec);
    unsigned blocks = grid_for(n, nvec, grid_cap);
    ZCU_DISPATCH(acc_dt, A, ZCU_DISPATCH(x_dt, X,
        accumulate_kernel<A, X><<<blocks, ZCU_THREADS, 0, s>>>((A *)acc, (const X *)x, n, h,
                                                                nvec)))
    return cudaGetLastError();
}

extern "C" cudaError_t zcu_scale_f64_launch(double *buf, size_t n, double scale, int grid_cap,
                                            cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    scale_f64_kernel<<<zcu_blocks(n, 1, grid_cap), ZCU_THREADS, 0, s>>>(buf, n, scale);
    return cudaGetLastError();
}
