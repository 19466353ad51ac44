"""load_flags_cases.py — the runs that test_ds_load_flags.py compares with DeepSpeed 0.19.8
(ds_fixtures/make_load_flags.py records DeepSpeed's, never in CI).

DeepSpeed's load_checkpoint(load_optimizer_states=False) loads the weights and the counters
(global_steps, skipped_steps, and the LR scheduler's position unless load_lr_scheduler_states
is False too) and leaves the optimizer's Adam state as it was: a fresh engine's first step
after the load takes the bias corrections of a first step, at the lr its param groups held;
the fp32 masters restart from the 16-bit weights at ZeRO stages 1-3
(_restore_from_bit16_weights). load_lr_scheduler_states=False leaves the scheduler where it
was. Each case: run A trains STEPS windows and saves; run B, a fresh engine on other weights
(or, `warm`, one that trained WARM windows of its own first), loads A's checkpoint with the
case's two flags (a case without flags: engine.lr_scheduler.load_state_dict to SCHED_AT, no
checkpoint) and trains STEPS windows more. run(initialize, get_master, case, ckpt_dir) returns B's losses, lr per window,
counters and final fp32 masters; `initialize` is deepspeed.initialize or zinc.initialize."""
import torch

GA, STEPS, WARM, MICRO = 2, 3, 2, 4
SCHED_AT = 4        # the scheduler's position a case without a flag loads
AT5 = 5             # fp32_s2_full_at5's

SCHED = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01,
                                        "warmup_num_steps": 8, "warmup_type": "linear"}}
# OneCycle with cycle_momentum writes the groups' betas too: the first update after a load runs
# at the betas the groups hold, as at their lr
ONECYCLE = {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01,
                                           "cycle_first_step_size": 4, "cycle_momentum": True,
                                           "cycle_min_mom": 0.8, "cycle_max_mom": 0.9}}
# load_checkpoint's keyword arguments of each flag
FLAGS = {"full": {}, "noopt": {"load_optimizer_states": False},
         "nosched": {"load_lr_scheduler_states": False},
         "neither": {"load_optimizer_states": False, "load_lr_scheduler_states": False},
         "module": {"load_module_only": True}}


def _cases():
    out = {}
    # (load_module_only at stage 3: DeepSpeed 0.19.8 leaves the weights as they were, and zinc
    # loads them on purpose, docs/python.md)
    for dtype in ("fp32", "bf16"):
        for stage in (0, 1, 2, 3):
            for flag in FLAGS:
                if not (flag == "module" and stage == 3):
                    out[f"{dtype}_s{stage}_{flag}"] = dict(dtype=dtype, stage=stage,
                                                            flag=flag, warm=False)
    for stage in (0, 1, 3):
        for flag in FLAGS:
            if not (flag == "module" and stage == 3):
                out[f"bf16_s{stage}_{flag}_warm"] = dict(dtype="bf16", stage=stage, flag=flag,
                                                          warm=True)
    # no checkpoint: engine.lr_scheduler.load_state_dict moves the config's scheduler
    out["fp32_s1_sched_state"] = dict(dtype="fp32", stage=1, flag=None, warm=False)
    out["bf16_s0_sched_state_warm"] = dict(dtype="bf16", stage=0, flag=None, warm=True)
    for flag in ("full", "noopt", "nosched", "neither", None):
        out[f"fp32_s1_{flag or 'sched_state'}_warm_onecycle"] = dict(
            dtype="fp32", stage=1, flag=flag, warm=True, sched=ONECYCLE)
    # run A's DeepSpeed checkpoint with its scheduler's state moved to AT5 (as a script that
    # stepped the scheduler itself leaves it), loaded whole: DeepSpeed resumes the scheduler there
    out["fp32_s2_full_at5"] = dict(dtype="fp32", stage=2, flag="full", warm=False,
                                   source="lf_fp32_s2_at5")
    return out


CASES = _cases()
# run A's DeepSpeed checkpoint is kept for these (ds_fixtures/lf_<dtype>_s<stage>), one per
# dtype and stage: zinc imports it with each case's flags
SAVED = ("bf16_s1_noopt", "bf16_s3_noopt", "fp32_s2_noopt")


