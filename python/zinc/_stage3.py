"""_stage3.py — ZeRO stage 3 on the torch side: the hooks that gather a module's group for its
forward and its backward and empty it after, and the engine's side of zinc.zero.GatheredParameters
(zero.py), which holds parameters gathered, or changed on one rank, for a block of code.

_Stage3Mixin is one of the parts of engine.py's Engine; its methods work on the state
Engine.__init__ and _setup_stage3 set up (self._g, self._needs, self._stack, ...).

Stage 3 (DeepSpeed's scheme, built from forward hooks and autograd Functions so that it works on
torch 1.13, which has no backward pre-hooks for modules, as on current torch):
- Between steps the parameters hold no memory (`param.data` is an empty tensor); zinc holds the
  rank's shard. Persistent groups (below stage3_param_persistence_threshold, which zinc keeps
  gathered in full at a fixed address) are the exception: their parameters view zinc's copy for
  good (_view_whole), as DeepSpeed keeps such parameters whole, and none of what follows
  applies to them (no hook, gather, copy or release).
- A forward pre-hook gathers the module's group (zinc_gather) and sets `param.data` to a copy
  torch owns, then releases zinc's buffer at once; the forward post-hook empties `param.data`
  again and passes every output tensor that requires grad through `_OnBackward`, whose
  backward (`_regather`) gathers the group back before the module's own backward runs. Autograd saves the Parameter
  itself for most ops, so restoring `param.data` makes the saved tensor valid again; `nn.Linear`,
  whose functional form saves a transposed view of the weight (which would keep the forward's
  copy alive), runs through `_Linear`, which saves the Parameter.
- Copies, not views of zinc's gather buffer: a view saved by autograd (`w.t()`) would read
  another group's values once zinc reuses the buffer; a copy stays valid. zinc_gather is still
  called in module order, so zinc's traced prefetch applies.
- After backward a group is emptied as soon as its gradients are handed over (no later backward
  node can need a parameter whose gradient is complete).
- Reuse (DeepSpeed's stage3_max_reuse_distance, default 1e9 elements): the order in which a pass
  (one forward and its backward) uses the groups is recorded; from the next pass on, while the
  order repeats, a group whose forward or hand-over ends is kept gathered (`kept`: torch's copy
  stays, zinc holds nothing) when the recorded order uses it again before that many elements of
  other groups' uses: a model that fits within the distance gathers each group once per pass,
  in forward, not again in backward. A pass that leaves the order drops what it kept and becomes
  the order; a forward without grad keeps nothing (no backward follows); whatever writes zinc's
  weights outside the step (_zinc_then_torch) and empty_partition_cache drop what was kept. A
  pass begins at the forward of an outermost hooked module, so a loop that calls submodules one
  by one from outside the model begins one per call and keeps nothing. `_Reuse` below.
  torch's memory then holds the kept groups between their forward and their backward, as
  DeepSpeed's does; 0 turns it off (a group is emptied when its module ends).
- A parameter read through another module's attribute while a forward runs (the tied embedding
  read by the top module's head: `self.wte.weight`) is gathered at the read: each owning
  module's `_parameters` is a dict that gathers on read (DeepSpeed's ZeROOrderedDict does the
  same). The innermost running module holds that group until its forward ends and gathers it
  again before its backward. The read comes at the same point of every micro-step, so zinc's
  traced gather order repeats. A read that bypasses the attribute (a reference kept elsewhere)
  is declared with zinc.register_external_parameter: the module then gathers the group with
  its own. At stage3_max_reuse_distance 0 no step holds the whole model, the first micro-step
  included; at the default the groups used again soon are kept (Reuse, below).
- A module called more than once per forward gathers its group again at each call (unless kept
  for it); activation
  checkpointing (torch.utils.checkpoint, zinc.checkpointing) re-runs the forward hooks in
  backward, which gather and release as in forward.
"""
import collections
import ctypes
import weakref

import torch

from . import _memory
from ._hooktime import timed
from ._interrupt import held
from ._lib import lib
from ._memory import _TORCH_DTYPE, _numel


