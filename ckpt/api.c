/*
 * api.c — the public checkpoint calls (zinc_ckpt_save / _wait / _load, zinc_load_safetensors):
 * the bridge between an engine's shard (seen through engine/view.h) and the ckpt layers.
 *
 * Save: this rank's pieces (zeng_shard_pieces) are copied from the device into one host staging
 * block (master, m, v and optionally the 16-bit weights), then written by writer.c — at once, or
 * on a background thread (async.c) while training goes on. Load: the same pieces, or at stage 0
 * every parameter whole (every rank holds the full master there), are filled by the resharding
 * reader into host memory and uploaded, then the working copy is recomputed
 * (zeng_refresh_params).
 *
 * Every rank must take the same path through the collective calls, so each decision that could
 * differ between ranks (a file one rank could not read, a failed background save) is first
 * agreed on with a tiny all-reduce or a broadcast from rank 0. Those collectives go through the
 * comm iface directly: they are not part of the ZeRO traffic the byte counters measure.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "engine/view.h"
#include "base/log.h"

/* ---- the async save of each engine: at most one in flight, in the engine's background slot -- */

static zinc_status engine_poll(zinc_engine_t *e);
static void engine_release(zinc_engine_t *e);

static zck_async *reg_take(zinc_engine_t *e, int only_if_done)
{
    zeng_background *bg = zeng_background_slot(e);
    zck_async *a = bg->work;
    if (!a || (only_if_done && !zck_async_done(a))) return NULL;
    bg->work = NULL;
    return a;
}

static int reg_put(zinc_engine_t *e, zck_async *a)
{
    zeng_background *bg = zeng_background_slot(e);
    if (bg->work) return 0;
    *bg = (zeng_background){.work = a, .poll = engine_poll, .release = engine_release};
    return 1;
}

static int rank_of(const zeng_view *ev)
{
    return ev->comm ? ev->comm->rank : ev->rank;
}

/* 1 when any rank passes bad != 0 (sum over ranks); a comm failure counts as bad. */
/* any_rank, telling a failed exchange apart: *lost is the all-reduce's own failure (a rank that
 * ended, or one still in another collective), 0 when it went through. */
static int any_rank_or_lost(const zeng_view *ev, int bad, zinc_status *lost)
{
    *lost = ZINC_OK;
    if (!ev->comm || ev->comm->size <= 1) return bad;
    double f = bad ? 1.0 : 0.0;
    if ((*lost = zcomm_host_all_reduce_f64(ev->comm, &f, 1)) != ZINC_OK) return 1;
    return f > 0.5;
}

static int any_rank(const zeng_view *ev, int bad)
{
    zinc_status lost;
    return any_rank_or_lost(ev, bad, &lost);
}

/* The index of the manifest's tensor named `name`, or -1. */
static int tensor_index(const zck_manifest *m, const char *name)
{
    for (int k = 0; k < m->ntensors; k++)
        if (!strcmp(m->tensors[k].name, name)) return k;
    return -1;
}

/* 1 when two shapes are the same (dims and extents). */
static int same_shape(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b)
{
    if (ndim_a != ndim_b) return 0;
    for (int d = 0; d < ndim_a; d++)
        if (a[d] != b[d]) return 0;
    return 1;
}

/* "[256, 16]" into buf: a shape as an error message shows it. */
static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* The lowest failing rank and its message, on every rank (collective): a warning on rank 0 can
 * then name the file and chunk that another rank saw fail. Returns that rank, or -1 when none
 * failed or the comm could not tell. */
static int first_failure(const zeng_view *ev, int failed, const char *mine, char *out, size_t n)
{
    int root = -1;
    if (zck_first_failure(ev->comm, failed, mine, &root, out, n) != ZINC_OK) return -1;
    return root;
}

/* checkpoint.tag_validation: copies rank 0's tag into root (256 bytes) and returns 1 when some
 * rank's tag differs from it. Collective. */
static int tags_differ(const zeng_view *ev, const char *tag, char root[256])
{
    memset(root, 0, 256);
    snprintf(root, 256, "%s", tag);
    if (!ev->comm || ev->comm->size <= 1) return 0;
    if (zcomm_host_broadcast(ev->comm, root, 256, 0) != ZINC_OK) return any_rank(ev, 1);
    root[255] = 0;
    return any_rank(ev, strcmp(root, tag) != 0);
}

/* The engine's poll at the end of zinc_step: a finished save's error becomes the step's. */
static zinc_status engine_poll(zinc_engine_t *e)
{
    zck_async *a = reg_take(e, 1);
    if (!a) return ZINC_OK;
    char err[ZCK_ERR];
    zinc_status s = zck_async_wait(a, err);
    if (s != ZINC_OK) return zeng_fail(e, s, "background checkpoint save failed: %s", err);
    return ZINC_OK;
}

/* The engine's release in zinc_engine_destroy: waits for the save, logging its error. */
static void engine_release(zinc_engine_t *e)
{
    zck_async *a = reg_take(e, 0);
    char err[ZCK_ERR];
    if (a && zck_async_wait(a, err) != ZINC_OK) {
        zeng_view ev;
        zeng_view_get(e, &ev);
        zlog(ZLOG_ERROR, "ckpt", rank_of(&ev), "background checkpoint save failed: %s", err);
    }
}

zinc_status zinc_ckpt_wait(zinc_engine_t *e)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_ckpt_wait: engine is NULL");
    zck_async *a = reg_take(e, 0);
    char err[ZCK_ERR];
    zinc_status s = zck_async_wait(a, err);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_ckpt_wait: the background save failed: %s", err);
    return ZINC_OK;
}

