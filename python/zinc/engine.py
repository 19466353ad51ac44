"""engine.py — zinc.initialize and the Engine: a torch model's parameters handed to libzinc.

How the model and zinc share memory:
- Every module that owns parameters becomes one zinc group (registered in module order), every
  parameter one zinc parameter of the config's working dtype (fp32, or fp16/bf16 when enabled).
- After zinc_finalize the parameters' values are set from the model (zinc_param_set), and each
  `param.data` becomes a view of zinc's working copy (zinc_param_data): no copy per step — the
  step writes the new weights where the model reads them.
- engine.backward(loss) scales the loss by zinc_loss_multiplier (loss scale / accumulation steps,
  as DeepSpeed does), runs autograd into ordinary `.grad` tensors, then hands each group over —
  last group first, as a backward pass finishes them — by adding its gradients into zinc's
  gradient views and calling zinc_grads_ready (at stages 2-3 that reduce-scatters the group).
- engine.step() is zinc_step: at the accumulation boundary reduce, clip, Adam/AdamW, gather.

Stage 3: zinc holds only the rank's shard between steps; a forward pre-hook per module gathers
its group into tensors torch owns (what autograd saves for backward stays valid) and releases it
in zinc at once. So parameters are sharded between steps, but a step's peak holds the whole
model's parameters, as at stage 2 (re-gathering in backward, DeepSpeed's way, is not done yet).
Not yet either: overlap of the reduce-scatter with backward (the hand-over runs after autograd),
CUDA. What is absent raises NotImplementedError rather than doing something else.
"""
import atexit
import ctypes
import json
import os
import weakref

import torch

from ._lib import (ZINC_ERR_MISMATCH, EngineOptions, LoadOptions, SaveOptions, StepInfo, ZincError,
                   check, lib)

_TORCH_DTYPE = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
_CTYPE = {0: ctypes.c_float, 1: ctypes.c_uint16, 2: ctypes.c_uint16}
_BLOB_CAP = 64 << 20

_world = None
_engines = weakref.WeakSet()   # live engines: destroyed before the world they use


def _destroy_world():
    global _world
    for e in list(_engines):
        e.close()
    if _world is not None:
        lib.zinc_world_destroy(_world)
        _world = None


def init_distributed():
    """The world the launcher set up (mpirun: MPI ranks as processes; torchrun/srun environment;
    none: a world of one). Called by initialize() when the script did not."""
    global _world
    if _world is None:
        w = ctypes.c_void_p()
        check(lib.zinc_world_create_launched(ctypes.byref(w)))
        _world = w
        atexit.register(_destroy_world)
    return _world


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def world_size():
    """Ranks in the launcher's world (1 without a launcher)."""
    return lib.zinc_world_size(init_distributed())


def _view(ptr, numel, code, shape):
    """A torch tensor over zinc's memory at ptr (numel elements of dtype code), shaped."""
    buf = (_CTYPE[code] * numel).from_address(ptr)
    return torch.frombuffer(buf, dtype=_TORCH_DTYPE[code]).view(shape)


def _batch_rule(cfg, world):
    """DeepSpeed's rule for micro batch and accumulation from the keys given."""
    tbs = cfg.get("train_batch_size")
    mb = cfg.get("train_micro_batch_size_per_gpu")
    ga = cfg.get("gradient_accumulation_steps")
    if mb is not None and ga is None:
        ga = tbs // (mb * world) if tbs is not None else 1
    if mb is None and ga is not None and tbs is not None:
        mb = tbs // (ga * world)
    if mb is None and ga is None and tbs is not None:
        mb, ga = tbs // world, 1
    return mb, ga


class _Optimizer:
    """What initialize returns as the optimizer: zinc runs Adam/AdamW itself in engine.step()."""

    def __init__(self, engine):
        self._engine = engine

    def zero_grad(self, set_to_none=True):
        """Nothing to do: zinc zeroes its gradient buffers at every optimizer step."""

    def step(self, closure=None):
        raise NotImplementedError("zinc: call engine.step(); the optimizer runs inside zinc's step")

    @property
    def param_groups(self):
        return [{"lr": self._engine.get_lr()[0], "params": list(self._engine.module.parameters())}]


