/*
 * engine.c — engine lifecycle: create (config, world, comm, device), parameter registration,
 * finalize (cross-rank check, plan, allocation), parameter values, views and introspection.
 * The per-micro-step calls and the optimizer step are in step.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/internal.h"
#include "base/log.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda/zdev_cuda.h"

zinc_status zeng_fail(zinc_engine_t *e, zinc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    zerr_thread(s, "%s", e->err);
    return s;
}

zinc_status zeng_fail_sequence(zinc_engine_t *e, zinc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    if (e->world_size > 1 && e->comm) {
        /* The others are in, or will enter, a collective this rank will not: stop them now
         * rather than after comm_timeout_s. The comm prefixes "rank R aborted: ". */
        char why[sizeof e->err + 64];
        snprintf(why, sizeof why, "%s: %s", zinc_status_string(s), e->err);
        zlog(ZLOG_ERROR, "engine", e->rank, "%s; aborting the world", why);
        e->comm->iface->abort(e->comm, why);
        size_t n = strlen(e->err);
        snprintf(e->err + n, sizeof e->err - n, " (rank %d aborted the world, so that the other "
                 "ranks stop instead of waiting for it)", e->rank);
    }
    zerr_thread(s, "%s", e->err);
    return s;
}

/* Joins the config's diagnostics into one message; logs every line when there are several (one
 * error is the message itself: logged too, a caller that prints the message, as `import zinc`'s
 * exception does, showed it twice). */
static zinc_status config_rejected(const zcfg_diag *d, const char *where)
{
    if (d->nerrors > 1)
        for (int i = 0; i < d->nerrors; i++) zlog(ZLOG_ERROR, "config", -1, "%s", d->errors[i]);
    if (d->nerrors == 0) return zerr_thread(ZINC_ERR_CONFIG, "%s: config rejected", where);
    return zerr_thread(ZINC_ERR_CONFIG, "%s: config rejected: %s%s", where, d->errors[0],
                       d->nerrors < 2                         ? ""
                       : zlog_enabled(ZLOG_ERROR, "config") ? " (and more errors, logged above)"
                       : " (and more errors, not logged: ZINC_LOG)");
}

static int default_threads(const zinc_world_t *w)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    int local_ranks = 1;
    if (w && !w->is_mpi) local_ranks = w->size;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (w && w->is_mpi && ls && atoi(ls) > 0) local_ranks = atoi(ls);
    int t = (int)(ncpu / local_ranks);
    return t < 1 ? 1 : t;
}

/* CPU: the device is host memory and the comm is the world's own backend. */
static zinc_status open_cpu(zinc_engine_t *e, const char *devname, int threads)
{
    if (e->world->is_env)
        return zerr_thread(ZINC_ERR_UNSUPPORTED,
                           "zinc_engine_create: this process was started by torchrun/srun, whose "
                           "ranks zinc connects with NCCL: use device \"cuda\", or start CPU ranks "
                           "with mpirun");
    zinc_status s = zdev_open(devname, threads, 0, &e->dev);
    if (s != ZINC_OK)
        return zerr_thread(s, "zinc_engine_create: cannot open device '%s': %s", devname,
                           zerr_thread_message());
    s = e->world->is_mpi ? zcomm_mpi_create(&e->comm)
                         : zcomm_local_create(e->world->local, e->rank, &e->comm);
    /* Test hook: run the backend through the staging comm that ranks sharing one GPU use (local
     * ranks as threads, mpi ranks as processes), so that path is exercised without a GPU. */
    const char *staged = getenv("ZINC_TEST_STAGED_COMM");
    if (s == ZINC_OK && staged && *staged == '1') {
        zcomm_t *inner = e->comm;
        e->comm = NULL;
        s = zcomm_staged_create(inner, e->dev, &e->comm);
        if (s == ZINC_OK && e->rank == 0)
            zlog(ZLOG_DEBUG, "comm", e->rank, "ZINC_TEST_STAGED_COMM=1: the %s comm runs under "
                 "the staged comm", inner->iface->name);
    }
    if (s == ZINC_OK && e->world->is_mpi) s = zworld_add_comm(e->world, e->comm);
    if (s != ZINC_OK)
        return zerr_thread(s, "zinc_engine_create: cannot open the comm of rank %d: %s", e->rank,
                           e->comm ? e->comm->err : zerr_thread_message());
    return ZINC_OK;
}

/* CUDA: one GPU per process with NCCL (a launched world, or a world of one), or several ranks
 * sharing one GPU through the staging comm (checks, not speed): local ranks as threads, or
 * mpirun's processes where a node has more of them than GPUs (gpu_share.c). */
static zinc_status open_cuda(zinc_engine_t *e)
{
    zinc_status s;
    double timeout = e->cfg.zinc.comm_timeout_s;
    if (e->world->is_mpi || e->world->is_env) {
        int nccl = 1;
        s = e->world->is_mpi ? zeng_open_cuda_mpi(e, timeout, &nccl) : zeng_check_env_cuda_world();
        if (s != ZINC_OK || !nccl) return s;
        zboot_info info;
        s = zcomm_nccl_launch(timeout, &info, &e->dev, &e->comm);
        if (s == ZINC_OK && (info.rank != e->rank || info.size != e->world_size))
            s = zerr_thread(ZINC_ERR_MISMATCH,
                            "zinc_engine_create: the launcher says rank %d of %d (%s) but the MPI "
                            "world says rank %d of %d", info.rank, info.size, info.method,
                            e->rank, e->world_size);
        return s;
    }
    const char *lr_env = getenv("LOCAL_RANK");
    int gpu = lr_env && e->world_size == 1 ? atoi(lr_env) : 0;
    s = zdev_open("cuda", 0, gpu, &e->dev);
    if (s != ZINC_OK)
        return zerr_thread(s, "zinc_engine_create: cannot open CUDA device %d: %s", gpu,
                           zerr_thread_message());
    if (e->world_size == 1) {
        unsigned char id[ZBOOT_ID_BYTES];
        s = zcomm_nccl_unique_id(id);
        if (s == ZINC_OK) s = zcomm_nccl_create(e->dev, 0, 1, id, timeout, &e->comm);
        return s;
    }
    zcomm_t *inner = NULL;
    s = zcomm_local_create(e->world->local, e->rank, &inner);
    if (s == ZINC_OK) s = zcomm_staged_create(inner, e->dev, &e->comm);
    return s;
}

/* Keeps the config's warnings for zinc_config_warnings: a front-end (the Python package) hands
 * them to its own warning machinery instead of leaving them on stderr only. */
static zinc_status keep_warnings(zinc_engine_t *e, const zcfg_diag *d)
{
    size_t n = 1;
    for (int i = 0; i < d->nwarnings; i++) n += strlen(d->warnings[i]) + 1;
    e->config_warnings = malloc(n);
    if (!e->config_warnings) return zerr_thread(ZINC_ERR_NOMEM, "zinc_engine_create: out of memory");
    char *w = e->config_warnings;
    for (int i = 0; i < d->nwarnings; i++) w += sprintf(w, "%s\n", d->warnings[i]);
    *w = '\0';
    return ZINC_OK;
}

