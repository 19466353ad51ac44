/*
 * test_group_hparams.c — hyperparameters per group: zinc_group_set_weight_decay,
 * zinc_group_set_betas, zinc_group_set_eps and zinc_group_set_lr, torch's and DeepSpeed's
 * per-parameter-group weight_decay, betas, eps and lr.
 *
 * Adam is elementwise and, without clipping, nothing couples one element's update to another's:
 * a run whose groups have their own values must end with every group bitwise equal to the same
 * group of the run whose config values are that group's (its bias corrections those of its own
 * betas). At stages 0-3, world 2, fp32 and bf16, with the optimizer offloaded at stages 1-3 (its
 * chunks split at a change of values), and stage 3 with every group gathered on demand. Under
 * OneCycle with cycle_momentum the schedule's betas replace every group's, as in DeepSpeed. The
 * values set before finalize are part of the registration ranks compare; set after it they
 * apply from the next step (set before the first step, the run is bitwise the one that set them
 * at registration; set before the second, it is neither that run nor the config's). Bad values
 * are refused before and after finalize.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

/* toy_config's defaults: its decay and lr, and DeepSpeed's betas and eps. */
static const double CFG[5] = {0.01, 0.01, 0.9, 0.999, 1e-8};
static const double GROUP_WD[TOY_GROUPS] = {NAN, 0.0, 0.1, NAN, 0.0};
static const double GROUP_LR[TOY_GROUPS] = {NAN, 0.003, 0.003, 0.03, NAN};
static const double GROUP_BETAS[TOY_GROUPS][2] = {
    {0.8, 0.95}, {NAN, NAN}, {0.8, 0.95}, {0.5, 0.9}, {NAN, NAN}};
static const double GROUP_EPS[TOY_GROUPS] = {NAN, 1e-3, 1e-3, NAN, 0.5};

/* Which of a toy_run's per-group values a comparison sets. */
typedef struct {
    const double *wd, *lr, (*betas)[2], *eps;
} group_values;

/* A group's values in the order of CFG: decay, lr, beta1, beta2, eps; g < 0: the config's. */
static void values_of(const group_values *gv, int g, double out[5])
{
    memcpy(out, CFG, sizeof CFG);
    if (g < 0) return;
    if (gv->wd && !isnan(gv->wd[g])) out[0] = gv->wd[g];
    if (gv->lr && !isnan(gv->lr[g])) out[1] = gv->lr[g];
    if (gv->betas && !isnan(gv->betas[g][0])) {
        out[2] = gv->betas[g][0];
        out[3] = gv->betas[g][1];
    }
    if (gv->eps && !isnan(gv->eps[g])) out[4] = gv->eps[g];
}

static toy_run base(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist)
{
    toy_run r = {.world = 2, .stage = stage, .accum = 1, .steps = 3, .dtype = dtype, .clip = 0,
                 .zero_json = zero_json, .persist_threshold = persist, .inject_inf_step = -1};
    return r;
}

static void set_groups(toy_run *r, const group_values *gv)
{
    r->group_wd = gv->wd;
    r->group_lr = gv->lr;
    r->group_betas = gv->betas;
    r->group_eps = gv->eps;
}

/* One reference run per distinct set of values of the mixed run's groups: config values only. */
typedef struct {
    double v[5];
    char wd_json[32], lr_json[32], betas_json[64], eps_json[32];
    toy_run run;
} uniform_run;

static int find_ref(const uniform_run *ref, int nref, const double v[5])
{
    int k = 0;
    while (k < nref && memcmp(ref[k].v, v, sizeof ref[k].v)) k++;
    return k;
}

