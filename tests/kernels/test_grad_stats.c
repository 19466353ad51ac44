/*
 * test_grad_stats.c — grad_stats on every ISA at 1 and 3 threads:
 *   - an inf or a nan at the first, the last and a random position is reported, for each dtype,
 *     and a buffer without one is not;
 *   - sumsq agrees with a long double sum of the squares within the a priori bound of the
 *     kernel's summation: the squares are exact in double and all positive, so a recursive sum of
 *     k terms is off by at most (k - 1) u of the total (u = 2^-53); the kernel's longest chain is
 *     256 terms per lane (4096 / 16), 4 levels of the lane tree and one add per block, so the
 *     bound is (256 + 4 + nblocks) u, plus 2^-63 * n for the long double reference itself.
 */
#include <stdlib.h>

#include "kt.h"

int main(void)
{
    static const size_t sizes[] = {1, 4095, 4096, 4097, 100003, 400000};
    static const int threads[] = {1, 3};
    zt_rng r = {5};
    for (int k = 0; k < 3; k++) {
        if (!zk_cpu_has_isa(kt_all_isas[k])) continue;
        for (int ti = 0; ti < 2; ti++) {
            zdev_t *d = NULL;
            ZT_OK(zk_cpu_open_isa(threads[ti], kt_all_isas[k], &d));
            if (!d) continue;
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                size_t n = sizes[si];
                void *g = malloc(n * 4);
                for (int t = 0; t < 3; t++) {
                    zinc_dtype dt = kt_dtypes[t];
                    /* Normal values of mixed magnitude (fp16 must not overflow). */
                    for (size_t i = 0; i < n; i++)
                        zk_store(g, dt, i, (float)(zt_normal(&r) * ldexp(1.0, (int)(zt_next(&r) % 20) - 10)));
                    long double want = 0;
                    for (size_t i = 0; i < n; i++) {
                        long double x = zk_load(g, dt, i);
                        want += x * x;
                    }
                    zk_grad_stats st;
                    ZT_OK(d->iface->grad_stats(d, g, dt, n, &st));
                    size_t nblocks = (n + ZK_STATS_BLOCK - 1) / ZK_STATS_BLOCK;
                    long double tol = want * ((256.0L + 4 + (long double)nblocks) * 0x1p-53L +
                                              (long double)n * 0x1p-63L);
                    ZT_CHECK(fabsl((long double)st.sumsq - want) <= tol && !st.nonfinite,
                             "%s/%dt %s n=%zu: sumsq %.17g vs %.17Lg (tolerance %.3Lg), nonfinite %d",
                             kt_all_isas[k], threads[ti], zinc_dtype_name(dt), n, st.sumsq, want,
                             tol, st.nonfinite);
                    /* One inf or nan at the first, last and a random position. */
                    size_t pos[3] = {0, n - 1, zt_next(&r) % n};
                    for (int p = 0; p < 3; p++) {
                        for (int which = 0; which < 3; which++) {
                            float bad = which == 0 ? INFINITY : which == 1 ? -INFINITY : NAN;
                            float keep = zk_load(g, dt, pos[p]);
                            zk_store(g, dt, pos[p], bad);
                            ZT_OK(d->iface->grad_stats(d, g, dt, n, &st));
                            ZT_CHECK(st.nonfinite == 1, "%s/%dt %s n=%zu: %g at %zu not reported",
                                     kt_all_isas[k], threads[ti], zinc_dtype_name(dt), n,
                                     (double)bad, pos[p]);
                            zk_store(g, dt, pos[p], keep);
                        }
                    }
                }
                free(g);
            }
            zdev_close(d);
        }
    }
    /* More blocks than one round of the device's fixed block-sum buffer: the rounds must add up
     * to the reference's single pass, bit for bit, at any thread count. */
    {
        size_t n = (size_t)ZK_STATS_ROUND * ZK_STATS_BLOCK + 12345;
        uint16_t *g = malloc(n * 2);
        for (size_t i = 0; i < n; i++) g[i] = zk_f32_to_bf16((float)zt_normal(&r));
        zk_grad_stats ref, st;
        zk_ref_grad_stats(g, ZINC_DTYPE_BF16, n, &ref);
        for (int ti = 0; ti < 2; ti++) {
            zdev_t *dv = NULL;
            ZT_OK(zdev_cpu_open(threads[ti], &dv));
            if (!dv) continue;
            ZT_OK(dv->iface->grad_stats(dv, g, ZINC_DTYPE_BF16, n, &st));
            ZT_CHECK(st.sumsq == ref.sumsq && !st.nonfinite,
                     "%d threads, %zu blocks: sumsq %.17g, reference %.17g", threads[ti],
                     (n + ZK_STATS_BLOCK - 1) / ZK_STATS_BLOCK, st.sumsq, ref.sumsq);
            zdev_close(dv);
        }
        free(g);
    }
    /* n = 0: zero and finite. */
    zdev_t *d = NULL;
    ZT_OK(zdev_cpu_open(1, &d));
    if (d) {
        zk_grad_stats st = {1.0, 1};
        float dummy = 0;
        ZT_OK(d->iface->grad_stats(d, &dummy, ZINC_DTYPE_FP32, 0, &st));
        ZT_CHECK(st.sumsq == 0.0 && st.nonfinite == 0, "n = 0: %g %d", st.sumsq, st.nonfinite);
        zdev_close(d);
    }
    return zt_finish("test_grad_stats");
}
