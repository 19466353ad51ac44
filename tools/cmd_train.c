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
 * This file is only the entry point; the pieces are listed in train.h: options (train_args.c),
 * the run itself (train_loop.c), checkpoints (train_ckpt.c), output (train_report.c) and the
 * no-argument demonstration (train_selfcheck.c).
 *
 * Exit codes: 0 done, 1 runtime failure (or the resume check failed), 2 bad usage or input.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tools/commands.h"
#include "tools/train.h"

int cmd_train(int argc, char **argv)
{
    topts o;
    int rc = train_parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = train_resolve_config(&o)) != 0) return rc;
    if ((rc = train_check_device(&o)) != 0) {
        free(o.config_json);
        return rc;
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
        rc = train_selfcheck(&o, data);
    } else {
        run_t r = {.o = &o, .data = data, .stop_at = o.steps, .save_dir = o.save_dir,
                   .save_every = o.save_every, .report_end = 1};
        rc = train_ckpt_prepare(&o, &r);
        if (!rc && o.rank0) rc = train_report_open(&o, &r);
        if (!rc) {
            char say[900];
            if (o.save_dir)
                snprintf(say, sizeof say, "zinc train: interrupted: stopping after the step in "
                         "progress and saving it into %s (a second signal stops at once, "
                         "without that save)", o.save_dir);
            else
                snprintf(say, sizeof say, "zinc train: interrupted: stopping after the step in "
                         "progress (no --save-dir: nothing is saved; a second signal stops at "
                         "once)");
            train_interrupt_install(o.rank0 ? say : NULL);
            rc = run_ranks(&r);
            train_interrupt_restore();
        }
        /* (the closing lines were printed by run_ranks, before the world ended) */
        /* 128 + SIGINT, as a shell reports Ctrl-C; 1 when a failed output stopped it */
        if (!rc && r.interrupted) rc = r.out_failed ? 1 : 130;
        /* a lost --metrics or csv_monitor line is a failure, whatever else stopped the run */
        if (train_report_close(&r) && rc != 2) rc = 1;
        run_free(&r);
    }
    zm_data_close(data);
    free(o.config_json);
    return rc;
}
