"""zinc.runtime — the part of DeepSpeed's deepspeed.runtime tree that scripts import names from:
zinc.runtime.zero.partition_parameters (ZeroParamStatus, and zinc.zero's GatheredParameters and
Init under DeepSpeed's module path)."""
