/*
 * zdev_cuda.h — what the CUDA device offers beyond the zdev vtable, for the engine and tools.
 * Plain C, no CUDA headers: it can be included in every build. Builds without CUDA get the
 * stubs of kernels/cuda/absent.c (ZINC_ERR_UNSUPPORTED / NULL / 0).
 *
 * Stream rules: every op of a CUDA zdev (vtable or below) is queued on the device's one compute
 * stream, in call order. Host memory passed to upload/download may be reused when the call
 * returns (both wait for their copy). Work the caller queues on other streams must be ordered
 * against the compute stream by the caller (cudaEventRecord + cudaStreamWaitEvent on
 * zdev_cuda_stream(d)).
 *
 * The overflow-skip path without a host round trip (how the engine is meant to use it):
 *     zdev_cuda_grad_stats_dev(d, grad, dt, n, stats, 0);          stats: device double[2]
 *     zcomm_all_reduce(nccl, stats, 2, ZDT_F64, 1.0f);                (norm², overflow) summed
 *     zdev_cuda_adam_step_guarded(d, &args, stats);                   returns on the device when
 *                                                                     stats say overflow
 *     download(stats) for the loss scaler and the log: the one host sync of the step, which can
 *     also be deferred to the next step.
 * Today the engine reads the statistics on the host (grad_stats) before deciding; that is the one
 * allowed sync and works unchanged. grad_scale (clip) must then be known before the launch; a
 * device-side clip factor is not implemented.
 */
#ifndef ZINC_KERNELS_CUDA_ZDEV_CUDA_H
#define ZINC_KERNELS_CUDA_ZDEV_CUDA_H

#include <stddef.h>

#include "kernels/device.h"

/* The number of CUDA devices this process sees; 0 when none, with the reason (driver missing,
 * no device, ...) written to why (n bytes) if why is not NULL. */
int zdev_cuda_device_count(char *why, size_t n);

/* The CUDA ordinal of a CUDA device, -1 for any other device. */
int zdev_cuda_ordinal(zdev_t *d);

/* The compute stream of a CUDA device (a cudaStream_t), NULL for any other device. */
void *zdev_cuda_stream(zdev_t *d);

/* Marks: a point of the compute stream that a foreign CUDA stream can wait for (on the device,
 * no host wait) without waiting for what is queued after it. zdev_cuda_marks_reserve creates
 * marks 0..n-1 (outside the step: the engine's finalize); zdev_cuda_mark records mark `id` (one
 * reserved; recording it again moves it) after everything queued so far; zdev_cuda_wait_mark
 * makes `stream` (a cudaStream_t of the same device) wait for the last record of `id` (none
 * yet: no wait). Any other device has nothing to wait for: all three return ZINC_OK. */
zinc_status zdev_cuda_marks_reserve(zdev_t *d, int n);
zinc_status zdev_cuda_mark(zdev_t *d, int id);
zinc_status zdev_cuda_wait_mark(zdev_t *d, int id, void *stream);

/* grad_stats into device memory: out_dev[0] = sum of squares, out_dev[1] = 1.0 if not finite
 * else 0.0 — the same numbers zk_ref_grad_stats gives, queued, no host wait. With add != 0 the
 * call's result is added into out_dev (sumsq +=, flag |=) as a host would add per-slice results.
 * out_dev must not be modified by other streams until the compute stream passed this call. */
zinc_status zdev_cuda_grad_stats_dev(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                     double *out_dev, int add);

/* adam_step that first reads device stats {sumsq, nonfinite} (e.g. after the all-reduce): when
 * nonfinite != 0 or sumsq is not finite, the kernel returns without writing anything. */
zinc_status zdev_cuda_adam_step_guarded(zdev_t *d, const zk_adam_args *a,
                                        const double *stats_dev);

#endif
