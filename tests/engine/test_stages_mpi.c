/*
 * test_stages_mpi.c — stage equivalence on the mpi backend, under `mpirun -np 4`: for each of
 * fp16, bf16 and fp32, stages 1-3 end at weights bitwise identical to stage 0's, and the MPI run
 * is bitwise identical to the same run on a local world of 4 threads (computed here, in rank 0's
 * process): both backends reduce in fp32 in rank order.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

int main(void)
{
    zinc_world_t *w = NULL;
    ZT_OK(zinc_world_create_mpi(&w));
    if (!w) return zt_finish("test_stages_mpi");
    int rank = zinc_world_rank(w), size = zinc_world_size(w);
    ZT_CHECK(size == 4, "run under mpirun -np 4 (size %d)", size);
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    for (int di = 0; di < 3; di++) {
        toy_run ref = {.world = size, .stage = 0, .accum = 1, .steps = 20, .dtype = dts[di],
                       .clip = 1.0, .inject_inf_step = -1};
        toy_train_on(&ref, w);
        ZT_CHECK(ref.status == ZINC_OK, "rank %d stage 0: %s", rank, ref.error);
        for (int st = 1; st <= 3; st++) {
            toy_run r = ref;
            memset(r.final, 0, sizeof r.final);
            r.stage = st;
            toy_train_on(&r, w);
            ZT_CHECK(r.status == ZINC_OK, "rank %d stage %d: %s", rank, st, r.error);
            if (rank == 0)
                ZT_CHECK(toy_weights_equal(&ref, &r), "%s: mpi stage %d differs from stage 0",
                         zinc_dtype_name(dts[di]), st);
            toy_free(&r);
        }
        if (rank == 0) {
            toy_run loc = ref;
            memset(loc.final, 0, sizeof loc.final);
            loc.stage = 2;
            toy_train(&loc);
            ZT_CHECK(loc.status == ZINC_OK, "local run: %s", loc.error);
            ZT_CHECK(toy_weights_equal(&ref, &loc), "%s: mpi and local backends differ",
                     zinc_dtype_name(dts[di]));
            toy_free(&loc);
        }
        toy_free(&ref);
    }
    int rc = zt_finish("test_stages_mpi");
    zinc_world_destroy(w);
    return rc;
}
