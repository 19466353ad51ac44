/*
 * json_strict.h — one strict JSON check (RFC 8259) for every JSON zinc reads: configs,
 * checkpoint manifests, safetensors headers.
 *
 * json-c, which builds the objects, is lenient where a config or a file header must not be:
 * it accepts NaN and Infinity, single quotes, invalid UTF-8, raw control characters, "\u0000"
 * (silently cutting the string), leading zeros, integers beyond 64 bits (clamped), and keeps the
 * last of two equal keys without a word. This check runs over the same text, in one linear pass
 * (each object's keys go into a hash table), and reports the first offence with its byte offset.
 * It uses nothing of zinc.
 */
#ifndef ZINC_BASE_JSON_STRICT_H
#define ZINC_BASE_JSON_STRICT_H

#include <stddef.h>

/* A key that repeats an earlier key of the same object (compared decoded: "a" equals "\u0061").
 * `path` is the object's path from the root ("" for the root, "zero_optimization",
 * "ranks[2].streams"), `key` the decoded key, offsets of both keys' opening quotes. */
typedef void (*zjson_dup_fn)(void *ctx, const char *path, const char *key, size_t first_off,
                             size_t dup_off);

typedef struct zjson_opts {
    int spaces_only_after;  /* after the value allow only ' ' (safetensors' padding), else any JSON
                               whitespace */
    zjson_dup_fn on_dup;    /* called for each duplicate; NULL: a duplicate is an error */
    void *ctx;
    char *fail_path;        /* optional: receives the path of the value where the check failed */
    size_t fail_path_n;
    int *fail_is_value;     /* optional: 1 when the text is JSON but a value cannot be represented
                               (an integer beyond 64 bits), 0 for malformed text */
} zjson_opts;

/* 0 when text[0..len) is one strict JSON value followed only by allowed whitespace; else -1 with
 * *bad_off the offending byte and `why` (whyn bytes) saying what is wrong, or -2 when out of
 * memory. opts may be NULL (defaults above, duplicates are errors). */
int zjson_strict(const char *text, size_t len, const zjson_opts *opts, size_t *bad_off, char *why,
                 size_t whyn);

/* 1-based line and column of byte offset off (for messages). */
void zjson_line_col(const char *text, size_t off, int *line, int *col);

#endif
