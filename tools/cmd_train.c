/*
 * cmd_train.c — `zinc train`: trains the built-in model (models/) from a DeepSpeed-style config.
 *
 * Ranks are threads of one process (a `local` world, one zinc engine per thread), or processes
 * under mpirun (an `mpi` world, one rank here). Every rank reads its own share of each global
 * batch from the same data source; rank 0 prints progress and writes metrics.
 *
 * With no arguments (what `make run` runs) it is a demonstration: the default model on 4 local
 * ranks under ZeRO-3 from configs/zero3_bf16.json, trained, checkpointed half-way, then resumed
 * from that checkpoint in a second run, whose steps and final weights are compared bit for bit
 * with the uninterrupted run.
 *
 * Exit codes: 0 done, 1 runtime failure (or the resume check failed), 2 bad usage or input.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "models/data.h"
#include "models/cuda/gpt_cuda.h"
#include "models/gpt.h"
#include "tools/commands.h"
#include "zinc.h"

#ifndef ZINC_SOURCE_DIR
#define ZINC_SOURCE_DIR "."
#endif

#define CMD "train"
#define DEFAULT_CONFIG "configs/zero3_bf16.json"
#define DEFAULT_STEPS 100
#define DEFAULT_RANKS 4

/* ---- options -------------------------------------------------------------------------------- */

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
    const char *resume;         /* DIR, "auto" or NULL */
    const char *metrics_path;
    uint64_t seed;
    long long micro_batch;      /* 0 = from the config */
    double lr;                  /* < 0 = from the config */
    int threads;                /* model threads per rank; 0 = cores / local ranks */
    int demo;                   /* no arguments: train, save, resume, compare */
    int rank0;                  /* this process holds rank 0 (always, without mpirun) */
    int cuda;                   /* --device cuda: the model's CUDA version (models/cuda/) */
    int launched;               /* cuda under torchrun/srun/mpirun: zinc_world_create_launched */
} topts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zinc train [options]\n"
            "\n"
            "Trains the built-in byte-level GPT model with the zinc engine. With no options:\n"
            "4 local ranks, ZeRO-3, bf16 (" DEFAULT_CONFIG "), synthetic data; trains, saves a\n"
            "checkpoint half-way, resumes from it and checks that the resumed run matches.\n"
            "\n"
            "  --config FILE      DeepSpeed-style JSON config (default " DEFAULT_CONFIG ")\n"
            "  --ranks N          local ranks (threads), default %d; under mpirun: the MPI world\n"
            "  --device cpu|cuda  where the engine and the model run; cuda: one GPU per process\n"
            "                     under torchrun/srun/mpirun, or --ranks N threads sharing GPU 0\n"
            "  --model SPEC       model size, default " ZM_DEFAULT_SPEC
            " (layers, width, heads, context)\n"
            "  --steps N          total optimizer steps of the run, default %d; a resumed run\n"
            "                     continues up to N\n"
            "  --data FILE        train on a file: bytes of any file, or uint16 tokens (< 256) of a\n"
            "                     .bin token file (llm.c header or raw nanoGPT); default: a synthetic\n"
            "                     Markov chain with a known entropy rate\n"
            "  --save-dir DIR     checkpoint directory (tags step000100, ...; DIR/latest)\n"
            "  --save-every K     save every K steps (and at the end) into --save-dir\n"
            "  --resume DIR|auto  resume from the newest valid checkpoint in DIR; auto: from\n"
            "                     --save-dir if it has one, else start fresh\n"
            "  --metrics FILE     JSON lines, one object per logged step (zinc plot draws them)\n"
            "  --seed N           seed of the initial weights and of the data, default 1\n"
            "  --micro-batch N    override train_micro_batch_size_per_gpu\n"
            "  --lr X             override optimizer.params.lr\n"
            "  --threads N        model threads per rank, default cores / local ranks\n"
            "  --help             this text\n",
            DEFAULT_RANKS, DEFAULT_STEPS);
}

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Processes started by torchrun (WORLD_SIZE, RANK) or inside an srun step (SLURM_*): their
 * number, this one's rank in *rank; 0 when neither. zinc_world_create_launched reads the same. */
static int launcher_world(int *rank)
{
    const char *ws = getenv("WORLD_SIZE"), *rk = getenv("RANK");
    if (!ws || !rk) {
        ws = getenv("SLURM_STEP_NUM_TASKS");
        if (!ws) ws = getenv("SLURM_NTASKS");
        rk = getenv("SLURM_PROCID");
        if (!getenv("SLURM_STEP_ID")) ws = NULL;
    }
    if (!ws || !rk) return 0;
    *rank = atoi(rk);
    return atoi(ws);
}

