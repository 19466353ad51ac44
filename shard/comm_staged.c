/*
 * comm_staged.c — a comm over DEVICE buffers built from a comm over HOST buffers: each collective
 * copies the device buffer into a host staging buffer, runs the host backend on it and copies
 * the result back.
 *
 * What it is for: several ranks as threads sharing one GPU (the `local` backend on a one-GPU
 * machine), where NCCL cannot help (it refuses two ranks on one device). It is slow — two PCIe
 * copies per collective — but it does exactly the local backend's arithmetic, so stage
 * equivalence can be checked bit for bit on a GPU. The staging buffer is reserved once
 * (zcomm_staged_reserve, from the engine's plan); collectives larger than it fail cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/device.h"
#include "shard/comm.h"

typedef struct {
    zcomm_t *inner;       /* host backend; owned */
    zdev_t *dev;          /* where the buffers live; not owned */
    unsigned char *host;  /* [cap] staging */
    size_t cap;
} zstaged;

static zstaged *st(zcomm_t *c) { return c->ctx; }

/* Copies the inner comm's verdict (status and message) out to the staged comm. */
static zinc_status inner_done(zcomm_t *c, zinc_status s)
{
    if (s != ZINC_OK) snprintf(c->err, sizeof c->err, "%s", st(c)->inner->err);
    return s;
}

static zinc_status stage_in(zcomm_t *c, const void *buf, size_t bytes)
{
    zstaged *z = st(c);
    if (bytes > z->cap)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_INTERNAL,
                        "staged comm (rank %d): a %zu-byte collective exceeds the %zu-byte staging "
                        "buffer reserved from the plan", c->rank, bytes, z->cap);
    z->inner->timeout_s = c->timeout_s;
    zinc_status s = z->dev->iface->download(z->dev, z->host, buf, bytes);
    if (s != ZINC_OK)
        return zerr_fmt(c->err, sizeof c->err, s, "staged comm (rank %d): %s", c->rank, z->dev->err);
    return ZINC_OK;
}

static zinc_status stage_out(zcomm_t *c, void *buf, size_t off, size_t bytes)
{
    zstaged *z = st(c);
    zinc_status s = z->dev->iface->upload(z->dev, (char *)buf + off, z->host + off, bytes);
    if (s != ZINC_OK)
        return zerr_fmt(c->err, sizeof c->err, s, "staged comm (rank %d): %s", c->rank, z->dev->err);
    return ZINC_OK;
}

static zinc_status staged_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    size_t b = n * zdt_size(t);
    zinc_status s = stage_in(c, buf, b);
    if (s == ZINC_OK) s = inner_done(c, st(c)->inner->iface->all_reduce(st(c)->inner, st(c)->host, n, t, scale));
    return s == ZINC_OK ? stage_out(c, buf, 0, b) : s;
}

static zinc_status staged_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    size_t b = n * zdt_size(t), slice = b / (size_t)c->size;
    zinc_status s = stage_in(c, buf, b);
    if (s == ZINC_OK)
        s = inner_done(c, st(c)->inner->iface->reduce_scatter(st(c)->inner, st(c)->host, n, t, scale));
    /* Only this rank's slice is defined afterwards: copy back just that. */
    return s == ZINC_OK ? stage_out(c, buf, slice * (size_t)c->rank, slice) : s;
}

static zinc_status staged_all_gather(zcomm_t *c, void *buf, size_t n, zdt t)
{
    size_t b = n * zdt_size(t);
    zinc_status s = stage_in(c, buf, b);
    if (s == ZINC_OK) s = inner_done(c, st(c)->inner->iface->all_gather(st(c)->inner, st(c)->host, n, t));
    return s == ZINC_OK ? stage_out(c, buf, 0, b) : s;
}

static zinc_status staged_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    zinc_status s = stage_in(c, buf, bytes);
    if (s == ZINC_OK) s = inner_done(c, st(c)->inner->iface->broadcast(st(c)->inner, st(c)->host, bytes, root));
    return s == ZINC_OK ? stage_out(c, buf, 0, bytes) : s;
}

static zinc_status staged_barrier(zcomm_t *c)
{
    st(c)->inner->timeout_s = c->timeout_s;
    return inner_done(c, st(c)->inner->iface->barrier(st(c)->inner));
}

static void staged_abort(zcomm_t *c, const char *why)
{
    st(c)->inner->iface->abort(st(c)->inner, why);
}

static void staged_destroy(zcomm_t *c)
{
    zstaged *z = st(c);
    zcomm_destroy(z->inner);
    zdev_unuse(z->dev);
    free(z->host);
    free(z);
    free(c);
}

static const zcomm_iface_t staged_iface = {
    .name = "staged",
    .all_reduce = staged_all_reduce,
    .reduce_scatter = staged_reduce_scatter,
    .all_gather = staged_all_gather,
    .broadcast = staged_broadcast,
    .barrier = staged_barrier,
    .abort = staged_abort,
    .destroy = staged_destroy,
};

zinc_status zcomm_staged_create(zcomm_t *inner, zdev_t *dev, zcomm_t **out)
{
    *out = NULL;
    zcomm_t *c = calloc(1, sizeof *c);
    zstaged *z = calloc(1, sizeof *z);
    if (!c || !z) {
        free(c);
        free(z);
        zcomm_destroy(inner);
        return zerr_thread(ZINC_ERR_NOMEM, "staged comm: out of memory");
    }
    z->inner = inner;
    z->dev = dev;
    zdev_use(dev);
    c->iface = &staged_iface;
    c->mem_dev = dev;
    c->ctx = z;
    c->rank = inner->rank;
    c->size = inner->size;
    c->timeout_s = inner->timeout_s;
    *out = c;
    /* Enough for the small collectives before the plan exists (the registration check). */
    zinc_status s = zcomm_staged_reserve(c, 64 * 1024);
    if (s != ZINC_OK) {
        zerr_thread(s, "%s", c->err);
        c->iface->destroy(c);
        *out = NULL;
    }
    return s;
}

zinc_status zcomm_staged_reserve(zcomm_t *c, size_t bytes)
{
    zstaged *z = st(c);
    if (bytes <= z->cap) return ZINC_OK;
    unsigned char *h = realloc(z->host, bytes);
    if (!h)
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_NOMEM,
                        "staged comm: cannot reserve %zu bytes of host staging", bytes);
    z->host = h;
    z->cap = bytes;
    return ZINC_OK;
}

int zcomm_is_staged(const zcomm_t *c) { return c && c->iface == &staged_iface; }

const char *zcomm_backend_name(const zcomm_t *c)
{
    if (!c) return NULL;
    if (!zcomm_is_staged(c)) return c->iface->name;
    const char *in = ((const zstaged *)c->ctx)->inner->iface->name;
    return !strcmp(in, "mpi") ? "staged/mpi" : !strcmp(in, "local") ? "staged/local" : "staged";
}
