/*
 * nvme_store.c — see nvme_store.h.
 */
#include "engine/nvme_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef ZINC_HAVE_URING
#include <liburing.h>
#endif

#define ZNVME_ALIGN 4096

/* One asynchronous call: io_uring's user data of its entry, or what the deferred backend does
 * at the wait. The store keeps `depth` of them in a ring by ticket % depth (no more are ever in
 * flight), so a call allocates nothing. */
typedef struct zreq {
    uint64_t ticket, off;
    void *buf;
    size_t n;
    int write;
} zreq;

struct znvme {
    int fd;           /* O_DIRECT where the filesystem allows it */
    int buffered;     /* a second descriptor without O_DIRECT, for unaligned positioned calls */
    size_t align;
    uint64_t bytes;
    char path[4096];
    char err[4608];
    zinc_status pending; /* first error of an asynchronous call since the last wait */
    uint64_t issued;     /* tickets handed out */
    uint64_t done_below; /* every ticket < done_below is done */
    uint8_t *done;       /* ring of done flags, depth entries, by ticket % depth */
    int depth, inflight;
    /* ZINC_NVME_BACKEND=deferred (tests): every asynchronous call is done only when a wait covers
     * it, in order, so that a buffer used before its wait holds the wrong bytes */
    int deferred;
    int64_t fault_at; /* ZINC_NVME_FAULT=N (tests): asynchronous call N fails with EIO; -1 none */
    int short_io;     /* ZINC_NVME_SHORT=1 (tests): io_uring completions taken as short (below) */
    zreq *req;        /* ring of the calls not done, `depth` entries, by ticket % depth */
#ifdef ZINC_HAVE_URING
    int uring;
    struct io_uring ring;
#endif
};

/* The errors of flock on a filesystem that has no locks. */
static int no_locks(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS; }

/* No such process (a live one of another user answers EPERM: not gone). */
static int pid_gone(long pid) { return kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

static zinc_status fail(znvme_t *f, zinc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(f->err, sizeof f->err, "%s: ", f->path);
    vsnprintf(f->err + k, sizeof f->err - (size_t)k, fmt, ap);
    va_end(ap);
    return s;
}

/* Every failure of the file (a full disk included) is an I/O error: the message says which. */
static zinc_status io_status(int e)
{
    (void)e;
    return ZINC_ERR_IO;
}

/* The whole of [off, off + n) with pread/pwrite, resuming after short transfers. */
static zinc_status transfer(znvme_t *f, int fd, int write, uint64_t off, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return fail(f, io_status(errno), "%s of %zu bytes at %llu: %s", write ? "write" : "read",
                        n, (unsigned long long)off, strerror(errno));
        if (k == 0)
            return fail(f, ZINC_ERR_IO, "%s at %llu: past the end of the file (0 bytes moved)",
                        write ? "write" : "read", (unsigned long long)off);
        p += k, off += (uint64_t)k, n -= (size_t)k;
    }
    return ZINC_OK;
}

