/*
 * test_scaler.c — the fp16 loss scaler against scripted overflow/clean sequences whose scale
 * sequences were worked out by hand from DeepSpeed 0.19.8's rules (DynamicLossScaler at stages
 * 1-3, FP16_Optimizer at stage 0; the same tables are in docs/optim.md), plus a random-sequence
 * comparison with a reference restated in other terms (a run length of clean steps instead of
 * iteration counters), and the config mapping.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"
#include "testutil.h"

static zcfg fp16_cfg(int power, int64_t window, int hysteresis, int consecutive, int64_t min)
{
    zcfg c;
    memset(&c, 0, sizeof c);
    c.dtype = ZINC_DTYPE_FP16;
    c.zero.stage = 1; /* stages 1-3: DynamicLossScaler; stage 0 is table D's */
    c.fp16.enabled = 1;
    c.fp16.loss_scale = 0.0;
    c.fp16.initial_scale_power = power;
    c.fp16.loss_scale_window = window;
    c.fp16.hysteresis = hysteresis;
    c.fp16.consecutive_hysteresis = consecutive;
    c.fp16.min_loss_scale = min;
    return c;
}

/* One row of a worked table: the step's overflow flag, then the scale and hysteresis the
 * scaler holds after zscaler_update (the scale the NEXT step multiplies its loss by), and
 * whether the update reports ZSCALER_AT_MIN (DeepSpeed raises; the state must not move). */
typedef struct { int overflow; double scale_after; int hyst_after; int at_min; } row;

static void run_table(const char *name, zscaler *s, const row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        double before = s->cur_scale;
        zscaler prev = *s;
        int r = zscaler_update(s, rows[i].overflow);
        ZT_CHECK(s->cur_scale == rows[i].scale_after && s->cur_hysteresis == rows[i].hyst_after &&
                     (r == ZSCALER_AT_MIN) == rows[i].at_min,
                 "%s: row %d (%s, scale before %g): scale %g hysteresis %d%s, expected %g and %d%s",
                 name, i, rows[i].overflow ? "overflow" : "clean", before, s->cur_scale,
                 s->cur_hysteresis, r == ZSCALER_AT_MIN ? " at-min" : "", rows[i].scale_after,
                 rows[i].hyst_after, rows[i].at_min ? " at-min" : "");
        if (rows[i].at_min)
            ZT_CHECK(!memcmp(&prev, s, sizeof prev), "%s: row %d: at-min must leave the state as it "
                     "was (DeepSpeed raises before changing it)", name, i);
    }
}

#define O 1
#define C 0
#define M 1 /* at_min */

/* The expected values below were worked out by hand from DeepSpeed 0.19.8's rules, not from a
 * DeepSpeed run (none is available here; docs/optim.md has the same tables):
 *   DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py, unchanged since
 *   v0.17.1 / PR #6976): a clean step grows the scale when
 *       stable = cur_iter - last_overflow_iter - 1 > 0  and  stable % scale_window == 0
 *   (last_overflow_iter starts at -1), and an overflow with the hysteresis spent raises
 *   "Current loss scale already at minimum" when cur_scale == min_scale, before changing state.
 * Until this change zinc followed DeepSpeed <= 0.17.0, "(cur_iter - last_overflow_iter) %
 * scale_window == 0", which grows one clean step sooner and right after an overflow with window
 * 1; every table was rewritten for the new rule. */

/* Table A: initial_scale_power 4 (scale 16), window 4, hysteresis 2, consecutive_hysteresis off,
 * min_loss_scale 1. The comment gives cur_iter and stable on clean steps. */
