/*
 * offload_nvme.c — ZeRO-Infinity's optimizer tier: zero_optimization.offload_optimizer
 * {"device": "nvme"} at stages 1-3. The fp32 master, Adam m and v of this rank's shard live in a
 * scratch file under nvme_path (engine/nvme_store.c: io_uring, O_DIRECT where the filesystem
 * allows it) instead of host memory; everything else is the cpu offload of offload.c (the reduced
 * gradient shard downloaded into h_grad, the host Adam, its 16-bit output in h_param16 uploaded,
 * offload_param's host shard), so the arithmetic — and every bit of the result — is the same.
 *
 * The file: three streams back to back, master, m, v, each `stream` bytes (the shard rounded up to
 * whole 4096-byte blocks). Host memory holds `nbuf` chunk buffers, each the master, m and v of one
 * chunk of E elements (zero_optimization.sub_group_size, at most ZNV_CHUNK_MAX, and at most
 * what keeps the buffers to half the shard's state), instead of 12 bytes per shard element; h_param16 always exists here (in fp32 mode too), since the master is
 * no longer in memory to upload from.
 *
 * The step is a pipeline over the chunks (zoffload_nvme_adam): read chunk c + k ahead, the host
 * Adam over chunk c, write chunk c back and upload its 16-bit result, while the reads of the next
 * chunks and the write of the last one run. offload_optimizer.pipeline_read enables the reads
 * ahead (as many as the buffers allow), pipeline_write the write behind; without them each read
 * and write is waited for at once, as DeepSpeed does without them.
 *
 * Outside the step (zinc_param_set/get, the state accessors, checkpoints) the state is reached
 * through `state_dev`, a device whose memory is the file: e->master, m and v point into an
 * address range reserved without access (PROT_NONE), so that they keep their meaning as
 * positions — ckpt/ and the accessors index them as before — and any code that would read them
 * as memory faults at once instead of reading something else; its upload and download are
 * positioned writes and reads of the file.
 *
 * A frozen engine (zinc_engine_frozen) with offload_param "nvme" has no optimizer state: its file
 * is the 16-bit stream alone (the master, m and v streams are empty, `stream` 0), and host memory
 * holds only the gathers' staging slots. Its values are written outside any step
 * (zinc_param_set), so no step's sum vouches for them: a group's sum is taken from its first
 * gather after a write (zoffload_nvme_own_to_device) and checked by every later read, which
 * catches a disk or another process changing the file between the reads of values set once.
 *
 * An I/O error in the step leaves the file with some chunks of the new step and some of the old:
 * the engine then refuses every further use of its state, naming the file, and the run resumes
 * from its last checkpoint (which never depends on the scratch file). A full disk cannot happen
 * in the step: the file's space is reserved at finalize. A chunk that reads back other than the
 * step wrote it (its checksum, zinc.nvme_checksum), or with offload_param a group's 16-bit slice
 * that a gather reads back changed, is refused the same way, as is a step that failed after
 * writing part of the file. Reads outside the step (a checkpoint's save, the state accessors)
 * are checked against the same sums (nv_download), so that a save never copies a changed file
 * into a checkpoint whose own checksums would then vouch for it.
 */
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "engine/internal.h"
#include "engine/nvme_store.h"
#include "kernels/cpu/cpu.h"

#define ZNV_ALIGN_BYTES 4096               /* O_DIRECT's block */
#define ZNV_CHUNK_MAX ((size_t)1 << 22)    /* 16 MB per state per chunk buffer */
#define ZNV_STATES 3                       /* master, m, v */
#define ZNV_STAGE 4                        /* gather staging slots (offload_param "nvme") */

struct znv {
    zinc_engine_t *e;         /* the engine (its host device hashes; its config) */
    int param;                /* offload_param "nvme": the 16-bit shard is a 4th stream */
    size_t pstream;           /* its bytes in the file (0 without) */
    char *pbuf;               /* param: nbuf * E 16-bit chunk buffers (the Adam's output) */
    char *stage;              /* param: ZNV_STAGE slots of the largest slice, for gathers */
    size_t stage_slot;        /* bytes per slot */
    uint64_t stage_ticket[ZNV_STAGE]; /* the copy ticket of each slot's last upload (0: none) */
    int stage_next;
    znvme_t *file;
    zdev_t dev;               /* state_dev: its memory is the file */
    char *base;               /* the reserved (PROT_NONE) range master/m/v point into */
    size_t stream;            /* bytes per state stream in the file (and in the range) */
    size_t E;                 /* elements per chunk */
    int nbuf, ahead, behind;  /* chunk buffers; reads ahead; 1: the write is waited one chunk late */
    float *buf;               /* nbuf * 3 * E */
    uint64_t *rt, *wt;        /* [nbuf]: the step's last read / write ticket of each buffer */
    int *written;             /* [nbuf]: a write from the buffer is in flight, not yet waited */
    /* [chunks]: the checksum (chunk_sum) of each chunk's master, m and v as the step last wrote
     * them, checked when the next step reads them back (a disk, or another process, that
     * changed the file would otherwise train on what it left); sum_ok[c] 0 while unknown
     * (before the first step's write, after a write outside the step — a parameter set, a
     * checkpoint load — and always with zinc.nvme_checksum false). */
    uint64_t *sum;
    uint8_t *sum_ok;
    size_t nchunks;
    /* [nbuf]: outside the step, the chunk whose master, m and v buffer b holds as read back and
     * checked against its sum (nv_download serves reads from it), or -1. */
    long *cached;
    /* param: [groups]: the group's slice was checked against psum since the stream was last
     * written (reads outside the step). */
    uint8_t *pchecked;
    /* param: [groups]: the checksum of each group's own 16-bit slice as the step (or a refresh)
     * last wrote it, checked by the gathers that read it back (param_pieces_sum); psum_ok[g] 0
     * while unknown, as sum_ok. */
    uint64_t *psum;
    uint8_t *psum_ok;
    const zplan *plan;        /* the engine's: the groups' slices in the shard */
    size_t pd;                /* bytes per element of the 16-bit stream (4 in fp32 mode) */
    uint64_t io[2];           /* bytes the steps read, wrote */
    int lost;                 /* the file no longer holds one whole state: ZNV_LOST_* (0: it does) */
    int restoring;            /* a checkpoint's load rewrites the state: writes go on while lost */
    int drained;              /* lost: what the failed step left in flight was waited for */
};

