/*
 * test_device.c — the CPU device as the engine uses it: opening by name, memory calls, argument
 * errors with messages, ZINC_CPU_ISA, many devices with thread pools created, used
 * concurrently (one per rank thread) and destroyed, and zk_cpu_checksum against its definition.
 */
#include <stdlib.h>
#include <xxhash.h>

#include "base/log.h"
#include "kt.h"

static void test_open(void)
{
    zdev_t *d = NULL;
    ZT_OK(zdev_open("cpu", 2, 0, &d));
    ZT_CHECK(d && !strcmp(d->iface->name, "cpu"), "cpu device");
    zdev_close(d);
    zdev_close(NULL);

    zinc_status s = zdev_open("tpu", 1, 0, &d);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && d == NULL, "unknown device: %s", zinc_status_string(s));
    ZT_CHECK(strstr(zerr_thread_message(), "tpu") != NULL, "message names it: %s", zerr_thread_message());

    s = zdev_open("cuda", 0, 0, &d);
    if (zdev_cuda_version() == NULL)
        ZT_CHECK(s == ZINC_ERR_UNSUPPORTED && d == NULL && strstr(zerr_thread_message(), "CUDA"),
                 "cuda in a build without CUDA: %s: %s", zinc_status_string(s), zerr_thread_message());
    else
        ZT_CHECK(s == ZINC_OK || s == ZINC_ERR_UNSUPPORTED || s == ZINC_ERR_DEVICE, "cuda: %s",
                 zinc_status_string(s));
    if (s == ZINC_OK) zdev_close(d);

    s = zdev_cpu_open(-1, &d);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "threads -1: %s", zinc_status_string(s));

    /* threads 0 = online CPUs */
    ZT_OK(zdev_cpu_open(0, &d));
    if (d) {
        ZT_CHECK(zk_cpu_threads(d) >= 1, "threads %d", zk_cpu_threads(d));
        zdev_close(d);
    }
}

static void test_isa_env(void)
{
    zdev_t *d = NULL;
    setenv("ZINC_CPU_ISA", "sse9", 1);
    zinc_status s = zdev_cpu_open(1, &d);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && !d && strstr(zerr_thread_message(), "ZINC_CPU_ISA"),
             "bad ZINC_CPU_ISA: %s: %s", zinc_status_string(s), zerr_thread_message());
    for (int k = 0; k < 3; k++) {
        setenv("ZINC_CPU_ISA", kt_all_isas[k], 1);
        s = zdev_cpu_open(1, &d);
        if (zk_cpu_has_isa(kt_all_isas[k])) {
            ZT_CHECK(s == ZINC_OK && d && !strcmp(zk_cpu_isa(d), kt_all_isas[k]),
                     "ZINC_CPU_ISA=%s: %s", kt_all_isas[k], zinc_status_string(s));
        } else {
            ZT_CHECK(s == ZINC_ERR_UNSUPPORTED && !d && strstr(zerr_thread_message(), kt_all_isas[k]),
                     "ZINC_CPU_ISA=%s on a CPU without it: %s", kt_all_isas[k], zerr_thread_message());
        }
        zdev_close(d);
        d = NULL;
    }
    unsetenv("ZINC_CPU_ISA");
    ZT_OK(zdev_cpu_open(1, &d));
    if (d) ZT_CHECK(!strcmp(zk_cpu_isa(d), zk_cpu_best_isa()), "default isa %s", zk_cpu_isa(d));
    zdev_close(d);
}

