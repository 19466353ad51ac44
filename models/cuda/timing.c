/*
 * timing.c — the per-phase GPU timer of the CUDA model (timing.h): a pool of event pairs recorded
 * during a micro-step and read once it has finished.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/zcuda.h"
#include "models/cuda/timing.h"

struct zmt_timer {
    int nphases, pairs;
    cudaEvent_t *ev;       /* [2 * pairs]: begin of pair i at 2i, its end at 2i + 1 */
    int nev;               /* events created (all of them once zmt_create returned) */
    int *phase;            /* [pairs] the phase of each recorded pair */
    int used;              /* pairs begun in this micro-step */
    int open;              /* 1 while pair used - 1 has a begin and no end */
    int dropped;           /* intervals not recorded: the pool was full */
    cudaError_t first;     /* first CUDA error since the last collect */
    const char *first_call;
    double *ms;            /* [nphases] summed milliseconds */
    long long *cnt;        /* [nphases] intervals summed */
    long long steps;       /* micro-steps collected */
};

zinc_status zmt_create(int nphases, int pairs, zmt_timer **out, char *err, size_t n)
{
    *out = NULL;
    if (nphases < 1 || pairs < 1) {
        snprintf(err, n, "timer: %d phases, %d pairs (want at least 1 of each)", nphases, pairs);
        return ZINC_ERR_INVALID_ARG;
    }
    zmt_timer *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, n, "timer: out of host memory");
        return ZINC_ERR_NOMEM;
    }
    t->nphases = nphases;
    t->ev = calloc((size_t)pairs * 2, sizeof *t->ev);
    t->phase = calloc((size_t)pairs, sizeof *t->phase);
    t->ms = calloc((size_t)nphases, sizeof *t->ms);
    t->cnt = calloc((size_t)nphases, sizeof *t->cnt);
    if (!t->ev || !t->phase || !t->ms || !t->cnt) {
        zmt_destroy(t);
        snprintf(err, n, "timer: out of host memory");
        return ZINC_ERR_NOMEM;
    }
    for (; t->nev < 2 * pairs; t->nev++) {
        cudaError_t e = cudaEventCreate(&t->ev[t->nev]);
        if (e != cudaSuccess) {
            zinc_status s = zcu_fail_cuda(err, n, (int)e, "cudaEventCreate (timer pool)", __FILE__,
                                          __LINE__);
            zmt_destroy(t);
            return s;
        }
    }
    t->pairs = pairs;
    *out = t;
    return ZINC_OK;
}

void zmt_destroy(zmt_timer *t)
{
    if (!t) return;
    for (int i = 0; i < t->nev; i++) cudaEventDestroy(t->ev[i]);
    free(t->ev);
    free(t->phase);
    free(t->ms);
    free(t->cnt);
    free(t);
}

static void record(zmt_timer *t, int i, cudaStream_t s, const char *call)
{
    cudaError_t e = cudaEventRecord(t->ev[i], s);
    if (e != cudaSuccess && t->first == cudaSuccess) {
        t->first = e;
        t->first_call = call;
    }
}

void zmt_begin(zmt_timer *t, int phase, cudaStream_t s)
{
    if (t->open) zmt_end(t, s);
    if (t->used == t->pairs) {
        t->dropped++;
        return;
    }
    t->phase[t->used] = phase;
    record(t, 2 * t->used, s, "cudaEventRecord (timer begin)");
    t->used++;
    t->open = 1;
}

void zmt_end(zmt_timer *t, cudaStream_t s)
{
    if (!t->open) return;
    record(t, 2 * t->used - 1, s, "cudaEventRecord (timer end)");
    t->open = 0;
}

zinc_status zmt_collect(zmt_timer *t, char *err, size_t n)
{
    zinc_status st = ZINC_OK;
    /* an interval left open by an error path has no end event: it is not read */
    int done = t->used - t->open;
    /* Two passes, so that a micro-step whose intervals cannot all be read adds none of them
     * (the sums and `steps` stay consistent); the second reads the same completed events. */
    for (int pass = 0; pass < 2 && t->first == cudaSuccess; pass++)
        for (int i = 0; i < done && t->first == cudaSuccess; i++) {
            float ms = 0.0f;
            cudaError_t e = cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]);
            if (e != cudaSuccess) {
                t->first = e;
                t->first_call = "cudaEventElapsedTime (timer)";
            } else if (pass == 1) {
                t->ms[t->phase[i]] += (double)ms;
                t->cnt[t->phase[i]]++;
            }
        }
    if (t->first != cudaSuccess)
        st = zcu_fail_cuda(err, n, (int)t->first, t->first_call, __FILE__, __LINE__);
    else if (t->dropped) {
        st = ZINC_ERR_INTERNAL;
        snprintf(err, n, "timer: %d intervals of a micro-step did not fit its pool of %d "
                 "(timer_pairs in models/cuda/model.cu sizes it)", t->dropped, t->pairs);
    } else {
        t->steps++;
    }
    zmt_discard(t);
    return st;
}

void zmt_discard(zmt_timer *t)
{
    t->used = t->open = t->dropped = 0;
    t->first = cudaSuccess;
}

void zmt_reset(zmt_timer *t)
{
    for (int p = 0; p < t->nphases; p++) t->ms[p] = 0.0, t->cnt[p] = 0;
    t->steps = 0;
}

void zmt_read(const zmt_timer *t, double *ms, long long *cnt, long long *steps)
{
    for (int p = 0; p < t->nphases; p++) {
        if (ms) ms[p] = t->ms[p];
        if (cnt) cnt[p] = t->cnt[p];
    }
    if (steps) *steps = t->steps;
}
