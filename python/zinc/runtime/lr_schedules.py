"""zinc.runtime.lr_schedules — DeepSpeed's deepspeed.runtime.lr_schedules (0.19.8): the schedule
names of a config's `scheduler.type` (which zinc's config honours, docs/config.md "scheduler"),
and the scheduler classes a script builds over an optimizer itself: WarmupLR, WarmupDecayLR,
WarmupCosineLR, OneCycle and LRRangeTest, with DeepSpeed's constructors, step(), get_lr(),
get_last_lr(), state_dict() and load_state_dict(). They write each param group's "lr" (OneCycle
with cycle_momentum also its "betas") as DeepSpeed's do, so they drive a client torch optimizer,
zinc's optimizer from initialize, or the optimizer a `lr_scheduler=lambda optimizer: ...`
callable is given. The schedule is evaluated by zinc's C engine (zinc_schedule_eval), the same
code as a config's scheduler section: the arguments are checked by the config's rules
(ValueError naming the argument). Those rules refuse some values DeepSpeed's classes take: an
unknown warmup_type (DeepSpeed warns and uses "log"), fractional step sizes, total_num_steps 0,
ratios above 1, negative rates or lrs, OneCycle's momentum bounds outside (0, 1) even without
cycle_momentum, and OneCycle's or LRRangeTest's positions below -1. Numbers of numpy and torch
are taken as Python's. Hugging Face's accelerate reads VALID_LR_SCHEDULES."""
import json
import math
import numbers
import warnings

import torch

from .._optimizer import _Optimizer, _scalar, _schedule_eval

LR_RANGE_TEST = "LRRangeTest"
ONE_CYCLE = "OneCycle"
WARMUP_LR = "WarmupLR"
WARMUP_DECAY_LR = "WarmupDecayLR"
WARMUP_COSINE_LR = "WarmupCosineLR"
VALID_LR_SCHEDULES = [LR_RANGE_TEST, ONE_CYCLE, WARMUP_LR, WARMUP_DECAY_LR, WARMUP_COSINE_LR]
WARMUP_LOG_RATE = "log"
WARMUP_LINEAR_RATE = "linear"

__all__ = ["VALID_LR_SCHEDULES", "LR_RANGE_TEST", "ONE_CYCLE", "WARMUP_LR", "WARMUP_DECAY_LR",
           "WARMUP_COSINE_LR", "WARMUP_LOG_RATE", "WARMUP_LINEAR_RATE", "LRRangeTest",
           "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "get_torch_optimizer"]


def get_torch_optimizer(optimizer):
    """DeepSpeed's: the torch optimizer whose param groups a scheduler writes — the optimizer
    itself, the torch optimizer it wraps (`.optimizer`), or for the optimizer zinc.initialize
    returns, a torch optimizer over its groups."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        return optimizer.optimizer
    if isinstance(optimizer, _Optimizer):
        return optimizer._torch_view()
    raise TypeError(f"{type(optimizer).__name__} is not a subclass of torch.optim.Optimizer")


def _number(value):
    """A number as JSON writes it: numpy's and torch's scalars (0-dim tensors) as Python's int
    or float (bool kept), other values as they are (the C reader names what it refuses)."""
    value = _scalar(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _position(it):
    """A last_batch_iteration as an int: ints of numpy or torch, and whole floats, taken."""
    it = _scalar(it)
    if isinstance(it, numbers.Integral) and not isinstance(it, bool):
        return int(it)
    if isinstance(it, numbers.Real) and float(it).is_integer():
        return int(it)
    raise TypeError(f"last_batch_iteration must be a whole number, got {it!r}")


def _per_group(optimizer, value, name):
    """DeepSpeed's _format_param: a scalar for every group, or a list/tuple of one per group."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name} (one per param group), got "
                             f"{len(value)}")
        return [_number(v) for v in value]
    return [_number(value)] * n


def _write_lrs(groups, lrs):
    """DeepSpeed's update_lr: each group's lr set (a tensor lr filled in place); the groups' lrs
    back."""
    for group, lr in zip(groups, lrs):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
    return [group["lr"] for group in groups]


