/* toy.c — see toy.h. */
#include "toy.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "testutil.h"

/* Groups of odd sizes, several params each, so slices split params and hold padding. */
static const struct { int group; int ndim; int64_t shape[2]; } toy_params[] = {
    {0, 1, {7}},   {0, 2, {3, 5}}, {1, 1, {1000}}, {2, 1, {1}},
    {2, 2, {129, 3}}, {3, 1, {4097}}, {4, 2, {2, 2}},
};
#define TOY_NP ((int)(sizeof toy_params / sizeof toy_params[0]))
#define TOY_NG TOY_GROUPS

/* Deterministic pseudo-random value in [-1, 1) from integers. */
static float hash_unit(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 0x85157AF5ull) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    z *= 0xD6E8FEB86659FD93ull;
    z ^= z >> 29;
    return (float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

char *toy_config(const toy_run *r)
{
    char *buf = malloc(2048);
    char adam[160];     /* the config's betas and eps, when the run gives them */
    snprintf(adam, sizeof adam, "%s%s%s%s", r->betas ? ", \"betas\": " : "",
             r->betas ? r->betas : "", r->eps ? ", \"eps\": " : "", r->eps ? r->eps : "");
    const char *prec = r->dtype == ZINC_DTYPE_FP16 ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8},"
                       : r->dtype == ZINC_DTYPE_BF16 ? "\"bf16\": {\"enabled\": true},"
                                                     : "";
    snprintf(buf, 2048,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, %s%s %s"
             "\"gradient_clipping\": %g,"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %s, \"weight_decay\": %s%s}},"
             "\"zero_optimization\": {%s\"stage\": %d, \"stage3_param_persistence_threshold\": %lld},"
             " \"zinc\": {%s\"comm_timeout_s\": 20}}",
             r->accum,
             r->boundary == TOY_UNMANAGED ? "\"managed_gradient_accumulation\": false, " : "",
             prec, r->extra_json ? r->extra_json : "", r->clip,
             r->lr ? r->lr : "0.01", r->weight_decay ? r->weight_decay : "0.01", adam,
             r->zero_json ? r->zero_json : "", r->stage,
             (long long)(r->persist_threshold == 0 ? 100000 : r->persist_threshold < 0 ? 0
                                                            : r->persist_threshold),
             r->zinc_json ? r->zinc_json : "");
    return buf;
}

int toy_param_group(int p)
{
    return toy_params[p].group;
}

zinc_status toy_register(zinc_engine_t *e, int *nparams)
{
    return toy_register_run(e, nparams, NULL);
}

/* Group g's own decay, betas and eps of r, where it has them (the group ids are 0, 1, ...). */
static zinc_status set_group_values(zinc_engine_t *e, int g, const toy_run *r)
{
    zinc_status s = ZINC_OK;
    if (r->group_wd && !isnan(r->group_wd[g]))
        s = zinc_group_set_weight_decay(e, g, r->group_wd[g]);
    if (s == ZINC_OK && r->group_betas && !isnan(r->group_betas[g][0]))
        s = zinc_group_set_betas(e, g, r->group_betas[g][0], r->group_betas[g][1]);
    if (s == ZINC_OK && r->group_eps && !isnan(r->group_eps[g]))
        s = zinc_group_set_eps(e, g, r->group_eps[g]);
    return s;
}

zinc_status toy_register_run(zinc_engine_t *e, int *nparams, const toy_run *r)
{
    zinc_status s = ZINC_OK;
    zinc_dtype dt = zinc_engine_dtype(e);
    for (int g = 0; g < TOY_NG && s == ZINC_OK; g++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", g);
        int gid;
        s = zinc_group_add(e, name, &gid);
        if (s == ZINC_OK && r && r->group_values_at == 0) s = set_group_values(e, gid, r);
    }
    for (int p = 0; p < TOY_NP && s == ZINC_OK; p++) {
        char name[32];
        int pid;
        snprintf(name, sizeof name, "block%d.w%d", toy_params[p].group, p);
        s = zinc_param_add(e, toy_params[p].group, name, toy_params[p].ndim, toy_params[p].shape,
                           dt, &pid);
    }
    if (s == ZINC_OK && r && r->grad_external) s = zinc_grad_buffer_external(e);
    if (s == ZINC_OK) s = zinc_finalize(e);
    for (int p = 0; p < TOY_NP && s == ZINC_OK; p++) {
        int64_t n = zinc_param_numel(e, p);
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++) v[i] = 0.5f * hash_unit(1, (uint64_t)p, (uint64_t)i);
        s = zinc_param_set(e, p, v);
        free(v);
    }
    *nparams = TOY_NP;
    return s;
}

