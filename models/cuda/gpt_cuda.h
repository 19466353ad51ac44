/*
 * gpt_cuda.h — the built-in model (models/gpt.h) on a CUDA GPU: the same layers, the same
 * parameter groups and tensor layout, the same micro-step protocol with a zinc engine, so
 * `zinc train` picks the CPU or the CUDA model by --device and nothing else changes.
 *
 * Kernels: two modes, chosen when a run or model is created (zm_cuda_kernels). EXACT is the
 * parity model described next; FAST swaps its attention for one that never stores the T x T
 * probabilities (online softmax, log-sum-exp kept for backward: for heads of 64 and 128 channels
 * where the device (sm_80+) holds the tiles in shared memory, FlashAttention-2 style tiles on bf16
 * tensor cores, flash_tiles.h, which round q, k, v, dy, P and dS to bf16 whatever the dtype, as
 * PyTorch's autocast attention does; for other heads fp32 rows, flash_rows.h) and its column
 * sums for two-pass parallel ones (colsum.h), compiled with nvcc's fused multiply-adds. The
 * matrix products and the other layers are the same in both. FAST has been compiled and its
 * arithmetic checked on the host (model_flash_rows, model_flash_tiles, model_colsum), but has
 * not run on a GPU as of its commits (tests/gpu/test_model_cuda.c is the check).
 *
 * Numerics (models/cuda/model.cu): activations are fp32. Matrix products are cuBLAS GemmEx with
 * fp32 accumulation (CUBLAS_COMPUTE_32F, no TF32) on inputs of the parameters' dtype: in
 * fp16/bf16 mode the weights are the engine's 16-bit views as they are and each activation is
 * rounded to that dtype just before it enters a product; in fp32 mode nothing is rounded. The
 * other layers are plain kernels written operation for operation after gpt.c (compiled with
 * --fmad=false, like the CPU's separately rounded x86 arithmetic). Gradients are summed per group
 * in an fp32 scratch and added into the engine's gradient views once (one rounding), as
 * gpt_zinc.c does.
 *
 * Streams: all work of a model bound to an engine is queued on the engine's CUDA compute stream,
 * so the engine's gathers, reduce-scatters and steps are ordered against it without host waits;
 * zm_cuda_model_micro_step waits once, at its end, for the loss.
 *
 * Timing (issue 42): zm_cuda_model_timing turns on a per-phase GPU timer (models/cuda/timing.h):
 * CUDA events recorded on the model's stream around each phase below, read after the
 * micro-step's own wait. Off (the default) no event is recorded.
 *
 * Builds without CUDA link models/cuda/absent.c: every call answers ZINC_ERR_UNSUPPORTED with a
 * message (zinc_last_error(NULL)), and zm_cuda_available says why.
 */
#ifndef ZINC_MODELS_CUDA_GPT_CUDA_H
#define ZINC_MODELS_CUDA_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "models/gpt.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zm_cuda_kernels {
    ZM_CUDA_EXACT = 0,   /* layers.cu, --fmad=false: gpt.c's operations in gpt.c's order */
    ZM_CUDA_FAST = 1     /* fast.cu attention (bf16 tensor cores for 64/128-channel heads) and
                          * reductions; heads of <= 128 channels */
} zm_cuda_kernels;

/* "exact" / "fast" (NULL for other values). */
static inline const char *zm_cuda_kernels_name(zm_cuda_kernels k)
{
    return k == ZM_CUDA_EXACT ? "exact" : k == ZM_CUDA_FAST ? "fast" : NULL;
}

/* The phases of a micro-step that the timer tells apart: X(ID, name). One table, forward's
 * phases before backward's (not strictly in the order they first run); names are what `zinc train --gpu-timing` prints and its metrics line's keys.
 * Matrix products are timed apart from their bias kernel (bias_res, which also adds the residual
 * after attn_proj and mlp_down) and from the rounding of their inputs to the parameters' dtype
 * (cast: fp16/bf16 only); "xent" is the softmax, loss and dlogits in one kernel plus the copy of
 * the loss rows to the host. "engine": zinc's gather/release/grads_ready calls inside the
 * micro-step and whatever they queue on this stream; "grads": zeroing the fp32 gradient scratch
 * and adding it into the engine's gradient views. */
#define ZM_CUDA_PHASES(X)                                                                     \
    X(UPLOAD, "upload")                                                                       \
    X(ENGINE, "engine")                                                                       \
    X(FWD_EMBED, "fwd_embed")                                                                 \
    X(FWD_LN, "fwd_layernorm")                                                                \
    X(FWD_CAST, "fwd_cast")                                                                   \
    X(FWD_QKV, "fwd_qkv_matmul")                                                              \
    X(FWD_ATT, "fwd_attention")                                                               \
    X(FWD_ATTPROJ, "fwd_attn_proj_matmul")                                                    \
    X(FWD_FC, "fwd_mlp_up_matmul")                                                            \
    X(FWD_GELU, "fwd_gelu")                                                                   \
    X(FWD_FCPROJ, "fwd_mlp_down_matmul")                                                      \
    X(FWD_BIAS, "fwd_bias_residual")                                                          \
    X(FWD_LOGITS, "fwd_classifier_matmul")                                                    \
    X(XENT, "xent")                                                                           \
    X(BWD_CAST, "bwd_cast")                                                                   \
    X(BWD_LOGITS, "bwd_classifier_matmul")                                                    \
    X(BWD_LN, "bwd_layernorm")                                                                \
    X(BWD_FCPROJ, "bwd_mlp_down_matmul")                                                      \
    X(BWD_BIAS, "bwd_bias_grad")                                                              \
    X(BWD_GELU, "bwd_gelu")                                                                   \
    X(BWD_FC, "bwd_mlp_up_matmul")                                                            \
    X(BWD_ATTPROJ, "bwd_attn_proj_matmul")                                                    \
    X(BWD_ATT, "bwd_attention")                                                               \
    X(BWD_QKV, "bwd_qkv_matmul")                                                              \
    X(BWD_EMBED, "bwd_embed")                                                                 \
    X(GRADS, "grads")

