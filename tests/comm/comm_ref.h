/*
 * comm_ref.h — what the comm tests of both backends share: deterministic inputs every rank can
 * regenerate for any other rank, and the serial reference of each collective written from its
 * definition in shard/comm.h (an fp32 sum over ranks in rank order, fp64 for ZDT_F64, then the
 * scale, then one rounding with kernels/device.h's conversions). Header-only so that the MPI test
 * needs nothing else.
 */
#ifndef ZINC_TESTS_COMM_REF_H
#define ZINC_TESTS_COMM_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "kernels/device.h"
#include "shard/comm.h"

static inline float cref_ld(const void *p, zdt t, size_t i)
{
    switch (t) {
    case ZDT_F32: return ((const float *)p)[i];
    case ZDT_F16: return zk_f16_to_f32(((const uint16_t *)p)[i]);
    case ZDT_BF16: return zk_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return (float)((const double *)p)[i];
    }
}

static inline void cref_st(void *p, zdt t, size_t i, double x)
{
    switch (t) {
    case ZDT_F32: ((float *)p)[i] = (float)x; break;
    case ZDT_F16: ((uint16_t *)p)[i] = zk_f32_to_f16((float)x); break;
    case ZDT_BF16: ((uint16_t *)p)[i] = zk_f32_to_bf16((float)x); break;
    default: ((double *)p)[i] = x; break;
    }
}

static inline uint64_t cref_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Input element i of `rank` for test `seed`: magnitudes over 2^-8..2^8 so that the order of the
 * sum matters, within the range of every dtype. */
static inline double cref_value(uint64_t seed, int rank, size_t i)
{
    uint64_t h = cref_mix(seed * 0x100000001B3ull ^ cref_mix((uint64_t)rank * 7919u + i));
    double u = (double)(h >> 11) * 0x1.0p-53 - 0.5;
    int e = (int)((h & 0xff) % 17) - 8;
    return ldexp(u, e) * 1.000000119;   /* a factor that leaves low mantissa bits set */
}

/* Fills a rank's buffer of n elements with its inputs (rounded to the dtype). */
static inline void cref_fill(void *buf, zdt t, size_t n, uint64_t seed, int rank)
{
    for (size_t i = 0; i < n; i++) cref_st(buf, t, i, cref_value(seed, rank, i));
}

/* Reference element i of scale * sum over ranks 0..size-1, rounded to t, written to out[i].
 * `reversed` sums in the opposite order (to show the check can tell orders apart). */
static inline void cref_reduce_elem(void *out, zdt t, size_t i, uint64_t seed, int size,
                                    float scale, int reversed)
{
    if (t == ZDT_F64) {
        double acc = 0;
        for (int q = 0; q < size; q++) {
            double x = cref_value(seed, reversed ? size - 1 - q : q, i);
            acc = q == 0 ? x : acc + x;
        }
        ((double *)out)[i] = acc * (double)scale;
        return;
    }
    double one[1];   /* room for any dtype */
    float acc = 0;
    for (int q = 0; q < size; q++) {
        cref_st(one, t, 0, cref_value(seed, reversed ? size - 1 - q : q, i));
        float x = cref_ld(one, t, 0);
        acc = q == 0 ? x : acc + x;
    }
    acc *= scale;
    cref_st(out, t, i, acc);
}

/* Index of the first element of [lo, hi) that differs bitwise, or hi. */
static inline size_t cref_first_diff(const void *a, const void *b, size_t lo, size_t hi, zdt t)
{
    size_t es = zdt_size(t);
    for (size_t i = lo; i < hi; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0) return i;
    return hi;
}

/* One rank's share of the collective suite: all-reduce over sizes that do not split evenly,
 * reduce-scatter, all-gather, broadcast from every root, barrier, and the byte counters, each
 * checked bitwise against the reference. Every rank of the world calls it with the same
 * arguments. `tag` names the case in failure messages. */