static const row table_a[] = {
    {C, 16, 2, 0},  /*  0: stable 0 */
    {C, 16, 2, 0},  /*  1: 1 */
    {C, 16, 2, 0},  /*  2: 2 */
    {C, 16, 2, 0},  /*  3: 3 (DeepSpeed <= 0.17.0 grew here) */
    {C, 32, 2, 0},  /*  4: 4 -> grow, refill (already 2): the 16,16,16,16,32,32 */
    {C, 32, 2, 0},  /*  5: 5 */
    {O, 32, 1, 0},  /*  6: hysteresis 2 > 1: spend one, keep the scale; last_overflow = 6 */
    {C, 32, 1, 0},  /*  7: 0; not consecutive: no refill */
    {O, 16, 1, 0},  /*  8: hysteresis 1: halve; last_overflow = 8 */
    {C, 16, 1, 0},  /*  9: 0: never grows right after an overflow */
    {C, 16, 1, 0},  /* 10: 1 */
    {C, 16, 1, 0},  /* 11: 2 */
    {C, 16, 1, 0},  /* 12: 3 */
    {C, 32, 2, 0},  /* 13: 4 -> grow after 5 clean steps, refill to 2 */
    {O, 32, 1, 0},  /* 14: spend */
    {O, 16, 1, 0},  /* 15: halve */
    {O, 8, 1, 0},   /* 16 */
    {O, 4, 1, 0},   /* 17 */
    {O, 2, 1, 0},   /* 18 */
    {O, 1, 1, 0},   /* 19: reaches min_loss_scale 1 (max(0.5, 1)); last_overflow = 19 */
    {O, 1, 1, M},   /* 20: already at min, hysteresis spent: DeepSpeed raises; nothing moves */
    {C, 1, 1, 0},   /* 20 again (cur_iter did not move): stable 0 */
    {C, 1, 1, 0},   /* 21: 1 */
    {C, 1, 1, 0},   /* 22: 2 */
    {C, 1, 1, 0},   /* 23: 3 */
    {C, 2, 2, 0},   /* 24: 4 -> grow to 2, refill */
    {C, 2, 2, 0},   /* 25: 5 */
    {C, 2, 2, 0},   /* 26: 6 */
    {C, 2, 2, 0},   /* 27: 7 */
    {C, 4, 2, 0},   /* 28: 8 -> grow again: every 4 clean steps once the first window is full */
};

/* Table B: the same but consecutive_hysteresis on: every clean step refills the hysteresis, so
 * only two overflows in a row (with hysteresis 2) halve the scale. */
static const row table_b[] = {
    {C, 16, 2, 0},  /*  0: stable 0 */
    {C, 16, 2, 0},  /*  1 */
    {C, 16, 2, 0},  /*  2 */
    {C, 16, 2, 0},  /*  3 */
    {C, 32, 2, 0},  /*  4: stable 4 -> grow */
    {O, 32, 1, 0},  /*  5: spend; last_overflow = 5 */
    {C, 32, 2, 0},  /*  6: refill (consecutive) */
    {O, 32, 1, 0},  /*  7: spend again: table A would halve here */
    {O, 16, 1, 0},  /*  8: second overflow in a row: halve; last_overflow = 8 */
    {C, 16, 2, 0},  /*  9: stable 0, refill */
    {C, 16, 2, 0},  /* 10: 1 */
    {C, 16, 2, 0},  /* 11: 2 */
    {C, 16, 2, 0},  /* 12: 3 */
    {C, 32, 2, 0},  /* 13: 4 -> grow */
    {O, 32, 1, 0},  /* 14 */
    {O, 16, 1, 0},  /* 15 */
    {O, 8, 1, 0},   /* 16 */
    {C, 8, 2, 0},   /* 17: refill */
    {O, 8, 1, 0},   /* 18: spend, last_overflow = 18 */
    {C, 8, 2, 0},   /* 19: 0 */
    {C, 8, 2, 0},   /* 20: 1 */
    {C, 8, 2, 0},   /* 21: 2 */
    {C, 8, 2, 0},   /* 22: 3 */
    {C, 16, 2, 0},  /* 23: 4 -> grow */
};

/* Table C: hysteresis 1 (every overflow halves), window 1, min_loss_scale 3 (not a power of two:
 * the floor is exact). With window 1 the first clean step after an overflow does not grow
 * (stable 0); every later one does. */
static const row table_c[] = {
    {O, 8, 1, 0},   /* 0: 16 -> 8; last_overflow = 0 */
    {C, 8, 1, 0},   /* 1: stable 0: no growth (DeepSpeed <= 0.17.0 doubled here) */
    {C, 16, 1, 0},  /* 2: stable 1 */
    {O, 8, 1, 0},   /* 3 */
    {O, 4, 1, 0},   /* 4 */
    {O, 3, 1, 0},   /* 5: max(2, 3) */
    {O, 3, 1, M},   /* 6: at min: DeepSpeed raises */
    {C, 3, 1, 0},   /* 6 again: stable 0 */
    {C, 6, 1, 0},   /* 7: 1 */
    {C, 12, 1, 0},  /* 8: 2 */
};

/* Table D: ZeRO stage 0. DeepSpeed 0.19.8 wraps its fused Adam in FP16_Optimizer, whose
 * _update_scale (deepspeed/runtime/fp16/fused_optimizer.py) halves on every overflow (no
 * hysteresis, consecutive_hysteresis ignored), clamps at min_loss_scale and never raises; growth
 * uses the same stable-interval rule. initial_scale_power 4, window 3, hysteresis 2, min 1: the
 * issue's example, overflow at step 4 halves at once (stages 1-3 would keep 32). */
