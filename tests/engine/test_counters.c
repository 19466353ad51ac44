/*
 * test_counters.c — the step counters near 2^63 (issue 12): the engine's step, skipped and micro
 * and the loss scaler's cur_iter / last_overflow_iter, set through the engine's view (as a
 * checkpoint load sets them) or directly on a scaler, then driven across the limit.
 *
 * Loaded state is range-checked (ckpt/state.c), so these values only arise in memory; what is
 * tested is that the arithmetic stays defined: the build compiles engine/step.c and optim/ sources
 * into this test with -fsanitize=signed-integer-overflow -fno-sanitize-recover where the compiler
 * has it, so an overflow ends the test with a runtime error instead of passing silently. The
 * engine refuses the step that would take step + skipped past INT64_MAX (ZINC_ERR_UNSUPPORTED,
 * naming the counters); the scaler saturates cur_iter and stops growing there.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/view.h"
#include "optim/optim.h"
#include "testutil.h"
#include "toy.h"

/* ---- the scaler on its own ---------------------------------------------------------------- */

static zcfg fp16_cfg(int64_t window)
{
    zcfg c;
    memset(&c, 0, sizeof c);
    c.dtype = ZINC_DTYPE_FP16;
    c.zero.stage = 1;
    c.fp16.enabled = 1;
    c.fp16.initial_scale_power = 8;
    c.fp16.loss_scale_window = window;
    c.fp16.hysteresis = 1;
    c.fp16.min_loss_scale = 1;
    return c;
}

static void test_scaler_limit(void)
{
    zcfg c = fp16_cfg(2);
    zscaler s;
    zscaler_init(&s, &c);

    /* Never overflowed (last_overflow_iter = -1) at the top of the range: cur_iter - (-1) is the
     * expression that used to overflow. */
    s.cur_iter = INT64_MAX - 3;
    s.last_overflow_iter = -1;
    for (int i = 0; i < 6; i++) ZT_CHECK(zscaler_update(&s, 0) == ZSCALER_OK, "clean update %d", i);
    ZT_CHECK(s.cur_iter == INT64_MAX, "cur_iter saturates at INT64_MAX, got %lld",
             (long long)s.cur_iter);
    double at_limit = s.cur_scale;
    ZT_CHECK(isfinite(at_limit) && at_limit >= 256.0, "scale %g", at_limit);
    for (int i = 0; i < 8; i++) zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == at_limit, "a saturated counter grows nothing: %g -> %g", at_limit,
             s.cur_scale);

    /* An overflow at the limit, then clean steps: stable = (cur - 1) - last stays defined. */
    ZT_CHECK(zscaler_update(&s, 1) == ZSCALER_OK, "overflow at the limit");
    ZT_CHECK(s.last_overflow_iter == INT64_MAX && s.cur_scale == at_limit / 2,
             "last_overflow_iter %lld, scale %g", (long long)s.last_overflow_iter, s.cur_scale);
    for (int i = 0; i < 4; i++) zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == at_limit / 2 && s.cur_iter == INT64_MAX, "scale %g cur_iter %lld",
             s.cur_scale, (long long)s.cur_iter);

    /* Just below the limit the rules are the usual ones: an overflow at INT64_MAX - 10, then a
     * window of 2 grows on the third clean step. */
    zscaler_init(&s, &c);
    s.cur_iter = INT64_MAX - 10;
    ZT_CHECK(zscaler_update(&s, 1) == ZSCALER_OK, "overflow");
    double half = s.cur_scale;
    zscaler_update(&s, 0);
    zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == half, "no growth before a full window: %g", s.cur_scale);
    zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == 2 * half, "growth after the window: %g, want %g", s.cur_scale, 2 * half);
}

/* ---- the engine --------------------------------------------------------------------------- */

/* A one-rank fp16 stage-1 toy engine whose counters are set to the given values (the scaler's
 * cur_iter = step + skipped, as the engine keeps it). `min_scale`: the minimum loss scale. */
