/*
 * test_grad_buffer.c — a gradient buffer lent by the caller per accumulation window
 * (zinc_grad_buffer_external, zinc_grad_buffer_attach), as the Python front-end lends torch's
 * memory so that zinc's gradients do not sit on top of the forward's activations.
 *
 * Training: the toy trains bit for bit as with zinc's own buffer — stages 0-3, fp16 (an
 * injected overflow: a skipped step gives the buffer back too) and bf16, 1 and 2 ranks, 2
 * micro-steps per window, the caller owning the boundary, and optimizer offload (stage 1: the
 * lent buffer is downloaded; stage 2: none is planned, none lent). The toy lends a new buffer
 * full of garbage every window (so zinc must zero it) and checks that zinc never writes the one
 * lent the window before once that window's step returned (toy.h, grad_external), and that zinc
 * allocated no gradient buffer of its own.
 *
 * Misuse, one rank: attaching to an engine that keeps its own buffer, making it external after
 * zinc_finalize, a wrong size, a misaligned or NULL address, attaching twice in a window; the
 * calls that need the buffer (zinc_grads_ready, zinc_param_grad below stage 2, the gradient
 * setters) refuse while none is attached, and the getters read zeros.
 *
 * zinc_grads_clear inside a window (check_clear); zinc_grad_bucket_drop (check_bucket_drop).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"
#include "zinc.h"

static void check_training(int world, int stage, zinc_dtype dt, int boundary, const char *zero_json)
{
    static const int windows[] = {2, 1, 3, 2, 2, 1, 2, 2};
    toy_run ref = {.world = world, .stage = stage, .accum = 2, .steps = 8, .dtype = dt,
                   .clip = 1.0, .inject_inf_step = dt == ZINC_DTYPE_FP16 ? 3 : -1,
                   .inject_rank = world - 1, .zero_json = zero_json, .boundary = boundary,
                   .windows = boundary == TOY_COUNT ? NULL : windows};
    toy_run lent = ref;
    lent.grad_external = 1;
    char label[160];
    snprintf(label, sizeof label, "world %d stage %d %s%s%s%s", world, stage, zinc_dtype_name(dt),
             boundary == TOY_COUNT ? "" : " caller's boundary", zero_json ? " " : "",
             zero_json ? zero_json : "");
    if (toy_run_ok(&ref, label) && toy_run_ok(&lent, label)) {
        toy_expect_same_training(&ref, &lent, label);
        if (dt == ZINC_DTYPE_FP16)
            ZT_CHECK(lent.skipped == 1, "%s: %d steps skipped, want the injected overflow's 1",
                     label, lent.skipped);
    }
    toy_free(&ref);
    toy_free(&lent);
}

static zinc_engine_t *engine_at(int stage, int external, int *np, uint64_t *grad_bytes)
{
    toy_run r = {.world = 1, .stage = stage, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1, .grad_external = external};
    zinc_engine_t *e = toy_engine_checked(&r, np, "misuse");
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
    if (e && zinc_memory(e, planned, alloc) == ZINC_OK) {
        *grad_bytes = planned[ZINC_MEM_GRAD];
        ZT_CHECK(planned[ZINC_MEM_GRAD] > 0, "stage %d plans no gradient buffer", stage);
        ZT_CHECK(alloc[ZINC_MEM_GRAD] == (external ? 0 : planned[ZINC_MEM_GRAD]),
                 "stage %d external %d: zinc allocated %llu gradient bytes of %llu planned", stage,
                 external, (unsigned long long)alloc[ZINC_MEM_GRAD],
                 (unsigned long long)planned[ZINC_MEM_GRAD]);
    }
    return e;
}

/* A refusal with status `want` whose message says `needle`. */
static void expect_refusal(zinc_engine_t *e, zinc_status s, zinc_status want, const char *needle,
                           const char *what)
{
    ZT_CHECK(s == want, "%s: %s, want %s", what, zinc_status_string(s), zinc_status_string(want));
    ZT_CHECK(s == ZINC_OK || strstr(zinc_last_error(e), needle), "%s: the error '%s' does not "
             "say '%s'", what, zinc_last_error(e), needle);
}

