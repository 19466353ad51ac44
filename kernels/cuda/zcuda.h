/*
 * zcuda.h — private interface of the CUDA backend (kernels/cuda/ only; it includes CUDA headers).
 *
 * Layers:
 *   - the .cu files hold kernels and `extern "C"` launchers that take a stream, launch, and return
 *     the launch's cudaError_t; they know nothing of zinc_status;
 *   - device.c is the zdev vtable: it validates arguments, calls the launchers on the device's
 *     compute stream and turns every CUDA error into a zinc_status with ZINC_CUDA_CHECK;
 *   - comm_nccl.c is the NCCL comm backend; it reaches the device's stream through zcu_ctx().
 * Every file that includes this one is compiled only when the build found nvcc.
 */
#ifndef ZINC_KERNELS_CUDA_ZCUDA_H
#define ZINC_KERNELS_CUDA_ZCUDA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/elem_math.h"
#include "kernels/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error conversion ------------------------------------------------------------------------
 * ZINC_CUDA_CHECK(buf, call): when `call` does not return cudaSuccess, writes "what failed, where
 * (file:line), the library's message, what to do" into the char array `buf` and returns the
 * zinc_status from the enclosing function (ZINC_ERR_NOMEM for out-of-memory, ZINC_ERR_DEVICE
 * otherwise). ZINC_NCCL_CHECK (comm_nccl.c) and ZINC_CUBLAS_CHECK do the same for their
 * libraries. The _GOTO forms set `s` and jump to a cleanup label instead of returning. */
zinc_status zcu_fail_cuda(char *buf, size_t n, int code, const char *call, const char *file,
                          int line);
zinc_status zcu_fail_cublas(char *buf, size_t n, int code, const char *call, const char *file,
                            int line);
zinc_status zcu_fail_nccl(char *buf, size_t n, int code, const char *call, const char *file,
                          int line);