zinc_status zinc_engine_create(const zinc_engine_options_t *opt, zinc_engine_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_engine_create: out is NULL");
    *out = NULL;
    if (!opt) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_engine_create: options are NULL");
    if (!!opt->config_path == !!opt->config_json)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zinc_engine_create: set exactly one of config_path and config_json");

    zinc_engine_t *e = calloc(1, sizeof *e);
    zhold *hold = e ? zhold_new() : NULL;
    if (!hold) {
        free(e);
        return zerr_thread(ZINC_ERR_NOMEM, "zinc_engine_create: out of memory");
    }
    e->hold = hold;
    e->lr_override = NAN;         /* the config's schedule until zinc_set_lr */
    e->betas_override[0] = e->betas_override[1] = NAN;   /* ... and zinc_set_betas */
    e->boundary_override = -1;    /* zinc counts until zinc_set_accumulation_boundary */
    zinc_status s = ZINC_OK;

    /* The world first: the config's batch rule needs its size. */
    e->world = opt->world;
    if (!e->world) {
        s = zinc_world_create_local(1, &e->world);
        if (s != ZINC_OK) goto fail;
        e->owns_world = 1;
    }
    e->world_size = e->world->size;
    if (e->world->is_mpi || e->world->is_env) {
        e->rank = e->world->mpi_rank;
    } else {
        if (opt->rank < 0 || opt->rank >= e->world_size) {
            s = zerr_thread(ZINC_ERR_INVALID_ARG,
                            "zinc_engine_create: rank %d is outside the world of %d ranks",
                            opt->rank, e->world_size);
            goto fail;
        }
        e->rank = opt->rank;
    }

    zcfg_overrides ov = {.world_size = e->world_size, .lr = -1.0};
    zcfg_diag diag = {0};
    s = opt->config_path ? zcfg_parse_file(opt->config_path, &ov, &e->cfg, &diag)
                         : zcfg_parse_text(opt->config_json, NULL, &ov, &e->cfg, &diag);
    if (s == ZINC_OK && e->rank == 0)
        for (int i = 0; i < diag.nwarnings; i++) zlog(ZLOG_WARN, "config", -1, "%s", diag.warnings[i]);
    if (s == ZINC_OK) s = keep_warnings(e, &diag);
    if (s == ZINC_OK && !(e->config_json = zcfg_to_json(&e->cfg)))
        s = zerr_thread(ZINC_ERR_NOMEM, "zinc_engine_create: out of memory");
    if (s == ZINC_ERR_CONFIG) s = config_rejected(&diag, "zinc_engine_create");
    else if (s != ZINC_OK && diag.nerrors)
        s = zerr_thread(s, "zinc_engine_create: %s", diag.errors[0]);
    zcfg_diag_free(&diag);
    if (s != ZINC_OK) goto fail;

    e->stage = e->cfg.zero.stage;
    e->dtype = e->cfg.dtype;
    e->gdtype = e->cfg.grad_accum_dtype;
    /* Stage 1 with fp32 sums: the micro-step's 16-bit gradient goes through a bucket, added
     * into the whole model's fp32 sums at its hand-over, as DeepSpeed adds it (step.c) */
    e->bucketed = zmem_bucketed(e->stage, e->gdtype != e->dtype);
    zscaler_init(&e->st.scaler, &e->cfg);
    /* The parser allows fp32 sums only where the engine keeps them (stages 1-3, on the device
     * or in host memory): stage 0's all-reduce has no such path. */
    if (e->gdtype != e->dtype && !zcfg_grad_fp32_allowed(e->stage, e->dtype)) {
        s = zerr_thread(ZINC_ERR_INTERNAL, "zinc_engine_create: fp32 gradient sums at stage %d",
                        e->stage);
        goto fail;
    }

    if (opt->threads < 0 || opt->threads > ZINC_MAX_THREADS) {
        s = zerr_thread(ZINC_ERR_INVALID_ARG,
                        "zinc_engine_create: threads = %d; give 0 (the cores shared among this "
                        "process's ranks) or a count of 1..%d", opt->threads, ZINC_MAX_THREADS);
        goto fail;
    }
    const char *devname = opt->device ? opt->device : "cpu";
    int threads = opt->threads > 0 ? opt->threads : default_threads(e->world);
    s = !strcmp(devname, "cuda") ? open_cuda(e) : open_cpu(e, devname, threads);
    if (s != ZINC_OK) goto fail;
    e->threads = threads;
    e->offload = zcfg_offloads_optimizer(&e->cfg);
    e->offload_param = zcfg_offloads_param(&e->cfg);
    e->grad_host = e->offload && e->stage >= 2;
    if (e->cfg.zinc.device_memory_limit) {
        s = zdev_set_limit(e->dev, e->cfg.zinc.device_memory_limit);
        if (s != ZINC_OK) {
            zerr_thread(s, "zinc_engine_create: zinc.device_memory_limit: %s", zerr_thread_message());
            goto fail;
        }
    }
    zcomm_set_timeout(e->comm, e->cfg.zinc.comm_timeout_s);
    if (e->rank == 0)
        zlog(ZLOG_DEBUG, "engine", e->rank, "config %s, stage %d, %s, world %d, device %s",
             e->cfg.hash_hex, e->stage, zinc_dtype_name(e->dtype), e->world_size, devname);
    *out = e;
    return ZINC_OK;

fail:
    {
        /* Keep the first error's message across the cleanup. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zerr_thread_message());
        zinc_engine_destroy(e);
        return zerr_thread(s, "%s", msg);
    }
}

void zinc_engine_destroy(zinc_engine_t *e)
{
    if (!e) return;
    /* A background save still writing from the engine's buffers: wait for it first. */
    if (e->background.work && e->background.release) e->background.release(e);
    /* The comm first: its destroy drains collectives still queued on the engine's buffers and,
     * on a GPU, uses the device's state (NCCL's and the staging comm's streams), so the buffers
     * and the device go after it. */
    if (e->comm) {
        if (e->world && e->world->is_mpi) zworld_remove_comm(e->world, e->comm);
        zcomm_destroy(e->comm);
    }
    /* The host state before the device: its copies are waited for and its pins undone there. */
    zoffload_free(e);
    if (e->dev) zstates_free(e);   /* zinc_states_offload's copies (unpinned through the device) */
    zdev_t *d = e->dev;
    if (d) {
        /* Aliased: freed once, as param16. Offloaded: host state, freed by zoffload_free. */
        int dev_state = !e->offload;
        void *master = e->master == (float *)e->param16 || !dev_state ? NULL : e->master;
        /* An attached gradient buffer is the caller's. */
        void *bufs[] = {e->param16, e->grad_external ? NULL : e->grad, master,  dev_state ? e->m : NULL,
                        dev_state ? e->v : NULL, e->bucket, e->gather, e->stats};
        /* Freed, and the device closed, now or when the last view of them goes (hold.c). */
        zhold_give(e->hold, d, bufs, sizeof bufs / sizeof bufs[0]);
    } else {
        zhold_give(e->hold, NULL, NULL, 0);
    }
    if (e->owns_world) zinc_world_destroy(e->world);
    zplan_free(&e->plan);
    free(e->group_hp);
    free(e->gstate);
    free(e->bucket_owner);
    free(e->gslots);
    free(e->trace);
    free(e->config_warnings);
    free(e->config_json);
    free(e);
}

/* ---- registration ------------------------------------------------------------------------- */

static zinc_status check_registering(zinc_engine_t *e, const char *fn)
{
    if (e->finalized)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: called after zinc_finalize; register every "
                                            "group and parameter before finalizing", fn);
    return ZINC_OK;
}

zinc_status zinc_grad_buffer_external(zinc_engine_t *e)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_grad_buffer_external: engine is NULL");
    zinc_status s = check_registering(e, "zinc_grad_buffer_external");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_grad_buffer_external");
    if (s != ZINC_OK) return s;
    e->grad_external = 1;
    return ZINC_OK;
}

zinc_status zeng_check_trains(zinc_engine_t *e, const char *fn)
{
    if (!e || !e->frozen) return ZINC_OK;
    return zeng_fail(e, ZINC_ERR_USAGE, "%s: a frozen engine (zinc_engine_frozen) holds values "
                     "only and trains nothing", fn);
}

zinc_status zinc_engine_frozen(zinc_engine_t *e)
{
    const char *fn = "zinc_engine_frozen";
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL", fn);
    zinc_status s = check_registering(e, fn);
    if (s != ZINC_OK) return s;
    /* Below stage 3 every rank keeps the whole working copy: partitioning frozen values is
     * what stage 3 is for, and the lower stages have no gather to serve them through. */
    if (e->stage != 3)
        return zeng_fail(e, ZINC_ERR_UNSUPPORTED, "%s: a frozen engine runs at ZeRO stage 3 "
                         "only (this config sets stage %d)", fn, e->stage);
    /* The lent gradient buffer and a frozen engine exclude each other, whichever came first. */
    if (e->grad_external)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: zinc_grad_buffer_external was called on this "
                         "engine; a frozen engine keeps no gradient buffer to lend", fn);
    e->frozen = 1;
    return ZINC_OK;
}

int zinc_engine_is_frozen(const zinc_engine_t *e) { return e && e->frozen; }

static int valid_name(const char *name)
{
    return name && *name && strlen(name) < ZPLAN_NAME_MAX;
}

zinc_status zinc_group_add(zinc_engine_t *e, const char *name, int *out_group)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_group_add: engine is NULL");
    zinc_status s = check_registering(e, "zinc_group_add");
    if (s != ZINC_OK) return s;
    if (!out_group)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_add: out_group is NULL; the group id is needed for "
                         "zinc_param_add and the micro-step calls");
    if (!valid_name(name))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_add: the name must be 1..%d characters", ZPLAN_NAME_MAX - 1);
    for (int g = 0; g < e->plan.ngroups; g++)
        if (!strcmp(e->plan.groups[g].name, name))
            return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_group_add: group '%s' already exists",
                             name);
    zgroup_hparams *hp = realloc(e->group_hp, (size_t)(e->plan.ngroups + 1) * sizeof *hp);
    if (!hp) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_group_add: out of memory");
    e->group_hp = hp;
    hp[e->plan.ngroups] = (zgroup_hparams){NAN, NAN, NAN, NAN, NAN};
    zplan_group *ng = realloc(e->plan.groups, (size_t)(e->plan.ngroups + 1) * sizeof *ng);
    if (!ng) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_group_add: out of memory");
    e->plan.groups = ng;
    zplan_group *G = &ng[e->plan.ngroups];
    memset(G, 0, sizeof *G);
    snprintf(G->name, sizeof G->name, "%s", name);
    if (out_group) *out_group = e->plan.ngroups;
    e->plan.ngroups++;
    return ZINC_OK;
}

zinc_status zeng_check_group_id(zinc_engine_t *e, int group, const char *fn)
{
    if (group < 0 || group >= e->plan.ngroups)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: unknown group %d (%d groups)", fn, group,
                         e->plan.ngroups);
    return ZINC_OK;
}

zinc_status zeng_check_ready(zinc_engine_t *e, const char *fn)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL", fn);
    if (!e->finalized) return zeng_fail(e, ZINC_ERR_USAGE, "%s: called before zinc_finalize", fn);
    return ZINC_OK;
}

zinc_status zeng_check_ready_group(zinc_engine_t *e, int group, const char *fn)
{
    zinc_status s = zeng_check_ready(e, fn);
    return s != ZINC_OK ? s : zeng_check_group_id(e, group, fn);
}

/* The checks of the setters of a group's Adam values and lr. They may be called at any time: before
 * zinc_finalize the values are part of the registration every rank must agree on; after it they
 * apply from the next optimizer step (group_adam_args reads them at every step), as torch and
 * DeepSpeed read each param group's values at every step. */
static zinc_status check_group_setter(zinc_engine_t *e, int group, const char *fn)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL", fn);
    return zeng_check_group_id(e, group, fn);
}

zinc_status zinc_group_set_weight_decay(zinc_engine_t *e, int group, double weight_decay)
{
    zinc_status s = check_group_setter(e, group, "zinc_group_set_weight_decay");
    if (s != ZINC_OK) return s;
    if (!isfinite(weight_decay) || weight_decay < 0)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_set_weight_decay: group '%s': weight decay %g is not a finite "
                         "value >= 0", e->plan.groups[group].name, weight_decay);
    e->group_hp[group].weight_decay = weight_decay;
    return ZINC_OK;
}

float zeng_group_weight_decay(const zinc_engine_t *e, int group)
{
    double wd = e->group_hp[group].weight_decay;
    return (float)(isnan(wd) ? e->cfg.optim.weight_decay : wd);
}

zinc_status zinc_group_set_betas(zinc_engine_t *e, int group, double beta1, double beta2)
{
    zinc_status s = check_group_setter(e, group, "zinc_group_set_betas");
    if (s != ZINC_OK) return s;
    /* The config's rule for optimizer.params.betas (torch's Adam: 0 <= beta < 1). */
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_set_betas: group '%s': betas [%g, %g]: each must be in [0, 1)",
                         e->plan.groups[group].name, beta1, beta2);
    e->group_hp[group].beta1 = beta1;
    e->group_hp[group].beta2 = beta2;
    return ZINC_OK;
}

