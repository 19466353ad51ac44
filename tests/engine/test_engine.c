/*
 * test_engine.c — the engine's contracts besides stage equivalence:
 *   bad API use returns a status and a message (never a crash); registrations that differ across
 *   ranks are refused on every rank; memory allocated equals the plan; comm volume per step equals
 *   the ZeRO volumes; an inf in one rank's gradient skips the step on every rank with weights, m
 *   and v unchanged; the clipped global norm equals the norm of the full gradient; a failed rank
 *   makes the others return an error within the timeout; a second engine on a local world's rank
 *   is refused with the comm's message whole, engines with worlds of their own coexist.
 */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/internal.h"
#include "kernels/device.h"
#include "testutil.h"
#include "toy.h"

static const char *cfg_stage(int stage, const char *prec)
{
    static _Thread_local char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"train_micro_batch_size_per_gpu\": 1, %s \"zero_optimization\": {\"stage\": %d},"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             "\"zinc\": {\"comm_timeout_s\": 3}}",
             prec ? prec : "", stage);
    return buf;
}

/* ---- misuse on one rank ------------------------------------------------------------------- */
static void test_misuse(void)
{
    zinc_engine_t *e = NULL;
    zinc_engine_options_t o = {.config_json = cfg_stage(3, "\"bf16\": {\"enabled\": true},")};
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    zinc_step_info_t info;
    int pdummy, gdummy;
    ZT_CHECK(zinc_step(e, &info) == ZINC_ERR_USAGE, "step before finalize");
    ZT_CHECK(strstr(zinc_last_error(e), "finalize") != NULL, "message: %s", zinc_last_error(e));
    int64_t shape[1] = {10};
    ZT_CHECK(zinc_param_add(e, 0, "w", 1, shape, ZINC_DTYPE_BF16, &pdummy) == ZINC_ERR_INVALID_ARG,
             "param in unknown group");
    int g;
    ZT_OK(zinc_group_add(e, "g", &g));
    ZT_CHECK(zinc_group_add(e, "g", &gdummy) == ZINC_ERR_INVALID_ARG, "duplicate group");
    ZT_CHECK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP16, &pdummy) == ZINC_ERR_INVALID_ARG,
             "dtype mismatch");
    ZT_CHECK(strstr(zinc_last_error(e), "bf16") != NULL, "message names the precision: %s",
             zinc_last_error(e));
    int64_t bad[1] = {-3};
    ZT_CHECK(zinc_param_add(e, g, "w", 1, bad, ZINC_DTYPE_BF16, &pdummy) == ZINC_ERR_INVALID_ARG,
             "negative extent");
    ZT_CHECK(zinc_param_add(e, g, "w", 0, shape, ZINC_DTYPE_BF16, &pdummy) == ZINC_ERR_INVALID_ARG,
             "ndim 0");
    ZT_CHECK(zinc_finalize(e) == ZINC_ERR_USAGE, "finalize with no params");
    int p;
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_BF16, &p));
    ZT_CHECK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_BF16, &pdummy) == ZINC_ERR_INVALID_ARG,
             "duplicate param");
    ZT_OK(zinc_finalize(e));
    ZT_CHECK(zinc_finalize(e) == ZINC_ERR_USAGE, "double finalize");
    ZT_CHECK(zinc_group_add(e, "h", &gdummy) == ZINC_ERR_USAGE, "group after finalize");
    void *ptr;
    ZT_CHECK(zinc_param_data(e, p, &ptr) == ZINC_ERR_USAGE, "stage 3 view of an ungathered group");
    ZT_CHECK(zinc_param_data(e, 99, &ptr) == ZINC_ERR_INVALID_ARG, "unknown param");
    ZT_CHECK(zinc_gather(e, 7) == ZINC_ERR_INVALID_ARG, "unknown group");
    ZT_CHECK(zinc_release(e, g) == ZINC_ERR_USAGE, "release of an ungathered group");
    ZT_OK(zinc_gather(e, g));
    ZT_CHECK(zinc_gather(e, g) == ZINC_ERR_USAGE, "double gather");
    ZT_OK(zinc_param_data(e, p, &ptr));
    ZT_CHECK(zinc_step(e, &info) == ZINC_ERR_USAGE, "step without grads_ready");
    ZT_OK(zinc_release(e, g));
    ZT_OK(zinc_grads_ready(e, g));
    ZT_CHECK(zinc_grads_ready(e, g) == ZINC_ERR_USAGE, "grads_ready twice");
    ZT_OK(zinc_step(e, &info));
    /* What the Python front-end calls at every hand-over from zinc to torch: on the CPU device a
     * wait with nothing to wait for, and no CUDA stream or ordinal to hand out. */
    ZT_OK(zinc_engine_sync(e));
    ZT_CHECK(zinc_engine_sync(NULL) == ZINC_ERR_INVALID_ARG, "sync of a NULL engine");
    ZT_CHECK(zinc_engine_cuda_stream(e) == NULL && zinc_engine_cuda_device(e) == -1,
             "a CPU engine hands out a CUDA stream or ordinal");
    ZT_CHECK(zinc_grads_ready(e, -1) == ZINC_ERR_INVALID_ARG, "grads_ready of group -1");
    ZT_CHECK(zinc_param_set(e, p, NULL) == ZINC_ERR_INVALID_ARG, "param_set NULL");
    zinc_engine_destroy(e);
    zinc_engine_destroy(NULL);

    /* Bad configs and options fail creation with a message naming the key. */
    zinc_engine_options_t bad_cfg = {.config_json = "{\"zero_optimization\": {\"stage\": 4}}"};
    e = NULL;
    ZT_CHECK(zinc_engine_create(&bad_cfg, &e) == ZINC_ERR_CONFIG && e == NULL, "stage 4 accepted");
    ZT_CHECK(strstr(zinc_last_error(NULL), "zero_optimization.stage") != NULL, "message: %s",
             zinc_last_error(NULL));
    zinc_engine_options_t none = {0};
    ZT_CHECK(zinc_engine_create(&none, &e) == ZINC_ERR_INVALID_ARG, "no config");
    zinc_engine_options_t missing = {.config_path = "/nonexistent/ds.json"};
    ZT_CHECK(zinc_engine_create(&missing, &e) != ZINC_OK, "missing config file");
    ZT_CHECK(strstr(zinc_last_error(NULL), "/nonexistent/ds.json") != NULL, "message: %s",
             zinc_last_error(NULL));
}

/* ---- multi-rank scenarios ----------------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int stage;
    int64_t persist;          /* toy_run.persist_threshold */
    zinc_status st[8];
    char msg[8][512];
    double seconds[8];
    uint64_t bytes[8][ZINC_COLL_COUNT];
    uint64_t flat_bytes;      /* padded elements * 2 bytes (bf16) */
} mr_ctx;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void mismatch_rank(int rank, void *arg)
{
    mr_ctx *c = arg;
    zinc_engine_options_t o = {.config_json = cfg_stage(2, NULL), .world = c->world, .rank = rank,
                               .threads = 1};
    zinc_engine_t *e = NULL;
    zinc_status s = zinc_engine_create(&o, &e);
    int64_t shape[1] = {rank == 2 ? 11 : 10};
    int g, pdummy;
    if (s == ZINC_OK) s = zinc_group_add(e, "g", &g);
    if (s == ZINC_OK) s = zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &pdummy);
    if (s == ZINC_OK) s = zinc_finalize(e);
    c->st[rank] = s;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_mismatch(void)
{
    mr_ctx c = {0};
    ZT_OK(zinc_world_create_local(3, &c.world));
    zt_run_ranks(3, mismatch_rank, &c);
    for (int r = 0; r < 3; r++) {
        ZT_CHECK(c.st[r] == ZINC_ERR_MISMATCH, "rank %d: %s", r, zinc_status_string(c.st[r]));
        ZT_CHECK(strstr(c.msg[r], "rank(s) 2") != NULL, "rank %d message: %s", r, c.msg[r]);
    }
    zinc_world_destroy(c.world);
}