zinc_status znvme_open(const char *dir, int rank, uint64_t bytes, int queue_depth, znvme_t **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    znvme_t *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "%s: out of memory", dir);
        return ZINC_ERR_NOMEM;
    }
    f->fd = f->buffered = -1;
    f->bytes = bytes;
    f->depth = queue_depth > 0 ? queue_depth : 8;
    /* A random part beside the pid: two containers' runs (both pid 1) sharing nvme_path, or a
     * rerun that got a crashed run's pid, each make their own file. */
    uint32_t tag = 0;
    if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != (ssize_t)sizeof tag) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        tag = (uint32_t)ts.tv_nsec ^ (uint32_t)(uintptr_t)f ^ (uint32_t)ts.tv_sec;
    }
    /* The directory made absolute (and without a trailing slash): the file is removed, and
     * named in messages, by this path, and the process may change directory meanwhile (a
     * relative nvme_path left its file behind after an os.chdir). */
    char *abs = realpath(dir, NULL);
    snprintf(f->path, sizeof f->path, "%s/zinc-nvme-%ld-%08x-r%d.swap", abs ? abs : dir,
             (long)getpid(), (unsigned)tag, rank);
    free(abs);
    /* Created under a name the stale sweep does not take, locked, then renamed: a sweep in
     * another process never sees the file unlocked (the lock is the file's "in use"). */
    char making[4200];
    snprintf(making, sizeof making, "%s.making", f->path);
    zinc_status s = ZINC_OK;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        s = ZINC_ERR_IO;
        snprintf(err, errlen, "%s: %s", dir, stat(dir, &st) != 0 ? strerror(errno)
                                                                  : "not a directory");
        free(f);
        return s;
    }
    /* A full disk is an error of the run, not a signal that kills it. */
    signal(SIGXFSZ, SIG_IGN);
    f->fd = open(making, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    f->align = ZNVME_ALIGN;
    if (f->fd < 0 && errno == EINVAL) { /* no O_DIRECT here (tmpfs) */
        f->fd = open(making, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        f->align = 1;
    }
    /* A filesystem without locks still works: its files are then swept by pid. */
    int locked = f->fd < 0 || flock(f->fd, LOCK_EX | LOCK_NB) == 0 || no_locks(errno);
    if (f->fd >= 0 && (!locked || rename(making, f->path) != 0)) {
        snprintf(err, errlen, "%s: %s%s", f->path, locked ? "" : "locking: ", strerror(errno));
        unlink(making);
        close(f->fd);
        f->fd = -1;
        s = ZINC_ERR_IO;
    }
    if (f->fd >= 0) f->buffered = open(f->path, O_RDWR | O_CLOEXEC);
    if (s == ZINC_OK && (f->fd < 0 || f->buffered < 0)) {
        s = ZINC_ERR_IO;
        snprintf(err, errlen, "%s: %s", f->path, strerror(errno));
    } else if (s == ZINC_OK) { /* (a failed lock or rename keeps its own message) */
        int r = posix_fallocate(f->fd, 0, (off_t)bytes);
        if (r == EOPNOTSUPP || r == EINVAL) r = ftruncate(f->fd, (off_t)bytes) ? errno : 0;
        if (r) {
            s = io_status(r);
            snprintf(err, errlen, "%s: reserving %llu bytes: %s", f->path,
                     (unsigned long long)bytes, strerror(r));
        }
    }
    f->done = calloc((size_t)f->depth, 1);
    if (s == ZINC_OK && !f->done) {
        s = ZINC_ERR_NOMEM;
        snprintf(err, errlen, "%s: out of memory", f->path);
    }
    const char *want = getenv("ZINC_NVME_BACKEND");
    f->deferred = want && !strcmp(want, "deferred");
    const char *fault = getenv("ZINC_NVME_FAULT");
    f->fault_at = fault && *fault ? strtoll(fault, NULL, 10) : -1;
    const char *shrt = getenv("ZINC_NVME_SHORT");
    f->short_io = shrt && !strcmp(shrt, "1");
    if (s == ZINC_OK && !(f->req = calloc((size_t)f->depth, sizeof *f->req))) {
        s = ZINC_ERR_NOMEM;
        snprintf(err, errlen, "%s: out of memory", f->path);
    }
#ifdef ZINC_HAVE_URING
    if (s == ZINC_OK && !f->deferred && !(want && !strcmp(want, "pread")))
        f->uring = io_uring_queue_init((unsigned)f->depth, &f->ring, 0) == 0;
#endif
    if (s != ZINC_OK) {
        znvme_close(f);
        return s;
    }
    *out = f;
    return ZINC_OK;
}

size_t znvme_align(const znvme_t *f) { return f->align; }
const char *znvme_path(const znvme_t *f) { return f->path; }
const char *znvme_error(const znvme_t *f) { return f->err; }

const char *znvme_backend(const znvme_t *f)
{
    if (f->deferred) return "deferred";
#ifdef ZINC_HAVE_URING
    if (f->uring) return "io_uring";
#endif
    (void)f;
    return "pread";
}

static void mark_done(znvme_t *f, uint64_t ticket)
{
    f->done[ticket % (uint64_t)f->depth] = 1;
    while (f->done_below < f->issued && f->done[f->done_below % (uint64_t)f->depth]) {
        f->done[f->done_below % (uint64_t)f->depth] = 0;
        f->done_below++;
    }
}

#ifdef ZINC_HAVE_URING
/* Takes one completion (waiting for it). Short transfers are finished with pread/pwrite. */
static zinc_status reap_one(znvme_t *f)
{
    struct io_uring_cqe *cqe;
    int r;
    do r = io_uring_wait_cqe(&f->ring, &cqe);
    while (r == -EINTR);
    if (r < 0) return fail(f, ZINC_ERR_IO, "io_uring_wait_cqe: %s", strerror(-r));
    zreq *q = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&f->ring, cqe);
    zinc_status s = ZINC_OK;
    if (res < 0) {
        s = fail(f, io_status(-res), "%s of %zu bytes at %llu: %s", q->write ? "write" : "read",
                 q->n, (unsigned long long)q->off, strerror(-res));
    } else {
        /* ZINC_NVME_SHORT: as if only an odd count of bytes, about half, had moved; the rest is
         * moved again below (the same bytes: a read or write of it is idempotent). */
        if (f->short_io && q->n > 1) res = (int)((q->n / 2) | 1);
        if ((size_t)res < q->n) {
            /* The rest from where it stopped: by O_DIRECT while that stays aligned, else through
             * the buffered descriptor (an O_DIRECT call there fails with EINVAL), whose write
             * is flushed before an O_DIRECT read can look past the page cache */
            int direct = f->align <= 1 || (size_t)res % f->align == 0;
            s = transfer(f, direct ? f->fd : f->buffered, q->write, q->off + (uint64_t)res,
                         (char *)q->buf + res, q->n - (size_t)res);
            if (s == ZINC_OK && !direct && q->write && fdatasync(f->buffered) != 0)
                s = fail(f, io_status(errno), "fdatasync: %s", strerror(errno));
        }
    }
    if (s != ZINC_OK && f->pending == ZINC_OK) f->pending = s;
    mark_done(f, q->ticket);
    f->inflight--;
    return ZINC_OK;
}
#endif

