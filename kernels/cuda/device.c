/*
 * device.c — the "cuda" device: the zdev vtable over cudaMalloc'd memory and one compute stream
 * per handle, plus zdev_cuda_version and the extras of zdev_cuda.h.
 *
 * Every op is queued on the handle's compute stream (created non-blocking, so the legacy default
 * stream never serialises against it); only download, upload, grad_stats, sync and close wait on
 * the host. Those waits poll the comm's watcher when one is registered (comm_nccl.c), so a rank
 * that vanished mid-collective ends in ZINC_ERR_TIMEOUT instead of a hang.
 *
 * Kernel calls check their arguments like the CPU backend, compute the per-call scalars on the
 * host with the CPU's own zk_adam_prep (kernels/cpu/ref.c) and launch kernels whose element
 * arithmetic is elem.h's, so results match the CPU bit for bit where docs/cuda.md says so.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
/* nccl.h declares f() without (void); keep -Wstrict-prototypes for our own code. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "base/log.h"
#include "kernels/cpu/elem.h"
#include "kernels/cuda/zcuda.h"
#include "kernels/cuda/zdev_cuda.h"

static const zdev_iface_t cuda_iface;

zcuda *zcu_ctx(zdev_t *d) { return d && d->iface == &cuda_iface ? d->ctx : NULL; }

/* The calling thread's current device is per thread; a handle may be used from any thread. */
static zinc_status enter(zdev_t *d)
{
    ZINC_CUDA_CHECK(d->err, cudaSetDevice(((zcuda *)d->ctx)->device));
    return ZINC_OK;
}

