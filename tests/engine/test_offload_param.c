/*
 * test_offload_param.c — ZeRO-Offload of the 16-bit parameters (issue 14, second milestone:
 * zero_optimization.offload_param {"device": "cpu"} at stage 3, with offload_optimizer "cpu"),
 * through the public API on the toy model (toy.h).
 *
 *  1. bitwise: the same training with and without offload_param + offload_optimizer gives
 *     identical fp32 master weights, gradient norms, loss scales and step counts: local worlds
 *     of 2 and 4, fp16 (with an overflow step skipped), bf16 and fp32, with the toy's groups all
 *     persistent, none persistent, and a mix; and with gradient accumulation.
 *  2. memory: the device keeps no param16 block (zinc_memory), the host has the shard
 *     (zinc_memory_host); planned = allocated on both sides and equal to `zinc estimate
 *     --offload-optimizer --offload-param` for a one-group model; under a
 *     zinc.device_memory_limit that holds the offloaded plan but not the offload_optimizer-only
 *     one, finalize without offload_param fails with ZINC_ERR_NOMEM naming the category that did
 *     not fit, and with offload_param the same limit trains, bitwise as an unlimited run.
 *  3. copy volume (zinc_offload_bytes), docs/engine.md "Offload": the gradient shard
 *     device->host (S * d) in each micro-step (one per window here); host->device slice_g * d per
 *     gather of a non-persistent group g (two per micro-step in the toy, forward and backward;
 *     prefetch is on, and a prefetched group is used by the next zinc_gather of it) plus, per applied step, the
 *     persistent groups' slices; nothing else. The formula is computed here from the toy's
 *     shapes.
 *  4. checkpoints across offload_param settings: save with it, load without, and back (and with
 *     offload_optimizer only on the other side), then train on: bitwise the weights of an
 *     uninterrupted run; and a reshard (saved on 2 ranks with offload_param, loaded on 4 and on
 *     1 with and without it) restores the master bitwise and the gathered 16-bit weights as its
 *     rounding; the weights16 stream (stage3_gather_16bit_weights_on_model_save), read from the
 *     host shard with offload_param, is bitwise the one saved without it and the rounding of the
 *     saved master.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "kernels/device.h"
#include "testutil.h"
#include "toy.h"

#define OPT "\"offload_optimizer\": {\"device\": \"cpu\"}, "
#define PARAM "\"offload_param\": {\"device\": \"cpu\"}, "
#define BOTH OPT PARAM

static uint64_t sum(const uint64_t b[ZINC_MEM_COUNT])
{
    uint64_t t = 0;
    for (int c = 0; c < ZINC_MEM_COUNT; c++) t += b[c];
    return t;
}

/* ---- 1. bitwise ---------------------------------------------------------------------------- */

static void compare(toy_run ref, const char *label)
{
    char zero[256];
    snprintf(zero, sizeof zero, BOTH "%s", ref.zero_json ? ref.zero_json : "");
    toy_expect_same_with_zero(ref, zero, "offload_param", label);
}

static void test_bitwise(void)
{
    const int worlds[] = {2, 4};
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    /* Persistence threshold: 0 = DeepSpeed's default (every toy group persistent), -1 = none,
     * 1000 = a mix (blocks 0, 2, 4 persistent; 1 and 3 gathered on demand). */
    const int64_t persist[] = {0, -1, 1000};
    for (int wi = 0; wi < 2; wi++)
        for (int di = 0; di < 3; di++)
            for (int pi = 0; pi < 3; pi++) {
                toy_run r = {.world = worlds[wi], .stage = 3, .accum = 1, .steps = 12,
                             .dtype = dts[di], .clip = 1.0, .inject_inf_step = -1,
                             .persist_threshold = persist[pi]};
                if (dts[di] == ZINC_DTYPE_FP16) {
                    r.inject_inf_step = 4;
                    r.inject_rank = 1;
                }
                char label[96];
                snprintf(label, sizeof label, "world %d %s persistence %lld", r.world,
                         zinc_dtype_name(r.dtype), (long long)persist[pi]);
                compare(r, label);
            }
    toy_run r = {.world = 2, .stage = 3, .accum = 3, .steps = 5, .dtype = ZINC_DTYPE_BF16,
                 .clip = 0.5, .inject_inf_step = -1, .persist_threshold = 1000};
    compare(r, "accum 3 world 2 bf16");
}

