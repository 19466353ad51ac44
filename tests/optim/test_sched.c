/*
 * test_sched.c — the LR schedulers against references written in this file: closed forms in
 * the number k of applied updates, evaluated in long double, and values worked out by hand
 * (arithmetic in the comments). The closed forms state the step semantics directly — update k
 * runs with the constructor's lr for k = 0 and with get_lr() at last_batch_iteration = k - 1
 * after that — instead of following optim/sched.c's operation order.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"
#include "testutil.h"

typedef long double ld;

static const ld PI_L = 3.141592653589793238462643383279502884L;

/* Relative closeness with an absolute floor for values at or near 0. The code computes in
 * double, the reference in long double: a few double ulps of difference is all that may exist. */
static int close_to(double got, ld want, double rtol)
{
    ld diff = fabsl((ld)got - want);
    ld scale = fabsl(want) > 1e-300L ? fabsl(want) : 1.0L;
    return diff <= (ld)rtol * scale || diff <= 1e-18L;
}

#define RTOL 1e-13  /* closed-form vs the code: both a handful of ulps from the exact value */
#define HTOL 1e-10  /* hand values written with 11+ significant digits */

/* DeepSpeed's constructor defaults (lr_schedules.py), written here rather than taken from
 * config/config.c so that this test stands alone. */
static zcfg_sched ds_defaults(zsched_type type)
{
    zcfg_sched s;
    memset(&s, 0, sizeof s);
    s.type = type;
    s.warmup_min_lr = 0.0;
    s.warmup_max_lr = 0.001;
    s.warmup_num_steps = 1000;
    s.warmup_type = ZWARMUP_LOG;
    s.total_num_steps = 10000;
    s.warmup_min_ratio = 0.0;
    s.cos_min_ratio = 0.0001;
    s.cycle_min_lr = 0.0001;
    s.cycle_max_lr = 0.001;
    s.decay_lr_rate = 0.0;
    s.cycle_first_step_size = 2000;
    s.cycle_second_step_size = ZCFG_NONE;
    s.cycle_first_stair_count = 0;
    s.cycle_second_stair_count = ZCFG_NONE;
    s.decay_step_size = 0;
    s.cycle_momentum = 1;
    s.cycle_min_mom = 0.8;
    s.cycle_max_mom = 0.9;
    s.decay_mom_rate = 0.0;
    s.lr_range_test_min_lr = 0.001;
    s.lr_range_test_step_size = 2000;
    s.lr_range_test_step_rate = 1.0;
    s.lr_range_test_staircase = 0;
    return s;
}

/* ---- closed-form references, in k = applied updates before the one that uses the lr -------- */

static ld ref_W(const zcfg_sched *s) { return s->warmup_num_steps < 2 ? 2.0L : (ld)s->warmup_num_steps; }

/* Fraction of warmup done when update k runs (k >= 1; the warmup position is k - 1). */
static ld ref_warm_frac(const zcfg_sched *s, int64_t k)
{
    ld W = ref_W(s);
    if ((ld)(k - 1) >= W) return 1.0L;
    if (s->warmup_type == ZWARMUP_LINEAR) return (ld)(k - 1) / W;
    return logl((ld)k) / logl(W);  /* log(position + 1) / log(W) */
}

static ld ref_warmup(const zcfg_sched *s, int64_t k, int decay)
{
    ld lo = s->warmup_min_lr, hi = s->warmup_max_lr;
    if (k == 0) return lo;
    ld W = ref_W(s), pos = (ld)(k - 1);
    if (pos < W || !decay) return lo + (hi - lo) * ref_warm_frac(s, k);
    ld T = (ld)s->total_num_steps;
    ld f = (T - pos) / fmaxl(1.0L, T - W);
    return lo + (hi - lo) * fmaxl(0.0L, f);
}