static int grid_cap(const zcuda *c) { return c->sm_count * 8; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zcu_set_watch(zdev_t *d, zcu_watch_fn fn, void *arg)
{
    zcuda *c = zcu_ctx(d);
    if (!c) return;
    c->watch = fn;
    c->watch_arg = arg;
}

/* Waits until `query` says done (cudaSuccess), polling the comm's watcher when one is registered:
 * a few hundred tight queries for the common short wait, then sleeps that grow to 1 ms, asking
 * the watcher each time whether the comm failed or timed out. */
static zinc_status poll_done(zcuda *c, cudaError_t (*query)(void *), void *obj, const char *what,
                             char *err, size_t n)
{
    double t0 = now_s();
    long sleep_ns = 0;
    for (int i = 0;; i++) {
        cudaError_t e = query(obj);
        if (e == cudaSuccess) return ZINC_OK;
        if (e != cudaErrorNotReady) return zcu_fail_cuda(err, n, (int)e, what, __FILE__, __LINE__);
        if (c->watch) {
            zinc_status w = c->watch(c->watch_arg, now_s() - t0, err, n);
            if (w != ZINC_OK) return w;
        }
        if (i > 200) {
            sleep_ns = sleep_ns ? (sleep_ns < 1000000 ? sleep_ns * 2 : 1000000) : 10000;
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
    }
}

static cudaError_t query_stream(void *s) { return cudaStreamQuery((cudaStream_t)s); }
static cudaError_t query_event(void *ev) { return cudaEventQuery((cudaEvent_t)ev); }

zinc_status zcu_wait_stream(zcuda *c, cudaStream_t s, char *err, size_t n)
{
    if (!c->watch) {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return zcu_fail_cuda(err, n, (int)e, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
        return ZINC_OK;
    }
    return poll_done(c, query_stream, (void *)s, "cudaStreamQuery(stream)", err, n);
}

zinc_status zcu_wait(zdev_t *d)
{
    zcuda *c = d->ctx;
    return zcu_wait_stream(c, c->stream, d->err, sizeof d->err);
}

long zcu_vec_head(const void *const *ptrs, const size_t *elem_size, int count)
{
    for (long h = 0; h < 8; h++) {
        int ok = 1;
        for (int i = 0; i < count && ok; i++)
            if (ptrs[i] && ((uintptr_t)ptrs[i] + (uintptr_t)h * elem_size[i]) % 16 != 0) ok = 0;
        if (ok) return h;
    }
    return -1;
}

static int dtype_ok(zinc_dtype dt)
{
    return dt == ZINC_DTYPE_FP32 || dt == ZINC_DTYPE_FP16 || dt == ZINC_DTYPE_BF16;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* Records a live allocation (for d->in_use); 0 when the table cannot grow. */
static int blocks_add(zcuda *c, void *p, size_t bytes)
{
    int ok = 1;
    pthread_mutex_lock(&c->blocks_lock);
    if (c->nblocks == c->cap_blocks) {
        size_t cap = c->cap_blocks ? 2 * c->cap_blocks : 32;
        struct zcu_block *b = realloc(c->blocks, cap * sizeof *b);
        if (b) {
            c->blocks = b;
            c->cap_blocks = cap;
        } else {
            ok = 0;
        }
    }
    if (ok) c->blocks[c->nblocks++] = (struct zcu_block){p, bytes};
    pthread_mutex_unlock(&c->blocks_lock);
    return ok;
}

/* Forgets a live allocation; its size, or 0 for a pointer this device did not hand out. */
static size_t blocks_remove(zcuda *c, void *p)
{
    size_t bytes = 0;
    pthread_mutex_lock(&c->blocks_lock);
    for (size_t i = c->nblocks; i-- > 0;)
        if (c->blocks[i].p == p) {
            bytes = c->blocks[i].bytes;
            c->blocks[i] = c->blocks[--c->nblocks];
            break;
        }
    pthread_mutex_unlock(&c->blocks_lock);
    return bytes;
}

static void *cu_alloc(zdev_t *d, size_t bytes)
{
    zcuda *c = d->ctx;
    void *p = NULL;
    /* The cap of zinc.device_memory_limit, as the cpu device applies it (d->in_use). */
    uint64_t used = __atomic_load_n(&d->in_use, __ATOMIC_RELAXED);
    if (d->limit && (used > d->limit || bytes > d->limit - used)) {
        zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM,
                 "device memory limit: %zu bytes needed, %llu available (limit %llu, %llu in use)",
                 bytes, (unsigned long long)(used > d->limit ? 0 : d->limit - used),
                 (unsigned long long)d->limit, (unsigned long long)used);
        return NULL;
    }
    if (enter(d) != ZINC_OK) return NULL;
    /* cudaMalloc aligns to at least 256 bytes; a zero-byte request still gets a valid pointer. */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        zcu_fail_cuda(d->err, sizeof d->err, (int)e, "cudaMalloc", __FILE__, __LINE__);
        char more[128];
        snprintf(more, sizeof more, " [%zu bytes on device %d]", bytes, c->device);
        strncat(d->err, more, sizeof d->err - strlen(d->err) - 1);
        return NULL;
    }
    e = cudaMemsetAsync(p, 0, bytes, c->stream);
    if (e != cudaSuccess || !blocks_add(c, p, bytes)) {
        if (e != cudaSuccess)
            zcu_fail_cuda(d->err, sizeof d->err, (int)e, "cudaMemsetAsync(p, 0, bytes)", __FILE__, __LINE__);
        else
            zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM, "cuda alloc: out of host memory for "
                     "the table of allocations");
        cudaFree(p);
        return NULL;
    }
    __atomic_add_fetch(&d->in_use, bytes, __ATOMIC_RELAXED);
    return p;
}

static void cu_free(zdev_t *d, void *p)
{
    if (!p) return;
    __atomic_sub_fetch(&d->in_use, blocks_remove(d->ctx, p), __ATOMIC_RELAXED);
    if (enter(d) != ZINC_OK) return;
    /* cudaFree waits for the device; a failure here means the context is already broken and
     * the op that broke it reported it. */
    cudaFree(p);
}

static zinc_status cu_memset0(zdev_t *d, void *p, size_t bytes)
{
    if (!bytes) return ZINC_OK;
    if (!p) return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda memset0: NULL pointer");
    zinc_status s = enter(d);
    if (s) return s;
    ZINC_CUDA_CHECK(d->err, cudaMemsetAsync(p, 0, bytes, ((zcuda *)d->ctx)->stream));
    return ZINC_OK;
}

static zinc_status cu_copy(zdev_t *d, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src) return ZINC_OK;
    if (!dst || !src) return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda copy: NULL pointer");
    zinc_status s = enter(d);
    if (s) return s;
    ZINC_CUDA_CHECK(d->err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                            ((zcuda *)d->ctx)->stream));
    return ZINC_OK;
}

