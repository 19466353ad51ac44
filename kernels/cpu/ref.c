/*
 * ref.c — the CPU reference kernels: plain scalar loops, one thread, written straight from the
 * operation sequence of elem.h. They are the definition every fast path is tested against
 * (tests/kernels/), bit for bit.
 */
#include <math.h>

#include "kernels/cpu/elem.h"
#include "kernels/device.h"

void zk_adam_prep(const zk_adam_args *a, zk_adam_consts *c)
{
    c->grad_scale = a->grad_scale;
    c->beta1 = a->beta1;
    c->beta2 = a->beta2;
    c->omb1 = 1.0f - a->beta1;
    c->omb2 = 1.0f - a->beta2;
    c->eps = a->eps;
    c->wd = a->weight_decay;
    c->step_size = a->lr / a->bias_c1;
    c->rsqrt_bc2 = 1.0f / sqrtf(a->bias_c2);
    c->decay = fmaf(-a->lr, a->weight_decay, 1.0f);
    c->l2 = !a->adamw && a->weight_decay != 0.0f;
    c->decoupled = a->adamw && a->weight_decay != 0.0f;
}

void zk_ref_adam_step(const zk_adam_args *a)
{
    zk_adam_consts c;
    zk_adam_prep(a, &c);
    for (size_t i = 0; i < a->n; i++) {
        zk_adam_elem(&c, zk_load(a->grad, a->grad_dtype, i), &a->master[i], &a->m[i], &a->v[i]);
        if (a->param_out) zk_store(a->param_out, a->param_dtype, i, a->master[i]);
    }
}

void zk_ref_grad_stats(const void *g, zinc_dtype dt, size_t n, zk_grad_stats *out)
{
    double total = 0.0;
    for (size_t b0 = 0; b0 < n; b0 += ZK_STATS_BLOCK) {
        size_t b1 = n - b0 < ZK_STATS_BLOCK ? n : b0 + ZK_STATS_BLOCK;
        double lanes[16] = {0};
        zk_stats_lanes(g, dt, b0, b0, b1, lanes);
        total += zk_lanes_sum(lanes);
    }
    out->sumsq = total;
    out->nonfinite = !isfinite(total);
}
