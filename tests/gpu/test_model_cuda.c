/*
 * test_model_cuda.c — the CUDA model (models/cuda/) against the CPU model (models/gpt.c): the
 * mean loss and every parameter's gradient, on the same tiny configs, weights and batch.
 *
 * Weights are random (LayerNorm weights and biases included, so no symmetry hides a wrong term);
 * the CPU runs zm_forward_backward on the same values widened to fp32. Two shapes: one where
 * every loop is short (L2-D32-H4-T16, B 2) and one whose attention rows are longer than a block
 * (L1-D16-H2-T160, B 1).
 *
 * Tolerances:
 *  - fp32: both sides compute in fp32 and differ only in summation order (cuBLAS's blocking,
 *    the kernels' tree reductions vs gpt.c's serial sums) and in expf/tanhf/logf ulps. Each is
 *    ~1e-6 relative to the exact gradient (tests/model/test_model_grad.c check 2 measures the CPU
 *    side against a double build), so the bound of that check is used: per tensor
 *    max |g_gpu - g_cpu| <= 1e-4 * max |g_cpu| (+ 1e-7 for the 0.5 the gradients are added to,
 *    see below); the loss within 1e-5 relative: each row's log-sum-exp moves with its logits,
 *    which carry the ~1e-6 relative differences of the layers below times |logit| ~ 3-5.
 *  - bf16 / fp16: the GPU rounds every activation entering a matrix product to the dtype
 *    (unit roundoff 2^-9 for bf16, 2^-12 for fp16); the CPU does not. Roundings of K independent
 *    inputs give ~sqrt(K) u relative per product, ~0.3 % for bf16 here, and a gradient passes
 *    through up to ~8 such products and two LayerNorms between the loss and a weight. Bound:
 *    per tensor ||g_gpu - g_cpu||_2 <= 5e-2 ||g_cpu||_2, and the loss within 1e-2 absolute
 *    (0.2 % of ln 256). fp16 is held to the same bound (its roundoff is 8x smaller).
 *  - Gradients must be ADDED: the GPU's gradient buffers start at 0.5 and 0.5 is subtracted
 *    before comparing.
 * Then the engine path: a 1-rank fp32 stage-0 engine on the GPU with zm_cuda_model_*, whose
 * gradient views after one micro-step are compared with the CPU's for the initial weights and
 * the engine's loss multiplier, with the fp32 bound.
 *
 * Last, the per-phase timer (check_timing; zm_cuda_model_timing): results unchanged, every
 * phase timed, the sum of the phases against the wall time.
 *
 * Both kernel modes (gpt_cuda.h) run every check; the fast one is also compared with the exact
 * one on the same weights, with the same bounds. Fast mode's SIMT attention rows (heads other
 * than 64 and 128 channels) change the order and number of roundings only: the online-softmax
 * rows (measured on the host against gpt.c: at most 1.23 u sqrt(T) relative to each tensor's
 * largest value, tests/model/test_flash_rows.c), the two-pass column sums (at most 6.2 u sum|x|,
 * tests/model/test_colsum.c) and nvcc's fused multiply-adds (each removes one rounding of <= u).
 * These are of the size the fp32 bound was set for (~1e-6 relative), so it applies unchanged,
 * with about 100x margin; bf16/fp16 differ from the CPU by their activation rounding whatever
 * the kernels, so their bound stays too.
 * Heads of 64 (and, where shared memory allows, 128) channels take fast mode's tensor-core tiles
 * (models/cuda/flash_tiles.h), which round q, k, v, dy, P and dS to bf16 (u = 2^-8) whatever the
 * dtype: tests/model/test_flash_tiles.c bounds their error per element and measures it at 2e-3
 * to 6e-3 of each tensor's largest value for unit-scale inputs (2e-2 with peaked scores). That
 * is the size of the bf16 mode's rounding of one product's inputs (~sqrt(K) u), and the
 * attention is one of the ~8 products between the loss and a weight, so those runs are held to
 * the bf16 bound, borrowed rather than derived for them (5e-2 of ||g||_2 per tensor, the loss
 * within 1e-2; the tiles round one of those products, so it is likely several times loose), even
 * in fp32, against the CPU and against the exact mode; a wrong mask, rescale or tile boundary
 * moves gradients by O(1).
 * Extra shapes exercise what only fast mode has: the head sizes 64 (tiles: T 80 = a full and a
 * partial 64-row tile, T 40 below one tile, bf16 too) and 128 (T 150: three tiles), 32 (a SIMT
 * specialisation), several warps and blocks of rows, T not a multiple of 32, and B*T of 120-200
 * rows (several 64-row chunks in the reductions); heads over 128 channels are refused at
 * creation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/zdev_cuda.h"
#include "models/cuda/flash_tiles.h"
#include "models/cuda/gpt_cuda.h"
#include "models/gpt.h"
#include "models/half.h"
#include "testutil.h"

#define MAXG 8

static int cu_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* Random weights: matrices N(0, 0.15), embeddings N(0, 0.5), LayerNorm weights 1 + N(0, 0.2),
 * biases N(0, 0.1). Rounded to dt (so the CPU sees exactly the GPU's values). */
