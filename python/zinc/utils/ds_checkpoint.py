"""ds_checkpoint.py — a DeepSpeed checkpoint folder read into model space, without deepspeed.

    from zinc.utils.ds_checkpoint import read_deepspeed_checkpoint
    ds = read_deepspeed_checkpoint("checkpoints", tag=None)     # tag None: DeepSpeed's `latest`
    ds.master["fc1.weight"], ds.exp_avg[...], ds.adam_step, ds.global_steps, ds.scaler, ...

What it reads (DeepSpeed 0.19.8's file layout; docs/deepspeed-checkpoints.md):
- ZeRO stages 1-2 and BF16_Optimizer: each rank's flat fp32 partition of every param group
  (single_partition_of_fp32_groups) and the Adam moments of the same partition; concatenated
  over the ranks, the group's parameters follow one another in param_shapes order (with
  param_alignment_paddings after each, where DeepSpeed wrote them);
- ZeRO stage 3: every parameter is split on its own, ceil(numel / ranks) elements per rank, and
  a rank's flat groups are its slices of the parameters in param_shapes order;
- stage 0: the model states file's optimizer: torch's state_dict (fp32) or DeepSpeed's fp16/bf16
  optimizer's (fp32 copies beside torch's state);
- universal checkpoints: zero/<param>/fp32.pt, exp_avg.pt, exp_avg_sq.pt, step.pt.
Everything becomes full fp32 tensors by parameter name, which zinc (any world size, any stage)
loads through its own parameter calls: resharding is zinc's, not this file's.

Refused by name, before anything is read into an engine: model or pipeline parallelism
(mp_rank other than 00, layer_* files, tp/pp degrees above 1), MoE (expert files), an optimizer
other than Adam/AdamW (state other than exp_avg/exp_avg_sq/step).
"""
import glob
import math
import os
import re

import torch

from . import _ds_pickle

# Keys of DeepSpeed's model states file that are DeepSpeed's own: DeepSpeed 0.19.8's
# load_checkpoint returns every other key as client_state (so does zinc).
_DS_KEYS = {"module", "skipped_steps", "global_steps", "dp_world_size", "mp_world_size",
            "data_sampler", "random_ltd", "lr_scheduler", "optimizer"}
_ADAM_STATE = {"exp_avg", "exp_avg_sq", "step"}
_ADAM_TYPES = {"adam", "adamw", "fusedadam", "torch_adam", "cpuadam", "deepspeedcpuadam"}


class DeepSpeedCheckpointError(ValueError):
    """A DeepSpeed checkpoint zinc cannot carry (the message names the file and what)."""


class DamagedFileError(DeepSpeedCheckpointError):
    """A file of the checkpoint that torch cannot read (truncated, not a torch file)."""


class DeepSpeedState:
    """What a DeepSpeed checkpoint holds, in model space (every tensor full, on the CPU).

    master, exp_avg, exp_avg_sq: {name: fp32 tensor of the parameter's shape}, the parameters
    DeepSpeed's optimizer trained, in its order. adam_step: the Adam step count (updates
    applied). global_steps, global_samples, skipped_steps: the engine's counters. scaler: None
    (no fp16) or {"scale", "dynamic", "hysteresis", "iter", "last_overflow_iter"}.
    lr_scheduler: DeepSpeed's scheduler state_dict (or None). module: the model states file's
    module state_dict (buffers, frozen parameters; 16-bit copies of the trained ones; empty
    placeholders at stage 3). buffer_names, frozen: names. client_state: the other keys, as
    DeepSpeed's load_checkpoint returns them. path, tag, kind ("zero-0".."zero-3",
    "bf16-optimizer", "universal"), dtype ("fp32"|"fp16"|"bf16"), world_size (DeepSpeed's data
    parallel ranks), ds_config, ds_version. param_groups: DeepSpeed's optimizer's param groups,
    in its order, as [{"lr", "betas", "eps", "weight_decay"}] (what its load gives the
    optimizer back); empty when the files keep none. group_names: the names of each of those
    groups' trained parameters, in order, where the files say (stages 0-3; empty for universal
    checkpoints)."""

    def __init__(self):
        self.master, self.exp_avg, self.exp_avg_sq = {}, {}, {}
        self.adam_step = 0
        self.global_steps = self.global_samples = self.skipped_steps = 0
        self.scaler = None
        self.lr_scheduler = None
        self.module, self.buffer_names, self.frozen = {}, [], []
        self.client_state = {}
        self.path = self.tag = self.kind = self.dtype = None
        self.world_size, self.ds_config, self.ds_version = 1, {}, None
        self.param_groups = []
        self.group_names = []
        self._states = {}        # the model states file's entries but "module", in its order

    def client_state_for(self, module_only=False, optimizer=True, scheduler=True,
                         stage0=False):
        """What DeepSpeed 0.19.8's load_checkpoint returns as client_state for these flags
        (load_module_only, load_optimizer_states, load_lr_scheduler_states) into an engine of
        ZeRO stage 0 or not (its engine.py, _load_checkpoint): the model states file's keys
        but its own, where a module-only load takes out only "module", and "lr_scheduler" and
        "optimizer" stay unless their flag loads them; a stage-0 engine loading the optimizer
        gets the file's "optimizer" back. client_state is the full load's."""
        # ("module" is not among the kept entries: every load takes it out)
        gone = set() if module_only else set(_DS_KEYS) - {"lr_scheduler", "optimizer"}
        if scheduler:
            gone.add("lr_scheduler")
        if optimizer:
            gone.add("optimizer")
        out = {k: v for k, v in self._states.items() if k not in gone}
        if stage0 and optimizer and not module_only and "optimizer" in self._states:
            out["optimizer"] = self._states["optimizer"]
        return out