static const row table_d[] = {
    {C, 16, 2, 0},  /*  0: stable 0 */
    {C, 16, 2, 0},  /*  1 */
    {C, 16, 2, 0},  /*  2 */
    {C, 32, 2, 0},  /*  3: stable 3 -> grow */
    {O, 16, 2, 0},  /*  4: halve at once; the hysteresis is never read */
    {C, 16, 2, 0},  /*  5: stable 0 */
    {C, 16, 2, 0},  /*  6 */
    {C, 16, 2, 0},  /*  7 */
    {C, 32, 2, 0},  /*  8: stable 3 -> grow */
    {O, 16, 2, 0},  /*  9 */
    {O, 8, 2, 0},   /* 10 */
    {O, 4, 2, 0},   /* 11 */
    {O, 2, 2, 0},   /* 12 */
    {O, 1, 2, 0},   /* 13: min */
    {O, 1, 2, 0},   /* 14: at min: FP16_Optimizer keeps skipping, no error */
    {O, 1, 2, 0},   /* 15; last_overflow = 15 */
    {C, 1, 2, 0},   /* 16: stable 0 */
    {C, 1, 2, 0},   /* 17 */
    {C, 1, 2, 0},   /* 18 */
    {C, 2, 2, 0},   /* 19: stable 3 -> grow */
};

#define NROWS(t) ((int)(sizeof t / sizeof t[0]))

static void test_tables(void)
{
    zscaler s;
    zcfg c = fp16_cfg(4, 4, 2, 0, 1);
    zscaler_init(&s, &c);
    ZT_CHECK(s.dynamic && !s.no_hysteresis && s.cur_scale == 16.0 && s.cur_hysteresis == 2 &&
                 s.cur_iter == 0 && s.last_overflow_iter == -1 && s.scale_factor == 2.0 &&
                 s.scale_window == 4,
             "dynamic init: scale 2^4, hysteresis 2, cur_iter 0, last_overflow_iter -1");
    run_table("table A", &s, table_a, NROWS(table_a));
    ZT_CHECK(s.cur_iter == 29 && s.last_overflow_iter == 19, "table A counters: %lld %lld",
             (long long)s.cur_iter, (long long)s.last_overflow_iter);

    c = fp16_cfg(4, 4, 2, 1, 1);
    zscaler_init(&s, &c);
    run_table("table B", &s, table_b, NROWS(table_b));

    c = fp16_cfg(4, 1, 1, 0, 3);
    zscaler_init(&s, &c);
    run_table("table C", &s, table_c, NROWS(table_c));

    for (int consecutive = 0; consecutive <= 1; consecutive++) {
        c = fp16_cfg(4, 3, 2, consecutive, 1);
        c.zero.stage = 0;
        zscaler_init(&s, &c);
        ZT_CHECK(s.no_hysteresis, "stage 0: FP16_Optimizer's rule");
        run_table(consecutive ? "table D (consecutive_hysteresis on)" : "table D", &s, table_d,
                  NROWS(table_d));
    }
    /* The example in numbers, for stages 1-3 too: six clean steps, window 4. */
    static const double ds_0_19_8[6] = {16, 16, 16, 16, 32, 32};
    for (int stage = 0; stage <= 3; stage++) {
        c = fp16_cfg(4, 4, 2, 0, 1);
        c.zero.stage = stage;
        zscaler_init(&s, &c);
        for (int i = 0; i < 6; i++) {
            zscaler_update(&s, 0);
            ZT_CHECK(s.cur_scale == ds_0_19_8[i], "stage %d clean step %d: scale %g, DeepSpeed "
                     "0.19.8 has %g", stage, i, s.cur_scale, ds_0_19_8[i]);
        }
    }
}

/* The rules restated: grow when the run of clean steps before this one (since the last overflow,
 * or since the start) is a positive multiple of the window; the hysteresis is a budget of
 * tolerated overflows, refilled on every clean step (consecutive) or when the scale grows
 * (otherwise); with the budget spent and the scale at the floor, stop (stages 1-3). Stage 0 has
 * no budget and no stop. */
typedef struct { double scale; int budget; int64_t run; } ref_scaler;

