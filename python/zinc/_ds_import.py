"""_ds_import.py — engine.load_checkpoint of a DeepSpeed checkpoint folder, as it is.

zinc.utils.ds_checkpoint reads the folder into model space (every parameter's fp32 master,
exp_avg and exp_avg_sq in full, the counters, the loss scaler, the module's buffers); this
file checks it against the model and hands it to the engine through its parameter calls
(zinc_param_set, zinc_param_state_set) and zinc_engine_set_train_state. Each rank keeps its
part of what it is given, so any zinc world size and stage loads any DeepSpeed stage and world
size: the resharding is the engine's own.

Everything is read and checked before anything is set: a checkpoint zinc cannot carry, or one of
another model, raises with the engine as it was. Reading (read_deepspeed_checkpoint) and
applying (apply_deepspeed) are apart so that a caller that has read the folder already
(from_deepspeed, which builds its module from it) applies that state instead of reading the
folder a second time: one copy of the checkpoint in memory, not two.
"""
import ctypes
import json
import os
import warnings

import torch

from . import _partial_load
from ._lib import TrainState, lib
from ._memory import _TORCH_DTYPE
from .utils.ds_checkpoint import read_deepspeed_checkpoint

_EXP_AVG, _EXP_AVG_SQ = 0, 1     # zinc_param_state


def _plan_trained(engine, ds, lost_why):
    """{pid: name} of zinc's parameters DeepSpeed's checkpoint has optimizer state for, matched
    by name. Raises ValueError naming a shape that differs, and, when lost_why is given, the
    parameters it lacks (lost_why: what the message adds after naming them)."""
    set_trained = {}
    lost = []
    for n, (pid, _) in engine._trained_params().items():
        if n not in ds.master:
            lost.append(n)
            continue
        shape = tuple(engine._shapes[pid])
        if tuple(ds.master[n].shape) != shape:
            raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(ds.master[n].shape)} in "
                             f"{ds.path}, {shape} in the model")
        set_trained[pid] = n
    if lost and lost_why:
        raise ValueError(f"zinc: load_checkpoint: the DeepSpeed checkpoint {ds.path} has no "
                         f"optimizer state for the parameters {lost} that zinc trains "
                         f"{lost_why}")
    return set_trained


def _plan(engine, ds, strict):
    """{pid: name} of zinc's parameters to set, {Parameter: tensor} of the model's untrained
    parameters, {buffer: tensor}: DeepSpeed's values matched to the model by name. Raises
    ValueError naming what differs (strict: anything missing or unknown; always: a shape)."""
    trained = engine._trained_params()
    untrained = engine._untrained_params()
    buffers = engine._persistent_buffers()
    set_trained = _plan_trained(engine, ds, strict and "(a checkpoint of another model, or "
                                "saved with them frozen?); load_module_strict=False keeps "
                                "their values")
    set_untrained = {}
    for n, p in untrained.items():
        src = ds.master.get(n, ds.module.get(n))
        if src is None or src.numel() == 0:         # stage 3's module holds placeholders
            if strict:
                raise ValueError(f"zinc: load_checkpoint: {ds.path} holds no value for the "
                                 f"parameter {n} that zinc does not train; "
                                 f"load_module_strict=False keeps the model's value")
            continue
        if tuple(src.shape) != tuple(engine._full_shape(p)):
            raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(src.shape)} in {ds.path}, "
                             f"{tuple(engine._full_shape(p))} in the model")
        set_untrained[p] = src
    set_buffers = {}
    for n, b in buffers.items():
        if n not in ds.module:
            if strict:
                raise ValueError(f"zinc: load_checkpoint: the model's buffer {n} is not in "
                                 f"{ds.path}; load_module_strict=False keeps its value")
            continue
        if tuple(ds.module[n].shape) != tuple(b.shape):
            raise ValueError(f"zinc: load_checkpoint: buffer {n} is "
                             f"{tuple(ds.module[n].shape)} in {ds.path}, {tuple(b.shape)} in "
                             f"the model")
        set_buffers[b] = ds.module[n]
    known = set(trained) | set(untrained) | set(buffers)
    unknown = sorted(n for n in ds.master if n not in known)
    if unknown and strict:
        raise ValueError(f"zinc: load_checkpoint: {ds.path} trains {unknown}, which are not "
                         f"parameters of the model (a checkpoint of another model?); "
                         f"load_module_strict=False leaves them")
    return set_trained, set_untrained, set_buffers


