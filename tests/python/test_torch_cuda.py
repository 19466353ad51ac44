"""test_torch_cuda.py — the `import zinc` front-end with the model on a CUDA device (label gpu).

Written without a GPU (2026-11-23); passes on an NVIDIA H200 (2026-11-27, torch 2.11, the
gradient checks included; docs/cuda.md, GPU checklist item 11). At world 1, on the GPU of
LOCAL_RANK (0 without a launcher):
- parity with plain PyTorch, fp32 and bf16, stages 0-3 (and bf16 with data_types.grad_accum_dtype
  "fp32" at stage 1, and at stage 2 with communication_data_type "fp32": not yet run on a GPU,
  2026-11-30): test_torch_parity.py's model, batches and
  bounds, the reference being plain torch on the same GPU (the same forward/backward kernels, so
  only zinc's reduction and Adam differ, as on the CPU). One of them (stage 3 fp32) with torch on
  a side stream, not the default one. Losses are kept as tensors and read only at the end, so no
  per-step host sync on torch's side hides a missing stream ordering in the engine, and a sleep
  kernel before each backward (on torch's stream), each step, each zinc_grads_ready and each
  zinc_gather (on zinc's) makes the stream that writes run late: a hand-over without ordering
  then reads stale values (since issue 38 the gathers and the weights after a step reach torch
  through events, and the gradient adds wait per bucket — none of that has run on a GPU yet);
- at stages 0-2 every parameter is zinc's device memory (its data_ptr is zinc_param_data's, no
  copy) and equals module_state_dict's value, which equals zinc_param_get's host values and is on
  the model's device; at stage 3 the model holds nothing between steps;
- a checkpoint round trip (stage 2 bf16 and stage 3 fp32): a fresh engine loads what another
  saved; its module_state_dict equals the saved engine's bit for bit and the next 3 steps'
  losses match the uninterrupted run's within 1e-6 relative;
- stages 1 and 3 with activation checkpointing (all three kinds), param groups with their own
  weight decay, lr, betas and eps in a client AdamW with a LambdaLR rule per group
  (test_torch_stage3.py's Checkpointed, adam_groups, ClientGroupSchedule's scheduler) against
  the same in plain torch on the device:
  fp32 bound;
- zinc.zero.GatheredParameters at stages 1 and 3 (bf16): a read gives module_state_dict's
  values on the device; a weight written with modifier_rank=0 is zinc's afterwards, and the
  check above (views, zinc_param_get) holds;
- zinc.zero.Init at stages 1 and 3 (fp32): the model built inside on the device (the pieces
  there, one element in each param.data) trains bit for bit as the one built whole there;
- safe_get_full_grad / safe_set_full_grad at stages 0-3 (fp32): between backward and the step
  the gradient is plain torch's accumulated one on the device (1e-6); a value set reads
  back and the step after it equals torch's clip + AdamW given it;
- safe_set_full_fp32_param at stages 0-2 while a forward reading the old weight is queued
  behind a sleep on torch's stream: that forward's loss is the old one bit for bit (written
  2026-11-28 without a GPU; not yet run on one); close() inside an accumulation window (the
  gradient buffer torch lent still held) at stages 1 and 3, then plain torch trains on;
- optimizer.zero_grad() after every engine.step() at stages 1 and 3, with both streams made
  late: bit for bit the run whose windows' first losses are multiplied by 0 (DeepSpeed's
  semantics; written 2026-11-29 without a GPU, run on the CPU device only);
- that checkpoint loaded by a fresh engine with load_optimizer_states=False (stage 2 bf16, stage
  3 fp32): the weights the saved ones, every fp32 master its 16-bit weight exactly, the
  counters the checkpoint's, and training goes on (written 2026-11-30 without a GPU);
- engine.offload_states() / reload_states() at stages 1 and 3 (bf16), the step before them
  queued behind a sleep on zinc's stream: bit for bit the run that kept its state (written
  2026-12-01 without a GPU; run on the CPU device only);
- errors: parameters on two devices (cpu and cuda) are refused naming one; with 2 or more GPUs a
  model on a GPU other than the local rank's is refused, saying torch.cuda.set_device.
Usage:
    ZINC_LIB=build-cuda/libzinc.so bench/.venv/bin/python tests/python/test_torch_cuda.py
    python test_torch_cuda.py --cpu      the same checks on the CPU device (checks the test
                                         itself where there is no GPU)
Exit 77 ("SKIP: no CUDA device") when torch has no CUDA device; 1 on any failure.
"""
import contextlib
import ctypes
import os
import sys
import tempfile

