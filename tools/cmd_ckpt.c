/*
 * cmd_ckpt.c — `zinc ckpt verify|inspect|export|bench`: checkpoint tools built on the ckpt/
 * layers directly, so they need no engine, no config and no world (docs/checkpoint-format.md).
 *
 * Exit codes: 0 success (verify: the checkpoint is sound), 1 the checkpoint is damaged or an
 * I/O error happened (the message names the file and chunk), 2 bad usage.
 */
#include <inttypes.h>
#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "ckpt/ckpt.h"
#include "models/rng.h"
#include "tools/commands.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zinc ckpt <verify|inspect|export|bench> ... (zinc ckpt <sub> --help)\n\n"
            "  verify DIR [--all]         read every chunk and check every checksum\n"
            "  inspect DIR [--json]       step, world size, stage, tensors, bytes per stream\n"
            "  export DIR --out F [--dtype fp32|fp16|bf16]   master weights as .safetensors\n"
            "  bench [--mib N] ...        save/load speed and compression on realistic state\n\n"
            "DIR is a tag directory (holds manifest.json) or a save directory: then the tag a\n"
            "resume tries first (the one `latest` names, unless a tag of a higher step was\n"
            "saved after it).\n"
            "Exit 2 when DIR is missing, holds no checkpoint, or holds DeepSpeed's (convert it:\n"
            "python -m zinc.utils.from_deepspeed).\n");
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static int open_dir(const char *cmd, const char *path, zck_reader **r)
{
    char tagdir[4096], err[ZCK_ERR];
    zinc_status s = zck_resolve_path(path, tagdir, sizeof tagdir, err);
    /* nothing there to check, or DeepSpeed's format, is bad input (2); a checkpoint that fails
     * its checks is 1 */
    int rc = s == ZINC_ERR_IO || s == ZINC_ERR_INVALID_ARG ? 2 : 1;
    if (s == ZINC_OK) s = zck_open(tagdir, r, err);
    if (s != ZINC_OK) {
        fprintf(stderr, "zinc ckpt %s: %s\n", cmd, err);
        return rc;
    }
    return 0;
}

/* ---- verify ----------------------------------------------------------------------------------- */

static int verify_open(zck_reader *r);
static int verify_all(const char *dir);

static int ckpt_verify(int argc, char **argv)
{
    const char *dir = NULL;
    if (zarg_wants_help(argc, argv)) {
        printf("usage: zinc ckpt verify [--all] DIR\n\n"
               "Reads every chunk of every rank file and checks its checksums, the client\n"
               "blob, and that the stored pieces cover every tensor exactly once.\n"
               "DIR: a tag directory, or a save directory (checks the tag a resume tries\n"
               "first: latest's, unless a tag of a higher step was saved after it; damage\n"
               "found in its data is reported, where a resume would fall back to the next\n"
               "tag). Exit 0 when sound; 1 with a message naming the file and chunk\n"
               "otherwise; 2 when DIR is missing or holds no checkpoint.\n"
               "--all: DIR is a save directory, and every tag in it is checked (a line\n"
               "each, in step order), not only the one a resume takes; exit 1 when any\n"
               "is damaged (before archiving or pruning a run's checkpoints).\n");
        return 0;
    }
    int all = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--all")) all = 1;
        else if (argv[i][0] == '-' || dir) return zarg_usage_error("ckpt verify", "unexpected '%s'", argv[i]);
        else dir = argv[i];
    }
    if (!dir || !*dir) return zarg_usage_error("ckpt verify", "DIR is required");
    if (all) return verify_all(dir);
    zck_reader *r;
    int rc = open_dir("verify", dir, &r);
    if (rc) return rc;
    return verify_open(r) ? 1 : 0;
}

/* Verifies the opened checkpoint r (then closed): "ok: ..." on stdout, or the damage on
 * stderr. 0 when sound. */
