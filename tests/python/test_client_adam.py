"""test_client_adam.py — a client optimizer's Adam settings read into zinc's Adam
(python/zinc/_optimizer.py, _client_optimizer).

    python test_client_adam.py

fp32, stage 1, no clipping, no weight decay; three optimizer steps of an elementwise model
whose gradients the test knows (loss = sum(w * x + b): grad w = x summed over the batch,
grad b = the batch size), each with its own x. The weights after each step are checked against
Adam computed here in float64, in DeepSpeed's FusedAdam form (denominator
sqrt(v) / sqrt(1 - beta2^t) + eps, step lr / (1 - beta1^t), both factors 1 without bias
correction):
- FusedAdam(bias_correction=False): the uncorrected update (the first step is about
  sqrt(1 - beta2) / (1 - beta1) = 0.32 of the corrected one, so ignoring the setting fails);
- FusedAdam(bias_correction=True) and torch.optim.Adam: the corrected update;
- param groups whose bias_correction differ: refused (NotImplementedError naming it);
- DeepSpeedCPUAdam with fp32_optimizer_states false, given as False or as 0: refused naming it
  (zinc keeps the moments in fp32).
Exit 77 when torch is not importable."""
import math
import sys

from _common import Gain, check, check_raises, finish, torch, zinc
from zinc.ops.adam import DeepSpeedCPUAdam, FusedAdam

MICRO, STEPS = 4, 3
LR, BETAS, EPS = 1e-2, (0.9, 0.999), 1e-8
CFG = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
       "gradient_clipping": 0.0, "zero_optimization": {"stage": 1}}


def batch(step):
    return torch.randn(MICRO, 8, generator=torch.Generator().manual_seed(10 + step))


def reference(w0, grads, corrected):
    """Adam over `grads` (lists of floats, one per step) from w0, in float64."""
    b1, b2 = BETAS
    w, m, v, out = list(w0), [0.0] * len(w0), [0.0] * len(w0), []
    for t, g in enumerate(grads, start=1):
        c1 = 1 - b1 ** t if corrected else 1.0
        c2 = 1 - b2 ** t if corrected else 1.0
        for i, gi in enumerate(g):
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            w[i] -= LR / c1 * m[i] / (math.sqrt(v[i]) / math.sqrt(c2) + EPS)
        out.append(list(w))
    return out


def trained(make_optimizer):
    """The model's (w, b) after each step, and the (w, b) gradients given."""
    model = Gain()
    engine, *_ = zinc.initialize(model=model, config=CFG,
                                 optimizer=make_optimizer(model.parameters()))
    got, grads = [], []
    for s in range(STEPS):
        x = batch(s)
        engine.backward(engine(x).sum())
        engine.step()
        grads.append(x.double().sum(0).tolist() + [float(MICRO)] * 8)
        got.append(torch.cat([model.w.detach(), model.b.detach()]).double().tolist())
    engine.close()
    return got, grads


def close(a, b):
    return all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b))


def main():
    w0 = torch.cat([Gain().w.detach(), Gain().b.detach()]).double().tolist()
    for name, make, corrected in (
            ("FusedAdam(bias_correction=False)",
             lambda p: FusedAdam(p, lr=LR, betas=BETAS, eps=EPS, bias_correction=False), False),
            ("FusedAdam(bias_correction=True)",
             lambda p: FusedAdam(p, lr=LR, betas=BETAS, eps=EPS, bias_correction=True), True),
            ("torch.optim.Adam", lambda p: torch.optim.Adam(p, lr=LR, betas=BETAS, eps=EPS),
             True)):
        got, grads = trained(make)
        want = reference(w0, grads, corrected)
        other = reference(w0, grads, not corrected)
        check(f"{name}: each step's weights are Adam's "
              f"{'with' if corrected else 'without'} bias correction",
              all(close(g, w) for g, w in zip(got, want)), f"{got} vs {want}")
        check(f"{name}: ... and not Adam's {'without' if corrected else 'with'} it",
              not close(got[0], other[0]), f"{got[0]} vs {other[0]}")

    def mixed():
        model = Gain()
        opt = FusedAdam([{"params": [model.w]},
                         {"params": [model.b], "bias_correction": False}], lr=LR)
        zinc.initialize(model=model, config=CFG, optimizer=opt)

    check_raises("param groups with their own bias_correction: refused naming it", mixed,
                 NotImplementedError, "bias_correction")
    for value in (False, 0):
        model = Gain()
        check_raises(f"DeepSpeedCPUAdam(fp32_optimizer_states={value!r}): refused naming it",
                     lambda: zinc.initialize(
                         model=model, config=CFG,
                         optimizer=DeepSpeedCPUAdam(model.parameters(),
                                                    fp32_optimizer_states=value)),
                     NotImplementedError, "fp32_optimizer_states")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
