/*
 * config_optim.c — the "optimizer" and "scheduler" sections: Adam/AdamW as DeepSpeed's engine.py
 * chooses them, and the five DeepSpeed LR schedulers with lr_schedules.py's defaults and required
 * parameters (optim/sched.c evaluates them from the struct filled here).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

/* ---- optimizer ---------------------------------------------------------------------------- */

/* DeepSpeed's other built-in optimizers: all change the update rule. */
static const char *const other_optimizers[] = {
    "lamb", "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "lion",
    "muadam", "muadamw", "musgd", "muon", "sgd", "cpuadam", "cpuadagrad", "cpulion",
};

static void use_lr_override(zcctx *x, json_object *params, const zcfg_overrides *ov, zcfg *c)
{
    json_object *v;
    if (ov->lr < 0) return;
    if (zc_member(params, "lr", &v) && !zc_is_auto(v) &&
        (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) &&
        json_object_get_double(v) != ov->lr)
        zc_warn(x, "optimizer.params.lr", "the file's %s is replaced by the override (--lr) %g",
                zc_show(v), ov->lr);
    c->optim.lr = ov->lr;
}

/* optimizer.params.torch_adam true: DeepSpeed builds torch.optim.AdamW (torch.optim.Adam when
 * adam_w_mode is off) from the params (engine.py, get_optimizer_configuration), so torch's
 * defaults apply where the config is silent — AdamW's weight_decay is 0.01 there, FusedAdam's 0 —
 * and a parameter only FusedAdam takes is a TypeError. The kernel that runs stays zinc's (the
 * key's warning says so); the math is torch's. */
static void torch_adam_params(zcctx *x, json_object *p, zcfg_optim *o)
{
    json_object *v;
    if (o->type_adamw && !zc_member(p, "weight_decay", &v)) o->weight_decay = 0.01;
    static const char *const fused_only[] = {"bias_correction", "set_grad_none"};
    for (size_t i = 0; i < sizeof fused_only / sizeof fused_only[0]; i++)
        if (zc_member(p, fused_only[i], &v)) {
            char path[64];
            zc_error(x, zc_path(path, sizeof path, "optimizer.params", fused_only[i]), "with torch_adam true DeepSpeed hands the params to torch.optim.%s, "
                     "which has no such parameter (a TypeError there); remove it or torch_adam",
                     o->type_adamw ? "AdamW" : "Adam");
        }
}

