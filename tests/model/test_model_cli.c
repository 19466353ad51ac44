/*
 * test_model_cli.c — `zinc train` and `zinc plot` as a user runs them (the zinc executable,
 * ZINC_CLI): bad arguments and unreadable or unusable data give exit 2 and a message that names
 * the problem; a short run writes metrics; the same run twice gives the same losses bit for bit
 * (metrics print the loss with 17 digits); a run stopped at step 6 and resumed to step 12 ends
 * with the same loss as an uninterrupted 12-step run; `zinc plot` draws an SVG.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/wait.h>

#include "testutil.h"

#ifndef ZINC_CLI
#define ZINC_CLI "zinc"
#endif

static char tmp[128];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
    fclose(f);
    return b;
}

/* slurp() of a file in the test's directory */
static char *slurp_rel(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return slurp(path);
}

/* Runs `zinc ARGS` after the shell commands PRE (e.g. "ulimit -v N && ") with stdout and stderr
 * to files; returns the exit code (-1: killed). */
static int run_after(const char *pre, const char *args, char **err_out, char **out_out)
{
    char cmd[2048], ep[256], op[256];
    snprintf(ep, sizeof ep, "%s/stderr", tmp);
    snprintf(op, sizeof op, "%s/stdout", tmp);
    /* timeout: a command that should be refused but trains instead fails here (exit 124) rather
     * than outliving the test as an orphan */
    snprintf(cmd, sizeof cmd, "cd '%s' && %stimeout 100 '%s' %s > '%s' 2> '%s'", tmp, pre,
             ZINC_CLI, args, op, ep);
    int st = system(cmd);
    if (err_out) *err_out = slurp(ep);
    if (out_out) *out_out = slurp(op);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *args, char **err_out, char **out_out)
{
    return run_after("", args, err_out, out_out);
}

/* "12.5 KiB" -> bytes (the summary's human_bytes, 0.1 of the unit rounded). */
static double parse_bytes(const char *s)
{
    char unit[8] = "";
    double v = 0;
    if (sscanf(s, "%lf %7s", &v, unit) != 2) return -1;
    const char *u[] = {"B", "KiB", "MiB", "GiB"};
    for (int i = 0; i < 4; i++, v *= 1024.0)
        if (!strncmp(unit, u[i], strlen(u[i])) && (unit[strlen(u[i])] == 0 ||
                                                   unit[strlen(u[i])] == ')' ||
                                                   unit[strlen(u[i])] == ';'))
            return v;
    return -1;
}

static void expect_usage_error(const char *args, const char *needle)
{
    char *err;
    int rc = run(args, &err, NULL);
    ZT_CHECK(rc == 2, "zinc %s: exit %d, expected 2 (stderr: %s)", args, rc, err);
    ZT_CHECK(strstr(err, needle) != NULL, "zinc %s: stderr \"%s\" lacks \"%s\"", args, err,
             needle);
    free(err);
}

/* The "loss" text of the metrics line of `step`, or "" (caller frees). */
static char *loss_at(const char *metrics_file, int step)
{
    char path[256], key[64];
    snprintf(path, sizeof path, "%s/%s", tmp, metrics_file);
    char *all = slurp(path), *res = calloc(1, 64);
    snprintf(key, sizeof key, "{\"step\":%d,", step);
    char *l = strstr(all, key);
    char *p = l ? strstr(l, "\"loss\":") : NULL;
    if (p && res) {
        p += 7;
        size_t n = strcspn(p, ",}");
        if (n > 63) n = 63;
        memcpy(res, p, n);
    }
    free(all);
    return res;
}

/* Checks that metrics files a and b log the same loss at `step` (its 17-digit text; present). */
static void check_same_loss(const char *what, const char *a, const char *b, int step)
{
    char *la = loss_at(a, step), *lb = loss_at(b, step);
    ZT_CHECK(la[0] && !strcmp(la, lb), "%s: loss at step %d '%s' (%s) vs '%s' (%s)", what, step,
             lb, b, la, a);
    free(la);
    free(lb);
}

/* Runs the formatted shell command; a test failure naming it unless it exits 0. */
static void shell_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shell_ok(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    ZT_CHECK(system(cmd) == 0, "%s", cmd);
}