static int parse_args(int argc, char **argv, topts *o)
{
    int env_rank = 0;
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->steps = DEFAULT_STEPS;
    o->seed = 1;
    o->lr = -1.0;
    snprintf(o->spec_str, sizeof o->spec_str, "%s", ZM_DEFAULT_SPEC);
    int have_ranks = 0, have_config = 0;
    o->demo = argc <= 1;
    o->rank0 = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        }
        if (strncmp(a, "--", 2) != 0)
            return zarg_usage_error(CMD, "unexpected argument '%s'", a);
        if (i + 1 >= argc) return zarg_usage_error(CMD, "%s needs a value", a);
        const char *v = argv[++i];
        long long n;
        double x;
        if (!strcmp(a, "--config")) {
            snprintf(o->config_path, sizeof o->config_path, "%s", v);
            have_config = 1;
        } else if (!strcmp(a, "--ranks")) {
            if (zarg_int64(v, &n) || n < 1 || n > 1024)
                return zarg_usage_error(CMD, "--ranks: expected 1..1024, got '%s'", v);
            o->ranks = (int)n;
            have_ranks = 1;
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return zarg_usage_error(CMD, "--device: expected cpu or cuda, got '%s'", v);
            o->device = v;
        } else if (!strcmp(a, "--model")) {
            char err[256];
            if (zm_spec_parse(v, &o->spec, err, sizeof err))
                return zarg_usage_error(CMD, "--model: %s", err);
            snprintf(o->spec_str, sizeof o->spec_str, "%s", v);
        } else if (!strcmp(a, "--steps")) {
            if (zarg_int64(v, &n) || n < 1)
                return zarg_usage_error(CMD, "--steps: expected a positive whole number, got '%s'", v);
            o->steps = n;
        } else if (!strcmp(a, "--data")) {
            o->data_path = v;
        } else if (!strcmp(a, "--save-dir")) {
            o->save_dir = v;
        } else if (!strcmp(a, "--save-every")) {
            if (zarg_int64(v, &n) || n < 1)
                return zarg_usage_error(CMD, "--save-every: expected a positive whole number, got '%s'", v);
            o->save_every = n;
        } else if (!strcmp(a, "--resume")) {
            o->resume = v;
        } else if (!strcmp(a, "--metrics")) {
            o->metrics_path = v;
        } else if (!strcmp(a, "--seed")) {
            if (zarg_int64(v, &n) || n < 0)
                return zarg_usage_error(CMD, "--seed: expected a whole number >= 0, got '%s'", v);
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--micro-batch")) {
            if (zarg_int64(v, &n) || n < 1 || n > 65536)
                return zarg_usage_error(CMD, "--micro-batch: expected 1..65536, got '%s'", v);
            o->micro_batch = n;
        } else if (!strcmp(a, "--lr")) {
            if (zarg_double(v, &x) || x < 0)
                return zarg_usage_error(CMD, "--lr: expected a number >= 0, got '%s'", v);
            o->lr = x;
        } else if (!strcmp(a, "--threads")) {
            if (zarg_int64(v, &n) || n < 1 || n > 64)
                return zarg_usage_error(CMD, "--threads: expected 1..64, got '%s'", v);
            o->threads = (int)n;
        } else {
            return zarg_usage_error(CMD, "unknown option '%s'", a);
        }
    }
    if (zm_spec_parse(o->spec_str, &o->spec, (char[256]){0}, 256)) return 2;
    if (o->save_every && !o->save_dir)
        return zarg_usage_error(CMD, "--save-every needs --save-dir");
    if (o->resume && !strcmp(o->resume, "auto") && !o->save_dir)
        return zarg_usage_error(CMD, "--resume auto needs --save-dir (where to look)");
    o->cuda = !strcmp(o->device, "cuda");
    /* Under mpirun the world is MPI's; --ranks must then agree with it. */
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    if (!env) env = getenv("PMI_SIZE");
    if (env && atoi(env) > 1) {
        o->mpi = 1;
        if (have_ranks && o->ranks != atoi(env))
            return zarg_usage_error(CMD, "--ranks %d but mpirun started %s processes", o->ranks, env);
        o->ranks = atoi(env);
        const char *rk = getenv("OMPI_COMM_WORLD_RANK");
        if (!rk) rk = getenv("PMI_RANK");
        o->rank0 = !rk || atoi(rk) == 0;
    } else if (o->cuda && launcher_world(&env_rank) > 1) {
        /* torchrun / srun: one GPU per process, the world from the launcher's environment */
        int n = launcher_world(&env_rank);
        if (have_ranks && o->ranks != n)
            return zarg_usage_error(CMD, "--ranks %d but the launcher started %d processes",
                                    o->ranks, n);
        o->mpi = 1;
        o->ranks = n;
        o->rank0 = env_rank == 0;
    } else if (!have_ranks) {
        o->ranks = DEFAULT_RANKS;
    }
    o->launched = o->cuda && o->mpi;
    if (!have_config) {
        snprintf(o->config_path, sizeof o->config_path, "%s", DEFAULT_CONFIG);
        if (!file_exists(o->config_path))
            snprintf(o->config_path, sizeof o->config_path, "%s/%s", ZINC_SOURCE_DIR,
                     DEFAULT_CONFIG);
    }
    return 0;
}

/* Reads and validates the config as the engines will, with the CLI's overrides. */
static int resolve_config(topts *o)
{
    zcfg_overrides ov = {.world_size = o->ranks, .micro_batch = o->micro_batch, .lr = o->lr};
    zcfg_diag diag = {0};
    zinc_status s = zcfg_parse_file(o->config_path, &ov, &o->cfg, &diag);
    for (int i = 0; i < diag.nwarnings; i++)
        fprintf(stderr, "zinc train: config warning: %s\n", diag.warnings[i]);
    if (s != ZINC_OK) {
        if (diag.nerrors == 0)
            fprintf(stderr, "zinc train: cannot use config '%s': %s\n", o->config_path,
                    s == ZINC_ERR_IO ? strerror(errno) : zinc_status_string(s));
        size_t pl = strlen(o->config_path);
        for (int i = 0; i < diag.nerrors; i++) {
            /* name the file once, whether or not the parser's message already does */
            int named = !strncmp(diag.errors[i], o->config_path, pl);
            fprintf(stderr, "zinc train: %s%s%s\n", named ? "" : o->config_path,
                    named ? "" : ": ", diag.errors[i]);
        }
        zcfg_diag_free(&diag);
        return 2;
    }
    zcfg_diag_free(&diag);
    if (o->micro_batch > 0 || o->lr >= 0) {
        o->config_json = zcfg_to_json(&o->cfg);
        if (!o->config_json) {
            fprintf(stderr, "zinc train: out of memory\n");
            return 1;
        }
    }
    return 0;
}