zinc_status zinc_group_set_eps(zinc_engine_t *e, int group, double eps)
{
    zinc_status s = check_group_setter(e, group, "zinc_group_set_eps");
    if (s != ZINC_OK) return s;
    /* The config's rule for optimizer.params.eps. */
    if (!isfinite(eps) || eps <= 0)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_set_eps: group '%s': eps %g is not a finite value > 0",
                         e->plan.groups[group].name, eps);
    e->group_hp[group].eps = eps;
    return ZINC_OK;
}

zinc_status zinc_group_set_lr(zinc_engine_t *e, int group, double lr)
{
    zinc_status s = check_group_setter(e, group, "zinc_group_set_lr");
    if (s != ZINC_OK) return s;
    if (!isnan(lr) && (!isfinite(lr) || lr < 0))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_group_set_lr: group '%s': learning rate %g is not a finite value "
                         ">= 0 (NAN: the engine's learning rate)", e->plan.groups[group].name, lr);
    e->group_hp[group].lr = lr;
    return ZINC_OK;
}

zinc_status zinc_param_add(zinc_engine_t *e, int group, const char *name, int ndim,
                           const int64_t *shape, zinc_dtype dtype, int *out_param)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_param_add: engine is NULL");
    zinc_status s = check_registering(e, "zinc_param_add");
    if (s != ZINC_OK) return s;
    if (!out_param)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_param_add: out_param is NULL; the parameter id is needed for "
                         "zinc_param_set/get/data/grad");
    s = zeng_check_group_id(e, group, "zinc_param_add");
    if (s != ZINC_OK) return s;
    if (!valid_name(name))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_param_add: the name must be 1..%d characters", ZPLAN_NAME_MAX - 1);
    if (ndim < 1 || ndim > ZPLAN_MAX_DIMS)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_add: '%s': ndim %d is outside 1..%d",
                         name, ndim, ZPLAN_MAX_DIMS);
    if (!shape)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_add: '%s': shape is NULL (%d "
                         "extents expected)", name, ndim);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 || shape[i] > ((int64_t)1 << 40) ||
            numel > (UINT64_C(1) << 42) / (uint64_t)shape[i])
            return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                             "zinc_param_add: '%s': dimension %d has extent %lld (each extent "
                             "must be 1..2^40 and the tensor at most 2^42 elements)", name, i,
                             (long long)shape[i]);
        numel *= (uint64_t)shape[i];
    }
    if (dtype != e->dtype)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_param_add: '%s' has dtype %s but the config's precision is %s "
                         "(set by fp16.enabled / bf16.enabled)",
                         name, zinc_dtype_name(dtype), zinc_dtype_name(e->dtype));
    for (int p = 0; p < e->plan.nparams; p++)
        if (!strcmp(e->plan.params[p].name, name))
            return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_add: parameter '%s' already exists",
                             name);
    zplan_param *np = realloc(e->plan.params, (size_t)(e->plan.nparams + 1) * sizeof *np);
    if (!np) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_param_add: out of memory");
    e->plan.params = np;
    zplan_param *P = &np[e->plan.nparams];
    memset(P, 0, sizeof *P);
    snprintf(P->name, sizeof P->name, "%s", name);
    P->group = group;
    P->ndim = ndim;
    for (int i = 0; i < ndim; i++) P->shape[i] = shape[i];
    P->numel = (size_t)numel;
    if (out_param) *out_param = e->plan.nparams;
    e->plan.nparams++;
    return ZINC_OK;
}

/* ---- finalize ----------------------------------------------------------------------------- */

/* Parameters are kept in registration order (their ids); the plan needs each group's parameters
 * listed together. Parameters must therefore be registered group by group, in group order. */
static zinc_status group_params(zinc_engine_t *e)
{
    zplan *p = &e->plan;
    for (int g = 0; g < p->ngroups; g++) p->groups[g].nparams = 0;
    int cur = -1;
    for (int i = 0; i < p->nparams; i++) {
        int g = p->params[i].group;
        if (g != cur) {
            if (g < cur || p->groups[g].nparams > 0)
                return zeng_fail(e, ZINC_ERR_USAGE,
                                 "zinc_finalize: parameter '%s' of group '%s' was registered after "
                                 "parameters of a later group; register parameters group by group",
                                 p->params[i].name, p->groups[g].name);
            p->groups[g].first_param = i;
            cur = g;
        }
        p->groups[g].nparams++;
    }
    for (int g = 0; g < p->ngroups; g++)
        if (p->groups[g].nparams == 0) p->groups[g].first_param = p->nparams;
    return ZINC_OK;
}

static uint64_t registration_hash(const zinc_engine_t *e)
{
    const zplan *p = &e->plan;
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, &e->dtype, sizeof e->dtype);
    /* A frozen engine on one rank and a trained one on another would plan different memory and
     * answer the same calls differently. */
    XXH64_update(h, &e->frozen, sizeof e->frozen);
    for (int g = 0; g < p->ngroups; g++) {
        XXH64_update(h, p->groups[g].name, strlen(p->groups[g].name) + 1);
        /* The Adam values the group starts with (the lr is set any time; these may change
         * after finalize too, every rank alike, as the lr). */
        const zgroup_hparams *hp = &e->group_hp[g];
        const zcfg_optim *o = &e->cfg.optim;
        double adam[4] = {zeng_group_weight_decay(e, g),
                          isnan(hp->beta1) ? o->beta1 : hp->beta1,
                          isnan(hp->beta2) ? o->beta2 : hp->beta2,
                          isnan(hp->eps) ? o->eps : hp->eps};
        XXH64_update(h, adam, sizeof adam);
    }
    for (int i = 0; i < p->nparams; i++) {
        const zplan_param *P = &p->params[i];
        XXH64_update(h, P->name, strlen(P->name) + 1);
        XXH64_update(h, &P->group, sizeof P->group);
        XXH64_update(h, &P->ndim, sizeof P->ndim);
        XXH64_update(h, P->shape, sizeof(int64_t) * (size_t)P->ndim);
    }
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

/* "1, 3" for the ranks r whose differ[r] has `bit` set; returns how many. */
static int ranks_with(const double *differ, int n, int bit, char *out, size_t cap)
{
    int nbad = 0;
    out[0] = 0;
    for (int r = 0; r < n; r++)
        if ((int)differ[r] & bit) {
            size_t l = strlen(out);
            if (l < cap - 16) snprintf(out + l, cap - l, "%s%d", nbad ? ", " : "", r);
            nbad++;
        }
    return nbad;
}

/* Every rank must run the same resolved config and register the same groups and parameters:
 * compare both hashes with rank 0's (uncounted traffic; the host helpers stage through device
 * memory when the comm is NCCL). The config hash covers every resolved value (docs/config.md),
 * so two ranks given a different lr, stage or loss-scale setting are refused here instead of
 * training their shards with different settings. */
static zinc_status check_same_registration(zinc_engine_t *e)
{
    uint64_t mine[2] = {registration_hash(e), e->cfg.hash};
    uint64_t root[2] = {mine[0], mine[1]};
    zcomm_t *c = e->comm;
    size_t n = (size_t)e->world_size;
    double *differ = calloc(n, sizeof *differ);
    if (!differ) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: out of memory");
    zinc_status s = zcomm_host_broadcast(c, root, sizeof root, 0);
    /* differ[r]: bit 1 when rank r's registration differs from rank 0's, bit 2 its config. */
    differ[e->rank] = (double)((mine[0] != root[0]) | (mine[1] != root[1]) << 1);
    if (s == ZINC_OK) s = zcomm_host_all_reduce_f64(c, differ, n);
    if (s != ZINC_OK) {
        free(differ);
        return zeng_fail(e, s, "zinc_finalize: comparing registrations across ranks: %s", c->err);
    }
    char ranks[256], cranks[256];
    int nbad = ranks_with(differ, e->world_size, 1, ranks, sizeof ranks);
    int ncfg = ranks_with(differ, e->world_size, 2, cranks, sizeof cranks);
    free(differ);
    /* The config first: a different precision also shows as a different registration. */
    if (ncfg) {
        /* Rank 0 shows its hash once, a rank that matches it says so (it showed it twice). */
        char root_hex[17], mine_txt[64];
        snprintf(root_hex, sizeof root_hex, "%016llx", (unsigned long long)root[1]);
        if (e->rank == 0)
            mine_txt[0] = 0;
        else if (mine[1] == root[1])
            snprintf(mine_txt, sizeof mine_txt, ", the same on this rank %d", e->rank);
        else
            snprintf(mine_txt, sizeof mine_txt, ", %s on this rank %d", e->cfg.hash_hex, e->rank);
        return zeng_fail(e, ZINC_ERR_MISMATCH,
                         "zinc_finalize: rank(s) %s run a different config than rank 0 (resolved "
                         "config hash %s on rank 0%s); every rank must resolve the same "
                         "config: compare `zinc config check --json` with each rank's file and "
                         "flags (lr, stage, precision, ...)",
                         cranks, root_hex, mine_txt);
    }
    if (nbad)
        return zeng_fail(e, ZINC_ERR_MISMATCH,
                         "zinc_finalize: rank(s) %s registered different groups/parameters "
                         "(names, shapes, order, dtype, a group's weight decay, betas or eps, or "
                         "zinc_engine_frozen) than rank 0; this is rank %d with %d groups and %d "
                         "parameters", ranks, e->rank, e->plan.ngroups, e->plan.nparams);
    return ZINC_OK;
}

