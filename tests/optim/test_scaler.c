/*
 * test_scaler.c — the fp16 loss scaler against scripted overflow/clean sequences whose scale
 * sequences were worked out by hand from DeepSpeed's update_scale rule (the same tables are in
 * docs/optim.md), plus a random-sequence comparison with a reference restated in other terms
 * (a run length of clean steps instead of iteration counters), and the config mapping.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"
#include "testutil.h"

static zcfg fp16_cfg(int power, int64_t window, int hysteresis, int consecutive, double min)
{
    zcfg c;
    memset(&c, 0, sizeof c);
    c.dtype = ZINC_DTYPE_FP16;
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
 * scaler holds after zscaler_update (the scale the NEXT step multiplies its loss by). */
typedef struct { int overflow; double scale_after; int hyst_after; } row;

static void run_table(const char *name, zscaler *s, const row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        double before = s->cur_scale;
        zscaler_update(s, rows[i].overflow);
        ZT_CHECK(s->cur_scale == rows[i].scale_after && s->cur_hysteresis == rows[i].hyst_after,
                 "%s: step %d (%s, scale before %g): scale %g hysteresis %d, expected %g and %d",
                 name, i, rows[i].overflow ? "overflow" : "clean", before, s->cur_scale,
                 s->cur_hysteresis, rows[i].scale_after, rows[i].hyst_after);
    }
}

#define O 1
#define C 0

/* Table A (docs/optim.md): initial_scale_power 4 (scale 16), window 4, hysteresis 2,
 * consecutive_hysteresis off, min_loss_scale 1. Growth when (cur_iter - last_overflow_iter) is
 * a multiple of 4, with last_overflow_iter starting at -1. */
static const row table_a[] = {
    {C, 16, 2},  /*  0: 0-(-1)=1 */
    {C, 16, 2},  /*  1: 2 */
    {C, 16, 2},  /*  2: 3 */
    {C, 32, 2},  /*  3: 4 -> grow, refill hysteresis (already 2) */
    {O, 32, 1},  /*  4: hysteresis 2 > 1: spend one, keep the scale; last_overflow = 4 */
    {C, 32, 1},  /*  5: 1; not consecutive: no refill */
    {O, 16, 1},  /*  6: hysteresis 1: halve; last_overflow = 6 */
    {C, 16, 1},  /*  7: 1 */
    {C, 16, 1},  /*  8: 2 */
    {C, 16, 1},  /*  9: 3 */
    {C, 32, 2},  /* 10: 4 -> grow, refill to 2 */
    {O, 32, 1},  /* 11: spend */
    {O, 16, 1},  /* 12: halve */
    {O, 8, 1},   /* 13 */
    {O, 4, 1},   /* 14 */
    {O, 2, 1},   /* 15 */
    {O, 1, 1},   /* 16: reaches min_loss_scale 1 */
    {O, 1, 1},   /* 17: at min: stays 1 (DeepSpeed would raise here) */
    {O, 1, 1},   /* 18: still 1, last_overflow = 18 */
    {C, 1, 1},   /* 19: 1 */
    {C, 1, 1},   /* 20: 2 */
    {C, 1, 1},   /* 21: 3 */
    {C, 2, 2},   /* 22: 4 -> grow to 2, refill */
    {C, 2, 2},   /* 23: 5 */
    {C, 2, 2},   /* 24: 6 */
    {C, 2, 2},   /* 25: 7 */
    {C, 4, 2},   /* 26: 8 -> grow again: every 4 clean steps */
};

/* Table B: the same but consecutive_hysteresis on: every clean step refills the hysteresis, so
 * only two overflows in a row (with hysteresis 2) halve the scale. */
static const row table_b[] = {
    {C, 16, 2},  /*  0 */
    {C, 16, 2},  /*  1 */
    {C, 16, 2},  /*  2 */
    {C, 32, 2},  /*  3: grow */
    {O, 32, 1},  /*  4: spend */
    {C, 32, 2},  /*  5: refill (consecutive) */
    {O, 32, 1},  /*  6: spend again: table A halved here */
    {O, 16, 1},  /*  7: second overflow in a row: halve; last_overflow = 7 */
    {C, 16, 2},  /*  8: 1, refill */
    {C, 16, 2},  /*  9: 2 */
    {C, 16, 2},  /* 10: 3 */
    {C, 32, 2},  /* 11: 4 -> grow */
    {O, 32, 1},  /* 12 */
    {O, 16, 1},  /* 13 */
    {O, 8, 1},   /* 14 */
    {C, 8, 2},   /* 15: refill */
    {O, 8, 1},   /* 16: spend, last_overflow = 16 */
    {C, 8, 2},   /* 17: 1 */
    {C, 8, 2},   /* 18: 2 */
    {C, 8, 2},   /* 19: 3 */
    {C, 16, 2},  /* 20: 4 -> grow */
};

