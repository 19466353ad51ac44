"""test_grad_buffer.py — zinc's gradient buffer is torch's memory, lent for one accumulation
window at a time (zinc_grad_buffer_external / _attach; python/zinc/_handover.py).

DeepSpeed holds its gradients from a window's backward to its step; zinc used to keep its
16-bit gradient buffer (2 bytes a parameter at stages 0-1) for the engine's life, so on a GPU it
sat on top of the forward's activations (bench/RESULTS.md 11d: 2.1 GiB over DeepSpeed on a 1.1B
Llama). Now the front-end allocates the buffer with torch at the window's first hand-over and
drops it after the window's step, so torch's allocator has that memory for the next forward.

Checked at stages 0-3 (bf16, 2 micro-steps a window) and with offload_optimizer at stages 1-2:
zinc allocates no gradient buffer of its own; no buffer is lent during a window's first forward,
one is during its second (the accumulated gradients), and after the window's step it is gone
(a weak reference to the lent tensor is dead: torch freed it); the model trains (every weight
moves, the losses fall). At stage 2 with offload the gradient accumulates in host memory and
nothing is lent at all. safe_set_full_grad at a window's start lends the buffer too (stages
0-3): the value set reads back, another parameter's gradient reads zero.

    python test_grad_buffer.py
"""
import gc
import sys
import weakref

from _common import check, finish, torch, zinc
from test_torch_parity import Tiny


def run(stage, offload=False):
    what = f"stage {stage}{' offload' if offload else ''}"
    torch.manual_seed(0)
    model = Tiny(vocab=48, d=24, layers=3)
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
           "gradient_clipping": 1.0, "steps_per_print": 1 << 30,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
           "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                      config=cfg, dist_init_required=False)
    planned, allocated = engine.memory()["grad"]
    lends = not (offload and stage >= 2)
    check(f"{what}: zinc allocates no gradient buffer ({planned} bytes planned)",
          allocated == 0 and (planned > 0) == lends, f"planned {planned}, allocated {allocated}")

    seen = []       # (micro-step, lent during its forward)
    model.register_forward_pre_hook(lambda *_: seen.append(engine._grad_buf is not None))
    gone, losses = [], []
    before = engine.module_state_dict()         # whole at stage 3 too
    x = torch.randint(0, 48, (2, 12))
    for i in range(8):
        loss = engine(x).float().logsumexp(-1).mean()
        engine.backward(loss)
        lent = weakref.ref(engine._grad_buf) if engine._grad_buf is not None else None
        engine.step()
        if i % 2 == 1:            # the window's last micro-step: its step gave the buffer back
            gc.collect()
            gone.append(lent is None or lent() is None)
        losses.append(float(loss))
    want = [False, lends] * 4
    check(f"{what}: lent from the window's first hand-over to its step, not in its first "
          f"forward", seen == want, f"lent during the forwards: {seen}, want {want}")
    check(f"{what}: the lent tensor is freed after each window's step", all(gone), f"{gone}")
    after = engine.module_state_dict()
    still = [n for n, w in before.items() if torch.equal(w, after[n])]
    check(f"{what}: every weight trained, the loss fell", not still and losses[-1] < losses[0],
          f"unchanged {still}, losses {losses[0]:.4f} -> {losses[-1]:.4f}")

    if lends:
        named = [(n, p) for n, p in engine.module.named_parameters() if p.requires_grad]
        params = [p for _, p in named]
        shape = before[named[0][0]].shape            # (stage 3's parameters are empty here)
        value = torch.linspace(-1, 1, shape.numel()).view(shape)
        zinc.utils.safe_set_full_grad(params[0], value)
        check(f"{what}: safe_set_full_grad at a window's start lends the buffer",
              engine._grad_buf is not None)
        got = zinc.utils.safe_get_full_grad(params[0]).float().cpu()
        other = zinc.utils.safe_get_full_grad(params[-1]).float().cpu()
        check(f"{what}: the gradient set reads back, another reads zero (the lent buffer was "
              f"zeroed)", torch.equal(got, value.to(torch.bfloat16).float()) and
              not other.any(), f"max |set - read| {(got - value).abs().max():.3g}, "
              f"max |other| {other.abs().max():.3g}")
    engine.close()


def main():
    for stage in range(4):
        run(stage)
    run(1, offload=True)
    run(2, offload=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
