/*
 * scaler.c — the fp16 loss scaler: DeepSpeed's DynamicLossScaler.update_scale state machine
 * (deepspeed/runtime/fp16/loss_scaler.py) and its static LossScaler.
 *
 * The growth rule is the long-standing one, "(cur_iter - last_overflow_iter) % scale_window == 0"
 * (see docs/optim.md for the DeepSpeed versions that have it and the newer variant). One
 * deliberate difference: at min_scale DeepSpeed raises "Current loss scale already at minimum";
 * zinc keeps the scale at min_scale and lets the engine keep skipping (and warn).
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
    s->cur_scale = ldexp(1.0, c->fp16.initial_scale_power);
    s->min_scale = c->fp16.min_loss_scale;
    /* A window or hysteresis below 1 has no meaning (and a 0 window would divide by zero);
     * config.c rejects them, this only keeps the state machine defined. */
    s->scale_window = c->fp16.loss_scale_window > 0 ? c->fp16.loss_scale_window : 1;
    s->delayed_shift = c->fp16.hysteresis > 0 ? c->fp16.hysteresis : 1;
    s->cur_hysteresis = s->delayed_shift;
    s->consecutive_hysteresis = c->fp16.consecutive_hysteresis != 0;
}

void zscaler_update(zscaler *s, int overflow)
{
    if (!s->dynamic) return;
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            /* Hysteresis spent: back off, never below min_scale. */
            double next = s->cur_scale / s->scale_factor;
            s->cur_scale = next > s->min_scale ? next : s->min_scale;
        } else {
            /* Tolerate this overflow: skip the step but keep the scale. */
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        if ((s->cur_iter - s->last_overflow_iter) % s->scale_window == 0) {
            /* Without consecutive_hysteresis the tolerance refills only when the scale grows. */
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= s->scale_factor;
        }
    }
    s->cur_iter++;
}
