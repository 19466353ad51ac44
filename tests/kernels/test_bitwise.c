/*
 * test_bitwise.c — every instruction set this CPU runs, at 1, 2, 3 and 7 threads, gives the bits
 * of the scalar reference (kernels/cpu/ref.c, elem.h) for adam_step, cast, accumulate and
 * grad_stats, for n in {1, 17, 1000, 100003}, and for a sub-range starting at an odd offset
 * (an element's bits must not depend on its position).
 */
#include <stdlib.h>

#include "kt.h"

#define NDEV_MAX 12
static const int kt_threads[] = {1, 2, 3, 7};
static const size_t kt_sizes[] = {1, 17, 1000, 100003};

typedef struct {
    zdev_t *d;
    char name[32];
} kdev;

static kdev devs[NDEV_MAX];
static int ndevs;

typedef struct {
    int adamw;
    float wd, grad_scale;
    int bias;       /* 0: no bias correction; else the step t */
} variant;

static const variant variants[] = {
    {1, 0.01f, 1.0f, 1},
    {0, 0.01f, 1.0f / 1024.0f, 5},
    {1, 0.0f, 0.37f, 0},
    {0, 0.0f, 1.0f, 3},
    {1, 0.1f, 1.0f / 65536.0f, 0},
};

typedef struct {
    float *master, *m, *v;
    void *grad, *out;
} state;

static void state_alloc(state *s, size_t n)
{
    s->master = malloc(n * 4);
    s->m = malloc(n * 4);
    s->v = malloc(n * 4);
    s->grad = malloc(n * 4);
    s->out = malloc(n * 4);
}

static void state_free(state *s)
{
    free(s->master), free(s->m), free(s->v), free(s->grad), free(s->out);
}

static void state_copy(state *dst, const state *src, size_t n)
{
    memcpy(dst->master, src->master, n * 4);
    memcpy(dst->m, src->m, n * 4);
    memcpy(dst->v, src->v, n * 4);
    memcpy(dst->grad, src->grad, n * 4);
    memset(dst->out, 0xA5, n * 4);
}

static zk_adam_args args_of(const state *s, size_t off, size_t n, zinc_dtype gdt, int out,
                            zinc_dtype pdt, const variant *v)
{
    zk_adam_args a = {0};
    a.master = s->master + off;
    a.m = s->m + off;
    a.v = s->v + off;
    a.grad = (const char *)s->grad + off * kt_dsize(gdt);
    a.grad_dtype = gdt;
    a.param_out = out ? (char *)s->out + off * kt_dsize(pdt) : NULL;
    a.param_dtype = pdt;
    a.n = n;
    a.lr = 1e-3f;
    a.beta1 = 0.9f;
    a.beta2 = 0.999f;
    a.eps = 1e-8f;
    a.weight_decay = v->wd;
    a.grad_scale = v->grad_scale;
    a.adamw = v->adamw;
    a.bias_c1 = v->bias ? (float)(1.0 - pow(0.9, v->bias)) : 1.0f;
    a.bias_c2 = v->bias ? (float)(1.0 - pow(0.999, v->bias)) : 1.0f;
    return a;
}

static int state_diff(const char *what, const state *a, const state *b, size_t off, size_t n,
                      int out, zinc_dtype pdt)
{
    char buf[160];
    int bad = 0;
    snprintf(buf, sizeof buf, "%s master", what);
    bad |= kt_diff(buf, a->master + off, b->master + off, ZINC_DTYPE_FP32, n);
    snprintf(buf, sizeof buf, "%s m", what);
    bad |= kt_diff(buf, a->m + off, b->m + off, ZINC_DTYPE_FP32, n);
    snprintf(buf, sizeof buf, "%s v", what);
    bad |= kt_diff(buf, a->v + off, b->v + off, ZINC_DTYPE_FP32, n);
    if (out) {
        snprintf(buf, sizeof buf, "%s param_out", what);
        bad |= kt_diff(buf, (const char *)a->out + off * kt_dsize(pdt),
                       (const char *)b->out + off * kt_dsize(pdt), pdt, n);
    }
    return bad;
}

