/*
 * cmd_config.c — `zinc config check FILE`: validates a DeepSpeed-style JSON config exactly as
 * `zinc train` and zinc_engine_create do (config/config.c), and prints what it resolves to.
 *
 * Exit codes: 0 accepted (warnings on stderr), 2 rejected, unreadable or bad usage.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "tools/commands.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: zinc config check FILE [options]\n\n"
            "Validates a DeepSpeed-style JSON config: every key known, every value in range,\n"
            "DeepSpeed's batch rule satisfied. Exit 0 when accepted (warnings on stderr, one line\n"
            "each), 2 when rejected (one 'error: <key.path>: <what>' line per problem).\n\n"
            "  --world-size N        data-parallel ranks for the batch rule (default 1)\n"
            "  --micro-batch N       fills or overrides train_micro_batch_size_per_gpu\n"
            "  --grad-accum N        fills or overrides gradient_accumulation_steps\n"
            "  --train-batch-size N  fills or overrides train_batch_size\n"
            "  --lr X                fills or overrides optimizer.params.lr (and an \"auto\"\n"
            "                        scheduler.params.warmup_max_lr)\n"
            "  --json                print the resolved config (every default applied, batch\n"
            "                        sizes derived, plus its hash) on stdout\n"
            "  --help                this text\n\n"
            "docs/config.md lists every key, its default and whether zinc honours it.\n");
}

int cmd_config(int argc, char **argv)
{
    const char *cmd = "config";
    if (argc < 2 || zarg_wants_help(argc, argv)) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "check") != 0)
        return zarg_usage_error(cmd, "unknown subcommand '%s' (only 'check')", argv[1]);

    zcfg_overrides ov = {.world_size = 1, .lr = -1.0};
    const char *file = NULL;
    int as_json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        long long n;
        double d;
        if (!strcmp(a, "--json")) {
            as_json = 1;
        } else if (!strcmp(a, "--world-size") || !strcmp(a, "--micro-batch") ||
                   !strcmp(a, "--grad-accum") || !strcmp(a, "--train-batch-size")) {
            if (zarg_value(cmd, a, i + 1 < argc ? argv[i + 1] : NULL)) return 2;
            long long hi = !strcmp(a, "--world-size") ? 1 << 24 : LLONG_MAX;
            if (zarg_int64(argv[i + 1], &n) != 0 || n < 1 || n > hi)
                return zarg_usage_error(cmd, "%s needs a whole number in 1..%lld, got '%s'", a, hi,
                                        argv[i + 1]);
            i++;
            if (!strcmp(a, "--world-size")) ov.world_size = (int)n;
            else if (!strcmp(a, "--micro-batch")) ov.micro_batch = n;
            else if (!strcmp(a, "--grad-accum")) ov.grad_accum = n;
            else ov.train_batch_size = n;
        } else if (!strcmp(a, "--lr")) {
            if (zarg_value(cmd, a, i + 1 < argc ? argv[i + 1] : NULL)) return 2;
            if (zarg_double(argv[i + 1], &d) != 0 || d < 0)
                return zarg_usage_error(cmd, "--lr needs a number >= 0, got '%s'", argv[i + 1]);
            ov.lr = d;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return zarg_usage_error(cmd, "unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return zarg_usage_error(cmd, "one FILE only (got '%s' and '%s')", file, a);
        }
    }
    if (!file) return zarg_usage_error(cmd, "check needs a FILE");

    zcfg c;
    zcfg_diag diag = {0};
    zinc_status s = zcfg_parse_file(file, &ov, &c, &diag);
    for (int i = 0; i < diag.nwarnings; i++) fprintf(stderr, "warning: %s\n", diag.warnings[i]);
    for (int i = 0; i < diag.nerrors; i++) fprintf(stderr, "error: %s\n", diag.errors[i]);
    int nerr = diag.nerrors, nwarn = diag.nwarnings;
    zcfg_diag_free(&diag);
    if (s != ZINC_OK) {
        if (nerr == 0) fprintf(stderr, "error: %s: %s\n", file, zinc_status_string(s));
        fprintf(stderr, "zinc config: %s rejected (%d error%s)\n", file, nerr, nerr == 1 ? "" : "s");
        return s == ZINC_ERR_NOMEM ? 1 : 2;
    }
    if (as_json) {
        char *text = zcfg_report_json(&c);
        if (!text) {
            fprintf(stderr, "zinc config: out of memory\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
    } else {
        printf("%s: accepted (%d warning%s); world size %d: train_batch_size %lld = micro %lld x "
               "accumulation %lld x %d; stage %d, %s%s; gradient_clipping %g%s; hash %s\n",
               file, nwarn, nwarn == 1 ? "" : "s", ov.world_size, (long long)c.train_batch_size,
               (long long)c.micro_batch, (long long)c.grad_accum, ov.world_size, c.zero.stage,
               zinc_dtype_name(c.dtype),
               zcfg_reduces_fp32(&c)          ? " (gradients reduced and accumulated in fp32)"
               : c.grad_accum_dtype != c.dtype ? " (gradients accumulated in fp32)" : "",
               c.gradient_clipping,
               c.gradient_clipping > 0 ? "" : " (off)", c.hash_hex);
    }
    return 0;
}
