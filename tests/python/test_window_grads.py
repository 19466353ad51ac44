"""test_window_grads.py — `.grad` between engine.backward and engine.step where DeepSpeed 0.19.8
keeps it: at ZeRO stage 0 (one rank here: at a window's last backward DeepSpeed all-reduces
`.grad` in place, which zinc does in its step), and at stage 1 inside an accumulation window
(its last backward there leaves `.grad` None, as zinc's).

    python test_window_grads.py STAGE      # 0 or 1

fp32, AdamW, accumulation 2, 4 optimizer steps, one rank:
- after each backward every trained parameter's `.grad` is the window's sum so far, bit for bit
  plain torch's `.grad` for the same micro-batches (loss / 2 each), and it stays through a step()
  inside the window; after the step that ends the window, and at stage 1 after the window's last
  backward, it is None;
- a script's changes to it reach the update, as under DeepSpeed: clip_grad_norm_ (0.05, which
  every window's norm exceeds), a mask written in place, a `.grad` replaced by another tensor —
  each trains to plain torch's weights with the same change, within the parity bound (4e-6),
  and far from the run without the change (so a change zinc ignored fails).
Before 2026-11-30 `.grad` was None after every backward: clip_grad_norm_ returned 0.0 and clipped
nothing, and the mask raised TypeError."""
import sys

from _common import check, finish, torch, zinc

GA, STEPS, MICRO = 2, 4, 4
BOUND = 4e-6


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


RANK, WORLD = 0, 1     # set by main: under mpirun each rank trains on its part of the batch


def batch(k, whole=False):
    """Micro-batch k: MICRO samples a rank, the ranks' parts together the whole batch."""
    g = torch.Generator().manual_seed(50 + k)
    x, y = torch.randn(MICRO * WORLD, 6, generator=g), torch.randn(MICRO * WORLD, 3, generator=g)
    if whole:
        return x, y
    return x[RANK * MICRO:(RANK + 1) * MICRO], y[RANK * MICRO:(RANK + 1) * MICRO]


def clip(m):
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)


def mask(m):
    m[0].weight.grad[:5] = 0.0


def shift(m):
    # (not a scaling, which Adam's update would all but cancel)
    m[2].weight.grad = m[2].weight.grad + 0.05


def torch_run(change, when):
    """Plain torch on the whole batch: the window's backward passes, the change after those
    whose index in the window is in `when`, AdamW."""
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.01)
    for s in range(STEPS):
        for j in range(GA):
            x, y = batch(s * GA + j, whole=True)
            (((m(x) - y) ** 2).mean() / GA).backward()
            if change and j in when:
                change(m)
        opt.step()
        opt.zero_grad()
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def zinc_run(stage, change, record=None, when=()):
    m = model()
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
           "gradient_clipping": 0.0,      # DeepSpeed's default clips at 1.0; torch does not
           "zero_optimization": {"stage": stage}}
    engine, *_ = zinc.initialize(model=m, config=cfg)
    for s in range(STEPS):
        for j in range(GA):
            x, y = batch(s * GA + j)
            engine.backward(((engine(x) - y) ** 2).mean())
            if record is not None:
                record.append(("backward", j, [None if p.grad is None else p.grad.clone()
                                               for p in m.parameters()]))
            if change and j in when:
                change(m)
            engine.step()
            if record is not None:
                record.append(("step", j, [None if p.grad is None else p.grad.clone()
                                           for p in m.parameters()]))
    weights = {n: p.detach().clone() for n, p in m.named_parameters()}
    engine.close()
    return weights


def torch_grads():
    """Plain torch's `.grad` after each backward of the first window (zinc's weights are torch's
    there; after a step, Adam's roundings differ)."""
    m, out = model(), []
    for k in range(GA):
        x, y = batch(k, whole=True)
        (((m(x) - y) ** 2).mean() / GA).backward()
        out.append([p.grad.clone() for p in m.parameters()])
    return out


def comm_bytes(engine):
    """The payload bytes zinc's collectives moved on this rank so far (zinc_comm_bytes)."""
    import ctypes
    from zinc._lib import lib
    counts = (ctypes.c_uint64 * 4)()      # ZINC_COLL_COUNT
    lib.zinc_comm_bytes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    assert lib.zinc_comm_bytes(engine._e, counts) == 0
    return tuple(counts)


def worst(a, b):
    return max(float((a[n] - b[n]).abs().max() / b[n].abs().max()) for n in b)


