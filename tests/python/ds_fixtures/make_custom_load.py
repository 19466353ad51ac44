#!/usr/bin/env python3
"""make_custom_load.py — writes custom_load.json: DeepSpeed 0.19.8's record of each case of
tests/python/custom_load_cases.py (a checkpoint loaded with a custom_load_fn, then trained on),
which test_custom_load.py compares zinc's with, without DeepSpeed. Run by hand from a venv with
DeepSpeed 0.19.8 (never by CI), one process:

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29652 DS_ACCELERATOR=cpu \\
        /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_custom_load.py \\
        tests/python/ds_fixtures/custom_load.json

Nothing in the file is written by hand: each record is what DeepSpeed's own run gave, or the
error its load raised. At stage 0 in bf16 with load_optimizer_states=False DeepSpeed's
optimizer keeps its fp32 copies from before the load (test_ds_load_flags.py): such a case also
has a "refreshed" record, DeepSpeed's run with its copies refreshed after the load."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepspeed  # noqa: E402

import fixture_out  # noqa: E402
from custom_load_cases import CASES, run  # noqa: E402
from make_load_flags import master, refresh  # noqa: E402


def main():
    out = {}
    for name in CASES:
        with tempfile.TemporaryDirectory() as d:
            out[name] = run(deepspeed.initialize, master, name, d)
        print(name, out[name].get("raised", "ok"), flush=True)
        c = CASES[name]
        if c["stage"] == 0 and c["dtype"] != "fp32" and c["flag"] == "noopt":
            # (make_load_flags.py's "refreshed": DeepSpeed's ZeRO stages' behaviour)
            with tempfile.TemporaryDirectory() as d:
                out[name]["refreshed"] = run(deepspeed.initialize, master, name, d,
                                             after_load=refresh)
    fixture_out.write(sys.argv[1], deepspeed.__version__, out)


if __name__ == "__main__":
    main()
