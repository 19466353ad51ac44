/*
 * test_host_limit.c — zinc.host_memory_limit (issue 39 item 3): the host bytes the engine plans
 * for the model state (zinc_memory_host) against a cap per rank, checked at zinc_finalize before
 * anything is allocated. Through the public API on the toy model (toy.h).
 *
 *  1. offload_optimizer: a limit one byte below the planned host bytes fails zinc_finalize with
 *     ZINC_ERR_NOMEM on every rank of a local world of 2, naming the category past the limit
 *     (the last one allocated, param16, and with a lower limit an earlier one), the bytes and
 *     the key, with nothing allocated on either side; a limit equal to the plan trains bit for
 *     bit as the run without a limit.
 *  2. no offload: the host plan is 0, so any limit (1 byte) trains, as an unlimited run, at
 *     stages 0-3.
 *  3. offload_param at stage 3: the 16-bit parameter shard is the category named when it is what
 *     breaks the limit, as the offload_param shard; at the plan the run trains bit for bit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

#define OPT "\"offload_optimizer\": {\"device\": \"cpu\"}, "
#define BOTH OPT "\"offload_param\": {\"device\": \"cpu\"}, "

/* The host categories in the order the engine allocates them (engine/offload.c). */
static const zinc_mem_category order[] = {ZINC_MEM_MASTER, ZINC_MEM_ADAM_M, ZINC_MEM_ADAM_V,
                                          ZINC_MEM_GRAD, ZINC_MEM_PARAM16};

/* The category the engine must name under `limit`: the first whose bytes, added to those before
 * it in allocation order, exceed it; -1 when the plan fits. */
static int over_limit(const uint64_t h[ZINC_MEM_COUNT], uint64_t limit)
{
    uint64_t used = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if ((used += h[order[i]]) > limit) return (int)order[i];
    return -1;
}

typedef struct {
    const toy_run *r;
    zinc_world_t *world;
    zinc_status status[2];
    char msg[2][768];
    uint64_t host[2][ZINC_MEM_COUNT]; /* zinc_memory_host's planned bytes */
    int allocated[2];                 /* categories allocated, device and host */
} ranks_ctx;

static void finalize_rank(int rank, void *arg)
{
    ranks_ctx *c = arg;
    zinc_engine_t *e = NULL;
    int np;
    c->status[rank] = toy_engine_on(c->r, c->world, rank, NULL, &e, &np);
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", zinc_last_error(e));
    uint64_t d[ZINC_MEM_COUNT], h[ZINC_MEM_COUNT];
    if (e && zinc_memory(e, NULL, d) == ZINC_OK &&
        zinc_memory_host(e, c->host[rank], h) == ZINC_OK)
        for (int k = 0; k < ZINC_MEM_COUNT; k++) c->allocated[rank] += d[k] != 0 || h[k] != 0;
    zinc_engine_destroy(e);
}

/* Creates r's engine on both ranks of a local world of 2 (registered, initialised). */
static void finalize_both(const toy_run *r, ranks_ctx *c)
{
    memset(c, 0, sizeof *c);
    c->r = r;
    zt_run_world(2, &c->world, finalize_rank, c);
}

/* The planned host bytes per rank of r's engine, without a limit (the same on both ranks); their
 * total is returned. */
static uint64_t host_plan(const toy_run *r, uint64_t h[ZINC_MEM_COUNT])
{
    toy_run u = *r;
    u.zinc_json = NULL;
    ranks_ctx c;
    finalize_both(&u, &c);
    ZT_CHECK(c.status[0] == ZINC_OK && c.status[1] == ZINC_OK, "plan: %s%s", c.msg[0], c.msg[1]);
    ZT_CHECK(memcmp(c.host[0], c.host[1], sizeof c.host[0]) == 0, "host plans differ by rank");
    memcpy(h, c.host[0], sizeof c.host[0]);
    uint64_t t = 0;
    for (int k = 0; k < ZINC_MEM_COUNT; k++) t += h[k];
    return t;
}

/* r (world 2, with r->zinc_json's limit) must fail zinc_finalize on both ranks, naming `cat`
 * (and `also` when not NULL), the key and the bytes, with nothing allocated. */
static void expect_refused(const toy_run *r, int cat, const char *also, const char *label)
{
    ranks_ctx c;
    finalize_both(r, &c);
    const char *name = cat >= 0 ? zinc_mem_category_name((zinc_mem_category)cat) : "?";
    for (int k = 0; k < 2; k++) {
        const char *m = c.msg[k];
        char on_rank[32];
        snprintf(on_rank, sizeof on_rank, "on rank %d", k);
        ZT_CHECK(c.status[k] == ZINC_ERR_NOMEM, "%s, rank %d: %s (%s)", label, k,
                 zinc_status_string(c.status[k]), m);
        ZT_CHECK(strstr(m, "zinc_finalize") && strstr(m, name) && strstr(m, on_rank) &&
                     strstr(m, "zinc.host_memory_limit") && strstr(m, "bytes needed") &&
                     strstr(m, "available") && (!also || strstr(m, also)),
                 "%s, rank %d: the error should name the call, %s%s%s, the key and the bytes: %s",
                 label, k, name, also ? " and " : "", also ? also : "", m);
        ZT_CHECK(c.allocated[k] == 0, "%s, rank %d: %d categories allocated before the refusal",
                 label, k, c.allocated[k]);
    }
}

