"""_custom_load.py — load_checkpoint(custom_load_fn=...), zinc's checkpoints and DeepSpeed's
alike.

DeepSpeed 0.19.8 calls custom_load_fn(src=<the checkpoint's module state dict>, dst=engine.module)
where it would call the module's load_state_dict, then goes on with the rest of the load. Where
the function's values end up follows from that (measured: tests/python/ds_fixtures/custom_load.json):
- load_module_only=True, or load_optimizer_states=False: the weights are what the function made
  of the module, each fp32 master restarting from its 16-bit weight (refresh_fp32_params,
  _restore_from_bit16_weights); a parameter it leaves keeps the engine's value. With
  load_optimizer_states=False the counters (and the schedule's position unless
  load_lr_scheduler_states is False too) are the checkpoint's, as without a function.
- the full load: the fp32 masters and Adam's state are the checkpoint's (matched by name, as
  zinc's load matches every tensor); the 16-bit weights the function wrote are the ones the first
  forward uses, until the first update makes them from the masters again (at stage 0 in fp32,
  where the parameter is the master, they stay). At stage 3 the load writes the 16-bit weights
  from the masters after the function, so the first forward runs on the checkpoint's. Buffers,
  and the parameters zinc does not train at stages 0-2, keep what it wrote (a frozen parameter
  in stage 3's pieces is untried here).
One difference is kept on purpose, as without a function: at stage 3 with load_module_only
DeepSpeed leaves the weights as they were (its function writes into the empty placeholders);
zinc's function sees and sets the full values, as at the other stages.

`src` holds the checkpoint's names, so a function can load a checkpoint of a model that was
renamed or wrapped since: every trained tensor in the engine's working dtype (its fp32 master
rounded, as DeepSpeed's module state holds the 16-bit weight; fp32 at stage 3 with
load_optimizer_states=False, where DeepSpeed consolidates the fp32 masters), the buffers and
untrained parameters as saved. It is read whole on every rank, as DeepSpeed's is. The function
runs on every rank: where its writes are taken (the weights-only loads) rank 0's are; the full
load's writes to the 16-bit weights at stages 0-2 are each rank's own, as DeepSpeed's.
"""
import ctypes
import os

import torch

from . import _partial_load
from ._ds_import import _kept_state, apply_deepspeed, deepspeed_order, is_deepspeed
from ._interrupt import held
from ._lib import ZincError, lib
from ._memory import _TORCH_DTYPE
from ._state_io import _client_state_of, _no_checkpoint_either
from .utils.ds_checkpoint import read_deepspeed_checkpoint


def _cast(state, names, dtype):
    """state with the tensors named in `names` in dtype (the others as they are)."""
    return {n: (t.to(dtype) if n in names and t.is_floating_point() else t)
            for n, t in state.items()}


def _zinc_src(engine, load_dir, tag, fp32):
    """(tag, blob record, src) of zinc's checkpoint load_dir/tag (None: the one a load takes)."""
    from .utils import zero_to_fp32 as z      # (zinc.utils imports the engine)
    try:
        tag, blob = z._find_tag(load_dir, tag)
    except ZincError as err:      # (said for both formats, as load_checkpoint's own load says it)
        raise _no_checkpoint_either(err, load_dir) from None
    record, _ = z._saved_module_state(blob)
    state = z.get_fp32_state_dict_from_zero_checkpoint(load_dir, tag)
    trained = {n for n, _ in z._tensor_table(load_dir, tag)}
    trained |= {alias for alias, owner in record.get("tied", {}).items() if owner in trained}
    if not fp32:
        state = _cast(state, trained, _TORCH_DTYPE[engine._code])
    return tag, record, state


