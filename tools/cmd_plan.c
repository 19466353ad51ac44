/*
 * cmd_plan.c — `zinc plan`: the predicted step time, tokens/s, MFU and memory per rank of a ZeRO
 * run before it is launched, and how it scales from 1 to 1024 GPUs (issue 41, first step). The
 * model is tools/plan_model.c; this file reads the flags (and a DeepSpeed config through the one
 * parser, config/) and prints. Formulas, GPU figures and their sources: docs/plan.md.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "models/gpt.h"
#include "tools/commands.h"
#include "tools/plan.h"

/* The model --calibrate times by default: big enough that its matrix work dominates a step. */
#define ZPLAN_CAL_MODEL "L4-D256-H4-T256"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zinc plan (--params P --seq S | --hf-config FILE) --gpus N\n"
            "                 (--gpu NAME | --calibration FILE)\n"
            "                 (--stage S | --config FILE | --recommend --global-batch G)\n"
            "                 [--layers L --hidden H [--vocab V] [--ffn I] [--gated]]\n"
            "                 [--micro-batch B] [--accum K]\n"
            "                 [--checkpointing] [--dtype fp16|bf16|fp32] [--offload-optimizer\n"
            "                 [--offload-param]] [--gpus-per-node G] [--intra-bw GB/s]\n"
            "                 [--inter-bw GB/s] [--intra-lat us] [--inter-lat us]\n"
            "                 [--pcie-bw GB/s] [--host-bw GB/s] [--host-mem GB]\n"
            "                 [--efficiency E] [--json]\n\n"
            "Predicts one optimizer step of data-parallel ZeRO training with Adam: compute from\n"
            "6P FLOPs per token (+ 12*L*H*S for attention when --layers and --hidden are given;\n"
            "x4/3 with --checkpointing) at E x the GPU's dense peak for the dtype (bf16/fp16\n"
            "tensor cores, fp32 units for fp32; default E = %.2f);\n"
            "the step's collective bytes as the engine counts them (zinc_comm_bytes) priced by a\n"
            "ring alpha-beta model, hierarchical across nodes; what zinc overlaps at each stage;\n"
            "Adam at memory bandwidth. Prints memory per rank (as zinc estimate, plus the\n"
            "activations when --layers and --hidden are known), the time split, tokens/s, MFU\n"
            "and a scaling table (1, 8, 16, 64, 256, 1024 GPUs, micro-batch and accumulation per\n"
            "GPU fixed). Formulas and sources: docs/plan.md.\n\n"
            "  --params P        parameters (7e9 is fine); without it, 12*L*H^2 + V*H\n"
            "  --hf-config FILE  a transformers config.json (gpt2, llama, mistral, qwen2): the\n"
            "                    parameters as transformers counts them, layers, hidden, vocab,\n"
            "                    MLP size, and --seq from its context length if not given\n"
            "  --ffn I, --gated  MLP intermediate size (default 4H) and a gated (SwiGLU) MLP,\n"
            "                    for the activation memory\n"
            "  --recommend --global-batch G  every stage, offload and micro-batch that keeps G\n"
            "                    sequences per step on --gpus: the fastest that fits, and why\n"
            "                    each other lost\n"
            "  --calibration FILE  price with this machine's figures (zinc plan --calibrate)\n"
            "                    instead of --gpu's row: efficiency 1 against its FLOP/s, its\n"
            "                    link (inside and, unless --inter-bw, between nodes), its\n"
            "                    optimizer rate for offload (all --gpus on one node by default)\n\n"
            "       zinc plan --calibrate [--out FILE] [--model SPEC] [--ranks N] [--threads T]\n"
            "measures here, on the cpu device: one rank's FLOP/s on the built-in model (SPEC,\n"
            "default %s, T threads, default 1), the Adam step's bytes/s and the link (alpha,\n"
            "beta) of N local ranks (default 2); writes FILE (default zinc-calibration.json)\n"
            "as a new file renamed over it (a symlink at FILE is replaced, not followed)\n"
            "  --gpu NAME        a100-40, a100-80 (a100), h100, h200 (SXM; datasheet figures)\n"
            "  --config FILE     DeepSpeed JSON: its stage, precision, gradient accumulation,\n"
            "                    micro-batch, offload and fp32 gradient sums\n"
            "                    (data_types.grad_accum_dtype; flags given as well win)\n"
            "  --gpus-per-node G default 8; --intra-bw default the GPU's NVLink per direction,\n"
            "                    --inter-bw default 50 (400 Gb/s InfiniBand NDR per GPU);\n"
            "                    --intra-lat 2, --inter-lat 5 (us per ring step, assumed);\n"
            "                    with --calibration its measured link for all four\n"
            "  --pcie-bw, --host-bw  offload: host link per direction (default the GPU's) and\n"
            "                    host memory bandwidth per node, shared by its ranks' host Adam\n"
            "                    (default 400; with --calibration the measured optimizer rate)\n"
            "  --host-mem GB     host memory per node: offload that needs more does not fit\n"
            "                    (default: not checked, only shown)\n",
            ZPLAN_EFFICIENCY, ZPLAN_CAL_MODEL);
}

/* Numeric flags: value range and whether it must be whole. Unset values stay -1. */
enum { P_PARAMS, P_LAYERS, P_HIDDEN, P_SEQ, P_VOCAB, P_MICRO, P_GPUS, P_PERNODE, P_STAGE,
       P_ACCUM, P_INTRA_BW, P_INTER_BW, P_INTRA_LAT, P_INTER_LAT, P_PCIE_BW, P_HOST_BW, P_EFF,
       P_FFN, P_GLOBAL, P_RANKS, P_THREADS, P_HOST_MEM, P_COUNT };
