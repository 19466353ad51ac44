/*
 * flash_tiles.h — causal attention by tiles on tensor cores (FlashAttention-2's scheme): the
 * per-block work of the CUDA model's fast attention for heads of 64 (and 128) channels
 * (fast.cu), written as plain functions that compile both as C99 (tests/model/test_flash_tiles.c
 * runs every block on the host against a double evaluation of gpt.c's attention) and as CUDA, so
 * a machine without a GPU checks the index, mask and online-softmax logic of the kernels.
 *
 * A block of ZM_FT_THREADS threads owns one tile of 64 query rows (forward, dq) or 64 key rows
 * (dk, dv) of one (b, h). Every function takes the thread's index and the block's thread count
 * and walks its share of each loop (i = tid; i < n; i += nth); ZM_FT_SYNC() is __syncthreads()
 * on the GPU and nothing on the host, where one call with tid 0, nth 1 does a step for the whole
 * block. The small matrix products go through zm_ft_mma: on sm_80+ nvcuda::wmma bf16 16x16x16
 * fragments with fp32 accumulation (each warp takes 16x16 output tiles in turn), elsewhere a
 * scalar loop over the same bf16 values with fp32 sums. All tiles live in dynamic shared memory
 * (zm_ft_*_bytes, carved by zm_ft_*_mem); nothing T x T is stored.
 *
 * Rounding, as PyTorch's autocast SDPA: q, k, v and dy are rounded to bf16 (round to nearest even)
 * while their tiles are loaded from the fp32 activations (no extra global arrays), and P and dS
 * are rounded to bf16 before they enter a product. Scores, the softmax, the row max/sum, lse, O
 * and every gradient accumulate in fp32; outputs are fp32 in the layouts of flash_rows.h.
 *
 * Forward, per query tile (rows q0 .. q0+63): for each key tile up to the diagonal,
 * S = Q K^T, then per row the online softmax of flash_rows.h on a whole tile at a time — new
 * maximum m', c = exp(m - m'), p = exp(scale s - m') (0 where the key is after the query or past
 * T), l = c l + sum p (fp32 p) — O *= c, O += bf16(P) V. At the end y = O / l, lse = m + log l
 * (the [B*H, T] layout and meaning of the row kernels, so either backward can follow either
 * forward).
 * Backward, with Drow = dy . y from flash_rows.h's zm_flash_drow (fp32) and P = exp(scale S - lse):
 *  - per key tile: for each query tile from the diagonal on, S = Q K^T, P, dV += bf16(P)^T dO,
 *    dP = dO V^T, dS = P (dP - Drow) scale, dK += bf16(dS)^T Q;
 *  - per query tile: for each key tile up to the diagonal, S, P, dP, dS as above,
 *    dQ += bf16(dS) K.
 * Each output tile has one owner that sums its terms in a fixed order, so the results are the
 * same run to run (no atomics).
 */
#ifndef ZINC_MODELS_CUDA_FLASH_TILES_H
#define ZINC_MODELS_CUDA_FLASH_TILES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "models/cuda/flash_rows.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>
typedef __nv_bfloat16 zm_bf16;
#define ZM_FT __device__
#else
#include "models/half.h"
typedef uint16_t zm_bf16;
#define ZM_FT
#endif

/* A host test may define ZM_FT_SYNC first (a barrier of its threads) to run one block on several
 * host threads, as the GPU does, and see that the barriers below are where they must be. */
#ifndef ZM_FT_SYNC
#ifdef __CUDA_ARCH__
#define ZM_FT_SYNC() __syncthreads()
#else
#define ZM_FT_SYNC() ((void)0)
#endif
#endif

#define ZM_FT_BR 64        /* query rows per tile */
#define ZM_FT_BC 64        /* key rows per tile */
#define ZM_FT_THREADS 128  /* threads per block: 4 warps */

/* Head sizes the tiles take (multiples of the 16-wide fragments that fit shared memory). */
ZM_HD static inline int zm_ft_head_ok(int hs) { return hs == 64 || hs == 128; }

ZM_FT static inline zm_bf16 zm_ft_bf16(float x)
{
#ifdef __CUDACC__
    return __float2bfloat16(x); /* round to nearest even, as zm_f32_to_bf16 */
#else
    return zm_f32_to_bf16(x);
#endif
}

