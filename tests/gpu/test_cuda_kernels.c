/*
 * test_cuda_kernels.c — every CUDA kernel against its CPU reference on the same random inputs,
 * and the device memory round trip.
 *
 * Tolerance: none. kernels/cpu/elem.h defines each element as a fixed sequence of IEEE fp32
 * operations and the CUDA kernels perform exactly those with explicitly rounded intrinsics, so
 * every finite output must have the same bits; a NaN output must be a NaN (its payload may
 * differ: GPU arithmetic returns the canonical NaN). grad_stats follows the same summation order
 * as zk_ref_grad_stats, so the double sum must be equal too. Inputs cover every dtype combination,
 * Adam and AdamW with and without weight decay and bias correction, odd sizes, and pointer
 * offsets that exercise the scalar head, the 16-byte vector body, the tail, and the all-scalar
 * path (streams whose alignments cannot be reconciled).
 *
 * No CUDA device: prints "SKIP: no CUDA device (<reason>)" and exits 77.
 */
#include "gpu_common.h"
#include "kernels/cuda/zcuda.h"

static zdev_t *D;

static void *dalloc(size_t bytes)
{
    void *p = D->iface->alloc(D, bytes);
    ZT_CHECK(p != NULL, "alloc(%zu): %s", bytes, D->err);
    return p;
}

static void put(void *dev, const void *host, size_t bytes)
{
    zinc_status s = D->iface->upload(D, dev, host, bytes);
    ZT_CHECK(s == ZINC_OK, "upload: %s", D->err);
}

static void get(void *host, const void *dev, size_t bytes)
{
    zinc_status s = D->iface->download(D, host, dev, bytes);
    ZT_CHECK(s == ZINC_OK, "download: %s", D->err);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static void test_memory(void)
{
    const size_t n = (1u << 20) + 3;
    unsigned char *h = malloc(n), *back = malloc(n);
    zt_rng r = {1};
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)zt_next(&r);
    unsigned char *a = dalloc(n), *b = dalloc(n);
    if (!a || !b) return;
    get(back, a, n);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += back[i] != 0;
    ZT_CHECK(nz == 0, "alloc is not zeroed: %zu non-zero bytes", nz);
    put(a, h, n);
    ZT_OK(D->iface->copy(D, b + 1, a, n - 1));
    get(back, b, n);
    ZT_CHECK(back[0] == 0 && !memcmp(back + 1, h, n - 1), "upload/copy/download round trip differs");
    ZT_OK(D->iface->memset0(D, b + 100, 1000));
    get(back, b, n);
    int ok = !memcmp(back + 1, h, 99);
    for (size_t i = 100; i < 1100; i++) ok &= back[i] == 0;
    ok &= !memcmp(back + 1100, h + 1099, n - 1100);
    ZT_CHECK(ok, "memset0 of [100, 1100) wrong");
    ZT_OK(D->iface->sync(D));
    void *z = D->iface->alloc(D, 0);
    ZT_CHECK(z != NULL, "alloc(0) returned NULL");
    D->iface->free(D, z);
    void *huge = D->iface->alloc(D, (size_t)1 << 60);
    ZT_CHECK(huge == NULL && strstr(D->err, "cudaMalloc") && strstr(D->err, ".c:"),
             "absurd alloc: %p, message '%s'", huge, D->err);
    ZT_CHECK(D->iface->upload(D, NULL, h, 8) == ZINC_ERR_INVALID_ARG, "upload to NULL accepted");
    D->iface->free(D, a);
    D->iface->free(D, b);
    free(h);
    free(back);
}

/* The memory limit (zinc.device_memory_limit on cuda) and the asynchronous copies of the offload
 * pipeline: downloads and uploads on the copy stream, fences reused past ZCU_COPY_EVENTS, pinned
 * and pageable host memory, and a copy ordered after the compute stream's work before it. */
