/*
 * step.c — the micro-step calls (gather, release, gradient views, grads_ready) and the
 * optimizer step state machine:
 *
 *   accumulate → reduce (stages 0-1) → statistics of the own slices → one all-reduce of
 *   (norm², overflow) → loss scaler → skip, or fused Adam with one grad_scale → gather (stages 1-2)
 *
 * Every stage does the same arithmetic in the same order on the same slices (reductions in rank
 * order, statistics slice by slice in group order, an element-wise Adam), which is what makes
 * the weights bitwise identical across stages for a fixed world size.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"

static zinc_status comm_fail(zinc_engine_t *e, zinc_status s, const char *fn, const char *what)
{
    return zeng_fail(e, s, "%s: %s failed on rank %d: %s", fn, what, e->rank, e->comm->err);
}

/* ---- gradients ---------------------------------------------------------------------------- */

int zeng_grad_detached(const zinc_engine_t *e)
{
    return e->grad_external && !e->grad && e->planned[ZINC_MEM_GRAD] > 0;
}

zinc_status zeng_need_grad_buffer(zinc_engine_t *e, const char *fn, int collective)
{
    if (!zeng_grad_detached(e)) return ZINC_OK;
    const char *fmt = "%s: the gradient buffer is the caller's (zinc_grad_buffer_external) and "
                      "none is attached for this accumulation window: call "
                      "zinc_grad_buffer_attach first";
    return collective ? zeng_fail_sequence(e, ZINC_ERR_USAGE, fmt, fn)
                      : zeng_fail(e, ZINC_ERR_USAGE, fmt, fn);
}

zinc_status zinc_grad_buffer_attach(zinc_engine_t *e, void *buf, size_t bytes)
{
    const char *fn = "zinc_grad_buffer_attach";
    zinc_status s = zeng_check_ready(e, fn);
    if (s == ZINC_OK) s = zeng_check_trains(e, fn);
    if (s != ZINC_OK) return s;
    uint64_t want = e->planned[ZINC_MEM_GRAD];
    if (!e->grad_external)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: this engine keeps its own gradient buffer; "
                         "call zinc_grad_buffer_external before zinc_finalize to lend one", fn);
    if (want == 0)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: this engine keeps no device gradient buffer "
                         "(zinc_memory plans 0 bytes for it: with offload_optimizer at stages 2-3 "
                         "the gradient accumulates in host memory); nothing to attach", fn);
    if (e->grad)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: a gradient buffer is attached already; it is "
                         "zinc's until the zinc_step that ends this accumulation window", fn);
    if (!buf || bytes != want || (uintptr_t)buf % 64)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: need %llu bytes at a 64-byte aligned "
                         "address, got %zu bytes at %p", fn, (unsigned long long)want, bytes, buf);
    s = e->dev->iface->memset0(e->dev, buf, bytes);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: clearing the buffer: %s", fn, e->dev->err);
    e->grad = buf;
    return ZINC_OK;
}

/* Bucket i's memory: max_group_padded elements each. */
static char *bucket_at(zinc_engine_t *e, int i)
{
    return (char *)e->bucket + (size_t)i * e->plan.max_group_padded * zeng_dsize(e);
}

/* Stages 2-3: the bucket of a group, taken from the free ones on first use in a micro-step. The
 * search starts after the bucket taken last: in rotation, the bucket a group gets is the one
 * freed longest ago, whose reduce (queued at that zinc_grads_ready) is the most likely done —
 * what a caller adding from another stream waits for (zinc_grad_bucket). */
static zinc_status group_bucket(zinc_engine_t *e, int group, const char *fn, int collective,
                                char **out)
{
    zgroup_state *gs = &e->gstate[group];
    if (gs->bucket < 0) {
        for (int k = 0; k < e->nbuckets && gs->bucket < 0; k++) {
            int i = (e->bucket_next + k) % e->nbuckets;
            if (e->bucket_owner[i] < 0) {
                e->bucket_owner[i] = group;
                gs->bucket = i;
                e->bucket_next = (i + 1) % e->nbuckets;
            }
        }
        /* From a hand-over (collective), the reduce-scatter the other ranks wait in is lost
         * with it: an error inside the collective sequence. From zinc_param_grad it is a local
         * one. */
#define BUCKETS_FULL "%s: all %d gradient buckets hold groups whose gradients were not handed " \
                     "over; call zinc_grads_ready sooner, or raise zinc.grad_buckets in the "   \
                     "config (group '%s')"
        if (gs->bucket < 0 && collective)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE, BUCKETS_FULL, fn, e->nbuckets,
                                      e->plan.groups[group].name);
        if (gs->bucket < 0)
            return zeng_fail(e, ZINC_ERR_USAGE, BUCKETS_FULL, fn, e->nbuckets,
                             e->plan.groups[group].name);
#undef BUCKETS_FULL
    }
    *out = bucket_at(e, gs->bucket);
    return ZINC_OK;
}

zinc_status zinc_param_grad(zinc_engine_t *e, int param, void **out)
{
    zinc_status s = zeng_check_ready(e, "zinc_param_grad");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_param_grad");
    if (s != ZINC_OK) return s;
    if (param < 0 || param >= e->plan.nparams || !out)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_grad: unknown parameter id %d or NULL out",
                         param);
    const zplan_param *P = &e->plan.params[param];
    if (!e->bucketed) {
        if ((s = zeng_need_grad_buffer(e, "zinc_param_grad", 0)) != ZINC_OK) return s;
        *out = (char *)e->grad + (e->plan.groups[P->group].flat_off + P->offset) * zeng_gsize(e);
        return ZINC_OK;
    }
    char *b;
    s = group_bucket(e, P->group, "zinc_param_grad", 0, &b);
    if (s != ZINC_OK) return s;
    *out = b + P->offset * zeng_dsize(e);
    return ZINC_OK;
}

