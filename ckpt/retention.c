/*
 * retention.c — zinc.ckpt_keep_last: after a save, the run's older tags beyond the newest N go.
 *
 * A run that saves every K steps under global_step<N> (or step<N>) tags fills its disk one whole
 * checkpoint at a time. With the key set, rank 0, right after a save committed (its tag renamed
 * and `latest` naming it), removes the older tags of the same run: directories of the save
 * directory holding a zinc manifest whose config hash is the save's (a tag of another run, or of
 * this run before its config changed, stays), ordered by when they were committed (the
 * manifest's modification time; the tag just saved is the newest whatever the clock says). Only
 * a tag holding nothing but the writer's files goes (zck_rmdir_flat); a user's file in one keeps
 * it. Each removal is logged; a failure is a warning and never fails the save that ran it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "ckpt/ckpt.h"

typedef struct {
    char name[ZCK_TAG_MAX];
    struct timespec committed;     /* the manifest's modification time */
} tag_seen;

/* Newest first. */
static int newer_first(const void *a, const void *b)
{
    const struct timespec *x = &((const tag_seen *)a)->committed;
    const struct timespec *y = &((const tag_seen *)b)->committed;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? 1 : -1;
    if (x->tv_nsec != y->tv_nsec) return x->tv_nsec < y->tv_nsec ? 1 : -1;
    return strcmp(((const tag_seen *)a)->name, ((const tag_seen *)b)->name);
}

/* Whether dir/name is a committed tag of the run whose config hash is `hash`; its manifest's
 * modification time into *when. */
static int tag_of_run(const char *dir, const char *name, const char *hash, struct timespec *when)
{
    size_t n = strlen(name);
    if (name[0] == '.' || n >= ZCK_TAG_MAX || !strcmp(name, ZCK_LATEST) ||
        (n > 4 && (!strcmp(name + n - 4, ".tmp") || !strcmp(name + n - 4, ".old"))))
        return 0;
    char mp[4600], err[ZCK_ERR];
    if (snprintf(mp, sizeof mp, "%s/%s/%s", dir, name, ZCK_MANIFEST) >= (int)sizeof mp) return 0;
    struct stat st;
    if (stat(mp, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char *text = NULL;
    size_t len = 0;
    if (zck_read_file(mp, &text, &len, err) != ZINC_OK) return 0;
    zck_manifest m;
    memset(&m, 0, sizeof m);
    int same = zck_manifest_parse(text, len, mp, &m, err) == ZINC_OK && hash &&
               !strcmp(m.config_hash, hash);
    zck_manifest_free(&m);
    free(text);
    *when = st.st_mtim;
    return same;
}

int zck_prune_tags(const char *dir, const char *tag, const char *config_hash, int keep, int rank)
{
    if (keep <= 0 || !config_hash || !*config_hash) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    tag_seen *seen = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct timespec when;
        if (!strcmp(de->d_name, tag) || !tag_of_run(dir, de->d_name, config_hash, &when)) continue;
        if (n == cap) {
            size_t c2 = cap ? 2 * cap : 16;
            tag_seen *s2 = realloc(seen, c2 * sizeof *s2);
            if (!s2) break;
            seen = s2;
            cap = c2;
        }
        snprintf(seen[n].name, sizeof seen[n].name, "%s", de->d_name);
        seen[n++].committed = when;
    }
    closedir(d);
    int removed = 0;
    if (n > 0) qsort(seen, n, sizeof *seen, newer_first);
    /* the tag just saved is the newest: keep - 1 of the others stay */
    for (size_t i = (size_t)keep - 1; i < n; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, seen[i].name);
        if (zck_rmdir_flat(p) != 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "zinc.ckpt_keep_last %d: cannot remove the older tag "
                 "%s: %s", keep, p, errno == ENOTEMPTY ? "it holds files zinc did not write"
                                                      : strerror(errno));
            continue;
        }
        removed++;
        zlog(ZLOG_INFO, "ckpt", rank, "removed the older tag %s (zinc.ckpt_keep_last %d)", p,
             keep);
    }
    free(seen);
    return removed;
}
