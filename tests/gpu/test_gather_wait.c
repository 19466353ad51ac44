/*
 * test_gather_wait.c — zinc_stream_wait_gather on a GPU (issue 38): another stream (PyTorch's,
 * in the front-end) waits on the device for exactly one stage-3 group's all-gather.
 *
 *  1. It waits long enough: zinc's compute stream is held for 300 ms by a host callback before
 *     zinc_gather, and the gather slot was filled with 0xFF bytes first; a copy out of the slot
 *     queued on the other stream right after zinc_stream_wait_gather must equal what the slot
 *     holds once the device is idle (a stream that did not wait copies the 0xFF bytes).
 *  2. It does not wait for more: zinc's stream is then held again for 1.5 s, as by work queued
 *     after the gather (the prefetch of later groups, the reduce-scatter of a group handed over
 *     before); a second wait for the same group must be over while that stream is still busy.
 *     Waiting for zinc's whole stream (an event recorded at the call, what the front-end did
 *     before) fails here.
 *
 *  3. Marks are per group: a group gathered into the slot of a held one (packed after it), with
 *     zinc's stream held before its gather, does not delay a wait for the held group.
 *  4. The legacy default stream (NULL: PyTorch's current stream outside a torch.cuda.stream
 *     block) is a stream like any other: case 1 again with it (zinc's stream is non-blocking,
 *     so the default stream does not wait for it by itself). Refusing NULL, as before
 *     2026-11-28, failed every stage-3 gather of `import zinc` on the default stream.
 *
 * A toy stage-3 engine in bf16 on CUDA device 0, world of one, every group partitioned. No CUDA
 * device: prints "SKIP: no CUDA device (<reason>)" and exits 77.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/zdev_cuda.h"
#include "testutil.h"
#include "toy.h"

static void CUDART_CB hold_ms(void *ms) { usleep((useconds_t)(intptr_t)ms * 1000); }

static int cu_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    ZT_CHECK(0, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}

int main(void)
{
    char why[300];
    if (zdev_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    toy_run r = {.world = 1, .stage = 3, .accum = 1, .steps = 1, .dtype = ZINC_DTYPE_BF16,
                 .clip = 1.0, .inject_inf_step = -1, .persist_threshold = -1};
    char *cfg = toy_config(&r);
    zinc_engine_options_t o = {.config_json = cfg, .device = "cuda", .threads = 1};
    zinc_engine_t *e = NULL;
    zinc_status s = zinc_engine_create(&o, &e);
    free(cfg);
    int np = 0;
    if (s == ZINC_OK) s = toy_register_run(e, &np, &r);
    if (s != ZINC_OK) {
        ZT_CHECK(0, "toy engine on cuda: %s", e ? zinc_last_error(e) : zinc_last_error(NULL));
        zinc_engine_destroy(e);
        return zt_finish("test_gather_wait");
    }
    cudaStream_t zs = (cudaStream_t)zinc_engine_cuda_stream(e), other = NULL;
    int p0 = 0;
    while (p0 < np && zinc_param_group(e, p0) != 0) p0++;
    size_t bytes = (size_t)zinc_param_numel(e, p0) * 2;
    unsigned char *early = NULL, *late = malloc(bytes);
    void *slot = NULL, *again = NULL;
    if (!cu_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !cu_ok(cudaMallocHost((void **)&early, bytes), "cudaMallocHost") || !late)
        goto out;

    /* Where group 0 lands (the first free slot; no prefetch before the first zinc_step), then
     * that memory filled with 0xFF while nothing holds it. */
    ZT_OK(zinc_gather(e, 0));
    ZT_OK(zinc_param_data(e, p0, &slot));
    ZT_OK(zinc_release(e, 0));
    if (!cu_ok(cudaDeviceSynchronize(), "sync") || !cu_ok(cudaMemset(slot, 0xFF, bytes), "memset") ||
        !cu_ok(cudaDeviceSynchronize(), "sync"))
        goto out;

    /* 1. The wait covers the gather queued behind a busy stream. */
    if (!cu_ok(cudaLaunchHostFunc(zs, hold_ms, (void *)(intptr_t)300), "hold 300 ms")) goto out;
    ZT_OK(zinc_gather(e, 0));
    ZT_OK(zinc_param_data(e, p0, &again));
    ZT_CHECK(again == slot, "group 0 gathered into %p, then %p: the test needs the same slot",
             slot, again);
    ZT_OK(zinc_stream_wait_gather(e, 0, other));
    if (!cu_ok(cudaMemcpyAsync(early, slot, bytes, cudaMemcpyDeviceToHost, other), "copy") ||
        !cu_ok(cudaStreamSynchronize(other), "sync other") ||
        !cu_ok(cudaDeviceSynchronize(), "sync") ||
        !cu_ok(cudaMemcpy(late, slot, bytes, cudaMemcpyDeviceToHost), "copy late"))
        goto out;
    size_t ff = 0;
    for (size_t i = 0; i < bytes; i++) ff += late[i] == 0xFF;
    ZT_CHECK(ff < bytes, "the gather left the slot's 0xFF bytes in place");
    ZT_CHECK(memcmp(early, late, bytes) == 0,
             "the other stream read the slot before the gather was in it");

    /* 2. Work zinc queues after the gather is not waited for. */
    if (!cu_ok(cudaLaunchHostFunc(zs, hold_ms, (void *)(intptr_t)1500), "hold 1.5 s")) goto out;
    ZT_OK(zinc_stream_wait_gather(e, 0, other));
    if (!cu_ok(cudaStreamSynchronize(other), "sync other")) goto out;
    cudaError_t busy = cudaStreamQuery(zs);
    ZT_CHECK(busy == cudaErrorNotReady,
             "the wait for group 0 also waited for zinc's later work (its stream: %s)",
             cudaGetErrorString(busy));
    ZT_OK(zinc_release(e, 0));
    if (!cu_ok(cudaDeviceSynchronize(), "sync")) goto out;

    /* 3. Marks are per group, not per slot: group 1 gathered while group 0 is held is packed
     *    into group 0's slot (no zinc_step yet, so no prefetch: each gather fetches); queued
     *    after a hold of zinc's stream, its gather must not delay a wait for group 0. */
    int p1 = 0;
    while (p1 < np && zinc_param_group(e, p1) != 1) p1++;
    void *v0 = NULL, *v1 = NULL;
    ZT_OK(zinc_gather(e, 0));
    if (!cu_ok(cudaLaunchHostFunc(zs, hold_ms, (void *)(intptr_t)1500), "hold 1.5 s")) goto out;
    ZT_OK(zinc_gather(e, 1));
    ZT_OK(zinc_param_data(e, p0, &v0));
    ZT_OK(zinc_param_data(e, p1, &v1));
    ptrdiff_t gap = (char *)v1 - (char *)v0;
    ZT_CHECK(gap > 0 && gap <= 4096, "group 1 at %td bytes from group 0: not packed after it", gap);
    ZT_OK(zinc_stream_wait_gather(e, 0, other));
    if (!cu_ok(cudaStreamSynchronize(other), "sync other")) goto out;
    busy = cudaStreamQuery(zs);
    ZT_CHECK(busy == cudaErrorNotReady,
             "the wait for group 0 also waited for group 1's gather into its slot (zinc's "
             "stream: %s)", cudaGetErrorString(busy));
    ZT_OK(zinc_release(e, 1));
    ZT_OK(zinc_release(e, 0));
    if (!cu_ok(cudaDeviceSynchronize(), "sync")) goto out;

    /* 4. Case 1 on the legacy default stream (NULL). */
    void *slot4 = NULL;
    ZT_OK(zinc_gather(e, 0));
    ZT_OK(zinc_param_data(e, p0, &slot4));
    ZT_OK(zinc_release(e, 0));
    memset(early, 0, bytes);
    if (!slot4 || !cu_ok(cudaDeviceSynchronize(), "sync") ||
        !cu_ok(cudaMemset(slot4, 0xFF, bytes), "memset") || !cu_ok(cudaDeviceSynchronize(), "sync") ||
        !cu_ok(cudaLaunchHostFunc(zs, hold_ms, (void *)(intptr_t)300), "hold 300 ms"))
        goto out;
    ZT_OK(zinc_gather(e, 0));
    ZT_OK(zinc_param_data(e, p0, &again));
    ZT_CHECK(again == slot4, "group 0 gathered into %p, then %p: case 4 needs the same slot",
             slot4, again);
    s = zinc_stream_wait_gather(e, 0, NULL);
    ZT_CHECK(s == ZINC_OK, "zinc_stream_wait_gather on the default stream (NULL): %s",
             zinc_last_error(e));
    if (!cu_ok(cudaMemcpyAsync(early, slot4, bytes, cudaMemcpyDeviceToHost, 0), "copy") ||
        !cu_ok(cudaStreamSynchronize(0), "sync the default stream") ||
        !cu_ok(cudaDeviceSynchronize(), "sync") ||
        !cu_ok(cudaMemcpy(late, slot4, bytes, cudaMemcpyDeviceToHost), "copy late"))
        goto out;
    ZT_CHECK(memcmp(early, late, bytes) == 0,
             "the default stream read the slot before the gather was in it");
    ZT_OK(zinc_release(e, 0));
    cu_ok(cudaDeviceSynchronize(), "sync");
out:
    if (other) cudaStreamDestroy(other);
    cudaFreeHost(early);
    free(late);
    zinc_engine_destroy(e);
    return zt_finish("test_gather_wait");
}
