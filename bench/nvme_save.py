"""nvme_save.py — time save_checkpoint of a model whose optimizer state is on NVMe.

    ZINC_LIB=build/libzinc.so.0.1.0 PYTHONPATH=python python3 bench/nvme_save.py DIR [LABEL]

A 32M-parameter model (an Embedding of 40000 x 768, whose 31M elements span several of the
NVMe tier's chunks, and two Linear 768 x 768) at stage 2 with offload_optimizer nvme under DIR,
one step, then 5 saves into DIR/ck<i> (each removed after). Prints the seconds of each and their
median. Run it with two libraries one after the other (ZINC_LIB) to compare them side by side.
"""
import shutil
import statistics
import sys
import time

import torch

import zinc


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    root, label = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "zinc"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(40000, 768), torch.nn.Linear(768, 768),
                                torch.nn.Linear(768, 768))
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
                                                                   "nvme_path": root}}}
    engine, *_ = zinc.initialize(model=model, config=cfg)
    x = torch.randint(0, 40000, (2, 8))
    engine.backward(engine(x).float().pow(2).mean())
    engine.step()
    times = []
    for i in range(5):
        d = f"{root}/ck{i}"
        t = time.perf_counter()
        engine.save_checkpoint(d, tag="t")
        times.append(time.perf_counter() - t)
        shutil.rmtree(d)
    engine.close()
    print(f"{label}: save s {' '.join(f'{t:.3f}' for t in times)} median "
          f"{statistics.median(times):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
