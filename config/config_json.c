/*
 * config_json.c — the JSON text side of the config module: strict parsing with line:column
 * errors, duplicate-key detection, and the canonical resolved JSON whose XXH64 is the config
 * hash.
 *
 * json-c builds the objects; base/json_strict.c holds the text to JSON's own rules on top (no
 * NaN, single quotes, invalid UTF-8, control characters, "\u0000", leading zeros or integers
 * beyond 64 bits) and finds duplicate keys, which json-c would keep the last of without a word.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/json_strict.h"
#include "config/config_internal.h"

/* ---- parsing ------------------------------------------------------------------------------ */

static void ignore_dup(void *ctx, const char *path, const char *key, size_t a, size_t b)
{
    (void)ctx, (void)path, (void)key, (void)a, (void)b;
}

json_object *zc_json_parse(zcctx *x, const char *text, const char *label)
{
    if (!label) label = "<config>";
    size_t len = strlen(text);
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        x->oom = 1;
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    /* json-c's length argument is an int. */
    if (len > (size_t)0x7fffffff) {
        zc_error(x, "", "%s: config text is larger than 2 GiB", label);
        json_tokener_free(tok);
        return NULL;
    }
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    int line, col;
    if (!root) {
        if (err == json_tokener_success) { /* the text is `null` */
            zc_error(x, "", "%s: the config is null, not a JSON object", label);
        } else if (err == json_tokener_continue) {
            zjson_line_col(text, len, &line, &col);
            zc_error(x, "",
                     "%s:%d:%d: malformed JSON: unexpected end of input (an unclosed { [ or \")",
                     label, line, col);
        } else {
            /* The tokener stops on the offending character. */
            zjson_line_col(text, end, &line, &col);
            zc_error(x, "", "%s:%d:%d: malformed JSON: %s", label, line, col,
                     json_tokener_error_desc(err));
        }
        json_tokener_free(tok);
        return NULL;
    }
    /* json-c accepts what JSON does not (see the top of this file): the strict check, with
     * duplicates left to zc_json_duplicates, which names every one of them. */
    size_t bad = 0;
    char why[200];
    char where[512] = "";
    int is_value = 0;
    zjson_opts o = {0, ignore_dup, NULL, where, sizeof where, &is_value};
    int rc = zjson_strict(text, len, &o, &bad, why, sizeof why);
    if (rc == -2) {
        x->oom = 1;
    } else if (rc && is_value && where[0]) {
        /* Well-formed, but the number cannot be held: an error of that key. */
        zjson_line_col(text, bad, &line, &col);
        zc_error(x, where, "%s (line %d:%d)", why, line, col);
    } else if (rc) {
        zjson_line_col(text, bad, &line, &col);
        zc_error(x, "", "%s:%d:%d: malformed JSON: %s", label, line, col, why);
    }
    if (rc) {
        json_object_put(root);
        root = NULL;
    }
    json_tokener_free(tok);
    return root;
}

/* ---- duplicate keys ----------------------------------------------------------------------- */

typedef struct {
    zcctx *x;
    const char *text;
} dupctx;

static void report_dup(void *ctx, const char *path, const char *key, size_t first, size_t dup)
{
    dupctx *d = ctx;
    char kp[1024];
    int l1, c1, l2, c2;
    zjson_line_col(d->text, first, &l1, &c1);
    zjson_line_col(d->text, dup, &l2, &c2);
    zc_path(kp, sizeof kp, path, key);
    zc_error(d->x, kp, "duplicate key (at line %d, first at line %d); keep one", l2, l1);
}

void zc_json_duplicates(zcctx *x, const char *text)
{
    dupctx d = {x, text};
    zjson_opts o = {0, report_dup, &d, NULL, 0, NULL};
    size_t bad;
    char why[64];
    if (zjson_strict(text, strlen(text), &o, &bad, why, sizeof why) == -2) x->oom = 1;
}

/* ---- canonical resolved JSON -------------------------------------------------------------- */

/* A double printed with the fewest digits that read back to the same value, so the text is
 * readable ("0.001", not "0.0010000000000000000208") and exact. */
static json_object *num(double v)
{
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e16) {
        /* Whole numbers in full ("300.0", "500000000.0"), not "3e+02". */
        snprintf(buf, sizeof buf, "%.1f", v);
        return json_object_new_double_s(v, buf);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* Keep it a JSON number that reads as a float where it looks like an integer. */
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    return json_object_new_double_s(v, buf);
}

static json_object *i64(int64_t v) { return json_object_new_int64(v); }
static json_object *none_or_i64(int64_t v) { return v == ZCFG_NONE ? NULL : i64(v); }
static json_object *boolean(int v) { return json_object_new_boolean(v != 0); }
static json_object *str(const char *s) { return json_object_new_string(s); }

