/*
 * reader.c — opens a committed tag, reshards it into any target layout, verifies it, and picks
 * the tag to resume from.
 *
 * Resharding is a range intersection in model space: a target asks for elements [lo, hi) of a
 * tensor; the stored pieces of that tensor (from every rank file, sorted by lo and checked at open
 * to tile the tensor exactly) give the overlapping ranges; each range maps to bytes of one rank's
 * stream and so to the chunks that hold them. Only those chunks are read and decoded — by a few
 * threads, each owning whole chunks, so every chunk is decoded once per call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "base/log.h"

typedef struct { int rank, piece; } zref;

struct zck_reader {
    char dir[4096];
    zck_manifest m;
    int *fds;               /* [nranks], opened at zck_open */
    zref **by_tensor;       /* [ntensors][count]: stored pieces sorted by lo */
    int *count;             /* [ntensors] */
    size_t max_raw;         /* largest chunk's raw bytes: the decode buffers' size */
};

/* The most a zstd frame expands: a 128 KiB block of one repeated byte is stored as a 4-byte RLE
 * block (x32768). A chunk declaring more raw bytes than this allows from its stored bytes is
 * damage or a lie, and must not make every decode thread allocate that much. */
#define ZCK_MAX_EXPANSION 65536u

static size_t esz(const zck_manifest *m, int s) { return s == ZCK_WEIGHTS16 ? zinc_dtype_size(m->dtype) : 4; }

const zck_manifest *zck_reader_manifest(const zck_reader *r) { return &r->m; }
const char *zck_reader_dir(const zck_reader *r) { return r->dir; }

void zck_close(zck_reader *r)
{
    if (!r) return;
    for (int i = 0; r->fds && i < r->m.nranks; i++)
        if (r->fds[i] >= 0) close(r->fds[i]);
    free(r->fds);
    for (int t = 0; r->by_tensor && t < r->m.ntensors; t++) free(r->by_tensor[t]);
    free(r->by_tensor);
    free(r->count);
    zck_manifest_free(&r->m);
    free(r);
}

static const zck_piece_rec *pref(const zck_reader *r, zref x) { return &r->m.ranks[x.rank].pieces[x.piece]; }

static zck_reader *sort_ctx;   /* qsort has no context argument; zck_open holds ref_mu */
static pthread_mutex_t ref_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_ref(const void *a, const void *b)
{
    const zck_piece_rec *x = pref(sort_ctx, *(const zref *)a), *y = pref(sort_ctx, *(const zref *)b);
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Indexes stored pieces by tensor and checks that they tile every tensor exactly once. */
static zinc_status build_index(zck_reader *r, char *err)
{
    zck_manifest *m = &r->m;
    r->count = calloc((size_t)m->ntensors + 1, sizeof *r->count);
    r->by_tensor = calloc((size_t)m->ntensors + 1, sizeof *r->by_tensor);
    if (!r->count || !r->by_tensor) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
    for (int k = 0; k < m->nranks; k++)
        for (int i = 0; i < m->ranks[k].npieces; i++) r->count[m->ranks[k].pieces[i].tensor]++;
    for (int t = 0; t < m->ntensors; t++) {
        r->by_tensor[t] = calloc((size_t)r->count[t] + 1, sizeof(zref));
        if (!r->by_tensor[t]) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
        r->count[t] = 0;
    }
    for (int k = 0; k < m->nranks; k++)
        for (int i = 0; i < m->ranks[k].npieces; i++) {
            int t = m->ranks[k].pieces[i].tensor;
            r->by_tensor[t][r->count[t]++] = (zref){k, i};
        }
    pthread_mutex_lock(&ref_mu);
    sort_ctx = r;
    for (int t = 0; t < m->ntensors; t++) qsort(r->by_tensor[t], (size_t)r->count[t], sizeof(zref), cmp_ref);
    pthread_mutex_unlock(&ref_mu);
    for (int t = 0; t < m->ntensors; t++) {
        uint64_t at = 0;
        for (int i = 0; i < r->count[t]; i++) {
            const zck_piece_rec *p = pref(r, r->by_tensor[t][i]);
            if (p->lo != at)
                return zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                                "checkpoint damaged: %s/%s: tensor %s: elements %" PRIu64 "..%" PRIu64
                                " are %s", r->dir, ZCK_MANIFEST, m->tensors[t].name,
                                p->lo < at ? p->lo : at, p->lo < at ? at : p->lo,
                                p->lo < at ? "stored twice" : "stored by no rank");
            at = p->hi;
        }
        if (at != m->tensors[t].numel)
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                            "checkpoint damaged: %s/%s: tensor %s: elements %" PRIu64 "..%" PRIu64
                            " are stored by no rank", r->dir, ZCK_MANIFEST, m->tensors[t].name, at,
                            m->tensors[t].numel);
    }
    return ZINC_OK;
}