ZM_FT static inline float zm_ft_f32(zm_bf16 x)
{
#ifdef __CUDACC__
    return __bfloat162float(x);
#else
    return zm_bf16_to_f32(x);
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* C (+)= A B on tensor cores. LA/LB: wmma::row_major or col_major, the layouts zm_ft_mma's
 * a_cols/b_cols name. Output tiles go to warps in turn. */
template <typename LA, typename LB>
__device__ inline void zm_ft_wmma(float *C, int ldc, const zm_bf16 *A, int lda, const zm_bf16 *B,
                                  int ldb, int M, int N, int K, int accumulate, int tid, int nth)
{
    using namespace nvcuda;
    const bool a_cols = std::is_same<LA, wmma::col_major>::value;
    const bool b_cols = std::is_same<LB, wmma::col_major>::value;
    const int tn = N / 16, tiles = (M / 16) * tn;
    for (int t = tid / 32; t < tiles; t += nth / 32) {
        int m0 = t / tn * 16, n0 = t % tn * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        if (accumulate) wmma::load_matrix_sync(c, C + m0 * ldc + n0, ldc, wmma::mem_row_major);
        else wmma::fill_fragment(c, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> b;
            wmma::load_matrix_sync(a, A + (a_cols ? m0 + k0 * lda : m0 * lda + k0), lda);
            wmma::load_matrix_sync(b, B + (b_cols ? k0 + n0 * ldb : k0 * ldb + n0), ldb);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(C + m0 * ldc + n0, c, ldc, wmma::mem_row_major);
    }
}
#endif

/* C [M, N] (row-major, ldc) = (accumulate ? C : 0) + A B, A [M, K] and B [K, N] bf16, sums in
 * fp32. A(m, k) is A[m * lda + k], or A[m + k * lda] when a_cols (a transposed operand read in
 * place); B(k, n) is B[k * ldb + n], or B[k + n * ldb] when b_cols. M, N, K: multiples of 16;
 * pointers 32-byte aligned, ld a multiple of 8 (wmma's rules). Every thread of the block calls
 * it. */
ZM_FT static inline void zm_ft_mma(float *C, int ldc, const zm_bf16 *A, int lda, int a_cols,
                                   const zm_bf16 *B, int ldb, int b_cols, int M, int N, int K,
                                   int accumulate, int tid, int nth)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    if (a_cols && b_cols)
        zm_ft_wmma<wmma::col_major, wmma::col_major>(C, ldc, A, lda, B, ldb, M, N, K, accumulate,
                                                     tid, nth);
    else if (a_cols)
        zm_ft_wmma<wmma::col_major, wmma::row_major>(C, ldc, A, lda, B, ldb, M, N, K, accumulate,
                                                     tid, nth);
    else if (b_cols)
        zm_ft_wmma<wmma::row_major, wmma::col_major>(C, ldc, A, lda, B, ldb, M, N, K, accumulate,
                                                     tid, nth);
    else
        zm_ft_wmma<wmma::row_major, wmma::row_major>(C, ldc, A, lda, B, ldb, M, N, K, accumulate,
                                                     tid, nth);
#else
    /* The products of two bf16 values are exact in fp32; only the sum rounds, as on the GPU
     * (where the order of the sum is the tensor cores' own). The 16x16 output tiles go to the
     * threads in turn, as to the warps on the GPU, so a host test on several threads meets the
     * GPU's pattern of ownership (not the element-wise one of the other steps). */
    const int tn = N / 16, tiles = (M / 16) * tn;
    for (int t = tid; t < tiles; t += nth)
        for (int m = t / tn * 16; m < t / tn * 16 + 16; m++)
            for (int n = t % tn * 16; n < t % tn * 16 + 16; n++) {
                float acc = accumulate ? C[m * ldc + n] : 0.0f;
                for (int k = 0; k < K; k++)
                    acc += zm_ft_f32(A[a_cols ? m + k * lda : m * lda + k]) *
                           zm_ft_f32(B[b_cols ? k + n * ldb : k * ldb + n]);
                C[m * ldc + n] = acc;
            }
#endif
}

/* ---- shared memory of each kind of block ---------------------------------------------------- */

/* Every piece is a multiple of 256 bytes, so each starts 32-byte aligned (wmma's rule) when the
 * block's base is. fp32 pieces first. Tiles are row-major: [BR or BC rows][hs] or [BR][BC]. */
typedef struct zm_ft_fwd_mem {
    float *s;          /* [BR, BC] scores of the current key tile */
    float *o;          /* [BR, hs] unnormalised output */
    float *m, *l, *c;  /* [BR] running max, running sum, this tile's rescale factor */
    zm_bf16 *q, *k, *v; /* [BR, hs], [BC, hs], [BC, hs] */
    zm_bf16 *p;        /* [BR, BC] bf16(P) */
} zm_ft_fwd_mem;

typedef struct zm_ft_bwd_mem {
    float *s;           /* [BR, BC] scores, then fp32 P in place */
    float *dp;          /* [BR, BC] dO V^T */
    float *acc0, *acc1; /* dkv: dK, dV [BC, hs]; dq: dQ [BR, hs] (acc1 NULL) */
    float *lse, *drow;  /* [BR] of the current query tile */
    zm_bf16 *q, *dy, *k, *v; /* [BR, hs], [BR, hs], [BC, hs], [BC, hs] */
    zm_bf16 *p;         /* [BR, BC] bf16(P), then bf16(dS) */
} zm_ft_bwd_mem;

/* Bytes of dynamic shared memory of a forward block for head size hs. */
ZM_HD static inline size_t zm_ft_fwd_bytes(int hs)
{
    return 4 * ((size_t)ZM_FT_BR * ZM_FT_BC + (size_t)ZM_FT_BR * hs + 3 * ZM_FT_BR) +
           2 * ((size_t)ZM_FT_BR * hs + 2 * (size_t)ZM_FT_BC * hs + (size_t)ZM_FT_BR * ZM_FT_BC);
}

/* Bytes of a backward block: dkv (key tiles, two accumulators) or dq (query tiles, one). */
ZM_HD static inline size_t zm_ft_bwd_bytes(int hs, int dkv)
{
    size_t acc = dkv ? 2 * (size_t)ZM_FT_BC * hs : (size_t)ZM_FT_BR * hs;
    return 4 * (2 * (size_t)ZM_FT_BR * ZM_FT_BC + acc + 2 * ZM_FT_BR) +
           2 * (2 * (size_t)ZM_FT_BR * hs + 2 * (size_t)ZM_FT_BC * hs +
                (size_t)ZM_FT_BR * ZM_FT_BC);
}

ZM_HD static inline zm_ft_fwd_mem zm_ft_fwd_carve(void *base, int hs)
{
    zm_ft_fwd_mem w;
    float *f = (float *)base;
    w.s = f;
    f += ZM_FT_BR * ZM_FT_BC;
    w.o = f;
    f += ZM_FT_BR * hs;
    w.m = f;
    w.l = f + ZM_FT_BR;
    w.c = f + 2 * ZM_FT_BR;
    zm_bf16 *h = (zm_bf16 *)(f + 3 * ZM_FT_BR);
    w.q = h;
    w.k = h + ZM_FT_BR * hs;
    w.v = w.k + ZM_FT_BC * hs;
    w.p = w.v + ZM_FT_BC * hs;
    return w;
}

ZM_HD static inline zm_ft_bwd_mem zm_ft_bwd_carve(void *base, int hs, int dkv)
{
    zm_ft_bwd_mem w;
    float *f = (float *)base;
    w.s = f;
    w.dp = f + ZM_FT_BR * ZM_FT_BC;
    f += 2 * ZM_FT_BR * ZM_FT_BC;
    w.acc0 = f;
    w.acc1 = dkv ? f + ZM_FT_BC * hs : NULL;
    f += dkv ? 2 * ZM_FT_BC * hs : ZM_FT_BR * hs;
    w.lse = f;
    w.drow = f + ZM_FT_BR;
    zm_bf16 *h = (zm_bf16 *)(f + 2 * ZM_FT_BR);
    w.q = h;
    w.dy = h + ZM_FT_BR * hs;
    w.k = w.dy + ZM_FT_BR * hs;
    w.v = w.k + ZM_FT_BC * hs;
    w.p = w.v + ZM_FT_BC * hs;
    return w;
}

/* ---- steps ---------------------------------------------------------------------------------- */

/* 1 when query row t sees key row t2: causal, and the query inside the sequence (t2 <= t < T
 * then holds for the key too). Rows and keys past T are the padding of the last tile. */
ZM_HD static inline int zm_ft_visible(int t, int t2, int T) { return t2 <= t && t < T; }

/* Rows r0 .. r0+R-1 of sequence b of a [B*T, width] fp32 array, columns col .. col+hs-1, into
 * dst [R, hs] as bf16; rows at or past T as zeros (so padding never carries NaN into a sum). */
ZM_FT static inline void zm_ft_load(zm_bf16 *dst, const float *src, int width, int col,
                                    zm_flash_shape g, int b, int r0, int R, int tid, int nth)
{
    for (int i = tid; i < R * g.hs; i += nth) {
        int r = i / g.hs, c = i % g.hs, t = r0 + r;
        dst[i] = zm_ft_bf16(t < g.T ? src[zm_flash_row(&g, b, t, width) + col + c] : 0.0f);
    }
}

/* R entries t = r0.. of a [B*H, T] per-row array (lse, Drow) for (b, h); 0 past T. */
ZM_FT static inline void zm_ft_load_rows(float *dst, const float *src, zm_flash_shape g, int b,
                                         int h, int r0, int R, int tid, int nth)
{
    for (int i = tid; i < R; i += nth)
        dst[i] = r0 + i < g.T ? src[zm_flash_bht(&g, b, h, r0 + i)] : 0.0f;
}

/* Forward of query tile qb of (b, h): writes y's hs columns of head h for its rows < T, and lse.
 * mem: zm_ft_fwd_bytes(g.hs) bytes. */
ZM_FT static inline void zm_ft_fwd_block(zm_flash_shape g, const float *qkv, float *y, float *lse,
                                         int b, int h, int qb, void *mem, int tid, int nth)
{
    const int hs = g.hs, W = 3 * g.D, q0 = qb * ZM_FT_BR;
    const int last = (q0 + ZM_FT_BR < g.T ? q0 + ZM_FT_BR : g.T) - 1; /* last query row < T */
    zm_ft_fwd_mem w = zm_ft_fwd_carve(mem, hs);
    zm_ft_load(w.q, qkv, W, h * hs, g, b, q0, ZM_FT_BR, tid, nth);
    for (int i = tid; i < ZM_FT_BR * hs; i += nth) w.o[i] = 0.0f;
    for (int r = tid; r < ZM_FT_BR; r += nth) {
        w.m[r] = -INFINITY;
        w.l[r] = 0.0f;
    }
    for (int kb = 0; kb <= last / ZM_FT_BC; kb++) {
        const int k0 = kb * ZM_FT_BC;
        ZM_FT_SYNC(); /* the previous tile's products are done with k, v and p */
        zm_ft_load(w.k, qkv, W, g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
        zm_ft_load(w.v, qkv, W, 2 * g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
        ZM_FT_SYNC();
        zm_ft_mma(w.s, ZM_FT_BC, w.q, hs, 0, w.k, hs, 1, ZM_FT_BR, ZM_FT_BC, hs, 0, tid, nth);
        ZM_FT_SYNC();
        for (int r = tid; r < ZM_FT_BR; r += nth) {
            const int t = q0 + r;
            const float *sr = w.s + r * ZM_FT_BC;
            float mo = w.m[r], mx = mo, sum = 0.0f;
            /* Row r starts at column r: rows are 64 floats (256 B) apart, so one column of every
             * row lies in one shared-memory bank, and the 32 lanes of a warp walking the columns
             * in step would all hit it (a 32-way conflict); rotated, they hit 32 banks. */
            for (int jj = 0; jj < ZM_FT_BC; jj++) {
                const int j = (jj + r) % ZM_FT_BC;
                if (zm_ft_visible(t, k0 + j, g.T)) mx = fmaxf(mx, g.scale * sr[j]);
            }
            /* exp(-inf) = 0 on the first tile; a row with no visible key keeps c = 1, p = 0 */
            float c = mx == -INFINITY ? 1.0f : expf(mo - mx);
            for (int jj = 0; jj < ZM_FT_BC; jj++) {
                const int j = (jj + r) % ZM_FT_BC;
                float p = zm_ft_visible(t, k0 + j, g.T) ? expf(g.scale * sr[j] - mx) : 0.0f;
                sum += p;
                w.p[r * ZM_FT_BC + j] = zm_ft_bf16(p);
            }
            w.l[r] = w.l[r] * c + sum;
            w.m[r] = mx;
            w.c[r] = c;
        }
        ZM_FT_SYNC();
        for (int i = tid; i < ZM_FT_BR * hs; i += nth) w.o[i] *= w.c[i / hs];
        ZM_FT_SYNC();
        zm_ft_mma(w.o, hs, w.p, ZM_FT_BC, 0, w.v, hs, 0, ZM_FT_BR, hs, ZM_FT_BC, 1, tid, nth);
    }
    ZM_FT_SYNC();
    for (int i = tid; i < ZM_FT_BR * hs; i += nth) {
        int r = i / hs, c = i % hs;
        if (q0 + r < g.T) y[zm_flash_row(&g, b, q0 + r, g.D) + h * hs + c] = w.o[i] / w.l[r];
    }
    for (int r = tid; r < ZM_FT_BR; r += nth)
        if (q0 + r < g.T) lse[zm_flash_bht(&g, b, h, q0 + r)] = w.m[r] + logf(w.l[r]);
}

/* Scores of a loaded (query tile q0, key tile k0) pair into fp32 P, in place in w.s; bf16(P) into
 * w.p when pb (the dk/dv blocks, which multiply by P). Masked entries are 0. */
ZM_FT static inline void zm_ft_probs(zm_flash_shape g, const zm_ft_bwd_mem *w, int q0, int k0,
                                     int pb, int tid, int nth)
{
    for (int i = tid; i < ZM_FT_BR * ZM_FT_BC; i += nth) {
        int r = i / ZM_FT_BC, j = i % ZM_FT_BC;
        float p = zm_ft_visible(q0 + r, k0 + j, g.T) ? expf(g.scale * w->s[i] - w->lse[r]) : 0.0f;
        w->s[i] = p;
        if (pb) w->p[i] = zm_ft_bf16(p);
    }
}

/* dS = P (dP - Drow) scale, as bf16 into w.p (P from w.s, dP from w.dp). */
ZM_FT static inline void zm_ft_dscores(zm_flash_shape g, const zm_ft_bwd_mem *w, int tid, int nth)
{
    for (int i = tid; i < ZM_FT_BR * ZM_FT_BC; i += nth)
        w->p[i] = zm_ft_bf16(w->s[i] * (w->dp[i] - w->drow[i / ZM_FT_BC]) * g.scale);
}

/* dk and dv of key tile kb of (b, h), written (not added) into dqkv's k and v columns of head h
 * for its rows < T. drow: zm_flash_drow of every row. mem: zm_ft_bwd_bytes(g.hs, 1) bytes. */
ZM_FT static inline void zm_ft_dkv_block(zm_flash_shape g, const float *qkv, const float *dy,
                                         const float *lse, const float *drow, float *dqkv, int b,
                                         int h, int kb, void *mem, int tid, int nth)
{
    const int hs = g.hs, W = 3 * g.D, k0 = kb * ZM_FT_BC;
    zm_ft_bwd_mem w = zm_ft_bwd_carve(mem, hs, 1);
    zm_ft_load(w.k, qkv, W, g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
    zm_ft_load(w.v, qkv, W, 2 * g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
    for (int i = tid; i < 2 * ZM_FT_BC * hs; i += nth) w.acc0[i] = 0.0f; /* dK, dV */
    /* query tiles holding a row >= k0: from the diagonal to the end */
    for (int qb = k0 / ZM_FT_BR; qb * ZM_FT_BR < g.T; qb++) {
        const int q0 = qb * ZM_FT_BR;
        ZM_FT_SYNC();
        zm_ft_load(w.q, qkv, W, h * hs, g, b, q0, ZM_FT_BR, tid, nth);
        zm_ft_load(w.dy, dy, g.D, h * hs, g, b, q0, ZM_FT_BR, tid, nth);
        zm_ft_load_rows(w.lse, lse, g, b, h, q0, ZM_FT_BR, tid, nth);
        zm_ft_load_rows(w.drow, drow, g, b, h, q0, ZM_FT_BR, tid, nth);
        ZM_FT_SYNC();
        zm_ft_mma(w.s, ZM_FT_BC, w.q, hs, 0, w.k, hs, 1, ZM_FT_BR, ZM_FT_BC, hs, 0, tid, nth);
        zm_ft_mma(w.dp, ZM_FT_BC, w.dy, hs, 0, w.v, hs, 1, ZM_FT_BR, ZM_FT_BC, hs, 0, tid, nth);
        ZM_FT_SYNC();
        zm_ft_probs(g, &w, q0, k0, 1, tid, nth);
        ZM_FT_SYNC();
        /* dV += P^T dO: P [BR, BC] read as its transpose [BC, BR] in place */
        zm_ft_mma(w.acc1, hs, w.p, ZM_FT_BC, 1, w.dy, hs, 0, ZM_FT_BC, hs, ZM_FT_BR, 1, tid, nth);
        ZM_FT_SYNC(); /* w.p is overwritten by dS next */
        zm_ft_dscores(g, &w, tid, nth);
        ZM_FT_SYNC();
        zm_ft_mma(w.acc0, hs, w.p, ZM_FT_BC, 1, w.q, hs, 0, ZM_FT_BC, hs, ZM_FT_BR, 1, tid, nth);
    }
    ZM_FT_SYNC();
    for (int i = tid; i < ZM_FT_BC * hs; i += nth) {
        int r = i / hs, c = i % hs;
        if (k0 + r >= g.T) continue;
        float *out = dqkv + zm_flash_row(&g, b, k0 + r, W) + g.D + h * hs + c;
        out[0] = w.acc0[i];
        out[g.D] = w.acc1[i];
    }
}

/* dq of query tile qb of (b, h), written (not added) into dqkv's q columns of head h for its rows
 * < T. mem: zm_ft_bwd_bytes(g.hs, 0) bytes. */
ZM_FT static inline void zm_ft_dq_block(zm_flash_shape g, const float *qkv, const float *dy,
                                        const float *lse, const float *drow, float *dqkv, int b,
                                        int h, int qb, void *mem, int tid, int nth)
{
    const int hs = g.hs, W = 3 * g.D, q0 = qb * ZM_FT_BR;
    const int last = (q0 + ZM_FT_BR < g.T ? q0 + ZM_FT_BR : g.T) - 1;
    zm_ft_bwd_mem w = zm_ft_bwd_carve(mem, hs, 0);
    zm_ft_load(w.q, qkv, W, h * hs, g, b, q0, ZM_FT_BR, tid, nth);
    zm_ft_load(w.dy, dy, g.D, h * hs, g, b, q0, ZM_FT_BR, tid, nth);
    zm_ft_load_rows(w.lse, lse, g, b, h, q0, ZM_FT_BR, tid, nth);
    zm_ft_load_rows(w.drow, drow, g, b, h, q0, ZM_FT_BR, tid, nth);
    for (int i = tid; i < ZM_FT_BR * hs; i += nth) w.acc0[i] = 0.0f;
    for (int kb = 0; kb <= last / ZM_FT_BC; kb++) {
        const int k0 = kb * ZM_FT_BC;
        ZM_FT_SYNC();
        zm_ft_load(w.k, qkv, W, g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
        zm_ft_load(w.v, qkv, W, 2 * g.D + h * hs, g, b, k0, ZM_FT_BC, tid, nth);
        ZM_FT_SYNC();
        zm_ft_mma(w.s, ZM_FT_BC, w.q, hs, 0, w.k, hs, 1, ZM_FT_BR, ZM_FT_BC, hs, 0, tid, nth);
        zm_ft_mma(w.dp, ZM_FT_BC, w.dy, hs, 0, w.v, hs, 1, ZM_FT_BR, ZM_FT_BC, hs, 0, tid, nth);
        ZM_FT_SYNC();
        zm_ft_probs(g, &w, q0, k0, 0, tid, nth);
        zm_ft_dscores(g, &w, tid, nth); /* same elements, same thread: no barrier needed */
        ZM_FT_SYNC();
        zm_ft_mma(w.acc0, hs, w.p, ZM_FT_BC, 0, w.k, hs, 0, ZM_FT_BR, hs, ZM_FT_BC, 1, tid, nth);
    }
    ZM_FT_SYNC();
    for (int i = tid; i < ZM_FT_BR * hs; i += nth) {
        int r = i / hs, c = i % hs;
        if (q0 + r < g.T) dqkv[zm_flash_row(&g, b, q0 + r, W) + h * hs + c] = w.acc0[i];
    }
}

#endif
