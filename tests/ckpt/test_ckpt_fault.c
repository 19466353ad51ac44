/*
 * test_ckpt_fault.c — checkpoints under crashes and damage (labels ckpt, fault).
 *
 *  Kills: a child process saving a tag is killed with SIGKILL at every phase of the commit
 *  protocol (between chunk writes, before fsync, before its rank-N.json, before the manifest,
 *  before the rename, before `latest`, after) and at random times during back-to-back saves.
 *  After each: `latest` names a complete tag that opens and holds exactly the values of the save
 *  that made it; auto selection finds a valid tag; saving again works, and removes the .tmp
 *  directories the kills left once they are 15 minutes old (not a fresh one, one holding a
 *  user's file, or a whole one killed before its rename).
 *
 *  Damage: a truncated chunk, a flipped byte, a missing rank file, a manifest of a newer format
 *  version. Each gives its own clear error naming the file (and chunk); no file changes while
 *  those errors are produced; auto selection skips them all for the older good tag.
 *
 *  Saving over an existing tag: killed between the renames, with the two directories exchanged
 *  and with the fallback through <tag>.old, a load finds a whole checkpoint (test_overwrite); a
 *  rank failing after its rank-N.json is in place fails the save on every rank, nothing
 *  committed (test_late_rank_failure); tag names latest cannot give back (test_tag_names).
 *
 *  Foreign files: a save deletes only the writer's own files. A user's directory or file in the
 *  place of the tag, its .tmp or .old, a `latest` that is no tag name (a data file), a symlink
 *  at the tag: the save fails naming the path, and every one of those files is unchanged.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "fixture.h"
#include "testutil.h"

static char root[512];
static const char *kill_phase;
static int kill_count;

static void kill_hook(const char *phase)
{
    if (kill_phase && !strcmp(phase, kill_phase) && __atomic_sub_fetch(&kill_count, 1, __ATOMIC_SEQ_CST) <= 0) raise(SIGKILL);
}

/* The tag in tagdir opens, verifies, and holds the values of the save made with `salt`. */
static void check_salt(const char *tagdir, unsigned salt, const char *what)
{
    char err[ZCK_ERR];
    const char *tagname = tagdir;
    zck_reader *r;
    zinc_status s = zck_open(tagdir, &r, err);
    ZT_CHECK(s == ZINC_OK, "%s: tag %s does not open: %s", what, tagname, err);
    if (s != ZINC_OK) return;
    ZT_OK(zck_verify(r, 2, err));
    zplan p;
    fx_plan(3, &p);
    for (int rank = 0; rank < 3; rank++) {
        long bad = fx_check_rank(r, &p, rank, ZCK_MASTER, salt, err);
        ZT_CHECK(bad == 0, "%s: tag %s rank %d: %ld values differ (%s)", what, tagname, rank, bad,
                 bad < 0 ? err : "");
    }
    zplan_free(&p);
    zck_close(r);
}

/* Tags are "s<salt>": the salt says which values a tag must hold. */
static void check_tag(const char *dir, const char *tagname, const char *what)
{
    char tagdir[1200];
    snprintf(tagdir, sizeof tagdir, "%s/%s", dir, tagname);
    unsigned salt = 0;
    ZT_CHECK(sscanf(tagname, "s%u", &salt) == 1, "%s: unexpected tag name %s", what, tagname);
    check_salt(tagdir, salt, what);
}

static void check_dir(const char *dir, const char *what)
{
    char path[1200], *txt = NULL, err[ZCK_ERR];
    size_t len;
    snprintf(path, sizeof path, "%s/latest", dir);
    ZT_OK(zck_read_file(path, &txt, &len, err));
    if (txt) {
        while (len && txt[len - 1] == '\n') txt[--len] = 0;
        check_tag(dir, txt, what);
        free(txt);
    }
    char td[1200], tn[256];
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    check_tag(dir, tn, what);
}

static void put(const char *path, const char *text);
static int holds(const char *path, const char *text);

/* The paths of the <tag>.tmp directories in dir (at most max), in name order. */
static int list_tmps(const char *dir, char out[][1200], int max)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), k = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
        if (k < max && len > 4 && !strcmp(names[i]->d_name + len - 4, ".tmp") &&
            stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            snprintf(out[k++], 1200, "%s", p);
        free(names[i]);
    }
    if (n >= 0) free(names);
    return k;
}

/* A flat directory and its files last changed `secs` ago. */
static void age_dir(const char *dir, int secs)
{
    struct timespec t[2] = {{time(NULL) - secs, 0}, {time(NULL) - secs, 0}};
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[1500];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] != '.' && snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p)
            utimensat(AT_FDCWD, p, t, 0);
    }
    if (d) closedir(d);
    utimensat(AT_FDCWD, dir, t, 0);
}

