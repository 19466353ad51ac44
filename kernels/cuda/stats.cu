/*
 * stats.cu — gradient statistics: sum of squares in double and the non-finite flag, with exactly
 * the summation order kernels/cpu/elem.h defines, so the result is bit-identical to
 * zk_ref_grad_stats (and so independent of the GPU, the grid and the run).
 *
 *   pass 1 (zcu_stats_blocks): one half-warp per ZK_STATS_BLOCK block; lane l of the half sums
 *     (double)x * (double)x of elements l, l+16, l+32, ... of the block in element order (the
 *     product is exact in double, so fma and mul+add agree), then the halves reduce with
 *     xor-shuffles 1, 2, 4, 8, which is the tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) + (...)
 *     of zk_lanes_sum (a sum of two doubles does not depend on the operand order).
 *   pass 2 (zcu_stats_total): one warp adds the block sums in block order, 0 + b0 + b1 + ...,
 *     continuing from the previous chunk's running total; after the last chunk the flag is
 *     !isfinite(total), as zk_ref_grad_stats sets it.
 * Pass 2 is a serial chain of n / 4096 double adds (about 30 us per 1e8 elements); it is what
 * bitwise equality with the CPU costs.
 */
#include "kernels/cuda/vec.cuh"
#include "kernels/cuda/zcuda.h"

namespace {

template <typename T>
__global__ void __launch_bounds__(ZCU_THREADS)
stats_blocks_kernel(const T *__restrict__ g, size_t n, size_t blk0, size_t blk1,
                    double *__restrict__ partials)
{
    const unsigned lane = threadIdx.x & 31u, l = lane & 15u, half = lane >> 4;
    const size_t warp = zcu::tid() / 32, nwarps = zcu::nthreads() / 32;
    /* The loop bound is the same for the whole warp, so every shuffle has all 32 lanes. */
    for (size_t pair = blk0 + 2 * warp; pair < blk1; pair += 2 * nwarps) {
        const size_t b = pair + half;
        double s = 0.0;
        if (b < blk1) {
            const size_t start = b * (size_t)ZK_STATS_BLOCK;
            const size_t end = n - start < (size_t)ZK_STATS_BLOCK ? n : start + ZK_STATS_BLOCK;
            if (end - start == (size_t)ZK_STATS_BLOCK) {
                const T *p = g + start + l;
#pragma unroll 16
                for (int j = 0; j < ZK_STATS_BLOCK / 16; j++) {
                    double x = (double)zcu::to_f(p[16 * j]);
                    s = fma(x, x, s);
                }
            } else {
                for (size_t i = start + l; i < end; i += 16) {
                    double x = (double)zcu::ld1(g, i);
                    s = fma(x, x, s);
                }
            }
        }
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        if (b < blk1 && l == 0) partials[b - blk0] = s;
    }
}

__global__ void stats_total_kernel(const double *__restrict__ partials, size_t count, int first,
                                   int last, int add, double *acc, double *out)
{
    const unsigned lane = threadIdx.x;
    double t = first ? 0.0 : acc[0];
    for (size_t c0 = 0; c0 < count; c0 += 32) {
        /* Coalesced loads; every lane then adds all 32 values in order (same total in each). */
        double x = c0 + lane < count ? partials[c0 + lane] : 0.0;
        const int k = count - c0 < 32 ? (int)(count - c0) : 32;
        for (int j = 0; j < k; j++) t += __shfl_sync(0xffffffffu, x, j);
    }
    if (lane != 0) return;
    acc[0] = t;
    if (!last) return;
    const int bad = !isfinite(t);
    if (add) {
        /* As a host adding per-call results: sumsq += call, nonfinite |= call's flag. */
        out[0] = out[0] + t;
        out[1] = (out[1] != 0.0 || bad) ? 1.0 : 0.0;
    } else {
        out[0] = t;
        out[1] = bad ? 1.0 : 0.0;
    }
}

}  // namespace

extern "C" cudaError_t zcu_stats_blocks(const void *g, int dt, size_t n, size_t blk0, size_t blk1,
                                        double *partials, int grid_cap, cudaStream_t s)
{
    if (blk1 <= blk0) return cudaSuccess;
    /* One thread per lane: 16 per block. */
    unsigned blocks = zcu_blocks((blk1 - blk0) * 16, 1, grid_cap);
    ZCU_DISPATCH(dt, T,
        stats_blocks_kernel<T><<<blocks, ZCU_THREADS, 0, s>>>((const T *)g, n, blk0, blk1, partials))
    return cudaGetLastError();
}

extern "C" cudaError_t zcu_stats_total(const double *partials, size_t count, int first, int last,
                                       int add, double *acc, double *out, cudaStream_t s)
{
    stats_total_kernel<<<1, 32, 0, s>>>(partials, count, first, last, add, acc, out);
    return cudaGetLastError();
}

extern "C" cudaError_t zcu_probe(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, stats_total_kernel);
}
