/* comm_mpi_absent.c — the MPI entry points of a build without MPI: they say so. */
#include "shard/comm.h"

zinc_status zmpi_init(int *rank, int *size, int *we_initialised)
{
    *rank = 0;
    *size = 1;
    *we_initialised = 0;
    return ZINC_ERR_UNSUPPORTED;
}

void zmpi_finalize(void) {}

void zmpi_note_failure(zinc_status s, const char *why, double grace_s)
{
    (void)s;
    (void)why;
    (void)grace_s;
}

zinc_status zmpi_world_bcast(void *buf, size_t bytes, int root)
{
    (void)buf;
    (void)bytes;
    (void)root;
    return ZINC_ERR_UNSUPPORTED;
}

zinc_status zmpi_world_barrier(void) { return ZINC_ERR_UNSUPPORTED; }

const char *zmpi_version(void) { return NULL; }

zinc_status zcomm_mpi_create(zcomm_t **out)
{
    *out = NULL;
    return ZINC_ERR_UNSUPPORTED;
}

void zmpi_thread_stats(int *in_collective, long *overlaps)
{
    if (in_collective) *in_collective = 0;
    if (overlaps) *overlaps = 0;
}
