/*
 * test_grad_accum_fp32.c — data_types.grad_accum_dtype "fp32" with bf16 and fp16 (static loss
 * scale 1) training at ZeRO stages 1, 2 and 3, 1 and 2 local ranks. Stages 2-3: each
 * micro-step's 16-bit gradient is reduced as without the key (reduce-scatter in the working
 * dtype, one rounding) and its own slice added into an fp32 sum, which the step's statistics and
 * Adam read — DeepSpeed 0.19.8's arithmetic (stage_1_and_2.py's fp32 partition buffer,
 * stage3.py's fp32 grad partitions). Stage 1: each micro-step's 16-bit gradient (a bucket) is
 * added into the rank's fp32 sums of the whole model, which the step rounds to the working dtype
 * and reduces (DeepSpeed's BF16_Optimizer and grad_accum attribute with its default
 * communication_data_type); zinc_param_grad_get reads that reduced value before the step, and
 * without the key the 16-bit sums reduced as the step reduces them (one rounding), as DeepSpeed
 * reads them after its boundary's reduce.
 *
 * Two parameters in two groups (1000 and 33 elements). In micro-step k of optimizer step t rank
 * r adds (r + 1) * g(t, k, i) into the gradient views, g a bf16 value whose exponent varies with
 * i and k, so the 16-bit sum of a window rounds where the fp32 sum does not. The reference
 * computed here: each micro-step's reduced slice round((sum over ranks) / N), summed in fp32 (or,
 * for the run without the key, in the working dtype), then the scalar Adam reference
 * (zk_ref_adam_step) on the fp32 master. Checked bit for bit: the gradient read back before each
 * step, the masters after two steps; the norm the step reports to 1e-12. The run without the key
 * must match the 16-bit reference and differ from the fp32 one, so the check can tell them apart;
 * the gradient block the engine plans is twice the 16-bit one.
 *
 * Each also with offload_optimizer "cpu" (and at stage 3 with offload_param "cpu" too) and
 * "nvme" (the state in a scratch file under a directory made here): the sums then accumulate in
 * host memory (through the device's one-slice scratch) and the host Adam reads them, chunk by
 * chunk with NVMe; the same reference, bit for bit, and the host's gradient block doubles.
 *
 * With communication_data_type "fp32" too, each micro-step's gradient is reduced in fp32 and
 * its slice added without a 16-bit rounding (DeepSpeed's fp32 IPG bucket at stage 2, stage3.py's
 * __avg_scatter_grads): the same reference without that rounding, which at two ranks differs from
 * the 16-bit one, and the bucket block holds the fp32 scratch of the largest group. At stage 1
 * the fp32 sums are then reduced as they are, not rounded (also on one rank), and the buckets
 * are the 16-bit ones alone.
 *
 * Set and read in fp32 (bf16, 1 and 2 ranks, with and without offload): after a window's last
 * hand-over, zinc_param_grad_set of values fp32 holds and bf16 does not (1 + k * 2^-12) reads
 * back bit for bit through zinc_param_grad_get and this rank's zinc_param_local_get; a
 * fragment written with zinc_param_local_set reads back too; and the step applies them: the
 * masters equal the scalar Adam's on those values.
 *
 * Overflow (bf16, fp32 sums): rank 0 adds an inf in the second step's second micro-step; the
 * fp32 sum carries it, so that step is skipped (zinc_step_info.skipped) and the masters are the
 * reference's after the first step only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/device.h"
#include "optim/optim.h"
#include "testutil.h"
#include "zinc.h"

#define NPAR 2
#define STEPS 2
#define ACCUM 3
#define MAXR 2
static const int64_t numel[NPAR] = {1000, 33};
static char g_nvme[300];           /* offload 3's nvme_path */

/* The zero_optimization members an offload mode adds. sub_group_size 256 cuts the offloaded
 * step into several chunks (whole groups with "cpu": 2; 256 elements with "nvme": 5 at one
 * rank), so a chunk after the first reads its gradient at an offset. */
