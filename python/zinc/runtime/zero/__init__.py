"""zinc.runtime.zero — DeepSpeed's deepspeed.runtime.zero path; see partition_parameters."""
from . import offload_config, partition_parameters
from .partition_parameters import GatheredParameters, Init, ZeroParamStatus

__all__ = ["offload_config", "partition_parameters", "GatheredParameters", "Init",
           "ZeroParamStatus"]