static zinc_status alloc_category(zinc_engine_t *e, zinc_mem_category c, void **out)
{
    *out = NULL;
    uint64_t n = e->planned[c];
    if (n == 0) return ZINC_OK;
    *out = e->dev->iface->alloc(e->dev, (size_t)n);
    if (!*out && e->dev->limit)
        return zeng_fail(e, ZINC_ERR_NOMEM,
                         "zinc_finalize: cannot allocate %s on rank %d: %llu bytes needed, %llu "
                         "available under zinc.device_memory_limit = %llu bytes (%llu in use); "
                         "see `zinc estimate` for the plan: a higher ZeRO stage, more ranks, "
                         "zero_optimization.offload_optimizer {\"device\": \"cpu\"} or, at stage 3, "
                         "offload_param {\"device\": \"cpu\"} with it need less",
                         zinc_mem_category_name(c), e->rank, (unsigned long long)n,
                         (unsigned long long)(e->dev->in_use < e->dev->limit
                                                  ? e->dev->limit - e->dev->in_use : 0),
                         (unsigned long long)e->dev->limit, (unsigned long long)e->dev->in_use);
    if (!*out)
        return zeng_fail(e, ZINC_ERR_NOMEM,
                         "zinc_finalize: cannot allocate %.3f GB for %s on rank %d (see `zinc "
                         "estimate` for the plan; a higher ZeRO stage or more ranks need less)",
                         (double)n / 1e9, zinc_mem_category_name(c), e->rank);
    e->allocated[c] = n;
    return ZINC_OK;
}

zinc_status zinc_finalize(zinc_engine_t *e)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_finalize: engine is NULL");
    if (e->finalized) return zeng_fail(e, ZINC_ERR_USAGE, "zinc_finalize: already finalized");
    if (e->plan.nparams == 0)
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_finalize: no parameters were registered");
    zinc_status s = group_params(e);
    if (s != ZINC_OK) return s;
    s = check_same_registration(e);
    if (s != ZINC_OK) return s;
    if (zplan_layout(&e->plan, e->world_size) != 0)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_finalize: the model is too large to plan");

    /* (a frozen engine's model adds no gradient anywhere) */
    e->nbuckets = e->bucketed && !e->frozen ? e->cfg.zinc.grad_buckets : 0;
    e->gstate = calloc((size_t)e->plan.ngroups, sizeof *e->gstate);
    if (!e->gstate) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: out of memory");
    s = zgather_plan(e);
    if (s != ZINC_OK) return s;
    /* The gathered groups' marks and the one past them (zinc_stream_wait_gather), created here
     * so that no step creates an event. */
    s = zdev_cuda_marks_reserve(e->dev, zgather_marks(e));
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_finalize: creating the gather marks: %s", e->dev->err);
    int offload = (e->offload ? ZMEM_OFFLOAD_OPTIMIZER : 0) |
                  (e->offload_param ? ZMEM_OFFLOAD_PARAM : 0) |
                  (e->gdtype != e->dtype ? ZMEM_GRAD_FP32 : 0) |
                  (zcfg_reduces_fp32(&e->cfg) ? ZMEM_WIRE_FP32 : 0) |
                  (e->frozen ? ZMEM_FROZEN : 0);
    zmem_plan(&e->plan, e->stage, e->dtype, offload, e->nbuckets, e->ngather, e->persist_numel,
              e->planned, e->host_planned);
    if (zoffload_uses_nvme(e)) zoffload_nvme_plan(e);
    if ((s = zoffload_check_limit(e)) != ZINC_OK) return s;
    e->bucket_owner = calloc((size_t)(e->nbuckets + 1), sizeof(int));
    e->gslots = calloc((size_t)(e->ngather + 1), sizeof *e->gslots);
    e->gather_open = -1;
    if (!e->bucket_owner || !e->gslots)
        return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: out of memory");
    for (int g = 0; g < e->plan.ngroups; g++) e->gstate[g].bucket = e->gstate[g].gather_slot = -1;
    for (int i = 0; i < e->nbuckets; i++) e->bucket_owner[i] = -1;

    void *master = NULL, *m = NULL, *v = NULL;
    if ((s = alloc_category(e, ZINC_MEM_PARAM16, &e->param16)) != ZINC_OK ||
        /* the caller's, attached per window (zinc_grad_buffer_attach) */
        (!e->grad_external && (s = alloc_category(e, ZINC_MEM_GRAD, &e->grad)) != ZINC_OK) ||
        (s = alloc_category(e, ZINC_MEM_MASTER, &master)) != ZINC_OK ||
        (s = alloc_category(e, ZINC_MEM_ADAM_M, &m)) != ZINC_OK ||
        (s = alloc_category(e, ZINC_MEM_ADAM_V, &v)) != ZINC_OK ||
        (s = alloc_category(e, ZINC_MEM_BUCKET, &e->bucket)) != ZINC_OK ||
        (s = alloc_category(e, ZINC_MEM_GATHER, &e->gather)) != ZINC_OK) {
        e->master = master;
        e->m = m;
        e->v = v;
        return s;
    }
    /* fp32 at stages 0 and 3: the working copy has the master's layout and is the master. A
     * frozen engine has none, in fp32 mode too: its shard is the value, read and written as
     * such (zinc_param_set, zinc_param_get), and a NULL master is freed by no one. */
    e->master = e->frozen ? NULL
              : zmem_master_aliased(e->stage, e->dtype, e->offload) ? (float *)e->param16
                                                                   : master;
    e->m = m;
    e->v = v;
    if (e->offload && (s = zoffload_alloc(e)) != ZINC_OK) return s;
    /* The fp32 reduction's scratch and the host gradient's live after the buckets, in the
     * same block (memplan.c); a frozen engine has no such block. */
    char *after = e->bucket ? (char *)e->bucket + (size_t)e->nbuckets * e->plan.max_group_padded *
                                                      zeng_dsize(e)
                            : NULL;
    if (after && zcfg_reduces_fp32(&e->cfg) && e->stage >= 2) {
        e->wide = after;
        after += e->plan.max_group_padded * sizeof(float);
    }
    if (e->grad_host) e->acc_tmp = after;
    /* The persistent stage-3 groups live after the gather area, in the same block. */
    if (e->persist_numel)
        e->persist = (char *)e->gather +
                     (size_t)e->ngather * e->plan.max_group_padded * zeng_dsize(e);
    if (zcomm_is_staged(e->comm)) {
        /* The largest collective: stage 0's all-reduce of the flat buffer, else one group. */
        size_t big = (e->stage == 0 ? e->plan.flat_numel : e->plan.max_group_padded) *
                     zeng_dsize(e);
        size_t f32 = e->plan.max_group_padded * 4; /* zinc_param_get's fp32 all-gather */
        s = zcomm_staged_reserve(e->comm, big > f32 ? big : f32);
        if (s != ZINC_OK) return zeng_fail(e, s, "zinc_finalize: %s", e->comm->err);
    }
    /* 16 bytes for the step's statistics: outside the plan's categories, which count tensors. */
    e->stats = e->dev->iface->alloc(e->dev, 2 * sizeof(double));
    if (!e->stats) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: out of memory");
    memset(e->comm->bytes, 0, sizeof e->comm->bytes);
    e->finalized = 1;
    if (e->rank == 0) {
        uint64_t total = 0;
        for (int c = 0; c < ZINC_MEM_COUNT; c++) total += e->planned[c];
        zlog(ZLOG_DEBUG, "engine", 0, "finalized: %d groups, %d params, %zu elements, %.3f MB per rank",
             e->plan.ngroups, e->plan.nparams, e->plan.flat_numel, (double)total / 1e6);
    }
    return ZINC_OK;
}

/* ---- parameter values --------------------------------------------------------------------- */

static zinc_status check_param(zinc_engine_t *e, int param, const char *fn)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL", fn);
    if (!e->finalized)
        return zeng_fail(e, ZINC_ERR_USAGE, "%s: called before zinc_finalize", fn);
    if (param < 0 || param >= e->plan.nparams)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: unknown parameter id %d (%d parameters)", fn,
                         param, e->plan.nparams);
    return ZINC_OK;
}

/* Flat offset of element 0 of a parameter (full buffers). */
static size_t flat_pos(const zinc_engine_t *e, int param)
{
    const zplan_param *P = &e->plan.params[param];
    return e->plan.groups[P->group].flat_off + P->offset;
}

/* Where master element `lo` of a shard piece lives: shard position, or flat at stage 0. */
static size_t master_pos(const zinc_engine_t *e, int param, size_t lo, size_t shard_pos)
{
    return e->stage == 0 ? flat_pos(e, param) + lo : shard_pos;
}

/* The device whose memory holds master, m and v: the host one with offload. */
static zdev_t *state_dev(zinc_engine_t *e)
{
    zdev_t *nv = zoffload_nvme_dev(e);     /* the NVMe offload's file */
    return nv ? nv : e->host ? e->host : e->dev;
}

/* The elements [lo, hi) of a parameter this rank keeps the fp32 state of (all of them at stage
 * 0), sp their shard position; 0 when it keeps none. */
static int own_range(const zinc_engine_t *e, int param, size_t *lo, size_t *hi, size_t *sp)
{
    if (e->stage == 0) {
        *lo = 0;
        *hi = e->plan.params[param].numel;
        *sp = 0;
        return 1;
    }
    return zplan_param_in_slice(&e->plan, param, e->rank, lo, hi, sp);
}

zinc_status zeng_shard_pieces(zinc_engine_t *e, zshard_piece **out, int *n)
{
    *out = NULL;
    *n = 0;
    /* A checkpoint load writes the master through these (with offload_param in fp32 mode the
     * host shard that gathers upload from). */
    zinc_status s = zoffload_settle(e);
    if (s != ZINC_OK) return s;
    zshard_piece *pc = calloc((size_t)e->plan.nparams + 1, sizeof *pc);
    if (!pc) return zeng_fail(e, ZINC_ERR_NOMEM, "out of memory listing shard pieces");
    int k = 0;
    for (int p = 0; p < e->plan.nparams; p++) {
        size_t lo, hi, sp;
        if (!zplan_param_in_slice(&e->plan, p, e->rank, &lo, &hi, &sp)) continue;
        size_t mp = master_pos(e, p, lo, sp);
        pc[k++] = (zshard_piece){p, lo, hi, e->master + mp, e->m + mp, e->v + mp};
    }
    *out = pc;
    *n = k;
    return ZINC_OK;
}