static const char *offload_json(int offload, char *buf, size_t n)
{
    if (offload == 3)
        snprintf(buf, n, ", \"sub_group_size\": 256, \"offload_optimizer\": {\"device\": "
                 "\"nvme\", \"nvme_path\": \"%s\"}", g_nvme);
    else if (offload)
        snprintf(buf, n, ", \"sub_group_size\": 256, \"offload_optimizer\": {\"device\": "
                 "\"cpu\"}%s", offload == 2 ? ", \"offload_param\": {\"device\": \"cpu\"}" : "");
    else
        buf[0] = 0;
    return buf;
}

typedef struct {
    zinc_world_t *world;
    int world_size, stage, fp32acc;
    int wire32;                   /* communication_data_type "fp32" */
    zinc_dtype dt;                /* the working dtype: bf16 or fp16 */
    int offload;                  /* 0; 1: offload_optimizer cpu; 2: and offload_param cpu;
                                     3: offload_optimizer nvme */
    int inject;                   /* rank 0 adds an inf in micro-step 1 of step 1 */
    int skipped[STEPS];           /* zinc_step_info.skipped at each boundary (rank 0) */
    float *master[NPAR];          /* rank 0's masters after the run */
    float *grad[STEPS][NPAR];     /* rank 0's gradient read back before each step */
    double norm[STEPS];           /* the norms zinc_step reported (rank 0) */
    uint64_t grad_bytes;          /* planned ZINC_MEM_GRAD */
    uint64_t bucket_bytes;        /* planned ZINC_MEM_BUCKET (device) */
} run_ctx;

/* A bf16 value: 8 significant bits, the exponent moving with i and k, the sign with i. */
static float g_val(int t, int k, int64_t i)
{
    float mant = 1.0f + (float)((i * 37 + k * 11 + t * 5) % 128) / 128.0f;
    float v = ldexpf(mant, -(int)((i + 2 * k + t) % 6));
    return i % 3 == 1 ? -v : v;
}

/* x rounded to dtype dt (round to nearest even, as every zinc kernel rounds). */
static float rnd(zinc_dtype dt, float x)
{
    uint16_t h;
    zk_store(&h, dt, 0, x);
    return zk_load(&h, dt, 0);
}

/* The reduced gradient of element i in micro-step (t, k): the ranks' (r + 1) * g summed in fp32,
 * divided by N, rounded once to the working dtype, as the reduce-scatter does — or, reduced in
 * fp32 (wire32: communication_data_type "fp32" with fp32 sums), not rounded. */
static float reduced(zinc_dtype dt, int world, int wire32, int t, int k, int64_t i)
{
    float s = 0.0f;
    for (int r = 0; r < world; r++) s += rnd(dt, (float)(r + 1) * g_val(t, k, i));
    s *= 1.0f / (float)world;
    return wire32 ? s : rnd(dt, s);
}

/* Representable in both 16-bit dtypes. */
static float init_val(int64_t i) { return (float)(i % 17) / 32.0f - 0.25f; }

/* One rank's engine: the config (dt, accumulation steps, stage, the key, the offload mode), the
 * two parameters in their groups, finalized, the initial values set. NULL (a failed check) when
 * the engine could not be made. */