static zinc_status cu_upload(zdev_t *d, void *dst_dev, const void *src_host, size_t bytes)
{
    if (!bytes) return ZINC_OK;
    if (!dst_dev || !src_host)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda upload: NULL pointer");
    zinc_status s = enter(d);
    if (s) return s;
    d->host_waits++;
    ZINC_CUDA_CHECK(d->err, cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice,
                                            ((zcuda *)d->ctx)->stream));
    /* The caller may reuse its buffer on return (pinned sources would otherwise still be read). */
    return zcu_wait(d);
}

static zinc_status cu_download(zdev_t *d, void *dst_host, const void *src_dev, size_t bytes)
{
    if (!bytes) return ZINC_OK;
    if (!dst_host || !src_dev)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda download: NULL pointer");
    zinc_status s = enter(d);
    if (s) return s;
    d->host_waits++;
    ZINC_CUDA_CHECK(d->err, cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost,
                                            ((zcuda *)d->ctx)->stream));
    return zcu_wait(d);
}

static zinc_status cu_sync(zdev_t *d)
{
    zinc_status s = enter(d);
    return s ? s : zcu_wait(d);
}

/* ---- asynchronous copies (device.h) ---------------------------------------------------------- */

static zinc_status copy_async(zdev_t *d, void *dst, const void *src, size_t bytes,
                              enum cudaMemcpyKind kind, const char *what)
{
    if (!bytes) return ZINC_OK;
    if (!dst || !src) return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda %s: NULL pointer", what);
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    /* After everything queued on the compute stream so far (the reduce-scatter that wrote a
     * gradient; the all-gather that still reads the parameters an upload overwrites). */
    ZINC_CUDA_CHECK(d->err, cudaEventRecord(c->copy_after, c->stream));
    ZINC_CUDA_CHECK(d->err, cudaStreamWaitEvent(c->copy_stream, c->copy_after, 0));
    ZINC_CUDA_CHECK(d->err, cudaMemcpyAsync(dst, src, bytes, kind, c->copy_stream));
    return ZINC_OK;
}

static zinc_status cu_upload_async(zdev_t *d, void *dst_dev, const void *src_host, size_t bytes)
{
    return copy_async(d, dst_dev, src_host, bytes, cudaMemcpyHostToDevice, "upload_async");
}

static zinc_status cu_download_async(zdev_t *d, void *dst_host, const void *src_dev, size_t bytes)
{
    return copy_async(d, dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, "download_async");
}

static zinc_status cu_copy_fence(zdev_t *d, uint64_t *ticket)
{
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    uint64_t t = c->copy_fences + 1;
    ZINC_CUDA_CHECK(d->err, cudaEventRecord(c->copy_done[t % ZCU_COPY_EVENTS], c->copy_stream));
    c->copy_fences = t;
    *ticket = t;
    return ZINC_OK;
}

static zinc_status cu_copy_wait(zdev_t *d, uint64_t ticket)
{
    zcuda *c = d->ctx;
    if (ticket == 0) return ZINC_OK;
    if (ticket > c->copy_fences)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda copy_wait: ticket %llu was never handed out (%llu fences)",
                        (unsigned long long)ticket, (unsigned long long)c->copy_fences);
    zinc_status s = enter(d);
    if (s) return s;
    d->host_waits++;
    return poll_done(c, query_event, (void *)c->copy_done[ticket % ZCU_COPY_EVENTS],
                     "cudaEventQuery(copy fence)", d->err, sizeof d->err);
}

static zinc_status cu_copy_join(zdev_t *d)
{
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    ZINC_CUDA_CHECK(d->err, cudaEventRecord(c->copy_joined, c->copy_stream));
    ZINC_CUDA_CHECK(d->err, cudaStreamWaitEvent(c->stream, c->copy_joined, 0));
    return ZINC_OK;
}

static zinc_status cu_pin_host(zdev_t *d, void *p, size_t bytes)
{
    if (!bytes) return ZINC_OK;
    zinc_status s = enter(d);
    if (s) return s;
    ZINC_CUDA_CHECK(d->err, cudaHostRegister(p, bytes, cudaHostRegisterDefault));
    return ZINC_OK;
}