/* ---- one run: ranks train from a start (fresh or a checkpoint) up to a step ----------------- */

/* Saved with every checkpoint: where the data stream and the step count stand. */
typedef struct {
    uint32_t magic, version;
    char spec[48];
    zm_data_pos data;
    int64_t steps;              /* optimizer steps taken (applied + skipped) */
} train_blob;

#define BLOB_MAGIC 0x4e49415au  /* "ZAIN" */

typedef struct {
    const topts *o;
    zinc_world_t *world;
    zm_data *data;
    long long stop_at;          /* train until this many optimizer steps */
    const char *resume_dir;     /* NULL: fresh */
    const char *resume_tag;     /* NULL: newest valid */
    const char *save_dir;
    long long save_every;
    int quiet;                  /* no startup summary (the demo's second run) */
    FILE *metrics;
    FILE *csv[3];
    /* results, filled by rank 0 */
    double *step_loss;          /* [stop_at + 1] mean loss by step number; NAN where not run */
    float *weights;             /* final fp32 master weights of every parameter, concatenated */
    size_t nweights;
    long long start_step, end_step;
    double seconds;
    /* losses of the ranks, two slots so that a slot is read before it is written again */
    double *rank_loss;          /* [2 * ranks] */
    pthread_mutex_t mu;
    zinc_status err;
    int err_exit;               /* exit code for the first error */
    char errmsg[1200];
} run_t;

typedef struct {
    run_t *r;
    int rank;
} rank_arg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Records the first error and stops the other ranks. */
static void fail(run_t *r, int rank, zinc_status s, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void fail(run_t *r, int rank, zinc_status s, int exit_code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&r->mu);
    /* A rank that stopped because another failed reports ABORTED; keep the cause instead. */
    if (r->err == ZINC_OK || (r->err == ZINC_ERR_ABORTED && s != ZINC_ERR_ABORTED)) {
        r->err = s;
        r->err_exit = exit_code;
        snprintf(r->errmsg, sizeof r->errmsg, "rank %d: %s", rank, msg);
    }
    pthread_mutex_unlock(&r->mu);
    zinc_world_abort(r->world, rank, msg);
}

static const char *human_bytes(double b, char *buf, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024.0 && i < 4) b /= 1024.0, i++;
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

static void json_num(FILE *f, const char *key, double v, int last)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.9g%s", key, v, last ? "" : ",");
    else
        fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

/* The built-in model on the CPU (models/gpt.h) or its CUDA version (models/cuda/gpt_cuda.h):
 * the same groups, parameters and micro-step, picked by --device. */
typedef struct {
    zm_model *cpu;
    zm_cuda_model *cuda;
} tmodel;

static zinc_status tm_create(const topts *o, zinc_engine_t *e, int B, tmodel *m)
{
    return o->cuda ? zm_cuda_model_create(e, &o->spec, B, &m->cuda)
                   : zm_model_create(e, &o->spec, B, o->threads, &m->cpu);
}

static zinc_status tm_init(tmodel *m, uint64_t seed)
{
    return m->cuda ? zm_cuda_model_init(m->cuda, seed) : zm_model_init(m->cpu, seed);
}

static zinc_status tm_micro_step(tmodel *m, const uint16_t *tok, const uint16_t *tgt,
                                 double *loss)
{
    return m->cuda ? zm_cuda_model_micro_step(m->cuda, tok, tgt, loss)
                   : zm_model_micro_step(m->cpu, tok, tgt, loss);
}

static const int *tm_params(const tmodel *m, int *n)
{
    return m->cuda ? zm_cuda_model_params(m->cuda, n) : zm_model_params(m->cpu, n);
}

static size_t tm_bytes(const tmodel *m)
{
    return m->cuda ? zm_cuda_model_bytes(m->cuda) : zm_model_bytes(m->cpu);
}

static void tm_destroy(tmodel *m)
{
    zm_cuda_model_destroy(m->cuda);
    zm_model_destroy(m->cpu);
}

/* The CUDA model's own failures (CUDA, cuBLAS) are the thread's last error; the engine's calls
 * set both. */
static const char *tm_error(const tmodel *m, const zinc_engine_t *e)
{
    return m->cuda ? zinc_last_error(NULL) : zinc_last_error(e);
}

