/*
 * test_offload.c — ZeRO-Offload of the optimizer state (issue 14, first milestone) and the
 * device memory limit, through the public API on the toy model (toy.h).
 *
 *  1. bitwise: the same training with and without offload_optimizer {"device": "cpu"} gives
 *     identical fp32 master weights, gradient norms and loss scales: local worlds of 2 and 4
 *     ranks, stages 1-3 (stage 3 with and without persistent groups), fp16 (with an overflow
 *     step skipped), bf16 and fp32, and with gradient accumulation; the offloaded step's
 *     pipeline in one chunk and in a chunk per group.
 *  2. copy volume: each applied step downloads exactly the gradient shard and uploads exactly
 *     the 16-bit parameter shard (zinc_offload_bytes); at stages 2-3 the download happens in
 *     every micro-step's zinc_grads_ready (also before a skipped step), with the partial sum
 *     uploaded first from a window's second micro-step on, at stage 1 in zinc_step (a skipped
 *     step copies nothing); the state is host memory (zinc_memory's master/m/v are 0,
 *     zinc_memory_host has them; at stages 2-3 the gradient shard too, zinc_memory's grad 0); the step's
 *     time split (zinc_step_seconds) counts host Adam and copy waits exactly on applied steps.
 *  3. memory: under a zinc.device_memory_limit that holds the offloaded plan but not the full
 *     one, finalize without offload fails with ZINC_ERR_NOMEM naming the category and the bytes;
 *     with offload the same limit trains, with the same weights as an unlimited run.
 *  4. checkpoints: save with offload, load without (and the reverse), then train on: bitwise the
 *     weights of an uninterrupted run, so master, m, v and the counters all came back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "toy.h"

#define OFFLOAD "\"offload_optimizer\": {\"device\": \"cpu\"}, "

/* ---- 1. bitwise ---------------------------------------------------------------------------- */

/* The offloaded step in one chunk (the toy's shard is far below the automatic chunk size) and
 * in one chunk per group (sub_group_size 1: 5 chunks, more than the pipeline queues ahead, so
 * every fence slot is reused). The cpu device defers each asynchronous copy to the wait that
 * covers it, so a missing wait or join in the pipeline shows here as different weights. */
static const char *const offload_variants[] = {OFFLOAD, OFFLOAD "\"sub_group_size\": 1, "};

static void compare(toy_run ref, const char *label)
{
    for (size_t i = 0; i < sizeof offload_variants / sizeof offload_variants[0]; i++) {
        char l[160];
        snprintf(l, sizeof l, "%s, %s", label, i ? "a chunk per group" : "one chunk");
        toy_expect_same_with_zero(ref, offload_variants[i], "offload", l);
    }
}

static void test_bitwise(void)
{
    const int worlds[] = {2, 4};
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    for (int wi = 0; wi < 2; wi++)
        for (int di = 0; di < 3; di++)
            for (int st = 1; st <= 4; st++) {
                if (dts[di] == ZINC_DTYPE_FP32 && worlds[wi] != 2) continue;
                toy_run r = {.world = worlds[wi], .stage = st > 3 ? 3 : st, .accum = 1,
                             .steps = 12, .dtype = dts[di], .clip = 1.0, .inject_inf_step = -1,
                             .persist_threshold = st > 3 ? -1 : 0};
                /* fp16: an overflow at step 4 is skipped on every rank, offloaded or not. */
                if (dts[di] == ZINC_DTYPE_FP16) {
                    r.inject_inf_step = 4;
                    r.inject_rank = 1;
                }
                char label[96];
                snprintf(label, sizeof label, "world %d stage %d%s %s", r.world, r.stage,
                         st > 3 ? " (none persistent)" : "", zinc_dtype_name(r.dtype));
                compare(r, label);
            }
    /* Gradient accumulation: the accumulated shard is what is downloaded. */
    for (int st = 1; st <= 3; st++) {
        toy_run r = {.world = 2, .stage = st, .accum = 3, .steps = 5, .dtype = ZINC_DTYPE_BF16,
                     .clip = 0.5, .inject_inf_step = -1};
        char label[64];
        snprintf(label, sizeof label, "accum 3 world 2 stage %d bf16", st);
        compare(r, label);
    }
}

