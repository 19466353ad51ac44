/*
 * fast.cu — the CUDA model's fast-mode kernels (fast.h): attention without T x T arrays and
 * parallel column reductions. The arithmetic of each thread is a function of flash_rows.h or
 * colsum.h, which the host tests run against gpt.c (tests/model/test_flash_rows.c,
 * test_colsum.c); this file only maps rows and columns onto threads.
 *
 * Compiled without --fmad=false (unlike layers.cu): nvcc contracts a*b+c into one rounding, so
 * results differ from gpt.c's in the last bits, as any reordering does; model_cuda's fast-mode
 * bounds allow for it.
 *
 * Attention: one thread per row. Query rows t of one (b, h) lie along threadIdx.x, so at each
 * step of the key loop the 32 lanes of a warp read the same key/value row (a broadcast); the
 * key-row kernel starts every lane's query loop at the warp's first row for the same reason.
 * Rows late in the sequence do the most work in the forward and dq kernels, so their blocks are
 * launched first (x reversed) and the short ones fill the tail. Head sizes 32 and 64 get their
 * own instantiation, where the row functions' local arrays become registers.
 *
 * Heads of 64 and 128 channels on an sm_80+ device whose opt-in shared memory per block holds
 * the largest block, the dk/dv one (for 128 channels 168.5 KiB: more than an A100's 163 KiB, less
 * than an H100's 227 KiB; for 64 channels more than sm_86/sm_89 allow), take the tensor-core
 * tiles of flash_tiles.h instead: one block of ZM_FT_THREADS threads per 64-row tile and (b, h),
 * q, k, v, dy rounded to bf16 as the tiles are loaded (no scratch arrays), three kernels for
 * forward, dk/dv and dq (no atomics). Drow is the rows' att_drow_k in both paths, and lse has the
 * same layout and meaning, so the interface of fast.h does not change.
 */
#include "models/cuda/colsum.h"
#include "models/cuda/fast.h"
#include "models/cuda/flash_rows.h"
#include "models/cuda/flash_tiles.h"

namespace {

constexpr int ROWS = 64;   /* attention rows per block */
constexpr int COLS = 128;  /* columns per block of the reductions */

/* Row t of this thread, with the blocks of x taken from the end. */
__device__ __forceinline__ int row_late_first()
{
    return (int)(gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;
}

/* The shape with hs fixed at compile time when HS > 0 (then the loops unroll fully). */
template <int HS>
__device__ __forceinline__ zm_flash_shape shape(zm_flash_shape g)
{
    if (HS > 0) g.hs = HS;
    return g;
}

template <int HS>
__global__ void att_fwd_k(zm_flash_shape g, float *y, float *lse, const float *qkv)
{
    int t = row_late_first(), bh = blockIdx.y;
    if (t >= g.T) return;
    zm_flash_fwd_row(shape<HS>(g), qkv, y, lse, bh / g.H, bh % g.H, t);
}

__global__ void att_drow_k(zm_flash_shape g, float *drow, const float *dy, const float *y)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x, bh = blockIdx.y, b = bh / g.H, h = bh % g.H;
    if (t >= g.T) return;
    drow[zm_flash_bht(&g, b, h, t)] = zm_flash_drow(g, dy, y, b, h, t);
}

template <int HS>
__global__ void att_dq_k(zm_flash_shape g, float *dqkv, const float *dy, const float *lse,
                         const float *drow, const float *qkv)
{
    int t = row_late_first(), bh = blockIdx.y;
    if (t >= g.T) return;
    zm_flash_dq_row(shape<HS>(g), qkv, dy, lse, drow, dqkv, bh / g.H, bh % g.H, t);
}

/* Key rows: the early ones have the longest loops and come first in x already. */
template <int HS>
__global__ void att_dkv_k(zm_flash_shape g, float *dqkv, const float *dy, const float *lse,
                          const float *drow, const float *qkv)
{
    int t2 = blockIdx.x * blockDim.x + threadIdx.x, bh = blockIdx.y;
    if (t2 >= g.T) return;
    /* blockDim.x is a multiple of 32, so t2 & ~31 is the warp's first row */
    zm_flash_dkv_row(shape<HS>(g), qkv, dy, lse, drow, dqkv, bh / g.H, bh % g.H, t2, t2 & ~31);
}

/* Tensor-core tiles (flash_tiles.h): blockIdx.x is the tile, late query tiles first (their key
 * loops are the longest), early key tiles first for dk/dv (likewise); blockIdx.y is b*H + h. */
template <int HS>
__global__ void __launch_bounds__(ZM_FT_THREADS)
    att_fwd_tc_k(zm_flash_shape g, float *y, float *lse, const float *qkv)
{
    extern __shared__ __align__(128) unsigned char tile_mem[];
    int bh = blockIdx.y, qb = (int)(gridDim.x - 1 - blockIdx.x);
    zm_ft_fwd_block(shape<HS>(g), qkv, y, lse, bh / g.H, bh % g.H, qb, tile_mem, threadIdx.x,
                    blockDim.x);
}

template <int HS>
__global__ void __launch_bounds__(ZM_FT_THREADS)
    att_dkv_tc_k(zm_flash_shape g, float *dqkv, const float *dy, const float *lse,
                 const float *drow, const float *qkv)
{
    extern __shared__ __align__(128) unsigned char tile_mem[];
    int bh = blockIdx.y;
    zm_ft_dkv_block(shape<HS>(g), qkv, dy, lse, drow, dqkv, bh / g.H, bh % g.H, blockIdx.x,
                    tile_mem, threadIdx.x, blockDim.x);
}

template <int HS>
__global__ void __launch_bounds__(ZM_FT_THREADS)
    att_dq_tc_k(zm_flash_shape g, float *dqkv, const float *dy, const float *lse,
                const float *drow, const float *qkv)
{
    extern __shared__ __align__(128) unsigned char tile_mem[];
    int bh = blockIdx.y, qb = (int)(gridDim.x - 1 - blockIdx.x);
    zm_ft_dq_block(shape<HS>(g), qkv, dy, lse, drow, dqkv, bh / g.H, bh % g.H, qb, tile_mem,
                   threadIdx.x, blockDim.x);
}

/* Pass 1 of a column sum: block (column tile, chunk). */
__global__ void colsum_part_k(float *part, const float *x, int R, int C, int n)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    part[(size_t)k * C + c] =
        zm_cs_rows(x, C, c, zm_cs_chunk_lo(R, n, k), zm_cs_chunk_lo(R, n, k + 1));
}