/* The deferred backend: does the calls up to `ticket` that are not done yet, the newest first:
 * calls in flight together may complete in any order (io_uring does not order them), so this is
 * the order that breaks a caller who relies on one. */
static void run_deferred(znvme_t *f, uint64_t ticket)
{
    uint64_t end = ticket + 1 < f->issued ? ticket + 1 : f->issued;
    for (uint64_t t = end; t-- > f->done_below;) {
        const zreq *q = &f->req[t % (uint64_t)f->depth];
        zinc_status s = transfer(f, f->fd, q->write, q->off, q->buf, q->n);
        if (s != ZINC_OK && f->pending == ZINC_OK) f->pending = s;
    }
    for (uint64_t t = f->done_below; t < end; t++) mark_done(f, t);
}

static zinc_status submit(znvme_t *f, int write, uint64_t off, void *buf, size_t n,
                          uint64_t *ticket)
{
    if (f->align > 1 && (off % f->align || n % f->align || (uintptr_t)buf % f->align))
        return fail(f, ZINC_ERR_INVALID_ARG, "%s of %zu bytes at %llu from %p: not aligned to %zu "
                    "(O_DIRECT)", write ? "write" : "read", n, (unsigned long long)off, buf,
                    f->align);
    if (off > f->bytes || n > f->bytes - off)
        return fail(f, ZINC_ERR_INVALID_ARG, "%s of %zu bytes at %llu: past the file's %llu bytes",
                    write ? "write" : "read", n, (unsigned long long)off,
                    (unsigned long long)f->bytes);
    *ticket = f->issued;
    if ((int64_t)f->issued == f->fault_at) { /* the injected failure, reported at the wait */
        zinc_status s = fail(f, ZINC_ERR_IO, "%s of %zu bytes at %llu: %s (injected by "
                             "ZINC_NVME_FAULT)", write ? "write" : "read", n,
                             (unsigned long long)off, strerror(EIO));
        if (f->pending == ZINC_OK) f->pending = s;
        if (f->deferred) f->req[f->issued % (uint64_t)f->depth] = (zreq){f->issued, 0, NULL, 0, 0};
        f->issued++;
        if (!f->deferred) mark_done(f, *ticket);
        return ZINC_OK;
    }
#ifdef ZINC_HAVE_URING
    if (f->uring) {
        while (f->issued - f->done_below >= (uint64_t)f->depth) { /* the done ring's size */
            zinc_status s = reap_one(f);
            if (s != ZINC_OK) return s;
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
        if (!sqe) return fail(f, ZINC_ERR_NOMEM, "no io_uring submission entry");
        zreq *q = &f->req[f->issued % (uint64_t)f->depth];
        *q = (zreq){f->issued, off, buf, n, write};
        if (write) io_uring_prep_write(sqe, f->fd, buf, (unsigned)n, off);
        else io_uring_prep_read(sqe, f->fd, buf, (unsigned)n, off);
        io_uring_sqe_set_data(sqe, q);
        int r = io_uring_submit(&f->ring);
        if (r < 0) return fail(f, ZINC_ERR_IO, "io_uring_submit: %s", strerror(-r));
        f->issued++;
        f->inflight++;
        return ZINC_OK;
    }
#endif
    if (f->deferred) {
        /* the ring is full: the oldest call is done (alone), as a queue of that depth would */
        if (f->issued - f->done_below >= (uint64_t)f->depth) run_deferred(f, f->done_below);
        f->req[f->issued % (uint64_t)f->depth] = (zreq){f->issued, off, buf, n, write};
        f->issued++;
        return ZINC_OK;
    }
    f->issued++;
    zinc_status s = transfer(f, f->fd, write, off, buf, n);
    if (s != ZINC_OK && f->pending == ZINC_OK) f->pending = s;
    mark_done(f, *ticket);
    return ZINC_OK;
}

zinc_status znvme_read_async(znvme_t *f, uint64_t off, void *buf, size_t n, uint64_t *ticket)
{
    return submit(f, 0, off, buf, n, ticket);
}

zinc_status znvme_write_async(znvme_t *f, uint64_t off, const void *buf, size_t n,
                              uint64_t *ticket)
{
    return submit(f, 1, off, (void *)buf, n, ticket);
}

zinc_status znvme_wait(znvme_t *f, uint64_t ticket)
{
    if (ticket >= f->issued)
        return fail(f, ZINC_ERR_INVALID_ARG, "wait for ticket %llu: only %llu handed out",
                    (unsigned long long)ticket, (unsigned long long)f->issued);
    if (f->deferred) run_deferred(f, ticket);
#ifdef ZINC_HAVE_URING
    while (f->uring && f->done_below <= ticket) {
        zinc_status s = reap_one(f);
        if (s != ZINC_OK) return s;
    }
#endif
    zinc_status s = f->pending;
    f->pending = ZINC_OK;
    return s;
}

zinc_status znvme_pread(znvme_t *f, uint64_t off, void *buf, size_t n)
{
    if (off > f->bytes || n > f->bytes - off)
        return fail(f, ZINC_ERR_INVALID_ARG, "read of %zu bytes at %llu: past the file's %llu bytes",
                    n, (unsigned long long)off, (unsigned long long)f->bytes);
    return transfer(f, f->buffered, 0, off, buf, n);
}

zinc_status znvme_pwrite(znvme_t *f, uint64_t off, const void *buf, size_t n)
{
    if (off > f->bytes || n > f->bytes - off)
        return fail(f, ZINC_ERR_INVALID_ARG, "write of %zu bytes at %llu: past the file's %llu "
                    "bytes", n, (unsigned long long)off, (unsigned long long)f->bytes);
    zinc_status s = transfer(f, f->buffered, 1, off, (void *)buf, n);
    /* Written back before an O_DIRECT read of the range can look past the page cache. */
    if (s == ZINC_OK && f->align > 1 && fdatasync(f->buffered) != 0)
        s = fail(f, io_status(errno), "fdatasync: %s", strerror(errno));
    return s;
}

zinc_status znvme_reserve(znvme_t *f)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0) return fail(f, io_status(errno), "fstat: %s", strerror(errno));
    if ((uint64_t)st.st_size >= f->bytes) return ZINC_OK;
    int r = posix_fallocate(f->fd, 0, (off_t)f->bytes);
    if (r == EOPNOTSUPP || r == EINVAL) r = ftruncate(f->fd, (off_t)f->bytes) ? errno : 0;
    return r ? fail(f, io_status(r), "reserving %llu bytes again: %s",
                    (unsigned long long)f->bytes, strerror(r))
             : ZINC_OK;
}

