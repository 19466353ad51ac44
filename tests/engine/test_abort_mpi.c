/*
 * test_abort_mpi.c — zinc_world_abort on an MPI world with two engines per process (two models,
 * as a GAN's generator and discriminator): each engine has its own duplicate of MPI_COMM_WORLD,
 * and a rank may be blocked in either. Run under mpirun with 2 or more ranks. Two rounds:
 *   1. both engines alive: rank 1 aborts; rank 0's step on each engine returns ZINC_ERR_ABORTED
 *      naming the reason, the older engine's first (before this, only the latest engine's comm
 *      carried the notice);
 *   2. the later engine destroyed before the abort: the older engine's step still returns
 *      ZINC_ERR_ABORTED (before this, the world had no comm left to send it through);
 *   3. the abort from a second thread while the first is inside a collective of the later
 *      engine: rank 0 steps the later engine on a thread (blocked: rank 1 steps the older one)
 *      and aborts from its main thread. Both ranks' steps return ZINC_ERR_ABORTED naming the
 *      reason, and no two threads of rank 0 were inside MPI at once (MPI_THREAD_SERIALIZED): the
 *      older engine's notice, whose comm no thread was in, went out from the stepping thread
 *      (before this, the aborting thread sent it beside the collective).
 * comm_timeout_s is 20 s, so a notice that never comes shows as ZINC_ERR_TIMEOUT, not a hang.
 * After the failure every rank reaches zinc_world_destroy in time, so MPI_Finalize ends the job
 * normally and the exit code is the checks'.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shard/comm.h"
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

typedef struct stepper {
    zinc_engine_t *e;
    int rank, world, np;
    const char *why;
} stepper;

static void *step_aborted(void *arg)
{
    stepper *t = arg;
    expect_aborted(t->e, t->rank, t->world, t->np, "the later engine, stepped on a thread", t->why);
    return NULL;
}

/* Round 3 (the comment at the top). */
static void abort_beside_collective(zinc_world_t *w, toy_run *r, int rank, int world)
{
    static const char why[] = "rank 0 gave up from a second thread";
    zinc_engine_t *older = NULL, *later = NULL;
    int np = 0;
    ZT_OK(toy_engine_on(r, w, rank, NULL, &older, &np));
    ZT_OK(toy_engine_on(r, w, rank, NULL, &later, &np));
    if (!older || !later) {
        zinc_engine_destroy(later);
        zinc_engine_destroy(older);
        return;
    }
    ZT_OK(toy_steps(older, rank, world, 1, 1, np));
    ZT_OK(toy_steps(later, rank, world, 1, 1, np));
    /* Rank 0 aborts only once rank 1 has finished those steps (rank 1 is the root: a root's
     * broadcast does not wait for the others, so rank 0 must be the one receiving). */
    int go = 1;
    ZT_OK(zinc_world_broadcast(w, &go, sizeof go, 1));
    if (rank != 0) {
        expect_aborted(older, rank, world, np, "the older engine, aborted by rank 0", why);
        ZT_OK(zinc_world_broadcast(w, &go, sizeof go, 1));
    } else {
        long before = 0;
        zmpi_thread_stats(NULL, &before);
        stepper t = {later, rank, world, np, why};
        pthread_t th;
        ZT_CHECK(pthread_create(&th, NULL, step_aborted, &t) == 0, "pthread_create");
        /* Abort only once the thread is inside the later engine's collective (it stays there:
         * rank 1 never joins it). */
        int inside = 0;
        for (double end = now_s() + 10; inside == 0 && now_s() < end;) {
            zmpi_thread_stats(&inside, NULL);
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        ZT_CHECK(inside == 1, "the stepping thread is inside a collective (%d comms are)", inside);
        zinc_world_abort(w, 0, why);
        pthread_join(th, NULL);
        long after = 0;
        zmpi_thread_stats(&inside, &after);
        ZT_CHECK(after == before, "%ld time(s) two threads were inside MPI at once", after - before);
        ZT_CHECK(inside == 0, "%d comms still inside a collective after the step returned", inside);
        /* Rank 1 has its notice before this rank touches the older engine again (which would
         * send a notice still waiting): rank 1 broadcasts once its step has returned. */
        ZT_OK(zinc_world_broadcast(w, &go, sizeof go, 1));
        /* Both engines' comms failed with the abort, the older one's too. */
        zinc_status s = toy_steps(older, rank, world, 1, 1, np);
        ZT_CHECK(s == ZINC_ERR_ABORTED && strstr(zinc_last_error(older), why),
                 "the older engine after the abort: %s: %s", zinc_status_string(s),
                 zinc_last_error(older));
    }
    zinc_engine_destroy(later);
    zinc_engine_destroy(older);
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
    abort_beside_collective(w, &r, rank, world);
    int rc = zt_finish("abort_mpi");
    zinc_world_destroy(w);
    return rc;
}