zinc_status toy_engine_on(const toy_run *r, zinc_world_t *world, int rank, const char *config_json,
                          zinc_engine_t **e, int *nparams)
{
    char *cfg = config_json ? NULL : toy_config(r);
    zinc_engine_options_t o = {.config_json = config_json ? config_json : cfg, .world = world,
                               .rank = rank, .threads = 1};
    *e = NULL;
    zinc_status s = zinc_engine_create(&o, e);
    free(cfg);
    if (s == ZINC_OK) s = toy_register_run(*e, nparams, r);
    for (int g = 0; g < TOY_NG && s == ZINC_OK && r && r->group_lr; g++)
        if (!isnan(r->group_lr[g])) s = zinc_group_set_lr(*e, g, r->group_lr[g]);
    return s;
}

zinc_status toy_engine(const toy_run *r, zinc_engine_t **e, int *nparams)
{
    return toy_engine_on(r, NULL, 0, NULL, e, nparams);
}

zinc_engine_t *toy_engine_checked(const toy_run *r, int *nparams, const char *what)
{
    zinc_engine_t *e = NULL;
    zinc_status s = toy_engine(r, &e, nparams);
    ZT_CHECK(s == ZINC_OK, "%s engine: %s", what, e ? zinc_last_error(e) : zinc_last_error(NULL));
    if (s == ZINC_OK) return e;
    zinc_engine_destroy(e);
    return NULL;
}

uint64_t toy_memory_total(const toy_run *r, int host)
{
    int np = 0;
    uint64_t t = 0, p[ZINC_MEM_COUNT];
    zinc_engine_t *e = toy_engine_checked(r, &np, host ? "host plan" : "device plan");
    if (e && (host ? zinc_memory_host(e, p, NULL) : zinc_memory(e, p, NULL)) == ZINC_OK)
        for (int k = 0; k < ZINC_MEM_COUNT; k++) t += p[k];
    zinc_engine_destroy(e);
    return t;
}

zinc_status toy_micro_step(zinc_engine_t *e, int rank, int world, int micro, int nparams,
                           int inject_inf)
{
    zinc_dtype dt = zinc_engine_dtype(e);
    float mult = zinc_loss_multiplier(e);
    int per_rank = TOY_SAMPLES / world;
    zinc_status s = ZINC_OK;
    /* "Forward": gather every group once (stage 3 traffic: one all-gather per group). */
    for (int g = 0; g < TOY_NG && s == ZINC_OK; g++) {
        s = zinc_gather(e, g);
        if (s == ZINC_OK) s = zinc_release(e, g);
    }
    /* "Backward", in reverse group order, as a real backward runs. */
    for (int g = TOY_NG - 1; g >= 0 && s == ZINC_OK; g--) {
        s = zinc_gather(e, g);
        for (int p = 0; p < nparams && s == ZINC_OK; p++) {
            if (zinc_param_group(e, p) != g) continue;
            int64_t n = zinc_param_numel(e, p);
            void *w, *gr;
            s = zinc_param_data(e, p, &w);
            if (s == ZINC_OK) s = zinc_param_grad(e, p, &gr);
            for (int64_t i = 0; i < n && s == ZINC_OK; i++) {
                float a = 1.0f + 0.5f * hash_unit(2, (uint64_t)p, (uint64_t)i);
                float t = 0.3f * hash_unit(3, (uint64_t)p, (uint64_t)i);
                float wi = zk_load(w, dt, (size_t)i);
                float sum = 0.0f;
                for (int k = 0; k < per_rank; k++) {
                    int sample = rank * per_rank + k;
                    sum += a * (wi - t - 0.2f * hash_unit(4 + (uint64_t)micro, (uint64_t)sample,
                                                         (uint64_t)(p * 100003 + i)));
                }
                float gi = sum / (float)per_rank * mult;
                if (inject_inf && p == 2 && i == 17) gi = INFINITY;
                zk_store(gr, dt, (size_t)i, zk_load(gr, dt, (size_t)i) + gi);
            }
        }
        if (s == ZINC_OK) s = zinc_release(e, g);
        if (s == ZINC_OK) s = zinc_grads_ready(e, g);
    }
    return s;
}

typedef struct {
    toy_run *r;
    zinc_world_t *world;
    pthread_mutex_t mu;
} toy_ctx;

/* toy_run.grad_external: the buffers a rank lends, one per window. */
typedef struct {
    size_t bytes;           /* zinc_memory's planned gradient bytes; 0: nothing to lend */
    unsigned char *cur;     /* lent for the current window */
    unsigned char *prev;    /* lent for the window before, given back at its step */
} toy_lender;

