/*
 * test_model_grad.c — the built-in model's backward pass against finite differences.
 *
 * Tiny model L2-D8-H2-T6, 2 sequences, every parameter (LayerNorm weights and biases included)
 * set to random values so no symmetry hides a wrong term. Three checks, from strict to loose:
 *
 *  1. double instance (grad_double.c, the same source built with double): every element's
 *     analytic gradient against central differences with h = 1e-5. Truncation is
 *     h^2 |f'''| / 6 ~ 1e-11 and rounding ~ 1e-16 * |L| / h ~ 1e-10, so the bound
 *     |g - fd| <= 1e-6 |fd| + 1e-8 leaves two orders of margin and still rejects a 0.01 %
 *     error of any gradient larger than 1e-4 (check 1b shows it catches a 1 % error).
 *  2. fp32 build's analytic gradients against the double ones: |g32 - g64| <= 1e-4 * max|g64|
 *     of the tensor. fp32 rounding in the forward and backward chains is ~1e-6 relative.
 *  3. fp32 build against fp32 central differences with h = 1e-2 on a sample of every tensor,
 *     the check one can run without the double build: the bound is the truncation error,
 *     measured exactly on the double instance with the same h (|fd64(h) - g64|, times 1.5),
 *     plus the rounding of two fp32 loss evaluations, 2 * 4 ulp(L) / (2h).
 *
 * Also: results do not depend on the thread count (bitwise), activation checkpointing changes
 * no bit of them, and the fp16/bf16 conversions of models/half.h against brute force.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_double.h"
#include "models/gpt.h"
#include "models/half.h"
#include "testutil.h"

#define SPEC "L2-D8-H2-T6"
#define B 2

static zm_spec S;
static int NG;
static float *P32[16], *G32[16];
static double *P64[16], *G64[16];
static uint16_t tok[B * 64], tgt[B * 64];

static double loss32(zm_acts *a) { return zm_forward_backward(a, P32, NULL, tok, tgt, 1.0f); }

static void check_double(void *ad)
{
    int bad = 0;
    double worst = 0.0;
    for (int g = 0; g < NG; g++) {
        int64_t n = zm_group_numel(&S, g);
        for (int64_t i = 0; i < n; i++) {
            double o = P64[g][i], h = 1e-5;
            P64[g][i] = o + h;
            double lp = zmd_loss(ad, P64, NULL, tok, tgt);
            P64[g][i] = o - h;
            double lm = zmd_loss(ad, P64, NULL, tok, tgt);
            P64[g][i] = o;
            double fd = (lp - lm) / (2 * h), an = G64[g][i], err = fabs(an - fd);
            double bound = 1e-6 * fabs(fd) + 1e-8;
            if (err / bound > worst) worst = err / bound;
            if (err > bound && bad++ < 5)
                fprintf(stderr, "double: group %d element %lld: analytic %.10g fd %.10g\n", g,
                        (long long)i, an, fd);
        }
    }
    ZT_CHECK(bad == 0, "%d elements off (worst error/bound %.3g)", bad, worst);
    printf("check 1: double analytic vs finite differences, worst error/bound %.3g\n", worst);

    /* 1b: the same criterion rejects a 1 % error in the largest gradient element. */
    int bg = 0;
    int64_t bi = 0;
    for (int g = 0; g < NG; g++)
        for (int64_t i = 0; i < zm_group_numel(&S, g); i++)
            if (fabs(G64[g][i]) > fabs(G64[bg][bi])) bg = g, bi = i;
    double o = P64[bg][bi], h = 1e-5;
    P64[bg][bi] = o + h;
    double lp = zmd_loss(ad, P64, NULL, tok, tgt);
    P64[bg][bi] = o - h;
    double lm = zmd_loss(ad, P64, NULL, tok, tgt);
    P64[bg][bi] = o;
    double fd = (lp - lm) / (2 * h);
    ZT_CHECK(fabs(1.01 * G64[bg][bi] - fd) > 1e-6 * fabs(fd) + 1e-8,
             "the criterion does not see a 1%% error");
}

static void check_fp32_vs_double(void)
{
    double worst = 0.0;
    for (int g = 0; g < NG; g++) {
        zm_tensor t[ZM_MAX_TENSORS];
        int nt = zm_tensors(&S, g, t);
        for (int k = 0; k < nt; k++) {
            double mx = 0.0, err = 0.0;
            for (int64_t i = 0; i < t[k].numel; i++) {
                double r = G64[g][t[k].offset + i];
                if (fabs(r) > mx) mx = fabs(r);
                double e = fabs((double)G32[g][t[k].offset + i] - r);
                if (e > err) err = e;
            }
            ZT_CHECK(err <= 1e-4 * mx, "%s: fp32 gradient off by %.3g (max |g| %.3g)",
                     t[k].name, err, mx);
            if (mx > 0 && err / mx > worst) worst = err / mx;
        }
    }
    printf("check 2: fp32 vs double analytic gradients, worst error / max|g| %.3g\n", worst);
}