static zinc_engine_t *open_engine(zinc_world_t *world, int rank, zinc_dtype dt, int accum,
                                  int stage, int fp32acc, int wire32, int offload,
                                  int grp[NPAR], int par[NPAR])
{
    char cfg[1536], off[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, "
             "\"gradient_clipping\": 0, %s, %s%s"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, "
             "\"weight_decay\": 0.01}}, \"zero_optimization\": {\"stage\": %d%s}}",
             accum, dt == ZINC_DTYPE_FP16 ? "\"fp16\": {\"enabled\": true, \"loss_scale\": 1}"
                                          : "\"bf16\": {\"enabled\": true}",
             fp32acc ? "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, " : "",
             wire32 ? "\"communication_data_type\": \"fp32\", " : "", stage,
             offload_json(offload, off, sizeof off));
    zinc_engine_options_t o = {.config_json = cfg, .world = world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    for (int q = 0; q < NPAR; q++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", q);
        ZT_OK(zinc_group_add(e, name, &grp[q]));
        ZT_OK(zinc_param_add(e, grp[q], name, 1, &numel[q], dt, &par[q]));
    }
    ZT_OK(zinc_finalize(e));
    float init[1000];
    for (int64_t i = 0; i < 1000; i++) init[i] = init_val(i);
    for (int q = 0; q < NPAR; q++) ZT_OK(zinc_param_set(e, par[q], init));
    return e;
}

/* A copy of n floats (rank 0 keeps what it read; the caller frees it). */
static float *copy_of(const float *x, int64_t n)
{
    float *y = malloc((size_t)n * sizeof(float));
    if (y) memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

static void rank_fn(int rank, void *arg)
{
    run_ctx *c = arg;
    int grp[NPAR], par[NPAR];
    zinc_engine_t *e = open_engine(c->world, rank, c->dt, ACCUM, c->stage, c->fp32acc, c->wire32,
                                   c->offload, grp, par);
    if (!e) return;
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
    /* the sums' block: on the device, or with offload in host memory */
    ZT_OK(c->offload ? zinc_memory_host(e, planned, alloc) : zinc_memory(e, planned, alloc));
    if (rank == 0) c->grad_bytes = planned[ZINC_MEM_GRAD];
    ZT_OK(zinc_memory(e, planned, alloc));
    if (rank == 0) c->bucket_bytes = planned[ZINC_MEM_BUCKET];
    float *buf = malloc(1000 * sizeof(float));
    for (int t = 0; t < STEPS; t++) {
        for (int k = 0; k < ACCUM; k++) {
            for (int q = 0; q < NPAR; q++) {
                void *v = NULL;
                ZT_OK(zinc_gather(e, grp[q]));
                ZT_OK(zinc_param_grad(e, par[q], &v));
                for (int64_t i = 0; v && i < numel[q]; i++)
                    zk_store(v, c->dt, (size_t)i, zk_load(v, c->dt, (size_t)i) +
                                                      (float)(rank + 1) * g_val(t, k, i));
                if (v && c->inject && rank == 0 && t == 1 && k == 1 && q == 0)
                    zk_store(v, c->dt, 5, INFINITY);
                ZT_OK(zinc_release(e, grp[q]));
                ZT_OK(zinc_grads_ready(e, grp[q]));
            }
            if (k == ACCUM - 1 && !c->inject)
                for (int q = 0; q < NPAR; q++) {
                    ZT_OK(zinc_param_grad_get(e, par[q], buf));
                    if (rank == 0) c->grad[t][q] = copy_of(buf, numel[q]);
                }
            zinc_step_info_t info;
            ZT_OK(zinc_step(e, &info));
            if (rank == 0 && k == ACCUM - 1) {
                c->norm[t] = info.grad_norm;
                c->skipped[t] = info.skipped;
            }
        }
    }
    for (int q = 0; q < NPAR; q++) {
        ZT_OK(zinc_param_get(e, par[q], buf));
        if (rank == 0) c->master[q] = copy_of(buf, numel[q]);
    }
    free(buf);
    zinc_engine_destroy(e);
}

static void run(run_ctx *c) { zt_run_world(c->world_size, &c->world, rank_fn, c); }

static void free_run(run_ctx *c)
{
    for (int q = 0; q < NPAR; q++) {
        free(c->master[q]);
        for (int t = 0; t < STEPS; t++) free(c->grad[t][q]);
    }
}

/* The reference of a run: gradients per step (fp32 sums, or 16-bit sums) — what
 * zinc_param_grad_get reads before the step too, norms, and the masters after each step. */
typedef struct {
    float grad[STEPS][NPAR][1000];
    double norm[STEPS];
    float master[NPAR][1000];
    float master_at[STEPS][NPAR][1000];
} reference;

/* Stage 1's reduced gradient of element i in step t: each rank's window sum S_r of its 16-bit
 * micro-step gradients — in fp32 with the key, in the working dtype without (the model adds
 * into the 16-bit buffer: one rounding per add) — then reduced at the step: with fp32 sums the
 * sums rounded to the working dtype (wire32: not), summed over the ranks in fp32, divided by N
 * and rounded once (wire32: not; without the key the 16-bit reduce rounds once too). */
static float stage1_reduced(zinc_dtype dt, int world, int fp32acc, int wire32, int t, int64_t i)
{
    float sum = 0.0f;
    for (int r = 0; r < world; r++) {
        float S = 0.0f;
        for (int k = 0; k < ACCUM; k++)
            S = fp32acc ? S + rnd(dt, (float)(r + 1) * g_val(t, k, i))
                        : rnd(dt, S + (float)(r + 1) * g_val(t, k, i));
        sum += fp32acc && !wire32 ? rnd(dt, S) : S;
    }
    sum *= 1.0f / (float)world;
    return wire32 && fp32acc ? sum : rnd(dt, sum);
}

static void make_reference(zinc_dtype dt, int world, int stage, int fp32acc, int wire32,
                           reference *R)
{
    float m[NPAR][1000], v[NPAR][1000];
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    for (int q = 0; q < NPAR; q++)
        for (int64_t i = 0; i < numel[q]; i++) R->master[q][i] = init_val(i);
    for (int t = 0; t < STEPS; t++) {
        double sumsq = 0.0;
        for (int q = 0; q < NPAR; q++)
            for (int64_t i = 0; i < numel[q]; i++) {
                float s = 0.0f;
                for (int k = 0; stage >= 2 && k < ACCUM; k++) {
                    s += reduced(dt, world, wire32, t, k, i);
                    if (!fp32acc) s = rnd(dt, s);
                }
                if (stage == 1) s = stage1_reduced(dt, world, fp32acc, wire32, t, i);
                R->grad[t][q][i] = s;
                sumsq += (double)s * (double)s;
            }
        R->norm[t] = sqrt(sumsq);
        for (int q = 0; q < NPAR; q++) {
            zk_adam_args a = {.master = R->master[q], .m = m[q], .v = v[q],
                              .grad = R->grad[t][q], .grad_dtype = ZINC_DTYPE_FP32,
                              .n = (size_t)numel[q], .lr = 0.01f, .beta1 = 0.9f,
                              .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                              .grad_scale = 1.0f, .adamw = 1};
            zadam_bias_corrections(0.9f, 0.999f, 1, t + 1, &a.bias_c1, &a.bias_c2);
            zk_ref_adam_step(&a);
            memcpy(R->master_at[t][q], R->master[q], (size_t)numel[q] * sizeof(float));
        }
    }
}

/* Elements where got differs from want in bits; the first one reported by the caller. */
static int64_t differ(const float *got, const float *want, int64_t n, int64_t *first)
{
    int64_t d = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4)) {
            if (*first < 0) *first = i;
            d++;
        }
    return d;
}

