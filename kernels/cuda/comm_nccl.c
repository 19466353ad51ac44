/*
 * comm_nccl.c — the `nccl` comm backend (see nccl_comm.h for the contract).
 *
 * One communicator per process, created non-blocking (ncclConfig_t.blocking = 0) so that no NCCL
 * call can block without a deadline: a call that returns ncclInProgress is settled by polling
 * ncclCommGetAsyncError until the comm's timeout, then ncclCommAbort. Collectives run on the
 * comm's own stream; an event recorded on the device's compute stream orders them after the
 * producer, and an event recorded after them makes the compute stream wait before its next op.
 * The host never waits except in barrier and destroy, and the device's own host waits poll this
 * comm's health (zcu_set_watch), which is where a peer that vanished mid-step is noticed.
 * A world of one calls no NCCL collective outside groups: every collective is in place, so only
 * the scale runs, on the compute stream (solo()); ZINC_NCCL_SOLO=0 in the environment turns
 * that off, so that a one-GPU test runs the path larger worlds take.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "base/log.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda/zcuda.h"
#include "kernels/cuda/zdev_cuda.h"

_Static_assert(sizeof(ncclUniqueId) == ZBOOT_ID_BYTES, "ncclUniqueId is not ZBOOT_ID_BYTES long");

#define MAX_PENDING 256

typedef struct pending_scale {   /* a scale multiply deferred to the end of a group */
    void *buf;
    size_t n;
    zdt t;
    float scale;
} pending_scale;

typedef struct znccl {
    ncclComm_t comm;            /* NULL after an abort */
    zdev_t *dev;
    zcuda *cu;
    cudaStream_t stream;        /* the comm stream */
    cudaEvent_t ready, done;    /* compute -> comm, comm -> compute */
    float *one;                 /* device [1]: barrier payload */
    int aborted;
    zinc_status abort_status;
    char why[512];
    int in_group;
    int nccl_at_one;            /* ZINC_NCCL_SOLO=0 (tests): a world of one calls NCCL */
    int npending;
    pending_scale pending[MAX_PENDING];
} znccl;

static const zcomm_iface_t nccl_iface;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Marks the comm failed and tears the communicator down; keeps the first reason. */
static void fail_world(znccl *x, zinc_status s, const char *why)
{
    if (!x->aborted) {
        x->aborted = 1;
        x->abort_status = s;
        snprintf(x->why, sizeof x->why, "%s", why);
    }
    if (x->comm) {
        ncclCommAbort(x->comm);
        x->comm = NULL;
    }
}

static zinc_status record_fail(zcomm_t *c, zinc_status s)
{
    fail_world(c->ctx, s, c->err);
    return s;
}

