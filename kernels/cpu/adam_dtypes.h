/*
 * adam_dtypes.h — the dtype dispatch of the fused Adam kernel, shared by the portable, AVX2 and
 * AVX-512 files. Include it after the file's own
 *     adam_loop(args, consts, lo, hi, grad dtype, param dtype, write param_out)
 * (an always-inline function): this instantiates one loop per (grad dtype, param dtype) pair, so
 * the dtypes are constants inside each, and defines the file's static adam().
 */
#define ZK_ADAM_G(gdt)                                                                        \
    do {                                                                                      \
        if (!a->param_out) adam_loop(a, c, lo, hi, gdt, ZINC_DTYPE_FP32, 0);                  \
        else if (a->param_dtype == ZINC_DTYPE_FP16)                                           \
            adam_loop(a, c, lo, hi, gdt, ZINC_DTYPE_FP16, 1);                                 \
        else if (a->param_dtype == ZINC_DTYPE_BF16)                                           \
            adam_loop(a, c, lo, hi, gdt, ZINC_DTYPE_BF16, 1);                                 \
        else                                                                                  \
            adam_loop(a, c, lo, hi, gdt, ZINC_DTYPE_FP32, 1);                                 \
    } while (0)

static void adam(const zk_adam_args *a, const zk_adam_consts *c, size_t lo, size_t hi)
{
    switch (a->grad_dtype) {
    case ZINC_DTYPE_FP16: ZK_ADAM_G(ZINC_DTYPE_FP16); break;
    case ZINC_DTYPE_BF16: ZK_ADAM_G(ZINC_DTYPE_BF16); break;
    default: ZK_ADAM_G(ZINC_DTYPE_FP32); break;
    }
}

#undef ZK_ADAM_G
