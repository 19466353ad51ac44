/*
 * sched.c — DeepSpeed's LR schedulers (deepspeed/runtime/lr_schedules.py) as pure functions of
 * the number of applied optimizer updates.
 *
 * DeepSpeed keeps a stateful object: the constructor writes a first lr into the optimizer, and
 * the engine calls step() after every non-overflow update, which sets last_batch_iteration to
 * (updates so far - 1) and writes get_lr() into the optimizer. So the lr used by update k
 * (k applied updates before it) is the constructor's value for k = 0 and get_lr() evaluated at
 * last_batch_iteration = k - 1 otherwise. Each scheduler below is written as its DeepSpeed
 * get_lr(last_batch_iteration) plus its constructor value, in the same floating-point operation
 * order as the Python, so results match DeepSpeed's doubles. docs/optim.md lists the formulas.
 */
#include "optim/optim.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846  /* Python's math.pi, the same double */
#endif

/* DeepSpeed clamps the warmup length to at least 2 (log(1) would divide by zero). */
static double warmup_steps(const zcfg_sched *s)
{
    return (double)(s->warmup_num_steps > 2 ? s->warmup_num_steps : 2);
}

/* WarmupLR._get_gamma's warmup branch at last_batch_iteration `it` (0 <= it < W). */
static double warmup_gamma(const zcfg_sched *s, int64_t it)
{
    double w = warmup_steps(s);
    if (s->warmup_type == ZWARMUP_LINEAR) return (double)it / w;
    double inverse_log_warm_up = 1.0 / log(w);
    return inverse_log_warm_up * log((double)(it + 1));
}

/* WarmupLR / WarmupDecayLR get_lr() at last_batch_iteration `it` >= 0. */
static double warmup_lr(const zcfg_sched *s, int64_t it, int decay)
{
    double w = warmup_steps(s);
    double gamma;
    if ((double)it < w) {
        gamma = warmup_gamma(s, it);
    } else if (!decay) {
        gamma = 1.0;
    } else {
        double total = (double)s->total_num_steps;
        double span = total - w;
        gamma = (total - (double)it) / (span > 1.0 ? span : 1.0);
        if (gamma < 0.0) gamma = 0.0;
    }
    double delta = s->warmup_max_lr - s->warmup_min_lr;
    return s->warmup_min_lr + delta * gamma;
}

/* WarmupCosineLR.get_lr_ratio() at last_batch_iteration `it` >= 0 (the newest DeepSpeed: the
 * cosine progress is clamped to 1 and the span floored at 1, so the ratio rests at
 * cos_min_ratio after total_num_steps instead of oscillating or dividing by zero). */
static double cosine_ratio(const zcfg_sched *s, int64_t it)
{
    double w = warmup_steps(s);
    if ((double)it < w) {
        double ratio = warmup_gamma(s, it);
        double ratio_delta = 1.0 - s->warmup_min_ratio;
        return s->warmup_min_ratio + ratio * ratio_delta;
    }
    double real_last_step = (double)it - w + 1.0;
    double span = (double)s->total_num_steps - w;
    double real_total_steps = span > 1.0 ? span : 1.0;
    double progress = real_last_step / real_total_steps;
    if (progress > 1.0) progress = 1.0;
    double ratio_delta = 1.0 - s->cos_min_ratio;
    double ratio = (1.0 + cos(M_PI * progress)) / 2.0;
    ratio = s->cos_min_ratio + ratio_delta * ratio;
    return ratio > 0.0 ? ratio : 0.0;
}

/* ---- OneCycle ---------------------------------------------------------------------------- */

typedef struct {
    double first, second, total, step_ratio;  /* half-cycle lengths (updates), as doubles */
    int64_t first_stairs, second_stairs;
} cycle_shape;

static cycle_shape one_cycle_shape(const zcfg_sched *s)
{
    cycle_shape c;
    c.first = (double)s->cycle_first_step_size;
    c.second = s->cycle_second_step_size == ZCFG_NONE ? c.first : (double)s->cycle_second_step_size;
    c.total = c.first + c.second;
    c.step_ratio = c.first / c.total;
    c.first_stairs = s->cycle_first_stair_count;
    c.second_stairs = s->cycle_second_stair_count == ZCFG_NONE ? s->cycle_first_stair_count
                                                               : s->cycle_second_stair_count;
    return c;
}

/* OneCycle._get_scale_factor with batch_iteration = last_batch_iteration + 1 = `bi`: 0 at the
 * cycle's ends, 1 at the peak. Stairs (count > 0) quantise from the integer offset in the cycle,
 * as DeepSpeed does since its stair counts took effect (PR #8179). */
