#!/usr/bin/env python3
"""torch_save.py — torch.save / torch.load of fp32 optimizer state, beside `zinc ckpt bench`.

Builds the state the way `zinc ckpt bench` does (tools/cmd_ckpt.c bench_state: weights
~ N(0, 0.02), then S AdamW steps, lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01, on
gradients = a fixed per-element signal of sigma 1e-3 + noise of sigma 2e-3), with torch's own
generator: the same recipe and sizes, not the same bytes. Saves {master, exp_avg, exp_avg_sq}
with torch.save into DIR, fsyncs, and loads it back with torch.load, R times.
Prints one JSON object; exits 3 when torch is not available.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mib", type=int, default=64, help="MiB per stream")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    a = p.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "reason": f"import torch failed: {e}"}))
        return 3
    n = a.mib << 18
    g = torch.Generator().manual_seed(12345)
    w = torch.nn.Parameter(torch.randn(n, generator=g) * 0.02)
    sig = torch.randn(n, generator=g) * 1e-3
    opt = torch.optim.AdamW([w], lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                            foreach=False)
    for _ in range(a.steps):
        w.grad = sig + torch.randn(n, generator=g) * 2e-3
        opt.step()
    st = opt.state[w]
    state = {"master": w.detach().clone(), "exp_avg": st["exp_avg"].clone(),
             "exp_avg_sq": st["exp_avg_sq"].clone()}
    raw = 3 * n * 4
    d = tempfile.mkdtemp(prefix="zinc-torch-save-", dir=a.dir)
    path = os.path.join(d, "state.pt")
    save_t, load_t, size = [], [], 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        save_t.append(time.perf_counter() - t0)
        size = os.path.getsize(path)
        t0 = time.perf_counter()
        back = torch.load(path, weights_only=True)
        load_t.append(time.perf_counter() - t0)
        exact = all(torch.equal(back[k], state[k]) for k in state)
        del back
    os.unlink(path)
    os.rmdir(d)
    med_s, med_l = statistics.median(save_t), statistics.median(load_t)
    print(json.dumps({"available": True, "torch": torch.__version__, "mib_per_stream": a.mib,
                      "raw": raw, "torch_save_bytes": size, "roundtrip_exact": exact,
                      "save_gbs": raw / med_s / 1e9, "load_gbs": raw / med_l / 1e9,
                      "save_gbs_all": [raw / t / 1e9 for t in save_t],
                      "load_gbs_all": [raw / t / 1e9 for t in load_t]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
