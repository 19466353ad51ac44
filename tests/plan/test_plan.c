/*
 * test_plan.c — `zinc plan`'s model (tools/plan_model.c, compiled into this test) and its bytes:
 *   1. the ring α–β formula and its hierarchical form against hand-computed numbers, and one
 *      whole step (stage 1, one node) written out by hand;
 *   2. the per-step collective bytes the plan prices (zvol_*, and the CLI's --json) equal the
 *      counters (zinc_comm_bytes) of the engines `zinc bench comm` runs for a step, stages 0-3,
 *      local worlds of 2 and 4, one group and three, accumulation 1 and 2;
 *   3. the memory per rank `zinc plan --json` prints equals `zinc estimate --json`'s;
 *   4. monotonicity: doubling any bandwidth (or halving a latency) never makes the step slower;
 *      more GPUs never give more bytes per rank at stage 3; what is exposed of the comm is
 *      within 0 and all of it.
 * The CLI's refusals are tests/plan/cli_test.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/internal.h"
#include "testutil.h"
#include "tools/plan.h"

static int close_to(double got, double want)
{
    return fabs(got - want) <= 1e-12 * fabs(want) + 1e-18;
}

static void test_alpha_beta(void)
{
    /* 1e9 bytes on 4 ranks, 100 GB/s, 10 us: 3 * 1e-5 + 3/4 * 1e9 / 1e11 = 0.00753 s. */
    zplan_link l = {100e9, 1e-5};
    double t = zplan_ring(1e9, 4, l);
    ZT_CHECK(close_to(t, 0.00753), "ring: %.12g, want 0.00753", t);
    ZT_CHECK(zplan_ring(1e9, 1, l) == 0.0, "one rank moves nothing");
    /* 8e9 bytes as 2 collectives on 16 GPUs, 8 per node: each call 4e9 bytes; inside the node
     * 7 * 2e-6 + 7/8 * 4e9 / 200e9 = 0.017514; across 2 nodes the node's 1/8, 5e8 bytes:
     * 1e-5 + 1/2 * 5e8 / 25e9 = 0.01001; two calls: 2 * 0.027524 = 0.055048 s. */
    zplan_link intra = {200e9, 2e-6}, inter = {25e9, 1e-5};
    t = zplan_collective(8e9, 2, 16, 8, intra, inter);
    ZT_CHECK(close_to(t, 0.055048), "hierarchical: %.12g, want 0.055048", t);
    /* Within one node the inter-node link is not used. */
    t = zplan_collective(8e9, 2, 8, 8, intra, inter);
    ZT_CHECK(close_to(t, 2 * (7 * 2e-6 + 7.0 / 8 * 4e9 / 200e9)), "one node: %.12g", t);

    /* A whole step by hand: stage 1, 8 H100s on one node, 2.56e8 parameters (a multiple of
     * 32 * 8, so no padding), seq 1000, micro-batch 1, efficiency 0.5, link 100 GB/s, 1 us.
     *   compute   6 * 2.56e8 * 1000 / (989e12 * 0.5)
     *   RS = AG   7e-6 + 7/8 * 5.12e8 / 1e11 (the bf16 flat buffer), at the step, not hidden
     *   stats     all-reduce of 16 bytes: 2 * (7e-6 + 7/8 * 16 / 1e11)
     *   Adam      28 bytes * 2.56e8 / 8 / 3.35e12 */
    zplan_in in = {.params = 2.56e8, .seq = 1000, .micro_batch = 1, .gpus = 8, .per_node = 8,
                   .stage = 1, .accum = 1, .dtype = ZINC_DTYPE_BF16, .gpu = zplan_gpu_find("h100"),
                   .intra = {100e9, 1e-6}, .inter = {50e9, 5e-6}, .pcie_bw = 64e9,
                   .host_bw = 50e9, .efficiency = 0.5};
    zplan_out o;
    zplan_step(&in, &o);
    double compute = 6 * 2.56e8 * 1000 / (989e12 * 0.5);
    double rs = 7e-6 + 7.0 / 8 * 5.12e8 / 1e11, stats = 2 * (7e-6 + 7.0 / 8 * 16 / 1e11);
    double adam = 28 * 2.56e8 / 8 / 3.35e12;
    double want = compute + 2 * rs + stats + adam;
    ZT_CHECK(close_to(o.step, want), "stage 1 step: %.12g s, by hand %.12g s", o.step, want);
    ZT_CHECK(close_to(o.tokens_per_s, 8000 / want), "tokens/s %.12g", o.tokens_per_s);
    ZT_CHECK(close_to(o.mfu, 6 * 2.56e8 * 8000 / want / (8 * 989e12)), "mfu %.12g", o.mfu);
    /* Checkpointing adds one forward: compute x 4/3. */
    in.checkpointing = 1;
    zplan_step(&in, &o);
    ZT_CHECK(close_to(o.forward + o.backward, compute * 4 / 3), "checkpointing: %.12g",
             o.forward + o.backward);
    /* fp32 runs on the FP32 units (67 TFLOP/s on an H100; it was priced at bf16's 989) */
    in.checkpointing = 0;
    in.dtype = ZINC_DTYPE_FP32;
    zplan_step(&in, &o);
    ZT_CHECK(close_to(o.forward + o.backward, 6 * 2.56e8 * 1000 / (67e12 * 0.5)),
             "fp32 compute: %.12g s", o.forward + o.backward);
    ZT_CHECK(close_to(o.mfu, 6 * 2.56e8 * 8000 / o.step / (8 * 67e12)), "fp32 mfu %.12g", o.mfu);
}

