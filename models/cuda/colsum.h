/*
 * colsum.h — the column reductions of the CUDA model's fast mode (fast.cu): bias and LayerNorm
 * parameter gradients (sums over all B*T rows of a [R, C] array) and the embedding gradients
 * (sums over the rows of one position, or of one token). The exact mode (layers.cu) gives each
 * column to one thread that walks every row: C threads for a GPU, and a long chain of dependent
 * additions. Here the rows are cut into chunks:
 *
 *   pass 1  block (column tile, chunk k): part[k, c] = sum of the chunk's rows, ascending;
 *   pass 2  one thread per column: out[c] += part[0, c] + part[1, c] + ... in chunk order.
 *
 * No float atomics: the chunks depend on R alone (zm_cs_chunks), never on the device or the
 * launch, so a run is bitwise repeatable on any GPU. The embedding sums already have parallelism
 * in the output (T*D positions, one block per token present) and keep gpt.c's order exactly:
 * position t adds rows b*T + t for b ascending, token v its rows ascending (grouped on the host
 * by zm_token_buckets, which the batch upload runs: the tokens are on the host anyway).
 *
 * Compiles as C99 (tests/model/test_colsum.c) and as CUDA; see flash_rows.h for ZM_HD.
 */
#ifndef ZINC_MODELS_CUDA_COLSUM_H
#define ZINC_MODELS_CUDA_COLSUM_H

#include <stddef.h>
#include <stdint.h>

#include "models/cuda/flash_rows.h" /* ZM_HD */

/* At most this many chunks: the pass-2 chain, and the scratch (chunks x C floats). 64 chunks of
 * a 1024-wide tile of 128 columns already make 512 blocks, several per SM. */
#define ZM_CS_MAX_CHUNKS 64
/* No chunk shorter than this: a small R is not spread over blocks that each add a few rows. */
#define ZM_CS_MIN_ROWS 64

/* Number of chunks the R rows are cut into (1..ZM_CS_MAX_CHUNKS). */
ZM_HD static inline int zm_cs_chunks(int R)
{
    int n = R / ZM_CS_MIN_ROWS;
    return n < 1 ? 1 : n > ZM_CS_MAX_CHUNKS ? ZM_CS_MAX_CHUNKS : n;
}

/* First row of chunk k of n (k = n gives R): sizes differ by at most one row. */
ZM_HD static inline int zm_cs_chunk_lo(int R, int n, int k)
{
    return (int)((int64_t)R * k / n);
}

/* Pass 1 for a plain column sum: x[r, c] over rows [lo, hi), ascending. */
ZM_HD static inline float zm_cs_rows(const float *x, int C, int c, int lo, int hi)
{
    float s = 0.0f;
    for (int r = lo; r < hi; r++) s += x[(size_t)r * C + c];
    return s;
}

/* Pass 1 for LayerNorm's weight and bias: gpt.c layernorm_bwd's terms dy (x - mean) rstd and dy
 * over rows [lo, hi). */
ZM_HD static inline void zm_cs_ln_rows(const float *dy, const float *x, const float *mean,
                                       const float *rstd, int C, int c, int lo, int hi, float *dw,
                                       float *db)
{
    float aw = 0.0f, ab = 0.0f;
    for (int r = lo; r < hi; r++) {
        float d = dy[(size_t)r * C + c];
        aw += d * (x[(size_t)r * C + c] - mean[r]) * rstd[r];
        ab += d;
    }
    *dw = aw;
    *db = ab;
}

/* Pass 2: the n chunk sums of column c of part [n, C], in chunk order. */
ZM_HD static inline float zm_cs_total(const float *part, int C, int c, int n)
{
    float s = 0.0f;
    for (int k = 0; k < n; k++) s += part[(size_t)k * C + c];
    return s;
}

/* acc plus d[rows[j], c] for j = lo..hi-1 in order (a token's rows, for its wte gradient). */
ZM_HD static inline float zm_cs_gather(float acc, const float *d, int D, int c, const int *rows,
                                       int lo, int hi)
{
    for (int j = lo; j < hi; j++) acc += d[(size_t)rows[j] * D + c];
    return acc;
}

/* acc plus d[b*T + t, c] for b = 0..B-1 (position t's rows, for its wpe gradient). */
ZM_HD static inline float zm_cs_position(float acc, const float *d, int B, int T, int D, int t,
                                         int c)
{
    for (int b = 0; b < B; b++) acc += d[((size_t)b * T + t) * D + c];
    return acc;
}

/* Host: the BT rows of a batch grouped by token (a stable counting sort). For the u-th token
 * present (u < the returned count), id[u] is its value and rows[start[u] .. start[u+1]) its rows,
 * ascending. count: V ints of scratch; rows [BT]; start [V + 1]; id [V]. tok[r] < V. */
static inline int zm_token_buckets(const uint16_t *tok, int BT, int V, int *count, int *rows,
                                   int *start, int *id)
{
    int n = 0, at = 0;
    for (int v = 0; v < V; v++) count[v] = 0;
    for (int r = 0; r < BT; r++) count[tok[r]]++;
    for (int v = 0; v < V; v++) {
        if (!count[v]) continue;
        id[n] = v;
        start[n++] = at;
        int c = count[v];
        count[v] = at; /* from here on: the next free slot of token v */
        at += c;
    }
    start[n] = at;
    for (int r = 0; r < BT; r++) rows[count[tok[r]]++] = r;
    return n;
}

#endif