static const struct {
    const char *flag;
    double lo, hi;
    int whole;
} zplan_flags[P_COUNT] = {
    [P_PARAMS] = {"--params", 1, 1e15, 1},     [P_LAYERS] = {"--layers", 1, 1e5, 1},
    [P_HIDDEN] = {"--hidden", 1, 1e7, 1},      [P_SEQ] = {"--seq", 1, 1e8, 1},
    [P_VOCAB] = {"--vocab", 1, 1e9, 1},        [P_MICRO] = {"--micro-batch", 1, 1e6, 1},
    [P_GPUS] = {"--gpus", 1, 1e6, 1},          [P_PERNODE] = {"--gpus-per-node", 1, 1024, 1},
    [P_STAGE] = {"--stage", 0, 3, 1},          [P_ACCUM] = {"--accum", 1, 1e6, 1},
    [P_INTRA_BW] = {"--intra-bw", 1e-3, 1e6, 0}, [P_INTER_BW] = {"--inter-bw", 1e-3, 1e6, 0},
    [P_INTRA_LAT] = {"--intra-lat", 0, 1e6, 0}, [P_INTER_LAT] = {"--inter-lat", 0, 1e6, 0},
    [P_PCIE_BW] = {"--pcie-bw", 1e-3, 1e6, 0}, [P_HOST_BW] = {"--host-bw", 1e-3, 1e6, 0},
    [P_EFF] = {"--efficiency", 1e-3, 1, 0},    [P_FFN] = {"--ffn", 1, 1e8, 1},
    [P_GLOBAL] = {"--global-batch", 1, 1e9, 1},
    [P_RANKS] = {"--ranks", 2, 64, 1},        [P_THREADS] = {"--threads", 1, ZINC_MAX_THREADS, 1},
    [P_HOST_MEM] = {"--host-mem", 1e-3, 1e9, 0},
};

static const int zplan_scale[] = {1, 8, 16, 64, 256, 1024};
#define ZPLAN_NSCALE ((int)(sizeof zplan_scale / sizeof zplan_scale[0]))

/* Fills stage, dtype, accumulation, micro-batch and offload from a DeepSpeed config where the
 * flags left them unset. Returns 0, or the exit code after printing the config's errors. */
static int plan_config(const char *file, double *v, zinc_dtype *dtype, int dtype_set,
                       int *offload, int *offload_param, int *grad_fp32, int *reduce_fp32)
{
    zcfg_overrides ov = {.world_size = (int)v[P_GPUS], .lr = -1.0};
    if (v[P_MICRO] > 0) ov.micro_batch = (int64_t)v[P_MICRO];
    if (v[P_ACCUM] > 0) ov.grad_accum = (int64_t)v[P_ACCUM];
    zcfg c;
    zcfg_diag diag = {0};
    zinc_status s = zcfg_parse_file(file, &ov, &c, &diag);
    /* the warnings too, as zinc train and config check print them: a key without effect in
     * zinc is one the run would not honour either */
    for (int i = 0; i < diag.nwarnings; i++)
        fprintf(stderr, "zinc plan: config warning: %s\n", diag.warnings[i]);
    for (int i = 0; i < diag.nerrors; i++) fprintf(stderr, "error: %s\n", diag.errors[i]);
    int nerr = diag.nerrors;
    zcfg_diag_free(&diag);
    if (s != ZINC_OK) {
        if (nerr == 0) fprintf(stderr, "error: %s: %s\n", file, zinc_status_string(s));
        return zarg_usage_error("plan", "--config %s rejected (with --gpus %g as its world size)",
                                file, v[P_GPUS]);
    }
    /* The NVMe tier's host memory is its chunk buffers, not the state, and its step is the
     * disk's (docs/engine.md "NVMe"): a plan priced as cpu offload would say a run that fits
     * does not, and leave its I/O out. Refused rather than mis-predicted. */
    if (zcfg_offloads_nvme(&c))
        return zarg_usage_error("plan", "--config %s offloads to NVMe (zero_optimization."
                                "offload_optimizer.device \"nvme\"), which zinc plan does not "
                                "model: its disk I/O is not priced. `zinc estimate "
                                "--offload-optimizer --nvme` gives its memory; plan with "
                                "device \"cpu\" for the rest", file);
    if (v[P_STAGE] < 0) v[P_STAGE] = c.zero.stage;
    if (v[P_ACCUM] < 0) v[P_ACCUM] = (double)c.grad_accum;
    if (v[P_MICRO] < 0) v[P_MICRO] = (double)c.micro_batch;
    if (!dtype_set) *dtype = c.dtype;
    *offload |= zcfg_offloads_optimizer(&c);
    *offload_param |= zcfg_offloads_param(&c);
    *grad_fp32 = c.grad_accum_dtype != c.dtype;
    *reduce_fp32 = zcfg_reduces_fp32(&c);
    return 0;
}

