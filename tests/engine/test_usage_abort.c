/*
 * test_usage_abort.c — a usage error inside the collective sequence (issue 12; docs/engine.md,
 * "Failure"): one rank of a local world calls zinc_step, zinc_grads_ready or zinc_gather in the
 * wrong state after zinc_finalize. It gets ZINC_ERR_USAGE; the others, waiting in a collective it
 * will not enter, must return ZINC_ERR_ABORTED naming that rank and the usage error within a few
 * seconds, although comm_timeout_s is 60 s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "toy.h"

#define WORLD 3
#define BAD_RANK 1

enum { BAD_STEP_EARLY, BAD_GRADS_TWICE, BAD_GATHER_TWICE };

typedef struct {
    zinc_world_t *world;
    int stage, mode;
    zinc_status st[WORLD];
    char msg[WORLD][1024];
    double seconds[WORLD];
} ua_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The misbehaving rank's micro-step: the mistake, then whatever else it would have done. */
static zinc_status bad_micro_step(zinc_engine_t *e, int mode, int np)
{
    zinc_step_info_t info;
    switch (mode) {
    case BAD_STEP_EARLY:   /* zinc_step with no group handed over */
        return zinc_step(e, &info);
    case BAD_GRADS_TWICE: {
        zinc_status s = toy_micro_step(e, BAD_RANK, WORLD, 0, np, 0);
        return s == ZINC_OK ? zinc_grads_ready(e, 0) : s;
    }
    default: {             /* stage 3: gather group 0 twice */
        zinc_status s = zinc_gather(e, 0);
        return s == ZINC_OK ? zinc_gather(e, 0) : s;
    }
    }
}

static void rank_fn(int rank, void *arg)
{
    ua_ctx *c = arg;
    toy_run r = {.world = WORLD, .stage = c->stage, .accum = 1, .steps = 1,
                 .dtype = ZINC_DTYPE_BF16, .clip = 1.0, .inject_inf_step = -1,
                 .persist_threshold = -1,   /* stage 3: every gather is an all-gather */
                 .extra_json = "\"zinc\": {\"comm_timeout_s\": 60},"};
    char *cfg = toy_config(&r);
    /* toy_config writes its own zinc section after extra_json: keep ours by dropping its. */
    char *theirs = strstr(cfg, ", \"zinc\": {\"comm_timeout_s\": 20}");
    if (theirs) strcpy(theirs, "}");
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, c->world, rank, cfg, &e, &np);
    free(cfg);
    double t0 = now_s();
    if (s == ZINC_OK) {
        if (rank == BAD_RANK) {
            s = bad_micro_step(e, c->mode, np);
        } else {
            zinc_step_info_t info;
            s = toy_micro_step(e, rank, WORLD, 0, np, 0);
            if (s == ZINC_OK) s = zinc_step(e, &info);
        }
    }
    c->seconds[rank] = now_s() - t0;
    c->st[rank] = s;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", e ? zinc_last_error(e) : zinc_last_error(NULL));
    zinc_engine_destroy(e);
}

static void scenario(const char *name, int stage, int mode)
{
    ua_ctx c = {.stage = stage, .mode = mode};
    zt_run_world(WORLD, &c.world, rank_fn, &c);
    for (int r = 0; r < WORLD; r++) {
        if (r == BAD_RANK) {
            ZT_CHECK(c.st[r] == ZINC_ERR_USAGE, "%s: rank %d: %s: %s", name, r,
                     zinc_status_string(c.st[r]), c.msg[r]);
            continue;
        }
        ZT_CHECK(c.st[r] == ZINC_ERR_ABORTED, "%s: rank %d returned %s: %s", name, r,
                 zinc_status_string(c.st[r]), c.msg[r]);
        ZT_CHECK(strstr(c.msg[r], "rank 1 aborted") && strstr(c.msg[r], "ZINC_ERR_USAGE"),
                 "%s: rank %d's message names rank %d and the usage error: %s", name, r, BAD_RANK,
                 c.msg[r]);
        ZT_CHECK(c.seconds[r] < 10.0, "%s: rank %d waited %.1f s (comm_timeout_s is 60)", name, r,
                 c.seconds[r]);
    }
}

int main(void)
{
    scenario("zinc_step before zinc_grads_ready, stage 1", 1, BAD_STEP_EARLY);
    scenario("zinc_step before zinc_grads_ready, stage 2", 2, BAD_STEP_EARLY);
    scenario("zinc_grads_ready twice, stage 2", 2, BAD_GRADS_TWICE);
    scenario("zinc_gather twice, stage 3", 3, BAD_GATHER_TWICE);
    return zt_finish("engine_usage_abort");
}
