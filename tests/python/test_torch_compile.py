"""test_torch_compile.py — engine.compile() (DeepSpeed 0.19.8's): the model compiled in place by
torch.compile through nn.Module.compile, at ZeRO stages 0-2.

    python test_torch_compile.py            (torch 2.2 or later; exit 77, a skip, before)

A small model (LayerNorm, two Linears, GELU; a parameter used twice) trains 4 optimizer steps
with gradient accumulation 2 and clipping, at stages 0, 1 and 2, fp32 and bf16, compiled with
the "eager" backend (dynamo's graph run by torch's own kernels) and "aot_eager" (AOTAutograd's
compiled backward, whose gradients reach zinc's hooks on the parameters' AccumulateGrad nodes as
an eager backward's do), and at stage 2 fp32 with "inductor" (DeepSpeed's default: generated C++
kernels), beside the same engine uncompiled: the losses and the final weights equal bit for bit
with "eager", within the parity bound with the others (4e-6 fp32; bf16 1e-2). Measured with
torch 2.15 on the CPU, 2026-12-01: "aot_eager" bit for bit too; "inductor" 6.0e-8 (losses) and
1.6e-7 (weights) in fp32 at every stage, in bf16 2.8e-4 / 9.5e-4 at stages 1-2 and
3.7e-4 / 7.6e-3 at stage 0 (its fused kernels round bf16 differently). The model is compiled (its forward goes through dynamo: a frame count grows) and
engine.is_compiled is True; a second compile() changes nothing; compile_kwargs' backend is
overridden with a warning; stage 3, a DeepCompile schedule and compiled autograd raise
NotImplementedError naming them. Torch 1.13 (CI's) has no Module.compile: the refusal there is
python_torch_api's.
"""
import sys
import warnings

from _common import check, failures, torch, zinc

if not hasattr(torch.nn.Module, "compile"):
    print("SKIP: this torch has no nn.Module.compile (torch 2.2 or later)")
    sys.exit(77)

import torch._dynamo  # noqa: E402

GA, MICRO, STEPS, FEAT = 2, 4, 4, 16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(FEAT)
        self.up = torch.nn.Linear(FEAT, 32)
        self.down = torch.nn.Linear(32, FEAT)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return self.down(torch.nn.functional.gelu(self.up(h)))    # up and down used twice


def config(stage, dtype):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
         "gradient_clipping": 1.0, "zero_optimization": {"stage": stage},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}}}
    if dtype == "bf16":
        c["bf16"] = {"enabled": True}
    return c


def train(stage, dtype, backend):
    torch.manual_seed(0)
    model = Net()
    engine = zinc.initialize(model=model, config=config(stage, dtype))[0]
    if backend:
        engine.compile(backend=backend)
    wdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(STEPS * GA):
        x = torch.randn(MICRO, FEAT, generator=g).to(wdt)
        loss = (engine(x).float() ** 2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    weights = torch.cat([p.detach().float().flatten() for p in engine.module.parameters()])
    compiled = engine.is_compiled
    engine.close()
    return torch.tensor(losses), weights, compiled


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    for stage in (0, 1, 2):
        for dtype in ("fp32", "bf16"):
            ref_l, ref_w, _ = train(stage, dtype, None)
            backends = ("eager", "aot_eager") + (("inductor",) if (stage, dtype) == (2, "fp32")
                                                 else ())
            for backend in backends:
                torch._dynamo.reset()
                frames = torch._dynamo.utils.counters["frames"]["total"]
                l, w, compiled = train(stage, dtype, backend)
                traced = torch._dynamo.utils.counters["frames"]["total"] > frames
                dl, dw = rel(l, ref_l), rel(w, ref_w)
                bound = 0.0 if backend == "eager" else 4e-6 if dtype == "fp32" else 1e-2
                check(f"stage {stage} {dtype} compiled ({backend}): the uncompiled engine's "
                      f"losses and weights (bound {bound:g})",
                      compiled and traced and dl <= bound and dw <= bound,
                      f"compiled {compiled}, traced {traced}, losses {dl:.3g}, "
                      f"weights {dw:.3g}")
    torch.manual_seed(0)
    engine = zinc.initialize(model=Net(), config=config(2, "fp32"))[0]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        engine.compile(backend="eager", compile_kwargs={"backend": "inductor"})
    check("compile_kwargs' backend is overridden, with a warning",
          any("overridden" in str(w.message) for w in said), str([str(w.message) for w in said]))
    inner = engine.module._compiled_call_impl
    engine.compile(backend="aot_eager")
    check("a second compile() changes nothing", engine.module._compiled_call_impl is inner)
    for kwargs, needle in (({"schedule": [(0, "x")]}, "DeepCompile"),
                           ({"compiled_autograd_enabled": True}, "compiled autograd")):
        try:
            engine.compile(**kwargs)
            check(f"compile({list(kwargs)[0]}=...) raises", False)
        except NotImplementedError as ex:
            check(f"compile({list(kwargs)[0]}=...) raises NotImplementedError naming it",
                  needle in str(ex), str(ex))
    engine.close()
    engine = zinc.initialize(model=Net(), config=config(3, "fp32"))[0]
    try:
        engine.compile(backend="eager")
        check("compile() at stage 3 raises", False)
    except NotImplementedError as ex:
        check("compile() at stage 3 raises NotImplementedError naming it",
              "stage 3" in str(ex) and not engine.is_compiled, str(ex))
    engine.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