static void random_group(zt_rng *rng, const zm_spec *s, int g, zinc_dtype dt, float *p)
{
    zm_tensor t[ZM_MAX_TENSORS];
    int nt = zm_tensors(s, g, t);
    for (int i = 0; i < nt; i++) {
        const char *nm = t[i].name;
        size_t len = strlen(nm);
        int bias = len >= 2 && !strcmp(nm + len - 2, ".b");
        int lnw = !bias && strstr(nm, "ln") && t[i].ndim == 1;
        int emb = g == 0 && i < 2;
        for (int64_t j = 0; j < t[i].numel; j++) {
            double z = zt_normal(rng);
            float v = (float)(lnw ? 1.0 + 0.2 * z : bias ? 0.1 * z : emb ? 0.5 * z : 0.15 * z);
            if (dt == ZINC_DTYPE_BF16) v = zm_bf16_to_f32(zm_f32_to_bf16(v));
            if (dt == ZINC_DTYPE_FP16) v = zm_f16_to_f32(zm_f32_to_f16(v));
            p[t[i].offset + j] = v;
        }
    }
}

/* fp32 values -> n elements of dt in dst (host). */
static void to_dtype(void *dst, const float *src, zinc_dtype dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == ZINC_DTYPE_FP32) ((float *)dst)[i] = src[i];
        else if (dt == ZINC_DTYPE_FP16) ((uint16_t *)dst)[i] = zm_f32_to_f16(src[i]);
        else ((uint16_t *)dst)[i] = zm_f32_to_bf16(src[i]);
    }
}

/* 1 when mode k may run the attention on bf16 tensor-core tiles for this spec (fast.cu's rule,
 * the device aside: a head whose blocks do not fit the device's shared memory, or a device
 * before sm_80, runs the SIMT rows, which the looser bound covers as well). */
static int tile_attention(const zm_spec *s, zm_cuda_kernels k)
{
    return k == ZM_CUDA_FAST && zm_ft_head_ok(s->D / s->H);
}

/* Compares one group's gradients tensor by tensor, with the fp32 bound when exact, else the
 * bf16 one (see the top); returns the number of failing tensors. */
static int compare_group(const zm_spec *s, int g, const float *gpu, const float *cpu, int exact,
                         const char *what)
{
    zm_tensor t[ZM_MAX_TENSORS];
    int nt = zm_tensors(s, g, t), bad = 0;
    for (int i = 0; i < nt; i++) {
        const float *a = gpu + t[i].offset, *b = cpu + t[i].offset;
        double mx = 0, maxd = 0, nd = 0, nb = 0;
        int64_t worst = 0;
        for (int64_t j = 0; j < t[i].numel; j++) {
            double d = fabs((double)a[j] - (double)b[j]);
            if (!(d <= maxd)) maxd = d, worst = j; /* NaN counts as worst */
            mx = fmax(mx, fabs((double)b[j]));
            nd += d * d;
            nb += (double)b[j] * b[j];
        }
        int ok = exact ? maxd <= 1e-4 * mx + 1e-7 : sqrt(nd) <= 5e-2 * sqrt(nb) && isfinite(nd);
        if (!ok) {
            bad++;
            fprintf(stderr, "%s %s: max |diff| %.3g (element %lld: gpu %.9g cpu %.9g), max |cpu| "
                    "%.3g, ||diff|| / ||cpu|| %.3g\n", what, t[i].name, maxd, (long long)worst,
                    (double)a[worst], (double)b[worst], mx, sqrt(nd) / (sqrt(nb) + 1e-300));
        }
    }
    return bad;
}

