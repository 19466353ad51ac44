/*
 * config.h — the one typed, validated configuration of a zinc run.
 *
 * config.c is the only place in the tree that reads JSON config: it turns a DeepSpeed-style JSON
 * document into a zcfg, applying DeepSpeed's defaults and meanings, rejecting what zinc cannot
 * honour, and warning once for what only affects speed/placement/logging. Everything else reads
 * the struct. docs/config.md lists every key, its default and its class.
 */
#ifndef ZINC_CONFIG_H
#define ZINC_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

/* LR schedulers (DeepSpeed names). */
typedef enum {
    ZSCHED_NONE = 0,     /* constant optimizer.params.lr */
    ZSCHED_WARMUP_LR,
    ZSCHED_WARMUP_DECAY_LR,
    ZSCHED_WARMUP_COSINE_LR,
    ZSCHED_ONE_CYCLE,
    ZSCHED_LR_RANGE_TEST
} zsched_type;

typedef enum { ZWARMUP_LOG = 0, ZWARMUP_LINEAR = 1 } zwarmup_type;

/* An integer key given as null or left out where DeepSpeed's None means "as another key"
 * (OneCycle's second half): no value JSON can give (json-c saturates there and zinc refuses it). */
#define ZCFG_NONE INT64_MIN

typedef struct {
    zsched_type type;
    /* WarmupLR / WarmupDecayLR */
    double warmup_min_lr;          /* default 0.0 */
    double warmup_max_lr;          /* WarmupLR: default optimizer.params.lr (current DeepSpeed);
                                      WarmupDecayLR: default 0.001 (its constructor's) */
    int64_t warmup_num_steps;      /* default 1000 */
    zwarmup_type warmup_type;      /* default log */
    int64_t total_num_steps;       /* WarmupDecayLR, WarmupCosineLR: required */
    /* WarmupCosineLR */
    double warmup_min_ratio;       /* default 0.0 */
    double cos_min_ratio;          /* default 0.0001 */
    /* OneCycle */
    double cycle_min_lr, cycle_max_lr;          /* required */
    double decay_lr_rate;                       /* default 0.0 */
    int64_t cycle_first_step_size;              /* default 2000 */
    int64_t cycle_second_step_size;             /* default ZCFG_NONE: same as first; 0: none */
    int64_t cycle_first_stair_count;            /* default 0; <= 0: continuous */
    int64_t cycle_second_stair_count;           /* default ZCFG_NONE: same as first */
    int64_t decay_step_size;                    /* default 0 */
    int cycle_momentum;                         /* default 1 */
    double cycle_min_mom, cycle_max_mom;        /* defaults 0.8, 0.9 */
    double decay_mom_rate;                      /* default 0.0 */
    /* LRRangeTest */
    double lr_range_test_min_lr;                /* default 0.001 */
    int64_t lr_range_test_step_size;            /* default 2000 */
    double lr_range_test_step_rate;             /* default 1.0 */
    int lr_range_test_staircase;                /* default 0 */
} zcfg_sched;

typedef struct {
    int enabled;                  /* always 1 once parsed: zinc always runs its Adam/AdamW */
    int type_adamw;               /* 1: decoupled weight decay (AdamW), 0: L2 in the gradient */
    double lr;                    /* default 1e-3 */
    double beta1, beta2;          /* default 0.9, 0.999 */
    double eps;                   /* default 1e-8 */
    double weight_decay;          /* default 0.0 */
    int bias_correction;          /* default 1 */
    int torch_adam;               /* optimizer.params.torch_adam: torch's defaults (default 0) */
} zcfg_optim;

typedef struct {
    int enabled;
    double loss_scale;             /* 0 = dynamic (default) */
    int initial_scale_power;       /* default 16: initial dynamic scale 2^16 */
    int64_t loss_scale_window;     /* default 1000 */
    int hysteresis;                /* default 2 */
    int consecutive_hysteresis;    /* default 0 */
    int64_t min_loss_scale;        /* default 1; an integer >= 1 (DeepSpeed >= 0.17.1: int) */
} zcfg_fp16;

