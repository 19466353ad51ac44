#!/usr/bin/env python3
"""ds_ckpt_roundtrip.py — DeepSpeed saves, then zinc continues == DeepSpeed continues, live
against DeepSpeed 0.19.8 (run by hand from a venv with DeepSpeed; CI has none and checks the
same on the committed fixtures, tests/python/test_ds_import.py).

    DS_ACCELERATOR=cpu ZINC_LIB=build/libzinc.so /work/main/bench/.venv/bin/python \\
        bench/ds_ckpt_roundtrip.py [--out DIR] [--ranks 1,2] [NAME ...]

For each fixture NAME of tests/python/ds_fixtures/make_fixtures.py (default: all): DeepSpeed
trains the tiny model on 2 CPU ranks (gloo) for 3 steps, saves, trains 3 more and records its
fp32 master weights (fresh, into DIR, not the committed fixtures); then zinc, in this venv's
torch, loads DeepSpeed's folder as it is at another ZeRO stage and each zinc world size of
--ranks (mpirun for more than 1) and trains the same 3 steps (test_ds_import.py load). Prints
one line per run: the largest difference from DeepSpeed's weights relative to each tensor's
largest value, and whether every check of the test passed. Exits 1 when one did not.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests", "python")
sys.path.insert(0, os.path.join(TESTS, "ds_fixtures"))
import make_fixtures  # noqa: E402

# zinc's stage for each DeepSpeed stage: another one, so the load reshards.
ZINC_STAGE = {0: 3, 1: 2, 2: 3, 3: 1}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None, help="where DeepSpeed's checkpoints go (default: a "
                                               "temporary folder)")
    p.add_argument("--ranks", default="1,2", help="zinc world sizes (comma-separated)")
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="ds_roundtrip_")
    names = a.names or list(make_fixtures.FIXTURES) + list(make_fixtures.UNIVERSAL)
    natives = [n for n in names if n in make_fixtures.FIXTURES]
    for n in names:         # a universal one needs its source
        if n in make_fixtures.UNIVERSAL and make_fixtures.UNIVERSAL[n] not in natives:
            natives.append(make_fixtures.UNIVERSAL[n])
    make_fixtures.main([out] + natives + [n for n in names if n in make_fixtures.UNIVERSAL])
    env = dict(os.environ, ZINC_DS_FIXTURES=out,
               ZINC_LIB=os.environ.get("ZINC_LIB", os.path.join(ROOT, "build", "libzinc.so")))
    bad = 0
    print(f"{'fixture':18} {'zinc':14} {'worst rel. diff':>16}  checks")
    for n in names:
        src = make_fixtures.UNIVERSAL.get(n, n)
        stage = ZINC_STAGE[make_fixtures.FIXTURES[src][0]]
        for ranks in (int(r) for r in a.ranks.split(",")):
            cmd = [sys.executable, os.path.join(TESTS, "test_ds_import.py"), "load", n,
                   str(stage)]
            if ranks > 1:
                cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                       str(ranks)] + cmd
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=TESTS)
            text = r.stdout + r.stderr
            m = re.search(r"worst ([0-9.e+-]+) of", text)
            worst = m.group(1) if m else ("n/a (Adam/schedule counts differ)"
                                          if "cannot match" in text else "?")
            ok = r.returncode == 0 and "FAIL" not in text
            bad += not ok
            print(f"{n:18} stage {stage}, {ranks} rk {worst:>16}  "
                  f"{'all passed' if ok else 'FAILED'}", flush=True)
            if not ok:
                print(text[-3000:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
