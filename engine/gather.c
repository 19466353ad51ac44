/*
 * gather.c — the stage-3 parameter schedule: which groups are gathered, where, and when.
 *
 * At stage 3 each rank keeps only its slices of the 16-bit parameters. A group is all-gathered
 * into the gather area on zinc_gather and its place is given back on zinc_release. Two
 * refinements, as DeepSpeed's stage 3 has them:
 *
 *  - Persistence: a group with fewer elements than stage3_param_persistence_threshold is kept
 *    gathered for good (one all-gather after each update instead of two per micro-step);
 *    zinc_gather/zinc_release of it do nothing.
 *  - Prefetch: the order of zinc_gather calls in the first micro-step is recorded (the trace),
 *    and recorded again in a micro-step whose calls leave it or end before it does (a changed
 *    order: Python's stage 3 skips the gathers of groups it kept, stage3_max_reuse_distance,
 *    from its second micro-step on). While the calls follow the trace, each zinc_gather also
 *    gathers the next traced groups, so that on an asynchronous backend (NCCL) their transfer
 *    overlaps the computation on the current group: while fewer than
 *    stage3_prefetch_bucket_size elements are gathered ahead of use (DeepSpeed's meaning of
 *    that key: elements fetched ahead), the total stays within stage3_max_live_parameters and
 *    the next group has room; it stops, in order, at a group held now that the trace uses again
 *    (it is released and gathered anew first), and with offload_param on NVMe at 3 groups ahead
 *    (zoffload_prefetch_groups). Every rank makes the same calls, so every rank issues the same
 *    collectives. Prefetched groups nobody used by the next zinc_step are dropped (the update
 *    changes them).
 *
 * The gather area is `ngather` slots of the largest group's size (at least zinc.gather_buffers,
 * and up to 1 + ceil(prefetch_bucket_size / largest group), capped by the number of
 * non-persistent groups and by max_live_parameters / largest group). Groups are packed into the
 * slots one after another: a group goes at the end of the slot the last one went into when it
 * fits there, else into an empty slot, and a slot is empty again when every group in it is
 * gone. So a model with one large group (an embedding) and many small ones (its layers)
 * prefetches many layers ahead in the same memory, where one group per slot allowed only
 * ngather - 1. Any ngather groups can still be held at once: the held groups occupy at most
 * that many slots, and a gather that finds no room empties a slot that holds no held group by
 * dropping its prefetched groups.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"
#include "kernels/cuda/zdev_cuda.h"

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

static size_t padded(const zinc_engine_t *e, int group) { return e->plan.groups[group].padded; }

/* Marks (zinc_stream_wait_gather): at stage 3 mark g is recorded after group g's all-gather (a
 * slot holds several groups, so marks are per group), and mark ngroups stands for "everything
 * queued so far"; below stage 3 only that one, as mark 0. zgather_marks is how many. */
static int mark_past(const zinc_engine_t *e) { return e->stage == 3 ? e->plan.ngroups : 0; }
int zgather_marks(const zinc_engine_t *e) { return mark_past(e) + 1; }

/* Where a group of n elements can go: the end of the slot the last group went into, when it
 * fits there, else the start of an empty slot. Returns the slot, -1 when neither has room. */
static int place(zinc_engine_t *e, size_t n, size_t *pos)
{
    size_t B = e->plan.max_group_padded;
    int open = e->gather_open;
    if (open >= 0 && e->gslots[open].count > 0 && e->gslots[open].fill + n <= B) {
        *pos = (size_t)open * B + e->gslots[open].fill;
        return open;
    }
    for (int i = 0; i < e->ngather; i++)
        if (e->gslots[i].count == 0) {
            *pos = (size_t)i * B;
            return i;
        }
    return -1;
}

static void drop(zinc_engine_t *e, int group)
{
    zgroup_state *gs = &e->gstate[group];
    zgather_slot *sl = &e->gslots[gs->gather_slot];
    if (--sl->count == 0) sl->fill = 0;
    e->gather_live -= padded(e, group);
    if (!gs->held) e->gather_ahead -= padded(e, group);
    gs->gather_slot = -1;
    gs->held = 0;
}

