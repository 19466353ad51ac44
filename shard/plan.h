/*
 * plan.h — the partition plan: where every parameter lives in the flat buffers, and which slice
 * of every group each rank owns.
 *
 * Each group is one flat buffer: its parameters back to back (each starting at a multiple of
 * ZPLAN_ALIGN elements), then zero padding so that the group splits into `world` equal slices,
 * each a multiple of ZPLAN_ALIGN elements. Rank r owns slice r of every group; the concatenation
 * of a rank's slices, in group order, is its shard (contiguous: one kernel updates it all).
 * The full flat buffer (all groups back to back) is what stages 0-2 keep of the 16-bit params.
 * Works for any world size: a rank's slice may hold only padding.
 */
#ifndef ZINC_SHARD_PLAN_H
#define ZINC_SHARD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define ZPLAN_ALIGN 32         /* elements: 64 bytes of 16-bit values, 128 of fp32 */
#define ZPLAN_MAX_DIMS 8
#define ZPLAN_NAME_MAX 128

typedef struct zplan_param {
    char name[ZPLAN_NAME_MAX];
    int group;
    int ndim;
    int64_t shape[ZPLAN_MAX_DIMS];
    size_t numel;
    size_t offset;             /* element offset in its group's flat buffer */
} zplan_param;

typedef struct zplan_group {
    char name[ZPLAN_NAME_MAX];
    int first_param, nparams;  /* params [first_param, first_param + nparams) */
    size_t numel;              /* elements used by parameters (with alignment gaps) */
    size_t padded;             /* = world * slice */
    size_t slice;              /* elements per rank, multiple of ZPLAN_ALIGN */
    size_t flat_off;           /* offset of the group in the full flat buffer */
    size_t shard_off;          /* offset of the group's slice in a rank's shard */
} zplan_group;

typedef struct zplan {
    int world;
    int ngroups, nparams;
    zplan_group *groups;       /* [ngroups] */
    zplan_param *params;       /* [nparams] */
    size_t flat_numel;         /* sum of padded over groups */
    size_t shard_numel;        /* sum of slice over groups (same on every rank) */
    size_t max_group_padded;   /* the largest group: sizes buckets and gather buffers */
} zplan;

/* Lays out groups/params (already filled with names, shapes, numel, group, first/nparams) for
 * `world` ranks: fills offsets, padding, slices and totals. Returns 0, or -1 on overflow. */
int zplan_layout(zplan *p, int world);

/* The part of parameter `param` inside rank `rank`'s slice of its group: element range
 * [*lo, *hi) of the parameter (flattened, 0-based), and the offset of element *lo within the
 * rank's shard. Returns 0 when the slice holds none of it. */
int zplan_param_in_slice(const zplan *p, int param, int rank, size_t *lo, size_t *hi,
                         size_t *shard_pos);

void zplan_free(zplan *p);

#endif