__global__ void ln_part_k(float *pw, float *pb, const float *dout, const float *x,
                          const float *mean, const float *rstd, int R, int C, int n)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    size_t i = (size_t)k * C + c;
    zm_cs_ln_rows(dout, x, mean, rstd, C, c, zm_cs_chunk_lo(R, n, k),
                  zm_cs_chunk_lo(R, n, k + 1), &pw[i], &pb[i]);
}

/* Pass 2: out[c] += the chunk sums in chunk order (out2/part2 optional: LayerNorm's pair). */
__global__ void colsum_total_k(float *out, const float *part, float *out2, const float *part2,
                               int C, int n)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    out[c] = out[c] + zm_cs_total(part, C, c, n);
    if (out2) out2[c] = out2[c] + zm_cs_total(part2, C, c, n);
}

/* y walks the distinct tokens with a stride: a batch can hold all 65536 uint16 token values,
 * one more than gridDim.y allows. */
__global__ void embed_wte_k(float *dwte, const float *d, const int *rows, const int *start,
                            const int *id, int ntok, int D)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    for (int u = blockIdx.y; u < ntok; u += gridDim.y) {
        float *w = dwte + (size_t)id[u] * D + c;
        *w = zm_cs_gather(*w, d, D, c, rows, start[u], start[u + 1]);
    }
}

__global__ void embed_wpe_k(float *dwpe, const float *d, int B, int T, int D)
{
    size_t n = (size_t)T * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dwpe[i] = zm_cs_position(dwpe[i], d, B, T, D, (int)(i / D), (int)(i % D));
}

unsigned cover(size_t n, size_t per_block) { return (unsigned)((n + per_block - 1) / per_block); }

/* One attention kernel at the head size's instantiation. */
#define ZMF_LAUNCH(kernel, grid, g, ...)                                                      \
    do {                                                                                      \
        if ((g).hs == 64) kernel<64><<<grid, ROWS, 0, s>>>(g, __VA_ARGS__);                   \
        else if ((g).hs == 32) kernel<32><<<grid, ROWS, 0, s>>>(g, __VA_ARGS__);              \
        else kernel<0><<<grid, ROWS, 0, s>>>(g, __VA_ARGS__);                                 \
    } while (0)

/* 1 when head size hs takes the tensor-core tiles on the current device: a size the tiles
 * take, whose largest block fits the device's shared memory per block (opt-in). */
cudaError_t use_tiles(int hs, int *yes)
{
    *yes = 0;
    if (!zm_ft_head_ok(hs)) return cudaSuccess;
    int dev, optin, major;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) return e;
    size_t need = zm_ft_bwd_bytes(hs, 1); /* the largest of the three */
    *yes = major >= 8 && need <= (size_t)optin;
    return cudaSuccess;
}

/* Launches a tile kernel with `bytes` of dynamic shared memory (over the 48 KiB default, so the
 * limit is raised first; the call is cheap and idempotent). */
