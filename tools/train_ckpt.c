/*
 * train_ckpt.c — checkpoint policy of `zinc train` (see train.h): where a run starts (fresh, or
 * from --resume DIR|auto), when it saves (--save-every K into --save-dir, and at the last step),
 * and the client blob saved with every checkpoint so that a resumed run reads the same data from
 * the same step as the run it continues.
 *
 * The engine's state itself goes through zinc_ckpt_save/zinc_ckpt_load (ckpt/); tags are
 * step000100, ... and DIR/latest names the newest.
 */
#include <stdio.h>
#include <string.h>

#include "tools/train.h"

#define BLOB_MAGIC 0x4e49415au  /* "ZAIN" */

int train_ckpt_start(run_t *r, zinc_engine_t *e, int rank, train_blob *blob)
{
    const topts *o = r->o;
    *blob = (train_blob){BLOB_MAGIC, 1, {0}, {ZM_DATA_POS_MAGIC, 1, 0, o->seed,
                                               zm_data_source_id(r->data), 0}, 0};
    snprintf(blob->spec, sizeof blob->spec, "%s", o->spec_str);
    if (r->resume_dir) {
        train_blob in;
        zinc_ckpt_load_options_t lo = {0};
        lo.client_blob = &in;
        lo.client_blob_cap = sizeof in;
        zinc_status s = zinc_ckpt_load(e, r->resume_dir, r->resume_tag, &lo);
        if (s != ZINC_OK) {
            /* no, a damaged or an incompatible checkpoint is rejected input */
            int bad_input = s == ZINC_ERR_IO || s == ZINC_ERR_CORRUPT || s == ZINC_ERR_MISMATCH;
            train_fail(r, rank, s, bad_input ? 2 : 1, "resuming from %s: %s", r->resume_dir,
                       zinc_last_error(e));
            return -1;
        }
        if (lo.client_blob_bytes != sizeof in || in.magic != BLOB_MAGIC || in.version != 1) {
            train_fail(r, rank, ZINC_ERR_MISMATCH, 1, "%s/%s was not written by zinc train (no "
                       "training position in it); load it from your own program instead",
                       r->resume_dir, lo.loaded_tag);
            return -1;
        }
        zm_spec ls;
        char err[256];
        if (zm_spec_parse(in.spec, &ls, err, sizeof err) ||
            memcmp(&ls, &o->spec, sizeof ls) != 0) {
            train_fail(r, rank, ZINC_ERR_MISMATCH, 2, "%s/%s holds model %s, not %s (give "
                       "--model %s)", r->resume_dir, lo.loaded_tag, in.spec, o->spec_str, in.spec);
            return -1;
        }
        if (in.data.source_id != blob->data.source_id && rank == 0)
            fprintf(stderr, "zinc train: warning: the checkpoint was trained on other data (or "
                    "another --seed); continuing with %s\n", zm_data_describe(r->data));
        blob->data.next_seq = in.data.next_seq;
        blob->data.micro_steps = in.data.micro_steps;
        blob->steps = in.steps;
        if (rank == 0)
            printf("resumed from %s/%s at step %lld\n", r->resume_dir, lo.loaded_tag,
                   (long long)in.steps);
    }
    return 0;
}

int train_ckpt_after_step(run_t *r, zinc_engine_t *e, int rank, const train_blob *blob, int bar)
{
    if (!r->save_dir ||
        !((r->save_every && blob->steps % r->save_every == 0) || blob->steps == r->stop_at))
        return 0;
    char tag[64];
    snprintf(tag, sizeof tag, "step%06lld", (long long)blob->steps);
    zinc_ckpt_save_options_t so = {blob, sizeof *blob, 0, -1};
    zinc_status s = zinc_ckpt_save(e, r->save_dir, tag, &so);
    if (s == ZINC_OK) s = zinc_ckpt_wait(e);
    if (s != ZINC_OK) {
        train_fail(r, rank, s, 1, "saving %s/%s: %s", r->save_dir, tag, zinc_last_error(e));
        return -1;
    }
    if (rank == 0) {
        if (bar) printf("\r\033[K");
        printf("saved checkpoint %s/%s\n", r->save_dir, tag);
        fflush(stdout);
    }
    return 0;
}

int train_ckpt_resume_dir(const topts *o, const char **resume_dir)
{
    *resume_dir = NULL;
    if (!o->resume) return 0;
    if (!strcmp(o->resume, "auto")) {
        char latest[1200];
        snprintf(latest, sizeof latest, "%s/latest", o->save_dir);
        if (train_file_exists(latest))
            *resume_dir = o->save_dir;
        else
            printf("no checkpoint in %s: starting fresh\n", o->save_dir);
        return 0;
    }
    if (!train_file_exists(o->resume)) {
        fprintf(stderr, "zinc train: --resume %s: no such directory\n", o->resume);
        return 2;
    }
    *resume_dir = o->resume;
    return 0;
}
