/*
 * test_parity.c — engine behaviour that must match DeepSpeed 0.19.8 (issue 11), and the API
 * gaps found next to it:
 *   - fp16 at ZeRO stages 1-3: an overflow with the hysteresis spent and the loss scale already
 *     at min_loss_scale stops the run (DeepSpeed's DynamicLossScaler raises "Current loss scale
 *     already at minimum"): zinc_step returns ZINC_ERR_NUMERIC on every rank at the same step,
 *     naming the step, the scale and the first group with a non-finite gradient, with weights and
 *     Adam moments as after the last applied step;
 *   - at stage 0 (DeepSpeed's FP16_Optimizer) the same overflows halve at once and never stop;
 *   - ranks given different configs (lr, stage) are refused at zinc_finalize, naming the ranks;
 *   - a negative thread count, NULL out_group/out_param and zinc_mean_over_ranks before finalize
 *     are refused.
 * The expected scales come from DeepSpeed 0.19.8's rules (docs/optim.md, section 3), not from a
 * DeepSpeed run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "testutil.h"
#include "toy.h"

#define NR 4

/* ---- the minimum loss scale ---------------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int stage;
    zinc_status st[NR][4];       /* status of optimizer steps 1..4 */
    zinc_step_info_t info[NR][4];
    int unchanged[NR];           /* master, m, v after the error == after the last applied step */
    char msg[NR][1024];
} ms_ctx;

/* Scale 2^2 = 4, floor 2, hysteresis 2: one clean step, then overflows (an inf from rank 2 in
 * group block1). DynamicLossScaler: overflow 1 spends the hysteresis (4), overflow 2 halves to 2,
 * overflow 3 finds the scale at the floor with the hysteresis spent: DeepSpeed raises.
 * FP16_Optimizer (stage 0): 2, 2, 2 and no error. */
static const char *ms_config(int stage)
{
    static _Thread_local char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"train_micro_batch_size_per_gpu\": 1,"
             " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 2, \"min_loss_scale\": 2,"
             "            \"hysteresis\": 2, \"loss_scale_window\": 1000},"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d}, \"zinc\": {\"comm_timeout_s\": 20}}",
             stage);
    return buf;
}

