/*
 * test_cuda_nodevice.c — the parts of the CUDA backend that must work on any machine the build
 * runs on, GPU or not (label `unit`): the version string (compiled-against versions, "no device"
 * with the reason when there is none), zdev_cuda_open's answer, the error conversion of
 * ZINC_CUDA_CHECK / NCCL / cuBLAS codes into zinc_status with file:line and the library's
 * message, and the alignment arithmetic of the vector paths.
 */
#include <stdio.h>
#include <string.h>

#include <cublas_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "kernels/cuda/zcuda.h"
#include "kernels/cuda/zdev_cuda.h"
#include "testutil.h"

static zinc_status set_bad_device(char *buf, size_t n)
{
    char err[512];
    ZINC_CUDA_CHECK(err, cudaSetDevice(-1));
    snprintf(buf, n, "%s", err);
    return ZINC_OK;
}

int main(void)
{
    const char *v = zdev_cuda_version();
    ZT_CHECK(v && strstr(v, "CUDA ") && strstr(v, "cuBLAS ") && strstr(v, "NCCL "), "version: %s", v ? v : "(null)");
    char want[64];
    snprintf(want, sizeof want, "NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    ZT_CHECK(v && strstr(v, want), "version lacks the compiled-against '%s': %s", want, v ? v : "");
    printf("zdev_cuda_version: %s\n", v ? v : "(null)");

    char why[300] = "";
    int count = zdev_cuda_device_count(why, sizeof why);
    zdev_t *d = NULL;
    zinc_status s = zdev_cuda_open(0, &d);
    if (count == 0) {
        ZT_CHECK(strlen(why) > 0, "no device but no reason");
        ZT_CHECK(v && strstr(v, "no device"), "version does not say 'no device': %s", v ? v : "");
        ZT_CHECK(s == ZINC_ERR_UNSUPPORTED && d == NULL, "open without a device: %d", (int)s);
        ZT_CHECK(strstr(zinc_last_error(NULL), "no CUDA device") != NULL, "message: %s", zinc_last_error(NULL));
        zdev_t *d2 = NULL;
        ZT_CHECK(zdev_open("cuda", 0, 0, &d2) == ZINC_ERR_UNSUPPORTED && !d2, "zdev_open(cuda) without a device");
    } else {
        ZT_CHECK(s == ZINC_OK && d && !strcmp(d->iface->name, "cuda"), "open device 0: %s", zinc_last_error(NULL));
        zdev_close(d);
        ZT_CHECK(zdev_cuda_open(count, &d) == ZINC_ERR_INVALID_ARG && !d, "device %d of %d accepted", count, count);
    }

    /* Error conversion: status, call text, file:line, the library's own words. */
    char buf[512];
    s = set_bad_device(buf, sizeof buf);
    ZT_CHECK(s != ZINC_OK, "cudaSetDevice(-1) succeeded");
    zinc_status s2 = zcu_fail_cuda(buf, sizeof buf, (int)cudaErrorMemoryAllocation, "cudaMalloc(&p, n)",
                                   "/abs/path/kernels/cuda/device.c", 42);
    ZT_CHECK(s2 == ZINC_ERR_NOMEM && strstr(buf, "cudaMalloc(&p, n)") && strstr(buf, "kernels/cuda/device.c:42") &&
             !strstr(buf, "/abs/") && strstr(buf, "cudaErrorMemoryAllocation"), "%s", buf);
    s2 = zcu_fail_nccl(buf, sizeof buf, (int)ncclRemoteError, "ncclAllReduce", "x.c", 7);
    ZT_CHECK(s2 == ZINC_ERR_COMM && strstr(buf, "ncclAllReduce") && strstr(buf, "x.c:7"), "%s", buf);
    s2 = zcu_fail_nccl(buf, sizeof buf, (int)ncclInvalidArgument, "ncclBroadcast", "x.c", 8);
    ZT_CHECK(s2 == ZINC_ERR_INVALID_ARG, "nccl invalid argument -> %d", (int)s2);
    s2 = zcu_fail_cublas(buf, sizeof buf, (int)CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate", "y.c", 9);
    ZT_CHECK(s2 == ZINC_ERR_NOMEM && strstr(buf, "CUBLAS_STATUS_ALLOC_FAILED"), "%s", buf);

    /* Alignment heads: every stream 16-byte aligned after h elements of its own size. */
    char *base = (char *)(((uintptr_t)buf + 255) & ~(uintptr_t)255);
    const void *p1[3] = {base, base + 4 * 0, base};
    size_t s4[3] = {4, 4, 2};
    ZT_CHECK(zcu_vec_head(p1, s4, 3) == 0, "aligned streams need a head");
    const void *p2[2] = {base + 4, base + 2};          /* fp32 at +1, fp16 at +1: h = 7 */
    size_t s42[2] = {4, 2};
    ZT_CHECK(zcu_vec_head(p2, s42, 2) == 7, "head %ld, want 7", zcu_vec_head(p2, s42, 2));
    const void *p3[2] = {base + 4, base};              /* fp32 at +1, fp16 at 0: impossible */
    ZT_CHECK(zcu_vec_head(p3, s42, 2) == -1, "irreconcilable alignments got head %ld", zcu_vec_head(p3, s42, 2));
    const void *p4[2] = {base + 12, NULL};             /* NULL streams do not count */
    ZT_CHECK(zcu_vec_head(p4, s42, 2) == 1, "head %ld, want 1", zcu_vec_head(p4, s42, 2));
    return zt_finish("cuda_nodevice");
}
