/*
 * comm_mpi.c — the `mpi` comm backend: one process per rank, over a duplicate of
 * MPI_COMM_WORLD (so our messages never meet the application's). Built when CMake finds MPI;
 * comm_mpi_absent.c stands in otherwise.
 *
 * Same bits as `local`: a reduction is never left to MPI's own (order-unspecified) reduce.
 * Every rank receives the parts of its own segment from all peers into a scratch buffer and sums
 * them with zreduce_sum in rank order, exactly as the local backend does.
 *
 *   reduce_scatter  rounds of a non-blocking all-to-all (Isend/Irecv with every peer) that move
 *                   chunk k of every segment to its owner through a fixed scratch buffer
 *                   (allocated at create: no allocation per call), then zreduce_sum of the chunk
 *   all_gather      MPI_Iallgatherv in place (byte counts; point-to-point rounds beyond 2 GiB)
 *   all_reduce      the reduce-scatter and all-gather pair over near-equal segments (any n)
 *   broadcast       MPI_Ibcast in chunks of at most 1 GiB;  barrier: MPI_Ibarrier
 *
 * Nothing ever blocks inside MPI: every wait is a polling loop (MPI_Testall, then a yield or a
 * short sleep) with a deadline. Past it the call returns ZINC_ERR_TIMEOUT, the comm is marked
 * failed, and the other ranks are told (below). The loop also probes for a message with the
 * reserved abort tag: zcomm abort (and a timeout) sends one to every other rank, so theirs return
 * ZINC_ERR_ABORTED within a poll interval, with the reason. A failed comm fails every later call;
 * requests still in flight are cancelled where MPI allows it (point-to-point) and otherwise left
 * alone, so after a failure the process should wind down rather than keep using MPI heavily.
 * The loop also watches for exit notices, which the end of the job (zm_end_job, run inside
 * MPI_Finalize) sends to every peer: a rank that ended while this one waits for it fails the
 * wait within ZM_EXIT_GRACE_S.
 *
 * Ranks out of step: every rank must make the same collectives in the same order. One that
 * skipped a call (a load or save some ranks made) or added one meets the others' next call at the
 * same count but in another operation. Point-to-point data is tagged with its collective's count
 * and operation (zm_data_tag), so MPI never matches it to another call's; the ranks then wait.
 * A wait that has stalled ZM_WHERE_AFTER_S sends each peer a "where" notice once (this comm, the
 * collective's count, its operation and bytes), and from then on, as does every collective's
 * start, reads the peers' notices: one that names another operation or size than this rank made
 * at that count (the current one, or one of its last ZM_HISTORY) fails the world at once
 * (ZINC_ERR_MISMATCH, both calls named) instead of at the timeout (300 s by default). A correct
 * program pays nothing for it until a wait stalls, and then a few small messages per stall.
 *
 * Threads: MPI is initialised with MPI_THREAD_SERIALIZED when we initialise it, so collectives
 * (of every comm of the process, not only of one) run on one thread at a time. Abort may come
 * from any thread: while any comm of the process is inside a collective, it only marks its comm;
 * the thread in that collective sends the notices from its polling loop (or as it leaves), so
 * two threads never call MPI at once. Should they (two threads in collectives of two engines,
 * say), the first time is logged as an error and every time counted (zmpi_thread_stats).
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "shard/comm.h"

enum {
    ZM_TAG_DATA = 8192,          /* segments of reduce-scatter / all-gather rounds: this tag
                                    plus 4 x (the collective's count modulo ZM_TAG_DATA_SPAN)
                                    plus its operation's code (zm_op_code), so that a peer's data
                                    of another collective is never taken for this one's (a rank
                                    out of step: MPI truncated the message, or a shorter one left
                                    stale bytes in a sum) */
    ZM_TAG_DATA_SPAN = 4096,     /* (the top tag, 24575, is within the 32767 MPI guarantees) */
    ZM_TAG_ABORT = 7099,         /* the abort notice; reserved */
    ZM_TAG_EXIT = 7098,          /* the exit notice, on zm_exit_comm (below) */
    ZM_TAG_WHERE = 7097,         /* a stalled collective's "where" notice (the note at the top) */
};

/* A wait stalled this long sends its "where" notices and reads the peers'. Long enough that a
 * collective a correct job completes sends none; short against any timeout. */
#define ZM_WHERE_AFTER_S 1.0
/* The collectives each rank remembers (zm_ctx.history) to compare a notice of an earlier count */
#define ZM_HISTORY 64

/* A rank that receives a peer's exit notice while waiting in a collective gives the peer's data
 * already sent (the collective the peer finished just before leaving) this long to arrive, then
 * fails the collective: the peer will never join another. */
#define ZM_EXIT_GRACE_S 2.0
/* The longest zm_end_job's barrier waits after a failure: a failed comm's timeout beyond it,
 * or a failure with no timeout of its own (a world-level wait a peer's exit ended), gets this. */
#define ZM_FINALIZE_GRACE_MAX_S 60.0

/* The per-peer scratch chunk of reduce-scatter rounds: 2 MiB, less for big worlds so that the
 * whole scratch stays within 64 MiB. A multiple of 8 so that every dtype divides it. */
#define ZM_CHUNK_MAX ((size_t)2 << 20)
#define ZM_CHUNK_MIN ((size_t)64 << 10)
#define ZM_SCRATCH_MAX ((size_t)64 << 20)
/* All-gathers whose buffer is at most this many bytes use MPI_Iallgatherv (int byte counts and
 * displacements); bigger ones go point to point. Overridable to test the second path. */
#ifndef ZM_AG_COLL_MAX
#define ZM_AG_COLL_MAX ((size_t)INT_MAX)
#endif
#define ZM_AG_CHUNK ((size_t)64 << 20)     /* bytes per message of point-to-point all-gathers */
#define ZM_BCAST_CHUNK ((size_t)1 << 30)

typedef struct zm_notice {
    int32_t status;              /* ZINC_ERR_ABORTED; ZINC_ERR_TIMEOUT from a rank that timed out */
    int32_t rank;
    uint64_t seq;                /* the sender's collective count when it failed */
    char why[440];
} zm_notice;

/* "Where" notice: the collective a rank's stalled wait is in. Small, so that MPI sends it eagerly
 * (its send completes whether or not the peer ever reads it). */
typedef struct zm_where {
    uint64_t gen;                /* the comm: zm_comms_made at its creation, the same on every
                                    rank (each comm is a collective duplicate of the world); a
                                    notice a freed comm left unread, met by a later comm that
                                    reused its id, is not that comm's */
    uint64_t seq;                /* the sender's collective count */
    uint64_t bytes;              /* the collective's buffer bytes (every rank passes the same) */
    int32_t rank;
    char what[20];               /* the operation: "broadcast", "reduce_scatter", ... */
} zm_where;

