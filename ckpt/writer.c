/*
 * writer.c — writes one rank's shard file and commits a tag (docs/checkpoint-format.md).
 *
 * A rank's file is its streams one after another, each a run of independent chunks. Chunks are
 * compressed by a few worker threads into a ring of slots and written in order by the calling
 * thread, so compression overlaps the write and the file is the same whatever the thread count.
 *
 * Commit protocol (crash-safe at every point):
 *   rank 0 recreates <dir>/<tag>.tmp/; barrier
 *   every rank writes rank-N.zck, fsyncs it, then rank-N.json (its chunk table) atomically
 *   rank 0 waits for every rank-N.json, writes client.bin and manifest.json (fsync), deletes the
 *   rank-N.json files, renames <tag>.tmp to <tag> (over an existing tag: exchanges the two,
 *   or moves the old one to <tag>.old first where the file system cannot exchange), fsyncs
 *   <dir>, atomically replaces <dir>/latest (unless leave_latest: DeepSpeed's save_latest=False)
 * A crash before the rename leaves only a .tmp directory, which readers never take for a tag
 * (a later save removes it: this tag's at once, another tag's once it is 15 minutes old);
 * `latest` only ever names a renamed, complete tag (or, after a crash between the two renames
 * of the fallback, a tag whose previous contents are whole in <tag>.old, which a load takes).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "base/log.h"
#include "base/utf8.h"

void (*zck_test_hook)(const char *phase);
int zck_test_no_exchange;
int (*zck_test_fail)(const char *phase, int rank);

static void hook(const char *phase)
{
    if (zck_test_hook) zck_test_hook(phase);
}

static size_t esize_of(int s, zinc_dtype dt) { return s == ZCK_WEIGHTS16 ? zinc_dtype_size(dt) : 4; }

static size_t chunk_size(const zck_save_desc *d)
{
    size_t cb = d->chunk_bytes ? d->chunk_bytes : ((size_t)4 << 20);
    cb &= ~(size_t)3;
    return cb < 4096 ? 4096 : cb;
}

static zinc_status check_tag(const zck_save_desc *d, char *err)
{
    const char *t = d->tag;
    size_t n = t ? strlen(t) : 0;
    if (!d->dir || !*d->dir)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "ckpt save: no directory given");
    /* `latest` holds the tag as one line, read back without its trailing whitespace: a control
     * character (a newline made every later save refuse that latest) or a space at either end
     * would not come back as written */
    int plain = n > 0 && t[0] != ' ' && t[n - 1] != ' ';
    for (size_t i = 0; i < n && plain; i++) plain = (unsigned char)t[i] >= 0x20 && t[i] != 0x7f;
    /* and the manifest holds it as written, where the strict reader refuses invalid UTF-8: such
     * a tag saved "OK", then every load skipped it as damaged and went back to an older one */
    plain = plain && zutf8_valid(t, n);
    if (!n || n > ZCK_TAG_MAX - 16 || strchr(t, '/') || t[0] == '.' || !strcmp(t, ZCK_LATEST) ||
        (n > 4 && !strcmp(t + n - 4, ".tmp")) || (n > 4 && !strcmp(t + n - 4, ".old")) || !plain)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG,
                        "ckpt save: tag \"%s\" is not usable as a directory name (no '/', not "
                        "\"latest\", no leading '.', no .tmp/.old suffix, no control characters "
                        "or spaces at either end, valid UTF-8, at most %d bytes)",
                        t ? t : "", ZCK_TAG_MAX - 16);
    return ZINC_OK;
}

/* A regular file of one name is a checkpoint's `latest` when it is empty or one line naming a
 * tag; with `dir` set (for latest.tmp, a save's leftover: written just after its tag's rename)
 * that tag must also be there, so a user's one-word file is not taken for one. */
static int is_latest_file(const char *path, const char *dir)
{
    char tag[ZCK_TAG_MAX], tp[4400];
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1 ||
        st.st_size > ZCK_TAG_MAX + 2)
        return 0;
    if (st.st_size == 0) return 1;
    if (zck_latest_read(path, tag, sizeof tag) != 0) return 0;
    snprintf(tp, sizeof tp, "%s/%s/%s", dir ? dir : "", tag, ZCK_MANIFEST);
    return !dir || access(tp, F_OK) == 0;
}

