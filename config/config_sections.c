/*
 * config_sections.c — the remaining sections: precision (fp16, bf16/bfloat16), zero_optimization
 * (with its stage3_ aliases and offload), checkpoint, csv_monitor, the "zinc" section, and the
 * top-level scalars (clipping, communication dtype, ...).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config_internal.h"

/* ---- precision ---------------------------------------------------------------------------- */

void zc_parse_precision(zcctx *x, json_object *root, zcfg *c)
{
    json_object *f = zc_section(x, root, "fp16", "fp16");
    if (f) {
        zk_check(x, f, "fp16", &zk_fp16);
        zcfg_fp16 *p = &c->fp16;
        int64_t v;
        zc_get_bool(x, f, "fp16", "enabled", &p->enabled);
        zc_get_num(x, f, "fp16", "loss_scale", R_GE0, &p->loss_scale);
        zc_get_int32(x, f, "fp16", "initial_scale_power", 0, 64, &p->initial_scale_power);
        /* Both ints in DeepSpeed's fp16 model since 0.17.1 (pydantic rejects 0.5); > 0 only
         * where they are used, dynamic scaling (fp16 on, loss_scale 0: precision_config.py
         * _validate_dynamic_loss_scale_params), as DeepSpeed checks them since 0.19.3: a
         * static-scale or disabled section may carry any whole number. */
        int64_t lo = p->enabled && p->loss_scale == 0.0 ? 1 : -I64_MAX;
        if (zc_get_int(x, f, "fp16", "loss_scale_window", lo, I64_MAX, &v) == V_SET)
            p->loss_scale_window = v;
        zc_get_int32(x, f, "fp16", "hysteresis", 1, INT32_MAX, &p->hysteresis);
        zc_get_bool(x, f, "fp16", "consecutive_hysteresis", &p->consecutive_hysteresis);
        if (zc_get_int(x, f, "fp16", "min_loss_scale", lo, I64_MAX, &v) == V_SET)
            p->min_loss_scale = v;
    }

    /* "bfloat16" is DeepSpeed's legacy name, read only when "bf16" is absent. */
    json_object *bv, *blv;
    /* "bf16": null is DeepSpeed's None too: it reads bfloat16 then (precision_config.py). */
    int has_b = zc_member(root, "bf16", &bv) && bv, has_bl = zc_member(root, "bfloat16", &blv);
    if (has_b && has_bl)
        zc_error(x, "bfloat16",
                 "both bf16 and its legacy name bfloat16 are given; keep only bf16");
    const char *bsec = has_b ? "bf16" : "bfloat16";
    json_object *b = zc_section(x, root, bsec, bsec);
    int bf16 = 0;
    if (b) {
        zk_check(x, b, bsec, &zk_bf16);
        zc_get_bool(x, b, bsec, "enabled", &bf16);
        int cgo;
        char p[64];
        if (zc_get_bool(x, b, bsec, "check_grad_overflow", &cgo) == V_SET && !cgo)
            zc_warn(x, zc_path(p, sizeof p, bsec, "check_grad_overflow"),
                    "zinc always checks: a step whose gradient is not finite is skipped");
    }
    if (c->fp16.enabled && bf16) {
        char p[64];
        zc_error(x, zc_path(p, sizeof p, bsec, "enabled"), "fp16 and bf16 cannot both be enabled");
    }
    c->dtype = c->fp16.enabled ? ZINC_DTYPE_FP16 : bf16 ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP32;
    c->communication_data_type = c->dtype;
    c->grad_accum_dtype = c->dtype;
}

/* ---- zero_optimization -------------------------------------------------------------------- */

/* A stage-3 key and its unprefixed alias (DeepSpeed's pydantic aliases): either may be given;
 * both with different values is an error. Returns the name that set *out (NULL: neither). */
static const char *alias_int(zcctx *x, json_object *z, const char *name, int64_t *out,
                             char *given, size_t gn)
{
    char s3[96], p3[160], p[160];
    snprintf(s3, sizeof s3, "stage3_%s", name);
    zc_path(p3, sizeof p3, "zero_optimization", s3);
    zc_path(p, sizeof p, "zero_optimization", name);
    int64_t a = 0, b = 0;
    int ra = zc_get_int(x, z, "zero_optimization", s3, 0, I64_MAX, &a);
    int rb = zc_get_int(x, z, "zero_optimization", name, 0, I64_MAX, &b);
    if (ra == V_SET && rb == V_SET && a != b) {
        zc_error(x, p3, "both %s (%lld) and its alias %s (%lld) are given; keep one", s3,
                 (long long)a, name, (long long)b);
        return NULL;
    }
    if (ra == V_SET) {
        *out = a;
        snprintf(given, gn, "%s", s3);
        return given;
    }
    if (rb == V_SET) {
        *out = b;
        snprintf(given, gn, "%s", name);
        return given;
    }
    return NULL;
}

/* One warning for a speed/memory/logging knob that zinc does not implement, given a value other
 * than DeepSpeed's default: the value is kept (it is in the resolved JSON and the hash), but zinc
 * does what `instead` says. */
static void not_used(zcctx *x, const char *sec, const char *key, const char *instead)
{
    char p[160];
    zc_warn(x, zc_path(p, sizeof p, sec, key), "accepted without effect: %s (speed/memory only)",
            instead);
}

/* lo: the smallest value DeepSpeed's validator takes (its Field's ge/gt), so a config DeepSpeed
 * refuses is refused here too rather than accepted with the warning. */
static void warn_int(zcctx *x, json_object *o, const char *sec, const char *key, int64_t *v,
                     int64_t lo, int64_t ds_default, const char *instead)
{
    if (zc_get_int(x, o, sec, key, lo, I64_MAX, v) == V_SET && *v != ds_default)
        not_used(x, sec, key, instead);
}

