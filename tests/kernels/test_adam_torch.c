/*
 * test_adam_torch.c — 20 steps of the fused kernel against an independent double-precision
 * scalar reference written from PyTorch's documented algorithms:
 *
 *   torch.optim.Adam (weight_decay = L2 added to the gradient):
 *       g = grad + wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *       mhat = m / (1-b1^t);  vhat = v / (1-b2^t);  p = p - lr * mhat / (sqrt(vhat) + eps)
 *   torch.optim.AdamW (decoupled): p = p - lr * wd * p first, then the same without the L2 term.
 *   Without bias correction (DeepSpeed's bias_correction=false): mhat = m, vhat = v.
 *
 * Tolerance. The kernel works in fp32 (unit roundoff u = 2^-24), the reference in double. Beside
 * each element the reference carries a first-order bound on the fp32 error, grown step by step
 * from the roundings the kernel makes (elem.h: 1 in g = G*scale, 1 more for the L2 fma; 2 for m,
 * 3 for v, 1 for sqrt, ~3.5 for 1/sqrt(bias_c2) rounded from a float bias_c2, 1 for + eps, 1 for
 * the division, 2 for lr/bias_c1, 1 for the final fma, 2 for AdamW's decay) and from the errors
 * of m, v and p carried over from earlier steps (see bound_step below). The check is
 * |fp32 - double| <= 2 * bound for p, m and v; the factor 2 covers the second-order terms the
 * first-order bound leaves out. A relative tolerance alone would be wrong here: m cancels when
 * the gradient changes sign, and p's error is set by the size of the updates, not by p.
 *
 * To show the bound is tight enough to mean something, three wrong variants of the reference
 * (no bias correction, L2 and decoupled decay swapped, eps added before the bias correction of v)
 * must each fall outside it for some element.
 */
#include <stdlib.h>

#include "kt.h"

#define N 2048
#define STEPS 20
static const double U = 0x1p-24;

typedef enum { REF_OK, REF_NO_BIAS, REF_SWAP_DECAY, REF_EPS_INSIDE } refmode;

typedef struct {
    const char *name;
    int adamw, bias;
    float lr, wd, grad_scale;
} cfg;

static const cfg cfgs[] = {
    {"adam, bias correction, L2 0.1", 0, 1, 1e-3f, 0.1f, 1.0f},
    {"adamw, bias correction, decay 0.1", 1, 1, 1e-3f, 0.1f, 1.0f},
    {"adam, no bias correction, L2 0.1", 0, 0, 1e-3f, 0.1f, 1.0f / 1024.0f},
    {"adamw, no bias correction, decay 0.1", 1, 0, 1e-2f, 0.1f, 1.0f / 1024.0f},
    {"adam, bias correction, no decay", 0, 1, 1e-2f, 0.0f, 1.0f / 256.0f},
    {"adamw, bias correction, no decay", 1, 1, 1e-3f, 0.0f, 1.0f},
};

typedef struct {
    double p, m, v;             /* the exact (double) state */
    double ep, em, ev;          /* first-order bounds on the fp32 kernel's error in each */
} ref_elem;

/* One PyTorch step in double, and the growth of the error bounds of the fp32 kernel. */
static void ref_step(ref_elem *e, double G, const cfg *c, double b1, double b2, double eps,
                     int t, refmode mode)
{
    double lr = c->lr, wd = c->wd, s = c->grad_scale;
    int adamw = c->adamw;
    if (mode == REF_SWAP_DECAY) adamw = !adamw;
    int bias = c->bias && mode != REF_NO_BIAS;
    double p0 = e->p, g = G * s;
    double gabs = fabs(g), eg = U * gabs;
    if (!adamw && wd != 0) {
        g += wd * p0;
        gabs += wd * fabs(p0);
        eg = 2 * U * gabs + wd * e->ep;
    }
    double p = p0, ep = e->ep;
    if (adamw && wd != 0) {
        p = p0 - lr * wd * p0;
        ep = ep + 2 * U * fabs(p0);   /* the product and the rounding of decay = 1 - lr*wd */
    }
    double m = b1 * e->m + (1 - b1) * g;
    double v = b2 * e->v + (1 - b2) * g * g;
    double mabs = b1 * fabs(e->m) + (1 - b1) * gabs;
    double vabs = b2 * e->v + (1 - b2) * gabs * gabs;
    double em = b1 * e->em + (1 - b1) * eg + 2 * U * mabs;
    double ev = b2 * e->ev + (1 - b2) * 2 * gabs * eg + 3 * U * vabs;
    double bc1 = bias ? 1 - pow(b1, t) : 1, bc2 = bias ? 1 - pow(b2, t) : 1;
    double sv = sqrt(v);
    double shat = sv / sqrt(bc2);
    double d = mode == REF_EPS_INSIDE ? (sv + eps) / sqrt(bc2) : shat + eps;
    double q = m / d;
    double upd = lr / bc1 * q;
    p = p - upd;
    /* error of sqrt(v): from v's error (the smaller of the two first-order forms), then the
     * roundings of sqrtf, of 1/sqrtf(bias_c2) and of the fma with eps */
    double dsv = sv > 0 ? fmin(ev / (2 * sv), sqrt(ev)) : sqrt(ev);
    double ed = dsv / sqrt(bc2) + 4.5 * U * shat + U * d;
    double eq = (em + fabs(q) * ed) / d + U * fabs(q);
    double eu = lr / bc1 * eq + 2 * U * fabs(upd);
    e->ep = ep + eu + U * fabs(p);
    e->p = p;
    e->m = m;
    e->v = v;
    e->em = em;
    e->ev = ev;
}

