/*
 * manifest.c — the manifest's JSON form (docs/checkpoint-format.md), written and parsed here
 * only. The parser trusts nothing: every index, range and size is checked before a reader uses
 * it, so a damaged or hostile manifest becomes a CORRUPT error instead of an out-of-bounds read.
 */
#include <inttypes.h>
#include <json-c/json.h>
#include <xxhash.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "base/json_strict.h"
#include "base/log.h"

void zck_rankfile_free(zck_rankfile *rf)
{
    if (!rf) return;
    for (int s = 0; s < ZCK_NSTREAMS; s++) free(rf->streams[s].chunks);
    free(rf->pieces);
    memset(rf, 0, sizeof *rf);
}

void zck_manifest_free(zck_manifest *m)
{
    if (!m) return;
    for (int r = 0; r < m->nranks; r++) zck_rankfile_free(&m->ranks[r]);
    free(m->ranks);
    free(m->tensors);
    free(m->engine_state);
    memset(m, 0, sizeof *m);
}

static size_t zck_stream_esize(int s, zinc_dtype dt)
{
    return s == ZCK_WEIGHTS16 ? zinc_dtype_size(dt) : 4;
}

/* ---- writing -------------------------------------------------------------------------------- */

static json_object *jhex(uint64_t x)
{
    char b[17];
    snprintf(b, sizeof b, "%016" PRIx64, x);
    return json_object_new_string(b);
}

static json_object *jint(uint64_t x) { return json_object_new_int64((int64_t)x); }

static json_object *rankfile_to_jobj(const zck_rankfile *rf)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "rank", json_object_new_int(rf->rank));
    json_object_object_add(o, "file", json_object_new_string(rf->file));
    json_object_object_add(o, "bytes", jint(rf->bytes));
    json_object *ss = json_object_new_object();
    for (int s = 0; s < ZCK_NSTREAMS; s++) {
        const zck_stream_info *si = &rf->streams[s];
        if (!si->present) continue;
        json_object *so = json_object_new_object();
        json_object_object_add(so, "dtype", json_object_new_string(zinc_dtype_name(si->dtype)));
        json_object_object_add(so, "offset", jint(si->file_off));
        json_object_object_add(so, "raw_bytes", jint(si->raw_bytes));
        json_object_object_add(so, "comp_bytes", jint(si->comp_bytes));
        json_object *ch = json_object_new_array();
        for (int k = 0; k < si->nchunks; k++) {
            const zck_chunk *c = &si->chunks[k];
            json_object *a = json_object_new_array();
            json_object_array_add(a, jint(c->raw_off));
            json_object_array_add(a, jint(c->raw_len));
            json_object_array_add(a, jint(c->file_off));
            json_object_array_add(a, jint(c->comp_len));
            json_object_array_add(a, jhex(c->raw_xxh3));
            json_object_array_add(a, jhex(c->comp_xxh3));
            json_object_array_add(ch, a);
        }
        json_object_object_add(so, "chunks", ch);
        json_object_object_add(ss, zck_stream_name(s), so);
    }
    json_object_object_add(o, "streams", ss);
    json_object *ps = json_object_new_array();
    for (int i = 0; i < rf->npieces; i++) {
        const zck_piece_rec *p = &rf->pieces[i];
        json_object *a = json_object_new_array();
        json_object_array_add(a, json_object_new_int(p->tensor));
        json_object_array_add(a, jint(p->lo));
        json_object_array_add(a, jint(p->hi));
        json_object_array_add(a, jint(p->elem_off));
        json_object_array_add(ps, a);
    }
    json_object_object_add(o, "pieces", ps);
    return o;
}

static char *jdump(json_object *o)
{
    const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE);
    char *r = t ? strdup(t) : NULL;
    json_object_put(o);
    return r;
}

char *zck_rankfile_to_json(const zck_rankfile *rf) { return jdump(rankfile_to_jobj(rf)); }

int zck_manifest_is_zinc(const char *path)
{
    char *txt, e[ZCK_ERR];
    size_t len;
    if (zck_read_file(path, &txt, &len, e) != ZINC_OK) return 0;
    json_object *o = json_tokener_parse(txt), *f;
    int ok = o && json_object_object_get_ex(o, "format", &f) &&
             json_object_is_type(f, json_type_string) &&
             !strcmp(json_object_get_string(f), "zinc-checkpoint");
    json_object_put(o);
    free(txt);
    return ok;
}

