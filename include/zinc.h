/*
 * zinc.h — the whole public C API of zinc, a ZeRO-style sharded optimizer engine.
 *
 * A training program owns its model: it runs forward and backward itself and hands zinc the
 * parameters (registered once, in groups) and their gradients (written into views zinc gives out).
 * zinc shards the fp32 master weights, Adam moments and — depending on the ZeRO stage — the
 * gradients and 16-bit parameters across the ranks of a "world", reduces the gradients, checks
 * for overflow, clips, updates and gathers the parameters back.
 *
 * One engine per rank of a `local` world at a time, where every rank is a thread of one process
 * (another engine beside it takes a world of its own: world NULL makes a world of one); with the
 * `mpi` world every rank is a process started by mpirun, and each engine has its own duplicate
 * of MPI_COMM_WORLD. Calls marked "collective" must be made by every rank of the world, in the
 * same order.
 *
 * A typical step (see models/ for a complete program):
 *
 *     for each micro-batch:
 *         for each group g in forward order: zinc_gather(e, g); forward(g); zinc_release(e, g);
 *         loss *= zinc_loss_multiplier(e);
 *         for each group g in backward order:
 *             zinc_gather(e, g); add grads into zinc_param_grad(...) views; zinc_release(e, g);
 *             zinc_grads_ready(e, g);
 *         zinc_step(e, &info);            // applies the update at the accumulation boundary
 *
 * Errors: every fallible call returns a zinc_status; zinc_last_error(e) gives the sentence.
 * Library code never exits or aborts the process on bad input. It logs to stderr ("[zinc r0
 * ckpt] ..."): the environment variable ZINC_LOG sets the level, error, warn, info (the
 * default) or debug, or off (nothing, errors neither), per subsystem too: "warn,ckpt=debug".
 */
#ifndef ZINC_H
#define ZINC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ZINC_API
#else
#define ZINC_API __attribute__((visibility("default")))
#endif

/* The version: these three lines are its one source of truth. CMakeLists.txt reads them for the
 * project version, libzinc.so's SONAME (libzinc.so.MAJOR), zinc.pc and zincConfigVersion.cmake. */
#define ZINC_VERSION_MAJOR 0
#define ZINC_VERSION_MINOR 1
#define ZINC_VERSION_PATCH 0
#define ZINC_VERSION_NUMBER (ZINC_VERSION_MAJOR * 10000 + ZINC_VERSION_MINOR * 100 + ZINC_VERSION_PATCH)
#define ZINC_STRINGIFY_(x) #x
#define ZINC_EXPAND_STRINGIFY_(x) ZINC_STRINGIFY_(x)
#define ZINC_VERSION_STRING ZINC_EXPAND_STRINGIFY_(ZINC_VERSION_MAJOR) "." \
    ZINC_EXPAND_STRINGIFY_(ZINC_VERSION_MINOR) "." ZINC_EXPAND_STRINGIFY_(ZINC_VERSION_PATCH)

/* Status codes. Values never change once released; new codes are only appended. */
typedef enum zinc_status {
    ZINC_OK = 0,
    ZINC_ERR_INVALID_ARG = 1,   /* an argument is out of range or NULL where it may not be */
    ZINC_ERR_USAGE = 2,         /* a call out of order: step before finalize, param after finalize */
    ZINC_ERR_CONFIG = 3,        /* the JSON config was rejected; the message names the key */
    ZINC_ERR_NOMEM = 4,         /* an allocation failed */
    ZINC_ERR_IO = 5,            /* a file could not be read or written */
    ZINC_ERR_COMM = 6,          /* a collective failed in the comm backend */
    ZINC_ERR_TIMEOUT = 7,       /* a collective did not complete within the timeout */
    ZINC_ERR_ABORTED = 8,       /* another rank failed or called zinc_world_abort */
    ZINC_ERR_MISMATCH = 9,      /* ranks disagree (different registrations, world sizes, ...) */
    ZINC_ERR_UNSUPPORTED = 10,  /* a feature this build or this zinc does not have */
    ZINC_ERR_CORRUPT = 11,      /* stored data failed a checksum or a format check */
    ZINC_ERR_DEVICE = 12,       /* the device (CUDA) reported an error */
    ZINC_ERR_INTERNAL = 13,     /* a bug in zinc: please report it with the message */
    ZINC_ERR_NUMERIC = 14       /* training cannot go on: the fp16 gradient overflows with the loss
                                   scale at fp16.min_loss_scale (DeepSpeed stops the run there) */
} zinc_status;

/* Element types of parameters and gradients. */
typedef enum zinc_dtype {
    ZINC_DTYPE_FP32 = 0,
    ZINC_DTYPE_FP16 = 1,
    ZINC_DTYPE_BF16 = 2
} zinc_dtype;

/* The version of the library actually linked, which may differ from the header's macros when a
 * program built against one release runs with another: compare with ZINC_VERSION_NUMBER.
 * @return MAJOR*10000 + MINOR*100 + PATCH (0.1.0 -> 100). */
ZINC_API unsigned zinc_version_number(void);
/* @return the linked library's version as "MAJOR.MINOR.PATCH" (static; never NULL). */
ZINC_API const char *zinc_version_string(void);

/* @return a static, constant name for a status code ("ZINC_ERR_CONFIG"); never NULL. */
ZINC_API const char *zinc_status_string(zinc_status s);
/* @return "fp32", "fp16" or "bf16"; "?" for an unknown value. */
ZINC_API const char *zinc_dtype_name(zinc_dtype d);
/* @return the size in bytes of one element of d (4 or 2); 0 for an unknown value. */
ZINC_API size_t zinc_dtype_size(zinc_dtype d);

/* ---- worlds: who the ranks are ------------------------------------------------------------ */

typedef struct zinc_world zinc_world_t;

/* A world of `world_size` ranks that are threads of this process (the `local` backend).
 * Reductions are done in rank order, so results are deterministic. The world is shared by the
 * engines of all its ranks and must outlive them. */
ZINC_API zinc_status zinc_world_create_local(int world_size, zinc_world_t **out);

/* A world over MPI_COMM_WORLD, one rank per process (the `mpi` backend). Calls MPI_Init_thread
 * if MPI is not initialised yet (and then MPI_Finalize in zinc_world_destroy).
 * @return ZINC_ERR_UNSUPPORTED when this build has no MPI. */
ZINC_API zinc_status zinc_world_create_mpi(zinc_world_t **out);

/* The world the launcher set up: under mpirun (in an MPI build) an mpi world; under torchrun
 * (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or srun a world of the processes it
 * started, one rank each — usable with device "cuda" only, whose NCCL comm it bootstraps;
 * otherwise, and for a launch of one process, a local world of one rank. ZINC_BOOTSTRAP=mpi|slurm|env|single forces a method.
 * @return ZINC_ERR_CONFIG naming the variable when the launcher's environment is inconsistent. */
ZINC_API zinc_status zinc_world_create_launched(zinc_world_t **out);

/* Destroys a world; accepts NULL. Every engine using it must be destroyed first.
 * An mpi world whose MPI zinc initialised finalises it. zinc's end of the job runs inside
 * MPI_Finalize, whoever calls it (this call, or a program that initialised MPI itself): an exit
 * notice to every other rank (one still waiting for this rank fails its wait, naming it), then
 * a barrier. After a collective of this process failed (ZINC_ERR_TIMEOUT, ZINC_ERR_ABORTED,
 * ZINC_ERR_COMM) the barrier waits up to the comm timeout for every rank to arrive, and if one
 * does not (stopped, gone), MPI_Finalize would wait for it forever, so it ends the whole job
 * with MPI_Abort (exit code: the status) and does not return. Report errors before calling it
 * (or MPI_Finalize). */
ZINC_API void zinc_world_destroy(zinc_world_t *w);

ZINC_API int zinc_world_size(const zinc_world_t *w);
/* This process's rank for an mpi world; -1 for a local world (its ranks are threads). */
ZINC_API int zinc_world_rank(const zinc_world_t *w);

/* Collective over an MPI world's processes, outside any engine: `bytes` of buf copied from rank
 * `root` to every rank (every rank must call it). It waits as long as the other ranks take, but
 * returns ZINC_ERR_ABORTED, naming the rank, when another rank's process ends before joining
 * (MPI_Ibcast through a staging block; buf is untouched then). For bootstrapping
 * something else over the launcher's world (the Python package sets up torch.distributed with
 * it). A world of one: nothing to do. Local and launcher-environment worlds:
 * ZINC_ERR_UNSUPPORTED. */
ZINC_API zinc_status zinc_world_broadcast(zinc_world_t *w, void *buf, size_t bytes, int root);

