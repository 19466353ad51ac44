/*
 * offload.c — ZeRO-Offload of the optimizer state (zero_optimization.offload_optimizer
 * {"device": "cpu"}, stages 1-3): the fp32 master, Adam m and v of this rank's shard live in host
 * memory and the fused Adam runs on the host.
 *
 * Where things live (S = plan.shard_numel, d = working dtype size, gd = the gradient sums' size:
 * d, or 4 with data_types.grad_accum_dtype "fp32"):
 *   device  param16, the gradient accumulator and its statistics, buckets, gather buffers
 *   host    master, m, v [S] fp32; h_grad [S] gd (the reduced gradient shard, downloaded);
 *           h_param16 [S] d (Adam's 16-bit output, uploaded; none in fp32 mode)
 * The host buffers come from a cpu device of their own (e->host), so a device memory limit
 * (zinc.device_memory_limit) sees only the device's buffers, and its Adam is the same kernel the
 * cpu device runs on its shard: the arithmetic is element-wise and identical, so a run with
 * offload gives the same bits as one without.
 *
 * The step (after the device's statistics and the one all-reduce of the norm, unchanged) is a
 * pipeline over chunks of whole groups (below): each chunk's own gradient slices device -> host
 * into h_grad, the fused Adam over the chunk on the host (master, m, v; 16-bit into h_param16),
 * its own 16-bit slices host -> device into param16, with the downloads of the next chunks and
 * the uploads of the last ones running while the host computes (the device's asynchronous
 * copies: a copy stream on CUDA, with the two staging buffers pinned when pin_memory is set).
 * Then the caller's all-gather (stages 1-2) or persistent-group refresh (stage 3). Copies are
 * counted per direction (zinc_offload_bytes).
 *
 * offload_param (stage 3, with the above): see the section at the end of this file.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"

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

/* The order zoffload_alloc allocates the host categories in, which zoffload_check_limit follows
 * to name the one that does not fit, as a device allocation past zinc.device_memory_limit does. */
static const zinc_mem_category host_order[] = {ZINC_MEM_MASTER, ZINC_MEM_ADAM_M, ZINC_MEM_ADAM_V,
                                               ZINC_MEM_GRAD, ZINC_MEM_PARAM16};

zinc_status zoffload_check_limit(zinc_engine_t *e)
{
    uint64_t limit = e->cfg.zinc.host_memory_limit, used = 0;
    if (!limit) return ZINC_OK;
    for (size_t i = 0; i < sizeof host_order / sizeof host_order[0]; i++) {
        zinc_mem_category c = host_order[i];
        uint64_t n = e->host_planned[c];
        if (used + n <= limit) {
            used += n;
            continue;
        }
        int shard = c == ZINC_MEM_PARAM16 && e->offload_param;
        return zeng_fail(e, ZINC_ERR_NOMEM,
                         "zinc_finalize: cannot allocate %s%s in host memory on rank %d: %llu "
                         "bytes needed, %llu available under zinc.host_memory_limit = %llu bytes "
                         "(%llu planned before it); see `zinc estimate --offload-optimizer` (or "
                         "`zinc plan --config`) for the plan: raise the limit, use more ranks "
                         "(the host holds %d bytes per parameter over the ranks), or keep the "
                         "optimizer state on the device (no offload_optimizer)",
                         zinc_mem_category_name(c), shard ? " (the offload_param shard)" : "",
                         e->rank, (unsigned long long)n, (unsigned long long)(limit - used),
                         (unsigned long long)limit, (unsigned long long)used,
                         /* master, m, v; the gradient sums; Adam's 16-bit output */
                         12 + (int)zeng_gsize(e) + (e->dtype == ZINC_DTYPE_FP32 ? 0 : (int)zeng_dsize(e)));
    }
    return ZINC_OK;
}

/* ---- the pipeline ----------------------------------------------------------------------------
 * The update runs chunk by chunk: a chunk is a run of whole groups, consecutive in the shard
 * (so its host range is contiguous), that stays within a target of max(ZOFF_CHUNK_MIN, shard / 8)
 * elements, or zero_optimization.sub_group_size when smaller (DeepSpeed's unit of the offloaded
 * step); a group larger than the target is a chunk of its own. The downloads of up to ZOFF_AHEAD chunks are queued ahead on the device's copy
 * queue (upload_async/download_async, device.h); the host waits for chunk c's gradient, runs the
 * Adam over it and queues its upload, while the copies of the chunks around it run. The step then
 * costs about max(copies, host Adam) plus one chunk of each, instead of their sum. The Adam is
 * element-wise, so chunking changes no bit. */