static double cycle_scale(const cycle_shape *c, int64_t bi)
{
    double b = (double)bi;
    double cycle = floor(1.0 + b / c->total);
    double x = 1.0 + b / c->total - cycle;
    double scale;
    int64_t stairs;
    if (x <= c->step_ratio) {
        scale = x / c->step_ratio;
        stairs = c->first_stairs;
    } else {
        scale = (x - 1.0) / (c->step_ratio - 1.0);
        stairs = c->second_stairs;
    }
    if (stairs > 0) {
        double ci = fmod(b, c->total);
        double pos;
        if (ci <= c->first)
            pos = ci * (double)stairs / c->first;
        else
            pos = (c->total - ci) * (double)stairs / c->second;
        scale = floor(pos) / (double)stairs;
    }
    return scale;
}

/* OneCycle.get_lr() at last_batch_iteration `it` >= 0. */
static double one_cycle_lr(const zcfg_sched *s, int64_t it)
{
    cycle_shape c = one_cycle_shape(s);
    if ((double)it < c.total) {
        double height = (s->cycle_max_lr - s->cycle_min_lr) * cycle_scale(&c, it + 1);
        return s->cycle_min_lr + height;
    }
    /* Decay phase: DeepSpeed skips it when decay_step_size or decay_lr_rate is 0. */
    if (s->decay_step_size == 0 || s->decay_lr_rate == 0.0) return s->cycle_min_lr;
    double decay_iteration = (double)it - c.total + 1.0;
    double interval = decay_iteration / (double)s->decay_step_size;
    return s->cycle_min_lr / (1.0 + s->decay_lr_rate * interval);
}

/* OneCycle.get_mom()[0] at last_batch_iteration `it` >= -1. */
static double one_cycle_mom(const zcfg_sched *s, int64_t it)
{
    cycle_shape c = one_cycle_shape(s);
    if ((double)it < c.total) {
        double height = (s->cycle_max_mom - s->cycle_min_mom) * cycle_scale(&c, it + 1);
        return s->cycle_max_mom - height;
    }
    if (s->decay_step_size == 0 || s->decay_mom_rate == 0.0) return s->cycle_max_mom;
    double decay_iteration = (double)it - c.total + 1.0;
    double interval = decay_iteration / (double)s->decay_step_size;
    /* Multiplies, as merged DeepSpeed does (an open PR, #8589, proposes dividing). */
    return s->cycle_max_mom * (1.0 + s->decay_mom_rate * interval);
}

/* LRRangeTest.get_lr() at last_batch_iteration `it` >= -1 (its constructor value is the same
 * expression at -1: min_lr). */
static double range_test_lr(const zcfg_sched *s, int64_t it)
{
    double step_size = (double)s->lr_range_test_step_size;
    double interval = (double)(it + 1) / step_size;
    if (s->lr_range_test_staircase) interval = floor(interval);
    double increase = 1.0 + s->lr_range_test_step_rate * interval;
    return s->lr_range_test_min_lr * increase;
}

double zsched_lr(const zcfg_sched *s, double base_lr, int64_t step)
{
    if (step < 0) step = 0;
    int64_t it = step - 1;  /* DeepSpeed's last_batch_iteration when update `step` runs */
    switch (s->type) {
    case ZSCHED_WARMUP_LR:
        return it < 0 ? s->warmup_min_lr : warmup_lr(s, it, 0);
    case ZSCHED_WARMUP_DECAY_LR:
        return it < 0 ? s->warmup_min_lr : warmup_lr(s, it, 1);
    case ZSCHED_WARMUP_COSINE_LR:
        /* The constructor writes get_lr() at iteration -1, which DeepSpeed defines as 0.0. */
        return it < 0 ? 0.0 : base_lr * cosine_ratio(s, it);
    case ZSCHED_ONE_CYCLE:
        return it < 0 ? s->cycle_min_lr : one_cycle_lr(s, it);
    case ZSCHED_LR_RANGE_TEST:
        return range_test_lr(s, it);
    case ZSCHED_NONE:
    default:
        return base_lr;
    }
}

int zsched_sets_betas(const zcfg_sched *s)
{
    return s->type == ZSCHED_ONE_CYCLE && s->cycle_momentum;
}

double zsched_get_mom(const zcfg_sched *s, double beta1, int64_t it)
{
    if (!zsched_sets_betas(s)) return beta1;
    return one_cycle_mom(s, it < -1 ? -1 : it);
}

double zsched_beta1(const zcfg_sched *s, double beta1, int64_t step)
{
    if (!zsched_sets_betas(s)) return beta1;
    if (step < 1) return s->cycle_min_mom;  /* the constructor's betas[0] */
    return zsched_get_mom(s, beta1, step - 1);
}

double zsched_beta2(const zcfg_sched *s, double beta2, int64_t step)
{
    (void)step;
    if (!zsched_sets_betas(s)) return beta2;
    return 0.99;  /* DeepSpeed's min_moms/max_moms carry a fixed second beta of 0.99 */
}
