/*
 * clip.c — the global-norm clip coefficient folded into the update's grad_scale, with the rule
 * of DeepSpeed's fp16 optimizers (unscale_and_clip_grads): clip = (norm + 1e-6) / max_norm and
 * the gradients are divided by it only when it exceeds 1.
 */
#include "optim/optim.h"

#include <math.h>

double zclip_coef(double norm, double clip)
{
    if (!(clip > 0.0)) return 1.0;  /* off; also catches a nan clip */
    /* A non-finite norm is an overflow the engine skips; if it gets here anyway, let no
     * gradient through rather than let nan pass the "> 1" test as "no clipping". */
    if (!isfinite(norm)) return INFINITY;
    double coef = (norm + 1e-6) / clip;
    return coef > 1.0 ? coef : 1.0;
}
