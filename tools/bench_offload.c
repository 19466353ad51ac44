/*
 * bench_offload.c — `zinc bench offload`: the optimizer step with the state on the device and with
 * offload_optimizer {"device": "cpu"}, side by side in one run, and where each one's time goes
 * (zinc_step_seconds: reduce, stats, Adam, copies, gather).
 *
 * One rank (a world of one) on the cpu device: the engine of a synthetic model of --params
 * elements in --groups equal groups, its gradient views filled with a fixed non-zero pattern
 * before every step (outside the timing), then zinc_step timed. Without a GPU the "device" is
 * host memory too, so the copies are memcpy and they cannot overlap the host Adam (the cpu
 * device runs a copy when the host waits for it): the figures show what the offloaded step adds
 * on one machine, not a GPU's PCIe transfers.
 *
 * --nvme DIR adds a third row: offload_optimizer {"device": "nvme", "nvme_path": DIR} (pipelined
 * reads and writes), with the bytes it reads and writes per step (zinc_nvme_bytes) and, measured
 * in the same run on a file in DIR, the disk's sequential read and write bandwidth through the
 * same store (engine/nvme_store.c, 16 MB requests as the step's): the step's I/O bound is then
 * read/read-bandwidth + written/write-bandwidth + the row's own host Adam time, and the row says
 * its step's ratio to that bound (issue 39's goal: within 1.3). --nvme-checksum off|both runs
 * that row with "zinc": {"nvme_checksum": false} instead of, or as well as, with it (the default),
 * so the checksum's cost is a ratio of two rows of one run on one build.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/nvme_store.h"
#include "kernels/device.h"
#include "tools/bench.h"
#include "tools/commands.h"
#include "zinc.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zinc bench offload [--params LIST] [--stage 1|2|3] [--dtype fp16|bf16|fp32]\n"
            "                          [--groups G] [--repeat R] [--threads T] [--nvme DIR]\n"
            "                          [--nvme-checksum on|off|both] [--disk-mb MB]\n"
            "                          [--aio-block-size B] [--aio-queue-depth Q] [--json]\n\n"
            "The optimizer step of one rank with the Adam state on the device and with\n"
            "zero_optimization.offload_optimizer {\"device\": \"cpu\"}, side by side, and the\n"
            "split of each step (zinc_step_seconds), medians of R timed steps after one warm-up.\n\n"
            "  --params LIST   comma-separated parameter counts (default 1e7,1e8)\n"
            "  --stage S       ZeRO stage (default 2)\n"
            "  --dtype D       working dtype (default bf16)\n"
            "  --groups G      equal parameter groups, 1..1024 (default 16)\n"
            "  --repeat R      timed steps, 1..100 (default 5)\n"
            "  --threads T     cpu threads, 0 = online CPUs (default 0)\n"
            "  --nvme DIR      also offload_optimizer {\"device\": \"nvme\"} with nvme_path DIR, and\n"
            "                  DIR's disk bandwidth measured in the same run (a scratch file there)\n"
            "  --nvme-checksum on|off|both\n"
            "                  the NVMe row with zinc.nvme_checksum on (default), off (row\n"
            "                  'nvme-nosum'), or both rows side by side\n"
            "  --disk-mb MB    size of that measurement, 16..2048, at least the largest state\n"
            "                  file (default 1024: smaller files may be served from a cache)\n"
            "  --aio-block-size B, --aio-queue-depth Q\n"
            "                  the config's aio.block_size and aio.queue_depth for the NVMe row\n"
            "                  and the bandwidth measurement (default DeepSpeed's, 1048576 and 8)\n"
            "  --json          one JSON object per row on stdout\n\n"
            "exit codes: 0 done, 1 runtime failure (e.g. out of memory), 2 bad usage\n");
}

typedef struct {
    double step[100];                        /* per timed step, seconds */
    double phase[100][ZINC_PHASE_COUNT];     /* per timed step */
    uint64_t device_bytes, host_bytes;       /* allocated */
    uint64_t io_read, io_written;            /* nvme: bytes per timed step */
    int checksum;                            /* nvme: zinc.nvme_checksum as the engine resolved it */
} ob_result;