typedef struct {
    int stage;                               /* 0..3, default 0 */
    int64_t reduce_bucket_size;              /* elements, default 5e8 */
    int64_t allgather_bucket_size;           /* elements, default 5e8 */
    int overlap_comm;                        /* default: 1 at stage 3, else 0 */
    int contiguous_gradients;                /* default 1 */
    int reduce_scatter;                      /* default 1 */
    int allgather_partitions;                /* default 1 */
    int round_robin_gradients;               /* default 0 */
    int64_t sub_group_size;                  /* default 1e9 */
    int64_t max_live_parameters;             /* stage3_max_live_parameters, default 1e9 */
    int64_t max_reuse_distance;              /* default 1e9 */
    int64_t prefetch_bucket_size;            /* default 5e7 */
    int64_t param_persistence_threshold;     /* default 1e5 */
    int gather_16bit_weights_on_model_save;  /* default 0 */
    int offload_optimizer;                   /* the device the file names: ZCFG_OFFLOAD_NONE,
                                                _CPU or _NVME (the report and the hash keep it) */
    int offload_pin;                         /* offload_optimizer.pin_memory (default 1): the
                                                host buffers the copies touch are page-locked
                                                where the device can (cuda) */
    int offload_param;                       /* the device the file names (as above); "cpu"
                                                takes effect at stage 3 (zcfg_offloads_param) */
    /* offload_optimizer with device "nvme" (ZeRO-Infinity; engine/offload_nvme.c) */
    char nvme_path[1024];                    /* nvme_path: an existing writable directory */
    int nvme_buffer_count;                   /* buffer_count (default 4): chunk buffers */
    int nvme_pipeline_read;                  /* pipeline_read (default 0): read ahead */
    int nvme_pipeline_write;                 /* pipeline_write (default 0): write behind */
} zcfg_zero;

/* The "aio" section (DeepSpeed's asynchronous I/O for NVMe offload). */
typedef struct {
    int64_t block_size;                      /* bytes per I/O request (default 1048576) */
    int queue_depth;                         /* requests in flight (default 8) */
    int intra_op_parallelism;                /* default 1; type-checked, no effect */
    int single_submit;                       /* default 0; type-checked, no effect */
    int overlap_events;                      /* default 1; type-checked, no effect */
} zcfg_aio;

/* zcfg_zero.offload_*: the device named in the file, kept so the resolved config says it. */
enum { ZCFG_OFFLOAD_NONE = 0, ZCFG_OFFLOAD_CPU = 1, ZCFG_OFFLOAD_NVME = 2 };

typedef struct {
    int tag_validation;           /* 0 ignore, 1 warn (default), 2 fail */
    int load_universal;           /* default 0 */
    int use_node_local_storage;   /* default 0 */
    int parallel_write;           /* default 0 (pipeline_stage only in DeepSpeed) */
} zcfg_ckpt;

/* What DeepSpeed has no key for: the "zinc" section. */
typedef struct {
    int ckpt_compression_level;   /* zstd level, default 3 */
    int ckpt_async;               /* default 0 */
    int ckpt_keep_last;           /* keep this many of the run's newest tags, 0 (default): all */
    size_t ckpt_chunk_bytes;      /* default 4 MiB */
    double comm_timeout_s;        /* collective timeout, default 300 */
    int grad_buckets;             /* stage 2/3 gradient buckets, default 2 */
    int gather_buffers;           /* stage 3 gather ring, default 2 */
    uint64_t device_memory_limit; /* bytes the device may allocate per rank, 0 (default) = no
                                     limit; cpu device only (docs/config.md) */
    uint64_t host_memory_limit;   /* bytes of host memory the plan may hold per rank (offloaded
                                     state, zinc_memory_host), 0 (default) = no limit */
    int nvme_checksum;            /* offload "nvme": check each chunk of the optimizer state read
                                     back, and with offload_param each gather's 16-bit slice
                                     (default 1) */
    int csv_monitor;              /* resolved from csv_monitor.enabled */
    char csv_output_path[512];
    char csv_job_name[128];
} zcfg_zinc;

