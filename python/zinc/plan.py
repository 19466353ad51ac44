"""plan.py — `zinc.plan(...)`: what `zinc plan` predicts for a run (step time, tokens/s, MFU,
memory per rank with activations, scaling; or with recommend=True the fastest configuration that
fits), as a dict, from a script (issue 41; docs/plan.md has every formula).

    zinc.plan(params=7e9, layers=32, hidden=4096, seq=4096, gpus=64, gpu="h100", stage=3)
    zinc.plan(hf_config="config.json", gpus=8, gpu="h100", recommend=True, global_batch=256)

The model is the CLI's (tools/plan_model.c), not the engine library's, so this runs
`zinc plan ... --json`: each keyword is a flag with '_' for '-' (`micro_batch=8` is
`--micro-batch 8`), True turns a switch on (`checkpointing=True`). The CLI is looked up as
$ZINC_CLI, beside the library `import zinc` loaded (a build tree: build/zinc; an install:
<prefix>/bin/zinc beside <prefix>/lib), then on PATH. Bad input raises ValueError with the CLI's
message, which names the flag.
"""
import json
import os
import shutil
import subprocess

from ._lib import lib


def _cli():
    cands = [os.environ.get("ZINC_CLI")]
    libdir = os.path.dirname(os.path.abspath(getattr(lib, "_name", "") or "."))
    cands += [os.path.join(libdir, "zinc"), os.path.join(libdir, "..", "bin", "zinc"),
              shutil.which("zinc")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("zinc.plan: the zinc CLI was not found (set ZINC_CLI, or build it: "
                            "make)")


def plan(**options):
    """`zinc plan` for these options (keywords as the CLI's flags), its JSON as a dict. With
    recommend=True a run that nothing fits still returns its candidates ("recommended": -1)."""
    # --json first: a value option given True ends the line, and the CLI says it needs a value
    # (after it, --json was taken for that value: "got the option '--json'")
    args = [_cli(), "plan", "--json"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        else:
            args += [flag, str(value)]
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    nothing_fits = out.returncode == 1 and options.get("recommend")
    if out.returncode != 0 and not nothing_fits:
        # The errors, without the config's warnings that may come first (the first line was
        # then a warning, and the error was lost).
        msg = [line for line in out.stderr.strip().splitlines() if "config warning:" not in line]
        raise ValueError("; ".join(msg) if msg else f"zinc plan failed (exit {out.returncode})")
    return json.loads(out.stdout)