static void check_misuse(int stage)
{
    int np = 0;
    uint64_t bytes = 0;
    char what[96];
    zinc_engine_t *own = engine_at(stage, 0, &np, &bytes);
    unsigned char *buf = aligned_alloc(64, (bytes + 64) / 64 * 64 + 64);
    if (!own || !buf) {
        zinc_engine_destroy(own);
        free(buf);
        return;
    }
    snprintf(what, sizeof what, "stage %d, zinc's own buffer: attach", stage);
    expect_refusal(own, zinc_grad_buffer_attach(own, buf, bytes), ZINC_ERR_USAGE,
                   "zinc_grad_buffer_external", what);
    snprintf(what, sizeof what, "stage %d: external after finalize", stage);
    expect_refusal(own, zinc_grad_buffer_external(own), ZINC_ERR_USAGE, "after zinc_finalize", what);
    zinc_engine_destroy(own);

    zinc_engine_t *e = engine_at(stage, 1, &np, &bytes);
    if (!e) {
        free(buf);
        return;
    }
    /* none attached: the calls that need it refuse, the getters read zeros */
    float *vals = malloc((size_t)zinc_param_numel(e, 0) * sizeof *vals);
    void *view = NULL;
    int g0 = zinc_param_group(e, 0);
    snprintf(what, sizeof what, "stage %d, none attached: zinc_grads_ready", stage);
    const char *first = "zinc_grad_buffer_attach first";
    expect_refusal(e, zinc_grads_ready(e, g0), ZINC_ERR_USAGE, first, what);
    if (stage < 2) {
        snprintf(what, sizeof what, "stage %d, none attached: zinc_param_grad", stage);
        expect_refusal(e, zinc_param_grad(e, 0, &view), ZINC_ERR_USAGE, first, what);
    }
    for (int64_t i = 0; i < zinc_param_numel(e, 0); i++) vals[i] = 1.0f;
    snprintf(what, sizeof what, "stage %d, none attached: zinc_param_grad_set", stage);
    expect_refusal(e, zinc_param_grad_set(e, 0, vals), ZINC_ERR_USAGE, first, what);
    for (int64_t i = 0; i < zinc_param_numel(e, 0); i++) vals[i] = 7.0f;
    ZT_OK(zinc_param_grad_get(e, 0, vals));
    int zeros = 1;
    for (int64_t i = 0; i < zinc_param_numel(e, 0); i++) zeros &= vals[i] == 0.0f;
    ZT_CHECK(zeros, "stage %d, none attached: zinc_param_grad_get does not read zeros", stage);
    if (stage >= 2) {
        vals[0] = 7.0f;
        ZT_OK(zinc_param_local_get(e, 0, ZINC_STATE_GRAD, vals));
        ZT_CHECK(vals[0] == 0.0f, "stage %d, none attached: zinc_param_local_get reads %g", stage,
                 vals[0]);
        snprintf(what, sizeof what, "stage %d, none attached: zinc_param_local_set", stage);
        expect_refusal(e, zinc_param_local_set(e, 0, ZINC_STATE_GRAD, vals), ZINC_ERR_USAGE,
                       first, what);
    }
    /* bad buffers: the message names the size and alignment wanted */
    char need[64];
    snprintf(need, sizeof need, "need %llu bytes at a 64-byte aligned", (unsigned long long)bytes);
    snprintf(what, sizeof what, "stage %d: attach %llu bytes short by 2", stage,
             (unsigned long long)bytes);
    expect_refusal(e, zinc_grad_buffer_attach(e, buf, bytes - 2), ZINC_ERR_INVALID_ARG, need, what);
    snprintf(what, sizeof what, "stage %d: attach at a misaligned address", stage);
    expect_refusal(e, zinc_grad_buffer_attach(e, buf + 32, bytes), ZINC_ERR_INVALID_ARG, need, what);
    snprintf(what, sizeof what, "stage %d: attach NULL", stage);
    expect_refusal(e, zinc_grad_buffer_attach(e, NULL, bytes), ZINC_ERR_INVALID_ARG, need, what);
    /* attached: zeroed, usable, and a second attach in the window refused */
    memset(buf, 0xAB, bytes);
    ZT_OK(zinc_grad_buffer_attach(e, buf, bytes));
    int zeroed = 1;
    for (uint64_t i = 0; i < bytes; i++) zeroed &= buf[i] == 0;
    ZT_CHECK(zeroed, "stage %d: the attached buffer was not zeroed", stage);
    snprintf(what, sizeof what, "stage %d: attach twice", stage);
    expect_refusal(e, zinc_grad_buffer_attach(e, buf, bytes), ZINC_ERR_USAGE, "attached already",
                   what);
    if (stage < 2) {
        ZT_OK(zinc_param_grad(e, 0, &view));
        ZT_CHECK((unsigned char *)view >= buf && (unsigned char *)view < buf + bytes,
                 "stage %d: zinc_param_grad's view %p is not inside the lent buffer %p", stage,
                 view, (void *)buf);
    }
    free(vals);
    zinc_engine_destroy(e);    /* must not free the caller's buffer (ASan would say) */
    memset(buf, 0, bytes);
    free(buf);
}

