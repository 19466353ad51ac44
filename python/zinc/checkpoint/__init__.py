"""zinc.checkpoint — DeepSpeed's deepspeed.checkpoint package (0.19.8), for the one name scripts
and Hugging Face's accelerate import from it: utils.clone_tensors_for_torch_save. (DeepSpeed's
activation checkpointing, deepspeed.checkpointing, is zinc.checkpointing.)"""
from . import utils

__all__ = ["utils"]
