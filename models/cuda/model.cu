/*
 * model.cu — the built-in model on a CUDA GPU (gpt_cuda.h): activations, the matrix products
 * (cuBLAS), forward and backward of each piece in gpt.c's order, and the glue to a zinc engine
 * in gpt_zinc.c's order. Host code; the other layers are in layers.cu.
 *
 * Matrix products. Weights are [out, in] row-major (gpt.h), i.e. column-major [in, out], so for
 * row-major activations X [R, in], Y [R, out]:
 *   forward   Y^T = W^T-view' X^T        gemm(T, N, m=out, n=R, k=in,  A=W  lda=in,  B=X  ldb=in)
 *   d input   dX^T = W-view dY^T         gemm(N, N, m=in,  n=R, k=out, A=W  lda=in,  B=dY ldb=out)
 *   d weight  dW^T += X^T dY             gemm(N, T, m=in,  n=out, k=R, A=X  lda=in,  B=dY ldb=out)
 * A and B are in the parameters' dtype (activations rounded to it first by zmc_cast), C is fp32,
 * compute CUBLAS_COMPUTE_32F: fp32 accumulation and no TF32, whatever the math mode.
 *
 * Kernels (zm_cuda_kernels): ZM_CUDA_EXACT runs layers.cu throughout; ZM_CUDA_FAST replaces its
 * attention (att [B, H, T, T] per layer, ds scratch) by fast.cu's rows (lse [B*H, T] per layer,
 * drow scratch) and its one-thread-per-column sums (bias, LayerNorm dw/db, embeddings) by two-pass
 * reductions; the upload of a batch then also groups its rows by token for the wte gradient.
 * The helpers att_fwd ... embed_bwd below pick the mode's kernel; nothing else differs.
 *
 * Timing (gpt_cuda.h's phases, timing.h): each phase's work is wrapped in PH(phase, ...), a
 * begin/end pair of the run's timer; with the timer off (r->timer NULL) both are a test of a
 * pointer and no event is recorded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

extern "C" {
#include "base/log.h"
#include "kernels/cuda/zdev_cuda.h"
#include "models/gpt.h"
}
#include "kernels/cuda/zcuda.h"
#include "models/cuda/colsum.h"
#include "models/cuda/fast.h"
#include "models/cuda/flash_rows.h"
#include "models/cuda/gpt_cuda.h"
#include "models/cuda/layers.h"
#include "models/cuda/timing.h"

namespace {

struct layer_acts {
    float *x, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *xmid, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fcg;
    float *lse;                         /* fast: [B*H, T] attention log-sum-exp (att is NULL) */
};

/* Parameter views of one group in the parameters' dtype, gradients fp32, in zm_tensors order. */
struct views {
    const void *p[ZM_MAX_TENSORS];
    float *g[ZM_MAX_TENSORS];
};

}  // namespace

struct zm_cuda_run {
    zm_spec s;
    int B, BT, device, own_stream;
    zinc_dtype dt;
    zm_cuda_kernels kernels;
    /* activation checkpointing (gpt.h's zm_acts_create): the layers share one set of activations
     * but x, recomputed by block_backward unless it holds that layer's (inner_layer; -1 none) */
    int checkpoint, inner_layer;
    cudaStream_t stream;
    cublasHandle_t blas;
    layer_acts *layer;                  /* [L] */
    float *xfinal, *lnf, *lnf_mean, *lnf_rstd, *losses, *probs, *dres, *dtmp, *dqkv, *dfc, *ds;
    float *drow, *part;                 /* fast: [B*H, T]; [ZM_CS_MAX_CHUNKS * 4D] (ds NULL) */
    float *block;                       /* the one fp32 allocation */
    void *cast_a, *cast_b;              /* [BT * max(4D, V)] in dt; NULL in fp32 mode */
    uint16_t *tok, *tgt;                /* device [BT] each */
    float *host_losses;                 /* pinned [BT] */
    /* fast: the batch's rows by token (zm_token_buckets) as rows [BT], start [V + 1], id [V] */
    int *bk, *host_bk;                  /* device; pinned host */
    int *bk_count;                      /* host [V] scratch */
    int ntok;                           /* tokens present in the batch */
    zmt_timer *timer;                   /* per-phase timing; NULL: off */
    size_t bytes;
    char err[512];
};

#define CU(call) ZINC_CUDA_CHECK(r->err, call)
#define CK(call)                                                                              \
    do {                                                                                      \
        zinc_status s_ = (call);                                                              \
        if (s_ != ZINC_OK) return s_;                                                         \
    } while (0)

namespace {

void ph_begin(zm_cuda_run *r, zm_cuda_phase p)
{
    if (r->timer) zmt_begin(r->timer, (int)p, r->stream);
}

void ph_end(zm_cuda_run *r)
{
    if (r->timer) zmt_end(r->timer, r->stream);
}

}  // namespace

/* PH(PHASE, statements): the statements as one interval of phase ZM_PH_<PHASE> (needs r). An
 * early return leaves the interval open; the failed micro-step discards it (zmt_discard). */
