"""test_torch_stage3.py — what the Python front-end does during a step, beyond parity.

    python test_torch_stage3.py memory          stage 3 shards: zinc's 16-bit parameter bytes per
                                                rank ~ 2*psi/N between steps, the model holds no
                                                parameter memory then, and during forward and
                                                backward torch holds at most two groups (at
                                                stage3_max_reuse_distance 0)
    python test_torch_stage3.py reuse           stage3_max_reuse_distance: the groups kept from
                                                forward for backward are the ones DeepSpeed's
                                                rule keeps, at six distances, with the same
                                                losses bit for bit
    python test_torch_stage3.py overlap STAGE   groups are handed to zinc (zinc_grads_ready)
                                                during backward, once per group per micro-step
    python test_torch_stage3.py odd STAGE       a model with unused parameters, a module called
                                                twice, tuple/dict outputs and integer outputs,
                                                reads of other modules' weights (one declared
                                                with register_external_parameter) trains as
                                                plain torch does (the parity bound)
    python test_torch_stage3.py actckpt STAGE   activation checkpointing (torch.utils.checkpoint
                                                reentrant and not, zinc.checkpointing) trains as
                                                plain torch; at stage 3 the recomputation gathers
                                                and releases within the bound
    python test_torch_stage3.py groups STAGE    model_parameters as param groups with their own
                                                weight decay (0.1 for matrices, 0 for the rest),
                                                and with their own lr too, trains as
                                                torch.optim.AdamW with those groups
    python test_torch_stage3.py client STAGE    a client torch.optim.AdamW (with param groups),
                                                torch.optim.Adam (L2 decay), a client LambdaLR
                                                scheduler (one rule per group too), a client
                                                OneCycleLR cycling beta1, and lr, weight decay,
                                                eps and betas written into param_groups by the
                                                loop train as in plain torch; a client AdamW
                                                under the config's scheduler as the config's
                                                optimizer
    python test_torch_stage3.py warnings        a config warning arrives as zinc.ZincConfigWarning
    python test_torch_stage3.py persistent      persistent groups are whole in the module between
                                                steps (views of zinc's copy), and train bit for
                                                bit as with persistence off
    python test_torch_stage3.py measure [STEPS] not a test: examples/torch_gpt.py's model at stage 3
                                                bf16, median step time and the largest parameter
                                                bytes torch held (docs/python.md's figures)
Any of them under mpirun too. How each can fail is said at its check. Exit 77 without torch.
"""
import math
import os
import statistics
import sys
import time
import warnings

from _common import torch, zinc
from test_torch_parity import Tiny  # noqa: E402 — the parity test's model

import zinc.engine as zeng  # noqa: E402
from zinc import _accessors, _handover, _stage3, _state_io, _values, _world  # noqa: E402

# The modules of the engine (engine.py and its parts): each calls libzinc through its own `lib`.
_ENGINE_MODULES = (zeng, _world, _stage3, _handover, _values, _accessors, _state_io)


def set_lib(lib):
    """Makes `lib` (a Spy, or the real libzinc back) the one every module of the engine calls."""
    for m in _ENGINE_MODULES:
        m.lib = lib


class Spy:
    """Stands in for libzinc in the engine's modules (set_lib): records
    zinc_gather/zinc_release/zinc_grads_ready calls and calls `on_release` after every
    zinc_release (the engine has just copied a group into the model's parameters then: the
    moments torch holds the most)."""

    def __init__(self, lib):
        self._lib, self.events, self.on_release = lib, [], None

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name not in ("zinc_release", "zinc_grads_ready"):
            return f

        def call(e, g):
            s = f(e, g)
            self.events.append((name, g))
            if name == "zinc_release" and self.on_release:
                self.on_release()
            return s
        return call


def config(stage, ga=1, bf16=False, **zero):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.999],
                                                    "eps": 1e-8, "weight_decay": 0.01}},
         "gradient_clipping": 1.0, "zero_optimization": dict(stage=stage, **zero)}
    if bf16:
        c["bf16"] = {"enabled": True}
    return c


def param_bytes(model):
    return sum(p.data.numel() * p.data.element_size() for p in model.parameters())


class Chain(torch.nn.Module):
    """LAYERS blocks of LayerNorm -> Linear -> GELU, the blocks owning no parameters themselves:
    2 * LAYERS groups, the Linear ones the largest."""

    def __init__(self, d=64, layers=6):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, d), torch.nn.GELU())
            for _ in range(layers))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


def test_memory():
    torch.manual_seed(0)
    m = Chain()
    psi = sum(p.numel() for p in m.parameters())
    # Persistence off: every group is gathered on demand (a persistent group stays in zinc's
    # memory whole, by design, and would not be part of the 2*psi/N).
    spy = Spy(zeng.lib)
    set_lib(spy)
    # Reuse distance 0: every group emptied when its module ends (the default keeps the groups
    # a backward will use soon: test_reuse_distance).
    engine, _, _, _ = zinc.initialize(model=m, config=config(3, ga=2, bf16=True,
                                      stage3_param_persistence_threshold=0,
                                      stage3_max_reuse_distance=0))
    world, rank = engine.world_size, engine.global_rank
    sizes = [sum(torch.Size(engine._shapes[pid]).numel() for pid, _, _ in params) * 2
             for _, params in engine._groups]
    ngroups, largest, whole = len(sizes), max(sizes), sum(sizes)
    # The bound: while a module computes, torch holds its group; in backward the group whose
    # gradients are being completed can still be held while the next one is gathered. So two
    # groups — the largest twice — whatever the depth of the model. The old engine kept every
    # group's copy from its forward to the step: `whole` (12 groups here).
    bound = 2 * largest
    assert ngroups >= 8 and bound < whole / 3, (ngroups, bound, whole)
    peak = {"now": 0}

    def sample(*_):
        peak["now"] = max(peak["now"], param_bytes(m))
    spy.on_release = sample
    for mod in m.modules():                 # after the engine's pre-hooks: the module's group held
        mod.register_forward_pre_hook(sample)
    g = torch.Generator().manual_seed(1)
    peaks, between, orders = [], [], []
    for step in range(6):
        spy.events.clear()
        x = torch.randn(4, 8, 64, generator=g).to(torch.bfloat16)
        peak["now"] = 0
        x.requires_grad_()
        x.register_hook(sample)              # during backward, after the first block's
        loss = engine(x).float().square().mean()
        engine.backward(loss)
        engine.step()
        peaks.append(peak["now"])
        between.append(param_bytes(m))
        orders.append([g for n, g in spy.events if n == "zinc_release"])
    mem = engine.memory()
    p16 = mem["param16"][1]
    want = 2 * psi / world
    print(f"stage 3 bf16, rank {rank} of {world}: {ngroups} groups, {whole} bytes of 16-bit "
          f"parameters; zinc's param16 {p16} bytes per rank ({p16 / want:.3f} x 2*psi/N), gather "
          f"ring {mem['gather'][1]} bytes; torch holds {max(between)} bytes between steps; largest "
          f"torch parameter bytes in forward+backward: {max(peaks)} (bound 2 x largest group = "
          f"{bound}; the first micro-step {peaks[0]})")
    ok = True
    if not (want <= p16 <= 1.25 * want) or max(between) != 0:
        print("FAIL: stage 3 does not shard the parameters between steps")
        ok = False
    # zinc prefetches along the order of the first micro-step's zinc_gather calls (its trace)
    # only while later micro-steps repeat it.
    if any(o != orders[0] for o in orders):
        print(f"FAIL: the gather order changes between micro-steps (zinc's prefetch stops): {orders}")
        ok = False
    # The first micro-step too: it is zinc's trace of the gather order, but the model does not
    # stay gathered for it (the engine before gather-on-read kept every group: `whole`).
    if max(peaks) > bound or min(peaks) == 0:
        print("FAIL: torch held more than two groups' parameters during a step (or none: the "
              "sampling saw nothing)")
        ok = False
    return 0 if ok else 1