static int verify_open(zck_reader *r)
{
    char err[ZCK_ERR];
    zinc_status s = zck_verify(r, 2, err);
    const zck_manifest *m = zck_reader_manifest(r);
    if (s != ZINC_OK) {
        fprintf(stderr, "zinc ckpt verify: %s\n", err);
        zck_close(r);
        return 1;
    }
    long chunks = 0;
    uint64_t bytes = 0;
    for (int k = 0; k < m->nranks; k++) {
        bytes += m->ranks[k].bytes;
        for (int st = 0; st < ZCK_NSTREAMS; st++) chunks += m->ranks[k].streams[st].nchunks;
    }
    printf("ok: %s: tag %s, %" PRId64 " updates applied, %d rank file%s, %ld chunks, %" PRIu64
           " bytes verified\n", zck_reader_dir(r), m->tag, m->step, m->nranks,
           m->nranks == 1 ? "" : "s", chunks, bytes);
    zck_close(r);
    return 0;
}

/* A save directory's tags for --all: what a load takes for a tag (zck_save_dir_entry), the ones
 * that lost their manifest or cannot be read included (damaged), not an unfinished save's T.tmp
 * nor a T.old while its tag T is there. */
typedef struct {
    char name[ZCK_TAG_MAX];
    int64_t step;       /* its manifest's; INT64_MAX when that does not read (sorted last) */
} tag_entry;

static int by_step(const void *a, const void *b)
{
    const tag_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int list_tags(const char *dir, tag_entry **out, int *n)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "zinc ckpt verify: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    tag_entry *t = NULL;
    int cnt = 0, cap = 0;
    struct dirent *de;
    char p[4400], latest[ZCK_TAG_MAX] = "";
    snprintf(p, sizeof p, "%s/%s", dir, ZCK_LATEST);
    if (zck_latest_read(p, latest, sizeof latest) != 0) latest[0] = 0;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        zck_entry kind = zck_save_dir_entry(dir, nm, latest);
        if (kind == ZCK_ENTRY_UNKNOWN)     /* said, not counted: nothing says it is a tag */
            fprintf(stderr, "zinc ckpt verify: %s/%s: cannot read it (%s); not counted (its "
                    "name is not a tag's zinc writes)\n", dir, nm, strerror(errno));
        if (kind != ZCK_ENTRY_TAG && kind != ZCK_ENTRY_LOST && kind != ZCK_ENTRY_UNREADABLE)
            continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 16;
            tag_entry *g = realloc(t, (size_t)cap * sizeof *t);
            if (!g) {
                free(t);
                closedir(d);
                fprintf(stderr, "zinc ckpt verify: out of memory\n");
                return 1;
            }
            t = g;
        }
        snprintf(t[cnt].name, sizeof t[cnt].name, "%s", nm);
        zck_manifest m;
        char err[ZCK_ERR];
        snprintf(p, sizeof p, "%s/%s", dir, nm);
        t[cnt].step = zck_manifest_read(p, &m, err) == ZINC_OK ? m.step : INT64_MAX;
        zck_manifest_free(&m);
        cnt++;
    }
    closedir(d);
    if (cnt > 0) qsort(t, (size_t)cnt, sizeof *t, by_step);   /* (t NULL when none) */
    *out = t;
    *n = cnt;
    return 0;
}

/* --all: every tag of save directory dir verified, in step order. */
static int verify_all(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "zinc ckpt verify: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "zinc ckpt verify: %s: not a directory (--all takes a save directory)\n",
                dir);
        return 2;
    }
    char mp[4400];
    snprintf(mp, sizeof mp, "%s/%s", dir, ZCK_MANIFEST);
    if (access(mp, F_OK) == 0) {
        fprintf(stderr, "zinc ckpt verify: %s is a checkpoint's tag directory: --all takes the "
                "save directory that holds it (or leave --all out)\n", dir);
        return 2;
    }
    tag_entry *t = NULL;
    int n = 0, rc = list_tags(dir, &t, &n);
    if (rc) return rc;
    if (n == 0) {
        free(t);
        /* nothing of zinc's: the resolver says why (DeepSpeed's format, or no checkpoint) */
        zck_reader *r;
        rc = open_dir("verify", dir, &r);
        if (rc) return rc;
        zck_close(r);
        fprintf(stderr, "zinc ckpt verify: %s holds no checkpoint tag\n", dir);
        return 2;
    }
    int damaged = 0;
    for (int i = 0; i < n; i++) {
        char p[4400], err[ZCK_ERR];
        snprintf(p, sizeof p, "%s/%s", dir, t[i].name);
        zck_reader *r;
        if (zck_open(p, &r, err) != ZINC_OK) {
            fprintf(stderr, "zinc ckpt verify: %s\n", err);
            damaged++;
            continue;
        }
        damaged += verify_open(r);
        fflush(stdout);
    }
    if (damaged)
        fprintf(stderr, "zinc ckpt verify: %d of %d tag%s in %s damaged\n", damaged, n,
                n == 1 ? "" : "s", dir);
    else
        printf("all %d tag%s in %s sound\n", n, n == 1 ? "" : "s", dir);
    free(t);
    return damaged ? 1 : 0;
}