static void test_adam(size_t n, zt_rng *r)
{
    state init, ref, got;
    state_alloc(&init, n), state_alloc(&ref, n), state_alloc(&got, n);
    for (int gi = 0; gi < 3; gi++) {
        zinc_dtype gdt = kt_dtypes[gi];
        for (size_t i = 0; i < n; i++) {
            init.master[i] = (float)zt_normal(r);
            init.m[i] = (float)zt_normal(r) * 1e-3f;
            float q = kt_value(r);
            init.v[i] = (i % 7 == 0) ? 0.0f : q * q;
        }
        kt_fill(init.grad, gdt, n, r);
        for (int po = 0; po < 4; po++) {
            int out = po > 0;
            zinc_dtype pdt = out ? kt_dtypes[po - 1] : ZINC_DTYPE_FP32;
            for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
                const variant *v = &variants[vi];
                state_copy(&ref, &init, n);
                zk_adam_args ra = args_of(&ref, 0, n, gdt, out, pdt, v);
                zk_ref_adam_step(&ra);
                for (int di = 0; di < ndevs; di++) {
                    state_copy(&got, &init, n);
                    zk_adam_args ga = args_of(&got, 0, n, gdt, out, pdt, v);
                    ZT_OK(devs[di].d->iface->adam_step(devs[di].d, &ga));
                    char what[128];
                    snprintf(what, sizeof what, "adam %s n=%zu grad=%s out=%s variant=%zu",
                             devs[di].name, n, zinc_dtype_name(gdt),
                             out ? zinc_dtype_name(pdt) : "none", vi);
                    ZT_CHECK(!state_diff(what, &ref, &got, 0, n, out, pdt), "%s", what);
                    /* The same elements updated as part of a sub-range at an odd offset. */
                    if (n > 1000) {
                        size_t off = 5;
                        state_copy(&got, &init, n);
                        zk_adam_args sa = args_of(&got, off, n - off, gdt, out, pdt, v);
                        ZT_OK(devs[di].d->iface->adam_step(devs[di].d, &sa));
                        ZT_CHECK(!state_diff(what, &ref, &got, off, n - off, out, pdt),
                                 "%s (at offset %zu)", what, off);
                    }
                }
            }
        }
    }
    state_free(&init), state_free(&ref), state_free(&got);
}

/* Data for cast/accumulate: kt_value()s plus inf, nan, and values beyond the fp16 range. */
static void fill_wild(void *p, zinc_dtype dt, size_t n, zt_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        float x = kt_value(r);
        switch (zt_next(r) % 64) {
        case 0: x = INFINITY; break;
        case 1: x = -INFINITY; break;
        case 2: x = kt_u2f(0x7fc00000u | (uint32_t)(zt_next(r) & 0x3fffffu)); break;
        case 3: x = 65520.0f * (float)(1 + zt_next(r) % 1000); break;
        case 4: x = kt_u2f((uint32_t)zt_next(r)); break; /* any pattern, subnormal fp32 too */
        default: break;
        }
        zk_store(p, dt, i, x);
    }
}

static void test_cast(size_t n, zt_rng *r)
{
    static const float scales[] = {1.0f, 1.0f / 3.0f, 1024.0f};
    void *src = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    for (int si = 0; si < 3; si++) {
        zinc_dtype sdt = kt_dtypes[si];
        fill_wild(src, sdt, n, r);
        for (int di = 0; di < 3; di++) {
            zinc_dtype ddt = kt_dtypes[di];
            for (int k = 0; k < 3; k++) {
                for (size_t i = 0; i < n; i++) zk_store(ref, ddt, i, zk_load(src, sdt, i) * scales[k]);
                for (int d = 0; d < ndevs; d++) {
                    memset(got, 0x5A, n * 4);
                    ZT_OK(devs[d].d->iface->cast(devs[d].d, got, ddt, src, sdt, n, scales[k]));
                    char what[128];
                    snprintf(what, sizeof what, "cast %s n=%zu %s->%s scale=%g", devs[d].name, n,
                             zinc_dtype_name(sdt), zinc_dtype_name(ddt), (double)scales[k]);
                    ZT_CHECK(!kt_diff(what, ref, got, ddt, n), "%s", what);
                }
            }
        }
    }
    free(src), free(ref), free(got);
}