static int ref_update(ref_scaler *r, int overflow, int64_t window, int hyst, int consecutive,
                      double min, int stage0)
{
    if (overflow) {
        if (!stage0 && hyst > 1 && r->budget > 1) {
            r->budget -= 1;
        } else {
            if (!stage0 && r->scale == min) return 1;
            r->scale = r->scale / 2 < min ? min : r->scale / 2;
        }
        r->run = 0;
        return 0;
    }
    int64_t before = r->run;
    r->run += 1;
    if (consecutive && !stage0) r->budget = hyst;
    if (before > 0 && before % window == 0) {
        if (!stage0) r->budget = hyst;
        r->scale *= 2;
    }
    return 0;
}

static void test_random_sequences(void)
{
    zt_rng rng = {12345};
    int bad = 0, stops = 0;
    for (int trial = 0; trial < 400; trial++) {
        int64_t window = 1 + (int64_t)(zt_next(&rng) % 6);
        int hyst = 1 + (int)(zt_next(&rng) % 4);
        int consecutive = (int)(zt_next(&rng) % 2);
        int64_t min = (zt_next(&rng) % 2) ? 1 : 2;
        int stage0 = trial % 2;
        double p_over = 0.1 + 0.6 * zt_uniform(&rng);
        zcfg c = fp16_cfg(8, window, hyst, consecutive, min);
        c.zero.stage = stage0 ? 0 : 2;
        zscaler s;
        zscaler_init(&s, &c);
        ref_scaler r = {256.0, hyst, 0};
        for (int i = 0; i < 300; i++) {
            int ov = zt_uniform(&rng) < p_over;
            int got = zscaler_update(&s, ov) == ZSCALER_AT_MIN;
            int want = ref_update(&r, ov, window, hyst, consecutive, (double)min, stage0);
            stops += got;
            if (s.cur_scale != r.scale || (!stage0 && s.cur_hysteresis != r.budget) || got != want) {
                if (bad++ < 5)
                    fprintf(stderr,
                            "trial %d step %d (stage0 %d w %lld h %d cons %d): scale %g/%g hyst "
                            "%d/%d stop %d/%d\n",
                            trial, i, stage0, (long long)window, hyst, consecutive, s.cur_scale,
                            r.scale, s.cur_hysteresis, r.budget, got, want);
                break;
            }
        }
    }
    ZT_CHECK(bad == 0, "%d random sequences differ from the restated rule", bad);
    ZT_CHECK(stops > 0, "the random sequences reached the min-scale stop (%d times)", stops);
}

static void test_config_mapping(void)
{
    zscaler s;
    zcfg c = fp16_cfg(16, 1000, 2, 0, 1);
    zscaler_init(&s, &c);
    ZT_CHECK(s.dynamic && s.cur_scale == 65536.0 && s.min_scale == 1.0 &&
                 s.scale_window == 1000 && s.delayed_shift == 2 && !s.consecutive_hysteresis,
             "DeepSpeed defaults: dynamic 2^16, window 1000, hysteresis 2, min 1");

    /* Static fp16 scale: never changes, overflow or not. */
    c.fp16.loss_scale = 128.0;
    zscaler_init(&s, &c);
    ZT_CHECK(!s.dynamic && s.cur_scale == 128.0, "fp16 loss_scale 128 is static");
    int changed = 0;
    for (int i = 0; i < 3000; i++) {
        zscaler_update(&s, i % 3 == 0);
        changed |= s.cur_scale != 128.0;
    }
    ZT_CHECK(!changed, "a static scale never changes");

    /* bf16 and fp32: static 1, whatever the fp16 section says. */
    c = fp16_cfg(16, 1000, 2, 0, 1);
    c.fp16.enabled = 0;
    c.dtype = ZINC_DTYPE_BF16;
    zscaler_init(&s, &c);
    ZT_CHECK(!s.dynamic && s.cur_scale == 1.0, "bf16: static scale 1");
    for (int i = 0; i < 50; i++) zscaler_update(&s, 1);
    ZT_CHECK(s.cur_scale == 1.0, "bf16 scale stays 1 through overflows");
    c.dtype = ZINC_DTYPE_FP32;
    zscaler_init(&s, &c);
    ZT_CHECK(!s.dynamic && s.cur_scale == 1.0, "fp32: static scale 1");

    /* A degenerate window/hysteresis (config.c rejects them) still gives a defined machine. */
    c = fp16_cfg(2, 0, 0, 0, 1);
    zscaler_init(&s, &c);
    ZT_CHECK(s.scale_window == 1 && s.delayed_shift == 1, "window/hysteresis < 1 taken as 1");
    zscaler_update(&s, 0);
    zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == 8.0, "window 1: the second clean step doubles 4 -> 8 (got %g)",
             s.cur_scale);
}

int main(void)
{
    test_tables();
    test_random_sequences();
    test_config_mapping();
    return zt_finish("test_optim_scaler");
}
