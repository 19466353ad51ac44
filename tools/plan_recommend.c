/*
 * plan_recommend.c — `zinc plan --recommend` (issue 41 item 2): every configuration of a run that
 * zinc can train — ZeRO stage, optimizer and parameter offload, micro-batch with the
 * accumulation that keeps the global batch, activation checkpointing — priced by zplan_step, and the fastest that fits the
 * GPU's memory (model state, buffers and activations) first. The caller prints each with the
 * reason it lost (tools/cmd_plan.c).
 */
#include <stdlib.h>

#include "tools/plan.h"

/* Fits before does-not-fit; among those that fit more tokens/s first, then less memory (a tie
 * in time: the cheaper choice), then the lower stage (the simpler one); among those that do
 * not, less memory first. */
static int better_first(const void *pa, const void *pb)
{
    const zplan_choice *a = pa, *b = pb;
    if (a->out.fits != b->out.fits) return b->out.fits - a->out.fits;
    double ma = (double)a->out.mem.total + a->out.activations;
    double mb = (double)b->out.mem.total + b->out.activations;
    /* Neither fits: the one closest to fitting first (what the table shows for its mode). */
    if (!a->out.fits && ma != mb) return ma < mb ? -1 : 1;
    if (a->out.tokens_per_s != b->out.tokens_per_s)
        return a->out.tokens_per_s > b->out.tokens_per_s ? -1 : 1;
    if (ma != mb) return ma < mb ? -1 : 1;
    return a->stage - b->stage;
}

int zplan_recommend(const zplan_in *base, long long global_batch, zplan_choice *out, int max)
{
    if (global_batch < 1 || base->gpus < 1 || global_batch % base->gpus) return 0;
    long long per_gpu = global_batch / base->gpus;
    /* (stage, offload, offload_param) as zinc accepts them: offload needs stage 1-3, offload of
     * the parameters stage 3 and the optimizer's offload with it (docs/config.md). */
    static const int modes[][3] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0},
                                   {1, 1, 0}, {2, 1, 0}, {3, 1, 0}, {3, 1, 1}};
    int n = 0;
    /* Activation checkpointing is tried too unless the caller asked for it (then always on):
     * it costs a forward and saves most activations, which can be what makes a run fit. */
    for (int ck = base->checkpointing; ck <= 1; ck++)
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (long long mb = 1; mb <= 1024 && mb <= per_gpu; mb *= 2) {
            if (per_gpu % mb || per_gpu / mb > 1000000 || n >= max) continue;
            zplan_choice *c = &out[n++];
            zplan_in in = *base;
            in.checkpointing = ck;
            c->checkpointing = ck;
            in.stage = modes[m][0];
            in.offload = modes[m][1];
            in.offload_param = modes[m][2];
            in.micro_batch = mb;
            in.accum = (int)(per_gpu / mb);
            c->stage = in.stage;
            c->offload = in.offload;
            c->offload_param = in.offload_param;
            c->micro_batch = mb;
            c->accum = in.accum;
            zplan_step(&in, &c->out);
        }
    qsort(out, (size_t)n, sizeof *out, better_first);
    return n;
}