static void print_json(const zplan_in *in, const zplan_out *o, const zplan_out *scale)
{
    printf("{\"params\": %.0f, \"layers\": %d, \"hidden\": %.0f, \"seq\": %.0f, "
           "\"micro_batch\": %lld, \"accumulation\": %d, \"checkpointing\": %s, "
           "\"gpus\": %d, \"gpus_per_node\": %d, \"stage\": %d, \"dtype\": \"%s\", "
           "\"offload_optimizer\": %s, \"offload_param\": %s,\n",
           in->params, in->layers, in->hidden, in->seq, in->micro_batch, in->accum,
           in->checkpointing ? "true" : "false", in->gpus, in->per_node, in->stage,
           zinc_dtype_name(in->dtype), in->offload ? "true" : "false",
           in->offload_param ? "true" : "false");
    printf(" \"gpu\": {\"name\": \"%s\", \"label\": \"%s\", \"peak_flops\": %.6g, "
           "\"memory_bytes\": %.6g, \"hbm_bytes_per_s\": %.6g, \"source\": ",
           in->gpu->name, in->gpu->label, zplan_peak_flops(in->gpu, in->dtype), in->gpu->mem_bytes,
           in->gpu->hbm_bw);
    zarg_json_string(stdout, in->gpu->source); /* a calibration file's path */
    printf("},\n");
    printf(" \"links\": {\"intra_bytes_per_s\": %.6g, \"intra_latency_s\": %.6g, "
           "\"inter_bytes_per_s\": %.6g, \"inter_latency_s\": %.6g, \"pcie_bytes_per_s\": %.6g, "
           "\"host_bytes_per_s\": %.6g}, \"compute_efficiency\": %.6g,\n",
           in->intra.bw, in->intra.alpha, in->inter.bw, in->inter.alpha, in->pcie_bw, in->host_bw,
           in->efficiency);
    printf(" \"memory\": {");
    zest_memory_json(&o->mem);
    printf("},\n \"activation_bytes_per_rank\": %.0f, \"host_bytes_per_node\": %.0f, "
           "\"host_memory_bytes_per_node\": %.0f, \"fits_host\": %s, \"fits\": %s,\n "
           "\"comm_bytes\": {", o->activations, o->host_per_node, in->host_mem,
           o->host_fits ? "true" : "false", o->fits ? "true" : "false");
    printf("\"all_reduce\": %llu, \"reduce_scatter\": %llu, "
           "\"all_gather\": %llu, \"broadcast\": %llu},\n",
           (unsigned long long)o->coll[ZINC_COLL_ALL_REDUCE],
           (unsigned long long)o->coll[ZINC_COLL_REDUCE_SCATTER],
           (unsigned long long)o->coll[ZINC_COLL_ALL_GATHER],
           (unsigned long long)o->coll[ZINC_COLL_BROADCAST]);
    printf(" \"time_s\": {\"forward\": %.6g, \"backward\": %.6g, \"reduce_scatter\": %.6g, "
           "\"all_gather\": %.6g, \"all_reduce\": %.6g, \"exposed_comm\": %.6g, "
           "\"optimizer\": %.6g, \"offload\": %.6g, \"step\": %.6g},\n",
           o->forward, o->backward, o->reduce_scatter, o->all_gather, o->all_reduce, o->exposed,
           o->optimizer, o->offload, o->step);
    printf(" \"flops_per_token\": %.6g, \"tokens_per_step\": %.0f, \"tokens_per_s\": %.6g, "
           "\"mfu\": %.6g,\n \"scaling\": [",
           o->flops_per_token, o->tokens, o->tokens_per_s, o->mfu);
    for (int i = 0; i < ZPLAN_NSCALE; i++)
        /* total_bytes_per_rank: zinc's buffers (zinc estimate's "with buffers"); the text's
         * "GB per rank" and "fits" add the activations, given here beside it */
        printf("%s\n  {\"gpus\": %d, \"step_s\": %.6g, \"tokens_per_s\": %.6g, "
               "\"efficiency\": %.6g, \"total_bytes_per_rank\": %llu, "
               "\"activation_bytes_per_rank\": %.0f, \"fits\": %s}",
               i ? "," : "", zplan_scale[i], scale[i].step, scale[i].tokens_per_s,
               scale[i].tokens_per_s / (zplan_scale[i] * scale[0].tokens_per_s),
               (unsigned long long)scale[i].mem.total, scale[i].activations,
               scale[i].fits ? "true" : "false");
    printf("]}\n");
}