/* ---- the engine's counters --------------------------------------------------------------- */

/* Runs `cmd` and returns its stdout (static buffer), NULL when it fails. */
static const char *run_out(const char *cmd)
{
    static char buf[65536];
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    return pclose(f) == 0 ? buf : NULL;
}

/* The four counters of a --json line at `at` ("all_reduce": ..., "broadcast": ...). */
static int read_counters(const char *at, uint64_t out[ZINC_COLL_COUNT])
{
    const char *k = at ? strstr(at, "\"all_reduce\": ") : NULL;
    unsigned long long v[4];
    if (!k || sscanf(k, "\"all_reduce\": %llu, \"reduce_scatter\": %llu, \"all_gather\": "
                        "%llu, \"broadcast\": %llu", &v[0], &v[1], &v[2], &v[3]) != 4)
        return -1;
    for (int c = 0; c < ZINC_COLL_COUNT; c++) out[c] = v[c];
    return 0;
}

/* The engines of `zinc bench comm` (tools/cmd_bench.c: G groups of P/G parameters, the last
 * taking the remainder, one step of `accum` micro-steps, no persistent groups) ran one step on
 * local worlds of 2 and 4 ranks: their counters against zvol_plan of the same groups, and, for
 * one group (what the CLI plans), against `zinc plan --json`'s comm_bytes. */
static void test_volumes(void)
{
    const long long P = 10007;
    for (int groups = 1; groups <= 3; groups += 2)
        for (int accum = 1; accum <= 2; accum++) {
            char cmd[512];
            snprintf(cmd, sizeof cmd, "%s bench comm --params %lld --worlds 2,4 --stages 0,1,2,3 "
                     "--groups %d --accum %d --json", ZINC_CLI, P, groups, accum);
            const char *out = run_out(cmd);
            ZT_CHECK(out != NULL, "%s failed", cmd);
            if (!out) continue;
            char *lines = strdup(out);
            int seen = 0;
            for (char *save = NULL, *l = strtok_r(lines, "\n", &save); l;
                 l = strtok_r(NULL, "\n", &save)) {
                int n = 0, stage = -1;
                const char *w = strstr(l, "\"world\": "), *st = strstr(l, "\"stage\": ");
                if (!w || !st) continue;
                n = atoi(w + 9), stage = atoi(st + 9);
                uint64_t engine[ZINC_COLL_COUNT], want[ZINC_COLL_COUNT];
                ZT_CHECK(read_counters(l, engine) == 0, "no counters in %s", l);
                zplan_param prm[3];
                zplan_group grp[3];
                memset(prm, 0, sizeof prm);
                memset(grp, 0, sizeof grp);
                for (int g = 0; g < groups; g++) {
                    long long q = P / groups;
                    prm[g] = (zplan_param){.numel = (size_t)(g == groups - 1 ? P - q * g : q),
                                           .group = g, .ndim = 1};
                    grp[g] = (zplan_group){.first_param = g, .nparams = 1};
                }
                zplan p = {.ngroups = groups, .nparams = groups, .groups = grp, .params = prm};
                ZT_CHECK(zplan_layout(&p, n) == 0, "layout");
                zvol_plan(&p, stage, ZINC_DTYPE_BF16, ZINC_DTYPE_BF16, accum, want);
                for (int k = 0; k < ZINC_COLL_COUNT; k++)
                    ZT_CHECK(engine[k] == want[k], "N=%d stage %d groups %d accum %d collective "
                             "%d: engine %llu, plan %llu", n, stage, groups, accum, k,
                             (unsigned long long)engine[k], (unsigned long long)want[k]);
                seen++;
                if (groups != 1) continue;
                uint64_t cli[ZINC_COLL_COUNT];
                snprintf(cmd, sizeof cmd, "%s plan --params %lld --seq 16 --gpus %d --gpu h100 "
                         "--stage %d --accum %d --json", ZINC_CLI, P, n, stage, accum);
                int rc = read_counters(run_out(cmd), cli);
                ZT_CHECK(rc == 0, "%s: no comm_bytes", cmd);
                for (int k = 0; rc == 0 && k < ZINC_COLL_COUNT; k++)
                    ZT_CHECK(cli[k] == engine[k], "CLI N=%d stage %d accum %d collective %d: "
                             "plan %llu, engine %llu", n, stage, accum, k,
                             (unsigned long long)cli[k], (unsigned long long)engine[k]);
            }
            free(lines);
            ZT_CHECK(seen == 8, "groups %d accum %d: %d rows of zinc bench comm, want 8", groups,
                     accum, seen);
        }
}

/* ---- memory against zinc estimate -------------------------------------------------------- */

static long long json_field(const char *buf, const char *key)
{
    const char *k = strstr(buf, key);
    return k ? atoll(k + strlen(key)) : -1;
}