#define TOY_GARBAGE 0xFF    /* a new buffer's bytes, NaN in fp16, bf16 and fp32: zinc must zero it */
#define TOY_GIVEN_BACK 0x5A /* a given-back buffer's bytes: zinc must not write them again */

static zinc_status lender_open(zinc_engine_t *e, toy_lender *l)
{
    uint64_t planned[ZINC_MEM_COUNT], alloc[ZINC_MEM_COUNT];
    memset(l, 0, sizeof *l);
    zinc_status s = zinc_memory(e, planned, alloc);
    if (s == ZINC_OK && alloc[ZINC_MEM_GRAD] != 0) return ZINC_ERR_MISMATCH;  /* zinc's own */
    if (s == ZINC_OK) l->bytes = (size_t)planned[ZINC_MEM_GRAD];
    return s;
}

/* At a window's first micro-step: a fresh buffer of garbage, attached. */
static zinc_status lender_attach(zinc_engine_t *e, toy_lender *l)
{
    if (!l->bytes) return ZINC_OK;
    free(l->prev);
    l->prev = l->cur;
    l->cur = aligned_alloc(64, (l->bytes + 63) / 64 * 64);
    if (!l->cur) return ZINC_ERR_NOMEM;
    memset(l->cur, TOY_GARBAGE, l->bytes);
    return zinc_grad_buffer_attach(e, l->cur, l->bytes);
}

/* After a window's step: the buffer is the caller's again; mark it. */
static void lender_given_back(toy_lender *l)
{
    if (l->cur) memset(l->cur, TOY_GIVEN_BACK, l->bytes);
}

/* The previous window's buffer still holds the mark (zinc did not write it after its step). */
static int lender_untouched(const toy_lender *l)
{
    for (size_t i = 0; l->prev && i < l->bytes; i++)
        if (l->prev[i] != TOY_GIVEN_BACK) return 0;
    return 1;
}

static void lender_close(toy_lender *l)
{
    free(l->prev);
    free(l->cur);
}

/* One rank of a toy run on any world (a thread of a local world, or an MPI process). */
static void toy_rank(int rank, void *arg)
{
    toy_ctx *c = arg;
    toy_run *r = c->r;
    if (zinc_world_rank(c->world) >= 0) rank = zinc_world_rank(c->world);
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(r, c->world, rank, NULL, &e, &np);
    toy_lender lend = {0};
    char note[160] = "";
    if (s == ZINC_OK && r->grad_external && (s = lender_open(e, &lend)) == ZINC_ERR_MISMATCH)
        snprintf(note, sizeof note, "zinc allocated a gradient buffer of its own although the "
                 "caller lends it (zinc_grad_buffer_external)");
    int micro = 0;
    zinc_step_info_t info = {0};
    int applied = 0, skipped = 0;
    int boundaries = 0;
    uint64_t waits_min = UINT64_MAX, waits_max = 0;
    for (int step = 0; step < r->steps && s == ZINC_OK; step++) {
        for (int g = 0; g < TOY_NG && s == ZINC_OK && step + 1 == r->group_values_at; g++)
            s = set_group_values(e, g, r);
        uint64_t waits0 = zinc_host_waits(e);
        int n = r->windows && r->boundary != TOY_COUNT ? r->windows[step] : r->accum;
        for (int k = 0; k < n && s == ZINC_OK; k++, micro++) {
            int inj = step == r->inject_inf_step && rank == r->inject_rank && k == 0;
            int last = k == n - 1;
            if (r->grad_external && k == 0) s = lender_attach(e, &lend);
            if (s == ZINC_OK &&
                (r->boundary == TOY_SET_STEP_EACH || r->boundary == TOY_SET_STEP_LAST))
                s = zinc_set_accumulation_boundary(e, last);
            if (s == ZINC_OK) s = toy_micro_step(e, rank, r->world, micro, np, inj);
            if (s != ZINC_OK) break;
            if (last || r->boundary == TOY_COUNT || r->boundary == TOY_SET_STEP_EACH) {
                s = zinc_step(e, &info);
                boundaries += info.boundary;
            } else {
                s = zinc_micro_step(e);
            }
        }
        if (s == ZINC_OK && r->grad_external) {
            if (!lender_untouched(&lend)) {
                s = ZINC_ERR_MISMATCH;
                snprintf(note, sizeof note, "step %d: zinc wrote the gradient buffer lent for "
                         "the window before, after that window's step gave it back", step);
            }
            lender_given_back(&lend);
        }
        applied += info.applied;
        skipped += info.skipped;
        uint64_t w = zinc_host_waits(e) - waits0;
        if (w < waits_min) waits_min = w;
        if (w > waits_max) waits_max = w;
    }
    /* zinc_engine_steps must count what the steps reported (fp16 overflow runs skip some). */
    int64_t said_applied = -1, said_skipped = -1;
    if (s == ZINC_OK && (zinc_engine_steps(e, &said_applied, &said_skipped) != 0 ||
                         said_applied != applied || said_skipped != skipped)) {
        s = ZINC_ERR_MISMATCH;
        snprintf(note, sizeof note, "zinc_engine_steps says %lld applied, %lld skipped; the "
                 "steps reported %d and %d", (long long)said_applied, (long long)said_skipped,
                 applied, skipped);
    }
    float *vals[TOY_MAX_PARAMS] = {0};
    for (int p = 0; p < np && s == ZINC_OK; p++) {
        vals[p] = malloc((size_t)zinc_param_numel(e, p) * sizeof(float));
        s = zinc_param_get(e, p, vals[p]);
    }
    pthread_mutex_lock(&c->mu);
    if (s != ZINC_OK && r->status == ZINC_OK) {
        r->status = s;
        snprintf(r->error, sizeof r->error, "rank %d: %s", rank,
                 note[0] ? note : zinc_last_error(e));
    }
    if (rank == 0) {
        r->nparams = np;
        for (int p = 0; p < np; p++) {
            r->final[p] = vals[p];
            r->numel[p] = zinc_param_numel(e, p);
            vals[p] = NULL;
        }
        r->last_info = info;
        r->applied = applied;
        r->skipped = skipped;
        r->boundaries = boundaries;
        r->waits_min = waits_min;
        r->waits_max = waits_max;
    }
    pthread_mutex_unlock(&c->mu);
    for (int p = 0; p < np; p++) free(vals[p]);
    if (s != ZINC_OK) zinc_world_abort(c->world, rank, "toy rank failed");
    zinc_engine_destroy(e);
    lender_close(&lend);
}