/* Where the state lives in a run (OB_NVME_NOSUM: on NVMe with zinc.nvme_checksum false). */
enum { OB_DEVICE, OB_CPU, OB_NVME, OB_NVME_NOSUM, OB_STATES };
static const char *const state_names[OB_STATES] = {"device", "offload", "nvme", "nvme-nosum"};

/* Fills n elements of dtype dt at dst by repeating `pattern` (chunk elements). */
static void fill_grad(void *dst, zinc_dtype dt, size_t n, const void *pattern, size_t chunk)
{
    size_t es = zinc_dtype_size(dt);
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        memcpy((char *)dst + off * es, pattern, k * es);
    }
}

static int run_one(long long params, int stage, zinc_dtype dt, int groups, int repeat, int threads,
                   int where, const char *nvme_dir, long long block, long long depth,
                   ob_result *out)
{
    char off_json[1400] = "";
    if (where == OB_CPU) snprintf(off_json, sizeof off_json, ", \"offload_optimizer\": {\"device\": \"cpu\"}");
    int nvme = where == OB_NVME || where == OB_NVME_NOSUM;
    if (nvme)
        snprintf(off_json, sizeof off_json, ", \"offload_optimizer\": {\"device\": \"nvme\", "
                 "\"nvme_path\": \"%s\", \"pipeline_read\": true, \"pipeline_write\": true}", nvme_dir);
    char aio[160] = "";
    if (nvme)
        snprintf(aio, sizeof aio, " \"aio\": {\"block_size\": %lld, \"queue_depth\": %lld},%s",
                 block, depth,
                 where == OB_NVME_NOSUM ? " \"zinc\": {\"nvme_checksum\": false}," : "");
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"gradient_clipping\": 1.0,%s"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}},"
             " \"%s\": {\"enabled\": %s},"
             " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0%s}}",
             aio, dt == ZINC_DTYPE_FP16 ? "fp16" : "bf16", dt == ZINC_DTYPE_FP32 ? "false" : "true",
             stage, off_json);
    zinc_engine_options_t o = {.config_json = cfg, .threads = threads};
    zinc_engine_t *e = NULL;
    zinc_status s = zinc_engine_create(&o, &e);
    int *pid = calloc((size_t)groups, sizeof *pid);
    enum { CHUNK = 1 << 16 };
    void *pattern = malloc(CHUNK * 4);
    if (!pid || !pattern) s = ZINC_ERR_NOMEM;
    for (int g = 0; g < groups && s == ZINC_OK; g++) {
        char name[32];
        int gid;
        snprintf(name, sizeof name, "layer%d", g);
        s = zinc_group_add(e, name, &gid);
        long long q = params / groups;
        int64_t shape[1] = {g == groups - 1 ? params - q * (groups - 1) : q};
        snprintf(name, sizeof name, "layer%d.w", g);
        if (s == ZINC_OK) s = zinc_param_add(e, gid, name, 1, shape, dt, &pid[g]);
    }
    if (s == ZINC_OK) s = zinc_finalize(e);
    /* Read back from the engine rather than assumed from the request: the row then says what ran
     * (the resolved config names nvme_checksum only when it is off). */
    out->checksum = nvme && !strstr(zinc_engine_config_json(e), "\"nvme_checksum\": false");
    /* Small gradients of both signs, well inside fp16's range: every step is applied. */
    if (pattern)
        for (size_t i = 0; i < CHUNK; i++)
            zk_store(pattern, dt, i, 1e-3f * (float)((int)(i % 17) - 8));
    uint64_t rd0 = 0, wr0 = 0, rd1 = 0, wr1 = 0;
    for (int it = 0; it <= repeat && s == ZINC_OK; it++) {
        if (it == 1) zinc_nvme_bytes(e, NULL, &rd0, &wr0);
        for (int g = groups - 1; g >= 0 && s == ZINC_OK; g--) {
            void *gv = NULL;
            s = zinc_gather(e, g);
            if (s == ZINC_OK) s = zinc_param_grad(e, pid[g], &gv);
            if (s == ZINC_OK) fill_grad(gv, dt, (size_t)zinc_param_numel(e, pid[g]), pattern, CHUNK);
            if (s == ZINC_OK) s = zinc_release(e, g);
            if (s == ZINC_OK) s = zinc_grads_ready(e, g);
        }
        double before[ZINC_PHASE_COUNT], after[ZINC_PHASE_COUNT];
        zinc_step_info_t info;
        if (s == ZINC_OK) s = zinc_step_seconds(e, before);
        double t0 = zb_now();
        if (s == ZINC_OK) s = zinc_step(e, &info);
        double t1 = zb_now();
        if (s == ZINC_OK) s = zinc_step_seconds(e, after);
        if (s == ZINC_OK && !info.applied) {
            fprintf(stderr, "zinc bench offload: step %d was not applied\n", it);
            s = ZINC_ERR_INTERNAL;
        }
        if (s == ZINC_OK && it > 0) {
            out->step[it - 1] = t1 - t0;
            for (int p = 0; p < ZINC_PHASE_COUNT; p++) out->phase[it - 1][p] = after[p] - before[p];
        }
    }
    if (s == ZINC_OK) zinc_nvme_bytes(e, NULL, &rd1, &wr1);
    out->io_read = (rd1 - rd0) / (uint64_t)repeat;
    out->io_written = (wr1 - wr0) / (uint64_t)repeat;
    uint64_t planned[ZINC_MEM_COUNT], dev[ZINC_MEM_COUNT], host[ZINC_MEM_COUNT];
    if (s == ZINC_OK) s = zinc_memory(e, planned, dev);
    if (s == ZINC_OK) s = zinc_memory_host(e, planned, host);
    out->device_bytes = out->host_bytes = 0;
    for (int c = 0; c < ZINC_MEM_COUNT && s == ZINC_OK; c++) {
        out->device_bytes += dev[c];
        out->host_bytes += host[c];
    }
    if (s != ZINC_OK)
        fprintf(stderr, "zinc bench offload: %lld params, stage %d, %s: %s: %s\n", params, stage,
                state_names[where], zinc_status_string(s), zinc_last_error(e));
    free(pid);
    free(pattern);
    zinc_engine_destroy(e);
    return s == ZINC_OK ? 0 : 1;
}