static void check(zinc_dtype dt, int stage, int world, int offload)
{
    static reference r32, r16, r32w;
    make_reference(dt, world, stage, 1, 0, &r32);
    make_reference(dt, world, stage, 0, 0, &r16);
    make_reference(dt, world, stage, 1, 1, &r32w);
    run_ctx on = {.world_size = world, .stage = stage, .fp32acc = 1, .dt = dt, .offload = offload};
    run_ctx off = {.world_size = world, .stage = stage, .fp32acc = 0, .dt = dt, .offload = offload};
    run_ctx onw = {.world_size = world, .stage = stage, .fp32acc = 1, .wire32 = 1, .dt = dt,
                   .offload = offload};
    run(&on);
    run(&off);
    run(&onw);
    const run_ctx *runs[3] = {&on, &off, &onw};
    const reference *refs[3] = {&r32, &r16, &r32w};
    for (int w = 0; w < 3; w++) {
        const run_ctx *c = runs[w];
        const reference *R = refs[w];
        char what[96];
        snprintf(what, sizeof what, "%s, %s sums%s%s", zinc_dtype_name(dt),
                 w == 1 ? zinc_dtype_name(dt) : "fp32",
                 w == 1 ? " (no key)" : w == 2 ? " reduced in fp32" : "",
                 offload == 3 ? ", offload nvme" : offload == 2 ? ", offload optimizer+param"
                 : offload ? ", offload" : "");
        for (int q = 0; q < NPAR; q++) {
            int64_t first;
            for (int t = 0; t < STEPS; t++) {
                if (!c->grad[t][q]) continue;
                int64_t d = differ(c->grad[t][q], R->grad[t][q], numel[q], &first);
                ZT_CHECK(d == 0, "stage %d N=%d %s: step %d p%d's gradient: %lld elements differ "
                         "from the reference, first %lld: %.9g, want %.9g", stage, world, what,
                         t, q, (long long)d, (long long)first,
                         d ? c->grad[t][q][first] : 0.0, d ? R->grad[t][q][first] : 0.0);
            }
            if (!c->master[q]) continue;
            int64_t d = differ(c->master[q], R->master[q], numel[q], &first);
            ZT_CHECK(d == 0, "stage %d N=%d %s: p%d's master after %d steps: %lld elements differ "
                     "from the reference, first %lld: %.9g, want %.9g", stage, world, what, q,
                     STEPS, (long long)d, (long long)first, d ? c->master[q][first] : 0.0,
                     d ? R->master[q][first] : 0.0);
        }
        for (int t = 0; t < STEPS; t++)
            ZT_CHECK(fabs(c->norm[t] - R->norm[t]) <= 1e-12 * R->norm[t],
                     "stage %d N=%d %s: step %d's norm %.17g, reference %.17g", stage, world,
                     what, t, c->norm[t], R->norm[t]);
    }
    /* The two references differ, so matching one is not matching the other. Not fp16 at stage
     * 1: there a window's 16-bit sum of these values is exact until its last add, which rounds
     * as the step's rounding of the fp32 sum does (the stage-1 path is the dtype's alone: bf16
     * and the fp32 reduction's check below tell it apart). */
    int64_t first, d = differ(r32.grad[0][0], r16.grad[0][0], numel[0], &first);
    if (stage >= 2 || dt == ZINC_DTYPE_BF16)
        ZT_CHECK(d > 100, "stage %d N=%d %s: the fp32 and 16-bit sums differ in only %lld of "
                 "%lld elements", stage, world, zinc_dtype_name(dt), (long long)d,
                 (long long)numel[0]);
    ZT_CHECK(on.grad_bytes == 2 * off.grad_bytes && off.grad_bytes > 0,
             "stage %d N=%d: the gradient block is %llu bytes with fp32 sums, %llu without",
             stage, world, (unsigned long long)on.grad_bytes, (unsigned long long)off.grad_bytes);
    /* Reduced in fp32, the reduced gradient of two ranks keeps the ninth significant bit bf16
     * rounds away ((g + 2g) / 2 = 1.5 g, g of 8 bits; fp16 holds it, so there the two are
     * alike); the bucket block gains the fp32 scratch of the largest group (1000 elements
     * padded). */
    int64_t dw = differ(r32w.grad[0][0], r32.grad[0][0], numel[0], &first);
    if (stage >= 2)
        ZT_CHECK(world == 1 || dt == ZINC_DTYPE_FP16 ? dw == 0 : dw > 100, "stage %d N=%d: the "
                 "sums reduced in fp32 differ from the 16-bit reduced ones in %lld of %lld "
                 "elements", stage, world, (long long)dw, (long long)numel[0]);
    else      /* the window's fp32 sums unrounded, also on one rank */
        ZT_CHECK(dw > 0, "stage 1 N=%d %s: the sums reduced in fp32 equal the rounded ones",
                 world, zinc_dtype_name(dt));
    uint64_t extra = onw.bucket_bytes - on.bucket_bytes;
    if (stage >= 2)
        ZT_CHECK(onw.bucket_bytes > on.bucket_bytes && extra >= 4 * 1000 && extra <= 4 * 1088,
                 "stage %d N=%d: the bucket block is %llu bytes reduced in fp32, %llu in %s",
                 stage, world, (unsigned long long)onw.bucket_bytes,
                 (unsigned long long)on.bucket_bytes, zinc_dtype_name(dt));
    else      /* the 16-bit buckets the micro-step's gradient goes through, no fp32 scratch */
        ZT_CHECK(onw.bucket_bytes == on.bucket_bytes && on.bucket_bytes > 0 &&
                 off.bucket_bytes == 0, "stage 1 N=%d: bucket blocks %llu (fp32 sums), %llu "
                 "(reduced in fp32), %llu (no key)", world, (unsigned long long)on.bucket_bytes,
                 (unsigned long long)onw.bucket_bytes, (unsigned long long)off.bucket_bytes);
    printf("%s stage %d N=%d%s: fp32 sums as DeepSpeed adds them (%lld of %lld elements differ "
           "from %s sums), %s gradient block %llu bytes (%s sums %llu)\n", zinc_dtype_name(dt),
           stage, world, offload == 3 ? " offload nvme" : offload == 2 ? " offload optimizer+param"
           : offload ? " offload" : "",
           (long long)d, (long long)numel[0], zinc_dtype_name(dt), offload ? "host" : "device",
           (unsigned long long)on.grad_bytes, zinc_dtype_name(dt),
           (unsigned long long)off.grad_bytes);
    free_run(&on);
    free_run(&off);
    free_run(&onw);
}

