/*
 * cpu_device.c — the "cpu" device: the zdev vtable over host memory.
 *
 * Memory calls are calloc/memcpy. Kernel calls validate their arguments, then split the element
 * range into at most `threads` contiguous parts (multiples of 64 elements, so every part but the
 * last runs whole SIMD vectors and cache lines; grad_stats parts are whole ZK_STATS_BLOCK
 * blocks) and run them on the device's pool with the instruction set chosen at open time.
 * Element results do not depend on the split (elem.h), so the thread count never changes bits.
 *
 * A device is used by one thread at a time (one engine = one rank = one device).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu_isa.h"
#include "base/log.h"
#include "kernels/cpu/cpu.h"

/* Below this many elements per part, waking a thread costs more than the part takes. */
#define ZK_MIN_PART 16384
#define ZK_ALIGN_ELEMS 64

typedef struct zcpu {
    const zk_kernels *k;
    zk_pool *pool;
    int threads;
    double *sums;           /* [ZK_STATS_ROUND] per-block sums of grad_stats, one round's */
    /* The asynchronous copies not yet done (device.h: deferred to the wait that covers them;
     * in late mode, not yet waited for). Copy number k (from 1) is pending[k - done - 1]; a
     * fence's ticket is the count queued. */
    struct zk_pending_copy {
        void *dst;
        const void *src;
        size_t bytes;
        /* late mode only (late_perform and below) */
        int upload;             /* 1: host -> device; 0: device -> host */
        int state;              /* ZK_QUEUED, ZK_ON_DEVICE, ZK_LANDED */
        void *snap;             /* [bytes] a download's device source as read at its join,
                                   until it lands in host memory; NULL otherwise */
        uint64_t src_sum;       /* checksum the source must keep while the copy may read it */
        uint64_t dst_sum;       /* a download's: checksum its host destination must keep until
                                   the copy writes it */
    } *pending;
    size_t npending, cap_pending;
    size_t nperformed;      /* late mode: pending[0, nperformed) have their device side done */
    uint64_t queued, done;
    int copy_mode;          /* ZINC_CPU_ASYNC_COPY: ZK_COPY_DEFERRED, _EAGER or _LATE */
} zcpu;

enum { ZK_COPY_DEFERRED, ZK_COPY_EAGER, ZK_COPY_LATE };
/* A late-mode copy's progress: queued; its device side done (an upload's device destination
 * written, a download's device source read); a download's host destination written. */
enum { ZK_QUEUED, ZK_ON_DEVICE, ZK_LANDED };

static const zdev_iface_t cpu_iface;

static zcpu *ctx(zdev_t *d) { return d->ctx; }

/* ---- instruction sets ------------------------------------------------------------------------ */