/* DIR's sequential write and read bandwidth (bytes/s) through the NVMe store, with the step's
 * request shape (aio.block_size bytes per request, aio.queue_depth in flight): `bytes` written,
 * waited, read back, waited. */
static int disk_bandwidth(const char *dir, uint64_t bytes, size_t block, int depth, double *rd,
                          double *wr)
{
    uint64_t n = (bytes + block - 1) / block;
    char err[1024];
    znvme_t *f = NULL;
    void *buf = NULL;
    zinc_status s = znvme_open(dir, 0, n * block, depth, &f, err, sizeof err);
    if (s == ZINC_OK && posix_memalign(&buf, 4096, (size_t)depth * block) != 0) {
        snprintf(err, sizeof err, "out of memory");
        s = ZINC_ERR_NOMEM;
    }
    if (buf) memset(buf, 0x5a, (size_t)depth * block);
    uint64_t t = 0;
    uint64_t *tk = calloc((size_t)depth, sizeof *tk);
    if (!tk) s = ZINC_ERR_NOMEM;
    for (int pass = 0; pass < 2 && s == ZINC_OK; pass++) {
        double t0 = zb_now();
        /* `depth` buffers in rotation: one is reused once its call `depth` back is done */
        for (uint64_t b = 0; b < n && s == ZINC_OK; b++) {
            char *p = (char *)buf + (b % (uint64_t)depth) * block;
            if (b >= (uint64_t)depth) s = znvme_wait(f, tk[b % (uint64_t)depth]);
            if (s == ZINC_OK)
                s = pass == 0 ? znvme_write_async(f, b * block, p, block, &t)
                              : znvme_read_async(f, b * block, p, block, &t);
            tk[b % (uint64_t)depth] = t;
        }
        if (s == ZINC_OK) s = znvme_wait(f, t);
        double dt = zb_now() - t0;
        *(pass == 0 ? wr : rd) = (double)(n * block) / (dt > 0 ? dt : 1e-9);
    }
    if (s != ZINC_OK)
        fprintf(stderr, "zinc bench offload: measuring %s's bandwidth: %s\n", dir,
                f ? znvme_error(f) : err);
    free(buf);
    free(tk);
    znvme_close(f);
    return s == ZINC_OK ? 0 : 1;
}

