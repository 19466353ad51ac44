/*
 * test_gather_pack.c — stage 3's gather area (engine/gather.c): groups packed into the slots,
 * prefetch bounded by stage3_prefetch_bucket_size, and the guarantee that any `ngather` groups
 * can be held at once.
 *
 * The model: one large group (an embedding, 4096 elements: the slot size), eight small ones
 * (256 each) and a second large one, bf16, one rank, nothing persistent, two slots. With one
 * group per slot, prefetch could run one group ahead; packed, the small groups share a slot and
 * prefetch runs ahead until prefetch_bucket_size (1000) elements are gathered ahead of use: four
 * small groups. Then random models and schedules (several groups held at once, the traced order
 * left at random) against a recount of the area's bookkeeping: no two groups overlap, and the
 * values of every gathered group are the ones set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/internal.h"
#include "testutil.h"

#define SMALL 8
#define NG (SMALL + 2) /* big0, small1 .. small8, big9 */
#define BIG_N 4096
#define SMALL_N 256

static int64_t group_numel(int g) { return g == 0 || g == NG - 1 ? BIG_N : SMALL_N; }

/* A distinct value per (group, element), exact in bf16. */
static float value_of(int g, int64_t i) { return (float)(g + 1) + (float)(i % 8) / 8.0f; }

/* A stage-3 bf16 engine of `ng` groups of one parameter each (sizes[g] elements), their values
 * set to value_of; NULL on failure. */
static zinc_engine_t *engine_of_with(const char *zero_extra, const int64_t *sizes, int ng,
                                     long long prefetch_bucket_size, int gather_buffers,
                                     long long max_live, int *pid)
{
    char cfg[1536];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
             " \"weight_decay\": 0}},"
             " \"zero_optimization\": {%s\"stage\": 3, \"stage3_param_persistence_threshold\": 0,"
             " \"stage3_prefetch_bucket_size\": %lld, \"stage3_max_live_parameters\": %lld},"
             " \"zinc\": {\"gather_buffers\": %d}}",
             zero_extra, prefetch_bucket_size, max_live, gather_buffers);
    zinc_engine_options_t o = {.config_json = cfg};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    int64_t most = 0;
    for (int g = 0; g < ng; g++) {
        char name[32];
        int gid;
        snprintf(name, sizeof name, "g%d", g);
        ZT_OK(zinc_group_add(e, name, &gid));
        int64_t shape[1] = {sizes[g]};
        snprintf(name, sizeof name, "g%d.w", g);
        ZT_OK(zinc_param_add(e, gid, name, 1, shape, ZINC_DTYPE_BF16, &pid[g]));
        if (sizes[g] > most) most = sizes[g];
    }
    ZT_OK(zinc_finalize(e));
    float *v = malloc((size_t)most * sizeof *v);
    for (int g = 0; g < ng && v; g++) {
        for (int64_t i = 0; i < sizes[g]; i++) v[i] = value_of(g, i);
        ZT_OK(zinc_param_set(e, pid[g], v));
    }
    free(v);
    return e;
}

static zinc_engine_t *engine_of(const int64_t *sizes, int ng, long long prefetch_bucket_size,
                                int gather_buffers, long long max_live, int *pid)
{
    return engine_of_with("", sizes, ng, prefetch_bucket_size, gather_buffers, max_live, pid);
}

static zinc_engine_t *make_engine(long long prefetch_bucket_size, int pid[NG])
{
    int64_t sizes[NG];
    for (int g = 0; g < NG; g++) sizes[g] = group_numel(g);
    zinc_engine_t *e = engine_of(sizes, NG, prefetch_bucket_size, 2, 1000000000, pid);
    if (!e) return NULL;
    /* docs/engine.md's count: max(gather_buffers, min(1 + ceil(budget / largest), groups)). */
    long long want = 1 + (prefetch_bucket_size + BIG_N - 1) / BIG_N;
    want = want > NG ? NG : want < 2 ? 2 : want;
    ZT_CHECK(e->ngather == want, "%lld slots expected, the engine has %d", want, e->ngather);
    return e;
}

/* Elements of group g's gathered view (n elements) that differ from the values set. */
static int64_t wrong_values_n(zinc_engine_t *e, int pid, int g, int64_t n)
{
    void *view = NULL;
    if (zinc_param_data(e, pid, &view) != ZINC_OK || !view) return -1;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += zk_load(view, ZINC_DTYPE_BF16, (size_t)i) != value_of(g, i);
    return bad;
}

static int64_t wrong_values(zinc_engine_t *e, int pid, int g)
{
    return wrong_values_n(e, pid, g, group_numel(g));
}