/* One rank's engine on the toy model, with memory and volume checks after one step. */
static void volume_rank(int rank, void *arg)
{
    mr_ctx *c = arg;
    toy_run tr = {.world = 4, .stage = c->stage, .accum = 1, .dtype = ZINC_DTYPE_BF16,
                  .persist_threshold = c->persist};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&tr, c->world, rank, NULL, &e, &np);
    if (s == ZINC_OK) {
        uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
        zinc_memory(e, planned, alloc);
        for (int k = 0; k < ZINC_MEM_COUNT; k++)
            ZT_CHECK(planned[k] == alloc[k], "stage %d %s planned %llu allocated %llu", c->stage,
                     zinc_mem_category_name((zinc_mem_category)k), (unsigned long long)planned[k],
                     (unsigned long long)alloc[k]);
        /* The plan against the ZeRO formulas, in padded elements F (flat) and S (shard). */
        uint64_t F = e->plan.flat_numel, S = e->plan.shard_numel;
        uint64_t want16 = (c->stage < 3 ? F : S) * 2, wantg = (c->stage < 2 ? F : S) * 2;
        /* Stage 3 buffers: the persistent groups (all of the toy's, at DeepSpeed's default
         * threshold) in full, or the gather area's slots. */
        if (c->stage == 3)
            ZT_CHECK(c->persist == 0 ? planned[ZINC_MEM_GATHER] == F * 2
                                     : planned[ZINC_MEM_GATHER] % (e->plan.max_group_padded * 2) == 0,
                     "stage 3 gather buffers: %llu bytes", (unsigned long long)planned[ZINC_MEM_GATHER]);
        uint64_t wantm = (c->stage == 0 ? F : S) * 4;
        ZT_CHECK(planned[ZINC_MEM_PARAM16] == want16 && planned[ZINC_MEM_GRAD] == wantg &&
                     planned[ZINC_MEM_MASTER] == wantm && planned[ZINC_MEM_ADAM_V] == wantm,
                 "stage %d plan does not follow the ZeRO formulas", c->stage);
        ZT_CHECK(S * 4 == F, "shard is 1/4 of the flat buffer");
        if (rank == 0) c->flat_bytes = F * 2; /* one writer: every rank has the same F */
        s = toy_micro_step(e, rank, 4, 0, np, 0);
    }
    if (s == ZINC_OK) s = zinc_step(e, NULL);
    if (s == ZINC_OK) zinc_comm_bytes(e, c->bytes[rank]);
    c->st[rank] = s;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_volume_and_memory(void)
{
    /* Stage 3 twice: with no persistent group (3Ψ), and with all persistent (2Ψ: their
     * parameters are gathered once per step, after the update, instead of twice). */
    for (int run = 0; run <= 4; run++) {
        int stage = run > 3 ? 3 : run;
        mr_ctx c = {.stage = stage, .persist = run == 3 ? -1 : 0};
        ZT_OK(zinc_world_create_local(4, &c.world));
        zt_run_ranks(4, volume_rank, &c);
        zinc_world_destroy(c.world);
        for (int r = 0; r < 4; r++) ZT_CHECK(c.st[r] == ZINC_OK, "stage %d rank %d: %s", stage, r, c.msg[r]);
        uint64_t P = c.flat_bytes; /* Ψ in bytes of the 16-bit copy, padded */
        uint64_t *b = c.bytes[0];
        uint64_t total = b[0] + b[1] + b[2] + b[3];
        /* The (norm², overflow) all-reduce: 2 doubles, counted twice as every all-reduce. */
        uint64_t stats = 2 * 2 * sizeof(double);
        uint64_t k = run == 3 ? 3 : 2;
        uint64_t want = k * P + stats;
        ZT_CHECK(total == want, "stage %d%s: %llu bytes moved, ZeRO volume %llu (+%llu stats)", stage,
                 run == 4 ? " (persistent groups)" : "", (unsigned long long)total,
                 (unsigned long long)(k * P), (unsigned long long)stats);
        for (int r = 1; r < 4; r++)
            ZT_CHECK(!memcmp(c.bytes[r], c.bytes[0], sizeof c.bytes[0]), "ranks count alike");
    }
}

/* ---- overflow skip and clipping ----------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int stage;
    zinc_dtype dtype;
    double clip;
    int ok[4];
    zinc_step_info_t info[4];
    double expect_norm;
} ov_ctx;

static void overflow_rank(int rank, void *arg)
{
    ov_ctx *c = arg;
    toy_run tr = {.world = 4, .stage = c->stage, .accum = 1, .dtype = c->dtype, .clip = c->clip};
    zinc_engine_t *e = NULL;
    int np = 0, ok = 1;
    zinc_status s = toy_engine_on(&tr, c->world, rank, NULL, &e, &np);
    /* Two clean steps so m and v are non-zero, then one with an inf on rank 1. */
    for (int k = 0; k < 2 && s == ZINC_OK; k++) {
        s = toy_micro_step(e, rank, 4, k, np, 0);
        if (s == ZINC_OK) s = zinc_step(e, NULL);
    }
    size_t n = e && e->finalized ? (e->stage == 0 ? e->plan.flat_numel : e->plan.shard_numel) : 0;
    float *snap = malloc(3 * n * sizeof(float) + 4);
    if (s == ZINC_OK) {
        memcpy(snap, e->master, n * 4);
        memcpy(snap + n, e->m, n * 4);
        memcpy(snap + 2 * n, e->v, n * 4);
        s = toy_micro_step(e, rank, 4, 2, np, rank == 1);
    }
    if (s == ZINC_OK) s = zinc_step(e, &c->info[rank]);
    if (s == ZINC_OK) {
        ok = c->info[rank].skipped && !c->info[rank].applied && !isfinite(c->info[rank].grad_norm) &&
             !memcmp(snap, e->master, n * 4) && !memcmp(snap + n, e->m, n * 4) &&
             !memcmp(snap + 2 * n, e->v, n * 4);
        /* The next clean step applies again. */
        s = toy_micro_step(e, rank, 4, 3, np, 0);
        if (s == ZINC_OK) s = zinc_step(e, NULL);
    }
    c->ok[rank] = ok && s == ZINC_OK;
    if (s != ZINC_OK) fprintf(stderr, "rank %d: %s\n", rank, zinc_last_error(e));
    free(snap);
    zinc_engine_destroy(e);
}

static void test_overflow(void)
{
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16};
    for (int di = 0; di < 2; di++)
        for (int stage = 0; stage <= 3; stage++) {
            ov_ctx c = {.stage = stage, .dtype = dts[di], .clip = 1.0};
            ZT_OK(zinc_world_create_local(4, &c.world));
            zt_run_ranks(4, overflow_rank, &c);
            zinc_world_destroy(c.world);
            for (int r = 0; r < 4; r++)
                ZT_CHECK(c.ok[r], "%s stage %d rank %d: overflow step not skipped cleanly",
                         zinc_dtype_name(dts[di]), stage, r);
            /* DeepSpeed 0.19.8: stages 1-3 (DynamicLossScaler) tolerate the first overflow with
             * hysteresis 2; stage 0 (FP16_Optimizer) has no hysteresis and halves at once. */
            if (dts[di] == ZINC_DTYPE_FP16 && stage > 0)
                ZT_CHECK(c.info[0].next_loss_scale == c.info[0].loss_scale,
                         "stage %d, hysteresis 2: the first overflow keeps the scale (%g -> %g)",
                         stage, c.info[0].loss_scale, c.info[0].next_loss_scale);
            if (dts[di] == ZINC_DTYPE_FP16 && stage == 0)
                ZT_CHECK(c.info[0].next_loss_scale == c.info[0].loss_scale / 2,
                         "stage 0: the first overflow halves the scale (%g -> %g)",
                         c.info[0].loss_scale, c.info[0].next_loss_scale);
        }
}

/* The engine's global norm equals the norm of the full averaged gradient, computed here from the
 * same gradients each rank wrote (fp32 working copy, so nothing is rounded to 16 bits). */
typedef struct {
    zinc_world_t *world;
    int stage;
    float *full[4];            /* each rank's gradient of the single param, as written */
    zinc_step_info_t info[4];
    int64_t n;
} clip_ctx;

static void clip_rank(int rank, void *arg)
{
    clip_ctx *c = arg;
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 0.5,"
             "\"zero_optimization\": {\"stage\": %d}}", c->stage);
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int g0, g1, p0, p1;
    int64_t s0[1] = {777}, s1[2] = {33, 3};
    ZT_OK(zinc_group_add(e, "a", &g0));
    ZT_OK(zinc_group_add(e, "b", &g1));
    ZT_OK(zinc_param_add(e, g0, "a.w", 1, s0, ZINC_DTYPE_FP32, &p0));
    ZT_OK(zinc_param_add(e, g1, "b.w", 2, s1, ZINC_DTYPE_FP32, &p1));
    ZT_OK(zinc_finalize(e));
    zt_rng rng = {(uint64_t)rank * 7919 + 1};
    int params[2] = {p0, p1};
    int64_t off = 0;
    for (int k = 0; k < 2; k++) {
        ZT_OK(zinc_gather(e, k));
        float *gr;
        ZT_OK(zinc_param_grad(e, params[k], (void **)&gr));
        int64_t n = zinc_param_numel(e, params[k]);
        for (int64_t i = 0; i < n; i++) {
            gr[i] = (float)zt_normal(&rng);
            c->full[rank][off + i] = gr[i];
        }
        off += n;
        ZT_OK(zinc_release(e, k));
        ZT_OK(zinc_grads_ready(e, k));
    }
    ZT_OK(zinc_step(e, &c->info[rank]));
    zinc_engine_destroy(e);
}