zinc_status zinc_grad_bucket(zinc_engine_t *e, int group, int *slot)
{
    zinc_status s = zeng_check_ready_group(e, group, "zinc_grad_bucket");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grad_bucket");
    if (s != ZINC_OK) return s;
    if (!slot) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_grad_bucket: slot is NULL");
    *slot = -1;
    if (!e->bucketed) return ZINC_OK;
    char *b;
    s = group_bucket(e, group, "zinc_grad_bucket", 0, &b);
    if (s == ZINC_OK) *slot = e->gstate[group].bucket;
    return s;
}

/* Bucket i zeroed (the group that held it: its padded extent) and given back. */
static zinc_status free_bucket(zinc_engine_t *e, int i, const char *fn)
{
    int g = e->bucket_owner[i];
    zinc_status s = e->dev->iface->memset0(e->dev, bucket_at(e, i),
                                           e->plan.groups[g].padded * zeng_dsize(e));
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: clearing a bucket: %s", fn, e->dev->err);
    e->bucket_owner[i] = -1;
    e->gstate[g].bucket = -1;
    return ZINC_OK;
}

zinc_status zinc_grad_bucket_drop(zinc_engine_t *e, int group)
{
    zinc_status s = zeng_check_ready_group(e, group, "zinc_grad_bucket_drop");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grad_bucket_drop");
    if (s != ZINC_OK) return s;
    int i = e->gstate[group].bucket;
    return i < 0 ? ZINC_OK : free_bucket(e, i, "zinc_grad_bucket_drop");
}

/* Stages 2-3: group's bucket `b` reduce-scattered now (overlapping the rest of backward where
 * the backend is asynchronous) and this rank's slice added into the shard's sums. What is
 * reduced: the bucket in the working dtype, or with fp32 sums and communication_data_type "fp32"
 * its fp32 copy, so the reduced slice reaches the sums without a 16-bit rounding
 * (zcfg_reduces_fp32: DeepSpeed's arithmetic then). */
static zinc_status reduce_bucket(zinc_engine_t *e, int group, char *b, const char *fn)
{
    const zplan_group *G = &e->plan.groups[group];
    char *red = b;
    zinc_dtype rdt = e->dtype;
    zinc_status s;
    if (e->wide) {
        red = e->wide;
        rdt = ZINC_DTYPE_FP32;
        s = e->dev->iface->cast(e->dev, red, rdt, b, e->dtype, G->padded, 1.0f);
        if (s != ZINC_OK) return zeng_fail_sequence(e, s, "%s: %s", fn, e->dev->err);
    }
    s = zcomm_reduce_scatter(e->comm, red, G->padded, (zdt)rdt, 1.0f / (float)e->world_size);
    if (s != ZINC_OK) return comm_fail(e, s, fn, "reduce-scatter");
    const char *own = red + G->slice * (size_t)e->rank * zinc_dtype_size(rdt);
    /* Offload: the shard accumulates in host memory (offload.c); else on the device, in the
     * accumulation dtype: fp32 sums of the reduced slices with grad_accum_dtype "fp32", as
     * DeepSpeed's stages 2-3 add them */
    if (e->grad_host) return zoffload_reduce_to_host(e, group, own, rdt);
    s = e->dev->iface->accumulate(e->dev, (char *)e->grad + G->shard_off * zeng_gsize(e),
                                  e->gdtype, own, rdt, G->slice);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: %s", fn, e->dev->err);
    return ZINC_OK;
}

/* The hand-over of a group's bucket, then zeroed and free. Stages 2-3: reduced now
 * (reduce_bucket). Stage 1 with fp32 sums: added into this rank's fp32 sums of the whole group,
 * which zinc_step reduces (DeepSpeed's BF16_Optimizer and stage_1_and_2.py's grad_accum
 * attribute: hp_grad += lp_grad.float() each micro-step). Otherwise (unbucketed, stages 0-1)
 * nothing: the model added into the gradient buffer itself, which zinc_step reduces. */
static zinc_status hand_over(zinc_engine_t *e, int group, const char *fn)
{
    if (!e->bucketed) return ZINC_OK;
    /* A group whose gradient was never touched still takes part with a zero bucket: the
     * collective needs all. */
    const zplan_group *G = &e->plan.groups[group];
    char *b;
    zinc_status s = group_bucket(e, group, fn, 1, &b);
    if (s != ZINC_OK) return s;
    if (e->stage >= 2) {
        s = reduce_bucket(e, group, b, fn);
        if (s != ZINC_OK) return s;
    } else {
        s = e->dev->iface->accumulate(e->dev, (char *)e->grad + G->flat_off * zeng_gsize(e),
                                      e->gdtype, b, e->dtype, G->padded);
        if (s != ZINC_OK) return zeng_fail(e, s, "%s: %s", fn, e->dev->err);
    }
    return free_bucket(e, e->gstate[group].bucket, fn);
}

/* A group whose hand-over failed in this micro-step (a comm timeout, a device error): its
 * gradient is partly or not in the window's sums, and the calls after it are refused naming that
 * failure. Before, zinc_step blamed the caller ("holds gradient added into its bucket after its
 * zinc_grads_ready"), and a second zinc_grads_ready said "already handed over". */
static zinc_status handover_failed(zinc_engine_t *e, int group, const char *fn)
{
    return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                              "%s: the hand-over of group '%s' failed earlier in this micro-step "
                              "(the error its zinc_grads_ready or zinc_grads_more returned): the "
                              "window's gradient is incomplete; load a checkpoint "
                              "(zinc_ckpt_load drops the window) or, after a comm failure, "
                              "create the engine again",
                              fn, e->plan.groups[group].name);
}

/* The hand-over, marking the group failed when it returns an error. */
static zinc_status hand_over_marked(zinc_engine_t *e, int group, const char *fn)
{
    zinc_status s = hand_over(e, group, fn);
    if (s != ZINC_OK) e->gstate[group].ready = ZREADY_FAILED;
    return s;
}

