/*
 * test_accum_boundary.c — a caller-owned accumulation boundary: zinc_set_accumulation_boundary
 * (DeepSpeed's engine.set_gradient_accumulation_boundary), zinc_micro_step, and the config's
 * managed_gradient_accumulation false (DeepSpeed 0.19.8: every step() is the boundary).
 *
 * The three ways of letting the caller end the window must train bitwise as zinc's own count
 * when they end it where the count would: the same gradients are accumulated and reduced in the
 * same order. At stages 0-3, world 2, fp32 and bf16, with the optimizer offloaded (stage 2) and
 * the parameters too (stage 3), whose gradient download starts in the micro-step that the
 * boundary marks as the last. Windows of other lengths than gradient_accumulation_steps must give
 * one optimizer step per window, the same in all three ways, and not the count's result. Calls
 * out of turn are refused with a message naming what to call instead. zinc_set_batch_size
 * (DeepSpeed's set_train_batch_size): between windows it changes the window and the loss
 * multiplier (bit for bit the engine configured so), inside one it is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

static const char *const MODE[] = {"count", "set+step each", "set+step last", "unmanaged"};

static toy_run base(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist)
{
    toy_run r = {.world = 2, .stage = stage, .accum = 3, .steps = 3, .dtype = dtype, .clip = 1.0,
                 .zero_json = zero_json, .persist_threshold = persist, .inject_inf_step = -1};
    return r;
}

/* Every caller-owned way, ending each window after `accum` micro-steps, trains as the count. */
static void same_as_count(int stage, zinc_dtype dtype, const char *zero_json, int64_t persist,
                          const char *label)
{
    toy_run ref = base(stage, dtype, zero_json, persist);
    if (!toy_run_ok(&ref, label)) return;
    ZT_CHECK(ref.boundaries == ref.steps, "%s: count: %d boundaries in %d steps", label,
             ref.boundaries, ref.steps);
    for (int m = TOY_SET_STEP_EACH; m <= TOY_UNMANAGED; m++) {
        toy_run r = base(stage, dtype, zero_json, persist);
        r.boundary = m;
        char what[160];
        snprintf(what, sizeof what, "%s, %s", label, MODE[m]);
        if (!toy_run_ok(&r, what)) continue;
        toy_expect_same_training(&ref, &r, what);
        ZT_CHECK(r.boundaries == r.steps, "%s: %d boundaries in %d steps", what, r.boundaries,
                 r.steps);
        toy_free(&r);
    }
    toy_free(&ref);
}

static void test_same_as_count(void)
{
    static const zinc_dtype dt[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_BF16};
    for (int stage = 0; stage <= 3; stage++)
        for (int d = 0; d < 2; d++) {
            char label[64];
            snprintf(label, sizeof label, "stage %d %s", stage, d ? "bf16" : "fp32");
            same_as_count(stage, dt[d], NULL, 0, label);
        }
    same_as_count(2, ZINC_DTYPE_BF16, "\"offload_optimizer\": {\"device\": \"cpu\"}, ", 0,
                  "stage 2 bf16 offload_optimizer");
    same_as_count(3, ZINC_DTYPE_BF16,
                  "\"offload_optimizer\": {\"device\": \"cpu\"}, "
                  "\"offload_param\": {\"device\": \"cpu\"}, ", -1,
                  "stage 3 bf16 offload_param, none persistent");
}

/* Windows of 1, 3 and 2 micro-steps under gradient_accumulation_steps 2: one optimizer step
 * each, the three ways alike, and a different result from the count's windows of 2. */
