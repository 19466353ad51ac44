/*
 * safetensors.c — export of a checkpoint's master weights to .safetensors, and the reader the
 * engine uses to take initial weights from one (zinc_load_safetensors).
 *
 * The format: 8 bytes little-endian N, then N bytes of JSON header {"__metadata__": {str: str},
 * name: {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]}}, then
 * the data section; offsets are relative to its start, little-endian, row-major. We write the
 * header ourselves (not through json-c) so that its bytes are fixed by the checkpoint alone:
 * __metadata__ first, tensors sorted by name, data in the same order, padding with spaces to a
 * multiple of 8 bytes as the reference implementation does.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"
#include "base/json_strict.h"
#include "ckpt/ckpt.h"
#include "base/log.h"
#include "kernels/device.h"

/* ---- a growable text buffer ------------------------------------------------------------------- */

typedef struct { char *p; size_t n, cap; int oom; } zbuf;

static void zb_put(zbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void zb_printf(zbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void zb_printf(zbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) zb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void zb_jstr(zbuf *b, const char *s)
{
    zb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            zb_put(b, e, 2);
        } else if (c < 0x20) {
            zb_printf(b, "\\u%04x", c);
        } else {
            zb_put(b, (const char *)&c, 1);
        }
    }
    zb_put(b, "\"", 1);
}

static const char *st_dtype(zinc_dtype d)
{
    return d == ZINC_DTYPE_FP16 ? "F16" : d == ZINC_DTYPE_BF16 ? "BF16" : "F32";
}

static const zck_manifest *sort_m;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(sort_m->tensors[*(const int *)a].name, sort_m->tensors[*(const int *)b].name);
}

static zinc_status write_all(FILE *f, const void *p, size_t n, const char *path, char *err)
{
    if (n && fwrite(p, 1, n, f) != n)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return ZINC_OK;
}