/* The offload device as the file named it ("nvme" stays "nvme": the resolved JSON must resolve
 * to the same config). */
static const char *offload_device(int d)
{
    return d == ZCFG_OFFLOAD_NVME ? "nvme" : d == ZCFG_OFFLOAD_CPU ? "cpu" : "none";
}

static const char *dtype_str(zinc_dtype d)
{
    return d == ZINC_DTYPE_FP16 ? "fp16" : d == ZINC_DTYPE_BF16 ? "bf16" : "fp32";
}

static json_object *sched_json(const zcfg_sched *s)
{
    static const char *names[] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                  "OneCycle", "LRRangeTest"};
    json_object *o = json_object_new_object(), *p = json_object_new_object();
    json_object_object_add(o, "type", str(names[s->type]));
    const char *wt = s->warmup_type == ZWARMUP_LINEAR ? "linear" : "log";
    switch (s->type) {
    case ZSCHED_WARMUP_LR:
    case ZSCHED_WARMUP_DECAY_LR:
        json_object_object_add(p, "warmup_min_lr", num(s->warmup_min_lr));
        json_object_object_add(p, "warmup_max_lr", num(s->warmup_max_lr));
        json_object_object_add(p, "warmup_num_steps", i64(s->warmup_num_steps));
        json_object_object_add(p, "warmup_type", str(wt));
        if (s->type == ZSCHED_WARMUP_DECAY_LR)
            json_object_object_add(p, "total_num_steps", i64(s->total_num_steps));
        break;
    case ZSCHED_WARMUP_COSINE_LR:
        json_object_object_add(p, "total_num_steps", i64(s->total_num_steps));
        json_object_object_add(p, "warmup_min_ratio", num(s->warmup_min_ratio));
        json_object_object_add(p, "warmup_num_steps", i64(s->warmup_num_steps));
        json_object_object_add(p, "cos_min_ratio", num(s->cos_min_ratio));
        json_object_object_add(p, "warmup_type", str(wt));
        break;
    case ZSCHED_ONE_CYCLE:
        json_object_object_add(p, "cycle_min_lr", num(s->cycle_min_lr));
        json_object_object_add(p, "cycle_max_lr", num(s->cycle_max_lr));
        json_object_object_add(p, "decay_lr_rate", num(s->decay_lr_rate));
        json_object_object_add(p, "cycle_first_step_size", i64(s->cycle_first_step_size));
        json_object_object_add(p, "cycle_second_step_size", none_or_i64(s->cycle_second_step_size));
        json_object_object_add(p, "cycle_first_stair_count", i64(s->cycle_first_stair_count));
        json_object_object_add(p, "cycle_second_stair_count",
                               none_or_i64(s->cycle_second_stair_count));
        json_object_object_add(p, "decay_step_size", i64(s->decay_step_size));
        json_object_object_add(p, "cycle_momentum", boolean(s->cycle_momentum));
        json_object_object_add(p, "cycle_min_mom", num(s->cycle_min_mom));
        json_object_object_add(p, "cycle_max_mom", num(s->cycle_max_mom));
        json_object_object_add(p, "decay_mom_rate", num(s->decay_mom_rate));
        break;
    case ZSCHED_LR_RANGE_TEST:
        json_object_object_add(p, "lr_range_test_min_lr", num(s->lr_range_test_min_lr));
        json_object_object_add(p, "lr_range_test_step_size", i64(s->lr_range_test_step_size));
        json_object_object_add(p, "lr_range_test_step_rate", num(s->lr_range_test_step_rate));
        json_object_object_add(p, "lr_range_test_staircase", boolean(s->lr_range_test_staircase));
        break;
    case ZSCHED_NONE:
    default:
        break;
    }
    json_object_object_add(o, "params", p);
    return o;
}

/* The resolved config as a DeepSpeed-style document: parsing it again gives the same zcfg
 * (tests rely on that). Members are in a fixed order, so equal configs give equal text. */