static void test_accumulate(size_t n, zt_rng *r)
{
    void *acc0 = malloc(n * 4), *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    /* (acc, x): each dtype onto itself, and the widening fp32 += fp16 / bf16 */
    static const zinc_dtype pairs[][2] = {
        {ZINC_DTYPE_FP32, ZINC_DTYPE_FP32}, {ZINC_DTYPE_FP16, ZINC_DTYPE_FP16},
        {ZINC_DTYPE_BF16, ZINC_DTYPE_BF16}, {ZINC_DTYPE_FP32, ZINC_DTYPE_FP16},
        {ZINC_DTYPE_FP32, ZINC_DTYPE_BF16}};
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        zinc_dtype adt = pairs[pi][0], xdt = pairs[pi][1];
        fill_wild(acc0, adt, n, r);
        fill_wild(x, xdt, n, r);
        for (size_t i = 0; i < n; i++)
            zk_store(ref, adt, i, zk_load(acc0, adt, i) + zk_load(x, xdt, i));
        size_t es = kt_dsize(adt);
        for (int d = 0; d < ndevs; d++) {
            memcpy(got, acc0, n * es);
            ZT_OK(devs[d].d->iface->accumulate(devs[d].d, got, adt, x, xdt, n));
            /* Bits must match, except where both inputs are NaN: then x86 (and CUDA) return
             * the payload of whichever operand the compiler put first, so only "a NaN" is
             * specified (elem.h). */
            size_t bad = n;
            for (size_t i = 0; i < n && bad == n; i++) {
                if (isnan(zk_load(acc0, adt, i)) && isnan(zk_load(x, xdt, i))) {
                    if (!isnan(zk_load(got, adt, i))) bad = i;
                } else if (memcmp((char *)got + i * es, (char *)ref + i * es, es)) {
                    bad = i;
                }
            }
            ZT_CHECK(bad == n, "accumulate %s n=%zu %s += %s: element %zu: %.9g + %.9g gave %.9g, "
                     "reference %.9g", devs[d].name, n, zinc_dtype_name(adt),
                     zinc_dtype_name(xdt), bad, (double)zk_load(acc0, adt, bad),
                     (double)zk_load(x, xdt, bad), (double)zk_load(got, adt, bad),
                     (double)zk_load(ref, adt, bad));
        }
    }
    free(acc0), free(x), free(ref), free(got);
}

static void test_stats(size_t n, zt_rng *r)
{
    void *g = malloc(n * 4);
    for (int ti = 0; ti < 3; ti++) {
        zinc_dtype dt = kt_dtypes[ti];
        for (int withinf = 0; withinf < 2; withinf++) {
            kt_fill(g, dt, n, r);
            if (withinf) zk_store(g, dt, zt_next(r) % n, INFINITY);
            zk_grad_stats ref, got;
            zk_ref_grad_stats(g, dt, n, &ref);
            for (int d = 0; d < ndevs; d++) {
                memset(&got, 0x77, sizeof got);
                ZT_OK(devs[d].d->iface->grad_stats(devs[d].d, g, dt, n, &got));
                ZT_CHECK(memcmp(&got.sumsq, &ref.sumsq, sizeof ref.sumsq) == 0 &&
                             got.nonfinite == ref.nonfinite,
                         "grad_stats %s n=%zu %s: %.17g/%d vs reference %.17g/%d", devs[d].name, n,
                         zinc_dtype_name(dt), got.sumsq, got.nonfinite, ref.sumsq, ref.nonfinite);
            }
        }
    }
    free(g);
}

int main(void)
{
    for (int i = 0; i < 3; i++) {
        if (!zk_cpu_has_isa(kt_all_isas[i])) {
            printf("test_bitwise: this CPU has no %s; not tested here\n", kt_all_isas[i]);
            continue;
        }
        for (int t = 0; t < 4; t++) {
            kdev *k = &devs[ndevs];
            ZT_OK(zk_cpu_open_isa(kt_threads[t], kt_all_isas[i], &k->d));
            if (!k->d) continue;
            ZT_CHECK(!strcmp(zk_cpu_isa(k->d), kt_all_isas[i]), "isa %s", zk_cpu_isa(k->d));
            snprintf(k->name, sizeof k->name, "%s/%dt", kt_all_isas[i], kt_threads[t]);
            ndevs++;
        }
    }
    zt_rng r = {42};
    for (size_t si = 0; si < sizeof kt_sizes / sizeof kt_sizes[0]; si++) {
        size_t n = kt_sizes[si];
        test_adam(n, &r);
        test_cast(n, &r);
        test_accumulate(n, &r);
        test_stats(n, &r);
    }
    for (int d = 0; d < ndevs; d++) zdev_close(devs[d].d);
    return zt_finish("test_bitwise");
}
