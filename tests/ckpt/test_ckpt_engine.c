/*
 * test_ckpt_engine.c — checkpoints through the public API, on local worlds with the toy model of
 * tests/engine (analytic gradients, odd group sizes).
 *
 *  - bitwise continuation: 3 steps, save (async), 3 more steps == 6 uninterrupted steps; a fresh
 *    world that loads the tag and trains 3 steps gets the same bits (master, m, v, step, loss
 *    scaler; fp16 with a dynamic loss scale)
 *  - resharding: the tag saved at N = 4 (stage 2) loads at M = 1 (stage 0), 2 (stage 3),
 *    8 (stage 1, ranks with empty slices), 3 (a prime, stage 2) and 7 (stage 3): master, m and v
 *    in model space are exactly the saved ones; in fp32, training on at M in {1, 2, 3, 8}
 *    agrees with the uninterrupted N = 4 run to fp32 rounding
 *  - the client blob comes back; weights-only load gives step 0 and zero moments
 *  - a load inside an accumulation window (a micro-step handed over, a gradient in a bucket)
 *    drops the window's gradients: the run goes on as after a load into a fresh engine
 *  - zinc_param_state_get gives each parameter's saved m and v whole after those loads (every
 *    world size and stage); zinc_param_state_set reads back; an unknown state is refused
 *  - weights-only with keep_optimizer into an engine that trained 2 steps: the tag's master,
 *    the 2 steps' moments, step count and loss scale
 *  - zinc_ckpt_read_tensor gives each tensor's saved master in full (saved at 4 ranks), found 0
 *    for an absent name, MISMATCH for another shape, an error naming a missing tag;
 *    zinc_ckpt_read_tensors reads them all in one call beside an absent name and a probe, and a
 *    wrong shape anywhere reads nothing, and n 0 opens nothing; the same without an engine
 *    (e NULL; tag NULL: the newest valid tag), and zinc_ckpt_find_tag's tag and client blob
 *    (a blob larger than the room: INVALID_ARG with its size); a model
 *    with a parameter the tag lacks loads it weights-only with missing_ok (the parameter keeps
 *    its value, the others are the tag's; `extra` counts the tag's other tensors), and is
 *    refused naming it otherwise
 *  - safetensors: export is deterministic and holds the master weights (fp32 exact, bf16
 *    rounded to nearest even by an independent formula); zinc_load_safetensors sets them
 *  - stage 3: both loads are refused while a group is gathered (its view would keep the old
 *    values), and load once it is released; a save with a blob size and no blob is refused
 */
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "engine/internal.h"
#include "testutil.h"
#include "toy.h"

static char root[512];

/* Model-space state gathered from every rank's pieces. */
typedef struct {
    int np;
    int64_t numel[TOY_MAX_PARAMS];
    float *w[TOY_MAX_PARAMS], *m[TOY_MAX_PARAMS], *v[TOY_MAX_PARAMS];
    int64_t step;
    double scale;
} tstate;

static void ts_free(tstate *t)
{
    for (int p = 0; p < TOY_MAX_PARAMS; p++) {
        free(t->w[p]);
        free(t->m[p]);
        free(t->v[p]);
    }
    memset(t, 0, sizeof *t);
}

typedef struct {
    int world, stage;
    const char *prec;              /* "fp16", "fp32" */
    int micro0;                    /* global micro-step of the first step trained */
    const char *load_tag;          /* NULL: no load; "" : automatic; else the tag */
    int weights_only;
    int keep_optimizer;            /* with weights_only: keep the Adam state and counters */
    int steps_pre_load;            /* steps trained before the load */
    int open_window;               /* before the load, a micro-step handed over without its
                                      step and (stages 2-3) a gradient left in a bucket */
    int steps_before;              /* steps before the save */
    const char *save_tag;          /* NULL: no save */
    int async;
    int steps_after;
    const char *safetensors;       /* set initial weights from this file after registering */
    zinc_status expect;            /* the status the session must end with */
    tstate after_load, at_save, end;
    int state_api;                 /* after the load: m and v through zinc_param_state_get, and
                                      a zinc_param_state_set read back */
    tstate api;                    /* rank 0's zinc_param_state_get results (m, v) */
    long set_bad;                  /* elements the set-then-get round trip got wrong */
    char blob_back[64];
    size_t blob_bytes;
    char loaded_tag[256];
    zinc_status status;
    char error[1024];
    int expect_failure;            /* any failure will do (ranks fail with different codes) */
    char rank_error[8][1024];      /* each failing rank's message */
    pthread_mutex_t mu;
} session;

static char *config(const session *s)
{
    char *b = malloc(1024);
    snprintf(b, 1024,
             "{\"train_micro_batch_size_per_gpu\": 1, %s \"optimizer\": {\"type\": \"AdamW\", "
             "\"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}, \"zero_optimization\": "
             "{\"stage\": %d}, \"zinc\": {\"comm_timeout_s\": 20, \"ckpt_chunk_bytes\": 8192}}",
             !strcmp(s->prec, "fp16") ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8},"
                                      : "",
             s->stage);
    return b;
}

static zinc_status collect(zinc_engine_t *e, session *s, tstate *t)
{
    zshard_piece *pc;
    int n;
    zinc_status st = zeng_shard_pieces(e, &pc, &n);
    if (st != ZINC_OK) return st;
    pthread_mutex_lock(&s->mu);
    t->np = zinc_engine_param_count(e);
    for (int p = 0; p < t->np; p++) {
        t->numel[p] = zinc_param_numel(e, p);
        if (!t->w[p]) {
            t->w[p] = calloc((size_t)t->numel[p], 4);
            t->m[p] = calloc((size_t)t->numel[p], 4);
            t->v[p] = calloc((size_t)t->numel[p], 4);
        }
    }
    for (int i = 0; i < n && st == ZINC_OK; i++) {
        size_t k = pc[i].hi - pc[i].lo;
        st = e->dev->iface->download(e->dev, t->w[pc[i].param] + pc[i].lo, pc[i].master, k * 4);
        if (st == ZINC_OK) st = e->dev->iface->download(e->dev, t->m[pc[i].param] + pc[i].lo, pc[i].m, k * 4);
        if (st == ZINC_OK) st = e->dev->iface->download(e->dev, t->v[pc[i].param] + pc[i].lo, pc[i].v, k * 4);
    }
    int64_t skipped;                 /* the public accessors, which the checks below rely on */
    if (zinc_engine_steps(e, &t->step, &skipped) != 0) st = ZINC_ERR_INVALID_ARG;
    t->scale = zinc_engine_loss_scale(e);
    pthread_mutex_unlock(&s->mu);
    free(pc);
    return st;
}