zinc_status zinc_grads_ready(zinc_engine_t *e, int group)
{
    zinc_status s = zeng_check_ready_group(e, group, "zinc_grads_ready");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grads_ready");
    if (s != ZINC_OK) return s;
    zgroup_state *gs = &e->gstate[group];
    /* every micro-step hands every group over, so zinc_step finds the buffer attached too */
    if ((s = zeng_need_grad_buffer(e, "zinc_grads_ready", 1)) != ZINC_OK) return s;
    if (gs->ready == ZREADY_FAILED) return handover_failed(e, group, "zinc_grads_ready");
    if (gs->ready)
        return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                         "zinc_grads_ready: group '%s' was already handed over in this micro-step "
                         "(more gradient after its hand-over: zinc_grads_more)",
                         e->plan.groups[group].name);
    gs->ready = 1;
    return hand_over_marked(e, group, "zinc_grads_ready");
}

zinc_status zinc_grads_more(zinc_engine_t *e, int group)
{
    zinc_status s = zeng_check_ready_group(e, group, "zinc_grads_more");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grads_more");
    if (s != ZINC_OK) return s;
    if (e->grads_reduced)
        return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                         "zinc_grads_more: group '%s': the window's gradients were reduced "
                         "already (zinc_grads_reduce); more gradient cannot join them",
                         e->plan.groups[group].name);
    if (e->gstate[group].ready == ZREADY_FAILED)
        return handover_failed(e, group, "zinc_grads_more");
    if (!e->gstate[group].ready)
        return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                         "zinc_grads_more: group '%s' was not handed over in this micro-step; "
                         "zinc_grads_ready hands it over first", e->plan.groups[group].name);
    return hand_over_marked(e, group, "zinc_grads_more");
}

/* ---- the optimizer step ------------------------------------------------------------------- */

/* The own slice of group g's reduced gradient. */
static void *own_grad(zinc_engine_t *e, int g)
{
    const zplan_group *G = &e->plan.groups[g];
    size_t off = e->stage < 2 ? G->flat_off + G->slice * (size_t)e->rank : G->shard_off;
    return (char *)e->grad + off * zeng_gsize(e);
}

/* Stage 1, fp32 sums reduced in the working dtype (communication_data_type not "fp32"): as
 * DeepSpeed 0.19.8 reduces them (its buffered all-reduce converts the fp32 sums to the
 * communication dtype, reduces, converts back), each group's sums rounded to the working dtype in
 * a bucket, reduce-scattered there, and this rank's slice widened back into the sums. Every
 * bucket is free at the step (end_micro_step refuses one still held); the cast writes all of
 * the group's padded elements, and the bucket is zeroed after, as a hand-over leaves it. */
static zinc_status reduce_rounded(zinc_engine_t *e, float scale)
{
    char *b = bucket_at(e, 0);
    const zdev_iface_t *D = e->dev->iface;
    size_t gs = zeng_gsize(e), d = zeng_dsize(e);
    for (int g = 0; g < e->plan.ngroups; g++) {
        const zplan_group *G = &e->plan.groups[g];
        char *sums = (char *)e->grad + G->flat_off * gs;
        size_t own = G->slice * (size_t)e->rank;
        zinc_status s = D->cast(e->dev, b, e->dtype, sums, e->gdtype, G->padded, 1.0f);
        if (s != ZINC_OK) return zeng_fail_sequence(e, s, "zinc_step: %s", e->dev->err);
        s = zcomm_reduce_scatter(e->comm, b, G->padded, (zdt)e->dtype, scale);
        if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "reduce-scatter of the gradients");
        s = D->cast(e->dev, sums + own * gs, e->gdtype, b + own * d, e->dtype, G->slice, 1.0f);
        if (s == ZINC_OK) s = D->memset0(e->dev, b, G->padded * d);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: %s", e->dev->err);
    }
    return ZINC_OK;
}

static zinc_status reduce_grads(zinc_engine_t *e)
{
    float scale = 1.0f / (float)e->world_size;
    zinc_status s = ZINC_OK;
    if (e->stage == 0) {
        s = zcomm_all_reduce(e->comm, e->grad, e->plan.flat_numel, (zdt)e->gdtype, scale);
        if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "all-reduce of the gradients");
    } else if (e->stage == 1 && e->gdtype != e->dtype && !zcfg_reduces_fp32(&e->cfg)) {
        return reduce_rounded(e, scale);
    } else if (e->stage == 1) {
        for (int g = 0; g < e->plan.ngroups; g++) {
            const zplan_group *G = &e->plan.groups[g];
            s = zcomm_reduce_scatter(e->comm, (char *)e->grad + G->flat_off * zeng_gsize(e), G->padded,
                                     (zdt)e->gdtype, scale);
            if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "reduce-scatter of the gradients");
        }
    }
    return ZINC_OK;
}

/* The statistics of groups [g0, g1)'s own slices, accumulated group by group in order into
 * e->stats on the device. With the gradient on the host (grad_host) the same kernel runs there,
 * once the downloads are waited for, and its two numbers are uploaded into e->stats: the
 * all-reduce is the device's, as without offload. */
static zinc_status own_stats(zinc_engine_t *e, int g0, int g1)
{
    zdev_t *d = e->grad_host ? e->host : e->dev;
    double *out = e->grad_host ? e->host_stats : e->stats;
    zinc_status s = e->grad_host ? zoffload_grad_settle(e) : ZINC_OK;
    for (int g = g0; g < g1 && s == ZINC_OK; g++) {
        const zplan_group *G = &e->plan.groups[g];
        const void *src = e->grad_host ? (const char *)e->h_grad + G->shard_off * zeng_gsize(e)
                                       : own_grad(e, g);
        s = d->iface->grad_stats_acc(d, src, e->gdtype, G->slice, out, g > g0);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: gradient statistics: %s", d->err);
    }
    /* queued and joined: the all-reduce waits for it on the device, the host does not */
    if (s == ZINC_OK && e->grad_host)
        s = e->dev->iface->upload_async(e->dev, e->stats, e->host_stats, sizeof e->host_stats);
    if (s == ZINC_OK && e->grad_host) s = e->dev->iface->copy_join(e->dev);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: gradient statistics: %s", e->dev->err);
    return ZINC_OK;
}

/* Sum of squares and non-finite flag over this rank's slices (accumulated on the device, group
 * by group in order), then one all-reduce across ranks and one read of the two numbers: the one
 * host synchronisation of the step. */