/* Empties a slot that holds no held group by dropping its (prefetched) groups; -1 when every
 * slot holds one. */
static int evict(zinc_engine_t *e)
{
    for (int i = 0; i < e->ngather; i++) {
        int held = 0;
        for (int g = 0; g < e->plan.ngroups && !held; g++)
            held = e->gstate[g].gather_slot == i && e->gstate[g].held;
        if (held) continue;
        for (int g = 0; g < e->plan.ngroups; g++)
            if (e->gstate[g].gather_slot == i) drop(e, g);
        return i;
    }
    return -1;
}

/* All-gathers a group at `pos` of `slot` (counted: it is training traffic). */
static zinc_status fetch(zinc_engine_t *e, int group, int slot, size_t pos)
{
    const zplan_group *G = &e->plan.groups[group];
    size_t d = zeng_dsize(e);
    char *buf = (char *)e->gather + pos * d;
    /* The own slice at its place in the group's span, then the all-gather in place (every
     * backend takes the buffer with this rank's slice filled). With offload_param that first
     * copy is the upload from the host shard. */
    zinc_status s = zoffload_own_to_device(e, group, buf + G->slice * (size_t)e->rank * d, 1);
    if (s != ZINC_OK) return s;
    s = zcomm_all_gather(e->comm, buf, G->padded, (zdt)e->dtype);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_gather: all-gather of group '%s' failed on rank %d: %s",
                         G->name, e->rank, e->comm->err);
    /* The group's mark: the point of the compute stream where its values are in place, for
     * zinc_stream_wait_gather (later prefetches and reduce-scatters are queued after it). */
    s = zdev_cuda_mark(e->dev, group);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_gather: marking group '%s' gathered: %s", G->name,
                         e->dev->err);
    zgather_slot *sl = &e->gslots[slot];
    sl->fill = pos - (size_t)slot * e->plan.max_group_padded + G->padded;
    sl->count++;
    e->gather_open = slot;
    e->gstate[group].gather_slot = slot;
    e->gstate[group].gather_pos = pos;
    e->gather_live += G->padded;
    e->gather_ahead += G->padded; /* not held yet: zinc_gather takes it off when it holds it */
    return ZINC_OK;
}

/* Groups gathered ahead of use (prefetched, not held). */
static int groups_ahead(const zinc_engine_t *e)
{
    int n = 0;
    for (int g = 0; g < e->plan.ngroups; g++)
        n += e->gstate[g].gather_slot >= 0 && !e->gstate[g].held;
    return n;
}

/* Gathers the next traced groups ahead of use (the rule at the top of this file). */
static zinc_status prefetch(zinc_engine_t *e)
{
    int cap = zoffload_prefetch_groups(e), ahead = cap == INT_MAX ? 0 : groups_ahead(e);
    for (int k = e->trace_pos; k < e->trace_len && ahead < cap; k++) {
        int h = e->trace[k];
        /* A group in use now that the trace uses again later will be released and gathered
         * anew before that use: prefetch stops there, in trace order, rather than run past a
         * gather that may then find no room and drop prefetched groups (their transfer lost). */
        if (e->gstate[h].held) break;
        if (e->gstate[h].gather_slot >= 0) continue;
        if (e->gather_ahead >= e->cfg.zero.prefetch_bucket_size ||
            e->gather_live + (int64_t)padded(e, h) > e->cfg.zero.max_live_parameters)
            break;
        size_t pos;
        int slot = place(e, padded(e, h), &pos);
        if (slot < 0) break; /* in trace order: no skipping to a smaller group further on */
        zinc_status s = fetch(e, h, slot, pos);
        if (s != ZINC_OK) return s;
        ahead++;
    }
    return ZINC_OK;
}

