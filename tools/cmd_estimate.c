/*
 * cmd_estimate.c — `zinc estimate`: the memory plan per rank for N parameters, before anything
 * is allocated, from the same function the engine allocates by (engine/memplan.c). With
 * --offload-optimizer (and --offload-param) it splits the plan into device and host bytes, as
 * zinc_memory and zinc_memory_host report them.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "engine/internal.h"
#include "tools/commands.h"

#define ZEST_MAX_PARAMS 1000000000000000LL
#define ZEST_MAX_BUFFERS 1000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zinc estimate --params N --world-size W --stage S [--dtype fp16|bf16|fp32]\n"
            "                     [--grad-accum-dtype fp32 [--communication-data-type fp32]]\n"
            "                     [--group-size G] [--buckets B]\n"
            "                     [--gather-buffers K] [--offload-optimizer [--offload-param]\n"
            "                     [--nvme]] [--json]\n\n"
            "Bytes per rank for a model of N parameters trained with Adam (fp32 master, m, v)\n"
            "on W data-parallel ranks under ZeRO stage S (0-3). Model state = working\n"
            "parameters + gradients + master + m + v; buffers (gradient buckets at stages 2-3,\n"
            "gather buffers at stage 3) are listed apart, sized by the largest group G\n"
            "(default: min(N, 5e8), DeepSpeed's default bucket size). Numbers like 7.5e9 are fine.\n"
            "--dtype is the 16-bit working copy's, default fp16 (bf16 has the same bytes).\n"
            "--grad-accum-dtype fp32 (data_types.grad_accum_dtype, stages 1-3, 16-bit --dtype):\n"
            "the gradient sums in fp32, 4 bytes an element instead of 2 (stage 1: the whole\n"
            "model's, with 16-bit buckets; stages 2-3: the shard's). With it,\n"
            "--communication-data-type fp32 (communication_data_type): reduced in fp32; at stages\n"
            "2-3 through an fp32 copy of the largest group beside the buckets (4G bytes more).\n"
            "--offload-optimizer (zero_optimization.offload_optimizer {\"device\": \"cpu\"}, stages\n"
            "1-3): master, m, v of the shard in host memory, with host copies of the gradient\n"
            "shard and of the 16-bit update; device and host bytes are listed apart.\n"
            "--offload-param (zero_optimization.offload_param {\"device\": \"cpu\"}, stage 3,\n"
            "with --offload-optimizer): the 16-bit parameter shard in host memory too; the\n"
            "device keeps only the buffers (gather area, persistent groups, buckets).\n"
            "--nvme (offload_optimizer {\"device\": \"nvme\"}, and offload_param \"nvme\" with\n"
            "--offload-param): master, m, v (and the 16-bit shard) in a scratch file on disk; host\n"
            "memory is then the chunk buffers (DeepSpeed's default buffer_count 4, zinc's chunk\n"
            "size), and the file's bytes per rank are listed too.\n");
}

/* An option not given ("--params -1" is a bad value, not a missing one). */
#define UNSET LLONG_MIN

