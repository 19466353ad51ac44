"""lr_sched_cases.py — DeepSpeed's scheduler classes (deepspeed.runtime.lr_schedules) driven the
same way over a torch AdamW, for any module that offers them: DeepSpeed 0.19.8's own (by
ds_fixtures/make_lr_schedules.py, which writes ds_fixtures/lr_schedules.json) and zinc's
(test_lr_schedules.py, which compares the two records exactly). Each case builds the scheduler,
then records after the constructor and after each step: every group's lr and betas, get_lr(),
get_last_lr(), and get_mom() / get_lr_ratio() where the class has them; then a step to an
explicit position, and a state_dict round trip. An exception is recorded by its type's name."""
import torch

# name -> (class, the groups' initial lrs, constructor arguments)
CASES = {
    "warmup_log": ("WarmupLR", [0.1, 0.02],
                   dict(warmup_min_lr=0.001, warmup_max_lr=0.05, warmup_num_steps=5)),
    "warmup_linear_default_max": ("WarmupLR", [0.1, 0.02],
                                  dict(warmup_num_steps=4, warmup_type="linear")),
    "warmup_per_group": ("WarmupLR", [0.1, 0.02],
                         dict(warmup_min_lr=[0.0, 0.001], warmup_max_lr=(0.05, 0.01),
                              warmup_num_steps=3)),
    "warmup_one_step": ("WarmupLR", [0.1], dict(warmup_num_steps=1, warmup_max_lr=0.3)),
    "warmup_resumed": ("WarmupLR", [0.1, 0.02],
                       dict(warmup_max_lr=0.05, warmup_num_steps=6, last_batch_iteration=3)),
    "decay": ("WarmupDecayLR", [0.1],
              dict(total_num_steps=12, warmup_num_steps=4, warmup_max_lr=0.01)),
    "decay_default_max": ("WarmupDecayLR", [0.1, 0.02],
                          dict(total_num_steps=9, warmup_num_steps=3, warmup_type="linear")),
    "decay_none_max": ("WarmupDecayLR", [0.1, 0.02],
                       dict(total_num_steps=9, warmup_num_steps=3, warmup_max_lr=None)),
    "cosine": ("WarmupCosineLR", [0.1, 0.02],
               dict(total_num_steps=14, warmup_num_steps=4, warmup_min_ratio=0.1,
                    cos_min_ratio=0.01)),
    "cosine_linear_short": ("WarmupCosineLR", [0.3],
                            dict(total_num_steps=5, warmup_num_steps=6, warmup_type="linear")),
    "one_cycle": ("OneCycle", [0.1, 0.02],
                  dict(cycle_min_lr=0.001, cycle_max_lr=[0.01, 0.02], cycle_first_step_size=3,
                       cycle_second_step_size=5, cycle_first_stair_count=2, decay_step_size=2,
                       decay_lr_rate=0.5, decay_mom_rate=0.01, cycle_min_mom=0.85,
                       cycle_max_mom=0.95)),
    "one_cycle_no_momentum": ("OneCycle", [0.1],
                              dict(cycle_min_lr=0.002, cycle_max_lr=0.02,
                                   cycle_first_step_size=4, cycle_momentum=False)),
    "one_cycle_rising_only": ("OneCycle", [0.1],
                              dict(cycle_min_lr=0.002, cycle_max_lr=0.02,
                                   cycle_first_step_size=4, cycle_second_step_size=0)),
    "range_test_stairs": ("LRRangeTest", [0.1, 0.02],
                          dict(lr_range_test_min_lr=[1e-4, 2e-4], lr_range_test_step_size=3,
                               lr_range_test_step_rate=2.0, lr_range_test_staircase=True)),
    "range_test": ("LRRangeTest", [0.1], dict(lr_range_test_step_size=4)),
    # Refused alike (the exception's type is recorded).
    "bad_warmup_steps": ("WarmupLR", [0.1], dict(warmup_num_steps=0)),
    "bad_group_count": ("OneCycle", [0.1, 0.02],
                        dict(cycle_min_lr=[0.001], cycle_max_lr=0.01)),
    "bad_first_half": ("OneCycle", [0.1], dict(cycle_min_lr=0.001, cycle_max_lr=0.01,
                                               cycle_first_step_size=0)),
    "bad_range_step": ("LRRangeTest", [0.1], dict(lr_range_test_step_size=0)),
}
STEPS = 16
JUMP_TO, LOAD_AT = 3, 7


def _call(fn):
    try:
        return fn()
    except AssertionError:
        return "AssertionError"


def _plain(v):
    """A record's value as JSON keeps it: floats, lists, tuples as lists."""
    if isinstance(v, torch.Tensor):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _snapshot(sched, opt):
    snap = {"lr": [g["lr"] for g in opt.param_groups],
            "betas": [list(g["betas"]) for g in opt.param_groups],
            "get_lr": sched.get_lr(), "get_last_lr": _call(sched.get_last_lr),
            "last_batch_iteration": sched.last_batch_iteration}
    if hasattr(sched, "get_mom"):
        snap["get_mom"] = sched.get_mom()
    if hasattr(sched, "get_lr_ratio"):
        snap["get_lr_ratio"] = sched.get_lr_ratio()
    return _plain(snap)


def run_case(schedules, name):
    """The record of case `name` with `schedules`, a module offering DeepSpeed's classes."""
    cls, lrs, kwargs = CASES[name]
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in lrs]
    opt = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)],
                            betas=(0.9, 0.999))
    try:
        sched = getattr(schedules, cls)(opt, **kwargs)
    except Exception as ex:  # noqa: BLE001 — the refusal's type is the record
        return {"raises": type(ex).__name__}
    record = [_snapshot(sched, opt)]
    for _ in range(STEPS):
        sched.step()
        record.append(_snapshot(sched, opt))
    sched.step(JUMP_TO)
    record.append(_snapshot(sched, opt))
    state = sched.state_dict()
    sched.load_state_dict({"last_batch_iteration": LOAD_AT})
    record.append(_snapshot(sched, opt))
    return {"steps": record, "state_dict": _plain(state)}
