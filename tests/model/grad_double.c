/*
 * grad_double.c — a double-precision instance of models/gpt.c for the gradient test.
 *
 * The model's source is compiled a second time with `float` read as `double` (and the fp32 math
 * functions as their double versions), its public names renamed to zmd_*. Finite differences of
 * this instance are accurate to ~1e-9, so it checks the backward code itself without fp32
 * rounding noise, and its gradients are the reference for the fp32 build's.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"

#define float double
#define expf exp
#define logf log
#define sqrtf sqrt
#define tanhf tanh
#define zm_spec_parse zmd_spec_parse
#define zm_group_count zmd_group_count
#define zm_tensors zmd_tensors
#define zm_group_numel zmd_group_numel
#define zm_param_total zmd_param_total
#define zm_embed_views zmd_embed_views
#define zm_block_views zmd_block_views
#define zm_init_group zmd_init_group
#define zm_acts_create zmd_acts_create
#define zm_acts_destroy zmd_acts_destroy
#define zm_acts_bytes zmd_acts_bytes
#define zm_acts_bytes_for zmd_acts_bytes_for
#define zm_embed_forward zmd_embed_forward
#define zm_block_forward zmd_block_forward
#define zm_head zmd_head
#define zm_block_backward zmd_block_backward
#define zm_embed_backward zmd_embed_backward
#define zm_forward_backward zmd_forward_backward
#define zm_attention_forward zmd_attention_forward
#define zm_attention_backward zmd_attention_backward
#define zm_model_create zmd_model_create
#define zm_model_destroy zmd_model_destroy
#define zm_model_init zmd_model_init
#define zm_model_micro_step zmd_model_micro_step
#define zm_model_params zmd_model_params
#define zm_model_spec zmd_model_spec
#define zm_model_bytes zmd_model_bytes

#include "models/gpt.c"

#include "grad_double.h"

void *zmd_acts_new(const char *spec, int B)
{
    zm_spec s;
    char err[256];
    zm_acts *a = NULL;
    if (zm_spec_parse(spec, &s, err, sizeof err) != 0) return NULL;
    if (zm_acts_create(&s, B, 1, 0, &a) != ZINC_OK) return NULL;
    return a;
}

void zmd_acts_free(void *a) { zm_acts_destroy(a); }

double zmd_loss(void *a, double *const *params, double *const *grads, const uint16_t *tokens,
                const uint16_t *targets)
{
    return zm_forward_backward(a, params, grads, tokens, targets, 1.0);
}