class _Schedule:
    """What the five classes share: one "scheduler" section per param group (a group's own
    values where an argument is a list), evaluated by zinc_schedule_eval at
    last_batch_iteration. A class sets _TYPE, and _CLAMP when DeepSpeed's get_lr() gives the
    start value at every position below 0 (the warm-up classes); OneCycle and LRRangeTest
    extrapolate there, which zinc refuses below -1."""
    _TYPE = None
    _CLAMP = True
    _built = False

    def __setattr__(self, name, value):
        # DeepSpeed's get_lr() reads attributes such as total_num_steps at every call; zinc's
        # schedule is the constructor's arguments, so a later change is refused, not ignored.
        if self._built and not name.startswith("_") and name != "last_batch_iteration":
            raise AttributeError(f"zinc: {type(self).__name__}.{name} is fixed when the "
                                 "scheduler is built (zinc evaluates the constructor's "
                                 "arguments); build a new scheduler with the new value")
        object.__setattr__(self, name, value)

    def __init__(self, optimizer, group_params, last_batch_iteration, bases=None):
        self.optimizer = get_torch_optimizer(optimizer)
        groups = self.optimizer.param_groups
        self._bases = bases if bases is not None else [float(_scalar(g["lr"])) for g in groups]
        self._sections = [json.dumps({"type": self._TYPE,
                                      "params": {k: _number(v) for k, v in p.items()}}).encode()
                          for p in group_params]
        self.last_batch_iteration = last_batch_iteration
        self._values(last_batch_iteration)     # the arguments checked before anything is written

    def _values(self, it, bases=None):
        """[(lr, betas or None)] of each group at last_batch_iteration `it` (bases: the groups'
        initial lrs to use instead of their own)."""
        try:
            it = _position(it)
        except TypeError as ex:
            raise TypeError(f"{type(self).__name__}: {ex}") from None
        if self._CLAMP and it < -1:
            it = -1
        out = []
        for section, base in zip(self._sections, bases or self._bases):
            try:
                out.append(_schedule_eval(section, base, it))
            except ValueError as ex:
                raise ValueError(f"{type(self).__name__}: {ex} (the arguments are checked as "
                                 "a config's \"scheduler\" params)") from None
        return out

    def _started(self, last_batch_iteration):
        """The constructor's end: at -1 each group's start lr written (and kept as the last
        lr), as DeepSpeed's constructors do; the attributes fixed from here on."""
        if last_batch_iteration == -1:
            self._last_lr = _write_lrs(self.optimizer.param_groups, self.get_lr())
        self._built = True

    def _warmup_built(self, warmup_num_steps, last_batch_iteration):
        """The warm-up classes' attributes as DeepSpeed's (the length at least 2), then
        _started."""
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self._started(last_batch_iteration)

    def get_lr(self):
        """Each group's lr at last_batch_iteration."""
        return [lr for lr, _ in self._values(self.last_batch_iteration)]

    def get_last_lr(self):
        """The lrs the last step() (or the constructor) wrote."""
        assert getattr(self, "_last_lr", None) is not None, "need to call step() first"
        return self._last_lr

    def _advance(self, it):
        """step(): to `it` (None: one batch on), each group's lr written; the values back."""
        it = self.last_batch_iteration + 1 if it is None else _position(it)
        values = self._values(it)
        self.last_batch_iteration = it
        self._last_lr = _write_lrs(self.optimizer.param_groups, [lr for lr, _ in values])
        return values

    def step(self, last_batch_iteration=None):
        """One batch on (or to `last_batch_iteration`): each group's lr written."""
        self._advance(last_batch_iteration)

    def state_dict(self):
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, sd):
        self.last_batch_iteration = sd["last_batch_iteration"]