zinc_status zck_open(const char *tagdir, zck_reader **out, char *err)
{
    *out = NULL;
    zck_reader *r = calloc(1, sizeof *r);
    if (!r) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
    snprintf(r->dir, sizeof r->dir, "%s", tagdir);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tagdir, ZCK_MANIFEST);
    char *txt = NULL;
    size_t len;
    zinc_status s = zck_read_file(path, &txt, &len, err);
    if (s != ZINC_OK) {
        if (errno == ENOENT)
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO,
                         "%s is not a committed checkpoint: it has no %s (an interrupted save "
                         "leaves <tag>.tmp; a save directory holds tags and `latest`)",
                         tagdir, ZCK_MANIFEST);
        goto fail;
    }
    s = zck_manifest_parse(txt, len, path, &r->m, err);
    free(txt);
    txt = NULL;
    if (s != ZINC_OK) goto fail;
    r->fds = malloc((size_t)r->m.nranks * sizeof *r->fds);
    if (!r->fds) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory"); goto fail; }
    for (int k = 0; k < r->m.nranks; k++) r->fds[k] = -1;
    for (int k = 0; k < r->m.nranks; k++) {
        const zck_rankfile *rf = &r->m.ranks[k];
        snprintf(path, sizeof path, "%s/%s", tagdir, rf->file);
        errno = 0;
        r->fds[k] = zck_open_regular(path, err);
        if (r->fds[k] < 0) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                         "checkpoint incomplete: %s (rank %d's file, listed in the manifest) "
                         "is %s (%s)", path, k, errno == ENOENT ? "missing" : "unreadable",
                         errno == EINVAL ? "not a regular file" : strerror(errno));
            goto fail;
        }
        struct stat st;
        uint8_t hdr[ZCK_FILE_HEADER];
        if (fstat(r->fds[k], &st) != 0 || (uint64_t)st.st_size != rf->bytes) {
            /* name the first chunk that no longer fits, so the message points at the data */
            char where[256] = "";
            for (int q = 0; q < ZCK_NSTREAMS && !where[0]; q++)
                for (int c = 0; c < rf->streams[q].nchunks; c++) {
                    const zck_chunk *ch = &rf->streams[q].chunks[c];
                    if (ch->file_off + ch->comp_len > (uint64_t)st.st_size) {
                        snprintf(where, sizeof where, "; stream %s chunk %d (file bytes %" PRIu64
                                 "..%" PRIu64 ") is cut off", zck_stream_name(q), c, ch->file_off,
                                 ch->file_off + ch->comp_len);
                        break;
                    }
                }
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                         "checkpoint damaged: %s is %lld bytes, the manifest says %" PRIu64
                         " (truncated or overwritten)%s", path, (long long)st.st_size, rf->bytes,
                         where);
            goto fail;
        }
        if (pread(r->fds[k], hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
            memcmp(hdr, ZCK_FILE_MAGIC, 8) ||
            (uint32_t)(hdr[12] | hdr[13] << 8 | hdr[14] << 16 | (uint32_t)hdr[15] << 24) != (uint32_t)k) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                         "checkpoint damaged: %s does not start with the rank %d file header", path, k);
            goto fail;
        }
        /* The header's format version (docs/checkpoint-format.md) is the manifest's: one zinc
         * writes both, and a manifest newer than this zinc was refused when it was parsed. So a
         * header that differs (0, or 4098 for a 2 with one bit flipped) is damage, not a newer
         * writer. */
        uint32_t fv = (uint32_t)(hdr[8] | hdr[9] << 8 | hdr[10] << 16 | (uint32_t)hdr[11] << 24);
        if (fv != (uint32_t)r->m.version) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, "checkpoint damaged: %s's header says "
                         "file format version %u, its manifest %d (one zinc writes both)", path,
                         fv, r->m.version);
            goto fail;
        }
    }
    if (r->m.has_blob) {
        snprintf(path, sizeof path, "%s/%s", tagdir, ZCK_BLOB);
        s = zck_read_file(path, &txt, &len, err);
        if (s != ZINC_OK) {
            /* missing, or there and unreadable (a directory in its place): said as such */
            char why[ZCK_ERR];
            snprintf(why, sizeof why, "%s", err);
            if (access(path, F_OK) != 0)
                s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, "checkpoint incomplete: %s is "
                             "missing", path);
            else
                s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, "checkpoint damaged: %s", why);
            goto fail;
        }
        uint64_t h = XXH3_64bits(txt, len);
        free(txt);
        txt = NULL;
        if (len != r->m.blob_bytes || h != r->m.blob_xxh3) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                         "checkpoint damaged: %s fails its size/checksum (%zu bytes, xxh3 %016" PRIx64
                         "; manifest: %" PRIu64 " bytes, %016" PRIx64 ")", path, len, h,
                         r->m.blob_bytes, r->m.blob_xxh3);
            goto fail;
        }
    }
    for (int k = 0; k < r->m.nranks; k++)
        for (int q = 0; q < ZCK_NSTREAMS; q++)
            for (int c = 0; c < r->m.ranks[k].streams[q].nchunks; c++) {
                const zck_chunk *ch = &r->m.ranks[k].streams[q].chunks[c];
                if (ch->raw_len > ch->comp_len * ZCK_MAX_EXPANSION + ZCK_MAX_EXPANSION) {
                    s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                                 "checkpoint damaged: %s/%s, stream %s, chunk %d declares %" PRIu64
                                 " raw bytes from %" PRIu64 " stored bytes, more than zstd can "
                                 "expand", tagdir, r->m.ranks[k].file, zck_stream_name(q), c,
                                 ch->raw_len, ch->comp_len);
                    goto fail;
                }
                if (ch->raw_len > r->max_raw) r->max_raw = (size_t)ch->raw_len;
            }
    s = build_index(r, err);
    if (s != ZINC_OK) goto fail;
    *out = r;
    return ZINC_OK;
fail:
    free(txt);
    zck_close(r);
    return s;
}

