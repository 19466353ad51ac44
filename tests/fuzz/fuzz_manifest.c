/*
 * fuzz_manifest.c — the checkpoint manifest and rank-file parsers (ckpt/manifest.c:
 * zck_manifest_parse, zck_rankfile_parse) on arbitrary bytes. A manifest is sealed with a
 * checksum, so nearly every mutation would stop at the seal: each input is parsed as it is and,
 * when it has a manifest_xxh3 member, once more resealed (zck_manifest_reseal), which takes the
 * mutation into the structural checks behind the seal. The same bytes are also parsed as a
 * rank file (rank-N.json). Contract: OK, CORRUPT, UNSUPPORTED or NOMEM, a message with every
 * refusal, and what is accepted writes back (zck_*_to_json) to text that is accepted again.
 */
#include <string.h>

#include "ckpt/ckpt.h"
#include "fuzz.h"

static int refusal_ok(zinc_status s, const char *err)
{
    return (s == ZINC_ERR_CORRUPT || s == ZINC_ERR_UNSUPPORTED || s == ZINC_ERR_NOMEM) && err[0];
}

static void manifest(const char *text, size_t len)
{
    char err[ZCK_ERR] = "";
    zck_manifest m;
    zinc_status s = zck_manifest_parse(text, len, "fuzz/manifest.json", &m, err);
    FUZZ_CHECK(s == ZINC_OK || refusal_ok(s, err), "manifest: %s: \"%s\"", zinc_status_string(s),
               err);
    if (s == ZINC_OK) {
        char *back = zck_manifest_to_json(&m);
        FUZZ_CHECK(back != NULL, "zck_manifest_to_json failed");
        zck_manifest m2;
        zinc_status s2 = zck_manifest_parse(back, strlen(back), "fuzz/written", &m2, err);
        FUZZ_CHECK(s2 == ZINC_OK, "a parsed manifest written back is refused: %s\n%s", err, back);
        FUZZ_CHECK(m2.ntensors == m.ntensors && m2.nranks == m.nranks && m2.step == m.step,
                   "a manifest written back parses to different counts");
        zck_manifest_free(&m2);
        free(back);
    }
    zck_manifest_free(&m);
}

static void rankfile(const char *text, size_t len)
{
    char err[ZCK_ERR] = "";
    zck_rankfile rf;
    zinc_status s = zck_rankfile_parse(text, len, "fuzz/rank-00000.json", &rf, err);
    FUZZ_CHECK(s == ZINC_OK || refusal_ok(s, err), "rank file: %s: \"%s\"",
               zinc_status_string(s), err);
    if (s != ZINC_OK) return;
    char *back = zck_rankfile_to_json(&rf);
    FUZZ_CHECK(back != NULL, "zck_rankfile_to_json failed");
    zck_rankfile rf2;
    zinc_status s2 = zck_rankfile_parse(back, strlen(back), "fuzz/written", &rf2, err);
    FUZZ_CHECK(s2 == ZINC_OK, "a parsed rank file written back is refused: %s\n%s", err, back);
    if (s2 == ZINC_OK) zck_rankfile_free(&rf2);
    free(back);
    zck_rankfile_free(&rf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    manifest((const char *)data, size);
    rankfile((const char *)data, size);
    char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    if (zck_manifest_reseal(copy, size) == 0) manifest(copy, size);
    free(copy);
    return 0;
}
