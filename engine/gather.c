/*
 * gather.c — the stage-3 parameter schedule: which groups are gathered, where, and when.
 *
 * At stage 3 each rank keeps only its slices of the 16-bit parameters. A group is all-gathered
 * into one of `ngather` fixed buffers on zinc_gather and the buffer is given back on
 * zinc_release. Two refinements, as DeepSpeed's stage 3 has them:
 *
 *  - Persistence: a group with fewer elements than stage3_param_persistence_threshold is kept
 *    gathered for good (one all-gather after each update instead of two per micro-step);
 *    zinc_gather/zinc_release of it do nothing.
 *  - Prefetch: the order of zinc_gather calls in the first micro-step is recorded (the trace).
 *    Later, while the calls follow the trace, each zinc_gather also gathers the next traced
 *    groups into free buffers — as many as are free, within stage3_max_live_parameters — so that
 *    on an asynchronous backend (NCCL) their transfer overlaps the computation on the current
 *    group. Every rank makes the same calls, so every rank issues the same collectives.
 *    Prefetched groups nobody used by the next zinc_step are dropped (the update changes them).
 *
 * The number of buffers comes from the config: at least zinc.gather_buffers, and up to
 * 1 + prefetch_bucket_size / (largest group), capped by the number of non-persistent groups and
 * by max_live_parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"
#include "kernels/cuda/zdev_cuda.h"

static size_t dsz(const zinc_engine_t *e) { return zinc_dtype_size(e->dtype); }

static char *slot_buf(zinc_engine_t *e, int slot)
{
    return (char *)e->gather + (size_t)slot * e->plan.max_group_padded * dsz(e);
}

zinc_status zgather_plan(zinc_engine_t *e)
{
    e->persist_numel = 0;
    int nonpersistent = 0;
    for (int g = 0; g < e->plan.ngroups; g++) {
        zgroup_state *gs = &e->gstate[g];
        gs->persistent = e->stage == 3 &&
                         (int64_t)e->plan.groups[g].numel < e->cfg.zero.param_persistence_threshold;
        if (gs->persistent) {
            gs->persist_off = e->persist_numel;
            e->persist_numel += e->plan.groups[g].padded;
        } else {
            nonpersistent++;
        }
    }
    e->ngather = 0;
    if (e->stage < 3 || nonpersistent == 0) return ZINC_OK;
    int64_t B = (int64_t)e->plan.max_group_padded;
    int64_t want = 1 + (e->cfg.zero.prefetch_bucket_size + B - 1) / B;
    int64_t live = e->cfg.zero.max_live_parameters / B;
    if (want > live) want = live;
    if (want > nonpersistent) want = nonpersistent;
    e->ngather = want > e->cfg.zinc.gather_buffers ? (int)want : e->cfg.zinc.gather_buffers;
    e->trace_cap = 4 * e->plan.ngroups + 16;
    e->trace = calloc((size_t)e->trace_cap, sizeof *e->trace);
    if (!e->trace) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: out of memory");
    return ZINC_OK;
}

static int free_slot(zinc_engine_t *e)
{
    for (int i = 0; i < e->ngather; i++)
        if (e->gather_owner[i] < 0) return i;
    return -1;
}

static void drop(zinc_engine_t *e, int group)
{
    zgroup_state *gs = &e->gstate[group];
    e->gather_owner[gs->gather_slot] = -1;
    gs->gather_slot = -1;
    gs->held = 0;
}

/* All-gathers a group into a slot (counted: it is training traffic). */
static zinc_status fetch(zinc_engine_t *e, int group, int slot)
{
    const zplan_group *G = &e->plan.groups[group];
    size_t d = dsz(e);
    char *buf = slot_buf(e, slot);
    /* The own slice at its place in the slot, then the all-gather in place (every backend takes
     * the buffer with this rank's slice filled). With offload_param that first copy is the
     * upload from the host shard. */
    zinc_status s = zoffload_own_to_device(e, group, buf + G->slice * (size_t)e->rank * d, 1);
    if (s != ZINC_OK) return s;
    s = zcomm_all_gather(e->comm, buf, G->padded, (zdt)e->dtype);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_gather: all-gather of group '%s' failed on rank %d: %s",
                         G->name, e->rank, e->comm->err);
    /* The slot's mark: the point of the compute stream where this group's values are in place,
     * for zinc_stream_wait_gather (later prefetches and reduce-scatters are queued after it). */
    s = zdev_cuda_mark(e->dev, slot);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_gather: marking group '%s' gathered: %s", G->name,
                         e->dev->err);
    e->gather_owner[slot] = group;
    e->gstate[group].gather_slot = slot;
    return ZINC_OK;
}

static int64_t live_elements(const zinc_engine_t *e)
{
    int64_t n = 0;
    for (int i = 0; i < e->ngather; i++)
        if (e->gather_owner[i] >= 0) n += (int64_t)e->plan.groups[e->gather_owner[i]].padded;
    return n;
}

/* Gathers the next traced groups into free buffers. */
static zinc_status prefetch(zinc_engine_t *e)
{
    for (int k = e->trace_pos; k >= 0 && k < e->trace_len; k++) {
        int h = e->trace[k];
        zgroup_state *hs = &e->gstate[h];
        if (hs->gather_slot >= 0) continue;
        int slot = free_slot(e);
        if (slot < 0 || live_elements(e) + (int64_t)e->plan.groups[h].padded >
                            e->cfg.zero.max_live_parameters)
            break;
        zinc_status s = fetch(e, h, slot);
        if (s != ZINC_OK) return s;
    }
    return ZINC_OK;
}