/* Why the state in the file is no longer whole. */
enum { ZNV_LOST_IO = 1, ZNV_LOST_CHANGED, ZNV_LOST_STEP, ZNV_LOST_CHANGED16 };

static const char *lost_why(const struct znv *nv)
{
    return nv->lost == ZNV_LOST_CHANGED   ? "a chunk that read back changed (checksum)"
           : nv->lost == ZNV_LOST_CHANGED16 ? "a group's 16-bit slice that read back changed "
                                              "(checksum)"
           : nv->lost == ZNV_LOST_STEP      ? "a step that failed after writing part of it"
                                            : "an earlier I/O error";
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- the plan ------------------------------------------------------------------------------- */

void zoffload_nvme_layout(const znv_shape *in, znv_layout *out)
{
    size_t d = zinc_dtype_size(in->dtype);
    /* Chunks and streams are whole O_DIRECT blocks of the narrowest stream: the 16-bit
     * parameters' when they are in the file too, else fp32's. */
    out->align_elems = ZNV_ALIGN_BYTES / (in->param ? d : 4);
    out->spad = round_up(in->shard ? (size_t)in->shard : 1, out->align_elems);
    int need = 1 + in->pipeline_read + in->pipeline_write;
    out->nbuf = in->buffer_count > need ? in->buffer_count : need;
    /* A chunk: sub_group_size elements (DeepSpeed's unit of the NVMe swap), at most
     * ZNV_CHUNK_MAX, and small enough that the buffers together hold at most about half the
     * shard's state (a model smaller than the buffers would otherwise need more host memory
     * with NVMe than without). */
    size_t E = ZNV_CHUNK_MAX, half = out->spad / (2 * (size_t)out->nbuf);
    if ((uint64_t)in->sub_group_size < E) E = (size_t)in->sub_group_size;
    if (half < E) E = half;
    out->E = round_up(E ? E : 1, out->align_elems);
    /* More buffers than chunks are never used: a buffer_count past the chunks (DeepSpeed bounds
     * it only below) would only reserve host memory and, before, overflow the step's per-buffer
     * bookkeeping on the stack. */
    size_t chunks = (out->spad + out->E - 1) / out->E;
    if ((size_t)out->nbuf > chunks) out->nbuf = chunks > (size_t)need ? (int)chunks : need;
    out->state_stream = (uint64_t)out->spad * 4;
    out->param_stream = in->param ? (uint64_t)out->spad * d : 0;
    out->file_bytes = ZNV_STATES * out->state_stream + out->param_stream;
    out->host_state_each = (uint64_t)out->nbuf * out->E * 4;
    /* The Adam's output (and offload_param's shard) has no master to come from in fp32 mode;
     * with the parameters in the file too, only its chunk buffers and the gathers' staging. */
    out->stage_slot = in->param ? (uint64_t)in->max_slice * d : 0;
    out->pbuf_bytes = in->param ? (uint64_t)out->nbuf * out->E * d : 0;
    if (in->frozen) {   /* (with param) no state streams, no Adam: the 16-bit stream, the slots */
        out->state_stream = 0;
        out->file_bytes = out->param_stream;
        out->host_state_each = 0;
        out->pbuf_bytes = 0;
    }
    out->host_param16 = in->param ? out->pbuf_bytes + ZNV_STAGE * out->stage_slot : in->shard * d;
}

static void layout_of(const zinc_engine_t *e, znv_layout *out)
{
    size_t m = 0;
    for (int g = 0; g < e->plan.ngroups; g++)
        if (e->plan.groups[g].slice > m) m = e->plan.groups[g].slice;
    const zcfg_zero *z = &e->cfg.zero;
    znv_shape in = {.shard = e->plan.shard_numel, .max_slice = m, .dtype = e->dtype,
                    .sub_group_size = z->sub_group_size, .buffer_count = z->nvme_buffer_count,
                    .pipeline_read = z->nvme_pipeline_read, .pipeline_write = z->nvme_pipeline_write,
                    .param = zcfg_offloads_param_nvme(&e->cfg), .frozen = e->frozen};
    zoffload_nvme_layout(&in, out);
}

int zoffload_uses_nvme(const zinc_engine_t *e)
{
    return e->offload && zcfg_offloads_nvme(&e->cfg) &&
           (!e->frozen || zcfg_offloads_param_nvme(&e->cfg));
}

void zoffload_nvme_plan(zinc_engine_t *e)
{
    znv_layout L;
    layout_of(e, &L);
    e->host_planned[ZINC_MEM_MASTER] = L.host_state_each;
    e->host_planned[ZINC_MEM_ADAM_M] = L.host_state_each;
    e->host_planned[ZINC_MEM_ADAM_V] = L.host_state_each;
    e->host_planned[ZINC_MEM_PARAM16] = L.host_param16;
}

uint64_t zoffload_nvme_file_bytes(const zinc_engine_t *e)
{
    znv_layout L;
    layout_of(e, &L);
    return L.file_bytes;
}

/* ---- the state device: upload and download are positioned writes and reads of the file ----- */

static struct znv *nv_of(zdev_t *d) { return d->ctx; }

/* A lost state: every call the failed step issued, waited for (its error is the step's, said
 * already), so that none of it lands after a load's writes. */
static void drain(struct znv *nv)
{
    znvme_drain(nv->file);
    for (int b = 0; b < nv->nbuf; b++) nv->written[b] = 0;
    nv->drained = 1;
}

/* [p, p + n) as an offset in the file. A lost state refuses reads, and writes but a checkpoint
 * load's that rewrites the whole state (zoffload_nvme_restore; its end makes the state whole). */
static zinc_status range_of(zdev_t *d, const void *p, size_t n, uint64_t *off, int write)
{
    struct znv *nv = nv_of(d);
    const char *c = p;
    if (nv->lost && write && nv->restoring && !nv->drained) drain(nv);
    if (nv->lost && !(write && nv->restoring)) {
        snprintf(d->err, sizeof d->err, "%s: the %s was lost to %s (resume from the last "
                 "checkpoint)", znvme_path(nv->file),
                 nv->e->frozen ? "frozen engine's parameter shard" : "optimizer state",
                 lost_why(nv));
        return ZINC_ERR_IO;
    }
    if (c < nv->base || c + n > nv->base + ZNV_STATES * nv->stream + nv->pstream) {
        snprintf(d->err, sizeof d->err, "%s: %zu bytes at %p are outside the NVMe state",
                 znvme_path(nv->file), n, p);
        return ZINC_ERR_INVALID_ARG;
    }
    *off = (uint64_t)(c - nv->base);
    return ZINC_OK;
}

static zinc_status io_fail(zdev_t *d, zinc_status s)
{
    snprintf(d->err, sizeof d->err, "%s", znvme_error(nv_of(d)->file));
    return s;
}

/* A write outside the step over [off, off + n) of the file: the sums of the chunks (and, in
 * the 16-bit stream, of the group slices) it touches are unknown until the step writes them
 * again. */
/* Group g's own slice of the 16-bit stream meets the file range [off, off + n). */
static int group_in_range(const struct znv *nv, int g, uint64_t off, size_t n)
{
    uint64_t states = (uint64_t)ZNV_STATES * nv->stream;
    if (!nv->param || n == 0 || off + n <= states) return 0;
    uint64_t lo = (off > states ? off - states : 0) / nv->pd;
    uint64_t hi = (off + n - states + nv->pd - 1) / nv->pd;
    const zplan_group *G = &nv->plan->groups[g];
    return G->shard_off < hi && G->shard_off + G->slice > lo;
}

/* The first piece of [o, end) (o inside master, m or v) that lies in one chunk of one state
 * stream: its bytes (to that chunk's end or the stream's, at most end - o); *c its chunk. */
static uint64_t chunk_piece(const struct znv *nv, uint64_t o, uint64_t end, size_t *c)
{
    uint64_t in = o % nv->stream, c0 = in / 4 / nv->E;
    uint64_t cend = (c0 + 1) * nv->E * 4 < nv->stream ? (c0 + 1) * nv->E * 4 : nv->stream;
    *c = (size_t)c0;
    return end - o < cend - in ? end - o : cend - in;
}

static void sums_unknown(struct znv *nv, uint64_t off, size_t n)
{
    uint64_t states = (uint64_t)ZNV_STATES * nv->stream;
    for (int g = 0; g < nv->plan->ngroups; g++)
        if (group_in_range(nv, g, off, n)) nv->psum_ok[g] = 0;
    uint64_t end = off + n < states ? off + n : states;
    for (uint64_t o = off; o < end;) {
        size_t c;
        o += chunk_piece(nv, o, end, &c);
        if (c < nv->nchunks) nv->sum_ok[c] = 0;
        if (nv->cached[c % (size_t)nv->nbuf] == (long)c) nv->cached[c % (size_t)nv->nbuf] = -1;
    }
}

static zinc_status nv_upload(zdev_t *d, void *dst, const void *src, size_t n)
{
    uint64_t off;
    zinc_status s = range_of(d, dst, n, &off, 1);
    if (s == ZINC_OK) sums_unknown(nv_of(d), off, n);
    if (s == ZINC_OK && (s = znvme_pwrite(nv_of(d)->file, off, src, n)) != ZINC_OK) io_fail(d, s);
    return s;
}

/* A read of the file as it is, unchecked (the gathers check the slice they read themselves). */
static zinc_status nv_read(zdev_t *d, void *dst, const void *src, size_t n)
{
    uint64_t off;
    zinc_status s = range_of(d, src, n, &off, 0);
    if (s == ZINC_OK && (s = znvme_pread(nv_of(d)->file, off, dst, n)) != ZINC_OK) io_fail(d, s);
    return s;
}

static void drop_cached(struct znv *nv)
{
    for (int b = 0; b < nv->nbuf; b++) nv->cached[b] = -1;
}

static zinc_status chunk_check(struct znv *nv, size_t c);
static zinc_status group_check(struct znv *nv, int g);

/* A read outside the step. Where the step's sums are known (zinc.nvme_checksum, after a step
 * wrote the chunk), a chunk of master, m and v is read whole into its buffer, checked, and the
 * read served from there (the next state's read of the same elements, as a save makes them,
 * finds it there), and a group of the 16-bit stream is checked before it is read; elsewhere, the
 * file as it is. A chunk that reads back changed marks the state lost (ZINC_ERR_CORRUPT). */
static zinc_status nv_download(zdev_t *d, void *dst, const void *src, size_t n)
{
    struct znv *nv = nv_of(d);
    uint64_t off, states = (uint64_t)ZNV_STATES * nv->stream;
    zinc_status s = range_of(d, src, n, &off, 0);
    if (s != ZINC_OK) return s;
    for (int g = 0; g < nv->plan->ngroups && s == ZINC_OK; g++)
        if (group_in_range(nv, g, off, n)) s = group_check(nv, g);
    char *out = dst;
    for (uint64_t o = off, end = off + n; s == ZINC_OK && o < end;) {
        size_t c = 0;
        uint64_t piece = o < states ? chunk_piece(nv, o, end, &c) : end - o;
        if (o < states && c < nv->nchunks && nv->sum_ok[c]) {
            if ((s = chunk_check(nv, c)) != ZINC_OK) break;
            const char *b = (const char *)(nv->buf + ((c % (size_t)nv->nbuf) * ZNV_STATES +
                                                      (size_t)(o / nv->stream)) * nv->E);
            memcpy(out, b + (o % nv->stream - (uint64_t)c * nv->E * 4), (size_t)piece);
        } else if ((s = znvme_pread(nv->file, o, out, (size_t)piece)) != ZINC_OK) {
            io_fail(d, s);
        }
        out += piece;
        o += piece;
    }
    return s;
}

static zinc_status nv_memset0(zdev_t *d, void *p, size_t n)
{
    static const char zeros[1 << 16];
    uint64_t off;
    zinc_status s = range_of(d, p, n, &off, 1);
    if (s == ZINC_OK) sums_unknown(nv_of(d), off, n);
    for (size_t done = 0; s == ZINC_OK && done < n; done += sizeof zeros) {
        size_t k = n - done < sizeof zeros ? n - done : sizeof zeros;
        if ((s = znvme_pwrite(nv_of(d)->file, off + done, zeros, k)) != ZINC_OK) io_fail(d, s);
    }
    return s;
}

/* Only what the layers above call on a state device: ckpt/ and the engine's accessors. */
static const zdev_iface_t nv_iface = {
    .name = "nvme",
    .upload = nv_upload,
    .download = nv_download,
    .memset0 = nv_memset0,
};

/* ---- open and close -------------------------------------------------------------------------- */

zinc_status zoffload_nvme_open(zinc_engine_t *e)
{
    const char *dir = e->cfg.zero.nvme_path;
    struct znv *nv = calloc(1, sizeof *nv);
    if (!nv) return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: offload_optimizer nvme: out of memory");
    e->nv = nv;
    znv_layout L;
    layout_of(e, &L);
    nv->E = L.E;
    nv->nbuf = L.nbuf;
    nv->behind = e->cfg.zero.nvme_pipeline_write;
    nv->ahead = e->cfg.zero.nvme_pipeline_read ? nv->nbuf - 1 - nv->behind : 0;
    uint64_t bytes = L.file_bytes;
    nv->stream = (size_t)L.state_stream;
    nv->param = zcfg_offloads_param_nvme(&e->cfg);
    nv->pstream = (size_t)L.param_stream;
    int stale = znvme_remove_stale(dir);
    if (stale)
        zlog(ZLOG_INFO, "offload", e->rank, "removed %d stale NVMe scratch file(s) of ended runs "
             "from %s", stale, dir);
    char err[1024];
    zinc_status s = znvme_open(dir, e->rank, bytes, e->cfg.aio.queue_depth, &nv->file, err,
                               sizeof err);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "zinc_finalize: offload_optimizer nvme on rank %d: %s (%llu bytes "
                         "of scratch space needed under zero_optimization.offload_optimizer."
                         "nvme_path)", e->rank, err, (unsigned long long)bytes);
    void *base = mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    /* (a frozen engine's layout has neither chunk buffers nor the Adam's 16-bit output) */
    size_t bufbytes = ZNV_STATES * (size_t)L.host_state_each, d = zeng_dsize(e),
           pbytes = (size_t)L.pbuf_bytes;
    nv->stage_slot = (size_t)L.stage_slot;
    /* (page-aligned: the staging slots are page-locked with offload_optimizer.pin_memory) */
    int pfail = nv->param && ((pbytes && posix_memalign((void **)&nv->pbuf, 4096, pbytes)) ||
                              posix_memalign((void **)&nv->stage, 4096,
                                             ZNV_STAGE * nv->stage_slot + 1));
    size_t S = e->plan.shard_numel, nb = (size_t)nv->nbuf;
    nv->nchunks = (S + nv->E - 1) / nv->E;
    nv->rt = calloc(nb, sizeof *nv->rt);
    nv->wt = calloc(nb, sizeof *nv->wt);
    nv->written = calloc(nb, sizeof *nv->written);
    nv->sum = calloc(nv->nchunks + 1, sizeof *nv->sum);
    nv->sum_ok = calloc(nv->nchunks + 1, 1);
    nv->cached = malloc(nb * sizeof *nv->cached);
    nv->e = e;
    nv->plan = &e->plan;
    nv->pd = d;
    if (nv->param) {
        nv->psum = calloc((size_t)e->plan.ngroups + 1, sizeof *nv->psum);
        nv->psum_ok = calloc((size_t)e->plan.ngroups + 1, 1);
        nv->pchecked = calloc((size_t)e->plan.ngroups + 1, 1);
        pfail |= !nv->psum || !nv->psum_ok || !nv->pchecked;
    }
    pfail |= !nv->rt || !nv->wt || !nv->written || !nv->sum || !nv->sum_ok || !nv->cached;
    if (base == MAP_FAILED || pfail ||
        (bufbytes && posix_memalign((void **)&nv->buf, 4096, bufbytes) != 0)) {
        if (base != MAP_FAILED) munmap(base, (size_t)bytes);
        nv->buf = NULL;
        return zeng_fail(e, ZINC_ERR_NOMEM, "zinc_finalize: offload_optimizer nvme on rank %d: "
                         "cannot reserve the state's %llu bytes of address space or allocate "
                         "%zu bytes of chunk buffers", e->rank, (unsigned long long)bytes,
                         bufbytes);
    }
    /* the last chunk's write covers the padding past the shard's end, which the Adam does not
     * fill: zeros there, not whatever the allocator left (read by nothing; valgrind's report) */
    if (nv->pbuf) memset(nv->pbuf, 0, pbytes);
    nv->base = base;
    drop_cached(nv);
    nv->dev = (zdev_t){.iface = &nv_iface, .ctx = nv};
    if (!e->frozen) {   /* (a frozen engine's master, m and v stay NULL: it has none) */
        e->master = (float *)nv->base;
        e->m = (float *)(nv->base + nv->stream);
        e->v = (float *)(nv->base + 2 * nv->stream);
    }
    for (int c = ZINC_MEM_MASTER; c <= ZINC_MEM_ADAM_V; c++) e->host_allocated[c] = e->host_planned[c];
    if (nv->param) {   /* the host shard's place: the 4th stream */
        e->h_param16 = nv->base + ZNV_STATES * nv->stream;
        e->host_allocated[ZINC_MEM_PARAM16] = e->host_planned[ZINC_MEM_PARAM16];
    }
    if (e->rank == 0)
        zlog(ZLOG_DEBUG, "offload", 0, "nvme: %s (%s), %llu bytes, chunks of %zu elements, %d "
             "buffers, %d read(s) ahead, write %s", znvme_path(nv->file), znvme_backend(nv->file),
             (unsigned long long)bytes, nv->E, nv->nbuf, nv->ahead,
             nv->behind ? "behind" : "waited");
    return ZINC_OK;
}

