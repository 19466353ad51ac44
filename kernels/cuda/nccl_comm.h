/*
 * nccl_comm.h — the `nccl` comm backend (shard/comm.h semantics on GPU buffers), and the launch
 * helper that goes from a process's environment to an open CUDA device plus its NCCL comm.
 * Plain C, no CUDA headers; builds without CUDA get ZINC_ERR_UNSUPPORTED stubs (absent.c).
 *
 * Buffers: device memory of the zdev the comm was created with. Ordering: a collective runs on
 * the comm's own stream after everything queued on the device's compute stream before the call,
 * and everything queued on the compute stream after the call runs after the collective (events,
 * no host sync). So `grad_stats; all_reduce; adam_step; all_gather` queue back to back.
 * Only barrier (and destroy) wait on the host.
 *
 * Numerics differ from `local`/`mpi` (see docs/cuda.md): NCCL sums in the buffer's dtype in its
 * own order (ring/tree, depending on size and topology), and the scale is applied afterwards by
 * a separate multiply, so fp16/bf16 results are rounded more than once. At world size 1 the
 * collectives are exact copies and the scale is one rounded multiply: bitwise equal to `local`.
 * There (outside an nccl group) no NCCL call is made at all: the scale alone is queued on the
 * compute stream, without the comm stream's two event hops.
 *
 * Failure: an NCCL error or a wait longer than the comm's timeout (zcomm_set_timeout, default
 * 300 s) aborts the communicator (ncclCommAbort) and returns ZINC_ERR_COMM / ZINC_ERR_TIMEOUT;
 * every later collective returns ZINC_ERR_ABORTED. Waits of the device (download, sync,
 * grad_stats) poll the comm's health too, so they cannot hang on a vanished peer either.
 */
#ifndef ZINC_KERNELS_CUDA_NCCL_COMM_H
#define ZINC_KERNELS_CUDA_NCCL_COMM_H

#include <stddef.h>

#include "kernels/cuda/bootstrap.h"
#include "kernels/device.h"
#include "shard/comm.h"

/* Rank 0's half of the bootstrap: a fresh NCCL unique id (ZBOOT_ID_BYTES bytes). */
zinc_status zcomm_nccl_unique_id(unsigned char id[ZBOOT_ID_BYTES]);

/* Collective over the `size` processes of the job: each calls it with its rank and the same id,
 * and waits (at most timeout_s) until all have joined. `dev` must be a CUDA device (one GPU per
 * rank) that outlives the comm. On failure *out is NULL and the message is in
 * zinc_last_error(NULL). */
zinc_status zcomm_nccl_create(zdev_t *dev, int rank, int size,
                              const unsigned char id[ZBOOT_ID_BYTES], double timeout_s,
                              zcomm_t **out);

/* The whole launch in one call, as `zinc train` needs it under mpirun, srun or torchrun:
 * zboot_detect, open the CUDA device local_rank, share rank 0's id (zboot_share_id) and create
 * the comm. info (may be NULL) receives the launch description; on failure *dev and *comm are
 * NULL. If info->mpi_initialised, the caller finalises MPI at exit. */
zinc_status zcomm_nccl_launch(double timeout_s, zboot_info *info, zdev_t **dev, zcomm_t **comm);

/* Batching of small collectives into one NCCL launch (ncclGroupStart/End): collectives called
 * between begin and end are queued together; their scale multiplies run after the group. At
 * most 256 scaled collectives per group. Both return ZINC_ERR_INVALID_ARG for a non-nccl comm. */
zinc_status zcomm_nccl_group_begin(zcomm_t *c);
zinc_status zcomm_nccl_group_end(zcomm_t *c);

#endif
