"""engine.py — zinc.initialize and the Engine: a torch model's parameters handed to libzinc.

How the model and zinc share memory:
- Every module that owns parameters becomes one zinc group (registered in module order), every
  parameter one zinc parameter of the config's working dtype (fp32, or fp16/bf16 when enabled).
  A parameter shared by several modules (a tied head) is registered once, with the first.
- After zinc_finalize the parameters' values are set from the model (zinc_param_set). Stages
  0-2: each `param.data` becomes a view of zinc's working copy (zinc_param_data): no copy per
  step — the step writes the new weights where the model reads them.
- engine.backward(loss) scales the loss by zinc_loss_multiplier (loss scale / accumulation steps,
  as DeepSpeed does; fp16 at ZeRO stage 0 by 1 / accumulation steps only, as DeepSpeed 0.19.8's
  does there: _unscaled_loss) and runs autograd. A hook on each parameter's AccumulateGrad node (kept
  alive by the engine, so autograd reuses it) notes when its gradient is accumulated; when a
  group's parameters all have theirs, the group is handed over at once — gradients added into
  zinc's gradient views, `.grad` dropped, zinc_grads_ready — so at stages 2-3 the reduce-scatter
  runs while autograd goes on with the earlier layers. Groups that got no gradient in this
  backward (unused parameters) are handed over with a zero gradient after autograd, last group
  first: every rank makes the same collective calls in the same order.
- engine.step() is zinc_step: at the accumulation boundary reduce, clip, Adam/AdamW, gather.

Stage 3 gathers each module's group for its forward and its backward and empties it after
(_stage3.py says how).

The Engine is made of parts, one responsibility each, as mixin classes in private modules:
_stage3.py (stage 3's gather/release hooks, zero.GatheredParameters' contexts), _handover.py
(the gradients handed from autograd to zinc), _values.py (a parameter's full and local values),
_accessors.py (DeepSpeed's accessor methods), _state_io.py (state dicts and checkpoints); the
launcher's world is _world.py's. This file holds initialize and the engine's lifecycle:
Engine.__init__ (the model's parameters registered with zinc), the ordering of torch's stream
and zinc's, close, forward, backward and step.

What is absent raises NotImplementedError rather than doing something else.

CUDA (docs/python.md "CUDA"; run on an H200 and an H100, the event hand-overs of issue 38 not yet
on a GPU): parameters all on one CUDA device open zinc's "cuda" device, whose ordinal (the
process's local rank) must be torch's device. The views are then device memory (DLPack, zero-copy: _memory.py). zinc queues all
its work on its own compute stream (its NCCL stream is ordered against that one by zinc), torch
on its current stream, so every hand-over between the two is ordered explicitly:
- torch -> zinc (gradients added into zinc's views, a gathered copy read out of zinc's buffer
  before zinc_release, the parameters torch may still read before zinc_step or a checkpoint
  load overwrites them): an event recorded on torch's stream that zinc's stream waits for
  (_torch_then_zinc), no host wait;
- zinc -> torch inside the training step: zinc_step's new weights — torch's stream waits for an
  event on zinc's stream (_torch_after_zinc); zinc_gather's buffer — torch's stream waits for
  that group's all-gather only (_torch_after_gather, zinc_stream_wait_gather: not for the
  prefetches and reduce-scatters zinc queued after it). No host wait: the step's one host wait
  is the engine's read of the gradient norm (issue 38; counted by zinc_host_waits,
  python_host_waits);
- the gradient buffer torch lends per window (_lend_grad_buffer): zinc's stream waits for torch's
  before zinc_grad_buffer_attach zeroes it, and where torch adds into it (stages 0-1 without
  buckets) torch's stream waits for that zeroing before its adds; the tensor is recorded on
  zinc's stream for the allocator;
- zinc's earlier work on a buffer -> torch writes it (a gradient bucket zinc zeroes after each
  zinc_grads_ready at stages 2-3, and at stage 1 with fp32 sums): torch's stream waits for the
  event recorded after the zinc_grads_ready that last used THAT bucket (_torch_after_bucket;
  buckets rotate), so a group's reduce overlaps the next group's backward;
- zinc -> torch outside the step (a loaded checkpoint, values set at initialize or by a
  GatheredParameters context, values read to the host): zinc_engine_sync, a host wait
  (_zinc_then_torch).
"""
import collections
import contextlib
import ctypes
import itertools
import json
import math
import os
import warnings

import torch

from . import _memory, _torch_dist, _world, _zero_init
from . import dataloader as _dataloader
from ._accessors import _AccessorsMixin
from ._direct_backward import _Direct, _DirectBackwardMixin
from ._frozen import _FrozenMixin
from ._handover import _HandOverMixin
from ._hooktime import HookClock
from ._interrupt import held
from ._lib import MEM_CATEGORIES, EngineOptions, StepInfo, check, lib
from ._memory import _CASTABLE, _TORCH_DTYPE, _numel
from ._monitor import Monitors
from ._optimizer import _Optimizer, _client_optimizer, _parameter_groups
from .ops.adam import FusedAdam
from ._stage3 import _GatherOnRead, _Stage3Mixin
from ._stage3 import declare_external as _stage3_declare_external
from ._state_io import _StateIOMixin
from ._states_away import _StatesAwayMixin
from ._values import _ValuesMixin, _trains, trained_by
from ._world import _engines, _launcher_world, local_rank, world_size

# The public names, world_size and local_rank (_world.py) and trained_by (_values.py) included.
__all__ = ["ZincConfigWarning", "init_distributed", "world_size", "local_rank",
           "register_external_parameter", "config_dict", "Engine", "trained_by",
           "add_config_arguments", "initialize"]


def _warn_not_fp32(groups):
    """fp32 mode (neither fp16 nor bf16 in the config) trains every parameter in float32: one
    of another dtype is cast, which changes its forward's precision where DeepSpeed would keep
    the dtype (float64 stays float64 there): said once, not silently."""
    other = [(name, p.dtype) for _, ps in groups for _, name, p in ps if p.dtype != torch.float32]
    if other:
        name, dt = other[0]
        warnings.warn(f"zinc.initialize: {len(other)} trained parameter(s) are not float32 (the "
                      f"first: '{name}', {dt}); with neither fp16 nor bf16 enabled in the config "
                      f"zinc holds and trains them in float32, so their forward runs in float32 "
                      f"(DeepSpeed keeps their dtype): cast the model with model.float(), or "
                      f"enable \"bf16\" or \"fp16\" for 16-bit parameters", RuntimeWarning,
                      stacklevel=4)


class ZincConfigWarning(UserWarning):
    """A warning zinc gave about the config (a key accepted without effect, an override, ...)."""


_serials = itertools.count()   # engines' creation order (zero.GatheredParameters)
_SPAN_BASES = 8                # _group_span: the places kept per group and kind
# Config warnings of `zinc train` (the C config) about monitors this front-end writes
# (_monitor.py): not passed on.
_MONITORED = ("tensorboard:", "wandb:")


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=None,
                     verbose=True, timeout=None, init_method=None, dist_init_required=None,
                     config=None, rank=-1, world_size=-1):
    """The world the launcher set up (mpirun: MPI ranks as processes; torchrun/srun environment;
    none: a world of one). Called by initialize() when the script did not; calling it again
    returns the same world.

    As DeepSpeed's, it also sets up torch.distributed for the script (unless dist_init_required
    is False or it is set up already, then with the launcher's rank and size), with
    dist_backend (DeepSpeed's default: nccl with a GPU, else gloo) and timeout (default 30
    minutes); _torch_dist.py says how the ranks meet. zinc's own communication does not use it.
    distributed_port, verbose, auto_mpi_discovery and config change nothing. zinc takes the
    rank and world size from the launcher: a rank or world size given as well must be the
    launcher's, and init_method "env://" (the launcher's environment, torch's default) is the
    only one taken; others are refused."""
    if init_method not in (None, "env://"):
        raise NotImplementedError(f"zinc.init_distributed: init_method {init_method!r}: zinc's "
                                  "ranks meet through the launcher (mpirun, torchrun, srun); "
                                  "give none, or \"env://\"")
    for what, given, own in (("rank", rank, _world.rank), ("world_size", world_size,
                                                           _world.world_size)):
        if given not in (-1, None) and given != own():
            raise NotImplementedError(f"zinc.init_distributed: {what}={given}, but the launcher "
                                      f"made this process's {what} {own()}: zinc takes the "
                                      f"launcher's (mpirun, torchrun, srun)")
    if dist_backend not in (None, "nccl", "mpi", "gloo", "ccl"):
        raise ValueError(f"zinc.init_distributed: dist_backend {dist_backend!r} is not a "
                         "torch.distributed backend DeepSpeed takes (nccl, gloo, mpi, ccl)")
    world = _launcher_world()
    if dist_init_required is not False:
        _torch_dist.setup(world, dist_backend, timeout)
    return world