typedef struct zm_ctx {
    MPI_Comm comm;
    zinc_status failed;          /* ZINC_OK, or the comm is dead and `why` says why */
    char why[460];
    uint64_t seq;                /* collectives entered */
    struct zm_call {             /* the last ZM_HISTORY collectives (zm_call_at): the current
                                    one's operation (a literal) and bytes, and those a peer's
                                    "where" notice of an earlier count is compared with */
        uint64_t seq;
        const char *what;
        uint64_t bytes;
    } history[ZM_HISTORY];
    uint64_t gen;                /* this comm's zm_where.gen */

    char *scratch;               /* [(size-1) * chunk] bytes: one chunk per peer */
    size_t chunk;                /* bytes per peer per round */
    MPI_Request *reqs;           /* [2 * size] */
    int *req_peer;               /* [2 * size] peer of each request (timeout messages) */
    const void **in;             /* [size] reduction operands */
    size_t *off, *len;           /* [size] segments of the current collective (elements) */
    int *counts, *displs;        /* [size] byte counts / displacements for Iallgatherv */

    zm_notice *notice;           /* our outgoing notice (lives while its sends are in flight) */
    MPI_Request *notice_reqs;    /* [size] */
    int notice_sent;

    zm_where *where;             /* our outgoing "where" notice, and its sends */
    MPI_Request *where_reqs;     /* [size] */
    uint64_t where_seq;          /* the collective it was last sent for (0: none) */

    /* Guarded by zm_calls_mu (process-wide, below): */
    zcomm_t *self;
    struct zm_ctx *next_live;    /* the process's live mpi comms */
    int in_call;                 /* a thread is inside a collective of this comm */
    int abort_pending;           /* abort() came while a collective ran: a poller sends */
    char abort_why[400];
} zm_ctx;

/* Converts an MPI error at the call site: marks the comm failed and returns ZINC_ERR_COMM with
 * the call, file:line and MPI's own message. Needs `c` in scope; used inside zinc_status
 * functions. */
#define ZINC_MPI_CHECK(call)                                                                  \
    do {                                                                                      \
        int zm_rc_ = (call);                                                                  \
        if (zm_rc_ != MPI_SUCCESS) return zm_mpi_error(c, #call, __FILE__, __LINE__, zm_rc_); \
    } while (0)

/* Copies a message into a smaller buffer, cutting it short if needed. */
static void zm_copy(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n) l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

/* The operations' codes in the data tags (1-3; 0 for those without point-to-point data). */
static int zm_op_code(const char *what)
{
    return !strcmp(what, "all_reduce") ? 1 : !strcmp(what, "reduce_scatter") ? 2
           : !strcmp(what, "all_gather") ? 3 : 0;
}

/* This rank's record of its collective number `seq` (the current one: x->seq). */
static const struct zm_call *zm_call_at(const zm_ctx *x, uint64_t seq)
{
    return &x->history[seq % ZM_HISTORY];
}

/* The tag of the current collective's point-to-point data (ZM_TAG_DATA's note). */
static int zm_data_tag(const zm_ctx *x)
{
    return ZM_TAG_DATA + 4 * (int)(x->seq % ZM_TAG_DATA_SPAN) +
           zm_op_code(zm_call_at(x, x->seq)->what);
}

/* ---- threads: one inside MPI at a time, process-wide (the note at the top) ------------------ */

static pthread_mutex_t zm_calls_mu = PTHREAD_MUTEX_INITIALIZER;
static zm_ctx *zm_live;               /* every live mpi comm of the process */
static int zm_calls;                  /* comms inside a collective */
static atomic_int zm_pending;         /* comms with abort_pending set (pollers look when > 0) */
static atomic_int zm_inside;          /* threads inside zinc's MPI calls */
static atomic_long zm_overlaps;       /* times a thread came in while another was inside */
static atomic_int zm_thread_level = -1; /* MPI_Query_thread at the first comm's creation (set
                                           under zm_calls_mu, read by zm_enter without it) */
static uint64_t zm_comms_made;        /* mpi comms created by this process (zm_where.gen) */

/* Entering and leaving code that calls MPI. A second thread inside at once is a misuse under
 * MPI_THREAD_SERIALIZED (two engines stepped from two threads, say): said once, counted always. */
static void zm_enter(const char *what)
{
    if (atomic_fetch_add(&zm_inside, 1) == 0) return;
    if (atomic_fetch_add(&zm_overlaps, 1) == 0 &&
        atomic_load(&zm_thread_level) != MPI_THREAD_MULTIPLE)
        zlog(ZLOG_ERROR, "comm", -1, "%s: two threads are inside zinc's MPI calls at once; MPI "
             "runs at a thread level below MPI_THREAD_MULTIPLE, so run the collectives of every "
             "engine of a process on one thread at a time", what);
}

static void zm_leave(void) { atomic_fetch_sub(&zm_inside, 1); }

void zmpi_thread_stats(int *in_collective, long *overlaps)
{
    pthread_mutex_lock(&zm_calls_mu);
    if (in_collective) *in_collective = zm_calls;
    pthread_mutex_unlock(&zm_calls_mu);
    if (overlaps) *overlaps = atomic_load(&zm_overlaps);
}

/* Set once any comm of this process fails (timeout, abort, MPI error): the process-wide verdict
 * zm_end_job acts on, since the comm itself is destroyed before the world is. */
static atomic_int zm_process_failed;
static char zm_process_why[460];
static double zm_process_grace_s;            /* the failed comm's timeout, or the grace given */
static pthread_mutex_t zm_process_mu = PTHREAD_MUTEX_INITIALIZER;

void zmpi_note_failure(zinc_status s, const char *why, double grace_s)
{
    pthread_mutex_lock(&zm_process_mu);
    if (!atomic_load(&zm_process_failed)) {
        /* Cut to fit: the reason travels in a fixed-size exit notice. */
        size_t n = strlen(why);
        if (n > sizeof zm_process_why - 1) n = sizeof zm_process_why - 1;
        memcpy(zm_process_why, why, n);
        zm_process_why[n] = 0;
        zm_process_grace_s = grace_s;
        atomic_store(&zm_process_failed, (int)s);
    }
    pthread_mutex_unlock(&zm_process_mu);
}

/* The process's own duplicate of MPI_COMM_WORLD, made in zmpi_init and used only at the end of
 * the job: the exit notices and the barrier of zm_end_job. Its barrier cannot be matched
 * against another collective on MPI_COMM_WORLD that a rank waits in or left pending (an engine's
 * comm duplicate, a world broadcast), which MPI leaves undefined; and it is never freed, so a
 * late notice never meets a later communicator that reused its id. */
static MPI_Comm zm_exit_comm = MPI_COMM_NULL;
static pthread_mutex_t zm_exit_mu = PTHREAD_MUTEX_INITIALIZER;

/* Exit notices: zm_end_job sends one to every peer before its barrier, so that a peer still
 * waiting in a collective learns that this rank is gone (it returned from the script, called
 * sys.exit after catching an error, or failed) instead of waiting out comm_timeout_s, or forever
 * where there is no timeout (zm_wait_world). The message is this process's failure (the text
 * zmpi_note_failure recorded) or empty: who sent it is the news. Seen by the pollers of every
 * comm (zm_poll_exits, on the one thread inside MPI) and drained by zm_end_job. */
static int zm_exit_size;
static unsigned char *zm_exited;           /* [zm_exit_size] that peer's notice was received */
static int zm_exit_rank = -1;              /* the first peer seen leaving, or -1 */
static char zm_exit_why[sizeof zm_process_why]; /* its failure, or "" */
static double zm_exit_deadline;            /* when waiting for it stops */
static MPI_Request *zm_exit_reqs;          /* [zm_exit_size] this rank's notices */

/* Receives the exit notices that came; returns the first peer seen leaving, or -1. */
static int zm_poll_exits(void)
{
    if (zm_exit_comm == MPI_COMM_NULL || !zm_exited) return -1;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, ZM_TAG_EXIT, zm_exit_comm, &flag, &st) != MPI_SUCCESS ||
            !flag)
            break;
        char why[sizeof zm_exit_why] = "";
        if (MPI_Recv(why, (int)sizeof why, MPI_BYTE, st.MPI_SOURCE, ZM_TAG_EXIT, zm_exit_comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        why[sizeof why - 1] = 0;
        zm_exited[st.MPI_SOURCE] = 1;
        if (zm_exit_rank < 0) {
            zm_exit_rank = st.MPI_SOURCE;
            memcpy(zm_exit_why, why, sizeof why);
            zm_exit_deadline = MPI_Wtime() + ZM_EXIT_GRACE_S;
        }
    }
    return zm_exit_rank;
}

