/*
 * train_args.c — the options of `zinc train` (see train.h): the --help text, parsing and checking
 * argv into a topts, finding the world the process was started in (mpirun, torchrun, srun or none),
 * and resolving the config file with the CLI's overrides as the engines will read it.
 *
 * Errors here are bad usage or input: a message on stderr and exit code 2 (1 only when out of
 * memory). Defaults that depend on the machine (model threads per rank) are settled here too.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/cuda/flash_rows.h"
#include "base/log.h"
#include "tools/commands.h"
#include "tools/train.h"

#ifndef ZINC_SOURCE_DIR
#define ZINC_SOURCE_DIR "."
#endif

#define CMD "train"
#define DEFAULT_CONFIG "configs/zero3_bf16.json"
#define DEFAULT_STEPS 100
#define DEFAULT_RANKS 4
/* The most sequences in one rank's micro-batch, from --micro-batch or the config (the model's
 * batch index is an int, and no machine holds more of the default model's activations) */
#define MAX_MICRO_BATCH 65536
/* --grad-accum and --train-batch-size: sequences or micro-steps, far past any real run */
#define MAX_BATCH_COUNT (1LL << 40)

/* The options that take a value (checked before asking for one, so that a mistyped last option
 * is called unknown rather than short of a value). */
static const char *const options[] = {
    "--config", "--ranks", "--device", "--gpu-kernels", "--model", "--steps", "--data",
    "--save-dir", "--save-every", "--keep-last", "--resume", "--metrics", "--seed",
    "--micro-batch", "--grad-accum", "--train-batch-size", "--lr", "--threads",
    /* the flags without a value (NVALUE_OPTIONS counts those before them) */
    "--gpu-timing", "--activation-checkpointing", "--help"};
#define NVALUE_OPTIONS 18
#define NOPTIONS ((int)(sizeof options / sizeof options[0]))

int ztrain_has_option(const char *arg)
{
    for (int k = 0; k < NOPTIONS; k++)
        if (!strcmp(arg, options[k])) return 1;
    return 0;
}

static int unknown_option(const char *a)
{
    return zarg_unknown_option(CMD, a, options, NOPTIONS, zplan_has_option(a) ? "plan" : NULL);
}

static int takes_value(const char *a)
{
    for (int k = 0; k < NVALUE_OPTIONS; k++)
        if (!strcmp(a, options[k])) return 1;
    return 0;
}

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
            "  --gpu-kernels exact|fast\n"
            "                     the CUDA model's kernels (--device cuda only), default exact:\n"
            "                     gpt.c's operations in its order (the CPU's loss curve); fast:\n"
            "                     attention without T x T arrays and parallel column sums (heads\n"
            "                     of <= 128 channels; not yet run on a GPU, docs/train.md)\n"
            "  --gpu-timing       time each phase of the CUDA model's step on the GPU (CUDA\n"
            "                     events on rank 0's stream; --device cuda only) and print the\n"
            "                     breakdown at the end (and to --metrics)\n"
            "  --model SPEC       model size, default " ZM_DEFAULT_SPEC
            " (layers, width, heads, context)\n"
            "  --activation-checkpointing\n"
            "                     keep only each block's input from the forward and recompute\n"
            "                     the block's other activations in its backward: less memory per\n"
            "                     token, about a third more compute, the same losses bit for bit\n"
            "  --steps N          total optimizer steps of the run, default %d; a resumed run\n"
            "                     continues up to N\n"
            "  --data FILE        train on a file: bytes of any file, or uint16 tokens (< 256) of a\n"
            "                     .bin token file (llm.c header or raw nanoGPT); default: a synthetic\n"
            "                     Markov chain with a known entropy rate\n"
            "  --save-dir DIR     checkpoint directory (tags step000100, ...; DIR/latest)\n"
            "  --save-every K     save every K steps (and at the end) into --save-dir\n"
            "  --keep-last N      after each save, remove this run's older tags but the newest N\n"
            "                     (the config's zinc.ckpt_keep_last); default: keep them all\n"
            "  --resume DIR|auto  resume from the checkpoint DIR/latest names (or from the tag\n"
            "                     DIR/TAG); auto: from --save-dir if it has one, else start fresh\n"
            "  --metrics FILE     JSON lines, one object per logged step (zinc plot draws them)\n"
            "  --seed N           seed of the initial weights and of the data, default 1\n"
            "  --micro-batch N    override train_micro_batch_size_per_gpu\n"
            "  --grad-accum N     override gradient_accumulation_steps\n"
            "  --train-batch-size N\n"
            "                     override train_batch_size\n"
            "  --lr X             override optimizer.params.lr\n"
            "  --threads N        model threads per rank, default cores / local ranks\n"
            "  --help             this text\n",
            DEFAULT_RANKS, DEFAULT_STEPS);
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

