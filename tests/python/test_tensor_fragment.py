"""test_tensor_fragment.py — zinc.utils' safe_get/set_full_fp32_param,
safe_get/set_full_optimizer_state and safe_get/set_full_grad (DeepSpeed's deepspeed.utils calls that take a parameter
alone).

    python test_tensor_fragment.py STAGE DTYPE          (also under mpirun -np 2)

After 2 steps at ZeRO stage STAGE (fp32 or bf16), on every rank:
- safe_get_full_fp32_param(p) of each trained parameter is a float32 tensor of p's shape, equal
  to the engine's master (module_state_dict in fp32 mode; its bf16 values are the master
  rounded to bf16), the tied weight once under either name; None for a frozen parameter and
  for a parameter no engine trains;
- safe_set_full_fp32_param(p, v) makes the master v (read back), module_state_dict shows it
  (bf16: rounded), the next forward computes with it (equal to a plain torch model holding
  module_state_dict's values), and training goes on from it (a step moves it); a value of
  another shape raises ValueError naming both shapes;
- the local forms (check_local): below stage 3 ValueError naming the stage; at stage 3 this
  rank's fragment lo..hi (engine._local_range) of the master and of exp_avg, 1-D fp32, and
  fragments written on every rank read back whole; a fragment of another size ValueError;
  an optimizer state other than exp_avg / exp_avg_sq ValueError;
- after engine.close(), safe_get_full_fp32_param and safe_get_full_optimizer_state give None;
- fp32, every rank the same batches: safe_get_full_optimizer_state's exp_avg and exp_avg_sq
  equal torch.optim.AdamW's after 2 steps (relative 4e-6), and after
  safe_set_full_optimizer_state of both moments (read back as set) and the same setting in
  torch's optimizer, one more step gives the same weights and moments.
- safe_get_full_grad / safe_set_full_grad (check_grads), 2 micro-batches per step, each rank its
  own batches: after both backwards the gradient is fp32, of the parameter's shape, the tied
  weight's once under either name, None for a frozen parameter; in fp32 it equals the mean over
  ranks and micro-batches of plain torch's gradients of the same batches (relative 5e-7); a
  value set reads back exactly (bf16: multiples of 1/64, which bf16 holds); the step after it
  gives that weight's master torch AdamW's step from it given that gradient (fp32: the whole
  model torch AdamW's); after the step the gradient reads zero;
  a value of another shape raises ValueError; inside no_sync (stages 0-1) `.grad` itself; at
  stage 3 the local gradient is its elements lo..hi and one set on every rank reads back whole;
  safe_update_full_grad_vectorized calls update_func(gradient, param) once per trained
  parameter (not the frozen one) and its result becomes the gradient.
Each check prints its name; exit 1 when one fails, 77 without torch.
"""
import sys

from _common import check, check_raises, failures, torch, zinc

