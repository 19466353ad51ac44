/* args.c — argument parsing helpers shared by the CLI commands (see commands.h). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <limits.h>

#include <json-c/json.h>

#include "base/files.h"
#include "base/suggest.h"
#include "tools/commands.h"

/* Plain decimal only: [+-] digits [. digits] [e|E [+-] digits], at least one mantissa digit,
 * either side of the point (".5" and "5." as in C, Python and JSON's superset). strtod alone
 * also reads "0x10" (16), " 3" (leading space), "inf" and "nan", none of which a user means as a
 * count or a rate. */
static int plain_decimal(const char *s)
{
    size_t i = 0, digits;
    if (s[i] == '+' || s[i] == '-') i++;
    digits = strspn(s + i, "0123456789");
    i += digits;
    if (s[i] == '.') {
        size_t frac = strspn(s + i + 1, "0123456789");
        digits += frac;
        i += 1 + frac;
    }
    if (digits == 0) return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        if (s[i] == '+' || s[i] == '-') i++;
        size_t exp = strspn(s + i, "0123456789");
        if (exp == 0) return 0;
        i += exp;
    }
    return s[i] == 0;
}

int zarg_double(const char *s, double *out)
{
    if (!s || !plain_decimal(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* ERANGE: past the double's range ("1e999"): refused; below its normal numbers ("1e-400"):
     * the nearest double, as a JSON config's number reads. -0 is 0 (one value, one config hash). */
    if ((errno && fabs(v) >= 1.0) || *end || !isfinite(v)) return -1;
    *out = v == 0.0 ? 0.0 : v;
    return 0;
}

int zarg_int64(const char *s, long long *out)
{
    /* Plain digits exactly (a double rounds past 2^53: 9007199254740993 read as ...992) */
    const char *d = s && (*s == '-' || *s == '+') ? s + 1 : s;
    if (d && *d && strspn(d, "0123456789") == strlen(d)) {
        char *end;
        errno = 0;
        long long n = strtoll(s, &end, 10);
        if (errno == ERANGE) return -2; /* whole, past any count: "out of range", not "not whole" */
        if (errno || *end) return -1;
        *out = n;
        return 0;
    }
    /* Otherwise zarg_double's plain decimal: "7.5e9" is a whole number written as a float;
     * "1.5", "0x10" and " 3" are not. */
    double v;
    if (zarg_double(s, &v) != 0) {
        /* "1e400": plain decimal past the double's range, so whole and past any count too */
        return s && plain_decimal(s) && isinf(strtod(s, NULL)) ? -2 : -1;
    }
    if (v != floor(v)) return -1;
    if (fabs(v) > 9.0e18) return -2;
    *out = (long long)v;
    return 0;
}

int zarg_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int zarg_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "zinc %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see zinc %s --help)\n", cmd);
    return 2;
}

int zarg_unknown_option(const char *cmd, const char *arg, const char *const *names, int n,
                        const char *owner)
{
    /* compared without the leading "--" (it made every short option two edits from --lr);
     * names are all "--..." options */
    if (owner)
        return zarg_usage_error(cmd, "unknown option '%s': it is an option of zinc %s, not of "
                                "zinc %s", arg, owner, cmd);
    const char *tails[64], *best = NULL;
    int m = n < 64 ? n : 64;
    for (int k = 0; k < m; k++) tails[k] = names[k] + 2;
    if (!strncmp(arg, "--", 2) && arg[2] && (best = zsuggest(arg + 2, tails, m)))
        return zarg_usage_error(cmd, "unknown option '%s'; did you mean --%s?", arg, best);
    return zarg_usage_error(cmd, "unknown option '%s'", arg);
}

