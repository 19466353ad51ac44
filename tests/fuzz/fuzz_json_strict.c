/*
 * fuzz_json_strict.c — base/json_strict.c's zjson_strict on arbitrary bytes, with the default
 * options and with the safetensors ones (spaces only after the value, a duplicate callback, the
 * failing path). Contract: 0, -1 or -2; a refusal points inside the text (or at its end) and
 * says why; text it accepts is also JSON to json-c (which builds the objects after the check).
 */
#include <json-c/json.h>
#include <string.h>

#include "base/json_strict.h"
#include "fuzz.h"

static void on_dup(void *ctx, const char *path, const char *key, size_t first, size_t dup)
{
    FUZZ_CHECK(path && key && first < dup, "duplicate callback: first %zu, dup %zu", first, dup);
    (*(int *)ctx)++;
}

static void check_accepted_by_jsonc(const uint8_t *data, size_t size)
{
    /* json-c gets the same bytes; its depth limit set above zjson_strict's (256). */
    json_tokener *tok = json_tokener_new_ex(300);
    if (!tok) return;
    json_object *o = json_tokener_parse_ex(tok, (const char *)data, (int)size);
    enum json_tokener_error je = json_tokener_get_error(tok);
    /* json-c's null is a NULL object; a number at the very end waits for more (continue). */
    FUZZ_CHECK(je == json_tokener_success || je == json_tokener_continue,
               "strict JSON refused by json-c: %s", json_tokener_error_desc(je));
    json_object_put(o);
    json_tokener_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    const char *text = (const char *)data;
    size_t bad = (size_t)-1;
    char why[200];
    why[0] = 0;
    int rc = zjson_strict(text, size, NULL, &bad, why, sizeof why);
    FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2, "rc %d", rc);
    if (rc == -1) {
        FUZZ_CHECK(bad <= size && why[0], "refusal at %zu of %zu, why \"%s\"", bad, size, why);
        int line = 0, col = 0;
        zjson_line_col(text, bad, &line, &col);
        FUZZ_CHECK(line >= 1 && col >= 1, "line %d col %d", line, col);
    }
    if (rc == 0 && size) check_accepted_by_jsonc(data, size);

    int dups = 0, is_value = -1;
    char path[128];
    zjson_opts o = {1, on_dup, &dups, path, sizeof path, &is_value};
    bad = (size_t)-1;
    int rc2 = zjson_strict(text, size, &o, &bad, why, sizeof why);
    FUZZ_CHECK(rc2 == 0 || rc2 == -1 || rc2 == -2, "rc %d", rc2);
    if (rc2 == -1) FUZZ_CHECK(bad <= size && (is_value == 0 || is_value == 1), "bad %zu", bad);
    return 0;
}