/* fp32 values into `dst` in dtype `dt` on device `dv` (the engine's, or the host one). */
static zinc_status upload_converted(zdev_t *dv, void *dst, const float *src, size_t n, zinc_dtype dt)
{
    if (dt == ZINC_DTYPE_FP32) return dv->iface->upload(dv, dst, src, n * 4);
    uint16_t *tmp = malloc(n * 2 + 2);
    if (!tmp) return ZINC_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) zk_store(tmp, dt, i, src[i]);
    zinc_status s = dv->iface->upload(dv, dst, tmp, n * 2);
    free(tmp);
    return s;
}

zinc_status zinc_param_set(zinc_engine_t *e, int param, const float *values)
{
    zinc_status s = check_param(e, param, "zinc_param_set");
    if (s == ZINC_OK) s = zeng_check_home(e, "zinc_param_set");
    if (s != ZINC_OK) return s;
    if (!values) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_set: values is NULL");
    const zplan_param *P = &e->plan.params[param];
    s = zgather_forget(e, P->group, "zinc_param_set");
    if (s == ZINC_OK) s = zoffload_settle(e);    /* it rewrites what uploads may still read */
    if (s != ZINC_OK) return s;
    size_t d = zeng_dsize(e);
    size_t lo, hi, sp;
    const zdev_t *failed = e->dev;   /* the device whose message says why a write failed */
    if (own_range(e, param, &lo, &hi, &sp)) {
        /* (a frozen engine has no master: the 16-bit slice below is its value) */
        if (!e->frozen)
            s = state_dev(e)->iface->upload(state_dev(e), e->master + master_pos(e, param, lo, sp),
                                            values + lo, (hi - lo) * 4);
        if (s != ZINC_OK) failed = state_dev(e);
        /* Stage 3's own 16-bit slice: on the device, or with offload_param the host shard (in
         * fp32 mode that is the host master, just written). */
        if (s == ZINC_OK && e->stage == 3 && !e->offload_param)
            s = upload_converted(e->dev, (char *)e->param16 + sp * d, values + lo, hi - lo, e->dtype);
        if (s == ZINC_OK && e->offload_param && zoffload_param16(e) != (void *)e->master &&
            (s = upload_converted(zoffload_param16_dev(e), (char *)zoffload_param16(e) + sp * d,
                                  values + lo, hi - lo, e->dtype)) != ZINC_OK)
            failed = zoffload_param16_dev(e);
    }
    /* Stages 0-2 keep the full 16-bit copy, stage 3 the full copy of persistent groups: every
     * rank writes all of it (same values). */
    if (s == ZINC_OK && e->stage < 3)
        s = upload_converted(e->dev, (char *)e->param16 + flat_pos(e, param) * d, values, P->numel,
                             e->dtype);
    const zgroup_state *gs = &e->gstate[P->group];
    if (s == ZINC_OK && e->stage == 3 && gs->persistent)
        s = upload_converted(e->dev, (char *)e->persist + (gs->persist_off + P->offset) * d, values,
                             P->numel, e->dtype);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_param_set: '%s': %s", P->name,
                         s == ZINC_ERR_NOMEM ? "out of memory" : failed->err);
    return ZINC_OK;
}

/* The working copy (stage 3: the shard) and the device it is on: param16 on the engine's
 * device, or with offload_param the host shard (zoffload_param16) on its device. */
static void *param16_of(zinc_engine_t *e, zdev_t **dev)
{
    *dev = e->offload_param ? zoffload_param16_dev(e) : e->dev;
    return e->offload_param ? zoffload_param16(e) : e->param16;
}

/* n elements of dtype dt at the front of h made fp32 in place (from the end, where no element
 * not yet read is overwritten); nothing for fp32. */
static void widen_in_place(float *h, zinc_dtype dt, size_t n)
{
    for (size_t i = n; dt != ZINC_DTYPE_FP32 && i-- > 0;) h[i] = zk_load(h, dt, i);
}

/* A parameter's whole value, in fp32, of one stream laid out as the master (master, m or v, on
 * `src_dev`: the host one with offload) or as the stage 2-3 gradient accumulator (dtype `dt`,
 * on the engine's device): every rank contributes its slice of the group, converted to fp32; an
 * (uncounted) all-gather in device memory assembles the group; the parameter is then read out
 * of it. Collective. */
static zinc_status gather_stream(zinc_engine_t *e, int param, const void *base, zinc_dtype dt,
                                 zdev_t *src_dev, float *out, const char *fn)
{
    zinc_status s = check_param(e, param, fn);
    if (s != ZINC_OK) return s;
    if (!out) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: out is NULL", fn);
    const zplan_param *P = &e->plan.params[param];
    const zplan_group *G = &e->plan.groups[P->group];
    zdev_t *d = e->dev;
    float *tmp = d->iface->alloc(d, G->padded * sizeof(float));
    if (!tmp) return zeng_fail(e, ZINC_ERR_NOMEM, "%s: out of memory", fn);
    size_t own = e->stage == 0 ? G->flat_off + G->slice * (size_t)e->rank : G->shard_off;
    float *mine = tmp + G->slice * (size_t)e->rank;
    const char *src = (const char *)base + own * zinc_dtype_size(dt);
    if (src_dev != d) {
        /* offloaded state (host memory, or the NVMe file): read into host memory, converted to
         * fp32 there (the host gradient is 16-bit), then uploaded */
        size_t es = zinc_dtype_size(dt);
        float *h = malloc(G->slice * 4 + 4);
        s = h ? src_dev->iface->download(src_dev, h, src, G->slice * es) : ZINC_ERR_NOMEM;
        if (s == ZINC_OK) widen_in_place(h, dt, G->slice);
        if (s == ZINC_OK) s = d->iface->upload(d, mine, h, G->slice * 4);
        if (s != ZINC_OK && s != ZINC_ERR_NOMEM) snprintf(d->err, sizeof d->err, "%s", src_dev->err);
        free(h);
    } else {
        s = d->iface->cast(d, mine, ZINC_DTYPE_FP32, src, dt, G->slice, 1.0f);
    }
    if (s == ZINC_OK) s = e->comm->iface->all_gather(e->comm, tmp, G->padded, ZDT_F32);
    if (s == ZINC_OK) s = d->iface->download(d, out, tmp + P->offset, P->numel * 4);
    d->iface->free(d, tmp);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s%s", fn, P->name, e->comm->err, d->err);
    return ZINC_OK;
}

/* The working copy's value widened: stage 3 gathers the shards (the host one with
 * offload_param); stages 0-2 hold the whole copy on every rank. */
static zinc_status working_value(zinc_engine_t *e, int param, float *out, const char *fn)
{
    zinc_status s = check_param(e, param, fn);
    if (s != ZINC_OK) return s;
    if (!out) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: out is NULL", fn);
    zdev_t *dev;
    void *p16 = param16_of(e, &dev);
    if (e->stage == 3) return gather_stream(e, param, p16, e->dtype, dev, out, fn);
    const zplan_param *P = &e->plan.params[param];
    size_t d = zeng_dsize(e);
    s = dev->iface->download(dev, out, (const char *)p16 + flat_pos(e, param) * d, P->numel * d);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: '%s': %s", fn, P->name, dev->err);
    widen_in_place(out, e->dtype, P->numel);
    return ZINC_OK;
}

zinc_status zinc_param_get_working(zinc_engine_t *e, int param, float *out)
{
    return working_value(e, param, out, "zinc_param_get_working");
}

zinc_status zinc_param_get(zinc_engine_t *e, int param, float *out)
{
    /* A frozen engine's value is its working-dtype shard (it has no master), widened. */
    if (e && e->frozen) return working_value(e, param, out, "zinc_param_get");
    zinc_status s = zeng_check_home(e, "zinc_param_get");
    if (s != ZINC_OK) return s;
    return gather_stream(e, param, e ? e->master : NULL, ZINC_DTYPE_FP32, e ? state_dev(e) : NULL,
                         out, "zinc_param_get");
}

static float *moment(zinc_engine_t *e, zinc_param_state which)
{
    return which == ZINC_STATE_EXP_AVG ? e->m : which == ZINC_STATE_EXP_AVG_SQ ? e->v : NULL;
}

zinc_status zinc_param_state_get(zinc_engine_t *e, int param, zinc_param_state which, float *out)
{
    zinc_status s = zeng_check_trains(e, "zinc_param_state_get");
    if (s == ZINC_OK) s = zeng_check_home(e, "zinc_param_state_get");
    if (s != ZINC_OK) return s;
    /* (the enum, not moment(): before zinc_finalize m and v are NULL, and gather_stream then
     * says "call zinc_finalize first" rather than "unknown state") */
    if (e && which != ZINC_STATE_EXP_AVG && which != ZINC_STATE_EXP_AVG_SQ)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_state_get: unknown state %d "
                         "(ZINC_STATE_EXP_AVG or ZINC_STATE_EXP_AVG_SQ)", (int)which);
    return gather_stream(e, param, e ? moment(e, which) : NULL, ZINC_DTYPE_FP32,
                         e ? state_dev(e) : NULL, out, "zinc_param_state_get");
}

zinc_status zinc_param_state_set(zinc_engine_t *e, int param, zinc_param_state which,
                                 const float *values)
{
    zinc_status s = check_param(e, param, "zinc_param_state_set");
    if (s == ZINC_OK) s = zeng_check_trains(e, "zinc_param_state_set");
    if (s == ZINC_OK) s = zeng_check_home(e, "zinc_param_state_set");
    if (s != ZINC_OK) return s;
    float *base = moment(e, which);
    if (!base)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_state_set: unknown state %d "
                         "(ZINC_STATE_EXP_AVG or ZINC_STATE_EXP_AVG_SQ)", (int)which);
    if (!values) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_state_set: values is NULL");
    const zplan_param *P = &e->plan.params[param];
    size_t lo, hi, sp;
    /* m and v share the master's layout and device (the host one with offload) */
    if (own_range(e, param, &lo, &hi, &sp))
        s = state_dev(e)->iface->upload(state_dev(e), base + master_pos(e, param, lo, sp),
                                        values + lo, (hi - lo) * 4);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_param_state_set: '%s': %s", P->name, state_dev(e)->err);
    return ZINC_OK;
}

