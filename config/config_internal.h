/*
 * config_internal.h — what the files of the config module share; nothing outside
 * the config/config*.c files (and the config tests) includes it.
 *
 *   config.c           zcfg_parse_*, diagnostics, defaults, DeepSpeed's batch rule
 *   config_values.c    typed reads: JSON type, range, "auto", whole floats
 *   config_sections.c  fp16/bf16, zero_optimization, checkpoint, csv_monitor, zinc, scalars
 *   config_optim.c     optimizer and scheduler
 *   config_keys.c      every key DeepSpeed knows, its class (honoured / warning / rejected),
 *                      unknown keys and their did-you-mean suggestion
 *   config_json.c      JSON text: syntax errors with line:column, duplicate keys, the canonical
 *                      resolved JSON (zcfg_to_json) and its hash
 */
#ifndef ZINC_CONFIG_INTERNAL_H
#define ZINC_CONFIG_INTERNAL_H

#include <json-c/json.h>

#include "config/config.h"

/* Diagnostics being collected for one parse. */
typedef struct zcctx {
    zcfg_diag *diag;
    int oom;                      /* a message could not be stored */
    /* Set while reading values DeepSpeed never reads in this config (aio without NVMe): what
     * would be an error is recorded as a warning ending in this text instead. */
    const char *demote;
} zcctx;