/* `zinc ARGS --json` into buf; 0 on success. */
static int run_json(const char *args, char *buf, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s --json", ZINC_CLI, args);
    const char *out = run_out(cmd);
    snprintf(buf, cap, "%s", out ? out : "");
    return out ? 0 : -1;
}

/* An engine of `cfg` (rank `rank` of `world`, NULL: a world of one) with one group "g" (*g)
 * holding one bf16 parameter "w" of P elements (*p), finalized; NULL (a failed check) when it
 * could not be made. */
static zinc_engine_t *one_group_engine(const char *cfg, zinc_world_t *world, int rank, int64_t P,
                                       int *g, int *p)
{
    zinc_engine_options_t o = {.config_json = cfg, .world = world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    ZT_OK(zinc_group_add(e, "g", g));
    ZT_OK(zinc_param_add(e, *g, "w", 1, &P, ZINC_DTYPE_BF16, p));
    ZT_OK(zinc_finalize(e));
    return e;
}

/* fp32 gradient sums reduced in fp32 (data_types.grad_accum_dtype and communication_data_type
 * "fp32", bf16, stages 1-3): two local ranks, one group of P, one step of 2 micro-steps. The
 * engine's counters against zvol_plan with an fp32 reduce-scatter (twice the 16-bit bytes) and
 * against `zinc plan --config`'s comm_bytes; the bucket block the engine plans against
 * zest_memory's: at stages 2-3 with the fp32 scratch of the group beside the buckets, larger
 * than without communication_data_type by 4 bytes an element of the padded group; at stage 1
 * the 16-bit buckets alone, either way. */
typedef struct {
    const char *cfg;
    zinc_world_t *world;
    uint64_t coll[ZINC_COLL_COUNT], bucket;
} wire_ctx;

#define WIRE_P 10007

static void wire_rank(int rank, void *arg)
{
    wire_ctx *c = arg;
    int g = -1, p = -1;
    zinc_engine_t *e = one_group_engine(c->cfg, c->world, rank, WIRE_P, &g, &p);
    if (!e) return;
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
    ZT_OK(zinc_memory(e, planned, alloc));
    for (int m = 0; m < 2; m++) {
        ZT_OK(zinc_gather(e, g));
        ZT_OK(zinc_release(e, g));
        ZT_OK(zinc_gather(e, g));
        ZT_OK(zinc_release(e, g));
        ZT_OK(zinc_grads_ready(e, g));
        zinc_step_info_t info;
        ZT_OK(zinc_step(e, &info));
    }
    if (rank == 0) {
        ZT_OK(zinc_comm_bytes(e, c->coll));
        c->bucket = planned[ZINC_MEM_BUCKET];
    }
    zinc_engine_destroy(e);
}

static void test_reduce_fp32(void)
{
    for (int stage = 1; stage <= 3; stage++) {
        char cfg[2][512], file[64];
        for (int w = 0; w < 2; w++)
            snprintf(cfg[w], sizeof cfg[w],
                     "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2, "
                     "\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": "
                     "\"fp32\"}, %s\"zero_optimization\": {\"stage\": %d, "
                     "\"stage3_param_persistence_threshold\": 0}}",
                     w ? "\"communication_data_type\": \"fp32\", " : "", stage);
        wire_ctx wide = {.cfg = cfg[1]}, narrow = {.cfg = cfg[0]};
        zt_run_world(2, &wide.world, wire_rank, &wide);
        zt_run_world(2, &narrow.world, wire_rank, &narrow);
        zplan_param prm = {.numel = WIRE_P, .group = 0, .ndim = 1};
        zplan_group grp = {.first_param = 0, .nparams = 1};
        zplan pl = {.ngroups = 1, .nparams = 1, .groups = &grp, .params = &prm};
        ZT_CHECK(zplan_layout(&pl, 2) == 0, "layout");
        uint64_t want[ZINC_COLL_COUNT];
        zvol_plan(&pl, stage, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32, 2, want);
        for (int k = 0; k < ZINC_COLL_COUNT; k++)
            ZT_CHECK(wide.coll[k] == want[k], "stage %d reduced in fp32, collective %d: engine "
                     "%llu, plan %llu", stage, k, (unsigned long long)wide.coll[k],
                     (unsigned long long)want[k]);
        ZT_CHECK(wide.coll[ZINC_COLL_REDUCE_SCATTER] == 2 * narrow.coll[ZINC_COLL_REDUCE_SCATTER],
                 "stage %d: reduce-scatter bytes %llu in fp32, %llu in bf16", stage,
                 (unsigned long long)wide.coll[ZINC_COLL_REDUCE_SCATTER],
                 (unsigned long long)narrow.coll[ZINC_COLL_REDUCE_SCATTER]);
        ZT_CHECK(wide.bucket == narrow.bucket + (stage >= 2 ? 4 * pl.max_group_padded : 0) &&
                     narrow.bucket > 0,
                 "stage %d: bucket block %llu reduced in fp32, %llu in bf16 (group padded to %zu)",
                 stage, (unsigned long long)wide.bucket, (unsigned long long)narrow.bucket,
                 pl.max_group_padded);
        /* the CLI from the same config file */
        snprintf(file, sizeof file, "/tmp/zinc-plan-wire-%d-%d.json", (int)getpid(), stage);
        FILE *f = fopen(file, "w");
        ZT_CHECK(f != NULL, "cannot write %s", file);
        if (!f) continue;
        fputs(cfg[1], f);
        fclose(f);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s plan --params %d --seq 16 --gpus 2 --gpu h100 --config %s "
                 "--json", ZINC_CLI, WIRE_P, file);
        static char out[16384];
        const char *o = run_out(cmd);
        snprintf(out, sizeof out, "%s", o ? o : "");
        uint64_t cli[ZINC_COLL_COUNT];
        int rc = read_counters(out, cli);
        ZT_CHECK(rc == 0, "%s: no comm_bytes", cmd);
        for (int k = 0; rc == 0 && k < ZINC_COLL_COUNT; k++)
            ZT_CHECK(cli[k] == wide.coll[k], "CLI stage %d reduced in fp32, collective %d: plan "
                     "%llu, engine %llu", stage, k, (unsigned long long)cli[k],
                     (unsigned long long)wide.coll[k]);
        long long cb = json_field(out, "\"bucket\": ");
        ZT_CHECK(cb == (long long)wide.bucket, "CLI stage %d: bucket bytes %lld, engine %llu",
                 stage, cb, (unsigned long long)wide.bucket);
        unlink(file);
    }
}

