/*
 * retention.c — zinc.ckpt_keep_last: after a save, the run's older tags beyond the newest N go.
 *
 * A run that saves every K steps under global_step<N> (or step<N>) tags fills its disk one whole
 * checkpoint at a time. With the key set, rank 0, right after a save committed (its tag renamed
 * and `latest` naming it), removes older tags of the same run. A tag is a candidate only when
 * all of these hold, so that nothing a user named or another run wrote is touched:
 *   - its name is a default tag name for the step its manifest records: `global_step<N>`
 *     (save_checkpoint's default, as DeepSpeed's) or `step<N>` zero-padded to six digits or
 *     more (`zinc train`'s) — a hand-named tag ("best", "final") always stays;
 *   - it was saved with `latest` updated: one saved leaving latest as it was (DeepSpeed's
 *     save_latest=False, a tag set aside beside the run's) always stays, and such a save
 *     prunes nothing (writer.c);
 *   - its manifest has the save's config hash (another config's tags stay) and a step below the
 *     save's (tags of a higher step, left by a run that was resumed from an earlier tag, stay);
 *   - it holds nothing but the writer's files (zck_dir_owned): a tag holding a user's file stays
 *     whole, with a warning.
 * The candidates are ordered by step, newest first, and all but keep - 1 of them go (the tag
 * just saved is the keep-th): each renamed to .<tag>.pruning, then its manifest and its files
 * deleted. Each removal is logged; a failure is a warning and never fails the save that ran it.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "ckpt/ckpt.h"

typedef struct {
    char name[ZCK_TAG_MAX];
    int64_t step;
} tag_seen;

/* Newest (highest step) first; equal steps by name, last first. */
static int newer_first(const void *a, const void *b)
{
    const tag_seen *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return -strcmp(x->name, y->name);
}

/* Whether name is a default tag name of step: global_step<step>, or step<step> with at least
 * six digits (zinc train's step%06lld). */
static int default_name(const char *name, int64_t step)
{
    char a[48], b[48];
    snprintf(a, sizeof a, "global_step%" PRId64, step);
    snprintf(b, sizeof b, "step%06" PRId64, step);
    return !strcmp(name, a) || !strcmp(name, b);
}

/* Whether dir/name is an older tag of the run whose config hash is `hash` and whose save is at
 * step `below` (see the top); its step into *step. */
static int older_tag_of_run(const char *dir, const char *name, const char *hash, int64_t below,
                            int64_t *step)
{
    if (name[0] == '.' || strlen(name) >= ZCK_TAG_MAX) return 0;
    char td[4400], err[ZCK_ERR];
    if (snprintf(td, sizeof td, "%s/%s", dir, name) >= (int)sizeof td) return 0;
    zck_manifest m;
    int ok = zck_manifest_read(td, &m, err) == ZINC_OK && !strcmp(m.config_hash, hash) &&
             m.step < below && default_name(name, m.step) && !m.latest_left;
    *step = m.step;
    zck_manifest_free(&m);
    return ok;
}

int zck_prune_tags(const char *dir, const char *tag, const char *config_hash, int64_t step,
                   int keep, int rank)
{
    if (keep <= 0 || !config_hash || !*config_hash) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    tag_seen *seen = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t s;
        if (!strcmp(de->d_name, tag) || !older_tag_of_run(dir, de->d_name, config_hash, step, &s))
            continue;
        if (n == cap) {
            size_t c2 = cap ? 2 * cap : 16;
            tag_seen *s2 = realloc(seen, c2 * sizeof *s2);
            if (!s2) break;
            seen = s2;
            cap = c2;
        }
        snprintf(seen[n].name, sizeof seen[n].name, "%s", de->d_name);
        seen[n++].step = s;
    }
    closedir(d);
    int removed = 0;
    if (n > 0) qsort(seen, n, sizeof *seen, newer_first);
    for (size_t i = (size_t)keep - 1; i < n; i++) {
        char p[4400], why[256];
        snprintf(p, sizeof p, "%s/%s", dir, seen[i].name);
        /* checked first: zck_rmdir_flat deletes the writer's files before it finds a foreign one */
        if (zck_dir_owned(p, why, sizeof why) != 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "zinc.ckpt_keep_last %d: kept the older tag %s whole: "
                 "%s", keep, p, why);
            continue;
        }
        /* Out of the tags' names first, to .<tag>.pruning (a hidden name no load looks at),
         * synced, then its manifest before its shards: a crash partway leaves no damaged tag
         * for a load to skip and warn about, only a leftover the next save sweeps
         * (zck_sweep_stale_tmps). One left by an earlier crash in the way goes first. */
        char gone[4420], mp[4500], e2[ZCK_ERR];
        snprintf(gone, sizeof gone, "%s/.%s.pruning", dir, seen[i].name);
        if (zck_rmdir_flat(gone) != 0 || rename(p, gone) != 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "zinc.ckpt_keep_last %d: cannot remove the older tag "
                 "%s: moving it to %s: %s", keep, p, gone, strerror(errno));
            continue;
        }
        zck_fsync_dir(dir, e2);
        snprintf(mp, sizeof mp, "%s/%s", gone, ZCK_MANIFEST);
        unlink(mp);
        if (zck_rmdir_flat(gone) != 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "zinc.ckpt_keep_last %d: cannot finish removing the "
                 "older tag %s (now %s): %s", keep, p, gone, strerror(errno));
            continue;
        }
        removed++;
        zlog(ZLOG_INFO, "ckpt", rank, "removed the older tag %s (zinc.ckpt_keep_last %d)", p,
             keep);
    }
    free(seen);
    return removed;
}