static void cu_unpin_host(zdev_t *d, void *p)
{
    if (p && enter(d) == ZINC_OK) cudaHostUnregister(p);
}

/* ---- kernels --------------------------------------------------------------------------------- */

static zinc_status adam_common(zdev_t *d, const zk_adam_args *a, const double *skip)
{
    if (!a) return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda adam_step: NULL arguments");
    if (!dtype_ok(a->grad_dtype) || (a->param_out && !dtype_ok(a->param_dtype)))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda adam_step: unknown dtype (grad %d, param %d)", (int)a->grad_dtype,
                        (int)a->param_dtype);
    if (!(a->bias_c1 > 0.0f) || !(a->bias_c2 > 0.0f))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda adam_step: bias corrections must be > 0 (got %g, %g); pass 1 and 1 "
                        "without bias correction", (double)a->bias_c1, (double)a->bias_c2);
    if (a->n == 0) return ZINC_OK;
    if (!a->master || !a->m || !a->v || !a->grad)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda adam_step: NULL master, m, v or grad for %zu elements", a->n);
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    /* The scalars come from the CPU's own prep, so both backends start from the same bits. */
    zk_adam_consts k;
    zk_adam_prep(a, &k);
    zcu_adam_consts kk = {.grad_scale = k.grad_scale, .beta1 = k.beta1, .beta2 = k.beta2,
                          .omb1 = k.omb1, .omb2 = k.omb2, .eps = k.eps, .wd = k.wd,
                          .step_size = k.step_size, .rsqrt_bc2 = k.rsqrt_bc2, .decay = k.decay,
                          .l2 = k.l2, .decoupled = k.decoupled};
    const void *ptrs[5] = {a->master, a->m, a->v, a->grad, a->param_out};
    size_t sizes[5] = {4, 4, 4, zinc_dtype_size(a->grad_dtype),
                       a->param_out ? zinc_dtype_size(a->param_dtype) : 0};
    long head = zcu_vec_head(ptrs, sizes, 5);
    ZINC_CUDA_CHECK(d->err, zcu_adam_launch(&kk, a->master, a->m, a->v, a->grad, (int)a->grad_dtype,
                                            a->param_out, (int)a->param_dtype, a->n, head, skip,
                                            grid_cap(c), c->stream));
    return ZINC_OK;
}

static zinc_status cu_adam(zdev_t *d, const zk_adam_args *a) { return adam_common(d, a, NULL); }

/* Queues the statistics of g into out (device {sumsq, nonfinite}); see zcu_stats_total. */
static zinc_status stats_queue(zdev_t *d, const void *g, zinc_dtype dt, size_t n, double *out,
                               int add)
{
    zcuda *c = d->ctx;
    size_t nblocks = (n + ZK_STATS_BLOCK - 1) / ZK_STATS_BLOCK;
    double *acc = c->stats + 2;
    if (nblocks == 0) {
        ZINC_CUDA_CHECK(d->err, zcu_stats_total(c->partials, 0, 1, 1, add, acc, out, c->stream));
        return ZINC_OK;
    }
    for (size_t b0 = 0; b0 < nblocks; b0 += ZCU_STATS_CHUNK_BLOCKS) {
        size_t b1 = nblocks - b0 < ZCU_STATS_CHUNK_BLOCKS ? nblocks : b0 + ZCU_STATS_CHUNK_BLOCKS;
        ZINC_CUDA_CHECK(d->err, zcu_stats_blocks(g, (int)dt, n, b0, b1, c->partials, grid_cap(c),
                                                 c->stream));
        ZINC_CUDA_CHECK(d->err, zcu_stats_total(c->partials, b1 - b0, b0 == 0, b1 == nblocks, add,
                                                acc, out, c->stream));
    }
    return ZINC_OK;
}

