/*
 * prefetch_depth.c — how far ahead stage 3 prefetches for GPT-2 124M's groups (engine/gather.c).
 * Not built by CMake; it reads the engine's private state (engine/internal.h) and calls its
 * private zgather_step_end, so it is compiled in the checkout it measures (-I. reads that tree's
 * engine/internal.h) and links the static core of that tree's build BUILD, configured with
 * -DZINC_CUDA=OFF (a CUDA build's core also needs the CUDA, NCCL and C++ runtime libraries):
 *
 *     cc -O2 -I. -Iinclude -o /tmp/prefetch_depth bench/prefetch_depth.c BUILD/libzinc_core.a \
 *        $(pkg-config --libs json-c libzstd libxxhash ompi-c) -luring -lpthread -lm
 *     /tmp/prefetch_depth [prefetch_bucket_size]        (default DeepSpeed's 50000000)
 *
 * The groups are the ones `import zinc` makes of transformers' GPT-2 (one per module with
 * parameters of its own: wte 50257 x 768 with the tied head, wpe, and per layer ln_1, c_attn,
 * attn.c_proj, ln_2, c_fc, mlp.c_proj; ln_f), bf16, one rank on the cpu device, DeepSpeed's
 * defaults (persistence threshold 1e5: the LayerNorms stay gathered). The gather order is the
 * front-end's: forward wte, wpe, the layers, wte again for the head; backward wte, the layers in
 * reverse, wpe, wte. After the traced first micro-step, every zinc_gather of the second is
 * followed by a count of the groups gathered ahead of use (prefetched, not held) and their
 * elements. Prints the slots, the median and smallest of both over the micro-step's gathers,
 * and the micro-step's all-gather bytes (prefetch moves gathers earlier, it must not add any).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

#define LAYERS 12
#define D 768
#define MAXG 128

static int order[4 * MAXG], norder;

static int add_group(zinc_engine_t *e, const char *name, int64_t rows, int64_t cols, int bias)
{
    int g, p;
    char pn[64];
    if (zinc_group_add(e, name, &g) != ZINC_OK) return -1;
    int64_t w[2] = {rows, cols}, b[1] = {cols};
    snprintf(pn, sizeof pn, "%s.weight", name);
    if (zinc_param_add(e, g, pn, cols ? 2 : 1, w, ZINC_DTYPE_BF16, &p) != ZINC_OK) return -1;
    snprintf(pn, sizeof pn, "%s.bias", name);
    if (bias && zinc_param_add(e, g, pn, 1, cols ? b : w, ZINC_DTYPE_BF16, &p) != ZINC_OK)
        return -1;
    return g;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long long pbs = argc > 1 ? atoll(argv[1]) : 50000000;
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}},"
             " \"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": %lld}}",
             pbs);
    zinc_engine_options_t o = {.config_json = cfg, .threads = 2};
    zinc_engine_t *e = NULL;
    if (zinc_engine_create(&o, &e) != ZINC_OK) {
        fprintf(stderr, "prefetch_depth: %s\n", zinc_last_error(e));
        return 1;
    }
    int wte = add_group(e, "wte", 50257, D, 0), wpe = add_group(e, "wpe", 1024, D, 0);
    int layer[LAYERS][4];
    for (int l = 0; l < LAYERS; l++) {
        char n[64];
        snprintf(n, sizeof n, "h%d.ln_1", l);
        add_group(e, n, D, 0, 1);
        snprintf(n, sizeof n, "h%d.c_attn", l);
        layer[l][0] = add_group(e, n, D, 3 * D, 1);
        snprintf(n, sizeof n, "h%d.attn.c_proj", l);
        layer[l][1] = add_group(e, n, D, D, 1);
        snprintf(n, sizeof n, "h%d.ln_2", l);
        add_group(e, n, D, 0, 1);
        snprintf(n, sizeof n, "h%d.c_fc", l);
        layer[l][2] = add_group(e, n, D, 4 * D, 1);
        snprintf(n, sizeof n, "h%d.mlp.c_proj", l);
        layer[l][3] = add_group(e, n, 4 * D, D, 1);
    }
    add_group(e, "ln_f", D, 0, 1);
    if (zinc_finalize(e) != ZINC_OK) {
        fprintf(stderr, "prefetch_depth: %s\n", zinc_last_error(e));
        return 1;
    }
    /* The non-persistent groups in the front-end's order (the LayerNorms are persistent). */
    order[norder++] = wte;
    order[norder++] = wpe;
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 4; k++) order[norder++] = layer[l][k];
    order[norder++] = wte; /* the tied head reads wte */
    order[norder++] = wte; /* its backward */
    for (int l = LAYERS - 1; l >= 0; l--)
        for (int k = 3; k >= 0; k--) order[norder++] = layer[l][k];
    order[norder++] = wpe;
    order[norder++] = wte;

    double groups[4 * MAXG], elems[4 * MAXG];
    uint64_t bytes[2][ZINC_COLL_COUNT];
    for (int micro = 0; micro < 2; micro++) {
        zinc_comm_bytes(e, bytes[0]);
        for (int i = 0; i < norder; i++) {
            if (zinc_gather(e, order[i]) != ZINC_OK) {
                fprintf(stderr, "prefetch_depth: %s\n", zinc_last_error(e));
                return 1;
            }
            int n = 0;
            double el = 0;
            for (int g = 0; g < e->plan.ngroups; g++)
                if (e->gstate[g].gather_slot >= 0 && !e->gstate[g].held) {
                    n++;
                    el += (double)e->plan.groups[g].padded;
                }
            groups[i] = n;
            elems[i] = el;
            zinc_release(e, order[i]);
        }
        zgather_step_end(e); /* the schedule's part of zinc_step; no update is needed here */
        zinc_comm_bytes(e, bytes[1]);
    }
    /* The second micro-step's all-gather bytes: prefetch moves gathers earlier, not more. */
    unsigned long long moved = bytes[1][ZINC_COLL_ALL_GATHER] - bytes[0][ZINC_COLL_ALL_GATHER];
    qsort(groups, (size_t)norder, sizeof *groups, cmp);
    qsort(elems, (size_t)norder, sizeof *elems, cmp);
    printf("{\"prefetch_bucket_size\": %lld, \"slots\": %d, \"slot_elements\": %zu, "
           "\"gathers\": %d, \"groups_ahead_median\": %.1f, \"groups_ahead_min\": %.0f, "
           "\"elements_ahead_median\": %.0f, \"elements_ahead_min\": %.0f, "
           "\"all_gather_bytes\": %llu}\n",
           pbs, e->ngather, e->plan.max_group_padded, norder, groups[norder / 2], groups[0],
           elems[norder / 2], elems[0], moved);
    zinc_engine_destroy(e);
    return 0;
}
