"""checkpointing.py — activation checkpointing under DeepSpeed's names (deepspeed.checkpointing).

    x = zinc.checkpointing.checkpoint(block, x)

A block's activations are dropped after its forward and recomputed in backward; the gradients
are those of running the block plainly. This is torch.utils.checkpoint, non-reentrant, with the
RNG state preserved for the recomputation (DeepSpeed's CheckpointFunction restores it too): a
dropout draws the same mask twice. Non-reentrant also gives the parameters inside their
gradients when no input requires grad (the reentrant form silently gives none) and takes
keyword arguments, as DeepSpeed's `checkpoint` does.

It composes with every ZeRO stage: at stage 3 the recomputation runs the blocks' forward hooks
again, which gather and release their parameters as in forward (tests/python
test_torch_stage3.py actckpt). DeepSpeed's own activation memory options (partitioning the
saved activations across model-parallel ranks, moving them to the host, one contiguous buffer)
are not implemented: `configure` accepts them with a warning, since they only change where
activations are kept, never the math. Model parallelism (`mpu_`) is not offered.
"""
import warnings

import torch
import torch.utils.checkpoint

from .engine import ZincConfigWarning, config_dict

_configured = False

# DeepSpeed's activation_checkpointing keys (config section and configure() arguments) that
# change only where activations are kept or how the call is timed: accepted with a warning.
_MEMORY_ONLY = {"partition_activations": "partition_activations",
                "contiguous_memory_optimization": "contiguous_checkpointing",
                "cpu_checkpointing": "checkpoint_in_cpu",
                "synchronize_checkpoint_boundary": "synchronize",
                "profile": "profile"}


def checkpoint(function, *args, **kwargs):
    """deepspeed.checkpointing.checkpoint: function(*args, **kwargs) with its activations
    recomputed in backward instead of kept. Its outputs as DeepSpeed's gives them back (its
    all_outputs): a tensor as it is, a tuple or list of one element that element, of several a
    tuple (a script's `y = checkpoint(f, x); y + 1` with f returning `(y,)`)."""
    out = torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False,
                                            preserve_rng_state=True, **kwargs)
    if isinstance(out, (tuple, list)):
        return out[0] if len(out) == 1 else tuple(out)
    return out


non_reentrant_checkpoint = checkpoint


def configure(mpu_, deepspeed_config=None, partition_activations=None,
              contiguous_checkpointing=None, num_checkpoints=None, checkpoint_in_cpu=None,
              synchronize=None, profile=None):
    """deepspeed.checkpointing.configure. deepspeed_config (a path or dict) is read for its
    activation_checkpointing section; arguments given override it, as in DeepSpeed."""
    global _configured
    if mpu_ is not None:
        raise NotImplementedError("zinc.checkpointing.configure: mpu_ (model parallelism) is "
                                  "not offered; pass None")
    flags = {}
    if deepspeed_config is not None:
        section = config_dict(deepspeed_config).get("activation_checkpointing", {}) or {}
        for key, arg in _MEMORY_ONLY.items():
            if key in section:
                flags[arg] = section[key]
    given = {"partition_activations": partition_activations,
             "contiguous_checkpointing": contiguous_checkpointing,
             "checkpoint_in_cpu": checkpoint_in_cpu, "synchronize": synchronize,
             "profile": profile}
    flags.update({k: v for k, v in given.items() if v is not None})
    for name, value in flags.items():
        if value:
            warnings.warn(f"zinc.checkpointing: {name}=True is not implemented and has no "
                          "effect (activations are kept whole on the device; memory and "
                          "timing only, the gradients are the same)", ZincConfigWarning,
                          stacklevel=2)
    del num_checkpoints     # sizes DeepSpeed's contiguous buffer only
    _configured = True


def partition_activations_in_checkpoint(partition_activation):
    """DeepSpeed's switch of partition_activations: memory only, not implemented (a warning
    when True, as configure's)."""
    if partition_activation:
        warnings.warn("zinc.checkpointing: partition_activations=True is not implemented and "
                      "has no effect (activations are kept whole on the device; memory only, "
                      "the gradients are the same)", ZincConfigWarning, stacklevel=2)


def set_num_layers(nlayers):
    """DeepSpeed sizes its contiguous activation buffer by it; zinc keeps none."""
    del nlayers


def is_configured():
    """True once configure() was called (DeepSpeed's meaning)."""
    return _configured


def reset():
    """DeepSpeed frees its contiguous activation buffers here; zinc keeps none."""


def _not_offered(name):
    def call(*_, **__):
        raise NotImplementedError(f"zinc.checkpointing.{name}: model-parallel RNG tracking is "
                                  "not offered (zinc has no model parallelism)")
    call.__name__ = name
    return call


get_cuda_rng_tracker = _not_offered("get_cuda_rng_tracker")
model_parallel_cuda_manual_seed = _not_offered("model_parallel_cuda_manual_seed")
model_parallel_reconfigure_tp_seed = _not_offered("model_parallel_reconfigure_tp_seed")