/* Values fp32 holds exactly and bf16 does not. */
static float h_val(int64_t i) { return 1.0f + (float)(i % 7 + 1) * (1.0f / 4096.0f); }
static float h2_val(int64_t i) { return -1.0f - (float)(i % 5 + 1) * (1.0f / 8192.0f); }

typedef struct {
    zinc_world_t *world;
    int world_size, stage, offload;
    int failed;
    float *master[NPAR];          /* rank 0's masters after the step */
} setget_ctx;

static int same_bits(const float *got, const float *want, int64_t n)
{
    return memcmp(got, want, (size_t)n * sizeof(float)) == 0;
}

static void setget_rank(int rank, void *arg)
{
    setget_ctx *c = arg;
    int grp[NPAR], par[NPAR];
    zinc_engine_t *e = open_engine(c->world, rank, ZINC_DTYPE_BF16, 1, c->stage, 1, 0,
                                   c->offload, grp, par);
    if (!e) return;
    float *want = malloc(1000 * sizeof(float)), *got = malloc(1000 * sizeof(float));
    for (int q = 0; q < NPAR; q++) {       /* a micro-step that touches nothing: zero sums */
        ZT_OK(zinc_gather(e, grp[q]));
        ZT_OK(zinc_release(e, grp[q]));
        ZT_OK(zinc_grads_ready(e, grp[q]));
    }
    int ok = 1;
    for (int q = 0; q < NPAR; q++) {
        for (int64_t i = 0; i < numel[q]; i++) want[i] = h_val(i);
        ZT_OK(zinc_param_grad_set(e, par[q], want));
        ZT_OK(zinc_param_grad_get(e, par[q], got));
        ok &= same_bits(got, want, numel[q]);
        int64_t lo = 0, hi = 0;
        ZT_OK(zinc_param_local_range(e, par[q], &lo, &hi));
        ZT_OK(zinc_param_local_get(e, par[q], ZINC_STATE_GRAD, got));
        ok &= same_bits(got, want + lo, hi - lo);
        /* p0's fragment rewritten by each rank: the whole gradient is then h2 */
        if (q == 0) {
            for (int64_t i = 0; i < numel[q]; i++) want[i] = h2_val(i);
            ZT_OK(zinc_param_local_set(e, par[q], ZINC_STATE_GRAD, want + lo));
            ZT_OK(zinc_param_grad_get(e, par[q], got));
            ok &= same_bits(got, want, numel[q]);
        }
    }
    if (!ok) c->failed = 1;
    zinc_step_info_t info;
    ZT_OK(zinc_step(e, &info));
    for (int q = 0; q < NPAR; q++) {
        ZT_OK(zinc_param_get(e, par[q], got));
        if (rank == 0) c->master[q] = copy_of(got, numel[q]);
    }
    free(want);
    free(got);
    zinc_engine_destroy(e);
}

