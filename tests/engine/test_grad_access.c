/*
 * test_grad_access.c — zinc_param_grad_get / zinc_param_grad_set (DeepSpeed's safe_get_full_grad
 * and safe_set_full_grad) at stages 0-3, fp32 and bf16, 1, 2 and 4 local ranks, with and without
 * optimizer offload.
 *
 * Two parameters in two groups (777 and 33x3 elements, so slices and padding differ by world
 * size). Each optimizer step has 2 micro-steps; in micro-step k rank r adds (r + 1) * G_k into
 * the gradient views, G_k made of multiples of 1/64 no larger than 6/64, so every sum, every
 * average over 2 or 4 ranks and its bf16 rounding are exact: the gradient read back must equal
 * sum_k G_k * (N + 1) / 2 bit for bit, after each micro-step's backward (the accumulation so
 * far), and be zero after the optimizer step.
 *
 * After the step, parameter "b" set whole reads back (with offload in fp32 mode the set rewrites
 * the host master the step's uploads read: engine_grad_access_late checks it waits for them).
 *
 * Then, before the first optimizer step, every rank sets parameter "a"'s gradient to H. The
 * weights after that step must be bitwise those of a reference run whose micro-steps produce H
 * for "a" themselves (micro-step 0 adds nothing to it, micro-step 1 adds H on every rank): the
 * step uses the gradient set, also when offload has already queued the old one to the host
 * (engine_grad_access_eager runs this with ZINC_CPU_ASYNC_COPY=eager, where a queued copy reads
 * its source at once: without the second download the offload rows fail there).
 *
 * Split: the same runs with parameter "a"'s contribution of each micro-step handed over in two
 * parts, rank * G_k with zinc_grads_ready and G_k after it with zinc_grads_more (what reentrant
 * activation checkpointing makes the Python front-end do for a module run in several segments):
 * every check above holds bit for bit, so the second part is reduced and added to the first
 * (without zinc_grads_more's reduce at stages 2-3 the grad read back lacks it; at every stage
 * a second zinc_grads_ready is refused).
 *
 * zinc_grads_reduce (test_early_reduce, 2 ranks, stage 0): refused inside the window; at its end
 * the gradient reads back as the average; a gradient set after it is what zinc_step applies
 * (zinc_step reducing again: rank 0's weights are not those of its own gradient alone); refused
 * at stage 2, and zinc_grads_more after it is refused.
 *
 * Misuse at one rank, stage 2: reading or setting while the group's gradient is still in its
 * bucket (before zinc_grads_ready) is ZINC_ERR_USAGE naming zinc_grads_ready; NULL buffers and
 * unknown ids are refused; zinc_grads_more of a group not handed over in this micro-step is
 * ZINC_ERR_USAGE naming zinc_grads_ready.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "testutil.h"
#include "zinc.h"

#define NA 777
#define NB 99
#define MAXR 4

typedef struct {
    zinc_world_t *world;
    int world_size, stage, bf16, offload;
    int reference;              /* 1: the run that produces H in its micro-steps, no set */
    int local;                  /* 1: H set fragment by fragment (zinc_param_local_set) */
    int split;                  /* 1: a's gradient handed over in two parts (zinc_grads_more) */
    int64_t lo[MAXR], hi[MAXR]; /* each rank's fragment of parameter "a" */
    float *weights[MAXR][2];    /* the masters after the first optimizer step, per rank */
    int checks_failed[MAXR];
} run_ctx;

/* G_k[i] and H[i]: multiples of 1/64 in [-6/64, 6/64]. */
static float g_val(int k, int64_t i) { return (float)((i * 7 + k * 5 + 3) % 13 - 6) / 64.0f; }
static float h_val(int64_t i) { return (float)((i * 11 + 1) % 13 - 6) / 64.0f; }

static zinc_dtype dtype_of(const run_ctx *c) { return c->bf16 ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP32; }

