/*
 * internal.h — the engine's private state, shared by the engine's files (engine.c, step.c,
 * gather.c, memplan.c, world.c). The layers above see the engine through view.h only (ckpt/)
 * or through include/zinc.h.
 *
 * Buffers by stage (elements; F = plan.flat_numel, S = plan.shard_numel, B = max group padded):
 *
 *   category   stage 0      stage 1      stage 2          stage 3
 *   param16    F (full)     F (full)     F (full)         S (own slices; full groups only
 *                                                          while gathered, in `gather`;
 *                                                          host with offload_param)
 *   grad       F (full)     F (full)     S (accumulated)  S (accumulated)
 *   master,m,v F (full)     S            S                S
 *   bucket     -            -            nbuckets * B     nbuckets * B
 *   gather     -            -            -                ngather * B + persistent groups
 *
 * With zero_optimization.offload_optimizer (stages 1-3, engine/offload.c) the fields master, m
 * and v point to host arrays of S elements (on the engine's `host` device; with "nvme" into a
 * reserved range standing for a file, offload_nvme.c), beside two host buffers of S
 * elements: the gradient shard in the sums' dtype (h_grad, e->gdtype: downloaded at stage 1, the
 * accumulator itself at stages 2-3, where e->grad is then NULL) and the 16-bit result of the host Adam
 * (h_param16; none in fp32 mode with the state in memory, where the master is uploaded as is).
 * The master is then never aliased with param16. zinc_memory reports device bytes,
 * zinc_memory_host these host bytes.
 *
 * With zero_optimization.offload_param too (stage 3 only; e->offload_param), the 16-bit shard
 * itself is host memory: e->param16 is NULL (no device block), h_param16 is the shard (in fp32
 * mode the host master is), the host Adam writes it in place, and every gather uploads the own
 * slice from it into the gather slot (zoffload_own_to_device). Device memory for parameters is
 * then the gather area and the persistent groups only.
 *
 * A frozen engine (zinc_engine_frozen, stage 3 without offload) holds values only: param16 (the
 * shard, S), the gather area and the persistent groups; grad, master, m, v and the buckets are
 * NULL (planned 0, ZMEM_FROZEN). The 16-bit shard is then the value itself: zinc_param_set
 * rounds into it, zinc_param_get widens from it, and nothing reads a master.
 *
 * "Full" buffers are indexed by flat offset (group.flat_off + param.offset); shard buffers by
 * shard offset (group.shard_off + position in the slice). At stage 0 every rank updates the whole
 * flat buffer, but reductions and statistics still go slice by slice so that every stage does
 * the same arithmetic in the same order (bitwise-identical weights across stages).
 */
#ifndef ZINC_ENGINE_INTERNAL_H
#define ZINC_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "config/config.h"
#include "engine/hold.h"
#include "engine/view.h"
#include "kernels/device.h"
#include "optim/optim.h"
#include "shard/comm.h"
#include "shard/plan.h"
#include "zinc.h"

/* A world handle as the public API sees it. */
struct zinc_world {
    int size;
    int is_mpi;
    int is_env;                   /* started by torchrun/srun: one rank per process, NCCL only */
    int mpi_rank;                 /* mpi and env worlds: this process's rank */
    int we_initialised_mpi;
    zlocal_world_t *local;        /* local worlds */
    /* mpi worlds: the comms of this process's live CPU engines, each its own duplicate of
     * MPI_COMM_WORLD, so that zinc_world_abort reaches the ranks blocked in any of them */
    pthread_mutex_t comms_mu;
    zcomm_t **comms;
    int ncomms, comms_cap;
    /* mpi worlds, after zinc_world_abort with no comm alive: its reason, for the next comm */
    int aborted;
    char abort_why[256];
};

/* An engine's comm joins its MPI world's list for zinc_world_abort (ZINC_ERR_NOMEM when the
 * list cannot grow) and leaves it before it is destroyed; leaving one not there is a no-op. */
zinc_status zworld_add_comm(zinc_world_t *w, zcomm_t *c);
void zworld_remove_comm(zinc_world_t *w, zcomm_t *c);

/* A stage-3 gather slot: groups packed from its start (gather.c). */
typedef struct {
    size_t fill;                  /* elements from the slot's start to the end of its last group */
    int count;                    /* groups in it; 0: empty (fill 0) */
} zgather_slot;