static void test_own_windows(void)
{
    static const int windows[] = {1, 3, 2};
    static const struct { int stage; const char *zero; int64_t persist; } runs[] = {
        {0, NULL, 0},
        {3, NULL, 0},
        {2, "\"offload_optimizer\": {\"device\": \"cpu\"}, ", 0},
        {3, "\"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}, ",
         -1},
    };
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        toy_run count = base(runs[i].stage, ZINC_DTYPE_FP32, runs[i].zero, runs[i].persist);
        count.accum = 2;
        if (!toy_run_ok(&count, "windows: count")) return;
        toy_run ref = {0};
        for (int m = TOY_SET_STEP_EACH; m <= TOY_UNMANAGED; m++) {
            toy_run r = base(runs[i].stage, ZINC_DTYPE_FP32, runs[i].zero, runs[i].persist);
            r.accum = 2;
            r.boundary = m;
            r.windows = windows;
            char what[128];
            snprintf(what, sizeof what, "stage %d%s, windows 1/3/2, %s", runs[i].stage,
                     runs[i].zero ? " offloaded" : "", MODE[m]);
            if (!toy_run_ok(&r, what)) continue;
            ZT_CHECK(r.boundaries == 3 && r.applied == 3, "%s: %d boundaries, %d applied (3 "
                     "windows)", what, r.boundaries, r.applied);
            ZT_CHECK(r.last_info.step == 3, "%s: step %lld after 3 windows", what,
                     (long long)r.last_info.step);
            ZT_CHECK(!toy_weights_equal(&count, &r), "%s: trained as windows of 2 (the "
                     "boundary did not move)", what);
            if (m == TOY_SET_STEP_EACH) {
                ref = r;
                continue;
            }
            toy_expect_same_training(&ref, &r, what);
            toy_free(&r);
        }
        toy_free(&ref);
        toy_free(&count);
    }
}

/* One rank: what zinc_engine_at_boundary says, and the refusals. */
static void expect_error(zinc_engine_t *e, zinc_status got, zinc_status want, const char *text,
                         const char *what)
{
    ZT_CHECK(got == want, "%s: status %d, expected %d", what, (int)got, (int)want);
    const char *msg = zinc_last_error(e);
    ZT_CHECK(strstr(msg, text) != NULL, "%s: the message does not say \"%s\": %s", what, text, msg);
}

/* A one-rank stage-2 fp32 toy engine (accumulation 3), or NULL after a failed check. */
static zinc_engine_t *one_rank_engine(toy_run *r, int *np)
{
    *r = base(2, ZINC_DTYPE_FP32, NULL, 0);
    r->world = 1;
    zinc_engine_t *e = NULL;
    zinc_status s = toy_engine(r, &e, np);
    ZT_CHECK(s == ZINC_OK, "toy_engine: %s", e ? zinc_last_error(e) : "");
    if (s != ZINC_OK) {
        zinc_engine_destroy(e);
        return NULL;
    }
    return e;
}