static void test_kills(void)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/kill", root);
    ZT_OK(fx_save_world(dir, "s1", 2, 0x7, 1, 4096, 0));
    static const struct { const char *phase; int count; } pts[] = {
        {"chunk", 1}, {"chunk", 5}, {"fsync", 1}, {"fsync", 2}, {"rankjson", 1}, {"rankjson", 2},
        {"manifest", 1}, {"rename", 1}, {"latest", 1}, {"done", 1},
    };
    int npts = (int)(sizeof pts / sizeof pts[0]);
    unsigned salt = 100;
    for (int i = 0; i < npts; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "s%u", ++salt);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            kill_phase = pts[i].phase;
            kill_count = pts[i].count;
            zck_test_hook = kill_hook;
            zinc_status s = fx_save_world(dir, tag, 3, 0x7, salt, 4096, i % 2);
            _exit(s == ZINC_OK ? 0 : 3);
        }
        int ws;
        waitpid(pid, &ws, 0);
        ZT_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "kill at %s #%d: child was not killed",
                 pts[i].phase, pts[i].count);
        char what[64];
        snprintf(what, sizeof what, "after kill at %s #%d", pts[i].phase, pts[i].count);
        check_dir(dir, what);
    }
    /* random moments of back-to-back saves */
    zt_rng g = {42};
    for (int i = 0; i < 4; i++) {
        fflush(NULL);
        unsigned base = 1000 * (unsigned)(i + 1);
        pid_t pid = fork();
        if (pid == 0) {
            for (unsigned k = 0;; k++) {
                char tag[32];
                snprintf(tag, sizeof tag, "s%u", base + k);
                fx_save_world(dir, tag, 3, 0x7, base + k, 4096, (int)(k % 2));
            }
        }
        struct timespec ts = {0, (long)(2e6 + 30e6 * zt_uniform(&g))};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int ws;
        waitpid(pid, &ws, 0);
        char what[64];
        snprintf(what, sizeof what, "after random kill %d", i);
        check_dir(dir, what);
    }
    /* The kills before the rename left <tag>.tmp directories of tags never saved again. The
     * next save removes those unchanged for 15 minutes (aged here), but not a fresh one (a
     * save writing now, from another engine), one holding a user's file, or one killed after
     * its manifest (whole, and a load takes it when named). */
    enum { MAXT = 32 };
    static char stale[MAXT][1200];
    int nstale = list_tmps(dir, stale, MAXT), whole[MAXT] = {0}, nwhole = 0;
    ZT_CHECK(nstale >= 4, "the kills left %d .tmp directories, expected one per kill before the "
             "rename", nstale);
    char user[1300] = "";
    for (int i = 0; i < nstale; i++) {
        char mp[1300];
        whole[i] = snprintf(mp, sizeof mp, "%s/manifest.json", stale[i]) < (int)sizeof mp &&
                   access(mp, F_OK) == 0;
        nwhole += whole[i];
        if (i > 0) age_dir(stale[i], 20 * 60);
        if (i == 1) {
            snprintf(user, sizeof user, "%s/notes.txt", stale[1]);
            put(user, "mine");
        }
    }
    ZT_CHECK(nwhole >= 1 && nwhole < nstale - 2, "the kills left %d whole .tmp directories of "
             "%d: the cases below need both kinds", nwhole, nstale);
    /* a save after all that still works and becomes latest */
    ZT_OK(fx_save_world(dir, "s9999", 3, 0x7, 9999, 4096, 0));
    char td[1200], tn[256], err[ZCK_ERR];
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s9999"), "after the kills, auto picks %s", tn);
    for (int i = 0; i < nstale; i++) {
        struct stat st;
        int there = stat(stale[i], &st) == 0;
        if (i == 0)
            ZT_CHECK(there, "the save removed %s, changed just now (a save writing there may be "
                     "alive)", stale[i]);
        else if (i == 1)
            ZT_CHECK(holds(user, "mine"), "the save removed %s, a user's file in a stale .tmp",
                     user);
        else if (whole[i])
            ZT_CHECK(there, "the save removed %s, whole (killed after its manifest)", stale[i]);
        else
            ZT_CHECK(!there && errno == ENOENT, "the save left %s, an unfinished .tmp unchanged "
                     "for 20 minutes (a killed save's leftover)", stale[i]);
    }
    fx_rmtree(dir);
}

/* XXH3 of every file of a tag, to prove nothing was written while errors were reported. */
static uint64_t tree_hash(const char *tagdir)
{
    static const char *names[] = {"manifest.json", "rank-00000.zck", "rank-00001.zck",
                                  "rank-00002.zck", "client.bin"};
    uint64_t h = 0;
    char p[1400], *txt, err[ZCK_ERR];
    size_t len;
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", tagdir, names[i]);
        if (zck_read_file(p, &txt, &len, err) != ZINC_OK) continue;
        h = h * 31 + XXH3_64bits(txt, len) + len;
        free(txt);
    }
    return h;
}