class SkipChain(Chain):
    """Chain whose forward leaves block `skip` out when it is set (a changed module order)."""

    skip = None

    def forward(self, x):
        for i, b in enumerate(self.blocks):
            if i != self.skip:
                x = x + b(x)
        return x


def test_persistent():
    """Persistent groups (below stage3_param_persistence_threshold) are whole in the module
    between steps, as DeepSpeed keeps such parameters: `param.data` views zinc's full copy, so
    model.state_dict() (a PEFT save_pretrained) reads their values. Before 2026-12-01 they were
    empty tensors there, and each forward copied them in and out. Checked on Chain with the
    LayerNorm groups (128 elements) persistent and the Linear ones (4160) not:
    - the losses and final weights are bit for bit those of the run with persistence off;
    - after every step the LayerNorm parameters are whole with the engine's values
      (module_state_dict, which gathers) and the Linear ones empty;
    - the LayerNorm modules carry no forward hook of zinc's (nothing to gather);
    - a GatheredParameters(modifier_rank=0) write to a LayerNorm weight is every rank's view
      and master; a block that raises takes nothing, a replaced `param.data` (another dtype)
      and a refused shape change leave zinc's view and training goes on (context_cases); a
      load_checkpoint puts the
      saved values in the views; after close() they keep their values (copies)."""
    import tempfile
    bad = []

    def is_norm(n):               # blocks.<i>.0.*: each block's LayerNorm (persistent)
        return n.split(".")[2] == "0"

    def run(threshold, extra):
        torch.manual_seed(0)
        m = Chain(layers=3)
        engine, _, _, _ = zinc.initialize(model=m, config=config(
            3, ga=2, bf16=True, stage3_param_persistence_threshold=threshold))
        gen = torch.Generator().manual_seed(1 + engine.global_rank)
        losses = []
        for step in range(4):
            for _ in range(2):
                x = torch.randn(4, 64, generator=gen).to(torch.bfloat16)
                loss = engine(x).float().pow(2).mean()
                engine.backward(loss)
                engine.step()
                losses.append(float(loss))
            if extra:
                extra(engine, m, step)
        final = {n: t.clone() for n, t in engine.module_state_dict().items()}
        return engine, m, losses, final

    def whole_ok(engine, m, when):
        full = engine.module_state_dict()
        for n, p in m.named_parameters():
            if is_norm(n):
                if p.numel() != full[n].numel() or not torch.equal(p.detach(), full[n]):
                    bad.append(f"{when}: {n} is not whole with the engine's values "
                               f"({p.numel()} elements)")
            elif p.numel() != 0:
                bad.append(f"{when}: {n} (partitioned) holds {p.numel()} elements")

    def context_cases(engine, m, persistent):
        """GatheredParameters(modifier_rank=0) over a LayerNorm's parameters: a block that
        raises after an in-place edit takes nothing on any rank; a `param.data` replaced by a
        tensor of another dtype gives its values to every rank, and the model holds zinc's view
        again; a shape change is refused and leaves the old values. Training goes on after
        each, under mpirun too. (With persistent groups the first two left rank 0's edit or
        tensor in the model until the next step; and a replacement of another dtype, the last
        two, made torch drop the parameter's gradient node with zinc's hand-over hook on it,
        so that rank 0 handed the group over out of order: under mpirun the next
        reduce-scatters paired wrongly, MPI_ERR_IN_STATUS, persistence on or off.)"""
        rank = engine.global_rank
        w, b = m.blocks[2][0].weight, m.blocks[2][0].bias
        before = engine.module_state_dict()["blocks.2.0.weight"].clone()
        try:
            with zinc.zero.GatheredParameters([w], modifier_rank=0):
                if rank == 0:
                    w.data.mul_(3)
                raise KeyError("inside the block")
        except KeyError:
            pass
        if not torch.equal(engine.module_state_dict()["blocks.2.0.weight"], before) or (
                persistent and not torch.equal(w.detach(), before)):
            bad.append(f"rank {rank}: a block that raised left its in-place edit "
                       f"({w.detach()[:2]} vs {before[:2]})")
        with zinc.zero.GatheredParameters([b], modifier_rank=0):
            if rank == 0:
                b.data = torch.full(b.shape, 0.25, dtype=torch.float32)    # another dtype
        got = engine.module_state_dict()["blocks.2.0.bias"]
        if not torch.all(got == 0.25) or (persistent and not (
                b.dtype == got.dtype and torch.equal(b.detach(), got))):
            bad.append(f"rank {rank}: a replaced bias is not every rank's zinc view "
                       f"({b.dtype}, {b.detach()[:2]}; engine {got[:2]})")
        try:
            with zinc.zero.GatheredParameters([b], modifier_rank=0):
                if rank == 0:
                    b.data = torch.ones(3)              # another shape, and dtype
            bad.append(f"rank {rank}: a changed shape was not refused")
        except ValueError:
            pass
        got = engine.module_state_dict()["blocks.2.0.bias"]
        if not torch.all(got == 0.25) or (persistent and tuple(b.shape) != tuple(got.shape)):
            bad.append(f"rank {rank}: after the refused shape change the bias is "
                       f"{tuple(b.shape)}, engine {got[:2]}")

    def checks(engine, m, step):
        whole_ok(engine, m, f"after step {step + 1}")
        if step == 0:
            hooked = [n for n, mod in m.named_modules() if isinstance(mod, torch.nn.LayerNorm)
                      and (mod._forward_pre_hooks or mod._forward_hooks)]
            if hooked:
                bad.append(f"LayerNorm modules with forward hooks: {hooked}")
        if step == 1:
            w = m.blocks[1][0].weight
            with zinc.zero.GatheredParameters([w], modifier_rank=0):
                if engine.global_rank == 0:
                    w.data.fill_(0.5)
            got = engine.module_state_dict()["blocks.1.0.weight"]
            if not (torch.all(w.detach() == 0.5) and torch.all(got == 0.5)):
                bad.append(f"rank {engine.global_rank}: the modifier's write is not the view's "
                           f"and the engine's: {w.detach()[:3]} {got[:3]}")
            context_cases(engine, m, True)
            box = [tempfile.mkdtemp(prefix="zinc-persist-") if engine.global_rank == 0 else None]
            torch.distributed.broadcast_object_list(box, 0)
            engine.save_checkpoint(box[0], tag="t")
            state["saved"] = {n: t.clone() for n, t in engine.module_state_dict().items()}
            state["dir"] = box[0]
        if step == 2:
            engine.load_checkpoint(state["dir"], tag="t")
            whole_ok(engine, m, "after load_checkpoint")
            for n, p in m.named_parameters():
                if is_norm(n) and not torch.equal(p.detach(), state["saved"][n]):
                    bad.append(f"after load_checkpoint: {n} is not the saved value")

    state = {}
    engine, m, losses, final = run(1000, checks)
    if not any(getattr(G, "whole", False) for G in engine._g):
        bad.append("no group is persistent (zinc_group_persistent)")
    engine.close()
    for n, p in m.named_parameters():
        if is_norm(n) and not torch.equal(p.detach(), final[n]):
            bad.append(f"after close(): {n} lost its values")
    if engine.global_rank == 0:
        import shutil
        shutil.rmtree(state["dir"], ignore_errors=True)

    def same_edits(engine, m, step):     # the other run's writes and load, without the checks
        if step == 1:
            w = m.blocks[1][0].weight
            with zinc.zero.GatheredParameters([w], modifier_rank=0):
                if engine.global_rank == 0:
                    w.data.fill_(0.5)
            context_cases(engine, m, False)
            box = [tempfile.mkdtemp(prefix="zinc-persist-") if engine.global_rank == 0 else None]
            torch.distributed.broadcast_object_list(box, 0)
            engine.save_checkpoint(box[0], tag="t")
            state["dir0"] = box[0]
        if step == 2:
            engine.load_checkpoint(state["dir0"], tag="t")
    engine0, _, losses0, final0 = run(0, same_edits)
    if any(getattr(G, "whole", False) for G in engine0._g):
        bad.append("threshold 0: a group is persistent")
    engine0.close()
    if engine0.global_rank == 0:
        import shutil
        shutil.rmtree(state["dir0"], ignore_errors=True)
    if losses != losses0:
        bad.append(f"losses differ from persistence off: {losses} vs {losses0}")
    diff = [n for n in final if not torch.equal(final[n], final0[n])]
    if diff:
        bad.append(f"final weights differ from persistence off: {diff}")
    for b in bad:
        print("FAIL:", b)
    print(f"persistent groups: {len(losses)} micro-steps, losses {losses[0]:.6f} .. "
          f"{losses[-1]:.6f}; {len(bad)} failure(s)")
    return 1 if bad else 0


