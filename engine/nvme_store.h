/*
 * nvme_store.h — a rank's scratch file for state that does not fit in host memory (issue 39,
 * ZeRO-Infinity's optimizer state on NVMe): asynchronous reads and writes of large aligned
 * blocks, for the offloaded step's pipeline (read chunk c+1 and write chunk c-1 while the host
 * Adam runs chunk c), and plain positioned reads and writes of any range for the paths outside
 * the step (a parameter's values, a checkpoint).
 *
 * Backends: io_uring (liburing) where the build has it and the kernel allows it; otherwise each
 * asynchronous call is done when it is made (pread/pwrite), which keeps every result the same
 * and only loses the overlap. ZINC_NVME_BACKEND=pread forces the second, for tests;
 * ZINC_NVME_BACKEND=deferred (tests) does each asynchronous call only when a wait covers it, and
 * the calls a wait covers newest first, so that a caller that uses a buffer before waiting for
 * its read, rewrites one before its write is done, or counts on calls in flight together to
 * complete in order, gets wrong bytes and fails its test.
 * ZINC_NVME_FAULT=N (tests) makes asynchronous call N (from 0, since the open) fail with EIO,
 * reported by the wait that covers it. ZINC_NVME_SHORT=1 (tests) takes every io_uring completion
 * as short by an odd count, so the rest goes through the path that finishes a short transfer.
 * The file is O_DIRECT where the filesystem allows it (no page-cache copy of state that is
 * larger than memory by design): the asynchronous calls then need buffers, offsets and sizes
 * that are multiples of znvme_align(); the positioned calls take any range.
 * The file is scratch: created by znvme_open, removed by znvme_close, never part of a checkpoint;
 * znvme_remove_stale removes the files of processes that are gone.
 */
#ifndef ZINC_ENGINE_NVME_STORE_H
#define ZINC_ENGINE_NVME_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

typedef struct znvme znvme_t;

/* Creates `dir`/zinc-nvme-<pid>-<8 random hex>-r<rank>.swap of `bytes` bytes (its space reserved
 * with posix_fallocate where the filesystem has it, so that a full disk shows here, not in the
 * step), holding an exclusive flock on it until znvme_close: the lock, not the pid, says that a
 * run still uses the file (pids repeat across containers and reruns).
 * queue_depth: the most asynchronous calls in flight (DeepSpeed's aio.queue_depth). On failure
 * err names the path and the reason. */
zinc_status znvme_open(const char *dir, int rank, uint64_t bytes, int queue_depth, znvme_t **out,
                       char *err, size_t errlen);
/* Alignment the asynchronous calls need (4096 with O_DIRECT, else 1). */
size_t znvme_align(const znvme_t *f);
const char *znvme_path(const znvme_t *f);
/* "io_uring", "pread" or "deferred". */
const char *znvme_backend(const znvme_t *f);
/* Queues a read of [off, off + n) into buf, or a write of buf there; *ticket identifies it. The
 * buffer must stay (and, for a write, stay unchanged) until znvme_wait covers the ticket. */
zinc_status znvme_read_async(znvme_t *f, uint64_t off, void *buf, size_t n, uint64_t *ticket);
zinc_status znvme_write_async(znvme_t *f, uint64_t off, const void *buf, size_t n,
                              uint64_t *ticket);
/* Waits until every call up to `ticket` is done. The first I/O error since the last
 * znvme_wait (a full disk, an I/O error) is returned here, with znvme_error() naming the path. */
zinc_status znvme_wait(znvme_t *f, uint64_t ticket);
/* Positioned read or write of any range, done on return (waits for nothing in flight: the
 * caller waits first where a range may be in flight). */
zinc_status znvme_pread(znvme_t *f, uint64_t off, void *buf, size_t n);
zinc_status znvme_pwrite(znvme_t *f, uint64_t off, const void *buf, size_t n);
/* The file at its whole size again (posix_fallocate, as at the open) when something cut it short;
 * a file of that size already is left as it is. */
zinc_status znvme_reserve(znvme_t *f);
/* Waits for every call issued so far, whatever its result (a failed step's calls in flight,
 * before the file is written again); the errors are dropped. */
void znvme_drain(znvme_t *f);
/* The message of the last failure. */
const char *znvme_error(const znvme_t *f);
/* Waits for what is in flight, closes and removes the file. NULL is fine. */
void znvme_close(znvme_t *f);
/* Removes dir's scratch files of runs that ended without removing them (a crash): those whose
 * lock no process holds, and those of the older name zinc-nvme-<pid>-r<rank>.swap, which no run
 * locked, whose process is gone. Returns how many. */
int znvme_remove_stale(const char *dir);

#endif