class WarmupLR(_Schedule):
    """DeepSpeed's WarmupLR: from warmup_min_lr to warmup_max_lr (default: each group's lr)
    over warmup_num_steps steps, log or linear, then flat."""
    _TYPE = WARMUP_LR

    def __init__(self, optimizer, warmup_min_lr=0.0, warmup_max_lr=None, warmup_num_steps=1000,
                 warmup_type=WARMUP_LOG_RATE, last_batch_iteration=-1):
        opt = get_torch_optimizer(optimizer)
        if warmup_max_lr is None:
            warmup_max_lr = [float(_scalar(g["lr"])) for g in opt.param_groups]
        self.min_lrs = _per_group(opt, warmup_min_lr, "warmup_min_lr")
        self.max_lrs = _per_group(opt, warmup_max_lr, "warmup_max_lr")
        self.delta_lrs = [big - small for big, small in zip(self.max_lrs, self.min_lrs)]
        self.warmup_type = warmup_type
        params = [dict({"warmup_min_lr": lo, "warmup_max_lr": hi,
                        "warmup_num_steps": warmup_num_steps, "warmup_type": warmup_type},
                       **self._decay_params())
                  for lo, hi in zip(self.min_lrs, self.max_lrs)]
        super().__init__(opt, params, last_batch_iteration)
        self._warmup_built(warmup_num_steps, last_batch_iteration)

    def _decay_params(self):
        """The section's params beyond the warm-up's (WarmupDecayLR's length)."""
        return {}


class WarmupDecayLR(WarmupLR):
    """DeepSpeed's WarmupDecayLR: WarmupLR's warm-up, then a linear decay to 0 at
    total_num_steps."""
    _TYPE = WARMUP_DECAY_LR

    def __init__(self, optimizer, total_num_steps, warmup_min_lr=0.0, warmup_max_lr=0.001,
                 warmup_num_steps=1000, warmup_type=WARMUP_LOG_RATE, last_batch_iteration=-1):
        self.total_num_steps = total_num_steps
        super().__init__(optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type,
                         last_batch_iteration)

    def _decay_params(self):
        return {"total_num_steps": self.total_num_steps}


class WarmupCosineLR(_Schedule):
    """DeepSpeed's WarmupCosineLR: each group's lr when it was built times a ratio that warms
    up from warmup_min_ratio to 1, then follows a cosine down to cos_min_ratio at
    total_num_steps."""
    _TYPE = WARMUP_COSINE_LR

    def __init__(self, optimizer, total_num_steps, warmup_min_ratio=0.0, warmup_num_steps=1000,
                 cos_min_ratio=0.0001, warmup_type=WARMUP_LOG_RATE, last_batch_iteration=-1):
        opt = get_torch_optimizer(optimizer)
        self.total_num_steps = total_num_steps
        self.warmup_min_ratio = warmup_min_ratio
        self.cos_min_ratio = cos_min_ratio
        self.warmup_type = warmup_type
        self.org_lrs = [float(_scalar(g["lr"])) for g in opt.param_groups]
        params = {"total_num_steps": total_num_steps, "warmup_min_ratio": warmup_min_ratio,
                  "warmup_num_steps": warmup_num_steps, "cos_min_ratio": cos_min_ratio,
                  "warmup_type": warmup_type}
        super().__init__(opt, [params] * len(opt.param_groups), last_batch_iteration,
                         bases=self.org_lrs)
        self._warmup_built(warmup_num_steps, last_batch_iteration)

    def get_lr_ratio(self):
        """The ratio each group's initial lr is scaled by at last_batch_iteration."""
        if not self._sections:
            return 0.0
        return self._values(self.last_batch_iteration, bases=[1.0])[0][0]



