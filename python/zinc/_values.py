"""_values.py — one parameter's values read and written: whole (the fp32 master, an Adam moment
or the gradient: zinc_param_get/_set, zinc_param_state_get/_set, zinc_param_grad_get/_set; the
master cast to the working dtype) or this rank's fragment of them (zinc_param_local_get/_set,
stage 3). zinc.utils' safe_get/set_full_* and safe_get/set_local_* (utils/tensor_fragment.py),
the state dicts (_state_io.py) and zero.GatheredParameters (_stage3.py) read through these;
zinc.utils finds a parameter's engine by trained_by.

_ValuesMixin is one of the parts of engine.py's Engine.
"""
import ctypes
import weakref

import torch

from ._lib import lib
from ._memory import _TORCH_DTYPE, _numel


# id(parameter) -> (weak references to it and to the engine that trains it, its zinc parameter
# id), for zinc.utils' safe_get_full_fp32_param and friends, which take a parameter alone as
# DeepSpeed's. Keyed by id: a WeakKeyDictionary would compare tensors with ==.
_TRAINED_BY = {}


def _trains(param, engine, pid):
    key = id(param)
    _TRAINED_BY[key] = (weakref.ref(param, lambda _: _TRAINED_BY.pop(key, None)),
                        weakref.ref(engine), pid)


def trained_by(param):
    """(engine, zinc parameter id) of a parameter an engine trains (not closed), else None."""
    entry = _TRAINED_BY.get(id(param))
    if entry is None or entry[0]() is not param:
        return None
    engine = entry[1]()
    if engine is None or not getattr(engine, "_e", None):      # gone, or closed
        return None
    return engine, entry[2]