int zck_latest_check(const char *dir, char *why, size_t n)
{
    char p[4400];
    struct stat st;
    static const char *const names[2] = {ZCK_LATEST, ZCK_LATEST ".tmp"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        /* `latest` may be a symlink: the rename replaces the link, not what it names */
        if (lstat(p, &st) != 0 || (i == 0 && S_ISLNK(st.st_mode)) ||
            is_latest_file(p, i ? dir : NULL))
            continue;
        snprintf(why, n, "%s exists and is not %s; a save would replace it: move it away or "
                 "save into another directory", p,
                 i ? "a leftover of a save (empty, or naming a tag that is there)"
                   : "a checkpoint's latest (empty or one line naming a tag)");
        return -1;
    }
    return 0;
}

int zck_save_target_check(const char *dir, const char *tag, char *why, size_t n)
{
    char p[4400], mp[4500], own[512];
    struct stat st;
    if (zck_latest_check(dir, why, n) != 0) return -1;
    static const char *const sfx[3] = {"", ".tmp", ".old"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s%s", dir, tag, sfx[i]);
        if (lstat(p, &st) != 0) continue;
        snprintf(mp, sizeof mp, "%s/%s", p, ZCK_MANIFEST);
        int has_manifest = access(mp, F_OK) == 0;
        /* the tag is a committed one; a .tmp or .old may have lost (or not yet have) its manifest */
        if (zck_dir_owned(p, own, sizeof own) != 0)
            ;
        else if (has_manifest && !zck_manifest_is_zinc(mp))
            snprintf(own, sizeof own, "its %s is not a zinc checkpoint's", ZCK_MANIFEST);
        else if (i == 0 && !has_manifest)
            snprintf(own, sizeof own, "it holds no %s (not a checkpoint tag)", ZCK_MANIFEST);
        else
            continue;
        snprintf(why, n, "%s is in the way of tag %s: %s; zinc deletes only its own files: move "
                 "it away or save into another directory", p, tag, own);
        return -1;
    }
    return 0;
}

/* Whether a message already names the tag: as "tag T" or as a path ".../T", ".../T/...",
 * ".../T.tmp" (a tag "a" is not named by "latest"). */
static int names_tag(const char *msg, const char *tag)
{
    size_t n = strlen(tag);
    for (const char *q = msg; (q = strstr(q, tag)); q++) {
        int before = q > msg && (q[-1] == '/' || (q - msg >= 4 && !strncmp(q - 4, "tag ", 4)));
        char after = q[n];
        if (before && (!after || strchr("/.: ,;)", after))) return 1;
    }
    return 0;
}

static void tmpdir_of(const zck_save_desc *d, char *p, size_t n)
{
    snprintf(p, n, "%s/%s.tmp", d->dir, d->tag);
}

/* Rank 0's status and message, sent to every rank (no-op in a world of one). */
typedef struct { int32_t status; char msg[ZCK_ERR]; } zck_verdict;

static zinc_status agree(zcomm_t *c, zinc_status s, char *err)
{
    if (!c || c->size <= 1) return s;
    zck_verdict v;
    memset(&v, 0, sizeof v);
    if (c->rank == 0) {
        v.status = (int32_t)s;
        if (s != ZINC_OK) snprintf(v.msg, sizeof v.msg, "%s", err);
    }
    zinc_status cs = zcomm_host_broadcast(c, &v, sizeof v, 0);
    if (cs != ZINC_OK)
        return zerr_fmt(err, ZCK_ERR, cs, "ckpt: collective with rank 0 failed: %s", c->err);
    if (v.status != ZINC_OK && c->rank != 0)
        snprintf(err, ZCK_ERR, "%.980s (reported by rank 0)", v.msg);
    return (zinc_status)v.status;
}

zinc_status zck_first_failure(zcomm_t *c, int failed, const char *mine, int *root, char *out,
                              size_t n)
{
    out[0] = 0;
    *root = -1;
    if (!c || c->size <= 1) {
        if (failed) {
            *root = 0;
            snprintf(out, n, "%s", mine);
        }
        return ZINC_OK;
    }
    double *who = calloc((size_t)c->size, sizeof *who);
    if (!who) return ZINC_ERR_NOMEM;
    who[c->rank] = failed ? 1.0 : 0.0;
    zinc_status s = zcomm_host_all_reduce_f64(c, who, (size_t)c->size);
    int r0 = -1;
    for (int r = 0; s == ZINC_OK && r < c->size && r0 < 0; r++)
        if (who[r] > 0.5) r0 = r;
    free(who);
    if (s != ZINC_OK || r0 < 0) return s;
    char msg[ZCK_ERR];
    snprintf(msg, sizeof msg, "%s", r0 == c->rank ? mine : "");
    if ((s = zcomm_host_broadcast(c, msg, sizeof msg, r0)) != ZINC_OK) return s;
    msg[sizeof msg - 1] = 0;
    snprintf(out, n, "%s", msg);
    *root = r0;
    return ZINC_OK;
}

