"""zinc.runtime.zero.offload_config — DeepSpeed's deepspeed.runtime.zero.offload_config names a
script passes to engine.offload_states(): OffloadDeviceEnum and OffloadStateTypeEnum, with
DeepSpeed 0.19.8's members and values (str enums, so "cpu" and OffloadDeviceEnum.cpu are one).
They live in zinc._states_away, beside the methods that take them."""
from ..._states_away import OffloadDeviceEnum, OffloadStateTypeEnum

__all__ = ["OffloadDeviceEnum", "OffloadStateTypeEnum"]