def _weight_of(engine, ds, n):
    """The weight a module-only (or optimizer-less) load gives trained parameter n, as DeepSpeed's
    load_module_state_dict puts the checkpoint's module state into the model (cast to its dtype)
    and its refresh makes each master from it: the 16-bit copy the module state holds, where it
    holds the whole tensor (stages 0-2); else (stage 3's empty placeholder, an fp32 checkpoint)
    the fp32 master, rounded to a 16-bit engine's dtype."""
    saved = ds.module.get(n)
    master = ds.master[n]
    if (ds.dtype != "fp32" and isinstance(saved, torch.Tensor) and
            tuple(saved.shape) == tuple(master.shape)):
        w = saved
    else:
        w = master
    return w.to(_TORCH_DTYPE[engine._code]) if engine._code != 0 else w


def _kept_state(engine):
    """The zinc_train_state_t of a weights-only load: the engine's own counters and loss scaler
    (scaler_scale 0 keeps it), so that zinc_engine_set_train_state only starts the accumulation
    window over, as zinc's own weights-only load does (zinc_ckpt_load with keep_optimizer): the
    gradients of a window in progress were taken on the weights the load replaces."""
    applied, skipped = ctypes.c_int64(), ctypes.c_int64()
    lib.zinc_engine_steps(engine._e, ctypes.byref(applied), ctypes.byref(skipped))
    return TrainState(applied=applied.value, skipped=skipped.value, scaler_scale=0.0,
                      scaler_hysteresis=1, scaler_iter=0, scaler_last_overflow_iter=-1)


def _adam_lead(ds):
    """(applied steps, Adam's lead over them) of ds: DeepSpeed's applied steps are its
    global_steps less the skipped ones, and its Adam count leads them by one after a 16-bit
    stage-0 optimizer's step on zero gradients at its construction (zinc_engine_set_adam_lead).
    A count behind the applied steps (no DeepSpeed run makes one) leaves the lead 0 and takes
    Adam's count for both, as before the lead."""
    applied = ds.global_steps - ds.skipped_steps
    lead = ds.adam_step - applied
    return (applied, lead) if lead >= 0 else (ds.adam_step, 0)


def _train_state(engine, ds, stacklevel, converting):
    """The zinc_train_state_t of ds (the schedule's position: _sched_of)."""
    applied, _ = _adam_lead(ds)
    st = TrainState(applied=applied, skipped=ds.skipped_steps, scaler_scale=0.0,
                    scaler_hysteresis=1, scaler_iter=0, scaler_last_overflow_iter=-1)
    if ds.scaler is not None:
        st.scaler_scale = ds.scaler["scale"]
        st.scaler_hysteresis = ds.scaler["hysteresis"]
        st.scaler_iter = ds.scaler["iter"]
        st.scaler_last_overflow_iter = ds.scaler["last_overflow_iter"]
    # fp16 at stage 0 keeps Adam's moments in units of gradient / loss scale (engine.py,
    # _unscaled_loss), at stages 1-3 in gradients: carried across, they continue in the other
    # units (exact only at a scale of 1).
    src = ds.scaler["scale"] if ds.scaler else 1.0
    tgt = src if ds.scaler and engine._code == 1 else lib.zinc_engine_loss_scale(engine._e)
    src_units = ds.dtype == "fp16" and ds.kind == "zero-0" and src != 1.0
    tgt_units = engine._unscaled_loss and tgt != 1.0
    if src_units != tgt_units and not converting and engine.global_rank == 0:
        warnings.warn(f"zinc: {ds.path}: fp16 at ZeRO stage 0 keeps Adam's moments in units of "
                      f"the gradient over the loss scale, other runs in gradients (as "
                      f"DeepSpeed 0.19.8 does); this {ds.dtype} {ds.kind} checkpoint (scale "
                      f"{src:g}) goes on as {'fp16' if engine._code == 1 else 'not fp16'} at "
                      f"stage {engine._stage} (scale {tgt:g}) with its moments taken in the "
                      f"other units, which is not DeepSpeed's continuation (load it as it was "
                      f"saved: fp16 at stage 0, or not)", RuntimeWarning,
                      stacklevel=stacklevel + 1)
    # The schedule's type and values are zinc's config's, not the checkpoint's: a run switched
    # with another scheduler section went on silently on it (WarmupDecayLR became WarmupLR).
    theirs = (ds.ds_config or {}).get("scheduler")
    ours = (engine._cfg or {}).get("scheduler")
    if (theirs and engine._client_sched is None and engine.global_rank == 0 and
            _sched_key(theirs) != _sched_key(ours)):
        now = ("zinc's config says" if ours else
               "the checkpoint's last lr, held (as DeepSpeed's optimizer would hold it)")
        warnings.warn(f"zinc: {ds.path}: DeepSpeed's run had the scheduler {theirs}, zinc's "
                      f"config {ours or 'none'}: the lr goes on as {now} (give the "
                      f"checkpoint's section to continue its schedule)", RuntimeWarning,
                      stacklevel=stacklevel + 1)
    return st