int main(void)
{
    zdev_t *d = NULL;
    ZT_OK(zk_cpu_open_isa(3, NULL, &d));
    if (!d) return zt_finish("test_adam_torch");
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float *master = malloc(N * 4), *m = malloc(N * 4), *v = malloc(N * 4), *grad = malloc(N * 4);
    float *rmaster = malloc(N * 4), *rm = malloc(N * 4), *rv = malloc(N * 4);
    ref_elem *ref = calloc(N, sizeof *ref), *wrong[4];
    for (int k = 0; k < 4; k++) wrong[k] = calloc(N, sizeof **wrong);

    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const cfg *c = &cfgs[ci];
        zt_rng r = {1000 + ci};
        for (int i = 0; i < N; i++) {
            master[i] = rmaster[i] = (float)zt_normal(&r);
            m[i] = v[i] = rm[i] = rv[i] = 0.0f;
            memset(&ref[i], 0, sizeof ref[i]);
            ref[i].p = master[i];
            for (int k = 0; k < 4; k++) wrong[k][i] = ref[i];
        }
        for (int t = 1; t <= STEPS; t++) {
            /* Gradient sizes from 1e-9 (sqrt(v) below eps) to 1 across the elements; the
             * kernel receives them loss-scaled by 1/grad_scale, as an engine would. */
            for (int i = 0; i < N; i++) {
                double mag = pow(10.0, -9.0 + 9.0 * i / (N - 1));
                grad[i] = (float)(mag * zt_normal(&r) / c->grad_scale);
            }
            zk_adam_args a = {
                .master = master, .m = m, .v = v, .grad = grad, .grad_dtype = ZINC_DTYPE_FP32,
                .param_out = NULL, .param_dtype = ZINC_DTYPE_FP32, .n = N, .lr = c->lr,
                .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = c->wd,
                .grad_scale = c->grad_scale, .adamw = c->adamw,
                .bias_c1 = c->bias ? (float)(1.0 - pow(b1, t)) : 1.0f,
                .bias_c2 = c->bias ? (float)(1.0 - pow(b2, t)) : 1.0f,
            };
            ZT_OK(d->iface->adam_step(d, &a));
            a.master = rmaster, a.m = rm, a.v = rv;
            zk_ref_adam_step(&a);
            for (int i = 0; i < N; i++) {
                ref_step(&ref[i], grad[i], c, b1, b2, eps, t, REF_OK);
                for (int k = 1; k < 4; k++) ref_step(&wrong[k][i], grad[i], c, b1, b2, eps, t, (refmode)k);
            }
        }
        int bad = 0, worst = 0;
        double worst_ratio = 0;
        for (int i = 0; i < N; i++) {
            double rp = fabs(master[i] - ref[i].p) / (2 * ref[i].ep);
            double rmm = fabs(m[i] - ref[i].m) / (2 * ref[i].em + 1e-300);
            double rvv = fabs(v[i] - ref[i].v) / (2 * ref[i].ev + 1e-300);
            double rr = fmax(rp, fmax(rmm, rvv));
            if (rr > worst_ratio) worst_ratio = rr, worst = i;
            if (rr > 1) bad++;
            if (master[i] != rmaster[i] || m[i] != rm[i] || v[i] != rv[i]) bad++;
        }
        ZT_CHECK(bad == 0, "%s: %d elements outside 2x the error bound (worst element %d: p %.9g "
                 "vs %.12g, bound %.3g)", c->name, bad, worst, (double)master[worst],
                 ref[worst].p, 2 * ref[worst].ep);
        printf("%s: worst |fp32 - double| / (2 x bound) = %.3f (element %d)\n", c->name,
               worst_ratio, worst);
        /* Each wrong variant that differs in this configuration must be caught. */
        for (int k = 1; k < 4; k++) {
            if (k == REF_NO_BIAS && !c->bias) continue;
            if (k == REF_EPS_INSIDE && !c->bias) continue;
            if (k == REF_SWAP_DECAY && c->wd == 0) continue;
            int caught = 0;
            for (int i = 0; i < N && !caught; i++)
                caught = fabs(master[i] - wrong[k][i].p) > 2 * ref[i].ep;
            ZT_CHECK(caught, "%s: wrong variant %d is within the bound: the test is too loose",
                     c->name, k);
        }
    }
    for (int k = 0; k < 4; k++) free(wrong[k]);
    free(master), free(m), free(v), free(grad), free(rmaster), free(rm), free(rv), free(ref);
    zdev_close(d);
    return zt_finish("test_adam_torch");
}