/* Record one "path: what" line. `path` is the full dotted key path ("" for the document). */
void zc_error(zcctx *x, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void zc_warn(zcctx *x, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "sec" + "." + "key" into buf (just "key" when sec is empty). Returns buf. */
const char *zc_path(char *buf, size_t n, const char *sec, const char *key);

/* ---- config_values.c: typed reads ----------------------------------------------------------
 * Each reads member `key` of object `o` (the section at path `sec`) and returns V_SET (stored in
 * *out), V_ABSENT, or V_BAD (an error naming "sec.key" was recorded). */

enum { V_BAD = -1, V_ABSENT = 0, V_SET = 1 };
#define I64_MAX INT64_MAX

typedef enum { R_ANY, R_GE0, R_GT0, R_UNIT_OPEN, R_UNIT_CLOSED } zrange; /* [0,1) and [0,1] */

int zc_get_bool(zcctx *x, json_object *o, const char *sec, const char *key, int *out);
/* Whole numbers in [lo, hi]; floats that are whole (5e8, 2.0) count. */
int zc_get_int(zcctx *x, json_object *o, const char *sec, const char *key, int64_t lo, int64_t hi,
               int64_t *out);
int zc_get_int32(zcctx *x, json_object *o, const char *sec, const char *key, int lo, int hi,
                 int *out);
/* Finite numbers in the range. */
int zc_get_num(zcctx *x, json_object *o, const char *sec, const char *key, zrange r, double *out);
int zc_get_str(zcctx *x, json_object *o, const char *sec, const char *key, const char **out);

/* Whether `key` is present; JSON null counts as present with *v == NULL. */
int zc_member(json_object *o, const char *key, json_object **v);
/* Member `key` when it is an object; NULL when absent or (with an error at `path`) not one. */
json_object *zc_section(zcctx *x, json_object *o, const char *key, const char *path);
int zc_is_auto(json_object *v);
void zc_auto_error(zcctx *x, const char *path);
/* The value as compact JSON, for messages ("null" for NULL); valid while v lives. */
const char *zc_show(json_object *v);
void zc_lower(char *dst, size_t n, const char *s);
/* "fp32" / "fp16" / "bf16", any case; *ok = 0 for anything else. */
zinc_dtype zc_dtype_of(const char *s, int *ok);
const char *zc_dtype_name(zinc_dtype d);
/* A name DeepSpeed's DtypeEnum takes (the data_types keys), exactly: "bf16", "bfloat16",
 * "torch.bfloat16", "fp16", "float16", "half", "torch.float16", "fp32", "float32", "float",
 * "torch.float32"; *ok 0 for any other. */
zinc_dtype zc_dtype_enum_of(const char *s, int *ok);

/* ---- the sections (config_sections.c, config_optim.c), in the order config.c calls them ----
 * parse_precision sets c->dtype, which the others read; parse_optimizer sets the lr that
 * WarmupLR's default follows. */
void zc_parse_precision(zcctx *x, json_object *root, zcfg *c);
void zc_parse_optimizer(zcctx *x, json_object *root, const zcfg_overrides *ov, zcfg *c);
void zc_parse_scheduler(zcctx *x, json_object *root, const zcfg_overrides *ov, zcfg *c);
void zc_parse_zero(zcctx *x, json_object *root, zcfg *c);
void zc_parse_checkpoint(zcctx *x, json_object *root, zcfg *c);
void zc_parse_csv_monitor(zcctx *x, json_object *root, zcfg *c);
void zc_parse_aio(zcctx *x, json_object *root, zcfg *c);
void zc_parse_zinc(zcctx *x, json_object *root, zcfg *c);
void zc_parse_scalars(zcctx *x, json_object *root, zcfg *c);
/* After every section: warnings that depend on two sections (fp16 at ZeRO stage 0). */
void zc_check_precision_stage(zcctx *x, const zcfg *c);
/* DeepSpeed keys whose meaning depends on other sections (fp32_optimizer_states on
 * offload_optimizer and torch_adam, compute_grad_norm on the stage and gradient_clipping,
 * gradient_predivide_factor and prescale_gradients on the stage): read once everything else is
 * parsed. */
void zc_check_pairs(zcctx *x, json_object *root, const zcfg *c);

/* ---- config_json.c ---------------------------------------------------------------------- */

/* Parses strict JSON. On a syntax error records "<label>:LINE:COL: malformed JSON: ..." and
 * returns NULL. The caller owns the result (json_object_put). */
json_object *zc_json_parse(zcctx *x, const char *text, const char *label);

/* Records "<path>: duplicate key (first at line L)" for every repeated key of every object of
 * `text`, which must be valid JSON (json-c keeps the last value silently). */
void zc_json_duplicates(zcctx *x, const char *text);

/* Fills c->hash (XXH64, seed 0, of zcfg_to_json's text) and c->hash_hex. Returns 0, or -1 when
 * out of memory. */
int zc_hash(zcfg *c);

/* ---- config_keys.c ---------------------------------------------------------------------- */

typedef enum {
    ZK_OWN = 0,      /* read and validated by the section parser, which also gives the
                        value-dependent warnings (a speed knob set to a non-default value) */
    ZK_WARN,         /* accepted with one warning: speed, memory placement or logging only */
    ZK_REJECT        /* rejected: it changes the math and zinc does not implement it */
} zk_class;

typedef enum {
    ZK_ALWAYS = 0,   /* the class applies whenever the key is present */
    ZK_IF_ON,        /* ... only when the value is "on": true, non-zero, a non-empty string,
                        an object whose "enabled" is on (or, without "enabled", non-empty) */
    ZK_IF_OFF,       /* ... only when the value is false (keys whose default is true) */
    ZK_IF_SET        /* ... whenever the value is not null: DeepSpeed's Optional[...Config] =
                        None blocks, which any object turns on, {} included */
} zk_when;

typedef struct {
    const char *name;
    zk_class cls;
    zk_when when;
    const char *why;  /* the reason printed with a warning or a rejection */
} zkey;

typedef struct {
    const char *path; /* the section's dotted path: "", "zero_optimization", ... */
    const zkey *keys;
    int nkeys;
} zkeyset;

extern const zkeyset zk_top, zk_fp16, zk_bf16, zk_optimizer, zk_adam_params, zk_scheduler,
    zk_zero, zk_offload_optimizer, zk_offload_param, zk_checkpoint, zk_parallel_write, zk_zinc,
    zk_csv_monitor, zk_aio, zk_data_types, zk_warmup_lr, zk_warmup_decay_lr, zk_warmup_cosine_lr,
    zk_one_cycle, zk_lr_range_test;

/* Checks every member of `obj` (the section at `path`) against `set`: an unknown key is an
 * error with a did-you-mean suggestion; a ZK_WARN key that applies gets one warning; a ZK_REJECT
 * key that applies is an error. ZK_OWN keys are left to the caller. */
void zk_check(zcctx *x, json_object *obj, const char *path, const zkeyset *set);

/* The key of `set` nearest to `name` by edit distance, or NULL when none is close. */
const char *zk_suggest(const char *name, const zkeyset *set);

/* Whether a value is "on" in the sense of ZK_IF_ON. */
int zk_is_on(json_object *v);

#endif
