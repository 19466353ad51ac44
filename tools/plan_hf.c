/*
 * plan_hf.c — `zinc plan --hf-config FILE`: the model's shape from a transformers config.json,
 * and its parameters counted as transformers builds them, so that a plan starts from the file a
 * user already has (issue 41 item 1). Families: GPT-2 (gpt2) and the Llama-style decoders
 * (llama, mistral, qwen2: gated SiLU MLP, RMSNorm, grouped key/value heads). Another model_type
 * is refused by name; its shape can still be given with --params, --layers and --hidden.
 */
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/json_strict.h"
#include "tools/plan.h"

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* A whole number >= 0 under `key`, or `dflt` when the key is absent or null (transformers'
 * default then applies). -1 when present but not a whole number >= 0. */
static long long count_of(json_object *o, const char *key, long long dflt)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return dflt;
    if (!json_object_is_type(v, json_type_int)) return -1;
    long long x = (long long)json_object_get_int64(v);
    return x >= 0 ? x : -1;
}

static int flag_of(json_object *o, const char *key, int dflt)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_boolean))
        return dflt;
    return json_object_get_boolean(v);
}

/* The counts a family needs, each > 0; names the first that is missing or bad. */
static int need(json_object *o, const char *path, char *err, size_t len, int n,
                const char *const *keys, long long *out)
{
    for (int i = 0; i < n; i++) {
        out[i] = count_of(o, keys[i], -2);      /* -2: absent or null */
        if (out[i] == -2)
            return fail(err, len, "%s: no \"%s\" (the model's count zinc plan needs)", path,
                        keys[i]);
        /* 2^40: past any real model's dimension, and short of the doubles' exact range, where
         * the head_dim division below would leave long long's */
        if (out[i] <= 0 || out[i] > (1LL << 40))
            return fail(err, len, "%s: \"%s\" must be a whole number in 1..2^40", path,
                        keys[i]);
    }
    return 0;
}

/* What a family's counts give the plan; seq from the context length (ctx, 0 = not stated) when
 * the caller gave none. The layer count is held to --layers' range here (it becomes an int); the
 * other values are checked against their flags' ranges by the caller. */
static int set_shape(zplan_in *in, double params, long long layers, double hidden, double vocab,
                     double ffn, int gated, double ctx, const char *path, char *err, size_t len)
{
    if (layers > 100000)
        return fail(err, len, "%s: %lld layers, more than --layers takes (100000)", path, layers);
    in->params = params;
    in->layers = (int)layers;
    in->hidden = hidden;
    in->vocab = vocab;
    in->ffn = ffn;
    in->gated = gated;
    if (in->seq <= 0 && ctx > 0) in->seq = ctx;
    return 0;
}

json_object *zplan_read_json(const char *path, char *why, size_t n)
{
    char *buf;
    size_t len;
    int e = zfile_read_regular(path, &buf, &len);
    if (e) {
        snprintf(why, n, "cannot read it (%s)", zfile_strerror(e));
        return NULL;
    }
    /* One object and nothing after it but whitespace: json_tokener_parse read the first value
     * and dropped the rest ('{"a":1}{"b":2}' was {"a":1}), and took `null` as a failure named
     * "success". Python's NaN and Infinity, which an HF config may hold, stay accepted. */
    json_tokener *tok = json_tokener_new();
    json_object *o = NULL;
    if (!tok) {
        snprintf(why, n, "not read (out of memory)");
    } else if (len > 0x7fffffffu) {
        snprintf(why, n, "not read (larger than 2 GiB)");
    } else {
        o = json_tokener_parse_ex(tok, buf, (int)len);
        enum json_tokener_error je = json_tokener_get_error(tok);
        size_t end = json_tokener_get_parse_end(tok);
        int line, col;
        if (!o && je == json_tokener_continue)
            snprintf(why, n, "not JSON (it ends inside a value)");
        else if (!o && je != json_tokener_success) {
            zjson_line_col(buf, end, &line, &col);
            snprintf(why, n, "not JSON (line %d:%d: %s)", line, col, json_tokener_error_desc(je));
        } else if (!json_object_is_type(o, json_type_object))
            snprintf(why, n, "not a JSON object (the file holds %s)",
                     o ? json_type_to_name(json_object_get_type(o)) : "null");
        else {
            while (end < len && (buf[end] == ' ' || buf[end] == '\t' || buf[end] == '\r' ||
                                 buf[end] == '\n'))
                end++;
            if (end < len) {
                zjson_line_col(buf, end, &line, &col);
                snprintf(why, n, "not JSON (line %d:%d: text after the JSON object)", line, col);
            } else {
                json_tokener_free(tok);
                free(buf);
                return o;
            }
        }
        json_object_put(o);
        o = NULL;
        json_tokener_free(tok);
    }
    free(buf);
    return o;
}

