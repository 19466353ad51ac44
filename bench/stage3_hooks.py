#!/usr/bin/env python3
"""stage3_hooks.py — the host cost of `import zinc`'s stage-3 hooks, on the CPU (issue 38).

    python bench/stage3_hooks.py [--stage 3] [--steps 80] [--tree DIR]

A GPT-2 of transformers' at 12 layers but tiny widths (n_embd 32, vocabulary 64, sequence 16),
bf16, every group partitioned (stage3_param_persistence_threshold 0: 75 groups), one thread: the
compute is a few milliseconds, so what stage 3 adds over stage 2 is mostly the front-end's
Python per gather and hand-over, the part a GPU step pays on its host. Prints one JSON line: the
median and minimum step time and the median of engine.hook_seconds() per step. --tree DIR
imports zinc from DIR/python (another checkout, for a side-by-side run of two versions:
alternate the two a few times, the machine's load moves). Needs torch and transformers; the
model and its training come from zinc_gpt2.py.
"""
import argparse
import json
import statistics
import time

from zinc_gpt2 import add_args, zinc_gpt2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap, stage=3)
    ap.add_argument("--steps", type=int, default=80)
    a = ap.parse_args()
    engine, step, _ = zinc_gpt2(a.tree, dict(n_layer=12, n_embd=32, n_head=2, vocab_size=64,
                                             n_positions=16), micro=1,
                                zero={"stage": a.stage, "stage3_param_persistence_threshold": 0},
                                threads=1)
    for _ in range(3):
        step()
    times, hooks = [], []
    for _ in range(a.steps):
        h0, t0 = engine.hook_seconds(), time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        hooks.append(engine.hook_seconds() - h0)
    print(json.dumps({"tree": a.tree, "stage": a.stage, "steps": a.steps,
                      "step_ms_median": round(statistics.median(times) * 1e3, 3),
                      "step_ms_min": round(min(times) * 1e3, 3),
                      "hook_ms_median": round(statistics.median(hooks) * 1e3, 3)}))


if __name__ == "__main__":
    main()
