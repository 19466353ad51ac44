/*
 * test_config_fuzz.c — a deterministic mutation fuzzer for the config parser: every corpus file
 * is mutated (bytes flipped, deleted, duplicated, replaced by JSON punctuation or by "auto",
 * 1e999, deep nesting) and parsed. The parser must never crash (run it under ASan/UBSan), must
 * return OK or CONFIG, must explain every rejection with at least one line, and an accepted text
 * must resolve to a canonical JSON that is accepted again with the same hash.
 *
 *   test_config_fuzz [ITERATIONS_PER_FILE [SEED]]   (default 300, seed 12345: seconds in CI)
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "testutil.h"

#ifndef ZINC_SOURCE_DIR
#define ZINC_SOURCE_DIR "."
#endif

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static const char *inserts[] = {"{", "}", "[", "]", ",", ":", "\"", "\"auto\"", "1e999", "-0",
                                "null", "true", "2.5", "\\u0000", "\"stage\": 1,", "[[[[[[[[",
                                "\"x\": {\"x\": {\"x\": 1}},", "'", "/*", "\xff", "\"\\ud800\""};

static void mutate(zt_rng *r, const char *src, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    int edits = 1 + (int)(zt_next(r) % 4);
    /* Choose edit positions up front; copy the text, applying edits as positions pass. */
    size_t pos[4];
    for (int e = 0; e < edits; e++) pos[e] = n ? zt_next(r) % n : 0;
    for (size_t i = 0; i <= n && o + 64 < cap; i++) {
        for (int e = 0; e < edits; e++) {
            if (pos[e] != i) continue;
            switch (zt_next(r) % 4) {
            case 0: /* insert a token */ {
                const char *t = inserts[zt_next(r) % (sizeof inserts / sizeof inserts[0])];
                size_t tl = strlen(t);
                if (o + tl + 64 < cap) {
                    memcpy(out + o, t, tl);
                    o += tl;
                }
                break;
            }
            case 1: /* delete the next byte */
                if (i < n) i++;
                break;
            case 2: /* flip a bit of the next byte */
                if (i < n && o + 1 < cap) out[o++] = (char)(src[i++] ^ (1 << (zt_next(r) % 7)));
                break;
            default: /* duplicate a slice */ {
                size_t len = 1 + zt_next(r) % 24;
                if (i + len <= n && o + len + 64 < cap) {
                    memcpy(out + o, src + i, len);
                    o += len;
                }
                break;
            }
            }
        }
        if (i < n) out[o++] = src[i];
    }
    out[o] = 0;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 300;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/config/corpus", ZINC_SOURCE_DIR);
    DIR *dp = opendir(dir);
    ZT_CHECK(dp != NULL, "cannot open %s", dir);
    if (!dp) return zt_finish("test_config_fuzz");
    zt_rng r = {argc > 2 ? strtoull(argv[2], NULL, 10) : 12345};
    static char buf[1 << 17];
    long total = 0, accepted = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        if (e->d_name[0] == '.') continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n;
        char *src = read_all(path, &n);
        ZT_CHECK(src != NULL, "cannot read %s", path);
        if (!src) continue;
        for (int it = 0; it < iters; it++) {
            mutate(&r, src, n, buf, sizeof buf);
            int world = 1 + (int)(zt_next(&r) % 8);
            zcfg_overrides ov = {.world_size = world, .lr = (zt_next(&r) & 1) ? 1e-4 : -1.0,
                                 .micro_batch = (int64_t)(zt_next(&r) % 3)};
            zcfg c;
            zcfg_diag d = {0};
            zinc_status s = zcfg_parse_text(buf, "fuzz", &ov, &c, &d);
            total++;
            if (s != ZINC_OK && s != ZINC_ERR_CONFIG) {
                ZT_CHECK(0, "%s: status %d for:\n%s", e->d_name, (int)s, buf);
            } else if (s == ZINC_ERR_CONFIG) {
                if (d.nerrors < 1) ZT_CHECK(0, "%s: rejected without a message:\n%s", e->d_name, buf);
            } else {
                accepted++;
                char *t = zcfg_to_json(&c);
                zcfg c2;
                zcfg_overrides plain = {.world_size = world, .lr = -1.0};
                zinc_status s2 = t ? zcfg_parse_text(t, "canonical", &plain, &c2, NULL) : ZINC_ERR_NOMEM;
                if (s2 != ZINC_OK || c2.hash != c.hash)
                    ZT_CHECK(0, "%s: canonical JSON not accepted with the same hash:\n%s", e->d_name, buf);
                free(t);
            }
            zcfg_diag_free(&d);
        }
        free(src);
    }
    closedir(dp);
    ZT_CHECK(total > 0 && accepted > 0, "fuzz: %ld parses, %ld accepted", total, accepted);
    printf("test_config_fuzz: %ld mutated configs, %ld accepted\n", total, accepted);
    return zt_finish("test_config_fuzz");
}