int zarg_dtype(const char *s, zinc_dtype *out)
{
    /* The names zinc_dtype_name gives, read back. */
    const zinc_dtype all[] = {ZINC_DTYPE_FP32, ZINC_DTYPE_FP16, ZINC_DTYPE_BF16};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, zinc_dtype_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

int zarg_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The directory part of path as written into out (PATH_MAX bytes): "." for a bare name, "/" for
 * "/f". */
static void parent_dir(const char *path, char *out)
{
    snprintf(out, PATH_MAX, "%s", path);
    char *sl = strrchr(out, '/');
    if (!sl)
        snprintf(out, PATH_MAX, ".");
    else
        sl[sl == out] = 0;
}

/* The directory part of path, resolved, into rp (PATH_MAX bytes); 0 when it does not exist. */
static int resolved_parent(const char *path, char *rp)
{
    char parent[PATH_MAX];
    parent_dir(path, parent);
    return realpath(parent, rp) != NULL;
}

int zarg_is_checkpoint_tag(const char *dir)
{
    char mp[2 * PATH_MAX + 32];
    struct stat st;
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    return stat(mp, &st) == 0;
}

int zarg_in_checkpoint_tag(const char *path)
{
    char rp[PATH_MAX], rf[PATH_MAX];
    if (resolved_parent(path, rp) && zarg_is_checkpoint_tag(rp)) return 1;
    /* an existing path may be a symlink into a tag: the file it resolves to counts */
    return realpath(path, rf) && resolved_parent(rf, rp) && zarg_is_checkpoint_tag(rp);
}

/* 1 when dir is a save directory: a subdirectory of it is a tag (holds a manifest.json). */
static int holds_tag(const char *dir)
{
    char td[2 * PATH_MAX];
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && !found && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(td, sizeof td, "%s/%s", dir, de->d_name);
        found = zarg_is_checkpoint_tag(td);
    }
    if (d) closedir(d);
    return found;
}

int zarg_is_checkpoint_latest(const char *path)
{
    char rf[PATH_MAX], dir[PATH_MAX];
    /* an existing file is followed to what it is; a new one is named as given */
    const char *p = realpath(path, rf) ? rf : path;
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    return !strcmp(base, "latest") && resolved_parent(p, dir) && holds_tag(dir);
}

size_t zarg_step_tag_len(const char *name, const char *prefix)
{
    size_t np = strlen(prefix);
    size_t nd = strncmp(name, prefix, np) ? 0 : strspn(name + np, "0123456789");
    const char *rest = name + np + nd;
    return nd && (!*rest || !strcmp(rest, ".tmp") || !strcmp(rest, ".old")) ? np + nd : 0;
}

int zarg_is_save_slot(const char *path)
{
    char rf[PATH_MAX], dir[PATH_MAX];
    const char *p = realpath(path, rf) ? rf : path;
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    int slot = !strcmp(base, "latest.tmp") || !strcmp(base, "latest.old") ||
               zarg_step_tag_len(base, "step") || zarg_step_tag_len(base, "global_step");
    return slot && resolved_parent(p, dir) && holds_tag(dir);
}

int zarg_writable_dir(const char *cmd, const char *opt, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return zarg_usage_error(cmd, "%s %s: %s", opt, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return zarg_usage_error(cmd, "%s %s: not a directory", opt, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return zarg_usage_error(cmd, "%s %s: not writable (%s)", opt, dir, strerror(errno));
    return 0;
}

int zarg_value(const char *cmd, const char *opt, const char *v)
{
    /* "--save-dir --steps 5": the option's value forgotten, the next option taken for it. A
     * single dash stays a value: "-1", or "-" (a file of that name: no command reads stdin). */
    if (!v) return zarg_usage_error(cmd, "%s needs a value", opt);
    if (!*v || !strncmp(v, "--", 2))
        return zarg_usage_error(cmd, "%s needs a value%s%s%s", opt, *v ? " (got the option '" : "",
                                v, *v ? "')" : "");
    return 0;
}

int zarg_resolve_loose(const char *path, char *out)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf || !*buf) return 0;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    if (realpath(buf, out)) return 1;
    if (errno != ENOENT) return 0;
    /* not there (yet): its parent resolved, then its last name */
    const char *sl = strrchr(buf, '/'), *base = sl ? sl + 1 : buf;
    char parent[PATH_MAX], rp[PATH_MAX];
    parent_dir(buf, parent);
    if (!strcmp(base, "..") || !zarg_resolve_loose(parent, rp)) return 0;
    if (!strcmp(base, ".")) return snprintf(out, PATH_MAX, "%s", rp) < PATH_MAX;
    return snprintf(out, PATH_MAX, "%s/%s", strcmp(rp, "/") ? rp : "", base) < PATH_MAX;
}

