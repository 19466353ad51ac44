/*
 * view.h — the engine as the layer above it (ckpt/) sees it: a narrow view of one rank's state
 * instead of the engine struct.
 *
 * ckpt reads and fills the rank's shard through it (the pieces: which elements of which
 * parameter sit where in master/m/v), saves and restores the training counters, and parks its
 * background work (an async save) in the engine's one background slot, whose poll and release
 * the engine calls without knowing what the work is. So ckpt depends on the engine and the
 * engine on nothing of ckpt. With offload_optimizer the shard's master, m and v are host memory:
 * the view's state_dev says which device holds them, and ckpt moves them with its calls; with
 * offload_param (stage 3) the 16-bit shard is host memory too, and param16_dev says so.
 */
#ifndef ZINC_ENGINE_VIEW_H
#define ZINC_ENGINE_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "kernels/device.h"
#include "optim/optim.h"
#include "shard/comm.h"
#include "shard/plan.h"
#include "zinc.h"

/* The largest value a counter of zengine_state may take: checkpoints write them as JSON
 * numbers, exact up to 2^53, and refuse larger ones at load. */
#define ZENG_COUNTER_MAX 9007199254740992LL

/* Training state that checkpoints save and restore (besides the shard tensors). */
typedef struct zengine_state {
    int64_t step;                 /* optimizer updates applied */
    int64_t skipped;              /* optimizer steps skipped for overflow */
    int64_t micro;                /* micro-steps in the current accumulation window */
    int64_t adam_lead;            /* Adam's step count less `step` (its bias corrections take
                                     step + adam_lead), >= -step: 0, or 1 where the Python
                                     front-end follows DeepSpeed's 16-bit stage-0 optimizers,
                                     whose construction runs one Adam step on zero gradients,
                                     or below 0 after a load that kept the Adam state
                                     (load_optimizer_states=False) */
    int64_t sched_lead;           /* the LR schedule's position less `step`, >= -step: 0, or
                                     another value after a load that kept the schedule's
                                     position or restored only it (DeepSpeed's
                                     load_lr_scheduler_states / load_optimizer_states) */
    zscaler scaler;
} zengine_state;

/* The config schedule's step count: the updates applied so far and its lead over them
 * (zinc_engine_set_sched_lead). */
static inline int64_t zeng_sched_at(const zengine_state *st) { return st->step + st->sched_lead; }

/* One rank's engine as ckpt sees it. The pointers point into the engine: valid until it is
 * destroyed; the buffers exist once finalized. */
typedef struct zeng_view {
    zdev_t *dev;                  /* the device param16 (and, without offload, the state) lives on */
    zdev_t *state_dev;            /* the device master/m/v live on: dev, or with offload_optimizer
                                     a cpu device over host memory (its upload/download/memset0
                                     are memcpy/memset) */
    zcomm_t *comm;                /* the rank's comm (NULL only in a world of one without one) */
    int rank, world_size, stage;
    int finalized;
    zinc_dtype dtype;             /* working dtype of param16 */
    const zplan *plan;            /* groups and parameters: names, shapes, offsets */
    const zcfg *cfg;              /* the resolved config: hash, checkpoint options, timeouts */
    zengine_state *st;            /* step counters and loss scaler: saved, restored on load */
    float *master, *m, *v;        /* on state_dev: [plan.flat_numel] at stage 0, else [shard_numel] */
    void *param16;                /* the working copy, [flat_numel] (stage 3: the shard), on
                                     param16_dev */
    zdev_t *param16_dev;          /* dev, or with offload_param (stage 3) the host device */
    const char *err;              /* the engine's last error message */
    const char *partial_load;     /* "" or the tag a failed load had begun to apply (below) */
} zeng_view;

void zeng_view_get(zinc_engine_t *e, zeng_view *out);