/* Adds `scale` * f(i) into the gradient view of a parameter (in the working dtype). */
static void add_grad(zinc_engine_t *e, int p, const run_ctx *c, int64_t n, int k, float scale,
                     int use_h)
{
    void *v = NULL;
    ZT_OK(zinc_param_grad(e, p, &v));
    if (!v) return;
    zinc_dtype dt = dtype_of(c);
    for (int64_t i = 0; i < n; i++)        /* exact in bf16: small multiples of 1/64 */
        zk_store(v, dt, (size_t)i, zk_load(v, dt, (size_t)i) +
                                       scale * (use_h ? h_val(i) : g_val(k, i)));
}

/* Compares the gradient read back with `want` (fp32) bit for bit; returns 1 when equal. */
static int same(const float *got, const float *want, int64_t n, const char *what, int rank)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4)) {
            ZT_CHECK(0, "%s rank %d: element %lld is %.9g, want %.9g", what, rank, (long long)i,
                     got[i], want[i]);
            return 0;
        }
    return 1;
}

static void rank_fn(int rank, void *arg)
{
    run_ctx *c = arg;
    char cfg[1024], label[128];
    snprintf(label, sizeof label, "stage %d %s N=%d%s%s%s", c->stage, c->bf16 ? "bf16" : "fp32",
             c->world_size, c->offload ? " offload" : "", c->split ? " split" : "",
             c->reference ? " (reference)" : "");
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2, %s"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             "\"zero_optimization\": {\"stage\": %d%s}}",
             c->bf16 ? "\"bf16\": {\"enabled\": true}," : "", c->stage,
             c->offload ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "");
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int ga, gb, pa, pb;
    int64_t sa[1] = {NA}, sb[2] = {33, 3};
    ZT_OK(zinc_group_add(e, "a", &ga));
    ZT_OK(zinc_group_add(e, "b", &gb));
    ZT_OK(zinc_param_add(e, ga, "a.w", 1, sa, dtype_of(c), &pa));
    ZT_OK(zinc_param_add(e, gb, "b.w", 2, sb, dtype_of(c), &pb));
    ZT_OK(zinc_finalize(e));
    float *init = malloc(NA * sizeof(float));
    for (int64_t i = 0; i < NA; i++) init[i] = (float)(i % 17) / 32.0f - 0.25f;
    ZT_OK(zinc_param_set(e, pa, init));
    ZT_OK(zinc_param_set(e, pb, init));
    const int params[2] = {pa, pb};
    const int64_t numel[2] = {NA, NB};
    float *got = malloc(NA * sizeof(float)), *want = malloc(NA * sizeof(float));
    float mean = (float)(c->world_size + 1) / 2.0f;
    for (int k = 0; k < 2; k++) {
        for (int q = 0; q < 2; q++) {
            int g = q ? gb : ga;
            ZT_OK(zinc_gather(e, g));
            int split = c->split && !c->reference && q == 0;
            if (c->reference && q == 0)
                add_grad(e, pa, c, NA, k, k == 1 ? 1.0f : 0.0f, 1);
            else
                add_grad(e, params[q], c, numel[q], k, (float)(rank + 1 - split), 0);
            ZT_OK(zinc_release(e, g));
            ZT_OK(zinc_grads_ready(e, g));
            if (split) {
                add_grad(e, pa, c, NA, k, 1.0f, 0);
                ZT_OK(zinc_grads_more(e, g));
            }
        }
        if (!c->reference) {
            /* The accumulation so far, averaged over the ranks. */
            for (int q = 0; q < 2; q++) {
                for (int64_t i = 0; i < numel[q]; i++)
                    want[i] = (g_val(0, i) + (k == 1 ? g_val(1, i) : 0.0f)) * mean;
                ZT_OK(zinc_param_grad_get(e, params[q], got));
                char what[200];
                snprintf(what, sizeof what, "%s: grad of %s after micro-step %d", label,
                         q ? "b" : "a", k);
                c->checks_failed[rank] += !same(got, want, numel[q], what, rank);
            }
            if (k == 1) {
                /* Every rank sets the same H (whole, or its fragment); the step must use it. */
                for (int64_t i = 0; i < NA; i++) want[i] = h_val(i);
                int64_t lo = 0, hi = 0;
                ZT_OK(zinc_param_local_range(e, pa, &lo, &hi));
                if (c->local) {
                    ZT_OK(zinc_param_local_set(e, pa, ZINC_STATE_GRAD, want + lo));
                } else {
                    ZT_OK(zinc_param_grad_set(e, pa, want));
                }
                /* The fragment of the gradient reads back (from stage 2; refused below). */
                if (c->stage >= 2) {
                    ZT_OK(zinc_param_local_get(e, pa, ZINC_STATE_GRAD, got));
                    char what[200];
                    snprintf(what, sizeof what, "%s: local grad of a", label);
                    c->checks_failed[rank] += !same(got, want + lo, hi - lo, what, rank);
                } else {
                    ZT_CHECK(zinc_param_local_get(e, pa, ZINC_STATE_GRAD, got) == ZINC_ERR_USAGE &&
                                 strstr(zinc_last_error(e), "not partitioned"),
                             "%s: local grad below stage 2: %s", label, zinc_last_error(e));
                }
                ZT_OK(zinc_param_grad_get(e, pa, got));
                char what[200];
                snprintf(what, sizeof what, "%s: grad of a after zinc_param_grad_set", label);
                c->checks_failed[rank] += !same(got, want, NA, what, rank);
            }
        }
        zinc_step_info_t info = {0};
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(info.boundary == (k == 1) && !info.skipped, "%s: micro-step %d: boundary %d, "
                 "skipped %d", label, k, info.boundary, info.skipped);
    }
    /* After the step the gradients start again from zero. */
    memset(want, 0, NA * sizeof(float));
    for (int q = 0; q < 2; q++) {
        ZT_OK(zinc_param_grad_get(e, params[q], got));
        char what[200];
        snprintf(what, sizeof what, "%s: grad of %s after zinc_step", label, q ? "b" : "a");
        c->checks_failed[rank] += !same(got, want, numel[q], what, rank);
    }
    for (int q = 0; q < 2; q++) {
        c->weights[rank][q] = malloc((size_t)numel[q] * sizeof(float));
        ZT_OK(zinc_param_get(e, params[q], c->weights[rank][q]));
    }
    /* A whole parameter set right after the step: with offload it rewrites the host master
     * (fp32: what the step's uploads read) only after they are done (engine_grad_access_late
     * aborts on a zinc_param_set that does not settle first), and reads back. */
    for (int64_t i = 0; i < NB; i++) want[i] = h_val(i) - 0.125f;
    ZT_OK(zinc_param_set(e, pb, want));
    ZT_OK(zinc_param_get(e, pb, got));
    {
        char what[200];
        snprintf(what, sizeof what, "%s: b set whole after the step", label);
        c->checks_failed[rank] += !same(got, want, NB, what, rank);
    }
    /* The fragments: each rank's local master and first moment read its part of the whole
     * ones, and written fragment by fragment on every rank they read back whole. */
    int64_t lo = 0, hi = 0;
    ZT_OK(zinc_param_local_range(e, pa, &lo, &hi));
    c->lo[rank] = lo;
    c->hi[rank] = hi;
    if (c->weights[rank][0]) {
        ZT_OK(zinc_param_local_get(e, pa, ZINC_STATE_MASTER, got));
        char what[200];
        snprintf(what, sizeof what, "%s: local master of a", label);
        c->checks_failed[rank] += !same(got, c->weights[rank][0] + lo, hi - lo, what, rank);
    }
    for (int64_t i = 0; i < NA; i++) want[i] = 2.0f * h_val(i) + 0.5f;
    ZT_OK(zinc_param_local_set(e, pa, ZINC_STATE_MASTER, want + lo));
    ZT_OK(zinc_param_local_set(e, pa, ZINC_STATE_EXP_AVG_SQ, want + lo));
    const zinc_param_state read[2] = {ZINC_STATE_MASTER, ZINC_STATE_EXP_AVG_SQ};
    for (int k = 0; k < 2; k++) {
        ZT_OK(k ? zinc_param_state_get(e, pa, read[k], got) : zinc_param_get(e, pa, got));
        char what[200];
        snprintf(what, sizeof what, "%s: %s set fragment by fragment", label,
                 k ? "exp_avg_sq" : "master");
        c->checks_failed[rank] += !same(got, want, NA, what, rank);
    }
    ZT_CHECK(zinc_param_local_get(e, pa, (zinc_param_state)9, got) == ZINC_ERR_INVALID_ARG &&
                 zinc_param_local_set(e, pa, ZINC_STATE_MASTER, NULL) == ZINC_ERR_INVALID_ARG,
             "%s: an unknown stream, a NULL buffer: %s", label, zinc_last_error(e));
    free(init);
    free(got);
    free(want);
    zinc_engine_destroy(e);
}

