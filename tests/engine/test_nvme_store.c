/*
 * test_nvme_store.c — engine/nvme_store.c, the NVMe offload's scratch file (issue 39):
 *   - asynchronous writes of many aligned blocks, more than the queue holds, read back
 *     asynchronously into other buffers: the same bytes; waits cover every earlier ticket;
 *     reads and writes of other blocks issued in turn without a wait, and a wait in the middle;
 *   - positioned reads and writes of unaligned ranges agree with the asynchronous ones;
 *   - misaligned and out-of-range calls are refused naming the file; a full file system (a
 *     file-size limit) is an I/O error naming the path at the wait, not a crash;
 *   - the file is removed at close; stale files of gone processes are removed, a live
 *     process's kept; a missing directory is refused naming it. The lock decides, not the pid:
 *     an unlocked file under this very process's pid (a crashed run whose pid a rerun got, as
 *     in a container where both are pid 1) is removed, a locked one under a dead pid (a live
 *     run of another pid namespace) kept, and two stores of one rank in one process each get
 *     a file of their own, which the sweep leaves while they are open.
 *   - the deferred backend (tests' ordering check) leaves a read's buffer untouched until a wait
 *     covers it, and does the calls in order.
 * Run three times by CTest: with io_uring where the build has it, with ZINC_NVME_BACKEND=pread
 * and with ZINC_NVME_BACKEND=deferred.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "engine/nvme_store.h"
#include "testutil.h"

#define BLOCK (64 * 1024)
#define NBLOCK 40

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

static int short_path_ran;   /* ZINC_NVME_SHORT: a round trip on io_uring with O_DIRECT */

