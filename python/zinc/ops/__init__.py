"""zinc.ops — DeepSpeed's deepspeed.ops names that training scripts import: the Adam optimizer
classes of zinc.ops.adam. zinc has no op builder: every kernel is in libzinc."""
from . import adam  # noqa: F401

__all__ = ["adam"]
