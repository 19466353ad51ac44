/*
 * test_local.c — the `local` comm backend (ranks as threads): every collective against the
 * serial reference of comm_ref.h for world sizes 1, 2, 3, 4, 8 x dtypes x scales, byte counters,
 * timeout (a rank that never arrives), abort (a rank gives up), disagreeing calls, bad
 * arguments, and many back-to-back collectives with random delays.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_ref.h"
#include "kernels/device.h"
#include "shard/comm.h"
#include "testutil.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- the reference suite over sizes x dtypes x scales ------------------------------------- */

typedef struct {
    zlocal_world_t *w;
    zdt t;
    float scale;
    uint64_t seed;
    char tag[64];
} suite_arg;

static void suite_rank(int rank, void *p)
{
    suite_arg *a = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(a->w, rank, &c));
    if (!c) return;
    ZT_CHECK(c->rank == rank && c->timeout_s == 300.0, "rank %d: handle fields", rank);
    zcomm_set_timeout(c, 60);
    cref_suite(c, a->t, a->scale, a->seed, a->tag);
    zcomm_destroy(c);
}

static void check_suite(void)
{
    static const int sizes[] = {1, 2, 3, 4, 8};
    static const zdt types[] = {ZDT_F32, ZDT_F16, ZDT_BF16, ZDT_F64};
    static const char *names[] = {"f32", "f16", "bf16", "f64"};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t ti = 0; ti < 4; ti++)
            for (int sc = 0; sc < 2; sc++) {
                int size = sizes[si];
                suite_arg a = {NULL, types[ti], sc ? 1.0f / (float)size : 1.0f,
                               1000 + si * 10 + ti * 2 + (uint64_t)sc, ""};
                snprintf(a.tag, sizeof a.tag, "size %d %s scale %s", size, names[ti],
                         sc ? "1/size" : "1");
                ZT_OK(zlocal_world_create(size, &a.w));
                zt_run_ranks(size, suite_rank, &a);
                zlocal_world_destroy(a.w);
            }
}

/* The reference must be able to tell rank order from another order, or the suite proves
 * nothing about it. */
static void check_order_matters(void)
{
    float fwd[1000], rev[1000];
    int differ = 0;
    for (size_t i = 0; i < 1000; i++) {
        cref_reduce_elem(fwd, ZDT_F32, i, 77, 8, 1.0f, 0);
        cref_reduce_elem(rev, ZDT_F32, i, 77, 8, 1.0f, 1);
        differ += memcmp(&fwd[i], &rev[i], sizeof(float)) != 0;
    }
    ZT_CHECK(differ > 10, "summation order changes only %d of 1000 sums", differ);
}

/* ---- timeout ------------------------------------------------------------------------------ */

typedef struct {
    zlocal_world_t *w;
    int nmissing;           /* the last nmissing ranks never arrive */
    double timeout;
    _Atomic int done;       /* waiting ranks that have returned */
    double waited[8];       /* how long each waiting rank waited */
} timeout_arg;

static void timeout_rank(int rank, void *p)
{
    timeout_arg *a = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(a->w, rank, &c));
    if (!c) return;
    zcomm_set_timeout(c, a->timeout);
    int size = c->size;
    float buf[100] = {0};
    if (rank < size - a->nmissing) {
        double t0 = now_s();
        zinc_status s = zcomm_all_reduce(c, buf, 100, ZDT_F32, 1.0f);
        double dt = now_s() - t0;
        ZT_CHECK(s == ZINC_ERR_TIMEOUT, "rank %d: timeout case returned %s: %s", rank,
                 zinc_status_string(s), c->err);
        /* A rank that entered later may be released early by the first one to time out. */
        ZT_CHECK(dt <= a->timeout + 5.0, "rank %d: returned after %.3f s with a timeout of %.3f s",
                 rank, dt, a->timeout);
        a->waited[rank] = dt;
        char want[64];
        if (a->nmissing == 1) snprintf(want, sizeof want, "rank %d did not arrive", size - 1);
        else snprintf(want, sizeof want, "ranks %d, %d did not arrive", size - 2, size - 1);
        ZT_CHECK(strstr(c->err, want) && strstr(c->err, "all_reduce"),
                 "rank %d: message should name the collective and say '%s': %s", rank, want,
                 c->err);
        ZT_CHECK(c->bytes[ZINC_COLL_ALL_REDUCE] == 0, "a failed collective is not counted");
        atomic_fetch_add(&a->done, 1);
    } else {
        /* the late rank: once the others gave up, its next collective fails at once */
        while (atomic_load(&a->done) < size - a->nmissing) sleep_s(0.01);
        double t0 = now_s();
        zinc_status s = zcomm_barrier(c);
        ZT_CHECK(s == ZINC_ERR_ABORTED && now_s() - t0 < 5.0,
                 "late rank %d: got %s after %.3f s: %s", rank, zinc_status_string(s),
                 now_s() - t0, c->err);
        ZT_CHECK(strstr(c->err, "timed out"), "late rank %d: message says why: %s", rank, c->err);
    }
    zcomm_destroy(c);
}