/* ---- save --------------------------------------------------------------------------------------- */

static void tensor_table(const zeng_view *ev, zck_tensor *t)
{
    for (int p = 0; p < ev->plan->nparams; p++) {
        const zplan_param *P = &ev->plan->params[p];
        memset(&t[p], 0, sizeof t[p]);
        snprintf(t[p].name, sizeof t[p].name, "%s", P->name);
        t[p].ndim = P->ndim;
        for (int d = 0; d < P->ndim; d++) t[p].shape[d] = P->shape[d];
        t[p].numel = P->numel;
        t[p].dtype = ev->dtype;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zinc_status zinc_ckpt_save(zinc_engine_t *e, const char *dir, const char *tag,
                           const zinc_ckpt_save_options_t *opt)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_ckpt_save: engine is NULL");
    zeng_view view_, *ev = &view_;
    zeng_view_get(e, ev);
    if (!ev->finalized) return zeng_fail(e, ZINC_ERR_USAGE, "zinc_ckpt_save: call zinc_finalize first");
    zinc_status trains = zeng_check_trains(e, "zinc_ckpt_save");    /* no state to save or load */
    if (trains == ZINC_OK) trains = zeng_check_home(e, "zinc_ckpt_save");
    if (trains != ZINC_OK) return trains;
    if (!dir || !tag) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_save: dir and tag are required");
    /* (a save without the blob the caller sized would lose its resume state in silence) */
    if (opt && !opt->client_blob && opt->client_blob_bytes)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_save: client_blob is NULL with "
                         "client_blob_bytes %zu", opt->client_blob_bytes);
    /* (any other value was taken as 1: a typo or a field the caller never set chose a mode) */
    if (opt && (opt->async < -1 || opt->async > 1))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_save: async is %d; expected -1 (the "
                         "config's zinc.ckpt_async), 0 (blocking) or 1 (background)", opt->async);
    if (ev->partial_load[0]) /* agreed on every rank at the load */
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_ckpt_save: the failed load of %s had begun to "
                         "apply it: saving would keep a mix of two states; load a checkpoint "
                         "that succeeds, or create the engine again", ev->partial_load);
    if (!*tag || strlen(tag) > ZCK_TAG_MAX - 16) /* the writer's bound (check_tag), said once */
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_save: the tag must be 1..%d bytes",
                         ZCK_TAG_MAX - 16);
    char err[ZCK_ERR] = "";
    double t0 = now_s();

    /* At most one save in flight: finish the previous one, and stop everyone if it failed
     * anywhere (its error is reported now, as promised by the async contract). */
    zck_async *prev = reg_take(e, 0);
    zinc_status ps = zck_async_wait(prev, err), lost;
    if (any_rank_or_lost(ev, ps != ZINC_OK, &lost)) {
        if (ps != ZINC_OK) return zeng_fail(e, ps, "zinc_ckpt_save: the previous background save failed: %s", err);
        /* the save's first exchange itself failed: it said "the previous background save
         * failed on another rank" where there was none (a rank gone, or in another call) */
        if (lost != ZINC_OK)
            return zeng_fail(e, lost, "zinc_ckpt_save: not every rank is in this save (its first "
                             "exchange failed: %s); nothing was saved", ev->comm->err);
        return zeng_fail(e, ZINC_ERR_ABORTED, "zinc_ckpt_save: the previous background save failed on "
                                              "another rank (see its message); nothing was saved");
    }

    /* checkpoint.tag_validation (DeepSpeed's): every rank must save under the same tag. Fail
     * refuses; Warn (the default) and Ignore save under rank 0's tag, Warn saying so. */
    char root_tag[256];
    if (tags_differ(ev, tag, root_tag)) {
        if (ev->cfg->ckpt.tag_validation == 2) {
            /* (true on every rank: rank 0, and a rank of rank 0's tag, differ from another) */
            char other[300] = "another rank's differs";
            if (strcmp(tag, root_tag) != 0)
                snprintf(other, sizeof other, "rank 0 has '%s'", root_tag);
            return zeng_fail(e, ZINC_ERR_MISMATCH,
                             "zinc_ckpt_save: the ranks were given different tags (this is rank %d "
                             "with '%s', %s); checkpoint.tag_validation is \"Fail\", nothing was "
                             "saved", rank_of(ev), tag, other);
        }
        if (ev->cfg->ckpt.tag_validation == 1 && strcmp(tag, root_tag) != 0)
            zlog(ZLOG_WARN, "ckpt", rank_of(ev),
                 "zinc_ckpt_save: this rank's tag '%s' differs from rank 0's '%s'; saving under "
                 "'%s' (checkpoint.tag_validation \"Warn\")", tag, root_tag, root_tag);
        tag = root_tag;
    }
    int async = opt && opt->async >= 0 ? opt->async : ev->cfg->zinc.ckpt_async;
    /* The 16-bit weights stream: asked for, or zero_optimization.gather_16bit_weights_on_model_save. */
    int w16 = ((opt && opt->save_weights16) || ev->cfg->zero.gather_16bit_weights_on_model_save) &&
              ev->dtype != ZINC_DTYPE_FP32;
    size_t es16 = zinc_dtype_size(ev->dtype);
    zshard_piece *sp = NULL;
    int np = 0;
    zinc_status s = zeng_shard_pieces(e, &sp, &np);
    zck_tensor *tens = calloc((size_t)ev->plan->nparams + 1, sizeof *tens);
    zck_piece *pc = calloc((size_t)np + 1, sizeof *pc);
    char *state = zck_state_to_json(ev->st, zsched_lr(&ev->cfg->sched, ev->cfg->optim.lr,
                                                       zeng_sched_at(ev->st)));
    uint64_t elems = 0;
    for (int i = 0; i < np; i++) elems += sp[i].hi - sp[i].lo;
    size_t stage_bytes = (size_t)elems * (12 + (w16 ? es16 : 0));
    uint8_t *staging = malloc(stage_bytes ? stage_bytes : 1);
    if (s == ZINC_OK && (!tens || !pc || !state || !staging))
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM,
                     "zinc_ckpt_save: out of host memory for %zu bytes of staging", stage_bytes);
    else if (s != ZINC_OK)
        snprintf(err, sizeof err, "%s", ev->err);
    if (s == ZINC_OK && ev->dev->iface->sync && (s = ev->dev->iface->sync(ev->dev)) != ZINC_OK)
        zerr_fmt(err, ZCK_ERR, s, "zinc_ckpt_save: waiting for the device: %s", ev->dev->err);
    /* Snapshot: streams back to back, pieces in order within each. */
    if (s == ZINC_OK) {
        tensor_table(ev, tens);
        uint8_t *sm = staging, *smm = sm + elems * 4, *sv = smm + elems * 4, *s16 = sv + elems * 4;
        uint64_t at = 0;
        const zdev_t *failed = ev->dev;   /* the device whose message says why a copy failed */
        for (int i = 0; i < np && s == ZINC_OK; i++) {
            size_t n = sp[i].hi - sp[i].lo;
            pc[i].tensor = sp[i].param;
            pc[i].lo = sp[i].lo;
            pc[i].hi = sp[i].hi;
            pc[i].data[ZCK_MASTER] = sm + at * 4;
            pc[i].data[ZCK_ADAM_M] = smm + at * 4;
            pc[i].data[ZCK_ADAM_V] = sv + at * 4;
            /* The state is on state_dev: the device, or host memory with offload_optimizer. */
            zdev_t *sd = ev->state_dev;
            /* master, m and v a slice at a time: NVMe offload reads a chunk's three states
             * together (and checks them), so the slices of one piece stay within the chunks it
             * holds in memory */
            for (size_t k = 0, step = (size_t)1 << 20; k < n && s == ZINC_OK; k += step) {
                size_t b = (n - k < step ? n - k : step) * 4;
                s = sd->iface->download(sd, sm + (at + k) * 4, sp[i].master + k, b);
                if (s == ZINC_OK) s = sd->iface->download(sd, smm + (at + k) * 4, sp[i].m + k, b);
                if (s == ZINC_OK) s = sd->iface->download(sd, sv + (at + k) * 4, sp[i].v + k, b);
            }
            if (s != ZINC_OK) failed = sd;
            if (s == ZINC_OK && w16) {
                const zplan_param *P = &ev->plan->params[sp[i].param];
                size_t pos = ev->stage == 3 ? (size_t)(sp[i].master - ev->master)
                                           : ev->plan->groups[P->group].flat_off + P->offset + sp[i].lo;
                pc[i].data[ZCK_WEIGHTS16] = s16 + at * es16;
                zdev_t *pd = ev->param16_dev; /* the host with offload_param */
                s = pd->iface->download(pd, s16 + at * es16, (char *)ev->param16 + pos * es16,
                                        n * es16);
                if (s != ZINC_OK) failed = pd;
            }
            at += n;
        }
        if (s != ZINC_OK)
            zerr_fmt(err, ZCK_ERR, s, "zinc_ckpt_save: copying the shard to host memory failed: %s",
                     failed->err);
    }
    /* Everyone agrees before the collective part, so a rank that failed here stops nobody. */
    if (any_rank(ev, s != ZINC_OK)) {
        if (s == ZINC_OK) {
            s = ZINC_ERR_ABORTED;
            snprintf(err, sizeof err, "zinc_ckpt_save: another rank could not stage its shard; "
                                      "nothing was saved");
        }
        goto done;
    }
    zck_save_desc d;
    memset(&d, 0, sizeof d);
    d.dir = dir;
    d.tag = tag;
    d.rank = rank_of(ev);
    d.world_size = ev->world_size;
    d.stage = ev->stage;
    d.step = ev->st->step;
    d.config_hash = ev->cfg->hash_hex;
    d.settings_hash = ev->cfg->settings_hash_hex;
    d.engine_state = state;
    if (opt && opt->client_blob && opt->client_blob_bytes) {
        d.blob = opt->client_blob;
        d.blob_bytes = opt->client_blob_bytes;
    }
    d.ntensors = ev->plan->nparams;
    d.tensors = tens;
    d.npieces = np;
    d.pieces = pc;
    d.streams = 0x7u | (w16 ? 1u << ZCK_WEIGHTS16 : 0);
    d.dtype = ev->dtype;
    d.level = ev->cfg->zinc.ckpt_compression_level;
    d.chunk_bytes = ev->cfg->zinc.ckpt_chunk_bytes;
    d.threads = 2;
    d.shuffle = 1;
    d.timeout_s = ev->cfg->zinc.comm_timeout_s;
    d.keep_last = ev->cfg->zinc.ckpt_keep_last;
    d.leave_latest = opt && opt->leave_latest;
    if (async) {
        zck_async *a = NULL;
        s = zck_async_start(ev->comm, &d, staging, &a, err);
        staging = NULL;   /* owned by the async save now */
        if (s == ZINC_OK && !reg_put(e, a)) {
            s = zck_async_wait(a, err);   /* no slot: finish it now rather than lose it */
        }
        if (s == ZINC_OK && d.rank == 0)
            zlog(ZLOG_INFO, "ckpt", 0, "saving %s/%s in the background (%" PRId64 " updates applied, %.1f MB "
                 "staged per rank in %.2f s)", dir, tag, ev->st->step, (double)stage_bytes / 1e6,
                 now_s() - t0);
    } else {
        s = zck_save(ev->comm, &d, err);
        if (s == ZINC_OK && d.rank == 0)
            zlog(ZLOG_INFO, "ckpt", 0, "saved %s/%s (%" PRId64 " updates applied, %.1f MB per rank in %.2f s)",
                 dir, tag, ev->st->step, (double)stage_bytes / 1e6, now_s() - t0);
    }
