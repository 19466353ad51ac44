"""engine.py — zinc.initialize and the Engine: a torch model's parameters handed to libzinc.

How the model and zinc share memory:
- Every module that owns parameters becomes one zinc group (registered in module order), every
  parameter one zinc parameter of the config's working dtype (fp32, or fp16/bf16 when enabled).
  A parameter shared by several modules (a tied head) is registered once, with the first.
- After zinc_finalize the parameters' values are set from the model (zinc_param_set). Stages
  0-2: each `param.data` becomes a view of zinc's working copy (zinc_param_data): no copy per
  step — the step writes the new weights where the model reads them.
- engine.backward(loss) scales the loss by zinc_loss_multiplier (loss scale / accumulation steps,
  as DeepSpeed does) and runs autograd. A hook on each parameter's AccumulateGrad node (kept
  alive by the engine, so autograd reuses it) notes when its gradient is accumulated; when a
  group's parameters all have theirs, the group is handed over at once — gradients added into
  zinc's gradient views, `.grad` dropped, zinc_grads_ready — so at stages 2-3 the reduce-scatter
  runs while autograd goes on with the earlier layers. Groups that got no gradient in this
  backward (unused parameters) are handed over with a zero gradient after autograd, last group
  first: every rank makes the same collective calls in the same order.
- engine.step() is zinc_step: at the accumulation boundary reduce, clip, Adam/AdamW, gather.

Stage 3 (DeepSpeed's scheme, built from forward hooks and autograd Functions so that it works on
torch 1.13, which has no backward pre-hooks for modules, as on current torch):
- Between steps the parameters hold no memory (`param.data` is an empty tensor); zinc holds the
  rank's shard.
- A forward pre-hook gathers the module's group (zinc_gather) and sets `param.data` to a copy
  torch owns, then releases zinc's buffer at once; the forward post-hook empties `param.data`
  again and passes every output tensor that requires grad through `_Regather`, whose backward
  gathers the group back before the module's own backward runs. Autograd saves the Parameter
  itself for most ops, so restoring `param.data` makes the saved tensor valid again; `nn.Linear`,
  whose functional form saves a transposed view of the weight (which would keep the forward's
  copy alive), runs through `_Linear`, which saves the Parameter.
- Copies, not views of zinc's gather buffer: a view saved by autograd (`w.t()`) would read
  another group's values once zinc reuses the buffer; a copy stays valid. zinc_gather is still
  called in module order, so zinc's traced prefetch applies.
- After backward a group is emptied as soon as its gradients are handed over (no later backward
  node can need a parameter whose gradient is complete).
- A parameter read through another module's attribute while a forward runs (the tied embedding
  read by the top module's head: `self.wte.weight`) is gathered at the read: each owning
  module's `_parameters` is a dict that gathers on read (DeepSpeed's ZeROOrderedDict does the
  same). The innermost running module holds that group until its forward ends and gathers it
  again before its backward. The read comes at the same point of every micro-step, so zinc's
  traced gather order repeats. A read that bypasses the attribute (a reference kept elsewhere)
  is declared with zinc.register_external_parameter: the module then gathers the group with
  its own. No step holds the whole model: the first micro-step releases as every later one.
- A module called more than once per forward gathers its group again at each call; activation
  checkpointing (torch.utils.checkpoint, zinc.checkpointing) re-runs the forward hooks in
  backward, which gather and release as in forward.
What is absent raises NotImplementedError rather than doing something else.

CUDA (written and reviewed, not yet run on a GPU; docs/python.md "CUDA"): parameters all on one
CUDA device open zinc's "cuda" device, whose ordinal (the process's local rank) must be torch's
device. The views are then device memory (DLPack, zero-copy: _memory.py). zinc queues all
its work on its own compute stream (its NCCL stream is ordered against that one by zinc), torch
on its current stream, so every hand-over between the two is ordered explicitly:
- torch -> zinc (gradients added into zinc's views, a gathered copy read out of zinc's buffer
  before zinc_release, the parameters torch may still read before zinc_step or a checkpoint
  load overwrites them): an event recorded on torch's stream that zinc's stream waits for
  (_torch_then_zinc), no host wait;
- zinc -> torch (zinc_step's new weights, zinc_gather's buffer, a loaded checkpoint, the values
  set at initialize): zinc_engine_sync, a host wait for zinc's device work (_zinc_then_torch);
- zinc's earlier work on a buffer -> torch writes it (a gradient bucket zinc zeroes after each
  zinc_grads_ready at stages 2-3): torch's stream waits for an event on zinc's stream.
"""
import atexit
import base64
import collections
import contextlib
import ctypes
import io
import itertools
import json
import operator
import os
import sys
import warnings
import weakref

import torch

from . import _memory, _torch_dist, _zero_init
from . import dataloader as _dataloader
from ._optimizer import _Optimizer, _Scheduler, _client_optimizer, _parameter_groups, _scalar
from ._lib import (ZINC_ERR_ABORTED, ZINC_ERR_INVALID_ARG, ZINC_ERR_TIMEOUT, EngineOptions,
                   LoadOptions, SaveOptions, StepInfo, ZincError, check, lib, read_tensors)


class ZincConfigWarning(UserWarning):
    """A warning zinc gave about the config (a key accepted without effect, an override, ...)."""

_TORCH_DTYPE = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
_BLOB_CAP = 64 << 20

_world = None
_engines = weakref.WeakSet()   # live engines: destroyed before the world they use
_serials = itertools.count()   # engines' creation order (zero.GatheredParameters)


def _destroy_world():
    global _world
    for e in list(_engines):
        e.close()
    if _world is not None:
        lib.zinc_world_destroy(_world)
        _world = None


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
    distributed_port, verbose, auto_mpi_discovery and config change nothing. A rank, world size
    or init_method given by hand is refused: zinc takes them from the launcher."""
    if rank not in (-1, None) or world_size not in (-1, None) or init_method is not None:
        raise NotImplementedError("zinc.init_distributed: rank, world_size and init_method come "
                                  "from the launcher (mpirun, torchrun, srun), not from arguments")
    if dist_backend not in (None, "nccl", "mpi", "gloo", "ccl"):
        raise ValueError(f"zinc.init_distributed: dist_backend {dist_backend!r} is not a "
                         "torch.distributed backend DeepSpeed takes (nccl, gloo, mpi, ccl)")
    world = _launcher_world()
    if dist_init_required is not False:
        _torch_dist.setup(world, dist_backend, timeout)
    return world


def _launcher_world():
    """zinc's world of the launcher's ranks, created once (torch.distributed untouched)."""
    global _world
    if _world is None:
        w = ctypes.c_void_p()
        check(lib.zinc_world_create_launched(ctypes.byref(w)))
        _world = w
        atexit.register(_destroy_world)
        if lib.zinc_world_size(w) > 1:
            _abort_on_uncaught()
    return _world


# What the world learns of an exception nothing caught: its type and the start of its text.
_ABORT_WHY_CHARS = 300


def _abort_on_uncaught():
    """Chains sys.excepthook so that an exception nothing catches aborts zinc's world before
    the traceback is printed: the other ranks, blocked in a collective this rank will never
    join, then raise ZINC_ERR_ABORTED naming it within a poll interval, instead of waiting
    comm_timeout_s (300 s by default) and then the exit's grace. An exception that is itself
    zinc's abort or timeout is not sent back: the world knows."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        known = isinstance(value, ZincError) and value.status in (ZINC_ERR_ABORTED,
                                                                  ZINC_ERR_TIMEOUT)
        if _world is not None and not known:
            why = f"uncaught {kind.__name__}: {value}"
            if len(why) > _ABORT_WHY_CHARS:
                why = why[:_ABORT_WHY_CHARS - 3] + "..."
            lib.zinc_world_abort(_world, lib.zinc_world_rank(_world), why.encode(errors="replace"))
        previous(kind, value, tb)

    sys.excepthook = hook


def _bits(t):
    """A tensor's bits as integers, so that equality is bitwise (NaNs, -0.0)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()]) if t.is_floating_point() else t


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def world_size():
    """Ranks in the launcher's world (1 without a launcher)."""
    return lib.zinc_world_size(_launcher_world())


def local_rank():
    """This process's index among the ranks of its node, from the launcher's environment:
    $LOCAL_RANK (torchrun), else the MPI launcher's node-local rank (OMPI_COMM_WORLD_LOCAL_RANK,
    MPI_LOCALRANKID), else SLURM_LOCALID, else 0. The GPU a CUDA model goes on before
    initialize (torch.cuda.set_device(zinc.local_rank()))."""
    for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if os.environ.get(var, "") != "":
            return int(os.environ[var])
    return 0


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


class _GatherOnRead(collections.OrderedDict):
    """A module's `_parameters` at stage 3: `module.weight` reads `_parameters["weight"]`, and a
    read while a forward runs gathers the parameter's group if it is not gathered (the engine's
    _on_read). Iteration (named_parameters, state_dict) reads no value and gathers nothing."""

    def __init__(self, items=(), engine=None):
        super().__init__(items)
        self._zinc = weakref.ref(engine) if engine is not None else None

    def __getitem__(self, key):
        p = super().__getitem__(key)
        eng = self._zinc() if self._zinc is not None else None
        if eng is not None and p is not None:
            eng._on_read(p)
        return p

    def __reduce__(self):      # a copy of the model (deepcopy, pickle) gets a plain dict
        return (collections.OrderedDict, (list(self.items()),))


def register_external_parameter(module, parameter):
    """DeepSpeed's zero.register_external_parameter: `module`'s forward reads `parameter`, which
    another module owns; at stage 3 the module gathers it with its own. Needed only for reads
    that bypass the owning module's attribute (a reference to the Parameter kept elsewhere):
    `other_module.weight` is gathered when read. Call it before zinc.initialize (DeepSpeed
    users call it in the module's __init__)."""
    ext = module.__dict__.setdefault("_zinc_external_params", [])
    if all(q is not parameter for q in ext):
        ext.append(parameter)