void zoffload_nvme_close(zinc_engine_t *e)
{
    struct znv *nv = e->nv;
    if (!nv) return;
    znvme_close(nv->file);   /* waits for what is in flight, removes the file */
    if (nv->base) munmap(nv->base, ZNV_STATES * nv->stream + nv->pstream);
    free(nv->buf);
    free(nv->pbuf);
    free(nv->stage);
    free(nv->rt);
    free(nv->wt);
    free(nv->written);
    free(nv->sum);
    free(nv->sum_ok);
    free(nv->psum);
    free(nv->psum_ok);
    free(nv->cached);
    free(nv->pchecked);
    if (nv->param) e->h_param16 = NULL;
    free(nv);
    e->nv = NULL;
    e->master = e->m = e->v = NULL;
}

zdev_t *zoffload_nvme_dev(zinc_engine_t *e) { return e->nv ? &e->nv->dev : NULL; }

void zoffload_nvme_restore(zinc_engine_t *e, int phase)
{
    struct znv *nv = e->nv;
    if (!nv) return;
    if (phase == 0) {           /* a load that will write the whole state begins */
        nv->restoring = 1;
        return;
    }
    nv->restoring = 0;
    if (phase != 2 || !nv->lost) return;
    /* the load wrote the elements, not the padding after each stream's last one: a file cut
     * short (by another process, a disk) ends there, and the step's whole-chunk reads went past
     * its end; reserved whole again, as at finalize, or it stays lost */
    if (znvme_reserve(nv->file) != ZINC_OK) {
        zlog(ZLOG_ERROR, "offload", e->rank, "the load rewrote the optimizer state, but %s; it "
             "stays lost", znvme_error(nv->file));
        return;
    }
    /* every chunk and group was written outside the step: their sums are unknown already */
    zlog(ZLOG_INFO, "offload", e->rank, "%s holds a whole optimizer state again (a checkpoint's "
         "load rewrote it after it was lost to %s)", znvme_path(nv->file), lost_why(nv));
    nv->lost = 0;
    nv->drained = 0;
    drop_cached(nv);
}

