/*
 * comm_local.c — the `local` comm backend: the ranks of a world are threads of one process and
 * share a zlocal_world_t.
 *
 * Every collective is a few rendezvous of all ranks around data phases in which ranks read each
 * other's buffers directly (no copies through scratch):
 *
 *   post      every rank publishes its buffer and the call's shape (checked to agree)
 *   reduce    rank r computes its own segment from all ranks' buffers, in rank order, into its
 *             own buffer (zreduce_sum; segment r of the others is read, never written)
 *   meet      (all-reduce only) the reduced segments are final
 *   copy      all-gather / all-reduce / broadcast: every rank copies the others' segments
 *   final     nobody returns, and so nobody reuses a buffer, while another rank may still read it
 *
 * Each element is reduced by one rank with the shared arithmetic of reduce.c in rank order, so
 * the result does not depend on thread timing and equals the `mpi` backend's bits.
 *
 * A rendezvous is generation-counted: the last rank to arrive advances `gen` and wakes the
 * others, who wait until `gen` moves. A waiter that passes its timeout aborts the world with a
 * message naming the ranks that did not arrive; every rank waiting in that same rendezvous then
 * returns ZINC_ERR_TIMEOUT, and every later collective ZINC_ERR_ABORTED. An aborted world stays
 * aborted: create a new one to go on.
 *
 * A rank that returns an error while another rank is still in a data phase (reading its buffer)
 * first waits for that phase to end (`busy` counts ranks in data phases; data phases never
 * block), so a caller may free its buffers as soon as a collective has returned, whatever it
 * returned.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "shard/comm.h"

enum { ZL_ALL_REDUCE, ZL_REDUCE_SCATTER, ZL_ALL_GATHER, ZL_BROADCAST, ZL_BARRIER };
static const char *const zl_names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                       "barrier"};

/* What a rank publishes when it enters a collective. */
typedef struct zl_post {
    void *buf;
    size_t n;           /* elements (bytes for broadcast) */
    int op;             /* ZL_* */
    int t;              /* zdt */
    int root;
    float scale;
    uint64_t seq;       /* this rank's collective count: ranks must agree */
} zl_post;

struct zlocal_world {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* rendezvous progress, abort, busy reaching 0 */
    uint64_t gen;               /* completed rendezvous */
    int arrived;                /* ranks waiting in rendezvous `gen` */
    unsigned char *here;        /* [size] who is waiting in rendezvous `gen` */
    zl_post *post;              /* [size] the current collective of every rank */
    int busy;                   /* ranks in a data phase (between two rendezvous) */
    int aborted;
    zinc_status abort_status;   /* TIMEOUT / MISMATCH: what the waiters of abort_gen return */
    uint64_t abort_gen;
    char why[400];              /* the reason of the abort */
    unsigned char *taken;       /* [size] a comm handle exists for the rank */
};

typedef struct zl_ctx {
    zlocal_world_t *w;
    int in_data;                /* this rank is counted in w->busy */
    uint64_t seq;
    const void **in;            /* [size] scratch for reduction operands */
} zl_ctx;

zinc_status zlocal_world_create(int size, zlocal_world_t **out)
{
    *out = NULL;
    if (size < 1)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zlocal_world_create: world size %d; it must be at least 1", size);
    zlocal_world_t *w = calloc(1, sizeof *w);
    if (!w) goto nomem;
    w->size = size;
    w->here = calloc((size_t)size, 1);
    w->taken = calloc((size_t)size, 1);
    w->post = calloc((size_t)size, sizeof *w->post);
    if (!w->here || !w->taken || !w->post) goto nomem;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    /* Deadlines on the monotonic clock, so that a wall-clock jump neither fires nor stalls them. */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return ZINC_OK;
nomem:
    if (w) {
        free(w->here);
        free(w->taken);
        free(w->post);
        free(w);
    }
    return zerr_thread(ZINC_ERR_NOMEM, "zlocal_world_create: out of memory for %d ranks", size);
}