#define NCCL_TRY(c, call)                                                                       \
    do {                                                                                        \
        ncclResult_t zn_r_ = (call);                                                            \
        zinc_status zn_s_ = settle((c), zn_r_, #call, __FILE__, __LINE__);                      \
        if (zn_s_ != ZINC_OK) return zn_s_;                                                     \
    } while (0)
#define CUDA_TRY(c, call)                                                                       \
    do {                                                                                        \
        cudaError_t zn_e_ = (call);                                                             \
        if (zn_e_ != cudaSuccess)                                                               \
            return record_fail((c), zcu_fail_cuda((c)->err, sizeof (c)->err, (int)zn_e_, #call,  \
                                                  __FILE__, __LINE__));                         \
    } while (0)

/* Turns an NCCL return into a status; ncclInProgress (non-blocking comm) is polled until the
 * call completed or the timeout passed. Any failure aborts the communicator. */
static zinc_status settle(zcomm_t *c, ncclResult_t r, const char *call, const char *file, int line)
{
    znccl *x = c->ctx;
    if (r == ncclInProgress) {
        double deadline = now_s() + c->timeout_s;
        long ns = 1000;
        for (;;) {
            if (ncclCommGetAsyncError(x->comm, &r) != ncclSuccess) break;
            if (r != ncclInProgress) break;
            if (now_s() > deadline) {
                zerr_fmt(c->err, sizeof c->err, ZINC_ERR_TIMEOUT,
                         "NCCL: %s (rank %d of %d) did not complete within %.0f s; a rank is "
                         "missing or stuck (the communicator was aborted)", call, c->rank,
                         c->size, c->timeout_s);
                return record_fail(c, ZINC_ERR_TIMEOUT);
            }
            struct timespec ts = {0, ns};
            nanosleep(&ts, NULL);
            if (ns < 1000000) ns *= 2;
        }
    }
    if (r == ncclSuccess) return ZINC_OK;
    return record_fail(c, zcu_fail_nccl(c->err, sizeof c->err, (int)r, call, file, line));
}

/* The device's host waits call this: a failed comm or a wait past the timeout ends the wait. */
static zinc_status watch(void *arg, double waited_s, char *err, size_t n)
{
    zcomm_t *c = arg;
    znccl *x = c->ctx;
    /* After an abort NCCL's kernels end, so the stream drains: only the timeout still applies. */
    ncclResult_t r = ncclSuccess;
    if (!x->aborted && x->comm && ncclCommGetAsyncError(x->comm, &r) == ncclSuccess &&
        r != ncclSuccess && r != ncclInProgress) {
        zinc_status s = zcu_fail_nccl(err, n, (int)r, "an asynchronous NCCL operation", __FILE__, __LINE__);
        fail_world(x, s, err);
        return s;
    }
    if (waited_s > c->timeout_s) {
        zinc_status s = zerr_fmt(err, n, ZINC_ERR_TIMEOUT,
                                 "waiting for the GPU (rank %d of %d): no progress for %.0f s; a "
                                 "collective is waiting for a rank that is gone or stuck (the "
                                 "NCCL communicator was aborted)", c->rank, c->size, waited_s);
        fail_world(x, s, err);
        return s;
    }
    return ZINC_OK;
}

static ncclDataType_t nccl_type(zdt t)
{
    switch (t) {
    case ZDT_F16: return ncclFloat16;
    case ZDT_BF16: return ncclBfloat16;
    case ZDT_F64: return ncclFloat64;
    default: return ncclFloat32;
    }
}

/* A collective on a world that failed earlier is refused; otherwise the device is made current. */
static zinc_status enter(zcomm_t *c, const char *what)
{
    znccl *x = c->ctx;
    if (x->aborted)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_ABORTED,
                        "%s (rank %d): the NCCL world was aborted earlier: %s", what, c->rank, x->why);
    CUDA_TRY(c, cudaSetDevice(x->cu->device));
    return ZINC_OK;
}

/* Entry of every collective: refuses on a failed world, orders after the compute stream. */
static zinc_status begin(zcomm_t *c, const char *what)
{
    znccl *x = c->ctx;
    zinc_status s = enter(c, what);
    if (s != ZINC_OK) return s;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(x->comm, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
        return record_fail(c, zcu_fail_nccl(c->err, sizeof c->err, (int)r, what, __FILE__, __LINE__));
    if (!x->in_group) {
        CUDA_TRY(c, cudaEventRecord(x->ready, x->cu->stream));
        CUDA_TRY(c, cudaStreamWaitEvent(x->stream, x->ready, 0));
    }
    return ZINC_OK;
}

/* The scale of a collective's result, on stream `st`. */
static zinc_status scale_on(zcomm_t *c, void *buf, size_t n, zdt t, float scale, cudaStream_t st)
{
    znccl *x = c->ctx;
    int cap = x->cu->sm_count * 8;
    if (t == ZDT_F64) {
        CUDA_TRY(c, zcu_scale_f64_launch(buf, n, (double)scale, cap, st));
    } else {
        const void *ptrs[1] = {buf};
        size_t sizes[1] = {zdt_size(t)};
        CUDA_TRY(c, zcu_cast_launch(buf, (int)t, buf, (int)t, n, scale, zcu_vec_head(ptrs, sizes, 1),
                                    cap, st));
    }
    return ZINC_OK;
}

static zinc_status scale_now(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    return scale_on(c, buf, n, t, scale, ((znccl *)c->ctx)->stream);
}

/* A world of one, outside a group: every collective here is in place, so NCCL would move
 * nothing; only the scale is work. It is queued on the compute stream itself, without the NCCL
 * call and the two stream hops around it (an event each way), which a single-GPU run would
 * otherwise pay for every stage-3 gather and every reduce. Bitwise the same: NCCL's sum over one
 * rank is the input, and the scale is the same kernel. */
static int alone(const zcomm_t *c)
{
    const znccl *x = c->ctx;
    return c->size == 1 && !x->in_group && !x->nccl_at_one;
}

static zinc_status solo(zcomm_t *c, const char *what, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = enter(c, what);
    if (s != ZINC_OK) return s;
    znccl *x = c->ctx;
    return scale != 1.0f && n > 0 ? scale_on(c, buf, n, t, scale, x->cu->stream) : ZINC_OK;
}

/* After the NCCL call: the scale (now, or at the group's end), then the compute stream waits. */
static zinc_status end(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    znccl *x = c->ctx;
    if (scale != 1.0f && n > 0) {
        if (x->in_group) {
            if (x->npending == MAX_PENDING)
                return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                                "nccl group: more than %d scaled collectives in one group; end "
                                "the group more often", MAX_PENDING);
            x->pending[x->npending++] = (pending_scale){buf, n, t, scale};
        } else {
            zinc_status s = scale_now(c, buf, n, t, scale);
            if (s) return s;
        }
    }
    if (!x->in_group) {
        CUDA_TRY(c, cudaEventRecord(x->done, x->stream));
        CUDA_TRY(c, cudaStreamWaitEvent(x->cu->stream, x->done, 0));
    }
    return ZINC_OK;
}

