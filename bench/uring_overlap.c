/*
 * uring_overlap.c — does this disk read and write at once faster than one after the other?
 * (the question behind the NVMe step's pipeline, docs/engine.md "NVMe"). Keeps DEPTH reads of
 * FILE_R and/or DEPTH writes of FILE_W of 1 MiB each in flight with io_uring and O_DIRECT (the
 * store's request shape), MB requests of each, and prints the wall time.
 *
 *     cc -O2 -o /tmp/uring_overlap bench/uring_overlap.c -luring
 *     dd if=/dev/urandom of=DIR/a bs=1M count=1024; cp DIR/a DIR/b
 *     /tmp/uring_overlap DIR/a DIR/b 8 1024 read|write|both
 *
 * On a disk that overlaps them, "both" takes about the longer of "read" and "write"; on one
 * that does not, their sum. The files must hold MB MiB.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1u << 20)

static void queue(struct io_uring *ring, int fd, int write, char *buf, long i)
{
    struct io_uring_sqe *s = io_uring_get_sqe(ring);
    if (write) io_uring_prep_write(s, fd, buf, MIB, (uint64_t)i * MIB);
    else io_uring_prep_read(s, fd, buf, MIB, (uint64_t)i * MIB);
    io_uring_sqe_set_data64(s, (uint64_t)write);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s FILE_R FILE_W DEPTH MB read|write|both\n", argv[0]);
        return 2;
    }
    int depth = atoi(argv[3]);
    long mb = atol(argv[4]);
    int rd = strcmp(argv[5], "write") != 0, wr = strcmp(argv[5], "read") != 0;
    int fd[2] = {open(argv[1], O_RDONLY | O_DIRECT), open(argv[2], O_WRONLY | O_DIRECT)};
    char *buf = NULL;
    struct io_uring ring;
    if (depth < 1 || mb < 1 || fd[0] < 0 || fd[1] < 0 ||
        posix_memalign((void **)&buf, 4096, (size_t)MIB * 2 * (size_t)depth) ||
        io_uring_queue_init(2 * (unsigned)depth, &ring, 0)) {
        perror("setup");
        return 1;
    }
    memset(buf, 1, (size_t)MIB * 2 * (size_t)depth);
    long next[2] = {rd ? 0 : mb, wr ? 0 : mb}, left = (rd ? mb : 0) + (wr ? mb : 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < depth; i++)
        for (int k = 0; k < 2; k++)
            if (next[k] < mb) queue(&ring, fd[k], k, buf + (size_t)(k * depth + i) * MIB, next[k]++);
    io_uring_submit(&ring);
    while (left) {
        struct io_uring_cqe *c;
        if (io_uring_wait_cqe(&ring, &c)) return 1;
        int k = (int)io_uring_cqe_get_data64(c);
        if (c->res != (int)MIB) {
            fprintf(stderr, "%s: %d\n", k ? "write" : "read", c->res);
            return 1;
        }
        io_uring_cqe_seen(&ring, c);
        left--;
        if (next[k] < mb) {
            queue(&ring, fd[k], k, buf + (size_t)k * depth * MIB, next[k]++);
            io_uring_submit(&ring);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %.3f s (%ld MiB read, %ld MiB written, %d of each in flight)\n", argv[5],
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
           rd ? mb : 0, wr ? mb : 0, depth);
    return 0;
}