/* Memory MPI may still use after a wait gave up on it: the buffer of an abort notice whose sends
 * did not complete, the new communicator of an MPI_Comm_idup or the staging of an MPI_Ibcast
 * that a peer's exit left pending (collective requests cannot be cancelled). Freed by
 * zmpi_finalize after MPI_Finalize, when nothing can touch it; a process whose MPI someone else
 * finalizes keeps it to the end. If even the list's node cannot be had, the block is left
 * allocated (a leak, never a use after free). */
typedef struct zm_kept {
    struct zm_kept *next;
    void *block;
} zm_kept;
static zm_kept *zm_kept_list;
static pthread_mutex_t zm_kept_mu = PTHREAD_MUTEX_INITIALIZER;

static void zm_keep(void *block)
{
    zm_kept *k = malloc(sizeof *k);
    if (!k) return;
    k->block = block;
    pthread_mutex_lock(&zm_kept_mu);
    k->next = zm_kept_list;
    zm_kept_list = k;
    pthread_mutex_unlock(&zm_kept_mu);
}

static void zm_free_kept(void)
{
    pthread_mutex_lock(&zm_kept_mu);
    while (zm_kept_list) {
        zm_kept *k = zm_kept_list;
        zm_kept_list = k->next;
        free(k->block);
        free(k);
    }
    pthread_mutex_unlock(&zm_kept_mu);
}

/* Between polls of a wait: stay responsive for short waits, then stop competing for the cores. */
static void zm_pause(long spin)
{
    if (spin < 200) {
        sched_yield();
    } else {
        struct timespec ts = {0, spin < 2000 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
}

/* Do all ranks reach this point within `grace_s` (INFINITY: however long it takes)? A
 * non-blocking barrier on zm_exit_comm (zm_end_job runs only where zmpi_init made it), polled
 * with a deadline. */
static int zm_all_arrive(double grace_s)
{
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(zm_exit_comm, &req) != MPI_SUCCESS) return 0;
    double deadline = MPI_Wtime() + grace_s;
    for (long spin = 0;; spin++) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (done) return 1;
        if (MPI_Wtime() > deadline) return 0;
        zm_pause(spin);
    }
}

/* The first peer whose exit notice came more than ZM_EXIT_GRACE_S ago (it will never join
 * another call, and the data it sent before leaving had time to arrive), or -1. */
static int zm_peer_gone(void)
{
    int gone = zm_poll_exits();
    return gone >= 0 && MPI_Wtime() > zm_exit_deadline ? gone : -1;
}

/* The reason a wait of rank `me` in `what` failed because peer `gone` (zm_peer_gone's) ended
 * its process, with the failure that ended it when its notice carried one. */
static void zm_gone_why(char *why, size_t n, int gone, int me, const char *what)
{
    if (zm_exit_why[0])
        snprintf(why, n, "rank %d ended its process after a failure while rank %d waits in %s, "
                 "which it will never join: %s", gone, me, what, zm_exit_why);
    else
        snprintf(why, n, "rank %d ended its process (it reached MPI finalisation) while rank %d "
                 "waits in %s, which it will never join", gone, me, what);
}

/* Waits for a request over the whole world outside any comm (an engine comm's duplicate, a
 * world broadcast). No deadline, as the blocking call it stands for: the other ranks may be busy
 * elsewhere for as long as they need. But a peer's exit notice ends the wait with
 * ZINC_ERR_ABORTED (recorded for zm_end_job): that peer will never join, and the blocking
 * call waited for it forever. On failure the request stays pending: what it writes must be kept
 * (zm_keep). */
static zinc_status zm_wait_world(MPI_Request *req, const char *what)
{
    for (long spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return zerr_thread(ZINC_ERR_COMM, "%s: MPI_Test failed (code %d)", what, rc);
        if (done) return ZINC_OK;
        int gone = zm_peer_gone();
        if (gone >= 0) {
            int me = -1;
            MPI_Comm_rank(MPI_COMM_WORLD, &me);
            char why[1024];   /* zm_gone_why: the call and the peer's failure */
            zm_gone_why(why, sizeof why, gone, me, what);
            zlog(ZLOG_ERROR, "comm", me, "%s", why);
            zmpi_note_failure(ZINC_ERR_ABORTED, why, ZM_FINALIZE_GRACE_MAX_S);
            return zerr_thread(ZINC_ERR_ABORTED, "%s", why);
        }
        zm_pause(spin);
    }
}

static zinc_status zm_mpi_error(zcomm_t *c, const char *call, const char *file, int line, int rc)
{
    zm_ctx *x = c->ctx;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    zerr_fmt(c->err, sizeof c->err, ZINC_ERR_COMM, "mpi rank %d: %s failed at %s:%d: %s",
             c->rank, call, file, line, msg);
    if (x && !x->failed) {
        x->failed = ZINC_ERR_COMM;
        zm_copy(x->why, sizeof x->why, c->err);
        zmpi_note_failure(ZINC_ERR_COMM, c->err, c->timeout_s);
    }
    return ZINC_ERR_COMM;
}

/* ---- process-level entry points ----------------------------------------------------------- */

static int zm_at_finalize(MPI_Comm comm, int key, void *attr, void *extra);

zinc_status zmpi_init(int *rank, int *size, int *we_initialised)
{
    *rank = 0;
    *size = 1;
    *we_initialised = 0;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return zerr_thread(ZINC_ERR_USAGE, "zmpi_init: MPI was already finalized in this "
                                           "process; create mpi worlds before MPI_Finalize");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return zerr_thread(ZINC_ERR_COMM, "zmpi_init: MPI_Init_thread failed (code %d); was "
                                              "the program started by mpirun?", rc);
        *we_initialised = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    /* Every rank creates its first world at the same point, so this collective matches. */
    pthread_mutex_lock(&zm_exit_mu);
    int rc = MPI_SUCCESS;
    if (zm_exit_comm == MPI_COMM_NULL) {
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &zm_exit_comm);
        if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(zm_exit_comm, MPI_ERRORS_RETURN);
        /* zinc's end of the job runs inside MPI_Finalize, whoever calls it (zm_at_finalize). */
        int key = MPI_KEYVAL_INVALID;
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, zm_at_finalize, &key, NULL);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
        zm_exit_size = *size;
        zm_exited = calloc((size_t)*size, 1);
        zm_exit_reqs = calloc((size_t)*size, sizeof *zm_exit_reqs);
        for (int q = 0; zm_exit_reqs && q < *size; q++) zm_exit_reqs[q] = MPI_REQUEST_NULL;
    }
    int nomem = !zm_exited || !zm_exit_reqs;
    pthread_mutex_unlock(&zm_exit_mu);
    if (rc != MPI_SUCCESS)
        return zerr_thread(ZINC_ERR_COMM, "zmpi_init: setting up zinc's end of the job (a "
                                          "duplicate of MPI_COMM_WORLD, a callback at "
                                          "MPI_Finalize) failed (code %d)", rc);
    if (nomem) return zerr_thread(ZINC_ERR_NOMEM, "zmpi_init: out of memory");
    return ZINC_OK;
}