done:
    free(sp);
    free(tens);
    free(pc);
    free(state);
    free(staging);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s", err);
    return ZINC_OK;
}

/* ---- load --------------------------------------------------------------------------------------- */

typedef struct {
    int32_t status;
    char tagdir[4096];
    char tag[ZCK_TAG_MAX];
    char msg[ZCK_ERR];
} zpick;

/* The load targets of this rank: pointers (in the view's state_dev memory) and sizes for
 * master/m/v. */
typedef struct {
    int param;
    uint64_t lo, hi;
    float *master, *m, *v;
} ztgt;

static zinc_status load_targets(zinc_engine_t *e, const zeng_view *ev, ztgt **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (ev->stage != 0) {
        zshard_piece *sp;
        int np;
        zinc_status s = zeng_shard_pieces(e, &sp, &np);
        if (s != ZINC_OK) return s;
        ztgt *t = calloc((size_t)np + 1, sizeof *t);
        if (!t) { free(sp); return ZINC_ERR_NOMEM; }
        for (int i = 0; i < np; i++) t[i] = (ztgt){sp[i].param, sp[i].lo, sp[i].hi, sp[i].master, sp[i].m, sp[i].v};
        free(sp);
        *out = t;
        *n = np;
        return ZINC_OK;
    }
    /* Stage 0 keeps full master/m/v on every rank: each rank loads all of them. */
    ztgt *t = calloc((size_t)ev->plan->nparams + 1, sizeof *t);
    if (!t) return ZINC_ERR_NOMEM;
    for (int p = 0; p < ev->plan->nparams; p++) {
        const zplan_param *P = &ev->plan->params[p];
        size_t f = ev->plan->groups[P->group].flat_off + P->offset;
        t[p] = (ztgt){p, 0, P->numel, ev->master + f, ev->m + f, ev->v + f};
    }
    *out = t;
    *n = ev->plan->nparams;
    return ZINC_OK;
}