/* ---- gradients (DeepSpeed's safe_get_full_grad / safe_set_full_grad) ----------------------- */

/* The checks of zinc_param_grad_get (collective, `buf` its out) and _set (`buf` its values):
 * a known parameter after finalize, a buffer, and at stages 2-3 the group's gradient in the
 * shard — it gets there only once zinc_grads_ready hands the bucket over, and before that part
 * of it is in a bucket these calls do not read. */
static zinc_status grad_access_check(zinc_engine_t *e, int param, const void *buf, const char *fn,
                                     int collective)
{
    zinc_status s = check_param(e, param, fn);
    if (s != ZINC_OK) return s;
    if (!buf)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                         collective ? "out" : "values");
    const zplan_param *P = &e->plan.params[param];
    if (!e->bucketed || e->gstate[P->group].bucket < 0) return ZINC_OK;
    const char *fmt = "%s: '%s': its group '%s' holds gradients not yet handed over with "
                      "zinc_grads_ready (call it after the group's backward)";
    const char *g = e->plan.groups[P->group].name;
    return collective ? zeng_fail_sequence(e, ZINC_ERR_USAGE, fmt, fn, P->name, g)
                      : zeng_fail(e, ZINC_ERR_USAGE, fmt, fn, P->name, g);
}

/* Stages 2-3: `n` values into the gradient accumulator at shard position `pos` (a slice of
 * the parameter's part), in the accumulation dtype: on the device, or with offload in host
 * memory (after its downloads are waited for). */
static zinc_status write_grad_slice(zinc_engine_t *e, int param, size_t pos, const float *values,
                                    size_t n, const char *fn)
{
    const zplan_param *P = &e->plan.params[param];
    size_t off = pos * zeng_gsize(e);
    zinc_status s;
    if (e->grad_host) {
        /* the host accumulator, once its downloads are done; the group's next micro-step adds to
         * what is written here, as it adds to the device's */
        s = zoffload_grad_settle(e);
        if (s != ZINC_OK) return s;
        s = upload_converted(e->host, (char *)e->h_grad + off, values, n, e->gdtype);
        e->gstate[P->group].acc_on_host = 1;
    } else {
        s = upload_converted(e->dev, (char *)e->grad + off, values, n, e->gdtype);
    }
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s", fn, P->name,
                         s == ZINC_ERR_NOMEM ? "out of memory" : e->dev->err);
    return ZINC_OK;
}

/* zinc_param_grad_get after zinc_grads_reduce: the buffer's averaged values, as fp32. */
static zinc_status read_reduced(zinc_engine_t *e, int param, const char *sums, float *out,
                                const char *fn)
{
    zdev_t *d = e->dev;
    const zplan_param *P = &e->plan.params[param];
    float *tmp = d->iface->alloc(d, P->numel * sizeof(float));
    if (!tmp) return zeng_fail(e, ZINC_ERR_NOMEM, "%s: out of memory", fn);
    zinc_status s = d->iface->cast(d, tmp, ZINC_DTYPE_FP32, sums, e->gdtype, P->numel, 1.0f);
    if (s == ZINC_OK) s = d->iface->download(d, out, tmp, P->numel * 4);
    d->iface->free(d, tmp);
    if (s != ZINC_OK) return zeng_fail(e, s, "%s: '%s': %s", fn, P->name, d->err);
    return ZINC_OK;
}

zinc_status zinc_param_grad_get(zinc_engine_t *e, int param, float *out)
{
    const char *fn = "zinc_param_grad_get";
    zinc_status s = zeng_check_trains(e, fn);
    if (s == ZINC_OK) s = grad_access_check(e, param, out, fn, 1);
    if (s != ZINC_OK) return s;
    /* Stages 2-3: already averaged by zinc_grads_ready's reduce-scatter; the slices, gathered
     * (from host memory with offload, once its downloads are done). */
    if (e->grad_host && (s = zoffload_grad_settle(e)) != ZINC_OK) return s;
    const zplan_param *P = &e->plan.params[param];
    if (zeng_grad_detached(e)) {     /* between windows: zero, as zinc's own buffer would hold */
        memset(out, 0, P->numel * sizeof(float));
        return ZINC_OK;
    }
    if (e->stage >= 2)
        return e->grad_host ? gather_stream(e, param, e->h_grad, e->gdtype, e->host, out, fn)
                            : gather_stream(e, param, e->grad, e->gdtype, e->dev, out, fn);
    /* Stages 0-1: this rank's sums (zinc_step reduces the buffer itself), reduced over the
     * ranks here as zinc_step will reduce them: 16-bit sums in the working dtype (fp32
     * accumulation, one rounding), stage 1's fp32 sums rounded to the working dtype and reduced
     * in it (reduce_rounded), unless communication_data_type "fp32" reduces them in fp32. That
     * is what DeepSpeed 0.19.8 reads here, its reduce done in the boundary's backward (before
     * 2026-11-30 zinc averaged 16-bit sums in fp32 without the rounding: another value than
     * DeepSpeed's with more than one rank, bench/ds_grad_accum_fp32.py). */
    zdev_t *d = e->dev;
    const char *sums = (const char *)e->grad + flat_pos(e, param) * zeng_gsize(e);
    if (e->grads_reduced)      /* zinc_grads_reduce averaged the buffer itself already */
        return read_reduced(e, param, sums, out, fn);
    int rounded = e->dtype != ZINC_DTYPE_FP32 && !zcfg_reduces_fp32(&e->cfg);
    float *tmp = d->iface->alloc(d, P->numel * sizeof(float));
    void *tmp16 = rounded ? d->iface->alloc(d, P->numel * zeng_dsize(e)) : NULL;
    if (!tmp || (rounded && !tmp16)) {
        if (tmp) d->iface->free(d, tmp);
        return zeng_fail(e, ZINC_ERR_NOMEM, "%s: out of memory", fn);
    }
    float scale = 1.0f / (float)e->world_size;
    if (rounded) {
        s = d->iface->cast(d, tmp16, e->dtype, sums, e->gdtype, P->numel, 1.0f);
        if (s == ZINC_OK) s = zcomm_all_reduce(e->comm, tmp16, P->numel, (zdt)e->dtype, scale);
        if (s == ZINC_OK) s = d->iface->cast(d, tmp, ZINC_DTYPE_FP32, tmp16, e->dtype, P->numel, 1.0f);
        d->iface->free(d, tmp16);
    } else {
        s = d->iface->cast(d, tmp, ZINC_DTYPE_FP32, sums, e->gdtype, P->numel, 1.0f);
        if (s == ZINC_OK) s = zcomm_all_reduce(e->comm, tmp, P->numel, ZDT_F32, scale);
    }
    if (s == ZINC_OK) s = d->iface->download(d, out, tmp, P->numel * 4);
    d->iface->free(d, tmp);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s%s", fn, P->name, e->comm->err, d->err);
    return ZINC_OK;
}

zinc_status zinc_param_grad_set(zinc_engine_t *e, int param, const float *values)
{
    const char *fn = "zinc_param_grad_set";
    zinc_status s = zeng_check_trains(e, fn);
    if (s == ZINC_OK) s = grad_access_check(e, param, values, fn, 0);
    if (s == ZINC_OK) s = zeng_need_grad_buffer(e, fn, 0);
    if (s != ZINC_OK) return s;
    const zplan_param *P = &e->plan.params[param];
    size_t lo, hi, sp;
    if (e->stage >= 2)
        return own_range(e, param, &lo, &hi, &sp) ? write_grad_slice(e, param, sp, values + lo,
                                                                     hi - lo, fn)
                                                   : ZINC_OK;
    /* Every rank writes the whole value; zinc_step's average of equal values is the value. */
    s = upload_converted(e->dev, (char *)e->grad + flat_pos(e, param) * zeng_gsize(e),
                         values, P->numel, e->gdtype);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s", fn, P->name,
                         s == ZINC_ERR_NOMEM ? "out of memory" : e->dev->err);
    return ZINC_OK;
}

/* ---- this rank's fragment (DeepSpeed's safe_get_local_* / safe_set_local_*) ---------------- */

zinc_status zinc_param_local_range(zinc_engine_t *e, int param, int64_t *lo, int64_t *hi)
{
    zinc_status s = check_param(e, param, "zinc_param_local_range");
    if (s != ZINC_OK) return s;
    if (!lo || !hi)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_local_range: lo or hi is NULL");
    size_t l = 0, h = 0, sp;
    if (!own_range(e, param, &l, &h, &sp)) l = h = 0;
    *lo = (int64_t)l;
    *hi = (int64_t)h;
    return ZINC_OK;
}

/* Where this rank's fragment of `which` lives: the stream's base, its dtype and device, the
 * fragment's position in it and its length. The gradient has one from stage 2 on, once its
 * group was handed over. */
typedef struct {
    char *base;
    zinc_dtype dt;
    zdev_t *dev;
    size_t pos, n;
} local_frag;

static zinc_status local_stream(zinc_engine_t *e, int param, zinc_param_state which,
                                const void *buf, const char *fn, local_frag *f)
{
    /* (every stream of the fragment is training state: a frozen engine keeps none) */
    zinc_status s = zeng_check_trains(e, fn);
    if (s == ZINC_OK && which != ZINC_STATE_GRAD) s = zeng_check_home(e, fn);
    if (s != ZINC_OK) return s;
    /* the gradient's check also refuses a group whose gradient is still in its bucket */
    s = which == ZINC_STATE_GRAD ? grad_access_check(e, param, buf, fn, 0)
                                 : check_param(e, param, fn);
    if (s != ZINC_OK) return s;
    if (!buf) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: the buffer is NULL", fn);
    size_t lo = 0, hi = 0, sp = 0;
    size_t n = own_range(e, param, &lo, &hi, &sp) ? hi - lo : 0;
    if (which == ZINC_STATE_GRAD) {
        if (e->stage < 2)
            return zeng_fail(e, ZINC_ERR_USAGE, "%s: below ZeRO stage 2 the gradient is not "
                             "partitioned (this engine runs stage %d): zinc_param_grad_get "
                             "reads it whole", fn, e->stage);
        if (e->grad_host) {    /* in host memory (offload), once its downloads are done */
            s = zoffload_grad_settle(e);
            *f = (local_frag){(char *)e->h_grad, e->gdtype, e->host, sp, n};
            return s;
        }
        *f = (local_frag){(char *)e->grad, e->gdtype, e->dev, sp, n};
        return ZINC_OK;
    }
    float *base = which == ZINC_STATE_MASTER ? e->master : moment(e, which);
    if (!base)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: unknown state %d (ZINC_STATE_MASTER, "
                         "_EXP_AVG, _EXP_AVG_SQ or _GRAD)", fn, (int)which);
    *f = (local_frag){(char *)base, ZINC_DTYPE_FP32, state_dev(e),
                      n ? master_pos(e, param, lo, sp) : 0, n};
    return ZINC_OK;
}

