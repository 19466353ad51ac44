/*
 * trainer.h — a minimal training loop over the built-in model for the model tests: local-world
 * ranks as threads, synthetic data, optional checkpoint save / resume with the data position as
 * the client blob. It does what `zinc train` does, written independently of tools/cmd_train.c.
 */
#ifndef ZINC_TESTS_MODEL_TRAINER_H
#define ZINC_TESTS_MODEL_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#define ZT_MAX_STEPS 1024
#define ZT_MAX_RANKS 8

typedef struct {
    const char *config_json;
    const char *spec;           /* model spec, e.g. "L1-D32-H2-T32" */
    int ranks;
    int steps;                  /* train until this many optimizer steps */
    uint64_t seed;              /* data seed, and the initial weights' unless init_seed != 0 */
    uint64_t init_seed;
    const char *save_dir;       /* with save_at > 0: save tag "s<save_at>" at that step */
    int save_at;
    const char *resume_dir;     /* resume from resume_dir/resume_tag before training */
    const char *resume_tag;
    int checkpoint;             /* the model's activation checkpointing (zm_model_create) */
    /* The checkpoint calls (zinc_ckpt_save/_wait/_load), set by tests that save or resume, so
     * that a test that does neither links without the checkpoint module. */
    zinc_status (*ckpt_save)(zinc_engine_t *, const char *, const char *,
                             const zinc_ckpt_save_options_t *);
    zinc_status (*ckpt_wait)(zinc_engine_t *);
    zinc_status (*ckpt_load)(zinc_engine_t *, const char *, const char *,
                             zinc_ckpt_load_options_t *);
    /* results */
    double loss[ZT_MAX_STEPS + 1];              /* mean over ranks, by step; NAN if not run */
    double rank_loss[ZT_MAX_RANKS][ZT_MAX_STEPS + 1];
    float *weights;             /* final master weights of every parameter, concatenated */
    size_t nweights;
    double floor;               /* the data's entropy rate */
    int start_step;
    int failures;               /* zinc calls that failed (already reported on stderr) */
} zt_train_job;

/* Runs the job; check job->failures afterwards. Frees nothing of a previous run: call
 * zt_train_free first when reusing. */
/* The ZeRO-3 bf16 AdamW + WarmupLR config the training and resume tests share. */
extern const char *const zt_zero3_bf16_config;

void zt_train(zt_train_job *job);
void zt_train_free(zt_train_job *job);

#endif
