/*
 * plan.c — see plan.h. Padding is the price of equal slices: at most ZPLAN_ALIGN * world - 1
 * elements per group plus ZPLAN_ALIGN - 1 per parameter, negligible for real layers.
 */
#include "shard/plan.h"

#include <stdlib.h>

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

int zplan_layout(zplan *p, int world)
{
    if (world < 1) return -1;
    p->world = world;
    size_t flat = 0, shard = 0, maxg = 0;
    for (int g = 0; g < p->ngroups; g++) {
        zplan_group *G = &p->groups[g];
        size_t off = 0;
        for (int i = G->first_param; i < G->first_param + G->nparams; i++) {
            p->params[i].offset = off;
            off = round_up(off + p->params[i].numel, ZPLAN_ALIGN);
            if (off < p->params[i].numel) return -1;
        }
        G->numel = off;
        G->slice = round_up((off + (size_t)world - 1) / (size_t)world, ZPLAN_ALIGN);
        if (G->slice == 0) G->slice = ZPLAN_ALIGN; /* an empty group still has a slot */
        G->padded = G->slice * (size_t)world;
        G->flat_off = flat;
        G->shard_off = shard;
        flat += G->padded;
        shard += G->slice;
        if (G->padded > maxg) maxg = G->padded;
    }
    p->flat_numel = flat;
    p->shard_numel = shard;
    p->max_group_padded = maxg;
    return 0;
}

int zplan_param_in_slice(const zplan *p, int param, int rank, size_t *lo, size_t *hi,
                         size_t *shard_pos)
{
    const zplan_param *P = &p->params[param];
    const zplan_group *G = &p->groups[P->group];
    size_t s0 = G->slice * (size_t)rank, s1 = s0 + G->slice;
    size_t a = P->offset > s0 ? P->offset : s0;
    size_t b = P->offset + P->numel < s1 ? P->offset + P->numel : s1;
    if (a >= b) return 0;
    *lo = a - P->offset;
    *hi = b - P->offset;
    *shard_pos = G->shard_off + (a - s0);
    return 1;
}

void zplan_free(zplan *p)
{
    free(p->groups);
    free(p->params);
    p->groups = NULL;
    p->params = NULL;
    p->ngroups = p->nparams = 0;
}
