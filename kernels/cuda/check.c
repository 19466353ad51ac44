/*
 * check.c — turns CUDA, cuBLAS and NCCL error codes into zinc_status and one sentence:
 * "<library> error in <call> at <file>:<line>: <library's message> (<code name>); <advice>".
 * Used through the ZINC_*_CHECK macros of zcuda.h, at the call site of every foreign call.
 */
#include <stdio.h>
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
/* nccl.h declares f() without (void); keep -Wstrict-prototypes for our own code. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "kernels/cuda/zcuda.h"

/* Source paths from CMake are absolute; from "kernels/" on is enough to find the line. */
static const char *short_path(const char *file)
{
    const char *k = strstr(file, "kernels/");
    return k ? k : file;
}

zinc_status zcu_fail_cuda(char *buf, size_t n, int code, const char *call, const char *file,
                          int line)
{
    cudaError_t e = (cudaError_t)code;
    zinc_status s = ZINC_ERR_DEVICE;
    /* The runtime also keeps this error as the thread's "last error" (a failed cudaMalloc too):
     * clear it, or the next launch's cudaGetLastError reports it again as its own (seen on the
     * first GPU run: an out-of-memory answer to a deliberately huge allocation failed the next
     * Adam launch). Sticky errors (a kernel fault) are not cleared by this and keep failing. */
    (void)cudaGetLastError();
    const char *advice = "the device may need a reset; see docs/cuda.md";
    switch (e) {
    case cudaErrorMemoryAllocation:
        s = ZINC_ERR_NOMEM;
        advice = "the GPU is out of memory: lower the batch, raise the ZeRO stage or use more GPUs "
                 "(zinc estimate prints the plan)";
        break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        s = ZINC_ERR_UNSUPPORTED;
        advice = "no usable CUDA device or driver on this machine; use device 'cpu'";
        break;
    case cudaErrorNoKernelImageForDevice:
        s = ZINC_ERR_UNSUPPORTED;
        advice = "this zinc has no kernels for the GPU's architecture; rebuild with "
                 "-DZINC_CUDA_ARCHS=<its compute capability, e.g. 100>";
        break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
        s = ZINC_ERR_INVALID_ARG;
        advice = "a pointer or size passed to the device is wrong (host pointer where a device "
                 "one is needed?)";
        break;
    default: break;
    }
    snprintf(buf, n, "CUDA error in %s at %s:%d: %s (%s); %s", call, short_path(file), line,
             cudaGetErrorString(e), cudaGetErrorName(e), advice);
    return s;
}

static const char *cublas_name(int code)
{
    switch (code) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "unknown cuBLAS status";
    }
}

zinc_status zcu_fail_cublas(char *buf, size_t n, int code, const char *call, const char *file,
                            int line)
{
    snprintf(buf, n, "cuBLAS error in %s at %s:%d: %s (%d)", call, short_path(file), line,
             cublas_name(code), code);
    return code == CUBLAS_STATUS_ALLOC_FAILED ? ZINC_ERR_NOMEM
           : code == CUBLAS_STATUS_INVALID_VALUE ? ZINC_ERR_INVALID_ARG : ZINC_ERR_DEVICE;
}

zinc_status zcu_fail_nccl(char *buf, size_t n, int code, const char *call, const char *file,
                          int line)
{
    ncclResult_t r = (ncclResult_t)code;
    zinc_status s = ZINC_ERR_COMM;
    const char *advice = "set NCCL_DEBUG=WARN for NCCL's own account";
    switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: s = ZINC_ERR_INVALID_ARG; break;
    case ncclRemoteError:
        advice = "another rank failed or its connection dropped; look at the other ranks' logs";
        break;
    case ncclSystemError:
        advice = "a system call or the network failed; NCCL_DEBUG=INFO shows which";
        break;
    case ncclUnhandledCudaError: s = ZINC_ERR_DEVICE; break;
    default: break;
    }
    const char *last = ncclGetLastError(NULL);
    snprintf(buf, n, "NCCL error in %s at %s:%d: %s%s%s; %s", call, short_path(file), line,
             ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "", advice);
    return s;
}
