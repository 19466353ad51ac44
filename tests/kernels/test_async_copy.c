/*
 * test_async_copy.c — the cpu device's emulation of asynchronous copies (device.h upload_async
 * ... copy_join) in its three ZINC_CPU_ASYNC_COPY modes, read at zdev_cpu_open:
 *   - deferred (default): a copy is done at the first copy_wait or copy_join covering it;
 *   - eager: when queued;
 *   - late: the device side at the join, a download's host side only at the covering copy_wait,
 *     and a host change of an upload's source or a download's destination before that wait (or
 *     of a download's device source before its join) aborts the process naming the copy.
 * The engine's offload tests run in each mode (tests/engine/tests.cmake); this one pins down what
 * each mode does with a few bytes, copies chained through the same host memory in queue order
 * (legal on a GPU's in-order copy stream, so late must not abort), the host-wait count (the same
 * in every mode), and each race late mode must abort on (in a forked child, whose stderr is read
 * back for the copy it names). An unknown mode is refused at open.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "kt.h"

#define N 64    /* bytes per buffer */

static zdev_t *open_mode(const char *mode)
{
    zdev_t *d = NULL;
    setenv("ZINC_CPU_ASYNC_COPY", mode, 1);
    ZT_OK(zdev_cpu_open(1, &d));
    unsetenv("ZINC_CPU_ASYNC_COPY");
    return d;
}

static int all(const unsigned char *p, unsigned char v)
{
    for (int i = 0; i < N; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* A download's host destination, and an upload's device destination, in each mode: when each
 * becomes visible, and the host waits counted. */
static void test_visibility(const char *mode)
{
    zdev_t *d = open_mode(mode);
    if (!d) return;
    const zdev_iface_t *D = d->iface;
    int eager = !strcmp(mode, "eager"), late = !strcmp(mode, "late");
    unsigned char *dev = D->alloc(d, N), *dev2 = D->alloc(d, N);
    unsigned char host[N], src[N];
    memset(dev, 7, N);
    memset(host, 1, N);
    memset(src, 9, N);
    uint64_t waits = d->host_waits, t = 0;

    ZT_OK(D->download_async(d, host, dev, N));
    ZT_OK(D->upload_async(d, dev2, src, N));
    ZT_CHECK(all(host, eager ? 7 : 1) && all(dev2, eager ? 9 : 0), "%s: after queueing", mode);
    ZT_OK(D->copy_join(d));
    /* The device side is done at the join in every mode; only late keeps the host side back. */
    ZT_CHECK(all(dev2, 9), "%s: upload's device destination after the join", mode);
    ZT_CHECK(all(host, late ? 1 : 7), "%s: download's host destination after the join", mode);
    memset(dev, 8, N);          /* device work after the join: the copy read the 7s before it */
    ZT_OK(D->copy_fence(d, &t));
    ZT_CHECK(t == 2, "%s: ticket %llu after two copies", mode, (unsigned long long)t);
    ZT_OK(D->copy_wait(d, t));
    ZT_CHECK(all(host, 7), "%s: download's host destination after the wait", mode);
    ZT_CHECK(d->host_waits == waits + 1, "%s: %llu host waits, want 1", mode,
             (unsigned long long)(d->host_waits - waits));
    ZT_OK(D->copy_wait(d, 0));  /* waits for nothing: not counted */
    ZT_OK(D->copy_wait(d, t));  /* already done: counted, as on cuda */
    ZT_CHECK(d->host_waits == waits + 2, "%s: ticket 0 counted as a wait", mode);
    ZT_CHECK(D->copy_wait(d, t + 1) == ZINC_ERR_INVALID_ARG, "%s: a ticket never handed out",
             mode);

    /* A wait with no join before it does both sides of the copies it covers, and only those. */
    memset(host, 1, N);
    ZT_OK(D->download_async(d, host, dev, N));
    ZT_OK(D->copy_fence(d, &t));
    ZT_OK(D->upload_async(d, dev2, host, N));
    ZT_OK(D->copy_wait(d, t));
    ZT_CHECK(all(host, 8), "%s: download after a wait without a join", mode);
    ZT_CHECK(all(dev2, eager ? 8 : 9), "%s: an upload the wait did not cover", mode);
    ZT_OK(D->copy_join(d));
    ZT_OK(D->copy_fence(d, &t));
    ZT_OK(D->copy_wait(d, t));
    ZT_CHECK(all(dev2, 8), "%s: that upload after its join and wait", mode);
    D->free(d, dev);
    D->free(d, dev2);
    zdev_close(d);
}

/* What offload's gradient accumulation does (engine/offload.c zoffload_reduce_to_host): micro-
 * step after micro-step, upload the host partial sum, add on the device, download it back into
 * the same host memory, each followed by a join and none by a wait until the end. On a GPU the
 * copy stream runs them in order, so each upload reads what the download before it wrote; late
 * mode lands that download early for it, and must not call the queue's own writes a race. */
static void test_chain(const char *mode)
{
    zdev_t *d = open_mode(mode);
    if (!d) return;
    const zdev_iface_t *D = d->iface;
    float *acc = D->alloc(d, N), *own = D->alloc(d, N), host[N / 4];
    memset(host, 0, sizeof host);
    for (int k = 1; k <= 5; k++) {
        for (int i = 0; i < N / 4; i++) own[i] = (float)(k * (i + 1));
        ZT_OK(D->upload_async(d, acc, host, N));
        ZT_OK(D->copy_join(d));
        ZT_OK(D->accumulate(d, acc, ZINC_DTYPE_FP32, own, ZINC_DTYPE_FP32, N / 4));
        ZT_OK(D->download_async(d, host, acc, N));
        ZT_OK(D->copy_join(d));
    }
    uint64_t t = 0;
    ZT_OK(D->copy_fence(d, &t));
    ZT_OK(D->copy_wait(d, t));
    int bad = 0;
    for (int i = 0; i < N / 4; i++) bad += host[i] != (float)(15 * (i + 1));
    ZT_CHECK(!bad, "%s: chained accumulation: %d of %d elements wrong", mode, bad, N / 4);
    D->free(d, acc);
    D->free(d, own);
    zdev_close(d);
}

/* Runs `race` in a child with a late-mode device; it must die of SIGABRT with a message holding
 * `want` on stderr. */
static void expect_abort(const char *what, void (*race)(zdev_t *d), const char *want)
{
    int fd[2];
    if (pipe(fd)) {
        ZT_CHECK(0, "%s: pipe failed", what);
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};      /* the abort is expected: no core file */
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fd[1], 2);
        close(fd[0]);
        zdev_t *d = open_mode("late");
        if (d) race(d);
        _exit(0);
    }
    close(fd[1]);
    char msg[2048] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ZT_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: the child did not abort (status "
             "%#x): %s", what, st, msg);
    ZT_CHECK(strstr(msg, want) != NULL, "%s: message lacks '%s': %s", what, want, msg);
}

