/* absent.c — the CUDA entry points of a build without CUDA: they say so. Keep in step with
 * device.h's zdev_cuda_*, kernels/cuda/zdev_cuda.h and kernels/cuda/nccl_comm.h: every function
 * those declare for use outside kernels/cuda/ has a stub here. (bootstrap.h is not stubbed: only
 * the NCCL backend uses it.) */
#include <stdio.h>

#include "base/log.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/cuda/zdev_cuda.h"
#include "kernels/device.h"

#define NO_CUDA "this zinc was built without CUDA (rebuild with nvcc present, -DZINC_CUDA=ON)"

zinc_status zdev_cuda_open(int device_index, zdev_t **out)
{
    (void)device_index;
    if (out) *out = NULL;
    return ZINC_ERR_UNSUPPORTED;
}

const char *zdev_cuda_version(void) { return NULL; }

int zdev_cuda_device_count(char *why, size_t n)
{
    if (why && n) snprintf(why, n, "%s", NO_CUDA);
    return 0;
}

int zdev_cuda_ordinal(zdev_t *d)
{
    (void)d;
    return -1;
}

void *zdev_cuda_stream(zdev_t *d)
{
    (void)d;
    return NULL;
}

zinc_status zdev_cuda_marks_reserve(zdev_t *d, int n)
{
    (void)d; (void)n;
    return ZINC_OK;
}

zinc_status zdev_cuda_mark(zdev_t *d, int id)
{
    (void)d; (void)id;
    return ZINC_OK; /* no CUDA device exists: nothing is ever queued on one */
}

zinc_status zdev_cuda_wait_mark(zdev_t *d, int id, void *stream)
{
    (void)d; (void)id; (void)stream;
    return ZINC_OK;
}

zinc_status zdev_cuda_grad_stats_dev(zdev_t *d, const void *g, zinc_dtype dt, size_t n,
                                     double *out_dev, int add)
{
    (void)d; (void)g; (void)dt; (void)n; (void)out_dev; (void)add;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "zdev_cuda_grad_stats_dev: %s", NO_CUDA);
}

zinc_status zdev_cuda_adam_step_guarded(zdev_t *d, const zk_adam_args *a, const double *stats_dev)
{
    (void)d; (void)a; (void)stats_dev;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "zdev_cuda_adam_step_guarded: %s", NO_CUDA);
}

zinc_status zcomm_nccl_unique_id(unsigned char id[ZBOOT_ID_BYTES])
{
    (void)id;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "nccl: %s", NO_CUDA);
}

zinc_status zcomm_nccl_create(zdev_t *dev, int rank, int size,
                              const unsigned char id[ZBOOT_ID_BYTES], double timeout_s,
                              zcomm_t **out)
{
    (void)dev; (void)rank; (void)size; (void)id; (void)timeout_s;
    if (out) *out = NULL;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "nccl: %s", NO_CUDA);
}

zinc_status zcomm_nccl_launch(double timeout_s, zboot_info *info, zdev_t **dev, zcomm_t **comm)
{
    (void)timeout_s; (void)info;
    if (dev) *dev = NULL;
    if (comm) *comm = NULL;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "nccl: %s", NO_CUDA);
}

zinc_status zcomm_nccl_group_begin(zcomm_t *c)
{
    (void)c;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "nccl: %s", NO_CUDA);
}

zinc_status zcomm_nccl_group_end(zcomm_t *c)
{
    (void)c;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "nccl: %s", NO_CUDA);
}