/* Loads this rank's part of tagdir into the engine; not collective. *touched: it had begun to write the engine's state (a
 * failure after that leaves a mix of two states; everything that can fail without reading the
 * tensors — names, shapes, the counters, the client blob — is checked before). */
static zinc_status load_local(zinc_engine_t *e, const zeng_view *ev, const char *tagdir,
                              zinc_ckpt_load_options_t *opt, zengine_state *st_out, int *have_state,
                              int *touched, char *err)
{
    zck_reader *r = NULL;
    ztgt *t = NULL;
    int nt = 0;
    zck_target *zt = NULL;
    float *host = NULL;
    int *map = NULL;
    zinc_status s = zck_open(tagdir, &r, err);
    if (s != ZINC_OK) return s;
    const zck_manifest *m = zck_reader_manifest(r);
    int wonly = opt && opt->weights_only;
    int missing_ok = wonly && opt->missing_ok, missing = 0;
    map = malloc(((size_t)ev->plan->nparams + 1) * sizeof *map);
    if (!map) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory"); goto done; }
    /* match by name; shapes must agree */
    for (int p = 0; p < ev->plan->nparams; p++) {
        const zplan_param *P = &ev->plan->params[p];
        map[p] = tensor_index(m, P->name);
        if (map[p] < 0 && missing_ok) {      /* keeps its value: not a target below */
            missing++;
            continue;
        }
        if (map[p] < 0) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_MISMATCH,
                         "%s has no tensor '%s' (the model registers it; was the checkpoint saved "
                         "from another model?)", tagdir, P->name);
            goto done;
        }
        const zck_tensor *T = &m->tensors[map[p]];
        if (!same_shape(T->ndim, T->shape, P->ndim, P->shape)) {
            char a[160], b[160];
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_MISMATCH,
                         "%s: tensor '%s' is %s in the checkpoint but %s in the model (was it "
                         "saved from another model size?)", tagdir, P->name,
                         shape_text(T->ndim, T->shape, a, sizeof a),
                         shape_text(P->ndim, P->shape, b, sizeof b));
            goto done;
        }
    }
    if (!wonly && (m->streams & ZCK_OPTIM_MASK) != ZCK_OPTIM_MASK) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_UNSUPPORTED,
                     "%s holds no Adam state (adam_m/adam_v streams); load it with weights_only "
                     "to start with fresh optimizer state", tagdir);
        goto done;
    }
    if (!wonly) {
        zscaler keep = st_out->scaler;
        s = zck_state_parse(m->engine_state, st_out, err);
        if (s != ZINC_OK) goto done;
        *have_state = 1;
        /* DeepSpeed 0.19.8's stage-0 fp16 optimizers restore the scale, its counters, factor
         * and window, but not the minimum (nor hysteresis, which stage 0 does not have): that
         * stays the new config's. At stages 1-3 its whole scaler comes back. */
        if (ev->stage == 0) {
            st_out->scaler.min_scale = keep.min_scale;
            st_out->scaler.delayed_shift = keep.delayed_shift;
            st_out->scaler.cur_hysteresis = keep.cur_hysteresis;
            st_out->scaler.consecutive_hysteresis = keep.consecutive_hysteresis;
        }
        /* A loss scale belongs to a precision: fp16's dynamic scale means nothing to bf16/fp32. */
        if (m->dtype != ev->dtype) {
            st_out->scaler = keep;
            if (rank_of(ev) == 0)
                zlog(ZLOG_INFO, "ckpt", 0, "%s was saved in %s, the engine runs %s: its loss "
                     "scaler state is not restored", tagdir, zinc_dtype_name(m->dtype),
                     zinc_dtype_name(ev->dtype));
        }
    }
    s = load_targets(e, ev, &t, &nt);
    if (s != ZINC_OK) { zerr_fmt(err, ZCK_ERR, s, "cannot list the shard: %s", ev->err); goto done; }
    if (missing) {              /* drop the missing parameters' pieces */
        int kept = 0;
        for (int i = 0; i < nt; i++)
            if (map[t[i].param] >= 0) t[kept++] = t[i];
        nt = kept;
    }
    uint64_t elems = 0;
    for (int i = 0; i < nt; i++) elems += t[i].hi - t[i].lo;
    host = malloc((size_t)(elems ? elems : 1) * 4);
    zt = calloc((size_t)nt + 1, sizeof *zt);
    if (!host || !zt) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of host memory (%" PRIu64 " bytes)", elems * 4);
        goto done;
    }
    uint64_t at = 0;
    for (int i = 0; i < nt; i++) {
        zt[i] = (zck_target){map[t[i].param], t[i].lo, t[i].hi, host + at};
        at += t[i].hi - t[i].lo;
    }
    /* The client blob first: one that does not fit the caller's buffer fails the load before
     * any tensor is applied. */
    if (opt && opt->client_blob) {
        s = zck_read_blob(r, opt->client_blob, opt->client_blob_cap, &opt->client_blob_bytes, err);
    } else if (opt) {
        size_t nb;
        s = zck_read_blob(r, NULL, 0, &nb, err);
        opt->client_blob_bytes = nb;
    }
    for (int stream = 0; stream < 3 && s == ZINC_OK; stream++) {
        if (wonly && stream != ZCK_MASTER) break;
        s = zck_read(r, stream, zt, nt, 2, err);
        at = 0;
        if (s == ZINC_OK) *touched = 1;
        for (int i = 0; i < nt && s == ZINC_OK; i++) {
            float *dst = stream == ZCK_MASTER ? t[i].master : stream == ZCK_ADAM_M ? t[i].m : t[i].v;
            size_t n = t[i].hi - t[i].lo;
            s = ev->state_dev->iface->upload(ev->state_dev, dst, host + at, n * 4);
            if (s != ZINC_OK)
                zerr_fmt(err, ZCK_ERR, s, "upload to the device failed: %s", ev->state_dev->err);
            at += n;
        }
    }
    if (s == ZINC_OK && wonly && !opt->keep_optimizer) {
        size_t n = ev->stage == 0 ? ev->plan->flat_numel : ev->plan->shard_numel;
        *touched = 1;
        s = ev->state_dev->iface->memset0(ev->state_dev, ev->m, n * 4);
        if (s == ZINC_OK) s = ev->state_dev->iface->memset0(ev->state_dev, ev->v, n * 4);
        if (s != ZINC_OK)
            zerr_fmt(err, ZCK_ERR, s, "clearing the Adam state failed: %s", ev->state_dev->err);
    }
    int extra = m->ntensors - (ev->plan->nparams - missing);
    if (s == ZINC_OK && opt) {
        opt->missing = missing;
        opt->extra = extra;
    }
    if (s == ZINC_OK && rank_of(ev) == 0) {
        /* At another world size the resolved config differs anyway (its batch sizes): that is
         * said as such, not as another config (the file may be the same). */
        int reader = opt && opt->caller_reads_extra == 2;   /* a converter: its own config */
        if (m->config_hash[0] && strcmp(m->config_hash, ev->cfg->hash_hex) && !reader) {
            if (m->world_size == ev->world_size)
                zlog(ZLOG_WARN, "ckpt", 0, "%s was saved with another config (resolved hash %s, "
                     "now %s): compare `zinc config check --json` of both", tagdir,
                     m->config_hash, ev->cfg->hash_hex);
            else if (m->settings_hash[0] && strcmp(m->settings_hash, ev->cfg->settings_hash_hex))
                zlog(ZLOG_WARN, "ckpt", 0, "%s was saved at world size %d, now %d, and with "
                     "another config besides its batch sizes (settings hash %s, now %s): compare "
                     "`zinc config check --json` of both", tagdir, m->world_size, ev->world_size,
                     m->settings_hash, ev->cfg->settings_hash_hex);
            else
                zlog(ZLOG_INFO, "ckpt", 0, "%s was saved at world size %d, now %d (so the "
                     "resolved config, its batch sizes, differs: hash %s, now %s)", tagdir,
                     m->world_size, ev->world_size, m->config_hash, ev->cfg->hash_hex);
        }
        if (extra > 0 && !(opt && opt->caller_reads_extra))
            zlog(ZLOG_WARN, "ckpt", 0, "%s holds %d tensors the model does not register; the "
                 "load leaves them (zinc_ckpt_read_tensors reads them)", tagdir, extra);
        if (missing)
            zlog(ZLOG_INFO, "ckpt", 0, "%s lacks %d of the model's parameters; they keep their "
                 "values (missing_ok)", tagdir, missing);
    }
