/*
 * test_memory_hold.c — zinc_memory_hold: a tensor of another library viewing the engine's
 * memory keeps it past zinc_engine_destroy, as the Python front-end's views (an entry of
 * model.state_dict() kept after the engine is closed) need.
 *
 * One rank, stage 1, bf16 and fp32; a small parameter (its buffers below malloc's mmap
 * threshold: a freed one is handed out again) and a large one (above it: a freed one is
 * unmapped). Values set, then each parameter's zinc_param_data bytes and a gradient's copied:
 *
 *  - two holds, the engine destroyed, the heap churned with blocks of the buffers' sizes filled
 *    with 0xA5: the views still hold the copied bytes (without the hold: other values, or a
 *    fault on the unmapped block); after the first release, the same (one hold left); the last
 *    release frees them (under ASan/LSan: no leak, no double free).
 *  - zinc_dlpack_deleter on a DLManagedTensor-shaped block whose manager_ctx is a hold: the
 *    block freed and the hold released (LSan sees both).
 *  - 64 holds released from 4 threads at once after the destroy: the bytes intact until the
 *    last, no double free.
 *  - NULLs: zinc_memory_hold(NULL) is NULL; zinc_memory_release(NULL) and
 *    zinc_dlpack_deleter(NULL) do nothing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"
#include "testutil.h"

#define NSMALL 300
#define NLARGE 200000
#define NHOLDS 64
#define NTHREADS 4

static const char *config(int bf16)
{
    return bf16 ? "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                  " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                  " \"zero_optimization\": {\"stage\": 1}}"
                : "{\"train_micro_batch_size_per_gpu\": 1,"
                  " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                  " \"zero_optimization\": {\"stage\": 1}}";
}

typedef struct {
    zinc_engine_t *e;
    int pid[2];
    void *data[2];         /* zinc_param_data of each parameter */
    size_t bytes[2];
    unsigned char *copy[2];
    void *grad;            /* zinc_param_grad of the large one */
    unsigned char *grad_copy;
} model;

/* A finalized engine with values set and its views' bytes copied; 0 after a failed check. */
static int make_model(model *m, int bf16)
{
    memset(m, 0, sizeof *m);
    zinc_engine_options_t o = {.config_json = config(bf16), .threads = 1};
    ZT_OK(zinc_engine_create(&o, &m->e));
    if (!m->e) return 0;
    int g = -1;
    ZT_OK(zinc_group_add(m->e, "all", &g));
    const int64_t shape[2] = {NSMALL, NLARGE};
    const char *name[2] = {"small", "large"};
    zinc_dtype dt = bf16 ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP32;
    for (int p = 0; p < 2; p++) ZT_OK(zinc_param_add(m->e, g, name[p], 1, &shape[p], dt, &m->pid[p]));
    ZT_OK(zinc_finalize(m->e));
    for (int p = 0; p < 2; p++) {
        float *v = malloc((size_t)shape[p] * sizeof *v);
        if (!v) return 0;
        for (int64_t i = 0; i < shape[p]; i++) v[i] = 0.25f + (float)((i * 7 + p) % 1000) * 1e-3f;
        ZT_OK(zinc_param_set(m->e, m->pid[p], v));
        free(v);
        ZT_OK(zinc_param_data(m->e, m->pid[p], &m->data[p]));
        m->bytes[p] = (size_t)shape[p] * zinc_dtype_size(dt);
        m->copy[p] = malloc(m->bytes[p]);
        if (!m->data[p] || !m->copy[p]) return 0;
        memcpy(m->copy[p], m->data[p], m->bytes[p]);
    }
    ZT_OK(zinc_param_grad(m->e, m->pid[1], &m->grad));
    m->grad_copy = malloc(m->bytes[1]);
    if (!m->grad || !m->grad_copy) return 0;
    memset(m->grad, 0x3c, m->bytes[1]);   /* what a backward would have added */
    memcpy(m->grad_copy, m->grad, m->bytes[1]);
    return 1;
}

static void free_copies(model *m)
{
    for (int p = 0; p < 2; p++) free(m->copy[p]);
    free(m->grad_copy);
}