static void test_limit_and_async(void)
{
    uint64_t base = D->in_use;
    ZT_OK(zdev_set_limit(D, base + 4096));
    void *p = D->iface->alloc(D, 4096);
    ZT_CHECK(p != NULL && D->in_use == base + 4096, "alloc within the limit: %p, in use %llu", p,
             (unsigned long long)D->in_use);
    void *q = D->iface->alloc(D, 1);
    ZT_CHECK(q == NULL && strstr(D->err, "device memory limit"), "alloc past the limit: %p '%s'", q,
             D->err);
    D->iface->free(D, p);
    ZT_CHECK(D->in_use == base, "in use after free: %llu, want %llu", (unsigned long long)D->in_use,
             (unsigned long long)base);
    ZT_OK(zdev_set_limit(D, 0));

    const size_t n = (1u << 22) + 5, parts = 3 * ZCU_COPY_EVENTS / 2, part = n / parts;
    unsigned char *src = malloc(n), *dst = malloc(n);
    zt_rng r = {7};
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)zt_next(&r);
    unsigned char *a = dalloc(n), *b = dalloc(n);
    for (int pinned = 0; pinned < 2 && a && b; pinned++) {
        if (pinned) {
            ZT_OK(D->iface->pin_host(D, src, n));
            ZT_OK(D->iface->pin_host(D, dst, n));
        }
        memset(dst, 0, n);
        uint64_t t[3 * ZCU_COPY_EVENTS / 2];
        for (size_t k = 0; k < parts; k++) {
            size_t len = k == parts - 1 ? n - k * part : part;
            ZT_OK(D->iface->upload_async(D, a + k * part, src + k * part, len));
            ZT_OK(D->iface->copy_fence(D, &t[k]));
        }
        ZT_OK(D->iface->copy_join(D));
        /* Queued on the compute stream after the join: sees every upload. */
        ZT_OK(D->iface->copy(D, b, a, n));
        /* Queued on the copy stream after the compute stream's copy above. */
        for (size_t k = 0; k < parts; k++) {
            size_t len = k == parts - 1 ? n - k * part : part;
            ZT_OK(D->iface->download_async(D, dst + k * part, b + k * part, len));
            ZT_OK(D->iface->copy_fence(D, &t[k]));
        }
        for (size_t k = 0; k < parts; k++) ZT_OK(D->iface->copy_wait(D, t[k]));
        ZT_CHECK(!memcmp(src, dst, n), "async round trip differs (%s host memory)",
                 pinned ? "pinned" : "pageable");
        ZT_CHECK(D->iface->copy_wait(D, t[parts - 1] + 1) == ZINC_ERR_INVALID_ARG,
                 "a ticket never handed out was accepted");
        if (pinned) {
            D->iface->unpin_host(D, src);
            D->iface->unpin_host(D, dst);
        }
    }
    D->iface->free(D, a);
    D->iface->free(D, b);
    free(src);
    free(dst);
}

/* ---- adam ------------------------------------------------------------------------------------ */

typedef struct adam_case {
    zinc_dtype gdt;
    int pdt;                 /* -1: no param_out */
    int adamw;
    float wd;
    int bias;                /* bias correction on */
    size_t n;
    size_t off, goff;        /* element offsets of master/m/v/param_out, and of the gradient */
    int specials;            /* put inf/nan into the gradient */
    const double *guard;     /* host {sumsq, nonfinite} for the guarded variant, or NULL */
} adam_case;