static unsigned char g_host[N], g_src[N];

/* The host rewrites an upload's source after the join, before the covering wait. */
static void race_upload_source(zdev_t *d)
{
    void *dev = d->iface->alloc(d, N);
    uint64_t t;
    d->iface->download_async(d, g_host, dev, N);
    d->iface->upload_async(d, dev, g_src, N);
    d->iface->copy_join(d);
    g_src[3] ^= 1;
    d->iface->copy_fence(d, &t);
    d->iface->copy_wait(d, t);
}

/* The host writes a download's destination before the covering wait. */
static void race_download_destination(zdev_t *d)
{
    void *dev = d->iface->alloc(d, N);
    uint64_t t;
    d->iface->download_async(d, g_host, dev, N);
    d->iface->copy_join(d);
    g_host[N - 1] = 5;
    d->iface->copy_fence(d, &t);
    d->iface->copy_wait(d, t);
}

/* Device work queued after a download and before its join writes the download's source. */
static void race_download_source(zdev_t *d)
{
    unsigned char *dev = d->iface->alloc(d, N), *other = d->iface->alloc(d, N);
    memset(other, 4, N);
    d->iface->upload_async(d, dev, g_src, N);
    d->iface->download_async(d, g_host, dev, N);    /* the upload's write is in order: allowed */
    d->iface->copy(d, dev + 8, other, 8);
    d->iface->copy_join(d);
}

static void test_races(void)
{
    memset(g_src, 3, N);
    expect_abort("upload source", race_upload_source, "upload_async #2 (64 bytes): its host source");
    expect_abort("download destination", race_download_destination,
                 "download_async #1 (64 bytes): its host destination");
    expect_abort("download source", race_download_source,
                 "download_async #2 (64 bytes): its device source");
}

static void test_unknown_mode(void)
{
    zdev_t *d = NULL;
    setenv("ZINC_CPU_ASYNC_COPY", "lazy", 1);
    zinc_status s = zdev_cpu_open(1, &d);
    unsetenv("ZINC_CPU_ASYNC_COPY");
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && !d && strstr(zerr_thread_message(), "lazy") &&
                 strstr(zerr_thread_message(), "late"),
             "unknown mode: %s: %s", zinc_status_string(s), zerr_thread_message());
    if (d) zdev_close(d);
}

int main(void)
{
    const char *modes[] = {"deferred", "eager", "late"};
    for (int m = 0; m < 3; m++) {
        test_visibility(modes[m]);
        test_chain(modes[m]);
    }
    test_races();
    test_unknown_mode();
    return zt_finish("test_async_copy");
}
