/*
 * train_report.c — what `zinc train` prints and writes while it trains (see train.h), all on rank
 * 0: the startup summary, one progress line every steps_per_print steps (with a bar between them
 * when stdout is a terminal), the same figures as JSON lines to --metrics (what `zinc plot`
 * reads), and DeepSpeed's csv_monitor files when the config enables them.
 *
 * Nothing here changes the run: it reads the engine, the config and the step's figures.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/train.h"

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

void train_print_summary(const run_t *r, zinc_engine_t *e, int ntensors, size_t model_bytes)
{
    const topts *o = r->o;
    const zcfg *c = &o->cfg;
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT], total = 0;
    char b1[32], b2[32];
    zinc_memory(e, planned, alloc);
    printf("zinc train: model %s: %lld parameters in %d groups (%d tensors), vocab %d\n",
           o->spec_str, (long long)zm_param_total(&o->spec), zm_group_count(&o->spec), ntensors,
           ZM_VOCAB);
    printf("  data      %s\n", zm_data_describe(r->data));
    printf("  config    %s  hash %s\n", o->config_path, zinc_config_hash(e));
    printf("  resolved  ZeRO stage %d, %s%s, %s lr %g betas (%g, %g) eps %g wd %g, clip %g, "
           "scheduler %s\n",
           zinc_engine_stage(e), zinc_dtype_name(zinc_engine_dtype(e)),
           c->grad_accum_dtype != c->dtype ? " (fp32 gradient sums)" : "",
           c->optim.type_adamw ? "AdamW" : "Adam", c->optim.lr, c->optim.beta1, c->optim.beta2,
           c->optim.eps, c->optim.weight_decay, c->gradient_clipping,
           c->sched.type == ZSCHED_NONE ? "none" : c->sched.type == ZSCHED_WARMUP_LR ? "WarmupLR"
           : c->sched.type == ZSCHED_WARMUP_DECAY_LR ? "WarmupDecayLR"
           : c->sched.type == ZSCHED_WARMUP_COSINE_LR ? "WarmupCosineLR"
           : c->sched.type == ZSCHED_ONE_CYCLE ? "OneCycle" : "LRRangeTest");
    if (c->dtype == ZINC_DTYPE_FP16)
        printf("            fp16 loss scale %s\n", c->fp16.loss_scale > 0 ? "static" : "dynamic");
    /* The engine's own comm: staged/mpi when mpirun's ranks share a GPU (or under the test
     * hook ZINC_TEST_STAGED_COMM=1), staged/local for threads on one GPU. */
    const char *comm = zinc_engine_comm(e);
    int staged = !strncmp(comm, "staged/", 7);
    if (o->cuda)
        printf("  world     %d %s, comm %s%s, device cuda (model on the GPU)\n",
               zinc_engine_world_size(e),
               !o->launched ? "local ranks (threads) on one GPU"
               : staged     ? "processes sharing GPUs" : "processes, one GPU each",
               comm, staged ? " (through host memory: for checks, not speed)" : "");
    else
        printf("  world     %d %s, comm %s, device %s, model threads/rank %d\n",
               zinc_engine_world_size(e), o->mpi ? "MPI processes" : "local ranks (threads)",
               comm, o->device, o->threads);
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
    /* The model's own bytes are one micro-batch's activations and scratch; per token, an average
     * (issue 42): it includes the fixed gradient scratch, and the exact attention's T x T
     * probabilities grow with the context's square, so a larger micro-batch adds at most this
     * per token and a longer context may add more. */
    char b3[32];
    double tokens = (double)c->micro_batch * o->spec.T;
    printf("; engine %s + model %s (activations and scratch, %s per token%s)\n",
           human_bytes((double)total, b1, sizeof b1),
           human_bytes((double)model_bytes, b2, sizeof b2),
           human_bytes(tokens > 0 ? (double)model_bytes / tokens : 0.0, b3, sizeof b3),
           o->checkpoint ? "; activation checkpointing: each block's input kept, the rest "
                           "recomputed in backward" : "");
    /* Offload (optimizer state, and at stage 3 the 16-bit parameters): the host side. */
    uint64_t host[ZINC_MEM_COUNT], htotal = 0;
    zinc_memory_host(e, NULL, host);
    for (int i = 0; i < ZINC_MEM_COUNT; i++) htotal += host[i];
    if (htotal) {
        printf("  host/rank  ");
        for (int i = 0; i < ZINC_MEM_COUNT; i++)
            if (host[i]) printf(" %s %s", zinc_mem_category_name((zinc_mem_category)i),
                                human_bytes((double)host[i], b1, sizeof b1));
        printf("; offloaded %s\n", human_bytes((double)htotal, b1, sizeof b1));
    }
    double H = zm_data_entropy(r->data);
    if (isfinite(H))
        printf("  floor     entropy rate %.4f nats/token (uniform guess: ln 256 = %.4f)\n", H,
               log(256.0));
    fflush(stdout);
}

