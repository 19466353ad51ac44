/*
 * layers.cu — the CUDA model's layers other than the matrix products (those are cuBLAS, in
 * model.cu). Written after gpt.c's functions of the same role (see layers.h) and compiled with
 * --fmad=false, so that each a*b+c is two roundings, as gpt.c's arithmetic is on x86-64 without
 * FMA. Parameter tensors are read in their dtype through ldp(); one branch on a uniform value.
 * Launch shapes favour simplicity over speed: the built-in model is small.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "models/cuda/layers.h"

namespace {

constexpr int NT = 256;           /* threads of 1-D launches */
constexpr float LN_EPS = 1e-5f;   /* gpt.c LN_EPS */
constexpr float GELU_K = 0.7978845608028654f;

__device__ __forceinline__ float ldp(const void *p, int dt, size_t i)
{
    if (dt == 0) return static_cast<const float *>(p)[i];
    if (dt == 1) return __half2float(static_cast<const __half *>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}

__device__ __forceinline__ void stp(void *p, int dt, size_t i, float x)
{
    if (dt == 0) static_cast<float *>(p)[i] = x;
    else if (dt == 1) static_cast<__half *>(p)[i] = __float2half_rn(x);
    else static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32. */
template <bool MAX>
__device__ float block_reduce(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float u = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
        u = MAX ? warp_max(u) : warp_sum(u);
        if (lane == 0) sh[32] = u;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads(); /* sh may be reused by the next call */
    return r;
}

/* gpt.c dot(): eight partial sums in a fixed tree. */
__device__ float dot8(const float *a, const float *b, int n)
{
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
#pragma unroll
        for (int k = 0; k < 8; k++) p[k] += a[i + k] * b[i + k];
    for (; i < n; i++) p[0] += a[i] * b[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

__global__ void embed_fwd_k(float *x, const void *wte, const void *wpe, int dt,
                            const uint16_t *tok, int BT, int T, int D)
{
    size_t n = (size_t)BT * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / D, c = i % D;
        x[i] = ldp(wte, dt, (size_t)tok[r] * D + c) + ldp(wpe, dt, (r % T) * D + c);
    }
}

/* One thread per channel walks the rows in order: the additions into each element happen in
 * gpt.c's order, and no two threads touch one element. */
__global__ void embed_bwd_k(float *dwte, float *dwpe, const float *d, const uint16_t *tok, int BT,
                            int T, int D)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    for (int r = 0; r < BT; r++) {
        float g = d[(size_t)r * D + c];
        dwte[(size_t)tok[r] * D + c] += g;
        dwpe[(size_t)(r % T) * D + c] += g;
    }
}

/* One warp per row. */
__global__ void ln_fwd_k(float *out, float *mean, float *rstd, const float *x, const void *w,
                         const void *b, int dt, int R, int C)
{
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= R) return;
    const float *xr = x + (size_t)r * C;
    float m = 0.0f, v = 0.0f;
    for (int i = lane; i < C; i += 32) m += xr[i];
    m = warp_sum(m) / (float)C;
    for (int i = lane; i < C; i += 32) v += (xr[i] - m) * (xr[i] - m);
    v = warp_sum(v) / (float)C;
    float rs = 1.0f / sqrtf(v + LN_EPS);
    float *y = out + (size_t)r * C;
    for (int i = lane; i < C; i += 32) y[i] = (xr[i] - m) * rs * ldp(w, dt, i) + ldp(b, dt, i);
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

__global__ void ln_bwd_dx_k(float *dx, const float *dout, const float *x, const float *mean,
                            const float *rstd, const void *w, int dt, int R, int C)
{
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= R) return;
    const float *xr = x + (size_t)r * C, *dy = dout + (size_t)r * C;
    float m = mean[r], rs = rstd[r], s1 = 0.0f, s2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = dy[i] * ldp(w, dt, i);
        s1 += dn;
        s2 += dn * (xr[i] - m) * rs;
    }
    s1 = warp_sum(s1) / (float)C;
    s2 = warp_sum(s2) / (float)C;
    float *d = dx + (size_t)r * C;
    for (int i = lane; i < C; i += 32) {
        float xh = (xr[i] - m) * rs;
        d[i] += rs * (dy[i] * ldp(w, dt, i) - s1 - xh * s2);
    }
}

/* One thread per column, rows in order, adding straight into dw/db as gpt.c does. */
__global__ void ln_bwd_dw_k(float *dw, float *db, const float *dout, const float *x,
                            const float *mean, const float *rstd, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = dw[c], ab = db[c];
    for (int r = 0; r < R; r++) {
        float dy = dout[(size_t)r * C + c];
        aw += dy * (x[(size_t)r * C + c] - mean[r]) * rstd[r];
        ab += dy;
    }
    dw[c] = aw;
    db[c] = ab;
}