/* Collective over an MPI world's processes, outside any engine: returns once every rank has
 * called it (MPI_Ibarrier), waiting as long as they take, or ZINC_ERR_ABORTED naming the rank
 * whose process ended before joining. The Python package calls it after setting up
 * torch.distributed, so that no rank returns (and perhaps exits, ending the store rank 0 serves)
 * while another is still inside torch's set-up. A world of one: nothing to do. Local and
 * launcher-environment worlds: ZINC_ERR_UNSUPPORTED. */
ZINC_API zinc_status zinc_world_barrier(zinc_world_t *w);

/* Marks the world failed: every rank blocked in, or later entering, a collective returns
 * ZINC_ERR_ABORTED with `why` in its message. For a rank that hits an error it cannot recover
 * from, so that the others stop instead of waiting for it. Thread-safe. On an MPI world the
 * notice goes through the comm of every CPU engine this process has alive on it (the others
 * may be blocked in any of them); a CUDA engine's NCCL comm is not reached (docs/cuda.md: the
 * others stop at their timeout). With none alive there is no comm to send it through: the next
 * engine created on the world fails its first collective on every rank, and zinc_world_destroy
 * ends the job with MPI_Abort unless every rank arrives there within 10 s (docs/comm.md). */
ZINC_API void zinc_world_abort(zinc_world_t *w, int rank, const char *why);

/* ---- engine lifecycle --------------------------------------------------------------------- */

typedef struct zinc_engine zinc_engine_t;

/* The most CPU kernel threads one engine takes (zinc_engine_options_t.threads), and the tools'
 * --threads bound: far past any machine's cores, and INT_MAX asked for a 48 GB thread table. */
#define ZINC_MAX_THREADS 4096

typedef struct zinc_engine_options {
    const char *config_path;   /* a DeepSpeed-style JSON config file, or NULL ...               */
    const char *config_json;   /* ... the JSON text itself (exactly one of the two is set)      */
    zinc_world_t *world;       /* NULL: a world of one rank, created and owned by the engine     */
    int rank;                  /* local worlds: this engine's rank; ignored for mpi worlds       */
    const char *device;        /* "cpu" (default when NULL) or "cuda"                           */
    int threads;               /* CPU kernel threads of this rank, 1..ZINC_MAX_THREADS; 0 =
                                  cores / local ranks; others are ZINC_ERR_INVALID_ARG          */
} zinc_engine_options_t;

/* Creates the engine of one rank: reads and validates the config (the same validation as
 * `zinc config check`). Not collective.
 * @return ZINC_ERR_CONFIG with the offending key in zinc_last_error(NULL) when rejected. */
ZINC_API zinc_status zinc_engine_create(const zinc_engine_options_t *opt, zinc_engine_t **out);

/* Releases every allocation of the engine; accepts NULL. Not collective. The device buffers
 * (the parameters' working copy, gradient sums, master weights, optimizer state, gather area)
 * are freed here unless zinc_memory_hold holds remain: then by the last zinc_memory_release. */
ZINC_API void zinc_engine_destroy(zinc_engine_t *e);

/* A hold on the engine's device buffers, for a tensor of another library that views them
 * (zinc_param_data, zinc_param_grad, a persistent group's address): they stay allocated past
 * zinc_engine_destroy until every hold is released, as a torch storage keeps its memory. Their
 * values are then whatever zinc last wrote. NULL for NULL. Thread-safe, any thread. */
ZINC_API void *zinc_memory_hold(zinc_engine_t *e);
/* Lets go of a zinc_memory_hold hold; the last one, after zinc_engine_destroy, frees the
 * buffers and closes the device. Accepts NULL. Thread-safe, any thread. */
ZINC_API void zinc_memory_release(void *hold);
/* A DLPack deleter: frees `managed` (a DLManagedTensor, one malloc'd block) and releases the
 * hold in its manager_ctx. A front-end gives it to torch.utils.dlpack.from_dlpack so that a
 * view's last reference, wherever it is dropped, needs no Python. */
ZINC_API void zinc_dlpack_deleter(void *managed);

/* The last error message of this engine, or with e == NULL of this thread (for failures of
 * zinc_engine_create and of calls that have no engine). Never NULL; "" when there was none.
 * Valid until the next failing call on the same engine/thread. */
ZINC_API const char *zinc_last_error(const zinc_engine_t *e);

/* The warnings of the config this engine was created from (a key accepted without effect, an
 * override replacing the file's value, ...), one "key.path: what" line each, every line ending
 * in '\n'; "" when there were none or e is NULL. The same lines rank 0 logs at create; every
 * rank has them. Owned by the engine, valid until zinc_engine_destroy. */
ZINC_API const char *zinc_config_warnings(const zinc_engine_t *e);

/* The config this engine runs, resolved: canonical JSON with every default applied, aliases and
 * "auto" values settled and the batch sizes derived (what `zinc config check --json` prints,
 * without the hash). A front-end reads DeepSpeed's accessors from it (fp16_enabled,
 * gradient_clipping, ...). Owned by the engine, valid until zinc_engine_destroy; "" for NULL. */
ZINC_API const char *zinc_engine_config_json(const zinc_engine_t *e);

/* ---- registration (before zinc_finalize) -------------------------------------------------- */

/* Adds a parameter group (typically one layer). Groups are the unit of gathering, reduction and
 * prefetch. @param out_group receives the group id (0, 1, ... in registration order); required
 * (NULL is ZINC_ERR_INVALID_ARG). */
ZINC_API zinc_status zinc_group_add(zinc_engine_t *e, const char *name, int *out_group);

/* Adds a parameter to a group. `dtype` is the dtype of the working copy the model computes with
 * and must match the config's precision (fp16.enabled -> FP16, bf16.enabled -> BF16, else FP32).
 * `shape` has `ndim` (1..8) positive extents. Names must be unique. A group's parameters are added
 * together, group after group in the order the groups were added (a parameter of an earlier
 * group after one of a later group fails zinc_finalize with ZINC_ERR_USAGE naming it and its
 * group: the flat buffer keeps each group contiguous).
 * @param out_param receives the parameter id (0, 1, ... in registration order); required (NULL
 * is ZINC_ERR_INVALID_ARG). */
ZINC_API zinc_status zinc_param_add(zinc_engine_t *e, int group, const char *name, int ndim,
                                    const int64_t *shape, zinc_dtype dtype, int *out_param);

/* The three setters below, for a group's Adam values, may be called at any time after
 * zinc_group_add, as torch and DeepSpeed read each param group's values at every step (a
 * weight-decay schedule, torch's OneCycleLR cycling beta1). Before zinc_finalize every rank must
 * set the same values (zinc_finalize compares them with the registration); after it they apply
 * from the next optimizer step, and every rank must set the same values before the same
 * zinc_step (not compared, as zinc_group_set_lr). Not saved in checkpoints: the caller sets them
 * again after a load. */

/* Sets a group's weight decay, in place of the config's optimizer.params.weight_decay (torch's
 * and DeepSpeed's per-parameter-group weight_decay: biases and norms are usually given 0). A
 * finite value >= 0. */
ZINC_API zinc_status zinc_group_set_weight_decay(zinc_engine_t *e, int group, double weight_decay);

/* Sets a group's Adam betas, in place of the config's optimizer.params.betas (torch's and
 * DeepSpeed's per-parameter-group betas): each in [0, 1); the group's bias corrections are
 * 1 - beta^t of its own (current) betas, as torch's. Under OneCycle with cycle_momentum the
 * schedule sets the betas of every group, these included, as DeepSpeed's OneCycle does. */
ZINC_API zinc_status zinc_group_set_betas(zinc_engine_t *e, int group, double beta1, double beta2);

/* Sets a group's Adam eps, in place of the config's optimizer.params.eps: a finite value > 0. */
ZINC_API zinc_status zinc_group_set_eps(zinc_engine_t *e, int group, double eps);

/* Before zinc_finalize: the gradient buffer (category ZINC_MEM_GRAD, the bytes zinc_memory plans
 * for it) becomes memory the caller lends for one accumulation window at a time
 * (zinc_grad_buffer_attach), and zinc allocates none. The buffer is needed only from a window's
 * first backward to its optimizer step; a caller with a caching allocator (PyTorch's: the Python
 * front-end) then has that memory for the forward's activations the rest of the time, where
 * zinc's own buffer would sit on top of them for the engine's life. An engine that keeps no
 * device gradient buffer (offload_optimizer at stages 2-3: the shard accumulates in host memory,
 * zinc_memory plans 0 bytes) needs no attach. */
ZINC_API zinc_status zinc_grad_buffer_external(zinc_engine_t *e);

