/*
 * train_loop.c — one run of `zinc train` (see train.h): the world (local threads, MPI, or the
 * processes of a launcher), then on every rank an engine, the built-in model on it (CPU or CUDA,
 * behind the small tmodel switch below), and the loop of micro-steps and optimizer steps up to
 * r->stop_at, reading each rank's share of every global batch from the one data source.
 *
 * Around the loop it calls train_ckpt.c (where to start, when to save) and train_report.c (what
 * to print); after it, rank 0 collects the final weights for the caller's comparisons.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/cuda/gpt_cuda.h"
#include "tools/train.h"

/* Set by SIGINT/SIGTERM: the run ends after the step in progress (train_interrupt_install).
 * Atomic, not only volatile: the handler runs on whichever thread the signal lands on (the main
 * thread joining the ranks, a rank's or a kernel pool's), and rank threads read it — sig_atomic_t
 * covers a handler and the thread it interrupted, not two threads (a data race under TSan). */
static int interrupt_signal;
static int interrupt_seen(void) { return __atomic_load_n(&interrupt_signal, __ATOMIC_ACQUIRE); }
static struct sigaction interrupt_old[3];   /* SIGINT's, SIGTERM's, SIGPIPE's */

static int interrupt_count;
/* Said at the first signal, so that a user whose step takes long knows the run heard it (and
 * does not press again, which stops it at once with nothing saved): written by the handler with
 * write(2), the one output call safe there, from text made at install. Empty: nothing said (the
 * ranks of mpirun other than rank 0). */
static char interrupt_say[1024];
static size_t interrupt_say_len;

static void on_interrupt(int sig)
{
    int saved_errno = errno;   /* the interrupted thread may be about to read its own */
    __atomic_store_n(&interrupt_signal, 1, __ATOMIC_RELEASE);
    /* A second one, either of them, stops the process at once: by the default disposition
     * from here on, and by the count when two arrive together on two threads (both handlers
     * may run before either resets the dispositions). */
    if (__atomic_add_fetch(&interrupt_count, 1, __ATOMIC_SEQ_CST) > 1) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    /* From here on a write to a closed pipe fails instead of killing the process before its
     * save: Ctrl-C on `zinc train ... 2>&1 | tee log` stops tee too. (Not before the signal:
     * `zinc train | head` ends at head's exit, as a Unix command does.) */
    signal(SIGPIPE, SIG_IGN);
    if (interrupt_say_len && write(STDERR_FILENO, interrupt_say, interrupt_say_len) < 0) {
        /* stderr closed: the run still stops after its step */
    }
    errno = saved_errno;
}

/* The run should stop after a step: a signal, or a write to one of rank 0's outputs failed. */
static int stop_wanted(run_t *r)
{
    return interrupt_seen() || __atomic_load_n(&r->out_failed, __ATOMIC_ACQUIRE);
}