/* Every parameter's gradient, as zinc_param_grad_get reads it, equal to v. */
static int grads_are(zinc_engine_t *e, int np, float v, float *vals)
{
    int same = 1;
    for (int p = 0; p < np && same; p++) {
        if (zinc_param_grad_get(e, p, vals) != ZINC_OK) return 0;
        for (int64_t i = 0; i < zinc_param_numel(e, p); i++) same &= vals[i] == v;
    }
    return same;
}

/* Stages 2-3, bf16: every parameter of groups 0 and 1 (the toy's config has two buckets)
 * takes its group's bucket, checks it reads zero and writes `bits` into it. */
static int fill_buckets(zinc_engine_t *e, int np, uint16_t bits)
{
    int ok = 1;
    for (int p = 0; p < np && ok; p++) {
        if (zinc_param_group(e, p) >= 2) continue;
        uint16_t *view = NULL;
        ok &= zinc_param_grad(e, p, (void **)&view) == ZINC_OK;
        for (int64_t i = 0; ok && i < zinc_param_numel(e, p); i++) {
            ok &= view[i] == 0;
            view[i] = bits;
        }
    }
    return ok;
}

/* zinc_grads_clear inside a window (a DeepSpeed zero_grad there): the sums so far read zero and
 * what is set after it is the window's sum; at stages 2-3 the gradients waiting in groups'
 * buckets go too. With zinc's own buffer and a lent one, and with the sums
 * in host memory (offload_optimizer, stage 2). */
static void check_clear(int stage, int external, const char *zero_json)
{
    toy_run r = {.world = 1, .stage = stage, .accum = 2, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1, .grad_external = external,
                 .zero_json = zero_json};
    char what[128];
    snprintf(what, sizeof what, "zinc_grads_clear stage %d%s%s", stage,
             external ? " lent buffer" : "", zero_json ? " offload" : "");
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, what);
    if (!e) return;
    uint64_t planned[ZINC_MEM_COUNT];
    unsigned char *buf = NULL;
    if (external && zinc_memory(e, planned, NULL) == ZINC_OK) {
        buf = aligned_alloc(64, (planned[ZINC_MEM_GRAD] + 63) / 64 * 64);
        ZT_OK(zinc_grad_buffer_attach(e, buf, planned[ZINC_MEM_GRAD]));
    }
    int64_t most = 1;
    for (int p = 0; p < np; p++)
        if (zinc_param_numel(e, p) > most) most = zinc_param_numel(e, p);
    float *vals = malloc((size_t)most * sizeof *vals);
    for (int g = 0; g < zinc_engine_group_count(e); g++) ZT_OK(zinc_grads_ready(e, g));
    for (int p = 0; p < np; p++) {
        for (int64_t i = 0; i < zinc_param_numel(e, p); i++) vals[i] = 0.5f;
        ZT_OK(zinc_param_grad_set(e, p, vals));
    }
    ZT_CHECK(grads_are(e, np, 0.5f, vals), "%s: the gradients set before it do not read 0.5",
             what);
    ZT_OK(zinc_grads_clear(e));
    ZT_CHECK(grads_are(e, np, 0.0f, vals), "%s: the sums so far do not read zero after it", what);
    for (int p = 0; p < np; p++) {
        for (int64_t i = 0; i < zinc_param_numel(e, p); i++) vals[i] = 0.25f;
        ZT_OK(zinc_param_grad_set(e, p, vals));
    }
    ZT_CHECK(grads_are(e, np, 0.25f, vals), "%s: a gradient set after it does not read 0.25 "
             "alone", what);
    if (stage >= 2) {
        /* gradients added into buckets and not handed over (a backward that failed before its
         * groups' zinc_grads_ready) go too: the sums read zero after it, no bucket is left
         * taken (zinc_param_grad_get refuses while one is), and a bucket taken again reads zero
         * (not the 2.0s). The old zinc_grads_clear refused here. (bf16: 0x4000 is 2.0.) */
        int ok = fill_buckets(e, np, 0x4000) && zinc_grads_clear(e) == ZINC_OK;
        ZT_CHECK(ok, "%s: gradients in buckets not handed over: zinc_grads_clear fails (%s)",
                 what, zinc_last_error(e));
        ZT_CHECK(grads_are(e, np, 0.0f, vals), "%s: the sums so far do not read zero after the "
                 "clearing with buckets taken, or a bucket is still taken (%s)", what,
                 zinc_last_error(e));
        ZT_CHECK(fill_buckets(e, np, 0), "%s: a bucket taken again after the clearing does not "
                 "read zero (%s)", what, zinc_last_error(e));
    }
    free(vals);
    zinc_engine_destroy(e);
    free(buf);
}

