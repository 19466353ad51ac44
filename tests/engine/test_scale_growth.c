/*
 * test_scale_growth.c — the fp16 step on a step where the dynamic loss scale grows, as DeepSpeed
 * 0.19.8 does it: the scale is updated first, and the clip test and the gradient are divided by
 * the new scale (stage_1_and_2.py step -> unscale_and_clip_grads; stage3.py; FP16_Optimizer at
 * stage 0). The reported norm is the old scale's at stages 1-2 and the new one's at stages 0 and 3;
 * the clipped norm is the applied gradient's (the new scale's) at every stage.
 *
 * One rank, one parameter of 4 elements, fp16, initial scale 16, loss_scale_window 1 (so the
 * scale doubles on every clean step from the second on), gradient_clipping 1.0. Each step the
 * gradient view gets scale * g with |g| = 1.5 (exact in fp16). The first step (no growth) clips
 * to norm 1; from the second on the scale grows and DeepSpeed sees norm 1.5 / 2 = 0.75, does not
 * clip, and applies g / 2. Adam's first moment after each step, m = b1 m + (1 - b1) g_applied,
 * tells which gradient was applied: g / 1.5 (unscaled with the scale backward used, the order
 * zinc had) and g / 2 are a third apart. Stages 0-3, and stage 2 and 3 with optimizer offload.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/device.h"
#include "testutil.h"
#include "zinc.h"

#define N 4

static void run(int stage, int offload)
{
    char cfg[1024], label[64];
    snprintf(label, sizeof label, "stage %d%s", stage, offload ? " offload" : "");
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 1.0,"
             " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 4, \"loss_scale_window\": 1},"
             " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.001, \"betas\": [0.5, 0.999]}},"
             " \"zero_optimization\": {\"stage\": %d%s}}",
             stage, offload ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "");
    zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int g, p;
    int64_t shape[1] = {N};
    ZT_OK(zinc_group_add(e, "w", &g));
    ZT_OK(zinc_param_add(e, g, "w.weight", 1, shape, ZINC_DTYPE_FP16, &p));
    ZT_OK(zinc_finalize(e));
    float init[N], grad[N], m[N];
    /* |g| = sqrt(4 * 0.5625) = 1.5: every element +-0.75 (exact in fp16 times any power of 2) */
    for (int i = 0; i < N; i++) {
        init[i] = 0.125f * (float)(i + 1);
        grad[i] = i % 2 ? -0.75f : 0.75f;
    }
    ZT_OK(zinc_param_set(e, p, init));
    double want_m = 0.0;   /* every element's |m| (the signs follow g) */
    double used = 16.0;    /* the scale this step's loss is multiplied by: 2^initial_scale_power */
    const double b1 = 0.5;
    for (int step = 0; step < 4; step++) {
        zinc_step_info_t info = {0};
        ZT_OK(zinc_gather(e, g));
        void *v = NULL;
        ZT_OK(zinc_param_grad(e, p, &v));
        for (int i = 0; i < N && v; i++) zk_store(v, ZINC_DTYPE_FP16, (size_t)i, grad[i] * (float)used);
        ZT_OK(zinc_release(e, g));
        ZT_OK(zinc_grads_ready(e, g));
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(info.applied, "%s step %d was not applied", label, step);
        double next = info.next_loss_scale;
        ZT_CHECK(info.loss_scale == used && next == (step ? 2 * used : used),
                 "%s step %d: scale %g -> %g (used %g)", label, step, info.loss_scale, next, used);
        /* DeepSpeed: divided by the updated scale, clipped on that norm */
        double norm = 1.5 * used / next, coef = norm > 1.0 ? (norm + 1e-6) / 1.0 : 1.0;
        double applied = 0.75 * used / (next * coef);
        want_m = b1 * want_m + (1 - b1) * applied;
        double want_norm = stage == 1 || stage == 2 ? 1.5 : norm;
        ZT_CHECK(fabs(info.grad_norm - want_norm) <= 1e-6 * want_norm,
                 "%s step %d: reported norm %.9g, want %.9g", label, step, info.grad_norm, want_norm);
        /* the applied gradient's norm: the updated scale's, after clipping */
        ZT_CHECK(fabs(info.grad_norm_clipped - norm / coef) <= 1e-6 * norm / coef,
                 "%s step %d: clipped norm %.9g, want %.9g", label, step, info.grad_norm_clipped,
                 norm / coef);
        ZT_OK(zinc_param_state_get(e, p, ZINC_STATE_EXP_AVG, m));
        used = next;
        for (int i = 0; i < N; i++) {
            double got = i % 2 ? -m[i] : m[i];
            if (fabs(got - want_m) > 1e-6 * want_m) {
                ZT_CHECK(0, "%s step %d: exp_avg[%d] = %.9g, want %.9g (the gradient applied on a "
                         "growth step is divided by the new scale)", label, step, i, got, want_m);
                break;
            }
        }
    }
    zinc_engine_destroy(e);
}

int main(void)
{
    for (int stage = 0; stage <= 3; stage++) run(stage, 0);
    run(2, 1);
    run(3, 1);
    return zt_finish("test_scale_growth");
}