static void warn_bool(zcctx *x, json_object *o, const char *sec, const char *key, int *v,
                      int ds_default, const char *instead)
{
    if (zc_get_bool(x, o, sec, key, v) == V_SET && *v != ds_default) not_used(x, sec, key, instead);
}

static void copy_str(zcctx *x, json_object *o, const char *sec, const char *key, char *dst,
                     size_t n);

/* offload_optimizer.nvme_path: needed with device "nvme", and an existing directory this process
 * can write (checked here, so that a typo fails at config time, not at the first step). */
static void nvme_dir(zcctx *x, json_object *o, const char *path, zcfg_zero *z)
{
    char p[128];
    zc_path(p, sizeof p, path, "nvme_path");
    copy_str(x, o, path, "nvme_path", z->nvme_path, sizeof z->nvme_path);
    json_object *given = NULL;
    int present = zc_member(o, "nvme_path", &given);
    if (present && !json_object_is_type(given, json_type_string))
        return;   /* not a string (null included): copy_str's error says so, one is enough */
    if (!z->nvme_path[0]) {
        zc_error(x, p, "%s with device \"nvme\": the directory that holds the optimizer "
                       "state's scratch files (on a fast local disk)",
                 present ? "is empty; it is needed" : "needed");
        return;
    }
    /* a relative path is taken from the working directory: say which one it came to */
    char cwd[1024], shown[3200];
    if (z->nvme_path[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(shown, sizeof shown, "'%s' (%s/%s)", z->nvme_path, strcmp(cwd, "/") ? cwd : "",
                 z->nvme_path);
    else
        snprintf(shown, sizeof shown, "'%s'", z->nvme_path);
    struct stat st;
    if (stat(z->nvme_path, &st) != 0)
        zc_error(x, p, "%s: %s", shown, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        zc_error(x, p, "%s is not a directory", shown);
    else if (access(z->nvme_path, W_OK | X_OK) != 0)
        zc_error(x, p, "%s is not writable: %s", shown, strerror(errno));
}

/* One offload section. `kind` 0: offload_optimizer, which zinc implements with device "cpu" at
 * stages 1-3 (host-resident master, m, v; engine/offload.c) and with "nvme" there (the same state
 * in a file under nvme_path, read and written a chunk at a time; engine/offload_nvme.c); 1:
 * offload_param, which zinc implements with device "cpu" at stage 3 (host-resident 16-bit shard)
 * and takes "nvme" with a warning and no effect (no NVMe parameter tier). A stage where DeepSpeed
 * ignores the section is warned about likewise. *device receives the device the file names
 * (ZCFG_OFFLOAD_*; the report and the hash keep it; zcfg_offloads_optimizer /
 * zcfg_offloads_param decide from it and the stage whether the engine offloads; zc_parse_zero
 * checks the pair). */
static void offload(zcctx *x, json_object *zo, const char *key, const zkeyset *set, int kind,
                    zcfg_zero *z)
{
    char path[96];
    zc_path(path, sizeof path, "zero_optimization", key);
    json_object *v;
    if (!zc_member(zo, key, &v) || !v) return; /* null is DeepSpeed's "no offload" */
    json_object *o = zc_section(x, zo, key, path);
    if (!o) return;
    zk_check(x, o, path, set);
    static const char *bools[] = {"fast_init", "super_offload", "convert_grad_on_cpu"};
    int b, pin = 0, pread = 0, pwrite = 0;
    int64_t n, nbuf = 4;
    double d, ratio = 1.0;
    const char *sv;
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) zc_get_bool(x, o, path, bools[i], &b);
    zc_get_bool(x, o, path, "pipeline_read", &pread);
    zc_get_bool(x, o, path, "pipeline_write", &pwrite);
    zc_get_int(x, o, path, "buffer_count", 0, 1 << 20, &nbuf);
    zc_get_int(x, o, path, "buffer_size", 0, I64_MAX, &n);
    zc_get_int(x, o, path, "max_in_cpu", 0, I64_MAX, &n);
    int have_pin = zc_get_bool(x, o, path, "pin_memory", &pin) == V_SET;
    int have_ratio = zc_get_num(x, o, path, "ratio", R_UNIT_CLOSED, &ratio) == V_SET;
    zc_get_num(x, o, path, "cpuadam_cores_perc", R_UNIT_CLOSED, &d);
    const char *param_path = NULL;
    if (kind == 1 && zc_member(o, "nvme_path", &v) && v &&
        zc_get_str(x, o, path, "nvme_path", &sv) == V_SET)
        param_path = sv;
    const char *dev = "none";
    if (zc_get_str(x, o, path, "device", &dev) == V_BAD) return;
    char dp[128], p2pre[128];
    zc_path(dp, sizeof dp, path, "device");
    if (strcmp(dev, "none") != 0 && strcmp(dev, "cpu") != 0 && strcmp(dev, "nvme") != 0) {
        zc_error(x, dp, "expected \"none\", \"cpu\" or \"nvme\", got \"%s\"", dev);
        return;
    }
    if (!strcmp(dev, "none")) return;
    int *device = kind == 1 ? &z->offload_param : &z->offload_optimizer;
    *device = strcmp(dev, "nvme") == 0 ? ZCFG_OFFLOAD_NVME : ZCFG_OFFLOAD_CPU;
    /* Speed only (page-locked copies on cuda; the cpu device has nothing to pin): no warning. */
    if (have_pin && kind == 0) z->offload_pin = pin;
    /* DeepSpeed reads offload_param at stage 3 only (its ZeRO-Infinity parameter tier). */
    if (kind == 1 && z->stage < 3) {
        zc_warn(x, dp, "\"%s\" accepted without effect at ZeRO stage %d: zinc offloads the "
                       "parameters at stage 3 only, as DeepSpeed does (memory placement only)",
                dev, z->stage);
        return;
    }
    /* zinc keeps the NVMe parameter shard in the optimizer's scratch file (engine/offload_nvme.c),
     * so its directory is offload_optimizer's (zc_parse_zero checks that one is there). */
    if (kind == 1 && !strcmp(dev, "nvme") && param_path && z->nvme_path[0] &&
        strcmp(param_path, z->nvme_path) != 0)
        zc_warn(x, zc_path(p2pre, sizeof p2pre, path, "nvme_path"),
                "'%s' not used: zinc keeps the 16-bit parameter shard in the optimizer state's "
                "scratch file under zero_optimization.offload_optimizer.nvme_path ('%s')",
                param_path, z->nvme_path);
    if (kind == 0 && z->stage == 0) {
        zc_warn(x, dp, "\"%s\" accepted without effect at ZeRO stage 0: zinc offloads the "
                       "optimizer state at stages 1-3, as DeepSpeed does (memory placement only)",
                dev);
        return;
    }
    if (kind == 0 && !strcmp(dev, "nvme")) {
        nvme_dir(x, o, path, z);
        z->nvme_buffer_count = (int)nbuf;
        z->nvme_pipeline_read = pread;
        z->nvme_pipeline_write = pwrite;
    }
    char p2[128];
    /* offload_param's host shard is offload_optimizer's 16-bit staging buffer (engine/offload.c),
     * page-locked by offload_optimizer.pin_memory; this section's own flag adds nothing. */
    if (kind == 1 && have_pin && pin)
        zc_warn(x, zc_path(p2, sizeof p2, path, "pin_memory"),
                "accepted without effect: the host parameter shard is the optimizer offload's "
                "16-bit staging buffer, page-locked when "
                "zero_optimization.offload_optimizer.pin_memory is true (copy speed on CUDA only)");
    /* DeepSpeed's ratio (stage 3 only) keeps a prefix of the optimizer's sub-groups on the
     * accelerator. zinc offloads the whole shard or nothing: a smaller ratio would silently
     * place more on the host than asked (and a device limit sized for it would not hold), so
     * it is refused rather than ignored. */
    if (kind == 0 && have_ratio && ratio < 1.0)
        zc_error(x, zc_path(p2, sizeof p2, path, "ratio"),
                 "%g is not supported: zinc offloads the whole optimizer state of the shard "
                 "(partial offload is not implemented); remove the key or set it to 1.0", ratio);
}

void zc_parse_zero(zcctx *x, json_object *root, zcfg *c)
{
    zcfg_zero *z = &c->zero;
    json_object *v;
    const char *sec = "zero_optimization";
    if (zc_member(root, sec, &v) && json_object_is_type(v, json_type_boolean)) {
        zc_error(x, sec,
                 "expected an object; the boolean form is DeepSpeed's deprecated format: write "
                 "{\"stage\": 1}");
        return;
    }
    json_object *o = zc_section(x, root, sec, sec);
    if (!o) return;
    zk_check(x, o, sec, &zk_zero);
    zc_get_int32(x, o, sec, "stage", 0, 3, &z->stage);
    /* The knobs below are kept in the resolved config with DeepSpeed's meaning, but zinc's engine
     * does not read them: a value other than DeepSpeed's default gets one warning saying what zinc
     * does instead (docs/config.md, "zero_optimization"). */
    /* DeepSpeed 0.19.8 (zero/config.py) declares reduce_bucket_size Field(gt=0) and
     * allgather_bucket_size Field(ge=0): 0 is refused for the first, taken for the second. */
    warn_int(x, o, sec, "reduce_bucket_size", &z->reduce_bucket_size, 1, 500000000,
             "zinc reduces one parameter group per collective; bucket sizes are not used");
    warn_int(x, o, sec, "allgather_bucket_size", &z->allgather_bucket_size, 0, 500000000,
             "zinc gathers one parameter group per collective; bucket sizes are not used");
    /* DeepSpeed's validator: unset overlap_comm means "on at stage 3". zinc's engine reduces a
     * group as soon as zinc_grads_ready hands it over at stages 2-3 (always overlapped), and once
     * after backward at stages 0-1 (never overlapped). */
    int ov;
    if (zc_get_bool(x, o, sec, "overlap_comm", &ov) == V_SET) {
        z->overlap_comm = ov;
        if (!ov && z->stage >= 2)
            not_used(x, sec, "overlap_comm",
                     "zinc always overlaps: at stages 2-3 each group is reduce-scattered as soon "
                     "as zinc_grads_ready hands it over");
        else if (ov && z->stage < 2)
            not_used(x, sec, "overlap_comm",
                     "at stages 0-1 zinc reduces all gradients once after backward; no overlap");
    } else {
        z->overlap_comm = z->stage == 3;
    }
    warn_bool(x, o, sec, "contiguous_gradients", &z->contiguous_gradients, 1,
              "zinc always keeps gradients in contiguous per-group buffers");
    warn_bool(x, o, sec, "reduce_scatter", &z->reduce_scatter, 1,
              "zinc always reduce-scatters gradients at stages 2-3 (same sum)");
    warn_bool(x, o, sec, "allgather_partitions", &z->allgather_partitions, 1,
              "zinc always all-gathers the partitions (same result)");
    warn_bool(x, o, sec, "round_robin_gradients", &z->round_robin_gradients, 0,
              "zinc partitions gradients in plan order (ordering only; same result)");
    /* sub_group_size bounds the offloaded step's chunks (engine/offload.c); without offload the
     * whole shard is one fused kernel, so another value gets the warning (below, once the
     * offload section is read). */
    int sub_group_set = zc_get_int(x, o, sec, "sub_group_size", 0, I64_MAX, &z->sub_group_size) == V_SET;
    char given[96];
    alias_int(x, o, "max_live_parameters", &z->max_live_parameters, given, sizeof given);
    /* Used by import zinc's stage-3 hooks, which keep their own copies of a group for its next
     * use (python/zinc/_stage3.py); zinc_release itself always releases (docs/config.md). */
    alias_int(x, o, "max_reuse_distance", &z->max_reuse_distance, given, sizeof given);
    alias_int(x, o, "prefetch_bucket_size", &z->prefetch_bucket_size, given, sizeof given);
    alias_int(x, o, "param_persistence_threshold", &z->param_persistence_threshold, given,
              sizeof given);

    /* Three names for one flag: the current one, its stage3_ alias and the deprecated fp16 one. */
    static const char *g16[] = {"stage3_gather_16bit_weights_on_model_save",
                                "gather_16bit_weights_on_model_save",
                                "stage3_gather_fp16_weights_on_model_save"};
    int first = -1, val = 0;
    for (int i = 0; i < 3; i++) {
        int b;
        if (zc_get_bool(x, o, sec, g16[i], &b) != V_SET) continue;
        if (first >= 0 && b != val) {
            char p[128];
            zc_error(x, zc_path(p, sizeof p, sec, g16[i]),
                     "conflicts with %s (%s); they are aliases, keep one", g16[first],
                     val ? "true" : "false");
            continue;
        }
        if (first < 0) first = i;
        val = b;
    }
    if (first >= 0) z->gather_16bit_weights_on_model_save = val;

    offload(x, o, "offload_optimizer", &zk_offload_optimizer, 0, z);
    offload(x, o, "offload_param", &zk_offload_param, 1, z);
    int b;
    /* DeepSpeed 0.19.8 refuses a deprecated name beside the key that replaces it, whatever the
     * values (config_utils.py, _process_deprecated_field: an assertion) */
    static const char *const renamed[][2] = {{"cpu_offload", "offload_optimizer"},
                                             {"cpu_offload_param", "offload_param"}};
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++) {
        json_object *old_v, *new_v;
        if (zc_member(o, renamed[i][0], &old_v) && zc_member(o, renamed[i][1], &new_v)) {
            char p[96];
            zc_error(x, zc_path(p, sizeof p, sec, renamed[i][0]),
                     "the deprecated name of %s.%s, which is given too: DeepSpeed refuses the "
                     "two together; keep %s", sec, renamed[i][1], renamed[i][1]);
        }
    }
    if (zc_get_bool(x, o, sec, "cpu_offload", &b) == V_SET && b) {
        z->offload_optimizer = ZCFG_OFFLOAD_CPU;
        zc_warn(x, "zero_optimization.cpu_offload",
                z->stage > 0 ? "accepted as the deprecated name of offload_optimizer {\"device\": "
                               "\"cpu\"}; write that instead"
                             : "accepted without effect at ZeRO stage 0 (deprecated name of "
                               "offload_optimizer, which zinc honours at stages 1-3)");
    }
    if (zc_get_bool(x, o, sec, "cpu_offload_param", &b) == V_SET && b) {
        z->offload_param = ZCFG_OFFLOAD_CPU;
        zc_warn(x, "zero_optimization.cpu_offload_param",
                z->stage == 3 ? "accepted as the deprecated name of offload_param {\"device\": "
                                "\"cpu\"}; write that instead"
                              : "accepted without effect below ZeRO stage 3 (deprecated name of "
                                "offload_param, which zinc honours at stage 3)");
    }
    /* zinc's Adam with host parameters is the host Adam: it writes the new 16-bit shard straight
     * into the host copy. A device Adam would have to download its result every step, a path
     * zinc does not have; DeepSpeed's ZeRO-Infinity pairs the two the same way in practice. */
    /* NVMe parameters live in the optimizer's scratch file, whose chunk pipeline writes them. */
    if (z->stage == 3 && z->offload_param == ZCFG_OFFLOAD_NVME &&
        z->offload_optimizer != ZCFG_OFFLOAD_NVME)
        zc_error(x, "zero_optimization.offload_param.device",
                 "\"nvme\" needs zero_optimization.offload_optimizer.device \"nvme\" too: zinc "
                 "keeps the 16-bit parameter shard in the optimizer state's scratch file, written "
                 "by its chunk pipeline; set offload_optimizer {\"device\": \"nvme\", "
                 "\"nvme_path\": ...} or use offload_param \"cpu\"");
    if (z->stage == 3 && z->offload_param == ZCFG_OFFLOAD_CPU &&
        z->offload_optimizer == ZCFG_OFFLOAD_NONE)
        zc_error(x, "zero_optimization.offload_param.device",
                 "\"cpu\" needs zero_optimization.offload_optimizer.device \"cpu\" (or "
                 "\"nvme\") too: zinc "
                 "offloads the parameters only together with the optimizer state (whose host "
                 "Adam writes the host parameters); add offload_optimizer {\"device\": \"cpu\"} "
                 "or drop offload_param");
    if (sub_group_set && z->sub_group_size != 1000000000 && !zcfg_offloads_optimizer(c))
        not_used(x, sec, "sub_group_size",
                 "zinc updates the whole shard with one fused kernel; the value bounds the chunks "
                 "of an offloaded step only (offload_optimizer)");
    if (zc_get_bool(x, o, sec, "load_from_fp32_weights", &b) == V_SET && !b)
        zc_error(x, "zero_optimization.load_from_fp32_weights",
                 "false is not supported: zinc always restores the fp32 master weights from the "
                 "checkpoint; rebuilding them from 16-bit weights changes the math");
    int64_t n;
    if (zc_get_int(x, o, sec, "zero_hpz_partition_size", 0, I64_MAX, &n) == V_SET && n > 1)
        zc_warn(x, "zero_optimization.zero_hpz_partition_size",
                "accepted without effect: ZeRO++ hierarchical partitioning is not implemented "
                "(memory placement and speed only; same math)");
}

/* ---- checkpoint, csv_monitor, zinc -------------------------------------------------------- */

void zc_parse_checkpoint(zcctx *x, json_object *root, zcfg *c)
{
    const char *sec = "checkpoint";
    json_object *o = zc_section(x, root, sec, sec);
    if (!o) return;
    zk_check(x, o, sec, &zk_checkpoint);
    const char *tv;
    if (zc_get_str(x, o, sec, "tag_validation", &tv) == V_SET) {
        char l[16];
        zc_lower(l, sizeof l, tv);
        if (!strcmp(l, "ignore"))
            c->ckpt.tag_validation = 0;
        else if (!strcmp(l, "warn"))
            c->ckpt.tag_validation = 1;
        else if (!strcmp(l, "fail"))
            c->ckpt.tag_validation = 2;
        else
            zc_error(x, "checkpoint.tag_validation",
                     "expected \"Ignore\", \"Warn\" or \"Fail\", got \"%s\"", tv);
    }
    zc_get_bool(x, o, sec, "load_universal", &c->ckpt.load_universal);
    /* Every zinc rank always writes its own file, in parallel, to the shared save directory. */
#define W_OWN_FILE "every zinc rank always writes its own file in parallel to the shared save directory"
    warn_bool(x, o, sec, "use_node_local_storage", &c->ckpt.use_node_local_storage, 0, W_OWN_FILE);
    json_object *pw = zc_section(x, o, "parallel_write", "checkpoint.parallel_write");
    if (pw) {
        zk_check(x, pw, "checkpoint.parallel_write", &zk_parallel_write);
        warn_bool(x, pw, "checkpoint.parallel_write", "pipeline_stage", &c->ckpt.parallel_write, 0,
                  W_OWN_FILE);
    }
#undef W_OWN_FILE
}

static void copy_str(zcctx *x, json_object *o, const char *sec, const char *key, char *dst,
                     size_t n)
{
    const char *s;
    if (zc_get_str(x, o, sec, key, &s) != V_SET) return;
    char p[96];
    if (strlen(s) >= n)
        zc_error(x, zc_path(p, sizeof p, sec, key), "longer than %zu characters", n - 1);
    else
        memcpy(dst, s, strlen(s) + 1);
}

void zc_parse_csv_monitor(zcctx *x, json_object *root, zcfg *c)
{
    const char *sec = "csv_monitor";
    json_object *o = zc_section(x, root, sec, sec);
    if (!o) return;
    zk_check(x, o, sec, &zk_csv_monitor);
    zc_get_bool(x, o, sec, "enabled", &c->zinc.csv_monitor);
    copy_str(x, o, sec, "output_path", c->zinc.csv_output_path, sizeof c->zinc.csv_output_path);
    copy_str(x, o, sec, "job_name", c->zinc.csv_job_name, sizeof c->zinc.csv_job_name);
}

/* zinc.device_memory_limit and zinc.host_memory_limit (`key`): bytes as an integer (0 = no
 * limit), or a string "<number><unit>" with unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
 * GiB, TiB (powers of 1024), case ignored, e.g. "6MB", "1.5GiB". The result is rounded down to
 * whole bytes. */
static void memory_limit(zcctx *x, json_object *o, const char *key, uint64_t *out)
{
    char path[64];
    zc_path(path, sizeof path, "zinc", key);
    json_object *v;
    if (!zc_member(o, key, &v)) return;
    if (!json_object_is_type(v, json_type_string)) {
        int64_t n;
        if (zc_get_int(x, o, "zinc", key, 0, I64_MAX, &n) == V_SET) *out = (uint64_t)n;
        return;
    }
    const char *s = json_object_get_string(v);
    static const struct { const char *unit; double mult; } units[] = {
        {"b", 1.0},      {"kb", 1e3},         {"mb", 1e6},         {"gb", 1e9},
        {"tb", 1e12},    {"kib", 0x1p10},     {"mib", 0x1p20},     {"gib", 0x1p30},
        {"tib", 0x1p40},
    };
    char *end = NULL;
    double num = 0.0;
    if (*s >= '0' && *s <= '9') num = strtod(s, &end);
    char unit[8];
    int ok = end && end != s && strlen(end) < sizeof unit && isfinite(num);
    double bytes = -1.0;
    if (ok) {
        zc_lower(unit, sizeof unit, end);
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcmp(unit, units[i].unit)) bytes = num * units[i].mult;
    }
    if (bytes < 0.0 || bytes >= 0x1p63) {
        zc_error(x, path, "expected bytes as an integer or a string like \"6MB\" or \"2GiB\" "
                          "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got \"%s\"", s);
        return;
    }
    *out = (uint64_t)bytes;
}