from _common import state_kept_past_close, torch, zinc

ON_CPU = "--cpu" in sys.argv[1:]
sys.argv = sys.argv[:1]     # test_torch_parity reads STAGE and BF16 from argv at import
import test_torch_parity as tp  # noqa: E402
import test_torch_stage3 as ts  # noqa: E402
from zinc._lib import lib  # noqa: E402


def reference(dev, build=None):
    """test_torch_parity.reference on `dev`: losses and the final weights. build() gives another
    (model, optimizer, LR scheduler or None) than the parity test's Tiny and AdamW."""
    if build is None:
        torch.manual_seed(0)
        m = tp.Tiny().to(dev)
        opt, sched = torch.optim.AdamW(m.parameters(), lr=tp.LR, betas=(0.9, 0.999), eps=1e-8,
                                       weight_decay=tp.WD), None
    else:
        m, opt, sched = build()
    losses = []
    for k, (x, y) in enumerate(tp.batches()):
        loss = tp.loss_fn(m, x.to(dev), y.to(dev))
        (loss / tp.GA).backward()
        if k % tp.GA == tp.GA - 1:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            if sched is not None:
                sched.step()
        losses.append(loss.detach())
    return [float(v) for v in losses], {n: p.detach().clone() for n, p in m.named_parameters()}


def first_step_build(dev):
    """reference()'s Tiny and AdamW, the AdamW stepped once on zero gradients first (DeepSpeed's
    stage-0 fp16/bf16 optimizers' initialize_optimizer_states)."""
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=tp.LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=tp.WD)
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    return m, opt, None


def lag(stream):
    """CUDA: a sleep kernel (~1 ms) queued on `stream`: what is queued after it there runs late,
    so a hand-over the engine did not order reads stale values instead of passing by luck."""
    if stream is not None:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(2_000_000)


class _LateZinc:
    """The front-end's libzinc with a sleep kernel queued on zinc's stream before each
    zinc_grads_ready, zinc_gather and zinc_grad_buffer_attach (issue 38): the reduce and zeroing
    of a gradient bucket, an all-gather and the zeroing of the lent gradient buffer run late, so
    torch's adds into a bucket that did not wait for the event of that bucket's last reduce, a
    copy out of the gather slot that did not wait for the gather, or adds into the lent buffer
    that did not wait for its zeroing read or write the wrong values and the parity check
    fails."""

    def __init__(self, real, stream):
        self._real, self._stream = real, stream

    def __getattr__(self, name):
        return getattr(self._real, name)

    def zinc_grads_ready(self, e, g):
        lag(self._stream)
        return self._real.zinc_grads_ready(e, g)

    def zinc_gather(self, e, g):
        lag(self._stream)
        return self._real.zinc_gather(e, g)

    def zinc_grad_buffer_attach(self, e, buf, n):
        # zinc zeroes the buffer torch lends late: at stages 0-1 torch's adds into it must wait
        # for that zeroing, or it wipes them (the gradient of the window's first groups lost).
        lag(self._stream)
        return self._real.zinc_grad_buffer_attach(e, buf, n)


@contextlib.contextmanager
def late_zinc(engine, cuda):
    """_LateZinc installed in the front-end's hand-over and stage-3 modules (CUDA only)."""
    mods = (zinc._handover, zinc._stage3)
    if cuda:
        for m in mods:
            m.lib = _LateZinc(lib, engine._zstream)
    try:
        yield
    finally:
        for m in mods:
            m.lib = lib


def train(engine, dev, batches):
    losses = []
    cuda = dev.type == "cuda"
    with late_zinc(engine, cuda):        # zinc's reduces and gathers come late
        for x, y in batches:
            loss = tp.loss_fn(engine, x.to(dev), y.to(dev))
            lag(torch.cuda.current_stream(dev) if cuda else None)  # torch's gradients come late
            engine.backward(loss)
            lag(engine._zstream if cuda else None)                  # zinc's new weights come late
            engine.step()
            losses.append(loss.detach())     # read at the end: no host sync per step
    return [float(v) for v in losses]