#define ZOFF_CHUNK_MIN ((size_t)1 << 20)
#define ZOFF_AHEAD 4

static zinc_status plan_chunks(zinc_engine_t *e)
{
    const zplan *p = &e->plan;
    size_t target = p->shard_numel / 8 > ZOFF_CHUNK_MIN ? p->shard_numel / 8 : ZOFF_CHUNK_MIN;
    if ((uint64_t)e->cfg.zero.sub_group_size < target) target = (size_t)e->cfg.zero.sub_group_size;
    e->ochunk = malloc(((size_t)p->ngroups + 1) * sizeof *e->ochunk);
    if (!e->ochunk)
        return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: offload: out of memory for %d chunks",
                         p->ngroups);
    int n = 0;
    size_t in_chunk = 0;
    for (int g = 0; g < p->ngroups; g++) {
        size_t slice = p->groups[g].slice;
        if (g == 0 || in_chunk + slice > target) {
            e->ochunk[n++] = g;
            in_chunk = 0;
        }
        in_chunk += slice;
    }
    e->ochunk[n] = p->ngroups;
    e->nochunk = n;
    return ZINC_OK;
}

/* Pins the host buffers the copies touch (offload_optimizer.pin_memory), where the device can. */
static zinc_status pin_buffers(zinc_engine_t *e)
{
    const zdev_iface_t *D = e->dev->iface;
    if (!e->cfg.zero.offload_pin || !D->pin_host) return ZINC_OK;
    size_t n = e->plan.shard_numel * zeng_dsize(e), staging = 0;
    size_t ng = e->plan.shard_numel * zeng_gsize(e);    /* h_grad: fp32 sums are twice n */
    /* With the parameters in the NVMe file there is no host shard to pin, but the slots each
     * gather reads its slice into and uploads from (pageable, an upload would wait on the host
     * for the copy stream: every earlier copy and compute it was ordered after). */
    void *stage = zoffload_nvme_staging(e, &staging);
    void *bufs[] = {e->h_grad, zoffload_param16_in_file(e) ? NULL : zoffload_param16(e), stage};
    size_t bytes[] = {ng, n, staging};
    for (int i = 0; i < 3; i++) {
        if (!bufs[i]) continue;
        zinc_status s = D->pin_host(e->dev, bufs[i], bytes[i]);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "zinc_finalize: offload_optimizer.pin_memory: pinning %zu bytes "
                             "of host memory on rank %d: %s", bytes[i], e->rank, e->dev->err);
        e->pinned[i] = bufs[i];
    }
    return ZINC_OK;
}

zinc_status zoffload_alloc(zinc_engine_t *e)
{
    zinc_status s = zdev_cpu_open(e->threads, &e->host);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_finalize: offload_optimizer: cannot open the host device: %s",
                         zerr_thread_message());
    void *master, *m, *v;
    if (zoffload_uses_nvme(e)) {
        s = zoffload_nvme_open(e);   /* master, m, v in the scratch file (offload_nvme.c) */
    } else {   /* (a frozen engine plans none of them: NULL) */
        if ((s = host_alloc(e, ZINC_MEM_MASTER, &master)) == ZINC_OK) e->master = master;
        if (s == ZINC_OK && (s = host_alloc(e, ZINC_MEM_ADAM_M, &m)) == ZINC_OK) e->m = m;
        if (s == ZINC_OK && (s = host_alloc(e, ZINC_MEM_ADAM_V, &v)) == ZINC_OK) e->v = v;
    }
    if (s == ZINC_OK) s = host_alloc(e, ZINC_MEM_GRAD, &e->h_grad);
    if (s == ZINC_OK && !e->h_param16) s = host_alloc(e, ZINC_MEM_PARAM16, &e->h_param16);
    if (s == ZINC_OK) s = plan_chunks(e);
    if (s == ZINC_OK) s = pin_buffers(e);
    return s;
}