static void test_memory(void)
{
    zdev_t *d = NULL;
    ZT_OK(zdev_cpu_open(2, &d));
    if (!d) return;
    const zdev_iface_t *f = d->iface;
    static const size_t sizes[] = {0, 1, 3, 64, 1000, 1 << 20, (64 << 20) + 7};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t b = sizes[i];
        unsigned char *p = f->alloc(d, b);
        ZT_CHECK(p != NULL && ((uintptr_t)p & 63) == 0, "alloc %zu: %p", b, (void *)p);
        if (!p) continue;
        size_t nz = 0;
        for (size_t j = 0; j < b; j++) nz += p[j] != 0;
        ZT_CHECK(nz == 0, "alloc %zu: %zu bytes not zero", b, nz);
        unsigned char *q = f->alloc(d, b), *h = malloc(b + 1);
        for (size_t j = 0; j < b; j++) h[j] = (unsigned char)(j * 7 + 1);
        ZT_OK(f->upload(d, p, h, b));
        ZT_OK(f->copy(d, q, p, b));
        memset(h, 0, b + 1);
        ZT_OK(f->download(d, h, q, b));
        size_t bad = 0;
        for (size_t j = 0; j < b; j++) bad += h[j] != (unsigned char)(j * 7 + 1);
        ZT_CHECK(bad == 0, "upload/copy/download %zu: %zu bytes wrong", b, bad);
        ZT_OK(f->memset0(d, q, b));
        nz = 0;
        for (size_t j = 0; j < b; j++) nz += q[j] != 0;
        ZT_CHECK(nz == 0, "memset0 %zu", b);
        f->free(d, p);
        f->free(d, q);
        free(h);
    }
    f->free(d, NULL);
    if (f->sync) ZT_OK(f->sync(d));

    /* Bad arguments come back as statuses with a message in d->err. */
    float x[4] = {0};
    zk_adam_args a = {.master = x, .m = x, .v = x, .grad = x, .n = 4, .lr = 1e-3f,
                      .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .grad_scale = 1,
                      .bias_c1 = 0, .bias_c2 = 1};
    zinc_status s = f->adam_step(d, &a);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(d->err, "bias"), "bias_c1 = 0: %s: %s",
             zinc_status_string(s), d->err);
    a.bias_c1 = 1;
    a.grad_dtype = (zinc_dtype)7;
    s = f->adam_step(d, &a);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(d->err, "dtype"), "dtype 7: %s", d->err);
    a.grad_dtype = ZINC_DTYPE_FP32;
    a.v = NULL;
    s = f->adam_step(d, &a);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "NULL v: %s", zinc_status_string(s));
    s = f->cast(d, x, ZINC_DTYPE_FP16, NULL, ZINC_DTYPE_FP32, 4, 1);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "cast from NULL: %s", zinc_status_string(s));
    s = f->grad_stats(d, x, (zinc_dtype)-1, 4, NULL);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "grad_stats: %s", zinc_status_string(s));
    s = f->accumulate(d, x, (zinc_dtype)3, x, (zinc_dtype)3, 4);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "accumulate dtype 3: %s", zinc_status_string(s));
    /* only fp32 widens: a 16-bit sum of fp32 values would round each add */
    s = f->accumulate(d, x, ZINC_DTYPE_BF16, x, ZINC_DTYPE_FP32, 4);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "accumulate bf16 += fp32: %s", zinc_status_string(s));
    s = f->accumulate(d, x, ZINC_DTYPE_FP16, x, ZINC_DTYPE_BF16, 4);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "accumulate fp16 += bf16: %s", zinc_status_string(s));
    zdev_close(d);
}

/* Ranks as threads, each with its own device of 3 threads, stepping at the same time; each
 * result must be the reference's. */
#define RN 50000
static void rank_fn(int rank, void *arg)
{
    (void)arg;
    zt_rng r = {(uint64_t)rank + 77};
    float *p = malloc(RN * 4), *m = calloc(RN, 4), *v = calloc(RN, 4), *g = malloc(RN * 4);
    float *rp = malloc(RN * 4), *rm = calloc(RN, 4), *rv = calloc(RN, 4);
    uint16_t *out = malloc(RN * 2), *rout = malloc(RN * 2);
    for (int i = 0; i < RN; i++) p[i] = rp[i] = (float)zt_normal(&r);
    zdev_t *d = NULL;
    ZT_OK(zdev_cpu_open(3, &d));
    if (!d) return;
    int bad = 0;
    for (int step = 1; step <= 10; step++) {
        for (int i = 0; i < RN; i++) g[i] = (float)zt_normal(&r);
        zk_adam_args a = {.master = p, .m = m, .v = v, .grad = g, .param_out = out,
                          .param_dtype = ZINC_DTYPE_BF16, .n = RN, .lr = 1e-3f, .beta1 = 0.9f,
                          .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                          .grad_scale = 0.5f, .adamw = 1, .bias_c1 = 1.0f - powf(0.9f, (float)step),
                          .bias_c2 = 1.0f - powf(0.999f, (float)step)};
        ZT_OK(d->iface->adam_step(d, &a));
        a.master = rp, a.m = rm, a.v = rv, a.param_out = rout;
        zk_ref_adam_step(&a);
    }
    bad = memcmp(p, rp, RN * 4) || memcmp(m, rm, RN * 4) || memcmp(v, rv, RN * 4) ||
          memcmp(out, rout, RN * 2);
    ZT_CHECK(!bad, "rank %d: concurrent device results differ from the reference", rank);
    zdev_close(d);
    free(p), free(m), free(v), free(g), free(rp), free(rm), free(rv), free(out), free(rout);
}