static void check_set_get(int stage, int world, int offload)
{
    setget_ctx c = {.world_size = world, .stage = stage, .offload = offload};
    zt_run_world(world, &c.world, setget_rank, &c);
    ZT_CHECK(!c.failed, "stage %d N=%d offload %d: a gradient set in fp32 did not read back bit "
             "for bit (zinc_param_grad_get, zinc_param_local_get after grad_set / local_set)",
             stage, world, offload);
    /* the reference: one Adam step on p0 = h2, p1 = h */
    for (int q = 0; q < NPAR; q++) {
        float master[1000], m[1000] = {0}, v[1000] = {0}, g[1000];
        for (int64_t i = 0; i < numel[q]; i++) {
            master[i] = init_val(i);
            g[i] = q == 0 ? h2_val(i) : h_val(i);
        }
        zk_adam_args a = {.master = master, .m = m, .v = v, .grad = g,
                          .grad_dtype = ZINC_DTYPE_FP32, .n = (size_t)numel[q], .lr = 0.01f,
                          .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                          .grad_scale = 1.0f, .adamw = 1};
        zadam_bias_corrections(0.9f, 0.999f, 1, 1, &a.bias_c1, &a.bias_c2);
        zk_ref_adam_step(&a);
        int64_t first;
        int64_t d = c.master[q] ? differ(c.master[q], master, numel[q], &first) : -1;
        ZT_CHECK(d == 0, "stage %d N=%d offload %d: p%d's master after a step on the gradient "
                 "set differs from the reference in %lld elements", stage, world, offload, q,
                 (long long)d);
        free(c.master[q]);
    }
    printf("stage %d N=%d offload %d: gradients set in fp32 read back and step bit for bit\n",
           stage, world, offload);
}

