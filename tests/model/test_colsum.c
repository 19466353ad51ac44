/*
 * test_colsum.c — the column reductions of the CUDA model's fast mode (models/cuda/colsum.h, run
 * by fast.cu's two-pass kernels) on the host: the partition of rows into chunks, the two-pass
 * sums against exact ones, and the embedding gradients against gpt.c's order.
 *
 *  1. Partition, for every R in 1..5000 and some up to 2^24: 1..64 chunks that tile [0, R) in
 *     order, sizes within one row of each other, none under 64 rows once R >= 64.
 *  2. Two-pass column sums (bias gradients) and LayerNorm dw/db against the same sums in double.
 *     Bound: the classical one for recursive summation (Higham, Accuracy and Stability, 4.2):
 *     a sum of m terms in fp32 is off by at most (m - 1) u sum |x| (u = 2^-24, to first order).
 *     A column's value passes through a chunk's chain (at most ceil(R/n) terms), then the chain
 *     of n chunk sums added to the gradient already there, so m <= ceil(R/n) + n + 1; LayerNorm's
 *     term dy (x - mean) rstd carries 3 more roundings. The check is |err| <= (m + 3) u sum |t|
 *     with the terms t as computed; the measured error is printed (it is far below: random
 *     rounding errors grow like sqrt(m), the bound like m). It is what holds on the GPU too,
 *     where fmad contraction only removes roundings.
 *  3. Embedding: zm_token_buckets groups a batch's rows by token (stable); the wte gradient from
 *     the buckets and the wpe gradient by position equal gpt.c's zm_embed_backward order (rows
 *     ascending, added into the existing gradient) bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/cuda/colsum.h"
#include "testutil.h"

#define ULP 5.9604644775390625e-8 /* 2^-24 */

static void check_partition(int R)
{
    int n = zm_cs_chunks(R), lo_min = R, hi_max = 0, ok = n >= 1 && n <= ZM_CS_MAX_CHUNKS;
    ok = ok && zm_cs_chunk_lo(R, n, 0) == 0 && zm_cs_chunk_lo(R, n, n) == R;
    for (int k = 0; k < n && ok; k++) {
        int sz = zm_cs_chunk_lo(R, n, k + 1) - zm_cs_chunk_lo(R, n, k);
        ok = sz >= 1 && (R < ZM_CS_MIN_ROWS || sz >= ZM_CS_MIN_ROWS);
        lo_min = sz < lo_min ? sz : lo_min;
        hi_max = sz > hi_max ? sz : hi_max;
    }
    ok = ok && hi_max - lo_min <= 1;
    ZT_CHECK(ok, "R %d: %d chunks, sizes %d..%d", R, n, lo_min, hi_max);
}

/* fast.cu's two passes on the host: out[c] += sum of x's rows. */
static void two_pass(float *out, float *part, const float *x, int R, int C)
{
    int n = zm_cs_chunks(R);
    for (int k = 0; k < n; k++)
        for (int c = 0; c < C; c++)
            part[(size_t)k * C + c] = zm_cs_rows(x, C, c, zm_cs_chunk_lo(R, n, k),
                                                 zm_cs_chunk_lo(R, n, k + 1));
    for (int c = 0; c < C; c++) out[c] = out[c] + zm_cs_total(part, C, c, n);
}

static void two_pass_ln(float *dw, float *db, float *part, const float *dy, const float *x,
                        const float *mean, const float *rstd, int R, int C)
{
    int n = zm_cs_chunks(R);
    float *pw = part, *pb = part + (size_t)n * C;
    for (int k = 0; k < n; k++)
        for (int c = 0; c < C; c++)
            zm_cs_ln_rows(dy, x, mean, rstd, C, c, zm_cs_chunk_lo(R, n, k),
                          zm_cs_chunk_lo(R, n, k + 1), &pw[(size_t)k * C + c],
                          &pb[(size_t)k * C + c]);
    for (int c = 0; c < C; c++) {
        dw[c] = dw[c] + zm_cs_total(pw, C, c, n);
        db[c] = db[c] + zm_cs_total(pb, C, c, n);
    }
}