__global__ void bias_res_k(float *out, const void *b, int dt, const float *res, int R, int C)
{
    size_t n = (size_t)R * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float y = out[i] + ldp(b, dt, i % C);
        out[i] = res ? y + res[i] : y;
    }
}

__global__ void bias_grad_k(float *db, const float *dy, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int r = 0; r < R; r++) s += dy[(size_t)r * C + c];
    db[c] += s;
}

__global__ void gelu_fwd_k(float *out, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + 0.044715f * v * v * v)));
    }
}

__global__ void gelu_bwd_k(float *d, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i], u = GELU_K * (v + 0.044715f * v * v * v), t = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        d[i] *= 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    }
}

/* One block per (query row t, sequence-head pair bh). qkv rows are [q | k | v], head h at
 * columns h*hs of each third. */
__global__ void att_fwd_k(float *att, float *y, const float *qkv, int T, int D, int H)
{
    __shared__ float sh[33];
    int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, hs = D / H;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * 3 * D;
    const float *q = base + (size_t)t * 3 * D + h * hs;
    float *p = att + ((size_t)bh * T + t) * T, mx = -INFINITY, sum = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        p[t2] = scale * dot8(q, base + (size_t)t2 * 3 * D + D + h * hs, hs);
        mx = fmaxf(mx, p[t2]);
    }
    mx = block_reduce<true>(mx, sh);
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        p[t2] = expf(p[t2] - mx);
        sum += p[t2];
    }
    float inv = 1.0f / block_reduce<false>(sum, sh);
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) p[t2] *= inv;
    __syncthreads();
    float *yr = y + ((size_t)b * T + t) * D + h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += p[t2] * base[(size_t)t2 * 3 * D + 2 * D + h * hs + i];
        yr[i] = acc;
    }
}

/* Backward, part 1, per query row t: dp = dy . v, ds = p (dp - sum p dp) scale into the ds
 * scratch, then dq[t] = sum_t2 ds[t2] k[t2]. */
__global__ void att_bwd_q_k(float *dqkv, float *ds, const float *dy, const float *att,
                            const float *qkv, int T, int D, int H)
{
    __shared__ float sh[33];
    int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, hs = D / H;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * 3 * D;
    const float *p = att + ((size_t)bh * T + t) * T;
    const float *dyr = dy + ((size_t)b * T + t) * D + h * hs;
    float *dsr = ds + ((size_t)bh * T + t) * T, s = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        dsr[t2] = dot8(dyr, base + (size_t)t2 * 3 * D + 2 * D + h * hs, hs);
        s += p[t2] * dsr[t2];
    }
    s = block_reduce<false>(s, sh);
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) dsr[t2] = p[t2] * (dsr[t2] - s) * scale;
    __syncthreads();
    float *dq = dqkv + ((size_t)b * T + t) * 3 * D + h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += dsr[t2] * base[(size_t)t2 * 3 * D + D + h * hs + i];
        dq[i] = acc;
    }
}

/* Part 2, per key row t2: dk[t2] = sum_{t >= t2} ds[t, t2] q[t], dv[t2] = sum p[t, t2] dy[t],
 * t ascending as gpt.c's loop adds them. */
__global__ void att_bwd_kv_k(float *dqkv, const float *ds, const float *dy, const float *att,
                             const float *qkv, int T, int D, int H)
{
    int t2 = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, hs = D / H;
    const float *base = qkv + (size_t)b * T * 3 * D;
    float *drow = dqkv + ((size_t)b * T + t2) * 3 * D + h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float dk = 0.0f, dv = 0.0f;
        for (int t = t2; t < T; t++) {
            size_t e = ((size_t)bh * T + t) * T + t2;
            dk += ds[e] * base[(size_t)t * 3 * D + h * hs + i];
            dv += att[e] * dy[((size_t)b * T + t) * D + h * hs + i];
        }
        drow[D + i] = dk;
        drow[2 * D + i] = dv;
    }
}

/* One block per row. */
__global__ void xent_k(float *logits, float *losses, const uint16_t *tgt, int V, float dscale,
                       int bwd)
{
    __shared__ float sh[33];
    int r = blockIdx.x, tg = tgt[r];
    float *p = logits + (size_t)r * V, mx = -INFINITY, sum = 0.0f;
    float ztg = p[tg]; /* read before any thread overwrites the row */
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, p[v]);
    mx = block_reduce<true>(mx, sh);
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        p[v] = expf(p[v] - mx);
        sum += p[v];
    }
    sum = block_reduce<false>(sum, sh);
    /* log-softmax of the target from its shifted logit, as gpt.c: finite when p underflows */
    if (threadIdx.x == 0) losses[r] = logf(sum) - (ztg - mx);
    float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float q = p[v] * inv;
        if (bwd) {
            if (v == tg) q -= 1.0f;
            q *= dscale;
        }
        p[v] = q;
    }
}