char *zck_manifest_to_json(const zck_manifest *m)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "format", json_object_new_string("zinc-checkpoint"));
    json_object_object_add(o, "format_version", json_object_new_int(m->version));
    json_object_object_add(o, "zinc_version", json_object_new_string(m->zinc_version));
    json_object_object_add(o, "tag", json_object_new_string(m->tag));
    json_object_object_add(o, "step", json_object_new_int64(m->step));
    json_object_object_add(o, "config_hash", json_object_new_string(m->config_hash));
    if (m->settings_hash[0])
        json_object_object_add(o, "settings_hash", json_object_new_string(m->settings_hash));
    if (m->latest_left)
        json_object_object_add(o, "save_latest", json_object_new_boolean(0));
    json_object_object_add(o, "world_size", json_object_new_int(m->world_size));
    json_object_object_add(o, "zero_stage", json_object_new_int(m->stage));
    json_object_object_add(o, "dtype", json_object_new_string(zinc_dtype_name(m->dtype)));
    json_object *codec = json_object_new_object();
    json_object_object_add(codec, "compressor", json_object_new_string("zstd"));
    json_object_object_add(codec, "level", json_object_new_int(m->level));
    json_object_object_add(codec, "shuffle", json_object_new_boolean(m->shuffle));
    json_object_object_add(codec, "chunk_bytes", jint(m->chunk_bytes));
    json_object_object_add(codec, "checksum", json_object_new_string("xxh3-64"));
    json_object_object_add(o, "codec", codec);
    json_object *st = json_object_new_array();
    for (int s = 0; s < ZCK_NSTREAMS; s++)
        if (m->streams & (1u << s)) json_object_array_add(st, json_object_new_string(zck_stream_name(s)));
    json_object_object_add(o, "streams", st);
    json_object *ts = json_object_new_array();
    for (int i = 0; i < m->ntensors; i++) {
        const zck_tensor *t = &m->tensors[i];
        json_object *to = json_object_new_object();
        json_object_object_add(to, "name", json_object_new_string(t->name));
        json_object *sh = json_object_new_array();
        for (int d = 0; d < t->ndim; d++) json_object_array_add(sh, json_object_new_int64(t->shape[d]));
        json_object_object_add(to, "shape", sh);
        json_object_object_add(to, "dtype", json_object_new_string(zinc_dtype_name(t->dtype)));
        json_object_object_add(to, "numel", jint(t->numel));
        json_object_array_add(ts, to);
    }
    json_object_object_add(o, "tensors", ts);
    json_object *es = NULL;
    if (m->engine_state) es = json_tokener_parse(m->engine_state);
    json_object_object_add(o, "engine_state", es);
    if (m->has_blob) {
        json_object *b = json_object_new_object();
        json_object_object_add(b, "file", json_object_new_string(ZCK_BLOB));
        json_object_object_add(b, "bytes", jint(m->blob_bytes));
        json_object_object_add(b, "xxh3", jhex(m->blob_xxh3));
        json_object_object_add(o, "client_blob", b);
    } else {
        json_object_object_add(o, "client_blob", NULL);
    }
    json_object *rs = json_object_new_array();
    for (int r = 0; r < m->nranks; r++) json_object_array_add(rs, rankfile_to_jobj(&m->ranks[r]));
    json_object_object_add(o, "ranks", rs);
    /* Last, so that it is the last occurrence of the key in the text: the seal. */
    json_object_object_add(o, ZCK_MANIFEST_SUM_KEY, json_object_new_string("0000000000000000"));
    char *text = jdump(o);
    if (text) zck_manifest_reseal(text, strlen(text));
    return text;
}

/* The offset of the 16 hex digits of the last manifest_xxh3 value in text, or -1. */
static ptrdiff_t sum_digits(const char *text, size_t len)
{
    static const char key[] = "\"" ZCK_MANIFEST_SUM_KEY "\"";
    const char *at = NULL;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), key, sizeof key - 1)); p++)
        at = p;
    if (!at) return -1;
    const char *q = at + sizeof key - 1;
    while (q < text + len && (*q == ' ' || *q == ':' || *q == '\n' || *q == '\t' || *q == '\r')) q++;
    if (q + 18 > text + len || q[0] != '"' || q[17] != '"') return -1;
    return q + 1 - text;
}