static zinc_status cu_grad_stats(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                 zk_grad_stats *out)
{
    if (!out || (!g && n) || !dtype_ok(dt))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda grad_stats: NULL buffer/result or unknown dtype %d", (int)dt);
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    if ((s = stats_queue(d, g, dt, n, c->stats, 0))) return s;
    ZINC_CUDA_CHECK(d->err, cudaMemcpyAsync(c->host_stats, c->stats, 2 * sizeof(double),
                                            cudaMemcpyDeviceToHost, c->stream));
    if ((s = zcu_wait(d))) return s;
    out->sumsq = c->host_stats[0];
    out->nonfinite = c->host_stats[1] != 0.0;
    return ZINC_OK;
}

static zinc_status cu_cast(zdev_t *d, void *dst, zinc_dtype dst_dt, const void *src,
                           zinc_dtype src_dt, size_t n, float scale)
{
    if ((!dst || !src) && n)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda cast: NULL buffer");
    if (!dtype_ok(dst_dt) || !dtype_ok(src_dt))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda cast: unknown dtype (%d -> %d)", (int)src_dt, (int)dst_dt);
    if (dst == src && dst_dt != src_dt)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda cast: in place only between equal dtypes (%s -> %s)",
                        zinc_dtype_name(src_dt), zinc_dtype_name(dst_dt));
    if (n == 0) return ZINC_OK;
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    const void *ptrs[2] = {dst, src};
    size_t sizes[2] = {zinc_dtype_size(dst_dt), zinc_dtype_size(src_dt)};
    ZINC_CUDA_CHECK(d->err, zcu_cast_launch(dst, (int)dst_dt, src, (int)src_dt, n, scale,
                                            zcu_vec_head(ptrs, sizes, 2), grid_cap(c), c->stream));
    return ZINC_OK;
}

static zinc_status cu_accumulate(zdev_t *d, void *acc, zinc_dtype acc_dt, const void *x,
                                 zinc_dtype x_dt, size_t n)
{
    if ((!acc || !x) && n)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG, "cuda accumulate: NULL buffer");
    if (!dtype_ok(acc_dt) || !dtype_ok(x_dt) || (acc_dt != x_dt && acc_dt != ZINC_DTYPE_FP32))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda accumulate: unsupported dtypes (%d += %d)", (int)acc_dt, (int)x_dt);
    if (n == 0) return ZINC_OK;
    zinc_status s = enter(d);
    if (s) return s;
    zcuda *c = d->ctx;
    const void *ptrs[2] = {acc, x};
    size_t sizes[2] = {zinc_dtype_size(acc_dt), zinc_dtype_size(x_dt)};
    ZINC_CUDA_CHECK(d->err, zcu_accumulate_launch(acc, (int)acc_dt, x, (int)x_dt, n,
                                                  zcu_vec_head(ptrs, sizes, 2), grid_cap(c),
                                                  c->stream));
    return ZINC_OK;
}

static void cu_close(zdev_t *d)
{
    if (!d) return;
    zcuda *c = d->ctx;
    if (c) {
        if (cudaSetDevice(c->device) == cudaSuccess) {
            if (c->stream) cudaStreamSynchronize(c->stream);
            if (c->copy_stream) {
                cudaStreamSynchronize(c->copy_stream);
                cudaStreamDestroy(c->copy_stream);
            }
            if (c->copy_after) cudaEventDestroy(c->copy_after);
            if (c->copy_joined) cudaEventDestroy(c->copy_joined);
            for (int i = 0; i < ZCU_COPY_EVENTS; i++)
                if (c->copy_done[i]) cudaEventDestroy(c->copy_done[i]);
            for (int i = 0; i < c->nmarks; i++) cudaEventDestroy(c->marks[i]);
            cudaFree(c->partials);
            cudaFree(c->stats);
            cudaFreeHost(c->host_stats);
            if (c->stream) cudaStreamDestroy(c->stream);
        }
        pthread_mutex_destroy(&c->blocks_lock);
        free(c->marks);
        free(c->blocks);
        free(c);
    }
    free(d);
}

static zinc_status cu_grad_stats_acc(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                     double *out, int add)
{
    return zdev_cuda_grad_stats_dev(d, g, dt, n, out, add);
}

