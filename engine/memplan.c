/*
 * memplan.c — bytes per rank per memory category, computed from the partition plan before
 * anything is allocated. The engine allocates exactly these amounts (one block per category) and
 * `zinc estimate` prints them for a bare parameter count.
 *
 * With Ψ parameters, N ranks, 16-bit working dtype (d = 2), this is the ZeRO paper's accounting
 * (K = 12 bytes of fp32 master + Adam m + v per parameter), up to padding:
 *   stage 0: 2Ψ + 2Ψ + 12Ψ        stage 1: 2Ψ + 2Ψ + 12Ψ/N
 *   stage 2: 2Ψ + 2Ψ/N + 12Ψ/N    stage 3: 2Ψ/N + 2Ψ/N + 12Ψ/N
 * In fp32 mode at stages 0 and 3 the working copy has the master's layout (the flat buffer, or the
 * shard) and the same dtype, so it IS the master: no separate master block, 16Ψ and 16Ψ/N as with
 * DeepSpeed's fp32 training. (At stages 1-2 the working copy is the full flat buffer while the
 * master is the shard, so both exist.)
 * plus buffers that are not model state: gradient buckets (stages 2-3, and stage 1 with fp32
 * gradient sums) and gather buffers
 * (stage 3), each the size of the largest group, and at stage 3 the full copies of the groups
 * below stage3_param_persistence_threshold, which stay gathered.
 *
 * offload_optimizer (stages 1-3) moves master, m and v of the shard to the host (12Ψ/N there,
 * 0 on the device) and adds two host staging buffers of the shard in the working dtype: the
 * downloaded gradient (2Ψ/N) and Adam's 16-bit output before its upload (2Ψ/N; none in fp32 mode,
 * where the master itself is uploaded). At stages 2-3 the reduced gradient shard accumulates in
 * that host buffer and its statistics are taken there: no device grad block, only a scratch of
 * the largest slice after the buckets (offload.c). At stage 1 the full gradient stays on the
 * device (the step reduces it). Device: stage 1 4Ψ, stage 2 2Ψ, stage 3 2Ψ/N (plus buffers);
 * host 16Ψ/N at every stage (fp16/bf16).
 *
 * offload_param (stage 3, with offload_optimizer) moves the 16-bit shard to the host as well: the
 * host staging buffer for Adam's 16-bit output becomes the shard itself (same size, so the host
 * side is unchanged: 16Ψ/N, or 12Ψ/N + 4Ψ/N in fp32 where the host master is the shard), and the
 * device keeps no param16 block: no model state on the device, only the buffers — buckets and
 * the gather area, sized by the largest group, and the persistent (small) groups in full.
 *
 * data_types.grad_accum_dtype "fp32" (stages 1-3, bf16/fp16) keeps the gradient sums in fp32:
 * at stage 1 the full 4Ψ instead of 2Ψ, plus the buckets the micro-step's 16-bit gradient is
 * added in (as at stages 2-3); at stages 2-3 the shard, 4Ψ/N instead of 2Ψ/N, on the device or
 * with offload on the host (and the device's one-slice scratch for the additions in fp32 too);
 * the buckets the reduce-scatter works in stay 16-bit. With communication_data_type "fp32" as
 * well (ZMEM_WIRE_FP32) the bucket is widened at stages 2-3 into an fp32 scratch of the largest
 * group and reduced there: 4 bytes per element of that group more in the bucket block.
 *
 * A frozen engine (ZMEM_FROZEN, zinc_engine_frozen: stage 3) holds the values of parameters
 * nobody trains: the 16-bit shard (2Ψ/N; with offload_param in host memory instead, the device
 * then holding none), the gather area and the persistent groups, nothing else — no gradient,
 * master, moments or buckets (offload_optimizer has nothing to move).
 */
#include <string.h>

#include "engine/internal.h"

int zmem_master_aliased(int stage, zinc_dtype dtype, int offload)
{
    return !offload && dtype == ZINC_DTYPE_FP32 && (stage == 0 || stage == 3);
}