static void run_adam(const adam_case *c)
{
    const size_t n = c->n, W = n + 8;
    size_t gsz = zinc_dtype_size(c->gdt), psz = c->pdt >= 0 ? zinc_dtype_size((zinc_dtype)c->pdt) : 0;
    zt_rng r = {(uint64_t)n * 31 + c->gdt * 7 + (uint64_t)c->pdt + 100 * c->adamw};
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    void *g = malloc(n * gsz), *po = malloc(n * (psz ? psz : 1));
    for (size_t i = 0; i < n; i++) {
        p[i] = zg_value(&r, 1.0f);
        m[i] = zg_value(&r, 0.01f);
        v[i] = fabsf(zg_value(&r, 1e-4f));
    }
    zg_fill(&r, g, c->gdt, n, c->gdt == ZINC_DTYPE_FP16 ? 100.0f : 1000.0f);
    if (c->specials && n > 5) {
        zk_store(g, c->gdt, 1, INFINITY);
        zk_store(g, c->gdt, n / 2, -INFINITY);
        zk_store(g, c->gdt, n - 2, NAN);
    }
    memset(po, 0, n * (psz ? psz : 1));

    float *dp = dalloc(W * 4), *dm = dalloc(W * 4), *dv = dalloc(W * 4);
    char *dg = dalloc(W * gsz), *dpo = psz ? dalloc(W * psz) : NULL;
    double *dguard = c->guard ? dalloc(2 * sizeof(double)) : NULL;
    put(dp + c->off, p, n * 4);
    put(dm + c->off, m, n * 4);
    put(dv + c->off, v, n * 4);
    put(dg + c->goff * gsz, g, n * gsz);
    if (dpo) put(dpo + c->off * psz, po, n * psz);
    if (dguard) put(dguard, c->guard, 2 * sizeof(double));

    float bc1 = c->bias ? (float)(1.0 - pow(0.9, 7)) : 1.0f;
    float bc2 = c->bias ? (float)(1.0 - pow(0.999, 7)) : 1.0f;
    zk_adam_args a = {.master = dp + c->off, .m = dm + c->off, .v = dv + c->off,
                      .grad = dg + c->goff * gsz, .grad_dtype = c->gdt,
                      .param_out = dpo ? dpo + c->off * psz : NULL,
                      .param_dtype = c->pdt >= 0 ? (zinc_dtype)c->pdt : ZINC_DTYPE_FP32, .n = n,
                      .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                      .weight_decay = c->wd, .grad_scale = 1.0f / 1024.0f, .bias_c1 = bc1,
                      .bias_c2 = bc2, .adamw = c->adamw};
    zinc_status s = c->guard ? zdev_cuda_adam_step_guarded(D, &a, dguard) : D->iface->adam_step(D, &a);
    ZT_CHECK(s == ZINC_OK, "adam_step: %s", D->err);

    float *gp = malloc(n * 4), *gm = malloc(n * 4), *gv = malloc(n * 4);
    void *gpo = malloc(n * (psz ? psz : 1));
    get(gp, dp + c->off, n * 4);
    get(gm, dm + c->off, n * 4);
    get(gv, dv + c->off, n * 4);
    if (dpo) get(gpo, dpo + c->off * psz, n * psz);

    /* The reference on the host copies; a guarded step that must skip changes nothing. */
    int skip = c->guard && (c->guard[1] != 0.0 || !isfinite(c->guard[0]));
    zk_adam_args ra = a;
    ra.master = p;
    ra.m = m;
    ra.v = v;
    ra.grad = g;
    ra.param_out = psz ? po : NULL;
    if (!skip) zk_ref_adam_step(&ra);

    char what[160];
    snprintf(what, sizeof what, "adam g=%s p=%s adamw=%d wd=%g bias=%d n=%zu off=%zu/%zu%s%s",
             zinc_dtype_name(c->gdt), c->pdt >= 0 ? zinc_dtype_name((zinc_dtype)c->pdt) : "none",
             c->adamw, (double)c->wd, c->bias, n, c->off, c->goff, c->specials ? " specials" : "",
             c->guard ? (skip ? " guarded-skip" : " guarded-run") : "");
    size_t bad = zg_diff("master", gp, p, ZINC_DTYPE_FP32, n) + zg_diff("m", gm, m, ZINC_DTYPE_FP32, n) +
                 zg_diff("v", gv, v, ZINC_DTYPE_FP32, n);
    if (psz) bad += zg_diff("param_out", gpo, po, (zinc_dtype)c->pdt, n);
    ZT_CHECK(bad == 0, "%s: %zu elements differ from zk_ref_adam_step", what, bad);

    D->iface->free(D, dp); D->iface->free(D, dm); D->iface->free(D, dv); D->iface->free(D, dg);
    if (dpo) D->iface->free(D, dpo);
    if (dguard) D->iface->free(D, dguard);
    free(p); free(m); free(v); free(g); free(po); free(gp); free(gm); free(gv); free(gpo);
}