static void print_summary(const run_t *r, zinc_engine_t *e, const tmodel *m)
{
    const topts *o = r->o;
    const zcfg *c = &o->cfg;
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT], total = 0;
    char b1[32], b2[32];
    zinc_memory(e, planned, alloc);
    int np;
    tm_params(m, &np);
    printf("zinc train: model %s: %lld parameters in %d groups (%d tensors), vocab %d\n",
           o->spec_str, (long long)zm_param_total(&o->spec), zm_group_count(&o->spec), np,
           ZM_VOCAB);
    printf("  data      %s\n", zm_data_describe(r->data));
    printf("  config    %s  hash %s\n", o->config_path, zinc_config_hash(e));
    printf("  resolved  ZeRO stage %d, %s, %s lr %g betas (%g, %g) eps %g wd %g, clip %g, "
           "scheduler %s\n",
           zinc_engine_stage(e), zinc_dtype_name(zinc_engine_dtype(e)),
           c->optim.type_adamw ? "AdamW" : "Adam", c->optim.lr, c->optim.beta1, c->optim.beta2,
           c->optim.eps, c->optim.weight_decay, c->gradient_clipping,
           c->sched.type == ZSCHED_NONE ? "none" : c->sched.type == ZSCHED_WARMUP_LR ? "WarmupLR"
           : c->sched.type == ZSCHED_WARMUP_DECAY_LR ? "WarmupDecayLR"
           : c->sched.type == ZSCHED_WARMUP_COSINE_LR ? "WarmupCosineLR"
           : c->sched.type == ZSCHED_ONE_CYCLE ? "OneCycle" : "LRRangeTest");
    if (c->dtype == ZINC_DTYPE_FP16)
        printf("            fp16 loss scale %s\n", c->fp16.loss_scale > 0 ? "static" : "dynamic");
    if (o->cuda)
        printf("  world     %d %s, comm %s, device cuda (model on the GPU)\n",
               zinc_engine_world_size(e),
               o->launched ? "processes, one GPU each" : "local ranks (threads) on one GPU",
               o->launched || o->ranks == 1 ? "nccl" : "local, staged through host memory");
    else
        printf("  world     %d %s, comm %s, device %s, model threads/rank %d\n",
               zinc_engine_world_size(e), o->mpi ? "MPI processes" : "local ranks (threads)",
               o->mpi ? "mpi" : "local", o->device, o->threads);
    printf("  batch     %lld seq x %d ranks x %lld accumulation = %lld sequences of %d tokens "
           "per step\n",
           (long long)c->micro_batch, o->ranks, (long long)c->grad_accum,
           (long long)(c->micro_batch * o->ranks * c->grad_accum), o->spec.T);
    printf("  memory/rank");
    for (int i = 0; i < ZINC_MEM_COUNT; i++) {
        total += alloc[i];
        if (alloc[i]) printf(" %s %s", zinc_mem_category_name((zinc_mem_category)i),
                             human_bytes((double)alloc[i], b1, sizeof b1));
    }
    printf("; engine %s + model %s\n", human_bytes((double)total, b1, sizeof b1),
           human_bytes((double)tm_bytes(m), b2, sizeof b2));
    double H = zm_data_entropy(r->data);
    if (isfinite(H))
        printf("  floor     entropy rate %.4f nats/token (uniform guess: ln 256 = %.4f)\n", H,
               log(256.0));
    fflush(stdout);
}

typedef struct {
    double t_last, t_start;
    long long steps_last;
    int bar;
    /* Seconds since the last print in the model's micro-steps (forward and backward, with the
     * engine's per-group gather/release/grads_ready calls inside them) and in zinc_step. */
    double model_s, zstep_s;
} progress_t;

static void report_step(run_t *r, progress_t *p, zinc_engine_t *e, long long step,
                        const zinc_step_info_t *info, double loss, size_t mem_rank)
{
    const topts *o = r->o;
    double now = now_s();
    long long every = o->cfg.steps_per_print > 0 ? o->cfg.steps_per_print : 10;
    int print = step % every == 0 || step == r->stop_at || step == r->start_step + 1;
    double tok_step = (double)(o->cfg.micro_batch * o->ranks * o->cfg.grad_accum) * o->spec.T;
    if (r->metrics && print) {
        FILE *f = r->metrics;
        double dt = (now - p->t_last) / (double)(step - p->steps_last);
        fprintf(f, "{\"step\":%lld,", step);
        /* 17 digits: the exact double, so that runs can be compared bit for bit */
        if (isfinite(loss))
            fprintf(f, "\"loss\":%.17g,", loss);
        else
            fprintf(f, "\"loss\":null,");
        json_num(f, "lr", info->lr, 0);
        json_num(f, "loss_scale", info->loss_scale, 0);
        json_num(f, "grad_norm", info->grad_norm, 0);
        fprintf(f, "\"skipped\":%lld,", (long long)info->skipped_total);
        json_num(f, "tokens_per_s", tok_step / dt, 0);
        json_num(f, "ms_per_step", 1e3 * dt, 0);
        json_num(f, "model_ms", 1e3 * p->model_s / (double)(step - p->steps_last), 0);
        json_num(f, "zinc_step_ms", 1e3 * p->zstep_s / (double)(step - p->steps_last), 0);
        json_num(f, "entropy_floor", zm_data_entropy(r->data), 0);
        fprintf(f, "\"samples\":%lld,", step * (long long)(o->cfg.micro_batch * o->ranks *
                                                            o->cfg.grad_accum));
        json_num(f, "time_s", now - p->t_start, 1);
        fprintf(f, "}\n");
        fflush(f);
    }
    if (r->csv[0] && print) {
        long long samples = step * (long long)(o->cfg.micro_batch * o->ranks * o->cfg.grad_accum);
        double v[3] = {loss, info->lr, info->loss_scale};
        for (int i = 0; i < 3; i++) {
            fprintf(r->csv[i], "%lld,%.9g\n", samples, v[i]);
            fflush(r->csv[i]);
        }
    }
    if (print) {
        double dt = (now - p->t_last) / (double)(step - p->steps_last);
        char mb[32];
        if (p->bar) printf("\r\033[K");
        printf("step %*lld/%lld | loss %.4f | lr %.3e | scale %g | grad norm %.4f | skipped %lld "
               "| %.0f tok/s | %.1f ms/step | mem/rank %s\n",
               (int)snprintf(NULL, 0, "%lld", r->stop_at), step, r->stop_at, loss, info->lr,
               info->loss_scale, info->grad_norm, (long long)info->skipped_total, tok_step / dt,
               1e3 * dt, human_bytes((double)mem_rank, mb, sizeof mb));
        p->t_last = now;
        p->steps_last = step;
        p->model_s = p->zstep_s = 0.0;
    }
    if (p->bar) {
        int width = 30;
        double frac = (double)(step - r->start_step) / (double)(r->stop_at - r->start_step);
        double el = now - p->t_start, eta = frac > 0 ? el * (1 - frac) / frac : 0;
        printf("\r\033[K[");
        for (int i = 0; i < width; i++) putchar(i < (int)(frac * width) ? '#' : '.');
        printf("] %lld/%lld loss %.4f  ETA %d:%02d", step, r->stop_at, loss, (int)eta / 60,
               (int)eta % 60);
        if (step == r->stop_at) printf("\r\033[K");
    }
    fflush(stdout);
    (void)e;
}

