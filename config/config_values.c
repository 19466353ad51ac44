/*
 * config_values.c — typed reads of config values: every value is checked for its JSON type and
 * range, and every problem becomes one "key.path: expected ..., got ..." line. "auto" is refused
 * here; the few keys zinc can fill read it themselves (config.c, config_optim.c).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

const char *zc_show(json_object *v)
{
    if (!v) return "null";
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

int zc_is_auto(json_object *v)
{
    return json_object_is_type(v, json_type_string) &&
           strcmp(json_object_get_string(v), "auto") == 0;
}

void zc_auto_error(zcctx *x, const char *path)
{
    zc_error(x, path,
             "\"auto\" needs a value zinc does not have here; write the value (zinc fills \"auto\" "
             "only from --micro-batch, --grad-accum, --train-batch-size and --lr)");
}

/* Looks a member up. Returns 0 when absent; JSON null counts as present (v == NULL). */
int zc_member(json_object *o, const char *key, json_object **v)
{
    *v = NULL;
    return o && json_object_object_get_ex(o, key, v);
}

/* A section that must be an object; NULL (and maybe an error) otherwise. */
json_object *zc_section(zcctx *x, json_object *o, const char *key, const char *path)
{
    json_object *v;
    if (!zc_member(o, key, &v)) return NULL;
    if (!json_object_is_type(v, json_type_object)) {
        zc_error(x, path, "expected an object {...}, got %s", zc_show(v));
        return NULL;
    }
    return v;
}

/* The common start of the zc_get_* readers: the member (V_ABSENT without it), its full path
 * "sec.key" into p[512], and DeepSpeed's "auto" refused (V_BAD). V_SET when there is a value. */
static int lookup(zcctx *x, json_object *o, const char *sec, const char *key, json_object **v,
                  char p[512])
{
    if (!zc_member(o, key, v)) return V_ABSENT;
    zc_path(p, 512, sec, key);
    if (zc_is_auto(*v)) {
        zc_auto_error(x, p);
        return V_BAD;
    }
    return V_SET;
}

int zc_get_bool(zcctx *x, json_object *o, const char *sec, const char *key, int *out)
{
    json_object *v;
    char p[512];
    int got = lookup(x, o, sec, key, &v, p);
    if (got != V_SET) return got;
    /* 1 and 0 (1.0, 0.0) as well: DeepSpeed's pydantic sections take them for true and false
     * (lax mode), and its plain keys test their truth, which is the same. Strings are refused:
     * pydantic reads "false" as false, a plain key as true. */
    json_type t = json_object_get_type(v);
    double n = t == json_type_int ? (double)json_object_get_int64(v)
               : t == json_type_double ? json_object_get_double(v) : -1.0;
    if (t != json_type_boolean && n != 0.0 && n != 1.0) {
        zc_error(x, p, "expected true or false (or 1 or 0), got %s", zc_show(v));
        return V_BAD;
    }
    *out = t == json_type_boolean ? json_object_get_boolean(v) : n == 1.0;
    return V_SET;
}

/* An integer in [lo, hi]; whole numbers written as floats (5e8, 2.0) are accepted, as
 * DeepSpeed's pp_int fields and Python's int() of a float are. */
int zc_get_int(zcctx *x, json_object *o, const char *sec, const char *key, int64_t lo,
                   int64_t hi, int64_t *out)
{
    json_object *v;
    char p[512];
    int got = lookup(x, o, sec, key, &v, p);
    if (got != V_SET) return got;
    int64_t n;
    if (json_object_is_type(v, json_type_int)) {
        n = json_object_get_int64(v);
        /* Integers beyond int64 are refused by the strict parse (json_strict.c) before json-c,
         * which would saturate them to these two; the two themselves are refused too: a count
         * or step there overflows the first sum it enters. */
        if (n == INT64_MAX || n == INT64_MIN) {
            zc_error(x, p, "expected a whole number inside the 64-bit range, got %s, its end "
                     "(refused: arithmetic with it overflows)", zc_show(v));
            return V_BAD;
        }
    } else if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        if (!isfinite(d) || d != floor(d)) {
            zc_error(x, p, "expected a whole number, got %s", zc_show(v));
            return V_BAD;
        }
        if (fabs(d) > 9.0e18) {
            zc_error(x, p, "expected a whole number between -9e18 and 9e18, got %s", zc_show(v));
            return V_BAD;
        }
        n = (int64_t)d;
    } else {
        zc_error(x, p, "expected a whole number, got %s", zc_show(v));
        return V_BAD;
    }
    if (n < lo || n > hi) {
        if (hi >= INT32_MAX && n < lo)
            zc_error(x, p, "expected a whole number >= %lld, got %s", (long long)lo, zc_show(v));
        else
            zc_error(x, p, "expected %lld..%lld, got %s", (long long)lo, (long long)hi, zc_show(v));
        return V_BAD;
    }
    *out = n;
    return V_SET;
}

