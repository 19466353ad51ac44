/* absent.c — the CUDA entry points of a build without CUDA: they say so. */
#include "kernels/device.h"

zinc_status zdev_cuda_open(int device_index, zdev_t **out)
{
    (void)device_index;
    *out = NULL;
    return ZINC_ERR_UNSUPPORTED;
}

const char *zdev_cuda_version(void) { return NULL; }
