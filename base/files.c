/*
 * files.c — see files.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"

int zfile_open_regular(const char *path)
{
    /* O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    /* regular files never block; later reads behave as usual */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *zfile_fopen_regular(const char *path)
{
    int fd = zfile_open_regular(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *zfile_strerror(int err)
{
    return err == EINVAL ? "not a regular file (a FIFO, device or directory)" : strerror(err);
}

FILE *zfile_create_beside(const char *final, char *tmp, size_t n)
{
    if ((size_t)snprintf(tmp, n, "%s.XXXXXX", final) >= n) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) return NULL;
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(fd, 0666 & ~um);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
    }
    return f;
}

int zfile_read_regular(const char *path, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = zfile_fopen_regular(path);
    if (!f) return errno ? errno : EIO;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int bad = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                bad = ENOMEM;
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) bad = errno ? errno : EIO;
            break;
        }
    }
    fclose(f);
    if (bad) {
        free(buf);
        return bad;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}