static void check_fp32_fd(zm_acts *a, void *ad)
{
    const float h = 1e-2f;
    double L = loss32(a), ulp = nextafterf((float)L, INFINITY) - (float)L;
    double round = 2 * 4 * ulp / (2 * h);
    int sampled = 0;
    double worst = 0.0;
    for (int g = 0; g < NG; g++) {
        zm_tensor t[ZM_MAX_TENSORS];
        int nt = zm_tensors(&S, g, t);
        for (int k = 0; k < nt; k++) {
            int64_t stride = t[k].numel / 6 + 1;
            for (int64_t j = stride / 2; j < t[k].numel; j += stride) {
                int64_t i = t[k].offset + j;
                float o = P32[g][i];
                /* the steps actually taken in fp32, used for both instances */
                double hp = (double)(o + h) - o, hm = o - (double)(o - h);
                P32[g][i] = o + h;
                double lp = loss32(a);
                P32[g][i] = o - h;
                double lm = loss32(a);
                P32[g][i] = o;
                double fd32 = (lp - lm) / (hp + hm);
                double o64 = P64[g][i];
                P64[g][i] = o64 + hp;
                double dp = zmd_loss(ad, P64, NULL, tok, tgt);
                P64[g][i] = o64 - hm;
                double dm = zmd_loss(ad, P64, NULL, tok, tgt);
                P64[g][i] = o64;
                double trunc = fabs((dp - dm) / (hp + hm) - G64[g][i]);
                double bound = 1.5 * trunc + round, err = fabs((double)G32[g][i] - fd32);
                ZT_CHECK(err <= bound, "%s[%lld]: fp32 analytic %.6g, fd %.6g, bound %.3g",
                         t[k].name, (long long)j, G32[g][i], fd32, bound);
                if (err / bound > worst) worst = err / bound;
                sampled++;
            }
        }
    }
    printf("check 3: fp32 vs fp32 finite differences (h=1e-2) on %d samples, worst "
           "error/bound %.3g (rounding part %.3g)\n", sampled, worst, round);
}

static void check_threads(void)
{
    zm_acts *a1, *a3;
    ZT_OK(zm_acts_create(&S, B, 1, 0, &a1));
    ZT_OK(zm_acts_create(&S, B, 3, 0, &a3));
    float *g1[16], *g3[16];
    int same = 1;
    for (int g = 0; g < NG; g++) {
        g1[g] = calloc((size_t)zm_group_numel(&S, g), sizeof(float));
        g3[g] = calloc((size_t)zm_group_numel(&S, g), sizeof(float));
    }
    double l1 = zm_forward_backward(a1, P32, g1, tok, tgt, 1.0f);
    double l3 = zm_forward_backward(a3, P32, g3, tok, tgt, 1.0f);
    for (int g = 0; g < NG; g++) {
        same &= !memcmp(g1[g], g3[g], (size_t)zm_group_numel(&S, g) * sizeof(float));
        free(g1[g]);
        free(g3[g]);
    }
    ZT_CHECK(l1 == l3 && same, "1 thread and 3 threads differ (loss %.9g vs %.9g)", l1, l3);
    zm_acts_destroy(a1);
    zm_acts_destroy(a3);
}

/* Activation checkpointing (zm_acts_create's checkpoint): the loss and every gradient bit for bit
 * as without, and the activations smaller by the L-1 sets of a layer's activations but x. */
static void check_checkpointing(void)
{
    zm_acts *plain, *ck;
    ZT_OK(zm_acts_create(&S, B, 2, 0, &plain));
    ZT_OK(zm_acts_create(&S, B, 2, 1, &ck));
    float *gp[16], *gc[16];
    for (int g = 0; g < NG; g++) {
        gp[g] = calloc((size_t)zm_group_numel(&S, g), sizeof(float));
        gc[g] = calloc((size_t)zm_group_numel(&S, g), sizeof(float));
    }
    double lp = zm_forward_backward(plain, P32, gp, tok, tgt, 1.0f);
    double lc = zm_forward_backward(ck, P32, gc, tok, tgt, 1.0f);
    int differ = 0;
    for (int g = 0; g < NG; g++) {
        differ += memcmp(gp[g], gc[g], (size_t)zm_group_numel(&S, g) * sizeof(float)) != 0;
        free(gp[g]);
        free(gc[g]);
    }
    ZT_CHECK(lp == lc && differ == 0, "checkpointing: loss %.9g vs %.9g, %d groups' gradients "
             "differ (want bit for bit)", lc, lp, differ);
    /* A block's activations but x, as docs/train.md lists them: per row ln1, ln2, the attention
     * output and the mid residual (D each), q/k/v (3D), the MLP before and after GELU (4D each)
     * and four LayerNorm statistics; and the T x T probabilities of each (sequence, head). */
    size_t BT = (size_t)B * S.T, D = (size_t)S.D;
    size_t inner = BT * (15 * D + 4) + (size_t)B * S.H * S.T * S.T;
    size_t saved = zm_acts_bytes(plain) - zm_acts_bytes(ck);
    ZT_CHECK(saved == (size_t)(S.L - 1) * inner * sizeof(float), "checkpointing saves %zu bytes, "
             "want (L-1) x %zu", saved, inner * sizeof(float));
    printf("checkpointing: loss and gradients bit for bit, activations %zu -> %zu bytes\n",
           zm_acts_bytes(plain), zm_acts_bytes(ck));
    zm_acts_destroy(plain);
    zm_acts_destroy(ck);
}