static void test_adam(void)
{
    const struct { int adamw; float wd; int bias; } var[] = {
        {1, 0.01f, 1}, {0, 0.01f, 1}, {1, 0.0f, 1}, {0, 0.0f, 0}};
    for (int gd = 0; gd < 3; gd++)
        for (int pd = -1; pd < 3; pd++)
            for (size_t k = 0; k < sizeof var / sizeof *var; k++) {
                adam_case c = {(zinc_dtype)gd, pd, var[k].adamw, var[k].wd, var[k].bias, 100003, 0, 0, 0, NULL};
                run_adam(&c);
            }
    /* Sizes and alignments: head + vector + tail, and the all-scalar path ((1,0), (2,5)). */
    const size_t ns[] = {1, 7, 8, 9, 17, 1000, 65537};
    const size_t offs[][2] = {{0, 0}, {1, 1}, {3, 3}, {1, 0}, {2, 5}};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (size_t j = 0; j < sizeof offs / sizeof *offs; j++)
            for (int gd = 1; gd < 3; gd++) {
                adam_case c = {(zinc_dtype)gd, gd, 1, 0.01f, 1, ns[i], offs[j][0], offs[j][1], 0, NULL};
                run_adam(&c);
            }
    adam_case sp = {ZINC_DTYPE_FP16, ZINC_DTYPE_FP16, 1, 0.01f, 1, 4099, 0, 0, 1, NULL};
    run_adam(&sp);
    /* The overflow-skip path: flags read on the device. */
    const double run[2] = {12.5, 0.0}, over[2] = {12.5, 1.0}, infsum[2] = {INFINITY, 0.0};
    adam_case g1 = {ZINC_DTYPE_BF16, ZINC_DTYPE_BF16, 1, 0.01f, 1, 10001, 1, 1, 0, run};
    run_adam(&g1);
    g1.guard = over;
    run_adam(&g1);
    g1.guard = infsum;
    run_adam(&g1);
}

/* ---- grad_stats ------------------------------------------------------------------------------ */

static void stats_case(zinc_dtype dt, size_t n, int inject, int fast_fill)
{
    size_t esz = zinc_dtype_size(dt);
    void *h = malloc(n ? n * esz : 1);
    zt_rng r = {n * 13 + dt};
    if (fast_fill) {
        for (size_t i = 0; i < n; i++)
            zk_store(h, dt, i, (float)((double)(zt_next(&r) >> 40) * 0x1p-24 - 0.5) * 8.0f);
    } else {
        zg_fill(&r, h, dt, n, 3.0f);
    }
    if (inject == 1 && n) zk_store(h, dt, n - 1, INFINITY);
    if (inject == 2 && n) zk_store(h, dt, n / 3, NAN);
    zk_grad_stats want, got = {-1, -1};
    zk_ref_grad_stats(h, dt, n, &want);
    void *dg = dalloc(n ? n * esz : 1);
    put(dg, h, n * esz);
    zinc_status s = D->iface->grad_stats(D, dg, dt, n, &got);
    ZT_CHECK(s == ZINC_OK, "grad_stats: %s", D->err);
    ZT_CHECK(got.nonfinite == want.nonfinite, "grad_stats %s n=%zu inject=%d: nonfinite %d, want %d",
             zinc_dtype_name(dt), n, inject, got.nonfinite, want.nonfinite);
    ZT_CHECK((isnan(got.sumsq) && isnan(want.sumsq)) || got.sumsq == want.sumsq,
             "grad_stats %s n=%zu inject=%d: sumsq %.17g, want %.17g", zinc_dtype_name(dt), n,
             inject, got.sumsq, want.sumsq);
    D->iface->free(D, dg);
    free(h);
}

