/*
 * bootstrap.c — launch detection and the NCCL unique-id exchange (see bootstrap.h).
 *
 * The TCP exchange is deliberately tiny: rank 0 listens, each other rank connects, says who it
 * is (magic, rank, world size) and receives the 128-byte id. Rank 0 checks that every rank
 * 1..size-1 arrived exactly once with the same world size, so a mis-launched job fails at once
 * with a sentence instead of hanging inside ncclCommInitRank. Clients retry connecting because
 * rank 0 may start listening after them; everything is bounded by one deadline.
 */
#include "kernels/cuda/bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef ZINC_HAVE_MPI
#include <mpi.h>
#endif

#define HELLO_MAGIC "ZINCBOO2"
#define REPLY_MAGIC "ZINCIDv2"
#define HELLO_BYTES 20                       /* magic[8] rank[4] size[4] round[4], big-endian */
#define REPLY_BYTES (20 + ZBOOT_ID_BYTES)    /* magic[8] status[4] size[4] round[4] id[128] */

/* REPLY_LATER: the rank asks for a later exchange than rank 0 serves (it created its next engine
 * while rank 0 still hands out this one's id): it asks again. REPLY_ROUND: an earlier one, which
 * rank 0 has finished: the ranks did not create their engines in the same order. */
enum { REPLY_OK = 0, REPLY_SIZE = 1, REPLY_RANK = 2, REPLY_DUP = 3, REPLY_LATER = 4,
       REPLY_ROUND = 5 };