static uint64_t gather_bytes(zinc_engine_t *e)
{
    uint64_t b[ZINC_COLL_COUNT] = {0};
    ZT_OK(zinc_comm_bytes(e, b));
    return b[ZINC_COLL_ALL_GATHER];
}

/* Forward as a model drives it, in group order from group `from` (the ones before it done by
 * the caller), checking every gathered view. */
static void forward(zinc_engine_t *e, const int pid[NG], int from, const char *what)
{
    for (int g = from; g < NG; g++) {
        ZT_OK(zinc_gather(e, g));
        int64_t bad = wrong_values(e, pid[g], g);
        ZT_CHECK(bad == 0, "%s: group %d gathered with %lld wrong values", what, g, (long long)bad);
        ZT_OK(zinc_release(e, g));
    }
}

/* Backward in reverse group order, handing each group's zero gradient over, then the step. The
 * last `kept` groups are handed over without a gather (a caller that kept its own copies of
 * them from forward, as import zinc's stage 3 does within stage3_max_reuse_distance). The
 * gradients are zero and the weight decay 0, so the step leaves the weights as set. */
static void backward_step(zinc_engine_t *e, const int pid[NG], int kept, const char *what)
{
    for (int g = NG - 1; g >= 0; g--) {
        if (g < NG - kept) {
            ZT_OK(zinc_gather(e, g));
            int64_t bad = wrong_values(e, pid[g], g);
            ZT_CHECK(bad == 0, "%s: group %d gathered with %lld wrong values (backward)", what,
                     g, (long long)bad);
            void *grad = NULL;
            ZT_OK(zinc_param_grad(e, pid[g], &grad));
            ZT_OK(zinc_release(e, g));
        }
        ZT_OK(zinc_grads_ready(e, g));
    }
    zinc_step_info_t info;
    ZT_OK(zinc_step(e, &info));
}

static void micro_step(zinc_engine_t *e, const int pid[NG], int from, const char *what)
{
    forward(e, pid, from, what);
    backward_step(e, pid, 0, what);
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

/* The traced first micro-step, then a gather of group 0; returns the engine (NULL on failure). */
static zinc_engine_t *traced_then_first_with(const char *zero_extra, const int64_t *sizes,
                                             int ng, long long budget, long long max_live,
                                             int *pid)
{
    zinc_engine_t *e = engine_of_with(zero_extra, sizes, ng, budget, 2, max_live, pid);
    if (!e) return NULL;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < ng; k++) {
            int g = pass == 0 ? k : ng - 1 - k;
            ZT_OK(zinc_gather(e, g));
            ZT_OK(zinc_release(e, g));
            if (pass == 1) ZT_OK(zinc_grads_ready(e, g));
        }
    zinc_step_info_t info;
    ZT_OK(zinc_step(e, &info));
    ZT_OK(zinc_gather(e, 0));
    return e;
}

static zinc_engine_t *traced_then_first(const int64_t *sizes, int ng, long long budget,
                                        long long max_live, int *pid)
{
    return traced_then_first_with("", sizes, ng, budget, max_live, pid);
}

/* Each of prefetch's limits stops it where the docs say: the budget (elements ahead of use
 * below it: a budget of exactly three small groups prefetches three), max_live_parameters (the
 * gathered total within it) and room (in trace order: a large group that finds no room stops
 * prefetch even where a later small group would fit). */
static void test_prefetch_limits(void)
{
    int pid[NG];
    int64_t sizes[NG];
    for (int g = 0; g < NG; g++) sizes[g] = group_numel(g);
    zinc_engine_t *e = traced_then_first(sizes, NG, 3 * SMALL_N, 1000000000, pid);
    for (int g = 1; e && g <= SMALL; g++)
        ZT_CHECK(prefetched(e, g) == (g <= 3), "budget of three small groups: group %d %s", g,
                 g <= 3 ? "not prefetched" : "prefetched");
    zinc_engine_destroy(e);
    /* max_live: big0 and two small groups (4096 + 512 <= 4700 < 4096 + 768). */
    e = traced_then_first(sizes, NG, 1000000, BIG_N + 2 * SMALL_N + 92, pid);
    for (int g = 1; e && g <= SMALL; g++)
        ZT_CHECK(prefetched(e, g) == (g <= 2), "max_live_parameters: group %d %s", g,
                 g <= 2 ? "not prefetched" : "prefetched");
    zinc_engine_destroy(e);
    /* Room: large, small, large, small in two slots of 4096. Holding group 0 in one slot, group 1
     * goes into the other, group 2 finds no room, and group 3, which would fit, must wait. */
    const int64_t mixed[4] = {BIG_N, SMALL_N, BIG_N, SMALL_N};
    int pm[4];
    e = traced_then_first(mixed, 4, BIG_N, 1000000000, pm);
    if (e) {
        ZT_CHECK(e->ngather == 2, "two slots, the engine has %d", e->ngather);
        ZT_CHECK(prefetched(e, 1) && !prefetched(e, 2) && !prefetched(e, 3),
                 "in trace order: group 1 prefetched (%d), 2 (%d) and 3 (%d) not",
                 prefetched(e, 1), prefetched(e, 2), prefetched(e, 3));
    }
    zinc_engine_destroy(e);
}