template <typename... P, typename... A>
cudaError_t launch_tiles(void (*k)(P...), dim3 grid, size_t bytes, cudaStream_t s, A... args)
{
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes);
    if (e != cudaSuccess) return e;
    k<<<grid, ZM_FT_THREADS, bytes, s>>>(args...);
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t zmf_att_fwd(float *y, float *lse, const float *qkv, int B, int T, int D,
                                   int H, cudaStream_t s)
{
    zm_flash_shape g = zm_flash_shape_of(T, D, H);
    int tiles;
    cudaError_t e = use_tiles(g.hs, &tiles);
    if (e != cudaSuccess) return e;
    if (tiles) {
        dim3 grid(cover(T, ZM_FT_BR), B * H);
        size_t bytes = zm_ft_fwd_bytes(g.hs);
        if (g.hs == 64) return launch_tiles(att_fwd_tc_k<64>, grid, bytes, s, g, y, lse, qkv);
        return launch_tiles(att_fwd_tc_k<128>, grid, bytes, s, g, y, lse, qkv);
    }
    dim3 grid(cover(T, ROWS), B * H);
    ZMF_LAUNCH(att_fwd_k, grid, g, y, lse, qkv);
    return cudaGetLastError();
}

extern "C" cudaError_t zmf_att_bwd(float *dqkv, float *drow, const float *dy, const float *y,
                                   const float *lse, const float *qkv, int B, int T, int D, int H,
                                   cudaStream_t s)
{
    zm_flash_shape g = zm_flash_shape_of(T, D, H);
    int tiles;
    cudaError_t e = use_tiles(g.hs, &tiles);
    if (e != cudaSuccess) return e;
    dim3 grid(cover(T, ROWS), B * H);
    att_drow_k<<<grid, ROWS, 0, s>>>(g, drow, dy, y);
    e = cudaGetLastError();     /* its own failure, before the tiles' attribute call */
    if (e != cudaSuccess) return e;
    if (tiles) {
        static_assert(ZM_FT_BR == ZM_FT_BC, "one grid serves the key and the query tiles");
        dim3 tgrid(cover(T, ZM_FT_BR), B * H);
        size_t kv = zm_ft_bwd_bytes(g.hs, 1), q = zm_ft_bwd_bytes(g.hs, 0);
        if (g.hs == 64) {
            e = launch_tiles(att_dkv_tc_k<64>, tgrid, kv, s, g, dqkv, dy, lse, drow, qkv);
            if (e == cudaSuccess)
                e = launch_tiles(att_dq_tc_k<64>, tgrid, q, s, g, dqkv, dy, lse, drow, qkv);
        } else {
            e = launch_tiles(att_dkv_tc_k<128>, tgrid, kv, s, g, dqkv, dy, lse, drow, qkv);
            if (e == cudaSuccess)
                e = launch_tiles(att_dq_tc_k<128>, tgrid, q, s, g, dqkv, dy, lse, drow, qkv);
        }
        return e;
    }
    ZMF_LAUNCH(att_dq_k, grid, g, dqkv, dy, lse, drow, qkv);
    ZMF_LAUNCH(att_dkv_k, grid, g, dqkv, dy, lse, drow, qkv);
    return cudaGetLastError();
}

extern "C" cudaError_t zmf_bias_grad(float *db, float *part, const float *dy, int R, int C,
                                     cudaStream_t s)
{
    int n = zm_cs_chunks(R);
    colsum_part_k<<<dim3(cover(C, COLS), n), COLS, 0, s>>>(part, dy, R, C, n);
    colsum_total_k<<<cover(C, COLS), COLS, 0, s>>>(db, part, NULL, NULL, C, n);
    return cudaGetLastError();
}

extern "C" cudaError_t zmf_ln_bwd_dwdb(float *dw, float *db, float *part, const float *dout,
                                       const float *x, const float *mean, const float *rstd,
                                       int R, int C, cudaStream_t s)
{
    int n = zm_cs_chunks(R);
    float *pw = part, *pb = part + (size_t)n * C;
    ln_part_k<<<dim3(cover(C, COLS), n), COLS, 0, s>>>(pw, pb, dout, x, mean, rstd, R, C, n);
    colsum_total_k<<<cover(C, COLS), COLS, 0, s>>>(dw, pw, db, pb, C, n);
    return cudaGetLastError();
}

extern "C" cudaError_t zmf_embed_bwd(float *dwte, float *dwpe, const float *d, const int *rows,
                                     const int *start, const int *id, int ntok, int B, int T,
                                     int D, cudaStream_t s)
{
    if (ntok > 0)
        embed_wte_k<<<dim3(cover(D, COLS), ntok < 65535 ? ntok : 65535), COLS, 0, s>>>(
            dwte, d, rows, start, id, ntok, D);
    size_t n = (size_t)T * D;
    unsigned blocks = cover(n, 256);
    embed_wpe_k<<<blocks < 65535 ? blocks : 65535, 256, 0, s>>>(dwpe, d, B, T, D);
    return cudaGetLastError();
}