static void test_round_trip(const char *dir)
{
    char err[512];
    znvme_t *f = NULL;
    zinc_status s = znvme_open(dir, 3, (uint64_t)BLOCK * NBLOCK, 4, &f, err, sizeof err);
    ZT_CHECK(s == ZINC_OK, "open: %s", err);
    if (s != ZINC_OK) return;
    printf("backend %s, alignment %zu, %s\n", znvme_backend(f), znvme_align(f), znvme_path(f));
    short_path_ran |= !strcmp(znvme_backend(f), "io_uring") && znvme_align(f) > 1;
    unsigned char *w = NULL, *r = NULL;
    ZT_CHECK(posix_memalign((void **)&w, 4096, (size_t)BLOCK * NBLOCK) == 0 &&
             posix_memalign((void **)&r, 4096, (size_t)BLOCK * NBLOCK) == 0, "buffers");
    for (int b = 0; b < NBLOCK; b++) fill(w + (size_t)b * BLOCK, BLOCK, (unsigned)b);
    memset(r, 0, (size_t)BLOCK * NBLOCK);
    uint64_t t = 0, first = 0;
    /* 40 writes through a queue of 4: submission has to take completions as it goes. */
    for (int b = 0; b < NBLOCK; b++) {
        s = znvme_write_async(f, (uint64_t)b * BLOCK, w + (size_t)b * BLOCK, BLOCK, &t);
        ZT_CHECK(s == ZINC_OK, "write %d: %s", b, znvme_error(f));
        if (b == 0) first = t;
    }
    ZT_CHECK(znvme_wait(f, t) == ZINC_OK, "wait for the writes: %s", znvme_error(f));
    ZT_CHECK(znvme_wait(f, first) == ZINC_OK, "a wait for an earlier ticket is done at once");
    for (int b = NBLOCK - 1; b >= 0; b--) { /* reversed: out of order on the device */
        s = znvme_read_async(f, (uint64_t)b * BLOCK, r + (size_t)b * BLOCK, BLOCK, &t);
        ZT_CHECK(s == ZINC_OK, "read %d: %s", b, znvme_error(f));
    }
    ZT_CHECK(znvme_wait(f, t) == ZINC_OK, "wait for the reads: %s", znvme_error(f));
    ZT_CHECK(memcmp(w, r, (size_t)BLOCK * NBLOCK) == 0, "the blocks read back differ");

    /* Reads of the first half and writes of new bytes over the second, issued in turn with no
     * wait between (one ring of aio.queue_depth calls holds both kinds): a
     * wait for a read in the middle covers every call before it, of both kinds, and no later
     * write changed what an earlier read of another block got. */
    unsigned char *w2 = NULL;
    ZT_CHECK(posix_memalign((void **)&w2, 4096, (size_t)BLOCK * NBLOCK) == 0, "buffer");
    for (int b = 0; b < NBLOCK; b++) fill(w2 + (size_t)b * BLOCK, BLOCK, (unsigned)(b + 1000));
    memset(r, 0, (size_t)BLOCK * NBLOCK);
    uint64_t mid = 0, tw[NBLOCK / 2] = {0};
    for (int i = 0; i < NBLOCK / 2; i++) {
        int b = NBLOCK / 2 + i;
        s = znvme_read_async(f, (uint64_t)i * BLOCK, r + (size_t)i * BLOCK, BLOCK, &t);
        ZT_CHECK(s == ZINC_OK, "read %d: %s", i, znvme_error(f));
        if (i == NBLOCK / 4) mid = t;
        s = znvme_write_async(f, (uint64_t)b * BLOCK, w2 + (size_t)b * BLOCK, BLOCK, &tw[i]);
        ZT_CHECK(s == ZINC_OK, "write %d: %s", b, znvme_error(f));
    }
    ZT_CHECK(znvme_wait(f, mid) == ZINC_OK, "wait for a read in the middle: %s", znvme_error(f));
    ZT_CHECK(memcmp(r, w, (size_t)BLOCK * (NBLOCK / 4 + 1)) == 0,
             "a read the middle wait covers is not complete");
    ZT_CHECK(znvme_wait(f, tw[NBLOCK / 2 - 1]) == ZINC_OK, "wait for the last write: %s",
             znvme_error(f));
    ZT_CHECK(memcmp(r, w, (size_t)BLOCK * (NBLOCK / 2)) == 0, "the first half read back differs");
    for (int b = NBLOCK / 2; b < NBLOCK; b++) {
        s = znvme_read_async(f, (uint64_t)b * BLOCK, r + (size_t)b * BLOCK, BLOCK, &t);
        ZT_CHECK(s == ZINC_OK, "read %d: %s", b, znvme_error(f));
    }
    ZT_CHECK(znvme_wait(f, t) == ZINC_OK && memcmp(r + (size_t)BLOCK * (NBLOCK / 2),
                                                   w2 + (size_t)BLOCK * (NBLOCK / 2),
                                                   (size_t)BLOCK * (NBLOCK / 2)) == 0,
             "the second half's new bytes read back differ");
    memcpy(w + (size_t)BLOCK * (NBLOCK / 2), w2 + (size_t)BLOCK * (NBLOCK / 2),
           (size_t)BLOCK * (NBLOCK / 2));     /* the file's bytes now, for the checks below */
    free(w2);

    /* Unaligned positioned calls see and change the same bytes. */
    unsigned char small[1000], back[1000];
    ZT_CHECK(znvme_pread(f, 12345, small, sizeof small) == ZINC_OK &&
             memcmp(small, w + 12345, sizeof small) == 0, "pread of an unaligned range");
    fill(small, sizeof small, 99);
    ZT_CHECK(znvme_pwrite(f, 70001, small, sizeof small) == ZINC_OK, "pwrite: %s", znvme_error(f));
    s = znvme_read_async(f, BLOCK, r, BLOCK, &t);      /* block 1 holds 70001.. */
    ZT_CHECK(s == ZINC_OK && znvme_wait(f, t) == ZINC_OK &&
             memcmp(r + (70001 - BLOCK), small, sizeof small) == 0,
             "an asynchronous read after a positioned write sees it");
    ZT_CHECK(znvme_pread(f, 70001, back, sizeof back) == ZINC_OK &&
             memcmp(back, small, sizeof back) == 0, "pread after pwrite");

    /* Refusals name the file. */
    if (znvme_align(f) > 1) {
        s = znvme_read_async(f, 100, r, BLOCK, &t);
        ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(znvme_error(f), "not aligned") &&
                 strstr(znvme_error(f), znvme_path(f)), "misaligned: %d '%s'", s, znvme_error(f));
    }
    s = znvme_write_async(f, (uint64_t)BLOCK * NBLOCK, w, BLOCK, &t);
    ZT_CHECK(s == ZINC_ERR_INVALID_ARG && strstr(znvme_error(f), "past the file"),
             "past the end: %d '%s'", s, znvme_error(f));
    char path[4096];
    snprintf(path, sizeof path, "%s", znvme_path(f));
    ZT_CHECK(exists(path), "the file exists while open");
    znvme_close(f);
    ZT_CHECK(!exists(path), "close removes %s", path);
    free(w);
    free(r);
}