static void test_many(void)
{
    /* Open/close churn: pools must start and stop cleanly and fast. */
    float *g = malloc(100000 * 4);
    for (int i = 0; i < 100000; i++) g[i] = (float)i;
    int bad = 0;
    for (int k = 0; k < 300; k++) {
        zdev_t *d = NULL;
        if (zdev_cpu_open(1 + k % 5, &d) != ZINC_OK) { bad++; continue; }
        if (k % 3 == 0) { /* sometimes use the pool before closing, sometimes not */
            zk_grad_stats st;
            if (d->iface->grad_stats(d, g, ZINC_DTYPE_FP32, 100000, &st) != ZINC_OK) bad++;
        }
        zdev_close(d);
    }
    ZT_CHECK(bad == 0, "%d of 300 open/use/close cycles failed", bad);
    free(g);
    zt_run_ranks(4, rank_fn, NULL);
}

/* zk_cpu_checksum's definition (kernels/cpu/cpu.h): seed + the sum of the XXH3-64 of each 256 KiB
 * block seeded with seed + its index. */
static uint64_t checksum_ref(const unsigned char *p, size_t n, uint64_t seed)
{
    const size_t block = (size_t)1 << 18;
    uint64_t h = seed;
    for (size_t i = 0; i * block < n; i++)
        h += XXH3_64bits_withSeed(p + i * block, n - i * block < block ? n - i * block : block,
                                  seed + i);
    return h;
}

/* zk_cpu_checksum (the NVMe scratch file's check): its definition's value (the shared
 * libxxhash's XXH3) with every ISA's table this CPU runs (each inlines XXH3 with its own vector
 * instructions) and whatever the thread count, for sizes below, at and across its 256 KiB
 * blocks, with last blocks in each of XXH3's length classes (1-16, 17-128, 129-240, longer);
 * another after any one byte changes, or with another seed; 0 bytes give the seed. */
static void test_checksum_isa(const char *isa)
{
    const size_t blk = (size_t)1 << 18;
    const size_t sizes[] = {0, 1, 17, 200, 4096, blk, blk + 1, blk + 100, blk + 239, 3u << 20};
    size_t most = 3u << 20;
    unsigned char *b = malloc(most);
    for (size_t i = 0; i < most; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint64_t want = checksum_ref(b, n, 42);
        const int threads[] = {1, 2, 3, 7};
        for (int t = 0; t < 4; t++) {
            zdev_t *d = NULL;
            ZT_OK(zk_cpu_open_isa(threads[t], isa, &d));
            if (!d) continue;
            uint64_t h = 1;
            ZT_OK(zk_cpu_checksum(d, b, n, 42, &h));
            ZT_CHECK(h == want, "%s: %zu bytes: %d threads give %llx, the definition %llx", isa, n,
                     threads[t], (unsigned long long)h, (unsigned long long)want);
            if (n == 0) ZT_CHECK(h == 42, "0 bytes: %llx, want the seed", (unsigned long long)h);
            if (n > 0 && t == 1) {
                size_t at[] = {0, n / 2, n - 1};
                for (int a = 0; a < 3; a++) {
                    b[at[a]] ^= 0x10;
                    uint64_t x = 0;
                    ZT_OK(zk_cpu_checksum(d, b, n, 42, &x));
                    ZT_CHECK(x != want, "%zu bytes: byte %zu changed, same checksum", n, at[a]);
                    b[at[a]] ^= 0x10;
                }
                uint64_t y = 0;
                ZT_OK(zk_cpu_checksum(d, b, n, 43, &y));
                ZT_CHECK(y != want, "%zu bytes: another seed, same checksum", n);
            }
            zdev_close(d);
        }
    }
    free(b);
}

static void test_checksum(void)
{
    const char *isas[] = {"portable", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        if (!zk_cpu_has_isa(isas[i])) {
            printf("test_device: checksum: this CPU lacks %s, not checked\n", isas[i]);
            continue;
        }
        test_checksum_isa(isas[i]);
    }
}

int main(void)
{
    test_checksum();
    test_open();
    test_isa_env();
    test_memory();
    test_many();
    return zt_finish("test_device");
}
