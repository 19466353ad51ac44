"""zinc.utils — DeepSpeed's deepspeed.utils modules that scripts import:
`from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint` (a zinc
checkpoint consolidated into a torch state_dict, no engine needed). Not imported here, so that
`python -m zinc.utils.zero_to_fp32` runs it once."""
