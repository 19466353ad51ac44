/*
 * cmd_bench.c — `zinc bench`: kernel benchmarks that print figures and assert nothing.
 *
 *   zinc bench adam  the fused Adam step over N params beside a memory-bandwidth probe measured
 *                    in the same run on the same buffers; the step moves 28 bytes per param in
 *                    fp16 mode, so its GB/s over the probe's says how close it is to the memory
 *                    limit (target: ratio >= 0.8).
 *
 *   zinc bench memory  engines of a synthetic model (G equal groups, Psi params in all) on local
 *                    worlds of N ranks, stages 0-3: the model-state bytes each rank allocated
 *                    (zinc_memory) beside the ZeRO paper's formulas, written here from the paper.
 *   zinc bench comm  the same engines run one optimizer step; the payload bytes of the step
 *                    (zinc_comm_bytes) beside 2Psi (stages 0-2) and 3Psi (stage 3).
 *
 * Everything goes through the zdev vtable, so --device cuda measures the CUDA backend once it
 * exists; there the probe is a device-to-device copy. On cpu the probe is the triad
 * a[i] = b[i] + s * c[i] on the device's own threads, counted as 12 bytes per element (what the
 * program reads and writes; write-allocate traffic is not counted, as in STREAM).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/device.h"
#include "tools/bench.h"
#include "tools/commands.h"
#include "zinc.h"

/* The three parts of `zinc bench --help`; each benchmark's --help prints its own usage line and
 * part (bench memory --help began "usage: zinc bench adam"). */
static const char zero_text[] =
    "  memory model-state bytes per rank (zinc_memory, allocated) vs the ZeRO formulas\n"
    "         2Psi+2Psi+12Psi / 2Psi+2Psi+12Psi/N / 2Psi+(2+12)Psi/N / (2+2+12)Psi/N\n"
    "         (16-bit dtypes; 4 bytes for fp32); default --params 1e6,4e6,1.6e7\n"
    "  comm   payload bytes of one optimizer step (zinc_comm_bytes) vs 2Psi (stages 0-2)\n"
    "         and 3Psi (stage 3), with no persistent groups; default --params 4e6;\n"
    "         --accum K micro-steps per step (default 1): (1+K)Psi at stage 2, 3KPsi at 3\n"
    "         (both: --worlds 1,2,4,8 --stages 0,1,2,3 --groups 4 --dtype bf16;\n"
    "         LIST is comma-separated; every rank is a thread of this process)\n";

static const char adam_text[] =
    "  adam   the fused Adam/AdamW step (fp32 master, m, v; 16-bit grads and params)\n"
    "         beside a memory-bandwidth probe measured in the same run\n\n"
    "adam options:\n"
    "  --device cpu|cuda      device backend (default cpu)\n"
    "  --params N             parameters in the shard, 1..2^40 (default 1e8)\n"
    "  --dtype fp16|bf16|fp32 gradient and working-copy dtype (default fp16)\n"
    "  --threads T            cpu threads, 0 = online CPUs (default 0)\n"
    "  --repeat R             timed repeats after one warm-up (default 5)\n"
    "  --json                 one JSON object on stdout (torch_ms_median and\n"
    "                         speedup_vs_torch are -1 when torch was not measured)\n"
    "  --no-torch             skip the side-by-side run of torch.optim.AdamW(fused=True)\n"
    "                         (bench/torch_adamw.py with $ZINC_PYTHON or python3)\n"
    "  --help                 this text\n\n"
    "env ZINC_CPU_ISA=portable|avx2|avx512 forces the cpu kernels' instruction set.\n";

static const char exit_text[] =
    "exit codes: 0 done, 1 runtime failure (no memory, no device or ISA), 2 bad usage\n";

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: zinc bench adam [options]\n"
               "       zinc bench memory|comm [--params LIST] [--worlds LIST] [--stages LIST]\n"
               "                              [--groups G] [--dtype fp16|bf16|fp32] [--json]\n"
               "                              [--accum K]  (comm only)\n"
               "       zinc bench offload [options]   (zinc bench offload --help)\n\n"
               "%s\n%s%s", zero_text, adam_text, exit_text);
}

