/*
 * offload.c — ZeRO-Offload of the optimizer state (zero_optimization.offload_optimizer
 * {"device": "cpu"}, stages 1-3): the fp32 master, Adam m and v of this rank's shard live in host
 * memory and the fused Adam runs on the host.
 *
 * Where things live (S = plan.shard_numel, d = working dtype size):
 *   device  param16, the gradient accumulator and its statistics, buckets, gather buffers
 *   host    master, m, v [S] fp32; h_grad [S] d (the reduced gradient shard, downloaded);
 *           h_param16 [S] d (Adam's 16-bit output, uploaded; none in fp32 mode)
 * The host buffers come from a cpu device of their own (e->host), so a device memory limit
 * (zinc.device_memory_limit) sees only the device's buffers, and its Adam is the same kernel the
 * cpu device runs on its shard: the arithmetic is element-wise and identical, so a run with
 * offload gives the same bits as one without.
 *
 * The step (after the device's statistics and the one all-reduce of the norm, unchanged):
 *   each group's own gradient slice   device -> host   (h_grad at the group's shard offset)
 *   one fused Adam over the host shard                  (master, m, v; 16-bit into h_param16)
 *   each group's own 16-bit slice     host -> device   (param16's own slice of the group)
 * then the caller's all-gather (stages 1-2) or persistent-group refresh (stage 3). Copies are
 * counted per direction (zinc_offload_bytes). Today the three phases run one after the other;
 * overlapping group g's copies with group g-1's host Adam (and pinned buffers with a copy stream
 * on CUDA) is the follow-up (docs/engine.md, "Offload").
 *
 * offload_param (stage 3, with the above): see the section at the end of this file.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"

static size_t dsize(const zinc_engine_t *e) { return zinc_dtype_size(e->dtype); }

/* Where group g's own 16-bit slice sits in param16: the shard at stage 3, else the full buffer. */
static size_t own_param_pos(const zinc_engine_t *e, const zplan_group *G)
{
    return e->stage == 3 ? G->shard_off : G->flat_off + G->slice * (size_t)e->rank;
}

static zinc_status host_alloc(zinc_engine_t *e, zinc_mem_category c, void **out)
{
    *out = NULL;
    uint64_t n = e->host_planned[c];
    if (n == 0) return ZINC_OK;
    *out = e->host->iface->alloc(e->host, (size_t)n);
    if (!*out)
        return zeng_fail(e, ZINC_ERR_NOMEM,
                         "zinc_finalize: cannot allocate %llu bytes of host memory for the "
                         "offloaded %s on rank %d (zero_optimization.offload_optimizer; see `zinc "
                         "estimate --offload-optimizer` for the plan)",
                         (unsigned long long)n, zinc_mem_category_name(c), e->rank);
    e->host_allocated[c] = n;
    return ZINC_OK;
}

zinc_status zoffload_alloc(zinc_engine_t *e)
{
    zinc_status s = zdev_cpu_open(e->threads, &e->host);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_finalize: offload_optimizer: cannot open the host device: %s",
                         zerr_thread_message());
    void *master, *m, *v;
    if ((s = host_alloc(e, ZINC_MEM_MASTER, &master)) == ZINC_OK) e->master = master;
    if (s == ZINC_OK && (s = host_alloc(e, ZINC_MEM_ADAM_M, &m)) == ZINC_OK) e->m = m;
    if (s == ZINC_OK && (s = host_alloc(e, ZINC_MEM_ADAM_V, &v)) == ZINC_OK) e->v = v;
    if (s == ZINC_OK) s = host_alloc(e, ZINC_MEM_GRAD, &e->h_grad);
    if (s == ZINC_OK) s = host_alloc(e, ZINC_MEM_PARAM16, &e->h_param16);
    return s;
}

void zoffload_free(zinc_engine_t *e)
{
    zdev_t *h = e->host;
    if (!h) return;
    void *bufs[] = {e->master, e->m, e->v, e->h_grad, e->h_param16};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) h->iface->free(h, bufs[i]);
    e->master = e->m = e->v = NULL;
    e->h_grad = e->h_param16 = NULL;
    zdev_close(h);
    e->host = NULL;
}