static void expect_error(const char *tagdir, zinc_status want, const char *needle1,
                         const char *needle2, const char *what)
{
    char err[ZCK_ERR] = "";
    uint64_t before = tree_hash(tagdir);
    zck_reader *r;
    zinc_status s = zck_open(tagdir, &r, err);
    if (s == ZINC_OK) {
        s = zck_verify(r, 2, err);
        zck_close(r);
    }
    ZT_CHECK(s == want, "%s: got %s (%s), want %s", what, zinc_status_string(s), err,
             zinc_status_string(want));
    ZT_CHECK(strstr(err, needle1) && (!needle2 || strstr(err, needle2)),
             "%s: message does not name \"%s\"%s%s: %s", what, needle1, needle2 ? " and " : "",
             needle2 ? needle2 : "", err);
    ZT_CHECK(tree_hash(tagdir) == before, "%s: files changed", what);
    printf("  %s -> %s\n", what, err);
}

static void test_damage(void)
{
    char dir[700], td[1200], p[1400], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/damage", root);
    ZT_OK(fx_save_world(dir, "s1", 3, 0x7, 1, 4096, 0));
    const char *tags[] = {"s2", "s3", "s4", "s5"};
    for (int i = 0; i < 4; i++) ZT_OK(fx_save_world(dir, tags[i], 3, 0x7, 2 + (unsigned)i, 4096, 0));

    snprintf(td, sizeof td, "%s/s2", dir);
    snprintf(p, sizeof p, "%s/rank-00001.zck", td);
    fx_edit_file(p, 0, 0, 10);
    expect_error(td, ZINC_ERR_CORRUPT, "rank-00001.zck", "chunk", "truncated chunk");

    snprintf(td, sizeof td, "%s/s3", dir);
    snprintf(p, sizeof p, "%s/rank-00002.zck", td);
    struct stat st;
    stat(p, &st);
    fx_edit_file(p, (long)st.st_size / 2, 1, 0);
    expect_error(td, ZINC_ERR_CORRUPT, "rank-00002.zck", "chunk", "flipped byte");
    {   /* the resharding reader names it too */
        zck_reader *r;
        if (zck_open(td, &r, err) == ZINC_OK) {
            zplan pl;
            fx_plan(1, &pl);
            long bad = fx_check_rank(r, &pl, 0, ZCK_MASTER, 3, err);
            long bad2 = bad < 0 ? bad : fx_check_rank(r, &pl, 0, ZCK_ADAM_M, 3, err);
            long bad3 = bad2 < 0 ? bad2 : fx_check_rank(r, &pl, 0, ZCK_ADAM_V, 3, err);
            ZT_CHECK(bad3 < 0 && strstr(err, "rank-00002.zck") && strstr(err, "chunk"),
                     "load of a flipped byte: %s", err);
            zplan_free(&pl);
            zck_close(r);
        }
    }

    snprintf(td, sizeof td, "%s/s4", dir);
    snprintf(p, sizeof p, "%s/rank-00001.zck", td);
    unlink(p);
    expect_error(td, ZINC_ERR_CORRUPT, "rank-00001.zck", "missing", "missing rank file");

    snprintf(td, sizeof td, "%s/s5", dir);
    snprintf(p, sizeof p, "%s/manifest.json", td);
    char *txt;
    size_t len;
    ZT_OK(zck_read_file(p, &txt, &len, err));
    if (txt) {
        char cur[40], *v;
        snprintf(cur, sizeof cur, "\"format_version\":%d", ZCK_FORMAT_VERSION);
        v = strstr(txt, cur);
        if (!v) {
            snprintf(cur, sizeof cur, "\"format_version\": %d", ZCK_FORMAT_VERSION);
            v = strstr(txt, cur);
        }
        ZT_CHECK(v != NULL, "manifest has no %s", cur);
        /* A newer version is refused before its checksum is looked at (a newer writer may seal
         * differently). */
        if (v) *(strchr(v, '0' + ZCK_FORMAT_VERSION)) = (char)('0' + ZCK_FORMAT_VERSION + 1);
        FILE *f = fopen(p, "w");
        fwrite(txt, 1, len, f);
        fclose(f);
        free(txt);
    }
    expect_error(td, ZINC_ERR_UNSUPPORTED, "newer", "version 3", "newer format version");

    /* Auto selection skips every tag that fails its structural checks. A flipped byte inside
     * a chunk (s3) only shows when the chunk is decoded: the loader then asks for the next
     * candidate (skip 1), which must be the sound s1. */
    char tn[256];
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s3"), "auto picked %s; s2, s4, s5 fail at open, s3 only at decode", tn);
    ZT_OK(zck_find_tag(dir, NULL, 1, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s1"), "retry picked %s instead of the only sound tag s1", tn);
    /* a named damaged tag is an error, not a fallback */
    zinc_status s = zck_find_tag(dir, "s4", 0, -1, td, sizeof td, tn, sizeof tn, err);
    ZT_CHECK(s == ZINC_ERR_CORRUPT, "explicit damaged tag: %s", zinc_status_string(s));
    fx_rmtree(dir);
}

/* Writes `text` to path, creating it. */
static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ZT_CHECK(f != NULL, "cannot create %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The file holds exactly `text`. */
static int holds(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return !strcmp(buf, text);
}

/* A save of tag s6 into dir fails naming `needle`, and `keep` still holds `text`. */
static void save_refused(const char *dir, const char *needle, const char *keep, const char *text,
                         const char *what)
{
    char errs[2][ZCK_ERR];
    zinc_status s = fx_save_world_errs(dir, "s6", 2, 0x7, 5, 4096, errs);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(errs[0], needle) && strstr(errs[1], needle),
                 "%s: status %d, rank 0 \"%s\", rank 1 \"%s\"", what, (int)s, errs[0], errs[1]);
    ZT_CHECK(holds(keep, text), "%s: %s was changed", what, keep);
}

/* A user's file `name` holding `text` in directory `sub` of dir (made for it): a save of s6
 * fails naming `needle` and leaves the file; both go afterwards. */
static void user_file_refused(const char *dir, const char *sub, const char *name,
                              const char *text, const char *needle)
{
    char d[900], f[1000];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    ZT_CHECK(mkdir(d, 0755) == 0, "mkdir %s", d);
    snprintf(f, sizeof f, "%s/%s", d, name);
    put(f, text);
    save_refused(dir, needle, f, text, f);
    unlink(f);
    rmdir(d);
}

static void test_foreign(void)
{
    char dir[700], p[900], q[1000];
    snprintf(dir, sizeof dir, "%s/foreign", root);
    fx_rmtree(dir);
    ZT_CHECK(mkdir(dir, 0755) == 0, "mkdir");
    /* a user's directory where the tag goes (no manifest): was emptied as an "old tag"; with
     * only a writer-named file in it: still no manifest, still not a tag; with a user's own
     * manifest.json: it was replaced by zinc's */
    user_file_refused(dir, "s6", "notes.txt", "mine\n", "holds notes.txt, which zinc did not write");
    user_file_refused(dir, "s6", "client.bin", "blob", "holds no manifest.json");
    user_file_refused(dir, "s6", "manifest.json", "{\"mine\": 1}",
                      "its manifest.json is not a zinc checkpoint's");
    /* a user's file in a stale .tmp and .old: they were deleted with the leftovers */
    user_file_refused(dir, "s6.tmp", "data.csv", "1,2\n", "data.csv, which zinc did not write");
    user_file_refused(dir, "s6.old", "data.csv", "1,2\n", "data.csv, which zinc did not write");
    /* a data file named latest: the save replaced it */
    snprintf(p, sizeof p, "%s/latest", dir);
    put(p, "0 1 2 3\n4 5 6 7\n");
    save_refused(dir, "is not a checkpoint's latest", p, "0 1 2 3\n4 5 6 7\n", "data latest");
    unlink(p);
    /* a symlink at the tag to a user's directory: its files were deleted through the link */
    snprintf(p, sizeof p, "%s/elsewhere", root);
    fx_rmtree(p);
    ZT_CHECK(mkdir(p, 0755) == 0, "mkdir");
    snprintf(q, sizeof q, "%s/manifest.json", p);
    put(q, "{}");
    char sl[900];
    snprintf(sl, sizeof sl, "%s/s6", dir);
    ZT_CHECK(symlink(p, sl) == 0, "symlink");
    save_refused(dir, "is a symbolic link", q, "{}", "symlinked tag");
    unlink(sl);
    fx_rmtree(p);
    /* latest.tmp: a hard link to a file elsewhere was truncated and written through, a user's
     * file of that name replaced */
    char other[900];
    snprintf(other, sizeof other, "%s/thesis.txt", root);
    put(other, "important thesis\n");
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    ZT_CHECK(link(other, p) == 0, "link");
    save_refused(dir, "latest.tmp exists and is not a leftover", other, "important thesis\n",
                 "hard link at latest.tmp");
    unlink(p);
    put(p, "precious\n");
    save_refused(dir, "latest.tmp exists and is not a leftover", p, "precious\n",
                 "user file at latest.tmp");
    unlink(p);
    /* and where the check cannot see it (made between the check and the write), the write
     * itself refuses a hard link */
    snprintf(p, sizeof p, "%s/sub", dir);
    ZT_CHECK(mkdir(p, 0755) == 0, "mkdir");
    snprintf(q, sizeof q, "%s/sub/x.tmp", dir);
    ZT_CHECK(link(other, q) == 0, "link");
    char err[ZCK_ERR] = "";
    snprintf(q, sizeof q, "%s/sub/x", dir);
    ZT_CHECK(zck_write_file_atomic(q, "step1\n", 6, err) == ZINC_ERR_IO &&
                 strstr(err, "a hard link"),
             "write through a hard-linked .tmp: \"%s\"", err);
    ZT_CHECK(holds(other, "important thesis\n"), "the hard-linked file was changed");
    snprintf(q, sizeof q, "%s/sub/x.tmp", dir);
    unlink(q);
    rmdir(p);
    unlink(other);
    /* an empty latest (a writer that crashed) and a leftover latest.tmp (naming the tag it was
     * written for) are no user's files */
    ZT_OK(fx_save_world(dir, "s5", 2, 0x7, 5, 4096, 0));
    snprintf(p, sizeof p, "%s/latest", dir);
    put(p, "");
    snprintf(q, sizeof q, "%s/latest.tmp", dir);
    put(q, "s5\n");
    /* and with the way clear, the save works and a save over its own tag too */
    ZT_OK(fx_save_world(dir, "s6", 2, 0x7, 5, 4096, 0));
    ZT_CHECK(holds(p, "s6\n"), "latest after the save over an empty one");
    ZT_OK(fx_save_world(dir, "s6", 2, 0x7, 6, 4096, 0));
    check_tag(dir, "s6", "save over its own tag");
    fx_rmtree(dir);
}

/* Which tag a load takes with no tag given: `latest`'s, as DeepSpeed reads it (a user who points
 * latest back at an older tag gets that one; the old code took the newest), unless a tag was
 * committed after latest was written (a save stopped between its rename and latest: that one). */
static void test_latest_choice(void)
{
    char dir[700], p[900], td[1200], tn[256], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/choice", root);
    fx_rmtree(dir);
    fx_step = 1;                 /* s1, s2, s3 at steps 1, 2, 3 */
    ZT_OK(fx_save_world(dir, "s1", 2, 0x7, 1, 4096, 0));
    fx_step = 2;
    ZT_OK(fx_save_world(dir, "s2", 2, 0x7, 2, 4096, 0));
    snprintf(p, sizeof p, "%s/latest", dir);
    put(p, "s1\n");
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s1"), "latest rolled back to s1: took %s", tn);
    check_tag(dir, tn, "rolled back");
    /* latest older than s3's commit: s3 was saved after it, so s3 */
    fx_step = 3;
    ZT_OK(fx_save_world(dir, "s3", 2, 0x7, 3, 4096, 0));
    fx_step = 7;
    put(p, "s1\n");
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    ZT_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0, "utimensat %s", p);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s3"), "a tag committed after latest: took %s", tn);
    /* latest naming a tag that is not there: the newest */
    put(p, "gone\n");
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s3"), "latest naming a missing tag: took %s", tn);
    /* A copy (cp -r) scrambles mtimes: s1 (a lower step) newer than latest is not taken over
     * latest's s2 (it was: a copied run resumed a save back) */
    put(p, "s2\n");
    ZT_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0, "utimensat %s", p);
    char mf[1300];
    struct timespec older[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    snprintf(mf, sizeof mf, "%s/s3/manifest.json", dir);
    ZT_CHECK(utimensat(AT_FDCWD, mf, older, 0) == 0, "utimensat %s", mf);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s2"), "a lower step newer than latest (a copy): took %s", tn);
    /* latest's s2 damaged: the highest step at or below its step, s1, not s3 (a run abandoned
     * past it; it took s3) */
    snprintf(mf, sizeof mf, "%s/s2/rank-00000.zck", dir);
    ZT_CHECK(truncate(mf, 10) == 0, "truncate %s", mf);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s1"), "latest's tag damaged: took %s", tn);
    /* ... but s3 (a higher step) committed after latest still comes first (with latest's tag
     * damaged it fell behind s1) */
    snprintf(mf, sizeof mf, "%s/s3/manifest.json", dir);
    ZT_CHECK(utimensat(AT_FDCWD, mf, NULL, 0) == 0, "utimensat %s", mf);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s3"), "a higher step after a damaged latest: took %s", tn);
    /* A tag of a higher step, newer than latest, of another run (another config hash): a run
     * abandoned by a resume from an earlier tag with another config, whose tags a copy
     * (cp -r) made newer than latest. latest's s3 is taken, not s9 (it was) */
    fx_config_hash = "fedcba9876543210";
    fx_step = 9;
    ZT_OK(fx_save_world(dir, "s9", 2, 0x7, 9, 4096, 0));
    fx_config_hash = "0123456789abcdef";
    fx_step = 7;
    put(p, "s3\n");
    ZT_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0, "utimensat %s", p);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s3"), "a newer higher step of another config: took %s", tn);
    /* ... while one of latest's run still is (s10, saved after latest was written) */
    fx_step = 10;
    ZT_OK(fx_save_world(dir, "s10", 2, 0x7, 10, 4096, 0));
    fx_step = 7;
    put(p, "s3\n");
    ZT_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0, "utimensat %s", p);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s10"), "a higher step of latest's run saved after it: took %s", tn);
    /* A save that leaves latest as it was (DeepSpeed's save_latest=False: a "best" tag beside
     * the run's): latest is not rewritten, and a load still takes latest's s10, not the newer,
     * higher s11 of the same run (it would be taken as a save that stopped before latest) */
    fx_leave_latest = 1;
    fx_step = 11;
    ZT_OK(fx_save_world(dir, "s11", 2, 0x7, 11, 4096, 0));
    fx_leave_latest = 0;
    fx_step = 7;
    char lt[64] = "";
    ZT_CHECK(zck_latest_read(p, lt, sizeof lt) == 0 && !strcmp(lt, "s3"),
             "a save leaving latest rewrote it: \"%s\"", lt);
    put(p, "s10\n");
    ZT_CHECK(utimensat(AT_FDCWD, p, old, 0) == 0, "utimensat %s", p);
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s10"), "a higher step saved leaving latest: took %s", tn);
    zck_manifest m;
    snprintf(mf, sizeof mf, "%s/s11", dir);
    ZT_OK(zck_manifest_read(mf, &m, err));
    ZT_CHECK(m.latest_left == 1, "s11's manifest does not say it left latest");
    zck_manifest_free(&m);
    ZT_OK(zck_find_tag(dir, "s11", 0, -1, td, sizeof td, tn, sizeof tn, err));  /* by name */
    check_tag(dir, "s11", "saved leaving latest");
    fx_rmtree(dir);
}