def check_memory(engine, dev, stage):
    """Stages 0-2: each parameter is zinc's working copy on dev, equal to module_state_dict's
    value; module_state_dict equals zinc_param_get's values and is on dev. Stage 3: the model
    holds nothing but the persistent groups, whole with module_state_dict's values. Returns the
    number of failures."""
    fails = 0
    sd = engine.module_state_dict()
    for _, params in engine._groups:
        for pid, name, p in params:
            host = torch.empty(sd[name].numel(), dtype=torch.float32)
            st = lib.zinc_param_get(engine._e, pid, ctypes.c_void_p(host.data_ptr()))
            want = host.view(sd[name].shape).to(sd[name].dtype)
            if st != 0 or sd[name].device != dev or not torch.equal(sd[name].cpu(), want):
                fails += 1
                print(f"FAIL: module_state_dict['{name}'] ({sd[name].device}) differs from "
                      f"zinc_param_get (status {st})")
            if stage < 3:
                ptr = ctypes.c_void_p()
                lib.zinc_param_data(engine._e, pid, ctypes.byref(ptr))
                if p.device != dev or p.data_ptr() != ptr.value:
                    fails += 1
                    print(f"FAIL: '{name}' is not zinc's memory on {dev} ({p.device}, "
                          f"{p.data_ptr():#x} vs {ptr.value or 0:#x})")
                elif not torch.equal(p.detach(), sd[name]):
                    fails += 1
                    print(f"FAIL: '{name}' (the model's view) differs from module_state_dict")
            elif engine._g[engine._group_of[id(p)]].whole:
                # persistent (below stage3_param_persistence_threshold): whole in the module,
                # a view of zinc's full copy, as DeepSpeed keeps such parameters
                if p.device != dev or not torch.equal(p.detach(), sd[name]):
                    fails += 1
                    print(f"FAIL: stage 3: persistent '{name}' ({p.device}, {p.numel()} "
                          f"elements) is not module_state_dict's value")
            elif p.numel() != 0:
                fails += 1
                print(f"FAIL: stage 3: '{name}' holds {p.numel()} elements between steps")
    return fails


def config(stage, bf16, persist=False):
    """The parity test's config; at stage 3 with persistence off unless `persist` (Tiny's
    groups are all below DeepSpeed's default threshold, and a persistent group is whole in the
    module for good: nothing would be gathered, copied or released, the paths these cases
    order on the device)."""
    cfg = tp.config(stage, bf16)
    if stage == 3 and not persist:
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    return cfg


def parity(dev, stage, bf16, ref, side_stream=False, offload_param=False, reuse_distance=None,
           grad_fp32=False, wire_fp32=False, persist=False):
    ref_losses, ref_w = ref
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    cfg = config(stage, bf16, persist)
    if grad_fp32:
        # fp32 gradient sums: at stage 1 torch adds into zinc's 16-bit buckets, which each
        # hand-over adds into the fp32 sums on zinc's stream (the buckets' events order the
        # next adds); wire_fp32 at stages 2-3: the bucket widened and reduced in fp32
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
        if wire_fp32:
            cfg["communication_data_type"] = "fp32"
    if reuse_distance is not None:
        # 0: every group gathered again for its backward (the default keeps this small model's
        # groups from forward, so its backward would have no gathers for the sleeps to delay).
        cfg["zero_optimization"]["stage3_max_reuse_distance"] = reuse_distance
    if offload_param:
        # Each gather uploads the group's own slice from the host shard on the copy stream and
        # the all-gather waits for it on the device (no host wait): threshold 0 gathers every
        # group, behind the sleep late_zinc puts before each zinc_gather.
        cfg["zero_optimization"].update(offload_optimizer={"device": "cpu", "pin_memory": True},
                                        offload_param={"device": "cpu"},
                                        stage3_param_persistence_threshold=0)
    engine, *_ = zinc.initialize(model=m, model_parameters=m.parameters(), config=cfg)
    if side_stream:
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            losses = train(engine, dev, tp.batches())
    else:
        losses = train(engine, dev, tp.batches())
    fails = check_memory(engine, dev, stage)
    worst_w, bound_w, bound_l, _ = tp.differences(engine.module_state_dict(), ref_w, bf16)
    worst_l = tp.worst_loss(losses, ref_losses)
    mode = "bf16" if bf16 else "fp32"
    how = " (side stream)" if side_stream else " (offload_param)" if offload_param else ""
    how += f" (reuse distance {reuse_distance})" if reuse_distance is not None else ""
    how += (" (fp32 sums" + (", reduced in fp32)" if wire_fp32 else ")")) if grad_fp32 else ""
    print(f"{dev} stage {stage} {mode}{how}: loss difference "
          f"{worst_l:.2e} (bound {bound_l:.0e}), weight difference {worst_w:.2e} (bound "
          f"{bound_w:.2g}), global step {engine.global_steps}")
    if not (worst_l < bound_l and worst_w < bound_w and engine.global_steps == tp.STEPS):
        fails += 1
        print(f"FAIL: zinc on {dev} parted from plain PyTorch beyond the {mode} bound")
    engine.close()
    return fails


