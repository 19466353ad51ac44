/*
 * train.h — what the pieces of `zinc train` share (private to tools/train_*.c and cmd_train.c).
 *
 *   cmd_train.c        the entry point: parse, resolve the config, open the data, then either the
 *                      self-check or one run
 *   train_args.c       --help text, option parsing and validation, the resolved config
 *   train_loop.c       world, engines and model per rank; the training loop; run_ranks()
 *   train_ckpt.c       save/resume policy: --save-dir/--save-every, --resume DIR|auto, client blob
 *   train_report.c     startup summary, progress lines and bar, metrics JSONL, csv_monitor files
 *   train_selfcheck.c  no arguments: train, checkpoint half-way, resume, compare bit for bit
 *
 * One run is a run_t: the caller fills the inputs (what to train up to, where to resume from and
 * save to, the open metrics files), run_ranks() starts every rank of this process on it, and rank
 * 0 fills the results. Ranks report a failure through train_fail(), which keeps the first cause
 * and aborts the world so that no rank waits on another.
 */
#ifndef ZINC_TOOLS_TRAIN_H
#define ZINC_TOOLS_TRAIN_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "config/config.h"
#include "models/cuda/gpt_cuda.h"
#include "models/data.h"
#include "models/gpt.h"
#include "zinc.h"

/* ---- options (train_args.c) ----------------------------------------------------------------- */

typedef struct {
    char config_path[1024];
    char *config_json;          /* resolved config text when CLI flags override it, else NULL */
    zcfg cfg;                   /* the resolved config: batch, steps_per_print, csv_monitor */
    int ranks, mpi;
    const char *device;
    zm_spec spec;
    char spec_str[48];
    long long steps;
    const char *data_path;
    const char *save_dir;
    long long save_every;
    int keep_last;              /* --keep-last; 0 = the config's zinc.ckpt_keep_last */
    const char *resume;         /* DIR, "auto" or NULL */
    const char *metrics_path;
    uint64_t seed;
    long long micro_batch;      /* 0 = from the config */
    long long grad_accum;       /* --grad-accum; 0 = from the config */
    long long train_batch_size; /* --train-batch-size; 0 = from the config */
    double lr;                  /* < 0 = from the config */
    int threads;                /* model threads per rank (--threads, else cores / local ranks) */
    int demo;                   /* no arguments: train, save, resume, compare */
    int rank0;                  /* this process holds rank 0 (always, without mpirun) */
    int cuda;                   /* --device cuda: the model's CUDA version (models/cuda/) */
    zm_cuda_kernels gpu_kernels; /* --gpu-kernels exact|fast (cuda only; default exact) */
    int gpu_timing;             /* --gpu-timing: rank 0's per-phase GPU times (cuda only) */
    int checkpoint;             /* --activation-checkpointing: the model recomputes in backward */
    int launched;               /* cuda under torchrun/srun/mpirun: zinc_world_create_launched */
    int under_mpirun;           /* started by mpirun (any size): its ranks get a terminal, no bar */
} topts;

/* Fills *o from argv (defaults, the MPI or launcher world, the default config path). Returns 0,
 * -1 after printing --help (exit 0), or 2 after a usage error on stderr. */
int train_parse_args(int argc, char **argv, topts *o);

/* Reads and validates the config as the engines will, with the CLI's overrides, into o->cfg (and
 * o->config_json when an override changes it; the caller frees it). Returns an exit code. */
int train_resolve_config(topts *o);

/* ---- one run (train_loop.c) ----------------------------------------------------------------- */

typedef struct {
    const topts *o;
    zinc_world_t *world;
    zm_data *data;
    long long stop_at;          /* train until this many optimizer steps */
    long long stop_req;         /* local ranks: the step to stop after on SIGINT/SIGTERM (0:
                                   none; rank 0 sets it one step ahead, read atomically) */
    int interrupted;            /* the run stopped early on a signal or a failed output (set
                                   atomically by the ranks) */
    int report_end;             /* run_ranks prints rank 0's closing lines (train_report_end)
                                   before the world ends: under mpirun a signal's job teardown
                                   kills the ranks inside MPI_Finalize, after the save */
    const char *resume_dir;     /* NULL: fresh */
    const char *resume_tag;     /* NULL: newest valid */
    char resume_buf[2][1100];   /* resume_dir and resume_tag when --resume names a tag */
    const char *save_dir;
    long long save_every;
    int quiet;                  /* no startup summary (the demo's second run) */
    FILE *metrics;
    FILE *csv[3];
    char csv_path[3][1200];
    /* A write to one of those failed (rank 0 sets it, the ranks read it atomically; under
     * mpirun every process learns it with the step's loss): the run stops after the step as on
     * a signal, saving first, and exits 1; out_error (rank 0's) says which. */
    int out_failed;
    char out_error[1400];
    /* results, filled by rank 0 */
    int keep_losses;            /* fill step_loss (the demonstration); else only final_loss */
    double *step_loss;          /* [stop_at + 1] mean loss by step number; NAN where not run */
    double final_loss;          /* the last step's mean loss */
    long long skipped_begin;    /* zinc's skipped-step count before this run's first step, or -1 */
    long long skipped_end;      /* ... after its last */
    float *weights;             /* final fp32 master weights of every parameter, concatenated */
    size_t nweights;
    long long start_step, end_step;
    double seconds;
    /* --gpu-timing, filled by rank 0 (train_report_timing prints them): the CUDA model's GPU
     * milliseconds per phase (gpt_cuda.h) and intervals summed over steps timed_from..end_step,
     * and the host clock over the same steps: wall time and zinc_step's share of it */
    int timed;                  /* 1 when the fields below hold a breakdown */
    double phase_ms[ZM_PH_COUNT];
    long long phase_n[ZM_PH_COUNT], timed_from, timed_micro_steps;
    double timed_wall_s, timed_zstep_s;
    /* losses of the ranks, two slots so that a slot is read before it is written again */
    double *rank_loss;          /* [2 * ranks] */
    pthread_mutex_t mu;
    zinc_status err;
    int err_exit;               /* exit code for the first error */
    char errmsg[1200];
} run_t;