static const zdev_iface_t cuda_iface = {
    .name = "cuda",
    .counts_bytes = 1,
    .alloc = cu_alloc,
    .free = cu_free,
    .memset0 = cu_memset0,
    .copy = cu_copy,
    .upload = cu_upload,
    .download = cu_download,
    .upload_async = cu_upload_async,
    .download_async = cu_download_async,
    .copy_fence = cu_copy_fence,
    .copy_wait = cu_copy_wait,
    .copy_join = cu_copy_join,
    .pin_host = cu_pin_host,
    .unpin_host = cu_unpin_host,
    .adam_step = cu_adam,
    .grad_stats = cu_grad_stats,
    .grad_stats_acc = cu_grad_stats_acc,
    .cast = cu_cast,
    .accumulate = cu_accumulate,
    .sync = cu_sync,
    .close = cu_close,
};

/* ---- opening, versions, extras --------------------------------------------------------------- */

int zdev_cuda_device_count(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (why && n) snprintf(why, n, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError();   /* not sticky; clear it so later calls start clean */
        return 0;
    }
    if (count == 0 && why && n) snprintf(why, n, "the CUDA runtime sees no device");
    return count;
}

zinc_status zdev_cuda_open(int device_index, zdev_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cuda_open: out is NULL");
    *out = NULL;
    char why[256];
    int count = zdev_cuda_device_count(why, sizeof why);
    if (count == 0)
        return zerr_thread(ZINC_ERR_UNSUPPORTED, "zdev_cuda_open: no CUDA device (%s); use "
                           "device 'cpu'", why);
    if (device_index < 0 || device_index >= count)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zdev_cuda_open: device %d requested but this process sees %d CUDA "
                           "device(s); run one process per GPU with LOCAL_RANK < %d, or check "
                           "CUDA_VISIBLE_DEVICES", device_index, count, count);
    zdev_t *d = calloc(1, sizeof *d);
    zcuda *c = calloc(1, sizeof *c);
    zinc_status s = ZINC_OK;
    if (!d || !c) {
        free(d);
        free(c);
        return zerr_thread(ZINC_ERR_NOMEM, "zdev_cuda_open: out of host memory");
    }
    d->iface = &cuda_iface;
    d->ctx = c;
    c->device = device_index;
    pthread_mutex_init(&c->blocks_lock, NULL);
    struct cudaDeviceProp prop;
    ZINC_CUDA_CHECK_GOTO(d->err, cudaSetDevice(device_index), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaGetDeviceProperties(&prop, device_index), s, fail);
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    c->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    /* A GPU older or newer than every image in the binary fails here, not in the first step. */
    ZINC_CUDA_CHECK_GOTO(d->err, zcu_probe(), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking),
                         s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaEventCreateWithFlags(&c->copy_after, cudaEventDisableTiming), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaEventCreateWithFlags(&c->copy_joined, cudaEventDisableTiming), s, fail);
    for (int i = 0; i < ZCU_COPY_EVENTS; i++)
        ZINC_CUDA_CHECK_GOTO(d->err, cudaEventCreateWithFlags(&c->copy_done[i], cudaEventDisableTiming),
                             s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaMalloc((void **)&c->partials,
                                            ZCU_STATS_CHUNK_BLOCKS * sizeof(double)), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaMalloc((void **)&c->stats, 4 * sizeof(double)), s, fail);
    ZINC_CUDA_CHECK_GOTO(d->err, cudaMallocHost((void **)&c->host_stats, 2 * sizeof(double)), s, fail);
    zlog(ZLOG_DEBUG, "device", -1, "cuda device %d: %s, sm_%d%d, %d SMs", device_index, c->name,
         c->cc_major, c->cc_minor, c->sm_count);
    *out = d;
    return ZINC_OK;

fail:
    zerr_thread(s, "zdev_cuda_open(%d): %s", device_index, d->err);
    cu_close(d);
    return s;
}

int zdev_cuda_ordinal(zdev_t *d)
{
    zcuda *c = zcu_ctx(d);
    return c ? c->device : -1;
}

void *zdev_cuda_stream(zdev_t *d)
{
    zcuda *c = zcu_ctx(d);
    return c ? (void *)c->stream : NULL;
}