/* ---- 2. memory ------------------------------------------------------------------------------ */

static long long json_field(const char *buf, const char *section, const char *key)
{
    const char *s = section ? strstr(buf, section) : buf;
    if (!s) return -1;
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(s, k);
    return p ? atoll(p + strlen(k)) : -1;
}

/* A one-group model (every element in one group, as `zinc estimate` assumes) on a world of one:
 * the engine's planned and allocated bytes, device and host, equal the estimator's. */
static void test_estimator_matches(void)
{
    const zinc_dtype dts[] = {ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    for (int di = 0; di < 2; di++) {
        const long long N = 100003;
        char cfg[1024];
        snprintf(cfg, sizeof cfg,
                 "{\"train_micro_batch_size_per_gpu\": 1, %s"
                 "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                 "\"zero_optimization\": {\"stage\": 3, " BOTH
                 "\"stage3_param_persistence_threshold\": 0},"
                 "\"zinc\": {\"grad_buckets\": 2, \"gather_buffers\": 2}}",
                 dts[di] == ZINC_DTYPE_BF16 ? "\"bf16\": {\"enabled\": true}," : "");
        zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
        zinc_engine_t *e = NULL;
        int g, p;
        int64_t shape[1] = {N};
        zinc_status s = zinc_engine_create(&o, &e);
        if (s == ZINC_OK) s = zinc_group_add(e, "all", &g);
        if (s == ZINC_OK) s = zinc_param_add(e, g, "all.w", 1, shape, dts[di], &p);
        if (s == ZINC_OK) s = zinc_finalize(e);
        ZT_CHECK(s == ZINC_OK, "one-group engine %s: %s", zinc_dtype_name(dts[di]), zinc_last_error(e));
        if (s != ZINC_OK) {
            zinc_engine_destroy(e);
            continue;
        }
        uint64_t dp[ZINC_MEM_COUNT], da[ZINC_MEM_COUNT], hp[ZINC_MEM_COUNT], ha[ZINC_MEM_COUNT];
        zinc_memory(e, dp, da);
        zinc_memory_host(e, hp, ha);
        zinc_engine_destroy(e);
        ZT_CHECK(memcmp(dp, da, sizeof dp) == 0 && memcmp(hp, ha, sizeof hp) == 0,
                 "%s: allocated differs from planned", zinc_dtype_name(dts[di]));
        ZT_CHECK(dp[ZINC_MEM_PARAM16] == 0 && dp[ZINC_MEM_MASTER] == 0,
                 "%s: param16 %llu / master %llu on the device with offload_param",
                 zinc_dtype_name(dts[di]), (unsigned long long)dp[ZINC_MEM_PARAM16],
                 (unsigned long long)dp[ZINC_MEM_MASTER]);
        char cmd[512], buf[4096];
        snprintf(cmd, sizeof cmd,
                 "%s estimate --params %lld --world-size 1 --stage 3 --dtype %s --buckets 2 "
                 "--gather-buffers 2 --offload-optimizer --offload-param --json",
                 ZINC_CLI, N, zinc_dtype_name(dts[di]));
        FILE *f = popen(cmd, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        buf[n] = 0;
        int rc = f ? pclose(f) : -1;
        ZT_CHECK(rc == 0 && strstr(buf, "\"offload_param\": true"), "zinc estimate: rc %d: %s", rc,
                 buf);
        for (int c = 0; c < ZINC_MEM_COUNT; c++) {
            const char *name = zinc_mem_category_name((zinc_mem_category)c);
            long long dev = json_field(buf, "\"bytes_per_rank\"", name);
            long long host = json_field(buf, "\"host_bytes\"", name);
            ZT_CHECK(dev == (long long)da[c] && host == (long long)ha[c],
                     "%s %s: engine device %llu host %llu, zinc estimate %lld %lld",
                     zinc_dtype_name(dts[di]), name, (unsigned long long)da[c],
                     (unsigned long long)ha[c], dev, host);
        }
    }
}

static zinc_status plan_of(toy_run *r, uint64_t dev[ZINC_MEM_COUNT], uint64_t host[ZINC_MEM_COUNT],
                           char *err, size_t cap)
{
    zinc_engine_t *e = NULL;
    int np;
    zinc_status s = toy_engine(r, &e, &np);
    snprintf(err, cap, "%s", zinc_last_error(e));
    if (s == ZINC_OK) {
        uint64_t pd[ZINC_MEM_COUNT], ph[ZINC_MEM_COUNT];
        zinc_memory(e, pd, dev);
        zinc_memory_host(e, ph, host);
        ZT_CHECK(memcmp(pd, dev, sizeof pd) == 0 && memcmp(ph, host, sizeof ph) == 0,
                 "planned and allocated differ");
    }
    zinc_engine_destroy(e);
    return s;
}

static void test_limit(void)
{
    /* fp32 on one rank, no persistent groups, so that the parameter shard (S * 4 bytes) is
     * larger than the headroom the limit needs beyond the plan: 16 bytes of step statistics and
     * zinc_param_get's temporary (the largest group in fp32: 4128 * 4 bytes). */
    toy_run opt = {.world = 1, .stage = 3, .accum = 1, .steps = 8, .dtype = ZINC_DTYPE_FP32,
                   .clip = 1.0, .inject_inf_step = -1, .persist_threshold = -1, .zero_json = OPT};
    toy_run both = opt;
    both.zero_json = BOTH;
    uint64_t od[ZINC_MEM_COUNT], oh[ZINC_MEM_COUNT], bd[ZINC_MEM_COUNT], bh[ZINC_MEM_COUNT];
    char err[512];
    ZT_CHECK(plan_of(&opt, od, oh, err, sizeof err) == ZINC_OK, "offload_optimizer plan: %s", err);
    ZT_CHECK(plan_of(&both, bd, bh, err, sizeof err) == ZINC_OK, "offload_param plan: %s", err);
    /* The split: param16 moves from the device to the host (in fp32 mode the host master is the
     * shard, so the host side does not grow); everything else stays where it was. */
    ZT_CHECK(od[ZINC_MEM_PARAM16] > 0 && bd[ZINC_MEM_PARAM16] == 0 &&
                 sum(bd) == sum(od) - od[ZINC_MEM_PARAM16] && memcmp(oh, bh, sizeof oh) == 0,
             "device %llu -> %llu (param16 %llu), host %llu -> %llu", (unsigned long long)sum(od),
             (unsigned long long)sum(bd), (unsigned long long)od[ZINC_MEM_PARAM16],
             (unsigned long long)sum(oh), (unsigned long long)sum(bh));
    uint64_t limit = sum(bd) + 16 + 4128 * 4;
    ZT_CHECK(limit < sum(od), "the test needs offload_param to save more than the headroom: "
             "limit %llu, offload_optimizer plan %llu", (unsigned long long)limit,
             (unsigned long long)sum(od));
    /* The category that does not fit: allocation goes in category order. */
    int over = -1;
    uint64_t used = 0;
    for (int c = 0; c < ZINC_MEM_COUNT && over < 0; c++)
        if ((used += od[c]) > limit) over = c;
    char zinc_json[96];
    snprintf(zinc_json, sizeof zinc_json, "\"device_memory_limit\": %llu, ", (unsigned long long)limit);
    toy_run lim = opt;
    lim.zinc_json = zinc_json;
    uint64_t x[ZINC_MEM_COUNT], y[ZINC_MEM_COUNT];
    zinc_status s = plan_of(&lim, x, y, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_NOMEM && over >= 0 &&
                 strstr(err, zinc_mem_category_name((zinc_mem_category)over)) &&
                 strstr(err, "zinc.device_memory_limit") && strstr(err, "zinc_finalize") &&
                 strstr(err, "offload_param"),
             "offload_optimizer only under the limit: %s (%s), expected %s named",
             zinc_status_string(s), err,
             over >= 0 ? zinc_mem_category_name((zinc_mem_category)over) : "?");
    /* The same limit with offload_param: trains, bitwise as an unlimited run. */
    toy_run ref = opt, lb = both;
    ref.zero_json = NULL;
    lb.zinc_json = zinc_json;
    if (toy_run_ok(&ref, "unlimited") && toy_run_ok(&lb, "offload_param under the limit"))
        ZT_CHECK(toy_weights_equal(&ref, &lb), "offload_param under the limit: weights differ");
    toy_free(&ref);
    toy_free(&lb);
}

/* ---- 3. copy volume ------------------------------------------------------------------------- */

/* The toy's groups (toy.c), to compute the expected copies independently of the engine. */
static const int64_t toy_group_params[5][2] = {{7, 15}, {1000, 0}, {1, 387}, {4097, 0}, {4, 0}};

static uint64_t up32(uint64_t x) { return (x + 31) / 32 * 32; }

/* Group g's slice in elements on `world` ranks: parameters aligned to 32, the group split evenly
 * into slices that are multiples of 32 (shard/plan.h). Its unpadded size in *numel. */
static uint64_t toy_slice(int g, int world, uint64_t *numel)
{
    uint64_t n = 0;
    for (int k = 0; k < 2; k++)
        if (toy_group_params[g][k]) n = up32(n + (uint64_t)toy_group_params[g][k]);
    *numel = n;
    return up32((n + (uint64_t)world - 1) / (uint64_t)world);
}

typedef struct {
    zinc_world_t *world;
    zinc_dtype dtype;
    int64_t persist;
} vol_ctx;

static void vol_rank(int rank, void *arg)
{
    vol_ctx *c = arg;
    int world = zinc_world_size(c->world);
    /* max_live 5000 elements: prefetch runs within it, and a prefetched group is used by the
     * following zinc_gather, so every non-persistent group is still gathered (its own slice
     * uploaded) once per use: twice per micro-step. A prefetched transfer dropped unused would
     * show here as more bytes up. */
    toy_run r = {.world = world, .stage = 3, .accum = 1, .dtype = c->dtype, .clip = 1.0,
                 .persist_threshold = c->persist,
                 .zero_json = BOTH "\"stage3_max_live_parameters\": 5000, "};
    uint64_t d = zinc_dtype_size(c->dtype), S = 0, gathered = 0, persistent = 0;
    for (int g = 0; g < 5; g++) {
        uint64_t numel, sl = toy_slice(g, world, &numel);
        S += sl;
        if ((int64_t)numel < (c->persist < 0 ? 0 : c->persist)) persistent += sl;
        else gathered += sl;
    }
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    ZT_CHECK(s == ZINC_OK, "volume rank %d: %s", rank, zinc_last_error(e));
    uint64_t hp[ZINC_MEM_COUNT];
    if (s == ZINC_OK) {
        zinc_memory_host(e, hp, NULL);
        ZT_CHECK(hp[ZINC_MEM_MASTER] == S * 4, "the test's shard %llu differs from the engine's %llu",
                 (unsigned long long)S, (unsigned long long)hp[ZINC_MEM_MASTER] / 4);
        uint64_t a = 1, b = 1;
        zinc_offload_bytes(e, &a, &b);
        ZT_CHECK(a == 0 && b == 0, "copies before the first step: %llu %llu",
                 (unsigned long long)a, (unsigned long long)b);
    }
    int applied = 0, skipped = 0;
    for (int step = 0; step < 6 && s == ZINC_OK; step++) {
        int inj = c->dtype == ZINC_DTYPE_FP16 && step == 2 && rank == 0;
        uint64_t a0, b0, a1, b1, a2, b2;
        zinc_offload_bytes(e, &a0, &b0);
        s = toy_micro_step(e, rank, world, step, np, inj);
        zinc_offload_bytes(e, &a1, &b1);
        zinc_step_info_t info = {0};
        if (s == ZINC_OK) s = zinc_step(e, &info);
        zinc_offload_bytes(e, &a2, &b2);
        /* The micro-step (the window's last: accumulation 1): two gathers (forward, backward) per
         * non-persistent group up; the gradient shard down as zinc_grads_ready reduces each
         * group, whether the step then applies or skips. */
        ZT_CHECK(a1 - a0 == S * d && b1 - b0 == 2 * gathered * d,
                 "%s persistence %lld step %d micro-step: %llu down, %llu up, want %llu and %llu",
                 zinc_dtype_name(c->dtype), (long long)c->persist, step,
                 (unsigned long long)(a1 - a0), (unsigned long long)(b1 - b0),
                 (unsigned long long)(S * d), (unsigned long long)(2 * gathered * d));
        /* The step: nothing down; up only the persistent groups' refresh of an applied step. */
        uint64_t wdown = 0, wup = info.applied ? persistent * d : 0;
        ZT_CHECK(a2 - a1 == wdown && b2 - b1 == wup,
                 "%s persistence %lld step %d (%s): %llu down, %llu up, want %llu and %llu",
                 zinc_dtype_name(c->dtype), (long long)c->persist, step,
                 info.applied ? "applied" : "skipped", (unsigned long long)(a2 - a1),
                 (unsigned long long)(b2 - b1), (unsigned long long)wdown, (unsigned long long)wup);
        applied += info.applied;
        skipped += info.skipped;
    }
    ZT_CHECK(s == ZINC_OK, "volume rank %d: %s", rank, zinc_last_error(e));
    ZT_CHECK(applied > 0 && (c->dtype != ZINC_DTYPE_FP16 || skipped == 1), "applied %d skipped %d",
             applied, skipped);
    if (s != ZINC_OK) zinc_world_abort(c->world, rank, "volume rank failed");
    zinc_engine_destroy(e);
}

static void test_volume(void)
{
    const int64_t persist[] = {-1, 1000, 0};
    for (int wi = 0; wi < 2; wi++)
        for (int di = 0; di < 2; di++)
            for (int pi = 0; pi < 3; pi++) {
                int world = wi ? 4 : 2;
                vol_ctx c = {.dtype = di ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP16,
                             .persist = persist[pi] == 0 ? 100000 : persist[pi]};
                ZT_OK(zinc_world_create_local(world, &c.world));
                zt_run_ranks(world, vol_rank, &c);
                zinc_world_destroy(c.world);
            }
}

/* ---- 4. checkpoints ------------------------------------------------------------------------ */

typedef struct {
    zinc_world_t *world, *load_world;  /* load_world: another size (reshard), or NULL */
    zinc_dtype dtype;
    const char *save_zero, *load_zero;
    const char *dir;
    toy_run out;                       /* rank 0's final weights (after the second half) */
    float *saved[TOY_MAX_PARAMS];      /* rank 0's weights at the save */
    pthread_mutex_t mu;
    int reshard_ok;
} ck_ctx;

#define CK_STEPS 3

static zinc_engine_t *ck_engine(ck_ctx *c, zinc_world_t *w, int rank, const char *zero_json, int *np)
{
    toy_run r = {.world = zinc_world_size(w), .stage = 3, .accum = 1, .dtype = c->dtype,
                 .clip = 1.0, .zero_json = zero_json, .persist_threshold = 1000};
    zinc_engine_t *e = NULL;
    zinc_status s = toy_engine_on(&r, w, rank, NULL, &e, np);
    if (s != ZINC_OK) {
        ZT_CHECK(0, "checkpoint engine rank %d: %s", rank, zinc_last_error(e));
        zinc_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* Every rank's weights (param_get is collective); rank 0 keeps them in out[]. */
static zinc_status ck_weights(ck_ctx *c, zinc_engine_t *e, int rank, int np, float **out,
                              int64_t *numel)
{
    zinc_status s = ZINC_OK;
    for (int p = 0; p < np && s == ZINC_OK; p++) {
        float *v = malloc((size_t)zinc_param_numel(e, p) * sizeof *v);
        s = zinc_param_get(e, p, v);
        pthread_mutex_lock(&c->mu);
        if (rank == 0) {
            free(out[p]);
            out[p] = v;
            if (numel) numel[p] = zinc_param_numel(e, p);
            v = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        free(v);
    }
    return s;
}

/* Same world: save after CK_STEPS, load with the other setting, CK_STEPS more. */
static void ck_rank(int rank, void *arg)
{
    ck_ctx *c = arg;
    int world = zinc_world_size(c->world), np = 0;
    zinc_engine_t *e = ck_engine(c, c->world, rank, c->save_zero, &np);
    zinc_status s = e ? toy_steps(e, rank, world, 0, CK_STEPS, np) : ZINC_ERR_ABORTED;
    if (s == ZINC_OK) s = zinc_ckpt_save(e, c->dir, "mid", NULL);
    ZT_CHECK(s == ZINC_OK, "save rank %d: %s", rank, zinc_last_error(e));
    zinc_engine_destroy(e);
    e = s == ZINC_OK ? ck_engine(c, c->world, rank, c->load_zero, &np) : NULL;
    if (e) s = zinc_ckpt_load(e, c->dir, "mid", NULL);
    if (e && s == ZINC_OK) s = toy_steps(e, rank, world, CK_STEPS, CK_STEPS, np);
    ZT_CHECK(!e || s == ZINC_OK, "load/train rank %d: %s", rank, zinc_last_error(e));
    if (e && s == ZINC_OK) s = ck_weights(c, e, rank, np, c->out.final, c->out.numel);
    if (rank == 0) c->out.nparams = np;
    if (!e || s != ZINC_OK) zinc_world_abort(c->world, rank, "checkpoint rank failed");
    zinc_engine_destroy(e);
}

static void test_ckpt_same_world(const char *dir)
{
    const char *modes[][2] = {{BOTH, NULL}, {NULL, BOTH}, {BOTH, OPT}, {OPT, BOTH}, {BOTH, BOTH}};
    const char *names[] = {"offload_param -> none", "none -> offload_param",
                           "offload_param -> offload_optimizer", "offload_optimizer -> offload_param",
                           "offload_param -> offload_param"};
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        toy_run ref = {.world = 2, .stage = 3, .accum = 1, .steps = 2 * CK_STEPS, .dtype = dts[di],
                       .clip = 1.0, .inject_inf_step = -1, .persist_threshold = 1000};
        if (!toy_run_ok(&ref, "uninterrupted")) continue;
        for (int m = 0; m < 5; m++) {
            char sub[256], cmd[300];
            snprintf(sub, sizeof sub, "%s/d%d_m%d", dir, di, m);
            ck_ctx c = {.dtype = dts[di], .save_zero = modes[m][0], .load_zero = modes[m][1],
                        .dir = sub};
            pthread_mutex_init(&c.mu, NULL);
            ZT_OK(zinc_world_create_local(2, &c.world));
            zt_run_ranks(2, ck_rank, &c);
            zinc_world_destroy(c.world);
            pthread_mutex_destroy(&c.mu);
            ZT_CHECK(toy_weights_equal(&ref, &c.out), "%s checkpoint %s: the resumed weights differ from "
                     "the uninterrupted run's", zinc_dtype_name(dts[di]), names[m]);
            toy_free(&c.out);
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sub);
        }
        toy_free(&ref);
    }
}

/* Reshard: saved on 2 ranks with offload_param, loaded on another world size. */
static void ck_save_rank(int rank, void *arg)
{
    ck_ctx *c = arg;
    int np = 0;
    zinc_engine_t *e = ck_engine(c, c->world, rank, c->save_zero, &np);
    int world = zinc_world_size(c->world);
    zinc_status s = e ? toy_steps(e, rank, world, 0, CK_STEPS, np) : ZINC_ERR_ABORTED;
    if (s == ZINC_OK) s = zinc_ckpt_save(e, c->dir, "mid", NULL);
    if (s == ZINC_OK) s = ck_weights(c, e, rank, np, c->saved, NULL);
    ZT_CHECK(s == ZINC_OK, "reshard save rank %d: %s", rank, zinc_last_error(e));
    if (s != ZINC_OK) zinc_world_abort(c->world, rank, "save failed");
    zinc_engine_destroy(e);
}

static void ck_load_rank(int rank, void *arg)
{
    ck_ctx *c = arg;
    int np = 0;
    zinc_engine_t *e = ck_engine(c, c->load_world, rank, c->load_zero, &np);
    zinc_status s = e ? zinc_ckpt_load(e, c->dir, "mid", NULL) : ZINC_ERR_ABORTED;
    float *got[TOY_MAX_PARAMS] = {0};
    if (s == ZINC_OK) s = ck_weights(c, e, rank, np, got, NULL);
    ZT_CHECK(s == ZINC_OK, "reshard load rank %d: %s", rank, zinc_last_error(e));
    /* The master back bitwise, and every gathered 16-bit weight its rounding (so the host or
     * device 16-bit shard was rebuilt from it). */
    int ok = 1;
    for (int g = 0; g < zinc_engine_group_count(e) && s == ZINC_OK; g++) {
        s = zinc_gather(e, g);
        for (int p = 0; p < np && s == ZINC_OK; p++) {
            if (zinc_param_group(e, p) != g) continue;
            void *w;
            s = zinc_param_data(e, p, &w);
            float one[1];
            for (int64_t i = 0; s == ZINC_OK && rank == 0 && i < zinc_param_numel(e, p); i++) {
                uint16_t h[2];
                zk_store(h, c->dtype, 0, got[p][i]);
                one[0] = zk_load(h, c->dtype, 0);
                ok &= got[p][i] == c->saved[p][i] && zk_load(w, c->dtype, (size_t)i) == one[0];
            }
        }
        if (s == ZINC_OK) s = zinc_release(e, g);
    }
    ZT_CHECK(s == ZINC_OK, "reshard gather rank %d: %s", rank, zinc_last_error(e));
    if (rank == 0) c->reshard_ok = ok;
    for (int p = 0; p < TOY_MAX_PARAMS; p++) free(got[p]);
    if (s != ZINC_OK) zinc_world_abort(c->load_world, rank, "load failed");
    zinc_engine_destroy(e);
}

static void test_ckpt_reshard(const char *dir)
{
    const int to[] = {4, 1, 4};
    const char *load[] = {BOTH, BOTH, NULL};
    for (int k = 0; k < 3; k++) {
        char sub[256], cmd[300];
        snprintf(sub, sizeof sub, "%s/reshard%d", dir, k);
        ck_ctx c = {.dtype = ZINC_DTYPE_BF16, .save_zero = BOTH, .load_zero = load[k], .dir = sub};
        pthread_mutex_init(&c.mu, NULL);
        ZT_OK(zinc_world_create_local(2, &c.world));
        zt_run_ranks(2, ck_save_rank, &c);
        ZT_OK(zinc_world_create_local(to[k], &c.load_world));
        zt_run_ranks(to[k], ck_load_rank, &c);
        ZT_CHECK(c.reshard_ok, "reshard 2 -> %d ranks (%s): weights after load differ", to[k],
                 load[k] ? "offload_param" : "no offload");
        zinc_world_destroy(c.world);
        zinc_world_destroy(c.load_world);
        pthread_mutex_destroy(&c.mu);
        for (int p = 0; p < TOY_MAX_PARAMS; p++) free(c.saved[p]);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sub);
    }
}

/* Stream `st` of every tensor of the checkpoint in `tagdir` into out[p] (caller frees). */
static int read_stream(const char *tagdir, int st, int np, const int64_t *numel, size_t esize,
                       void **out)
{
    char err[512];
    zck_reader *r = NULL;
    zinc_status s = zck_open(tagdir, &r, err);
    zck_target t[TOY_MAX_PARAMS];
    for (int p = 0; p < np && s == ZINC_OK; p++) {
        out[p] = malloc((size_t)numel[p] * esize);
        t[p] = (zck_target){.tensor = p, .lo = 0, .hi = (uint64_t)numel[p], .dst = out[p]};
    }
    if (s == ZINC_OK) s = zck_read(r, st, t, np, 1, err);
    ZT_CHECK(s == ZINC_OK, "reading stream %s of %s: %s", zck_stream_name(st), tagdir, err);
    zck_close(r);
    return s == ZINC_OK;
}

static void test_ckpt_weights16(const char *dir)
{
#define G16 "\"stage3_gather_16bit_weights_on_model_save\": true, "
    const char *zero[] = {G16, BOTH G16};
    void *w16[2][TOY_MAX_PARAMS] = {{0}}, *master[TOY_MAX_PARAMS] = {0};
    int64_t numel[TOY_MAX_PARAMS];
    int np = 0;
    for (int k = 0; k < 2; k++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/w16_%d", dir, k);
        ck_ctx c = {.dtype = ZINC_DTYPE_BF16, .save_zero = zero[k], .dir = sub};
        pthread_mutex_init(&c.mu, NULL);
        ZT_OK(zinc_world_create_local(2, &c.world));
        zt_run_ranks(2, ck_save_rank, &c);
        zinc_world_destroy(c.world);
        pthread_mutex_destroy(&c.mu);
        np = 0;
        for (int p = 0; p < TOY_MAX_PARAMS && c.saved[p]; p++) np++;
        /* The toy's parameter sizes, from its groups' shapes (toy.c). */
        static const int64_t sizes[] = {7, 15, 1000, 1, 387, 4097, 4};
        for (int p = 0; p < np; p++) numel[p] = sizes[p];
        ZT_CHECK(np == 7, "the toy has 7 parameters, got %d", np);
        char tagdir[300];
        snprintf(tagdir, sizeof tagdir, "%s/mid", sub);
        if (np == 7) read_stream(tagdir, ZCK_WEIGHTS16, np, numel, 2, w16[k]);
        if (np == 7 && k == 1) read_stream(tagdir, ZCK_MASTER, np, numel, 4, master);
        for (int p = 0; p < TOY_MAX_PARAMS; p++) free(c.saved[p]);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sub);
    }
    for (int p = 0; p < np; p++) {
        if (!w16[0][p] || !w16[1][p] || !master[p]) continue;
        ZT_CHECK(memcmp(w16[0][p], w16[1][p], (size_t)numel[p] * 2) == 0,
                 "weights16 of parameter %d differs with offload_param", p);
        int ok = 1;
        for (int64_t i = 0; i < numel[p]; i++) {
            uint16_t h[2];
            zk_store(h, ZINC_DTYPE_BF16, 0, ((float *)master[p])[i]);
            ok &= h[0] == ((uint16_t *)w16[1][p])[i];
        }
        ZT_CHECK(ok, "weights16 of parameter %d is not the rounding of its master", p);
    }
    for (int p = 0; p < TOY_MAX_PARAMS; p++) {
        free(w16[0][p]);
        free(w16[1][p]);
        free(master[p]);
    }
#undef G16
}

static void test_ckpt(void)
{
    char dir[] = "/tmp/zinc_offload_param_XXXXXX";
    ZT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_ckpt_same_world(dir);
    test_ckpt_reshard(dir);
    test_ckpt_weights16(dir);
    rmdir(dir);
}

int main(void)
{
    test_bitwise();
    test_estimator_matches();
    test_limit();
    test_volume();
    test_ckpt();
    return zt_finish("test_offload_param");
}