def _refuse(path, what):
    raise DeepSpeedCheckpointError(f"zinc: {path}: {what}; zinc carries only data-parallel "
                                   "ZeRO checkpoints of Adam/AdamW (docs/deepspeed-"
                                   "checkpoints.md)")


def _fail(path, what):
    """A checkpoint that is damaged or asked for wrongly (_refuse: one zinc cannot carry)."""
    raise DeepSpeedCheckpointError(f"zinc: {path}: {what}")


def find_deepspeed_tag(load_dir, tag=None):
    """(tag, tag folder) when load_dir/tag is a DeepSpeed checkpoint (tag None: the one its
    `latest` file names, else `latest_universal`'s), None when it is not one (a zinc
    checkpoint, or nothing there). In a folder of DeepSpeed tags alone, a `latest` that is
    empty or names no tag there, no `latest`, or a tag not there raises
    DeepSpeedCheckpointError saying so and listing the tags."""
    named = None                 # the file that named the tag
    if tag is None or str(tag) == "latest":
        for name in ("latest", "latest_universal"):
            p = os.path.join(load_dir, name)
            if os.path.isfile(p):
                # errors replaced: a damaged `latest` (bytes that are not UTF-8) names no
                # DeepSpeed tag, and zinc's loader then says so and falls back (it raised
                # UnicodeDecodeError here)
                with open(p, encoding="utf-8", errors="replace") as f:
                    tag, named = f.read().strip(), name
                break
    if tag is not None and str(tag) != "latest" and _is_ds_tag(os.path.join(load_dir, str(tag))):
        return str(tag), os.path.join(load_dir, str(tag))
    # Not one; but a folder of DeepSpeed tags and no zinc one is DeepSpeed's, and zinc's loader
    # would say it holds no manifest.json: say what is wrong with the tag asked for instead.
    others = _ds_tags(load_dir)
    if not others:
        return None
    here = f"(DeepSpeed tags here: {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})"
    if named is not None and not tag:
        _fail(os.path.join(load_dir, named), f"it is empty {here}: give the tag to load")
    if named is not None:
        _fail(os.path.join(load_dir, named), f"it names {tag!r}, which is not a DeepSpeed "
                f"tag of this folder {here}: give the tag to load, or correct the file")
    if tag is None or str(tag) == "latest":
        _fail(load_dir, f"no `latest` file names the tag to load {here}: give the tag "
                "(DeepSpeed's own load needs it too)")
    _fail(os.path.join(load_dir, str(tag)), f"no DeepSpeed tag {str(tag)!r} in this folder "
            f"{here}")


def _is_ds_tag(tagdir):
    """Whether tagdir holds a DeepSpeed checkpoint (model/optimizer states files or a universal
    zero/ folder) and not a zinc one."""
    if not os.path.isdir(tagdir) or os.path.exists(os.path.join(tagdir, "manifest.json")):
        return False
    return (os.path.isdir(os.path.join(tagdir, "zero")) or
            any(re.search(r"model_states\.pt$|optim_states\.pt$", n)
                for n in os.listdir(tagdir)))