/* r under r->zinc_json's limit trains exactly as r without it. */
static void expect_trains(const toy_run *r, const char *label)
{
    toy_run lim = *r, ref = *r;
    ref.zinc_json = NULL;
    char l[160];
    snprintf(l, sizeof l, "%s, unlimited", label);
    if (toy_run_ok(&ref, l) && toy_run_ok(&lim, label))
        toy_expect_same_training(&ref, &lim, label);
    toy_free(&ref);
    toy_free(&lim);
}

static const char *limit_json(char *buf, size_t n, uint64_t limit)
{
    snprintf(buf, n, "\"host_memory_limit\": %llu, ", (unsigned long long)limit);
    return buf;
}

/* ---- 1. offload_optimizer ------------------------------------------------------------------ */

static void test_offload_optimizer(void)
{
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_FP32};
    for (int di = 0; di < 2; di++)
        for (int st = 1; st <= 3; st++) {
            toy_run r = {.world = 2, .stage = st, .accum = 1, .steps = 6, .dtype = dts[di],
                         .clip = 1.0, .inject_inf_step = -1, .zero_json = OPT};
            uint64_t h[ZINC_MEM_COUNT];
            uint64_t total = host_plan(&r, h);
            ZT_CHECK(total > 0 && h[ZINC_MEM_MASTER] > 0, "stage %d %s: no host plan", st,
                     zinc_dtype_name(dts[di]));
            char j[96], label[96];
            /* One byte short: the last category that has bytes does not fit. */
            r.zinc_json = limit_json(j, sizeof j, total - 1);
            snprintf(label, sizeof label, "offload_optimizer stage %d %s, limit plan - 1", st,
                     zinc_dtype_name(dts[di]));
            expect_refused(&r, over_limit(h, total - 1), NULL, label);
            /* Room for the master only: adam_m is named. */
            r.zinc_json = limit_json(j, sizeof j, h[ZINC_MEM_MASTER]);
            snprintf(label, sizeof label, "offload_optimizer stage %d %s, limit = master", st,
                     zinc_dtype_name(dts[di]));
            ZT_CHECK(over_limit(h, h[ZINC_MEM_MASTER]) == ZINC_MEM_ADAM_M, "%s: order", label);
            expect_refused(&r, ZINC_MEM_ADAM_M, NULL, label);
            /* Exactly the plan: trains as without the limit. */
            r.zinc_json = limit_json(j, sizeof j, total);
            snprintf(label, sizeof label, "offload_optimizer stage %d %s, limit = plan", st,
                     zinc_dtype_name(dts[di]));
            expect_trains(&r, label);
        }
}

/* ---- 2. no offload ------------------------------------------------------------------------- */

static void test_no_offload(void)
{
    for (int st = 0; st <= 3; st++) {
        toy_run r = {.world = 2, .stage = st, .accum = 1, .steps = 6, .dtype = ZINC_DTYPE_FP16,
                     .clip = 1.0, .inject_inf_step = -1, .zinc_json = "\"host_memory_limit\": 1, "};
        uint64_t h[ZINC_MEM_COUNT];
        ZT_CHECK(host_plan(&r, h) == 0, "stage %d without offload: a host plan", st);
        char label[64];
        snprintf(label, sizeof label, "no offload, stage %d, 1-byte host limit", st);
        expect_trains(&r, label);
    }
}

/* ---- 3. offload_param ---------------------------------------------------------------------- */

static void test_offload_param(void)
{
    toy_run r = {.world = 2, .stage = 3, .accum = 1, .steps = 6, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1, .zero_json = BOTH};
    uint64_t h[ZINC_MEM_COUNT];
    uint64_t total = host_plan(&r, h);
    ZT_CHECK(h[ZINC_MEM_PARAM16] > 0, "offload_param: no host param16 in the plan");
    char j[96];
    r.zinc_json = limit_json(j, sizeof j, total - 1);
    ZT_CHECK(over_limit(h, total - 1) == ZINC_MEM_PARAM16, "offload_param: order");
    expect_refused(&r, ZINC_MEM_PARAM16, "offload_param shard", "offload_param, limit plan - 1");
    /* Every category before the shard fits under this limit: the shard alone breaks it. */
    r.zinc_json = limit_json(j, sizeof j, total - h[ZINC_MEM_PARAM16]);
    expect_refused(&r, ZINC_MEM_PARAM16, "offload_param shard",
                   "offload_param, limit without the shard");
    r.zinc_json = limit_json(j, sizeof j, total);
    expect_trains(&r, "offload_param, limit = plan");
    /* A string limit far above the plan. */
    r.zinc_json = "\"host_memory_limit\": \"1GiB\", ";
    expect_trains(&r, "offload_param, limit 1GiB");
}

int main(void)
{
    test_offload_optimizer();
    test_no_offload();
    test_offload_param();
    return zt_finish("test_host_limit");
}