class _Scale(torch.nn.Module):
    """x * w + b, elementwise (torch 1.13's 16-bit matmuls on the CPU round otherwise than torch
    2.x's, where DeepSpeed's record was made; its elementwise ops agree)."""

    def __init__(self, n, at):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, n) * at)
        self.b = torch.nn.Parameter(torch.linspace(-0.2, 0.2, n) * at)

    def forward(self, x):
        return x * self.w + self.b


def model(at):
    return torch.nn.Sequential(_Scale(6, at), _Scale(6, at))


def make_config(dtype, stage, sched=SCHED):
    """The runs' config (custom_load_cases.py's too): accumulation GA, AdamW, clipping 1.0."""
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
           "gradient_clipping": 1.0, "steps_per_print": 1000,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}},
           "scheduler": sched, "zero_optimization": {"stage": stage}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def config(case):
    c = CASES[case]
    return make_config(c["dtype"], c["stage"], c.get("sched", SCHED))


def train_windows(engine, dtype, n, seed, betas=False):
    """n accumulation windows of 6-feature regression: (the losses, the lr each window starts
    with; with betas, beta1 after each lr)."""
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(seed)
    losses, lrs = [], []
    for _ in range(n):
        lrs.append(float(engine.get_lr()[0]))
        if betas:
            lrs.append(float(engine.optimizer.param_groups[0]["betas"][0]))
        for _ in range(GA):
            x, y = torch.randn(MICRO, 6, generator=g), torch.randn(MICRO, 6, generator=g)
            loss = ((engine(x.to(dt)).float() - y) ** 2).mean()
            engine.backward(loss)
            engine.step()
            losses.append(float(loss))
    return losses, lrs


def _windows(engine, case, n, seed):
    # (OneCycle: the betas too)
    return train_windows(engine, CASES[case]["dtype"], n, seed, "sched" in CASES[case])


def run(initialize, get_master, case, ckpt_dir, saved=False, after_load=None):
    """Runs A (saves into ckpt_dir, tag "a"; saved: ckpt_dir holds it already) then B;
    returns B's record: {"losses", "lrs" (the lr each window starts with),
    "global_steps_at_load", "global_steps", "masters" {name: flat}}. get_master(engine,
    param): the parameter's fp32 master. after_load(engine): called on B after its load."""
    c = CASES[case]
    if not saved:
        m = model(1.0)
        a, *_ = initialize(model=m, model_parameters=m.parameters(), config=config(case))
        _windows(a, case, STEPS, 1)
        a.save_checkpoint(ckpt_dir, tag="a")
    m = model(0.7)
    b, *_ = initialize(model=m, model_parameters=m.parameters(), config=config(case))
    if c["warm"]:
        _windows(b, case, WARM, 2)
    if c["flag"] is None:
        b.lr_scheduler.load_state_dict({"last_batch_iteration": SCHED_AT})
    else:
        b.load_checkpoint(ckpt_dir, tag="a", **FLAGS[c["flag"]])
    if after_load is not None:
        after_load(b)
    return trained_on(b, get_master, lambda e: _windows(e, case, STEPS, 3))


def trained_on(b, get_master, train):
    """Engine B's record from its load on (custom_load_cases.py's too): train(b) gives the
    losses and the lr per window; then the counters and final fp32 masters."""
    steps_at_load = b.global_steps
    losses, lrs = train(b)
    masters = {n: get_master(b, p).float().flatten().tolist()
               for n, p in b.module.named_parameters()}
    return {"losses": losses, "lrs": lrs, "global_steps_at_load": steps_at_load,
            "global_steps": b.global_steps, "masters": masters}


def worst_relative(got, want):
    """The largest |got - want| over the largest |want|, tensor by tensor, of two {name: flat
    list} records (DeepSpeed's keys)."""
    off = 0.0
    for n, w in want.items():
        g, w = torch.tensor(got[n]), torch.tensor(w)
        off = max(off, float((g - w).abs().max() / w.abs().max()))
    return off


def offsets(got, want):
    """How a run's record differs from DeepSpeed's: (worst relative loss difference, worst
    relative master difference, the lr per window equal, the counters equal)."""
    loss_off = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], want["losses"]))
    lrs_same = all(abs(a - b) <= 1e-12 for a, b in zip(got["lrs"], want["lrs"]))
    steps_same = (got["global_steps_at_load"], got["global_steps"]) == (
        want["global_steps_at_load"], want["global_steps"])
    return loss_off, worst_relative(got["masters"], want["masters"]), lrs_same, steps_same