void zoffload_free(zinc_engine_t *e)
{
    zdev_t *h = e->host;
    if (!h) return;
    /* No copy may still read or write these buffers (a failed step can leave some queued). */
    uint64_t t;
    if (e->dev && e->dev->iface->copy_fence(e->dev, &t) == ZINC_OK)
        e->dev->iface->copy_wait(e->dev, t);
    for (int i = 0; i < 3; i++) {
        if (e->pinned[i]) e->dev->iface->unpin_host(e->dev, e->pinned[i]);
        e->pinned[i] = NULL;
    }
    zoffload_nvme_close(e);          /* NVMe: the file and chunk buffers; master, m, v are NULL */
    void *bufs[] = {e->master, e->m, e->v, e->h_grad, e->h_param16};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) h->iface->free(h, bufs[i]);
    e->master = e->m = e->v = NULL;
    e->h_grad = e->h_param16 = NULL;
    free(e->ochunk);
    e->ochunk = NULL;
    zdev_close(h);
    e->host = NULL;
}

static zinc_status copy_fail(zinc_engine_t *e, zinc_status s, const char *what)
{
    return zeng_fail(e, s, "zinc_step: offload: %s: %s", what, e->dev->err);
}

zinc_status zoffload_download(zinc_engine_t *e, int g0, int g1)
{
    size_t d = zeng_gsize(e);
    for (int g = g0; g < g1; g++) {
        const zplan_group *G = &e->plan.groups[g];
        size_t off = e->stage < 2 ? G->flat_off + G->slice * (size_t)e->rank : G->shard_off;
        zinc_status s = e->dev->iface->download_async(e->dev, (char *)e->h_grad + G->shard_off * d,
                                                      (const char *)e->grad + off * d, G->slice * d);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "offload: downloading the gradient of group '%s': %s",
                             G->name, e->dev->err);
        e->offload_bytes[0] += G->slice * d;
    }
    return ZINC_OK;
}

/* Queues the own 16-bit values of shard elements [lo, hi) host -> device into param16, group
 * by group (each group's part to its own slice's place): from h_param16, or from the master
 * itself in fp32 mode with host state. */
static zinc_status upload_range(zinc_engine_t *e, size_t lo, size_t hi, int counted)
{
    /* offload_param: the host shard is param16 itself; gathers upload from it. */
    if (e->offload_param) return ZINC_OK;
    size_t d = zeng_dsize(e);
    const char *src = zoffload_param16(e);
    for (int g = 0; g < e->plan.ngroups; g++) {
        const zplan_group *G = &e->plan.groups[g];
        size_t a = G->shard_off > lo ? G->shard_off : lo;
        size_t b = G->shard_off + G->slice < hi ? G->shard_off + G->slice : hi;
        if (a >= b) continue;
        zinc_status s = e->dev->iface->upload_async(
            e->dev, (char *)e->param16 + (own_param_pos(e, G) + a - G->shard_off) * d,
            src + a * d, (b - a) * d);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "offload: uploading the parameters of group '%s': %s", G->name,
                             e->dev->err);
        /* The step returns without waiting for it: a host write of its source (the master in
         * fp32 mode: zinc_param_set, zinc_param_local_set) settles first. */
        e->own_uploads_pending = 1;
        if (counted) e->offload_bytes[1] += (b - a) * d;
    }
    return ZINC_OK;
}

static zinc_status upload_groups(zinc_engine_t *e, int g0, int g1, int counted)
{
    if (g0 >= g1) return ZINC_OK;
    const zplan_group *last = &e->plan.groups[g1 - 1];
    return upload_range(e, e->plan.groups[g0].shard_off, last->shard_off + last->slice, counted);
}

zinc_status zoffload_upload_range(zinc_engine_t *e, size_t lo, size_t hi)
{
    return upload_range(e, lo, hi, 1);
}

zinc_status zoffload_wait_copies(zinc_engine_t *e)
{
    uint64_t t = 0;
    zinc_status s = e->dev->iface->copy_fence(e->dev, &t);
    if (s == ZINC_OK) s = e->dev->iface->copy_wait(e->dev, t);
    if (s != ZINC_OK) return copy_fail(e, s, "waiting for the gradient downloads");
    /* The copy stream is in order: that wait covered every upload the gathers queued from the
     * host shard, which the Adam now rewrites. */
    e->own_uploads_pending = 0;
    return ZINC_OK;
}

