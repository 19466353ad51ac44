/*
 * test_sched_api.c — zinc_schedule_eval, DeepSpeed's scheduler classes without an engine: at
 * every position it gives what the config's scheduler gives an engine (the section read in a
 * whole config, zsched_lr/zsched_beta* at the matching update count, as zinc_engine_lr and
 * zinc_engine_betas evaluate it), and bad sections and arguments are refused with the key named.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "optim/optim.h"
#include "testutil.h"
#include "zinc.h"

/* The section inside a whole config whose optimizer lr is `lr`, read as an engine reads it. */
static int engine_view(const char *section, double lr, zcfg *out)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", "
             "\"params\": {\"lr\": %.17g}}, \"scheduler\": %s}", lr, section);
    return zcfg_parse_text(text, NULL, NULL, out, NULL) == ZINC_OK;
}

/* Positions -1 .. last: the same lr (and betas) as the engine's schedule at update it + 1. */
static void same_as_engine(const char *name, const char *section, double base_lr, int64_t last)
{
    zcfg c;
    ZT_CHECK(engine_view(section, base_lr, &c), "%s: the section is a valid config", name);
    int bad = 0;
    for (int64_t it = -1; it <= last; it++) {
        double lr = -1, b1 = 0.5, b2 = 0.25;
        int sets = -1;
        zinc_status s = zinc_schedule_eval(section, base_lr, it, &lr, &b1, &b2, &sets);
        double want = zsched_lr(&c.sched, c.optim.lr, it + 1);
        int want_sets = zsched_sets_betas(&c.sched);
        /* At -1, OneCycle's get_mom() (the formula's cycle_max_mom, test_hand_values), not
         * the betas its constructor writes, which the engine's first step uses. */
        double want_b1 = !want_sets ? 0.5
                         : it < 0   ? c.sched.cycle_max_mom
                                    : zsched_beta1(&c.sched, 0.5, it + 1);
        double want_b2 = want_sets ? zsched_beta2(&c.sched, 0.25, it + 1) : 0.25;
        if (s != ZINC_OK || lr != want || sets != want_sets || b1 != want_b1 || b2 != want_b2) {
            if (bad++ < 3)
                fprintf(stderr, "%s at %lld: %s lr %.17g (want %.17g) sets %d (want %d) betas "
                        "%.17g %.17g (want %.17g %.17g) %s\n", name, (long long)it,
                        zinc_status_string(s), lr, want, sets, want_sets, b1, b2, want_b1,
                        want_b2, zinc_last_error(NULL));
        }
    }
    ZT_CHECK(bad == 0, "%s: %d positions differ from the engine's schedule", name, bad);
}

static void test_matches_engine(void)
{
    same_as_engine("WarmupLR log", "{\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": "
                   "0.001, \"warmup_max_lr\": 0.02, \"warmup_num_steps\": 7}}", 0.5, 20);
    same_as_engine("WarmupLR linear", "{\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": "
                   "0.02, \"warmup_num_steps\": 5, \"warmup_type\": \"linear\"}}", 0.5, 12);
    same_as_engine("WarmupDecayLR", "{\"type\": \"WarmupDecayLR\", \"params\": {"
                   "\"total_num_steps\": 20, \"warmup_max_lr\": 0.01, \"warmup_num_steps\": 4}}",
                   0.5, 30);
    same_as_engine("WarmupCosineLR", "{\"type\": \"WarmupCosineLR\", \"params\": {"
                   "\"total_num_steps\": 25, \"warmup_num_steps\": 5, \"warmup_min_ratio\": 0.1, "
                   "\"cos_min_ratio\": 0.01}}", 0.003, 40);
    same_as_engine("OneCycle", "{\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.001, "
                   "\"cycle_max_lr\": 0.01, \"cycle_first_step_size\": 4, \"cycle_second_step_size\""
                   ": 6, \"cycle_first_stair_count\": 2, \"decay_step_size\": 3, \"decay_lr_rate\": "
                   "0.5, \"cycle_min_mom\": 0.85, \"cycle_max_mom\": 0.95}}", 0.5, 25);
    same_as_engine("OneCycle no momentum", "{\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr"
                   "\": 0.001, \"cycle_max_lr\": 0.01, \"cycle_momentum\": false}}", 0.5, 10);
    same_as_engine("LRRangeTest", "{\"type\": \"LRRangeTest\", \"params\": {"
                   "\"lr_range_test_min_lr\": 0.0001, \"lr_range_test_step_size\": 3, "
                   "\"lr_range_test_step_rate\": 2.0, \"lr_range_test_staircase\": true}}", 0.5, 15);
}