/* ---- inspect ---------------------------------------------------------------------------------- */

static int ckpt_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    int json = 0;
    if (zarg_wants_help(argc, argv)) {
        printf("usage: zinc ckpt inspect DIR [--json]\n\n"
               "Prints the tag, step, world size and ZeRO stage at save, the tensors, and raw\n"
               "and stored bytes of each stream. Reads only the manifest (no chunk is checked;\n"
               "use zinc ckpt verify for that).\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' || dir) return zarg_usage_error("ckpt inspect", "unexpected '%s'", argv[i]);
        else dir = argv[i];
    }
    if (!dir || !*dir) return zarg_usage_error("ckpt inspect", "DIR is required");
    zck_reader *r;
    int rc = open_dir("inspect", dir, &r);
    if (rc) return rc;
    const zck_manifest *m = zck_reader_manifest(r);
    uint64_t raw[ZCK_NSTREAMS] = {0}, comp[ZCK_NSTREAMS] = {0}, params = 0;
    long nch[ZCK_NSTREAMS] = {0};
    for (int k = 0; k < m->nranks; k++)
        for (int st = 0; st < ZCK_NSTREAMS; st++) {
            raw[st] += m->ranks[k].streams[st].raw_bytes;
            comp[st] += m->ranks[k].streams[st].comp_bytes;
            nch[st] += m->ranks[k].streams[st].nchunks;
        }
    for (int t = 0; t < m->ntensors; t++) params += m->tensors[t].numel;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "dir", json_object_new_string(zck_reader_dir(r)));
        json_object_object_add(o, "tag", json_object_new_string(m->tag));
        json_object_object_add(o, "format_version", json_object_new_int(m->version));
        json_object_object_add(o, "step", json_object_new_int64(m->step));
        json_object_object_add(o, "world_size", json_object_new_int(m->world_size));
        json_object_object_add(o, "zero_stage", json_object_new_int(m->stage));
        json_object_object_add(o, "dtype", json_object_new_string(zinc_dtype_name(m->dtype)));
        json_object_object_add(o, "config_hash", json_object_new_string(m->config_hash));
        json_object_object_add(o, "parameters", json_object_new_int64((int64_t)params));
        json_object *ss = json_object_new_object();
        for (int st = 0; st < ZCK_NSTREAMS; st++) {
            if (!(m->streams & (1u << st))) continue;
            json_object *so = json_object_new_object();
            json_object_object_add(so, "raw_bytes", json_object_new_int64((int64_t)raw[st]));
            json_object_object_add(so, "stored_bytes", json_object_new_int64((int64_t)comp[st]));
            json_object_object_add(so, "chunks", json_object_new_int64(nch[st]));
            json_object_object_add(ss, zck_stream_name(st), so);
        }
        json_object_object_add(o, "streams", ss);
        json_object *ts = json_object_new_array();
        for (int t = 0; t < m->ntensors; t++) {
            json_object *to = json_object_new_object(), *sh = json_object_new_array();
            json_object_object_add(to, "name", json_object_new_string(m->tensors[t].name));
            for (int d = 0; d < m->tensors[t].ndim; d++)
                json_object_array_add(sh, json_object_new_int64(m->tensors[t].shape[d]));
            json_object_object_add(to, "shape", sh);
            json_object_object_add(to, "dtype", json_object_new_string(zinc_dtype_name(m->tensors[t].dtype)));
            json_object_array_add(ts, to);
        }
        json_object_object_add(o, "tensors", ts);
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
    } else {
        printf("checkpoint   %s\n", zck_reader_dir(r));
        printf("tag          %s (format version %d, written by zinc %s)\n", m->tag, m->version,
               m->zinc_version);
        printf("step         %" PRId64 " (optimizer updates applied; skipped fp16 steps not counted)\n", m->step);
        printf("world size   %d\nzero stage   %d\ndtype        %s\nconfig hash  %s\n",
               m->world_size, m->stage, zinc_dtype_name(m->dtype), m->config_hash);
        printf("codec        zstd level %d, %sshuffled, chunks of %" PRIu64 " bytes\n", m->level,
               m->shuffle ? "byte-" : "not ", m->chunk_bytes);
        printf("client blob  %" PRIu64 " bytes\n", m->has_blob ? m->blob_bytes : 0);
        printf("\n%-10s %16s %16s %7s %8s\n", "stream", "raw bytes", "stored bytes", "ratio", "chunks");
        for (int st = 0; st < ZCK_NSTREAMS; st++) {
            if (!(m->streams & (1u << st))) continue;
            printf("%-10s %16" PRIu64 " %16" PRIu64 " %7.3f %8ld\n", zck_stream_name(st), raw[st],
                   comp[st], raw[st] ? (double)comp[st] / (double)raw[st] : 0.0, nch[st]);
        }
        printf("\n%d tensors, %" PRIu64 " parameters\n", m->ntensors, params);
        for (int t = 0; t < m->ntensors; t++) {
            char shape[256];
            int n = 0;
            for (int d = 0; d < m->tensors[t].ndim && n < 200; d++)
                n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "",
                              m->tensors[t].shape[d]);
            printf("  %-40s [%s] %s\n", m->tensors[t].name, shape, zinc_dtype_name(m->tensors[t].dtype));
        }
    }
    zck_close(r);
    return 0;
}

