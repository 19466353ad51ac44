/*
 * test_mpi.c — the `mpi` comm backend, run as `mpirun -np 4 test_comm_mpi`: every collective
 * against the serial reference of comm_ref.h (the same bits the local backend gives), byte
 * counters, a reduction big enough to take several scratch rounds, then the failure paths:
 * a rank that skips a collective (the others get ZINC_ERR_TIMEOUT naming it), a rank that
 * aborts (the others get ZINC_ERR_ABORTED with its reason, promptly), and ranks out of step
 * (one in another collective at the same count: ZINC_ERR_MISMATCH everywhere, promptly, both
 * calls named; a rank merely late is not that). Every rank prints its own summary; mpirun fails
 * when any rank does.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_ref.h"
#include "shard/comm.h"
#include "testutil.h"

/* CLOCK_MONOTONIC in seconds: one clock for every process of the node. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return MPI_Wtime(); }

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void check_collectives(zcomm_t *c)
{
    static const zdt types[] = {ZDT_F32, ZDT_F16, ZDT_BF16, ZDT_F64};
    static const char *names[] = {"f32", "f16", "bf16", "f64"};
    for (int ti = 0; ti < 4; ti++)
        for (int sc = 0; sc < 2; sc++) {
            char tag[64];
            snprintf(tag, sizeof tag, "mpi size %d %s scale %s", c->size, names[ti],
                     sc ? "1/size" : "1");
            cref_suite(c, types[ti], sc ? 1.0f / (float)c->size : 1.0f, 3000 + (uint64_t)ti * 2 +
                                                                           (uint64_t)sc, tag);
        }
}

/* An all-reduce and a reduce-scatter of several MB: several rounds through the scratch. */
static void check_big(zcomm_t *c)
{
    const size_t n = ((size_t)5 << 20) / 4 + 17;   /* fp32 elements; not a multiple of size */
    float *buf = malloc(n * sizeof *buf), *ref = malloc(n * sizeof *ref);
    cref_fill(buf, ZDT_F32, n, 4242, c->rank);
    for (size_t i = 0; i < n; i++) cref_reduce_elem(ref, ZDT_F32, i, 4242, c->size, 0.25f, 0);
    double t0 = now_s();
    zinc_status s = zcomm_all_reduce(c, buf, n, ZDT_F32, 0.25f);
    double dt = now_s() - t0;
    ZT_CHECK(s == ZINC_OK, "rank %d: big all_reduce: %s", c->rank, c->err);
    size_t d = cref_first_diff(buf, ref, 0, n, ZDT_F32);
    ZT_CHECK(d == n, "rank %d: big all_reduce differs at %zu", c->rank, d);
    if (c->rank == 0)
        printf("mpi all_reduce of %.1f MB fp32 on %d ranks: %.1f ms\n", (double)n * 4e-6, c->size,
               dt * 1e3);

    size_t sl = ((size_t)3 << 20) / 2 + 5, m = sl * (size_t)c->size;   /* bf16 slices > chunk */
    uint16_t *b16 = malloc(m * 2), *r16 = malloc(m * 2);
    cref_fill(b16, ZDT_BF16, m, 99, c->rank);
    for (size_t i = (size_t)c->rank * sl; i < (size_t)(c->rank + 1) * sl; i++)
        cref_reduce_elem(r16, ZDT_BF16, i, 99, c->size, 1.0f, 0);
    s = zcomm_reduce_scatter(c, b16, m, ZDT_BF16, 1.0f);
    ZT_CHECK(s == ZINC_OK, "rank %d: big reduce_scatter: %s", c->rank, c->err);
    size_t lo = (size_t)c->rank * sl, hi = lo + sl;
    d = cref_first_diff(b16, r16, lo, hi, ZDT_BF16);
    ZT_CHECK(d == hi, "rank %d: big reduce_scatter differs at %zu", c->rank, d);
    free(buf);
    free(ref);
    free(b16);
    free(r16);
}

/* How late a wait may return and still pass: CI runs 4 ranks on 2 busy cores, where a rank can
 * be off a core for a second. The waits these bounds tell apart differ by far more (a 1 s
 * timeout from the 60 s one set before; an abort notice from a 30 s timeout). */
#define SLACK_S 5.0

/* 1 when `err`'s "rank(s) A, B, ..." list names `rank`. A rank that entered the all-reduce
 * over a second after the others (a busy core) is missing too and named beside the late one:
 * "rank(s) 2, 3" must pass for rank 3, where a search for "rank(s) 3" failed. */
static int names_rank(const char *err, int rank)
{
    const char *p = strstr(err, "rank(s)");
    if (!p) return 0;
    p += strlen("rank(s)");
    for (;;) {
        char *end = NULL;
        long r = strtol(p, &end, 10);
        if (end == p) return 0;
        if (r == rank) return 1;
        if (strncmp(end, ", ", 2) != 0) return 0;
        p = end + 2;
    }
}