void zc_parse_optimizer(zcctx *x, json_object *root, const zcfg_overrides *ov, zcfg *c)
{
    json_object *ov_o;
    zcfg_optim *o = &c->optim;
    if (!zc_member(root, "optimizer", &ov_o)) {
        /* DeepSpeed would run the client's optimizer; zinc has only its own, and the Hugging
         * Face Trainer fills a missing section with AdamW, so that is the default — said aloud. */
        if (ov->lr >= 0) o->lr = ov->lr;
        zc_warn(x, "optimizer",
                "no optimizer section: zinc uses AdamW with lr %g, betas [0.9, 0.999], eps 1e-8, "
                "weight_decay 0, bias_correction true; add the section to choose",
                o->lr);
        return;
    }
    json_object *opt = zc_section(x, root, "optimizer", "optimizer");
    if (!opt) return;
    zk_check(x, opt, "optimizer", &zk_optimizer);

    const char *type = NULL;
    int r = zc_get_str(x, opt, "optimizer", "type", &type);
    if (r == V_ABSENT) {
        zc_error(x, "optimizer.type", "missing; zinc implements \"AdamW\" and \"Adam\"");
        return;
    }
    if (r == V_BAD) return;
    char lt[64];
    zc_lower(lt, sizeof lt, type);
    int adamw_name = !strcmp(lt, "adamw");
    if (!adamw_name && strcmp(lt, "adam") != 0) {
        for (size_t i = 0; i < sizeof other_optimizers / sizeof other_optimizers[0]; i++) {
            if (strcmp(lt, other_optimizers[i]) == 0) {
                zc_error(x, "optimizer.type",
                         "\"%s\" is not supported: it changes the math and zinc implements only "
                         "Adam and AdamW",
                         type);
                return;
            }
        }
        static const zkey names[] = {{"AdamW", ZK_OWN, ZK_ALWAYS, NULL},
                                     {"Adam", ZK_OWN, ZK_ALWAYS, NULL}};
        static const zkeyset set = {"", names, 2};
        const char *s = zk_suggest(type, &set);
        if (s)
            zc_error(x, "optimizer.type", "unknown optimizer \"%s\"; did you mean %s?", type, s);
        else
            zc_error(x, "optimizer.type",
                     "unknown optimizer \"%s\"; zinc implements \"AdamW\" and \"Adam\"", type);
        return;
    }

    json_object *p = zc_section(x, opt, "params", "optimizer.params");
    int adam_w_mode = 1; /* DeepSpeed's ADAM_W_MODE_DEFAULT */
    if (p) {
        const char *sec = "optimizer.params";
        zk_check(x, p, sec, &zk_adam_params);
        json_object *lv;
        if (ov->lr >= 0)
            use_lr_override(x, p, ov, c);
        else if (zc_member(p, "lr", &lv) && zc_is_auto(lv))
            zc_auto_error(x, "optimizer.params.lr");
        else
            zc_get_num(x, p, sec, "lr", R_GE0, &o->lr);

        json_object *bv;
        if (zc_member(p, "betas", &bv)) {
            if (zc_is_auto(bv)) {
                zc_auto_error(x, "optimizer.params.betas");
            } else if (!json_object_is_type(bv, json_type_array) ||
                       json_object_array_length(bv) != 2) {
                zc_error(x, "optimizer.params.betas", "expected [beta1, beta2], got %s", zc_show(bv));
            } else {
                double b[2];
                int ok = 1;
                for (int i = 0; i < 2; i++) {
                    json_object *e = json_object_array_get_idx(bv, (size_t)i);
                    if (!json_object_is_type(e, json_type_int) &&
                        !json_object_is_type(e, json_type_double)) {
                        zc_error(x, "optimizer.params.betas", "beta%d: expected a number, got %s",
                                 i + 1, zc_show(e));
                        ok = 0;
                        continue;
                    }
                    b[i] = json_object_get_double(e);
                    if (!(b[i] >= 0 && b[i] < 1)) {
                        zc_error(x, "optimizer.params.betas", "beta%d = %s is outside [0, 1)",
                                 i + 1, zc_show(e));
                        ok = 0;
                    }
                }
                if (ok) {
                    o->beta1 = b[0];
                    o->beta2 = b[1];
                }
            }
        }
        double eps;
        if (zc_get_num(x, p, sec, "eps", R_ANY, &eps) == V_SET) {
            if (eps <= 0)
                zc_error(x, "optimizer.params.eps", "expected a number > 0, got %g", eps);
            else
                o->eps = eps;
        }
        zc_get_num(x, p, sec, "weight_decay", R_GE0, &o->weight_decay);
        zc_get_bool(x, p, sec, "bias_correction", &o->bias_correction);
        zc_get_bool(x, p, sec, "adam_w_mode", &adam_w_mode);
        zc_get_bool(x, p, sec, "torch_adam", &o->torch_adam);
    } else if (ov->lr >= 0) {
        o->lr = ov->lr;
    }
    /* engine.py: effective_adam_w_mode = name == "adamw" or adam_w_mode — so "AdamW" stays AdamW
     * even with adam_w_mode false, and "Adam" is AdamW unless adam_w_mode is false. */
    o->type_adamw = adamw_name || adam_w_mode;
    if (o->torch_adam) torch_adam_params(x, p, o);
    o->enabled = 1;
}

/* ---- scheduler ---------------------------------------------------------------------------- */

static void warmup_type(zcctx *x, json_object *p, zcfg_sched *s)
{
    const char *t;
    if (zc_get_str(x, p, "scheduler.params", "warmup_type", &t) != V_SET) return;
    if (!strcmp(t, "log"))
        s->warmup_type = ZWARMUP_LOG;
    else if (!strcmp(t, "linear"))
        s->warmup_type = ZWARMUP_LINEAR;
    else
        /* DeepSpeed warns and falls back to log; a different curve is a different run. */
        zc_error(x, "scheduler.params.warmup_type", "expected \"log\" or \"linear\", got \"%s\"", t);
}

static void required(zcctx *x, json_object *p, const char *key, const char *type)
{
    json_object *v;
    char path[128];
    if (!zc_member(p, key, &v))
        zc_error(x, zc_path(path, sizeof path, "scheduler.params", key), "required by %s", type);
}

