/*
 * test_json_strict.c — base/json_strict.c against hand-written cases: what JSON allows passes,
 * each kind of offence fails at the right byte, duplicates are found by decoded key (and only
 * then: two keys sharing a long prefix are distinct), and the check is linear (100,000 keys in
 * one object; the time is printed, not asserted).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/json_strict.h"
#include "testutil.h"

static void ok(const char *t)
{
    size_t bad = 0;
    char why[200];
    int rc = zjson_strict(t, strlen(t), NULL, &bad, why, sizeof why);
    ZT_CHECK(rc == 0, "%s: refused at %zu: %s", t, bad, why);
}

static void no(const char *t, size_t at, const char *says)
{
    size_t bad = (size_t)-1;
    char why[200] = "";
    int rc = zjson_strict(t, strlen(t), NULL, &bad, why, sizeof why);
    ZT_CHECK(rc == -1 && bad == at && strstr(why, says), "%s: rc %d at %zu (%s), want offset %zu and '%s'",
             t, rc, bad, why, at, says);
}

typedef struct { int n; char path[64], key[64]; size_t first, dup; } dups;

static void on_dup(void *ctx, const char *path, const char *key, size_t first, size_t dup)
{
    dups *d = ctx;
    if (d->n++ == 0) {
        snprintf(d->path, sizeof d->path, "%s", path);
        snprintf(d->key, sizeof d->key, "%s", key);
        d->first = first;
        d->dup = dup;
    }
}

int main(void)
{
    ok("{}");
    ok(" [1, -0, 0.5, 1e9, -2E-3, 9223372036854775807, -9223372036854775808] ");
    ok("{\"a\": {\"b\": [true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"]}}");
    ok("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    no("{\"a\": NaN}", 6, "NaN");
    no("{\"a\": Infinity}", 6, "NaN and Infinity");
    no("{'a': 1}", 1, "expected a key");
    no("['a']", 1, "single-quoted");
    no("{\"a\": 01}", 6, "leading zero");
    no("{\"a\": 9223372036854775808}", 6, "64-bit");
    no("[-9223372036854775809]", 1, "64-bit");
    no("[1.]", 3, "decimal point");
    no("[1e]", 3, "exponent");
    no("[\"a\x01\"]", 3, "control character");
    no("[\"a\\u0000b\"]", 3, "NUL");
    no("[\"\\ud800\"]", 2, "surrogate");
    no("[\"\\udc00\"]", 2, "surrogate");
    no("[\"\xff\"]", 2, "UTF-8");
    no("[\"\xc0\xaf\"]", 2, "overlong");
    no("[\"\xed\xa0\x80\"]", 2, "surrogate");
    no("[\"\xe2\x82\"]", 2, "UTF-8");
    no("[\"\\q\"]", 2, "escape");
    no("{\"a\": 1,}", 8, "comma");
    no("[1,]", 3, "comma");
    no("{\"a\" 1}", 5, "':'");
    no("{\"a\": 1} x", 9, "after the end");
    no("[truex]", 5, "not a JSON value");
    no("{\"a\": 1, \"a\": 2}", 9, "duplicate key \"a\"");
    no("{\"ab\": 1, \"a\\u0062\": 2}", 10, "duplicate key \"ab\"");
    ok("{\"a\": {\"x\": 1}, \"b\": {\"x\": 1}}");   /* same key in two objects: fine */

    /* Trailing padding of safetensors headers: spaces only. */
    zjson_opts sp = {1, NULL, NULL, NULL, 0, NULL};
    size_t bad;
    char why[200];
    ZT_CHECK(zjson_strict("{}   ", 5, &sp, &bad, why, sizeof why) == 0, "spaces after: %s", why);
    ZT_CHECK(zjson_strict("{}\n", 3, &sp, &bad, why, sizeof why) == -1 && bad == 2,
             "a newline after, with spaces_only_after");

    /* Duplicates reported with their path, decoded, through the callback. */
    dups d = {0};
    zjson_opts o = {0, on_dup, &d, NULL, 0, NULL};
    const char *t = "{\"z\": [{\"k\": 1, \"q\": 2, \"\\u006b\": 3}]}";
    ZT_CHECK(zjson_strict(t, strlen(t), &o, &bad, why, sizeof why) == 0, "with a callback: %s", why);
    ZT_CHECK(d.n == 1 && !strcmp(d.path, "z[0]") && !strcmp(d.key, "k") && d.first == 8 &&
                 d.dup == 24, "duplicate: n %d path '%s' key '%s' at %zu/%zu", d.n, d.path, d.key,
             d.first, d.dup);

    /* A number that is JSON but does not fit: flagged as a value, with the path of its key. */
    {
        char where[64] = "";
        int is_value = -1;
        zjson_opts v = {0, NULL, NULL, where, sizeof where, &is_value};
        const char *big = "{\"a\": {\"b\": [1, 99999999999999999999]}}";
        ZT_CHECK(zjson_strict(big, strlen(big), &v, &bad, why, sizeof why) == -1 && is_value == 1 &&
                     !strcmp(where, "a.b[1]"), "integer overflow: value %d path '%s'", is_value,
                 where);
        ZT_CHECK(zjson_strict("{\"a\": 1.}", 8, &v, &bad, why, sizeof why) == -1 && is_value == 0,
                 "malformed text is not a value error");
    }

    /* Nesting: 256 levels pass, deeper is refused (the recursion's bound). */
    {
        char deep[602];
        for (int n = 256; n <= 300; n += 44) {
            memset(deep, '[', (size_t)n);
            memset(deep + n, ']', (size_t)n);
            int rc = zjson_strict(deep, 2 * (size_t)n, NULL, &bad, why, sizeof why);
            ZT_CHECK(n == 256 ? rc == 0 : rc == -1 && strstr(why, "nested deeper"),
                     "%d levels: rc %d (%s)", n, rc, why);
        }
    }

    /* Two distinct keys sharing a 600-byte prefix are not duplicates (a fixed key buffer once
     * made them so). */
    {
        char *big = malloc(2000), pre[601];
        memset(pre, 'p', 600);
        pre[600] = 0;
        snprintf(big, 2000, "{\"%sA\": 1, \"%sB\": 2}", pre, pre);
        ok(big);
        free(big);
    }

    /* Linear: 100,000 keys in one object. */
    {
        size_t n = 100000, cap = n * 24 + 16, at = 0;
        char *big = malloc(cap);
        at += (size_t)snprintf(big + at, cap - at, "{");
        for (size_t k = 0; k < n; k++)
            at += (size_t)snprintf(big + at, cap - at, "%s\"key%zu\": %zu", k ? ", " : "", k, k);
        at += (size_t)snprintf(big + at, cap - at, "}");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = zjson_strict(big, at, NULL, &bad, why, sizeof why);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ZT_CHECK(rc == 0, "100k keys: %s", why);
        printf("100,000 keys (%zu bytes) checked in %.1f ms\n", at,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        free(big);
    }
    return zt_finish("json_strict");
}
