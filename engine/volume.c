/*
 * volume.c — the payload bytes one optimizer step moves per collective, per rank, from the
 * partition plan: the table of docs/comm-volume.md written as code, in the accounting the comm
 * layer's counters use (zinc_comm_bytes). `zinc plan` prices these bytes with its link model; the
 * plan tests compare them with the counters of engines that ran a step, so the table, this file
 * and the engine cannot drift apart unnoticed.
 *
 * F below is the flat buffer's padded element count times the communication element size.
 */
#include <string.h>

#include "engine/internal.h"

void zvol_plan(const zplan *p, int stage, zinc_dtype dtype, zinc_dtype rdtype, int accum,
               uint64_t bytes[ZINC_COLL_COUNT])
{
    uint64_t F = (uint64_t)p->flat_numel * zinc_dtype_size(dtype), k = (uint64_t)accum;
    /* the gradient's reduce-scatter in rdtype (fp32 with zcfg_reduces_fp32) */
    uint64_t R = (uint64_t)p->flat_numel * zinc_dtype_size(rdtype);
    memset(bytes, 0, sizeof(uint64_t) * ZINC_COLL_COUNT);
    /* Every stage: the (norm², non-finite count) all-reduce of two doubles, counted twice. */
    bytes[ZINC_COLL_ALL_REDUCE] = ZVOL_STATS_BYTES;
    switch (stage) {
    case 0: /* stages 0-1 keep the full gradient over the micro-steps and reduce once */
        bytes[ZINC_COLL_ALL_REDUCE] += 2 * F;
        break;
    case 1:
        bytes[ZINC_COLL_REDUCE_SCATTER] = R;
        bytes[ZINC_COLL_ALL_GATHER] = F;
        break;
    case 2: /* reduce-scatter at every micro-step's zinc_grads_ready, as DeepSpeed */
        bytes[ZINC_COLL_REDUCE_SCATTER] = k * R;
        bytes[ZINC_COLL_ALL_GATHER] = F;
        break;
    default: /* 3: gathered for forward and again for backward at every micro-step */
        bytes[ZINC_COLL_REDUCE_SCATTER] = k * R;
        bytes[ZINC_COLL_ALL_GATHER] = 2 * k * F;
        break;
    }
}

void zvol_estimate(uint64_t params, int world, int stage, zinc_dtype dtype, zinc_dtype rdtype,
                   int accum, uint64_t bytes[ZINC_COLL_COUNT])
{
    zmem_bare b; /* laid out as zmem_estimate lays it out */
    zmem_bare_plan(&b, params, world);
    zvol_plan(&b.plan, stage, dtype, rdtype, accum, bytes);
}
