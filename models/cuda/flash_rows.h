/*
 * flash_rows.h — causal attention one row at a time, never storing the T x T probabilities: the
 * per-thread work of the CUDA model's fast attention (fast.cu), written as plain functions that
 * compile both as C99 (tests/model/test_flash_rows.c runs them on the host against gpt.c) and as
 * CUDA (__host__ __device__), so a machine without a GPU checks the kernels' arithmetic.
 *
 * Forward (one query row t of sequence b, head h): an online softmax over the keys t2 = 0..t —
 * a running maximum m and sum l, the output accumulated unnormalised and rescaled by
 * exp(m_old - m_new) whenever the maximum grows — then y = acc / l and the row's log-sum-exp
 * lse = m + log l. Backward recomputes each probability from lse, p = exp(scale q.k - lse), and
 * uses Drow = dy . y (= sum_t2 p dp, the row term of the softmax backward):
 *   ds = p (dy.v - Drow) scale,   dq[t] = sum_t2 ds k[t2],
 *   dk[t2] = sum_{t >= t2} ds q[t],   dv[t2] = sum_{t >= t2} p dy[t].
 * dq is summed over one query row's keys, dk and dv over one key row's queries, so each output
 * has one owner and no atomics are needed. Scratch: lse and Drow, [B, H, T] each.
 *
 * Layout as gpt.c: qkv [B*T, 3D] with rows [q | k | v], head h at columns h*hs of each third;
 * y, dy [B*T, D]; dqkv [B*T, 3D]; lse, Drow [B*H, T] (index (b*H + h)*T + t). All fp32.
 * Accumulators are local arrays of ZM_FLASH_MAX_HS floats, hence the head-size limit (the run
 * refuses larger heads when it is created).
 */
#ifndef ZINC_MODELS_CUDA_FLASH_ROWS_H
#define ZINC_MODELS_CUDA_FLASH_ROWS_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define ZM_HD __host__ __device__
/* Full unrolling turns the local arrays into registers when hs is a compile-time constant (the
 * kernels instantiate common head sizes); with a run-time hs nvcc unrolls partially. */
#define ZM_UNROLL _Pragma("unroll")
#else
#define ZM_HD
#define ZM_UNROLL
#endif

#define ZM_FLASH_MAX_HS 128

typedef struct zm_flash_shape {
    int T;         /* context length */
    int D;         /* width: y rows are D floats, qkv rows 3D */
    int H;         /* heads */
    int hs;        /* head size D / H, <= ZM_FLASH_MAX_HS */
    float scale;   /* 1 / sqrt(hs), as gpt.c computes it */
} zm_flash_shape;

ZM_HD static inline zm_flash_shape zm_flash_shape_of(int T, int D, int H)
{
    zm_flash_shape g;
    g.T = T;
    g.D = D;
    g.H = H;
    g.hs = D / H;
    g.scale = 1.0f / sqrtf((float)g.hs);
    return g;
}

/* gpt.c's dot(): eight partial sums in a fixed tree. On the GPU they are also eight independent
 * chains of multiply-adds. */
ZM_HD static inline float zm_flash_dot(const float *a, const float *b, int n)
{
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        ZM_UNROLL
        for (int k = 0; k < 8; k++) p[k] += a[i + k] * b[i + k];
    }
    for (; i < n; i++) p[0] += a[i] * b[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* Row t of sequence b in a [B*T, width] array. */
ZM_HD static inline size_t zm_flash_row(const zm_flash_shape *g, int b, int t, int width)
{
    return ((size_t)b * g->T + t) * (size_t)width;
}

/* Index of (b, h, t) in the [B*H, T] per-row arrays (lse, Drow). */
ZM_HD static inline size_t zm_flash_bht(const zm_flash_shape *g, int b, int h, int t)
{
    return ((size_t)b * g->H + h) * g->T + t;
}

/* Forward of query row t of (b, h): writes y's hs columns of head h and lse. */
ZM_HD static inline void zm_flash_fwd_row(zm_flash_shape g, const float *qkv, float *y,
                                          float *lse, int b, int h, int t)
{
    const int hs = g.hs, W = 3 * g.D;
    float q[ZM_FLASH_MAX_HS], acc[ZM_FLASH_MAX_HS];
    const float *qr = qkv + zm_flash_row(&g, b, t, W) + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) {
        q[i] = qr[i];
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *k = qkv + zm_flash_row(&g, b, t2, W) + g.D + h * hs, *v = k + g.D;
        float s = g.scale * zm_flash_dot(q, k, hs);
        if (s > m) {
            /* exp(-inf) = 0 on the first key: l and acc are still 0 */
            float c = expf(m - s);
            l *= c;
            ZM_UNROLL
            for (int i = 0; i < hs; i++) acc[i] *= c;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        ZM_UNROLL
        for (int i = 0; i < hs; i++) acc[i] += p * v[i];
    }
    float *yr = y + zm_flash_row(&g, b, t, g.D) + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) yr[i] = acc[i] / l;
    lse[zm_flash_bht(&g, b, h, t)] = m + logf(l);
}

