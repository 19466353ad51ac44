/*
 * test_reduce.c — zreduce_sum (shard/reduce.c) against a scalar reference written from its
 * definition in comm.h: fp32 sum in the given order (fp64 for ZDT_F64), times scale, rounded once
 * with kernels/device.h's conversions. Covers every dtype, 1..9 inputs, block edges, out aliasing
 * each input, special values, and a sweep of rounding cases (ties at every bit position,
 * subnormals, overflow) for the 16-bit roundings. Prints the reduction's throughput.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/device.h"
#include "shard/comm.h"
#include "testutil.h"

static float ld(const void *p, zdt t, size_t i)
{
    switch (t) {
    case ZDT_F32: return ((const float *)p)[i];
    case ZDT_F16: return zk_f16_to_f32(((const uint16_t *)p)[i]);
    case ZDT_BF16: return zk_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

static void st(void *p, zdt t, size_t i, float x)
{
    switch (t) {
    case ZDT_F32: ((float *)p)[i] = x; break;
    case ZDT_F16: ((uint16_t *)p)[i] = zk_f32_to_f16(x); break;
    case ZDT_BF16: ((uint16_t *)p)[i] = zk_f32_to_bf16(x); break;
    default: break;
    }
}

/* The definition, one element at a time. */
static void ref_sum(void *out, const void *const *in, int nin, size_t n, zdt t, float scale)
{
    for (size_t i = 0; i < n; i++) {
        if (t == ZDT_F64) {
            double acc = ((const double *)in[0])[i];
            for (int k = 1; k < nin; k++) acc += ((const double *)in[k])[i];
            ((double *)out)[i] = acc * (double)scale;
        } else {
            float acc = ld(in[0], t, i);
            for (int k = 1; k < nin; k++) acc += ld(in[k], t, i);
            acc *= scale;
            st(out, t, i, acc);
        }
    }
}

static int is_nan_elem(const void *p, zdt t, size_t i)
{
    if (t == ZDT_F64) return isnan(((const double *)p)[i]);
    return isnan(ld(p, t, i));
}

/* Bitwise equality, except that a nan only has to be a nan (its payload depends on the order
 * in which the hardware sees two nans). Returns the first differing index or n. */
static size_t first_diff(const void *a, const void *b, size_t n, zdt t)
{
    size_t es = zdt_size(t);
    for (size_t i = 0; i < n; i++) {
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) == 0) continue;
        if (is_nan_elem(a, t, i) && is_nan_elem(b, t, i)) continue;
        return i;
    }
    return n;
}

/* Random values of dtype t: mostly normal(0, spread), with some specials mixed in. */
static void fill(void *p, zdt t, size_t n, zt_rng *r, int specials)
{
    for (size_t i = 0; i < n; i++) {
        double x = zt_normal(r) * (t == ZDT_F16 ? 300.0 : 1e3);
        if (specials) {
            uint64_t u = zt_next(r) % 64;
            if (u == 0) x = INFINITY;
            else if (u == 1) x = -INFINITY;
            else if (u == 2) x = NAN;
            else if (u == 3) x = 6e-8 * (double)(zt_next(r) % 7);   /* f16 subnormals */
            else if (u == 4) x = 65504.0;                           /* largest f16 */
            else if (u == 5) x = 3e38;                              /* near fp32 max */
        }
        if (t == ZDT_F64) ((double *)p)[i] = x * (1 + 1e-12 * zt_normal(r));
        else st(p, t, i, (float)x);
    }
}

static void check_random(void)
{
    static const zdt types[] = {ZDT_F32, ZDT_F16, ZDT_BF16, ZDT_F64};
    static const size_t ns[] = {0, 1, 3, 511, 512, 513, 1500};
    static const float scales[] = {1.0f, 0.25f, 1.0f / 3.0f, 1e-3f, 7.5f};
    zt_rng r = {42};
    enum { MAXIN = 9, MAXN = 1500 };
    void *in[MAXIN], *work[MAXIN];
    for (int k = 0; k < MAXIN; k++) {
        in[k] = malloc(MAXN * 8);
        work[k] = malloc(MAXN * 8);
    }
    void *out = malloc(MAXN * 8), *ref = malloc(MAXN * 8);
    int bad = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        zdt t = types[ti];
        size_t es = zdt_size(t);
        for (int specials = 0; specials < 2; specials++)
            for (int nin = 1; nin <= MAXIN; nin++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
                        size_t n = ns[ni];
                        float scale = scales[si];
                        for (int k = 0; k < nin; k++) fill(in[k], t, n, &r, specials);
                        ref_sum(ref, (const void *const *)in, nin, n, t, scale);
                        /* out separate, then out aliasing each input in turn */
                        for (int alias = -1; alias < nin; alias++) {
                            void *dst = out;
                            const void *ops[MAXIN];
                            for (int k = 0; k < nin; k++) {
                                memcpy(work[k], in[k], n * es);
                                ops[k] = work[k];
                            }
                            if (alias >= 0) dst = work[alias];
                            zreduce_sum(dst, ops, nin, n, t, scale);
                            size_t d = first_diff(dst, ref, n, t);
                            if (d != n && bad++ < 5)
                                ZT_CHECK(d == n,
                                         "dtype %d nin %d n %zu scale %g alias %d specials %d: "
                                         "element %zu differs",
                                         (int)t, nin, n, (double)scale, alias, specials, d);
                        }
                    }
    }
    ZT_CHECK(bad == 0, "%d random cases differ from the reference", bad);
    for (int k = 0; k < MAXIN; k++) {
        free(in[k]);
        free(work[k]);
    }
    free(out);
    free(ref);
}