static void adam_usage(FILE *f)
{
    fprintf(f, "usage: zinc bench adam [options]\n\n%s%s", adam_text, exit_text);
}

static void zero_usage(FILE *f, int comm)
{
    fprintf(f, "usage: zinc bench %s [--params LIST] [--worlds LIST] [--stages LIST]\n"
               "       %*s [--groups G] [--dtype fp16|bf16|fp32] [--json]%s\n\n%s%s",
            comm ? "comm" : "memory", comm ? 15 : 17, "", comm ? " [--accum K]" : "", zero_text,
            exit_text);
}

double zb_now(void)
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

timing zb_summarize(double *t, int n)
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
    if (zarg_wants_help(argc, argv)) {
        adam_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        } else if (!strcmp(a, "--no-torch")) {
            with_torch = 0;
            continue;
        }
        static const char *const opts[] = {"--device", "--dtype", "--params", "--threads",
                                           "--repeat", NULL};
        if (!zarg_one_of(a, opts)) return zarg_usage_error("bench adam", "unknown option '%s'", a);
        if (zarg_value("bench adam", a, val)) return 2;
        if (!strcmp(a, "--device")) {
            device = val;
        } else if (!strcmp(a, "--dtype")) {
            dtname = val;
        } else if (!strcmp(a, "--params")) {
            /* 2^40 as bench memory|comm: far past any machine, and n * 4 bytes cannot wrap
             * (2^62 params wrapped every buffer to 0 bytes, which the step then wrote) */
            if (zarg_int64(val, &params) || params < 1 || params > (1LL << 40))
                return zarg_usage_error("bench adam", "--params wants a count 1..2^40, not '%s'",
                                        val);
        } else if (!strcmp(a, "--threads")) {
            if (zarg_int64(val, &threads) || threads < 0 || threads > ZINC_MAX_THREADS)
                return zarg_usage_error("bench adam", "--threads wants 0..%d, not '%s'",
                                        ZINC_MAX_THREADS, val);
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
    if (zarg_dtype(dtname, &dt))
        return zarg_usage_error("bench adam", "--dtype is fp16, bf16 or fp32, not '%s'", dtname);

    zdev_t *d = NULL;
    zinc_status st = zdev_open(device, (int)threads, 0, &d);
    if (st != ZINC_OK) {
        fprintf(stderr, "zinc bench adam: %s: %s\n", zinc_status_string(st), zerr_thread_message());
        /* A bad ZINC_CPU_ISA is rejected input; a missing device or ISA is the machine's. */
        return st == ZINC_ERR_INVALID_ARG ? 2 : 1;
    }
    size_t n = (size_t)params, es = zinc_dtype_size(dt);
    /* Bytes one step moves per param: grad read, master/m/v read and written, and the 16-bit
     * working copy written. In fp32 mode the working copy is the master itself, as in the
     * engine at stages 0 and 3, so nothing more is written (28 bytes either way). */
    int fp32 = dt == ZINC_DTYPE_FP32;
    double bytes_per_param = (double)es + 12.0 + 12.0 + (fp32 ? 0.0 : (double)es);
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
                      .param_out = fp32 ? NULL : out, .param_dtype = dt, .n = n, .lr = 1e-4f, .beta1 = 0.9f,
                      .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .grad_scale = 1.0f,
                      .bias_c1 = 0.1f, .bias_c2 = 0.001f, .adamw = 1};
    int is_cpu = zk_cpu_isa(d) != NULL;
    double probe_bytes = is_cpu ? 12.0 * (double)n : 8.0 * (double)n;
    /* Round 0 is the warm-up (page faults, first touch, clocks); rounds 1..R are timed. The
     * step and the probe alternate so both see the same machine state. */
    for (long long r = 0; r <= repeat; r++) {
        double t0 = zb_now();
        st = d->iface->adam_step(d, &a);
        if (st == ZINC_OK) st = sync_dev(d);
        double t1 = zb_now();
        if (st == ZINC_OK) {
            /* The probe reuses the step's fp32 buffers: the same pages, the same placement.
             * m = master + 1e-3 * v keeps every value finite and normal. */
            st = is_cpu ? zk_cpu_triad(d, m, master, v, 1e-3f, n)
                        : d->iface->copy(d, m, master, n * 4);
            if (st == ZINC_OK) st = sync_dev(d);
        }
        double t2 = zb_now();
        if (st != ZINC_OK) {
            fprintf(stderr, "zinc bench adam: %s: %s\n", zinc_status_string(st), d->err);
            goto done;
        }
        if (r > 0) t_step[r - 1] = t1 - t0, t_probe[r - 1] = t2 - t1;
    }
    timing ts = zb_summarize(t_step, (int)repeat), tp = zb_summarize(t_probe, (int)repeat);
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
               "\"ratio\": %.4f, \"torch_ms_median\": %.4f, \"speedup_vs_torch\": %.4f",
               d->iface->name, isa, nthreads, n, dtname, repeat, bytes_per_param,
               ts.median * 1e3, ts.min * 1e3, ts.max * 1e3, pps, gbps,
               is_cpu ? "triad" : "copy", probe_bytes, tp.median * 1e3, tp.min * 1e3,
               tp.max * 1e3, probe_gbps, ratio, torch_ms, torch_ms > 0 ? torch_ms / (ts.median * 1e3) : -1.0);
        /* Every timed repeat (sorted), so that a caller can pool several invocations. */
        for (int k = 0; k < 2; k++) {
            const double *t = k ? t_probe : t_step;
            printf(", \"%s\": [", k ? "probe_ms_all" : "ms_all");
            for (long long i = 0; i < repeat; i++) printf("%s%.4f", i ? ", " : "", t[i] * 1e3);
            printf("]");
        }
        printf("}\n");
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