def test_reuse_distance():
    """stage3_max_reuse_distance as DeepSpeed counts it: a group is kept gathered from its
    release to its next use when the uses between cover fewer elements than the distance.
    Chain's 6 blocks use LayerNorm (128 elements) then Linear (4160) in forward and the reverse
    in backward. Released in forward, block i's Linear is next used after (5 - i) * 8576
    elements (the blocks after it, forward and backward), its LayerNorm after 8320 more (the
    Linear twice). So from the second micro-step on (the first records the order), a
    micro-step's backward gathers 12 groups at distance 0, 11 at 1 (block 5's Linear kept) and
    at 8320 (fewer elements than the distance, not as many), 10 at 8321 (its LayerNorm too), 9
    at 8577 (block 4's Linear) and none at the default 1e9.
    At every distance: the same losses bit for bit, a weight set between a forward and its
    backward included (what was kept is dropped: the backward reads the new value), whole or
    each rank its fragment (under 2 ranks one rank's is empty: it drops what it kept too, or
    its backward skips the gathers the other makes, a hang); nothing
    kept after a forward without grad, after a step, or after empty_partition_cache following
    a forward with grad and no backward (which keeps groups at every distance but 0); a
    micro-step that leaves block 2 out (the order changes: what was kept goes, nothing after
    its forward, the order is recorded again) trains as at distance 0."""
    cases = [(0, 12), (1, 11), (8320, 11), (8321, 10), (8577, 9), (10**9, 0)]
    ok, ref, world = True, None, zinc.world_size()
    for dist, want_bwd in cases:
        torch.manual_seed(0)
        m = SkipChain()
        spy = Spy(zeng.lib)
        set_lib(spy)
        engine, _, _, _ = zinc.initialize(model=m, config=config(
            3, ga=2, bf16=True, stage3_param_persistence_threshold=0,
            stage3_max_reuse_distance=dist))
        g = torch.Generator().manual_seed(1)
        losses, gathers, after, left, cache = [], [], [], None, None
        for micro in range(12):
            m.skip = 2 if micro == 6 else None
            spy.events.clear()
            x = torch.randn(4, 8, 64, generator=g).to(torch.bfloat16)
            loss = engine(x).float().square().mean()
            if micro == 6:      # the pass left the order at block 2: blocks 0-1 kept no more
                left = param_bytes(m)
            if micro == 8:      # a weight set between forward and backward: its backward (and
                w = m.blocks[5][1].weight     # the step) use the new value at every distance
                zinc.utils.safe_set_full_fp32_param(
                    w, zinc.utils.safe_get_full_fp32_param(w) * 0.5)
            if micro == 9:      # the same with each rank's fragment; under 2 ranks one rank's
                b = m.blocks[5][0].bias       # is empty, and it must drop what it kept too
                frag = zinc.utils.safe_get_local_fp32_param(b)
                whole = m.blocks[5][0].normalized_shape[0]   # (b.numel() is 0 between uses)
                empty_somewhere = frag.numel() in (0, whole)      # this rank's or the other's
                zinc.utils.safe_set_local_fp32_param(b, frag * 0.5)
            engine.backward(loss)
            engine.step()
            losses.append(float(loss.detach()))
            gathers.append(sum(1 for n, _ in spy.events if n == "zinc_release"))
            after.append(param_bytes(m))
            if micro == 3:
                with torch.no_grad():
                    engine(x)
                after.append(param_bytes(m))
                engine(x)       # with grad and no backward: kept until empty_partition_cache
                cache = param_bytes(m)
                engine.empty_partition_cache()
                after.append(param_bytes(m))
        set_lib(spy._lib)
        engine.close()
        if ref is None:
            ref = losses
        # Micro-steps 1-5 follow the order; 6 leaves block 2 out and becomes the order; 7
        # leaves that one (block 2 is back) and becomes the order; 8-11 follow it, 8's weight
        # set and 9's fragment set dropping what their forwards kept (their backwards gather
        # all 12).
        settled = [gathers[k] for k in (1, 2, 3, 4, 5, 10, 11)]
        print(f"stage3_max_reuse_distance {dist}: gathers per micro-step {gathers} (after the "
              f"first, {12 + want_bwd} expected); losses the same as at 0: {losses == ref}; "
              f"torch parameter bytes after each step and the no-grad forward: {max(after)}")
        if any(k != 12 + want_bwd for k in settled) or gathers[0] != 24 or gathers[8] != 24 \
                or gathers[9] != 24:
            print(f"FAIL: distance {dist}: not the gathers DeepSpeed's rule keeps")
            ok = False
        if losses != ref:
            print(f"FAIL: distance {dist} changed the losses")
            ok = False
        if world > 1 and not empty_somewhere:
            print("FAIL: under 2 ranks the fragment set was meant to be empty on one rank")
            ok = False
        print(f"  after the forward that left the order: {left} parameter bytes; after a "
              f"forward with grad and no backward: {cache}, then 0 expected after "
              f"empty_partition_cache")
        if max(after) != 0:
            print(f"FAIL: distance {dist}: parameters stay gathered after a step, a forward "
                  "without grad or empty_partition_cache")
            ok = False
        if left != 0 or (cache > 0) != (dist > 0):
            print(f"FAIL: distance {dist}: groups kept past a change of order, or a forward "
                  "with grad kept none (or kept some at distance 0)")
            ok = False
    return 0 if ok else 1