static zinc_engine_t *engine_at(int64_t step, int64_t skipped, int64_t micro, int min_scale,
                                int *np)
{
    char extra[160];
    snprintf(extra, sizeof extra,
             "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"hysteresis\": 1, "
             "\"min_loss_scale\": %d},", min_scale);
    toy_run r = {.world = 1, .stage = 1, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_FP32,
                 .clip = 1.0, .extra_json = extra, .inject_inf_step = -1};
    zinc_engine_t *e = NULL;
    ZT_OK(toy_engine(&r, &e, np));
    if (!e) return NULL;
    zeng_view v;
    zeng_view_get(e, &v);
    v.st->step = step;
    v.st->skipped = skipped;
    v.st->micro = micro;
    v.st->scaler.cur_iter = step + skipped;
    return e;
}

static zinc_status one_step(zinc_engine_t *e, int np, int inject_inf, zinc_step_info_t *info)
{
    zinc_status s = toy_micro_step(e, 0, 1, 0, np, inject_inf);
    return s == ZINC_OK ? zinc_step(e, info) : s;
}

static void test_engine_limit(void)
{
    int np = 0;
    zinc_step_info_t info;

    /* Applied steps up to INT64_MAX, then a refusal that leaves the engine as it was. */
    zinc_engine_t *e = engine_at(INT64_MAX - 2, 0, 0, 1, &np);
    if (!e) return;
    ZT_OK(one_step(e, np, 0, &info));
    ZT_OK(one_step(e, np, 0, &info));
    ZT_CHECK(info.applied && info.step == INT64_MAX, "step %lld", (long long)info.step);
    zinc_status s = one_step(e, np, 0, &info);
    ZT_CHECK(s == ZINC_ERR_UNSUPPORTED, "a step past INT64_MAX: %s", zinc_status_string(s));
    ZT_CHECK(strstr(zinc_last_error(e), "9223372036854775807") != NULL &&
                 strstr(zinc_last_error(e), "rank 0") != NULL,
             "the message names the rank and the counter: %s", zinc_last_error(e));
    zeng_view v;
    zeng_view_get(e, &v);
    ZT_CHECK(v.st->step == INT64_MAX && v.st->micro == 0, "refused step moved nothing: step %lld",
             (long long)v.st->step);
    zinc_engine_destroy(e);

    /* A skipped (overflowing) step at the limit of skipped. */
    e = engine_at(0, INT64_MAX - 1, 0, 1, &np);
    if (!e) return;
    ZT_OK(one_step(e, np, 1, &info));
    ZT_CHECK(info.skipped && info.skipped_total == INT64_MAX, "skipped_total %lld",
             (long long)info.skipped_total);
    s = one_step(e, np, 0, &info);
    ZT_CHECK(s == ZINC_ERR_UNSUPPORTED, "a step past the limit of skipped: %s",
             zinc_status_string(s));
    zinc_engine_destroy(e);

    /* The stop at the minimum loss scale names step + skipped + 1: at the limit it is refused
     * first; one below, it reports INT64_MAX. */
    e = engine_at(INT64_MAX - 1, 1, 0, 256, &np);
    if (!e) return;
    s = one_step(e, np, 1, &info);
    ZT_CHECK(s == ZINC_ERR_UNSUPPORTED, "min-scale stop at the limit: %s", zinc_status_string(s));
    zinc_engine_destroy(e);
    e = engine_at(INT64_MAX - 3, 2, 0, 256, &np);
    if (!e) return;
    s = one_step(e, np, 1, &info);
    ZT_CHECK(s == ZINC_ERR_NUMERIC && strstr(zinc_last_error(e), "9223372036854775807") != NULL,
             "min-scale stop below the limit: %s: %s", zinc_status_string(s), zinc_last_error(e));
    zinc_engine_destroy(e);

    /* micro at INT64_MAX (past grad_accum - 1): the call is a boundary and micro starts over. */
    e = engine_at(0, 0, INT64_MAX, 1, &np);
    if (!e) return;
    ZT_OK(one_step(e, np, 0, &info));
    zeng_view_get(e, &v);
    ZT_CHECK(info.boundary && v.st->micro == 0 && v.st->step == 1, "boundary %d micro %lld",
             info.boundary, (long long)v.st->micro);
    zinc_engine_destroy(e);
}

int main(void)
{
    test_scaler_limit();
    test_engine_limit();
    return zt_finish("engine_counters");
}