static const char *rm_at_aside;   /* a directory the hook below removes between the renames */
static void aside_hook(const char *phase)
{
    if (!strcmp(phase, "renamed-aside") && rm_at_aside) fx_rmtree(rm_at_aside);
}

/* Whether this file system exchanges two directories in one rename (renameat2 RENAME_EXCHANGE:
 * ext4, xfs, btrfs, tmpfs); elsewhere the writer takes its fallback in both rounds below. */
static int can_exchange(void)
{
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/xa", root);
    snprintf(b, sizeof b, "%s/xb", root);
    mkdir(a, 0755);
    mkdir(b, 0755);
    int ok = zck_exchange(a, b) == 0;
    rmdir(a);
    rmdir(b);
    return ok;
}

/* Saving over an existing tag (the same tag every time, "always save to last"): a crash between
 * the renames leaves a whole checkpoint a load finds — the new one where the file system
 * exchanges the two directories, else the old one in s5.old, which a load takes while s5 is
 * missing (nothing loaded before: "none of its directories holds a manifest.json"); a save over
 * it then works and leaves no .old; and a failed second rename of the fallback puts the old tag
 * back under its name (it was left only in .old). */
static void test_overwrite(void)
{
    char dir[700], td[1200], tn[256], err[ZCK_ERR], p[900], what[128];
    snprintf(dir, sizeof dir, "%s/over", root);
    int exchange = can_exchange();
    if (!exchange) printf("note: %s cannot exchange directories: the fallback twice\n", root);
    for (int fallback = 0; fallback <= 1; fallback++) {
        int aside = fallback || !exchange;
        fx_rmtree(dir);
        zck_test_no_exchange = fallback;
        ZT_OK(fx_save_world(dir, "s5", 3, 0x7, 5, 4096, 0));
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            kill_phase = "renamed-aside";
            kill_count = 1;
            zck_test_hook = kill_hook;
            fx_save_world(dir, "s5", 3, 0x7, 6, 4096, 0);
            _exit(3);
        }
        int ws;
        waitpid(pid, &ws, 0);
        snprintf(what, sizeof what, "saved over s5 (%s), killed between the renames",
                 aside ? "moved aside" : "exchanged");
        ZT_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "%s: child was not killed", what);
        ZT_CHECK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err) == ZINC_OK,
                 "%s: no tag found: %s", what, err);
        ZT_CHECK(!strcmp(tn, aside ? "s5.old" : "s5"), "%s: took %s", what, tn);
        check_salt(td, aside ? 5 : 6, what);
        ZT_CHECK(zck_find_tag(dir, "s5", 0, -1, td, sizeof td, tn, sizeof tn, err) == ZINC_OK,
                 "%s: tag s5 by name: %s", what, err);
        check_salt(td, aside ? 5 : 6, what);
        /* ... and by its path (zinc ckpt verify DIR/s5, zinc train --resume DIR/s5/) */
        snprintf(p, sizeof p, "%s/s5/", dir);
        ZT_CHECK(zck_resolve_path(p, td, sizeof td, err) == ZINC_OK, "%s: path %s: %s", what, p,
                 err);
        check_salt(td, aside ? 5 : 6, what);
        ZT_OK(fx_save_world(dir, "s5", 3, 0x7, 7, 4096, 0));
        ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
        ZT_CHECK(!strcmp(tn, "s5"), "%s, saved again: took %s", what, tn);
        check_salt(td, 7, what);
        static const char *const left[2] = {"s5.old", "s5.tmp"};
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s", dir, left[k]);
            ZT_CHECK(access(p, F_OK) != 0, "%s, saved again: %s is left", what, left[k]);
        }
    }
    /* the fallback's second rename failing (the new tag's .tmp removed under it) */
    char tmpd[800];
    snprintf(tmpd, sizeof tmpd, "%s/s5.tmp", dir);
    rm_at_aside = tmpd;
    zck_test_hook = aside_hook;
    zinc_status s = fx_save_world(dir, "s5", 3, 0x7, 8, 4096, 0);
    zck_test_hook = NULL;
    rm_at_aside = NULL;
    zck_test_no_exchange = 0;
    ZT_CHECK(s == ZINC_ERR_IO, "a failed rename into s5: %s, want ZINC_ERR_IO", zinc_status_string(s));
    snprintf(p, sizeof p, "%s/s5/manifest.json", dir);
    ZT_CHECK(access(p, F_OK) == 0, "a failed rename into s5: the old s5 is not back in place");
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s5"), "a failed rename into s5: took %s", tn);
    check_salt(td, 7, "a failed rename into s5");
    fx_rmtree(dir);
}