/* ---- export ----------------------------------------------------------------------------------- */

static int ckpt_export(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    zinc_dtype dt = ZINC_DTYPE_FP32;
    if (zarg_wants_help(argc, argv)) {
        printf("usage: zinc ckpt export DIR --out model.safetensors [--dtype fp32|fp16|bf16]\n\n"
               "Writes the fp32 master weights of a checkpoint as .safetensors (default fp32;\n"
               "fp16/bf16 round to nearest even). Streams tensor by tensor: memory is bounded\n"
               "by the largest tensor. The output bytes depend only on the checkpoint\n"
               "(tensors sorted by name). The file is written to a fresh OUT.XXXXXX and renamed;\n"
               "an OUT inside a checkpoint's tag, over its latest, or named as a save into its\n"
               "save directory would write (latest.tmp, stepN, global_stepN, .tmp/.old) is\n"
               "refused.\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--out")) {
            if (zarg_value("ckpt export", a, v)) return 2;
            out = v;
            i++;
        } else if (!strcmp(a, "--dtype")) {
            if (zarg_value("ckpt export", a, v)) return 2;
            if (zck_dtype_from_name(v, &dt))
                return zarg_usage_error("ckpt export", "--dtype must be fp32, fp16 or bf16, not "
                                        "'%s'", v);
            i++;
        } else if (a[0] == '-' || dir) {
            return zarg_usage_error("ckpt export", "unexpected '%s'", a);
        } else {
            dir = a;
        }
    }
    if (!dir || !out) return zarg_usage_error("ckpt export", "DIR and --out FILE are required");
    char tagdir[4096] = "", err[ZCK_ERR];
    zinc_status s = zck_resolve_path(dir, tagdir, sizeof tagdir, err);
    if (s == ZINC_ERR_IO || s == ZINC_ERR_INVALID_ARG) {
        fprintf(stderr, "zinc ckpt export: %s\n", err);
        return 2;
    }
    /* not among (or over) a tag's files, the one read or another, nor any save directory's
     * latest (resolved: a DIR that is a symlink to a tag still finds its save directory's) */
    int rc = s == ZINC_OK ? zarg_output_file_ok("ckpt export", "--out", out) : 0;
    if (rc) return rc;
    if (s == ZINC_OK) s = zck_export_safetensors(tagdir, out, dt, 2, err);
    if (s != ZINC_OK) {
        fprintf(stderr, "zinc ckpt export: %s\n", err);
        return 1;
    }
    printf("wrote %s (%s) from %s\n", out, zinc_dtype_name(dt), tagdir);
    return 0;
}

