"""_states_away.py — DeepSpeed's engine.offload_states() and reload_states(): the optimizer
state moved to host memory between steps (a reinforcement-learning loop frees the device for
its generation phase this way) and brought back before the next step, through zinc_states_offload
and zinc_states_reload (engine/states_away.c).

What moves: DeepSpeed's optim_states (Adam's moments) and hp_params (the fp32 master). What
stays on the device, with a warning the first time it is asked for: lp_params, lp_grads and
contiguous_grad_buffer, the working copy, gradient sums and buckets, which torch's parameters
and .grads view (stages 0-2) or the gathers read. The forward and backward run while the state
is away; step(), checkpoints and the state accessors raise until reload_states().
"""
import warnings
from enum import Enum

from ._lib import MEM_CATEGORIES, lib


# DeepSpeed's deepspeed.runtime.zero.offload_config names (zinc.runtime.zero.offload_config
# re-exports them; defined here, where they are used, since zinc.runtime imports the engine)
class OffloadDeviceEnum(str, Enum):
    """Where offloaded state goes (DeepSpeed 0.19.8's members and values)."""
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class OffloadStateTypeEnum(str, Enum):
    """The engine's buffers engine.offload_states() names (DeepSpeed 0.19.8's)."""
    optim_states = "optim_states"
    hp_params = "hp_params"
    lp_params = "lp_params"
    lp_grads = "lp_grads"
    contiguous_grad_buffer = "contiguous_grad_buffer"


def _bits(*names):
    """zinc_states_offload's mask of zinc_mem_categories `names`."""
    return sum(1 << MEM_CATEGORIES.index(n) for n in names)


_MOVES = {OffloadStateTypeEnum.hp_params: _bits("master"),
          OffloadStateTypeEnum.optim_states: _bits("adam_m", "adam_v")}
_STAYS = (OffloadStateTypeEnum.lp_params, OffloadStateTypeEnum.lp_grads,
          OffloadStateTypeEnum.contiguous_grad_buffer)


def _state_type(x):
    try:
        return OffloadStateTypeEnum(x)
    except ValueError:
        raise ValueError(f"zinc: offload_states(include=...): {x!r} is not one of "
                         f"{[t.value for t in OffloadStateTypeEnum]}") from None


class _StatesAwayMixin:
    """The Engine's offload_states / reload_states."""

    def offload_states(self, include=None, device=OffloadDeviceEnum.cpu, pin_memory=True,
                       non_blocking=False):
        """DeepSpeed's: moves `include` (default: every OffloadStateTypeEnum) to `device`
        ("cpu"). zinc moves optim_states and hp_params (page-locked with pin_memory) and keeps
        the others on the device, saying so once. non_blocking is accepted: the copies are done
        when this returns. Refused, as by DeepSpeed 0.19.8: device "nvme", and a config with
        offload_param (device "none" does nothing, with a warning)."""
        self._alive()
        self._no_context("offload_states()")
        if self._stage == 3 and self.zero_offload_param() is not None:
            raise ValueError("zinc: offload_states(): moving states across devices is not "
                             "supported for offloaded parameters (offload_param), as in "
                             "DeepSpeed")
        device = OffloadDeviceEnum(device)
        if device == OffloadDeviceEnum.none:
            warnings.warn("zinc: offload_states(device='none'): no device given; nothing moves",
                          stacklevel=2)
            return
        if device == OffloadDeviceEnum.nvme:
            raise ValueError("zinc: offload_states(device='nvme'): NVMe offload is not supported "
                             "for offloading states, as in DeepSpeed")
        wanted = (list(OffloadStateTypeEnum) if include is None
                  else [_state_type(x) for x in include])
        stays = [t.value for t in _STAYS if t in wanted]
        if stays and not getattr(self, "_said_states_stay", False):
            self._said_states_stay = True
            warnings.warn(f"zinc: offload_states() keeps {', '.join(stays)} on the device: "
                          "torch's parameters and gradients view that memory (it moves "
                          "optim_states and hp_params, the optimizer's state)", stacklevel=2)
        mask = 0
        for t in wanted:
            mask |= _MOVES.get(t, 0)
        if mask:
            self._call(lib.zinc_states_offload(self._e, mask, int(bool(pin_memory)), None))

    def reload_states(self, non_blocking=False):
        """DeepSpeed's: what offload_states() moved, back on the device (done when this
        returns)."""
        self._alive()
        self._call(lib.zinc_states_reload(self._e))

    def _states_home(self, what):
        """RuntimeError naming `what` while offload_states() keeps the optimizer state away."""
        if lib.zinc_states_offloaded(self._e):
            raise RuntimeError(f"zinc: {what} while the optimizer state is in host memory "
                               "(engine.offload_states()): call engine.reload_states() first")