void toy_train(toy_run *r)
{
    toy_ctx c = {.r = r};
    pthread_mutex_init(&c.mu, NULL);
    r->status = zinc_world_create_local(r->world, &c.world);
    if (r->status == ZINC_OK) {
        zt_run_ranks(r->world, toy_rank, &c);
    }
    zinc_world_destroy(c.world);
    pthread_mutex_destroy(&c.mu);
}

void toy_train_on(toy_run *r, zinc_world_t *world)
{
    toy_ctx c = {.r = r, .world = world};
    pthread_mutex_init(&c.mu, NULL);
    r->status = ZINC_OK;
    toy_rank(zinc_world_rank(world), &c);
    pthread_mutex_destroy(&c.mu);
}

void toy_free(toy_run *r)
{
    for (int p = 0; p < TOY_MAX_PARAMS; p++) {
        free(r->final[p]);
        r->final[p] = NULL;
    }
}

int toy_weights_equal(const toy_run *a, const toy_run *b)
{
    if (a->nparams != b->nparams || a->nparams == 0) return 0;
    for (int p = 0; p < a->nparams; p++)
        if (a->numel[p] != b->numel[p] ||
            memcmp(a->final[p], b->final[p], (size_t)a->numel[p] * sizeof(float)))
            return 0;
    return 1;
}

static int same_last_step(const zinc_step_info_t *a, const zinc_step_info_t *b)
{
    return memcmp(&a->grad_norm, &b->grad_norm, sizeof(double)) == 0 &&
           memcmp(&a->grad_norm_clipped, &b->grad_norm_clipped, sizeof(double)) == 0 &&
           a->loss_scale == b->loss_scale && a->next_loss_scale == b->next_loss_scale;
}

int toy_same_training(const toy_run *a, const toy_run *b)
{
    return toy_weights_equal(a, b) && same_last_step(&a->last_info, &b->last_info) &&
           a->applied == b->applied && a->skipped == b->skipped;
}

int toy_run_ok(toy_run *r, const char *what)
{
    toy_train(r);
    ZT_CHECK(r->status == ZINC_OK, "%s: world %d stage %d %s: %s", what, r->world, r->stage,
             zinc_dtype_name(r->dtype), r->error);
    return r->status == ZINC_OK;
}