static void test_clip_norm(void)
{
    for (int stage = 0; stage <= 3; stage++) {
        clip_ctx c = {.stage = stage, .n = 777 + 99};
        for (int r = 0; r < 4; r++) c.full[r] = calloc((size_t)c.n, sizeof(float));
        ZT_OK(zinc_world_create_local(4, &c.world));
        zt_run_ranks(4, clip_rank, &c);
        zinc_world_destroy(c.world);
        long double ss = 0;
        for (int64_t i = 0; i < c.n; i++) {
            long double m = 0;
            for (int r = 0; r < 4; r++) m += c.full[r][i];
            m /= 4;
            ss += m * m;
        }
        double norm = sqrt((double)ss);
        for (int r = 0; r < 4; r++) {
            /* The engine's mean is rounded to fp32 per element (relative 2^-24) before its
             * double sum of squares: the norms agree to a few 1e-8; 1e-6 leaves room. */
            ZT_CHECK(fabs(c.info[r].grad_norm - norm) <= 1e-6 * norm,
                     "stage %d rank %d: engine norm %.9g, full-gradient norm %.9g", stage, r,
                     c.info[r].grad_norm, norm);
            double clipped = norm / ((norm + 1e-6) / 0.5);
            ZT_CHECK(fabs(c.info[r].grad_norm_clipped - clipped) <= 1e-6 * clipped,
                     "stage %d: clipped norm %.9g, expected %.9g", stage,
                     c.info[r].grad_norm_clipped, clipped);
            free(c.full[r]);
        }
    }
}

/* ---- a failing rank ----------------------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int mode;                 /* 0: rank 2 calls zinc_world_abort, 1: rank 2 just stops */
    zinc_status st[4];
    char msg[4][512];
    double seconds[4];
} fail_ctx;

static void fail_rank(int rank, void *arg)
{
    fail_ctx *c = arg;
    toy_run tr = {.world = 4, .stage = 3, .accum = 1, .dtype = ZINC_DTYPE_BF16,
                  .extra_json = "\"zinc\": {\"comm_timeout_s\": 1.5},"};
    char *cfgs = toy_config(&tr);
    /* toy_config already has a zinc section; use ours by building the text directly instead. */
    free(cfgs);
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
             "\"zero_optimization\": {\"stage\": 3}, \"zinc\": {\"comm_timeout_s\": 1.5}}");
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = zinc_engine_create(&o, &e);
    if (s == ZINC_OK) s = toy_register(e, &np);
    double t0 = 0;
    for (int step = 0; step < 6 && s == ZINC_OK; step++) {
        if (step == 3 && rank == 2) {
            t0 = now_s();
            if (c->mode == 0) zinc_world_abort(c->world, 2, "test hook: rank 2 failed");
            s = ZINC_ERR_INTERNAL;
            break;
        }
        if (step == 3) t0 = now_s();
        s = toy_micro_step(e, rank, 4, step, np, 0);
        if (s == ZINC_OK) s = zinc_step(e, NULL);
    }
    c->seconds[rank] = now_s() - t0;
    c->st[rank] = s;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_failing_rank(void)
{
    for (int mode = 0; mode < 2; mode++) {
        fail_ctx c = {.mode = mode};
        ZT_OK(zinc_world_create_local(4, &c.world));
        zt_run_ranks(4, fail_rank, &c);
        zinc_world_destroy(c.world);
        for (int r = 0; r < 4; r++) {
            if (r == 2) continue;
            zinc_status want = mode == 0 ? ZINC_ERR_ABORTED : ZINC_ERR_TIMEOUT;
            /* With a silent rank, the first to time out aborts the world, so the others may see
             * ABORTED instead; both are errors within the timeout. */
            ZT_CHECK(c.st[r] == want || (mode == 1 && c.st[r] == ZINC_ERR_ABORTED),
                     "mode %d rank %d: %s (%s)", mode, r, zinc_status_string(c.st[r]), c.msg[r]);
            ZT_CHECK(c.seconds[r] < 1.5 + 2.0, "mode %d rank %d returned after %.2f s", mode, r,
                     c.seconds[r]);
            if (mode == 0)
                ZT_CHECK(strstr(c.msg[r], "rank 2 failed") != NULL, "rank %d message: %s", r, c.msg[r]);
        }
    }
}

/* A hand-over that fails (here: rank 1 aborts the world while rank 0 hands its first group
 * over at stage 2) marks the group: rank 0's zinc_step and a second zinc_grads_ready name that
 * failure. Before, zinc_step said the group "holds gradient added into its bucket after its
 * zinc_grads_ready" and the retry "already handed over", both blaming the caller. */
typedef struct {
    zinc_world_t *world;
    zinc_status ready, step, again;
    char step_msg[1024], again_msg[1024];
} handover_ctx;

static void handover_rank(int rank, void *arg)
{
    handover_ctx *c = arg;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                      "\"zero_optimization\": {\"stage\": 2}, \"zinc\": {\"comm_timeout_s\": 20}}";
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = zinc_engine_create(&o, &e);
    if (s == ZINC_OK) s = toy_register(e, &np);
    if (s != ZINC_OK) {
        if (rank == 0) c->ready = s;
        zinc_engine_destroy(e);
        return;
    }
    if (rank == 1) {
        zinc_world_abort(c->world, 1, "test hook: rank 1 failed");
    } else {
        c->ready = toy_micro_step(e, rank, 2, 0, np, 0);
        c->step = zinc_step(e, NULL);
        snprintf(c->step_msg, sizeof c->step_msg, "%s", zinc_last_error(e));
        c->again = zinc_grads_ready(e, TOY_GROUPS - 1);   /* the backward's first, which failed */
        snprintf(c->again_msg, sizeof c->again_msg, "%s", zinc_last_error(e));
    }
    zinc_engine_destroy(e);
}

static void test_failed_handover(void)
{
    handover_ctx c = {0};
    ZT_OK(zinc_world_create_local(2, &c.world));
    zt_run_ranks(2, handover_rank, &c);
    zinc_world_destroy(c.world);
    ZT_CHECK(c.ready == ZINC_ERR_ABORTED, "rank 0's hand-over in an aborted world: %s",
             zinc_status_string(c.ready));
    const char *want = "the hand-over of group 'block4' failed earlier in this micro-step";
    ZT_CHECK(c.step == ZINC_ERR_USAGE && strstr(c.step_msg, "zinc_step: ") &&
             strstr(c.step_msg, want), "zinc_step after it: %s: %s",
             zinc_status_string(c.step), c.step_msg);
    ZT_CHECK(c.again == ZINC_ERR_USAGE && strstr(c.again_msg, "zinc_grads_ready: ") &&
             strstr(c.again_msg, want), "zinc_grads_ready again: %s: %s",
             zinc_status_string(c.again), c.again_msg);
}

/* A stage-3 bf16 toy engine (no persistent group) whose first micro-step and step are done:
 * zinc has recorded its gather order, so the next micro-step's gathers prefetch. NULL on failure. */
static zinc_engine_t *traced_stage3(int *np)
{
    toy_run tr = {.world = 1, .stage = 3, .accum = 1, .dtype = ZINC_DTYPE_BF16,
                  .persist_threshold = -1};
    zinc_engine_t *e = NULL;
    ZT_OK(toy_engine(&tr, &e, np));
    if (!e) return NULL;
    ZT_CHECK(e->ngather >= 2, "stage 3 gather area of %d slots", e->ngather);
    ZT_OK(toy_micro_step(e, 0, 1, 0, *np, 0));
    ZT_OK(zinc_step(e, NULL));
    return e;
}

/* Stage 3 prefetch: after the first micro-step recorded the order of gathers, gathering the
 * first group also gathers the following ones into free buffers; leaving the order stops it and
 * records the order again. */
static void test_prefetch(void)
{
    int np = 0;
    zinc_engine_t *e = traced_stage3(&np);
    if (!e) return;
    ZT_CHECK(e->gstate[1].gather_slot < 0, "nothing prefetched before the trace is followed");
    ZT_OK(zinc_gather(e, 0));
    ZT_CHECK(e->gstate[1].gather_slot >= 0 && !e->gstate[1].held, "group 1 prefetched");
    ZT_OK(zinc_release(e, 0));
    ZT_OK(zinc_gather(e, 1)); /* a prefetch hit: no new collective */
    ZT_CHECK(e->gstate[1].held, "group 1 held after its gather");
    ZT_OK(zinc_release(e, 1));
    /* Out of order: group 4 next instead of 2; prefetch stops (this micro-step is recorded as
     * the new order: 0, 1, 4), gathering still works. */
    int before = e->gstate[3].gather_slot;
    ZT_OK(zinc_gather(e, 4));
    ZT_CHECK(!e->trace_done && e->trace_len == 3 && e->trace[2] == 4,
             "trace left: recorded again (done %d, %d entries)", e->trace_done, e->trace_len);
    ZT_OK(zinc_release(e, 4));
    for (int g = 0; g < 5; g++) {
        ZT_OK(zinc_grads_ready(e, g));
    }
    ZT_OK(zinc_step(e, NULL));
    for (int g = 0; g < 5; g++)
        ZT_CHECK(e->gstate[g].gather_slot < 0, "group %d (slot before %d) dropped at the step", g, before);
    zinc_engine_destroy(e);
}

/* zinc_param_set on a stage-3 group that zinc_gather prefetched: the prefetched copy holds the
 * old values, so it is dropped and the next zinc_gather reads the new ones; on a group the caller
 * holds gathered, refused. */
