/*
 * plan_model.c — see plan.h. The bytes come from the engine (zvol_estimate, zest_memory); this
 * file only prices them. Everything is per rank: all ranks do the same work in data parallelism.
 */
#include <math.h>
#include <strings.h>

#include "engine/internal.h"
#include "tools/plan.h"

/* The GPU table. NVLink and PCIe: the datasheets give the total of both directions; a ring
 * sends one way, so the table holds half. Memory: the datasheet's GB as 10^9 bytes. */
const zplan_gpu zplan_gpus[] = {
    /* NVIDIA A100 Tensor Core GPU datasheet: BF16 tensor 312 TFLOPS (624 with sparsity), FP32
     * 19.5 TFLOPS, 40GB HBM2 1,555 GB/s, NVLink 600 GB/s, PCIe Gen4 64 GB/s (SXM). */
    {"a100-40", "A100 SXM 40GB", 312e12, 40e9, 1555e9, 300e9, 32e9,
     "NVIDIA A100 Tensor Core GPU datasheet", 19.5e12, NULL, 0},
    /* Same datasheet: 80GB HBM2e 2,039 GB/s (SXM). */
    {"a100-80", "A100 SXM 80GB", 312e12, 80e9, 2039e9, 300e9, 32e9,
     "NVIDIA A100 Tensor Core GPU datasheet", 19.5e12, NULL, 0},
    /* NVIDIA H100 Tensor Core GPU datasheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity, so
     * 989 dense; FP32 67 TFLOPS; 80GB, 3.35 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s. */
    {"h100", "H100 SXM 80GB", 989e12, 80e9, 3350e9, 450e9, 64e9,
     "NVIDIA H100 Tensor Core GPU datasheet", 67e12, NULL, 0},
    /* NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 tensor 1,979 TFLOPS with sparsity, so
     * 989 dense; FP32 67 TFLOPS; 141GB HBM3e, 4.8 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s. */
    {"h200", "H200 SXM 141GB", 989e12, 141e9, 4800e9, 450e9, 64e9,
     "NVIDIA H200 Tensor Core GPU datasheet", 67e12, NULL, 0},
};
const int zplan_ngpus = (int)(sizeof zplan_gpus / sizeof zplan_gpus[0]);

double zplan_peak_flops(const zplan_gpu *g, zinc_dtype dtype)
{
    return dtype == ZINC_DTYPE_FP32 && g->fp32_flops > 0 ? g->fp32_flops : g->peak_flops;
}

const zplan_gpu *zplan_gpu_find(const char *name)
{
    static const struct {
        const char *alias, *name;
    } aliases[] = {{"a100-40gb", "a100-40"}, {"a100", "a100-80"},  {"a100-80gb", "a100-80"},
                   {"h100-sxm", "h100"},     {"h100-80gb", "h100"}, {"h200-sxm", "h200"}};
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].name;
    for (int i = 0; i < zplan_ngpus; i++)
        if (!strcasecmp(name, zplan_gpus[i].name)) return &zplan_gpus[i];
    return NULL;
}

double zplan_ring(double bytes, int n, zplan_link l)
{
    if (n <= 1) return 0.0;
    return (n - 1) * l.alpha + (double)(n - 1) / n * bytes / l.bw;
}

double zplan_collective(double bytes, int calls, int n, int per_node, zplan_link intra,
                        zplan_link inter)
{
    if (bytes <= 0.0) return 0.0; /* not issued at this stage: no latency either */
    if (calls < 1) calls = 1;
    double each = bytes / calls;
    if (n <= per_node) return calls * zplan_ring(each, n, intra);
    int nodes = (n + per_node - 1) / per_node;
    return calls * (zplan_ring(each, per_node, intra) + zplan_ring(each / per_node, nodes, inter));
}

/* What of `comm` a compute phase of `compute` seconds hides when it is issued as `groups` equal
 * pieces, one per group, the first (or last) of which has nothing to hide behind. */
static double exposed(double comm, double compute, int groups)
{
    double edge = comm / groups;
    return edge + fmax(0.0, comm - edge - compute);
}

