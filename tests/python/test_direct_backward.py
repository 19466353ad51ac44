"""test_direct_backward.py — `loss.backward()` called directly instead of engine.backward(loss).

    python test_direct_backward.py STAGE        (1 rank, or 2 under mpirun)

DeepSpeed 0.19.8 accepts a plain torch backward at ZeRO stages 1-3, fp16's loss scale the
caller's (`engine.scale(loss).backward()`; a dynamic scale without it is refused); its stage 0
refuses a direct backward. zinc divides each trained parameter's gradient by
gradient_accumulation_steps, as engine.backward divides the loss. Checked here, at STAGE:

- stages 1-3: fp32 and bf16, accumulation 1 and 2, clipping, a model whose forward returns a
  dict holding a tuple (a loss made from two of its tensors): direct backward trains bit for bit
  as engine.backward (same losses, same weights); `managed_gradient_accumulation: false` with
  windows of 1, 3 and 2 too, `global_samples` alike;
- outputs a per-output division counts twice: a hidden state returned beside the logits made
  from it (and twice), the engine's output through the engine again: bit for bit
  engine.backward's;
- a gradient penalty (torch.autograd.grad through the output, then the loss's backward): the
  first window's penalties plain torch's, the direct backward after it engine.backward's; at
  stage 0 and in fp16 an engine.backward script with it is not refused;
- fp16 (an elementwise model, dynamic scale): `loss.backward()` without engine.scale raises
  naming engine.scale and leaves nothing behind (the loop goes on with engine.scale and ends as
  the run without the refused call); `engine.scale(loss).backward()` trains bit for bit as
  engine.backward;
- a direct backward that raises midway (a hook in the model), the batch skipped: the loop goes
  on and ends bit for bit as the same loop through engine.backward;
- a second direct backward of the same micro-step where the first ended it (accumulation 1,
  retain_graph) is refused naming engine.step(), and nothing of it is applied;
- stage 0: a direct backward raises naming stage 0 and engine.backward; the loop goes on through
  engine.backward and ends as without the refused call;
- engine.scale refuses a tensor of two elements.

The front-end before this change refused the step after every direct backward ("no backward()
since the last step"); the first form of it (dividing at each output) fails the output-form,
penalty and fp16-penalty checks.
"""
import sys

from _common import Gain, check, check_raises, finish, torch, zinc

STAGE = int(sys.argv[1])
STEPS = 3


class Net(torch.nn.Module):
    """Linear, LayerNorm, two heads; the forward returns {"out": (head a, head b)} (a dict, as
    transformers' ModelOutput; with `fail`, the gradient reaching the trunk's output raises)."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
        self.a = torch.nn.Linear(16, 4)
        self.b = torch.nn.Linear(16, 4)
        self.fail = False

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        if self.fail:
            def boom(_):
                raise RuntimeError("simulated out of memory")
            h.register_hook(boom)
        return {"out": (self.a(h), self.b(h))}


def config(dtype, ga, **extra):
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
           "gradient_clipping": 0.5, "zero_optimization": {"stage": STAGE}, **extra}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif dtype == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    return cfg


def data(n, features=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(4, features, generator=g).to(dtype), torch.randn(4, 4, generator=g))
            for _ in range(n)]


def loss_of(engine, x, y):
    a, b = engine(x)["out"]
    return ((a.float() - y) ** 2).mean() + 0.5 * ((b.float() + y) ** 2).mean()


def run(dtype, ga, direct, windows=None, fail_at=None, refuse_at=None):
    """Trains Net (seeded alike) and returns (losses, weights, global_samples). `windows`: with
    managed_gradient_accumulation false, the micro-batches of each window. `fail_at`: that
    micro-batch's backward raises midway and the batch is skipped. `refuse_at`: after that
    micro-batch's backward, a second direct one through the same graph (refused)."""
    torch.manual_seed(0)
    model = Net()
    extra = {"managed_gradient_accumulation": False} if windows else {}
    engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                 config=config(dtype, ga, **extra))
    cast = torch.bfloat16 if dtype == "bf16" else torch.float32
    ends = set()
    if windows:
        at = 0
        for w in windows:
            at += w
            ends.add(at - 1)
    losses = []
    n = sum(windows) if windows else STEPS * ga
    for k, (x, y) in enumerate(data(n + (fail_at is not None))):
        if k == fail_at:
            model.fail = True
            try:
                loss = loss_of(engine, x.to(cast), y)
                loss.backward() if direct else engine.backward(loss)
            except RuntimeError as ex:
                assert "simulated out of memory" in str(ex), ex
            finally:
                model.fail = False
            continue
        loss = loss_of(engine, x.to(cast), y)
        if direct:
            loss.backward(retain_graph=k == refuse_at)
        else:
            engine.backward(loss)
        if k == refuse_at:
            check_raises(f"a second direct backward of micro-step {k} (accumulation 1) is refused",
                         lambda: loss.backward(), RuntimeError, "engine.step()")
        losses.append(loss.item())
        if not windows or k in ends:
            engine.step()
        elif windows:
            pass      # the next forward ends the micro-step
    weights = [v.detach().float().clone() for v in engine.module_state_dict().values()]
    samples = engine.global_samples
    engine.close()
    return losses, weights, samples