static void check_timeout(int size, int nmissing)
{
    timeout_arg a = {NULL, nmissing, 0.3, 0, {0}};
    ZT_OK(zlocal_world_create(size, &a.w));
    zt_run_ranks(size, timeout_rank, &a);
    double longest = 0;
    for (int r = 0; r < size; r++)
        if (a.waited[r] > longest) longest = a.waited[r];
    ZT_CHECK(longest >= a.timeout * 0.99, "the first rank in waited %.3f s, less than the "
             "timeout of %.3f s", longest, a.timeout);
    zlocal_world_destroy(a.w);
}

/* ---- abort -------------------------------------------------------------------------------- */

typedef struct {
    zlocal_world_t *w;
    int early;              /* abort before the others enter, not while they wait */
    _Atomic int aborted;
    double t_abort;
} abort_arg;

static void abort_rank(int rank, void *p)
{
    abort_arg *a = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(a->w, rank, &c));
    if (!c) return;
    zcomm_set_timeout(c, 30);
    int size = c->size;
    uint16_t buf[64] = {0};
    ZT_OK(zcomm_all_gather(c, buf, (size_t)(64 / size) * (size_t)size, ZDT_F16));
    if (rank == size - 1) {
        if (!a->early) sleep_s(0.2);
        a->t_abort = now_s();
        c->iface->abort(c, "test hook: simulated failure in backward");
        atomic_store(&a->aborted, 1);
    } else {
        if (a->early)
            while (!atomic_load(&a->aborted)) sleep_s(0.005);
        zinc_status s = zcomm_all_gather(c, buf, (size_t)(64 / size) * (size_t)size, ZDT_F16);
        double lag = now_s() - a->t_abort;
        ZT_CHECK(s == ZINC_ERR_ABORTED, "rank %d: got %s: %s", rank, zinc_status_string(s),
                 c->err);
        ZT_CHECK(lag < 5.0, "rank %d: returned %.3f s after the abort (timeout 30 s)", rank, lag);
        char want[64];
        snprintf(want, sizeof want, "rank %d aborted", size - 1);
        ZT_CHECK(strstr(c->err, "simulated failure") && strstr(c->err, want),
                 "rank %d: message should carry the reason: %s", rank, c->err);
        ZT_CHECK(zcomm_barrier(c) == ZINC_ERR_ABORTED, "rank %d: the world stays aborted", rank);
    }
    zcomm_destroy(c);
}

static void check_abort(int size, int early)
{
    abort_arg a = {NULL, early, 0, 0};
    ZT_OK(zlocal_world_create(size, &a.w));
    zt_run_ranks(size, abort_rank, &a);
    zlocal_world_destroy(a.w);
}

/* ---- disagreeing calls and bad arguments --------------------------------------------------- */

static void mismatch_rank(int rank, void *p)
{
    zlocal_world_t *w = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(w, rank, &c));
    if (!c) return;
    zcomm_set_timeout(c, 10);
    float buf[12] = {0};
    zinc_status s = rank == 1 ? zcomm_reduce_scatter(c, buf, 12, ZDT_F32, 1.0f)
                              : zcomm_all_reduce(c, buf, 12, ZDT_F32, 1.0f);
    ZT_CHECK(s == ZINC_ERR_MISMATCH, "rank %d: got %s: %s", rank, zinc_status_string(s), c->err);
    ZT_CHECK(strstr(c->err, "reduce_scatter") && strstr(c->err, "all_reduce"),
             "rank %d: message names both calls: %s", rank, c->err);
    zcomm_destroy(c);
}