zinc_status zck_read_blob(zck_reader *r, void *buf, size_t cap, size_t *bytes, char *err)
{
    *bytes = 0;
    if (!r->m.has_blob) return ZINC_OK;
    char path[4200], *txt;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", r->dir, ZCK_BLOB);
    zinc_status s = zck_read_file(path, &txt, &len, err);
    if (s != ZINC_OK) return s;
    if (len != r->m.blob_bytes || XXH3_64bits(txt, len) != r->m.blob_xxh3) {
        free(txt);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, "checkpoint damaged: %s fails its checksum", path);
    }
    *bytes = len;
    if (buf && len > cap) {
        free(txt);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG,
                        "ckpt load: the saved client blob is %zu bytes but client_blob_cap is %zu",
                        len, cap);
    }
    if (buf) memcpy(buf, txt, len);
    free(txt);
    return ZINC_OK;
}

/* ---- chunk jobs ------------------------------------------------------------------------------- */

typedef struct {
    int rank, chunk;
    uint64_t off, len;      /* bytes within the decoded chunk */
    uint8_t *dst;
} zop;

typedef struct {
    zck_reader *r;
    int s;
    zop *ops;
    size_t nops;
    size_t *starts;         /* [nuniq + 1]: ops of unique chunk u are ops[starts[u] .. starts[u+1]) */
    size_t nuniq, next;
    int failed;
    zinc_status fs;
    char msg[ZCK_ERR];
    pthread_mutex_t mu;
} zdec;

static int cmp_op(const void *a, const void *b)
{
    const zop *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->chunk != y->chunk) return x->chunk < y->chunk ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void *dec_worker(void *arg)
{
    zdec *d = arg;
    const zck_manifest *m = &d->r->m;
    /* Sized by the chunks the files hold, not by the declared chunk_bytes (up to 4 GiB). */
    size_t cap = d->r->max_raw ? d->r->max_raw : 1;
    zck_codec_ctx *cc = zck_codec_ctx_create(cap);
    uint8_t *raw = malloc(cap), *comp = malloc(zck_encode_bound(cap));
    char err[ZCK_ERR], where[4600];
    if (!cc || !raw || !comp) {
        pthread_mutex_lock(&d->mu);
        if (!d->failed) { d->failed = 1; d->fs = ZINC_ERR_NOMEM; snprintf(d->msg, sizeof d->msg, "ckpt: out of memory for decode buffers"); }
        pthread_mutex_unlock(&d->mu);
        goto out;
    }
    for (;;) {
        pthread_mutex_lock(&d->mu);
        size_t u = d->next++;
        int stop = d->failed || u >= d->nuniq;
        pthread_mutex_unlock(&d->mu);
        if (stop) break;
        const zop *o = &d->ops[d->starts[u]];
        const zck_rankfile *rf = &m->ranks[o->rank];
        const zck_chunk *c = &rf->streams[d->s].chunks[o->chunk];
        snprintf(where, sizeof where, "%s/%s, stream %s, chunk %d (file bytes %" PRIu64 "..%" PRIu64 ")",
                 d->r->dir, rf->file, zck_stream_name(d->s), o->chunk, c->file_off,
                 c->file_off + c->comp_len);
        zinc_status s = ZINC_OK;
        if (c->raw_len > cap || c->comp_len > zck_encode_bound(cap)) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                         "checkpoint damaged: %s: larger than the chunk size %zu", where, cap);
        } else {
            ssize_t got = pread(d->r->fds[o->rank], comp, c->comp_len, (off_t)c->file_off);
            if (got != (ssize_t)c->comp_len)
                s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                             "checkpoint damaged: %s: only %zd of %" PRIu64 " bytes could be read "
                             "(truncated file)", where, got, c->comp_len);
            else
                s = zck_decode(cc, comp, c->comp_len, c->comp_xxh3, raw, c->raw_len, c->raw_xxh3,
                               esz(m, d->s), m->shuffle, where, err);
        }
        if (s != ZINC_OK) {
            pthread_mutex_lock(&d->mu);
            if (!d->failed) { d->failed = 1; d->fs = s; snprintf(d->msg, sizeof d->msg, "%s", err); }
            pthread_mutex_unlock(&d->mu);
            break;
        }
        for (size_t i = d->starts[u]; i < d->starts[u + 1]; i++)
            if (d->ops[i].dst) memcpy(d->ops[i].dst, raw + d->ops[i].off, d->ops[i].len);
    }
out:
    zck_codec_ctx_free(cc);
    free(raw);
    free(comp);
    return NULL;
}

/* Decodes the chunks the ops name (each once) and applies the ops. */
static zinc_status run_ops(zck_reader *r, int s, zop *ops, size_t nops, int threads, char *err)
{
    if (!nops) return ZINC_OK;
    qsort(ops, nops, sizeof *ops, cmp_op);
    zdec d;
    memset(&d, 0, sizeof d);
    d.r = r;
    d.s = s;
    d.ops = ops;
    d.nops = nops;
    d.starts = malloc((nops + 1) * sizeof *d.starts);
    if (!d.starts) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
    for (size_t i = 0; i < nops; i++)
        if (i == 0 || ops[i].rank != ops[i - 1].rank || ops[i].chunk != ops[i - 1].chunk)
            d.starts[d.nuniq++] = i;
    d.starts[d.nuniq] = nops;
    pthread_mutex_init(&d.mu, NULL);
    int nt = threads > 0 ? threads : 2;
    if ((size_t)nt > d.nuniq) nt = (int)d.nuniq;
    if (nt > 64) nt = 64;
    pthread_t th[64];
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, dec_worker, &d) != 0) break;
    dec_worker(&d);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&d.mu);
    free(d.starts);
    if (d.failed) {
        snprintf(err, ZCK_ERR, "%s", d.msg);
        return d.fs;
    }
    return ZINC_OK;
}

