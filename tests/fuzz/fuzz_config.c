/*
 * fuzz_config.c — the config parser (config/: zcfg_parse_text) on arbitrary bytes. Contract: it
 * returns OK or CONFIG (never crashes, never another code), explains every rejection with at
 * least one line, and an accepted config's canonical JSON is accepted again with the same hash.
 * Each input is parsed at world size 1 and at world size 4 (the batch rule depends on it).
 */
#include <string.h>

#include "config/config.h"
#include "fuzz.h"

static void parse_once(const char *text, int world)
{
    zcfg_overrides ov = {.world_size = world, .lr = -1.0};
    zcfg c;
    zcfg_diag d = {0};
    zinc_status s = zcfg_parse_text(text, "fuzz.json", &ov, &c, &d);
    FUZZ_CHECK(s == ZINC_OK || s == ZINC_ERR_CONFIG || s == ZINC_ERR_NOMEM, "status %s",
               zinc_status_string(s));
    if (s == ZINC_ERR_CONFIG) FUZZ_CHECK(d.nerrors > 0, "a rejection without a message");
    if (s == ZINC_OK) {
        char *canon = zcfg_to_json(&c);
        FUZZ_CHECK(canon != NULL, "zcfg_to_json failed");
        zcfg c2;
        zcfg_diag d2 = {0};
        zinc_status s2 = zcfg_parse_text(canon, "canonical", &ov, &c2, &d2);
        FUZZ_CHECK(s2 == ZINC_OK && c2.hash == c.hash,
                   "canonical JSON not accepted with the same hash (%s, %s):\n%s",
                   zinc_status_string(s2), d2.nerrors ? d2.errors[0] : "", canon);
        zcfg_diag_free(&d2);
        free(canon);
    }
    zcfg_diag_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;   /* the API takes a C string: an embedded NUL ends the text */
    parse_once(text, 1);
    parse_once(text, 4);
    free(text);
    return 0;
}