def test_overlap(stage):
    torch.manual_seed(0)
    layers = 8
    m = torch.nn.Sequential(*(torch.nn.Linear(32, 32) for _ in range(layers)))
    spy = Spy(zeng.lib)
    set_lib(spy)
    engine, _, _, _ = zinc.initialize(model=m, config=config(stage, ga=2))
    g = torch.Generator().manual_seed(1)
    ok = True
    for micro in range(4):
        spy.events.clear()
        x = torch.randn(4, 32, generator=g).requires_grad_()
        # x's gradient is computed by the first layer's backward: the last module backward of
        # the pass. Handing over after autograd (the old engine) puts every group after it.
        x.register_hook(lambda grad: spy.events.append(("input-grad", -1)))
        engine.backward(engine(x).square().mean())
        engine.step()
        order = [g for n, g in spy.events if n == "zinc_grads_ready"]
        at = [n for n, _ in spy.events].index("input-grad")
        before = sum(1 for n, _ in spy.events[:at] if n == "zinc_grads_ready")
        print(f"stage {stage}, micro-step {micro}: zinc_grads_ready order {order}; {before} of "
              f"{layers} groups handed over before the first layer's backward")
        if sorted(order) != list(range(layers)):
            print("FAIL: not once per group per micro-step")
            ok = False
        if before < layers - 1 or order[0] != layers - 1:
            print("FAIL: the hand-over does not overlap backward")
            ok = False
    return 0 if ok else 1


class TwoOut(torch.nn.Module):
    """Returns a tuple: a tensor that needs grad and an integer tensor that cannot."""

    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.spare = torch.nn.Parameter(torch.randn(d))    # never used: no gradient

    def forward(self, x):
        return self.lin(x), (x > 0).sum(-1)


class DictOut(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x):
        return {"h": self.ln(x), "n": x.shape[-1]}


class Odd(torch.nn.Module):
    read_by_top = ["emb", "head", "two.lin"]
    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.shared = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, d),
                                          torch.nn.ReLU(inplace=True))   # in place on an output
        self.two = TwoOut(d)
        self.dict = DictOut(d)
        self.unused = torch.nn.Linear(d, d)                  # never called
        self.head = torch.nn.Linear(d, vocab)
        # A reference that bypasses the owning module's attribute: reading through it cannot
        # gather at stage 3, so it is declared (without the declaration the forward raises).
        self.bias_ref = [self.two.lin.bias]
        zinc.register_external_parameter(self, self.two.lin.bias)

    def forward(self, tok):
        # Another module's parameter read through its attribute, before that module runs
        # (gathered at the read, for this module).
        x = self.emb(tok) + self.head.bias[:16]
        x = x + self.shared(x)
        x = x + self.shared(torch.tanh(x))                   # the same module again
        y, count = self.two(x)
        x = x + y * (count.float().mean() > -1)
        # ... and after that module's forward.
        return self.head(self.dict(x)["h"] * self.emb.weight[0]) + self.bias_ref[0][0]


class Checkpointed(Tiny):
    """Activation checkpointing: blocks re-run in backward by torch.utils.checkpoint, both
    kinds (reentrant: the re-run is a backward of its own; non-reentrant: saved-tensor hooks)
    and zinc.checkpointing's; a head tied to the embedding through its attribute."""
    read_by_top = ["emb"]

    def __init__(self):
        super().__init__(layers=4)

    def forward(self, tok):
        import torch.utils.checkpoint as ckpt
        x = self.emb(tok)
        for i, b in enumerate(self.blocks):
            if i % 3 == 0:
                x = x + ckpt.checkpoint(b, x, use_reentrant=True)
            elif i % 3 == 1:
                x = x + ckpt.checkpoint(b, x, use_reentrant=False)
            else:
                x = x + zinc.checkpointing.checkpoint(b, x)
        return self.ln(x) @ self.emb.weight.t()