static void test_memory(void)
{
    const char *keys[] = {"\"model_state_bytes_per_rank\": ", "\"total_bytes_per_rank\": ",
                          "\"host_bytes_per_rank\": ", "\"adam_m\": ", "\"gather\": "};
    const char *offl[] = {"", "--offload-optimizer", "--offload-optimizer --offload-param"};
    for (int stage = 0; stage < 4; stage++)
        for (int oi = 0; oi < 3; oi++) {
            if ((oi >= 1 && stage == 0) || (oi == 2 && stage != 3)) continue;
            static char plan[16384], est[8192];
            char a[512];
            snprintf(a, sizeof a, "plan --params 7e9 --layers 32 --hidden 4096 --seq 4096 "
                     "--gpus 64 --gpu h100 --stage %d %s", stage, offl[oi]);
            int rp = run_json(a, plan, sizeof plan);
            /* the plan's buffers are sized by its largest group, a layer: 7e9 / 32 */
            snprintf(a, sizeof a, "estimate --params 7e9 --world-size 64 --dtype bf16 --stage %d "
                     "--group-size 218750000 %s", stage, offl[oi]);
            int re = run_json(a, est, sizeof est);
            ZT_CHECK(rp == 0 && re == 0, "stage %d %s: plan rc %d, estimate rc %d", stage,
                     offl[oi], rp, re);
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                long long p = json_field(plan, keys[k]), e = json_field(est, keys[k]);
                ZT_CHECK(p >= 0 && p == e, "stage %d %s %s plan %lld, estimate %lld", stage,
                         offl[oi], keys[k], p, e);
            }
        }
}

/* The plan's offload copies (o.offload with pcie_bw 1: bytes) against the engine's
 * zinc_offload_bytes over one optimizer step of K micro-steps: one rank, one group of P
 * elements (the plan's bare layout), stages 1-3, K 1 and 3, offload_param at stage 3, fp32
 * gradient sums at stages 2-3; each micro-step gathers twice at stage 3 (forward and backward),
 * no persistent groups. The counters are read around the step's window (the initial values'
 * uploads are not counted by the engine either). */
static void test_offload_bytes(void)
{
    const int64_t P = 65536;
    int rows = 0;
    for (int stage = 1; stage <= 3; stage++)
        for (int k = 1; k <= 3; k += 2)
            for (int op = 0; op <= (stage == 3); op++)
                for (int fp32 = 0; fp32 <= (stage >= 2); fp32++) {
                    char cfg[1024];
                    snprintf(cfg, sizeof cfg,
                             "{\"train_micro_batch_size_per_gpu\": 1, "
                             "\"gradient_accumulation_steps\": %d, \"bf16\": {\"enabled\": true}, "
                             "%s\"zero_optimization\": {\"stage\": %d, "
                             "\"stage3_param_persistence_threshold\": 0, "
                             "\"offload_optimizer\": {\"device\": \"cpu\"}%s}}", k,
                             fp32 ? "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, " : "",
                             stage, op ? ", \"offload_param\": {\"device\": \"cpu\"}" : "");
                    int g = -1, p = -1;
                    zinc_engine_t *e = one_group_engine(cfg, NULL, 0, P, &g, &p);
                    if (!e) continue;
                    uint64_t d0 = 0, u0 = 0, d1 = 0, u1 = 0;
                    ZT_OK(zinc_offload_bytes(e, &d0, &u0));
                    for (int m = 0; m < k; m++) {
                        void *v = NULL;
                        ZT_OK(zinc_gather(e, g));              /* forward */
                        ZT_OK(zinc_release(e, g));
                        ZT_OK(zinc_gather(e, g));              /* backward */
                        ZT_OK(zinc_param_grad(e, p, &v));
                        if (v) memset(v, 0, (size_t)P * 2);
                        ZT_OK(zinc_release(e, g));
                        ZT_OK(zinc_grads_ready(e, g));
                        zinc_step_info_t info;
                        ZT_OK(zinc_step(e, &info));
                    }
                    ZT_OK(zinc_offload_bytes(e, &d1, &u1));
                    zinc_engine_destroy(e);
                    zplan_in in = {.params = (double)P, .seq = 1, .micro_batch = 1, .gpus = 1,
                                   .per_node = 1, .stage = stage, .accum = k,
                                   .dtype = ZINC_DTYPE_BF16, .offload = 1, .offload_param = op,
                                   .grad_fp32 = fp32, .gpu = zplan_gpu_find("h100"),
                                   .intra = {300e9, 2e-6}, .inter = {50e9, 5e-6}, .pcie_bw = 1,
                                   .host_bw = 50e9, .efficiency = 0.5};
                    zplan_out out;
                    zplan_step(&in, &out);
                    double engine = (double)(d1 - d0 + u1 - u0);
                    ZT_CHECK(fabs(out.offload - engine) <= 1e-9 * engine,
                             "stage %d K=%d%s%s: the plan's offload copies %.0f bytes, the "
                             "engine's %.0f (down %llu, up %llu)", stage, k,
                             op ? " offload_param" : "", fp32 ? " fp32 sums" : "", out.offload,
                             engine, (unsigned long long)(d1 - d0), (unsigned long long)(u1 - u0));
                    rows++;
                }
    ZT_CHECK(rows == 14, "%d rows", rows);
}