static void compare(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist,
                    const group_values *gv, const char *label)
{
    toy_run mixed = base(stage, dtype, zero_json, persist);
    set_groups(&mixed, gv);
    if (!toy_run_ok(&mixed, label)) return;
    uniform_run ref[TOY_GROUPS + 1];
    int nref = 0, ok = 1;
    /* The all-config run first: the check that the per-group values changed anything. */
    for (int g = -1; g < TOY_GROUPS && ok; g++) {
        double v[5];
        values_of(gv, g, v);
        if (find_ref(ref, nref, v) < nref) continue;
        uniform_run *u = &ref[nref];
        memcpy(u->v, v, sizeof u->v);
        snprintf(u->wd_json, sizeof u->wd_json, "%.17g", v[0]);
        snprintf(u->lr_json, sizeof u->lr_json, "%.17g", v[1]);
        snprintf(u->betas_json, sizeof u->betas_json, "[%.17g, %.17g]", v[2], v[3]);
        snprintf(u->eps_json, sizeof u->eps_json, "%.17g", v[4]);
        u->run = base(stage, dtype, zero_json, persist);
        u->run.weight_decay = u->wd_json;
        u->run.lr = u->lr_json;
        u->run.betas = u->betas_json;
        u->run.eps = u->eps_json;
        ok = toy_run_ok(&u->run, label);
        if (ok) nref++;
    }
    int differs_from_config = 0;
    for (int p = 0; p < mixed.nparams && ok; p++) {
        int g = toy_param_group(p);
        double v[5];
        values_of(gv, g, v);
        int k = find_ref(ref, nref, v);
        size_t bytes = (size_t)mixed.numel[p] * sizeof(float);
        ZT_CHECK(!memcmp(mixed.final[p], ref[k].run.final[p], bytes),
                 "%s: parameter %d (group %d: decay %g, lr %g, betas [%g, %g], eps %g) differs "
                 "from the run with those", label, p, g, v[0], v[1], v[2], v[3], v[4]);
        /* The check can fail: a group with its own values is not the config run's. */
        if (k != 0 && memcmp(mixed.final[p], ref[0].run.final[p], bytes)) differs_from_config++;
    }
    ZT_CHECK(!ok || differs_from_config > 0, "%s: no group's own values changed anything", label);
    toy_free(&mixed);
    for (int k = 0; k < nref; k++) toy_free(&ref[k].run);
}

/* Every setting: stages 0-3, fp32 and bf16, offloaded (one chunk, a chunk per group), stage 3
 * with nothing persistent. */
static void compare_everywhere(const group_values *gv, const char *what)
{
    static const char *OFF = "\"offload_optimizer\": {\"device\": \"cpu\"}, ";
    /* A small sub_group_size makes the offloaded step's chunks single groups; the default puts
     * all groups in one chunk, which the decays and learning rates then split. */
    static const char *OFF_SMALL =
        "\"offload_optimizer\": {\"device\": \"cpu\"}, \"sub_group_size\": 64, ";
    zinc_dtype dts[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        const char *dn = di ? "bf16" : "fp32";
        char label[128];
        for (int stage = 0; stage <= 3; stage++) {
            snprintf(label, sizeof label, "%s: stage %d %s", what, stage, dn);
            compare(stage, dts[di], NULL, 0, gv, label);
            if (stage >= 1) {
                snprintf(label, sizeof label, "%s: stage %d %s offloaded", what, stage, dn);
                compare(stage, dts[di], OFF, 0, gv, label);
                snprintf(label, sizeof label, "%s: stage %d %s offloaded, chunk per group", what,
                         stage, dn);
                compare(stage, dts[di], OFF_SMALL, 0, gv, label);
            }
        }
        snprintf(label, sizeof label, "%s: stage 3 %s, nothing persistent", what, dn);
        compare(3, dts[di], NULL, -1, gv, label);
    }
}

static void test_bitwise(void)
{
    compare_everywhere(&(group_values){.wd = GROUP_WD}, "decays");
    compare_everywhere(&(group_values){.lr = GROUP_LR}, "learning rates");
    compare_everywhere(&(group_values){.betas = GROUP_BETAS}, "betas");
    compare_everywhere(&(group_values){.eps = GROUP_EPS}, "eps");
    compare_everywhere(&(group_values){GROUP_WD, GROUP_LR, GROUP_BETAS, GROUP_EPS},
                       "decays, learning rates, betas and eps");
}

/* OneCycle with cycle_momentum sets every group's betas (DeepSpeed's OneCycle writes
 * (momentum, 0.99) into each param group): a group's own betas change nothing there, its own eps
 * still does. */
static void test_one_cycle(void)
{
    static const char *ONE_CYCLE =
        "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.001, "
        "\"cycle_max_lr\": 0.01, \"cycle_first_step_size\": 2, \"cycle_momentum\": true}},";
    for (int stage = 0; stage <= 3; stage += 3) {
        toy_run plain = base(stage, ZINC_DTYPE_FP32, NULL, 0);
        plain.extra_json = ONE_CYCLE;
        toy_run own = plain, own_eps = plain;
        own.group_betas = GROUP_BETAS;
        own_eps.group_betas = GROUP_BETAS;
        own_eps.group_eps = GROUP_EPS;
        char label[64];
        snprintf(label, sizeof label, "OneCycle, stage %d", stage);
        if (toy_run_ok(&plain, label) && toy_run_ok(&own, label) && toy_run_ok(&own_eps, label)) {
            ZT_CHECK(toy_weights_equal(&plain, &own),
                     "%s: the groups' own betas changed the run; the schedule sets them", label);
            ZT_CHECK(!toy_weights_equal(&plain, &own_eps), "%s: the groups' own eps did nothing",
                     label);
        }
        toy_free(&plain);
        toy_free(&own);
        toy_free(&own_eps);
    }
}

