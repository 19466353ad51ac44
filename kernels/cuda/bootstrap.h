/*
 * bootstrap.h — who am I in a multi-process GPU job, and how rank 0's NCCL unique id reaches
 * every other rank.
 *
 * One process per GPU. The launcher tells each process its rank through the environment:
 *   mpirun   (built with MPI)   the id is broadcast with MPI_Bcast over MPI_COMM_WORLD;
 *   srun     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; rank 0 serves the id over TCP on the
 *            first host of SLURM_STEP_NODELIST (or MASTER_ADDR) and a port derived from the job id
 *            (or MASTER_PORT);
 *   torchrun RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0 serves the id over TCP.
 *            torchrun's agent already listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True),
 *            so then the id is served on MASTER_PORT + 1.
 * ZINC_BOOTSTRAP=mpi|slurm|env|single forces a method; ZINC_BOOTSTRAP_PORT forces the TCP port.
 *
 * This file knows nothing about CUDA or NCCL: the id is an opaque ZBOOT_ID_BYTES blob (an
 * ncclUniqueId is 128 bytes), which is why the TCP exchange is tested on the CPU.
 * Errors come back as zinc_status with a sentence in `err` (what, where, what to do).
 */
#ifndef ZINC_KERNELS_CUDA_BOOTSTRAP_H
#define ZINC_KERNELS_CUDA_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#define ZBOOT_ID_BYTES 128

typedef struct zboot_info {
    int rank, size;          /* this process in the job */
    int local_rank;          /* index among the processes of this node: picks the GPU */
    const char *method;      /* "mpi", "slurm", "env", "single" (static strings) */
    char host[256];          /* TCP methods: where rank 0 serves the id */
    int port;                /* TCP methods: its port */
    int mpi_initialised;     /* mpi: 1 when zboot_detect initialised MPI (caller finalises) */
} zboot_info;

/* Reads the launch environment (see the file comment). Without any launcher variables the job is
 * a single process: rank 0 of 1, method "single".
 * @return ZINC_ERR_CONFIG for inconsistent or malformed variables (the message names them),
 *         ZINC_ERR_UNSUPPORTED for ZINC_BOOTSTRAP=mpi in a build without MPI. */
zinc_status zboot_detect(zboot_info *out, char *err, size_t errn);

/* Collective over the job: every rank ends with rank 0's `id`. Rank 0 fills `id` before the call.
 * Called once per engine (comm), in the same order on every rank.
 * Fails after `timeout_s` seconds with ZINC_ERR_TIMEOUT naming the ranks that never arrived
 * (rank 0) or the address that never answered (others). */
zinc_status zboot_share_id(const zboot_info *bi, unsigned char id[ZBOOT_ID_BYTES],
                           double timeout_s, char *err, size_t errn);

/* The TCP exchange underneath, exposed for tests.
 * zboot_tcp_listen binds host:port (host NULL = every interface, port 0 = any) and reports the
 * bound port; zboot_tcp_serve hands `id` to size - 1 distinct ranks 1..size-1 and closes fd;
 * zboot_tcp_fetch connects (retrying until the deadline: rank 0 may not be listening yet),
 * introduces itself as rank/size and receives the id. `round` numbers the process's exchanges
 * from 1 (one per engine, zboot_share_id counts them): rank 0 sends a rank asking for a later
 * round back to retry, and one asking for an earlier round fails with ZINC_ERR_MISMATCH. */
zinc_status zboot_tcp_listen(const char *host, int port, int *fd_out, int *port_out, char *err,
                             size_t errn);
zinc_status zboot_tcp_serve(int fd, int size, uint32_t round,
                            const unsigned char id[ZBOOT_ID_BYTES], double timeout_s, char *err,
                            size_t errn);
zinc_status zboot_tcp_fetch(const char *host, int port, int rank, int size, uint32_t round,
                            unsigned char id[ZBOOT_ID_BYTES], double timeout_s, char *err,
                            size_t errn);

/* The first host of a Slurm node list: "gpu[003-010,012],cpu1" -> "gpu003".
 * @return 0, or -1 when the list is malformed or the name does not fit in n bytes. */
int zboot_slurm_first_host(const char *nodelist, char *out, size_t n);

#endif
