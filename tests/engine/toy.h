/*
 * toy.h — a small model with analytic gradients for the engine tests, driven through the public
 * API exactly as a user's model would be.
 *
 * Loss per sample s: 0.5 * sum_i a_i (w_i - t_i - noise_{s,i})^2, so the gradient of a sample is
 * a_i (w_i - t_i - noise_{s,i}). A global batch of TOY_SAMPLES samples per micro-step is split
 * evenly over the ranks (TOY_SAMPLES is divisible by 1, 2, 3, 4, 6, 8), each rank adds the mean
 * over its samples times the loss multiplier into the gradient views — so the global update is
 * the same for every world size, up to rounding.
 */
#ifndef ZINC_TESTS_TOY_H
#define ZINC_TESTS_TOY_H

#include <stdint.h>

#include "zinc.h"

#define TOY_SAMPLES 24
#define TOY_MAX_PARAMS 16
#define TOY_GROUPS 5             /* the toy's groups, block0 .. block4 */

typedef struct toy_run {
    int world, stage, accum, steps;
    zinc_dtype dtype;
    double clip;                 /* gradient_clipping */
    const char *extra_json;      /* extra top-level config keys, e.g. "\"fp16\": {...}," or NULL */
    const char *zero_json;       /* extra zero_optimization members, each followed by ", ", or NULL */
    const char *zinc_json;       /* extra "zinc" members, each followed by ", ", or NULL */
    int64_t persist_threshold;   /* stage3_param_persistence_threshold; 0 = DeepSpeed's default,
                                    -1 = none persistent (every group gathered on demand) */
    const char *weight_decay;    /* the config's optimizer weight_decay (JSON); NULL = 0.01 */
    const double *group_wd;      /* [TOY_GROUPS]: zinc_group_set_weight_decay per group (NAN:
                                    none, the config's), or NULL */
    const char *lr;              /* the config's optimizer lr (JSON); NULL = 0.01 */
    const double *group_lr;      /* [TOY_GROUPS]: zinc_group_set_lr per group, set after
                                    zinc_finalize (NAN: none, the engine's), or NULL */
    const char *betas;           /* the config's optimizer betas (JSON); NULL = DeepSpeed's */
    const char *eps;             /* the config's optimizer eps (JSON); NULL = DeepSpeed's */
    const double (*group_betas)[2]; /* [TOY_GROUPS]: zinc_group_set_betas per group (NAN: none,
                                       the config's), or NULL */
    const double *group_eps;     /* [TOY_GROUPS]: zinc_group_set_eps per group (NAN: none), or
                                    NULL */
    int group_values_at;         /* when group_wd, group_betas and group_eps are set: 0 at
                                    registration (before zinc_finalize); k > 0 after finalize,
                                    before optimizer step k (1: the first) */
    int boundary;                /* who ends the accumulation window (TOY_COUNT: zinc) */
    const int *windows;          /* [steps]: micro-steps of each optimizer step when the caller
                                    owns the boundary (TOY_SET_*, TOY_UNMANAGED); NULL: accum */
    int grad_external;           /* zinc_grad_buffer_external: each rank lends a fresh buffer
                                    (filled with garbage first) at the first micro-step of every
                                    window, and checks that zinc no longer wrote the previous
                                    window's once that window's step returned (else the run fails
                                    with ZINC_ERR_MISMATCH) */
    int inject_inf_step;         /* optimizer step at which rank `inject_rank` writes an inf, or -1 */
    int inject_rank;
    /* outputs */
    int nparams;
    float *final[TOY_MAX_PARAMS];      /* fp32 master values after the run (caller frees) */
    int64_t numel[TOY_MAX_PARAMS];
    zinc_step_info_t last_info;
    int applied, skipped;
    int boundaries;                    /* zinc_step calls that reported a boundary (rank 0) */
    uint64_t waits_min, waits_max;     /* zinc_host_waits over one optimizer step (its whole
                                          window of micro-steps), fewest and most (rank 0) */
    zinc_status status;                /* first failure of any rank */
    char error[512];
} toy_run;

/* toy_run.boundary: how the run ends its micro-steps. */
enum {
    TOY_COUNT = 0,       /* zinc_step after every micro-step; zinc counts accum */
    TOY_SET_STEP_EACH,   /* zinc_set_accumulation_boundary(last ? 1 : 0) before each micro-step's
                            backward, zinc_step after each (DeepSpeed's engine.step() each time) */
    TOY_SET_STEP_LAST,   /* the same settings, zinc_micro_step for the window's inner micro-steps
                            and zinc_step after its last (Hugging Face Accelerate's pattern) */
    TOY_UNMANAGED,       /* managed_gradient_accumulation false: zinc_micro_step inside the
                            window, zinc_step at its end */
};

