/*
 * cmd_bench.c — `zinc bench`: kernel benchmarks that print figures and assert nothing.
 *
 *   zinc bench adam  the fused Adam step over N params beside a memory-bandwidth probe measured
 *                    in the same run on the same buffers; the step moves 28 bytes per param in
 *                    fp16 mode, so its GB/s over the probe's says how close it is to the memory
 *                    limit (target: ratio >= 0.8).
 *
 * Everything goes through the zdev vtable, so --device cuda measures the CUDA backend once it
 * exists; there the probe is a device-to-device copy. On cpu the probe is the triad
 * a[i] = b[i] + s * c[i] on the device's own threads, counted as 12 bytes per element (what the
 * program reads and writes; write-allocate traffic is not counted, as in STREAM).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/device.h"
#include "tools/commands.h"
#include "zinc.h"

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: zinc bench adam [options]\n\n"
            "  adam   the fused Adam/AdamW step (fp32 master, m, v; 16-bit grads and params)\n"
            "         beside a memory-bandwidth probe measured in the same run\n\n"
            "options:\n"
            "  --device cpu|cuda      device backend (default cpu)\n"
            "  --params N             parameters in the shard (default 1e8)\n"
            "  --dtype fp16|bf16|fp32 gradient and working-copy dtype (default fp16)\n"
            "  --threads T            cpu threads, 0 = online CPUs (default 0)\n"
            "  --repeat R             timed repeats after one warm-up (default 5)\n"
            "  --json                 one JSON object on stdout (torch_ms_median and\n"
            "                         speedup_vs_torch are -1 when torch was not measured)\n"
            "  --no-torch             skip the side-by-side run of torch.optim.AdamW(fused=True)\n"
            "                         (bench/torch_adamw.py with $ZINC_PYTHON or python3)\n"
            "  --help                 this text\n\n"
            "env ZINC_CPU_ISA=portable|avx2|avx512 forces the cpu kernels' instruction set.\n"
            "exit codes: 0 done, 1 runtime failure (no memory, no device or ISA), 2 bad usage\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double median, min, max;
} timing;

static timing summarize(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    timing s = {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0], t[n - 1]};
    return s;
}

/* Fills dev[0..n) of dtype dt chunk by chunk through upload, from values in [lo, hi). */
static zinc_status fill(zdev_t *d, void *dev, zinc_dtype dt, size_t n, float lo, float hi)
{
    enum { CHUNK = 1 << 20 };
    size_t es = zinc_dtype_size(dt);
    void *h = malloc(CHUNK * es);
    if (!h) return ZINC_ERR_NOMEM;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < CHUNK; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        zk_store(h, dt, i, lo + (hi - lo) * (float)((double)(s >> 11) * 0x1p-53));
    }
    zinc_status st = ZINC_OK;
    for (size_t off = 0; off < n && st == ZINC_OK; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        st = d->iface->upload(d, (char *)dev + off * es, h, k * es);
    }
    free(h);
    return st;
}

static zinc_status sync_dev(zdev_t *d) { return d->iface->sync ? d->iface->sync(d) : ZINC_OK; }

/* PyTorch's AdamW on the same sizes (bench/torch_adamw.py with $ZINC_PYTHON, else python3).
 * Returns its median in ms, or a negative value with the reason in `why`. */
static double torch_adamw_ms(const char *device, size_t n, const char *dtname, long long repeat,
                             char *why, size_t whyn)
{
    const char *py = getenv("ZINC_PYTHON");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s/bench/torch_adamw.py --device %s --params %zu --dtype %s "
             "--repeat %lld --impl fused 2>&1", py && *py ? py : "python3", ZINC_SOURCE_DIR, device,
             n, dtname, repeat);
    FILE *f = popen(cmd, "r");
    char out[4096] = "";
    size_t got = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[got] = 0;
    int rc = f ? pclose(f) : -1;
    const char *ms = strstr(out, "\"ms_median\": ");
    if (rc != 0 || !ms) {
        const char *r = strstr(out, "\"reason\": \"");
        snprintf(why, whyn, "%s", r ? r + 11 : (*out ? out : "python3 not found"));
        char *end = strpbrk(why, "\"\n");
        if (end) *end = 0;
        return -1.0;
    }
    return atof(ms + strlen("\"ms_median\": "));
}