/* Gradients of one run of mode k (activation checkpointing if ckpt), downloaded into out[g]
 * (0.5 subtracted), loss into *loss. The device gradients dG start at 0.5 (uploaded here), so a
 * kernel that overwrites instead of adding shows. Returns 0 on a setup failure (already
 * reported). */
static int gpu_grads(const zm_spec *s, int B, zinc_dtype dt, zm_cuda_kernels k, int ckpt,
                     void *const *dP, float *const *dG, const uint16_t *tok, const uint16_t *tgt,
                     float dloss, float *const *out, double *loss)
{
    int NG = zm_group_count(s), ok = 1;
    for (int g = 0; g < NG && ok; g++) {
        size_t n = (size_t)zm_group_numel(s, g);
        for (size_t j = 0; j < n; j++) out[g][j] = 0.5f;
        ok = cu_ok(cudaMemcpy(dG[g], out[g], n * 4, cudaMemcpyHostToDevice), "upload");
    }
    zm_cuda_run *run = NULL;
    if (ok) ZT_OK(zm_cuda_run_create(s, B, dt, k, ckpt, 0, &run));
    if (!run) return 0;
    ZT_OK(zm_cuda_forward_backward(run, dP, dG, tok, tgt, dloss, loss));
    zm_cuda_run_destroy(run);
    for (int g = 0; g < NG && ok; g++) {
        size_t n = (size_t)zm_group_numel(s, g);
        ok = cu_ok(cudaMemcpy(out[g], dG[g], n * 4, cudaMemcpyDeviceToHost), "download");
        for (size_t j = 0; j < n; j++) out[g][j] -= 0.5f;
    }
    return ok;
}

/* One config in one dtype through zm_cuda_forward_backward in both kernel modes, each against
 * zm_forward_backward, and the fast mode against the exact one on the same weights. */