int zk_cpu_has_isa(const char *isa)
{
    if (!strcmp(isa, "portable")) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               zisa_has_f16c();
    if (!strcmp(isa, "avx2")) return avx2;
    if (!strcmp(isa, "avx512"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    return 0;
}

const char *zk_cpu_best_isa(void)
{
    if (zk_cpu_has_isa("avx512")) return "avx512";
    if (zk_cpu_has_isa("avx2")) return "avx2";
    return "portable";
}

static const zk_kernels *kernels_of(const char *isa)
{
    if (!strcmp(isa, "avx512")) return &zk_kernels_avx512;
    if (!strcmp(isa, "avx2")) return &zk_kernels_avx2;
    if (!strcmp(isa, "portable")) return &zk_kernels_portable;
    return NULL;
}

/* ---- splitting a range over the pool --------------------------------------------------------- */

/* Cuts n > 0 items into parts of `chunk` items (a multiple of align, at least min_part) and returns
 * the number of parts, at most threads. */
static int split(size_t n, int threads, size_t align, size_t min_part, size_t *chunk)
{
    size_t per = (n + (size_t)threads - 1) / (size_t)threads;
    if (per < min_part) per = min_part;
    per = (per + align - 1) / align * align;
    *chunk = per;
    return (int)((n + per - 1) / per);
}

typedef struct zjob {
    const zk_kernels *k;
    size_t n, chunk;
    /* one kernel's arguments */
    const zk_adam_args *adam;
    zk_adam_consts consts;
    const void *src;
    void *dst;
    zinc_dtype dt, sdt;
    float scale;
    double *sums;
    size_t src_n;           /* grad_stats: elements (n counts blocks there) */
    size_t blk0;            /* grad_stats: first block of this round */
    const float *b, *c;
    uint64_t seed, *hsum;   /* checksum: first block's seed, one sum per part */
} zjob;

static void range(const zjob *j, int part, size_t *lo, size_t *hi)
{
    *lo = (size_t)part * j->chunk;
    *hi = *lo + j->chunk < j->n ? *lo + j->chunk : j->n;
    if (*lo > *hi) *lo = *hi;
}

static void run_adam(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    j->k->adam(j->adam, &j->consts, lo, hi);
}

static void run_cast(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    j->k->cast(j->dst, j->dt, j->src, j->sdt, j->scale, lo, hi);
}

static void run_accumulate(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    j->k->accumulate(j->dst, j->dt, j->src, j->sdt, lo, hi);
}

static void run_triad(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    j->k->triad(j->dst, j->b, j->c, j->scale, lo, hi);
}

#define ZK_SUM_BLOCK ((size_t)1 << 18) /* bytes per checksum block */

/* Here n counts ZK_SUM_BLOCK blocks of src (src_n bytes) and a part is a range of them. */
static void run_checksum(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    uint64_t h = 0;
    for (size_t b = lo; b < hi; b++) {
        size_t at = b * ZK_SUM_BLOCK, n = j->src_n - at < ZK_SUM_BLOCK ? j->src_n - at : ZK_SUM_BLOCK;
        h += j->k->block_hash((const char *)j->src + at, n, j->seed + b);
    }
    j->hsum[part] = h;
}

/* Here n counts blocks and a part is a range of blocks. */
static void run_stats(void *arg, int part)
{
    zjob *j = arg;
    size_t lo, hi;
    range(j, part, &lo, &hi);
    j->k->stats(j->src, j->dt, j->src_n, j->blk0 + lo, j->blk0 + hi, j->sums + lo);
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* calloc keeps large blocks as fresh zero pages (no memset pass over gigabytes); the pointer is
 * moved up to the next 64-byte boundary (at least 16 bytes above calloc's, which is 16-aligned)
 * and the original pointer and the size are stored in the 16 bytes just below it. The size is
 * what d->in_use counts, for zinc.device_memory_limit. */
static void *cpu_alloc(zdev_t *d, size_t bytes)
{
    if (bytes > SIZE_MAX - 128) return NULL;
    if (d->limit && (d->in_use > d->limit || bytes > d->limit - d->in_use)) {
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM,
                 "device memory limit: %zu bytes needed, %llu available (limit %llu, %llu in use)",
                 bytes, (unsigned long long)(d->in_use > d->limit ? 0 : d->limit - d->in_use),
                 (unsigned long long)d->limit, (unsigned long long)d->in_use);
        return NULL;
    }
    char *raw = calloc(1, bytes + 64);
    if (!raw) {
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM, "cpu alloc: %zu bytes: out of memory", bytes);
        return NULL;
    }
    uintptr_t a = ((uintptr_t)raw + 64) & ~(uintptr_t)63; /* >= 16 bytes above raw */
    ((void **)a)[-1] = raw;
    ((size_t *)a)[-2] = bytes;
    __atomic_add_fetch(&d->in_use, bytes, __ATOMIC_RELAXED); /* a comm may free on its thread */
    return (void *)a;
}

static void cpu_free(zdev_t *d, void *p)
{
    if (!p) return;
    __atomic_sub_fetch(&d->in_use, ((size_t *)p)[-2], __ATOMIC_RELAXED);
    free(((void **)p)[-1]);
}

static zinc_status cpu_memset0(zdev_t *d, void *p, size_t bytes)
{
    if (!p && bytes)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu memset0: NULL pointer");
    if (bytes) memset(p, 0, bytes);
    return ZINC_OK;
}

static zinc_status cpu_copy(zdev_t *d, void *dst, const void *src, size_t bytes)
{
    if ((!dst || !src) && bytes)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu copy: NULL pointer");
    if (bytes && dst != src) memmove(dst, src, bytes);
    return ZINC_OK;
}

/* A 64-bit checksum: each step is a bijection of the state for a given word, so any one changed
 * word changes the result; several changes collide with odds of about 2^-64. */
static uint64_t sum64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* Asynchronous copies (device.h): queued, then done in order by the first copy_wait or
 * copy_join that covers them. On the CPU a copy costs the same whenever it runs; deferring it
 * makes the caller's missing wait visible as stale data in the tests. A real device copies at
 * some moment between the two, so the other extreme is a mode too: with the environment
 * variable ZINC_CPU_ASYNC_COPY=eager the copy is done when queued, which shows a copy queued
 * before its source was final (the tests run the offload suite both ways).
 *
 * Both finish every copy at copy_join, which a GPU does not: there the join only makes the
 * compute stream wait, and the copy engine may still read an upload's host source and write a
 * download's host destination until the copy_wait that covers the copy. So a host access between
 * the join and that wait passes them both. ZINC_CPU_ASYNC_COPY=late moves the host side of each
 * copy to the wait and watches what the copy may still touch:
 *   - at the join, or at the covering wait if that comes first, the device side is done in
 *     queue order (the device work queued after the join runs at once on the cpu): an upload's
 *     device destination is written from its host source, a download's device source is read
 *     into a snapshot;
 *   - the snapshot lands in the download's host destination at the covering copy_wait and is
 *     freed, so a host read before that wait sees the old bytes. It lands earlier only where a
 *     GPU's in-order copy stream forces it: before a later upload reads that host memory;
 *   - an upload's host source is checksummed when queued and must keep its checksum until the
 *     covering wait; so must a download's host destination until it lands, and a download's
 *     device source until its join. A change made by the queue's own copies (landing or
 *     uploading in order) is allowed and re-checksummed; any other is a race on a GPU, and the
 *     device says which copy on stderr and aborts (late_check).
 * Abort rather than an error status: the race is a bug of the caller, not bad input, and the
 * mode exists only for the tests; a status could be dropped by a caller that rightly ignores
 * copy_wait's (teardown), or leave the other ranks of the test to a comm timeout. Memory: one
 * snapshot per download between its join and its landing. */
static zinc_status copy_async(zdev_t *d, void *dst, const void *src, size_t bytes, int upload)
{
    if ((!dst || !src) && bytes)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu async copy: NULL pointer");
    zcpu *c = ctx(d);
    if (c->copy_mode == ZK_COPY_EAGER) {
        if (bytes && dst != src) memmove(dst, src, bytes);
        c->queued++;
        c->done = c->queued;
        return ZINC_OK;
    }
    if (c->npending == c->cap_pending) {
        size_t cap = c->cap_pending ? 2 * c->cap_pending : 16;
        struct zk_pending_copy *p = realloc(c->pending, cap * sizeof *p);
        if (!p)
            return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM, "cpu async copy: out of memory "
                            "for the queue of %zu copies", cap);
        c->pending = p;
        c->cap_pending = cap;
    }
    struct zk_pending_copy q = {.dst = dst, .src = src, .bytes = bytes, .upload = upload};
    if (c->copy_mode == ZK_COPY_LATE) {
        q.src_sum = sum64(src, bytes);
        if (!upload) q.dst_sum = sum64(dst, bytes);
    }
    c->pending[c->npending++] = q;
    c->queued++;
    return ZINC_OK;
}