static json_object *to_object(const zcfg *c)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "train_batch_size", i64(c->train_batch_size));
    json_object_object_add(r, "train_micro_batch_size_per_gpu", i64(c->micro_batch));
    json_object_object_add(r, "gradient_accumulation_steps", i64(c->grad_accum));
    json_object_object_add(r, "gradient_clipping", num(c->gradient_clipping));
    json_object_object_add(r, "steps_per_print", i64(c->steps_per_print));
    json_object_object_add(r, "prescale_gradients", boolean(c->prescale_gradients));
    json_object_object_add(r, "gradient_predivide_factor", num(c->gradient_predivide_factor));
    json_object_object_add(r, "communication_data_type", str(dtype_str(c->communication_data_type)));
    /* Only when it is not the working dtype: the configs without it keep their hash. */
    if (c->grad_accum_dtype != c->dtype) {
        json_object *dt = json_object_new_object();
        json_object_object_add(dt, "grad_accum_dtype", str(dtype_str(c->grad_accum_dtype)));
        json_object_object_add(r, "data_types", dt);
    }
    json_object_object_add(r, "wall_clock_breakdown", boolean(c->wall_clock_breakdown));
    /* Only when set: a data-loader key, not the engine's; the configs without it keep the hash
     * (and so the checkpoints' config check) they had before zinc read it. */
    if (c->dataloader_drop_last)
        json_object_object_add(r, "dataloader_drop_last", boolean(1));
    /* Only when false, for the same reason: the configs without it keep their hash. */
    if (!c->managed_accumulation)
        json_object_object_add(r, "managed_gradient_accumulation", boolean(0));

    json_object *f = json_object_new_object();
    json_object_object_add(f, "enabled", boolean(c->fp16.enabled));
    json_object_object_add(f, "loss_scale", num(c->fp16.loss_scale));
    json_object_object_add(f, "initial_scale_power", i64(c->fp16.initial_scale_power));
    json_object_object_add(f, "loss_scale_window", i64(c->fp16.loss_scale_window));
    json_object_object_add(f, "hysteresis", i64(c->fp16.hysteresis));
    json_object_object_add(f, "consecutive_hysteresis", boolean(c->fp16.consecutive_hysteresis));
    json_object_object_add(f, "min_loss_scale", i64(c->fp16.min_loss_scale));
    json_object_object_add(r, "fp16", f);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "enabled", boolean(c->dtype == ZINC_DTYPE_BF16));
    json_object_object_add(r, "bf16", b);

    json_object *o = json_object_new_object(), *op = json_object_new_object();
    json_object_object_add(o, "type", str(c->optim.type_adamw ? "AdamW" : "Adam"));
    json_object_object_add(op, "lr", num(c->optim.lr));
    json_object *betas = json_object_new_array();
    json_object_array_add(betas, num(c->optim.beta1));
    json_object_array_add(betas, num(c->optim.beta2));
    json_object_object_add(op, "betas", betas);
    json_object_object_add(op, "eps", num(c->optim.eps));
    json_object_object_add(op, "weight_decay", num(c->optim.weight_decay));
    json_object_object_add(op, "bias_correction", boolean(c->optim.bias_correction));
    json_object_object_add(op, "adam_w_mode", boolean(c->optim.type_adamw));
    json_object_object_add(o, "params", op);
    json_object_object_add(r, "optimizer", o);

    if (c->sched.type != ZSCHED_NONE) json_object_object_add(r, "scheduler", sched_json(&c->sched));

    const zcfg_zero *z = &c->zero;
    json_object *zo = json_object_new_object();
    json_object_object_add(zo, "stage", i64(z->stage));
    json_object_object_add(zo, "reduce_bucket_size", i64(z->reduce_bucket_size));
    json_object_object_add(zo, "allgather_bucket_size", i64(z->allgather_bucket_size));
    json_object_object_add(zo, "overlap_comm", boolean(z->overlap_comm));
    json_object_object_add(zo, "contiguous_gradients", boolean(z->contiguous_gradients));
    json_object_object_add(zo, "reduce_scatter", boolean(z->reduce_scatter));
    json_object_object_add(zo, "allgather_partitions", boolean(z->allgather_partitions));
    json_object_object_add(zo, "round_robin_gradients", boolean(z->round_robin_gradients));
    json_object_object_add(zo, "sub_group_size", i64(z->sub_group_size));
    json_object_object_add(zo, "stage3_max_live_parameters", i64(z->max_live_parameters));
    json_object_object_add(zo, "stage3_max_reuse_distance", i64(z->max_reuse_distance));
    json_object_object_add(zo, "stage3_prefetch_bucket_size", i64(z->prefetch_bucket_size));
    json_object_object_add(zo, "stage3_param_persistence_threshold",
                           i64(z->param_persistence_threshold));
    json_object_object_add(zo, "stage3_gather_16bit_weights_on_model_save",
                           boolean(z->gather_16bit_weights_on_model_save));
    json_object *oo = json_object_new_object(), *opp = json_object_new_object();
    json_object_object_add(oo, "device", str(offload_device(z->offload_optimizer)));
    json_object_object_add(oo, "pin_memory", boolean(z->offload_pin));
    json_object_object_add(opp, "device", str(offload_device(z->offload_param)));
    /* Only with "nvme" (and the aio section below): the other configs keep their hash. */
    if (z->offload_optimizer == ZCFG_OFFLOAD_NVME) {
        json_object_object_add(oo, "nvme_path", str(z->nvme_path));
        json_object_object_add(oo, "buffer_count", i64(z->nvme_buffer_count));
        json_object_object_add(oo, "pipeline_read", boolean(z->nvme_pipeline_read));
        json_object_object_add(oo, "pipeline_write", boolean(z->nvme_pipeline_write));
        json_object *aio = json_object_new_object();
        json_object_object_add(aio, "block_size", i64(c->aio.block_size));
        json_object_object_add(aio, "queue_depth", i64(c->aio.queue_depth));
        json_object_object_add(aio, "intra_op_parallelism", i64(c->aio.intra_op_parallelism));
        json_object_object_add(aio, "single_submit", boolean(c->aio.single_submit));
        json_object_object_add(aio, "overlap_events", boolean(c->aio.overlap_events));
        json_object_object_add(r, "aio", aio);
    }
    json_object_object_add(zo, "offload_optimizer", oo);
    json_object_object_add(zo, "offload_param", opp);
    json_object_object_add(r, "zero_optimization", zo);

    static const char *tv[] = {"Ignore", "Warn", "Fail"};
    json_object *ck = json_object_new_object(), *pw = json_object_new_object();
    json_object_object_add(ck, "tag_validation", str(tv[c->ckpt.tag_validation]));
    json_object_object_add(ck, "load_universal", boolean(c->ckpt.load_universal));
    json_object_object_add(ck, "use_node_local_storage", boolean(c->ckpt.use_node_local_storage));
    json_object_object_add(pw, "pipeline_stage", boolean(c->ckpt.parallel_write));
    json_object_object_add(ck, "parallel_write", pw);
    json_object_object_add(r, "checkpoint", ck);

    json_object *cm = json_object_new_object();
    json_object_object_add(cm, "enabled", boolean(c->zinc.csv_monitor));
    json_object_object_add(cm, "output_path", str(c->zinc.csv_output_path));
    json_object_object_add(cm, "job_name", str(c->zinc.csv_job_name));
    json_object_object_add(r, "csv_monitor", cm);

    json_object *zi = json_object_new_object();
    json_object_object_add(zi, "ckpt_compression_level", i64(c->zinc.ckpt_compression_level));
    json_object_object_add(zi, "ckpt_async", boolean(c->zinc.ckpt_async));
    json_object_object_add(zi, "ckpt_chunk_bytes", i64((int64_t)c->zinc.ckpt_chunk_bytes));
    json_object_object_add(zi, "comm_timeout_s", num(c->zinc.comm_timeout_s));
    json_object_object_add(zi, "grad_buckets", i64(c->zinc.grad_buckets));
    json_object_object_add(zi, "gather_buffers", i64(c->zinc.gather_buffers));
    json_object_object_add(zi, "device_memory_limit", i64((int64_t)c->zinc.device_memory_limit));
    /* Only when set: the configs without it keep the hash (and so the checkpoints' config check)
     * they had before zinc read it. */
    if (c->zinc.host_memory_limit)
        json_object_object_add(zi, "host_memory_limit", i64((int64_t)c->zinc.host_memory_limit));
    if (!c->zinc.nvme_checksum) /* likewise: only when turned off */
        json_object_object_add(zi, "nvme_checksum", boolean(0));
    if (c->zinc.ckpt_keep_last) /* likewise: only when set */
        json_object_object_add(zi, "ckpt_keep_last", i64(c->zinc.ckpt_keep_last));
    json_object_object_add(r, "zinc", zi);
    return r;
}