/* An inf in a window: the fp32 sum carries it, the step is skipped, the masters stay those after
 * the step before. */
static void check_overflow(int stage, int world, int offload)
{
    static reference R;
    make_reference(ZINC_DTYPE_BF16, world, stage, 1, 0, &R);
    run_ctx c = {.world_size = world, .stage = stage, .fp32acc = 1, .dt = ZINC_DTYPE_BF16,
                 .inject = 1, .offload = offload};
    run(&c);
    ZT_CHECK(!c.skipped[0] && c.skipped[1], "stage %d N=%d offload %d: an inf in step 1: skipped "
             "%d, %d (want 0, 1)", stage, world, offload, c.skipped[0], c.skipped[1]);
    for (int q = 0; q < NPAR; q++) {
        int64_t first;
        int64_t d = c.master[q] ? differ(c.master[q], R.master_at[0][q], numel[q], &first) : -1;
        ZT_CHECK(d == 0, "stage %d N=%d offload %d: after the skipped step p%d's master differs "
                 "from the reference after one step in %lld elements", stage, world, offload, q,
                 (long long)d);
    }
    printf("stage %d N=%d offload %d: an inf in a window of fp32 sums skips the step\n", stage,
           world, offload);
    free_run(&c);
}

int main(void)
{
    /* The NVMe rows' scratch files: a directory on disk beside the test. */
    if (zt_disk_dir(g_nvme, sizeof g_nvme, "zinc-grad-accum-nvme")) return 1;
    for (int stage = 1; stage <= 3; stage++)
        for (int world = 1; world <= MAXR; world++)
            for (int offload = 0; offload <= 3; offload++) {
                if (offload == 2 && stage != 3) continue;     /* offload_param: stage 3 only */
                check(ZINC_DTYPE_BF16, stage, world, offload);
                check(ZINC_DTYPE_FP16, stage, world, offload);
                check_overflow(stage, world, offload);
                /* the local fragments exist from stage 2 on */
                if (offload != 2 && stage >= 2) check_set_get(stage, world, offload);
            }
    ZT_CHECK(rmdir(g_nvme) == 0, "the NVMe directory %s is not empty after the runs (a scratch "
             "file left behind?)", g_nvme);
    return zt_finish("engine_grad_accum_fp32");
}
