/*
 * comm.c — what every comm backend shares: dtype sizes, destroy/timeout, and the wrappers the
 * engine calls. The wrappers check arguments (so every backend sees valid calls) and keep the byte
 * counters in the ZeRO paper's accounting: a reduce-scatter or all-gather of a buffer of B bytes
 * counts B, an all-reduce 2B (it is a reduce-scatter plus an all-gather), a broadcast B, a
 * barrier nothing. A collective is counted only when it succeeded. docs/comm.md has the details.
 */
#include "shard/comm.h"

#include <stdio.h>

#include "base/log.h"
#include "kernels/device.h"

size_t zdt_size(zdt t)
{
    switch (t) {
    case ZDT_F32: return 4;
    case ZDT_F16:
    case ZDT_BF16: return 2;
    case ZDT_F64: return 8;
    }
    return 0;
}

void zcomm_destroy(zcomm_t *c)
{
    /* The backend still holds its use of mem_dev here (zdev_use), so the device is open. */
    if (c && c->host_stage) c->mem_dev->iface->free(c->mem_dev, c->host_stage);
    if (c && c->iface && c->iface->destroy) c->iface->destroy(c);
}

void zcomm_set_timeout(zcomm_t *c, double seconds)
{
    if (c && seconds > 0) c->timeout_s = seconds;
}

/* A rank that rejects its own arguments will not join the collective, so the others would wait
 * for it until their timeout: mark the world failed at once instead (the call is a bug anyway). */
static zinc_status zc_reject(zcomm_t *c, zinc_status s)
{
    if (c->iface->abort) {
        char why[sizeof c->err];
        snprintf(why, sizeof why, "%s", c->err);
        c->iface->abort(c, why);
        snprintf(c->err, sizeof c->err, "%s", why);
    }
    return s;
}

static zinc_status zc_check_args(zcomm_t *c, const char *what, const void *buf, size_t n, zdt t,
                                 int sliced)
{
    if (zdt_size(t) == 0)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                        "%s (rank %d): unknown element type %d", what, c->rank, (int)t);
    if (n > 0 && !buf)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                        "%s (rank %d): buffer is NULL for %zu elements", what, c->rank, n);
    if (sliced && n % (size_t)c->size != 0)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                        "%s (rank %d): %zu elements do not split into %d equal slices; pad the "
                        "buffer to a multiple of the world size",
                        what, c->rank, n, c->size);
    return ZINC_OK;
}

/* Checks shared by the element-wise collectives; `sliced` for those whose n must split into
 * `size` equal slices. */
static zinc_status zc_check(zcomm_t *c, const char *what, const void *buf, size_t n, zdt t,
                            int sliced)
{
    zinc_status s = zc_check_args(c, what, buf, n, t, sliced);
    return s == ZINC_OK ? s : zc_reject(c, s);
}

zinc_status zcomm_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zc_check(c, "all_reduce", buf, n, t, 0);
    if (s == ZINC_OK) s = c->iface->all_reduce(c, buf, n, t, scale);
    if (s == ZINC_OK) c->bytes[ZINC_COLL_ALL_REDUCE] += 2 * (uint64_t)n * zdt_size(t);
    return s;
}

zinc_status zcomm_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zc_check(c, "reduce_scatter", buf, n, t, 1);
    if (s == ZINC_OK) s = c->iface->reduce_scatter(c, buf, n, t, scale);
    if (s == ZINC_OK) c->bytes[ZINC_COLL_REDUCE_SCATTER] += (uint64_t)n * zdt_size(t);
    return s;
}

zinc_status zcomm_all_gather(zcomm_t *c, void *buf, size_t n, zdt t)
{
    zinc_status s = zc_check(c, "all_gather", buf, n, t, 1);
    if (s == ZINC_OK) s = c->iface->all_gather(c, buf, n, t);
    if (s == ZINC_OK) c->bytes[ZINC_COLL_ALL_GATHER] += (uint64_t)n * zdt_size(t);
    return s;
}

zinc_status zcomm_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size)
        return zc_reject(c, zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                        "broadcast (rank %d): root %d is not a rank of a world of %d", c->rank,
                        root, c->size));
    if (bytes > 0 && !buf)
        return zc_reject(c, zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INVALID_ARG,
                                     "broadcast (rank %d): buffer is NULL for %zu bytes",
                                     c->rank, bytes));
    zinc_status s = c->iface->broadcast(c, buf, bytes, root);
    if (s == ZINC_OK) c->bytes[ZINC_COLL_BROADCAST] += (uint64_t)bytes;
    return s;
}

zinc_status zcomm_barrier(zcomm_t *c) { return c->iface->barrier(c); }

/* ---- small collectives on host buffers ------------------------------------------------------ */

/* The device memory a host collective stages `bytes` through: kept and grown, never freed per
 * call, so the callers that run once per step (a monitor's mean over ranks, the overflow search)
 * neither allocate nor, on CUDA, wait for the whole device in cudaFree. NULL (c->err set) when
 * the device has no room. */
static void *host_stage(zcomm_t *c, size_t bytes)
{
    zdev_t *d = c->mem_dev;
    if (bytes < 256) bytes = 256;            /* the usual flags and small records fit at once */
    if (c->host_stage && bytes <= c->host_stage_bytes) return c->host_stage;
    void *p = d->iface->alloc(d, bytes);
    if (!p) {
        zerr_fmt(c->err, sizeof c->err, ZINC_ERR_NOMEM,
                 "comm (rank %d): no device memory to stage %zu bytes: %.300s", c->rank, bytes,
                 d->err);
        return NULL;
    }
    if (c->host_stage) d->iface->free(d, c->host_stage);
    c->host_stage = p;
    c->host_stage_bytes = bytes;
    return p;
}

/* kind 0: broadcast of `bytes` from root; kind 1: all-reduce of bytes / 8 doubles. */
static zinc_status host_collective(zcomm_t *c, void *buf, size_t bytes, int root, int kind)
{
    zdev_t *d = c->mem_dev;
    if (c->size == 1) return ZINC_OK;        /* one rank: its own values are the result */
    if (!d)
        return kind ? c->iface->all_reduce(c, buf, bytes / 8, ZDT_F64, 1.0f)
                    : c->iface->broadcast(c, buf, bytes, root);
    void *tmp = host_stage(c, bytes);
    if (!tmp) return ZINC_ERR_NOMEM;
    zinc_status s = d->iface->upload(d, tmp, buf, bytes);
    if (s == ZINC_OK)
        s = kind ? c->iface->all_reduce(c, tmp, bytes / 8, ZDT_F64, 1.0f)
                 : c->iface->broadcast(c, tmp, bytes, root);
    else
        snprintf(c->err, sizeof c->err, "comm (rank %d): staging to the device: %.400s", c->rank, d->err);
    if (s == ZINC_OK) s = d->iface->download(d, buf, tmp, bytes);
    return s;
}

zinc_status zcomm_host_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    return host_collective(c, buf, bytes, root, 0);
}

zinc_status zcomm_host_all_reduce_f64(zcomm_t *c, double *buf, size_t n)
{
    return host_collective(c, buf, n * sizeof(double), 0, 1);
}