def grads(dev, stage):
    """safe_get_full_grad / safe_set_full_grad on the device, fp32: after the first optimizer
    step's backwards (its last step() not yet called, a sleep queued on zinc's stream first) the
    gradient of every parameter is plain torch's accumulated one on the same device within the
    fp32 bound; a value set reads back as set, and the step then equals torch's clip + AdamW
    given that gradient."""
    import zinc.utils as zu
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, model_parameters=m.parameters(),
                                 config=config(stage, False))
    torch.manual_seed(0)
    r = tp.Tiny().to(dev)
    opt = torch.optim.AdamW(r.parameters(), lr=tp.LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=tp.WD)
    cuda = dev.type == "cuda"
    for k, (x, y) in zip(range(tp.GA), tp.batches()):
        loss = tp.loss_fn(engine, x.to(dev), y.to(dev))
        lag(torch.cuda.current_stream(dev) if cuda else None)
        engine.backward(loss)
        if k < tp.GA - 1:
            engine.step()
        (tp.loss_fn(r, x.to(dev), y.to(dev)) / tp.GA).backward()
    lag(engine._zstream if cuda else None)
    mine, theirs = dict(m.named_parameters()), dict(r.named_parameters())
    worst = max(float((zu.safe_get_full_grad(mine[n]) - p.grad).abs().max() / p.grad.abs().max())
                for n, p in theirs.items())
    name = next(iter(theirs))
    value = torch.linspace(-0.1, 0.1, theirs[name].numel(), device=dev).reshape(theirs[name].shape)
    zu.safe_set_full_grad(mine[name], value)
    read = zu.safe_get_full_grad(mine[name])
    engine.step()
    theirs[name].grad.copy_(value)
    torch.nn.utils.clip_grad_norm_(r.parameters(), 1.0)
    opt.step()
    w = engine.module_state_dict()
    worst_w = max(float((w[n] - p.detach()).abs().max() / p.detach().abs().max())
                  for n, p in theirs.items())
    # The gradient: the same sums in the same order as torch's (zinc adds each backward's
    # .grad into its buffer, torch accumulates .grad), measured 0 on the CPU and the H200; 1e-6
    # leaves room for GPU kernels that add in a nondeterministic order. The step: the parity
    # bound (measured 3.1e-7 on the CPU, 3.9e-7 on the H200).
    ok = worst < 1e-6 and torch.equal(read, value) and read.device == dev and worst_w < 4e-6
    print(f"{dev} stage {stage} gradients: safe_get_full_grad against torch's {worst:.2e} "
          f"(bound 1e-6), set reads back {torch.equal(read, value)}, the step after it "
          f"{worst_w:.2e} (bound 4e-6)")
    if not ok:
        print(f"FAIL: safe_get_full_grad / safe_set_full_grad on {dev}")
    engine.close()
    return 0 if ok else 1