static zinc_status cpu_upload_async(zdev_t *d, void *dst_dev, const void *src_host, size_t bytes)
{
    return copy_async(d, dst_dev, src_host, bytes, 1);
}

static zinc_status cpu_download_async(zdev_t *d, void *dst_host, const void *src_dev, size_t bytes)
{
    return copy_async(d, dst_host, src_dev, bytes, 0);
}

static zinc_status cpu_copy_fence(zdev_t *d, uint64_t *ticket)
{
    *ticket = ctx(d)->queued;
    return ZINC_OK;
}

/* Does the queued copies up to `ticket` (in queue order), where a GPU's copy stream would have. */
static void run_copies(zcpu *c, uint64_t ticket)
{
    if (ticket <= c->done) return;
    size_t k = (size_t)(ticket - c->done);
    for (size_t i = 0; i < k; i++) {
        struct zk_pending_copy *q = &c->pending[i];
        if (q->bytes && q->dst != q->src) memmove(q->dst, q->src, q->bytes);
    }
    memmove(c->pending, c->pending + k, (c->npending - k) * sizeof *c->pending);
    c->npending -= k;
    c->done = ticket;
}

/* ---- ZINC_CPU_ASYNC_COPY=late ---------------------------------------------------------------- */

/* What copy q still watches, and the checksum it must keep: which 0 is its source (an upload's
 * until its wait, a download's until its device side is done), 1 a download's host destination
 * until the download lands. NULL when that watch is over. */