/* The exit notice to every peer (non-blocking; drained in zm_end_exits). */
static void zm_send_exits(int rank)
{
    if (!zm_exit_reqs) return;
    /* The failure's text, if any: once recorded it never changes, so it can be the send buffer. */
    pthread_mutex_lock(&zm_process_mu);
    int len = atomic_load(&zm_process_failed) ? (int)strlen(zm_process_why) + 1 : 0;
    pthread_mutex_unlock(&zm_process_mu);
    for (int q = 0; q < zm_exit_size; q++)
        if (q != rank)
            MPI_Isend(zm_process_why, len, MPI_BYTE, q, ZM_TAG_EXIT, zm_exit_comm,
                      &zm_exit_reqs[q]);
}

/* After the barrier every peer has sent its notice: receive those not yet received, and see
 * this rank's own delivered, so that MPI_Finalize finds nothing pending. */
static void zm_end_exits(int rank)
{
    if (!zm_exited || !zm_exit_reqs) return;
    for (int q = 0; q < zm_exit_size; q++)
        if (q != rank && !zm_exited[q]) {
            char why[sizeof zm_exit_why];
            MPI_Recv(why, (int)sizeof why, MPI_BYTE, q, ZM_TAG_EXIT, zm_exit_comm,
                     MPI_STATUS_IGNORE);
            zm_exited[q] = 1;
        }
    MPI_Waitall(zm_exit_size, zm_exit_reqs, MPI_STATUSES_IGNORE);
}

/* zinc's end of an MPI job: the exit notices, then the barrier every rank meets (bounded after a
 * failure of this process, ending the job with MPI_Abort when a rank does not come), then the
 * notices not yet received. */
static void zm_end_job(void)
{
    int failed = atomic_load(&zm_process_failed);
    double grace = zm_process_grace_s > 0 && zm_process_grace_s < ZM_FINALIZE_GRACE_MAX_S
                       ? zm_process_grace_s
                       : ZM_FINALIZE_GRACE_MAX_S;
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    zm_send_exits(me);
    /* Without a failure the barrier waits as long as MPI_Finalize would (another rank may still
     * be working); it is the one a failed rank's bounded barrier meets. */
    if (!zm_all_arrive(failed ? grace : INFINITY)) {
        /* MPI_Finalize is collective: with a rank stopped or gone it waits for it forever, and
         * after a failure MPI promises nothing but MPI_Abort. Every rank still alive got the
         * failed comm's timeout to arrive here; the others are lost. End the job, with the
         * status as exit code, so that the launcher kills the lost rank and exits. */
        pthread_mutex_lock(&zm_process_mu);
        zlog(ZLOG_ERROR, "comm", me, "ending the MPI job with MPI_Abort (MPI_Finalize would wait "
             "for the lost rank): %s", failed ? zm_process_why : "the exit barrier failed");
        pthread_mutex_unlock(&zm_process_mu);
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, failed ? failed : ZINC_ERR_COMM);
    }
    zm_end_exits(me);
    free(zm_exited);
    free(zm_exit_reqs);
    zm_exited = NULL;
    zm_exit_reqs = NULL;
}

/* The delete callback of an attribute zmpi_init sets on MPI_COMM_SELF: MPI_Finalize runs it
 * first, while MPI still works (MPI standard, "Allowing User Functions at Process Termination").
 * So zinc's end of the job also runs when the application initialised MPI and finalizes it
 * itself (a C program, or Python with mpi4py imported first), not only through zmpi_finalize. */
static int zm_at_finalize(MPI_Comm comm, int key, void *attr, void *extra)
{
    zm_end_job();
    return MPI_SUCCESS;
}

void zmpi_finalize(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized) return;
    MPI_Finalize();     /* zm_end_job first (zm_at_finalize) */
    zm_free_kept();
}

zinc_status zmpi_world_bcast(void *buf, size_t bytes, int root)
{
    if (bytes > (size_t)INT_MAX)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zmpi_world_bcast: %zu bytes is over INT_MAX",
                           bytes);
    /* Through a staging block, which stays with MPI if the wait fails (zm_keep): the caller's
     * buffer must be its own again when this returns. */
    char *stage = malloc(bytes ? bytes : 1);
    if (!stage)
        return zerr_thread(ZINC_ERR_NOMEM, "zmpi_world_bcast: out of memory for %zu bytes", bytes);
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == root) memcpy(stage, buf, bytes);
    MPI_Request req = MPI_REQUEST_NULL;
    zm_enter("world broadcast");
    int rc = MPI_Ibcast(stage, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req);
    zinc_status s = rc == MPI_SUCCESS
                        ? zm_wait_world(&req, "a world broadcast (zinc_world_broadcast)")
                        : zerr_thread(ZINC_ERR_COMM, "zmpi_world_bcast: MPI_Ibcast failed (code "
                                                     "%d)", rc);
    zm_leave();
    if (s != ZINC_OK) {
        if (rc == MPI_SUCCESS) zm_keep(stage);
        else free(stage);
        return s;
    }
    if (me != root) memcpy(buf, stage, bytes);
    free(stage);
    return ZINC_OK;
}

zinc_status zmpi_world_barrier(void)
{
    MPI_Request req = MPI_REQUEST_NULL;
    zm_enter("world barrier");
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    zinc_status s = rc == MPI_SUCCESS
                        ? zm_wait_world(&req, "a world barrier (zinc_world_barrier)")
                        : zerr_thread(ZINC_ERR_COMM, "zmpi_world_barrier: MPI_Ibarrier failed (code "
                                                     "%d)", rc);
    zm_leave();
    return s;
}

static char zm_version[MPI_MAX_LIBRARY_VERSION_STRING];
static pthread_once_t zm_version_once = PTHREAD_ONCE_INIT;

/* MPI_Get_library_version may be called before MPI_Init; keep its first line. */
static void zm_read_version(void)
{
    int len = 0;
    if (MPI_Get_library_version(zm_version, &len) != MPI_SUCCESS) zm_version[0] = 0;
    zm_version[sizeof zm_version - 1] = 0;
    zm_version[strcspn(zm_version, "\r\n")] = 0;
}

const char *zmpi_version(void)
{
    pthread_once(&zm_version_once, zm_read_version);
    return zm_version[0] ? zm_version : "MPI (version unknown)";
}

/* ---- failure, notices, polling ------------------------------------------------------------- */

static void zm_fail(zcomm_t *c, zinc_status s, const char *why)
{
    zm_ctx *x = c->ctx;
    if (x->failed) return;
    x->failed = s;
    zm_copy(x->why, sizeof x->why, why);
    zmpi_note_failure(s, why, c->timeout_s);
}

