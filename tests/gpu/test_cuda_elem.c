/*
 * test_cuda_elem.c — runs, on the host, the exact element function the CUDA Adam kernel runs
 * (kernels/cuda/elem_math.h, whose device build uses explicitly rounded intrinsics) against the
 * CPU definition zk_adam_elem (kernels/cpu/elem.h), bit for bit, over random and extreme inputs
 * and every Adam/AdamW variant. It needs no GPU and no CUDA (label `unit`): it is what catches a
 * change of the operation sequence on one side only. Compiled with -ffp-contract=off, so that
 * the host's plain operators are the separately rounded IEEE operations the device performs.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/elem.h"
#include "kernels/cuda/elem_math.h"
#include "testutil.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || bits(a) == bits(b); }

static float pick(zt_rng *r, double scale)
{
    static const float special[] = {0.0f, -0.0f, 1e-45f, -1e-42f, 1e-38f, 3.4e38f, -3.4e38f,
                                    65504.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN};
    uint64_t k = zt_next(r) % 32;
    if (k < sizeof special / sizeof *special) return special[k];
    return (float)(zt_normal(r) * scale * pow(10.0, (double)(zt_next(r) % 9) - 4.0));
}

int main(void)
{
    zt_rng r = {2024};
    long mismatches = 0, cases = 0;
    for (int round = 0; round < 400; round++) {
        zk_adam_args a;
        memset(&a, 0, sizeof a);
        a.lr = (float)(1e-4 + zt_uniform(&r) * 1e-2);
        a.beta1 = (float)(0.8 + 0.19 * zt_uniform(&r));
        a.beta2 = (float)(0.9 + 0.0999 * zt_uniform(&r));
        a.eps = round % 3 == 0 ? 1e-8f : (float)(1e-6 * zt_uniform(&r));
        a.weight_decay = round % 4 == 0 ? 0.0f : (float)(0.1 * zt_uniform(&r));
        a.grad_scale = (float)(1.0 / (1 << (zt_next(&r) % 20)));
        int t = 1 + (int)(zt_next(&r) % 1000);
        a.bias_c1 = round % 5 == 0 ? 1.0f : (float)(1.0 - pow(a.beta1, t));
        a.bias_c2 = round % 5 == 0 ? 1.0f : (float)(1.0 - pow(a.beta2, t));
        a.adamw = round % 2;
        zk_adam_consts k;
        zk_adam_prep(&a, &k);
        zcu_adam_consts kk = {.grad_scale = k.grad_scale, .beta1 = k.beta1, .beta2 = k.beta2,
                              .omb1 = k.omb1, .omb2 = k.omb2, .eps = k.eps, .wd = k.wd,
                              .step_size = k.step_size, .rsqrt_bc2 = k.rsqrt_bc2, .decay = k.decay,
                              .l2 = k.l2, .decoupled = k.decoupled};
        for (int i = 0; i < 2500; i++) {
            float G = pick(&r, 1000.0), p0 = pick(&r, 1.0), m0 = pick(&r, 0.01);
            float v0 = fabsf(pick(&r, 1e-4));
            float p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
            zk_adam_elem(&k, G, &p1, &m1, &v1);
            zcu_adam_elem(&kk, G, &p2, &m2, &v2);
            cases++;
            if (!same(p1, p2) || !same(m1, m2) || !same(v1, v2)) {
                if (mismatches++ < 5)
                    fprintf(stderr, "G=%a p=%a m=%a v=%a adamw=%d wd=%a: cpu (%a %a %a) cuda (%a %a %a)\n",
                            (double)G, (double)p0, (double)m0, (double)v0, a.adamw,
                            (double)a.weight_decay, (double)p1, (double)m1, (double)v1,
                            (double)p2, (double)m2, (double)v2);
            }
        }
    }
    ZT_CHECK(mismatches == 0, "%ld of %ld elements differ between elem_math.h and elem.h", mismatches, cases);
    printf("compared %ld elements\n", cases);
    return zt_finish("cuda_elem");
}
