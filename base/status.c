/* status.c — names of status codes, dtypes and memory categories (include/zinc.h's naming
 * functions). Bottom layer: it uses nothing of zinc but the public header. */
#include "zinc.h"

const char *zinc_status_string(zinc_status s)
{
    switch (s) {
    case ZINC_OK: return "ZINC_OK";
    case ZINC_ERR_INVALID_ARG: return "ZINC_ERR_INVALID_ARG";
    case ZINC_ERR_USAGE: return "ZINC_ERR_USAGE";
    case ZINC_ERR_CONFIG: return "ZINC_ERR_CONFIG";
    case ZINC_ERR_NOMEM: return "ZINC_ERR_NOMEM";
    case ZINC_ERR_IO: return "ZINC_ERR_IO";
    case ZINC_ERR_COMM: return "ZINC_ERR_COMM";
    case ZINC_ERR_TIMEOUT: return "ZINC_ERR_TIMEOUT";
    case ZINC_ERR_ABORTED: return "ZINC_ERR_ABORTED";
    case ZINC_ERR_MISMATCH: return "ZINC_ERR_MISMATCH";
    case ZINC_ERR_UNSUPPORTED: return "ZINC_ERR_UNSUPPORTED";
    case ZINC_ERR_CORRUPT: return "ZINC_ERR_CORRUPT";
    case ZINC_ERR_DEVICE: return "ZINC_ERR_DEVICE";
    case ZINC_ERR_INTERNAL: return "ZINC_ERR_INTERNAL";
    case ZINC_ERR_NUMERIC: return "ZINC_ERR_NUMERIC";
    }
    return "ZINC_ERR_UNKNOWN";
}

const char *zinc_dtype_name(zinc_dtype d)
{
    switch (d) {
    case ZINC_DTYPE_FP32: return "fp32";
    case ZINC_DTYPE_FP16: return "fp16";
    case ZINC_DTYPE_BF16: return "bf16";
    }
    return "?";
}

size_t zinc_dtype_size(zinc_dtype d)
{
    switch (d) {
    case ZINC_DTYPE_FP32: return 4;
    case ZINC_DTYPE_FP16:
    case ZINC_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *zinc_mem_category_name(zinc_mem_category c)
{
    static const char *names[ZINC_MEM_COUNT] = {"param16", "grad",   "master", "adam_m",
                                                "adam_v",  "bucket", "gather"};
    return (unsigned)c < ZINC_MEM_COUNT ? names[c] : "?";
}