def _ds_tags(load_dir):
    """The DeepSpeed tags of load_dir, sorted; none when it holds a zinc tag too (then it is
    zinc's to load, and say what is wrong)."""
    try:
        subs = sorted(n for n in os.listdir(load_dir) if os.path.isdir(os.path.join(load_dir, n)))
    except OSError:
        return []
    if any(os.path.exists(os.path.join(load_dir, n, "manifest.json")) for n in subs):
        return []
    return [n for n in subs if _is_ds_tag(os.path.join(load_dir, n))]


def _check_layout(tagdir, names):
    """Refuses, naming the file, what zinc cannot carry: model/tensor parallel ranks, pipeline
    stages, experts."""
    for n in sorted(names):
        m = re.search(r"mp_rank_(\d+)", n)
        if m and int(m.group(1)) != 0:
            _refuse(os.path.join(tagdir, n), "a model (tensor) parallel rank's file "
                    f"(mp_rank_{m.group(1)}): tensor parallelism")
        # experts first: DeepSpeed names an expert's file layer_<L>_expert_<E>_mp_rank_..
        if "expert" in n or "expp_rank" in n:
            _refuse(os.path.join(tagdir, n), "an expert file: mixture of experts (MoE)")
        if n.startswith("layer_"):
            _refuse(os.path.join(tagdir, n), "a pipeline stage's layer file: pipeline "
                    "parallelism")


def _check_model_states(path, sd):
    if int(sd.get("mp_world_size", 1) or 1) != 1:
        _refuse(path, f"mp_world_size {sd['mp_world_size']}: tensor parallelism")
    dims = sd.get("checkpoint_parallel_dimensions") or {}
    for key, what in (("tp_degree", "tensor parallelism"), ("pp_degree", "pipeline "
                                                              "parallelism")):
        if int(dims.get(key, 1) or 1) != 1:
            _refuse(path, f"{key} {dims[key]}: {what}")
    if sd.get("num_experts"):
        _refuse(path, f"num_experts {sd['num_experts']}: mixture of experts (MoE)")
    experts = [str(k) for k in sd.get("module") or {} if "expert" in str(k)]
    if experts:
        _refuse(path, f"expert parameters {experts[:3]}{' ...' if len(experts) > 3 else ''}: "
                "mixture of experts (MoE)")
    opt = ((sd.get("ds_config") or {}).get("optimizer") or {}).get("type")
    if opt is not None and str(opt).lower() not in _ADAM_TYPES:
        _refuse(path, f"optimizer type {opt!r}: only Adam/AdamW state is carried")


def _check_adam(path, state):
    """state: one torch optimizer state entry; refuses another optimizer's by its keys. An
    empty entry is Adam's before its first step (see _moments)."""
    if not state:
        return
    other = sorted(set(state) - _ADAM_STATE)
    if other or "exp_avg" not in state or "exp_avg_sq" not in state:
        _refuse(path, f"optimizer state with keys {sorted(state)}: not Adam's "
                "(exp_avg, exp_avg_sq, step)")


def _moments(path, state, numel):
    """exp_avg and exp_avg_sq of one state entry, fp32 and flat. Adam makes its state at its
    first step, so a checkpoint saved before one (or with every fp16 step so far skipped) holds
    none: the moments are zeros of numel elements then, as DeepSpeed's reload of it has."""
    _check_adam(path, state)
    if not state:
        return torch.zeros(numel), torch.zeros(numel)
    return state["exp_avg"].float().flatten(), state["exp_avg_sq"].float().flatten()


def _groups_of(torch_sd):
    """A torch optimizer state_dict's param groups as DeepSpeedState.param_groups ([] when a
    group lacks one of Adam's values)."""
    out = []
    for g in (torch_sd or {}).get("param_groups") or []:
        if not all(k in g for k in ("lr", "betas", "eps", "weight_decay")):
            return []
        out.append({"lr": float(g["lr"]), "betas": tuple(float(b) for b in g["betas"]),
                    "eps": float(g["eps"]), "weight_decay": float(g["weight_decay"])})
    return out


