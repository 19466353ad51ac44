"""test_example.py — examples/torch_gpt.py as a user runs it: N steps from the README's command,
and the loss must fall (from ln 32 = 3.47 towards the Markov chain's entropy; 20 steps at the
config's lr take it below 3.1 — measured 2.93 with the plain model). With `hf` the same for the
transformers GPT-2 (skipped, exit 77, when transformers is not installed).

    test_example.py gpt|hf [extra example args...]
    test_example.py zero-init gpt|hf LAUNCHER...      (LAUNCHER: mpiexec [flags] -np N)

`zero-init`: the model under the launcher, built inside zinc.zero.Init (`--zero-init`) and
built whole: the same criteria, and the two print the same lines (losses, lr, grad norms) — the
partitioned construction gives the model built whole (with `hf`, transformers' own weight
initialisation inside it included).

`gpt` also runs the plain model's forward on the meta device and fails if any op there makes a
tensor on the CPU: a tensor made without the input's device (the causal mask, the positions)
breaks `--device cuda`, which the first GPU run of the example found (2026-11-27). This is the
check that CI, which has no GPU, can make of it.
"""
import os
import re
import subprocess
import sys

from _common import torch  # noqa: F401 — skips without torch

which = sys.argv[1]
model = sys.argv[2] if which == "zero-init" else which
if model == "hf":
    try:
        import transformers  # noqa: F401
    except Exception as ex:  # noqa: BLE001
        print(f"SKIP: no transformers ({ex})")
        sys.exit(77)
example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "torch_gpt.py")


def forward_on_meta():
    """The ops of the plain model's forward, on the meta device, that made a CPU tensor."""
    from torch.utils._python_dispatch import TorchDispatchMode
    sys.path.insert(0, os.path.dirname(example))
    import torch_gpt

    class CpuResults(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else [out]
            if any(isinstance(o, torch.Tensor) and o.device.type == "cpu" for o in outs):
                self.ops.append(str(func))
            return out

    model = torch_gpt.GPT().to("meta")
    tok = torch.zeros(2, 16, dtype=torch.long, device="meta")
    try:
        with CpuResults() as mode:
            model(tok)
    except RuntimeError as ex:  # a newer torch refuses the mix itself
        return [str(ex)]
    return mode.ops


def run(cmd):
    """The example's output and its losses by step; exits failing when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    losses = {int(m.group(1)): float(m.group(2))
              for m in re.finditer(r"step +(\d+) +loss ([0-9.]+)", p.stdout)}
    if 1 not in losses or 20 not in losses:
        sys.exit(f"FAIL: no loss at steps 1 and 20 in the output: {losses}")
    if not (abs(losses[1] - 3.47) < 0.1 and losses[20] < 3.1):
        sys.exit(f"FAIL: loss {losses[1]:.4f} at step 1 (want ~3.47), {losses[20]:.4f} at step "
                 "20 (want < 3.1)")
    print(f"ok: loss {losses[1]:.4f} -> {losses[20]:.4f}")
    return [ln for ln in p.stdout.splitlines() if ln.startswith("step")]


if which == "zero-init":
    launch = sys.argv[3:] + [sys.executable, example, "--model", model, "--steps", "20"]
    whole = run(launch)
    parted = run(launch + ["--zero-init"])
    if parted != whole:
        sys.exit(f"FAIL: built in zinc.zero.Init {parted} vs built whole {whole}")
    print("ok: built in zinc.zero.Init, the same lines as built whole")
else:
    if which == "gpt":
        cpu_ops = forward_on_meta()
        if cpu_ops:
            sys.exit(f"FAIL: the model's forward on the meta device made CPU tensors: {cpu_ops}")
        print("ok: the forward makes every tensor on its input's device")
    run([sys.executable, example, "--model", which, "--steps", "20"] + sys.argv[2:])