#define PH(phase, ...)                                                                        \
    do {                                                                                      \
        ph_begin(r, ZM_PH_##phase);                                                           \
        __VA_ARGS__;                                                                          \
        ph_end(r);                                                                            \
    } while (0)

namespace {

/* The run's error as the thread's last error (what the callers show). */
zinc_status fail(zm_cuda_run *r, zinc_status s)
{
    return zerr_thread(s, "CUDA model: %s", r->err);
}

cudaDataType cuda_type(zinc_dtype dt)
{
    return dt == ZINC_DTYPE_FP32 ? CUDA_R_32F : dt == ZINC_DTYPE_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

zinc_status gemm(zm_cuda_run *r, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    const float alpha = 1.0f;
    cudaDataType t = cuda_type(r->dt);
    ZINC_CUBLAS_CHECK(r->err, cublasGemmEx(r->blas, ta, tb, m, n, k, &alpha, A, t, lda, B, t, ldb,
                                           &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
    return ZINC_OK;
}

/* An fp32 activation as a matrix-product input: itself in fp32 mode, else rounded into buf (timed
 * as phase ph: FWD_CAST or BWD_CAST). */
zinc_status as_dt(zm_cuda_run *r, zm_cuda_phase ph, const float *x, size_t n, void *buf,
                  const void **out)
{
    if (r->dt == ZINC_DTYPE_FP32) {
        *out = x;
        return ZINC_OK;
    }
    ph_begin(r, ph);
    CU(zmc_cast(buf, r->dt, x, n, r->stream));
    ph_end(r);
    *out = buf;
    return ZINC_OK;
}

/* out [R, OC] = in [R, IC] W^T (no bias), in already in dt. */
zinc_status mm_fwd(zm_cuda_run *r, float *out, const void *in, const void *w, int R, int IC, int OC)
{
    return gemm(r, CUBLAS_OP_T, CUBLAS_OP_N, OC, R, IC, w, IC, in, IC, 0.0f, out, OC);
}

/* din [R, IC] = dout W (overwritten), dw [OC, IC] += dout^T in; dout and in already in dt. */
zinc_status mm_bwd(zm_cuda_run *r, float *din, float *dw, const void *dout, const void *in,
                   const void *w, int R, int IC, int OC)
{
    if (din) CK(gemm(r, CUBLAS_OP_N, CUBLAS_OP_N, IC, R, OC, w, IC, dout, OC, 0.0f, din, IC));
    return gemm(r, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, R, in, IC, dout, OC, 1.0f, dw, IC);
}

/* ---- the kernels of the mode ------------------------------------------------------------------ */

bool fast(const zm_cuda_run *r) { return r->kernels == ZM_CUDA_FAST; }

cudaError_t att_fwd(zm_cuda_run *r, layer_acts *la)
{
    const zm_spec *s = &r->s;
    if (fast(r)) return zmf_att_fwd(la->atty, la->lse, la->qkv, r->B, s->T, s->D, s->H, r->stream);
    return zmc_att_fwd(la->att, la->atty, la->qkv, r->B, s->T, s->D, s->H, r->stream);
}

/* dqkv from d atty (in dtmp). */
cudaError_t att_bwd(zm_cuda_run *r, layer_acts *la)
{
    const zm_spec *s = &r->s;
    if (fast(r))
        return zmf_att_bwd(r->dqkv, r->drow, r->dtmp, la->atty, la->lse, la->qkv, r->B, s->T, s->D,
                           s->H, r->stream);
    return zmc_att_bwd(r->dqkv, r->ds, r->dtmp, la->att, la->qkv, r->B, s->T, s->D, s->H,
                       r->stream);
}

cudaError_t bias_grad(zm_cuda_run *r, float *db, const float *dy, int C)
{
    if (fast(r)) return zmf_bias_grad(db, r->part, dy, r->BT, C, r->stream);
    return zmc_bias_grad(db, dy, r->BT, C, r->stream);
}

/* layernorm_bwd over the BT rows of width D: dx, dw, db added into. */
cudaError_t ln_bwd(zm_cuda_run *r, float *dx, float *dw, float *db, const float *dout,
                   const float *x, const float *mean, const float *rstd, const void *w)
{
    int BT = r->BT, D = r->s.D;
    if (!fast(r)) return zmc_ln_bwd(dx, dw, db, dout, x, mean, rstd, w, r->dt, BT, D, r->stream);
    cudaError_t e = zmc_ln_bwd_dx(dx, dout, x, mean, rstd, w, r->dt, BT, D, r->stream);
    if (e == cudaSuccess) e = zmf_ln_bwd_dwdb(dw, db, r->part, dout, x, mean, rstd, BT, D, r->stream);
    return e;
}

cudaError_t embed_bwd(zm_cuda_run *r, float *dwte, float *dwpe)
{
    const zm_spec *s = &r->s;
    if (!fast(r)) return zmc_embed_bwd(dwte, dwpe, r->dres, r->tok, r->BT, s->T, s->D, r->stream);
    int *rows = r->bk, *start = rows + r->BT, *id = start + s->V + 1;
    return zmf_embed_bwd(dwte, dwpe, r->dres, rows, start, id, r->ntok, r->B, s->T, s->D,
                         r->stream);
}

/* ---- the pieces, as gpt.c's zm_embed_forward ... zm_embed_backward ------------------------- */

zinc_status embed_forward(zm_cuda_run *r, const views &w)
{
    float *x = r->s.L ? r->layer[0].x : r->xfinal;
    PH(FWD_EMBED, CU(zmc_embed_fwd(x, w.p[0], w.p[1], r->dt, r->tok, r->BT, r->s.T, r->s.D,
                                   r->stream)));
    return ZINC_OK;
}

/* Block l's forward from layer[l].x into xout; xout NULL stops before the output projection (the
 * recomputation of a checkpointed block for its backward). */
zinc_status block_fwd(zm_cuda_run *r, int l, const views &w, float *xout)
{
    layer_acts *la = &r->layer[l];
    int D = r->s.D, BT = r->BT, dt = r->dt;
    size_t nD = (size_t)BT * D;
    cudaStream_t st = r->stream;
    const void *a = NULL;
    r->inner_layer = l;
    const zm_cuda_phase cast = ZM_PH_FWD_CAST;
    PH(FWD_LN, CU(zmc_ln_fwd(la->ln1, la->ln1_mean, la->ln1_rstd, la->x, w.p[0], w.p[1], dt, BT,
                             D, st)));
    CK(as_dt(r, cast, la->ln1, nD, r->cast_a, &a));
    PH(FWD_QKV, CK(mm_fwd(r, la->qkv, a, w.p[2], BT, D, 3 * D)));
    PH(FWD_BIAS, CU(zmc_bias_res(la->qkv, w.p[3], dt, NULL, BT, 3 * D, st)));
    PH(FWD_ATT, CU(att_fwd(r, la)));
    CK(as_dt(r, cast, la->atty, nD, r->cast_a, &a));
    PH(FWD_ATTPROJ, CK(mm_fwd(r, la->xmid, a, w.p[4], BT, D, D)));
    PH(FWD_BIAS, CU(zmc_bias_res(la->xmid, w.p[5], dt, la->x, BT, D, st)));
    PH(FWD_LN, CU(zmc_ln_fwd(la->ln2, la->ln2_mean, la->ln2_rstd, la->xmid, w.p[6], w.p[7], dt,
                             BT, D, st)));
    CK(as_dt(r, cast, la->ln2, nD, r->cast_a, &a));
    PH(FWD_FC, CK(mm_fwd(r, la->fch, a, w.p[8], BT, D, 4 * D)));
    PH(FWD_BIAS, CU(zmc_bias_res(la->fch, w.p[9], dt, NULL, BT, 4 * D, st)));
    PH(FWD_GELU, CU(zmc_gelu_fwd(la->fcg, la->fch, nD * 4, st)));
    if (!xout) return ZINC_OK;
    CK(as_dt(r, cast, la->fcg, nD * 4, r->cast_a, &a));
    PH(FWD_FCPROJ, CK(mm_fwd(r, xout, a, w.p[10], BT, 4 * D, D)));
    PH(FWD_BIAS, CU(zmc_bias_res(xout, w.p[11], dt, la->xmid, BT, D, st)));
    return ZINC_OK;
}

zinc_status block_forward(zm_cuda_run *r, int l, const views &w)
{
    return block_fwd(r, l, w, l + 1 < r->s.L ? r->layer[l + 1].x : r->xfinal);
}

/* zm_head: final LayerNorm, logits, loss rows (downloaded to host_losses), and with g their
 * backward: g.g[0] (wte) += dlogits^T lnf, lnf's gradients, dres = d xfinal. */
zinc_status head(zm_cuda_run *r, const views &w, float dloss, const views *g)
{
    int D = r->s.D, V = r->s.V, BT = r->BT, dt = r->dt;
    cudaStream_t st = r->stream;
    const void *a = NULL, *dy = NULL;
    PH(FWD_LN, CU(zmc_ln_fwd(r->lnf, r->lnf_mean, r->lnf_rstd, r->xfinal, w.p[2], w.p[3], dt, BT,
                             D, st)));
    CK(as_dt(r, ZM_PH_FWD_CAST, r->lnf, (size_t)BT * D, r->cast_a, &a));
    PH(FWD_LOGITS, CK(mm_fwd(r, r->probs, a, w.p[0], BT, D, V)));
    PH(XENT, CU(zmc_xent(r->probs, r->losses, r->tgt, BT, V, dloss / (float)BT, g != NULL, st));
             CU(cudaMemcpyAsync(r->host_losses, r->losses, (size_t)BT * sizeof(float),
                                cudaMemcpyDeviceToHost, st)));
    if (!g) return ZINC_OK;
    CK(as_dt(r, ZM_PH_BWD_CAST, r->probs, (size_t)BT * V, r->cast_b, &dy));
    PH(BWD_LOGITS, CK(mm_bwd(r, r->dtmp, g->g[0], dy, a, w.p[0], BT, D, V)));
    PH(GRADS, CU(cudaMemsetAsync(r->dres, 0, (size_t)BT * D * sizeof(float), st)));
    PH(BWD_LN, CU(ln_bwd(r, r->dres, g->g[2], g->g[3], r->dtmp, r->xfinal, r->lnf_mean,
                         r->lnf_rstd, w.p[2])));
    return ZINC_OK;
}

zinc_status block_backward(zm_cuda_run *r, int l, const views &w, const views &g)
{
    layer_acts *la = &r->layer[l];
    int D = r->s.D, BT = r->BT;
    size_t nD = (size_t)BT * D;
    cudaStream_t st = r->stream;
    const void *x = NULL, *dy = NULL;
    const zm_cuda_phase cast = ZM_PH_BWD_CAST;
    /* Checkpointing: the forward's kernels again on the same input, the same values (the last
     * layer's are still there from the forward). Timed as forward phases. */
    if (r->checkpoint && r->inner_layer != l) CK(block_fwd(r, l, w, NULL));
    /* x_out = xmid + fcp(gelu(fc(ln2(xmid)))): dres is d x_out and stays as the residual part */
    CK(as_dt(r, cast, r->dres, nD, r->cast_b, &dy));
    CK(as_dt(r, cast, la->fcg, nD * 4, r->cast_a, &x));
    PH(BWD_FCPROJ, CK(mm_bwd(r, r->dfc, g.g[10], dy, x, w.p[10], BT, 4 * D, D)));
    PH(BWD_BIAS, CU(bias_grad(r, g.g[11], r->dres, D)));
    PH(BWD_GELU, CU(zmc_gelu_bwd(r->dfc, la->fch, nD * 4, st)));
    CK(as_dt(r, cast, r->dfc, nD * 4, r->cast_b, &dy));
    CK(as_dt(r, cast, la->ln2, nD, r->cast_a, &x));
    PH(BWD_FC, CK(mm_bwd(r, r->dtmp, g.g[8], dy, x, w.p[8], BT, D, 4 * D)));
    PH(BWD_BIAS, CU(bias_grad(r, g.g[9], r->dfc, 4 * D)));
    PH(BWD_LN, CU(ln_bwd(r, r->dres, g.g[6], g.g[7], r->dtmp, la->xmid, la->ln2_mean,
                         la->ln2_rstd, w.p[6])));
    /* xmid = x + proj(attention(qkv(ln1(x)))): dres is now d xmid */
    CK(as_dt(r, cast, r->dres, nD, r->cast_b, &dy));
    CK(as_dt(r, cast, la->atty, nD, r->cast_a, &x));
    PH(BWD_ATTPROJ, CK(mm_bwd(r, r->dtmp, g.g[4], dy, x, w.p[4], BT, D, D)));
    PH(BWD_BIAS, CU(bias_grad(r, g.g[5], r->dres, D)));
    PH(BWD_ATT, CU(att_bwd(r, la)));
    CK(as_dt(r, cast, r->dqkv, nD * 3, r->cast_b, &dy));
    CK(as_dt(r, cast, la->ln1, nD, r->cast_a, &x));
    PH(BWD_QKV, CK(mm_bwd(r, r->dtmp, g.g[2], dy, x, w.p[2], BT, D, 3 * D)));
    PH(BWD_BIAS, CU(bias_grad(r, g.g[3], r->dqkv, 3 * D)));
    PH(BWD_LN, CU(ln_bwd(r, r->dres, g.g[0], g.g[1], r->dtmp, la->x, la->ln1_mean, la->ln1_rstd,
                         w.p[0])));
    return ZINC_OK;
}

zinc_status embed_backward(zm_cuda_run *r, const views &g)
{
    PH(BWD_EMBED, CU(embed_bwd(r, g.g[0], g.g[1])));
    return ZINC_OK;
}

/* rows [BT], start [V + 1], id [V] */
size_t bucket_bytes(const zm_cuda_run *r) { return ((size_t)r->BT + 2 * r->s.V + 1) * sizeof(int); }

zinc_status upload_batch(zm_cuda_run *r, const uint16_t *tokens, const uint16_t *targets)
{
    size_t n = (size_t)r->BT * sizeof(uint16_t);
    CU(cudaMemcpyAsync(r->tok, tokens, n, cudaMemcpyHostToDevice, r->stream));
    CU(cudaMemcpyAsync(r->tgt, targets, n, cudaMemcpyHostToDevice, r->stream));
    if (!fast(r)) return ZINC_OK;
    /* The pinned buffer is free again: the previous call's copy finished before it returned (its
     * one wait, for the loss). */
    int V = r->s.V, *rows = r->host_bk, *start = rows + r->BT, *id = start + V + 1;
    r->ntok = zm_token_buckets(tokens, r->BT, V, r->bk_count, rows, start, id);
    CU(cudaMemcpyAsync(r->bk, r->host_bk, bucket_bytes(r), cudaMemcpyHostToDevice, r->stream));
    return ZINC_OK;
}

/* gpt.c's reduction of the loss rows: double, row order. Call after the stream finished. */
double mean_loss(const zm_cuda_run *r)
{
    double loss = 0.0;
    for (int i = 0; i < r->BT; i++) loss += r->host_losses[i];
    return loss / r->BT;
}

/* Views of a group laid out back to back (plain buffers): p in dt, g fp32. */
void group_views(const zm_cuda_run *r, int grp, void *p, float *g, views *v)
{
    zm_tensor t[ZM_MAX_TENSORS];
    int nt = zm_tensors(&r->s, grp, t);
    size_t es = zinc_dtype_size(r->dt);
    for (int i = 0; i < nt; i++) {
        v->p[i] = p ? (const char *)p + (size_t)t[i].offset * es : NULL;
        v->g[i] = g ? g + t[i].offset : NULL;
    }
}

zinc_status run_alloc(zm_cuda_run *r)
{
    const zm_spec *s = &r->s;
    size_t BT = (size_t)r->BT, D = (size_t)s->D, T = (size_t)s->T, bht = (size_t)r->B * s->H * T;
    size_t wmax = 4 * D > (size_t)s->V ? 4 * D : (size_t)s->V;
    /* exact: att per layer and ds [B, H, T, T]; fast: lse per layer and drow [B*H, T], and the
     * reductions' partial sums (4D: the widest bias; LayerNorm's pair needs 2D) */
    size_t att = fast(r) ? 0 : bht * T, lse = fast(r) ? bht : 0;
    size_t part = fast(r) ? (size_t)ZM_CS_MAX_CHUNKS * 4 * D : 0;
    /* every piece starts on a 256-byte boundary (cuBLAS's fast paths want 16) */
#define PAD(n) (((n) + 63) / 64 * 64)
    /* per layer: its input x, and the rest (one shared set when checkpointing): ln1, atty, xmid,
     * ln2; the four statistics; qkv; att or lse; fch, fcg */
    size_t inner = PAD(BT * D) * 4 + PAD(BT) * 4 + PAD(BT * 3 * D) + PAD(att) + PAD(lse) +
                   PAD(BT * 4 * D) * 2;
    size_t sets = s->L == 0 ? 0 : r->checkpoint ? 1 : (size_t)s->L;
    size_t total = PAD(BT * D) * (size_t)s->L + inner * sets + PAD(BT * D) * 4 + PAD(BT) * 3 +
                   PAD(BT * s->V) + PAD(BT * 3 * D) + PAD(BT * 4 * D) + PAD(att) + PAD(lse) +
                   PAD(part);
    r->layer = (layer_acts *)calloc((size_t)s->L + 1, sizeof *r->layer);
    if (!r->layer) return zerr_thread(ZINC_ERR_NOMEM, "CUDA model: out of host memory");
    CU(cudaMalloc((void **)&r->block, total * sizeof(float)));
    CU(cudaMemset(r->block, 0, total * sizeof(float)));
    r->bytes = total * sizeof(float);
    float *p = r->block;
    /* a piece of 0 floats is NULL, so a mode's unused array cannot be used by mistake */
#define TAKE(n) ((n) ? (p += PAD(n), p - PAD(n)) : NULL)
    for (int l = 0; l < s->L; l++) {
        layer_acts *la = &r->layer[l];
        if (l > 0 && r->checkpoint) {
            *la = r->layer[0];
            la->x = TAKE(BT * D);
            continue;
        }
        la->x = TAKE(BT * D);
        la->ln1 = TAKE(BT * D);
        la->ln1_mean = TAKE(BT);
        la->ln1_rstd = TAKE(BT);
        la->qkv = TAKE(BT * 3 * D);
        la->att = TAKE(att);
        la->lse = TAKE(lse);
        la->atty = TAKE(BT * D);
        la->xmid = TAKE(BT * D);
        la->ln2 = TAKE(BT * D);
        la->ln2_mean = TAKE(BT);
        la->ln2_rstd = TAKE(BT);
        la->fch = TAKE(BT * 4 * D);
        la->fcg = TAKE(BT * 4 * D);
    }
    r->xfinal = TAKE(BT * D);
    r->lnf = TAKE(BT * D);
    r->lnf_mean = TAKE(BT);
    r->lnf_rstd = TAKE(BT);
    r->losses = TAKE(BT);
    r->probs = TAKE(BT * s->V);
    r->dres = TAKE(BT * D);
    r->dtmp = TAKE(BT * D);
    r->dqkv = TAKE(BT * 3 * D);
    r->dfc = TAKE(BT * 4 * D);
    r->ds = TAKE(att);
    r->drow = TAKE(lse);
    r->part = TAKE(part);
#undef TAKE
#undef PAD
    if (p != r->block + total) /* the sum above and the pieces taken disagree */
        return zerr_thread(ZINC_ERR_INTERNAL, "CUDA model: activations laid out %td floats, "
                           "sized %zu", p - r->block, total);
    if (r->dt != ZINC_DTYPE_FP32) {
        size_t cb = BT * wmax * zinc_dtype_size(r->dt);
        CU(cudaMalloc(&r->cast_a, cb));
        CU(cudaMalloc(&r->cast_b, cb));
        r->bytes += 2 * cb;
    }
    CU(cudaMalloc((void **)&r->tok, BT * sizeof(uint16_t)));
    CU(cudaMalloc((void **)&r->tgt, BT * sizeof(uint16_t)));
    CU(cudaMallocHost((void **)&r->host_losses, BT * sizeof(float)));
    r->bytes += 2 * BT * sizeof(uint16_t);
    if (fast(r)) {
        r->bk_count = (int *)malloc((size_t)s->V * sizeof(int));
        if (!r->bk_count) return zerr_thread(ZINC_ERR_NOMEM, "CUDA model: out of host memory");
        CU(cudaMalloc((void **)&r->bk, bucket_bytes(r)));
        CU(cudaMallocHost((void **)&r->host_bk, bucket_bytes(r)));
        r->bytes += bucket_bytes(r);
    }
    return ZINC_OK;
}

/* A run on `device` with `stream` (NULL: a stream of its own). */
zinc_status run_create(const zm_spec *s, int B, zinc_dtype dt, zm_cuda_kernels kernels,
                       int checkpoint, int device, cudaStream_t stream, zm_cuda_run **out)
{
    *out = NULL;
    if (B < 1 || (int64_t)B * s->H > 65535 || (int64_t)B * s->T > (1 << 24))
        return zerr_thread(ZINC_ERR_INVALID_ARG, "CUDA model: micro-batch %d x heads %d or x "
                           "context %d is out of range (B*H <= 65535, B*T <= 2^24)", B, s->H, s->T);
    if (kernels != ZM_CUDA_EXACT && kernels != ZM_CUDA_FAST)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "CUDA model: unknown kernel mode %d", (int)kernels);
    if (kernels == ZM_CUDA_FAST && s->D / s->H > ZM_FLASH_MAX_HS)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "CUDA model: the fast kernels take heads of at "
                           "most %d channels, this model's are %d (D %d / H %d); use more heads "
                           "or the exact kernels", ZM_FLASH_MAX_HS, s->D / s->H, s->D, s->H);
    zm_cuda_run *r = (zm_cuda_run *)calloc(1, sizeof *r);
    if (!r) return zerr_thread(ZINC_ERR_NOMEM, "CUDA model: out of host memory");
    r->s = *s;
    r->B = B;
    r->BT = B * s->T;
    r->dt = dt;
    r->kernels = kernels;
    r->checkpoint = checkpoint != 0;
    r->inner_layer = -1;
    r->device = device;
    zinc_status st = ZINC_OK;
    cudaError_t ce = cudaSetDevice(device);
    if (ce == cudaSuccess && !stream) {
        ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        r->own_stream = ce == cudaSuccess;
    }
    if (ce != cudaSuccess) {
        st = zcu_fail_cuda(r->err, sizeof r->err, (int)ce, "cudaSetDevice/cudaStreamCreate",
                           __FILE__, __LINE__);
        goto fail;
    }
    r->stream = stream;
    {
        int be = (int)cublasCreate(&r->blas);
        if (be == 0) be = (int)cublasSetStream(r->blas, stream);
        /* No TF32 or other reduced-precision shortcut: the fp32 path is compared with the CPU. */
        if (be == 0) be = (int)cublasSetMathMode(r->blas, CUBLAS_DEFAULT_MATH);
        if (be != 0) {
            st = zcu_fail_cublas(r->err, sizeof r->err, be, "cublasCreate/SetStream", __FILE__,
                                 __LINE__);
            goto fail;
        }
    }
    st = run_alloc(r);
    if (st != ZINC_OK) goto fail;
    *out = r;
    return ZINC_OK;
fail:
    if (r->err[0]) zerr_thread(st, "CUDA model: %s", r->err);
    zm_cuda_run_destroy(r);
    return st;
}

}  // namespace

/* ---- plain buffers ----------------------------------------------------------------------------- */

extern "C" zinc_status zm_cuda_run_create(const zm_spec *s, int B, zinc_dtype dt,
                                          zm_cuda_kernels kernels, int checkpoint, int device,
                                          zm_cuda_run **out)
{
    return run_create(s, B, dt, kernels, checkpoint, device, NULL, out);
}

extern "C" void zm_cuda_run_destroy(zm_cuda_run *r)
{
    if (!r) return;
    cudaSetDevice(r->device);
    if (r->stream) cudaStreamSynchronize(r->stream);
    if (r->blas) cublasDestroy(r->blas);
    cudaFree(r->block);
    cudaFree(r->cast_a);
    cudaFree(r->cast_b);
    cudaFree(r->tok);
    cudaFree(r->tgt);
    cudaFreeHost(r->host_losses);
    cudaFree(r->bk);
    cudaFreeHost(r->host_bk);
    free(r->bk_count);
    zmt_destroy(r->timer);
    if (r->own_stream) cudaStreamDestroy(r->stream);
    free(r->layer);
    free(r);
}

namespace {

zinc_status run_fb(zm_cuda_run *r, void *const *params, float *const *grads,
                   const uint16_t *tokens, const uint16_t *targets, float dloss, double *loss)
{
    views ew, eg, bw, bg;
    CU(cudaSetDevice(r->device));
    CK(upload_batch(r, tokens, targets));
    group_views(r, 0, params[0], grads ? grads[0] : NULL, &ew);
    CK(embed_forward(r, ew));
    for (int l = 0; l < r->s.L; l++) {
        group_views(r, l + 1, params[l + 1], NULL, &bw);
        CK(block_forward(r, l, bw));
    }
    eg = ew;
    CK(head(r, ew, dloss, grads ? &eg : NULL));
    for (int l = r->s.L - 1; grads && l >= 0; l--) {
        group_views(r, l + 1, params[l + 1], grads[l + 1], &bg);
        CK(block_backward(r, l, bg, bg));
    }
    if (grads) CK(embed_backward(r, eg));
    CU(cudaStreamSynchronize(r->stream));
    *loss = mean_loss(r);
    return ZINC_OK;
}

}  // namespace

extern "C" zinc_status zm_cuda_forward_backward(zm_cuda_run *r, void *const *params,
                                                float *const *grads, const uint16_t *tokens,
                                                const uint16_t *targets, float dloss, double *loss)
{
    zinc_status s = run_fb(r, params, grads, tokens, targets, dloss, loss);
    return s == ZINC_OK ? s : fail(r, s);
}

/* ---- bound to an engine (gpt_zinc.c's protocol) ------------------------------------------------ */

struct zm_cuda_model {
    zinc_engine_t *e;
    zm_spec s;
    zinc_dtype dt;
    int ngroups, nparams;
    int *gid, *pid, *first;            /* as in gpt_zinc.c */
    zm_tensor *tensors;
    float *g0, *gb;                    /* device fp32 gradients: embed group, the block in hand */
    zm_cuda_run *run;
    size_t bytes;
};

extern "C" zinc_status zm_cuda_model_create(zinc_engine_t *e, const zm_spec *s, int B,
                                            zm_cuda_kernels kernels, int checkpoint,
                                            zm_cuda_model **out)
{
    *out = NULL;
    cudaStream_t stream = (cudaStream_t)zinc_engine_cuda_stream(e);
    int device = zinc_engine_cuda_device(e);
    if (!stream || device < 0)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "CUDA model: the engine's device is not a GPU; "
                           "create the engine with .device = \"cuda\" (or use the CPU model)");
    zm_cuda_model *m = (zm_cuda_model *)calloc(1, sizeof *m);
    if (!m) return zerr_thread(ZINC_ERR_NOMEM, "CUDA model: out of host memory");
    m->e = e;
    m->s = *s;
    m->dt = zinc_engine_dtype(e);
    m->ngroups = zm_group_count(s);
    size_t cap = (size_t)m->ngroups * ZM_MAX_TENSORS;
    m->gid = (int *)calloc((size_t)m->ngroups, sizeof(int));
    m->first = (int *)calloc((size_t)m->ngroups + 1, sizeof(int));
    m->pid = (int *)calloc(cap, sizeof(int));
    m->tensors = (zm_tensor *)calloc(cap, sizeof(zm_tensor));
    zinc_status st = ZINC_ERR_NOMEM;
    if (!m->gid || !m->first || !m->pid || !m->tensors) {
        zerr_thread(st, "CUDA model: out of host memory");
        goto fail;
    }
    st = run_create(s, B, m->dt, kernels, checkpoint, device, stream, &m->run);
    if (st != ZINC_OK) goto fail;
    {
        size_t n0 = (size_t)zm_group_numel(s, 0) * sizeof(float);
        size_t nb = (size_t)zm_group_numel(s, 1) * sizeof(float);
        cudaError_t ce = cudaMalloc((void **)&m->g0, n0);
        if (ce == cudaSuccess) ce = cudaMalloc((void **)&m->gb, nb);
        if (ce != cudaSuccess) {
            st = zcu_fail_cuda(m->run->err, sizeof m->run->err, (int)ce, "cudaMalloc", __FILE__,
                               __LINE__);
            zerr_thread(st, "CUDA model: %s", m->run->err);
            goto fail;
        }
        m->bytes = m->run->bytes + n0 + nb;
    }
    st = zm_register(e, s, m->dt, m->gid, m->first, m->pid, m->tensors, &m->nparams);
    if (st != ZINC_OK) goto fail;
    *out = m;
    return ZINC_OK;
fail:
    zm_cuda_model_destroy(m);
    return st;
}

extern "C" void zm_cuda_model_destroy(zm_cuda_model *m)
{
    if (!m) return;
    zm_cuda_run_destroy(m->run);
    cudaFree(m->g0);
    cudaFree(m->gb);
    free(m->gid);
    free(m->first);
    free(m->pid);
    free(m->tensors);
    free(m);
}

extern "C" zinc_status zm_cuda_model_init(zm_cuda_model *m, uint64_t seed)
{
    size_t n0 = (size_t)zm_group_numel(&m->s, 0), nb = (size_t)zm_group_numel(&m->s, 1);
    float *buf = (float *)malloc((n0 > nb ? n0 : nb) * sizeof(float));
    if (!buf) return zerr_thread(ZINC_ERR_NOMEM, "CUDA model: out of host memory");
    zinc_status st = ZINC_OK;
    for (int g = 0; g < m->ngroups && st == ZINC_OK; g++) {
        zm_init_group(&m->s, g, seed, buf);
        for (int i = m->first[g]; i < m->first[g + 1] && st == ZINC_OK; i++)
            st = zinc_param_set(m->e, m->pid[i], buf + m->tensors[i].offset);
    }
    free(buf);
    return st;
}

namespace {

/* The gathered group's parameter views, and grad scratch views into g (may be NULL). */
zinc_status engine_views(zm_cuda_model *m, int grp, float *g, views *v)
{
    for (int i = m->first[grp]; i < m->first[grp + 1]; i++) {
        void *p;
        CK(zinc_param_data(m->e, m->pid[i], &p));
        v->p[i - m->first[grp]] = p;
        v->g[i - m->first[grp]] = g ? g + m->tensors[i].offset : NULL;
    }
    return ZINC_OK;
}

/* fp32 gradient scratch of group grp -> added into the engine's gradient views (queued on the
 * engine's stream, so zinc_grads_ready's reduction comes after it). */
zinc_status add_grads(zm_cuda_model *m, int grp, const float *src)
{
    zm_cuda_run *r = m->run;
    for (int i = m->first[grp]; i < m->first[grp + 1]; i++) {
        void *v;
        CK(zinc_param_grad(m->e, m->pid[i], &v));
        CU(zmc_add_into(v, m->dt, src + m->tensors[i].offset, (size_t)m->tensors[i].numel,
                        r->stream));
    }
    return ZINC_OK;
}

zinc_status micro_step(zm_cuda_model *m, const uint16_t *tokens, const uint16_t *targets,
                       double *loss)
{
    zinc_engine_t *e = m->e;
    zm_cuda_run *r = m->run;
    const zm_spec *s = &m->s;
    views ew, bw;
    size_t n0 = (size_t)zm_group_numel(s, 0), nb = (size_t)zm_group_numel(s, 1);
    CU(cudaSetDevice(r->device));
    PH(UPLOAD, CK(upload_batch(r, tokens, targets)));

    /* Forward. Everything is queued on the engine's stream: a release only hands the gather
     * buffer back for later collectives, which that stream orders after these kernels. */
    PH(ENGINE, CK(zinc_gather(e, m->gid[0])); CK(engine_views(m, 0, NULL, &ew)));
    CK(embed_forward(r, ew));
    PH(ENGINE, CK(zinc_release(e, m->gid[0])));
    for (int l = 0; l < s->L; l++) {
        PH(ENGINE, CK(zinc_gather(e, m->gid[l + 1])); CK(engine_views(m, l + 1, NULL, &bw)));
        CK(block_forward(r, l, bw));
        PH(ENGINE, CK(zinc_release(e, m->gid[l + 1])));
    }

    /* The objective is loss * multiplier, as in gpt_zinc.c. */
    float mult = zinc_loss_multiplier(e);
    PH(ENGINE, CK(zinc_gather(e, m->gid[0])); CK(engine_views(m, 0, m->g0, &ew)));
    PH(GRADS, CU(cudaMemsetAsync(m->g0, 0, n0 * sizeof(float), r->stream)));
    CK(head(r, ew, mult, &ew));
    PH(ENGINE, CK(zinc_release(e, m->gid[0])));

    for (int l = s->L - 1; l >= 0; l--) {
        int g = l + 1;
        PH(ENGINE, CK(zinc_gather(e, m->gid[g])); CK(engine_views(m, g, m->gb, &bw)));
        PH(GRADS, CU(cudaMemsetAsync(m->gb, 0, nb * sizeof(float), r->stream)));
        CK(block_backward(r, l, bw, bw));
        PH(GRADS, CK(add_grads(m, g, m->gb)));
        PH(ENGINE, CK(zinc_release(e, m->gid[g])); CK(zinc_grads_ready(e, m->gid[g])));
    }
    views eg;
    group_views(r, 0, NULL, m->g0, &eg);
    CK(embed_backward(r, eg));
    PH(ENGINE, CK(zinc_gather(e, m->gid[0])));
    PH(GRADS, CK(add_grads(m, 0, m->g0)));
    PH(ENGINE, CK(zinc_release(e, m->gid[0])); CK(zinc_grads_ready(e, m->gid[0])));

    /* The one host wait of a micro-step, for the loss; through the device's own sync, which
     * polls the comm's health instead of hanging on a dead peer. */
    {
        zinc_status st = zinc_engine_sync(e);
        if (st != ZINC_OK) return zerr_thread(st, "CUDA model: %s", zinc_last_error(e));
    }
    /* The stream has finished, so every recorded event has a time: no wait of the timer's own. */
    if (r->timer) {
        zinc_status st = zmt_collect(r->timer, r->err, sizeof r->err);
        if (st != ZINC_OK) return st;
    }
    if (loss) *loss = mean_loss(r);
    return ZINC_OK;
}

}  // namespace

extern "C" zinc_status zm_cuda_model_micro_step(zm_cuda_model *m, const uint16_t *tokens,
                                                const uint16_t *targets, double *loss)
{
    m->run->err[0] = 0;
    zinc_status s = micro_step(m, tokens, targets, loss);
    /* a failed micro-step's intervals (one maybe left open) are not summed */
    if (s != ZINC_OK && m->run->timer) zmt_discard(m->run->timer);
    /* CUDA/cuBLAS failures left their sentence in run->err; engine calls set their own. */
    return s != ZINC_OK && m->run->err[0] ? fail(m->run, s) : s;
}

extern "C" const int *zm_cuda_model_params(const zm_cuda_model *m, int *n)
{
    if (n) *n = m->nparams;
    return m->pid;
}

extern "C" size_t zm_cuda_model_bytes(const zm_cuda_model *m) { return m->bytes; }

/* The timer's pool: intervals one micro-step records, with room. Counted from micro_step: upload
 * 1; embedding group 3 forward and 4 backward; head 11; per layer 18 forward (2 engine, 2 ln,
 * 4 casts, 4 products, 4 bias, attention, gelu) and 24 backward (2 engine, 2 grads, 8 casts, 4
 * products, 4 bias, gelu, 2 ln, attention), plus 13 for a checkpointed layer's recomputation
 * (the forward's 16 kernels less the output projection's cast, product and bias). */
static int timer_pairs(const zm_spec *s) { return 64 + 64 * s->L; }

extern "C" zinc_status zm_cuda_model_timing(zm_cuda_model *m, int on)
{
    zm_cuda_run *r = m->run;
    if (!on) {
        zmt_destroy(r->timer);
        r->timer = NULL;
        return ZINC_OK;
    }
    if (r->timer) {
        zmt_reset(r->timer);
        return ZINC_OK;
    }
    cudaError_t ce = cudaSetDevice(r->device);
    zinc_status st = ce != cudaSuccess
                         ? zcu_fail_cuda(r->err, sizeof r->err, (int)ce, "cudaSetDevice", __FILE__,
                                         __LINE__)
                         : zmt_create(ZM_PH_COUNT, timer_pairs(&m->s), &r->timer, r->err,
                                      sizeof r->err);
    return st == ZINC_OK ? st : fail(r, st);
}

extern "C" zinc_status zm_cuda_model_timing_read(const zm_cuda_model *m, double *ms, long long *n,
                                                 long long *micro_steps)
{
    if (!m->run->timer)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "CUDA model: timing is off (turn it on with "
                           "zm_cuda_model_timing)");
    zmt_read(m->run->timer, ms, n, micro_steps);
    return ZINC_OK;
}

extern "C" void zm_cuda_model_timing_reset(zm_cuda_model *m)
{
    if (m->run->timer) zmt_reset(m->run->timer);
}

extern "C" int zm_cuda_available(char *why, size_t n)
{
    return zdev_cuda_device_count(why, n) > 0;
}
