/*
 * states_away.c — DeepSpeed's engine.offload_states / reload_states (stages 1-3 in DeepSpeed
 * 0.19.8; any stage here): between two optimizer steps the state only the step reads and writes
 * — the fp32 master (DeepSpeed's hp_params) and Adam's moments (its optim_states) — is copied to
 * host memory and its device memory freed, and brought back before the next step. A
 * reinforcement-learning loop frees the device this way for its generation phase.
 *
 * What torch views stays: the working copy (lp_params: the module's parameters at stages 0-2),
 * the gradient sums (lp_grads: the .grads at stages 0-1) and the buckets; the front-end says so.
 * With offload_optimizer the state is in host memory already and nothing moves; an fp32 master
 * that is the working copy itself (fp32 at stages 0 and 3) is not moved either.
 *
 * Forward and backward (gathers, zinc_grads_ready) go on while the state is away; the calls that
 * read or write it (the step, the parameter and state accessors, checkpoints) are refused with
 * ZINC_ERR_USAGE until zinc_states_reload. The move waits for the device (its downloads and
 * uploads are synchronous), so the step's last kernels are done before the memory is freed.
 */
#include <stdlib.h>

#include "engine/internal.h"

/* The categories that move, and the engine's pointer to each one's device buffer. */
static const int movable[] = {ZINC_MEM_MASTER, ZINC_MEM_ADAM_M, ZINC_MEM_ADAM_V};
enum { NMOVABLE = sizeof movable / sizeof movable[0] };

static float **slot_of(zinc_engine_t *e, int c)
{
    return c == ZINC_MEM_MASTER ? &e->master : c == ZINC_MEM_ADAM_M ? &e->m : &e->v;
}

int zinc_states_offloaded(const zinc_engine_t *e)
{
    if (!e) return 0;
    for (int c = 0; c < ZINC_MEM_COUNT; c++)
        if (e->away[c]) return 1;
    return 0;
}

zinc_status zeng_check_home(zinc_engine_t *e, const char *fn)
{
    if (!zinc_states_offloaded(e)) return ZINC_OK;
    return zeng_fail(e, ZINC_ERR_USAGE, "%s: the optimizer state is in host memory "
                     "(zinc_states_offload; engine.offload_states() in Python): bring it back "
                     "with zinc_states_reload (engine.reload_states()) first", fn);
}

static void drop_host(zinc_engine_t *e, int c)
{
    if (e->away_pinned[c] && e->dev->iface->unpin_host) e->dev->iface->unpin_host(e->dev, e->away[c]);
    free(e->away[c]);
    e->away[c] = NULL;
    e->away_pinned[c] = 0;
    e->away_bytes[c] = 0;
}

zinc_status zinc_states_offload(zinc_engine_t *e, unsigned categories, int pin, uint64_t *moved)
{
    const char *fn = "zinc_states_offload";
    if (moved) *moved = 0;
    zinc_status s = zeng_check_ready(e, fn);
    if (s == ZINC_OK) s = zeng_check_trains(e, fn);
    if (s != ZINC_OK) return s;
    unsigned known = 0;
    for (int k = 0; k < NMOVABLE; k++) known |= 1u << movable[k];
    if (categories & ~known)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: categories 0x%x: only the master and the "
                         "Adam moments move (1 << ZINC_MEM_MASTER, _ADAM_M, _ADAM_V); the working "
                         "copy, the gradient sums and the buckets stay, as torch views them",
                         fn, categories);
    /* With offload_optimizer they are host memory (or the NVMe file) already. */
    if (e->offload) return ZINC_OK;
    const zdev_iface_t *D = e->dev->iface;
    for (int k = 0; k < NMOVABLE; k++) {
        int c = movable[k];
        float **slot = slot_of(e, c);
        /* Asked for, and allocated on the device as its own buffer: 0 bytes where it is away
         * already, and for fp32's master at stages 0 and 3, which is the working copy (planned
         * as param16) and stays. */
        uint64_t n = e->allocated[c];
        if (!(categories >> c & 1) || !n) continue;
        void *h = NULL;
        if (posix_memalign(&h, 4096, (size_t)n) != 0)
            return zeng_fail(e, ZINC_ERR_NOMEM, "%s: cannot allocate %llu bytes of host memory "
                             "for the %s on rank %d", fn, (unsigned long long)n,
                             zinc_mem_category_name((zinc_mem_category)c), e->rank);
        int pinned = 0;
        if (pin && D->pin_host) {
            if ((s = D->pin_host(e->dev, h, (size_t)n)) != ZINC_OK) {
                free(h);
                return zeng_fail(e, s, "%s: page-locking %llu bytes of host memory for the %s on "
                                 "rank %d: %s (pin_memory false does without)", fn,
                                 (unsigned long long)n,
                                 zinc_mem_category_name((zinc_mem_category)c), e->rank, e->dev->err);
            }
            pinned = 1;
        }
        if ((s = D->download(e->dev, h, *slot, (size_t)n)) != ZINC_OK) {
            if (pinned && D->unpin_host) D->unpin_host(e->dev, h);
            free(h);
            return zeng_fail(e, s, "%s: copying the %s to host memory on rank %d: %s", fn,
                             zinc_mem_category_name((zinc_mem_category)c), e->rank, e->dev->err);
        }
        D->free(e->dev, *slot);
        *slot = NULL;
        e->away[c] = h;
        e->away_bytes[c] = n;
        e->away_pinned[c] = pinned;
        e->allocated[c] = 0;
        e->host_allocated[c] += n;
        if (moved) *moved += n;
    }
    return ZINC_OK;
}

zinc_status zinc_states_reload(zinc_engine_t *e)
{
    const char *fn = "zinc_states_reload";
    zinc_status s = zeng_check_ready(e, fn);
    if (s != ZINC_OK) return s;
    const zdev_iface_t *D = e->dev->iface;
    for (int k = 0; k < NMOVABLE; k++) {
        int c = movable[k];
        if (!e->away[c]) continue;
        uint64_t n = e->away_bytes[c];
        void *p = D->alloc(e->dev, (size_t)n);
        /* (what did not come back stays away, and the calls that need it stay refused) */
        if (!p)
            return zeng_fail(e, ZINC_ERR_NOMEM, "%s: cannot allocate %llu bytes of device memory "
                             "for the %s on rank %d (the state stays in host memory; free device "
                             "memory and call it again)", fn, (unsigned long long)n,
                             zinc_mem_category_name((zinc_mem_category)c), e->rank);
        if ((s = D->upload(e->dev, p, e->away[c], (size_t)n)) != ZINC_OK) {
            D->free(e->dev, p);
            return zeng_fail(e, s, "%s: copying the %s back to the device on rank %d: %s", fn,
                             zinc_mem_category_name((zinc_mem_category)c), e->rank, e->dev->err);
        }
        *slot_of(e, c) = p;
        e->allocated[c] = n;
        e->host_allocated[c] -= n;
        drop_host(e, c);
    }
    return ZINC_OK;
}

void zstates_free(zinc_engine_t *e)
{
    for (int c = 0; c < ZINC_MEM_COUNT; c++)
        if (e->away[c]) drop_host(e, c);
}