/* A write to an output of the run failed (a full disk, a FIFO whose reader left): said once
 * (`then` ends the line), and the run stops after this step, as on a signal (saving first), then
 * exits 1 — training on would lose the lines asked for without a word. */
static void output_failed(run_t *r, const char *what, const char *path, int err, const char *then)
{
    if (__atomic_load_n(&r->out_failed, __ATOMIC_ACQUIRE)) return; /* said already */
    snprintf(r->out_error, sizeof r->out_error, "writing %s %s failed: %s", what, path,
             err ? strerror(err) : "I/O error");
    fprintf(stderr, "zinc train: %s%s\n", r->out_error, then);
    __atomic_store_n(&r->out_failed, 1, __ATOMIC_RELEASE);
}

/* The check of a line written at offset `at` (ftello before it; -1: not a seekable file):
 * a line that could not be written whole is taken back, so the file ends with its last whole
 * line (a full disk left half a JSON line, which a reader of the file then fails on). What stdio
 * still holds of it is dropped, not written by the fclose at the end. */
static void check_line(run_t *r, FILE *f, const char *what, const char *path, off_t at)
{
    errno = 0;
    if (fflush(f) == 0 && !ferror(f)) return;
    int err = errno;
    __fpurge(f);
    if (at >= 0 && ftruncate(fileno(f), at) == 0) fseeko(f, at, SEEK_SET);
    output_failed(r, what, path, err, "; stopping after this step");
}

