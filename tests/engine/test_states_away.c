/*
 * test_states_away.c — zinc_states_offload / zinc_states_reload (DeepSpeed's engine.offload_states
 * and reload_states): the optimizer state goes to host memory between steps and comes back.
 *
 * At stages 0-3, bf16 and fp32, 1 and 2 local ranks, the toy trains 3 steps, moves its state
 * away (every movable category, or Adam's moments alone), runs the next micro-step's forward and
 * backward while it is away, brings it back, and finishes that step and 2 more. Against the
 * same 6 steps with nothing moved:
 *
 *  - the final fp32 masters and Adam moments are bit for bit the same (a copy that lost or
 *    changed a byte, or a reload into the wrong buffer, would show);
 *  - *moved is the device bytes of the categories asked for (the master not where fp32 at
 *    stages 0 and 3 makes it the working copy: its 0 bytes); zinc_memory's allocated bytes of
 *    those are 0 while away and zinc_memory_host's rise by as much; both are back after the
 *    reload; a second zinc_states_offload moves nothing;
 *  - while away, zinc_param_get_working gives the master's values from before, rounded to the
 *    working dtype (bf16: 1 ULP of difference would show), at every stage;
 *  - while away, zinc_step, zinc_param_get, zinc_param_set, zinc_param_state_get,
 *    zinc_param_local_get (master) and zinc_ckpt_save are ZINC_ERR_USAGE naming
 *    zinc_states_reload, and the engine trains on after them;
 *  - with offload_optimizer "cpu" nothing moves (the state is host memory already);
 *  - with accumulation 2 (2 ranks, bf16, stages 0-3) the state goes away before a window's first
 *    micro-step: that micro-step's zinc_step is counted while away (DeepSpeed's step() between
 *    micro-batches runs), the one ending the window is refused until the reload; the final
 *    masters and moments are bit for bit the run's that kept its state.
 *
 * Then the refusals: another category in the mask (ZINC_ERR_INVALID_ARG), before zinc_finalize,
 * a frozen engine (it has no state), NULL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "testutil.h"
#include "toy.h"
#include "zinc.h"

#define STEPS 6
#define AWAY_AFTER 3
#define MAXR 2

static const unsigned all_states = 1u << ZINC_MEM_MASTER | 1u << ZINC_MEM_ADAM_M |
                                   1u << ZINC_MEM_ADAM_V;
static const unsigned moments = 1u << ZINC_MEM_ADAM_M | 1u << ZINC_MEM_ADAM_V;

typedef struct {
    zinc_world_t *world;
    int n, stage, bf16, offload_cfg, accum;
    unsigned mask;                  /* 0: the reference run, nothing moved */
    char label[160];
    int nparams;
    float *master[MAXR][TOY_MAX_PARAMS], *m[MAXR][TOY_MAX_PARAMS];
    int64_t numel[TOY_MAX_PARAMS];
} run_ctx;

static void refused(zinc_engine_t *e, zinc_status s, const char *fn, const char *label)
{
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), fn) &&
                 strstr(zinc_last_error(e), "zinc_states_reload"),
             "%s: %s while the state is away: %s: %s", label, fn, zinc_status_string(s),
             zinc_last_error(e));
}

/* Parameters whose zinc_param_get_working values (while away) are not `master` (zinc_param_get's
 * before) rounded to the engine's dtype and widened back; the reads are collective at stage 3. */
static int working_differs(zinc_engine_t *e, int np, float *const master[], const char *label)
{
    zinc_dtype dt = zinc_engine_dtype(e);
    int bad = 0;
    for (int p = 0; p < np; p++) {
        int64_t n = zinc_param_numel(e, p);
        float *got = malloc((size_t)n * sizeof *got);
        zinc_status s = got ? zinc_param_get_working(e, p, got) : ZINC_ERR_NOMEM;
        ZT_CHECK(s == ZINC_OK, "%s: zinc_param_get_working(%d) while away: %s", label, p,
                 zinc_last_error(e));
        for (int64_t i = 0; s == ZINC_OK && i < n; i++) {
            unsigned char r[4];
            zk_store(r, dt, 0, master[p][i]);
            float want = zk_load(r, dt, 0);
            if (memcmp(&got[i], &want, 4)) {
                bad++;
                break;
            }
        }
        free(got);
    }
    return bad;
}