zinc_status zinc_param_local_get(zinc_engine_t *e, int param, zinc_param_state which, float *out)
{
    const char *fn = "zinc_param_local_get";
    local_frag f;
    zinc_status s = local_stream(e, param, which, out, fn, &f);
    if (s != ZINC_OK || f.n == 0) return s;
    if (which == ZINC_STATE_GRAD && zeng_grad_detached(e)) {     /* between windows: zero */
        memset(out, 0, f.n * sizeof(float));
        return ZINC_OK;
    }
    const char *src = f.base + f.pos * zinc_dtype_size(f.dt);
    if (f.dt == ZINC_DTYPE_FP32) {
        s = f.dev->iface->download(f.dev, out, src, f.n * 4);
    } else {             /* the 16-bit gradient accumulator: converted on its device */
        float *tmp = f.dev->iface->alloc(f.dev, f.n * sizeof(float));
        if (!tmp) return zeng_fail(e, ZINC_ERR_NOMEM, "%s: out of memory", fn);
        s = f.dev->iface->cast(f.dev, tmp, ZINC_DTYPE_FP32, src, f.dt, f.n, 1.0f);
        if (s == ZINC_OK) s = f.dev->iface->download(f.dev, out, tmp, f.n * 4);
        f.dev->iface->free(f.dev, tmp);
    }
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s", fn, e->plan.params[param].name, f.dev->err);
    return ZINC_OK;
}

zinc_status zinc_param_local_set(zinc_engine_t *e, int param, zinc_param_state which,
                                 const float *values)
{
    const char *fn = "zinc_param_local_set";
    local_frag f;
    zinc_status s = local_stream(e, param, which, values, fn, &f);
    if (s != ZINC_OK || f.n == 0) return s;
    if (which == ZINC_STATE_GRAD)
        return (s = zeng_need_grad_buffer(e, fn, 0)) != ZINC_OK
                   ? s : write_grad_slice(e, param, f.pos, values, f.n, fn);
    /* In fp32 mode with offload the host master is what the step's (and offload_param's
     * gathers') uploads read, at every stage: they may still be in flight. */
    if (which == ZINC_STATE_MASTER && e->dtype == ZINC_DTYPE_FP32 &&
        (s = zoffload_settle(e)) != ZINC_OK)
        return s;
    /* In fp32 mode at stage 3 the master is the working copy's shard: a prefetched gather of
     * the group holds the old values (and one gathered for a forward may not change). */
    if (which == ZINC_STATE_MASTER && e->stage == 3 && e->dtype == ZINC_DTYPE_FP32 &&
        (s = zgather_forget(e, e->plan.params[param].group, fn)) != ZINC_OK)
        return s;
    s = f.dev->iface->upload(f.dev, f.base + f.pos * 4, values, f.n * 4);
    /* ... and with the master in the NVMe file the host shard is a copy of its own */
    if (s == ZINC_OK && which == ZINC_STATE_MASTER && e->stage == 3 &&
        e->dtype == ZINC_DTYPE_FP32 && e->offload_param && zoffload_param16(e) != (void *)e->master)
        s = zoffload_param16_dev(e)->iface->upload(zoffload_param16_dev(e),
                                                   (char *)zoffload_param16(e) + f.pos * 4, values,
                                                   f.n * 4);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "%s: '%s': %s", fn, e->plan.params[param].name, f.dev->err);
    return ZINC_OK;
}

zinc_status zeng_refresh_params(zinc_engine_t *e)
{
    size_t d = zeng_dsize(e);
    /* Offloaded state: the own slices are converted on the host and uploaded in one go. */
    zinc_status s = e->offload ? zoffload_refresh_own(e) : ZINC_OK;
    /* A frozen engine's shard is the value itself, with no master to convert it from: only the
     * gathered copies below are refreshed from it. */
    for (int g = 0; !e->frozen && g < e->plan.ngroups && s == ZINC_OK; g++) {
        const zplan_group *G = &e->plan.groups[g];
        size_t own_flat = G->flat_off + G->slice * (size_t)e->rank;
        const float *src = e->master + (e->stage == 0 ? own_flat : G->shard_off);
        void *dst = (char *)e->param16 + (e->stage == 3 ? G->shard_off : own_flat) * d;
        if (!e->offload)
            s = e->dev->iface->cast(e->dev, dst, e->dtype, src, ZINC_DTYPE_FP32, G->slice, 1.0f);
        if (s == ZINC_OK && e->stage < 3)
            s = e->comm->iface->all_gather(e->comm, (char *)e->param16 + G->flat_off * d, G->padded,
                                           (zdt)e->dtype);
    }
    if (s != ZINC_OK) return zeng_fail(e, s, "refreshing the working parameters failed: %s%s%s",
                                       e->dev->err, e->comm->err, e->host ? e->host->err : "");
    if (e->stage < 3) return ZINC_OK;
    zgather_drop_prefetched(e);
    return zgather_refresh_persistent(e, 0);
}

/* ---- views and introspection -------------------------------------------------------------- */

zinc_status zinc_param_data(zinc_engine_t *e, int param, void **out)
{
    zinc_status s = check_param(e, param, "zinc_param_data");
    if (s != ZINC_OK) return s;
    if (!out) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_param_data: out is NULL");
    size_t d = zeng_dsize(e);
    const zplan_param *P = &e->plan.params[param];
    if (e->stage < 3) {
        *out = (char *)e->param16 + flat_pos(e, param) * d;
        return ZINC_OK;
    }
    const zgroup_state *gs = &e->gstate[P->group];
    if (!gs->held) {
        *out = NULL;
        return zeng_fail(e, ZINC_ERR_USAGE,
                         "zinc_param_data: '%s' (group '%s') is not gathered; at ZeRO stage 3 call "
                         "zinc_gather on its group first", P->name, e->plan.groups[P->group].name);
    }
    if (gs->persistent)
        *out = (char *)e->persist + (gs->persist_off + P->offset) * d;
    else
        *out = (char *)e->gather + (gs->gather_pos + P->offset) * d;
    return ZINC_OK;
}

int zinc_engine_rank(const zinc_engine_t *e) { return e ? e->rank : -1; }
int zinc_engine_world_size(const zinc_engine_t *e) { return e ? e->world_size : 0; }
int zinc_engine_stage(const zinc_engine_t *e) { return e ? e->stage : -1; }
zinc_dtype zinc_engine_dtype(const zinc_engine_t *e) { return e ? e->dtype : ZINC_DTYPE_FP32; }
const char *zinc_engine_comm(const zinc_engine_t *e)
{
    return e ? zcomm_backend_name(e->comm) : NULL;
}
int zinc_engine_grads_bucketed(const zinc_engine_t *e) { return e && e->bucketed; }
int zinc_group_persistent(const zinc_engine_t *e, int group)
{
    return e && e->gstate && group >= 0 && group < e->plan.ngroups &&
           e->gstate[group].persistent;
}
int zinc_engine_group_count(const zinc_engine_t *e) { return e ? e->plan.ngroups : 0; }
int zinc_engine_param_count(const zinc_engine_t *e) { return e ? e->plan.nparams : 0; }
int zinc_engine_at_boundary(const zinc_engine_t *e)
{
    return e && zeng_last_micro(e);
}
int zinc_engine_gather_16bit_on_save(const zinc_engine_t *e)
{
    return e && e->cfg.zero.gather_16bit_weights_on_model_save;
}

int64_t zinc_param_numel(const zinc_engine_t *e, int param)
{
    if (!e || param < 0 || param >= e->plan.nparams) return 0;
    return (int64_t)e->plan.params[param].numel;
}

int zinc_param_group(const zinc_engine_t *e, int param)
{
    if (!e || param < 0 || param >= e->plan.nparams) return -1;
    return e->plan.params[param].group;
}

/* zinc_memory (host = 0) and zinc_memory_host (host = 1): the planned and allocated bytes of one
 * side. */
static zinc_status copy_memory(const zinc_engine_t *e, int host, uint64_t planned[ZINC_MEM_COUNT],
                               uint64_t allocated[ZINC_MEM_COUNT])
{
    if (!e)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL",
                           host ? "zinc_memory_host" : "zinc_memory");
    if (planned) memcpy(planned, host ? e->host_planned : e->planned, sizeof e->planned);
    if (allocated) memcpy(allocated, host ? e->host_allocated : e->allocated, sizeof e->allocated);
    return ZINC_OK;
}

zinc_status zinc_memory(const zinc_engine_t *e, uint64_t planned[ZINC_MEM_COUNT],
                        uint64_t allocated[ZINC_MEM_COUNT])
{
    return copy_memory(e, 0, planned, allocated);
}

zinc_status zinc_memory_host(const zinc_engine_t *e, uint64_t planned[ZINC_MEM_COUNT],
                             uint64_t allocated[ZINC_MEM_COUNT])
{
    return copy_memory(e, 1, planned, allocated);
}

double zeng_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double zeng_lap(double *t)
{
    double now = zeng_now(), dt = now - *t;
    *t = now;
    return dt;
}

zinc_status zinc_step_seconds(const zinc_engine_t *e, double seconds[ZINC_PHASE_COUNT])
{
    /* (a NULL argument with an engine is that engine's last error too, not only the thread's:
     * zinc_last_error(e) showed an older, unrelated one; the cast writes only the error text) */
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_step_seconds: engine is NULL");
    if (!seconds)
        return zeng_fail((zinc_engine_t *)e, ZINC_ERR_INVALID_ARG,
                         "zinc_step_seconds: seconds is NULL");
    memcpy(seconds, e->phase_s, sizeof e->phase_s);
    return ZINC_OK;
}