/* Before any world or engine: with --device cuda and no GPU (or no CUDA build), says so on stderr.
 * Returns 0 when the device can be used, else the exit code. */
int train_check_device(const topts *o);

/* Runs every rank of this process to r->stop_at. Returns an exit code; the error is on stderr. */
int run_ranks(run_t *r);

/* Frees the results of a run (not the metrics files). */
void run_free(run_t *r);

/* Records the first error of a run (exit_code for the process) and stops the other ranks. */
void train_fail(run_t *r, int rank, zinc_status s, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- checkpoints (train_ckpt.c) ------------------------------------------------------------- */

/* Saved with every checkpoint: where the data stream and the step count stand. */
typedef struct {
    uint32_t magic, version;
    char spec[48];
    zm_data_pos data;
    int64_t steps;              /* optimizer steps taken (applied + skipped) */
} train_blob;

/* Sets *blob to the start of a fresh run, then, when r->resume_dir is set, loads that checkpoint
 * into the engine and its position into *blob. Returns 0, or -1 after train_fail(). */
int train_ckpt_start(run_t *r, zinc_engine_t *e, int rank, train_blob *blob);

/* After step blob->steps: saves into r->save_dir when a save is due (every r->save_every steps,
 * at r->stop_at, and when `last`: a signal ends the run there); bar: a progress bar is on the
 * line. Returns 0, or -1 after train_fail(). */
int train_ckpt_after_step(run_t *r, zinc_engine_t *e, int rank, const train_blob *blob, int bar,
                          int last);

/* SIGINT and SIGTERM end the run after the current step, with a checkpoint when --save-dir is
 * given (a second signal kills at once): install before run_ranks, restore after. say: the
 * line written to stderr at the first signal (NULL: none; rank 0's process says it). */
void train_interrupt_install(const char *say);
void train_interrupt_restore(void);


/* Before the run: refuses a --save-dir that is not a directory, lies in a tag, or holds the
 * user's files where this run's saves write (see zck_save_target_check), and settles
 * --resume DIR|auto into r->resume_dir and r->resume_tag (dir NULL: start fresh; tag NULL: the
 * one a load picks).
 * DIR may be a save directory or one of its tags (DIR/TAG, with its manifest); auto resumes when
 * --save-dir holds a checkpoint, `latest` or not. Returns 0 or the exit code. */
int train_ckpt_prepare(const topts *o, run_t *r);

/* ---- output (train_report.c) ---------------------------------------------------------------- */

typedef struct {
    double t_last, t_start;
    long long steps_last;
    int bar;
    /* Seconds since the last print in the model's micro-steps (forward and backward, with the
     * engine's per-group gather/release/grads_ready calls inside them) and in zinc_step. */
    double model_s, zstep_s;
} progress_t;

/* Rank 0, before the first step: model, data, config, world, batch and memory per rank.
 * ntensors: the model's parameter count; model_bytes: its own memory beside the engine's. */
void train_print_summary(const run_t *r, zinc_engine_t *e, int ntensors, size_t model_bytes);

/* Rank 0, after each step: the progress line every steps_per_print steps (and the first and last
 * step), the same to the metrics files, and the bar when stdout is a terminal. */
void train_report_step(run_t *r, progress_t *p, long long step, const zinc_step_info_t *info,
                       double loss, size_t mem_rank);

/* Rank 0, before a run: opens --metrics and the csv_monitor files into r (appending when
 * resuming). Returns 0 or the exit code. train_report_close() closes whatever was opened. */
int train_report_open(const topts *o, run_t *r);
/* Returns 1 when a write to an output failed (said on stderr), else 0. */
int train_report_close(run_t *r);

/* Rank 0, after a run that did not fail: the closing line, --gpu-timing's table (on stdout and,
 * with --metrics, as one {"gpu_timing": ...} line; docs/train.md) and, when a signal stopped it,
 * what was saved. */
void train_report_end(const run_t *r);

/* ---- the self-check (train_selfcheck.c) ----------------------------------------------------- */

/* No arguments: train, checkpoint half-way, resume in a second run, compare. Returns an exit
 * code: 1 when the resumed run does not continue exactly. */
int train_selfcheck(topts *o, zm_data *data);

/* ---- small helpers ------------------------------------------------------------------------- */

static inline double train_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int train_file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

#endif