done:
    free(map);
    free(t);
    free(zt);
    free(host);
    zck_close(r);
    return s;
}

zinc_status zinc_ckpt_load(zinc_engine_t *e, const char *dir, const char *tag,
                           zinc_ckpt_load_options_t *opt)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_ckpt_load: engine is NULL");
    zeng_view view_, *ev = &view_;
    zeng_view_get(e, ev);
    if (!ev->finalized) return zeng_fail(e, ZINC_ERR_USAGE, "zinc_ckpt_load: call zinc_finalize first");
    zinc_status trains = zeng_check_trains(e, "zinc_ckpt_load");    /* no state to save or load */
    if (trains == ZINC_OK) trains = zeng_check_home(e, "zinc_ckpt_load");
    if (trains != ZINC_OK) return trains;
    if (!dir) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_load: dir is NULL");
    char err[ZCK_ERR] = "";
    zinc_status s = zeng_none_held(e, "zinc_ckpt_load");
    if (s != ZINC_OK) return s;
    /* a save in flight finishes first: it may be the very tag asked for */
    zck_async *prev = reg_take(e, 0);
    zinc_status ps = zck_async_wait(prev, err);
    if (ps != ZINC_OK)
        zlog(ZLOG_ERROR, "ckpt", rank_of(ev), "the background save in flight failed: %s", err);
    int autopick = !tag || !strcmp(tag, ZCK_LATEST);
    int me = rank_of(ev);
    zpick *pk = malloc(sizeof *pk);
    if (!pk) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_ckpt_load: out of memory");
    char partial[sizeof pk->tagdir] = ""; /* a tag a failed attempt had begun to apply */
    /* a load that writes the whole state may write into one NVMe offload lost (it then makes it
     * whole again); a weights-only load that keeps the optimizer leaves part of it as it was */
    int rewrite = !(opt && opt->weights_only && opt->keep_optimizer);
    if (rewrite) zeng_state_rewrite(e, 0);
    for (int attempt = 0;; attempt++) {
        /* rank 0 picks the tag so that every rank loads the same one */
        memset(pk, 0, sizeof *pk);
        if (me == 0) {
            pk->status = (int32_t)zck_find_tag(dir, tag, attempt, 0, pk->tagdir, sizeof pk->tagdir,
                                               pk->tag, sizeof pk->tag, pk->msg);
        }
        if (ev->comm && ev->comm->size > 1) {
            s = zcomm_host_broadcast(ev->comm, pk, sizeof *pk, 0);
            if (s != ZINC_OK) { snprintf(err, sizeof err, "zinc_ckpt_load: %.990s", ev->comm->err); break; }
        }
        if (pk->status != ZINC_OK) {
            s = (zinc_status)pk->status;
            snprintf(err, sizeof err, "zinc_ckpt_load: %.990s", pk->msg);
            break;
        }
        /* A rank given another tag than rank 0 loads rank 0's, as every rank must hold one
         * state; said, so that the tag it asked for is not thought loaded (DeepSpeed's ranks
         * each read their own, and hold a mixed state). */
        if (attempt == 0 && me != 0 && !autopick && strcmp(tag, pk->tag) != 0)
            zlog(ZLOG_WARN, "ckpt", me, "zinc_ckpt_load: this rank was given the tag '%s', rank 0 "
                 "'%s'; loading %s, rank 0's pick", tag, pk->tag, pk->tagdir);
        zengine_state st = (*ev->st);
        int have_state = 0, touched = 0;
        char lerr[ZCK_ERR] = "";
        s = load_local(e, ev, pk->tagdir, opt, &st, &have_state, &touched, lerr);
        int bad = any_rank(ev, s != ZINC_OK);
        /* agreed, so that every rank refuses the same next step (none waits in a collective) */
        if (bad && any_rank(ev, touched)) snprintf(partial, sizeof partial, "%s", pk->tagdir);
        if (!bad) {
            if (have_state) (*ev->st) = st;
            else if (opt && opt->weights_only && !opt->keep_optimizer) {
                /* fresh optimizer: bias correction and the loss scale start over */
                memset(ev->st, 0, sizeof *ev->st);
                zscaler_init(&ev->st->scaler, ev->cfg);
            }
            s = ZINC_OK;
            break;
        }
        /* A chunk that fails to decode shows only now; with automatic selection, try the next
         * tag (every rank does, since the failure was agreed on). */
        int corrupt = s == ZINC_ERR_CORRUPT;
        int any_corrupt = any_rank(ev, corrupt);
        /* Which rank saw what: its message names the file and the chunk. */
        char first[ZCK_ERR];
        int who = first_failure(ev, s != ZINC_OK, lerr, first, sizeof first);
        if (s != ZINC_OK) snprintf(err, sizeof err, "zinc_ckpt_load: %.990s", lerr);
        else {
            s = ZINC_ERR_ABORTED;
            snprintf(err, sizeof err, "zinc_ckpt_load: %.300s failed to load on rank %d: %.600s",
                     pk->tagdir, who, who >= 0 ? first : "(its message was not received)");
        }
        if (!autopick || !any_corrupt) break;
        if (me == 0) zlog(ZLOG_WARN, "ckpt", 0, "skipping damaged checkpoint %s: rank %d: %s",
                          pk->tagdir, who, who >= 0 ? first : "a chunk failed on another rank");
    }
    /* a load that succeeds (here, or after a damaged tag it had begun) makes the state whole —
     * unless it left some of it as it was (weights only, keeping the optimizer or parameters
     * the tag lacks) */
    int whole = !(opt && opt->weights_only && (opt->keep_optimizer || opt->missing));
    if (rewrite) zeng_state_rewrite(e, s == ZINC_OK && whole ? 2 : 1); /* before the refresh */
    if (s == ZINC_OK) {
        /* weights only, keeping the optimizer: the counters stay, but the window starts over
         * with the gradients (a micro-step count of a window whose sums were dropped would end
         * the next window early) */
        if (opt && opt->weights_only && opt->keep_optimizer) ev->st->micro = 0;
        s = zeng_restart_window(e, "zinc_ckpt_load");
        if (s == ZINC_OK) s = zeng_refresh_params(e);
        if (s != ZINC_OK) { /* the state is the tag's, the working copies are not */
            snprintf(err, sizeof err, "zinc_ckpt_load: %.990s", ev->err);
            snprintf(partial, sizeof partial, "%s", pk->tagdir);
        }
    }
    if (s == ZINC_OK && whole) zeng_set_partial_load(e, NULL);
    else if (partial[0]) zeng_set_partial_load(e, partial);
    if (s == ZINC_OK) {
        if (opt) snprintf(opt->loaded_tag, sizeof opt->loaded_tag, "%s", pk->tag);
        if (me == 0)
            zlog(ZLOG_INFO, "ckpt", 0, "loaded %s (%" PRId64 " updates applied%s)", pk->tagdir, ev->st->step,
                 opt && opt->weights_only ? ", weights only" : "");
    }
    free(pk);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s", err);
    return ZINC_OK;
}