void zmem_plan(const zplan *p, int stage, zinc_dtype dtype, int offload, int nbuckets, int ngather,
               size_t persist_numel, uint64_t bytes[ZINC_MEM_COUNT], uint64_t host[ZINC_MEM_COUNT])
{
    uint64_t d = zinc_dtype_size(dtype);
    uint64_t gd = offload & ZMEM_GRAD_FP32 ? 4 : d;
    int offloads = offload & (ZMEM_OFFLOAD_OPTIMIZER | ZMEM_OFFLOAD_PARAM);
    uint64_t F = p->flat_numel, S = p->shard_numel, B = p->max_group_padded;
    memset(bytes, 0, sizeof(uint64_t) * ZINC_MEM_COUNT);
    bytes[ZINC_MEM_PARAM16] = (stage < 3 ? F : S) * d;
    bytes[ZINC_MEM_GRAD] = (stage < 2 ? F : S) * gd;
    bytes[ZINC_MEM_ADAM_M] = (stage == 0 ? F : S) * 4;
    bytes[ZINC_MEM_ADAM_V] = bytes[ZINC_MEM_ADAM_M];
    bytes[ZINC_MEM_MASTER] = zmem_master_aliased(stage, dtype, offloads) ? 0 : bytes[ZINC_MEM_ADAM_M];
    /* nbuckets is 0 where the model adds into the gradient buffer itself (zmem_bucketed) */
    bytes[ZINC_MEM_BUCKET] = (uint64_t)nbuckets * B * d;
    /* the fp32 reduction's scratch (step.c hand_over), after the buckets */
    if (stage >= 2 && (offload & ZMEM_WIRE_FP32)) bytes[ZINC_MEM_BUCKET] += B * 4;
    bytes[ZINC_MEM_GATHER] = stage == 3 ? ((uint64_t)ngather * B + persist_numel) * d : 0;
    if (host) memset(host, 0, sizeof(uint64_t) * ZINC_MEM_COUNT);
    if (offload & ZMEM_FROZEN) {     /* stage 3: the shard and the gather area */
        for (int c = ZINC_MEM_GRAD; c <= ZINC_MEM_BUCKET; c++) bytes[c] = 0;
        /* offload_param: the shard in host memory, in fp32 mode too (no master to be it) */
        if (offload & ZMEM_OFFLOAD_PARAM) {
            bytes[ZINC_MEM_PARAM16] = 0;
            if (host) host[ZINC_MEM_PARAM16] = S * d;
        }
        return;
    }
    if (!offloads || stage == 0) return;
    for (int c = ZINC_MEM_MASTER; c <= ZINC_MEM_ADAM_V; c++) {
        if (host) host[c] = S * 4;
        bytes[c] = 0;
    }
    /* Stages 2-3: the reduced gradient shard accumulates on the host (offload.c); the device
     * keeps one slice of scratch for the additions, after the buckets. */
    if (stage >= 2) {
        uint64_t slice = 0;
        for (int g = 0; g < p->ngroups; g++)
            if (p->groups[g].slice > slice) slice = p->groups[g].slice;
        bytes[ZINC_MEM_GRAD] = 0;
        bytes[ZINC_MEM_BUCKET] += slice * gd;
    }
    if (host) {
        host[ZINC_MEM_GRAD] = S * gd;
        host[ZINC_MEM_PARAM16] = dtype == ZINC_DTYPE_FP32 ? 0 : S * d;
    }
    if ((offload & ZMEM_OFFLOAD_PARAM) && stage == 3) bytes[ZINC_MEM_PARAM16] = 0;
}

void zmem_bare_plan(zmem_bare *b, uint64_t params, int world)
{
    /* One group holding all parameters: the padding is then at most ZPLAN_ALIGN * world. */
    b->prm = (zplan_param){.numel = (size_t)params, .group = 0, .ndim = 1};
    b->grp = (zplan_group){.first_param = 0, .nparams = 1};
    b->plan = (zplan){.ngroups = 1, .nparams = 1, .groups = &b->grp, .params = &b->prm};
    zplan_layout(&b->plan, world);
}

void zmem_estimate(uint64_t params, int world, int stage, zinc_dtype dtype, int offload,
                   uint64_t bytes[ZINC_MEM_COUNT], uint64_t host[ZINC_MEM_COUNT])
{
    zmem_bare b;
    zmem_bare_plan(&b, params, world);
    zmem_plan(&b.plan, stage, dtype, offload, 0, 0, 0, bytes, host);
}