void *zoffload_nvme_staging(zinc_engine_t *e, size_t *bytes)
{
    struct znv *nv = e->nv;
    *bytes = nv && nv->stage ? ZNV_STAGE * nv->stage_slot : 0;
    return *bytes ? nv->stage : NULL;
}

zdev_t *zoffload_param16_dev(zinc_engine_t *e)
{
    return e->nv && e->nv->param ? &e->nv->dev : e->host;
}

int zoffload_param16_in_file(const zinc_engine_t *e) { return e->nv && e->nv->param; }

int zoffload_prefetch_groups(const zinc_engine_t *e)
{
    return zoffload_param16_in_file(e) ? ZNV_STAGE - 1 : INT_MAX;
}

/* ---- the 16-bit stream's checksums ----------------------------------------------------------
 * The step and the refresh write the stream chunk by chunk (E elements), a gather reads it group
 * slice by group slice: a group's sum is the sum of its pieces, its slice cut at the chunk
 * boundaries, so that the writer (one chunk in hand) and the reader (one slice in hand) form the
 * same value. */

/* The sum of the pieces of group g's elements [lo, hi) of the shard, which lie at p. */
static uint64_t param_pieces_sum(zinc_engine_t *e, int g, size_t lo, size_t hi, const char *p)
{
    struct znv *nv = e->nv;
    uint64_t sum = 0;
    for (size_t a = lo; a < hi;) {
        size_t c = a / nv->E, b = (c + 1) * nv->E < hi ? (c + 1) * nv->E : hi;
        uint64_t h = 0, seed = ((uint64_t)g << 32 | c) * 0x9E3779B97F4A7C15ull;
        zk_cpu_checksum(e->host, p + (a - lo) * nv->pd, (b - a) * nv->pd, seed, &h);
        sum += h; /* (a cpu device and real buffers: cannot fail) */
        a = b;
    }
    return sum;
}