static const void *watched(struct zk_pending_copy *q, int which, uint64_t **sum)
{
    if (which == 0 && (q->upload || q->state == ZK_QUEUED)) {
        *sum = &q->src_sum;
        return q->src;
    }
    if (which == 1 && !q->upload && q->state != ZK_LANDED) {
        *sum = &q->dst_sum;
        return q->dst;
    }
    return NULL;
}

/* Aborts, naming the copy, if watch `which` of pending copy i no longer has its checksum. */
static void late_check(zdev_t *d, size_t i, int which, const char *where)
{
    zcpu *c = ctx(d);
    struct zk_pending_copy *q = &c->pending[i];
    uint64_t *sum;
    const void *p = watched(q, which, &sum);
    if (!p || sum64(p, q->bytes) == *sum) return;
    unsigned long long k = (unsigned long long)(c->done + i + 1);
    if (q->upload)
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INTERNAL, "upload_async #%llu (%zu bytes): its host "
                 "source %p changed before a copy_wait covered the copy (found at %s); on a GPU "
                 "the copy may read it until a copy_wait on a ticket >= %llu returns", k, q->bytes,
                 p, where, k);
    else if (which)
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INTERNAL, "download_async #%llu (%zu bytes): its "
                 "host destination %p was written before a copy_wait covered the copy (found at "
                 "%s); on a GPU the copy may write it until a copy_wait on a ticket >= %llu "
                 "returns", k, q->bytes, p, where, k);
    else
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INTERNAL, "download_async #%llu (%zu bytes): its "
                 "device source %p changed before a copy_join or copy_wait covered the copy "
                 "(found at %s); on a GPU device work queued between the copy and the join races "
                 "with it", k, q->bytes, p, where);
    fprintf(stderr, "zinc: cpu device, ZINC_CPU_ASYNC_COPY=late: copy race: %s\n", d->err);
    abort();
}

/* The copy engine writes n bytes at dst for pending copy `writer`: the other copies' watches
 * over that memory are checked before (nothing else may have changed it) and re-taken after
 * (the queue's own copies may). */
static void late_write(zdev_t *d, size_t writer, void *dst, const void *src, size_t n,
                       const char *where)
{
    zcpu *c = ctx(d);
    uint64_t *sum;
    const void *p;
    for (size_t i = 0; i < c->npending; i++)
        for (int w = 0; w < 2; w++)
            if (i != writer && (p = watched(&c->pending[i], w, &sum)) &&
                overlap(p, c->pending[i].bytes, dst, n))
                late_check(d, i, w, where);
    if (n && dst != src) memmove(dst, src, n);
    for (size_t i = 0; i < c->npending; i++)
        for (int w = 0; w < 2; w++)
            if (i != writer && (p = watched(&c->pending[i], w, &sum)) &&
                overlap(p, c->pending[i].bytes, dst, n))
                *sum = sum64(p, c->pending[i].bytes);
}