static void run(run_ctx *c) { zt_run_world(c->world_size, &c->world, rank_fn, c); }

static void free_run(run_ctx *c)
{
    for (int r = 0; r < MAXR; r++)
        for (int q = 0; q < 2; q++) free(c->weights[r][q]);
}

static void test_get_set(int stage, int bf16, int world_size, int offload, int local, int split)
{
    run_ctx t = {.world_size = world_size, .stage = stage, .bf16 = bf16, .offload = offload,
                 .local = local, .split = split};
    run_ctx ref = t;
    ref.reference = 1;
    run(&t);
    run(&ref);
    /* The fragments tile the parameter in rank order (stage 0: each rank has all of it). */
    int64_t at = 0;
    int tiled = 1;
    for (int r = 0; r < world_size; r++) {
        if (stage == 0) {
            tiled &= t.lo[r] == 0 && t.hi[r] == NA;
        } else {
            tiled &= t.lo[r] == at && t.hi[r] >= t.lo[r];
            at = t.hi[r];
        }
    }
    ZT_CHECK(tiled && (stage == 0 || at == NA), "stage %d N=%d: the fragments of a do not tile "
             "it (rank 0 [%lld, %lld), last ends at %lld)", stage, world_size,
             (long long)t.lo[0], (long long)t.hi[0], (long long)at);
    int failed = 0;
    for (int r = 0; r < world_size; r++) failed += t.checks_failed[r];
    int equal = 1;
    for (int r = 0; r < world_size && equal; r++)
        for (int q = 0; q < 2; q++)
            if (!t.weights[r][q] || !ref.weights[r][q] ||
                memcmp(t.weights[r][q], ref.weights[r][q], (q ? NB : NA) * sizeof(float)))
                equal = 0;
    ZT_CHECK(equal, "stage %d %s N=%d%s: the weights after a step with the gradient set differ "
             "from those of the run that produced it", stage, bf16 ? "bf16" : "fp32", world_size,
             offload ? " offload" : "");
    /* The reference trained at all: its weights moved from the initial ones. */
    int moved = ref.weights[0][0] && ref.weights[0][0][1] != (float)(1 % 17) / 32.0f - 0.25f;
    ZT_CHECK(moved, "stage %d: the reference run's weights did not move", stage);
    printf("stage %d %s N=%d%s%s%s: gradients read back exactly (%s), the step uses the one "
           "set\n", stage, bf16 ? "bf16" : "fp32", world_size, offload ? " offload" : "",
           local ? " (set by fragments)" : "", split ? " (a handed over in two parts)" : "",
           failed ? "NOT" : "ok");
    free_run(&t);
    free_run(&ref);
}