/* XXH3-64 of text with the 16 checksum digits at offset `d` read as zeros. */
static uint64_t sealed_hash(const char *text, size_t len, size_t d)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, text, d);
    XXH3_64bits_update(st, "0000000000000000", 16);
    XXH3_64bits_update(st, text + d + 16, len - d - 16);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int zck_manifest_reseal(char *text, size_t len)
{
    ptrdiff_t d = sum_digits(text, len);
    if (d < 0) return -1;
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, sealed_hash(text, len, (size_t)d));
    memcpy(text + d, hex, 16);
    return 0;
}

/* ---- parsing -------------------------------------------------------------------------------- */

#define BAD(...) zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT, __VA_ARGS__)

static int jget_u64(json_object *o, uint64_t *out)
{
    if (!o || !json_object_is_type(o, json_type_int)) return -1;
    int64_t v = json_object_get_int64(o);
    if (v < 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int jkey_u64(json_object *o, const char *k, uint64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v)) return -1;
    return jget_u64(v, out);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 16 lowercase hex digits (as written) into *out. */
static int jget_hex_str(const char *s, uint64_t *out)
{
    if (strlen(s) != 16) return -1;
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return -1;
    *out = strtoull(s, NULL, 16);
    return 0;
}

static int jget_hex(json_object *o, uint64_t *out)
{
    if (!o || !json_object_is_type(o, json_type_string)) return -1;
    return jget_hex_str(json_object_get_string(o), out);
}

static const char *jkey_str(json_object *o, const char *k)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static json_object *jkey_arr(json_object *o, const char *k)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_array))
        return NULL;
    return v;
}

/* Parses one rank entry and checks what it can alone: chunks tile each stream exactly, pieces
 * lie back to back and fill every stream. `dtype` is the weights16 element type. */
