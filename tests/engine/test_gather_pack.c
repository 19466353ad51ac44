/*
 * test_gather_pack.c — stage 3's gather area (engine/gather.c): groups packed into the slots,
 * prefetch bounded by stage3_prefetch_bucket_size, and the guarantee that any `ngather` groups
 * can be held at once.
 *
 * The model: one large group (an embedding, 4096 elements: the slot size), eight small ones
 * (256 each) and a second large one, bf16, one rank, nothing persistent, two slots. With one
 * group per slot, prefetch could run one group ahead; packed, the small groups share a slot and
 * prefetch runs ahead until prefetch_bucket_size (1000) elements are gathered ahead of use: four
 * small groups.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "testutil.h"

#define SMALL 8
#define NG (SMALL + 2) /* big0, small1 .. small8, big9 */
#define BIG_N 4096
#define SMALL_N 256

static int64_t group_numel(int g) { return g == 0 || g == NG - 1 ? BIG_N : SMALL_N; }

/* A distinct value per (group, element), exact in bf16. */
static float value_of(int g, int64_t i) { return (float)(g + 1) + (float)(i % 8) / 8.0f; }

static zinc_engine_t *make_engine(long long prefetch_bucket_size, int pid[NG])
{
    char cfg[768];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
             " \"weight_decay\": 0}},"
             " \"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0,"
             " \"stage3_prefetch_bucket_size\": %lld}, \"zinc\": {\"gather_buffers\": 2}}",
             prefetch_bucket_size);
    zinc_engine_options_t o = {.config_json = cfg};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    for (int g = 0; g < NG; g++) {
        char name[32];
        int gid;
        snprintf(name, sizeof name, "g%d", g);
        ZT_OK(zinc_group_add(e, name, &gid));
        int64_t shape[1] = {group_numel(g)};
        snprintf(name, sizeof name, "g%d.w", g);
        ZT_OK(zinc_param_add(e, gid, name, 1, shape, ZINC_DTYPE_BF16, &pid[g]));
    }
    ZT_OK(zinc_finalize(e));
    float *v = malloc(BIG_N * sizeof *v);
    for (int g = 0; g < NG && v; g++) {
        for (int64_t i = 0; i < group_numel(g); i++) v[i] = value_of(g, i);
        ZT_OK(zinc_param_set(e, pid[g], v));
    }
    free(v);
    /* docs/engine.md's count: max(gather_buffers, min(1 + ceil(budget / largest), groups)). */
    long long want = 1 + (prefetch_bucket_size + BIG_N - 1) / BIG_N;
    want = want > NG ? NG : want < 2 ? 2 : want;
    ZT_CHECK(e->ngather == want, "%lld slots expected, the engine has %d", want, e->ngather);
    return e;
}

/* Elements of group g's gathered view that differ from the values set. */
static int64_t wrong_values(zinc_engine_t *e, int pid, int g)
{
    void *view = NULL;
    if (zinc_param_data(e, pid, &view) != ZINC_OK || !view) return -1;
    int64_t bad = 0;
    for (int64_t i = 0; i < group_numel(g); i++)
        bad += zk_load(view, ZINC_DTYPE_BF16, (size_t)i) != value_of(g, i);
    return bad;
}

static uint64_t gather_bytes(zinc_engine_t *e)
{
    uint64_t b[ZINC_COLL_COUNT] = {0};
    ZT_OK(zinc_comm_bytes(e, b));
    return b[ZINC_COLL_ALL_GATHER];
}

/* A micro-step as a model drives it (forward in group order from group `from`, the ones before
 * it done by the caller; backward in reverse, handing each group's zero gradient over), checking
 * every gathered view; then the step. The gradients are zero and the weight decay 0, so the
 * step leaves the weights as set. */
static void micro_step(zinc_engine_t *e, const int pid[NG], int from, const char *what)
{
    for (int pass = 0; pass < 2; pass++)
        for (int k = pass == 0 ? from : 0; k < NG; k++) {
            int g = pass == 0 ? k : NG - 1 - k;
            ZT_OK(zinc_gather(e, g));
            int64_t bad = wrong_values(e, pid[g], g);
            ZT_CHECK(bad == 0, "%s: group %d gathered with %lld wrong values", what, g,
                     (long long)bad);
            if (pass == 1) {
                void *grad = NULL;
                ZT_OK(zinc_param_grad(e, pid[g], &grad));
            }
            ZT_OK(zinc_release(e, g));
            if (pass == 1) ZT_OK(zinc_grads_ready(e, g));
        }
    zinc_step_info_t info;
    ZT_OK(zinc_step(e, &info));
}

static int prefetched(const zinc_engine_t *e, int g)
{
    return e->gstate[g].gather_slot >= 0 && !e->gstate[g].held;
}