/* Before zinc_finalize, at ZeRO stage 3: the engine holds parameter values only and trains
 * nothing — the partition of parameters that are not trained (requires_grad False: a LoRA run's
 * base model), gathered and released exactly as a trained engine's groups. zinc allocates only
 * the 16-bit (working dtype) shard (ZINC_MEM_PARAM16, 2Ψ/N bytes at bf16/fp16), the gather area
 * and the persistent groups (ZINC_MEM_GATHER); zinc_memory plans and allocates 0 bytes for
 * ZINC_MEM_GRAD, _MASTER, _ADAM_M, _ADAM_V and _BUCKET. zinc_param_set rounds the rank's part of
 * the values into the shard (round to nearest even, as the trained engine rounds its master);
 * zinc_param_get gives back those rounded values widened to fp32 (there is no fp32 master).
 * zinc_gather, zinc_release, zinc_param_data, zinc_stream_wait_gather and the persistent groups
 * behave as for a trained engine. Prefetch follows the gather order traced over a micro-step:
 * the caller ends each micro-step with zinc_micro_step (its only effect on a frozen engine;
 * ZINC_ERR_USAGE while a group is gathered), and until the first one each zinc_gather fetches
 * its group when called. The calls that train or touch
 * the optimizer state — zinc_step, zinc_grads_ready/_more/_reduce/_clear,
 * zinc_param_grad, zinc_param_grad_get/_set, zinc_grad_bucket, zinc_grad_bucket_drop,
 * zinc_grad_buffer_attach/_external, zinc_param_state_get/_set, zinc_param_local_get/_set,
 * zinc_ckpt_save, zinc_ckpt_load and zinc_load_safetensors — return ZINC_ERR_USAGE without
 * aborting the world (the engine stays usable). Every rank must make the same call:
 * zinc_finalize compares it with the registration (ZINC_ERR_MISMATCH). ZINC_ERR_USAGE after
 * zinc_finalize or zinc_grad_buffer_external; ZINC_ERR_UNSUPPORTED below stage 3;
 * ZINC_ERR_INVALID_ARG for NULL. With offload_param "cpu" (which the config takes beside
 * offload_optimizer "cpu", which moves nothing here) the shard is host memory
 * (zinc_memory_host's ZINC_MEM_PARAM16; 0 on the device) and each gather uploads the rank's
 * slice from it, as a trained engine's offload_param does. With offload_param "nvme" (beside
 * offload_optimizer "nvme") the shard is a scratch file under nvme_path holding only it
 * (zinc_nvme_bytes' file_bytes), and host memory holds the gathers' staging slots
 * (ZINC_MEM_PARAM16 on the host), as a trained engine's offload_param "nvme" does; each
 * group's slice is checksummed at its first gather after a zinc_param_set and checked at every
 * later read (zinc.nvme_checksum). offload_optimizer alone, "cpu" or "nvme", moves nothing. */
ZINC_API zinc_status zinc_engine_frozen(zinc_engine_t *e);

/* 1 for an engine made frozen with zinc_engine_frozen, 0 otherwise and for NULL. */
ZINC_API int zinc_engine_is_frozen(const zinc_engine_t *e);

/* Collective. Checks that every rank resolved the same config (its hash, zinc_config_hash) and
 * registered the same groups and parameters (ZINC_ERR_MISMATCH naming the ranks that differ from
 * rank 0, on every rank), plans the
 * memory of every category, allocates it (once; nothing is allocated inside a step) and zeroes
 * the parameters. */
ZINC_API zinc_status zinc_finalize(zinc_engine_t *e);

/* ---- parameter values --------------------------------------------------------------------- */

/* Sets a parameter's value from `values` (numel fp32 values, row-major). Every rank must pass
 * the same values; each keeps the part in its own shard (fp32 master and 16-bit copy).
 * Not collective; call after finalize, outside a micro-step's zinc_gather/zinc_grads_ready
 * calls (before its first or after its last, or after a step). At stage 3 it is refused
 * (ZINC_ERR_USAGE) while the parameter's group is gathered, and a prefetched copy of the group
 * is dropped, so the next zinc_gather reads the new values. */
ZINC_API zinc_status zinc_param_set(zinc_engine_t *e, int param, const float *values);

/* Collective. Copies a parameter's fp32 master value (numel floats) into `out` on every rank
 * (a frozen engine, zinc_engine_frozen: its working-dtype value, widened to fp32). */
ZINC_API zinc_status zinc_param_get(zinc_engine_t *e, int param, float *out);

/* A parameter's working-dtype value (the 16-bit copy the forward reads: what zinc_gather gives),
 * widened to fp32 into `out` (numel floats) on every rank: zinc_param_get's value rounded to the
 * working dtype, read without the master, so it answers while zinc_states_offload keeps the
 * master in host memory. Collective at stage 3 (an all-gather of the shards), local below. */
ZINC_API zinc_status zinc_param_get_working(zinc_engine_t *e, int param, float *out);

/* A parameter's Adam state: the first moment (torch's exp_avg) or the second (exp_avg_sq);
 * and, for the fragment calls (zinc_param_local_get/_set) only, its fp32 master and its
 * gradient. */
typedef enum {
    ZINC_STATE_EXP_AVG = 0,
    ZINC_STATE_EXP_AVG_SQ = 1,
    ZINC_STATE_MASTER = 2,
    ZINC_STATE_GRAD = 3
} zinc_param_state;

/* Collective. Copies a parameter's Adam moment (numel floats, fp32, as of the last step) into
 * `out` on every rank. */
ZINC_API zinc_status zinc_param_state_get(zinc_engine_t *e, int param, zinc_param_state which,
                                          float *out);

/* Sets a parameter's Adam moment from `values` (numel floats; every rank passes the same values,
 * each keeps the part in its shard). Not collective; between steps. The next step's Adam update
 * starts from it. */
ZINC_API zinc_status zinc_param_state_set(zinc_engine_t *e, int param, zinc_param_state which,
                                          const float *values);

/* A parameter's gradient as the next zinc_step will see it (DeepSpeed's safe_get_full_grad), in
 * fp32 into `out` (numel floats): the sum over this optimizer step's micro-steps so far, averaged
 * over the ranks, in the units the model's backward produced — multiplied by zinc_loss_multiplier
 * (the fp16 loss scale, 1/gradient_accumulation_steps), as DeepSpeed's holds it before step.
 * Collective. Between a micro-step's backward (at stages 2-3, and at stage 1 with fp32 gradient
 * sums, after its group's zinc_grads_ready; while the group's gradients are in the bucket but not
 * handed over, ZINC_ERR_USAGE) and zinc_step; zeros before the step's first gradients and after
 * zinc_step. At stages 0-1 the reduction is taken here over a copy, as zinc_step will reduce the
 * buffer itself: in the working dtype in bf16/fp16 (one rounding; stage 1's fp32 sums rounded to
 * it first unless communication_data_type is "fp32"), so these are the values the step uses. */
ZINC_API zinc_status zinc_param_grad_get(zinc_engine_t *e, int param, float *out);

/* Sets a parameter's gradient for the next zinc_step from `values` (numel floats, in
 * zinc_param_grad_get's units, rounded to the dtype the gradient is kept in: the working dtype, or
 * fp32 with data_types.grad_accum_dtype "fp32"; every rank passes the same values,
 * each keeps what it reduces). Not collective; the same window as zinc_param_grad_get. Later
 * micro-steps of the same optimizer step add to it. */
ZINC_API zinc_status zinc_param_grad_set(zinc_engine_t *e, int param, const float *values);

/* This rank's fragment of a parameter (DeepSpeed's ZeRO-3 "local partition"): the elements
 * [*lo, *hi) of the flattened parameter whose fp32 state, and from stage 2 on reduced gradient,
 * this rank keeps — all of them at stage 0, the part inside this rank's slice of the group at
 * stages 1-3 (the ranks' fragments tile the parameter in rank order); *lo == *hi when none.
 * Not collective. */
ZINC_API zinc_status zinc_param_local_range(zinc_engine_t *e, int param, int64_t *lo, int64_t *hi);

/* Reads or writes this rank's fragment (hi - lo floats) of the parameter's fp32 master
 * (ZINC_STATE_MASTER), an Adam moment, or its gradient (ZINC_STATE_GRAD, stages 2-3 only, in
 * zinc_param_grad_get's units, between the group's zinc_grads_ready and zinc_step). Not
 * collective. As DeepSpeed's safe_set_local_fp32_param, a master written here reaches the
 * weights the model computes with at the next optimizer step. (In fp32 mode at stages 0 and 3
 * the master is the working copy itself: at stage 3 a group gathered after the write reads it
 * already, the persistent groups kept whole at the next step, and the write is refused,
 * ZINC_ERR_USAGE, while the group is gathered.) */
ZINC_API zinc_status zinc_param_local_get(zinc_engine_t *e, int param, zinc_param_state which,
                                          float *out);
ZINC_API zinc_status zinc_param_local_set(zinc_engine_t *e, int param, zinc_param_state which,
                                          const float *values);

/* ---- one micro-step ----------------------------------------------------------------------- */

/* Collective at stage 3 (all-gathers the group's 16-bit parameters); a no-op below stage 3.
 * Between gather and release the group's zinc_param_data views are valid. A zinc_gather that
 * fails leaves the group not gathered (nothing to release). */