static zinc_status rankfile_from_jobj(json_object *o, const char *where, zinc_dtype dtype,
                                      zck_rankfile *rf, char *err)
{
    memset(rf, 0, sizeof *rf);
    uint64_t u;
    if (!json_object_is_type(o, json_type_object)) return BAD("%s: a rank entry is not an object", where);
    if (jkey_u64(o, "rank", &u) || u > 1000000) return BAD("%s: rank entry without a valid \"rank\"", where);
    rf->rank = (int)u;
    const char *f = jkey_str(o, "file");
    if (!f || !*f || strlen(f) >= sizeof rf->file || strchr(f, '/') || f[0] == '.')
        return BAD("%s: rank %d: missing or unsafe \"file\"", where, rf->rank);
    snprintf(rf->file, sizeof rf->file, "%s", f);
    if (jkey_u64(o, "bytes", &rf->bytes)) return BAD("%s: %s: missing \"bytes\"", where, rf->file);
    json_object *ss;
    if (!json_object_object_get_ex(o, "streams", &ss) || !json_object_is_type(ss, json_type_object))
        return BAD("%s: %s: missing \"streams\"", where, rf->file);
    json_object_object_foreach(ss, key, so) {
        int s = zck_stream_from_name(key);
        if (s < 0) return BAD("%s: %s: unknown stream \"%s\"", where, rf->file, key);
        zck_stream_info *si = &rf->streams[s];
        si->present = 1;
        const char *dt = json_object_is_type(so, json_type_object) ? jkey_str(so, "dtype") : NULL;
        if (!dt || zck_dtype_from_name(dt, &si->dtype))
            return BAD("%s: %s: stream %s has no valid dtype", where, rf->file, key);
        if (si->dtype != (s == ZCK_WEIGHTS16 ? dtype : ZINC_DTYPE_FP32))
            return BAD("%s: %s: stream %s has dtype %s, expected %s", where, rf->file, key, dt,
                       zinc_dtype_name(s == ZCK_WEIGHTS16 ? dtype : ZINC_DTYPE_FP32));
        if (jkey_u64(so, "offset", &si->file_off) || jkey_u64(so, "raw_bytes", &si->raw_bytes) ||
            jkey_u64(so, "comp_bytes", &si->comp_bytes))
            return BAD("%s: %s: stream %s lacks offset/raw_bytes/comp_bytes", where, rf->file, key);
        json_object *ch = jkey_arr(so, "chunks");
        if (!ch) return BAD("%s: %s: stream %s has no chunk list", where, rf->file, key);
        size_t n = json_object_array_length(ch);
        if (n > (1u << 30)) return BAD("%s: %s: too many chunks", where, rf->file);
        si->nchunks = (int)n;
        si->chunks = calloc(n ? n : 1, sizeof *si->chunks);
        if (!si->chunks) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where);
        uint64_t raw = 0, fo = si->file_off, esz = zck_stream_esize(s, si->dtype);
        for (size_t k = 0; k < n; k++) {
            json_object *a = json_object_array_get_idx(ch, k);
            zck_chunk *c = &si->chunks[k];
            if (!a || !json_object_is_type(a, json_type_array) || json_object_array_length(a) != 6 ||
                jget_u64(json_object_array_get_idx(a, 0), &c->raw_off) ||
                jget_u64(json_object_array_get_idx(a, 1), &c->raw_len) ||
                jget_u64(json_object_array_get_idx(a, 2), &c->file_off) ||
                jget_u64(json_object_array_get_idx(a, 3), &c->comp_len) ||
                jget_hex(json_object_array_get_idx(a, 4), &c->raw_xxh3) ||
                jget_hex(json_object_array_get_idx(a, 5), &c->comp_xxh3))
                return BAD("%s: %s: stream %s chunk %zu is malformed", where, rf->file, key, k);
            if (c->raw_off != raw || c->file_off != fo || c->raw_len == 0 || c->raw_len % esz ||
                c->comp_len == 0 || c->raw_len > (1ull << 40) || c->comp_len > (1ull << 40))
                return BAD("%s: %s: stream %s chunk %zu does not follow the previous one", where,
                           rf->file, key, k);
            raw += c->raw_len;
            fo += c->comp_len;
        }
        if (raw != si->raw_bytes || fo - si->file_off != si->comp_bytes || fo > rf->bytes)
            return BAD("%s: %s: stream %s chunks do not add up to its %" PRIu64 " raw / %" PRIu64
                       " stored bytes within the file", where, rf->file, key, si->raw_bytes,
                       si->comp_bytes);
    }
    json_object *ps = jkey_arr(o, "pieces");
    if (!ps) return BAD("%s: %s: missing \"pieces\"", where, rf->file);
    size_t np = json_object_array_length(ps);
    if (np > (1u << 30)) return BAD("%s: %s: too many pieces", where, rf->file);
    rf->npieces = (int)np;
    rf->pieces = calloc(np ? np : 1, sizeof *rf->pieces);
    if (!rf->pieces) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where);
    uint64_t elems = 0;
    for (size_t i = 0; i < np; i++) {
        json_object *a = json_object_array_get_idx(ps, i);
        zck_piece_rec *p = &rf->pieces[i];
        uint64_t t;
        if (!a || !json_object_is_type(a, json_type_array) || json_object_array_length(a) != 4 ||
            jget_u64(json_object_array_get_idx(a, 0), &t) || t > (1u << 30) ||
            jget_u64(json_object_array_get_idx(a, 1), &p->lo) ||
            jget_u64(json_object_array_get_idx(a, 2), &p->hi) ||
            jget_u64(json_object_array_get_idx(a, 3), &p->elem_off))
            return BAD("%s: %s: piece %zu is malformed", where, rf->file, i);
        p->tensor = (int)t;
        if (p->lo >= p->hi || p->elem_off != elems)
            return BAD("%s: %s: piece %zu has an empty range or is not back to back", where,
                       rf->file, i);
        elems += p->hi - p->lo;
    }
    for (int s = 0; s < ZCK_NSTREAMS; s++) {
        const zck_stream_info *si = &rf->streams[s];
        if (si->present && si->raw_bytes != elems * zck_stream_esize(s, si->dtype))
            return BAD("%s: %s: stream %s holds %" PRIu64 " bytes but its pieces need %" PRIu64,
                       where, rf->file, zck_stream_name(s), si->raw_bytes,
                       elems * zck_stream_esize(s, si->dtype));
    }
    return ZINC_OK;
}