static void test_calls(void)
{
    toy_run r;
    int np = 0;
    zinc_engine_t *e = one_rank_engine(&r, &np);
    if (!e) return;
    zinc_status s = ZINC_OK;
    /* The count: 0, 0, 1 over a window of 3; zinc_micro_step ends the inner ones like zinc_step. */
    int at[3];
    zinc_step_info_t info;
    for (int k = 0; k < 3 && s == ZINC_OK; k++) {
        at[k] = zinc_engine_at_boundary(e);
        s = toy_micro_step(e, 0, 1, k, np, 0);
        if (s == ZINC_OK) s = k < 2 ? zinc_micro_step(e) : zinc_step(e, &info);
    }
    ZT_CHECK(s == ZINC_OK, "count window: %s", zinc_last_error(e));
    ZT_CHECK(at[0] == 0 && at[1] == 0 && at[2] == 1, "at_boundary over the window: %d %d %d",
             at[0], at[1], at[2]);
    ZT_CHECK(s != ZINC_OK || (info.boundary && info.applied && info.step == 1),
             "the window's zinc_step: boundary %d applied %d step %lld", info.boundary,
             info.applied, (long long)info.step);

    /* The setting, and -1 giving the count back. */
    zinc_set_accumulation_boundary(e, 1);
    ZT_CHECK(zinc_engine_at_boundary(e) == 1, "set(1): at_boundary 0");
    zinc_set_accumulation_boundary(e, 0);
    ZT_CHECK(zinc_engine_at_boundary(e) == 0, "set(0): at_boundary 1");
    zinc_set_accumulation_boundary(e, -1);
    ZT_CHECK(zinc_engine_at_boundary(e) == 0, "set(-1) at the window's start: at_boundary 1");
    expect_error(e, zinc_set_accumulation_boundary(e, 2), ZINC_ERR_INVALID_ARG, "is not 1",
                 "set(2)");
    ZT_CHECK(zinc_set_accumulation_boundary(NULL, 1) == ZINC_ERR_INVALID_ARG, "set on NULL");
    ZT_CHECK(zinc_micro_step(NULL) == ZINC_ERR_INVALID_ARG, "zinc_micro_step(NULL)");

    /* Ending the window's last micro-step with zinc_micro_step is refused: the set one ... */
    zinc_set_accumulation_boundary(e, 1);
    s = toy_micro_step(e, 0, 1, 3, np, 0);
    ZT_CHECK(s == ZINC_OK, "micro-step: %s", zinc_last_error(e));
    expect_error(e, zinc_micro_step(e), ZINC_ERR_USAGE, "zinc_set_accumulation_boundary(1)",
                 "zinc_micro_step at a set boundary");
    ZT_CHECK(zinc_step(e, &info) == ZINC_OK && info.boundary, "zinc_step after the refusal: %s",
             zinc_last_error(e));
    /* ... and the counted one. */
    zinc_set_accumulation_boundary(e, -1);
    for (int k = 0; k < 2 && s == ZINC_OK; k++) {
        s = toy_micro_step(e, 0, 1, 4 + k, np, 0);
        if (s == ZINC_OK) s = zinc_micro_step(e);
    }
    ZT_CHECK(s == ZINC_OK, "two inner micro-steps: %s", zinc_last_error(e));
    s = toy_micro_step(e, 0, 1, 6, np, 0);
    expect_error(e, zinc_micro_step(e), ZINC_ERR_USAGE, "gradient_accumulation_steps reached",
                 "zinc_micro_step at the counted boundary");
    ZT_CHECK(zinc_step(e, &info) == ZINC_OK && info.boundary && info.step == 3,
             "the counted boundary's zinc_step: boundary %d step %lld: %s", info.boundary,
             (long long)info.step, zinc_last_error(e));
    /* A micro-step whose groups were not all handed over. */
    expect_error(e, zinc_micro_step(e), ZINC_ERR_USAGE, "was not handed over",
                 "zinc_micro_step without zinc_grads_ready");
    zinc_engine_destroy(e);

    /* managed_gradient_accumulation false: never at the boundary before zinc_step, which always
     * is; the setting is refused, as DeepSpeed asserts. */
    r.boundary = TOY_UNMANAGED;
    s = toy_engine(&r, &e, &np);
    ZT_CHECK(s == ZINC_OK, "toy_engine (unmanaged): %s", e ? zinc_last_error(e) : "");
    if (s != ZINC_OK) {
        zinc_engine_destroy(e);
        return;
    }
    expect_error(e, zinc_set_accumulation_boundary(e, 1), ZINC_ERR_USAGE,
                 "managed_gradient_accumulation false", "set under unmanaged");
    for (int k = 0; k < 5 && s == ZINC_OK; k++) {
        ZT_CHECK(zinc_engine_at_boundary(e) == 0, "unmanaged: at_boundary 1 at micro-step %d", k);
        s = toy_micro_step(e, 0, 1, k, np, 0);
        if (s == ZINC_OK) s = k < 4 ? zinc_micro_step(e) : zinc_step(e, &info);
    }
    ZT_CHECK(s == ZINC_OK && info.boundary && info.step == 1,
             "unmanaged window of 5 (accumulation 3): status %d boundary %d step %lld: %s",
             (int)s, info.boundary, (long long)info.step, zinc_last_error(e));
    zinc_engine_destroy(e);
}

/* Each parameter's fp32 values (caller frees out[]); 0 on a failure. */
static int read_weights(zinc_engine_t *e, int np, float *out[TOY_MAX_PARAMS],
                        int64_t numel[TOY_MAX_PARAMS])
{
    for (int p = 0; p < np; p++) {
        numel[p] = zinc_param_numel(e, p);
        out[p] = malloc((size_t)numel[p] * sizeof(float));
        if (!out[p] || zinc_param_get(e, p, out[p]) != ZINC_OK) return 0;
    }
    return 1;
}

/* Offload starts a group's gradient download in the micro-step the boundary marks as the last.
 * When the caller then moves the boundary on (set(1), backward, set(0), zinc_micro_step), that
 * download holds a partial gradient and must not be taken for the window's: the run must end
 * bitwise as the same calls without offload. */