void zc_parse_zinc(zcctx *x, json_object *root, zcfg *c)
{
    const char *sec = "zinc";
    json_object *o = zc_section(x, root, sec, sec);
    if (!o) return;
    zk_check(x, o, sec, &zk_zinc);
    zcfg_zinc *z = &c->zinc;
    zc_get_int32(x, o, sec, "ckpt_compression_level", 1, 19, &z->ckpt_compression_level);
    zc_get_bool(x, o, sec, "ckpt_async", &z->ckpt_async);
    zc_get_int32(x, o, sec, "ckpt_keep_last", 0, 1000000, &z->ckpt_keep_last);
    int64_t n;
    if (zc_get_int(x, o, sec, "ckpt_chunk_bytes", 4096, (int64_t)1 << 30, &n) == V_SET)
        z->ckpt_chunk_bytes = (size_t)n;
    zc_get_num(x, o, sec, "comm_timeout_s", R_GT0, &z->comm_timeout_s);
    zc_get_int32(x, o, sec, "grad_buckets", 1, 64, &z->grad_buckets);
    zc_get_int32(x, o, sec, "gather_buffers", 1, 64, &z->gather_buffers);
    memory_limit(x, o, "device_memory_limit", &z->device_memory_limit);
    memory_limit(x, o, "host_memory_limit", &z->host_memory_limit);
    zc_get_bool(x, o, sec, "nvme_checksum", &z->nvme_checksum);
}