typedef enum zm_cuda_phase {
#define ZM_PH_ENUM_(id, name) ZM_PH_##id,
    ZM_CUDA_PHASES(ZM_PH_ENUM_)
#undef ZM_PH_ENUM_
    ZM_PH_COUNT
} zm_cuda_phase;

/* The phase's name (NULL out of range). */
static inline const char *zm_cuda_phase_name(int p)
{
#define ZM_PH_NAME_(id, name) name,
    static const char *const names[] = {ZM_CUDA_PHASES(ZM_PH_NAME_)};
#undef ZM_PH_NAME_
    return p >= 0 && p < ZM_PH_COUNT ? names[p] : NULL;
}

/* 1 when this build has the CUDA model and a CUDA device is visible; otherwise 0 with the
 * reason ("built without CUDA ...", "no CUDA device (...)") in why (n bytes). */
int zm_cuda_available(char *why, size_t n);

/* ---- bound to a zinc engine (same contract as zm_model_* in gpt.h) ------------------------- */

typedef struct zm_cuda_model zm_cuda_model;

/* e must have been created with .device = "cuda". Registers the groups and parameters (before
 * zinc_finalize) and allocates the activations for micro-batches of B sequences on e's GPU, for
 * the kernels of mode k; checkpoint != 0: activation checkpointing per block, as gpt.h's
 * zm_acts_create describes (the same results bit for bit, a second forward of each block but the
 * last in backward). ZINC_ERR_INVALID_ARG for ZM_CUDA_FAST with heads over 128 channels. */
zinc_status zm_cuda_model_create(zinc_engine_t *e, const zm_spec *s, int B, zm_cuda_kernels k,
                                 int checkpoint, zm_cuda_model **out);
void zm_cuda_model_destroy(zm_cuda_model *m);
zinc_status zm_cuda_model_init(zm_cuda_model *m, uint64_t seed);
zinc_status zm_cuda_model_micro_step(zm_cuda_model *m, const uint16_t *tokens,
                                     const uint16_t *targets, double *loss);
const int *zm_cuda_model_params(const zm_cuda_model *m, int *n);
/* Bytes of the model's own device buffers (activations, scratch) on this rank. */
size_t zm_cuda_model_bytes(const zm_cuda_model *m);

/* Per-phase GPU timing. zm_cuda_model_timing(m, 1) creates the timer's fixed pool of CUDA
 * events (outside any micro-step; call it between micro-steps) and zeroes the sums; from then on
 * each micro-step records an event pair per phase it runs on the model's stream and, after the
 * wait it already does at its end, adds their elapsed times to the sums. on = 0 frees the pool:
 * no event is recorded. Timing never changes results (the same kernels on the same stream).
 * zm_cuda_model_timing_read: ms[ZM_PH_COUNT] = milliseconds summed per phase since the timer was
 * turned on or last reset, n[ZM_PH_COUNT] (may be NULL) = how many intervals each sum holds
 * (0: the phase did not run), *micro_steps (may be NULL) = micro-steps summed.
 * ZINC_ERR_INVALID_ARG when the timer is off; a CUDA failure of the timer's events is returned
 * by the micro-step that met it. */
zinc_status zm_cuda_model_timing(zm_cuda_model *m, int on);
zinc_status zm_cuda_model_timing_read(const zm_cuda_model *m, double *ms, long long *n,
                                      long long *micro_steps);
/* Zeroes the sums (e.g. after a first, warm-up step); nothing when the timer is off. */
void zm_cuda_model_timing_reset(zm_cuda_model *m);

/* ---- on plain device buffers (the tests' entry; like zm_forward_backward) ------------------ */

typedef struct zm_cuda_run zm_cuda_run;

/* Activations and a cuBLAS handle for micro-batches of B sequences, parameters of dtype dt,
 * kernels of mode k, activation checkpointing if checkpoint != 0, on CUDA device `device`, with a
 * stream of its own. */
zinc_status zm_cuda_run_create(const zm_spec *s, int B, zinc_dtype dt, zm_cuda_kernels k,
                               int checkpoint, int device, zm_cuda_run **out);
void zm_cuda_run_destroy(zm_cuda_run *r);
/* params[g]: device memory holding group g's layout (zm_tensors) in dtype dt. grads[g]: device
 * fp32 group layouts into which gradients are ADDED, or grads == NULL for forward only.
 * tokens/targets: host [B*T]. Waits for the result; *loss = mean cross-entropy. */
zinc_status zm_cuda_forward_backward(zm_cuda_run *r, void *const *params, float *const *grads,
                                     const uint16_t *tokens, const uint16_t *targets, float dloss,
                                     double *loss);

#ifdef __cplusplus
}
#endif

#endif