def set_while_queued(dev, stage):
    """safe_set_full_fp32_param while torch's forward that reads the old weights is still queued
    (behind a sleep on torch's stream): at stages 0-2 `param.data` is zinc's working copy, which
    the set overwrites on zinc's stream, so zinc must wait for torch's queued work first (the
    front-end without that wait: the queued forward reads the new weight and its loss differs).
    That forward's loss equals the one before the set bit for bit, and the next forward's
    differs (it computes with the new weight). fp32. Returns the number of failures."""
    import zinc.utils as zu
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, False))
    x, y = next(iter(tp.batches()))
    x, y = x.to(dev), y.to(dev)
    p = next(q for q in m.parameters() if q.dim() == 2)
    new = (zu.safe_get_full_fp32_param(p) * 2).cpu()     # on the host: its use needs no sync
    with torch.no_grad():
        before = float(tp.loss_fn(engine, x, y))
        lag(torch.cuda.current_stream(dev) if dev.type == "cuda" else None)
        queued = tp.loss_fn(engine, x, y)
        zu.safe_set_full_fp32_param(p, new)
        after = tp.loss_fn(engine, x, y)
    same, moved = float(queued) == before, float(after) != before
    print(f"{dev} stage {stage}: a weight set while a forward is queued: that forward's loss "
          f"{float(queued):.9g} (before the set {before:.9g}), the next {float(after):.9g}")
    engine.close()
    if not (same and moved):
        print(f"FAIL: stage {stage}: the queued forward read the weight set after it, or the "
              "next did not")
        return 1
    return 0