/* A load that failed after it had begun to write the state (some streams or parameters the
 * checkpoint's, the rest and the counters the engine's own): `tagdir` names it, and until a load
 * succeeds (NULL clears it) zinc_step and zinc_ckpt_save refuse to train on or save that mix. */
void zeng_set_partial_load(zinc_engine_t *e, const char *tagdir);

/* A checkpoint's load that means to write the whole optimizer state: phase 0 before it writes
 * (with NVMe offload, a state lost to a failed step or a changed file then takes its writes, and
 * only its), 1 when it ends without having written it all (the state stays lost), 2 when it
 * wrote master, m and v of every parameter (whole again, before the refresh reads it). */
void zeng_state_rewrite(zinc_engine_t *e, int phase);

/* Sets the engine's last error (and the thread's); returns s. */
zinc_status zeng_fail(zinc_engine_t *e, zinc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A piece of one parameter held in this rank's shard: elements [lo, hi) of the flattened
 * parameter, at position shard_pos of the shard buffers (master/m/v) — or, at stage 0 where
 * those are full, at the flat position of the same elements. Pieces come from the slice
 * partition at every stage, so the ranks' pieces cover every parameter exactly once. */
typedef struct zshard_piece {
    int param;
    size_t lo, hi;
    float *master, *m, *v;        /* element lo of each stream, in state_dev's memory (view) */
} zshard_piece;

/* This rank's pieces, in parameter order; caller frees *out. */
zinc_status zeng_shard_pieces(zinc_engine_t *e, zshard_piece **out, int *n);

/* Before a load replaces the working copy (zinc_ckpt_load, zinc_load_safetensors), before it
 * reads anything: refused (ZINC_ERR_USAGE, naming `who` and the group) while the caller holds a
 * stage-3 group gathered, whose view would keep the old values, as zinc_param_set is refused
 * (engine/gather.c). zinc_gather being collective, every rank refuses alike: no abort. */
zinc_status zeng_none_held(zinc_engine_t *e, const char *who);

/* The opening of a call that trains or touches the optimizer state (gradients, master, Adam
 * moments, a checkpoint of them): ZINC_ERR_USAGE, naming `fn`, on a frozen engine
 * (zinc_engine_frozen), which keeps none of them; ZINC_OK otherwise (and for NULL: the call's
 * own check names that). A plain local error, not an abort of the world: the caller is meant
 * never to make these calls on a frozen engine, and a refusal leaves it usable. */
zinc_status zeng_check_trains(zinc_engine_t *e, const char *fn);
/* ZINC_ERR_USAGE naming `fn` while zinc_states_offload keeps the optimizer state in host memory
 * (states_away.c): the calls that read or write the master or the moments. */
zinc_status zeng_check_home(zinc_engine_t *e, const char *fn);

/* After master weights were changed outside a step (param_set, checkpoint load): recomputes the
 * 16-bit working copy from master and, at stages 0-2, all-gathers it. Collective. */
zinc_status zeng_refresh_params(zinc_engine_t *e);
/* After a checkpoint load (or zinc_engine_set_train_state): the micro-step in progress (groups handed over, gradients in buckets)
 * and the window's gradient sums so far are dropped — the checkpoint holds none of them — and
 * the window goes on from the loaded micro-step count. A lent gradient buffer stays attached,
 * zeroed (engine/step.c). Nothing before zinc_finalize. fn names the caller in an error. */
zinc_status zeng_restart_window(zinc_engine_t *e, const char *fn);

/* Background work a higher layer left running on the engine's state (at most one: an async
 * checkpoint save). The engine calls poll at the end of each zinc_step, after its collectives
 * (an error there becomes zinc_step's), and release in zinc_engine_destroy (waits for it). */
typedef struct zeng_background {
    void *work;                                   /* NULL: nothing in flight */
    zinc_status (*poll)(zinc_engine_t *e);        /* never blocks */
    void (*release)(zinc_engine_t *e);            /* waits */
} zeng_background;

zeng_background *zeng_background_slot(zinc_engine_t *e);

#endif
