/*
 * timing.h — the CUDA model's per-phase GPU timer (gpt_cuda.h, "Timing"; issue 42). Private to
 * models/cuda/.
 *
 * A fixed pool of CUDA events, created once when timing is turned on. Within a micro-step each
 * phase the model runs takes the pool's next pair, recorded on the model's stream by zmt_begin
 * and zmt_end; after the micro-step's stream has finished (its one wait, for the loss),
 * zmt_collect adds each pair's elapsed time to its phase's sum and frees the pairs for the next
 * micro-step. So the timer adds no host wait and no allocation inside a step.
 *
 * Pairs rather than one event per boundary: the host work between two phases (views, engine
 * bookkeeping) belongs to neither, so it shows as the gap between the phases' sum and the step's
 * wall time instead of inflating a phase. An interval measures when the GPU reached its begin and
 * end events: where the GPU is starved it includes the host's time to queue the phase's work.
 */
#ifndef ZINC_MODELS_CUDA_TIMING_H
#define ZINC_MODELS_CUDA_TIMING_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zmt_timer zmt_timer;

/* A timer of nphases sums and a pool of `pairs` event pairs (the most intervals one micro-step
 * records). On failure the sentence is in err (n bytes). */
zinc_status zmt_create(int nphases, int pairs, zmt_timer **out, char *err, size_t n);
void zmt_destroy(zmt_timer *t);

/* Records the begin / end event of an interval of `phase` on stream s. Never fails on the spot:
 * a CUDA error or a full pool is kept and returned by the next zmt_collect. A begin while an
 * interval is open ends that one first. */
void zmt_begin(zmt_timer *t, int phase, cudaStream_t s);
void zmt_end(zmt_timer *t, cudaStream_t s);

/* After s has finished: adds the recorded intervals to their phases' sums, counts one micro-step
 * and empties the pool. Returns the first error since the last collect (sentence in err). */
zinc_status zmt_collect(zmt_timer *t, char *err, size_t n);

/* Forgets the intervals recorded since the last collect (a micro-step that failed midway). */
void zmt_discard(zmt_timer *t);

/* Zeroes the sums and counts. */
void zmt_reset(zmt_timer *t);

/* ms[nphases] summed milliseconds, cnt[nphases] intervals (NULL: not wanted), *steps micro-steps
 * collected (NULL: not wanted). */
void zmt_read(const zmt_timer *t, double *ms, long long *cnt, long long *steps);

#ifdef __cplusplus
}
#endif

#endif
