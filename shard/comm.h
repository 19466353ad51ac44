/*
 * comm.h — the comm layer: collectives over the ranks of a world, behind a vtable.
 *
 * Backends: `local` (ranks are threads of one process; comm_local.c), `mpi` (one process per
 * rank; comm_mpi.c, built when MPI is found), `nccl` (GPU; kernels/cuda side, its own issue).
 *
 * Semantics every backend keeps, so that results are identical whichever runs:
 *  - Reductions are sums computed in fp32 (fp64 for ZINC_DT_F64), over ranks in rank order
 *    0, 1, ..., N-1, multiplied by `scale` and rounded once to the buffer's dtype
 *    (shard/reduce.c holds that arithmetic, shared by the backends).
 *  - reduce_scatter / all_gather work in place on a buffer of n = N * slice elements; rank r's
 *    slice is elements [r*slice, (r+1)*slice).
 *  - Every collective has a timeout (zcomm_set_timeout) and fails with ZINC_ERR_TIMEOUT instead of
 *    hanging; after an abort (any rank), every rank's collectives fail with ZINC_ERR_ABORTED.
 *  - Byte counters (per rank) in the ZeRO paper's accounting: RS and AG of B bytes count B,
 *    all-reduce counts 2B, broadcast counts B.
 */
#ifndef ZINC_SHARD_COMM_H
#define ZINC_SHARD_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

/* Element types of collectives: the public dtypes plus fp64 for small statistics. */
typedef enum { ZDT_F32 = ZINC_DTYPE_FP32, ZDT_F16 = ZINC_DTYPE_FP16, ZDT_BF16 = ZINC_DTYPE_BF16,
               ZDT_F64 = 3 } zdt;

size_t zdt_size(zdt t);

typedef struct zcomm zcomm_t;

typedef struct zcomm_iface {
    const char *name;
    /* In place: buf (n elements) becomes scale * sum over ranks, on every rank. Any n. */
    zinc_status (*all_reduce)(zcomm_t *c, void *buf, size_t n, zdt t, float scale);
    /* In place: n = size * slice; afterwards this rank's slice holds scale * sum over ranks of
     * that slice; the other slices of buf are left unspecified. */
    zinc_status (*reduce_scatter)(zcomm_t *c, void *buf, size_t n, zdt t, float scale);
    /* In place: n = size * slice; every rank contributes its own slice, afterwards all slices
     * are present on every rank. */
    zinc_status (*all_gather)(zcomm_t *c, void *buf, size_t n, zdt t);
    zinc_status (*broadcast)(zcomm_t *c, void *buf, size_t bytes, int root);
    zinc_status (*barrier)(zcomm_t *c);
    /* Marks the world failed (see zinc_world_abort). */
    void (*abort)(zcomm_t *c, const char *why);
    void (*destroy)(zcomm_t *c);
} zcomm_iface_t;

struct zcomm {
    const zcomm_iface_t *iface;
    void *ctx;                              /* backend state */
    int rank, size;
    double timeout_s;                       /* default 300 */
    uint64_t bytes[ZINC_COLL_COUNT];        /* counters, ZeRO accounting */
    struct zdev *mem_dev;                   /* non-NULL: buffers must be memory of this device
                                               (nccl, staged); NULL: host memory (local, mpi) */
    void *host_stage;                       /* mem_dev memory the host collectives stage through,
                                               kept from call to call (comm.c), freed at destroy */
    size_t host_stage_bytes;
    char err[512];                          /* message of the last failing collective */
};

/* Shared state of a local world (all ranks of one process). */
typedef struct zlocal_world zlocal_world_t;
zinc_status zlocal_world_create(int size, zlocal_world_t **out);
void zlocal_world_destroy(zlocal_world_t *w);
void zlocal_world_abort(zlocal_world_t *w, int rank, const char *why);
/* The comm handle of rank `rank` of a local world; one per rank (thread). */
zinc_status zcomm_local_create(zlocal_world_t *w, int rank, zcomm_t **out);

/* MPI: ZINC_ERR_UNSUPPORTED in builds without MPI. zmpi_init initialises MPI if needed
 * (MPI_THREAD_MULTIPLE not required) and reports this process's rank and size. */