static zinc_status global_stats(zinc_engine_t *e, double *sumsq, int *overflow)
{
    zinc_status s = own_stats(e, 0, e->plan.ngroups);
    if (s != ZINC_OK) return s;
    s = zcomm_all_reduce(e->comm, e->stats, 2, ZDT_F64, 1.0f);
    if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "all-reduce of the gradient norm");
    double acc[2];
    s = e->dev->iface->download(e->dev, acc, e->stats, sizeof acc);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: reading the gradient norm: %s", e->dev->err);
    *sumsq = acc[0];
    *overflow = acc[1] != 0.0 || !isfinite(acc[0]);
    return ZINC_OK;
}

zinc_status zinc_set_lr(zinc_engine_t *e, double lr)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_set_lr: engine is NULL");
    if (!isnan(lr) && (!isfinite(lr) || lr < 0))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_set_lr: learning rate %g is not a finite value >= 0 (NAN: the "
                         "config's schedule)", lr);
    e->lr_override = lr;
    return ZINC_OK;
}

zinc_status zinc_set_betas(zinc_engine_t *e, double beta1, double beta2)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_set_betas: engine is NULL");
    int off = isnan(beta1) && isnan(beta2);
    if (!off && !(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_set_betas: betas (%g, %g) are not both in [0, 1) (NAN, NAN: the "
                         "config's OneCycle momentum)", beta1, beta2);
    e->betas_override[0] = beta1;
    e->betas_override[1] = beta2;
    return ZINC_OK;
}

double zinc_engine_lr(const zinc_engine_t *e)
{
    if (!e) return NAN;
    return isnan(e->lr_override) ? zsched_lr(&e->cfg.sched, e->cfg.optim.lr, zeng_sched_at(&e->st))
                                 : e->lr_override;
}

int zinc_engine_betas(const zinc_engine_t *e, double *beta1, double *beta2)
{
    if (!e || !beta1 || !beta2) return -1;
    if (zsched_sets_betas(&e->cfg.sched) && !isnan(e->betas_override[0])) {
        *beta1 = e->betas_override[0];
        *beta2 = e->betas_override[1];
        return 1;
    }
    *beta1 = zsched_beta1(&e->cfg.sched, e->cfg.optim.beta1, zeng_sched_at(&e->st));
    *beta2 = zsched_beta2(&e->cfg.sched, e->cfg.optim.beta2, zeng_sched_at(&e->st));
    return zsched_sets_betas(&e->cfg.sched);
}

static zinc_status zero_grads(zinc_engine_t *e);

/* Only on the way to the min-scale error: the first group (in group order) whose reduced gradient
 * is not finite on any rank, or -1. One statistics pass and one small all-reduce per group until
 * the first hit; every rank runs the same loop (the flags are global), so the collectives match.
 * Reuses e->stats: nothing is allocated. */
static zinc_status first_bad_group(zinc_engine_t *e, int *out)
{
    *out = -1;
    for (int g = 0; g < e->plan.ngroups; g++) {
        zinc_status s = own_stats(e, g, g + 1);
        double acc[2];
        if (s == ZINC_OK) s = e->dev->iface->download(e->dev, acc, e->stats, sizeof acc);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: gradient statistics: %s", e->dev->err);
        double bad = acc[1] != 0.0 || !isfinite(acc[0]);
        s = zcomm_host_all_reduce_f64(e->comm, &bad, 1);
        if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "all-reduce of an overflow flag");
        if (bad != 0.0) {
            *out = g;
            return ZINC_OK;
        }
    }
    return ZINC_OK;
}

/* DeepSpeed (stages 1-3) stops the run when an overflow finds the loss scale at its minimum with
 * the hysteresis spent: "Current loss scale already at minimum - cannot decrease scale anymore".
 * zinc returns the error on every rank at the same step (the overflow flag and the scaler are
 * the same everywhere), naming the first group whose gradient was not finite. Nothing was
 * applied: weights, moments and the scaler are those after the last applied step. */
static zinc_status min_scale_error(zinc_engine_t *e, zinc_step_info_t *info, double scale)
{
    int g = -1;
    zinc_status s = first_bad_group(e, &g);
    if (s == ZINC_OK) s = zero_grads(e);
    if (s != ZINC_OK) return s;
    info->skipped = 1;
    char where[ZPLAN_NAME_MAX + 96];
    if (g >= 0)
        snprintf(where, sizeof where, "the first group with a non-finite gradient is '%s' (group %d)",
                 e->plan.groups[g].name, g);
    else
        snprintf(where, sizeof where, "no single group holds a non-finite value: the global norm "
                                      "overflowed");
    return zeng_fail(e, ZINC_ERR_NUMERIC,
                     "zinc_step: optimizer step %lld: the fp16 gradient overflowed with the loss scale "
                     "already at its minimum %.17g (fp16.min_loss_scale) and the hysteresis spent, so "
                     "the run stops, as DeepSpeed's does (\"Current loss scale already at minimum\"); "
                     "%s. Weights and optimizer state are those of the last applied step (%lld "
                     "applied, %lld skipped). Lower the learning rate, use bf16, or look for the "
                     "source of the overflow in that group",
                     (long long)(e->st.step + e->st.skipped + 1), scale, where,
                     (long long)e->st.step, (long long)e->st.skipped);
}

/* Stages 1-2, after the update: every group's 16-bit copy all-gathered from the own slices. */
static zinc_status gather_params(zinc_engine_t *e)
{
    size_t d = zeng_dsize(e);
    for (int g = 0; g < e->plan.ngroups; g++) {
        const zplan_group *G = &e->plan.groups[g];
        zinc_status s = zcomm_all_gather(e->comm, (char *)e->param16 + G->flat_off * d, G->padded,
                                         (zdt)e->dtype);
        if (s != ZINC_OK) return comm_fail(e, s, "zinc_step", "all-gather of the parameters");
    }
    return ZINC_OK;
}

/* Group g's Adam arguments: *a (the engine's lr, the config's or the schedule's betas, the
 * config's eps and decay, and the bias corrections of those betas at this step) with the group's
 * own weight decay, lr, betas and eps where it has them, and the bias corrections of its own
 * betas. Under OneCycle with cycle_momentum the schedule's betas apply to every group, as
 * DeepSpeed's OneCycle writes them into every param group. Buffers and n stay a's. */