class _Regather(torch.autograd.Function):
    """Identity on a module's output; its backward gathers the module's groups again before the
    module's own backward runs (stage 3)."""

    @staticmethod
    def forward(ctx, engine, groups, t):
        ctx.engine, ctx.groups = engine, groups
        return t.detach()

    @staticmethod
    def backward(ctx, grad):
        for gi in ctx.groups:
            ctx.engine._materialize(gi)
        return None, None, grad


class _Linear(torch.autograd.Function):
    """nn.Linear at stage 3: saves the weight Parameter itself (F.linear saves the view w.t(),
    which would keep the forward's gathered copy alive until backward)."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return torch.nn.functional.linear(x, w, b)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = g.matmul(w)
        g2 = g.reshape(-1, g.shape[-1])
        if ctx.needs_input_grad[1]:
            gw = g2.t().matmul(x.reshape(-1, x.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb


def _linear_forward(self, x):
    return _Linear.apply(x, self.weight, self.bias)


def _client_record(state):
    """save_checkpoint's client_state in the blob's JSON: as JSON when it comes back equal from
    it (readable by `zinc ckpt inspect` and without torch), else, as DeepSpeed keeps it,
    torch.save bytes (base64): tensors, tuples, integer keys, any picklable object."""
    try:
        if json.loads(json.dumps(state)) == state:
            return {"client_state": state}
    except (TypeError, ValueError):
        pass
    raw = io.BytesIO()
    try:
        torch.save(state, raw)
    except Exception as ex:  # noqa: BLE001 — pickling can fail in many ways; say which value
        raise TypeError(f"zinc.save_checkpoint: client_state cannot be saved (torch.save: "
                        f"{ex})") from None
    return {"client_state_torch": base64.b64encode(raw.getvalue()).decode()}


def _client_state_of(saved):
    """The client_state a checkpoint's blob JSON holds (_client_record)."""
    if "client_state_torch" in saved:
        # Not weights_only: client_state holds the script's own objects, as DeepSpeed's
        # checkpoints do; a checkpoint is trusted as the code that wrote it.
        return torch.load(io.BytesIO(base64.b64decode(saved["client_state_torch"])),
                          weights_only=False)
    return saved.get("client_state", {})


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
            return json.load(f)
        except ValueError as ex:
            raise ValueError(f"zinc: {os.fspath(config)}: not valid JSON: {ex}") from None


def _post_hook_always(mod, hook):
    """A forward hook that also runs when the forward raises (torch >= 2.0: always_call), so a
    group's hold ends with it. Non-reentrant activation checkpointing needs this: its
    recomputation in backward stops by raising inside the block's forward once it has what
    backward needs, and every module the exception leaves must still release its group.
    torch 1.13 has no always_call and its recomputation always runs to the end."""
    try:
        return mod.register_forward_hook(hook, always_call=True)
    except TypeError:
        return mod.register_forward_hook(hook)


class _Group:
    """One zinc group on the Python side: its parameters and, at stage 3, whether torch holds
    them gathered now."""

    def __init__(self, gid, params, pgroup=0):
        self.gid = gid
        self.params = params      # [(param id, name, tensor)]
        self.pgroup = pgroup      # index of the param group its parameters came in
        self.live = False         # stage 3: param.data holds the gathered values
        self.holds = 0            # stage 3: forwards running that need the group
        self.ctx = 0              # stage 3: zero.GatheredParameters contexts holding it gathered
        self.got = set()          # param ids whose gradient autograd accumulated this backward
        self.done = False         # handed over (zinc_grads_ready) this micro-step