ZINC_API zinc_status zinc_gather(zinc_engine_t *e, int group);
ZINC_API zinc_status zinc_release(zinc_engine_t *e, int group);

/* CUDA: makes `cuda_stream` (a cudaStream_t of the engine's device, e.g. PyTorch's current
 * stream; NULL is the legacy default stream, which is PyTorch's current one outside any
 * torch.cuda.stream block) wait, on the device, until the gathered values of `group` are in
 * place — and not for
 * the work zinc queued after its all-gather (the prefetches of later groups, the reduce-scatter
 * of a group handed over before), which waiting for zinc's whole stream would add. No host
 * wait. At stage 3 the group must be gathered (between zinc_gather and zinc_release); a
 * persistent group, or any group below stage 3, waits for everything zinc queued so far. On
 * the CPU device there is nothing to wait for: ZINC_OK once the arguments are checked. */
ZINC_API zinc_status zinc_stream_wait_gather(zinc_engine_t *e, int group, void *cuda_stream);

/* A view of the parameter's 16-bit (or fp32 in fp32 mode) working copy: numel elements of the
 * registered dtype. Stages 0-2: valid from finalize on. Stage 3: valid only while the group is
 * gathered. Read-only to the model. */
ZINC_API zinc_status zinc_param_data(zinc_engine_t *e, int param, void **out);

/* A view of the parameter's gradient buffer (numel elements of the registered dtype). The model
 * ADDS its gradient into it (so a tied weight can receive several contributions). It holds zero
 * at the start of every optimizer step and, at stages 2-3, again after each zinc_grads_ready of
 * its group. At stages 2-3 the buffer is a group bucket: at most `zinc.grad_buckets` (config)
 * groups may hold gradients that were not yet handed over with zinc_grads_ready. So is it at
 * stage 1 with data_types.grad_accum_dtype "fp32" (16-bit training), where zinc_grads_ready adds
 * the bucket into the rank's fp32 sums: the view is 16-bit there too. */
ZINC_API zinc_status zinc_param_grad(zinc_engine_t *e, int param, void **out);

/* Stages 2-3 (and stage 1 with fp32 gradient sums): the bucket (0 .. zinc.grad_buckets - 1)
 * that holds the group's gradient in this micro-step, taking one if the group has none yet, as
 * zinc_param_grad does; -1 in *slot where the model adds into the gradient buffer itself. Buckets are taken in rotation, so consecutive groups use different ones: a caller on
 * another stream (the Python front-end) orders its adds after the work zinc queued after the
 * zinc_grads_ready that last used THAT bucket (an event per bucket), not after all of zinc's
 * work, and the reduce of one group overlaps the next group's backward. */
ZINC_API zinc_status zinc_grad_bucket(zinc_engine_t *e, int group, int *slot);

/* Where the model adds into buckets: the group's bucket given back without a hand-over, zeroed
 * (queued on zinc's compute stream, like the zeroing after a zinc_grads_ready) — what was added
 * into it since the group took it is dropped, and the group's next zinc_param_grad (or
 * zinc_grad_bucket) takes a bucket anew. For an add into the bucket that failed midway (the
 * Python front-end's hand-over, out of memory): kept, the bucket would stay taken until the
 * group's next hand-over, and with zinc.grad_buckets 1 no other group could be handed over
 * before it. ZINC_OK with nothing done where the group holds no bucket (or the model adds into
 * the gradient buffer itself). Not collective; the window's sums and which groups were handed
 * over in this micro-step are unchanged. */
ZINC_API zinc_status zinc_grad_bucket_drop(zinc_engine_t *e, int group);

/* With zinc_grad_buffer_external: lends zinc `bytes` at `buf` — exactly zinc_memory's planned
 * ZINC_MEM_GRAD bytes, on the engine's device (host memory on the CPU device), 64-byte aligned —
 * as the gradient buffer until the end of the current accumulation window: the zinc_step that is
 * its boundary (the update applied or skipped) gives it back, and zinc touches it no more. zinc
 * zeroes it here, queued on its compute stream: a CUDA caller makes zinc's stream wait for its
 * earlier use of that memory, and orders its own first add into a zinc_param_grad view (stages
 * 0-1) after zinc's work. While none is attached, zinc_grads_ready, zinc_param_grad at stages
 * 0-1 and the gradient's setters refuse with ZINC_ERR_USAGE (and so zinc_step, with groups not
 * handed over); the gradient is zero then
 * (zinc_param_grad_get and zinc_param_local_get read zeros). Not collective; every rank attaches
 * in the same window. ZINC_ERR_USAGE when the engine was not made external, plans no gradient
 * buffer, or one is attached already; ZINC_ERR_INVALID_ARG for a NULL, misaligned or wrongly
 * sized buffer. A zinc_step that returns an error (not a skipped overflow) does not give it back:
 * it stays attached until the engine is destroyed, which never frees it. */
ZINC_API zinc_status zinc_grad_buffer_attach(zinc_engine_t *e, void *buf, size_t bytes);

/* Inside an accumulation window: sets the gradient sums of the window so far to zero on this
 * rank (the whole buffer below stage 2, this rank's reduced slices at stages 2-3), so the step
 * applies only what is handed over after it — a DeepSpeed zero_grad inside a window (its stage-3
 * optimizer's restarts the partitioned sum). One clearing, queued on zinc's compute stream (a
 * CUDA caller adding into zinc_param_grad views from another stream orders its adds around it),
 * no host wait; with offload_optimizer at stages 2-3, where the sums are in host memory, one wait
 * for their downloads. Where the model adds into buckets (stages 2-3, and stage 1 with fp32
 * gradient sums) the gradients in a group's bucket that were not handed over
 * go too (a backward that failed before the group's zinc_grads_ready): the bucket is zeroed and
 * freed, and the group hands over only what is added after this, into the bucket a new
 * zinc_param_grad (or zinc_grad_bucket) gives it — a view taken before may now be another
 * group's. The window's micro-step count and which groups were handed over in this micro-step
 * are unchanged. Not collective. With a lent buffer (zinc_grad_buffer_external) that is not
 * attached there is nothing to clear: ZINC_OK. */
ZINC_API zinc_status zinc_grads_clear(zinc_engine_t *e);

/* Collective at stages 2-3: the group's gradient of this micro-step is complete; zinc
 * reduce-scatters it now, keeps this rank's slice and frees the bucket. At stage 1 with fp32
 * gradient sums (data_types.grad_accum_dtype "fp32") it adds the bucket into this rank's fp32 sums
 * and frees it (not collective there). Must be called once per group per micro-step at every
 * stage (otherwise below stage 2 it only records completion). One that fails (a comm timeout or
 * abort, a device error) leaves the window's gradient incomplete: the calls that would go on
 * with it (zinc_step, zinc_micro_step, zinc_grads_ready or zinc_grads_more of that group) are
 * refused with ZINC_ERR_USAGE naming that failure until a zinc_ckpt_load (or
 * zinc_engine_set_train_state) starts a new window; after a comm failure the world is aborted,
 * and only a new engine (on a new world) goes on. */
ZINC_API zinc_status zinc_grads_ready(zinc_engine_t *e, int group);

/* Collective at stages 2-3: more gradient for a group already handed over in this micro-step
 * (a parameter whose gradient arrives again after the hand-over: reentrant activation
 * checkpointing runs a backward per segment, so a module used in two segments gets one
 * contribution from each). The caller adds only the new contribution into zinc_param_grad's
 * views (at stages 2-3 a fresh, zeroed bucket) and calls this: zinc reduce-scatters it and adds
 * this rank's slice to what the group's zinc_grads_ready kept, as a sum over both. At stage 1
 * with fp32 gradient sums the same with a fresh bucket, added into the sums. Otherwise below
 * stage 2 it only checks (the gradient buffer holds the sum already). ZINC_ERR_USAGE when the
 * group was not handed over in this micro-step. A micro-step's end (zinc_step, zinc_micro_step)
 * refuses a group whose bucket holds gradient added after its hand-over and not handed over
 * with this (ZINC_ERR_USAGE naming the group; it was carried into the next micro-step before
 * 2026-11-30). */
ZINC_API zinc_status zinc_grads_more(zinc_engine_t *e, int group);
/* ZeRO stage 0, at the accumulation boundary, after the window's last hand-over: the
 * all-reduce (average) of the gradient buffer that zinc_step would make first, made now, as
 * DeepSpeed's stage-0 backward all-reduces `.grad` at the window's last micro-step; zinc_step
 * then does not make it again. A front-end that shows the caller the window's gradients before
 * zinc_step (to read, clip or mask) calls it so that they are the averaged ones. Collective.
 * Once a window (a second call does nothing); zinc_grads_more after it is ZINC_ERR_USAGE.
 * Other stages, or inside a window: ZINC_ERR_USAGE. */
