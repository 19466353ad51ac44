"""zinc.runtime.zero.partition_parameters — DeepSpeed's module of that name (0.19.8), for its
names scripts import: ZeroParamStatus, and zinc.zero's GatheredParameters and Init.

ZeroParamStatus is DeepSpeed's enumeration with its values (AVAILABLE 1, NOT_AVAILABLE 2,
INFLIGHT 3), so code that names its members imports and compares. zinc's parameters carry no
`ds_status` attribute: at stage 3 a parameter is available exactly while its module's forward
or backward runs or inside zinc.zero.GatheredParameters (`param.numel() > 0` then), and zinc
never leaves one in flight between Python calls."""
from enum import Enum

import torch

from ...accelerator import get_accelerator  # noqa: F401  (as DeepSpeed's module has it)
from ...zero import GatheredParameters, Init  # noqa: F401


class ZeroParamStatus(Enum):
    # fully present on every process
    AVAILABLE = 1
    # partitioned: this process holds only its piece
    NOT_AVAILABLE = 2
    # being gathered
    INFLIGHT = 3


# DeepSpeed's Init wraps torch's tensor constructors (torch.arange among them, kept here as
# _orig_torch_arange) with zero_wrapper_for_fp_tensor_constructor, to make them build in the
# working dtype on the device; Hugging Face's transformers replaces that function around
# zero.Init so that arange keeps its dtype. zinc's Init wraps no constructor (a tensor is made as
# the code asks), so the function gives back the constructor unchanged: there to be replaced.
_orig_torch_arange = torch.arange


def zero_wrapper_for_fp_tensor_constructor(fn, target_fp_dtype=None, target_device=None):
    """`fn` itself: zinc's Init changes no constructor's dtype or device."""
    return fn


__all__ = ["ZeroParamStatus", "GatheredParameters", "Init",
           "zero_wrapper_for_fp_tensor_constructor", "get_accelerator"]
