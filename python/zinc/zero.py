"""zero.py — DeepSpeed's `deepspeed.zero` names for zinc scripts: GatheredParameters, Init and
register_external_parameter.

    with zinc.zero.GatheredParameters(model.head.weight, modifier_rank=0):
        if engine.global_rank == 0:
            model.head.weight.zero_()          # every rank has the zeros at the exit

GatheredParameters gives code outside the training loop (an evaluation, a weight edit, a
pretrained load into a trained model) the full values of parameters an engine holds, and with
modifier_rank makes that rank's changes the parameters' values on every rank. It works at every
stage and on each engine whose model holds the parameters (the dispatch here; the work is the
engine's _context_enter/_context_exit):
- Stage 3: the parameters' groups get their full values (zinc_param_get, without disturbing
  zinc's gather schedule) until the exit; inside a forward the running module gathers them as
  for a read of their attribute. Stages 0-2: the parameters hold their values already.
- modifier_rank: the parameters that rank changed (a bitwise comparison with their values at
  the entry) are broadcast from it and set in zinc — fp32 master and working copy — so the next
  step starts from them; the others keep their fp32 master. DeepSpeed writes the 16-bit copy
  only (its fp32 master keeps the old values until optimizer.refresh_fp32_params()), and is a
  no-op at stages 0-2. Parameters the engine does not train (frozen) are copied from that rank
  too.
- Collective (every rank enters with the same parameters); engine.step() and load_checkpoint()
  inside raise, as does modifier_rank inside a forward, or the context inside a backward.
- Parameters no engine holds (before zinc.initialize): a no-op, as DeepSpeed's for parameters
  not partitioned. zinc.initialize takes rank 0's parameters, as DeepSpeed's does, so a model
  built or loaded on rank 0 inside this context reaches every rank there.

Init is accepted as a no-op context: zinc builds the model whole on each rank and shards it at
initialize (its peak memory at construction is the full model's), with a warning on rank 0.
"""
import warnings

import torch

from . import engine as _engine
from ._lib import lib
from .engine import register_external_parameter

__all__ = ["GatheredParameters", "Init", "register_external_parameter"]


def _owners(params):
    """[(engine, its parameters among `params`)] for each live engine whose model holds some, in
    the order the engines were created (the same on every rank: collectives follow it)."""
    out = []
    for eng in sorted(_engine._engines, key=lambda e: e._serial):
        if not eng._e.value:
            continue
        mine = eng._model_order
        held = [p for p in params if id(p) in mine]
        if held:
            out.append((eng, held))
    return out


class GatheredParameters:
    """DeepSpeed's zero.GatheredParameters (see the module's docstring)."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        self.enabled = bool(enabled)
        self._open = []
        self.params = []
        if not self.enabled:
            return
        if isinstance(params, torch.Tensor):
            params = [params]
        seen = set()
        for p in params if params is not None else ():     # a generator is read once
            if isinstance(p, torch.Tensor) and id(p) not in seen:
                seen.add(id(p))
                self.params.append(p)
        self.modifier_rank = modifier_rank
        if fwd_module is not None:       # a read inside its forward (the engine's _on_read)
            for p in self.params:
                register_external_parameter(fwd_module, p)

    def __enter__(self):
        if not self.enabled:
            return None
        try:
            for eng, held in _owners(self.params):
                self._open.append((eng, eng._context_enter(held, self.modifier_rank)))
        except BaseException:
            self._close(failed=True)
            raise
        return None

    def __exit__(self, exc_type, exc, tb):
        if self.enabled:
            self._close(failed=exc_type is not None)
        return False

    def _close(self, failed):
        """Each engine's _context_exit, in the order entered; with an exception inside the
        context nothing is broadcast (the other ranks may not be here)."""
        opened, self._open = self._open, []
        first = None
        for eng, rec in opened:
            try:
                eng._context_exit(rec, failed or first is not None)
            except Exception as ex:  # noqa: BLE001 — close them all, raise the first error
                first = first or ex
        if first is not None and not failed:
            raise first


class Init:
    """DeepSpeed's zero.Init, accepted as a no-op context (see the module's docstring).
    zero_quantized_weights, which would change the weights' values, raises."""

    _warned = False

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True,
                 remote_device=None, pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, zero_param_parallel_group=None,
                 zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None, tensor_overrides=None):
        if enabled and (zero_quantized_weights or zero_quantized_nontrainable_weights):
            raise NotImplementedError("zinc.zero.Init(zero_quantized_weights=True): zinc keeps "
                                      "the weights unquantized")
        if enabled and not Init._warned:
            Init._warned = True
            if lib.zinc_world_rank(_engine._launcher_world()) <= 0:
                warnings.warn("zinc.zero.Init: zinc builds the model whole on each rank and "
                              "shards it at zinc.initialize (rank 0's weights), so construction "
                              "needs the full model's memory on each rank", RuntimeWarning,
                              stacklevel=2)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False