ZINC_API zinc_status zinc_grads_reduce(zinc_engine_t *e);

/* What to multiply the loss by before backward: the loss scale (fp16) divided by
 * gradient_accumulation_steps, as DeepSpeed's engine.backward does. 1/GA in bf16/fp32 mode. */
ZINC_API float zinc_loss_multiplier(const zinc_engine_t *e);

typedef struct zinc_step_info {
    int boundary;             /* 1 when this call ended an accumulation window (an optimizer step) */
    int applied;              /* 1 when the update was applied                                     */
    int skipped;              /* 1 when skipped because the gradient was not finite (overflow)      */
    int64_t step;             /* optimizer steps applied so far (skipped steps don't count)         */
    int64_t skipped_total;    /* skipped steps so far                                               */
    double grad_norm;         /* global L2 norm of the unscaled gradient before clipping (inf/nan
                                 when skipped). fp16: unscaled by the scale backward used at
                                 stages 1-2, by next_loss_scale at stages 0 and 3 (they differ
                                 only on a step where the dynamic scale grows; DeepSpeed 0.19.8
                                 reports it so, docs/optim.md)                                      */
    double grad_norm_clipped; /* the norm of the gradient the update applied: unscaled by
                                 next_loss_scale (fp16: DeepSpeed updates the scale before it
                                 unscales), after clipping                                          */
    double loss_scale;        /* the loss scale backward used for this step                         */
    double next_loss_scale;   /* the loss scale for the next step                                   */
    double lr;                /* the learning rate used for this step                               */
} zinc_step_info_t;

/* Collective. Call after every micro-step (as DeepSpeed's engine.step()), or only at the window's
 * end where the caller owns the boundary (zinc_micro_step, below). At the accumulation
 * boundary: reduces the gradients (stages 0-1), computes the global norm and overflow with one
 * collective, updates the loss scale, and unless overflowed runs the fused Adam/AdamW update
 * and gathers the parameters (stages 0-2). `info` may be NULL.
 * @return ZINC_ERR_NUMERIC (fp16, ZeRO stages 1-3, on every rank at the same step) when the
 *         gradient overflows with the hysteresis spent and the loss scale already at
 *         fp16.min_loss_scale: DeepSpeed stops the run there. The message names the step, the
 *         scale and the first group whose gradient was not finite; nothing was applied (weights,
 *         moments and loss scaler are as after the last applied step). At stage 0 DeepSpeed's
 *         FP16_Optimizer never stops, and neither does zinc: overflowing steps keep being skipped. */
ZINC_API zinc_status zinc_step(zinc_engine_t *e, zinc_step_info_t *info);

/* ---- who decides where the accumulation window ends ---------------------------------------
 * By default zinc counts: the gradient_accumulation_steps-th zinc_step since the last boundary
 * is the boundary. A caller that owns the boundary instead (DeepSpeed's
 * set_gradient_accumulation_boundary, or the config's managed_gradient_accumulation false, as
 * Hugging Face Accelerate drives DeepSpeed) ends the micro-steps inside the window with
 * zinc_micro_step and calls zinc_step only at its end. Either way the loss multiplier stays
 * 1/gradient_accumulation_steps, as DeepSpeed's backward divides by it. */

/* Ends a micro-step that is not the window's last: what zinc_step does between boundaries (the
 * gradients stay accumulated; no collective). Refused (ZINC_ERR_USAGE, aborting the world as a
 * usage error in the collective sequence does) when this micro-step ends the window
 * (zinc_engine_at_boundary): end that one with zinc_step. */
ZINC_API zinc_status zinc_micro_step(zinc_engine_t *e);

/* DeepSpeed's engine.set_gradient_accumulation_boundary: 1 makes the current and the following
 * micro-steps end the window (zinc_step applies an optimizer step), 0 makes them not (zinc_step
 * only ends the micro-step, as zinc_micro_step), -1 gives zinc's count back. Holds until changed;
 * not saved in checkpoints. Every rank must set the same value before the same micro-step's
 * zinc_grads_ready (it decides when offload starts the gradients' download). Refused
 * (ZINC_ERR_USAGE) when the config sets managed_gradient_accumulation false, as DeepSpeed
 * refuses it there. */
ZINC_API zinc_status zinc_set_accumulation_boundary(zinc_engine_t *e, int is_boundary);

/* DeepSpeed's engine.set_train_batch_size and set_train_micro_batch_size: the micro batch
 * (train_micro_batch_size_per_gpu) and gradient_accumulation_steps from here on, each >= 1;
 * train_batch_size becomes micro_batch x grad_accum x world size (ZINC_ERR_INVALID_ARG for a
 * value below 1, INT64_MAX or a product past int64, as the config parser refuses them). The loss
 * multiplier and zinc's
 * count of the window follow the new steps. Between accumulation windows only (after the
 * zinc_step that ended one, or before the first micro-step; ZINC_ERR_USAGE inside one, whose
 * losses were scaled by the old steps): DeepSpeed's takes it at any micro-step and counts the
 * window against its global micro-step count, so its first window after a change can be
 * shorter. The resolved config (zinc_engine_config_json) and its hash change with it, so a
 * checkpoint saved afterwards records the batch sizes in force. Every rank must pass the same
 * values; not collective, not saved in the engine state. */
ZINC_API zinc_status zinc_set_batch_size(zinc_engine_t *e, int64_t micro_batch, int64_t grad_accum);

/* The learning rate of the optimizer steps from here on, in place of the config's schedule: a
 * schedule the caller runs itself (a client LR scheduler, as DeepSpeed's engine steps one).
 * A finite value >= 0; NAN gives the config's schedule back. Every rank must set the same value
 * before the same zinc_step. Not saved in checkpoints: the caller sets it again after a load. */
ZINC_API zinc_status zinc_set_lr(zinc_engine_t *e, double lr);
/* Under the config's OneCycle with cycle_momentum (which sets every group's betas): the betas of
 * the optimizer steps from here on in place of the schedule's, for a front-end that runs an
 * update at the betas its param groups hold (DeepSpeed's first update after a load or a
 * scheduler load_state_dict, before its scheduler writes its own). Both in [0, 1); NAN, NAN
 * gives the schedule back. Without cycle_momentum it changes nothing (each group's betas are
 * zinc_group_set_betas's or the config's). Every rank must set the same values before the
 * same zinc_step. Not saved in checkpoints. */
ZINC_API zinc_status zinc_set_betas(zinc_engine_t *e, double beta1, double beta2);

/* A group's learning rate for the optimizer steps from here on, in place of the engine's (the
 * config's schedule, or zinc_set_lr's): torch's and DeepSpeed's per-parameter-group lr. Any time
 * after zinc_group_add. A finite value >= 0; NAN gives the group the engine's lr back. Every
 * rank must set the same values before the same zinc_step. zinc_step_info_t.lr stays the
 * engine's. Not saved in checkpoints: the caller sets it again after a load. */
ZINC_API zinc_status zinc_group_set_lr(zinc_engine_t *e, int group, double lr);

/* ---- introspection ------------------------------------------------------------------------ */

ZINC_API int zinc_engine_rank(const zinc_engine_t *e);
ZINC_API int zinc_engine_world_size(const zinc_engine_t *e);
ZINC_API int zinc_engine_stage(const zinc_engine_t *e);
ZINC_API zinc_dtype zinc_engine_dtype(const zinc_engine_t *e);
ZINC_API int zinc_engine_group_count(const zinc_engine_t *e);
ZINC_API int zinc_engine_param_count(const zinc_engine_t *e);
/* The comm backend the engine's collectives go through: "local", "mpi", "nccl", or the staged
 * comm over one of the host backends, "staged/local" (ranks as threads sharing a GPU) or
 * "staged/mpi" (mpirun's ranks sharing a GPU; docs/comm.md). A static string; NULL for NULL. */
ZINC_API const char *zinc_engine_comm(const zinc_engine_t *e);
/* 1 where the model's gradients go through zinc's group buckets (zinc_grad_bucket gives a slot,
 * zinc_grads_ready hands each one over): ZeRO stages 2-3, and stage 1 with fp32 gradient sums
 * (data_types.grad_accum_dtype "fp32" with fp16/bf16), where the hand-over adds the bucket into
 * the sums. 0 where the model adds into the gradient buffer itself, and for NULL. Known from
 * zinc_engine_create on: a front-end reads it instead of restating the rule. */
ZINC_API int zinc_engine_grads_bucketed(const zinc_engine_t *e);
/* 1 where group `group` is persistent: ZeRO stage 3, fewer elements than
 * stage3_param_persistence_threshold, so zinc keeps it gathered in full for good (refreshed at
 * each step, zinc_param_set and a load; zinc_gather / zinc_release of it cost nothing), and its
 * zinc_param_data address, read between a zinc_gather and zinc_release, stays valid until
 * zinc_engine_destroy. A front-end may let the model's parameters view it between steps, as
 * DeepSpeed keeps such parameters whole in the module. 0 otherwise, before zinc_finalize, and
 * for NULL or a group out of range. */
