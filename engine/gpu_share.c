/*
 * gpu_share.c — the comm of a CUDA engine launched as processes: NCCL when every rank has a GPU
 * of its own, the staged comm over MPI when ranks share one (docs/comm.md, "Ranks sharing a
 * GPU").
 *
 * NCCL refuses two ranks on one device, so without this a one-GPU machine could not run the
 * cross-process GPU path at all. Under mpirun, when a node has more ranks than GPUs (mpirun -np 2
 * on one GPU), or when ZINC_SHARE_DEVICE=1, each rank opens GPU local_rank % GPUs and every
 * collective copies its buffer to the host, runs the mpi backend on it and copies the result back
 * (shard/comm_staged.c). Two PCIe copies per collective make it slow, but it is the mpi
 * backend's arithmetic, so such a run matches the same ranks as threads sharing the GPU bit for
 * bit: it is for checks, not speed.
 *
 * Every rank must pick the same comm (a rank in NCCL and a rank in MPI would wait for each other
 * until the timeout), so the choice is made from what every rank reports (its node, its GPU
 * count, its ZINC_SHARE_DEVICE), all-gathered over a fresh mpi comm: the same table, the same
 * verdict everywhere. That comm becomes the staged comm's inner one, or is freed before NCCL
 * starts. torchrun and srun ranks have no MPI to stage over: they keep NCCL, and a node with more
 * of them than GPUs is refused with a sentence that points at mpirun.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/internal.h"
#include "base/log.h"
#include "kernels/cuda/zdev_cuda.h"

/* ZINC_SHARE_DEVICE: -1 unset (share where a node has more ranks than GPUs), 0 never, 1 always,
 * 2 malformed. */
static int share_setting(void)
{
    const char *v = getenv("ZINC_SHARE_DEVICE");
    if (!v || !*v) return -1;
    if (!strcmp(v, "0") || !strcmp(v, "1")) return *v - '0';
    return 2;
}

/* What each rank tells the others: two 8-byte words, all-gathered as ZDT_F64 elements (a byte
 * copy; no arithmetic touches them). */
typedef struct {
    uint64_t host;          /* XXH64 of the host name: equal for the ranks of one node */
    int32_t ngpu;           /* CUDA devices this process sees */
    int32_t setting;        /* share_setting() */
} zshare_rec;
#define ZSHARE_WORDS (sizeof(zshare_rec) / sizeof(uint64_t))

static zshare_rec rec_of(const uint64_t *table, int r)
{
    zshare_rec x;
    memcpy(&x, table + (size_t)r * ZSHARE_WORDS, sizeof x);
    return x;
}

/* Rank r's index among the ranks of its node, in rank order (MPI_Comm_split_type's local rank,
 * which is how the NCCL launch picks its GPU). */
static int local_index(const uint64_t *table, int r)
{
    uint64_t host = rec_of(table, r).host;
    int k = 0;
    for (int q = 0; q < r; q++) k += rec_of(table, q).host == host;
    return k;
}

/* The verdict from the gathered table, the same on every rank: 1 share (staged mpi), 0 NCCL,
 * or a failure every rank reports alike (a bad setting, a rank without a GPU). *forced says the
 * sharing was asked for rather than needed. */
static zinc_status decide(const uint64_t *table, int size, int *share, int *forced)
{
    for (int r = 0; r < size; r++)
        if (rec_of(table, r).setting == 2)
            return zerr_thread(ZINC_ERR_CONFIG, "zinc_engine_create: rank %d has ZINC_SHARE_DEVICE "
                               "set to neither 0 nor 1; give 1 (ranks share GPUs through host "
                               "memory), 0 (never: NCCL) or leave it unset (share only where a "
                               "node has more ranks than GPUs)", r);
    int on = 0, off = 0, over = 0;
    for (int r = 0; r < size; r++) {
        zshare_rec x = rec_of(table, r);
        if (x.ngpu <= 0)
            return zerr_thread(ZINC_ERR_UNSUPPORTED, "zinc_engine_create: rank %d sees no CUDA "
                               "device (its own error says why); every rank of a CUDA world "
                               "needs one, or use device 'cpu'", r);
        on |= x.setting == 1;
        off |= x.setting == 0;
        over |= local_index(table, r) >= x.ngpu;
    }
    *forced = on;
    *share = on || (!off && over);
    return ZINC_OK;
}