def _sched_key(sec):
    """A scheduler section as (type, params) to compare; None for none."""
    if not isinstance(sec, dict):
        return None
    return str(sec.get("type", "")).lower(), json.dumps(sec.get("params") or {}, sort_keys=True)


def load_deepspeed(engine, load_dir, tag, strict, weights_only, keep_adam=False,
                   keep_sched=False):
    """engine.load_checkpoint of the DeepSpeed checkpoint load_dir/tag: (tag folder,
    client_state). weights_only (load_module_only): the weights and buffers alone, the Adam
    state, counters and loss scaler kept as they are. keep_adam, keep_sched
    (load_optimizer_states, load_lr_scheduler_states False: _partial_load.py): the engine's
    Adam state and count, and its schedule's position, kept."""
    return apply_deepspeed(engine, read_deepspeed_checkpoint(load_dir, tag,
                                                             deepspeed_order(engine)),
                           strict, weights_only, stacklevel=4, keep_adam=keep_adam,
                           keep_sched=keep_sched)


def deepspeed_order(engine):
    """The names of the engine's trained parameters in the order a DeepSpeed optimizer over
    the same model_parameters (or client optimizer) holds them: a stage-0 checkpoint's only
    names."""
    name_of = {id(p): n for n, p in engine.module.named_parameters() if p.requires_grad}
    client = engine._opt._client
    seq = ([p for g in client.param_groups for p in g["params"]] if client is not None
           else engine._pgs.order or list(engine.module.parameters()))
    return [name_of[id(p)] for p in seq if id(p) in name_of]


def apply_deepspeed(engine, ds, strict, weights_only, stacklevel=2, converting=False,
                    keep_adam=False, keep_sched=False, module=True):
    """load_deepspeed of a checkpoint already read (ds: a DeepSpeedState): checks it against
    the engine's model, then sets it; (tag folder, client_state). ds is only read.
    keep_adam, keep_sched: load_deepspeed's.
    stacklevel: the frame a warning names, as warnings.warn's counted from this call.
    converting: from_deepspeed's engine, which continues nothing (no word of units) and has
    DeepSpeed's groups where the files say them (else one: the groups are then not set).
    module=False: the module's values are a custom_load_fn's (_custom_load.py): no weight of a
    weights-only load, buffer or untrained parameter is set here, and a full load needs
    optimizer state for every parameter zinc trains whatever `strict` says."""
    if module:
        set_trained, set_untrained, set_buffers = _plan(engine, ds, strict)
    else:
        set_untrained, set_buffers = {}, {}
        set_trained = {} if weights_only or keep_adam else _plan_trained(
            engine, ds, "(with custom_load_fn, a full load matches the optimizer state by "
            "name; load_module_only=True or load_optimizer_states=False take the function's "
            "weights alone)")
    groups = ds.param_groups and not (converting and
                                      len(ds.param_groups) != len(engine._opt._sources))
    if not weights_only and not keep_adam and groups:    # (before anything is written)
        engine._opt._check_count(ds.param_groups, "param groups")
    before, held_before = _partial_load.counts(engine), _partial_load.held(engine)
    applied, lead = _adam_lead(ds)
    sched_at = _sched_of(ds, applied)
    if sched_at > 2 ** 53:              # (zinc's counters' bound: checked before any write)
        raise ValueError(f"zinc: {ds.path}: the LR scheduler's last_batch_iteration "
                         f"{sched_at - 1} is out of range (0..2^53)")
    # weights_only, keep_adam: the weights alone go in (keep_adam: the counters after them),
    # each fp32 master its 16-bit weight, as DeepSpeed's refresh_fp32_params and
    # _restore_from_bit16_weights make it
    masters_only = weights_only or keep_adam
    state = _kept_state(engine) if masters_only else _train_state(engine, ds, stacklevel,
                                                                      converting)
    engine._torch_then_zinc()       # the writes below replace weights torch may still read
    for pid, n in set_trained.items():
        values = [ds.master[n]] if masters_only else [ds.master[n], ds.exp_avg[n],
                                                      ds.exp_avg_sq[n]]
        if masters_only:
            values[0] = _weight_of(engine, ds, n)
        values = [v.to(torch.float32).contiguous() for v in values]
        engine._call(lib.zinc_param_set(engine._e, pid, ctypes.c_void_p(values[0].data_ptr())))
        if not masters_only:
            for which, v in ((_EXP_AVG, values[1]), (_EXP_AVG_SQ, values[2])):
                engine._call(lib.zinc_param_state_set(engine._e, pid, which,
                                                      ctypes.c_void_p(v.data_ptr())))
    if weights_only:
        engine._call(lib.zinc_engine_set_train_state(engine._e, ctypes.byref(state)))
    else:
        # Adam's count is the checkpoint's, or the engine's with keep_adam (a weights-only
        # load keeps it); the schedule's position DeepSpeed's scheduler's (or, keep_sched, the
        # engine's: set once the groups show the checkpoint's lr, below)
        if keep_adam:           # the checkpoint's counters; the engine's loss scaler stays
            state.applied, state.skipped = applied, ds.skipped_steps
        _partial_load.set_counts(engine, state, before.adam if keep_adam else applied + lead,
                                 before.sched if keep_sched and keep_adam else sched_at)
    for p, v in set_untrained.items():    # (stage 3's frozen pieces: the frozen engine's)
        engine._set_untrained(p, v)
    engine._zinc_then_torch()
    # zinc's window restarted with the state: the front-end's too
    engine._restart_window("load_checkpoint", stacklevel + 1)
    with torch.no_grad():
        for b, v in set_buffers.items():
            b.copy_(v.to(b.dtype))
    if not weights_only:
        # DeepSpeed's global_steps counts skipped steps too, as zinc's engine.global_steps.
        engine._steps = ds.global_steps
        engine._skipped = ds.skipped_steps
        engine._samples = ds.global_samples or ds.global_steps * engine.train_batch_size()
        engine._lr = lib.zinc_engine_lr(engine._e)
        if (engine._client_sched is not None and isinstance(ds.lr_scheduler, dict)
                and not keep_sched):
            engine._client_sched.load_state_dict(ds.lr_scheduler)
        if keep_adam:                   # the groups keep theirs, the first update their lr
            _partial_load.first_update(engine, held_before)
        else:
            if groups:
                _restore_groups(engine, ds)
            engine._opt._after_step()   # the groups show the next step's lr
            # The first update runs at the checkpoint's group lr, as DeepSpeed's (its load
            # gives the optimizer's groups theirs; its scheduler writes its own after that
            # update): the schedule's at the position DeepSpeed's scheduler was saved at,
            # unless that position is not the applied steps' (fp32_s2_full_at5) or a load or
            # write left another.
            first = _partial_load.held(engine)
            if groups:
                first = ([g["lr"] for g in ds.param_groups], first[1])
            if keep_sched:
                _partial_load.set_sched(engine, before.sched)
            _partial_load.first_update(engine, first)
    if converting:
        return ds.path, ds.client_state
    return ds.path, ds.client_state_for(module_only=weights_only, optimizer=not keep_adam,
                                        scheduler=not keep_sched, stage0=engine._stage == 0)