static void *rank_main(void *arg)
{
    rank_arg *ra = arg;
    run_t *r = ra->r;
    const topts *o = r->o;
    int rank = ra->rank;
    zinc_engine_t *e = NULL;
    tmodel m = {NULL, NULL};
    uint16_t *tok = NULL, *tgt = NULL;
    zinc_status s;

    zinc_engine_options_t eo = {0};
    if (o->config_json)
        eo.config_json = o->config_json;
    else
        eo.config_path = o->config_path;
    eo.world = r->world;
    eo.rank = rank;
    eo.device = o->device;
    s = zinc_engine_create(&eo, &e);
    if (s != ZINC_OK) {
        fail(r, rank, s, s == ZINC_ERR_CONFIG ? 2 : 1, "%s", zinc_last_error(NULL));
        goto out;
    }
    rank = zinc_engine_rank(e);
    int B = (int)o->cfg.micro_batch, T = o->spec.T, W = zinc_engine_world_size(e);
    long long GA = o->cfg.grad_accum;
    s = tm_create(o, e, B, &m);
    if (s != ZINC_OK) {
        fail(r, rank, s, 1, "building the model: %s", tm_error(&m, e));
        goto out;
    }
    s = zinc_finalize(e);
    if (s == ZINC_OK) s = tm_init(&m, o->seed);
    if (s != ZINC_OK) {
        fail(r, rank, s, 1, "%s", zinc_last_error(e));
        goto out;
    }

    train_blob blob = {BLOB_MAGIC, 1, {0}, {ZM_DATA_POS_MAGIC, 1, 0, o->seed,
                                             zm_data_source_id(r->data), 0}, 0};
    snprintf(blob.spec, sizeof blob.spec, "%s", o->spec_str);
    if (r->resume_dir) {
        train_blob in;
        zinc_ckpt_load_options_t lo = {0};
        lo.client_blob = &in;
        lo.client_blob_cap = sizeof in;
        s = zinc_ckpt_load(e, r->resume_dir, r->resume_tag, &lo);
        if (s != ZINC_OK) {
            /* no, a damaged or an incompatible checkpoint is rejected input */
            int bad_input = s == ZINC_ERR_IO || s == ZINC_ERR_CORRUPT || s == ZINC_ERR_MISMATCH;
            fail(r, rank, s, bad_input ? 2 : 1, "resuming from %s: %s", r->resume_dir,
                 zinc_last_error(e));
            goto out;
        }
        if (lo.client_blob_bytes != sizeof in || in.magic != BLOB_MAGIC || in.version != 1) {
            fail(r, rank, ZINC_ERR_MISMATCH, 1, "%s/%s was not written by zinc train (no training "
                 "position in it); load it from your own program instead", r->resume_dir,
                 lo.loaded_tag);
            goto out;
        }
        zm_spec ls;
        char err[256];
        if (zm_spec_parse(in.spec, &ls, err, sizeof err) ||
            memcmp(&ls, &o->spec, sizeof ls) != 0) {
            fail(r, rank, ZINC_ERR_MISMATCH, 2, "%s/%s holds model %s, not %s (give --model %s)",
                 r->resume_dir, lo.loaded_tag, in.spec, o->spec_str, in.spec);
            goto out;
        }
        if (in.data.source_id != blob.data.source_id && rank == 0)
            fprintf(stderr, "zinc train: warning: the checkpoint was trained on other data (or "
                    "another --seed); continuing with %s\n", zm_data_describe(r->data));
        blob.data.next_seq = in.data.next_seq;
        blob.data.micro_steps = in.data.micro_steps;
        blob.steps = in.steps;
        if (rank == 0)
            printf("resumed from %s/%s at step %lld\n", r->resume_dir, lo.loaded_tag,
                   (long long)in.steps);
    }
    if (rank == 0) r->start_step = blob.steps;

    size_t mem_rank = tm_bytes(&m);
    {
        uint64_t pl[ZINC_MEM_COUNT], al[ZINC_MEM_COUNT];
        zinc_memory(e, pl, al);
        for (int i = 0; i < ZINC_MEM_COUNT; i++) mem_rank += al[i];
    }
    if (rank == 0 && !r->quiet) print_summary(r, e, &m);

    tok = malloc((size_t)B * T * sizeof *tok);
    tgt = malloc((size_t)B * T * sizeof *tgt);
    if (!tok || !tgt) {
        fail(r, rank, ZINC_ERR_NOMEM, 1, "out of memory");
        goto out;
    }
    /* mpirun hands its ranks a pty even when its own stdout is a pipe: no bar under MPI */
    progress_t pr = {now_s(), now_s(), blob.steps, isatty(STDOUT_FILENO) && !o->mpi, 0.0, 0.0};
    double t0 = now_s();
    while (blob.steps < r->stop_at) {
        zinc_step_info_t info = {0};
        double lsum = 0.0;
        for (long long mi = 0; mi < GA; mi++) {
            /* rank r's share of this micro-step's global batch */
            zm_data_read(r->data, blob.data.next_seq + (uint64_t)rank * (uint64_t)B, B, T, tok,
                         tgt);
            double l, tm = now_s();
            s = tm_micro_step(&m, tok, tgt, &l);
            pr.model_s += now_s() - tm;
            if (s != ZINC_OK) {
                fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps + 1, tm_error(&m, e));
                goto out;
            }
            lsum += l;
            blob.data.next_seq += (uint64_t)W * (uint64_t)B;
            blob.data.micro_steps++;
            if (!o->mpi && mi == GA - 1)
                r->rank_loss[(blob.steps & 1) * o->ranks + rank] = lsum / (double)GA;
            tm = now_s();
            s = zinc_step(e, &info);
            pr.zstep_s += now_s() - tm;
            if (s != ZINC_OK) {
                fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps + 1, zinc_last_error(e));
                goto out;
            }
        }
        if (!info.boundary) {
            fail(r, rank, ZINC_ERR_INTERNAL, 1, "zinc_step did not end the accumulation window "
                 "after %lld micro-steps", GA);
            goto out;
        }
        blob.steps++;
        double loss = lsum / (double)GA;
        if (o->mpi) {
            /* Each process has only its own loss: average it over the ranks (every rank calls). */
            s = zinc_mean_over_ranks(e, &loss, 1);
            if (s != ZINC_OK) {
                fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps, zinc_last_error(e));
                goto out;
            }
        }
        if (rank == 0) {
            /* zinc_step's reduction has seen every rank, so every rank's slot is written. */
            if (!o->mpi) {
                loss = 0.0;
                for (int q = 0; q < o->ranks; q++)
                    loss += r->rank_loss[((blob.steps - 1) & 1) * o->ranks + q];
                loss /= o->ranks;
            }
            r->step_loss[blob.steps] = loss;
            report_step(r, &pr, e, blob.steps, &info, loss, mem_rank);
        }
        if (r->save_dir && ((r->save_every && blob.steps % r->save_every == 0) ||
                            blob.steps == r->stop_at)) {
            char tag[64];
            snprintf(tag, sizeof tag, "step%06lld", (long long)blob.steps);
            zinc_ckpt_save_options_t so = {&blob, sizeof blob, 0, -1};
            s = zinc_ckpt_save(e, r->save_dir, tag, &so);
            if (s == ZINC_OK) s = zinc_ckpt_wait(e);
            if (s != ZINC_OK) {
                fail(r, rank, s, 1, "saving %s/%s: %s", r->save_dir, tag, zinc_last_error(e));
                goto out;
            }
            if (rank == 0) {
                if (pr.bar) printf("\r\033[K");
                printf("saved checkpoint %s/%s\n", r->save_dir, tag);
                fflush(stdout);
            }
        }
    }
    if (rank == 0) {
        r->end_step = blob.steps;
        r->seconds = now_s() - t0;
    }

    /* Final weights (collective gets), for the caller's comparisons. */
    int np;
    const int *pid = tm_params(&m, &np);
    size_t total = 0;
    for (int i = 0; i < np; i++) total += (size_t)zinc_param_numel(e, pid[i]);
    float *w = rank == 0 ? malloc(total * sizeof(float)) : NULL;
    float *tmp = malloc((size_t)zm_group_numel(&o->spec, 0) > (size_t)zm_group_numel(&o->spec, 1)
                            ? (size_t)zm_group_numel(&o->spec, 0) * sizeof(float)
                            : (size_t)zm_group_numel(&o->spec, 1) * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < np && tmp; i++) {
        size_t n = (size_t)zinc_param_numel(e, pid[i]);
        s = zinc_param_get(e, pid[i], tmp);
        if (s != ZINC_OK) {
            fail(r, rank, s, 1, "reading the final weights: %s", zinc_last_error(e));
            break;
        }
        if (w) memcpy(w + off, tmp, n * sizeof(float));
        off += n;
    }
    free(tmp);
    if (rank == 0) {
        r->weights = w;
        r->nweights = total;
    }