/* ---- top-level scalars -------------------------------------------------------------------- */

/* data_types.grad_accum_dtype "fp32" (`s` as written) with fp16/bf16 training. DeepSpeed 0.19.8
 * (engine.py _do_optimizer_sanity_check, stage_1_and_2.py, stage3.py) reduces each micro-step's
 * 16-bit gradient as without the key and adds its reduced partition into an fp32 sum at stages
 * 2-3, with offload_optimizer too (its fp32 partition sums copied to the host at the boundary):
 * zinc does that (engine/step.c hand_over; offload.c in host memory, which the NVMe pipeline
 * reads as it is). At stage 1 (bf16: its BF16_Optimizer; fp16, or bf16 with offload:
 * stage_1_and_2.py's grad_accum attribute) it adds each micro-step's 16-bit gradient into fp32
 * sums of the whole model and at the boundary reduces them in communication_data_type (the
 * working dtype unless "fp32": the sums rounded to it first): zinc too (step.c hand_over and
 * reduce_grads). Stage 0 DeepSpeed refuses itself. */
static void grad_accum_fp32(zcctx *x, const char *path, const char *s, zcfg *c)
{
    if (c->zero.stage == 0)
        zc_error(x, path, "\"%s\" with %s needs ZeRO stage 1, 2 or 3: without ZeRO DeepSpeed "
                 "0.19.8 refuses it too (\"unsupported mix of model_dtype and grad_accum_dtype\")",
                 s, zc_dtype_name(c->dtype));
    else
        c->grad_accum_dtype = ZINC_DTYPE_FP32;
}