/* Tells every other rank that this one failed (best effort: non-blocking, never waited on). */
static void zm_send_notice(zcomm_t *c, zinc_status s, const char *why)
{
    zm_ctx *x = c->ctx;
    if (x->notice_sent) return;
    x->notice_sent = 1;
    x->notice->status = (int32_t)s;
    x->notice->rank = c->rank;
    x->notice->seq = x->seq;
    zm_copy(x->notice->why, sizeof x->notice->why, why);
    for (int q = 0; q < c->size; q++) {
        x->notice_reqs[q] = MPI_REQUEST_NULL;
        if (q != c->rank)
            MPI_Isend(x->notice, (int)sizeof *x->notice, MPI_BYTE, q, ZM_TAG_ABORT, x->comm,
                      &x->notice_reqs[q]);
    }
}

/* Acts on c's abort: the notice to every other rank, the comm failed. With zm_calls_mu held, on
 * the one thread that may call MPI now. */
static void zm_abort_now(zcomm_t *c)
{
    zm_ctx *x = c->ctx;
    char msg[sizeof x->abort_why + 32];
    snprintf(msg, sizeof msg, "rank %d aborted: %s", c->rank, x->abort_why);
    zm_send_notice(c, ZINC_ERR_ABORTED, msg);
    zm_fail(c, ZINC_ERR_ABORTED, msg);
    if (x->abort_pending) {
        x->abort_pending = 0;
        atomic_fetch_sub(&zm_pending, 1);
    }
}

/* From inside a collective of c, with zm_calls_mu held: acts on the aborts that waited for a
 * thread in MPI, c's own and those of comms no thread is in. Returns 1 when c's own was one of
 * them, with its reason in `why`. */
static int zm_flush_aborts_locked(zcomm_t *c, char *why, size_t n)
{
    int own = 0;
    for (zm_ctx *d = zm_live; d && atomic_load(&zm_pending) > 0; d = d->next_live) {
        if (!d->abort_pending || (d != c->ctx && d->in_call)) continue;
        if (d == c->ctx) {
            own = 1;
            snprintf(why, n, "rank %d aborted: %s", c->rank, d->abort_why);
        }
        zm_abort_now(d->self);
    }
    return own;
}

/* Cancels and frees what is cancellable of a failed wait (point-to-point requests). */
static void zm_drop(int nreq, MPI_Request *reqs, int p2p)
{
    if (!p2p) return;   /* collective requests cannot be cancelled or freed */
    for (int i = 0; i < nreq; i++)
        if (reqs[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&reqs[i]);
            MPI_Request_free(&reqs[i]);
        }
}

/* The status every call of a failed comm returns. */
static zinc_status zm_failed(zcomm_t *c, const char *what)
{
    zm_ctx *x = c->ctx;
    return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_ABORTED, "%s #%llu (mpi rank %d): the comm "
                    "has failed: %s", what, (unsigned long long)x->seq, c->rank, x->why);
}

/* Receives one message of `tag` (a notice: n bytes at most) if one came: *got 1; else 0. */
static zinc_status zm_take(zcomm_t *c, int tag, void *buf, int n, int *got)
{
    zm_ctx *x = c->ctx;
    MPI_Status st;
    *got = 0;
    ZINC_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag, x->comm, got, &st));
    if (!*got) return ZINC_OK;
    memset(buf, 0, (size_t)n);
    ZINC_MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, st.MPI_SOURCE, tag, x->comm, MPI_STATUS_IGNORE));
    return ZINC_OK;
}

/* Checks for an abort notice or a local abort request; returns its status or ZINC_OK. */
static zinc_status zm_poll_abort(zcomm_t *c, const char *what)
{
    zm_ctx *x = c->ctx;
    if (atomic_load(&zm_pending) > 0) {
        char why[sizeof x->abort_why + 32];
        pthread_mutex_lock(&zm_calls_mu);
        int own = zm_flush_aborts_locked(c, why, sizeof why);
        pthread_mutex_unlock(&zm_calls_mu);
        if (own)
            return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_ABORTED, "%s #%llu (mpi rank %d): %s",
                            what, (unsigned long long)x->seq, c->rank, why);
    }
    int flag = 0;
    zm_notice m;
    zinc_status got = zm_take(c, ZM_TAG_ABORT, &m, (int)sizeof m, &flag);
    if (got != ZINC_OK || !flag) return got;
    m.why[sizeof m.why - 1] = 0;
    /* A peer that timed out in the collective this rank is waiting in: that is a timeout here
     * too. Ranks found out of step (zm_read_where) are that everywhere. Anything else is an
     * abort. */
    zinc_status s = m.status == ZINC_ERR_TIMEOUT && m.seq == x->seq ? ZINC_ERR_TIMEOUT
                    : m.status == ZINC_ERR_MISMATCH                 ? ZINC_ERR_MISMATCH
                                                                     : ZINC_ERR_ABORTED;
    zm_fail(c, ZINC_ERR_ABORTED, m.why);
    if (s != ZINC_ERR_ABORTED)
        return zerr_fmt(c->err, sizeof c->err, s, "%s #%llu (mpi rank %d): %s", what,
                        (unsigned long long)x->seq, c->rank, m.why);
    return zerr_fmt(c->err, sizeof c->err, s, "%s #%llu (mpi rank %d): the world was aborted: %s",
                    what, (unsigned long long)x->seq, c->rank, m.why);
}

/* A peer that reached MPI_Finalize (its process is ending) and whose data did not come within
 * ZM_EXIT_GRACE_S of its notice: it will never join this collective. The comm fails; no notice
 * is sent, since every other rank got the peer's exit notice too (and the peer's comm is gone). */
static zinc_status zm_check_exits(zcomm_t *c, const char *what)
{
    zm_ctx *x = c->ctx;
    int gone = zm_peer_gone();
    if (gone < 0) return ZINC_OK;
    char call[120], why[1024];   /* zm_gone_why: the call and the peer's failure */
    snprintf(call, sizeof call, "%s #%llu", what, (unsigned long long)x->seq);
    zm_gone_why(why, sizeof why, gone, c->rank, call);
    zlog(ZLOG_ERROR, "comm", c->rank, "%s", why);
    zm_fail(c, ZINC_ERR_ABORTED, why);
    return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_ABORTED, "%s #%llu (mpi rank %d): %s", what,
                    (unsigned long long)x->seq, c->rank, why);
}

/* Sends this rank's "where" notice for the current collective to every peer, once per
 * collective; not while the last one's sends are still in flight (its buffer is theirs), in
 * which case the next poll tries again. Best effort: a failed send is not an error of the
 * collective, which goes on waiting. */