/* Rank 0, after a failed save: the .tmp of the tag goes (zck_rmdir_flat retries while a
 * straggling rank still adds files to it). */
static void remove_tmp(const zck_save_desc *d)
{
    char tmp[4096];
    tmpdir_of(d, tmp, sizeof tmp);
    if (zck_rmdir_flat(tmp) != 0)
        zlog(ZLOG_WARN, "ckpt", d->rank, "cannot remove %s after the failed save: %s", tmp,
             strerror(errno));
}

static zinc_status mkdir_p(const char *path, char *err)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create directory %s: %s", p,
                            strerror(errno));
        *q = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create directory %s: %s", p,
                        strerror(errno));
    return ZINC_OK;
}

zinc_status zck_save_prepare(zcomm_t *c, const zck_save_desc *d, char *err)
{
    zinc_status s = check_tag(d, err);
    if (s == ZINC_OK && d->rank == 0) {
        char tmp[4096];
        tmpdir_of(d, tmp, sizeof tmp);
        s = mkdir_p(d->dir, err);
        char why[ZCK_ERR - 64];
        if (s == ZINC_OK && zck_save_target_check(d->dir, d->tag, why, sizeof why) != 0)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "ckpt save: %s", why);
        /* A .tmp left by a crashed save is garbage by construction: never a committed tag. */
        if (s == ZINC_OK && zck_rmdir_flat(tmp) != 0 && errno != ENOENT)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot remove the stale %s: %s", tmp,
                         strerror(errno));
        if (s == ZINC_OK && mkdir(tmp, 0755) != 0)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        /* other tags' leftovers (a save killed before its rename): a run that saves
         * global_step<N> tags would keep one per crash, each a whole checkpoint's bytes */
        if (s == ZINC_OK) zck_sweep_stale_tmps(d->dir, d->tag, d->timeout_s, d->rank);
    }
    zinc_status a = agree(c, s, err);
    /* Rank 0 made the .tmp but the save goes no further (the collective failed): remove it. */
    if (a != ZINC_OK && s == ZINC_OK && d->rank == 0) remove_tmp(d);
    return a;
}

/* ---- the compression pipeline ----------------------------------------------------------------- */

typedef struct {
    int stream;
    uint64_t raw_off, raw_len;
} zjob;

typedef struct {
    const zck_save_desc *d;
    size_t cb;                       /* chunk bytes */
    uint64_t *seg_off[ZCK_NSTREAMS]; /* [npieces + 1] byte prefix sums of each stream */
    zjob *jobs;
    size_t njobs;
    int nslots;
    uint8_t **slot;                  /* [nslots][bound(cb)] */
    size_t *slot_len;
    uint64_t *slot_raw_h, *slot_comp_h;
    int *slot_done;
    size_t next_job, written;
    int failed;
    zinc_status fail_s;
    char fail_msg[ZCK_ERR];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} zpipe;

/* Copies raw bytes [off, off+len) of stream s (its pieces back to back) into dst, or returns a
 * direct pointer when the range lies inside one piece. */
static const uint8_t *gather(zpipe *p, int s, uint64_t off, uint64_t len, uint8_t *dst)
{
    const uint64_t *so = p->seg_off[s];
    int n = p->d->npieces;
    int lo = 0, hi = n - 1;
    while (lo < hi) {   /* last piece starting at or before off */
        int mid = (lo + hi + 1) / 2;
        if (so[mid] <= off) lo = mid;
        else hi = mid - 1;
    }
    int i = lo;
    if (off + len <= so[i + 1]) return (const uint8_t *)p->d->pieces[i].data[s] + (off - so[i]);
    uint64_t done = 0;
    while (done < len) {
        uint64_t in = off + done - so[i];
        uint64_t take = so[i + 1] - (off + done);
        if (take > len - done) take = len - done;
        memcpy(dst + done, (const uint8_t *)p->d->pieces[i].data[s] + in, take);
        done += take;
        i++;
    }
    return dst;
}

