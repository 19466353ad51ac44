/*
 * fast.h — launchers of the CUDA model's fast-mode kernels (fast.cu, ZM_CUDA_FAST in
 * gpt_cuda.h). Private to models/cuda/. Each queues its kernels on `s` and returns
 * cudaGetLastError() (or the error of a device query or attribute call before the launch). They
 * replace the exact mode's attention (no [B, H, T, T] arrays: the bf16 tensor-core tiles of
 * flash_tiles.h for heads of 64 and 128 channels on an sm_80+ device whose shared memory per
 * block holds their largest block (fast.cu's use_tiles); the fp32 rows of flash_rows.h otherwise) and its one-thread-per-column
 * reductions (the two passes of colsum.h); the other layers are layers.cu's in both modes.
 * fast.cu is compiled with nvcc's default --fmad=true.
 */
#ifndef ZINC_MODELS_CUDA_FAST_H
#define ZINC_MODELS_CUDA_FAST_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attention forward: y [BT, D] written, lse [B*H, T] (each query row's log-sum-exp of the scaled
 * scores, kept for backward; the same in both paths). qkv [BT, 3D]. D / H <= ZM_FLASH_MAX_HS
 * (the caller checks at creation). With the tiles, q, k, v are rounded to bf16 as they are read;
 * y and lse are fp32. */
cudaError_t zmf_att_fwd(float *y, float *lse, const float *qkv, int B, int T, int D, int H,
                        cudaStream_t s);
/* Attention backward: dqkv [BT, 3D] written (not added) from dy [BT, D], the forward's y and lse;
 * drow [B*H, T] is scratch. Deterministic (no atomics) in both paths; with the tiles, dy, P and
 * dS are rounded to bf16 before their products. */
cudaError_t zmf_att_bwd(float *dqkv, float *drow, const float *dy, const float *y,
                        const float *lse, const float *qkv, int B, int T, int D, int H,
                        cudaStream_t s);
/* db[c] += sum_r dy[r, c]. part: scratch of ZM_CS_MAX_CHUNKS * C floats. */
cudaError_t zmf_bias_grad(float *db, float *part, const float *dy, int R, int C, cudaStream_t s);
/* layernorm_bwd's dw, db (added into): sum_r dout (x - mean) rstd and sum_r dout. part: scratch
 * of 2 * ZM_CS_MAX_CHUNKS * C floats. The dx part is zmc_ln_bwd_dx (layers.h). */
cudaError_t zmf_ln_bwd_dwdb(float *dw, float *db, float *part, const float *dout, const float *x,
                            const float *mean, const float *rstd, int R, int C, cudaStream_t s);
/* zm_embed_backward: dwpe[t] += rows b*T + t of d (b ascending); dwte[id[u]] += the rows
 * rows[start[u] .. start[u+1]) of d, for the ntok tokens of the batch (zm_token_buckets, on the
 * device). */
cudaError_t zmf_embed_bwd(float *dwte, float *dwpe, const float *d, const int *rows,
                          const int *start, const int *id, int ntok, int B, int T, int D,
                          cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