def _dtype_of(cfg):
    if (cfg.get("bf16") or {}).get("enabled") or (cfg.get("bfloat16") or {}).get("enabled"):
        return "bf16"
    if (cfg.get("fp16") or {}).get("enabled"):
        return "fp16"
    return "fp32"


def _scaler_of(obj):
    """DeepSpeed's loss scaler (a pickled LossScaler/DynamicLossScaler stand-in, or the fp16
    optimizer's keys) as zinc's fields."""
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    dynamic = bool(get("dynamic", get("dynamic_loss_scale", False)))
    return {"scale": float(get("cur_scale", 1.0)), "dynamic": dynamic,
            "hysteresis": int(get("cur_hysteresis", get("delayed_shift", 1)) or 1),
            "iter": int(get("cur_iter", 0) or 0),
            "last_overflow_iter": int(get("last_overflow_iter", -1))}


def _step_of(path, states):
    """The one Adam step count of states, [(where, torch state entry)]: refused, naming where
    each count was found, when they differ."""
    where = {}
    for at, s in states:
        if "step" in s:
            where.setdefault(int(float(s["step"])), at)
    if len(where) > 1:
        counts = ", ".join(f"{n} at {where[n]}" for n in sorted(where))
        _refuse(path, f"Adam step counts differ between parameter groups ({counts}); zinc "
                "keeps one")
    return next(iter(where)) if where else 0


def _model_states_file(tagdir, names):
    for n in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if n in names:
            return os.path.join(tagdir, n)
    _refuse(tagdir, "no mp_rank_00_model_states.pt or zero_pp_rank_0_mp_rank_00_model_states"
            ".pt (not a DeepSpeed checkpoint of a data-parallel run)")


def _rank_files(tagdir, pattern):
    """The files of every rank, in rank order (pattern has one {} for the rank)."""
    rx = re.compile("^" + re.escape(pattern).replace(r"\{\}", r"(\d+)") + "$")
    found = {}
    for n in os.listdir(tagdir):
        m = rx.match(n)
        if m:
            found[int(m.group(1))] = os.path.join(tagdir, n)
    if found and sorted(found) != list(range(len(found))):
        missing = sorted(set(range(max(found) + 1)) - set(found))
        _refuse(tagdir, f"the files of ranks {missing} ({pattern.format(missing[0])}) are "
                "missing")
    return [found[r] for r in sorted(found)]


def _take(name_shapes, flat, flat_m, flat_v, out, paddings=None, path=""):
    """Stage 1-2 layout: the group's parameters one after another in the flat buffers."""
    off = 0
    for i, (name, shape) in enumerate(name_shapes.items()):
        n = math.prod(shape)
        if off + n > flat.numel():
            _refuse(path, f"the flat partitions hold {flat.numel()} elements, {name} needs "
                    f"{off + n} (param_shapes and partitions disagree)")
        for dst, src in zip(out, (flat, flat_m, flat_v)):
            dst[name] = src[off:off + n].clone().view(tuple(shape))
        off += n + (int(paddings[i]) if paddings else 0)


def _flat_groups(ds, files, per_rank, param_shapes):
    """ZeRO 1-2 and BF16_Optimizer files: the ranks' flat partitions per group (per_rank: each
    file's optimizer_state_dict)."""
    first = per_rank[0]
    ds.scaler = _scaler_of(first["loss_scaler"]) if "loss_scaler" in first else None
    steps = []
    groups = len(first["single_partition_of_fp32_groups"])
    if groups != len(param_shapes):
        _refuse(files[0], f"{groups} flat groups, param_shapes has {len(param_shapes)}")
    paddings = first.get("param_alignment_paddings")
    if isinstance(first["base_optimizer_state"], dict):
        ds.param_groups = _groups_of(first["base_optimizer_state"])
    ds.group_names = [list(g) for g in param_shapes]
    cat = {k: [] for k in ("fp32", "m", "v")}
    for g in range(groups):
        for key in cat:
            cat[key].append([])
        for f, osd in zip(files, per_rank):
            base = osd["base_optimizer_state"]
            st = (base["state"].get(g, {}) if isinstance(base, dict)
                  else base[g] if g < len(base) else {})
            steps.append((f"group {g} of {os.path.basename(f)}", st))
            fp32 = osd["single_partition_of_fp32_groups"][g].float()
            m, v = _moments(f, st, fp32.numel())
            cat["fp32"][g].append(fp32)
            cat["m"][g].append(m)
            cat["v"][g].append(v)
        _take(param_shapes[g], torch.cat(cat["fp32"][g]), torch.cat(cat["m"][g]),
              torch.cat(cat["v"][g]), (ds.master, ds.exp_avg, ds.exp_avg_sq),
              paddings[g] if paddings else None, files[0])
    ds.adam_step = _step_of(files[0], steps)