void zlocal_world_destroy(zlocal_world_t *w)
{
    if (!w) return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->here);
    free(w->taken);
    free(w->post);
    free(w);
}

/* Marks the world failed; keeps the first reason. Caller holds w->mu. */
static void zl_abort_locked(zlocal_world_t *w, zinc_status s, uint64_t gen, const char *why)
{
    if (!w->aborted) {
        w->aborted = 1;
        w->abort_status = s;
        w->abort_gen = gen;
        snprintf(w->why, sizeof w->why, "%s", why);
    }
    pthread_cond_broadcast(&w->cv);
}

void zlocal_world_abort(zlocal_world_t *w, int rank, const char *why)
{
    if (!w) return;
    char msg[sizeof w->why];
    snprintf(msg, sizeof msg, "rank %d aborted: %s", rank, why ? why : "(no reason given)");
    pthread_mutex_lock(&w->mu);
    zl_abort_locked(w, ZINC_ERR_ABORTED, UINT64_MAX, msg);
    pthread_mutex_unlock(&w->mu);
}

static struct timespec zl_deadline(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (seconds > 1e9) seconds = 1e9;
    time_t whole = (time_t)seconds;
    long ns = ts.tv_nsec + (long)((seconds - (double)whole) * 1e9);
    ts.tv_sec += whole + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}

/* The error return of a rank in rendezvous `what`. Waits (bounded) until no rank is in a data
 * phase, since one may still be reading this rank's buffer. Caller holds w->mu; releases it. */
static zinc_status zl_fail_locked(zcomm_t *c, const char *what, zinc_status s)
{
    zl_ctx *x = c->ctx;
    zlocal_world_t *w = x->w;
    struct timespec dl = zl_deadline(c->timeout_s);
    while (w->busy > 0)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT) break;
    if (s == ZINC_ERR_ABORTED)
        zerr_fmt(c->err, sizeof c->err, s, "%s #%llu (rank %d): the world was aborted: %s", what,
                 (unsigned long long)x->seq, c->rank, w->why);
    else
        zerr_fmt(c->err, sizeof c->err, s, "%s #%llu (rank %d): %s", what,
                 (unsigned long long)x->seq, c->rank, w->why);
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* "call X(n=..)" of a post, for mismatch messages. */
static void zl_describe(char *buf, size_t len, const zl_post *p)
{
    snprintf(buf, len, "%s #%llu (n=%zu, dtype %d, root %d, scale %g)", zl_names[p->op],
             (unsigned long long)p->seq, p->n, p->t, p->root, (double)p->scale);
}

/* Checks that every rank entered the same collective; on a difference fills `why`. */
static int zl_agree(const zlocal_world_t *w, char *why, size_t len)
{
    const zl_post *a = &w->post[0];
    for (int q = 1; q < w->size; q++) {
        const zl_post *b = &w->post[q];
        if (a->op != b->op || a->n != b->n || a->t != b->t || a->root != b->root ||
            memcmp(&a->scale, &b->scale, sizeof a->scale) != 0 || a->seq != b->seq) {
            char da[160], db[160];
            zl_describe(da, sizeof da, a);
            zl_describe(db, sizeof db, b);
            snprintf(why, len, "ranks called different collectives: rank 0 %s, rank %d %s", da, q,
                     db);
            return 0;
        }
    }
    return 1;
}

/* One rendezvous of all ranks. `p`: this rank's post (the first rendezvous of a collective) or
 * NULL. `data_after`: a data phase follows (the same on every rank). */