void znvme_drain(znvme_t *f)
{
    if (f && f->issued) (void)znvme_wait(f, f->issued - 1);
}

void znvme_close(znvme_t *f)
{
    if (!f) return;
    znvme_drain(f);
#ifdef ZINC_HAVE_URING
    if (f->uring) io_uring_queue_exit(&f->ring);
#endif
    if (f->buffered >= 0) close(f->buffered);
    if (f->fd >= 0) {
        unlink(f->path); /* before the lock goes with the close: no sweep takes it first */
        close(f->fd);
    }
    free(f->done);
    free(f->req);
    free(f);
}

/* 1 when `name` is a scratch file's: zinc-nvme-<pid>-<8 hex>-r<rank>.swap (*locked_name = 1), or
 * the form before the lock, zinc-nvme-<pid>-r<rank>.swap (*locked_name = 0). */
static int scratch_name(const char *name, long *pid, int *locked_name, int *making)
{
    int rank, used = 0;
    unsigned tag;
    *making = 0;
    if (sscanf(name, "zinc-nvme-%ld-%8x-r%d.swap%n", pid, &tag, &rank, &used) == 3 &&
        (name[used] == 0 || !strcmp(name + used, ".making")) && *pid > 0) {
        *locked_name = 1;
        *making = name[used] != 0;
        return 1;
    }
    used = 0;
    if (sscanf(name, "zinc-nvme-%ld-r%d.swap%n", pid, &rank, &used) == 2 && name[used] == 0 &&
        *pid > 0) {
        *locked_name = 0;
        return 1;
    }
    return 0;
}

