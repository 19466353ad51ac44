/*
 * test_abort_mpi.c — zinc_world_abort on an MPI world with two engines per process (two models,
 * as a GAN's generator and discriminator): each engine has its own duplicate of MPI_COMM_WORLD,
 * and a rank may be blocked in either. Run under mpirun with 2 or more ranks. Two rounds:
 *   1. both engines alive: rank 1 aborts; rank 0's step on each engine returns ZINC_ERR_ABORTED
 *      naming the reason, the older engine's first (before this, only the latest engine's comm
 *      carried the notice);
 *   2. the later engine destroyed before the abort: the older engine's step still returns
 *      ZINC_ERR_ABORTED (before this, the world had no comm left to send it through).
 * comm_timeout_s is 20 s, so a notice that never comes shows as ZINC_ERR_TIMEOUT, not a hang.
 * After the failure every rank reaches zinc_world_destroy in time, so MPI_Finalize ends the job
 * normally and the exit code is the checks'.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "toy.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 (and every rank but 1): one step on e must fail with the abort naming `why`. */
static void expect_aborted(zinc_engine_t *e, int rank, int world, int np, const char *what,
                           const char *why)
{
    double t0 = now_s();
    zinc_status s = toy_steps(e, rank, world, 2, 1, np);
    const char *msg = zinc_last_error(e);
    printf("abort_mpi: rank %d: %s: %s after %.1f s: %s\n", rank, what, zinc_status_string(s),
           now_s() - t0, msg);
    ZT_CHECK(s == ZINC_ERR_ABORTED && strstr(msg, why), "%s: %s: %s", what,
             zinc_status_string(s), msg);
}

int main(void)
{
    zinc_world_t *w = NULL;
    ZT_OK(zinc_world_create_mpi(&w));
    if (!w) return zt_finish("abort_mpi");
    int rank = zinc_world_rank(w), world = zinc_world_size(w);
    ZT_CHECK(world >= 2, "run under mpirun -np 2 or more (size %d)", world);
    if (world < 2) {
        zinc_world_destroy(w);
        return zt_finish("abort_mpi");
    }
    toy_run r = {.world = world, .stage = 2, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1};
    static const char *why[2] = {"rank 1 gave up with two engines alive",
                                 "rank 1 gave up after its second engine was gone"};
    for (int round = 0; round < 2; round++) {
        zinc_engine_t *older = NULL, *later = NULL;
        int np = 0;
        ZT_OK(toy_engine_on(&r, w, rank, NULL, &older, &np));
        ZT_OK(toy_engine_on(&r, w, rank, NULL, &later, &np));
        if (!older || !later) break;
        /* Both work before the abort (a step each, collective). */
        ZT_OK(toy_steps(older, rank, world, 1, 1, np));
        ZT_OK(toy_steps(later, rank, world, 1, 1, np));
        if (round == 1) {
            zinc_engine_destroy(later);
            later = NULL;
        }
        /* Rank 1 aborts only once rank 0 has finished those steps: an abort notice that comes
         * while a collective still completes fails it (rank 0 looks for notices first). */
        int go = 1;
        ZT_OK(zinc_world_broadcast(w, &go, sizeof go, 0));
        if (rank == 1) {
            zinc_world_abort(w, 1, why[round]);
        } else {
            expect_aborted(older, rank, world, np, round ? "the older engine, the later gone"
                                                         : "the older engine", why[round]);
            if (later) expect_aborted(later, rank, world, np, "the later engine", why[round]);
        }
        zinc_engine_destroy(later);
        zinc_engine_destroy(older);
    }
    int rc = zt_finish("abort_mpi");
    zinc_world_destroy(w);
    return rc;
}