static zinc_status moved_boundary(zinc_engine_t *e, int np, float *out[TOY_MAX_PARAMS],
                                  int64_t numel[TOY_MAX_PARAMS])
{
    zinc_status s = zinc_set_accumulation_boundary(e, 1);
    if (s == ZINC_OK) s = toy_micro_step(e, 0, 1, 0, np, 0);
    if (s == ZINC_OK) s = zinc_set_accumulation_boundary(e, 0);
    if (s == ZINC_OK) s = zinc_micro_step(e);
    if (s == ZINC_OK) s = toy_micro_step(e, 0, 1, 1, np, 0);
    if (s == ZINC_OK) s = zinc_set_accumulation_boundary(e, 1);
    zinc_step_info_t info = {0};
    if (s == ZINC_OK) s = zinc_step(e, &info);
    if (s == ZINC_OK && !info.applied) s = ZINC_ERR_INTERNAL;
    if (s == ZINC_OK && !read_weights(e, np, out, numel)) s = ZINC_ERR_INTERNAL;
    return s;
}

static void test_moved_boundary_offload(void)
{
    float *plain[TOY_MAX_PARAMS] = {0}, *off[TOY_MAX_PARAMS] = {0};
    int64_t numel[TOY_MAX_PARAMS] = {0};
    int np = 0;
    for (int k = 0; k < 2; k++) {
        toy_run r = base(2, ZINC_DTYPE_FP32, k ? "\"offload_optimizer\": {\"device\": \"cpu\"}, " : NULL,
                         0);
        r.world = 1;
        zinc_engine_t *e = NULL;
        zinc_status s = toy_engine(&r, &e, &np);
        if (s == ZINC_OK) s = moved_boundary(e, np, k ? off : plain, numel);
        ZT_CHECK(s == ZINC_OK, "moved boundary (%s): status %d: %s", k ? "offload" : "plain",
                 (int)s, e ? zinc_last_error(e) : "");
        zinc_engine_destroy(e);
    }
    int same = 1;
    for (int p = 0; p < np; p++)
        if (!plain[p] || !off[p] ||
            memcmp(plain[p], off[p], (size_t)numel[p] * sizeof(float)))
            same = 0;
    ZT_CHECK(same, "offload after a moved boundary differs from the same calls without offload "
             "(a stale gradient download taken for the window's)");
    for (int p = 0; p < np; p++) {
        free(plain[p]);
        free(off[p]);
    }
}

/* zinc_set_batch_size (DeepSpeed's set_train_batch_size / set_train_micro_batch_size). */

static void test_batch_size_training(void)
{
    /* Configured with 3 accumulation steps and set to 2 before the first micro-step: bit for bit
     * the engine configured with 2 (the loss multiplier and the window follow the new value);
     * without the set, not. At stage 2, world 2 and the optimizer offloaded too. */
    static const char *const zero[] = {NULL, "\"offload_optimizer\": {\"device\": \"cpu\"}, "};
    for (int z = 0; z < 2; z++) {
        float *w[3][TOY_MAX_PARAMS] = {{0}};
        int64_t numel[TOY_MAX_PARAMS] = {0};
        int np = 0, ok = 1;
        static const int accum[3] = {2, 3, 3};
        for (int k = 0; k < 3; k++) {
            toy_run r = base(2, ZINC_DTYPE_FP32, zero[z], 0);
            r.world = 1;
            r.accum = accum[k];
            zinc_engine_t *e = NULL;
            zinc_status s = toy_engine(&r, &e, &np);
            if (s == ZINC_OK && k == 1) s = zinc_set_batch_size(e, 1, 2);
            if (s == ZINC_OK) s = toy_steps(e, 0, 1, 0, 6, np);
            if (s == ZINC_OK && !read_weights(e, np, w[k], numel)) s = ZINC_ERR_INTERNAL;
            ZT_CHECK(s == ZINC_OK, "batch size run %d%s: %s", k, z ? " offloaded" : "",
                     e ? zinc_last_error(e) : "");
            ok &= s == ZINC_OK;
            zinc_engine_destroy(e);
        }
        int same = ok, differs = 0;
        for (int p = 0; ok && p < np; p++) {
            size_t n = (size_t)numel[p] * sizeof(float);
            same &= !memcmp(w[0][p], w[1][p], n);
            differs |= memcmp(w[0][p], w[2][p], n) != 0;
        }
        ZT_CHECK(same, "accumulation 3 set to 2 before training%s: not bit for bit the engine "
                 "configured with 2", z ? " (offloaded)" : "");
        ZT_CHECK(!ok || differs, "the engine left at 3 trains as the one at 2: the comparison "
                 "sees nothing");
        for (int k = 0; k < 3; k++)
            for (int p = 0; p < np; p++) free(w[k][p]);
    }
}