static zinc_status zl_meet(zcomm_t *c, const char *what, const zl_post *p, int data_after)
{
    zl_ctx *x = c->ctx;
    zlocal_world_t *w = x->w;
    pthread_mutex_lock(&w->mu);
    if (x->in_data) {
        x->in_data = 0;
        if (--w->busy == 0) pthread_cond_broadcast(&w->cv);
    }
    if (w->aborted) return zl_fail_locked(c, what, ZINC_ERR_ABORTED);
    if (p) w->post[c->rank] = *p;
    uint64_t g = w->gen;
    w->here[c->rank] = 1;
    if (++w->arrived == w->size) {
        char why[sizeof w->why];
        if (p && !zl_agree(w, why, sizeof why)) {
            zl_abort_locked(w, ZINC_ERR_MISMATCH, g, why);
            return zl_fail_locked(c, what, ZINC_ERR_MISMATCH);
        }
        w->arrived = 0;
        memset(w->here, 0, (size_t)w->size);
        w->gen++;
        w->busy = data_after ? w->size : 0;
        x->in_data = data_after;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return ZINC_OK;
    }
    struct timespec dl = zl_deadline(c->timeout_s);
    while (w->gen == g && !w->aborted) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != ETIMEDOUT) continue;
        if (w->gen != g || w->aborted) break;
        char missing[256] = "";
        size_t off = 0;
        int nmissing = 0;
        for (int q = 0; q < w->size && off < sizeof missing - 16; q++)
            if (!w->here[q])
                off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d",
                                        nmissing++ ? ", " : "", q);
        char why[sizeof w->why];
        snprintf(why, sizeof why,
                 "%s #%llu timed out after %g s on rank %d: rank%s %s did not arrive "
                 "(%d of %d waiting)",
                 what, (unsigned long long)x->seq, c->timeout_s, c->rank, nmissing > 1 ? "s" : "",
                 missing, w->arrived, w->size);
        zlog(ZLOG_ERROR, "comm", c->rank, "%s", why);
        zl_abort_locked(w, ZINC_ERR_TIMEOUT, g, why);
    }
    if (w->gen != g) {   /* completed, even if an abort came right after */
        x->in_data = data_after;
        pthread_mutex_unlock(&w->mu);
        return ZINC_OK;
    }
    /* Aborted while waiting here. Who waited in the rendezvous that timed out (or disagreed)
     * reports that; who was aborted by another rank reports the abort. */
    zinc_status s = ZINC_ERR_ABORTED;
    if (w->abort_gen == g) s = w->abort_status;
    return zl_fail_locked(c, what, s);
}

static zinc_status zl_enter(zcomm_t *c, int op, void *buf, size_t n, zdt t, int root, float scale,
                            int data_after)
{
    zl_ctx *x = c->ctx;
    x->seq++;
    zl_post p = {buf, n, op, (int)t, root, scale, x->seq};
    return zl_meet(c, zl_names[op], &p, data_after);
}

/* Segment q of n elements split into `size` near-equal contiguous parts. */
static void zl_segment(size_t n, int size, int q, size_t *off, size_t *len)
{
    size_t base = n / (size_t)size, extra = n % (size_t)size, uq = (size_t)q;
    *off = uq * base + (uq < extra ? uq : extra);
    *len = base + (uq < extra ? 1 : 0);
}

/* Reduces elements [off, off+len) of every rank's buffer into this rank's buffer. */
static void zl_reduce_own(zcomm_t *c, size_t off, size_t len, zdt t, float scale)
{
    zl_ctx *x = c->ctx;
    size_t es = zdt_size(t);
    for (int q = 0; q < c->size; q++) x->in[q] = (const char *)x->w->post[q].buf + off * es;
    zreduce_sum((char *)x->w->post[c->rank].buf + off * es, x->in, c->size, len, t, scale);
}

/* Copies every other rank's segment q (as zl_segment, or equal slices) into this rank's buffer. */
static void zl_copy_others(zcomm_t *c, size_t n, zdt t, int equal)
{
    zl_ctx *x = c->ctx;
    size_t es = zdt_size(t);
    char *mine = x->w->post[c->rank].buf;
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank) continue;
        size_t off, len;
        if (equal) {
            len = n / (size_t)c->size;
            off = (size_t)q * len;
        } else {
            zl_segment(n, c->size, q, &off, &len);
        }
        if (len) memcpy(mine + off * es, (const char *)x->w->post[q].buf + off * es, len * es);
    }
}