void train_interrupt_install(const char *say)
{
    interrupt_say_len = 0;
    if (say) {
        int n = snprintf(interrupt_say, sizeof interrupt_say, "%s\n", say);
        if (n > 0 && (size_t)n >= sizeof interrupt_say) {   /* a long --save-dir: cut, ends a line */
            n = (int)sizeof interrupt_say - 1;
            interrupt_say[n - 1] = '\n';
        }
        interrupt_say_len = n > 0 ? (size_t)n : 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    interrupt_signal = 0;
    interrupt_count = 0;
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        sigaction(sigs[i], NULL, &interrupt_old[i]);
        /* one the caller ignores stays ignored (`zinc train &` in a script ignores SIGINT) */
        if (interrupt_old[i].sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
    }
    sigaction(SIGPIPE, NULL, &interrupt_old[2]);   /* the handler may ignore it */
}

void train_interrupt_restore(void)
{
    sigaction(SIGINT, &interrupt_old[0], NULL);
    sigaction(SIGTERM, &interrupt_old[1], NULL);
    sigaction(SIGPIPE, &interrupt_old[2], NULL);
}

typedef struct {
    run_t *r;
    int rank;
} rank_arg;

/* Before any world or engine: without a GPU (or a CUDA build) say so and stop. */
int train_check_device(const topts *o)
{
    if (!o->cuda) return 0;
    char why[512];
    if (zm_cuda_available(why, sizeof why)) return 0;
    int built = strstr(why, "built without CUDA") == NULL;
    if (built)
        fprintf(stderr, "zinc train: --device cuda: no CUDA device (%s); use --device cpu\n",
                why);
    else
        fprintf(stderr, "zinc train: --device cuda: %s\n", why);
    return built ? 1 : 2;
}

/* The first cause of a run's failure, kept (train_fail without its abort). */
static void record_fail(run_t *r, int rank, zinc_status s, int exit_code, const char *msg)
{
    pthread_mutex_lock(&r->mu);
    /* A rank that stopped because another failed reports ABORTED; keep the cause instead. */
    if (r->err == ZINC_OK || (r->err == ZINC_ERR_ABORTED && s != ZINC_ERR_ABORTED)) {
        r->err = s;
        r->err_exit = exit_code;
        snprintf(r->errmsg, sizeof r->errmsg, "rank %d: %s", rank, msg);
    }
    pthread_mutex_unlock(&r->mu);
}

void train_fail(run_t *r, int rank, zinc_status s, int exit_code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record_fail(r, rank, s, exit_code, msg);
    zinc_world_abort(r->world, rank, msg);
}

/* The built-in model on the CPU (models/gpt.h) or its CUDA version (models/cuda/gpt_cuda.h):
 * the same groups, parameters and micro-step, picked by --device. */
typedef struct {
    zm_model *cpu;
    zm_cuda_model *cuda;
} tmodel;

static zinc_status tm_create(const topts *o, zinc_engine_t *e, int B, tmodel *m)
{
    return o->cuda ? zm_cuda_model_create(e, &o->spec, B, o->gpu_kernels, o->checkpoint, &m->cuda)
                   : zm_model_create(e, &o->spec, B, o->threads, o->checkpoint, &m->cpu);
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
 * set both. The CPU model's own allocations set neither: their status names them. */
static const char *tm_error(const tmodel *m, const zinc_engine_t *e, zinc_status s)
{
    const char *msg = m->cuda ? zinc_last_error(NULL) : zinc_last_error(e);
    if (msg && *msg) return msg;
    return s == ZINC_ERR_NOMEM ? "out of memory for the model's activations and fp32 scratch "
                                 "(lower the micro batch, or add --activation-checkpointing)"
                               : zinc_status_string(s);
}

/* FNV-1a of a string (0 for NULL): an option's text, compared across ranks. */
static uint64_t text_id(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    if (!s) return 0;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h | 1;
}

/* Under mpirun every process reads its own command line: the options that decide the run's
 * collectives (how many steps, when to save, whether to resume) and its data must be the same
 * on every rank, or the ranks stop pairing their collectives (a crash in MPI, or a wait for
 * comm_timeout_s ending in a message about something else). Rank 0's are broadcast, each rank
 * compares, and every rank learns which differ. The config, model and batch sizes are checked
 * by zinc_finalize already. 0, or -1 after train_fail naming the options and this rank's value. */
static int agree_on_run(run_t *r, zinc_engine_t *e, int rank)
{
    const topts *o = r->o;
    enum { STEPS, SAVE_EVERY, SAVE_DIR, RESUME, SEED, DATA, NFIELD };
    static const char *const names[NFIELD] = {"--steps", "--save-every", "--save-dir",
                                              "--resume", "--seed", "the data (--data)"};
    uint64_t mine[NFIELD] = {(uint64_t)o->steps, (uint64_t)o->save_every, text_id(o->save_dir),
                             text_id(r->resume_dir) ^ (text_id(r->resume_tag) << 1),
                             (uint64_t)o->seed, zm_data_source_id(r->data)};
    uint64_t root[NFIELD];
    memcpy(root, mine, sizeof root);
    double differ[NFIELD];
    zinc_status s = zinc_broadcast(e, root, sizeof root, 0);
    for (int i = 0; i < NFIELD; i++) differ[i] = mine[i] != root[i];
    if (s == ZINC_OK) s = zinc_mean_over_ranks(e, differ, NFIELD);
    if (s != ZINC_OK) {
        train_fail(r, rank, s, 1, "comparing the ranks' options: %s", zinc_last_error(e));
        return -1;
    }
    char which[700] = "", v[256];
    for (int i = 0; i < NFIELD; i++) {
        if (!(differ[i] > 0)) continue;
        if (i == STEPS || i == SAVE_EVERY || i == SEED)
            snprintf(v, sizeof v, "%llu", (unsigned long long)mine[i]);
        else
            snprintf(v, sizeof v, "%.200s",
                     i == SAVE_DIR ? (o->save_dir ? o->save_dir : "none")
                     : i == RESUME ? (r->resume_dir ? r->resume_dir : "none")
                                   : zm_data_describe(r->data));
        snprintf(which + strlen(which), sizeof which - strlen(which), "%s%s (here %s)",
                 which[0] ? ", " : "", names[i], v);
    }
    if (!which[0]) return 0;
    /* Every rank reaches this same verdict from the same mean, so none aborts the world: an abort
     * would fail a rank still finishing that mean (a collective ends earlier on some ranks). */
    char msg[1024];
    snprintf(msg, sizeof msg, "the ranks were given different %s; under mpirun every rank must "
             "get the same options", which);
    record_fail(r, rank, ZINC_ERR_MISMATCH, 2, msg);
    return -1;
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
        train_fail(r, rank, s, s == ZINC_ERR_CONFIG ? 2 : 1, "%s", zinc_last_error(NULL));
        goto out;
    }
    rank = zinc_engine_rank(e);
    int B = (int)o->cfg.micro_batch, T = o->spec.T, W = zinc_engine_world_size(e);
    long long GA = o->cfg.grad_accum;
    s = tm_create(o, e, B, &m);
    if (s != ZINC_OK) {
        train_fail(r, rank, s, 1, "building the model: %s", tm_error(&m, e, s));
        goto out;
    }
    /* --gpu-timing: rank 0's model only, the rank that reports */
    int timing = o->gpu_timing && m.cuda && rank == 0;
    if (timing && (s = zm_cuda_model_timing(m.cuda, 1)) != ZINC_OK) {
        train_fail(r, rank, s, 1, "--gpu-timing: %s", zinc_last_error(NULL));
        goto out;
    }
    s = zinc_finalize(e);
    if (s == ZINC_ERR_MISMATCH) {
        /* ranks that were given different configs (or models) under mpirun: rejected input, as
         * other options that differ between the ranks. zinc_finalize says so on every rank, so,
         * as agree_on_run, none aborts the world (which could end a rank before it said why). */
        record_fail(r, rank, s, 2, zinc_last_error(e));
        goto out;
    }
    if (s != ZINC_OK) {
        train_fail(r, rank, s, 1, "%s", zinc_last_error(e));
        goto out;
    }
    s = tm_init(&m, o->seed);
    if (s != ZINC_OK) {
        train_fail(r, rank, s, 1, "%s", zinc_last_error(e));
        goto out;
    }

    if (o->mpi && agree_on_run(r, e, rank) != 0) goto out;
    train_blob blob;
    if (train_ckpt_start(r, e, rank, &blob) != 0) goto out;
    if (rank == 0) r->start_step = blob.steps;

    size_t mem_rank = tm_bytes(&m);
    {
        uint64_t pl[ZINC_MEM_COUNT], al[ZINC_MEM_COUNT], hal[ZINC_MEM_COUNT];
        zinc_memory(e, pl, al);
        zinc_memory_host(e, NULL, hal); /* offload_optimizer's host state */
        for (int i = 0; i < ZINC_MEM_COUNT; i++) mem_rank += al[i] + hal[i];
    }
    if (rank == 0 && !r->quiet) {
        int np;
        tm_params(&m, &np);
        train_print_summary(r, e, np, tm_bytes(&m));
        if (o->cuda)
            printf("  kernels   %s (--gpu-kernels)\n", zm_cuda_kernels_name(o->gpu_kernels));
    }

    tok = malloc((size_t)B * T * sizeof *tok);
    tgt = malloc((size_t)B * T * sizeof *tgt);
    if (!tok || !tgt) {
        train_fail(r, rank, ZINC_ERR_NOMEM, 1, "out of memory");
        goto out;
    }
    /* mpirun hands its ranks a pty even when its own stdout is a pipe: no bar under MPI */
    progress_t pr = {train_now_s(), train_now_s(), blob.steps,
                     isatty(STDOUT_FILENO) && !o->under_mpirun, 0.0, 0.0};
    double t0 = train_now_s();
    /* --gpu-timing: the sums restart after the run's first step (cuBLAS's and the kernels' first
     * calls), unless it is the only one; zstep_s: zinc_step's host time since the sums began */
    double t_timed = t0, zstep_s = 0.0;
    if (rank == 0) r->timed_from = blob.steps + 1;
    while (blob.steps < r->stop_at) {
        zinc_step_info_t info = {0};
        double lsum = 0.0;
        for (long long mi = 0; mi < GA; mi++) {
            /* rank r's share of this micro-step's global batch */
            char derr[768];
            s = zm_data_read(r->data, blob.data.next_seq + (uint64_t)rank * (uint64_t)B, B, T,
                             tok, tgt, derr, sizeof derr);
            if (s != ZINC_OK) {
                train_fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps + 1, derr);
                goto out;
            }
            double l, tm = train_now_s();
            s = tm_micro_step(&m, tok, tgt, &l);
            pr.model_s += train_now_s() - tm;
            if (s != ZINC_OK) {
                train_fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps + 1,
                           tm_error(&m, e, s));
                goto out;
            }
            lsum += l;
            blob.data.next_seq += (uint64_t)W * (uint64_t)B;
            blob.data.micro_steps++;
            if (!o->mpi && mi == GA - 1)
                r->rank_loss[(blob.steps & 1) * o->ranks + rank] = lsum / (double)GA;
            tm = train_now_s();
            /* The window's last micro-step is the optimizer step; the others only end: the
             * same under zinc's count and with managed_gradient_accumulation false. */
            s = mi < GA - 1 ? zinc_micro_step(e) : zinc_step(e, &info);
            double dt = train_now_s() - tm;
            pr.zstep_s += dt;
            zstep_s += dt;
            if (s != ZINC_OK) {
                train_fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps + 1,
                           zinc_last_error(e));
                goto out;
            }
        }
        if (!info.boundary) {
            train_fail(r, rank, ZINC_ERR_INTERNAL, 1, "zinc_step did not end the accumulation "
                       "window after %lld micro-steps", GA);
            goto out;
        }
        blob.steps++;
        double loss = lsum / (double)GA;
        int last = 0; /* a signal asked to stop after this step (every rank agrees) */
        if (o->mpi) {
            /* Each process has only its own loss: average it over the ranks (every rank calls),
             * and with it whether any process was signalled. */
            double both[3] = {loss, interrupt_seen() ? 1.0 : 0.0,
                              __atomic_load_n(&r->out_failed, __ATOMIC_ACQUIRE) ? 1.0 : 0.0};
            s = zinc_mean_over_ranks(e, both, 3);
            if (s != ZINC_OK) {
                train_fail(r, rank, s, 1, "step %lld: %s", (long long)blob.steps,
                           zinc_last_error(e));
                goto out;
            }
            loss = both[0];
            last = both[1] > 0.0 || both[2] > 0.0;
            /* every process exits as rank 0 does: 1 for a failed output, not 130 */
            if (both[2] > 0.0) __atomic_store_n(&r->out_failed, 1, __ATOMIC_RELEASE);
        } else {
            /* The ranks are threads: rank 0 names the step after this one, which every rank
             * then reads after that step's collectives (all ranks stop at the same step); one
             * rank stops at this one. */
            if (rank == 0 && stop_wanted(r) && !__atomic_load_n(&r->stop_req, __ATOMIC_ACQUIRE))
                __atomic_store_n(&r->stop_req, blob.steps + (o->ranks > 1), __ATOMIC_RELEASE);
            long long sr = __atomic_load_n(&r->stop_req, __ATOMIC_ACQUIRE);
            last = sr && blob.steps >= sr;
        }
        last = last && blob.steps < r->stop_at;
        if (rank == 0) {
            /* zinc_step's reduction has seen every rank, so every rank's slot is written. */
            if (!o->mpi) {
                loss = 0.0;
                for (int q = 0; q < o->ranks; q++)
                    loss += r->rank_loss[((blob.steps - 1) & 1) * o->ranks + q];
                loss /= o->ranks;
            }
            if (r->step_loss) r->step_loss[blob.steps] = loss;
            r->final_loss = loss;
            if (r->skipped_begin < 0) r->skipped_begin = info.skipped_total - info.skipped;
            r->skipped_end = info.skipped_total;
            train_report_step(r, &pr, blob.steps, &info, loss, mem_rank);
        }
        if (train_ckpt_after_step(r, e, rank, &blob, pr.bar, last) != 0) goto out;
        if (last) {
            __atomic_store_n(&r->interrupted, 1, __ATOMIC_RELAXED);
            break;
        }
        if (timing && blob.steps == r->start_step + 1 && blob.steps < r->stop_at) {
            zm_cuda_model_timing_reset(m.cuda);
            r->timed_from = blob.steps + 1;
            t_timed = train_now_s();
            zstep_s = 0.0;
        }
    }
    if (rank == 0) {
        r->end_step = blob.steps;
        r->seconds = train_now_s() - t0;
    }
    if (timing && r->end_step >= r->timed_from) {
        s = zm_cuda_model_timing_read(m.cuda, r->phase_ms, r->phase_n, &r->timed_micro_steps);
        if (s != ZINC_OK) {
            train_fail(r, rank, s, 1, "--gpu-timing: %s", zinc_last_error(NULL));
            goto out;
        }
        r->timed = 1;
        r->timed_wall_s = train_now_s() - t_timed;
        r->timed_zstep_s = zstep_s;
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
            train_fail(r, rank, s, 1, "reading the final weights: %s", zinc_last_error(e));
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

int run_ranks(run_t *r)
{
    const topts *o = r->o;
    r->err = ZINC_OK;
    r->errmsg[0] = 0;
    /* every step's loss only for the demonstration's comparison (its --steps is small); a run
     * keeps the last, so that no allocation grows with --steps */
    r->final_loss = NAN;
    r->skipped_begin = -1;
    r->skipped_end = 0;
    r->step_loss = r->keep_losses ? malloc((size_t)(r->stop_at + 1) * sizeof *r->step_loss) : NULL;
    r->rank_loss = calloc((size_t)2 * o->ranks, sizeof *r->rank_loss);
    if ((r->keep_losses && !r->step_loss) || !r->rank_loss) {
        fprintf(stderr, "zinc train: out of memory\n");
        return 1;
    }
    for (long long i = 0; r->step_loss && i <= r->stop_at; i++) r->step_loss[i] = NAN;
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
            if (!started[i])
                train_fail(r, i, ZINC_ERR_NOMEM, 1, "cannot start the thread of rank %d", i);
        }
        for (int i = 0; i < o->ranks; i++)
            if (started[i]) pthread_join(th[i], NULL);
        free(th);
        free(a);
        free(started);
    }
    /* Report first: after a failed collective an mpi world ends the job in zinc_world_destroy
     * (MPI_Abort; MPI_Finalize would wait for the lost rank forever). */
    if (r->err != ZINC_OK) fprintf(stderr, "zinc train: %s\n", r->errmsg);
    else if (r->report_end && r->o->rank0) train_report_end(r);
    fflush(NULL);
    zinc_world_destroy(r->world);
    r->world = NULL;
    pthread_mutex_destroy(&r->mu);
    if (r->err != ZINC_OK) return r->err_exit ? r->err_exit : 1;
    return 0;
}

void run_free(run_t *r)
{
    free(r->step_loss);
    free(r->rank_loss);
    free(r->weights);
    r->step_loss = NULL;
    r->rank_loss = NULL;
    r->weights = NULL;
}