/* Brute force: the representable 16-bit value nearest to f (ties to even mantissa). */
static uint16_t nearest16(float f, float (*dec)(uint16_t))
{
    uint16_t best = 0;
    double bd = INFINITY;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = dec((uint16_t)h);
        if (isnan(v)) continue;
        double d = fabs((double)v - (double)f);
        if (d < bd || (d == bd && (h & 1) == 0 && signbit(v) == signbit(f))) bd = d, best = (uint16_t)h;
    }
    return best;
}

static void check_half(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f16 = zm_f16_to_f32((uint16_t)h), b16 = zm_bf16_to_f32((uint16_t)h);
        if (!isnan(f16) && zm_f32_to_f16(f16) != h) bad++;
        if (!isnan(b16) && zm_f32_to_bf16(b16) != h) bad++;
        if (isnan(f16) != isnan(zm_f16_to_f32(zm_f32_to_f16(f16)))) bad++;
    }
    ZT_CHECK(bad == 0, "%d 16-bit values do not round-trip", bad);
    ZT_CHECK(zm_f16_to_f32(0x3c00) == 1.0f && zm_f16_to_f32(0x7bff) == 65504.0f &&
             zm_f16_to_f32(0x0001) == 0x1p-24f && zm_bf16_to_f32(0x3f80) == 1.0f,
             "decode of known values");
    ZT_CHECK(zm_f32_to_f16(65520.0f) == 0x7c00 && zm_f32_to_f16(65519.0f) == 0x7bff,
             "fp16 overflow threshold");
    zt_rng r = {42};
    int wrong = 0;
    for (int i = 0; i < 300; i++) {
        /* magnitudes across the fp16 range, subnormals included */
        float f = (float)(zt_normal(&r) * ldexp(1.0, (int)(zt_next(&r) % 40) - 26));
        if (fabsf(f) >= 65504.0f) continue;
        if (zm_f32_to_f16(f) != nearest16(f, zm_f16_to_f32)) wrong++;
        if (zm_f32_to_bf16(f) != nearest16(f, zm_bf16_to_f32)) wrong++;
    }
    ZT_CHECK(wrong == 0, "%d conversions are not round-to-nearest", wrong);
}

int main(void)
{
    char err[256];
    ZT_CHECK(zm_spec_parse(SPEC, &S, err, sizeof err) == 0, "%s", err);
    NG = zm_group_count(&S);
    zt_rng r = {7};
    for (int g = 0; g < NG; g++) {
        int64_t n = zm_group_numel(&S, g);
        P32[g] = malloc((size_t)n * sizeof(float));
        G32[g] = calloc((size_t)n, sizeof(float));
        P64[g] = malloc((size_t)n * sizeof(double));
        G64[g] = calloc((size_t)n, sizeof(double));
        zm_init_group(&S, g, 1, P32[g]);
        for (int64_t i = 0; i < n; i++) {
            P32[g][i] += (float)(0.6 * zt_uniform(&r) - 0.3);
            P64[g][i] = P32[g][i];
        }
    }
    for (int i = 0; i < B * S.T; i++) {
        tok[i] = (uint16_t)(zt_next(&r) % 256);
        tgt[i] = (uint16_t)(zt_next(&r) % 256);
    }
    zm_acts *a;
    ZT_OK(zm_acts_create(&S, B, 2, 0, &a));
    void *ad = zmd_acts_new(SPEC, B);
    ZT_CHECK(ad != NULL, "double instance");
    double l32 = zm_forward_backward(a, P32, G32, tok, tgt, 1.0f);
    double l64 = zmd_loss(ad, P64, G64, tok, tgt);
    printf("loss fp32 %.7f double %.7f (ln 256 = %.7f)\n", l32, l64, log(256.0));
    ZT_CHECK(fabs(l32 - l64) < 1e-5 * l64, "fp32 and double losses differ");

    check_double(ad);
    check_fp32_vs_double();
    check_fp32_fd(a, ad);
    check_threads();
    check_checkpointing();
    check_half();

    zm_acts_destroy(a);
    zmd_acts_free(ad);
    for (int g = 0; g < NG; g++) free(P32[g]), free(G32[g]), free(P64[g]), free(G64[g]);
    return zt_finish("test_model_grad");
}
