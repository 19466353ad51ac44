/*
 * json_strict.c — see json_strict.h. A recursive-descent walk of RFC 8259's grammar that builds
 * nothing but the decoded keys of the object it is in (to find duplicates in a hash table) and
 * the path for messages. Linear in the text: every byte is looked at a bounded number of times.
 */
#include "base/json_strict.h"
#include "base/utf8.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZJSON_MAX_DEPTH 256

typedef struct {
    char *b;
    size_t n, cap;
} dbuf;

typedef struct {
    const unsigned char *s;
    size_t n, i;
    const zjson_opts *o;
    size_t *bad;
    char *why;
    size_t whyn;
    int rc;             /* 0, -1 (offence), -2 (out of memory) */
    dbuf path;
} P;

static int fail(P *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(P *p, size_t at, const char *fmt, ...)
{
    if (p->rc) return p->rc;
    p->rc = -1;
    if (p->bad) *p->bad = at;
    if (p->o && p->o->fail_path && p->o->fail_path_n)
        snprintf(p->o->fail_path, p->o->fail_path_n, "%s", p->path.b ? p->path.b : "");
    if (p->why && p->whyn) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->why, p->whyn, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int oom(P *p)
{
    if (!p->rc) p->rc = -2;
    if (p->why && p->whyn) snprintf(p->why, p->whyn, "out of memory");
    return -2;
}

static int put(P *p, dbuf *d, const char *x, size_t k)
{
    if (!d) return 0;
    if (d->n + k + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->n + k + 1) cap *= 2;
        char *nb = realloc(d->b, cap);
        if (!nb) return oom(p);
        d->b = nb;
        d->cap = cap;
    }
    memcpy(d->b + d->n, x, k);
    d->n += k;
    d->b[d->n] = 0;
    return 0;
}

static int put_cp(P *p, dbuf *d, unsigned cp)
{
    char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return put(p, d, b, k);
}

static void ws(P *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(const unsigned char *h, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = h[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* A string at p->i (on its opening quote); decoded into out when out is not NULL. */
static int string(P *p, dbuf *out)
{
    const unsigned char *s = p->s;
    size_t start = p->i++;
    for (;;) {
        if (p->i >= p->n) return fail(p, start, "unterminated string");
        unsigned c = s[p->i];
        if (c == '"') {
            p->i++;
            return 0;
        }
        if (c < 0x20)
            return fail(p, p->i, "raw control character 0x%02x in a string (write it as \\u%04x)",
                        c, c);
        if (c == '\\') {
            size_t esc = p->i;
            if (p->i + 1 >= p->n) return fail(p, start, "unterminated string");
            unsigned e = s[p->i + 1], cp;
            p->i += 2;
            switch (e) {
            case '"': case '\\': case '/': cp = e; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (p->i + 4 > p->n || hex4(s + p->i, &cp))
                    return fail(p, esc, "\\u must be followed by 4 hex digits");
                p->i += 4;
                if (cp == 0)
                    return fail(p, esc, "\\u0000 (a NUL character) in a string: it would cut the "
                                        "string short");
                if (cp >= 0xD800 && cp < 0xDC00) {
                    unsigned lo;
                    if (p->i + 6 > p->n || s[p->i] != '\\' || s[p->i + 1] != 'u' ||
                        hex4(s + p->i + 2, &lo) || lo < 0xDC00 || lo >= 0xE000)
                        return fail(p, esc, "unpaired UTF-16 surrogate \\u%04x", cp);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    return fail(p, esc, "unpaired UTF-16 surrogate \\u%04x", cp);
                }
                break;
            default:
                return fail(p, esc, "invalid escape \\%c in a string", (int)e);
            }
            if (put_cp(p, out, cp)) return p->rc;
            continue;
        }
        if (c < 0x80) {
            if (put(p, out, (const char *)s + p->i, 1)) return p->rc;
            p->i++;
            continue;
        }
        /* UTF-8: the shortest form of a scalar value, nothing else. */
        size_t k;
        unsigned cp, bad;
        switch (zutf8_decode(s + p->i, p->n - p->i, &k, &cp, &bad)) {
        case ZUTF8_OK: break;
        case ZUTF8_BAD_BYTE:
            return fail(p, p->i, "invalid UTF-8 (byte 0x%02x) in a string", bad);
        case ZUTF8_TRUNCATED:
            return fail(p, p->i, "invalid UTF-8 (truncated sequence) in a string");
        default:
            return fail(p, p->i, "invalid UTF-8 (overlong, surrogate or beyond U+10FFFF) in a string");
        }
        if (put(p, out, (const char *)s + p->i, k)) return p->rc;
        p->i += k;
    }
}

static int isdig(P *p) { return p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'; }

static int number(P *p)
{
    size_t st = p->i;
    int neg = p->s[p->i] == '-';
    if (neg) p->i++;
    if (!isdig(p)) return fail(p, st, "not a JSON value");
    size_t d0 = p->i;
    if (p->s[p->i] == '0') {
        p->i++;
        if (isdig(p)) return fail(p, d0, "a number with a leading zero (not JSON)");
    } else {
        while (isdig(p)) p->i++;
    }
    size_t dend = p->i;
    int integer = 1;
    if (p->i < p->n && p->s[p->i] == '.') {
        integer = 0;
        p->i++;
        if (!isdig(p)) return fail(p, p->i, "a digit must follow the decimal point");
        while (isdig(p)) p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        integer = 0;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (!isdig(p)) return fail(p, p->i, "an exponent needs digits");
        while (isdig(p)) p->i++;
    }
    if (integer) {
        /* JSON parsers clamp or round what does not fit; a silent change of value is refused. */
        size_t nd = dend - d0;
        const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
        if (nd > 19 || (nd == 19 && memcmp(p->s + d0, lim, 19) > 0)) {
            if (p->o && p->o->fail_is_value) *p->o->fail_is_value = 1;
            return fail(p, st, "integer %.*s is outside the 64-bit range", (int)(p->i - st),
                        (const char *)p->s + st);
        }
    }
    return 0;
}

static int value(P *p, int depth);

static void path_add(P *p, const char *key, size_t idx, int is_index)
{
    char tmp[32];
    if (is_index) {
        snprintf(tmp, sizeof tmp, "[%zu]", idx);
        put(p, &p->path, tmp, strlen(tmp));
    } else {
        if (p->path.n) put(p, &p->path, ".", 1);
        put(p, &p->path, key, strlen(key));
    }
}

static void path_cut(P *p, size_t n)
{
    p->path.n = n;
    if (p->path.b) p->path.b[n] = 0;
}

/* The keys of one object: decoded text in `arena`, an open-addressing table of entries. */
typedef struct {
    uint64_t h;
    size_t koff, at;
    int used;
} kent;

static uint64_t fnv(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t j = 0; j < n; j++) h = (h ^ (unsigned char)k[j]) * 1099511628211ull;
    return h;
}

static int object(P *p, int depth)
{
    dbuf arena = {0};
    kent *tab = NULL;
    size_t cap = 0, count = 0, base = p->path.n;
    int rc = 0;
    p->i++; /* { */
    ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return 0;
    }
    for (;;) {
        ws(p);
        if (p->i >= p->n || p->s[p->i] != '"') {
            rc = fail(p, p->i, p->i < p->n && p->s[p->i] == '}' ? "a comma before '}'"
                                                                : "expected a key string");
            break;
        }
        size_t at = p->i, koff = arena.n;
        if ((rc = string(p, &arena)) != 0) break;
        if ((rc = put(p, &arena, "", 1)) != 0) break; /* keep the NUL: keys back to back */
        const char *key = arena.b + koff;
        size_t klen = arena.n - koff - 1;
        if (2 * (count + 1) > cap) {
            size_t ncap = cap ? cap * 2 : 16;
            kent *nt = calloc(ncap, sizeof *nt);
            if (!nt) { rc = oom(p); break; }
            for (size_t j = 0; j < cap; j++)
                if (tab[j].used) {
                    size_t q = (size_t)tab[j].h & (ncap - 1);
                    while (nt[q].used) q = (q + 1) & (ncap - 1);
                    nt[q] = tab[j];
                }
            free(tab);
            tab = nt;
            cap = ncap;
        }
        uint64_t h = fnv(key, klen);
        size_t q = (size_t)h & (cap - 1);
        int dup = 0;
        while (tab[q].used) {
            if (tab[q].h == h && !strcmp(arena.b + tab[q].koff, key)) {
                dup = 1;
                break;
            }
            q = (q + 1) & (cap - 1);
        }
        if (dup) {
            if (!p->o || !p->o->on_dup) {
                rc = fail(p, at, "duplicate key \"%s\"", key);
                break;
            }
            p->o->on_dup(p->o->ctx, p->path.b ? p->path.b : "", key, tab[q].at, at);
        } else {
            tab[q] = (kent){h, koff, at, 1};
            count++;
        }
        ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') {
            rc = fail(p, p->i, "expected ':' after a key");
            break;
        }
        p->i++;
        path_add(p, arena.b + koff, 0, 0);
        rc = value(p, depth + 1);
        path_cut(p, base);
        if (rc) break;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            break;
        }
        rc = fail(p, p->i, "expected ',' or '}' in an object");
        break;
    }
    free(tab);
    free(arena.b);
    return rc;
}

static int array(P *p, int depth)
{
    size_t base = p->path.n;
    p->i++; /* [ */
    ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return 0;
    }
    for (size_t idx = 0;; idx++) {
        path_add(p, NULL, idx, 1);
        int rc = value(p, depth + 1);
        path_cut(p, base);
        if (rc) return rc;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            ws(p);
            if (p->i < p->n && p->s[p->i] == ']') return fail(p, p->i, "a comma before ']'");
            continue;
        }
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            return 0;
        }
        return fail(p, p->i, "expected ',' or ']' in an array");
    }
}