/* Download i, its device side done, lands in host memory. */
static void late_land(zdev_t *d, size_t i, const char *where)
{
    struct zk_pending_copy *q = &ctx(d)->pending[i];
    late_check(d, i, 1, where);
    late_write(d, i, q->dst, q->snap, q->bytes, where);
    free(q->snap);
    q->snap = NULL;
    q->state = ZK_LANDED;
}

/* Does the device side of pending copy i, every copy before it done already; with `land`, a
 * download lands at once (no snapshot). */
static zinc_status late_perform(zdev_t *d, size_t i, int land, const char *where)
{
    zcpu *c = ctx(d);
    struct zk_pending_copy *q = &c->pending[i];
    late_check(d, i, 0, where);
    if (q->upload) {
        /* In order on a GPU: the earlier downloads have landed before this copy reads. */
        int landing = 0;
        for (size_t j = 0; j < i && !landing; j++)
            landing = !c->pending[j].upload && c->pending[j].state == ZK_ON_DEVICE &&
                      overlap(c->pending[j].dst, c->pending[j].bytes, q->src, q->bytes);
        for (size_t j = 0; landing && j < i; j++)
            if (!c->pending[j].upload && c->pending[j].state == ZK_ON_DEVICE) late_land(d, j, where);
        late_write(d, i, q->dst, q->src, q->bytes, where);
        q->state = ZK_ON_DEVICE;
    } else if (land) {
        late_check(d, i, 1, where);
        q->state = ZK_ON_DEVICE;    /* the source watch ends: it is read now */
        late_write(d, i, q->dst, q->src, q->bytes, where);
        q->state = ZK_LANDED;
    } else {
        q->snap = malloc(q->bytes ? q->bytes : 1);
        if (!q->snap)
            return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM, "cpu copy_join "
                            "(ZINC_CPU_ASYNC_COPY=late): out of memory for the %zu-byte snapshot "
                            "of a download", q->bytes);
        if (q->bytes) memcpy(q->snap, q->src, q->bytes);
        q->state = ZK_ON_DEVICE;
    }
    return ZINC_OK;
}

static zinc_status late_join(zdev_t *d)
{
    zcpu *c = ctx(d);
    for (; c->nperformed < c->npending; c->nperformed++) {
        zinc_status s = late_perform(d, c->nperformed, 0, "copy_join");
        if (s != ZINC_OK) return s;
    }
    return ZINC_OK;
}

static void late_wait(zdev_t *d, uint64_t ticket)
{
    zcpu *c = ctx(d);
    if (ticket <= c->done) return;
    size_t k = (size_t)(ticket - c->done);
    char where[64];
    snprintf(where, sizeof where, "copy_wait(%llu)", (unsigned long long)ticket);
    for (size_t i = 0; i < k; i++) {
        struct zk_pending_copy *q = &c->pending[i];
        if (q->state == ZK_QUEUED) {
            late_perform(d, i, 1, where);    /* cannot fail: nothing to allocate */
            c->nperformed = i + 1;
        } else if (!q->upload && q->state == ZK_ON_DEVICE) {
            late_land(d, i, where);
        }
    }
    for (size_t i = 0; i < k; i++) late_check(d, i, 0, where);   /* the uploads' sources */
    memmove(c->pending, c->pending + k, (c->npending - k) * sizeof *c->pending);
    c->npending -= k;
    c->nperformed -= k;
    c->done = ticket;
}

static zinc_status cpu_copy_wait(zdev_t *d, uint64_t ticket)
{
    zcpu *c = ctx(d);
    if (ticket > c->queued)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu copy_wait: ticket %llu was never handed out (%llu copies queued)",
                        (unsigned long long)ticket, (unsigned long long)c->queued);
    if (ticket) d->host_waits++;   /* as the cuda backend counts: ticket 0 waits for nothing */
    if (c->copy_mode == ZK_COPY_LATE)
        late_wait(d, ticket);
    else
        run_copies(c, ticket);
    return ZINC_OK;
}