static zk_adam_args group_adam_args(const zinc_engine_t *e, int g, const zk_adam_args *a)
{
    const zgroup_hparams *hp = &e->group_hp[g];
    zk_adam_args out = *a;
    out.weight_decay = zeng_group_weight_decay(e, g);
    if (!isnan(hp->lr)) out.lr = (float)hp->lr;
    if (!isnan(hp->eps)) out.eps = (float)hp->eps;
    if (!isnan(hp->beta1) && !zsched_sets_betas(&e->cfg.sched)) {
        out.beta1 = (float)hp->beta1;
        out.beta2 = (float)hp->beta2;
        /* From the float betas, as apply_adam's: the kernel takes 1 - beta from the float beta
         * (for 0.999, 1.3e-5 relative off the double's), and 1 - beta^t from the same value
         * cancels that rounding in m / bc1 and v / bc2. */
        zadam_bias_corrections(out.beta1, out.beta2, e->cfg.optim.bias_correction,
                               zeng_adam_t(e), &out.bias_c1, &out.bias_c2);
    }
    return out;
}

static int same_adam_values(const zk_adam_args *x, const zk_adam_args *y)
{
    return x->lr == y->lr && x->weight_decay == y->weight_decay && x->beta1 == y->beta1 &&
           x->beta2 == y->beta2 && x->eps == y->eps && x->bias_c1 == y->bias_c1 &&
           x->bias_c2 == y->bias_c2;
}

zinc_status zeng_adam_groups(zinc_engine_t *e, zdev_t *d, const zk_adam_args *a, int g0, int g1,
                             int shard)
{
    const zplan_group *G = e->plan.groups;
    size_t gz = zinc_dtype_size(a->grad_dtype), pz = zinc_dtype_size(a->param_dtype);
    size_t base = shard ? G[g0].shard_off : G[g0].flat_off;
    for (int r0 = g0; r0 < g1;) {
        zk_adam_args run = group_adam_args(e, r0, a);
        int r1 = r0 + 1;
        while (r1 < g1) {
            zk_adam_args next = group_adam_args(e, r1, a);
            if (!same_adam_values(&run, &next)) break;
            r1++;
        }
        const zplan_group *last = &G[r1 - 1];
        size_t off = (shard ? G[r0].shard_off : G[r0].flat_off) - base;
        size_t end = (shard ? last->shard_off + last->slice : last->flat_off + last->padded) - base;
        run.master = a->master + off;
        run.m = a->m + off;
        run.v = a->v + off;
        run.grad = (const char *)a->grad + off * gz;
        run.param_out = a->param_out ? (char *)a->param_out + off * pz : NULL;
        run.n = end - off;
        zinc_status s = d->iface->adam_step(d, &run);
        if (s != ZINC_OK) return s;
        r0 = r1;
    }
    return ZINC_OK;
}

zinc_status zeng_adam_range(zinc_engine_t *e, zdev_t *d, const zk_adam_args *a, size_t lo,
                            size_t hi)
{
    const zplan_group *G = e->plan.groups;
    size_t gz = zinc_dtype_size(a->grad_dtype);
    int g = 0;
    while (g < e->plan.ngroups && G[g].shard_off + G[g].slice <= lo) g++;
    while (g < e->plan.ngroups && G[g].shard_off < hi) {
        /* a run of groups with the same values, clipped to [lo, hi) */
        zk_adam_args run = group_adam_args(e, g, a);
        int r = g + 1;
        while (r < e->plan.ngroups && G[r].shard_off < hi) {
            zk_adam_args next = group_adam_args(e, r, a);
            if (!same_adam_values(&run, &next)) break;
            r++;
        }
        size_t from = G[g].shard_off > lo ? G[g].shard_off : lo;
        size_t end = G[r - 1].shard_off + G[r - 1].slice < hi ? G[r - 1].shard_off + G[r - 1].slice
                                                              : hi;
        size_t off = from - lo;
        run.master = a->master + off;
        run.m = a->m + off;
        run.v = a->v + off;
        run.grad = (const char *)a->grad + off * gz;
        run.param_out = a->param_out ? (char *)a->param_out + off * zinc_dtype_size(a->param_dtype)
                                     : NULL;
        run.n = end - from;
        zinc_status s = d->iface->adam_step(d, &run);
        if (s != ZINC_OK) return s;
        g = r;
    }
    return ZINC_OK;
}