/* OneCycle's momentum past the cycle grows by decay_mom_rate without bound (DeepSpeed's formula):
 * at beta1 >= 1 the step is refused naming the scheduler's keys (it failed as "bias corrections
 * must be > 0", or trained reversed). Cycle of 2 + 2 steps, then 0.9 x (1 + 0.1 k): 1.08 at the
 * 6th step (k = 2). */
static void test_one_cycle_momentum_past_one(void)
{
    toy_run r = base(0, ZINC_DTYPE_FP32, NULL, 0);
    r.world = 1;
    r.steps = 8;
    r.extra_json = "\"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.001, "
                   "\"cycle_max_lr\": 0.01, \"cycle_first_step_size\": 2, \"cycle_momentum\": "
                   "true, \"decay_step_size\": 1, \"decay_mom_rate\": 0.1}},";
    toy_train(&r);
    ZT_CHECK(r.status == ZINC_ERR_INVALID_ARG && strstr(r.error, "OneCycle") &&
                 strstr(r.error, "decay_mom_rate") && r.applied >= 4 && r.applied < 8,
             "OneCycle's beta1 past 1: status %s after %d steps: %s",
             zinc_status_string(r.status), r.applied, r.error);
    toy_free(&r);
}

/* The decays, betas and eps set after finalize: before the first step they give bitwise the run
 * that set them at registration; before the second they apply from there on (the run differs
 * from both the config's and the one with them from the start). */
static void test_after_finalize(void)
{
    static const struct {
        int stage;
        const char *zero_json;
    } CASES[] = {{0, NULL}, {1, NULL}, {2, NULL}, {3, NULL},
                 {2, "\"offload_optimizer\": {\"device\": \"cpu\"}, "}};
    const group_values all = {GROUP_WD, NULL, GROUP_BETAS, GROUP_EPS};
    zinc_dtype dts[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
            int st = CASES[k].stage;
            const char *zero = CASES[k].zero_json;
            char label[96];
            snprintf(label, sizeof label, "set after finalize: stage %d%s %s", st,
                     zero ? " offloaded" : "", di ? "bf16" : "fp32");
            toy_run config = base(st, dts[di], zero, 0), early = config, first = config,
                    second = config;
            set_groups(&early, &all);
            set_groups(&first, &all);
            set_groups(&second, &all);
            first.group_values_at = 1;
            second.group_values_at = 2;
            if (toy_run_ok(&config, label) && toy_run_ok(&early, label) &&
                toy_run_ok(&first, label) && toy_run_ok(&second, label)) {
                ZT_CHECK(toy_weights_equal(&early, &first),
                         "%s: set before the first step is not the run that set them at "
                         "registration", label);
                ZT_CHECK(!toy_weights_equal(&second, &early) &&
                             !toy_weights_equal(&second, &config),
                         "%s: set before the second step, the run equals %s", label,
                         toy_weights_equal(&second, &config) ? "the config's (not applied)"
                                                             : "the one set from the start");
            }
            toy_free(&config);
            toy_free(&early);
            toy_free(&first);
            toy_free(&second);
        }
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
    ZT_CHECK(zinc_group_set_betas(e, g, 1.0, 0.999) == ZINC_ERR_INVALID_ARG, "beta1 1 accepted");
    ZT_CHECK(strstr(zinc_last_error(e), "only") != NULL, "the error does not name the group: %s",
             zinc_last_error(e));
    ZT_CHECK(zinc_group_set_betas(e, g, 0.9, -0.1) == ZINC_ERR_INVALID_ARG, "beta2 < 0 accepted");
    ZT_CHECK(zinc_group_set_betas(e, g, NAN, 0.9) == ZINC_ERR_INVALID_ARG, "beta1 NaN accepted");
    ZT_CHECK(zinc_group_set_betas(e, g + 1, 0.9, 0.99) == ZINC_ERR_INVALID_ARG,
             "betas of an unknown group accepted");
    ZT_CHECK(zinc_group_set_betas(NULL, g, 0.9, 0.99) == ZINC_ERR_INVALID_ARG,
             "betas: NULL accepted");
    ZT_OK(zinc_group_set_betas(e, g, 0.0, 0.99));
    ZT_CHECK(zinc_group_set_eps(e, g, 0.0) == ZINC_ERR_INVALID_ARG, "eps 0 accepted");
    ZT_CHECK(strstr(zinc_last_error(e), "only") != NULL, "the error does not name the group: %s",
             zinc_last_error(e));
    ZT_CHECK(zinc_group_set_eps(e, g, INFINITY) == ZINC_ERR_INVALID_ARG, "eps inf accepted");
    ZT_CHECK(zinc_group_set_eps(e, g, NAN) == ZINC_ERR_INVALID_ARG, "eps NaN accepted");
    ZT_CHECK(zinc_group_set_eps(e, g + 1, 1e-6) == ZINC_ERR_INVALID_ARG,
             "eps of an unknown group accepted");
    ZT_CHECK(zinc_group_set_eps(NULL, g, 1e-6) == ZINC_ERR_INVALID_ARG, "eps: NULL accepted");
    ZT_OK(zinc_group_set_eps(e, g, 1e-6));
    int64_t shape[1] = {8};
    int p;
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    ZT_CHECK(zinc_group_set_lr(e, g, -0.1) == ZINC_ERR_INVALID_ARG, "negative lr accepted");
    ZT_CHECK(strstr(zinc_last_error(e), "only") != NULL, "the error does not name the group: %s",
             zinc_last_error(e));
    ZT_CHECK(zinc_group_set_lr(e, g, INFINITY) == ZINC_ERR_INVALID_ARG, "inf lr accepted");
    ZT_CHECK(zinc_group_set_lr(e, g + 1, 0.1) == ZINC_ERR_INVALID_ARG, "lr of an unknown group");
    ZT_CHECK(zinc_group_set_lr(NULL, g, 0.1) == ZINC_ERR_INVALID_ARG, "lr: NULL accepted");
    ZT_OK(zinc_group_set_lr(e, g, 0.1));
    ZT_OK(zinc_group_set_lr(e, g, NAN));      /* the engine's lr back */
    ZT_OK(zinc_finalize(e));
    /* After finalize the values change between steps; bad ones are still refused. */
    ZT_CHECK(zinc_group_set_weight_decay(e, g, -0.1) == ZINC_ERR_INVALID_ARG,
             "negative decay accepted after finalize");
    ZT_CHECK(zinc_group_set_betas(e, g, 0.9, 1.0) == ZINC_ERR_INVALID_ARG,
             "beta2 1 accepted after finalize");
    ZT_CHECK(zinc_group_set_eps(e, g, -1e-6) == ZINC_ERR_INVALID_ARG,
             "negative eps accepted after finalize");
    ZT_CHECK(zinc_group_set_eps(e, g + 1, 1e-6) == ZINC_ERR_INVALID_ARG,
             "eps of an unknown group accepted after finalize");
    ZT_OK(zinc_group_set_weight_decay(e, g, 0.1));
    ZT_OK(zinc_group_set_betas(e, g, 0.9, 0.99));
    ZT_OK(zinc_group_set_eps(e, g, 1e-6));
    ZT_OK(zinc_group_set_lr(e, g, 0.2));
    zinc_engine_destroy(e);
}