/* On a GPU the join is an event the compute stream waits for, no host wait: not counted. */
static zinc_status cpu_copy_join(zdev_t *d)
{
    if (ctx(d)->copy_mode == ZK_COPY_LATE) return late_join(d);
    run_copies(ctx(d), ctx(d)->queued);
    return ZINC_OK;
}

/* ---- kernels --------------------------------------------------------------------------------- */

static int dtype_ok(zinc_dtype dt)
{
    return dt == ZINC_DTYPE_FP32 || dt == ZINC_DTYPE_FP16 || dt == ZINC_DTYPE_BF16;
}

static zinc_status cpu_adam(zdev_t *d, const zk_adam_args *a)
{
    if (!a)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu adam_step: NULL arguments");
    if (!dtype_ok(a->grad_dtype) || (a->param_out && !dtype_ok(a->param_dtype)))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu adam_step: unknown dtype (grad %d, param %d)", (int)a->grad_dtype,
                        (int)a->param_dtype);
    if (!(a->bias_c1 > 0.0f) || !(a->bias_c2 > 0.0f))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu adam_step: bias corrections must be > 0 (got %g, %g); pass 1 and 1 "
                        "without bias correction", (double)a->bias_c1, (double)a->bias_c2);
    if (a->n == 0) return ZINC_OK;
    if (!a->master || !a->m || !a->v || !a->grad)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu adam_step: NULL master, m, v or grad for %zu elements", a->n);
    zcpu *c = ctx(d);
    zjob j = {.k = c->k, .n = a->n, .adam = a};
    zk_adam_prep(a, &j.consts);
    int parts = split(a->n, c->threads, ZK_ALIGN_ELEMS, ZK_MIN_PART, &j.chunk);
    zk_pool_run(c->pool, parts, run_adam, &j);
    return ZINC_OK;
}

static zinc_status cpu_grad_stats(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                  zk_grad_stats *out)
{
    if (!out || (!g && n) || !dtype_ok(dt))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu grad_stats: NULL buffer/result or unknown dtype %d", (int)dt);
    if (n == 0) {
        out->sumsq = 0.0;
        out->nonfinite = 0;
        return ZINC_OK;
    }
    zcpu *c = ctx(d);
    size_t nblocks = (n + ZK_STATS_BLOCK - 1) / ZK_STATS_BLOCK;
    /* Rounds of at most ZK_STATS_ROUND blocks through the fixed buffer (no allocation in a
     * step); the blocks' sums are added in block order across rounds, so the result is the
     * same as one pass, whatever the thread count. */
    double total = 0.0;
    for (size_t r0 = 0; r0 < nblocks; r0 += ZK_STATS_ROUND) {
        size_t nb = nblocks - r0 < ZK_STATS_ROUND ? nblocks - r0 : ZK_STATS_ROUND;
        zjob j = {.k = c->k, .n = nb, .src = g, .dt = dt, .sums = c->sums, .src_n = n, .blk0 = r0};
        int parts = split(nb, c->threads, 1, ZK_MIN_PART / ZK_STATS_BLOCK, &j.chunk);
        zk_pool_run(c->pool, parts, run_stats, &j);
        for (size_t b = 0; b < nb; b++) total += c->sums[b];
    }
    out->sumsq = total;
    out->nonfinite = !isfinite(total);
    return ZINC_OK;
}

static zinc_status cpu_grad_stats_acc(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                      double *out, int add)
{
    zk_grad_stats st;
    if (!out)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu grad_stats_acc: NULL out");
    zinc_status s = cpu_grad_stats(d, g, dt, n, &st);
    if (s != ZINC_OK) return s;
    double flag = st.nonfinite ? 1.0 : 0.0;
    out[0] = add ? out[0] + st.sumsq : st.sumsq;
    out[1] = add && out[1] > flag ? out[1] : flag;
    return ZINC_OK;
}