static zinc_status parse_text(const char *text, size_t len, const char *where, json_object **out,
                              char *err)
{
    /* Strict JSON first: json-c would take NaN, keep the last of two equal keys, clamp big
     * integers — all ways for damage to pass as a value. */
    size_t bad = 0;
    char why[200];
    int rc = zjson_strict(text, len, NULL, &bad, why, sizeof why);
    if (rc == -2) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where);
    if (rc) {
        int line, col;
        zjson_line_col(text, bad, &line, &col);
        return BAD("%s:%d:%d: not valid JSON (%s); the file is damaged", where, line, col, why);
    }
    json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where);
    json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    if (o && (size_t)json_tokener_get_parse_end(tok) < len) {
        /* trailing whitespace is fine, anything else is damage */
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
            if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t') {
                json_object_put(o);
                o = NULL;
                break;
            }
    }
    json_tokener_free(tok);
    if (!o || !json_object_is_type(o, json_type_object)) {
        if (o) json_object_put(o);
        return BAD("%s: not a valid JSON object (%s); the file is damaged or truncated", where,
                   je == json_tokener_success ? "trailing or wrong content"
                                              : json_tokener_error_desc(je));
    }
    *out = o;
    return ZINC_OK;
}

zinc_status zck_rankfile_parse(const char *text, size_t len, const char *where, zck_rankfile *rf,
                               char *err)
{
    json_object *o;
    zinc_status s = parse_text(text, len, where, &o, err);
    if (s != ZINC_OK) return s;
    /* the weights16 dtype is checked against the manifest by the caller */
    json_object *ss, *w;
    zinc_dtype dt = ZINC_DTYPE_FP16;
    if (json_object_object_get_ex(o, "streams", &ss) && json_object_is_type(ss, json_type_object) &&
        json_object_object_get_ex(ss, "weights16", &w) && json_object_is_type(w, json_type_object)) {
        const char *n = jkey_str(w, "dtype");
        if (n) zck_dtype_from_name(n, &dt);
    }
    s = rankfile_from_jobj(o, where, dt, rf, err);
    json_object_put(o);
    if (s != ZINC_OK) zck_rankfile_free(rf);
    return s;
}