class OneCycle(_Schedule):
    """DeepSpeed's OneCycle: the lr cycles from cycle_min_lr up to cycle_max_lr and back
    (cycle_first_step_size, cycle_second_step_size steps; stair counts hold it flat in steps),
    then decays by decay_lr_rate every decay_step_size steps; with cycle_momentum, beta1 cycles
    the other way between cycle_max_mom and cycle_min_mom (beta2 0.99, as DeepSpeed sets it)."""
    _TYPE = ONE_CYCLE
    _CLAMP = False

    def __init__(self, optimizer, cycle_min_lr, cycle_max_lr, decay_lr_rate=0.,
                 cycle_first_step_size=2000, cycle_second_step_size=None,
                 cycle_first_stair_count=0, cycle_second_stair_count=None, decay_step_size=0,
                 cycle_momentum=True, cycle_min_mom=0.8, cycle_max_mom=0.9, decay_mom_rate=0.,
                 last_batch_iteration=-1):
        opt = get_torch_optimizer(optimizer)
        self.min_lrs = _per_group(opt, cycle_min_lr, "cycle_min_lr")
        self.max_lrs = _per_group(opt, cycle_max_lr, "cycle_max_lr")
        if cycle_momentum and "betas" not in opt.defaults:
            # As DeepSpeed: an optimizer without betas cycles no momentum (it logs a warning).
            warnings.warn(f"cycle_momentum is disabled because optimizer "
                          f"{type(opt).__name__} does not support momentum, no betas attribute "
                          "in defaults", RuntimeWarning, stacklevel=2)
            cycle_momentum = False
        self.cycle_momentum = bool(cycle_momentum)
        min_moms = _per_group(opt, cycle_min_mom, "cycle_min_mom")
        max_moms = _per_group(opt, cycle_max_mom, "cycle_max_mom")
        common = {"decay_lr_rate": decay_lr_rate, "cycle_first_step_size": cycle_first_step_size,
                  "cycle_second_step_size": cycle_second_step_size,
                  "cycle_first_stair_count": cycle_first_stair_count,
                  "cycle_second_stair_count": cycle_second_stair_count,
                  "decay_step_size": decay_step_size, "cycle_momentum": self.cycle_momentum,
                  "decay_mom_rate": decay_mom_rate}
        params = [dict(common, cycle_min_lr=lo, cycle_max_lr=hi, cycle_min_mom=mlo,
                       cycle_max_mom=mhi)
                  for lo, hi, mlo, mhi in zip(self.min_lrs, self.max_lrs, min_moms, max_moms)]
        super().__init__(opt, params, last_batch_iteration)
        if self.cycle_momentum:
            self.min_moms = [(m, 0.99) for m in min_moms]
            self.max_moms = [(m, 0.99) for m in max_moms]
        if last_batch_iteration == -1:
            # DeepSpeed's constructor writes the start lr and (cycle_min_mom, 0.99), where
            # get_mom() at -1 is cycle_max_mom, and keeps no last lr.
            _write_lrs(self.optimizer.param_groups, [lr for lr, _ in self._values(-1)])
            self._write_betas([(None, betas) for betas in getattr(self, "min_moms", [])])
        self._built = True

    def _write_betas(self, values):
        if self.cycle_momentum:
            for group, (_, betas) in zip(self.optimizer.param_groups, values):
                group["betas"] = betas

    def get_mom(self):
        """Each group's betas at last_batch_iteration (None without cycle_momentum)."""
        if not self.cycle_momentum:
            return None
        return [betas for _, betas in self._values(self.last_batch_iteration)]

    def step(self, batch_iteration=None):
        """One batch on (or to `batch_iteration`): each group's lr, and with cycle_momentum its
        betas, written."""
        self._write_betas(self._advance(batch_iteration))


class LRRangeTest(_Schedule):
    """DeepSpeed's LRRangeTest: the lr grows from lr_range_test_min_lr by step_rate every
    step_size steps (continuously, or in stairs)."""
    _TYPE = LR_RANGE_TEST
    _CLAMP = False

    def __init__(self, optimizer, lr_range_test_min_lr=1e-3, lr_range_test_step_size=2000,
                 lr_range_test_step_rate=1.0, lr_range_test_staircase=False,
                 last_batch_iteration=-1):
        opt = get_torch_optimizer(optimizer)
        self.min_lr = _per_group(opt, lr_range_test_min_lr, "lr_range_test_min_lr")
        self.step_size = lr_range_test_step_size
        self.step_rate = lr_range_test_step_rate
        self.staircase = lr_range_test_staircase
        params = [{"lr_range_test_min_lr": lo, "lr_range_test_step_size": lr_range_test_step_size,
                   "lr_range_test_step_rate": lr_range_test_step_rate,
                   "lr_range_test_staircase": bool(lr_range_test_staircase)} for lo in self.min_lr]
        super().__init__(opt, params, last_batch_iteration)
        self._started(last_batch_iteration)

    def step(self, batch_iteration=None):
        """One batch on (or to `batch_iteration`): each group's lr written."""
        self._advance(batch_iteration)