def _model_device(model):
    """The one device the model's parameters are on: cpu or one CUDA device, else an error that
    names a parameter."""
    dev, first = None, None
    for name, p in model.named_parameters():
        if p.device.type not in ("cpu", "cuda"):
            raise NotImplementedError(
                f"zinc.initialize: parameter '{name}' is on {p.device}; zinc's Python front-end "
                "trains models on the CPU or on one CUDA device (docs/python.md)")
        if dev is None:
            dev, first = p.device, name
        elif p.device != dev:
            raise ValueError(f"zinc.initialize: parameter '{name}' is on {p.device} but '{first}' "
                             f"is on {dev}; zinc trains a model on one device: move the whole "
                             "model there first (model.to(device))")
    return dev if dev is not None else torch.device("cpu")


def register_external_parameter(module, parameter):
    """DeepSpeed's zero.register_external_parameter: `module`'s forward reads `parameter`, which
    another module owns; at stage 3 the module gathers it with its own. Needed only for reads
    that bypass the owning module's attribute (a reference to the Parameter kept elsewhere):
    `other_module.weight` is gathered when read. DeepSpeed users call it in the module's
    __init__; after zinc.initialize it reaches the live stage-3 engines over the module from
    their next forward, as DeepSpeed's does."""
    ext = module.__dict__.setdefault("_zinc_external_params", [])
    if all(q is not parameter for q in ext):
        ext.append(parameter)
    _stage3_declare_external(module, parameter)


# steps_per_print's "never": Hugging Face's accelerate writes float("inf") there, which JSON has
# no number for (json.dumps writes Infinity, which zinc's strict parser refuses); zinc gets a
# step count no run reaches instead. The key is logging only.
_NEVER_STEPS = 1 << 53


