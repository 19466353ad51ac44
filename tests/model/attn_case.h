/*
 * attn_case.h — a shape and its random inputs for the host checks of the CUDA model's attention
 * (test_flash_rows.c: the SIMT rows; test_flash_tiles.c: the tensor-core tiles), so both draw
 * the same kind of inputs the same way.
 */
#ifndef ZINC_TESTS_MODEL_ATTN_CASE_H
#define ZINC_TESTS_MODEL_ATTN_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "testutil.h"

typedef struct {
    const char *name;
    int B, H, hs, T;
    double amp; /* q, k, v ~ N(0, amp^2) */
} attn_case;

/* qkv [B*T, 3D] ~ N(0, amp^2) and dy [B*T, D] ~ N(0, 1), drawn in that order from `seed`. */
static inline void attn_case_inputs(const attn_case *c, uint64_t seed, float *qkv, float *dy)
{
    size_t D = (size_t)c->H * c->hs, rows = (size_t)c->B * c->T;
    zt_rng rng = {seed};
    for (size_t i = 0; i < rows * 3 * D; i++) qkv[i] = (float)(c->amp * zt_normal(&rng));
    for (size_t i = 0; i < rows * D; i++) dy[i] = (float)zt_normal(&rng);
}

#endif