class Engine(torch.nn.Module):
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
            text, path = json.dumps(config).encode(), None
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
        # zinc's device is the model's: the CPU, or one CUDA device (meta, mps, ... are refused
        # by name before anything, as parameters spread over several devices).
        self._device = _model_device(model)
        self._cuda = self._device.type == "cuda"
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
        if lib.zinc_engine_rank(e) == 0:
            for line in lib.zinc_config_warnings(e).decode(errors="replace").splitlines():
                warnings.warn(f"zinc config: {line}", ZincConfigWarning, stacklevel=3)
        self._groups = []          # [(group id, [(param id, name, tensor)])]
        self._g = []               # [_Group], the same order
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
                    shape = (ctypes.c_int64 * max(1, p.dim()))(*(p.shape if p.dim() else (1,)))
                    pid = ctypes.c_int()
                    self._call(lib.zinc_param_add(e, g.value, full.encode(), max(1, p.dim()),
                                                  shape, self._code, ctypes.byref(pid)))
                    params.append((pid.value, full, p))
                    self._group_of[id(p)] = len(self._g)
                    self._pid_of[id(p)] = pid.value
                    _trains(p, self, pid.value)
                self._groups.append((g.value, params))
                mine.append(len(self._g))
                self._g.append(_Group(g.value, params, pgi))
            needs = mine + needs
            if needs:
                self._needs[mod] = needs
        if not self._groups:
            raise ValueError("zinc.initialize: the model has no trainable parameters")
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
                self._call(lib.zinc_param_set(e, pid, ctypes.c_void_p(src.data_ptr())))
        untrained = list(self._untrained_params().values())
        for p in untrained:                  # zinc does not shard these: whole again
            if _zero_init.held(p) is not None:
                _zero_init.restore(p)
        self._broadcast_into(untrained, 0)
        # zinc -> torch: the values set (and finalize's zeroing) are complete before torch
        # reads zinc's views.
        self._zinc_then_torch()
        self._shapes = {pid: p.shape for _, ps in self._groups for pid, _, p in ps}
        self._hooks = []
        self._in_backward = False
        self._contexts = 0           # zero.GatheredParameters contexts open over this engine
        self._no_sync = False        # inside no_sync(): backward hands nothing over
        self._unsynced = False       # gradients a no_sync backward left in `.grad`
        # Who ends the accumulation window (docs/python.md): zinc's count, the caller's
        # set_gradient_accumulation_boundary (None: not set), or every step() (the config's
        # managed_gradient_accumulation false). When the caller owns it, a backward's micro-step
        # stays open until the next forward or backward ends it (zinc_micro_step) or step() does.
        self._boundary_set = None
        self._open_micro = False     # every group handed over, no zinc step since, and the
                                     # caller owned the boundary then (step() need not follow)
        self._open_at_boundary = False   # ... and zinc took that micro-step as the window's last
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
                if p.dtype in (torch.float16, torch.bfloat16, torch.float32,
                               torch.float64):       # DeepSpeed's CASTABLE_DTYPES
                    p.data = p.data.to(_TORCH_DTYPE[self._code])
        self._watch_gradients()
        if self._stage == 3:
            self._setup_stage3(model)
        self._info = StepInfo()
        # DeepSpeed's counters: optimizer steps taken (applied and skipped for an fp16
        # overflow), the skipped ones, and the samples those steps trained on.
        self._steps = 0
        self._skipped = 0
        self._samples = 0
        self._unmanaged_backwards = 0   # backwards since the last step() in unmanaged mode
        self._client_sched = None    # a client LR scheduler, stepped after applied steps
        self._lr = lib.zinc_engine_lr(e)    # the lr of the last applied step (until one: the next)
        self._opt = _Optimizer(self, _client, _client_scheduler)   # the lr carrier
        self._managed = bool(self._resolved.get("managed_gradient_accumulation", True))
        self.collate_fn = None             # initialize's collate_fn, deepspeed_io's default
        self.training_dataloader = None    # initialize(training_data=...)'s loader

    # ---- plumbing -------------------------------------------------------------------------

    def _call(self, status):
        check(status, self._e)

    def _torch_then_zinc(self):
        """CUDA: what torch queued so far on its current stream runs before what zinc queues
        from here on (zinc's stream waits for an event on torch's; no host wait). CPU: nothing
        (torch's CPU ops are done when they return)."""
        if self._cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self._device))
            self._zstream.wait_event(ev)

    def _zinc_then_torch(self):
        """CUDA: zinc's device work (its compute stream, which waits for its NCCL collectives)
        is finished before torch reads what it wrote: zinc_engine_sync, a host wait, which also
        turns a vanished NCCL peer into an error. CPU: nothing (zinc_engine_sync is a no-op)."""
        if self._cuda:
            self._call(lib.zinc_engine_sync(self._e))

    def _torch_after_zinc(self):
        """CUDA: torch's stream waits (on the device) for what zinc queued so far, before torch
        writes into a buffer zinc may still be using. CPU: nothing."""
        if self._cuda:
            ev = torch.cuda.Event()
            ev.record(self._zstream)
            torch.cuda.current_stream(self._device).wait_event(ev)

    def _watch_gradients(self):
        """A hook on every parameter's AccumulateGrad node: it fires once per backward, after all
        of the parameter's gradient contributions are summed into `.grad`. The engine keeps the
        nodes (autograd holds them only weakly between graphs), so every backward reuses them.
        Created while `param.data` has its full shape and final dtype: a node remembers both."""
        self._acc_nodes = []
        for gi, G in enumerate(self._g):
            for pid, _, p in G.params:
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(node.register_hook(self._accumulated_hook(gi, pid)))
                self._acc_nodes.append(node)
                if self._stage == 3:
                    self._hooks.append(p.register_hook(self._incoming_hook(gi)))

    def _accumulated_hook(self, gi, pid):
        def hook(*_):
            G = self._g[gi]
            if not self._in_backward or G.done or self._no_sync:
                return
            G.got.add(pid)
            if len(G.got) == len(G.params):
                self._hand_over(gi)
        return hook

    def _incoming_hook(self, gi):
        # Stage 3: a gradient reaching a parameter whose group no _Regather gathered (its module's
        # output was not a tensor we could wrap): AccumulateGrad needs the full-shaped parameter.
        def hook(grad):
            if self._in_backward:
                self._materialize(gi)
        return hook

    def _hand_over(self, gi):
        """Adds the group's gradients into zinc's views, drops `.grad`, zinc_grads_ready."""
        G, e = self._g[gi], self._e
        # zinc -> torch (WAR): at stages 2-3 the view is a bucket zinc zeroes after the previous
        # group's zinc_grads_ready on its stream; torch's adds must run after that.
        self._torch_after_zinc()
        for pid, _, p in G.params:
            if p.grad is not None:
                ptr = ctypes.c_void_p()
                self._call(lib.zinc_param_grad(e, pid, ctypes.byref(ptr)))
                shape = self._shapes[pid]
                _memory.view(ptr.value, _numel(shape), self._code, shape, self._device).add_(
                    p.grad.to(p.dtype))
                p.grad = None     # freed on torch's stream, after the add that reads it
        # torch -> zinc (RAW): the reduce zinc_grads_ready queues reads the sums torch added.
        self._torch_then_zinc()
        self._call(lib.zinc_grads_ready(e, G.gid))
        G.done = True
        if self._stage == 3 and G.holds == 0:
            self._dematerialize(gi)

    # ---- stage 3 ----

    def _setup_stage3(self, model):
        self._empty = torch.empty(0, dtype=_TORCH_DTYPE[self._code], device=self._device)
        self._stack = []           # [module, groups gathered on read for it], outermost first
        self._declared = {}        # module -> groups it reads that other modules own (declared)
        self._linears = []
        self._watched = []         # modules whose _parameters gather on read
        for mod in model.modules():
            ext = [self._group_of[id(q)] for q in mod.__dict__.get("_zinc_external_params", [])
                   if id(q) in self._group_of]
            if ext:
                self._declared[mod] = set(ext)
            if any(id(p) in self._group_of for p in mod._parameters.values() if p is not None):
                mod._parameters = _GatherOnRead(mod._parameters, self)
                self._watched.append(mod)
        hooked = list(self._needs) + [m for m in self._declared if m not in self._needs]
        for mod in hooked + ([model] if model not in hooked else []):
            self._hooks.append(mod.register_forward_pre_hook(self._pre_hook))
            self._hooks.append(_post_hook_always(mod, self._post_hook))
            if (isinstance(mod, torch.nn.Linear) and type(mod).forward is torch.nn.Linear.forward
                    and "forward" not in mod.__dict__):
                mod.forward = _linear_forward.__get__(mod)
                self._linears.append(mod)
        self._drop_params()

    def _groups_of(self, mod):
        need = self._needs.get(mod, [])
        more = self._declared.get(mod)
        return need + sorted(more.difference(need)) if more else need

    def _pre_hook(self, mod, inputs):
        self._end_open_micro()     # a forward through engine.module, not the engine
        self._stack.append((mod, []))
        for gi in self._groups_of(mod):
            self._materialize(gi)
            self._g[gi].holds += 1

    def _on_read(self, p):
        """A parameter read through its module's attribute (_GatherOnRead): if a forward is
        running and the group is not gathered, gather it for the innermost running module,
        which holds it until its forward ends and gathers it again before its backward."""
        if not self._stack:
            return
        gi = self._group_of.get(id(p))
        if gi is None or self._g[gi].live:
            return
        self._materialize(gi)
        self._g[gi].holds += 1
        self._stack[-1][1].append(gi)

    def _post_hook(self, mod, inputs, out):
        read = []
        if self._stack and self._stack[-1][0] is mod:
            read = self._stack.pop()[1]
        own = self._groups_of(mod)
        groups = tuple(own + [gi for gi in dict.fromkeys(read) if gi not in own])
        for gi in groups:
            G = self._g[gi]
            G.holds = max(0, G.holds - 1)
            if G.holds == 0:
                self._dematerialize(gi)
        if groups and torch.is_grad_enabled():
            return self._wrap(out, groups)
        return out

    def _wrap(self, out, groups):
        if isinstance(out, torch.Tensor):
            return _Regather.apply(self, groups, out) if out.requires_grad else out
        if isinstance(out, tuple):
            items = [self._wrap(o, groups) for o in out]
            return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
        if isinstance(out, list):
            return [self._wrap(o, groups) for o in out]
        if isinstance(out, dict):
            for k in list(out.keys()):
                out[k] = self._wrap(out[k], groups)
        return out

    def _materialize(self, gi):
        """Stage 3: zinc_gather the group, copy it into `param.data`, zinc_release."""
        G, e = self._g[gi], self._e
        if G.live:
            return
        self._call(lib.zinc_gather(e, G.gid))
        try:
            # zinc -> torch (RAW): the all-gather into zinc's buffer is complete before the copy.
            self._zinc_then_torch()
            for pid, _, p in G.params:
                ptr = ctypes.c_void_p()
                self._call(lib.zinc_param_data(e, pid, ctypes.byref(ptr)))
                shape = self._shapes[pid]
                p.data = _memory.view(ptr.value, _numel(shape), self._code, shape,
                                      self._device).clone()
        finally:
            # torch -> zinc (WAR): after zinc_release zinc may all-gather another group into this
            # buffer (its prefetch); that must wait for the copies queued on torch's stream.
            self._torch_then_zinc()
            self._call(lib.zinc_release(e, G.gid))
        G.live = True

    def _dematerialize(self, gi):
        G = self._g[gi]
        if G.live and G.ctx == 0:
            for _, _, p in G.params:
                p.data = self._empty
            G.live = False

    def _drop_params(self):
        """Stage 3, between steps: the model holds no parameter memory (zinc holds the shard)."""
        for gi, G in enumerate(self._g):
            G.live = True
            G.holds = 0
            self._dematerialize(gi)
        self._stack = []

    # ---- zero.GatheredParameters (zero.py) --------------------------------------------------

    def _no_context(self, what):
        if self._contexts:
            raise RuntimeError(f"zinc: {what} inside zinc.zero.GatheredParameters over this "
                               "model's parameters: leave the context first (the weights it "
                               "gathered or changed would not be the step's)")

    def _context_enter(self, params, modifier_rank):
        """Makes `params` (this model's, trained by zinc or not) hold their full values until
        _context_exit, and returns what that needs. Stage 3 outside a forward: their groups'
        values come from zinc_param_get (collective; the fp32 master cast to the working dtype,
        what zinc_gather gives) without zinc_gather, so zinc's traced gather order and its
        prefetched copies stay as they are. Inside a forward: the running module gathers the
        groups as for a read of their attribute (_on_read: held until its forward ends, gathered
        again for its backward). With modifier_rank, that rank keeps a copy of the values to
        tell at the exit which ones it changed."""
        if self._in_backward:
            raise RuntimeError("zinc: zinc.zero.GatheredParameters inside a backward")
        world = lib.zinc_engine_world_size(self._e)
        if modifier_rank is not None and not (isinstance(modifier_rank, int)
                                              and 0 <= modifier_rank < world):
            raise ValueError(f"zinc.zero.GatheredParameters: modifier_rank {modifier_rank!r} is "
                             f"not a rank of this world of {world}")
        # Every rank lists them in the same order (its collectives follow it).
        trained = sorted((p for p in params if id(p) in self._pid_of),
                         key=lambda p: self._pid_of[id(p)])
        others = sorted((p for p in params if id(p) not in self._pid_of),
                        key=lambda p: self._model_order[id(p)])
        if self._stage == 3 and self._stack:
            if modifier_rank is not None:
                raise RuntimeError("zinc: zinc.zero.GatheredParameters(modifier_rank=...) inside a "
                                   "forward: change parameters between steps")
            for p in trained:
                self._on_read(p)
            return None
        # Stage 3: the groups the context holds gathered (below it every group always is).
        groups = sorted({self._group_of[id(p)] for p in trained}) if self._stage == 3 else []
        held = []
        try:
            for gi in groups:
                G = self._g[gi]
                if not G.live:
                    for pid, _, p in G.params:
                        p.data = self._zinc_value(pid).to(self._device)
                    G.live = True
                G.ctx += 1
                held.append(gi)
        except BaseException:
            self._let_go(held)
            raise
        self._contexts += 1
        mine = modifier_rank is not None and lib.zinc_engine_rank(self._e) == modifier_rank
        snap = [p.detach().clone() for p in trained + others] if mine else None
        return (trained, others, groups, modifier_rank, snap)

    def _context_exit(self, rec, failed):
        """Ends what _context_enter began. With a modifier rank (and no exception inside), the
        parameters that rank changed get its values on every rank: zinc's ones through
        zinc_broadcast and zinc_param_set (fp32 master and working copy, so the next step
        starts from them), the others copied in. Collective then; the ones it left alone keep
        their values, the fp32 master included. Stage 3: the groups are emptied again."""
        if rec is None:
            return
        trained, others, groups, root, snap = rec
        self._contexts -= 1
        bad = None
        try:
            if root is not None and not failed:
                bad = self._take_changes(trained, others, root, snap)
        finally:
            self._let_go(groups)
            if self._stage < 3 and root is not None:
                self._view_params(trained)    # should the modifier have replaced `param.data`
        if bad is not None:
            raise ValueError(f"zinc.zero.GatheredParameters: rank {root} changed the shape of "
                             f"a parameter to {bad}: only its values may change")

    def _let_go(self, groups):
        """Stage 3: a context's hold on `groups` ends; those no forward holds are emptied."""
        for gi in groups:
            G = self._g[gi]
            G.ctx -= 1
            if G.holds == 0:
                self._dematerialize(gi)

    def _view_params(self, params):
        """Stages 0-2: each parameter's `param.data` a view of zinc's working copy (no copy)."""
        for p in params:
            pid = self._pid_of[id(p)]
            ptr = ctypes.c_void_p()
            self._call(lib.zinc_param_data(self._e, pid, ctypes.byref(ptr)))
            p.data = _memory.view(ptr.value, _numel(self._shapes[pid]), self._code,
                                  self._shapes[pid], self._device)

    def _take_changes(self, trained, others, root, snap):
        """_context_exit's broadcast of the modifier rank's changes. Returns the new shape of a
        parameter whose shape it changed (nothing taken then), else None."""
        rank = lib.zinc_engine_rank(self._e)
        params = trained + others
        flags = torch.zeros(len(params), dtype=torch.uint8)
        if rank == root:
            for k, (p, old) in enumerate(zip(params, snap)):
                if p.shape != old.shape:
                    flags[k] = 2
                elif p.dtype != old.dtype or not torch.equal(_bits(p.detach()), _bits(old)):
                    flags[k] = 1
        self._broadcast(flags, root)
        for k, p in enumerate(params):
            if flags[k] == 2:
                return tuple(p.shape) if rank == root else "another shape"
        # torch -> zinc (WAR): zinc_param_set overwrites weights torch's kernels may still read.
        self._torch_then_zinc()
        for k, p in enumerate(trained):
            if flags[k]:
                pid = self._pid_of[id(p)]
                buf = (p.detach().to("cpu", torch.float32).contiguous() if rank == root
                       else torch.empty(_numel(self._shapes[pid]), dtype=torch.float32))
                self._broadcast(buf, root)
                self._call(lib.zinc_param_set(self._e, pid, ctypes.c_void_p(buf.data_ptr())))
        changed = [k for k in range(len(trained), len(params)) if flags[k]]
        if rank == root:      # a changed dtype: the other ranks still have the one it had
            for k in changed:
                params[k].data = params[k].data.to(snap[k].dtype)
        self._broadcast_into([params[k] for k in changed], root)
        # zinc -> torch (RAW): the values set are in place before torch reads them.
        self._zinc_then_torch()
        return None

    # zinc_param_state's values by name: Adam's moments in torch's names; for the fragment
    # calls also the master (None) and the gradient.
    _ADAM_STATE = {"exp_avg": 0, "exp_avg_sq": 1}
    _LOCAL = {**_ADAM_STATE, None: 2, "grad": 3}

    def _full_calls(self, state):
        """(get, set, leading arguments) of the whole-value calls for `state`: None the fp32
        master (zinc_param_get/_set), "grad" the gradient (zinc_param_grad_get/_set), else an
        Adam moment (zinc_param_state_get/_set; ValueError for another name)."""
        if state is None:
            return lib.zinc_param_get, lib.zinc_param_set, ()
        if state == "grad":
            return lib.zinc_param_grad_get, lib.zinc_param_grad_set, ()
        return lib.zinc_param_state_get, lib.zinc_param_state_set, (self._state_id(state),)

    def _full_fp32(self, pid, state=None):
        """The parameter's whole value, fp32, on the engine's device (_full_calls: the master,
        an Adam moment, or the gradient the next step will use — averaged over the ranks,
        still times the loss multiplier). Collective."""
        get, _, args = self._full_calls(state)
        out = torch.empty(self._shapes[pid], dtype=torch.float32)
        self._call(get(self._e, pid, *args, ctypes.c_void_p(out.data_ptr())))
        return out.to(self._device)

    def _set_full_fp32(self, pid, value, state=None):
        """Sets the parameter's whole value (the same on every rank, as DeepSpeed's): the
        master also sets the working copy (stage 3's next gather reads it), a moment is where
        the next step starts from, the gradient what it uses."""
        what = ("safe_set_full_fp32_param" if state is None else
                "safe_set_full_grad" if state == "grad" else "safe_set_full_optimizer_state")
        _, put, args = self._full_calls(state)
        if state != "grad":      # a gradient is not what a gathered module computes with
            self._no_context(what)
        shape = self._shapes[pid]
        if tuple(value.shape) != tuple(shape):
            raise ValueError(f"zinc: {what}: a value of shape {tuple(value.shape)} for a "
                             f"parameter of shape {tuple(shape)}")
        src = value.detach().to("cpu", torch.float32).contiguous()
        self._call(put(self._e, pid, *args, ctypes.c_void_p(src.data_ptr())))
        self._zinc_then_torch()

    def _local_range(self, pid):
        """zinc_param_local_range: the elements [lo, hi) of the flattened parameter this rank
        keeps (its "local partition")."""
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        self._call(lib.zinc_param_local_range(self._e, pid, ctypes.byref(lo), ctypes.byref(hi)))
        return lo.value, hi.value

    def _local(self, pid, state, what):
        """This rank's fragment, 1-D fp32 on the engine's device, of the master (state None),
        an Adam moment or the gradient (zinc_param_local_get; ZeRO stage 3 only, as
        DeepSpeed's local calls). Not collective."""
        which = self._local_id(state, what)
        lo, hi = self._local_range(pid)
        out = torch.empty(hi - lo, dtype=torch.float32)
        if hi > lo:
            self._call(lib.zinc_param_local_get(self._e, pid, which,
                                                ctypes.c_void_p(out.data_ptr())))
        return out.to(self._device)

    def _set_local(self, pid, value, state, what):
        """Writes this rank's fragment (zinc_param_local_set): `value` has its hi - lo
        elements."""
        which = self._local_id(state, what)
        lo, hi = self._local_range(pid)
        if value.numel() != hi - lo:
            raise ValueError(f"zinc: {what}: a value of {value.numel()} elements for this "
                             f"rank's fragment of {hi - lo} (elements {lo}..{hi} of the "
                             f"parameter)")
        src = value.detach().to("cpu", torch.float32).contiguous().view(-1)
        if hi > lo:
            self._call(lib.zinc_param_local_set(self._e, pid, which,
                                                ctypes.c_void_p(src.data_ptr())))
            self._zinc_then_torch()

    def _local_id(self, state, what):
        if self._stage != 3:
            raise ValueError(f"zinc: {what} is defined for ZeRO stage 3 partitioned parameters "
                             f"only (as DeepSpeed's); this engine runs stage {self._stage}")
        if state is not None and state != "grad":
            self._state_id(state)       # raises for a state zinc's Adam does not keep
        return self._LOCAL[state]

    def _state_id(self, state):
        if state not in self._ADAM_STATE:
            raise ValueError(f"zinc: optimizer state {state!r}: zinc's Adam keeps "
                             f"{sorted(self._ADAM_STATE)}")
        return self._ADAM_STATE[state]

    def memory(self):
        """zinc's memory of this rank by category: {name: (planned bytes, allocated bytes)}."""
        names = ["param16", "grad", "master", "adam_m", "adam_v", "bucket", "gather"]
        planned, alloc = (ctypes.c_uint64 * len(names))(), (ctypes.c_uint64 * len(names))()
        self._call(lib.zinc_memory(self._e, planned, alloc))
        return {n: (planned[i], alloc[i]) for i, n in enumerate(names)}

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
        rank, to keep the values."""
        if getattr(self, "_e", None) is not None and self._e.value:
            cuda = getattr(self, "_cuda", False)
            if cuda:      # zinc's writes done before the copies read them (errors ignored here)
                lib.zinc_engine_sync(self._e)
            for _, params in getattr(self, "_groups", []):
                for _, _, p in params:
                    p.data = p.data.clone()
            if cuda:      # the copies done before zinc frees the memory they read
                torch.cuda.current_stream(self._device).synchronize()
            for h in getattr(self, "_hooks", []):
                h.remove()
            for mod in getattr(self, "_linears", []):
                mod.__dict__.pop("forward", None)
            for mod in getattr(self, "_watched", []):
                if isinstance(mod._parameters, _GatherOnRead):
                    mod._parameters = collections.OrderedDict(mod._parameters)
            lib.zinc_engine_destroy(self._e)
            self._e = ctypes.c_void_p()

    def __del__(self):
        self.close()

    # ---- training -------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        self._end_open_micro()
        if self._stage < 3:
            return self.module(*inputs, **kwargs)
        try:
            return self.module(*inputs, **kwargs)
        except Exception as ex:
            # The forward stopped half-way: nothing stays gathered for it. The error itself goes
            # up unchanged, with a hint for the one stage-3 cause zinc cannot see.
            self._drop_params()
            hint = ("zinc, stage 3: if this comes from reading a parameter (an empty tensor "
                    "outside its module's forward) through a reference other than its module's "
                    "attribute, declare it: zinc.register_external_parameter(module, parameter)")
            if hasattr(ex, "add_note"):
                ex.add_note(hint)
            else:
                warnings.warn(hint, RuntimeWarning, stacklevel=2)
            raise

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        """Scales the loss as DeepSpeed does (by 1/gradient_accumulation_steps unless
        scale_wrt_gas is False, and by fp16's loss scale) and runs autograd; each group is
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
        self._end_open_micro()
        for G in self._g:
            G.got.clear()
            G.done = False
        mult = (lib.zinc_loss_multiplier(self._e) if scale_wrt_gas
                else lib.zinc_engine_loss_scale(self._e))
        self._in_backward = True
        if not self._managed:      # step() counts these micro-batches' samples, as DeepSpeed
            self._unmanaged_backwards += 1
        try:
            (loss * mult).backward(retain_graph=retain_graph)
        finally:
            self._in_backward = False
        if self._no_sync:          # the gradients stay in `.grad`, summed by autograd
            self._unsynced = True
        else:
            self._hand_over_rest()
        if not retain_graph and loss.grad_fn is not None and not loss._is_view():
            loss.detach_()
        return loss / self._ga if scale_wrt_gas else loss

    def _hand_over_rest(self):
        """After autograd: the groups not handed over yet (no gradient this backward, or only
        from no_sync backwards), last group first."""
        for gi in reversed(range(len(self._g))):
            if not self._g[gi].done:
                self._hand_over(gi)
        self._unsynced = False
        self._open_micro = not self._managed or self._boundary_set is not None
        self._open_at_boundary = bool(lib.zinc_engine_at_boundary(self._e))
        if self._stage == 3:
            self._drop_params()

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
        if self._unsynced:         # no_sync gradients with no backward outside since
            self._hand_over_rest()
        info = StepInfo()
        # torch -> zinc (WAR): the step overwrites the weights (stages 0-2: torch's parameters)
        # that kernels torch queued may still read.
        self._torch_then_zinc()
        if not self._managed or lib.zinc_engine_at_boundary(self._e):
            self._opt._before_step()             # the lr the optimizer's groups carry, if set
        self._call(lib.zinc_step(self._e, ctypes.byref(info)))
        self._open_micro = False
        # zinc -> torch (RAW): the next forward reads the new weights.
        self._zinc_then_torch()
        if self._stage == 3:
            self._drop_params()
        if info.boundary:
            self._info = info
            # As DeepSpeed's global_steps: every step at a boundary, those skipped too.
            self._steps = info.step + info.skipped_total
            self._skipped = info.skipped_total
            if self._managed:
                self._samples += self.train_batch_size()
            else:                  # the micro-batches this window actually ran
                self._samples += (self.train_batch_size() // self._ga *
                                  self._unmanaged_backwards)
                self._unmanaged_backwards = 0
            self._lr = info.lr
            # As DeepSpeed: a client scheduler steps after every applied optimizer step (not
            # after one skipped for an fp16 overflow).
            if info.applied and self._client_sched is not None:
                with warnings.catch_warnings():
                    # torch's check that its optimizer stepped first: zinc's step is the step.
                    warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*optimizer.step")
                    self._client_sched.step(**(lr_kwargs or {}))
            self._opt._after_step()

    # ---- DeepSpeed's accessors ------------------------------------------------------------

    def __getattr__(self, name):
        """What the engine does not have comes from the model, as DeepSpeed's engine passes it
        through (HF models' engine.config, engine.generate(...)). Not names with a leading
        underscore: the engine's own private state must never resolve to the model's."""
        try:
            return super().__getattr__(name)     # torch's: parameters, buffers, submodules
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is None or name.startswith("_"):
                raise
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}', "
                                 "nor has its module") from None

    @property
    def optimizer(self):
        """What initialize returned as the optimizer (DeepSpeed's engine.optimizer)."""
        return self._opt

    @property
    def lr_scheduler(self):
        """The client LR scheduler, else the config's (DeepSpeed's engine.lr_scheduler)."""
        if self._client_sched is not None:
            return self._client_sched
        return _Scheduler(self)

    @property
    def global_steps(self):
        """DeepSpeed's: the optimizer steps taken, those skipped for an fp16 overflow too."""
        return self._steps

    @property
    def skipped_steps(self):
        """DeepSpeed's: the optimizer steps skipped for an fp16 gradient overflow."""
        return self._skipped

    @property
    def global_samples(self):
        """DeepSpeed's: the samples the optimizer steps trained on, train_batch_size per step
        (with managed_gradient_accumulation false, those of the micro-batches each ran)."""
        return self._samples

    def get_lr(self):
        """The lr of each of the optimizer's param groups, as DeepSpeed's."""
        return [float(_scalar(g["lr"])) for g in self._opt.param_groups]

    def was_step_applied(self):
        return bool(self._info.applied)

    def get_global_grad_norm(self):
        return self._info.grad_norm

    def train_micro_batch_size_per_gpu(self):
        return self._micro

    def gradient_accumulation_steps(self):
        return self._ga

    def zero_optimization_stage(self):
        return self._stage

    @property
    def global_rank(self):
        return lib.zinc_engine_rank(self._e)

    @property
    def world_size(self):
        return lib.zinc_engine_world_size(self._e)

    @property
    def device(self):
        """The torch.device the model is on (DeepSpeed's engine.device): the CPU or the one CUDA
        device zinc opened."""
        return self._device

    @property
    def local_rank(self):
        """This process's index among the ranks of its node (DeepSpeed's engine.local_rank, which
        is int(LOCAL_RANK) once its launcher or MPI discovery has set it). On CUDA the GPU zinc
        opened, which zinc chose by that same index. On the CPU zinc.local_rank(): the
        launcher's environment, else 0 (a world of one: DeepSpeed's MPI discovery of a single
        process)."""
        if self._cuda:
            return lib.zinc_engine_cuda_device(self._e)
        return local_rank()

    def train_batch_size(self):
        """The global batch of one optimizer step: micro batch x accumulation steps x ranks."""
        return int(self._resolved["train_batch_size"])

    def _read_batch(self):
        """The resolved config (zinc_engine_config_json; DeepSpeed's batch rule as zinc's config
        module applied it, or zinc_set_batch_size's values) and the batch sizes from it."""
        self._resolved = json.loads(lib.zinc_engine_config_json(self._e).decode())
        self._micro = int(self._resolved["train_micro_batch_size_per_gpu"])
        self._ga = int(self._resolved["gradient_accumulation_steps"])

    def set_train_batch_size(self, train_batch_size):
        """DeepSpeed's: the global batch from the next accumulation window on, by changing
        gradient_accumulation_steps (the micro batch stays). ValueError, as DeepSpeed's, unless
        it is a multiple of micro batch x ranks. Between windows only (zinc_set_batch_size:
        after the step() that ended one, or before the first backward): inside one, whose losses
        were scaled by the old steps, ZincError (a RuntimeError) — DeepSpeed's takes it anywhere
        and counts the new steps against its global micro-step count, so its first window after
        a change can be shorter. Every rank must pass the same value."""
        n = operator.index(train_batch_size)
        unit = self._micro * self.world_size
        if n % unit != 0:
            raise ValueError("Train batch size must be divisible by micro-batch data parallelism "
                             f"(zinc: {n} is not a multiple of train_micro_batch_size_per_gpu "
                             f"{self._micro} x {self.world_size} ranks)")
        self._set_batch(self._micro, n // unit)

    def set_train_micro_batch_size(self, micro_batch_size):
        """DeepSpeed's: the micro batch from the next accumulation window on, the accumulation
        steps kept (train_batch_size follows). As set_train_batch_size, between windows only.
        The loader initialize(training_data=...) built keeps its batch size, as DeepSpeed's."""
        self._set_batch(operator.index(micro_batch_size), self._ga)

    def _set_batch(self, micro, ga):
        if self._unsynced or self._in_backward:
            raise RuntimeError("zinc: the batch sizes change between accumulation windows only: "
                               "gradients of this window are pending (a backward inside "
                               "no_sync(), or one running); call it after the step that ends "
                               "the window")
        try:
            self._call(lib.zinc_set_batch_size(self._e, micro, ga))
        except ZincError as ex:     # a value below 1 or too large: zinc's message
            if ex.status == ZINC_ERR_INVALID_ARG:
                raise ValueError(str(ex)) from ex
            raise
        self._read_batch()

    def is_gradient_accumulation_boundary(self):
        """True when the current micro-batch ends the accumulation window, so that the next
        engine.step() reduces the gradients and runs the optimizer: what
        set_gradient_accumulation_boundary set, else gradient_accumulation_steps - 1 micro-steps
        since the last one; always False with managed_gradient_accumulation false (DeepSpeed's
        is True only inside step(), which is always the boundary there). zinc_engine_at_boundary,
        the value zinc_step acts on."""
        return bool(lib.zinc_engine_at_boundary(self._e))

    def managed_gradient_accumulation(self):
        """The config's managed_gradient_accumulation (DeepSpeed 0.19.8; default True)."""
        return self._managed

    def zero_gather_16bit_weights_on_model_save(self):
        """The config's zero_optimization.stage3_gather_16bit_weights_on_model_save (or an
        alias), as zinc resolved it."""
        return bool(lib.zinc_engine_gather_16bit_on_save(self._e))

    # DeepSpeed's config accessors, from the resolved config (scripts test fp16_enabled() to
    # cast their inputs, say).

    def fp16_enabled(self):
        return bool(self._resolved["fp16"]["enabled"])

    def bfloat16_enabled(self):
        return bool(self._resolved["bf16"]["enabled"])

    def amp_enabled(self):
        """Always False: zinc refuses the config's "amp" section."""
        return False

    def gradient_clipping(self):
        return float(self._resolved["gradient_clipping"])

    def steps_per_print(self):
        return int(self._resolved["steps_per_print"])

    def wall_clock_breakdown(self):
        return bool(self._resolved["wall_clock_breakdown"])

    def loss_scale(self):
        """The config's fp16.loss_scale (0: dynamic), as DeepSpeed's; the scale in use is
        engine.optimizer.cur_scale."""
        return float(self._resolved["fp16"]["loss_scale"])

    def dynamic_loss_scale(self):
        return self.loss_scale() == 0

    def zero_offload_optimizer(self):
        """The resolved zero_optimization.offload_optimizer section (a dict) when it offloads,
        else None."""
        sec = self._resolved["zero_optimization"]["offload_optimizer"]
        return dict(sec) if sec.get("device", "none") != "none" else None

    def zero_offload_param(self):
        """The resolved zero_optimization.offload_param section when it offloads, else None."""
        sec = self._resolved["zero_optimization"]["offload_param"]
        return dict(sec) if sec.get("device", "none") != "none" else None

    def zero_cpu_offload(self):
        sec = self.zero_offload_optimizer()
        return sec is not None and sec["device"] == "cpu"

    def zero_optimization(self):
        return self._stage > 0

    def zero_optimization_partition_gradients(self):
        return self._stage >= 2

    def zero_optimization_partition_weights(self):
        return self._stage >= 3

    def optimizer_name(self):
        """A client optimizer's class name, else the config's optimizer type (lower case, as
        DeepSpeed's for its own optimizers)."""
        if self._opt._client is not None:
            return type(self._opt._client).__name__
        return str(self._cfg["optimizer"]["type"]).lower() if "optimizer" in self._cfg else None

    def optimizer_params(self):
        """The config's optimizer params as written (None with a client optimizer, which
        DeepSpeed does not allow beside the config's)."""
        if self._opt._client is not None or "optimizer" not in self._cfg:
            return None
        return self._cfg["optimizer"].get("params")

    def scheduler_name(self):
        return (self._cfg.get("scheduler") or {}).get("type")

    def scheduler_params(self):
        return (self._cfg.get("scheduler") or {}).get("params")

    def get_batch_info(self):
        """(train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps)."""
        return self.train_batch_size(), self._micro, self._ga

    def postscale_gradients(self):
        return not self._resolved["prescale_gradients"]

    def gradient_predivide_factor(self):
        return float(self._resolved["gradient_predivide_factor"])

    def get_mom(self):
        """Adam's betas of each of the optimizer's param groups, as DeepSpeed's."""
        return [tuple(_scalar(b) for b in g["betas"]) for g in self._opt.param_groups]

    @property
    def dp_world_size(self):
        return self.world_size

    def dataloader_drop_last(self):
        return bool(self._resolved.get("dataloader_drop_last", False))

    def get_data_parallel_rank(self):
        """zinc is data parallel only: the data-parallel rank is the global rank."""
        return self.global_rank

    def get_model_parallel_rank(self):
        """Always 0: zinc has no tensor or model parallelism (a group of one)."""
        return 0

    get_tensor_parallel_rank = get_model_parallel_rank

    def communication_data_type(self):
        """The dtype gradients are reduced in: the working dtype (zinc refuses any other
        communication_data_type; DeepSpeed's default when it is not set)."""
        return _TORCH_DTYPE[self._code]

    def get_data_types(self):
        """(model dtype, gradient accumulation dtype), as DeepSpeed's: zinc accepts
        data_types.grad_accum_dtype only equal to the working dtype, so both are that one."""
        return _TORCH_DTYPE[self._code], _TORCH_DTYPE[self._code]

    def fp16_auto_cast(self):
        """Always False: zinc refuses fp16.auto_cast true (it would change the model's math)."""
        return False

    def initial_dynamic_scale(self):
        """2^fp16.initial_scale_power, the dynamic loss scale's start (with fp16 off too, as
        DeepSpeed's)."""
        return 2 ** int(self._resolved["fp16"]["initial_scale_power"])

    def dynamic_loss_scale_args(self):
        """The dynamic loss scaler's settings under DeepSpeed's key names."""
        fp16 = self._resolved["fp16"]
        return {"init_scale": self.initial_dynamic_scale(),
                "scale_window": int(fp16["loss_scale_window"]),
                "delayed_shift": int(fp16["hysteresis"]),
                "consecutive_hysteresis": bool(fp16["consecutive_hysteresis"]),
                "min_scale": fp16["min_loss_scale"]}

    def checkpoint_tag_validation_enabled(self):
        return self._resolved["checkpoint"]["tag_validation"].lower() != "ignore"

    def checkpoint_tag_validation_fail(self):
        return self._resolved["checkpoint"]["tag_validation"].lower() == "fail"

    def load_universal_checkpoint(self):
        """The config's checkpoint.load_universal. Every zinc checkpoint loads at any world size
        and stage either way."""
        return bool(self._resolved["checkpoint"]["load_universal"])

    def use_node_local_storage(self):
        return bool(self._resolved["checkpoint"]["use_node_local_storage"])

    def zero_use_cpu_optimizer(self):
        """True when the config's offload_optimizer.device is cpu or nvme, as DeepSpeed's (the
        value as configured: docs/config.md says where zinc honours it)."""
        return self.zero_offload_optimizer() is not None

    def zero_load_from_fp32_weights(self):
        """Always True: zinc refuses load_from_fp32_weights false; loads restore the fp32
        master weights."""
        return True

    def is_compiled(self):
        """Always False: zinc does not offer compile()."""
        return False

    def destroy(self):
        """DeepSpeed's engine.destroy(): releases the engine, as close()."""
        self.close()

    # ---- data -----------------------------------------------------------------------------

    def deepspeed_io(self, dataset, batch_size=None, route="train", pin_memory=True,
                     data_sampler=None, collate_fn=None, num_local_io_workers=None):
        """DeepSpeed's deepspeed_io: a loader giving this rank its part of a map-style dataset,
        in batches of train_micro_batch_size_per_gpu (or batch_size), through a
        DistributedSampler over the ranks (shuffled, seed 0, for "train" and "encode"; in order
        for "eval" and "predict") unless data_sampler is given; the config's
        dataloader_drop_last; two worker processes unless num_local_io_workers; memory pinned
        only on a CUDA engine. dataloader.py says more."""
        return _dataloader.build(
            dataset, batch_size=self._micro if batch_size is None else batch_size,
            rank=self.global_rank, world_size=self.dp_world_size, route=route,
            pin_memory=bool(pin_memory) and self._cuda, data_sampler=data_sampler,
            collate_fn=self.collate_fn if collate_fn is None else collate_fn,
            num_local_io_workers=num_local_io_workers, drop_last=self.dataloader_drop_last())

    def zero_grad(self):
        """DeepSpeed's engine.zero_grad: sets every model parameter's `.grad` to None. zinc's own
        gradient buffers are zeroed by engine.step() at each optimizer step."""
        for p in self.module.parameters():
            p.grad = None

    def _zinc_values(self):
        """Every zinc parameter's full value, {param id: host tensor of the working dtype}: the
        fp32 master gathered by zinc_param_get, cast. Collective: every rank asks for the same
        parameters in the same (registration) order."""
        return {pid: self._zinc_value(pid) for _, params in self._groups for pid, _, _ in params}

    def _zinc_value(self, pid):
        """One parameter's full value (zinc_param_get: the fp32 master, cast to the working
        dtype), a host tensor of its shape. Collective."""
        shape = self._shapes[pid]
        buf = torch.empty(_numel(shape), dtype=torch.float32)
        self._call(lib.zinc_param_get(self._e, pid, ctypes.c_void_p(buf.data_ptr())))
        return buf.view(shape).to(_TORCH_DTYPE[self._code])

    def _full_state_dict(self, destination, prefix, exclude_frozen, on_host):
        """The model's state_dict with zinc's parameters' full values in (see module_state_dict).
        on_host: every tensor on the CPU (a file's content), else on the model's device.
        Collective."""
        dtype = _TORCH_DTYPE[self._code]
        values = self._zinc_values()
        # State-dict key (before `prefix`) of every parameter, under each module that holds it:
        # a tied parameter has one key per holder, as in module.state_dict().
        holder = {}
        for mname, mod in self.module.named_modules(remove_duplicate=False):
            for n, p in mod._parameters.items():
                if p is not None:
                    holder[f"{mname}.{n}" if mname else n] = p
        before = set(destination) if destination is not None else set()
        sd = self.module.state_dict(destination=destination, prefix=prefix)
        added = set(sd).difference(before)
        moved = {}    # id(original) -> its converted tensor: a tied tensor stays one tensor
        device = torch.device("cpu") if on_host else self._device

        def convert(t, cast):
            if id(t) not in moved:
                u = t.detach()
                moved[id(t)] = u.to(device, dtype if cast and u.is_floating_point() else u.dtype)
            return moved[id(t)]

        for key, p in holder.items():
            k = prefix + key
            if k not in sd:            # a module's own _save_to_state_dict left it out
                continue
            if id(p) in self._pid_of:
                sd[k] = values[self._pid_of[id(p)]]
                if not on_host:
                    sd[k] = convert(sd[k], False)
            elif exclude_frozen and not p.requires_grad:
                del sd[k]
            else:
                # Not trained by zinc (frozen, or left out of model_parameters): the module's own
                # value in the working dtype, as in DeepSpeed, which casts every floating-point
                # parameter of the module to it.
                sd[k] = convert(p, True)
        if on_host:                 # buffers (and extra state): as the module holds them
            for k in added.difference(prefix + key for key in holder):
                if isinstance(sd[k], torch.Tensor):
                    sd[k] = convert(sd[k], False)
        return sd

    def module_state_dict(self, destination=None, prefix="", keep_vars=False,
                          exclude_frozen_parameters=False):
        """DeepSpeed's module_state_dict: the model's state_dict() — its keys (every name of a
        tied parameter), its persistent buffers, frozen parameters (left out with
        exclude_frozen_parameters=True) — on the model's device. zinc's parameters hold their
        full value at every stage (the fp32 master gathered from the shards, cast to the working
        dtype; DeepSpeed's at stage 3 are empty placeholders); parameters zinc does not train
        are the module's own, cast to the working dtype; buffers are as the module holds them.
        `destination` (a dict to fill) and `prefix` (before every key) as in torch. Collective:
        every rank must call it."""
        if keep_vars:
            raise NotImplementedError("zinc: module_state_dict(keep_vars=True): zinc's parameter "
                                      "values are gathered copies, not the module's Parameters")
        return self._full_state_dict(destination, prefix, exclude_frozen_parameters, False)

    # ---- checkpoints ----------------------------------------------------------------------

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """A zinc checkpoint in save_dir/tag (default global_step<N>); client_state (a dict, as
        DeepSpeed's: anything torch.save can pickle) is saved with it and load_checkpoint
        returns it equal. Collective.
        It holds what zinc trains (the parameters, Adam's state, the step and loss scale) and,
        as DeepSpeed's module state does, the rest of the module's state_dict as rank 0 holds
        it: the persistent buffers and the parameters zinc does not train (frozen ones left
        out with exclude_frozen_parameters=True), torch.save bytes in the client blob after
        its JSON."""
        if not save_latest:
            raise NotImplementedError("zinc: save_checkpoint(save_latest=False): zinc always "
                                      "points `latest` at the newest complete tag")
        tag = tag if tag is not None else f"global_step{self._steps}"
        extra, untrained = self._persistent_buffers(), self._untrained_params()
        extra.update({n: p for n, p in untrained.items()
                      if p.requires_grad or not exclude_frozen_parameters})
        blob = json.dumps(dict(_client_record(client_state or {}), global_steps=self._steps,
                               skipped_steps=self._skipped, global_samples=self._samples,
                               lr=self._lr, **self._lr_state(),
                               **self._layout_record(extra))).encode()
        # Also when it is empty (all excluded): the load then names what it did not find.
        if extra or untrained:      # JSON text holds no NUL: the loader splits there
            raw = io.BytesIO()
            torch.save({k: t.detach().cpu() for k, t in extra.items()}, raw)
            blob += b"\0" + raw.getvalue()
        buf = ctypes.create_string_buffer(blob, len(blob))
        opts = SaveOptions(ctypes.cast(buf, ctypes.c_void_p), len(blob), 0, -1)
        os.makedirs(save_dir, exist_ok=True)
        self._call(lib.zinc_ckpt_save(self._e, os.fsencode(save_dir), str(tag).encode(),
                                      ctypes.byref(opts)))
        self._call(lib.zinc_ckpt_wait(self._e))
        return True

    def _layout_record(self, extra):
        """What a reader without the model needs to rebuild its state_dict from a checkpoint
        (zinc.utils.zero_to_fp32): the other names of a tied tensor (state_dict has one key per
        holder, the checkpoint one tensor), which saved entries are frozen parameters, and the
        0-dim parameters (zinc stores them with shape (1,))."""
        tied, first = {}, {}
        for n, t in self.module.state_dict(keep_vars=True).items():
            if id(t) in first:
                tied[n] = first[id(t)]
            else:
                first[id(t)] = n
        frozen = sorted(n for n, p in self._untrained_params().items()
                        if n in extra and not p.requires_grad)
        scalars = sorted(n for n, (pid, _) in self._trained_params().items()
                         if len(self._shapes[pid]) == 0)
        return {"tied": tied, "frozen_params": frozen, "scalar_params": scalars}

    def _untrained_params(self):
        """The module's parameters zinc does not train (frozen, or left out of
        model_parameters), by name; a tied one once."""
        return {n: p for n, p in self.module.named_parameters() if id(p) not in self._group_of}

    def _persistent_buffers(self):
        """The module's buffers its state_dict holds (not the non-persistent ones), by name."""
        saved_by_torch = set(self.module.state_dict(keep_vars=True))
        return {n: b for n, b in self.module.named_buffers() if n in saved_by_torch}

    def _trained_params(self):
        """zinc's parameters by name: (zinc parameter id, the Parameter)."""
        return {name: (pid, p) for _, params in self._groups for pid, name, p in params}

    def _restore_module_state(self, raw, strict):
        """The buffers and untrained parameters a checkpoint saved (rank 0's) copied into this
        module's. Strict (DeepSpeed's default module load), the saved buffers must be the
        model's and every saved entry one of the model's; not strict, the model's buffers the
        checkpoint lacks keep their values and the entries the model lacks are left. A shape
        that differs raises either way (as torch's load_state_dict). Returns the names of the
        untrained parameters it set, and the saved values of the parameters zinc trains now
        but that were frozen at the save (for _set_trained)."""
        saved = torch.load(io.BytesIO(raw))
        buffers, untrained = self._persistent_buffers(), self._untrained_params()
        trained = self._trained_params()
        unknown = sorted(set(saved) - set(buffers) - set(untrained) - set(trained))
        missing = sorted(set(buffers) - set(saved))
        if strict and (unknown or missing):
            raise ValueError(f"zinc: load_checkpoint: the checkpoint's module entries {unknown} "
                             f"are not buffers or untrained parameters of the model, the "
                             f"model's buffers {missing} are not in the checkpoint "
                             f"(load_module_strict=False leaves both)")
        mine = {n: t for n, t in buffers.items() if n in saved}
        mine.update({n: p for n, p in untrained.items() if n in saved})
        for n, t in mine.items():
            if saved[n].shape != t.shape:
                raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(saved[n].shape)} in "
                                 f"the checkpoint, {tuple(t.shape)} in the model")
        with torch.no_grad():
            for n, t in mine.items():
                t.copy_(saved[n])
        return {n for n in untrained if n in saved}, {n: saved[n] for n in saved if n in trained}

    def _read_saved(self, load_dir, tag, wanted):
        """zinc_ckpt_read_tensors, one read for all of `wanted`, a list of (name, shape, out):
        whether the checkpoint holds each tensor, its fp32 master read into out (a float32 CPU
        tensor of that shape) where out is not None."""
        return read_tensors(self._e, load_dir, tag, wanted)

    def _set_trained(self, load_dir, tag, values, missing, strict):
        """A weights-only load (zinc_ckpt_load with missing_ok) left `missing` of zinc's
        parameters as they were: those frozen when the checkpoint was saved (unfrozen now, as
        when a fine-tune trains more of the model than the run it resumes from). Their saved
        values (`values`, the module state's 16-bit weights) become zinc's, fp32 master
        included, as DeepSpeed's module load and refresh of the fp32 weights do. One the
        checkpoint holds nowhere raises ValueError naming it when strict; not strict, it keeps
        the engine's value (DeepSpeed's non-strict module load)."""
        trained = self._trained_params()
        for n, v in values.items():
            pid, _ = trained[n]
            if v.shape != self._shapes[pid]:     # the Parameter is empty between steps at stage 3
                raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(v.shape)} in the "
                                 f"checkpoint, {tuple(self._shapes[pid])} in the model")
            src = v.to("cpu", torch.float32).contiguous()
            self._call(lib.zinc_param_set(self._e, pid, ctypes.c_void_p(src.data_ptr())))
        if strict and missing > len(values):
            probe = [(n, self._shapes[pid], None) for n, (pid, _) in trained.items()
                     if n not in values]
            lost = [w[0] for w, f in zip(probe, self._read_saved(load_dir, tag, probe)) if not f]
            raise ValueError(f"zinc: load_checkpoint: {os.path.join(load_dir, tag)} holds no "
                             f"value for the parameters {lost} (neither trained nor saved as "
                             f"frozen): a checkpoint of another model? "
                             f"(load_module_strict=False keeps the engine's values)")
        self._zinc_then_torch()

    def _restore_untrained(self, load_dir, tag, done, extra, strict):
        """The untrained parameters the module state did not set (`done`): one that zinc
        trained when the checkpoint was saved (frozen since, as when fine-tuning a pretrained
        model with its body frozen) is a tensor of the checkpoint, read in full
        (zinc_ckpt_read_tensors, all in one read: its fp32 master, cast to the parameter's
        dtype, as DeepSpeed's module state holds the 16-bit weight). As DeepSpeed's module
        load, strict, one the checkpoint holds in neither place (saved with
        exclude_frozen_parameters=True) raises ValueError naming it, and so do the
        checkpoint's `extra` tensors (those zinc does not register) that are none of the
        model's; not strict, the first keeps the model's value and the others are left. The
        checks come before any of these parameters is set, and a read buffer is allocated only
        for a tensor the checkpoint holds (a PEFT model's frozen base, saved excluded, can be
        most of the model)."""
        params = self._untrained_params()
        names = [n for n in params if n not in done]
        found = self._read_saved(load_dir, tag, [(n, params[n].shape, None) for n in names])
        path = os.path.join(load_dir, tag)
        kept = [n for n, f in zip(names, found) if not f]
        if kept and strict:
            more = f" and {len(kept) - 4} more" if len(kept) > 4 else ""
            raise ValueError(f"zinc: load_checkpoint: {path} holds no value for the parameters "
                             f"zinc does not train {', '.join(kept[:4])}{more} (saved with "
                             f"exclude_frozen_parameters=True?): load_module_strict=False "
                             f"keeps the model's values")
        unknown = extra - sum(found)
        if unknown > 0 and strict:
            raise ValueError(f"zinc: load_checkpoint: {path} holds {unknown} tensors that are "
                             f"not parameters of the model (zinc ckpt inspect lists them): a "
                             f"checkpoint of another model? load_module_strict=False leaves "
                             f"them")
        wanted = [(n, params[n].shape, torch.empty(params[n].shape, dtype=torch.float32))
                  for n, f in zip(names, found) if f]
        self._read_saved(load_dir, tag, wanted)
        with torch.no_grad():
            for n, _, out in wanted:
                params[n].copy_(out.to(params[n].dtype))

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        """Loads load_dir/tag (default: the newest valid tag), at any world size and stage.
        Returns (path, client_state). Collective. DeepSpeed's arguments, with its meaning:
        - the defaults load everything: weights, Adam state, the LR schedule's position, the
          step count and the loss scaler;
        - load_module_only=True loads the weights only (warm start): the fp32 master from the
          checkpoint; the Adam state, the schedule's position, the counters and the loss scaler
          stay as they are (fresh in a new engine).
        zinc keeps the schedule's position and the Adam state in one step count (bias
        correction and LR both follow it), so DeepSpeed's in-between forms, fresh Adam state
        with the schedule kept (load_optimizer_states=False) or the schedule restarted with the
        Adam state kept (load_lr_scheduler_states=False), raise NotImplementedError rather than
        load something else; so does custom_load_fn.
        load_module_strict (DeepSpeed's strict module load): True, a checkpoint must hold the
        model's parameters and buffers, and nothing else, or ValueError names what differs;
        False, what the checkpoint lacks keeps its value (a frozen base saved with
        exclude_frozen_parameters=True, as Hugging Face's Trainer resumes a PEFT model) and
        what the model lacks is left. Either way the full load needs Adam state for every
        parameter zinc trains, and a shape that differs raises. A load that raises may have
        set some of the weights already (as torch's load_state_dict): load again."""
        if not load_module_only:
            if not load_optimizer_states:
                raise NotImplementedError(
                    "zinc: load_checkpoint(load_optimizer_states=False): DeepSpeed keeps the LR "
                    "schedule's position with fresh Adam state; zinc's step count drives both, so "
                    "it loads both or neither: load_module_only=True for the weights alone")
            if not load_lr_scheduler_states:
                raise NotImplementedError(
                    "zinc: load_checkpoint(load_lr_scheduler_states=False): zinc's LR schedule "
                    "follows the step count it restores with the Adam state; "
                    "load_module_only=True restarts both")
        if custom_load_fn is not None:
            raise NotImplementedError("zinc: load_checkpoint(custom_load_fn=...)")
        self._no_context("load_checkpoint()")
        weights_only, strict = bool(load_module_only), bool(load_module_strict)
        cap = _BLOB_CAP
        while True:
            buf = ctypes.create_string_buffer(cap)
            # missing_ok: a weights-only load takes what was frozen at the save from the
            # module state (_set_trained). keep_optimizer: DeepSpeed's load_module_only
            # leaves the optimizer state and the counters as they are. caller_reads_extra:
            # _restore_untrained reads the tensors zinc does not register, and says what it
            # leaves.
            opts = LoadOptions(weights_only=int(weights_only),
                               client_blob=ctypes.cast(buf, ctypes.c_void_p),
                               client_blob_cap=cap, missing_ok=int(weights_only),
                               keep_optimizer=int(weights_only), caller_reads_extra=1)
            # torch -> zinc (WAR): the load overwrites weights torch's queued kernels may read.
            self._torch_then_zinc()
            status = lib.zinc_ckpt_load(self._e, os.fsencode(load_dir),
                                        None if tag is None else str(tag).encode(),
                                        ctypes.byref(opts))
            if status != 0 and opts.client_blob_bytes > cap:
                cap = opts.client_blob_bytes       # big buffers: once more, with the room
                continue
            self._call(status)
            break
        # zinc -> torch (RAW): the loaded weights are in place before torch reads them.
        self._zinc_then_torch()
        client, done, frozen_then = {}, set(), {}
        if opts.client_blob_bytes:
            text, _, module_state = buf.raw[:opts.client_blob_bytes].partition(b"\0")
            if module_state:
                done, frozen_then = self._restore_module_state(module_state, strict)
            saved = json.loads(text.decode())
            client = _client_state_of(saved)
            if not weights_only:
                self._steps = int(saved.get("global_steps", 0))
                # As DeepSpeed's load: global_samples defaults to steps x train_batch_size.
                self._skipped = int(saved.get("skipped_steps", 0))
                self._samples = int(saved.get("global_samples",
                                              self._steps * self.train_batch_size()))
                self._lr = float(saved.get("lr", self._lr))
                self._load_lr_state(saved)
        if opts.missing:
            self._set_trained(load_dir, opts.loaded_tag.decode(), frozen_then, opts.missing,
                              strict)
        self._restore_untrained(load_dir, opts.loaded_tag.decode(), done, opts.extra, strict)
        return os.path.join(load_dir, opts.loaded_tag.decode()), client

    def _lr_state(self):
        """What the checkpoint keeps of the optimizer values carried outside zinc: each group's
        betas, eps and weight decay, whether the groups drive the lr and their lr, and a client
        scheduler's state_dict (torch.save, base64)."""
        out = {"group_adam": self._opt._adam_state()}
        if self._opt._taken:
            out["group_lr"] = self._opt._lrs()
        if self._client_sched is not None and hasattr(self._client_sched, "state_dict"):
            raw = io.BytesIO()
            torch.save(self._client_sched.state_dict(), raw)
            out["lr_scheduler"] = base64.b64encode(raw.getvalue()).decode()
        return out

    def _load_lr_state(self, saved):
        if self._client_sched is not None and "lr_scheduler" in saved:
            state = torch.load(io.BytesIO(base64.b64decode(saved["lr_scheduler"])))
            self._client_sched.load_state_dict(state)
        if "group_lr" in saved:
            self._opt._restore(saved["group_lr"])
        else:                   # the schedule runs: the groups show the next step's lr
            self._opt._after_step()
        if "group_adam" in saved:
            self._opt._restore_adam(saved["group_adam"])

    def _zero3_consolidated_16bit_state_dict(self, exclude_frozen_parameters=False):
        """DeepSpeed's (called by HF accelerate's get_state_dict at stage 3): the full 16-bit
        state dict on the CPU on rank 0, None on the other ranks. Stage 3 only (ValueError
        otherwise, as DeepSpeed). Collective."""
        if self._stage != 3:
            raise ValueError("zinc: _zero3_consolidated_16bit_state_dict requires ZeRO stage 3")
        sd = self._full_state_dict(None, "", exclude_frozen_parameters, True)
        return sd if self.global_rank == 0 else None

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """DeepSpeed's save_16bit_model: the model's full state dict in the working dtype (what
        module_state_dict returns, every tensor on the CPU) written by rank 0 with torch.save to
        save_dir/save_filename, through a temporary file in save_dir renamed over it (a crash
        leaves the old file or none, never half a file). At stage 3 only when the config sets
        zero_optimization.stage3_gather_16bit_weights_on_model_save: without it, as DeepSpeed,
        nothing is saved and it returns False (with a ZincConfigWarning on rank 0). Returns True
        when saved. Collective: every rank must call it; a failure to write on rank 0 raises on
        every rank."""
        path = os.path.join(save_dir, save_filename)
        if self._stage == 3 and not self.zero_gather_16bit_weights_on_model_save():
            if self.global_rank == 0:
                warnings.warn(f"zinc: save_16bit_model did not save {path}: at stage 3 it needs "
                              "zero_optimization.stage3_gather_16bit_weights_on_model_save: "
                              "true in the config (as DeepSpeed)", ZincConfigWarning,
                              stacklevel=2)
            return False
        sd = self._full_state_dict(None, "", exclude_frozen_parameters, True)
        failed = None
        if self.global_rank == 0:
            tmp = os.path.join(save_dir, f".{save_filename}.tmp{os.getpid()}")
            try:
                os.makedirs(save_dir, exist_ok=True)
                with open(tmp, "wb") as f:
                    torch.save(sd, f)
                    f.flush()
                    os.fsync(f.fileno())   # the bytes are on disk before the name points at them
                os.replace(tmp, path)
            except Exception as ex:    # noqa: BLE001 — reported below, on every rank
                failed = ex
                try:
                    os.remove(tmp)
                except OSError:
                    pass
        # Every rank learns whether rank 0 wrote the file (and waits for it).
        if self._mean_over_ranks([1.0 if failed else 0.0])[0] > 0:
            if failed is not None:
                raise failed
            raise OSError(f"zinc: save_16bit_model: rank 0 could not write {path} (its "
                          "exception says why)")
        return True

    def save_fp16_model(self, save_dir, save_filename="pytorch_model.bin"):
        """DeepSpeed's older name of save_16bit_model."""
        return self.save_16bit_model(save_dir, save_filename)