static void test_stats(void)
{
    const size_t ns[] = {0, 1, 15, 16, 17, 4095, 4096, 4097, 3 * 4096 + 123, 1000003};
    for (int dt = 0; dt < 3; dt++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) stats_case((zinc_dtype)dt, ns[i], 0, 0);
    for (int dt = 0; dt < 3; dt++) {
        stats_case((zinc_dtype)dt, 100003, 1, 0);
        stats_case((zinc_dtype)dt, 100003, 2, 0);
    }
    /* Across the device's chunk boundary (the running total carried between chunks). */
    stats_case(ZINC_DTYPE_BF16, (size_t)ZCU_STATS_CHUNK_BLOCKS * ZK_STATS_BLOCK + 2 * 4096 + 5, 0, 1);

    /* Device-side result with add: as a host adding two calls' results. */
    const size_t na = 50001, nb = 7777;
    float *ha = malloc(na * 4), *hb = malloc(nb * 4);
    zt_rng r = {5};
    zg_fill(&r, ha, ZINC_DTYPE_FP32, na, 2.0f);
    zg_fill(&r, hb, ZINC_DTYPE_FP32, nb, 2.0f);
    zk_grad_stats sa, sb;
    zk_ref_grad_stats(ha, ZINC_DTYPE_FP32, na, &sa);
    zk_ref_grad_stats(hb, ZINC_DTYPE_FP32, nb, &sb);
    float *da = dalloc(na * 4), *db = dalloc(nb * 4);
    double *dout = dalloc(2 * sizeof(double)), out[2];
    put(da, ha, na * 4);
    put(db, hb, nb * 4);
    ZT_OK(zdev_cuda_grad_stats_dev(D, da, ZINC_DTYPE_FP32, na, dout, 0));
    ZT_OK(zdev_cuda_grad_stats_dev(D, db, ZINC_DTYPE_FP32, nb, dout, 1));
    get(out, dout, sizeof out);
    ZT_CHECK(out[0] == sa.sumsq + sb.sumsq && out[1] == 0.0, "grad_stats_dev add: %.17g %g, want %.17g 0",
             out[0], out[1], sa.sumsq + sb.sumsq);
    D->iface->free(D, da); D->iface->free(D, db); D->iface->free(D, dout);
    free(ha); free(hb);
}

/* ---- cast and accumulate --------------------------------------------------------------------- */

static void fill_specials(zt_rng *r, void *p, zinc_dtype dt, size_t n)
{
    zg_fill(r, p, dt, n, 10.0f);
    if (n > 10) {
        zk_store(p, dt, 3, 1e5f);           /* overflows fp16 */
        zk_store(p, dt, 4, -7e4f);
        zk_store(p, dt, 5, INFINITY);
        zk_store(p, dt, 6, NAN);
        zk_store(p, dt, 7, 3e-8f);          /* fp16 subnormal */
        zk_store(p, dt, 8, 65519.0f);       /* rounds to 65504 in fp16 */
        zk_store(p, dt, 9, 65520.0f);       /* rounds to inf in fp16 */
    }
}

static void cast_case(zinc_dtype ddt, zinc_dtype sdt, float scale, size_t n, size_t doff,
                      size_t soff, int inplace)
{
    size_t ds = zinc_dtype_size(ddt), ss = zinc_dtype_size(sdt);
    void *src = malloc(n * ss), *want = malloc(n * ds), *got = malloc(n * ds);
    zt_rng r = {n + 17 * ddt + 5 * sdt};
    fill_specials(&r, src, sdt, n);
    for (size_t i = 0; i < n; i++) zk_store(want, ddt, i, zk_load(src, sdt, i) * scale);
    char *dsrc = dalloc((n + 8) * ss), *ddst = inplace ? dsrc : dalloc((n + 8) * ds);
    put(dsrc + soff * ss, src, n * ss);
    void *dp = ddst + (inplace ? soff : doff) * ds;
    zinc_status s = D->iface->cast(D, dp, ddt, dsrc + soff * ss, sdt, n, scale);
    ZT_CHECK(s == ZINC_OK, "cast: %s", D->err);
    get(got, dp, n * ds);
    size_t bad = zg_diff("cast", got, want, ddt, n);
    ZT_CHECK(bad == 0, "cast %s -> %s scale %g n=%zu off=%zu/%zu%s: %zu differ", zinc_dtype_name(sdt),
             zinc_dtype_name(ddt), (double)scale, n, doff, soff, inplace ? " in place" : "", bad);
    D->iface->free(D, dsrc);
    if (!inplace) D->iface->free(D, ddst);
    free(src); free(want); free(got);
}