zinc_status zeng_open_cuda_mpi(zinc_engine_t *e, double timeout_s, int *use_nccl)
{
    *use_nccl = 0;
    char why[256] = "";
    zshare_rec me = {.ngpu = zdev_cuda_device_count(why, sizeof why), .setting = share_setting()};
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    me.host = XXH64(host, strlen(host), 0);
    int size = e->world_size;
    uint64_t *table = calloc((size_t)size * ZSHARE_WORDS, sizeof *table);
    if (!table) return zerr_thread(ZINC_ERR_NOMEM, "zinc_engine_create: out of memory");
    memcpy(table + (size_t)e->rank * ZSHARE_WORDS, &me, sizeof me);
    zcomm_t *mpi = NULL;
    zinc_status s = zcomm_mpi_create(&mpi);
    if (s != ZINC_OK) {
        free(table);
        return zerr_thread(s, "zinc_engine_create: cannot open the mpi comm of rank %d: %s",
                           e->rank, zerr_thread_message());
    }
    zcomm_set_timeout(mpi, timeout_s);
    /* Bookkeeping, not training traffic: the iface directly, so nothing is counted. */
    s = mpi->iface->all_gather(mpi, table, (size_t)size * ZSHARE_WORDS, ZDT_F64);
    if (s != ZINC_OK) s = zerr_thread(s, "zinc_engine_create: rank %d: %s", e->rank, mpi->err);
    int share = 0, forced = 0;
    if (s == ZINC_OK) s = decide(table, size, &share, &forced);
    if (s == ZINC_ERR_UNSUPPORTED && me.ngpu <= 0)
        s = zerr_thread(s, "zinc_engine_create: rank %d: no CUDA device (%s); use device 'cpu'",
                        e->rank, why);
    int lr = s == ZINC_OK ? local_index(table, e->rank) : 0;
    int sharers = 0;     /* ranks on this rank's GPU, itself included (for the log) */
    if (s == ZINC_OK && share)
        for (int r = 0; r < size; r++)
            sharers += rec_of(table, r).host == me.host &&
                       local_index(table, r) % me.ngpu == lr % me.ngpu;
    free(table);
    if (s != ZINC_OK || !share) {
        zcomm_destroy(mpi);
        *use_nccl = s == ZINC_OK;
        return s;
    }
    int gpu = lr % me.ngpu;
    s = zdev_open("cuda", 0, gpu, &e->dev);
    if (s != ZINC_OK) {
        /* The others have decided to share too and will wait for this rank: tell them. */
        char msg[600];
        snprintf(msg, sizeof msg, "rank %d cannot open CUDA device %d: %s", e->rank, gpu,
                 zerr_thread_message());
        mpi->iface->abort(mpi, msg);
        zcomm_destroy(mpi);
        return zerr_thread(s, "zinc_engine_create: %s", msg);
    }
    s = zcomm_staged_create(mpi, e->dev, &e->comm);     /* owns mpi from here, even on failure */
    if (s == ZINC_OK) s = zworld_add_comm(e->world, e->comm);
    if (s != ZINC_OK)
        return zerr_thread(s, "zinc_engine_create: cannot open the staged comm of rank %d: %s",
                           e->rank, zerr_thread_message());
    if (e->rank == 0)
        zlog(ZLOG_WARN, "comm", e->rank, "%s: the collectives of the %d ranks go through host "
             "memory over MPI (the staged mpi comm), which is for checks, not speed",
             forced ? "ZINC_SHARE_DEVICE=1" : "ranks share a GPU (a node has more ranks than GPUs)",
             size);
    zlog(ZLOG_DEBUG, "comm", e->rank, "staged mpi: rank %d of %d on GPU %d, shared by %d rank(s) "
         "of its node", e->rank, size, gpu, sharers);
    return ZINC_OK;
}

zinc_status zeng_check_env_cuda_world(void)
{
    char what[160] = "", why[256] = "";
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    int local = lws ? atoi(lws) : 0;
    int ngpu = local > 1 ? zdev_cuda_device_count(why, sizeof why) : 0;
    if (share_setting() == 1)
        snprintf(what, sizeof what, "ZINC_SHARE_DEVICE=1 asks the ranks to share GPUs");
    else if (ngpu > 0 && local > ngpu)
        snprintf(what, sizeof what, "this node has %d ranks (LOCAL_WORLD_SIZE) but %d GPU(s)",
                 local, ngpu);
    if (!*what) return ZINC_OK;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "zinc_engine_create: %s, but torchrun/srun ranks "
                       "connect with NCCL, which refuses two ranks on one GPU: start one process "
                       "per GPU, or, for checks with several ranks on one GPU, start them with "
                       "mpirun (zinc then stages their collectives through host memory over MPI; "
                       "docs/comm.md)", what);
}