static int bench_adam(int argc, char **argv)
{
    const char *device = "cpu", *dtname = "fp16";
    long long params = 100000000, threads = 0, repeat = 5;
    int json = 0, with_torch = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        } else if (!strcmp(a, "--no-torch")) {
            with_torch = 0;
            continue;
        }
        if (!val) return zarg_usage_error("bench adam", "%s needs a value", a);
        if (!strcmp(a, "--device")) {
            device = val;
        } else if (!strcmp(a, "--dtype")) {
            dtname = val;
        } else if (!strcmp(a, "--params")) {
            if (zarg_int64(val, &params) || params < 1)
                return zarg_usage_error("bench adam", "--params wants a count >= 1, not '%s'", val);
        } else if (!strcmp(a, "--threads")) {
            if (zarg_int64(val, &threads) || threads < 0 || threads > 4096)
                return zarg_usage_error("bench adam", "--threads wants 0..4096, not '%s'", val);
        } else if (!strcmp(a, "--repeat")) {
            if (zarg_int64(val, &repeat) || repeat < 1 || repeat > 1000)
                return zarg_usage_error("bench adam", "--repeat wants 1..1000, not '%s'", val);
        } else {
            return zarg_usage_error("bench adam", "unknown option '%s'", a);
        }
        i++;
    }
    if (strcmp(device, "cpu") && strcmp(device, "cuda"))
        return zarg_usage_error("bench adam", "--device is cpu or cuda, not '%s'", device);
    zinc_dtype dt;
    if (!strcmp(dtname, "fp16")) dt = ZINC_DTYPE_FP16;
    else if (!strcmp(dtname, "bf16")) dt = ZINC_DTYPE_BF16;
    else if (!strcmp(dtname, "fp32")) dt = ZINC_DTYPE_FP32;
    else return zarg_usage_error("bench adam", "--dtype is fp16, bf16 or fp32, not '%s'", dtname);

    zdev_t *d = NULL;
    zinc_status st = zdev_open(device, (int)threads, 0, &d);
    if (st != ZINC_OK) {
        fprintf(stderr, "zinc bench adam: %s: %s\n", zinc_status_string(st), zerr_thread_message());
        /* A bad ZINC_CPU_ISA is rejected input; a missing device or ISA is the machine's. */
        return st == ZINC_ERR_INVALID_ARG ? 2 : 1;
    }
    size_t n = (size_t)params, es = zinc_dtype_size(dt);
    /* Bytes one step moves per param: grad read, master/m/v read and written, param written. */
    double bytes_per_param = (double)es + 12.0 + 12.0 + (double)es;
    int rc = 1;
    double *t_step = calloc((size_t)repeat, sizeof *t_step);
    double *t_probe = calloc((size_t)repeat, sizeof *t_probe);
    float *master = d->iface->alloc(d, n * 4), *m = d->iface->alloc(d, n * 4);
    float *v = d->iface->alloc(d, n * 4);
    void *grad = d->iface->alloc(d, n * es), *out = d->iface->alloc(d, n * es);
    if (!t_step || !t_probe || !master || !m || !v || !grad || !out) {
        fprintf(stderr, "zinc bench adam: could not allocate %.2f GB on %s for %zu params; "
                "try a smaller --params\n", (double)n * (12.0 + 2.0 * (double)es) / 1e9, device, n);
        goto done;
    }
    /* Weights O(1), gradients O(1e-2): v stays far from fp32 subnormals, whose arithmetic is
     * slow on some CPUs and would not be a fair measure. */
    if ((st = fill(d, master, ZINC_DTYPE_FP32, n, -1.0f, 1.0f)) != ZINC_OK ||
        (st = fill(d, grad, dt, n, -1e-2f, 1e-2f)) != ZINC_OK) {
        fprintf(stderr, "zinc bench adam: filling the buffers failed: %s %s\n",
                zinc_status_string(st), d->err);
        goto done;
    }
    zk_adam_args a = {.master = master, .m = m, .v = v, .grad = grad, .grad_dtype = dt,
                      .param_out = out, .param_dtype = dt, .n = n, .lr = 1e-4f, .beta1 = 0.9f,
                      .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .grad_scale = 1.0f,
                      .bias_c1 = 0.1f, .bias_c2 = 0.001f, .adamw = 1};
    int is_cpu = zk_cpu_isa(d) != NULL;
    double probe_bytes = is_cpu ? 12.0 * (double)n : 8.0 * (double)n;
    /* Round 0 is the warm-up (page faults, first touch, clocks); rounds 1..R are timed. The
     * step and the probe alternate so both see the same machine state. */
    for (long long r = 0; r <= repeat; r++) {
        double t0 = now_s();
        st = d->iface->adam_step(d, &a);
        if (st == ZINC_OK) st = sync_dev(d);
        double t1 = now_s();
        if (st == ZINC_OK) {
            /* The probe reuses the step's fp32 buffers: the same pages, the same placement.
             * m = master + 1e-3 * v keeps every value finite and normal. */
            st = is_cpu ? zk_cpu_triad(d, m, master, v, 1e-3f, n)
                        : d->iface->copy(d, m, master, n * 4);
            if (st == ZINC_OK) st = sync_dev(d);
        }
        double t2 = now_s();
        if (st != ZINC_OK) {
            fprintf(stderr, "zinc bench adam: %s: %s\n", zinc_status_string(st), d->err);
            goto done;
        }
        if (r > 0) t_step[r - 1] = t1 - t0, t_probe[r - 1] = t2 - t1;
    }
    timing ts = summarize(t_step, (int)repeat), tp = summarize(t_probe, (int)repeat);
    /* Beside it, in the same run, PyTorch's fused AdamW when a Python with torch is there. */
    char torch_why[512] = "not asked (--no-torch)";
    double torch_ms = with_torch ? torch_adamw_ms(device, n, dtname, repeat, torch_why,
                                                  sizeof torch_why) : -1.0;
    double pps = (double)n / ts.median;
    double gbps = pps * bytes_per_param / 1e9;
    double probe_gbps = probe_bytes / tp.median / 1e9;
    double ratio = gbps / probe_gbps;
    const char *isa = is_cpu ? zk_cpu_isa(d) : d->iface->name;
    int nthreads = is_cpu ? zk_cpu_threads(d) : 0;
    if (json) {
        printf("{\"bench\": \"adam\", \"device\": \"%s\", \"isa\": \"%s\", \"threads\": %d, "
               "\"params\": %zu, \"dtype\": \"%s\", \"repeat\": %lld, \"bytes_per_param\": %.0f, "
               "\"ms_median\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f, "
               "\"params_per_s\": %.6g, \"gbytes_per_s\": %.4f, "
               "\"probe\": \"%s\", \"probe_bytes\": %.0f, \"probe_ms_median\": %.4f, "
               "\"probe_ms_min\": %.4f, \"probe_ms_max\": %.4f, \"probe_gbytes_per_s\": %.4f, "
               "\"ratio\": %.4f, \"torch_ms_median\": %.4f, \"speedup_vs_torch\": %.4f}\n",
               d->iface->name, isa, nthreads, n, dtname, repeat, bytes_per_param,
               ts.median * 1e3, ts.min * 1e3, ts.max * 1e3, pps, gbps,
               is_cpu ? "triad" : "copy", probe_bytes, tp.median * 1e3, tp.min * 1e3,
               tp.max * 1e3, probe_gbps, ratio, torch_ms, torch_ms > 0 ? torch_ms / (ts.median * 1e3) : -1.0);
    } else {
        printf("zinc bench adam: device %s (%s, %d threads), %zu params, %s grads and params, "
               "%.0f bytes/param, median of %lld after a warm-up\n",
               d->iface->name, isa, nthreads, n, dtname, bytes_per_param, repeat);
        printf("  adam step    %9.2f ms (min %.2f, max %.2f)  %8.1f Mparams/s  %7.2f GB/s\n",
               ts.median * 1e3, ts.min * 1e3, ts.max * 1e3, pps / 1e6, gbps);
        printf("  %-5s probe  %9.2f ms (min %.2f, max %.2f)  %27.2f GB/s  (%.0f bytes)\n",
               is_cpu ? "triad" : "copy", tp.median * 1e3, tp.min * 1e3, tp.max * 1e3,
               probe_gbps, probe_bytes);
        printf("  ratio %.3f (step GB/s over probe GB/s; target >= 0.8)\n", ratio);
    }
    if (!json) {
        if (torch_ms > 0)
            printf("  torch AdamW(fused) on fp32 master + casts %8.2f ms  -> zinc %.2fx faster\n",
                   torch_ms, torch_ms / (ts.median * 1e3));
        else if (with_torch)
            printf("  torch AdamW(fused): not measured (%s)\n", torch_why);
    }
    rc = 0;
done:
    d->iface->free(d, master);
    d->iface->free(d, m);
    d->iface->free(d, v);
    d->iface->free(d, grad);
    d->iface->free(d, out);
    free(t_step);
    free(t_probe);
    zdev_close(d);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "adam")) return bench_adam(argc - 1, argv + 1);
    return zarg_usage_error("bench", "unknown benchmark '%s'; the benchmarks are: adam", argv[1]);
}