ZINC_API int zinc_group_persistent(const zinc_engine_t *e, int group);
/* 1 when the current micro-step ends the accumulation window, so that the next zinc_step
 * applies (or skips on overflow) an optimizer step: zinc_set_accumulation_boundary's value, else
 * gradient_accumulation_steps - 1 micro-steps have passed since the last one. DeepSpeed's
 * engine.is_gradient_accumulation_boundary(). 0 otherwise, for NULL, and always with
 * managed_gradient_accumulation false (DeepSpeed's is True only inside step(); every zinc_step
 * is the boundary there). */
ZINC_API int zinc_engine_at_boundary(const zinc_engine_t *e);
/* The learning rate the next applied optimizer step uses (groups without zinc_group_set_lr):
 * zinc_set_lr's, else the config's schedule at the current step count — what DeepSpeed's
 * param_groups show once its scheduler stepped after the last step. NAN for NULL. */
ZINC_API double zinc_engine_lr(const zinc_engine_t *e);
/* Writes the betas the next applied optimizer step uses for the groups without
 * zinc_group_set_betas: the config's OneCycle schedule with cycle_momentum at the current step
 * count (it replaces every group's betas, their own too, as DeepSpeed's writes them into every
 * param group), else optimizer.params.betas. Returns 1 when the schedule sets them, 0 when they
 * are the config's, -1 for NULL arguments. */
ZINC_API int zinc_engine_betas(const zinc_engine_t *e, double *beta1, double *beta2);
/* DeepSpeed's LR scheduler classes (deepspeed.runtime.lr_schedules: WarmupLR, WarmupDecayLR,
 * WarmupCosineLR, OneCycle, LRRangeTest) as one function, for a front-end that steps them over
 * its own optimizer's param groups; no engine. scheduler_json is a config's "scheduler" section
 * ({"type": ..., "params": {...}}, checked by the config's rules: ZINC_ERR_CONFIG naming the key
 * otherwise), evaluated as the class's get_lr() (and OneCycle's get_mom()) at DeepSpeed's
 * last_batch_iteration: what its step(last_batch_iteration) writes. -1 is the start (the lr its
 * constructor writes too; OneCycle's constructor writes betas (cycle_min_mom, 0.99) where
 * get_mom() gives cycle_max_mom); below -1, and INT64_MAX, are ZINC_ERR_INVALID_ARG. base_lr:
 * the param group's lr when the scheduler was built (WarmupCosineLR scales it; WarmupLR's
 * warmup_max_lr defaults to it), finite and >= 0. Every pointer is required (beta1, beta2 and
 * sets_betas too, whatever the type). Writes *lr; with OneCycle's cycle_momentum also *beta1
 * and *beta2
 * (DeepSpeed writes the pair into each group) and *sets_betas = 1, else leaves them and sets
 * *sets_betas = 0. At last_batch_iteration k >= 0, the values the config's scheduler gives an
 * engine after k + 1 applied steps (zinc_engine_lr, zinc_engine_betas). Errors:
 * zinc_last_error(NULL). */
ZINC_API zinc_status zinc_schedule_eval(const char *scheduler_json, double base_lr,
                                        int64_t last_batch_iteration, double *lr, double *beta1,
                                        double *beta2, int *sets_betas);
/* The loss scale the next backward is to be multiplied by (zinc_loss_multiplier without the
 * division by the accumulation steps): fp16's dynamic or static scale, 1 otherwise. NAN for
 * NULL. */
ZINC_API double zinc_engine_loss_scale(const zinc_engine_t *e);
/* Writes the optimizer steps applied and those skipped for a gradient overflow so far (either
 * pointer may be NULL): what the last zinc_step's info said in step and skipped_total, and after
 * zinc_ckpt_load the checkpoint's (kept as they were by keep_optimizer, 0 after a weights_only
 * load without it). Where a resumed program picks up its count (DeepSpeed's global_steps is
 * their sum). Returns 0, -1 for NULL e. */
ZINC_API int zinc_engine_steps(const zinc_engine_t *e, int64_t *applied, int64_t *skipped);
/* The training counters and loss scaler a resumed run starts from, for state that comes from
 * outside a zinc checkpoint (the Python package's DeepSpeed checkpoint import, zinc.utils).
 * scaler_* are DeepSpeed's DynamicLossScaler fields (cur_scale, cur_hysteresis, cur_iter,
 * last_overflow_iter); the scale window, factor and minimum stay the config's. */
typedef struct zinc_train_state {
    int64_t applied;             /* optimizer updates applied: Adam's step count, the schedule's */
    int64_t skipped;             /* optimizer steps skipped for a gradient overflow              */
    double scaler_scale;         /* fp16's scale; 0: the engine's loss scaler stays as it is (the
                                    source had none); ignored without fp16                       */
    int scaler_hysteresis;       /* 1 .. the config's hysteresis; ignored unless dynamic         */
    int64_t scaler_iter;         /* ignored unless dynamic                                       */
    int64_t scaler_last_overflow_iter;   /* -1 .. scaler_iter; ignored unless dynamic            */
} zinc_train_state_t;

/* Sets the engine's counters and loss scaler and starts a new accumulation window (the
 * gradients of one in progress are dropped, as zinc_ckpt_load does). Before zinc_finalize it
 * sets the counters and scaler only (there is no window yet). Not collective: every rank passes
 * the same values.
 * Range-checked as a checkpoint's engine_state is (docs/checkpoint-format.md): counters in
 * 0..2^53, a finite scale > 0, hysteresis and iterations in range; ZINC_ERR_INVALID_ARG naming
 * the field otherwise, and nothing is changed. */
ZINC_API zinc_status zinc_engine_set_train_state(zinc_engine_t *e, const zinc_train_state_t *s);
/* Adam's step count ahead of the applied updates: the next update's bias corrections take
 * t = applied + lead + 1, and the schedule stays where zinc_engine_set_sched_lead puts it. 0
 * by default; the Python front-end sets 1 at ZeRO stage 0 with fp16/bf16, where DeepSpeed
 * 0.19.8's optimizer runs one Adam step on zero gradients when it is built (the imports of
 * DeepSpeed checkpoints set the difference of their two counts), and a negative lead after a
 * load that keeps the engine's Adam state (DeepSpeed's load_optimizer_states=False: Adam's
 * count goes on from the engine's while the applied count is the checkpoint's). Checkpoints
 * keep it (engine_state.adam_lead). Not collective: every rank passes the same value; between
 * steps. ZINC_ERR_INVALID_ARG outside -applied..2^53 (zinc_engine_set_train_state then keeps
 * applied + lead >= 0: set the lead first where applied goes down). */
ZINC_API zinc_status zinc_engine_set_adam_lead(zinc_engine_t *e, int64_t lead);
/* The lead zinc_engine_set_adam_lead set or a checkpoint loaded; INT64_MIN for NULL. */
ZINC_API int64_t zinc_engine_adam_lead(const zinc_engine_t *e);
/* The config schedule's position ahead of the applied updates: its lr and betas are those of
 * step count applied + lead (zinc_engine_lr, zinc_engine_betas). 0 by default; the Python
 * front-end sets another after a load that keeps the engine's schedule position
 * (load_lr_scheduler_states=False) or restores it without the Adam state. Checkpoints keep it
 * (engine_state.sched_lead). Not collective: every rank passes the same value; between steps.
 * ZINC_ERR_INVALID_ARG outside -applied..2^53. */
ZINC_API zinc_status zinc_engine_set_sched_lead(zinc_engine_t *e, int64_t lead);
/* The lead zinc_engine_set_sched_lead set or a checkpoint loaded; INT64_MIN for NULL. */
ZINC_API int64_t zinc_engine_sched_lead(const zinc_engine_t *e);
/* 1 when the config asks for the full 16-bit weights on save (zero_optimization.
 * stage3_gather_16bit_weights_on_model_save or one of its aliases), which DeepSpeed's
 * save_16bit_model needs at stage 3. 0 otherwise and for NULL. */
ZINC_API int zinc_engine_gather_16bit_on_save(const zinc_engine_t *e);
/* A parameter's number of elements; 0 for an unknown id. */
ZINC_API int64_t zinc_param_numel(const zinc_engine_t *e, int param);
/* A parameter's group; -1 for an unknown id. */
ZINC_API int zinc_param_group(const zinc_engine_t *e, int param);

