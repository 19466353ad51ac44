"""_optimizer.py — the optimizer side of the front-end. zinc runs Adam/AdamW itself inside
engine.step(); what DeepSpeed users hand initialize about the optimizer is read here:
- model_parameters' param groups (which parameters zinc trains; a decay and an lr per group);
- a client torch.optim.Adam/AdamW, or zinc.ops.adam's FusedAdam/DeepSpeedCPUAdam (DeepSpeed's
  names), read into the config's optimizer section and groups;
- the optimizer and scheduler objects initialize returns, whose param_groups carry the learning
  rate as DeepSpeed's do (zinc_set_lr, zinc_group_set_lr).
Anything zinc would compute differently is refused by name.
"""
import ctypes
import json
import math
import warnings

import torch

from . import _partial_load
from ._lib import lib
from .ops.adam import _AdamHyperparameters


# Keys of a torch/DeepSpeed parameter group dict zinc honours: "params"; "weight_decay", "lr",
# "betas" and "eps" (per group in zinc: zinc_group_set_weight_decay, zinc_group_set_lr,
# zinc_group_set_betas, zinc_group_set_eps); "name" (a label).
_GROUP_KEYS = ("params", "name", "weight_decay", "lr", "betas", "eps")


def _scalar(v):
    """A hyperparameter as torch keeps it (a number, or a 0-dim tensor) as a Python number."""
    return v.item() if isinstance(v, torch.Tensor) else v


def _schedule_eval(section, base, it):
    """zinc_schedule_eval: a "scheduler" section (JSON bytes) for a param group whose lr was
    `base` when the scheduler was built, at DeepSpeed's last_batch_iteration `it`: (lr, betas
    or None). ValueError with zinc's message when the section breaks the config's rules."""
    lr, b1, b2, sets = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_int()
    if lib.zinc_schedule_eval(section, base, it, ctypes.byref(lr), ctypes.byref(b1),
                              ctypes.byref(b2), ctypes.byref(sets)) != 0:
        msg = lib.zinc_last_error(None).decode(errors="replace")
        raise ValueError(msg.removeprefix("zinc_schedule_eval: "))
    return lr.value, ((b1.value, b2.value) if sets.value else None)


def _betas(value, where, fn="zinc.initialize"):
    """A group's betas as (beta1, beta2) of floats, each in [0, 1) (the config's rule)."""
    b = _plain(value)
    if b is None or not all(0.0 <= x < 1.0 for x in b):
        raise ValueError(f"{fn}: {where}['betas'] = {value!r}: expected "
                         "(beta1, beta2), each in [0, 1)")
    return b


def _plain(betas):
    """betas as a tuple of floats, None when they are not two numbers."""
    try:
        b = tuple(float(_scalar(x)) for x in betas)
    except (TypeError, ValueError):
        return None
    return b if len(b) == 2 else None


def _eps(value, where, fn="zinc.initialize"):
    """A group's eps as a float, finite and > 0 (the config's rule)."""
    v = _scalar(value)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ValueError(f"{fn}: {where}['eps'] = {value!r} is not a finite "
                         "value > 0")
    return float(v)


def _decay(value, where, fn="zinc.initialize"):
    """A group's weight decay as a float, finite and >= 0 (the config's rule)."""
    try:
        wd = float(_scalar(value))
    except (TypeError, ValueError):
        wd = float("nan")
    if not 0 <= wd < float("inf"):
        raise ValueError(f"{fn}: {where}['weight_decay'] = {value!r} is not a finite "
                         "value >= 0")
    return wd


class _ParamGroups:
    """model_parameters as zinc reads it (_parameter_groups). Tensors, or none given, are one
    group: index 0, with no dict."""

    def __init__(self):
        self.wanted = None   # ids of the parameters zinc trains, or None: all that require grad
        self.index = {}      # id -> the index of its param-group dict (none: tensors were given)
        self.dicts = []      # the param-group dicts, in order (none: tensors were given)
        self.decays = []     # per dict: its weight_decay as a float, or None (the config's)
        self.adam = []       # per dict: its own {"betas": (b1, b2), "eps": e}, those it gives
        self.order = []      # the parameters given, in their order (a DeepSpeed optimizer's)

    def decay(self, i):
        return self.decays[i] if self.decays else None

    def own(self, i, key):
        """Dict i's own "betas" or "eps" (checked), or None: the config's."""
        return self.adam[i].get(key) if self.adam else None