static zinc_status fail(char *err, size_t n, zinc_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static zinc_status fail(char *err, size_t n, zinc_status s, const char *fmt, ...)
{
    if (err && n) {
        int k = snprintf(err, n, "bootstrap: ");
        if (k < 0 || (size_t)k >= n) k = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, n - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ms_left(double deadline)
{
    double left = deadline - now_s();
    if (left <= 0) return 0;
    if (left > 1e6) return 1000000000;
    return (int)(left * 1000.0) + 1;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void put_u32(unsigned char *p, uint32_t x)
{
    p[0] = (unsigned char)(x >> 24); p[1] = (unsigned char)(x >> 16);
    p[2] = (unsigned char)(x >> 8);  p[3] = (unsigned char)x;
}

static uint32_t get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Moves exactly n bytes before the deadline: 0, or -1 with errno (ETIMEDOUT, EPIPE on EOF). */
static int io_all(int fd, void *buf, size_t n, double deadline, int writing)
{
    unsigned char *p = buf;
    while (n > 0) {
        struct pollfd pf = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int ms = ms_left(deadline);
        if (ms == 0) { errno = ETIMEDOUT; return -1; }
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = ETIMEDOUT; return -1; }
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k < 0) return -1;
        if (k == 0) { errno = EPIPE; return -1; }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- environment -------------------------------------------------------------------------- */

/* A whole-string decimal in [lo, hi]; -1 when absent, -2 when malformed. */
static long env_int(const char *name, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < lo || x > hi) return -2;
    return x;
}

static zinc_status need_int(const char *name, long lo, long hi, int *out, char *err, size_t n)
{
    long x = env_int(name, lo, hi);
    if (x == -1) return fail(err, n, ZINC_ERR_CONFIG, "%s is not set; the launcher must set it", name);
    if (x == -2)
        return fail(err, n, ZINC_ERR_CONFIG, "%s=\"%s\" is not an integer in [%ld, %ld]", name,
                    getenv(name), lo, hi);
    *out = (int)x;
    return ZINC_OK;
}

int zboot_slurm_first_host(const char *list, char *out, size_t n)
{
    if (!list || !*list || n == 0) return -1;
    size_t i = 0;
    while (list[i] && list[i] != ',' && list[i] != '[') i++;
    if (i == 0 || i >= n) return -1;
    memcpy(out, list, i);
    out[i] = 0;
    if (list[i] != '[') return 0;
    /* "prefix[003-010,...]": the first number of the range keeps its zero padding. */
    const char *q = list + i + 1;
    size_t k = 0;
    while (q[k] >= '0' && q[k] <= '9') k++;
    if (k == 0 || (q[k] != '-' && q[k] != ',' && q[k] != ']') || i + k >= n) return -1;
    memcpy(out + i, q, k);
    out[i + k] = 0;
    return 0;
}

static zinc_status tcp_endpoint(zboot_info *bi, int default_port, char *err, size_t n)
{
    long port = env_int("ZINC_BOOTSTRAP_PORT", 1, 65535);
    if (port == -2)
        return fail(err, n, ZINC_ERR_CONFIG, "ZINC_BOOTSTRAP_PORT=\"%s\" is not a port number",
                    getenv("ZINC_BOOTSTRAP_PORT"));
    if (port < 0) {
        port = env_int("MASTER_PORT", 1, 65535);
        if (port == -2)
            return fail(err, n, ZINC_ERR_CONFIG, "MASTER_PORT=\"%s\" is not a port number",
                        getenv("MASTER_PORT"));
        if (port > 0) {
            /* torchrun's agent hosts its own store on MASTER_PORT; take the next one. */
            const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
            if (agent && (!strcmp(agent, "True") || !strcmp(agent, "true") || !strcmp(agent, "1")))
                port = port < 65535 ? port + 1 : port - 1;
        } else if (default_port > 0) {
            port = default_port;
        } else {
            return fail(err, n, ZINC_ERR_CONFIG,
                        "MASTER_PORT is not set; set it (and MASTER_ADDR) to a free TCP port on "
                        "rank 0's host");
        }
    }
    bi->port = (int)port;
    return ZINC_OK;
}

static zinc_status detect_env(zboot_info *bi, char *err, size_t n)
{
    zinc_status s;
    if ((s = need_int("WORLD_SIZE", 1, 1 << 20, &bi->size, err, n))) return s;
    if ((s = need_int("RANK", 0, bi->size - 1, &bi->rank, err, n))) return s;
    long lr = env_int("LOCAL_RANK", 0, 1 << 20);
    if (lr == -2) return fail(err, n, ZINC_ERR_CONFIG, "LOCAL_RANK=\"%s\" is not an integer", getenv("LOCAL_RANK"));
    bi->local_rank = lr < 0 ? 0 : (int)lr;
    bi->method = "env";
    if (bi->size == 1) return ZINC_OK;
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr)
        return fail(err, n, ZINC_ERR_CONFIG,
                    "RANK/WORLD_SIZE are set but MASTER_ADDR is not; set MASTER_ADDR to rank 0's "
                    "host name (torchrun sets it)");
    if (strlen(addr) >= sizeof bi->host)
        return fail(err, n, ZINC_ERR_CONFIG, "MASTER_ADDR is longer than %zu bytes", sizeof bi->host - 1);
    snprintf(bi->host, sizeof bi->host, "%s", addr);
    return tcp_endpoint(bi, 0, err, n);
}

static zinc_status detect_slurm(zboot_info *bi, char *err, size_t n)
{
    zinc_status s;
    const char *nt = getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    if ((s = need_int(nt, 1, 1 << 20, &bi->size, err, n))) return s;
    if ((s = need_int("SLURM_PROCID", 0, bi->size - 1, &bi->rank, err, n))) return s;
    long lr = env_int("SLURM_LOCALID", 0, 1 << 20);
    if (lr == -2) return fail(err, n, ZINC_ERR_CONFIG, "SLURM_LOCALID=\"%s\" is not an integer", getenv("SLURM_LOCALID"));
    bi->local_rank = lr < 0 ? 0 : (int)lr;
    bi->method = "slurm";
    if (bi->size == 1) return ZINC_OK;
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr) {
        if (strlen(addr) >= sizeof bi->host)
            return fail(err, n, ZINC_ERR_CONFIG, "MASTER_ADDR is longer than %zu bytes", sizeof bi->host - 1);
        snprintf(bi->host, sizeof bi->host, "%s", addr);
    } else {
        const char *names[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
        const char *list = NULL;
        for (int i = 0; i < 3 && !list; i++) list = getenv(names[i]);
        if (zboot_slurm_first_host(list, bi->host, sizeof bi->host) != 0)
            return fail(err, n, ZINC_ERR_CONFIG,
                        "cannot find rank 0's host in SLURM_STEP_NODELIST=\"%s\"; set MASTER_ADDR",
                        list ? list : "");
    }
    /* Task 0 of a step runs on the step's first node; the port is derived from the job and step
     * so that two steps of one job do not collide. */
    long job = env_int("SLURM_JOB_ID", 0, 0x7fffffff);
    long step = env_int("SLURM_STEP_ID", 0, 0x7fffffff);
    int port = 20000 + (int)(((job < 0 ? 0 : job) + 7919 * (step < 0 ? 0 : step)) % 40000);
    return tcp_endpoint(bi, port, err, n);
}

static zinc_status detect_mpi(zboot_info *bi, char *err, size_t n)
{
#ifdef ZINC_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return fail(err, n, ZINC_ERR_COMM, "MPI_Init_thread failed");
        bi->mpi_initialised = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &bi->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &bi->size);
    /* Local rank from the node's shared-memory communicator: works with any MPI launcher. */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, bi->rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &bi->local_rank);
        MPI_Comm_free(&node);
    }
    bi->method = "mpi";
    return ZINC_OK;
