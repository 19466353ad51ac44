"""zinc.utils — DeepSpeed's deepspeed.utils names that training scripts import:
- safe_get/set_full_fp32_param, safe_get/set_full_optimizer_state, safe_get/set_full_grad,
  safe_update_full_grad_vectorized and the local (this rank's fragment, ZeRO stage 3) forms
  (tensor_fragment.py);
- `from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint` (a zinc
  checkpoint consolidated into a torch state_dict, no engine needed). zero_to_fp32 is not
  imported here, so that `python -m zinc.utils.zero_to_fp32` runs it once;
- logger, log_dist (logging.py), RepeatingLoader (zinc.dataloader's), and the ZeRO-3 leaf
  modules: set_z3_leaf_modules and its companions (z3_leaf.py, which says what zinc does)."""
from ..dataloader import RepeatingLoader
from .logging import log_dist, logger, set_log_level_from_string
from .tensor_fragment import (safe_get_full_fp32_param, safe_get_full_grad,
                              safe_get_full_optimizer_state, safe_get_local_fp32_param,
                              safe_get_local_grad, safe_get_local_optimizer_state,
                              safe_set_full_fp32_param, safe_set_full_grad,
                              safe_set_full_optimizer_state, safe_set_local_fp32_param,
                              safe_set_local_grad, safe_set_local_optimizer_state,
                              safe_update_full_grad_vectorized)
from .z3_leaf import (get_z3_leaf_modules, set_z3_leaf_module, set_z3_leaf_modules,
                      set_z3_leaf_modules_by_name, set_z3_leaf_modules_by_suffix,
                      unset_z3_leaf_modules, z3_leaf_module)

__all__ = ["safe_get_full_fp32_param", "safe_set_full_fp32_param", "safe_get_full_grad",
           "safe_set_full_grad", "safe_get_local_grad", "safe_set_local_grad",
           "safe_get_full_optimizer_state", "safe_set_full_optimizer_state",
           "safe_get_local_optimizer_state", "safe_set_local_optimizer_state",
           "safe_get_local_fp32_param", "safe_set_local_fp32_param",
           "safe_update_full_grad_vectorized", "logger", "log_dist", "set_log_level_from_string",
           "RepeatingLoader", "set_z3_leaf_modules", "unset_z3_leaf_modules",
           "get_z3_leaf_modules", "set_z3_leaf_module", "z3_leaf_module",
           "set_z3_leaf_modules_by_name", "set_z3_leaf_modules_by_suffix"]
