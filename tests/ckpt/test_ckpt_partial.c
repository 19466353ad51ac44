/*
 * test_ckpt_partial.c — a zinc_ckpt_load that fails leaves no silent mix of two states (found by
 * a C API review: the checkpoint's weights and Adam m replaced the engine's while its step count
 * stayed, and the next steps trained on the mix).
 *   1. A client blob larger than the caller's buffer fails the load before anything is applied:
 *      the engine keeps its own weights and trains on.
 *   2. A chunk of the Adam v stream damaged, no other tag to fall back to: the load fails with
 *      ZINC_ERR_CORRUPT after the master and m were applied, and zinc_step and zinc_ckpt_save
 *      refuse (ZINC_ERR_USAGE naming the tag) instead of training on or saving the mix; a later
 *      load that succeeds makes the engine train again, bitwise as an engine that loaded only
 *      that checkpoint.
 *   3. Two ranks, rank 1's file damaged in its master stream: rank 1 fails before writing, rank
 *      0 applies its whole part; both refuse the next step (the mark is agreed).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "fixture.h"
#include "testutil.h"
#include "toy.h"

static char root[512];

static zinc_engine_t *engine(int *np)
{
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0};
    return toy_engine_checked(&r, np, "partial-load engine");
}

/* Parameter 0's fp32 values (caller frees). */
static float *param0(zinc_engine_t *e)
{
    float *v = malloc((size_t)zinc_param_numel(e, 0) * sizeof *v);
    ZT_OK(zinc_param_get(e, 0, v));
    return v;
}

static void test_blob_too_large(const char *dir)
{
    int np = 0;
    zinc_engine_t *e = engine(&np);
    if (!e) return;
    float *before = param0(e);
    char small[2];
    zinc_ckpt_load_options_t opt = {.client_blob = small, .client_blob_cap = sizeof small};
    zinc_status s = zinc_ckpt_load(e, dir, "good", &opt);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(zinc_last_error(e), "client_blob_cap"),
             "a blob past the buffer: %s (%s)", zinc_status_string(s), zinc_last_error(e));
    float *after = param0(e);
    size_t n = (size_t)zinc_param_numel(e, 0);
    ZT_CHECK(memcmp(before, after, n * sizeof *after) == 0,
             "the refused load changed parameter 0 (%g -> %g)", before[0], after[0]);
    ZT_CHECK(toy_steps(e, 0, 1, 0, 2, np) == ZINC_OK, "training after the refused load: %s",
             zinc_last_error(e));
    free(before);
    free(after);
    zinc_engine_destroy(e);
}

/* Flips a byte in the middle of the first chunk of stream `stream` of tagdir's file of `rank`. */
static void damage_stream(const char *tagdir, int rank, int stream)
{
    char err[ZCK_ERR] = "", p[1200];
    zck_reader *r = NULL;
    ZT_OK(zck_open(tagdir, &r, err));
    if (!r) return;
    const zck_stream_info *si = &zck_reader_manifest(r)->ranks[rank].streams[stream];
    ZT_CHECK(si->present && si->nchunks > 0, "stream %d stored", stream);
    uint64_t off = si->nchunks > 0 ? si->chunks[0].file_off + si->chunks[0].comp_len / 2 : 0;
    zck_close(r);
    snprintf(p, sizeof p, "%s/rank-%05d.zck", tagdir, rank);
    int fd = open(p, O_RDWR);
    unsigned char b = 0;
    ZT_CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "reading %s", p);
    b ^= 0x5a;
    ZT_CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "writing %s", p);
    if (fd >= 0) close(fd);
}

static void test_damaged_v(const char *good, const char *bad)
{
    int np = 0;
    zinc_engine_t *e = engine(&np);
    if (!e) return;
    zinc_status s = zinc_ckpt_load(e, bad, "t", NULL);
    ZT_CHECK(s == ZINC_ERR_CORRUPT, "load of the damaged v stream: %s (%s)", zinc_status_string(s),
             zinc_last_error(e));
    /* (zinc_step alone: a micro-step's gradients would stay in the window for the next step) */
    s = zinc_step(e, NULL);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "partly") &&
                 strstr(zinc_last_error(e), bad),
             "a step after the partial load: %s (%s)", zinc_status_string(s), zinc_last_error(e));
    char saved[700];
    snprintf(saved, sizeof saved, "%s/resaved", root);
    s = zinc_ckpt_save(e, saved, "mix", NULL);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), "mix of two states"),
             "a save after the partial load: %s (%s)", zinc_status_string(s), zinc_last_error(e));
    /* a load that succeeds: the engine trains on as one that loaded only it */
    ZT_OK(zinc_ckpt_load(e, good, "good", NULL));
    s = toy_steps(e, 0, 1, 10, 2, np);
    ZT_CHECK(s == ZINC_OK, "steps after a good load: %s", zinc_last_error(e));
    float *mine = param0(e);
    int np2 = 0;
    zinc_engine_t *ref = engine(&np2);
    if (ref) {
        ZT_OK(zinc_ckpt_load(ref, good, "good", NULL));
        ZT_OK(toy_steps(ref, 0, 1, 10, 2, np2));
        float *want = param0(ref);
        ZT_CHECK(memcmp(mine, want, (size_t)zinc_param_numel(e, 0) * sizeof *want) == 0,
                 "after the partial load and a good one, parameter 0 differs from a clean "
                 "engine's (%g vs %g)", mine[0], want[0]);
        free(want);
        zinc_engine_destroy(ref);
    }
    free(mine);
    zinc_engine_destroy(e);
}

