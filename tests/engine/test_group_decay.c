/*
 * test_group_decay.c — zinc_group_set_weight_decay: a weight decay per group (torch's and
 * DeepSpeed's per-parameter-group weight_decay).
 *
 * Adam is elementwise and, without clipping, nothing couples one element's update to another's:
 * a run whose groups have decays (config 0.01; 0, 0.1, config, 0, config) must end with every
 * group bitwise equal to the same group of the run whose config decay is that group's. At
 * stages 0-3, world 2, fp32 and bf16, with the optimizer offloaded at stages 1-3 (its chunks
 * split at a change of decay), and stage 3 with every group gathered on demand. The decay is
 * part of the registration ranks compare; bad values and calls after finalize are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

static const double GROUP_WD[TOY_GROUPS] = {NAN, 0.0, 0.1, NAN, 0.0};

static toy_run base(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist)
{
    toy_run r = {.world = 2, .stage = stage, .accum = 1, .steps = 3, .dtype = dtype, .clip = 0,
                 .zero_json = zero_json, .persist_threshold = persist, .inject_inf_step = -1};
    return r;
}

static void compare(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist,
                    const char *label)
{
    toy_run mixed = base(stage, dtype, zero_json, persist);
    mixed.group_wd = GROUP_WD;
    if (!toy_run_ok(&mixed, label)) return;
    const char *decays[] = {"0.0", "0.01", "0.1"};
    const double values[] = {0.0, 0.01, 0.1};
    toy_run uniform[3];
    for (int k = 0; k < 3; k++) {
        uniform[k] = base(stage, dtype, zero_json, persist);
        uniform[k].weight_decay = decays[k];
        if (!toy_run_ok(&uniform[k], label)) {
            toy_free(&mixed);
            for (int j = 0; j < k; j++) toy_free(&uniform[j]);
            return;
        }
    }
    int differs_from_config = 0;
    for (int p = 0; p < mixed.nparams; p++) {
        int g = toy_param_group(p);
        double wd = isnan(GROUP_WD[g]) ? 0.01 : GROUP_WD[g];
        int k = wd == values[0] ? 0 : wd == values[1] ? 1 : 2;
        size_t bytes = (size_t)mixed.numel[p] * sizeof(float);
        ZT_CHECK(!memcmp(mixed.final[p], uniform[k].final[p], bytes),
                 "%s: parameter %d (group %d, decay %g) differs from the run with that decay",
                 label, p, g, wd);
        /* The check can fail: a group with its own decay is not the config-decay run's. */
        if (k != 1 && memcmp(mixed.final[p], uniform[1].final[p], bytes)) differs_from_config++;
    }
    ZT_CHECK(differs_from_config > 0, "%s: no group's decay changed anything", label);
    toy_free(&mixed);
    for (int k = 0; k < 3; k++) toy_free(&uniform[k]);
}

static void test_bitwise(void)
{
    static const char *OFF = "\"offload_optimizer\": {\"device\": \"cpu\"}, ";
    /* A small sub_group_size makes the offloaded step's chunks single groups; the default puts
     * all groups in one chunk, which the decay then splits. */
    static const char *OFF_SMALL =
        "\"offload_optimizer\": {\"device\": \"cpu\"}, \"sub_group_size\": 64, ";
    zinc_dtype dts[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        for (int stage = 0; stage <= 3; stage++) {
            char label[96];
            snprintf(label, sizeof label, "stage %d %s", stage, di ? "bf16" : "fp32");
            compare(stage, dts[di], NULL, 0, label);
            if (stage >= 1) {
                snprintf(label, sizeof label, "stage %d %s offloaded", stage, di ? "bf16" : "fp32");
                compare(stage, dts[di], OFF, 0, label);
                snprintf(label, sizeof label, "stage %d %s offloaded, chunk per group", stage,
                         di ? "bf16" : "fp32");
                compare(stage, dts[di], OFF_SMALL, 0, label);
            }
        }
        compare(3, dts[di], NULL, -1, di ? "stage 3 bf16, nothing persistent"
                                         : "stage 3 fp32, nothing persistent");
    }
}

static void test_refusals(void)
{
    toy_run r = base(2, ZINC_DTYPE_FP32, NULL, 0);
    char *cfg = toy_config(&r);
    zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    free(cfg);
    if (!e) return;
    int g;
    ZT_OK(zinc_group_add(e, "only", &g));
    ZT_CHECK(zinc_group_set_weight_decay(e, g, -0.1) == ZINC_ERR_INVALID_ARG, "negative accepted");
    ZT_CHECK(strstr(zinc_last_error(e), "only") != NULL, "the error does not name the group: %s",
             zinc_last_error(e));
    ZT_CHECK(zinc_group_set_weight_decay(e, g, NAN) == ZINC_ERR_INVALID_ARG, "NaN accepted");
    ZT_CHECK(zinc_group_set_weight_decay(e, g, INFINITY) == ZINC_ERR_INVALID_ARG, "inf accepted");
    ZT_CHECK(zinc_group_set_weight_decay(e, g + 1, 0.0) == ZINC_ERR_INVALID_ARG,
             "an unknown group accepted");
    ZT_CHECK(zinc_group_set_weight_decay(NULL, g, 0.0) == ZINC_ERR_INVALID_ARG, "NULL accepted");
    ZT_OK(zinc_group_set_weight_decay(e, g, 0.0));
    int64_t shape[1] = {8};
    int p;
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    ZT_OK(zinc_finalize(e));
    ZT_CHECK(zinc_group_set_weight_decay(e, g, 0.1) == ZINC_ERR_USAGE, "accepted after finalize");
    zinc_engine_destroy(e);
}

/* Two ranks, rank 1 with the group decays and rank 0 without: both refused at finalize. */
typedef struct { zinc_world_t *world; zinc_status st[2]; char msg[2][512]; } mm_ctx;

static void mismatch_rank(int rank, void *arg)
{
    mm_ctx *c = arg;
    toy_run r = base(2, ZINC_DTYPE_FP32, NULL, 0);
    r.group_wd = rank == 1 ? GROUP_WD : NULL;
    zinc_engine_t *e = NULL;
    int np = 0;
    c->st[rank] = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", e ? zinc_last_error(e) : "");
    zinc_engine_destroy(e);
}

static void test_mismatch(void)
{
    mm_ctx c = {0};
    ZT_OK(zinc_world_create_local(2, &c.world));
    zt_run_ranks(2, mismatch_rank, &c);
    for (int r = 0; r < 2; r++) {
        ZT_CHECK(c.st[r] == ZINC_ERR_MISMATCH, "rank %d: %s", r, zinc_status_string(c.st[r]));
        ZT_CHECK(strstr(c.msg[r], "weight decay") != NULL, "rank %d message: %s", r, c.msg[r]);
    }
    zinc_world_destroy(c.world);
}

int main(void)
{
    test_bitwise();
    test_refusals();
    test_mismatch();
    return zt_finish("test_group_decay");
}