import zinc.utils as zu


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(12, 6)
        self.body = torch.nn.Linear(6, 6)
        self.frozen = torch.nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.head = torch.nn.Linear(6, 12, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(torch.tanh(self.body(h)) + self.frozen(h))


def main():
    stage, dtype = int(sys.argv[1]), sys.argv[2]
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
                                                              "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": stage}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    model = Model()
    engine, *_ = zinc.initialize(model=model, config=cfg)
    g = torch.Generator().manual_seed(1 + engine.global_rank)

    def step():
        loss = engine(torch.randint(0, 12, (2, 4), generator=g)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()

    step()
    step()
    sd = engine.module_state_dict()
    trained = {"emb.weight": model.emb.weight, "body.weight": model.body.weight,
               "body.bias": model.body.bias}
    bad = []
    for name, p in trained.items():
        full = zu.safe_get_full_fp32_param(p)
        want = sd[name]
        # want's shape: at stage 3 the Parameter itself is empty between steps
        ok = (full is not None and full.dtype == torch.float32 and full.shape == want.shape and
              (torch.equal(full, want) if dtype == "fp32"
               else torch.equal(full.to(torch.bfloat16), want)))
        if not ok:
            bad.append(name)
    check("safe_get_full_fp32_param: fp32, the parameter's shape, the engine's master", not bad,
          f"{bad}")
    check("the tied weight under either name is the same master",
          torch.equal(zu.safe_get_full_fp32_param(model.head.weight),
                      zu.safe_get_full_fp32_param(model.emb.weight)))
    check("a frozen parameter: None", zu.safe_get_full_fp32_param(model.frozen.weight) is None)
    check("a parameter no engine trains: None",
          zu.safe_get_full_fp32_param(torch.nn.Parameter(torch.ones(3))) is None)

    new = torch.linspace(-1, 1, 36).reshape(6, 6)
    zu.safe_set_full_fp32_param(model.body.weight, new)
    got = zu.safe_get_full_fp32_param(model.body.weight)
    check("safe_set_full_fp32_param: the master reads back as set", torch.equal(got, new))
    sd = engine.module_state_dict()
    work = torch.float32 if dtype == "fp32" else torch.bfloat16
    check("module_state_dict shows the value set (in the working dtype)",
          torch.equal(sd["body.weight"], new.to(work)))
    ref = Model().to(work)
    ref.load_state_dict(sd)
    idx = torch.randint(0, 12, (2, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out, want = engine(idx), ref(idx)
    check("the next forward computes with it (equal to a plain model holding those values)",
          torch.equal(out, want), f"max diff {(out.float() - want.float()).abs().max().item()}")
    step()
    check("training goes on from it (a step moves it)",
          not torch.equal(zu.safe_get_full_fp32_param(model.body.weight), new))
    check_raises("a value of another shape raises ValueError naming both shapes",
                 lambda: zu.safe_set_full_fp32_param(model.body.weight, torch.zeros(3, 6)),
                 ValueError, "(3, 6)", "(6, 6)")
    check_local(engine, model, stage)
    check_raises("an optimizer state zinc's Adam does not keep raises ValueError naming both",
                 lambda: zu.safe_get_full_optimizer_state(model.body.weight, "momentum_buffer"),
                 ValueError, "momentum_buffer", "exp_avg_sq")
    engine.close()
    check("after engine.close(): None", zu.safe_get_full_fp32_param(model.body.weight) is None)
    check("after engine.close(): no optimizer state either",
          zu.safe_get_full_optimizer_state(model.body.weight, "exp_avg") is None)
    if dtype == "fp32":
        check_moments(stage)
    check_grads(stage, dtype)
    return 1 if failures else 0


def fragment(engine, p):
    """(lo, hi): the elements of the flattened parameter this rank keeps."""
    return engine._local_range(engine._pid_of[id(p)])


def check_local(engine, model, stage):
    """The local (this rank's fragment) forms: ZeRO stage 3 only; there each is the whole
    value's elements lo..hi, and fragments written on every rank read back whole."""
    p = model.body.weight
    if stage != 3:
        for name, call in (("safe_get_local_fp32_param", lambda: zu.safe_get_local_fp32_param(p)),
                           ("safe_get_local_grad", lambda: zu.safe_get_local_grad(p)),
                           ("safe_set_local_optimizer_state",
                            lambda: zu.safe_set_local_optimizer_state(p, torch.zeros(1),
                                                                      "exp_avg"))):
            check_raises(f"{name} below stage 3 raises ValueError naming the stage", call,
                         ValueError, name, f"stage {stage}")
        return
    lo, hi = fragment(engine, p)
    full = zu.safe_get_full_fp32_param(p).flatten()
    local = zu.safe_get_local_fp32_param(p)
    check(f"safe_get_local_fp32_param: elements {lo}..{hi} of the master, 1-D fp32",
          local.dtype == torch.float32 and local.dim() == 1 and torch.equal(local, full[lo:hi]))
    m = zu.safe_get_full_optimizer_state(p, "exp_avg").flatten()
    check("safe_get_local_optimizer_state: the moment's elements lo..hi",
          torch.equal(zu.safe_get_local_optimizer_state(p, "exp_avg"), m[lo:hi]))
    new = torch.linspace(-1, 1, 36)
    zu.safe_set_local_fp32_param(p, new[lo:hi])
    zu.safe_set_local_optimizer_state(p, new[lo:hi] * 0.5, "exp_avg")
    check("every rank's fragment written: the whole master and moment read back",
          torch.equal(zu.safe_get_full_fp32_param(p).flatten(), new) and
          torch.equal(zu.safe_get_full_optimizer_state(p, "exp_avg").flatten(), new * 0.5))
    check_raises("a fragment of another size raises ValueError naming both sizes",
                 lambda: zu.safe_set_local_fp32_param(p, torch.zeros(hi - lo + 1)),
                 ValueError, str(hi - lo + 1), str(hi - lo))
    check_raises("an optimizer state zinc's Adam does not keep raises ValueError",
                 lambda: zu.safe_get_local_optimizer_state(p, "momentum_buffer"), ValueError,
                 "momentum_buffer")


# Measured worst, stages 0-3 at 1 and 2 ranks: 4.4e-7 of the tensor's largest value (fp32
# rounding of the gradients); 4e-6 is test_torch_parity's bound, about 9x that.
def close(a, b, rel=4e-6):
    return a.shape == b.shape and (a - b).abs().max().item() <= rel * b.abs().max().item() + 1e-12


def check_moments(stage):
    """fp32, every rank the same batches (so the mean gradient is each rank's): Adam's moments
    against torch.optim.AdamW's exp_avg / exp_avg_sq on the same model and batches; then both
    moments set (zinc and torch alike) and one more step: the same weights and moments."""
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage}}
    model, ref = Model(), Model()
    engine, *_ = zinc.initialize(model=model, config=cfg)
    # zinc's kernel takes 1 - beta in fp32 from the fp32 beta (1.0f - 0.999f = 0.000999987,
    # kernels/cpu/ref.c, as DeepSpeed's CPU Adam and FusedAdam), torch from the double (0.001f):
    # v's increments differ by 1.29e-5 relatively. The reference is given zinc's fp32 betas, so
    # both compute the same arithmetic.
    betas = tuple(torch.tensor(b, dtype=torch.float32).item() for b in (0.9, 0.999))
    opt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=1e-2,
                            betas=betas, weight_decay=0.01)
    g = torch.Generator().manual_seed(3)

    def step():
        idx = torch.randint(0, 12, (2, 4), generator=g)
        loss = engine(idx).pow(2).mean()
        engine.backward(loss)
        engine.step()
        opt.zero_grad()
        ref(idx).pow(2).mean().backward()
        opt.step()

    def compare(what):
        bad = []
        for name in ("emb.weight", "body.weight", "body.bias"):
            mine, theirs = dict(model.named_parameters())[name], dict(ref.named_parameters())[name]
            for key in ("exp_avg", "exp_avg_sq"):
                if not close(zu.safe_get_full_optimizer_state(mine, key), opt.state[theirs][key]):
                    bad.append(f"{name} {key}")
        want = {k: v for k, v in ref.state_dict().items()}
        got = engine.module_state_dict()
        bad += [k for k in ("emb.weight", "body.weight", "body.bias") if not close(got[k], want[k])]
        check(what, not bad, f"{bad}")

    step()
    step()
    compare("safe_get_full_optimizer_state: exp_avg, exp_avg_sq and the weights equal "
            "torch AdamW's after 2 steps (relative 4e-6)")
    for mine, theirs in ((model.body.weight, ref.body.weight), (model.emb.weight, ref.emb.weight)):
        m = torch.full(theirs.shape, 0.01)
        v = torch.full(theirs.shape, 1e-4)
        zu.safe_set_full_optimizer_state(mine, m, "exp_avg")
        zu.safe_set_full_optimizer_state(mine, v, "exp_avg_sq")
        opt.state[theirs]["exp_avg"].copy_(m)
        opt.state[theirs]["exp_avg_sq"].copy_(v)
    check("safe_set_full_optimizer_state: the moments read back as set",
          torch.equal(zu.safe_get_full_optimizer_state(model.body.weight, "exp_avg"),
                      torch.full((6, 6), 0.01)) and
          torch.equal(zu.safe_get_full_optimizer_state(model.emb.weight, "exp_avg_sq"),
                      torch.full((12, 6), 1e-4)))
    step()
    compare("a step after both moments were set: torch AdamW's weights and moments after the "
            "same setting")
    engine.close()