/* The state away after step AWAY_AFTER: its accounting, the refusals, a micro-step, back. */
static void away_and_back(run_ctx *c, zinc_engine_t *e, int rank, int np, const char *label)
{
    float *master[TOY_MAX_PARAMS] = {0};
    for (int p = 0; p < np; p++) {
        master[p] = malloc((size_t)zinc_param_numel(e, p) * sizeof(float));
        ZT_OK(zinc_param_get(e, p, master[p]));
    }
    uint64_t pl[ZINC_MEM_COUNT], al[ZINC_MEM_COUNT], hal[ZINC_MEM_COUNT];
    uint64_t al2[ZINC_MEM_COUNT], hal2[ZINC_MEM_COUNT], moved = 1, again = 1;
    ZT_OK(zinc_memory(e, pl, al));
    ZT_OK(zinc_memory_host(e, NULL, hal));
    uint64_t want = 0;
    for (int k = 0; k < ZINC_MEM_COUNT; k++)
        if (c->mask >> k & 1 && !c->offload_cfg) want += al[k];
    ZT_OK(zinc_states_offload(e, c->mask, 1, &moved));
    ZT_CHECK(moved == want && (want > 0) == !c->offload_cfg, "%s: moved %llu bytes, want %llu",
             label, (unsigned long long)moved, (unsigned long long)want);
    ZT_OK(zinc_memory(e, NULL, al2));
    ZT_OK(zinc_memory_host(e, NULL, hal2));
    for (int k = 0; k < ZINC_MEM_COUNT; k++) {
        int gone = c->mask >> k & 1 && !c->offload_cfg;
        ZT_CHECK(al2[k] == (gone ? 0 : al[k]) && hal2[k] == hal[k] + (gone ? al[k] : 0),
                 "%s: %s away: device %llu (was %llu), host %llu (was %llu)", label,
                 zinc_mem_category_name((zinc_mem_category)k), (unsigned long long)al2[k],
                 (unsigned long long)al[k], (unsigned long long)hal2[k],
                 (unsigned long long)hal[k]);
    }
    ZT_CHECK(zinc_states_offloaded(e) == (want > 0), "%s: zinc_states_offloaded %d", label,
             zinc_states_offloaded(e));
    ZT_OK(zinc_states_offload(e, c->mask, 0, &again));
    ZT_CHECK(again == 0, "%s: a second offload moved %llu bytes", label, (unsigned long long)again);
    if (want > 0) {
        float *buf = calloc((size_t)c->numel[0], sizeof *buf);
        refused(e, zinc_step(e, NULL), "zinc_step", label);
        refused(e, zinc_param_get(e, 0, buf), "zinc_param_get", label);
        refused(e, zinc_param_set(e, 0, buf), "zinc_param_set", label);
        refused(e, zinc_param_state_get(e, 0, ZINC_STATE_EXP_AVG, buf), "zinc_param_state_get",
                label);
        refused(e, zinc_param_local_get(e, 0, ZINC_STATE_MASTER, buf), "zinc_param_local_get",
                label);
        refused(e, zinc_ckpt_save(e, "states-away-never-written", "t", NULL), "zinc_ckpt_save",
                label);
        free(buf);
    }
    /* the working copy answers while the master is away: the master's values, rounded */
    int bad = working_differs(e, np, master, label);
    ZT_CHECK(bad == 0, "%s: %d parameters' zinc_param_get_working values are not the master's "
             "rounded to %s", label, bad, zinc_dtype_name(zinc_engine_dtype(e)));
    for (int p = 0; p < np; p++) free(master[p]);
    /* forward and backward go on while the state is away */
    zinc_status s = toy_micro_step(e, rank, c->n, AWAY_AFTER, np, 0);
    ZT_CHECK(s == ZINC_OK, "%s: a micro-step while away: %s", label, zinc_last_error(e));
    ZT_OK(zinc_states_reload(e));
    ZT_OK(zinc_memory(e, NULL, al2));
    ZT_OK(zinc_memory_host(e, NULL, hal2));
    ZT_CHECK(!memcmp(al, al2, sizeof al) && !memcmp(hal, hal2, sizeof hal) &&
                 !zinc_states_offloaded(e),
             "%s: after the reload the memory is not as before", label);
    ZT_OK(zinc_states_reload(e));    /* nothing to do */
    s = zinc_step(e, NULL);
    ZT_CHECK(s == ZINC_OK, "%s: the step after the reload: %s", label, zinc_last_error(e));
}

