"""_frozen.py — ZeRO stage 3's frozen parameters in pieces, as DeepSpeed partitions every
parameter of the module at stage 3, trained or not: a LoRA run's base model takes 2/N bytes per
parameter on each rank, where whole it took 2 (a 70B base at 8 ranks: ~17.5 GB per rank, not
~140).

zinc's engine trains what it holds, and its state (fp32 master, Adam's moments, gradient) is
sized for that. The frozen parameters go to a second zinc engine made frozen
(zinc_engine_frozen): the same config and world, and only the 16-bit shards, the gather slots
and the persistent block. Its groups (one per module, as the engine's) join the stage-3 hooks'
list (self._sg, after self._g's): they are gathered for their module's forward, gathered again
by _regather for its backward, and emptied as the trained ones are; persistent ones view that
engine's copy for good. Nothing hands them over: a frozen group gathered for a backward is let
go when the gradient of the module's inputs is complete (_stage3._OnBackward, put on the
inputs by the forward pre-hook), or at the backward's end where no input needs a gradient.

The candidates: at stage 3, each parameter with requires_grad False whose dtype the engine
computes in after DeepSpeed's cast (any floating dtype with fp16/bf16, float32 without).
Others (an integer one; a bf16 one in an fp32 run) stay whole, as before.

What reads or writes a frozen parameter's value outside a forward goes through
_frozen_value(s) and _frozen_set: state dicts, checkpoints (their module state holds the full
values, as before), GatheredParameters.
"""
import ctypes
import json
import weakref

import torch

from ._lib import EngineOptions, check, lib
from ._stage3 import _OnBackward
from ._memory import _CASTABLE, _TORCH_DTYPE, _numel
from . import _zero_init


# False keeps stage 3's frozen parameters whole on every rank, as before 2026-12-01: the tests'
# reference run (test_stage3_frozen.py compares the two bit for bit).
PARTITION = True