zinc_status zck_export_safetensors(const char *tagdir, const char *out, zinc_dtype dt,
                                   int threads, char *err)
{
    zck_reader *r = NULL;
    zinc_status s = zck_open(tagdir, &r, err);
    if (s != ZINC_OK) return s;
    const zck_manifest *m = zck_reader_manifest(r);
    int *order = malloc(((size_t)m->ntensors + 1) * sizeof *order);
    zbuf h = {0};
    float *f32 = NULL;
    uint16_t *h16 = NULL;
    FILE *f = NULL;
    char tmp[4200] = "";
    if (!order) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "export: out of memory"); goto done; }
    uint64_t maxn = 0;
    for (int i = 0; i < m->ntensors; i++) {
        order[i] = i;
        if (m->tensors[i].numel > maxn) maxn = m->tensors[i].numel;
    }
    /* qsort has no context argument; exports do not run concurrently within one process */
    sort_m = m;
    qsort(order, (size_t)m->ntensors, sizeof *order, cmp_name);
    for (int i = 1; i < m->ntensors; i++)
        if (!strcmp(m->tensors[order[i]].name, m->tensors[order[i - 1]].name)) {
            s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, "export: tensor name %s appears twice",
                         m->tensors[order[i]].name);
            goto done;
        }
    size_t es = zinc_dtype_size(dt);
    static const char head[] = "{\"__metadata__\":{\"format\":\"pt\",\"zinc_tag\":";
    zb_put(&h, head, sizeof head - 1);
    zb_jstr(&h, m->tag);
    zb_printf(&h, ",\"zinc_step\":\"%" PRId64 "\",\"zinc_config_hash\":", m->step);
    zb_jstr(&h, m->config_hash);
    zb_put(&h, "}", 1);
    uint64_t off = 0;
    for (int k = 0; k < m->ntensors; k++) {
        const zck_tensor *t = &m->tensors[order[k]];
        zb_put(&h, ",", 1);
        zb_jstr(&h, t->name);
        zb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype(dt));
        for (int d = 0; d < t->ndim; d++) zb_printf(&h, "%s%" PRId64, d ? "," : "", t->shape[d]);
        zb_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + t->numel * es);
        off += t->numel * es;
    }
    zb_put(&h, "}", 1);
    while (!h.oom && h.n % 8) zb_put(&h, " ", 1);
    f32 = malloc((size_t)(maxn ? maxn : 1) * sizeof *f32);
    if (es == 2) h16 = malloc((size_t)(maxn ? maxn : 1) * sizeof *h16);
    if (h.oom || !f32 || (es == 2 && !h16)) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM,
                     "export: out of memory (the largest tensor has %" PRIu64 " elements)", maxn);
        goto done;
    }
    /* a fresh name (mkstemp), never an existing file or a symlink planted at OUT.tmp */
    f = zfile_create_beside(out, tmp, sizeof tmp);
    if (!f) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot create a file beside %s: %s", out,
                     strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)h.n >> (8 * b));
    s = write_all(f, len8, 8, tmp, err);
    if (s == ZINC_OK) s = write_all(f, h.p, h.n, tmp, err);
    for (int k = 0; k < m->ntensors && s == ZINC_OK; k++) {
        int ti = order[k];
        const zck_tensor *t = &m->tensors[ti];
        zck_target tg = {ti, 0, t->numel, f32};
        s = zck_read(r, ZCK_MASTER, &tg, 1, threads, err);
        if (s != ZINC_OK) break;
        if (es == 4) {
            s = write_all(f, f32, t->numel * 4, tmp, err);   /* little-endian hosts only */
        } else {
            for (uint64_t i = 0; i < t->numel; i++)
                h16[i] = dt == ZINC_DTYPE_FP16 ? zk_f32_to_f16(f32[i]) : zk_f32_to_bf16(f32[i]);
            s = write_all(f, h16, t->numel * 2, tmp, err);
        }
    }
    if (s == ZINC_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot flush %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && s == ZINC_OK)
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    f = NULL;
    if (s == ZINC_OK && rename(tmp, out) != 0)
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (s != ZINC_OK) unlink(tmp);
done:
    if (f) { fclose(f); unlink(tmp); }
    free(order);
    free(h.p);
    free(f32);
    free(h16);
    zck_close(r);
    return s;
}

/* ---- reading ---------------------------------------------------------------------------------- */

void zst_close(zst_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f->e);
    free(f);
}

int zst_find(const zst_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return i;
    return -1;
}

#define STBAD(...) zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, __VA_ARGS__)

