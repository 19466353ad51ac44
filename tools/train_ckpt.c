/*
 * train_ckpt.c — checkpoint policy of `zinc train` (see train.h): where a run starts (fresh, or
 * from --resume DIR|auto), when it saves (--save-every K into --save-dir, and at the last step),
 * and the client blob saved with every checkpoint so that a resumed run reads the same data from
 * the same step as the run it continues.
 *
 * The engine's state itself goes through zinc_ckpt_save/zinc_ckpt_load (ckpt/); tags are
 * step000100, ... and DIR/latest names the newest.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "ckpt/ckpt.h"
#include "tools/commands.h"
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
            /* the tag given, or the directory whose newest good tag was looked for */
            train_fail(r, rank, s, bad_input ? 2 : 1, "resuming from %s%s%s: %s", r->resume_dir,
                       r->resume_tag ? "/" : "", r->resume_tag ? r->resume_tag : "",
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

int train_ckpt_after_step(run_t *r, zinc_engine_t *e, int rank, const train_blob *blob, int bar,
                          int last)
{
    if (!r->save_dir ||
        !((r->save_every && blob->steps % r->save_every == 0) || blob->steps == r->stop_at ||
          last))
        return 0;
    char tag[64];
    snprintf(tag, sizeof tag, "step%06lld", (long long)blob->steps);
    zinc_ckpt_save_options_t so = {blob, sizeof *blob, 0, -1, 0};
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

/* 1, with the reason in msg (n bytes), when dir cannot become a save directory. A missing one
 * is made at the first save with its missing parents, so its nearest existing ancestor is what
 * must be a writable directory. */
static int save_dir_unusable(const char *dir, char *msg, size_t n)
{
    char up[1100];
    struct stat st;
    snprintf(up, sizeof up, "%s", dir);
    size_t len = strlen(up);
    while (len > 1 && up[len - 1] == '/') up[--len] = 0;
    while (stat(up, &st) != 0) {
        int e = errno;
        char *sl = strrchr(up, '/');
        if ((e != ENOENT && e != ENOTDIR) || !strcmp(up, ".")) {
            snprintf(msg, n, "%s: %s", up, strerror(e));
            return 1;
        }
        if (!sl)
            snprintf(up, sizeof up, ".");
        else
            sl[sl == up] = 0; /* "/x": the root */
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(msg, n, "%s is not a directory", up);
        return 1;
    }
    if (access(up, W_OK | X_OK) != 0) {
        snprintf(msg, n, "%s is not writable", up);
        return 1;
    }
    /* access() passes for root on /proc and /sys, where no directory can be made: make one, as
     * the first save will (its tag's .tmp, or the save directory itself), and remove it */
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/.zinc-probe-XXXXXX", up);
    if (!mkdtemp(probe)) {
        snprintf(msg, n, "cannot make a directory in %s: %s", up, strerror(errno));
        return 1;
    }
    rmdir(probe);
    return 0;
}

/* 1, with the reason in msg, when something of the user's is where a save of this run (the
 * steps after `start` up to --steps that it saves at) would write: a `latest` or latest.tmp that
 * is no checkpoint's (a data file), or such a tag directory, .tmp or .old holding files the
 * writer did not make. The save would refuse them (it deletes only its own files); refused now,
 * not at the first save after hours. Tags it will not write are not its business. */
static int save_dir_blocked(const topts *o, long long start, char *msg, size_t n)
{
    int nstale = 0;
    char stale[300] = "";
    unsigned long long stale_bytes = 0;
    DIR *d = opendir(o->save_dir);
    if (!d) return 0; /* missing: made at the first save */
    int bad = zck_latest_check(o->save_dir, msg, n) != 0;
    struct dirent *de;
    char tag[300], want[64];
    while (!bad && (de = readdir(d))) {
        size_t tl = zarg_step_tag_len(de->d_name, "step");
        if (!tl) continue;
        snprintf(tag, sizeof tag, "%.*s", (int)tl, de->d_name);
        long long step = atoll(tag + 4);
        snprintf(want, sizeof want, "step%06lld", step);
        int saved = step > start && step <= o->steps &&
                    (step == o->steps || (o->save_every && step % o->save_every == 0));
        if (saved && !strcmp(tag, want))
            bad = zck_save_target_check(o->save_dir, tag, msg, n) != 0;
        else if (!strcmp(de->d_name + tl, ".tmp")) {
            /* a save stopped before its rename: never loaded, and no save of this run
             * replaces it (one that does removes it first) */
            char p[2400];
            time_t newest;
            unsigned long long b = 0;
            snprintf(p, sizeof p, "%s/%s", o->save_dir, de->d_name);
            if (zck_dir_usage(p, &newest, &b) == 0) stale_bytes += b;
            if (!nstale++) snprintf(stale, sizeof stale, "%s", de->d_name);
        }
    }
    closedir(d);
    if (!bad && nstale == 1 && o->rank0)
        printf("note: %s/%s is an unfinished save a stopped run left (%.1f MiB), never loaded: "
               "a save removes it once it is 15 minutes old (unless it holds a whole "
               "checkpoint)\n", o->save_dir, stale, (double)stale_bytes / (1 << 20));
    else if (!bad && nstale && o->rank0)
        printf("note: %s/%s and %d more *.tmp are unfinished saves stopped runs left (%.1f MiB), "
               "never loaded: a save removes each once it is 15 minutes old (unless it holds a "
               "whole checkpoint)\n", o->save_dir, stale, nstale - 1,
               (double)stale_bytes / (1 << 20));
    return bad;
}

static int settle_resume(const topts *o, run_t *r)
{
    r->resume_dir = r->resume_tag = NULL;
    struct stat st;
    /* a save directory that cannot be one fails now, not at the first save after hours */
    char why[1200];
    if (o->save_dir && save_dir_unusable(o->save_dir, why, sizeof why)) {
        fprintf(stderr, "zinc train: --save-dir %s: %s\n", o->save_dir, why);
        return 2;
    }
    if (o->save_dir && zarg_inside_tag(o->save_dir)) {
        fprintf(stderr, "zinc train: --save-dir %s is inside a checkpoint's tag directory; give "
                "the save directory (the one holding the tags and latest) or a new one\n",
                o->save_dir);
        return 2;
    }
    if (!o->resume) return 0;
    if (!strcmp(o->resume, "auto")) {
        char latest[1200], tag[256];
        snprintf(latest, sizeof latest, "%s/latest", o->save_dir);
        /* Without `latest` (lost, or a copy without it) committed tags are still a checkpoint:
         * the loader picks the highest step. Starting fresh would save over them. Damaged
         * tags alone are not "no checkpoint" either: the load fails naming them. */
        if (train_file_exists(latest)) {
            r->resume_dir = o->save_dir;
            return 0;
        }
        if (stat(o->save_dir, &st) != 0) {
            if (o->rank0) /* under mpirun every process decides the same: rank 0 says it */
                printf("no checkpoint in %s (it does not exist yet): starting fresh\n",
                       o->save_dir);
            return 0;
        }
        DIR *d = opendir(o->save_dir);
        if (!d) {
            fprintf(stderr, "zinc train: --save-dir %s: %s\n", o->save_dir, strerror(errno));
            return 2;
        }
        closedir(d);
        /* Quiet: when a tag is found or damaged the load looks again and warns once, on rank 0
         * (every process would warn here, all as r0); ZINC_ERR_IO means no tag nor `latest`
         * (checked above), so nothing to warn about. */
        zlog_hold(1);
        zinc_status s = zinc_ckpt_find_tag(o->save_dir, NULL, tag, sizeof tag, NULL, 0, NULL);
        zlog_hold(-1);
        if (s == ZINC_OK || s == ZINC_ERR_CORRUPT)
            r->resume_dir = o->save_dir;
        else if (s == ZINC_ERR_IO) { /* nothing in it that is or was a checkpoint */
            if (o->rank0) printf("no checkpoint in %s: starting fresh\n", o->save_dir);
        } else {
            /* INVALID_ARG: DeepSpeed's format, bad input (2) */
            fprintf(stderr, "zinc train: --resume auto: %s\n", zinc_last_error(NULL));
            return s == ZINC_ERR_INVALID_ARG ? 2 : 1;
        }
        return 0;
    }
    /* DIR/TAG with TAG missing and its previous contents whole in TAG.old (a save over it
     * stopped between its renames): that tag, which the load then takes from TAG.old */
    int via_old = 0;
    if (stat(o->resume, &st) != 0) {
        int e = errno;
        char oldp[4200];
        size_t k = strlen(o->resume);
        while (k > 1 && o->resume[k - 1] == '/') k--;
        snprintf(oldp, sizeof oldp, "%.*s.old", (int)k, o->resume);
        via_old = e == ENOENT && zarg_is_checkpoint_tag(oldp);
        if (!via_old) {
            fprintf(stderr, "zinc train: --resume %s: %s\n", o->resume, strerror(e));
            return 2;
        }
    }
    if (!via_old && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "zinc train: --resume %s is not a directory: give a save directory or "
                "one of its tags\n", o->resume);
        return 2;
    }
    if (via_old || zarg_is_checkpoint_tag(o->resume)) {
        /* DIR/TAG, as the ckpt tools take it: that tag of its save directory */
        char *dir = r->resume_buf[0], *tag = r->resume_buf[1];
        if (strlen(o->resume) >= sizeof r->resume_buf[0]) {
            fprintf(stderr, "zinc train: --resume: a path of %zu bytes; at most %zu\n",
                    strlen(o->resume), sizeof r->resume_buf[0] - 1);
            return 2;
        }
        snprintf(dir, sizeof r->resume_buf[0], "%s", o->resume);
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
        char *sl = strrchr(dir, '/');
        snprintf(tag, sizeof r->resume_buf[1], "%s", sl ? sl + 1 : dir);
        if (!sl)
            snprintf(dir, sizeof r->resume_buf[0], ".");
        else
            sl[sl == dir] = 0; /* "/TAG": the root stays "/" */
        r->resume_dir = r->resume_buf[0];
        r->resume_tag = r->resume_buf[1];
        return 0;
    }
    r->resume_dir = o->resume;
    return 0;
}

/* The model spec saved with the checkpoint it will resume, read before any world or engine: a
 * different --model is refused naming the one to give, whatever the shapes (the load itself
 * stops at the first tensor that differs, or at none when only the heads differ). */
static int check_resume_spec(const topts *o, const run_t *r, long long *start)
{
    train_blob in;
    char tag[256];
    size_t got = 0;
    zlog_hold(1); /* the load's own search warns, once (see settle_resume) */
    zinc_status s = zinc_ckpt_find_tag(r->resume_dir, r->resume_tag, tag, sizeof tag, &in,
                                       sizeof in, &got);
    zlog_hold(-1);
    if (s == ZINC_ERR_INVALID_ARG) { /* DeepSpeed's format (or a bad tag name): bad input */
        fprintf(stderr, "zinc train: --resume %s: %s\n", o->resume, zinc_last_error(NULL));
        return 2;
    }
    /* a checkpoint that cannot be read, or not zinc train's: the load says why */
    if (s != ZINC_OK || got != sizeof in || in.magic != BLOB_MAGIC || in.version != 1) return 0;
    in.spec[sizeof in.spec - 1] = 0;
    *start = (long long)in.steps;
    zm_spec ls;
    char err[256];
    if (zm_spec_parse(in.spec, &ls, err, sizeof err) == 0 && memcmp(&ls, &o->spec, sizeof ls) == 0)
        return 0;
    /* The run stops before the load that would warn: the search's warnings (a damaged tag
     * passed over for this one) are said now, once, before the error. */
    if (o->rank0) zinc_ckpt_find_tag(r->resume_dir, r->resume_tag, tag, sizeof tag, NULL, 0, NULL);
    fprintf(stderr, "zinc train: %s/%s holds model %s, not %s (give --model %s)\n",
            r->resume_dir, tag, in.spec, o->spec_str, in.spec);
    return 2;
}

int train_ckpt_prepare(const topts *o, run_t *r)
{
    long long start = 0; /* the step the run resumes at, when its checkpoint can be read */
    int rc = settle_resume(o, r);
    if (!rc && r->resume_dir) rc = check_resume_spec(o, r, &start);
    char why[1200];
    if (!rc && o->save_dir && save_dir_blocked(o, start, why, sizeof why)) {
        fprintf(stderr, "zinc train: --save-dir %s: %s\n", o->save_dir, why);
        rc = 2;
    }
    return rc;
}