def _stage3(ds, files, per_rank, param_shapes):
    """ZeRO 3: each parameter split on its own, ceil(numel / ranks) elements per rank
    (per_rank: each file's optimizer_state_dict)."""
    ranks = len(files)
    first = per_rank[0]
    ds.scaler = _scaler_of(first["loss_scaler"]) if "loss_scaler" in first else None
    ds.param_groups = _groups_of(first["optimizer_state_dict"])
    ds.group_names = [list(g) for g in param_shapes]
    flats = {k: [] for k in ("fp32", "m", "v")}
    steps = []
    for f, osd in zip(files, per_rank):
        inner = osd["optimizer_state_dict"]["state"]
        groups = osd["fp32_flat_groups"]
        if set(inner) - set(range(len(groups))):
            _refuse(f, f"optimizer state for sub-groups {sorted(inner)}, fp32_flat_groups has "
                    f"{len(groups)}")
        # (a sub-group without state: Adam has not stepped yet; zeros, _moments)
        moments = [_moments(f, inner.get(k, {}), t.numel()) for k, t in enumerate(groups)]
        steps.extend((f"group {k} of {os.path.basename(f)}", inner[k]) for k in sorted(inner))
        flats["fp32"].append(torch.cat([t.float() for t in groups]))
        flats["m"].append(torch.cat([m for m, _ in moments]))
        flats["v"].append(torch.cat([v for _, v in moments]))
    off = 0
    for name, shape in ((n, s) for group in param_shapes for n, s in group.items()):
        numel = math.prod(shape)
        part = -(-numel // ranks)
        for dst, key in ((ds.master, "fp32"), (ds.exp_avg, "m"), (ds.exp_avg_sq, "v")):
            if off + part > flats[key][0].numel():
                _refuse(files[0], f"the stage-3 partitions end before {name}")
            whole = torch.cat([flat[off:off + part] for flat in flats[key]])
            dst[name] = whole[:numel].clone().view(tuple(shape))
        off += part
    ds.adam_step = _step_of(files[0], steps)


def _stage0(ds, path, opt, module, buffer_names, order):
    """Stage 0: the optimizer in the model states file. DeepSpeed keeps no names there, only
    its optimizer's parameters in the order of its param groups, group after group, as its own
    load rebuilds them: with one group that is the module's order (every parameter must be in
    it); with several, order — the loading engine's trained parameters in its groups' order —
    says it, and without one (a converter) the checkpoint is refused: the module's order would
    give one parameter's Adam state to another."""
    names = [n for n in module if n not in set(buffer_names)]
    fused = "fp32_groups_flat" in opt               # one flat fp32 copy per group
    if "optimizer_state_dict" in opt:              # DeepSpeed's fp16/bf16 optimizer
        ds.scaler = _scaler_of(opt) if ds.dtype == "fp16" else None
        torch_sd = opt["optimizer_state_dict"]
        if "fp32_groups" in opt:                    # unfused: one fp32 copy per parameter
            fp32 = [t for g in opt["fp32_groups"] for t in g]
        else:                                       # fused: one flat fp32 copy per group
            fp32 = [t for t in opt["fp32_groups_flat"]]
    else:                                           # fp32: torch's optimizer itself
        torch_sd, fp32 = opt, None
    ds.param_groups = _groups_of(torch_sd)
    if len(torch_sd["param_groups"]) > 1:
        if order is None:
            _refuse(path, f"a stage-0 checkpoint of {len(torch_sd['param_groups'])} param "
                    "groups: DeepSpeed keeps no parameter names at stage 0, only their order "
                    "in its groups; load it with engine.load_checkpoint into a model given the "
                    "same param groups, in the same order (DeepSpeed's own load needs that too)")
        names = list(order)
        missing = [n for n in names if n not in module]
        if missing:
            _refuse(path, f"the loading engine trains {missing[:3]}, which the module state "
                    "does not hold")
    ids = [i for g in torch_sd["param_groups"] for i in g["params"]]
    group_of = {i: g for g, grp in enumerate(torch_sd["param_groups"]) for i in grp["params"]}
    state = [torch_sd["state"].get(i, {}) for i in ids]
    if fused:
        _stage0_fused(ds, path, fp32, state, names, module)
        _stage0_step(ds, path, ids, state, group_of)
        return
    if len(ids) != len(names):
        _refuse(path, f"a stage-0 optimizer over {len(ids)} of the module's "
                f"{len(names)} parameters (frozen parameters at stage 0 are not carried: "
                "DeepSpeed keeps no parameter names there)")
    for k, (st, n) in enumerate(zip(state, names)):
        if st and tuple(st.get("exp_avg", torch.empty(0)).shape) != tuple(module[n].shape):
            _refuse(path, f"DeepSpeed's optimizer parameter {k} has shape "
                    f"{tuple(st['exp_avg'].shape)}, its place here is {n} of shape "
                    f"{tuple(module[n].shape)}: the param groups are not DeepSpeed's (give the "
                    "model the same groups, in the same order)")
    # (a parameter without state: Adam has not stepped yet; zeros, _moments)
    moments = [_moments(path, st, module[n].numel()) for st, n in zip(state, names)]
    at = 0          # the groups' parameters, group after group
    for g in torch_sd["param_groups"]:
        ds.group_names.append(names[at:at + len(g["params"])])
        at += len(g["params"])
    for i, n in enumerate(names):
        src = module[n] if fp32 is None else fp32[i]
        shape = tuple(module[n].shape)
        ds.master[n] = src.float().clone().view(shape)
        ds.exp_avg[n] = moments[i][0].clone().view(shape)
        ds.exp_avg_sq[n] = moments[i][1].clone().view(shape)
    _stage0_step(ds, path, ids, state, group_of)


def _stage0_fused(ds, path, flats, state, names, module):
    """Stage 0 with DeepSpeed's fused fp16/bf16 optimizer (FP16_Optimizer, its default Adam):
    one flat fp32 copy per param group, its parameters one after another in the group's order
    (names, group after group), and the Adam it wraps sees one parameter per group — one state
    entry, its moments as flat. A group's parameters are the next names whose sizes fill its flat
    copy. (Read per parameter before 2026-11-30: refused, one state entry per group against the
    module's parameters.)"""
    if len(state) != len(flats):
        _refuse(path, f"DeepSpeed's fused stage-0 optimizer has {len(flats)} flat groups and "
                f"{len(state)} Adam parameters: not one per group")
    at = 0
    for g, flat in enumerate(flats):
        group, filled = [], 0
        while filled < flat.numel() and at < len(names):
            group.append(names[at])
            filled += module[names[at]].numel()
            at += 1
        if filled != flat.numel():
            _refuse(path, f"DeepSpeed's flat group {g} holds {flat.numel()} elements, the "
                    f"module's parameters in its place {filled} (another model, or other param "
                    "groups: give the model DeepSpeed's groups, in the same order)")
        ds.group_names.append(group)
        m, v = _moments(path, state[g], flat.numel())
        if m.numel() != flat.numel():
            _refuse(path, f"DeepSpeed's flat group {g}: exp_avg of {m.numel()} elements for "
                    f"{flat.numel()}")
        shapes = {n: tuple(module[n].shape) for n in group}
        _take(shapes, flat.float().flatten(), m, v, (ds.master, ds.exp_avg, ds.exp_avg_sq), None,
              path)
    if at != len(names):
        _refuse(path, f"DeepSpeed's fused stage-0 optimizer holds {at} of the module's "
                f"{len(names)} parameters (frozen parameters at stage 0 are not carried: "
                "DeepSpeed keeps no parameter names there)")


def _stage0_step(ds, path, ids, state, group_of):
    """The Adam step count of a stage-0 checkpoint."""
    # DeepSpeed's Adam without torch_adam (FusedAdam) counts a group's steps on the state of
    # the last parameter it stepped, and its kernel takes that count for the whole group; the
    # others keep the count they started with (0). torch's Adam counts on every parameter alike.
    # Either way a group's count is its last stepped parameter's (they were refused as differing).
    last = {}
    for i, st in zip(ids, state):
        if "step" in st:
            last[group_of[i]] = st
    ds.adam_step = _step_of(path, [(f"group {g}", st) for g, st in sorted(last.items())])


def _stage3_frozen(ds, tagdir, msf, sd, ranks):
    """Stage 3 keeps a frozen parameter in pieces: each rank's model states file holds its
    fragment (frozen_param_fragments, ceil(numel / ranks) elements, the last rank's padded) and
    the module state an empty placeholder. Put together into ds.module, as DeepSpeed's
    zero_to_fp32 does (it was left empty: the load refused it, from_deepspeed dropped it)."""
    shapes = sd.get("frozen_param_shapes") or {}
    if not shapes:
        return
    files = _rank_files(tagdir, "zero_pp_rank_{}_mp_rank_00_model_states.pt")
    if len(files) != ranks:
        _refuse(tagdir, f"{len(files)} zero_pp_rank_*_mp_rank_00_model_states.pt files for "
                f"{ranks} ranks' optimizer files: each holds a piece of the frozen parameters")
    frags = [(sd if f == msf else _ds_pickle.load_file(f)).get("frozen_param_fragments") or {}
             for f in files]
    for name, shape in shapes.items():
        numel = math.prod(tuple(shape))
        for f, fr in zip(files, frags):
            if name not in fr:
                _refuse(f, f"no piece of the frozen parameter {name}")
        whole = torch.cat([fr[name].flatten() for fr in frags])
        if whole.numel() < numel:
            _refuse(files[0], f"the pieces of the frozen parameter {name} hold {whole.numel()} "
                    f"elements, its shape {tuple(shape)} needs {numel}")
        ds.module[name] = whole[:numel].clone().view(tuple(shape))


def _universal(ds, tagdir, param_shapes):
    """zero/<param>/{fp32,exp_avg,exp_avg_sq,step}.pt: each param whole. A folder with only
    fp32.pt is a buffer or a frozen parameter (from the module state)."""
    zdir = os.path.join(tagdir, "zero")
    steps = []
    shapes = {n: s for group in param_shapes or [] for n, s in group.items()}
    for pdir in sorted(glob.glob(os.path.join(zdir, "**", "exp_avg.pt"), recursive=True)):
        pdir = os.path.dirname(pdir)
        name = os.path.relpath(pdir, zdir).replace(os.sep, "/")
        others = sorted(set(os.path.splitext(n)[0] for n in os.listdir(pdir)) -
                        {"fp32", "exp_avg", "exp_avg_sq", "step"})
        if others:
            _refuse(pdir, f"optimizer state {others}: not Adam's")
        for dst, f in ((ds.master, "fp32"), (ds.exp_avg, "exp_avg"), (ds.exp_avg_sq,
                                                                       "exp_avg_sq")):
            d = _ds_pickle.load_file(os.path.join(pdir, f + ".pt"))
            t = (d["param"] if isinstance(d, dict) else d).float()
            # ds_to_universal of a stage-3 checkpoint leaves the tensors flat: the model
            # states' param_shapes give them their shape back.
            dst[name] = t.view(tuple(shapes[name])) if name in shapes else t
        sp = os.path.join(pdir, "step.pt")
        if os.path.exists(sp):
            s = _ds_pickle.load_file(sp)
            steps.append((name, {"step": s["param"] if isinstance(s, dict) else s}))
    if not ds.master:
        _refuse(zdir, "no zero/<param>/exp_avg.pt: a universal checkpoint without Adam state")
    osp = os.path.join(zdir, "optimizer_state.pt")
    if os.path.exists(osp):
        osd = _ds_pickle.load_file(osp)
        ds.param_groups = _groups_of(osd)
        if "loss_scaler" in osd:
            ds.scaler = _scaler_of(osd["loss_scaler"])
        # A stage-3 source has no step.pt: its step is in rank 0's optimizer state, kept here.
        inner = (osd.get("optimizer_state_dict") or {}).get("state") or {}
        steps.extend((f"group {k} of optimizer_state.pt", st) for k, st in inner.items()
                     if isinstance(st, dict) and "step" in st)
    ds.adam_step = _step_of(zdir, steps)
    # The module state says the order the model registers them in; universal folders are
    # listed alphabetically.
    order = [n for n in ds.module if n in ds.master]
    for store in (ds.master, ds.exp_avg, ds.exp_avg_sq):
        items = dict(store)
        store.clear()
        store.update({n: items[n] for n in order})
        store.update({n: t for n, t in items.items() if n not in store})


def read_deepspeed_checkpoint(load_dir, tag=None, order=None):
    """load_dir/tag (tag None: DeepSpeed's `latest`, else `latest_universal`) as a
    DeepSpeedState. Raises DeepSpeedCheckpointError naming the file for what zinc does not
    carry, FileNotFoundError when there is no DeepSpeed checkpoint. order: the loading
    engine's trained parameter names in its param groups' order (a stage-0 checkpoint of
    several groups names its parameters by that order only)."""
    found = find_deepspeed_tag(load_dir, tag)
    if found is None:
        raise FileNotFoundError(f"zinc: {os.path.join(load_dir, str(tag or 'latest'))} is not "
                                "a DeepSpeed checkpoint (no model_states/optim_states files, "
                                "no zero/ folder)")
    ds = DeepSpeedState()
    ds.tag, tagdir = found
    ds.path = tagdir
    names = os.listdir(tagdir)
    _check_layout(tagdir, names)
    msf = _model_states_file(tagdir, names)
    sd = _ds_pickle.load_file(msf)
    _check_model_states(msf, sd)
    ds.ds_config, ds.ds_version = sd.get("ds_config") or {}, sd.get("ds_version")
    ds.dtype = _dtype_of(ds.ds_config)
    ds.module = sd.get("module") or {}
    ds.buffer_names = list(sd.get("buffer_names") or [])
    ds.global_steps = int(sd.get("global_steps", 0))
    ds.skipped_steps = int(sd.get("skipped_steps", 0))
    ds.global_samples = int(sd.get("global_samples", 0))
    ds.world_size = int(sd.get("dp_world_size", 1) or 1)
    ds.lr_scheduler = sd.get("lr_scheduler")
    ds._states = {k: v for k, v in sd.items() if k != "module"}
    ds.client_state = ds.client_state_for()
    ds.frozen = list((sd.get("frozen_param_shapes") or {}).keys())
    param_shapes = sd.get("param_shapes")
    if os.path.isdir(os.path.join(tagdir, "zero")):
        ds.kind = "universal"
        _universal(ds, tagdir, param_shapes)
    else:
        _native(ds, tagdir, msf, sd, param_shapes, order)
    if ds.dtype != "fp16":
        ds.scaler = None
    return ds


def _native(ds, tagdir, msf, sd, param_shapes, order):
    # bf16 runs name their ZeRO files bf16_zero_pp_rank_* (stages 1-3, and BF16_Optimizer):
    # the layout is told by the content, not the name.
    files = (_rank_files(tagdir, "zero_pp_rank_{}_mp_rank_00_optim_states.pt") or
             _rank_files(tagdir, "bf16_zero_pp_rank_{}_mp_rank_00_optim_states.pt"))
    if files and len(files) != ds.world_size:
        # a gap is named by _rank_files; missing last ranks leave none (it was reported as the
        # partitions being too small for a parameter)
        pattern = os.path.basename(files[0]).replace("zero_pp_rank_0_", "zero_pp_rank_{}_")
        _fail(tagdir, f"{len(files)} optimizer states files for the {ds.world_size} ranks "
                f"the model states name (dp_world_size): {pattern.format(len(files))} and on "
                "are missing" if len(files) < ds.world_size else
                f"{len(files)} optimizer states files for the {ds.world_size} ranks the model "
                "states name (dp_world_size)")
    if files:
        # Each file read once: the layout is told by rank 0's, which is then used as it is.
        per_rank = [_ds_pickle.load_file(f)["optimizer_state_dict"] for f in files]
        head = per_rank[0]
        stage = head.get("zero_stage")
        stage = int(getattr(stage, "value", stage) or 0)
        if "fp32_flat_groups" in head:
            ds.kind = "zero-3"
            _stage3(ds, files, per_rank, param_shapes)
            _stage3_frozen(ds, tagdir, msf, sd, len(files))
        else:
            ds.kind = f"zero-{stage}" if stage else "bf16-optimizer"
            _flat_groups(ds, files, per_rank, param_shapes)
    else:
        ds.kind = "zero-0"
        opt = sd.get("optimizer")
        if not isinstance(opt, dict):
            _refuse(msf, "no optimizer state (saved without it, or a stage-0 checkpoint "
                    "of another layout)")
        _stage0(ds, msf, opt, ds.module, ds.buffer_names, order)