static zinc_status apply_adam(zinc_engine_t *e, float lr, float beta1, float beta2,
                              float grad_scale)
{
    const zcfg_optim *o = &e->cfg.optim;
    zk_adam_args a = {
        .grad_dtype = e->gdtype,
        .param_dtype = e->dtype,
        .lr = lr,                                 /* per group: group_adam_args */
        .beta1 = beta1,                           /* per group: group_adam_args */
        .beta2 = beta2,
        .eps = (float)o->eps,                     /* per group: group_adam_args */
        .weight_decay = (float)o->weight_decay,   /* per group: group_adam_args */
        .grad_scale = grad_scale,
        .adamw = o->type_adamw,
    };
    zadam_bias_corrections(beta1, beta2, o->bias_correction, zeng_adam_t(e), &a.bias_c1,
                           &a.bias_c2);
    size_t d = zeng_dsize(e);
    zinc_status s = ZINC_OK;
    double t = zeng_now();
    if (e->offload) {
        /* Master, m, v on the host: the same kernel there, copies each way (offload.c, which
         * times its Adam and its waits for the copies). */
        s = zoffload_adam(e, &a);
        if (s != ZINC_OK) return s;
        t = zeng_now();
        s = e->stage == 3 ? zgather_refresh_persistent(e, 1) : gather_params(e);
        e->phase_s[ZINC_PHASE_GATHER] += zeng_lap(&t);
        return s;
    }
    if (e->stage == 0 || e->stage == 3) {
        /* One kernel over everything this rank updates: the whole flat buffer (stage 0) or the
         * contiguous shard (stage 3), whose 16-bit copy is the shard itself. */
        a.master = e->master;
        a.m = e->m;
        a.v = e->v;
        a.grad = e->grad;
        /* In fp32 mode the working copy is the master itself: nothing more to write. */
        a.param_out = e->master == (float *)e->param16 ? NULL : e->param16;
        a.n = e->stage == 0 ? e->plan.flat_numel : e->plan.shard_numel;
        s = zeng_adam_groups(e, e->dev, &a, 0, e->plan.ngroups, e->stage == 3);
        e->phase_s[ZINC_PHASE_ADAM] += zeng_lap(&t);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: adam: %s", e->dev->err);
        s = e->stage == 3 ? zgather_refresh_persistent(e, 1) : ZINC_OK;
        e->phase_s[ZINC_PHASE_GATHER] += zeng_lap(&t);
        return s;
    }
    /* Stages 1-2: the 16-bit output goes straight into the rank's slice of each group in the full
     * parameter buffer, which the all-gather then completes. */
    for (int g = 0; g < e->plan.ngroups && s == ZINC_OK; g++) {
        const zplan_group *G = &e->plan.groups[g];
        zk_adam_args ga = group_adam_args(e, g, &a);
        ga.master = e->master + G->shard_off;
        ga.m = e->m + G->shard_off;
        ga.v = e->v + G->shard_off;
        ga.grad = own_grad(e, g);
        ga.param_out = (char *)e->param16 + (G->flat_off + G->slice * (size_t)e->rank) * d;
        ga.n = G->slice;
        s = e->dev->iface->adam_step(e->dev, &ga);
    }
    e->phase_s[ZINC_PHASE_ADAM] += zeng_lap(&t);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: adam: %s", e->dev->err);
    s = gather_params(e);
    e->phase_s[ZINC_PHASE_GATHER] += zeng_lap(&t);
    return s;
}

/* The window's gradient sums set to zero: in host memory with offload (once its downloads are
 * done), else on the device. keep_lent: a lent buffer (zinc_grad_buffer_external) is zeroed
 * and kept (zinc_grads_clear, inside the window); without it the step gives it back instead,
 * and the next window's attach brings zeroed memory. fn names the caller in an error. */
static zinc_status zero_grads_of(zinc_engine_t *e, int keep_lent, const char *fn)
{
    /* A frozen engine keeps no gradient (zinc_engine_set_train_state restarts its window too). */
    if (e->frozen) return ZINC_OK;
    size_t n = e->stage < 2 ? e->plan.flat_numel : e->plan.shard_numel;
    if (e->grad_host) {
        zinc_status s = zoffload_grad_settle(e);
        if (s != ZINC_OK) return s;
        memset(e->h_grad, 0, n * zeng_gsize(e));
        for (int g = 0; g < e->plan.ngroups; g++) e->gstate[g].acc_on_host = 0;
        return ZINC_OK;
    }
    if (e->grad_external && (!keep_lent || !e->grad)) {
        e->grad = NULL;      /* none attached: zero already (zinc_param_grad_get reads zeros) */
        return ZINC_OK;
    }
    zinc_status s = e->dev->iface->memset0(e->dev, e->grad, n * zeng_gsize(e));
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: clearing gradients: %s", fn, e->dev->err);
    return ZINC_OK;
}

static zinc_status zero_grads(zinc_engine_t *e) { return zero_grads_of(e, 0, "zinc_step"); }

/* The window's gradients so far, all of them: the sums, and what was added into a bucket and
 * not handed over (a backward that raised before its group's zinc_grads_ready) — that bucket
 * zeroed and free, as after a hand-over, so the group hands over only what is added after this.
 * A lent buffer stays attached. */
static zinc_status drop_window_grads(zinc_engine_t *e, const char *fn)
{
    e->grads_reduced = 0;
    for (int i = 0; i < e->nbuckets; i++) {
        zinc_status s = e->bucket_owner[i] < 0 ? ZINC_OK : free_bucket(e, i, fn);
        if (s != ZINC_OK) return s;
    }
    return zero_grads_of(e, 1, fn);
}

zinc_status zinc_grads_clear(zinc_engine_t *e)
{
    zinc_status s = zeng_check_ready(e, "zinc_grads_clear");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grads_clear");
    return s == ZINC_OK ? drop_window_grads(e, "zinc_grads_clear") : s;
}

zinc_status zeng_restart_window(zinc_engine_t *e, const char *fn)
{
    if (!e->finalized) return ZINC_OK;     /* no window yet (nor its buckets and flags) */
    e->grads_reduced = 0;
    for (int g = 0; g < e->plan.ngroups; g++) e->gstate[g].ready = 0;
    return drop_window_grads(e, fn);
}

/* ---- the end of a micro-step -------------------------------------------------------------- */

int zeng_last_micro(const zinc_engine_t *e)
{
    if (!e->cfg.managed_accumulation) return 0;
    if (e->boundary_override >= 0) return e->boundary_override;
    return e->st.micro >= e->cfg.grad_accum - 1;
}

zinc_status zinc_set_accumulation_boundary(zinc_engine_t *e, int is_boundary)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_set_accumulation_boundary: engine is NULL");
    if (is_boundary < -1 || is_boundary > 1)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_set_accumulation_boundary: %d is not 1 (boundary), 0 (not) or -1 "
                         "(zinc's count of gradient_accumulation_steps)", is_boundary);
    if (!e->cfg.managed_accumulation)
        return zeng_fail(e, ZINC_ERR_USAGE,
                         "zinc_set_accumulation_boundary: the config sets "
                         "managed_gradient_accumulation false, where every zinc_step is the "
                         "boundary (DeepSpeed refuses set_gradient_accumulation_boundary there too)");
    e->boundary_override = is_boundary;
    return ZINC_OK;
}