/* ---- memory and comm: engines of a synthetic model on local worlds ------------------------ */

#define ZB_MAXW 64

typedef struct {
    zinc_world_t *world;
    int world_size, stage, groups, run_step, accum;
    zinc_dtype dtype;
    long long params;
    zinc_status st[ZB_MAXW];
    char msg[ZB_MAXW][256];
    uint64_t alloc[ZB_MAXW][ZINC_MEM_COUNT];
    uint64_t comm[ZB_MAXW][ZINC_COLL_COUNT];
} zb_run;

typedef struct {
    zb_run *r;
    int rank;
} zb_arg;

/* Group g's share of the params: equal parts, the remainder to the last group. */
static long long zb_group_numel(const zb_run *r, int g)
{
    long long q = r->params / r->groups;
    return g == r->groups - 1 ? r->params - q * (r->groups - 1) : q;
}

static zinc_status zb_rank_work(zb_run *r, int rank, zinc_engine_t **pe)
{
    char cfg[768];
    /* Persistence threshold 0: every stage-3 group is sharded, as the 3Psi formula assumes. */
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}},"
             " \"%s\": {\"enabled\": %s},"
             " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0}}",
             r->accum, r->dtype == ZINC_DTYPE_FP16 ? "fp16" : "bf16",
             r->dtype == ZINC_DTYPE_FP32 ? "false" : "true", r->stage);
    zinc_engine_options_t o = {.config_json = cfg, .world = r->world, .rank = rank,
                               .threads = 1};
    zinc_status s = zinc_engine_create(&o, pe);
    zinc_engine_t *e = *pe;
    if (s != ZINC_OK) return s;
    int gid[64], pid[64];
    for (int g = 0; g < r->groups && s == ZINC_OK; g++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d", g);
        s = zinc_group_add(e, name, &gid[g]);
        int64_t shape[1] = {zb_group_numel(r, g)};
        snprintf(name, sizeof name, "layer%d.w", g);
        if (s == ZINC_OK) s = zinc_param_add(e, gid[g], name, 1, shape, r->dtype, &pid[g]);
    }
    if (s == ZINC_OK) s = zinc_finalize(e);
    /* One step of `accum` micro-steps as a model drives it: forward over the groups, backward in
     * reverse order. The gradients stay zero; the bytes moved do not depend on their values. */
    for (int m = 0; r->run_step && m < r->accum && s == ZINC_OK; m++) {
        for (int g = 0; g < r->groups && s == ZINC_OK; g++) {
            s = zinc_gather(e, gid[g]);
            if (s == ZINC_OK) s = zinc_release(e, gid[g]);
        }
        for (int g = r->groups - 1; g >= 0 && s == ZINC_OK; g--) {
            void *gv = NULL;
            s = zinc_gather(e, gid[g]);
            if (s == ZINC_OK) s = zinc_param_grad(e, pid[g], &gv);
            if (s == ZINC_OK) s = zinc_release(e, gid[g]);
            if (s == ZINC_OK) s = zinc_grads_ready(e, gid[g]);
        }
        zinc_step_info_t info;
        if (s == ZINC_OK) s = zinc_step(e, &info);
        if (s == ZINC_OK && m == r->accum - 1 && !info.applied) {
            snprintf(r->msg[rank], sizeof r->msg[rank], "the step with zero gradients was not "
                     "applied");
            s = ZINC_ERR_INTERNAL;
        }
    }
    if (s == ZINC_OK) {
        uint64_t planned[ZINC_MEM_COUNT];
        s = zinc_memory(e, planned, r->alloc[rank]);
    }
    if (s == ZINC_OK) s = zinc_comm_bytes(e, r->comm[rank]);
    return s;
}