/* The last rank never enters an all-reduce; the others must time out, naming it. */
static void check_timeout(void)
{
    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    /* every rank goes on only if every rank has its comm: the world barrier below would wait for
     * one that returned here */
    int have = c != NULL, all = 0;
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        zcomm_destroy(c);
        return;
    }
    const double timeout = 1.0;
    int last = c->size - 1;
    /* The late rank's own timeout is long, so that "fails at once" below cannot be its own. */
    zcomm_set_timeout(c, c->rank == last ? 30.0 : timeout);
    float buf[1000];
    cref_fill(buf, ZDT_F32, 1000, 1, c->rank);
    if (c->rank != last) {
        double t0 = now_s();
        zinc_status s = zcomm_all_reduce(c, buf, 1000, ZDT_F32, 1.0f);
        double dt = now_s() - t0;
        ZT_CHECK(s == ZINC_ERR_TIMEOUT, "rank %d: got %s: %s", c->rank, zinc_status_string(s),
                 c->err);
        /* (a rank that entered later may be released early by the first to time out) */
        ZT_CHECK(dt <= timeout + SLACK_S,
                 "rank %d: returned after %.2f s with a timeout of %g s", c->rank, dt, timeout);
        ZT_CHECK(names_rank(c->err, last) && strstr(c->err, "all_reduce"),
                 "rank %d: message should name rank %d and the call: %s", c->rank, last, c->err);
        ZT_CHECK(c->bytes[ZINC_COLL_ALL_REDUCE] == 0, "failed collectives are not counted");
        MPI_Barrier(MPI_COMM_WORLD);   /* tells the late rank that this one gave up */
    } else {
        /* late: once the others gave up (the world barrier, outside the comm under test, and
         * not a sleep, which a loaded machine can outlast), its next collective fails at once */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        zinc_status s = zcomm_reduce_scatter(c, buf, 1000 - 1000 % (size_t)c->size, ZDT_F32,
                                             1.0f);
        ZT_CHECK((s == ZINC_ERR_ABORTED || s == ZINC_ERR_TIMEOUT) && now_s() - t0 < SLACK_S,
                 "late rank: got %s after %.2f s: %s", zinc_status_string(s), now_s() - t0,
                 c->err);
    }
    zinc_status s = zcomm_barrier(c);
    ZT_CHECK(s == ZINC_ERR_ABORTED, "rank %d: a failed comm stays failed: %s", c->rank,
             zinc_status_string(s));
    zcomm_destroy(c);
}

/* The last rank aborts while the others wait in an all-gather and a reduce-scatter. */
static void check_abort(int use_gather)
{
    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    if (!c) return;
    zcomm_set_timeout(c, 30);   /* far above the prompt return checked below */
    int last = c->size - 1;
    size_t n = 4096 * (size_t)c->size;
    uint16_t *buf = calloc(n, 2);
    if (c->rank == last) {
        sleep_s(0.3);
        c->iface->abort(c, "test hook: simulated failure");
        zinc_status s = zcomm_barrier(c);
        ZT_CHECK(s == ZINC_ERR_ABORTED, "the aborting rank's own calls fail: %s",
                 zinc_status_string(s));
    } else {
        double t0 = now_s();
        zinc_status s = use_gather ? zcomm_all_gather(c, buf, n, ZDT_F16)
                                   : zcomm_reduce_scatter(c, buf, n, ZDT_F16, 1.0f);
        double dt = now_s() - t0;
        ZT_CHECK(s == ZINC_ERR_ABORTED, "rank %d: got %s: %s", c->rank, zinc_status_string(s),
                 c->err);
        ZT_CHECK(dt < 0.3 + SLACK_S, "rank %d: returned %.2f s after entering (abort at 0.3 s, "
                 "timeout 30 s)", c->rank, dt);
        char want[32];
        snprintf(want, sizeof want, "rank %d aborted", last);
        ZT_CHECK(strstr(c->err, "simulated failure") && strstr(c->err, want),
                 "rank %d: message should carry the reason: %s", c->rank, c->err);
    }
    free(buf);
    zcomm_destroy(c);
}

/* Ranks out of step: one rank in another collective at the same collective count, which MPI
 * cannot match, so that before the "where" notices every rank waited out the timeout (30 s
 * here), or, where both calls send point-to-point data, MPI truncated the message (COMM) or let
 * a shorter one into the sum. Now every rank fails with ZINC_ERR_MISMATCH within a second or so
 * of the stall, and the message names both calls. `odd` is the rank out of step; it makes
 * `kind`:
 *   0  a broadcast of 4000 bytes (as a load on one rank) while the others reduce-scatter;
 *   1  an all-reduce (point-to-point data too, tagged apart now) while they reduce-scatter;
 *   2  a broadcast of 64 bytes from itself as root, which may end at once (MPI sends so little
 *      eagerly), then a barrier: the others' notices name the count before the one it waits
 *      at, and its record of that count is compared. */