def same(a, b):
    """One rank: bit for bit. Several: the rank's window sum (inside a window) is its own part's,
    so only the averaged ones at stage 0's window end compare with torch's whole batch, within
    fp32 summation order."""
    if WORLD == 1:
        return torch.equal(a, b)
    return float((a - b).abs().max()) <= 1e-6 * float(b.abs().max())


def main(stage):
    global RANK, WORLD
    engine, *_ = zinc.initialize(model=model(), config={"train_micro_batch_size_per_gpu": 1})
    RANK, WORLD = engine.global_rank, engine.world_size
    engine.close()
    record = []
    zinc_run(stage, None, record)
    ref = torch_grads()
    for k in range(2 * GA):           # two windows; the first bit for bit against torch
        j = k % GA
        _, _, after_backward = record[2 * k]
        _, _, after_step = record[2 * k + 1]
        compared = k < GA and (WORLD == 1 or (stage == 0 and j == GA - 1))
        if stage == 0 or j < GA - 1:
            check(f"stage {stage}, rank {RANK} of {WORLD}, micro-step {k}: .grad after backward "
                  "is the window's sum" + (" (averaged over the ranks)" if WORLD > 1 and
                                           j == GA - 1 else "") +
                  (", as torch's" if compared else ""),
                  all(g is not None for g in after_backward) and
                  (not compared or all(same(g, r) for g, r in zip(after_backward, ref[k]))),
                  f"{[None if g is None else float(g.abs().sum()) for g in after_backward]}")
        else:
            check(f"stage {stage}, micro-step {k}: .grad after the window's last backward is "
                  "None, as DeepSpeed's stage 1", all(g is None for g in after_backward))
        if j < GA - 1:
            check(f"stage {stage}, micro-step {k}: .grad stays through a step() inside the "
                  "window", all(g is not None and torch.equal(g, r)
                                for g, r in zip(after_step, after_backward)))
        else:
            check(f"stage {stage}, micro-step {k}: .grad is None after the window's step",
                  all(g is None for g in after_step))
    # A `.grad` the script replaced, read through zinc.utils: the replacement's value, and
    # `.grad` itself — zinc's view again — as DeepSpeed's safe_get_full_grad returns `.grad`
    # wherever it is set: this rank's own sum inside the window, without a collective (a read on
    # rank 0 alone, a log, waits for no other rank; zinc's average over the ranks, a collective,
    # before 2026-11-30). The first micro-step: shown at both stages.
    import zinc.utils as zu
    m = model()
    engine, *_ = zinc.initialize(model=m, config={
        "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": stage}})
    x, y = batch(0)
    engine.backward(((engine(x) - y) ** 2).mean())
    w = m[0].weight
    w.grad = w.grad + 1.0
    want = w.grad.clone()
    moved = comm_bytes(engine)
    got = zu.safe_get_full_grad(w)
    check(f"stage {stage}, rank {RANK}: safe_get_full_grad of a replaced `.grad`: its value, "
          "`.grad` itself, zinc's view again, and no collective",
          got is w.grad and torch.equal(got, want) and w.grad.data_ptr() != want.data_ptr() and
          comm_bytes(engine) == moved,
          f"{'the same' if got is w.grad else 'another'} tensor, "
          f"{float((got - want).abs().max()):.2e} off, bytes {moved} -> {comm_bytes(engine)}")
    # safe_set_full_grad writes `.grad` in place (DeepSpeed's copy_), and the step applies it
    zu.safe_set_full_grad(w, want * 2)
    check(f"stage {stage}, rank {RANK}: safe_set_full_grad of a shown `.grad` writes it in "
          "place, without a collective", torch.equal(w.grad, want * 2) and
          comm_bytes(engine) == moved)
    engine.close()
    plain = zinc_run(stage, None)
    # Where `.grad` has a twin in plain torch on the whole batch: after every backward with one
    # rank at stage 0; after the window's first at stage 1 (one rank: inside a window a rank's
    # sum is its own part's); after the window's last, averaged, at stage 0 with several ranks.
    if stage == 0:
        when = range(GA) if WORLD == 1 else (GA - 1,)
    else:
        when = range(GA - 1) if WORLD == 1 else ()
    for name, change in (("clip_grad_norm_", clip), ("a mask in place", mask),
                         ("a .grad replaced", shift)):
        if not when:
            break
        want = torch_run(change, when)
        got = zinc_run(stage, change, when=when)
        off, apart = worst(got, want), worst(plain, want)
        check(f"stage {stage}, rank {RANK} of {WORLD}: {name} after backward {list(when)} of "
              f"each window reaches the update: torch's weights with it (worst {off:.2e}, "
              f"bound {BOUND}), not those without ({apart:.2e} away)",
              off < BOUND and apart > 100 * BOUND,
              f"{off:.2e} from torch with it, {apart:.2e} between the two")