static void test_set_prefetched(void)
{
    int np = 0;
    zinc_engine_t *e = traced_stage3(&np);
    if (!e) return;
    int p0 = -1, p1 = -1;
    for (int p = 0; p < np; p++) {
        if (p0 < 0 && toy_param_group(p) == 0) p0 = p;
        if (p1 < 0 && toy_param_group(p) == 1) p1 = p;
    }
    ZT_OK(zinc_gather(e, 0));
    ZT_CHECK(e->gstate[1].gather_slot >= 0, "group 1 prefetched");
    size_t n1 = (size_t)zinc_param_numel(e, p1);
    size_t n0 = (size_t)zinc_param_numel(e, p0);
    float *vals = malloc((n0 > n1 ? n0 : n1) * sizeof *vals);
    for (size_t i = 0; i < (n0 > n1 ? n0 : n1); i++) vals[i] = 0.5f;
    ZT_CHECK(zinc_param_set(e, p0, vals) == ZINC_ERR_USAGE, "set while its group is gathered");
    ZT_CHECK(strstr(zinc_last_error(e), "zinc_release it first") != NULL, "message: %s",
             zinc_last_error(e));
    ZT_OK(zinc_release(e, 0));
    ZT_OK(zinc_param_set(e, p1, vals));
    ZT_CHECK(e->gstate[1].gather_slot < 0, "the prefetched copy of group 1 dropped");
    ZT_OK(zinc_gather(e, 1));
    void *view = NULL;
    ZT_OK(zinc_param_data(e, p1, &view));
    size_t stale = 0;
    for (size_t i = 0; view && i < n1; i++) stale += ((const uint16_t *)view)[i] != 0x3F00; /* bf16 0.5 */
    ZT_CHECK(view && stale == 0, "%zu of %zu gathered values are not the ones set", stale, n1);
    ZT_OK(zinc_release(e, 1));
    free(vals);
    zinc_engine_destroy(e);
}

/* zinc_broadcast: rank 1's bytes reach every rank; a root outside the world and a call before
 * finalize are refused. */
typedef struct {
    zinc_world_t *world;
    zinc_status st[3], bad_root[3], early[3];
    unsigned char got[3][5];
} bcast_ctx;

static void bcast_rank(int rank, void *arg)
{
    bcast_ctx *c = arg;
    static const char cfg[] = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 1}}";
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int g, p;
    int64_t shape[1] = {6};
    unsigned char buf[5];
    for (int i = 0; i < 5; i++) buf[i] = (unsigned char)(16 * rank + i);
    zinc_status s = zinc_engine_create(&o, &e);
    c->early[rank] = s == ZINC_OK ? zinc_broadcast(e, buf, 5, 0) : s;
    if (s == ZINC_OK) s = zinc_group_add(e, "g", &g);
    if (s == ZINC_OK) s = zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p);
    if (s == ZINC_OK) s = zinc_finalize(e);
    c->bad_root[rank] = s == ZINC_OK ? zinc_broadcast(e, buf, 5, 3) : s;
    if (s == ZINC_OK) s = zinc_broadcast(e, buf, 5, 1);
    c->st[rank] = s;
    memcpy(c->got[rank], buf, 5);
    zinc_engine_destroy(e);
}

static void test_broadcast(void)
{
    bcast_ctx c = {0};
    ZT_OK(zinc_world_create_local(3, &c.world));
    zt_run_ranks(3, bcast_rank, &c);
    zinc_world_destroy(c.world);
    for (int r = 0; r < 3; r++) {
        ZT_CHECK(c.early[r] == ZINC_ERR_USAGE, "rank %d: before finalize: %s", r,
                 zinc_status_string(c.early[r]));
        ZT_CHECK(c.bad_root[r] == ZINC_ERR_INVALID_ARG, "rank %d: root 3 of 3: %s", r,
                 zinc_status_string(c.bad_root[r]));
        ZT_OK(c.st[r]);
        for (int i = 0; i < 5; i++)
            ZT_CHECK(c.got[r][i] == 16 + i, "rank %d byte %d = %d, rank 1 sent %d", r, i,
                     c.got[r][i], 16 + i);
    }
}

/* checkpoint.tag_validation: ranks saving under different tags. "Fail" refuses on every rank,
 * each message true of its rank; "Warn" saves under rank 0's tag. Then ranks loading with
 * different tags: every rank loads rank 0's, and the others say so. */
typedef struct {
    zinc_world_t *world;
    const char *mode;
    const char *dir;
    int load;                    /* 1: load dir with tag0 on rank 0, another tag elsewhere;
                                    2: load the tag a search picks (tag NULL) */
    zinc_status st[3];
    char err[3][600];
    char loaded[3][256];
} tag_ctx;

static void tag_rank(int rank, void *arg)
{
    tag_ctx *c = arg;
    char cfg[512], tag[32];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2},"
             "\"checkpoint\": {\"tag_validation\": \"%s\"}}", c->mode);
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int g, pdummy;
    int64_t shape[1] = {100};
    zinc_status s = zinc_engine_create(&o, &e);
    if (s == ZINC_OK) s = zinc_group_add(e, "g", &g);
    if (s == ZINC_OK) s = zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &pdummy);
    if (s == ZINC_OK) s = zinc_finalize(e);
    snprintf(tag, sizeof tag, "tag%d", rank);
    zinc_ckpt_load_options_t lo = {0};
    if (s == ZINC_OK && c->load) s = zinc_ckpt_load(e, c->dir, c->load == 2 ? NULL : tag, &lo);
    else if (s == ZINC_OK) s = zinc_ckpt_save(e, c->dir, tag, NULL);
    c->st[rank] = s;
    snprintf(c->err[rank], sizeof c->err[rank], "%s", e ? zinc_last_error(e) : "");
    snprintf(c->loaded[rank], sizeof c->loaded[rank], "%s", lo.loaded_tag);
    zinc_engine_destroy(e);
}

static void test_tag_validation(void)
{
    char dir[] = "/tmp/zinc-tagtest-XXXXXX";
    if (!mkdtemp(dir)) {
        ZT_CHECK(0, "mkdtemp failed");
        return;
    }
    const char *modes[2] = {"Fail", "Warn"};
    for (int m = 0; m < 2; m++) {
        tag_ctx c = {.mode = modes[m], .dir = dir};
        ZT_OK(zinc_world_create_local(3, &c.world));
        zt_run_ranks(3, tag_rank, &c);
        zinc_world_destroy(c.world);
        for (int r = 0; r < 3; r++)
            ZT_CHECK(c.st[r] == (m == 0 ? ZINC_ERR_MISMATCH : ZINC_OK), "%s rank %d: %s", modes[m],
                     r, zinc_status_string(c.st[r]));
        if (m == 0) {
            /* rank 0 holds rank 0's tag: its message said "rank 0 with 'tag0', rank 0 has
             * 'tag0'" before */
            ZT_CHECK(strstr(c.err[0], "another rank's differs") && !strstr(c.err[0], "rank 0 has"),
                     "Fail, rank 0's message: %s", c.err[0]);
            ZT_CHECK(strstr(c.err[1], "with 'tag1', rank 0 has 'tag0'"), "Fail, rank 1's "
                     "message: %s", c.err[1]);
        }
    }
    /* Loads with different tags: rank 0's (tag0) everywhere, and ranks 1 and 2 say so. Then a
     * load whose search passes over an unfinished save (tag9.tmp: a save killed while
     * writing), which it names (before 2026-12-01 only in a debug line). */
    char logpath[600], said[8192] = "", said2[8192] = "";
    snprintf(logpath, sizeof logpath, "%s/stderr.txt", dir);
    tag_ctx lc = {.mode = "Warn", .dir = dir, .load = 1},
            lc2 = {.mode = "Warn", .dir = dir, .load = 2};
    char unfinished[600];
    snprintf(unfinished, sizeof unfinished, "%s/tag9.tmp", dir);
    ZT_CHECK(mkdir(unfinished, 0700) == 0, "mkdir %s", unfinished);
    for (int k = 0; k < 2; k++) {
        tag_ctx *t = k ? &lc2 : &lc;
        char *out = k ? said2 : said;
        fflush(stderr);
        int saved_err = dup(2);
        int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) dup2(fd, 2);
        ZT_OK(zinc_world_create_local(3, &t->world));
        zt_run_ranks(3, tag_rank, t);
        zinc_world_destroy(t->world);
        fflush(stderr);
        if (fd >= 0) close(fd);
        dup2(saved_err, 2);
        close(saved_err);
        FILE *f = fopen(logpath, "r");
        if (f) {
            out[fread(out, 1, sizeof said - 1, f)] = 0;
            fclose(f);
        }
    }
    ZT_CHECK(lc2.st[0] == ZINC_OK && strcmp(lc2.loaded[0], "tag0") == 0 &&
                 strstr(said2, "passing over") &&
                 strstr(said2, "tag9.tmp: an unfinished save (in progress, or stopped while "
                        "writing), never loaded"),
             "a search past an unfinished save names it: %s, loaded '%s': %s",
             zinc_status_string(lc2.st[0]), lc2.loaded[0], said2);
    for (int r = 0; r < 3; r++) {
        ZT_CHECK(lc.st[r] == ZINC_OK && strcmp(lc.loaded[r], "tag0") == 0,
                 "load rank %d: %s, loaded '%s': %s", r, zinc_status_string(lc.st[r]),
                 lc.loaded[r], lc.err[r]);
        char want[128];
        snprintf(want, sizeof want, "[zinc r%d ckpt] warning: zinc_ckpt_load: this rank was "
                 "given the tag 'tag%d', rank 0 'tag0'", r, r);
        ZT_CHECK(r == 0 ? !strstr(said, "[zinc r0 ckpt] warning") : strstr(said, want) != NULL,
                 "rank %d's warning about its tag (%s) in: %s", r, want, said);
    }
    unlink(logpath);
    char path[512];
    snprintf(path, sizeof path, "%s/tag0/manifest.json", dir);
    ZT_CHECK(access(path, F_OK) == 0, "Warn saved under rank 0's tag: %s", path);
    snprintf(path, sizeof path, "%s/tag1", dir);
    ZT_CHECK(access(path, F_OK) != 0, "nothing saved under rank 1's tag");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
}