# DeepSpeed's accessors of zero_optimization values: engine.<name>() is the key's value as
# zinc resolved it (DeepSpeed's default where the config is silent, overlap_comm's by stage).
_ZERO_ACCESSORS = {
    "zero_reduce_bucket_size": "reduce_bucket_size",
    "zero_allgather_bucket_size": "allgather_bucket_size",
    "zero_overlap_comm": "overlap_comm",
    "zero_contiguous_gradients": "contiguous_gradients",
    "zero_reduce_scatter": "reduce_scatter",
    "zero_allgather_partitions": "allgather_partitions",
    "zero_round_robin_gradients": "round_robin_gradients",
    "zero_sub_group_size": "sub_group_size",
    "zero_max_live_parameters": "stage3_max_live_parameters",
    "zero_max_reuse_distance": "stage3_max_reuse_distance",
    "zero_prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "zero_param_persistence_threshold": "stage3_param_persistence_threshold",
}


def _zero_accessor(key):
    def accessor(self):
        return self._resolved["zero_optimization"][key]
    accessor.__doc__ = f"The resolved zero_optimization.{key} (DeepSpeed's accessor)."
    return accessor


for _name, _key in _ZERO_ACCESSORS.items():
    setattr(Engine, _name, _zero_accessor(_key))

