/*
 * files.c — the few durable-file primitives the commit protocol is built from: whole-file read,
 * atomic replace (tmp + fsync + rename + fsync of the directory), directory fsync and removal.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/files.h"
#include "ckpt/ckpt.h"
#include "base/log.h"

int zck_open_regular(const char *path, char *err)
{
    int fd = zfile_open_regular(path);
    if (fd < 0) {
        int e = errno;
        if (e == EINVAL)
            zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s is not a regular file (a FIFO, device or "
                     "directory in a checkpoint file's place); refusing to read it", path);
        else
            zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot open %s: %s", path, strerror(e));
        errno = e;
    }
    return fd;
}

zinc_status zck_read_file(const char *path, char **out, size_t *len, char *err)
{
    *out = NULL;
    *len = 0;
    errno = 0;
    int fd = zck_open_regular(path, err);
    if (fd < 0) return ZINC_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory reading %s (%zu bytes)",
                        path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot read %s: %s", path, strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return ZINC_OK;
}

zinc_status zck_fsync_dir(const char *dir, char *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot open directory %s: %s", dir,
                        strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    /* Some file systems refuse fsync on directories (EINVAL); their renames are durable anyway. */
    if (r != 0 && e != EINVAL)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot fsync directory %s: %s", dir,
                        strerror(e));
    return ZINC_OK;
}

zinc_status zck_write_file_atomic(const char *path, const void *data, size_t len, char *err)
{
    char tmp[4096], dir[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    /* O_NOFOLLOW: a symlink at PATH.tmp fails the write instead of being written through; a
     * hard link (another name of the same file, anywhere) is refused before it is truncated */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
        close(fd);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s is not a file of zinc's own (a hard link "
                        "or not a regular file); refusing to write through it: move it away", tmp);
    }
    if (ftruncate(fd, 0) != 0) {
        int e = errno;
        close(fd);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot truncate %s: %s", tmp, strerror(e));
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot write %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot fsync %s: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(e));
    }
    return zck_fsync_dir(dir, err);
}

int zck_is_writer_name(const char *name)
{
    static const char *const fixed[] = {ZCK_MANIFEST, ZCK_MANIFEST ".tmp", ZCK_BLOB,
                                        ZCK_BLOB ".tmp"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(name, fixed[i])) return 1;
    /* rank-NNNNN.zck, .json, .json.tmp, .failed (%05d: five digits or more) */
    if (strncmp(name, "rank-", 5) != 0) return 0;
    size_t nd = strspn(name + 5, "0123456789");
    const char *rest = name + 5 + nd;
    return nd >= 5 && (!strcmp(rest, ".zck") || !strcmp(rest, ".json") ||
                       !strcmp(rest, ".json.tmp") || !strcmp(rest, ".failed"));
}