/* fp16's min_loss_scale through a checkpoint, as DeepSpeed 0.19.8's: at stage 0 its
 * FP16_Optimizer restores the scale, its counters, factor and window, but not the minimum, which
 * stays the new config's; at stages 1-3 the whole scaler comes back, minimum included. A tag saved
 * at scale 2 with minimum 1 loads into an engine whose config says scale 16, minimum 4; the
 * scale is the tag's 2, and an overflow then makes it max(2 / 2, minimum): 4 at stage 0 (the
 * tag's minimum before: 1), 1 at stage 1. */
static void test_min_scale_resume(void)
{
    char dir[] = "/tmp/zinc-minscale-XXXXXX";
    if (!mkdtemp(dir)) {
        ZT_CHECK(0, "mkdtemp failed");
        return;
    }
    for (int stage = 0; stage <= 1; stage++) {
        char cfg[2][400], tag[16];
        for (int k = 0; k < 2; k++)
            snprintf(cfg[k], sizeof cfg[k],
                     "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": "
                     "%d}, \"fp16\": {\"enabled\": true, \"initial_scale_power\": %d, "
                     "\"min_loss_scale\": %d, \"hysteresis\": 1}, \"optimizer\": {\"type\": "
                     "\"AdamW\", \"params\": {\"lr\": 0.01}}}", stage, k ? 4 : 1, k ? 4 : 1);
        snprintf(tag, sizeof tag, "stage%d", stage);
        toy_run r = {.world = 1, .stage = stage, .accum = 1, .dtype = ZINC_DTYPE_FP16};
        zinc_engine_t *e = NULL;
        int np = 0;
        zinc_status s = toy_engine_on(&r, NULL, 0, cfg[0], &e, &np);
        if (s == ZINC_OK) s = zinc_ckpt_save(e, dir, tag, NULL);
        ZT_CHECK(s == ZINC_OK, "stage %d: the save: %s", stage, e ? zinc_last_error(e) : "");
        zinc_engine_destroy(e);
        e = NULL;
        s = toy_engine_on(&r, NULL, 0, cfg[1], &e, &np);
        if (s == ZINC_OK) s = zinc_ckpt_load(e, dir, tag, NULL);
        double loaded = e ? zinc_engine_loss_scale(e) : 0.0;
        zinc_step_info_t info = {0};
        if (s == ZINC_OK) s = toy_micro_step(e, 0, 1, 0, np, 1);
        if (s == ZINC_OK) s = zinc_step(e, &info);
        double after = e ? zinc_engine_loss_scale(e) : 0.0, want = stage == 0 ? 4.0 : 1.0;
        ZT_CHECK(s == ZINC_OK && loaded == 2.0 && info.skipped && after == want,
                 "stage %d: loaded scale %g (want 2), overflow skipped %d, then %g (want %g): %s",
                 stage, loaded, info.skipped, after, want, e ? zinc_last_error(e) : "");
        zinc_engine_destroy(e);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
}

/* fp32 at stages 0 and 3: the working copy is the master (no master block); after steps the
 * weights the model sees are exactly the master weights. */
static void test_fp32_alias(void)
{
    const int stages[2] = {0, 3};
    for (int k = 0; k < 2; k++) {
        toy_run tr = {.world = 1, .stage = stages[k], .accum = 1, .dtype = ZINC_DTYPE_FP32,
                      .persist_threshold = -1};
        zinc_engine_t *e = NULL;
        int np = 0;
        ZT_OK(toy_engine(&tr, &e, &np));
        if (!e) continue;
        uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
        zinc_memory(e, planned, alloc);
        ZT_CHECK(planned[ZINC_MEM_MASTER] == 0 && alloc[ZINC_MEM_MASTER] == 0 &&
                     planned[ZINC_MEM_PARAM16] == alloc[ZINC_MEM_PARAM16] &&
                     planned[ZINC_MEM_ADAM_M] == planned[ZINC_MEM_PARAM16],
                 "stage %d fp32: master %llu bytes", stages[k],
                 (unsigned long long)planned[ZINC_MEM_MASTER]);
        for (int step = 0; step < 3; step++) {
            ZT_OK(toy_micro_step(e, 0, 1, step, np, 0));
            ZT_OK(zinc_step(e, NULL));
        }
        int64_t n = zinc_param_numel(e, 5);
        float *master = malloc((size_t)n * sizeof(float));
        ZT_OK(zinc_param_get(e, 5, master));
        void *w = NULL;
        ZT_OK(zinc_gather(e, zinc_param_group(e, 5)));
        ZT_OK(zinc_param_data(e, 5, &w));
        ZT_CHECK(w && !memcmp(w, master, (size_t)n * sizeof(float)),
                 "stage %d fp32: working copy differs from the master", stages[k]);
        ZT_OK(zinc_release(e, zinc_param_group(e, 5)));
        free(master);
        zinc_engine_destroy(e);
    }
}

/* zinc_engine_at_boundary says what the next zinc_step's info.boundary will be (DeepSpeed's
 * is_gradient_accumulation_boundary, as the Python front-end reports it); the gather-on-save flag
 * follows the config, under any of its names. */
/* Misuse gets the message of its own mistake, on the engine: threads past 4096 are refused, an
 * extent over 2^40 names that bound (it said "under 2^42 elements" of 2^42 - 1), a state read
 * before finalize says so (it said "unknown state 0"), and a NULL output of zinc_step_seconds,
 * zinc_comm_bytes or zinc_engine_set_train_state is zinc_last_error(e) (which showed an older,
 * unrelated error). */
static void test_misuse_messages(void)
{
    zinc_engine_options_t o = {.config_json = "{\"train_micro_batch_size_per_gpu\": 1}",
                               .threads = INT_MAX};
    zinc_engine_t *e = NULL;
    /* a thread count past 4096 is refused (INT_MAX asked for a 48 GB thread table) */
    zinc_status s = zinc_engine_create(&o, &e);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && !e && strstr(zinc_last_error(NULL), "1..4096"),
             "threads INT_MAX: %s: %s", zinc_status_string(s), zinc_last_error(NULL));
    o.threads = 1;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int g = -1, p = -1;
    int64_t shape[1] = {4};
    ZT_OK(zinc_group_add(e, "g", &g));
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    /* an extent under 2^42 but over 2^40: the message gives the bound it broke */
    int64_t wide[1] = {((int64_t)1 << 42) - 1};
    int q = -1;
    s = zinc_param_add(e, g, "wide", 1, wide, ZINC_DTYPE_FP32, &q);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(zinc_last_error(e), "1..2^40"),
             "an extent of 2^42 - 1: %s: %s", zinc_status_string(s), zinc_last_error(e));
    float buf[4];
    s = zinc_param_state_get(e, p, ZINC_STATE_EXP_AVG, buf);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "zinc_finalize"),
             "zinc_param_state_get before finalize: %s: %s", zinc_status_string(s),
             zinc_last_error(e));
    ZT_OK(zinc_finalize(e));
    s = zinc_param_state_get(e, p, (zinc_param_state)7, buf);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(zinc_last_error(e), "unknown state 7"),
             "an unknown state: %s: %s", zinc_status_string(s), zinc_last_error(e));
    /* each after an unrelated error (an lr of -1), which the message must replace */
    ZT_CHECK(zinc_set_lr(e, -1.0) == ZINC_ERR_INVALID_ARG, "an lr of -1 is refused");
    s = zinc_step_seconds(e, NULL);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG &&
                 !strcmp(zinc_last_error(e), "zinc_step_seconds: seconds is NULL"),
             "zinc_step_seconds(e, NULL): %s", zinc_last_error(e));
    ZT_CHECK(zinc_set_lr(e, -1.0) == ZINC_ERR_INVALID_ARG, "an lr of -1 is refused");
    s = zinc_comm_bytes(e, NULL);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG &&
                 !strcmp(zinc_last_error(e), "zinc_comm_bytes: bytes is NULL"),
             "zinc_comm_bytes(e, NULL): %s", zinc_last_error(e));
    ZT_CHECK(zinc_set_lr(e, -1.0) == ZINC_ERR_INVALID_ARG, "an lr of -1 is refused");
    s = zinc_engine_set_train_state(e, NULL);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG &&
                 !strcmp(zinc_last_error(e), "zinc_engine_set_train_state: state is NULL"),
             "zinc_engine_set_train_state(e, NULL): %s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