static void test_cast(void)
{
    const float scales[] = {1.0f, 0.25f, 1.0f / 3.0f};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < 3; k++) cast_case((zinc_dtype)d, (zinc_dtype)s, scales[k], 10007, 0, 0, 0);
    for (int d = 0; d < 3; d++) {
        cast_case((zinc_dtype)d, (zinc_dtype)d, 0.5f, 10007, 1, 1, 0);
        cast_case((zinc_dtype)d, ZINC_DTYPE_FP32, 0.5f, 10007, 1, 0, 0);
        cast_case((zinc_dtype)d, (zinc_dtype)d, 1.0f / 3.0f, 10007, 3, 3, 1);
        cast_case((zinc_dtype)d, ZINC_DTYPE_FP32, 2.0f, 5, 0, 0, 0);
    }
    float x = 0;
    ZT_CHECK(D->iface->cast(D, &x, ZINC_DTYPE_FP16, &x, ZINC_DTYPE_FP32, 1, 1.0f) == ZINC_ERR_INVALID_ARG,
             "in-place cast between different dtypes accepted");
}

static void accumulate_case(zinc_dtype adt, zinc_dtype xdt, size_t n, size_t aoff, size_t xoff)
{
    size_t ea = zinc_dtype_size(adt), ex = zinc_dtype_size(xdt);
    void *acc = malloc(n * ea), *x = malloc(n * ex), *got = malloc(n * ea);
    zt_rng r = {n * 3 + adt * 5 + xdt};
    fill_specials(&r, acc, adt, n);
    zg_fill(&r, x, xdt, n, 10.0f);
    char *da = dalloc((n + 8) * ea), *dx = dalloc((n + 8) * ex);
    put(da + aoff * ea, acc, n * ea);
    put(dx + xoff * ex, x, n * ex);
    zinc_status s = D->iface->accumulate(D, da + aoff * ea, adt, dx + xoff * ex, xdt, n);
    ZT_CHECK(s == ZINC_OK, "accumulate: %s", D->err);
    for (size_t i = 0; i < n; i++) zk_store(acc, adt, i, zk_load(acc, adt, i) + zk_load(x, xdt, i));
    get(got, da + aoff * ea, n * ea);
    size_t bad = zg_diff("accumulate", got, acc, adt, n);
    ZT_CHECK(bad == 0, "accumulate %s += %s n=%zu off=%zu/%zu: %zu differ", zinc_dtype_name(adt),
             zinc_dtype_name(xdt), n, aoff, xoff, bad);
    D->iface->free(D, da); D->iface->free(D, dx);
    free(acc); free(x); free(got);
}

static void test_accumulate(void)
{
    /* each dtype onto itself, and fp32 += fp16 / bf16 (grad_accum_dtype "fp32") */
    static const int pairs[][2] = {{0, 0}, {1, 1}, {2, 2}, {0, 1}, {0, 2}};
    for (int p = 0; p < 5; p++) {
        zinc_dtype a = (zinc_dtype)pairs[p][0], x = (zinc_dtype)pairs[p][1];
        accumulate_case(a, x, 10007, 0, 0);
        accumulate_case(a, x, 10007, 1, 1);
        accumulate_case(a, x, 10007, 1, 2);
        accumulate_case(a, x, 3, 0, 0);
    }
}

int main(void)
{
    D = zg_open_or_skip();
    test_memory();
    test_limit_and_async();
    test_adam();
    test_stats();
    test_cast();
    test_accumulate();
    zdev_close(D);
    return zt_finish("cuda_kernels");
}