static int find_chunk(const zck_stream_info *si, uint64_t off)
{
    int lo = 0, hi = si->nchunks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (si->chunks[mid].raw_off <= off) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

zinc_status zck_read(zck_reader *r, int s, const zck_target *t, int n, int threads, char *err)
{
    const zck_manifest *m = &r->m;
    if (s < 0 || s >= ZCK_NSTREAMS || !(m->streams & (1u << s)))
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_UNSUPPORTED,
                        "%s has no %s stream (it was saved without it)%s", r->dir, zck_stream_name(s),
                        s == ZCK_ADAM_M || s == ZCK_ADAM_V
                            ? "; load with weights_only to start with fresh optimizer state" : "");
    size_t es = esz(m, s), cap = 64, nops = 0;
    zop *ops = malloc(cap * sizeof *ops);
    if (!ops) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
    zinc_status st = ZINC_OK;
    for (int i = 0; i < n && st == ZINC_OK; i++) {
        const zck_target *tg = &t[i];
        if (tg->tensor < 0 || tg->tensor >= m->ntensors || tg->lo > tg->hi ||
            tg->hi > m->tensors[tg->tensor].numel) {
            st = zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG,
                          "ckpt read: target %d asks for elements outside the stored tensor", i);
            break;
        }
        uint64_t covered = 0;
        for (int k = 0; k < r->count[tg->tensor] && st == ZINC_OK; k++) {
            zref x = r->by_tensor[tg->tensor][k];
            const zck_piece_rec *p = pref(r, x);
            uint64_t a = p->lo > tg->lo ? p->lo : tg->lo, b = p->hi < tg->hi ? p->hi : tg->hi;
            if (a >= b) continue;
            covered += b - a;
            const zck_stream_info *si = &m->ranks[x.rank].streams[s];
            uint64_t boff = (p->elem_off + (a - p->lo)) * es, bend = boff + (b - a) * es;
            uint8_t *dst = (uint8_t *)tg->dst + (a - tg->lo) * es;
            while (boff < bend) {
                int c = find_chunk(si, boff);
                const zck_chunk *ch = &si->chunks[c];
                uint64_t take = ch->raw_off + ch->raw_len - boff;
                if (take > bend - boff) take = bend - boff;
                if (nops == cap) {
                    zop *g = realloc(ops, 2 * cap * sizeof *ops);
                    if (!g) { st = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory"); break; }
                    ops = g;
                    cap *= 2;
                }
                ops[nops++] = (zop){x.rank, c, boff - ch->raw_off, take, dst};
                dst += take;
                boff += take;
            }
        }
        if (st == ZINC_OK && covered != tg->hi - tg->lo)
            st = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                          "checkpoint damaged: %s: tensor %s is not fully stored", r->dir,
                          m->tensors[tg->tensor].name);
    }
    if (st == ZINC_OK) st = run_ops(r, s, ops, nops, threads, err);
    free(ops);
    return st;
}

zinc_status zck_verify(zck_reader *r, int threads, char *err)
{
    const zck_manifest *m = &r->m;
    for (int s = 0; s < ZCK_NSTREAMS; s++) {
        if (!(m->streams & (1u << s))) continue;
        size_t nops = 0;
        for (int k = 0; k < m->nranks; k++) nops += (size_t)m->ranks[k].streams[s].nchunks;
        zop *ops = calloc(nops + 1, sizeof *ops);
        if (!ops) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory");
        nops = 0;
        for (int k = 0; k < m->nranks; k++)
            for (int c = 0; c < m->ranks[k].streams[s].nchunks; c++)
                ops[nops++] = (zop){k, c, 0, 0, NULL};
        zinc_status st = run_ops(r, s, ops, nops, threads, err);
        free(ops);
        if (st != ZINC_OK) return st;
    }
    size_t bytes;
    zinc_status st = zck_read_blob(r, NULL, 0, &bytes, err);
    if (st == ZINC_OK && m->engine_state) {
        /* The same check a load makes, so that a checkpoint that verifies also resumes. */
        zengine_state es;
        memset(&es, 0, sizeof es);
        st = zck_state_parse(m->engine_state, &es, err);
    }
    return st;
}

/* ---- finding the tag -------------------------------------------------------------------------- */

static int valid_tag_name(const char *t)
{
    return *t && !strchr(t, '/') && t[0] != '.' && strlen(t) < ZCK_TAG_MAX;
}

int zck_latest_read(const char *path, char *tag, size_t n)
{
    char *txt, e[ZCK_ERR];
    size_t len;
    if (zck_read_file(path, &txt, &len, e) != ZINC_OK) return -1;
    /* one line: the trailing newline (DeepSpeed writes none; CRLF from an editor) goes */
    while (len && (txt[len - 1] == '\n' || txt[len - 1] == '\r' || txt[len - 1] == ' ')) txt[--len] = 0;
    int ok = strlen(txt) == len && !strchr(txt, '\n') && valid_tag_name(txt);
    if (ok) snprintf(tag, n, "%s", txt);
    free(txt);
    return ok ? 0 : -1;
}

static int read_latest(const char *dir, char *tag, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, ZCK_LATEST);
    return zck_latest_read(path, tag, n);
}

/* Whether dir is a DeepSpeed checkpoint's tag folder (its model states file, or a universal
 * checkpoint's zero/ folder): not zinc's format, and not damaged. */