static const char *const phase_names[ZINC_PHASE_COUNT] = {"reduce", "stats", "adam", "copy",
                                                          "gather"};

int bench_offload(int argc, char **argv)
{
    const char *cmd = "bench offload";
    long long params[16], stage = 2, groups = 16, repeat = 5, threads = 0;
    int np = zb_parse_list("1e7,1e8", params, 16, 1, 1LL << 40), json = 0;
    const char *nvme_dir = NULL;
    int sum_on = 1, sum_off = 0, sum_given = 0;   /* --nvme-checksum: which NVMe rows */
    long long disk_mb = 1024, block = 1048576, depth = 8;   /* aio: DeepSpeed's defaults */
    zinc_dtype dt = ZINC_DTYPE_BF16;
    if (zarg_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        static const char *const opts[] = {"--params", "--stage", "--groups", "--repeat",
                                           "--threads", "--nvme", "--aio-block-size",
                                           "--aio-queue-depth", "--disk-mb", "--dtype",
                                           "--nvme-checksum", NULL};
        if (!zarg_one_of(a, opts)) return zarg_usage_error(cmd, "unknown option '%s'", a);
        if (zarg_value(cmd, a, val)) return 2;
        if (!strcmp(a, "--params")) {
            if ((np = zb_parse_list(val, params, 16, 1, 1LL << 40)) < 0)
                return zarg_usage_error(cmd, "--params wants up to 16 counts >= 1, not '%s'", val);
        } else if (!strcmp(a, "--stage")) {
            if (zarg_int64(val, &stage) || stage < 1 || stage > 3)
                return zarg_usage_error(cmd, "--stage wants 1, 2 or 3 (offload needs a sharded "
                                        "optimizer state), not '%s'", val);
        } else if (!strcmp(a, "--groups")) {
            if (zarg_int64(val, &groups) || groups < 1 || groups > 1024)
                return zarg_usage_error(cmd, "--groups wants 1..1024, not '%s'", val);
        } else if (!strcmp(a, "--repeat")) {
            if (zarg_int64(val, &repeat) || repeat < 1 || repeat > 100)
                return zarg_usage_error(cmd, "--repeat wants 1..100, not '%s'", val);
        } else if (!strcmp(a, "--threads")) {
            if (zarg_int64(val, &threads) || threads < 0 || threads > ZINC_MAX_THREADS)
                return zarg_usage_error(cmd, "--threads wants 0..%d, not '%s'", ZINC_MAX_THREADS,
                                        val);
        } else if (!strcmp(a, "--nvme")) {
            nvme_dir = val;
        } else if (!strcmp(a, "--nvme-checksum")) {
            sum_given = 1;
            sum_on = !strcmp(val, "on") || !strcmp(val, "both");
            sum_off = !strcmp(val, "off") || !strcmp(val, "both");
            if (!sum_on && !sum_off)
                return zarg_usage_error(cmd, "--nvme-checksum wants on, off or both, not '%s'", val);
        } else if (!strcmp(a, "--aio-block-size")) {
            if (zarg_int64(val, &block) || block < 4096 || block > (1 << 30) || block % 4096)
                return zarg_usage_error(cmd, "--aio-block-size wants a multiple of 4096 up to "
                                        "2^30, not '%s'", val);
        } else if (!strcmp(a, "--aio-queue-depth")) {
            if (zarg_int64(val, &depth) || depth < 1 || depth > 4096)
                return zarg_usage_error(cmd, "--aio-queue-depth wants 1..4096, not '%s'", val);
        } else if (!strcmp(a, "--disk-mb")) {
            if (zarg_int64(val, &disk_mb) || disk_mb < 16 || disk_mb > 2048)
                return zarg_usage_error(cmd, "--disk-mb wants 16..2048, not '%s'", val);
        } else if (!strcmp(a, "--dtype")) {
            if (zarg_dtype(val, &dt))
                return zarg_usage_error(cmd, "--dtype is fp16, bf16 or fp32, not '%s'", val);
        } else {
            return zarg_usage_error(cmd, "unknown option '%s'", a);
        }
        i++;
    }
    if (!nvme_dir && sum_given)
        return zarg_usage_error(cmd, "--nvme-checksum chooses the NVMe rows: give --nvme DIR too");
    for (int pi = 0; pi < np; pi++)
        if (params[pi] < groups)
            return zarg_usage_error(cmd, "--params %lld is fewer than --groups %lld", params[pi], groups);
    /* the scratch directory, before anything is measured (the engine would refuse it after the
     * disk's measurement and the device rows: a usage error found minutes late) */
    if (nvme_dir && zarg_writable_dir(cmd, "--nvme", nvme_dir)) return 2;
    double disk_rd = 0.0, disk_wr = 0.0;
    if (nvme_dir) {
        /* The largest case's state file (12 bytes per parameter), at least --disk-mb (a small
         * file can sit in the disk's or the hypervisor's cache and overstate the bandwidth),
         * at most 2 GiB. */
        long long big = 0;
        for (int pi = 0; pi < np; pi++) big = params[pi] > big ? params[pi] : big;
        uint64_t bytes = (uint64_t)big * 12 < (2ULL << 30) ? (uint64_t)big * 12 : (2ULL << 30);
        if (bytes < (uint64_t)disk_mb << 20) bytes = (uint64_t)disk_mb << 20;
        if (!json) fprintf(stderr, "zinc bench offload: measuring %s's bandwidth (%.0f MB) ...\n",
                           nvme_dir, (double)bytes / 1e6);
        if (disk_bandwidth(nvme_dir, bytes, (size_t)block, (int)depth, &disk_rd, &disk_wr)) return 1;
        if (!json)
            printf("disk %s: sequential write %.2f GB/s, read %.2f GB/s (%lld-byte requests, %lld "
                   "in flight, as the NVMe row's aio)\n", nvme_dir, disk_wr / 1e9, disk_rd / 1e9,
                   block, depth);
    }
    /* The rows, in order: the device run, then the offloaded ones, on the same model. */
    int states[OB_STATES], nstates = 0;
    states[nstates++] = OB_DEVICE;
    states[nstates++] = OB_CPU;
    if (nvme_dir && sum_on) states[nstates++] = OB_NVME;
    if (nvme_dir && sum_off) states[nstates++] = OB_NVME_NOSUM;
    if (!json)
        printf("%12s %-10s %10s %8s %8s %8s %8s %8s %8s %10s %9s %9s%s\n", "params", "state",
               "step ms", "reduce", "stats", "adam", "copy", "gather", "other", "vs device",
               "dev GB", "host GB", nvme_dir ? "  io MB/step  bound ms  vs bound" : "");
    ob_result *r = calloc(OB_STATES, sizeof *r);
    if (!r) return 1;
    for (int pi = 0; pi < np; pi++) {
        for (int si = 0; si < nstates; si++) {
            int off = states[si];
            if (!json) fprintf(stderr, "zinc bench offload: %lld params, %s ...\n", params[pi],
                               state_names[off]);
            if (run_one(params[pi], (int)stage, dt, (int)groups, (int)repeat, (int)threads, off,
                        nvme_dir, block, depth, &r[off])) {
                free(r);
                return 1;
            }
        }
        double med_step[OB_STATES], med_adam[OB_STATES];
        for (int si = 0; si < nstates; si++) {
            int off = states[si], nvme = off == OB_NVME || off == OB_NVME_NOSUM;
            double t[100], ph[ZINC_PHASE_COUNT];
            memcpy(t, r[off].step, (size_t)repeat * sizeof *t);
            med_step[off] = zb_summarize(t, (int)repeat).median;
            double sum = 0.0;
            for (int p = 0; p < ZINC_PHASE_COUNT; p++) {
                for (int k = 0; k < repeat; k++) t[k] = r[off].phase[k][p];
                ph[p] = zb_summarize(t, (int)repeat).median;
                sum += ph[p];
            }
            med_adam[off] = ph[ZINC_PHASE_ADAM];
            double other = med_step[off] - sum > 0.0 ? med_step[off] - sum : 0.0;
            double ratio = med_step[off] / med_step[OB_DEVICE];
            /* nvme: the I/O at the disk's measured bandwidth plus the host Adam */
            double bound = nvme ? (double)r[off].io_read / disk_rd +
                                                (double)r[off].io_written / disk_wr + ph[ZINC_PHASE_ADAM]
                                          : 0.0;
            if (json) {
                printf("{\"bench\": \"offload\", \"params\": %lld, \"stage\": %lld, \"dtype\": "
                       "\"%s\", \"groups\": %lld, \"threads\": %lld, \"offload\": %s, "
                       "\"repeat\": %lld, \"step_ms_median\": %.4f, ",
                       params[pi], stage, zinc_dtype_name(dt), groups, threads,
                       off ? "true" : "false", repeat, 1e3 * med_step[off]);
                printf("\"state\": \"%s\", ", state_names[off]);
                if (nvme)
                    printf("\"nvme_checksum\": %s, ", r[off].checksum ? "true" : "false");
                if (nvme)
                    printf("\"nvme_read_bytes_per_step\": %llu, \"nvme_written_bytes_per_step\": "
                           "%llu, \"disk_read_GBps\": %.4f, \"disk_write_GBps\": %.4f, "
                           "\"io_bound_ms\": %.4f, \"ratio_vs_io_bound\": %.4f, ",
                           (unsigned long long)r[off].io_read, (unsigned long long)r[off].io_written,
                           disk_rd / 1e9, disk_wr / 1e9, 1e3 * bound, med_step[off] / bound);
                for (int p = 0; p < ZINC_PHASE_COUNT; p++)
                    printf("\"%s_ms_median\": %.4f, ", phase_names[p], 1e3 * ph[p]);
                printf("\"other_ms\": %.4f, \"ratio_vs_device\": %.4f, \"device_bytes\": %llu, "
                       "\"host_bytes\": %llu}\n",
                       1e3 * other, ratio, (unsigned long long)r[off].device_bytes,
                       (unsigned long long)r[off].host_bytes);
            } else {
                printf("%12lld %-10s %10.2f", params[pi], state_names[off], 1e3 * med_step[off]);
                for (int p = 0; p < ZINC_PHASE_COUNT; p++) printf(" %8.2f", 1e3 * ph[p]);
                printf(" %8.2f %10.3f %9.3f %9.3f", 1e3 * other, ratio,
                       (double)r[off].device_bytes / 1e9, (double)r[off].host_bytes / 1e9);
                if (nvme)
                    printf("  %11.1f %9.2f %9.3f",
                           (double)(r[off].io_read + r[off].io_written) / 1e6, 1e3 * bound,
                           med_step[off] / bound);
                printf("\n");
            }
        }
        if (!json && nvme_dir && sum_on && sum_off)
            printf("%12lld checksum: step %.2f ms with, %.2f ms without (x%.3f); host part (adam) "
                   "%.2f vs %.2f ms\n", params[pi], 1e3 * med_step[OB_NVME],
                   1e3 * med_step[OB_NVME_NOSUM], med_step[OB_NVME] / med_step[OB_NVME_NOSUM],
                   1e3 * med_adam[OB_NVME], 1e3 * med_adam[OB_NVME_NOSUM]);
        fflush(stdout);
    }
    free(r);
    return 0;
}