/* ---- monotonicity ------------------------------------------------------------------------ */

static void test_monotonic(void)
{
    const int gpus[] = {1, 2, 8, 16, 24, 64, 256, 1024};
    const double params[] = {1e8, 1.3e9, 7e9, 7e10};
    int checks = 0;
    for (int stage = 0; stage < 4; stage++)
        for (size_t pi = 0; pi < sizeof params / sizeof params[0]; pi++)
            for (int layers = 0; layers <= 80; layers += 40)
                for (int off = 0; off <= (stage > 0) + (stage == 3); off++) {
                    uint64_t prev_mem = UINT64_MAX;
                    for (size_t gi = 0; gi < sizeof gpus / sizeof gpus[0]; gi++) {
                        zplan_in in = {.params = params[pi], .layers = layers, .hidden = 4096,
                                       .seq = 2048, .micro_batch = 2, .gpus = gpus[gi],
                                       .per_node = 8, .stage = stage, .accum = 2,
                                       .dtype = ZINC_DTYPE_BF16, .offload = off >= 1,
                                       .offload_param = off == 2, .gpu = zplan_gpu_find("a100"),
                                       .intra = {300e9, 2e-6}, .inter = {50e9, 5e-6},
                                       .pcie_bw = 32e9, .host_bw = 50e9, .efficiency = 0.5};
                        zplan_out base, more;
                        zplan_step(&in, &base);
                        /* Overlap hides comm, never more than there is. */
                        double comm = base.reduce_scatter + base.all_gather + base.all_reduce;
                        ZT_CHECK(base.exposed <= comm * (1 + 1e-12) && base.exposed >= 0,
                                 "stage %d N %d: exposed %.9g of %.9g s", stage, gpus[gi],
                                 base.exposed, comm);
                        /* Halving a latency never makes it slower either. */
                        zplan_in fast = in;
                        fast.intra.alpha /= 2, fast.inter.alpha /= 2;
                        zplan_step(&fast, &more);
                        ZT_CHECK(more.step <= base.step, "stage %d N %d: halved latency %.9g s "
                                 "> %.9g s", stage, gpus[gi], more.step, base.step);
                        double *bw[] = {&in.intra.bw, &in.inter.bw, &in.pcie_bw, &in.host_bw};
                        for (int b = 0; b < 4; b++) {
                            zplan_in f = in;
                            double *fb[] = {&f.intra.bw, &f.inter.bw, &f.pcie_bw, &f.host_bw};
                            *fb[b] = *bw[b] * 2;
                            zplan_step(&f, &more);
                            checks++;
                            ZT_CHECK(more.step <= base.step, "stage %d P %g N %d bandwidth %d "
                                     "doubled: %.9g s > %.9g s", stage, params[pi], gpus[gi], b,
                                     more.step, base.step);
                        }
                        if (stage == 3) {
                            /* the state per rank falls with N; the buffers, sized by the largest
                             * group (a layer when the layers are given), grow only by its padding
                             * to a multiple of 32 N elements, which at 1e8 parameters in 40
                             * layers on 1024 GPUs outweighs the state's fall */
                            uint64_t pad = (uint64_t)(ZEST_BUCKETS + ZEST_GATHERS) *
                                           (uint64_t)gpus[gi] * ZPLAN_ALIGN * 2;
                            ZT_CHECK(base.mem.total <= (prev_mem == UINT64_MAX ? prev_mem
                                                                                : prev_mem + pad),
                                     "stage 3 P %g: %llu bytes per rank on %d GPUs, %llu on "
                                     "fewer", params[pi], (unsigned long long)base.mem.total,
                                     gpus[gi], (unsigned long long)prev_mem);
                            prev_mem = base.mem.total;
                        }
                    }
                }
    ZT_CHECK(checks > 100, "only %d checks", checks);
}

/* ---- activations, transformers configs, --recommend -------------------------------------- */