/* A save over s5 killed at `phase` (a forked child), writing the values of `salt`. */
static void kill_save_over(const char *dir, const char *phase, unsigned salt)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        kill_phase = phase;
        kill_count = 1;
        zck_test_hook = kill_hook;
        fx_save_world(dir, "s5", 3, 0x7, salt, 4096, 0);
        _exit(3);
    }
    int ws;
    waitpid(pid, &ws, 0);
    ZT_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "save over s5 killed at %s: child was "
             "not killed", phase);
}

/* A save over s5 killed after its exchange and before removing the old contents (at "latest")
 * leaves them whole in s5.tmp beside the new s5: the next save's sweep of stale .tmp
 * directories removes it (it kept it for good, advising to rename it to a tag, and
 * --keep-last never counted it). Killed before the exchange (at "rename"), s5.tmp holds the
 * new save, newer than s5: kept, as before; and kept at a higher step though a copy made it
 * the older. */
static void test_replaced_copy(void)
{
    if (!can_exchange()) {
        printf("note: %s cannot exchange directories: no replaced copy in .tmp to check\n", root);
        return;
    }
    char dir[700], p[900], q[900], what[] = "a save over s5 killed after its exchange";
    snprintf(dir, sizeof dir, "%s/replaced", root);
    fx_rmtree(dir);
    ZT_OK(fx_save_world(dir, "s5", 3, 0x7, 5, 4096, 0));
    kill_save_over(dir, "latest", 6);
    snprintf(p, sizeof p, "%s/s5.tmp", dir);
    snprintf(q, sizeof q, "%s/s5", dir);
    check_salt(p, 5, what);             /* the old contents, whole */
    check_salt(q, 6, what);
    age_dir(p, 40 * 60);                /* stale, and older than s5 */
    age_dir(q, 30 * 60);
    ZT_OK(fx_save_world(dir, "s6", 3, 0x7, 9, 4096, 0));
    ZT_CHECK(access(p, F_OK) != 0, "%s: the next save left s5.tmp, the replaced contents", what);
    check_salt(q, 6, what);
    /* killed before the exchange: s5.tmp is the new save (salt 8), kept */
    kill_save_over(dir, "rename", 8);
    age_dir(q, 40 * 60);
    age_dir(p, 30 * 60);
    ZT_OK(fx_save_world(dir, "s7", 3, 0x7, 10, 4096, 0));
    ZT_CHECK(access(p, F_OK) == 0, "a save over s5 killed before its exchange: the next save "
             "removed s5.tmp, the new save, whole");
    if (access(p, F_OK) == 0) check_salt(p, 8, "the unexchanged new save");
    check_salt(q, 6, "s5 beside an unexchanged new save");
    /* the same at a higher step (saving to one tag name, "always save to last"), with the
     * times reversed as a copy (cp -r) can leave them: s5 newer than s5.tmp. The contents say
     * which is which: kept (times alone removed the new save) */
    fx_rmtree(p);
    fx_step = 9;
    kill_save_over(dir, "rename", 11);
    fx_step = 7;
    age_dir(p, 40 * 60);
    age_dir(q, 30 * 60);
    ZT_OK(fx_save_world(dir, "s8", 3, 0x7, 12, 4096, 0));
    ZT_CHECK(access(p, F_OK) == 0, "a save over s5 at a higher step killed before its exchange, "
             "times reversed by a copy: the next save removed s5.tmp, the new save, whole");
    fx_rmtree(dir);
}

