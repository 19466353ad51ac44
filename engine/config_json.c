/*
 * config_json.c — the JSON text side of the config module: strict parsing with line:column
 * errors, duplicate-key detection, and the canonical resolved JSON whose XXH64 is the config
 * hash.
 *
 * json-c keeps the last of two equal keys without a word, so duplicates are found by a second,
 * small scan of the text (which json-c has already accepted, so the scan needs no error
 * handling beyond staying inside the buffer).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/config_internal.h"

/* ---- parsing ------------------------------------------------------------------------------ */

static void line_col(const char *text, size_t off, int *line, int *col)
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

json_object *zc_json_parse(zcctx *x, const char *text, const char *label)
{
    if (!label) label = "<config>";
    size_t len = strlen(text);
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        x->oom = 1;
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    /* json-c's length argument is an int. */
    if (len > (size_t)0x7fffffff) {
        zc_error(x, "", "%s: config text is larger than 2 GiB", label);
        json_tokener_free(tok);
        return NULL;
    }
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    int line, col;
    if (!root) {
        if (err == json_tokener_continue) {
            line_col(text, len, &line, &col);
            zc_error(x, "",
                     "%s:%d:%d: malformed JSON: unexpected end of input (an unclosed { [ or \")",
                     label, line, col);
        } else {
            /* The tokener stops on the offending character. */
            line_col(text, end, &line, &col);
            zc_error(x, "", "%s:%d:%d: malformed JSON: %s", label, line, col,
                     json_tokener_error_desc(err));
        }
        json_tokener_free(tok);
        return NULL;
    }
    /* json-c accepts 'single-quoted' strings, NaN and Infinity even in strict mode; JSON does
     * not. Outside double-quoted strings, a quote can only start such a string, and a word can
     * only be true, false, null or the exponent of a number. */
    int in_str = 0;
    for (size_t i = 0; i < end && root; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == '"') {
            in_str = 1;
            continue;
        }
        const char *bad = NULL;
        size_t at = i;
        if (ch == '\'') {
            bad = "single-quoted string (JSON strings use \")";
        } else if (isalpha((unsigned char)ch)) {
            size_t w = i;
            while (w < end && isalpha((unsigned char)text[w])) w++;
            size_t n = w - i;
            int exponent = i > 0 && (isdigit((unsigned char)text[i - 1]) || text[i - 1] == '.') &&
                           n == 1 && (ch == 'e' || ch == 'E');
            if (!exponent && !(n == 4 && !strncmp(text + i, "true", 4)) &&
                !(n == 5 && !strncmp(text + i, "false", 5)) &&
                !(n == 4 && !strncmp(text + i, "null", 4)))
                bad = "not a JSON value (NaN and Infinity are not JSON)";
            i = w - 1;
        }
        if (bad) {
            line_col(text, at, &line, &col);
            zc_error(x, "", "%s:%d:%d: malformed JSON: %s", label, line, col, bad);
            json_object_put(root);
            root = NULL;
        }
    }
    for (size_t i = end; i < len && root; i++) {
        if (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') continue;
        line_col(text, i, &line, &col);
        zc_error(x, "", "%s:%d:%d: malformed JSON: unexpected text after the end of the document",
                 label, line, col);
        json_object_put(root);
        root = NULL;
        break;
    }
    json_tokener_free(tok);
    return root;
}

/* ---- duplicate keys ----------------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t i, n;
    zcctx *x;
} dscan;

static void skip_ws(dscan *d)
{
    while (d->i < d->n && (d->s[d->i] == ' ' || d->s[d->i] == '\t' || d->s[d->i] == '\n' ||
                           d->s[d->i] == '\r'))
        d->i++;
}

static void put_utf8(char *out, size_t *o, size_t cap, unsigned cp)
{
    char b[4];
    int k;
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
    for (int j = 0; j < k && *o + 1 < cap; j++) out[(*o)++] = b[j];
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    }
    return v;
}

/* Reads a string at d->i (on the opening quote) and decodes it into out (truncated to cap), so
 * that "a" and "\u0061" compare equal as json-c sees them. */