/* zinc_param_state_get of every parameter's m and v (collective; rank 0 keeps them in s->api),
 * then zinc_param_state_set of parameter 0's v to a pattern, read back (rank 0 counts the
 * elements that differ in s->set_bad) and the saved v put back. */
static zinc_status state_api(zinc_engine_t *e, session *s, int rank)
{
    int np = zinc_engine_param_count(e);
    zinc_status st = ZINC_OK;
    for (int p = 0; p < np && st == ZINC_OK; p++) {
        size_t n = (size_t)zinc_param_numel(e, p);
        float *m = malloc(n * 4), *v = malloc(n * 4);
        st = zinc_param_state_get(e, p, ZINC_STATE_EXP_AVG, m);
        if (st == ZINC_OK) st = zinc_param_state_get(e, p, ZINC_STATE_EXP_AVG_SQ, v);
        if (rank == 0 && st == ZINC_OK) {
            s->api.np = np;
            s->api.numel[p] = (int64_t)n;
            s->api.m[p] = m;
            s->api.v[p] = v;
        } else {
            free(m);
            free(v);
        }
    }
    size_t n0 = np > 0 ? (size_t)zinc_param_numel(e, 0) : 0;
    float *pat = malloc(n0 * 4 + 4), *back = malloc(n0 * 4 + 4), *keep = malloc(n0 * 4 + 4);
    for (size_t i = 0; i < n0; i++) pat[i] = 0.25f * (float)i + 1.0f;
    if (st == ZINC_OK && n0) st = zinc_param_state_get(e, 0, ZINC_STATE_EXP_AVG_SQ, keep);
    if (st == ZINC_OK && n0) st = zinc_param_state_set(e, 0, ZINC_STATE_EXP_AVG_SQ, pat);
    if (st == ZINC_OK && n0) st = zinc_param_state_get(e, 0, ZINC_STATE_EXP_AVG_SQ, back);
    if (st == ZINC_OK && rank == 0)
        for (size_t i = 0; i < n0; i++) s->set_bad += back[i] != pat[i];
    if (st == ZINC_OK && n0) st = zinc_param_state_set(e, 0, ZINC_STATE_EXP_AVG_SQ, keep);
    if (st == ZINC_OK && zinc_param_state_get(e, 0, (zinc_param_state)7, back) != ZINC_ERR_INVALID_ARG)
        s->set_bad += 1000000;     /* an unknown state must be refused */
    free(pat);
    free(back);
    free(keep);
    return st;
}

static void fail(session *s, int rank, zinc_engine_t *e, zinc_status st)
{
    pthread_mutex_lock(&s->mu);
    if (rank < 8) snprintf(s->rank_error[rank], sizeof s->rank_error[rank], "%s", zinc_last_error(e));
    if (s->status == ZINC_OK) {
        s->status = st;
        snprintf(s->error, sizeof s->error, "rank %d: %s", rank, zinc_last_error(e));
    }
    pthread_mutex_unlock(&s->mu);
}

static void train(zinc_engine_t *e, session *s, int rank, int *micro, int steps, zinc_status *st)
{
    for (int k = 0; k < steps && *st == ZINC_OK; k++, (*micro)++) {
        *st = toy_micro_step(e, rank, s->world, *micro, zinc_engine_param_count(e), 0);
        if (*st == ZINC_OK) *st = zinc_step(e, NULL);
    }
}

static zinc_world_t *g_world;