class CheckpointedFunction(Tiny):
    """Activation checkpointing of a plain function (a method, not a module) that reads a
    block's last weight through its attribute after running the block (blocks 0-1) or before
    (blocks 2-3, the read kept in a local the function uses after the block ran), reentrant
    for the even blocks and not for the odd. In the backward's recomputation no module's
    forward is running, and the read must still find the weight gathered, and keep it so while
    the block runs: zinc left it the empty tensor its module's forward had emptied (reentrant:
    a shape error; non-reentrant: the recomputed metadata differed), where DeepSpeed gathers on
    any read; and a read before the block was emptied again by the block's end. The first,
    no-grad pass reads it inside the top module's forward, which holds it."""
    read_by_top = ["emb", "blocks.0.3", "blocks.1.3", "blocks.2.3", "blocks.3.3"]

    def __init__(self):
        super().__init__(layers=4)

    def segment(self, b, x, read_first):
        w = b[3].weight if read_first else None
        h = b(x)
        w = b[3].weight if w is None else w
        return h + x @ w[:, :x.shape[-1]]

    def forward(self, tok):
        import torch.utils.checkpoint as ckpt
        x = self.emb(tok)
        for i, b in enumerate(self.blocks):
            x = x + ckpt.checkpoint(self.segment, b, x, i >= 2, use_reentrant=i % 2 == 0)
        return self.ln(x) @ self.emb.weight.t()


def test_odd(stage):
    return train_like_torch(Odd, "odd model", stage)


def test_activation_checkpointing(stage):
    return (train_like_torch(Checkpointed, "activation checkpointing", stage) |
            train_like_torch(CheckpointedFunction, "activation checkpointing of a function "
                             "reading a weight before or after its module ran", stage))


def decay_groups(model):
    """The usual split (HF Trainer's, nanoGPT's): matrices decayed, biases and norms not; both
    decays differ from the config's 0.01, so zinc must take them from the groups."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


class Grouped(Tiny):
    """The parity test's model, trained with decay_groups."""
    read_by_top = ["emb"]
    groups = staticmethod(decay_groups)


def lr_groups(model):
    """decay_groups with a learning rate each, neither the config's 3e-3 (DeepSpeed's optimizer
    takes a group's lr from the group; zinc_group_set_lr)."""
    groups = decay_groups(model)
    groups[0]["lr"], groups[1]["lr"] = 5e-3, 1e-3
    return groups


class LrGrouped(Tiny):
    """The parity test's model, trained with lr_groups."""
    read_by_top = ["emb"]
    groups = staticmethod(lr_groups)


def adam_groups(model):
    """lr_groups with their own betas and eps, neither the config's (0.9, 0.999) and 1e-8:
    torch's Adam keeps them per group, its bias corrections from each group's betas
    (zinc_group_set_betas, zinc_group_set_eps)."""
    groups = lr_groups(model)
    groups[0].update(betas=(0.8, 0.95), eps=1e-6)
    groups[1].update(betas=(0.5, 0.9), eps=1e-4)
    return groups


class AdamGrouped(Tiny):
    """The parity test's model, trained with adam_groups."""
    read_by_top = ["emb"]
    groups = staticmethod(adam_groups)


class ClientAdamGroups(Tiny):
    """A client AdamW whose groups have their own betas, eps, lr and decay."""
    read_by_top = ["emb"]

    @staticmethod
    def client(model):
        return torch.optim.AdamW(adam_groups(model), lr=2e-3, eps=1e-8)


def test_param_groups(stage):
    return (train_like_torch(Grouped, "param groups (decay 0.1 / 0)", stage) |
            train_like_torch(LrGrouped, "param groups (lr 5e-3 / 1e-3, decay 0.1 / 0)", stage) |
            train_like_torch(AdamGrouped, "param groups (betas, eps, lr and decay each)",
                             stage) |
            train_like_torch(ClientAdamGroups, "client AdamW, betas and eps per group", stage))


class ClientAdamW(Tiny):
    """initialize(optimizer=torch.optim.AdamW(groups)): its lr, not the config's, and its groups'
    decays."""
    read_by_top = ["emb"]

    @staticmethod
    def client(model):
        return torch.optim.AdamW(decay_groups(model), lr=2e-3, eps=1e-8)


class ClientAdam(Tiny):
    """initialize(optimizer=torch.optim.Adam(..., weight_decay=0.05)): L2 decay, added to the
    gradient (zinc's "Adam" with adam_w_mode false)."""
    read_by_top = ["emb"]

    @staticmethod
    def client(model):
        return torch.optim.Adam(model.parameters(), lr=2e-3, eps=1e-8, weight_decay=0.05)


class ClientScheduled(ClientAdamW):
    """... with a client LR scheduler (linear warmup then decay, LambdaLR as HF's
    get_linear_schedule_with_warmup builds it), stepped by engine.step()."""

    @staticmethod
    def scheduler(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min((s + 1) / 4, max(0.0, (12 - s) / 8)))


class ClientGroupSchedule(Tiny):
    """A client AdamW whose groups have their own lr, and a LambdaLR with a rule per group
    (warmup for the matrices, decay for the rest): each group's lr changes on its own."""
    read_by_top = ["emb"]

    @staticmethod
    def client(model):
        return torch.optim.AdamW(lr_groups(model), lr=2e-3, eps=1e-8)

    @staticmethod
    def scheduler(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, [lambda s: min((s + 1) / 4, 1.0), lambda s: 1.0 / (1 + 0.2 * s)])


class ClientOneCycle(ClientAdamW):
    """... with torch's OneCycleLR, which cycles AdamW's beta1 (cycle_momentum, its default)
    as well as the lr: the betas it writes into the groups apply at each step."""

    @staticmethod
    def scheduler(optimizer):
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[6e-3, 4e-3],
                                                   total_steps=12, base_momentum=0.6,
                                                   max_momentum=0.95)


