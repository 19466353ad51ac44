/*
 * hold.h — the engine's device buffers, kept past zinc_engine_destroy while another library's
 * tensors view them (zinc_memory_hold). The engine holds one reference; each view one more; the
 * last to let go frees the buffers and closes the device.
 */
#ifndef ZINC_ENGINE_HOLD_H
#define ZINC_ENGINE_HOLD_H

#include <stddef.h>

#include "kernels/device.h"

typedef struct zhold zhold;

/* A hold with the engine's reference; NULL when out of memory. */
zhold *zhold_new(void);

/* zinc_engine_destroy's end: the engine hands its n device buffers and their device over and
 * lets go of its reference. Freed now (in order, then the device closed) unless views remain. */
void zhold_give(zhold *h, zdev_t *dev, void *const *bufs, size_t n);

#endif
