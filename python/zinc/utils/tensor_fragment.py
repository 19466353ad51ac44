"""tensor_fragment.py — DeepSpeed's deepspeed.utils safe_get_*/safe_set_* calls (0.19.8,
deepspeed/utils/tensor_fragment.py), which take a model parameter alone:

- safe_get_full_fp32_param(param): the parameter's fp32 master weight, whole (zinc_param_get:
  collective, every rank calls it), on the engine's device; None for a parameter no live zinc
  engine trains (frozen, never given to one, or its engine closed), as DeepSpeed's;
- safe_set_full_fp32_param(param, value): sets the fp32 master and the working copy the model
  computes with (zinc_param_set; every rank passes the same value, as DeepSpeed's); not while
  the parameter's group is gathered for a forward, nor inside zero.GatheredParameters;
- safe_get_full_optimizer_state(param, key) / safe_set_full_optimizer_state(param, value, key):
  Adam's moments, key "exp_avg" or "exp_avg_sq" (torch's names; zinc_param_state_get/_set),
  the same rules;
- safe_get_full_grad(param) / safe_set_full_grad(param, value): the gradient the next
  engine.step() will use, fp32 and whole (zinc_param_grad_get, collective; zinc_param_grad_set):
  after engine.backward() and before engine.step(), the sum of this step's micro-batches so far
  averaged over the ranks, in the units backward left it — times the fp16 loss scale (not at
  ZeRO stage 0, whose backward leaves the loss unscaled, as DeepSpeed 0.19.8's) and
  divided by gradient_accumulation_steps, as DeepSpeed holds it before its step unscales. A
  set value (the same on every rank) replaces it; later backwards of the same step add to it.
  As DeepSpeed's, a parameter whose `.grad` is set (inside no_sync, where zinc has not been
  handed the gradient yet) gets that `.grad` read or written instead;
- safe_update_full_grad_vectorized(params, update_func): each gradient replaced by
  update_func(gradient, param), through the two calls above (DeepSpeed does the same at stages
  1-2; at stage 3 it batches them);
- the local forms (safe_get/set_local_fp32_param, _optimizer_state, _grad): this rank's
  fragment, 1-D fp32, not collective; ZeRO stage 3 only (ValueError at other stages, as
  DeepSpeed's assert). zinc's fragment is the part of the parameter inside this rank's slice
  of its group (DeepSpeed splits each parameter evenly instead): the ranks' fragments tile the
  flattened parameter in rank order, and one may be empty. A master fragment set reaches the
  weights the model computes with at the next step, as in DeepSpeed (the full form sets them
  at once; in fp32 the master is the working copy, so a group gathered after the write
  already has it)."""
from ..engine import trained_by


def _get(param, method, *args):
    """The engine's `method` for `param`; None when no live zinc engine trains it."""
    owner = trained_by(param)
    return None if owner is None else getattr(owner[0], method)(owner[1], *args)


def _set(param, method, value, *args):
    """The engine's `method` with `value` for `param`; nothing when no live engine trains it
    (as DeepSpeed's, which has no mapping for it)."""
    owner = trained_by(param)
    if owner is not None:
        getattr(owner[0], method)(owner[1], value, *args)


def safe_get_full_fp32_param(param):
    """The fp32 master of `param`, whole; None when no live zinc engine trains it."""
    return _get(param, "_full_fp32")


def safe_set_full_fp32_param(param, value):
    """Sets `param`'s fp32 master (and the working copy) to `value`."""
    _set(param, "_set_full_fp32", value)


def safe_get_full_optimizer_state(param, optim_state_key):
    """Adam's moment of `param` ("exp_avg" or "exp_avg_sq", torch's names), fp32 and whole
    (collective)."""
    return _get(param, "_full_fp32", optim_state_key)