class ManualLr(Tiny):
    """The config's optimizer, the loop writing each step's lr into the returned optimizer's
    param_groups (nanoGPT's way)."""
    read_by_top = ["emb"]

    @staticmethod
    def write_groups(step, groups):
        for g in groups:
            g["lr"] = 3e-3 * (0.2 + 0.8 * step / 12)


class ManualAdam(Tiny):
    """decay_groups, the loop writing each step's weight decay into the groups that decay (a
    weight-decay schedule, as DINO's loop writes one), and each group's eps and betas."""
    read_by_top = ["emb"]
    groups = staticmethod(decay_groups)

    @staticmethod
    def write_groups(step, groups):
        for i, g in enumerate(groups):
            if g["weight_decay"]:
                g["weight_decay"] = 0.04 + 0.36 * step / 12
            g["eps"] = 1e-8 * 10 ** (step % 4)
            g["betas"] = (0.9 - 0.02 * step * (i + 1), 0.999 - 0.01 * step)


def cosine_ratio(it, warmup=4, total=12, warmup_min=0.1, cos_min=0.05):
    """DeepSpeed's WarmupCosineLR.get_lr_ratio (linear warmup) at last_batch_iteration `it`;
    an optimizer step k (from 0) runs at iteration k - 1, the first at -1: ratio 0."""
    if it < 0:
        return 0.0
    if it < warmup:
        return warmup_min + it / warmup * (1.0 - warmup_min)
    progress = min(1.0, (it - warmup + 1) / max(1, total - warmup))
    return max(0.0, cos_min + (1.0 - cos_min) * (1 + math.cos(math.pi * progress)) / 2)


class CosineGroups(Tiny):
    """lr_groups (5e-3 / 1e-3) under the config's WarmupCosineLR: as DeepSpeed's, each group's
    lr is its own lr times the schedule's ratio."""
    read_by_top = ["emb"]
    groups = staticmethod(lr_groups)
    config_scheduler = {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 12, "warmup_num_steps": 4, "warmup_min_ratio": 0.1,
        "cos_min_ratio": 0.05, "warmup_type": "linear"}}

    @staticmethod
    def ref_lr(step, own_lr):
        return own_lr * cosine_ratio(step - 1)


class WarmupGroups(Tiny):
    """lr_groups under the config's WarmupLR: as DeepSpeed's, the schedule sets every group's
    lr (the groups' own are not used), and rank 0 warns naming them."""
    read_by_top = ["emb"]
    groups = staticmethod(lr_groups)
    config_scheduler = {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3, "warmup_num_steps": 5,
        "warmup_type": "linear"}}
    warns = "is not used"

    @staticmethod
    def ref_lr(step, own_lr):
        it = step - 1              # DeepSpeed's WarmupLR.get_lr at last_batch_iteration it
        return 1e-4 if it < 0 else 1e-4 + (3e-3 - 1e-4) * min(1.0, it / 5)


class WarmupOwnMax(Tiny):
    """lr_groups under the config's WarmupLR without warmup_max_lr (log warm-up): as
    DeepSpeed's, each group warms up from warmup_min_lr to its own lr (DeepSpeed's default for
    warmup_max_lr is the group's lr), and nothing warns. zinc warmed every group up to the
    config's optimizer lr before, and warned that the groups' own were not used."""
    read_by_top = ["emb"]
    groups = staticmethod(lr_groups)
    config_scheduler = {"type": "WarmupLR", "params": {"warmup_min_lr": 2e-4,
                                                       "warmup_num_steps": 5}}

    @staticmethod
    def ref_lr(step, own_lr):
        it = step - 1              # DeepSpeed's WarmupLR.get_lr at last_batch_iteration it
        if it < 0:
            return 2e-4
        gamma = (1.0 / math.log(5)) * math.log(it + 1) if it < 5 else 1.0
        return 2e-4 + (own_lr - 2e-4) * gamma


def test_client_optimizer(stage):
    return (train_like_torch(ClientAdamW, "client torch.optim.AdamW with groups", stage) |
            train_like_torch(ClientAdam, "client torch.optim.Adam, L2 decay", stage) |
            train_like_torch(ClientScheduled, "client AdamW and LambdaLR scheduler", stage) |
            train_like_torch(ClientGroupSchedule, "client AdamW, an lr and a LambdaLR rule per "
                             "group", stage) |
            train_like_torch(ClientOneCycle, "client AdamW and OneCycleLR cycling beta1",
                             stage) |
            train_like_torch(ManualLr, "lr written into param_groups", stage) |
            train_like_torch(ManualAdam, "weight decay, eps and betas written into "
                             "param_groups", stage) |
            train_like_torch(CosineGroups, "group lrs under the config's WarmupCosineLR",
                             stage) |
            train_like_torch(WarmupGroups, "group lrs under the config's WarmupLR", stage) |
            train_like_torch(WarmupOwnMax, "group lrs under the config's WarmupLR without "
                             "warmup_max_lr", stage) |
            client_under_config_schedule(stage))


def client_under_config_schedule(stage):
    """A client AdamW with the config optimizer's values, under the config's scheduler: as in
    DeepSpeed the config's schedule sets the client optimizer's lr, so the run equals the
    config optimizer's bitwise, weights and lr of every step (and the lr does move). Fails when
    the client optimizer's lr is applied in place of the schedule. Before each step the
    optimizer's groups and get_lr() show the lr that step applies, as DeepSpeed's do once its
    scheduler stepped (from initialize on: the warmup's min lr)."""
    def run(client):
        torch.manual_seed(0)
        m = Tiny()
        cfg = config(stage, stage3_param_persistence_threshold=0)
        cfg["scheduler"] = {"type": "WarmupLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 5,
            "warmup_type": "linear"}}
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01) if client else None
        engine, returned, _, _ = zinc.initialize(model=m, config=cfg, optimizer=opt)
        rank, world = engine.global_rank, engine.world_size
        gen = torch.Generator().manual_seed(7)
        lrs, shown = [], []
        for _ in range(6):
            shown.append((engine.get_lr()[0], returned.param_groups[0]["lr"]))
            tok = torch.randint(0, 32, (4 * world, 9), generator=gen)[rank * 4:(rank + 1) * 4]
            loss = torch.nn.functional.cross_entropy(
                engine(tok[:, :-1]).float().reshape(-1, 32), tok[:, 1:].reshape(-1))
            engine.backward(loss)
            engine.step()
            lrs.append(engine._info.lr)
        w = engine.module_state_dict()
        engine.close()
        if any(a != lr or b != lr for (a, b), lr in zip(shown, lrs)):
            print(f"FAIL: before each step the groups showed {shown}, the steps applied {lrs}")
            lrs = None
        return w, lrs
    want, want_lrs = run(False)
    got, got_lrs = run(True)
    same = all(torch.equal(want[k], got[k]) for k in want)
    print(f"client AdamW under the config's WarmupLR, stage {stage}: weights equal to the config "
          f"optimizer's {same}; lr per step {got_lrs}")
    if not same or not got_lrs or got_lrs != want_lrs or got_lrs[0] == got_lrs[-1]:
        print(f"FAIL: the config's schedule did not drive the client optimizer (lr {got_lrs}, "
              f"config optimizer {want_lrs})")
        return 1
    return 0


