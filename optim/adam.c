/*
 * adam.c — Adam's per-step scalars that the fused kernels take as arguments: the bias
 * corrections of PyTorch's Adam/AdamW for the t-th applied update.
 */
#include "optim/optim.h"

#include <math.h>

void zadam_bias_corrections(double beta1, double beta2, int bias_correction, int64_t t,
                            float *bc1, float *bc2)
{
    if (!bias_correction) {
        *bc1 = 1.0f;
        *bc2 = 1.0f;
        return;
    }
    /* t counts applied updates including this one, so t >= 1; t = 0 would give a zero
     * correction and divide by it. Computed in double, rounded once to the kernel's float. */
    if (t < 1) t = 1;
    *bc1 = (float)(1.0 - pow(beta1, (double)t));
    *bc2 = (float)(1.0 - pow(beta2, (double)t));
}