/* Tag names a save refuses before writing anything: those that are no directory name of ours,
 * and those `latest` cannot give back as written — a control character (a newline tag was
 * saved, and then every later save into the directory refused its latest) or a space at
 * either end (read back without it). A space inside is a name like any other. */
static void test_tag_names(void)
{
    char dir[700], td[1200], tn[256], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/names", root);
    fx_rmtree(dir);
    static const char *const bad[] = {"a/b", ".h", "latest", "x.tmp", "x.old", "", "a\nb",
                                      "a\rb", "t\tx", "trailing ", " lead", "del\x7f",
                                      /* not UTF-8, which the manifest's reader refuses: such
                                       * a tag was saved, then skipped by every load as
                                       * damaged (a lone byte, a cut sequence, an overlong
                                       * '/', a surrogate) */
                                      "x\xff", "x\xc3", "x\xc0\xaf", "x\xed\xa0\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zinc_status s = fx_save_world(dir, bad[i], 1, 0x7, 1, 4096, 0);
        ZT_CHECK(s == ZINC_ERR_INVALID_ARG, "tag #%zu \"%s\": %s, want ZINC_ERR_INVALID_ARG", i,
                 bad[i], zinc_status_string(s));
    }
    ZT_OK(fx_save_world(dir, "a b", 1, 0x7, 1, 4096, 0));
    ZT_OK(fx_save_world(dir, "a b", 1, 0x7, 1, 4096, 0));    /* and its latest is read back */
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "a b"), "a tag with a space inside: took \"%s\"", tn);
    fx_step = 2;                   /* UTF-8 beyond ASCII is a name like any other, found again */
    ZT_OK(fx_save_world(dir, "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93", 1, 0x7, 2, 4096, 0));
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"), "a UTF-8 tag: took \"%s\"", tn);
    fx_step = 7;
    fx_rmtree(dir);
}

