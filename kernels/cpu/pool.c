/*
 * pool.c — the small thread pool each CPU device owns (see cpu.h).
 *
 * nthreads - 1 workers sleep on a condition variable; a job bumps a generation counter and wakes
 * them, the caller runs part 0 itself and waits for the count of pending parts to reach zero.
 * Sleeping (not spinning) matters here: tests run many devices of several threads each, one per
 * rank thread, on machines with few cores. Start and stop are one pthread_create/join per worker.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

typedef struct zk_worker {
    struct zk_pool *pool;
    int id;                 /* 1 .. nthreads-1; it runs part `id` of a job */
    pthread_t tid;
} zk_worker;

struct zk_pool {
    int nthreads;
    int nworkers;           /* started workers */
    zk_worker *workers;     /* [nthreads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t go;      /* a new job or stop */
    pthread_cond_t done;    /* pending reached zero */
    uint64_t gen;           /* job counter: a worker runs each generation at most once */
    int stop;
    int nparts;
    int pending;            /* parts of the current job not finished by the workers */
    zk_pool_fn fn;
    void *arg;
};

static void *worker_main(void *varg)
{
    zk_worker *w = varg;
    zk_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        if (w->id >= p->nparts) continue; /* a small job: not needed this time */
        zk_pool_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, w->id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

zk_pool *zk_pool_create(int nthreads)
{
    if (nthreads < 1) nthreads = 1;
    zk_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->workers = calloc((size_t)nthreads - 1, sizeof *p->workers);
        if (!p->workers) goto fail;
        for (int i = 0; i < nthreads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].id = i + 1;
            if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0)
                goto fail;
            p->nworkers++;
        }
    }
    return p;
fail:
    zk_pool_destroy(p);
    return NULL;
}

void zk_pool_destroy(zk_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i].tid, NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int zk_pool_threads(const zk_pool *p) { return p->nthreads; }

void zk_pool_run(zk_pool *p, int nparts, zk_pool_fn fn, void *arg)
{
    if (nparts > p->nthreads) nparts = p->nthreads;
    if (nparts <= 1) {
        fn(arg, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->nparts = nparts;
    p->pending = nparts - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
