/*
 * utf8.h — one UTF-8 sequence read the strict way (RFC 3629): a scalar value in its shortest
 * form, no surrogate, nothing past U+10FFFF. Shared by the strict JSON reader (json_strict.c,
 * whose messages name what is wrong) and by what writes text that reader must take back (a
 * checkpoint's tag goes into its manifest as written).
 */
#ifndef ZINC_BASE_UTF8_H
#define ZINC_BASE_UTF8_H

#include <stddef.h>

typedef enum {
    ZUTF8_OK,
    ZUTF8_BAD_BYTE,     /* a lead byte no sequence starts with, or a continuation byte missing */
    ZUTF8_TRUNCATED,    /* the text ends inside the sequence */
    ZUTF8_NOT_SCALAR    /* overlong, a surrogate, or beyond U+10FFFF */
} zutf8_status;

/* The sequence at s, of whose bytes n are left; s[0] >= 0x80 (ASCII is the caller's). Sets *len
 * (its length) and *cp (the value) on ZUTF8_OK; on ZUTF8_BAD_BYTE *bad is the byte at fault. */
static inline zutf8_status zutf8_decode(const unsigned char *s, size_t n, size_t *len,
                                        unsigned *cp, unsigned *bad)
{
    unsigned c = s[0], v;
    size_t k;
    if ((c & 0xE0) == 0xC0) k = 2, v = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) k = 3, v = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) k = 4, v = c & 0x07;
    else {
        *bad = c;
        return ZUTF8_BAD_BYTE;
    }
    if (k > n) return ZUTF8_TRUNCATED;
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) {
            *bad = s[j];
            return ZUTF8_BAD_BYTE;
        }
        v = (v << 6) | (s[j] & 0x3F);
    }
    if ((k == 2 && v < 0x80) || (k == 3 && v < 0x800) || (k == 4 && v < 0x10000) ||
        v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
        return ZUTF8_NOT_SCALAR;
    *len = k;
    *cp = v;
    return ZUTF8_OK;
}

/* Whether the n bytes at s are all valid UTF-8. */
static inline int zutf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned cp, bad;
        if (zutf8_decode(u + i, n - i, &k, &cp, &bad) != ZUTF8_OK) return 0;
        i += k;
    }
    return 1;
}

#endif