static void zm_send_where(zcomm_t *c)
{
    zm_ctx *x = c->ctx;
    if (x->where_seq == x->seq) return;
    int done = 0;
    if (MPI_Testall(c->size, x->where_reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !done)
        return;
    x->where_seq = x->seq;
    memset(x->where, 0, sizeof *x->where);
    x->where->gen = x->gen;
    x->where->seq = x->seq;
    x->where->bytes = zm_call_at(x, x->seq)->bytes;
    x->where->rank = c->rank;
    zm_copy(x->where->what, sizeof x->where->what, zm_call_at(x, x->seq)->what);
    for (int q = 0; q < c->size; q++) {
        x->where_reqs[q] = MPI_REQUEST_NULL;
        if (q != c->rank)
            MPI_Isend(x->where, (int)sizeof *x->where, MPI_BYTE, q, ZM_TAG_WHERE, x->comm,
                      &x->where_reqs[q]);
    }
}

/* Reads the peers' "where" notices that came. One for this collective's count, or an earlier
 * one this rank made within its last ZM_HISTORY, that names another operation or size there:
 * the ranks are out of step (the note at the top), and the world fails now, with both calls
 * named, instead of at the timeout. (The earlier count: a call whose data all left at once, a
 * small broadcast from its root, ends on the rank that skipped nothing, which stalls in its
 * next call while the peer waits at the count before.) Notices of later counts are dropped: the
 * peer that sent one reads this rank's once this rank stalls at that count. */
static zinc_status zm_read_where(zcomm_t *c, const char *what)
{
    zm_ctx *x = c->ctx;
    for (;;) {
        int flag = 0;
        zm_where w;
        zinc_status got = zm_take(c, ZM_TAG_WHERE, &w, (int)sizeof w, &flag);
        if (got != ZINC_OK || !flag) return got;
        w.what[sizeof w.what - 1] = 0;
        const struct zm_call *mine = zm_call_at(x, w.seq);
        if (w.gen != x->gen || w.seq > x->seq || mine->seq != w.seq ||
            (strcmp(w.what, mine->what) == 0 && w.bytes == mine->bytes))
            continue;
        char why[sizeof x->why];
        snprintf(why, sizeof why, "ranks out of step at collective #%llu: rank %d %s %s of "
                 "%llu bytes, rank %d is in %s of %llu bytes. Every rank must make the same "
                 "collective calls in the same order; one skipped or added a call (a step, "
                 "save or load made on some ranks only?)", (unsigned long long)w.seq, c->rank,
                 w.seq == x->seq ? "is in" : "made", mine->what,
                 (unsigned long long)mine->bytes, (int)w.rank, w.what,
                 (unsigned long long)w.bytes);
        zlog(ZLOG_ERROR, "comm", c->rank, "%s", why);
        zm_send_notice(c, ZINC_ERR_MISMATCH, why);
        zm_fail(c, ZINC_ERR_MISMATCH, why);
        return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_MISMATCH, "%s #%llu (mpi rank %d): %s",
                        what, (unsigned long long)x->seq, c->rank, why);
    }
}

/* Waits for nreq requests with the comm's deadline, watching for abort notices. `p2p`: the
 * requests are point-to-point with x->req_peer naming their peers (for the timeout message). */
static zinc_status zm_wait(zcomm_t *c, const char *what, int nreq, MPI_Request *reqs, int p2p)
{
    zm_ctx *x = c->ctx;
    double start = MPI_Wtime(), deadline = start + c->timeout_s;
    for (long spin = 0;; spin++) {
        int done = 0;
        ZINC_MPI_CHECK(MPI_Testall(nreq, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return ZINC_OK;
        zinc_status s = zm_poll_abort(c, what);
        if (s == ZINC_OK) s = zm_check_exits(c, what);
        if (s == ZINC_OK && MPI_Wtime() > start + ZM_WHERE_AFTER_S) {
            zm_send_where(c);
            s = zm_read_where(c, what);
        }
        if (s != ZINC_OK) {
            zm_drop(nreq, reqs, p2p);
            return s;
        }
        if (MPI_Wtime() > deadline) {
            char missing[200] = "not every rank arrived";
            if (p2p) {
                size_t o = (size_t)snprintf(missing, sizeof missing, "no data from rank(s)");
                int any = 0;
                int *named = x->counts;   /* free during point-to-point waits */
                memset(named, 0, (size_t)c->size * sizeof *named);
                for (int i = 0; i < nreq && o < sizeof missing - 16; i++) {
                    int f = 1;
                    if (reqs[i] != MPI_REQUEST_NULL)
                        MPI_Request_get_status(reqs[i], &f, MPI_STATUS_IGNORE);
                    if (f || named[x->req_peer[i]]) continue;
                    named[x->req_peer[i]] = 1;
                    o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d",
                                          any++ ? ", " : " ", x->req_peer[i]);
                }
            }
            char why[sizeof x->why];
            snprintf(why, sizeof why, "%s #%llu timed out after %g s on rank %d: %s", what,
                     (unsigned long long)x->seq, c->timeout_s, c->rank, missing);
            zlog(ZLOG_ERROR, "comm", c->rank, "%s", why);
            zm_drop(nreq, reqs, p2p);
            zm_send_notice(c, ZINC_ERR_TIMEOUT, why);
            zm_fail(c, ZINC_ERR_TIMEOUT, why);
            return zerr_fmt(c->err, sizeof c->err, ZINC_ERR_TIMEOUT, "%s", why);
        }
        zm_pause(spin);
    }
}

/* ---- the collectives ----------------------------------------------------------------------- */

/* Entering and leaving a collective; see the thread note at the top. */
static zinc_status zm_begin(zcomm_t *c, const char *what, size_t bytes)
{
    zm_ctx *x = c->ctx;
    pthread_mutex_lock(&zm_calls_mu);
    x->in_call = 1;
    zm_calls++;
    pthread_mutex_unlock(&zm_calls_mu);
    zm_enter(what);
    x->seq++;
    x->history[x->seq % ZM_HISTORY] = (struct zm_call){x->seq, what, bytes};
    if (x->failed) return zm_failed(c, what);
    zinc_status s = zm_poll_abort(c, what);
    /* (the notices peers sent while this rank was elsewhere: old ones go, and a peer stalled
     * in another call at this count is found before this rank waits at all) */
    if (s == ZINC_OK && c->size > 1) s = zm_read_where(c, what);
    return s;
}

static zinc_status zm_end(zcomm_t *c, zinc_status s)
{
    zm_ctx *x = c->ctx;
    char why[sizeof x->abort_why + 32];
    /* Aborts that came during the call and were not yet acted on are sent now, before this
     * thread leaves MPI: one that comes after finds no collective and sends its own. */
    pthread_mutex_lock(&zm_calls_mu);
    int own = zm_flush_aborts_locked(c, why, sizeof why);
    x->in_call = 0;
    zm_calls--;
    zm_leave();
    pthread_mutex_unlock(&zm_calls_mu);
    if (own && s == ZINC_OK)
        s = zerr_fmt(c->err, sizeof c->err, ZINC_ERR_ABORTED, "collective #%llu (mpi rank %d): %s",
                     (unsigned long long)x->seq, c->rank, why);
    return s;
}

/* Segment q of n elements split into `size` near-equal contiguous parts (as comm_local.c). */
static void zm_segments(zcomm_t *c, size_t n, int equal)
{
    zm_ctx *x = c->ctx;
    size_t size = (size_t)c->size, base = n / size, extra = equal ? 0 : n % size;
    for (size_t q = 0; q < size; q++) {
        x->off[q] = q * base + (q < extra ? q : extra);
        x->len[q] = base + (q < extra ? 1 : 0);
    }
}

/* Scratch slot of peer q (no slot for this rank). */
static char *zm_slot(zcomm_t *c, int q)
{
    zm_ctx *x = c->ctx;
    return x->scratch + (size_t)(q < c->rank ? q : q - 1) * x->chunk;
}

/* Every rank ends with segment `rank` (x->off/x->len) reduced over all ranks in its buffer. */
static zinc_status zm_reduce_segments(zcomm_t *c, const char *what, char *buf, zdt t, float scale)
{
    zm_ctx *x = c->ctx;
    const int r = c->rank, size = c->size;
    const size_t es = zdt_size(t), per = x->chunk / es;
    size_t maxlen = 0;
    for (int q = 0; q < size; q++)
        if (x->len[q] > maxlen) maxlen = x->len[q];
    char *mine = buf + x->off[r] * es;
    for (size_t k0 = 0; k0 < maxlen; k0 += per) {
        int nreq = 0;
        size_t m = x->len[r] > k0 ? x->len[r] - k0 : 0;
        if (m > per) m = per;
        for (int q = 0; q < size; q++) {
            if (q == r || m == 0) continue;
            x->req_peer[nreq] = q;
            ZINC_MPI_CHECK(MPI_Irecv(zm_slot(c, q), (int)(m * es), MPI_BYTE, q, zm_data_tag(x),
                                     x->comm, &x->reqs[nreq++]));
        }
        for (int q = 0; q < size; q++) {
            if (q == r || x->len[q] <= k0) continue;
            size_t mq = x->len[q] - k0 < per ? x->len[q] - k0 : per;
            x->req_peer[nreq] = q;
            ZINC_MPI_CHECK(MPI_Isend(buf + (x->off[q] + k0) * es, (int)(mq * es), MPI_BYTE, q,
                                     zm_data_tag(x), x->comm, &x->reqs[nreq++]));
        }
        zinc_status s = zm_wait(c, what, nreq, x->reqs, 1);
        if (s != ZINC_OK) return s;
        if (m == 0) continue;
        for (int q = 0; q < size; q++) x->in[q] = q == r ? mine + k0 * es : zm_slot(c, q);
        zreduce_sum(mine + k0 * es, x->in, size, m, t, scale);
    }
    return ZINC_OK;
}

/* Every rank ends with every segment (x->off/x->len) of every owner. */
static zinc_status zm_gather_segments(zcomm_t *c, const char *what, char *buf, size_t n, zdt t)
{
    zm_ctx *x = c->ctx;
    const int r = c->rank, size = c->size;
    const size_t es = zdt_size(t);
    if (size == 1) return ZINC_OK;
    if (n * es <= ZM_AG_COLL_MAX) {
        for (int q = 0; q < size; q++) {
            x->counts[q] = (int)(x->len[q] * es);
            x->displs[q] = (int)(x->off[q] * es);
        }
        ZINC_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, x->counts,
                                       x->displs, MPI_BYTE, x->comm, &x->reqs[0]));
        return zm_wait(c, what, 1, x->reqs, 0);
    }
    const size_t per = ZM_AG_CHUNK / es;
    size_t maxlen = 0;
    for (int q = 0; q < size; q++)
        if (x->len[q] > maxlen) maxlen = x->len[q];
    for (size_t k0 = 0; k0 < maxlen; k0 += per) {
        int nreq = 0;
        for (int q = 0; q < size; q++) {
            if (q == r || x->len[q] <= k0) continue;
            size_t mq = x->len[q] - k0 < per ? x->len[q] - k0 : per;
            x->req_peer[nreq] = q;
            ZINC_MPI_CHECK(MPI_Irecv(buf + (x->off[q] + k0) * es, (int)(mq * es), MPI_BYTE, q,
                                     zm_data_tag(x), x->comm, &x->reqs[nreq++]));
        }
        if (x->len[r] > k0) {
            size_t m = x->len[r] - k0 < per ? x->len[r] - k0 : per;
            for (int q = 0; q < size; q++) {
                if (q == r) continue;
                x->req_peer[nreq] = q;
                ZINC_MPI_CHECK(MPI_Isend(buf + (x->off[r] + k0) * es, (int)(m * es), MPI_BYTE,
                                         q, zm_data_tag(x), x->comm, &x->reqs[nreq++]));
            }
        }
        zinc_status s = zm_wait(c, what, nreq, x->reqs, 1);
        if (s != ZINC_OK) return s;
    }
    return ZINC_OK;
}