/* Builds the config, runs `steps` optimizer steps on `world` local ranks, fills the outputs. */
void toy_train(toy_run *r);
void toy_free(toy_run *r);
/* The same on an MPI world: this process runs its own rank; outputs are filled on rank 0. */
void toy_train_on(toy_run *r, zinc_world_t *world);

/* The config JSON the toy uses (caller frees). */
char *toy_config(const toy_run *r);

/* Registers the toy's groups/params on an engine and sets the initial values. */
zinc_status toy_register(zinc_engine_t *e, int *nparams);
/* The same, with r's weight decay, betas and eps per group (r NULL: none). */
zinc_status toy_register_run(zinc_engine_t *e, int *nparams, const toy_run *r);
/* The toy group that parameter p belongs to. */
int toy_param_group(int p);
/* A one-rank engine (its own world) on the toy's config, registered and initialised. */
zinc_status toy_engine(const toy_run *r, zinc_engine_t **e, int *nparams);
/* toy_engine's engine, or NULL after a test failure naming `what` (the engine destroyed). */
zinc_engine_t *toy_engine_checked(const toy_run *r, int *nparams, const char *what);
/* The bytes zinc_memory (host == 0) or zinc_memory_host (host != 0) plans for r's one-rank
 * engine, all categories summed; 0 after a test failure when the engine cannot be made. */
uint64_t toy_memory_total(const toy_run *r, int host);
/* Rank `rank`'s engine on `world` (NULL: a world of its own), one thread, created from
 * `config_json` (NULL: toy_config(r)), registered and initialised (with r's group decays and
 * learning rates). *e is NULL when the create
 * failed, else set even when the registration failed (for zinc_last_error); caller destroys. */
zinc_status toy_engine_on(const toy_run *r, zinc_world_t *world, int rank, const char *config_json,
                          zinc_engine_t **e, int *nparams);

/* Micro-step `micro` of rank `rank`: the gathers, the gradients of the rank's samples added and
 * handed over (zinc_grads_ready), without zinc_step; an inf written where `inject_inf`. */
zinc_status toy_micro_step(zinc_engine_t *e, int rank, int world, int micro, int nparams,
                           int inject_inf);
/* Optimizer steps first .. first + steps - 1 of rank `rank` with accumulation 1: a micro-step
 * (toy_micro_step) and zinc_step each. */
zinc_status toy_steps(zinc_engine_t *e, int rank, int world, int first, int steps, int nparams);

/* Comparing runs (the offload and stage tests). toy_weights_equal: the same parameters with
 * bitwise the same final fp32 masters (0 when either run has none). toy_same_training: that, and
 * bitwise the same last gradient norms and loss scales and the same applied/skipped counts.
 * toy_run_ok: toy_train, with a test failure naming the run when it fails. */
int toy_weights_equal(const toy_run *a, const toy_run *b);
int toy_same_training(const toy_run *a, const toy_run *b);
int toy_run_ok(toy_run *r, const char *what);
/* Checks (ZT_CHECK, messages prefixed by label) that `other` trained exactly as `ref`, and that
 * `ref` trained at all. */
void toy_expect_same_training(const toy_run *ref, const toy_run *other, const char *label);
/* Trains `ref` and the same run with zero_json as its zero_optimization members (`what` names
 * that run in a failure) and expects the same training (toy_expect_same_training). */
void toy_expect_same_with_zero(toy_run ref, const char *zero_json, const char *what,
                               const char *label);

/* A checkpoint round trip across settings on 2 local ranks: `steps` optimizer steps of an engine
 * with `save_zero` as its zero_optimization members, a save to `dir`, a new engine with
 * `load_zero`, the load, `steps` more; rank 0's final masters into *out (caller frees with
 * toy_free). Failures are test failures naming the rank. */
void toy_resume_run(int stage, zinc_dtype dtype, const char *save_zero, const char *load_zero,
                    const char *dir, int steps, toy_run *out);

/* One micro-step of forward/backward for rank `rank` of `world` at global micro-step `micro`. */
zinc_status toy_micro_step(zinc_engine_t *e, int rank, int world, int micro, int nparams,
                           int inject_inf);

#endif