static void check_plain(const char *spec, int B, zinc_dtype dt, uint64_t seed)
{
    zm_spec s;
    char err[256];
    if (zm_spec_parse(spec, &s, err, sizeof err)) {
        ZT_CHECK(0, "%s", err);
        return;
    }
    int NG = zm_group_count(&s), BT = B * s.T;
    ZT_CHECK(NG <= MAXG, "too many groups");
    zt_rng rng = {seed};
    float *P[MAXG] = {0}, *G[MAXG] = {0}, *Gk[2][MAXG] = {{0}}, *Gc[MAXG] = {0};
    void *dP[MAXG] = {0};
    float *dG[MAXG] = {0};
    uint16_t *tok = malloc((size_t)BT * 2), *tgt = malloc((size_t)BT * 2);
    int ok = tok && tgt;
    for (int i = 0; i < BT && ok; i++) {
        tok[i] = (uint16_t)(zt_next(&rng) % 256);
        tgt[i] = (uint16_t)(zt_next(&rng) % 256);
    }
    for (int g = 0; g < NG && ok; g++) {
        size_t n = (size_t)zm_group_numel(&s, g), es = zinc_dtype_size(dt);
        P[g] = malloc(n * 4);
        G[g] = calloc(n, 4);
        Gk[0][g] = malloc(n * 4);
        Gk[1][g] = malloc(n * 4);
        Gc[g] = malloc(n * 4);
        void *h = malloc(n * es);
        ok = P[g] && G[g] && Gk[0][g] && Gk[1][g] && Gc[g] && h;
        if (ok) {
            random_group(&rng, &s, g, dt, P[g]);
            to_dtype(h, P[g], dt, n);
            ok = cu_ok(cudaMalloc(&dP[g], n * es), "cudaMalloc") &&
                 cu_ok(cudaMalloc((void **)&dG[g], n * 4), "cudaMalloc") &&
                 cu_ok(cudaMemcpy(dP[g], h, n * es, cudaMemcpyHostToDevice), "upload");
        }
        free(h);
    }
    ZT_CHECK(ok, "setup of %s failed", spec);
    const float dloss = 1.75f; /* a loss multiplier other than 1 (as with loss scaling) */
    zm_acts *acts = NULL;
    double lk[2] = {NAN, NAN}, lc = NAN;
    if (ok) ZT_OK(zm_acts_create(&s, B, 2, 0, &acts));
    if (acts) lc = zm_forward_backward(acts, P, G, tok, tgt, dloss);
    const zm_cuda_kernels modes[2] = {ZM_CUDA_EXACT, ZM_CUDA_FAST};
    int done[2] = {0, 0};
    for (int k = 0; k < 2 && acts; k++) {
        const char *mode = zm_cuda_kernels_name(modes[k]);
        done[k] = gpu_grads(&s, B, dt, modes[k], 0, dP, dG, tok, tgt, dloss, Gk[k], &lk[k]);
        if (!done[k]) continue;
        /* Activation checkpointing recomputes each block's activations with the same kernels
         * from the same input: the loss and every gradient bit for bit. */
        double lck = NAN;
        if (gpu_grads(&s, B, dt, modes[k], 1, dP, dG, tok, tgt, dloss, Gc, &lck)) {
            int differ = 0;
            for (int g = 0; g < NG; g++)
                differ += memcmp(Gc[g], Gk[k][g], (size_t)zm_group_numel(&s, g) * 4) != 0;
            ZT_CHECK(differ == 0 && lck == lk[k], "%s %s %s checkpointed: %d groups' gradients "
                     "differ, loss %.17g against %.17g (want bit for bit)", spec,
                     zinc_dtype_name(dt), mode, differ, lck, lk[k]);
        }
        int exact = dt == ZINC_DTYPE_FP32 && !tile_attention(&s, modes[k]);
        double ltol = exact ? 1e-5 * fabs(lc) : 1e-2;
        ZT_CHECK(fabs(lk[k] - lc) <= ltol, "%s %s %s: loss gpu %.9g cpu %.9g (tolerance %.3g)",
                 spec, zinc_dtype_name(dt), mode, lk[k], lc, ltol);
        int bad = 0;
        char what[96];
        snprintf(what, sizeof what, "%s %s %s%s", spec, zinc_dtype_name(dt), mode,
                 tile_attention(&s, modes[k]) ? " (tensor-core attention)" : "");
        for (int g = 0; g < NG; g++) bad += compare_group(&s, g, Gk[k][g], G[g], exact, what);
        ZT_CHECK(bad == 0, "%s: %d tensors' gradients off", what, bad);
        printf("%s: loss gpu %.7f cpu %.7f, gradients of %d groups compared\n", what, lk[k], lc,
               NG);
    }
    if (done[0] && done[1]) {
        /* the two modes on the same weights, the exact one as the reference */
        char what[96];
        snprintf(what, sizeof what, "%s %s fast vs exact", spec, zinc_dtype_name(dt));
        int bad = 0, exact = dt == ZINC_DTYPE_FP32 && !tile_attention(&s, ZM_CUDA_FAST);
        for (int g = 0; g < NG; g++) bad += compare_group(&s, g, Gk[1][g], Gk[0][g], exact, what);
        double ltol = exact ? 1e-5 * fabs(lk[0]) : 1e-2;
        ZT_CHECK(bad == 0 && fabs(lk[1] - lk[0]) <= ltol, "%s: %d tensors' gradients off, loss "
                 "fast %.9g exact %.9g", what, bad, lk[1], lk[0]);
    }
    zm_acts_destroy(acts);
    for (int g = 0; g < NG; g++) {
        free(P[g]);
        free(G[g]);
        free(Gk[0][g]);
        free(Gk[1][g]);
        free(Gc[g]);
        cudaFree(dP[g]);
        cudaFree(dG[g]);
    }
    free(tok);
    free(tgt);
}

/* The fast kernels refuse heads wider than their local arrays, at creation, with a sentence. */
static void check_fast_limits(void)
{
    zm_spec s;
    char err[256];
    ZT_CHECK(zm_spec_parse("L1-D256-H1-T8", &s, err, sizeof err) == 0, "%s", err);
    zm_cuda_run *run = NULL;
    zinc_status st = zm_cuda_run_create(&s, 1, ZINC_DTYPE_FP32, ZM_CUDA_FAST, 0, 0, &run);
    ZT_CHECK(st == ZINC_ERR_INVALID_ARG && !run && strstr(zinc_last_error(NULL), "128"),
             "fast mode with 256-channel heads: %s (%s)", zinc_status_string(st),
             zinc_last_error(NULL));
    zm_cuda_run_destroy(run);
}