zinc_status zdev_cuda_marks_reserve(zdev_t *d, int n)
{
    zcuda *c = zcu_ctx(d);
    if (!c || n <= c->nmarks) return ZINC_OK;
    zinc_status s = enter(d);
    if (s) return s;
    cudaEvent_t *m = realloc(c->marks, (size_t)n * sizeof *m);
    if (!m) return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_NOMEM, "cuda marks: out of memory");
    c->marks = m;
    for (; c->nmarks < n; c->nmarks++)
        ZINC_CUDA_CHECK(d->err, cudaEventCreateWithFlags(&c->marks[c->nmarks],
                                                         cudaEventDisableTiming));
    return ZINC_OK;
}

zinc_status zdev_cuda_mark(zdev_t *d, int id)
{
    zcuda *c = zcu_ctx(d);
    if (!c) return ZINC_OK; /* another device: its work is done when queued */
    if (id < 0 || id >= c->nmarks)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda mark: id %d, %d reserved", id, c->nmarks);
    zinc_status s = enter(d);
    if (s) return s;
    ZINC_CUDA_CHECK(d->err, cudaEventRecord(c->marks[id], c->stream));
    return ZINC_OK;
}

zinc_status zdev_cuda_wait_mark(zdev_t *d, int id, void *stream)
{
    zcuda *c = zcu_ctx(d);
    if (!c) return ZINC_OK;
    /* stream NULL: the legacy default stream (PyTorch's outside a torch.cuda.stream block) */
    if (id < 0 || id >= c->nmarks)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda wait_mark: mark %d is not reserved (%d are)", id, c->nmarks);
    zinc_status s = enter(d);
    if (s) return s;
    ZINC_CUDA_CHECK(d->err, cudaStreamWaitEvent((cudaStream_t)stream, c->marks[id], 0));
    return ZINC_OK;
}

zinc_status zdev_cuda_grad_stats_dev(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                     double *out_dev, int add)
{
    if (!zcu_ctx(d)) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cuda_grad_stats_dev: not a cuda device");
    if (!out_dev || (!g && n) || !dtype_ok(dt))
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda grad_stats_dev: NULL buffer/result or unknown dtype %d", (int)dt);
    zinc_status s = enter(d);
    return s ? s : stats_queue(d, g, dt, n, out_dev, add);
}

zinc_status zdev_cuda_adam_step_guarded(zdev_t *d, const zk_adam_args *a, const double *stats_dev)
{
    if (!zcu_ctx(d)) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_cuda_adam_step_guarded: not a cuda device");
    if (!stats_dev)
        return zerr_fmt(d->err, sizeof d->err, ZINC_ERR_INVALID_ARG,
                        "cuda adam_step_guarded: stats_dev is NULL");
    return adam_common(d, a, stats_dev);
}

static char version_buf[1024];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_init(void)
{
    int rt = 0, drv = 0, nv = 0, cb[3] = {0, 0, 0};
    cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cublasGetProperty(MAJOR_VERSION, &cb[0]);
    cublasGetProperty(MINOR_VERSION, &cb[1]);
    cublasGetProperty(PATCH_LEVEL, &cb[2]);
    ncclGetVersion(&nv);
    char drvs[32] = "none";
    if (drv) snprintf(drvs, sizeof drvs, "%d.%d", drv / 1000, (drv % 1000) / 10);
    char why[256], devs[600];
    int count = zdev_cuda_device_count(why, sizeof why);
    if (count > 0) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
            snprintf(devs, sizeof devs, "%d device%s (0: %s, sm_%d%d)", count, count > 1 ? "s" : "",
                     p.name, p.major, p.minor);
        else
            snprintf(devs, sizeof devs, "%d device%s", count, count > 1 ? "s" : "");
    } else {
        snprintf(devs, sizeof devs, "no device (%s)", why);
    }
    /* Compiled-against versions first: they hold with no driver; what was loaded follows. */
    snprintf(version_buf, sizeof version_buf,
             "CUDA %d.%d (runtime %d.%d, driver %s), cuBLAS %d.%d.%d (loaded %d.%d.%d), "
             "NCCL %d.%d.%d (loaded %d.%d.%d); %s",
             CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10, rt / 1000, (rt % 1000) / 10, drvs,
             CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, cb[0], cb[1], cb[2],
             NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, nv / 10000, (nv % 10000) / 100, nv % 100, devs);
}

const char *zdev_cuda_version(void)
{
    pthread_once(&version_once, version_init);
    return version_buf;
}