int cmd_estimate(int argc, char **argv)
{
    long long params = UNSET, world = UNSET, stage = UNSET, group = UNSET, buckets = ZEST_BUCKETS,
              gathers = ZEST_GATHERS;
    zinc_dtype dtype = ZINC_DTYPE_FP16, gacc = ZINC_DTYPE_FP16, wire = ZINC_DTYPE_FP16;
    int json = 0, offload = 0, offload_param = 0, nvme = 0, gacc_set = 0, wire_set = 0;
    if (zarg_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *dst = NULL, lo = 1, hi = ZEST_MAX_PARAMS;
        const char *range = "1..1e15";
        zinc_dtype *dt = NULL;        /* a dtype flag: where it goes, what it may name */
        int *dt_set = NULL;
        const char *dt_want = NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        } else if (!strcmp(a, "--offload-optimizer")) {
            offload = 1;
            continue;
        } else if (!strcmp(a, "--offload-param")) {
            offload_param = 1;
            continue;
        } else if (!strcmp(a, "--nvme")) {
            nvme = 1;
            continue;
        } else if (!strcmp(a, "--dtype")) dt = &dtype, dt_want = "fp16, bf16 or fp32";
        else if (!strcmp(a, "--grad-accum-dtype"))
            dt = &gacc, dt_set = &gacc_set, dt_want = "fp32 (or the --dtype)";
        else if (!strcmp(a, "--communication-data-type"))
            dt = &wire, dt_set = &wire_set, dt_want = "fp32 (or the --dtype)";
        else if (!strcmp(a, "--params")) dst = &params;
        else if (!strcmp(a, "--world-size")) dst = &world, hi = 1000000, range = "1..1000000";
        else if (!strcmp(a, "--stage")) dst = &stage, lo = 0, hi = 3, range = "0..3";
        else if (!strcmp(a, "--group-size")) dst = &group, range = "1..--params"; /* below */
        else if (!strcmp(a, "--buckets")) dst = &buckets, hi = ZEST_MAX_BUFFERS, range = "1..1000";
        else if (!strcmp(a, "--gather-buffers")) dst = &gathers, hi = ZEST_MAX_BUFFERS, range = "1..1000";
        else return zarg_usage_error("estimate", "unknown argument '%s'", a);
        if (zarg_value("estimate", a, v)) return 2;
        if (dt) {
            if (zarg_dtype(v, dt))
                return zarg_usage_error("estimate", "%s must be %s, not '%s'", a, dt_want, v);
            if (dt_set) *dt_set = 1;
            i++;
            continue;
        }
        /* Each value checked as it is read, before a required option is found missing (a bad
         * --stage was reported as a missing --world-size). Bounds that keep every byte count
         * inside uint64 (1e15 parameters, as zinc plan takes). */
        int bad = zarg_int64(v, dst);
        if (bad == -1)
            return zarg_usage_error("estimate", "%s: '%s' is not a whole number", a, v);
        if (bad || (dst != &group && (*dst < lo || *dst > hi)))
            return zarg_usage_error("estimate", "%s: expected %s, got %s (out of range)", a, range,
                                    v);
        i++;
    }
    if (params == UNSET) return zarg_usage_error("estimate", "--params N is required");
    if (world == UNSET) return zarg_usage_error("estimate", "--world-size W is required");
    if (stage == UNSET) return zarg_usage_error("estimate", "--stage S is required");
    if (offload && stage == 0)
        return zarg_usage_error("estimate", "--offload-optimizer needs --stage 1, 2 or 3 (zinc, "
                                "like DeepSpeed, offloads the optimizer state at stages 1-3)");
    if (offload_param && (stage != 3 || !offload))
        return zarg_usage_error("estimate", "--offload-param needs --stage 3 and --offload-optimizer "
                                "(zinc offloads the parameters at stage 3, together with the "
                                "optimizer state)");
    if (nvme && !offload)
        return zarg_usage_error("estimate", "--nvme needs --offload-optimizer (the NVMe tier "
                                "holds the offloaded optimizer state)");
    /* data_types.grad_accum_dtype: the working dtype (no change), or fp32 with a 16-bit one at
     * stages 1-3, where the engine keeps the sums in fp32 (the config refuses the rest) */
    int grad_fp32 = gacc_set && gacc != dtype;
    if (grad_fp32 && (gacc != ZINC_DTYPE_FP32 || dtype == ZINC_DTYPE_FP32))
        return zarg_usage_error("estimate", "--grad-accum-dtype %s with --dtype %s: it is fp32 "
                                "with a 16-bit --dtype, or the --dtype itself",
                                zinc_dtype_name(gacc), zinc_dtype_name(dtype));
    if (grad_fp32 && !zcfg_grad_fp32_allowed((int)stage, dtype))
        return zarg_usage_error("estimate", "--grad-accum-dtype fp32 needs --stage 1, 2 or 3 "
                                "(without ZeRO DeepSpeed refuses it too)");
    /* communication_data_type: the working dtype (no change), or fp32, which changes the
     * arithmetic and the memory only with fp32 sums (config.h zcfg_reduces_fp32) */
    if (wire_set && wire != dtype && wire != ZINC_DTYPE_FP32)
        return zarg_usage_error("estimate", "--communication-data-type %s with --dtype %s: it is "
                                "fp32 or the --dtype itself (zinc refuses the other 16-bit "
                                "dtype)", zinc_dtype_name(wire), zinc_dtype_name(dtype));
    int reduce_fp32 = grad_fp32 && wire_set && wire == ZINC_DTYPE_FP32;
    if (group == UNSET) group = zest_default_group(params);
    if (group < 1 || group > params)
        return zarg_usage_error("estimate", "--group-size: expected 1..%lld (--params), got %lld",
                                params, group);

    zest_mem m;
    zest_memory(params, (int)world, (int)stage, dtype, offload, offload_param, grad_fp32,
                reduce_fp32, group, (int)buckets, (int)gathers, &m);
    uint64_t disk = nvme ? zest_nvme(&m, (int)world, dtype, offload_param, group) : 0;
    const uint64_t *b = m.dev, *h = m.host;
    if (json) {
        printf("{\"params\": %lld, \"world_size\": %lld, \"stage\": %lld, \"dtype\": \"%s\", "
               "\"grad_accum_dtype\": \"%s\", \"reduced_in_fp32\": %s, \"offload_optimizer\": %s, "
               "\"offload_param\": %s, ",
               params, world, stage, zinc_dtype_name(dtype),
               zinc_dtype_name(grad_fp32 ? ZINC_DTYPE_FP32 : dtype),
               reduce_fp32 ? "true" : "false", offload ? "true" : "false",
               offload_param ? "true" : "false");
        if (nvme) printf("\"nvme\": true, \"disk_bytes_per_rank\": %llu, ", (unsigned long long)disk);
        zest_memory_json(&m);
        printf("}\n");
        return 0;
    }
    printf("ZeRO stage %lld, %lld parameters, %lld ranks, %s working copy%s%s\n", stage, params,
           world, zinc_dtype_name(dtype),
           reduce_fp32 ? ", fp32 gradient sums reduced in fp32"
           : grad_fp32 ? ", fp32 gradient sums" : "",
           offload_param ? ", optimizer state and 16-bit parameters offloaded to the host"
           : offload     ? ", optimizer state offloaded to the host"
                         : "");
    /* One unit for the whole table, the largest that shows the total: a small model's rows
     * were all 0.000 GB. */
    double most = (double)(m.total > m.host_total ? m.total : m.host_total);
    double unit = most >= 1e9 ? 1e9 : most >= 1e6 ? 1e6 : 1e3;
    const char *un = unit == 1e9 ? "GB" : unit == 1e6 ? "MB" : "kB";
    if (offload) printf("  %-8s %14s    %14s\n", "", "device", "host");
    for (int c = 0; c < ZINC_MEM_COUNT; c++) {
        printf("  %-8s %14.3f %s", zinc_mem_category_name((zinc_mem_category)c),
               (double)b[c] / unit, un);
        if (offload) printf(" %14.3f %s", (double)h[c] / unit, un);
        printf("\n");
    }
    printf("  model state per rank: %.3f %s   with buffers: %.3f %s   (device; %s = 10^%d bytes)\n",
           (double)m.state / unit, un, (double)m.total / unit, un, un,
           unit == 1e9 ? 9 : unit == 1e6 ? 6 : 3);
    if (offload) printf("  host memory per rank: %.3f %s\n", (double)m.host_total / unit, un);
    if (nvme) printf("  NVMe scratch file per rank: %.3f %s (offload_optimizer.nvme_path)\n",
                     (double)disk / unit, un);
    return 0;
}

