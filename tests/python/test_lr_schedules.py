"""test_lr_schedules.py — DeepSpeed's scheduler classes in zinc.runtime.lr_schedules (WarmupLR,
WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest; zinc's C evaluates them through
zinc_schedule_eval), and a client scheduler with the config's optimizer.

    python test_lr_schedules.py ds       # against DeepSpeed 0.19.8's classes, recorded
    python test_lr_schedules.py engine   # driving a zinc engine

ds: every case of lr_sched_cases.py (constructor, 16 steps, a step to a given position, a
state_dict round trip; every group's lr and betas, get_lr(), get_last_lr(), get_mom(),
get_lr_ratio(), and the refusals' exception types) equal, exactly, to what DeepSpeed's own classes
did (ds_fixtures/lr_schedules.json, written by ds_fixtures/make_lr_schedules.py from DeepSpeed).

engine: a class built by DeepSpeed's callable form (lr_scheduler=lambda optimizer: ...) over the
config's optimizer trains exactly as the config's "scheduler" section of the same schedule does
(losses and lrs bitwise; OneCycle's betas too), as does the class built over the optimizer
initialize returned and stepped by the loop; a torch LambdaLR by callable (what Hugging Face's
Trainer passes with a config optimizer and no config scheduler) trains as with a client torch
AdamW. Before 2026-11-30 the classes did not exist (ImportError), and any client scheduler with the
config's optimizer raised NotImplementedError.
"""
import json
import os
import sys
import tempfile

from _common import check, check_raises, finish, torch, zinc
from lr_sched_cases import CASES, run_case

from zinc.runtime import lr_schedules

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 8


def test_against_deepspeed():
    with open(os.path.join(HERE, "ds_fixtures", "lr_schedules.json")) as f:
        recorded = json.load(f)
    check("the record is DeepSpeed 0.19.8's", recorded["deepspeed"] == "0.19.8",
          recorded["deepspeed"])
    check("every case is recorded", set(recorded["cases"]) == set(CASES))
    for name in CASES:
        got = json.loads(json.dumps(run_case(lr_schedules, name)))
        want = recorded["cases"][name]
        detail = ""
        if got != want:
            steps = list(zip(got.get("steps", []), want.get("steps", [])))
            first = next((i for i, (a, b) in enumerate(steps) if a != b), None)
            detail = (f"record {first}: zinc {steps[first][0]} DeepSpeed {steps[first][1]}"
                      if first is not None else f"zinc {got} DeepSpeed {want}")
        check(f"{name}: as DeepSpeed's {CASES[name][0]}", got == want, detail)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def config(scheduler=None):
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
           "zero_optimization": {"stage": 1}}
    if scheduler:
        cfg["scheduler"] = scheduler
    return cfg


def train(engine, after_step=None, steps=range(STEPS)):
    """The steps (indexes of the data); each step's loss, the groups' lr and betas after it."""
    out = []
    for k in steps:
        g = torch.Generator().manual_seed(100 + k)
        x, y = torch.randn(2, 4, generator=g), torch.randn(2, 2, generator=g)
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        engine.step()
        if after_step:
            after_step()
        groups = engine.optimizer.param_groups
        out.append((loss.item(), [float(g["lr"]) for g in groups],
                    [tuple(float(b) for b in g["betas"]) for g in groups]))
    return out


SCHEDULES = {
    "WarmupLR": dict(warmup_min_lr=0.001, warmup_max_lr=0.02, warmup_num_steps=4),
    "WarmupCosineLR": dict(total_num_steps=6, warmup_num_steps=2, warmup_min_ratio=0.2),
    "OneCycle": dict(cycle_min_lr=0.002, cycle_max_lr=0.02, cycle_first_step_size=2,
                     cycle_second_step_size=3, cycle_min_mom=0.8, cycle_max_mom=0.95),
}


