/*
 * block_hash.h — the hash of one checksum block (zk_cpu_checksum: XXH3-64, seeded), included by
 * each ISA's kernel file. xxhash.h's implementation is inlined there (XXH_INLINE_ALL), so it is
 * compiled with that file's flags and XXH3 runs on AVX2 or AVX-512 where the table does; the
 * shared libxxhash is built for any x86-64 (SSE2), which hashed 8-13 GB/s on one core of the
 * development VM against 42-46 GB/s inlined with AVX-512 (256 KiB blocks in cache;
 * bench/xxh3_speed.c, bench/RESULTS.md 8b). XXH3's value is
 * fixed by the algorithm, not by the vector path: kernels_device checks every table against the
 * library.
 */
#ifndef ZINC_KERNELS_CPU_BLOCK_HASH_H
#define ZINC_KERNELS_CPU_BLOCK_HASH_H

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t block_hash(const void *p, size_t n, uint64_t seed)
{
    return XXH3_64bits_withSeed(p, n, seed);
}

#endif