/* Accumulation 2: the state goes away before a window's first micro-step, whose zinc_step is
 * counted while it is away (as DeepSpeed's step() between micro-batches); the zinc_step that
 * ends the window is refused until the reload, then runs. */
static void away_mid_window(run_ctx *c, zinc_engine_t *e, int rank, int np, const char *label)
{
    int first = c->accum * AWAY_AFTER;
    ZT_OK(zinc_states_offload(e, c->mask, 1, NULL));
    zinc_status s = toy_micro_step(e, rank, c->n, first, np, 0);
    if (s == ZINC_OK) s = zinc_step(e, NULL);
    ZT_CHECK(s == ZINC_OK, "%s: a micro-step and its zinc_step inside the window while away: %s",
             label, zinc_last_error(e));
    s = toy_micro_step(e, rank, c->n, first + 1, np, 0);
    ZT_CHECK(s == ZINC_OK, "%s: the window's last micro-step while away: %s", label,
             zinc_last_error(e));
    refused(e, zinc_step(e, NULL), "zinc_step", label);
    ZT_OK(zinc_states_reload(e));
    s = zinc_step(e, NULL);
    ZT_CHECK(s == ZINC_OK, "%s: the window's zinc_step after the reload: %s", label,
             zinc_last_error(e));
}

static void rank_fn(int rank, void *arg)
{
    run_ctx *c = arg;
    char label[200];
    snprintf(label, sizeof label, "%s rank %d", c->label, rank);
    int k = c->accum;               /* micro-steps per optimizer step */
    toy_run r = {.world = c->n, .stage = c->stage, .accum = k, .clip = 1.0,
                 .dtype = c->bf16 ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP32,
                 .zero_json = c->offload_cfg ? "\"offload_optimizer\": {\"device\": \"cpu\"}, " : NULL};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, c->world, rank, NULL, &e, &np);
    ZT_CHECK(s == ZINC_OK, "%s: engine: %s", label, zinc_last_error(e));
    if (s == ZINC_OK) {
        if (rank == 0) {
            c->nparams = np;
            for (int p = 0; p < np; p++) c->numel[p] = zinc_param_numel(e, p);
        }
        s = toy_steps(e, rank, c->n, 0, k * AWAY_AFTER, np);
        ZT_CHECK(s == ZINC_OK, "%s: the first steps: %s", label, zinc_last_error(e));
    }
    if (s == ZINC_OK && c->mask) {
        if (k == 1)
            away_and_back(c, e, rank, np, label);
        else
            away_mid_window(c, e, rank, np, label);
        s = toy_steps(e, rank, c->n, k * (AWAY_AFTER + 1), k * (STEPS - AWAY_AFTER - 1), np);
    } else if (s == ZINC_OK) {
        s = toy_steps(e, rank, c->n, k * AWAY_AFTER, k * (STEPS - AWAY_AFTER), np);
    }
    ZT_CHECK(s == ZINC_OK, "%s: the last steps: %s", label, zinc_last_error(e));
    for (int p = 0; s == ZINC_OK && p < np; p++) {
        int64_t n = zinc_param_numel(e, p);
        c->master[rank][p] = malloc((size_t)n * sizeof(float));
        c->m[rank][p] = malloc((size_t)n * sizeof(float));
        ZT_OK(zinc_param_get(e, p, c->master[rank][p]));
        ZT_OK(zinc_param_state_get(e, p, ZINC_STATE_EXP_AVG, c->m[rank][p]));
    }
    zinc_engine_destroy(e);
}

static void free_ctx(run_ctx *c)
{
    for (int r = 0; r < MAXR; r++)
        for (int p = 0; p < TOY_MAX_PARAMS; p++) {
            free(c->master[r][p]);
            free(c->m[r][p]);
        }
}