class _ValuesMixin:
    """The Engine's reads and writes of a parameter's full and local values."""

    # zinc_param_state's values by name: Adam's moments in torch's names; for the fragment
    # calls also the master (None) and the gradient.
    _ADAM_STATE = {"exp_avg": 0, "exp_avg_sq": 1}
    _LOCAL = {**_ADAM_STATE, None: 2, "grad": 3}

    def _full_calls(self, state):
        """(get, set, leading arguments) of the whole-value calls for `state`: None the fp32
        master (zinc_param_get/_set), "grad" the gradient (zinc_param_grad_get/_set), else an
        Adam moment (zinc_param_state_get/_set; ValueError for another name)."""
        if state is None:
            return lib.zinc_param_get, lib.zinc_param_set, ()
        if state == "grad":
            return lib.zinc_param_grad_get, lib.zinc_param_grad_set, ()
        return lib.zinc_param_state_get, lib.zinc_param_state_set, (self._state_id(state),)

    def _full_fp32(self, pid, state=None):
        """The parameter's whole value, fp32, on the engine's device (_full_calls: the master,
        an Adam moment, or the gradient the next step will use — averaged over the ranks,
        still times the loss multiplier). Collective."""
        get, _, args = self._full_calls(state)
        out = torch.empty(self._shapes[pid], dtype=torch.float32)
        self._call(get(self._e, pid, *args, ctypes.c_void_p(out.data_ptr())))
        return out.to(self._device)

    def _set_full_fp32(self, pid, value, state=None):
        """Sets the parameter's whole value (the same on every rank, as DeepSpeed's): the
        master also sets the working copy (stage 3's next gather reads it), a moment is where
        the next step starts from, the gradient what it uses."""
        what = ("safe_set_full_fp32_param" if state is None else
                "safe_set_full_grad" if state == "grad" else "safe_set_full_optimizer_state")
        _, put, args = self._full_calls(state)
        if state != "grad":      # a gradient is not what a gathered module computes with
            self._no_context(what)
        shape = self._shapes[pid]
        if tuple(value.shape) != tuple(shape):
            raise ValueError(f"zinc: {what}: a value of shape {tuple(value.shape)} for a "
                             f"parameter of shape {tuple(shape)}")
        src = value.detach().to("cpu", torch.float32).contiguous()
        if state == "grad":
            self._need_grad_buffer()
        # torch -> zinc (WAR): at stages 0-2 `param.data` views zinc's working copy, which the
        # write replaces on zinc's stream; torch's kernels queued before it read the old values.
        self._torch_then_zinc()
        self._call(put(self._e, pid, *args, ctypes.c_void_p(src.data_ptr())))
        self._zinc_then_torch()

    def _local_range(self, pid):
        """zinc_param_local_range: the elements [lo, hi) of the flattened parameter this rank
        keeps (its "local partition")."""
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        self._call(lib.zinc_param_local_range(self._e, pid, ctypes.byref(lo), ctypes.byref(hi)))
        return lo.value, hi.value

    def _fragment(self, pid, which):
        """This rank's fragment of zinc_param_state `which` (an id of _LOCAL), 1-D fp32 on the
        host (zinc_param_local_get; at any stage: stage 0's fragment is the whole parameter).
        Not collective."""
        lo, hi = self._local_range(pid)
        out = torch.empty(hi - lo, dtype=torch.float32)
        if hi > lo:
            self._call(lib.zinc_param_local_get(self._e, pid, which,
                                                ctypes.c_void_p(out.data_ptr())))
        return out

    def _set_fragment(self, pid, which, value):
        """Writes _fragment's values back (zinc_param_local_set): `value` holds the fragment's
        elements (any shape, dtype and device). Not collective."""
        src = value.detach().to("cpu", torch.float32).contiguous().view(-1)
        if src.numel():
            self._call(lib.zinc_param_local_set(self._e, pid, which,
                                                ctypes.c_void_p(src.data_ptr())))

    def _local(self, pid, state, what):
        """This rank's fragment, 1-D fp32 on the engine's device, of the master (state None),
        an Adam moment or the gradient (zinc_param_local_get; ZeRO stage 3 only, as
        DeepSpeed's local calls). Not collective."""
        return self._fragment(pid, self._local_id(state, what)).to(self._device)

    def _set_local(self, pid, value, state, what):
        """Writes this rank's fragment (zinc_param_local_set): `value` has its hi - lo
        elements."""
        which = self._local_id(state, what)
        lo, hi = self._local_range(pid)
        if value.numel() != hi - lo:
            raise ValueError(f"zinc: {what}: a value of {value.numel()} elements for this "
                             f"rank's fragment of {hi - lo} (elements {lo}..{hi} of the "
                             f"parameter)")
        if state == "grad":
            self._need_grad_buffer()
        self._set_fragment(pid, which, value)
        # On every rank, an empty fragment too: it also drops stage 3's groups kept for their
        # reuse, and a rank that kept them would skip gathers the others make (a hang).
        self._zinc_then_torch()

    def _local_id(self, state, what):
        if self._stage != 3:
            raise ValueError(f"zinc: {what} is defined for ZeRO stage 3 partitioned parameters "
                             f"only (as DeepSpeed's); this engine runs stage {self._stage}")
        if state is not None and state != "grad":
            self._state_id(state)       # raises for a state zinc's Adam does not keep
        return self._LOCAL[state]

    def _state_id(self, state):
        if state not in self._ADAM_STATE:
            raise ValueError(f"zinc: optimizer state {state!r}: zinc's Adam keeps "
                             f"{sorted(self._ADAM_STATE)}")
        return self._ADAM_STATE[state]

    def _zinc_values(self):
        """Every zinc parameter's full value, {param id: host tensor of the working dtype}: the
        fp32 master gathered by zinc_param_get, cast. Collective: every rank asks for the same
        parameters in the same (registration) order."""
        return {pid: self._zinc_value(pid) for _, params in self._groups for pid, _, _ in params}

    def _zinc_value(self, pid):
        """One parameter's full value (zinc_param_get: the fp32 master, cast to the working
        dtype), a host tensor of its shape. Collective. While offload_states() keeps the master
        in host memory, the working copy itself (zinc_param_get_working): the same values, so
        module_state_dict() and GatheredParameters answer then as DeepSpeed's do."""
        shape = self._shapes[pid]
        buf = torch.empty(_numel(shape), dtype=torch.float32)
        away = lib.zinc_states_offloaded(self._e)
        get = lib.zinc_param_get_working if away else lib.zinc_param_get
        self._call(get(self._e, pid, ctypes.c_void_p(buf.data_ptr())))
        return buf.view(shape).to(_TORCH_DTYPE[self._code])
