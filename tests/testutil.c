/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zinc.h"

int zt_failures = 0;
int zt_checks = 0;

int zt_finish(const char *name)
{
    if (zt_checks == 0) {
        fprintf(stderr, "%s: no check was made; failing\n", name);
        return 1;
    }
    printf("%s: %d checks, %d passed, %d failed\n", name, zt_checks, zt_checks - zt_failures,
           zt_failures);
    return zt_failures ? 1 : 0;
}

uint64_t zt_next(zt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double zt_uniform(zt_rng *r) { return (double)(zt_next(r) >> 11) * 0x1.0p-53; }

double zt_normal(zt_rng *r)
{
    double u1 = zt_uniform(r), u2 = zt_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct { int rank; void (*fn)(int, void *); void *arg; } zt_thread_arg;

static void *zt_thread_main(void *p)
{
    zt_thread_arg *t = p;
    t->fn(t->rank, t->arg);
    return NULL;
}

void zt_run_ranks(int n, void (*fn)(int rank, void *arg), void *arg)
{
    pthread_t *th = calloc((size_t)n, sizeof *th);
    zt_thread_arg *ta = calloc((size_t)n, sizeof *ta);
    for (int r = 0; r < n; r++) {
        ta[r] = (zt_thread_arg){r, fn, arg};
        pthread_create(&th[r], NULL, zt_thread_main, &ta[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    free(th);
    free(ta);
}

void zt_run_world(int n, zinc_world_t **world, void (*fn)(int rank, void *arg), void *arg)
{
    ZT_OK(zinc_world_create_local(n, world));
    if (!*world) return;
    zt_run_ranks(n, fn, arg);
    zinc_world_destroy(*world);
    *world = NULL;
}

double zt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int zt_disk_dir(char *dir, size_t cap, const char *prefix)
{
    char rel[256], abs[4096];
    snprintf(rel, sizeof rel, "%s-XXXXXX", prefix);
    if (!mkdtemp(rel)) {
        perror("mkdtemp");
        return -1;
    }
    /* the absolute path where it fits, else the relative one */
    int fits = realpath(rel, abs) && strlen(abs) < cap;
    if (!fits && strlen(rel) >= cap) {
        fprintf(stderr, "zt_disk_dir: %s: does not fit %zu bytes\n", rel, cap);
        return -1;
    }
    snprintf(dir, cap, "%s", fits ? abs : rel);
    return 0;
}