static zinc_status nc_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    znccl *x = c->ctx;
    if (alone(c)) return solo(c, "all_reduce", buf, n, t, scale);
    zinc_status s = begin(c, "all_reduce");
    if (s) return s;
    if (n) NCCL_TRY(c, ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, x->comm, x->stream));
    return end(c, buf, n, t, scale);
}

static zinc_status nc_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    znccl *x = c->ctx;
    if (alone(c)) return solo(c, "reduce_scatter", buf, n, t, scale);
    zinc_status s = begin(c, "reduce_scatter");
    if (s) return s;
    size_t slice = n / (size_t)c->size;
    char *own = (char *)buf + (size_t)c->rank * slice * zdt_size(t);
    /* In place: NCCL's rule is recvbuff == sendbuff + rank * recvcount. */
    if (slice) NCCL_TRY(c, ncclReduceScatter(buf, own, slice, nccl_type(t), ncclSum, x->comm, x->stream));
    return end(c, own, slice, t, scale);
}

static zinc_status nc_all_gather(zcomm_t *c, void *buf, size_t n, zdt t)
{
    znccl *x = c->ctx;
    if (alone(c)) return solo(c, "all_gather", buf, 0, t, 1.0f);
    zinc_status s = begin(c, "all_gather");
    if (s) return s;
    size_t slice = n / (size_t)c->size;
    char *own = (char *)buf + (size_t)c->rank * slice * zdt_size(t);
    /* In place: sendbuff == recvbuff + rank * sendcount. */
    if (slice) NCCL_TRY(c, ncclAllGather(own, buf, slice, nccl_type(t), x->comm, x->stream));
    return end(c, buf, 0, t, 1.0f);
}

static zinc_status nc_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    znccl *x = c->ctx;
    if (alone(c)) return solo(c, "broadcast", buf, 0, ZDT_F32, 1.0f);
    zinc_status s = begin(c, "broadcast");
    if (s) return s;
    if (bytes) NCCL_TRY(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, x->comm, x->stream));
    return end(c, buf, 0, ZDT_F32, 1.0f);
}

static zinc_status nc_barrier(zcomm_t *c)
{
    znccl *x = c->ctx;
    if (x->in_group)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_USAGE, "barrier inside an nccl group");
    zinc_status s = begin(c, "barrier");
    if (s) return s;
    NCCL_TRY(c, ncclAllReduce(x->one, x->one, 1, ncclFloat32, ncclSum, x->comm, x->stream));
    if ((s = end(c, x->one, 0, ZDT_F32, 1.0f))) return s;
    return zcu_wait_stream(x->cu, x->stream, c->err, sizeof c->err);
}

static void nc_abort(zcomm_t *c, const char *why)
{
    char msg[400];
    snprintf(msg, sizeof msg, "rank %d aborted: %s", c->rank, why ? why : "(no reason given)");
    fail_world(c->ctx, ZINC_ERR_ABORTED, msg);
}

