/*
 * device.h — the device layer: a backend vtable the engine calls for memory and kernels.
 *
 * Two implementations: cpu/ (portable C + AVX2/AVX-512, threaded; always built) and cuda/
 * (built when nvcc is found). Every CUDA kernel has its CPU reference here, and tests compare
 * them on the same inputs. Optional methods may be NULL. Nothing outside kernels/cuda/ and the
 * build knows whether CUDA exists: the engine asks zdev_open("cuda") and gets UNSUPPORTED.
 */
#ifndef ZINC_KERNELS_DEVICE_H
#define ZINC_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

/* Arguments of one fused Adam/AdamW step over a contiguous shard of n elements.
 *
 *   g  = grad[i] * grad_scale                          (unscale + clip in one scalar)
 *   if !adamw and weight_decay: g += weight_decay * p  (Adam's L2 penalty)
 *   if adamw:   p = p * (1 - lr * weight_decay)        (decoupled decay on the pre-update weight)
 *   m  = beta1 * m + (1 - beta1) * g
 *   v  = beta2 * v + (1 - beta2) * g * g
 *   p  = p - (lr / bias_c1) * m / (sqrt(v) / sqrt(bias_c2) + eps)
 *   param_out[i] = (param_dtype) p
 *
 * bias_c1 = 1 - beta1^t and bias_c2 = 1 - beta2^t, or 1 and 1 without bias correction.
 * The result of element i depends only on element i's inputs and the scalars, never on n,
 * on where i falls in the buffer, or on the thread count: SIMD and scalar paths give the same
 * bits (they use the same operations, fused multiply-adds included). */
typedef struct zk_adam_args {
    float *master;          /* [n] fp32 master weights, updated in place */
    float *m;               /* [n] Adam first moment */
    float *v;               /* [n] Adam second moment */
    const void *grad;       /* [n] gradient of grad_dtype, as accumulated (loss-scaled) */
    zinc_dtype grad_dtype;
    void *param_out;        /* [n] working copy written in param_dtype, or NULL to skip */
    zinc_dtype param_dtype;
    size_t n;
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale;       /* 1 / (loss_scale * clip_coef) */
    float bias_c1, bias_c2;
    int adamw;              /* 1: decoupled weight decay; 0: L2 added to the gradient */
} zk_adam_args;

/* Gradient statistics over n elements of dtype: sum of squares (in double, summed over fixed
 * blocks of ZK_STATS_BLOCK elements and then over blocks in order, so the result does not depend
 * on the thread count) and whether any element is inf or nan. */
#define ZK_STATS_BLOCK 4096
typedef struct zk_grad_stats {
    double sumsq;
    int nonfinite;
} zk_grad_stats;

typedef struct zdev zdev_t;

typedef struct zdev_iface {
    const char *name;   /* "cpu", "cuda" */
    int counts_bytes;   /* alloc/free keep d->in_use, so d->limit can be enforced */
    /* Memory. alloc returns zeroed memory aligned to 64 bytes, or NULL (with a message in
     * d->err). A backend with counts_bytes keeps d->in_use and refuses an allocation that would
     * take it past d->limit (zdev_set_limit). */
    void *(*alloc)(zdev_t *d, size_t bytes);
    void (*free)(zdev_t *d, void *p);
    zinc_status (*memset0)(zdev_t *d, void *p, size_t bytes);
    /* Device-to-device copy (host-to-host on cpu). */
    zinc_status (*copy)(zdev_t *d, void *dst, const void *src, size_t bytes);
    /* Host <-> device. On cpu these are memcpy. */
    zinc_status (*upload)(zdev_t *d, void *dst_dev, const void *src_host, size_t bytes);
    zinc_status (*download)(zdev_t *d, void *dst_host, const void *src_dev, size_t bytes);
    /* Asynchronous host <-> device copies, for the offload pipeline (engine/offload.c): the host
     * works while they run. A copy queued here starts after everything queued on the device
     * before it. copy_fence gives a ticket for the copies queued so far; copy_wait blocks the
     * host until they are done (only then may it read what was downloaded or rewrite what was
     * uploaded); after copy_join, work queued on the device starts only once every queued copy is
     * done. CUDA runs them on a copy stream of its own; the cpu device defers each copy to the
     * first copy_wait or copy_join that covers it, so a caller that forgets a wait reads stale
     * data in the CPU tests instead of only on a GPU (ZINC_CPU_ASYNC_COPY=eager copies when
     * queued; =late keeps a download's host side back to its copy_wait and aborts on a host
     * change of a copy's host memory before that wait: cpu_device.c). */
    zinc_status (*upload_async)(zdev_t *d, void *dst_dev, const void *src_host, size_t bytes);
    zinc_status (*download_async)(zdev_t *d, void *dst_host, const void *src_dev, size_t bytes);
    zinc_status (*copy_fence)(zdev_t *d, uint64_t *ticket);
    zinc_status (*copy_wait)(zdev_t *d, uint64_t ticket);
    zinc_status (*copy_join)(zdev_t *d);
    /* Page-locks host memory allocated elsewhere (offload_optimizer.pin_memory), so that copies
     * to and from it are direct and truly asynchronous. Optional: NULL where host memory is the
     * device's own (cpu). unpin_host takes the pointer pin_host was given. */
    zinc_status (*pin_host)(zdev_t *d, void *p, size_t bytes);
    void (*unpin_host)(zdev_t *d, void *p);
    /* Kernels. */
    zinc_status (*adam_step)(zdev_t *d, const zk_adam_args *a);
    zinc_status (*grad_stats)(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                              zk_grad_stats *out);
    /* The same statistics accumulated into out[2] in DEVICE memory: out[0] = sum of squares,
     * out[1] = 1.0 when non-finite else 0.0; with add != 0 they are added in (sumsq +=,
     * flag = max). Queued without a host wait where the device has streams: the engine sums
     * every slice this way, all-reduces out and reads the two numbers once per step. */
    zinc_status (*grad_stats_acc)(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                  double *out, int add);
    /* dst[i] = (dst_dt) (src[i] * scale), n elements; scale 1 for a plain cast. */
    zinc_status (*cast)(zdev_t *d, void *dst, zinc_dtype dst_dt, const void *src,
                        zinc_dtype src_dt, size_t n, float scale);
    /* acc[i] += x[i], computed in fp32 and rounded once to acc_dt. acc_dt is x_dt, or fp32
     * with x 16-bit (the widening sum of data_types.grad_accum_dtype "fp32"); another pair is
     * ZINC_ERR_INVALID_ARG. */
    zinc_status (*accumulate)(zdev_t *d, void *acc, zinc_dtype acc_dt, const void *x,
                              zinc_dtype x_dt, size_t n);
    /* Waits for all work queued on the device (no-op on cpu). Optional. */
    zinc_status (*sync)(zdev_t *d);
    void (*close)(zdev_t *d);
} zdev_iface_t;

