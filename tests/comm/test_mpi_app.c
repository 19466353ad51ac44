/*
 * test_mpi_app.c — zinc's end of the job when the application owns MPI, run as
 * `mpirun -np 3 comm_mpi_app`: the program calls MPI_Init_thread and MPI_Finalize itself (as a C
 * program using MPI for its own work does, or Python with mpi4py imported first), so
 * zmpi_finalize never runs. The last rank finalizes MPI at once, without a failure; the others
 * then create a comm with it and broadcast from it. Its MPI_Finalize must still send zinc's exit
 * notices (the callback zmpi_init sets on MPI_COMM_SELF): the others' comm creation and broadcast
 * fail with ZINC_ERR_ABORTED naming it within a few seconds instead of waiting forever, and
 * their own MPI_Finalize meets it in zinc's exit barrier, so the job ends with status 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "shard/comm.h"
#include "testutil.h"

int main(int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "comm_mpi_app: MPI_Init_thread failed\n");
        return 1;
    }
    int rank = 0, size = 1, we = 1;
    ZT_OK(zmpi_init(&rank, &size, &we));
    ZT_CHECK(we == 0, "zmpi_init must see that the application initialised MPI");
    if (size < 2) {
        fprintf(stderr, "comm_mpi_app: needs 2 ranks or more\n");
        MPI_Finalize();
        return 77;
    }
    int last = size - 1;
    if (rank == last) {
        /* Ends without a failure, before the comm and the broadcast every other rank waits in. */
        MPI_Finalize();
        return zt_finish("comm_mpi_app last rank");
    }
    char want[64];
    snprintf(want, sizeof want, "rank %d ended its process", last);

    double t0 = MPI_Wtime();
    zcomm_t *c = NULL;
    zinc_status s = zcomm_mpi_create(&c);
    double dt = MPI_Wtime() - t0;
    const char *msg = zinc_last_error(NULL);
    ZT_CHECK(s == ZINC_ERR_ABORTED && strstr(msg, want),
             "rank %d: comm creation gave %s: %s", rank, zinc_status_string(s), msg);
    ZT_CHECK(dt < 10.0, "rank %d: comm creation failed after %.1f s (2 s grace)", rank, dt);
    if (c) zcomm_destroy(c);

    char buf[100];
    memset(buf, 7, sizeof buf);
    t0 = MPI_Wtime();
    s = zmpi_world_bcast(buf, sizeof buf, last);
    dt = MPI_Wtime() - t0;
    msg = zinc_last_error(NULL);
    ZT_CHECK(s == ZINC_ERR_ABORTED && strstr(msg, want),
             "rank %d: the world broadcast gave %s: %s", rank, zinc_status_string(s), msg);
    ZT_CHECK(dt < 10.0, "rank %d: the world broadcast failed after %.1f s", rank, dt);
    int kept = 1;
    for (size_t i = 0; i < sizeof buf; i++) kept &= buf[i] == 7;
    ZT_CHECK(kept, "rank %d: a failed broadcast must leave the caller's buffer alone", rank);

    char name[40];
    snprintf(name, sizeof name, "comm_mpi_app rank %d", rank);
    int rc = zt_finish(name);
    MPI_Finalize();   /* zinc's exit barrier: every rank arrives, so no MPI_Abort */
    return rc;
}
