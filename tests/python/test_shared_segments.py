"""test_shared_segments.py — a module run in several reentrant activation-checkpointing segments
(an ALBERT-style shared layer) trains as in plain torch.

    python test_shared_segments.py STAGE        (1 rank, or under mpirun -np 2)

Reentrant checkpointing (torch.utils.checkpoint with use_reentrant=True) runs one backward per
segment, and each calls the shared parameters' AccumulateGrad: the shared layer's gradient comes
in one contribution per segment, the first of them before the others exist. zinc hands a group
over when all its parameters have a gradient, so the later contributions arrive after the
hand-over: they go to zinc after autograd (zinc_grads_more), and from then on that group waits
for the end of autograd. Checked, in fp32 against plain torch with the same checkpointing
(AdamW, accumulation 2, clipping, 6 optimizer steps), at 1 rank the losses too:
- the weights within the parity bound of test_torch_parity.py (4e-6 of each tensor's largest
  weight). The front-end that handed over only the first contribution and left the rest in
  `.grad` (for the next micro-step) gave the shared layer a gradient off by up to 1.45: fails;
- no parameter keeps a `.grad` after a backward other than zinc's view of the window's sum,
  shown at stages 0-1 as DeepSpeed keeps `.grad` (that one left them);
- zinc_grads_more is called in the first backward only, once per parameter group of the shared
  layer (later backwards hand it over once, after autograd, with the whole sum).
"""
import sys

import torch.utils.checkpoint as ckpt

from _common import check, failures, torch, zinc
import zinc._handover as handover

STEPS, GA, GLOBAL, LR, WD = 6, 2, 8, 3e-3, 0.01


class Shared(torch.nn.Module):
    """inp, then the shared layer in three reentrant segments (one of them with a layer of its
    own), then out: `shared` gets three gradient contributions per backward."""

    def __init__(self, d=16):
        super().__init__()
        self.inp = torch.nn.Linear(8, d)
        self.shared = torch.nn.Linear(d, d)
        self.own = torch.nn.Linear(d, d)
        self.out = torch.nn.Linear(d, 4)

    def segment(self, x, with_own):
        y = torch.tanh(self.shared(x))
        return x + (self.own(y) if with_own else y)

    def forward(self, x):
        x = self.inp(x)
        for k in range(3):
            x = ckpt.checkpoint(self.segment, x, k == 1, use_reentrant=True)
        return self.out(x)


def batches():
    g = torch.Generator().manual_seed(3)
    for _ in range(STEPS * GA):
        yield torch.randn(GLOBAL, 8, generator=g), torch.randn(GLOBAL, 4, generator=g)


def loss_of(f, x, y):
    return torch.nn.functional.mse_loss(f(x), y)


def plain_torch():
    torch.manual_seed(0)
    ref = Shared()
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, eps=1e-8, weight_decay=WD)
    losses = []
    for k, (x, y) in enumerate(batches()):
        loss = loss_of(ref, x, y)
        (loss / GA).backward()
        losses.append(float(loss.detach()))
        if k % GA == GA - 1:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    return ref, losses



def stray_grad(engine, p):
    """A `.grad` left after a backward other than zinc's view of the window's sum (which stages
    0-1 show there, as DeepSpeed keeps `.grad`): a contribution zinc was not handed."""
    g, buf = p.grad, engine._grad_buf
    if g is None:
        return False
    return buf is None or not buf.data_ptr() <= g.data_ptr() < buf.data_ptr() + buf.numel()

class CountMore:
    """libzinc for _handover.py, counting zinc_grads_more calls per backward."""

    def __init__(self, real):
        self._real, self.calls = real, 0

    def __getattr__(self, name):
        f = getattr(self._real, name)
        if name != "zinc_grads_more":
            return f

        def more(e, g):
            self.calls += 1
            return f(e, g)
        return more


def main(stage):
    ref, ref_losses = plain_torch()
    torch.manual_seed(0)
    m = Shared()
    world = zinc.world_size()
    per = GLOBAL // world
    cfg = {"train_micro_batch_size_per_gpu": per, "gradient_accumulation_steps": GA,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999],
                                                      "eps": 1e-8, "weight_decay": WD}},
           "gradient_clipping": 1.0,
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    engine, *_ = zinc.initialize(model=m, config=cfg)
    rank = engine.global_rank
    spy = CountMore(handover.lib)
    handover.lib = spy
    losses, more, left = [], [], []
    try:
        for x, y in batches():
            spy.calls = 0
            loss = loss_of(engine, x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per])
            engine.backward(loss)
            more.append(spy.calls)
            left += [n for n, p in m.named_parameters() if stray_grad(engine, p)]
            engine.step()
            losses.append(float(loss.detach()))
    finally:
        handover.lib = spy._real
    w = engine.module_state_dict()
    engine.close()
    ref_w = dict(ref.named_parameters())
    worst = {n: float((w[n].float() - ref_w[n]).abs().max() / ref_w[n].abs().max())
             for n in ref_w}
    name = max(worst, key=worst.get)
    check(f"stage {stage}, rank {rank} of {world}: the weights as plain torch's after "
          f"{engine.global_steps} steps (worst {worst[name]:.2e} on {name}, bound 4e-06)",
          worst[name] < 4e-6 and engine.global_steps == STEPS,
          f"{worst} after {engine.global_steps} steps")
    if world == 1:
        worst_l = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        check(f"stage {stage}: the losses as plain torch's (worst {worst_l:.2e}, bound 4e-06)",
              worst_l < 4e-6, f"{losses} against {ref_losses}")
    check(f"stage {stage}, rank {rank}: no parameter keeps a .grad after a backward", not left,
          f"left: {sorted(set(left))}")
    # The shared Linear is one group (weight and bias): its two later contributions come in the
    # first backward's autograd, after its hand-over, and go to zinc once after autograd.
    check(f"stage {stage}, rank {rank}: zinc_grads_more once in the first backward, then never "
          f"(per backward: {more})", more == [1] + [0] * (len(more) - 1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