def _parameter_groups(model_parameters, cfg, client_scheduler=False):
    """model_parameters as DeepSpeed takes it: None (every parameter that requires grad), an
    iterable of tensors, or of param-group dicts {"params": [...], "weight_decay": wd, "lr": lr,
    "betas": (b1, b2), "eps": eps, "name": ...}, as a _ParamGroups. Groups with their own lr
    under the config's WarmupCosineLR and an optimizer lr of 0 are refused: zinc scales a
    group's lr by the schedule's ratio, which that lr does not reveal."""
    out = _ParamGroups()
    if model_parameters is None:
        return out
    items = list(model_parameters)
    out.wanted = set()
    wanted = out.wanted
    kinds = {isinstance(item, torch.Tensor) for item in items}
    if len(kinds) > 1:
        raise TypeError("zinc.initialize: model_parameters mixes tensors and param-group dicts "
                        "(a torch optimizer takes one or the other)")
    for i, item in enumerate(items):
        if isinstance(item, torch.Tensor):
            wanted.add(id(item))
            out.order.append(item)
            continue
        if not isinstance(item, dict) or "params" not in item:
            raise TypeError(f"zinc.initialize: model_parameters[{i}] is neither a tensor nor a "
                            "param-group dict with 'params'")
        for key in item:
            if key not in _GROUP_KEYS:
                raise NotImplementedError(f"zinc.initialize: model_parameters[{i}]['{key}'] "
                                          f"(only {', '.join(map(repr, _GROUP_KEYS))} are "
                                          "honoured)")
        where = f"model_parameters[{i}]"
        adam = {}
        if "betas" in item:
            adam["betas"] = _betas(item["betas"], where)
        if "eps" in item:
            adam["eps"] = _eps(item["eps"], where)
        params = item["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        wd = item.get("weight_decay")
        if wd is not None:
            wd = _decay(wd, where)
        if "lr" in item:
            lr = _scalar(item["lr"])
            if not isinstance(lr, (int, float)) or not lr >= 0 or lr == float("inf"):
                raise ValueError(f"zinc.initialize: model_parameters[{i}]['lr'] = "
                                 f"{item['lr']!r} is not a finite value >= 0")
        out.dicts.append(item)
        out.decays.append(wd)
        out.adam.append(adam)
        for p in params:
            if id(p) in wanted:
                raise ValueError(f"zinc.initialize: a parameter appears in more than one of "
                                 f"model_parameters' groups (again in group {i})")
            wanted.add(id(p))
            out.index[id(p)] = i
            out.order.append(p)
    sched = cfg.get("scheduler") or {}
    opt = cfg.get("optimizer", {}).get("params", {})
    if (not client_scheduler and str(sched.get("type", "")).lower() == "warmupcosinelr" and
            opt.get("lr") == 0 and any("lr" in d and _scalar(d["lr"]) for d in out.dicts)):
        # zinc's schedule gives the config lr times the schedule's ratio; a group's own lr is
        # scaled by that ratio, which an lr of 0 does not reveal.
        raise NotImplementedError(
            "zinc.initialize: param groups with their own lr under WarmupCosineLR and an "
            "optimizer lr of 0: give the config's optimizer a non-zero lr")
    return out


def _client_optimizer(optimizer, model, model_parameters):
    """A client optimizer for initialize(optimizer=...), as DeepSpeed takes it (an instance, or
    a callable building one from model_parameters), where it replaces the config's optimizer.
    zinc runs its own Adam: a torch.optim.Adam or AdamW is read into the config's optimizer
    section (type, and group 0's lr, betas, eps and weight decay; torch's Adam decays into the
    gradient, its AdamW decoupled, as zinc's "Adam" with adam_w_mode false and "AdamW") and its
    param groups, each with its weight decay, lr, betas and eps. Returns (the torch optimizer,
    optimizer section, param groups for model_parameters: one per non-empty group of the torch
    optimizer, in order). The torch optimizer's groups then carry the lr (a client scheduler
    sets it there).
    Anything zinc would compute differently is refused by name."""
    if not isinstance(optimizer, torch.optim.Optimizer) and callable(optimizer):
        optimizer = optimizer(model.parameters() if model_parameters is None else model_parameters)
    ds_adam = isinstance(optimizer, _AdamHyperparameters)   # zinc.ops.adam's classes
    if not ds_adam and not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise NotImplementedError(
            f"zinc.initialize: client optimizer {type(optimizer).__name__}: zinc runs Adam/AdamW "
            "itself; pass a torch.optim.Adam or AdamW, zinc.ops.adam.FusedAdam or "
            "DeepSpeedCPUAdam, or put the optimizer in the config")
    if not getattr(optimizer, "fp32_optimizer_states", True):
        raise NotImplementedError("zinc.initialize: client optimizer fp32_optimizer_states=False "
                                  "(zinc keeps Adam's moments in fp32)")
    groups = [g for g in optimizer.param_groups if len(g["params"])]
    if not groups:
        raise ValueError("zinc.initialize: the client optimizer has no parameters")
    if ds_adam:       # DeepSpeed's classes say it once for the optimizer: adam_w_mode
        decoupled = bool(optimizer.adam_w_mode)
    else:
        decoupled = (isinstance(optimizer, torch.optim.AdamW) or
                     bool(groups[0].get("decoupled_weight_decay", False)))
    first = groups[0]
    for i, g in enumerate(groups):
        for key in ("amsgrad", "maximize"):
            if g.get(key):
                raise NotImplementedError(f"zinc.initialize: client optimizer {key}=True (a "
                                          "different algorithm than zinc's Adam)")
        if bool(g.get("decoupled_weight_decay", decoupled)) != decoupled:
            raise NotImplementedError("zinc.initialize: client optimizer param groups mix "
                                      "decoupled and L2 weight decay")
        # zinc's bias correction is one setting for the engine (optimizer.params).
        if bool(g.get("bias_correction", True)) != bool(first.get("bias_correction", True)):
            raise NotImplementedError(f"zinc.initialize: client optimizer param_groups[{i}] "
                                      "has its own bias_correction; zinc has one for all groups")
    section = {"type": "AdamW" if decoupled else "Adam",
               "params": {"lr": _scalar(first["lr"]),
                          "betas": [_scalar(b) for b in first["betas"]],
                          "eps": _scalar(first["eps"]),
                          "weight_decay": float(first["weight_decay"])}}
    if not decoupled:
        section["params"]["adam_w_mode"] = False
    if not first.get("bias_correction", True):
        section["params"]["bias_correction"] = False
    return optimizer, section, [{"params": g["params"], "weight_decay": float(g["weight_decay"]),
                                 "lr": _scalar(g["lr"]), "betas": g["betas"], "eps": g["eps"]}
                                for g in groups]


class _Optimizer:
    """What initialize returns as the optimizer: zinc runs Adam/AdamW itself in engine.step().
    Its param_groups carry the learning rate as DeepSpeed's do: the client torch optimizer's own
    groups when there is one, else one group per param-group dict of model_parameters (one group
    when tensors were given), each with its own lr (the dict's, else the config's). Each zinc
    group takes its lr from the group its parameters came in (zinc_group_set_lr).
    Who sets the lr: with the config's scheduler (and no client one) the schedule runs and the
    groups show its lr, until something writes a group's "lr" (the loop itself, as nanoGPT-style
    loops do): from then on the groups' lr is applied at every step. Without the config's
    scheduler, or with a client scheduler (stepped by engine.step()), the groups' lr is applied
    at every step from the first.
    The groups' own lr under the config's schedule, as DeepSpeed's schedulers treat it:
    WarmupCosineLR scales each group's initial lr by its ratio (zinc's lr over the config's
    optimizer lr, zinc's schedule being that lr times the ratio); WarmupLR without
    warmup_max_lr warms each group up to its own initial lr (DeepSpeed's default there: the
    schedule evaluated per group, zinc_schedule_eval); WarmupLR with warmup_max_lr,
    WarmupDecayLR, OneCycle and LRRangeTest set every group to the schedule's lr (rank 0 warns,
    naming the groups whose lr is replaced)."""

    def __init__(self, engine, client=None, client_scheduler=False):
        self._engine = engine
        self._client = client
        self._groups = None
        # The config's values as zinc resolved them (DeepSpeed's defaults where it is silent;
        # the resolved config always has every optimizer value).
        opt = engine._resolved["optimizer"]["params"]
        if client is not None:
            sources = [g for g in client.param_groups if len(g["params"])]
        else:
            dicts = engine._pgs.dicts or [{}]
            sources = []
            for i, d in enumerate(dicts):
                wd = engine._pgs.decay(i)
                grp = {"params": [p for G in engine._g if G.pgroup == i for _, _, p in G.params],
                       "lr": d.get("lr", opt["lr"]),
                       "betas": engine._pgs.own(i, "betas") or tuple(opt["betas"]),
                       "eps": engine._pgs.own(i, "eps") or opt["eps"],
                       "weight_decay": opt["weight_decay"] if wd is None else wd}
                if "name" in d:
                    grp["name"] = d["name"]
                sources.append(grp)
            self._groups = sources
        self._sources = sources
        sched_sec = engine._resolved.get("scheduler", {})
        sched = sched_sec.get("type")
        base = float(opt["lr"])
        orgs = self._lrs()
        self._built_lrs = orgs      # before any schedule writes them (_ds_first_step)
        # Under WarmupCosineLR: each group's initial lr, scaled by the schedule's ratio; under
        # WarmupLR without warmup_max_lr, each group's initial lr as its warm-up's end (the
        # section without that key, evaluated with the group's lr as the default: _own_max).
        self._scaled = None
        self._own_max = None
        self._base = base
        given = (engine._cfg.get("scheduler") or {}).get("params") or {}
        own_max = sched == "WarmupLR" and "warmup_max_lr" not in given
        if not client_scheduler and (sched == "WarmupCosineLR" or own_max) and \
                any(o != base for o in orgs):
            self._scaled = orgs
            if own_max:
                params = {k: v for k, v in sched_sec["params"].items() if k != "warmup_max_lr"}
                self._own_max = json.dumps({"type": sched, "params": params}).encode()
        elif not client_scheduler and sched and any(o != base for o in orgs) and \
                engine.global_rank == 0:
            which = [i for i, o in enumerate(orgs) if o != base]
            warnings.warn(f"zinc: the config's {sched} sets every param group's lr to its "
                          f"schedule, as DeepSpeed's does: the own lr of group(s) {which} "
                          f"({[orgs[i] for i in which]}) is not used", RuntimeWarning,
                          stacklevel=4)
        # Each group's (betas, eps, weight decay) as zinc runs them: those it was built with,
        # then whatever a step found written into the group (_apply_adam).
        self._adam = [self._adam_of(i, g) for i, g in enumerate(sources)]
        cycled = sched == "OneCycle" and sched_sec["params"].get("cycle_momentum")
        self._cycled = bool(cycled)
        if cycled and engine.global_rank == 0:
            which = [i for i, (b, _, _) in enumerate(self._adam) if b != tuple(opt["betas"])]
            if which:
                warnings.warn(f"zinc: the config's OneCycle with cycle_momentum sets every param "
                              f"group's betas, as DeepSpeed's does: the own betas of group(s) "
                              f"{which} are not used", RuntimeWarning, stacklevel=4)
        # zinc groups per source group, for zinc_group_set_lr.
        self._gids = [[G.gid for G in engine._g if G.pgroup == i]
                      for i in range(len(sources))]
        self._applied = [None] * len(sources)   # the lr last given to zinc, per source group
        self._taken = client_scheduler or "scheduler" not in engine._cfg
        # Under the config's schedule, an lr written into the groups is for the next applied
        # step alone, as DeepSpeed's scheduler writes its own back after that step.
        self._once = False
        # Under OneCycle with cycle_momentum: betas the groups hold for the next applied step
        # alone (_hold_betas), as DeepSpeed's first update after a load runs at its groups'.
        self._betas_once = None
        self._shown = None         # what _after_step wrote into the groups (while not taken)
        self._after_step()

    @property
    def param_groups(self):
        return self._client.param_groups if self._client is not None else self._groups

    def _lrs(self):
        return [float(_scalar(g["lr"])) for g in self._sources]

    @staticmethod
    def _adam_of(i, g, betas=None):
        """Group i's (betas, eps, weight decay) as floats, checked by the config's rules (betas
        given: taken as they are)."""
        where, fn = f"param_groups[{i}]", "zinc: engine.step()"
        return (betas if betas is not None else _betas(g["betas"], where, fn),
                _eps(g["eps"], where, fn), _decay(g["weight_decay"], where, fn))

    def _apply_adam(self):
        """A group's betas, eps and weight decay written since the last step (torch's
        OneCycleLR cycling beta1, a loop's weight-decay schedule) apply from this step, as
        torch's and DeepSpeed's optimizers read each group's values at every step. Under the
        config's OneCycle with cycle_momentum the schedule sets the betas: a group's betas
        written by hand are refused rather than silently replaced."""
        e, call = self._engine._e, self._engine._call
        for i, g in enumerate(self._sources):
            was = self._adam[i]
            # Betas the config's OneCycle showed are its own, not the caller's: past the cycle
            # its decay_mom_rate grows beta1 to 1 and beyond, which zinc_step refuses naming the
            # scheduler's keys (checked here as the caller's, the error blamed param_groups).
            shown = self._cycled and _plain(g["betas"]) == was[0]
            now = self._adam_of(i, g, was[0] if shown else None)
            if now == was:
                continue
            if self._cycled and now[0] != was[0]:
                raise NotImplementedError(
                    f"zinc: param group {i}'s betas were changed from {was[0]} to {now[0]} "
                    "under the config's OneCycle with cycle_momentum, which sets every group's "
                    "betas at each step (drop cycle_momentum to set them yourself)")
            for gid in self._gids[i]:
                if now[0] != was[0]:
                    call(lib.zinc_group_set_betas(e, gid, *now[0]))
                if now[1] != was[1]:
                    call(lib.zinc_group_set_eps(e, gid, now[1]))
                if now[2] != was[2]:
                    call(lib.zinc_group_set_weight_decay(e, gid, now[2]))
            self._adam[i] = now

    def _before_step(self):
        """At an accumulation boundary: the groups' betas, eps and weight decay where they
        changed; the groups' lr, if they drive it (no scheduler in the config, or a client's)
        or anything wrote one — under the config's schedule for this step only (until it is
        applied: _after_step); under WarmupCosineLR with groups of their own lr, each group's
        scaled lr."""
        self._apply_adam()
        if self._betas_once is not None:
            self._engine._call(lib.zinc_set_betas(self._engine._e, *self._betas_once))
        lrs = self._lrs()
        e = self._engine._e
        if not (self._taken or lrs != self._shown):
            if self._scaled is not None:
                self._set_group_lrs(self._scheduled())
            return
        if not self._taken:
            # (it latched: the schedule never came back, and the run went on at that lr)
            self._once = True
        self._engine._call(lib.zinc_set_lr(e, lrs[0]))
        if len(lrs) > 1 or self._scaled is not None:
            self._set_group_lrs(lrs)

    def _set_group_lrs(self, lrs):
        e, call = self._engine._e, self._engine._call
        for i, lr in enumerate(lrs):
            if lr != self._applied[i]:
                for gid in self._gids[i]:
                    call(lib.zinc_group_set_lr(e, gid, lr))
                self._applied[i] = lr

    def _scheduled(self):
        """The lr of each group at the next step under WarmupCosineLR: its initial lr times the
        schedule's ratio (DeepSpeed's org_lr * lr_ratio); under WarmupLR without warmup_max_lr:
        the schedule up to its initial lr, at the schedule's position (the lr of the next update
        is DeepSpeed's at last_batch_iteration position - 1)."""
        if self._own_max is not None:
            at = _partial_load.counts(self._engine).sched - 1
            return [_schedule_eval(self._own_max, org, at)[0] for org in self._scaled]
        ratio = lib.zinc_engine_lr(self._engine._e) / self._base
        return [org * ratio for org in self._scaled]

    def _show_betas(self):
        """Under the config's OneCycle with cycle_momentum every group shows the betas of the
        next step, as DeepSpeed's scheduler writes them into every param group; zinc runs them
        (zinc_engine_betas), so they become what _apply_adam expects; betas held for the next
        step (_hold_betas) until it is applied."""
        b1, b2 = ctypes.c_double(), ctypes.c_double()
        if lib.zinc_engine_betas(self._engine._e, ctypes.byref(b1), ctypes.byref(b2)) != 1:
            return
        betas = self._betas_once or (b1.value, b2.value)
        for g in self.param_groups:
            g["betas"] = betas
        self._adam = [(betas, eps, wd) for _, eps, wd in self._adam]

    def _after_step(self, applied=True):
        """While zinc's schedule runs, the groups show the lr of the next step (as DeepSpeed's
        after its scheduler stepped), and the betas under OneCycle with cycle_momentum. An lr
        written into the groups under it gives way to the schedule once a step applied it
        (not after one skipped for an fp16 overflow, where DeepSpeed's scheduler does not
        step)."""
        if applied and self._client is not None:
            # zinc's step is the client optimizer's: a torch scheduler over it that the script
            # steps itself (accelerate's AcceleratedScheduler) warned "lr_scheduler.step() before
            # optimizer.step()" at its first step, though the schedule is right. torch 2 reads
            # this flag, which its scheduler's wrapper of optimizer.step sets; torch 1.13 the count.
            self._client._opt_called = True
            if getattr(self._client, "_step_count", 1) < 1:
                self._client._step_count = 1
        if self._betas_once is not None and applied:
            self._engine._call(lib.zinc_set_betas(self._engine._e, math.nan, math.nan))
            self._betas_once = None
        self._show_betas()
        if self._once and applied:
            self._engine._call(lib.zinc_set_lr(self._engine._e, math.nan))
            if any(a is not None for a in self._applied):
                self._set_group_lrs([math.nan] * len(self._sources))
            self._once = False
        if not self._taken and not self._once:
            lr = lib.zinc_engine_lr(self._engine._e)
            if self._scaled is None:      # every group, those without parameters too
                for g in self.param_groups:
                    g["lr"] = lr
                self._shown = [lr] * len(self._sources)
            else:
                self._shown = self._scheduled()
                for g, lr in zip(self._sources, self._shown):
                    g["lr"] = lr

    def _adam_state(self):
        """The groups' [beta1, beta2, eps, weight decay] for the checkpoint (torch's and
        DeepSpeed's optimizer state_dict keeps each group's values)."""
        return [[*b, eps, wd] for b, eps, wd in (self._adam_of(i, g)
                                                 for i, g in enumerate(self._sources))]

    def _check_count(self, saved, what):
        if len(saved) != len(self._sources):
            raise ValueError(f"zinc: load_checkpoint: the checkpoint's {what} are of "
                             f"{len(saved)} param groups with parameters, this optimizer has "
                             f"{len(self._sources)}")

    def _restore(self, saved):
        """A checkpoint's group lr (_lr_state): one value for every group (written before
        zinc had an lr per group), or one per group. Where the groups drive the lr (no
        scheduler in the config, or a client's) from here on; under the config's schedule for
        the next applied step alone, as a written lr (_before_step), as DeepSpeed's load gives
        its groups the saved lr and its scheduler writes its own after that step. (A checkpoint
        of the front-end before 2026-11-30 holds the lr a write latched: loading it latched
        that lr again, the schedule off for the rest of the run.)"""
        lrs = saved if isinstance(saved, list) else [saved] * len(self._sources)
        self._check_count(lrs, "learning rates")
        for g, lr in zip(self._sources, lrs):
            g["lr"] = lr
        if not self._taken:
            self._shown = None        # differs from any lr: the next step applies the groups'
        self._show_betas()

    def _betas(self):
        """Each group's betas as zinc runs them."""
        return [b for b, _, _ in self._adam]

    def _hold_betas(self, betas):
        """Under the config's OneCycle with cycle_momentum, which writes every group's betas:
        the groups show `betas` (one pair per group, as _betas gave them) and the next applied
        step runs at them, the schedule's from the one after (zinc_set_betas), as DeepSpeed's
        first update after a load or a load_state_dict runs at the betas its groups hold.
        Nothing to do otherwise (the groups' own betas are applied at every step)."""
        if not self._cycled:
            return
        held = tuple(betas[0])              # (the schedule writes one pair into every group)
        for g in self.param_groups:
            g["betas"] = held
        self._adam = [(held, eps, wd) for _, eps, wd in self._adam]
        b1, b2 = ctypes.c_double(), ctypes.c_double()
        self._engine._call(lib.zinc_set_betas(self._engine._e, math.nan, math.nan))
        lib.zinc_engine_betas(self._engine._e, ctypes.byref(b1), ctypes.byref(b2))
        self._betas_once = None if held == (b1.value, b2.value) else held

    def _restore_adam(self, saved):
        """A checkpoint's group betas, eps and weight decay (_adam_state) back in the groups,
        as DeepSpeed's load gives the optimizer's groups theirs; the next step applies them
        (under OneCycle with cycle_momentum that step alone: _hold_betas)."""
        self._check_count(saved, "betas, eps and weight decays")
        for g, (b1, b2, eps, wd) in zip(self._sources, saved):
            g["betas"], g["eps"], g["weight_decay"] = (b1, b2), eps, wd
        self._hold_betas([(b1, b2) for b1, b2, _, _ in saved])

    def _ds_first_step(self, unfused):
        """ZeRO stage 0 with fp16/bf16: DeepSpeed 0.19.8's optimizers there (FP16_Optimizer,
        FP16_UnfusedOptimizer; bf16 too) run one step of the Adam they wrap on zero gradients
        when they are built (initialize_optimizer_states), at each group's lr as built (before
        a scheduler exists). Adam's count is then one ahead of the applied steps, so every
        later update takes the bias corrections of one step more (the first: 0.74x the size
        of zinc's otherwise), and the fp32 masters (not the 16-bit weights, which the first
        real step overwrites from them) move as that step moves them: AdamW decays them by
        lr x weight decay, Adam with L2 decay (adam_w_mode false) takes a step on the
        gradient weight_decay x w and keeps its moments. zinc does the same (its Adam count
        one ahead: zinc_engine_set_adam_lead), so a stage-0 16-bit run gives DeepSpeed's
        losses from its first step. unfused: the wrapped Adam is torch's (torch_adam, a client
        torch optimizer), whose decay is w * (1 - lr wd); DeepSpeed's FusedAdam computes
        w - lr (wd w)."""
        eng = self._engine
        e = eng._e
        opt = eng._resolved["optimizer"]
        params = opt.get("params") or {}
        decoupled = opt.get("type", "").lower() == "adamw" or params.get("adam_w_mode", True)
        corrected = params.get("bias_correction", True)
        for i in range(len(self._sources)):
            (b1, b2), eps, wd = self._adam[i]
            lr = self._built_lrs[i]
            if wd == 0 or lr == 0:
                continue                 # zero gradients, no decay: nothing moves
            for G in eng._g:
                if G.pgroup != i:
                    continue
                for pid, _, _ in G.params:
                    self._first_step_of(pid, lr, b1, b2, eps, wd, decoupled, corrected,
                                        unfused)
        eng._call(lib.zinc_engine_set_adam_lead(e, 1))

    def _first_step_of(self, pid, lr, b1, b2, eps, wd, decoupled, corrected, unfused):
        """One parameter's Adam step on a zero gradient (_ds_first_step): its fp32 master (and,
        with L2 decay, its moments) read and written whole (stage 0: this rank keeps all of
        it; zinc_param_local_get/_set, not collective; the master alone, as DeepSpeed's step
        there leaves the 16-bit weights until the first real one)."""
        eng = self._engine
        master = eng._LOCAL[None]          # zinc_param_state's ids (_values.py)
        w = eng._fragment(pid, master)
        f = torch.float32
        if decoupled:                    # m = v = 0: the update is the decay alone
            w = w * torch.tensor(1.0 - lr * wd, dtype=f) if unfused else w - lr * (wd * w)
        else:                            # the gradient is wd * w (L2), the moments follow
            g = wd * w
            b1f, b2f = torch.tensor(b1, dtype=f), torch.tensor(b2, dtype=f)
            m, v = (1 - b1f) * g, (1 - b2f) * g * g
            bc1, bc2 = (1 - b1f, 1 - b2f) if corrected else (1.0, 1.0)
            if unfused:                  # torch's Adam
                w = w - (lr / bc1) * m / (v.sqrt() / bc2 ** 0.5 + eps)
            else:                        # DeepSpeed's FusedAdam
                w = w - lr * ((m / bc1) / ((v / bc2).sqrt() + eps))
            eng._set_fragment(pid, eng._ADAM_STATE["exp_avg"], m)
            eng._set_fragment(pid, eng._ADAM_STATE["exp_avg_sq"], v)
        eng._set_fragment(pid, master, w)

    def _torch_view(self):
        """A torch optimizer over these param groups (_GroupsOptimizer), made once: what a client
        scheduler's callable is given when the config's optimizer runs."""
        if getattr(self, "_view", None) is None:
            self._view = _GroupsOptimizer(self)
        return self._view

    def zero_grad(self, set_to_none=True):
        """DeepSpeed's optimizer.zero_grad: the model parameters' `.grad` to None (or zeros),
        and inside an accumulation window at ZeRO stages 0-1 and 3 what the window summed so
        far dropped, as DeepSpeed's optimizers do (engine._drop_window_grads). zinc zeroes its
        gradient buffers at every optimizer step itself."""
        for p in self._engine.module.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()
        self._engine._drop_window_grads("optimizer")

    @property
    def cur_scale(self):
        """The loss scale the next backward multiplies by (1 without fp16), as DeepSpeed's
        optimizers report it."""
        return lib.zinc_engine_loss_scale(self._engine._e)

    loss_scale = cur_scale

    def step(self, closure=None):
        raise NotImplementedError("zinc: call engine.step(); the optimizer runs inside zinc's step")


class _GroupsOptimizer(torch.optim.Optimizer):
    """The optimizer DeepSpeed's engine gives a client scheduler's callable when the config's
    optimizer runs: its basic optimizer, a torch one (torch's schedulers take no other; Hugging
    Face's Trainer passes such a callable with a config optimizer and no config scheduler). Here
    a torch.optim.Optimizer whose param_groups are the very dicts of the optimizer initialize
    returns, so an lr (or betas) the scheduler writes is what zinc's next step applies. Its
    defaults are the config's Adam values (a scheduler cycling momentum looks for "betas").
    Never stepped: engine.step() is the step."""

    def __init__(self, carrier):
        opt = carrier._engine._resolved["optimizer"]["params"]
        defaults = {"lr": opt["lr"], "betas": tuple(opt["betas"]), "eps": opt["eps"],
                    "weight_decay": opt["weight_decay"]}
        # torch's constructor wants a parameter; its group is replaced by the carrier's groups.
        self._carrier = None
        super().__init__([torch.zeros(1, requires_grad=True)], defaults)
        self.param_groups = carrier.param_groups
        self._carrier = carrier

    def step(self, closure=None):
        raise NotImplementedError("zinc: call engine.step(); the optimizer runs inside zinc's step")

    def zero_grad(self, set_to_none=True):
        self._carrier.zero_grad(set_to_none)

    def load_state_dict(self, state_dict):
        # torch's would put new group dicts in place of the carrier's, which zinc reads: the
        # schedule would write into groups nobody applies.
        raise NotImplementedError("zinc: load_state_dict on the torch optimizer a scheduler "
                                  "was given: engine.load_checkpoint restores the groups")

    def add_param_group(self, param_group):
        if getattr(self, "_carrier", None) is None:    # torch's constructor adds its one group
            return super().add_param_group(param_group)
        raise NotImplementedError("zinc: add_param_group on the torch optimizer a scheduler was "
                                  "given: zinc trains the groups initialize was given")


class _Scheduler:
    """The config's scheduler runs inside zinc's step; this reports it with DeepSpeed's
    scheduler API (its WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest share
    get_lr, get_last_lr, state_dict, load_state_dict and last_batch_iteration)."""

    def __init__(self, engine):
        self._engine = engine
        self._warned = False

    @property
    def last_batch_iteration(self):
        """DeepSpeed's: the schedule's position, the optimizer steps applied minus one (-1
        before the first; steps skipped for an overflow do not move it), or where a load or
        load_state_dict put it (zinc_engine_sched_lead)."""
        return _partial_load.counts(self._engine).sched - 1

    def get_lr(self):
        """The lr of each param group at the schedule's position (what the next step uses)."""
        return self._engine.get_lr()

    get_last_lr = get_lr        # one value in zinc: the schedule moves inside engine.step()

    def state_dict(self):
        """DeepSpeed's: {"last_batch_iteration": position}."""
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, sd):
        """DeepSpeed's: sets the position, and the lr its next step() writes follows from it;
        the update before that runs at the lr the param groups hold now, as DeepSpeed's (its
        load leaves them)."""
        from .runtime.lr_schedules import _position     # (it imports this module)
        given = sd.get("last_batch_iteration") if isinstance(sd, dict) else sd
        try:
            at = _position(given)       # ints of numpy and torch, whole floats: DeepSpeed's
        except (TypeError, ValueError, RuntimeError):   # (a tensor of several elements)
            at = None
        if at is None or not -1 <= at < 2 ** 53:
            raise ValueError(f"zinc: lr_scheduler.load_state_dict: last_batch_iteration "
                             f"{given!r} is not a whole number in -1..2^53")
        if at == self.last_batch_iteration:
            return
        values = _partial_load.held(self._engine)
        _partial_load.set_sched(self._engine, at + 1)
        _partial_load.first_update(self._engine, values)

    def step(self, *args, **kwargs):
        """Nothing to do: engine.step() advances the schedule. DeepSpeed 0.19.8's engine.step()
        steps its scheduler too, and a script's own call advances it once more (two positions
        a step, the warm-up twice as fast): zinc does not follow that, and says so once (rank
        0), rather than run another schedule in silence."""
        if not self._warned and self._engine.global_rank == 0:
            warnings.warn("zinc: lr_scheduler.step() on the config's scheduler does nothing: "
                          "engine.step() advances it (DeepSpeed 0.19.8's engine.step() steps it "
                          "too, so there this call would advance it a second time per step)",
                          RuntimeWarning, stacklevel=2)
        self._warned = True