class _Scheduler:
    """The config's scheduler runs inside zinc's step; this only reports it."""

    def __init__(self, engine):
        self._engine = engine

    def get_last_lr(self):
        return self._engine.get_lr()

    def step(self, *args, **kwargs):
        """Nothing to do: engine.step() advances the schedule, as in DeepSpeed."""


class Engine(torch.nn.Module):
    """One rank's training engine over a torch model (DeepSpeed's DeepSpeedEngine shape)."""

    def __init__(self, model, model_parameters=None, config=None):
        super().__init__()
        self.module = model
        self._e = ctypes.c_void_p()
        if isinstance(config, dict):
            self._cfg = dict(config)
            text, path = json.dumps(config).encode(), None
        elif isinstance(config, (str, os.PathLike)):
            with open(config) as f:
                self._cfg = json.load(f)
            text, path = None, os.fsencode(config)
        else:
            raise TypeError("zinc.initialize: config must be a dict or the path of a JSON file")
        world = init_distributed()
        opts = EngineOptions(config_path=path, config_json=text, world=world,
                             rank=max(0, lib.zinc_world_rank(world)), device=b"cpu", threads=0)
        check(lib.zinc_engine_create(ctypes.byref(opts), ctypes.byref(self._e)))
        _engines.add(self)
        e = self._e
        self._stage = lib.zinc_engine_stage(e)
        self._code = lib.zinc_engine_dtype(e)
        wanted = None if model_parameters is None else {id(p) for p in model_parameters}
        self._groups = []          # [(group id, [(param id, name, tensor)])]
        modules = []               # the module of each group, in the same order
        for mname, mod in model.named_modules():
            own = [(n, p) for n, p in mod.named_parameters(recurse=False)
                   if p.requires_grad and (wanted is None or id(p) in wanted)]
            if not own:
                continue
            g = ctypes.c_int()
            self._call(lib.zinc_group_add(e, (mname or "root").encode(), ctypes.byref(g)))
            params = []
            for n, p in own:
                full = f"{mname}.{n}" if mname else n
                shape = (ctypes.c_int64 * max(1, p.dim()))(*(p.shape if p.dim() else (1,)))
                pid = ctypes.c_int()
                self._call(lib.zinc_param_add(e, g.value, full.encode(), max(1, p.dim()), shape,
                                              self._code, ctypes.byref(pid)))
                params.append((pid.value, full, p))
            self._groups.append((g.value, params))
            modules.append(mod)
        if not self._groups:
            raise ValueError("zinc.initialize: the model has no trainable parameters")
        self._call(lib.zinc_finalize(e))
        for _, params in self._groups:
            for pid, name, p in params:
                src = p.detach().to(torch.float32).contiguous()
                self._call(lib.zinc_param_set(e, pid, ctypes.c_void_p(src.data_ptr())))
        self._check_same_weights()
        self._shapes = {pid: p.shape for _, ps in self._groups for pid, _, p in ps}
        if self._stage < 3:
            for _, params in self._groups:
                for pid, name, p in params:
                    ptr = ctypes.c_void_p()
                    self._call(lib.zinc_param_data(e, pid, ctypes.byref(ptr)))
                    p.data = _view(ptr.value, p.numel(), self._code, p.shape)
        else:
            # Stage 3: between steps a rank holds only its shard (inside zinc); each module's
            # parameters are gathered just before its forward into tensors torch owns (so what
            # autograd saves for backward stays valid) and released in zinc at once.
            self._hooks = [mod.register_forward_pre_hook(self._gather_hook(g, params))
                           for (g, params), mod in zip(self._groups, modules)]
            self._drop_params()
        self._info = StepInfo()
        self._steps = 0
        lr = self._cfg.get("optimizer", {}).get("params", {}).get("lr")
        self._lr = float(lr) if isinstance(lr, (int, float)) else 0.0
        self._micro, self._ga = _batch_rule(self._cfg, lib.zinc_engine_world_size(e))

    # ---- plumbing -------------------------------------------------------------------------

    def _call(self, status):
        check(status, self._e)

    def _gather_hook(self, g, params):
        def hook(module, inputs):
            e = self._e
            self._call(lib.zinc_gather(e, g))
            try:
                for pid, _, p in params:
                    ptr = ctypes.c_void_p()
                    self._call(lib.zinc_param_data(e, pid, ctypes.byref(ptr)))
                    shape = self._shapes[pid]
                    p.data = _view(ptr.value, _numel(shape), self._code, shape).clone()
            finally:
                self._call(lib.zinc_release(e, g))
        return hook

    def _drop_params(self):
        """Stage 3, between steps: the model holds no parameter memory (zinc holds the shard)."""
        for _, params in self._groups:
            for _, _, p in params:
                p.data = torch.empty(0, dtype=_TORCH_DTYPE[self._code])

    def memory(self):
        """zinc's memory of this rank by category: {name: (planned bytes, allocated bytes)}."""
        names = ["param16", "grad", "master", "adam_m", "adam_v", "bucket", "gather"]
        planned, alloc = (ctypes.c_uint64 * len(names))(), (ctypes.c_uint64 * len(names))()
        self._call(lib.zinc_memory(self._e, planned, alloc))
        return {n: (planned[i], alloc[i]) for i, n in enumerate(names)}

    def _check_same_weights(self):
        """zinc_param_set needs the same values on every rank (DeepSpeed broadcasts rank 0's):
        compare a fingerprint of the initial weights across ranks and refuse a mismatch."""
        world = lib.zinc_engine_world_size(self._e)
        if world == 1:
            return
        s = sum(float(p.detach().double().sum()) for _, ps in self._groups for _, _, p in ps)
        q = sum(float(p.detach().double().square().sum()) for _, ps in self._groups for _, _, p in ps)
        ms, mq = self._mean_over_ranks([s, q])
        if abs(ms - s) > 1e-9 * (1 + abs(s)) or abs(mq - q) > 1e-9 * (1 + abs(q)):
            raise ZincError(ZINC_ERR_MISMATCH, f"zinc.initialize: rank {lib.zinc_engine_rank(self._e)}'s initial "
                               "weights differ from the other ranks'; seed torch identically "
                               "before building the model on every rank")

    def _mean_over_ranks(self, values):
        """zinc_mean_over_ranks: each of values (floats) averaged over the ranks. Collective."""
        buf = (ctypes.c_double * len(values))(*values)
        self._call(lib.zinc_mean_over_ranks(self._e, buf, len(values)))
        return list(buf)

    def close(self):
        """Releases the engine (its zinc memory: the model's parameters become copies first,
        so the model stays usable). A world of one holds one engine at a time."""
        if getattr(self, "_e", None) is not None and self._e.value:
            for _, params in getattr(self, "_groups", []):
                for _, _, p in params:
                    p.data = p.data.clone()
            for h in getattr(self, "_hooks", []):
                h.remove()
            lib.zinc_engine_destroy(self._e)
            self._e = ctypes.c_void_p()

    def __del__(self):
        self.close()

    # ---- training -------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def backward(self, loss):
        """Scales the loss as DeepSpeed does, runs autograd, and hands every group's gradient
        to zinc (last group first)."""
        (loss * lib.zinc_loss_multiplier(self._e)).backward()
        e = self._e
        for g, params in reversed(self._groups):
            for pid, name, p in params:
                ptr = ctypes.c_void_p()
                self._call(lib.zinc_param_grad(e, pid, ctypes.byref(ptr)))
                if p.grad is not None:
                    shape = self._shapes[pid]
                    _view(ptr.value, _numel(shape), self._code, shape).add_(p.grad.to(p.dtype))
                    p.grad = None
            self._call(lib.zinc_grads_ready(e, g))
        return loss

    def step(self):
        """zinc_step: at the accumulation boundary reduce, clip, Adam/AdamW and gather."""
        info = StepInfo()
        self._call(lib.zinc_step(self._e, ctypes.byref(info)))
        if self._stage == 3:
            self._drop_params()
        if info.boundary:
            self._info = info
            self._steps = info.step
            self._lr = info.lr

    # ---- DeepSpeed's accessors ------------------------------------------------------------

    @property
    def global_steps(self):
        return self._steps

    def get_lr(self):
        return [self._lr]

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

    def module_state_dict(self):
        """Every parameter's full value (the fp32 master, cast to the working dtype) on every
        rank. Collective."""
        out = {}
        for _, params in self._groups:
            for pid, name, p in params:
                shape = self._shapes[pid]
                buf = torch.empty(_numel(shape), dtype=torch.float32)
                self._call(lib.zinc_param_get(self._e, pid, ctypes.c_void_p(buf.data_ptr())))
                out[name] = buf.view(shape).to(_TORCH_DTYPE[self._code])
        return out

    # ---- checkpoints ----------------------------------------------------------------------

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
        """A zinc checkpoint in save_dir/tag (default global_step<N>); client_state (a dict of
        JSON values) is saved with it. Collective."""
        if not save_latest:
            raise NotImplementedError("zinc: save_checkpoint(save_latest=False): zinc always "
                                      "points `latest` at the newest complete tag")
        tag = tag if tag is not None else f"global_step{self._steps}"
        try:
            blob = json.dumps({"client_state": client_state or {}, "global_steps": self._steps,
                               "lr": self._lr}).encode()
        except TypeError as ex:
            raise TypeError(f"zinc.save_checkpoint: client_state must hold JSON values: {ex}")
        buf = ctypes.create_string_buffer(blob, len(blob))
        opts = SaveOptions(ctypes.cast(buf, ctypes.c_void_p), len(blob), 0, -1)
        os.makedirs(save_dir, exist_ok=True)
        self._call(lib.zinc_ckpt_save(self._e, os.fsencode(save_dir), str(tag).encode(),
                                      ctypes.byref(opts)))
        self._call(lib.zinc_ckpt_wait(self._e))
        return True

    def load_checkpoint(self, load_dir, tag=None, load_optimizer_states=True, **kwargs):
        """Loads load_dir/tag (default: the newest valid tag), at any world size and stage.
        Returns (path, client_state). Collective."""
        for k in ("load_module_only", "load_lr_scheduler_states"):
            if kwargs.get(k):
                raise NotImplementedError(f"zinc: load_checkpoint({k}=True)")
        buf = ctypes.create_string_buffer(_BLOB_CAP)
        opts = LoadOptions(0 if load_optimizer_states else 1, ctypes.cast(buf, ctypes.c_void_p),
                           _BLOB_CAP, 0)
        self._call(lib.zinc_ckpt_load(self._e, os.fsencode(load_dir),
                                      None if tag is None else str(tag).encode(),
                                      ctypes.byref(opts)))
        client = {}
        if opts.client_blob_bytes:
            saved = json.loads(buf.raw[:opts.client_blob_bytes].decode())
            client = saved.get("client_state", {})
            if load_optimizer_states:
                self._steps = int(saved.get("global_steps", 0))
                self._lr = float(saved.get("lr", self._lr))
        return os.path.join(load_dir, opts.loaded_tag.decode()), client

    # ---- DeepSpeed methods zinc does not offer (yet) --------------------------------------

    def _absent(self, name):
        raise NotImplementedError(f"zinc: engine.{name} is not offered (docs/python.md)")

    def save_16bit_model(self, *a, **k):
        self._absent("save_16bit_model")

    def no_sync(self, *a, **k):
        self._absent("no_sync")

    def set_gradient_accumulation_boundary(self, *a, **k):
        self._absent("set_gradient_accumulation_boundary")


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, config=None, config_params=None, dist_init_required=None,
               **kwargs):
    """DeepSpeed's initialize: returns (engine, optimizer, training_dataloader, lr_scheduler).
    The optimizer and scheduler come from the config; zinc runs them inside engine.step()."""
    if model is None:
        raise ValueError("zinc.initialize: model is required")
    if optimizer is not None or lr_scheduler is not None:
        raise NotImplementedError("zinc.initialize: a client optimizer or scheduler object; zinc "
                                  "runs the config's optimizer and scheduler itself")
    if training_data is not None:
        raise NotImplementedError("zinc.initialize: training_data (zinc builds no dataloader)")
    for k in kwargs:
        raise NotImplementedError(f"zinc.initialize: argument {k!r}")
    cfg = config if config is not None else config_params
    if cfg is None and args is not None:
        cfg = getattr(args, "deepspeed_config", None)
    if cfg is None:
        raise ValueError("zinc.initialize: no config (config=, config_params= or "
                         "args.deepspeed_config)")
    engine = Engine(model, model_parameters, cfg)
    return engine, _Optimizer(engine), None, _Scheduler(engine)