/* zinc_grad_bucket_drop: a bucket holding gradients added and not handed over (the Python
 * front-end's add that failed midway) given back zeroed, so another group can take it even when
 * every bucket was taken (the toy's config has two), and the dropped group's next bucket reads
 * zero; the sums and the window go on unchanged. Where the model adds into the gradient buffer
 * itself (stages 0-1 here) and for a group holding no bucket it does nothing. */
static void check_bucket_drop(int stage)
{
    toy_run r = {.world = 1, .stage = stage, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1};
    char what[64];
    snprintf(what, sizeof what, "zinc_grad_bucket_drop stage %d", stage);
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, what);
    if (!e) return;
    int groups = zinc_engine_group_count(e), slot = -2;
    ZT_CHECK(groups >= 3, "%s: the toy has %d groups, the check needs 3", what, groups);
    ZT_CHECK(zinc_grad_bucket_drop(e, groups) == ZINC_ERR_INVALID_ARG,
             "%s: an unknown group is not refused", what);
    ZT_CHECK(zinc_grad_bucket_drop(e, 0) == ZINC_OK, "%s: a group holding no bucket: %s", what,
             zinc_last_error(e));
    if (stage < 2) {
        ZT_OK(zinc_grad_bucket(e, 0, &slot));
        ZT_CHECK(slot == -1 && zinc_grad_bucket_drop(e, 0) == ZINC_OK,
                 "%s: unbucketed, slot %d, drop: %s", what, slot, zinc_last_error(e));
        zinc_engine_destroy(e);
        return;
    }
    int64_t most = 1;
    for (int p = 0; p < np; p++)
        if (zinc_param_numel(e, p) > most) most = zinc_param_numel(e, p);
    float *vals = malloc((size_t)most * sizeof *vals);
    /* groups 0 and 1 take both buckets and hold 2.0s; group 2 finds none */
    ZT_CHECK(fill_buckets(e, np, 0x4000), "%s: filling the buckets (%s)", what, zinc_last_error(e));
    ZT_CHECK(zinc_grad_bucket(e, 2, &slot) == ZINC_ERR_USAGE, "%s: a third group took a bucket "
             "with both taken", what);
    int held = -1;
    ZT_OK(zinc_grad_bucket(e, 0, &held));
    ZT_CHECK(zinc_grad_bucket_drop(e, 0) == ZINC_OK, "%s: %s", what, zinc_last_error(e));
    slot = -1;
    ZT_CHECK(zinc_grad_bucket(e, 2, &slot) == ZINC_OK && slot == held, "%s: group 2 does not "
             "get group 0's dropped bucket %d (slot %d: %s)", what, held, slot,
             zinc_last_error(e));
    /* the dropped bucket reads zero where group 2 takes it */
    int zero = 1;
    for (int p = 0; p < np; p++) {
        if (zinc_param_group(e, p) != 2) continue;
        uint16_t *view = NULL;
        ZT_OK(zinc_param_grad(e, p, (void **)&view));
        for (int64_t i = 0; view && i < zinc_param_numel(e, p); i++) zero &= view[i] == 0;
    }
    ZT_CHECK(zero, "%s: the dropped bucket does not read zero for the group taking it", what);
    /* hand everything over, groups 2 and 1 first (they hold the buckets the others need):
     * group 1's 2.0s count, group 0's dropped ones do not */
    ZT_OK(zinc_grads_ready(e, 2));
    ZT_OK(zinc_grads_ready(e, 1));
    for (int g = 0; g < groups; g++)
        if (g != 1 && g != 2) ZT_OK(zinc_grads_ready(e, g));
    for (int p = 0; p < np; p++) {
        float want = zinc_param_group(e, p) == 1 ? 2.0f : 0.0f;
        int ok = zinc_param_grad_get(e, p, vals) == ZINC_OK;
        for (int64_t i = 0; ok && i < zinc_param_numel(e, p); i++) ok = vals[i] == want;
        ZT_CHECK(ok, "%s: parameter %d (group %d) does not read %g after the hand-over", what, p,
                 zinc_param_group(e, p), want);
    }
    zinc_step_info_t info;
    ZT_CHECK(zinc_step(e, &info) == ZINC_OK, "%s: the step after it: %s", what,
             zinc_last_error(e));
    free(vals);
    zinc_engine_destroy(e);
}

