"""custom_load_cases.py — the runs that test_custom_load.py compares with DeepSpeed 0.19.8 for
load_checkpoint(custom_load_fn=...) (ds_fixtures/make_custom_load.py records DeepSpeed's, never
in CI).

DeepSpeed calls custom_load_fn(src=<the checkpoint's module state dict>, dst=engine.module) in
place of the module's load_state_dict, then goes on with the rest of the load. Each case: run A
(two _Shifted layers named 0 and 1) trains STEPS windows and saves; run B builds its model, loads
A's checkpoint with the case's flags and function, and trains STEPS windows more:
- `remap`: B's layers are named `first` and `second`, so only a function that renames the keys
  can load A's weights (a checkpoint of a model that was wrapped or renamed since);
- `edit`: B is A's model; the function loads the state and then halves one weight and moves one
  buffer, which shows where each kind of value goes after the rest of the load;
- `partial`: B is A's model; the function loads layer 0 alone, so layer 1 shows what becomes of
  a parameter the function leaves (its fp32 master restarts from its 16-bit weight).
The record also holds the keys of `src` and the dtype of its trained weights.
run(initialize, get_master, case, ckpt_dir) returns B's losses, lr per window, counters and final
fp32 masters; `initialize` is deepspeed.initialize or zinc.initialize."""
import torch

from load_flags_cases import STEPS, _Scale, make_config, train_windows, trained_on

FLAGS = {"full": {}, "noopt": {"load_optimizer_states": False},
         "module": {"load_module_only": True}}


class _Shifted(_Scale):
    """x * w + b + shift: _Scale with a persistent buffer."""

    def __init__(self, n, at):
        super().__init__(n, at)
        self.register_buffer("shift", torch.linspace(-0.1, 0.1, n))

    def forward(self, x):
        return x * self.w + self.b + self.shift


class Renamed(torch.nn.Module):
    """A's model with its layers under other names (layer: load_flags_cases.py's _Scale for
    that module's model renamed)."""

    def __init__(self, at, layer=_Shifted):
        super().__init__()
        self.first, self.second = layer(6, at), layer(6, at)

    def forward(self, x):
        return self.second(self.first(x))


def remap(src, dst):
    """A's keys (0.*, 1.*) as Renamed's."""
    names = {"0": "first", "1": "second"}
    dst.load_state_dict({names[k.split(".", 1)[0]] + "." + k.split(".", 1)[1]: v
                         for k, v in src.items()})


def edit(src, dst):
    """The checkpoint's state, then 0.w halved and 1.shift moved by 0.25."""
    dst.load_state_dict(src)
    with torch.no_grad():
        dst[0].w.mul_(0.5)
        dst[1].shift.add_(0.25)


def partial(src, dst):
    """Layer 0 alone (a pretrained body under a new head): layer 1 keeps the engine's values."""
    dst.load_state_dict({k: v for k, v in src.items() if k.startswith("0.")}, strict=False)


FNS = {"remap": remap, "edit": edit, "partial": partial}


def _cases():
    out = {}
    for dtype in ("fp32", "bf16"):
        for stage in (0, 1, 2, 3):
            for flag, fn in (("module", "remap"), ("noopt", "remap"), ("full", "edit"),
                             ("module", "edit"), ("module", "partial"), ("noopt", "partial")):
                out[f"{dtype}_s{stage}_{flag}_{fn}"] = dict(dtype=dtype, stage=stage, flag=flag,
                                                            fn=fn)
    return out


CASES = _cases()


def model_a(at):
    """Run A's model (and run B's where the function does not rename)."""
    return torch.nn.Sequential(_Shifted(6, at), _Shifted(6, at))


def model_b(case, at):
    """Run B's model: A's under other names where the case's function renames the keys."""
    return Renamed(at) if CASES[case]["fn"] == "remap" else model_a(at)


def config(case):
    return make_config(CASES[case]["dtype"], CASES[case]["stage"])


def _windows(engine, case, n, seed):
    return train_windows(engine, CASES[case]["dtype"], n, seed)


def run(initialize, get_master, case, ckpt_dir, after_load=None, export=None):
    """Runs A (saves into ckpt_dir, tag "a") then B; returns B's record: {"losses", "lrs" (the lr
    each window starts with), "global_steps_at_load", "global_steps", "masters" {name: flat},
    "buffers" {name: flat}}, or {"raised": the message} when B's load raised. after_load(engine):
    called on B after its load. export(ckpt_dir): the folder B loads from instead (A's
    checkpoint in another format)."""
    c = CASES[case]
    m = model_a(1.0)
    a, *_ = initialize(model=m, model_parameters=m.parameters(), config=config(case))
    _windows(a, case, STEPS, 1)
    a.save_checkpoint(ckpt_dir, tag="a")
    if export is not None:
        ckpt_dir = export(ckpt_dir)
    m = model_b(case, 0.7)
    b, *_ = initialize(model=m, model_parameters=m.parameters(), config=config(case))
    seen = {}

    def fn(src, dst):
        seen["src_keys"] = sorted(src)
        seen["src_dtype"] = str(src["0.w"].dtype)
        FNS[c["fn"]](src, dst)
    try:
        b.load_checkpoint(ckpt_dir, tag="a", custom_load_fn=fn, **FLAGS[c["flag"]])
    except Exception as ex:  # noqa: BLE001 — what DeepSpeed raises is part of its record
        return {"raised": f"{type(ex).__name__}: {ex}"[:300]}
    if after_load is not None:
        after_load(b)
    out = trained_on(b, get_master, lambda e: _windows(e, case, STEPS, 3))
    out["buffers"] = {n: t.float().flatten().tolist() for n, t in b.module.named_buffers()}
    return dict(out, **seen)