/* A CUDA engine made from `cfg` with the model `spec` (micro-batch B, `kernels`, activation
 * checkpointing if ckpt) bound to it, its timer on when `timing`, finalized and initialised from
 * `seed`; *s the parsed spec. NULL, the engine destroyed, after a reported failure. */
static zm_cuda_model *bound_model(const char *spec, const char *cfg, int B,
                                  zm_cuda_kernels kernels, int ckpt, int timing, uint64_t seed,
                                  zm_spec *s, zinc_engine_t **eout)
{
    char err[256];
    *eout = NULL;
    ZT_CHECK(zm_spec_parse(spec, s, err, sizeof err) == 0, "%s", err);
    zinc_engine_options_t eo = {0};
    eo.config_json = cfg;
    eo.device = "cuda";
    zinc_engine_t *e = NULL;
    zm_cuda_model *m = NULL;
    ZT_OK(zinc_engine_create(&eo, &e));
    if (e) ZT_OK(zm_cuda_model_create(e, s, B, kernels, ckpt, &m));
    if (m && timing) ZT_OK(zm_cuda_model_timing(m, 1));
    if (m) ZT_OK(zinc_finalize(e));
    if (m) ZT_OK(zm_cuda_model_init(m, seed));
    if (!m) {
        zinc_engine_destroy(e);
        return NULL;
    }
    *eout = e;
    return m;
}

/* The engine path: views, gather/release, adding into the engine's gradient views. */
static void check_engine(zm_cuda_kernels kernels)
{
    const int B = 2;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2,"
                      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
                      " \"zero_optimization\": {\"stage\": 0}}";
    zm_spec s;
    zinc_engine_t *e = NULL;
    zm_cuda_model *m = bound_model("L2-D32-H4-T16", cfg, B, kernels, 0, 0, 7, &s, &e);
    if (!m) return;
    int NG = zm_group_count(&s), BT = B * s.T;
    uint16_t tok[2 * 16], tgt[2 * 16];
    zt_rng rng = {99};
    for (int i = 0; i < BT; i++) {
        tok[i] = (uint16_t)(zt_next(&rng) % 256);
        tgt[i] = (uint16_t)(zt_next(&rng) % 256);
    }
    double lg = NAN;
    ZT_OK(zm_cuda_model_micro_step(m, tok, tgt, &lg));
    float mult = zinc_loss_multiplier(e); /* 1/GA = 0.5: the objective is loss * 0.5 */

    float *P[MAXG] = {0}, *G[MAXG] = {0}, *Gd[MAXG] = {0};
    zm_acts *acts = NULL;
    int ok = zm_acts_create(&s, B, 2, 0, &acts) == ZINC_OK;
    for (int g = 0; g < NG && ok; g++) {
        size_t n = (size_t)zm_group_numel(&s, g);
        P[g] = malloc(n * 4);
        G[g] = calloc(n, 4);
        Gd[g] = calloc(n, 4);
        ok = P[g] && G[g] && Gd[g];
        if (ok) zm_init_group(&s, g, 7, P[g]);
    }
    ZT_CHECK(ok, "engine check setup");
    if (ok) {
        double lc = zm_forward_backward(acts, P, G, tok, tgt, mult);
        ZT_CHECK(fabs(lg - lc) <= 1e-5 * fabs(lc), "engine path (%s): loss gpu %.9g cpu %.9g",
                 zm_cuda_kernels_name(kernels), lg, lc);
        int np;
        const int *pid = zm_cuda_model_params(m, &np);
        int k = 0, bad = 0;
        for (int g = 0; g < NG; g++) {
            zm_tensor t[ZM_MAX_TENSORS];
            int nt = zm_tensors(&s, g, t);
            for (int i = 0; i < nt; i++, k++) {
                void *v = NULL;
                ZT_OK(zinc_param_grad(e, pid[k], &v));
                if (v && !cu_ok(cudaMemcpy(Gd[g] + t[i].offset, v, (size_t)t[i].numel * 4,
                                           cudaMemcpyDeviceToHost), "download grad view"))
                    bad++;
            }
            bad += compare_group(&s, g, Gd[g], G[g], 1,
                                 kernels == ZM_CUDA_FAST ? "engine fp32 stage 0 fast"
                                                         : "engine fp32 stage 0 exact");
        }
        ZT_CHECK(k == np, "%d tensors, the model registered %d", k, np);
        ZT_CHECK(bad == 0, "engine path: %d tensors' gradients off", bad);
        printf("engine path (1 rank, stage 0, fp32, %s kernels): loss gpu %.7f cpu %.7f\n",
               zm_cuda_kernels_name(kernels), lg, lc);
        /* the accumulation window goes on, and the step runs on these gradients */
        zinc_step_info_t info;
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(!info.boundary, "micro-step 1 of 2 ended the window");
        ZT_OK(zm_cuda_model_micro_step(m, tok, tgt, &lg));
        ZT_OK(zinc_step(e, &info));
        ZT_CHECK(info.boundary && info.applied && isfinite(info.grad_norm), "step not applied");
    }
    for (int g = 0; g < NG; g++) {
        free(P[g]);
        free(G[g]);
        free(Gd[g]);
    }
    zm_acts_destroy(acts);
    zm_cuda_model_destroy(m);
    zinc_engine_destroy(e);
}