/* Chain length m of a column's value (see the header). */
static double chain(int R)
{
    int n = zm_cs_chunks(R);
    return (double)((R + n - 1) / n + n + 1);
}

static void check_sums(int R, int C, uint64_t seed)
{
    size_t nx = (size_t)R * C;
    float *x = malloc(nx * 4), *y = malloc(nx * 4), *mean = malloc((size_t)R * 4);
    float *rstd = malloc((size_t)R * 4), *part = malloc((size_t)2 * ZM_CS_MAX_CHUNKS * C * 4);
    float *db = malloc((size_t)C * 4), *lw = malloc((size_t)C * 4), *lb = malloc((size_t)C * 4);
    if (!x || !y || !mean || !rstd || !part || !db || !lw || !lb) {
        ZT_CHECK(0, "out of memory");
        goto out;
    }
    zt_rng rng = {seed};
    for (size_t i = 0; i < nx; i++) {
        x[i] = (float)(1.0 + zt_normal(&rng)); /* a mean: sums that do not cancel to 0 */
        y[i] = (float)zt_normal(&rng);
    }
    for (int r = 0; r < R; r++) {
        mean[r] = (float)(0.5 * zt_normal(&rng));
        rstd[r] = (float)(1.0 + 0.5 * zt_uniform(&rng));
    }
    for (int c = 0; c < C; c++) db[c] = lw[c] = lb[c] = (float)zt_normal(&rng);
    float *db0 = malloc((size_t)C * 4), *lw0 = malloc((size_t)C * 4);
    if (!db0 || !lw0) {
        ZT_CHECK(0, "out of memory");
        free(db0);
        free(lw0);
        goto out;
    }
    memcpy(db0, db, (size_t)C * 4);
    memcpy(lw0, lw, (size_t)C * 4);
    two_pass(db, part, x, R, C);
    two_pass_ln(lw, lb, part, y, x, mean, rstd, R, C);
    double m = chain(R), worst_b = 0, worst_w = 0, worst_lb = 0;
    int bad = 0;
    for (int c = 0; c < C; c++) {
        double sb = db0[c], ab = fabs(db0[c]), sw = lw0[c], aw = fabs(lw0[c]);
        double sy = lw0[c], ay = fabs(lw0[c]);
        for (int r = 0; r < R; r++) {
            size_t i = (size_t)r * C + c;
            sb += x[i];
            ab += fabs(x[i]);
            float t = y[i] * (x[i] - mean[r]) * rstd[r]; /* the term as the code rounds it */
            sw += t;
            aw += fabs(t);
            sy += y[i];
            ay += fabs(y[i]);
        }
        double eb = fabs(db[c] - sb) / (ULP * ab), ew = fabs(lw[c] - sw) / (ULP * aw);
        double ey = fabs(lb[c] - sy) / (ULP * ay);
        bad += !(eb <= m) + !(ew <= m + 3) + !(ey <= m);
        worst_b = fmax(worst_b, eb);
        worst_w = fmax(worst_w, ew);
        worst_lb = fmax(worst_lb, ey);
    }
    ZT_CHECK(bad == 0, "R %d C %d: %d column sums beyond (m + 3) u sum|x|, m = %.0f", R, C, bad,
             m);
    printf("R %5d C %4d: %2d chunks, chain m = %3.0f; worst error in u sum|x|: bias %.3f, "
           "ln dw %.3f, ln db %.3f\n", R, C, zm_cs_chunks(R), m, worst_b, worst_w, worst_lb);
    free(db0);
    free(lw0);
out:
    free(x);
    free(y);
    free(mean);
    free(rstd);
    free(part);
    free(db);
    free(lw);
    free(lb);
}

