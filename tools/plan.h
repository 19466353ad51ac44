/*
 * plan.h — the model behind `zinc plan` (tools/plan_model.c): a predicted optimizer step of a
 * ZeRO run from the engine's own memory plan and per-step collective volumes (zest_memory,
 * zvol_estimate), a compute model (6·P FLOPs per token plus attention, at a fraction of the GPU's
 * peak), a ring α–β model of the links, and the overlap zinc's schedule allows at each stage.
 * Every formula is in docs/plan.md; the figures of the GPU table carry their sources there and
 * in plan_model.c. Pure functions: no I/O, so tests call them directly.
 */
#ifndef ZINC_TOOLS_PLAN_H
#define ZINC_TOOLS_PLAN_H

#include <json-c/json.h>

#include "tools/commands.h"

typedef struct {
    const char *name;   /* what --gpu takes, e.g. "h100" */
    const char *label;  /* the product, e.g. "H100 SXM 80GB" */
    double peak_flops;  /* dense bf16 tensor FLOP/s (no sparsity) */
    double mem_bytes;   /* device memory, the datasheet's GB x 10^9 */
    double hbm_bw;      /* device memory bandwidth, bytes/s */
    double nvlink_bw;   /* NVLink bytes/s per GPU per direction (half the datasheet's total) */
    double pcie_bw;     /* host link bytes/s per direction (half the datasheet's total) */
    const char *source; /* the datasheet the figures come from */
    double fp32_flops;  /* dense FP32 FLOP/s, no tensor cores: what fp32 training runs at, since
                           PyTorch leaves TF32 off for matrix products; 0: peak_flops (a
                           calibrated rank, measured in bf16) */
    const char *cal_model; /* a calibrated rank: the built-in model (--model SPEC) its FLOP/s
                              were measured on, or NULL */
    int host_device;       /* 1: a calibrated CPU rank, whose memory is the node's host memory:
                              its optimizer rate (hbm_bw, measured by one process) is shared by
                              the node's ranks, as offload's host_bw */
} zplan_gpu;

/* The FLOP/s a step of dtype runs at on g: fp32's peak in fp32, else the 16-bit tensor peak. */
double zplan_peak_flops(const zplan_gpu *g, zinc_dtype dtype);

/* The built-in table, and a lookup by name (case-insensitive; "h100-sxm" and "a100-80gb" style
 * aliases accepted). NULL for an unknown name. */
extern const zplan_gpu zplan_gpus[];
extern const int zplan_ngpus;
const zplan_gpu *zplan_gpu_find(const char *name);

/* One link: bandwidth in bytes/s per GPU per direction, latency α in seconds per ring step. */
typedef struct {
    double bw, alpha;
} zplan_link;

/* Default inter-node link: one 400 Gb/s InfiniBand NDR adapter per GPU, 50e9 bytes/s. Default
 * latencies (assumptions, not datasheet figures; docs/plan.md): 2 µs per NVLink ring step,
 * 5 µs per InfiniBand ring step. */
#define ZPLAN_IB_NDR_BW 50e9
#define ZPLAN_INTRA_ALPHA 2e-6
#define ZPLAN_INTER_ALPHA 5e-6
/* Default compute efficiency (achieved / peak FLOP/s of the matrix work), docs/plan.md. */
#define ZPLAN_EFFICIENCY 0.5
/* Default host memory bandwidth per node for offload's host Adam, shared by the node's ranks,
 * bytes/s (assumption): 8 ranks x 50 GB/s, what a 2-socket DDR5 host reaches of its ~600 GB/s
 * peak; one rank alone may use all of it. */
#define ZPLAN_HOST_BW 400e9

/* A ring reduce-scatter or all-gather of a buffer of `bytes` over n ranks:
 * (n-1)·α + (n-1)/n · bytes / bw. 0 for n = 1. */
double zplan_ring(double bytes, int n, zplan_link l);

/* A reduce-scatter or all-gather of `bytes` in all, issued as `calls` equal collectives over n
 * ranks with `per_node` GPUs per node: one ring when n <= per_node; else a ring inside the node
 * over the whole buffer, then a ring across the ceil(n / per_node) nodes over the node's
 * 1/per_node share, on the inter-node link. An all-reduce costs twice this. 0 for 0 bytes
 * (a collective the stage does not issue). */
double zplan_collective(double bytes, int calls, int n, int per_node, zplan_link intra,
                        zplan_link inter);

typedef struct {
    /* model */
    double params;          /* P */
    int layers;             /* 0 = not given: no attention term, one group, no activations */
    double hidden, seq;     /* hidden size (0 = not given), sequence length */
    double vocab;           /* vocabulary (0 = not given: no logits in the activations) */
    double ffn;             /* MLP intermediate size (0 = 4 x hidden) */
    int gated;              /* gated MLP (SwiGLU: gate and up projections), as Llama's */
    long long micro_batch;  /* sequences per GPU per micro-step */
    int checkpointing;      /* activation checkpointing: forward recomputed in backward */
    int act_bytes;          /* bytes per activation element: 2 (16-bit training; 0 means 2) or
                               4 (fp32 training, and the built-in model on the CPU, which
                               computes in fp32 whatever the dtype) */
    /* run */
    int gpus, per_node, stage, accum;
    zinc_dtype dtype;
    int offload, offload_param;
    int grad_fp32;          /* --config's data_types.grad_accum_dtype "fp32": fp32 gradient sums */
    int reduce_fp32;        /* and communication_data_type "fp32": reduced in fp32
                               (zcfg_reduces_fp32) */
    /* machine */
    const zplan_gpu *gpu;
    zplan_link intra, inter;
    double pcie_bw, host_bw, efficiency;
    double host_mem;        /* bytes of host memory per node (--host-mem); 0 = not checked */
} zplan_in;