/* ---- the gradient shard in host memory (stages 2-3) -------------------------------------------
 * The reduced gradient shard accumulates in h_grad, not on the device. Each zinc_grads_ready of
 * a group, after its reduce-scatter (the own slice `own` in the bucket): the group's partial sum
 * of the window so far is uploaded into the device's one-slice scratch (acc_tmp; zeros in the
 * window's first micro-step), the own slice is added there with the device's accumulate — the
 * same addition, same operands in the same order, as the device accumulator it replaces — and the
 * sum goes back down into h_grad. Every copy is queued on the copy stream and joined on the
 * device, so backward never waits on the host; the host waits once, when it next reads h_grad
 * (zoffload_grad_settle: the step's statistics, an accessor, the clearing after the step). */
zinc_status zoffload_reduce_to_host(zinc_engine_t *e, int group, const void *own,
                                    zinc_dtype own_dt)
{
    const zdev_iface_t *D = e->dev->iface;
    const zplan_group *G = &e->plan.groups[group];
    zgroup_state *gs = &e->gstate[group];
    size_t n = G->slice * zeng_gsize(e);
    char *host = (char *)e->h_grad + G->shard_off * zeng_gsize(e);
    zinc_status s;
    if (gs->acc_on_host) {
        s = D->upload_async(e->dev, e->acc_tmp, host, n);
        if (s == ZINC_OK) s = D->copy_join(e->dev);
        if (s == ZINC_OK) e->offload_bytes[1] += n;
    } else {
        s = D->memset0(e->dev, e->acc_tmp, n);
    }
    /* in the sums' dtype: fp32 with grad_accum_dtype "fp32", the 16-bit slice widened (or
     * an fp32 slice, reduced in fp32) */
    if (s == ZINC_OK) s = D->accumulate(e->dev, e->acc_tmp, e->gdtype, own, own_dt, G->slice);
    if (s == ZINC_OK) s = D->download_async(e->dev, host, e->acc_tmp, n);
    /* the bucket's clearing and the next group's use of acc_tmp come after the download */
    if (s == ZINC_OK) s = D->copy_join(e->dev);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_grads_ready: offload: moving the gradient of group '%s' to "
                         "the host: %s", G->name, e->dev->err);
    e->offload_bytes[0] += n;
    gs->acc_on_host = 1;
    e->grad_copies_pending = 1;
    return ZINC_OK;
}

zinc_status zoffload_grad_settle(zinc_engine_t *e)
{
    if (!e->grad_copies_pending) return ZINC_OK;
    zinc_status s = zoffload_wait_copies(e);
    if (s == ZINC_OK) e->grad_copies_pending = 0;
    return s;
}

zinc_status zoffload_adam(zinc_engine_t *e, zk_adam_args *a)
{
    if (e->nv) return zoffload_nvme_adam(e, a);
    /* Stages 2-3 (grad_host): the gradient is in h_grad already (zinc_grads_ready). */
    int predownloaded = e->grad_host;
    const zdev_iface_t *D = e->dev->iface;
    const zplan_group *groups = e->plan.groups;
    size_t d = zeng_dsize(e);
    uint64_t ticket[ZOFF_AHEAD];
    int queued = 0;
    zinc_status s = ZINC_OK;
    double t = zeng_now();
    if (predownloaded) {
        /* Stages 2-3: the gradient is in h_grad, waited for by the statistics; only uploads the
         * gathers queued from the host shard (offload_param) may still be in flight. */
        s = zoffload_grad_settle(e);
        if (s == ZINC_OK) s = zoffload_settle(e);
        e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
        if (s != ZINC_OK) return s;
    }
    for (int c = 0; c < e->nochunk; c++) {
        /* Stage 1: keep ZOFF_AHEAD chunks of gradient on their way down. */
        for (; !predownloaded && queued < e->nochunk && queued < c + ZOFF_AHEAD; queued++) {
            s = zoffload_download(e, e->ochunk[queued], e->ochunk[queued + 1]);
            if (s != ZINC_OK) return s;
            if ((s = D->copy_fence(e->dev, &ticket[queued % ZOFF_AHEAD])) != ZINC_OK)
                return copy_fail(e, s, "copy fence");
        }
        if (!predownloaded) {
            s = D->copy_wait(e->dev, ticket[c % ZOFF_AHEAD]);
            e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
            if (s != ZINC_OK) return copy_fail(e, s, "waiting for a gradient download");
            /* The copy stream is in order: that fence came after every upload the gathers
             * queued from the host shard, which Adam now rewrites. */
            e->own_uploads_pending = 0;
        }
        const zplan_group *first = &groups[e->ochunk[c]], *last = &groups[e->ochunk[c + 1] - 1];
        size_t off = first->shard_off;
        a->master = e->master + off;
        a->m = e->m + off;
        a->v = e->v + off;
        a->grad = (const char *)e->h_grad + off * zeng_gsize(e);
        a->param_out = e->dtype == ZINC_DTYPE_FP32 ? NULL : (char *)e->h_param16 + off * d;
        a->n = last->shard_off + last->slice - off;
        s = zeng_adam_groups(e, e->host, a, e->ochunk[c], e->ochunk[c + 1], 1);
        e->phase_s[ZINC_PHASE_ADAM] += zeng_lap(&t);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: offload: host adam: %s", e->host->err);
        if ((s = upload_groups(e, e->ochunk[c], e->ochunk[c + 1], 1)) != ZINC_OK) return s;
    }
    /* The all-gather (or the persistent refresh) that follows reads the uploaded slices. */
    s = D->copy_join(e->dev);
    e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
    if (s != ZINC_OK) return copy_fail(e, s, "joining the copies");
    return ZINC_OK;
}