static zplan_in h100_node(void)
{
    return (zplan_in){.seq = 2048, .micro_batch = 1, .gpus = 8, .per_node = 8, .stage = 1,
                      .accum = 1, .dtype = ZINC_DTYPE_BF16, .gpu = zplan_gpu_find("h100"),
                      .intra = {450e9, 2e-6}, .inter = {50e9, 5e-6}, .pcie_bw = 64e9,
                      .host_bw = 50e9, .efficiency = 0.5};
}

static void test_activations(void)
{
    zplan_in in = h100_node();
    in.params = 3.5e8;
    ZT_CHECK(zplan_activations(&in) == 0.0, "no layers: no activations modelled");
    /* Plain MLP, I = 4h: Korthikanti et al.'s 34 s b h per layer, and 14 bytes per logit.
     * 24 layers, h 1024, s 2048, b 2, V 50000: 24 * 34 * 1024 * 4096 + 14 * 50000 * 4096. */
    in.layers = 24, in.hidden = 1024, in.micro_batch = 2, in.vocab = 50000;
    double want = 24.0 * 34 * 1024 * 4096 + 14.0 * 50000 * 4096;
    ZT_CHECK(close_to(zplan_activations(&in), want), "plain: %.12g, by hand %.12g",
             zplan_activations(&in), want);
    /* Gated MLP, I = 2816: per token 15h + 3h + 8I = 18 * 1024 + 22528 = 40960 bytes. */
    in.gated = 1, in.ffn = 2816;
    want = 24.0 * 40960 * 4096 + 14.0 * 50000 * 4096;
    ZT_CHECK(close_to(zplan_activations(&in), want), "gated: %.12g, by hand %.12g",
             zplan_activations(&in), want);
    /* Checkpointing: each layer's 16-bit input, one layer in full, the logits. */
    in.checkpointing = 1;
    want = 24.0 * 2 * 1024 * 4096 + 40960.0 * 4096 + 14.0 * 50000 * 4096;
    ZT_CHECK(close_to(zplan_activations(&in), want), "checkpointing: %.12g, by hand %.12g",
             zplan_activations(&in), want);
    zplan_out o;
    zplan_step(&in, &o);
    ZT_CHECK(close_to(o.activations, want) &&
             o.fits == ((double)o.mem.total + want <= in.gpu->mem_bytes),
             "zplan_step's activations %.12g, fits %d", o.activations, o.fits);
    /* fp32 activations (fp32 training, the built-in model on the CPU): the layers' part twice
     * (it was the 16-bit figure whatever the dtype, half of what zinc train measured) */
    in.act_bytes = 4;
    want = 2.0 * (24.0 * 2 * 1024 * 4096 + 40960.0 * 4096) + 14.0 * 50000 * 4096;
    ZT_CHECK(close_to(zplan_activations(&in), want), "fp32 activations: %.12g, by hand %.12g",
             zplan_activations(&in), want);
}

/* The buffers follow the largest group (a layer, or the embedding where larger), and the host
 * Adam of offload shares the node's host bandwidth among its ranks. */
static void test_groups_and_host(void)
{
    zplan_in in = h100_node();
    in.params = 124e6, in.layers = 12, in.hidden = 768, in.vocab = 50257, in.seq = 1024;
    long long embed = 50257LL * 768;
    ZT_CHECK(zplan_largest_group(&in) == embed, "GPT-2: largest group %lld, want the embedding "
             "%lld", zplan_largest_group(&in), embed);
    in.vocab = 0;   /* no vocabulary: P / layers */
    ZT_CHECK(zplan_largest_group(&in) == (long long)ceil(124e6 / 12), "no vocab: %lld",
             zplan_largest_group(&in));
    in.layers = 0;
    ZT_CHECK(zplan_largest_group(&in) == zest_default_group(124000000), "no layers: %lld",
             zplan_largest_group(&in));
    /* Stage 3's gather slots: two of the largest group, not of the model (memory per rank grew
     * with the stage: GPT-2 on 8 GPUs held 0.68, 0.96, 1.24 GB at stages 1-3) */
    in.layers = 12, in.vocab = 50257, in.gpus = 8, in.micro_batch = 8;
    double prev = 0;
    for (int stage = 1; stage <= 3; stage++) {
        in.stage = stage;
        zplan_out o;
        zplan_step(&in, &o);
        ZT_CHECK(stage == 1 || (double)o.mem.total < prev, "GPT-2 on 8 GPUs: stage %d holds %llu "
                 "bytes per rank, stage %d %.0f", stage, (unsigned long long)o.mem.total,
                 stage - 1, prev);
        prev = (double)o.mem.total;
    }
    /* Offloaded Adam on 8 ranks of one node: each has 1/8 of the shard and 1/8 of the host's
     * bandwidth, so its time is one rank's whole (it was 8 times less: efficiency 4-7); equal
     * but for the shard's padding to 32 x 8 elements, 1e-6 of it here */
    in.stage = 2, in.offload = 1;
    zplan_out one, eight;
    in.gpus = 1;
    zplan_step(&in, &one);
    in.gpus = 8;
    zplan_step(&in, &eight);
    ZT_CHECK(fabs(eight.optimizer - one.optimizer) <= 2e-6 * one.optimizer,
             "offloaded Adam: %.6g s on 8 ranks of a node, %.6g s on one", eight.optimizer,
             one.optimizer);
    /* above 1 only by what each rank's own PCIe link and the smaller shard give (1.07 here) */
    ZT_CHECK(eight.tokens_per_s <= 8 * one.tokens_per_s * 1.10, "offload scaling: %.6g tokens/s "
             "on 8, %.6g on 1", eight.tokens_per_s, one.tokens_per_s);
    /* A calibrated CPU rank: its device is the node's host, so its own Adam shares the node's
     * rate as offload's does, and the same Adam costs the same with and without offload (the
     * offloaded one was priced 4x slower on 4 ranks) */
    zplan_gpu cal = {.name = "calibrated", .label = "calibrated rank", .peak_flops = 1e10,
                     .mem_bytes = 1e10, .hbm_bw = 1e10, .nvlink_bw = 1e9, .pcie_bw = 1e9,
                     .source = "test", .host_device = 1};
    in.gpu = &cal, in.host_bw = cal.hbm_bw, in.gpus = 4, in.per_node = 4;
    zplan_out dev, off;
    in.offload = 0;
    zplan_step(&in, &dev);
    in.offload = 1;
    zplan_step(&in, &off);
    ZT_CHECK(close_to(off.optimizer, dev.optimizer), "a calibrated rank's Adam: %.6g s offloaded, %.6g s not", off.optimizer,
             dev.optimizer);
}