#else
    return fail(err, n, ZINC_ERR_UNSUPPORTED,
                "launched by mpirun, but this zinc was built without MPI; rebuild with "
                "libopenmpi-dev installed, or launch with srun or torchrun");
#endif
}

zinc_status zboot_detect(zboot_info *bi, char *err, size_t n)
{
    memset(bi, 0, sizeof *bi);
    bi->size = 1;
    bi->method = "single";
    const char *force = getenv("ZINC_BOOTSTRAP");
    if (force && *force) {
        if (!strcmp(force, "mpi")) return detect_mpi(bi, err, n);
        if (!strcmp(force, "slurm")) return detect_slurm(bi, err, n);
        if (!strcmp(force, "env")) return detect_env(bi, err, n);
        if (!strcmp(force, "single")) return ZINC_OK;
        return fail(err, n, ZINC_ERR_CONFIG,
                    "ZINC_BOOTSTRAP=\"%s\" is not one of mpi, slurm, env, single", force);
    }
    /* mpirun (Open MPI, or MPICH's hydra) first; then torchrun's variables, which are more
     * specific than Slurm's (torchrun may itself run under srun). A Slurm batch shell has
     * SLURM_PROCID too, but no SLURM_STEP_ID: it is not a launch of N tasks. */
    if (getenv("OMPI_COMM_WORLD_SIZE") || (getenv("PMI_SIZE") && getenv("MPI_LOCALRANKID")))
        return detect_mpi(bi, err, n);
    if (getenv("RANK") || getenv("WORLD_SIZE")) return detect_env(bi, err, n);
    if (getenv("SLURM_PROCID") && getenv("SLURM_STEP_ID")) return detect_slurm(bi, err, n);
    return ZINC_OK;
}

/* ---- TCP exchange ------------------------------------------------------------------------- */

zinc_status zboot_tcp_listen(const char *host, int port, int *fd_out, int *port_out, char *err,
                             size_t n)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = host ? AF_UNSPEC : AF_INET6;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int fd = -1, e = 0;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        if (attempt == 1) {
            if (host) break;
            hints.ai_family = AF_INET;    /* no IPv6 on this host: plain IPv4 */
        }
        int g = getaddrinfo(host, ps, &hints, &res);
        if (g != 0) {
            if (attempt == 0 && !host) continue;
            return fail(err, n, ZINC_ERR_COMM, "cannot resolve %s: %s", host ? host : "*",
                        gai_strerror(g));
        }
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) { e = errno; continue; }
            int one = 1, zero = 0;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (a->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
                e = errno;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(res);
        res = NULL;
    }
    if (fd < 0)
        return fail(err, n, ZINC_ERR_COMM,
                    "rank 0 cannot listen on %s:%d: %s; choose a free port with MASTER_PORT or "
                    "ZINC_BOOTSTRAP_PORT", host ? host : "*", port, strerror(e));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return ZINC_OK;
}