def safe_set_full_optimizer_state(param, value, optim_state_key):
    """Sets Adam's moment of `param` ("exp_avg" or "exp_avg_sq"); the next step starts from
    it."""
    _set(param, "_set_full_fp32", value, optim_state_key)


def _own_grad(param):
    """`param.grad` where DeepSpeed's calls use it instead of ZeRO's gradient, as DeepSpeed
    0.19.8's do wherever `.grad` is set: set by autograd and not yet handed to zinc (no_sync),
    or the view of zinc's window sum that stages 0-1 show as `.grad` between backward and step
    (what the script left there made zinc's first). The shown `.grad` is this rank's own sum
    inside a window (the ranks' average after stage 0's last backward), in the parameter's
    dtype and DeepSpeed's units, read and written without a collective, as DeepSpeed's: a
    script that reads it on one rank alone (a log on rank 0) does not wait for the others.
    None where `.grad` is not set: zinc's gradient is then read and set whole, fp32, averaged
    over the ranks (a collective)."""
    g = param.grad
    if g is None:
        return None
    owner = trained_by(param)
    engine = owner[0] if owner is not None else None
    if engine is not None and engine._grad_shown(param):
        engine._sync_shown_grads()
        return param.grad
    return g


def safe_get_full_grad(param):
    """The gradient of `param` the next step will use, fp32 and whole (collective); `.grad`
    itself where it is set (no_sync, and the window's sum shown at stages 0-1), as DeepSpeed's."""
    own = _own_grad(param)
    if own is not None:
        return own
    return _get(param, "_full_fp32", "grad")


def safe_set_full_grad(param, value):
    """Sets the gradient of `param` the next step will use (the same value on every rank);
    `.grad` itself where it is set (no_sync, and the window's sum shown at stages 0-1)."""
    own = _own_grad(param)
    if own is not None:
        own.copy_(value)
    else:
        _set(param, "_set_full_fp32", value, "grad")


def safe_update_full_grad_vectorized(param_list, update_func):
    """DeepSpeed's: each parameter's gradient replaced by update_func(gradient, param) — `.grad`
    in place where it is set (no_sync), else the gradient the next step uses, read and set
    whole (collective: every rank calls it with the same list; update_func must give every
    rank the same value). Frozen parameters and those no live zinc engine trains are passed
    over."""
    for p in param_list:
        own = _own_grad(p)
        if own is not None:
            own.copy_(update_func(own, p))
        elif p.requires_grad and trained_by(p) is not None:
            safe_set_full_grad(p, update_func(safe_get_full_grad(p), p))


def safe_get_local_fp32_param(param):
    """This rank's fragment of `param`'s fp32 master, 1-D (ZeRO stage 3; not collective)."""
    return _get(param, "_local", None, "safe_get_local_fp32_param")


def safe_set_local_fp32_param(param, value):
    """Writes this rank's fragment of `param`'s fp32 master; the weights the model computes
    with follow at the next step, as DeepSpeed's (ZeRO stage 3)."""
    _set(param, "_set_local", value, None, "safe_set_local_fp32_param")


def safe_get_local_optimizer_state(param, optim_state_key):
    """This rank's fragment of Adam's moment ("exp_avg" or "exp_avg_sq"), 1-D (stage 3)."""
    return _get(param, "_local", optim_state_key, "safe_get_local_optimizer_state")


def safe_set_local_optimizer_state(param, value, optim_state_key):
    """Writes this rank's fragment of Adam's moment (stage 3)."""
    _set(param, "_set_local", value, optim_state_key, "safe_set_local_optimizer_state")


def safe_get_local_grad(param):
    """This rank's fragment of the gradient the next step uses, 1-D, in safe_get_full_grad's
    units (stage 3; after backward, before step)."""
    return _get(param, "_local", "grad", "safe_get_local_grad")


def safe_set_local_grad(param, value):
    """Writes this rank's fragment of the gradient the next step uses (stage 3)."""
    _set(param, "_set_local", value, "grad", "safe_set_local_grad")