/* A file-size limit below what a write needs: EFBIG, as a full disk gives ENOSPC. */
static void test_full(const char *dir)
{
    char err[512];
    znvme_t *f = NULL;
    zinc_status s = znvme_open(dir, 4, 1 << 20, 4, &f, err, sizeof err);
    ZT_CHECK(s == ZINC_OK, "open: %s", err);
    if (s != ZINC_OK) return;
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 256 * 1024;     /* the file is 1 MiB: writes past 256 KiB fail */
    setrlimit(RLIMIT_FSIZE, &lim);
    unsigned char *w = NULL;
    ZT_CHECK(posix_memalign((void **)&w, 4096, BLOCK) == 0, "buffer");
    memset(w, 7, BLOCK);
    uint64_t t = 0;
    s = znvme_write_async(f, 512 * 1024, w, BLOCK, &t);
    if (s == ZINC_OK) s = znvme_wait(f, t);
    setrlimit(RLIMIT_FSIZE, &old);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(znvme_error(f), znvme_path(f)) &&
             strstr(znvme_error(f), "write"), "a write past the limit: %d '%s'", s,
             znvme_error(f));
    /* The store goes on: an allowed write and its read-back still work. */
    s = znvme_write_async(f, 0, w, BLOCK, &t);
    ZT_CHECK(s == ZINC_OK && znvme_wait(f, t) == ZINC_OK, "after the error: %s", znvme_error(f));
    znvme_close(f);
    free(w);
}

static void test_open_and_stale(const char *dir)
{
    char err[512], p[4096];
    znvme_t *f = NULL;
    zinc_status s = znvme_open("/nonexistent-zinc-dir", 0, 4096, 4, &f, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_IO && f == NULL && strstr(err, "/nonexistent-zinc-dir"),
             "a missing directory: %d '%s'", s, err);
    /* pid 2^22 + 17 is above the kernel's default pid_max: no such process. */
    snprintf(p, sizeof p, "%s/zinc-nvme-4194321-r0.swap", dir);
    FILE *g = fopen(p, "w");
    if (g) fclose(g);
    char live[4096], other[4096];
    snprintf(live, sizeof live, "%s/zinc-nvme-%ld-r9.swap", dir, (long)getpid());
    snprintf(other, sizeof other, "%s/zinc-nvme-4194321-r0.swap.keep", dir);
    if ((g = fopen(live, "w"))) fclose(g);
    if ((g = fopen(other, "w"))) fclose(g);
    int n = znvme_remove_stale(dir);
    ZT_CHECK(n == 1 && !exists(p) && exists(live) && exists(other),
             "stale files: removed %d; gone %d, live kept %d, other name kept %d", n, !exists(p),
             exists(live), exists(other));
    unlink(live);
    unlink(other);

    /* The locked names. Unlocked under our own pid: a crashed run's (it was "File exists"). */
    char mine[4096], held[4096];
    snprintf(mine, sizeof mine, "%s/zinc-nvme-%ld-0badc0de-r0.swap", dir, (long)getpid());
    snprintf(held, sizeof held, "%s/zinc-nvme-4194321-12345678-r1.swap", dir);
    if ((g = fopen(mine, "w"))) fclose(g);
    int hfd = open(held, O_RDWR | O_CREAT, 0600);
    ZT_CHECK(hfd >= 0 && flock(hfd, LOCK_EX) == 0, "locking %s: %s", held, strerror(errno));
    n = znvme_remove_stale(dir);
    ZT_CHECK(n == 1 && !exists(mine) && exists(held), "locked names: removed %d; our pid's "
             "unlocked file gone %d, a dead pid's locked file kept %d", n, !exists(mine),
             exists(held));
    unlink(held);
    if (hfd >= 0) close(hfd);

    /* A creation that crashed before its rename leaves NAME.making: taken when a minute old,
     * left while young (a creation in progress is unlocked for an instant). */
    char old_making[4200], new_making[4200];
    snprintf(old_making, sizeof old_making, "%s/zinc-nvme-4194321-0000abcd-r0.swap.making", dir);
    snprintf(new_making, sizeof new_making, "%s/zinc-nvme-4194321-0000abce-r0.swap.making", dir);
    if ((g = fopen(old_making, "w"))) fclose(g);
    if ((g = fopen(new_making, "w"))) fclose(g);
    struct timeval ago[2] = {{time(NULL) - 120, 0}, {time(NULL) - 120, 0}};
    utimes(old_making, ago);
    n = znvme_remove_stale(dir);
    ZT_CHECK(n == 1 && !exists(old_making) && exists(new_making), "unfinished creations: removed "
             "%d; the old one gone %d, the young one kept %d", n, !exists(old_making),
             exists(new_making));
    unlink(new_making);

    /* Two stores of rank 0 in one process: two files, both kept by a sweep while open, both
     * removed by their close. */
    znvme_t *a = NULL, *b = NULL;
    s = znvme_open(dir, 0, 8192, 4, &a, err, sizeof err);
    ZT_CHECK(s == ZINC_OK, "first store: %s", err);
    s = znvme_open(dir, 0, 8192, 4, &b, err, sizeof err);
    ZT_CHECK(s == ZINC_OK, "a second store of the same rank: %s", err);
    if (a && b) {
        ZT_CHECK(strcmp(znvme_path(a), znvme_path(b)) != 0, "both stores at %s", znvme_path(a));
        n = znvme_remove_stale(dir);
        ZT_CHECK(n == 0 && exists(znvme_path(a)) && exists(znvme_path(b)),
                 "a sweep beside two open stores removed %d", n);
    }
    snprintf(p, sizeof p, "%s", a ? znvme_path(a) : "");
    znvme_close(a);
    znvme_close(b);
    int left = 0;
    DIR *dd = opendir(dir);
    for (struct dirent *x; dd && (x = readdir(dd));) left += !strncmp(x->d_name, "zinc-nvme-", 10);
    if (dd) closedir(dd);
    ZT_CHECK(left == 0, "%d scratch file(s) left after both closes", left);
}