static void nc_destroy(zcomm_t *c)
{
    if (!c) return;
    znccl *x = c->ctx;
    if (x) {
        if (x->cu && cudaSetDevice(x->cu->device) == cudaSuccess) {
            if (x->comm && !x->aborted) {
                /* Drain, then let NCCL finish its own work; any trouble ends in an abort. */
                zinc_status s = x->stream ? zcu_wait_stream(x->cu, x->stream, c->err, sizeof c->err)
                                          : ZINC_OK;
                if (s == ZINC_OK) s = settle(c, ncclCommFinalize(x->comm), "ncclCommFinalize", __FILE__, __LINE__);
                if (s == ZINC_OK && x->comm) ncclCommDestroy(x->comm);
                else if (x->comm) ncclCommAbort(x->comm);
                x->comm = NULL;
            } else if (x->comm) {
                ncclCommAbort(x->comm);
                x->comm = NULL;
            }
            if (x->stream) cudaStreamSynchronize(x->stream);
            if (x->ready) cudaEventDestroy(x->ready);
            if (x->done) cudaEventDestroy(x->done);
            if (x->one) cudaFree(x->one);
            if (x->stream) cudaStreamDestroy(x->stream);
        }
        if (x->dev && x->cu && x->cu->watch_arg == c) zcu_set_watch(x->dev, NULL, NULL);
        zdev_unuse(x->dev);
        free(x);
    }
    free(c);
}

static const zcomm_iface_t nccl_iface = {
    .name = "nccl",
    .all_reduce = nc_all_reduce,
    .reduce_scatter = nc_reduce_scatter,
    .all_gather = nc_all_gather,
    .broadcast = nc_broadcast,
    .barrier = nc_barrier,
    .abort = nc_abort,
    .destroy = nc_destroy,
};

zinc_status zcomm_nccl_group_begin(zcomm_t *c)
{
    if (!c || c->iface != &nccl_iface)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_group_begin: not an nccl comm");
    znccl *x = c->ctx;
    if (x->in_group)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_USAGE, "nccl group: already in a group");
    zinc_status s = begin(c, "group");
    if (s) return s;
    NCCL_TRY(c, ncclGroupStart());
    x->in_group = 1;
    x->npending = 0;
    return ZINC_OK;
}

zinc_status zcomm_nccl_group_end(zcomm_t *c)
{
    if (!c || c->iface != &nccl_iface)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_group_end: not an nccl comm");
    znccl *x = c->ctx;
    if (!x->in_group)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_USAGE, "nccl group: end without begin");
    x->in_group = 0;
    NCCL_TRY(c, ncclGroupEnd());
    for (int i = 0; i < x->npending; i++) {
        zinc_status s = scale_now(c, x->pending[i].buf, x->pending[i].n, x->pending[i].t,
                                  x->pending[i].scale);
        if (s) return s;
    }
    x->npending = 0;
    return end(c, NULL, 0, ZDT_F32, 1.0f);
}

zinc_status zcomm_nccl_unique_id(unsigned char id[ZBOOT_ID_BYTES])
{
    ncclUniqueId u;
    char err[512];
    int r = (int)ncclGetUniqueId(&u);
    if (r != (int)ncclSuccess)
        return zerr_thread(zcu_fail_nccl(err, sizeof err, r, "ncclGetUniqueId", __FILE__, __LINE__),
                           "%s", err);
    memcpy(id, &u, ZBOOT_ID_BYTES);
    return ZINC_OK;
}

zinc_status zcomm_nccl_create(zdev_t *dev, int rank, int size,
                              const unsigned char id[ZBOOT_ID_BYTES], double timeout_s,
                              zcomm_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_create: out is NULL");
    *out = NULL;
    zcuda *cu = zcu_ctx(dev);
    if (!cu) return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_create: the device is not a CUDA device");
    if (size < 1 || rank < 0 || rank >= size || !id)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_create: rank %d of %d%s", rank, size,
                           id ? "" : ", no id");
    zcomm_t *c = calloc(1, sizeof *c);
    znccl *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return zerr_thread(ZINC_ERR_NOMEM, "zcomm_nccl_create: out of host memory");
    }
    c->iface = &nccl_iface;
    c->mem_dev = dev;
    c->ctx = x;
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    x->dev = dev;
    x->cu = cu;
    /* A test hook: the one-GPU machine's only way to run the collectives' two-stream path (NCCL
     * on the comm stream, events each way) that larger worlds take (tests/gpu/tests.cmake). */
    const char *solo_env = getenv("ZINC_NCCL_SOLO");
    x->nccl_at_one = solo_env && !strcmp(solo_env, "0");
    zdev_use(dev);
    zinc_status s = ZINC_OK;
    cudaError_t e;
