/*
 * vec.cuh — typed element access for the kernels: one element, or eight at a time with 16-byte
 * loads and stores (2 x float4 for fp32, one uint4 for fp16/bf16).
 *
 * Conversions are the IEEE round-to-nearest-even ones of cuda_fp16.h / cuda_bf16.h, which keep
 * subnormals and overflow to inf, like zk_f32_to_f16/zk_f32_to_bf16. Widening is exact.
 * The 8-wide forms require the element index to sit on a 16-byte boundary of an aligned stream;
 * the kernels guarantee it with a scalar head (zcu_vec_head).
 */
#ifndef ZINC_KERNELS_CUDA_VEC_CUH
#define ZINC_KERNELS_CUDA_VEC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace zcu {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

template <typename T> __device__ __forceinline__ float ld1(const T *p, size_t i) { return to_f(p[i]); }
template <typename T> __device__ __forceinline__ void st1(T *p, size_t i, float x) { p[i] = from_f<T>(x); }

/* Eight elements starting at i (i % 8 == 0 relative to the aligned part). */
__device__ __forceinline__ void ld8(const float *p, size_t i, float x[8])
{
    float4 a = *reinterpret_cast<const float4 *>(p + i);
    float4 b = *reinterpret_cast<const float4 *>(p + i + 4);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}
__device__ __forceinline__ void st8(float *p, size_t i, const float x[8])
{
    *reinterpret_cast<float4 *>(p + i) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4 *>(p + i + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

template <typename T> __device__ __forceinline__ void ld8(const T *p, size_t i, float x[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p + i);
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = to_f(h[k]);
}
template <typename T> __device__ __forceinline__ void st8(T *p, size_t i, const float x[8])
{
    uint4 u;
    T *h = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int k = 0; k < 8; k++) h[k] = from_f<T>(x[k]);
    *reinterpret_cast<uint4 *>(p + i) = u;
}

/* Grid-stride helpers: this thread's first index and the stride over the whole grid. */
__device__ __forceinline__ size_t tid() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t nthreads() { return (size_t)gridDim.x * blockDim.x; }

}  // namespace zcu

/* Dispatches a zinc_dtype value (0 fp32, 1 fp16, 2 bf16) to a C++ type named T inside BODY. */
#define ZCU_DISPATCH(dt, T, ...)                                                              \
    switch (dt) {                                                                             \
    case 0: { typedef float T; __VA_ARGS__; } break;                                          \
    case 1: { typedef __half T; __VA_ARGS__; } break;                                         \
    case 2: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                                  \
    default: return cudaErrorInvalidValue;                                                    \
    }

#define ZCU_THREADS 256

/* Blocks for `work` items, each thread taking `per_thread`, capped at grid_cap (grid-stride). */
static inline unsigned zcu_blocks(size_t work, size_t per_thread, int grid_cap)
{
    size_t threads = (work + per_thread - 1) / per_thread;
    size_t b = (threads + ZCU_THREADS - 1) / ZCU_THREADS;
    if (b < 1) b = 1;
    if (b > (size_t)grid_cap) b = (size_t)grid_cap;
    return (unsigned)b;
}

#endif