zinc_status zboot_tcp_serve(int fd, int size, uint32_t round,
                            const unsigned char id[ZBOOT_ID_BYTES], double timeout_s, char *err,
                            size_t n)
{
    double deadline = now_s() + timeout_s;
    unsigned char *seen = calloc((size_t)size, 1);
    if (!seen) { close(fd); return fail(err, n, ZINC_ERR_NOMEM, "out of memory"); }
    int got = 0;
    zinc_status s = ZINC_OK;
    while (got < size - 1) {
        struct pollfd pf = {fd, POLLIN, 0};
        int ms = ms_left(deadline);
        int r = ms ? poll(&pf, 1, ms) : 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            char missing[160] = "";
            size_t k = 0;
            for (int i = 1; i < size && k + 12 < sizeof missing; i++)
                if (!seen[i]) k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "", i);
            s = fail(err, n, ZINC_ERR_TIMEOUT,
                     "rank 0 waited %.0f s for %d of %d ranks (missing: %s%s); check that every "
                     "rank was launched with the same MASTER_ADDR/MASTER_PORT and can reach this host",
                     timeout_s, size - 1 - got, size - 1, missing,
                     k + 12 >= sizeof missing ? ", ..." : "");
            break;
        }
        int c = accept(fd, NULL, NULL);
        if (c < 0) continue;
        unsigned char hello[HELLO_BYTES], reply[REPLY_BYTES];
        /* A stray connection (port scanner, a rank of an older job) gets a short leash. */
        double d = now_s() + 10.0 < deadline ? now_s() + 10.0 : deadline;
        if (io_all(c, hello, sizeof hello, d, 0) != 0 || memcmp(hello, HELLO_MAGIC, 8) != 0) {
            close(c);
            continue;
        }
        uint32_t rank = get_u32(hello + 8), their = get_u32(hello + 12);
        uint32_t their_round = get_u32(hello + 16);
        uint32_t status = REPLY_OK;
        if (their != (uint32_t)size) status = REPLY_SIZE;
        else if (rank == 0 || rank >= (uint32_t)size) status = REPLY_RANK;
        else if (their_round > round) status = REPLY_LATER;
        else if (their_round < round) status = REPLY_ROUND;
        else if (seen[rank]) status = REPLY_DUP;
        memset(reply, 0, sizeof reply);
        memcpy(reply, REPLY_MAGIC, 8);
        put_u32(reply + 8, status);
        put_u32(reply + 12, (uint32_t)size);
        put_u32(reply + 16, round);
        if (status == REPLY_OK) memcpy(reply + 20, id, ZBOOT_ID_BYTES);
        int sent = io_all(c, reply, sizeof reply, deadline, 1) == 0;
        close(c);
        /* Not this exchange's business: the asker retries, or reports the order it broke. */
        if (status == REPLY_LATER || status == REPLY_ROUND) continue;
        if (status == REPLY_SIZE) {
            s = fail(err, n, ZINC_ERR_MISMATCH,
                     "rank %u says the world has %u ranks, rank 0 has %d; every rank must be "
                     "launched with the same world size", rank, their, size);
            break;
        }
        if (status != REPLY_OK) {
            s = fail(err, n, ZINC_ERR_MISMATCH, "%s rank %u connected (world size %d); check the "
                     "launcher's RANK/SLURM_PROCID", status == REPLY_DUP ? "a second" : "invalid",
                     rank, size);
            break;
        }
        if (sent) {
            seen[rank] = 1;
            got++;
        }
    }
    free(seen);
    close(fd);
    return s;
}

/* One connection attempt, bounded by `deadline`: a connected socket, or -1 with errno. */
static int connect_once(const struct addrinfo *a, double deadline)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) { int e = errno; close(fd); errno = e; return -1; }
        struct pollfd pf = {fd, POLLOUT, 0};
        int ms = ms_left(deadline);
        if (ms > 2000) ms = 2000;
        int r = poll(&pf, 1, ms);
        int so = 0;
        socklen_t sl = sizeof so;
        if (r <= 0) { close(fd); errno = ETIMEDOUT; return -1; }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
        if (so) { close(fd); errno = so; return -1; }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