static void pipe_fail(zpipe *p, zinc_status s, const char *msg)
{
    pthread_mutex_lock(&p->mu);
    if (!p->failed) {
        p->failed = 1;
        p->fail_s = s;
        snprintf(p->fail_msg, sizeof p->fail_msg, "%s", msg);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *worker(void *arg)
{
    zpipe *p = arg;
    zck_codec_ctx *cc = zck_codec_ctx_create(p->cb);
    uint8_t *buf = malloc(p->cb);
    char err[ZCK_ERR];
    if (!cc || !buf) {
        pipe_fail(p, ZINC_ERR_NOMEM, "ckpt save: out of memory for compression buffers");
        goto out;
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        /* slot j % nslots is free once job j - nslots has been written */
        while (!p->failed && p->next_job < p->njobs &&
               p->next_job >= p->written + (size_t)p->nslots)
            pthread_cond_wait(&p->cv, &p->mu);
        size_t j = p->next_job;
        if (p->failed || j >= p->njobs) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->next_job++;
        pthread_mutex_unlock(&p->mu);
        const zjob *jb = &p->jobs[j];
        int sl = (int)(j % (size_t)p->nslots);
        const uint8_t *src = gather(p, jb->stream, jb->raw_off, jb->raw_len, buf);
        size_t out_len;
        uint64_t rh, ch;
        zinc_status s = zck_encode(cc, src, jb->raw_len, esize_of(jb->stream, p->d->dtype),
                                   p->d->shuffle, p->d->level, p->slot[sl], &out_len, &rh, &ch, err);
        if (s != ZINC_OK) {
            pipe_fail(p, s, err);
            break;
        }
        pthread_mutex_lock(&p->mu);
        p->slot_len[sl] = out_len;
        p->slot_raw_h[sl] = rh;
        p->slot_comp_h[sl] = ch;
        p->slot_done[sl] = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
out:
    zck_codec_ctx_free(cc);
    free(buf);
    return NULL;
}

static zinc_status write_all(int fd, const void *b, size_t n, const char *path, char *err)
{
    const char *q = b;
    while (n) {
        ssize_t w = write(fd, q, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0)
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot write %s: %s (disk full?)", path,
                            strerror(errno));
        q += w;
        n -= (size_t)w;
    }
    return ZINC_OK;
}

static zinc_status write_rank_file(const zck_save_desc *d, const char *path, zck_rankfile *rf,
                                   char *err)
{
    zinc_status s = ZINC_OK;
    zpipe p;
    memset(&p, 0, sizeof p);
    p.d = d;
    p.cb = chunk_size(d);
    int nthreads = d->threads > 0 ? d->threads : 2;
    if (nthreads > 64) nthreads = 64;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t th[64];
    int started = 0, fd = -1;

    /* jobs: every chunk of every stream, in file order */
    uint64_t elems = 0;
    for (int i = 0; i < d->npieces; i++) elems += d->pieces[i].hi - d->pieces[i].lo;
    size_t cap = 0;
    for (int st = 0; st < ZCK_NSTREAMS; st++) {
        if (!(d->streams & (1u << st))) continue;
        p.seg_off[st] = malloc(((size_t)d->npieces + 1) * sizeof(uint64_t));
        if (!p.seg_off[st]) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory"); goto done; }
        size_t es = esize_of(st, d->dtype);
        p.seg_off[st][0] = 0;
        for (int i = 0; i < d->npieces; i++) {
            if (!d->pieces[i].data[st]) {
                s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG,
                             "ckpt save: piece %d has no data for stream %s", i, zck_stream_name(st));
                goto done;
            }
            p.seg_off[st][i + 1] = p.seg_off[st][i] + (d->pieces[i].hi - d->pieces[i].lo) * es;
        }
        cap += (size_t)((elems * es + p.cb - 1) / p.cb);
    }
    p.jobs = calloc(cap ? cap : 1, sizeof *p.jobs);
    if (!p.jobs) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory"); goto done; }
    for (int st = 0; st < ZCK_NSTREAMS; st++) {
        if (!(d->streams & (1u << st))) continue;
        uint64_t total = elems * esize_of(st, d->dtype);
        zck_stream_info *si = &rf->streams[st];
        si->present = 1;
        si->dtype = st == ZCK_WEIGHTS16 ? d->dtype : ZINC_DTYPE_FP32;
        si->raw_bytes = total;
        si->nchunks = (int)((total + p.cb - 1) / p.cb);
        si->chunks = calloc((size_t)si->nchunks + 1, sizeof *si->chunks);
        if (!si->chunks) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory"); goto done; }
        for (uint64_t off = 0; off < total; off += p.cb)
            p.jobs[p.njobs++] = (zjob){st, off, total - off < p.cb ? total - off : p.cb};
    }
    p.nslots = 2 * nthreads;
    p.slot = calloc((size_t)p.nslots, sizeof *p.slot);
    p.slot_len = calloc((size_t)p.nslots, sizeof *p.slot_len);
    p.slot_raw_h = calloc((size_t)p.nslots, sizeof *p.slot_raw_h);
    p.slot_comp_h = calloc((size_t)p.nslots, sizeof *p.slot_comp_h);
    p.slot_done = calloc((size_t)p.nslots, sizeof *p.slot_done);
    if (!p.slot || !p.slot_len || !p.slot_raw_h || !p.slot_comp_h || !p.slot_done) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory");
        goto done;
    }
    for (int i = 0; i < p.nslots; i++)
        if (!(p.slot[i] = malloc(zck_encode_bound(p.cb)))) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory for %d slots of %zu bytes",
                         p.nslots, zck_encode_bound(p.cb));
            goto done;
        }

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create %s: %s", path, strerror(errno)); goto done; }
    uint8_t hdr[ZCK_FILE_HEADER];
    memcpy(hdr, ZCK_FILE_MAGIC, 8);
    uint32_t ver = ZCK_FORMAT_VERSION, rk = (uint32_t)d->rank;
    for (int b = 0; b < 4; b++) {
        hdr[8 + b] = (uint8_t)(ver >> (8 * b));
        hdr[12 + b] = (uint8_t)(rk >> (8 * b));
    }
    s = write_all(fd, hdr, sizeof hdr, path, err);
    if (s != ZINC_OK) goto done;
    uint64_t foff = ZCK_FILE_HEADER;

    for (; started < nthreads && (size_t)started < p.njobs; started++)
        if (pthread_create(&th[started], NULL, worker, &p) != 0) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: cannot start a compression thread");
            pipe_fail(&p, s, err);
            break;
        }
    int cur = -1, k = 0;
    for (size_t j = 0; j < p.njobs && s == ZINC_OK; j++) {
        int sl = (int)(j % (size_t)p.nslots);
        pthread_mutex_lock(&p.mu);
        while (!p.failed && !p.slot_done[sl]) pthread_cond_wait(&p.cv, &p.mu);
        pthread_mutex_unlock(&p.mu);
        if (p.failed) break;
        const zjob *jb = &p.jobs[j];
        if (jb->stream != cur) {
            cur = jb->stream;
            k = 0;
            rf->streams[cur].file_off = foff;
        }
        zck_chunk *c = &rf->streams[cur].chunks[k++];
        *c = (zck_chunk){jb->raw_off, jb->raw_len, foff, p.slot_len[sl], p.slot_raw_h[sl],
                         p.slot_comp_h[sl]};
        s = write_all(fd, p.slot[sl], p.slot_len[sl], path, err);
        if (s != ZINC_OK) { pipe_fail(&p, s, err); break; }
        foff += p.slot_len[sl];
        rf->streams[cur].comp_bytes += p.slot_len[sl];
        hook("chunk");
        pthread_mutex_lock(&p.mu);
        p.slot_done[sl] = 0;
        p.written++;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (s == ZINC_OK && p.failed) {
        s = p.fail_s;
        snprintf(err, ZCK_ERR, "%s", p.fail_msg);
    }
    if (s != ZINC_OK) goto done;
    /* Streams with no elements (a rank whose slices hold only padding) start where they are. */
    for (int st = 0; st < ZCK_NSTREAMS; st++)
        if (rf->streams[st].present && rf->streams[st].nchunks == 0) rf->streams[st].file_off = foff;
    hook("fsync");
    if (fsync(fd) != 0) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot fsync %s: %s", path, strerror(errno)); goto done; }
    rf->bytes = foff;
done:
    if (fd >= 0) close(fd);
    for (int st = 0; st < ZCK_NSTREAMS; st++) free(p.seg_off[st]);
    free(p.jobs);
    if (p.slot)
        for (int i = 0; i < p.nslots; i++) free(p.slot[i]);
    free(p.slot);
    free(p.slot_len);
    free(p.slot_raw_h);
    free(p.slot_comp_h);
    free(p.slot_done);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    return s;
}