void train_report_step(run_t *r, progress_t *p, long long step, const zinc_step_info_t *info,
                       double loss, size_t mem_rank)
{
    const topts *o = r->o;
    double now = train_now_s();
    long long every = o->cfg.steps_per_print > 0 ? o->cfg.steps_per_print : 10;
    int print = step % every == 0 || step == r->stop_at || step == r->start_step + 1;
    double tok_step = (double)(o->cfg.micro_batch * o->ranks * o->cfg.grad_accum) * o->spec.T;
    if (r->metrics && print) {
        FILE *f = r->metrics;
        off_t at = ftello(f);
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
        check_line(r, f, "--metrics", o->metrics_path, at);
    }
    if (r->csv[0]) { /* every step, as DeepSpeed's engine writes its monitors' events */
        long long samples = step * (long long)(o->cfg.micro_batch * o->ranks * o->cfg.grad_accum);
        double v[3] = {loss, info->lr, info->loss_scale};
        for (int i = 0; i < 3; i++) {
            if (!r->csv[i]) continue;
            off_t at = ftello(r->csv[i]);
            fprintf(r->csv[i], "%lld,%.9g\n", samples, v[i]);
            /* flushed: a row is there once its step is (DeepSpeed closes each) */
            check_line(r, r->csv[i], "csv_monitor:", r->csv_path[i], at);
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
}

/* 1 when path is, or lies under, a place in save directory dir that the checkpoint writer
 * replaces: its `latest`, `latest.tmp`, or one of zinc train's tags (or their .tmp/.old). Both
 * are resolved, existing or not (the save directory may be made at the first save). */
static int is_save_slot(const char *path, const char *dir)
{
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!dir || !zarg_resolve_loose(path, rp) || !zarg_resolve_loose(dir, rd)) return 0;
    size_t n = strlen(rd);
    if (n == 1) n = 0; /* the root: "/x" lies under it */
    if (strncmp(rp, rd, n) != 0 || rp[n] != '/') return 0;
    char first[PATH_MAX];
    snprintf(first, sizeof first, "%s", rp + n + 1);
    char *sl = strchr(first, '/');
    if (sl) *sl = 0;
    return !strcmp(first, "latest") || !strcmp(first, "latest.tmp") || zarg_step_tag_len(first, "step");
}

/* What an output of the run (--metrics, csv_monitor's files) must not be: one of the run's
 * inputs (opening it for writing truncates it; the data file is mapped, so truncating it also
 * kills the run), another of its outputs, or a file of a checkpoint. NULL when it is none. */
static const char *output_clash(const char *path, const topts *o, const run_t *r)
{
    if (zarg_same_file(path, o->config_path)) return "the config file";
    if (o->data_path && zarg_same_file(path, o->data_path)) return "the data file";
    if (r->metrics && o->metrics_path && zarg_same_file(path, o->metrics_path))
        return "the --metrics file";
    if (zarg_inside_tag(path)) return "inside a checkpoint's tag directory";
    /* any save directory's latest (the resume directory's: it holds a tag), through a symlink
     * too; a hard link is refused by open_output */
    if (zarg_is_checkpoint_latest(path)) return "a save directory's latest";
    if (zarg_is_save_slot(path)) return "where a save into its (save) directory writes";
    if (is_save_slot(path, o->save_dir)) return "where --save-dir's checkpoints go";
    return NULL;
}

/* Opens one output of the run for writing: appended to when the run resumes, else truncated,
 * both only once the checks pass. NULL with the message printed (`what` names it, `hint` says
 * what to do) when it clashes (output_clash), has other hard links (a checkpoint file linked to
 * it would change), is not a regular file or a FIFO with a reader, or cannot be opened. */
static FILE *open_output(const char *what, const char *path, int append, const char *hint,
                         const topts *o, const run_t *r)
{
    const char *clash = output_clash(path, o, r);
    if (clash) {
        fprintf(stderr, "zinc train: %s %s is %s; %s\n", what, path, clash, hint);
        return NULL;
    }
    /* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking the run */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : 0),
                  0644);
    struct stat st;
    int e = fd < 0 ? errno : 0;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
            fprintf(stderr, "zinc train: %s %s has %lu hard links: writing it would change the "
                    "other names' contents too (a checkpoint's file, say); %s\n", what, path,
                    (unsigned long)st.st_nlink, hint);
            close(fd);
            return NULL;
        }
        if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
            e = EINVAL;
        else if (!append && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
            e = errno;
    }
    FILE *f = NULL;
    if (fd >= 0 && !e) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        f = fdopen(fd, append ? "a" : "w");
        if (!f) e = errno;
    }
    if (!f) {
        if (fd >= 0) close(fd);
        fprintf(stderr, "zinc train: %s %s: %s\n", what, path,
                e == ENXIO ? "a FIFO with no reader" : e == EINVAL ? "not a regular file"
                                                                   : strerror(e));
    }
    return f;
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

/* DeepSpeed's csv_monitor layout: <output_path>/<job_name>/<event>.csv with "step,value"; an
 * empty output_path is DeepSpeed's os.path.join("", job_name), ./<job_name>, as the Python
 * front-end writes it too. The directory, into dir (n bytes), made unless it is where a
 * checkpoint of --save-dir goes or inside a tag (a save would then fail on it, or delete it).
 * 0, or the exit code after the message. */
static int csv_dir(const topts *o, char *dir, size_t n)
{
    const char *out = o->cfg.zinc.csv_output_path;
    const char *job = o->cfg.zinc.csv_job_name[0] ? o->cfg.zinc.csv_job_name : "DeepSpeedJobName";
    snprintf(dir, n, "%s%s%s", out, out[0] ? "/" : "", job);
    if (is_save_slot(dir, o->save_dir) || zarg_inside_tag(dir)) {
        fprintf(stderr, "zinc train: csv_monitor: %s is where --save-dir's checkpoints go (or "
                "inside one); set csv_monitor.output_path or job_name elsewhere\n", dir);
        return 2;
    }
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "zinc train: csv_monitor: cannot create %s: %s; set "
                "csv_monitor.output_path or job_name elsewhere\n", dir, strerror(errno));
        return 2;
    }
    return 0;
}