/* Adam's lead (zinc_engine_set_adam_lead): an engine with lead 1 makes its first update with the
 * bias corrections of t = 2 and the schedule's step 0 — bitwise the update of an engine whose
 * counters say one update applied (no schedule here: the same lr) — and not the update of lead 0;
 * a checkpoint keeps the lead (engine_state.adam_lead), and the loaded engine's next update is
 * the saver's; a lead out of 0..2^53 is refused and changes nothing. */
static float *master_of(zinc_engine_t *e, int p, int64_t *n)
{
    *n = zinc_param_numel(e, p);
    float *v = calloc((size_t)*n, sizeof *v);
    if (v && zinc_param_get(e, p, v) != ZINC_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static int same_masters(zinc_engine_t *a, zinc_engine_t *b, int np)
{
    int same = 1;
    for (int p = 0; p < np && same; p++) {
        int64_t n, m;
        float *x = master_of(a, p, &n), *y = master_of(b, p, &m);
        same = x && y && n == m && !memcmp(x, y, (size_t)n * sizeof *x);
        free(x);
        free(y);
    }
    return same;
}

/* Four toy engines of tr (the lead tests'); 1 when all were made (a test failure otherwise). */
static int four_engines(const toy_run *tr, zinc_engine_t **a, zinc_engine_t **b,
                        zinc_engine_t **c, zinc_engine_t **d, int *np)
{
    zinc_engine_t **all[4] = {a, b, c, d};
    int made = 1;
    for (int i = 0; i < 4; i++) {
        *all[i] = NULL;
        ZT_OK(toy_engine(tr, all[i], np));
        made = made && *all[i];
    }
    return made;
}

static void test_adam_lead(void)
{
    toy_run tr = {.world = 1, .stage = 0, .accum = 1, .dtype = ZINC_DTYPE_FP32};
    zinc_engine_t *led, *counted, *plain, *loaded;
    int np = 0;
    if (!four_engines(&tr, &led, &counted, &plain, &loaded, &np)) goto out;
    ZT_CHECK(zinc_engine_adam_lead(led) == 0 && zinc_engine_adam_lead(NULL) == INT64_MIN,
             "the lead is 0 by default: %lld", (long long)zinc_engine_adam_lead(led));
    ZT_CHECK(zinc_engine_set_adam_lead(led, -1) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(led), "0..2^53") && zinc_engine_adam_lead(led) == 0,
             "a lead of -1 is refused before any update: %s", zinc_last_error(led));
    ZT_OK(zinc_engine_set_adam_lead(led, 1));
    zinc_train_state_t one = {.applied = 1, .scaler_last_overflow_iter = -1};
    ZT_OK(zinc_engine_set_train_state(counted, &one));
    ZT_OK(toy_steps(led, 0, 1, 0, 1, np));
    ZT_OK(toy_steps(counted, 0, 1, 0, 1, np));
    ZT_OK(toy_steps(plain, 0, 1, 0, 1, np));
    int64_t applied = -1;
    zinc_engine_steps(led, &applied, NULL);
    ZT_CHECK(applied == 1 && zinc_engine_adam_lead(led) == 1,
             "the lead leaves the applied count: %lld applied, lead %lld", (long long)applied,
             (long long)zinc_engine_adam_lead(led));
    ZT_CHECK(same_masters(led, counted, np), "lead 1: the update of t = 2, bit for bit");
    ZT_CHECK(!same_masters(led, plain, np), "lead 1: not the update of t = 1");
    char dir[512];
    if (zt_disk_dir(dir, sizeof dir, "zinc-adam-lead") != 0) {
        ZT_CHECK(0, "zt_disk_dir failed");
        goto out;
    }
    ZT_OK(zinc_ckpt_save(led, dir, "t", NULL));
    ZT_OK(zinc_ckpt_load(loaded, dir, "t", NULL));
    ZT_CHECK(zinc_engine_adam_lead(loaded) == 1, "the checkpoint keeps the lead: %lld",
             (long long)zinc_engine_adam_lead(loaded));
    ZT_OK(toy_steps(led, 0, 1, 1, 1, np));
    ZT_OK(toy_steps(loaded, 0, 1, 1, 1, np));
    ZT_CHECK(same_masters(led, loaded, np), "after the load: the saver's next update");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
out:
    zinc_engine_destroy(led);
    zinc_engine_destroy(counted);
    zinc_engine_destroy(plain);
    zinc_engine_destroy(loaded);
}

/* The schedule's lead (zinc_engine_set_sched_lead) and a negative Adam lead, as a load with
 * DeepSpeed's load_optimizer_states=False or load_lr_scheduler_states=False sets them: the lr
 * is the schedule's at applied + sched_lead, the bias corrections those of applied + adam_lead
 * + 1, each bit for bit an engine whose counts are there; a checkpoint keeps both. */
static void test_sched_lead(void)
{
    toy_run tr = {.world = 1, .stage = 1, .accum = 1, .dtype = ZINC_DTYPE_FP32,
                  .extra_json = "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {"
                                "\"warmup_min_lr\": 0.001, \"warmup_max_lr\": 0.01, "
                                "\"warmup_num_steps\": 8, \"warmup_type\": \"linear\"}},"};
    zinc_engine_t *led, *at3, *fresh, *loaded;
    int np = 0;
    if (!four_engines(&tr, &led, &at3, &fresh, &loaded, &np)) goto out;
    ZT_CHECK(zinc_engine_sched_lead(led) == 0 && zinc_engine_sched_lead(NULL) == INT64_MIN,
             "the schedule's lead is 0 by default: %lld", (long long)zinc_engine_sched_lead(led));
    ZT_CHECK(zinc_engine_set_sched_lead(led, -1) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(led), "0..2^53") && zinc_engine_sched_lead(led) == 0,
             "a schedule lead of -1 is refused before any update: %s", zinc_last_error(led));
    /* led: 3 updates applied on the books, the schedule there too (lead 0), Adam's count 0
     * (lead -3): a load of step 3's weights and schedule with the engine's fresh Adam state.
     * at3: the schedule at 3 through its lead, Adam fresh: the same update. fresh: neither. */
    zinc_train_state_t three = {.applied = 3, .scaler_last_overflow_iter = -1};
    ZT_OK(zinc_engine_set_train_state(led, &three));
    ZT_OK(zinc_engine_set_adam_lead(led, -3));
    ZT_OK(zinc_engine_set_sched_lead(at3, 3));
    ZT_CHECK(zinc_engine_lr(led) == zinc_engine_lr(at3) && zinc_engine_lr(at3) != zinc_engine_lr(fresh),
             "the lr of step count 3 through either: %g %g (fresh %g)", zinc_engine_lr(led),
             zinc_engine_lr(at3), zinc_engine_lr(fresh));
    ZT_CHECK(zinc_engine_set_adam_lead(led, -4) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(led), "-3..2^53") && zinc_engine_adam_lead(led) == -3,
             "an Adam count below 0 is refused: %s", zinc_last_error(led));
    zinc_train_state_t two = {.applied = 2, .scaler_last_overflow_iter = -1};
    ZT_CHECK(zinc_engine_set_train_state(led, &two) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(led), "applied") && zinc_engine_lr(led) == zinc_engine_lr(at3),
             "applied below the Adam lead's -3 is refused, nothing changed: %s",
             zinc_last_error(led));
    /* zinc_set_betas: checked; outside OneCycle's cycle_momentum it changes nothing (the
     * update below stays bit for bit at3's) */
    double b1 = 0, b2 = 0;
    ZT_CHECK(zinc_set_betas(led, 1.0, 0.9) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(led), "[0, 1)"),
             "betas (1, 0.9) refused: %s", zinc_last_error(led));
    ZT_OK(zinc_set_betas(led, 0.5, 0.5));
    ZT_CHECK(zinc_engine_betas(led, &b1, &b2) == 0 && b1 == 0.9 && b2 == 0.999,
             "without cycle_momentum the config's betas stay: %g %g", b1, b2);
    ZT_OK(toy_steps(led, 0, 1, 0, 1, np));
    ZT_OK(toy_steps(at3, 0, 1, 0, 1, np));
    ZT_OK(toy_steps(fresh, 0, 1, 0, 1, np));
    ZT_CHECK(same_masters(led, at3, np), "the update of lr(3) and t = 1 both ways, bit for bit");
    ZT_CHECK(!same_masters(led, fresh, np), "not the fresh engine's update (lr(0))");
    char dir[512];
    if (zt_disk_dir(dir, sizeof dir, "zinc-sched-lead") != 0) {
        ZT_CHECK(0, "zt_disk_dir failed");
        goto out;
    }
    ZT_OK(zinc_ckpt_save(led, dir, "t", NULL));
    ZT_OK(zinc_ckpt_load(loaded, dir, "t", NULL));
    ZT_CHECK(zinc_engine_adam_lead(loaded) == -3 && zinc_engine_sched_lead(loaded) == 0 &&
                 zinc_engine_lr(loaded) == zinc_engine_lr(led),
             "the checkpoint keeps both leads: %lld %lld", (long long)zinc_engine_adam_lead(loaded),
             (long long)zinc_engine_sched_lead(loaded));
    ZT_OK(zinc_ckpt_save(at3, dir, "u", NULL));
    ZT_OK(zinc_ckpt_load(loaded, dir, "u", NULL));
    ZT_CHECK(zinc_engine_adam_lead(loaded) == 0 && zinc_engine_sched_lead(loaded) == 3 &&
                 zinc_engine_lr(loaded) == zinc_engine_lr(at3),
             "and the schedule's: %lld %lld", (long long)zinc_engine_adam_lead(loaded),
             (long long)zinc_engine_sched_lead(loaded));
    ZT_OK(toy_steps(at3, 0, 1, 1, 1, np));
    ZT_OK(toy_steps(loaded, 0, 1, 1, 1, np));
    ZT_CHECK(same_masters(at3, loaded, np), "after the load: the saver's next update");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