int znvme_remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long pid;
        int locked_name, making;
        if (!scratch_name(e->d_name, &pid, &locked_name, &making)) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        /* A live run holds its file's lock, whatever its pid means here (another container's
         * pid namespace, or this process's own pid after a crashed run that had it). The lock
         * taken, the file is a crashed run's; unlinked while held, so that no run starting now
         * can take it. A file we cannot open (another user's) stays. The older names (no lock
         * held) are judged by their pid: gone when no such process (a live one of another user
         * answers EPERM, and stays). */
        if (locked_name) {
            int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
            if (fd < 0 && errno == ELOOP) { /* a symlink: removed as a link, its target kept */
                if (unlink(p) == 0) removed++;
                continue;
            }
            if (fd < 0) continue;
            /* A name still being made is unlocked for an instant (open, then flock): one is
             * taken only when a minute old, a creation that crashed before its rename. */
            struct stat st;
            int young = making && (fstat(fd, &st) != 0 || time(NULL) - st.st_mtime < 60);
            /* (a filesystem without locks, where znvme_open went on without one: by the pid) */
            int stale = !young && (flock(fd, LOCK_EX | LOCK_NB) == 0 ||
                                   (no_locks(errno) && pid_gone(pid)));
            if (stale && unlink(p) == 0) removed++;
            close(fd);
            continue;
        }
        if (pid_gone(pid) && unlink(p) == 0) removed++;
    }
    closedir(d);
    return removed;
}