typedef struct zcfg {
    /* batch (DeepSpeed's rule; resolved against world_size) */
    int64_t train_batch_size;
    int64_t micro_batch;                 /* train_micro_batch_size_per_gpu */
    int64_t grad_accum;                  /* gradient_accumulation_steps */
    double gradient_clipping;            /* default 1.0 (DeepSpeed >= 0.19.3); 0 = off */
    int64_t steps_per_print;             /* default 10 */
    int prescale_gradients;              /* default 0 */
    double gradient_predivide_factor;    /* default 1.0 */
    zinc_dtype communication_data_type;  /* default: the working dtype */
    int wall_clock_breakdown;
    int dataloader_drop_last;            /* default 0; read by a front-end's data loader
                                          * (Python's training_data): the engine has none */
    int managed_accumulation;            /* managed_gradient_accumulation, default 1: zinc counts
                                          * gradient_accumulation_steps; 0: every zinc_step ends
                                          * the window and zinc_micro_step ends the others */
    zinc_dtype dtype;                    /* working precision: fp16/bf16/fp32 */
    zinc_dtype grad_accum_dtype;         /* data_types.grad_accum_dtype: the dtype the gradient
                                          * sums are kept in, the working dtype or fp32 (16-bit
                                          * training at stages 1-3) */
    zcfg_fp16 fp16;
    zcfg_optim optim;
    zcfg_sched sched;
    zcfg_zero zero;
    zcfg_ckpt ckpt;
    zcfg_zinc zinc;
    zcfg_aio aio;
    uint64_t hash;                       /* XXH64 of the canonical resolved JSON (zcfg_to_json) */
    char hash_hex[17];
    /* The same without the batch sizes (train_batch_size, micro batch, accumulation steps),
     * which a run resumed at another world size changes anyway: what such a resume compares,
     * so that a setting changed with the world size (an lr) is still said */
    char settings_hash_hex[17];
} zcfg;

/* Values the caller has from elsewhere (CLI flags) that may fill "auto" or override. */
typedef struct {
    int world_size;               /* required, > 0 */
    int64_t micro_batch;          /* 0 = not given */
    double lr;                    /* < 0 = not given */
    int64_t grad_accum;           /* 0 = not given */
    int64_t train_batch_size;     /* 0 = not given */
} zcfg_overrides;

/* One diagnostic line per problem: "zero_optimization.stage: expected 0..3, got 4" — the full key
 * path, then what is wrong. Lines carry no "error: "/"warning: " prefix; the printer adds it
 * (zinc config check prints "error: <line>", zlog adds its own level tag). */
typedef struct {
    int nerrors, nwarnings;
    char **errors;                /* each names the full key path */
    char **warnings;
} zcfg_diag;

/* Parses and validates. Fills `out` on success (return ZINC_OK, warnings may be present);
 * returns ZINC_ERR_CONFIG with diag->errors on rejection (every problem, not only the first;
 * `out` untouched), ZINC_ERR_IO if the file can't be read (one error naming it), ZINC_ERR_NOMEM.
 * `path` labels syntax errors (may be NULL for text). `ov` NULL means world_size 1 and no
 * overrides; `diag` NULL discards the lines; otherwise free it with zcfg_diag_free. */
zinc_status zcfg_parse_text(const char *json, const char *path, const zcfg_overrides *ov,
                            zcfg *out, zcfg_diag *diag);
zinc_status zcfg_parse_file(const char *path, const zcfg_overrides *ov, zcfg *out, zcfg_diag *diag);
void zcfg_diag_free(zcfg_diag *diag);
/* A "scheduler" section alone (JSON text {"type": ..., "params": {...}}), read and checked as
 * zcfg_parse_text reads it in a config whose optimizer.params.lr is `optimizer_lr`: the key paths
 * of its lines start "scheduler.". For DeepSpeed's scheduler classes over a caller's optimizer
 * (zinc_schedule_eval). Returns as zcfg_parse_text; fills `out` on ZINC_OK. */
zinc_status zcfg_parse_scheduler_text(const char *section, double optimizer_lr, zcfg_sched *out,
                                      zcfg_diag *diag);


/* The resolved config as canonical JSON text (every default applied, members in a fixed order);
 * it is itself a valid config that resolves to the same zcfg and hash. Caller frees; NULL when
 * out of memory. */