/* A one-rank engine of `cfg` with one group "a" holding one parameter "a.w" of 10 elements of
 * `dt` (*g, *p), not finalized; NULL (a failed check) when it could not be made. */
static zinc_engine_t *one_param_engine(const char *cfg, zinc_dtype dt, int *g, int *p)
{
    zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    int64_t s[1] = {10};
    ZT_OK(zinc_group_add(e, "a", g));
    ZT_OK(zinc_param_add(e, *g, "a.w", 1, s, dt, p));
    return e;
}

/* One rank, stage 2: the gradient of a group not handed over yet is refused, by name. */
static void test_misuse(void)
{
    int g, p;
    zinc_engine_t *e = one_param_engine("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": "
                                        "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}, "
                                        "\"zero_optimization\": {\"stage\": 2}}",
                                        ZINC_DTYPE_FP32, &g, &p);
    if (!e) return;
    float buf[10] = {0};
    ZT_CHECK(zinc_param_grad_get(e, p, buf) == ZINC_ERR_USAGE, "get before zinc_finalize");
    ZT_OK(zinc_finalize(e));
    float *v = NULL;
    ZT_OK(zinc_param_grad(e, p, (void **)&v));
    ZT_CHECK(zinc_param_grad_get(e, p, buf) == ZINC_ERR_USAGE &&
                 strstr(zinc_last_error(e), "zinc_grads_ready") &&
                 strstr(zinc_last_error(e), "a.w"),
             "get with the gradient in its bucket: %s", zinc_last_error(e));
    ZT_CHECK(zinc_param_grad_set(e, p, buf) == ZINC_ERR_USAGE &&
                 strstr(zinc_last_error(e), "zinc_grads_ready"),
             "set with the gradient in its bucket: %s", zinc_last_error(e));
    ZT_CHECK(zinc_grads_more(e, g) == ZINC_ERR_USAGE &&
                 strstr(zinc_last_error(e), "not handed over") &&
                 strstr(zinc_last_error(e), "zinc_grads_ready"),
             "zinc_grads_more before zinc_grads_ready: %s", zinc_last_error(e));
    ZT_OK(zinc_grads_ready(e, g));
    ZT_CHECK(zinc_grads_ready(e, g) == ZINC_ERR_USAGE &&
                 strstr(zinc_last_error(e), "zinc_grads_more"),
             "a second zinc_grads_ready: %s", zinc_last_error(e));
    ZT_CHECK(zinc_param_grad_get(e, p, NULL) == ZINC_ERR_INVALID_ARG, "NULL out");
    ZT_CHECK(zinc_param_grad_set(e, p, NULL) == ZINC_ERR_INVALID_ARG, "NULL values");
    ZT_CHECK(zinc_param_grad_get(e, 7, buf) == ZINC_ERR_INVALID_ARG &&
                 strstr(zinc_last_error(e), "unknown parameter"),
             "unknown id: %s", zinc_last_error(e));
    ZT_CHECK(zinc_param_grad_get(NULL, 0, buf) == ZINC_ERR_INVALID_ARG, "NULL engine");
    ZT_OK(zinc_param_grad_get(e, p, buf));
    ZT_OK(zinc_step(e, NULL));
    zinc_engine_destroy(e);
}