static int is_deepspeed_tag(const char *dir)
{
    static const char *const marks[] = {"mp_rank_00_model_states.pt",
                                        "zero_pp_rank_0_mp_rank_00_model_states.pt",
                                        "zero/optimizer_state.pt"};
    char p[4608];
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        int n = snprintf(p, sizeof p, "%s/%s", dir, marks[i]);
        if (n > 0 && (size_t)n < sizeof p && access(p, F_OK) == 0) return 1;
    }
    return 0;
}

static zinc_status deepspeed_refused(const char *where, const char *what, char *err)
{
    return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "%s %s DeepSpeed's format, not zinc's: "
                    "convert it with `python -m zinc.utils.from_deepspeed DIR OUT`, or load it "
                    "with import zinc's engine.load_checkpoint (docs/deepspeed-checkpoints.md)",
                    where, what);
}

/* A tag's path that does not exist (its first k bytes, no trailing '/'): whether "<path>.old",
 * written into out (n bytes), holds its previous contents whole — a manifest there: a save over
 * the tag that could not exchange the two stopped between its renames (ckpt/writer.c). Said as a
 * warning when `say`. */
static int take_old_copy(const char *path, size_t k, char *out, size_t n, int say, int logrank)
{
    char mp[4600];
    int w = snprintf(out, n, "%.*s.old", (int)k, path);
    if (w < 0 || (size_t)w >= n) return 0;
    snprintf(mp, sizeof mp, "%s/%s", out, ZCK_MANIFEST);
    if (access(mp, F_OK) != 0) return 0;
    if (say)
        zlog(ZLOG_WARN, "ckpt", logrank, "%.*s does not exist; %s holds its previous contents "
             "whole (a save over it stopped between its renames): loading them", (int)k, path,
             out);
    return 1;
}

static zinc_status find_tag(const char *dir, const char *tag, int skip_upto, int logrank,
                           int thorough, char *tagdir, size_t tagdir_n, char *tagname,
                           size_t tagname_n, char *err);

zinc_status zck_resolve_path(const char *path, char *tagdir, size_t n, char *err)
{
    char p[4200], tag[ZCK_TAG_MAX];
    snprintf(p, sizeof p, "%s/%s", path, ZCK_MANIFEST);
    if (access(p, F_OK) == 0) {
        snprintf(tagdir, n, "%s", path);
        return ZINC_OK;
    }
    if (is_deepspeed_tag(path)) return deepspeed_refused(path, "is a checkpoint in", err);
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        /* a tag that is missing, its previous contents whole in T.old (a save over it stopped
         * between its renames): taken, as a load by the tag's name takes it (zck_find_tag) */
        size_t k = strlen(path);
        while (k > 1 && path[k - 1] == '/') k--;
        if (e == ENOENT && take_old_copy(path, k, tagdir, n, 1, 0)) return ZINC_OK;
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s: not a directory (give a checkpoint's tag "
                        "directory or its save directory)", path);
    /* a save directory: the tag a load would take (`latest`'s, or see cmp_cand) */
    return find_tag(path, NULL, 0, 0, 1, tagdir, n, tag, sizeof tag, err);
}

typedef struct {
    char name[ZCK_TAG_MAX];
    int64_t step;
    double mtime;   /* of its manifest: when the save wrote it (a rename keeps it) */
    char hash[32];  /* its manifest's config_hash: which run's (a copy keeps it, not mtimes) */
    int latest_left; /* saved leaving latest as it was (save_latest=False): not a save that
                        stopped before updating latest, so never taken over latest's tag */
    int group;      /* 0: committed after `latest` was written, at a higher step; 1: the tag
                       `latest` names; 2: others at or below its step; 3: others above it */
    int old;        /* name is T.old, the whole previous contents of a tag T that is missing: a
                       save over T that could not exchange the two stopped between its renames
                       (ckpt/writer.c) */
    int tried;      /* 0: not opened yet; 1: its rank files open; -1: they do not (damaged) */
} zcand;

zinc_status zck_manifest_read(const char *tagdir, zck_manifest *m, char *err)
{
    memset(m, 0, sizeof *m);
    char path[4400];
    int pn = snprintf(path, sizeof path, "%s/%s", tagdir, ZCK_MANIFEST);
    if (pn < 0 || (size_t)pn >= sizeof path)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "%s: path too long", tagdir);
    char *txt = NULL;
    size_t len = 0;
    zinc_status s = zck_read_file(path, &txt, &len, err);
    if (s == ZINC_OK) s = zck_manifest_parse(txt, len, path, m, err);
    free(txt);
    return s;
}

/* The step and config hash (32 bytes) the manifest of tagdir records, and (left not NULL)
 * whether it was saved leaving latest as it was; the rank files are not opened. */
static zinc_status manifest_of(const char *tagdir, int64_t *step, char *hash, int *left,
                               char *err)
{
    zck_manifest m;
    zinc_status s = zck_manifest_read(tagdir, &m, err);
    if (s == ZINC_OK) {
        *step = m.step;
        memcpy(hash, m.config_hash, sizeof m.config_hash);
        if (left) *left = m.latest_left;
    }
    zck_manifest_free(&m);
    return s;
}

/* The step the manifest of tagdir records (INT64_MAX when it cannot be read) and its config
 * hash (empty then). */
static int64_t manifest_step(const char *tagdir, char *hash)
{
    char err[ZCK_ERR];
    int64_t step = INT64_MAX;   /* manifest_of sets them only when the manifest reads */
    hash[0] = 0;
    manifest_of(tagdir, &step, hash, NULL, err);
    return step;
}