static zinc_status cpu_cast(zdev_t *d, void *dst, zinc_dtype dst_dt, const void *src,
                            zinc_dtype src_dt, size_t n, float scale)
{
    if ((!dst || !src) && n)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu cast: NULL buffer");
    if (!dtype_ok(dst_dt) || !dtype_ok(src_dt))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu cast: unknown dtype (%d -> %d)", (int)src_dt, (int)dst_dt);
    if (n == 0) return ZINC_OK;
    zcpu *c = ctx(d);
    zjob j = {.k = c->k, .n = n, .dst = dst, .dt = dst_dt, .src = src, .sdt = src_dt,
              .scale = scale};
    int parts = split(n, c->threads, ZK_ALIGN_ELEMS, ZK_MIN_PART, &j.chunk);
    zk_pool_run(c->pool, parts, run_cast, &j);
    return ZINC_OK;
}

static zinc_status cpu_accumulate(zdev_t *d, void *acc, zinc_dtype acc_dt, const void *x,
                                  zinc_dtype x_dt, size_t n)
{
    if ((!acc || !x) && n)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu accumulate: NULL buffer");
    if (!dtype_ok(acc_dt) || !dtype_ok(x_dt) || (acc_dt != x_dt && acc_dt != ZINC_DTYPE_FP32))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cpu accumulate: unsupported dtypes (%d += %d)", (int)acc_dt, (int)x_dt);
    if (n == 0) return ZINC_OK;
    zcpu *c = ctx(d);
    zjob j = {.k = c->k, .n = n, .dst = acc, .src = x, .dt = acc_dt, .sdt = x_dt};
    int parts = split(n, c->threads, ZK_ALIGN_ELEMS, ZK_MIN_PART, &j.chunk);
    zk_pool_run(c->pool, parts, run_accumulate, &j);
    return ZINC_OK;
}

zinc_status zk_cpu_triad(zdev_t *d, float *a, const float *b, const float *c, float s, size_t n)
{
    if (!d || d->iface != &cpu_iface)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zk_cpu_triad: not a cpu device");
    if ((!a || !b || !c) && n)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu triad: NULL buffer");
    if (n == 0) return ZINC_OK;
    zcpu *x = ctx(d);
    zjob j = {.k = x->k, .n = n, .dst = a, .b = b, .c = c, .scale = s};
    int parts = split(n, x->threads, ZK_ALIGN_ELEMS, ZK_MIN_PART, &j.chunk);
    zk_pool_run(x->pool, parts, run_triad, &j);
    return ZINC_OK;
}

zinc_status zk_cpu_checksum(zdev_t *d, const void *p, size_t bytes, uint64_t seed, uint64_t *out)
{
    if (!d || d->iface != &cpu_iface || !out)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zk_cpu_checksum: not a cpu device or no out");
    if (!p && bytes)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cpu checksum: NULL buffer");
    *out = seed;
    if (bytes == 0) return ZINC_OK;
    zcpu *x = ctx(d);
    enum { MAXPARTS = 256 };
    uint64_t sums[MAXPARTS];
    size_t blocks = (bytes + ZK_SUM_BLOCK - 1) / ZK_SUM_BLOCK;
    zjob j = {.k = x->k, .n = blocks, .src = p, .src_n = bytes, .seed = seed, .hsum = sums};
    int parts = split(blocks, x->threads < MAXPARTS ? x->threads : MAXPARTS, 1, 1, &j.chunk);
    zk_pool_run(x->pool, parts, run_checksum, &j);
    uint64_t h = seed;
    for (int i = 0; i < parts; i++) h += sums[i];
    *out = h;
    return ZINC_OK;
}

static void cpu_close(zdev_t *d)
{
    if (!d) return;
    zcpu *c = ctx(d);
    if (c) {
        zk_pool_destroy(c->pool);
        free(c->sums);
        for (size_t i = 0; i < c->npending; i++) free(c->pending[i].snap);   /* late mode */
        free(c->pending);
        free(c);
    }
    free(d);
}

/* upload and download are plain copies here; counted as the host waits they are on a GPU. */
static zinc_status cpu_upload(zdev_t *d, void *dst, const void *src, size_t bytes)
{
    d->host_waits++;
    return cpu_copy(d, dst, src, bytes);
}