zinc_status zmpi_init(int *rank, int *size, int *we_initialised);
/* MPI_Finalize (for MPI that zmpi_init initialised), then frees what MPI could still write.
 * zinc's end of the job runs inside MPI_Finalize, whoever calls it (a callback zmpi_init sets on
 * MPI_COMM_SELF): an exit notice to every peer, carrying this process's recorded failure if any
 * (a peer waiting for this rank in a collective, an engine comm's creation or a world broadcast
 * then fails it instead of timing out or waiting forever), and a barrier of every rank. After a
 * failure of an mpi comm of this process (timeout, abort, MPI error) or one zmpi_note_failure
 * recorded, the barrier waits at most that comm's timeout (at most 60 s) or the recorded grace,
 * then MPI_Abort(MPI_COMM_WORLD, status), which does not return, since MPI_Finalize would wait
 * for the lost rank forever. */
void zmpi_finalize(void);
/* Records a failure of this process that no comm recorded, for the end of the job to act on with
 * `grace_s` (zinc_world_abort on an mpi world with no engine alive: nothing can tell the other
 * ranks, and one of them may be blocked in a collective this process will never join). The
 * first failure recorded wins. */
#define ZMPI_LONE_ABORT_GRACE_S 10.0
void zmpi_note_failure(zinc_status s, const char *why, double grace_s);
/* A broadcast of bytes over MPI_COMM_WORLD from root (every process calls it): MPI_Ibcast
 * through a staging block, waited for without a deadline until done, or until a peer's exit
 * notice says it will never join (ZINC_ERR_ABORTED; buf untouched). For bootstrapping something
 * else over the MPI world (zinc_world_broadcast). */
zinc_status zmpi_world_bcast(void *buf, size_t bytes, int root);
/* A barrier over MPI_COMM_WORLD (MPI_Ibarrier), waited for as zmpi_world_bcast waits
 * (zinc_world_barrier). */
zinc_status zmpi_world_barrier(void);
/* The MPI library's version string, or NULL in builds without MPI. */
const char *zmpi_version(void);
zinc_status zcomm_mpi_create(zcomm_t **out);
/* How many mpi comms of this process are inside a collective now, and how many times a thread
 * entered zinc's MPI calls while another was inside (0 unless the thread rule of comm_mpi.c was
 * broken). Both 0 in builds without MPI. */
void zmpi_thread_stats(int *in_collective, long *overlaps);

/* A comm over device buffers made of a host comm (comm_staged.c): every collective stages the
 * buffer through host memory. Takes ownership of `inner` (destroyed with it, or at once when
 * creation fails); `dev` must outlive it. Reserve the
 * largest collective's bytes before the first call (no allocation inside a step). */
struct zdev;
zinc_status zcomm_staged_create(zcomm_t *inner, struct zdev *dev, zcomm_t **out);
zinc_status zcomm_staged_reserve(zcomm_t *c, size_t bytes);
int zcomm_is_staged(const zcomm_t *c);
/* The backend's name ("local", "mpi", "nccl"), or "staged/<inner>" for a staged comm; static. */
const char *zcomm_backend_name(const zcomm_t *c);

/* Small collectives on HOST buffers whatever the backend (checkpoint bookkeeping, not training
 * traffic, so uncounted): comms over device memory stage them through a temporary device buffer. */
zinc_status zcomm_host_broadcast(zcomm_t *c, void *buf, size_t bytes, int root);
zinc_status zcomm_host_all_reduce_f64(zcomm_t *c, double *buf, size_t n);

void zcomm_destroy(zcomm_t *c);
void zcomm_set_timeout(zcomm_t *c, double seconds);

/* Convenience wrappers that keep the byte counters; the engine calls these, not the iface. */
zinc_status zcomm_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale);
zinc_status zcomm_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale);
zinc_status zcomm_all_gather(zcomm_t *c, void *buf, size_t n, zdt t);
zinc_status zcomm_broadcast(zcomm_t *c, void *buf, size_t bytes, int root);
zinc_status zcomm_barrier(zcomm_t *c);

/* shard/reduce.c: the reduction arithmetic every CPU backend uses.
 * out[i] = round_t(scale * (in[0][i] + in[1][i] + ... + in[nin-1][i])), summed in fp32 (fp64 for
 * ZDT_F64) in the order given. `out` may alias in[k] for any k (element-wise in place). */
void zreduce_sum(void *out, const void *const *in, int nin, size_t n, zdt t, float scale);

#endif
