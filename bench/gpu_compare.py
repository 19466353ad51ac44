#!/usr/bin/env python3
"""gpu_compare.py — compares the metrics files bench/gpu_session.sh's train phase writes.

  gpu_compare.py curves DIR [--report]   every cuda-*.jsonl against the cpu-*.jsonl of the same
                                         stage, dtype and ranks: the loss at each printed step
  gpu_compare.py resume DIR              resumed runs against the uninterrupted ones

Prints a table and exits 1 when a run is missing, not finite, or off by more than the bound
(absolute nats/token on the loss): 1e-2 for bf16 runs, 2e-3 for fp16, the bounds of the
train_cuda_curves test at lr 3e-3 (docs/cuda.md says where they come from); --tol sets one bound
for all. --report prints the differences without a verdict, for settings the bounds do not
cover (at the configs' lr 1e-2 the curves part by up to 0.13 nats after a loss spike).
"""
import argparse
import glob
import json
import math
import os
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                rows[r["step"]] = r
    return rows


def loss(r):
    v = r.get("loss")
    return float("nan") if v is None else float(v)


# The bounds of docs/cuda.md (tests/gpu/test_train_cuda.c, curves) by the dtype in a run's name.
BOUNDS = {"bf16": 1e-2, "fp16": 2e-3}


def bound(name, tol):
    """--tol when given, else the bound of the dtype named in `name` (z2-bf16-r2, ...)."""
    if tol is not None:
        return tol
    for dt, b in BOUNDS.items():
        if f"-{dt}-" in f"-{name}-":
            return b
    raise SystemExit(f"gpu_compare: no bound for '{name}' (not bf16 or fp16): pass --tol")


def compare(a, b, tol, label, exact=False):
    """The steps both files print; returns (ok, max |Δloss|, text). tol None: no verdict."""
    steps = sorted(set(a) & set(b))
    if not steps:
        return False, float("nan"), f"{label}: no common steps"
    worst = 0.0
    for s in steps:
        la, lb = loss(a[s]), loss(b[s])
        if not (math.isfinite(la) and math.isfinite(lb)):
            return False, float("nan"), f"{label}: step {s} loss not finite ({la}, {lb})"
        worst = max(worst, abs(la - lb))
    first, last = steps[0], steps[-1]
    ok = worst == 0.0 if exact else tol is None or worst <= tol
    verdict = ("bitwise " if exact else "" if tol is None else f"bound {tol:.0e} ") + \
        ("" if tol is None and not exact else "ok" if ok else "FAIL")
    text = (f"{label:<28} steps {first}-{last}  loss first {loss(a[first]):.5f}/{loss(b[first]):.5f}"
            f"  last {loss(a[last]):.5f}/{loss(b[last]):.5f}  max|Δ| {worst:.2e}  {verdict}").rstrip()
    return ok, worst, text


def curves(d, tol, report):
    bad = 0
    cuda = sorted(glob.glob(os.path.join(d, "cuda-*.jsonl")))
    if not cuda:
        print(f"no cuda-*.jsonl in {d}")
        return 1
    print("loss, cuda/cpu, nats/token" + (": differences only, no bound applies" if report else ""))
    for c in cuda:
        name = os.path.basename(c)[len("cuda-"):-len(".jsonl")]
        p = os.path.join(d, f"cpu-{name}.jsonl")
        if not os.path.exists(p):
            print(f"{name}: no CPU run")
            bad += 1
            continue
        ok, _, text = compare(load(c), load(p), None if report else bound(name, tol), name)
        print(text)
        bad += not ok
    return 1 if bad else 0


def resume(d, tol):
    pairs = [  # (resumed, uninterrupted, exact)
        ("rs-gpu-gpu", "cuda-z2-bf16-r2", True),
        ("rs-gpu-cpu", "cpu-z2-bf16-r2", False),
        ("rs-cpu-gpu", "cuda-z2-bf16-r1", False),
    ]
    bad = 0
    for res, full, exact in pairs:
        a, b = os.path.join(d, res + ".jsonl"), os.path.join(d, full + ".jsonl")
        if not (os.path.exists(a) and os.path.exists(b)):
            print(f"{res}: missing {a if not os.path.exists(a) else b}")
            bad += 1
            continue
        ok, _, text = compare(load(a), load(b), bound(full, tol), f"{res} vs {full}", exact)
        print(text)
        bad += not ok
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["curves", "resume"])
    p.add_argument("dir")
    p.add_argument("--tol", type=float, default=None,
                   help="one bound for every run (default: 1e-2 bf16, 2e-3 fp16)")
    p.add_argument("--report", action="store_true",
                   help="curves: print the differences, no verdict (a non-finite loss still fails)")
    a = p.parse_args()
    return curves(a.dir, a.tol, a.report) if a.mode == "curves" else resume(a.dir, a.tol)


if __name__ == "__main__":
    sys.exit(main())