static ld ref_cosine(const zcfg_sched *s, ld base, int64_t k)
{
    if (k == 0) return 0.0L;
    ld W = ref_W(s), pos = (ld)(k - 1);
    ld wmr = s->warmup_min_ratio, cmr = s->cos_min_ratio;
    if (pos < W) return base * (wmr + (1.0L - wmr) * ref_warm_frac(s, k));
    ld p = (pos - W + 1.0L) / fmaxl(1.0L, (ld)s->total_num_steps - W);
    if (p > 1.0L) p = 1.0L;
    return base * fmaxl(0.0L, cmr + (1.0L - cmr) * (1.0L + cosl(PI_L * p)) / 2.0L);
}

/* OneCycle's position in its cycle when update k runs is k itself (DeepSpeed evaluates at
 * last_batch_iteration + 1 = k), so: up for k in [0, first], down for k in (first, total]. */
static ld ref_cycle_frac(const zcfg_sched *s, int64_t k)
{
    int64_t first = s->cycle_first_step_size;
    int64_t second = s->cycle_second_step_size == ZCFG_NONE ? first : s->cycle_second_step_size;
    int64_t total = first + second;
    int64_t ci = k % total;
    int64_t n1 = s->cycle_first_stair_count;
    int64_t n2 = s->cycle_second_stair_count == ZCFG_NONE ? n1 : s->cycle_second_stair_count;
    if (ci <= first) {
        if (n1 > 0) return (ld)(ci * n1 / first) / (ld)n1;  /* integer floor: exact stairs */
        return (ld)ci / (ld)first;
    }
    if (n2 > 0) return (ld)((total - ci) * n2 / second) / (ld)n2;
    return (ld)(total - ci) / (ld)second;
}

static int64_t ref_total(const zcfg_sched *s)
{
    int64_t first = s->cycle_first_step_size;
    return first + (s->cycle_second_step_size == ZCFG_NONE ? first : s->cycle_second_step_size);
}

static ld ref_one_cycle_lr(const zcfg_sched *s, int64_t k)
{
    ld lo = s->cycle_min_lr, hi = s->cycle_max_lr;
    int64_t total = ref_total(s);
    if (k <= total) return lo + (hi - lo) * ref_cycle_frac(s, k);
    if (s->decay_step_size == 0 || s->decay_lr_rate == 0.0) return lo;
    ld d = (ld)(k - total) / (ld)s->decay_step_size;
    return lo / (1.0L + (ld)s->decay_lr_rate * d);
}

static ld ref_one_cycle_mom(const zcfg_sched *s, int64_t k)
{
    ld lo = s->cycle_min_mom, hi = s->cycle_max_mom;
    if (k == 0) return lo;
    int64_t total = ref_total(s);
    if (k <= total) return hi - (hi - lo) * ref_cycle_frac(s, k);
    if (s->decay_step_size == 0 || s->decay_mom_rate == 0.0) return hi;
    ld d = (ld)(k - total) / (ld)s->decay_step_size;
    return hi * (1.0L + (ld)s->decay_mom_rate * d);
}

static ld ref_range_test(const zcfg_sched *s, int64_t k)
{
    ld x = (ld)k / (ld)s->lr_range_test_step_size;
    if (s->lr_range_test_staircase) x = floorl(x);
    return (ld)s->lr_range_test_min_lr * (1.0L + (ld)s->lr_range_test_step_rate * x);
}

static ld ref_lr(const zcfg_sched *s, ld base, int64_t k)
{
    switch (s->type) {
    case ZSCHED_WARMUP_LR: return ref_warmup(s, k, 0);
    case ZSCHED_WARMUP_DECAY_LR: return ref_warmup(s, k, 1);
    case ZSCHED_WARMUP_COSINE_LR: return ref_cosine(s, base, k);
    case ZSCHED_ONE_CYCLE: return ref_one_cycle_lr(s, k);
    case ZSCHED_LR_RANGE_TEST: return ref_range_test(s, k);
    default: return base;
    }
}