out:
    zinc_engine_destroy(led);
    zinc_engine_destroy(at3);
    zinc_engine_destroy(fresh);
    zinc_engine_destroy(loaded);
}

static void test_introspection(void)
{
    toy_run tr = {.world = 1, .stage = 2, .accum = 3, .dtype = ZINC_DTYPE_FP32};
    zinc_engine_t *e = NULL;
    int np = 0;
    ZT_OK(toy_engine(&tr, &e, &np));
    if (!e) return;
    ZT_CHECK(!zinc_engine_gather_16bit_on_save(e), "gather-on-save off by default");
    /* The resolved config: derived values present (the batch size the rule gave: 1 x 3 x 1),
     * defaults applied (DeepSpeed's steps_per_print 10). */
    const char *cj = zinc_engine_config_json(e);
    ZT_CHECK(strstr(cj, "\"train_batch_size\": 3") && strstr(cj, "\"steps_per_print\": 10") &&
                 strstr(cj, "\"stage\": 2"),
             "zinc_engine_config_json: %.200s", cj);
    ZT_CHECK(!strcmp(zinc_engine_config_json(NULL), ""), "zinc_engine_config_json(NULL)");
    /* zinc_world_broadcast outside MPI: a world of one has nothing to do, a local world of
     * threads cannot (each thread would have to call it); a bad root is refused. */
    zinc_world_t *w1 = NULL, *w2 = NULL;
    int word = 42;
    ZT_OK(zinc_world_create_local(1, &w1));
    ZT_OK(zinc_world_create_local(2, &w2));
    ZT_CHECK(zinc_world_broadcast(w1, &word, sizeof word, 0) == ZINC_OK && word == 42, "world 1");
    ZT_CHECK(zinc_world_broadcast(w1, &word, sizeof word, 1) == ZINC_ERR_INVALID_ARG, "root 1 of 1");
    ZT_CHECK(zinc_world_broadcast(w2, &word, sizeof word, 0) == ZINC_ERR_UNSUPPORTED &&
                 strstr(zinc_last_error(NULL), "local"),
             "local world of 2: %s", zinc_last_error(NULL));
    zinc_world_destroy(w1);
    zinc_world_destroy(w2);
    ZT_CHECK(zinc_engine_loss_scale(e) == 1.0 && isnan(zinc_engine_loss_scale(NULL)),
             "zinc_engine_loss_scale without fp16: %g", zinc_engine_loss_scale(e));
    for (int m = 0; m < 7; m++) {
        int said = zinc_engine_at_boundary(e);
        zinc_step_info_t info = {0};
        ZT_OK(toy_micro_step(e, 0, 1, m, np, 0));
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(said == info.boundary && said == (m % 3 == 2),
                 "micro-step %d: at_boundary %d, the step's boundary %d", m, said, info.boundary);
    }
    zinc_engine_destroy(e);
    /* fp16 (the toy's initial_scale_power 8): the dynamic scale starts at 2^8. */
    toy_run t16 = {.world = 1, .stage = 1, .accum = 1, .dtype = ZINC_DTYPE_FP16};
    e = NULL;
    ZT_OK(toy_engine(&t16, &e, &np));
    if (e) ZT_CHECK(zinc_engine_loss_scale(e) == 256.0, "fp16 loss scale %g", zinc_engine_loss_scale(e));
    zinc_engine_destroy(e);
    ZT_CHECK(!zinc_engine_at_boundary(NULL) && !zinc_engine_gather_16bit_on_save(NULL), "NULL");
    int64_t applied = 7;
    ZT_CHECK(zinc_engine_steps(NULL, &applied, NULL) == -1 && applied == 7,
             "zinc_engine_steps(NULL) wrote %lld", (long long)applied);
    const char *names[] = {"stage3_gather_16bit_weights_on_model_save",
                           "gather_16bit_weights_on_model_save",
                           "stage3_gather_fp16_weights_on_model_save"};
    for (int i = 0; i < 3; i++) {
        char zero[128];
        snprintf(zero, sizeof zero, "\"%s\": true, ", names[i]);
        toy_run t3 = {.world = 1, .stage = 3, .accum = 1, .dtype = ZINC_DTYPE_BF16, .zero_json = zero};
        e = NULL;
        ZT_OK(toy_engine(&t3, &e, &np));
        if (!e) continue;
        ZT_CHECK(zinc_engine_gather_16bit_on_save(e) == 1, "%s: true", names[i]);
        zinc_engine_destroy(e);
    }
}

/* zinc_set_lr: the caller's learning rate replaces the config's schedule until NAN gives it back;
 * reported in zinc_step_info_t.lr; bad values refused. */
static void test_set_lr(void)
{
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_FP32, .inject_inf_step = -1};
    zinc_engine_t *e = NULL;
    int np = 0;
    ZT_OK(toy_engine(&r, &e, &np));
    if (!e) return;
    int64_t n = zinc_param_numel(e, 0);
    float *before = malloc((size_t)n * sizeof *before), *after = malloc((size_t)n * sizeof *after);
    ZT_OK(zinc_param_get(e, 0, before));
    ZT_CHECK(zinc_set_lr(e, -1.0) == ZINC_ERR_INVALID_ARG, "a negative lr accepted");
    ZT_CHECK(zinc_set_lr(e, INFINITY) == ZINC_ERR_INVALID_ARG, "an infinite lr accepted");
    ZT_CHECK(zinc_set_lr(NULL, 0.1) == ZINC_ERR_INVALID_ARG, "NULL accepted");
    /* lr 0: AdamW moves nothing (its decay is scaled by lr too). */
    ZT_OK(zinc_set_lr(e, 0.0));
    zinc_step_info_t info;
    ZT_OK(toy_micro_step(e, 0, 1, 0, np, 0));
    ZT_OK(zinc_step(e, &info));
    ZT_OK(zinc_param_get(e, 0, after));
    ZT_CHECK(info.applied && info.lr == 0.0, "the step did not run at lr 0 (lr %g)", info.lr);
    ZT_CHECK(!memcmp(before, after, (size_t)n * sizeof *before), "lr 0 moved the weights");
    ZT_OK(zinc_set_lr(e, 0.25));
    ZT_CHECK(zinc_engine_lr(e) == 0.25, "zinc_engine_lr %g, not the lr set", zinc_engine_lr(e));
    ZT_CHECK(isnan(zinc_engine_lr(NULL)), "zinc_engine_lr(NULL) is not NAN");
    ZT_OK(toy_micro_step(e, 0, 1, 1, np, 0));
    ZT_OK(zinc_step(e, &info));
    ZT_CHECK(info.lr == 0.25, "the step's lr is %g, not the one set", info.lr);
    /* NAN: the config's lr (0.01, constant) again. */
    ZT_OK(zinc_set_lr(e, NAN));
    ZT_OK(toy_micro_step(e, 0, 1, 2, np, 0));
    ZT_OK(zinc_step(e, &info));
    ZT_CHECK(fabs(info.lr - 0.01) < 1e-12, "NAN did not give the schedule back (lr %g)", info.lr);
    ZT_OK(zinc_param_get(e, 0, after));
    ZT_CHECK(memcmp(before, after, (size_t)n * sizeof *before), "the steps moved nothing");
    free(before);
    free(after);
    zinc_engine_destroy(e);

    /* Under a schedule, zinc_engine_lr is the lr the next step then applies (DeepSpeed's
     * param_groups after its scheduler stepped), and it moves. */
    r.extra_json = "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": "
                   "0.001, \"warmup_max_lr\": 0.01, \"warmup_num_steps\": 4, "
                   "\"warmup_type\": \"linear\"}},";
    ZT_OK(toy_engine(&r, &e, &np));
    if (!e) return;
    double first = zinc_engine_lr(e), last = first;
    for (int k = 0; k < 4; k++) {
        last = zinc_engine_lr(e);
        ZT_OK(toy_micro_step(e, 0, 1, k, np, 0));
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(info.lr == last, "step %d applied lr %g, zinc_engine_lr said %g", k, info.lr, last);
    }
    ZT_CHECK(first == 0.001 && last > first, "the schedule's lr did not move (%g then %g)", first,
             last);
    zinc_engine_destroy(e);
}