def train_like_torch(make, what, stage):
    """Trains make() with zinc at `stage` and with plain torch (AdamW, accumulation, clipping)
    from the same weights and batches: the weights (and at one rank the losses) agree within
    the parity bound. At stage 3, with stage3_max_reuse_distance 0, also: the same zinc_gather
    order in every micro-step (zinc's prefetch follows the first one's), and torch never holds
    more than the groups gathered on read plus two more; then at the default distance
    (reuse_as_without)."""
    steps, ga, glob, lr, wd = 12, 2, 8, 3e-3, 0.01

    def batches():
        g = torch.Generator().manual_seed(5)
        for _ in range(steps * ga):
            tok = torch.randint(0, 32, (glob, 9), generator=g)
            yield tok[:, :-1], tok[:, 1:]

    def loss_fn(f, x, y):
        return torch.nn.functional.cross_entropy(f(x).float().reshape(-1, 32), y.reshape(-1))

    torch.manual_seed(0)
    ref = make()
    groups = getattr(make, "groups", None)
    client = getattr(make, "client", None)
    opt = client(ref) if client else torch.optim.AdamW(
        groups(ref) if groups else ref.parameters(), lr=lr, eps=1e-8, weight_decay=wd)
    scheduler = getattr(make, "scheduler", None)          # a client LR scheduler
    write_groups = getattr(make, "write_groups", None)    # the loop writes into param_groups
    ref_lr = getattr(make, "ref_lr", None)       # the config scheduler's lr, per group's own
    own_lrs = [g["lr"] for g in opt.param_groups]
    ref_sched = scheduler(opt) if scheduler else None
    ref_losses = []
    for k, (x, y) in enumerate(batches()):
        loss = loss_fn(ref, x, y)
        (loss / ga).backward()
        ref_losses.append(float(loss.detach()))
        if k % ga == ga - 1:
            # zinc (as DeepSpeed's flat buffers) gives a parameter without a gradient a zero
            # one: AdamW still decays it; torch skips a None gradient, so give it the zeros.
            for p in ref.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            if write_groups:
                write_groups(k // ga, opt.param_groups)
            if ref_lr:
                for g, own in zip(opt.param_groups, own_lrs):
                    g["lr"] = ref_lr(k // ga, own)
            opt.step()
            opt.zero_grad()
            if ref_sched:
                ref_sched.step()
    world = zinc.world_size()
    per = glob // world

    def run_zinc(**zero):
        """zinc's run: (engine, its model, losses, zinc_release order and largest torch
        parameter bytes of each micro-step), or None after a failed warning check."""
        torch.manual_seed(0)
        m = make()
        cfg = config(stage, ga=ga, stage3_param_persistence_threshold=0, **zero)
        cfg["optimizer"]["params"].update(lr=lr, weight_decay=wd)
        cfg["train_micro_batch_size_per_gpu"] = per
        if getattr(make, "config_scheduler", None):
            cfg["scheduler"] = make.config_scheduler
        spy = Spy(zeng.lib)
        set_lib(spy)
        peak = {"now": 0}

        def sample(*_):
            peak["now"] = max(peak["now"], param_bytes(m))
        spy.on_release = sample
        zopt = client(m) if client else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine, returned_opt, _, _ = zinc.initialize(
                model=m, config=cfg, model_parameters=groups(m) if groups else None, optimizer=zopt,
                lr_scheduler=scheduler(zopt) if scheduler else None)
        rank = engine.global_rank
        said = [str(w.message) for w in caught if isinstance(w.message, RuntimeWarning)]
        warns = getattr(make, "warns", None)
        want_said = 1 if warns and rank == 0 else 0
        if len(said) != want_said or (want_said and warns not in said[0]):
            print(f"FAIL: rank {rank} warned {said}, expected {want_said} warning(s) about {warns}")
            spy.on_release = None
            set_lib(spy._lib)
            engine.close()
            return None
        losses, orders, peaks = [], [], []
        for k, (x, y) in enumerate(batches()):
            spy.events.clear()
            peak["now"] = 0
            loss = loss_fn(engine, x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per])
            engine.backward(loss)
            if write_groups:
                write_groups(k // ga, returned_opt.param_groups)
            engine.step()
            losses.append(float(loss.detach()))
            orders.append([g for n, g in spy.events if n == "zinc_release"])
            peaks.append(peak["now"])
        set_lib(spy._lib)
        return engine, m, losses, orders, peaks

    # Stage 3 with stage3_max_reuse_distance 0 (every group emptied when its module ends, for
    # the bound below); the default distance is run and compared after.
    got = run_zinc(**({"stage3_max_reuse_distance": 0} if stage == 3 else {}))
    if got is None:
        return 1
    engine, m, losses, orders, peaks = got
    rank = engine.global_rank
    w = engine.module_state_dict()
    ref_w = dict(ref.named_parameters())
    # The parity test's fp32 bound (test_torch_parity.py): relative to each tensor's largest
    # weight, 4e-6 (the unused parameters too: AdamW decays them, zinc must as well).
    worst_w = max(float((w[n] - ref_w[n]).abs().max() / ref_w[n].abs().max()) for n in ref_w)
    # One rank: the losses too (with more, each rank's loss is of its half of the batch).
    worst_l = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)) if world == 1 else 0.0
    print(f"{what}, stage {stage}, rank {rank} of {world}: max relative weight difference "
          f"{worst_w:.2e}" + (f", losses {worst_l:.2e}" if world == 1 else "") +
          f" (bound 4e-06) after {engine.global_steps} steps")
    ok = True
    if worst_w >= 4e-6 or worst_l >= 4e-6 or engine.global_steps != steps:
        print(f"FAIL: zinc and plain PyTorch parted on the {what}")
        ok = False
    if stage == 3:
        # fp32 mode: 4 bytes per element. The top module holds the groups it reads through
        # their attributes (and declared ones) for the whole forward and from the start of
        # backward; of the rest torch holds at most two modules' at a time.
        size = {}           # per module: its groups together (one per weight decay)
        for G in engine._g:
            name = G.params[0][1].rsplit(".", 1)[0]
            size[name] = size.get(name, 0) + sum(
                torch.Size(engine._shapes[pid]).numel() for pid, _, _ in G.params) * 4
        top = sum(size[n] for n in make.read_by_top)
        bound = top + 2 * max(v for n, v in size.items() if n not in make.read_by_top)
        print(f"  stage 3: {len(orders[0])} gathers per micro-step, the same order in all "
              f"{len(orders)}: {all(o == orders[0] for o in orders)}; torch held at most "
              f"{max(peaks)} parameter bytes (first micro-step {peaks[0]}; bound {bound}, "
              f"model {sum(size.values())})")
        if any(o != orders[0] for o in orders) or not orders[0]:
            print("FAIL: the gather order changes between micro-steps (zinc's prefetch stops)")
            ok = False
        if max(peaks) > bound or bound >= sum(size.values()):
            print("FAIL: torch held more parameters than the bound during a step")
            ok = False
    engine.close()                      # a world of one holds one engine at a time
    if stage == 3:
        ok = reuse_as_without(run_zinc, w, losses, orders, sum(size.values())) and ok
    return 0 if ok else 1