void zplan_step(const zplan_in *in, zplan_out *o)
{
    const zplan_gpu *g = in->gpu;
    int n = in->gpus, k = in->accum, groups = in->layers > 0 ? in->layers : 1;
    double d = (double)zinc_dtype_size(in->dtype);
    /* Compute: 2 FLOPs per parameter per token forward, 4 backward; attention's score and value
     * products add 12·layers·hidden·seq per token (forward + backward) where they are known. */
    o->flops_per_token = 6.0 * in->params;
    if (in->layers > 0 && in->hidden > 0)
        o->flops_per_token += 12.0 * in->layers * in->hidden * in->seq;
    double tokens_rank = (double)in->micro_batch * in->seq * k;
    o->tokens = tokens_rank * n;
    double peak = zplan_peak_flops(g, in->dtype);
    double compute = o->flops_per_token * tokens_rank / (peak * in->efficiency);
    o->forward = compute / 3.0;
    o->backward = 2.0 * compute / 3.0 + (in->checkpointing ? compute / 3.0 : 0.0);

    /* Memory and bytes: the engine's own (zinc estimate's), its buffers sized by the largest
     * group. With the shape known that is a layer, or the embedding where it is larger, as the
     * models register them (a group per block: zinc train, import zinc's modules); without it,
     * one group of P (it was one group always, so stage 3's gather slots held the model twice
     * and memory per rank grew with the stage). */
    long long P = (long long)in->params;
    zest_memory(P, n, in->stage, in->dtype, in->offload, in->offload_param, in->grad_fp32,
                in->reduce_fp32, zplan_largest_group(in), ZEST_BUCKETS, ZEST_GATHERS, &o->mem);
    zvol_estimate((uint64_t)P, n, in->stage, in->dtype, in->reduce_fp32 ? ZINC_DTYPE_FP32 : in->dtype,
                  k, o->coll);

    double rs = (double)o->coll[ZINC_COLL_REDUCE_SCATTER];
    double ag = (double)o->coll[ZINC_COLL_ALL_GATHER];
    double ar = (double)(o->coll[ZINC_COLL_ALL_REDUCE] - ZVOL_STATS_BYTES);
    int calls_step = in->stage == 0 ? 1 : groups; /* stage 0 reduces the flat buffer at once */
    o->reduce_scatter = zplan_collective(rs, calls_step * (in->stage >= 2 ? k : 1), n,
                                         in->per_node, in->intra, in->inter);
    o->all_gather = zplan_collective(ag, calls_step * (in->stage == 3 ? 2 * k : 1), n,
                                     in->per_node, in->intra, in->inter);
    /* The all-reduce counts 2B for a buffer of B: a reduce-scatter and an all-gather of B. */
    double stats = 2.0 * zplan_collective((double)ZVOL_STATS_BYTES / 2.0, 1, n, in->per_node,
                                          in->intra, in->inter);
    o->all_reduce = 2.0 * zplan_collective(ar / 2.0, 1, n, in->per_node, in->intra, in->inter) +
                    stats;

    /* Overlap, as zinc schedules it (docs/plan.md). Per micro-step: fwd, bwd compute. */
    double fwd = o->forward / k, bwd = o->backward / k;
    switch (in->stage) {
    case 0: /* the all-reduce at the step boundary: nothing to hide behind */
    case 1: /* reduce-scatter at the boundary, all-gather after the update */
        o->exposed = o->all_reduce + o->reduce_scatter + o->all_gather;
        break;
    case 2: /* each group's reduce-scatter behind the rest of backward, but the last */
        o->exposed = k * exposed(o->reduce_scatter / k, bwd, groups) + o->all_gather +
                     o->all_reduce;
        break;
    default: { /* 3: gathers prefetched behind forward and backward but the first; the
                * backward gathers and reduce-scatters share the link and hide behind it */
        double agf = o->all_gather / (2.0 * k), rsm = o->reduce_scatter / k;
        o->exposed = k * (exposed(agf, fwd, groups) + exposed(agf + rsm, bwd, groups)) +
                     o->all_reduce;
        break;
    }
    }

    /* The optimizer: fused Adam reads and writes master, m, v (24 bytes) and reads the gradient
     * (dtype, or 4 bytes with fp32 sums) and writes the working copy (dtype) per element of the
     * shard. */
    double shard = (double)(o->mem.dev[ZINC_MEM_ADAM_M] + o->mem.host[ZINC_MEM_ADAM_M]) / 4.0;
    double gd = in->grad_fp32 ? 4.0 : d;
    double adam_bytes = (24.0 + gd + d) * shard;
    /* the host's memory bandwidth (per node) is shared by the node's ranks: the host Adam of
     * N ranks on one node is not N times faster than one rank's (it was, so 8 ranks' offloaded
     * steps scaled 4x better than linearly). A calibrated CPU rank's "device" is that host too,
     * so its own Adam shares the same way (or offload would price the same Adam slower). */
    int node_ranks = in->gpus < in->per_node ? in->gpus : in->per_node;
    double device_bw = g->host_device ? g->hbm_bw / node_ranks : g->hbm_bw;
    o->optimizer = adam_bytes / (in->offload ? in->host_bw / node_ranks : device_bw);
    /* Offload's PCIe copies per step, as the engine counts them (zinc_offload_bytes): the
     * gradient shard down, at stage 1 once at the step, at stages 2-3 after every micro-step's
     * hand-over, and from a window's second micro-step on its partial sum up first (2k - 1
     * copies); the 16-bit shard up after the update, except with offload_param, whose gathers
     * upload the rank's own slice instead (forward and backward: 2k per step; import zinc at its
     * default stage3_max_reuse_distance gathers once per micro-step, docs/plan.md). None
     * hidden. */
    o->offload = 0.0;
    if (in->offload) {
        double grad_copies = in->stage >= 2 ? 2.0 * k - 1.0 : 1.0;
        o->offload = (grad_copies * gd + (in->offload_param ? 0.0 : d)) * shard / in->pcie_bw;
    }
    if (in->offload_param) o->offload += 2.0 * k * d * shard / in->pcie_bw;

    o->step = o->forward + o->backward + o->exposed + o->optimizer + o->offload;
    o->tokens_per_s = o->tokens / o->step;
    o->mfu = o->flops_per_token * o->tokens_per_s / (n * peak);
    o->activations = zplan_activations(in);
    /* Offload's host memory is per rank; a node holds min(gpus, per_node) ranks of it. */
    o->host_per_node = (double)o->mem.host_total * node_ranks;
    o->host_fits = in->host_mem <= 0 || o->host_per_node <= in->host_mem;
    o->device_fits = (double)o->mem.total + o->activations <= g->mem_bytes;
    o->fits = o->device_fits && o->host_fits;
}

