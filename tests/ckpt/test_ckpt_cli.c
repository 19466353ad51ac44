/*
 * test_ckpt_cli.c — `zinc ckpt verify|inspect|export` as a user runs them: exit codes, the
 * messages of a damaged checkpoint, --json output, deterministic export.
 */
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "testutil.h"

static char root[512], out[700], errf[700];

/* Runs the CLI with args; returns its exit code; stdout/stderr go to files. */
static int cli(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s > %s 2> %s", ZINC_CLI, args, out, errf);
    int r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static char *slurp(const char *p)
{
    char *t = NULL, err[ZCK_ERR];
    size_t n;
    if (zck_read_file(p, &t, &n, err) != ZINC_OK) return strdup("");
    return t;
}

/* cli() of the args fmt makes; *e gets what it wrote to stderr (the caller frees it). */
static int cli_err(char **e, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = cli(args);
    *e = slurp(errf);
    return rc;
}

/* Tags s1, s2, s3 at steps 1, 2, 3 (2 ranks each) in dir; `latest` names s3. */
static void save_three(const char *dir)
{
    for (int k = 1; k <= 3; k++) {
        char tag[8];
        snprintf(tag, sizeof tag, "s%d", k);
        fx_step = k;
        ZT_OK(fx_save_world(dir, tag, 2, 0x7, (unsigned)k, 4096, 0));
    }
    fx_step = 7;
}

/* A save directory's damaged tags that a load would not reach: a load opens only the tags it
 * tries, but `zinc ckpt verify DIR` still names each (it opens all); a damaged T.old of the
 * missing tag `latest` names is not called whole; latest's note of a higher step never points
 * at a tag that does not open. */
static void damaged_fallbacks(void)
{
    char dir[700], args[2048], p[900], q[900];
    snprintf(dir, sizeof dir, "%s/fallbacks", root);
    save_three(dir);
    snprintf(p, sizeof p, "%s/s1/rank-00001.zck", dir);
    fx_edit_file(p, 0, 0, 100);
    snprintf(args, sizeof args, "ckpt verify %s", dir);
    int rc = cli(args);
    char *e = slurp(errf);
    ZT_CHECK(rc == 0 && strstr(e, "skipping damaged checkpoint") && strstr(e, "/s1:"),
             "verify DIR with an older tag damaged: exit %d, and it should be named: %s", rc, e);
    free(e);
    /* latest (s2 now) names a higher step's tag s3 that does not open: not offered */
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("s2\n", f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/s3/manifest.json", dir);
    snprintf(q, sizeof q, "%s/s2/manifest.json", dir);
    struct stat st;
    if (stat(q, &st) == 0) {       /* s3 written before latest: not "saved after it" */
        struct timespec t[2] = {st.st_atim, st.st_mtim};
        utimensat(AT_FDCWD, p, t, 0);
    }
    snprintf(p, sizeof p, "%s/s3/rank-00000.zck", dir);
    fx_edit_file(p, 0, 0, 100);
    rc = cli(args);
    e = slurp(errf);
    char *o = slurp(out);
    ZT_CHECK(rc == 0 && strstr(o, "tag s2") && !strstr(e, "s3 has step"),
             "latest's note names a tag that does not open: exit %d: %s%s", rc, o, e);
    free(o);
    free(e);
    /* the tag latest names missing, its T.old damaged: not "whole" */
    snprintf(p, sizeof p, "%s/s2", dir);
    snprintf(q, sizeof q, "%s/s2.old", dir);
    ZT_CHECK(rename(p, q) == 0, "rename %s", p);
    snprintf(p, sizeof p, "%s/s2.old/rank-00001.zck", dir);
    fx_edit_file(p, 0, 0, 100);
    rc = cli(args);
    e = slurp(errf);
    ZT_CHECK(!strstr(e, "holds its previous contents whole") && strstr(e, "which does not exist"),
             "a damaged T.old called whole, or the missing tag not said: exit %d: %s", rc, e);
    free(e);
}

/* `verify --all SAVEDIR`: every tag checked, in step order, exit 1 when any is damaged — also
 * one a resume would pass over (plain `verify DIR` exits 0 there: the resume works); an
 * unfinished T.tmp and a T.old beside its T are not tags; a tag directory or an empty one is
 * bad input (2). */
static void verify_all(void)
{
    char dir[700], args[2048], p[900];
    snprintf(dir, sizeof dir, "%s/all", root);
    save_three(dir);
    const char *junk[] = {"s4.tmp", "s1.old"};  /* not tags: a manifest that is not JSON each */
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, junk[i]);
        ZT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
        snprintf(p, sizeof p, "%s/%s/manifest.json", dir, junk[i]);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs("not json", f);
            fclose(f);
        }
    }
    snprintf(args, sizeof args, "ckpt verify --all %s", dir);
    int rc = cli(args);
    char *o = slurp(out), *e = slurp(errf);
    char *a1 = strstr(o, "tag s1,"), *a2 = strstr(o, "tag s2,"), *a3 = strstr(o, "tag s3,");
    ZT_CHECK(rc == 0 && a1 && a2 && a3 && a1 < a2 && a2 < a3 && strstr(o, "all 3 tags") &&
                 !strstr(e, "s4.tmp") && !strstr(e, "s1.old"),
             "--all on three sound tags: exit %d: %s%s", rc, o, e);
    free(o);
    free(e);
    snprintf(p, sizeof p, "%s/s2/rank-00001.zck", dir);
    fx_edit_file(p, 0, 0, 100);
    snprintf(args, sizeof args, "ckpt verify %s", dir);
    ZT_CHECK(cli(args) == 0, "plain verify of the save dir checks s3 only: %s", slurp(errf));
    snprintf(args, sizeof args, "ckpt verify --all %s", dir);
    rc = cli(args);
    o = slurp(out);
    e = slurp(errf);
    ZT_CHECK(rc == 1 && strstr(o, "tag s1,") && strstr(o, "tag s3,") && !strstr(o, "tag s2,") &&
                 strstr(e, "s2/rank-00001.zck") && strstr(e, "1 of 3 tags"),
             "--all with s2 damaged: exit %d: %s%s", rc, o, e);
    free(o);
    free(e);
    snprintf(p, sizeof p, "%s/s3/manifest.json", dir);      /* a tag that lost its manifest */
    unlink(p);
    rc = cli(args);
    e = slurp(errf);
    ZT_CHECK(rc == 1 && strstr(e, "2 of 3 tags") && strstr(e, "/s3"),
             "--all with s3's manifest gone: exit %d: %s", rc, e);
    free(e);
    /* A directory whose files cannot even be looked for (chmod 000: EACCES for a user other
     * than root; here, as the tests run as root, symlink loops: ELOOP). Named a tag's
     * (global_stepN here; stepN, T.old, the one latest names) it is a damaged tag, for --all
     * and for the tag pick of a plain verify (a resume): it was passed over in silence. Of
     * another name (another user's private folder in a shared directory) it is named but not
     * counted, so a directory holding only that is no checkpoint (a fresh `--resume auto`
     * failed on "no valid checkpoint" when it counted). */
    char ldir[700], q[1000];
    snprintf(ldir, sizeof ldir, "%s/all-unreadable", root);
    save_three(ldir);
    const char *looped[] = {"manifest.json", "rank-00000.zck"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/s2/%s", ldir, looped[i]);
        unlink(p);
        ZT_CHECK(symlink(looped[i], p) == 0, "symlink %s", p);
    }
    snprintf(p, sizeof p, "%s/s2", ldir);
    snprintf(q, sizeof q, "%s/global_step2", ldir);
    ZT_CHECK(rename(p, q) == 0, "rename %s", p);
    char pdir[700];                       /* the unknown folder, alone in a directory */
    snprintf(pdir, sizeof pdir, "%s/private-only", root);
    ZT_CHECK(mkdir(pdir, 0755) == 0, "mkdir %s", pdir);
    const char *holders[] = {ldir, pdir};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/private", holders[k]);
        ZT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
        snprintf(q, sizeof q, "%s/manifest.json", p);
        ZT_CHECK(symlink("manifest.json", q) == 0, "symlink %s", q);
    }
    rc = cli_err(&e, "ckpt verify --all %s", ldir);
    ZT_CHECK(rc == 1 && strstr(e, "1 of 3 tags") && strstr(e, "/global_step2") &&
                 strstr(e, "/private: cannot read it") && strstr(e, "not counted"),
             "--all with global_step2 and private unreadable: exit %d: %s", rc, e);
    free(e);
    rc = cli_err(&e, "ckpt verify %s", ldir);
    ZT_CHECK(rc == 0 && strstr(e, "/global_step2: cannot read it") &&
                 strstr(e, "passing over") && strstr(e, "/private"),
             "plain verify with global_step2 and private unreadable: exit %d, and both should "
             "be named: %s", rc, e);
    free(e);
    rc = cli_err(&e, "ckpt verify %s", pdir);
    ZT_CHECK(rc == 2 && strstr(e, "no checkpoint"),
             "a directory holding only an unreadable folder of another name is no checkpoint: "
             "exit %d: %s", rc, e);
    free(e);
    snprintf(args, sizeof args, "ckpt verify --all %s/s1", dir);
    rc = cli(args);
    e = slurp(errf);
    ZT_CHECK(rc == 2 && strstr(e, "tag directory"), "--all on a tag directory: exit %d: %s", rc, e);
    free(e);
    snprintf(p, sizeof p, "%s/all-empty", root);
    ZT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
    snprintf(args, sizeof args, "ckpt verify --all %s", p);
    ZT_CHECK(cli(args) == 2, "--all on an empty directory is bad input");
    snprintf(args, sizeof args, "ckpt verify --all %s/nothing-here", root);
    ZT_CHECK(cli(args) == 2, "--all on a missing directory is bad input");
}