out:
    free(tok);
    free(tgt);
    tm_destroy(&m);
    zinc_engine_destroy(e);
    return NULL;
}

/* Runs every rank of this process to r->stop_at. Returns an exit code. */
static int run_ranks(run_t *r)
{
    const topts *o = r->o;
    r->err = ZINC_OK;
    r->errmsg[0] = 0;
    r->step_loss = malloc((size_t)(r->stop_at + 1) * sizeof *r->step_loss);
    r->rank_loss = calloc((size_t)2 * o->ranks, sizeof *r->rank_loss);
    if (!r->step_loss || !r->rank_loss) {
        fprintf(stderr, "zinc train: out of memory\n");
        return 1;
    }
    for (long long i = 0; i <= r->stop_at; i++) r->step_loss[i] = NAN;
    pthread_mutex_init(&r->mu, NULL);
    zinc_status s = o->launched ? zinc_world_create_launched(&r->world)
                    : o->mpi    ? zinc_world_create_mpi(&r->world)
                                : zinc_world_create_local(o->ranks, &r->world);
    if (s != ZINC_OK) {
        fprintf(stderr, "zinc train: cannot create the %s world: %s\n",
                o->launched ? "launched" : o->mpi ? "mpi" : "local",
                zinc_last_error(NULL));
        return s == ZINC_ERR_UNSUPPORTED ? 2 : 1;
    }
    if (o->mpi) {
        rank_arg a = {r, zinc_world_rank(r->world)};
        rank_main(&a);
    } else {
        pthread_t *th = calloc((size_t)o->ranks, sizeof *th);
        rank_arg *a = calloc((size_t)o->ranks, sizeof *a);
        int *started = calloc((size_t)o->ranks, sizeof *started);
        if (!th || !a || !started) {
            fprintf(stderr, "zinc train: out of memory\n");
            return 1;
        }
        for (int i = 0; i < o->ranks; i++) {
            a[i] = (rank_arg){r, i};
            started[i] = pthread_create(&th[i], NULL, rank_main, &a[i]) == 0;
            if (!started[i]) fail(r, i, ZINC_ERR_NOMEM, 1, "cannot start the thread of rank %d", i);
        }
        for (int i = 0; i < o->ranks; i++)
            if (started[i]) pthread_join(th[i], NULL);
        free(th);
        free(a);
        free(started);
    }
    zinc_world_destroy(r->world);
    r->world = NULL;
    pthread_mutex_destroy(&r->mu);
    if (r->err != ZINC_OK) {
        fprintf(stderr, "zinc train: %s\n", r->errmsg);
        return r->err_exit ? r->err_exit : 1;
    }
    return 0;
}