static int config_says(zinc_engine_t *e, const char *key, long long want)
{
    char text[96];
    snprintf(text, sizeof text, "\"%s\": %lld,", key, want);
    return strstr(zinc_engine_config_json(e), text) != NULL;
}

static void test_batch_size_calls(void)
{
    toy_run r;
    int np = 0;
    zinc_engine_t *e = one_rank_engine(&r, &np);
    if (!e) return;
    char hash0[32];
    snprintf(hash0, sizeof hash0, "%s", zinc_config_hash(e));
    ZT_CHECK(config_says(e, "gradient_accumulation_steps", 3), "the toy's config: %s",
             zinc_engine_config_json(e));
    zinc_status s = zinc_set_batch_size(e, 2, 2);
    ZT_CHECK(s == ZINC_OK, "set 2 x 2: %s", zinc_last_error(e));
    ZT_CHECK(config_says(e, "train_batch_size", 4) &&
             config_says(e, "train_micro_batch_size_per_gpu", 2) &&
             config_says(e, "gradient_accumulation_steps", 2),
             "the resolved config after set 2 x 2: %s", zinc_engine_config_json(e));
    ZT_CHECK(strcmp(hash0, zinc_config_hash(e)) != 0, "the config hash did not change");
    ZT_CHECK(zinc_loss_multiplier(e) == 0.5f, "loss multiplier %g after set (accumulation 2)",
             (double)zinc_loss_multiplier(e));
    s = zinc_set_batch_size(e, 1, 2);
    /* Inside a window: a micro-step's gradients handed over, then a micro-step ended. */
    if (s == ZINC_OK) s = toy_micro_step(e, 0, 1, 0, np, 0);
    ZT_CHECK(s == ZINC_OK, "micro-step: %s", zinc_last_error(e));
    expect_error(e, zinc_set_batch_size(e, 1, 4), ZINC_ERR_USAGE, "handed over",
                 "set after a backward");
    ZT_CHECK(zinc_micro_step(e) == ZINC_OK, "zinc_micro_step: %s", zinc_last_error(e));
    expect_error(e, zinc_set_batch_size(e, 1, 4), ZINC_ERR_USAGE, "inside an accumulation window",
                 "set after a micro-step");
    ZT_CHECK(zinc_engine_at_boundary(e) == 1, "the second micro-step of a window of 2 is not "
             "its last (the refused set changed the count?)");
    zinc_step_info_t info = {0};
    s = toy_micro_step(e, 0, 1, 1, np, 0);
    if (s == ZINC_OK) s = zinc_step(e, &info);
    ZT_CHECK(s == ZINC_OK && info.boundary && info.step == 1, "window of 2: status %d boundary "
             "%d step %lld: %s", (int)s, info.boundary, (long long)info.step, zinc_last_error(e));
    ZT_CHECK(zinc_set_batch_size(e, 1, 1) == ZINC_OK, "set after the window's step: %s",
             zinc_last_error(e));
    ZT_CHECK(zinc_engine_at_boundary(e) == 1, "accumulation 1: the next micro-step is not the last");
    expect_error(e, zinc_set_batch_size(e, 0, 2), ZINC_ERR_INVALID_ARG, "at least 1", "micro 0");
    expect_error(e, zinc_set_batch_size(e, 1, -3), ZINC_ERR_INVALID_ARG, "at least 1",
                 "accumulation -3");
    expect_error(e, zinc_set_batch_size(e, (int64_t)1 << 40, (int64_t)1 << 30),
                 ZINC_ERR_INVALID_ARG, "fit in 64 bits", "2^70 samples");
    /* the range's end, which the config parser refuses: its resolved config (and a checkpoint's
     * copy) would not parse again */
    expect_error(e, zinc_set_batch_size(e, INT64_MAX, 1), ZINC_ERR_INVALID_ARG, "range's end",
                 "micro INT64_MAX");
    ZT_CHECK(config_says(e, "gradient_accumulation_steps", 1), "a refused set changed the "
             "config: %s", zinc_engine_config_json(e));
    ZT_CHECK(zinc_set_batch_size(NULL, 1, 1) == ZINC_ERR_INVALID_ARG, "set on NULL");
    zinc_engine_destroy(e);
}

int main(void)
{
    test_batch_size_calls();
    test_batch_size_training();
    test_calls();
    test_moved_boundary_offload();
    test_same_as_count();
    test_own_windows();
    return zt_finish("test_accum_boundary");
}
