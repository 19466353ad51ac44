#!/usr/bin/env python3
"""stage3_hooks.py — the host cost of `import zinc`'s stage-3 hooks, on the CPU (issue 38).

    python bench/stage3_hooks.py [--stage 3] [--steps 80] [--tree DIR] [--reuse-distance N]
                                 [--persistence N] [--against DIR]

A GPT-2 of transformers' at 12 layers but tiny widths (n_embd 32, vocabulary 64, sequence 16),
bf16, every group partitioned (stage3_param_persistence_threshold 0: 75 groups), one thread: the
compute is a few milliseconds, so what stage 3 adds over stage 2 is mostly the front-end's
Python per gather and hand-over, the part a GPU step pays on its host. Prints one JSON line: the
median and minimum step time, the median of engine.hook_seconds() per step and the gathers per
step (zinc's all-gather bytes over the 16-bit model's). --reuse-distance N sets
stage3_max_reuse_distance (default DeepSpeed's 1e9, where this model keeps every group from its
forward for its backward; 0 gathers each again in backward). --persistence N sets
stage3_param_persistence_threshold (default 0; 100 makes the 25 LayerNorm groups of 64
elements persistent and no other, GPT-2 124M's proportion at DeepSpeed's default 1e5, whose
LayerNorms have 1,536 elements and its smallest other group 590k). --tree DIR
imports zinc from DIR/python (another checkout, for a side-by-side run of two versions:
alternate the two a few times, the machine's load moves). --against DIR builds a second engine
from DIR/python's zinc in the same process (each package copied under its own name) and
alternates the two engines' steps, in turn first, so that both see the same load: it prints
both medians and the medians of the per-step ratios of hook time and of step time (this
tree's over DIR's), the
figure to compare versions by on a shared machine, where separate runs swing by 2x. Needs
torch and transformers; the model and its training come from zinc_gpt2.py.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from zinc_gpt2 import add_args, zinc_gpt2

SHAPE = dict(n_layer=12, n_embd=32, n_head=2, vocab_size=64, n_positions=16)


def against(a, zero):
    """--against: this tree's zinc and DIR's in one process, their steps alternated."""
    tmp = tempfile.mkdtemp()
    try:
        for name, tree in (("zinc_this", a.tree), ("zinc_other", a.against)):
            shutil.copytree(os.path.join(tree, "python", "zinc"), os.path.join(tmp, name))
        sys.path.insert(0, tmp)
        runs = {name: zinc_gpt2(None, SHAPE, micro=1, zero=zero, threads=1, package=name)
                for name in ("zinc_this", "zinc_other")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)   # (imported: the modules stay loaded)
    hooks = {name: [] for name in runs}
    times = {name: [] for name in runs}
    for i in range(a.steps + 3):
        order = list(runs) if i % 2 == 0 else list(runs)[::-1]
        for name in order:
            engine, step, _ = runs[name]
            h0, t0 = engine.hook_seconds(), time.perf_counter()
            step()
            if i >= 3:
                times[name].append(time.perf_counter() - t0)
                hooks[name].append(engine.hook_seconds() - h0)
    ratio = statistics.median(t / o for t, o in zip(hooks["zinc_this"], hooks["zinc_other"]))
    step_ratio = statistics.median(t / o for t, o in zip(times["zinc_this"], times["zinc_other"]))
    out = {"tree": a.tree, "against": a.against, "stage": a.stage, "steps": a.steps,
           "persistence": a.persistence, "hook_ratio_median": round(ratio, 3),
           "step_ratio_median": round(step_ratio, 3)}
    for name, key in (("zinc_this", "this"), ("zinc_other", "other")):
        out[f"{key}_step_ms_median"] = round(statistics.median(times[name]) * 1e3, 3)
        out[f"{key}_hook_ms_median"] = round(statistics.median(hooks[name]) * 1e3, 3)
    print(json.dumps(out))


def all_gather_bytes(engine):
    """zinc_comm_bytes' all-gather count (libzinc's; the Python engine does not wrap it)."""
    import ctypes
    from zinc._lib import lib
    counts = (ctypes.c_uint64 * 4)()      # ZINC_COLL_COUNT; ZINC_COLL_ALL_GATHER is 2
    lib.zinc_comm_bytes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if lib.zinc_comm_bytes(engine._e, counts) != 0:
        raise RuntimeError("zinc_comm_bytes failed")
    return counts[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap, stage=3)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--reuse-distance", type=int, default=None)
    ap.add_argument("--persistence", type=int, default=0)
    ap.add_argument("--against", metavar="DIR", default=None)
    a = ap.parse_args()
    zero = {"stage": a.stage, "stage3_param_persistence_threshold": a.persistence}
    if a.reuse_distance is not None:
        zero["stage3_max_reuse_distance"] = a.reuse_distance
    if a.against:
        return against(a, zero)
    engine, step, params = zinc_gpt2(a.tree, SHAPE, micro=1, zero=zero, threads=1)
    for _ in range(3):
        step()
    times, hooks = [], []
    g0 = all_gather_bytes(engine) if a.stage == 3 else 0
    for _ in range(a.steps):
        h0, t0 = engine.hook_seconds(), time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        hooks.append(engine.hook_seconds() - h0)
    gathered = all_gather_bytes(engine) - g0 if a.stage == 3 else 0
    print(json.dumps({"tree": a.tree, "stage": a.stage, "steps": a.steps,
                      "reuse_distance": engine.zero_max_reuse_distance(),
                      "model_gathers_per_step": round(gathered / (2 * params * a.steps), 3),
                      "step_ms_median": round(statistics.median(times) * 1e3, 3),
                      "step_ms_min": round(min(times) * 1e3, 3),
                      "hook_ms_median": round(statistics.median(hooks) * 1e3, 3)}))


if __name__ == "__main__":
    main()