/* Token buckets and the embedding gradients against zm_embed_backward's order. */
static void check_embed(int B, int T, int D, uint64_t seed)
{
    const int V = 256;
    int BT = B * T;
    uint16_t *tok = malloc((size_t)BT * 2);
    int *count = malloc(V * sizeof(int)), *rows = malloc((size_t)BT * sizeof(int));
    int *start = malloc((V + 1) * sizeof(int)), *id = malloc(V * sizeof(int));
    float *d = malloc((size_t)BT * D * 4), *wte = malloc((size_t)V * D * 4);
    float *wte_ref = malloc((size_t)V * D * 4), *wpe = malloc((size_t)T * D * 4);
    float *wpe_ref = malloc((size_t)T * D * 4);
    if (!tok || !count || !rows || !start || !id || !d || !wte || !wte_ref || !wpe || !wpe_ref) {
        ZT_CHECK(0, "out of memory");
        goto out;
    }
    zt_rng rng = {seed};
    /* a skewed draw: token 32 in about a third of the rows, most of the 256 absent */
    for (int r = 0; r < BT; r++)
        tok[r] = (uint16_t)(zt_uniform(&rng) < 0.3 ? 32 : 97 + zt_next(&rng) % 26);
    for (size_t i = 0; i < (size_t)BT * D; i++) d[i] = (float)zt_normal(&rng);
    for (size_t i = 0; i < (size_t)V * D; i++) wte[i] = wte_ref[i] = (float)zt_normal(&rng);
    for (size_t i = 0; i < (size_t)T * D; i++) wpe[i] = wpe_ref[i] = (float)zt_normal(&rng);

    int n = zm_token_buckets(tok, BT, V, count, rows, start, id), ok = n >= 1 && n <= V;
    int distinct = 0;
    for (int v = 0; v < V; v++) {
        int seen = 0;
        for (int r = 0; r < BT && !seen; r++) seen = tok[r] == v;
        distinct += seen;
    }
    ok = ok && n == distinct && start[0] == 0 && start[n] == BT;
    for (int u = 0; u < n && ok; u++) {
        ok = start[u + 1] > start[u] && (u == 0 || id[u] > id[u - 1]);
        for (int j = start[u]; j < start[u + 1] && ok; j++)
            ok = tok[rows[j]] == id[u] && (j == start[u] || rows[j] > rows[j - 1]);
    }
    ZT_CHECK(ok, "B %d T %d: token buckets wrong (%d buckets, %d distinct tokens)", B, T, n,
             distinct);
    if (!ok) goto out;
    /* zm_embed_backward: for each row in order, wte[tok] += d[r], wpe[r % T] += d[r] */
    for (int r = 0; r < BT; r++)
        for (int c = 0; c < D; c++) {
            wte_ref[(size_t)tok[r] * D + c] += d[(size_t)r * D + c];
            wpe_ref[(size_t)(r % T) * D + c] += d[(size_t)r * D + c];
        }
    for (int u = 0; u < n; u++)
        for (int c = 0; c < D; c++) {
            float *w = wte + (size_t)id[u] * D + c;
            *w = zm_cs_gather(*w, d, D, c, rows, start[u], start[u + 1]);
        }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < D; c++) {
            float *w = wpe + (size_t)t * D + c;
            *w = zm_cs_position(*w, d, B, T, D, t, c);
        }
    ZT_CHECK(!memcmp(wte, wte_ref, (size_t)V * D * 4), "B %d T %d: wte gradient differs from "
             "gpt.c's order", B, T);
    ZT_CHECK(!memcmp(wpe, wpe_ref, (size_t)T * D * 4), "B %d T %d: wpe gradient differs from "
             "gpt.c's order", B, T);
    int largest = 0;
    for (int u = 0; u < n; u++)
        largest = start[u + 1] - start[u] > largest ? start[u + 1] - start[u] : largest;
    printf("embed B %d T %d D %d: %d token buckets (largest %d rows), wte and wpe equal to "
           "gpt.c's order bit for bit\n", B, T, D, n, largest);
out:
    free(tok);
    free(count);
    free(rows);
    free(start);
    free(id);
    free(d);
    free(wte);
    free(wte_ref);
    free(wpe);
    free(wpe_ref);
}

int main(void)
{
    for (int R = 1; R <= 5000; R++) check_partition(R);
    const int big[] = {8192, 65536, 1000003, 1 << 24};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) check_partition(big[i]);

    check_sums(1, 7, 1);
    check_sums(63, 40, 2);
    check_sums(200, 33, 3);
    check_sums(4097, 48, 4);
    check_sums(20000, 8, 5);

    check_embed(3, 50, 24, 6);
    check_embed(8, 64, 16, 7);
    return zt_finish("colsum");
}
