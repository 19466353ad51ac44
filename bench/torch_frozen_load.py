"""Load time of a zinc checkpoint into a torch model whose body is frozen now, beside the same
load into the model training everything (the run that saved it), side by side in one process.

The frozen parameters are not zinc's (it trains only what requires a gradient), so their saved
fp32 masters are read back for them (zinc_ckpt_read_tensors, one read for all of them). The
ratio shows what that read costs against the ordinary load.

    python bench/torch_frozen_load.py [--layers 100] [--width 64] [--rounds 5]
(run with the interpreter that imports torch and zinc: PYTHONPATH=python, ZINC_LIB=build/libzinc.so)
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch

import zinc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=100, help="nn.Linear layers (2 tensors each)")
    ap.add_argument("--width", type=int, default=64, help="features of each layer")
    ap.add_argument("--rounds", type=int, default=5, help="timed loads of each kind")
    a = ap.parse_args()

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(a.width, a.width) for _ in range(a.layers)])

    cfg = {"train_batch_size": 2, "bf16": {"enabled": True}, "steps_per_print": 10 ** 9,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2}}
    d = tempfile.mkdtemp(prefix="zinc-frozen-load-")
    try:
        e, *_ = zinc.initialize(model=model(), config=cfg)
        e.backward(e(torch.randn(2, a.width).bfloat16()).float().pow(2).mean())
        e.step()
        e.save_checkpoint(d)
        e.close()
        times = {"all trained": [], "frozen body": []}
        for _ in range(a.rounds):            # alternate, so drift hits both alike
            for kind in times:               # one engine at a time in a process
                m = model()
                if kind == "frozen body":    # all but the last layer
                    for p in list(m.parameters())[:-2]:
                        p.requires_grad_(False)
                eng = zinc.initialize(model=m, config=cfg)[0]
                t = time.perf_counter()
                eng.load_checkpoint(d)
                times[kind].append(time.perf_counter() - t)
                eng.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{a.layers} layers of {a.width}x{a.width} ({2 * a.layers} tensors), bf16, "
              f"stage 2, 1 rank, median of {a.rounds} loads")
        for k, v in med.items():
            print(f"  {k:12s} {v * 1e3:8.1f} ms")
        print(f"  frozen / all trained: {med['frozen body'] / med['all trained']:.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("ZINC_LOG", "warn")     # read at zinc's first message, not at import
    main()