class _FrozenMixin:
    """The Engine's frozen engine at stage 3."""

    def _frozen_candidates(self, model):
        """{id(param): param} of the frozen parameters the frozen engine will hold."""
        if not PARTITION:
            return {}
        ok = (torch.float32,) if self._code == 0 else _CASTABLE     # (engine.py casts those)
        return {id(p): p for p in model.parameters()
                if not p.requires_grad and id(p) not in self._pid_of and p.dtype in ok
                and not getattr(p, "_zinc_shared_whole", False)}

    def _partition_frozen(self, model, frozen, opts):
        """Makes the frozen engine over `frozen` (one group per module, registered in module
        order as the engine's), sets rank 0's values (rounded to the working dtype, as
        DeepSpeed's cast does) and adds its groups to self._sg. Collective."""
        from .engine import _Group       # (engine.py imports this module)
        # The config as the engine resolved it (zinc's own keys: read again, it warns of
        # nothing the engine did not warn of already). The frozen engine has no optimizer
        # state; its pieces go where offload_param puts the trained ones, as DeepSpeed's do:
        # host memory with "cpu" (the config takes that only beside offload_optimizer, whose
        # "cpu" moves nothing there, and whose pin_memory pins the host shard), a scratch file
        # of their own under nvme_path with "nvme" (beside offload_optimizer "nvme", as the
        # trained engine's config has it), and the device without offload_param.
        cfg = json.loads(lib.zinc_engine_config_json(self._e).decode())
        zero = cfg["zero_optimization"]
        where = zero.get("offload_param", {}).get("device")
        if where == "cpu":
            pin = zero.get("offload_optimizer", {}).get("pin_memory", False)
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
        elif where != "nvme":
            zero["offload_optimizer"] = {"device": "none"}
            zero["offload_param"] = {"device": "none"}
        text = json.dumps(cfg).encode()
        fopts = EngineOptions(config_path=None, config_json=text, world=opts.world,
                              rank=opts.rank, device=opts.device, threads=opts.threads)
        fe = ctypes.c_void_p()
        check(lib.zinc_engine_create(ctypes.byref(fopts), ctypes.byref(fe)))
        self._fe = fe
        self._call(lib.zinc_engine_frozen(fe), fe)
        if self._cuda:
            self._fzstream = torch.cuda.ExternalStream(lib.zinc_engine_cuda_stream(fe),
                                                       device=self._device)
        groups = []
        for mname, mod in model.named_modules():
            own, shared = [], []
            for n, p in mod.named_parameters(recurse=False):
                if id(p) not in frozen:
                    continue
                (shared if id(p) in self._fpid_of else own).append((n, p))
            needs = sorted({self._group_of[id(p)] for _, p in shared})
            if own:
                g = ctypes.c_int()
                self._call(lib.zinc_group_add(fe, (mname or "root").encode(), ctypes.byref(g)),
                           fe)
                params = []
                for n, p in own:
                    full = f"{mname}.{n}" if mname else n
                    pid = self._add_param(fe, g.value, full, p)
                    params.append((pid, full, p))
                    self._fpid_of[id(p)] = pid
                    self._fshapes[pid] = p.shape
                    self._group_of[id(p)] = len(self._g) + len(groups)
                G = _Group(g.value, params)
                G.frozen = True
                needs = [len(self._g) + len(groups)] + needs
                groups.append(G)
            if needs:
                self._needs[mod] = self._needs.get(mod, []) + needs
        self._call(lib.zinc_finalize(fe), fe)
        dtype = _TORCH_DTYPE[self._code]
        empty = torch.empty(0, dtype=dtype, device=self._device)
        me = weakref.ref(self)
        for G in groups:
            for pid, _, p in G.params:
                if _zero_init.held(p) is not None:      # zero.Init's pieces, one at a time
                    src = _zero_init.gather(p).to(torch.float32).contiguous()
                    _zero_init.release(p)
                else:
                    src = p.detach().to("cpu", torch.float32).contiguous()
                    self._broadcast(src, 0)
                src = src.to(dtype).to(torch.float32)
                self._call(lib.zinc_param_set(fe, pid, ctypes.c_void_p(src.data_ptr())), fe)
                p.data = empty
                p._zinc_frozen_by = me      # whole_if_shared: a live engine holds its values
        self._call(lib.zinc_engine_sync(fe), fe)
        self._fgroups = groups
        self._sg = self._g + groups

    @staticmethod
    def whole_if_shared(model):
        """A new engine's model (any stage) holds parameters another live engine holds in
        frozen pieces (a frozen base two engines share, as before 2026-12-01 both held it
        whole): that engine puts their groups together again for good and leaves them to the
        module, so both engines read them whole. Collective: every rank makes the same
        initialize calls."""
        for p in model.parameters():
            by = getattr(p, "_zinc_frozen_by", None)
            owner = by() if by is not None else None
            if owner is not None and id(p) in owner._fpid_of:
                owner._let_frozen_go(p)

    def _let_frozen_go(self, p):
        """whole_if_shared: the group holding p whole in the module again, for good: its
        values from the frozen engine's pieces (collective), no hook or gather for it from here
        on, and never a candidate again (_frozen_candidates)."""
        gi = self._group_of[id(p)]
        G = self._sg[gi]
        whole = [self._frozen_value(q).to(self._device) for _, _, q in G.params]
        for (_, _, q), value in zip(G.params, whole):
            q.data = value
            del self._fpid_of[id(q)], self._group_of[id(q)]
            q.__dict__.pop("_zinc_frozen_by", None)
            q._zinc_shared_whole = True
        G.whole = G.gone = True
        G.live, G.kept = True, False
        for mod, needs in list(self._needs.items()):
            if gi in needs:
                self._needs[mod] = [g for g in needs if g != gi]
        for groups in self._declared.values():
            groups.discard(gi)

    def _frozen_backward_done(self, groups):
        """The module's backward ended (_OnBackward on its inputs); its frozen groups gathered for
        it (held by no forward) are let go (kept for a use soon, as _release decides)."""
        for gi in groups:
            G = self._sg[gi]
            if G.live and G.holds == 0 and not G.read_hold:
                self._release(gi)

    def _release_inputs(self, inputs, groups):
        """The forward pre-hook's inputs, those that require grad passed through _OnBackward,
        whose backward lets go the module's frozen groups (_frozen_backward_done)."""
        frozen = tuple(gi for gi in groups if self._sg[gi].frozen)
        if not frozen or not torch.is_grad_enabled():
            return None
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            return None
        # (its backward runs once the input's gradient from inside the module is complete: the
        # module's backward is done with its weights)
        return tuple(_OnBackward.apply(self._frozen_backward_done, frozen, t)
                     if isinstance(t, torch.Tensor) and t.requires_grad else t for t in inputs)

    # ---- values outside a forward ------------------------------------------------------------

    def _frozen_value(self, p):
        """A frozen parameter's full value (zinc_param_get of the frozen engine: its 16-bit
        pieces), a host tensor of the working dtype and its shape. Collective."""
        pid = self._fpid_of[id(p)]
        shape = self._fshapes[pid]
        buf = torch.empty(_numel(shape), dtype=torch.float32)
        self._call(lib.zinc_param_get(self._fe, pid, ctypes.c_void_p(buf.data_ptr())), self._fe)
        return buf.view(shape).to(_TORCH_DTYPE[self._code])

    def _frozen_values(self):
        """{id(param): full value} of every frozen parameter in pieces, in registration order
        (collective: every rank asks for the same ones in the same order)."""
        return {id(p): self._frozen_value(p) for G in self._fgroups for _, _, p in G.params
                if id(p) in self._fpid_of}

    def _frozen_set(self, p, value):
        """Sets a frozen parameter's value (every rank the same values; rounded to the working
        dtype). Not collective; the caller syncs (_zinc_then_torch) before torch reads it."""
        pid = self._fpid_of[id(p)]
        if tuple(value.shape) != tuple(self._fshapes[pid]):
            raise ValueError(f"zinc: {tuple(value.shape)} values for a parameter of shape "
                             f"{tuple(self._fshapes[pid])}")
        src = value.detach().to("cpu", torch.float32).contiguous()
        # torch -> zinc (WAR): a persistent group's parameters view what this overwrites
        self._torch_then_zinc(frozen=True)
        self._call(lib.zinc_param_set(self._fe, pid, ctypes.c_void_p(src.data_ptr())), self._fe)

    def _full_shape(self, p):
        """A parameter's full shape (a frozen one in pieces is empty outside its forward)."""
        pid = self._fpid_of.get(id(p))
        return p.shape if pid is None else self._fshapes[pid]

    def _set_untrained(self, p, value):
        """An untrained parameter takes `value` (a load): the frozen engine's pieces, else
        copied in. Then _zinc_then_torch before torch reads a frozen one."""
        if id(p) in self._fpid_of:
            self._frozen_set(p, value)
        else:
            with torch.no_grad():
                p.copy_(value.to(p.dtype))

    def _untrained_value(self, p):
        """An untrained parameter's full value on the host (collective for a frozen one in
        pieces: every rank asks for the same ones in the same order)."""
        return self._frozen_value(p) if id(p) in self._fpid_of else p.detach().cpu()

    def _close_frozen(self):
        """close(): the persistent groups' views become copies (as the engine's), the others
        stay empty, and the frozen engine goes."""
        fe = getattr(self, "_fe", None)
        if fe is None or not fe.value:
            return
        if self._cuda:
            lib.zinc_engine_sync(fe)
        for G in getattr(self, "_fgroups", []):
            for _, _, p in G.params:
                if G.gone:       # the module's own since whole_if_shared
                    continue
                p.data = p.data.clone()
                if p.numel() == 0:
                    p._zinc_emptied = True
                p.__dict__.pop("_zinc_frozen_by", None)
        if self._cuda:
            torch.cuda.current_stream(self._device).synchronize()
        lib.zinc_engine_destroy(fe)
        self._fe = None