/* Every step from 0 to `last` (covers 0, 1, the warmup/cycle boundaries, mid, end and beyond). */
static void sweep(const char *name, const zcfg_sched *s, double base, int64_t last)
{
    int bad = 0;
    for (int64_t k = 0; k <= last; k++) {
        double got = zsched_lr(s, base, k);
        ld want = ref_lr(s, base, k);
        if (!close_to(got, want, RTOL)) {
            if (bad++ < 5)
                fprintf(stderr, "%s: step %lld: lr %.17g, reference %.17Lg\n", name, (long long)k,
                        got, want);
        }
        if (s->type == ZSCHED_ONE_CYCLE && s->cycle_momentum) {
            double b1 = zsched_beta1(s, 0.95, k);
            ld wb = ref_one_cycle_mom(s, k);
            if (!close_to(b1, wb, RTOL)) {
                if (bad++ < 5)
                    fprintf(stderr, "%s: step %lld: beta1 %.17g, reference %.17Lg\n", name,
                            (long long)k, b1, wb);
            }
        }
    }
    ZT_CHECK(bad == 0, "%s: %d steps of 0..%lld differ from the closed form", name, bad,
             (long long)last);
}

#define HAND(s, base, k, want)                                                               \
    do {                                                                                     \
        double got_ = zsched_lr((s), (base), (k));                                           \
        ZT_CHECK(close_to(got_, (want), HTOL), "step %d: lr %.17g, hand value %.17g", (k),    \
                 got_, (double)(want));                                                      \
    } while (0)

static void test_warmup_lr(void)
{
    /* DeepSpeed defaults: log warmup 0 -> 0.001 over 1000 updates. */
    zcfg_sched s = ds_defaults(ZSCHED_WARMUP_LR);
    sweep("WarmupLR defaults (log)", &s, 0.5, 3000);
    HAND(&s, 0.5, 0, 0.0);     /* constructor: warmup_min_lr */
    HAND(&s, 0.5, 1, 0.0);     /* position 0: log(1) = 0 */
    /* position 1: 0.001 * ln 2 / ln 1000 = 0.001 * 0.693147180560 / 6.907755278982
     *           = 0.001 * 0.100343331888 */
    HAND(&s, 0.5, 2, 1.00343331888e-4);
    /* position 499: 0.001 * ln 500 / ln 1000 = 0.001 * 6.214608098422 / 6.907755278982
     *             = 0.001 * 0.899656668112 */
    HAND(&s, 0.5, 500, 8.99656668112e-4);
    HAND(&s, 0.5, 1000, 0.001); /* position 999: ln 1000 / ln 1000 = 1 */
    HAND(&s, 0.5, 1001, 0.001); /* position 1000 >= W: gamma 1 */
    HAND(&s, 0.5, 100000, 0.001);

    /* Linear warmup 1e-4 -> 1.1e-3 over 10 updates. */
    s.warmup_type = ZWARMUP_LINEAR;
    s.warmup_min_lr = 1e-4;
    s.warmup_max_lr = 1.1e-3;
    s.warmup_num_steps = 10;
    sweep("WarmupLR linear", &s, 0.5, 100);
    HAND(&s, 0.5, 0, 1e-4);
    HAND(&s, 0.5, 1, 1e-4);     /* 1e-4 + 1e-3 * 0/10 */
    HAND(&s, 0.5, 6, 6e-4);     /* 1e-4 + 1e-3 * 5/10 */
    HAND(&s, 0.5, 10, 1.0e-3);  /* 1e-4 + 1e-3 * 9/10: the max is reached one update later */
    HAND(&s, 0.5, 11, 1.1e-3);
    HAND(&s, 0.5, 50, 1.1e-3);

    /* warmup_num_steps 1 is raised to 2 by DeepSpeed: positions 0 and 1 warm up. */
    s.warmup_num_steps = 1;
    sweep("WarmupLR linear W=1->2", &s, 0.5, 20);
    HAND(&s, 0.5, 2, 6e-4);     /* 1e-4 + 1e-3 * 1/2 */
    s.warmup_type = ZWARMUP_LOG;
    sweep("WarmupLR log W=1->2", &s, 0.5, 20);
    HAND(&s, 0.5, 2, 1.1e-3);   /* 1e-4 + 1e-3 * ln 2 / ln 2 */
}

