"""zinc — train PyTorch models with zinc's ZeRO engine and a DeepSpeed config.

    import zinc
    engine, optimizer, _, lr_scheduler = zinc.initialize(model=model,
                                                         model_parameters=model.parameters(),
                                                         config="ds_config.json")
    for batch in data:
        loss = loss_fn(engine(batch))
        engine.backward(loss)
        engine.step()

The shape is DeepSpeed's (`deepspeed.initialize`); the engine is zinc's C library (libzinc), which
does the sharding, reduction, loss scaling, clipping, Adam/AdamW and checkpoints. This package
only hands it the model's tensors. docs/python.md says what is offered and what is not yet.
"""
from . import checkpointing, zero  # noqa: F401
from .dataloader import RepeatingLoader  # noqa: F401
from ._lib import ZincError  # noqa: F401
from . import _lib
from .engine import (Engine, ZincConfigWarning, add_config_arguments,  # noqa: F401
                     init_distributed, initialize, local_rank, register_external_parameter,
                     world_size)
# DeepSpeed's other module paths, for scripts (docs/python.md, "DeepSpeed's other names").
from . import accelerator, comm, ops, runtime, utils  # noqa: F401
from .accelerator import get_accelerator  # noqa: F401
from .plan import plan  # noqa: F401
from . import checkpoint  # noqa: F401,E402  (DeepSpeed's deepspeed.checkpoint)
# DeepSpeed's package names them at its top too (`from deepspeed import log_dist`)
from .utils.logging import log_dist, logger  # noqa: F401
DeepSpeedEngine = Engine   # DeepSpeed's name for the engine class (deepspeed.DeepSpeedEngine)
# zinc's version: the library's (include/zinc.h, the one source of it; the package is built
# with it). Under zinc.as_deepspeed `deepspeed` is this module, so `deepspeed.__version__` says
# zinc's too; the `deepspeed` distribution's metadata there says the DeepSpeed release zinc
# follows (as_deepspeed.DEEPSPEED_VERSION), which libraries check.
__version__ = _lib.lib.zinc_version_string().decode()

__all__ = ["initialize", "init_distributed", "world_size", "local_rank", "Engine", "ZincError",
           "ZincConfigWarning", "register_external_parameter", "checkpointing",
           "add_config_arguments", "RepeatingLoader", "zero", "accelerator", "comm", "ops",
           "runtime", "utils", "get_accelerator", "plan", "checkpoint", "DeepSpeedEngine",
           "log_dist", "logger", "__version__"]