def check_grads(stage, dtype):
    """safe_get_full_grad / safe_set_full_grad between the backwards of a 2-micro-batch step
    and its engine.step(), against plain torch's gradients of all ranks' batches (fp32)."""
    ga = 2
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": ga,
           "gradient_clipping": 0.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    model, ref = Model(), Model()
    engine, *_ = zinc.initialize(model=model, config=cfg)
    world, rank = engine.world_size, engine.global_rank
    betas = tuple(torch.tensor(b, dtype=torch.float32).item() for b in (0.9, 0.999))
    opt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=1e-2,
                            betas=betas, weight_decay=0.01)

    def batch(r, m):
        gen = torch.Generator().manual_seed(100 + 10 * r + m)
        return torch.randint(0, 12, (2, 4), generator=gen)

    for m in range(ga):          # DeepSpeed's loop; the last step() comes after the checks
        engine.backward(engine(batch(rank, m)).float().pow(2).mean())
        if m < ga - 1:
            engine.step()
    opt.zero_grad()
    for m in range(ga):
        for r in range(world):     # DeepSpeed's gradient: the mean over ranks, loss / GA each
            (ref(batch(r, m)).pow(2).mean() / (ga * world)).backward()
    names = ("emb.weight", "body.weight", "body.bias")
    mine, theirs = dict(model.named_parameters()), dict(ref.named_parameters())
    grads = {n: zu.safe_get_full_grad(mine[n]) for n in names}
    check("safe_get_full_grad: fp32 and the parameter's shape",
          all(g is not None and g.dtype == torch.float32 and g.shape == theirs[n].shape
              for n, g in grads.items()),
          f"{[(n, None if g is None else (g.dtype, g.shape)) for n, g in grads.items()]}")
    check("the tied weight's gradient under either name",
          torch.equal(zu.safe_get_full_grad(model.head.weight), grads["emb.weight"]))
    check("a frozen parameter's gradient: None", zu.safe_get_full_grad(model.frozen.weight) is None)
    if dtype == "fp32":
        # fp32 summation order only (ranks, micro-batches, torch's kernels): measured worst
        # 6.6e-8 of the tensor's largest value at stages 0-3, 1 and 2 ranks; 5e-7 is ~8x that.
        bad = [n for n in names if not close(grads[n], theirs[n].grad, 5e-7)]
        check("the gradient is the mean over ranks and micro-batches of torch's (relative 5e-7)",
              not bad, f"{bad}")
    value = ((torch.arange(36) % 13 - 6) / 64.0).reshape(6, 6)
    zu.safe_set_full_grad(model.body.weight, value)
    check("safe_set_full_grad: the gradient reads back as set",
          torch.equal(zu.safe_get_full_grad(model.body.weight), value))
    if stage == 3:               # the fragment forms of the gradient
        lo, hi = fragment(engine, model.body.weight)
        check("safe_get_local_grad: the gradient's elements lo..hi",
              torch.equal(zu.safe_get_local_grad(model.body.weight), value.flatten()[lo:hi]))
        zu.safe_set_local_grad(model.body.weight, -value.flatten()[lo:hi])
        check("safe_set_local_grad on every rank: the whole gradient reads back",
              torch.equal(zu.safe_get_full_grad(model.body.weight), -value))
        zu.safe_set_local_grad(model.body.weight, value.flatten()[lo:hi])
    check_raises("a gradient of another shape raises ValueError naming both shapes",
                 lambda: zu.safe_set_full_grad(model.body.weight, torch.zeros(6)),
                 ValueError, "(6,)", "(6, 6)")
    # The vectorized update over every parameter, the frozen one included (passed over): each
    # gradient doubled, body.weight's from the value just set. A value set is held in the
    # working dtype: at stages 0-1 with several ranks the gradient read is an fp32 average of
    # bf16 sums, so in bf16 the doubled one comes back rounded to bf16.
    old = {n: zu.safe_get_full_grad(mine[n]) for n in names}
    work = torch.float32 if dtype == "fp32" else torch.bfloat16
    seen = []

    def double(grad, param):
        seen.append(param)
        return grad * 2

    zu.safe_update_full_grad_vectorized(list(model.parameters()), double)
    check("safe_update_full_grad_vectorized: update_func(gradient, param) for each trained "
          "parameter, its result the gradient",
          all(torch.equal(zu.safe_get_full_grad(mine[n]), (old[n] * 2).to(work).float())
              for n in names) and
          len(seen) == len(names) and not any(p is model.frozen.weight for p in seen),
          f"{len(seen)} calls")
    zu.safe_set_full_grad(model.body.weight, value)   # back to the value the step is checked with
    for n in ("emb.weight", "body.bias"):
        zu.safe_set_full_grad(mine[n], old[n])
    before = zu.safe_get_full_fp32_param(model.body.weight)
    engine.step()
    ref.body.weight.grad.copy_(value)
    opt.step()
    # One Adam step from equal weights and gradients: measured worst 3.9e-8 of the tensor's
    # largest value (stages 0-3, fp32 and bf16, 1 and 2 ranks); 4e-7 is 10x that.
    if dtype == "fp32":
        got, want = engine.module_state_dict(), ref.state_dict()
        bad = [n for n in names if not close(got[n], want[n], 4e-7)]
        check("the step uses the gradient set: torch AdamW's weights given that gradient", not bad,
              f"{bad}")
    # Any dtype: body.weight's master after the step is torch AdamW's first step from the
    # master before it, given the gradient set (in bf16 the value set is exact in bf16).
    one = torch.nn.Parameter(before.clone())
    one.grad = value.clone()
    torch.optim.AdamW([one], lr=1e-2, betas=betas, weight_decay=0.01).step()
    check("the step uses the gradient set: body.weight's master is torch AdamW's step from it",
          close(zu.safe_get_full_fp32_param(model.body.weight), one.detach(), 4e-7))
    check("after the step the gradients read zero",
          all(not zu.safe_get_full_grad(mine[n]).any() for n in names))
    if stage < 2:                # no_sync: zinc has not been handed the gradient, `.grad` has it
        with engine.no_sync():
            engine.backward(engine(batch(rank, 0)).float().pow(2).mean())
            g = zu.safe_get_full_grad(model.body.weight)
            check("inside no_sync: `.grad` itself, as DeepSpeed's",
                  g is not None and g is model.body.weight.grad)
        engine.step()
    engine.close()
    check("after engine.close(): no gradient", zu.safe_get_full_grad(model.body.weight) is None)


if __name__ == "__main__":
    sys.exit(main())