static void badarg_rank(int rank, void *p)
{
    zlocal_world_t *w = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(w, rank, &c));
    if (!c) return;
    zcomm_set_timeout(c, 10);
    float buf[7] = {0};
    double t0 = now_s();
    if (rank == 0) {
        zinc_status s = zcomm_reduce_scatter(c, buf, 7, ZDT_F32, 1.0f);
        ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(c->err, "equal slices"),
                 "n not a multiple of the size: %s: %s", zinc_status_string(s), c->err);
    } else {
        zinc_status s = zcomm_all_gather(c, buf, 6, ZDT_F32);
        ZT_CHECK(s == ZINC_ERR_ABORTED && now_s() - t0 < 2.0,
                 "the other rank learns of the bad call at once: %s: %s", zinc_status_string(s),
                 c->err);
    }
    zcomm_destroy(c);
}

static void check_errors(void)
{
    zlocal_world_t *w = NULL;
    ZT_CHECK(zlocal_world_create(0, &w) == ZINC_ERR_INVALID_ARG && !w, "size 0 is refused");
    ZT_OK(zlocal_world_create(2, &w));
    zcomm_t *c = NULL, *c2 = NULL;
    ZT_CHECK(zcomm_local_create(w, 2, &c) == ZINC_ERR_INVALID_ARG && !c, "rank out of range");
    ZT_OK(zcomm_local_create(w, 0, &c));
    ZT_CHECK(zcomm_local_create(w, 0, &c2) == ZINC_ERR_USAGE && !c2, "second handle of a rank");
    ZT_CHECK(strcmp(c->iface->name, "local") == 0, "backend name");
    zcomm_destroy(c);
    zcomm_destroy(NULL);
    zlocal_world_destroy(w);
    zlocal_world_destroy(NULL);

    ZT_OK(zlocal_world_create(4, &w));
    zt_run_ranks(4, mismatch_rank, w);
    zlocal_world_destroy(w);
    ZT_OK(zlocal_world_create(2, &w));
    zt_run_ranks(2, badarg_rank, w);
    zlocal_world_destroy(w);
}

/* ---- many collectives back to back with random delays --------------------------------------- */

typedef struct {
    zlocal_world_t *w;
    int iters;
} stress_arg;

static void stress_rank(int rank, void *p)
{
    stress_arg *a = p;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_local_create(a->w, rank, &c));
    if (!c) return;
    zcomm_set_timeout(c, 20);
    int size = c->size, bad = 0;
    zt_rng plan = {99};                       /* the same sequence of calls on every rank */
    zt_rng delay = {1234 + (uint64_t)rank};   /* different timing on every rank */
    float buf[8 * 64], ref[8 * 64];   /* up to 8 ranks x 64 */
    for (int it = 0; it < a->iters && !bad; it++) {
        int op = (int)(zt_next(&plan) % 5);
        size_t sl = 1 + zt_next(&plan) % 64, n = op == 0 ? sl * 3 + 1 : sl * (size_t)size;
        uint64_t seed = 5000 + (uint64_t)it;
        if (zt_next(&delay) % 3 == 0) sleep_s(1e-6 * (double)(zt_next(&delay) % 300));
        zinc_status s = ZINC_OK;
        size_t lo = 0, hi = n;
        cref_fill(buf, ZDT_F32, n, seed, rank);
        if (op == 0) {
            s = zcomm_all_reduce(c, buf, n, ZDT_F32, 0.5f);
            for (size_t i = 0; i < n; i++) cref_reduce_elem(ref, ZDT_F32, i, seed, size, 0.5f, 0);
        } else if (op == 1) {
            s = zcomm_reduce_scatter(c, buf, n, ZDT_F32, 1.0f);
            lo = (size_t)rank * sl;
            hi = lo + sl;
            for (size_t i = lo; i < hi; i++) cref_reduce_elem(ref, ZDT_F32, i, seed, size, 1, 0);
        } else if (op == 2) {
            for (size_t i = 0; i < n; i++)
                cref_st(ref, ZDT_F32, i, cref_value(seed, (int)(i / sl), i));
            s = zcomm_all_gather(c, buf, n, ZDT_F32);
        } else if (op == 4) {
            s = zcomm_barrier(c);
            hi = lo;
        } else {
            int root = (int)(zt_next(&plan) % (uint64_t)size);
            cref_fill(ref, ZDT_F32, n, seed, root);
            s = zcomm_broadcast(c, buf, n * sizeof(float), root);
        }
        if (s != ZINC_OK || cref_first_diff(buf, ref, lo, hi, ZDT_F32) != hi) bad = it + 1;
        if (zt_next(&delay) % 5 == 0) sleep_s(1e-6 * (double)(zt_next(&delay) % 200));
    }
    ZT_CHECK(bad == 0, "rank %d: stress iteration %d failed: %s", rank, bad - 1, c->err);
    zcomm_destroy(c);
}