static int literal(P *p, const char *word)
{
    size_t k = strlen(word);
    if (p->i + k <= p->n && !memcmp(p->s + p->i, word, k)) {
        p->i += k;
        return 0;
    }
    return -1;
}

static int value(P *p, int depth)
{
    ws(p);
    if (p->rc) return p->rc;
    if (depth > ZJSON_MAX_DEPTH) return fail(p, p->i, "nested deeper than %d", ZJSON_MAX_DEPTH);
    if (p->i >= p->n) return fail(p, p->i, "unexpected end of input");
    unsigned c = p->s[p->i];
    if (c == '{') return object(p, depth);
    if (c == '[') return array(p, depth);
    if (c == '"') return string(p, NULL);
    if (c == '-' || (c >= '0' && c <= '9')) return number(p);
    if (!literal(p, "true") || !literal(p, "false") || !literal(p, "null")) {
        /* "trueish": the word must end there */
        if (p->i < p->n && ((p->s[p->i] | 0x20) >= 'a' && (p->s[p->i] | 0x20) <= 'z'))
            return fail(p, p->i, "not a JSON value");
        return 0;
    }
    if (c == '\'') return fail(p, p->i, "single-quoted string (JSON strings use \")");
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return fail(p, p->i, "not a JSON value (NaN and Infinity are not JSON)");
    return fail(p, p->i, "not a JSON value");
}

int zjson_strict(const char *text, size_t len, const zjson_opts *opts, size_t *bad_off, char *why,
                 size_t whyn)
{
    P p = {(const unsigned char *)text, len, 0, opts, bad_off, why, whyn, 0, {0}};
    if (why && whyn) why[0] = 0;
    if (opts && opts->fail_is_value) *opts->fail_is_value = 0;
    int rc = value(&p, 0);
    if (!rc) {
        int spaces = opts && opts->spaces_only_after;
        while (p.i < p.n && (p.s[p.i] == ' ' || (!spaces && (p.s[p.i] == '\t' || p.s[p.i] == '\n' ||
                                                             p.s[p.i] == '\r'))))
            p.i++;
        if (p.i < p.n) rc = fail(&p, p.i, "unexpected text after the end of the document");
    }
    free(p.path.b);
    return rc ? p.rc : 0;
}

void zjson_line_col(const char *text, size_t off, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}
