#!/usr/bin/env python3
"""ds_cpu_adam.py — DeepSpeed's DeepSpeedCPUAdam (the ZeRO-Offload kernel) on the work of `zinc bench adam`.

ZeRO-Offload hands the CPU optimizer fp32 gradients and fp32 master weights; the kernel updates
master, exp_avg and exp_avg_sq in place (28 bytes per param). In DeepSpeed 0.19 its step() has no
16-bit output any more (older versions took step(fp16_param_groups=...) and wrote the 16-bit copy
in the same pass), so in fp16/bf16 mode the 16-bit working copy is written by a separate
out16.copy_(master) right after the step, timed with it (+6 bytes per param) — the work of one
mixed-precision step: fp32 master, m, v updated and a 16-bit copy of the new weights.
Prints one JSON object; exits 3 when deepspeed (or its CPU Adam extension) is not available.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", type=float, default=1e8)
    p.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    try:
        import torch
        import deepspeed
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(json.dumps({"available": False, "reason": f"import deepspeed failed: {e}"}))
        return 3
    n = int(a.params)
    gen = torch.Generator(device="cpu").manual_seed(0)
    master = torch.nn.Parameter(torch.rand(n, generator=gen) * 2 - 1)
    master.grad = (torch.rand(n, generator=gen) * 2 - 1) * 1e-2  # fp32, as ZeRO-Offload passes
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    out16 = torch.empty(n, dtype=dt) if dt is not torch.float32 else None
    try:
        opt = DeepSpeedCPUAdam([master], lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                               weight_decay=0.01, adamw_mode=True)
    except Exception as e:  # noqa: BLE001 - the JIT build of the extension can fail
        print(json.dumps({"available": False, "reason": f"DeepSpeedCPUAdam failed: {e}"}))
        return 3
    times = []
    for r in range(a.repeat + 1):  # round 0 warms up (state allocation, first touch)
        t0 = time.perf_counter()
        opt.step()
        if out16 is not None:
            out16.copy_(master.detach())
        if r > 0:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"available": True, "deepspeed": deepspeed.__version__,
                      "torch": torch.__version__, "params": n, "dtype": a.dtype,
                      "step_signature": str(inspect.signature(DeepSpeedCPUAdam.step)),
                      "omp_threads": os.environ.get("OMP_NUM_THREADS", ""),
                      "bytes_per_param": 28 if out16 is None else 34,
                      "ms_median": med * 1e3, "ms_min": min(times) * 1e3,
                      "ms_max": max(times) * 1e3, "ms_all": [t * 1e3 for t in times],
                      "params_per_s": n / med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