void zc_parse_scalars(zcctx *x, json_object *root, zcfg *c)
{
    json_object *v;
    zc_get_num(x, root, "", "gradient_clipping", R_GE0, &c->gradient_clipping);
    /* null is DeepSpeed's default (None: never print). */
    if (zc_member(root, "steps_per_print", &v) && !v)
        c->steps_per_print = 0;
    else
        zc_get_int(x, root, "", "steps_per_print", 0, I64_MAX, &c->steps_per_print);
    zc_get_bool(x, root, "", "prescale_gradients", &c->prescale_gradients);
    zc_get_num(x, root, "", "gradient_predivide_factor", R_GT0, &c->gradient_predivide_factor);
    int wc;
    if (zc_get_bool(x, root, "", "wall_clock_breakdown", &wc) == V_SET) {
        c->wall_clock_breakdown = wc;
        if (wc)
            zc_warn(x, "wall_clock_breakdown",
                    "accepted without effect: zinc prints ms/step; no per-phase breakdown "
                    "(logging only)");
    }

    zc_get_bool(x, root, "", "dataloader_drop_last", &c->dataloader_drop_last);
    zc_get_bool(x, root, "", "managed_gradient_accumulation", &c->managed_accumulation);
    /* DeepSpeed 0.19.8 asserts this combination at initialize (engine.py, _do_sanity_check);
     * zinc refuses it the same way rather than run what DeepSpeed would not. */
    if (!c->managed_accumulation && c->zero.overlap_comm && c->zero.stage < 2)
        zc_error(x, "managed_gradient_accumulation",
                 "false needs zero_optimization.overlap_comm off at ZeRO stage %d (DeepSpeed "
                 "allows overlap_comm with it only at stages 2-3)", c->zero.stage);

    const char *s;
    if (zc_member(root, "communication_data_type", &v) && v &&
        zc_get_str(x, root, "", "communication_data_type", &s) == V_SET) {
        int ok;
        zinc_dtype d = zc_dtype_of(s, &ok);
        if (!ok)
            zc_error(x, "communication_data_type",
                     "expected \"fp32\", \"fp16\" or \"bf16\", got \"%s\"", s);
        else if (d == ZINC_DTYPE_FP32)
            /* zinc sends gradients in the working dtype, accumulates every reduction in fp32
             * and rounds once to the working dtype: DeepSpeed's "fp32" (the gradients upcast,
             * reduced in fp32, rounded once) is that arithmetic, so it is taken as written.
             * With fp32 gradient sums DeepSpeed's "fp32" does not round at all: zinc then
             * reduces in fp32 too (config.h zcfg_reduces_fp32, engine/step.c). */
            c->communication_data_type = d;
        else if (d != c->dtype)
            /* the other 16-bit type on the wire would be a different rounding: refused rather
             * than ignored */
            zc_error(x, "communication_data_type",
                     "\"%s\" is not supported with %s training: zinc reduces in the working dtype "
                     "(%s) with fp32 accumulation and one rounding (as \"fp32\" does); remove the "
                     "key or write \"%s\" or \"fp32\"", s, zc_dtype_name(c->dtype),
                     zc_dtype_name(c->dtype), zc_dtype_name(c->dtype));
    }
    /* Without effect in zinc (no sequence parallelism), but DeepSpeed 0.19.8 checks the value
     * as communication_data_type's: a name it refuses (a typo, "fp8") is refused here too, with
     * that error alone (not also "accepted without effect"); a name it takes is warned about. */
    if (zc_member(root, "seq_parallel_communication_data_type", &v) && v &&
        zc_get_str(x, root, "", "seq_parallel_communication_data_type", &s) == V_SET) {
        int ok;
        zc_dtype_of(s, &ok);
        if (!ok)
            zc_error(x, "seq_parallel_communication_data_type",
                     "expected \"fp32\", \"fp16\" or \"bf16\", got \"%s\"", s);
        else if (zk_is_on(v))
            zc_warn(x, "seq_parallel_communication_data_type", "accepted without effect: zinc "
                    "has no sequence parallelism, so this has no effect");
    }
    if (zc_member(root, "gradient_allreduce_op", &v) &&
        zc_get_str(x, root, "", "gradient_allreduce_op", &s) == V_SET) {
        char l[16];
        zc_lower(l, sizeof l, s);
        /* DeepSpeed 0.19.8 (lower-cased, as there): "mean", its default, or "sum" */
        if (!strcmp(l, "sum"))
            zc_error(x, "gradient_allreduce_op",
                     "\"sum\" is not supported: it changes the gradient scale; zinc averages "
                     "(\"mean\", the default)");
        else if (strcmp(l, "mean") != 0)
            zc_error(x, "gradient_allreduce_op", "expected \"mean\" or \"sum\", got \"%s\"", s);
    }
    int64_t sp;
    if (zc_get_int(x, root, "", "sequence_parallel_size", 1, I64_MAX, &sp) == V_SET && sp > 1)
        zc_error(x, "sequence_parallel_size",
                 "not supported: zinc has no sequence parallelism (it changes how the world "
                 "splits the batch)");

    json_object *dt = zc_section(x, root, "data_types", "data_types");
    if (dt) {
        zk_check(x, dt, "data_types", &zk_data_types);
        /* Both may name the working dtype (null: not given): DeepSpeed asserts it for
         * param_dtype (engine.py _assert_valid_mixed_precision_config). grad_accum_dtype may
         * also be "fp32" with 16-bit training where zinc does DeepSpeed's arithmetic for it
         * (grad_accum_fp32); another accumulation dtype is other math, refused. */
        static const struct { const char *key, *why; } same[] = {
            {"grad_accum_dtype", "zinc accumulates gradients in the working dtype, or in fp32 "
                                 "with fp16/bf16 training; another accumulation dtype changes "
                                 "the math"},
            {"param_dtype", "it must be the dtype fp16/bf16 set (DeepSpeed asserts the same)"},
        };
        for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
            char path[64];
            zc_path(path, sizeof path, "data_types", same[i].key);
            if (!zc_member(dt, same[i].key, &v) || !v ||
                zc_get_str(x, dt, "data_types", same[i].key, &s) != V_SET)
                continue;
            int ok;
            zinc_dtype d = zc_dtype_enum_of(s, &ok);
            if (!ok)
                zc_error(x, path, "expected \"fp32\", \"fp16\" or \"bf16\" (or another name "
                         "DeepSpeed's DtypeEnum takes: \"bfloat16\", \"half\", ...), got \"%s\"", s);
            else if (i == 0 && d == ZINC_DTYPE_FP32 && c->dtype != ZINC_DTYPE_FP32)
                grad_accum_fp32(x, path, s, c);
            else if (d != c->dtype)
                zc_error(x, path, "\"%s\" is not supported: %s (the working dtype is %s)", s,
                         same[i].why, zc_dtype_name(c->dtype));
        }
        /* keep_in_fp32_modules: "auto" (DeepSpeed's default) or [] keep what zinc does with no
         * key; a list of names would keep those buffers in fp32, which zinc does not. */
        if (zc_member(dt, "keep_in_fp32_modules", &v)) {
            int is_auto = v && json_object_is_type(v, json_type_string) &&
                          !strcmp(json_object_get_string(v), "auto");
            int empty = v && json_object_is_type(v, json_type_array) &&
                        json_object_array_length(v) == 0;
            if (!is_auto && !empty)
                zc_error(x, "data_types.keep_in_fp32_modules",
                         "only \"auto\" or [] are supported (got %s): keeping named buffers in "
                         "fp32 changes the model's math and is not implemented", zc_show(v));
        }
    }
}