/* With offload_param "nvme" each gather's own slice goes through one of four staging slots,
 * whose reuse waits on the host for its last upload: prefetch runs at most three groups ahead
 * (zoffload_prefetch_groups), so that it never makes the host wait for the device. */
static void test_prefetch_nvme_param(void)
{
    char dir[] = "/tmp/zinc-gather-pack-XXXXXX";
    if (!mkdtemp(dir)) {
        ZT_CHECK(0, "mkdtemp: cannot make a directory for nvme_path");
        return;
    }
    char zero[512];
    snprintf(zero, sizeof zero,
             "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, "
             "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, ", dir, dir);
    int pid[NG];
    int64_t sizes[NG];
    for (int g = 0; g < NG; g++) sizes[g] = group_numel(g);
    zinc_engine_t *e = traced_then_first_with(zero, sizes, NG, 1000000, 1000000000, pid);
    if (e) {
        int ahead = 0;
        for (int g = 1; g < NG; g++) ahead += prefetched(e, g);
        ZT_CHECK(ahead == 3, "%d groups prefetched ahead with offload_param nvme, 3 expected",
                 ahead);
        int64_t bad = wrong_values(e, pid[0], 0);
        ZT_CHECK(bad == 0, "big0 gathered from the file with %lld wrong values", (long long)bad);
        ZT_OK(zinc_release(e, 0));
        ZT_OK(zinc_gather(e, 1));
        bad = wrong_values(e, pid[1], 1);
        ZT_CHECK(bad == 0, "small group 1 prefetched from the file with %lld wrong values",
                 (long long)bad);
        ZT_OK(zinc_release(e, 1));
    }
    zinc_engine_destroy(e);
    rmdir(dir);
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

/* The gather area's bookkeeping against a recount: no two groups in the slots overlap, each
 * lies within its slot's filled part, the slots' counts and the live and ahead totals are the
 * groups'. Returns the number of violations (each reported). */
static int area_violations(const zinc_engine_t *e, const char *what)
{
    int bad = 0, ng = e->plan.ngroups;
    size_t B = e->plan.max_group_padded;
    int64_t live = 0, ahead = 0;
    for (int i = 0; i < e->ngather; i++) {
        int count = 0;
        for (int g = 0; g < ng; g++) {
            const zgroup_state *a = &e->gstate[g];
            if (a->gather_slot != i) continue;
            count++;
            size_t n = e->plan.groups[g].padded;
            if (a->gather_pos < (size_t)i * B || a->gather_pos + n > (size_t)i * B + e->gslots[i].fill ||
                e->gslots[i].fill > B) {
                ZT_CHECK(0, "%s: group %d at %zu+%zu is outside slot %d's %zu filled", what, g,
                         a->gather_pos, n, i, e->gslots[i].fill);
                bad++;
            }
            for (int h = g + 1; h < ng; h++) {
                const zgroup_state *b = &e->gstate[h];
                if (b->gather_slot < 0) continue;
                size_t m = e->plan.groups[h].padded;
                if (a->gather_pos < b->gather_pos + m && b->gather_pos < a->gather_pos + n) {
                    ZT_CHECK(0, "%s: groups %d and %d overlap", what, g, h);
                    bad++;
                }
            }
            live += (int64_t)n;
            if (!a->held) ahead += (int64_t)n;
        }
        if (count != e->gslots[i].count || (count == 0 && e->gslots[i].fill != 0)) {
            ZT_CHECK(0, "%s: slot %d counts %d groups (fill %zu), holds %d", what, i,
                     e->gslots[i].count, e->gslots[i].fill, count);
            bad++;
        }
    }
    if (live != e->gather_live || ahead != e->gather_ahead) {
        ZT_CHECK(0, "%s: %lld live and %lld ahead counted, the engine has %lld and %lld", what,
                 (long long)live, (long long)ahead, (long long)e->gather_live,
                 (long long)e->gather_ahead);
        bad++;
    }
    return bad;
}

/* Elements of group g's gathered view (n elements) that differ from `want` (bf16 values). */
static int64_t differ(zinc_engine_t *e, int pid, const float *want, int64_t n)
{
    void *view = NULL;
    if (zinc_param_data(e, pid, &view) != ZINC_OK || !view) return -1;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += zk_load(view, ZINC_DTYPE_BF16, (size_t)i) != want[i];
    return bad;
}

/* want = the group's fp32 master (zinc_param_get) rounded to bf16: what a gather gives. */
static void expect_master(zinc_engine_t *e, int pid, float *want, int64_t n)
{
    ZT_OK(zinc_param_get(e, pid, want));
    uint16_t b;
    for (int64_t i = 0; i < n; i++) {
        zk_store(&b, ZINC_DTYPE_BF16, 0, want[i]);
        want[i] = zk_load(&b, ZINC_DTYPE_BF16, 0);
    }
}

/* Random models and schedules: groups of random sizes, several held at once (up to the slots'
 * number), micro-steps that follow the traced order or leave it at random, random gradients
 * handed over in backward so that every step changes the weights; after every gather the area's
 * bookkeeping is recounted and the group's values compared with its master after the last step
 * (a copy gathered before a step and kept would show the old ones). */
#define RG 12
static void test_random_schedules(void)
{
    zt_rng rng = {0x5EED6A7Cull};
    const long long budgets[] = {0, 300, 2000, 1000000};
    int hits = 0; /* gathers that found their group prefetched: the schedules exercise prefetch */
    for (int trial = 0; trial < 24; trial++) {
        int64_t sizes[RG];
        for (int g = 0; g < RG; g++) sizes[g] = 1 + (int64_t)(zt_next(&rng) % 2000);
        sizes[zt_next(&rng) % RG] = 4000; /* one large group sets the slot size */
        long long budget = budgets[trial % 4];
        int pid[RG];
        long long live = zt_next(&rng) % 2 ? 1000000000 : 6000 + (long long)(zt_next(&rng) % 8000);
        zinc_engine_t *e = engine_of(sizes, RG, budget, 1 + (int)(zt_next(&rng) % 3), live, pid);
        if (!e) continue;
        int slots = e->ngather, order[RG];
        float *want[RG];
        for (int g = 0; g < RG; g++) {
            order[g] = g;
            want[g] = malloc((size_t)sizes[g] * sizeof(float));
            if (want[g]) expect_master(e, pid[g], want[g], sizes[g]);
        }
        int failures = 0;
        for (int micro = 0; micro < 6 && failures == 0; micro++) {
            char what[96];
            /* Forward in the model's order, backward reversed; nesting: a gather may come while
             * up to slots - 1 others are held; a deviation (1 in 8 after the traced first
             * micro-step) takes another group than the order's next. */
            int held[RG], nheld = 0, done_bwd[RG] = {0};
            for (int pass = 0; pass < 2 && failures == 0; pass++) {
                for (int k = 0; k < RG && failures == 0; k++) {
                    int g = order[pass == 0 ? k : RG - 1 - k];
                    if (micro > 0 && zt_next(&rng) % 8 == 0) g = (int)(zt_next(&rng) % RG);
                    int is_held = 0;
                    for (int j = 0; j < nheld; j++) is_held |= held[j] == g;
                    if (is_held || (pass == 1 && done_bwd[g])) continue;
                    while (nheld >= slots || (nheld > 0 && zt_next(&rng) % 2)) {
                        int j = (int)(zt_next(&rng) % (uint64_t)nheld);
                        ZT_OK(zinc_release(e, held[j]));
                        held[j] = held[--nheld];
                    }
                    snprintf(what, sizeof what, "trial %d micro-step %d pass %d group %d", trial,
                             micro, pass, g);
                    hits += e->gstate[g].gather_slot >= 0;
                    zinc_status st = zinc_gather(e, g);
                    ZT_CHECK(st == ZINC_OK, "%s: %s", what, zinc_last_error(e));
                    if (st != ZINC_OK) {
                        failures++;
                        break;
                    }
                    held[nheld++] = g;
                    int64_t bad = want[g] ? differ(e, pid[g], want[g], sizes[g]) : -1;
                    ZT_CHECK(bad == 0, "%s: %lld wrong values", what, (long long)bad);
                    failures += bad != 0;
                    failures += area_violations(e, what);
                    if (pass == 1) {
                        void *grad = NULL;
                        ZT_OK(zinc_param_grad(e, pid[g], &grad));
                        for (int64_t i = 0; grad && i < sizes[g]; i++)
                            zk_store(grad, ZINC_DTYPE_BF16, (size_t)i,
                                     (float)(zt_uniform(&rng) - 0.5));
                        ZT_OK(zinc_grads_ready(e, g));
                        done_bwd[g] = 1;
                    }
                }
            }
            while (nheld > 0) ZT_OK(zinc_release(e, held[--nheld]));
            for (int g = RG - 1; g >= 0; g--) /* the groups backward skipped: zero gradients */
                if (!done_bwd[g]) ZT_OK(zinc_grads_ready(e, g));
            snprintf(what, sizeof what, "trial %d after micro-step %d", trial, micro);
            failures += area_violations(e, what);
            zinc_step_info_t info;
            ZT_OK(zinc_step(e, &info));
            ZT_CHECK(e->gather_live == 0, "%s: %lld elements left gathered after the step", what,
                     (long long)e->gather_live);
            for (int g = 0; g < RG; g++)
                if (want[g]) expect_master(e, pid[g], want[g], sizes[g]);
        }
        for (int g = 0; g < RG; g++) free(want[g]);
        zinc_engine_destroy(e);
    }
    ZT_CHECK(hits > 100, "only %d gathers found their group prefetched", hits);
}

/* The trace is recorded again when a micro-step leaves it: after a traced first micro-step in
 * full, a micro-step that skips three of backward's gathers becomes the trace, and the next one
 * prefetches backward's first groups at the end of forward (the old trace, with big9 next,
 * would have stopped prefetch at the first skipped gather) and moves the bytes of its own
 * gathers only. */
static void test_retrace(void)
{
    int pid[NG];
    zinc_engine_t *e = make_engine(1000, pid);
    if (!e) return;
    micro_step(e, pid, 0, "the traced micro-step");
    int full = e->trace_len;
    uint64_t b0 = gather_bytes(e);
    /* Backward skips the gathers of big9, small8 and small7 (kept from forward). */
    forward(e, pid, 0, "the micro-step that leaves the trace");
    backward_step(e, pid, 3, "the micro-step that leaves the trace");
    uint64_t second = gather_bytes(e) - b0;
    ZT_CHECK(e->trace_done && e->trace_len == full - 3,
             "the trace is the changed micro-step's %d gathers (done %d, %d entries)", full - 3,
             e->trace_done, e->trace_len);
    b0 = gather_bytes(e);
    const char *what = "the micro-step that follows the new trace";
    forward(e, pid, 0, what);
    for (int g = 3; g <= 6; g++)
        ZT_CHECK(prefetched(e, g), "%s: small group %d, backward's next gathers, is not "
                 "prefetched at the end of forward", what, g);
    backward_step(e, pid, 3, what);
    uint64_t third = gather_bytes(e) - b0;
    ZT_CHECK(third == second, "all-gather bytes %llu following the new trace, %llu recording it",
             (unsigned long long)third, (unsigned long long)second);
    zinc_engine_destroy(e);
}

/* A micro-step that follows the trace and stops before its end is the new order. The traced
 * micro-step uses big0 again after forward (a tied head); later ones gather forward only (a
 * caller that kept every group for the rest): without the shorter order, each of them would
 * prefetch big0 for the traced use after forward's last gather, which nothing takes. */
static void test_trace_shorter(void)
{
    int pid[NG];
    zinc_engine_t *e = make_engine(1000000, pid);
    if (!e) return;
    uint64_t fwd_bytes = 0;
    for (int g = 0; g < NG; g++) fwd_bytes += (uint64_t)group_numel(g) * 2; /* bf16 */
    for (int micro = 0; micro < 4; micro++) {
        uint64_t b0 = gather_bytes(e);
        forward(e, pid, 0, "test_trace_shorter");
        if (micro == 0) { /* the tied head, then backward */
            ZT_OK(zinc_gather(e, 0));
            ZT_OK(zinc_release(e, 0));
        }
        backward_step(e, pid, micro == 0 ? 0 : NG, "test_trace_shorter");
        uint64_t moved = gather_bytes(e) - b0;
        if (micro >= 2)
            ZT_CHECK(moved == fwd_bytes, "micro-step %d, forward only: %llu all-gather bytes, its "
                     "gathers %llu", micro, (unsigned long long)moved,
                     (unsigned long long)fwd_bytes);
    }
    ZT_CHECK(e->trace_done && e->trace_len == NG, "the trace is forward's %d gathers (%d entries)",
             NG, e->trace_len);
    zinc_engine_destroy(e);
}

int main(void)
{
    test_packed_prefetch();
    test_budgets();
    test_held_guarantee();
    test_prefetch_limits();
    test_prefetch_nvme_param();
    test_retrace();
    test_trace_shorter();
    test_random_schedules();
    return zt_finish("test_gather_pack");
}