/* ---- tensors the engine does not register ------------------------------------------------- */

/* Reads req[0..n) of dir/tag from the master stream; the caller checked the requests. */
static zinc_status read_tensors(const char *dir, const char *tag, zinc_ckpt_tensor_request_t *req,
                                int n, int logrank, char *err)
{
    for (int i = 0; i < n; i++) req[i].found = 0;
    char tagdir[4096], tagname[256];
    zck_reader *r = NULL;
    zck_target *t = calloc((size_t)n + 1, sizeof *t);
    int *at = calloc((size_t)n + 1, sizeof *at);      /* request of each target */
    int nt = 0;
    zinc_status s = t && at ? ZINC_OK : zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory");
    if (s == ZINC_OK)
        s = zck_find_tag(dir, tag, 0, logrank, tagdir, sizeof tagdir, tagname, sizeof tagname, err);
    if (s == ZINC_OK) s = zck_open(tagdir, &r, err);
    const zck_manifest *m = s == ZINC_OK ? zck_reader_manifest(r) : NULL;
    /* every shape is checked before anything is read, so a mismatch leaves each out untouched */
    for (int i = 0; s == ZINC_OK && i < n; i++) {
        int k = tensor_index(m, req[i].name);
        if (k < 0) continue;
        const zck_tensor *T = &m->tensors[k];
        if (!same_shape(T->ndim, T->shape, req[i].ndim, req[i].shape))
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_MISMATCH, "%s: tensor '%s' has another shape in "
                         "the checkpoint (%d dims, %" PRIu64 " elements) than the caller's (%d "
                         "dims)", tagdir, req[i].name, T->ndim, T->numel, req[i].ndim);
        else if (req[i].out) {
            at[nt] = i;
            t[nt++] = (zck_target){k, 0, T->numel, req[i].out};
        } else
            req[i].found = 1;           /* asks only whether the tensor is there */
    }
    /* one read for all: each chunk is decoded once however many tensors it holds */
    if (s == ZINC_OK && nt) s = zck_read(r, ZCK_MASTER, t, nt, 2, err);
    for (int j = 0; s == ZINC_OK && j < nt; j++) req[at[j]].found = 1;
    zck_close(r);
    free(t);
    free(at);
    return s;
}