/* One rank, stage 2 and stage 1 with fp32 gradient sums (both bucketed): gradient added into a
 * group's bucket after its zinc_grads_ready and not handed over makes zinc_step refuse, naming
 * the group and zinc_grads_more (it was carried, unreduced, into the next window); after
 * zinc_grads_more the step goes on, and the late part is in the step's gradient. */
static void test_late_add(int stage)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": "
             "true}, %s\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}, "
             "\"zero_optimization\": {\"stage\": %d}}",
             stage == 1 ? "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, " : "", stage);
    int g, p;
    zinc_engine_t *e = one_param_engine(cfg, ZINC_DTYPE_BF16, &g, &p);
    if (!e) return;
    ZT_OK(zinc_finalize(e));
    void *v = NULL;
    ZT_OK(zinc_param_grad(e, p, &v));
    for (int i = 0; v && i < 10; i++) zk_store(v, ZINC_DTYPE_BF16, (size_t)i, 1.0f);
    ZT_OK(zinc_grads_ready(e, g));
    ZT_OK(zinc_param_grad(e, p, &v));        /* more, after the hand-over */
    for (int i = 0; v && i < 10; i++) zk_store(v, ZINC_DTYPE_BF16, (size_t)i, 2.0f);
    zinc_step_info_t info;
    ZT_CHECK(zinc_step(e, &info) == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "'a'") &&
                 strstr(zinc_last_error(e), "zinc_grads_more"),
             "stage %d: a step with gradient added after the hand-over: %s", stage,
             zinc_last_error(e));
    ZT_OK(zinc_grads_more(e, g));
    float buf[10] = {0};
    ZT_OK(zinc_param_grad_get(e, p, buf));
    ZT_CHECK(buf[0] == 3.0f && buf[9] == 3.0f, "stage %d: the gradient after zinc_grads_more "
             "is %g, want 3 (1 handed over, 2 more)", stage, buf[0]);
    ZT_OK(zinc_step(e, &info));
    ZT_CHECK(info.boundary && !info.skipped, "stage %d: the step after zinc_grads_more", stage);
    zinc_engine_destroy(e);
}

