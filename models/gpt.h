/*
 * gpt.h — the built-in model of `zinc train`: a byte-level causal language model with GPT-style
 * blocks (token + position embeddings, pre-LayerNorm, causal multi-head self-attention, GELU MLP
 * of 4x width, residuals, final LayerNorm, LM head tied to the token embedding, mean
 * cross-entropy).
 *
 * Two layers:
 *   - the math (gpt.c) works on plain fp32 pointers, one parameter group at a time, and knows
 *     nothing of zinc; the gradient test drives it directly;
 *   - the glue (gpt_zinc.c) registers the groups with a zinc engine and runs one micro-step
 *     through include/zinc.h only: gather a group, convert its fp16/bf16/fp32 working copy to an
 *     fp32 scratch, compute, release; add the fp32 gradient of a group into the engine's gradient
 *     views in their dtype and hand the group over with zinc_grads_ready.
 *
 * Groups: group 0 "embed" = {wte, wpe, lnf.w, lnf.b}; group 1+l = block l. Within a group the
 * tensors lie back to back in the order of zm_tensors(), which is also the fp32 scratch layout.
 * Weight matrices are stored [out, in] (row o holds the weights of output o).
 *
 * Threading: every parallel loop splits independent output rows over threads and computes each
 * output with a fixed summation order, so results do not depend on the thread count.
 */
#ifndef ZINC_MODELS_GPT_H
#define ZINC_MODELS_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#define ZM_VOCAB 256                 /* bytes */
#define ZM_DEFAULT_SPEC "L2-D64-H4-T64"
#define ZM_MAX_TENSORS 12            /* per group */

typedef struct zm_spec {
    int L;   /* layers */
    int D;   /* width (channels) */
    int H;   /* attention heads; D % H == 0 */
    int T;   /* context length */
    int V;   /* vocabulary: always ZM_VOCAB */
} zm_spec;

/* Parses "L2-D64-H4-T64" (fields in any order, each once; all four required). Writes a sentence
 * into err (size n) and returns -1 when the spec is malformed or out of range. */
int zm_spec_parse(const char *s, zm_spec *out, char *err, size_t n);

/* One tensor of a group. */
typedef struct zm_tensor {
    char name[48];      /* "h0.attn.qkv.w" */
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int64_t offset;     /* elements from the start of the group's fp32 layout */
} zm_tensor;

int zm_group_count(const zm_spec *s);                        /* L + 1 */
/* Fills t[] (ZM_MAX_TENSORS at most) for group g; returns the number of tensors. */
int zm_tensors(const zm_spec *s, int g, zm_tensor *t);
int64_t zm_group_numel(const zm_spec *s, int g);
int64_t zm_param_total(const zm_spec *s);

/* fp32 views into one group's layout. */
typedef struct zm_embed {
    float *wte;      /* [V, D] token embedding, also the LM head */
    float *wpe;      /* [T, D] position embedding */
    float *lnf_w;    /* [D] */
    float *lnf_b;    /* [D] */
} zm_embed;

typedef struct zm_block {
    float *ln1_w, *ln1_b;     /* [D] */
    float *qkv_w;             /* [3D, D]: q, k, v stacked; head h uses columns h*D/H.. of each */
    float *qkv_b;             /* [3D] */
    float *attn_w;            /* [D, D] attention output projection */
    float *attn_b;            /* [D] */
    float *ln2_w, *ln2_b;     /* [D] */
    float *fc_w;              /* [4D, D] */
    float *fc_b;              /* [4D] */
    float *fcp_w;             /* [D, 4D] */
    float *fcp_b;             /* [D] */
} zm_block;

void zm_embed_views(const zm_spec *s, float *base, zm_embed *out);
void zm_block_views(const zm_spec *s, float *base, zm_block *out);

/* Initial values of group g into base (zm_group_numel floats), GPT-2 style: N(0, 0.02) weights,
 * residual projections N(0, 0.02/sqrt(2L)), zero biases, LayerNorm weight 1. Depends only on
 * (seed, g), so every rank and every world size computes the same values. */
void zm_init_group(const zm_spec *s, int g, uint64_t seed, float *base);

/* Activations of one micro-batch of B sequences (row r = b*T + t), kept from forward for
 * backward, plus the backward scratch. One allocation; see gpt.c for the views.
 * checkpoint != 0: activation checkpointing per block. Each layer keeps only its input (B*T*D
 * floats) and the layers share one set of their other activations; zm_block_backward recomputes
 * that set from the layer's input before its backward (the same operations on the same values,
 * so gradients and losses are bit for bit those without checkpointing), at the cost of a second
 * forward of every block but the last, without its output projection. */