/* Table C: hysteresis 1 (every overflow halves), window 1 (every clean step doubles, even the
 * one right after an overflow), min_loss_scale 3 (not a power of two: the floor is exact). */
static const row table_c[] = {
    {O, 8, 1},   /* 16 -> 8 */
    {C, 16, 1},  /* 1 % 1 == 0: grow at once */
    {O, 8, 1},
    {O, 4, 1},
    {O, 3, 1},   /* max(2, 3) */
    {O, 3, 1},   /* at min: stays */
    {C, 6, 1},
    {C, 12, 1},
};

static void test_tables(void)
{
    zscaler s;
    zcfg c = fp16_cfg(4, 4, 2, 0, 1.0);
    zscaler_init(&s, &c);
    ZT_CHECK(s.dynamic && s.cur_scale == 16.0 && s.cur_hysteresis == 2 && s.cur_iter == 0 &&
                 s.last_overflow_iter == -1 && s.scale_factor == 2.0 && s.scale_window == 4,
             "dynamic init: scale 2^4, hysteresis 2, cur_iter 0, last_overflow_iter -1");
    run_table("table A", &s, table_a, (int)(sizeof table_a / sizeof table_a[0]));
    ZT_CHECK(s.cur_iter == 27 && s.last_overflow_iter == 18, "table A counters: %lld %lld",
             (long long)s.cur_iter, (long long)s.last_overflow_iter);

    c = fp16_cfg(4, 4, 2, 1, 1.0);
    zscaler_init(&s, &c);
    run_table("table B", &s, table_b, (int)(sizeof table_b / sizeof table_b[0]));

    c = fp16_cfg(4, 1, 1, 0, 3.0);
    zscaler_init(&s, &c);
    run_table("table C", &s, table_c, (int)(sizeof table_c / sizeof table_c[0]));
}

/* The rule restated: grow when the run of clean steps since the last overflow (or since the
 * start) reaches a multiple of the window; the hysteresis is a budget of tolerated overflows,
 * refilled on every clean step (consecutive) or when the scale grows (otherwise). */
typedef struct { double scale; int budget; int64_t run; } ref_scaler;

static void ref_update(ref_scaler *r, int overflow, int64_t window, int hyst, int consecutive,
                       double min)
{
    if (overflow) {
        r->run = 0;
        if (hyst > 1 && r->budget > 1) {
            r->budget -= 1;
        } else {
            r->scale = r->scale / 2 < min ? min : r->scale / 2;
        }
        return;
    }
    r->run += 1;
    if (consecutive) r->budget = hyst;
    if (r->run % window == 0) {
        r->budget = hyst;
        r->scale *= 2;
    }
}

static void test_random_sequences(void)
{
    zt_rng rng = {12345};
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        int64_t window = 1 + (int64_t)(zt_next(&rng) % 6);
        int hyst = 1 + (int)(zt_next(&rng) % 4);
        int consecutive = (int)(zt_next(&rng) % 2);
        double min = (zt_next(&rng) % 2) ? 1.0 : 0.25;
        double p_over = 0.1 + 0.6 * zt_uniform(&rng);
        zcfg c = fp16_cfg(8, window, hyst, consecutive, min);
        zscaler s;
        zscaler_init(&s, &c);
        ref_scaler r = {256.0, hyst, 0};
        for (int i = 0; i < 300; i++) {
            int ov = zt_uniform(&rng) < p_over;
            zscaler_update(&s, ov);
            ref_update(&r, ov, window, hyst, consecutive, min);
            if (s.cur_scale != r.scale || s.cur_hysteresis != r.budget) {
                if (bad++ < 5)
                    fprintf(stderr,
                            "trial %d step %d (w %lld h %d cons %d): scale %g/%g hyst %d/%d\n",
                            trial, i, (long long)window, hyst, consecutive, s.cur_scale, r.scale,
                            s.cur_hysteresis, r.budget);
                break;
            }
        }
    }
    ZT_CHECK(bad == 0, "%d random sequences differ from the restated rule", bad);
}

static void test_config_mapping(void)
{
    zscaler s;
    zcfg c = fp16_cfg(16, 1000, 2, 0, 1.0);
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
    c = fp16_cfg(16, 1000, 2, 0, 1.0);
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
    c = fp16_cfg(2, 0, 0, 0, 1.0);
    zscaler_init(&s, &c);
    ZT_CHECK(s.scale_window == 1 && s.delayed_shift == 1, "window/hysteresis < 1 taken as 1");
    zscaler_update(&s, 0);
    ZT_CHECK(s.cur_scale == 8.0, "window 1: a clean step doubles 4 -> 8 (got %g)", s.cur_scale);
}

int main(void)
{
    test_tables();
    test_random_sequences();
    test_config_mapping();
    return zt_finish("test_optim_scaler");
}
