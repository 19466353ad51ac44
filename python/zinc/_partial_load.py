"""_partial_load.py — DeepSpeed's load_checkpoint(load_optimizer_states=False) and
(load_lr_scheduler_states=False), for zinc's checkpoints and DeepSpeed's alike.

What DeepSpeed 0.19.8 does (measured, tests/python/ds_fixtures/load_flags.json):
- load_optimizer_states=False loads the weights and the counters (global_steps, skipped_steps,
  and the LR scheduler's position unless load_lr_scheduler_states is False too) and leaves the
  optimizer as it was: Adam's moments and step count (a fresh engine's first update after the
  load takes the bias corrections of a first step), the loss scaler, the param groups' lr,
  betas, eps and weight decay. At ZeRO stages 1-3 each fp32 master restarts from its 16-bit
  weight (_restore_from_bit16_weights).
- load_lr_scheduler_states=False leaves the scheduler at its position.
- Either way the first update after the load runs at the lr (and betas) the param groups
  hold (the loaded optimizer's, or the engine's own from before), and the scheduler writes its
  own from the next one on.

zinc keeps the counts apart for this: the applied updates (global_steps less the skipped ones),
Adam's count and the schedule's position (zinc_engine_set_adam_lead, zinc_engine_set_sched_lead:
each a lead over the applied updates, in the checkpoint's engine_state too).
"""
import ctypes
from collections import namedtuple

from ._lib import lib
from ._memory import _TORCH_DTYPE

Counts = namedtuple("Counts", "applied adam sched")


def counts(engine):
    """The engine's applied updates, Adam's step count and the schedule's position (as counts
    of updates: the lr of the next update is the schedule's at `sched`)."""
    applied, skipped = ctypes.c_int64(), ctypes.c_int64()
    lib.zinc_engine_steps(engine._e, ctypes.byref(applied), ctypes.byref(skipped))
    a = applied.value
    return Counts(a, a + lib.zinc_engine_adam_lead(engine._e),
                  a + lib.zinc_engine_sched_lead(engine._e))


def set_counts(engine, state, adam, sched):
    """zinc_engine_set_train_state(state) with Adam's count `adam` and the schedule's position
    `sched` (counts of updates, >= 0). zinc keeps applied + lead >= 0 at every call (zinc.h):
    where the applied count goes down the leads are set before the state, else after."""
    e, call = engine._e, engine._call

    def leads():
        call(lib.zinc_engine_set_adam_lead(e, adam - state.applied))
        call(lib.zinc_engine_set_sched_lead(e, sched - state.applied))

    if state.applied < counts(engine).applied:
        leads()
        call(lib.zinc_engine_set_train_state(e, ctypes.byref(state)))
    else:
        call(lib.zinc_engine_set_train_state(e, ctypes.byref(state)))
        leads()


def set_sched(engine, sched):
    """The schedule's position alone (load_lr_scheduler_states=False after a full load)."""
    engine._call(lib.zinc_engine_set_sched_lead(engine._e, sched - counts(engine).applied))


def masters_from_16bit(engine):
    """Each fp32 master this rank keeps becomes its 16-bit value, as DeepSpeed's
    _restore_from_bit16_weights after load_optimizer_states=False (its ZeRO stages 1-3; zinc
    at stage 0 too, see load_checkpoint) and refresh_fp32_params after load_module_only (its
    stages 0-2; zinc at 3 too). Nothing to do in fp32. Not collective."""
    if engine._code == 0:
        return
    dt, master = _TORCH_DTYPE[engine._code], engine._LOCAL[None]
    for _, params in engine._groups:
        for pid, _, _ in params:
            engine._set_fragment(pid, master, engine._fragment(pid, master).to(dt))


def held(engine):
    """What the param groups hold now for the next update: (each group's lr, each group's
    betas) — what DeepSpeed's next update runs at, whatever its scheduler's position."""
    return engine._opt._lrs(), engine._opt._betas()


def first_update(engine, values):
    """The first update after the load runs at `values` (held's: the lr and betas DeepSpeed's
    param groups hold then), the schedule's own from the next one on (the betas only matter
    under OneCycle with cycle_momentum, which writes them)."""
    lrs, betas = values
    engine._opt._restore(lrs)
    engine._opt._hold_betas(betas)