/* Blocks of the views' sizes, written over, so that memory freed too early shows. */
static void churn(const model *m)
{
    void *blk[12];
    for (int k = 0; k < 12; k++) {
        size_t n = (k % 3 == 2 ? m->bytes[0] : m->bytes[1]) + 64;
        blk[k] = malloc(n);
        if (blk[k]) memset(blk[k], 0xa5, n);
    }
    for (int k = 0; k < 12; k++) free(blk[k]);
}

static void check_views(const model *m, const char *when)
{
    for (int p = 0; p < 2; p++)
        ZT_CHECK(memcmp(m->data[p], m->copy[p], m->bytes[p]) == 0,
                 "%s: parameter %d's view no longer holds its values", when, p);
    ZT_CHECK(memcmp(m->grad, m->grad_copy, m->bytes[1]) == 0,
             "%s: the gradient view no longer holds its values", when);
}

typedef struct {
    void **holds;
    int first, count;
} release_job;

static void *release_some(void *arg)
{
    release_job *j = arg;
    for (int k = j->first; k < j->first + j->count; k++) zinc_memory_release(j->holds[k]);
    return NULL;
}

static void run(int bf16)
{
    const char *dt = bf16 ? "bf16" : "fp32";
    char when[128];
    model m;

    /* two holds, destroy, churn, release one by one */
    if (!make_model(&m, bf16)) return;
    void *h1 = zinc_memory_hold(m.e), *h2 = zinc_memory_hold(m.e);
    ZT_CHECK(h1 && h2, "%s: zinc_memory_hold gave NULL", dt);
    zinc_engine_destroy(m.e);
    churn(&m);
    snprintf(when, sizeof when, "%s: after zinc_engine_destroy with two holds", dt);
    check_views(&m, when);
    zinc_memory_release(h1);
    churn(&m);
    snprintf(when, sizeof when, "%s: after the first release", dt);
    check_views(&m, when);
    zinc_memory_release(h2);   /* frees them: LSan would report a leak otherwise */
    free_copies(&m);

    /* a DLPack descriptor's deleter releases its hold */
    if (!make_model(&m, bf16)) return;
    void **managed = calloc(1, 72);   /* DLManagedTensor (64 bytes) and a one-element shape */
    ZT_CHECK(managed != NULL, "out of memory");
    if (managed) {
        managed[6] = zinc_memory_hold(m.e);   /* manager_ctx, after the 48-byte DLTensor */
        zinc_engine_destroy(m.e);
        churn(&m);
        snprintf(when, sizeof when, "%s: a DLPack tensor's hold after the destroy", dt);
        check_views(&m, when);
        zinc_dlpack_deleter(managed);
    } else {
        zinc_engine_destroy(m.e);
    }
    free_copies(&m);

    /* many holds released from several threads at once */
    if (!make_model(&m, bf16)) return;
    void *holds[NHOLDS];
    for (int k = 0; k < NHOLDS; k++) holds[k] = zinc_memory_hold(m.e);
    zinc_engine_destroy(m.e);
    churn(&m);
    snprintf(when, sizeof when, "%s: %d holds after the destroy", dt, NHOLDS);
    check_views(&m, when);
    pthread_t th[NTHREADS];
    release_job jobs[NTHREADS];
    int started[NTHREADS];
    /* the last hold stays with this thread, so the views can be checked after the others */
    for (int t = 0; t < NTHREADS; t++) {
        jobs[t] = (release_job){holds, t * ((NHOLDS - 1) / NTHREADS),
                                t == NTHREADS - 1 ? (NHOLDS - 1) - t * ((NHOLDS - 1) / NTHREADS)
                                                  : (NHOLDS - 1) / NTHREADS};
        started[t] = pthread_create(&th[t], NULL, release_some, &jobs[t]) == 0;
        if (!started[t]) release_some(&jobs[t]);
    }
    for (int t = 0; t < NTHREADS; t++)
        if (started[t]) pthread_join(th[t], NULL);
    churn(&m);
    snprintf(when, sizeof when, "%s: the last of %d holds released from %d threads", dt, NHOLDS,
             NTHREADS);
    check_views(&m, when);
    zinc_memory_release(holds[NHOLDS - 1]);
    free_copies(&m);
}

int main(void)
{
    ZT_CHECK(zinc_memory_hold(NULL) == NULL, "zinc_memory_hold(NULL) is not NULL");
    zinc_memory_release(NULL);
    zinc_dlpack_deleter(NULL);
    run(1);
    run(0);
    return zt_finish("engine_memory_hold");
}
