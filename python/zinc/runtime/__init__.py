"""zinc.runtime — the part of DeepSpeed's deepspeed.runtime tree that scripts and the libraries
around them import names from: zinc.runtime.zero.partition_parameters (ZeroParamStatus, and
zinc.zero's GatheredParameters and Init under DeepSpeed's module path), zinc.runtime.engine
(DeepSpeedEngine) and zinc.runtime.lr_schedules (the schedule names and DeepSpeed's scheduler
classes)."""
from . import engine, lr_schedules, zero

__all__ = ["engine", "lr_schedules", "zero"]