static void print_text(const zplan_in *in, const zplan_out *o, const zplan_out *scale)
{
    printf("zinc plan: %.4g parameters", in->params);
    if (in->layers > 0) printf(", %d layers, hidden %.0f", in->layers, in->hidden);
    printf(", seq %.0f; micro-batch %lld x accumulation %d%s\n", in->seq, in->micro_batch,
           in->accum, in->checkpointing ? ", activation checkpointing" : "");
    printf("  ZeRO stage %d, %s%s%s; %d x %s (%d per node), efficiency %.2f\n", in->stage,
           zinc_dtype_name(in->dtype),
           in->reduce_fp32 ? " (fp32 gradient sums, reduced in fp32)"
           : in->grad_fp32 ? " (fp32 gradient sums)" : "",
           in->offload_param ? ", optimizer and parameters offloaded"
           : in->offload     ? ", optimizer offloaded" : "",
           in->gpus, in->gpu->label, in->per_node, in->efficiency);
    printf("memory per rank: model state %.3f GB, with buffers %.3f GB (zinc estimate)",
           (double)o->mem.state / 1e9, (double)o->mem.total / 1e9);
    if (o->activations > 0)
        printf(",\n  + activations %.3f GB = %.3f GB of %.0f GB%s", o->activations / 1e9,
               ((double)o->mem.total + o->activations) / 1e9, in->gpu->mem_bytes / 1e9,
               o->device_fits ? "" : "  DOES NOT FIT");
    else
        printf(" of %.0f GB%s (activations not counted: give --layers and --hidden)",
               in->gpu->mem_bytes / 1e9, o->device_fits ? "" : "  DOES NOT FIT");
    if (in->offload) {
        printf("; host %.3f GB", (double)o->mem.host_total / 1e9);
        if (in->host_mem > 0)
            printf(" per rank, %.3f GB per node of %.4g GB%s", o->host_per_node / 1e9,
                   in->host_mem / 1e9, o->host_fits ? "" : "  DOES NOT FIT");
    }
    printf("\n");
    printf("step, seconds:\n");
    printf("  %-22s %10.4f\n  %-22s %10.4f\n", "forward", o->forward, "backward", o->backward);
    printf("  %-22s %10.4f   %.3f GB per rank\n", "reduce-scatter", o->reduce_scatter,
           (double)o->coll[ZINC_COLL_REDUCE_SCATTER] / 1e9);
    printf("  %-22s %10.4f   %.3f GB per rank\n", "all-gather", o->all_gather,
           (double)o->coll[ZINC_COLL_ALL_GATHER] / 1e9);
    printf("  %-22s %10.4f   %.3f GB per rank\n", "all-reduce", o->all_reduce,
           (double)o->coll[ZINC_COLL_ALL_REDUCE] / 1e9);
    printf("  %-22s %10.4f\n  %-22s %10.4f\n", "comm not overlapped", o->exposed, "optimizer",
           o->optimizer);
    if (in->offload) printf("  %-22s %10.4f\n", "offload PCIe copies", o->offload);
    printf("  %-22s %10.4f\n", "step", o->step);
    printf("tokens/s %.4g (%.0f tokens per step), MFU %.1f%%\n", o->tokens_per_s, o->tokens,
           100.0 * o->mfu);
    printf("scaling (per-GPU batch fixed):\n  %6s %10s %12s %10s %14s %5s\n", "gpus", "step s",
           "tokens/s", "efficiency", "GB per rank", "fits");
    for (int i = 0; i < ZPLAN_NSCALE; i++)
        printf("  %6d %10.4f %12.4g %10.3f %14.3f %5s\n", zplan_scale[i], scale[i].step,
               scale[i].tokens_per_s,
               scale[i].tokens_per_s / (zplan_scale[i] * scale[0].tokens_per_s),
               ((double)scale[i].mem.total + scale[i].activations) / 1e9,
               scale[i].fits ? "yes" : "no");
}

static const char *mode_name(const zplan_choice *c)
{
    return c->offload_param ? "optimizer+params" : c->offload ? "optimizer" : "none";
}

static int same_mode(const zplan_choice *a, const zplan_choice *b)
{
    return a->stage == b->stage && a->offload == b->offload &&
           a->offload_param == b->offload_param && a->checkpointing == b->checkpointing;
}

static double total_gb(const zplan_out *o)
{
    return ((double)o->mem.total + o->activations) / 1e9;
}

/* --recommend: the best candidate of each (stage, offload) and why it lost to the chosen one. */
static int plan_recommend(const zplan_in *in, long long global_batch, int json)
{
    enum { MAX = 256, MODES = 16 };
    static zplan_choice all[MAX];
    int n = zplan_recommend(in, global_batch, all, MAX);
    if (n == 0)
        return zarg_usage_error("plan", "--global-batch %lld on %d GPUs: no micro-batch of 1..1024 "
                                "divides it with at most 1e6 accumulation steps", global_batch,
                                in->gpus);
    /* zplan_recommend sorts best first: the first of each mode is that mode's best. */
    zplan_choice rows[MODES];
    int nrows = 0;
    for (int i = 0; i < n && nrows < MODES; i++) {
        int seen = 0;
        for (int r = 0; r < nrows; r++) seen |= same_mode(&rows[r], &all[i]);
        if (!seen) rows[nrows++] = all[i];
    }
    const zplan_choice *best = nrows && rows[0].out.fits ? &rows[0] : NULL;
    char why[MODES][160];
    for (int r = 0; r < nrows; r++) {
        const zplan_choice *c = &rows[r];
        if (c == best)
            snprintf(why[r], sizeof why[r], "chosen: the fastest that fits");
        else if (!c->out.fits && c->out.device_fits) /* the host's memory, then */
            snprintf(why[r], sizeof why[r], "does not fit the host: %.1f GB per node > %.4g GB "
                     "(--host-mem)", c->out.host_per_node / 1e9, in->host_mem / 1e9);
        else if (!c->out.fits)
            snprintf(why[r], sizeof why[r], "does not fit: %.1f GB > %.0f GB even at micro-batch "
                     "%lld", total_gb(&c->out), in->gpu->mem_bytes / 1e9, c->micro_batch);
        else if (c->out.tokens_per_s < best->out.tokens_per_s)
            snprintf(why[r], sizeof why[r], "slower: %.1f%% of the chosen one's tokens/s",
                     100.0 * c->out.tokens_per_s / best->out.tokens_per_s);
        else
            snprintf(why[r], sizeof why[r], "as fast, but %.1f GB against %.1f GB",
                     total_gb(&c->out), total_gb(&best->out));
    }
    if (json) {
        printf("{\"global_batch\": %lld, \"gpus\": %d, \"gpu\": \"%s\", \"params\": %.0f, "
               "\"recommended\": %d,\n \"candidates\": [", global_batch, in->gpus,
               in->gpu->name, in->params, best ? 0 : -1);
        for (int r = 0; r < nrows; r++) {
            const zplan_choice *c = &rows[r];
            printf("%s\n  {\"stage\": %d, \"offload\": \"%s\", \"checkpointing\": %s, "
                   "\"micro_batch\": %lld, "
                   "\"accumulation\": %d, \"step_s\": %.6g, \"tokens_per_s\": %.6g, "
                   "\"mfu\": %.6g, \"bytes_per_rank\": %.0f, \"activation_bytes\": %.0f, "
                   "\"host_bytes_per_rank\": %llu, \"host_bytes_per_node\": %.0f, "
                   "\"fits\": %s, \"why\": \"%s\"}",
                   r ? "," : "", c->stage, mode_name(c), c->checkpointing ? "true" : "false",
                   c->micro_batch, c->accum, c->out.step, c->out.tokens_per_s, c->out.mfu,
                   (double)c->out.mem.total + c->out.activations, c->out.activations,
                   (unsigned long long)c->out.mem.host_total, c->out.host_per_node,
                   c->out.fits ? "true" : "false",
                   why[r]);
        }
        printf("]}\n");
        return best ? 0 : 1;
    }
    printf("zinc plan --recommend: %.4g parameters, seq %.0f, global batch %lld on %d x %s\n",
           in->params, in->seq, global_batch, in->gpus, in->gpu->label);
    if (in->layers <= 0)
        printf("  (activations not counted: give --layers and --hidden or --hf-config)\n");
    /* host GB/rank: what offload puts in host memory; checked against --host-mem per node when
     * given, shown either way so that an offload choice's cost is seen */
    printf("  %5s %-16s %5s %6s %6s %10s %12s %6s %10s %10s\n", "stage", "offload", "ckpt",
           "micro", "accum", "step s", "tokens/s", "MFU", "GB/rank", "host GB");
    for (int r = 0; r < nrows; r++) {
        const zplan_choice *c = &rows[r];
        printf("  %5d %-16s %5s %6lld %6d %10.4f %12.4g %5.1f%% %10.1f %10.1f  %s\n", c->stage,
               mode_name(c), c->checkpointing ? "yes" : "no", c->micro_batch, c->accum,
               c->out.step, c->out.tokens_per_s, 100.0 * c->out.mfu, total_gb(&c->out),
               (double)c->out.mem.host_total / 1e9, why[r]);
    }
    if (!best) {
        printf("nothing fits %.0f GB per GPU%s, even with activation checkpointing: more GPUs "
               "or a smaller global batch\n", in->gpu->mem_bytes / 1e9,
               in->host_mem > 0 ? " and the host's --host-mem" : "");
        return 1;
    }
    printf("recommended: ZeRO stage %d, offload %s, micro-batch %lld x accumulation %d%s "
           "(\"zero_optimization\": {\"stage\": %d}%s, \"train_micro_batch_size_per_gpu\": "
           "%lld, \"gradient_accumulation_steps\": %d)\n", best->stage, mode_name(best),
           best->micro_batch, best->accum,
           best->checkpointing ? ", activation checkpointing" : "", best->stage,
           best->offload_param ? " with offload_optimizer and offload_param {\"device\": \"cpu\"}"
           : best->offload   ? " with offload_optimizer {\"device\": \"cpu\"}" : "",
           best->micro_batch, best->accum);
    return 0;
}