/* Memory categories of the plan (bytes per rank). */
typedef enum zinc_mem_category {
    ZINC_MEM_PARAM16 = 0,   /* working copy of the parameters (16-bit, or fp32 in fp32 mode) */
    ZINC_MEM_GRAD,          /* gradient accumulation (full below stage 2, the shard from 2)     */
    ZINC_MEM_MASTER,        /* fp32 master weights of the shard                                 */
    ZINC_MEM_ADAM_M,        /* Adam first moment of the shard                                   */
    ZINC_MEM_ADAM_V,        /* Adam second moment of the shard                                  */
    ZINC_MEM_BUCKET,        /* gradient buckets (stages 2-3; stage 1 with fp32 gradient sums)    */
    ZINC_MEM_GATHER,        /* gather buffers for the parameters (stage 3)                       */
    ZINC_MEM_COUNT
} zinc_mem_category;

ZINC_API const char *zinc_mem_category_name(zinc_mem_category c);

/* Bytes of each category this rank planned and actually allocated on the DEVICE (after
 * finalize). With zero_optimization.offload_optimizer the master, m and v are 0 here: they are
 * host memory, reported by zinc_memory_host; with offload_param (stage 3) param16 is 0 as well.
 * Either array may be NULL. */
ZINC_API zinc_status zinc_memory(const zinc_engine_t *e, uint64_t planned[ZINC_MEM_COUNT],
                                 uint64_t allocated[ZINC_MEM_COUNT]);

/* The same for HOST memory the engine plans and allocates for the model state: all zero without
 * offload. With offload_optimizer (stages 1-3): master, adam_m, adam_v of the shard (fp32), grad
 * (the host copy of the reduced gradient shard) and param16 (the host Adam's 16-bit output before
 * its upload; 0 in fp32 mode). With offload_param (stage 3) that param16 is the rank's 16-bit
 * parameter shard itself (same size). docs/engine.md, "Offload". */
ZINC_API zinc_status zinc_memory_host(const zinc_engine_t *e, uint64_t planned[ZINC_MEM_COUNT],
                                      uint64_t allocated[ZINC_MEM_COUNT]);

/* DeepSpeed's engine.offload_states: copies the optimizer state of `categories` (a mask of
 * 1 << ZINC_MEM_MASTER, 1 << ZINC_MEM_ADAM_M, 1 << ZINC_MEM_ADAM_V; any other bit is
 * ZINC_ERR_INVALID_ARG) from the device to host memory (page-locked when `pin` and the device
 * can) and frees its device memory: zinc_memory's allocated bytes drop to 0 for them and
 * zinc_memory_host's rise by as much. *moved (may be NULL): the bytes moved now. Nothing moves
 * where the state is host memory already (offload_optimizer), for an fp32 master that is the
 * working copy itself (fp32 at stages 0 and 3), or for a category moved already. Not
 * collective; after zinc_finalize, between steps. Until zinc_states_reload, forward and backward
 * go on (zinc_gather, zinc_grads_ready, ...), and the calls that read or write the master or the
 * moments — zinc_step at the accumulation window's end (a micro-step's zinc_step before it is
 * counted, as DeepSpeed's), zinc_param_set, zinc_param_get, zinc_param_state_get/_set,
 * zinc_param_local_get/_set, zinc_ckpt_save, zinc_ckpt_load, zinc_load_safetensors — return
 * ZINC_ERR_USAGE. ZINC_ERR_USAGE on a frozen engine (it has none). */
ZINC_API zinc_status zinc_states_offload(zinc_engine_t *e, unsigned categories, int pin,
                                         uint64_t *moved);
/* DeepSpeed's engine.reload_states: what zinc_states_offload moved, back on the device, the
 * same bytes. ZINC_ERR_NOMEM when the device has no room (what did not come back stays in host
 * memory; call it again). Nothing to do is ZINC_OK. */
ZINC_API zinc_status zinc_states_reload(zinc_engine_t *e);
/* 1 while some of the optimizer state is in host memory through zinc_states_offload. */
ZINC_API int zinc_states_offloaded(const zinc_engine_t *e);

/* Bytes the optimizer steps copied between device and host for offload_optimizer since finalize:
 * *to_host counts the gradient shards downloaded, *to_device the 16-bit parameter shards
 * uploaded: one of each per applied step. At stages 2-3 the gradient shard accumulates in host
 * memory: every micro-step's zinc_grads_ready sends the group's sum down (overlapping the rest
 * of backward), so it is counted also when the step then overflows and is skipped, and from a
 * window's second micro-step on first brings the group's partial sum up (counted in *to_device)
 * to add the new slice to on the device; at stage 1 a skipped step copies nothing. With offload_param (stage 3) the step uploads nothing but the persistent
 * groups' own slices, and *to_device also counts the own slice each zinc_gather (or its
 * prefetch) uploads to gather a group. Copies made by zinc_param_set/get and checkpoint loads are
 * not counted. 0 and 0 without offload. Either pointer may be NULL. */
ZINC_API zinc_status zinc_offload_bytes(const zinc_engine_t *e, uint64_t *to_host,
                                        uint64_t *to_device);

/* NVMe offload (zero_optimization.offload_optimizer {"device": "nvme"}): *file_bytes is the size
 * of this rank's scratch file under nvme_path (the fp32 master, Adam m and v of the shard, each
 * rounded up to whole 4096-byte blocks); *read and *written the bytes the optimizer steps read
 * from it and wrote to it since zinc_finalize (each applied step reads and writes the whole file
 * once; zinc_param_set/get, the state accessors and checkpoints are not counted). All 0 without
 * NVMe offload. Any pointer may be NULL. */
ZINC_API zinc_status zinc_nvme_bytes(const zinc_engine_t *e, uint64_t *file_bytes, uint64_t *read,
                                     uint64_t *written);

/* Collectives counted by the comm byte counters. */
/* Where zinc_step's time went since finalize, summed over the steps at accumulation boundaries,
 * in host wall-clock seconds per phase (zinc bench offload prints them). On a CUDA device the
 * kernels are queued, so a phase counts the time the host spent in it, and queued work shows up
 * in the phase that next waits for the device. */
typedef enum zinc_step_phase {
    ZINC_PHASE_REDUCE,   /* what is left of the gradients' reduction at the step (stages 0-1) */
    ZINC_PHASE_STATS,    /* the gradient norm and overflow flag: the pass and its all-reduce */
    ZINC_PHASE_ADAM,     /* the fused Adam/AdamW (on the host with offload_optimizer) */
    ZINC_PHASE_COPY,     /* offload_optimizer: the host waiting for device<->host copies */
    ZINC_PHASE_GATHER,   /* the parameters' all-gather (stages 1-2), persistent refresh (3) */
    ZINC_PHASE_COUNT
} zinc_step_phase;

ZINC_API zinc_status zinc_step_seconds(const zinc_engine_t *e, double seconds[ZINC_PHASE_COUNT]);

typedef enum zinc_collective {
    ZINC_COLL_ALL_REDUCE = 0,
    ZINC_COLL_REDUCE_SCATTER,
    ZINC_COLL_ALL_GATHER,
    ZINC_COLL_BROADCAST,
    ZINC_COLL_COUNT
} zinc_collective;

/* Payload bytes this rank has moved per collective since finalize, in the ZeRO paper's
 * accounting (docs/comm-volume.md): a reduce-scatter or an all-gather of a buffer of B bytes
 * counts B, an all-reduce counts 2B. */
ZINC_API zinc_status zinc_comm_bytes(const zinc_engine_t *e, uint64_t bytes[ZINC_COLL_COUNT]);

/* Collective: replaces values[0..n) on every rank by their mean over the ranks — for logging a
 * loss or a metric that each rank computed on its own data. Not part of the step's traffic (not
 * counted by zinc_comm_bytes). After zinc_finalize only (ZINC_ERR_USAGE before: until then the
 * ranks are not known to agree, and the call could pair with another rank's finalize). */
ZINC_API zinc_status zinc_mean_over_ranks(zinc_engine_t *e, double *values, int n);

/* Collective: copies `bytes` of host memory at `buf` on rank `root` into `buf` on every other
 * rank — for values one rank decided (the Python front-end's GatheredParameters(modifier_rank=)
 * sends that rank's edits). Every rank passes the same bytes and root. Not counted by
 * zinc_comm_bytes. After zinc_finalize only, as zinc_mean_over_ranks. */
ZINC_API zinc_status zinc_broadcast(zinc_engine_t *e, void *buf, size_t bytes, int root);

/* For models that compute on the engine's GPU (models/cuda is one): the CUDA stream the engine
 * queues its work on (a cudaStream_t; queue the model's work on it too, so no extra ordering is
 * needed) and the GPU's ordinal. NULL and -1 when the engine's device is not "cuda". */
ZINC_API void *zinc_engine_cuda_stream(const zinc_engine_t *e);
ZINC_API int zinc_engine_cuda_device(const zinc_engine_t *e);

/* Waits until the engine's device has finished everything queued on it (a no-op on the CPU).
 * On CUDA the wait also watches the comm, so a vanished peer gives an error, not a hang. */
ZINC_API zinc_status zinc_engine_sync(zinc_engine_t *e);

