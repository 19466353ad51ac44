/*
 * cpu.h — private interface of the CPU device backend (kernels/cpu/).
 *
 * The backend has three layers:
 *   - elem.h: the per-element operation sequences, the one definition every path follows;
 *   - kernel tables (portable C, AVX2+FMA+F16C, AVX-512), one per instruction set, each working
 *     on an element range [lo, hi) of whole buffers; the SIMD files are compiled with their ISA
 *     flags (CMakeLists.txt, by file name) and only called when the CPU has the ISA;
 *   - cpu_device.c: the zdev vtable, which validates arguments, picks the table at open time and
 *     splits the range over the thread pool (pool.c).
 */
#ifndef ZINC_KERNELS_CPU_H
#define ZINC_KERNELS_CPU_H

#include <stddef.h>

#include "kernels/cpu/elem.h"
#include "kernels/device.h"

/* Blocks of grad_stats summed per round through the device's fixed buffer (32 KiB). */
#define ZK_STATS_ROUND 4096

/* Elements per lane group of the grad_stats sum inside one ZK_STATS_BLOCK block (see elem.h). */
#define ZK_STATS_LANES 16

/* One instruction set's kernels. Ranges are absolute element indices into the buffers, so the
 * same buffer pointers are passed to every thread. */
typedef struct zk_kernels {
    const char *isa;    /* "portable", "avx2", "avx512" */
    void (*adam)(const zk_adam_args *a, const zk_adam_consts *c, size_t lo, size_t hi);
    /* Sums of squares of the whole blocks blk_lo..blk_hi-1 (the last one may be partial:
     * it ends at n) into sums[blk - blk_lo]. */
    void (*stats)(const void *g, zinc_dtype dt, size_t n, size_t blk_lo, size_t blk_hi,
                  double *sums);
    void (*cast)(void *dst, zinc_dtype ddt, const void *src, zinc_dtype sdt, float scale,
                 size_t lo, size_t hi);
    /* acc[i] = round_to_adt(acc[i] + x[i]); adt is xdt, or fp32 (a widening sum). */
    void (*accumulate)(void *acc, zinc_dtype adt, const void *x, zinc_dtype xdt, size_t lo,
                       size_t hi);
    /* a[i] = b[i] + s * c[i]: the bandwidth probe of `zinc bench adam` (fp32). */
    void (*triad)(float *a, const float *b, const float *c, float s, size_t lo, size_t hi);
    /* XXH3-64 of n bytes at p with the seed: one block of zk_cpu_checksum (block_hash.h). */
    uint64_t (*block_hash)(const void *p, size_t n, uint64_t seed);
} zk_kernels;

extern const zk_kernels zk_kernels_portable;
extern const zk_kernels zk_kernels_avx2;
extern const zk_kernels zk_kernels_avx512;

/* Whether this CPU (and OS) can run the table of `isa` ("portable", "avx2", "avx512"). */
int zk_cpu_has_isa(const char *isa);
/* The best table this CPU runs. */
const char *zk_cpu_best_isa(void);

/* Opens a CPU device with an explicit ISA (NULL: ZINC_CPU_ISA if set, else the best one).
 * threads 0 = online CPUs. @return ZINC_ERR_UNSUPPORTED for an ISA this CPU lacks,
 * ZINC_ERR_INVALID_ARG for an unknown name; the message is in zerr_thread_message(). */
zinc_status zk_cpu_open_isa(int threads, const char *isa, zdev_t **out);
/* The ISA and thread count of an open CPU device; NULL / 0 for another backend. */
const char *zk_cpu_isa(const zdev_t *d);
int zk_cpu_threads(const zdev_t *d);
/* The bandwidth probe a[i] = b[i] + s * c[i] over n fp32 elements, on the device's threads. */
zinc_status zk_cpu_triad(zdev_t *d, float *a, const float *b, const float *c, float s, size_t n);
/* A 64-bit checksum of `bytes` bytes at p, on the device's threads: the sum (mod 2^64) of the
 * XXH3-64 of each 256 KiB block seeded with seed + its index, plus seed — the same value for any
 * thread count; for catching changed bytes (the NVMe scratch file), not for security. */
zinc_status zk_cpu_checksum(zdev_t *d, const void *p, size_t bytes, uint64_t seed, uint64_t *out);

/* ---- thread pool (pool.c) -------------------------------------------------------------------
 * nthreads - 1 workers; the caller of zk_pool_run is the last participant. One job at a time:
 * a device is used by one thread at a time. */
typedef struct zk_pool zk_pool;
typedef void (*zk_pool_fn)(void *arg, int part);
/* @return NULL when a thread or the memory could not be had. */
zk_pool *zk_pool_create(int nthreads);
void zk_pool_destroy(zk_pool *p);
int zk_pool_threads(const zk_pool *p);
/* Runs fn(arg, part) for part = 0 .. nparts-1 (nparts <= threads), the caller running part 0,
 * and returns when all are done. */
void zk_pool_run(zk_pool *p, int nparts, zk_pool_fn fn, void *arg);

#endif