static zinc_status zl_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zl_enter(c, ZL_ALL_REDUCE, buf, n, t, 0, scale, 1);
    if (s != ZINC_OK) return s;
    size_t off, len;
    zl_segment(n, c->size, c->rank, &off, &len);
    zl_reduce_own(c, off, len, t, scale);
    if ((s = zl_meet(c, "all_reduce", NULL, 1)) != ZINC_OK) return s;
    zl_copy_others(c, n, t, 0);
    return zl_meet(c, "all_reduce", NULL, 0);
}

static zinc_status zl_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zl_enter(c, ZL_REDUCE_SCATTER, buf, n, t, 0, scale, 1);
    if (s != ZINC_OK) return s;
    size_t slice = n / (size_t)c->size;
    zl_reduce_own(c, (size_t)c->rank * slice, slice, t, scale);
    return zl_meet(c, "reduce_scatter", NULL, 0);
}

static zinc_status zl_all_gather(zcomm_t *c, void *buf, size_t n, zdt t)
{
    zinc_status s = zl_enter(c, ZL_ALL_GATHER, buf, n, t, 0, 1.0f, 1);
    if (s != ZINC_OK) return s;
    zl_copy_others(c, n, t, 1);
    return zl_meet(c, "all_gather", NULL, 0);
}

static zinc_status zl_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    zinc_status s = zl_enter(c, ZL_BROADCAST, buf, bytes, ZDT_F32, root, 1.0f, 1);
    if (s != ZINC_OK) return s;
    zl_ctx *x = c->ctx;
    if (c->rank != root && bytes) memcpy(buf, x->w->post[root].buf, bytes);
    return zl_meet(c, "broadcast", NULL, 0);
}

static zinc_status zl_barrier(zcomm_t *c)
{
    return zl_enter(c, ZL_BARRIER, NULL, 0, ZDT_F32, 0, 1.0f, 0);
}

static void zl_abort(zcomm_t *c, const char *why)
{
    zl_ctx *x = c->ctx;
    zlocal_world_abort(x->w, c->rank, why);
}

static void zl_destroy(zcomm_t *c)
{
    zl_ctx *x = c->ctx;
    if (x) {
        pthread_mutex_lock(&x->w->mu);
        x->w->taken[c->rank] = 0;
        pthread_mutex_unlock(&x->w->mu);
        free(x->in);
        free(x);
    }
    free(c);
}

static const zcomm_iface_t zl_iface = {
    .name = "local",
    .all_reduce = zl_all_reduce,
    .reduce_scatter = zl_reduce_scatter,
    .all_gather = zl_all_gather,
    .broadcast = zl_broadcast,
    .barrier = zl_barrier,
    .abort = zl_abort,
    .destroy = zl_destroy,
};

zinc_status zcomm_local_create(zlocal_world_t *w, int rank, zcomm_t **out)
{
    *out = NULL;
    if (!w) return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_local_create: world is NULL");
    if (rank < 0 || rank >= w->size)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zcomm_local_create: rank %d is not in a world of %d ranks", rank,
                           w->size);
    zcomm_t *c = calloc(1, sizeof *c);
    zl_ctx *x = calloc(1, sizeof *x);
    const void **in = calloc((size_t)w->size, sizeof *in);
    if (!c || !x || !in) {
        free(c);
        free(x);
        free(in);
        return zerr_thread(ZINC_ERR_NOMEM, "zcomm_local_create: out of memory");
    }
    pthread_mutex_lock(&w->mu);
    int taken = w->taken[rank];
    w->taken[rank] = 1;
    pthread_mutex_unlock(&w->mu);
    if (taken) {
        free(c);
        free(x);
        free(in);
        return zerr_thread(ZINC_ERR_USAGE,
                           "zcomm_local_create: rank %d of this local world already has a comm; "
                           "each rank (thread) holds one engine at a time (for another engine "
                           "beside it, give that engine a world of its own)",
                           rank);
    }
    x->w = w;
    x->in = in;
    c->iface = &zl_iface;
    c->ctx = x;
    c->rank = rank;
    c->size = w->size;
    c->timeout_s = 300.0;
    *out = c;
    return ZINC_OK;
}
