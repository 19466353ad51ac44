"""test_plan.py — zinc.plan(...), `zinc plan` from a script (issue 41): the dict it returns is the
CLI's --json for the same flags (the step, the memory per rank, the scaling), switches and
recommend work, and bad input raises ValueError naming the flag.

    python test_plan.py          (ZINC_CLI: the zinc binary; else beside the library)
"""
import json
import os
import subprocess
import sys
import tempfile

from _common import check, check_raises, finish, zinc


def main():
    kw = dict(params=7e9, layers=32, hidden=4096, seq=4096, gpus=64, gpu="h100", stage=3,
              micro_batch=2, checkpointing=True)
    got = zinc.plan(**kw)
    cli = zinc.plan.__globals__["_cli"]()
    want = json.loads(subprocess.run(
        [cli, "plan", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--seq", "4096",
         "--gpus", "64", "--gpu", "h100", "--stage", "3", "--micro-batch", "2",
         "--checkpointing", "--json"], stdout=subprocess.PIPE, check=True, text=True).stdout)
    check("zinc.plan gives the CLI's JSON for the same flags", got == want,
          f"{got.get('time_s')} vs {want.get('time_s')}")
    check("it has a step, tokens/s, memory and the scaling table",
          got["time_s"]["step"] > 0 and got["tokens_per_s"] > 0 and got["checkpointing"] is True
          and got["memory"]["total_bytes_per_rank"] > 0 and len(got["scaling"]) == 6,
          str(sorted(got)))
    rec = zinc.plan(params=1.3e9, layers=24, hidden=2048, seq=2048, gpus=8, gpu="a100-80",
                    recommend=True, global_batch=64)
    best = rec["candidates"][rec["recommended"]] if rec["recommended"] >= 0 else None
    check("recommend=True returns the candidates and a choice that fits",
          best is not None and best["fits"] and best["micro_batch"] * best["accumulation"] * 8
          == 64, str(best))
    check_raises("an unknown GPU raises ValueError naming --gpu",
                 lambda: zinc.plan(params=7e9, seq=4096, gpus=8, gpu="v100", stage=3),
                 ValueError, "--gpu 'v100'")
    # a config with a warning before its error: the ValueError carries the error (it carried
    # the warning, the first line the CLI printed)
    with tempfile.TemporaryDirectory() as d:     # (mkdtemp's directory stayed in $TMPDIR)
        cfg = os.path.join(d, "ds.json")
        with open(cfg, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 7}},
                      f)
        check_raises("a rejected --config raises ValueError naming the bad key, not a warning",
                     lambda: zinc.plan(params=7e9, seq=4096, gpus=8, gpu="h100", config=cfg),
                     ValueError, "zero_optimization.stage")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
