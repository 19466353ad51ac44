/*
 * test_nccl.c — the `nccl` comm backend at world size 1 on one GPU: all-reduce, reduce-scatter,
 * all-gather (in place, every dtype, with a scale), broadcast and barrier, a batched group, the
 * byte counters of the zcomm_* wrappers, and stream ordering (statistics computed on the compute
 * stream, all-reduced, read back on the compute stream, no explicit sync). A world of one skips
 * NCCL outside groups (only the scale runs, on the compute stream); cuda_nccl_nccl_path runs
 * this test with ZINC_NCCL_SOLO=0, where every collective goes through NCCL on the comm stream
 * with an event each way, as in larger worlds.
 *
 * Reference: shard/reduce.c's zreduce_sum over the one rank's input (what `local` computes). At
 * world size 1 NCCL's sum is a copy and the scale one rounded fp32 multiply, so the results must
 * be bit-identical (NaN == NaN); larger worlds differ by NCCL's summation order (docs/cuda.md).
 *
 * No CUDA device: prints "SKIP: no CUDA device (<reason>)" and exits 77.
 */
#include "gpu_common.h"
#include "kernels/cuda/nccl_comm.h"
#include "shard/comm.h"

static zdev_t *D;
static zcomm_t *C;

static zinc_dtype as_dtype(zdt t) { return (zinc_dtype)t; }

/* Random host data of type t (fp64 handled here, the rest by zg_fill). */
static void fill(zt_rng *r, void *p, zdt t, size_t n)
{
    if (t == ZDT_F64)
        for (size_t i = 0; i < n; i++) ((double *)p)[i] = zt_normal(r) * 1e3;
    else
        zg_fill(r, p, as_dtype(t), n, 50.0f);
}