/* The options with a value besides the model's numbers (zplan_flags), and the switches. */
static const char *const plan_named[] = {"--gpu", "--config", "--dtype", "--hf-config",
                                         "--calibration", "--out", "--model"};
#define NAMED_COUNT (sizeof plan_named / sizeof plan_named[0])
static const char *const plan_switches[] = {"--json", "--checkpointing", "--offload-optimizer",
                                            "--offload-param", "--gated", "--recommend",
                                            "--calibrate"};
#define SWITCH_COUNT (sizeof plan_switches / sizeof plan_switches[0])
#define PLAN_OPTIONS_MAX (P_COUNT + NAMED_COUNT + SWITCH_COUNT)

/* Every option of zinc plan into all[PLAN_OPTIONS_MAX] (for a did-you-mean); their count. */
static int plan_options(const char **all)
{
    int n = 0;
    for (int k = 0; k < P_COUNT; k++) all[n++] = zplan_flags[k].flag;
    for (size_t k = 0; k < NAMED_COUNT; k++) all[n++] = plan_named[k];
    for (size_t k = 0; k < SWITCH_COUNT; k++) all[n++] = plan_switches[k];
    return n;
}

int zplan_has_option(const char *arg)
{
    const char *all[PLAN_OPTIONS_MAX];
    int n = plan_options(all);
    for (int k = 0; k < n; k++)
        if (!strcmp(arg, all[k])) return 1;
    return 0;
}

/* --calibrate's --out, checked before the measurements (seconds to minutes) rather than after
 * them: zarg_output_file_ok, and not this binary (the measurements run it). Its only other
 * input, --calibration, does not go with --calibrate. Returns 0, or 2 after the usage error. */
static int calibration_out_ok(const char *out, const char *self)
{
    int rc = zarg_output_file_ok("plan", "--out", out);
    if (!rc && zarg_same_file(out, self))
        rc = zarg_usage_error("plan", "--out '%s' is the zinc binary itself; give a file name",
                              out);
    return rc;
}