def _non_finite(value, path):
    """(path, value) of the first float in `value` that is nan or infinite, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _non_finite(item, f"{path}[{key}]" if isinstance(key, int) else
                            f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def _config_json(config):
    """A config dict as the JSON text zinc parses (UTF-8 bytes). A nan or infinite number
    (JSON has none) is refused naming its key, where the parser could only point at a column of
    text the user never wrote."""
    if config.get("steps_per_print") == float("inf"):
        config = dict(config, steps_per_print=_NEVER_STEPS)
    found = _non_finite(config, "")
    if found:
        raise ValueError(f"zinc: config key {found[0]}: {found[1]} is not a number a config can "
                         f"hold (JSON has no nan or infinity; only steps_per_print takes inf, as "
                         f"\"never\")")
    return json.dumps(config).encode()


def config_dict(config):
    """A DeepSpeed config given as a dict or as the path of a JSON file, as a dict (a copy): the
    front-end's one reader of the file, for what it needs before zinc has resolved it (the
    optimizer section param groups are checked against, the scheduler's presence, the
    activation_checkpointing section); zinc's C config module validates and resolves the
    config (Engine._resolved)."""
    if isinstance(config, dict):
        return dict(config)
    if not isinstance(config, (str, os.PathLike)):
        raise TypeError("zinc: a config is a dict or the path of a JSON file, not "
                        f"{type(config).__name__}")
    with open(config) as f:
        try:
            cfg = json.load(f)
        except ValueError as ex:
            raise ValueError(f"zinc: {os.fspath(config)}: not valid JSON: {ex}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"zinc: {os.fspath(config)}: a config is a JSON object ({{...}}), not "
                         f"a JSON {type(cfg).__name__}")
    return cfg


def _owners(model, wanted):
    """Before zinc.initialize builds anything for `model`: the live engines that train some of
    its trainable parameters already (initialize called again on the same model: a notebook cell
    run twice, a sweep that keeps its model), {id: (engine, a parameter's name)}, for
    _take_over once zinc took the new engine's config. Raises ValueError, with nothing changed,
    where the model cannot be taken over: a live stage-3 engine trains it (its parameters are empty
    outside its forward and close() cannot gather them: collective), or a stage-3 engine left
    parameters empty when it was closed (where zinc_param_add said only "extent 0")."""
    old = {}
    for n, p in model.named_parameters():
        if p.numel() == 0 and getattr(p, "_zinc_emptied", False):
            raise ValueError(
                f"zinc.initialize: parameter '{n}' is empty: a ZeRO stage-3 engine trained it "
                "and was closed (or freed), which leaves its parameters empty, as DeepSpeed's "
                "(the values were in its shards): build the model again, or take the weights "
                "with that engine's module_state_dict() (on every rank) before closing it and "
                "load them into the model")
        if not p.requires_grad or (wanted is not None and id(p) not in wanted):
            continue
        owner = trained_by(p)
        if owner is None:
            continue
        if owner[0]._stage == 3:
            raise ValueError(
                f"zinc.initialize: parameter '{n}' is trained by a live ZeRO stage-3 engine, "
                "whose shards hold its values (the parameter is empty outside that engine's "
                "forward): to train the model with a new engine, take the weights with the old "
                "one's module_state_dict() (on every rank), close() it, and load them into a "
                "model built again")
        old.setdefault(id(owner[0]), (owner[0], n))
    return old


def _take_over(old):
    """The engines of _owners, which trained the model's parameters before, are closed, with a
    warning, so that the parameters are the new engine's alone (Engine.__init__ says when). Left
    alive, an old engine's hooks stayed on the parameters' gradient nodes, which the new engine
    took too (with the dtype they remember), and its close() (by the collector, at any time)
    replaced the new engine's views with copies: the model then trained nothing, silently."""
    for engine, n in old.values():
        if engine.global_rank == 0:
            warnings.warn(f"zinc.initialize: parameter '{n}' is trained by an engine made "
                          "earlier and not closed; that engine is closed now (the parameters "
                          "keep their values, as close() leaves them) and the new one trains "
                          "the model", RuntimeWarning, stacklevel=4)
        engine.close()


class _Group:
    """One zinc group on the Python side: its parameters and, at stage 3, whether torch holds
    them gathered now."""

    def __init__(self, gid, params, pgroup=0):
        self.gid = gid
        self.params = params      # [(param id, name, tensor)]
        self.pgroup = pgroup      # index of the param group its parameters came in
        self.live = False         # stage 3: param.data holds the gathered values
        self.kept = False         # stage 3: live, but released (kept for a use soon: _release)
        self.holds = 0            # stage 3: forwards running that need the group (and a read)
        self.read_hold = False    # stage 3: one of holds is a backward's read (_on_read)
        self.ctx = 0              # stage 3: zero.GatheredParameters contexts holding it gathered
        self.whole = False        # stage 3: persistent in zinc (zinc_group_persistent): its
                                  # parameters view zinc's full copy for good (_view_whole)
        self.whole_at = None      # ... the addresses of those views
        self.got = set()          # param ids whose gradient autograd accumulated this backward
        self.done = False         # handed over (zinc_grads_ready) this micro-step
        self.late = False         # a gradient came after this backward's hand-over (_handover)
        self.defer = False        # learned: handed over only after autograd (_handover)
        self.slot = -1            # bucketed: its bucket while taken and not handed over
        self.layout = {}          # "data"/"grad" -> its parameters' place in zinc's buffer
        self.frozen = False       # stage 3: a group of the frozen engine (_frozen.py): values
                                  # only, never handed over
        self.gone = False         # ... whole again for good: another engine's model shares it


class Engine(_Stage3Mixin, _FrozenMixin, _HandOverMixin, _DirectBackwardMixin, _ValuesMixin, _AccessorsMixin,
             _StateIOMixin, _StatesAwayMixin, torch.nn.Module):
    """One rank's training engine over a torch model (DeepSpeed's DeepSpeedEngine shape)."""

    def __init__(self, model, model_parameters=None, config=None, *, _client=None,
                 _client_scheduler=False):
        """_client, _client_scheduler: initialize's client torch optimizer (its groups carry the
        lr) and whether a client LR scheduler drives the lr."""
        super().__init__()
        self.module = model
        self._e = ctypes.c_void_p()
        self._cfg = config_dict(config)
        if isinstance(config, dict):
            text, path = _config_json(config), None
        else:                        # zinc reads the file itself: its errors name it
            text, path = None, os.fsencode(config)
        # model_parameters (tensors or param groups) checked before zinc holds anything.
        pgs = _parameter_groups(model_parameters, self._cfg, _client_scheduler)
        # Parameters zero.Init partitioned: a write since then would be lost (_zero_init.py).
        for n, p in model.named_parameters():
            if _zero_init.held(p) is not None:
                _zero_init.check_untouched(p, n)
        wanted = pgs.wanted
        self._pgs = pgs
        old = _owners(model, wanted)
        # (after _owners, which refuses a model a live stage-3 engine trains, so that such an
        # engine is left as it was; before anything reads a parameter's value)
        _FrozenMixin.whole_if_shared(model)
        # zinc's device is the model's: the CPU, or one CUDA device (meta, mps, ... are refused
        # by name before anything, as parameters spread over several devices).
        self._device = _model_device(model)
        self._cuda = self._device.type == "cuda"
        self._hook_clock = HookClock()  # host seconds inside the torch hooks (_hooktime.timed)
        world = _launcher_world()      # initialize() set up torch.distributed before
        rank = lib.zinc_world_rank(world)
        # A world of one without a launcher (rank -1: a local world) holds one engine per rank;
        # each engine gets a world of its own instead (world NULL), so that a script may keep
        # several alive (a GAN's generator and discriminator), as DeepSpeed's initialize
        # allows. Launched worlds (mpirun) give each engine its own communicator.
        opts = EngineOptions(config_path=path, config_json=text,
                             world=world if rank >= 0 else None, rank=max(0, rank),
                             device=b"cuda" if self._cuda else b"cpu", threads=0)
        check(lib.zinc_engine_create(ctypes.byref(opts), ctypes.byref(self._e)))
        _engines.add(self)
        self._serial = next(_serials)
        # id(param) -> its index in model.parameters(), for every parameter of the model
        self._model_order = {id(p): k for k, p in enumerate(model.parameters())}
        e = self._e
        if self._cuda:
            # zinc opens the GPU of the process's local rank (LOCAL_RANK, SLURM_LOCALID or MPI's
            # node-local rank; LOCAL_RANK or 0 in a world of one): the model must be there, or
            # zinc's views would be another device's memory.
            ordinal = lib.zinc_engine_cuda_device(e)
            if ordinal != self._device.index:
                self.close()
                raise ValueError(f"zinc.initialize: zinc opened cuda:{ordinal} (this process's "
                                 f"local rank) but the model is on {self._device}; call "
                                 "torch.cuda.set_device(zinc.local_rank()) and build the model "
                                 "there (model.to(f'cuda:{zinc.local_rank()}'))")
            self._zstream = torch.cuda.ExternalStream(lib.zinc_engine_cuda_stream(e),
                                                      device=self._device)
        self._stage = lib.zinc_engine_stage(e)
        # The config as zinc resolved it (defaults, aliases, derived batch sizes): DeepSpeed's
        # config accessors below read it.
        self._read_batch()
        self._code = lib.zinc_engine_dtype(e)
        # The model's gradients go through zinc's group buckets (zinc_grad_bucket, the
        # hand-over's events): at stages 2-3, and at stage 1 with fp32 gradient sums, where
        # zinc_grads_ready adds the 16-bit bucket into them (the engine's rule, read from it).
        self._bucketed = bool(lib.zinc_engine_grads_bucketed(e))
        # fp16 at ZeRO stage 0: DeepSpeed 0.19.8's engine.backward scales the loss only for a
        # ZeROOptimizer, and its stage-0 fp16 optimizers (FP16_Optimizer, FP16_UnfusedOptimizer)
        # are not ones, yet their step divides the gradients by the loss scale: Adam gets the
        # gradient over the scale (measured in DeepSpeed itself: 127.98x smaller at a static
        # scale of 128), and its moments are kept in those units. zinc's step divides by the
        # scale too, so this backward leaves the loss unscaled, as DeepSpeed's (docs/python.md,
        # "fp16 at ZeRO stage 0").
        self._unscaled_loss = self._stage == 0 and self._code == 1
        # ... and its get_global_grad_norm: FP16_Optimizer (DeepSpeed's FusedAdam: the config's
        # Adam without torch_adam, or a client FusedAdam) gives the norm over the scale after
        # the step's update, as zinc's step reports it at stage 0; FP16_UnfusedOptimizer (a
        # torch optimizer: torch_adam, or a client torch.optim.Adam/AdamW) the norm itself.
        params = ((self._cfg or {}).get("optimizer") or {}).get("params") or {}
        unfused = (not isinstance(_client, FusedAdam) if _client is not None
                   else bool(params.get("torch_adam")))
        self._raw_grad_norm = self._unscaled_loss and unfused
        self._unfused_adam = unfused
        if lib.zinc_engine_rank(e) == 0:
            for line in lib.zinc_config_warnings(e).decode(errors="replace").splitlines():
                if line.startswith(_MONITORED):   # zinc train's; this front-end writes them
                    continue
                warnings.warn(f"zinc config: {line}", ZincConfigWarning, stacklevel=3)
        self._monitor = Monitors(self._cfg, self._resolved, lib.zinc_engine_rank(e))
        # The engines that trained the model go once zinc took this one's config (the usual
        # failure of a notebook cell run again) and before it allocates the model's state: both
        # engines' memory is never held at once, and the parameters' gradient nodes are free for
        # this one's hooks. A failure after this leaves the model with its values, untrained.
        _take_over(old)
        self._groups = []          # [(group id, [(param id, name, tensor)])]
        self._g = []               # [_Group], the same order
        self._sg = self._g         # stage 3: the groups the hooks gather, self._g's then the
                                   # frozen engine's (_frozen.py)
        self._fe = None            # ... that engine, and its parameters' ids and shapes
        self._fpid_of, self._fshapes, self._fgroups = {}, {}, []
        self._group_of = {}        # id(param) -> index into self._g
        self._pid_of = {}          # id(param) -> its zinc parameter id
        self._needs = {}           # module -> indices of the groups its forward reads
        for mname, mod in model.named_modules():
            own, shared = [], []
            for n, p in mod.named_parameters(recurse=False):
                if not p.requires_grad or (wanted is not None and id(p) not in wanted):
                    continue
                (shared if id(p) in self._group_of else own).append((n, p))
            needs = sorted({self._group_of[id(p)] for _, p in shared})
            # One zinc group per module, or one per param-group dict its parameters came in
            # (a zinc group has one decay, lr, betas and eps): the first keeps the module's name,
            # the others add their decay to it, or the dict's index where decays repeat.
            classes = {}
            for n, p in own:
                classes.setdefault(pgs.index.get(id(p), 0), []).append((n, p))
            decays = [pgs.decay(pgi) for pgi in classes]
            mine = []
            for k, (pgi, members) in enumerate(classes.items()):
                wd = pgs.decay(pgi)
                suffix = (f"#weight_decay={'config' if wd is None else format(wd, 'g')}"
                          if decays.count(wd) == 1 else f"#param_group={pgi}")
                gname = (mname or "root") + ("" if k == 0 else suffix)
                g = ctypes.c_int()
                self._call(lib.zinc_group_add(e, gname.encode(), ctypes.byref(g)))
                if wd is not None:
                    self._call(lib.zinc_group_set_weight_decay(e, g.value, wd))
                betas, eps = pgs.own(pgi, "betas"), pgs.own(pgi, "eps")
                if betas is not None:
                    self._call(lib.zinc_group_set_betas(e, g.value, *betas))
                if eps is not None:
                    self._call(lib.zinc_group_set_eps(e, g.value, eps))
                params = []
                for n, p in members:
                    full = f"{mname}.{n}" if mname else n
                    pid = self._add_param(e, g.value, full, p)
                    params.append((pid, full, p))
                    self._group_of[id(p)] = len(self._g)
                    self._pid_of[id(p)] = pid
                    _trains(p, self, pid)
                self._groups.append((g.value, params))
                mine.append(len(self._g))
                self._g.append(_Group(g.value, params, pgi))
            needs = mine + needs
            if needs:
                self._needs[mod] = needs
        if self._code == 0 and lib.zinc_engine_rank(e) == 0:
            _warn_not_fp32(self._groups)
        if not self._groups:
            if wanted and not wanted & {id(p) for p in model.parameters()}:
                raise ValueError(f"zinc.initialize: none of the {len(wanted)} tensors in "
                                 f"model_parameters is a parameter of the model (pass "
                                 f"model.parameters(), or param groups of them)")
            raise ValueError("zinc.initialize: the model has no trainable parameters")
        # zinc's gradient buffer is torch's memory, lent for each accumulation window from its
        # first hand-over to its step (_handover.py): in between, torch's allocator has it for
        # the forward's activations.
        self._call(lib.zinc_grad_buffer_external(e))
        self._call(lib.zinc_finalize(e))
        # As DeepSpeed's initialize (its _broadcast_model): every rank takes rank 0's parameters,
        # trained or not, so the script need not seed the ranks alike (nor load a pretrained
        # model on every rank).
        # A parameter zero.Init partitioned has rank 0's values in pieces over the ranks: they
        # are put together (one parameter at a time) and it keeps its one-element mark until
        # zinc's views or stage 3's empty tensor replace it below.
        partitioned = set()
        for _, params in self._groups:
            for pid, name, p in params:
                if _zero_init.held(p) is not None:
                    src = _zero_init.gather(p).to(torch.float32).contiguous()
                    _zero_init.release(p)
                    partitioned.add(id(p))
                else:
                    # zinc_param_set reads HOST fp32 values (a CUDA tensor's copy is synchronous).
                    src = p.detach().to("cpu", torch.float32).contiguous()
                    self._broadcast(src, 0)
                if self._code != 0:
                    # As DeepSpeed: the module is cast to fp16/bf16 first and the fp32 master
                    # made from the rounded values (from the exact ones, 1 ulp off on ~1 in 5
                    # weights, the runs drifted apart by ~1e-3 in the loss over 12 steps).
                    src = src.to(_TORCH_DTYPE[self._code]).to(torch.float32)
                self._call(lib.zinc_param_set(e, pid, ctypes.c_void_p(src.data_ptr())))
        # Stage 3: the frozen parameters go to the frozen engine (_frozen.py), in pieces.
        frozen = self._frozen_candidates(model) if self._stage == 3 else {}
        untrained = [p for p in self._untrained_params().values() if id(p) not in frozen]
        for p in untrained:                  # zinc does not shard these: whole again
            if _zero_init.held(p) is not None:
                _zero_init.restore(p)
        self._broadcast_into(untrained, 0)
        # zinc -> torch: the values set (and finalize's zeroing) are complete before torch
        # reads zinc's views.
        self._zinc_then_torch()
        self._shapes = {pid: p.shape for _, ps in self._groups for pid, _, p in ps}
        self._hooks = []
        self._bucket_events = {}     # CUDA, bucketed: bucket -> event after its last hand-over
        self._views = {}             # (group, kind) -> [(base, view, views)] (_group_span)
        self._grad_bytes = self.memory()["grad"][0]   # what zinc needs lent; 0: nothing
        self._grad_buf = None        # the torch tensor lent for this window, if any
        self._shown_grads = None     # [(param, its view of the window's sum)] set as `.grad`
        self._lent_views = {}        # _views of _grad_buf (unbucketed), kept while its address is
        self._lent_ptr = None        # the address they view
        # The two hand-over events, recorded again at each use: a stream's wait_event waits for
        # the record that came before it, so a later record of the same event moves no wait
        # already queued (CUDA's cudaStreamWaitEvent), and no event is created per hand-over.
        self._ev_torch = torch.cuda.Event() if self._cuda else None     # on torch's stream
        self._ev_zinc = torch.cuda.Event() if self._cuda else None      # on zinc's stream
        self._in_backward = False
        self._engine_backward = False   # engine.backward runs autograd (output hooks stand by)
        self._direct = _Direct()     # a loss.backward() called directly (_direct_backward)
        self._contexts = 0           # zero.GatheredParameters contexts open over this engine
        self._no_sync = False        # inside no_sync(): backward hands nothing over
        self._window_grads = False   # gradients were handed over in this accumulation window
        self._unsynced = False       # gradients a no_sync backward left in `.grad`
        # Who ends the accumulation window (docs/python.md): zinc's count, the caller's
        # set_gradient_accumulation_boundary (None: not set), or every step() (the config's
        # managed_gradient_accumulation false). When the caller owns it, a backward's micro-step
        # stays open until the next forward or backward ends it (zinc_micro_step) or step() does.
        self._boundary_set = None
        self._open_micro = False     # every group handed over, no zinc step since, and the
                                     # caller owned the boundary then (step() need not follow)
        self._open_at_boundary = False   # ... and zinc took that micro-step as the window's last
        self._awaiting_step = False  # the last backward completed a micro-step step() must end
        self._interrupted = False    # a backward raised midway: the next continues its micro-step
        self._resuming = False       # ... and this backward is that next one
        self._frozen_warned = set()  # zinc parameters frozen since initialize, warned about
        if self._stage < 3:
            self._view_params([p for _, ps in self._groups for _, _, p in ps])
        else:
            for _, params in self._groups:
                for _, _, p in params:
                    # A partitioned parameter's mark cast without materializing it: its shape
                    # must read right until _watch_gradients has its gradient accumulator.
                    p.data = (_zero_init.mark(p.shape, _TORCH_DTYPE[self._code], p.device)
                              if id(p) in partitioned else p.data.to(_TORCH_DTYPE[self._code]))
        if self._code != 0:
            # As DeepSpeed's engine (_cast_module_mixed_precision): with fp16/bf16 every
            # floating-point parameter of the module computes in that dtype, the ones zinc does
            # not train too (a frozen nn.Linear beside trained ones); buffers keep theirs.
            for p in self._untrained_params().values():
                if id(p) not in frozen and p.dtype in _CASTABLE:
                    p.data = p.data.to(_TORCH_DTYPE[self._code])
        if frozen:
            self._partition_frozen(model, frozen, opts)
        self._watch_gradients()
        if self._stage == 3:
            self._setup_stage3(model)
        self._info = StepInfo()
        self._step_applied = False   # was_step_applied: the last step() applied an update
        self._micro_steps = 0        # DeepSpeed's micro_steps: step() calls since the start
        # DeepSpeed's counters: optimizer steps taken (applied and skipped for an fp16
        # overflow), the skipped ones, and the samples those steps trained on.
        self._steps = 0
        self._skipped = 0
        self._samples = 0
        self._unmanaged_backwards = 0   # backwards since the last step() in unmanaged mode
        self._client_sched = None    # a client LR scheduler, stepped after applied steps
        self._sched_view = None      # the config's scheduler as DeepSpeed's API shows it
        self._lr = lib.zinc_engine_lr(e)    # the lr of the last applied step (until one: the next)
        self._opt = _Optimizer(self, _client, _client_scheduler)   # the lr carrier
        if self._stage == 0 and self._code != 0:
            self._opt._ds_first_step(self._unfused_adam)
        self._managed = bool(self._resolved.get("managed_gradient_accumulation", True))
        self.collate_fn = None             # initialize's collate_fn, deepspeed_io's default
        self.training_dataloader = None    # initialize(training_data=...)'s loader

    # ---- plumbing -------------------------------------------------------------------------

    def _call(self, status, e=None):
        """Raises zinc's error for a failed call (of the engine `e`: the frozen one's calls
        name it, else the engine's)."""
        if status:
            self._alive()
        check(status, self._e if e is None else e)

    def _add_param(self, e, gid, name, p):
        """zinc_param_add of parameter p (its shape; a 0-dim one as (1,)) to group gid of the
        engine e, in the working dtype. Returns its id."""
        shape = (ctypes.c_int64 * max(1, p.dim()))(*(p.shape if p.dim() else (1,)))
        pid = ctypes.c_int()
        self._call(lib.zinc_param_add(e, gid, name.encode(), max(1, p.dim()), shape, self._code,
                                      ctypes.byref(pid)), e)
        return pid.value

    def _engine_of(self, G):
        """The zinc engine holding group G: the frozen engine's groups (stage 3, _frozen.py)
        are its, the others the engine's."""
        return self._fe if G.frozen else self._e

    def _torch_then_zinc(self, stream=None, frozen=False):
        """CUDA: what torch queued so far on its current stream runs before what zinc queues
        from here on (zinc's stream waits for an event on torch's; no host wait) — frozen: the
        frozen engine's stream (_frozen.py). CPU: nothing (torch's CPU ops are done when they
        return)."""
        if self._cuda:
            self._ev_torch.record(self._stream_or_current(stream))
            (self._fzstream if frozen else self._zstream).wait_event(self._ev_torch)

    def _zinc_then_torch(self):
        """zinc's device work (its compute stream, which waits for its NCCL collectives) is
        finished before the host or torch reads what it wrote: zinc_engine_sync, a host wait,
        which also turns a vanished NCCL peer into an error. Outside the training step only.
        Called on the CPU too, where it waits for nothing but is counted (zinc_host_waits), so
        a test there sees one put back into the step's path (python_host_waits). Stage 3: the
        groups kept for their reuse are emptied (their copies may predate what zinc wrote: a
        set weight, a loaded checkpoint), so that their next use gathers zinc's values."""
        self._call(lib.zinc_engine_sync(self._e))
        if self._fe is not None:       # stage 3's frozen engine (_frozen.py) too
            self._call(lib.zinc_engine_sync(self._fe), self._fe)
        if self._stage == 3:
            self._empty_kept()

    def _torch_after_zinc(self, stream=None):
        """CUDA: torch's current stream (or `stream`) waits (on the device) for what zinc queued
        so far, before torch reads what zinc wrote (new weights, a gathered group, a zeroed
        buffer) or writes a buffer zinc may still use. No host wait. CPU: nothing (zinc's work
        is done when its call returns)."""
        if self._cuda:
            self._ev_zinc.record(self._zstream)
            self._stream_or_current(stream).wait_event(self._ev_zinc)

    def _torch_after_gather(self, G, stream=None):
        """CUDA: torch's current stream (or `stream`, that one already looked up) waits, on the
        device, until zinc's gather of group G is in place, and for nothing zinc queued after
        it (zinc_stream_wait_gather). No host wait. CPU: nothing (zinc's work is done when its
        call returns)."""
        if self._cuda:
            st = self._stream_or_current(stream)
            e = self._engine_of(G)
            self._call(lib.zinc_stream_wait_gather(e, G.gid, ctypes.c_void_p(st.cuda_stream)), e)

    def _stream_or_current(self, stream):
        """`stream` when the caller looked it up already, else torch's current one (CUDA)."""
        return stream if stream is not None else torch.cuda.current_stream(self._device)

    def _torch_stream(self):
        """torch's current stream on a GPU, else None: looked up once per hook, where a hook
        orders several things against it (each lookup builds a Stream object, microseconds of
        host time per gather and hand-over)."""
        return torch.cuda.current_stream(self._device) if self._cuda else None

    def _group_span(self, G, kind):
        """One view over zinc's memory holding all of group G's parameters (kind "data": the
        gather slot zinc_param_data points into, "grad": the bucket of zinc_param_grad), and the
        layout [(element offset, shape, strides)] of G.params inside it, for as_strided (about
        1 us a slice, against 1.5 for span[a:b].view(shape)). A group's parameters sit at fixed
        offsets of whatever buffer holds it (the plan's), so the layout is measured once per kind
        and later calls ask zinc for one parameter's pointer: one C call per group, not one per
        parameter. Span views are kept per (group, kind), the last _SPAN_BASES places each, as
        zinc reuses the same few places every step (at stage 3 a group is packed at the same
        place of the gather area at the same point of every step that follows the traced order;
        a group gathered several times a step, as with activation checkpointing, has a few) —
        for one window where it is the gradient buffer torch lends (stages 0-1: a new tensor
        each window). Every parameter has an element (zinc_param_add refuses an empty extent; a 0-dim one is
        registered as (1,)). Returns (span view, layout, views): `views` is a list kept with the
        span view, empty until a caller fills it with the parameters' slices of that span (the
        hand-over: the same slices of the same bucket every step)."""
        fn = lib.zinc_param_data if kind == "data" else lib.zinc_param_grad
        lay = G.layout.get(kind)
        if lay is None:
            lay = G.layout[kind] = self._measure_layout(G, fn)
        anchor, anchor_bytes, span, layout = lay
        ptr = ctypes.c_void_p()
        e = self._engine_of(G)
        self._call(fn(e, anchor, ctypes.byref(ptr)), e)
        base = ptr.value - anchor_bytes
        # (A view with its own storage, or a slice of the lent tensor: _grad_views adds its
        # storage offset to the layout's.)
        views = self._lent_views if kind == "grad" and not self._bucketed else self._views
        key = (G.gid, G.frozen, kind)
        kept = views.get(key)        # [(base, view, its parameters' views)], the last used first
        if kept is None:
            kept = views[key] = []
        for i, (b, t, slices) in enumerate(kept):
            if b == base:
                if i:
                    kept.insert(0, kept.pop(i))
                return t, layout, slices
        buf = self._grad_buf if views is self._lent_views else None
        if buf is not None and 0 <= base - buf.data_ptr() < buf.numel():
            # A slice of the lent tensor itself, not a view over its address: it holds torch's
            # memory, so a `.grad` (or safe_get_full_grad's value) the script keeps past the
            # step keeps the window's values, as DeepSpeed's `.grad` tensors do — over the
            # address alone it read memory torch had handed out again.
            at = base - buf.data_ptr()             # (the working dtype: unbucketed sums)
            t = buf[at:at + span * _memory.dtype_size(self._code)].view(_TORCH_DTYPE[self._code])
        else:
            t = _memory.view(e, base, span, self._code, (span,), self._device)
        kept.insert(0, (base, t, []))
        del kept[_SPAN_BASES:]
        return t, layout, kept[0][2]

    def _measure_layout(self, G, fn):
        """_group_span's layout of G from each parameter's pointer (fn: zinc_param_data or
        zinc_param_grad): (the first parameter's id, its byte offset from the span's start, the
        span's elements, [(offset, shape, strides)] per parameter)."""
        shapes = self._group_shapes(G)
        numels = [_numel(s) for s in shapes]
        ptrs, ptr = [], ctypes.c_void_p()
        e = self._engine_of(G)
        for pid, _, _ in G.params:
            self._call(fn(e, pid, ctypes.byref(ptr)), e)
            ptrs.append(ptr.value)
        esz = _memory.dtype_size(self._code)
        base = min(ptrs)
        offs = [(q - base) // esz for q in ptrs]
        return (G.params[0][0], offs[0] * esz, max(o + n for o, n in zip(offs, numels)),
                [(o, tuple(s), _memory.contiguous_strides(s)) for o, s in zip(offs, shapes)])

    def _group_shapes(self, G):
        """The full shapes of group G's parameters (a 0-dim one's is (), registered as (1,))."""
        shapes = self._fshapes if G.frozen else self._shapes
        return [shapes[pid] for pid, _, _ in G.params]

    def host_waits(self):
        """zinc's own (not DeepSpeed's): how many times zinc made the host wait for its device
        since initialize (zinc_host_waits) — one per optimizer step without offload, counted on
        the CPU as on a GPU. Differences around a step give its count."""
        return int(lib.zinc_host_waits(self._e))

    def hook_seconds(self):
        """zinc's own (not DeepSpeed's): the host's wall seconds inside zinc's torch hooks since
        initialize — stage 3's gathers, copies and releases around each module, the gradient
        hand-overs. On a GPU, when a step's time is about this per step, the step is limited by
        the host launching work, not by the device (python/zinc/_hooktime.py)."""
        return self._hook_clock.seconds

    def memory(self, host=False):
        """zinc's memory of this rank by category: {name: (planned bytes, allocated bytes)} on
        the device, or with host=True in host memory (offload, offload_states())."""
        n = len(MEM_CATEGORIES)
        planned, alloc = (ctypes.c_uint64 * n)(), (ctypes.c_uint64 * n)()
        self._call((lib.zinc_memory_host if host else lib.zinc_memory)(self._e, planned, alloc))
        return {c: (planned[i], alloc[i]) for i, c in enumerate(MEM_CATEGORIES)}

    def _broadcast(self, t, root):
        """zinc_broadcast: a contiguous CPU tensor's bytes from rank `root` into every rank's
        (its dtype and shape the same on every rank). Collective; nothing in a world of one."""
        if lib.zinc_engine_world_size(self._e) > 1:
            self._call(lib.zinc_broadcast(self._e, ctypes.c_void_p(t.data_ptr()),
                                          t.numel() * t.element_size(), root))

    def _broadcast_into(self, tensors, root):
        """Rank `root`'s values of `tensors` (the model's, on any device) copied into every
        rank's, one zinc_broadcast each. Collective."""
        if lib.zinc_engine_world_size(self._e) == 1:
            return
        with torch.no_grad():
            for t in tensors:
                buf = t.detach().to("cpu").contiguous()
                self._broadcast(buf, root)
                if lib.zinc_engine_rank(self._e) != root:
                    t.copy_(buf)

    def _mean_over_ranks(self, values):
        """zinc_mean_over_ranks: each of values (floats) averaged over the ranks. Collective."""
        buf = (ctypes.c_double * len(values))(*values)
        self._call(lib.zinc_mean_over_ranks(self._e, buf, len(values)))
        return list(buf)

    def close(self):
        """Releases the engine and its zinc memory. At stages 0-2 the model's parameters become
        copies first, so the model stays usable. At stage 3 they stay empty, as DeepSpeed's do
        (zinc held the only copy, in shards, and gathering is collective, which close(), also
        run by the garbage collector, cannot be): call module_state_dict() before, on every
        rank, to keep the values. The persistent groups' parameters, whole views of zinc's
        copy at stage 3, become copies as at stages 0-2. Groups kept for their reuse
        (stage3_max_reuse_distance) are emptied as well."""
        if getattr(self, "_stage", None) == 3 and hasattr(self, "_empty"):
            self._empty_kept()
        if getattr(self, "_shown_grads", None):
            self._take_back_grads(keep=False)    # `.grad`s that were views of zinc's sums
        if getattr(self, "_monitor", None) is not None:
            self._monitor.close()
        if getattr(self, "_e", None) is not None and self._e.value:
            cuda = getattr(self, "_cuda", False)
            if cuda:      # zinc's writes done before the copies read them (errors ignored here)
                lib.zinc_engine_sync(self._e)
            for _, params in getattr(self, "_groups", []):
                for _, _, p in params:
                    p.data = p.data.clone()
                    if self._stage == 3 and p.numel() == 0:
                        p._zinc_emptied = True     # for _owners' message
            if cuda:      # the copies done before zinc frees the memory they read
                torch.cuda.current_stream(self._device).synchronize()
            self._close_frozen()
            for h in getattr(self, "_hooks", []):
                h.remove()
            self._acc_nodes = []   # autograd keeps them weakly: a later engine gets its own
            self._views = {}
            for mod in getattr(self, "_linears", []):
                mod.__dict__.pop("forward", None)
            for mod in getattr(self, "_watched", []):
                if isinstance(mod._parameters, _GatherOnRead):
                    mod._parameters = collections.OrderedDict(mod._parameters)
            # A lent gradient buffer goes before zinc's stream does: it was marked used on that
            # stream (record_stream), and torch's allocator records an event there when it
            # frees the block (on a destroyed stream: undefined). zinc is done with it (synced).
            self._grad_buf, self._lent_views = None, {}
            lib.zinc_engine_destroy(self._e)
            self._e = ctypes.c_void_p()

    def __del__(self):
        self.close()

    # ---- training -------------------------------------------------------------------------

    def _alive(self):
        """RuntimeError once close() released the engine (its calls would get a NULL engine)."""
        if not (getattr(self, "_e", None) and self._e.value):
            raise RuntimeError("zinc: the engine was closed (engine.close()); the model itself "
                               "still runs (at stages 0-2), or create a new engine")

    def train(self, mode=True):
        """DeepSpeed's: the model's train(mode); returns None, and engine.training stays as it
        was (DeepSpeed's engine never changes its own flag)."""
        self.module.train(mode)

    def eval(self):
        """DeepSpeed's: the model's train(False); returns None."""
        self.module.train(False)

    def forward(self, *inputs, **kwargs):
        self._alive()
        self._settle_direct()
        self._end_open_micro()
        if self._stage < 3:
            out = self.module(*inputs, **kwargs)
            self._watch_outputs(out)
            return out
        try:
            out = self.module(*inputs, **kwargs)
        except BaseException as ex:
            # The forward stopped half-way: nothing stays gathered for it (a Ctrl-C too: the
            # modules it left running held their groups, and GatheredParameters took the
            # engine for inside a forward until the next step). The error itself goes up
            # unchanged, with a hint for the one stage-3 cause zinc cannot see.
            self._drop_params()
            if not isinstance(ex, Exception):
                raise
            hint = ("zinc, stage 3: if this comes from reading a parameter (an empty tensor "
                    "outside its module's forward) through a reference other than its module's "
                    "attribute, declare it: zinc.register_external_parameter(module, parameter)")
            if hasattr(ex, "add_note"):
                ex.add_note(hint)
            else:
                warnings.warn(hint, RuntimeWarning, stacklevel=2)
            raise
        self._watch_outputs(out)
        return out

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        """Scales the loss as DeepSpeed does (by 1/gradient_accumulation_steps unless
        scale_wrt_gas is False, and by fp16's loss scale except at ZeRO stage 0, where
        DeepSpeed 0.19.8 does not: _unscaled_loss) and runs autograd; each group is
        handed to zinc (zinc_grads_ready) as soon as all its parameters have their gradient,
        the groups that got none after autograd with a zero gradient, last group first.
        Collective at stages 2-3 (every rank must run the same graph). Returns the loss divided
        by the accumulation steps (scale_wrt_gas), as DeepSpeed's backward does.
        Unlike DeepSpeed's, without retain_graph the loss given is detached afterwards
        (`loss.detach_()`: its value stays, its grad_fn goes; not a view or a leaf): the usual
        loop keeps `loss` alive through the next step's forward, and the spent graph's nodes,
        scattered among the activations freed by this backward, then keep the heap from
        reusing that memory (transformers' Llama at stage 3, 2 ranks: peak RSS 1047-1057 MiB
        before, 955-966 after; docs/python.md). A second backward through it fails either way."""
        self._alive()
        self._settle_direct()
        counted = self._backward_begin()
        self._engine_backward = True
        try:
            if self._unscaled_loss:      # (see __init__) DeepSpeed's loss / ga, unscaled
                scaled = loss / self._ga if scale_wrt_gas else loss
            else:
                scaled = loss * (lib.zinc_loss_multiplier(self._e) if scale_wrt_gas
                                 else lib.zinc_engine_loss_scale(self._e))
            scaled.backward(retain_graph=retain_graph)
            # until the hand-over (_backward_end): a Ctrl-C before it leaves a micro-step to
            # finish
            self._interrupted = True
        except BaseException:
            self._backward_failed(counted)
            raise
        finally:
            self._in_backward = self._engine_backward = False
        self._monitor.note_loss(loss)
        self._backward_end()
        if not retain_graph and loss.grad_fn is not None and not loss._is_view():
            loss.detach_()
        return loss / self._ga if scale_wrt_gas else loss

    def _backward_begin(self):
        """What a backward does before autograd runs (engine.backward's, and the first output
        hook's of a direct one): refuses a second backward of a micro-step step() must end, takes
        `.grad` back from a no_sync block or a failed backward, ends an open micro-step, and
        resets the groups' record. Returns whether step() counts this micro-batch's samples."""
        if self._awaiting_step:
            # refused before autograd adds anything (zinc_grads_ready would refuse the second
            # hand-over only after its gradient was added)
            raise RuntimeError(
                f"zinc: backward() again without engine.step() after the last one, which ended "
                f"its micro-step (gradient_accumulation_steps={self._ga}): call engine.step() "
                f"after every backward, as with DeepSpeed (it ends the micro-step, and at the "
                f"window's end applies the update)")
        if self._no_sync:
            self._lend_back_grads()
        else:
            self._take_back_grads()
        self._end_open_micro()
        # After a backward that raised midway (an out-of-memory error, an exception in a hook),
        # this one continues its micro-step, as the gradients left in DeepSpeed's `.grad` add up
        # with the next backward's: the groups handed over then take this backward's gradient
        # as more (zinc_grads_more), the others their `.grad`'s sum.
        self._resuming, self._interrupted = self._interrupted, False
        for G in self._g:
            G.got.clear()
            if not self._resuming:
                G.done = G.late = False
        self._in_backward = True
        counted = not self._managed and not self._resuming
        if counted:                # step() counts the micro-batches' samples
            self._unmanaged_backwards += 1
        return counted

    def _backward_failed(self, counted):
        """Autograd raised midway: the next backward (or step()) continues this micro-step.
        Raised before any gradient came (a loss without grad_fn): nothing to continue, and a
        step() is refused as without a backward, as DeepSpeed's raises there (it took an Adam
        step on zero gradients, weight decay and momentum included)."""
        self._in_backward = False
        self._interrupted = self._resuming or any(G.got or G.done for G in self._g)
        if counted and not self._interrupted:   # no micro-batch ran: the next one counts
            self._unmanaged_backwards -= 1
        if self._stage == 3:       # what it gathered for the backward goes: a checkpoint
            self._drop_params()    # loaded next left those groups with the old values

    def _backward_end(self):
        """After autograd: the groups not handed over yet (or, in no_sync, the record that
        `.grad` holds gradients)."""
        self._interrupted = True      # (engine.backward set it already)
        with held():
            if self._no_sync:          # the gradients stay in `.grad`, summed by autograd
                self._unsynced = True
            else:
                self._hand_over_rest()
            self._interrupted = False
        self._show_window_grads()

    def _warn_frozen_since_init(self):
        """Once per parameter: one zinc trains (it required grad at initialize) whose
        requires_grad is False now. zinc's groups are fixed at initialize, as DeepSpeed's: it
        keeps training it with a zero gradient. One loop over the parameters per optimizer
        step."""
        for G in self._g:
            for pid, name, p in G.params:
                if not p.requires_grad and pid not in self._frozen_warned:
                    self._frozen_warned.add(pid)
                    warnings.warn(
                        f"zinc: {name} has requires_grad=False now, but it required grad at "
                        f"initialize and zinc trains it: it gets a zero gradient, and Adam's "
                        f"momentum and weight decay still move it (as DeepSpeed 0.19.8's ZeRO "
                        f"stage 1 does; its stages 2-3 fail there, its stage 0 in fp32 leaves it "
                        f"as it is). Freeze parameters before zinc.initialize.",
                        RuntimeWarning, stacklevel=3)

    @contextlib.contextmanager
    def no_sync(self):
        """DeepSpeed's no_sync, at ZeRO stages 0-1: the backward passes inside hand nothing to
        zinc; their gradients stay in the parameters' `.grad`, where autograd sums them, and
        the next backward outside (or engine.step(), if none comes) hands the sums over to be
        reduced once. engine.step() inside raises, and so does entering it again or at stages
        2-3, whose gradient partitioning reduces during backward (as in DeepSpeed)."""
        if self._stage >= 2:
            raise RuntimeError(f"zinc: no_sync is incompatible with the gradient partitioning "
                               f"of ZeRO stage {self._stage} (as in DeepSpeed: stages 0-1 only)")
        if self._bucketed:
            # DeepSpeed adds each backward inside into its fp32 sums; zinc keeps them in
            # `.grad`, where autograd would sum them in the working dtype: other roundings
            raise RuntimeError("zinc: no_sync is not supported at ZeRO stage 1 with "
                               "data_types.grad_accum_dtype \"fp32\" (its backward passes would "
                               "be summed in the working dtype before the fp32 sums); remove "
                               "the key or use gradient_accumulation_steps")
        if self._no_sync:
            raise RuntimeError("zinc: no_sync entered again inside no_sync")
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    # ---- a caller-owned accumulation boundary -----------------------------------------------

    def set_gradient_accumulation_boundary(self, is_boundary):
        """DeepSpeed's: whether the current micro-batch (and the following ones, until set
        again) ends the accumulation window, in place of the count of gradient_accumulation_steps;
        None gives the count back. With it, engine.step() may be called only at the window's end:
        the next forward or backward ends the open micro-step instead. Refused with the config's
        managed_gradient_accumulation false, as DeepSpeed refuses it."""
        if not self._managed:
            raise RuntimeError("zinc: set_gradient_accumulation_boundary() is not supported with "
                               "managed_gradient_accumulation=False; the caller owns the boundary "
                               "by calling step() (as in DeepSpeed)")
        self._boundary_set = None if is_boundary is None else bool(is_boundary)
        self._set_zinc_boundary()

    def _set_zinc_boundary(self, value=None):
        """zinc_set_accumulation_boundary: `value`, else the caller's setting (-1: none)."""
        if value is None:
            value = -1 if self._boundary_set is None else int(self._boundary_set)
        self._call(lib.zinc_set_accumulation_boundary(self._e, value))

    def _end_open_micro(self):
        """Where the caller owns the boundary, ends the micro-step the last backward completed
        and no step() ended (zinc_micro_step): its gradients stay accumulated for the window.
        A micro-step zinc took as the window's last must be ended by step(): raise instead."""
        if not self._open_micro:
            return
        if self._open_at_boundary:
            raise RuntimeError("zinc: the last backward ended the accumulation window "
                               "(set_gradient_accumulation_boundary(True), or the count of "
                               "gradient_accumulation_steps) but engine.step() did not follow; "
                               "call engine.step() before the next forward or backward")
        # zinc_micro_step reads zinc's setting as it is now, which may have changed since that
        # backward (to True, or back to the count): end it as what it was, not the last.
        with held():        # zinc's micro-step and its record here end together (_interrupt)
            if self._managed:
                self._set_zinc_boundary(0)
            try:
                self._call(lib.zinc_micro_step(self._e))
            finally:
                if self._managed:
                    self._set_zinc_boundary()
            self._open_micro = False

    def step(self, lr_kwargs=None):
        """zinc_step: at the accumulation boundary reduce, clip, Adam/AdamW and gather.
        lr_kwargs (DeepSpeed's) go to a client scheduler's step(); the config's schedule is
        zinc's, whose position follows the step count, so lr_kwargs with it raise."""
        if lr_kwargs and self._client_sched is None:
            raise NotImplementedError("zinc: step(lr_kwargs=...) with the config's scheduler: "
                                      "zinc's schedule follows the step count (a client "
                                      "lr_scheduler receives lr_kwargs)")
        if self._no_sync:
            raise RuntimeError("zinc: engine.step() inside no_sync (as in DeepSpeed: leave the "
                               "block first; its gradients are reduced then)")
        self._no_context("engine.step()")
        self._alive()
        if not self._managed or lib.zinc_engine_at_boundary(self._e):
            # (a micro-step's step() needs no optimizer state: DeepSpeed's counts it, away too)
            self._states_home("engine.step()")
        self._settle_direct()
        self._take_back_grads()
        if not (self._awaiting_step or self._open_micro or self._unsynced or self._interrupted):
            raise RuntimeError("zinc: engine.step() with no backward() since the last step (or "
                               "since the forward that ended the last micro-step): call "
                               "engine.backward(loss) first")
        if self._unsynced or self._interrupted:   # no_sync gradients with no backward outside
            with held():                          # since, or a backward that raised midway
                self._hand_over_rest()
                self._interrupted = False
        # zinc's step and the counters, flags, gathered copies and schedule that record it change
        # together: a Ctrl-C between them left every later call refused (_interrupt)
        with held():
            info = StepInfo()
            # torch -> zinc (WAR): the step overwrites the weights (stages 0-2: torch's
            # parameters) that kernels torch queued may still read.
            self._torch_then_zinc()
            if not self._managed or lib.zinc_engine_at_boundary(self._e):
                self._opt._before_step()         # the lr the optimizer's groups carry, if set
                self._warn_frozen_since_init()
            self._call(lib.zinc_step(self._e, ctypes.byref(info)))
            self._open_micro = self._awaiting_step = False
            self._step_applied = bool(info.boundary and info.applied)
            self._micro_steps += 1
            # zinc -> torch (RAW): the next forward reads the new weights: an event, no host wait
            # (the step's one is inside zinc_step, the read of the gradient norm).
            self._torch_after_zinc()
            if self._stage == 3:
                self._drop_params()
            if info.boundary:
                self._grad_buf = None  # the window's step gave the lent gradient buffer back
                self._window_grads = False
                self._info = info
                # As DeepSpeed's global_steps: every step at a boundary, those skipped too.
                # Counted on from the loaded value, not recomputed from Adam's count: a DeepSpeed
                # stage-0 fp16/bf16 checkpoint's Adam count is one more than its global_steps (its
                # optimizer steps once at init), and the count jumped by two at the first step
                # after the load.
                self._steps += 1
                self._skipped = info.skipped_total
                if self._managed:
                    self._samples += self.train_batch_size()
                else:                  # the micro-batches this window actually ran
                    self._samples += (self.train_batch_size() // self._ga *
                                      self._unmanaged_backwards)
                    self._unmanaged_backwards = 0
                self._lr = info.lr
                # As DeepSpeed: a client scheduler steps after every applied optimizer step (not
                # after one skipped for an fp16 overflow). In the section too: a Ctrl-C before
                # it left the schedule a step behind for the rest of the run.
                if info.applied and self._client_sched is not None:
                    with warnings.catch_warnings():
                        # torch's check that its optimizer stepped first: zinc's is the step.
                        warnings.filterwarnings("ignore",
                                                message=".*lr_scheduler.step.*optimizer.step")
                        try:
                            self._client_sched.step(**(lr_kwargs or {}))
                        except TypeError:
                            # a step() that refuses the keywords: DeepSpeed 0.19.8's engine
                            # retries with the batch size as a position (for Megatron's
                            # schedulers), so the schedule a script gets is DeepSpeed's
                            self._client_sched.step(self.train_batch_size())
                self._opt._after_step(applied=bool(info.applied))
                self._monitor.after_step(self)
        if not info.boundary:
            self._show_window_grads(stepped=True)


def add_config_arguments(parser):
    """DeepSpeed's add_config_arguments: --deepspeed, --deepspeed_config (and the deprecated
    --deepscale, --deepscale_config) in an argument group; initialize(args=...) reads the
    config path from them."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="a flag for the script's own use (no effect on the engine)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="the DeepSpeed JSON config")
    group.add_argument("--deepscale", default=False, action="store_true",
                       help="deprecated name of --deepspeed")
    group.add_argument("--deepscale_config", default=None, type=str,
                       help="deprecated name of --deepspeed_config")
    return parser


def _config_of(args, config, config_params):
    """The config as DeepSpeed's initialize finds it: config (or config_params), else
    args.deepspeed_config (or the deprecated args.deepscale_config); two of them is an error."""
    if config is None:
        config = config_params
    from_args = getattr(args, "deepspeed_config", None) if args is not None else None
    old = getattr(args, "deepscale_config", None) if args is not None else None
    if old is not None:
        if from_args is not None:
            raise ValueError("zinc.initialize: both args.deepscale_config and "
                             "args.deepspeed_config are set; give one")
        warnings.warn("zinc.initialize: --deepscale_config is deprecated, use --deepspeed_config",
                      DeprecationWarning, stacklevel=3)
        from_args = old
    if from_args is not None:
        if config is not None:
            raise ValueError("zinc.initialize: a config in both args.deepspeed_config and the "
                             "config argument; give one")
        config = from_args
    if config is None:
        raise ValueError("zinc.initialize: no config (config=, config_params= or "
                         "args.deepspeed_config)")
    return config


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, distributed_port=None, mpu=None, dist_init_required=None,
               collate_fn=None, config=None, mesh_param=None, config_params=None):
    """DeepSpeed's initialize: returns (engine, optimizer, training_dataloader, lr_scheduler).
    The training_dataloader is engine.deepspeed_io(training_data) when training_data is given
    (collate_fn then its collate_fn), else None.
    The optimizer comes from the config, or from a client torch.optim.Adam/AdamW (`optimizer`,
    read into the config's optimizer section); the scheduler from the config, or a client one
    (`lr_scheduler`: an object over the client optimizer, or DeepSpeed's callable form, given
    the client optimizer or a torch optimizer over the groups zinc trains), stepped by
    engine.step() after each applied step.
    dist_init_required=False leaves torch.distributed alone (init_distributed); zinc's ranks
    come from the launcher. What zinc does not offer raises NotImplementedError naming it."""
    if model is None:
        raise ValueError("zinc.initialize: model is required")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"zinc.initialize: model must be a torch.nn.Module; got "
                        f"{type(model).__name__}")
    if lr_scheduler is not None and optimizer is None and not callable(lr_scheduler):
        raise NotImplementedError("zinc.initialize: a client lr_scheduler object with the "
                                  "config's optimizer: it was built on an optimizer that does "
                                  "not train here (DeepSpeed steps it, and its lr changes "
                                  "nothing). Pass DeepSpeed's callable form, lr_scheduler="
                                  "lambda optimizer: ..., which is given a torch optimizer over "
                                  "the groups zinc trains; or a client optimizer (optimizer="
                                  "torch.optim.AdamW(...)) that the object steps")
    for name, value in (("mpu", mpu), ("mesh_param", mesh_param)):
        if value is not None:
            raise NotImplementedError(f"zinc.initialize: argument {name!r} (zinc has no model "
                                      "or sequence parallelism)")
    if training_data is not None:
        _dataloader.check_dataset(training_data)    # before the engine holds the model
    cfg = _config_of(args, config, config_params)
    # As DeepSpeed's initialize: the launcher's world, torch.distributed with it unless
    # dist_init_required is False.
    init_distributed(distributed_port=distributed_port, dist_init_required=dist_init_required)
    client = None
    sections = config_dict(cfg)
    zero = sections.get("zero_optimization")
    stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
    if optimizer is None and "optimizer" not in sections and stage in (1, 2):
        # As DeepSpeed 0.19.8, whose ZeRO stages 1-2 refuse it ("zero stage N requires an
        # optimizer"); zinc trained AdamW there. At stages 0 and 3 DeepSpeed builds an engine
        # without an optimizer (evaluation, loading weights): zinc's AdamW default, with its
        # config warning, keeps such scripts running.
        raise ValueError(f"zinc.initialize: ZeRO stage {stage} needs an optimizer: the config "
                         "has no \"optimizer\" section and no optimizer= was given (DeepSpeed "
                         "0.19.8 refuses it too); add one, e.g. \"optimizer\": {\"type\": "
                         "\"AdamW\", \"params\": {\"lr\": 0.001}}")
    if optimizer is not None:
        # As DeepSpeed: the client optimizer replaces the config's, its param groups are the
        # parameters trained.
        client, section, model_parameters = _client_optimizer(optimizer, model, model_parameters)
        sections["optimizer"] = section       # (sections is a copy: the caller's dict stays)
        cfg = sections
    if lr_scheduler is not None and "scheduler" in sections:
        # As DeepSpeed's _configure_lr_scheduler: a client scheduler replaces the config's
        # section, which then sets nothing (zinc's C step ran its lr or OneCycle's betas).
        del sections["scheduler"]
        cfg = sections
    engine = Engine(model, model_parameters, cfg, _client=client,
                    _client_scheduler=lr_scheduler is not None)
    engine.collate_fn = collate_fn
    # DeepSpeed's test is the data's truth: an empty dataset gives no loader (None), where zinc
    # gave one that yields nothing; said, since a script meant to train on it
    if training_data is not None and not training_data:
        warnings.warn("zinc.initialize: training_data is empty (length 0): no training "
                      "dataloader is built (None), as in DeepSpeed", stacklevel=2)
    if training_data:
        engine.training_dataloader = engine.deepspeed_io(training_data)
    loader = engine.training_dataloader
    if lr_scheduler is not None:
        if callable(lr_scheduler):     # DeepSpeed's test: a class is called too
            # DeepSpeed's callable form, given DeepSpeed's basic optimizer: the client's, else
            # a torch optimizer over the config optimizer's groups.
            basic = client if client is not None else engine._opt._torch_view()
            lr_scheduler = lr_scheduler(basic)
        engine._client_sched = lr_scheduler
        return engine, engine._opt, loader, lr_scheduler
    return engine, engine._opt, loader, engine.lr_scheduler
