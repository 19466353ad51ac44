"""test_direct_backward.py STAGE — `loss.backward()` called directly instead of
engine.backward(loss), as DeepSpeed 0.19.8 accepts it at ZeRO stages 1-3 (python/zinc/_direct.py).

At stages 1-3, fp32 and bf16, with accumulation 1 and 2: four windows trained with
`loss.backward()` end with engine.backward's weights bit for bit (accumulation 3: within 1e-6);
a forward returning a dict whose loss is computed from its logits (transformers' shape, where
DeepSpeed divides the gradient twice) too; at stage 1 the window's `.grad` after a direct
backward is engine.backward's; a direct backward that raises midway (half a group's `.grad`
set), followed by the batch again (directly or through engine.backward) or by step(), trains
as engine.backward's same sequence (bit for bit), in a window's first and last micro-step; a second loss.backward() without
step() raises, as engine.backward's does, and training goes on; inside no_sync it raises. At
stage 0, and with fp16, it raises naming engine.backward (DeepSpeed raises there too), and the
engine trains with engine.backward after. A trained parameter frozen (requires_grad False)
after initialize: one RuntimeWarning naming it at the next optimizer step, none after, and
zinc goes on moving it (a zero gradient; momentum), as DeepSpeed's stage 1 does. A gradient
penalty (torch.autograd.grad through the output, then engine.backward) trains as plain torch.
"""
import sys
import warnings

from _common import Gain, check, finish, torch, zinc

STAGE = int(sys.argv[1])


class Net(torch.nn.Module):
    """Three layers; between the first and the second a backward can be made to raise once
    (fail_next). The first layer's bias is added after that point, so a backward that raises
    there leaves that group's bias `.grad` set and its weight's not (half a group)."""

    def __init__(self, as_dict=False):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 3)
        self.as_dict = as_dict
        self.fail_next = False

    def forward(self, x, y=None):
        h = torch.tanh(torch.nn.functional.linear(x, self.a.weight))
        if self.fail_next:
            self.fail_next = False
            h = _FailOnce.apply(h)
        logits = self.c(torch.tanh(self.b(h) + self.a.bias))
        if not self.as_dict:
            return logits
        return {"loss": (logits.float() - y).pow(2).mean(), "logits": logits}


class _FailOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        raise ValueError("injected: backward raised midway")


def engine_for(ga, dtype="fp32", stage=STAGE, model=None):
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}, "gradient_clipping": 1.0,
           "zero_optimization": {"stage": stage}}
    if dtype != "fp32":
        cfg[dtype] = {"enabled": True}
    engine, *_ = zinc.initialize(model=model or Net(), config=cfg)
    return engine


def batches(n, dtype):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        x, y = torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)
        yield (x.bfloat16() if dtype == "bf16" else x), y


def weights(engine):
    return [t.float().clone() for t in engine.module_state_dict().values()]


def differ(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def train(ga, dtype, direct, as_dict=False, fail_at=None, after="retry"):
    """4 windows; fail_at: the micro-batch whose backward raises midway once, after which the
    batch runs again the same way ("retry"), again through engine.backward ("engine"), or
    step() follows at once ("step")."""
    engine = engine_for(ga, dtype, model=Net(as_dict))
    for i, (x, y) in enumerate(batches(4 * ga, dtype)):
        for attempt in range(2 if i == fail_at and after != "step" else 1):
            engine.module.fail_next = attempt == 0 and i == fail_at
            out = engine(x, y) if as_dict else engine(x)
            loss = out["loss"] if as_dict else (out.float() - y).pow(2).mean()
            try:
                if direct and (attempt == 0 or after == "retry"):
                    loss.backward()
                else:
                    engine.backward(loss)
            except ValueError:
                assert attempt == 0 and i == fail_at, "an unexpected raise"
        engine.step()
    w = weights(engine)
    engine.close()
    return w


def refused(engine, what, needle):
    x, y = next(batches(1, "fp32"))
    try:
        (engine(x).float() - y).pow(2).mean().backward()
        check(f"{what}: loss.backward() raises", False, "it was accepted")
    except RuntimeError as ex:
        check(f"{what}: loss.backward() raises naming {needle}", needle in str(ex), str(ex))


def gradient_penalty():
    """torch.autograd.grad through the engine's output (a gradient penalty, as WGAN-GP's) runs
    no AccumulateGrad: it must not begin a backward of zinc's. The loop trains as plain torch
    (AdamW, no clipping)."""
    def loop(model, backward, step):
        g = torch.Generator().manual_seed(3)
        for _ in range(3):
            x = torch.randn(4, 6, generator=g).requires_grad_()
            y = torch.randn(4, 3, generator=g)
            out = model(x)
            gx, = torch.autograd.grad(out.sum(), x, create_graph=True)
            backward((out - y).pow(2).mean() + 0.1 * gx.pow(2).sum())
            step()
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    ref = torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.01)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    engine, *_ = zinc.initialize(model=model, config={
        "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
        "zero_optimization": {"stage": STAGE}})
    try:
        loop(engine, engine.backward, engine.step)
        ok, why = True, ""
    except RuntimeError as ex:
        ok, why = False, str(ex)
    if ok:
        def torch_backward(loss):
            ref.zero_grad()
            loss.backward()
        loop(plain, torch_backward, ref.step)
        d = differ([p.detach() for p in plain.state_dict().values()], weights(engine))
        ok, why = d < 1e-6, f"{d:.2e} from plain torch"
    check("a gradient penalty through torch.autograd.grad: trains as plain torch", ok, why)
    engine.close()