/* The own 16-bit slices, from the host (h_param16, or the master itself in fp32 mode), into
 * param16 on the device, group by group. */
static zinc_status upload_own(zinc_engine_t *e, int counted)
{
    /* offload_param: the host shard is param16 itself; gathers upload from it. */
    if (e->offload_param) return ZINC_OK;
    size_t d = dsize(e);
    const char *src = e->dtype == ZINC_DTYPE_FP32 ? (const char *)e->master : e->h_param16;
    for (int g = 0; g < e->plan.ngroups; g++) {
        const zplan_group *G = &e->plan.groups[g];
        zinc_status s = e->dev->iface->upload(e->dev, (char *)e->param16 + own_param_pos(e, G) * d,
                                              src + G->shard_off * d, G->slice * d);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "offload: uploading the parameters of group '%s': %s", G->name,
                             e->dev->err);
        if (counted) e->offload_bytes[1] += G->slice * d;
    }
    return ZINC_OK;
}

zinc_status zoffload_adam(zinc_engine_t *e, zk_adam_args *a)
{
    size_t d = dsize(e);
    /* The reduced gradient: the shard (stages 2-3) or the own slices of the full buffer
     * (stage 1), in shard order into h_grad. */
    for (int g = 0; g < e->plan.ngroups; g++) {
        const zplan_group *G = &e->plan.groups[g];
        size_t off = e->stage < 2 ? G->flat_off + G->slice * (size_t)e->rank : G->shard_off;
        zinc_status s = e->dev->iface->download(e->dev, (char *)e->h_grad + G->shard_off * d,
                                                (const char *)e->grad + off * d, G->slice * d);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "zinc_step: offload: downloading the gradient of group '%s': %s",
                             G->name, e->dev->err);
        e->offload_bytes[0] += G->slice * d;
    }
    a->master = e->master;
    a->m = e->m;
    a->v = e->v;
    a->grad = e->h_grad;
    a->param_out = e->dtype == ZINC_DTYPE_FP32 ? NULL : e->h_param16;
    a->n = e->plan.shard_numel;
    zinc_status s = e->host->iface->adam_step(e->host, a);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: offload: host adam: %s", e->host->err);
    return upload_own(e, 1);
}

zinc_status zoffload_refresh_own(zinc_engine_t *e)
{
    if (e->dtype != ZINC_DTYPE_FP32) {
        zinc_status s = e->host->iface->cast(e->host, e->h_param16, e->dtype, e->master,
                                             ZINC_DTYPE_FP32, e->plan.shard_numel, 1.0f);
        if (s != ZINC_OK) return zeng_fail(e, s, "offload: converting the master: %s", e->host->err);
    }
    return upload_own(e, 0);
}

/* ---- offload_param (stage 3): the 16-bit shard in host memory --------------------------------
 *
 * The host Adam already writes the 16-bit shard on the host (h_param16); with offload_param that
 * buffer is the shard and nothing is uploaded after the update. Instead each gather uploads the
 * group's own slice into its place in the gather slot (or the persistent block) and the usual
 * in-place all-gather completes the group: per gather of a non-persistent group, slice * d bytes
 * host->device, and per applied step the persistent groups' slices once. */

void *zoffload_param16(const zinc_engine_t *e)
{
    return e->dtype == ZINC_DTYPE_FP32 ? (void *)e->master : e->h_param16;
}

zinc_status zoffload_own_to_device(zinc_engine_t *e, int g, void *dst, int counted)
{
    const zplan_group *G = &e->plan.groups[g];
    size_t d = dsize(e), n = G->slice * d;
    zinc_status s;
    if (!e->offload_param) {
        s = e->dev->iface->copy(e->dev, dst, (char *)e->param16 + G->shard_off * d, n);
    } else {
        s = e->dev->iface->upload(e->dev, dst, (const char *)zoffload_param16(e) + G->shard_off * d, n);
        if (s == ZINC_OK && counted) e->offload_bytes[1] += n;
    }
    if (s != ZINC_OK)
        return zeng_fail(e, s, "stage 3: staging the own slice of group '%s' for its all-gather: %s",
                         G->name, e->dev->err);
    return ZINC_OK;
}