/* ---- checks across sections --------------------------------------------------------------- */

void zc_check_precision_stage(zcctx *x, const zcfg *c)
{
    /* DeepSpeed 0.19.8 runs fp16 at stage 0 through FP16_Optimizer, whose _update_scale has no
     * hysteresis and no stop at the minimum scale (fused_optimizer.py); zinc does the same
     * (optim/scaler.c), so the keys that only the ZeRO optimizers' DynamicLossScaler reads are
     * said to have no effect, even at their defaults: moving a config from stage 1 to stage 0
     * changes how the scale backs off. */
    if (c->dtype == ZINC_DTYPE_FP16 && c->fp16.loss_scale == 0.0 && c->zero.stage == 0)
        zc_warn(x, "fp16.hysteresis",
                "has no effect at ZeRO stage 0 (nor has consecutive_hysteresis): as in DeepSpeed "
                "(FP16_Optimizer), every overflow halves the loss scale at once, and at "
                "min_loss_scale overflowing steps keep being skipped instead of stopping the run; "
                "stages 1-3 honour hysteresis %d", c->fp16.hysteresis);
}

/* The "aio" section: block_size and queue_depth shape the NVMe store's requests
 * (engine/nvme_store.c); the rest is DeepSpeed's thread and event tuning, type-checked only.
 * DeepSpeed 0.19.8 reads the section's values only to build its NVMe swappers
 * (swap_tensor/aio_config.py, a plain dict: no type or range check), and takes null for its
 * defaults: without NVMe offload a value zinc would refuse (queue_depth 0, a string) is a
 * warning, not an error (a well-formed one is accepted silently, as before: it has no effect
 * there). Unknown keys stay errors, as everywhere. */