def nosync_clip(stage):
    """Accumulation 3, one rank: a backward and its step(), a backward inside no_sync, then
    clip_grad_norm_ (0.05) on `.grad` (the window's sum so far, as DeepSpeed's) and its step(),
    then the window's last backward and step, 3 windows: plain torch's weights for the same
    sequence.
    (Taken back before the no_sync backward, `.grad` held its part alone and the clip missed the
    rest: 2e-2 off.)"""
    def zinc_side(clipped):
        m = model()
        engine, *_ = zinc.initialize(model=m, config={
            "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 3,
            "gradient_clipping": 0.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.01,
                                                                                 "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage}})
        for s in range(3):
            x, y = batch(3 * s)
            engine.backward(((engine(x) - y) ** 2).mean())
            engine.step()
            with engine.no_sync():
                x, y = batch(3 * s + 1)
                engine.backward(((engine(x) - y) ** 2).mean())
            if clipped:
                clip(m)
            engine.step()          # the no_sync micro-step's (the hand-over is made there)
            x, y = batch(3 * s + 2)
            engine.backward(((engine(x) - y) ** 2).mean())
            engine.step()
        w = {n: p.detach().clone() for n, p in m.named_parameters()}
        engine.close()
        return w
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.01)
    for s in range(3):
        for j in range(3):
            x, y = batch(3 * s + j)
            (((m(x) - y) ** 2).mean() / 3).backward()
            if j == 1:
                clip(m)
        opt.step()
        opt.zero_grad()
    want = {n: p.detach().clone() for n, p in m.named_parameters()}
    off, apart = worst(zinc_side(True), want), worst(zinc_side(False), want)
    check(f"stage {stage}: clip_grad_norm_ after a no_sync backward clips the window's whole sum: "
          f"torch's weights (worst {off:.2e}, bound {BOUND}), not those without ({apart:.2e})",
          off < BOUND and apart > 100 * BOUND, f"{off:.2e} / {apart:.2e}")


class Scaled(torch.nn.Module):
    """A Linear times a 0-dim parameter (zinc registers it as shape (1,))."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.lin(x) * self.scale


def zero_dim(stage):
    """A 0-dim parameter's `.grad` is shown too, 0-dim, torch's value (it was left None: its
    view of zinc's memory has shape (1,))."""
    torch.manual_seed(0)
    m = Scaled()
    engine, *_ = zinc.initialize(model=m, config={
        "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": stage}})
    torch.manual_seed(0)
    r = Scaled()
    x, y = batch(0)
    engine.backward(((engine(x) - y) ** 2).mean())
    (((r(x) - y) ** 2).mean() / GA).backward()
    g = m.scale.grad
    check(f"stage {stage}: a 0-dim parameter's `.grad`: 0-dim, torch's", g is not None and
          g.dim() == 0 and torch.equal(g, r.scale.grad), f"{g}")
    engine.close()


def kept_past_step():
    """Stage 0: a `.grad` (and safe_get_full_grad's value) kept past the window's step keeps the
    window's sum through the next window, as DeepSpeed's `.grad` tensors do (its step sets
    `.grad` to None; the tensors stay). They were views over the address of the buffer torch
    lent for the window, which the step gives back: the next window's buffer, mostly the same
    block, showed through them."""
    import zinc.utils as zu
    m = model()
    engine, *_ = zinc.initialize(model=m, config={
        "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 0}})
    kept = want = None
    for k in range(2 * GA):
        x, y = batch(k)
        engine.backward(((engine(x) - y) ** 2).mean())
        if k == GA - 1:
            kept = [p.grad for p in m.parameters()] + [zu.safe_get_full_grad(m[0].weight)]
            want = [g.clone() for g in kept]
        engine.step()
    check(f"stage 0, rank {RANK}: `.grad`s kept past the window's step keep its sum through the "
          "next window", all(torch.equal(g, w) for g, w in zip(kept, want)),
          f"{[float((g - w).abs().max()) for g, w in zip(kept, want)]}")
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))
    if WORLD == 1:
        nosync_clip(int(sys.argv[1]))
        zero_dim(int(sys.argv[1]))
        if int(sys.argv[1]) == 0:
            kept_past_step()
    sys.exit(finish())