int zck_dir_owned(const char *dir, char *why, size_t n)
{
    struct stat st;
    if (lstat(dir, &st) != 0) {
        snprintf(why, n, "%s", strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "it is %s, not a directory",
                 S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(why, n, "%s", strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    char p[4400];
    while (rc == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (!zck_is_writer_name(de->d_name) || lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(why, n, "it holds %s, which zinc did not write", de->d_name);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int zck_rmdir_flat(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) { /* a symlink is never followed into what it names */
        errno = ENOTDIR;
        return -1;
    }
    /* Another rank of a failed save may still be creating files in the directory (its write
     * fails only once the directory is gone): a name made between readdir and rmdir makes rmdir
     * fail with ENOTEMPTY, so list again. Once rmdir succeeds nothing can be created in it.
     * Only the writer's names go: anything else (a user's file) stops the removal. */
    for (int attempt = 0;; attempt++) {
        DIR *d = opendir(dir);
        if (!d) return errno == ENOENT ? 0 : -1;
        struct dirent *de;
        char p[4096];
        int foreign = 0;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (!zck_is_writer_name(de->d_name)) {
                foreign = 1;
                continue;
            }
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
        closedir(d);
        if (foreign) {
            errno = ENOTEMPTY;
            return -1;
        }
        if (rmdir(dir) == 0 || errno == ENOENT) return 0;
        if ((errno != ENOTEMPTY && errno != EEXIST) || attempt >= 50) return -1;
        struct timespec ts = {0, 10000000L};   /* 10 ms */
        nanosleep(&ts, NULL);
    }
}

int zck_exchange(const char *a, const char *b)
{
#if defined(SYS_renameat2)
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)   /* linux/fs.h's value, for headers that lack it */
#endif
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
#else
    (void)a;
    (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

int zck_dir_usage(const char *dir, time_t *newest, unsigned long long *bytes)
{
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    *newest = st.st_mtime;
    *bytes = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    char p[4400];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p || lstat(p, &st) != 0)
            continue;
        if (st.st_mtime > *newest) *newest = st.st_mtime;
        if (S_ISREG(st.st_mode)) *bytes += (unsigned long long)st.st_size;
    }
    closedir(d);
    return 0;
}

/* A .<tag>.pruning directory of dir: a tag zinc.ckpt_keep_last began to remove (retention.c)
 * when its process stopped; never loaded, so it goes whatever its age (only the writer's files:
 * zck_dir_owned). 1 when removed. */
static int sweep_pruning(const char *dir, const char *name, int rank)
{
    char p[4400], why[256];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p || lstat(p, &st) != 0 ||
        !S_ISDIR(st.st_mode) || zck_dir_owned(p, why, sizeof why) != 0)
        return 0;
    if (zck_rmdir_flat(p) != 0) {
        zlog(ZLOG_WARN, "ckpt", rank, "cannot remove %s, a tag whose removal (zinc.ckpt_keep_last) "
             "stopped: %s", p, strerror(errno));
        return 0;
    }
    zlog(ZLOG_INFO, "ckpt", rank, "removed %s, a tag whose removal (zinc.ckpt_keep_last) stopped",
         p);
    return 1;
}

/* Whether <tag>.tmp (its manifest at tmp_manifest) holds the previous contents of <tag>: a save
 * over an existing tag exchanges the two directories and removes the old one only after
 * `latest` (ckpt/writer.c), so a kill in between leaves it whole, beside the tag, with the
 * older manifest. Killed before the exchange instead, .tmp holds the new save, written after
 * the tag: newer, and kept. A copy (cp -r) can reorder the times, so the contents must agree
 * too: the same run's (config hash) at no later step than the tag's (a save over a tag of the
 * same name at a higher step, "always save to last", is kept whatever the times say). */
static int replaced_copy(const char *dir, const char *name, size_t taglen,
                         const char *tmp_manifest)
{
    char tp[4500], td[4400], xd[4400], err[ZCK_ERR];
    struct stat tm, om;
    if (snprintf(tp, sizeof tp, "%s/%.*s/%s", dir, (int)taglen, name, ZCK_MANIFEST) >=
        (int)sizeof tp)
        return 0;
    if (stat(tp, &tm) != 0 || stat(tmp_manifest, &om) != 0) return 0;
    if (!(tm.st_mtim.tv_sec > om.st_mtim.tv_sec ||
          (tm.st_mtim.tv_sec == om.st_mtim.tv_sec && tm.st_mtim.tv_nsec > om.st_mtim.tv_nsec)))
        return 0;
    snprintf(td, sizeof td, "%s/%.*s", dir, (int)taglen, name);
    snprintf(xd, sizeof xd, "%s/%s", dir, name);
    zck_manifest t, x;
    memset(&t, 0, sizeof t);   /* (freed below whichever reads ran) */
    memset(&x, 0, sizeof x);
    int same = zck_manifest_read(td, &t, err) == ZINC_OK &&
               zck_manifest_read(xd, &x, err) == ZINC_OK && x.step <= t.step &&
               strcmp(x.config_hash, t.config_hash) == 0;
    zck_manifest_free(&t);
    zck_manifest_free(&x);
    return same;
}

int zck_sweep_stale_tmps(const char *dir, const char *keep_tag, double timeout_s, int rank)
{
    double stale_s = timeout_s * 2 > ZCK_STALE_TMP_S ? timeout_s * 2 : ZCK_STALE_TMP_S;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    time_t now = time(NULL);
    struct dirent *de;
    char p[4400], why[256];
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (de->d_name[0] == '.' && n > 9 && !strcmp(de->d_name + n - 8, ".pruning")) {
            removed += sweep_pruning(dir, de->d_name, rank);
            continue;
        }
        if (de->d_name[0] == '.' || n <= 4 || strcmp(de->d_name + n - 4, ".tmp") != 0) continue;
        if (keep_tag && strlen(keep_tag) == n - 4 && !strncmp(de->d_name, keep_tag, n - 4))
            continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        struct stat st;
        time_t newest;
        unsigned long long bytes;
        /* latest.tmp is a file; a directory holding anything zinc did not write is not ours */
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || zck_dir_owned(p, why, sizeof why) != 0 ||
            zck_dir_usage(p, &newest, &bytes) != 0 || (double)(now - newest) < stale_s)
            continue;
        /* killed between its manifest and its rename: whole, and a load takes it when named */
        char mp[4500];
        snprintf(mp, sizeof mp, "%s/%s", p, ZCK_MANIFEST);
        if (access(mp, F_OK) == 0 && replaced_copy(dir, de->d_name, n - 4, mp)) {
            if (zck_rmdir_flat(p) == 0) {
                removed++;
                zlog(ZLOG_WARN, "ckpt", rank, "removed %s (%.1f MiB): the previous contents of "
                     "%.*s, which a save over it replaced and stopped before removing", p,
                     (double)bytes / 1048576.0, (int)(n - 4), de->d_name);
            } else {
                zlog(ZLOG_WARN, "ckpt", rank, "cannot remove %s, the previous contents of %.*s: "
                     "%s", p, (int)(n - 4), de->d_name, strerror(errno));
            }
            continue;
        }
        if (access(mp, F_OK) == 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "kept %s (%.1f MiB), left by a save that stopped "
                 "before its rename: it holds a whole checkpoint, which a load takes only when "
                 "named; rename it to a tag, or remove it", p, (double)bytes / 1048576.0);
            continue;
        }
        if (zck_rmdir_flat(p) != 0) {
            zlog(ZLOG_WARN, "ckpt", rank, "cannot remove %s, left by a save that did not finish: "
                 "%s", p, strerror(errno));
            continue;
        }
        removed++;
        zlog(ZLOG_WARN, "ckpt", rank, "removed %s (%.1f MiB), left by a save that did not finish "
             "%lld minutes ago; it was never a tag", p, (double)bytes / 1048576.0,
             (long long)(now - newest) / 60);
    }
    closedir(d);
    return removed;
}
