"""zinc.utils — DeepSpeed's deepspeed.utils names that training scripts import:
- safe_get/set_full_fp32_param, safe_get/set_full_optimizer_state, safe_get/set_full_grad,
  safe_update_full_grad_vectorized and the local (this rank's fragment, ZeRO stage 3) forms
  (tensor_fragment.py);
- `from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint` (a zinc
  checkpoint consolidated into a torch state_dict, no engine needed). zero_to_fp32 is not
  imported here, so that `python -m zinc.utils.zero_to_fp32` runs it once."""
from .tensor_fragment import (safe_get_full_fp32_param, safe_get_full_grad,
                              safe_get_full_optimizer_state, safe_get_local_fp32_param,
                              safe_get_local_grad, safe_get_local_optimizer_state,
                              safe_set_full_fp32_param, safe_set_full_grad,
                              safe_set_full_optimizer_state, safe_set_local_fp32_param,
                              safe_set_local_grad, safe_set_local_optimizer_state,
                              safe_update_full_grad_vectorized)

__all__ = ["safe_get_full_fp32_param", "safe_set_full_fp32_param", "safe_get_full_grad",
           "safe_set_full_grad", "safe_get_local_grad", "safe_set_local_grad",
           "safe_get_full_optimizer_state", "safe_set_full_optimizer_state",
           "safe_get_local_optimizer_state", "safe_set_local_optimizer_state",
           "safe_get_local_fp32_param", "safe_set_local_fp32_param",
           "safe_update_full_grad_vectorized"]