/* ZINC_NVME_BACKEND=deferred: nothing happens before the wait that covers it, and calls in
 * flight together complete newest first. */
static void test_deferred(const char *dir)
{
    const char *want = getenv("ZINC_NVME_BACKEND");
    if (!want || strcmp(want, "deferred") != 0) return;
    char err[512];
    znvme_t *f = NULL;
    ZT_CHECK(znvme_open(dir, 5, 4 * 4096, 8, &f, err, sizeof err) == ZINC_OK, "open: %s", err);
    if (!f) return;
    ZT_CHECK(strcmp(znvme_backend(f), "deferred") == 0, "backend %s", znvme_backend(f));
    unsigned char *a = NULL, *b = NULL;
    ZT_CHECK(posix_memalign((void **)&a, 4096, 4096) == 0 &&
             posix_memalign((void **)&b, 4096, 4096) == 0, "buffers");
    memset(a, 7, 4096);
    memset(b, 1, 4096);
    uint64_t tw, tr;
    ZT_CHECK(znvme_write_async(f, 4096, a, 4096, &tw) == ZINC_OK, "write");
    ZT_CHECK(znvme_read_async(f, 4096, b, 4096, &tr) == ZINC_OK, "read");
    ZT_CHECK(b[0] == 1 && b[4095] == 1, "a deferred read filled its buffer before the wait");
    memset(a, 9, 4096); /* a rewrite before the write's wait: the write takes the new bytes */
    ZT_CHECK(znvme_wait(f, tr) == ZINC_OK, "wait: %s", znvme_error(f));
    /* newest first: the read ran before the write, and saw the file's zeros */
    ZT_CHECK(b[0] == 0 && b[4095] == 0, "the read should have run before the write (%d)", b[0]);
    ZT_CHECK(znvme_read_async(f, 4096, b, 4096, &tr) == ZINC_OK && znvme_wait(f, tr) == ZINC_OK &&
                 b[0] == 9 && b[4095] == 9,
             "a read after the write's wait sees the rewritten bytes (%d)", b[0]);
    free(a);
    free(b);
    znvme_close(f);
}

int main(void)
{
    char dir[] = "/tmp/zinc-nvme-test-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip(dir);
    /* A directory on disk too, where O_DIRECT applies (/tmp may be tmpfs). */
    char disk[] = "zinc-nvme-test-XXXXXX";
    if (mkdtemp(disk)) {
        test_round_trip(disk);
        rmdir(disk);
    }
    test_full(dir);
    test_open_and_stale(dir);
    test_deferred(dir);
    rmdir(dir);
    const char *shrt = getenv("ZINC_NVME_SHORT");
    if (shrt && !strcmp(shrt, "1") && !short_path_ran) {
        /* the short-transfer path needs both: without them this run checked nothing of it */
        printf("SKIP: ZINC_NVME_SHORT: no round trip here ran on io_uring with O_DIRECT\n");
        zt_finish("test_nvme_store");
        return 77;
    }
    return zt_finish("test_nvme_store");
}