def _bits(t):
    """A tensor's bits as integers, so that equality is bitwise (NaNs, -0.0)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()]) if t.is_floating_point() else t


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


class _OnBackward(torch.autograd.Function):
    """Identity on a tensor; its backward calls action(groups) before passing the gradient on.
    On a module's output (_regather): the module's groups gathered again before the module's own
    backward runs (stage 3). On a module's input (_frozen.py): its frozen groups let go once
    that backward is done with them."""

    @staticmethod
    def forward(ctx, action, groups, t):
        ctx.action, ctx.groups = action, groups
        return t.detach()

    @staticmethod
    def backward(ctx, grad):
        ctx.action(ctx.groups)
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


class _Reuse:
    """A recorded order of group uses, for stage3_max_reuse_distance: after the use at position
    u, the group's next use is at nxt[u] (-1: none), and cum[i] is the elements of the uses
    before position i, so the uses between positions p and j cover cum[j] - cum[p] elements."""

    def __init__(self, order, numel):
        self.order = tuple(order)
        self.nxt = [-1] * len(order)
        last = {}
        for i in reversed(range(len(order))):
            self.nxt[i] = last.get(order[i], -1)
            last[order[i]] = i
        self.cum = [0]
        for gi in order:
            self.cum.append(self.cum[-1] + numel[gi])


# The stage-3 engines alive in this process, for a register_external_parameter made after
# initialize (engine.register_external_parameter): weakly, a closed or dropped engine leaves.
_LIVE = weakref.WeakSet()


def declare_external(module, parameter):
    """Tells every live stage-3 engine whose model holds `module` that module's forward reads
    `parameter` (register_external_parameter after initialize)."""
    for engine in list(_LIVE):
        e = getattr(engine, "_e", None)
        if e is not None and e.value and any(m is module for m in engine.module.modules()):
            engine._declare_late(module, parameter)


class _Stage3Mixin:
    """The Engine's stage-3 hooks and zero.GatheredParameters' contexts."""

    # ---- stage 3 ----

    def _setup_stage3(self, model):
        self._empty = torch.empty(0, dtype=_TORCH_DTYPE[self._code], device=self._device)
        self._stack = []           # [module, groups gathered on read for it], outermost first
        self._declared = {}        # module -> groups it reads that other modules own (declared)
        self._linears = []
        self._watched = []         # modules whose _parameters gather on read
        # stage3_max_reuse_distance (_Reuse): this pass's uses so far, each group's last one,
        # the order from an earlier pass (None before the first ends) and whether this pass
        # left it.
        self._reuse_numel = int(self._resolved["zero_optimization"]["stage3_max_reuse_distance"])
        self._group_numel = [sum(_numel(s) for s in self._group_shapes(G)) for G in self._sg]
        self._uses, self._last_use, self._order, self._left = [], {}, None, False
        # DeepSpeed's ZeRO-3 attributes that scripts read of a partitioned parameter, whose own
        # shape is empty between forwards: its full numel and shape (transformers'
        # num_parameters, PEFT's LoRA set-up; `p.ds_numel if hasattr(p, "ds_numel") else
        # p.numel()` counted 0 for each) and an id. Not ds_status or ds_tensor: zinc's
        # parameters have neither (docs/python.md).
        trained = lib.zinc_engine_param_count(self._e)
        for G in self._sg:
            for (pid, _, p), shape in zip(G.params, self._group_shapes(G)):
                p.ds_id = pid + trained if G.frozen else pid     # the frozen engine's after
                p.ds_shape, p.ds_numel = torch.Size(shape), _numel(shape)
        # Persistent groups (below stage3_param_persistence_threshold; zinc keeps them gathered
        # in full): their parameters view zinc's copy between steps too, as DeepSpeed keeps such
        # parameters whole in the module, so model.state_dict() and a PEFT save_pretrained
        # read their values (they were empty tensors). Nothing gathers or releases them, and a
        # module that reads only such groups gets no hook.
        for G in self._sg:
            G.whole = lib.zinc_group_persistent(self._engine_of(G), G.gid) == 1
        for mod in list(self._needs):
            self._needs[mod] = [gi for gi in self._needs[mod] if not self._sg[gi].whole]
            if not self._needs[mod]:
                del self._needs[mod]
        def partitioned(q):        # zinc trains it and the stage-3 hooks gather its group
            gi = self._group_of.get(id(q))
            return gi is not None and not self._sg[gi].whole

        for mod in model.modules():
            ext = [self._group_of[id(q)] for q in mod.__dict__.get("_zinc_external_params", [])
                   if partitioned(q)]
            if ext:
                self._declared[mod] = set(ext)
            if any(partitioned(p) for p in mod._parameters.values() if p is not None):
                mod._parameters = _GatherOnRead(mod._parameters, self)
                self._watched.append(mod)
        inside = self._leaves(model)
        self._inside_leaf = inside
        hooked = list(self._needs) + [m for m in self._declared if m not in self._needs]
        hooked = [m for m in hooked if m not in inside]
        self._hooked = set()
        for mod in hooked + ([model] if model not in hooked else []):
            self._hook_module(mod)
        self._drop_params()
        _LIVE.add(self)

    def _hook_module(self, mod):
        """The forward pre- and post-hooks that gather and release mod's groups."""
        self._hooks.append(mod.register_forward_pre_hook(self._pre_hook))
        self._hooks.append(_post_hook_always(mod, self._post_hook))
        self._hooked.add(mod)
        if (isinstance(mod, torch.nn.Linear) and type(mod).forward is torch.nn.Linear.forward
                and "forward" not in mod.__dict__):
            mod.forward = _linear_forward.__get__(mod)
            self._linears.append(mod)

    def _declare_late(self, mod, p):
        """register_external_parameter(mod, p) after initialize (DeepSpeed honours it then
        too): mod gathers p's group from its next forward on, as if declared before. Inside a
        ZeRO-3 leaf the leaf gathers it (_leaves)."""
        gi = self._group_of.get(id(p))
        if gi is None or self._sg[gi].whole:
            return
        if mod in self._inside_leaf:       # the outermost leaf holding it
            mod = next(m for m in self.module.modules() if getattr(m, "_z3_leaf", False) and
                       m not in self._inside_leaf and any(s is mod for s in m.modules()))
        if gi in self._needs.get(mod, []):
            return
        self._declared.setdefault(mod, set()).add(gi)
        if mod not in self._hooked:
            self._hook_module(mod)

    def _leaves(self, model):
        """DeepSpeed's ZeRO-3 leaf modules (module._z3_leaf, zinc.utils.set_z3_leaf_modules):
        each leaf gathers the groups of its whole subtree (declared as its own, as
        register_external_parameter declares) and its submodules get no hooks. Returns the
        submodules of leaves (a leaf inside a leaf is one of them)."""
        inside = set()
        for mod in model.modules():
            if mod in inside or not getattr(mod, "_z3_leaf", False):
                continue
            subtree = [m for m in mod.modules() if m is not mod]
            groups = {gi for m in subtree for gi in self._needs.get(m, [])}
            for m in subtree:
                groups |= self._declared.get(m, set())
            groups.difference_update(self._needs.get(mod, []))
            if groups:
                self._declared[mod] = self._declared.get(mod, set()) | groups
            inside.update(subtree)
        return inside

    def _groups_of(self, mod):
        need = self._needs.get(mod, [])
        more = self._declared.get(mod)
        return need + sorted(more.difference(need)) if more else need

    @timed
    def _pre_hook(self, mod, inputs):
        self._end_open_micro()     # a forward through engine.module, not the engine
        if not self._stack and not self._in_backward:
            self._new_pass()
        self._stack.append((mod, []))
        groups = self._groups_of(mod)
        for gi in groups:
            self._materialize(gi)
            self._sg[gi].holds += 1
        return self._release_inputs(inputs, groups) if self._fe is not None else None

    def _on_read(self, p):
        """A parameter read through its module's attribute (_GatherOnRead): if a forward is
        running and the group is not gathered, gather it for the innermost running module,
        which holds it until its forward ends and gathers it again before its backward. Every
        attribute read of a weight comes here, nearly all of a gathered group: those return
        before the hook timer (its cost would be most of theirs).
        In a backward no module's forward may be running: activation checkpointing recomputes
        a plain function (not a module), which read the parameter in the top module's forward
        the first time. There the read gathers the group and holds it (G.read_hold) until its
        hand-over or the backward's end (_drop_params): the function may run the parameter's
        module after the read, whose forward's end would otherwise empty what the function
        still uses. Before, the read found the empty tensor its module's forward had left
        ("size mismatch", or the recomputed metadata differing), where DeepSpeed gathers on
        any read."""
        if not self._stack and not self._in_backward:
            return
        gi = self._group_of.get(id(p))
        if gi is None:
            return
        G = self._sg[gi]
        if not self._stack:
            if not G.read_hold:
                self._materialize(gi)          # (nothing when it is gathered)
                G.read_hold = True
                G.holds += 1
        elif not G.live or G.kept:
            self._gather_on_read(gi)

    @timed
    def _gather_on_read(self, gi):
        self._materialize(gi)
        self._sg[gi].holds += 1
        self._stack[-1][1].append(gi)

    @timed
    def _post_hook(self, mod, inputs, out):
        read = []
        if self._stack and self._stack[-1][0] is mod:
            read = self._stack.pop()[1]
        own = self._groups_of(mod)
        groups = tuple(own + [gi for gi in dict.fromkeys(read) if gi not in own] if read else own)
        for gi in groups:
            G = self._sg[gi]
            G.holds = max(0, G.holds - 1)
            # A frozen group re-run in a backward (activation checkpointing's recomputation)
            # stays until the module's backward is done with it (_frozen_backward_done) or the
            # backward ends: torch >= 2's non-reentrant checkpoint saves a frozen Parameter
            # itself (a trained one detached), and its backward found the emptied tensor
            # ("Recomputed values ... have different metadata", a review, 2026-12-01).
            if G.holds == 0 and not (G.frozen and self._in_backward):
                self._release(gi)
        if groups and torch.is_grad_enabled():
            return self._wrap(out, groups)
        return out

    def _wrap(self, out, groups):
        if isinstance(out, torch.Tensor):
            return _OnBackward.apply(self._regather, groups, out) if out.requires_grad else out
        if isinstance(out, tuple):
            items = [self._wrap(o, groups) for o in out]
            return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
        if isinstance(out, list):
            return [self._wrap(o, groups) for o in out]
        if isinstance(out, dict):
            for k in list(out.keys()):
                out[k] = self._wrap(out[k], groups)
        return out

    def _regather(self, groups):
        """The backward of a module's output (_OnBackward) gathers its groups again."""
        for gi in groups:
            self._materialize(gi)

    @timed
    def _materialize(self, gi):
        """Stage 3: zinc_gather the group, copy it into `param.data`, zinc_release (nothing
        when it is kept from an earlier use: _release)."""
        G = self._sg[gi]
        if G.live and not G.kept:
            return
        self._note_use(gi)
        if G.kept:
            G.kept = False
            return
        # gathered, copied, released and recorded together (_interrupt): a Ctrl-C after
        # zinc_gather left the group refused as gathered already, for good
        with held():
            st = self._torch_stream()
            e = self._engine_of(G)
            self._call(lib.zinc_gather(e, G.gid), e)
            try:
                # zinc -> torch (RAW): the all-gather into zinc's buffer is complete before the
                # copy: torch's stream waits on the device for this group's gather only, not for
                # what zinc queued after it (prefetches of later groups, the reduce-scatter of the
                # group handed over just before, in backward), which zinc's whole stream would add.
                self._torch_after_gather(G, st)
                # One copy of the whole group (one kernel on a GPU, not one per parameter); each
                # parameter's data is its slice. The slices share the copy's memory, which is
                # freed when every parameter of the group has been emptied and nothing autograd
                # saved still views one of them.
                span, layout, _ = self._group_span(G, "data")
                whole = span.clone()
                for (_, _, p), (off, shape, strides) in zip(G.params, layout):
                    p.data = whole.as_strided(shape, strides, off)
            finally:
                # torch -> zinc (WAR): after zinc_release zinc may all-gather another group into
                # this buffer (its prefetch); that must wait for the copies queued on torch's
                # stream.
                self._torch_then_zinc(st, G.frozen)
                self._call(lib.zinc_release(e, G.gid), e)
            G.live = True

    def _dematerialize(self, gi):
        G = self._sg[gi]
        if G.live and G.ctx == 0 and not G.whole:
            with held():     # not left marked gathered with some weights emptied (_interrupt)
                for _, _, p in G.params:
                    p.data = self._empty
                G.live = False
                G.kept = False

    # ---- stage3_max_reuse_distance (_Reuse) --------------------------------------------------

    def _new_pass(self):
        """A forward begins: what an earlier pass kept goes, and the order to follow is the
        last one unless the pass that just ended left it (it becomes the order then)."""
        self._empty_kept()
        if self._uses and (self._order is None or self._left):
            self._order = _Reuse(self._uses, self._group_numel)
        self._uses, self._last_use, self._left = [], {}, False

    def _note_use(self, gi):
        """A use of group gi (it is gathered for it, or taken from kept). One that the order
        does not have next ends this pass's keeping: what it kept goes."""
        pos = len(self._uses)
        self._uses.append(gi)
        self._last_use[gi] = pos
        if not self._left and self._order is not None and (
                pos >= len(self._order.order) or self._order.order[pos] != gi):
            self._left = True
            self._empty_kept()

    def _release(self, gi):
        """The group's holds ended (its module's forward, or its hand-over in backward): kept
        when the order uses it again within stage3_max_reuse_distance elements, else emptied.
        Only in a pass that follows the order, and not in a forward without grad (no backward
        will use it). DeepSpeed's rule: the uses from here up to the next one of the group
        cover fewer elements than the distance."""
        G, R = self._sg[gi], self._order
        if G.whole:
            return
        if (self._reuse_numel > 0 and R is not None and not self._left and G.live and G.ctx == 0
                and (self._in_backward or torch.is_grad_enabled())):
            u, here = self._last_use.get(gi, -1), len(self._uses)
            nxt = R.nxt[u] if u >= 0 else -1      # u < len(R.nxt): the pass follows R
            if nxt >= here and R.cum[nxt] - R.cum[here] < self._reuse_numel:
                G.kept = True
                return
        self._dematerialize(gi)

    def empty_partition_cache(self):
        """DeepSpeed's: frees the parameters stage 3 holds gathered outside a module's use —
        the groups kept for their reuse (after a forward with grad and no backward, say). Their
        next use gathers them again. Below stage 3 nothing (DeepSpeed's does nothing there)."""
        if self._stage == 3:
            self._empty_kept()

    def _empty_kept(self):
        for gi, G in enumerate(self._sg):
            if G.kept:
                self._dematerialize(gi)

    def _drop_params(self):
        """Stage 3, between steps: the model holds no parameter memory (zinc holds the shard)."""
        # One Ctrl-C section for all groups (each group's own is nested in it: no handler swap
        # per group, ~1 us each, twice a step)
        with held():
            for gi, G in enumerate(self._sg):
                if G.gone:         # whole in the module for good (_frozen.whole_if_shared)
                    continue
                G.live = True
                G.holds = 0
                G.read_hold = False
                if G.whole:
                    self._view_whole(G)
                else:
                    self._dematerialize(gi)
            if self._fe is not None:
                # the frozen engine's micro-step ends here (its only effect: the gather order
                # traced so far is the one its next micro-steps prefetch in)
                self._call(lib.zinc_micro_step(self._fe), self._fe)
        if self._stack:        # (an attribute set on the Engine, an nn.Module, costs ~3 us)
            self._stack = []

    def _view_whole(self, G):
        """A persistent group's parameters as views of zinc's full copy of it (its address
        stays, zinc_group_persistent): made once, and again should the script have replaced a
        `param.data` (the addresses compared, at each _drop_params)."""
        if G.whole_at is not None and all(p.data_ptr() == at for (_, _, p), at
                                          in zip(G.params, G.whole_at)):
            return
        # zinc_param_data answers inside a gather (for a persistent group zinc_gather and
        # zinc_release only mark it: no collective, nothing copied)
        e = self._engine_of(G)
        self._call(lib.zinc_gather(e, G.gid), e)
        try:
            span, layout, _ = self._group_span(G, "data")
            for (_, _, p), (off, shape, strides) in zip(G.params, layout):
                p.data = span.as_strided(shape, strides, off)
        finally:
            self._call(lib.zinc_release(e, G.gid), e)
        G.whole_at = [p.data_ptr() for _, _, p in G.params]

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
        # stage 3's frozen parameters in the frozen engine's pieces (_frozen.py)
        pieces = sorted((p for p in params if id(p) in self._fpid_of),
                        key=lambda p: self._fpid_of[id(p)])
        others = sorted((p for p in params if id(p) not in self._pid_of
                         and id(p) not in self._fpid_of),
                        key=lambda p: self._model_order[id(p)])
        if self._stage == 3 and self._stack:
            if modifier_rank is not None:
                raise RuntimeError("zinc: zinc.zero.GatheredParameters(modifier_rank=...) inside a "
                                   "forward: change parameters between steps")
            for p in trained + pieces:
                self._on_read(p)
            return None
        # Stage 3: the groups the context holds gathered (below it every group always is).
        # What a pass kept goes first, so that a kept group's next use gathers as recorded.
        groups = (sorted({self._group_of[id(p)] for p in trained + pieces})
                  if self._stage == 3 else [])
        if groups:
            self._empty_kept()
        held = []
        try:
            for gi in groups:
                G = self._sg[gi]
                if not G.live:
                    for pid, _, p in G.params:
                        value = self._frozen_value(p) if G.frozen else self._zinc_value(pid)
                        p.data = value.to(self._device)
                    G.live = True
                G.ctx += 1
                held.append(gi)
        except BaseException:
            self._let_go(held)
            raise
        self._contexts += 1
        mine = modifier_rank is not None and lib.zinc_engine_rank(self._e) == modifier_rank
        snap = [p.detach().clone() for p in trained + pieces + others] if mine else None
        return (trained, pieces, others, groups, modifier_rank, snap)

    def _context_exit(self, rec, failed):
        """Ends what _context_enter began. With a modifier rank (and no exception inside: else
        its values are put back, _put_back), the parameters that rank changed get its values on
        every rank: zinc's ones through
        zinc_broadcast and zinc_param_set (fp32 master and working copy, so the next step
        starts from them), the others copied in. Collective then; the ones it left alone keep
        their values, the fp32 master included. Stage 3: the groups are emptied again."""
        if rec is None:
            return
        trained, pieces, others, groups, root, snap = rec
        self._contexts -= 1
        bad = None
        try:
            if root is not None and not failed:
                bad = self._take_changes(trained, pieces, others, root, snap)
        finally:
            if root is not None:
                self._rewatch(trained)
            self._let_go(groups)
            if root is not None:
                # should the modifier have replaced `param.data`: zinc's view again (at stage 3
                # the persistent groups' views; the others were emptied)
                zincs = trained + pieces
                if self._stage < 3:
                    self._view_params(trained)
                    viewed = list(range(len(trained)))
                else:
                    viewed = [k for k, p in enumerate(zincs)
                              if self._sg[self._group_of[id(p)]].whole]
                    for gi in sorted({self._group_of[id(zincs[k])] for k in viewed}):
                        self._view_whole(self._sg[gi])
                if failed and snap is not None:
                    # a block that raised takes nothing: the modifier's in-place changes of
                    # what it holds whole (zinc's views, the untrained tensors) are undone
                    n = len(trained) + len(pieces)
                    self._put_back([zincs[k] for k in viewed] + others,
                                   [snap[k] for k in viewed] + snap[n:])
        if bad is not None:
            raise ValueError(f"zinc.zero.GatheredParameters: rank {root} changed the shape of "
                             f"a parameter to {bad}: only its values may change")

    def _put_back(self, params, snap):
        """Stages 0-2 (and stage 3's persistent groups, views too), a context that raised: the
        modifier rank's values as they were at its entry. Its changes are not taken then (nor
        at stage 3, where the other groups are emptied),
        but an in-place change of a trained parameter had written zinc's working copy, which the
        next forward used while the fp32 master kept the old value: the weight the step then
        wrote was neither. The working copy is set back in place (its values only: the master
        did not change); an untrained tensor gets its old values, or its old tensor where the
        block replaced its shape or dtype."""
        for p, old in zip(params, snap):
            if p.shape == old.shape and p.dtype == old.dtype:
                p.data.copy_(old)
            else:
                p.data = old

    def _let_go(self, groups):
        """Stage 3: a context's hold on `groups` ends; those no forward holds are emptied."""
        for gi in groups:
            G = self._sg[gi]
            G.ctx -= 1
            if G.holds == 0:
                self._dematerialize(gi)

    def _view_params(self, params):
        """Stages 0-2: each parameter's `param.data` a view of zinc's working copy (no copy)."""
        for p in params:
            pid = self._pid_of[id(p)]
            ptr = ctypes.c_void_p()
            self._call(lib.zinc_param_data(self._e, pid, ctypes.byref(ptr)))
            p.data = _memory.view(self._e, ptr.value, _numel(self._shapes[pid]), self._code,
                                  self._shapes[pid], self._device)

    def _take_changes(self, trained, pieces, others, root, snap):
        """_context_exit's broadcast of the modifier rank's changes. Returns the new shape of a
        parameter whose shape it changed (nothing taken then), else None."""
        rank = lib.zinc_engine_rank(self._e)
        params = trained + pieces + others
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
        for k, p in enumerate(pieces, len(trained)):
            if flags[k]:        # stage 3's frozen pieces: the frozen engine's values
                shape = self._fshapes[self._fpid_of[id(p)]]
                buf = (p.detach().to("cpu", torch.float32).contiguous() if rank == root
                       else torch.empty(shape, dtype=torch.float32))
                self._broadcast(buf, root)
                self._frozen_set(p, buf)
        changed = [k for k in range(len(trained) + len(pieces), len(params)) if flags[k]]
        if rank == root:      # a changed dtype: the other ranks still have the one it had
            for k in changed:
                params[k].data = params[k].data.to(snap[k].dtype)
        self._broadcast_into([params[k] for k in changed], root)
        # zinc -> torch (RAW): the values set are in place before torch reads them.
        self._zinc_then_torch()
        return None