/* The ranks that share this machine's cores and memory: this process's threads, or under mpirun
 * the processes on this node. */
static int local_ranks(const topts *o)
{
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return o->mpi ? (ls && atoi(ls) > 0 ? atoi(ls) : 1) : o->ranks;
}

int train_parse_args(int argc, char **argv, topts *o)
{
    int env_rank = 0;
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->steps = DEFAULT_STEPS;
    o->seed = 1;
    o->lr = -1.0;
    snprintf(o->spec_str, sizeof o->spec_str, "%s", ZM_DEFAULT_SPEC);
    int have_ranks = 0, have_config = 0, have_kernels = 0;
    o->demo = argc <= 1;
    o->rank0 = 1;
    if (zarg_wants_help(argc, argv)) {
        usage(stdout);
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return zarg_usage_error(CMD, "unexpected argument '%s'", a);
        /* "--opt=value" as well as "--opt value" */
        char name[64];
        const char *eq = strchr(a, '='), *v = eq ? eq + 1 : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        if (name_len >= sizeof name) { /* longer than any option: unknown, shown whole */
            char *whole = strndup(a, name_len);
            int rc = unknown_option(whole ? whole : a);
            free(whole);
            return rc;
        }
        snprintf(name, sizeof name, "%.*s", (int)name_len, a);
        a = name;
        int flag = !strcmp(a, "--gpu-timing") || !strcmp(a, "--activation-checkpointing") ||
                   !strcmp(a, "--help");
        if (!flag && !takes_value(a)) return unknown_option(a);
        if (flag && v) return zarg_usage_error(CMD, "%s takes no value", a);
        if (!strcmp(a, "--gpu-timing")) { /* the flags without a value */
            o->gpu_timing = 1;
            continue;
        }
        if (!strcmp(a, "--activation-checkpointing")) {
            o->checkpoint = 1;
            continue;
        }
        if (!v && i + 1 < argc) v = argv[++i];
        if (zarg_value(CMD, a, v)) return 2;
        long long n;
        double x;
        if (!strcmp(a, "--config")) {
            if (strlen(v) >= sizeof o->config_path) /* cut short, it would name another file */
                return zarg_usage_error(CMD, "--config: a path of %zu bytes; at most %zu",
                                        strlen(v), sizeof o->config_path - 1);
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
        } else if (!strcmp(a, "--gpu-kernels")) {
            if (!strcmp(v, "exact"))
                o->gpu_kernels = ZM_CUDA_EXACT;
            else if (!strcmp(v, "fast"))
                o->gpu_kernels = ZM_CUDA_FAST;
            else
                return zarg_usage_error(CMD, "--gpu-kernels: expected exact or fast, got '%s'", v);
            have_kernels = 1;
        } else if (!strcmp(a, "--model")) {
            char err[256];
            if (zm_spec_parse(v, &o->spec, err, sizeof err))
                return zarg_usage_error(CMD, "--model: %s", err);
            /* the canonical spelling ("l2-d064-..." and any field order name the same model),
             * which always fits: what the summary prints and checkpoints keep */
            snprintf(o->spec_str, sizeof o->spec_str, "L%d-D%d-H%d-T%d", o->spec.L, o->spec.D,
                     o->spec.H, o->spec.T);
        } else if (!strcmp(a, "--steps")) {
            /* the engine counts steps up to 2^53 (JSON-exact, as checkpoints store them) */
            if (zarg_int64(v, &n) || n < 1 || n > (1LL << 53))
                return zarg_usage_error(CMD, "--steps: expected a whole number in 1..2^53, got '%s'",
                                        v);
            o->steps = n;
        } else if (!strcmp(a, "--data")) {
            o->data_path = v;
        } else if (!strcmp(a, "--save-dir")) {
            o->save_dir = v;
        } else if (!strcmp(a, "--save-every")) {
            if (zarg_int64(v, &n) || n < 1)
                return zarg_usage_error(CMD, "--save-every: expected a positive whole number, got '%s'", v);
            o->save_every = n;
        } else if (!strcmp(a, "--keep-last")) {
            if (zarg_int64(v, &n) || n < 1 || n > 1000000)
                return zarg_usage_error(CMD, "--keep-last: expected a whole number 1..1000000, "
                                        "got '%s'", v);
            o->keep_last = (int)n;
        } else if (!strcmp(a, "--resume")) {
            o->resume = v;
        } else if (!strcmp(a, "--metrics")) {
            o->metrics_path = v;
        } else if (!strcmp(a, "--seed")) {
            if (zarg_int64(v, &n) || n < 0)
                return zarg_usage_error(CMD, "--seed: expected a whole number >= 0, got '%s'", v);
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--micro-batch")) {
            if (zarg_int64(v, &n) || n < 1 || n > MAX_MICRO_BATCH)
                return zarg_usage_error(CMD, "--micro-batch: expected 1..%d, got '%s'",
                                        MAX_MICRO_BATCH, v);
            o->micro_batch = n;
        } else if (!strcmp(a, "--grad-accum") || !strcmp(a, "--train-batch-size")) {
            if (zarg_int64(v, &n) || n < 1 || n > MAX_BATCH_COUNT)
                return zarg_usage_error(CMD, "%s: expected 1..%lld, got '%s'", a,
                                        (long long)MAX_BATCH_COUNT, v);
            *(a[2] == 'g' ? &o->grad_accum : &o->train_batch_size) = n;
        } else if (!strcmp(a, "--lr")) {
            if (zarg_double(v, &x) || x < 0)
                return zarg_usage_error(CMD, "--lr: expected a number >= 0, got '%s'", v);
            o->lr = x;
        } else if (!strcmp(a, "--threads")) {
            if (zarg_int64(v, &n) || n < 1 || n > 64)
                return zarg_usage_error(CMD, "--threads: expected 1..64, got '%s'", v);
            o->threads = (int)n;
        } else {
            return unknown_option(a);
        }
    }
    if (zm_spec_parse(o->spec_str, &o->spec, (char[256]){0}, 256)) return 2;
    if (o->gpu_kernels == ZM_CUDA_FAST && o->spec.D / o->spec.H > ZM_FLASH_MAX_HS)
        return zarg_usage_error(CMD, "--gpu-kernels fast takes heads of at most %d channels; "
                                "--model %s has %d (D/H): use more heads or the exact kernels",
                                ZM_FLASH_MAX_HS, o->spec_str, o->spec.D / o->spec.H);
    if (o->save_every && !o->save_dir)
        return zarg_usage_error(CMD, "--save-every needs --save-dir");
    if (o->keep_last && !o->save_dir)
        return zarg_usage_error(CMD, "--keep-last needs --save-dir");
    if (o->resume && !strcmp(o->resume, "auto") && !o->save_dir)
        return zarg_usage_error(CMD, "--resume auto needs --save-dir (where to look)");
    o->cuda = !strcmp(o->device, "cuda");
    /* Refused rather than ignored: a CPU run asked for GPU kernels is a mistaken command line. */
    if (have_kernels && !o->cuda)
        return zarg_usage_error(CMD, "--gpu-kernels needs --device cuda (the CPU model has one "
                                "set of kernels)");
    if (o->gpu_timing && !o->cuda)
        return zarg_usage_error(CMD, "--gpu-timing needs --device cuda (it times the CUDA model's "
                                "kernels; on the CPU, --metrics' model_ms and zinc_step_ms "
                                "split the step)");
    /* Under mpirun the world is MPI's; --ranks must then agree with it. */
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    if (!env) env = getenv("PMI_SIZE");
    o->under_mpirun = env != NULL;
    if (env && atoi(env) == 1) {
        /* mpirun -np 1: a world of this one process (it ran --ranks' default of 4 local ranks,
         * a global batch 4 times the one a resume from 2 processes expects) */
        if (have_ranks && o->ranks != 1)
            return zarg_usage_error(CMD, "--ranks %d but mpirun started 1 process", o->ranks);
        o->ranks = 1;
    } else if (env && atoi(env) > 1) {
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
        if (!train_file_exists(o->config_path))
            snprintf(o->config_path, sizeof o->config_path, "%s/%s", ZINC_SOURCE_DIR,
                     DEFAULT_CONFIG);
    }
    if (o->threads == 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        int local = local_ranks(o);
        o->threads = nc > local ? (int)(nc / local) : 1;
    }
    return 0;
}

