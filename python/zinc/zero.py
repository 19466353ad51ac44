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
- Parameters Init partitioned (before zinc.initialize): their full values inside, put together
  from the pieces; with modifier_rank that rank's values are cut into the new pieces at the
  exit, without it the pieces stay as they were (a write is dropped, as DeepSpeed's).
- Parameters neither holds: a no-op, as DeepSpeed's for parameters not partitioned.
  zinc.initialize takes rank 0's parameters, as DeepSpeed's does, so a model built or loaded on
  rank 0 inside this context reaches every rank there.

Init partitions the model while it is built, as DeepSpeed's: at the end of each module's
constructor its parameters are cut into one piece per rank (rank 0's values), each rank keeping
its own, so that no rank ever holds more of the model than its pieces and the one parameter
being cut (_zero_init.py). initialize puts each parameter together from the pieces, one at a
time, to hand it to zinc. Between the two a partitioned parameter is a one-element NaN seen with
its shape: writing it (an init pass of an enclosing constructor) goes through Module.apply
(or transformers' Module.smart_apply, its post_init's walk), which Init makes gather each
module's parameters for the function and keep rank 0's result, or through
GatheredParameters(modifier_rank=0); a write any other way raises, in torch or at
initialize. A move or cast after the construction (model.to(...)) gives the marks the new dtype
and device. At the context's exit, what the models built inside hold whole by then (a load
after the construction: transformers' from_pretrained) is partitioned too. Under torchrun or
srun (zinc's world meets only inside an engine) the broadcasts go through torch.distributed;
where that cannot be set up (srun without MASTER_ADDR), Init leaves the model whole, with a
warning on rank 0.
"""
import functools
import sys
import warnings

import torch

from . import _zero_init
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
        self._parts = []        # parameters zero.Init partitioned, full inside the context
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
        parts = [p for p in self.params if _zero_init.held(p) is not None]
        if parts and self.modifier_rank is not None:
            size = _zero_init.world_rank_size()[1]
            if not 0 <= self.modifier_rank < size:
                raise ValueError(f"zinc.zero.GatheredParameters: modifier_rank "
                                 f"{self.modifier_rank} is outside the world's ranks 0..{size - 1}")
        for p in parts:          # before any collective: every rank raises alike
            _zero_init.check_untouched(p)
        try:
            for eng, held in _owners(self.params):
                self._open.append((eng, eng._context_enter(held, self.modifier_rank)))
            for p in parts:
                _zero_init.open_full(p)
                self._parts.append(p)
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
        context nothing is broadcast (the other ranks may not be here). Every one runs, a Ctrl-C
        in one too (it left the others counting an open context, which refused step() and
        load_checkpoint() until a new engine); the first error is raised after them, and a
        KeyboardInterrupt also where the block's own exception is on its way."""
        opened, self._open = self._open, []
        parts, self._parts = self._parts, []
        first = None
        for eng, rec in opened:
            try:
                eng._context_exit(rec, failed or first is not None)
            except BaseException as ex:  # noqa: BLE001 — close them all, raise the first error
                first = first or ex
        try:
            _zero_init.close_full(parts, None if failed or first is not None
                                  else self.modifier_rank)
        except BaseException as ex:  # noqa: BLE001
            first = first or ex
        if first is not None and (not failed or not isinstance(first, Exception)):
            raise first


class Init:
    """DeepSpeed's zero.Init (see the module's docstring): the parameters of each module built
    inside are partitioned over the ranks at the end of its constructor (_zero_init.py).
    zero_quantized_weights, which would change the weights' values, raises. The other arguments
    are accepted: the pieces keep the dtype and device the parameters were built with (zinc
    casts to the config's precision at initialize), and zinc's sharding is over every rank."""

    _depth = 0            # Init contexts open (nested ones add nothing)
    _partitioning = False  # whether the open contexts partition (False: the world cannot)
    _patched = {}          # class -> its own __init__ before Init wrapped it
    _init_subclass = None  # (had one, Module's own __init_subclass__) while patched
    _warned = False

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True,
                 remote_device=None, pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, zero_param_parallel_group=None,
                 zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None, tensor_overrides=None):
        if enabled and (zero_quantized_weights or zero_quantized_nontrainable_weights):
            raise NotImplementedError("zinc.zero.Init(zero_quantized_weights=True): zinc keeps "
                                      "the weights unquantized")
        self.enabled = bool(enabled)
        self._entered = False
        if self.enabled and module is not None:      # DeepSpeed's form for a built model
            with self:
                if Init._partitioning:
                    _zero_init.partition_module(module)

    def __enter__(self):
        if not self.enabled or self._entered:
            return self
        if Init._depth == 0:
            Init._partitioning = _zero_init.can_partition()
            if Init._partitioning:
                _patch()
            elif not Init._warned:
                Init._warned = True
                if lib.zinc_world_rank(_engine._launcher_world()) <= 0:
                    warnings.warn("zinc.zero.Init: this launcher's ranks cannot meet before "
                                  "an engine exists (zinc's world broadcasts under mpirun, "
                                  "torch.distributed under torchrun, or srun with "
                                  "MASTER_ADDR/MASTER_PORT set), so the model is built whole "
                                  "on each rank and sharded at zinc.initialize",
                                  RuntimeWarning, stacklevel=2)
        Init._depth += 1
        self._entered = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._entered:
            self._entered = False
            Init._depth -= 1
            if Init._depth == 0 and Init._partitioning:
                _unpatch()
                _zero_init.partition_tops(failed=exc_type is not None)
                _say_meta_left()
        return False


def _say_meta_left():
    """A warning (rank 0) when parameters are still on the meta device at Init's exit."""
    left = _zero_init.take_meta_left()
    if left and lib.zinc_world_rank(_engine._launcher_world()) <= 0:
        warnings.warn(f"zinc.zero.Init: {len(left)} parameters are still on the meta device "
                      f"at the context's exit (the first: {left[0]}) and were not partitioned: "
                      "given values later, each rank holds them whole until zinc.initialize; "
                      "load them inside the context (transformers' from_pretrained does) to "
                      "have them partitioned at its exit", RuntimeWarning, stacklevel=3)


class _WriteAfterPartition(RuntimeError):
    """A constructor wrote a parameter zero.Init had partitioned (the write would be lost)."""


# id(module) -> how many of its classes' constructors are running (a subclass's __init__ calls
# its base's): the module is partitioned when the outermost returns.
_building = {}


def _wrap_init(orig):
    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        if not (Init._depth and Init._partitioning):
            return orig(self, *args, **kwargs)
        key = id(self)
        _building[key] = _building.get(key, 0) + 1
        try:
            orig(self, *args, **kwargs)
        except RuntimeError as ex:
            # torch's words for an in-place write to a partitioned parameter's mark
            if "written-to tensor" in str(ex) and not isinstance(ex, _WriteAfterPartition):
                raise _WriteAfterPartition(
                    f"zinc.zero.Init: {type(self).__name__}'s constructor wrote a parameter that "
                    "zinc.zero.Init had already partitioned at the end of its own module's "
                    "constructor (an init_weights pass over submodules, say): do that write "
                    "through self.apply(fn) or inside zinc.zero.GatheredParameters(params, "
                    "modifier_rank=0), or build the model outside zinc.zero.Init (torch said: "
                    f"{ex})") from ex
            raise
        finally:
            left = _building.pop(key) - 1
            if left:
                _building[key] = left
        if not left:
            _zero_init.partition_module(self)
            if not _building:             # no enclosing constructor: a top module
                _zero_init.note_top(self)

    __init__._zinc_orig = orig
    return __init__


def _wrap_class(cls):
    """Wraps the class's own constructor (once), kept in Init._patched for _unpatch."""
    orig = cls.__dict__.get("__init__")
    if orig is not None and not hasattr(orig, "_zinc_orig"):
        Init._patched[cls] = orig
        cls.__init__ = _wrap_init(orig)


def _subclasses(cls):
    out, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            out.append(sub)
            todo.append(sub)
    return out


def _patch():
    """Wraps the constructor of every torch.nn.Module class, and of those defined while Init is
    open (__init_subclass__), as DeepSpeed's Init does, Module.apply (_apply_gathered) and
    transformers' Module.smart_apply (_smart_apply_gathered)."""
    for cls in _subclasses(torch.nn.Module):
        if not issubclass(cls, _engine.Engine):    # initialize inside Init: zinc's, not a model
            _wrap_class(cls)
    own = torch.nn.Module.__dict__.get("__init_subclass__")
    Init._init_subclass = (own is not None, own)

    def init_subclass(cls, **kwargs):
        if own is not None:
            own.__get__(None, cls)(**kwargs)
        else:
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
        _wrap_class(cls)

    torch.nn.Module.__init_subclass__ = classmethod(init_subclass)
    _zero_init.keep_marks_on_moves()
    global _module_apply, _smart_apply
    _module_apply = torch.nn.Module.apply
    torch.nn.Module.apply = _apply_gathered
    _smart_apply = torch.nn.Module.__dict__.get("smart_apply")
    torch.nn.Module.smart_apply = _smart_apply_gathered


_module_apply = torch.nn.Module.apply    # Module.apply as it was before the last _patch
_smart_apply = None                      # transformers' Module.smart_apply before it, if defined


def _apply_gathered(module, fn):
    """Module.apply while Init is open, as DeepSpeed's (its zero config's override_module_apply,
    true by default): fn sees each module's own partitioned parameters whole (an init_weights
    pass of an enclosing constructor, `self.apply(self._init_weights)`), and rank 0's values
    after it are cut into the new pieces, as GatheredParameters(modifier_rank=0) would.
    transformers before smart_apply (up to 4.51) initialises through
    `self.apply(self._initialize_weights)`: that fn gets _hf_init_mods' parameters whole, as
    smart_apply's does (a GPT-2 attention block's init writes its child's `c_proj.weight`)."""
    if getattr(fn, "_zinc_gathering", False):      # torch's apply recursing into the children
        return _module_apply(module, fn)
    hf_init = _is_hf_init(fn)

    def each(mod):
        _gathered_call(_hf_init_mods(mod, fn) if hf_init else [mod], lambda: fn(mod))

    each._zinc_gathering = True
    return _module_apply(module, each)


def _gathered_call(mods, call):
    """call() with the partitioned parameters of `mods` (each module's own) whole, and rank 0's
    values after it cut into the new pieces: GatheredParameters(modifier_rank=0)."""
    parts = [p for m in mods for p in m.parameters(recurse=False)
             if _zero_init.held(p) is not None]
    with GatheredParameters(parts, modifier_rank=0, enabled=bool(parts)):
        call()


def _hf_model_class():
    """transformers' PreTrainedModel where transformers is loaded (smart_apply hands each such
    sub-model its own init function), else None."""
    mod = sys.modules.get("transformers.modeling_utils")
    return getattr(mod, "PreTrainedModel", None)


def _is_hf_init(fn):
    """Whether fn is a transformers model's own init function (its bound _initialize_weights or
    _init_weights)."""
    hf_model = _hf_model_class()
    return (hf_model is not None and isinstance(getattr(fn, "__self__", None), hf_model)
            and getattr(fn, "__name__", "") in ("_initialize_weights", "_init_weights"))


def _hf_init_mods(module, fn):
    """The modules whose own parameters a transformers init fn of `module` may write: the module
    and its direct children that are not sub-models (an _init_weights may write
    `module.q_proj.weight`; a sub-model has its own init), as transformers gathers under
    DeepSpeed's Init (integrations/deepspeed.py, initialize_weights_zero3). No module when fn is
    _initialize_weights and transformers has already initialised the module
    (_is_hf_initialized: an inner model's post_init ran first): fn returns at once."""
    if (getattr(fn, "__name__", "") == "_initialize_weights"
            and getattr(module, "_is_hf_initialized", False)):
        return []
    hf_model = _hf_model_class()
    return [module] + [c for c in module.children()
                       if hf_model is None or not isinstance(c, hf_model)]


def _smart_apply_gathered(module, fn, *is_custom_code):
    """transformers' initialisation recursion while Init is open. PreTrainedModel.post_init
    initialises the weights through `torch.nn.Module.smart_apply(fn[, is_custom_code])` (it sets
    that attribute when absent; 4.5x passes fn alone, 5.x also is_custom_code, handed on to fn),
    not Module.apply: the same walk as Module.apply, children first, each sub-model (a
    PreTrainedModel child) with its own _initialize_weights. Each module's fn sees
    _hf_init_mods' partitioned parameters whole, and rank 0's values after it are cut into the
    new pieces, as GatheredParameters(modifier_rank=0) would."""
    hf_model = _hf_model_class()
    for child in module.children():
        sub = hf_model is not None and isinstance(child, hf_model)
        _smart_apply_gathered(child, child._initialize_weights if sub else fn, *is_custom_code)
    _gathered_call(_hf_init_mods(module, fn), lambda: fn(module, *is_custom_code))
    return module


def _unpatch():
    for cls, orig in Init._patched.items():
        cls.__init__ = orig
    Init._patched = {}
    torch.nn.Module.apply = _module_apply
    if _smart_apply is not None:
        torch.nn.Module.smart_apply = _smart_apply
    else:
        del torch.nn.Module.smart_apply
    had, own = Init._init_subclass
    if had:
        torch.nn.Module.__init_subclass__ = own
    else:
        del torch.nn.Module.__init_subclass__
    Init._init_subclass = None