def test_engine():
    for cls, params in SCHEDULES.items():
        m = model()
        e, *_ = zinc.initialize(model=m, config=config({"type": cls, "params": params}))
        want = train(e)
        m = model()
        e, opt, _, sched = zinc.initialize(
            model=m, config=config(),
            lr_scheduler=lambda optimizer: getattr(lr_schedules, cls)(optimizer, **params))
        check(f"{cls} by callable: initialize returns it", isinstance(sched, getattr(
            lr_schedules, cls)), type(sched).__name__)
        got = train(e)
        check(f"{cls} by callable over the config's optimizer: as the config's scheduler",
              got == want, f"\n zinc class {got}\n config    {want}")
        m = model()
        e, opt, *_ = zinc.initialize(model=m, config=config())
        own = getattr(lr_schedules, cls)(opt, **params)
        got = train(e, own.step)
        check(f"{cls} over the returned optimizer, stepped by the loop: as the config's "
              "scheduler", got == want, f"\n zinc class {got}\n config    {want}")
        check(f"{cls}: the lr moved", len({lr for _, (lr,), _ in want}) > 2, f"{want}")

        # A checkpoint half-way, loaded by a fresh engine whose callable built a fresh class:
        # the rest of the run as without the stop (the class's state_dict is in the checkpoint).
        e, *_ = zinc.initialize(model=model(), config=config(), lr_scheduler=lambda optimizer:
                                getattr(lr_schedules, cls)(optimizer, **params))
        half = STEPS // 2
        first = train(e, steps=range(half))
        with tempfile.TemporaryDirectory() as d:
            e.save_checkpoint(d)
            e, _, _, sched = zinc.initialize(
                model=model(), config=config(),
                lr_scheduler=lambda optimizer: getattr(lr_schedules, cls)(optimizer, **params))
            e.load_checkpoint(d)
        check(f"{cls} by callable: a load restores its position",
              sched.last_batch_iteration == half - 1, f"{sched.last_batch_iteration}")
        got = first + train(e, steps=range(half, STEPS))
        check(f"{cls} by callable: saved, loaded and resumed as the run without the stop",
              got == want, f"\n resumed {got}\n config  {want}")

    # What Hugging Face's Trainer passes with a config optimizer and no config scheduler.
    def rule(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    m = model()
    e, *_ = zinc.initialize(model=m, config=config(), lr_scheduler=rule)
    got = train(e)
    m = model()
    client = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.01)
    e, *_ = zinc.initialize(model=m, config=config(), optimizer=client, lr_scheduler=rule)
    want = train(e)
    check("LambdaLR by callable over the config's optimizer: as over a client AdamW",
          got == want, f"\n config optimizer {got}\n client AdamW     {want}")
    check("LambdaLR: the lr is the rule's", [lr for _, (lr,), _ in got] ==
          [0.01 * (1.0 / (2 + k)) for k in range(STEPS)], f"{got}")

    # A config "scheduler" beside a client one: DeepSpeed uses the client's alone (zinc's step
    # went on cycling the section's OneCycle betas).
    cycle = {"type": "OneCycle", "params": SCHEDULES["OneCycle"]}
    e, *_ = zinc.initialize(model=model(), config=config(cycle), lr_scheduler=rule)
    got = train(e)
    e, *_ = zinc.initialize(model=model(), config=config(), lr_scheduler=rule)
    want = train(e)
    check("a client scheduler replaces the config's section, betas included", got == want,
          f"\n with the section {got}\n without         {want}")
    # A scheduler class given as the callable (DeepSpeed calls anything callable).
    e, _, _, sched = zinc.initialize(model=model(), config=config(),
                                     lr_scheduler=lr_schedules.WarmupLR)
    check("a scheduler class as lr_scheduler is called with the optimizer",
          isinstance(sched, lr_schedules.WarmupLR), type(sched).__name__)
    view = sched.optimizer
    check_raises("load_state_dict on the scheduler's torch optimizer is refused",
                 lambda: view.load_state_dict(view.state_dict()), NotImplementedError,
                 "engine.load_checkpoint")
    # Numbers of torch (0-dim tensors) taken as DeepSpeed takes them.
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    a = lr_schedules.WarmupDecayLR(opt, total_num_steps=torch.tensor(10),
                                   warmup_max_lr=torch.tensor(0.5), warmup_num_steps=3)
    a.step(torch.tensor(4))
    opt2 = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    b = lr_schedules.WarmupDecayLR(opt2, total_num_steps=10, warmup_max_lr=float(
        torch.tensor(0.5)), warmup_num_steps=3)
    b.step(4)
    check("torch scalars as arguments and positions", a.get_last_lr() == b.get_last_lr(),
          f"{a.get_last_lr()} {b.get_last_lr()}")

    m = model()
    stray = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(m.parameters(), lr=0.1),
                                              lambda s: 1.0)
    check_raises("a scheduler object with the config's optimizer is refused, naming the "
                 "callable form", lambda: zinc.initialize(model=m, config=config(),
                                                          lr_scheduler=stray),
                 NotImplementedError, "lr_scheduler=lambda optimizer")
    check_raises("a non-optimizer is refused as DeepSpeed refuses it",
                 lambda: lr_schedules.WarmupLR(object()), TypeError,
                 "is not a subclass of torch.optim.Optimizer")
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    check_raises("an argument is checked by the config's rule, named",
                 lambda: lr_schedules.WarmupLR(opt, warmup_num_steps=0), ValueError,
                 "warmup_num_steps")
    check("the refused scheduler wrote nothing", opt.param_groups[0]["lr"] == 0.1,
          f"{opt.param_groups[0]['lr']}")
    decay = lr_schedules.WarmupDecayLR(opt, total_num_steps=10)

    def extend():
        decay.total_num_steps = 20
    check_raises("a schedule's value changed after it was built is refused, not ignored",
                 extend, AttributeError, "total_num_steps", "fixed")
    decay.last_batch_iteration = 5
    check("last_batch_iteration may be set", decay.get_lr() == lr_schedules.WarmupDecayLR(
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]), total_num_steps=10,
        last_batch_iteration=5).get_lr(), f"{decay.get_lr()}")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "ds":
        test_against_deepspeed()
    elif mode == "engine":
        test_engine()
    else:
        sys.exit("usage: test_lr_schedules.py ds|engine")
    sys.exit(finish())