static size_t diff(const void *got, const void *want, zdt t, size_t n)
{
    if (t != ZDT_F64) return zg_diff("nccl", got, want, as_dtype(t), n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp((const double *)got + i, (const double *)want + i, 8) != 0;
    return bad;
}

static void collectives(zdt t, size_t n, float scale)
{
    size_t es = zdt_size(t), bytes = n * es;
    void *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    zt_rng r = {n + (uint64_t)t * 101};
    fill(&r, h, t, n);
    void *d = D->iface->alloc(D, bytes);
    ZT_CHECK(d != NULL, "alloc: %s", D->err);
    if (!d) return;
    const void *in[1] = {h};

    ZT_OK(D->iface->upload(D, d, h, bytes));
    ZT_CHECK(zcomm_all_reduce(C, d, n, t, scale) == ZINC_OK, "all_reduce: %s", C->err);
    ZT_OK(D->iface->download(D, got, d, bytes));
    zreduce_sum(want, in, 1, n, t, scale);
    ZT_CHECK(diff(got, want, t, n) == 0, "all_reduce dt=%d n=%zu scale=%g differs", (int)t, n, (double)scale);

    ZT_OK(D->iface->upload(D, d, h, bytes));
    ZT_CHECK(zcomm_reduce_scatter(C, d, n, t, scale) == ZINC_OK, "reduce_scatter: %s", C->err);
    ZT_OK(D->iface->download(D, got, d, bytes));
    ZT_CHECK(diff(got, want, t, n) == 0, "reduce_scatter dt=%d n=%zu differs", (int)t, n);

    ZT_OK(D->iface->upload(D, d, h, bytes));
    ZT_CHECK(zcomm_all_gather(C, d, n, t) == ZINC_OK, "all_gather: %s", C->err);
    ZT_CHECK(zcomm_broadcast(C, d, bytes, 0) == ZINC_OK, "broadcast: %s", C->err);
    ZT_OK(D->iface->download(D, got, d, bytes));
    ZT_CHECK(!memcmp(got, h, bytes), "all_gather/broadcast changed the data (dt=%d n=%zu)", (int)t, n);

    D->iface->free(D, d);
    free(h); free(want); free(got);
}

static void test_group(void)
{
    const size_t n = 1000;
    float h[1000], want[1000], got[1000];
    zt_rng r = {9};
    fill(&r, h, ZDT_F32, n);
    float *a = D->iface->alloc(D, n * 4), *b = D->iface->alloc(D, n * 4);
    ZT_OK(D->iface->upload(D, a, h, n * 4));
    ZT_OK(D->iface->upload(D, b, h, n * 4));
    ZT_OK(zcomm_nccl_group_begin(C));
    ZT_CHECK(zcomm_all_reduce(C, a, n, ZDT_F32, 0.5f) == ZINC_OK, "grouped all_reduce: %s", C->err);
    ZT_CHECK(zcomm_reduce_scatter(C, b, n, ZDT_F32, 0.25f) == ZINC_OK, "grouped reduce_scatter: %s", C->err);
    ZT_OK(zcomm_nccl_group_end(C));
    const void *in[1] = {h};
    ZT_OK(D->iface->download(D, got, a, n * 4));
    zreduce_sum(want, in, 1, n, ZDT_F32, 0.5f);
    ZT_CHECK(diff(got, want, ZDT_F32, n) == 0, "grouped all_reduce: scale not applied after the group");
    ZT_OK(D->iface->download(D, got, b, n * 4));
    zreduce_sum(want, in, 1, n, ZDT_F32, 0.25f);
    ZT_CHECK(diff(got, want, ZDT_F32, n) == 0, "grouped reduce_scatter: scale not applied after the group");
    D->iface->free(D, a);
    D->iface->free(D, b);
}

/* compute stream -> comm stream -> compute stream, with no sync in between. */
static void test_ordering(void)
{
    const size_t n = 3 * 4096 + 11;
    float *h = malloc(n * 4);
    zt_rng r = {77};
    fill(&r, h, ZDT_F32, n);
    zk_grad_stats want;
    zk_ref_grad_stats(h, ZINC_DTYPE_FP32, n, &want);
    float *d = D->iface->alloc(D, n * 4);
    double *st = D->iface->alloc(D, 2 * sizeof(double)), out[2] = {0, 0};
    ZT_OK(D->iface->upload(D, d, h, n * 4));
    ZT_OK(zdev_cuda_grad_stats_dev(D, d, ZINC_DTYPE_FP32, n, st, 0));
    ZT_CHECK(zcomm_all_reduce(C, st, 2, ZDT_F64, 1.0f) == ZINC_OK, "all_reduce stats: %s", C->err);
    ZT_OK(D->iface->download(D, out, st, sizeof out));
    ZT_CHECK(out[0] == want.sumsq && out[1] == 0.0, "stats after all_reduce: %.17g %g, want %.17g 0",
             out[0], out[1], want.sumsq);
    D->iface->free(D, d);
    D->iface->free(D, st);
    free(h);
}

int main(void)
{
    D = zg_open_or_skip();
    unsigned char id[ZBOOT_ID_BYTES];
    ZT_OK(zcomm_nccl_unique_id(id));
    zinc_status s = zcomm_nccl_create(D, 0, 1, id, 60.0, &C);
    ZT_CHECK(s == ZINC_OK, "zcomm_nccl_create: %s", zinc_last_error(NULL));
    if (s != ZINC_OK) return zt_finish("nccl");
    ZT_CHECK(!strcmp(C->iface->name, "nccl") && C->rank == 0 && C->size == 1, "comm identity");

    const size_t ns[] = {1, 8, 1001, 65536 + 3};
    const zdt ts[] = {ZDT_F32, ZDT_F16, ZDT_BF16, ZDT_F64};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (size_t j = 0; j < 4; j++) {
            collectives(ts[j], ns[i], 1.0f);
            collectives(ts[j], ns[i], 1.0f / 3.0f);
        }
    uint64_t before = C->bytes[ZINC_COLL_ALL_REDUCE];
    float *one = D->iface->alloc(D, 400);
    ZT_CHECK(zcomm_all_reduce(C, one, 100, ZDT_F32, 1.0f) == ZINC_OK, "all_reduce: %s", C->err);
    ZT_CHECK(C->bytes[ZINC_COLL_ALL_REDUCE] - before == 800, "all_reduce of 400 B counted %llu",
             (unsigned long long)(C->bytes[ZINC_COLL_ALL_REDUCE] - before));
    D->iface->free(D, one);
    ZT_CHECK(zcomm_barrier(C) == ZINC_OK, "barrier: %s", C->err);
    test_group();
    test_ordering();

    /* After an abort every collective refuses with ZINC_ERR_ABORTED. */
    C->iface->abort(C, "test abort");
    float *x = D->iface->alloc(D, 64);
    ZT_CHECK(zcomm_all_reduce(C, x, 16, ZDT_F32, 1.0f) == ZINC_ERR_ABORTED && strstr(C->err, "test abort"),
             "collective after abort: %s", C->err);
    D->iface->free(D, x);
    zcomm_destroy(C);
    zdev_close(D);
    return zt_finish("nccl");
}
