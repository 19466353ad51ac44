/*
 * hold.c — the engine's device buffers outlive the engine while tensors view them.
 *
 * A front-end hands out tensors over zinc's memory (the parameters' working copy, the gradient
 * sums, stage 3's persistent groups) and the script can keep one past the engine: an entry of
 * model.state_dict(), a .detach(). Each such tensor takes a hold (zinc_memory_hold) that its
 * deleter lets go (zinc_memory_release, or zinc_dlpack_deleter for a DLPack tensor), so the
 * buffers stay valid until the last one goes, as torch's own storages do. Releases come from
 * any thread (the one that drops the last tensor), hence the atomic count.
 */
#include "engine/hold.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "engine/internal.h"

enum { ZHOLD_BUFS = 8 };

struct zhold {
    atomic_long refs;          /* the engine's, while it lives, and one per hold handed out */
    zdev_t *dev;               /* set by zhold_give */
    void *bufs[ZHOLD_BUFS];
    size_t nbufs;
};

zhold *zhold_new(void)
{
    zhold *h = calloc(1, sizeof *h);
    if (h) atomic_init(&h->refs, 1);
    return h;
}

static void zhold_drop(zhold *h)
{
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return;
    for (size_t i = 0; i < h->nbufs; i++)
        if (h->bufs[i]) h->dev->iface->free(h->dev, h->bufs[i]);
    zdev_close(h->dev);
    free(h);
}

void zhold_give(zhold *h, zdev_t *dev, void *const *bufs, size_t n)
{
    if (n > ZHOLD_BUFS) abort();   /* a new engine buffer needs a larger ZHOLD_BUFS */
    h->dev = dev;
    for (size_t i = 0; i < n; i++) h->bufs[i] = bufs[i];
    h->nbufs = n;
    zhold_drop(h);
}

void *zinc_memory_hold(zinc_engine_t *e)
{
    if (!e || !e->hold) return NULL;
    atomic_fetch_add_explicit(&e->hold->refs, 1, memory_order_relaxed);
    return e->hold;
}

void zinc_memory_release(void *hold)
{
    if (hold) zhold_drop(hold);
}

/* DLPack's DLManagedTensor (dlpack.h): a 48-byte DLTensor on 64-bit targets, then manager_ctx
 * and the deleter. Only manager_ctx is read here; the descriptor is one malloc'd block. */
typedef struct {
    unsigned char dl_tensor[48];
    void *manager_ctx;
    void (*deleter)(void *self);
} zdlpack_managed;

_Static_assert(sizeof(void *) != 8 || sizeof(zdlpack_managed) == 64,
               "DLManagedTensor is 64 bytes on 64-bit targets");

void zinc_dlpack_deleter(void *managed)
{
    if (!managed) return;
    void *hold = ((zdlpack_managed *)managed)->manager_ctx;
    free(managed);
    zinc_memory_release(hold);
}