# id(parameter) -> (weak references to it and to the engine that trains it, its zinc parameter
# id), for zinc.utils' safe_get_full_fp32_param and friends, which take a parameter alone as
# DeepSpeed's. Keyed by id: a WeakKeyDictionary would compare tensors with ==.
_TRAINED_BY = {}


def _trains(param, engine, pid):
    key = id(param)
    _TRAINED_BY[key] = (weakref.ref(param, lambda _: _TRAINED_BY.pop(key, None)),
                        weakref.ref(engine), pid)


def trained_by(param):
    """(engine, zinc parameter id) of a parameter an engine trains (not closed), else None."""
    entry = _TRAINED_BY.get(id(param))
    if entry is None or entry[0]() is not param:
        return None
    engine = entry[1]()
    if engine is None or not getattr(engine, "_e", None):      # gone, or closed
        return None
    return engine, entry[2]


# DeepSpeed engine methods zinc does not offer, and why. Each is a method that raises
# NotImplementedError naming it: without it the name would reach the model (__getattr__), or
# torch's Module.compile, and do something else or fail with an AttributeError.
_NOT_OFFERED = {
    "empty_partition_cache": "zinc's stage 3 keeps the groups below "
                             "stage3_param_persistence_threshold gathered and has no call to "
                             "release them",
    "offload_states": "zinc places state in host memory only by the config's "
                      "zero_optimization.offload_optimizer / offload_param",
    "reload_states": "zinc places state in host memory only by the config's "
                     "zero_optimization.offload_optimizer / offload_param",
    "compile": "zinc's engine (its hooks and autograd functions) is not compiled",
    "load_module_state_dict": "load the weights with load_checkpoint(load_module_only=True)",
    "allreduce_gradients": "engine.step() reduces the gradients at the accumulation boundary",
    "get_sequence_parallel_group": "zinc has no sequence parallelism",
    "set_data_post_process_func": "zinc has no data efficiency pipeline",
    "set_custom_curriculum_learning_schedule": "zinc has no curriculum learning",
}