void zest_memory(long long params, int world, int stage, zinc_dtype dtype, int offload,
                 int offload_param, int grad_fp32, int reduce_fp32, long long group, int buckets,
                 int gathers, zest_mem *m)
{
    zmem_estimate((uint64_t)params, world, stage, dtype,
                  (offload ? ZMEM_OFFLOAD_OPTIMIZER : 0) | (offload_param ? ZMEM_OFFLOAD_PARAM : 0) |
                  (grad_fp32 ? ZMEM_GRAD_FP32 : 0),
                  m->dev, m->host);
    uint64_t *b = m->dev;
    /* Buffers: sized by the largest group, padded as the planner pads it. */
    uint64_t gpad = ((uint64_t)group + (uint64_t)world * ZPLAN_ALIGN - 1) /
                    ((uint64_t)world * ZPLAN_ALIGN) * (uint64_t)world * ZPLAN_ALIGN;
    uint64_t d = zinc_dtype_size(dtype), gd = grad_fp32 ? 4 : d;
    /* with offload at stages 2-3 also the one-slice scratch of the host gradient's additions
     * (in the sums' dtype), and with fp32 reduction there the fp32 copy of the group */
    b[ZINC_MEM_BUCKET] = zmem_bucketed(stage, grad_fp32) ? (uint64_t)buckets * gpad * d : 0;
    if (stage >= 2)
        b[ZINC_MEM_BUCKET] += (offload ? gpad / (uint64_t)world * gd : 0) +
                              (reduce_fp32 ? gpad * 4 : 0);
    b[ZINC_MEM_GATHER] = stage == 3 ? (uint64_t)gathers * gpad * d : 0;
    m->state = b[ZINC_MEM_PARAM16] + b[ZINC_MEM_GRAD] + b[ZINC_MEM_MASTER] + b[ZINC_MEM_ADAM_M] +
               b[ZINC_MEM_ADAM_V];
    m->total = m->state + b[ZINC_MEM_BUCKET] + b[ZINC_MEM_GATHER];
    m->host_total = 0;
    for (int c = 0; c < ZINC_MEM_COUNT; c++) m->host_total += m->host[c];
}