static void ms_rank(int rank, void *arg)
{
    ms_ctx *c = arg;
    zinc_engine_options_t o = {.config_json = ms_config(c->stage), .world = c->world,
                               .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = zinc_engine_create(&o, &e);
    if (s == ZINC_OK) s = toy_register(e, &np);
    float *snap = NULL;
    size_t n = 0;
    for (int k = 0; k < 4 && s == ZINC_OK; k++) {
        s = toy_micro_step(e, rank, NR, k, np, k > 0 && rank == 2);
        if (s != ZINC_OK) break;
        if (k == 1) {
            /* after the last applied step */
            n = e->stage == 0 ? e->plan.flat_numel : e->plan.shard_numel;
            snap = malloc(3 * n * sizeof(float) + 4);
            memcpy(snap, e->master, n * 4);
            memcpy(snap + n, e->m, n * 4);
            memcpy(snap + 2 * n, e->v, n * 4);
        }
        c->st[rank][k] = zinc_step(e, &c->info[rank][k]);
        if (c->st[rank][k] != ZINC_OK) {
            snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
            c->unchanged[rank] = snap && !memcmp(snap, e->master, n * 4) &&
                                 !memcmp(snap + n, e->m, n * 4) &&
                                 !memcmp(snap + 2 * n, e->v, n * 4);
            break;
        }
    }
    if (s != ZINC_OK) snprintf(c->msg[rank], sizeof c->msg[rank], "setup: %s", zinc_last_error(e));
    free(snap);
    zinc_engine_destroy(e);
}

static void test_min_scale(void)
{
    for (int stage = 0; stage <= 3; stage++) {
        ms_ctx c;
        memset(&c, 0, sizeof c);
        c.stage = stage;
        ZT_OK(zinc_world_create_local(NR, &c.world));
        zt_run_ranks(NR, ms_rank, &c);
        zinc_world_destroy(c.world);
        for (int r = 0; r < NR; r++) {
            ZT_CHECK(c.st[r][0] == ZINC_OK && c.info[r][0].applied, "stage %d rank %d: clean "
                     "step 1: %s", stage, r, c.msg[r]);
            ZT_CHECK(c.st[r][1] == ZINC_OK && c.st[r][2] == ZINC_OK && c.info[r][1].skipped &&
                         c.info[r][2].skipped,
                     "stage %d rank %d: overflows 1-2 are skipped: %s", stage, r, c.msg[r]);
            /* DeepSpeed 0.19.8: DynamicLossScaler 4 -> 4 -> 2; FP16_Optimizer 4 -> 2 -> 2. */
            double want1 = stage == 0 ? 2.0 : 4.0;
            ZT_CHECK(c.info[r][1].next_loss_scale == want1 && c.info[r][2].next_loss_scale == 2.0,
                     "stage %d rank %d: scales after the overflows %g %g, expected %g 2", stage, r,
                     c.info[r][1].next_loss_scale, c.info[r][2].next_loss_scale, want1);
            if (stage == 0) {
                ZT_CHECK(c.st[r][3] == ZINC_OK && c.info[r][3].skipped &&
                             c.info[r][3].next_loss_scale == 2.0,
                         "stage 0 rank %d: at the floor FP16_Optimizer keeps skipping (%s): %s", r,
                         zinc_status_string(c.st[r][3]), c.msg[r]);
                continue;
            }
            ZT_CHECK(c.st[r][3] == ZINC_ERR_NUMERIC, "stage %d rank %d: overflow at the floor "
                     "returned %s, expected ZINC_ERR_NUMERIC", stage, r,
                     zinc_status_string(c.st[r][3]));
            ZT_CHECK(strstr(c.msg[r], "optimizer step 4:") && strstr(c.msg[r], "minimum 2 ") &&
                         strstr(c.msg[r], "'block1'"),
                     "stage %d rank %d: the message names step 4, scale 2 and group block1: %s",
                     stage, r, c.msg[r]);
            ZT_CHECK(c.unchanged[r], "stage %d rank %d: weights or moments moved", stage, r);
        }
    }
}

/* ---- configs must agree across ranks ------------------------------------------------------- */

typedef struct {
    zinc_world_t *world;
    int odd_rank;
    const char *odd_cfg, *cfg;
    zinc_status st[NR];
    char msg[NR][1024];
} cm_ctx;

static void cm_rank(int rank, void *arg)
{
    cm_ctx *c = arg;
    zinc_engine_options_t o = {.config_json = rank == c->odd_rank ? c->odd_cfg : c->cfg,
                               .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = zinc_engine_create(&o, &e);
    if (s == ZINC_OK) s = toy_register(e, &np);
    c->st[rank] = s;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_config_mismatch(void)
{
    static const char base[] =
        "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %s}},"
        " \"zero_optimization\": {\"stage\": %d}, \"zinc\": {\"comm_timeout_s\": 20}}";
    char same[512], lr[512], stage[512];
    snprintf(same, sizeof same, base, "0.01", 1);
    snprintf(lr, sizeof lr, base, "0.02", 1);
    snprintf(stage, sizeof stage, base, "0.01", 2);
    const struct { const char *odd; int rank; const char *what; } cases[] = {
        {lr, 1, "lr"}, {stage, 3, "stage"}, {same, 2, "the same config"}};
    for (int k = 0; k < 3; k++) {
        cm_ctx c;
        memset(&c, 0, sizeof c);
        c.cfg = same;
        c.odd_cfg = cases[k].odd;
        c.odd_rank = cases[k].rank;
        ZT_OK(zinc_world_create_local(NR, &c.world));
        zt_run_ranks(NR, cm_rank, &c);
        zinc_world_destroy(c.world);
        char want[64];
        snprintf(want, sizeof want, "rank(s) %d run a different config", cases[k].rank);
        for (int r = 0; r < NR; r++) {
            if (k == 2) {
                ZT_CHECK(c.st[r] == ZINC_OK, "%s: rank %d: %s", cases[k].what, r, c.msg[r]);
                continue;
            }
            ZT_CHECK(c.st[r] == ZINC_ERR_MISMATCH && strstr(c.msg[r], want),
                     "different %s on rank %d: rank %d got %s: %s", cases[k].what,
                     cases[k].rank, r, zinc_status_string(c.st[r]), c.msg[r]);
            /* Each rank names its own hash only where it differs from rank 0's. */
            char own[64];
            if (r == 0) snprintf(own, sizeof own, "on rank 0)");
            else if (r == cases[k].rank) snprintf(own, sizeof own, "on this rank %d)", r);
            else snprintf(own, sizeof own, "the same on this rank %d)", r);
            ZT_CHECK(strstr(c.msg[r], own) != NULL, "different %s: rank %d's message lacks '%s': %s",
                     cases[k].what, r, own, c.msg[r]);
            ZT_CHECK(r != cases[k].rank || !strstr(c.msg[r], "the same on this rank"),
                     "different %s: the differing rank %d says it has rank 0's: %s",
                     cases[k].what, r, c.msg[r]);
        }
    }
}

/* ---- API gaps ------------------------------------------------------------------------------ */

static void test_api(void)
{
    static const char cfg[] = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\"}}";
    zinc_engine_t *e = NULL;
    zinc_engine_options_t o = {.config_json = cfg, .threads = -1};
    ZT_CHECK(zinc_engine_create(&o, &e) == ZINC_ERR_INVALID_ARG && e == NULL,
             "threads = -1 must be refused");
    ZT_CHECK(strstr(zinc_last_error(NULL), "threads = -1") != NULL, "message: %s",
             zinc_last_error(NULL));
    zinc_engine_destroy(e);

    o.threads = 1;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    double v[2] = {1.0, 3.0};
    ZT_CHECK(zinc_mean_over_ranks(e, v, 2) == ZINC_ERR_USAGE, "mean_over_ranks before finalize");
    ZT_CHECK(zinc_group_add(e, "g", NULL) == ZINC_ERR_INVALID_ARG, "NULL out_group");
    ZT_CHECK(strstr(zinc_last_error(e), "out_group") != NULL, "message: %s", zinc_last_error(e));
    int g = -1, p = -1;
    ZT_OK(zinc_group_add(e, "g", &g));
    int64_t shape[1] = {8};
    ZT_CHECK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, NULL) == ZINC_ERR_INVALID_ARG,
             "NULL out_param");
    ZT_CHECK(strstr(zinc_last_error(e), "out_param") != NULL, "message: %s", zinc_last_error(e));
    /* a NULL shape is named as such (it said "ndim 1 is outside 1..8") */
    ZT_CHECK(zinc_param_add(e, g, "w", 1, NULL, ZINC_DTYPE_FP32, &p) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(e), "shape is NULL"), "NULL shape: %s", zinc_last_error(e));
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    ZT_CHECK(g == 0 && p == 0, "ids %d %d", g, p);
    ZT_OK(zinc_finalize(e));
    ZT_OK(zinc_mean_over_ranks(e, v, 2));
    ZT_CHECK(v[0] == 1.0 && v[1] == 3.0, "one rank: the mean is the value");
    zinc_engine_destroy(e);
}

int main(void)
{
    test_min_scale();
    test_config_mismatch();
    test_api();
    return zt_finish("test_parity");
}