def _deepspeed_src(engine, ds, fp32):
    """src of a DeepSpeed checkpoint already read: its module state, each trained parameter
    whole (the module state's 16-bit weight where it holds the whole tensor, else — stage 3's
    placeholders, fp32 checkpoints — the fp32 master in the engine's dtype)."""
    state = dict(ds.module)
    dtype = torch.float32 if fp32 else _TORCH_DTYPE[engine._code]
    for n, master in ds.master.items():
        saved = state.get(n)
        if (fp32 or not isinstance(saved, torch.Tensor)
                or tuple(saved.shape) != tuple(master.shape)):
            state[n] = master.to(dtype)
    for alias, owner in (ds.client_state.get("shared_params") or {}).items():
        if owner in state:
            state[alias] = state[owner]
    return state


def _call_fn(engine, fn, src, modifier_rank):
    """fn(src=src, dst=engine.module) with every parameter of the model whole (stage 3's
    gathered); modifier_rank 0: rank 0's changes become the parameters' values on every rank,
    fp32 master and working copy (zinc.zero.GatheredParameters); None: the writes stay in the
    working copy the parameters view (stages 0-2, and stage 3's groups kept whole), until a
    load or an update writes it from the masters."""
    from .zero import GatheredParameters      # (zero imports the engine)
    with GatheredParameters(list(engine.module.parameters()), modifier_rank=modifier_rank):
        fn(src=src, dst=engine.module)
    # torch -> zinc (RAW): the next zinc call that reads the weights comes after torch's writes
    engine._torch_then_zinc()


def load(engine, fn, load_dir, tag, module_only, keep_adam, keep_sched, strict, before,
         held_before):
    """load_checkpoint with custom_load_fn=fn: (path, client_state). keep_adam, keep_sched:
    load_optimizer_states / load_lr_scheduler_states False (and not module_only); before,
    held_before: the engine's counts and held lr before the load (_partial_load)."""
    weights = module_only or keep_adam
    # DeepSpeed consolidates the fp32 masters for its function where it fetches stage 3's
    # parameters (load_optimizer_states=False)
    fp32 = engine._stage == 3 and keep_adam
    ds = None
    if is_deepspeed(load_dir, tag):
        ds = read_deepspeed_checkpoint(load_dir, tag, deepspeed_order(engine))
        src = _deepspeed_src(engine, ds, fp32)
    else:
        tag, record, src = _zinc_src(engine, load_dir, tag, fp32)
    if not weights:
        # The full load. DeepSpeed's optimizer load writes the 16-bit weights from the loaded
        # masters at stage 3 (the function's writes are gone before the first forward), not at
        # stages 1-2 (the first forward runs on them): zinc's load writes both, so the function
        # runs before it at stage 3 and after it below.
        if engine._stage == 3:
            _call_fn(engine, fn, src, None)
        if ds is not None:
            path, client = apply_deepspeed(engine, ds, strict, False, stacklevel=4,
                                           keep_sched=keep_sched, module=False)
        else:
            path, client = engine._load_zinc(load_dir, tag, strict, False, False, keep_sched,
                                             before, held_before, module=False)
        if engine._stage != 3:
            _call_fn(engine, fn, src, None)
        return path, client
    # The function's weights, the masters made from them and the counters that go with them
    # change together, as zinc's load and its counters do in _load_zinc (a Ctrl-C between them
    # left global_steps behind the weights): a Ctrl-C inside the function is raised when the
    # load has ended, a second one at once (_interrupt.py)
    with held():
        _call_fn(engine, fn, src, 0)
        _partial_load.masters_from_16bit(engine)
        if ds is not None:
            return apply_deepspeed(engine, ds, strict, module_only, stacklevel=4,
                                   keep_adam=keep_adam, keep_sched=keep_sched, module=False)
        engine._zinc_then_torch()
        if module_only:
            # zinc's window restarts, as after its weights-only load (the gradients of a window
            # in progress were taken on the weights the function replaced)
            engine._call(lib.zinc_engine_set_train_state(engine._e,
                                                         ctypes.byref(_kept_state(engine))))
        else:
            engine._counters_from(record)
            engine._load_lr_state(record, groups=False, sched=not keep_sched)
            engine._partial_counts(load_dir, tag, True, keep_sched, before, held_before,
                                   bool(record))
        engine._restart_window("load_checkpoint", 4)
    return os.path.join(load_dir, tag), _client_state_of(record)