def close_mid_window(dev, stage):
    """close() with the gradient buffer torch lent still held (a backward, no step): the buffer
    was marked used on zinc's stream, so it must be freed before that stream is destroyed (torch
    records an event on it at the free). The process goes on training a plain model after it.
    Returns the number of failures."""
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, False))
    x, y = next(iter(tp.batches()))
    engine.backward(tp.loss_fn(engine, x.to(dev), y.to(dev)))
    lent = engine._grad_buf is not None
    engine.close()
    r = tp.Tiny().to(dev)
    tp.loss_fn(r, x.to(dev), y.to(dev)).backward()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ok = lent and engine._grad_buf is None
    print(f"{dev} stage {stage}: close() inside a window (buffer lent: {lent}), then plain torch "
          f"trains: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def kept_after_close(dev, stage):
    """model.state_dict() taken before close() and kept past the engine's collection keeps its
    values: the views hold zinc's memory (zinc_memory_hold), so on a GPU the cudaFree comes when
    the last of them is freed, not at close(). Stage 3 with every group persistent (the model
    views zinc's full copies). Device memory is allocated and written over in between. Returns
    the number of failures."""
    import gc
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, True, persist=stage == 3))
    train(engine, dev, [next(iter(tp.batches()))])
    views, bad = state_kept_past_close(engine, m, 1 << 20)
    del engine, _
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)     # the deferred frees ran without an error to show
    ok = views and not bad
    print(f"{dev} stage {stage}: model.state_dict() kept past close() and the engine's "
          f"collection keeps its values ({len(views)} views, {len(bad)} changed): "
          f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def states_away(dev, stage):
    """engine.offload_states() after a step whose Adam was queued behind a sleep on zinc's
    stream, one forward and backward while the state is away, reload_states(), the step, and
    more steps: losses and final weights bit for bit the same run without it. A copy to the
    host not ordered after the step's kernels (or a reload not before the next step's) moves
    stale or unfinished values. bf16, the master and the moments moved, page-locked. Returns
    the number of failures."""
    batches = list(tp.batches())[:6]

    def run(away):
        torch.manual_seed(0)
        m = tp.Tiny().to(dev)
        engine, *_ = zinc.initialize(model=m, config=config(stage, True))
        losses = train(engine, dev, batches[:3])
        if away:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # (what stays on the device: said once)
                engine.offload_states(pin_memory=True)
        x, y = batches[3]
        with late_zinc(engine, dev.type == "cuda"):
            loss = tp.loss_fn(engine, x.to(dev), y.to(dev))
            engine.backward(loss)
            if away:
                moved = lib.zinc_states_offloaded(engine._e)
                engine.reload_states()
            engine.step()
        losses.append(float(loss))
        losses += train(engine, dev, batches[4:])
        final = {k: v.detach().clone() for k, v in engine.module_state_dict().items()}
        engine.close()
        return losses, final, moved if away else None

    ref_losses, ref_final, _ = run(False)
    losses, final, moved = run(True)
    same = losses == ref_losses and all(torch.equal(final[k], ref_final[k]) for k in ref_final)
    ok = same and moved == 1
    print(f"{dev} stage {stage}: offload_states() / reload_states() across a step's window "
          f"(moved: {moved}): losses and weights {'bit for bit' if same else 'DIFFER from'} the "
          f"run that kept its state: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def zero_grad_mid_window(dev, stage):
    """optimizer.zero_grad() after every engine.step() (DeepSpeed's semantics: inside a window
    it drops the window's gradients so far at stages 0-1 and 3; engine._drop_window_grads) with
    zinc's and torch's streams made late: bit for bit the run whose windows' first losses are
    multiplied by 0. At stages 0-1 the drop zeroes the buffer torch lent on torch's stream,
    after its adds; at stage 3 it writes zinc's partitioned sums. Returns the failures."""
    cuda = dev.type == "cuda"

    def run(first_scale, drop):
        torch.manual_seed(0)
        m = tp.Tiny().to(dev)
        engine, opt, _, _ = zinc.initialize(model=m, config=config(stage, False))
        with late_zinc(engine, cuda):
            for i, (x, y) in enumerate(tp.batches()):
                loss = tp.loss_fn(engine, x.to(dev), y.to(dev)) * (first_scale if i % tp.GA == 0
                                                                    else 1.0)
                lag(torch.cuda.current_stream(dev) if cuda else None)
                engine.backward(loss)
                engine.step()
                if drop:
                    lag(torch.cuda.current_stream(dev) if cuda else None)
                    opt.zero_grad()
        out = {k: v.detach().cpu() for k, v in engine.module_state_dict().items()}
        engine.close()
        return out

    want, got = run(0.0, False), run(1.0, True)
    ok = list(want) == list(got) and all(torch.equal(want[k], got[k]) for k in want)
    print(f"{dev} stage {stage}: optimizer.zero_grad() inside windows drops their gradients so "
          f"far (bit for bit the run with their first losses x 0): {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def features(dev, stage):
    """Activation checkpointing (reentrant, non-reentrant, zinc.checkpointing), param groups with
    their own weight decay, lr, betas and eps (zinc_group_set_weight_decay, zinc_group_set_lr,
    zinc_group_set_betas, zinc_group_set_eps) in a client AdamW with a LambdaLR rule per group
    (zinc_set_lr, zinc_group_set_lr at every step), against the same in plain torch on `dev`:
    the fp32 parity bound."""
    def build():
        torch.manual_seed(0)
        m = ts.Checkpointed().to(dev)
        opt = torch.optim.AdamW(ts.adam_groups(m), lr=2e-3, eps=1e-8)
        return m, opt, ts.ClientGroupSchedule.scheduler(opt)
    ref_losses, ref_w = reference(dev, build)
    m, opt, sched = build()
    engine, *_ = zinc.initialize(model=m, optimizer=opt, lr_scheduler=sched,
                                 config=config(stage, False))
    losses = train(engine, dev, tp.batches())
    w = engine.module_state_dict()
    worst_w = max(float((w[n] - ref_w[n]).abs().max() / ref_w[n].abs().max()) for n in ref_w)
    worst_l = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    print(f"{dev} stage {stage} activation checkpointing + decay/lr/betas/eps groups + client "
          "AdamW/LambdaLR: "
          f"loss difference {worst_l:.2e}, weight difference {worst_w:.2e} (bound 4e-06)")
    engine.close()
    if not (worst_l < 4e-6 and worst_w < 4e-6):
        print(f"FAIL: zinc on {dev} parted from plain PyTorch with sessions 3-4's features")
        return 1
    return 0


def gathered(dev, stage):
    """zinc.zero.GatheredParameters on dev (bf16): a read gives module_state_dict's values, on
    dev; a weight written inside with modifier_rank=0 is zinc's fp32 master afterwards and what
    the model reads (check_memory: stages 0-2 the views). Returns the number of failures."""
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, True))
    sd = engine.module_state_dict()
    fails = 0
    with zinc.zero.GatheredParameters(m.parameters()):
        bad = [n for n, q in m.named_parameters()
               if q.device != dev or not torch.equal(q.detach(), sd[n])]
    if bad:
        fails += 1
        print(f"FAIL: stage {stage}: GatheredParameters read {bad} differs from module_state_dict")
    name, p = next((n, q) for n, q in m.named_parameters() if sd[n].dim() == 2)
    with zinc.zero.GatheredParameters(p, modifier_rank=0):
        with torch.no_grad():
            p.fill_(0.25)
    if not bool((engine.module_state_dict()[name] == 0.25).all()):
        fails += 1
        print(f"FAIL: stage {stage}: '{name}' written inside GatheredParameters is not zinc's")
    fails += check_memory(engine, dev, stage)
    engine.close()
    return fails


def zero_init(dev, stage):
    """zinc.zero.Init on dev: the model built inside (on the GPU: under `with torch.device(dev)`,
    torch 2.x) keeps its pieces on dev with one element in each param.data, and trains bit for
    bit as the one built whole there (fp32, losses and final weights). Returns failures."""
    def build(partitioned):
        torch.manual_seed(0)
        where = torch.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
        with where, zinc.zero.Init(enabled=partitioned):
            return tp.Tiny()

    runs = []
    for partitioned in (False, True):
        m = build(partitioned)
        if partitioned:
            bad = [n for n, p in m.named_parameters()
                   if p.device != dev or any(p.data.stride())
                   or p._zinc_held.piece.device != dev]
            if bad:
                print(f"FAIL: stage {stage}: zero.Init left {bad} whole or off {dev}")
                return 1
        engine, *_ = zinc.initialize(model=m, config=config(stage, False))
        runs.append((train(engine, dev, tp.batches()), engine.module_state_dict()))
        engine.close()
    (lw, ww), (lp, wp) = runs
    same = lw == lp and all(torch.equal(ww[n], wp[n]) for n in ww)
    print(f"{dev} stage {stage} zero.Init: {'the same' if same else 'NOT the same'} losses and "
          "weights as the model built whole")
    if not same:
        print(f"FAIL: stage {stage}: a model built in zinc.zero.Init on {dev} trains differently")
    return 0 if same else 1


def ckpt_round_trip(dev, stage, bf16, d):
    batches = list(tp.batches())[:12]
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, bf16))
    train(engine, dev, batches[:6])
    engine.save_checkpoint(d, tag="t3", client_state={"at": 3})
    saved = {n: t.clone() for n, t in engine.module_state_dict().items()}
    after = train(engine, dev, batches[6:])
    engine.close()
    torch.manual_seed(1)                          # other initial weights: the load must win
    m2 = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m2, config=config(stage, bf16))
    path, client = engine.load_checkpoint(d)
    at = engine.global_steps
    fails = check_memory(engine, dev, stage)
    loaded = engine.module_state_dict()
    same = all(torch.equal(loaded[n], saved[n]) for n in saved)
    resumed = train(engine, dev, batches[6:])
    worst = max(abs(a - b) / abs(b) for a, b in zip(resumed, after))
    print(f"{dev} stage {stage} {'bf16' if bf16 else 'fp32'} checkpoint: loaded {path}, "
          f"client_state {client}, global step {at}, weights equal {same}, steps 4-6 loss difference {worst:.2e}")
    if not same or client != {"at": 3} or at != 3 or engine.global_steps != 6 or not worst < 1e-6:
        fails += 1
        print("FAIL: the checkpoint round trip did not continue the run")
    engine.close()
    return fails