zinc_status zoffload_settle(zinc_engine_t *e)
{
    if (!e->own_uploads_pending) return ZINC_OK;
    uint64_t t = 0;
    zinc_status s = e->dev->iface->copy_fence(e->dev, &t);
    if (s == ZINC_OK) s = e->dev->iface->copy_wait(e->dev, t);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "offload: waiting for the parameter uploads: %s", e->dev->err);
    e->own_uploads_pending = 0;
    return ZINC_OK;
}

zinc_status zoffload_refresh_own(zinc_engine_t *e)
{
    zinc_status s0 = zoffload_settle(e);
    if (s0 != ZINC_OK) return s0;
    if (e->nv) {
        zinc_status s = zoffload_nvme_refresh(e);     /* chunk by chunk from the file */
        if (s != ZINC_OK) return s;
    } else if (e->dtype != ZINC_DTYPE_FP32) {
        zinc_status s = e->host->iface->cast(e->host, e->h_param16, e->dtype, e->master,
                                             ZINC_DTYPE_FP32, e->plan.shard_numel, 1.0f);
        if (s != ZINC_OK) return zeng_fail(e, s, "offload: converting the master: %s", e->host->err);
    }
    zinc_status s = upload_groups(e, 0, e->plan.ngroups, 0);
    if (s == ZINC_OK && (s = e->dev->iface->copy_join(e->dev)) != ZINC_OK)
        return zeng_fail(e, s, "offload: joining the parameter uploads: %s", e->dev->err);
    return s;
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
    return e->h_param16 ? e->h_param16 : (void *)e->master;
}

zinc_status zoffload_own_to_device(zinc_engine_t *e, int g, void *dst, int counted)
{
    const zplan_group *G = &e->plan.groups[g];
    size_t d = zeng_dsize(e), n = G->slice * d;
    zinc_status s;
    if (!e->offload_param) {
        s = e->dev->iface->copy(e->dev, dst, (char *)e->param16 + G->shard_off * d, n);
    } else if (zoffload_param16_in_file(e)) {
        return zoffload_nvme_own_to_device(e, g, dst, counted);   /* offload_nvme.c */
    } else {
        /* On the copy stream, after what the compute stream queued so far (earlier readers of
         * this slot); the all-gather that follows waits for it on the device (copy_join): no
         * host wait per gather. The host shard it reads is rewritten only by the step's Adam,
         * whose first copy_wait covers every copy queued before it, and outside the step after
         * zoffload_settle. */
        s = e->dev->iface->upload_async(e->dev, dst,
                                        (const char *)zoffload_param16(e) + G->shard_off * d, n);
        if (s == ZINC_OK) s = e->dev->iface->copy_join(e->dev);
        if (s == ZINC_OK) e->own_uploads_pending = 1;
        if (s == ZINC_OK && counted) e->offload_bytes[1] += n;
    }
    if (s != ZINC_OK)
        return zeng_fail(e, s, "stage 3: staging the own slice of group '%s' for its all-gather: %s",
                         G->name, e->dev->err);
    return ZINC_OK;
}