/* ---- 2. copy volume ------------------------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int stage;
    zinc_dtype dtype;
} vol_ctx;

static void vol_rank(int rank, void *arg)
{
    vol_ctx *c = arg;
    toy_run r = {.world = zinc_world_size(c->world), .stage = c->stage, .accum = 1,
                 .dtype = c->dtype, .clip = 1.0, .zero_json = OFFLOAD};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    ZT_CHECK(s == ZINC_OK, "volume rank %d stage %d: %s", rank, c->stage, zinc_last_error(e));
    if (s != ZINC_OK) {
        zinc_world_abort(c->world, rank, "setup failed");
        zinc_engine_destroy(e);
        return;
    }
    uint64_t dp[ZINC_MEM_COUNT], da[ZINC_MEM_COUNT], hp[ZINC_MEM_COUNT], ha[ZINC_MEM_COUNT];
    zinc_memory(e, dp, da);
    zinc_memory_host(e, hp, ha);
    ZT_CHECK(dp[ZINC_MEM_MASTER] == 0 && dp[ZINC_MEM_ADAM_M] == 0 && dp[ZINC_MEM_ADAM_V] == 0 &&
                 da[ZINC_MEM_MASTER] == 0,
             "stage %d: master/m/v on the device with offload: %llu %llu %llu", c->stage,
             (unsigned long long)dp[ZINC_MEM_MASTER], (unsigned long long)dp[ZINC_MEM_ADAM_M],
             (unsigned long long)dp[ZINC_MEM_ADAM_V]);
    ZT_CHECK(memcmp(hp, ha, sizeof hp) == 0 && hp[ZINC_MEM_MASTER] > 0 &&
                 hp[ZINC_MEM_ADAM_M] == hp[ZINC_MEM_MASTER] && hp[ZINC_MEM_ADAM_V] == hp[ZINC_MEM_MASTER],
             "stage %d: host plan/allocation master %llu/%llu", c->stage,
             (unsigned long long)hp[ZINC_MEM_MASTER], (unsigned long long)ha[ZINC_MEM_MASTER]);
    /* The shard in elements: master is fp32. At stages 2-3 the gradient shard is host memory
     * (issue 39): no device grad block, the host one the shard in the working dtype. */
    uint64_t shard = hp[ZINC_MEM_MASTER] / 4, d = zinc_dtype_size(c->dtype);
    if (c->stage >= 2)
        ZT_CHECK(dp[ZINC_MEM_GRAD] == 0 && hp[ZINC_MEM_GRAD] == shard * d,
                 "stage %d: device grad %llu (want 0), host grad %llu, shard %llu", c->stage,
                 (unsigned long long)dp[ZINC_MEM_GRAD], (unsigned long long)hp[ZINC_MEM_GRAD],
                 (unsigned long long)shard);
    uint64_t down0 = 1, up0 = 1;
    zinc_offload_bytes(e, &down0, &up0);
    ZT_CHECK(down0 == 0 && up0 == 0, "copies before the first step: %llu %llu",
             (unsigned long long)down0, (unsigned long long)up0);
    int applied = 0, skipped = 0;
    for (int step = 0; step < 6 && s == ZINC_OK; step++) {
        int inj = c->dtype == ZINC_DTYPE_FP16 && step == 2 && rank == 0;
        zinc_step_info_t info = {0};
        uint64_t a0, b0, a1, b1, am, bm;
        double ph0[ZINC_PHASE_COUNT], ph1[ZINC_PHASE_COUNT];
        zinc_offload_bytes(e, &a0, &b0);
        s = toy_micro_step(e, rank, r.world, step, np, inj);
        /* Stages 2-3: each group's final gradient goes down as zinc_grads_ready reduces it. */
        zinc_offload_bytes(e, &am, &bm);
        uint64_t early = c->stage >= 2 ? shard * d : 0;
        ZT_CHECK(am - a0 == early && bm == b0, "stage %d step %d: during backward %llu bytes down "
                 "(want %llu), %llu up (want 0)", c->stage, step, (unsigned long long)(am - a0),
                 (unsigned long long)early, (unsigned long long)(bm - b0));
        ZT_OK(zinc_step_seconds(e, ph0));
        double t0 = zt_now();
        if (s == ZINC_OK) s = zinc_step(e, &info);
        double wall = zt_now() - t0;
        zinc_offload_bytes(e, &a1, &b1);
        ZT_OK(zinc_step_seconds(e, ph1));
        /* zinc_step_seconds: the phases of this step fit in its wall time; an applied step spent
         * time in the host Adam and waiting for copies, a skipped one in neither. */
        double sum = 0.0;
        for (int p = 0; p < ZINC_PHASE_COUNT; p++) {
            ZT_CHECK(ph1[p] >= ph0[p], "phase %d went back: %g -> %g", p, ph0[p], ph1[p]);
            sum += ph1[p] - ph0[p];
        }
        ZT_CHECK(sum <= wall, "step %d: phases sum to %g s, the step took %g s", step, sum, wall);
        if (info.applied)
            ZT_CHECK(ph1[ZINC_PHASE_ADAM] > ph0[ZINC_PHASE_ADAM] &&
                         ph1[ZINC_PHASE_COPY] > ph0[ZINC_PHASE_COPY],
                     "step %d applied without Adam or copy time", step);
        else
            ZT_CHECK(ph1[ZINC_PHASE_ADAM] == ph0[ZINC_PHASE_ADAM] &&
                         ph1[ZINC_PHASE_COPY] == ph0[ZINC_PHASE_COPY],
                     "step %d skipped, yet Adam or copy time was counted", step);
        /* Per step: the gradient shard down (at stages 2-3 during backward, so also when the
         * step is then skipped; at stage 1 only for an applied step) and the 16-bit shard up
         * for an applied step. */
        uint64_t up = info.applied ? shard * d : 0, down = c->stage >= 2 ? shard * d : up;
        ZT_CHECK(a1 - a0 == down && b1 - b0 == up,
                 "stage %d %s step %d (%s): %llu bytes down, %llu up, want %llu and %llu",
                 c->stage, zinc_dtype_name(c->dtype), step, info.applied ? "applied" : "skipped",
                 (unsigned long long)(a1 - a0), (unsigned long long)(b1 - b0),
                 (unsigned long long)down, (unsigned long long)up);
        applied += info.applied;
        skipped += info.skipped;
    }
    ZT_CHECK(s == ZINC_OK, "volume rank %d: %s", rank, zinc_last_error(e));
    ZT_CHECK(applied > 0 && (c->dtype != ZINC_DTYPE_FP16 || skipped == 1),
             "applied %d skipped %d", applied, skipped);
    if (s != ZINC_OK) zinc_world_abort(c->world, rank, "volume rank failed");
    zinc_engine_destroy(e);
}