struct zdev {
    const zdev_iface_t *iface;
    void *ctx;              /* backend state */
    char err[512];          /* message of the last failing call */
    uint64_t limit;         /* bytes alloc may hold at once, 0 = no limit (zdev_set_limit) */
    uint64_t in_use;        /* bytes held by live allocations (backends with counts_bytes) */
    int users;              /* comms whose buffers live here (zdev_use / zdev_unuse): a comm may
                               touch the device until it is destroyed, so zdev_close refuses
                               while any is left */
    uint64_t host_waits;    /* calls that made the host wait for the device: upload, download,
                               copy_wait (counted by each backend, also on the cpu, where the
                               wait is free, so tests there see where a GPU would stall) and
                               zinc_engine_sync (counted by the engine) */
};

/* Opens a device backend: "cpu" (threads: 0 = automatic) or "cuda".
 * @return ZINC_ERR_UNSUPPORTED when the backend is not built or no device is present. */
zinc_status zdev_open(const char *name, int threads, int device_index, zdev_t **out);
void zdev_close(zdev_t *d);
/* A comm that stages through or runs on the device's memory takes it at create and gives it back
 * at destroy. Closing a device that a comm still uses is a programming error (the comm's destroy
 * would then read freed device state): zdev_close reports it on stderr and aborts. */
void zdev_use(zdev_t *d);
void zdev_unuse(zdev_t *d);

/* Caps the bytes the device's alloc may hold at once (0: no cap), so that a machine without a
 * GPU can prove a plan fits a GPU's memory (zinc.device_memory_limit). Allocations past it fail
 * like an out-of-memory device, with "device memory limit" in d->err.
 * On cuda it caps below the card. @return ZINC_ERR_UNSUPPORTED for a backend that does not count
 * its bytes (none today). */
zinc_status zdev_set_limit(zdev_t *d, uint64_t bytes);

/* The CPU backend, always present. */
zinc_status zdev_cpu_open(int threads, zdev_t **out);
/* The CUDA backend; ZINC_ERR_UNSUPPORTED in builds without CUDA. */
zinc_status zdev_cuda_open(int device_index, zdev_t **out);

/* "CUDA 13.0, cuBLAS 13.x, NCCL 2.x" for a build with CUDA; NULL without. Needs no device. */
const char *zdev_cuda_version(void);

/* Scalar conversions shared by every CPU path (round to nearest even; nan stays nan). */
uint16_t zk_f32_to_f16(float f);
float zk_f16_to_f32(uint16_t h);
uint16_t zk_f32_to_bf16(float f);
float zk_bf16_to_f32(uint16_t b);

/* Reads element i of a buffer of dtype dt as float / writes it (CPU only). */
float zk_load(const void *p, zinc_dtype dt, size_t i);
void zk_store(void *p, zinc_dtype dt, size_t i, float x);

/* CPU reference kernels: scalar, single-threaded, the definition the SIMD, threaded and CUDA
 * kernels are tested against. */
void zk_ref_adam_step(const zk_adam_args *a);
void zk_ref_grad_stats(const void *g, zinc_dtype dt, size_t n, zk_grad_stats *out);

#endif