def two_engines():
    """A GAN's loop over two engines: the generator's engine.backward passes through the
    discriminator's engine output, which must not begin a backward of the discriminator's (it
    left that one awaiting a step, and its own backward after raised). The loop with D's
    parameters left trainable (its `.grad` from G's loss dropped by D's zero_grad) trains as
    the one that freezes them for G's step, bit for bit."""
    def run(freeze):
        torch.manual_seed(0)
        cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": STAGE},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
        G, *_ = zinc.initialize(model=torch.nn.Linear(4, 6), config=cfg)
        D, *_ = zinc.initialize(model=torch.nn.Linear(6, 1), config=cfg)
        g = torch.Generator().manual_seed(5)
        for _ in range(3):
            z, real = torch.randn(4, 4, generator=g), torch.randn(4, 6, generator=g)
            D.zero_grad()
            D.backward(D(G(z).detach()).mean() - D(real).mean())
            D.step()
            for p in D.module.parameters():
                p.requires_grad_(not freeze)
            G.backward(-D(G(z)).mean())
            G.step()
            for p in D.module.parameters():
                p.requires_grad_(True)
        out = weights(G) + weights(D)
        G.close()
        D.close()
        return out
    try:
        d = differ(run(True), run(False))
        ok, why = d == 0, f"{d:.3e}"
    except RuntimeError as ex:
        ok, why = False, str(ex)
    check("two engines (a GAN): the generator's backward through the discriminator's output "
          "begins none of the discriminator's", ok, why)


def frozen_since_init():
    engine = engine_for(1)
    data = list(batches(4, "fp32"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(data):
            if i == 2:
                engine.module.b.weight.requires_grad_(False)
                before = engine.module_state_dict()["b.weight"].clone()
            engine.backward((engine(x).float() - y).pow(2).mean())
            engine.step()
    named = [w for w in seen if "b.weight has requires_grad=False" in str(w.message)]
    check("a parameter frozen after initialize: one RuntimeWarning naming it over two steps",
          len(named) == 1 and named[0].category is RuntimeWarning,
          f"{[str(w.message)[:80] for w in seen]}")
    check("... and zinc goes on moving it (zero gradient, momentum)",
          not torch.equal(before, engine.module_state_dict()["b.weight"]))
    engine.close()


def main():
    if STAGE == 0:
        engine = engine_for(1)
        refused(engine, "stage 0", "engine.backward(loss)")
        x, y = next(batches(1, "fp32"))
        engine.zero_grad()
        engine.backward((engine(x).float() - y).pow(2).mean())
        engine.step()
        check("stage 0: engine.backward trains after the refusal", engine.global_steps == 1)
        engine.close()
        return finish()
    for dtype in ("fp32", "bf16"):
        for ga in (1, 2):
            d = differ(train(ga, dtype, False), train(ga, dtype, True))
            check(f"{dtype}, accumulation {ga}: loss.backward() trains as engine.backward, "
                  f"bitwise", d == 0, f"{d:.3e}")
    d = differ(train(3, "fp32", False), train(3, "fp32", True))
    check(f"fp32, accumulation 3: within 1e-6 of engine.backward ({d:.1e})", d < 1e-6)
    d = differ(train(2, "fp32", False, as_dict=True), train(2, "fp32", True, as_dict=True))
    check("a dict output whose loss comes from its logits: scaled once, bitwise", d == 0,
          f"{d:.3e}")
    for fail_at in (0, 1):
        want = train(2, "fp32", False, fail_at=fail_at)
        for after in ("retry", "engine"):
            d = differ(want, train(2, "fp32", True, fail_at=fail_at, after=after))
            check(f"micro-step {fail_at}: a direct backward that raises midway, then the batch "
                  f"again ({after}): bitwise engine.backward's", d == 0, f"{d:.3e}")
        d = differ(train(2, "fp32", False, fail_at=fail_at, after="step"),
                   train(2, "fp32", True, fail_at=fail_at, after="step"))
        check(f"micro-step {fail_at}: a direct backward that raises midway, then step(): "
              f"bitwise engine.backward's", d == 0, f"{d:.3e}")
    if STAGE == 1:   # `.grad` inside the window is zinc's window sum in DeepSpeed's units
        grads = []
        for direct in (False, True):
            engine = engine_for(2)
            x, y = next(batches(1, "fp32"))
            loss = (engine(x).float() - y).pow(2).mean()
            loss.backward() if direct else engine.backward(loss)
            grads.append([p.grad.clone() for p in engine.module.parameters()])
            engine.close()
        check("stage 1: the window's .grad after a direct backward is engine.backward's",
              all(torch.equal(a, b) for a, b in zip(*grads)))
    engine = engine_for(1)
    x, y = next(batches(1, "fp32"))
    (engine(x).float() - y).pow(2).mean().backward()
    refused(engine, "a second backward without step()", "without engine.step()")
    engine.step()
    check("... and step() after it applies the first", engine.global_steps == 1)
    if STAGE < 2:
        with engine.no_sync():
            refused(engine, "inside no_sync", "no_sync")
    engine.close()
    frozen_since_init()
    gradient_penalty()
    two_engines()
    engine = engine_for(1, "fp16", model=Gain())
    x = torch.randn(2, 8).half()
    try:
        engine(x).float().pow(2).mean().backward()
        check("fp16: loss.backward() raises", False, "it was accepted")
    except RuntimeError as ex:
        check("fp16: loss.backward() raises naming engine.backward", "engine.backward" in str(ex),
              str(ex))
    engine.zero_grad()
    engine.backward(engine(x).float().pow(2).mean())
    engine.step()
    check("fp16: engine.backward trains after the refusal", engine.global_steps == 1)
    engine.close()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