static void run_rank(int rank, void *arg)
{
    session *s = arg;
    char *cfg = config(s);
    zinc_engine_options_t o = {.config_json = cfg, .world = g_world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    int np = 0, micro = s->micro0;
    char dir[700];
    snprintf(dir, sizeof dir, "%s/save", root);
    zinc_status st = zinc_engine_create(&o, &e);
    free(cfg);
    if (st == ZINC_OK) st = toy_register(e, &np);
    if (st == ZINC_OK && s->safetensors) st = zinc_load_safetensors(e, s->safetensors);
    train(e, s, rank, &micro, s->steps_pre_load, &st);
    if (st == ZINC_OK && s->open_window) {
        /* gradients the load must drop: a whole micro-step handed over (its step not called),
         * then one more parameter's gradient in its bucket, not handed over */
        st = toy_micro_step(e, rank, s->world, 1000, np, 0);
        void *view = NULL;
        if (st == ZINC_OK && s->stage >= 2) st = zinc_param_grad(e, 0, &view);
        if (st == ZINC_OK && view)
            memset(view, 0x3c, (size_t)zinc_param_numel(e, 0) * zinc_dtype_size(zinc_engine_dtype(e)));
    }
    if (st == ZINC_OK && s->load_tag) {
        zinc_ckpt_load_options_t lo;
        memset(&lo, 0, sizeof lo);
        lo.weights_only = s->weights_only;
        lo.keep_optimizer = s->keep_optimizer;
        char blob[64];
        lo.client_blob = blob;
        lo.client_blob_cap = sizeof blob;
        st = zinc_ckpt_load(e, dir, s->load_tag[0] ? s->load_tag : NULL, &lo);
        if (st == ZINC_OK && rank == 0) {
            memcpy(s->blob_back, blob, lo.client_blob_bytes < sizeof blob ? lo.client_blob_bytes : sizeof blob);
            s->blob_bytes = lo.client_blob_bytes;
            snprintf(s->loaded_tag, sizeof s->loaded_tag, "%s", lo.loaded_tag);
        }
    }
    if (st == ZINC_OK) st = collect(e, s, &s->after_load);
    if (st == ZINC_OK && s->state_api) st = state_api(e, s, rank);
    train(e, s, rank, &micro, s->steps_before, &st);
    if (st == ZINC_OK && s->save_tag) {
        static const char blob[] = "epoch 3, batch 17";
        zinc_ckpt_save_options_t so = {blob, sizeof blob, 1, s->async, 0};
        st = zinc_ckpt_save(e, dir, s->save_tag, &so);
        if (st == ZINC_OK) st = collect(e, s, &s->at_save);
    }
    train(e, s, rank, &micro, s->steps_after, &st);
    if (st == ZINC_OK) st = zinc_ckpt_wait(e);
    if (st == ZINC_OK) st = collect(e, s, &s->end);
    if (st != ZINC_OK) {
        fail(s, rank, e, st);
        if (st != s->expect && !s->expect_failure) zinc_world_abort(g_world, rank, "test rank failed");
    }
    zinc_engine_destroy(e);
}

static void run(session *s)
{
    pthread_mutex_init(&s->mu, NULL);
    s->status = zinc_world_create_local(s->world, &g_world);
    if (s->status == ZINC_OK) zt_run_ranks(s->world, run_rank, s);
    zinc_world_destroy(g_world);
    g_world = NULL;
    pthread_mutex_destroy(&s->mu);
    if (s->expect_failure)
        ZT_CHECK(s->status != ZINC_OK, "session world %d stage %d: succeeded, want a failure",
                 s->world, s->stage);
    else
        ZT_CHECK(s->status == s->expect, "session world %d stage %d: %s (want %s)", s->world,
                 s->stage, s->error, zinc_status_string(s->expect));
}

/* Number of elements that differ (bitwise, or beyond tol when tol > 0). */
static long diff(const tstate *a, const tstate *b, int which, double tol)
{
    long bad = 0;
    for (int p = 0; p < a->np; p++) {
        const float *x = which == 0 ? a->w[p] : which == 1 ? a->m[p] : a->v[p];
        const float *y = which == 0 ? b->w[p] : which == 1 ? b->m[p] : b->v[p];
        if (!x || !y) return -1;
        for (int64_t i = 0; i < a->numel[p]; i++) {
            if (tol > 0 ? fabs((double)x[i] - (double)y[i]) > tol : memcmp(&x[i], &y[i], 4) != 0) bad++;
        }
    }
    return bad;
}

static void expect_same(const tstate *a, const tstate *b, const char *what, int with_scalars)
{
    for (int k = 0; k < 3; k++) {
        long d = diff(a, b, k, 0);
        ZT_CHECK(d == 0, "%s: %s differs in %ld elements", what, k == 0 ? "master" : k == 1 ? "m" : "v", d);
    }
    if (with_scalars)
        ZT_CHECK(a->step == b->step && a->scale == b->scale, "%s: step %lld vs %lld, scale %g vs %g",
                 what, (long long)a->step, (long long)b->step, a->scale, b->scale);
}

static uint16_t bf16_rne(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

/* A load at stage 3 while the caller holds a group gathered: its view would keep the old
 * values after the load (a forward before the release ran on them), so zinc_ckpt_load and
 * zinc_load_safetensors refuse, as zinc_param_set does, before anything changes; after the
 * release they load, and the next gather shows the loaded values. Both returned ZINC_OK and left
 * the view stale before. At 2 ranks every rank refuses alike and the world stays usable (a
 * refusal that aborted the world made the load after the release fail). A save given a blob
 * size without the blob is refused, writing nothing (it returned ZINC_OK with no blob, the
 * caller's resume state lost in silence). */
typedef struct {
    zinc_world_t *world;
    char dir[700], st[720];
} gathered_ctx;

static void load_while_gathered(int rank, void *arg)
{
    gathered_ctx *c = arg;
    zinc_engine_options_t o = {
        .config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                       "{\"stage\": 3, \"stage3_param_persistence_threshold\": 0}}",
        .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    int g = -1, p = -1;
    int64_t shape[1] = {8};
    ZT_OK(zinc_group_add(e, "g", &g));
    ZT_OK(zinc_param_add(e, g, "w", 1, shape, ZINC_DTYPE_FP32, &p));
    ZT_OK(zinc_finalize(e));
    float ones[8], twos[8], got[8];
    for (int i = 0; i < 8; i++) ones[i] = 1.0f, twos[i] = 2.0f;
    ZT_OK(zinc_param_set(e, p, ones));
    ZT_OK(zinc_ckpt_save(e, c->dir, "ones", NULL));
    ZT_OK(zinc_param_set(e, p, twos));
    ZT_OK(zinc_gather(e, g));
    float *view = NULL;
    ZT_OK(zinc_param_data(e, p, (void **)&view));
    zinc_status s = zinc_ckpt_load(e, c->dir, NULL, NULL);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "zinc_ckpt_load: group 'g' is "
                                           "gathered; zinc_release it first"),
             "rank %d: a load with a group gathered: %s: %s", rank, zinc_status_string(s),
             zinc_last_error(e));
    s = zinc_load_safetensors(e, c->st);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "zinc_load_safetensors: group 'g' "
                                           "is gathered"),
             "rank %d: a safetensors load with a group gathered: %s: %s", rank,
             zinc_status_string(s), zinc_last_error(e));
    ZT_OK(zinc_param_get(e, p, got));
    ZT_CHECK(view && view[0] == 2.0f && got[0] == 2.0f && got[7] == 2.0f,
             "rank %d: the refused loads changed nothing: view %g, master %g", rank,
             view ? view[0] : -1.0f, got[0]);
    ZT_OK(zinc_release(e, g));
    ZT_OK(zinc_ckpt_load(e, c->dir, NULL, NULL));
    ZT_OK(zinc_gather(e, g));
    ZT_OK(zinc_param_data(e, p, (void **)&view));
    ZT_CHECK(view && view[0] == 1.0f && view[7] == 1.0f, "rank %d: after the release, the load: "
             "view %g", rank, view ? view[0] : -1.0f);
    ZT_OK(zinc_release(e, g));
    ZT_OK(zinc_load_safetensors(e, c->st));
    ZT_OK(zinc_gather(e, g));
    ZT_OK(zinc_param_data(e, p, (void **)&view));
    ZT_CHECK(view && view[0] == 3.0f && view[7] == 3.0f, "rank %d: after the release, the "
             "safetensors load: view %g", rank, view ? view[0] : -1.0f);
    ZT_OK(zinc_release(e, g));
    zinc_ckpt_save_options_t so = {.client_blob = NULL, .client_blob_bytes = 100};
    s = zinc_ckpt_save(e, c->dir, "noblob", &so);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(zinc_last_error(e), "client_blob is NULL with "
                                                 "client_blob_bytes 100"),
             "rank %d: a NULL blob of 100 bytes: %s: %s", rank, zinc_status_string(s),
             zinc_last_error(e));
    zinc_ckpt_save_options_t odd = {.async = 7};   /* was taken as 1 (background) */
    s = zinc_ckpt_save(e, c->dir, "async7", &odd);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(zinc_last_error(e), "async is 7"),
             "rank %d: async 7: %s: %s", rank, zinc_status_string(s), zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_load_while_gathered(int ranks)
{
    gathered_ctx c = {0};
    snprintf(c.dir, sizeof c.dir, "%s/gathered%d", root, ranks);
    snprintf(c.st, sizeof c.st, "%s/threes%d.safetensors", root, ranks);
    FILE *f = fopen(c.st, "wb");
    ZT_CHECK(f != NULL, "cannot write %s", c.st);
    if (!f) return;
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}";
    uint64_t n = strlen(h);
    float threes[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    fwrite(&n, 8, 1, f);
    fputs(h, f);
    fwrite(threes, 4, 8, f);
    fclose(f);
    if (ranks == 1)
        load_while_gathered(0, &c);
    else
        zt_run_world(ranks, &c.world, load_while_gathered, &c);
    char t[800];
    struct stat sb;
    snprintf(t, sizeof t, "%s/noblob", c.dir);
    ZT_CHECK(stat(t, &sb) != 0, "the refused save left %s", t);
    snprintf(t, sizeof t, "%s/ones", c.dir);
    zck_rmdir_flat(t);
    snprintf(t, sizeof t, "%s/latest", c.dir);
    unlink(t);
    rmdir(c.dir);
    unlink(c.st);
}