zinc_status zinc_ckpt_read_tensors(zinc_engine_t *e, const char *dir, const char *tag,
                                   zinc_ckpt_tensor_request_t *req, int n)
{
    /* e NULL: a checkpoint read without an engine (zinc.utils.zero_to_fp32), tag NULL allowed */
    int ok = dir && (tag || !e) && n >= 0 && (req || !n);
    for (int i = 0; ok && i < n; i++)
        ok = req[i].name && req[i].ndim >= 0 && req[i].ndim <= ZCK_MAX_DIMS &&
             (!req[i].ndim || req[i].shape);
    char err[ZCK_ERR] = "";
    zinc_status s = ok ? ZINC_OK
                       : zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "dir%s and each request's "
                                  "name must be given, and 0 <= ndim <= %d with its shape",
                                  e ? ", tag" : "", ZCK_MAX_DIMS);
    int logrank = 0;
    if (s == ZINC_OK && e) {
        zeng_view view_, *ev = &view_;
        zeng_view_get(e, ev);
        if (!ev->finalized) s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_USAGE, "call zinc_finalize first");
        logrank = rank_of(ev);
    }
    /* n 0: nothing opened (the Python load asks on every load, mostly for nothing) */
    if (s == ZINC_OK && n) s = read_tensors(dir, tag, req, n, logrank, err);
    if (s == ZINC_OK) return ZINC_OK;
    return e ? zeng_fail(e, s, "zinc_ckpt_read_tensors: %s", err)
             : zerr_thread(s, "zinc_ckpt_read_tensors: %s", err);
}

