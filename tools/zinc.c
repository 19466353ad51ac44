/*
 * zinc.c — the `zinc` command: dispatches to tools/cmd_*.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "shard/comm.h"
#include "tools/commands.h"
#include "zinc.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} zcommand;

static const zcommand zcommands[] = {
    {"estimate", cmd_estimate, "memory plan per rank for N parameters (ZeRO stages 0-3)"},
    {"plan", cmd_plan, "predicted step time, tokens/s, MFU and scaling of a run"},
    {"config", cmd_config, "config check FILE: validate a DeepSpeed-style JSON config"},
    {"bench", cmd_bench, "benchmarks: adam, memory, comm, offload"},
    {"train", cmd_train, "train the built-in model from a DeepSpeed-style config"},
    {"plot", cmd_plot, "plot metrics.jsonl as an SVG loss curve"},
    {"ckpt", cmd_ckpt, "checkpoints: verify, inspect, export DIR; bench"},
    /* ZINC_COMMANDS: one line per command; keep in step with commands.h */
};

static void usage(FILE *f)
{
    fprintf(f, "zinc %s — ZeRO-style sharded optimizer engine\n\n", zinc_version_string());
    fprintf(f, "usage: zinc <command> [options]   (zinc <command> --help for its options)\n\n");
    for (size_t i = 0; i < sizeof zcommands / sizeof zcommands[0]; i++)
        fprintf(f, "  %-10s %s\n", zcommands[i].name, zcommands[i].help);
    fprintf(f, "\n  --version  version and the backends built\n");
    fprintf(f, "\n`zinc` alone runs the demonstration of `zinc train` with no options (what `make run`\n"
               "runs): the default model trained on 4 local ranks, checkpointed and resumed.\n");
}

static void version(void)
{
    /* Each optional backend reports its library versions, or NULL when it was not built. */
    const char *cuda = zdev_cuda_version(), *mpi = zmpi_version();
    printf("zinc %s\nbackends: cpu, local", zinc_version_string());
    if (mpi) printf(", mpi (%s)", mpi);
    if (cuda) printf(", cuda, nccl (%s)", cuda);
    printf("\n");
}

/* "--opt=value" as two arguments, "--opt" "value", for every command that reads its options
 * one argument at a time (all but train, which splits them itself and so can say that a flag
 * takes no value). Into out (2 * argc + 1 entries, the strings in buf); returns the new argc. */
static int split_eq(int argc, char **argv, char **out, char *buf)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (i > 0 && !strncmp(a, "--", 2) && eq && eq > a + 2) {
            size_t k = (size_t)(eq - a);
            memcpy(buf, a, k);
            buf[k] = 0;
            out[n++] = buf;
            buf += k + 1;
            out[n++] = (char *)eq + 1;
        } else {
            out[n++] = argv[i];
        }
    }
    out[n] = NULL;
    return n;
}

/* What a command printed reached its file, or the run failed whatever it computed: `zinc config
 * check c.json --json > resolved.json` on a full disk left an empty or cut file and exited 0.
 * rc: the command's exit code, kept when it already says a failure. */
static int stdout_reached(int rc)
{
    if (rc != 0) {
        /* failed or interrupted already: its code stands (`zinc train | tee log` stopped by
         * Ctrl-C exits 130; the flush into the pipe tee left must not kill it by SIGPIPE) */
        signal(SIGPIPE, SIG_IGN);
        fflush(stdout);
        return rc;
    }
    /* (a reader gone, `zinc ... | head`: SIGPIPE ends the process here, as any Unix command's
     * end is there; where SIGPIPE is ignored, EPIPE is reported below) */
    int bad = ferror(stdout), why = 0;
    if (fflush(stdout) != 0) bad = 1, why = errno;
    if (!bad) return rc;
    if (why)
        fprintf(stderr, "zinc: writing the output failed: %s\n", strerror(why));
    else
        fprintf(stderr, "zinc: writing the output failed (part of it is missing)\n");
    return 1;
}

static int run(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "help")) { /* zinc help CMD: that command's --help */
        for (size_t i = 0; i < sizeof zcommands / sizeof zcommands[0]; i++)
            if (!strcmp(zcommands[i].name, argv[2]))
                return zcommands[i].fn(2, (char *[]){argv[2], "--help", NULL});
        fprintf(stderr, "zinc: unknown command '%s'\n\n", argv[2]);
        usage(stderr);
        return 2;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        if (argc < 2) {
            /* `zinc` alone runs the main job when it is built, as `make run` does. */
            for (size_t i = 0; i < sizeof zcommands / sizeof zcommands[0]; i++)
                if (!strcmp(zcommands[i].name, "train")) return zcommands[i].fn(argc - 1, argv + 1);
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        if (argc > 2) {
            fprintf(stderr, "zinc: --version takes nothing after it, got '%s'\n", argv[2]);
            return 2;
        }
        version();
        return 0;
    }
    for (size_t i = 0; i < sizeof zcommands / sizeof zcommands[0]; i++) {
        if (strcmp(zcommands[i].name, argv[1]) != 0) continue;
        if (zcommands[i].fn == cmd_train) return cmd_train(argc - 1, argv + 1);
        size_t chars = 0;
        for (int k = 0; k < argc; k++) chars += strlen(argv[k]) + 1;
        char **split = malloc((2 * (size_t)argc + 1) * sizeof *split), *buf = malloc(chars);
        if (!split || !buf) {
            fprintf(stderr, "zinc: out of memory\n");
            return 1;
        }
        int n = split_eq(argc - 1, argv + 1, split, buf);
        int rc = zcommands[i].fn(n, split);
        free(split);
        free(buf);
        return rc;
    }
    fprintf(stderr, "zinc: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    /* A file-size limit (ulimit -f) reached by a write is an error of the command (EFBIG,
     * reported, its temporary removed), not a signal that kills it midway (SIGXFSZ's default
     * left an export's temporary file behind). */
    signal(SIGXFSZ, SIG_IGN);
    return stdout_reached(run(argc, argv));
}