/* The trace's first micro-step, then a gather of big0 that prefetches: the small groups ahead of
 * use up to the budget, packed into the other slot; then the rest of that micro-step, with the
 * values right and each group gathered once per use (no prefetched transfer dropped). */
static void test_packed_prefetch(void)
{
    int pid[NG];
    zinc_engine_t *e = make_engine(1000, pid);
    if (!e) return;
    uint64_t b0 = gather_bytes(e);
    micro_step(e, pid, 0, "the traced micro-step");
    uint64_t traced = gather_bytes(e) - b0;
    ZT_CHECK(e->trace_done, "the first micro-step recorded the gather order");
    b0 = gather_bytes(e);
    ZT_OK(zinc_gather(e, 0));
    for (int g = 1; g <= SMALL; g++) {
        int want = g <= 4; /* 256, 512, 768 elements ahead are below 1000: a fourth one goes */
        ZT_CHECK(prefetched(e, g) == want, "small group %d %s prefetched", g,
                 want ? "not" : "also");
    }
    ZT_CHECK(e->gstate[1].gather_slot == e->gstate[4].gather_slot &&
                 e->gstate[1].gather_slot != e->gstate[0].gather_slot,
             "small groups 1-4 share the slot big0 does not hold (slots %d, %d; big0 %d)",
             e->gstate[1].gather_slot, e->gstate[4].gather_slot, e->gstate[0].gather_slot);
    ZT_CHECK(e->gather_ahead == 4 * SMALL_N, "elements ahead of use: %lld",
             (long long)e->gather_ahead);
    int64_t bad = wrong_values(e, pid[0], 0);
    ZT_CHECK(bad == 0, "big0 gathered with %lld wrong values", (long long)bad);
    ZT_OK(zinc_release(e, 0));
    micro_step(e, pid, 1, "the prefetching micro-step");
    uint64_t moved = gather_bytes(e) - b0;
    ZT_CHECK(moved == traced, "all-gather bytes: %llu with prefetch, %llu traced",
             (unsigned long long)moved, (unsigned long long)traced);
    zinc_engine_destroy(e);
}

/* Whole steps with prefetch at budgets 0 (none), 1000 and one past every group: the same
 * all-gather bytes in each step, the values right, nothing left gathered after a step. */
static void test_budgets(void)
{
    const long long budgets[] = {0, 1000, 1000000};
    uint64_t first = 0;
    for (int b = 0; b < 3; b++) {
        int pid[NG];
        zinc_engine_t *e = make_engine(budgets[b], pid);
        if (!e) continue;
        for (int step = 0; step < 3; step++) {
            char what[64];
            snprintf(what, sizeof what, "budget %lld step %d", budgets[b], step);
            uint64_t b0 = gather_bytes(e);
            micro_step(e, pid, 0, what);
            uint64_t moved = gather_bytes(e) - b0;
            if (b == 0 && step == 0) first = moved;
            ZT_CHECK(moved == first, "%s: %llu all-gather bytes, %llu without prefetch", what,
                     (unsigned long long)moved, (unsigned long long)first);
            ZT_CHECK(e->gather_live == 0 && e->gather_ahead == 0,
                     "%s: after the step %lld elements gathered, %lld ahead", what,
                     (long long)e->gather_live, (long long)e->gather_ahead);
        }
        zinc_engine_destroy(e);
    }
}

/* Two slots: any two groups can be held at once. Holding big0, a gather of big9 out of the
 * traced order finds no room and empties the slot of prefetched small groups; a third group
 * while both are held is refused with the documented message. */
static void test_held_guarantee(void)
{
    int pid[NG];
    zinc_engine_t *e = make_engine(1000, pid);
    if (!e) return;
    micro_step(e, pid, 0, "the traced micro-step");
    ZT_OK(zinc_gather(e, 0));
    ZT_CHECK(prefetched(e, 1), "small group 1 prefetched");
    ZT_OK(zinc_gather(e, NG - 1));
    ZT_CHECK(e->gstate[1].gather_slot < 0 && e->gstate[4].gather_slot < 0,
             "the prefetched small groups were dropped to make room");
    int64_t bad = wrong_values(e, pid[NG - 1], NG - 1);
    ZT_CHECK(bad == 0, "big9 gathered with %lld wrong values", (long long)bad);
    ZT_CHECK(zinc_gather(e, 5) == ZINC_ERR_USAGE &&
                 strstr(zinc_last_error(e), "all 2 gather buffers hold gathered groups"),
             "a third group while two slots are held: %s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

int main(void)
{
    test_packed_prefetch();
    test_budgets();
    test_held_guarantee();
    return zt_finish("test_gather_pack");
}