static void compare(int n, int stage, int bf16, unsigned mask, int offload_cfg, int accum)
{
    run_ctx ref = {.n = n, .stage = stage, .bf16 = bf16, .offload_cfg = offload_cfg,
                   .accum = accum};
    run_ctx away = ref;
    away.mask = mask;
    snprintf(away.label, sizeof away.label, "N=%d stage %d %s%s accumulation %d, %s away", n,
             stage, bf16 ? "bf16" : "fp32", offload_cfg ? " offload_optimizer" : "", accum,
             mask == all_states ? "master and moments" : "moments");
    snprintf(ref.label, sizeof ref.label, "N=%d stage %d %s accumulation %d (reference)", n,
             stage, bf16 ? "bf16" : "fp32", accum);
    zt_run_world(n, &ref.world, rank_fn, &ref);
    zt_run_world(n, &away.world, rank_fn, &away);
    int differ = 0;
    for (int r = 0; r < n; r++)
        for (int p = 0; p < ref.nparams; p++) {
            size_t bytes = (size_t)ref.numel[p] * sizeof(float);
            if (!ref.master[r][p] || !away.master[r][p] || !ref.m[r][p] || !away.m[r][p] ||
                memcmp(ref.master[r][p], away.master[r][p], bytes) ||
                memcmp(ref.m[r][p], away.m[r][p], bytes))
                differ++;
        }
    ZT_CHECK(ref.nparams > 0 && differ == 0, "%s: %d of %d parameters' master or exp_avg differ "
             "from the run that kept its state", away.label, differ, ref.nparams * n);
    free_ctx(&ref);
    free_ctx(&away);
}

static const char *bare_config =
    "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
    " \"zero_optimization\": {\"stage\": 3}}";

static void test_refusals(void)
{
    uint64_t moved = 7;
    ZT_CHECK(zinc_states_offload(NULL, all_states, 0, &moved) == ZINC_ERR_INVALID_ARG &&
                 zinc_states_reload(NULL) == ZINC_ERR_INVALID_ARG && !zinc_states_offloaded(NULL),
             "NULL engine");
    for (int frozen = 0; frozen <= 1; frozen++) {
        zinc_engine_options_t o = {.config_json = bare_config, .threads = 1};
        zinc_engine_t *e = NULL;
        ZT_OK(zinc_engine_create(&o, &e));
        if (!e) continue;
        zinc_status s = zinc_states_offload(e, all_states, 0, &moved);
        ZT_CHECK(s == ZINC_ERR_USAGE, "before zinc_finalize: %s", zinc_status_string(s));
        if (frozen) ZT_OK(zinc_engine_frozen(e));
        int g = 0, p = 0;
        int64_t shape[1] = {1000};
        ZT_OK(zinc_group_add(e, "g", &g));
        ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_BF16, &p));
        ZT_OK(zinc_finalize(e));
        if (frozen) {
            s = zinc_states_offload(e, all_states, 0, &moved);
            ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "frozen"),
                     "a frozen engine: %s: %s", zinc_status_string(s), zinc_last_error(e));
        } else {
            unsigned bad = all_states | 1u << ZINC_MEM_PARAM16;
            s = zinc_states_offload(e, bad, 0, &moved);
            ZT_CHECK(s == ZINC_ERR_INVALID_ARG && moved == 0 && !zinc_states_offloaded(e) &&
                         strstr(zinc_last_error(e), "torch views"),
                     "the working copy asked for: %s: %s", zinc_status_string(s),
                     zinc_last_error(e));
        }
        zinc_engine_destroy(e);
    }
}

int main(void)
{
    for (int n = 1; n <= 2; n++)
        for (int stage = 0; stage <= 3; stage++)
            for (int bf16 = 1; bf16 >= 0; bf16--) {
                compare(n, stage, bf16, all_states, 0, 1);
                compare(n, stage, bf16, moments, 0, 1);
            }
    for (int stage = 0; stage <= 3; stage++) compare(2, stage, 1, all_states, 0, 2);
    compare(1, 2, 1, all_states, 1, 1);
    compare(2, 3, 1, all_states, 1, 1);
    test_refusals();
    return zt_finish("engine_states_away");
}