zinc_status zinc_set_batch_size(zinc_engine_t *e, int64_t micro_batch, int64_t grad_accum)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_set_batch_size: engine is NULL");
    /* The loss of a micro-step already run was scaled by 1/(the old steps), and zinc's count of
     * the window is against the old value: a change takes effect between windows only. */
    int handed = 0;
    for (int g = 0; e->gstate && g < e->plan.ngroups; g++) handed |= e->gstate[g].ready;
    if (e->st.micro > 0 || handed)
        return zeng_fail(e, ZINC_ERR_USAGE,
                         "zinc_set_batch_size: inside an accumulation window (%lld micro-step(s) "
                         "ended since the last boundary%s; their loss was scaled by 1/%lld): "
                         "change the batch sizes after the step that ends a window, or before "
                         "the first micro-step", (long long)e->st.micro,
                         handed ? ", and this one's gradients handed over" : "",
                         (long long)e->cfg.grad_accum);
    zcfg c = e->cfg;
    zinc_status s = zcfg_set_batch(&c, micro_batch, grad_accum, e->world_size);
    if (s == ZINC_ERR_INVALID_ARG)
        return zeng_fail(e, s, "zinc_set_batch_size: train_micro_batch_size_per_gpu %lld and "
                         "gradient_accumulation_steps %lld must both be at least 1, and their "
                         "product with the world size %d fit in 64 bits (below 2^63 - 1, the "
                         "range's end, which the config refuses too)", (long long)micro_batch,
                         (long long)grad_accum, e->world_size);
    char *json = s == ZINC_OK ? zcfg_to_json(&c) : NULL;
    if (!json) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_set_batch_size: out of memory");
    e->cfg = c;
    free(e->config_json);
    e->config_json = json;
    return ZINC_OK;
}

/* What every micro-step's end checks and resets, boundary or not: each group handed over once,
 * nothing added into a bucket after that (it would be carried, unreduced, into the next
 * micro-step: zinc_grads_more hands it over), and none still gathered. Not collective: a failure
 * aborts the world (the other ranks may already wait in the next collective). */
static zinc_status end_micro_step(zinc_engine_t *e, const char *fn)
{
    for (int g = 0; g < e->plan.ngroups; g++)    /* the cause first, whatever came after it */
        if (e->gstate[g].ready == ZREADY_FAILED) return handover_failed(e, g, fn);
    for (int g = 0; g < e->plan.ngroups; g++) {
        if (!e->gstate[g].ready)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                             "%s: group '%s' was not handed over with zinc_grads_ready in "
                             "this micro-step (every group needs it, once, before %s)",
                             fn, e->plan.groups[g].name, fn);
        if (e->gstate[g].bucket >= 0)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                             "%s: group '%s' holds gradient added into its bucket after its "
                             "zinc_grads_ready (zinc_param_grad or zinc_grad_bucket again): hand "
                             "it over with zinc_grads_more before %s", fn,
                             e->plan.groups[g].name, fn);
        if (e->gstate[g].held)
            return zeng_fail_sequence(e, ZINC_ERR_USAGE, "%s: group '%s' is still gathered; "
                             "zinc_release it first", fn, e->plan.groups[g].name);
    }
    return ZINC_OK;
}

static void next_micro_step(zinc_engine_t *e)
{
    for (int g = 0; g < e->plan.ngroups; g++) e->gstate[g].ready = 0;
    zgather_step_end(e);
}

/* A micro-step ended and the window goes on. Its micro-steps past the count (a caller-owned
 * boundary) stop counting at the checkpoints' counter limit rather than overflow; only "more
 * than gradient_accumulation_steps - 1" matters once the count is back in charge. */
static void window_goes_on(zinc_engine_t *e)
{
    if (e->st.micro < ZENG_COUNTER_MAX) e->st.micro++;
}

/* zinc_micro_step of a frozen engine (zinc_engine_frozen): it has no gradients or window, so
 * the micro-step's end is only its gather trace's, from which later micro-steps prefetch. */
static zinc_status frozen_micro_step(zinc_engine_t *e)
{
    for (int g = 0; g < e->plan.ngroups; g++)
        if (e->gstate[g].held && !e->gstate[g].persistent)
            return zeng_fail(e, ZINC_ERR_USAGE, "zinc_micro_step: group '%s' is gathered; "
                             "zinc_release it before the micro-step ends",
                             e->plan.groups[g].name);
    zgather_step_end(e);
    return ZINC_OK;
}

zinc_status zinc_micro_step(zinc_engine_t *e)
{
    zinc_status s = zeng_check_ready(e, "zinc_micro_step");
    if (s != ZINC_OK) return s;
    if (e->frozen) return frozen_micro_step(e);
    if (zeng_last_micro(e))
        return zeng_fail_sequence(e, ZINC_ERR_USAGE,
                         "zinc_micro_step: this micro-step ends the accumulation window (%s); end "
                         "it with zinc_step",
                         e->boundary_override == 1 ? "zinc_set_accumulation_boundary(1)"
                                                   : "gradient_accumulation_steps reached");
    s = end_micro_step(e, "zinc_micro_step");
    if (s != ZINC_OK) return s;
    next_micro_step(e);
    window_goes_on(e);
    return ZINC_OK;
}

zinc_status zinc_grads_reduce(zinc_engine_t *e)
{
    const char *fn = "zinc_grads_reduce";
    zinc_status s = zeng_check_ready(e, fn);
    if (s == ZINC_OK) s = zeng_check_trains(e, fn);
    if (s != ZINC_OK) return s;
    if (e->stage != 0)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: stage 0 only (ZeRO stage %d reduces its "
                         "gradients in zinc_grads_ready or zinc_step)", fn, e->stage);
    if (e->cfg.managed_accumulation && !zeng_last_micro(e))
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: this micro-step does not end the accumulation "
                         "window: the window's gradients are reduced once, at its end", fn);
    if (e->grads_reduced) return ZINC_OK;
    s = end_micro_step(e, fn);    /* every group handed over: the sums are complete */
    if (s != ZINC_OK) return s;
    double t = zeng_now();
    s = reduce_grads(e);
    e->phase_s[ZINC_PHASE_REDUCE] += zeng_lap(&t);
    if (s == ZINC_OK) e->grads_reduced = 1;
    return s;
}