zinc_status zck_save_write(const zck_save_desc *d, char *err)
{
    char tmp[4096], path[4200];
    tmpdir_of(d, tmp, sizeof tmp);
    zck_rankfile rf;
    memset(&rf, 0, sizeof rf);
    rf.rank = d->rank;
    snprintf(rf.file, sizeof rf.file, "rank-%05d.zck", d->rank);
    rf.npieces = d->npieces;
    rf.pieces = calloc((size_t)d->npieces + 1, sizeof *rf.pieces);
    zinc_status s = ZINC_OK;
    if (!rf.pieces) s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory");
    uint64_t eo = 0;
    for (int i = 0; s == ZINC_OK && i < d->npieces; i++) {
        const zck_piece *p = &d->pieces[i];
        if (p->tensor < 0 || p->tensor >= d->ntensors || p->lo >= p->hi ||
            p->hi > d->tensors[p->tensor].numel)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG,
                         "ckpt save: piece %d (tensor %d, [%" PRIu64 ", %" PRIu64 ")) is outside "
                         "the tensor table", i, p->tensor, p->lo, p->hi);
        else rf.pieces[i] = (zck_piece_rec){p->tensor, p->lo, p->hi, eo};
        eo += p->hi - p->lo;
    }
    snprintf(path, sizeof path, "%s/%s", tmp, rf.file);
    if (s == ZINC_OK) s = write_rank_file(d, path, &rf, err);
    if (s == ZINC_OK) {
        hook("rankjson");
        char *js = zck_rankfile_to_json(&rf);
        snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, d->rank);
        s = js ? zck_write_file_atomic(path, js, strlen(js), err)
               : zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory");
        free(js);
    }
    if (s == ZINC_OK && zck_test_fail && zck_test_fail("rankjson-written", d->rank))
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "ckpt save: rank %d: injected failure after its "
                     "rank-%05d.json (test)", d->rank, d->rank);
    if (s != ZINC_OK) {
        /* Tell rank 0 why, so its commit fails now with this message rather than at a timeout. */
        char fpath[4200], msg[ZCK_ERR + 64];
        snprintf(fpath, sizeof fpath, "%s/rank-%05d.failed", tmp, d->rank);
        int n = snprintf(msg, sizeof msg, "%d %s", (int)s, err);
        int fd = zck_test_fail && zck_test_fail("failure-note", d->rank)   /* (a full disk) */
                     ? -1
                     : open(fpath, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, msg, (size_t)n) < 0) { /* best effort */ }
            close(fd);
        }
    }
    zck_rankfile_free(&rf);
    return s;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank r's note of a failed write in tmp (its status and message, as write_rank_file's failure
 * leaves it): 1 and the error in err when there is one. */