/* The stream is about to be written whole (a step, a refresh): every group's sum starts over,
 * unknown until param_sums_done. */
static void param_sums_begin(struct znv *nv)
{
    memset(nv->psum, 0, (size_t)nv->plan->ngroups * sizeof *nv->psum);
    memset(nv->psum_ok, 0, (size_t)nv->plan->ngroups);
    memset(nv->pchecked, 0, (size_t)nv->plan->ngroups);
}

/* Chunk c of the stream, at buf on its way to the file: its pieces of each group's slice
 * (with zinc.nvme_checksum on). The groups lie in ascending shard_off, so the scan stops at the
 * first past the chunk. */
static void param_sums_add(zinc_engine_t *e, size_t c, const char *buf)
{
    struct znv *nv = e->nv;
    if (!e->cfg.zinc.nvme_checksum) return;
    size_t lo = c * nv->E, hi = lo + nv->E;
    for (int g = 0; g < nv->plan->ngroups && nv->plan->groups[g].shard_off < hi; g++) {
        const zplan_group *G = &nv->plan->groups[g];
        size_t a = G->shard_off > lo ? G->shard_off : lo;
        size_t b = G->shard_off + G->slice < hi ? G->shard_off + G->slice : hi;
        if (a < b) nv->psum[g] += param_pieces_sum(e, g, a, b, buf + (a - lo) * nv->pd);
    }
}

/* The whole stream written: the sums are known (with zinc.nvme_checksum on). */
static void param_sums_done(zinc_engine_t *e)
{
    if (e->cfg.zinc.nvme_checksum) memset(e->nv->psum_ok, 1, (size_t)e->nv->plan->ngroups);
}

/* ---- gathers with the parameters in the file ------------------------------------------------
 * A gather's own slice is read from the file into a staging slot (a positioned read: the host
 * waits for the disk) and uploaded from there on the copy stream; a slot is reused once the
 * upload made from it ZNV_STAGE gathers ago is done (a copy wait, satisfied without waiting as
 * long as prefetch runs at most ZNV_STAGE - 1 groups ahead: zoffload_prefetch_groups). */