def same(a, b):
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        torch.equal(x, y) for x, y in zip(a[1], b[1])) and a[2] == b[2]


def detail(a, b):
    if len(a[1]) != len(b[1]):
        return f"{len(a[1])} against {len(b[1])} tensors"
    d = max((x - y).abs().max().item() for x, y in zip(a[1], b[1]))
    return f"losses {a[0]} vs {b[0]}; weights at most {d:.3g} apart; samples {a[2]} vs {b[2]}"


def safe(fn):
    """fn()'s result, or the error it raised as ([], [], message): a failed run is a failed check,
    and the other checks still run."""
    try:
        return fn()
    except Exception as ex:  # noqa: BLE001
        return ([], [], f"raised {type(ex).__name__}: {ex}")


def penalty_checks():
    """A gradient penalty: torch.autograd.grad through the engine's output (create_graph), then
    the loss's backward, accumulation 2. The autograd.grad pass is not the micro-step's backward
    and its values are plain torch's: the penalties of the first window are those of a plain
    model on the initial weights, bit for bit (DeepSpeed 0.19.8's output hooks divide that
    pass by the accumulation steps: a quarter of these). loss.backward() after it trains bit
    for bit as engine.backward (the division on each parameter's gradient reaches the
    penalty's path too). engine.backward users keep their numbers: an fp16 dynamic scale, or
    stage 0, does not refuse the pass (a first form, which refused at the outputs, raised
    there: "called directly" at stage 0, "loss scaling is required" in fp16)."""
    def train(direct):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 1))
        w = [p.detach().clone() for p in model.parameters()]
        engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                     config=config("fp32", 2))
        pens, want = [], []
        for k, (x, y) in enumerate(data(2 * STEPS)):
            x = x.requires_grad_(True)
            out = engine(x)
            gx, = torch.autograd.grad(out.sum(), x, create_graph=True)
            pen = gx.pow(2).mean()
            loss = ((out - y[:, :1]) ** 2).mean() + pen
            if k < 2:          # a plain model on the initial weights
                F = torch.nn.functional
                ref = F.linear(torch.tanh(F.linear(x, w[0], w[1])), w[2], w[3])
                rgx, = torch.autograd.grad(ref.sum(), x)
                want.append(rgx.pow(2).mean().item())
            pens.append(pen.item())
            loss.backward() if direct else engine.backward(loss)
            engine.step()
        out = (pens, [v.detach().float().clone() for v in engine.module_state_dict().values()],
               engine.global_samples)
        engine.close()
        return out, want

    try:
        ref, want = train(False)
    except Exception as ex:  # noqa: BLE001
        ref, want = ([], [], f"raised {type(ex).__name__}: {ex}"), []
    check(f"gradient penalty (autograd.grad through the output), stage {STAGE}: "
          f"engine.backward trains", len(ref[1]) > 0, str(ref[2]))
    check("... its first window's penalties are plain torch's",
          len(want) == 2 and ref[0][:2] == want, f"{ref[0][:2]} vs {want}")
    if STAGE == 0:
        return
    got = safe(lambda: train(True)[0])
    check("... loss.backward() after the pass trains as engine.backward", same(ref, got),
          detail(ref, got))