/* Hand values: the class's own arithmetic (lr_schedules.py), not the engine's path. */
static void test_hand_values(void)
{
    double lr, b1 = 0.9, b2 = 0.999;
    int sets;
    /* WarmupLR without warmup_max_lr peaks at the group's lr: linear, 4 steps, at it = 2:
     * 0 + (0.8 - 0) * 2/4 = 0.4; and at it = 10 the peak 0.8. */
    const char *w = "{\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 4, "
                    "\"warmup_type\": \"linear\"}}";
    ZT_OK(zinc_schedule_eval(w, 0.8, 2, &lr, &b1, &b2, &sets));
    ZT_CHECK(fabs(lr - 0.4) < 1e-15 && sets == 0 && b1 == 0.9 && b2 == 0.999,
             "WarmupLR default peak: lr %.17g sets %d betas %g %g", lr, sets, b1, b2);
    ZT_OK(zinc_schedule_eval(w, 0.8, 10, &lr, &b1, &b2, &sets));
    ZT_CHECK(lr == 0.8, "WarmupLR after warm-up: %.17g, want the group's 0.8", lr);
    /* WarmupCosineLR at -1: DeepSpeed's get_lr() is 0.0 before the start. */
    ZT_OK(zinc_schedule_eval("{\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": "
                             "10}}", 0.3, -1, &lr, &b1, &b2, &sets));
    ZT_CHECK(lr == 0.0, "WarmupCosineLR at -1: %.17g, want 0", lr);
    /* OneCycle at -1: get_lr() is cycle_min_lr (scale 0), get_mom() cycle_max_mom - 0 (its
     * constructor writes cycle_min_mom instead). */
    ZT_OK(zinc_schedule_eval("{\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.002, "
                             "\"cycle_max_lr\": 0.02, \"cycle_min_mom\": 0.8, "
                             "\"cycle_max_mom\": 0.93}}", 0.5, -1, &lr, &b1, &b2, &sets));
    ZT_CHECK(lr == 0.002 && sets == 1 && b1 == 0.93 && b2 == 0.99,
             "OneCycle at -1: lr %.17g sets %d betas %.17g %.17g", lr, sets, b1, b2);
}

static int said(const char *needle)
{
    return strstr(zinc_last_error(NULL), needle) != NULL;
}

static void test_refusals(void)
{
    double lr = 7, b1 = 0, b2 = 0;
    int sets = 0;
    zinc_status s = zinc_schedule_eval("{\"type\": \"WarmupLR\", \"params\": {"
                                       "\"warmup_num_steps\": 0, \"warmup_type\": \"cubic\"}}",
                                       0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG && said("scheduler.params.warmup_num_steps") &&
             said("scheduler.params.warmup_type") && lr == 7,
             "two bad params: %s %s (lr %g)", zinc_status_string(s), zinc_last_error(NULL), lr);
    s = zinc_schedule_eval("{\"type\": \"WarmupDecayLR\"}", 0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG && said("total_num_steps") && said("required"),
             "missing total_num_steps: %s %s", zinc_status_string(s), zinc_last_error(NULL));
    s = zinc_schedule_eval("{\"type\": \"WarmupLr\"}", 0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG && said("did you mean WarmupLR"), "misspelt type: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval("{\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.1, "
                           "\"cycle_max_lr\": 0.2, \"cycle_min_lr\": 0.3}}", 0.1, 0, &lr, &b1,
                           &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG && said("cycle_min_lr"), "duplicate key: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval("[1, 2]", 0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG && said("scheduler"), "not an object: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval("{\"type\": ", 0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_CONFIG, "not JSON: %s %s", zinc_status_string(s),
             zinc_last_error(NULL));
    const char *ok = "{\"type\": \"WarmupLR\"}";
    s = zinc_schedule_eval(ok, 0.1, -2, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && said("last_batch_iteration -2"), "it -2: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval(ok, NAN, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && said("base_lr"), "base_lr nan: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval(ok, -0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && said("base_lr"), "base_lr < 0: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval(ok, 0.1, 0, &lr, &b1, NULL, &sets);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && said("beta2 is NULL"), "NULL beta2: %s",
             zinc_last_error(NULL));
    s = zinc_schedule_eval(NULL, 0.1, 0, &lr, &b1, &b2, &sets);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && said("scheduler_json is NULL"), "NULL section: %s",
             zinc_last_error(NULL));
}

int main(void)
{
    test_matches_engine();
    test_hand_values();
    test_refusals();
    return zt_finish("test_optim_sched_api");
}