static void test_hf_configs(void)
{
    /* The parameter counts transformers 5.24 gives for these files (GPT2LMHeadModel and
     * LlamaForCausalLM built from them: sum of numel over model.parameters()). */
    char err[512];
    zplan_in in = h100_node();
    in.seq = 0;
    int rc = zplan_from_hf_config(ZINC_PLAN_TEST_DIR "/gpt2-config.json", &in, err, sizeof err);
    ZT_CHECK(rc == 0, "gpt2 config: %s", err);
    ZT_CHECK(in.params == 124439808.0 && in.layers == 12 && in.hidden == 768 &&
             in.vocab == 50257 && in.ffn == 3072 && !in.gated && in.seq == 1024,
             "gpt2: params %.0f layers %d hidden %.0f vocab %.0f ffn %.0f gated %d seq %.0f",
             in.params, in.layers, in.hidden, in.vocab, in.ffn, in.gated, in.seq);
    in = h100_node();      /* seq given: kept */
    rc = zplan_from_hf_config(ZINC_PLAN_TEST_DIR "/llama-1b-config.json", &in, err, sizeof err);
    ZT_CHECK(rc == 0, "llama config: %s", err);
    ZT_CHECK(in.params == 1104218112.0 && in.layers == 16 && in.hidden == 2048 &&
             in.ffn == 8192 && in.gated && in.seq == 2048,
             "llama: params %.0f layers %d hidden %.0f ffn %.0f gated %d seq %.0f", in.params,
             in.layers, in.hidden, in.ffn, in.gated, in.seq);
    /* --layers given as well: the count is the model's with 6 layers (it stayed the file's
     * 12-layer count): 124,439,808 less 6 blocks of 7,087,872 (4h + 4h^2+4h + 2hI+I+h, h 768,
     * I 3072) */
    in = h100_node();
    in.layers = 6;
    in.seq = 1024;         /* (GPT-2's n_positions: a longer --seq is refused, below) */
    rc = zplan_from_hf_config(ZINC_PLAN_TEST_DIR "/gpt2-config.json", &in, err, sizeof err);
    ZT_CHECK(rc == 0 && in.params == 124439808.0 - 6 * 7087872.0 && in.layers == 6 &&
                 in.hidden == 768, "gpt2 with 6 layers: params %.0f layers %d hidden %.0f",
             in.params, in.layers, in.hidden);
    in = h100_node();
    in.seq = 1025;
    rc = zplan_from_hf_config(ZINC_PLAN_TEST_DIR "/gpt2-config.json", &in, err, sizeof err);
    ZT_CHECK(rc != 0 && strstr(err, "n_positions"), "gpt2 at seq 1025: rc %d, %s", rc, err);
    rc = zplan_from_hf_config(ZINC_PLAN_TEST_DIR "/no-such-config.json", &in, err, sizeof err);
    ZT_CHECK(rc != 0 && strstr(err, "no-such-config.json"), "missing file: rc %d, '%s'", rc, err);
}