#define STEP(call)                                                                              \
    if ((e = (call)) != cudaSuccess) {                                                          \
        s = zcu_fail_cuda(c->err, sizeof c->err, (int)e, #call, __FILE__, __LINE__);            \
        goto fail;                                                                              \
    }
    STEP(cudaSetDevice(cu->device));
    STEP(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    STEP(cudaEventCreateWithFlags(&x->ready, cudaEventDisableTiming));
    STEP(cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming));
    STEP(cudaMalloc((void **)&x->one, sizeof(float)));
    STEP(cudaMemset(x->one, 0, sizeof(float)));
#undef STEP
    {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclUniqueId u;
        memcpy(&u, id, ZBOOT_ID_BYTES);
        ncclResult_t r = ncclCommInitRankConfig(&x->comm, size, u, rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            s = zcu_fail_nccl(c->err, sizeof c->err, (int)r, "ncclCommInitRankConfig", __FILE__, __LINE__);
            fail_world(x, s, c->err);
            goto fail;
        }
        /* Joining waits for every rank: bounded by the timeout like any collective. */
        if ((s = settle(c, r, "ncclCommInitRankConfig (waiting for every rank to join)", __FILE__,
                        __LINE__)))
            goto fail;
    }
    zcu_set_watch(dev, watch, c);
    zlog(ZLOG_DEBUG, "comm", rank, "nccl comm: rank %d of %d on cuda device %d", rank, size, cu->device);
    *out = c;
    return ZINC_OK;

fail:
    zerr_thread(s, "zcomm_nccl_create (rank %d of %d): %s", rank, size, c->err);
    nc_destroy(c);
    return s;
}

zinc_status zcomm_nccl_launch(double timeout_s, zboot_info *info, zdev_t **dev, zcomm_t **comm)
{
    if (!dev || !comm) return zerr_thread(ZINC_ERR_INVALID_ARG, "zcomm_nccl_launch: NULL output");
    *dev = NULL;
    *comm = NULL;
    zboot_info bi;
    char err[512];
    zinc_status s = zboot_detect(&bi, err, sizeof err);
    if (info) *info = bi;
    if (s) return zerr_thread(s, "%s", err);
    char why[256];
    int count = zdev_cuda_device_count(why, sizeof why);
    if (count == 0)
        return zerr_thread(ZINC_ERR_UNSUPPORTED, "rank %d: no CUDA device (%s)", bi.rank, why);
    if (bi.local_rank >= count)
        return zerr_thread(ZINC_ERR_CONFIG,
                           "rank %d: local rank %d but this node shows %d GPU(s); start at most "
                           "one process per GPU (--nproc-per-node, --ntasks-per-node), or, for "
                           "checks with several ranks on one GPU, start them with mpirun without "
                           "ZINC_SHARE_DEVICE=0 (NCCL refuses two ranks on one GPU; docs/comm.md)",
                           bi.rank, bi.local_rank, count);
    if ((s = zdev_cuda_open(bi.local_rank, dev))) return s;
    unsigned char id[ZBOOT_ID_BYTES];
    memset(id, 0, sizeof id);
    if (bi.rank == 0 && (s = zcomm_nccl_unique_id(id))) goto fail;
    if ((s = zboot_share_id(&bi, id, timeout_s > 0 ? timeout_s : 300.0, err, sizeof err))) {
        zerr_thread(s, "rank %d (%s launch): %s", bi.rank, bi.method, err);
        goto fail;
    }
    if ((s = zcomm_nccl_create(*dev, bi.rank, bi.size, id, timeout_s, comm))) goto fail;
    zlog(ZLOG_INFO, "comm", bi.rank, "nccl: rank %d of %d (%s launch), GPU %d", bi.rank, bi.size,
         bi.method, bi.local_rank);
    return ZINC_OK;

fail:
    {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zerr_thread_message());
        zdev_close(*dev);
        *dev = NULL;
        return zerr_thread(s, "%s", msg);
    }
}