def reuse_as_without(run_zinc, w0, losses0, orders0, model_bytes):
    """train_like_torch's model at the default stage3_max_reuse_distance (1e9 elements: these
    models fit, so every group a backward uses stays gathered from its forward) against the run
    with 0: the same losses and weights bit for bit (a kept copy is what a gather would give);
    from the second micro-step on (the first records the order) fewer gathers, the same ones in
    every micro-step (zinc's trace, recorded again in the second, is followed after); torch
    holding at most the model once."""
    got = run_zinc()
    if got is None:
        return False
    engine, _, losses, orders, peaks = got
    w = engine.module_state_dict()
    engine.close()
    same = losses == losses0 and all(torch.equal(w[n], w0[n]) for n in w0)
    print(f"  stage 3, default stage3_max_reuse_distance: the same losses and weights bit for "
          f"bit as with 0: {same}; gathers per micro-step {len(orders[0])}, then "
          f"{len(orders[1])} (with 0: {len(orders0[1])}), the same in all later ones: "
          f"{all(o == orders[1] for o in orders[1:])}; torch held at most {max(peaks)} "
          f"parameter bytes (model {model_bytes})")
    ok = True
    if not same:
        print("FAIL: keeping groups for their reuse changed the training")
        ok = False
    if (orders[0] != orders0[0] or not len(orders[1]) < len(orders0[1])
            or any(o != orders[1] for o in orders[1:])):
        print("FAIL: the kept groups are gathered again, or the gather order does not settle")
        ok = False
    if max(peaks) > model_bytes:
        print("FAIL: torch held more than the model's parameters")
        ok = False
    return ok


def test_warnings():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    cfg = config(1)
    cfg["wall_clock_breakdown"] = True                     # accepted without effect: a warning
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine, _, _, _ = zinc.initialize(model=m, config=cfg)
    got = [str(w.message) for w in seen if issubclass(w.category, zinc.ZincConfigWarning)]
    print(f"config warnings through Python: {got}")
    if engine.global_rank == 0 and not any("wall_clock_breakdown" in s for s in got):
        print("FAIL: the config warning naming wall_clock_breakdown did not reach warnings")
        return 1
    engine.close()                                         # a world of one: one engine at a time
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        zinc.initialize(model=torch.nn.Linear(4, 4), config=config(1))
    if any(issubclass(w.category, zinc.ZincConfigWarning) for w in seen):
        print("FAIL: a clean config gave a config warning")
        return 1
    return 0


def measure(steps):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    import torch_gpt
    torch.manual_seed(0)
    m = torch_gpt.GPT()
    cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                       "zero3_bf16.json")
    spy = Spy(zeng.lib)
    set_lib(spy)
    engine, _, _, _ = zinc.initialize(model=m, config=cfg)
    peak = {"now": 0}

    def sample(*_):
        peak["now"] = max(peak["now"], param_bytes(m))
    spy.on_release = sample
    for mod in m.modules():
        mod.register_forward_pre_hook(sample)
        mod.register_forward_hook(sample)
    micro, world, rank = engine.train_micro_batch_size_per_gpu(), engine.world_size, engine.global_rank
    data = torch_gpt.markov_batches(micro * world, 32)
    times, peaks = [], []
    for step in range(steps):
        x, y = next(data)
        x, y = x[rank * micro:(rank + 1) * micro], y[rank * micro:(rank + 1) * micro]
        peak["now"] = 0
        t0 = time.perf_counter()
        logits = engine(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 32), y.reshape(-1))
        sample()
        engine.backward(loss)
        engine.step()
        times.append(time.perf_counter() - t0)
        peaks.append(peak["now"])
    whole = sum(torch.Size(s).numel() for s in engine._shapes.values()) * 2
    print(f"torch_gpt stage 3 bf16 world {world}: median step {statistics.median(times[3:]) * 1e3:.2f} "
          f"ms over {steps - 3} steps; largest torch parameter bytes in a step (after step 1) "
          f"{max(peaks[1:])}, first step {peaks[0]}, model {whole} (16-bit); final loss {float(loss):.4f}")
    return 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "memory"
    arg = int(sys.argv[2]) if len(sys.argv) > 2 else None
    if what == "memory":
        sys.exit(test_memory())
    if what == "reuse":
        sys.exit(test_reuse_distance())
    if what == "overlap":
        sys.exit(test_overlap(arg))
    if what == "odd":
        sys.exit(test_odd(arg))
    if what == "actckpt":
        sys.exit(test_activation_checkpointing(arg))
    if what == "groups":
        sys.exit(test_param_groups(arg))
    if what == "client":
        sys.exit(test_client_optimizer(arg))
    if what == "warnings":
        sys.exit(test_warnings())
    if what == "persistent":
        sys.exit(test_persistent())
    if what == "measure":
        sys.exit(measure(arg or 40))
    sys.exit(f"unknown test {what}")
