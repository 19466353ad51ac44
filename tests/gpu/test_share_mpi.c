/*
 * test_share_mpi.c — which comm a CUDA engine gets under `mpirun -np 2` (engine/gpu_share.c),
 * with or without a GPU:
 *  - ZINC_SHARE_DEVICE malformed on rank 1 only: every rank's create fails with ZINC_ERR_CONFIG
 *    naming rank 1 (the ranks decide from one gathered table, so none goes on alone);
 *  - no CUDA device (this machine): every rank fails with ZINC_ERR_UNSUPPORTED at once, not
 *    after a timeout;
 *  - a GPU: with fewer GPUs than ranks, or ZINC_SHARE_DEVICE=1, the comm is staged/mpi on GPU
 *    local_rank % GPUs, a collective through it gives the right mean, and the engine trains
 *    nothing here (the Python and `zinc train` checks of bench/gpu_session.sh's mpi2 phase do);
 *    with a GPU per rank and the variable unset the comm is nccl.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/zdev_cuda.h"
#include "testutil.h"
#include "toy.h"

static zinc_status create(zinc_world_t *w, zinc_engine_t **e)
{
    toy_run r = {.world = zinc_world_size(w), .stage = 2, .accum = 1, .steps = 1,
                 .dtype = ZINC_DTYPE_BF16, .clip = 1.0, .inject_inf_step = -1};
    char *cfg = toy_config(&r);
    zinc_engine_options_t o = {.config_json = cfg, .world = w, .device = "cuda", .threads = 1};
    *e = NULL;
    zinc_status s = zinc_engine_create(&o, e);
    free(cfg);
    int np = 0;
    if (s == ZINC_OK) s = toy_register_run(*e, &np, &r);
    return s;
}

int main(void)
{
    zinc_world_t *w = NULL;
    ZT_OK(zinc_world_create_mpi(&w));
    if (!w) return zt_finish("test_share_mpi");
    int rank = zinc_world_rank(w), size = zinc_world_size(w);
    ZT_CHECK(size == 2, "run under mpirun -np 2 (size %d)", size);
    char why[256] = "";
    int ngpu = zdev_cuda_device_count(why, sizeof why);
    zinc_engine_t *e = NULL;

    if (rank == 1) setenv("ZINC_SHARE_DEVICE", "yes", 1);
    zinc_status s = create(w, &e);
    const char *msg = zinc_last_error(NULL);
    ZT_CHECK(s == ZINC_ERR_CONFIG && strstr(msg, "rank 1 has ZINC_SHARE_DEVICE"),
             "rank %d, ZINC_SHARE_DEVICE=yes on rank 1: %s: %s", rank, zinc_status_string(s), msg);
    zinc_engine_destroy(e);
    unsetenv("ZINC_SHARE_DEVICE");

    if (ngpu == 0) {
        double t0 = zt_now();
        s = create(w, &e);
        msg = zinc_last_error(NULL);
        ZT_CHECK(s == ZINC_ERR_UNSUPPORTED && strstr(msg, "no CUDA device"),
                 "rank %d without a GPU: %s: %s", rank, zinc_status_string(s), msg);
        ZT_CHECK(zt_now() - t0 < 30, "rank %d: the failure took %.1f s", rank, zt_now() - t0);
        zinc_engine_destroy(e);
        printf("rank %d: no CUDA device (%s): the failures checked; the shared-GPU path needs a "
               "GPU\n", rank, why);
    } else {
        for (int forced = 0; forced < 2; forced++) {
            if (forced) setenv("ZINC_SHARE_DEVICE", "1", 1);
            int share = forced || ngpu < size;
            s = create(w, &e);
            ZT_CHECK(s == ZINC_OK, "rank %d (%d GPUs%s): %s", rank, ngpu,
                     forced ? ", ZINC_SHARE_DEVICE=1" : "", zinc_last_error(e));
            if (s == ZINC_OK) {
                const char *comm = zinc_engine_comm(e);
                ZT_CHECK(!strcmp(comm, share ? "staged/mpi" : "nccl"), "rank %d (%d GPUs%s): "
                         "comm %s", rank, ngpu, forced ? ", ZINC_SHARE_DEVICE=1" : "", comm);
                int want = share ? rank % ngpu : rank;   /* one node: local rank = rank */
                ZT_CHECK(zinc_engine_cuda_device(e) == want, "rank %d: GPU %d, not %d", rank,
                         zinc_engine_cuda_device(e), want);
                double v[2] = {rank, 10.0 * rank};
                ZT_OK(zinc_mean_over_ranks(e, v, 2));
                ZT_CHECK(v[0] == 0.5 && v[1] == 5.0, "rank %d: mean over ranks %g %g", rank,
                         v[0], v[1]);
            }
            zinc_engine_destroy(e);
            e = NULL;
            unsetenv("ZINC_SHARE_DEVICE");
        }
    }
    int rc = zt_finish("test_share_mpi");
    zinc_world_destroy(w);
    return rc;
}