static void *zb_rank_main(void *p)
{
    zb_arg *a = p;
    zb_run *r = a->r;
    zinc_engine_t *e = NULL;
    zinc_status s = zb_rank_work(r, a->rank, &e);
    r->st[a->rank] = s;
    if (s != ZINC_OK) {
        if (!r->msg[a->rank][0])
            snprintf(r->msg[a->rank], sizeof r->msg[a->rank], "%s", zinc_last_error(e));
        zinc_world_abort(r->world, a->rank, r->msg[a->rank]);
    }
    zinc_engine_destroy(e);
    return NULL;
}

int zb_parse_list(const char *s, long long *v, int cap, long long lo, long long hi)
{
    /* every element, empty ones too (",5," is refused, not read as "5"), of a list that fits
     * (a longer one was cut short and read as another list) */
    int n = 0;
    char buf[256];
    if ((size_t)snprintf(buf, sizeof buf, "%s", s) >= sizeof buf) return -1;
    for (char *t = buf, *c;; t = c + 1) {
        c = strchr(t, ',');
        if (c) *c = 0;
        if (n == cap || zarg_int64(t, &v[n]) || v[n] < lo || v[n] > hi) return -1;
        n++;
        if (!c) return n;
    }
}

static int bench_zero(int argc, char **argv, int comm)
{
    const char *cmd = comm ? "bench comm" : "bench memory";
    long long params[16], worlds[8], stages[4], groups = 4, accum = 1;
    int np = zb_parse_list(comm ? "4e6" : "1e6,4e6,1.6e7", params, 16, 1, 1LL << 40);
    int nw = zb_parse_list("1,2,4,8", worlds, 8, 1, ZB_MAXW), ns = zb_parse_list("0,1,2,3", stages, 4, 0, 3);
    zinc_dtype dt = ZINC_DTYPE_BF16;
    int json = 0;
    if (zarg_wants_help(argc, argv)) {
        zero_usage(stdout, comm);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        static const char *const opts[] = {"--params", "--worlds", "--stages", "--groups",
                                           "--dtype", NULL};
        if (!zarg_one_of(a, opts) && !(comm && !strcmp(a, "--accum")))
            return zarg_usage_error(cmd, "unknown option '%s'", a);
        if (zarg_value(cmd, a, val)) return 2;
        if (!strcmp(a, "--params")) {
            if ((np = zb_parse_list(val, params, 16, 1, 1LL << 40)) < 0)
                return zarg_usage_error(cmd, "--params wants up to 16 counts >= 1, not '%s'", val);
        } else if (!strcmp(a, "--worlds")) {
            if ((nw = zb_parse_list(val, worlds, 8, 1, ZB_MAXW)) < 0)
                return zarg_usage_error(cmd, "--worlds wants up to 8 sizes 1..%d, not '%s'", ZB_MAXW, val);
        } else if (!strcmp(a, "--stages")) {
            if ((ns = zb_parse_list(val, stages, 4, 0, 3)) < 0)
                return zarg_usage_error(cmd, "--stages wants stages 0..3, not '%s'", val);
        } else if (!strcmp(a, "--accum") && comm) {
            if (zarg_int64(val, &accum) || accum < 1 || accum > 64)
                return zarg_usage_error(cmd, "--accum wants 1..64, not '%s'", val);
        } else if (!strcmp(a, "--groups")) {
            if (zarg_int64(val, &groups) || groups < 1 || groups > 64)
                return zarg_usage_error(cmd, "--groups wants 1..64, not '%s'", val);
        } else if (!strcmp(a, "--dtype")) {
            if (zarg_dtype(val, &dt))
                return zarg_usage_error(cmd, "--dtype is fp16, bf16 or fp32, not '%s'", val);
        } else {
            return zarg_usage_error(cmd, "unknown option '%s'", a);
        }
        i++;
    }
    for (int pi = 0; pi < np; pi++)
        if (params[pi] < groups)
            return zarg_usage_error(cmd, "--params %lld is fewer than --groups %lld", params[pi], groups);
    double d = (double)zinc_dtype_size(dt);
    if (!json) {
        if (comm)
            printf("%12s %3s %5s %14s %14s %8s %14s %8s\n", "params", "N", "stage", "bytes/step",
                   "ZeRO k*Psi", "ratio", "k*Psi_padded", "ratio");
        else
            printf("%12s %3s %5s %14s %14s %8s %12s\n", "params", "N", "stage",
                   "state/rank", "ZeRO formula", "ratio", "buffers");
    }
    for (int pi = 0; pi < np; pi++)
        for (int wi = 0; wi < nw; wi++)
            for (int si = 0; si < ns; si++) {
                int N = (int)worlds[wi], stage = (int)stages[si];
                zb_run *r = calloc(1, sizeof *r);
                zb_arg args[ZB_MAXW];
                pthread_t th[ZB_MAXW];
                if (!r) return 1;
                r->world_size = N, r->stage = stage, r->groups = (int)groups, r->dtype = dt;
                r->params = params[pi], r->run_step = comm, r->accum = (int)accum;
                zinc_status s = zinc_world_create_local(N, &r->world);
                if (s != ZINC_OK) {
                    fprintf(stderr, "zinc %s: local world of %d: %s\n", cmd, N, zinc_last_error(NULL));
                    free(r);
                    return 1;
                }
                int started = 0;
                for (int k = 0; k < N; k++) {
                    args[k] = (zb_arg){r, k};
                    if (pthread_create(&th[k], NULL, zb_rank_main, &args[k])) {
                        /* The started ranks would wait for this one in finalize: release them. */
                        zinc_world_abort(r->world, k, "zinc bench: could not start the thread");
                        break;
                    }
                    started++;
                }
                for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
                zinc_world_destroy(r->world);
                if (started < N) {
                    fprintf(stderr, "zinc %s: could not start %d threads\n", cmd, N);
                    free(r);
                    return 1;
                }
                int bad = -1;
                for (int k = 0; k < N && bad < 0; k++)
                    if (r->st[k] != ZINC_OK && r->st[k] != ZINC_ERR_ABORTED) bad = k;
                for (int k = 0; k < N && bad < 0; k++)
                    if (r->st[k] != ZINC_OK) bad = k;
                if (bad >= 0) {
                    fprintf(stderr, "zinc %s: %lld params, N=%d, stage %d: rank %d: %s: %s\n", cmd,
                            params[pi], N, stage, bad, zinc_status_string(r->st[bad]), r->msg[bad]);
                    free(r);
                    return 1;
                }
                /* Psi as the paper counts it, and Psi padded the way shard/plan.h documents it
                 * (each group to a multiple of 32 * N elements), both computed here. */
                double psi = (double)params[pi], psi_pad = 0.0;
                for (int g = 0; g < r->groups; g++) {
                    long long unit = 32LL * N, n = zb_group_numel(r, g);
                    psi_pad += (double)((n + unit - 1) / unit * unit);
                }
                if (comm) {
                    /* The rank-0 counters; the stats all-reduce (2 doubles, counted 2x) aside. */
                    uint64_t *b = r->comm[0], tot = 0;
                    for (int c = 0; c < ZINC_COLL_COUNT; c++) tot += b[c];
                    /* With K micro-steps stages 2-3 reduce-scatter and stage 3 gathers at
                     * every one (docs/comm-volume.md). */
                    double K = (double)accum, stats = 32.0;
                    double k = stage == 3 ? 3.0 * K : stage == 2 ? 1.0 + K : 2.0;
                    double zero = k * psi * d, zpad = k * psi_pad * d;
                    if (json)
                        printf("{\"bench\": \"comm\", \"params\": %lld, \"world\": %d, \"stage\": %d, "
                               "\"dtype\": \"%s\", \"groups\": %d, \"accum\": %lld, \"all_reduce\": %llu, "
                               "\"reduce_scatter\": %llu, \"all_gather\": %llu, \"broadcast\": %llu, "
                               "\"total\": %llu, \"k\": %.0f, \"zero_bytes\": %.0f, "
                               "\"zero_padded_bytes\": %.0f, \"stats_bytes\": %.0f, "
                               "\"ratio\": %.6f, \"ratio_padded\": %.6f}\n",
                               params[pi], N, stage, zinc_dtype_name(dt), r->groups, accum,
                               (unsigned long long)b[ZINC_COLL_ALL_REDUCE],
                               (unsigned long long)b[ZINC_COLL_REDUCE_SCATTER],
                               (unsigned long long)b[ZINC_COLL_ALL_GATHER],
                               (unsigned long long)b[ZINC_COLL_BROADCAST], (unsigned long long)tot,
                               k, zero, zpad, stats, (double)tot / zero,
                               ((double)tot - stats) / zpad);
                    else
                        printf("%12lld %3d %5d %14llu %14.0f %8.4f %14.0f %8.4f\n", params[pi], N,
                               stage, (unsigned long long)tot, zero, (double)tot / zero, zpad,
                               ((double)tot - stats) / zpad);
                } else {
                    uint64_t *al = r->alloc[0];
                    double state = (double)(al[ZINC_MEM_PARAM16] + al[ZINC_MEM_GRAD] +
                                            al[ZINC_MEM_MASTER] + al[ZINC_MEM_ADAM_M] +
                                            al[ZINC_MEM_ADAM_V]);
                    double buffers = (double)(al[ZINC_MEM_BUCKET] + al[ZINC_MEM_GATHER]);
                    /* ZeRO paper, section 5: 16-bit params and grads, K = 12 bytes of fp32
                     * optimizer state (master, m, v) per param; stage s partitions the
                     * optimizer state (1), then the gradients (2), then the params (3). */
                    double par = stage >= 3 ? d * psi / N : d * psi;
                    double grd = stage >= 2 ? d * psi / N : d * psi;
                    double opt = stage >= 1 ? 12.0 * psi / N : 12.0 * psi;
                    /* fp32 at stages 0 and 3: the working copy is the master (same layout), so
                     * the optimizer state is only m and v, as in DeepSpeed's fp32 training. */
                    if (dt == ZINC_DTYPE_FP32 && (stage == 0 || stage == 3)) opt = opt * 8.0 / 12.0;
                    double formula = par + grd + opt;
                    if (json) {
                        printf("{\"bench\": \"memory\", \"params\": %lld, \"world\": %d, "
                               "\"stage\": %d, \"dtype\": \"%s\", \"groups\": %d, ",
                               params[pi], N, stage, zinc_dtype_name(dt), r->groups);
                        for (int c = 0; c < ZINC_MEM_COUNT; c++)
                            printf("\"%s\": %llu, ", zinc_mem_category_name((zinc_mem_category)c),
                                   (unsigned long long)al[c]);
                        printf("\"state_bytes\": %.0f, \"formula_bytes\": %.0f, \"ratio\": %.6f, "
                               "\"buffer_bytes\": %.0f, \"psi_padded\": %.0f}\n",
                               state, formula, state / formula, buffers, psi_pad);
                    } else {
                        printf("%12lld %3d %5d %14.0f %14.0f %8.4f %12.0f\n", params[pi], N,
                               stage, state, formula, state / formula, buffers);
                    }
                }
                fflush(stdout);
                free(r);
            }
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "adam")) return bench_adam(argc - 1, argv + 1);
    if (!strcmp(argv[1], "memory")) return bench_zero(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "comm")) return bench_zero(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "offload")) return bench_offload(argc - 1, argv + 1);
    return zarg_usage_error("bench", "unknown benchmark '%s'; the benchmarks are: adam, memory, "
                            "comm, offload", argv[1]);
}