/* ---- bench ------------------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench_normal(uint64_t *s)
{
    double u1 = zrng_unit(s);
    double u2 = (double)(zrng_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Weights ~ N(0, 0.02) and `steps` AdamW steps (PyTorch's formulas, lr 1e-4, betas 0.9/0.999,
 * eps 1e-8, weight decay 0.01) on gradients = a per-element signal plus noise, so that master, m
 * and v have the value distributions of a model some steps into training. */
static void bench_state(size_t n, int steps, float *w, float *m, float *v)
{
    uint64_t s = 12345;
    float *sig = malloc(n * sizeof *sig);
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)(0.02 * bench_normal(&s));
        m[i] = v[i] = 0;
        sig[i] = (float)(1e-3 * bench_normal(&s));
    }
    const float lr = 1e-4f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    for (int t = 1; t <= steps; t++) {
        float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
        for (size_t i = 0; i < n; i++) {
            float g = sig[i] + (float)(2e-3 * bench_normal(&s));
            w[i] *= 1.0f - lr * wd;
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            w[i] -= (lr / bc1) * m[i] / (sqrtf(v[i]) / sqrtf(bc2) + eps);
        }
    }
    free(sig);
}

/* Compression alone (no file I/O): T threads encode the chunks of the three streams. */
typedef struct {
    float **st;
    size_t n, cb, next;
    int level;
    pthread_mutex_t mu;
} zcomp_job;

static void *bench_comp_worker(void *arg)
{
    zcomp_job *j = arg;
    zck_codec_ctx *cc = zck_codec_ctx_create(j->cb);
    uint8_t *out = malloc(zck_encode_bound(j->cb));
    char err[ZCK_ERR];
    size_t per = (j->n * 4 + j->cb - 1) / j->cb;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t k = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k >= 3 * per || !cc || !out) break;
        size_t off = (k % per) * j->cb, len = j->n * 4 - off < j->cb ? j->n * 4 - off : j->cb;
        size_t ol;
        uint64_t rh, ch;
        zck_encode(cc, (uint8_t *)j->st[k / per] + off, len, 4, 1, j->level, out, &ol, &rh, &ch, err);
    }
    zck_codec_ctx_free(cc);
    free(out);
    return NULL;
}

static double bench_compress(float **st, size_t n, int threads, int level)
{
    zcomp_job j = {st, n, (size_t)4 << 20, 0, level, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[64];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, bench_comp_worker, &j);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    return now_s() - t0;
}