static int fail_rank1(const char *phase, int rank)
{
    return rank == 1 && !strcmp(phase, "rankjson-written");
}

static int fail_rank1_unnoted(const char *phase, int rank)
{
    return rank == 1 && (!strcmp(phase, "rankjson-written") || !strcmp(phase, "failure-note"));
}

/* A rank whose write fails after its rank-N.json is in place (a failed fsync of the directory):
 * every rank fails, naming that rank, and nothing is committed (rank 0 committed the tag with
 * that rank's files and returned success while that rank raised). The same when that rank
 * cannot leave its rank-N.failed note either (a full disk): every rank's error is that rank's
 * own reason, which the ranks send each other (rank 0 said only "failed on another rank (its
 * own error says why)", after 5 s of waiting for the note, and a caller could print only that). */
static void test_late_rank_failure(void)
{
    char dir[700], td[1200], tn[256], err[ZCK_ERR], p[900];
    char errs[3][ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/late", root);
    fx_rmtree(dir);
    ZT_OK(fx_save_world(dir, "s11", 3, 0x7, 11, 4096, 0));
    zck_test_fail = fail_rank1;
    zinc_status s = fx_save_world_errs(dir, "s12", 3, 0x7, 12, 4096, errs);
    zck_test_fail = NULL;
    ZT_CHECK(s == ZINC_ERR_IO, "rank 1 failing late: %s, want ZINC_ERR_IO", zinc_status_string(s));
    for (int r = 0; r < 3; r++)
        ZT_CHECK(strstr(errs[r], "rank 1") != NULL, "rank %d's error does not name rank 1: %s", r,
                 errs[r]);
    snprintf(p, sizeof p, "%s/s12", dir);
    ZT_CHECK(access(p, F_OK) != 0, "rank 1 failing late: s12 was committed");
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "s11"), "rank 1 failing late: took %s", tn);
    check_tag(dir, tn, "rank 1 failing late");
    zck_test_fail = fail_rank1_unnoted;
    s = fx_save_world_errs(dir, "s13", 3, 0x7, 13, 4096, errs);
    zck_test_fail = NULL;
    ZT_CHECK(s == ZINC_ERR_IO, "rank 1 failing without a note: %s", zinc_status_string(s));
    for (int r = 0; r < 3; r++)
        ZT_CHECK(strstr(errs[r], "rank 1") && strstr(errs[r], "injected failure after its "
                                                     "rank-00001.json"),
                 "rank 1 failing without a note: rank %d's error is not rank 1's reason: %s", r,
                 errs[r]);
    snprintf(p, sizeof p, "%s/s13", dir);
    ZT_CHECK(access(p, F_OK) != 0, "rank 1 failing without a note: s13 was committed");
    fx_rmtree(dir);
}

int main(void)
{
    fx_tmproot(root, sizeof root, "fault");
    test_damage();
    test_foreign();
    test_latest_choice();
    test_overwrite();
    test_replaced_copy();
    test_late_rank_failure();
    test_tag_names();
    test_kills();
    rmdir(root);
    return zt_finish("test_ckpt_fault");
}