/* ---- zinc_grads_reduce: stage 0's all-reduce at the window's end, before zinc_step ---------- */

typedef struct {
    zinc_world_t *world;
    int world_size;
    int reference;              /* 1: the window's gradient is rank r's own value, not reduced */
    float got[MAXR][10], weights[MAXR][10];
} early_ctx;

/* Rank r's own window gradient: H on rank 0, -H on rank 1 (opposite signs: Adam's first update
 * is about lr x sign(g), so values that differ only in scale would step alike). */
static float r_val(int rank, int64_t i) { return rank ? -h_val(i) : h_val(i); }

/* Rank r adds (r + 1) G_k in micro-step k (k = 0, 1), reduces early at the window's end, reads
 * the average back, then sets its own value and steps: with zinc_step reducing again, the
 * update would come from the mean of H and -H, zero. The reference run (a world of one: rank 0)
 * adds nothing, then H, and steps without the early reduce; rank 0's weights must be its (the
 * parameter's 10 elements are rank 0's slice of stage 0's Adam). */
static void early_fn(int rank, void *arg)
{
    early_ctx *c = arg;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": "
                      "2, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}, "
                      "\"zero_optimization\": {\"stage\": 0}}";
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int g, p;
    int64_t shape[1] = {10};
    ZT_OK(zinc_group_add(e, "a", &g));
    ZT_OK(zinc_param_add(e, g, "a.w", 1, shape, ZINC_DTYPE_FP32, &p));
    ZT_OK(zinc_finalize(e));
    float init[10], vals[10];
    for (int64_t i = 0; i < 10; i++) init[i] = (float)i / 16.0f - 0.25f;
    ZT_OK(zinc_param_set(e, p, init));
    run_ctx fp32 = {.world_size = c->world_size};
    for (int k = 0; k < 2; k++) {
        ZT_OK(zinc_gather(e, g));
        if (!c->reference) add_grad(e, p, &fp32, 10, k, (float)(rank + 1), 0);
        ZT_OK(zinc_release(e, g));
        ZT_OK(zinc_grads_ready(e, g));
        if (k == 0 && !c->reference) {
            zinc_status s = zinc_grads_reduce(e);
            ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "does not end"),
                     "zinc_grads_reduce inside the window: %s %s", zinc_status_string(s),
                     zinc_last_error(e));
        }
        if (k == 1) {
            if (!c->reference) {
                ZT_OK(zinc_grads_reduce(e));
                ZT_OK(zinc_grads_reduce(e));        /* once a window: the second does nothing */
                ZT_OK(zinc_param_grad_get(e, p, c->got[rank]));
            }
            for (int64_t i = 0; i < 10; i++) vals[i] = r_val(rank, i);
            ZT_OK(zinc_param_grad_set(e, p, vals));
        }
        zinc_step_info_t info = {0};
        ZT_OK(zinc_step(e, &info));
    }
    ZT_OK(zinc_param_get(e, p, c->weights[rank]));
    zinc_engine_destroy(e);
}

