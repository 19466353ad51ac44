/*
 * plan_calibrate.c — `zinc plan --calibrate` (issue 41): the machine figures the plan prices with,
 * measured here instead of taken from a datasheet, written to a JSON file that `zinc plan
 * --calibration FILE` reads in place of the GPU table's row.
 *
 *   compute   FLOP/s one rank achieves on the built-in model's forward and backward: `zinc train
 *             --ranks 1 --threads T --model SPEC` (this binary, a child process), the median
 *             model time of the logged steps after the first third, (6·P + 12·L·D·T) FLOPs per
 *             token — so the plan's efficiency is 1 against it;
 *   optimizer bytes/s of the fused Adam step on the device: `zinc bench adam --json` (28 bytes per
 *             parameter in fp16/bf16);
 *   links     α (seconds per ring step) and β (bytes/s per rank per direction) of the comm this
 *             machine's ranks use: all-gathers and reduce-scatters of 4 KiB to 64 MiB over a
 *             local world of `ranks` threads (zinc's thread comm), fitted by least squares to
 *             t = (N−1)·α + (N−1)/N · bytes/β.
 * Each figure is a median of repeats; the file records how it was measured.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/files.h"
#include "engine/internal.h"
#include "models/gpt.h"
#include "shard/comm.h"
#include "tools/bench.h"
#include "tools/plan.h"

/* ---- links: collectives over a local world -------------------------------------------------- */