static zinc_status cpu_download(zdev_t *d, void *dst, const void *src, size_t bytes)
{
    d->host_waits++;
    return cpu_copy(d, dst, src, bytes);
}

static const zdev_iface_t cpu_iface = {
    .name = "cpu",
    .counts_bytes = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .upload = cpu_upload,
    .download = cpu_download,
    .upload_async = cpu_upload_async,
    .download_async = cpu_download_async,
    .copy_fence = cpu_copy_fence,
    .copy_wait = cpu_copy_wait,
    .copy_join = cpu_copy_join,
    .adam_step = cpu_adam,
    .grad_stats = cpu_grad_stats,
    .grad_stats_acc = cpu_grad_stats_acc,
    .cast = cpu_cast,
    .accumulate = cpu_accumulate,
    .sync = NULL,
    .close = cpu_close,
};

/* ---- open ------------------------------------------------------------------------------------ */

zinc_status zk_cpu_open_isa(int threads, const char *isa, zdev_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cpu_open: out is NULL");
    *out = NULL;
    if (threads < 0)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cpu_open: threads = %d; use 0 for one per "
                           "online CPU or a positive count", threads);
    const char *from = "the argument";
    if (!isa) {
        isa = getenv("ZINC_CPU_ISA");
        from = "ZINC_CPU_ISA";
        if (!isa || !*isa) isa = zk_cpu_best_isa();
    }
    const zk_kernels *k = kernels_of(isa);
    if (!k)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cpu_open: unknown instruction set '%s' "
                           "(from %s); use portable, avx2 or avx512", isa, from);
    if (!zk_cpu_has_isa(isa))
        return zerr_thread(ZINC_ERR_UNSUPPORTED, "zdev_cpu_open: this CPU cannot run the '%s' "
                           "kernels (from %s; avx2 needs AVX2+FMA+F16C, avx512 needs AVX-512 "
                           "F/BW/VL/DQ); the best it runs is '%s'", isa, from,
                           zk_cpu_best_isa());
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n < 1024 ? n : 1024) : 1;
    }
    zdev_t *d = calloc(1, sizeof *d);
    zcpu *c = calloc(1, sizeof *c);
    if (!d || !c) goto nomem;
    c->k = k;
    c->threads = threads;
    /* The asynchronous copies' emulation (copy_async); a misspelt mode would
     * quietly test the default instead, so it is refused. */
    const char *mode = getenv("ZINC_CPU_ASYNC_COPY");
    if (!mode || !*mode || !strcmp(mode, "deferred")) c->copy_mode = ZK_COPY_DEFERRED;
    else if (!strcmp(mode, "eager")) c->copy_mode = ZK_COPY_EAGER;
    else if (!strcmp(mode, "late")) c->copy_mode = ZK_COPY_LATE;
    else {
        free(c);
        free(d);
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cpu_open: ZINC_CPU_ASYNC_COPY='%s' is not "
                           "a mode; use deferred (the default), eager or late", mode);
    }
    c->pool = zk_pool_create(threads);
    c->sums = malloc(ZK_STATS_ROUND * sizeof *c->sums);
    if (!c->pool || !c->sums) goto nomem;
    d->iface = &cpu_iface;
    d->ctx = c;
    *out = d;
    return ZINC_OK;
nomem:
    if (c && c->pool) zk_pool_destroy(c->pool);
    if (c) free(c->sums);
    free(c);
    free(d);
    return zerr_thread(ZINC_ERR_NOMEM, "zdev_cpu_open: could not allocate the device or start "
                       "%d threads", threads);
}

zinc_status zdev_cpu_open(int threads, zdev_t **out) { return zk_cpu_open_isa(threads, NULL, out); }

const char *zk_cpu_isa(const zdev_t *d)
{
    return d && d->iface == &cpu_iface ? ((const zcpu *)d->ctx)->k->isa : NULL;
}

int zk_cpu_threads(const zdev_t *d)
{
    return d && d->iface == &cpu_iface ? ((const zcpu *)d->ctx)->threads : 0;
}
