#!/usr/bin/env python3
"""make_lr_schedules.py — writes lr_schedules.json: what DeepSpeed 0.19.8's scheduler classes
(deepspeed.runtime.lr_schedules) do in each case of tests/python/lr_sched_cases.py, which
test_lr_schedules.py compares zinc's classes with, without DeepSpeed. Run by hand from a venv
with DeepSpeed 0.19.8 (never by CI):

    DS_ACCELERATOR=cpu /work/main/bench/.venv/bin/python \
        tests/python/ds_fixtures/make_lr_schedules.py tests/python/ds_fixtures/lr_schedules.json

Nothing in the file is written by hand: each record is DeepSpeed's own objects, read back.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepspeed  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402

from lr_sched_cases import CASES, run_case  # noqa: E402


def main():
    out = {"deepspeed": deepspeed.__version__,
           "cases": {name: run_case(lr_schedules, name) for name in CASES}}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {sys.argv[1]}: {len(CASES)} cases, DeepSpeed {deepspeed.__version__}")


if __name__ == "__main__":
    main()