static void test_early_reduce(void)
{
    early_ctx t = {.world_size = 2}, ref = {.world_size = 1, .reference = 1};
    zt_run_world(2, &t.world, early_fn, &t);
    zt_run_world(1, &ref.world, early_fn, &ref);
    float mean = 1.5f;
    for (int r = 0; r < 2; r++) {
        int avg = 1;
        for (int64_t i = 0; i < 10; i++)
            avg &= t.got[r][i] == (g_val(0, i) + g_val(1, i)) * mean;
        ZT_CHECK(avg, "zinc_grads_reduce: rank %d reads the average back", r);
    }
    ZT_CHECK(!memcmp(t.weights[0], ref.weights[0], sizeof t.weights[0]),
             "zinc_grads_reduce then zinc_step: rank 0 applied its own gradient (w[1] %.9g, its "
             "own alone %.9g): zinc_step reduced again", t.weights[0][1], ref.weights[0][1]);
    /* Misuse: stage 2; zinc_grads_more after the window's reduce. */
    int g, p;
    zinc_engine_t *e = one_param_engine("{\"train_micro_batch_size_per_gpu\": 1, "
                                        "\"zero_optimization\": {\"stage\": 2}}",
                                        ZINC_DTYPE_FP32, &g, &p);
    if (e) {
        ZT_OK(zinc_finalize(e));
        zinc_status s = zinc_grads_reduce(e);
        ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "stage 0 only"),
                 "zinc_grads_reduce at stage 2: %s", zinc_last_error(e));
        zinc_engine_destroy(e);
    }
    e = one_param_engine("{\"train_micro_batch_size_per_gpu\": 1}", ZINC_DTYPE_FP32, &g, &p);
    if (e) {
        ZT_OK(zinc_finalize(e));
        ZT_OK(zinc_grads_ready(e, g));
        ZT_OK(zinc_grads_reduce(e));
        zinc_status s = zinc_grads_more(e, g);
        ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "reduced already"),
                 "zinc_grads_more after zinc_grads_reduce: %s", zinc_last_error(e));
        zinc_engine_destroy(e);
    }
}

int main(void)
{
    test_early_reduce();
    test_late_add(1);
    test_late_add(2);
    for (int stage = 0; stage <= 3; stage++)
        for (int bf16 = 0; bf16 <= 1; bf16++)
            for (int n = 1; n <= 4; n *= 2) test_get_set(stage, bf16, n, 0, 0, 0);
    for (int stage = 1; stage <= 3; stage++)
        for (int bf16 = 0; bf16 <= 1; bf16++) test_get_set(stage, bf16, 2, 1, 0, 0);
    /* The gradient set fragment by fragment (stages 2-3), with and without offload. */
    for (int stage = 2; stage <= 3; stage++)
        for (int n = 1; n <= 4; n *= 2) {
            test_get_set(stage, 1, n, 0, 1, 0);
            test_get_set(stage, 0, n, 1, 1, 0);
        }
    /* a's gradient handed over in two parts (zinc_grads_more), with and without offload. */
    for (int stage = 0; stage <= 3; stage++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            test_get_set(stage, bf16, 2, 0, 0, 1);
            if (stage > 0) test_get_set(stage, bf16, 2, 1, 0, 1);
        }
    test_misuse();
    return zt_finish("engine_grad_access");
}