static int ckpt_bench(int argc, char **argv)
{
    long long mib = 64, threads = 2, level = 3, steps = 20;
    const char *given[4] = {NULL}; /* as written, for the range error (the defaults are in range) */
    const char *dir = NULL;
    int json = 0;
    if (zarg_wants_help(argc, argv)) {
        printf("usage: zinc ckpt bench [--mib N] [--threads T] [--level L] [--steps S]\n"
               "                       [--dir D] [--json]\n\n"
               "Builds realistic optimizer state (N MiB per stream, default 64: weights ~\n"
               "N(0, 0.02) after S AdamW steps on noisy gradients, default 20), then measures\n"
               "one rank's save (compress + write + fsync + commit) and load (read + verify +\n"
               "decompress) in GB/s of raw state, with T compression threads (default 2), and\n"
               "stored bytes per stream vs raw vs plain zstd at the same level (default 3)\n"
               "without the shuffle. D: where to write (default $TMPDIR or /tmp).\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *dst = NULL;
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--dir")) {
            if (zarg_value("ckpt bench", a, v)) return 2;
            dir = v;
            i++;
            continue;
        }
        if (!strcmp(a, "--mib")) dst = &mib;
        else if (!strcmp(a, "--threads")) dst = &threads;
        else if (!strcmp(a, "--level")) dst = &level;
        else if (!strcmp(a, "--steps")) dst = &steps;
        else return zarg_usage_error("ckpt bench", "unknown argument '%s'", a);
        if (zarg_value("ckpt bench", a, v)) return 2;
        int bad = zarg_int64(v, dst);
        given[dst == &mib ? 0 : dst == &threads ? 1 : dst == &level ? 2 : 3] = v;
        if (bad == -2) /* a whole number past any count: the range check below names the range */
            *dst = v[0] == '-' ? LLONG_MIN : LLONG_MAX;
        else if (bad)
            return zarg_usage_error("ckpt bench", "%s needs a number, not '%s'", a, v);
        i++;
    }
    /* --steps bounded where it is an int loop count (and a checkpoint's step, < 2^53) */
    const struct { const char *opt; long long v, lo, hi; } rng[4] = {
        {"--mib", mib, 1, 65536}, {"--threads", threads, 1, 64}, {"--level", level, -5, 19},
        {"--steps", steps, 1, 1000000}};
    for (int k = 0; k < 4; k++)
        if (rng[k].v < rng[k].lo || rng[k].v > rng[k].hi)
            return zarg_usage_error("ckpt bench", "%s: expected %lld..%lld, got %s (out of range)",
                                    rng[k].opt, rng[k].lo, rng[k].hi, given[k]);
    /* the directory must be one to write in: a usage error before the work (exit 1 after) */
    if (dir && zarg_writable_dir("ckpt bench", "--dir", dir)) return 2;
    size_t n = (size_t)mib << 18;   /* floats */
    float *st[3];
    for (int k = 0; k < 3; k++) st[k] = malloc(n * sizeof(float));
    if (!st[0] || !st[1] || !st[2]) { fprintf(stderr, "zinc ckpt bench: out of memory\n"); return 1; }
    bench_state(n, (int)steps, st[0], st[1], st[2]);

    char root[4096];
    snprintf(root, sizeof root, "%s/zinc-ckpt-bench-%d", dir ? dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    /* one tensor of n elements per stream, saved by a world of one */
    zck_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "w");
    t.ndim = 1;
    t.shape[0] = (int64_t)n;
    t.numel = n;
    t.dtype = ZINC_DTYPE_FP32;
    zck_piece p = {0, 0, n, {st[0], st[1], st[2], NULL}};
    zck_save_desc d;
    memset(&d, 0, sizeof d);
    d.dir = root;
    d.tag = "bench";
    d.world_size = 1;
    d.step = steps;
    d.ntensors = 1;
    d.tensors = &t;
    d.npieces = 1;
    d.pieces = &p;
    d.streams = 0x7;
    d.dtype = ZINC_DTYPE_FP32;
    d.level = (int)level;
    d.chunk_bytes = (size_t)4 << 20;
    d.threads = (int)threads;
    d.shuffle = 1;
    d.timeout_s = 60;
    char err[ZCK_ERR];
    double raw_bytes = 3.0 * (double)n * 4;
    double t0 = now_s();
    zinc_status s = zck_save(NULL, &d, err);
    double t_save = now_s() - t0;
    if (s != ZINC_OK) { fprintf(stderr, "zinc ckpt bench: %s\n", err); return 1; }
    char tagdir[4200];
    snprintf(tagdir, sizeof tagdir, "%s/bench", root);
    zck_reader *r;
    if (zck_open(tagdir, &r, err) != ZINC_OK) { fprintf(stderr, "zinc ckpt bench: %s\n", err); return 1; }
    const zck_manifest *m = zck_reader_manifest(r);
    float *back = malloc(n * sizeof(float));
    double t_load = 0;
    int same = 1;
    for (int k = 0; k < 3 && back; k++) {
        zck_target tg = {0, 0, n, back};
        t0 = now_s();
        s = zck_read(r, k, &tg, 1, (int)threads, err);
        t_load += now_s() - t0;
        if (s != ZINC_OK) { fprintf(stderr, "zinc ckpt bench: %s\n", err); return 1; }
        same &= memcmp(back, st[k], n * sizeof(float)) == 0;
    }
    /* plain zstd at the same level over the same 4 MiB chunks, no shuffle */
    uint64_t plain[3] = {0};
    size_t cb = (size_t)4 << 20;
    void *buf = malloc(ZSTD_compressBound(cb));
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    for (int k = 0; k < 3; k++)
        for (size_t off = 0; off < n * 4; off += cb) {
            size_t len = n * 4 - off < cb ? n * 4 - off : cb;
            plain[k] += ZSTD_compressCCtx(cc, buf, ZSTD_compressBound(cb), (char *)st[k] + off, len,
                                          (int)level);
        }
    /* zstd's own worker threads on one chunk at a time, instead of chunks in parallel */
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, (int)level);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_nbWorkers, (int)threads);
    uint8_t *sh = malloc(cb);
    t0 = now_s();
    for (size_t off = 0; off < n * 4; off += cb) {
        size_t len = n * 4 - off < cb ? n * 4 - off : cb;
        zck_shuffle(sh, (uint8_t *)st[0] + off, len / 4, 4);
        ZSTD_compress2(cc, buf, ZSTD_compressBound(cb), sh, len);
    }
    double t_zmt = now_s() - t0;
    ZSTD_freeCCtx(cc);
    free(buf);
    free(sh);
    double t_comp = bench_compress(st, n, (int)threads, (int)level);
    double gbs_comp = raw_bytes / t_comp / 1e9;
    uint64_t stored = 0;
    for (int k = 0; k < 3; k++) stored += m->ranks[0].streams[k].comp_bytes;
    double gbs_save = raw_bytes / t_save / 1e9, gbs_load = raw_bytes / t_load / 1e9;
    if (json) {
        printf("{\"mib_per_stream\":%lld,\"threads\":%lld,\"level\":%lld,\"adam_steps\":%lld,"
               "\"compress_gbs\":%.3f,\"compress_gbs_per_thread\":%.3f,\"save_gbs\":%.3f,\"load_gbs\":%.3f,"
               "\"zstd_workers_master_gbs\":%.3f,\"roundtrip_exact\":%s,\"streams\":{",
               mib, threads, level, steps, gbs_comp, gbs_comp / (double)threads, gbs_save, gbs_load,
               (double)n * 4 / t_zmt / 1e9, same ? "true" : "false");
        for (int k = 0; k < 3; k++)
            printf("%s\"%s\":{\"raw\":%zu,\"stored\":%" PRIu64 ",\"plain_zstd\":%" PRIu64 "}",
                   k ? "," : "", zck_stream_name(k), n * 4, m->ranks[0].streams[k].comp_bytes, plain[k]);
        printf("}}\n");
    } else {
        printf("state: %lld MiB per stream (master, adam_m, adam_v) after %lld AdamW steps; zstd "
               "level %lld; %lld threads; %s\n", mib, steps, level, threads, root);
        printf("compress only  %.3f s  %.2f GB/s  (%.2f GB/s per thread)\n", t_comp, gbs_comp,
               gbs_comp / (double)threads);
        printf("save           %.3f s  %.2f GB/s  (compress + write + fsync + commit)\n", t_save,
               gbs_save);
        printf("load           %.3f s  %.2f GB/s  (read + verify + decompress, %s)\n", t_load, gbs_load,
               same ? "bit-exact" : "DIFFERENT");
        printf("zstd's own %lld workers, one shuffled chunk at a time: %.2f GB/s (master only)\n",
               threads, (double)n * 4 / t_zmt / 1e9);
        printf("\n%-8s %14s %14s %7s %14s %7s\n", "stream", "raw", "stored", "ratio", "plain zstd",
               "ratio");
        for (int k = 0; k < 3; k++) {
            uint64_t c = m->ranks[0].streams[k].comp_bytes;
            printf("%-8s %14zu %14" PRIu64 " %7.3f %14" PRIu64 " %7.3f\n", zck_stream_name(k), n * 4, c,
                   (double)c / (double)(n * 4), plain[k], (double)plain[k] / (double)(n * 4));
        }
        printf("all      %14.0f %14" PRIu64 " %7.3f\n", raw_bytes, stored, (double)stored / raw_bytes);
    }
    zck_close(r);
    char p2[4400];
    snprintf(p2, sizeof p2, "%s/latest", root);
    unlink(p2);
    zck_rmdir_flat(tagdir);
    rmdir(root);
    for (int k = 0; k < 3; k++) free(st[k]);
    free(back);
    return same ? 0 : 1;
}

int cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "verify")) return ckpt_verify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "inspect")) return ckpt_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return ckpt_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return ckpt_bench(argc - 1, argv + 1);
    return zarg_usage_error("ckpt", "unknown subcommand '%s'", argv[1]);
}