void zc_parse_aio(zcctx *x, json_object *root, zcfg *c)
{
    const char *sec = "aio";
    json_object *v;
    if (zc_member(root, sec, &v) && !v) return;      /* null: DeepSpeed's defaults */
    json_object *o = zc_section(x, root, sec, sec);
    if (!o) return;
    zk_check(x, o, sec, &zk_aio);
    int nvme = zcfg_offloads_nvme(c) || zcfg_offloads_param_nvme(c);
    if (!nvme)
        x->demote = "accepted, as DeepSpeed accepts it: the aio section is read only with NVMe "
                    "offload (offload_optimizer or offload_param device \"nvme\"), which this "
                    "config does not set, but a run with NVMe would refuse it";
    int64_t n;
    if (zc_get_int(x, o, sec, "block_size", 4096, (int64_t)1 << 30, &n) == V_SET) {
        char p[64];
        if (n % 4096)
            zc_error(x, zc_path(p, sizeof p, sec, "block_size"),
                     "%lld is not a multiple of 4096 (direct I/O's block)", (long long)n);
        else
            c->aio.block_size = n;
    }
    if (zc_get_int(x, o, sec, "queue_depth", 1, 4096, &n) == V_SET) c->aio.queue_depth = (int)n;
    if (zc_get_int(x, o, sec, "intra_op_parallelism", 1, 1024, &n) == V_SET)
        c->aio.intra_op_parallelism = (int)n;
    zc_get_bool(x, o, sec, "single_submit", &c->aio.single_submit);
    zc_get_bool(x, o, sec, "overlap_events", &c->aio.overlap_events);
    x->demote = NULL;
}