def _not_offered(name, reason):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"zinc: engine.{name}() is not offered: {reason}")
    method.__name__ = name
    method.__doc__ = f"Not offered (raises NotImplementedError): {reason}."
    return method


for _name, _reason in _NOT_OFFERED.items():
    setattr(Engine, _name, _not_offered(_name, _reason))


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
    read into the config's optimizer section), the scheduler from the config; zinc runs both
    inside engine.step().
    dist_init_required=False leaves torch.distributed alone (init_distributed); zinc's ranks
    come from the launcher. What zinc does not offer raises NotImplementedError naming it."""
    if model is None:
        raise ValueError("zinc.initialize: model is required")
    if lr_scheduler is not None and optimizer is None:
        raise NotImplementedError("zinc.initialize: a client lr_scheduler needs a client torch "
                                  "optimizer (optimizer=torch.optim.AdamW(...)) whose groups it "
                                  "sets, as in DeepSpeed; or use the config's \"scheduler\" "
                                  "section (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
                                  "LRRangeTest)")
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
    if optimizer is not None:
        # As DeepSpeed: the client optimizer replaces the config's, its param groups are the
        # parameters trained.
        client, section, model_parameters = _client_optimizer(optimizer, model, model_parameters)
        cfg = dict(config_dict(cfg), optimizer=section)
    engine = Engine(model, model_parameters, cfg, _client=client,
                    _client_scheduler=lr_scheduler is not None)
    engine.collate_fn = collate_fn
    if training_data is not None:
        engine.training_dataloader = engine.deepspeed_io(training_data)
    loader = engine.training_dataloader
    if lr_scheduler is not None:
        if not hasattr(lr_scheduler, "step") and callable(lr_scheduler):
            lr_scheduler = lr_scheduler(client)    # DeepSpeed's callable form
        engine._client_sched = lr_scheduler
        return engine, engine._opt, loader, lr_scheduler
    return engine, engine._opt, loader, _Scheduler(engine)
