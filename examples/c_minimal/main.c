/* c_minimal — the smallest complete zinc program, built against an installed zinc.
 *
 * A linear model y = w·x + b fitted to random data with AdamW under ZeRO stage 2, on 2 ranks
 * that are threads of this process (the `local` world). Run 1 trains steps 0..40 and saves a
 * checkpoint after step 20; run 2 creates fresh engines, resumes from that checkpoint and trains
 * steps 20..40 again. The program fails unless both runs end with the same weights, bit for bit.
 *
 *   c_minimal CONFIG CKPT_DIR        (CONFIG: zero2_fp32.json beside this file)
 *
 * Every zinc call is checked; a failing rank prints zinc_last_error and aborts the world, so the
 * other rank returns from its collective instead of waiting. */
#include <zinc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum { RANKS = 2, DIM = 8, BATCH = 16, STEPS = 40, SAVE_AFTER = 20 };

typedef struct job {
    zinc_world_t *world;
    int rank, resume;          /* resume: load CKPT_DIR's newest checkpoint before training   */
    const char *config, *ckpt;
    float weights[DIM + 1];    /* out: w[DIM] then b, after the last step                     */
    int ok;
} job;

/* The data of one rank's micro-batch depends only on (step, rank), so a resumed run sees what
 * the uninterrupted one saw. */
static float urand(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(*s >> 40) / (float)(1 << 23) - 1.0f;   /* in [-1, 1) */
}

#define CHECK(call)                                                                          \
    do {                                                                                     \
        zinc_status st_ = (call);                                                            \
        if (st_ != ZINC_OK) {                                                                \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", j->rank, #call,                  \
                    zinc_status_string(st_), zinc_last_error(e));                            \
            zinc_world_abort(j->world, j->rank, #call " failed");                            \
            goto done;                                                                       \
        }                                                                                    \
    } while (0)

static void *rank_main(void *arg)
{
    job *j = arg;
    zinc_engine_t *e = NULL;
    zinc_engine_options_t opt = {.config_path = j->config, .world = j->world, .rank = j->rank,
                                 .threads = 1};
    int g, pw, pb, start = 0;
    int64_t shape_w[1] = {DIM}, shape_b[1] = {1};
    float init[DIM] = {0};

    CHECK(zinc_engine_create(&opt, &e));
    CHECK(zinc_group_add(e, "linear", &g));
    CHECK(zinc_param_add(e, g, "linear.weight", 1, shape_w, ZINC_DTYPE_FP32, &pw));
    CHECK(zinc_param_add(e, g, "linear.bias", 1, shape_b, ZINC_DTYPE_FP32, &pb));
    CHECK(zinc_finalize(e));
    CHECK(zinc_param_set(e, pw, init));          /* the same values on every rank */
    CHECK(zinc_param_set(e, pb, init));
    if (j->resume) {                             /* the step to continue from is our client blob */
        zinc_ckpt_load_options_t lo = {.client_blob = &start, .client_blob_cap = sizeof start};
        CHECK(zinc_ckpt_load(e, j->ckpt, NULL, &lo));
        if (j->rank == 0) printf("resumed from %s/%s at step %d\n", j->ckpt, lo.loaded_tag, start);
    }
    for (int step = start; step < STEPS; step++) {
        float *w, *b, *gw, *gb;
        double loss = 0;
        unsigned long long seed = (unsigned long long)(step * RANKS + j->rank + 1);
        zinc_step_info_t info;
        CHECK(zinc_gather(e, g));                /* stage 3 gathers here; a no-op at stage 2 */
        CHECK(zinc_param_data(e, pw, (void **)&w));
        CHECK(zinc_param_data(e, pb, (void **)&b));
        CHECK(zinc_param_grad(e, pw, (void **)&gw));
        CHECK(zinc_param_grad(e, pb, (void **)&gb));
        float scale = zinc_loss_multiplier(e) / BATCH;
        for (int i = 0; i < BATCH; i++) {        /* target: y = sum_k (k+1)/DIM * x_k + 0.5 */
            float x[DIM], pred = b[0], y = 0.5f;
            for (int k = 0; k < DIM; k++) {
                x[k] = urand(&seed);
                pred += w[k] * x[k];
                y += (float)(k + 1) / DIM * x[k];
            }
            float err = pred - y;                /* loss = mean(err^2) / 2 */
            loss += 0.5 * err * err / BATCH;
            for (int k = 0; k < DIM; k++) gw[k] += scale * err * x[k];   /* add, never assign */
            gb[0] += scale * err;
        }
        CHECK(zinc_release(e, g));
        CHECK(zinc_grads_ready(e, g));           /* stage 2: reduce-scatter the group now */
        CHECK(zinc_step(e, &info));
        CHECK(zinc_mean_over_ranks(e, &loss, 1));
        if (j->rank == 0 && (step + 1) % 10 == 0)
            printf("step %2d  loss %.6f  grad_norm %.4f\n", step + 1, loss, info.grad_norm);
        if (!j->resume && step + 1 == SAVE_AFTER) {
            int next = step + 1;
            zinc_ckpt_save_options_t so = {.client_blob = &next, .client_blob_bytes = sizeof next,
                                           .async = 0};
            CHECK(zinc_ckpt_save(e, j->ckpt, "step20", &so));
        }
    }
    CHECK(zinc_param_get(e, pw, j->weights));    /* collective: every rank gets the full value */
    CHECK(zinc_param_get(e, pb, j->weights + DIM));
    j->ok = 1;
done:
    zinc_engine_destroy(e);
    return NULL;
}

/* One run: a local world of RANKS threads, one engine each. @return 1 when every rank succeeded. */
static int run(const char *config, const char *ckpt, int resume, float weights[DIM + 1])
{
    zinc_world_t *world;
    job jobs[RANKS];
    pthread_t th[RANKS];
    int ok = 1;
    if (zinc_world_create_local(RANKS, &world) != ZINC_OK) {
        fprintf(stderr, "zinc_world_create_local: %s\n", zinc_last_error(NULL));
        return 0;
    }
    for (int r = 0; r < RANKS; r++) {
        jobs[r] = (job){.world = world, .rank = r, .resume = resume, .config = config, .ckpt = ckpt};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < RANKS; r++) {
        pthread_join(th[r], NULL);
        ok &= jobs[r].ok;
    }
    memcpy(weights, jobs[0].weights, sizeof jobs[0].weights);
    zinc_world_destroy(world);
    return ok;
}

int main(int argc, char **argv)
{
    float first[DIM + 1], resumed[DIM + 1];
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG CKPT_DIR\n", argv[0]);
        return 2;
    }
    printf("zinc %s (built against %s)\n", zinc_version_string(), ZINC_VERSION_STRING);
    if (!run(argv[1], argv[2], 0, first) || !run(argv[1], argv[2], 1, resumed)) return 1;
    printf("w =");
    for (int k = 0; k < DIM; k++) printf(" %.3f", first[k]);
    printf("  b = %.3f\n", first[DIM]);
    if (memcmp(first, resumed, sizeof first) != 0) {
        fprintf(stderr, "the resumed run's weights differ from the uninterrupted run's\n");
        return 1;
    }
    printf("resumed run matches the uninterrupted one bit for bit\n");
    return 0;
}
