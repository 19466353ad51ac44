#!/usr/bin/env python3
"""make_load_flags.py — writes load_flags.json: DeepSpeed 0.19.8's record of each case of
tests/python/load_flags_cases.py (a checkpoint loaded with load_optimizer_states and/or
load_lr_scheduler_states False, then trained on), which test_ds_load_flags.py compares zinc's
with, without DeepSpeed. Run by hand from a venv with DeepSpeed 0.19.8 (never by CI), one
process:

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29651 DS_ACCELERATOR=cpu \\
        /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_load_flags.py \\
        tests/python/ds_fixtures/load_flags.json

Nothing in the file is written by hand: each record is what DeepSpeed's own run gave.
The cases run in one process: at ZeRO stage 3 DeepSpeed's load_optimizer_states=False load
takes its weights from a live engine's partitions rather than the checkpoint where two engines
share a process (a reviewer's finding, 2026-11-30); it gives the checkpoint's here only because
run A trains no more after its save. Keep it that way, or give each stage-3 case a process.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import deepspeed  # noqa: E402

import fixture_out  # noqa: E402
import torch  # noqa: E402
from load_flags_cases import AT5, CASES, FLAGS, SAVED, run  # noqa: E402
from make_stage0_first_step import master as master_16bit  # noqa: E402


def master(engine, param):
    """The fp32 master; at stage 0 in fp32 DeepSpeed's optimizer trains the parameter itself."""
    got = master_16bit(engine, param)
    return param.detach() if got is None else got


def refresh(engine):
    """What zinc does where DeepSpeed's stage-0 16-bit optimizer keeps its fp32 copies from
    before a load_optimizer_states=False load (its next step writes them over the loaded
    weights): the copies refreshed from the loaded 16-bit weights, as its ZeRO stages do."""
    engine.optimizer.refresh_fp32_params()


def main():
    out = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for name, c in CASES.items():
        if "source" in c:
            continue
        with tempfile.TemporaryDirectory() as d:
            out[name] = run(deepspeed.initialize, master, name, d)
            # run A's DeepSpeed checkpoint, for zinc's import of it with the same flags
            keep = os.path.join(here, f"lf_{c['dtype']}_s{c['stage']}")
            if name in SAVED and not os.path.isdir(keep):
                shutil.copytree(d, keep, ignore=shutil.ignore_patterns("zero_to_*.py"))
        if (c["stage"] == 0 and c["dtype"] != "fp32" and c["flag"] is not None
                and FLAGS[c["flag"]].get("load_optimizer_states") is False):
            with tempfile.TemporaryDirectory() as d:
                out[name]["refreshed"] = run(deepspeed.initialize, master, name, d,
                                             after_load=refresh)
    for name, c in CASES.items():
        if "source" not in c:
            continue
        folder = os.path.join(here, c["source"])
        if not os.path.isdir(folder):
            shutil.copytree(os.path.join(here, f"lf_{c['dtype']}_s{c['stage']}"), folder)
            states = os.path.join(folder, "a", "mp_rank_00_model_states.pt")
            sd = torch.load(states, weights_only=False)
            sd["lr_scheduler"]["last_batch_iteration"] = AT5
            torch.save(sd, states)
        out[name] = run(deepspeed.initialize, master, name, folder, saved=True)
    fixture_out.write(sys.argv[1], deepspeed.__version__, out)


if __name__ == "__main__":
    main()