static void test_recommend(void)
{
    /* 13e9 parameters on one 80 GB H100: 16 bytes per parameter (208 GB) cannot stay on the
     * device at any stage, so the choice must offload; every candidate keeps the batch. */
    zplan_in in = h100_node();
    in.params = 13e9, in.gpus = 1, in.layers = 40, in.hidden = 5120, in.vocab = 32000;
    zplan_choice c[256];
    int n = zplan_recommend(&in, 16, c, 256);
    ZT_CHECK(n > 0 && c[0].out.fits && c[0].offload, "13B on one GPU: %d candidates, first fits "
             "%d offload %d", n, n ? c[0].out.fits : -1, n ? c[0].offload : -1);
    for (int i = 0; i < n; i++) {
        ZT_CHECK(c[i].micro_batch * c[i].accum * in.gpus == 16, "candidate %d: %lld x %d", i,
                 c[i].micro_batch, c[i].accum);
        ZT_CHECK(!c[i].out.fits || c[i].out.tokens_per_s <= c[0].out.tokens_per_s,
                 "candidate %d fits and is faster than the choice (%.6g > %.6g)", i,
                 c[i].out.tokens_per_s, c[0].out.tokens_per_s);
        ZT_CHECK(!c[i].out.fits || c[i].stage > 0 || !c[i].offload, "offload at stage 0");
    }
    /* --host-mem: offload's host bytes per node (per rank x min(gpus, per_node)) must fit too.
     * 13e9 parameters offloaded put 16 bytes each on the one rank's host (208 GB): a host of
     * exactly that fits, one byte less does not, and with no host to offload to nothing fits. */
    zplan_out o;
    in.stage = 3, in.offload = 1, in.micro_batch = 1, in.accum = 1;
    zplan_step(&in, &o);
    double need = (double)o.mem.host_total;
    ZT_CHECK(o.host_fits && o.fits && need >= 16 * 13e9, "no --host-mem: host_fits %d fits %d, "
             "%.6g host bytes", o.host_fits, o.fits, need);
    in.host_mem = need;
    zplan_step(&in, &o);
    ZT_CHECK(o.host_fits && o.fits, "host of exactly %.6g bytes: host_fits %d", need, o.host_fits);
    in.host_mem = need - 1;
    zplan_step(&in, &o);
    ZT_CHECK(!o.host_fits && !o.fits, "host of %.6g bytes, %.6g needed: fits", need - 1, need);
    n = zplan_recommend(&in, 16, c, 256);
    ZT_CHECK(n > 0 && !c[0].out.fits, "13B on one GPU with too little host: first fits %d",
             n ? c[0].out.fits : -1);
    /* 8 ranks on a node of 8 GPUs: the node holds 8 ranks' host bytes */
    in.gpus = 8, in.host_mem = 0;
    zplan_step(&in, &o);
    ZT_CHECK(o.host_per_node == 8.0 * (double)o.mem.host_total, "per node %.6g, per rank %.6g",
             o.host_per_node, (double)o.mem.host_total);
    in.stage = 0, in.offload = 0;
    /* A small model fits everywhere: no offload (it only adds copies). */
    in.params = 1.25e8, in.layers = 12, in.hidden = 768, in.gpus = 8;
    n = zplan_recommend(&in, 64, c, 256);
    ZT_CHECK(n > 0 && c[0].out.fits && !c[0].offload && !c[0].checkpointing,
             "small model: offload %d checkpointing %d", n ? c[0].offload : -1,
             n ? c[0].checkpointing : -1);
    ZT_CHECK(zplan_recommend(&in, 60, c, 256) == 0, "a global batch of 60 on 8 GPUs");
}

/* A calibration file as `zinc plan --calibrate` writes it: read back as the GPU table's row, and
 * a step priced with it at efficiency 1 is its FLOPs over the measured FLOP/s plus Adam at the
 * measured bytes/s (one rank: no comm). */
static void test_calibration(void)
{
    char path[] = "/tmp/zinc-plan-cal-XXXXXX";
    int fd = mkstemp(path);
    ZT_CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"zinc_calibration\": 1, \"device\": \"cpu\",\n \"flops_per_s\": 2e10, "
               "\"optimizer_bytes_per_s\": 3e10,\n \"link_alpha_s\": 1e-05, "
               "\"link_bytes_per_s\": 4e9, \"link_ranks\": 2,\n \"memory_bytes\": 2.5e10}\n");
    fclose(f);
    zplan_gpu g;
    zplan_link l;
    char err[256];
    int rc = zplan_read_calibration(path, &g, &l, err, sizeof err);
    unlink(path);
    ZT_CHECK(rc == 0, "read: %s", err);
    ZT_CHECK(g.peak_flops == 2e10 && g.hbm_bw == 3e10 && g.mem_bytes == 2.5e10 && l.bw == 4e9 &&
             l.alpha == 1e-5, "calibrated row: %g %g %g, link %g %g", g.peak_flops, g.hbm_bw,
             g.mem_bytes, l.bw, l.alpha);
    zplan_in in = h100_node();
    in.gpu = &g, in.intra = l, in.gpus = 1, in.per_node = 1, in.efficiency = 1.0;
    in.params = 1.2e6, in.layers = 2, in.hidden = 128, in.seq = 128, in.micro_batch = 4;
    zplan_out o;
    zplan_step(&in, &o);
    double flops = (6 * 1.2e6 + 12.0 * 2 * 128 * 128) * 512;
    double want = flops / 2e10 + 28.0 * 1.2e6 / 3e10;
    ZT_CHECK(fabs(o.step - want) <= 1e-9 * want, "calibrated step %.12g, by hand %.12g", o.step,
             want);
}

int main(void)
{
    test_alpha_beta();
    test_volumes();
    test_reduce_fp32();
    test_memory();
    test_offload_bytes();
    test_monotonic();
    test_activations();
    test_groups_and_host();
    test_hf_configs();
    test_recommend();
    test_calibration();
    return zt_finish("test_plan");
}
