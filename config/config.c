/*
 * config.c — DeepSpeed-style JSON config → one validated zcfg (see config.h, docs/config.md):
 * the entry points, the diagnostics, the defaults and DeepSpeed's batch rule.
 *
 * Every section is read with DeepSpeed's defaults and meanings (deepspeed/runtime/config.py,
 * zero/config.py, precision_config.py, lr_schedules.py, engine.py's optimizer choice). Where
 * DeepSpeed is lenient — unknown keys, features it would silently skip — zinc reports: every
 * problem becomes one "key.path: what" line in the diagnostics, and parsing goes on so that
 * one run lists all of them. config_internal.h says which file holds which part.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "config/config_internal.h"

/* ---- diagnostics -------------------------------------------------------------------------- */

static void add_line(zcctx *x, int is_error, const char *path, const char *fmt, va_list ap)
{
    char msg[1024], line[1600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (is_error && x->demote) {
        size_t k = strlen(msg);
        snprintf(msg + k, sizeof msg - k, "; %s", x->demote);
        is_error = 0;
    }
    if (path && path[0])
        snprintf(line, sizeof line, "%s: %s", path, msg);
    else
        snprintf(line, sizeof line, "%s", msg);
    char ***arr = is_error ? &x->diag->errors : &x->diag->warnings;
    int *n = is_error ? &x->diag->nerrors : &x->diag->nwarnings;
    char **grown = realloc(*arr, (size_t)(*n + 1) * sizeof **arr);
    char *copy = strdup(line);
    if (!grown || !copy) {
        free(copy);
        if (grown) *arr = grown;
        x->oom = 1;
        return;
    }
    *arr = grown;
    (*arr)[(*n)++] = copy;
}

void zc_error(zcctx *x, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_line(x, 1, path, fmt, ap);
    va_end(ap);
}

void zc_warn(zcctx *x, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_line(x, 0, path, fmt, ap);
    va_end(ap);
}

const char *zc_path(char *buf, size_t n, const char *sec, const char *key)
{
    if (sec && sec[0])
        snprintf(buf, n, "%s.%s", sec, key);
    else
        snprintf(buf, n, "%s", key);
    return buf;
}

void zcfg_diag_free(zcfg_diag *d)
{
    if (!d) return;
    for (int i = 0; i < d->nerrors; i++) free(d->errors[i]);
    for (int i = 0; i < d->nwarnings; i++) free(d->warnings[i]);
    free(d->errors);
    free(d->warnings);
    memset(d, 0, sizeof *d);
}

/* ---- defaults ----------------------------------------------------------------------------- */

void zcfg_defaults(zcfg *c)
{
    memset(c, 0, sizeof *c);
    c->train_batch_size = 1;
    c->micro_batch = 1;
    c->grad_accum = 1;
    c->gradient_clipping = 1.0; /* DeepSpeed >= 0.19.3 (PR #8068); 0.19.2 and older: 0 */
    c->steps_per_print = 10;
    c->prescale_gradients = 0;
    c->gradient_predivide_factor = 1.0;
    c->communication_data_type = ZINC_DTYPE_FP32;
    c->wall_clock_breakdown = 0;
    c->dataloader_drop_last = 0;
    c->managed_accumulation = 1;
    c->dtype = ZINC_DTYPE_FP32;
    c->grad_accum_dtype = ZINC_DTYPE_FP32;

    c->fp16.enabled = 0;
    c->fp16.loss_scale = 0.0;
    c->fp16.initial_scale_power = 16;
    c->fp16.loss_scale_window = 1000;
    c->fp16.hysteresis = 2;
    c->fp16.consecutive_hysteresis = 0;
    c->fp16.min_loss_scale = 1;

    c->optim.enabled = 1;
    c->optim.type_adamw = 1;
    c->optim.lr = 1e-3;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.999;
    c->optim.eps = 1e-8;
    c->optim.weight_decay = 0.0;
    c->optim.bias_correction = 1;

    zcfg_sched *s = &c->sched;
    s->type = ZSCHED_NONE;
    s->warmup_min_lr = 0.0;
    s->warmup_max_lr = 1e-3;
    s->warmup_num_steps = 1000;
    s->warmup_type = ZWARMUP_LOG;
    s->total_num_steps = 0;
    s->warmup_min_ratio = 0.0;
    s->cos_min_ratio = 1e-4;
    s->cycle_min_lr = 0.0;
    s->cycle_max_lr = 0.0;
    s->decay_lr_rate = 0.0;
    s->cycle_first_step_size = 2000;
    s->cycle_second_step_size = ZCFG_NONE;
    s->cycle_first_stair_count = 0;
    s->cycle_second_stair_count = ZCFG_NONE;
    s->decay_step_size = 0;
    s->cycle_momentum = 1;
    s->cycle_min_mom = 0.8;
    s->cycle_max_mom = 0.9;
    s->decay_mom_rate = 0.0;
    s->lr_range_test_min_lr = 1e-3;
    s->lr_range_test_step_size = 2000;
    s->lr_range_test_step_rate = 1.0;
    s->lr_range_test_staircase = 0;

    zcfg_zero *z = &c->zero;
    z->stage = 0;
    z->reduce_bucket_size = 500000000;
    z->allgather_bucket_size = 500000000;
    z->overlap_comm = 0;
    z->contiguous_gradients = 1;
    z->reduce_scatter = 1;
    z->allgather_partitions = 1;
    z->round_robin_gradients = 0;
    z->sub_group_size = 1000000000;
    z->max_live_parameters = 1000000000;
    z->max_reuse_distance = 1000000000;
    z->prefetch_bucket_size = 50000000;
    z->param_persistence_threshold = 100000;
    z->gather_16bit_weights_on_model_save = 0;
    z->offload_optimizer = 0;
    z->offload_param = 0;
    z->offload_pin = 1;          /* DeepSpeed 0.19.8: offload_optimizer.pin_memory defaults to true */
    z->nvme_path[0] = 0;
    z->nvme_buffer_count = 4;
    z->nvme_pipeline_read = 0;
    z->nvme_pipeline_write = 0;
    c->aio = (zcfg_aio){.block_size = 1048576, .queue_depth = 8, .intra_op_parallelism = 1,
                        .single_submit = 0, .overlap_events = 1};

    c->ckpt.tag_validation = 1;
    c->ckpt.load_universal = 0;
    c->ckpt.use_node_local_storage = 0;
    c->ckpt.parallel_write = 0;

    c->zinc.ckpt_compression_level = 3;
    c->zinc.ckpt_async = 0;
    c->zinc.ckpt_keep_last = 0;
    c->zinc.ckpt_chunk_bytes = (size_t)4 << 20;
    c->zinc.comm_timeout_s = 300.0;
    c->zinc.grad_buckets = 2;
    c->zinc.gather_buffers = 2;
    c->zinc.nvme_checksum = 1;
    c->zinc.device_memory_limit = 0;
    c->zinc.host_memory_limit = 0;
    c->zinc.csv_monitor = 0;
    c->zinc.csv_output_path[0] = 0;
    snprintf(c->zinc.csv_job_name, sizeof c->zinc.csv_job_name, "%s", "DeepSpeedJobName");

    (void)zc_hash(c);
}

/* ---- batch sizes -------------------------------------------------------------------------- */

zinc_status zcfg_set_batch(zcfg *c, int64_t micro_batch, int64_t grad_accum, int64_t world_size)
{
    int64_t tbs;
    /* The parser's rule for a given micro batch and steps (parse_batch below). */
    if (micro_batch < 1 || grad_accum < 1 || __builtin_mul_overflow(micro_batch, grad_accum, &tbs) ||
        __builtin_mul_overflow(tbs, world_size, &tbs))
        return ZINC_ERR_INVALID_ARG;
    /* nor a value the parser refuses as the 64-bit range's end (config_values.c): the resolved
     * config, written into checkpoints, must parse again */
    if (micro_batch == INT64_MAX || grad_accum == INT64_MAX || tbs == INT64_MAX)
        return ZINC_ERR_INVALID_ARG;
    c->micro_batch = micro_batch;
    c->grad_accum = grad_accum;
    c->train_batch_size = tbs;
    return zc_hash(c) == 0 ? ZINC_OK : ZINC_ERR_NOMEM;
}

/* Reads one batch key, letting an override fill "auto" or replace the file's value. Returns
 * V_SET, V_ABSENT or V_BAD. `derivable`: "auto" may be left to the batch rule. */
static int batch_key(zcctx *x, json_object *root, const char *key, int64_t override,
                     const char *flag, int derivable, int64_t *out)
{
    json_object *v;
    int present = zc_member(root, key, &v) && v; /* null is DeepSpeed's None */
    if (present && zc_is_auto(v)) {
        if (override > 0) {
            *out = override;
            return V_SET;
        }
        if (derivable) return V_ABSENT;
        zc_error(x, key, "\"auto\" needs a value: write the number (zinc train and config check: %s "
                 "fills it)", flag);
        return V_BAD;
    }
    int64_t n = 0;
    int r = present ? zc_get_int(x, root, "", key, 1, I64_MAX, &n) : V_ABSENT;
    if (r == V_BAD) return V_BAD;
    if (override > 0) {
        if (r == V_SET && n != override)
            zc_warn(x, key, "the file's %lld is replaced by the override (%s) %lld", (long long)n,
                    flag, (long long)override);
        *out = override;
        return V_SET;
    }
    if (r == V_SET) *out = n;
    return r;
}

/* DeepSpeed's _set_batch_related_parameters and _batch_assertion (runtime/config.py). */
static void parse_batch(zcctx *x, json_object *root, const zcfg_overrides *ov, zcfg *c)
{
    int64_t tbs = 0, mb = 0, ga = 0;
    int64_t w = ov->world_size;
    int rt = batch_key(x, root, "train_batch_size", ov->train_batch_size, "--train-batch-size", 1,
                       &tbs);
    int rm = batch_key(x, root, "train_micro_batch_size_per_gpu", ov->micro_batch,
                       "--micro-batch", 0, &mb);
    int rg = batch_key(x, root, "gradient_accumulation_steps", ov->grad_accum, "--grad-accum", 0,
                       &ga);
    if (rt == V_BAD || rm == V_BAD || rg == V_BAD || w <= 0) return;
    int t = rt == V_SET, m = rm == V_SET, g = rg == V_SET;
    if (t && m && g) {
        /* all given: nothing to derive */
    } else if (t && m) {
        ga = tbs / mb / w;
        if (ga <= 0) {
            zc_error(x, "gradient_accumulation_steps",
                     "derived as train_batch_size %lld // train_micro_batch_size_per_gpu %lld // "
                     "world size %lld = 0; train_batch_size must be at least micro batch x world "
                     "size",
                     (long long)tbs, (long long)mb, (long long)w);
            return;
        }
    } else if (t && g) {
        mb = tbs / w / ga;
        if (mb <= 0) {
            zc_error(x, "train_micro_batch_size_per_gpu",
                     "derived as train_batch_size %lld // world size %lld // "
                     "gradient_accumulation_steps %lld = 0; it must be > 0",
                     (long long)tbs, (long long)w, (long long)ga);
            return;
        }
    } else if (m && g) {
        if (__builtin_mul_overflow(mb, ga, &tbs) || __builtin_mul_overflow(tbs, w, &tbs)) {
            zc_error(x, "train_batch_size", "micro batch x accumulation x world size overflows");
            return;
        }
    } else if (t) {
        ga = 1;
        mb = tbs / w;
        if (mb <= 0) {
            zc_error(x, "train_micro_batch_size_per_gpu",
                     "derived as train_batch_size %lld // world size %lld = 0; it must be > 0",
                     (long long)tbs, (long long)w);
            return;
        }
    } else if (m) {
        ga = 1;
        if (__builtin_mul_overflow(mb, w, &tbs)) {
            zc_error(x, "train_batch_size", "micro batch x world size overflows");
            return;
        }
    } else {
        zc_error(x, "train_batch_size",
                 "neither train_batch_size nor train_micro_batch_size_per_gpu is given (DeepSpeed "
                 "needs one of them to derive the others; --micro-batch also gives it)");
        return;
    }
    int64_t prod;
    if (__builtin_mul_overflow(mb, ga, &prod) || __builtin_mul_overflow(prod, w, &prod) ||
        prod != tbs) {
        zc_error(x, "train_batch_size",
                 "%lld != train_micro_batch_size_per_gpu %lld x gradient_accumulation_steps %lld x "
                 "world size %lld (= %lld); give values that agree, or leave one of the three out "
                 "of the config so that it is derived (zinc train: --micro-batch or --grad-accum "
                 "beside --train-batch-size)",
                 (long long)tbs, (long long)mb, (long long)ga, (long long)w, (long long)prod);
        return;
    }
    c->train_batch_size = tbs;
    c->micro_batch = mb;
    c->grad_accum = ga;
}

/* The "hash" member that zinc config check --json adds to the resolved config: 16 lowercase hex
 * digits into out (17 bytes), "" when absent. It changes nothing; the caller compares it with
 * the hash the values resolve to. */
static void read_hash_member(zcctx *x, json_object *root, char *out)
{
    json_object *v;
    out[0] = 0;
    if (!zc_member(root, "hash", &v) || !v) return;
    const char *h = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    if (!h || strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16) {
        zc_error(x, "hash", "expected the 16 lowercase hex digits zinc config check --json "
                 "writes, got %s", json_object_to_json_string(v));
        return;
    }
    memcpy(out, h, 17);
}

/* ---- entry points ------------------------------------------------------------------------- */

zinc_status zcfg_parse_text(const char *json, const char *path, const zcfg_overrides *ov,
                            zcfg *out, zcfg_diag *diag)
{
    zcfg_diag local = {0};
    if (!diag) diag = &local;
    memset(diag, 0, sizeof *diag);
    zcctx x = {diag, 0, NULL};
    if (!json || !out) {
        zc_error(&x, "", "zcfg_parse_text: %s is NULL", !json ? "json" : "out");
        zcfg_diag_free(&local);
        return ZINC_ERR_INVALID_ARG;
    }
    static const zcfg_overrides none = {1, 0, -1.0, 0, 0};
    if (!ov) ov = &none;

    zcfg c;
    zcfg_defaults(&c);
    char given_hash[17] = "";
    if (ov->world_size <= 0)
        zc_error(&x, "world_size", "must be > 0, got %d (the number of data-parallel ranks)",
                 ov->world_size);

    json_object *root = zc_json_parse(&x, json, path ? path : "<config>");
    if (root) {
        zc_json_duplicates(&x, json);
        if (!json_object_is_type(root, json_type_object)) {
            zc_error(&x, "", "%s: the config must be a JSON object {...}",
                     path ? path : "<config>");
        } else {
            zk_check(&x, root, "", &zk_top);
            zc_parse_precision(&x, root, &c);
            zc_parse_optimizer(&x, root, ov, &c);
            zc_parse_scheduler(&x, root, ov, &c);
            zc_parse_zero(&x, root, &c);
            zc_parse_checkpoint(&x, root, &c);
            zc_parse_csv_monitor(&x, root, &c);
            zc_parse_aio(&x, root, &c);
            zc_parse_zinc(&x, root, &c);
            zc_parse_scalars(&x, root, &c);
            parse_batch(&x, root, ov, &c);
            zc_check_precision_stage(&x, &c);
            zc_check_pairs(&x, root, &c);
            read_hash_member(&x, root, given_hash);
        }
        json_object_put(root);
    }

    zinc_status s = ZINC_OK;
    if (x.oom)
        s = ZINC_ERR_NOMEM;
    else if (diag->nerrors)
        s = ZINC_ERR_CONFIG;
    else if (zc_hash(&c) != 0)
        s = ZINC_ERR_NOMEM;
    if (s == ZINC_OK && given_hash[0] && strcmp(given_hash, c.hash_hex) != 0)
        zc_warn(&x, "hash", "the file says %s but its values resolve to %s (edited since zinc "
                "config check --json wrote it, or read with other overrides); %s is used",
                given_hash, c.hash_hex, c.hash_hex);
    if (s == ZINC_OK) *out = c;
    zcfg_diag_free(&local);
    return s;
}

zinc_status zcfg_parse_scheduler_text(const char *section, double optimizer_lr, zcfg_sched *out,
                                      zcfg_diag *diag)
{
    zcfg_diag local = {0};
    if (!diag) diag = &local;
    memset(diag, 0, sizeof *diag);
    zcctx x = {diag, 0, NULL};
    if (!section || !out) {
        zc_error(&x, "", "zcfg_parse_scheduler_text: %s is NULL", !section ? "section" : "out");
        zcfg_diag_free(&local);
        return ZINC_ERR_INVALID_ARG;
    }
    static const zcfg_overrides none = {1, 0, -1.0, 0, 0};
    zcfg c;
    zcfg_defaults(&c);
    c.optim.lr = optimizer_lr;  /* what WarmupLR's warmup_max_lr falls back to */
    json_object *sec = zc_json_parse(&x, section, "scheduler");
    if (sec) {
        zc_json_duplicates(&x, section);
        /* The section under a root of its own, so that the config's reader and its key paths
         * ("scheduler.params.warmup_num_steps") serve unchanged. */
        json_object *root = json_object_new_object();
        if (!root || json_object_object_add(root, "scheduler", sec) != 0) {
            x.oom = 1;
            json_object_put(sec);
        } else {
            zc_parse_scheduler(&x, root, &none, &c);
        }
        json_object_put(root);
    }
    zinc_status s = x.oom ? ZINC_ERR_NOMEM : diag->nerrors ? ZINC_ERR_CONFIG : ZINC_OK;
    if (s == ZINC_OK) *out = c.sched;
    zcfg_diag_free(&local);
    return s;
}

zinc_status zcfg_parse_file(const char *path, const zcfg_overrides *ov, zcfg *out, zcfg_diag *diag)
{
    zcfg_diag local = {0};
    if (!diag) diag = &local;
    memset(diag, 0, sizeof *diag);
    zcctx x = {diag, 0, NULL};
    if (!path) {
        zc_error(&x, "", "zcfg_parse_file: path is NULL");
        zcfg_diag_free(&local);
        return ZINC_ERR_INVALID_ARG;
    }
    char *buf = NULL;
    size_t len = 0;
    int err = zfile_read_regular(path, &buf, &len);
    if (err || !buf) {
        zc_error(&x, "", "%s: cannot read the config file: %s", path, zfile_strerror(err ? err : EIO));
        free(buf);
        zcfg_diag_free(&local);
        return err == ENOMEM ? ZINC_ERR_NOMEM : ZINC_ERR_IO;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        zc_error(&x, "", "%s: the config file contains a NUL byte; it is not JSON text", path);
        free(buf);
        zcfg_diag_free(&local);
        return ZINC_ERR_CONFIG;
    }
    zinc_status s = zcfg_parse_text(buf, path, ov, out, diag);
    free(buf);
    if (diag == &local) zcfg_diag_free(&local);
    return s;
}