static void run_free(run_t *r)
{
    free(r->step_loss);
    free(r->rank_loss);
    free(r->weights);
    r->step_loss = NULL;
    r->rank_loss = NULL;
    r->weights = NULL;
}

static int mkdir_p(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

/* DeepSpeed's csv_monitor layout: <output_path>/<job_name>/<event>.csv with "step,value". */
static int open_csv(const topts *o, run_t *r, int append)
{
    if (!o->cfg.zinc.csv_monitor) return 0;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", o->cfg.zinc.csv_output_path[0] ? o->cfg.zinc.csv_output_path
                                                                      : "csv_monitor",
             o->cfg.zinc.csv_job_name[0] ? o->cfg.zinc.csv_job_name : "DeepSpeedJobName");
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "zinc train: csv_monitor: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    static const char *const ev[3] = {"Train_Samples_train_loss", "Train_Samples_lr",
                                      "Train_Samples_loss_scale"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s.csv", dir, ev[i]);
        int fresh = !append || !file_exists(path);
        r->csv[i] = fopen(path, append ? "a" : "w");
        if (!r->csv[i]) {
            fprintf(stderr, "zinc train: csv_monitor: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        if (fresh) fprintf(r->csv[i], "step,%s\n", ev[i]);
    }
    return 0;
}

static int bitwise_equal_losses(const run_t *a, const run_t *b, long long from, long long to)
{
    for (long long s = from; s <= to; s++)
        if (memcmp(&a->step_loss[s], &b->step_loss[s], sizeof(double)) != 0) return 0;
    return 1;
}

/* Output of the demo itself: rank 0 only under mpirun. */
#define P0(...)                                                                               \
    do {                                                                                      \
        if (o->rank0) printf(__VA_ARGS__);                                                    \
    } while (0)

/* No arguments: train, checkpoint half-way, resume in a second run, compare. */
static int demo(topts *o, zm_data *data)
{
    char dir[256];
    if (o->mpi) {
        snprintf(dir, sizeof dir, "zinc-train-demo");
        mkdir(dir, 0777);
    } else {
        snprintf(dir, sizeof dir, "/tmp/zinc-train-XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "zinc train: cannot create a temporary directory: %s\n",
                    strerror(errno));
            return 1;
        }
    }
    long long half = o->steps / 2 > 0 ? o->steps / 2 : 1;
    P0("zinc train (demo): %lld steps with a checkpoint at step %lld, then a second run "
           "resumed from it\n\n", o->steps, half);
    run_t a = {.o = o, .data = data, .stop_at = o->steps, .save_dir = dir, .save_every = half};
    int rc = run_ranks(&a);
    if (rc) return rc;
    P0("\nrun 1 done: %lld steps in %.1f s, final loss %.4f", a.end_step, a.seconds,
           a.step_loss[a.end_step]);
    if (isfinite(zm_data_entropy(data)))
        P0(" (floor %.4f, start ~%.4f)", zm_data_entropy(data), log(256.0));
    P0("\n\nrun 2: a new world and new engines, resuming from %s/step%06lld\n", dir, half);
    char tag[64];
    snprintf(tag, sizeof tag, "step%06lld", half);
    run_t b = {.o = o, .data = data, .stop_at = o->steps, .resume_dir = dir, .resume_tag = tag,
               .quiet = 1};
    rc = run_ranks(&b);
    if (rc) {
        run_free(&a);
        return rc;
    }
    int same_loss = bitwise_equal_losses(&a, &b, half + 1, o->steps);
    int same_w = a.nweights == b.nweights && a.weights && b.weights &&
                 !memcmp(a.weights, b.weights, a.nweights * sizeof(float));
    double maxdiff = 0.0;
    for (size_t i = 0; a.weights && b.weights && i < a.nweights && i < b.nweights; i++) {
        double d = fabs((double)a.weights[i] - (double)b.weights[i]);
        if (d > maxdiff) maxdiff = d;
    }
    P0("run 2 done: steps %lld-%lld in %.1f s, final loss %.4f\n", half + 1, b.end_step,
           b.seconds, b.step_loss[b.end_step]);
    P0("\nresume check: losses of steps %lld-%lld %s; final weights (%zu values) %s\n",
           half + 1, o->steps, same_loss ? "identical bit for bit" : "DIFFER",
           a.nweights, same_w ? "identical bit for bit" : "DIFFER");
    if (!same_w) P0("  largest weight difference %.3g\n", maxdiff);
    P0("%s\n", same_loss && same_w ? "PASS: the resumed run continued exactly"
                                       : "FAIL: the resumed run did not continue exactly");
    if (!o->mpi) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "zinc train: could not remove %s\n", dir);
    }
    run_free(&a);
    run_free(&b);
    return same_loss && same_w ? 0 : 1;
}