typedef struct zgroup_state {
    int bucket;                   /* stage 2-3: bucket slot holding its gradient, or -1 */
    int gather_slot;              /* stage 3: gather slot holding it (gathered or prefetched), or -1 */
    size_t gather_pos;            /* stage 3, in a slot: its first element's offset in `gather` */
    int held;                     /* stage 3: between the user's zinc_gather and zinc_release */
    int persistent;               /* stage 3: below the persistence threshold, always gathered */
    size_t persist_off;           /* persistent: element offset in e->persist */
    int ready;                    /* zinc_grads_ready was called this micro-step: 1, or
                                     ZREADY_FAILED when its hand-over returned an error (the
                                     gradient partly or not in the sums: what follows names that
                                     failure, not a misuse of the calls) */
    int acc_on_host;              /* grad_host: h_grad holds the group's sum of this window */
} zgroup_state;

#define ZREADY_FAILED 2


/* A group's own optimizer values: zinc_group_set_weight_decay's, zinc_group_set_lr's,
 * zinc_group_set_betas' and zinc_group_set_eps'; NAN where it has none (the config's decay, betas
 * and eps, the engine's lr). */
typedef struct {
    double weight_decay, lr, beta1, beta2, eps;
} zgroup_hparams;

struct zinc_engine {
    zcfg cfg;
    zhold *hold;                  /* the device buffers' lifetime (hold.c): views may outlive e */
    zinc_world_t *world;
    int owns_world;
    zcomm_t *comm;
    zdev_t *dev;
    int rank, world_size, stage;
    zinc_dtype dtype;             /* working dtype (param16, buckets, collectives) */
    zinc_dtype gdtype;            /* the gradient sums' dtype (e->grad, h_grad, acc_tmp): the
                                     working dtype, or fp32 with data_types.grad_accum_dtype
                                     "fp32" (stages 1-3: the config refuses stage 0) */
    int bucketed;                 /* the model adds into group buckets (zinc_param_grad) that
                                     zinc_grads_ready empties: stages 2-3 (reduced there), and
                                     stage 1 with fp32 sums (added into the sums there) */
    int frozen;                   /* zinc_engine_frozen: values only (stage 3, no offload);
                                     the training calls refused (zeng_check_trains) */
    /* zinc_states_offload (states_away.c): the host copies of the categories moved off the
     * device (ZINC_MEM_MASTER, _ADAM_M, _ADAM_V; NULL where at home), their bytes, and whether
     * each is page-locked. The calls that read or write them are refused meanwhile
     * (zeng_check_home). */
    void *away[ZINC_MEM_COUNT];
    uint64_t away_bytes[ZINC_MEM_COUNT];
    int away_pinned[ZINC_MEM_COUNT];

    zplan plan;
    zgroup_hparams *group_hp;     /* [plan.ngroups]: a group's own Adam values, NAN if none */
    double lr_override;           /* zinc_set_lr's learning rate; NAN: the config's schedule */
    double betas_override[2];     /* zinc_set_betas's; NAN: the config's OneCycle momentum */
    int grads_reduced;            /* zinc_grads_reduce made this window's reduction already
                                     (stage 0): zinc_step does not make it again */
    int boundary_override;        /* zinc_set_accumulation_boundary's 0 or 1; -1: zinc's count */
    int finalized;
    zgroup_state *gstate;         /* [plan.ngroups] */

    /* Device buffers (see the table above). */
    void *param16;
    void *grad;                   /* with grad_external: the caller's, or NULL between windows */
    int grad_external;            /* zinc_grad_buffer_external: the caller lends the gradient
                                     buffer per accumulation window (zinc_grad_buffer_attach) */
    float *master, *m, *v;
    void *bucket;                 /* [nbuckets * max_group_padded] */
    void *gather;                 /* [ngather * max_group_padded]: slots of groups packed in turn */
    void *persist;                /* stage 3: persistent groups, full and back to back */
    size_t persist_numel;
    /* Stage 3 prefetch: the order of zinc_gather calls of the first micro-step (the trace), and
     * where the current micro-step is in it (-1 once it left the traced order). */
    int *trace;                   /* [trace_cap] */
    int trace_len, trace_cap, trace_done, trace_pos;
    double *stats;                /* [2] device: sum of squares, non-finite flag of the step */
    zeng_background background;   /* a higher layer's work in flight (an async save), view.h */
    int nbuckets, ngather;
    int *bucket_owner;            /* [nbuckets]: group using it or -1 */
    int bucket_next;              /* where group_bucket's search for a free bucket starts: the one
                                     after the last taken, so buckets are used in rotation */
    zgather_slot *gslots;         /* [ngather] */
    int gather_open;              /* the slot the last gathered group went into, or -1 */
    int64_t gather_live;          /* elements of the groups in the slots */
    int64_t gather_ahead;         /* of those, the prefetched ones not yet held */

