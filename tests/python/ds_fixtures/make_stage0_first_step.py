#!/usr/bin/env python3
"""make_stage0_first_step.py — writes stage0_first_step.json: DeepSpeed 0.19.8's losses and fp32
masters for each case of tests/python/stage0_first_step_cases.py, which
test_ds_stage0_first_step.py compares zinc's with, without DeepSpeed. Run by hand from a venv
with DeepSpeed 0.19.8 (never by CI), one process:

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29650 DS_ACCELERATOR=cpu \\
        /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_stage0_first_step.py \\
        tests/python/ds_fixtures/stage0_first_step.json

Nothing in the file is written by hand: each record is what DeepSpeed's own run gave.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepspeed  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402
from deepspeed.utils import safe_get_full_fp32_param  # noqa: E402

import fixture_out  # noqa: E402
from stage0_first_step_cases import CASES, run  # noqa: E402


def master(engine, param):
    """The fp32 master: safe_get_full_fp32_param, which has none for the stage-0 fp16/bf16
    optimizers; theirs are the fp32 copies beside each group (FP16_UnfusedOptimizer's
    fp32_groups, FP16_Optimizer's flat fp32_groups_flat in its group's order)."""
    opt = engine.optimizer
    if hasattr(opt, "fp32_groups") and hasattr(opt, "fp16_groups"):
        for g16, g32 in zip(opt.fp16_groups, opt.fp32_groups):
            for p16, p32 in zip(g16, g32):
                if p16 is param:
                    return p32.detach()
    if hasattr(opt, "fp32_groups_flat"):
        for g16, flat in zip(opt.fp16_groups, opt.fp32_groups_flat):
            at = 0
            for p16 in g16:
                if p16 is param:
                    return flat.detach()[at:at + p16.numel()].view(p16.shape)
                at += p16.numel()
    return safe_get_full_fp32_param(param)


def main():
    # its CPU accelerator refuses fp16 where oneDNN lacks fp16 kernels; torch's train anyway
    type(get_accelerator()).is_fp16_supported = lambda self: True
    fixture_out.write(sys.argv[1], deepspeed.__version__,
                      {name: run(deepspeed.initialize, master, name) for name in CASES})


if __name__ == "__main__":
    main()
