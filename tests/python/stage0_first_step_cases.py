"""stage0_first_step_cases.py — the runs that test_ds_stage0_first_step.py compares with
DeepSpeed 0.19.8 (ds_fixtures/make_stage0_first_step.py records DeepSpeed's, never in CI).

DeepSpeed's ZeRO stage 0 with fp16/bf16 wraps its Adam in FP16_Optimizer / FP16_UnfusedOptimizer,
which run one Adam step on zero gradients when they are built: Adam's count is one ahead of the
applied steps from then on, and the fp32 masters move as that step moves them (AdamW: decayed by
lr x weight decay; Adam with L2 decay: a step on the gradient wd x w, its moments kept). The
cases cover torch's and DeepSpeed's Adam, decoupled and L2 decay, fp16 and bf16, a scheduler
(the step runs at the lr the optimizer is built with), and stage 1 as the control (no such
step there). run(initialize, get_master, case) trains one and returns its losses and final fp32
masters; `initialize` is deepspeed.initialize or zinc.initialize."""
import torch

GA, STEPS, MICRO = 2, 3, 4

CASES = {
    "bf16_torch_adamw": dict(dtype="bf16", stage=0, optimizer={
        "type": "AdamW", "params": {"lr": 0.01, "torch_adam": True}}),
    "bf16_fused_adamw_warmup": dict(dtype="bf16", stage=0, optimizer={
        "type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}},
        scheduler={"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01,
                                                  "warmup_num_steps": 4}}),
    "fp16_fused_adam_l2": dict(dtype="fp16", stage=0, optimizer={
        "type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.1, "adam_w_mode": False}}),
    "bf16_torch_adam_l2": dict(dtype="bf16", stage=0, optimizer={
        "type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.1, "adam_w_mode": False,
                                   "torch_adam": True}}),
    "bf16_stage1_control": dict(dtype="bf16", stage=1, optimizer={
        "type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}}),
}


class _Scale(torch.nn.Module):
    """x * w + b, elementwise."""

    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))
        self.b = torch.nn.Parameter(torch.linspace(-0.2, 0.2, n))

    def forward(self, x):
        return x * self.w + self.b


def model(case):
    """Elementwise layers (torch 1.13's 16-bit matmuls on the CPU round otherwise than torch
    2.x's, where DeepSpeed's record was made; its elementwise ops agree)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(_Scale(6), _Scale(6))


def config(case):
    c = CASES[case]
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
           "gradient_clipping": 1.0, "optimizer": c["optimizer"],
           "zero_optimization": {"stage": c["stage"]}, "steps_per_print": 1000}
    if c["dtype"] == "bf16":
        cfg["bf16"] = {"enabled": True}
    else:
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    if "scheduler" in c:
        cfg["scheduler"] = c["scheduler"]
    return cfg


def run(initialize, get_master, case):
    """Trains `case`; returns {"losses": [...], "masters": {name: flat list}}. get_master(engine,
    param): the parameter's fp32 master."""
    m = model(case)
    engine, *_ = initialize(model=m, model_parameters=m.parameters(), config=config(case))
    dt = torch.bfloat16 if CASES[case]["dtype"] == "bf16" else torch.float16
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS * GA):
        x, y = torch.randn(MICRO, 6, generator=g), torch.randn(MICRO, 6, generator=g)
        loss = ((engine(x.to(dt)).float() - y) ** 2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    masters = {n: get_master(engine, p).float().flatten().tolist()
               for n, p in engine.module.named_parameters()}
    return {"losses": losses, "masters": masters}
