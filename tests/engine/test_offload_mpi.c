/*
 * test_offload_mpi.c — ZeRO-Offload on the mpi backend, under `mpirun -np 2` (one process per
 * rank, so the host state and the copies are per process, as in production): for fp16 (with an
 * overflow step skipped), bf16 and fp32, the toy's training with offload_optimizer "cpu" at
 * stages 1-3, and with offload_optimizer + offload_param "cpu" at stage 3 (persistent groups and
 * none), and with offload_optimizer "nvme" (each process its own scratch file in one shared
 * directory, chunks cut through groups, pipelined) at stages 1-3 and with offload_param "nvme"
 * at stage 3, ends at weights, gradient norm,
 * loss scale and step counts bitwise identical to the same run without offload.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "toy.h"

#define OPT "\"offload_optimizer\": {\"device\": \"cpu\"}, "
#define BOTH OPT "\"offload_param\": {\"device\": \"cpu\"}, "
/* NVMe: one directory for the job, $TMPDIR/zinc-nvme-mpi-<rank 0's pid> (the pid sent to every
 * rank): the fixed /tmp/zinc-nvme-mpi-test was shared by every build and run on the host, and
 * one a root run left behind (mode 0700) failed the next run as another user. */
static char nvme_dir[512], nvme[1024], nvme_both[1200];

int main(void)
{
    zinc_world_t *w = NULL;
    ZT_OK(zinc_world_create_mpi(&w));
    if (!w) return zt_finish("test_offload_mpi");
    int rank = zinc_world_rank(w), size = zinc_world_size(w);
    int32_t id = (int32_t)getpid();
    ZT_OK(zinc_world_broadcast(w, &id, sizeof id, 0));
    const char *tmp = getenv("TMPDIR");
    snprintf(nvme_dir, sizeof nvme_dir, "%s/zinc-nvme-mpi-%d", tmp && *tmp ? tmp : "/tmp", (int)id);
    snprintf(nvme, sizeof nvme, "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
             "\"%s\", \"pipeline_read\": true, \"pipeline_write\": true}, "
             "\"sub_group_size\": 1024, ", nvme_dir);
    snprintf(nvme_both, sizeof nvme_both, "%s\"offload_param\": {\"device\": \"nvme\"}, ", nvme);
    mkdir(nvme_dir, 0700);   /* both try: the config checks it exists when parsed */
    ZT_CHECK(size == 2, "run under mpirun -np 2 (size %d)", size);
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    /* Stage 1-3 with offload_optimizer; then stage 3 with offload_param, persistent groups
     * (DeepSpeed's default threshold) and none. */
    const struct { int stage; const char *zero; int64_t persist; const char *name; } runs[] = {
        {1, OPT, 0, "stage 1 offload_optimizer"},
        {2, OPT, 0, "stage 2 offload_optimizer"},
        {3, OPT, -1, "stage 3 offload_optimizer"},
        {3, BOTH, 0, "stage 3 offload_param (persistent)"},
        {3, BOTH, -1, "stage 3 offload_param (none persistent)"},
        {1, nvme, 0, "stage 1 offload_optimizer nvme"},
        {2, nvme, 0, "stage 2 offload_optimizer nvme"},
        {3, nvme, -1, "stage 3 offload_optimizer nvme"},
        {3, nvme_both, 0, "stage 3 offload_optimizer + offload_param nvme (persistent)"},
    };
    for (int di = 0; di < 3; di++)
        for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
            toy_run ref = {.world = size, .stage = runs[k].stage, .accum = 1, .steps = 12,
                           .dtype = dts[di], .clip = 1.0, .inject_inf_step = -1,
                           .persist_threshold = runs[k].persist};
            if (dts[di] == ZINC_DTYPE_FP16) {
                ref.inject_inf_step = 4;
                ref.inject_rank = 1;
            }
            toy_run off = ref;
            off.zero_json = runs[k].zero;
            toy_train_on(&ref, w);
            ZT_CHECK(ref.status == ZINC_OK, "rank %d %s reference: %s", rank, runs[k].name, ref.error);
            toy_train_on(&off, w);
            ZT_CHECK(off.status == ZINC_OK, "rank %d %s: %s", rank, runs[k].name, off.error);
            if (rank == 0) {
                ZT_CHECK(toy_same_training(&ref, &off), "%s %s: differs from the run without offload",
                         zinc_dtype_name(dts[di]), runs[k].name);
                ZT_CHECK(ref.applied > 0 && ref.last_info.grad_norm > 0.0, "%s %s: nothing trained",
                         zinc_dtype_name(dts[di]), runs[k].name);
            }
            toy_free(&ref);
            toy_free(&off);
        }
    int rc = zt_finish("test_offload_mpi");
    zinc_world_destroy(w);
    rmdir(nvme_dir);   /* empty by now (each engine removed its file); the other rank's try fails */
    return rc;
}
