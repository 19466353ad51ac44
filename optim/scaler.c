/*
 * scaler.c — the fp16 loss scaler, as DeepSpeed 0.19.8 runs it (docs/optim.md, section 3):
 *
 * - ZeRO stages 1-3: DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py),
 *   with hysteresis, consecutive_hysteresis and a hard stop when an overflow finds the scale
 *   already at min_scale (DeepSpeed raises "Current loss scale already at minimum").
 * - ZeRO stage 0: DeepSpeed wraps its fused Adam in FP16_Optimizer, whose _update_scale
 *   (deepspeed/runtime/fp16/fused_optimizer.py) has no hysteresis and no stop: every overflow
 *   halves the scale, never below min_scale, and skipping goes on there.
 *
 * Both grow with the rule of DeepSpeed >= 0.17.1 (PR #6976): a clean step doubles the scale when
 * stable = cur_iter - last_overflow_iter - 1 is a positive multiple of scale_window, i.e. after
 * scale_window + 1 clean steps in a row, and never on the first clean step after an overflow.
 * The static scaler (and bf16/fp32's scale of 1) never changes.
 *
 * The iteration counters saturate at INT64_MAX and a saturated counter stops growth, so that no
 * state, however large its counters, makes the arithmetic overflow (issue 12).
 */
#include "optim/optim.h"

#include <math.h>
#include <string.h>

void zscaler_init(zscaler *s, const zcfg *c)
{
    memset(s, 0, sizeof *s);
    s->cur_scale = 1.0;
    s->min_scale = 1.0;
    s->scale_factor = 2.0;
    s->scale_window = 1;
    s->delayed_shift = 1;
    s->cur_hysteresis = 1;
    s->last_overflow_iter = -1;

    int fp16 = c->fp16.enabled || c->dtype == ZINC_DTYPE_FP16;
    if (!fp16) return;  /* bf16/fp32: DeepSpeed still builds a static scaler of 1 */
    if (c->fp16.loss_scale > 0.0) {
        s->cur_scale = c->fp16.loss_scale;
        return;
    }
    s->dynamic = 1;
    s->no_hysteresis = c->zero.stage == 0;
    s->cur_scale = ldexp(1.0, c->fp16.initial_scale_power);
    s->min_scale = (double)c->fp16.min_loss_scale;
    /* A window or hysteresis below 1 has no meaning (and a 0 window would divide by zero);
     * config.c rejects them, this only keeps the state machine defined. */
    s->scale_window = c->fp16.loss_scale_window > 0 ? c->fp16.loss_scale_window : 1;
    s->delayed_shift = c->fp16.hysteresis > 0 ? c->fp16.hysteresis : 1;
    s->cur_hysteresis = s->delayed_shift;
    s->consecutive_hysteresis = c->fp16.consecutive_hysteresis != 0;
}

int zscaler_update(zscaler *s, int overflow)
{
    if (!s->dynamic) return ZSCALER_OK;
    if (overflow) {
        if (s->no_hysteresis) {
            /* FP16_Optimizer: halve at once, clamp at min_scale, never stop. */
            double next = s->cur_scale / s->scale_factor;
            s->cur_scale = next > s->min_scale ? next : s->min_scale;
        } else if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            /* Hysteresis spent. DeepSpeed raises before touching any state when the scale is
             * already at the floor; the caller stops the run with the state as it is. */
            if (s->cur_scale == s->min_scale) return ZSCALER_AT_MIN;
            double next = s->cur_scale / s->scale_factor;
            s->cur_scale = next > s->min_scale ? next : s->min_scale;
        } else {
            /* Tolerate this overflow: skip the step but keep the scale. */
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis && !s->no_hysteresis) s->cur_hysteresis = s->delayed_shift;
        /* Clean steps since the last overflow, not counting this one: growth needs a full window
         * of them before this step (DeepSpeed >= 0.17.1). */
        /* Written (cur_iter - 1) - last_overflow_iter: with -1 <= last_overflow_iter <= cur_iter
         * no term overflows, even at cur_iter = INT64_MAX (cur_iter - (-1) would). A saturated
         * counter (below) no longer measures anything, so it never grows the scale. */
        int64_t stable = (s->cur_iter - 1) - s->last_overflow_iter;
        if (stable > 0 && stable % s->scale_window == 0 && s->cur_iter < INT64_MAX) {
            /* Without consecutive_hysteresis the tolerance refills only when the scale grows. */
            if (!s->consecutive_hysteresis && !s->no_hysteresis)
                s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= s->scale_factor;
        }
    }
    /* Saturates instead of overflowing: 2^63 - 1 steps is out of reach of a run (the engine
     * refuses a step past it), but the arithmetic stays defined whatever state it is given. */
    if (s->cur_iter < INT64_MAX) s->cur_iter++;
    return ZSCALER_OK;
}