static void read_string(dscan *d, char *out, size_t cap)
{
    size_t o = 0;
    d->i++;
    while (d->i < d->n && d->s[d->i] != '"') {
        char c = d->s[d->i];
        if (c == '\\' && d->i + 1 < d->n) {
            char e = d->s[d->i + 1];
            d->i += 2;
            unsigned cp = (unsigned char)e;
            switch (e) {
            case 'n': cp = '\n'; break;
            case 't': cp = '\t'; break;
            case 'r': cp = '\r'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'u':
                if (d->i + 4 <= d->n) {
                    cp = hex4(d->s + d->i);
                    d->i += 4;
                    /* A surrogate pair is one code point. */
                    if (cp >= 0xD800 && cp < 0xDC00 && d->i + 6 <= d->n && d->s[d->i] == '\\' &&
                        d->s[d->i + 1] == 'u') {
                        unsigned lo = hex4(d->s + d->i + 2);
                        if (lo >= 0xDC00 && lo < 0xE000) {
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            d->i += 6;
                        }
                    }
                }
                break;
            default: break;
            }
            put_utf8(out, &o, cap, cp);
            continue;
        }
        if (o + 1 < cap) out[o++] = c;
        d->i++;
    }
    d->i++; /* closing quote */
    out[o] = 0;
}

static void scan_value(dscan *d, const char *path, int depth);

static void scan_object(dscan *d, const char *path, int depth)
{
    /* Keys seen so far in this object, with the offset where each started. */
    typedef struct { char *key; size_t at; } seen_t;
    seen_t *seen = NULL;
    int nseen = 0, cap = 0;
    char key[512], kp[1024];

    d->i++; /* { */
    skip_ws(d);
    if (d->i < d->n && d->s[d->i] == '}') {
        d->i++;
        return;
    }
    while (d->i < d->n) {
        skip_ws(d);
        size_t at = d->i;
        read_string(d, key, sizeof key);
        zc_path(kp, sizeof kp, path, key);
        for (int k = 0; k < nseen; k++) {
            if (strcmp(seen[k].key, key) != 0) continue;
            int l1, c1, l2, c2;
            line_col(d->s, seen[k].at, &l1, &c1);
            line_col(d->s, at, &l2, &c2);
            zc_error(d->x, kp, "duplicate key (at line %d, first at line %d); keep one", l2, l1);
            break;
        }
        if (nseen == cap) {
            int ncap = cap ? cap * 2 : 16;
            seen_t *ns = realloc(seen, (size_t)ncap * sizeof *ns);
            if (!ns) {
                d->x->oom = 1;
                break;
            }
            seen = ns;
            cap = ncap;
        }
        seen[nseen].key = strdup(key);
        seen[nseen].at = at;
        if (!seen[nseen].key) d->x->oom = 1;
        else nseen++;
        skip_ws(d);
        d->i++; /* : */
        scan_value(d, kp, depth + 1);
        skip_ws(d);
        if (d->i < d->n && d->s[d->i] == ',') {
            d->i++;
            continue;
        }
        d->i++; /* } */
        break;
    }
    for (int k = 0; k < nseen; k++) free(seen[k].key);
    free(seen);
}

static void scan_value(dscan *d, const char *path, int depth)
{
    skip_ws(d);
    if (d->i >= d->n || depth > 200) return;
    char c = d->s[d->i];
    if (c == '{') {
        scan_object(d, path, depth);
    } else if (c == '[') {
        d->i++;
        char ip[1100];
        for (int idx = 0; d->i < d->n; idx++) {
            skip_ws(d);
            if (d->s[d->i] == ']') {
                d->i++;
                break;
            }
            snprintf(ip, sizeof ip, "%s[%d]", path, idx);
            scan_value(d, ip, depth + 1);
            skip_ws(d);
            if (d->i < d->n && d->s[d->i] == ',') d->i++;
        }
    } else if (c == '"') {
        char tmp[8];
        read_string(d, tmp, sizeof tmp);
    } else {
        /* number, true, false, null */
        while (d->i < d->n && !strchr(",]} \t\r\n", d->s[d->i])) d->i++;
    }
}