/* How many times this engine made the host wait for its device since it was created: blocking
 * copies between host and device (the step's one read of the gradient norm and overflow flag,
 * parameter and checkpoint reads and writes, a host-staged comm's copies), offload's waits for
 * its asynchronous copies, and zinc_engine_sync calls. The difference around a step is that
 * step's count: one (the norm) without offload, however many groups are gathered or handed
 * over. Counted on the cpu device too, where these waits are free, so a test there sees every
 * place a GPU would stall. 0 for NULL. */
ZINC_API uint64_t zinc_host_waits(const zinc_engine_t *e);

/* The config's hash (hex of 64 bits) as stored in checkpoints and logged at start. */
ZINC_API const char *zinc_config_hash(const zinc_engine_t *e);

/* ---- checkpoints (ckpt/; format in docs/checkpoint-format.md) ---------------------------- */

typedef struct zinc_ckpt_save_options {
    const void *client_blob;      /* caller state saved with the checkpoint (data position, RNG) */
    size_t client_blob_bytes;
    int save_weights16;           /* also store the 16-bit weights stream                        */
    int async;                    /* -1: config's zinc.ckpt_async; 0: blocking; 1: background
                                     (another value: ZINC_ERR_INVALID_ARG)                       */
    int leave_latest;             /* 1: dir/latest is left as it was (DeepSpeed's save_latest=False):
                                     a load without a tag still takes the tag latest names, and
                                     zinc.ckpt_keep_last prunes nothing after this save          */
} zinc_ckpt_save_options_t;

/* Collective. Saves into dir/tag (written as dir/tag.tmp, renamed when complete) and then points
 * dir/latest at it (unless opt->leave_latest). In async mode returns once the shard is staged in
 * host memory; errors of the background write come back from the next zinc_step or from
 * zinc_ckpt_wait. `opt` may be NULL.
 * With NVMe offload what it reads from the scratch file is checked against the step's checksums
 * (zinc.nvme_checksum): a changed file fails the save with ZINC_ERR_CORRUPT naming the chunk (or
 * group) and the file, writes no tag, and leaves the state lost as a failed step does. */
ZINC_API zinc_status zinc_ckpt_save(zinc_engine_t *e, const char *dir, const char *tag,
                                    const zinc_ckpt_save_options_t *opt);

/* Waits for an async save in flight (if any) and reports its result. */
ZINC_API zinc_status zinc_ckpt_wait(zinc_engine_t *e);

typedef struct zinc_ckpt_load_options {
    int weights_only;             /* 1: load master weights only, fresh optimizer state          */
    void *client_blob;            /* receives the saved client blob (may be NULL)                 */
    size_t client_blob_cap;
    size_t client_blob_bytes;     /* out: its size                                                */
    char loaded_tag[256];         /* out: the tag that was loaded                                 */
    int missing_ok;               /* with weights_only: a parameter the checkpoint lacks (frozen
                                     when it was saved) keeps its value instead of an error; the
                                     caller sets it (zinc_param_set)                              */
    int missing;                  /* out: how many parameters missing_ok let keep their value     */
    int keep_optimizer;           /* with weights_only: the Adam state, step count and loss scaler
                                     stay as they are (DeepSpeed's load_module_only) instead of
                                     starting fresh                                              */
    int caller_reads_extra;       /* 1: the caller reads the tensors the engine does not register
                                     itself (zinc_ckpt_read_tensors), so the load does not warn
                                     about them; 2: that, and the engine is a converter's reader
                                     of the checkpoint, not its run, whose config of its own is
                                     not compared with the one saved (no "saved with another
                                     config" warning)                                            */
    int extra;                    /* out: how many of the checkpoint's tensors the engine does not
                                     register (the load leaves them)                              */
} zinc_ckpt_load_options_t;

/* Collective, after zinc_finalize. Loads dir/tag, or with tag NULL the tag dir/latest names (a
 * tag committed after latest was written first; the highest step without a valid latest), damaged
 * ones skipped, each with a warning naming why (docs/checkpoint-format.md). Any world size and
 * stage. A load that fails before it writes anything (names, shapes, counters, a client blob
 * past client_blob_cap) leaves the engine as it was; one that fails after it began to write the
 * state (a damaged chunk found while decoding, with no tag left to fall back to, or the working
 * copies' refresh after it) leaves part of it the checkpoint's, and zinc_step and zinc_ckpt_save
 * then fail with ZINC_ERR_USAGE until a load of the whole state succeeds. The client blob is
 * read before the tensors: after a failed load client_blob may hold the failed tag's blob.
 * With NVMe offload, a load of the whole state (not weights_only with keep_optimizer, none of
 * the model's parameters missing) also makes a state lost to a failed step or a changed scratch
 * file whole again, in the same engine; until then only such a load may write the state
 * (zinc_param_set is refused).
 * A load that succeeds inside an accumulation window drops that window's gradients (the micro-
 * step in progress, handed over or in buckets, and the sums of the earlier ones; the checkpoint
 * holds none): the window goes on from the checkpoint's micro-step count (0 after a weights-only
 * load), and each group is handed over anew (at stages 2-3 into the bucket a new zinc_param_grad
 * gives it: a view taken before the load may now be another group's). Refused (ZINC_ERR_USAGE,
 * before anything is read, on every rank alike) while a stage-3 group is gathered by the caller:
 * its view would keep the old values, as zinc_param_set refuses; zinc_release it first. */
ZINC_API zinc_status zinc_ckpt_load(zinc_engine_t *e, const char *dir, const char *tag,
                                    zinc_ckpt_load_options_t *opt);

/* One tensor of a checkpoint that zinc_ckpt_read_tensors reads. */
typedef struct zinc_ckpt_tensor_request {
    const char *name;
    const int64_t *shape;         /* the caller's shape; must be the checkpoint's                */
    int ndim;
    float *out;                   /* receives the tensor in full; NULL: only ask if it is there  */
    int found;                    /* out: 1 when the checkpoint holds it (and out was filled)    */
} zinc_ckpt_tensor_request_t;

/* Not collective, after zinc_finalize. Reads the fp32 master weights of the tensors req[0..n) of
 * the checkpoint dir/tag (tag as zinc_ckpt_load's loaded_tag gave it), each in full, into its
 * out (as many floats as its shape holds), with their checksums verified; the tag is opened and
 * each chunk decoded once for all of them. For tensors the engine does not register: parameters
 * trained when the checkpoint was saved but frozen now, whose values the caller restores itself.
 * found is 0 (out untouched) for a tensor the checkpoint does not hold; a shape other than the
 * checkpoint's is ZINC_ERR_MISMATCH naming it, and then nothing is read. With n 0 it returns
 * ZINC_OK without opening the tag.
 * With e NULL it needs no engine (a checkpoint read outside training, as zinc.utils.zero_to_fp32
 * does): tag may then be NULL or "latest" (the tag zinc_ckpt_load would pick), and
 * errors are read with zinc_last_error(NULL). */
ZINC_API zinc_status zinc_ckpt_read_tensors(zinc_engine_t *e, const char *dir, const char *tag,
                                            zinc_ckpt_tensor_request_t *req, int n);

/* zinc_ckpt_read_tensors for one tensor: *found as its request's found. */
ZINC_API zinc_status zinc_ckpt_read_tensor(zinc_engine_t *e, const char *dir, const char *tag,
                                           const char *name, const int64_t *shape, int ndim,
                                           float *out, int *found);

/* No engine, not collective: finds the tag of save directory dir as zinc_ckpt_load does (tag NULL
 * or "latest": latest's, each damaged one skipped with a warning; a tag named: that
 * one, checked), writes its name into tag_out (tag_cap bytes) and, with blob non-NULL, its client
 * blob into blob (blob_cap bytes), checksum verified (with blob NULL the blob is not read).
 * *blob_bytes (may be NULL) receives the blob's size, 0 when none was saved; a blob larger than
 * blob_cap is ZINC_ERR_INVALID_ARG with *blob_bytes set, so the caller can ask again with the
 * room. The manifest of the tag found is checked (its seal too) before this returns ZINC_OK.
 * Errors: zinc_last_error(NULL). */
ZINC_API zinc_status zinc_ckpt_find_tag(const char *dir, const char *tag, char *tag_out,
                                        size_t tag_cap, void *blob, size_t blob_cap,
                                        size_t *blob_bytes);

/* Collective, after zinc_finalize. Sets every parameter found in a .safetensors file (matched by
 * name; fp32/fp16/bf16 data; shapes must match). Parameters not in the file keep their values.
 * One that fails after it set some parameters makes zinc_step and zinc_ckpt_save fail as after a
 * partial zinc_ckpt_load (above), until a zinc_ckpt_load succeeds. Refused, as zinc_ckpt_load,
 * while a stage-3 group is gathered by the caller. */
ZINC_API zinc_status zinc_load_safetensors(zinc_engine_t *e, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_H */