static void trace_note(zinc_engine_t *e, int group)
{
    if (!e->trace_done) {
        if (e->trace_len < e->trace_cap) e->trace[e->trace_len++] = group;
        return;
    }
    if (e->trace_pos < e->trace_len && e->trace[e->trace_pos] == group) {
        e->trace_pos++;
        return;
    }
    /* Left the traced order: this micro-step's calls become the trace (as DeepSpeed records its
     * trace again when the module order changes). The calls so far followed the old trace, so
     * its first trace_pos entries are theirs; no prefetch until the micro-step ends. */
    e->trace_len = e->trace_pos;
    e->trace_done = 0;
    trace_note(e, group);
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
        size_t pos;
        int slot = place(e, padded(e, group), &pos);
        if (slot < 0 && (slot = evict(e)) >= 0) slot = place(e, padded(e, group), &pos);
        if (slot < 0)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                             "zinc_gather: all %d gather buffers hold gathered groups; zinc_release "
                             "a group before gathering '%s', or raise zinc.gather_buffers",
                             e->ngather, e->plan.groups[group].name);
        zinc_status s = fetch(e, group, slot, pos);
        if (s != ZINC_OK) return s;
    }
    e->gather_ahead -= padded(e, group); /* fetched now or prefetched before: in use from here */
    gs->held = 1;
    zinc_status s = e->trace_done ? prefetch(e) : ZINC_OK;
    if (s != ZINC_OK) drop(e, group); /* a failed call leaves nothing held to release */
    return s;
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
    if (gs->persistent) {
        gs->held = 0;
    } else {
        drop(e, group);
    }
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
    /* (NULL is CUDA's legacy default stream: PyTorch's current stream outside any
     * torch.cuda.stream block has cuda_stream 0.) */
    /* Persistent groups and stages 0-2 have no gather of their own to wait for: the values are
     * zinc's working copy, current after everything queued so far (the mark past the groups'). */
    int id = own_mark ? group : mark_past(e);
    if (!own_mark) s = zdev_cuda_mark(e->dev, id);
    if (s == ZINC_OK) s = zdev_cuda_wait_mark(e->dev, id, stream);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: group '%s': %s", fn,
                                       e->plan.groups[group].name, e->dev->err);
    return ZINC_OK;
}

void zgather_drop_prefetched(zinc_engine_t *e)
{
    for (int g = 0; e->stage == 3 && g < e->plan.ngroups; g++)
        if (e->gstate[g].gather_slot >= 0 && !e->gstate[g].held) drop(e, g);
}

void zgather_step_end(zinc_engine_t *e)
{
    if (e->stage < 3) return;
    zgather_drop_prefetched(e);
    /* A micro-step that followed the trace and ended before its end is the new order: a later
     * one would otherwise prefetch the entries past it, which nothing uses (import zinc's
     * stage 3 keeps its groups for their last uses from its second micro-step on). */
    if (e->trace_done && e->trace_pos > 0 && e->trace_pos < e->trace_len)
        e->trace_len = e->trace_pos;
    if (e->trace_len > 0) e->trace_done = 1;
    e->trace_pos = 0;
}

/* Whether group g has a gathered copy of its own (stage 3, not persistent): prefetched, or held
 * by the caller too. */
static int has_gathered_copy(const zinc_engine_t *e, int g)
{
    const zgroup_state *gs = &e->gstate[g];
    return e->stage == 3 && !gs->persistent && gs->gather_slot >= 0;
}

/* A change of the values refused while the caller holds group g gathered (zinc_param_set, a
 * load): its view would not show it. Not an abort: zinc_gather being collective, every rank
 * holds the same groups and refuses alike, and the world stays usable for the release. */
static zinc_status refuse_held(zinc_engine_t *e, int g, const char *who)
{
    return zeng_fail(e, ZINC_ERR_USAGE, "%s: group '%s' is gathered; zinc_release it first (its "
                     "gathered view would keep the old values)", who, e->plan.groups[g].name);
}

zinc_status zgather_forget(zinc_engine_t *e, int group, const char *who)
{
    if (!has_gathered_copy(e, group)) return ZINC_OK;
    if (e->gstate[group].held) return refuse_held(e, group, who);
    drop(e, group);
    return ZINC_OK;
}

zinc_status zeng_none_held(zinc_engine_t *e, const char *who)
{
    for (int g = 0; g < e->plan.ngroups; g++)
        if (has_gathered_copy(e, g) && e->gstate[g].held) return refuse_held(e, g, who);
    return ZINC_OK;
}

zinc_status zgather_refresh_persistent(zinc_engine_t *e, int counted)
{
    size_t d = zeng_dsize(e);
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
