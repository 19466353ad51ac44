/*
 * train_selfcheck.c — `zinc train` with no arguments, what `make run` runs (see train.h): the
 * default model and config trained to --steps with a checkpoint half-way (run 1), then a new
 * world with new engines resumed from that checkpoint (run 2). Run 2's losses from the
 * checkpoint on and its final weights must equal run 1's bit for bit, which they do only when
 * the checkpoint carries everything the run depends on (engine state and the data position).
 *
 * The checkpoints go to a temporary directory in $TMPDIR (else /tmp), removed at the end, also
 * when SIGINT or SIGTERM stops the demo (after the step in progress, exit 130, as zinc train);
 * under mpirun, where every process must see the same path, to ./zinc-train-demo (kept).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/train.h"

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

static int demo(topts *o, zm_data *data, const char *dir);

int train_selfcheck(topts *o, zm_data *data)
{
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if (o->mpi) {
        snprintf(dir, sizeof dir, "zinc-train-demo");
        mkdir(dir, 0777);
    } else {
        if ((size_t)snprintf(dir, sizeof dir, "%s/zinc-train-XXXXXX", tmp) >= sizeof dir) {
            fprintf(stderr, "zinc train: TMPDIR is too long (%zu bytes)\n", strlen(tmp));
            return 2;
        }
        /* installed before the directory exists: a Ctrl-C from here on ends the run after its
         * step and comes back here to remove it (it killed the process and left the directory) */
        train_interrupt_install("zinc train: interrupted: stopping the demo after the step in "
                                "progress (a second signal stops at once)");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "zinc train: cannot create a temporary directory in %s: %s\n", tmp,
                    strerror(errno));
            train_interrupt_restore();
            return 1;
        }
    }
    int rc = demo(o, data, dir);
    if (!o->mpi) {
        char cmd[8300];
        /* quoted for the shell: a TMPDIR with a ' in it */
        size_t k = 0;
        k += (size_t)snprintf(cmd, sizeof cmd, "rm -rf '");
        for (const char *c = dir; *c && k + 8 < sizeof cmd; c++) {
            if (*c == '\'') k += (size_t)snprintf(cmd + k, sizeof cmd - k, "'\\''");
            else cmd[k++] = *c;
        }
        snprintf(cmd + k, sizeof cmd - k, "'");
        if (system(cmd) != 0) fprintf(stderr, "zinc train: could not remove %s\n", dir);
        train_interrupt_restore();
    }
    return rc;
}

/* The two runs and their comparison, checkpoints in dir; 130 when a signal stopped a run. */
static int demo(topts *o, zm_data *data, const char *dir)
{
    long long half = o->steps / 2 > 0 ? o->steps / 2 : 1;
    P0("zinc train (demo): %lld steps with a checkpoint at step %lld, then a second run "
           "resumed from it\n\n", o->steps, half);
    run_t a = {.o = o, .data = data, .stop_at = o->steps, .save_dir = dir, .save_every = half,
               .keep_losses = 1};
    int rc = run_ranks(&a);
    if (rc || a.interrupted) {
        if (!rc)
            fprintf(stderr, "zinc train (demo): interrupted: stopped after step %lld\n",
                    a.end_step);
        run_free(&a);
        return rc ? rc : 130;
    }
    P0("\nrun 1 done: %lld steps in %.1f s, final loss %.4f", a.end_step, a.seconds,
           a.final_loss);
    if (isfinite(zm_data_entropy(data)))
        P0(" (floor %.4f, start ~%.4f)", zm_data_entropy(data), log(256.0));
    P0("\n\nrun 2: a new world and new engines, resuming from %s/step%06lld\n", dir, half);
    char tag[64];
    snprintf(tag, sizeof tag, "step%06lld", half);
    run_t b = {.o = o, .data = data, .stop_at = o->steps, .resume_dir = dir, .resume_tag = tag,
               .quiet = 1, .keep_losses = 1};
    rc = run_ranks(&b);
    if (rc || b.interrupted) {
        if (!rc) fprintf(stderr, "zinc train (demo): interrupted: run 2 stopped after step %lld\n",
                         b.end_step);
        run_free(&a);
        run_free(&b);
        return rc ? rc : 130;
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
           b.seconds, b.final_loss);
    P0("\nresume check: losses of steps %lld-%lld %s; final weights (%zu values) %s\n",
           half + 1, o->steps, same_loss ? "identical bit for bit" : "DIFFER",
           a.nweights, same_w ? "identical bit for bit" : "DIFFER");
    if (!same_w) P0("  largest weight difference %.3g\n", maxdiff);
    P0("%s\n", same_loss && same_w ? "PASS: the resumed run continued exactly"
                                       : "FAIL: the resumed run did not continue exactly");
    run_free(&a);
    run_free(&b);
    return same_loss && same_w ? 0 : 1;
}

#undef P0