/* One engine run of the timing check: 1 rank, ZeRO-3 bf16 (so the engine's gathers and
 * reductions queue work and every cast runs), micro-steps of a fixed batch each followed by
 * zinc_step; losses into loss[steps]. With timing on, the sums restart after the first step and
 * *wall_s is the host time around the other micro-steps. ckpt: activation checkpointing.
 * Returns the model, still bound (the caller reads the timer, then frees model and engine), or
 * NULL after a reported failure. */
static zm_cuda_model *timed_run(zm_cuda_kernels kernels, int ckpt, int timing, int steps,
                                double *loss, double *wall_s, zinc_engine_t **eout)
{
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 4, \"bf16\": {\"enabled\": true},"
                      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
                      " \"zero_optimization\": {\"stage\": 3}}";
    zm_spec s;
    zinc_engine_t *e = NULL;
    zm_cuda_model *m = bound_model("L2-D128-H2-T64", cfg, 4, kernels, ckpt, timing, 11, &s, &e);
    enum { BT = 4 * 64 };
    uint16_t tok[BT], tgt[BT];
    zt_rng rng = {5};
    for (int i = 0; i < BT; i++) {
        tok[i] = (uint16_t)(zt_next(&rng) % 256);
        tgt[i] = (uint16_t)(zt_next(&rng) % 256);
    }
    *wall_s = 0.0;
    for (int i = 0; i < steps && m; i++) {
        zinc_step_info_t info;
        double t0 = zt_now();
        zinc_status st = zm_cuda_model_micro_step(m, tok, tgt, &loss[i]);
        if (i > 0) *wall_s += zt_now() - t0;
        ZT_OK(st);
        ZT_OK(zinc_step(e, &info));
        if (i == 0 && timing) zm_cuda_model_timing_reset(m);
    }
    *eout = e;
    return m;
}

/* --gpu-timing's timer: the losses bit for bit the same with it on as off; with it on every
 * phase has run (bf16 at stage 3 runs them all) and has time, and the phases' sum lies within
 * [0.5, 1.05] of the micro-steps' wall time. Above 1 only by the events' resolution (~0.5 us
 * per interval): the intervals are disjoint and inside the call. Below 1 by the host work
 * between intervals and around the stream (views, the final wait, reading the events). */