    uint64_t planned[ZINC_MEM_COUNT];           /* device bytes */
    uint64_t allocated[ZINC_MEM_COUNT];

    /* Offload (offload.c): host-resident optimizer state, allocated on `host` (a cpu device of
     * its own, so it never counts against the device's memory limit) and updated by its Adam. */
    int offload;                  /* offload_optimizer "cpu" at stages 1-3 */
    int offload_param;            /* offload_param "cpu" at stage 3 (implies offload) */
    int own_uploads_pending;      /* uploads queued from the host's 16-bit source (gathers'
                                     with offload_param, the step's own slices) that the host
                                     may not have seen finish (zoffload_settle) */
    int threads;                  /* host threads (the engine's, or the automatic count) */
    zdev_t *host;                 /* NULL without offload */
    void *h_grad;                 /* host [shard_numel] e->gdtype: the reduced grad shard */
    void *h_param16;              /* host [shard_numel] working dtype: Adam's 16-bit output */
    uint64_t host_planned[ZINC_MEM_COUNT];      /* host bytes (zinc_memory_host) */
    uint64_t host_allocated[ZINC_MEM_COUNT];
    uint64_t offload_bytes[2];    /* step copies since finalize: [0] device->host, [1] host->device */
    double phase_s[ZINC_PHASE_COUNT]; /* zinc_step_seconds */
    int grad_host;                /* offload at stages 2-3: the reduced gradient shard accumulates
                                     in h_grad (offload.c); e->grad is NULL */
    void *wide;                   /* zcfg_reduces_fp32: device scratch of the largest group in
                                     fp32, after the buckets: the bucket widened, reduced there */
    void *acc_tmp;                /* grad_host: device scratch of the largest slice, after the
                                     buckets in their block */
    int grad_copies_pending;      /* grad_host: downloads into h_grad the host has not waited for */
    double host_stats[2];         /* grad_host: the statistics taken on the host, uploaded into
                                     stats asynchronously (so they must outlive the call) */
    int *ochunk;                  /* [nochunk + 1]: first group of each pipeline chunk, then ngroups */
    int nochunk;
    void *pinned[3];              /* host buffers pinned on the device (pin_memory), to unpin */
    struct znv *nv;               /* offload_optimizer "nvme" (offload_nvme.c): master, m and v
                                     point into a reserved range standing for its file */

    zengine_state st;
    char *config_warnings;        /* the config's warnings at create, one per line; "" when none */
    char *config_json;            /* the resolved config (zcfg_to_json), for zinc_engine_config_json */
    char partial_load[512];       /* the tag a failed zinc_ckpt_load had begun to apply ("": none):
                                     steps and saves are refused until a load succeeds */
    char err[1024];
};

/* A usage error inside the collective sequence (docs/engine.md, "Failure"): a call after
 * zinc_finalize that should have entered, or led to, a collective the other ranks wait in
 * (zinc_step, zinc_grads_ready, zinc_gather in the wrong state). Sets the error as zeng_fail
 * does and, with more than one rank, aborts the world so that the others return
 * ZINC_ERR_ABORTED naming this rank and the error at once instead of after comm_timeout_s.
 * Purely local errors (bad arguments, calls before zinc_finalize) use zeng_fail. */