zinc_status zinc_ckpt_find_tag(const char *dir, const char *tag, char *tag_out, size_t tag_cap,
                               void *blob, size_t blob_cap, size_t *blob_bytes)
{
    if (blob_bytes) *blob_bytes = 0;
    if (!dir || !tag_out || !tag_cap)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_ckpt_find_tag: dir and tag_out must be "
                           "given");
    tag_out[0] = 0;
    char err[ZCK_ERR] = "", tagdir[4096], name[ZCK_TAG_MAX];
    zck_reader *r = NULL;
    size_t nb = 0;
    zinc_status s = zck_find_tag(dir, tag, 0, 0, tagdir, sizeof tagdir, name, sizeof name, err);
    if (s == ZINC_OK) s = zck_open(tagdir, &r, err);
    if (s == ZINC_OK && blob)
        s = zck_read_blob(r, blob, blob_cap, &nb, err);
    else if (s == ZINC_OK)      /* only its size: the manifest's, without reading the file */
        nb = zck_reader_manifest(r)->has_blob ? (size_t)zck_reader_manifest(r)->blob_bytes : 0;
    zck_close(r);
    if (blob_bytes) *blob_bytes = nb;
    if (s == ZINC_OK && strlen(name) >= tag_cap)
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "the tag %s is longer than tag_cap %zu",
                     name, tag_cap);
    if (s != ZINC_OK) return zerr_thread(s, "zinc_ckpt_find_tag: %s", err);
    memcpy(tag_out, name, strlen(name) + 1);
    return ZINC_OK;
}

zinc_status zinc_ckpt_read_tensor(zinc_engine_t *e, const char *dir, const char *tag,
                                  const char *name, const int64_t *shape, int ndim, float *out,
                                  int *found)
{
    if (!found) {
        /* (e NULL is allowed: the call needs no engine; the error is found's either way) */
        if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_ckpt_read_tensor: found is NULL");
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_ckpt_read_tensor: found is NULL");
    }
    zinc_ckpt_tensor_request_t one = {name, shape, ndim, out, 0};
    zinc_status s = zinc_ckpt_read_tensors(e, dir, tag, &one, 1);
    *found = one.found;
    return s;
}

/* ---- initial weights from .safetensors ---------------------------------------------------------- */

zinc_status zinc_load_safetensors(zinc_engine_t *e, const char *path)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_load_safetensors: engine is NULL");
    zeng_view view_, *ev = &view_;
    zeng_view_get(e, ev);
    if (!ev->finalized) return zeng_fail(e, ZINC_ERR_USAGE, "zinc_load_safetensors: call zinc_finalize first");
    /* (it writes masters, which a frozen engine has not: zinc_param_set sets its values) */
    zinc_status trains = zeng_check_trains(e, "zinc_load_safetensors");
    if (trains == ZINC_OK) trains = zeng_check_home(e, "zinc_load_safetensors");
    if (trains != ZINC_OK) return trains;
    if (!path) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_load_safetensors: path is NULL");
    zinc_status held = zeng_none_held(e, "zinc_load_safetensors");
    if (held != ZINC_OK) return held;
    char err[ZCK_ERR] = "";
    zst_file *f = NULL;
    ztgt *t = NULL;
    int nt = 0, found = 0;
    float *buf = NULL;
    zinc_status s = zst_open(path, &f, err);
    if (s == ZINC_OK) {
        s = load_targets(e, ev, &t, &nt);
        if (s != ZINC_OK) zerr_fmt(err, ZCK_ERR, s, "cannot list the shard: %s", ev->err);
    }
    /* check every matching parameter first, so a mismatch changes nothing */
    for (int p = 0; s == ZINC_OK && p < ev->plan->nparams; p++) {
        const zplan_param *P = &ev->plan->params[p];
        int k = zst_find(f, P->name);
        if (k < 0) continue;
        found++;
        const zst_entry *E = &f->e[k];
        if (!same_shape(E->ndim, E->shape, P->ndim, P->shape))
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_MISMATCH, "%s: tensor '%s' has another shape than "
                         "the model's parameter (%zu elements)", path, P->name, P->numel);
        else if (!E->supported)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_UNSUPPORTED, "%s: tensor '%s' is %s; zinc reads "
                         "F32, F16 and BF16", path, P->name, E->dtype_name);
    }
    size_t maxn = 0;
    for (int i = 0; i < nt; i++)
        if (t[i].hi - t[i].lo > maxn) maxn = t[i].hi - t[i].lo;
    if (s == ZINC_OK && !(buf = malloc((maxn ? maxn : 1) * sizeof *buf)))
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory");
    int touched = 0; /* a tensor was written: a failure from here leaves a mix */
    for (int i = 0; s == ZINC_OK && i < nt; i++) {
        int k = zst_find(f, ev->plan->params[t[i].param].name);
        if (k < 0) continue;
        s = zst_read_f32(f, k, t[i].lo, t[i].hi, buf, err);
        if (s == ZINC_OK) {
            touched = 1;
            s = ev->state_dev->iface->upload(ev->state_dev, t[i].master, buf,
                                             (t[i].hi - t[i].lo) * 4);
            if (s != ZINC_OK) zerr_fmt(err, ZCK_ERR, s, "upload failed: %s", ev->state_dev->err);
        }
    }
    free(buf);
    free(t);
    zst_close(f);
    int bad = any_rank(ev, s != ZINC_OK);
    if (bad && any_rank(ev, touched)) zeng_set_partial_load(e, path); /* agreed, as in a load */
    if (bad && s == ZINC_OK) {
        s = ZINC_ERR_ABORTED;
        snprintf(err, sizeof err, "reading %s failed on another rank (see its message)", path);
    }
    if (s == ZINC_OK) {
        s = zeng_refresh_params(e);
        if (s != ZINC_OK) {
            snprintf(err, sizeof err, "%s", ev->err);
            zeng_set_partial_load(e, path); /* masters new, working copies not */
        }
    }
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_load_safetensors: %s", err);
    if (rank_of(ev) == 0)
        zlog(ZLOG_INFO, "ckpt", 0, "set %d of %d parameters from %s", found, ev->plan->nparams, path);
    return ZINC_OK;
}
