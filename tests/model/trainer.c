/* trainer.c — see trainer.h. */
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data.h"
#include "models/gpt.h"
#include "testutil.h"
#include "zinc.h"

typedef struct {
    zt_train_job *job;
    zinc_world_t *world;
    zm_data *data;
    int B;
} shared;

typedef struct {
    uint64_t next_seq;
    int64_t steps;
} blob_t;

#define TRY(call)                                                                             \
    do {                                                                                      \
        zinc_status s_ = (call);                                                              \
        if (s_ != ZINC_OK) {                                                                  \
            fprintf(stderr, "rank %d: %s -> %s: %s\n", rank, #call, zinc_status_string(s_),   \
                    zinc_last_error(e));                                                      \
            __atomic_fetch_add(&j->failures, 1, __ATOMIC_RELAXED);                            \
            zinc_world_abort(sh->world, rank, #call);                                         \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)

static void rank_fn(int rank, void *arg)
{
    shared *sh = arg;
    zt_train_job *j = sh->job;
    zinc_engine_t *e = NULL;
    zm_model *m = NULL;
    zm_spec sp;
    char err[256];
    uint16_t *tok = NULL, *tgt = NULL;
    float *tmp = NULL;
    if (zm_spec_parse(j->spec, &sp, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        __atomic_fetch_add(&j->failures, 1, __ATOMIC_RELAXED);
        return;
    }
    zinc_engine_options_t o = {.config_json = j->config_json, .world = sh->world, .rank = rank,
                               .threads = 1};
    TRY(zinc_engine_create(&o, &e));
    TRY(zm_model_create(e, &sp, sh->B, 1, j->checkpoint, &m));
    TRY(zinc_finalize(e));
    TRY(zm_model_init(m, j->init_seed ? j->init_seed : j->seed));
    blob_t blob = {0, 0};
    if (j->resume_dir) {
        blob_t in = {0, 0};
        zinc_ckpt_load_options_t lo = {0};
        lo.client_blob = &in;
        lo.client_blob_cap = sizeof in;
        TRY(j->ckpt_load(e, j->resume_dir, j->resume_tag, &lo));
        if (lo.client_blob_bytes != sizeof in) {
            fprintf(stderr, "rank %d: client blob of %zu bytes, expected %zu\n", rank,
                    lo.client_blob_bytes, sizeof in);
            __atomic_fetch_add(&j->failures, 1, __ATOMIC_RELAXED);
            zinc_world_abort(sh->world, rank, "blob");
            goto out;
        }
        blob = in;
    }
    if (rank == 0) j->start_step = (int)blob.steps;
    int T = sp.T, B = sh->B, W = j->ranks;
    tok = malloc((size_t)B * T * sizeof *tok);
    tgt = malloc((size_t)B * T * sizeof *tgt);
    while (blob.steps < j->steps) {
        char derr[512];
        TRY(zm_data_read(sh->data, blob.next_seq + (uint64_t)rank * B, B, T, tok, tgt, derr,
                         sizeof derr));
        double l;
        TRY(zm_model_micro_step(m, tok, tgt, &l));
        blob.next_seq += (uint64_t)W * B;
        zinc_step_info_t info;
        TRY(zinc_step(e, &info));
        blob.steps++;
        j->rank_loss[rank][blob.steps] = l;
        if (j->save_dir && blob.steps == j->save_at) {
            char tag[32];
            snprintf(tag, sizeof tag, "s%d", j->save_at);
            zinc_ckpt_save_options_t so = {&blob, sizeof blob, 0, 0, 0};
            TRY(j->ckpt_save(e, j->save_dir, tag, &so));
            TRY(j->ckpt_wait(e));
        }
    }
    int np;
    const int *pid = zm_model_params(m, &np);
    size_t total = 0, off = 0, mx = 0;
    for (int i = 0; i < np; i++) {
        size_t n = (size_t)zinc_param_numel(e, pid[i]);
        total += n;
        if (n > mx) mx = n;
    }
    tmp = malloc(mx * sizeof *tmp);
    float *w = rank == 0 ? malloc(total * sizeof *w) : NULL;
    for (int i = 0; i < np; i++) {
        TRY(zinc_param_get(e, pid[i], tmp));
        size_t n = (size_t)zinc_param_numel(e, pid[i]);
        if (w) memcpy(w + off, tmp, n * sizeof *w);
        off += n;
    }
    if (rank == 0) {
        j->weights = w;
        j->nweights = total;
    }
out:
    free(tmp);
    free(tok);
    free(tgt);
    zm_model_destroy(m);
    zinc_engine_destroy(e);
}

void zt_train(zt_train_job *j)
{
    shared sh = {j, NULL, NULL, 4};
    for (int s = 0; s <= ZT_MAX_STEPS; s++) {
        j->loss[s] = NAN;
        for (int r = 0; r < ZT_MAX_RANKS; r++) j->rank_loss[r][s] = NAN;
    }
    j->weights = NULL;
    j->nweights = 0;
    if (j->steps > ZT_MAX_STEPS || j->ranks > ZT_MAX_RANKS ||
        ((j->save_dir || j->resume_dir) && (!j->ckpt_save || !j->ckpt_wait || !j->ckpt_load)) ||
        zinc_world_create_local(j->ranks, &sh.world) != ZINC_OK ||
        zm_data_open_synthetic(j->seed, &sh.data) != ZINC_OK) {
        fprintf(stderr, "zt_train: bad job or no world: %s\n", zinc_last_error(NULL));
        j->failures++;
        zinc_world_destroy(sh.world);
        return;
    }
    j->floor = zm_data_entropy(sh.data);
    zt_run_ranks(j->ranks, rank_fn, &sh);
    for (int s = 1; s <= j->steps; s++) {
        double sum = 0.0;
        for (int r = 0; r < j->ranks; r++) sum += j->rank_loss[r][s];
        j->loss[s] = sum / j->ranks;
    }
    zm_data_close(sh.data);
    zinc_world_destroy(sh.world);
}

void zt_train_free(zt_train_job *j)
{
    free(j->weights);
    j->weights = NULL;
}

const char *const zt_zero3_bf16_config =
    "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1,"
    " \"gradient_clipping\": 1.0,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.95],"
    "   \"eps\": 1e-8, \"weight_decay\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.0,"
    "   \"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}},"
    " \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}";