/* Bytes per element of a safetensors dtype name, 0 when unknown. */
static size_t st_dtype_size(const char *d)
{
    static const struct { const char *n; size_t b; } t[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
        {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8},
        {"U64", 8}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(d, t[i].n)) return t[i].b;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const zst_entry *x = *(const zst_entry *const *)a, *y = *(const zst_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

zinc_status zst_open(const char *path, zst_file **out, char *err)
{
    *out = NULL;
    zst_file *f = calloc(1, sizeof *f);
    if (!f) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory");
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = zck_open_regular(path, err);
    zinc_status s = ZINC_OK;
    char *hdr = NULL;
    json_object *o = NULL;
    if (f->fd < 0) { s = ZINC_ERR_IO; goto fail; }  /* err names the path and why */
    struct stat st;
    uint8_t l8[8];
    if (fstat(f->fd, &st) != 0 || pread(f->fd, l8, 8, 0) != 8) {
        s = STBAD("%s: not a safetensors file (shorter than 8 bytes)", path);
        goto fail;
    }
    uint64_t hl = 0;
    for (int b = 0; b < 8; b++) hl |= (uint64_t)l8[b] << (8 * b);
    uint64_t fsz = (uint64_t)st.st_size;
    if (hl < 2 || hl > (100u << 20) || 8 + hl > fsz) {
        s = STBAD("%s: header length %" PRIu64 " does not fit the file (%" PRIu64 " bytes)", path, hl, fsz);
        goto fail;
    }
    hdr = malloc(hl + 1);
    if (!hdr || pread(f->fd, hdr, hl, 8) != (ssize_t)hl) {
        s = STBAD("%s: cannot read the %" PRIu64 "-byte header", path, hl);
        goto fail;
    }
    hdr[hl] = 0;
    f->data_off = 8 + hl;
    {
        /* As strict as the format's reference reader: one JSON object, padded with spaces only,
         * valid UTF-8, no duplicate names (json-c would keep the last). */
        size_t bad = 0;
        char why[200];
        zjson_opts jo = {1, NULL, NULL, NULL, 0, NULL};
        int rc = zjson_strict(hdr, hl, &jo, &bad, why, sizeof why);
        if (rc == -2) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory"); goto fail; }
        if (rc || hdr[0] != '{') {
            s = STBAD("%s: the header is not valid: %s at header byte %zu", path,
                      rc ? why : "it must start with '{'", rc ? bad : (size_t)0);
            goto fail;
        }
    }
    o = json_tokener_parse(hdr);
    if (!o || !json_object_is_type(o, json_type_object)) {
        s = STBAD("%s: the header is not a JSON object", path);
        goto fail;
    }
    int n = json_object_object_length(o);
    f->e = calloc((size_t)n + 1, sizeof *f->e);
    if (!f->e) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory"); goto fail; }
    uint64_t dsz = fsz - f->data_off;
    json_object_object_foreach(o, key, v) {
        if (!strcmp(key, "__metadata__")) {
            int okm = json_object_is_type(v, json_type_object);
            if (okm) {
                json_object_object_foreach(v, mk, mv) {
                    (void)mk;
                    if (!json_object_is_type(mv, json_type_string)) okm = 0;
                }
            }
            if (!okm) {
                s = STBAD("%s: __metadata__ must map names to strings", path);
                goto fail;
            }
            continue;
        }
        zst_entry *e = &f->e[f->n];
        json_object *dt, *sh, *offs;
        if (strlen(key) >= sizeof e->name || !json_object_is_type(v, json_type_object) ||
            !json_object_object_get_ex(v, "dtype", &dt) || !json_object_is_type(dt, json_type_string) ||
            !json_object_object_get_ex(v, "shape", &sh) || !json_object_is_type(sh, json_type_array) ||
            json_object_array_length(sh) > ZCK_MAX_DIMS ||
            !json_object_object_get_ex(v, "data_offsets", &offs) ||
            !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2) {
            s = STBAD("%s: entry \"%s\" is malformed (dtype, shape, data_offsets)", path, key);
            goto fail;
        }
        snprintf(e->name, sizeof e->name, "%s", key);
        snprintf(e->dtype_name, sizeof e->dtype_name, "%s", json_object_get_string(dt));
        e->supported = 1;
        if (!strcmp(e->dtype_name, "F32")) e->dtype = ZINC_DTYPE_FP32;
        else if (!strcmp(e->dtype_name, "F16")) e->dtype = ZINC_DTYPE_FP16;
        else if (!strcmp(e->dtype_name, "BF16")) e->dtype = ZINC_DTYPE_BF16;
        else e->supported = 0;
        e->ndim = (int)json_object_array_length(sh);
        e->numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            json_object *x = json_object_array_get_idx(sh, (size_t)d);
            int64_t xv = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
            if (xv < 0 || (xv && e->numel > (UINT64_MAX >> 2) / (uint64_t)xv)) {
                s = STBAD("%s: entry \"%s\" has an invalid shape", path, key);
                goto fail;
            }
            e->shape[d] = xv;
            e->numel *= (uint64_t)xv;
        }
        json_object *b0 = json_object_array_get_idx(offs, 0), *b1 = json_object_array_get_idx(offs, 1);
        int64_t bv = json_object_is_type(b0, json_type_int) ? json_object_get_int64(b0) : -1;
        int64_t ev = json_object_is_type(b1, json_type_int) ? json_object_get_int64(b1) : -1;
        if (bv < 0 || ev < bv || (uint64_t)ev > dsz) {
            s = STBAD("%s: entry \"%s\": data_offsets [%lld, %lld] lie outside the %" PRIu64
                      "-byte data section", path, key, (long long)bv, (long long)ev, dsz);
            goto fail;
        }
        e->begin = (uint64_t)bv;
        e->end = (uint64_t)ev;
        size_t esz = st_dtype_size(e->dtype_name);
        if (!esz) {
            s = STBAD("%s: entry \"%s\" has the unknown dtype \"%s\"", path, key, e->dtype_name);
            goto fail;
        }
        if (e->end - e->begin != e->numel * esz) {
            s = STBAD("%s: entry \"%s\": %" PRIu64 " bytes of data for %" PRIu64 " %s elements",
                      path, key, e->end - e->begin, e->numel, e->dtype_name);
            goto fail;
        }
        f->n++;
    }
    /* The tensors tile the data section exactly: sorted by offset, each starts where the last
     * ended, from 0 to the end of the file — no overlap, no gap, no trailing bytes. */
    {
        zst_entry **by = malloc(((size_t)f->n + 1) * sizeof *by);
        if (!by) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory"); goto fail; }
        for (int i = 0; i < f->n; i++) by[i] = &f->e[i];
        qsort(by, (size_t)f->n, sizeof *by, cmp_begin);
        uint64_t at = 0;
        for (int i = 0; i < f->n && s == ZINC_OK; i++) {
            if (by[i]->begin != at)
                s = STBAD("%s: entry \"%s\" starts at data byte %" PRIu64 ", not %" PRIu64
                          " (tensors overlap or leave a gap)", path, by[i]->name, by[i]->begin, at);
            at = by[i]->end;
        }
        free(by);
        if (s != ZINC_OK) goto fail;
        if (at != dsz) {
            s = STBAD("%s: the tensors cover %" PRIu64 " of the %" PRIu64 " data bytes (extra bytes "
                      "after the last tensor)", path, at, dsz);
            goto fail;
        }
    }
    json_object_put(o);
    free(hdr);
    *out = f;
    return ZINC_OK;
fail:
    if (o) json_object_put(o);
    free(hdr);
    zst_close(f);
    return s;
}

zinc_status zst_read_f32(zst_file *f, int i, uint64_t lo, uint64_t hi, float *dst, char *err)
{
    const zst_entry *e = &f->e[i];
    if (!e->supported)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_UNSUPPORTED,
                        "%s: tensor %s has dtype %s; zinc reads F32, F16 and BF16", f->path, e->name,
                        e->dtype_name);
    size_t es = zinc_dtype_size(e->dtype);
    size_t n = (size_t)(hi - lo);
    void *raw = es == 4 ? (void *)dst : malloc(n * es + 1);
    if (!raw) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "out of memory");
    size_t want = n * es, got = 0;
    off_t at = (off_t)(f->data_off + e->begin + lo * es);
    while (got < want) {
        ssize_t r = pread(f->fd, (char *)raw + got, want - got, at + (off_t)got);
        if (r <= 0) {
            if (raw != dst) free(raw);
            return zerr_fmt(err, ZCK_ERR, ZINC_ERR_IO, "%s: cannot read tensor %s", f->path, e->name);
        }
        got += (size_t)r;
    }
    if (es == 2) {
        const uint16_t *h = raw;
        for (size_t k = 0; k < n; k++)
            dst[k] = e->dtype == ZINC_DTYPE_FP16 ? zk_f16_to_f32(h[k]) : zk_bf16_to_f32(h[k]);
        free(raw);
    }
    return ZINC_OK;
}