static void write_file(const char *name, const void *p, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

#define SMALL "--model L1-D16-H2-T16 --ranks 2 --config " ZINC_SOURCE_DIR "/configs/zero3_bf16.json"

/* A config with csv_monitor writing into <out>/<job>, as csv.json; a run of it with `more`
 * options is a usage error naming `needle`. */
static void csv_refused(const char *out, const char *job, const char *more, const char *needle)
{
    char cfg[400], args[600];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 4, \"bf16\": {\"enabled\": true}, "
             "\"zero_optimization\": {\"stage\": 3}, \"optimizer\": {\"type\": \"AdamW\"}, "
             "\"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s\", \"job_name\": \"%s\"}}",
             out, job);
    write_file("csv.json", cfg, strlen(cfg));
    snprintf(args, sizeof args, "train --model L1-D16-H2-T16 --ranks 2 --steps 1 --config csv.json %s",
             more);
    expect_usage_error(args, needle);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/zinc-model-cli-XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    /* inputs */
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = "the quick brown fox jumps. "[i % 27];
    write_file("text.txt", text, sizeof text);
    unsigned short gpt2[100];
    for (int i = 0; i < 100; i++) gpt2[i] = (unsigned short)(i == 40 ? 50256 : 65 + i % 26);
    write_file("gpt2.bin", gpt2, sizeof gpt2);
    write_file("short.txt", "abc", 3);
    write_file("bad.json", "{\"zero_optimization\": {\"stage\": 9}}", 35);
    write_file("nopoints.jsonl", "{\"a\":1}\n", 8);

    /* bad usage and unusable input: exit 2 and a message */
    expect_usage_error("train --steps x", "--steps");
    expect_usage_error("train --steps", "needs a value");
    expect_usage_error("train --ranks 0", "--ranks");
    expect_usage_error("train --model L2-D63-H4-T64", "multiple of heads");
    expect_usage_error("train --model nonsense", "model spec");
    expect_usage_error("train --frobnicate 1", "unknown option '--frobnicate'");
    /* last on the line, an unknown option is still unknown (was "needs a value"); --opt=value */
    expect_usage_error("train --frobnicate", "unknown option '--frobnicate' (see");
    /* a typo gets the option it is one edit from, last on the line and with a value */
    expect_usage_error("train --step 5", "unknown option '--step'; did you mean --steps?");
    expect_usage_error("train --save_dir=x", "unknown option '--save_dir'; did you mean --save-dir?");
    /* another command's option is named as its (--gpus is not a typo of --gpu-timing) */
    expect_usage_error("train --gpus 8",
                       "unknown option '--gpus': it is an option of zinc plan, not of zinc train");
    /* the leading -- is no part of the distance (--h was "did you mean --lr?") */
    expect_usage_error("train --h", "unknown option '--h' (see");
    expect_usage_error("train --help=1", "--help takes no value");
    /* a name past the option buffer is shown whole (it was cut at 63 characters) */
    expect_usage_error("train --option-name-of-seventy-characters-which-no-option-of-zinc-has-xyz=1",
                       "unknown option '--option-name-of-seventy-characters-which-no-option-of-zinc-has-xyz' (see");
    expect_usage_error("train --steps=x", "--steps: expected");
    expect_usage_error("train --gpu-timing=1", "--gpu-timing takes no value");
    expect_usage_error("train --grad-accum 0", "--grad-accum: expected 1..");
    expect_usage_error("train --device tpu", "--device");
    expect_usage_error("train --gpu-kernels bogus", "expected exact or fast, got 'bogus'");
    expect_usage_error("train --gpu-kernels fast", "needs --device cuda");
    expect_usage_error("train --device cuda --gpu-kernels fast --model L1-D1032-H4-T16",
                       "at most 128 channels");
    expect_usage_error("train --gpu-timing", "--gpu-timing needs --device cuda");
    expect_usage_error("train --device cpu --gpu-timing --steps 2", "--gpu-timing needs --device");
    /* a flag without a value: what follows it is the next option */
    expect_usage_error("train --device cuda --gpu-timing --steps x", "--steps: expected");
    expect_usage_error("train --lr -3", "--lr");
    expect_usage_error("train --save-every 5", "--save-dir");
    expect_usage_error("train --resume auto", "--save-dir");
    expect_usage_error("train --resume no-such-dir", "no-such-dir");
    expect_usage_error("train --config no-such.json", "no-such.json");
    expect_usage_error("train --config bad.json", "zero_optimization.stage");
    expect_usage_error("train --data no-such-file.txt", "cannot read data file 'no-such-file.txt'");
    expect_usage_error("train --data .", "not a regular file");
    expect_usage_error("train --data gpt2.bin", "token 50256 at position 40");
    expect_usage_error("train " SMALL " --data short.txt", "too short");
    expect_usage_error("plot", "metrics file");
    expect_usage_error("plot no-such.jsonl", "cannot read 'no-such.jsonl'");
    expect_usage_error("plot nopoints.jsonl", "no {\"step\"");
    /* a FIFO as the metrics file or the config is refused, not waited on */
    {
        char fifo[300];
        snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
        ZT_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
        expect_usage_error("plot fifo", "not a regular file");
        expect_usage_error("train --config fifo --steps 1", "not a regular file");
        /* as the metrics output, a FIFO nobody reads would block the run's start */
        expect_usage_error("train " SMALL " --steps 1 --metrics fifo", "a FIFO with no reader");
        unlink(fifo);
    }

    /* Micro batches the CPU model cannot hold: refused before any allocation, naming the key (a
     * config's 2^40 used to wrap to 0 in an int; 200000 ran into the OOM killer). */
    static const char mb40[] = "{\"train_micro_batch_size_per_gpu\": 1099511627776}";
    write_file("mb40.json", mb40, sizeof mb40 - 1);
    expect_usage_error("train --config mb40.json --steps 1",
                       "train_micro_batch_size_per_gpu 1099511627776 is more than zinc train's "
                       "limit of 65536");
    /* 8 layers of 8 heads of 1024 x 1024 attention for 65536 sequences: ~17 TB on any machine */
    expect_usage_error("train --model L8-D1024-H8-T1024 --micro-batch 65536 --ranks 1 --steps 1",
                       "--micro-batch 65536 needs ");
    /* Past the check (the machine has the memory) an allocation that still fails names itself:
     * the address space is capped below the model's 1.7 GiB of activations. */
    if (!ZT_ASAN) {
        char *e3;
        int rc3 = run_after("ulimit -v 1000000 && ",
                            "train --ranks 1 --micro-batch 2000 --steps 1 --threads 1 "
                            "--config " ZINC_SOURCE_DIR "/configs/zero3_bf16.json",
                            &e3, NULL);
        ZT_CHECK(rc3 == 1 && strstr(e3, "building the model: out of memory for the model's "
                                        "activations"),
                 "micro batch 2000 under a 1 GB address space: exit %d, stderr: %s", rc3, e3);
        free(e3);
    }
    char *out;
    ZT_CHECK(run("train --help", NULL, &out) == 0 && strstr(out, "usage: zinc train") &&
                 strstr(out, "--gpu-timing") && strstr(out, "--activation-checkpointing"),
             "--help");
    free(out);

    /* fp16 at stage 1 with the loss scale starting at its minimum (2^30): the first step
     * overflows and DeepSpeed 0.19.8 (DynamicLossScaler, raise_error_at_min_scale) stops the run;
     * zinc train must exit non-zero with the engine's message: step, scale and group. */
    {
        static const char minscale[] =
            "{\"train_micro_batch_size_per_gpu\": 4, \"fp16\": {\"enabled\": true, "
            "\"initial_scale_power\": 30, \"min_loss_scale\": 1073741824, \"hysteresis\": 1}, "
            "\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 1}}";
        write_file("minscale.json", minscale, sizeof minscale - 1);
        char *e2;
        int rc2 = run("train --model L1-D16-H2-T16 --ranks 2 --steps 3 --config minscale.json",
                      &e2, NULL);
        ZT_CHECK(rc2 == 1, "min loss scale: exit %d, expected 1 (stderr: %s)", rc2, e2);
        ZT_CHECK(strstr(e2, "optimizer step 1:") && strstr(e2, "minimum 1073741824") &&
                     strstr(e2, "first group with a non-finite gradient is '"),
                 "min loss scale: stderr lacks step, scale or group: %s", e2);
        free(e2);
    }

    /* a config warning is printed once (zinc train and the engine both printed it), also for a
     * key the resolved config keeps (round_robin_gradients: twice with an override), and only
     * the file's (the resolved config's overlap_comm false at stage 2 warned with an override) */
    {
        static const char tb[] = "{\"train_micro_batch_size_per_gpu\": 4, \"tensorboard\": "
                                 "{\"enabled\": true}, \"zero_optimization\": {\"stage\": 2, "
                                 "\"round_robin_gradients\": true}}";
        write_file("tb.json", tb, sizeof tb - 1);
        for (int ov = 0; ov < 2; ov++) {
            char *o2, *e2;
            int r2 = run(ov ? "train --model L1-D16-H2-T16 --ranks 2 --steps 1 --config tb.json "
                              "--micro-batch 2"
                            : "train --model L1-D16-H2-T16 --ranks 2 --steps 1 --config tb.json",
                         &e2, &o2);
            int times = 0, rr = 0;
            for (const char *q = e2; (q = strstr(q, "tensorboard: accepted")); q++) times++;
            for (const char *q = e2; (q = strstr(q, "round_robin_gradients: accepted")); q++) rr++;
            ZT_CHECK(r2 == 0 && times == 1 && rr == 1 && !strstr(e2, "overlap_comm"),
                     "config warnings %s an override: exit %d, tensorboard's printed %d times, "
                     "round_robin_gradients' %d: %s", ov ? "with" : "without", r2, times, rr, e2);
            free(o2);
            free(e2);
        }
    }

    /* --grad-accum and --train-batch-size fill the config's batch keys, as config check's do */
    {
        char *o2, *e2;
        int r2 = run("train " SMALL " --steps=1 --grad-accum 3", &e2, &o2);
        ZT_CHECK(r2 == 0 && strstr(o2, "x 2 ranks x 3 accumulation"),
                 "--grad-accum 3: exit %d: %s %s", r2, e2, o2);
        free(o2);
        free(e2);
    }

    /* a short run with metrics; the same run again; one on a text file */
    char *err;
    int rc = run("train " SMALL " --steps 12 --seed 4 --metrics m1.jsonl", &err, &out);
    ZT_CHECK(rc == 0, "short run: exit %d: %s", rc, err);
    ZT_CHECK(strstr(out, "step 12/12") && strstr(out, "entropy rate"), "progress: %s", out);
    /* The model's bytes and their share per token (micro-batch x context: SMALL's context is
     * 16, zero3_bf16.json's micro-batch read back from the summary's batch line). */
    const char *mb = strstr(out, "+ model "), *bl = strstr(out, "  batch     ");
    double model_b = mb ? parse_bytes(mb + 8) : -1, per_tok = -1;
    const char *pt = mb ? strstr(mb, "scratch, ") : NULL;
    if (pt) per_tok = parse_bytes(pt + 9);
    long long micro = bl ? atoll(bl + 12) : 0;
    ZT_CHECK(model_b > 0 && micro > 0 &&
                 fabs(per_tok - model_b / (double)(micro * 16)) <= 0.06 * per_tok,
             "the summary's model bytes per token: %.0f B of %.0f B over %lld x 16 tokens (%s)",
             per_tok, model_b, micro, mb ? mb : out);
    free(err);
    free(out);
    rc = run("train " SMALL " --steps 12 --seed 4 --metrics m2.jsonl", NULL, NULL);
    ZT_CHECK(rc == 0, "same run twice: exit %d", rc);
    check_same_loss("same run twice", "m1.jsonl", "m2.jsonl", 12);
    rc = run("train " SMALL " --steps 2 --data text.txt", &err, NULL);
    ZT_CHECK(rc == 0, "text data: exit %d: %s", rc, err);
    free(err);

    /* --activation-checkpointing: the same losses bit for bit (printed to 17 digits in the
     * metrics), fewer model bytes in the summary (a 3-layer model: two blocks share one set) */
    {
        char *o1, *o2;
        const char *base = "train --model L3-D16-H2-T16 --ranks 2 --steps 4 --seed 4 --config "
                           ZINC_SOURCE_DIR "/configs/zero3_bf16.json";
        char args[512];
        snprintf(args, sizeof args, "%s --metrics ck0.jsonl", base);
        int rc1 = run(args, NULL, &o1);
        snprintf(args, sizeof args, "%s --activation-checkpointing --metrics ck1.jsonl", base);
        int rc2 = run(args, NULL, &o2);
        char *a = loss_at("ck0.jsonl", 4), *b = loss_at("ck1.jsonl", 4);
        ZT_CHECK(rc1 == 0 && rc2 == 0 && a[0] && !strcmp(a, b),
                 "--activation-checkpointing: exit %d/%d, loss at step 4 '%s' vs '%s'", rc1, rc2,
                 b, a);
        const char *m1 = strstr(o1, "+ model "), *m2 = strstr(o2, "+ model ");
        double b1 = m1 ? parse_bytes(m1 + 8) : -1, b2 = m2 ? parse_bytes(m2 + 8) : -1;
        ZT_CHECK(b2 > 0 && b2 < 0.8 * b1 && strstr(o2, "activation checkpointing: each block"),
                 "--activation-checkpointing: model bytes %.0f against %.0f without (%s)", b2,
                 b1, m2 ? m2 : o2);
        free(a);
        free(b);
        free(o1);
        free(o2);
    }

    /* managed_gradient_accumulation false: the trainer ends the inner micro-steps with
     * zinc_micro_step and the window with zinc_step, so the run is the managed one bit for bit */
    {
        static const char ga[] =
            "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 3, "
            "\"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\"}, "
            "\"zero_optimization\": {\"stage\": 2}%s}";
        char cfg[512];
        snprintf(cfg, sizeof cfg, ga, "");
        write_file("ga.json", cfg, strlen(cfg));
        snprintf(cfg, sizeof cfg, ga, ", \"managed_gradient_accumulation\": false");
        write_file("ga_unmanaged.json", cfg, strlen(cfg));
        int rc1 = run("train --model L1-D16-H2-T16 --ranks 2 --steps 4 --seed 4 --config ga.json "
                      "--metrics ga.jsonl", NULL, NULL);
        int rc2 = run("train --model L1-D16-H2-T16 --ranks 2 --steps 4 --seed 4 --config "
                      "ga_unmanaged.json --metrics ga_unmanaged.jsonl", NULL, NULL);
        char *a = loss_at("ga.jsonl", 4), *b = loss_at("ga_unmanaged.jsonl", 4);
        ZT_CHECK(rc1 == 0 && rc2 == 0 && a[0] && !strcmp(a, b),
                 "managed_gradient_accumulation false: exit %d/%d, loss at step 4 '%s' vs '%s'",
                 rc1, rc2, b, a);
        free(a);
        free(b);
    }

    char cmd[512];
    /* stop at 6 and resume to 12 == 12 straight (and --resume auto starts fresh on nothing) */
    rc = run("train " SMALL " --steps 6 --seed 4 --save-dir ck --resume auto", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "starting fresh"), "first half: exit %d: %s", rc, err);
    free(err);
    free(out);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto --metrics r.jsonl",
             &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "resumed from ck/step000006 at step 6"),
             "second half: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    check_same_loss("resumed vs uninterrupted", "m1.jsonl", "r.jsonl", 12);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto", NULL, &out);
    ZT_CHECK(rc == 0 && strstr(out, "nothing to do"), "resume at the end: %s", out);
    free(out);
    /* --resume DIR/TAG with TAG missing, its previous contents whole in TAG.old (a save over it
     * stopped between the renames of a file system that cannot exchange): resumed from there */
    shell_ok("cp -r '%s/ck' '%s/ckold' && mv '%s/ckold/step000006' '%s/ckold/step000006.old'",
             tmp, tmp, tmp, tmp);
    rc = run("train " SMALL " --steps 7 --seed 4 --resume ckold/step000006/", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "at step 6") && strstr(err, "step000006.old holds its previous"),
             "--resume of a tag whose .old is left: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    shell_ok("rm -r '%s/ckold'", tmp);
    /* another model size is refused before the run, naming the --model to give, whether the
     * shapes differ (the load's error named a tensor) or only the heads do */
    expect_usage_error("train --model L1-D32-H2-T16 --ranks 2 --steps 12 --resume ck",
                       "holds model L1-D16-H2-T16, not L1-D32-H2-T16 (give --model "
                       "L1-D16-H2-T16)");
    /* a lost `latest` is not "no checkpoint": auto resumes from the newest tag (it used to start
     * fresh and save over the tags) */
    shell_ok("rm '%s/ck/latest'", tmp);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "resumed from ck/step000012 at step 12") &&
                 strstr(out, "nothing to do") && !strstr(out, "starting fresh"),
             "--resume auto without latest: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    /* a damaged tag beside them is warned about once: the checks before the load looked too,
     * and printed the same warning twice more */
    shell_ok("mkdir '%s/ck/step000003' && : > '%s/ck/step000003/rank-00000.zck'",
             tmp, tmp);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto", &err, &out);
    int nwarn = 0;
    for (const char *p = err; p && (p = strstr(p, "skipping damaged checkpoint")); p++) nwarn++;
    ZT_CHECK(rc == 0 && nwarn == 1 && strstr(out, "nothing to do"),
             "--resume auto beside a damaged tag: exit %d, %d warnings (want 1): %s %s", rc, nwarn,
             err, out);
    free(err);
    free(out);
    /* ... and once when another --model stops the run before the load that would say it */
    rc = run("train --model L1-D32-H2-T16 --ranks 2 --steps 12 --save-dir ck --resume auto",
             &err, NULL);
    nwarn = 0;
    for (const char *p = err; p && (p = strstr(p, "skipping damaged checkpoint")); p++) nwarn++;
    ZT_CHECK(rc == 2 && nwarn == 1 && strstr(err, "holds model L1-D16-H2-T16"),
             "another --model beside a damaged tag: exit %d, %d warnings (want 1): %s", rc, nwarn,
             err);
    free(err);
    shell_ok("rm -r '%s/ck/step000003'", tmp);
    /* every tag's data damaged (three tags): each is warned about once and the run is refused
     * (each retry of the load's search named the tags before it again: step 6 twice) */
    rc = run("train " SMALL " --steps 6 --save-every 2 --save-dir dmg", NULL, NULL);
    ZT_CHECK(rc == 0, "saving dmg: exit %d", rc);
    shell_ok("cd '%s' && for t in dmg/step0*; do printf 'ZZZZZZZZZZZZZZZZ' | dd "
             "of=$t/rank-00000.zck bs=1 seek=100 conv=notrunc 2>/dev/null; done", tmp);
    rc = run("train " SMALL " --steps 8 --save-dir dmg --resume auto", &err, NULL);
    {
        const char *says[] = {"skipping dmg/step000006: its data failed",
                              "skipping dmg/step000004: its data failed",
                              "skipping damaged checkpoint dmg/step000006",
                              "skipping damaged checkpoint dmg/step000002"};
        for (int k = 0; k < 4; k++) {
            int n = 0;
            for (const char *p = err; p && (p = strstr(p, says[k])); p++) n++;
            ZT_CHECK(n == 1, "every tag damaged: '%s' %d times (want 1): %s", says[k], n, err);
        }
        ZT_CHECK(rc == 2 && strstr(err, "no valid checkpoint in dmg"),
                 "every tag damaged: exit %d (want 2): %s", rc, err);
    }
    free(err);
    /* an export into a save directory, at a name its saves write: refused (it was written, and
     * the next zinc train --save-dir there refused to run) */
    expect_usage_error("ckpt export ck --out ck/step000099", "is where a save into its directory");
    expect_usage_error("ckpt export ck --out ck/latest.tmp", "is where a save into its directory");
    expect_usage_error("ckpt export ck --out ck/global_step7.old", "is where a save into its");
    /* --metrics there too (it was accepted, and the save stopped at it) */
    expect_usage_error("train " SMALL " --steps 1 --metrics ck/step000099",
                       "where a save into its (save) directory writes");
    /* --resume naming a file: said so (it said "no such directory") */
    expect_usage_error("train " SMALL " --steps 2 --resume text.txt",
                       "--resume text.txt is not a directory");
    /* at another world size the same config is not called another config */
    rc = run("train --model L1-D16-H2-T16 --ranks 1 --config " ZINC_SOURCE_DIR
             "/configs/zero3_bf16.json --steps 13 --seed 4 --resume ck/step000012", &err, &out);
    ZT_CHECK(rc == 0 && strstr(err, "ck/step000012 was saved at world size 2, now 1") &&
                 !strstr(err, "another config"),
             "resume at another world size: exit %d: %s", rc, err);
    free(err);
    free(out);
    /* ... but another lr with it is (the world size's message alone said nothing of it) */
    rc = run("train --model L1-D16-H2-T16 --ranks 1 --config " ZINC_SOURCE_DIR
             "/configs/zero3_bf16.json --steps 13 --seed 4 --lr 0.5 --resume ck/step000012",
             &err, &out);
    ZT_CHECK(rc == 0 && strstr(err, "ck/step000012 was saved at world size 2, now 1, and with "
                                    "another config besides its batch sizes"),
             "resume at another world size and lr: exit %d: %s", rc, err);
    free(err);
    free(out);
    /* a DeepSpeed checkpoint (folder or tag) is named as DeepSpeed's, exit 2 (the tag given was
     * scanned as a save directory: "none of its directories holds a manifest.json") */
    shell_ok("mkdir -p '%s/dsck/global_step3' && : > "
             "'%s/dsck/global_step3/mp_rank_00_model_states.pt' && echo global_step3 > "
             "'%s/dsck/latest'", tmp, tmp, tmp);
    expect_usage_error("train " SMALL " --steps 2 --resume dsck", "DeepSpeed's format");
    expect_usage_error("train " SMALL " --steps 2 --resume dsck/global_step3",
                       "dsck/global_step3 is a checkpoint in DeepSpeed's format");
    expect_usage_error("train " SMALL " --steps 2 --save-dir dsck --resume auto",
                       "from_deepspeed");
    /* a zinc save directory with such a file beside its tags is still zinc's */
    shell_ok(": > '%s/ck/mp_rank_00_model_states.pt'", tmp);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "nothing to do"), "a zinc save directory holding a "
             "model_states.pt file: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    shell_ok("rm '%s/ck/mp_rank_00_model_states.pt'", tmp);
    /* a stopped save's .tmp that this run will not save over is named, with its size (it stayed,
     * unseen, for ever) */
    shell_ok("mkdir '%s/ck/step000009.tmp' && head -c 1048576 /dev/zero > "
             "'%s/ck/step000009.tmp/rank-00000.zck'", tmp, tmp);
    rc = run("train " SMALL " --steps 12 --seed 4 --save-dir ck --resume auto", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "note: ck/step000009.tmp is an unfinished save a stopped run "
                                    "left (1.0 MiB)"),
             "--resume auto beside a stale .tmp: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    shell_ok("rm -r '%s/ck/step000009.tmp'", tmp);
    /* --resume DIR/TAG, as the ckpt tools take a tag (trailing slash too): that tag, the same run */
    rc = run("train " SMALL " --steps 12 --seed 4 --resume ck/step000006/ --metrics t.jsonl", &err,
             &out);
    ZT_CHECK(rc == 0 && strstr(out, "resumed from ck/step000006 at step 6"),
             "--resume ck/step000006/: exit %d: %s %s", rc, err, out);
    free(err);
    free(out);
    check_same_loss("resumed from a tag", "m1.jsonl", "t.jsonl", 12);
    /* a save directory that is a file fails before training, not at the first save */
    expect_usage_error("train " SMALL " --steps 2 --save-dir m1.jsonl", "--save-dir m1.jsonl: "
                       "m1.jsonl is not a directory");
    /* nor one that cannot be created under a file, nor an empty or forgotten value */
    expect_usage_error("train " SMALL " --steps 2 --save-dir m1.jsonl/sub", "--save-dir "
                       "m1.jsonl/sub: m1.jsonl is not a directory");
    expect_usage_error("train " SMALL " --steps 2 --save-dir ''", "--save-dir needs a value");
    expect_usage_error("train " SMALL " --save-dir --steps 2", "--save-dir needs a value (got the "
                       "option '--steps')");
    /* a directory without checkpoints says what it looked for */
    shell_ok("mkdir '%s/nockpt'", tmp);
    expect_usage_error("train " SMALL " --steps 2 --resume nockpt",
                       "no checkpoint in nockpt: none of its directories holds a manifest.json");
    /* --metrics over one of the run's inputs is refused before it truncates it (the config was
     * emptied; the mapped data file took the run down with SIGBUS; a tag's manifest was
     * overwritten with exit 0) */
    shell_ok("cp '%s/configs/zero3_bf16.json' '%s/mycfg.json'", ZINC_SOURCE_DIR,
             tmp);
    expect_usage_error("train --model L1-D16-H2-T16 --ranks 2 --steps 1 --config mycfg.json "
                       "--metrics mycfg.json", "--metrics mycfg.json is the config file");
    expect_usage_error("train " SMALL " --steps 1 --data text.txt --metrics text.txt",
                       "is the data file");
    expect_usage_error("train " SMALL " --steps 13 --seed 4 --resume ck --metrics "
                       "ck/step000012/manifest.json", "inside a checkpoint's tag directory");
    /* through a symlink, and another run's latest (not this run's save or resume directory) */
    shell_ok("cd '%s' && ln -s ck/step000012/manifest.json mlink", tmp);
    expect_usage_error("train " SMALL " --steps 1 --metrics mlink",
                       "inside a checkpoint's tag directory");
    expect_usage_error("train " SMALL " --steps 1 --metrics ck/latest", "a save directory's latest");
    /* zinc plot over a checkpoint's file */
    expect_usage_error("plot m1.jsonl -o ck/latest", "is a checkpoint's file");
    expect_usage_error("plot m1.jsonl -o ck/step000012/manifest.json", "is a checkpoint's file");
    /* an output that cannot be written, before reading (a directory was exit 1 after) */
    expect_usage_error("plot m1.jsonl -o ck", "the output 'ck' is a directory");
    /* the run's outputs and saves never take a user's file: a hard link to a checkpoint file as
     * --metrics (truncated it), csv_monitor files on the config or the metrics (truncated), a
     * --metrics or csv_monitor directory where a save goes (replaced or emptied by it), a data
     * file named latest in --save-dir (replaced by the first save), a user's directory named like
     * a tag (emptied as an "old tag") */
    shell_ok("cd '%s' && ln ck/step000012/client.bin hlink && mkdir cj dsave "
             "usave usave/step000001 msave && ln -s ../csv.json cj/Train_Samples_lr.csv && "
             "cp text.txt dsave/latest && echo mine > usave/step000001/notes.txt", tmp);
    expect_usage_error("train " SMALL " --steps 1 --metrics hlink", "has 2 hard links");
    expect_usage_error("train " SMALL " --steps 1 --save-dir msave --metrics msave/latest",
                       "--metrics msave/latest is where --save-dir's checkpoints go");
    expect_usage_error("train " SMALL " --steps 1 --save-dir msave --metrics msave/step000001",
                       "is where --save-dir's checkpoints go");
    csv_refused("", "cj", "", "csv_monitor: cj/Train_Samples_lr.csv is the config file");
    {
        char *c = slurp_rel("csv.json");
        ZT_CHECK(c && strstr(c, "csv_monitor"), "the config survived its csv_monitor: '%.40s'", c);
        free(c);
    }
    csv_refused("msave", "step000001", "--save-dir msave",
                "csv_monitor: msave/step000001 is where --save-dir's");
    shell_ok("rm '%s/cj/Train_Samples_lr.csv'", tmp);
    csv_refused("", "cj", "--metrics cj/Train_Samples_train_loss.csv",
                "cj/Train_Samples_train_loss.csv is the --metrics file");
    expect_usage_error("train " SMALL " --steps 1 --data dsave/latest --save-dir dsave",
                       "dsave/latest exists and is not a checkpoint's latest");
    expect_usage_error("train " SMALL " --steps 1 --save-dir usave",
                       "usave/step000001 is in the way of tag step000001: it holds notes.txt, "
                       "which zinc did not write");
    /* where a save goes also below it and before the save directory exists: latest.tmp as the
     * metrics (renamed into latest by the save), a CSV directory under a future tag or at a new
     * save directory's latest; --save-dir inside a tag; a csv_monitor path that cannot be made is
     * refused before the metrics file is truncated */
    expect_usage_error("train " SMALL " --steps 1 --save-dir msave --metrics msave/latest.tmp",
                       "--metrics msave/latest.tmp is where --save-dir's checkpoints go");
    csv_refused("msave/step000001", "mon", "--save-dir msave",
                "csv_monitor: msave/step000001/mon is where");
    csv_refused("newsave", "latest", "--save-dir newsave", "csv_monitor: newsave/latest is where");
    expect_usage_error("train " SMALL " --steps 1 --save-dir ck/step000012/sub",
                       "--save-dir ck/step000012/sub is inside a checkpoint's tag directory");
    csv_refused("text.txt", "x", "--metrics m1.jsonl", "csv_monitor: cannot create text.txt/x");
    {
        char *m = slurp_rel("m1.jsonl");
        ZT_CHECK(m && strstr(m, "\"step\":12,"), "m1.jsonl survived the refused csv_monitor");
        free(m);
    }
    /* a tag this run does not write may hold a user's notes: resuming and saving on is fine */
    shell_ok("cd '%s' && cp -r ck ck2 && echo notes > ck2/step000006/NOTES.md",
             tmp);
    {
        char *e2;
        rc = run("train " SMALL " --steps 13 --seed 4 --save-dir ck2 --resume auto", &e2, NULL);
        ZT_CHECK(rc == 0, "resume with a note in an old tag: exit %d: %s", rc, e2);
        free(e2);
        char *n = slurp_rel("ck2/step000006/NOTES.md");
        ZT_CHECK(n && !strcmp(n, "notes\n"), "the note survived: '%s'", n);
        free(n);
    }
    {
        char *d = slurp_rel("dsave/latest"), *n = slurp_rel("usave/step000001/notes.txt");
        ZT_CHECK(d && strlen(d) == sizeof text && !memcmp(d, text, sizeof text),
                 "dsave/latest (a data file) survived (%zu bytes)", d ? strlen(d) : 0);
        ZT_CHECK(n && !strcmp(n, "mine\n"), "usave/step000001/notes.txt survived: '%s'", n);
        free(d);
        free(n);
    }
    {
        char *cfg = slurp_rel("mycfg.json"), *txt = slurp_rel("text.txt");
        ZT_CHECK(cfg && strstr(cfg, "zero_optimization"), "the config survived: '%.40s'", cfg);
        ZT_CHECK(txt && strlen(txt) == sizeof text, "the data file survived (%zu bytes)",
                 txt ? strlen(txt) : 0);
        free(cfg);
        free(txt);
    }
    snprintf(cmd, sizeof cmd, "ckpt verify ck/step000012");
    rc = run(cmd, &err, NULL);
    ZT_CHECK(rc == 0, "ck/step000012 after the refused --metrics: exit %d: %s", rc, err);
    free(err);
    /* --steps up to 2^53 (the engine's counter), and no allocation grows with it: under a 1 GB
     * address space 4e9 steps start training (the old code allocated 32 GB of losses first) */
    expect_usage_error("train --steps 9007199254740993", "--steps: expected a whole number in "
                       "1..2^53");
    if (!ZT_ASAN) {
        char *o3, *e3;
        int r3 = run_after("ulimit -v 1000000 && timeout 10 ",
                           "train " SMALL " --steps 4000000000 --threads 1", &e3, &o3);
        ZT_CHECK(r3 == 124 && strstr(o3, "/4000000000 | loss"),
                 "--steps 4e9 under a 1 GB address space: exit %d (want 124, timed out while "
                 "training): %s %s", r3, o3, e3);
        free(o3);
        free(e3);
    }

    /* A --metrics whose writes fail (a full disk; /dev/full) stops the run after the step, as a
     * signal does, saving first, and exits 1 naming the file (the old code trained on: exit 0,
     * every line lost, nothing said). */
    if (access("/dev/full", W_OK) == 0) {
        char *of, *ef;
        int rf = run("train " SMALL " --steps 40 --metrics /dev/full --save-dir fullck", &ef, &of);
        ZT_CHECK(rf == 1 && strstr(ef, "writing --metrics /dev/full failed: No space left on device")
                     && strstr(ef, "stopped after step") && !strstr(of, "steps 1-40"),
                 "--metrics /dev/full: exit %d (want 1, stopped early): %s %s", rf, ef, of);
        char *latest = slurp_rel("fullck/latest");
        ZT_CHECK(!strncmp(latest, "step0000", 8) && strncmp(latest, "step000040", 10),
                 "--metrics /dev/full: fullck/latest is '%s', want a tag before step 40", latest);
        free(latest);
        free(of);
        free(ef);
        rf = run("ckpt verify fullck", &ef, NULL);
        ZT_CHECK(rf == 0, "the tag saved when --metrics failed does not verify: %d %s", rf, ef);
        free(ef);
    } else {
        printf("test_model_cli: no writable /dev/full here: a failing --metrics is not checked\n");
    }
    /* A --metrics file that fills up midway (a file-size limit stands for a full disk: the write
     * that crosses it is cut short, EFBIG): the run stops as above, and the file ends with its
     * last whole line — the cut line was left half written, and a reader of the JSON lines
     * failed on it. Its stdout goes to /dev/null, which the limit does not touch. */
    {
        char *ef;
        int rf = run_after("(trap '' XFSZ; ulimit -f 8; ",
                           "train " SMALL " --steps 400 --metrics capped.jsonl > /dev/null "
                           "2> capped.err)", NULL, NULL);
        ef = slurp_rel("capped.err");
        char *m = slurp_rel("capped.jsonl");
        size_t n = strlen(m);
        int lines = 0, whole = n > 0 && m[n - 1] == '\n';
        for (char *l = m; whole && *l; lines++) {
            char *nl = strchr(l, '\n');
            whole = nl && nl > l && nl[-1] == '}' && l[0] == '{';
            l = nl ? nl + 1 : l + strlen(l);
        }
        ZT_CHECK(rf == 1 && strstr(ef, "writing --metrics capped.jsonl failed") && whole &&
                     lines > 3,
                 "--metrics over a file-size limit: exit %d (want 1), %d whole lines (want the "
                 "file to end with a whole line): %s ... %s", rf, lines, ef,
                 n > 60 ? m + n - 60 : m);
        free(m);
        free(ef);
    }
    /* an export --out whose name (with the .XXXXXX it is first written as) the directory cannot
     * take: refused before the export (it failed with exit 1 at the end, ENAMETOOLONG) */
    {
        char longname[400] = "ckpt export ck --out ";
        size_t at = strlen(longname);
        memset(longname + at, 'a', 300);
        snprintf(longname + at + 300, sizeof longname - at - 300, ".safetensors");
        expect_usage_error(longname, "its file name is 312 bytes");
    }
    /* a --save-dir where no directory can be made, though access() says writable (root on
     * /proc): refused before training (the old code trained, then failed the save: exit 1) */
    expect_usage_error("train " SMALL " --steps 2 --save-dir /proc/zinc-nope",
                       "--save-dir /proc/zinc-nope");

    /* plot; never over its own input (the old code wrote the SVG over the metrics, exit 0) */
    expect_usage_error("plot m1.jsonl -o m1.jsonl", "is the metrics file itself");
    /* the SVG goes to a fresh temporary name: neither an input named OUT.tmp nor a symlink
     * planted there is written over (both were) */
    shell_ok("cd '%s' && cp m1.jsonl in.tmp && ln -s m1.jsonl p.svg.tmp", tmp);
    rc = run("plot in.tmp -o in", &err, NULL);
    ZT_CHECK(rc == 0, "plot in.tmp -o in: exit %d: %s", rc, err);
    free(err);
    rc = run("plot m1.jsonl -o p.svg", &err, NULL);
    ZT_CHECK(rc == 0, "plot beside a planted symlink: exit %d: %s", rc, err);
    free(err);
    /* m1.jsonl (a refused -o, a planted symlink) and its copy in.tmp still hold their losses */
    check_same_loss("plot kept its inputs", "m1.jsonl", "in.tmp", 12);
    rc = run("plot m1.jsonl -o loss.svg", &err, NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/loss.svg", tmp);
    char *svg = slurp(path);
    ZT_CHECK(rc == 0 && strstr(svg, "<svg") && strstr(svg, "<polyline") &&
                 strstr(svg, "entropy floor") && strstr(svg, "</svg>"),
             "plot: exit %d: %s", rc, err);
    free(svg);
    free(err);
    /* a metrics file of a --gpu-timing run ends with its {"gpu_timing": ...} line: not "skipped" */
    static const char timed[] = "{\"step\":1,\"loss\":5.5}\n{\"step\":2,\"loss\":5.25}\n"
                                "{\"gpu_timing\":{\"rank\":0,\"phase_ms\":{\"upload\":0.1}}}\n";
    write_file("timed.jsonl", timed, sizeof timed - 1);
    rc = run("plot timed.jsonl -o timed.svg", &err, NULL);
    ZT_CHECK(rc == 0 && !strstr(err, "skipped"), "plot of a --gpu-timing metrics file: exit %d: %s",
             rc, err);
    free(err);

    /* A run that trains into NaN (a learning rate of 1e12) still exits 0, as DeepSpeed's would,
     * but its done line counts the skipped steps and a warning follows it; a sane run has
     * neither (it ended with only "final loss -nan") */
    out = NULL;
    rc = run("train --ranks 1 --model L1-D32-H2-T32 --steps 12 --lr 1e12", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "steps skipped (gradient overflow)") &&
                 strstr(err, "warning: the final loss is not finite"),
             "a run into NaN: exit %d: %s%s", rc, out, err);
    free(err);
    free(out);
    rc = run("train --ranks 1 --model L1-D32-H2-T32 --steps 12", &err, &out);
    ZT_CHECK(rc == 0 && strstr(out, "final loss") && !strstr(out, "skipped (") &&
                 !strstr(err, "warning:"),
             "a sane run: exit %d: %s%s", rc, out, err);
    free(err);
    free(out);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return zt_finish("test_model_cli");
}