/* The memory this process may use: the machine's, or its cgroup's limit when lower. 0: unknown. */
static double usable_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    double mem = pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* "max" when unlimited */
    unsigned long long lim;
    if (f) {
        if (fscanf(f, "%llu", &lim) == 1 && lim > 0 && (mem == 0.0 || (double)lim < mem))
            mem = (double)lim;
        fclose(f);
    }
    return mem;
}

/* The CPU model allocates its activations and fp32 scratch per rank when the run starts; a micro
 * batch that cannot fit would otherwise end in the kernel's OOM killer (malloc overcommits), with
 * no message. Refused here, naming the key and the sizes. (--device cuda: the CUDA model's
 * buffers are the device's, and its allocation failures name themselves.) */
static int check_model_memory(const topts *o)
{
    long long mb = (long long)o->cfg.micro_batch;
    const char *key = o->micro_batch > 0 ? "--micro-batch" : "train_micro_batch_size_per_gpu";
    if (mb > MAX_MICRO_BATCH) {
        fprintf(stderr, "zinc train: %s: %s %lld is more than zinc train's limit of %d sequences "
                "per rank\n", o->config_path, key, mb, MAX_MICRO_BATCH);
        return 2;
    }
    if (o->cuda) return 0;
    size_t per = zm_model_bytes_for(&o->spec, (int)mb, o->checkpoint);
    int local = local_ranks(o);
    double need = per == SIZE_MAX ? INFINITY : (double)per * local, have = usable_memory();
    if (have > 0.0 && need > have) {
        fprintf(stderr, "zinc train: the model %s at %s %lld needs %.1f GiB of activations and "
                "fp32 scratch per rank, %.1f GiB for the %d rank%s on this machine, more than its "
                "%.1f GiB of memory: lower %s%s\n", o->spec_str, key, mb,
                (double)per / 1073741824.0, need / 1073741824.0, local, local == 1 ? "" : "s",
                have / 1073741824.0, key,
                o->checkpoint ? "" : ", or add --activation-checkpointing");
        return 2;
    }
    return 0;
}

