/*
 * gpu_common.h — what the gpu tests share: the skip rule (no CUDA device: print the reason and
 * exit 77, which CTest reports as skipped), random typed buffers, and a bitwise comparison that
 * treats any two NaNs as equal (GPU arithmetic returns the canonical NaN where the CPU keeps the
 * payload; docs/cuda.md).
 */
#ifndef ZINC_TESTS_GPU_COMMON_H
#define ZINC_TESTS_GPU_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/zdev_cuda.h"
#include "kernels/device.h"
#include "testutil.h"

/* Opens CUDA device 0, or exits 77 with the reason when there is none. */
static inline zdev_t *zg_open_or_skip(void)
{
    char why[300];
    if (zdev_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        exit(77);
    }
    zdev_t *d = NULL;
    zinc_status s = zdev_cuda_open(0, &d);
    if (s != ZINC_OK) {
        fprintf(stderr, "zdev_cuda_open(0): %s: %s\n", zinc_status_string(s), zinc_last_error(NULL));
        exit(1);
    }
    return d;
}

/* A float with a wide spread of magnitudes: mostly normal(0, scale), some tiny (subnormal in
 * fp16/fp32), some zeros. */
static inline float zg_value(zt_rng *r, float scale)
{
    uint64_t k = zt_next(r) % 64;
    if (k == 0) return 0.0f;
    if (k == 1) return (float)(zt_normal(r) * 1e-6);         /* fp16 subnormal range */
    if (k == 2) return (float)(zt_normal(r) * 1e-40);        /* fp32 subnormal */
    return (float)(zt_normal(r) * scale);
}

static inline void zg_fill(zt_rng *r, void *p, zinc_dtype dt, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) zk_store(p, dt, i, zg_value(r, scale));
}

/* Number of elements of two typed buffers whose bits differ (NaN == NaN); prints the first few. */
static inline size_t zg_diff(const char *what, const void *got, const void *want, zinc_dtype dt,
                             size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float a = zk_load(got, dt, i), b = zk_load(want, dt, i);
        int same = (isnan(a) && isnan(b)) ||
                   (dt == ZINC_DTYPE_FP32 ? !memcmp((const float *)got + i, (const float *)want + i, 4)
                                          : ((const uint16_t *)got)[i] == ((const uint16_t *)want)[i]);
        if (!same && bad++ < 3)
            fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g\n", what, i, (double)a, (double)b);
    }
    return bad;
}

#endif