static void check_stress(int size, int iters)
{
    stress_arg a = {NULL, iters};
    ZT_OK(zlocal_world_create(size, &a.w));
    double t0 = now_s();
    zt_run_ranks(size, stress_rank, &a);
    printf("stress: %d ranks, %d collectives in %.2f s\n", size, iters, now_s() - t0);
    zlocal_world_destroy(a.w);
}

/* ---- host collectives through a comm whose buffers are device memory ----------------------- */

/* The staged comm (ranks sharing one GPU) over local, on the cpu device, whose alloc counts bytes:
 * zcomm_host_all_reduce_f64 / zcomm_host_broadcast stage through device memory kept from call to
 * call. Once the first call has it, the device is capped at what is in use: later calls of that
 * size or less still run (an allocation per call would now fail), a larger one fails cleanly on
 * every rank, and destroy gives the memory back. */
static void host_stage_rank(int rank, void *p)
{
    zlocal_world_t *w = p;
    zdev_t *d = NULL;
    zcomm_t *inner = NULL, *c = NULL;
    ZT_OK(zdev_open("cpu", 1, 0, &d));
    if (!d) return;
    uint64_t before = d->in_use;
    ZT_OK(zcomm_local_create(w, rank, &inner));
    if (inner) ZT_OK(zcomm_staged_create(inner, d, &c));
    if (!c) {
        zdev_close(d);
        return;
    }
    zcomm_set_timeout(c, 60);
    double v[3] = {rank + 1.0, 10.0 * rank, -0.5};
    ZT_OK(zcomm_host_all_reduce_f64(c, v, 3));
    ZT_CHECK(v[0] == 3.0 && v[1] == 10.0 && v[2] == -1.0, "rank %d: all-reduce gave %g %g %g",
             rank, v[0], v[1], v[2]);
    ZT_OK(zdev_set_limit(d, d->in_use > before ? d->in_use : before + 1));  /* 0: no cap */
    for (int i = 0; i < 5; i++) {
        double x = rank ? 2.0 : 1.0;
        zinc_status s = zcomm_host_all_reduce_f64(c, &x, 1);
        ZT_CHECK(s == ZINC_OK && x == 3.0, "rank %d, call %d at the cap: status %d, sum %g (%s)",
                 rank, i, (int)s, x, c->err);
        char msg[32] = "";
        if (rank == 1) snprintf(msg, sizeof msg, "from rank 1, %d", i);
        s = zcomm_host_broadcast(c, msg, sizeof msg, 1);
        char want[32];
        snprintf(want, sizeof want, "from rank 1, %d", i);
        ZT_CHECK(s == ZINC_OK && !strcmp(msg, want), "rank %d, broadcast %d at the cap: status %d, "
                 "'%s' (%s)", rank, i, (int)s, msg, c->err);
    }
    double big[4096] = {0};
    zinc_status s = zcomm_host_all_reduce_f64(c, big, 4096);
    ZT_CHECK(s == ZINC_ERR_NOMEM && strstr(c->err, "stage"), "rank %d: 32 KiB past the cap: "
             "status %d, '%s'", rank, (int)s, c->err);
    ZT_OK(zdev_set_limit(d, 0));
    zcomm_destroy(c);
    ZT_CHECK(d->in_use == before, "rank %d: %llu bytes in use after destroy, %llu before", rank,
             (unsigned long long)d->in_use, (unsigned long long)before);
    zdev_close(d);
}

static void check_host_stage(void)
{
    zlocal_world_t *w = NULL;
    ZT_OK(zlocal_world_create(2, &w));
    if (!w) return;
    zt_run_ranks(2, host_stage_rank, w);
    zlocal_world_destroy(w);
}

int main(void)
{
    double t0 = now_s();
    check_order_matters();
    check_suite();
    printf("suite: %.2f s\n", now_s() - t0);
    check_errors();
    check_timeout(4, 1);
    check_timeout(4, 2);
    check_timeout(2, 1);
    check_abort(4, 0);
    check_abort(4, 1);
    check_abort(8, 0);
    check_stress(4, 400);
    check_stress(3, 300);
    check_host_stage();
    return zt_finish("comm_local");
}