#define CAL_SIZES 6
static const size_t cal_bytes[CAL_SIZES] = {4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
#define CAL_REPEAT 7

typedef struct {
    zlocal_world_t *w;
    int rank, ranks;
    double t[2][CAL_SIZES]; /* rank 0: median seconds, [0] all-gather, [1] reduce-scatter */
    zinc_status status;
} cal_rank;

static void *cal_rank_main(void *p)
{
    cal_rank *r = p;
    zcomm_t *c = NULL;
    r->status = zcomm_local_create(r->w, r->rank, &c);
    if (r->status != ZINC_OK) return NULL;
    char *buf = calloc(1, cal_bytes[CAL_SIZES - 1]);
    if (!buf) r->status = ZINC_ERR_NOMEM;
    for (int op = 0; op < 2 && r->status == ZINC_OK; op++)
        for (int s = 0; s < CAL_SIZES && r->status == ZINC_OK; s++) {
            size_t n = cal_bytes[s] / 2; /* bf16 elements, a multiple of the ranks */
            n -= n % (size_t)r->ranks;
            double t[CAL_REPEAT + 1];
            for (int k = 0; k <= CAL_REPEAT && r->status == ZINC_OK; k++) {
                r->status = zcomm_barrier(c);
                double t0 = zb_now();
                if (r->status == ZINC_OK)
                    r->status = op == 0 ? zcomm_all_gather(c, buf, n, ZDT_BF16)
                                        : zcomm_reduce_scatter(c, buf, n, ZDT_BF16, 1.0f);
                t[k] = zb_now() - t0;
            }
            if (r->status == ZINC_OK) r->t[op][s] = zb_summarize(t + 1, CAL_REPEAT).median;
        }
    free(buf);
    zcomm_destroy(c);
    return NULL;
}

/* Least squares of t = a·x + b·y over the sizes (x = N−1, y = (N−1)/N · bytes): α = a, β = 1/b.
 * Each size's equation is divided by its time (relative errors), so that the 64 MiB transfers do
 * not decide α alone, which the small ones measure. */
static void fit_link(const double *t, int ranks, double *alpha, double *beta)
{
    double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
    for (int s = 0; s < CAL_SIZES; s++) {
        double w = 1.0 / t[s];
        double x = (ranks - 1) * w, y = (double)(ranks - 1) / ranks * (double)cal_bytes[s] * w;
        sxx += x * x, sxy += x * y, syy += y * y, sxt += x, syt += y;
    }
    double det = sxx * syy - sxy * sxy;
    double a = (sxt * syy - syt * sxy) / det, b = (sxx * syt - sxy * sxt) / det;
    if (a < 0 || b <= 0) { /* a fit through noise: fall back to the smallest and largest sizes */
        a = t[0] / (ranks - 1);
        b = (t[CAL_SIZES - 1] - t[0]) /
            ((double)(ranks - 1) / ranks * (double)(cal_bytes[CAL_SIZES - 1] - cal_bytes[0]));
        if (b <= 0) b = t[CAL_SIZES - 1] / ((double)(ranks - 1) / ranks * cal_bytes[CAL_SIZES - 1]);
    }
    *alpha = a;
    *beta = 1.0 / b;
}

static int measure_links(int ranks, double t[2][CAL_SIZES], char *err, size_t len)
{
    zlocal_world_t *w = NULL;
    if (zlocal_world_create(ranks, &w) != ZINC_OK) {
        snprintf(err, len, "could not create a local world of %d ranks", ranks);
        return -1;
    }
    cal_rank r[64];
    pthread_t th[64];
    for (int i = 0; i < ranks; i++) {
        r[i] = (cal_rank){.w = w, .rank = i, .ranks = ranks};
        pthread_create(&th[i], NULL, cal_rank_main, &r[i]);
    }
    zinc_status s = ZINC_OK;
    for (int i = 0; i < ranks; i++) {
        pthread_join(th[i], NULL);
        if (r[i].status != ZINC_OK && s == ZINC_OK) s = r[i].status;
    }
    zlocal_world_destroy(w);
    if (s != ZINC_OK) {
        snprintf(err, len, "a collective of the local world failed: %s", zinc_status_string(s));
        return -1;
    }
    memcpy(t, r[0].t, sizeof r[0].t);
    return 0;
}

/* ---- compute and optimizer: this binary as a child ---------------------------------------- */

/* Runs `cmd` and returns its stdout (malloc'd), NULL when it fails. */
static char *run_child(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    for (size_t k; out && (k = fread(out + n, 1, cap - 1 - n, f)) > 0;) {
        n += k;
        if (n + 1 >= cap) {
            char *bigger = realloc(out, cap *= 2);
            if (!bigger) free(out);
            out = bigger;
        }
    }
    int rc = pclose(f);
    if (!out || rc != 0) {
        free(out);
        return NULL;
    }
    out[n] = 0;
    return out;
}

/* The number under `key` of a JSON object, -1 when absent or not a number. */
static double number_of(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return -1.0;
    return json_object_get_double(v);
}

/* The number under `key` of the JSON object in text (one line of a child's output). */
static double number_in(const char *text, const char *key)
{
    json_object *o = json_tokener_parse(text);
    double x = number_of(o, key);
    json_object_put(o);
    return x;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The built-in model at `spec`: FLOP/s of its forward and backward on one rank. */
static int measure_compute(const char *self, const char *spec, int threads, const char *device,
                           double *flops, double *model_ms, char *err, size_t len)
{
    char dir[] = "/tmp/zinc-calibrate-XXXXXX";
    if (!mkdtemp(dir)) {
        snprintf(err, len, "cannot create a temporary directory");
        return -1;
    }
    /* Every step logged (steps_per_print 1), stage 0, bf16: the model's time apart from zinc's. */
    char cfg[128], met[128], cmd[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(met, sizeof met, "%s/metrics.jsonl", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) {
        snprintf(err, len, "cannot write %s", cfg);
        return -1;
    }
    fprintf(f, "{\"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 1, \"bf16\": "
               "{\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": "
               "0.001}}, \"zero_optimization\": {\"stage\": 0}}\n");
    fclose(f);
    const int steps = 15;
    snprintf(cmd, sizeof cmd, "'%s' train --ranks 1 --threads %d --device %s --model %s --steps %d "
             "--config '%s' --metrics '%s' >/dev/null 2>&1 && cat '%s'", self, threads, device,
             spec, steps, cfg, met, met);
    char *out = run_child(cmd);
    double ms[64];
    int n = 0;
    /* One JSON object per logged step (--metrics). */
    for (char *save = NULL, *line = out ? strtok_r(out, "\n", &save) : NULL; line && n < 64;
         line = strtok_r(NULL, "\n", &save)) {
        json_object *o = json_tokener_parse(line);
        if (number_of(o, "step") > steps / 3 && number_of(o, "model_ms") > 0)
            ms[n++] = number_of(o, "model_ms");
        json_object_put(o);
    }
    free(out);
    unlink(met), unlink(cfg), rmdir(dir);
    zm_spec sp;
    char perr[256];
    if (n < 3 || zm_spec_parse(spec, &sp, perr, sizeof perr)) {
        snprintf(err, len, "zinc train --model %s gave %d timed steps (%s)", spec, n,
                 n < 3 ? "it failed or logged too few" : perr);
        return -1;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_d);
    *model_ms = ms[n / 2];
    double P = (double)zm_param_total(&sp), tokens = 4.0 * sp.T;
    *flops = (6.0 * P + 12.0 * sp.L * sp.D * sp.T) * tokens / (*model_ms / 1e3);
    return 0;
}

static int measure_adam(const char *self, int threads, const char *device, double *bytes_per_s,
                        char *err, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' bench adam --device %s --threads %d --params 1e7 --dtype bf16 "
             "--repeat 7 --no-torch --json 2>/dev/null", self, device, threads);
    char *out = run_child(cmd);
    double gb = out ? number_in(out, "gbytes_per_s") : -1.0;
    free(out);
    if (gb <= 0) {
        snprintf(err, len, "zinc bench adam --device %s failed", device);
        return -1;
    }
    *bytes_per_s = gb * 1e9;
    return 0;
}

static double host_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
}

int zplan_calibrate(const char *self, const char *out_path, const char *spec, int ranks,
                    int threads)
{
    const char *device = "cpu";   /* a GPU's calibration (its memory, its copy engine): to do */
    char err[512];
    double flops, model_ms, adam, t[2][CAL_SIZES], alpha[2], beta[2];
    fprintf(stderr, "zinc plan --calibrate: compute (zinc train --model %s, 1 rank, %d threads)\n",
            spec, threads);
    if (measure_compute(self, spec, threads, device, &flops, &model_ms, err, sizeof err))
        goto fail;
    fprintf(stderr, "  %.4g FLOP/s (model %.2f ms per step); optimizer (zinc bench adam)\n",
            flops, model_ms);
    if (measure_adam(self, threads, device, &adam, err, sizeof err)) goto fail;
    fprintf(stderr, "  %.4g bytes/s; links (all-gather, reduce-scatter over %d local ranks)\n",
            adam, ranks);
    if (measure_links(ranks, t, err, sizeof err)) goto fail;
    for (int op = 0; op < 2; op++) fit_link(t[op], ranks, &alpha[op], &beta[op]);
    /* One link for both, as the plan prices them: the mean of the two fits. */
    double a = (alpha[0] + alpha[1]) / 2, b = 2.0 / (1.0 / beta[0] + 1.0 / beta[1]);
    /* Written beside the output, flushed to disk and renamed over it (as zinc plot -o does): a
     * crash leaves the old file or none, never half of one, and a symlink at out_path is
     * replaced, not written through. */
    char tmp[4200];
    FILE *f = zfile_create_beside(out_path, tmp, sizeof tmp);
    if (!f) {
        snprintf(err, sizeof err, "cannot write beside %s: %s", out_path, strerror(errno));
        goto fail;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    fprintf(f, "{\"zinc_calibration\": 1, \"host\": ");
    zarg_json_string(f, host);
    fprintf(f, ", \"date\": \"%s\", \"device\": ", when);
    zarg_json_string(f, device);
    fprintf(f, ",\n \"flops_per_s\": %.6g, \"flops_model\": ", flops);
    zarg_json_string(f, spec);
    fprintf(f, ", \"flops_threads\": %d, "
               "\"model_ms\": %.6g,\n \"optimizer_bytes_per_s\": %.6g,\n"
               " \"link_alpha_s\": %.6g, \"link_bytes_per_s\": %.6g, \"link_ranks\": %d,\n"
               " \"memory_bytes\": %.6g,\n \"collectives\": [",
            threads, model_ms, adam, a, b, ranks, host_memory_bytes());
    for (int op = 0; op < 2; op++)
        for (int s = 0; s < CAL_SIZES; s++)
            fprintf(f, "%s\n  {\"op\": \"%s\", \"bytes\": %zu, \"seconds\": %.6g}",
                    op || s ? "," : "", op ? "reduce_scatter" : "all_gather", cal_bytes[s],
                    t[op][s]);
    fprintf(f, "]}\n");
    int e = ferror(f) ? EIO : fflush(f) != 0 || fsync(fileno(f)) != 0 ? errno : 0;
    if (fclose(f) != 0 && !e) e = errno;
    if (!e && rename(tmp, out_path) != 0) e = errno;
    if (e) {
        snprintf(err, sizeof err, "writing %s failed: %s", out_path, strerror(e));
        remove(tmp);
        goto fail;
    }
    printf("calibration written to %s: compute %.4g FLOP/s per rank, optimizer %.4g bytes/s, link "
           "alpha %.3g s, %.4g bytes/s (%d ranks)\n", out_path, flops, adam, a, b, ranks);
    return 0;
fail:
    fprintf(stderr, "zinc plan --calibrate: %s\n", err);
    return 1;
}

int zplan_read_calibration(const char *path, zplan_gpu *gpu, zplan_link *link, char *err,
                           size_t len)
{
    char why[256];
    json_object *o = zplan_read_json(path, why, sizeof why);
    if (!o) {
        snprintf(err, len, "%s: %s", path, why);
        return -1;
    }
    static const char *const keys[5] = {"flops_per_s", "optimizer_bytes_per_s", "link_alpha_s",
                                        "link_bytes_per_s", "memory_bytes"};
    /* What a measurement can be, from a phone to far past any machine: a figure outside made
     * the plan's times infinite and its JSON invalid (flops_per_s 1e-300 passed "above 0"). */
    static const double lo[5] = {1e6, 1e6, 0, 1e3, 1e6}, hi[5] = {1e18, 1e15, 10, 1e15, 1e15};
    double v[5];
    int rc = 0;
    if (number_of(o, "zinc_calibration") != 1) {
        snprintf(err, len, "%s: not a zinc calibration file (zinc plan --calibrate writes one)",
                 path);
        rc = -1;
    }
    for (int i = 0; i < 5 && rc == 0; i++) {
        v[i] = number_of(o, keys[i]);
        /* alpha may be 0; the rest are rates and sizes above 0 */
        if (!isfinite(v[i]) || !(v[i] > 0 || (i == 2 && v[i] == 0))) {
            snprintf(err, len, "%s: \"%s\" is missing or not a number %s", path, keys[i],
                     i == 2 ? "of 0 or more" : "above 0");
            rc = -1;
        } else if (v[i] < lo[i] || v[i] > hi[i]) {
            snprintf(err, len, "%s: \"%s\" is %g, outside %g..%g (not a measurement; run zinc "
                     "plan --calibrate again)", path, keys[i], v[i], lo[i], hi[i]);
            rc = -1;
        }
    }
    static char model[64];   /* one calibration per process (zinc plan reads one) */
    json_object *m = NULL;
    model[0] = 0;
    if (json_object_object_get_ex(o, "flops_model", &m) && json_object_is_type(m, json_type_string))
        snprintf(model, sizeof model, "%s", json_object_get_string(m));
    json_object_put(o);
    if (rc) return rc;
    *gpu = (zplan_gpu){.name = "calibrated", .label = "calibrated rank", .peak_flops = v[0],
                       .mem_bytes = v[4], .hbm_bw = v[1], .nvlink_bw = v[3], .pcie_bw = v[3],
                       .source = path, .cal_model = model[0] ? model : NULL, .host_device = 1};
    *link = (zplan_link){v[3], v[2]};
    return 0;
}