long long zplan_largest_group(const zplan_in *in)
{
    long long P = (long long)in->params;
    if (in->layers <= 0) return zest_default_group(P);
    double embed = in->vocab > 0 && in->hidden > 0 ? in->vocab * in->hidden : 0.0;
    double layer = (in->params - embed) / in->layers;
    double g = layer > embed ? layer : embed;
    return g < 1.0 ? 1 : g > (double)P ? P : (long long)ceil(g);
}

double zplan_activations(const zplan_in *in)
{
    if (in->layers <= 0 || in->hidden <= 0) return 0.0;
    double h = in->hidden, I = in->ffn > 0 ? in->ffn : 4.0 * h;
    double tokens = (double)in->micro_batch * in->seq;
    /* Per token of one layer, bytes: attention 11h and the two layer norms 4h (Korthikanti et
     * al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1,
     * without the 5as/h of stored scores, which flash attention and SDPA do not keep); the MLP's
     * input 2h, then for a plain MLP the activation's input and output 2I + 2I and the dropout
     * mask h, for a gated one the gate and up outputs, the activation's output and the product
     * (4 x 2I) and the input counted once more for the second projection's read (h). */
    double mlp = in->gated ? 3.0 * h + 8.0 * I : 3.0 * h + 4.0 * I;
    double wide = in->act_bytes == 4 ? 2.0 : 1.0; /* fp32 activations: twice the 16-bit bytes */
    double layer = (15.0 * h + mlp) * tokens * wide;
    double logits = in->vocab > 0 ? 14.0 * in->vocab * tokens : 0.0;
    if (in->checkpointing) return in->layers * 2.0 * h * tokens * wide + layer + logits;
    return in->layers * layer + logits;
}