/* Whether the candidate holds tag `tag` (T.old holds T). */
static int cand_is(const zcand *c, const char *tag)
{
    size_t n = strlen(c->name);
    return c->old ? n == strlen(tag) + 4 && !strncmp(c->name, tag, n - 4) : !strcmp(c->name, tag);
}

/* Whether the rank files of candidate c of dir open (zck_open: headers, sizes), once: the
 * answer is kept in c->tried. A damaged one is warned about when `say`. */
static int try_open(const char *dir, zcand *c, int say, int logrank)
{
    if (c->tried) return c->tried > 0;
    char path[4400], e2[ZCK_ERR];
    zck_reader *r;
    snprintf(path, sizeof path, "%s/%s", dir, c->name);
    c->tried = zck_open(path, &r, e2) == ZINC_OK ? 1 : -1;
    if (c->tried > 0)
        zck_close(r);
    else if (say)
        zlog(ZLOG_WARN, "ckpt", logrank, "skipping damaged checkpoint %s: %s", path, e2);
    return c->tried > 0;
}

/* The order a load tries tags in, as DeepSpeed's `latest` means it: the tag `latest` names,
 * unless a tag of a higher step was committed after `latest` was written (a crash between a
 * save's rename and its `latest`: that newer tag first). A copy (cp -r, rsync without -t)
 * scrambles mtimes, so a lower step is never preferred that way: it made a copied run resume
 * 10 steps back, and hid a damaged `latest` tag from `ckpt verify`. Behind them the tags at or
 * below `latest`'s step (that run's), before those above it (an abandoned run's, resumed from
 * an earlier tag): a damaged `latest` fell back to the abandoned run's newest. Within a group,
 * the highest step, then the newest. */
