/*
 * test_bootstrap.c — the NCCL-id bootstrap without a GPU: launch detection from the environment
 * (torchrun, Slurm, forced methods, malformed values), the Slurm node-list parser, and the TCP
 * exchange between real processes on 127.0.0.1 (forked ranks must all end with rank 0's 128
 * random bytes), including the failures a mis-launched job must report instead of hanging.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda/bootstrap.h"
#include "testutil.h"

static const char *launch_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_ID",
    "SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
    "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALRANKID", "ZINC_BOOTSTRAP", "ZINC_BOOTSTRAP_PORT"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof launch_vars / sizeof *launch_vars; i++) unsetenv(launch_vars[i]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_nodelist(void)
{
    char h[64];
    ZT_CHECK(zboot_slurm_first_host("gpu[003-010,012],cpu1", h, sizeof h) == 0 && !strcmp(h, "gpu003"), "%s", h);
    ZT_CHECK(zboot_slurm_first_host("node7", h, sizeof h) == 0 && !strcmp(h, "node7"), "%s", h);
    ZT_CHECK(zboot_slurm_first_host("a1,b2", h, sizeof h) == 0 && !strcmp(h, "a1"), "%s", h);
    ZT_CHECK(zboot_slurm_first_host("n[5]", h, sizeof h) == 0 && !strcmp(h, "n5"), "%s", h);
    ZT_CHECK(zboot_slurm_first_host("n[x]", h, sizeof h) == -1, "malformed accepted");
    ZT_CHECK(zboot_slurm_first_host("", h, sizeof h) == -1, "empty accepted");
    ZT_CHECK(zboot_slurm_first_host("verylongname", h, 4) == -1, "overflow accepted");
}

static void test_detect(void)
{
    char err[512];
    zboot_info bi;

    clear_env();
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(!strcmp(bi.method, "single") && bi.rank == 0 && bi.size == 1, "%s %d/%d", bi.method, bi.rank, bi.size);

    setenv("RANK", "2", 1); setenv("WORLD_SIZE", "4", 1); setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "host-a", 1); setenv("MASTER_PORT", "29500", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(!strcmp(bi.method, "env") && bi.rank == 2 && bi.size == 4 && bi.local_rank == 1 &&
             !strcmp(bi.host, "host-a") && bi.port == 29500,
             "%s %d/%d lr %d %s:%d", bi.method, bi.rank, bi.size, bi.local_rank, bi.host, bi.port);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(bi.port == 29501, "torchrun agent store: port %d, want 29501", bi.port);
    setenv("ZINC_BOOTSTRAP_PORT", "31000", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(bi.port == 31000, "ZINC_BOOTSTRAP_PORT ignored: %d", bi.port);

    setenv("RANK", "4", 1);
    ZT_CHECK(zboot_detect(&bi, err, sizeof err) == ZINC_ERR_CONFIG && strstr(err, "RANK"), "rank 4 of 4: %s", err);
    setenv("RANK", "1x", 1);
    ZT_CHECK(zboot_detect(&bi, err, sizeof err) == ZINC_ERR_CONFIG, "RANK=1x accepted");
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    ZT_CHECK(zboot_detect(&bi, err, sizeof err) == ZINC_ERR_CONFIG && strstr(err, "MASTER_ADDR"), "%s", err);

    clear_env();
    setenv("SLURM_PROCID", "5", 1); setenv("SLURM_NTASKS", "8", 1); setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_STEP_ID", "0", 1); setenv("SLURM_JOB_ID", "1234", 1);
    setenv("SLURM_STEP_NODELIST", "dgx[07-08]", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(!strcmp(bi.method, "slurm") && bi.rank == 5 && bi.size == 8 && bi.local_rank == 1 &&
             !strcmp(bi.host, "dgx07") && bi.port >= 20000 && bi.port < 60000,
             "%s %d/%d lr %d %s:%d", bi.method, bi.rank, bi.size, bi.local_rank, bi.host, bi.port);
    int derived = bi.port;
    setenv("MASTER_ADDR", "head", 1); setenv("MASTER_PORT", "4000", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(!strcmp(bi.host, "head") && bi.port == 4000, "%s:%d", bi.host, bi.port);
    unsetenv("MASTER_ADDR"); unsetenv("MASTER_PORT");
    setenv("SLURM_STEP_ID", "1", 1);
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(bi.port != derived, "two steps of one job share port %d", bi.port);
    /* A batch shell (no step) is a single process even though SLURM_PROCID is set. */
    unsetenv("SLURM_STEP_ID");
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    ZT_CHECK(!strcmp(bi.method, "single") && bi.size == 1, "batch shell taken as %s", bi.method);

    clear_env();
    setenv("ZINC_BOOTSTRAP", "carrier-pigeon", 1);
    ZT_CHECK(zboot_detect(&bi, err, sizeof err) == ZINC_ERR_CONFIG, "unknown method accepted");
    clear_env();
}

