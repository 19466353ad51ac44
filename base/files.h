/*
 * files.h — opening a file the user named, for reading, without ever blocking on it.
 *
 * open() of a FIFO with no writer waits forever, and a device may too. Every path a user gives
 * for reading (configs, data, metrics, checkpoints, HF configs, calibrations) goes through here:
 * opened O_NONBLOCK, then refused unless it is a regular file.
 */
#ifndef ZINC_BASE_FILES_H
#define ZINC_BASE_FILES_H

#include <stddef.h>
#include <stdio.h>

/* A read-only descriptor of path when it is a regular file (blocking reads restored), else -1
 * with errno: open()'s, or EINVAL for a FIFO, device, socket or directory. */
int zfile_open_regular(const char *path);
/* The same as a stdio stream ("rb"); NULL with errno as above. */
FILE *zfile_fopen_regular(const char *path);
/* strerror(errno) after one of the above, with EINVAL said as what it means here. */
const char *zfile_strerror(int err);
/* A new file beside `final` to write and then rename over it: "FINAL.XXXXXX" (name into tmp,
 * n bytes), created exclusively (mkstemp: never an existing file, nor through a symlink planted
 * at a predictable name), with the usual permissions (0666 less the umask). NULL with errno. */
FILE *zfile_create_beside(const char *final, char *tmp, size_t n);
/* The whole file into *out (NUL-terminated, *len bytes without it; the caller frees). Returns 0,
 * or an errno value (EINVAL: not a regular file). */
int zfile_read_regular(const char *path, char **out, size_t *len);

#endif