void zc_parse_scheduler(zcctx *x, json_object *root, const zcfg_overrides *ov, zcfg *c)
{
    zcfg_sched *s = &c->sched;
    json_object *sc = zc_section(x, root, "scheduler", "scheduler");
    if (!sc) return;
    zk_check(x, sc, "scheduler", &zk_scheduler);
    const char *type = NULL;
    int r = zc_get_str(x, sc, "scheduler", "type", &type);
    if (r == V_ABSENT) {
        zc_error(x, "scheduler.type",
                 "missing; zinc implements WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and "
                 "LRRangeTest");
        return;
    }
    if (r == V_BAD) return;
    static const zkey names[] = {
        {"WarmupLR", ZK_OWN, ZK_ALWAYS, NULL},       {"WarmupDecayLR", ZK_OWN, ZK_ALWAYS, NULL},
        {"WarmupCosineLR", ZK_OWN, ZK_ALWAYS, NULL}, {"OneCycle", ZK_OWN, ZK_ALWAYS, NULL},
        {"LRRangeTest", ZK_OWN, ZK_ALWAYS, NULL},
    };
    static const zkeyset nameset = {"", names, 5};
    static const zsched_type types[] = {ZSCHED_WARMUP_LR, ZSCHED_WARMUP_DECAY_LR,
                                        ZSCHED_WARMUP_COSINE_LR, ZSCHED_ONE_CYCLE,
                                        ZSCHED_LR_RANGE_TEST};
    static const zkeyset *sets[] = {&zk_warmup_lr, &zk_warmup_decay_lr, &zk_warmup_cosine_lr,
                                    &zk_one_cycle, &zk_lr_range_test};
    int k = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(type, names[i].name)) k = i;
    if (k < 0) {
        /* DeepSpeed matches the name exactly, then falls back to torch's schedulers, none of
         * which zinc has. */
        const char *sug = zk_suggest(type, &nameset);
        if (sug)
            zc_error(x, "scheduler.type", "unknown scheduler \"%s\"; did you mean %s?", type, sug);
        else
            zc_error(x, "scheduler.type",
                     "\"%s\" is not supported; zinc implements WarmupLR, WarmupDecayLR, "
                     "WarmupCosineLR, OneCycle and LRRangeTest",
                     type);
        return;
    }
    s->type = types[k];
    const char *tn = names[k].name;

    json_object *p = zc_section(x, sc, "params", "scheduler.params");
    json_object *empty = NULL;
    if (!p) {
        json_object *pv;
        if (zc_member(sc, "params", &pv)) return; /* not an object: reported */
        p = empty = json_object_new_object();
        if (!p) {
            x->oom = 1;
            return;
        }
    }
    const char *sec = "scheduler.params";
    zk_check(x, p, sec, sets[k]);
    int64_t lbi;
    if (zc_get_int(x, p, sec, "last_batch_iteration", -1, I64_MAX, &lbi) == V_SET && lbi != -1)
        zc_error(x, "scheduler.params.last_batch_iteration",
                 "only -1 (start from the beginning) is supported; zinc resumes the schedule from "
                 "the checkpoint's step count");

    int lr_follows = 0; /* whether the schedule's peak comes from optimizer.params.lr */
    json_object *v;
    switch (s->type) {
    case ZSCHED_WARMUP_LR:
    case ZSCHED_WARMUP_DECAY_LR:
        zc_get_num(x, p, sec, "warmup_min_lr", R_GE0, &s->warmup_min_lr);
        if (zc_member(p, "warmup_max_lr", &v) && zc_is_auto(v)) {
            /* The Hugging Face Trainer fills it with the learning rate. */
            if (ov->lr >= 0)
                s->warmup_max_lr = ov->lr;
            else
                zc_auto_error(x, "scheduler.params.warmup_max_lr");
            lr_follows = 1;
        } else if (zc_get_num(x, p, sec, "warmup_max_lr", R_GE0, &s->warmup_max_lr) == V_ABSENT) {
            /* WarmupLR's default is the optimizer's lr (current DeepSpeed; older versions
             * wrote 0.001, the same value when lr keeps its default); WarmupDecayLR's
             * constructor still defaults to 0.001. */
            if (s->type == ZSCHED_WARMUP_LR) {
                s->warmup_max_lr = c->optim.lr;
                lr_follows = 1;
            } else {
                s->warmup_max_lr = 1e-3;
            }
        }
        zc_get_int(x, p, sec, "warmup_num_steps", 1, I64_MAX, &s->warmup_num_steps);
        warmup_type(x, p, s);
        if (s->type == ZSCHED_WARMUP_DECAY_LR) {
            required(x, p, "total_num_steps", tn);
            zc_get_int(x, p, sec, "total_num_steps", 1, I64_MAX, &s->total_num_steps);
        }
        break;
    case ZSCHED_WARMUP_COSINE_LR:
        lr_follows = 1;
        required(x, p, "total_num_steps", tn);
        zc_get_int(x, p, sec, "total_num_steps", 1, I64_MAX, &s->total_num_steps);
        zc_get_num(x, p, sec, "warmup_min_ratio", R_UNIT_CLOSED, &s->warmup_min_ratio);
        zc_get_int(x, p, sec, "warmup_num_steps", 1, I64_MAX, &s->warmup_num_steps);
        zc_get_num(x, p, sec, "cos_min_ratio", R_UNIT_CLOSED, &s->cos_min_ratio);
        warmup_type(x, p, s);
        break;
    case ZSCHED_ONE_CYCLE:
        required(x, p, "cycle_min_lr", tn);
        required(x, p, "cycle_max_lr", tn);
        zc_get_num(x, p, sec, "cycle_min_lr", R_GE0, &s->cycle_min_lr);
        zc_get_num(x, p, sec, "cycle_max_lr", R_GE0, &s->cycle_max_lr);
        zc_get_num(x, p, sec, "decay_lr_rate", R_GE0, &s->decay_lr_rate);
        zc_get_int(x, p, sec, "cycle_first_step_size", 1, I64_MAX, &s->cycle_first_step_size);
        /* null is DeepSpeed's None: "same as the first half". A second half of 0 steps is
         * DeepSpeed's too (the cycle only rises); below 0 it raises. A stair count is any
         * whole number: DeepSpeed quantises only when it is above 0 (-1 is not "same as the
         * first", which only None is). */
        if (zc_member(p, "cycle_second_step_size", &v) && v)
            zc_get_int(x, p, sec, "cycle_second_step_size", 0, I64_MAX, &s->cycle_second_step_size);
        zc_get_int(x, p, sec, "cycle_first_stair_count", -I64_MAX, I64_MAX,
                   &s->cycle_first_stair_count);
        if (zc_member(p, "cycle_second_stair_count", &v) && v)
            zc_get_int(x, p, sec, "cycle_second_stair_count", -I64_MAX, I64_MAX,
                       &s->cycle_second_stair_count);
        zc_get_int(x, p, sec, "decay_step_size", 0, I64_MAX, &s->decay_step_size);
        zc_get_bool(x, p, sec, "cycle_momentum", &s->cycle_momentum);
        zc_get_num(x, p, sec, "cycle_min_mom", R_UNIT_OPEN, &s->cycle_min_mom);
        zc_get_num(x, p, sec, "cycle_max_mom", R_UNIT_OPEN, &s->cycle_max_mom);
        zc_get_num(x, p, sec, "decay_mom_rate", R_GE0, &s->decay_mom_rate);
        /* DeepSpeed's decay multiplies beta1 (docs/optim.md, "OneCycle"): it passes 1, where
         * zinc_step refuses the step. Said up front, with when. */
        if (s->cycle_momentum && s->decay_mom_rate > 0 && s->decay_step_size > 0 &&
            s->cycle_max_mom > 0 && s->cycle_max_mom < 1) {
            double past = ceil((double)s->decay_step_size * (1.0 / s->cycle_max_mom - 1.0) /
                               s->decay_mom_rate);
            zc_warn(x, "scheduler.params.decay_mom_rate",
                    "with cycle_momentum, OneCycle's beta1 grows after the cycle (cycle_max_mom x "
                    "(1 + decay_mom_rate x steps past it / decay_step_size), as DeepSpeed "
                    "computes it) and reaches 1 about %.0f steps past the cycle, where zinc_step "
                    "refuses the step; set decay_mom_rate 0 or cycle_momentum false to keep it at "
                    "cycle_max_mom", past);
        }
        break;
    case ZSCHED_LR_RANGE_TEST:
        zc_get_num(x, p, sec, "lr_range_test_min_lr", R_GE0, &s->lr_range_test_min_lr);
        zc_get_int(x, p, sec, "lr_range_test_step_size", 1, I64_MAX, &s->lr_range_test_step_size);
        zc_get_num(x, p, sec, "lr_range_test_step_rate", R_GE0, &s->lr_range_test_step_rate);
        zc_get_bool(x, p, sec, "lr_range_test_staircase", &s->lr_range_test_staircase);
        break;
    case ZSCHED_NONE:
        break;
    }
    if (ov->lr >= 0 && !lr_follows)
        zc_warn(x, "scheduler.params",
                "%s sets the learning rate itself; the override (--lr) only sets "
                "optimizer.params.lr",
                tn);
    if (empty) json_object_put(empty);
}