zinc_status zoffload_nvme_own_to_device(zinc_engine_t *e, int g, void *dst, int counted)
{
    struct znv *nv = e->nv;
    const zdev_iface_t *D = e->dev->iface;
    const zplan_group *G = &e->plan.groups[g];
    size_t n = G->slice * zeng_dsize(e);
    int k = nv->stage_next++ % ZNV_STAGE;
    char *slot = nv->stage + (size_t)k * nv->stage_slot;
    zinc_status s = nv->stage_ticket[k] ? D->copy_wait(e->dev, nv->stage_ticket[k]) : ZINC_OK;
    if (s != ZINC_OK)
        return zeng_fail(e, s, "stage 3: offload_param nvme: waiting for a staging slot: %s",
                         e->dev->err);
    s = nv_read(&nv->dev, slot, (char *)e->h_param16 + G->shard_off * zeng_dsize(e), n);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "stage 3: offload_param nvme: reading the own slice of group "
                         "'%s': %s%s", G->name, nv->dev.err,
                         s == ZINC_ERR_IO ? " (the scratch file no longer holds the parameters: "
                                            "resume from the last checkpoint)" : "");
    if (e->frozen && !nv->psum_ok[g] && e->cfg.zinc.nvme_checksum) {
        /* a frozen engine: the first read after a write sets the sum later reads are held to */
        nv->psum[g] = param_pieces_sum(e, g, G->shard_off, G->shard_off + G->slice, slot);
        nv->psum_ok[g] = 1;
        nv->pchecked[g] = 1;
    } else if (nv->psum_ok[g] &&
               param_pieces_sum(e, g, G->shard_off, G->shard_off + G->slice, slot) != nv->psum[g]) {
        nv->lost = ZNV_LOST_CHANGED16;
        return zeng_fail(e, ZINC_ERR_CORRUPT, "stage 3: offload_param nvme: the own slice of "
                         "group '%s' in %s reads back other bytes than were written (its "
                         "checksum differs): the disk or another process changed the scratch "
                         "file; the parameters in it are no longer whole: resume from the last "
                         "checkpoint", G->name, znvme_path(nv->file));
    }
    s = D->upload_async(e->dev, dst, slot, n);
    if (s == ZINC_OK) s = D->copy_fence(e->dev, &nv->stage_ticket[k]);
    if (s == ZINC_OK) s = D->copy_join(e->dev);
    if (s != ZINC_OK)
        return zeng_fail(e, s, "stage 3: staging the own slice of group '%s' for its all-gather: "
                         "%s", G->name, e->dev->err);
    if (counted) e->offload_bytes[1] += n;
    return ZINC_OK;
}

zinc_status zinc_nvme_bytes(const zinc_engine_t *e, uint64_t *file_bytes, uint64_t *read,
                            uint64_t *written)
{
    if (!e) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_nvme_bytes: engine is NULL");
    if (file_bytes) *file_bytes = e->nv ? zoffload_nvme_file_bytes(e) : 0;
    if (read) *read = e->nv ? e->nv->io[0] : 0;
    if (written) *written = e->nv ? e->nv->io[1] : 0;
    return ZINC_OK;
}

/* ---- the step's pipeline ------------------------------------------------------------------- */

typedef struct {
    zinc_engine_t *e;
    struct znv *nv;
} znv_run;

static float *chunk_buf(const znv_run *r, int c, int state)
{
    return r->nv->buf + ((size_t)(c % r->nv->nbuf) * ZNV_STATES + (size_t)state) * r->nv->E;
}

static char *chunk_pbuf(const znv_run *r, int c)
{
    return r->nv->pbuf + (size_t)(c % r->nv->nbuf) * r->nv->E * zeng_dsize(r->e);
}

/* Elements of chunk c in the file (whole blocks: the last chunk's tail is the padding) and in
 * the shard. */
static size_t chunk_io_elems(const znv_run *r, int c)
{
    size_t lo = (size_t)c * r->nv->E, spad = r->nv->stream / 4;
    return spad - lo < r->nv->E ? spad - lo : r->nv->E;
}

/* A checksum of chunk c's master, m and v in its buffer, as they go to (or came from) the file:
 * on the host device's threads (one thread's XXH3 cost a quarter of a disk-bound step on a
 * 2-core machine). */
static uint64_t chunk_sum(const znv_run *r, int c)
{
    size_t bytes = chunk_io_elems(r, c) * 4;
    uint64_t h = 0;
    for (int st = 0; st < ZNV_STATES; st++)
        if (zk_cpu_checksum(r->e->host, chunk_buf(r, c, st), bytes, h ^ (uint64_t)(st + 1) << 56,
                            &h) != ZINC_OK)
            return 0; /* (a cpu device and real buffers: cannot fail) */
    return h;
}

/* Outside the step: chunk c's master, m and v read whole into its buffer (b = c % nbuf) and
 * compared with the sum the step wrote, unless the buffer holds it already. */
static zinc_status chunk_check(struct znv *nv, size_t c)
{
    int b = (int)(c % (size_t)nv->nbuf);
    if (nv->cached[b] == (long)c) return ZINC_OK;
    nv->cached[b] = -1;
    znv_run r = {nv->e, nv};
    size_t bytes = chunk_io_elems(&r, (int)c) * 4;
    for (int st = 0; st < ZNV_STATES; st++) {
        uint64_t off = (uint64_t)st * nv->stream + (uint64_t)c * nv->E * 4;
        zinc_status s = znvme_pread(nv->file, off, chunk_buf(&r, (int)c, st), bytes);
        if (s != ZINC_OK) return io_fail(&nv->dev, s);
    }
    if (chunk_sum(&r, (int)c) != nv->sum[c]) {
        nv->lost = ZNV_LOST_CHANGED;
        snprintf(nv->dev.err, sizeof nv->dev.err, "%s: chunk %zu of %zu reads back other bytes "
                 "than the last step wrote (its checksum differs): the disk or another process "
                 "changed the scratch file; the optimizer state is no longer whole: resume from "
                 "a checkpoint saved before", znvme_path(nv->file), c, nv->nchunks);
        return ZINC_ERR_CORRUPT;
    }
    nv->cached[b] = (long)c;
    return ZINC_OK;
}