static void test_warmup_decay_lr(void)
{
    zcfg_sched s = ds_defaults(ZSCHED_WARMUP_DECAY_LR);
    s.total_num_steps = 5000;
    sweep("WarmupDecayLR defaults (log)", &s, 0.5, 7000);

    s.warmup_type = ZWARMUP_LINEAR;
    s.warmup_min_lr = 0.0;
    s.warmup_max_lr = 0.01;
    s.warmup_num_steps = 10;
    s.total_num_steps = 110;
    sweep("WarmupDecayLR linear", &s, 0.5, 400);
    HAND(&s, 0.5, 0, 0.0);
    HAND(&s, 0.5, 1, 0.0);
    HAND(&s, 0.5, 10, 0.009);   /* position 9: 0.01 * 9/10 */
    HAND(&s, 0.5, 11, 0.01);    /* position 10: (110 - 10) / (110 - 10) = 1 */
    HAND(&s, 0.5, 61, 0.005);   /* position 60: (110 - 60) / 100 = 0.5 */
    HAND(&s, 0.5, 110, 0.0001); /* position 109: 1/100 */
    HAND(&s, 0.5, 111, 0.0);    /* position 110: 0 -> warmup_min_lr */
    HAND(&s, 0.5, 300, 0.0);    /* clamped at 0, never negative */

    /* total < warmup (DeepSpeed only warns): the decay span is floored at 1. */
    s.warmup_min_lr = 0.001;
    s.total_num_steps = 5;
    sweep("WarmupDecayLR total<warmup", &s, 0.5, 40);
    HAND(&s, 0.5, 11, 0.001);   /* position 10: max(0, (5 - 10) / 1) = 0 -> min */
}

static void test_warmup_cosine_lr(void)
{
    zcfg_sched s = ds_defaults(ZSCHED_WARMUP_COSINE_LR);
    s.total_num_steps = 3000;
    sweep("WarmupCosineLR defaults (log)", &s, 3e-4, 5000);
    HAND(&s, 3e-4, 0, 0.0);     /* constructor: get_lr() before start is 0.0 */
    HAND(&s, 3e-4, 1, 0.0);     /* warmup_min_ratio 0 + log(1) = 0 */

    s.warmup_type = ZWARMUP_LINEAR;
    s.warmup_num_steps = 10;
    s.total_num_steps = 110;
    s.warmup_min_ratio = 0.1;
    s.cos_min_ratio = 0.01;
    sweep("WarmupCosineLR linear", &s, 0.1, 400);
    HAND(&s, 0.1, 0, 0.0);
    HAND(&s, 0.1, 1, 0.01);     /* 0.1 * (0.1 + 0.9 * 0/10) */
    HAND(&s, 0.1, 6, 0.055);    /* 0.1 * (0.1 + 0.9 * 5/10) = 0.1 * 0.55 */
    HAND(&s, 0.1, 10, 0.091);   /* 0.1 * (0.1 + 0.9 * 9/10) = 0.1 * 0.91 */
    /* position 10: progress (10 - 10 + 1)/100 = 0.01; cos(0.01 pi) = 0.999506560366;
     * (1 + that)/2 = 0.999753280183; 0.01 + 0.99 * 0.999753280183 = 0.999755747381 */
    HAND(&s, 0.1, 11, 0.0999755747381);
    HAND(&s, 0.1, 60, 0.0505);  /* progress 50/100: (1 + cos(pi/2))/2 = 0.5; 0.01 + 0.495 */
    /* position 108: progress 0.99; cos(0.99 pi) = -0.999506560366; (1 - 0.999506560366)/2 =
     * 0.000246719817; 0.01 + 0.99 * 0.000246719817 = 0.010244252619 */
    HAND(&s, 0.1, 109, 0.0010244252619);
    HAND(&s, 0.1, 110, 0.001);  /* progress 1: ratio = cos_min_ratio */
    HAND(&s, 0.1, 111, 0.001);  /* clamped: stays at the floor */
    HAND(&s, 0.1, 1000, 0.001);

    /* total == warmup: no decay window, every post-warmup update at the floor. */
    s.total_num_steps = 10;
    sweep("WarmupCosineLR total==warmup", &s, 0.1, 40);
    HAND(&s, 0.1, 11, 0.001);
}

