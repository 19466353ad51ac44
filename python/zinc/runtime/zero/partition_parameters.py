"""zinc.runtime.zero.partition_parameters — DeepSpeed's module of that name (0.19.8), for its
names scripts import: ZeroParamStatus, and zinc.zero's GatheredParameters and Init.

ZeroParamStatus is DeepSpeed's enumeration with its values (AVAILABLE 1, NOT_AVAILABLE 2,
INFLIGHT 3), so code that names its members imports and compares. zinc's parameters carry no
`ds_status` attribute: at stage 3 a parameter is available exactly while its module's forward
or backward runs or inside zinc.zero.GatheredParameters (`param.numel() > 0` then), and zinc
never leaves one in flight between Python calls."""
from enum import Enum

from ...zero import GatheredParameters, Init  # noqa: F401


class ZeroParamStatus(Enum):
    # fully present on every process
    AVAILABLE = 1
    # partitioned: this process holds only its piece
    NOT_AVAILABLE = 2
    # being gathered
    INFLIGHT = 3


__all__ = ["ZeroParamStatus", "GatheredParameters", "Init"]