zinc_status zck_manifest_parse(const char *text, size_t len, const char *where, zck_manifest *m,
                               char *err)
{
    memset(m, 0, sizeof *m);
    json_object *o, *v;
    zinc_status s = parse_text(text, len, where, &o, err);
    if (s != ZINC_OK) return s;
    uint64_t u;
    const char *str;
    /* Version first: a newer writer may have changed anything else. */
    if (jkey_u64(o, "format_version", &u)) {
        s = BAD("%s: no \"format_version\"; not a zinc checkpoint manifest", where);
        goto fail;
    }
    if (u > ZCK_FORMAT_VERSION) {
        s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_UNSUPPORTED,
                     "%s: checkpoint format version %" PRIu64 " was written by a newer zinc; "
                     "this zinc (%s) reads versions up to %d — upgrade zinc to load it", where, u,
                     ZINC_VERSION_STRING, ZCK_FORMAT_VERSION);
        goto fail;
    }
    m->version = (int)u;
    if (u < 1) { s = BAD("%s: format_version 0 is not valid", where); goto fail; }
    if (u >= 2) {
        /* The seal: any edit of the manifest (a swapped tensor name, a changed scale or step)
         * shows here. The value must be the one the text's last manifest_xxh3 holds. */
        const char *sv = jkey_str(o, ZCK_MANIFEST_SUM_KEY);
        ptrdiff_t d = sum_digits(text, len);
        uint64_t want = 0;
        int ok = sv && d >= 0 && !jget_hex_str(sv, &want) && !strncmp(sv, text + d, 16) &&
                 want == sealed_hash(text, len, (size_t)d);
        if (!ok) {
            s = BAD("%s: the manifest fails its checksum (%s): it was edited or damaged after the "
                    "save; `zinc ckpt verify` names the checkpoint, an earlier tag may be intact",
                    where, sv ? "manifest_xxh3 does not match" : "no manifest_xxh3");
            goto fail;
        }
    }
    str = jkey_str(o, "format");
    if (!str || strcmp(str, "zinc-checkpoint")) {
        s = BAD("%s: \"format\" is not \"zinc-checkpoint\"", where);
        goto fail;
    }
    if ((str = jkey_str(o, "zinc_version"))) snprintf(m->zinc_version, sizeof m->zinc_version, "%s", str);
    if ((str = jkey_str(o, "tag"))) snprintf(m->tag, sizeof m->tag, "%s", str);
    if ((str = jkey_str(o, "config_hash"))) snprintf(m->config_hash, sizeof m->config_hash, "%s", str);
    if ((str = jkey_str(o, "settings_hash")))
        snprintf(m->settings_hash, sizeof m->settings_hash, "%s", str);
    if (json_object_object_get_ex(o, "save_latest", &v)) {   /* absent: true (and before it) */
        if (!json_object_is_type(v, json_type_boolean)) {
            s = BAD("%s: \"save_latest\" is not true or false", where);
            goto fail;
        }
        m->latest_left = !json_object_get_boolean(v);
    }
    if (!json_object_object_get_ex(o, "step", &v) || !json_object_is_type(v, json_type_int)) {
        s = BAD("%s: \"step\" is missing or not a whole number", where);
        goto fail;
    }
    m->step = json_object_get_int64(v);
    /* the engine's counters are JSON-exact integers (ckpt/state.c's range); the step picks the
     * newest tag, so a wild one must not win over the real newest */
    if (m->step < 0 || m->step > ZCK_STEP_MAX) {
        s = BAD("%s: \"step\" %" PRId64 " is out of range (0..2^53)", where, m->step);
        goto fail;
    }
    uint64_t ws, stage;
    if (jkey_u64(o, "world_size", &ws) || ws < 1 || ws > 1000000 || jkey_u64(o, "zero_stage", &stage) ||
        stage > 3) {
        s = BAD("%s: missing or invalid \"world_size\" / \"zero_stage\"", where);
        goto fail;
    }
    m->world_size = (int)ws;
    m->stage = (int)stage;
    str = jkey_str(o, "dtype");
    if (!str || zck_dtype_from_name(str, &m->dtype)) {
        s = BAD("%s: missing or invalid \"dtype\"", where);
        goto fail;
    }
    json_object *codec;
    if (!json_object_object_get_ex(o, "codec", &codec) || !json_object_is_type(codec, json_type_object) ||
        !(str = jkey_str(codec, "compressor")) || strcmp(str, "zstd") ||
        jkey_u64(codec, "chunk_bytes", &m->chunk_bytes) || m->chunk_bytes == 0 ||
        m->chunk_bytes > (1ull << 32) || !json_object_object_get_ex(codec, "shuffle", &v) ||
        !json_object_is_type(v, json_type_boolean)) {
        s = BAD("%s: missing or unsupported \"codec\" (this zinc reads zstd chunks of at most 4 GiB)",
                where);
        goto fail;
    }
    m->shuffle = json_object_get_boolean(v);
    if (json_object_object_get_ex(codec, "level", &v)) m->level = json_object_get_int(v);
    json_object *st = jkey_arr(o, "streams");
    if (!st) { s = BAD("%s: missing \"streams\"", where); goto fail; }
    for (size_t i = 0; i < json_object_array_length(st); i++) {
        json_object *e = json_object_array_get_idx(st, i);
        int k = json_object_is_type(e, json_type_string) ? zck_stream_from_name(json_object_get_string(e)) : -1;
        if (k < 0) { s = BAD("%s: unknown stream in \"streams\"", where); goto fail; }
        m->streams |= 1u << k;
    }
    if (!(m->streams & 1u)) { s = BAD("%s: the master stream is missing", where); goto fail; }
    json_object *ts = jkey_arr(o, "tensors");
    if (!ts) { s = BAD("%s: missing \"tensors\"", where); goto fail; }
    size_t nt = json_object_array_length(ts);
    if (nt > (1u << 24)) { s = BAD("%s: too many tensors", where); goto fail; }
    m->ntensors = (int)nt;
    m->tensors = calloc(nt ? nt : 1, sizeof *m->tensors);
    if (!m->tensors) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where); goto fail; }
    for (size_t i = 0; i < nt; i++) {
        json_object *to = json_object_array_get_idx(ts, i), *sh;
        zck_tensor *t = &m->tensors[i];
        const char *nm = json_object_is_type(to, json_type_object) ? jkey_str(to, "name") : NULL;
        const char *dt = nm ? jkey_str(to, "dtype") : NULL;
        if (!nm || !*nm || strlen(nm) >= sizeof t->name || !dt || zck_dtype_from_name(dt, &t->dtype) ||
            !(sh = jkey_arr(to, "shape")) || json_object_array_length(sh) < 1 ||
            json_object_array_length(sh) > ZCK_MAX_DIMS || jkey_u64(to, "numel", &t->numel)) {
            s = BAD("%s: tensor %zu is malformed (name, dtype, shape of 1..8 dims, numel)", where, i);
            goto fail;
        }
        snprintf(t->name, sizeof t->name, "%s", nm);
        t->ndim = (int)json_object_array_length(sh);
        uint64_t prod = 1;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t x;
            if (jget_u64(json_object_array_get_idx(sh, (size_t)d), &x) || x == 0 || x > (1ull << 40) ||
                prod > (1ull << 50) / x) {
                s = BAD("%s: tensor %s has an invalid shape", where, nm);
                goto fail;
            }
            t->shape[d] = (int64_t)x;
            prod *= x;
        }
        if (prod != t->numel) {
            s = BAD("%s: tensor %s: numel %" PRIu64 " is not the product of its shape", where, nm,
                    t->numel);
            goto fail;
        }
    }
    /* Names are how a load finds a tensor: two entries of one name would fill one parameter
     * twice. Sorted copy of the names, then neighbours. */
    if (nt > 1) {
        const char **names = malloc(nt * sizeof *names);
        if (!names) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where); goto fail; }
        for (size_t i = 0; i < nt; i++) names[i] = m->tensors[i].name;
        qsort(names, nt, sizeof *names, cmp_name);
        const char *dup = NULL;
        for (size_t i = 1; i < nt && !dup; i++)
            if (!strcmp(names[i - 1], names[i])) dup = names[i];
        if (dup) {
            s = BAD("%s: tensor name \"%s\" appears twice in the tensor table", where, dup);
            free(names);
            goto fail;
        }
        free(names);
    }
    if (json_object_object_get_ex(o, "engine_state", &v) && v) {
        if (!json_object_is_type(v, json_type_object)) {
            s = BAD("%s: \"engine_state\" is not an object", where);
            goto fail;
        }
        json_object *es;
        if (json_object_object_get_ex(v, "step", &es) && json_object_is_type(es, json_type_int) &&
            json_object_get_int64(es) != m->step) {
            s = BAD("%s: \"step\" %" PRId64 " disagrees with engine_state's step %" PRId64
                    " (the two are written together)", where, m->step, json_object_get_int64(es));
            goto fail;
        }
        m->engine_state = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    }
    if (json_object_object_get_ex(o, "client_blob", &v) && v) {
        json_object *h;
        if (!json_object_is_type(v, json_type_object) || !(str = jkey_str(v, "file")) ||
            strcmp(str, ZCK_BLOB) || jkey_u64(v, "bytes", &m->blob_bytes) ||
            !json_object_object_get_ex(v, "xxh3", &h) || jget_hex(h, &m->blob_xxh3)) {
            s = BAD("%s: \"client_blob\" is malformed", where);
            goto fail;
        }
        m->has_blob = 1;
    }
    json_object *rs = jkey_arr(o, "ranks");
    if (!rs || json_object_array_length(rs) != (size_t)m->world_size) {
        s = BAD("%s: \"ranks\" must list %d rank files", where, m->world_size);
        goto fail;
    }
    m->nranks = m->world_size;
    m->ranks = calloc((size_t)m->nranks, sizeof *m->ranks);
    if (!m->ranks) { s = zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "%s: out of memory", where); goto fail; }
    for (int r = 0; r < m->nranks; r++) {
        zck_rankfile *rf = &m->ranks[r];
        s = rankfile_from_jobj(json_object_array_get_idx(rs, (size_t)r), where, m->dtype, rf, err);
        if (s != ZINC_OK) goto fail;
        if (rf->rank != r) { s = BAD("%s: rank entry %d says rank %d", where, r, rf->rank); goto fail; }
        for (int k = 0; k < ZCK_NSTREAMS; k++)
            if (rf->streams[k].present != !!(m->streams & (1u << k))) {
                s = BAD("%s: %s: stream %s %s", where, rf->file, zck_stream_name(k),
                        rf->streams[k].present ? "is not listed in \"streams\"" : "is missing");
                goto fail;
            }
        for (int i = 0; i < rf->npieces; i++) {
            const zck_piece_rec *p = &rf->pieces[i];
            if (p->tensor >= m->ntensors || p->hi > m->tensors[p->tensor].numel) {
                s = BAD("%s: %s: piece %d lies outside the tensor table", where, rf->file, i);
                goto fail;
            }
        }
        for (int q = 0; q < r; q++)
            if (!strcmp(m->ranks[q].file, rf->file)) {
                s = BAD("%s: ranks %d and %d name the same file", where, q, r);
                goto fail;
            }
    }
    json_object_put(o);
    return ZINC_OK;
fail:
    json_object_put(o);
    zck_manifest_free(m);
    return s;
}
