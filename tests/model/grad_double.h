/* grad_double.h — the double-precision instance of the model (grad_double.c). */
#ifndef ZINC_TESTS_MODEL_GRAD_DOUBLE_H
#define ZINC_TESTS_MODEL_GRAD_DOUBLE_H

#include <stdint.h>

/* Activations for micro-batches of B sequences of the spec; NULL on failure. */
void *zmd_acts_new(const char *spec, int B);
void zmd_acts_free(void *acts);
/* Mean loss; with grads != NULL also adds d loss / d params into grads (same layout as fp32). */
double zmd_loss(void *acts, double *const *params, double *const *grads, const uint16_t *tokens,
                const uint16_t *targets);

#endif