void zc_check_pairs(zcctx *x, json_object *root, const zcfg *c)
{
    json_object *opt = NULL, *params = NULL, *zero = NULL;
    zc_member(root, "optimizer", &opt);
    if (opt && json_object_is_type(opt, json_type_object)) zc_member(opt, "params", &params);
    /* engine.py (get_optimizer_configuration) reads fp32_optimizer_states only for its CPU Adam
     * under offload_optimizer, and not with torch_adam. false there gives the moments the dtype
     * of the parameters that Adam updates (cpu_adam.py), which are ZeRO's fp32 master partitions:
     * fp32 moments, as zinc's (16-bit only with bf16_master_weights_and_grads, refused). Measured
     * in DeepSpeed 0.19.8 on the CPU: fp32 moments in fp32 and in bf16 training. */
    int fp32_states = 1;
    if (params && json_object_is_type(params, json_type_object) &&
        zc_get_bool(x, params, "optimizer.params", "fp32_optimizer_states", &fp32_states) ==
            V_SET && !fp32_states)
        zc_warn(x, "optimizer.params.fp32_optimizer_states",
                zcfg_offloads_optimizer(c) && !c->optim.torch_adam
                    ? "false is accepted without effect: DeepSpeed's CPU Adam keeps the moments in "
                      "the dtype of the fp32 master it updates, as zinc does"
                    : "accepted without effect: DeepSpeed reads it only for its CPU Adam under "
                      "offload_optimizer (not with torch_adam)");
    /* zero/config.py: compute_grad_norm false only at stages 1-2; stage_1_and_2.py: only with
     * gradient_clipping 0. The norm is then not computed: the same update (speed only). */
    int norm = 1;
    zc_member(root, "zero_optimization", &zero);
    if (zero && json_object_is_type(zero, json_type_object) &&
        zc_get_bool(x, zero, "zero_optimization", "compute_grad_norm", &norm) == V_SET && !norm) {
        if (c->zero.stage != 1 && c->zero.stage != 2)
            zc_error(x, "zero_optimization.compute_grad_norm",
                     "false is supported only at ZeRO stage 1 or 2 (DeepSpeed refuses it at "
                     "stage %d too)", c->zero.stage);
        else if (c->gradient_clipping > 0)
            zc_error(x, "zero_optimization.compute_grad_norm",
                     "false needs gradient_clipping 0 (DeepSpeed refuses it with clipping; the "
                     "default clipping is 1.0)");
        else
            zc_warn(x, "zero_optimization.compute_grad_norm",
                    "accepted without effect: zinc computes the norm anyway (speed only)");
    }
    /* stage_1_and_2.py and stage3.py assert both away where gradients are partitioned by
     * reduce-scatter (stages 2-3 with reduce_scatter, its default): "not yet supported". */
    if (c->zero.stage >= 2 && c->zero.reduce_scatter) {
        if (c->gradient_predivide_factor != 1.0)
            zc_error(x, "gradient_predivide_factor",
                     "%g is refused at ZeRO stage %d with reduce_scatter, as DeepSpeed 0.19.8 "
                     "refuses it (\"not yet supported\"); 1.0 or stage 0-1",
                     c->gradient_predivide_factor, c->zero.stage);
        if (c->prescale_gradients)
            zc_error(x, "prescale_gradients",
                     "true is refused at ZeRO stage %d with reduce_scatter, as DeepSpeed 0.19.8 "
                     "refuses it (\"not yet supported\"); false or stage 0-1", c->zero.stage);
    }
}