static int failure_note(const zck_save_desc *d, const char *tmp, int r, char *err, zinc_status *s)
{
    char path[4200], e2[ZCK_ERR], *txt;
    size_t len;
    snprintf(path, sizeof path, "%s/rank-%05d.failed", tmp, r);
    if (access(path, F_OK) != 0 || zck_read_file(path, &txt, &len, e2) != ZINC_OK) return 0;
    int code = atoi(txt);
    const char *sp = strchr(txt, ' ');
    *s = zerr_fmt(err, ZCK_ERR, code > 0 ? (zinc_status)code : ZINC_ERR_IO,
                  "ckpt save of %s failed on rank %d: %s", d->tag, r, sp ? sp + 1 : txt);
    free(txt);
    return 1;
}

zinc_status zck_save_commit(const zck_save_desc *d, char *err)
{
    char tmp[4096], path[4200], final[4200];
    int committed = 0;    /* the tag is whole under its name (a later failure says so) */
    tmpdir_of(d, tmp, sizeof tmp);
    zck_manifest m;
    memset(&m, 0, sizeof m);
    zinc_status s = ZINC_OK;
    char *js = NULL;
    m.version = ZCK_FORMAT_VERSION;
    snprintf(m.zinc_version, sizeof m.zinc_version, "%s", ZINC_VERSION_STRING);
    snprintf(m.tag, sizeof m.tag, "%s", d->tag);
    m.step = d->step;
    snprintf(m.config_hash, sizeof m.config_hash, "%s", d->config_hash ? d->config_hash : "");
    snprintf(m.settings_hash, sizeof m.settings_hash, "%s",
             d->settings_hash ? d->settings_hash : "");
    m.latest_left = d->leave_latest;
    m.world_size = d->world_size;
    m.stage = d->stage;
    m.dtype = d->dtype;
    m.level = d->level;
    m.chunk_bytes = chunk_size(d);
    m.shuffle = d->shuffle;
    m.streams = d->streams;
    m.ntensors = d->ntensors;
    m.tensors = (zck_tensor *)d->tensors;   /* borrowed; detached before zck_manifest_free */
    m.engine_state = (char *)d->engine_state;
    m.nranks = d->world_size;
    m.ranks = calloc((size_t)d->world_size, sizeof *m.ranks);
    if (!m.ranks) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory"); goto done; }

    /* Wait for every rank's description (or its failure note). */
    double t0 = now_s(), timeout = d->timeout_s > 0 ? d->timeout_s : 300;
    for (int r = 0; r < d->world_size && s == ZINC_OK; r++) {
        int ms = 1;
        for (;;) {
            /* the note first: a failure after the rank's description was in place (its
             * directory's fsync) leaves both */
            if (failure_note(d, tmp, r, err, &s)) break;
            snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, r);
            if (access(path, F_OK) == 0) break;
            if (now_s() - t0 > timeout) {
                s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_TIMEOUT,
                             "ckpt save of %s: rank %d did not finish writing within %.0f s (is "
                             "%s on a file system every rank shares?)", d->tag, r, timeout, d->dir);
                break;
            }
            sleep_ms(ms);
            if (ms < 50) ms *= 2;
        }
        if (s != ZINC_OK) break;
        char *txt;
        size_t len;
        snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, r);
        s = zck_read_file(path, &txt, &len, err);
        if (s != ZINC_OK) break;
        s = zck_rankfile_parse(txt, len, path, &m.ranks[r], err);
        free(txt);
        if (s == ZINC_OK && (m.ranks[r].rank != r ||
                             (m.ranks[r].streams[ZCK_WEIGHTS16].present &&
                              m.ranks[r].streams[ZCK_WEIGHTS16].dtype != d->dtype)))
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_MISMATCH,
                         "ckpt save: %s does not describe rank %d with dtype %s", path, r,
                         zinc_dtype_name(d->dtype));
    }
    if (s != ZINC_OK) goto done;

    if (d->blob && d->blob_bytes) {
        snprintf(path, sizeof path, "%s/%s", tmp, ZCK_BLOB);
        s = zck_write_file_atomic(path, d->blob, d->blob_bytes, err);
        if (s != ZINC_OK) goto done;
        m.has_blob = 1;
        m.blob_bytes = d->blob_bytes;
        m.blob_xxh3 = XXH3_64bits(d->blob, d->blob_bytes);
    }
    hook("manifest");
    js = zck_manifest_to_json(&m);
    if (!js) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory"); goto done; }
    snprintf(path, sizeof path, "%s/%s", tmp, ZCK_MANIFEST);
    s = zck_write_file_atomic(path, js, strlen(js), err);
    if (s != ZINC_OK) goto done;
    for (int r = 0; r < d->world_size; r++) {
        snprintf(path, sizeof path, "%s/rank-%05d.json", tmp, r);
        unlink(path);
    }
    s = zck_fsync_dir(tmp, err);
    if (s != ZINC_OK) goto done;
    /* Once more, last: a rank that failed after its description was in place, which an async
     * save (no all-reduce tells rank 0) may only note now. A note later than this still
     * commits the tag, whose files that rank had written and described. */
    for (int r = 0; r < d->world_size; r++)
        if (failure_note(d, tmp, r, err, &s)) goto done;

    hook("rename");
    snprintf(final, sizeof final, "%s/%s", d->dir, d->tag);
    char old[4200];
    snprintf(old, sizeof old, "%s/%s.old", d->dir, d->tag);
    struct stat sb;
    int replacing = lstat(final, &sb) == 0;
    char why[ZCK_ERR - 64];
    /* checked again: anything may have appeared since the prepare */
    if (zck_save_target_check(d->dir, d->tag, why, sizeof why) != 0) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s", why);
        goto done;
    }
    /* Saving over an existing tag. rename cannot replace a non-empty directory: the two are
     * exchanged in one step (Linux's renameat2 RENAME_EXCHANGE), so the tag's name always holds
     * a whole checkpoint, and the old one, now under .tmp, goes after `latest`. Where the file
     * system cannot exchange, the old one is moved aside to .old first; a crash between the two
     * renames leaves only .old, which a load takes when the tag is missing (zck_find_tag), and a
     * failed second rename moves it back. */
    int exchanged = 0;
    if (replacing) {
        if (!zck_test_no_exchange && zck_exchange(tmp, final) == 0) {
            exchanged = 1;
        } else if (!zck_test_no_exchange && errno != EINVAL && errno != ENOSYS &&
                   errno != ENOTSUP) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot put %s in place of %s: %s", tmp,
                         final, strerror(errno));
            goto done;
        } else if (zck_rmdir_flat(old) != 0) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot remove the stale %s: %s", old,
                         strerror(errno));
            goto done;
        } else if (rename(final, old) != 0) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot move the existing %s aside: %s", final,
                         strerror(errno));
            goto done;
        }
    }
    hook("renamed-aside");
    if (!exchanged && rename(tmp, final) != 0) {
        int e = errno;
        if (replacing && rename(old, final) != 0)   /* the old tag back under its name */
            zlog(ZLOG_WARN, "ckpt", d->rank, "cannot move %s back to %s: %s (a load takes it "
                 "from there)", old, final, strerror(errno));
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot rename %s to %s: %s", tmp, final,
                     strerror(e));
        goto done;
    }
    committed = 1;
    s = zck_fsync_dir(d->dir, err);
    if (s != ZINC_OK) goto done;
    hook("latest");
    if (!d->leave_latest) {
        snprintf(path, sizeof path, "%s/%s", d->dir, ZCK_LATEST);
        char line[ZCK_TAG_MAX + 2];
        int n = snprintf(line, sizeof line, "%s\n", d->tag);
        s = zck_write_file_atomic(path, line, (size_t)n, err);
    }
    if (s == ZINC_OK && exchanged) zck_rmdir_flat(tmp);   /* the tag's old contents */
    /* the tag's old contents moved aside by this save, or by one that stopped after that */
    if (s == ZINC_OK) zck_rmdir_flat(old);
    hook("done");
    /* (not after a save that leaves latest: the tag latest names may be among the older ones) */
    if (s == ZINC_OK && d->keep_last > 0 && !d->leave_latest)
        zck_prune_tags(d->dir, d->tag, d->config_hash, d->step, d->keep_last, d->rank);