/* Rounding sweep: inputs +-2^e (exact in the dtype) times scale mantissas in [1, 2) that put a
 * round-to-nearest tie (and its neighbours) at every bit position, plus a stride over all
 * mantissas. Each product is exact in fp32 except where it falls into fp32 subnormals, and
 * the reference does that same multiply. */
static void check_rounding(zdt t)
{
    int emin = t == ZDT_F16 ? -25 : -134, emax = t == ZDT_F16 ? 16 : 127;
    size_t n = 0;
    uint16_t in[2 * 300];
    for (int e = emin; e <= emax; e++)
        for (int sgn = 0; sgn < 2; sgn++) {
            float x = ldexpf(sgn ? -1.0f : 1.0f, e);
            uint16_t h = t == ZDT_F16 ? zk_f32_to_f16(x) : zk_f32_to_bf16(x);
            in[n++] = h;
        }
    uint32_t *mants = malloc(sizeof(uint32_t) * 200000);
    size_t nm = 0;
    for (uint32_t m = 0; m < (1u << 23); m += 997) mants[nm++] = m;
    zt_rng r = {7};
    for (int p = 0; p < 23; p++)
        for (int j = 0; j < 100; j++) {
            uint32_t hi = (uint32_t)zt_next(&r) & ((1u << 23) - 1) & ~((2u << p) - 1);
            uint32_t tie = hi | (1u << p);
            mants[nm++] = tie;
            mants[nm++] = (tie - 1) & ((1u << 23) - 1);
            mants[nm++] = (tie + 1) & ((1u << 23) - 1);
        }
    uint16_t out[600];
    const void *ops[1] = {in};
    int bad = 0;
    long checked = 0;
    for (size_t mi = 0; mi < nm; mi++) {
        uint32_t bits = (127u << 23) | mants[mi];
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        zreduce_sum(out, ops, 1, n, t, scale);
        for (size_t i = 0; i < n; i++) {
            float x = (t == ZDT_F16 ? zk_f16_to_f32(in[i]) : zk_bf16_to_f32(in[i])) * scale;
            uint16_t want = t == ZDT_F16 ? zk_f32_to_f16(x) : zk_f32_to_bf16(x);
            checked++;
            if (out[i] != want && bad++ < 5)
                ZT_CHECK(out[i] == want, "dtype %d: round(%a) = 0x%04x, reference 0x%04x",
                         (int)t, (double)x, out[i], want);
        }
    }
    ZT_CHECK(bad == 0, "dtype %d: %d of %ld rounding cases differ", (int)t, bad, checked);
    free(mants);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Throughput of a 4-input reduction into one of the inputs (how the backends call it). */
static void bench(zdt t, const char *name)
{
    enum { NIN = 4 };
    size_t n = (size_t)1 << 21, es = zdt_size(t);
    void *b[NIN];
    zt_rng r = {3};
    for (int k = 0; k < NIN; k++) {
        b[k] = malloc(n * es);
        fill(b[k], t, n, &r, 0);
    }
    const void *ops[NIN] = {b[0], b[1], b[2], b[3]};
    zreduce_sum(b[0], ops, NIN, n, t, 0.25f);
    int reps = 5;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) zreduce_sum(b[0], ops, NIN, n, t, 0.25f);
    double dt = (now_s() - t0) / reps;
    double gb = (double)(NIN + 1) * (double)(n * es) * 1e-9;   /* read NIN, write one */
    printf("zreduce_sum %s, %d inputs x %zu elements: %.2f ms, %.2f Gelem/s, %.2f GB/s\n", name,
           NIN, n, dt * 1e3, (double)n / dt * 1e-9, gb / dt);
    for (int k = 0; k < NIN; k++) free(b[k]);
}

int main(void)
{
    ZT_CHECK(zdt_size(ZDT_F32) == 4 && zdt_size(ZDT_F16) == 2 && zdt_size(ZDT_BF16) == 2 &&
                 zdt_size(ZDT_F64) == 8,
             "zdt_size");
    check_random();
    check_rounding(ZDT_F16);
    check_rounding(ZDT_BF16);
    /* nan stays nan, inf + -inf is nan, f16 overflow of a sum gives inf */
    uint16_t a[3] = {zk_f32_to_f16(NAN), zk_f32_to_f16(INFINITY), zk_f32_to_f16(60000.0f)};
    uint16_t b[3] = {zk_f32_to_f16(1.0f), zk_f32_to_f16(-INFINITY), zk_f32_to_f16(60000.0f)};
    const void *ops[2] = {a, b};
    uint16_t o[3];
    zreduce_sum(o, ops, 2, 3, ZDT_F16, 1.0f);
    ZT_CHECK(isnan(zk_f16_to_f32(o[0])) && isnan(zk_f16_to_f32(o[1])), "nan results");
    ZT_CHECK(o[2] == 0x7c00, "60000 + 60000 in fp16 is inf, got 0x%04x", o[2]);
    zreduce_sum(o, ops, 2, 3, ZDT_F16, 0.5f);
    ZT_CHECK(o[2] == zk_f32_to_f16(60000.0f), "scale applies to the fp32 sum before rounding");
    bench(ZDT_F32, "fp32");
    bench(ZDT_F16, "fp16");
    bench(ZDT_BF16, "bf16");
    return zt_finish("comm_reduce");
}