static inline void cref_suite(zcomm_t *c, zdt t, float scale, uint64_t seed, const char *tag)
{
    const int r = c->rank, size = c->size;
    const size_t es = zdt_size(t);
    const size_t ar_ns[] = {0, 1, 7, 1000, 1000 + (size_t)size + 1, 4099};
    const size_t slices[] = {1, 13, 600};
    uint64_t before[ZINC_COLL_COUNT], want[ZINC_COLL_COUNT] = {0};
    memcpy(before, c->bytes, sizeof before);
    size_t maxn = 4099 + 600 * (size_t)size + 2048;
    char *buf = malloc(maxn * es), *ref = malloc(maxn * es);

    for (size_t k = 0; k < sizeof ar_ns / sizeof ar_ns[0]; k++) {
        size_t n = ar_ns[k];
        uint64_t s = seed * 131 + k;
        cref_fill(buf, t, n, s, r);
        for (size_t i = 0; i < n; i++) cref_reduce_elem(ref, t, i, s, size, scale, 0);
        zinc_status st = zcomm_all_reduce(c, buf, n, t, scale);
        ZT_CHECK(st == ZINC_OK, "%s rank %d: all_reduce n=%zu: %s", tag, r, n, c->err);
        size_t d = cref_first_diff(buf, ref, 0, n, t);
        ZT_CHECK(d == n, "%s rank %d: all_reduce n=%zu differs at %zu: %g vs reference %g", tag,
                 r, n, d, (double)cref_ld(buf, t, d), (double)cref_ld(ref, t, d));
        want[ZINC_COLL_ALL_REDUCE] += 2 * n * es;
    }
    for (size_t k = 0; k < sizeof slices / sizeof slices[0]; k++) {
        size_t sl = slices[k], n = sl * (size_t)size;
        uint64_t s = seed * 137 + k;
        cref_fill(buf, t, n, s, r);
        for (size_t i = (size_t)r * sl; i < (size_t)(r + 1) * sl; i++)
            cref_reduce_elem(ref, t, i, s, size, scale, 0);
        zinc_status st = zcomm_reduce_scatter(c, buf, n, t, scale);
        ZT_CHECK(st == ZINC_OK, "%s rank %d: reduce_scatter n=%zu: %s", tag, r, n, c->err);
        size_t lo = (size_t)r * sl, hi = lo + sl, d = cref_first_diff(buf, ref, lo, hi, t);
        ZT_CHECK(d == hi, "%s rank %d: reduce_scatter slice %zu differs at %zu", tag, r, sl, d);
        want[ZINC_COLL_REDUCE_SCATTER] += n * es;

        /* all-gather: own slice holds this rank's values, the rest garbage */
        memset(buf, 0xA5, n * es);
        for (int q = 0; q < size; q++)
            for (size_t i = (size_t)q * sl; i < (size_t)(q + 1) * sl; i++)
                cref_st(q == r ? buf : ref, t, i, cref_value(s + 1, q, i));
        for (size_t i = lo; i < hi; i++) memcpy(ref + i * es, buf + i * es, es);
        st = zcomm_all_gather(c, buf, n, t);
        ZT_CHECK(st == ZINC_OK, "%s rank %d: all_gather n=%zu: %s", tag, r, n, c->err);
        d = cref_first_diff(buf, ref, 0, n, t);
        ZT_CHECK(d == n, "%s rank %d: all_gather slice %zu differs at %zu", tag, r, sl, d);
        want[ZINC_COLL_ALL_GATHER] += n * es;
    }
    for (int root = 0; root < size; root++) {
        size_t bytes = 1001 + (size_t)root;
        for (size_t i = 0; i < bytes; i++) ref[i] = (char)cref_mix(seed + (uint64_t)root * 977 + i);
        if (r == root) memcpy(buf, ref, bytes);
        else memset(buf, 0x5A, bytes);
        zinc_status st = zcomm_broadcast(c, buf, bytes, root);
        ZT_CHECK(st == ZINC_OK, "%s rank %d: broadcast root %d: %s", tag, r, root, c->err);
        ZT_CHECK(memcmp(buf, ref, bytes) == 0, "%s rank %d: broadcast from %d differs", tag, r,
                 root);
        want[ZINC_COLL_BROADCAST] += bytes;
    }
    ZT_OK(zcomm_barrier(c));
    for (int k = 0; k < ZINC_COLL_COUNT; k++)
        ZT_CHECK(c->bytes[k] - before[k] == want[k],
                 "%s rank %d: byte counter %d moved by %llu, expected %llu", tag, r, k,
                 (unsigned long long)(c->bytes[k] - before[k]), (unsigned long long)want[k]);
    free(buf);
    free(ref);
}

#endif