static void check_timing(zm_cuda_kernels kernels)
{
    enum { STEPS = 6 };
    const char *mode = zm_cuda_kernels_name(kernels);
    double off[STEPS], on[STEPS], wall_off, wall = 0.0;
    zinc_engine_t *e = NULL;
    zm_cuda_model *m = timed_run(kernels, 0, 0, STEPS, off, &wall_off, &e);
    double ms[ZM_PH_COUNT] = {0};
    long long n[ZM_PH_COUNT] = {0}, micro = 0;
    ZT_CHECK(m && zm_cuda_model_timing_read(m, ms, n, &micro) == ZINC_ERR_INVALID_ARG,
             "timing %s: reading a timer that is off must be refused", mode);
    size_t plain_bytes = m ? zm_cuda_model_bytes(m) : 0;
    zm_cuda_model_destroy(m);
    zinc_engine_destroy(e);
    /* With activation checkpointing (and the timer, whose pool must hold the recomputation's
     * intervals too): the same losses over steps at stage 3, bit for bit. */
    double ck[STEPS], wall_ck;
    m = timed_run(kernels, 1, 1, STEPS, ck, &wall_ck, &e);
    int ran = m != NULL;
    /* and it keeps fewer activations: the same bit-for-bit losses also come from a flag that
     * was ignored */
    ZT_CHECK(!ran || zm_cuda_model_bytes(m) < plain_bytes, "timing %s: %zu model bytes "
             "checkpointed, %zu without", mode, ran ? zm_cuda_model_bytes(m) : 0, plain_bytes);
    zm_cuda_model_destroy(m);
    zinc_engine_destroy(e);
    for (int i = 0; ran && i < STEPS; i++)
        ZT_CHECK(ck[i] == off[i], "timing %s: micro-step %d loss %.17g checkpointed, %.17g "
                 "without (want bit for bit)", mode, i, ck[i], off[i]);
    m = timed_run(kernels, 0, 1, STEPS, on, &wall, &e);
    if (!m) return;
    ZT_OK(zm_cuda_model_timing_read(m, ms, n, &micro));
    zm_cuda_model_destroy(m);
    zinc_engine_destroy(e);
    for (int i = 0; i < STEPS; i++)
        ZT_CHECK(on[i] == off[i], "timing %s: micro-step %d loss %.17g with timing, %.17g "
                 "without (want bit for bit)", mode, i, on[i], off[i]);
    ZT_CHECK(micro == STEPS - 1, "timing %s: %lld micro-steps summed, want %d", mode, micro,
             STEPS - 1);
    double sum = 0.0;
    for (int p = 0; p < ZM_PH_COUNT; p++) {
        ZT_CHECK(n[p] > 0 && ms[p] > 0.0, "timing %s: phase %s: %lld intervals, %.6f ms",
                 mode, zm_cuda_phase_name(p), n[p], ms[p]);
        sum += ms[p];
    }
    double ratio = sum / (1e3 * wall);
    ZT_CHECK(ratio >= 0.5 && ratio <= 1.05, "timing %s: phases sum to %.3f ms, %.3f of the "
             "micro-steps' wall time %.3f ms (want 0.5 to 1.05)", mode, sum, ratio, 1e3 * wall);
    printf("timing (%s kernels, L2-D128-H2-T64 B4 bf16 stage 3): losses bitwise as without it "
           "and with activation checkpointing; "
           "phases %.3f ms = %.3f of the wall time %.3f ms over %lld micro-steps\n", mode, sum,
           ratio, 1e3 * wall, micro);
}

int main(void)
{
    char why[300];
    if (!zm_cuda_available(why, sizeof why)) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    check_plain("L2-D32-H4-T16", 2, ZINC_DTYPE_FP32, 1);
    check_plain("L1-D16-H2-T160", 1, ZINC_DTYPE_FP32, 2);
    check_plain("L2-D32-H4-T16", 2, ZINC_DTYPE_BF16, 3);
    check_plain("L2-D32-H4-T16", 2, ZINC_DTYPE_FP16, 4);
    /* fast mode's tensor-core tiles (head size 64: T of one full and one partial tile, T below
     * one tile; 128: three tiles), its SIMT rows' compiled head size 32 over several warps of
     * rows, T not a multiple of 32, and B*T over the reductions' 64-row chunks */
    check_plain("L1-D128-H2-T80", 2, ZINC_DTYPE_FP32, 5);
    check_plain("L1-D64-H2-T100", 2, ZINC_DTYPE_FP32, 6);
    check_plain("L1-D128-H2-T80", 2, ZINC_DTYPE_BF16, 7);
    check_plain("L2-D128-H2-T40", 3, ZINC_DTYPE_FP32, 8);
    check_plain("L1-D256-H2-T150", 1, ZINC_DTYPE_FP32, 9);
    check_fast_limits();
    check_engine(ZM_CUDA_EXACT);
    check_engine(ZM_CUDA_FAST);
    check_timing(ZM_CUDA_EXACT);
    check_timing(ZM_CUDA_FAST);
    return zt_finish("model_cuda");
}
