/*
 * optim.h — device-independent optimizer logic: the LR schedulers, the fp16 loss scaler state
 * machine, Adam's per-step scalars and the clip coefficient. Pure functions of small state
 * structs, so the engine, the checkpoint code and the tests share one definition.
 */
#ifndef ZINC_OPTIM_OPTIM_H
#define ZINC_OPTIM_OPTIM_H

#include <stdint.h>

#include "config/config.h"

/* ---- LR schedulers (DeepSpeed's formulas, deepspeed/runtime/lr_schedules.py) ------------- */

/* The learning rate for optimizer step `step` (0-based: the first update uses step 0, as
 * DeepSpeed's scheduler.step() has been called `step` times before it). `base_lr` is
 * optimizer.params.lr, used by ZSCHED_NONE. */
double zsched_lr(const zcfg_sched *s, double base_lr, int64_t step);
/* Precisely: `step` counts APPLIED updates (overflow-skipped steps do not count, as DeepSpeed's
 * engine calls lr_scheduler.step() only after a non-overflow optimizer step), and the value is
 * the lr in effect for the update that follows them. DeepSpeed's constructors set the
 * optimizer's lr without calling step(), so step 0 gets the construction value and step k >= 1
 * gets the schedule evaluated at last_batch_iteration = k - 1. Consequences a reader may not
 * expect, all as in DeepSpeed: WarmupLR/WarmupDecayLR use warmup_min_lr for steps 0 and 1;
 * WarmupCosineLR uses lr 0 for step 0 and base_lr * warmup_min_ratio for step 1; OneCycle and
 * LRRangeTest have no such offset in their formulas (they evaluate at last_batch_iteration + 1).
 * `base_lr` is also WarmupCosineLR's peak (DeepSpeed's org_lrs). Pure; never fails; a negative
 * `step` is treated as 0. docs/optim.md has every formula. */

/* OneCycle with cycle_momentum also drives beta1 (DeepSpeed sets betas[0] from the cycle). Returns
 * the beta1 to use at `step`, or `beta1` unchanged for every other scheduler. */
double zsched_beta1(const zcfg_sched *s, double beta1, int64_t step);
/* Step 0 returns cycle_min_mom (DeepSpeed's constructor value), not the formula's cycle_max_mom.
 * In the decay phase DeepSpeed MULTIPLIES cycle_max_mom by (1 + decay_mom_rate * interval), so
 * beta1 grows and can pass 1 when decay_mom_rate > 0; zinc reproduces that (docs/optim.md). */

/* DeepSpeed's OneCycle.get_mom()[0] at last_batch_iteration `it` (>= -1; below is taken as -1):
 * what its step(it) writes into betas[0]; `beta1` for every other scheduler. At -1 it is the
 * formula's cycle_max_mom, where the constructor writes cycle_min_mom (zsched_beta1 at step 0). */
double zsched_get_mom(const zcfg_sched *s, double beta1, int64_t it);

/* DeepSpeed's OneCycle with cycle_momentum writes betas = (beta1, 0.99) into the optimizer, at
 * construction and at every step: beta2 becomes 0.99 whatever optimizer.params.betas says.
 * Returns 0.99 for OneCycle with cycle_momentum, `beta2` unchanged otherwise. */
double zsched_beta2(const zcfg_sched *s, double beta2, int64_t step);

/* 1 when the schedule sets the betas (OneCycle with cycle_momentum): it then sets every param
 * group's, a group's own betas included, as DeepSpeed's OneCycle writes them into each group. */
int zsched_sets_betas(const zcfg_sched *s);

/* ---- loss scaler (DeepSpeed 0.19.8: DynamicLossScaler, FP16_Optimizer, static scale) -------- */

typedef struct zscaler {
    int dynamic;                 /* 0: static scale, never changes */
    int no_hysteresis;           /* 1 at ZeRO stage 0: DeepSpeed's FP16_Optimizer rule (every
                                    overflow halves, no stop at min_scale); set by zscaler_init
                                    from the config, not stored in checkpoints */
    double cur_scale;
    double min_scale;
    double scale_factor;         /* 2 */
    int64_t scale_window;
    int delayed_shift;           /* hysteresis from config */
    int cur_hysteresis;
    int consecutive_hysteresis;
    int64_t cur_iter;
    int64_t last_overflow_iter;
} zscaler;

/* From the config: fp16 dynamic/static, or scale 1 (static) for bf16/fp32. */
void zscaler_init(zscaler *s, const zcfg *c);
/* fp16 means c->fp16.enabled or c->dtype == ZINC_DTYPE_FP16. Dynamic (fp16.loss_scale == 0):
 * cur_scale = 2^initial_scale_power, window/hysteresis/min from the fp16 section (a window or
 * hysteresis below 1 is taken as 1); no_hysteresis when c->zero.stage == 0. Static
 * (fp16.loss_scale > 0): that value. */

enum { ZSCALER_OK = 0, ZSCALER_AT_MIN = 1 };

/* Called once per optimizer step with that step's overflow flag (DeepSpeed update_scale).
 * @return ZSCALER_OK, or ZSCALER_AT_MIN when the step overflowed with the hysteresis spent and
 *         the scale already at min_scale (stages 1-3 only): DeepSpeed raises there and stops the
 *         run; the scaler is left exactly as it was (no counter moves), as DeepSpeed raises
 *         before changing anything. */
int zscaler_update(zscaler *s, int overflow);
/* Call it after the step has used cur_scale to unscale its gradients: a clean step may double
 * cur_scale for the NEXT step. A static scaler never changes. Growth: after scale_window + 1
 * clean steps in a row (DeepSpeed >= 0.17.1). docs/optim.md has the rules and worked tables. */

/* ---- Adam ------------------------------------------------------------------------------- */

/* Bias corrections for optimizer step t (1-based count of applied updates including this one):
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t; both 1 when bias_correction is off. */
void zadam_bias_corrections(double beta1, double beta2, int bias_correction, int64_t t,
                            float *bc1, float *bc2);

/* The clip coefficient folded into grad_scale, DeepSpeed's fp16 optimizer rule:
 * coef = (norm + 1e-6) / clip when that is > 1, else 1; always 1 when clip <= 0.
 * `norm` is the unscaled global norm. */
double zclip_coef(double norm, double clip);
/* With clip > 0, a non-finite norm (inf or nan) gives +inf, so 1/coef lets no gradient through;
 * the engine must skip such a step as an overflow anyway and never rely on this. A negative or
 * nan clip counts as off. zadam_bias_corrections treats t < 1 as t = 1. */

#endif