void zc_json_duplicates(zcctx *x, const char *text)
{
    dscan d = {text, 0, strlen(text), x};
    scan_value(&d, "", 0);
}

/* ---- canonical resolved JSON -------------------------------------------------------------- */

/* A double printed with the fewest digits that read back to the same value, so the text is
 * readable ("0.001", not "0.0010000000000000000208") and exact. */
static json_object *num(double v)
{
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e16) {
        /* Whole numbers in full ("300.0", "500000000.0"), not "3e+02". */
        snprintf(buf, sizeof buf, "%.1f", v);
        return json_object_new_double_s(v, buf);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* Keep it a JSON number that reads as a float where it looks like an integer. */
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    return json_object_new_double_s(v, buf);
}

static json_object *i64(int64_t v) { return json_object_new_int64(v); }
static json_object *boolean(int v) { return json_object_new_boolean(v != 0); }
static json_object *str(const char *s) { return json_object_new_string(s); }

static const char *dtype_str(zinc_dtype d)
{
    return d == ZINC_DTYPE_FP16 ? "fp16" : d == ZINC_DTYPE_BF16 ? "bf16" : "fp32";
}

static json_object *sched_json(const zcfg_sched *s)
{
    static const char *names[] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                  "OneCycle", "LRRangeTest"};
    json_object *o = json_object_new_object(), *p = json_object_new_object();
    json_object_object_add(o, "type", str(names[s->type]));
    const char *wt = s->warmup_type == ZWARMUP_LINEAR ? "linear" : "log";
    switch (s->type) {
    case ZSCHED_WARMUP_LR:
    case ZSCHED_WARMUP_DECAY_LR:
        json_object_object_add(p, "warmup_min_lr", num(s->warmup_min_lr));
        json_object_object_add(p, "warmup_max_lr", num(s->warmup_max_lr));
        json_object_object_add(p, "warmup_num_steps", i64(s->warmup_num_steps));
        json_object_object_add(p, "warmup_type", str(wt));
        if (s->type == ZSCHED_WARMUP_DECAY_LR)
            json_object_object_add(p, "total_num_steps", i64(s->total_num_steps));
        break;
    case ZSCHED_WARMUP_COSINE_LR:
        json_object_object_add(p, "total_num_steps", i64(s->total_num_steps));
        json_object_object_add(p, "warmup_min_ratio", num(s->warmup_min_ratio));
        json_object_object_add(p, "warmup_num_steps", i64(s->warmup_num_steps));
        json_object_object_add(p, "cos_min_ratio", num(s->cos_min_ratio));
        json_object_object_add(p, "warmup_type", str(wt));
        break;
    case ZSCHED_ONE_CYCLE:
        json_object_object_add(p, "cycle_min_lr", num(s->cycle_min_lr));
        json_object_object_add(p, "cycle_max_lr", num(s->cycle_max_lr));
        json_object_object_add(p, "decay_lr_rate", num(s->decay_lr_rate));
        json_object_object_add(p, "cycle_first_step_size", i64(s->cycle_first_step_size));
        json_object_object_add(p, "cycle_second_step_size", i64(s->cycle_second_step_size));
        json_object_object_add(p, "cycle_first_stair_count", i64(s->cycle_first_stair_count));
        json_object_object_add(p, "cycle_second_stair_count", i64(s->cycle_second_stair_count));
        json_object_object_add(p, "decay_step_size", i64(s->decay_step_size));
        json_object_object_add(p, "cycle_momentum", boolean(s->cycle_momentum));
        json_object_object_add(p, "cycle_min_mom", num(s->cycle_min_mom));
        json_object_object_add(p, "cycle_max_mom", num(s->cycle_max_mom));
        json_object_object_add(p, "decay_mom_rate", num(s->decay_mom_rate));
        break;
    case ZSCHED_LR_RANGE_TEST:
        json_object_object_add(p, "lr_range_test_min_lr", num(s->lr_range_test_min_lr));
        json_object_object_add(p, "lr_range_test_step_size", i64(s->lr_range_test_step_size));
        json_object_object_add(p, "lr_range_test_step_rate", num(s->lr_range_test_step_rate));
        json_object_object_add(p, "lr_range_test_staircase", boolean(s->lr_range_test_staircase));
        break;
    case ZSCHED_NONE:
    default:
        break;
    }
    json_object_object_add(o, "params", p);
    return o;
}