static int open_csv(const topts *o, run_t *r, const char *dir, int append)
{
    /* DeepSpeed's events Train/Samples/<name>: the file named after the whole event, the
     * header after its last part; the loss scale with fp16 only, as DeepSpeed writes it */
    static const char *const ev[3] = {"Train_Samples_train_loss", "Train_Samples_lr",
                                      "Train_Samples_loss_scale"};
    static const char *const head[3] = {"train_loss", "lr", "loss_scale"};
    char path[1200];
    int n = o->cfg.dtype == ZINC_DTYPE_FP16 ? 3 : 2;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s.csv", dir, ev[i]);
        snprintf(r->csv_path[i], sizeof r->csv_path[i], "%s", path);
        int fresh = !append || !train_file_exists(path);
        r->csv[i] = open_output("csv_monitor:", path, append,
                                "set csv_monitor.output_path or job_name elsewhere", o, r);
        if (!r->csv[i]) return 2;
        if (fresh) fprintf(r->csv[i], "step,%s\n", head[i]);
    }
    return 0;
}

/* The output files are opened here, before the world, so that a bad path is a usage error before
 * anything runs (and before any of them is truncated: the CSV directory is made first); a
 * resumed run appends to them. */
int train_report_open(const topts *o, run_t *r)
{
    char dir[1024];
    int append = r->resume_dir != NULL, rc;
    if (o->cfg.zinc.csv_monitor && (rc = csv_dir(o, dir, sizeof dir)) != 0) return rc;
    if (o->metrics_path) {
        r->metrics = open_output("--metrics", o->metrics_path, append, "name a file of its own",
                                 o, r);
        if (!r->metrics) return 2;
    }
    return o->cfg.zinc.csv_monitor ? open_csv(o, r, dir, append) : 0;
}

/* Closes f; a failure (the last lines not written) said as check_output says one, if none was. */
static int close_output(run_t *r, FILE *f, const char *what, const char *path)
{
    if (!f) return 0;
    errno = 0;
    int bad = fflush(f) != 0 || ferror(f), err = errno;
    if (fclose(f) != 0) {
        bad = 1;
        if (!err) err = errno;
    }
    if (bad) output_failed(r, what, path, err, "");
    return bad;
}

int train_report_close(run_t *r)
{
    int bad = close_output(r, r->metrics, "--metrics", r->o->metrics_path);
    for (int i = 0; i < 3; i++) bad |= close_output(r, r->csv[i], "csv_monitor:", r->csv_path[i]);
    r->metrics = NULL;
    r->csv[0] = r->csv[1] = r->csv[2] = NULL;
    return bad || r->out_failed;
}

/* The closing line. */
static void train_report_done(const run_t *r)
{
    if (r->end_step == r->start_step)
        printf("nothing to do: the checkpoint is already at step %lld (--steps %lld)\n",
               r->start_step, r->o->steps);
    else {
        long long steps = r->end_step - r->start_step;
        long long skipped = r->skipped_begin >= 0 ? r->skipped_end - r->skipped_begin : 0;
        printf("done: steps %lld-%lld in %.1f s, final loss %.4f", r->start_step + 1, r->end_step,
               r->seconds, r->final_loss);
        if (skipped > 0)
            printf(", %lld of the %lld steps skipped (gradient overflow)", skipped, steps);
        printf("\n");
        /* a run that trained into NaN, or skipped most of its steps, still ends with exit 0 (as
         * DeepSpeed's would), so it is said where a user looks last */
        fflush(stdout);   /* the warning after the done line, also when both go to one file */
        if (!isfinite(r->final_loss) || (steps >= 4 && 2 * skipped > steps))
            fprintf(stderr, "zinc train: warning: %s: look at the metrics for where it began (the "
                    "learning rate, the data, or with NVMe offload zinc.nvme_checksum false)\n",
                    !isfinite(r->final_loss) ? "the final loss is not finite"
                                             : "most steps were skipped (gradient overflow)");
    }
}

