"""zinc.runtime.engine — DeepSpeed's deepspeed.runtime.engine (0.19.8) for the name code outside
a training script looks the engine up by: DeepSpeedEngine, which is zinc's Engine. Hugging Face's
accelerate asks `isinstance(model, DeepSpeedEngine)` to unwrap a model it prepared."""
from ..engine import Engine as DeepSpeedEngine  # noqa: F401

__all__ = ["DeepSpeedEngine"]