static int cmp_cand(const void *a, const void *b)
{
    const zcand *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    if (x->step != y->step) return x->step > y->step ? -1 : 1;
    if (x->mtime != y->mtime) return x->mtime > y->mtime ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* name is prefix followed by one or more digits and nothing else: the default tags of zinc's
 * CLI (step000400) and of DeepSpeed's and zinc's Python save_checkpoint (global_step400). */
static int tag_shaped(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || !name[n]) return 0;
    for (const char *c = name + n; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

zck_entry zck_save_dir_entry(const char *dir, const char *name, const char *latest)
{
    size_t ln = strlen(name);
    char path[4400], p[4600];
    if (name[0] == '.' || ln >= ZCK_TAG_MAX) return ZCK_ENTRY_NONE;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return ZCK_ENTRY_NONE;
    int is_old = ln > 4 && !strcmp(name + ln - 4, ".old");
    if (is_old) {   /* a tag's previous contents: a candidate only while the tag is missing */
        struct stat bs;
        snprintf(p, sizeof p, "%s/%.*s", dir, (int)(ln - 4), name);
        if (lstat(p, &bs) == 0 || errno != ENOENT) return ZCK_ENTRY_SHADOWED;
    }
    if (ln > 4 && !strcmp(name + ln - 4, ".tmp")) return ZCK_ENTRY_UNFINISHED;
    snprintf(p, sizeof p, "%s/%s", path, ZCK_MANIFEST);
    if (access(p, F_OK) == 0) return ZCK_ENTRY_TAG;
    if (errno != ENOENT && strcmp(name, "lost+found") != 0) {
        /* (EACCES on a directory chmod 000, EIO): whether it holds a tag cannot be known.
         * Taken for unrelated it hid a tag from a resume and from verify --all in silence;
         * taken for a damaged tag, another user's private folder beside a run's tags made a
         * fresh `--resume auto` fail ("no valid checkpoint"). Damaged where its name says tag. */
        /* (the tests below set no errno: the caller reads access()'s) */
        int tagged = is_old || (latest && !strcmp(name, latest)) || tag_shaped(name, "step") ||
                     tag_shaped(name, "global_step");
        return tagged ? ZCK_ENTRY_UNREADABLE : ZCK_ENTRY_UNKNOWN;
    }
    if (is_deepspeed_tag(path)) return ZCK_ENTRY_DEEPSPEED;
    /* Unrelated directories are not our business; one with rank files lost its manifest. */
    snprintf(p, sizeof p, "%s/rank-00000.zck", path);
    if (!is_old && (access(p, F_OK) == 0 || (latest && !strcmp(name, latest))))
        return ZCK_ENTRY_LOST;
    return ZCK_ENTRY_NONE;
}

static zinc_status find_tag(const char *dir, const char *tag, int skip_upto, int logrank,
                           int thorough, char *tagdir, size_t tagdir_n, char *tagname,
                           size_t tagname_n, char *err)
{
    zck_reader *r;
    if (tag && strcmp(tag, ZCK_LATEST) != 0) {
        if (!valid_tag_name(tag))
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_INVALID_ARG, "\"%s\" is not a tag name", tag);
        snprintf(tagdir, tagdir_n, "%s/%s", dir, tag);
        snprintf(tagname, tagname_n, "%s", tag);
        char oldp[4400];
        struct stat ts;
        if (lstat(tagdir, &ts) != 0 && errno == ENOENT &&
            take_old_copy(tagdir, strlen(tagdir), oldp, sizeof oldp, skip_upto == 0, logrank)) {
            snprintf(tagdir, tagdir_n, "%s", oldp);
            snprintf(tagname, tagname_n, "%s.old", tag);
        }
        if (is_deepspeed_tag(tagdir)) return deepspeed_refused(tagdir, "is a checkpoint in", err);
        zinc_status s = zck_open(tagdir, &r, err);
        zck_close(r);
        return s;
    }
    DIR *dd = opendir(dir);
    if (!dd)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot open the save directory %s: %s",
                        dir, strerror(errno));
    /* A load retries the search with skip_upto one higher after each tag whose data failed:
     * what the scan finds is said by the first search only, so each warning comes once. */
    int say = skip_upto == 0;
    zcand *c = NULL;
    int nc = 0, cap = 0, ndamaged = 0, nds = 0;
    char latest[ZCK_TAG_MAX] = "", path[4400];
    if (read_latest(dir, latest, sizeof latest) != 0 && say) {
        /* there and not one tag's name (garbage, empty, a directory): said, not passed over in
         * silence as if there were none */
        snprintf(path, sizeof path, "%s/%s", dir, ZCK_LATEST);
        struct stat ls;
        if (lstat(path, &ls) == 0)
            zlog(ZLOG_WARN, "ckpt", logrank, "%s does not hold a tag's name (one line, no '/' "
                 "or leading '.'%s): ignored, the tags are ordered as without it", path,
                 S_ISREG(ls.st_mode) ? "" : "; it is not even a file");
    }
    struct dirent *de;
    while ((de = readdir(dd))) {
        const char *nm = de->d_name;
        size_t ln = strlen(nm);
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        zck_entry kind = zck_save_dir_entry(dir, nm, latest);
        const char *why = kind == ZCK_ENTRY_UNREADABLE || kind == ZCK_ENTRY_UNKNOWN
                              ? strerror(errno) : "";
        switch (kind) {
        case ZCK_ENTRY_SHADOWED:
            zlog(ZLOG_DEBUG, "ckpt", logrank, "ignoring %s: its tag is there", path);
            continue;
        case ZCK_ENTRY_UNFINISHED:
            /* said by a load's search (the ckpt tools list it themselves): a save stopped
             * while writing (a kill, a crash) lost that tag, which the load cannot say
             * otherwise; the tag it loads is named after the search */
            if (say && !thorough)
                zlog(ZLOG_WARN, "ckpt", logrank, "passing over %s: an unfinished save (in "
                     "progress, or stopped while writing), never loaded; the tag's next save "
                     "replaces it, and other saves remove it once it is 15 minutes old", path);
            else
                zlog(ZLOG_DEBUG, "ckpt", logrank, "ignoring %s: an unfinished save, never a "
                     "tag", path);
            continue;
        case ZCK_ENTRY_DEEPSPEED:
            nds++;                                /* not damaged: DeepSpeed's */
            continue;
        case ZCK_ENTRY_UNREADABLE:
            if (say)
                zlog(ZLOG_WARN, "ckpt", logrank, "skipping checkpoint %s: cannot read it: %s",
                     path, why);
            ndamaged++;
            continue;
        case ZCK_ENTRY_UNKNOWN:
            if (say)
                zlog(ZLOG_WARN, "ckpt", logrank, "passing over %s: cannot read it (%s), and its "
                     "name is not a tag's zinc writes; if it is a checkpoint, make it readable",
                     path, why);
            continue;
        case ZCK_ENTRY_LOST:
            if (say)
                zlog(ZLOG_WARN, "ckpt", logrank, "skipping damaged checkpoint %s: it has no %s",
                     path, ZCK_MANIFEST);
            ndamaged++;
            continue;
        case ZCK_ENTRY_NONE:
            continue;
        case ZCK_ENTRY_TAG:
            break;
        }
        int is_old = ln > 4 && !strcmp(nm + ln - 4, ".old");
        char mp[4600], e2[ZCK_ERR];
        snprintf(mp, sizeof mp, "%s/%s", path, ZCK_MANIFEST);
        struct stat ms;
        if (stat(mp, &ms) != 0) continue;   /* (gone since the look above) */
        /* Only the manifest here: opening every tag's rank files (their headers and sizes)
         * made a load's pick cost tags x (ranks + 2) opens, 52 ms at 400 tags of 2 ranks; the
         * tags are opened below in the order tried, until one opens. */
        int64_t step = 0;
        char hash[32] = "";
        int left = 0;
        if (manifest_of(path, &step, hash, &left, e2) != ZINC_OK) {
            if (say) zlog(ZLOG_WARN, "ckpt", logrank, "skipping damaged checkpoint %s: %s", path, e2);
            ndamaged++;
            continue;
        }
        if (nc == cap) {
            cap = cap ? 2 * cap : 16;
            zcand *g = realloc(c, (size_t)cap * sizeof *c);
            if (!g) { free(c); closedir(dd); return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt: out of memory"); }
            c = g;
        }
        snprintf(c[nc].name, sizeof c[nc].name, "%s", nm);
        c[nc].old = is_old;
        c[nc].tried = 0;
        c[nc].step = step;
        c[nc].latest_left = left;
        memcpy(c[nc].hash, hash, sizeof hash);
        c[nc].mtime = (double)ms.st_mtim.tv_sec + 1e-9 * (double)ms.st_mtim.tv_nsec;
        nc++;
    }
    closedir(dd);
    int found = 0;
    int64_t lstep = INT64_MAX; /* latest's step; unknown (no latest): every tag "below" it */
    char lhash[32] = "";       /* and its config hash */
    double lt = 0.0;           /* when latest was written */
    if (latest[0]) {
        struct stat ls;
        snprintf(path, sizeof path, "%s/%s", dir, ZCK_LATEST);
        if (stat(path, &ls) == 0) lt = (double)ls.st_mtim.tv_sec + 1e-9 * (double)ls.st_mtim.tv_nsec;
        for (int i = 0; i < nc; i++)
            if (cand_is(&c[i], latest)) {   /* (a T.old of it: said below, once opened) */
                found = 1;
                lstep = c[i].step;
                memcpy(lhash, c[i].hash, sizeof lhash);
            }
        snprintf(path, sizeof path, "%s/%s", dir, latest);
        if (!found) /* damaged (a rank file), yet its manifest may still say its step */
            lstep = manifest_step(path, lhash);
        if (say && !found && access(path, F_OK) != 0)
            zlog(ZLOG_WARN, "ckpt", logrank, "%s/latest names \"%s\", which does not exist", dir, latest);
    }
    /* Taken over latest's tag (group 0) only with its run's config hash too: a save of the
     * run that wrote latest. A copy (cp -r, rsync without -t) makes every tag newer than
     * latest or not in the order it copies them: a run abandoned by a resume from an earlier
     * tag with another config (lr, batch, world size) was taken over latest's tag there.
     * Never a tag saved leaving latest as it was (save_latest=False): latest still names the
     * tag to resume, as in DeepSpeed. */
    for (int i = 0; i < nc; i++)
        c[i].group = found && cand_is(&c[i], latest) ? 1
                     : c[i].step > lstep && c[i].mtime > lt && !strcmp(c[i].hash, lhash) &&
                           !c[i].latest_left ? 0
                     : c[i].step <= lstep ? 2
                                          : 3;
    if (nc) qsort(c, (size_t)nc, sizeof *c, cmp_cand);
    /* In that order, the tags are opened (rank files, headers, sizes) until the one this search
     * takes: the (skip_upto + 1)-th that opens — or, `thorough` (the ckpt tools' look at a save
     * directory), all of them, so that each damaged one is named. A tag that does not open is
     * said by the search that first reaches it (each earlier search stopped at the tag it took). */
    int pick = -1, prev = -1, nopen = 0;
    for (int i = 0; i < nc && (pick < 0 || thorough); i++) {
        if (!try_open(dir, &c[i], nopen >= skip_upto, logrank)) {
            ndamaged++;
            continue;
        }
        if (nopen == skip_upto - 1) prev = i;
        if (nopen++ == skip_upto) pick = i;
    }
    for (int i = 0; say && latest[0] && i < nc; i++)
        if (c[i].old && cand_is(&c[i], latest))
            zlog(ZLOG_WARN, "ckpt", logrank, c[i].tried > 0
                 ? "%s/latest names \"%s\", which does not exist; %s/%s holds its previous "
                   "contents whole (a save over it stopped between its renames)"
                 : "%s/latest names \"%s\", which does not exist", dir, latest, dir, c[i].name);
    if (pick >= 0 && latest[0] && !cand_is(&c[pick], latest) && c[pick].group == 0)
        zlog(ZLOG_WARN, "ckpt", logrank, "%s/latest names \"%s\", but %s was saved after it was "
             "written (a save stopped before updating latest): loading %s", dir, latest,
             c[pick].name, c[pick].name);
    else if (pick >= 0 && skip_upto == 0 && c[pick].group == 1) {
        /* a higher step that a load could take instead (one that opens) */
        for (int i = 0; i < nc; i++)
            if (c[i].step > c[pick].step && !c[i].latest_left && try_open(dir, &c[i], 0, logrank)) {
                zlog(ZLOG_WARN, "ckpt", logrank, "%s/latest names \"%s\" (step %lld); %s has "
                     "step %lld: loading %s, as latest says (give the tag to load another)", dir,
                     latest, (long long)c[pick].step, c[i].name, (long long)c[i].step, latest);
                break;
            }
    }
    if (pick < 0) {
        int nvalid = nopen;
        free(c);
        if (nvalid == 0 && ndamaged == 0 && nds > 0)
            return deepspeed_refused(dir, "holds checkpoints in", err);
        /* a DeepSpeed tag given as the save directory (a zinc one beside such a file is not) */
        if (nvalid == 0 && ndamaged == 0 && is_deepspeed_tag(dir))
            return deepspeed_refused(dir, "is a checkpoint in", err);
        if (nvalid == 0 && ndamaged == 0) /* nothing to warn about: say what was looked for */
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO,
                            "no checkpoint in %s: none of its directories holds a %s",
                            dir, ZCK_MANIFEST);
        return zerr_fmt(err, ZCK_ERR, nvalid || ndamaged ? ZINC_ERR_CORRUPT : ZINC_ERR_IO,
                        "no valid checkpoint in %s (%d that do not open, %d whose data "
                        "failed to load; see the warnings above)", dir, ndamaged, skip_upto);
    }
    if (prev >= 0) /* the one the last attempt failed on (the attempts before named theirs) */
        zlog(ZLOG_WARN, "ckpt", logrank, "skipping %s/%s: its data failed to load (see above)", dir,
             c[prev].name);
    snprintf(tagdir, tagdir_n, "%s/%s", dir, c[pick].name);
    snprintf(tagname, tagname_n, "%s", c[pick].name);
    free(c);
    return ZINC_OK;
}

zinc_status zck_find_tag(const char *dir, const char *tag, int skip_upto, int logrank,
                         char *tagdir, size_t tagdir_n, char *tagname, size_t tagname_n,
                         char *err)
{
    return find_tag(dir, tag, skip_upto, logrank, 0, tagdir, tagdir_n, tagname, tagname_n, err);
}