void toy_expect_same_training(const toy_run *ref, const toy_run *other, const char *label)
{
    ZT_CHECK(toy_weights_equal(ref, other), "%s: the weights differ", label);
    ZT_CHECK(same_last_step(&ref->last_info, &other->last_info),
             "%s: last step: norm %.17g vs %.17g, clipped %.17g vs %.17g, scale %g vs %g", label,
             ref->last_info.grad_norm, other->last_info.grad_norm, ref->last_info.grad_norm_clipped,
             other->last_info.grad_norm_clipped, ref->last_info.loss_scale,
             other->last_info.loss_scale);
    ZT_CHECK(ref->applied == other->applied && ref->skipped == other->skipped,
             "%s: applied %d/%d skipped %d/%d", label, ref->applied, other->applied, ref->skipped,
             other->skipped);
    ZT_CHECK(ref->applied > 0 && ref->last_info.grad_norm > 0.0, "%s: nothing trained", label);
}

void toy_expect_same_with_zero(toy_run ref, const char *zero_json, const char *what,
                               const char *label)
{
    toy_run other = ref;
    other.zero_json = zero_json;
    if (toy_run_ok(&ref, "reference") && toy_run_ok(&other, what))
        toy_expect_same_training(&ref, &other, label);
    toy_free(&ref);
    toy_free(&other);
}

zinc_status toy_steps(zinc_engine_t *e, int rank, int world, int first, int steps, int nparams)
{
    zinc_status s = ZINC_OK;
    for (int step = first; step < first + steps && s == ZINC_OK; step++) {
        s = toy_micro_step(e, rank, world, step, nparams, 0);
        if (s == ZINC_OK) s = zinc_step(e, NULL);
    }
    return s;
}

/* ---- toy_resume_run ------------------------------------------------------------------------ */

typedef struct {
    zinc_world_t *world;
    int stage, steps;
    zinc_dtype dtype;
    const char *save_zero, *load_zero, *dir;
    toy_run *out;
    pthread_mutex_t mu;
} resume_ctx;

static zinc_engine_t *resume_engine(resume_ctx *c, int rank, const char *zero_json, int *np)
{
    toy_run r = {.world = zinc_world_size(c->world), .stage = c->stage, .accum = 1,
                 .dtype = c->dtype, .clip = 1.0, .zero_json = zero_json};
    zinc_engine_t *e = NULL;
    zinc_status s = toy_engine_on(&r, c->world, rank, NULL, &e, np);
    if (s != ZINC_OK) {
        ZT_CHECK(0, "checkpoint engine rank %d: %s", rank, zinc_last_error(e));
        zinc_engine_destroy(e);
        return NULL;
    }
    return e;
}

static void resume_rank(int rank, void *arg)
{
    resume_ctx *c = arg;
    int world = zinc_world_size(c->world), np = 0;
    zinc_engine_t *e = resume_engine(c, rank, c->save_zero, &np);
    zinc_status s = e ? toy_steps(e, rank, world, 0, c->steps, np) : ZINC_ERR_ABORTED;
    if (s == ZINC_OK) s = zinc_ckpt_save(e, c->dir, "mid", NULL);
    ZT_CHECK(s == ZINC_OK, "save rank %d: %s", rank, zinc_last_error(e));
    zinc_engine_destroy(e);
    e = s == ZINC_OK ? resume_engine(c, rank, c->load_zero, &np) : NULL;
    if (e) s = zinc_ckpt_load(e, c->dir, "mid", NULL);
    if (e && s == ZINC_OK) s = toy_steps(e, rank, world, c->steps, c->steps, np);
    ZT_CHECK(!e || s == ZINC_OK, "load/train rank %d: %s", rank, zinc_last_error(e));
    for (int p = 0; e && s == ZINC_OK && p < np; p++) {
        float *v = malloc((size_t)zinc_param_numel(e, p) * sizeof *v);
        s = zinc_param_get(e, p, v);
        pthread_mutex_lock(&c->mu);
        if (rank == 0) {
            c->out->final[p] = v;
            c->out->numel[p] = zinc_param_numel(e, p);
            c->out->nparams = np;
            v = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        free(v);
    }
    if (!e || s != ZINC_OK) zinc_world_abort(c->world, rank, "checkpoint rank failed");
    zinc_engine_destroy(e);
}

void toy_resume_run(int stage, zinc_dtype dtype, const char *save_zero, const char *load_zero,
                    const char *dir, int steps, toy_run *out)
{
    resume_ctx c = {.stage = stage, .steps = steps, .dtype = dtype, .save_zero = save_zero,
                    .load_zero = load_zero, .dir = dir, .out = out};
    pthread_mutex_init(&c.mu, NULL);
    ZT_OK(zinc_world_create_local(2, &c.world));
    zt_run_ranks(2, resume_rank, &c);
    zinc_world_destroy(c.world);
    pthread_mutex_destroy(&c.mu);
}
