#!/usr/bin/env python3
"""make_zero_to_fp32.py — writes zero_to_fp32.json: what DeepSpeed 0.19.8's own
deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint gives for the DeepSpeed
fixtures it reads (ZeRO stages 1-3; not stage 0 or universal checkpoints), with and without
exclude_frozen_parameters: each key in order, its dtype, shape and values. test_ds_zero_to_fp32.py
compares zinc.utils.zero_to_fp32's, without DeepSpeed. Run by hand from a venv with DeepSpeed
0.19.8 (never by CI):

    /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_zero_to_fp32.py \\
        tests/python/ds_fixtures/zero_to_fp32.json

Nothing in the file is written by hand: each record is what DeepSpeed's function returned.
"""
import os
import sys

import deepspeed
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_out  # noqa: E402

FOLDERS = ("s1_fp32", "s1_bf16", "s2_bf16", "s2_fp16", "s3_bf16", "s3_fp32_frozen")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in FOLDERS:
        for exclude in (False, True):
            sd = get_fp32_state_dict_from_zero_checkpoint(os.path.join(here, name, "ckpt"),
                                                          exclude_frozen_parameters=exclude)
            out[f"{name}{'_exclude' if exclude else ''}"] = [
                [k, str(v.dtype).replace("torch.", ""), list(v.shape),
                 v.float().flatten().tolist()] for k, v in sd.items()]
    fixture_out.write(sys.argv[1], deepspeed.__version__, out)


if __name__ == "__main__":
    main()