int main(void)
{
    snprintf(root, sizeof root, "%s/zinc-ckpt-engine-%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    mkdir(root, 0755);
    test_load_while_gathered(1);
    test_load_while_gathered(2);

    /* --- same world size: bitwise continuation (fp16, dynamic loss scale) --- */
    session A = {.world = 4, .stage = 2, .prec = "fp16", .steps_before = 6};
    run(&A);
    session B = {.world = 4, .stage = 2, .prec = "fp16", .steps_before = 3, .save_tag = "t3",
                 .async = 1, .steps_after = 3};
    run(&B);
    expect_same(&A.end, &B.end, "6 steps with an async save after 3 vs without", 1);
    session C = {.world = 4, .stage = 2, .prec = "fp16", .micro0 = 3, .load_tag = "",
                 .steps_after = 3};
    run(&C);
    expect_same(&B.at_save, &C.after_load, "state after load vs at save", 1);
    expect_same(&A.end, &C.end, "resumed run vs uninterrupted run", 1);
    ZT_CHECK(C.blob_bytes == 18 && !strcmp(C.blob_back, "epoch 3, batch 17"), "client blob: %zu bytes",
             C.blob_bytes);
    ZT_CHECK(!strcmp(C.loaded_tag, "t3"), "loaded tag %s", C.loaded_tag);
    ZT_CHECK(B.at_save.step == 3, "step at save %lld", (long long)B.at_save.step);

    /* A load inside an accumulation window (a micro-step handed over without its step, a
     * gradient in a bucket) drops that window's gradients: it resumes as a load into a fresh
     * engine does, bit for bit. The load before this kept them, and the next hand-over was
     * refused ("already handed over"). */
    for (int stage = 0; stage <= 3; stage++) {
        session F = {.world = 2, .stage = stage, .prec = "fp16", .micro0 = 3, .load_tag = "t3",
                     .steps_after = 2};
        session O = F;
        O.open_window = 1;
        run(&F);
        run(&O);
        char what[96];
        snprintf(what, sizeof what, "stage %d: a load inside a window, then 2 steps, vs a load "
                 "into a fresh engine", stage);
        expect_same(&F.end, &O.end, what, 1);
        ts_free(&F.after_load); ts_free(&F.end);
        ts_free(&O.after_load); ts_free(&O.end);
    }

    /* --- other world sizes and stages: the saved state, exactly --- */
    static const int Ms[][2] = {{1, 0}, {2, 3}, {8, 1}, {3, 2}, {7, 3}};
    for (int i = 0; i < 5; i++) {
        session D = {.world = Ms[i][0], .stage = Ms[i][1], .prec = "fp16", .load_tag = "t3",
                     .state_api = 1};
        run(&D);
        char what[64];
        snprintf(what, sizeof what, "load at world %d stage %d", Ms[i][0], Ms[i][1]);
        expect_same(&B.at_save, &D.after_load, what, 1);
        /* zinc_param_state_get gives the saved moments whole, at every world size and stage */
        ZT_CHECK(diff(&B.at_save, &D.api, 1, 0) == 0 && diff(&B.at_save, &D.api, 2, 0) == 0,
                 "%s: zinc_param_state_get differs from the saved m (%ld) or v (%ld)", what,
                 diff(&B.at_save, &D.api, 1, 0), diff(&B.at_save, &D.api, 2, 0));
        ZT_CHECK(D.set_bad == 0, "%s: zinc_param_state_set read back wrong in %ld elements",
                 what, D.set_bad);
        ts_free(&D.api);
        ts_free(&D.after_load);
        ts_free(&D.at_save);
        ts_free(&D.end);
    }
    /* weights only: fresh optimizer state */
    session W = {.world = 2, .stage = 1, .prec = "fp16", .load_tag = "t3", .weights_only = 1};
    run(&W);
    ZT_CHECK(diff(&B.at_save, &W.after_load, 0, 0) == 0, "weights-only load: master differs");
    long nz = 0;
    for (int p = 0; p < W.after_load.np; p++)
        for (int64_t k = 0; W.after_load.m[p] && k < W.after_load.numel[p]; k++)
            nz += W.after_load.m[p][k] != 0 || W.after_load.v[p][k] != 0;
    ZT_CHECK(nz == 0 && W.after_load.step == 0, "weights-only: %ld nonzero moments, step %lld", nz,
             (long long)W.after_load.step);
    ts_free(&W.after_load);
    ts_free(&W.end);
    /* weights only with keep_optimizer (DeepSpeed's load_module_only) into an engine that has
     * trained 2 steps: the master is t3's; m, v, the step count and the loss scale are those of
     * the 2 steps (an engine that trained them without a load) */
    session P2 = {.world = 2, .stage = 1, .prec = "fp16", .steps_before = 2};
    run(&P2);
    session K = {.world = 2, .stage = 1, .prec = "fp16", .steps_pre_load = 2, .load_tag = "t3",
                 .weights_only = 1, .keep_optimizer = 1};
    run(&K);
    ZT_CHECK(diff(&B.at_save, &K.after_load, 0, 0) == 0, "keep_optimizer: master differs");
    ZT_CHECK(diff(&P2.end, &K.after_load, 1, 0) == 0 && diff(&P2.end, &K.after_load, 2, 0) == 0,
             "keep_optimizer: the moments are not the 2 steps' (m %ld, v %ld differ)",
             diff(&P2.end, &K.after_load, 1, 0), diff(&P2.end, &K.after_load, 2, 0));
    ZT_CHECK(K.after_load.step == 2 && P2.end.step == 2 && K.after_load.scale == P2.end.scale,
             "keep_optimizer: step %lld, scale %g (want 2, %g)", (long long)K.after_load.step,
             K.after_load.scale, P2.end.scale);
    ts_free(&P2.after_load); ts_free(&P2.end);
    ts_free(&K.after_load); ts_free(&K.end);

    /* a checkpoint without Adam state: an error unless weights_only is asked for */
    {
        char mp[800], *txt = NULL, err[ZCK_ERR];
        size_t len;
        snprintf(mp, sizeof mp, "%s/save/t3/manifest.json", root);
        ZT_OK(zck_read_file(mp, &txt, &len, err));
        json_object *o = txt ? json_tokener_parse(txt) : NULL, *rs, *ss;
        if (o) {
            json_object *st = json_object_new_array();
            json_object_array_add(st, json_object_new_string("master"));
            json_object_object_add(o, "streams", st);
            json_object_object_get_ex(o, "ranks", &rs);
            for (size_t r = 0; r < json_object_array_length(rs); r++) {
                json_object_object_get_ex(json_object_array_get_idx(rs, r), "streams", &ss);
                json_object_object_del(ss, "adam_m");
                json_object_object_del(ss, "adam_v");
                json_object_object_del(ss, "weights16");
            }
            /* An edit on purpose: reseal, or the load refuses the manifest's checksum. */
            char *t = strdup(json_object_to_json_string(o));
            ZT_CHECK(zck_manifest_reseal(t, strlen(t)) == 0, "reseal the edited manifest");
            FILE *f = fopen(mp, "w");
            fwrite(t, 1, strlen(t), f);
            fclose(f);
            free(t);
            json_object_put(o);
        }
        free(txt);
        session X = {.world = 2, .stage = 2, .prec = "fp16", .load_tag = "t3",
                     .expect = ZINC_ERR_UNSUPPORTED};
        run(&X);
        ZT_CHECK(strstr(X.error, "weights_only") != NULL, "message: %s", X.error);
        session Y = {.world = 2, .stage = 2, .prec = "fp16", .load_tag = "t3", .weights_only = 1};
        run(&Y);
        ZT_CHECK(diff(&B.at_save, &Y.after_load, 0, 0) == 0, "weights-only checkpoint: master differs");
        ts_free(&X.after_load); ts_free(&X.end);
        ts_free(&Y.after_load); ts_free(&Y.end);
    }

    /* --- fp32: training on at another world size agrees to rounding --- */
    session A32 = {.world = 4, .stage = 1, .prec = "fp32", .steps_before = 6};
    run(&A32);
    session B32 = {.world = 4, .stage = 1, .prec = "fp32", .steps_before = 3, .save_tag = "f3"};
    run(&B32);
    static const int Ms32[][2] = {{1, 0}, {2, 3}, {3, 2}, {8, 1}};
    for (int i = 0; i < 4; i++) {
        session D = {.world = Ms32[i][0], .stage = Ms32[i][1], .prec = "fp32", .micro0 = 3,
                     .load_tag = "f3", .steps_after = 3};
        run(&D);
        long d = diff(&A32.end, &D.end, 0, 1e-5);
        ZT_CHECK(d == 0, "fp32 resume at world %d: %ld weights differ from the N=4 run by > 1e-5",
                 Ms32[i][0], d);
        ZT_CHECK(D.end.step == 6, "step %lld", (long long)D.end.step);
        ts_free(&D.after_load);
        ts_free(&D.end);
    }

    /* --- a chunk that fails on rank 1 only: rank 0's error names rank 1, its file and chunk --- */
    {
        session S = {.world = 2, .stage = 2, .prec = "fp32", .steps_before = 2, .save_tag = "c2"};
        run(&S);
        char rf[800];
        snprintf(rf, sizeof rf, "%s/save/c2/rank-00001.zck", root);
        FILE *f = fopen(rf, "r+b");
        ZT_CHECK(f != NULL, "open %s", rf);
        if (f) {
            fseek(f, 40, SEEK_SET);      /* inside the first chunk, past the 16-byte header */
            int c = fgetc(f);
            fseek(f, 40, SEEK_SET);
            fputc(c ^ 0x5a, f);
            fclose(f);
        }
        session L = {.world = 2, .stage = 2, .prec = "fp32", .load_tag = "c2", .expect_failure = 1};
        run(&L);
        ZT_CHECK(strstr(L.rank_error[1], "rank-00001.zck") && strstr(L.rank_error[1], "chunk"),
                 "rank 1's own message: %s", L.rank_error[1]);
        ZT_CHECK(strstr(L.rank_error[0], "on rank 1") && strstr(L.rank_error[0], "rank-00001.zck") &&
                     strstr(L.rank_error[0], "chunk"),
                 "rank 0's message should name rank 1, its file and chunk: %s", L.rank_error[0]);
        ts_free(&S.end); ts_free(&S.at_save); ts_free(&S.after_load);
        ts_free(&L.after_load); ts_free(&L.end);
    }

    /* --- zinc_ckpt_read_tensor: one tensor in full, for a parameter the engine does not
     *     register (frozen now, trained at the save): t3 was saved at 4 ranks, stage 2 --- */
    {
        zinc_world_t *w1 = NULL;
        zinc_engine_t *e = NULL;
        char *cfg = config(&(session){.world = 1, .stage = 0, .prec = "fp32"});
        zinc_engine_options_t o = {.config_json = cfg, .rank = 0, .threads = 1};
        int np = 0;
        ZT_OK(zinc_world_create_local(1, &w1));
        o.world = w1;
        ZT_OK(zinc_engine_create(&o, &e));
        ZT_OK(toy_register(e, &np));
        char dir[700];
        snprintf(dir, sizeof dir, "%s/save", root);
        long bad = 0;
        for (int p = 0; e && p < np; p++) {
            const zplan_param *P = &e->plan.params[p];
            float *v = malloc(P->numel * 4);
            int found = -1;
            ZT_OK(zinc_ckpt_read_tensor(e, dir, "t3", P->name, P->shape, P->ndim, v, &found));
            ZT_CHECK(found == 1, "%s: found %d", P->name, found);
            bad += found == 1 && memcmp(v, B.at_save.w[p], P->numel * 4) != 0;
            free(v);
        }
        ZT_CHECK(bad == 0, "zinc_ckpt_read_tensor: %ld tensors differ from the saved master", bad);
        if (e && np > 0) {
            const zplan_param *P = &e->plan.params[0];
            float one = 7.0f;
            int found = -1;
            ZT_OK(zinc_ckpt_read_tensor(e, dir, "t3", "no.such.tensor", P->shape, P->ndim, &one,
                                        &found));
            ZT_CHECK(found == 0 && one == 7.0f, "an absent name: found %d, out written", found);
            int64_t wrong[8];
            memcpy(wrong, P->shape, sizeof wrong);
            wrong[0] += 1;
            float *v = malloc((P->numel + 64) * 4);
            ZT_CHECK(zinc_ckpt_read_tensor(e, dir, "t3", P->name, wrong, P->ndim, v, &found) ==
                         ZINC_ERR_MISMATCH && found == 0 && strstr(zinc_last_error(e), P->name),
                     "another shape: %s", zinc_last_error(e));
            ZT_CHECK(zinc_ckpt_read_tensor(e, dir, "no_tag", P->name, P->shape, P->ndim, v,
                                           &found) != ZINC_OK &&
                         strstr(zinc_last_error(e), "no_tag"),
                     "a missing tag: %s", zinc_last_error(e));
            /* found NULL is the error, with an engine or without one (which the call allows) */
            ZT_CHECK(zinc_ckpt_read_tensor(NULL, dir, "t3", P->name, P->shape, P->ndim, v,
                                           NULL) == ZINC_ERR_INVALID_ARG &&
                         strstr(zinc_last_error(NULL), "found is NULL"),
                     "found NULL without an engine: %s", zinc_last_error(NULL));
            free(v);
        }
        /* zinc_ckpt_read_tensors: every tensor in one read, beside an absent name and a probe;
         * a wrong shape anywhere in the list reads nothing and names the tensor */
        if (e && np > 1) {
            zinc_ckpt_tensor_request_t rq[TOY_MAX_PARAMS + 2];
            float *outs[TOY_MAX_PARAMS];
            float none = 7.0f;
            for (int p = 0; p < np; p++) {
                const zplan_param *P = &e->plan.params[p];
                outs[p] = calloc(P->numel, 4);
                rq[p] = (zinc_ckpt_tensor_request_t){P->name, P->shape, P->ndim, outs[p], -1};
            }
            const zplan_param *P1 = &e->plan.params[1];
            rq[np] = (zinc_ckpt_tensor_request_t){"no.such.tensor", P1->shape, P1->ndim, &none, -1};
            rq[np + 1] = (zinc_ckpt_tensor_request_t){P1->name, P1->shape, P1->ndim, NULL, -1};
            ZT_OK(zinc_ckpt_read_tensors(e, dir, "t3", rq, np + 2));
            long off = 0;
            for (int p = 0; p < np; p++)
                off += rq[p].found != 1 ||
                       memcmp(outs[p], B.at_save.w[p], e->plan.params[p].numel * 4);
            ZT_CHECK(off == 0, "zinc_ckpt_read_tensors: %ld of %d tensors not found or not the "
                     "saved master", off, np);
            ZT_CHECK(rq[np].found == 0 && none == 7.0f && rq[np + 1].found == 1,
                     "an absent name: found %d; a probe: found %d", rq[np].found, rq[np + 1].found);
            int64_t wrong[8];
            memcpy(wrong, P1->shape, sizeof wrong);
            wrong[P1->ndim - 1] += 2;
            rq[np + 1] = (zinc_ckpt_tensor_request_t){P1->name, wrong, P1->ndim, NULL, -1};
            memset(outs[0], 0, e->plan.params[0].numel * 4);
            ZT_CHECK(zinc_ckpt_read_tensors(e, dir, "t3", rq, np + 2) == ZINC_ERR_MISMATCH &&
                         strstr(zinc_last_error(e), P1->name) && rq[0].found == 0 &&
                         outs[0][0] == 0.0f && outs[0][e->plan.params[0].numel - 1] == 0.0f,
                     "a wrong shape last: found %d, %s", rq[0].found, zinc_last_error(e));
            /* no engine (zinc.utils.zero_to_fp32's read): the same tensors with e NULL, the
             * tag named or NULL (the newest valid one); errors in zinc_last_error(NULL) */
            for (int p = 0; p < np; p++) {
                memset(outs[p], 0, e->plan.params[p].numel * 4);
                rq[p].found = -1;
            }
            rq[np + 1] = (zinc_ckpt_tensor_request_t){P1->name, P1->shape, P1->ndim, NULL, -1};
            ZT_OK(zinc_ckpt_read_tensors(NULL, dir, "t3", rq, np + 2));
            off = 0;
            for (int p = 0; p < np; p++)
                off += rq[p].found != 1 ||
                       memcmp(outs[p], B.at_save.w[p], e->plan.params[p].numel * 4);
            ZT_CHECK(off == 0 && rq[np].found == 0 && rq[np + 1].found == 1,
                     "without an engine: %ld of %d tensors not the saved master", off, np);
            ZT_OK(zinc_ckpt_read_tensors(NULL, dir, NULL, rq, 1));
            ZT_CHECK(rq[0].found == 1, "without an engine, tag NULL: found %d", rq[0].found);
            ZT_CHECK(zinc_ckpt_read_tensors(NULL, dir, "no_tag", rq, 1) != ZINC_OK &&
                         strstr(zinc_last_error(NULL), "no_tag"),
                     "without an engine, a missing tag: %s", zinc_last_error(NULL));
            char tag[256], blob[64];
            size_t nb = 99;
            ZT_OK(zinc_ckpt_find_tag(dir, "t3", tag, sizeof tag, blob, sizeof blob, &nb));
            ZT_CHECK(!strcmp(tag, "t3") && nb == sizeof "epoch 3, batch 17" &&
                         !memcmp(blob, "epoch 3, batch 17", nb),
                     "zinc_ckpt_find_tag: tag %s, blob %zu bytes", tag, nb);
            ZT_CHECK(zinc_ckpt_find_tag(dir, "t3", tag, sizeof tag, blob, 4, &nb) ==
                         ZINC_ERR_INVALID_ARG && nb == sizeof "epoch 3, batch 17",
                     "a blob larger than blob_cap: %zu bytes, %s", nb, zinc_last_error(NULL));
            ZT_OK(zinc_ckpt_find_tag(dir, NULL, tag, sizeof tag, NULL, 0, &nb));
            /* latest's tag: c2, saved last (its data damage shows only when a load reads it,
             * which then falls back to the next tag); it used to be the highest step */
            ZT_CHECK(!strcmp(tag, "c2") && nb > 0, "tag NULL: %s (want latest's, c2), blob %zu "
                     "bytes", tag, nb);
            char missing[760];
            snprintf(missing, sizeof missing, "%s/nowhere", root);
            ZT_CHECK(zinc_ckpt_find_tag(missing, NULL, tag, sizeof tag, NULL, 0, &nb) !=
                         ZINC_OK && strstr(zinc_last_error(NULL), "nowhere") && !tag[0],
                     "a missing save directory: %s", zinc_last_error(NULL));
            for (int p = 0; p < np; p++) free(outs[p]);
            /* nothing asked: the tag is not opened (a missing one is no error then) */
            ZT_CHECK(zinc_ckpt_read_tensors(e, dir, "no_tag", NULL, 0) == ZINC_OK,
                     "n 0 opened the tag: %s", zinc_last_error(e));
        }
        /* missing_ok (weights only): a model with one of t3's tensors and one t3 lacks (a
         * parameter frozen when t3 was saved) loads, and that one keeps its value */
        zinc_engine_t *e2 = NULL;
        zplan_param first;                    /* the world holds one engine at a time */
        const zplan_param *P0 = e ? (first = e->plan.params[0], &first) : NULL;
        zinc_engine_destroy(e);
        e = NULL;
        int g = -1, p0 = -1, px = -1;
        static const int64_t three[1] = {3};
        ZT_OK(zinc_engine_create(&o, &e2));
        ZT_OK(zinc_group_add(e2, "g", &g));
        if (P0) ZT_OK(zinc_param_add(e2, g, P0->name, P0->ndim, P0->shape, ZINC_DTYPE_FP32, &p0));
        ZT_OK(zinc_param_add(e2, g, "extra.w", 1, three, ZINC_DTYPE_FP32, &px));
        ZT_OK(zinc_finalize(e2));
        const float mine[3] = {1.0f, 2.0f, 3.0f};
        ZT_OK(zinc_param_set(e2, px, mine));
        for (int mode = 0; mode < 3; mode++) {      /* full, weights only, weights + missing_ok */
            zinc_ckpt_load_options_t lo;
            memset(&lo, 0, sizeof lo);
            lo.weights_only = mode > 0;
            lo.missing_ok = mode != 1;                /* ignored by the full load */
            zinc_status st = zinc_ckpt_load(e2, dir, "t3", &lo);
            if (mode < 2) {
                ZT_CHECK(st == ZINC_ERR_MISMATCH && strstr(zinc_last_error(e2), "extra.w"),
                         "mode %d: %s", mode, zinc_last_error(e2));
                continue;
            }
            ZT_CHECK(st == ZINC_OK && lo.missing == 1 && lo.extra == np - 1,
                     "missing_ok: %s, missing %d, extra %d (want %d)", zinc_last_error(e2),
                     lo.missing, lo.extra, np - 1);
            float back[3] = {0}, *w0 = P0 ? malloc(P0->numel * 4) : NULL;
            ZT_OK(zinc_param_get(e2, px, back));
            ZT_CHECK(!memcmp(back, mine, sizeof mine), "the missing parameter kept %g %g %g",
                     back[0], back[1], back[2]);
            if (w0) {
                ZT_OK(zinc_param_get(e2, p0, w0));
                ZT_CHECK(!memcmp(w0, B.at_save.w[0], P0->numel * 4), "%s not loaded", P0->name);
            }
            free(w0);
        }
        zinc_engine_destroy(e2);
        /* a tensor of another shape: the error shows both shapes (it gave only element counts) */
        if (P0) {
            zinc_engine_t *e3 = NULL;
            int g3 = -1, p3 = -1;
            const int64_t other[2] = {2, P0->numel};
            ZT_OK(zinc_engine_create(&o, &e3));
            ZT_OK(zinc_group_add(e3, "g", &g3));
            ZT_OK(zinc_param_add(e3, g3, P0->name, 2, other, ZINC_DTYPE_FP32, &p3));
            ZT_OK(zinc_finalize(e3));
            zinc_ckpt_load_options_t lo;
            memset(&lo, 0, sizeof lo);
            char want[96];
            snprintf(want, sizeof want, "but [2, %lld] in the model", (long long)P0->numel);
            zinc_status st = zinc_ckpt_load(e3, dir, "t3", &lo);
            ZT_CHECK(st == ZINC_ERR_MISMATCH && strstr(zinc_last_error(e3), want) &&
                         strstr(zinc_last_error(e3), " is ["),
                     "another shape: %s (want '%s')", zinc_last_error(e3), want);
            zinc_engine_destroy(e3);
        }
        zinc_engine_destroy(e);
        zinc_world_destroy(w1);
        free(cfg);
    }

    /* --- safetensors --- */
    char tagdir[700], f1[800], f2[700], fb[700], err[ZCK_ERR];
    snprintf(tagdir, sizeof tagdir, "%s/save/t3", root);
    snprintf(f1, sizeof f1, "%s/a.safetensors", root);
    snprintf(f2, sizeof f2, "%s/b.safetensors", root);
    snprintf(fb, sizeof fb, "%s/bf.safetensors", root);
    ZT_OK(zck_export_safetensors(tagdir, f1, ZINC_DTYPE_FP32, 2, err));
    ZT_OK(zck_export_safetensors(tagdir, f2, ZINC_DTYPE_FP32, 1, err));
    ZT_OK(zck_export_safetensors(tagdir, fb, ZINC_DTYPE_BF16, 2, err));
    char *x = NULL, *y = NULL;
    size_t lx = 0, ly = 0;
    ZT_OK(zck_read_file(f1, &x, &lx, err));
    ZT_OK(zck_read_file(f2, &y, &ly, err));
    ZT_CHECK(x && y && lx == ly && !memcmp(x, y, lx), "two exports differ");
    if (x && lx > 8) {
        uint64_t hl = 0;
        for (int b = 0; b < 8; b++) hl |= (uint64_t)(uint8_t)x[b] << (8 * b);
        ZT_CHECK(hl % 8 == 0 && x[8] == '{' && 8 + hl <= lx, "header length %llu", (unsigned long long)hl);
    }
    free(x);
    free(y);
    zst_file *sf = NULL, *sb = NULL;
    ZT_OK(zst_open(f1, &sf, err));
    ZT_OK(zst_open(fb, &sb, err));
    if (sf && sb) {
        ZT_CHECK(sf->n == B.at_save.np, "%d tensors in the export", sf->n);
        char name[64];
        long bad = 0, badb = 0;
        for (int p = 0; p < B.at_save.np; p++) {
            /* toy names: block<g>.w<p>; find by scanning */
            int k = -1;
            for (int i = 0; i < sf->n; i++) {
                snprintf(name, sizeof name, ".w%d", p);
                size_t ln = strlen(sf->e[i].name), lk = strlen(name);
                if (ln > lk && !strcmp(sf->e[i].name + ln - lk, name)) k = i;
            }
            ZT_CHECK(k >= 0, "param %d not in the export", p);
            if (k < 0) continue;
            float *v = malloc((size_t)B.at_save.numel[p] * 4);
            ZT_OK(zst_read_f32(sf, k, 0, (uint64_t)B.at_save.numel[p], v, err));
            bad += memcmp(v, B.at_save.w[p], (size_t)B.at_save.numel[p] * 4) != 0;
            int kb = zst_find(sb, sf->e[k].name);
            ZT_CHECK(kb >= 0 && !strcmp(sb->e[kb].dtype_name, "BF16"), "bf16 entry");
            if (kb >= 0) {
                uint16_t *raw = malloc((size_t)B.at_save.numel[p] * 2);
                ssize_t got = pread(sb->fd, raw, (size_t)B.at_save.numel[p] * 2, (off_t)(sb->data_off + sb->e[kb].begin));
                ZT_CHECK(got == (ssize_t)B.at_save.numel[p] * 2, "short read");
                for (int64_t i = 0; i < B.at_save.numel[p]; i++) badb += raw[i] != bf16_rne(B.at_save.w[p][i]);
                free(raw);
            }
            free(v);
        }
        ZT_CHECK(bad == 0, "%ld tensors of the fp32 export differ from the master weights", bad);
        ZT_CHECK(badb == 0, "%ld bf16 values differ from round-to-nearest-even", badb);
    }
    zst_close(sf);
    zst_close(sb);
    session S = {.world = 3, .stage = 3, .prec = "fp16", .safetensors = f1};
    run(&S);
    ZT_CHECK(diff(&B.at_save, &S.after_load, 0, 0) == 0, "zinc_load_safetensors: master differs");

    ts_free(&A.end); ts_free(&A.after_load);
    ts_free(&B.end); ts_free(&B.at_save); ts_free(&B.after_load);
    ts_free(&C.end); ts_free(&C.after_load);
    ts_free(&A32.end); ts_free(&A32.after_load);
    ts_free(&B32.end); ts_free(&B32.at_save); ts_free(&B32.after_load);
    ts_free(&S.after_load); ts_free(&S.end);
    unlink(f1);
    unlink(f2);
    unlink(fb);
    char sv[700];
    snprintf(sv, sizeof sv, "%s/save", root);
    const char *tags[] = {"t3", "f3", "c2"};
    for (int i = 0; i < 3; i++) {
        char t[800];
        snprintf(t, sizeof t, "%s/%s", sv, tags[i]);
        zck_rmdir_flat(t);
    }
    snprintf(f1, sizeof f1, "%s/latest", sv);
    unlink(f1);
    rmdir(sv);
    rmdir(root);
    return zt_finish("test_ckpt_engine");
}