zinc_status zinc_offload_bytes(const zinc_engine_t *e, uint64_t *to_host, uint64_t *to_device)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_offload_bytes: engine is NULL");
    if (to_host) *to_host = e->offload_bytes[0];
    if (to_device) *to_device = e->offload_bytes[1];
    return ZINC_OK;
}

zinc_status zinc_comm_bytes(const zinc_engine_t *e, uint64_t bytes[ZINC_COLL_COUNT])
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_comm_bytes: engine is NULL");
    if (!bytes)    /* (the engine's last error too, as zinc_step_seconds') */
        return zeng_fail((zinc_engine_t *)e, ZINC_ERR_INVALID_ARG, "zinc_comm_bytes: bytes is NULL");
    memcpy(bytes, e->comm->bytes, sizeof(uint64_t) * ZINC_COLL_COUNT);
    return ZINC_OK;
}

const char *zinc_config_hash(const zinc_engine_t *e) { return e ? e->cfg.hash_hex : ""; }

double zinc_engine_loss_scale(const zinc_engine_t *e)
{
    return e ? e->st.scaler.cur_scale : NAN;
}

int zinc_engine_steps(const zinc_engine_t *e, int64_t *applied, int64_t *skipped)
{
    if (!e) return -1;
    if (applied) *applied = e->st.step;
    if (skipped) *skipped = e->st.skipped;
    return 0;
}

/* A lead of Adam's count or the schedule's position over the applied updates, checked as a
 * checkpoint's (ckpt/state.c): -step..2^53, so that the count it gives is never below 0. */
static zinc_status set_lead(zinc_engine_t *e, int64_t lead, int64_t *dst, const char *fn)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "%s: engine is NULL", fn);
    if (lead < -e->st.step || lead > ZENG_COUNTER_MAX)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "%s: lead %lld is out of range (%lld..2^53: "
                         "the count it gives, the %lld applied updates plus the lead, is at "
                         "least 0)", fn, (long long)lead, (long long)-e->st.step,
                         (long long)e->st.step);
    *dst = lead;
    return ZINC_OK;
}

zinc_status zinc_engine_set_adam_lead(zinc_engine_t *e, int64_t lead)
{
    return set_lead(e, lead, e ? &e->st.adam_lead : NULL, "zinc_engine_set_adam_lead");
}

int64_t zinc_engine_adam_lead(const zinc_engine_t *e) { return e ? e->st.adam_lead : INT64_MIN; }

zinc_status zinc_engine_set_sched_lead(zinc_engine_t *e, int64_t lead)
{
    return set_lead(e, lead, e ? &e->st.sched_lead : NULL, "zinc_engine_set_sched_lead");
}

int64_t zinc_engine_sched_lead(const zinc_engine_t *e) { return e ? e->st.sched_lead : INT64_MIN; }

zinc_status zinc_engine_set_train_state(zinc_engine_t *e, const zinc_train_state_t *s)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_engine_set_train_state: engine is NULL");
    if (!s) return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_engine_set_train_state: state is NULL");
    const zscaler *sc = &e->st.scaler;
    const int fp16 = e->cfg.fp16.enabled || e->cfg.dtype == ZINC_DTYPE_FP16;   /* as zscaler_init */
    const char *bad = NULL;
    /* The same bounds a checkpoint's engine_state must keep (ckpt/state.c): a later save writes
     * these values and a later load must accept them. */
    if (s->applied < 0 || s->applied > ZENG_COUNTER_MAX) bad = "applied";
    else if (s->applied + e->st.adam_lead < 0 || s->applied + e->st.sched_lead < 0)
        bad = "applied (below what the Adam or schedule lead takes off: set the lead first)";
    else if (s->skipped < 0 || s->skipped > ZENG_COUNTER_MAX) bad = "skipped";
    else if (fp16 && s->scaler_scale != 0 && !(isfinite(s->scaler_scale) && s->scaler_scale > 0))
        bad = "scaler_scale";
    else if (fp16 && s->scaler_scale != 0 && sc->dynamic &&
             (s->scaler_hysteresis < 1 || s->scaler_hysteresis > sc->delayed_shift))
        bad = "scaler_hysteresis";
    else if (fp16 && s->scaler_scale != 0 && sc->dynamic &&
             (s->scaler_iter < 0 || s->scaler_iter > ZENG_COUNTER_MAX))
        bad = "scaler_iter";
    else if (fp16 && s->scaler_scale != 0 && sc->dynamic &&
             (s->scaler_last_overflow_iter < -1 || s->scaler_last_overflow_iter > s->scaler_iter))
        bad = "scaler_last_overflow_iter";
    if (bad)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_engine_set_train_state: %s is out of "
                         "range (counters 0..2^53, a finite scale > 0, hysteresis 1..%d, "
                         "last_overflow_iter -1..iter)", bad, sc->delayed_shift);
    /* the gradients of a window in progress go first: a failure there changes no counter */
    zinc_status rs = zeng_restart_window(e, "zinc_engine_set_train_state");
    if (rs != ZINC_OK) return rs;
    e->st.step = s->applied;
    e->st.skipped = s->skipped;
    e->st.micro = 0;
    if (fp16 && s->scaler_scale != 0) {
        e->st.scaler.cur_scale = s->scaler_scale;
        if (sc->dynamic) {
            e->st.scaler.cur_hysteresis = s->scaler_hysteresis;
            e->st.scaler.cur_iter = s->scaler_iter;
            e->st.scaler.last_overflow_iter = s->scaler_last_overflow_iter;
        }
    }
    return ZINC_OK;
}

float zinc_loss_multiplier(const zinc_engine_t *e)
{
    if (!e) return 1.0f;
    return (float)(e->st.scaler.cur_scale / (double)e->cfg.grad_accum);
}

void *zinc_engine_cuda_stream(const zinc_engine_t *e) { return e ? zdev_cuda_stream(e->dev) : NULL; }

int zinc_engine_cuda_device(const zinc_engine_t *e) { return e ? zdev_cuda_ordinal(e->dev) : -1; }

zinc_status zinc_engine_sync(zinc_engine_t *e)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_engine_sync: engine is NULL");
    e->dev->host_waits++;
    zinc_status s = e->dev->iface->sync ? e->dev->iface->sync(e->dev) : ZINC_OK;
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_engine_sync: %s", e->dev->err);
    return ZINC_OK;
}

uint64_t zinc_host_waits(const zinc_engine_t *e) { return e && e->dev ? e->dev->host_waits : 0; }

zinc_status zinc_mean_over_ranks(zinc_engine_t *e, double *values, int n)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_mean_over_ranks: engine is NULL");
    /* Before finalize the ranks are not known to agree (config, registration), and a collective
     * here could pair with another rank's finalize collectives: refused, like every collective
     * but zinc_finalize itself. */
    if (!e->finalized)
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_mean_over_ranks: called before zinc_finalize");
    if (n < 0 || (n > 0 && !values))
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_mean_over_ranks: n = %d, values %p", n,
                         (void *)values);
    zinc_status s = zcomm_host_all_reduce_f64(e->comm, values, (size_t)n);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_mean_over_ranks: %s", e->comm->err);
    for (int i = 0; i < n; i++) values[i] /= (double)e->world_size;
    return ZINC_OK;
}

zinc_status zinc_broadcast(zinc_engine_t *e, void *buf, size_t bytes, int root)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_broadcast: engine is NULL");
    /* Refused before finalize for the reason zinc_mean_over_ranks is. */
    if (!e->finalized)
        return zeng_fail(e, ZINC_ERR_USAGE, "zinc_broadcast: called before zinc_finalize");
    if (root < 0 || root >= e->world_size)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG,
                         "zinc_broadcast: root %d is not a rank of a world of %d", root,
                         e->world_size);
    if (bytes > 0 && !buf)
        return zeng_fail(e, ZINC_ERR_INVALID_ARG, "zinc_broadcast: buf is NULL for %zu bytes",
                         bytes);
    if (e->world_size == 1 || bytes == 0) return ZINC_OK;
    zinc_status s = zcomm_host_broadcast(e->comm, buf, bytes, root);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_broadcast: %s", e->comm->err);
    return ZINC_OK;
}

/* The engine's last error, or the calling thread's when e is NULL (include/zinc.h). */
const char *zinc_last_error(const zinc_engine_t *e)
{
    return e ? e->err : zerr_thread_message();
}

const char *zinc_engine_config_json(const zinc_engine_t *e)
{
    return e && e->config_json ? e->config_json : "";
}

const char *zinc_config_warnings(const zinc_engine_t *e)
{
    return e && e->config_warnings ? e->config_warnings : "";
}

/* ---- the view for the layer above (view.h) ----------------------------------------------- */

void zeng_view_get(zinc_engine_t *e, zeng_view *out)
{
    zdev_t *p16_dev;
    void *p16 = param16_of(e, &p16_dev);
    *out = (zeng_view){.dev = e->dev, .state_dev = state_dev(e), .comm = e->comm, .rank = e->rank,
                       .world_size = e->world_size, .stage = e->stage, .finalized = e->finalized,
                       .dtype = e->dtype, .plan = &e->plan, .cfg = &e->cfg, .st = &e->st,
                       .master = e->master, .m = e->m, .v = e->v,
                       .param16 = p16, .param16_dev = p16_dev,
                       .err = e->err, .partial_load = e->partial_load};
}

void zeng_state_rewrite(zinc_engine_t *e, int phase) { zoffload_nvme_restore(e, phase); }

void zeng_set_partial_load(zinc_engine_t *e, const char *tagdir)
{
    snprintf(e->partial_load, sizeof e->partial_load, "%s", tagdir ? tagdir : "");
}

zeng_background *zeng_background_slot(zinc_engine_t *e) { return &e->background; }

zinc_status zeng_background_poll(zinc_engine_t *e)
{
    return e->background.work && e->background.poll ? e->background.poll(e) : ZINC_OK;
}