/* Reads and validates the config as the engines will, with the CLI's overrides. */
int train_resolve_config(topts *o)
{
    zcfg_overrides ov = {.world_size = o->ranks, .micro_batch = o->micro_batch, .lr = o->lr,
                         .grad_accum = o->grad_accum, .train_batch_size = o->train_batch_size};
    zcfg_diag diag = {0};
    zinc_status s = zcfg_parse_file(o->config_path, &ov, &o->cfg, &diag);
    int override = o->micro_batch > 0 || o->lr >= 0 || o->grad_accum > 0 ||
                   o->train_batch_size > 0 || o->keep_last > 0;
    if (s == ZINC_OK && o->keep_last > 0) o->cfg.zinc.ckpt_keep_last = o->keep_last;
    /* The file's warnings, printed once, here: the engines, which read the resolved JSON when
     * there is an override, would otherwise print its warnings again (a key kept in it) or
     * others (a value it spells out), so they stay quiet on the config. */
    if (o->rank0)
        for (int i = 0; i < diag.nwarnings; i++)
            fprintf(stderr, "zinc train: config warning: %s\n", diag.warnings[i]);
    zlog_quiet("config");
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
    int rc = check_model_memory(o);
    if (rc) return rc;
    if (override) {
        o->config_json = zcfg_to_json(&o->cfg);
        if (!o->config_json) {
            fprintf(stderr, "zinc train: out of memory\n");
            return 1;
        }
    }
    return 0;
}