#define ZINC_CUDA_CHECK(buf, call)                                                            \
    do {                                                                                      \
        cudaError_t zc_e_ = (call);                                                           \
        if (zc_e_ != cudaSuccess)                                                             \
            return zcu_fail_cuda((buf), sizeof(buf), (int)zc_e_, #call, __FILE__, __LINE__);   \
    } while (0)
#define ZINC_CUDA_CHECK_GOTO(buf, call, s, label)                                             \
    do {                                                                                      \
        cudaError_t zc_e_ = (call);                                                           \
        if (zc_e_ != cudaSuccess) {                                                           \
            (s) = zcu_fail_cuda((buf), sizeof(buf), (int)zc_e_, #call, __FILE__, __LINE__);    \
            goto label;                                                                       \
        }                                                                                     \
    } while (0)
#define ZINC_CUBLAS_CHECK(buf, call)                                                          \
    do {                                                                                      \
        int zc_e_ = (int)(call);                                                              \
        if (zc_e_ != 0)                                                                       \
            return zcu_fail_cublas((buf), sizeof(buf), zc_e_, #call, __FILE__, __LINE__);      \
    } while (0)
#define ZINC_NCCL_CHECK(buf, call)                                                            \
    do {                                                                                      \
        int zc_e_ = (int)(call);                                                              \
        if (zc_e_ != 0)                                                                       \
            return zcu_fail_nccl((buf), sizeof(buf), zc_e_, #call, __FILE__, __LINE__);        \
    } while (0)

/* ---- the device's state ---------------------------------------------------------------------- */

/* Polled while the host waits for the device (sync, download, grad_stats). Set by a comm backend
 * whose work the device's stream may be waiting on: it returns non-OK (with a message in err) when
 * that work failed or `waited_s` passed its timeout, so that no host wait hangs forever. */
typedef zinc_status (*zcu_watch_fn)(void *arg, double waited_s, char *err, size_t n);

/* Elements of one grad_stats chunk: the partial sums of at most this many ZK_STATS_BLOCK blocks
 * live in the device scratch at a time, so no call allocates. */
#define ZCU_STATS_CHUNK_BLOCKS 65536
/* Fence events in flight on the copy stream (device.h copy_fence). */
#define ZCU_COPY_EVENTS 64

typedef struct zcuda {
    int device;                 /* CUDA ordinal */
    int sm_count;               /* multiprocessors: sizes the grids */
    int cc_major, cc_minor;
    cudaStream_t stream;        /* the compute stream: every op of this handle runs on it */
    double *partials;           /* device [ZCU_STATS_CHUNK_BLOCKS] grad_stats block sums */
    double *stats;              /* device [4]: {sumsq, nonfinite} of the vtable's grad_stats,
                                   then the running total of the chunks */
    double *host_stats;         /* pinned host [2], where grad_stats lands */
    /* Offload's asynchronous copies (device.h upload_async ... copy_join): a stream of their
     * own, ordered after the compute stream by copy_after at each copy; fence t records
     * copy_done[t % ZCU_COPY_EVENTS] (a re-recorded slot only makes a wait on t wait longer:
     * the stream is in order). */
    cudaStream_t copy_stream;
    cudaEvent_t copy_after, copy_joined;
    cudaEvent_t copy_done[ZCU_COPY_EVENTS];
    uint64_t copy_fences;
    /* Marks (zdev_cuda_mark): events recorded on the compute stream at points the engine names,
     * which another stream waits for instead of for the whole queue (stage 3: one per group,
     * recorded after the group's all-gather, and one past them). Created by
     * zdev_cuda_marks_reserve when the engine is finalized, not inside a step. */
    cudaEvent_t *marks;
    int nmarks;
    /* Live allocations, so that zinc.device_memory_limit can cap the card (d->in_use). */
    struct zcu_block {
        void *p;
        size_t bytes;
    } *blocks;
    size_t nblocks, cap_blocks;
    pthread_mutex_t blocks_lock; /* a comm may free on its own thread */
    zcu_watch_fn watch;         /* NULL, or the comm's health check */
    void *watch_arg;
    char name[256];             /* "NVIDIA H100 80GB HBM3" */
} zcuda;

/* The CUDA state of a device opened by zdev_cuda_open; NULL for any other backend. */
zcuda *zcu_ctx(zdev_t *d);
/* Waits until every op queued on the compute stream finished, polling the watcher. */
zinc_status zcu_wait(zdev_t *d);
/* Same for an arbitrary stream of the device (comm stream); errors go to `err`. */
zinc_status zcu_wait_stream(zcuda *c, cudaStream_t s, char *err, size_t n);
void zcu_set_watch(zdev_t *d, zcu_watch_fn fn, void *arg);

/* ---- launchers (.cu files) --------------------------------------------------------------------
 * Each launches on `s` and returns cudaGetLastError(). `grid_cap` bounds the grid of grid-stride
 * kernels (a few waves of the device's SMs). Element types are zinc_dtype values, plus 3 = fp64
 * for zcu_scale. */

/* The fused step over n elements. `head` elements are done one by one so that all streams are
 * 16-byte aligned from there on (vector path); head < 0 runs every element one by one.
 * skip: NULL, or device {sumsq, nonfinite}: when nonfinite != 0 or sumsq is not finite, every
 * thread returns without writing (the overflow-skip path, no host round trip). */
cudaError_t zcu_adam_launch(const zcu_adam_consts *k, float *master, float *m, float *v,
                            const void *grad, int grad_dt, void *param_out, int param_dt,
                            size_t n, long head, const double *skip, int grid_cap,
                            cudaStream_t s);

/* Partial sums of squares of blocks [blk0, blk1) (ZK_STATS_BLOCK elements from the buffer's
 * start, the last one may end at n) into partials[blk - blk0], each summed exactly as elem.h
 * defines: 16 lanes in element order, then the fixed lane tree. */
cudaError_t zcu_stats_blocks(const void *g, int dt, size_t n, size_t blk0, size_t blk1,
                             double *partials, int grid_cap, cudaStream_t s);
/* acc[0] = (first ? 0 : acc[0]) + partials[0] + ... + partials[count-1], in that order (device
 * scalar acc carries the running total across chunks). With `last`, the call's result goes to
 * out = {sumsq, nonfinite}: out = {total, !isfinite(total)}, or with `add`
 * out = {out[0] + total, out[1] || !isfinite(total)}. */
cudaError_t zcu_stats_total(const double *partials, size_t count, int first, int last, int add,
                            double *acc, double *out, cudaStream_t s);

/* dst[i] = round_dst(src[i] * scale); dst may equal src (same dtype: in-place scaling).
 * head as for zcu_adam_launch. */
cudaError_t zcu_cast_launch(void *dst, int dst_dt, const void *src, int src_dt, size_t n,
                            float scale, long head, int grid_cap, cudaStream_t s);
/* acc[i] = round_acc(acc[i] + x[i]): acc_dt == x_dt, or an fp32 acc (the caller checks). */
cudaError_t zcu_accumulate_launch(void *acc, int acc_dt, const void *x, int x_dt, size_t n,
                                  long head, int grid_cap, cudaStream_t s);
/* buf[i] *= scale for fp64 buffers (the comm's statistics). */
cudaError_t zcu_scale_f64_launch(double *buf, size_t n, double scale, int grid_cap,
                                 cudaStream_t s);
/* Whether this build holds kernels the current device can run (cudaErrorNoKernelImageForDevice
 * otherwise). */
cudaError_t zcu_probe(void);

/* The number of leading elements after which every pointer is 16-byte aligned (each advancing by
 * its element size), or -1 when no such count below 8 exists. Pointers may be NULL (ignored). */
long zcu_vec_head(const void *const *ptrs, const size_t *elem_size, int count);

#ifdef __cplusplus
}
#endif

#endif
