/*
 * xxh3_speed.c — XXH3-64 (seeded, 256 KiB blocks, as zk_cpu_checksum hashes) on one core: from a
 * 1 GiB buffer (memory) and over one 256 KiB block again and again (cache), through the shared
 * libxxhash or, built with -DINLINE, inlined from xxhash.h with this file's flags (as
 * kernels/cpu/block_hash.h does in each ISA's kernel file). bench/RESULTS.md 8b cites it:
 *   cc -O3 -mavx512f -mavx512bw bench/xxh3_speed.c -o /tmp/xxh3_lib -lxxhash
 *   cc -O3 -mavx512f -mavx512bw -DINLINE bench/xxh3_speed.c -o /tmp/xxh3_avx512
 *   cc -O3 -mavx2 -DINLINE bench/xxh3_speed.c -o /tmp/xxh3_avx2
 * Prints GB/s, median of 5 passes each.
 */
#ifdef INLINE
#define XXH_INLINE_ALL
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    const size_t big = (size_t)1 << 30, block = (size_t)1 << 18;
    char *p = malloc(big);
    if (!p) return 1;
    memset(p, 1, big);
    unsigned long long h = 0;
    double mem[5], hot[5];
    for (int r = 0; r < 5; r++) {
        double t = now();
        for (size_t o = 0; o < big; o += block) h += XXH3_64bits_withSeed(p + o, block, o);
        mem[r] = (double)big / (now() - t) / 1e9;
        t = now();
        for (int k = 0; k < 4096; k++) h += XXH3_64bits_withSeed(p, block, (unsigned long long)k);
        hot[r] = 4096.0 * (double)block / (now() - t) / 1e9;
    }
    qsort(mem, 5, sizeof mem[0], cmp);
    qsort(hot, 5, sizeof hot[0], cmp);
    printf("xxh3 %s: memory %.1f GB/s, cache %.1f GB/s (median of 5; %llx)\n",
#if !defined(INLINE)
           "libxxhash",
#elif defined(__AVX512F__)
           "inlined, AVX-512",
#elif defined(__AVX2__)
           "inlined, AVX2",
#else
           "inlined, SSE2",
#endif
           mem[2], hot[2], h);
    free(p);
    return 0;
}
