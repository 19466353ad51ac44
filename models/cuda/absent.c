/* absent.c — the CUDA model in a build without CUDA: every entry point of gpt_cuda.h says so.
 * Keep in step with gpt_cuda.h. */
#include <stdio.h>

#include "base/log.h"
#include "models/cuda/gpt_cuda.h"

#define NO_CUDA "this zinc was built without CUDA, so the built-in model has no GPU version " \
                "(rebuild with nvcc present, -DZINC_CUDA=ON, or use --device cpu)"

int zm_cuda_available(char *why, size_t n)
{
    if (why && n) snprintf(why, n, "%s", NO_CUDA);
    return 0;
}

zinc_status zm_cuda_model_create(zinc_engine_t *e, const zm_spec *s, int B, zm_cuda_kernels k,
                                 int checkpoint, zm_cuda_model **out)
{
    (void)e; (void)s; (void)B; (void)k; (void)checkpoint;
    if (out) *out = NULL;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

void zm_cuda_model_destroy(zm_cuda_model *m) { (void)m; }

zinc_status zm_cuda_model_init(zm_cuda_model *m, uint64_t seed)
{
    (void)m; (void)seed;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

zinc_status zm_cuda_model_micro_step(zm_cuda_model *m, const uint16_t *tokens,
                                     const uint16_t *targets, double *loss)
{
    (void)m; (void)tokens; (void)targets; (void)loss;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

const int *zm_cuda_model_params(const zm_cuda_model *m, int *n)
{
    (void)m;
    if (n) *n = 0;
    return NULL;
}

size_t zm_cuda_model_bytes(const zm_cuda_model *m)
{
    (void)m;
    return 0;
}

zinc_status zm_cuda_run_create(const zm_spec *s, int B, zinc_dtype dt, zm_cuda_kernels k,
                               int checkpoint, int device, zm_cuda_run **out)
{
    (void)s; (void)B; (void)dt; (void)k; (void)checkpoint; (void)device;
    if (out) *out = NULL;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

void zm_cuda_run_destroy(zm_cuda_run *r) { (void)r; }

zinc_status zm_cuda_forward_backward(zm_cuda_run *r, void *const *params, float *const *grads,
                                     const uint16_t *tokens, const uint16_t *targets, float dloss,
                                     double *loss)
{
    (void)r; (void)params; (void)grads; (void)tokens; (void)targets; (void)dloss; (void)loss;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

zinc_status zm_cuda_model_timing(zm_cuda_model *m, int on)
{
    (void)m; (void)on;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

zinc_status zm_cuda_model_timing_read(const zm_cuda_model *m, double *ms, long long *n,
                                      long long *micro_steps)
{
    (void)m; (void)ms; (void)n; (void)micro_steps;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s", NO_CUDA);
}

void zm_cuda_model_timing_reset(zm_cuda_model *m) { (void)m; }
