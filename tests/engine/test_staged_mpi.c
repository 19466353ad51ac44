/*
 * test_staged_mpi.c — the staged comm over the mpi backend, which CUDA ranks sharing one GPU
 * under mpirun use (engine/gpu_share.c), run on the cpu device under `mpirun -np 2` through the
 * test hook ZINC_TEST_STAGED_COMM=1:
 *  - with the hook an engine's comm is the staged one over mpi, without it the plain mpi comm
 *    (so the comparisons below compare the two paths, not one path twice);
 *  - for fp16, bf16 and fp32 at stages 0-3, the staged run trains exactly as the plain one:
 *    bitwise the same weights, last gradient norm and loss scale, and applied/skipped counts
 *    (the staging only moves bytes between the device and the host).
 * The hook is read when an engine is created, so one process runs both paths.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "toy.h"

static void hook(int on)
{
    if (on) setenv("ZINC_TEST_STAGED_COMM", "1", 1);
    else unsetenv("ZINC_TEST_STAGED_COMM");
}

/* The comm an engine created now on `w` gets ("?" when the engine failed). */
static const char *comm_now(zinc_world_t *w, int rank)
{
    toy_run r = {.world = zinc_world_size(w), .stage = 2, .accum = 1, .steps = 1,
                 .dtype = ZINC_DTYPE_BF16, .clip = 1.0, .inject_inf_step = -1};
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine_on(&r, w, rank, NULL, &e, &np);
    ZT_CHECK(s == ZINC_OK, "rank %d: engine: %s", rank, zinc_last_error(e));
    const char *comm = s == ZINC_OK ? zinc_engine_comm(e) : "?";
    zinc_engine_destroy(e);
    return comm;
}

int main(void)
{
    zinc_world_t *w = NULL;
    ZT_OK(zinc_world_create_mpi(&w));
    if (!w) return zt_finish("test_staged_mpi");
    int rank = zinc_world_rank(w), size = zinc_world_size(w);
    ZT_CHECK(size == 2, "run under mpirun -np 2 (size %d)", size);

    hook(0);
    const char *c = comm_now(w, rank);
    ZT_CHECK(!strcmp(c, "mpi"), "rank %d: without the hook the comm is %s, not mpi", rank, c);
    hook(1);
    c = comm_now(w, rank);
    ZT_CHECK(!strcmp(c, "staged/mpi"), "rank %d: with ZINC_TEST_STAGED_COMM=1 the comm is %s, not "
             "staged/mpi", rank, c);

    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    for (int di = 0; di < 3; di++)
        for (int st = 0; st <= 3; st++) {
            toy_run plain = {.world = size, .stage = st, .accum = 2, .steps = 12,
                             .dtype = dts[di], .clip = 1.0, .inject_inf_step = -1};
            toy_run staged = plain;
            hook(0);
            toy_train_on(&plain, w);
            hook(1);
            toy_train_on(&staged, w);
            ZT_CHECK(plain.status == ZINC_OK && staged.status == ZINC_OK,
                     "rank %d %s stage %d: %s%s", rank, zinc_dtype_name(dts[di]), st, plain.error,
                     staged.error);
            if (rank == 0)
                ZT_CHECK(plain.applied > 0 && toy_same_training(&plain, &staged),
                         "%s stage %d: the staged mpi comm trained otherwise than the mpi comm",
                         zinc_dtype_name(dts[di]), st);
            toy_free(&plain);
            toy_free(&staged);
        }
    hook(0);
    int rc = zt_finish("test_staged_mpi");
    zinc_world_destroy(w);
    return rc;
}