int cmd_plan(int argc, char **argv)
{
    double v[P_COUNT];
    for (int p = 0; p < P_COUNT; p++) v[p] = -1.0;
    const char *gpu_name = NULL, *config = NULL, *hf = NULL, *cal_file = NULL, *out_file = NULL;
    const char *cal_model = NULL;
    zinc_dtype dtype = ZINC_DTYPE_BF16;
    int json = 0, ckpt = 0, offload = 0, offload_param = 0, dtype_set = 0, gated = 0;
    int grad_fp32 = 0;     /* --config's data_types.grad_accum_dtype "fp32" */
    int reduce_fp32 = 0;   /* and its communication_data_type "fp32" */
    int offload_flag = 1, offload_param_flag = 1; /* 0: a config set it, not the flag */
    int recommend = 0, calibrate = 0;
    if (zarg_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *on = !strcmp(a, "--json")                ? &json
                  : !strcmp(a, "--checkpointing")     ? &ckpt
                  : !strcmp(a, "--offload-optimizer") ? &offload
                  : !strcmp(a, "--offload-param")     ? &offload_param
                  : !strcmp(a, "--gated")             ? &gated
                  : !strcmp(a, "--recommend")         ? &recommend
                  : !strcmp(a, "--calibrate")         ? &calibrate
                                                      : NULL;
        if (on) { /* a switch: no value */
            *on = 1;
            continue;
        }
        int p = 0;
        while (p < P_COUNT && strcmp(a, zplan_flags[p].flag)) p++;
        int is_named = 0;
        for (size_t k = 0; k < NAMED_COUNT; k++) is_named |= !strcmp(a, plan_named[k]);
        if (p == P_COUNT && !is_named) {
            if (strncmp(a, "--", 2))
                return zarg_usage_error("plan", "unknown argument '%s'", a);
            const char *all[PLAN_OPTIONS_MAX];
            return zarg_unknown_option("plan", a, all, plan_options(all),
                                       ztrain_has_option(a) ? "train" : NULL);
        }
        if (zarg_value("plan", a, val)) return 2;
        i++;
        if (!strcmp(a, "--gpu")) {
            gpu_name = val;
        } else if (!strcmp(a, "--config")) {
            config = val;
        } else if (!strcmp(a, "--hf-config")) {
            hf = val;
        } else if (!strcmp(a, "--calibration")) {
            cal_file = val;
        } else if (!strcmp(a, "--out")) {
            out_file = val;
        } else if (!strcmp(a, "--model")) {
            cal_model = val;
        } else if (!strcmp(a, "--dtype")) {
            if (zarg_dtype(val, &dtype))
                return zarg_usage_error("plan", "--dtype must be fp16, bf16 or fp32, not '%s'",
                                        val);
            dtype_set = 1;
        } else {
            long long whole;
            int bad = zplan_flags[p].whole ? zarg_int64(val, &whole) : zarg_double(val, &v[p]);
            if (!bad && zplan_flags[p].whole) v[p] = (double)whole;
            if (bad || v[p] < zplan_flags[p].lo || v[p] > zplan_flags[p].hi)
                return zarg_usage_error("plan", "%s must be a %s in %g..%g, not '%s'", a,
                                        zplan_flags[p].whole ? "whole number" : "number",
                                        zplan_flags[p].lo, zplan_flags[p].hi, val);
        }
    }
    if (calibrate) {
        if (gpu_name || cal_file || hf || config || recommend || v[P_GPUS] >= 0 ||
            v[P_PARAMS] >= 0 || v[P_STAGE] >= 0)
            return zarg_usage_error("plan", "--calibrate takes only --out, --model, --ranks and "
                                    "--threads (it measures this machine; plan with "
                                    "--calibration FILE afterwards)");
        zm_spec sp;
        char perr[256];
        const char *spec = cal_model ? cal_model : ZPLAN_CAL_MODEL;
        if (zm_spec_parse(spec, &sp, perr, sizeof perr))
            return zarg_usage_error("plan", "--model '%s': %s", spec, perr);
        /* This binary's path for the child runs (a shell's /proc/self/exe is the shell). */
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) {
            fprintf(stderr, "zinc plan --calibrate: cannot find this binary's path\n");
            return 1;
        }
        self[len] = 0;
        const char *out = out_file ? out_file : "zinc-calibration.json";
        int rc = calibration_out_ok(out, self);
        if (rc) return rc;
        return zplan_calibrate(self, out, spec, v[P_RANKS] > 0 ? (int)v[P_RANKS] : 2,
                               v[P_THREADS] > 0 ? (int)v[P_THREADS] : 1);
    }
    if (out_file || cal_model || v[P_RANKS] >= 0 || v[P_THREADS] >= 0)
        return zarg_usage_error("plan", "--out, --model, --ranks and --threads go with --calibrate");
    if (v[P_GPUS] < 0) return zarg_usage_error("plan", "--gpus N is required");
    static zplan_gpu calibrated;
    zplan_link cal_link = {0, 0};
    const zplan_gpu *gpu = NULL;
    if (cal_file) {
        char err[512];
        if (gpu_name)
            return zarg_usage_error("plan", "--gpu and --calibration: give one (the calibration "
                                    "is the device)");
        if (zplan_read_calibration(cal_file, &calibrated, &cal_link, err, sizeof err))
            return zarg_usage_error("plan", "--calibration: %s", err);
        gpu = &calibrated;
        if (v[P_EFF] < 0) v[P_EFF] = 1.0;             /* its FLOP/s are achieved ones */
        if (v[P_PERNODE] < 0) v[P_PERNODE] = v[P_GPUS]; /* one machine */
    } else {
        if (!gpu_name)
            return zarg_usage_error("plan", "--gpu NAME is required (a100-40, a100-80, h100, "
                                    "h200), or --calibration FILE");
        gpu = zplan_gpu_find(gpu_name);
        if (!gpu)
            return zarg_usage_error("plan", "--gpu '%s' is not in the table (a100-40, a100-80, "
                                    "h100, h200)", gpu_name);
    }
    /* A transformers config.json gives the shape; flags given as well win. */
    /* The shape flags go in, so that the count is the model's with them (it stayed the file's). */
    zplan_in shape = {.seq = v[P_SEQ] > 0 ? v[P_SEQ] : 0,
                      .layers = v[P_LAYERS] > 0 ? (int)v[P_LAYERS] : 0,
                      .hidden = v[P_HIDDEN] > 0 ? v[P_HIDDEN] : 0,
                      .vocab = v[P_VOCAB] > 0 ? v[P_VOCAB] : 0, .ffn = v[P_FFN] > 0 ? v[P_FFN] : 0};
    if (hf) {
        char err[512];
        if (zplan_from_hf_config(hf, &shape, err, sizeof err))
            return zarg_usage_error("plan", "--hf-config: %s", err);
        if (v[P_SEQ] < 0) v[P_SEQ] = shape.seq > 0 ? shape.seq : -1;
        if (v[P_LAYERS] < 0) v[P_LAYERS] = shape.layers;
        if (v[P_HIDDEN] < 0) v[P_HIDDEN] = shape.hidden;
        if (v[P_PARAMS] < 0) v[P_PARAMS] = shape.params;
        if (v[P_VOCAB] < 0) v[P_VOCAB] = shape.vocab;
        if (v[P_FFN] < 0) v[P_FFN] = shape.ffn;
        gated |= shape.gated;
    }
    if (v[P_SEQ] < 0) return zarg_usage_error("plan", "--seq S is required");
    if ((v[P_LAYERS] < 0) != (v[P_HIDDEN] < 0))
        return zarg_usage_error("plan", "--layers and --hidden go together");
    /* they shape the activations and the count from the shape: without one, nothing (they were
     * accepted and ignored) */
    if (v[P_LAYERS] < 0 && (v[P_VOCAB] >= 0 || v[P_FFN] >= 0 || gated))
        return zarg_usage_error("plan", "--vocab, --ffn and --gated describe the layers: give "
                                "--layers and --hidden (or --hf-config) with them");
    if (v[P_PARAMS] < 0 && v[P_LAYERS] < 0)
        return zarg_usage_error("plan", "--params P is required (or --layers and --hidden, or "
                                "--hf-config)");
    double embed = (v[P_VOCAB] > 0 ? v[P_VOCAB] : 0.0) * v[P_HIDDEN];
    if (v[P_PARAMS] < 0) v[P_PARAMS] = 12.0 * v[P_LAYERS] * v[P_HIDDEN] * v[P_HIDDEN] + embed;
    /* --params given beside a shape must hold it: fewer parameters than every layer's query
     * and output projections (2·H² each, what any attention has, grouped-query included) and
     * the embedding (V·H) is another model (zplan_largest_group quietly held the largest group
     * to P). */
    if (v[P_LAYERS] > 0 && v[P_HIDDEN] > 0) {
        double least = 2.0 * v[P_LAYERS] * v[P_HIDDEN] * v[P_HIDDEN] + embed;
        if (v[P_PARAMS] < least)
            return zarg_usage_error("plan", "--params %.6g is fewer than the shape's query and "
                                    "output projections and embedding alone (%.6g: 2 x %.0f "
                                    "layers x hidden %.0f^2 + vocab x hidden): the flags "
                                    "describe different models", v[P_PARAMS], least,
                                    v[P_LAYERS], v[P_HIDDEN]);
    }
    /* Values from --hf-config or derived from the shape keep the flags' ranges too (the memory
     * plan counts parameters in 64-bit integers). */
    static const int shape_flags[] = {P_PARAMS, P_LAYERS, P_HIDDEN, P_SEQ, P_VOCAB, P_FFN};
    for (size_t k = 0; k < sizeof shape_flags / sizeof shape_flags[0]; k++) {
        int p = shape_flags[k];
        if (v[p] >= 0 && (v[p] < zplan_flags[p].lo || v[p] > zplan_flags[p].hi))
            return zarg_usage_error("plan", "%s %.6g (%s) is outside %g..%g", zplan_flags[p].flag,
                                    v[p], hf ? "from --hf-config or the shape" : "from the shape",
                                    zplan_flags[p].lo, zplan_flags[p].hi);
    }
    /* On a CPU the FLOP/s a calibration measured hold for its model's shape: calibrations of
     * L2-D64, L4-D128 and L4-D256 here measured 7.9e9, 5.6e9 and 1.2e10 FLOP/s (a plan of
     * L4-D128 priced with L4-D256's was 54 % fast). Said, not refused: it is still the best
     * figure there is. */
    if (gpu->cal_model) {
        zm_spec cs;
        char perr[128];
        int same = !zm_spec_parse(gpu->cal_model, &cs, perr, sizeof perr) &&
                   v[P_LAYERS] == cs.L && v[P_HIDDEN] == cs.D && v[P_SEQ] == cs.T;
        if (!same)
            fprintf(stderr, "zinc plan: note: %s measured its FLOP/s on the built-in model %s; on "
                    "a CPU they depend on the model's shape (1.6-2.2x apart between shapes "
                    "measured here): for this model, calibrate with --model of its shape%s\n",
                    cal_file, gpu->cal_model,
                    v[P_LAYERS] > 0 ? "" : " (give --layers and --hidden to compare them)");
        if (v[P_PERNODE] > 0 && v[P_PERNODE] < v[P_GPUS] && v[P_INTER_BW] < 0)
            fprintf(stderr, "zinc plan: note: the link between nodes is priced with %s's link, "
                    "measured between threads of one process (no figure for it): give "
                    "--inter-bw\n", cal_file);
    }
    if (recommend) {
        if (v[P_GLOBAL] < 0)
            return zarg_usage_error("plan", "--recommend needs --global-batch G (sequences per "
                                    "optimizer step, all GPUs)");
        if (v[P_STAGE] >= 0 || v[P_MICRO] >= 0 || v[P_ACCUM] >= 0 || offload || offload_param ||
            config)
            return zarg_usage_error("plan", "--recommend chooses the stage, offload, micro-batch "
                                    "and accumulation itself: drop --stage, --config, "
                                    "--micro-batch, --accum and --offload-*");
        if ((long long)v[P_GLOBAL] % (long long)v[P_GPUS])
            return zarg_usage_error("plan", "--global-batch %.0f is not a multiple of --gpus %.0f",
                                    v[P_GLOBAL], v[P_GPUS]);
        v[P_STAGE] = 0;      /* replaced for every candidate */
    } else if (v[P_GLOBAL] >= 0) {
        return zarg_usage_error("plan", "--global-batch goes with --recommend (otherwise "
                                "--micro-batch x --accum x --gpus is the batch)");
    }
    if (config) {
        offload_flag = offload, offload_param_flag = offload_param;
        int rc = plan_config(config, v, &dtype, dtype_set, &offload, &offload_param, &grad_fp32,
                             &reduce_fp32);
        if (rc) return rc;
    }
    if (v[P_STAGE] < 0) return zarg_usage_error("plan", "--stage S (0..3) or --config is required");
    /* the offloads may come from --config's zero_optimization rather than the flags */
    if (offload && v[P_STAGE] == 0)
        return zarg_usage_error("plan", "%s needs stage 1, 2 or 3",
                                offload_flag ? "--offload-optimizer"
                                : "--config's zero_optimization.offload_optimizer");
    if (offload_param && (v[P_STAGE] != 3 || !offload))
        return zarg_usage_error("plan", "%s needs stage 3 and --offload-optimizer (or the "
                                "config's zero_optimization.offload_optimizer)",
                                offload_param_flag ? "--offload-param"
                                : "--config's zero_optimization.offload_param");

    zplan_in in = {
        .params = v[P_PARAMS], .layers = v[P_LAYERS] > 0 ? (int)v[P_LAYERS] : 0,
        .hidden = v[P_HIDDEN] > 0 ? v[P_HIDDEN] : 0, .seq = v[P_SEQ],
        .vocab = v[P_VOCAB] > 0 ? v[P_VOCAB] : 0, .ffn = v[P_FFN] > 0 ? v[P_FFN] : 0,
        .gated = gated,
        .micro_batch = v[P_MICRO] > 0 ? (long long)v[P_MICRO] : 1, .checkpointing = ckpt,
        .act_bytes = dtype == ZINC_DTYPE_FP32 || cal_file ? 4 : 2,
        .gpus = (int)v[P_GPUS], .per_node = v[P_PERNODE] > 0 ? (int)v[P_PERNODE] : 8,
        .stage = (int)v[P_STAGE], .accum = v[P_ACCUM] > 0 ? (int)v[P_ACCUM] : 1,
        .dtype = dtype, .offload = offload, .offload_param = offload_param,
        /* where the engine honours it: flags may have changed what the config set */
        .grad_fp32 = grad_fp32 && zcfg_grad_fp32_allowed((int)v[P_STAGE], dtype),
        .reduce_fp32 = reduce_fp32 && grad_fp32 && zcfg_grad_fp32_allowed((int)v[P_STAGE], dtype),
        .gpu = gpu,
        .intra = {v[P_INTRA_BW] > 0 ? v[P_INTRA_BW] * 1e9 : gpu->nvlink_bw,
                  v[P_INTRA_LAT] >= 0 ? v[P_INTRA_LAT] * 1e-6
                  : cal_file          ? cal_link.alpha : ZPLAN_INTRA_ALPHA},
        .inter = {v[P_INTER_BW] > 0 ? v[P_INTER_BW] * 1e9
                  : cal_file          ? cal_link.bw : ZPLAN_IB_NDR_BW,
                  v[P_INTER_LAT] >= 0 ? v[P_INTER_LAT] * 1e-6
                  : cal_file          ? cal_link.alpha : ZPLAN_INTER_ALPHA},
        .pcie_bw = v[P_PCIE_BW] > 0 ? v[P_PCIE_BW] * 1e9 : gpu->pcie_bw,
        /* a calibrated rank's host is the device: its measured optimizer rate, and its one
         * measured link between nodes too (there is no other figure for them) */
        .host_bw = v[P_HOST_BW] > 0 ? v[P_HOST_BW] * 1e9 : cal_file ? gpu->hbm_bw : ZPLAN_HOST_BW,
        .efficiency = v[P_EFF] > 0 ? v[P_EFF] : ZPLAN_EFFICIENCY,
        .host_mem = v[P_HOST_MEM] > 0 ? v[P_HOST_MEM] * 1e9 : 0,
    };
    /* A step's bytes per rank are counted in 64 bits (zvol_plan, the engine's accounting): at
     * most 2·K·Ψ elements of 4 bytes (stage 3's gathers; K up to global batch / GPUs with
     * --recommend). Past that they wrapped (5e12 parameters with 1e6 accumulation steps showed
     * fewer bytes gathered than reduce-scattered). */
    double kmax = recommend ? v[P_GLOBAL] / in.gpus : in.accum;
    if (2.0 * kmax * (in.params + 1e6) * 4.0 > 1.8e19)
        return zarg_usage_error("plan", "--params %g with up to %g accumulation steps: a step "
                                "would move more than 2^64 bytes per rank, past what zinc plan "
                                "counts; give fewer parameters or steps", in.params, kmax);
    if (recommend) return plan_recommend(&in, (long long)v[P_GLOBAL], json);
    zplan_out o, scale[ZPLAN_NSCALE];
    zplan_step(&in, &o);
    for (int i = 0; i < ZPLAN_NSCALE; i++) {
        zplan_in s = in;
        s.gpus = zplan_scale[i];
        zplan_step(&s, &scale[i]);
    }
    if (json) print_json(&in, &o, scale);
    else print_text(&in, &o, scale);
    return 0;
}