static void test_one_cycle(void)
{
    zcfg_sched s = ds_defaults(ZSCHED_ONE_CYCLE);
    sweep("OneCycle defaults", &s, 0.5, 6000);

    /* Symmetric cycle 0.001 -> 0.01 -> 0.001 over 4 + 4 updates, then decay. */
    s.cycle_min_lr = 0.001;
    s.cycle_max_lr = 0.01;
    s.cycle_first_step_size = 4;
    s.decay_lr_rate = 0.5;
    s.decay_step_size = 2;
    s.decay_mom_rate = 0.1;
    sweep("OneCycle small+decay", &s, 0.5, 60);
    HAND(&s, 0.5, 0, 0.001);    /* constructor: cycle_min_lr */
    HAND(&s, 0.5, 1, 0.00325);  /* 0.001 + 0.009 * 1/4 */
    HAND(&s, 0.5, 4, 0.01);     /* peak */
    HAND(&s, 0.5, 6, 0.0055);   /* 0.001 + 0.009 * (8 - 6)/4 */
    HAND(&s, 0.5, 8, 0.001);    /* end of the cycle */
    HAND(&s, 0.5, 9, 0.0008);   /* decay 1 update: 0.001 / (1 + 0.5 * 1/2) */
    HAND(&s, 0.5, 12, 0.0005);  /* decay 4 updates: 0.001 / (1 + 0.5 * 4/2) */
    /* beta1: constructor value cycle_min_mom, then mirrored to lr, then DeepSpeed's growing decay */
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 0), 0.8L, HTOL), "beta1 step 0");
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 1), 0.875L, HTOL), "beta1 step 1: 0.9 - 0.1/4");
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 4), 0.8L, HTOL), "beta1 step 4 (lr peak)");
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 6), 0.85L, HTOL), "beta1 step 6");
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 8), 0.9L, HTOL), "beta1 step 8");
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 12), 1.08L, HTOL), "beta1 step 12: 0.9*(1+0.1*2)");
    ZT_CHECK(zsched_beta2(&s, 0.999, 5) == 0.99, "OneCycle with momentum forces beta2 = 0.99");

    /* No decay when decay_lr_rate is 0 or decay_step_size is 0. */
    s.decay_lr_rate = 0.0;
    sweep("OneCycle no lr decay", &s, 0.5, 40);
    HAND(&s, 0.5, 30, 0.001);
    s.decay_lr_rate = 0.5;
    s.decay_step_size = 0;
    sweep("OneCycle decay_step_size 0", &s, 0.5, 40);
    HAND(&s, 0.5, 30, 0.001);
    ZT_CHECK(close_to(zsched_beta1(&s, 0.95, 30), 0.9L, HTOL), "beta1 rests at cycle_max_mom");

    /* Asymmetric staircase: up 10 updates in 4 stairs, down 6 in 2, lr 0 -> 1. */
    s = ds_defaults(ZSCHED_ONE_CYCLE);
    s.cycle_min_lr = 0.0;
    s.cycle_max_lr = 1.0;
    s.cycle_first_step_size = 10;
    s.cycle_second_step_size = 6;
    s.cycle_first_stair_count = 4;
    s.cycle_second_stair_count = 2;
    sweep("OneCycle staircase", &s, 0.5, 40);
    HAND(&s, 0.5, 2, 0.0);      /* floor(2 * 4/10) / 4 = floor(0.8)/4 */
    HAND(&s, 0.5, 3, 0.25);     /* floor(1.2)/4 */
    HAND(&s, 0.5, 5, 0.5);      /* floor(2.0)/4 */
    HAND(&s, 0.5, 10, 1.0);     /* floor(4)/4: the peak is reached */
    HAND(&s, 0.5, 12, 0.5);     /* down: floor((16 - 12) * 2/6)/2 = floor(1.33)/2 */
    HAND(&s, 0.5, 13, 0.5);     /* floor(3 * 2/6)/2 = floor(1)/2 */
    HAND(&s, 0.5, 14, 0.0);     /* floor(0.67)/2 */
    HAND(&s, 0.5, 16, 0.0);
    /* Second stair count None (null, left out) means "same as the first" ... */
    s.cycle_second_stair_count = ZCFG_NONE;
    sweep("OneCycle staircase second=None", &s, 0.5, 40);
    HAND(&s, 0.5, 12, 0.5);     /* floor(4 * 4/6)/4 = floor(2.67)/4 */
    /* ... and -1 is a count: at or below 0 the half is continuous, as in DeepSpeed (zinc took
     * -1 for "same as the first" until 2026-11-29) */
    s.cycle_second_stair_count = -1;
    sweep("OneCycle staircase second=-1", &s, 0.5, 40);
    HAND(&s, 0.5, 12, 4.0 / 6.0);   /* (16 - 12) / 6, no stairs */
    s.cycle_first_stair_count = -3;
    HAND(&s, 0.5, 3, 0.3);          /* 3 / 10, no stairs */
    s.cycle_first_stair_count = 4;
    /* A second half of 0 updates: the cycle only rises, and starts again at its floor (DeepSpeed
     * allows it; zinc refused it) */
    s.cycle_second_step_size = 0;
    s.cycle_second_stair_count = ZCFG_NONE;
    sweep("OneCycle no second half", &s, 0.5, 40);
    HAND(&s, 0.5, 5, 0.5);      /* floor(5 * 4/10)/4 */
    HAND(&s, 0.5, 9, 0.75);     /* floor(3.6)/4 */
    s.cycle_second_step_size = 6;

    /* cycle_momentum off: betas untouched. */
    s.cycle_momentum = 0;
    ZT_CHECK(zsched_beta1(&s, 0.93, 3) == 0.93 && zsched_beta2(&s, 0.98, 3) == 0.98,
             "OneCycle without cycle_momentum leaves the betas");
}