static int free_port(void)
{
    char err[256];
    int fd, port;
    if (zboot_tcp_listen("127.0.0.1", 0, &fd, &port, err, sizeof err) != ZINC_OK) return -1;
    close(fd);
    return port;
}

/* The whole path through zboot_detect/zboot_share_id with torchrun variables: `size` processes
 * make `rounds` exchanges one after the other, as each engine of a process (two models, as a
 * GAN's) bootstraps its own NCCL comm; the ranks > 0 start first (they must retry until rank 0
 * listens). With `slow_rank` > 0 that rank arrives 300 ms late to the first exchange, so the
 * others are already asking for the second one while rank 0 still serves the first: their
 * early hello must wait for its round, not count as a second rank of this one. */
static void test_exchange(int size, int rounds, int slow_rank)
{
    enum { MAX_ROUNDS = 3 };
    unsigned char id[MAX_ROUNDS][ZBOOT_ID_BYTES];
    zt_rng r = {(uint64_t)time(NULL) * 7919u + (uint64_t)getpid()};
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < ZBOOT_ID_BYTES; i++) id[k][i] = (unsigned char)zt_next(&r);
    int port = free_port();
    ZT_CHECK(port > 0, "no free port");
    if (port <= 0) return;
    char ps[16], ws[16];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(ws, sizeof ws, "%d", size);

    int pipes[64][2];
    pid_t pids[64];
    for (int rk = 1; rk < size; rk++) {
        if (pipe(pipes[rk]) != 0) { ZT_CHECK(0, "pipe"); return; }
        pids[rk] = fork();
        if (pids[rk] == 0) {
            char rs[16], err[512];
            snprintf(rs, sizeof rs, "%d", rk);
            clear_env();
            setenv("RANK", rs, 1); setenv("WORLD_SIZE", ws, 1); setenv("LOCAL_RANK", rs, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1); setenv("MASTER_PORT", ps, 1);
            if (rk == slow_rank) usleep(600000);    /* rank 0 starts after 300 ms */
            zboot_info bi;
            unsigned char got[MAX_ROUNDS * ZBOOT_ID_BYTES + 1];
            memset(got, 0, sizeof got);
            zinc_status s = zboot_detect(&bi, err, sizeof err);
            for (int k = 0; k < rounds && !s; k++)
                s = zboot_share_id(&bi, got + k * ZBOOT_ID_BYTES, 10.0, err, sizeof err);
            if (s) fprintf(stderr, "rank %d: %s\n", rk, err);
            got[MAX_ROUNDS * ZBOOT_ID_BYTES] = (unsigned char)s;
            ssize_t w = write(pipes[rk][1], got, sizeof got);
            _exit(w == (ssize_t)sizeof got ? 0 : 3);
        }
        close(pipes[rk][1]);
    }
    usleep(300000);
    char err[512];
    clear_env();
    setenv("RANK", "0", 1); setenv("WORLD_SIZE", ws, 1); setenv("LOCAL_RANK", "0", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1); setenv("MASTER_PORT", ps, 1);
    zboot_info bi;
    ZT_OK(zboot_detect(&bi, err, sizeof err));
    for (int k = 0; k < rounds; k++) {
        unsigned char mine[ZBOOT_ID_BYTES];
        memcpy(mine, id[k], sizeof mine);
        zinc_status s = zboot_share_id(&bi, mine, 10.0, err, sizeof err);
        ZT_CHECK(s == ZINC_OK, "rank 0, exchange %d of %d: %s", k + 1, rounds, err);
        ZT_CHECK(!memcmp(mine, id[k], sizeof mine), "rank 0's id changed");
    }
    for (int rk = 1; rk < size; rk++) {
        unsigned char got[MAX_ROUNDS * ZBOOT_ID_BYTES + 1];
        ssize_t n = read(pipes[rk][0], got, sizeof got);
        close(pipes[rk][0]);
        int st = 0;
        waitpid(pids[rk], &st, 0);
        ZT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d exited with %d", rk, st);
        int whole = n == (ssize_t)sizeof got;
        ZT_CHECK(whole && got[MAX_ROUNDS * ZBOOT_ID_BYTES] == 0, "rank %d: status %d", rk,
                 n > 0 ? got[MAX_ROUNDS * ZBOOT_ID_BYTES] : -1);
        for (int k = 0; k < rounds; k++)
            ZT_CHECK(whole && !memcmp(got + k * ZBOOT_ID_BYTES, id[k], ZBOOT_ID_BYTES),
                     "rank %d got another id in exchange %d of %d", rk, k + 1, rounds);
    }
    clear_env();
}

/* Runs one fetch in a child; returns its status through the exit code. */
static pid_t fetch_round_child(int port, int rank, int size, uint32_t round, double timeout,
                               const char *want_in_error)
{
    pid_t p = fork();
    if (p == 0) {
        unsigned char got[ZBOOT_ID_BYTES];
        char err[512] = "";
        zinc_status s = zboot_tcp_fetch("127.0.0.1", port, rank, size, round, got, timeout, err,
                                        sizeof err);
        if (s && want_in_error && !strstr(err, want_in_error)) {
            fprintf(stderr, "rank %d: the error lacks \"%s\": %s\n", rank, want_in_error, err);
            _exit(100);
        }
        _exit((int)s);
    }
    return p;
}

