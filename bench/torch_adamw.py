#!/usr/bin/env python3
"""torch_adamw.py — PyTorch's AdamW on the same work as `zinc bench adam`, for side-by-side ratios.

Mixed precision the way PyTorch (and DeepSpeed's fp16 optimizer) does it: the gradient arrives in
the 16-bit dtype, is cast into a persistent fp32 buffer, AdamW updates the fp32 master weights and moments, and the
master is cast back to the 16-bit working copy. In fp32 mode it is AdamW alone.
Prints one JSON object; exits 3 when torch (or the asked device) is not available.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--params", type=float, default=1e8)
    p.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--impl", default="fused", choices=["fused", "foreach", "single"])
    a = p.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(json.dumps({"available": False, "reason": f"import torch failed: {e}"}))
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"available": False, "reason": "torch sees no CUDA device"}))
        return 3
    n = int(a.params)
    dev = torch.device(a.device)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    gen = torch.Generator(device="cpu").manual_seed(0)
    master = torch.nn.Parameter((torch.rand(n, generator=gen) * 2 - 1).to(dev))
    grad16 = ((torch.rand(n, generator=gen) * 2 - 1) * 1e-2).to(dev).to(dt)
    out16 = torch.empty(n, dtype=dt, device=dev)
    # The fp32 gradient buffer persists across steps, as a mixed-precision trainer keeps one; a
    # fresh grad16.float() per step would time the allocator's page faults, not AdamW.
    grad32 = torch.empty(n, dtype=torch.float32, device=dev) if dt is not torch.float32 else None
    kw = {"fused": a.impl == "fused", "foreach": a.impl == "foreach"} if a.impl != "single" \
        else {"foreach": False}
    try:
        opt = torch.optim.AdamW([master], lr=1e-4, weight_decay=0.01, **kw)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "reason": f"AdamW({a.impl}) unavailable: {e}"}))
        return 3

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    times = []
    for r in range(a.repeat + 1):  # round 0 warms up (allocations, kernels)
        sync()
        t0 = time.perf_counter()
        if dt is torch.float32:
            master.grad = grad16
            opt.step()
        else:
            grad32.copy_(grad16)
            master.grad = grad32
            opt.step()
            out16.copy_(master.detach())
        sync()
        if r > 0:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"available": True, "torch": torch.__version__, "impl": a.impl,
                      "device": a.device, "params": n, "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "ms_median": med * 1e3,
                      "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3,
                      "ms_all": [t * 1e3 for t in times],
                      "params_per_s": n / med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