int zc_get_int32(zcctx *x, json_object *o, const char *sec, const char *key, int lo, int hi,
                     int *out)
{
    int64_t v;
    int r = zc_get_int(x, o, sec, key, lo, hi, &v);
    if (r == V_SET) *out = (int)v;
    return r;
}

/* A finite number in the range: any, >= 0, > 0, [0, 1), [0, 1]. */
int zc_get_num(zcctx *x, json_object *o, const char *sec, const char *key, zrange r,
                   double *out)
{
    json_object *v;
    char p[512];
    int got = lookup(x, o, sec, key, &v, p);
    if (got != V_SET) return got;
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) {
        zc_error(x, p, "expected a number, got %s", zc_show(v));
        return V_BAD;
    }
    double d = json_object_get_double(v);
    static const char *what[] = {"a finite number", "a number >= 0", "a number > 0",
                                 "a number in [0, 1)", "a number in [0, 1]"};
    int ok = isfinite(d);
    if (ok && r == R_GE0) ok = d >= 0;
    if (ok && r == R_GT0) ok = d > 0;
    if (ok && r == R_UNIT_OPEN) ok = d >= 0 && d < 1;
    if (ok && r == R_UNIT_CLOSED) ok = d >= 0 && d <= 1;
    if (!ok) {
        zc_error(x, p, "expected %s, got %s", what[r], zc_show(v));
        return V_BAD;
    }
    *out = d;
    return V_SET;
}

int zc_get_str(zcctx *x, json_object *o, const char *sec, const char *key, const char **out)
{
    json_object *v;
    char p[512];
    if (!zc_member(o, key, &v)) return V_ABSENT;
    zc_path(p, sizeof p, sec, key);
    if (!json_object_is_type(v, json_type_string)) {
        zc_error(x, p, "expected a string, got %s", zc_show(v));
        return V_BAD;
    }
    *out = json_object_get_string(v);
    return V_SET;
}

void zc_lower(char *dst, size_t n, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) dst[i] = (char)tolower((unsigned char)s[i]);
    dst[i] = 0;
}

zinc_dtype zc_dtype_of(const char *s, int *ok)
{
    char l[16];
    zc_lower(l, sizeof l, s);
    *ok = 1;
    if (!strcmp(l, "fp32")) return ZINC_DTYPE_FP32;
    if (!strcmp(l, "fp16")) return ZINC_DTYPE_FP16;
    if (!strcmp(l, "bf16")) return ZINC_DTYPE_BF16;
    *ok = 0;
    return ZINC_DTYPE_FP32;
}

zinc_dtype zc_dtype_enum_of(const char *s, int *ok)
{
    static const struct { const char *name; zinc_dtype d; } names[] = {
        {"fp16", ZINC_DTYPE_FP16}, {"float16", ZINC_DTYPE_FP16}, {"half", ZINC_DTYPE_FP16},
        {"torch.float16", ZINC_DTYPE_FP16}, {"fp32", ZINC_DTYPE_FP32},
        {"float32", ZINC_DTYPE_FP32}, {"float", ZINC_DTYPE_FP32},
        {"torch.float32", ZINC_DTYPE_FP32}, {"bf16", ZINC_DTYPE_BF16},
        {"bfloat16", ZINC_DTYPE_BF16}, {"torch.bfloat16", ZINC_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *ok = 1;
            return names[i].d;
        }
    *ok = 0;
    return ZINC_DTYPE_FP32;
}

const char *zc_dtype_name(zinc_dtype d)
{
    return d == ZINC_DTYPE_FP16 ? "fp16" : d == ZINC_DTYPE_BF16 ? "bf16" : "fp32";
}