/* Outside the step, with offload_param nvme: group g's own slice of the 16-bit stream read and
 * compared with the sum the step (or a refresh) wrote, once after each write of the stream. */
static zinc_status group_check(struct znv *nv, int g)
{
    if (!nv->psum_ok[g] || nv->pchecked[g]) return ZINC_OK;
    const zplan_group *G = &nv->plan->groups[g];
    size_t bytes = G->slice * nv->pd;
    /* read into the staging slot the next gather takes (the largest slice fits; no host memory
     * beyond the plan's), once the upload last made from it is done */
    int k = nv->stage_next % ZNV_STAGE;
    char *tmp = nv->stage + (size_t)k * nv->stage_slot;
    zdev_t *dev = nv->e->dev;
    if (nv->stage_ticket[k] && dev->iface->copy_wait(dev, nv->stage_ticket[k]) != ZINC_OK) {
        snprintf(nv->dev.err, sizeof nv->dev.err, "%s: waiting for a staging slot to check group "
                 "'%s': %.200s", znvme_path(nv->file), G->name, dev->err);
        return ZINC_ERR_IO;
    }
    uint64_t off = (uint64_t)ZNV_STATES * nv->stream + (uint64_t)G->shard_off * nv->pd;
    zinc_status s = znvme_pread(nv->file, off, tmp, bytes);
    if (s != ZINC_OK) {
        io_fail(&nv->dev, s);
    } else if (param_pieces_sum(nv->e, g, G->shard_off, G->shard_off + G->slice, tmp) !=
               nv->psum[g]) {
        nv->lost = ZNV_LOST_CHANGED16;
        snprintf(nv->dev.err, sizeof nv->dev.err, "%s: the own slice of group '%s' reads back "
                 "other bytes than were written (its checksum differs): the disk or another "
                 "process changed the scratch file; the parameters in it are no longer whole: "
                 "resume from a checkpoint saved before", znvme_path(nv->file), G->name);
        s = ZINC_ERR_CORRUPT;
    } else {
        nv->pchecked[g] = 1;
    }
    return s;
}

static zinc_status nv_io_fail(znv_run *r, zinc_status s, const char *what, int c)
{
    r->nv->lost = ZNV_LOST_IO;
    return zeng_fail(r->e, s, "zinc_step: offload_optimizer nvme: %s chunk %d of %d: %s; the "
                     "optimizer state in the scratch file is no longer whole: resume from the "
                     "last checkpoint", what, c, (int)r->nv->nchunks, znvme_error(r->nv->file));
}

static zinc_status wait_write(znv_run *r, int b)
{
    if (!r->nv->written[b]) return ZINC_OK;
    r->nv->written[b] = 0;
    return znvme_wait(r->nv->file, r->nv->wt[b]);
}

/* One state's part of a chunk, in requests of aio.block_size bytes (DeepSpeed's unit of I/O;
 * the store keeps at most aio.queue_depth of them in flight). *ticket: the last one's. */
static zinc_status chunk_io(znv_run *r, int write, uint64_t off, void *buf, size_t bytes,
                            uint64_t *ticket)
{
    size_t block = (size_t)r->e->cfg.aio.block_size;
    for (size_t done = 0; done < bytes; done += block) {
        size_t n = bytes - done < block ? bytes - done : block;
        zinc_status s = write ? znvme_write_async(r->nv->file, off + done, (char *)buf + done, n, ticket)
                              : znvme_read_async(r->nv->file, off + done, (char *)buf + done, n, ticket);
        if (s != ZINC_OK) return s;
    }
    return ZINC_OK;
}

/* Chunk c's master, m and v between the file and its buffer, counted; *ticket: the last one's. */
static zinc_status state_io(znv_run *r, int c, int write, uint64_t *ticket)
{
    size_t k = chunk_io_elems(r, c);
    for (int st = 0; st < ZNV_STATES; st++) {
        uint64_t off = (uint64_t)st * r->nv->stream + (uint64_t)c * r->nv->E * 4;
        zinc_status s = chunk_io(r, write, off, chunk_buf(r, c, st), k * 4, ticket);
        if (s != ZINC_OK) return nv_io_fail(r, s, write ? "writing back" : "reading", c);
        r->nv->io[write] += k * 4;
    }
    return ZINC_OK;
}

static zinc_status issue_read(znv_run *r, int c)
{
    int b = c % r->nv->nbuf;
    /* the buffer's last chunk must be on disk before the buffer takes this one */
    zinc_status s = wait_write(r, b);
    if (s != ZINC_OK) return nv_io_fail(r, s, "writing back", c - r->nv->nbuf);
    return state_io(r, c, 0, &r->nv->rt[b]);
}

static zinc_status issue_write(znv_run *r, int c)
{
    int b = c % r->nv->nbuf;
    if (r->e->cfg.zinc.nvme_checksum) {
        r->nv->sum[c] = chunk_sum(r, c);
        r->nv->sum_ok[c] = 1;
    }
    zinc_status s = state_io(r, c, 1, &r->nv->wt[b]);
    if (s != ZINC_OK) return s;
    if (r->nv->param) {   /* the Adam's 16-bit output: the parameter shard's chunk */
        param_sums_add(r->e, (size_t)c, chunk_pbuf(r, c));
        size_t d = zeng_dsize(r->e), k = chunk_io_elems(r, c);
        uint64_t off = (uint64_t)ZNV_STATES * r->nv->stream + (uint64_t)c * r->nv->E * d;
        s = chunk_io(r, 1, off, chunk_pbuf(r, c), k * d, &r->nv->wt[b]);
        if (s != ZINC_OK) return nv_io_fail(r, s, "writing back", c);
        r->nv->io[1] += k * d;
    }
    r->nv->written[b] = 1;
    if (r->nv->behind) return ZINC_OK;
    s = wait_write(r, b);
    return s == ZINC_OK ? ZINC_OK : nv_io_fail(r, s, "writing back", c);
}