int zarg_inside_tag(const char *path)
{
    char rp[PATH_MAX];
    if (zarg_in_checkpoint_tag(path)) return 1; /* also a symlink in a tag that leads out of it */
    if (!zarg_resolve_loose(path, rp)) return 0;
    for (char *sl; rp[1]; *sl = 0) {
        if (zarg_is_checkpoint_tag(rp)) return 1;
        sl = strrchr(rp, '/');
        if (sl == rp) sl++; /* "/x": the root next */
    }
    return 0;
}

int zarg_output_file_ok(const char *cmd, const char *opt, const char *out)
{
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return zarg_usage_error(cmd, "%s '%s' is a directory; give a file name", opt, out);
    /* a FIFO or device: the output is written aside and renamed over it, which would replace
     * it (as root, /dev/null became a regular file) */
    if (stat(out, &st) == 0 && !S_ISREG(st.st_mode))
        return zarg_usage_error(cmd, "%s '%s' is not a regular file (a FIFO, device or socket); "
                                "give a file name", opt, out);
    char dir[PATH_MAX];
    parent_dir(out, dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return zarg_usage_error(cmd, "%s '%s': its directory '%s' does not exist", opt, out, dir);
    /* /dev/stdout is a symlink: when stdout is a file it stats as one, and the rename would
     * replace the system's link (as root) rather than write to the redirect */
    char real[PATH_MAX];
    static const char *const sys_dirs[] = {"/dev", "/proc", "/sys"};
    for (size_t i = 0; realpath(dir, real) && i < sizeof sys_dirs / sizeof sys_dirs[0]; i++) {
        size_t n = strlen(sys_dirs[i]);
        if (!strncmp(real, sys_dirs[i], n) && (real[n] == '/' || real[n] == 0))
            return zarg_usage_error(cmd, "%s '%s' is under %s: the file is written beside its "
                                    "name and renamed over it, which would replace a system "
                                    "entry; give a regular file's path", opt, out, sys_dirs[i]);
    }
    if (access(dir, W_OK | X_OK) != 0)
        return zarg_usage_error(cmd, "%s '%s': its directory '%s' is not writable (%s)", opt, out,
                                dir, strerror(errno));
    /* The file is first written as NAME.XXXXXX (zfile_create_beside): that name must fit too,
     * or the whole run's work fails at the end on ENAMETOOLONG. */
    const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    long name_max = pathconf(dir, _PC_NAME_MAX);
    if (name_max > 0 && strlen(base) + 7 > (size_t)name_max)
        return zarg_usage_error(cmd, "%s '%.40s...': its file name is %zu bytes; the directory "
                                "takes %ld, and zinc first writes the name with 7 more (.XXXXXX)",
                                opt, out, strlen(base), name_max);
    if (strlen(out) + 7 >= PATH_MAX)
        return zarg_usage_error(cmd, "%s: the path is %zu bytes, too long (at most %d)", opt,
                                strlen(out), PATH_MAX - 8);
    if (zarg_inside_tag(out) || zarg_is_checkpoint_latest(out))
        return zarg_usage_error(cmd, "%s '%s' is a checkpoint's file; write it elsewhere", opt,
                                out);
    /* a name a save into that directory writes: the save would replace it, or stop at it */
    if (zarg_is_save_slot(out))
        return zarg_usage_error(cmd, "%s '%s' is where a save into its directory (a save "
                                "directory) writes: latest, a tag, or their .tmp or .old; write "
                                "it elsewhere", opt, out);
    return 0;
}

int zarg_one_of(const char *a, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(a, *names)) return 1;
    return 0;
}

void zarg_json_string(FILE *f, const char *s)
{
    json_object *o = json_object_new_string(s ? s : "");
    fputs(o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_NOSLASHESCAPE) : "\"\"", f);
    json_object_put(o);
}