zinc_status zboot_tcp_fetch(const char *host, int port, int rank, int size, uint32_t round,
                            unsigned char id[ZBOOT_ID_BYTES], double timeout_s, char *err,
                            size_t n)
{
    double deadline = now_s() + timeout_s, pause = 0.05;
    char ps[16], last[160] = "no attempt";
    uint32_t later = 0;           /* the exchange rank 0 served when it last said "later" */
    snprintf(ps, sizeof ps, "%d", port);
    unsigned char hello[HELLO_BYTES], reply[REPLY_BYTES];
    memcpy(hello, HELLO_MAGIC, 8);
    put_u32(hello + 8, (uint32_t)rank);
    put_u32(hello + 12, (uint32_t)size);
    put_u32(hello + 16, round);
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(host, ps, &hints, &res);
        if (g != 0) {
            snprintf(last, sizeof last, "cannot resolve %s: %s", host, gai_strerror(g));
            if (g != EAI_AGAIN && g != EAI_SYSTEM)
                return fail(err, n, ZINC_ERR_CONFIG, "rank %d: %s; check MASTER_ADDR", rank, last);
        }
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            int fd = connect_once(a, deadline);
            if (fd < 0) {
                snprintf(last, sizeof last, "connect: %s", strerror(errno));
                continue;
            }
            int ok = io_all(fd, hello, sizeof hello, deadline, 1) == 0 &&
                     io_all(fd, reply, sizeof reply, deadline, 0) == 0;
            int e = errno;
            close(fd);
            if (!ok) {
                snprintf(last, sizeof last, "exchange: %s", strerror(e));
                continue;
            }
            if (memcmp(reply, REPLY_MAGIC, 8) != 0) {
                snprintf(last, sizeof last, "something else answers on that port");
                continue;
            }
            uint32_t status = get_u32(reply + 8), theirs = get_u32(reply + 12);
            uint32_t served = get_u32(reply + 16);
            if (status == REPLY_LATER) {
                later = served;
                break;
            }
            freeaddrinfo(res);
            if (status == REPLY_ROUND)
                return fail(err, n, ZINC_ERR_MISMATCH,
                            "rank %d asked rank 0 at %s:%d for the NCCL id of its engine #%u, but "
                            "rank 0 is at #%u: every rank must create its engines in the same "
                            "order", rank, host, port, round, served);
            if (status == REPLY_SIZE)
                return fail(err, n, ZINC_ERR_MISMATCH,
                            "rank %d has world size %d but rank 0 at %s:%d has %u; every rank "
                            "must be launched with the same world size", rank, size, host, port, theirs);
            if (status != REPLY_OK)
                return fail(err, n, ZINC_ERR_MISMATCH,
                            "rank 0 at %s:%d refused rank %d (%s)", host, port, rank,
                            status == REPLY_DUP ? "another process has the same rank" : "invalid rank");
            memcpy(id, reply + 20, ZBOOT_ID_BYTES);
            return ZINC_OK;
        }
        if (res) freeaddrinfo(res);
        if (ms_left(deadline) == 0 && later)
            return fail(err, n, ZINC_ERR_TIMEOUT,
                        "rank %d could not get the NCCL id of its engine #%u from rank 0 at %s:%d "
                        "within %.0f s: rank 0 was still at exchange %u (its engine #%u); every "
                        "rank must create its engines in the same order", rank, round, host,
                        port, timeout_s, later, later);
        if (ms_left(deadline) == 0)
            return fail(err, n, ZINC_ERR_TIMEOUT,
                        "rank %d could not get the NCCL id from rank 0 at %s:%d within %.0f s "
                        "(last: %s); check that rank 0 started and MASTER_ADDR/MASTER_PORT "
                        "point at it", rank, host, port, timeout_s, last);
        double left = deadline - now_s();
        sleep_s(pause < left ? pause : (left > 0 ? left : 0));
        if (pause < 1.0) pause *= 2;
    }
}

zinc_status zboot_share_id(const zboot_info *bi, unsigned char id[ZBOOT_ID_BYTES],
                           double timeout_s, char *err, size_t n)
{
    if (bi->size <= 1) return ZINC_OK;
    if (!strcmp(bi->method, "mpi")) {
#ifdef ZINC_HAVE_MPI
        /* MPI has its own failure handling; a vanished rank ends the job through mpirun. */
        if (MPI_Bcast(id, ZBOOT_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            return fail(err, n, ZINC_ERR_COMM, "MPI_Bcast of the NCCL id failed");
        return ZINC_OK;
#else
        return fail(err, n, ZINC_ERR_UNSUPPORTED, "this build has no MPI");
#endif
    }
    /* Each engine of the process bootstraps its own comm, every rank in the same order: the
     * exchange's number tells a rank's next engine from this one at rank 0's port. */
    static atomic_uint rounds;
    uint32_t round = atomic_fetch_add(&rounds, 1) + 1;
    if (bi->rank != 0)
        return zboot_tcp_fetch(bi->host, bi->port, bi->rank, bi->size, round, id, timeout_s, err,
                               n);
    int fd, port;
    zinc_status s = zboot_tcp_listen(NULL, bi->port, &fd, &port, err, n);
    if (s) return s;
    return zboot_tcp_serve(fd, bi->size, round, id, timeout_s, err, n);
}
