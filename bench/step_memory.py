#!/usr/bin/env python3
"""step_memory.py — the memory peak of one training step through `import zinc`, on the CPU
(issue 38: zinc's stages 0-2 peak over DeepSpeed's on a GPU, bench/RESULTS.md 11d).

    python bench/step_memory.py [--stage 1] [--tree DIR] [--reuse-distance N]

The metric is the GPU bench's (bench/gpu_torch.py): the most torch held at once during one step
plus zinc's own bytes (engine.memory(), allocated). On the CPU torch keeps no allocator
statistics, so its allocations are followed with torch's profiler (profile_memory: every
allocation and free of the step with the running total, which starts at zero at the profile:
between steps torch holds nothing of the model's, whose parameters are zinc's views, or empty at
stage 3), one step after two of warm-up. The model is transformers' GPT-2 at 6 layers, width 256, vocabulary 8192,
sequence 256, micro-batch 4 (6.9M parameters), bf16, AdamW, clipping 1.0: small enough for a
CPU, with the logits a large share of the activations, as in the real models. Prints one JSON
line. --reuse-distance N sets stage3_max_reuse_distance (stage 3; default DeepSpeed's 1e9, which
this model fits: torch holds every group from its forward into its backward). --tree DIR imports zinc from DIR/python (another checkout: side by side with an older
front-end, on the same libzinc). Needs torch and transformers (bench/.venv has them). DeepSpeed
on the CPU accelerator is not beside it: its CPU path is not its GPU path (its step peak there is
four times zinc's), so the comparison that counts is on a GPU (gpu_torch's mem_phases_gib).
"""
import argparse
import json
import os
import tempfile

from zinc_gpt2 import add_args, zinc_gpt2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_args(ap, stage=1)
    ap.add_argument("--reuse-distance", type=int, default=None)
    a = ap.parse_args()
    zero = {"stage": a.stage}
    if a.reuse_distance is not None:
        zero["stage3_max_reuse_distance"] = a.reuse_distance
    from torch.profiler import ProfilerActivity, profile
    engine, step, params = zinc_gpt2(a.tree, dict(n_layer=6, n_embd=256, n_head=4,
                                                  vocab_size=8192, n_positions=256), micro=4,
                                     zero=zero, threads=2)
    step()
    step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = step()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    mib = 2 ** 20
    own = sum(v[1] for v in engine.memory().values())
    print(json.dumps({"stage": a.stage, "tree": a.tree,
                      "reuse_distance": engine.zero_max_reuse_distance(),
                      "params": params,
                      "torch_step_peak_MiB": round(max(totals) / mib, 2),
                      "zinc_own_MiB": round(own / mib, 2),
                      "peak_MiB": round((max(totals) + own) / mib, 2),
                      "loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