static void check_out_of_step(int kind, int odd)
{
    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    if (!c) return;
    zcomm_set_timeout(c, 30);
    size_t n = 1000 * (size_t)c->size;
    float *buf = calloc(n, sizeof *buf);
    ZT_OK(zcomm_barrier(c));          /* in step up to here */
    double t0 = now_s();
    zinc_status s;
    if (c->rank != odd)
        s = zcomm_reduce_scatter(c, buf, n, ZDT_F32, 1.0f);
    else if (kind == 0)
        s = zcomm_broadcast(c, buf, 4000, 0);
    else if (kind == 1)
        s = zcomm_all_reduce(c, buf, 8, ZDT_F32, 1.0f);
    else {
        s = zcomm_broadcast(c, buf, 64, odd);
        if (s == ZINC_OK) s = zcomm_barrier(c);
    }
    double dt = now_s() - t0;
    const char *odd_call = kind == 0 ? "broadcast of 4000 bytes" : kind == 1
                                     ? "all_reduce of 32 bytes" : "broadcast of 64 bytes";
    ZT_CHECK(s == ZINC_ERR_MISMATCH, "out of step (%d), rank %d: got %s: %s", kind, c->rank,
             zinc_status_string(s), c->err);
    ZT_CHECK(dt < 1.0 + SLACK_S, "out of step (%d), rank %d: returned after %.2f s (timeout "
             "30 s)", kind, c->rank, dt);
    ZT_CHECK(strstr(c->err, "out of step") && strstr(c->err, odd_call) &&
                 strstr(c->err, "reduce_scatter of"),
             "out of step (%d), rank %d: the message should name both calls: %s", kind, c->rank,
             c->err);
    free(buf);
    zcomm_destroy(c);
}

/* A rank merely late (past the stall that sends the "where" notices) is in step: the
 * collective completes with the right sums, and so does the next. */
static void check_late_in_step(void)
{
    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    if (!c) return;
    zcomm_set_timeout(c, 60);
    int last = c->size - 1;
    for (int round = 0; round < 2; round++) {
        float buf[64];
        for (int i = 0; i < 64; i++) buf[i] = (float)(c->rank + 1);
        if (c->rank == last && round == 0) sleep_s(2.5);
        zinc_status s = zcomm_all_reduce(c, buf, 64, ZDT_F32, 1.0f);
        float want = (float)(c->size * (c->size + 1) / 2);
        ZT_CHECK(s == ZINC_OK && buf[0] == want && buf[63] == want,
                 "rank %d, round %d: a late rank's all-reduce: %s, %g (want %g): %s", c->rank,
                 round, zinc_status_string(s), (double)buf[0], (double)want, c->err);
    }
    zcomm_destroy(c);
}

int main(void)
{
    int rank = 0, size = 1, we = 0;
    zinc_status s = zmpi_init(&rank, &size, &we);
    if (s != ZINC_OK) {
        fprintf(stderr, "zmpi_init: %s\n", zinc_last_error(NULL));
        return 1;
    }
    ZT_CHECK(we == 1, "zmpi_init reports that it initialised MPI");
    const char *v = zmpi_version();
    ZT_CHECK(v && strlen(v) > 0 && !strchr(v, '\n'), "zmpi_version: one line");
    if (rank == 0) printf("%s, %d ranks\n", v, size);

    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    if (c) {
        ZT_CHECK(c->rank == rank && c->size == size && c->timeout_s == 300.0 &&
                     strcmp(c->iface->name, "mpi") == 0,
                 "handle fields");
        zcomm_set_timeout(c, 60);
        check_collectives(c);
        check_big(c);
        zcomm_destroy(c);
    }
    /* zmpi_world_bcast (zinc_world_broadcast's MPI path): the last rank's bytes everywhere. */
    char boot[300];
    for (size_t i = 0; i < sizeof boot; i++) boot[i] = (char)(rank == size - 1 ? i * 7 : 0);
    ZT_OK(zmpi_world_bcast(boot, sizeof boot, size - 1));
    int same = 1;
    for (size_t i = 0; i < sizeof boot; i++) same &= boot[i] == (char)(i * 7);
    ZT_CHECK(same, "rank %d: zmpi_world_bcast did not give the root's bytes", rank);
    /* zmpi_world_barrier (zinc_world_barrier's): no rank leaves before the last arrives. The
     * last rank comes 0.2 s late; each rank's time of leaving is compared with the last one's
     * time of arriving, on the node's one monotonic clock (the ranks share it here), so the
     * check does not depend on when the others got there */
    if (rank == size - 1) sleep_s(0.2);
    double arrived = mono_s();
    ZT_OK(zmpi_world_barrier());
    double left = mono_s(), last = arrived;
    ZT_OK(zmpi_world_bcast(&last, sizeof last, size - 1));
    ZT_CHECK(left >= last, "rank %d: zmpi_world_barrier returned %.3f s before the last rank "
             "came", rank, last - left);
    if (size >= 2) {
        check_timeout();
        check_abort(1);
        check_abort(0);
        check_late_in_step();
        check_out_of_step(0, size - 1);
        check_out_of_step(1, 0);
        check_out_of_step(2, 0);
    }
    /* A clean end on every rank: agree on the failure count, then finalize. */
    int mine = zt_failures, total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total) fprintf(stderr, "%d checks failed over all ranks\n", total);
    char name[32];
    snprintf(name, sizeof name, "comm_mpi rank %d", rank);
    int rc = zt_finish(name);
    zmpi_finalize();
    return rc;
}
