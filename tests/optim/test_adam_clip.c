/*
 * test_adam_clip.c — Adam's bias corrections against PyTorch's definition (1 - beta^t, t the
 * count of applied updates including this one) evaluated in long double, and the clip
 * coefficient's edge cases against DeepSpeed's fp16 rule written out here.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "optim/optim.h"
#include "testutil.h"

/* The code rounds a double result to float once; the reference rounds the long double value
 * once. They may differ only when the value sits within a double ulp of a float rounding
 * boundary, so allow one float ulp and no more. */
static int float_close(float got, long double want)
{
    long double diff = fabsl((long double)got - want);
    return diff <= (long double)FLT_EPSILON * fabsl(want);
}

static void test_bias_corrections(void)
{
    float bc1, bc2;
    zadam_bias_corrections(0.9, 0.999, 0, 5, &bc1, &bc2);
    ZT_CHECK(bc1 == 1.0f && bc2 == 1.0f, "bias_correction off: both 1 (got %g %g)", bc1, bc2);

    /* Hand values: t = 1: 1 - 0.9 = 0.1, 1 - 0.999 = 0.001; t = 2: 1 - 0.81 = 0.19,
     * 1 - 0.998001 = 0.001999. */
    zadam_bias_corrections(0.9, 0.999, 1, 1, &bc1, &bc2);
    ZT_CHECK(float_close(bc1, 0.1L) && float_close(bc2, 0.001L), "t=1: %g %g", bc1, bc2);
    zadam_bias_corrections(0.9, 0.999, 1, 2, &bc1, &bc2);
    ZT_CHECK(float_close(bc1, 0.19L) && float_close(bc2, 0.001999L), "t=2: %g %g", bc1, bc2);

    /* t < 1 is read as the first update rather than returning a zero divisor. */
    zadam_bias_corrections(0.9, 0.999, 1, 0, &bc1, &bc2);
    ZT_CHECK(bc1 > 0.0f && float_close(bc1, 0.1L) && float_close(bc2, 0.001L), "t=0 -> t=1");

    static const double b1s[] = {0.9, 0.8, 0.95, 0.0, 0.5};
    static const double b2s[] = {0.999, 0.99, 0.98, 0.9999, 0.5};
    static const int64_t ts[] = {1, 2, 3, 10, 100, 1000, 10000, 100000, 10000000};
    int bad = 0;
    for (size_t i = 0; i < sizeof b1s / sizeof b1s[0]; i++)
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
            zadam_bias_corrections(b1s[i], b2s[i], 1, ts[j], &bc1, &bc2);
            long double w1 = 1.0L - powl((long double)b1s[i], (long double)ts[j]);
            long double w2 = 1.0L - powl((long double)b2s[i], (long double)ts[j]);
            if (!float_close(bc1, w1) || !float_close(bc2, w2)) {
                if (bad++ < 5)
                    fprintf(stderr, "b1 %g b2 %g t %lld: %.9g %.9g vs %.12Lg %.12Lg\n", b1s[i],
                            b2s[i], (long long)ts[j], bc1, bc2, w1, w2);
            }
        }
    ZT_CHECK(bad == 0, "%d bias corrections differ from 1 - beta^t", bad);
    /* Large t: 1 - 0.999^10000 = 1 - 4.5173e-5 = 0.99995483 */
    zadam_bias_corrections(0.9, 0.999, 1, 10000, &bc1, &bc2);
    ZT_CHECK(bc1 == 1.0f && fabsf(bc2 - 0.99995483f) < 1e-7f, "t=10000: %.9g %.9g", bc1, bc2);
}

static void test_clip(void)
{
    /* Off: clip 0 or negative (or nan), whatever the norm, including a non-finite one. */
    ZT_CHECK(zclip_coef(123.0, 0.0) == 1.0, "clip 0 is off");
    ZT_CHECK(zclip_coef(INFINITY, 0.0) == 1.0, "clip 0 is off even for an inf norm");
    ZT_CHECK(zclip_coef(5.0, -1.0) == 1.0, "negative clip is off");
    ZT_CHECK(zclip_coef(5.0, NAN) == 1.0, "nan clip is off");

    /* Below: (0.5 + 1e-6) / 1 < 1 -> no clipping. */
    ZT_CHECK(zclip_coef(0.5, 1.0) == 1.0, "norm below clip");
    ZT_CHECK(zclip_coef(0.0, 1.0) == 1.0, "zero norm");
    /* At: (1 + 1e-6) / 1 = 1.000001 > 1: DeepSpeed's epsilon makes an exact-clip norm divide. */
    ZT_CHECK(fabs(zclip_coef(1.0, 1.0) - 1.000001) < 1e-15, "norm == clip: %.17g",
             zclip_coef(1.0, 1.0));
    /* Just below, inside the epsilon: (0.9999995 + 1e-6)/1 = 1.0000005 */
    ZT_CHECK(fabs(zclip_coef(0.9999995, 1.0) - 1.0000005) < 1e-15, "epsilon band: %.17g",
             zclip_coef(0.9999995, 1.0));
    /* Above: (4 + 1e-6) / 2 = 2.0000005, so grad * (1/coef) has norm 4/2.0000005 < 2. */
    double k = zclip_coef(4.0, 2.0);
    ZT_CHECK(fabs(k - 2.0000005) < 1e-15, "norm 4 clip 2: %.17g", k);
    ZT_CHECK(4.0 / k < 2.0, "clipped norm below the clip");
    ZT_CHECK(fabs(zclip_coef(1e6, 0.5) - (1e6 + 1e-6) / 0.5) <= 1e-9, "large norm");

    /* Non-finite norms with clipping on: +inf, so nothing gets through 1/coef. */
    ZT_CHECK(isinf(zclip_coef(INFINITY, 1.0)) && zclip_coef(INFINITY, 1.0) > 0, "inf norm");
    ZT_CHECK(isinf(zclip_coef(NAN, 1.0)), "nan norm is not read as 'no clipping'");
    ZT_CHECK(1.0 / zclip_coef(INFINITY, 1.0) == 0.0, "1/coef of an inf norm is 0");
}

int main(void)
{
    test_bias_corrections();
    test_clip();
    return zt_finish("test_optim_adam_clip");
}