int zplan_from_hf_config(const char *path, zplan_in *in, char *err, size_t errlen)
{
    char why[256];
    json_object *o = zplan_read_json(path, why, sizeof why);
    if (!o) return fail(err, errlen, "%s: %s", path, why);
    int rc = -1;
    json_object *mt;
    const char *type = json_object_object_get_ex(o, "model_type", &mt) &&
                               json_object_is_type(mt, json_type_string)
                           ? json_object_get_string(mt) : NULL;
    if (!type) {
        rc = fail(err, errlen, "%s: no \"model_type\" (is it a transformers config.json?)", path);
    } else if (!strcmp(type, "gpt2")) {
        static const char *const keys[] = {"n_embd", "n_layer", "vocab_size", "n_positions"};
        long long k[4];
        if (need(o, path, err, errlen, 4, keys, k) == 0) {
            /* --layers, --hidden, --vocab and --ffn given as well replace the file's */
            double h = in->hidden > 0 ? in->hidden : (double)k[0];
            double L = in->layers > 0 ? in->layers : (double)k[1];
            double V = in->vocab > 0 ? in->vocab : (double)k[2], pos = (double)k[3];
            long long inner = count_of(o, "n_inner", 0);    /* null or absent: 4h */
            double I = in->ffn > 0 ? in->ffn : inner > 0 ? (double)inner : 4.0 * h;
            if (inner < 0) {
                json_object_put(o);
                return fail(err, errlen, "%s: \"n_inner\" must be null or a whole number above "
                            "0", path);
            }
            /* GPT2LMHeadModel: wte, wpe; per block ln_1 and ln_2 (weight, bias), c_attn (h x 3h
             * + 3h), attn c_proj (h x h + h), c_fc (h x I + I), mlp c_proj (I x h + h); ln_f;
             * the head tied to wte unless tie_word_embeddings is false. */
            double block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * I + I) + (I * h + h);
            /* learned position embeddings: no sequence past n_positions (RoPE's
             * max_position_embeddings, below, is a length trained for, not a table's size) */
            if (in->seq > pos)
                rc = fail(err, errlen, "%s: --seq %.0f is past GPT-2's \"n_positions\" %.0f, "
                          "the rows of its position table", path, in->seq, pos);
            else
                rc = set_shape(in, V * h + pos * h + L * block + 2 * h +
                                       (flag_of(o, "tie_word_embeddings", 1) ? 0 : V * h),
                               (long long)L, h, V, I, 0, pos, path, err, errlen);
        }
    } else if (!strcmp(type, "llama") || !strcmp(type, "mistral") || !strcmp(type, "qwen2")) {
        static const char *const keys[] = {"hidden_size", "num_hidden_layers", "vocab_size",
                                           "intermediate_size", "num_attention_heads"};
        long long k[5];
        if (need(o, path, err, errlen, 5, keys, k) == 0) {
            double h = in->hidden > 0 ? in->hidden : (double)k[0];   /* flags win, as above */
            double L = in->layers > 0 ? in->layers : (double)k[1];
            double V = in->vocab > 0 ? in->vocab : (double)k[2];
            double I = in->ffn > 0 ? in->ffn : (double)k[3];
            double heads = (double)k[4];
            long long kvh = count_of(o, "num_key_value_heads", k[4]);
            long long hd = count_of(o, "head_dim", (long long)h / k[4]);
            long long pos = count_of(o, "max_position_embeddings", 0);
            /* each named alone: the message named all three, also when head_dim was not in
             * the file but came out 0 from more heads than channels */
            if (kvh <= 0)
                rc = fail(err, errlen, "%s: \"num_key_value_heads\" must be a whole number above "
                          "0", path);
            else if (hd == 0 && count_of(o, "head_dim", -2) == -2)
                rc = fail(err, errlen, "%s: hidden size %.0f (%s) over %.0f attention heads "
                          "gives no head_dim; give \"head_dim\" in the file%s", path, h,
                          in->hidden > 0 ? "--hidden" : "hidden_size", heads,
                          in->hidden > 0 ? ", or a larger --hidden" : "");
            else if (hd <= 0)
                rc = fail(err, errlen, "%s: \"head_dim\" must be a whole number above 0", path);
            else if (pos < 0)
                rc = fail(err, errlen, "%s: \"max_position_embeddings\" must be a whole number "
                          "above 0", path);
            else {
                double q = heads * (double)hd, kv = (double)kvh * (double)hd;
                /* q, k, v, o projections; Qwen2 has q/k/v biases, Llama all four when
                 * attention_bias (o's is h wide); gate, up, down (biases with mlp_bias); two
                 * RMSNorm weights per layer, one at the end; the head unless tied. */
                int qwen = !strcmp(type, "qwen2"), llama = !strcmp(type, "llama");
                double attn = h * q + 2 * h * kv + q * h;
                if (qwen || (llama && flag_of(o, "attention_bias", 0))) attn += q + 2 * kv;
                if (llama && flag_of(o, "attention_bias", 0)) attn += h;
                double mlp = 3 * h * I + (llama && flag_of(o, "mlp_bias", 0) ? 2 * I + h : 0);
                rc = set_shape(in, V * h + L * (attn + mlp + 2 * h) + h +
                                       (flag_of(o, "tie_word_embeddings", 0) ? 0 : V * h),
                               (long long)L, h, V, I, 1, (double)pos, path, err, errlen);
            }
        }
    } else {
        rc = fail(err, errlen, "%s: model_type \"%s\" is not one zinc plan counts (gpt2, llama, "
                  "mistral, qwen2): give --params, --layers and --hidden instead", path, type);
    }
    json_object_put(o);
    return rc;
}