def ckpt_weights_only(dev, stage, bf16, d):
    """The tag ckpt_round_trip saved in d, loaded by a fresh engine with
    load_optimizer_states=False (DeepSpeed's meaning, _partial_load.py; test_ds_load_flags.py
    on the CPU): the weights bitwise the saved ones, each fp32 master its 16-bit weight exactly
    (masters_from_16bit through zinc_param_local_get/_set on the device), the counters the
    checkpoint's, and 3 more steps train with finite losses. Written 2026-11-30 without a GPU."""
    torch.manual_seed(1)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, config=config(stage, bf16))
    engine.load_checkpoint(d, tag="t3", load_optimizer_states=False)
    loaded = engine.module_state_dict()
    fails = 0
    masters_are_weights = all(
        torch.equal(zinc.utils.safe_get_full_fp32_param(p).to(dev),
                    loaded[n].to(torch.float32))
        for n, p in engine.module.named_parameters() if p.requires_grad)
    at = engine.global_steps
    losses = train(engine, dev, list(tp.batches())[6:12])
    ok = masters_are_weights and at == 3 and all(abs(x) < float("inf") for x in losses)
    print(f"{dev} stage {stage} {'bf16' if bf16 else 'fp32'} load_optimizer_states=False: "
          f"masters are the 16-bit weights {masters_are_weights}, global step {at}, "
          f"losses after {[round(x, 5) for x in losses]}")
    if not ok:
        fails += 1
        print("FAIL: the weights-only load with the counters did not go as on the CPU")
    engine.close()
    return fails


