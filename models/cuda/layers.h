/*
 * layers.h — launchers of the CUDA model's non-matmul layers (layers.cu). Private to
 * models/cuda/. Each queues its kernel on `s` and returns cudaGetLastError(). `dt` is the
 * zinc_dtype of parameter tensors (w, b, wte, wpe); activations and gradients are fp32.
 * Every kernel is the gpt.c function named beside it, operation for operation; where a sum runs
 * over threads (row reductions) its order differs, where a thread owns an output (column sums,
 * attention outputs) it runs in gpt.c's order.
 */
#ifndef ZINC_MODELS_CUDA_LAYERS_H
#define ZINC_MODELS_CUDA_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* zm_embed_forward: x[r] = wte[tok[r]] + wpe[r % T]. */
cudaError_t zmc_embed_fwd(float *x, const void *wte, const void *wpe, int dt,
                          const uint16_t *tok, int BT, int T, int D, cudaStream_t s);
/* zm_embed_backward: dwte[tok[r]] += d[r], dwpe[r % T] += d[r], rows in order. */
cudaError_t zmc_embed_bwd(float *dwte, float *dwpe, const float *d, const uint16_t *tok, int BT,
                          int T, int D, cudaStream_t s);
/* layernorm_fwd / layernorm_bwd (dx, dw, db are added into). */
cudaError_t zmc_ln_fwd(float *out, float *mean, float *rstd, const float *x, const void *w,
                       const void *b, int dt, int R, int C, cudaStream_t s);
cudaError_t zmc_ln_bwd(float *dx, float *dw, float *db, const float *dout, const float *x,
                       const float *mean, const float *rstd, const void *w, int dt, int R, int C,
                       cudaStream_t s);
/* layernorm_bwd's dx part alone (dx added into); the fast mode sums dw, db itself (fast.h). */
cudaError_t zmc_ln_bwd_dx(float *dx, const float *dout, const float *x, const float *mean,
                          const float *rstd, const void *w, int dt, int R, int C, cudaStream_t s);
/* out[r, c] = (out[r, c] + b[c]) (+ res[r, c] when res != NULL): matmul_fwd's bias, then the
 * residual add of zm_block_forward. */
cudaError_t zmc_bias_res(float *out, const void *b, int dt, const float *res, int R, int C,
                         cudaStream_t s);
/* matmul_bwd's bias part: db[c] += sum_r dy[r, c]. */
cudaError_t zmc_bias_grad(float *db, const float *dy, int R, int C, cudaStream_t s);
/* gelu_fwd_range / gelu_bwd_range (d *= gelu'(x), in place). */
cudaError_t zmc_gelu_fwd(float *out, const float *x, size_t n, cudaStream_t s);
cudaError_t zmc_gelu_bwd(float *d, const float *x, size_t n, cudaStream_t s);
/* att_fwd_pairs: att [B, H, T, T] probabilities, y [BT, D]. */
cudaError_t zmc_att_fwd(float *att, float *y, const float *qkv, int B, int T, int D, int H,
                        cudaStream_t s);
/* att_bwd_pairs: dqkv [BT, 3D] is written (not added); ds [B, H, T, T] is scratch. */
cudaError_t zmc_att_bwd(float *dqkv, float *ds, const float *dy, const float *att,
                        const float *qkv, int B, int T, int D, int H, cudaStream_t s);
/* head_logits_rows + head_bwd_rows' first half: logits [R, V] in place -> softmax; losses[r];
 * with bwd, then (p - onehot(target)) * dscale. */
cudaError_t zmc_xent(float *logits, float *losses, const uint16_t *tgt, int R, int V, float dscale,
                     int bwd, cudaStream_t s);
/* dst[i] = round_dt(src[i]) (an activation entering a 16-bit matrix product). */
cudaError_t zmc_cast(void *dst, int dt, const float *src, size_t n, cudaStream_t s);
/* zm_add_into: dst[i] = round_dt(dst[i] + src[i]). */
cudaError_t zmc_add_into(void *dst, int dt, const float *src, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