/* A `latest` that holds no tag's name (garbage, a directory in its place) is said, not passed
 * over in silence (verify exited 0 with no word); a client blob with a directory in its place is
 * named as unreadable, not as "missing". */
static void odd_files(void)
{
    char dir[700], args[2048], p[900];
    snprintf(dir, sizeof dir, "%s/odd", root);
    ZT_OK(fx_save_world(dir, "s1", 2, 0x7, 1, 4096, 0));
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fwrite("\0\377../x\n", 1, 8, f);
        fclose(f);
    }
    snprintf(args, sizeof args, "ckpt verify %s", dir);
    int rc = cli(args);
    char *e = slurp(errf);
    ZT_CHECK(rc == 0 && strstr(e, "latest does not hold a tag's name"),
             "verify DIR with a garbled latest: exit %d, and it should be said: %s", rc, e);
    free(e);
    unlink(p);
    ZT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
    rc = cli(args);
    e = slurp(errf);
    ZT_CHECK(rc == 0 && strstr(e, "it is not even a file"),
             "verify DIR with a directory for latest: exit %d, and it should be said: %s", rc, e);
    free(e);
    rmdir(p);
    snprintf(p, sizeof p, "%s/s1/client.bin", dir);
    if (access(p, F_OK) == 0) {
        unlink(p);
        ZT_CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
        snprintf(args, sizeof args, "ckpt verify %s/s1", dir);
        rc = cli(args);
        e = slurp(errf);
        ZT_CHECK(rc == 1 && strstr(e, "not a regular file") && !strstr(e, "is missing"),
                 "verify with a directory for client.bin: exit %d: %s", rc, e);
        free(e);
        rmdir(p);
    } else {
        ZT_CHECK(0, "the fixture's save wrote no %s", p);
    }
}