zinc_status zinc_step(zinc_engine_t *e, zinc_step_info_t *info)
{
    zinc_status s = zeng_check_ready(e, "zinc_step");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_step");
    if (s != ZINC_OK) return s;
    /* The optimizer state is needed at the window's end only: a micro-step's step() while
     * zinc_states_offload keeps it away is counted, as DeepSpeed's is. */
    int boundary = !e->cfg.managed_accumulation || zeng_last_micro(e);
    if (boundary && (s = zeng_check_home(e, "zinc_step")) != ZINC_OK) return s;
    if (e->partial_load[0]) /* every rank knows it (agreed at the load): no collective waits */
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_step: the failed load of %s had begun to "
                         "apply it: the weights and Adam state are partly the checkpoint's; load "
                         "a checkpoint that succeeds, or create the engine again", e->partial_load);
    zinc_step_info_t local_info;
    if (!info) info = &local_info;
    memset(info, 0, sizeof *info);
    s = end_micro_step(e, "zinc_step");
    if (s != ZINC_OK) return s;
    /* A boundary adds one to step or skipped (and to the scaler's cur_iter, their sum): refuse
     * the one that would take step + skipped past INT64_MAX instead of overflowing. Counters are
     * the same on every rank, so every rank refuses the same call, before any collective;
     * step, skipped >= 0 always (a loaded state is range-checked). */
    if (boundary && e->st.step > INT64_MAX - 1 - e->st.skipped)
        return zeng_fail(e, ZINC_ERR_UNSUPPORTED,
                         "zinc_step: rank %d: the step counters are at their limit (step %lld, "
                         "skipped %lld: step + skipped reaches 2^63 - 1); zinc counts no further",
                         e->rank, (long long)e->st.step, (long long)e->st.skipped);
    next_micro_step(e);

    double scale = e->st.scaler.cur_scale;
    info->loss_scale = info->next_loss_scale = scale;
    info->step = e->st.step;
    info->skipped_total = e->st.skipped;
    info->lr = zinc_engine_lr(e);
    if (!boundary) {
        window_goes_on(e);
        return ZINC_OK;
    }
    e->st.micro = 0;
    info->boundary = 1;

    double t = zeng_now();
    s = e->grads_reduced ? ZINC_OK : reduce_grads(e);
    e->grads_reduced = 0;
    e->phase_s[ZINC_PHASE_REDUCE] += zeng_lap(&t);
    double sumsq = 0.0;
    int overflow = 0;
    if (s == ZINC_OK) s = global_stats(e, &sumsq, &overflow);
    e->phase_s[ZINC_PHASE_STATS] += zeng_lap(&t);
    if (s != ZINC_OK) return s;

    double norm = sqrt(sumsq) / scale;
    info->grad_norm = overflow ? (isnan(sumsq) ? NAN : INFINITY) : norm;
    if (zscaler_update(&e->st.scaler, overflow) == ZSCALER_AT_MIN)
        return min_scale_error(e, info, scale);
    info->next_loss_scale = e->st.scaler.cur_scale;
    if (overflow) {
        e->st.skipped++;
        info->skipped = 1;
        info->grad_norm_clipped = info->grad_norm;
        info->skipped_total = e->st.skipped;
        if (e->rank == 0)
            /* numbered as callers count zinc_step calls (applied + skipped), as zinc train does */
            zlog(ZLOG_INFO, "engine", 0, "step %lld: gradient overflow, step skipped (%lld applied, "
                 "%lld skipped); loss scale %g -> %g", (long long)(e->st.step + e->st.skipped),
                 (long long)e->st.step, (long long)e->st.skipped, scale, e->st.scaler.cur_scale);
        s = zero_grads(e);
        return s == ZINC_OK ? zeng_background_poll(e) : s;
    }
    /* DeepSpeed 0.19.8 updates the loss scale before it unscales: on a step where the scale
     * grows, the clip test and the gradient are divided by the new scale, not the one backward
     * used (stage_1_and_2.py step -> unscale_and_clip_grads, stage3.py, FP16_Optimizer alike; a
     * known upstream quirk). zinc does the same, so that fp16 runs give DeepSpeed's weights. The
     * reported norm is the old scale's at stages 1-2 and the new one's at stages 0 and 3, as
     * each DeepSpeed optimizer reports it. Only a growing dynamic scale differs from `scale`. */
    double norm_applied = sqrt(sumsq) / info->next_loss_scale;
    if (e->stage == 0 || e->stage == 3) info->grad_norm = norm_applied;
    double coef = zclip_coef(norm_applied, e->cfg.gradient_clipping);
    info->grad_norm_clipped = norm_applied / coef;
    /* OneCycle with cycle_momentum drives the betas, as DeepSpeed does; otherwise the config's. */
    double beta1, beta2;
    zinc_engine_betas(e, &beta1, &beta2);
    if (zsched_sets_betas(&e->cfg.sched) && !(beta1 < 1.0)) {
        /* Past the cycle DeepSpeed's formula multiplies the momentum by 1 + decay_mom_rate x
         * interval, without bound; DeepSpeed trains on with beta1 >= 1 (a bias correction of 0
         * or below: steps reversed or infinite). Refused by name, the step not applied. */
        zinc_status zs = zero_grads(e);
        if (zs != ZINC_OK) return zs;
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_step: step %lld: the scheduler OneCycle (cycle_momentum) gives "
                         "beta1 = %g: past the cycle its momentum grows by "
                         "scheduler.params.decay_mom_rate (%g) every decay_step_size (%lld) "
                         "steps, and Adam needs beta1 < 1; lower decay_mom_rate or stop sooner",
                         (long long)e->st.step + 1, beta1, e->cfg.sched.decay_mom_rate,
                         (long long)e->cfg.sched.decay_step_size);
    }
    s = apply_adam(e, (float)info->lr, (float)beta1, (float)beta2,
                   (float)(1.0 / (info->next_loss_scale * coef)));
    if (s != ZINC_OK) return s;
    e->st.step++;
    info->applied = 1;
    info->step = e->st.step;
    s = zero_grads(e);
    /* Last, after the step's collectives, so that no rank leaves while the others still wait in
     * one: the error of a background checkpoint save that finished meanwhile. */
    return s == ZINC_OK ? zeng_background_poll(e) : s;
}