/* --gpu-timing's table: GPU milliseconds per optimizer step by phase (the mean over the timed
 * steps), each phase's share of their sum, then the sum beside zinc_step's host time and the
 * measured step: what neither covers is host work between the phases (data, views, the
 * micro-step's final wait and event reads), the progress lines and, with --save-dir, the
 * checkpoint saves that fall inside the timed steps. zinc_step's row holds
 * zinc_micro_step's time too when a step accumulates several micro-steps. A phase that did not
 * run (the casts in fp32) shows "-" and is null in the metrics line. */
static void train_report_timing(const run_t *r)
{
    if (!r->timed) return;
    const topts *o = r->o;
    long long steps = r->end_step - r->timed_from + 1;
    double sum = 0.0, per = 1.0 / (double)steps;
    for (int p = 0; p < ZM_PH_COUNT; p++) sum += r->phase_ms[p];
    double step_ms = 1e3 * r->timed_wall_s * per, zstep_ms = 1e3 * r->timed_zstep_s * per;
    printf("gpu timing: rank 0, %s kernels, mean over steps %lld-%lld (%lld step%s, %lld "
           "micro-steps), GPU ms per optimizer step\n", zm_cuda_kernels_name(o->gpu_kernels),
           r->timed_from, r->end_step, steps, steps == 1 ? "" : "s", r->timed_micro_steps);
    printf("  %-24s %10s %7s\n", "phase", "ms/step", "share");
    for (int p = 0; p < ZM_PH_COUNT; p++) {
        if (r->phase_n[p] == 0)
            printf("  %-24s %10s\n", zm_cuda_phase_name(p), "-");
        else
            printf("  %-24s %10.3f %6.1f%%\n", zm_cuda_phase_name(p), r->phase_ms[p] * per,
                   sum > 0 ? 100.0 * r->phase_ms[p] / sum : 0.0);
    }
    printf("  %-24s %10.3f %6.1f%%\n", "sum of the phases", sum * per, 100.0);
    printf("  %-24s %10.3f  (host clock, after the micro-steps)\n", "zinc_step", zstep_ms);
    printf("  %-24s %10.3f  (host clock; phases + zinc_step cover %.1f%%, the rest is untimed)\n",
           "measured step", step_ms, step_ms > 0 ? 100.0 * (sum * per + zstep_ms) / step_ms : 0.0);
    fflush(stdout);
    if (!r->metrics) return;
    FILE *f = r->metrics;
    fprintf(f, "{\"gpu_timing\":{\"rank\":0,\"kernels\":\"%s\",\"stat\":\"mean\",\"first_step\":%lld,"
            "\"last_step\":%lld,\"steps\":%lld,\"micro_steps\":%lld,\"phase_ms\":{",
            zm_cuda_kernels_name(o->gpu_kernels), r->timed_from, r->end_step, steps,
            r->timed_micro_steps);
    for (int p = 0; p < ZM_PH_COUNT; p++)
        json_num(f, zm_cuda_phase_name(p), r->phase_n[p] ? r->phase_ms[p] * per : NAN,
                 p == ZM_PH_COUNT - 1);
    fprintf(f, "},");
    json_num(f, "sum_ms", sum * per, 0);
    json_num(f, "zinc_step_ms", zstep_ms, 0);
    json_num(f, "step_ms", step_ms, 1);
    fprintf(f, "}}\n");
    fflush(f);
}

void train_report_end(const run_t *r)
{
    train_report_done(r);
    train_report_timing(r);
    if (!r->interrupted) return;
    /* stopped by a failed write (which was said then) or by a signal */
    const char *why = r->out_failed ? "an output failed" : "interrupted";
    if (r->save_dir)
        fprintf(stderr, "zinc train: %s: stopped after step %lld and saved "
                "%s/step%06lld; --resume auto (with --save-dir %s) goes on from there\n", why,
                r->end_step, r->save_dir, r->end_step, r->save_dir);
    else
        fprintf(stderr, "zinc train: %s: stopped after step %lld; nothing "
                "saved (no --save-dir)\n", why, r->end_step);
}