def _sched_of(ds, applied):
    """The schedule's position (a count of updates) a DeepSpeed checkpoint gives zinc's:
    DeepSpeed's scheduler's last_batch_iteration + 1, as its load restores the scheduler's
    own position (it leads the applied updates where a script stepped the scheduler itself, or
    loaded a state into it); the applied updates where the checkpoint has none (a client
    scheduler's state, or none). Before 2026-12-01 the applied updates won, with a warning."""
    from .runtime.lr_schedules import _position     # (it imports the engine's modules)
    sched = ds.lr_scheduler if isinstance(ds.lr_scheduler, dict) else {}
    try:
        at = _position(sched["last_batch_iteration"])
    except (KeyError, TypeError):
        return applied
    return applied if at < -1 else at + 1


def _restore_groups(engine, ds):
    """DeepSpeed's load gives its optimizer's param groups the checkpoint's betas, eps, weight
    decay and lr (torch's load_state_dict): the next step runs on them, whatever the new
    config says, until a scheduler writes another lr — a client scheduler's first step after
    the load ran on the fresh optimizer's lr, and a run without a scheduler on the config's
    instead of the checkpoint's. zinc does the same, as for its own checkpoints
    (_state_io._load_lr_state): the lr where the groups drive it (a client scheduler, or none
    in the config); a scheduler in zinc's config sets each step's lr itself."""
    opt = engine._opt         # (ds.param_groups is not empty: load_deepspeed's `groups`)
    opt._restore_adam([[*g["betas"], g["eps"], g["weight_decay"]] for g in ds.param_groups])
    if opt._taken:
        opt._restore([g["lr"] for g in ds.param_groups])


def is_deepspeed(load_dir, tag):
    """Whether load_dir/tag (tag None: `latest`) is a DeepSpeed checkpoint, not zinc's."""
    from .utils.ds_checkpoint import find_deepspeed_tag
    return os.path.isdir(load_dir) and find_deepspeed_tag(load_dir, tag) is not None