static pid_t fetch_child(int port, int rank, int size, double timeout)
{
    return fetch_round_child(port, rank, size, 1, timeout, NULL);
}

static int child_status(pid_t p)
{
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_failures(void)
{
    unsigned char id[ZBOOT_ID_BYTES] = {1, 2, 3};
    char err[512];
    int fd, port;

    /* A rank that never arrives: rank 0 times out and names it. */
    ZT_OK(zboot_tcp_listen("127.0.0.1", 0, &fd, &port, err, sizeof err));
    pid_t c1 = fetch_child(port, 1, 3, 5.0);
    double t0 = now_s();
    zinc_status s = zboot_tcp_serve(fd, 3, 1, id, 0.7, err, sizeof err);
    double dt = now_s() - t0;
    ZT_CHECK(s == ZINC_ERR_TIMEOUT && strstr(err, "missing: 2"), "status %d: %s", s, err);
    ZT_CHECK(dt < 3.0, "timeout of 0.7 s took %.2f s", dt);
    ZT_CHECK(child_status(c1) == ZINC_OK, "the rank that arrived did not get the id");

    /* Nobody listening: the client gives up at its deadline with a sentence. */
    int p = free_port();
    unsigned char got[ZBOOT_ID_BYTES];
    t0 = now_s();
    s = zboot_tcp_fetch("127.0.0.1", p, 1, 2, 1, got, 0.5, err, sizeof err);
    dt = now_s() - t0;
    ZT_CHECK(s == ZINC_ERR_TIMEOUT && strstr(err, "MASTER_ADDR"), "status %d: %s", s, err);
    ZT_CHECK(dt < 3.0, "client timeout of 0.5 s took %.2f s", dt);

    /* Different world sizes: both sides say so. */
    ZT_OK(zboot_tcp_listen("127.0.0.1", 0, &fd, &port, err, sizeof err));
    pid_t c2 = fetch_child(port, 1, 4, 5.0);
    s = zboot_tcp_serve(fd, 3, 1, id, 5.0, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_MISMATCH && strstr(err, "world"), "status %d: %s", s, err);
    ZT_CHECK(child_status(c2) == ZINC_ERR_MISMATCH, "client with the wrong size was not refused");

    /* Two processes claiming rank 1. */
    ZT_OK(zboot_tcp_listen("127.0.0.1", 0, &fd, &port, err, sizeof err));
    pid_t c3 = fetch_child(port, 1, 3, 5.0);
    pid_t c4 = fetch_child(port, 1, 3, 5.0);
    s = zboot_tcp_serve(fd, 3, 1, id, 5.0, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_MISMATCH && strstr(err, "second"), "duplicate rank: status %d: %s", s, err);
    int a = child_status(c3), b = child_status(c4);
    ZT_CHECK((a == ZINC_OK && b == ZINC_ERR_MISMATCH) || (a == ZINC_ERR_MISMATCH && b == ZINC_OK),
             "duplicate rank: clients ended with %d and %d", a, b);

    /* Rank 0 serves its second exchange: a rank asking for the first (it created one engine
     * fewer) is told the order differs, one asking for the third retries until its deadline
     * and says where rank 0 was; neither counts, and the rank of the second round gets it. */
    ZT_OK(zboot_tcp_listen("127.0.0.1", 0, &fd, &port, err, sizeof err));
    pid_t server = fork();
    if (server == 0) _exit((int)zboot_tcp_serve(fd, 2, 2, id, 20.0, err, sizeof err));
    close(fd);
    /* one after the other, each to its end: no timing decides the order */
    ZT_CHECK(child_status(fetch_round_child(port, 1, 2, 1, 10.0, "same order")) ==
                 ZINC_ERR_MISMATCH, "a rank a round behind was not refused");
    ZT_CHECK(child_status(fetch_round_child(port, 1, 2, 3, 1.0, "still at exchange 2")) ==
                 ZINC_ERR_TIMEOUT, "a rank a round ahead did not time out saying why");
    ZT_CHECK(child_status(fetch_round_child(port, 1, 2, 2, 10.0, NULL)) == ZINC_OK,
             "the rank of round 2 did not get the id");
    ZT_CHECK(child_status(server) == ZINC_OK, "rank 0 did not end round 2 well after strays of "
             "rounds 1 and 3");
}

int main(void)
{
    test_nodelist();
    test_detect();
    test_exchange(2, 1, 0);
    test_exchange(8, 1, 0);
    test_exchange(3, 3, 2);     /* three engines per process, rank 2 late to the first */
    test_exchange(8, 2, 5);
    test_failures();
    return zt_finish("bootstrap");
}