#undef P0

int cmd_train(int argc, char **argv)
{
    topts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = resolve_config(&o)) != 0) return rc;
    if (o.cuda) {
        /* Before any world or engine: without a GPU (or a CUDA build) say so and stop. */
        char why[512];
        if (!zm_cuda_available(why, sizeof why)) {
            int built = strstr(why, "built without CUDA") == NULL;
            if (built)
                fprintf(stderr, "zinc train: --device cuda: no CUDA device (%s); use --device "
                        "cpu\n", why);
            else
                fprintf(stderr, "zinc train: --device cuda: %s\n", why);
            free(o.config_json);
            return built ? 1 : 2;
        }
    }
    if (o.threads == 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int local = o.mpi ? (ls && atoi(ls) > 0 ? atoi(ls) : 1) : o.ranks;
        o.threads = nc > local ? (int)(nc / local) : 1;
    }

    zm_data *data = NULL;
    char err[1200];
    zinc_status s;
    if (o.data_path)
        s = zm_data_open_file(o.data_path, o.seed, &data, err, sizeof err);
    else
        s = zm_data_open_synthetic(o.seed, &data);
    if (s == ZINC_OK) s = zm_data_check_context(data, o.spec.T, err, sizeof err);
    if (s != ZINC_OK) {
        fprintf(stderr, "zinc train: %s\n", o.data_path ? err : "cannot create the data source");
        zm_data_close(data);
        free(o.config_json);
        return s == ZINC_ERR_NOMEM ? 1 : 2;
    }

    if (o.demo) {
        rc = demo(&o, data);
        zm_data_close(data);
        free(o.config_json);
        return rc;
    }

    run_t r = {.o = &o, .data = data, .stop_at = o.steps, .save_dir = o.save_dir,
               .save_every = o.save_every};
    if (o.resume) {
        if (!strcmp(o.resume, "auto")) {
            char latest[1200];
            snprintf(latest, sizeof latest, "%s/latest", o.save_dir);
            if (file_exists(latest))
                r.resume_dir = o.save_dir;
            else
                printf("no checkpoint in %s: starting fresh\n", o.save_dir);
        } else {
            if (!file_exists(o.resume)) {
                fprintf(stderr, "zinc train: --resume %s: no such directory\n", o.resume);
                zm_data_close(data);
                free(o.config_json);
                return 2;
            }
            r.resume_dir = o.resume;
        }
    }
    int rank0 = o.rank0;
    if (rank0 && o.metrics_path) {
        r.metrics = fopen(o.metrics_path, r.resume_dir ? "a" : "w");
        if (!r.metrics) {
            fprintf(stderr, "zinc train: --metrics %s: %s\n", o.metrics_path, strerror(errno));
            zm_data_close(data);
            free(o.config_json);
            return 2;
        }
    }
    if (rank0 && open_csv(&o, &r, r.resume_dir != NULL) != 0) rc = 1;
    if (!rc) rc = run_ranks(&r);
    if (!rc && rank0) {
        if (r.end_step == r.start_step)
            printf("nothing to do: the checkpoint is already at step %lld (--steps %lld)\n",
                   r.start_step, o.steps);
        else
            printf("done: steps %lld-%lld in %.1f s, final loss %.4f\n", r.start_step + 1,
                   r.end_step, r.seconds, r.step_loss[r.end_step]);
    }
    if (r.metrics) fclose(r.metrics);
    for (int i = 0; i < 3; i++)
        if (r.csv[i]) fclose(r.csv[i]);
    run_free(&r);
    zm_data_close(data);
    free(o.config_json);
    return rc;
}