class Hidden(torch.nn.Module):
    """Returns its hidden state beside the logits made from it, the hidden state twice
    (transformers' output_hidden_states: the last hidden state leads into the logits)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return {"logits": self.b(h), "hidden_states": (h, h)}


def shape_checks():
    """Outputs used in ways a per-output division counts twice: the logits made from a hidden
    state that is an output too (and returned twice), and the engine's output fed through the
    engine again (x -> engine -> engine). loss.backward() trains bit for bit as engine.backward
    (the first form divided at every output a gradient passed: the earlier layers' gradients
    by 4 or 8 where 2 is due)."""
    def hidden_loss(engine, x, y):
        out = engine(x)
        return ((out["logits"] - y) ** 2).mean() + 0.1 * out["hidden_states"][0].pow(2).mean()

    def again_loss(engine, x, y):
        return ((engine(engine(x))[:, :4] - y) ** 2).mean()

    def square():
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())

    for what, make, loss_fn in (("a hidden state output beside the logits made from it",
                                 Hidden, hidden_loss),
                                ("the engine's output through the engine again", square,
                                 again_loss)):
        ref = safe(lambda: refusal_run(make, "fp32", loss_fn,
                                       lambda e, loss: e.backward(loss))[0])
        got = safe(lambda: refusal_run(make, "fp32", loss_fn, lambda e, loss: loss.backward())[0])
        check(f"{what}: loss.backward() trains as engine.backward", same(ref, got),
              detail(ref, got))


def refusal_run(make_model, dtype, loss_fn, backward, at=None):
    """Trains make_model() for 2 x STEPS micro-batches (accumulation 2), each through
    backward(engine, loss); at micro-batch `at` a loss.backward() called directly comes first,
    whose RuntimeError's text is kept. Returns (losses, weights, global_samples) and that text
    (None: nothing raised)."""
    torch.manual_seed(0)
    model = make_model()
    engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                 config=config(dtype, 2))
    cast = torch.float16 if dtype == "fp16" else torch.float32
    losses, refused = [], None
    for k, (x, y) in enumerate(data(2 * STEPS, 8, cast)):
        if k == at:
            try:
                loss_fn(engine, x, y).backward()
            except RuntimeError as ex:
                refused = str(ex)
        loss = loss_fn(engine, x, y)
        backward(engine, loss)
        engine.step()
        losses.append(loss.item())
    out = (losses, [v.detach().float().clone() for v in engine.module_state_dict().values()],
           engine.global_samples)
    engine.close()
    return out, refused


def fp16_checks():
    """fp16 with a dynamic scale: refused without engine.scale, bit for bit with it."""
    def loss_fn(engine, x, y):
        return ((engine(x).float() - y.repeat(1, 2)) ** 2).mean()

    def scaled(engine, loss):
        engine.scale(loss).backward()

    ref, _ = refusal_run(Gain, "fp16", loss_fn, lambda e, loss: e.backward(loss))
    got, _ = refusal_run(Gain, "fp16", loss_fn, scaled)
    check("fp16: engine.scale(loss).backward() trains bit for bit as engine.backward(loss)",
          same(ref, got), detail(ref, got))
    after, refused = refusal_run(Gain, "fp16", loss_fn, scaled, at=1)
    check("fp16 (dynamic scale): loss.backward() without engine.scale raises naming it",
          refused is not None and "engine.scale(loss)" in refused, str(refused))
    check("fp16: after the refused backward the loop trains as without it",
          same(ref, after), detail(ref, after))

    def penalty_loss(engine, x, y):
        x = x.requires_grad_(True)
        out = engine(x).float()
        gx, = torch.autograd.grad(out.sum(), x, create_graph=True)
        return ((out - y.repeat(1, 2)) ** 2).mean() + gx.float().pow(2).mean()

    try:
        pen, _ = refusal_run(Gain, "fp16", penalty_loss, lambda e, loss: e.backward(loss))
        raised = None
    except RuntimeError as ex:
        pen, raised = None, str(ex)
    check("fp16: a gradient penalty's autograd.grad under engine.backward is not refused",
          raised is None and len(pen[1]) > 0, str(raised))


def stage0_checks():
    def engine_backward(engine, loss):
        engine.backward(loss)

    ref, _ = refusal_run(Net, "fp32", loss_of, engine_backward)
    after, refused = refusal_run(Net, "fp32", loss_of, engine_backward, at=2)
    check("stage 0: loss.backward() raises naming stage 0 and engine.backward",
          refused is not None and "stage 0" in refused and "engine.backward(loss)" in refused,
          str(refused))
    check("stage 0: after the refused backward the loop trains as without it",
          same(ref, after), detail(ref, after))


def main():
    zinc.init_distributed()
    if STAGE == 0:
        stage0_checks()
        penalty_checks()
        return finish()
    for dtype in ("fp32", "bf16"):
        for ga in (1, 2):
            ref = safe(lambda: run(dtype, ga, False))
            got = safe(lambda: run(dtype, ga, True))
            check(f"{dtype}, accumulation {ga}: loss.backward() trains as engine.backward(loss)",
                  same(ref, got), detail(ref, got))
    ref = safe(lambda: run("bf16", 2, False, windows=[1, 3, 2]))
    got = safe(lambda: run("bf16", 2, True, windows=[1, 3, 2]))
    check("managed_gradient_accumulation false, windows 1, 3, 2: as engine.backward "
          "(global_samples too)", same(ref, got), detail(ref, got))
    ref = safe(lambda: run("fp32", 2, False, fail_at=3))
    got = safe(lambda: run("fp32", 2, True, fail_at=3))
    check("a direct backward raising midway, its batch skipped: the loop ends as "
          "engine.backward's", same(ref, got), detail(ref, got))
    ref = safe(lambda: run("fp32", 1, False))
    got = safe(lambda: run("fp32", 1, True, refuse_at=1))
    check("after the refused second backward the loop trains as without it",
          same(ref, got), detail(ref, got))
    penalty_checks()
    shape_checks()
    fp16_checks()
    torch.manual_seed(0)
    model = Net()
    engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                 config=config("fp32", 1))
    x, y = data(1)[0]
    a, _ = engine(x)["out"]
    check_raises("engine.scale of a two-element tensor raises", lambda: engine.scale(a[0, :2]),
                 ValueError, "one-element")
    engine.close()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