zinc_status zeng_fail_sequence(zinc_engine_t *e, zinc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CUDA engines launched as processes (gpu_share.c). zeng_open_cuda_mpi, for an mpirun world:
 * when the ranks share GPUs (a node with more ranks than GPUs, or ZINC_SHARE_DEVICE=1 on any
 * rank) it opens e->dev (GPU local_rank % GPUs) and e->comm (the staged comm over a new mpi comm,
 * on the world's list); otherwise it opens nothing and sets *use_nccl. Collective: every rank
 * calls it and every rank reaches the same verdict. zeng_check_env_cuda_world, for a
 * torchrun/srun world: ZINC_ERR_UNSUPPORTED, saying to use mpirun, when ZINC_SHARE_DEVICE=1 or
 * the node has more ranks (LOCAL_WORLD_SIZE) than GPUs. Errors are in zinc_last_error(NULL). */
zinc_status zeng_open_cuda_mpi(zinc_engine_t *e, double timeout_s, int *use_nccl);
zinc_status zeng_check_env_cuda_world(void);

/* 1 when the current micro-step is known to end the accumulation window: zinc_set_accumulation_
 * boundary's value, else zinc's count (gradient_accumulation_steps - 1 micro-steps passed).
 * Always 0 with managed_gradient_accumulation false, where zinc_step itself is the boundary. */
int zeng_last_micro(const zinc_engine_t *e);

/* 1 when the gradient buffer is the caller's (zinc_grad_buffer_external) and none is attached
 * for the current window, so e->grad is NULL where zinc plans one. zeng_need_grad_buffer:
 * ZINC_ERR_USAGE naming `fn` in that case (a call that reads or writes the buffer; through
 * zeng_fail_sequence when `collective`), else OK. */
int zeng_grad_detached(const zinc_engine_t *e);
zinc_status zeng_need_grad_buffer(zinc_engine_t *e, const char *fn, int collective);

/* ZINC_ERR_INVALID_ARG (message "<fn>: unknown group ...") unless `group` is a registered
 * group's id. */
zinc_status zeng_check_group_id(zinc_engine_t *e, int group, const char *fn);

/* The opening of a call that needs a finalized engine: ZINC_ERR_INVALID_ARG for a NULL engine,
 * ZINC_ERR_USAGE before zinc_finalize ("<fn>: ..."); _group also checks the group's id. */
zinc_status zeng_check_ready(zinc_engine_t *e, const char *fn);
/* zinc_engine_destroy's part: the host copies zinc_states_offload made, unpinned and freed. */
void zstates_free(zinc_engine_t *e);
zinc_status zeng_check_ready_group(zinc_engine_t *e, int group, const char *fn);

/* A group's weight decay: its zinc_group_set_weight_decay value, else the config's. */
float zeng_group_weight_decay(const zinc_engine_t *e, int group);

/* Runs the Adam kernel of `d` over groups [g0, g1), which lie back to back in the buffers `a`
 * points into (a->master, m, v, grad, param_out at group g0's start): one call per run of
 * consecutive groups with the same Adam values (zeng_group_adam_args). shard: offsets are the
 * groups' shard_off/slice (a rank's shard), else flat_off/padded (the full flat buffer). */
zinc_status zeng_adam_groups(zinc_engine_t *e, zdev_t *d, const zk_adam_args *a, int g0, int g1,
                             int shard);

/* The same over the shard elements [lo, hi), which may begin and end inside groups (the NVMe
 * offload's fixed-size chunks): `a` points at element lo of each buffer; each group's part gets
 * the group's values. The Adam is element-wise, so where a range is cut changes no bit. */
zinc_status zeng_adam_range(zinc_engine_t *e, zdev_t *d, const zk_adam_args *a, size_t lo,
                            size_t hi);

/* Monotonic seconds, and the seconds since *t (which it moves to now): the step's phase clock. */
double zeng_now(void);
double zeng_lap(double *t);

/* The background slot's poll (view.h), ZINC_OK when nothing is in flight. */
zinc_status zeng_background_poll(zinc_engine_t *e);

/* Element sizes: the working dtype's (param16, buckets, gather buffers, collectives) and the
 * gradient sums' (e->grad, h_grad, acc_tmp: e->gdtype, fp32 with grad_accum_dtype "fp32"). */
static inline size_t zeng_dsize(const zinc_engine_t *e) { return zinc_dtype_size(e->dtype); }
static inline size_t zeng_gsize(const zinc_engine_t *e) { return zinc_dtype_size(e->gdtype); }
/* The t of the next Adam update's bias corrections: the updates applied so far, Adam's lead over
 * them (zinc_engine_set_adam_lead), and this one. */
static inline int64_t zeng_adam_t(const zinc_engine_t *e) { return e->st.step + e->st.adam_lead + 1; }

/* Options of the memory plan: what is offloaded, ZMEM_OFFLOAD_OPTIMIZER (master, m, v at stages
 * 1-3) and ZMEM_OFFLOAD_PARAM (the 16-bit shard at stage 3; only with the former), and
 * ZMEM_GRAD_FP32: the gradient sums are fp32 (data_types.grad_accum_dtype "fp32", stages 1-3;
 * the config refuses stage 0; at stage 1 with 16-bit buckets as at stages 2-3);
 * ZMEM_WIRE_FP32: and reduced in fp32 (communication_data_type "fp32", zcfg_reduces_fp32), at
 * stages 2-3 through an fp32 copy of the largest group after the buckets; ZMEM_FROZEN: a frozen
 * engine (zinc_engine_frozen), which plans the 16-bit shard and the gather area only. */
enum {
    ZMEM_OFFLOAD_OPTIMIZER = 1, ZMEM_OFFLOAD_PARAM = 2, ZMEM_GRAD_FP32 = 4, ZMEM_WIRE_FP32 = 8,
    ZMEM_FROZEN = 16
};

/* Whether the model adds its gradient into group buckets that zinc_grads_ready empties (step.c
 * hand_over): at stages 2-3 (reduced there), and at stage 1 with fp32 gradient sums (added into
 * them there); otherwise into the gradient buffer itself. The engine's e->bucketed; zinc
 * estimate's buckets. */
static inline int zmem_bucketed(int stage, int grad_fp32)
{
    return stage >= 2 || (stage == 1 && grad_fp32);
}

/* Memory plan (memplan.c): bytes per category for a plan/stage/dtype, before allocating: device
 * bytes in `bytes`, host bytes (offload; all zero without) in `host` (may be NULL). `offload` is
 * a mask of the ZMEM_* options above. */
void zmem_plan(const zplan *p, int stage, zinc_dtype dtype, int offload, int nbuckets, int ngather,
               size_t persist_numel, uint64_t bytes[ZINC_MEM_COUNT], uint64_t host[ZINC_MEM_COUNT]);

/* Offload (offload.c). */
/* At finalize, before any allocation: ZINC_ERR_NOMEM (with the error set, naming the first host
 * category past it) when host_planned exceeds zinc.host_memory_limit. The plan is the same on
 * every rank (the shard is padded to one size), so every rank fails alike without a collective. */
zinc_status zoffload_check_limit(zinc_engine_t *e);
/* At finalize, after the device blocks: opens the host device and allocates the host state. */
zinc_status zoffload_alloc(zinc_engine_t *e);
void zoffload_free(zinc_engine_t *e);
/* The step's update with the state on the host: grad shard device->host (stage 1; at stages 2-3,
 * grad_host, it is in h_grad already), the fused Adam on the host (args `a` with
 * the scalars set), the 16-bit result host->device into param16's own slices. The all-gather
 * (stages 1-2) or the persistent refresh (stage 3) is the caller's. */
zinc_status zoffload_adam(zinc_engine_t *e, zk_adam_args *a);
/* Stages 2-3 (grad_host), zinc_grads_ready after the group's reduce-scatter: adds the own slice
 * `own` (device, own_dt: the working dtype, or fp32 when reduced in fp32) to the group's sum in
 * h_grad, through acc_tmp, all on the copy stream and the device (no host wait). */
zinc_status zoffload_reduce_to_host(zinc_engine_t *e, int group, const void *own,
                                    zinc_dtype own_dt);
/* grad_host: before the host reads or writes h_grad, waits for the downloads into it (one wait;
 * none when none is pending). */
zinc_status zoffload_grad_settle(zinc_engine_t *e);
/* zeng_refresh_params' first half with host state: param16's own slices from the master. */
zinc_status zoffload_refresh_own(zinc_engine_t *e);
/* Queues the reduced gradient slices of groups [g0, g1) device -> host, into h_grad at their
 * shard offsets: from the shard (stages 2-3) or from the own slices of the full buffer (stage 1). */
zinc_status zoffload_download(zinc_engine_t *e, int g0, int g1);
/* Waits for every copy queued so far (a fence and its wait). */
zinc_status zoffload_wait_copies(zinc_engine_t *e);
/* Queues the 16-bit result of shard elements [lo, hi) host -> device (counted); nothing with
 * offload_param. */
zinc_status zoffload_upload_range(zinc_engine_t *e, size_t lo, size_t hi);
/* The host 16-bit shard with offload_param (h_param16, or the host master in fp32 mode with
 * the state in memory). */
void *zoffload_param16(const zinc_engine_t *e);
/* Stage 3: group g's own 16-bit slice into `dst` on the device (its place in a gather slot or in
 * the persistent block, before the in-place all-gather): a device copy from param16, or with
 * offload_param an upload from the host shard, counted in zinc_offload_bytes when `counted`. */
zinc_status zoffload_own_to_device(zinc_engine_t *e, int g, void *dst, int counted);
/* Offload: before the host rewrites the host shard or the master outside the step
 * (zinc_param_set, zinc_param_local_set, a checkpoint load, a refresh), the host waits for the
 * uploads queued from them (offload_param's gathers, the last step's own slices); nothing to
 * wait for (and no wait counted) when none is pending. */
zinc_status zoffload_settle(zinc_engine_t *e);

/* NVMe offload (offload_nvme.c), offload_optimizer "nvme". */
/* The NVMe tier's sizes from the shard and the settings (zinc estimate uses it too). */
typedef struct {
    uint64_t shard;                /* elements of a rank's shard */
    size_t max_slice;              /* the largest group's slice */
    zinc_dtype dtype;
    int64_t sub_group_size;
    int buffer_count, pipeline_read, pipeline_write;
    int param;                     /* offload_param "nvme" too */
    int frozen;                    /* a frozen engine's: the 16-bit stream alone (needs param) */
} znv_shape;
typedef struct {
    size_t align_elems, spad, E;   /* block in elements; the shard padded to it; chunk elements */
    int nbuf;                      /* chunk buffers */
    uint64_t state_stream, param_stream, file_bytes;
    uint64_t host_state_each;      /* host bytes of master, of m, of v (the chunk buffers) */
    uint64_t host_param16;         /* host bytes of the 16-bit shard's category: with param, the
                                      Adam's 16-bit chunk buffers and the gathers' slots */
    uint64_t pbuf_bytes;           /* of those, the Adam's chunk buffers (0: no param, frozen) */
    uint64_t stage_slot;           /* bytes of one gather staging slot (0 without param) */
} znv_layout;
void zoffload_nvme_layout(const znv_shape *in, znv_layout *out);
/* Whether the engine keeps a scratch file (offload_optimizer "nvme"); a frozen engine, which
 * has no optimizer state, only with offload_param "nvme" too: the file then holds its shard. */
int zoffload_uses_nvme(const zinc_engine_t *e);
/* At finalize, after zmem_plan: the host categories become the chunk buffers (and h_param16). */
void zoffload_nvme_plan(zinc_engine_t *e);
/* The scratch file's size (master, m, v of the shard, each rounded up to whole blocks). */
uint64_t zoffload_nvme_file_bytes(const zinc_engine_t *e);
/* From zoffload_alloc: the file, the chunk buffers, master/m/v pointing into the reserved range. */
zinc_status zoffload_nvme_open(zinc_engine_t *e);
/* Closes and removes the file; NULL-safe (nothing without NVMe). */
void zoffload_nvme_close(zinc_engine_t *e);
/* The device whose memory the file is (state_dev), or NULL without NVMe. */
zdev_t *zoffload_nvme_dev(zinc_engine_t *e);
/* zeng_state_rewrite's NVMe part: phase 0 lets a load write into a lost state; 1 ends it, the
 * state still lost; 2 ends it with the whole state written: whole again. */
void zoffload_nvme_restore(zinc_engine_t *e, int phase);
/* offload_param "nvme": the gathers' host staging slots (uploaded from on the copy stream) and
 * their bytes; NULL and 0 without them. */
void *zoffload_nvme_staging(zinc_engine_t *e, size_t *bytes);
/* zoffload_adam with the state in the file: the read / Adam / write pipeline over chunks. */
zinc_status zoffload_nvme_adam(zinc_engine_t *e, zk_adam_args *a);
/* offload_param "nvme": the device whose memory holds the 16-bit shard (the file's, else the
 * host one), whether it is the file, and a gather's own slice read from it and uploaded. */
zdev_t *zoffload_param16_dev(zinc_engine_t *e);
int zoffload_param16_in_file(const zinc_engine_t *e);
zinc_status zoffload_nvme_own_to_device(zinc_engine_t *e, int g, void *dst, int counted);
/* How many groups stage 3 may prefetch ahead of use: with the 16-bit shard in the file, one less
 * than the gather staging slots (each reuse of a slot waits on the host for its last upload, so
 * a deeper burst of prefetches would make the host wait for the device); else no limit. */
int zoffload_prefetch_groups(const zinc_engine_t *e);
/* zoffload_refresh_own's conversion: h_param16 from the master in the file. */
zinc_status zoffload_nvme_refresh(zinc_engine_t *e);

/* Stage 3 gather schedule (gather.c). */
/* At finalize: persistent groups, the number of gather buffers, the trace. */
zinc_status zgather_plan(zinc_engine_t *e);
/* How many CUDA marks zinc_stream_wait_gather uses (created at finalize: zdev_cuda_marks_reserve). */
int zgather_marks(const zinc_engine_t *e);
/* After the update of a step (and after a load): refresh the persistent groups. Collective;
 * `counted` selects the counting wrappers (training traffic) or the raw backend. */
zinc_status zgather_refresh_persistent(zinc_engine_t *e, int counted);
/* At zinc_step: forgets prefetched groups nobody used and ends the trace's first recording. */
void zgather_step_end(zinc_engine_t *e);
/* Before a group's values change outside a step (zinc_param_set): forgets its prefetched copy,
 * which holds the old values; refused (ZINC_ERR_USAGE, naming `who`) while the caller holds it
 * gathered, whose view would not show the change. Persistent groups need nothing: their one
 * copy is written in place. */
zinc_status zgather_forget(zinc_engine_t *e, int group, const char *who);
/* After the working copy changed as a whole outside a step (a checkpoint's load): forgets every
 * prefetched copy not held, which holds the old values. A backward that raised midway leaves
 * the groups it had prefetched, which only zinc_step dropped: the forward after a load used
 * them. */
void zgather_drop_prefetched(zinc_engine_t *e);
/* 1 when the fp32 working copy doubles as the master (fp32 mode, stages 0 and 3, no offload; with
 * offload_param the host master doubles as the host shard, which the plan counts as master). */
int zmem_master_aliased(int stage, zinc_dtype dtype, int offload);
/* The plan of a bare parameter count: one group of `params` elements laid out for `world` ranks
 * (the plan points into the struct: keep it in place while the plan is used). */
typedef struct {
    zplan_param prm;
    zplan_group grp;
    zplan plan;
} zmem_bare;
void zmem_bare_plan(zmem_bare *b, uint64_t params, int world);
/* The same from a bare parameter count (zinc estimate): one group of `params` elements. */
void zmem_estimate(uint64_t params, int world, int stage, zinc_dtype dtype, int offload,
                   uint64_t bytes[ZINC_MEM_COUNT], uint64_t host[ZINC_MEM_COUNT]);

/* Comm volume (volume.c): the payload bytes per collective that one optimizer step of
 * `accum` micro-steps moves on each rank, in zinc_comm_bytes' accounting (docs/comm-volume.md),
 * with no stage-3 persistent groups (stage3_param_persistence_threshold 0). `dtype` is the
 * communication element type, `rdtype` that of the gradient's reduce-scatter (fp32 with
 * zcfg_reduces_fp32, else dtype). ZVOL_STATS_BYTES is the step's (norm², overflow) all-reduce. */
#define ZVOL_STATS_BYTES (2 * 2 * sizeof(double))
void zvol_plan(const zplan *p, int stage, zinc_dtype dtype, zinc_dtype rdtype, int accum,
               uint64_t bytes[ZINC_COLL_COUNT]);
/* The same from a bare parameter count, one group (as zmem_estimate). */
void zvol_estimate(uint64_t params, int world, int stage, zinc_dtype dtype, zinc_dtype rdtype,
                   int accum, uint64_t bytes[ZINC_COLL_COUNT]);

#endif