static zinc_status zm_all_reduce(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zm_begin(c, "all_reduce", n * zdt_size(t));
    if (s == ZINC_OK) {
        zm_segments(c, n, 0);
        s = zm_reduce_segments(c, "all_reduce", buf, t, scale);
    }
    if (s == ZINC_OK) s = zm_gather_segments(c, "all_reduce", buf, n, t);
    return zm_end(c, s);
}

static zinc_status zm_reduce_scatter(zcomm_t *c, void *buf, size_t n, zdt t, float scale)
{
    zinc_status s = zm_begin(c, "reduce_scatter", n * zdt_size(t));
    if (s == ZINC_OK) {
        zm_segments(c, n, 1);
        s = zm_reduce_segments(c, "reduce_scatter", buf, t, scale);
    }
    return zm_end(c, s);
}

static zinc_status zm_all_gather(zcomm_t *c, void *buf, size_t n, zdt t)
{
    zinc_status s = zm_begin(c, "all_gather", n * zdt_size(t));
    if (s == ZINC_OK) {
        zm_segments(c, n, 1);
        s = zm_gather_segments(c, "all_gather", buf, n, t);
    }
    return zm_end(c, s);
}

static zinc_status zm_broadcast_chunks(zcomm_t *c, char *buf, size_t bytes, int root)
{
    zm_ctx *x = c->ctx;
    for (size_t o = 0; o < bytes; o += ZM_BCAST_CHUNK) {
        size_t m = bytes - o < ZM_BCAST_CHUNK ? bytes - o : ZM_BCAST_CHUNK;
        ZINC_MPI_CHECK(MPI_Ibcast(buf + o, (int)m, MPI_BYTE, root, x->comm, &x->reqs[0]));
        zinc_status s = zm_wait(c, "broadcast", 1, x->reqs, 0);
        if (s != ZINC_OK) return s;
    }
    return ZINC_OK;
}

static zinc_status zm_broadcast(zcomm_t *c, void *buf, size_t bytes, int root)
{
    zinc_status s = zm_begin(c, "broadcast", bytes);
    if (s == ZINC_OK && c->size > 1) s = zm_broadcast_chunks(c, buf, bytes, root);
    return zm_end(c, s);
}

static zinc_status zm_barrier_wait(zcomm_t *c)
{
    zm_ctx *x = c->ctx;
    ZINC_MPI_CHECK(MPI_Ibarrier(x->comm, &x->reqs[0]));
    return zm_wait(c, "barrier", 1, x->reqs, 0);
}

static zinc_status zm_barrier(zcomm_t *c)
{
    zinc_status s = zm_begin(c, "barrier", 0);
    if (s == ZINC_OK && c->size > 1) s = zm_barrier_wait(c);
    return zm_end(c, s);
}

static void zm_abort(zcomm_t *c, const char *why)
{
    zm_ctx *x = c->ctx;
    pthread_mutex_lock(&zm_calls_mu);
    snprintf(x->abort_why, sizeof x->abort_why, "%s", why ? why : "(no reason given)");
    if (zm_calls > 0) {
        /* A thread is inside a collective (of this comm or another): it sends the notices. */
        if (!x->abort_pending) {
            x->abort_pending = 1;
            atomic_fetch_add(&zm_pending, 1);
        }
    } else {
        zm_enter("abort");
        zm_abort_now(c);
        zm_leave();
    }
    pthread_mutex_unlock(&zm_calls_mu);
}