char *zcfg_to_json(const zcfg *c);
/* The same plus a "hash" member: what `zinc config check --json` prints. Caller frees. */
char *zcfg_report_json(const zcfg *c);

/* DeepSpeed's engine.set_train_batch_size / set_train_micro_batch_size on a resolved config:
 * the micro batch and accumulation steps given, train_batch_size their product with world_size,
 * and the hash of the result. ZINC_ERR_INVALID_ARG (c unchanged) when a value is below 1 or the
 * product overflows, as the parser refuses them; ZINC_ERR_NOMEM when hashing fails (c half
 * changed: pass a copy). */
zinc_status zcfg_set_batch(zcfg *c, int64_t micro_batch, int64_t grad_accum, int64_t world_size);

/* Defaults for every field: what {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type":
 * "AdamW"}} resolves to at world_size 1, hash included. ("{}" itself is rejected, as DeepSpeed
 * rejects a config with neither train_batch_size nor train_micro_batch_size_per_gpu.) */
void zcfg_defaults(zcfg *c);

/* Where data_types.grad_accum_dtype "fp32" is DeepSpeed's arithmetic zinc has (engine/step.c
 * hand_over, reduce_grads): 16-bit training at ZeRO stages 1-3. The parser refuses it elsewhere;
 * the engine, `zinc plan` and `zinc estimate` ask the same question. */
static inline int zcfg_grad_fp32_allowed(int stage, zinc_dtype dtype)
{
    return stage >= 1 && dtype != ZINC_DTYPE_FP32;
}

/* Whether the gradient reduction runs in fp32 with 16-bit training: fp32 gradient sums with
 * communication_data_type "fp32". DeepSpeed 0.19.8 then reduces in fp32 with no 16-bit rounding
 * before the sums: at stages 2-3 each micro-step's gradient upcast (stage_1_and_2.py's fp32 IPG
 * bucket, stage3.py __avg_scatter_grads; engine/step.c hand_over), at stage 1 the fp32 sums
 * themselves at the boundary (reduce_grads), which otherwise round to the working dtype first.
 * Without fp32 sums the reduced gradient lands in the working dtype, one rounding either way. */
static inline int zcfg_reduces_fp32(const zcfg *c)
{
    return c->grad_accum_dtype == ZINC_DTYPE_FP32 && c->dtype != ZINC_DTYPE_FP32 &&
           c->communication_data_type == ZINC_DTYPE_FP32 && c->zero.stage >= 1;
}

/* Whether the engine offloads the optimizer state (engine/offload.c): offload_optimizer device
 * "cpu" (or the deprecated cpu_offload) or "nvme" at ZeRO stages 1-3, as DeepSpeed honours it. */
static inline int zcfg_offloads_optimizer(const zcfg *c)
{
    return c->zero.offload_optimizer != ZCFG_OFFLOAD_NONE && c->zero.stage > 0;
}

/* Whether the offloaded optimizer state lives in a file under zero.nvme_path rather than in host
 * memory (engine/offload_nvme.c). */
static inline int zcfg_offloads_nvme(const zcfg *c)
{
    return c->zero.offload_optimizer == ZCFG_OFFLOAD_NVME && c->zero.stage > 0;
}

/* Whether the engine keeps the 16-bit parameter shard off the device (engine/offload.c):
 * offload_param device "cpu" (or the deprecated cpu_offload_param) or "nvme" at ZeRO stage 3. The parser
 * refuses it without offload_optimizer ("cpu" or "nvme"), so this implies
 * zcfg_offloads_optimizer. */
static inline int zcfg_offloads_param(const zcfg *c)
{
    return c->zero.offload_param != ZCFG_OFFLOAD_NONE && c->zero.stage == 3;
}

/* offload_param "nvme" at stage 3: the 16-bit shard in the optimizer's scratch file (the parser
 * refuses it without offload_optimizer "nvme"). */
static inline int zcfg_offloads_param_nvme(const zcfg *c)
{
    return c->zero.offload_param == ZCFG_OFFLOAD_NVME && c->zero.stage == 3;
}

#endif