zinc_status zoffload_nvme_adam(zinc_engine_t *e, zk_adam_args *a)
{
    struct znv *nv = e->nv;
    if (nv->lost)
        return zeng_fail(e, ZINC_ERR_IO, "zinc_step: offload_optimizer nvme: %s: the optimizer "
                         "state was lost to %s; resume from the last checkpoint",
                         znvme_path(nv->file), lost_why(nv));
    size_t d = zeng_dsize(e), S = e->plan.shard_numel;
    int n = (int)nv->nchunks;
    znv_run r = {e, nv};
    drop_cached(nv);   /* the step's own use of the buffers */
    /* No write is in flight here: a step waits for all of its own before it returns, and one that
     * fails with a write in flight marks the state lost (refused above). Were one left, issue_read
     * would still wait for it: chunk c is always written from, and read into, buffer c % nbuf. */
    int predownloaded = e->grad_host;
    /* The gradient: in h_grad already at stages 2-3 (predownloaded; then only the gathers'
     * uploads from the host shard may be in flight); at stage 1 every group's download, waited
     * for before the first chunk. */
    zinc_status s = predownloaded ? ZINC_OK : zoffload_download(e, 0, e->plan.ngroups);
    if (s != ZINC_OK) return s;
    double t = zeng_now();
    if (predownloaded) {
        s = zoffload_grad_settle(e);
        if (s == ZINC_OK) s = zoffload_settle(e);
    } else {
        s = zoffload_wait_copies(e);
    }
    e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
    if (s != ZINC_OK) return s;
    int next = 0;
    for (int c = 0; c < n; c++) {
        for (; next < n && next <= c + nv->ahead; next++)
            if ((s = issue_read(&r, next)) != ZINC_OK) return s;
        s = znvme_wait(nv->file, nv->rt[c % nv->nbuf]);
        e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
        if (s != ZINC_OK) return nv_io_fail(&r, s, "reading", c);
        if (nv->sum_ok[c] && chunk_sum(&r, c) != nv->sum[c]) {
            nv->lost = ZNV_LOST_CHANGED;
            return zeng_fail(e, ZINC_ERR_CORRUPT, "zinc_step: offload_optimizer nvme: chunk %d of "
                             "%d of %s reads back other bytes than the last step wrote (its "
                             "checksum differs): the disk or another process changed the scratch "
                             "file; the optimizer state is no longer whole: resume from the last "
                             "checkpoint", c, n, znvme_path(nv->file));
        }
        size_t lo = (size_t)c * nv->E, hi = lo + nv->E < S ? lo + nv->E : S;
        zk_adam_args ca = *a;
        ca.master = chunk_buf(&r, c, 0);
        ca.m = chunk_buf(&r, c, 1);
        ca.v = chunk_buf(&r, c, 2);
        ca.grad = (const char *)e->h_grad + lo * zeng_gsize(e);  /* fp32 sums too */
        ca.param_out = nv->param ? chunk_pbuf(&r, c) : (char *)e->h_param16 + lo * d;
        ca.param_dtype = e->dtype;
        s = zeng_adam_range(e, e->host, &ca, lo, hi);
        e->phase_s[ZINC_PHASE_ADAM] += zeng_lap(&t);
        if (s != ZINC_OK) {
            if (c > 0) nv->lost = ZNV_LOST_STEP; /* chunks before it hold the new step */
            return zeng_fail(e, s, "zinc_step: offload: host adam: %s", e->host->err);
        }
        /* the stream changes from chunk 0's write on: the sums start over there (a step that
         * failed before it leaves the file, and the sums, as they were) */
        if (c == 0 && nv->param) param_sums_begin(nv);
        if ((s = issue_write(&r, c)) != ZINC_OK) return s;
        if ((s = zoffload_upload_range(e, lo, hi)) != ZINC_OK) {
            nv->lost = ZNV_LOST_STEP;
            return s;
        }
    }
    for (int b = 0; b < nv->nbuf; b++)
        if ((s = wait_write(&r, b)) != ZINC_OK) return nv_io_fail(&r, s, "writing back", n - 1);
    if (nv->param) param_sums_done(e);
    /* The all-gather (or the persistent refresh) that follows reads the uploaded slices. */
    s = e->dev->iface->copy_join(e->dev);
    e->phase_s[ZINC_PHASE_COPY] += zeng_lap(&t);
    if (s != ZINC_OK) return zeng_fail(e, s, "zinc_step: offload: joining the copies: %s", e->dev->err);
    return ZINC_OK;
}

zinc_status zoffload_nvme_refresh(zinc_engine_t *e)
{
    struct znv *nv = e->nv;
    size_t S = e->plan.shard_numel;
    if (nv->param) param_sums_begin(nv);
    drop_cached(nv);   /* its own use of the buffers */
    for (size_t lo = 0; lo < S; lo += nv->E) {
        size_t k = S - lo < nv->E ? S - lo : nv->E, d = zeng_dsize(e);
        char *dst = nv->param ? nv->pbuf : (char *)e->h_param16 + lo * d;
        /* unchecked (the step checks every chunk it reads back, before training on it): a
         * checked read here read master, m and v of every chunk after a zinc_param_set */
        zinc_status s = nv_read(&nv->dev, nv->buf, e->master + lo, k * 4);
        if (s == ZINC_OK)
            s = e->host->iface->cast(e->host, dst, e->dtype, nv->buf, ZINC_DTYPE_FP32, k, 1.0f);
        /* with the parameters in the file: from the chunk buffer into their stream */
        if (s == ZINC_OK && nv->param) {
            s = nv_upload(&nv->dev, (char *)e->h_param16 + lo * d, nv->pbuf, k * d);
            param_sums_add(e, lo / nv->E, nv->pbuf);
        }
        if (s != ZINC_OK)
            return zeng_fail(e, s, "offload_optimizer nvme: converting the master: %s%s",
                             nv->dev.err, e->host->err);
    }
    if (nv->param) param_sums_done(e);
    return ZINC_OK;
}
