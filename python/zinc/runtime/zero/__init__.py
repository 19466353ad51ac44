"""zinc.runtime.zero — DeepSpeed's deepspeed.runtime.zero path; see partition_parameters."""
from . import partition_parameters
from .partition_parameters import GatheredParameters, Init, ZeroParamStatus

__all__ = ["partition_parameters", "GatheredParameters", "Init", "ZeroParamStatus"]