/* The resolved config as a DeepSpeed-style document: parsing it again gives the same zcfg
 * (tests rely on that). Members are in a fixed order, so equal configs give equal text. */
static json_object *to_object(const zcfg *c)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "train_batch_size", i64(c->train_batch_size));
    json_object_object_add(r, "train_micro_batch_size_per_gpu", i64(c->micro_batch));
    json_object_object_add(r, "gradient_accumulation_steps", i64(c->grad_accum));
    json_object_object_add(r, "gradient_clipping", num(c->gradient_clipping));
    json_object_object_add(r, "steps_per_print", i64(c->steps_per_print));
    json_object_object_add(r, "prescale_gradients", boolean(c->prescale_gradients));
    json_object_object_add(r, "gradient_predivide_factor", num(c->gradient_predivide_factor));
    json_object_object_add(r, "communication_data_type", str(dtype_str(c->communication_data_type)));
    json_object_object_add(r, "wall_clock_breakdown", boolean(c->wall_clock_breakdown));

    json_object *f = json_object_new_object();
    json_object_object_add(f, "enabled", boolean(c->fp16.enabled));
    json_object_object_add(f, "loss_scale", num(c->fp16.loss_scale));
    json_object_object_add(f, "initial_scale_power", i64(c->fp16.initial_scale_power));
    json_object_object_add(f, "loss_scale_window", i64(c->fp16.loss_scale_window));
    json_object_object_add(f, "hysteresis", i64(c->fp16.hysteresis));
    json_object_object_add(f, "consecutive_hysteresis", boolean(c->fp16.consecutive_hysteresis));
    json_object_object_add(f, "min_loss_scale", i64(c->fp16.min_loss_scale));
    json_object_object_add(r, "fp16", f);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "enabled", boolean(c->dtype == ZINC_DTYPE_BF16));
    json_object_object_add(r, "bf16", b);

    json_object *o = json_object_new_object(), *op = json_object_new_object();
    json_object_object_add(o, "type", str(c->optim.type_adamw ? "AdamW" : "Adam"));
    json_object_object_add(op, "lr", num(c->optim.lr));
    json_object *betas = json_object_new_array();
    json_object_array_add(betas, num(c->optim.beta1));
    json_object_array_add(betas, num(c->optim.beta2));
    json_object_object_add(op, "betas", betas);
    json_object_object_add(op, "eps", num(c->optim.eps));
    json_object_object_add(op, "weight_decay", num(c->optim.weight_decay));
    json_object_object_add(op, "bias_correction", boolean(c->optim.bias_correction));
    json_object_object_add(op, "adam_w_mode", boolean(c->optim.type_adamw));
    json_object_object_add(o, "params", op);
    json_object_object_add(r, "optimizer", o);

    if (c->sched.type != ZSCHED_NONE) json_object_object_add(r, "scheduler", sched_json(&c->sched));

    const zcfg_zero *z = &c->zero;
    json_object *zo = json_object_new_object();
    json_object_object_add(zo, "stage", i64(z->stage));
    json_object_object_add(zo, "reduce_bucket_size", i64(z->reduce_bucket_size));
    json_object_object_add(zo, "allgather_bucket_size", i64(z->allgather_bucket_size));
    json_object_object_add(zo, "overlap_comm", boolean(z->overlap_comm));
    json_object_object_add(zo, "contiguous_gradients", boolean(z->contiguous_gradients));
    json_object_object_add(zo, "reduce_scatter", boolean(z->reduce_scatter));
    json_object_object_add(zo, "allgather_partitions", boolean(z->allgather_partitions));
    json_object_object_add(zo, "round_robin_gradients", boolean(z->round_robin_gradients));
    json_object_object_add(zo, "sub_group_size", i64(z->sub_group_size));
    json_object_object_add(zo, "stage3_max_live_parameters", i64(z->max_live_parameters));
    json_object_object_add(zo, "stage3_max_reuse_distance", i64(z->max_reuse_distance));
    json_object_object_add(zo, "stage3_prefetch_bucket_size", i64(z->prefetch_bucket_size));
    json_object_object_add(zo, "stage3_param_persistence_threshold",
                           i64(z->param_persistence_threshold));
    json_object_object_add(zo, "stage3_gather_16bit_weights_on_model_save",
                           boolean(z->gather_16bit_weights_on_model_save));
    json_object *oo = json_object_new_object(), *opp = json_object_new_object();
    json_object_object_add(oo, "device", str(z->offload_optimizer ? "cpu" : "none"));
    json_object_object_add(opp, "device", str(z->offload_param ? "cpu" : "none"));
    json_object_object_add(zo, "offload_optimizer", oo);
    json_object_object_add(zo, "offload_param", opp);
    json_object_object_add(r, "zero_optimization", zo);

    static const char *tv[] = {"Ignore", "Warn", "Fail"};
    json_object *ck = json_object_new_object(), *pw = json_object_new_object();
    json_object_object_add(ck, "tag_validation", str(tv[c->ckpt.tag_validation]));
    json_object_object_add(ck, "load_universal", boolean(c->ckpt.load_universal));
    json_object_object_add(ck, "use_node_local_storage", boolean(c->ckpt.use_node_local_storage));
    json_object_object_add(pw, "pipeline_stage", boolean(c->ckpt.parallel_write));
    json_object_object_add(ck, "parallel_write", pw);
    json_object_object_add(r, "checkpoint", ck);

    json_object *cm = json_object_new_object();
    json_object_object_add(cm, "enabled", boolean(c->zinc.csv_monitor));
    json_object_object_add(cm, "output_path", str(c->zinc.csv_output_path));
    json_object_object_add(cm, "job_name", str(c->zinc.csv_job_name));
    json_object_object_add(r, "csv_monitor", cm);

    json_object *zi = json_object_new_object();
    json_object_object_add(zi, "ckpt_compression_level", i64(c->zinc.ckpt_compression_level));
    json_object_object_add(zi, "ckpt_async", boolean(c->zinc.ckpt_async));
    json_object_object_add(zi, "ckpt_chunk_bytes", i64((int64_t)c->zinc.ckpt_chunk_bytes));
    json_object_object_add(zi, "comm_timeout_s", num(c->zinc.comm_timeout_s));
    json_object_object_add(zi, "grad_buckets", i64(c->zinc.grad_buckets));
    json_object_object_add(zi, "gather_buffers", i64(c->zinc.gather_buffers));
    json_object_object_add(r, "zinc", zi);
    return r;
}

char *zcfg_to_json(const zcfg *c)
{
    if (!c) return NULL;
    json_object *r = to_object(c);
    if (!r) return NULL;
    const char *s = json_object_to_json_string_ext(
        r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(r);
    return out;
}

char *zcfg_report_json(const zcfg *c)
{
    if (!c) return NULL;
    json_object *r = to_object(c);
    if (!r) return NULL;
    json_object_object_add(r, "hash", json_object_new_string(c->hash_hex));
    const char *s = json_object_to_json_string_ext(
        r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(r);
    return out;
}

int zc_hash(zcfg *c)
{
    char *t = zcfg_to_json(c);
    if (!t) return -1;
    c->hash = (uint64_t)XXH64(t, strlen(t), 0);
    snprintf(c->hash_hex, sizeof c->hash_hex, "%016llx", (unsigned long long)c->hash);
    free(t);
    return 0;
}