/* With gradient accumulation the shard accumulates on the host: every micro-step's
 * zinc_grads_ready sends each group's sum down, and from the window's second micro-step on first
 * brings the group's partial sum up to add to (the device's accumulate, on its scratch slice). */
static void accum_rank(int rank, void *arg)
{
    vol_ctx *c = arg;
    toy_run r = {.world = zinc_world_size(c->world), .stage = c->stage, .accum = 3,
                 .dtype = c->dtype, .clip = 1.0, .zero_json = OFFLOAD};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    ZT_CHECK(s == ZINC_OK, "accum rank %d stage %d: %s", rank, c->stage, zinc_last_error(e));
    uint64_t hp[ZINC_MEM_COUNT];
    if (s == ZINC_OK) s = zinc_memory_host(e, hp, NULL);
    uint64_t shard_bytes = s == ZINC_OK ? hp[ZINC_MEM_MASTER] / 4 * zinc_dtype_size(c->dtype) : 0;
    for (int micro = 0; micro < 6 && s == ZINC_OK; micro++) {
        uint64_t a0, a1, b0, b1;
        zinc_offload_bytes(e, &a0, &b0);
        s = toy_micro_step(e, rank, r.world, micro, np, 0);
        zinc_offload_bytes(e, &a1, &b1);
        uint64_t up = micro % 3 ? shard_bytes : 0;
        ZT_CHECK(a1 - a0 == shard_bytes && b1 - b0 == up, "stage %d micro-step %d of 3: %llu bytes "
                 "down, %llu up during backward, want %llu and %llu", c->stage, micro % 3,
                 (unsigned long long)(a1 - a0), (unsigned long long)(b1 - b0),
                 (unsigned long long)shard_bytes, (unsigned long long)up);
        zinc_step_info_t info;
        if (s == ZINC_OK) s = zinc_step(e, &info);
    }
    ZT_CHECK(s == ZINC_OK, "accum rank %d: %s", rank, zinc_last_error(e));
    if (s != ZINC_OK) zinc_world_abort(c->world, rank, "accum rank failed");
    zinc_engine_destroy(e);
}

