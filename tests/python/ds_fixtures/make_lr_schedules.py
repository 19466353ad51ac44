#!/usr/bin/env python3
"""make_lr_schedules.py — writes lr_schedules.json: what DeepSpeed 0.19.8's scheduler classes
(deepspeed.runtime.lr_schedules) do in each case of tests/python/lr_sched_cases.py, which
test_lr_schedules.py compares zinc's classes with, without DeepSpeed. Run by hand from a venv
with DeepSpeed 0.19.8 (never by CI):

    DS_ACCELERATOR=cpu /work/main/bench/.venv/bin/python \
        tests/python/ds_fixtures/make_lr_schedules.py tests/python/ds_fixtures/lr_schedules.json

Nothing in the file is written by hand: each record is DeepSpeed's own objects, read back.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepspeed  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402

import fixture_out  # noqa: E402
from lr_sched_cases import CASES, run_case  # noqa: E402


def main():
    fixture_out.write(sys.argv[1], deepspeed.__version__,
                      {name: run_case(lr_schedules, name) for name in CASES})


if __name__ == "__main__":
    main()