static void test_range_test(void)
{
    zcfg_sched s = ds_defaults(ZSCHED_LR_RANGE_TEST);
    sweep("LRRangeTest defaults", &s, 0.5, 7000);
    s.lr_range_test_min_lr = 0.001;
    s.lr_range_test_step_size = 10;
    s.lr_range_test_step_rate = 2.0;
    sweep("LRRangeTest continuous", &s, 0.5, 100);
    HAND(&s, 0.5, 0, 0.001);    /* constructor: min_lr */
    HAND(&s, 0.5, 1, 0.0012);   /* 0.001 * (1 + 2 * 1/10) */
    HAND(&s, 0.5, 10, 0.003);   /* 0.001 * (1 + 2 * 10/10) */
    HAND(&s, 0.5, 25, 0.006);   /* 0.001 * (1 + 2 * 2.5) */
    s.lr_range_test_staircase = 1;
    sweep("LRRangeTest staircase", &s, 0.5, 100);
    HAND(&s, 0.5, 9, 0.001);    /* floor(0.9) = 0 */
    HAND(&s, 0.5, 10, 0.003);   /* floor(1.0) = 1 */
    HAND(&s, 0.5, 25, 0.005);   /* floor(2.5) = 2 */
}

static void test_none_and_others(void)
{
    zcfg_sched s = ds_defaults(ZSCHED_NONE);
    ZT_CHECK(zsched_lr(&s, 0.0123, 0) == 0.0123 && zsched_lr(&s, 0.0123, 99999) == 0.0123,
             "no scheduler: constant optimizer lr");
    ZT_CHECK(zsched_beta1(&s, 0.9, 7) == 0.9 && zsched_beta2(&s, 0.999, 7) == 0.999,
             "no scheduler: betas untouched");
    s = ds_defaults(ZSCHED_WARMUP_LR);
    ZT_CHECK(zsched_lr(&s, 0.5, -3) == zsched_lr(&s, 0.5, 0), "negative step reads as 0");
    ZT_CHECK(zsched_beta1(&s, 0.9, 7) == 0.9, "WarmupLR leaves beta1");
}

int main(void)
{
    test_warmup_lr();
    test_warmup_decay_lr();
    test_warmup_cosine_lr();
    test_one_cycle();
    test_range_test();
    test_none_and_others();
    return zt_finish("test_optim_sched");
}