static void test_volume(void)
{
    for (int st = 2; st <= 3; st++) {
        vol_ctx c = {.stage = st, .dtype = ZINC_DTYPE_BF16};
        ZT_OK(zinc_world_create_local(2, &c.world));
        zt_run_ranks(2, accum_rank, &c);
        zinc_world_destroy(c.world);
    }
    for (int st = 1; st <= 3; st++)
        for (int di = 0; di < 2; di++) {
            vol_ctx c = {.stage = st, .dtype = di ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP16};
            ZT_OK(zinc_world_create_local(2, &c.world));
            zt_run_ranks(2, vol_rank, &c);
            zinc_world_destroy(c.world);
        }
    /* Without offload nothing is counted and nothing is on the host. */
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_FP16, .clip = 1.0};
    zinc_engine_t *e = NULL;
    int np;
    ZT_OK(toy_engine(&r, &e, &np));
    uint64_t hp[ZINC_MEM_COUNT], a = 1, b = 1, sum = 0;
    zinc_memory_host(e, hp, NULL);
    for (int k = 0; k < ZINC_MEM_COUNT; k++) sum += hp[k];
    zinc_offload_bytes(e, &a, &b);
    ZT_CHECK(sum == 0 && a == 0 && b == 0, "no offload: host %llu, copies %llu %llu",
             (unsigned long long)sum, (unsigned long long)a, (unsigned long long)b);
    /* Without offload a step counts Adam time but never copy time. */
    ZT_OK(toy_micro_step(e, 0, 1, 0, np, 0));
    zinc_step_info_t info;
    ZT_OK(zinc_step(e, &info));
    double ph[ZINC_PHASE_COUNT];
    ZT_OK(zinc_step_seconds(e, ph));
    ZT_CHECK(info.applied && ph[ZINC_PHASE_ADAM] > 0.0 && ph[ZINC_PHASE_COPY] == 0.0,
             "no offload: applied %d, Adam %g s, copies %g s", info.applied, ph[ZINC_PHASE_ADAM],
             ph[ZINC_PHASE_COPY]);
    zinc_engine_destroy(e);
}

/* ---- 3. device memory limit ---------------------------------------------------------------- */