static void trace_note(zinc_engine_t *e, int group)
{
    if (!e->trace_done) {
        if (e->trace_len < e->trace_cap) e->trace[e->trace_len++] = group;
        return;
    }
    if (e->trace_pos >= 0 && e->trace_pos < e->trace_len && e->trace[e->trace_pos] == group)
        e->trace_pos++;
    else
        e->trace_pos = -1; /* left the traced order: no more prefetch this micro-step */
}

zinc_status zinc_gather(zinc_engine_t *e, int group)
{
    zinc_status bad = zeng_check_ready_group(e, group, "zinc_gather");
    if (bad != ZINC_OK) return bad;
    if (e->stage < 3) return ZINC_OK;
    zgroup_state *gs = &e->gstate[group];
    if (gs->held)
        return zeng_fail_sequence(e, ZINC_ERR_USAGE, "zinc_gather: group '%s' is already gathered",
                         e->plan.groups[group].name);
    if (gs->persistent) {
        gs->held = 1;
        return ZINC_OK;
    }
    trace_note(e, group);
    if (gs->gather_slot < 0) {
        int slot = free_slot(e);
        if (slot < 0) {
            /* Make room by dropping a prefetched group nobody holds. */
            for (int i = 0; i < e->ngather && slot < 0; i++)
                if (!e->gstate[e->gather_owner[i]].held) {
                    drop(e, e->gather_owner[i]);
                    slot = i;
                }
        }
        if (slot < 0)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                             "zinc_gather: all %d gather buffers hold gathered groups; zinc_release "
                             "a group before gathering '%s', or raise zinc.gather_buffers",
                             e->ngather, e->plan.groups[group].name);
        zinc_status s = fetch(e, group, slot);
        if (s != ZINC_OK) return s;
    }
    gs->held = 1;
    return e->trace_done ? prefetch(e) : ZINC_OK;
}

zinc_status zinc_release(zinc_engine_t *e, int group)
{
    zinc_status bad = zeng_check_ready_group(e, group, "zinc_release");
    if (bad != ZINC_OK) return bad;
    if (e->stage < 3) return ZINC_OK;
    zgroup_state *gs = &e->gstate[group];
    if (!gs->held)
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_release: group '%s' is not gathered",
                         e->plan.groups[group].name);
    if (gs->persistent) gs->held = 0;
    else drop(e, group);
    return ZINC_OK;
}

zinc_status zinc_stream_wait_gather(zinc_engine_t *e, int group, void *stream)
{
    const char *fn = "zinc_stream_wait_gather";
    zinc_status s = zeng_check_ready_group(e, group, fn);
    if (s != ZINC_OK) return s;
    const zgroup_state *gs = &e->gstate[group];
    int own_mark = e->stage == 3 && !gs->persistent;
    if (own_mark && !gs->held)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: group '%s' is not gathered; call zinc_gather "
                         "first", fn, e->plan.groups[group].name);
    if (!zdev_cuda_stream(e->dev)) return ZINC_OK; /* cpu: zinc's work is done when queued */
    if (!stream) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: stream is NULL", fn);
    /* Persistent groups and stages 0-2 have no gather of their own to wait for: the values are
     * zinc's working copy, current after everything queued so far (mark `ngather`, past the
     * slots' marks). */
    int id = own_mark ? gs->gather_slot : e->ngather;
    if (!own_mark) s = zdev_cuda_mark(e->dev, id);
    if (s == ZINC_OK) s = zdev_cuda_wait_mark(e->dev, id, stream);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: group '%s': %s", fn,
                                       e->plan.groups[group].name, e->dev->err);
    return ZINC_OK;
}

void zgather_step_end(zinc_engine_t *e)
{
    if (e->stage < 3) return;
    for (int i = 0; i < e->ngather; i++)
        if (e->gather_owner[i] >= 0 && !e->gstate[e->gather_owner[i]].held) drop(e, e->gather_owner[i]);
    if (e->trace_len > 0) e->trace_done = 1;
    e->trace_pos = 0;
}

zinc_status zgather_forget(zinc_engine_t *e, int group, const char *who)
{
    zgroup_state *gs = &e->gstate[group];
    if (e->stage < 3 || gs->persistent || gs->gather_slot < 0) return ZINC_OK;
    if (gs->held)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: group '%s' is gathered; zinc_release it first "
                         "(its gathered view would keep the old values)", who,
                         e->plan.groups[group].name);
    drop(e, group);
    return ZINC_OK;
}

zinc_status zgather_refresh_persistent(zinc_engine_t *e, int counted)
{
    size_t d = dsz(e);
    for (int g = 0; g < e->plan.ngroups; g++) {
        zgroup_state *gs = &e->gstate[g];
        if (!gs->persistent) continue;
        const zplan_group *G = &e->plan.groups[g];
        char *buf = (char *)e->persist + gs->persist_off * d;
        zinc_status s = zoffload_own_to_device(e, g, buf + G->slice * (size_t)e->rank * d, counted);
        if (s != ZINC_OK) return s;
        s = counted ? zcomm_all_gather(e->comm, buf, G->padded, (zdt)e->dtype)
                    : e->comm->iface->all_gather(e->comm, buf, G->padded, (zdt)e->dtype);
        if (s != ZINC_OK)
            return zeng_fail(e, s, "all-gather of persistent group '%s' failed on rank %d: %s",
                             G->name, e->rank, e->comm->err);
    }
    return ZINC_OK;
}