/* ---- 3. two ranks: the mark is agreed ---------------------------------------------------------
 * Rank 1's master stream damaged: rank 1 fails before it writes anything, rank 0 loads its whole
 * part. Both must refuse the next step (a rank that trained on would wait in the step's
 * collectives for one that refused). */
typedef struct {
    zinc_world_t *world;
    const char *dir;
    int save;                 /* 1: train and save; 0: load, then step */
    zinc_status load[2], step[2];
    char msg[2][512];
} two_ranks;

static void two_rank_main(int rank, void *arg)
{
    two_ranks *t = arg;
    toy_run r = {.world = 2, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, t->world, rank, NULL, &e, &np);
    if (s == ZINC_OK && t->save) {
        s = toy_steps(e, rank, 2, 0, 2, np);
        zinc_ckpt_save_options_t so = {.async = 0};
        if (s == ZINC_OK) s = zinc_ckpt_save(e, t->dir, "t", &so);
        t->load[rank] = s;
    } else if (s == ZINC_OK) {
        t->load[rank] = zinc_ckpt_load(e, t->dir, "t", NULL);
        t->step[rank] = zinc_step(e, NULL);
        snprintf(t->msg[rank], sizeof t->msg[rank], "%s", zinc_last_error(e));
    } else {
        t->load[rank] = s;
    }
    zinc_engine_destroy(e);
}

static void test_two_ranks(void)
{
    char dir[700], tagdir[800];
    snprintf(dir, sizeof dir, "%s/two", root);
    for (int pass = 0; pass < 2; pass++) {
        two_ranks t = {.dir = dir, .save = pass == 0};
        zt_run_world(2, &t.world, two_rank_main, &t);
        if (pass == 0) {
            ZT_CHECK(t.load[0] == ZINC_OK && t.load[1] == ZINC_OK, "two-rank save: %s %s",
                     zinc_status_string(t.load[0]), zinc_status_string(t.load[1]));
            snprintf(tagdir, sizeof tagdir, "%s/t", dir);
            damage_stream(tagdir, 1, ZCK_MASTER);
            continue;
        }
        for (int k = 0; k < 2; k++)
            ZT_CHECK(t.load[k] != ZINC_OK && t.step[k] == ZINC_ERR_USAGE &&
                         strstr(t.msg[k], "partly"),
                     "rank %d after a load only rank 0 applied: load %s, step %s (%s)", k,
                     zinc_status_string(t.load[k]), zinc_status_string(t.step[k]), t.msg[k]);
    }
    fx_rmtree(dir);
}

int main(void)
{
    fx_tmproot(root, sizeof root, "partial");
    char good[700], bad[700], tagdir[800];
    snprintf(good, sizeof good, "%s/good", root);
    snprintf(bad, sizeof bad, "%s/bad", root);
    /* Two checkpoints of a trained engine, with a 4-byte client blob; "bad" damaged in its v. */
    int np = 0;
    zinc_engine_t *e = engine(&np);
    if (!e) return zt_finish("test_ckpt_partial");
    ZT_OK(toy_steps(e, 0, 1, 0, 3, np));
    int32_t blob = 1234;
    zinc_ckpt_save_options_t so = {.client_blob = &blob, .client_blob_bytes = sizeof blob,
                                   .async = 0};
    ZT_OK(zinc_ckpt_save(e, good, "good", &so));
    ZT_OK(zinc_ckpt_save(e, bad, "t", &so));
    zinc_engine_destroy(e);
    snprintf(tagdir, sizeof tagdir, "%s/t", bad);
    damage_stream(tagdir, 0, ZCK_ADAM_V);

    test_blob_too_large(good);
    test_damaged_v(good, bad);
    test_two_ranks();
    fx_rmtree(good);
    fx_rmtree(bad);
    rmdir(root);
    return zt_finish("test_ckpt_partial");
}