typedef struct zm_acts zm_acts;

zinc_status zm_acts_create(const zm_spec *s, int B, int threads, int checkpoint, zm_acts **out);
void zm_acts_destroy(zm_acts *a);
size_t zm_acts_bytes(const zm_acts *a);
/* The bytes zm_acts_create(s, B, ., checkpoint) would allocate, before allocating them (a caller's
 * check against the machine's memory); SIZE_MAX when they do not fit a size_t. */
size_t zm_acts_bytes_for(const zm_spec *s, int B, int checkpoint);

/* Forward pieces. tokens/targets: [B*T] values < V. */
void zm_embed_forward(zm_acts *a, const zm_embed *w, const uint16_t *tokens);
void zm_block_forward(zm_acts *a, int layer, const zm_block *w);
/* Final LayerNorm, logits, softmax and the mean cross-entropy over the B*T targets, returned.
 * With g != NULL also the backward of all of it: dloss is d(objective)/d(mean loss) (the loss
 * multiplier); adds into g->wte, g->lnf_w, g->lnf_b and starts the residual gradient. */
double zm_head(zm_acts *a, const zm_embed *w, const uint16_t *targets, float dloss, zm_embed *g);
/* Backward pieces, in reverse order; add into the gradient views. */
void zm_block_backward(zm_acts *a, int layer, const zm_block *w, zm_block *g);
void zm_embed_backward(zm_acts *a, const uint16_t *tokens, zm_embed *g);

/* The causal attention of one layer as zm_block_forward / zm_block_backward run it (single
 * threaded), on plain buffers, for tests of other implementations (models/cuda/flash_rows.h).
 * qkv [B*T, 3D] (rows [q | k | v]); att [B, H, T, T] probabilities, written by forward, read by
 * backward; y [B*T, D] written; backward ADDS dq, dk, dv into dqkv [B*T, 3D] from dy [B*T, D]. */
void zm_attention_forward(const zm_spec *s, int B, const float *qkv, float *att, float *y);
void zm_attention_backward(const zm_spec *s, int B, const float *qkv, const float *att,
                           const float *dy, float *dqkv);

/* The whole model in fp32 on plain buffers: params[g] / grads[g] hold group g's layout.
 * grads may be NULL (forward only); otherwise gradients are ADDED. Returns the mean loss. */
double zm_forward_backward(zm_acts *a, float *const *params, float *const *grads,
                           const uint16_t *tokens, const uint16_t *targets, float dloss);

/* ---- glue to a zinc engine (gpt_zinc.c) ---------------------------------------------------- */

typedef struct zm_model zm_model;

/* Registers the model's groups ("embed", "h0", "h1", ...) and their tensors with an engine in
 * zm_tensors() order — what both the CPU and the CUDA model register. Fills gid[ngroups],
 * first[ngroups + 1] (a group's first entry in pid), pid[] (engine ids) and tensors[] (layouts),
 * and counts *nparams. */
zinc_status zm_register(zinc_engine_t *e, const zm_spec *s, zinc_dtype dt, int *gid, int *first,
                        int *pid, zm_tensor *tensors, int *nparams);

/* Registers groups and parameters with e (before zinc_finalize) in the engine's dtype and
 * allocates the fp32 scratch and activations for micro-batches of B sequences (checkpoint: as
 * zm_acts_create's). */
zinc_status zm_model_create(zinc_engine_t *e, const zm_spec *s, int B, int threads,
                            int checkpoint, zm_model **out);
void zm_model_destroy(zm_model *m);
/* After zinc_finalize: sets every parameter to its initial value (zm_init_group). */
zinc_status zm_model_init(zm_model *m, uint64_t seed);
/* One micro-step: forward and backward of B sequences with gather/release per group, loss
 * multiplier and zinc_grads_ready per group. Does not call zinc_step. Collective at stages 2-3.
 * *loss receives the (unscaled) mean loss of this rank's micro-batch. */
zinc_status zm_model_micro_step(zm_model *m, const uint16_t *tokens, const uint16_t *targets,
                                double *loss);
/* The engine's parameter ids, in registration order (group 0 first); count via *n. */
const int *zm_model_params(const zm_model *m, int *n);
const zm_spec *zm_model_spec(const zm_model *m);
/* Bytes of the model's own buffers (fp32 scratch + activations) on this rank. */
size_t zm_model_bytes(const zm_model *m);
/* The bytes zm_model_create(., s, B, ., checkpoint) would allocate (zm_model_bytes of the
 * model it makes); SIZE_MAX when they do not fit a size_t. */
size_t zm_model_bytes_for(const zm_spec *s, int B, int checkpoint);

#endif
