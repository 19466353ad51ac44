/*
 * state.c — the engine's training counters and loss scaler (zengine_state) as the manifest's
 * `engine_state` JSON object, and back.
 *
 * The parse is the one gate every loaded value passes, so it range-checks each field: a damaged
 * or hostile manifest must be refused here, not divide by a zero `scale_window` in the scaler or
 * overflow a step counter later. `zck_verify` runs the same parse, so a checkpoint that verifies
 * also loads. The bounds are the values a real run can reach: counters up to 2^53 (no training
 * run takes that many steps, and the engine's and scaler's increments stay far from int64's
 * overflow), scales finite and positive, window and hysteresis at least 1.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ckpt/ckpt.h"

/* Doubles are written with 17 significant digits, which read back to the same bits. */
static json_object *jdbl(double x)
{
    char b[40];
    snprintf(b, sizeof b, "%.17g", x);
    return json_object_new_double_s(x, b);
}

char *zck_state_to_json(const zengine_state *st, double lr)
{
    const zscaler *sc = &st->scaler;
    json_object *o = json_object_new_object(), *s = json_object_new_object();
    json_object_object_add(o, "step", json_object_new_int64(st->step));
    json_object_object_add(o, "skipped", json_object_new_int64(st->skipped));
    json_object_object_add(o, "micro", json_object_new_int64(st->micro));
    json_object_object_add(o, "adam_lead", json_object_new_int64(st->adam_lead));
    json_object_object_add(o, "sched_lead", json_object_new_int64(st->sched_lead));
    json_object_object_add(s, "dynamic", json_object_new_boolean(sc->dynamic));
    json_object_object_add(s, "cur_scale", jdbl(sc->cur_scale));
    json_object_object_add(s, "min_scale", jdbl(sc->min_scale));
    json_object_object_add(s, "scale_factor", jdbl(sc->scale_factor));
    json_object_object_add(s, "scale_window", json_object_new_int64(sc->scale_window));
    json_object_object_add(s, "delayed_shift", json_object_new_int(sc->delayed_shift));
    json_object_object_add(s, "cur_hysteresis", json_object_new_int(sc->cur_hysteresis));
    json_object_object_add(s, "consecutive_hysteresis", json_object_new_boolean(sc->consecutive_hysteresis));
    json_object_object_add(s, "cur_iter", json_object_new_int64(sc->cur_iter));
    json_object_object_add(s, "last_overflow_iter", json_object_new_int64(sc->last_overflow_iter));
    json_object_object_add(o, "loss_scaler", s);
    /* Informational: the scheduler is a pure function of `step` (optim/optim.h). */
    json_object_object_add(o, "lr", jdbl(lr));
    char *r = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return r;
}

/* An integer member in [lo, hi]; 0 when present and in range. Doubles are not integers here. */
static int jint_in(json_object *o, const char *k, int64_t lo, int64_t hi, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_int)) return -1;
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno || x < lo || x > hi) return 1;   /* json-c sets errno when it clamps */
    *out = x;
    return 0;
}

/* A finite number member in [lo, hi] (integers count); 0 when present and in range. */
static int jnum_in(json_object *o, const char *k, double lo, double hi, double *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return -1;
    double x = json_object_get_double(v);
    if (!isfinite(x) || x < lo || x > hi) return 1;
    *out = x;
    return 0;
}

static int jbool(json_object *o, const char *k, int *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_boolean)) return -1;
    *out = json_object_get_boolean(v);
    return 0;
}

zinc_status zck_state_parse(const char *text, zengine_state *st, char *err)
{
    json_object *o = text ? json_tokener_parse(text) : NULL, *s = NULL;
    zengine_state n = *st;
    zscaler *sc = &n.scaler;
    const char *bad = NULL;   /* the field that is missing or out of range */
    int rc = 0;
    int64_t i64;
    double d;
#define INT(obj, key, lo, hi, dst)                                                                 \
    if (!bad && (rc = jint_in(obj, key, lo, hi, &i64)) != 0) bad = key;                         \
    else if (!bad) (dst) = i64
#define NUM(obj, key, lo, hi, dst)                                                                 \
    if (!bad && (rc = jnum_in(obj, key, lo, hi, &d)) != 0) bad = key;                            \
    else if (!bad) (dst) = d
    if (!o || !json_object_is_type(o, json_type_object)) {
        bad = "engine_state";
        rc = -1;
    }
    INT(o, "step", 0, ZENG_COUNTER_MAX, n.step);
    INT(o, "skipped", 0, ZENG_COUNTER_MAX, n.skipped);
    INT(o, "micro", 0, ZENG_COUNTER_MAX, n.micro);
    /* Adam's count and the schedule's position less `step` (each >= -step): absent from
     * checkpoints written before 2026-11-30 (adam_lead) and 2026-12-01 (sched_lead), whose
     * counts were `step` */
    n.adam_lead = n.sched_lead = 0;
    if (!bad && o && json_object_object_get_ex(o, "adam_lead", NULL)) {
        INT(o, "adam_lead", -n.step, ZENG_COUNTER_MAX, n.adam_lead);
    }
    if (!bad && o && json_object_object_get_ex(o, "sched_lead", NULL)) {
        INT(o, "sched_lead", -n.step, ZENG_COUNTER_MAX, n.sched_lead);
    }
    if (!bad && (!json_object_object_get_ex(o, "loss_scaler", &s) ||
                 !json_object_is_type(s, json_type_object))) {
        bad = "loss_scaler";
        rc = -1;
    }
    if (!bad && (rc = jbool(s, "dynamic", &sc->dynamic)) != 0) bad = "loss_scaler.dynamic";
    NUM(s, "cur_scale", 0x1p-1022, HUGE_VAL, sc->cur_scale);
    NUM(s, "min_scale", 0.0, HUGE_VAL, sc->min_scale);
    NUM(s, "scale_factor", 1.0, HUGE_VAL, sc->scale_factor);
    INT(s, "scale_window", 1, ZENG_COUNTER_MAX, sc->scale_window);
    INT(s, "delayed_shift", 1, 0x7fffffff, sc->delayed_shift);
    INT(s, "cur_hysteresis", 1, sc->delayed_shift, sc->cur_hysteresis);
    if (!bad && (rc = jbool(s, "consecutive_hysteresis", &sc->consecutive_hysteresis)) != 0)
        bad = "loss_scaler.consecutive_hysteresis";
    INT(s, "cur_iter", 0, ZENG_COUNTER_MAX, sc->cur_iter);
    INT(s, "last_overflow_iter", -1, sc->cur_iter, sc->last_overflow_iter);
#undef INT
#undef NUM
    if (o) json_object_put(o);
    if (bad)
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_CORRUPT,
                        "the manifest's engine_state is damaged: \"%s\" is %s (want the counters "
                        "step, skipped, micro in 0..2^53 (adam_lead and sched_lead, when "
                        "present, in -step..2^53), and a loss_scaler with a finite "
                        "cur_scale > 0, min_scale >= 0, scale_factor >= 1, scale_window >= 1, "
                        "1 <= cur_hysteresis <= delayed_shift, -1 <= last_overflow_iter <= "
                        "cur_iter)", bad, rc < 0 ? "missing or of the wrong type" : "out of range");
    *st = n;
    return ZINC_OK;
}