typedef struct {
    double flops_per_token;          /* 6P + 12·layers·hidden·seq */
    double tokens;                   /* tokens per step, all GPUs */
    double forward, backward;        /* compute seconds per step (all micro-steps) */
    zest_mem mem;                    /* what `zinc estimate` prints for this run */
    double activations;              /* bytes per rank a micro-step's activations hold at their
                                        peak (zplan_activations); 0 when layers are not given */
    int fits;                        /* device_fits && host_fits */
    int device_fits;                 /* mem.total + activations <= the GPU's memory */
    int host_fits;                   /* host_per_node <= host_mem (1 when not given) */
    double host_per_node;            /* offload's host bytes on a node: mem.host_total x the
                                        ranks on it, min(gpus, per_node) */
    uint64_t coll[ZINC_COLL_COUNT];  /* payload bytes per rank per step (zinc_comm_bytes) */
    double reduce_scatter, all_gather, all_reduce;  /* seconds per step, whole, unhidden */
    double exposed;                  /* comm seconds not hidden behind compute */
    double optimizer;                /* Adam on the shard (device, or host with offload) */
    double offload;                  /* PCIe copies of offload, not hidden */
    double step, tokens_per_s, mfu;
} zplan_out;

/* The predicted step of `in`. */
void zplan_step(const zplan_in *in, zplan_out *out);

/* Bytes of activations one micro-step holds per rank at its peak (the start of backward), 16-bit
 * training, attention that keeps no s x s scores (flash / SDPA): per layer s·b·(15·h + MLP) —
 * Korthikanti et al. 2022's 11·s·b·h for attention and 4·s·b·h for the two layer norms, the MLP
 * 2·h + 4·I + h (mask) for a plain one (19·h at I = 4h: their 34·s·b·h in all) and 3·h + 8·I for
 * a gated one (gate, up, activation, product) — plus the logits at 14 bytes per token per
 * vocabulary entry (16-bit logits, their fp32 copy for the loss, the saved log-softmax and its
 * gradient). With checkpointing: each layer's 16-bit input (2·s·b·h), one layer recomputed in
 * full, the logits. The layers' part doubles with act_bytes 4. 0 without layers and hidden.
 * docs/plan.md derives and checks it. */
double zplan_activations(const zplan_in *in);

/* Elements of the largest group, which sizes the engine's buffers (buckets, gather slots):
 * with the layers known, a layer's parameters or the embedding (vocab x hidden) where larger;
 * else one group of P (zest_default_group). */
long long zplan_largest_group(const zplan_in *in);

/* --recommend: the configurations tried for a global batch (sequences per optimizer step). */
typedef struct {
    int stage, offload, offload_param, checkpointing;
    long long micro_batch;
    int accum;
    zplan_out out;
} zplan_choice;

/* Every candidate for `base` (its model, GPUs and links; its stage, offload, micro-batch and
 * accumulation are replaced): stages 0-3 x {no offload, optimizer offload (stages 1-3),
 * optimizer + parameter offload (stage 3)} x micro-batches 1, 2, 4, ... 1024 that divide
 * global_batch / gpus (accumulation the quotient) x checkpointing off and on (on only, when base
 * has it). Fills up to `max` into `out`: those that fit first, fastest first, then those that do
 * not, smallest first; returns how many (0 when global_batch is not a multiple of gpus). */
int zplan_recommend(const zplan_in *base, long long global_batch, zplan_choice *out, int max);

/* `zinc plan --calibrate` (tools/plan_calibrate.c): measures one rank's compute on the built-in
 * model at `spec` with `threads` threads (this binary's `train`, `self` its path), the Adam step's
 * bytes/s, and the link (α, β) of a local world of `ranks` threads, on the cpu device; writes
 * them to out_path as JSON. Returns the exit code (0, or 1 with the reason on stderr). */
int zplan_calibrate(const char *self, const char *out_path, const char *spec, int ranks,
                    int threads);
/* Reads a file zplan_calibrate wrote: the rank as a row of the GPU table (peak_flops the FLOP/s
 * measured, hbm_bw the optimizer's bytes/s, mem_bytes the machine's memory) and its link.
 * Returns 0, or -1 with the reason (naming the file and the key) in err. */
int zplan_read_calibration(const char *path, zplan_gpu *gpu, zplan_link *link, char *err,
                           size_t len);

/* A transformers config.json (GPT-2, Llama, Mistral, Qwen2 families): fills params (counted as
 * those classes build their weights), layers, hidden, vocab, ffn, gated and, when seq is 0, seq
 * from the context length. A layers, hidden, vocab or ffn already above 0 in *in (the flags)
 * replaces the file's, and params is counted with it. Returns 0, or -1 with the reason in err. */
int zplan_from_hf_config(const char *path, zplan_in *in, char *err, size_t errlen);
/* A JSON file zinc plan reads (--hf-config, --calibration), parsed leniently as transformers and
 * Python write them, or NULL with why (n bytes) a sentence: "cannot read it (...)", "not JSON
 * (line L:C: ...)" or "not a JSON object (...)". A FIFO or device is refused without blocking
 * (base/files.h). */
json_object *zplan_read_json(const char *path, char *why, size_t n);

#endif
