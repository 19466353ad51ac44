/*
 * testutil.h — the few helpers every zinc test uses: checks that report file:line and keep
 * going, a summary line, deterministic random numbers, and a runner for local-world ranks.
 */
#ifndef ZINC_TESTUTIL_H
#define ZINC_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>

/* ZT_ASAN: 1 under AddressSanitizer, which reserves terabytes of shadow address space at start,
 * so a test that limits RLIMIT_AS (ulimit -v) must leave the limit out there. */
#if defined(__SANITIZE_ADDRESS__)
#define ZT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZT_ASAN 1
#endif
#endif
#ifndef ZT_ASAN
#define ZT_ASAN 0
#endif

extern int zt_failures;
extern int zt_checks;

#define ZT_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        __atomic_fetch_add(&zt_checks, 1, __ATOMIC_RELAXED);                                                                        \
        if (!(cond)) {                                                                        \
            __atomic_fetch_add(&zt_failures, 1, __ATOMIC_RELAXED);                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* A zinc call that must succeed; on failure prints the status and message and counts it. */
#define ZT_OK(call)                                                                           \
    do {                                                                                      \
        __atomic_fetch_add(&zt_checks, 1, __ATOMIC_RELAXED);                                                                        \
        zinc_status zt_s_ = (call);                                                           \
        if (zt_s_ != ZINC_OK) {                                                               \
            __atomic_fetch_add(&zt_failures, 1, __ATOMIC_RELAXED);                                                                  \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,               \
                    zinc_status_string(zt_s_), zinc_last_error(NULL));                        \
        }                                                                                     \
    } while (0)

/* Prints "name: N checks, N passed, N failed" and returns the process exit code. A test that made
 * no check at all fails: a test must be able to fail. */
int zt_finish(const char *name);

/* splitmix64-based generator: reproducible streams from a seed. */
typedef struct { uint64_t s; } zt_rng;
uint64_t zt_next(zt_rng *r);
double zt_uniform(zt_rng *r);          /* [0, 1) */
double zt_normal(zt_rng *r);           /* standard normal (Box-Muller) */
double zt_now(void);                   /* monotonic seconds */

/* Makes a new directory `prefix`-XXXXXX in the working directory (the build tree: on disk, where
 * O_DIRECT applies; /tmp may be tmpfs) and writes its absolute path into dir (cap bytes; the
 * relative one where the absolute one does not fit).
 * Returns 0, or -1 with the reason on stderr. */
int zt_disk_dir(char *dir, size_t cap, const char *prefix);

/* Runs fn(rank, arg) on `n` threads and waits for them. */
void zt_run_ranks(int n, void (*fn)(int rank, void *arg), void *arg);

/* A local world of `n` ranks made into *world (where fn finds it, through arg), fn run on the
 * ranks' threads (zt_run_ranks), then the world destroyed and *world NULL; a failed check, and
 * fn not run, when the world cannot be made. */
struct zinc_world;
void zt_run_world(int n, struct zinc_world **world, void (*fn)(int rank, void *arg), void *arg);

#endif