/* Gives a notice's sends (abort or "where") a moment to leave: 1 when they did; 0 when they
 * could not, their requests freed, and their buffer then must stay with MPI (zm_keep). */
static int zm_sends_left(int n, MPI_Request *reqs)
{
    double end = MPI_Wtime() + 0.5;
    int done = 0;
    while (!done && MPI_Wtime() < end) MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (done) return 1;
    for (int q = 0; q < n; q++)
        if (reqs[q] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[q]);
    return 0;
}

static void zm_destroy(zcomm_t *c)
{
    zm_ctx *x = c->ctx;
    if (x) {
        pthread_mutex_lock(&zm_calls_mu);
        for (zm_ctx **p = &zm_live; *p; p = &(*p)->next_live)
            if (*p == x) {
                *p = x->next_live;
                break;
            }
        zm_enter("destroy");
        if (x->abort_pending) zm_abort_now(c);   /* an abort no collective came to send */
        pthread_mutex_unlock(&zm_calls_mu);
        int keep_notice = x->notice_sent && !zm_sends_left(c->size, x->notice_reqs);
        int keep_where = x->where_reqs && x->where_seq && !zm_sends_left(c->size, x->where_reqs);
        /* A failed communicator is left allocated: it may still hold unreceived messages (a
         * peer's data, abort notices) or unfinished requests, and a freed communicator's id can
         * be reused by the next one, which would then match those strays. */
        int finalized = 0, stray = 0;
        MPI_Finalized(&finalized);
        if (!finalized && x->comm != MPI_COMM_NULL && !x->failed) {
            /* peers' "where" notices of a collective that completed: read and dropped (one
             * still on its way when the comm is freed carries the comm's gen) */
            zm_where w;
            for (int more = 1; more;)
                if (zm_take(c, ZM_TAG_WHERE, &w, (int)sizeof w, &more) != ZINC_OK) break;
            MPI_Iprobe(MPI_ANY_SOURCE, ZM_TAG_ABORT, x->comm, &stray, MPI_STATUS_IGNORE);
            if (!stray) MPI_Comm_free(&x->comm);
        }
        zm_leave();
        free(x->scratch);
        free(x->reqs);
        free(x->req_peer);
        free(x->in);
        free(x->off);
        free(x->len);
        free(x->counts);
        free(x->displs);
        free(x->notice_reqs);
        if (keep_notice) zm_keep(x->notice);
        else free(x->notice);
        free(x->where_reqs);
        if (keep_where) zm_keep(x->where);
        else free(x->where);
        free(x);
    }
    free(c);
}

static const zcomm_iface_t zm_iface = {
    .name = "mpi",
    .all_reduce = zm_all_reduce,
    .reduce_scatter = zm_reduce_scatter,
    .all_gather = zm_all_gather,
    .broadcast = zm_broadcast,
    .barrier = zm_barrier,
    .abort = zm_abort,
    .destroy = zm_destroy,
};

/* MPI_Comm_dup of MPI_COMM_WORLD, as MPI_Comm_idup waited for by zm_wait_world: a peer that
 * ended its process (it will never create this comm) fails it instead of blocking this rank
 * forever. The new handle lands in a block of its own, kept with MPI if the wait fails. */
static zinc_status zm_dup_world(MPI_Comm *out)
{
    MPI_Comm *slot = malloc(sizeof *slot);
    if (!slot) return zerr_thread(ZINC_ERR_NOMEM, "zcomm_mpi_create: out of memory");
    *slot = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    zm_enter("comm creation");
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, slot, &req);
    zinc_status s = ZINC_OK;
    if (rc == MPI_SUCCESS) {
        s = zm_wait_world(&req, "zcomm_mpi_create (the duplicate of MPI_COMM_WORLD every rank "
                                "makes for its engine)");
    } else {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        s = zerr_thread(ZINC_ERR_COMM, "zcomm_mpi_create: duplicating MPI_COMM_WORLD failed: %s",
                        msg);
    }
    zm_leave();
    if (s == ZINC_OK) *out = *slot;
    if (s != ZINC_OK && rc == MPI_SUCCESS) zm_keep(slot);
    else free(slot);
    return s;
}

zinc_status zcomm_mpi_create(zcomm_t **out)
{
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return zerr_thread(ZINC_ERR_USAGE, "zcomm_mpi_create: MPI is %s; call zmpi_init first",
                           finalized ? "already finalized" : "not initialised");
    zcomm_t *c = calloc(1, sizeof *c);
    zm_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return zerr_thread(ZINC_ERR_NOMEM, "zcomm_mpi_create: out of memory");
    }
    c->iface = &zm_iface;
    c->ctx = x;
    c->timeout_s = 300.0;
    x->comm = MPI_COMM_NULL;
    x->self = c;
    zinc_status made = zm_dup_world(&x->comm);
    if (made != ZINC_OK) {
        zm_destroy(c);
        return made;
    }
    int rc = MPI_Comm_set_errhandler(x->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(x->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(x->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        zm_destroy(c);
        return zerr_thread(ZINC_ERR_COMM, "zcomm_mpi_create: setting up the duplicate of "
                                          "MPI_COMM_WORLD failed: %s", msg);
    }
    size_t peers = c->size > 1 ? (size_t)c->size - 1 : 1, size = (size_t)c->size;
    size_t chunk = ZM_SCRATCH_MAX / peers;
    if (chunk > ZM_CHUNK_MAX) chunk = ZM_CHUNK_MAX;
    if (chunk < ZM_CHUNK_MIN) chunk = ZM_CHUNK_MIN;
    x->chunk = chunk & ~(size_t)7;
    x->scratch = malloc(peers * x->chunk);
    x->reqs = calloc(2 * size, sizeof *x->reqs);
    x->req_peer = calloc(2 * size, sizeof *x->req_peer);
    x->in = calloc(size, sizeof *x->in);
    x->off = calloc(size, sizeof *x->off);
    x->len = calloc(size, sizeof *x->len);
    x->counts = calloc(size, sizeof *x->counts);
    x->displs = calloc(size, sizeof *x->displs);
    x->notice = calloc(1, sizeof *x->notice);
    x->notice_reqs = calloc(size, sizeof *x->notice_reqs);
    x->where = calloc(1, sizeof *x->where);
    x->where_reqs = calloc(size, sizeof *x->where_reqs);
    if (!x->scratch || !x->reqs || !x->req_peer || !x->in || !x->off || !x->len || !x->counts ||
        !x->displs || !x->notice || !x->notice_reqs || !x->where || !x->where_reqs) {
        zm_destroy(c);
        return zerr_thread(ZINC_ERR_NOMEM,
                           "zcomm_mpi_create: out of memory for %zu bytes of scratch",
                           peers * chunk);
    }
    for (size_t q = 0; q < size; q++) x->notice_reqs[q] = MPI_REQUEST_NULL;
    for (size_t q = 0; q < size; q++) x->where_reqs[q] = MPI_REQUEST_NULL;
    pthread_mutex_lock(&zm_calls_mu);
    x->gen = ++zm_comms_made;
    if (atomic_load(&zm_thread_level) < 0) {
        int level = -1;
        MPI_Query_thread(&level);
        atomic_store(&zm_thread_level, level);
    }
    x->next_live = zm_live;
    zm_live = x;
    pthread_mutex_unlock(&zm_calls_mu);
    *out = c;
    return ZINC_OK;
}
