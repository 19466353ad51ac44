"""test_monitor.py — DeepSpeed's monitors on the Python front-end (python/zinc/_monitor.py).

    python test_monitor.py DIR           (also under mpirun -np 2)

fp16 on an elementwise model (torch 1.13 has no fp16 matmul on the CPU), accumulation 2, a
WarmupLR schedule, 4 optimizer steps, the first one overflowing (skipped), with `csv_monitor`,
`tensorboard` and `wandb` enabled:
- csv: DIR/job/Train_Samples_{train_loss,lr,loss_scale}.csv exactly as DeepSpeed's csvMonitor
  lays them out: a header `step,<name's tail>`, then one row per optimizer step (the skipped one
  too) at global_samples; train_loss is the mean of the losses the script gave backward over
  the window and the ranks, lr get_lr()[0] and loss_scale optimizer.cur_scale, as read after
  each step(); only rank 0 writes;
- a bf16 run: no loss_scale file; a run without monitors: no folder;
- tensorboard and wandb: where the package is importable, tensorboard's event file holds the
  same values (read back with tensorboard's EventAccumulator); where not (CI's Debian python),
  one RuntimeWarning naming the package, and csv is still written;
- zinc train's config warning about tensorboard/wandb is not passed on as a ZincConfigWarning."""
import csv
import importlib
import os
import shutil
import sys
import warnings

from _common import check, failures, torch, zinc

MICRO, GA, STEPS = 4, 2, 4


class Gain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.b = torch.nn.Parameter(torch.zeros(8))

    def forward(self, x):
        return x * self.w + self.b


def importable(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 — any failure: not usable
        return False


def run(root, dtype="fp16", monitors=True):
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3,
                                                         "warmup_max_lr": 1e-2}},
           "zero_optimization": {"stage": 2}}
    cfg[dtype] = {"enabled": True}
    if monitors:
        cfg["csv_monitor"] = {"enabled": True, "output_path": root, "job_name": "job"}
        cfg["tensorboard"] = {"enabled": True, "output_path": root, "job_name": "tb"}
        # wandb only where it cannot reach the network: its own offline mode.
        if not importable("wandb"):
            cfg["wandb"] = {"enabled": True, "project": "zinc-test"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine, opt, _, _ = zinc.initialize(model=Gain(), config=cfg)
    rank, world = engine.global_rank, engine.world_size
    want = {"train_loss": [], "lr": [], "loss_scale": []}
    for step in range(STEPS):
        losses = []
        for i in range(GA):
            g = torch.Generator().manual_seed(100 * step + 10 * rank + i)
            x = torch.randn(MICRO, 8, generator=g) * (1e4 if step == 0 else 1.0)
            x = x.half() if dtype == "fp16" else x.to(torch.bfloat16)
            loss = (engine(x).float() ** 2).mean()
            losses.append(loss.item())
            engine.backward(loss)
            engine.step()
        mine = sum(losses) / GA
        want["train_loss"].append(engine._mean_over_ranks([mine])[0])
        want["lr"].append(engine.get_lr()[0])
        want["loss_scale"].append(opt.cur_scale)
    tb = MICRO * GA * world
    steps = [tb * (s + 1) for s in range(STEPS)]
    want["skipped"] = engine.skipped_steps
    engine.close()
    return rank, caught, want, steps


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def main():
    root = sys.argv[1]
    rank0 = zinc.world_size() == 1 or int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0
    if rank0:
        shutil.rmtree(root, ignore_errors=True)
    rank, caught, want, steps = run(root)
    job = os.path.join(root, "job")
    if rank == 0:
        for name in ("train_loss", "lr", "loss_scale"):
            path = os.path.join(job, f"Train_Samples_{name}.csv")
            rows = read_csv(path) if os.path.exists(path) else []
            ok = (len(rows) == STEPS + 1 and rows[0] == ["step", name]
                  and [int(r[0]) for r in rows[1:]] == steps
                  and all(close(float(r[1]), w) for r, w in zip(rows[1:], want[name])))
            check(f"csv {name}: DeepSpeed's layout, one row per step at global_samples",
                  ok, f"{rows} vs {steps}, {want[name]}")
        check("one of the steps written was skipped for the overflow", want["skipped"] == 1,
              str(want["skipped"]))
        said = [str(w.message) for w in caught]
        for pkg, key in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
            if key == "wandb" and importable("wandb"):
                continue
            if importable(pkg):
                continue
            n = sum(f"the config's {key} section is enabled but {pkg}" in s for s in said)
            check(f"{pkg} not importable: one warning naming it", n == 1, str(said))
        check("zinc train's tensorboard/wandb config warning not passed on",
              not any(s.startswith(("zinc config: tensorboard", "zinc config: wandb"))
                      for s in said), str(said))
        if importable("tensorboard"):
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
            acc = EventAccumulator(os.path.join(root, "tb"))
            acc.Reload()
            got = {n: [(e.step, e.value) for e in acc.Scalars(f"Train/Samples/{n}")]
                   for n in ("train_loss", "lr", "loss_scale")}
            ok = all([s for s, _ in got[n]] == steps and
                     all(abs(v - w) <= 1e-6 * max(1.0, abs(w)) for (_, v), w in
                         zip(got[n], want[n])) for n in got)
            check("tensorboard: the same events, read back", ok, f"{got} vs {want}")
        else:
            check("tensorboard not importable: no tb folder", not os.path.exists(
                os.path.join(root, "tb")))
    # bf16: no loss scale event; no monitor: no folder.
    if rank0:
        shutil.rmtree(root, ignore_errors=True)
    rank, _, _, _ = run(root, "bf16")
    if rank == 0:
        check("bf16: train_loss and lr, no loss_scale",
              sorted(os.listdir(os.path.join(root, "job"))) ==
              ["Train_Samples_lr.csv", "Train_Samples_train_loss.csv"],
              str(os.listdir(os.path.join(root, "job"))))
        shutil.rmtree(root, ignore_errors=True)
    rank, _, _, _ = run(root, "fp16", monitors=False)
    if rank == 0:
        check("no monitor enabled: nothing written", not os.path.exists(root))
    print("PASS" if not failures else f"FAIL: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