__global__ void cast_k(void *dst, int dt, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        stp(dst, dt, i, src[i]);
}

__global__ void add_into_k(void *dst, int dt, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        stp(dst, dt, i, ldp(dst, dt, i) + src[i]);
}

/* Blocks for grid-stride kernels (capped: they loop) ... */
unsigned grid(size_t n, size_t per_block)
{
    size_t g = (n + per_block - 1) / per_block;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* ... and for kernels with one row or column per warp or thread (not capped: they do not loop;
 * B*T <= 2^24 rows, so far below gridDim.x's 2^31 - 1). */
unsigned cover(size_t n, size_t per_block) { return (unsigned)((n + per_block - 1) / per_block); }

}  // namespace

extern "C" cudaError_t zmc_embed_fwd(float *x, const void *wte, const void *wpe, int dt,
                                     const uint16_t *tok, int BT, int T, int D, cudaStream_t s)
{
    embed_fwd_k<<<grid((size_t)BT * D, NT), NT, 0, s>>>(x, wte, wpe, dt, tok, BT, T, D);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_embed_bwd(float *dwte, float *dwpe, const float *d, const uint16_t *tok,
                                     int BT, int T, int D, cudaStream_t s)
{
    embed_bwd_k<<<cover(D, 64), 64, 0, s>>>(dwte, dwpe, d, tok, BT, T, D);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_ln_fwd(float *out, float *mean, float *rstd, const float *x,
                                  const void *w, const void *b, int dt, int R, int C,
                                  cudaStream_t s)
{
    ln_fwd_k<<<cover(R, 4), 128, 0, s>>>(out, mean, rstd, x, w, b, dt, R, C);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_ln_bwd_dx(float *dx, const float *dout, const float *x,
                                     const float *mean, const float *rstd, const void *w, int dt,
                                     int R, int C, cudaStream_t s)
{
    ln_bwd_dx_k<<<cover(R, 4), 128, 0, s>>>(dx, dout, x, mean, rstd, w, dt, R, C);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_ln_bwd(float *dx, float *dw, float *db, const float *dout,
                                  const float *x, const float *mean, const float *rstd,
                                  const void *w, int dt, int R, int C, cudaStream_t s)
{
    cudaError_t e = zmc_ln_bwd_dx(dx, dout, x, mean, rstd, w, dt, R, C, s);
    if (e != cudaSuccess) return e;
    ln_bwd_dw_k<<<cover(C, 64), 64, 0, s>>>(dw, db, dout, x, mean, rstd, R, C);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_bias_res(float *out, const void *b, int dt, const float *res, int R,
                                    int C, cudaStream_t s)
{
    bias_res_k<<<grid((size_t)R * C, NT), NT, 0, s>>>(out, b, dt, res, R, C);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_bias_grad(float *db, const float *dy, int R, int C, cudaStream_t s)
{
    bias_grad_k<<<cover(C, 64), 64, 0, s>>>(db, dy, R, C);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_gelu_fwd(float *out, const float *x, size_t n, cudaStream_t s)
{
    gelu_fwd_k<<<grid(n, NT), NT, 0, s>>>(out, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_gelu_bwd(float *d, const float *x, size_t n, cudaStream_t s)
{
    gelu_bwd_k<<<grid(n, NT), NT, 0, s>>>(d, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_att_fwd(float *att, float *y, const float *qkv, int B, int T, int D,
                                   int H, cudaStream_t s)
{
    att_fwd_k<<<dim3(T, B * H), 128, 0, s>>>(att, y, qkv, T, D, H);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_att_bwd(float *dqkv, float *ds, const float *dy, const float *att,
                                   const float *qkv, int B, int T, int D, int H, cudaStream_t s)
{
    att_bwd_q_k<<<dim3(T, B * H), 128, 0, s>>>(dqkv, ds, dy, att, qkv, T, D, H);
    att_bwd_kv_k<<<dim3(T, B * H), 64, 0, s>>>(dqkv, ds, dy, att, qkv, T, D, H);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_xent(float *logits, float *losses, const uint16_t *tgt, int R, int V,
                                float dscale, int bwd, cudaStream_t s)
{
    xent_k<<<R, 256, 0, s>>>(logits, losses, tgt, V, dscale, bwd);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_cast(void *dst, int dt, const float *src, size_t n, cudaStream_t s)
{
    cast_k<<<grid(n, NT), NT, 0, s>>>(dst, dt, src, n);
    return cudaGetLastError();
}

extern "C" cudaError_t zmc_add_into(void *dst, int dt, const float *src, size_t n, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    add_into_k<<<grid(n, NT), NT, 0, s>>>(dst, dt, src, n);
    return cudaGetLastError();
}