int main(void)
{
    fx_tmproot(root, sizeof root, "cli");
    snprintf(out, sizeof out, "%s/out.txt", root);
    snprintf(errf, sizeof errf, "%s/err.txt", root);
    char dir[700], args[2048], f1[800], f2[800];
    snprintf(dir, sizeof dir, "%s/save", root);
    ZT_OK(fx_save_world(dir, "s1", 3, 0x7, 1, 4096, 0));

    ZT_CHECK(cli("ckpt --help") == 0, "ckpt --help");
    ZT_CHECK(cli("ckpt verify --help") == 0, "verify --help");
    ZT_CHECK(cli("ckpt export --help") == 0, "export --help");
    ZT_CHECK(cli("ckpt inspect --help") == 0, "inspect --help");
    ZT_CHECK(cli("ckpt verify") == 2, "verify without DIR is a usage error");
    ZT_CHECK(cli("ckpt frobnicate") == 2, "unknown subcommand");

    snprintf(args, sizeof args, "ckpt verify %s", dir);
    ZT_CHECK(cli(args) == 0, "verify of a sound save dir: %s", slurp(errf));
    snprintf(args, sizeof args, "ckpt verify %s/s1", dir);
    ZT_CHECK(cli(args) == 0, "verify of a sound tag dir");
    snprintf(args, sizeof args, "ckpt verify %s/nothing-here", dir);
    ZT_CHECK(cli(args) == 2, "verify of a missing directory is bad input");
    snprintf(args, sizeof args, "ckpt inspect %s/nothing-here", dir);
    ZT_CHECK(cli(args) == 2, "inspect of a missing directory is bad input");
    /* a save directory without `latest` (lost, or copied without it): the tag a load takes */
    {
        char lp[800], keep[800];
        snprintf(lp, sizeof lp, "%s/latest", dir);
        snprintf(keep, sizeof keep, "%s/latest.kept", dir);
        ZT_CHECK(rename(lp, keep) == 0, "move %s", lp);
        snprintf(args, sizeof args, "ckpt verify %s", dir);
        int rc = cli(args);
        char *o = slurp(out);
        ZT_CHECK(rc == 0 && strstr(o, "tag s1"), "verify without latest: exit %d: %s", rc, o);
        free(o);
        ZT_CHECK(rename(keep, lp) == 0, "restore %s", lp);
    }

    snprintf(args, sizeof args, "ckpt inspect %s --json", dir);
    ZT_CHECK(cli(args) == 0, "inspect --json");
    char *js = slurp(out);
    json_object *o = json_tokener_parse(js), *v, *ss, *mst;
    ZT_CHECK(o != NULL, "inspect --json is not JSON: %s", js);
    if (o) {
        ZT_CHECK(json_object_object_get_ex(o, "world_size", &v) && json_object_get_int(v) == 3, "world_size");
        ZT_CHECK(json_object_object_get_ex(o, "step", &v) && json_object_get_int(v) == 7, "step");
        ZT_CHECK(json_object_object_get_ex(o, "zero_stage", &v) && json_object_get_int(v) == 2, "stage");
        ZT_CHECK(json_object_object_get_ex(o, "tensors", &v) &&
                     json_object_array_length(v) == FX_NTENSORS, "tensors");
        zck_tensor t[FX_NTENSORS];
        fx_tensors(t);
        int64_t want = 0;
        for (int i = 0; i < FX_NTENSORS; i++) want += (int64_t)t[i].numel * 4;
        ZT_CHECK(json_object_object_get_ex(o, "streams", &ss) &&
                     json_object_object_get_ex(ss, "master", &mst) &&
                     json_object_object_get_ex(mst, "raw_bytes", &v) && json_object_get_int64(v) == want,
                 "master raw bytes");
        json_object_put(o);
    }
    free(js);
    snprintf(args, sizeof args, "ckpt inspect %s", dir);
    ZT_CHECK(cli(args) == 0, "inspect");

    snprintf(f1, sizeof f1, "%s/a.safetensors", root);
    snprintf(f2, sizeof f2, "%s/b.safetensors", root);
    snprintf(args, sizeof args, "ckpt export %s --out %s --dtype fp16", dir, f1);
    ZT_CHECK(cli(args) == 0, "export: %s", slurp(errf));
    snprintf(args, sizeof args, "ckpt export %s/s1 --out %s --dtype fp16", dir, f2);
    ZT_CHECK(cli(args) == 0, "export again");
    char *a = slurp(f1), *b = slurp(f2);
    struct stat sa, sb;
    ZT_CHECK(stat(f1, &sa) == 0 && stat(f2, &sb) == 0 && sa.st_size == sb.st_size && sa.st_size > 8 &&
                 memcmp(a, b, (size_t)sa.st_size) == 0, "exports differ");
    free(a);
    free(b);
    snprintf(args, sizeof args, "ckpt export %s --out %s --dtype fp64", dir, f1);
    ZT_CHECK(cli(args) == 2, "bad --dtype is a usage error");
    /* an output over the checkpoint itself (a rank file, the tag's directory, `latest`) is
     * refused, and the checkpoint still verifies (the old code renamed the export over it) */
    {
        const char *over[] = {"s1/rank-00000.zck", "s1/new.safetensors", "latest"};
        for (int i = 0; i < 3; i++) {
            snprintf(args, sizeof args, "ckpt export %s --out %s/%s", dir, dir, over[i]);
            int rc = cli(args);
            char *e = slurp(errf);
            ZT_CHECK(rc == 2 && strstr(e, "is a checkpoint's file"),
                     "export --out %s: exit %d: %s", over[i], rc, e);
            free(e);
        }
        /* latest through a symlink to the tag (the guard looked beside the link); --out inside
         * any tag directory, not only the one read */
        char lnk[600], other[600], cmd[3000];
        snprintf(lnk, sizeof lnk, "%s/tag-link", root);
        ZT_CHECK(symlink("save/s1", lnk) == 0, "symlink %s", lnk);
        snprintf(args, sizeof args, "ckpt export %s --out %s/latest", lnk, dir);
        ZT_CHECK(cli(args) == 2, "export through a tag symlink over latest: %s", slurp(errf));
        snprintf(other, sizeof other, "%s/other-tag", root);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/s1/manifest.json' '%s/'", other, dir, other);
        ZT_CHECK(system(cmd) == 0, "%s", cmd);
        snprintf(args, sizeof args, "ckpt export %s --out %s/w.safetensors", dir, other);
        ZT_CHECK(cli(args) == 2, "export into another tag's directory: %s", slurp(errf));
        /* a symlink planted at the old fixed temporary name OUT.tmp is not written through */
        snprintf(lnk, sizeof lnk, "%s/planted.safetensors.tmp", root);
        snprintf(cmd, sizeof cmd, "%s/s1/rank-00000.zck", dir);
        ZT_CHECK(symlink(cmd, lnk) == 0, "symlink %s", lnk);
        snprintf(args, sizeof args, "ckpt export %s --out %s/planted.safetensors", dir, root);
        ZT_CHECK(cli(args) == 0, "export beside a planted symlink: %s", slurp(errf));
        snprintf(args, sizeof args, "ckpt verify %s", dir);
        ZT_CHECK(cli(args) == 0, "the checkpoint verifies after the refused exports: %s",
                 slurp(errf));
        snprintf(args, sizeof args, "%s/s1/new.safetensors", dir);
        ZT_CHECK(access(args, F_OK) != 0, "a refused export wrote %s", args);
        /* an --out that cannot be written is a usage error before the export (it was exit 1
         * after reading and converting the whole checkpoint) */
        const char *bad[2][2] = {{"", "is a directory"}, {"/no-such-dir/w.st", "does not exist"}};
        for (int i = 0; i < 2; i++) {
            snprintf(args, sizeof args, "ckpt export %s --out %s%s", dir, root, bad[i][0]);
            int rc = cli(args);
            char *e = slurp(errf);
            ZT_CHECK(rc == 2 && strstr(e, bad[i][1]), "export --out %s%s: exit %d: %s", root,
                     bad[i][0], rc, e);
            free(e);
        }
    }

    /* a file-size limit (ulimit -f, a quota's kind of stop) reached midway: the export fails
     * with its error, exit 1, and leaves neither the file nor its temporary (SIGXFSZ killed
     * the process, which left `w.safetensors.XXXXXX` behind) */
    {
        char lim[4096];
        snprintf(lim, sizeof lim, "ulimit -f 4; %s ckpt export %s --out %s/lim.safetensors "
                 "> %s 2> %s", ZINC_CLI, dir, root, out, errf);
        int r = system(lim);
        char *e = slurp(errf);
        ZT_CHECK(WIFEXITED(r) && WEXITSTATUS(r) == 1 && strstr(e, "File too large"),
                 "export past ulimit -f: status %d: %s", r, e);
        free(e);
        DIR *d = opendir(root);
        struct dirent *de;
        while (d && (de = readdir(d)))
            ZT_CHECK(strncmp(de->d_name, "lim.safetensors", 15) != 0,
                     "export past ulimit -f left %s", de->d_name);
        if (d) closedir(d);
    }

    /* damage: a flipped byte in rank 1's file */
    char p[900];
    snprintf(p, sizeof p, "%s/s1/rank-00001.zck", dir);
    struct stat st;
    stat(p, &st);
    int fd = open(p, O_RDWR);
    unsigned char c = 0;
    ZT_CHECK(pread(fd, &c, 1, st.st_size - 40) == 1, "read");
    c ^= 1;
    ZT_CHECK(pwrite(fd, &c, 1, st.st_size - 40) == 1, "write");
    close(fd);
    snprintf(args, sizeof args, "ckpt verify %s", dir);
    ZT_CHECK(cli(args) == 1, "verify of a damaged checkpoint must exit 1");
    char *e = slurp(errf);
    ZT_CHECK(strstr(e, "rank-00001.zck") && strstr(e, "chunk"), "message: %s", e);
    printf("  verify of a flipped byte -> %s", e);
    free(e);

    unlink(f1);
    unlink(f2);
    /* the whole root: the export guards' cases left other-tag/, tag-link and the planted
     * symlink beside save/, and rmdir(root) alone kept all of them */
    damaged_fallbacks();
    verify_all();
    odd_files();
    fx_rmtree(root);
    return zt_finish("test_ckpt_cli");
}