/* Drow of query row t: dy . y over head h's columns. */
ZM_HD static inline float zm_flash_drow(zm_flash_shape g, const float *dy, const float *y, int b,
                                        int h, int t)
{
    size_t o = zm_flash_row(&g, b, t, g.D) + (size_t)h * g.hs;
    return zm_flash_dot(dy + o, y + o, g.hs);
}

/* dq of query row t of (b, h), written (not added) into dqkv's q columns of head h. */
ZM_HD static inline void zm_flash_dq_row(zm_flash_shape g, const float *qkv, const float *dy,
                                         const float *lse, const float *drow, float *dqkv, int b,
                                         int h, int t)
{
    const int hs = g.hs, W = 3 * g.D;
    float q[ZM_FLASH_MAX_HS], d[ZM_FLASH_MAX_HS], dq[ZM_FLASH_MAX_HS];
    const float *qr = qkv + zm_flash_row(&g, b, t, W) + h * hs;
    const float *dyr = dy + zm_flash_row(&g, b, t, g.D) + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) {
        q[i] = qr[i];
        d[i] = dyr[i];
        dq[i] = 0.0f;
    }
    size_t bht = zm_flash_bht(&g, b, h, t);
    float L = lse[bht], Dr = drow[bht];
    for (int t2 = 0; t2 <= t; t2++) {
        const float *k = qkv + zm_flash_row(&g, b, t2, W) + g.D + h * hs, *v = k + g.D;
        float p = expf(g.scale * zm_flash_dot(q, k, hs) - L);
        float ds = p * (zm_flash_dot(d, v, hs) - Dr) * g.scale;
        ZM_UNROLL
        for (int i = 0; i < hs; i++) dq[i] += ds * k[i];
    }
    float *out = dqkv + zm_flash_row(&g, b, t, W) + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) out[i] = dq[i];
}

/* dk and dv of key row t2 of (b, h), written (not added) into dqkv's k and v columns of head h.
 * The queries t = t2..T-1 are visited in ascending order; the loop starts at t_from <= t2 and
 * skips t < t2, so that a kernel can start all 32 rows of a warp at the warp's first row and
 * the lanes read the same query row together. The host passes t_from = t2. */
ZM_HD static inline void zm_flash_dkv_row(zm_flash_shape g, const float *qkv, const float *dy,
                                          const float *lse, const float *drow, float *dqkv, int b,
                                          int h, int t2, int t_from)
{
    const int hs = g.hs, W = 3 * g.D;
    float k[ZM_FLASH_MAX_HS], v[ZM_FLASH_MAX_HS], dk[ZM_FLASH_MAX_HS], dv[ZM_FLASH_MAX_HS];
    const float *kr = qkv + zm_flash_row(&g, b, t2, W) + g.D + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) {
        k[i] = kr[i];
        v[i] = kr[g.D + i];
        dk[i] = 0.0f;
        dv[i] = 0.0f;
    }
    for (int t = t_from; t < g.T; t++) {
        if (t < t2) continue; /* causal: query t sees keys <= t */
        const float *q = qkv + zm_flash_row(&g, b, t, W) + h * hs;
        const float *dyr = dy + zm_flash_row(&g, b, t, g.D) + h * hs;
        size_t bht = zm_flash_bht(&g, b, h, t);
        float p = expf(g.scale * zm_flash_dot(q, k, hs) - lse[bht]);
        float ds = p * (zm_flash_dot(dyr, v, hs) - drow[bht]) * g.scale;
        ZM_UNROLL
        for (int i = 0; i < hs; i++) {
            dv[i] += p * dyr[i];
            dk[i] += ds * q[i];
        }
    }
    float *out = dqkv + zm_flash_row(&g, b, t2, W) + g.D + h * hs;
    ZM_UNROLL
    for (int i = 0; i < hs; i++) {
        out[i] = dk[i];
        out[g.D + i] = dv[i];
    }
}

#endif