char *zcfg_to_json(const zcfg *c)
{
    if (!c) return NULL;
    json_object *r = to_object(c);
    if (!r) return NULL;
    const char *s = json_object_to_json_string_ext(
        r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(r);
    return out;
}

char *zcfg_report_json(const zcfg *c)
{
    if (!c) return NULL;
    json_object *r = to_object(c);
    if (!r) return NULL;
    json_object_object_add(r, "hash", json_object_new_string(c->hash_hex));
    const char *s = json_object_to_json_string_ext(
        r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(r);
    return out;
}

int zc_hash(zcfg *c)
{
    /* Checkpoint retention says which files stay, not what a run computes: turning it on for a
     * resumed run neither warns that the checkpoint had another config nor keeps the earlier
     * tags from its pruning (retention.c matches tags by this hash). */
    zcfg h = *c;
    h.zinc.ckpt_keep_last = 0;
    char *t = zcfg_to_json(&h);
    if (!t) return -1;
    c->hash = (uint64_t)XXH64(t, strlen(t), 0);
    snprintf(c->hash_hex, sizeof c->hash_hex, "%016llx", (unsigned long long)c->hash);
    free(t);
    h.train_batch_size = h.micro_batch = h.grad_accum = 0;
    if (!(t = zcfg_to_json(&h))) return -1;
    snprintf(c->settings_hash_hex, sizeof c->settings_hash_hex, "%016llx",
             (unsigned long long)XXH64(t, strlen(t), 0));
    free(t);
    return 0;
}