def errors(dev):
    fails = 0
    if dev.type == "cuda":
        m = tp.Tiny().to(dev)
        m.ln.to("cpu")
        try:
            zinc.initialize(model=m, config=config(0, False))
            fails += 1
            print("FAIL: a model on two devices was accepted")
        except ValueError as ex:
            print(f"two devices: {ex}")
            if "ln.weight" not in str(ex) and "ln.bias" not in str(ex):
                fails += 1
                print("FAIL: the refusal does not name a parameter")
        if torch.cuda.device_count() > 1:
            other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count())
            try:
                zinc.initialize(model=tp.Tiny().to(other), config=config(0, False))
                fails += 1
                print(f"FAIL: a model on {other} was accepted while zinc opens {dev}")
            except ValueError as ex:
                print(f"another GPU: {ex}")
                if "set_device" not in str(ex):
                    fails += 1
                    print("FAIL: the refusal does not say torch.cuda.set_device")
        else:
            print("one GPU: the other-GPU refusal is not checked")
    return fails


def main(on_cpu):
    if on_cpu:
        dev = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("SKIP: no CUDA device (torch.cuda.is_available() is false)")
            return 77
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False     # fp32 parity: no TF32 matmuls
        torch.backends.cudnn.allow_tf32 = False
    if zinc.world_size() != 1:
        print("SKIP: world 1 only")
        return 77
    fails = errors(dev)
    ref = {False: reference(dev), True: None}
    ref[True] = ref[False]                         # bf16 is held against the fp32 reference
    # ... at stage 0 against the reference whose AdamW first steps on zero gradients, as
    # DeepSpeed's stage-0 16-bit optimizers do when built (_Optimizer._ds_first_step)
    first = reference(dev, build=lambda: first_step_build(dev))
    for bf16 in (False, True):
        for stage in range(4):
            fails += parity(dev, stage, bf16, first if bf16 and stage == 0 else ref[bf16])
    if dev.type == "cuda":
        fails += parity(dev, 3, False, ref[False], side_stream=True)
    for bf16 in (False, True):    # every group persistent: the model views zinc's full copies
        fails += parity(dev, 3, bf16, ref[bf16], persist=True)
    for bf16 in (False, True):
        fails += parity(dev, 3, bf16, ref[bf16], offload_param=True)
        fails += parity(dev, 3, bf16, ref[bf16], offload_param=True, reuse_distance=0)
    fails += parity(dev, 1, True, ref[True], grad_fp32=True)
    fails += parity(dev, 2, True, ref[True], grad_fp32=True, wire_fp32=True)
    for stage in range(4):
        fails += grads(dev, stage)
    for stage in range(3):
        fails += set_while_queued(dev, stage)
    for stage in (1, 3):
        fails += close_mid_window(dev, stage)
        fails += zero_grad_mid_window(dev, stage)
        fails += kept_after_close(dev, stage)
        fails += states_away(dev, stage)
    for stage in (1, 3):
        fails += features(dev, stage)
        fails += gathered(dev, stage)
        fails += zero_init(dev, stage)
    with tempfile.TemporaryDirectory() as d:
        fails += ckpt_round_trip(dev, 2, True, os.path.join(d, "s2"))
        fails += ckpt_round_trip(dev, 3, False, os.path.join(d, "s3"))
        fails += ckpt_weights_only(dev, 2, True, os.path.join(d, "s2"))
        fails += ckpt_weights_only(dev, 3, False, os.path.join(d, "s3"))
    print(f"{'FAIL' if fails else 'PASS'}: {fails} failure(s) on {dev}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(ON_CPU))