done:
    if (s != ZINC_OK && committed) {
        /* the tag is whole under its name: a load finds it (as the newest), so say so rather
         * than let "failed" suggest that it is lost or may be deleted */
        size_t k = strlen(err);
        snprintf(err + k, ZCK_ERR - k, " (the tag itself is in place, whole, in %.200s, and a "
                 "load takes it when it is the newest; only latest or the directory's sync "
                 "failed)", final);
    }
    if (s != ZINC_OK && !names_tag(err, d->tag)) {
        char e2[ZCK_ERR];
        snprintf(e2, sizeof e2, "%s", err);
        snprintf(err, ZCK_ERR, "ckpt save of %.200s: %.800s", d->tag, e2);
    }
    free(js);
    m.tensors = NULL;
    m.ntensors = 0;
    m.engine_state = NULL;
    zck_manifest_free(&m);
    return s;
}

zinc_status zck_save(zcomm_t *c, const zck_save_desc *d, char *err)
{
    zinc_status s = zck_save_prepare(c, d, err);
    if (s != ZINC_OK) return s;
    char werr[ZCK_ERR] = "";
    zinc_status ws = zck_save_write(d, werr);
    /* Every rank learns which failed, so rank 0 does not wait for a file that will never come,
     * and the first failing rank sends its error to the others: rank 0's commit fails with that
     * rank's reason (its rank-N.failed note cannot be written on a full disk, where rank 0 said
     * only "failed on another rank", and that message could be the one a caller printed). */
    int first = -1;
    char theirs[ZCK_ERR];
    zinc_status cs = zck_first_failure(c, ws != ZINC_OK, werr, &first, theirs, sizeof theirs);
    if (cs != ZINC_OK) {
        /* Nobody commits now: rank 0 takes the .tmp away with it. */
        if (d->rank == 0) remove_tmp(d);
        return zerr_fmt(err, ZCK_ERR, cs, "ckpt save: collective failed: %s",
                        c && c->err[0] ? c->err : "out of memory");
    }
    if (d->rank == 0) {
        if (ws != ZINC_OK) {
            s = ws;
            snprintf(err, ZCK_ERR, "%s", werr);
        } else if (first > 0) {
            s = ZINC_ERR_IO;
            snprintf(err, ZCK_ERR, "ckpt save of %.200s failed on rank %d: %.700s; nothing was "
                     "committed", d->tag, first, theirs);
        } else {
            s = zck_save_commit(d, err);
        }
        if (s != ZINC_OK) remove_tmp(d);
    } else if (ws != ZINC_OK) {
        snprintf(err, ZCK_ERR, "%s", werr);
    }
    s = agree(c, s, err);
    /* A rank's own write failure is the more precise message for that rank. */
    if (ws != ZINC_OK && d->rank != 0) {
        snprintf(err, ZCK_ERR, "%s", werr);
        return ws;
    }
    return s;
}
