/*
 * test_model_train.c — the built-in model learns under ZeRO-3: 4 local ranks, bf16, synthetic
 * Markov-chain data whose entropy rate H is the best possible mean loss.
 *
 * Thresholds, relative to the floor H and the start L0 (~ ln 256 = 5.55 for the near-uniform
 * initial predictions):
 *   - start: |L0 - ln 256| < 0.1 (small initial weights predict nearly uniformly);
 *   - end: the mean loss of the last 10 steps Lend has closed at least 90 % of the gap,
 *     Lend - H <= 0.1 (L0 - H) (about 0.45 nats here; a run that only learned the unigram
 *     distribution of the 32 symbols, ~3.4 nats, fails);
 *   - and Lend >= H - 0.1: no model can beat the floor by more than the sampling noise of 10
 *     steps x 512 tokens (sd ~ 0.02), so a loss below it means a broken loss or leaked targets.
 * Same job twice: bitwise the same losses and weights (same seed, config, world size).
 * Stages 0, 1 and 2 give the same losses and weights as stage 3, bit for bit (zinc's contract
 * for gradient_accumulation_steps = 1): the model's use of gather/release and grads_ready is
 * right at every stage. With the model's activation checkpointing (each block's activations
 * recomputed from its input in backward) at stages 3 and 0: the same run again, bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "trainer.h"

static const char *cfg_fmt =
    "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1,"
    " \"gradient_clipping\": 1.0,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
    " \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": %d}}";


int main(void)
{
    static zt_train_job a, b;
    a.config_json = zt_zero3_bf16_config;
    a.spec = "L1-D32-H2-T32";
    a.ranks = 4;
    a.steps = 150;
    a.seed = 3;
    zt_train(&a);
    ZT_CHECK(a.failures == 0, "training failed");
    if (a.failures) return zt_finish("test_model_train");
    double L0 = a.loss[1], H = a.floor, Lend = 0.0;
    for (int s = a.steps - 9; s <= a.steps; s++) Lend += a.loss[s] / 10;
    printf("floor H %.4f, start %.4f, end (last 10 steps) %.4f: %.1f %% of the gap closed\n", H,
           L0, Lend, 100.0 * (L0 - Lend) / (L0 - H));
    for (int s = 10; s <= a.steps; s += 20) printf("  step %3d loss %.4f\n", s, a.loss[s]);
    ZT_CHECK(fabs(L0 - log(256.0)) < 0.1, "start loss %.4f is not near ln 256", L0);
    ZT_CHECK(Lend - H <= 0.1 * (L0 - H), "end loss %.4f: gap to the floor %.4f > 10 %% of %.4f",
             Lend, Lend - H, L0 - H);
    ZT_CHECK(Lend >= H - 0.1, "end loss %.4f is below the floor %.4f", Lend, H);

    /* the same job again: the same run, bit for bit */
    b = a;
    b.weights = NULL;
    b.steps = 20;
    a.steps = 20;
    zt_train_free(&a);
    zt_train(&a);
    zt_train(&b);
    ZT_CHECK(a.failures == 0 && b.failures == 0, "repeat runs failed");
    ZT_CHECK(!memcmp(a.loss + 1, b.loss + 1, 20 * sizeof(double)), "repeat runs: losses differ");
    ZT_CHECK(a.nweights == b.nweights && a.weights && b.weights &&
                 !memcmp(a.weights, b.weights, a.nweights * sizeof(float)),
             "repeat runs: weights differ");
    zt_train_free(&a);
    zt_train_free(&b);

    /* every stage, the same run */
    static zt_train_job st[4];
    static char cfg[4][512];
    for (int k = 0; k < 4; k++) {
        snprintf(cfg[k], sizeof cfg[k], cfg_fmt, k);
        st[k].config_json = cfg[k];
        st[k].spec = "L2-D16-H2-T16";
        st[k].ranks = 4;
        st[k].steps = 8;
        st[k].seed = 11;
        zt_train(&st[k]);
        ZT_CHECK(st[k].failures == 0, "stage %d run failed", k);
    }
    for (int k = 0; k < 3; k++) {
        ZT_CHECK(!memcmp(st[k].loss + 1, st[3].loss + 1, 8 * sizeof(double)),
                 "stage %d losses differ from stage 3", k);
        ZT_CHECK(st[k].weights && st[3].weights && st[k].nweights == st[3].nweights &&
                     !memcmp(st[k].weights, st[3].weights, st[3].nweights * sizeof(float)),
                 "stage %d weights differ from stage 3", k);
    }
    /* activation checkpointing: the same run (a 3-layer model, so two blocks recompute) */
    static zt_train_job ck[2][2];
    const int ck_stage[2] = {3, 0};
    for (int k = 0; k < 2; k++) {
        for (int c = 0; c < 2; c++) {
            zt_train_job *j = &ck[k][c];
            j->config_json = cfg[ck_stage[k]];
            j->spec = "L3-D16-H2-T16";
            j->ranks = 2;
            j->steps = 6;
            j->seed = 13;
            j->checkpoint = c;
            zt_train(j);
            ZT_CHECK(j->failures == 0, "stage %d run (checkpointing %d) failed", ck_stage[k], c);
        }
        zt_train_job *plain = &ck[k][0], *ckpt = &ck[k][1];
        ZT_CHECK(!memcmp(ckpt->loss + 1, plain->loss + 1, 6 * sizeof(double)),
                 "stage %d: losses with activation checkpointing differ", ck_stage[k]);
        ZT_CHECK(ckpt->weights && plain->weights && ckpt->nweights == plain->nweights &&
                     !memcmp(ckpt->weights, plain->weights, plain->nweights * sizeof(float)),
                 "stage %d: weights with activation checkpointing differ", ck_stage[k]);
        printf("stage %d, activation checkpointing: 6 steps' losses and the weights bit for bit "
               "(last loss %.6f)\n", ck_stage[k], ckpt->loss[6]);
        zt_train_free(plain);
        zt_train_free(ckpt);
    }
    for (int k = 0; k < 4; k++) zt_train_free(&st[k]);
    return zt_finish("test_model_train");
}