static void test_limit(void)
{
    toy_run base = {.world = 1, .stage = 2, .accum = 1, .steps = 8, .dtype = ZINC_DTYPE_FP16,
                    .clip = 1.0, .inject_inf_step = -1};
    toy_run off = base;
    off.zero_json = OFFLOAD;
    uint64_t full = toy_memory_total(&base, 0), offl = toy_memory_total(&off, 0);
    /* The offloaded plan plus the 16 bytes of step statistics and room for zinc_param_get's
     * temporary (the largest group in fp32, 4160 * 4 bytes for the toy); not the full plan. */
    uint64_t limit = offl + 32768;
    ZT_CHECK(limit < full, "the test needs offload to save device memory: %llu vs %llu",
             (unsigned long long)offl, (unsigned long long)full);
    char zinc_json[96];
    snprintf(zinc_json, sizeof zinc_json, "\"device_memory_limit\": %llu, ", (unsigned long long)limit);

    toy_run lim = base;
    lim.zinc_json = zinc_json;
    zinc_engine_t *e = NULL;
    int np;
    zinc_status s = toy_engine(&lim, &e, &np);
    const char *msg = zinc_last_error(e);
    ZT_CHECK(s == ZINC_ERR_NOMEM, "full plan over the limit: %s (%s)", zinc_status_string(s), msg);
    ZT_CHECK(strstr(msg, "zinc_finalize") &&
                 (strstr(msg, "master") || strstr(msg, "adam_m") || strstr(msg, "adam_v")) &&
                 strstr(msg, "zinc.device_memory_limit") && strstr(msg, "bytes needed") &&
                 strstr(msg, "available"),
             "the error should name the call, the category and the bytes: %s", msg);
    zinc_engine_destroy(e);

    /* The same limit with offload: trains, and gives the unlimited run's weights. */
    toy_run ref = base, lo = off;
    lo.zinc_json = zinc_json;
    if (toy_run_ok(&ref, "unlimited") && toy_run_ok(&lo, "offload under the limit"))
        ZT_CHECK(toy_weights_equal(&ref, &lo), "offload under the limit: weights differ");
    toy_free(&ref);
    toy_free(&lo);

    /* A string limit too small even for the offloaded plan: the first category named. */
    toy_run tiny = off;
    tiny.zinc_json = "\"device_memory_limit\": \"1KiB\", ";
    e = NULL;
    s = toy_engine(&tiny, &e, &np);
    msg = zinc_last_error(e);
    ZT_CHECK(s == ZINC_ERR_NOMEM && strstr(msg, "param16") && strstr(msg, "1024 bytes"),
             "1KiB limit: %s (%s)", zinc_status_string(s), msg);
    zinc_engine_destroy(e);
}

/* ---- 4. checkpoints ------------------------------------------------------------------------ */

#define CK_STEPS 3

static void test_ckpt(void)
{
    char dir[] = "/tmp/zinc_offload_ckpt_XXXXXX";
    ZT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *modes[][2] = {{OFFLOAD, NULL}, {NULL, OFFLOAD}, {OFFLOAD, OFFLOAD}};
    const char *names[] = {"offload -> none", "none -> offload", "offload -> offload"};
    for (int st = 1; st <= 3; st++) {
        toy_run ref = {.world = 2, .stage = st, .accum = 1, .steps = 2 * CK_STEPS,
                       .dtype = ZINC_DTYPE_FP16, .clip = 1.0, .inject_inf_step = -1};
        if (!toy_run_ok(&ref, "uninterrupted")) continue;
        for (int m = 0; m < 3; m++) {
            char sub[256], cmd[300];
            snprintf(sub, sizeof sub, "%s/s%d_m%d", dir, st, m);
            toy_run out = {0};
            toy_resume_run(st, ZINC_DTYPE_FP16, modes[m][0], modes[m][1], sub, CK_STEPS, &out);
            ZT_CHECK(toy_weights_equal(&ref, &out), "stage %d checkpoint %s: the resumed weights "
                     "differ from the uninterrupted run's", st, names[m]);
            toy_free(&out);
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sub);
        }
        toy_free(&ref);
    }
    rmdir(dir);
}

int main(void)
{
    test_bitwise();
    test_volume();
    test_limit();
    test_ckpt();
    return zt_finish("test_offload");
}
