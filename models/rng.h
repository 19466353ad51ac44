/*
 * rng.h — splitmix64, the one reproducible random stream of the models and tools: a 64-bit state
 * advanced by a constant and hashed (Steele, Lea and Flood, 2014). Cheap, splittable by seeding a
 * state per (seed, group, tensor) or per sequence, and the same on every platform, so weights and
 * synthetic data are identical on every rank and every run.
 */
#ifndef ZINC_MODELS_RNG_H
#define ZINC_MODELS_RNG_H

#include <stdint.h>

/* The next 64 bits of the stream at *s. */
static inline uint64_t zrng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1), never 0 (safe under log): 53 random bits, centred in their interval. */
static inline double zrng_unit(uint64_t *s)
{
    return ((double)(zrng_next(s) >> 11) + 0.5) * 0x1.0p-53;
}

#endif