/* Two ranks, rank 1 with a group's own values and rank 0 without: both refused at finalize. */
typedef struct {
    zinc_world_t *world;
    group_values rank1;
    zinc_status st[2];
    char msg[2][512];
} mm_ctx;

static void mismatch_rank(int rank, void *arg)
{
    mm_ctx *c = arg;
    toy_run r = base(2, ZINC_DTYPE_FP32, NULL, 0);
    if (rank == 1) set_groups(&r, &c->rank1);
    zinc_engine_t *e = NULL;
    int np = 0;
    c->st[rank] = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", e ? zinc_last_error(e) : "");
    zinc_engine_destroy(e);
}

static void test_mismatch(void)
{
    const group_values cases[] = {{.wd = GROUP_WD}, {.betas = GROUP_BETAS}, {.eps = GROUP_EPS}};
    const char *names[] = {"decays", "betas", "eps"};
    for (int k = 0; k < 3; k++) {
        mm_ctx c = {.rank1 = cases[k]};
        ZT_OK(zinc_world_create_local(2, &c.world));
        zt_run_ranks(2, mismatch_rank, &c);
        for (int r = 0; r < 2; r++) {
            ZT_CHECK(c.st[r] == ZINC_ERR_MISMATCH, "%s: rank %d: %s", names[k], r,
                     zinc_status_string(c.st[r]));
            ZT_CHECK(strstr(c.msg[r], "weight decay, betas or eps") != NULL,
                     "%s: rank %d message: %s", names[k], r, c.msg[r]);
        }
        zinc_world_destroy(c.world);
    }
}

int main(void)
{
    test_bitwise();
    test_one_cycle();
    test_one_cycle_momentum_past_one();
    test_after_finalize();
    test_refusals();
    test_mismatch();
    return zt_finish("test_group_hparams");
}