/* A rank of a local world holds one engine at a time: a second one beside it is refused with a
 * message that wraps the comm's own, whole (zerr_thread once formatted into the buffer it read
 * the wrapped message from, and the text came out doubled and cut). Engines with worlds of
 * their own (world NULL) live side by side. */
static void test_second_engine(void)
{
    zinc_world_t *w = NULL;
    zinc_engine_t *a = NULL, *b = NULL, *c = NULL;
    ZT_OK(zinc_world_create_local(1, &w));
    zinc_engine_options_t o = {.config_json = cfg_stage(1, NULL), .world = w, .threads = 1};
    ZT_OK(zinc_engine_create(&o, &a));
    ZT_CHECK(zinc_engine_create(&o, &b) == ZINC_ERR_USAGE && !b, "a second engine on rank 0");
    const char *msg = zinc_last_error(NULL);
    const char *want = "zinc_engine_create: cannot open the comm of rank 0: zcomm_local_create: "
                       "rank 0 of this local world already has a comm";
    ZT_CHECK(!strncmp(msg, want, strlen(want)) && strstr(msg, "a world of its own"),
             "message: %s", msg);
    o.world = NULL;
    ZT_OK(zinc_engine_create(&o, &b));
    ZT_OK(zinc_engine_create(&o, &c));
    ZT_CHECK(a && b && c, "engines with worlds of their own beside one another");
    zinc_engine_destroy(c);
    zinc_engine_destroy(b);
    zinc_engine_destroy(a);
    zinc_world_destroy(w);
}

/* zinc_grad_bucket (issue 38): -1 below stage 2; at stages 2-3 the bucket zinc_param_grad's view
 * lies in, taken in rotation, so consecutive groups get different buckets (with the default 2:
 * 0, 1, 0, 1, ...) and a caller ordering its adds per bucket waits for the reduce two groups
 * back, not the last one. The first-free choice that came before gave every group bucket 0. */
static void test_grad_bucket(void)
{
    for (int stage = 1; stage <= 3; stage++) {
        toy_run r = {.world = 1, .stage = stage, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                     .clip = 1.0, .inject_inf_step = -1};
        int np = 0;
        zinc_engine_t *e = toy_engine_checked(&r, &np, "zinc_grad_bucket's");
        if (!e) continue;
        ZT_CHECK(zinc_engine_grads_bucketed(e) == (stage >= 2),
                 "stage %d bf16: zinc_engine_grads_bucketed %d", stage,
                 zinc_engine_grads_bucketed(e));
        /* zinc_group_persistent: the toy's groups are below DeepSpeed's default threshold
         * (1e5), so persistent at stage 3 only; 0 out of range and for NULL */
        for (int g = 0; g < TOY_GROUPS; g++)
            ZT_CHECK(zinc_group_persistent(e, g) == (stage == 3),
                     "stage %d: zinc_group_persistent(%d) %d", stage, g,
                     zinc_group_persistent(e, g));
        ZT_CHECK(zinc_group_persistent(e, TOY_GROUPS) == 0 && zinc_group_persistent(e, -1) == 0 &&
                 zinc_group_persistent(NULL, 0) == 0, "zinc_group_persistent out of range");
        for (int round = 0; round < 2; round++) {      /* the rotation goes on across steps */
            for (int g = 0; g < TOY_GROUPS; g++) {
                int slot = -2, again = -2;
                ZT_OK(zinc_grad_bucket(e, g, &slot));
                ZT_OK(zinc_grad_bucket(e, g, &again));
                if (stage < 2) {
                    ZT_CHECK(slot == -1, "stage %d: bucket %d, not -1", stage, slot);
                } else {
                    ZT_CHECK(slot == e->gstate[g].bucket && again == slot,
                             "stage %d group %d: zinc_grad_bucket %d then %d, the engine's %d",
                             stage, g, slot, again, e->gstate[g].bucket);
                    int p = 0;
                    while (p < np && toy_param_group(p) != g) p++;
                    void *view = NULL;
                    ZT_OK(zinc_param_grad(e, p, &view));
                    size_t bytes = e->plan.max_group_padded * zinc_dtype_size(e->dtype);
                    char *base = (char *)e->bucket + (size_t)slot * bytes;
                    ZT_CHECK((char *)view >= base &&
                             (char *)view < base + bytes,
                             "stage %d group %d: zinc_param_grad's view is not in bucket %d",
                             stage, g, slot);
                    int want = (round * TOY_GROUPS + g) % e->nbuckets;
                    ZT_CHECK(slot == want, "stage %d group %d (round %d): bucket %d, not %d (in "
                             "rotation)", stage, g, round, slot, want);
                }
                if (stage == 3) {
                    ZT_OK(zinc_gather(e, g));
                    ZT_OK(zinc_release(e, g));
                }
                ZT_OK(zinc_grads_ready(e, g));
            }
            ZT_OK(zinc_step(e, NULL));
        }
        int slot = 0;
        ZT_CHECK(zinc_grad_bucket(e, TOY_GROUPS, &slot) == ZINC_ERR_INVALID_ARG,
                 "an unknown group is refused");
        ZT_CHECK(zinc_grad_bucket(e, 0, NULL) == ZINC_ERR_INVALID_ARG, "a NULL slot is refused");
        zinc_engine_destroy(e);
    }
    /* Stage 1 with fp32 gradient sums is bucketed too (the hand-over adds the bucket into the
     * sums), and zinc_engine_grads_bucketed says so: the Python front-end reads it to choose
     * between the buckets and the lent gradient buffer. */
    toy_run r = {.world = 1, .stage = 1, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1,
                 .extra_json = "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, "};
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, "stage 1 fp32 sums'");
    if (e) {
        int slot = -2;
        ZT_CHECK(zinc_engine_grads_bucketed(e) == 1, "stage 1 with fp32 sums: not bucketed");
        ZT_OK(zinc_grad_bucket(e, 0, &slot));
        ZT_CHECK(slot == 0, "stage 1 with fp32 sums: the first group's bucket %d, not 0", slot);
        zinc_engine_destroy(e);
    }
    ZT_CHECK(zinc_engine_grads_bucketed(NULL) == 0, "NULL: not bucketed");
}

/* zinc_stream_wait_gather's checks, on the cpu device (where there is nothing to wait for): a
 * gathered group, and every group below stage 3 or persistent, is ZINC_OK; at stage 3 a group
 * that is not gathered is a usage error naming it, an unknown group an argument error. What it
 * waits for on a GPU is tests/gpu/test_gather_wait.c's. */
static void test_stream_wait_gather(void)
{
    for (int stage = 0; stage <= 3; stage++) {
        for (int persist = 0; persist < 2; persist++) {
            if (persist && stage < 3) continue;
            toy_run r = {.world = 1, .stage = stage, .accum = 1, .steps = 1,
                         .dtype = ZINC_DTYPE_BF16, .clip = 1.0, .inject_inf_step = -1,
                         .persist_threshold = persist ? 1 << 30 : -1};
            int np = 0;
            zinc_engine_t *e = toy_engine_checked(&r, &np, "zinc_stream_wait_gather's");
            if (!e) continue;
            int gathered_only = stage == 3 && !persist;
            for (int g = 0; g < TOY_GROUPS; g++) {
                zinc_status before = zinc_stream_wait_gather(e, g, NULL);
                ZT_CHECK(gathered_only ? before == ZINC_ERR_USAGE &&
                                             strstr(zinc_last_error(e), "is not gathered")
                                       : before == ZINC_OK,
                         "stage %d%s group %d before zinc_gather: %s (%s)", stage,
                         persist ? " persistent" : "", g, zinc_status_string(before),
                         zinc_last_error(e));
                ZT_OK(zinc_gather(e, g));
                ZT_OK(zinc_stream_wait_gather(e, g, NULL));
                ZT_OK(zinc_release(e, g));
            }
            ZT_CHECK(zinc_stream_wait_gather(e, TOY_GROUPS, NULL) == ZINC_ERR_INVALID_ARG,
                     "stage %d: an unknown group is refused", stage);
            zinc_engine_destroy(e);
        }
    }
}

int main(void)
{
    test_grad_bucket();
    test_stream_wait_gather();
    test_second_engine();
    test_set_lr();
    test_fp32_alias();
    test_tag_validation();
    test_min_scale_resume();
    test_prefetch();
    test_set_prefetched();
    test_broadcast();
    test_misuse();
    test_mismatch();
    test_volume_and_memory();
    test_overflow();
    test_clip_norm();
    test_failing_rank();
    test_failed_handover();
    test_misuse_messages();
    test_introspection();
    test_adam_lead();
    test_sched_lead();
    return zt_finish("test_engine");
}