uint64_t zest_nvme(zest_mem *m, int world, zinc_dtype dtype, int offload_param, long long group)
{
    uint64_t gpad = ((uint64_t)group + (uint64_t)world * ZPLAN_ALIGN - 1) /
                    ((uint64_t)world * ZPLAN_ALIGN) * (uint64_t)world * ZPLAN_ALIGN;
    /* the engine's layout with DeepSpeed's defaults: buffer_count 4, sub_group_size 1e9 */
    /* the shard from the fp32 moment (4 bytes an element whatever the gradient's dtype) */
    znv_shape in = {.shard = m->host[ZINC_MEM_ADAM_M] / 4, .max_slice = (size_t)(gpad / (uint64_t)world),
                    .dtype = dtype, .sub_group_size = 1000000000, .buffer_count = 4,
                    .param = offload_param};
    znv_layout L;
    zoffload_nvme_layout(&in, &L);
    m->host[ZINC_MEM_MASTER] = m->host[ZINC_MEM_ADAM_M] = m->host[ZINC_MEM_ADAM_V] = L.host_state_each;
    m->host[ZINC_MEM_PARAM16] = L.host_param16;
    m->host_total = 0;
    for (int c = 0; c < ZINC_MEM_COUNT; c++) m->host_total += m->host[c];
    return L.file_bytes;
}

void zest_memory_json(const zest_mem *m)
{
    /* model_state/total/bytes_per_rank: device bytes (everything, without offload). */
    printf("\"model_state_bytes_per_rank\": %llu, \"total_bytes_per_rank\": %llu, "
           "\"host_bytes_per_rank\": %llu, \"bytes_per_rank\": {",
           (unsigned long long)m->state, (unsigned long long)m->total,
           (unsigned long long)m->host_total);
    for (int c = 0; c < ZINC_MEM_COUNT; c++)
        printf("%s\"%s\": %llu", c ? ", " : "", zinc_mem_category_name((zinc_mem_category)c),
               (unsigned long long)m->dev[c]);
    printf("}, \"host_bytes\": {");
    for (int c = 0; c < ZINC_MEM_COUNT; c++)
        printf("%s\"%s\": %llu", c ? ", " : "", zinc_mem_category_name((zinc_mem_category)c),
               (unsigned long long)m->host[c]);
    printf("}");
}