/* zinc_engine_set_train_state before zinc_finalize: the counters are set and nothing else
 * happens (its restart of the accumulation window, added later, read the groups' state that
 * zinc_finalize allocates: a crash). */
static void check_train_state_early(void)
{
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
                      "\"AdamW\"}, \"zero_optimization\": {\"stage\": 2}}";
    zinc_engine_options_t o = {.config_json = cfg};
    zinc_engine_t *e = NULL;
    int g = -1, p = -1;
    int64_t shape[1] = {8};
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    ZT_OK(zinc_group_add(e, "g", &g));
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    zinc_train_state_t st = {.applied = 5, .skipped = 1};
    ZT_OK(zinc_engine_set_train_state(e, &st));
    int64_t applied = -1, skipped = -1;
    zinc_engine_steps(e, &applied, &skipped);
    ZT_CHECK(applied == 5 && skipped == 1, "set_train_state before finalize: steps %lld, %lld",
             (long long)applied, (long long)skipped);
    zinc_engine_destroy(e);
}

int main(void)
{
    check_train_state_early();
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16};
    for (int world = 1; world <= 2; world++)
        for (int stage = 0; stage <= 3; stage++)
            for (int d = 0; d < 2; d++) check_training(world, stage, dts[d], TOY_COUNT, NULL);
    for (int stage = 0; stage <= 3; stage++)
        check_training(2, stage, ZINC_DTYPE_BF16, TOY_SET_STEP_LAST, NULL);
    check_training(2, 1, ZINC_DTYPE_BF16, TOY_COUNT, "\"offload_optimizer\": {\"device\": \"cpu\"}, ");
    check_training(2, 2, ZINC_DTYPE_BF16, TOY_COUNT, "\"offload_optimizer\": {\"device\": \"cpu\"}, ");
    for (int stage = 0; stage <= 3; stage++) check_misuse(stage);
    for (int stage = 0; stage <= 3; stage++)
        for (int external = 0; external <= 1; external++) check_clear(stage, external, NULL);
    check_clear(2, 0, "\"offload_optimizer\": {\"device\": \"cpu\"}, ");
    check_clear(3, 0, "\"offload_optimizer\": {\"device\": \"cpu\"}, ");
    for (int stage = 0; stage <= 3; stage++) check_bucket_drop(stage);
    return zt_finish("engine_grad_buffer");
}
