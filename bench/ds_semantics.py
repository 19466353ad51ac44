"""ds_semantics.py — zinc's Python front-end against DeepSpeed's own objects, where the meaning
must be DeepSpeed's (a cross-check run by hand: DeepSpeed is never a dependency, CI has none).

    ZINC_LIB=build/libzinc.so bench/.venv/bin/python bench/ds_semantics.py

- the data loader: DeepSpeedDataLoader and zinc's (python/zinc/dataloader.py) on 23 samples,
  every rank of 1-4 ranks, batch sizes 1, 4, 5, with and without drop_last: the same batches
  in the same order, the same len();
- param groups with their own lr under the config's scheduler: DeepSpeed's WarmupCosineLR and
  WarmupLR objects stepping a torch AdamW with groups of lr 5e-3 and 1e-3, against the lr zinc
  shows in each group before each of 12 steps (within 1e-15 relative: a few double ulps);
- ... and WarmupLR without warmup_max_lr, where each group warms up to its own lr;
- get_global_grad_norm(): DeepSpeed's type (a 0-dim tensor at stages 1-3, a float at stage 0
  in bf16), its value bit for bit at stages 1-2, within NORM_CASES' bounds at stages 0 and 3;
- set_train_batch_size at a window's end (2 -> 4 accumulation steps): zinc's next windows are 4
  micro-steps long; DeepSpeed's first one is 2 (its boundary counts global micro-steps), as
  docs/python.md says.
Prints each comparison and exits 1 when one differs.
"""
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import zinc  # noqa: E402
from zinc.dataloader import build  # noqa: E402
from deepspeed.runtime.dataloader import DeepSpeedDataLoader  # noqa: E402
from deepspeed.runtime.lr_schedules import WarmupCosineLR, WarmupLR  # noqa: E402


def loaders():
    ds = [(torch.tensor([float(i)]), i) for i in range(23)]
    differ = n = 0
    for world in (1, 2, 3, 4):
        for rank in range(world):
            for drop in (False, True):
                for bs in (1, 4, 5):
                    theirs = DeepSpeedDataLoader(ds, bs, False, 0, None, num_local_io_workers=0,
                                                 data_parallel_world_size=world,
                                                 data_parallel_rank=rank,
                                                 dataloader_drop_last=drop)
                    ours = build(ds, batch_size=bs, rank=rank, world_size=world, route="train",
                                 pin_memory=False, data_sampler=None, collate_fn=None,
                                 num_local_io_workers=0, drop_last=drop)
                    a, b = [x[1].tolist() for x in theirs], [x[1].tolist() for x in ours]
                    n += 1
                    if a != b or len(theirs) != len(ours):
                        differ += 1
                        print(f"  differ: world {world} rank {rank} drop_last {drop} batch {bs}: "
                              f"DeepSpeed {a}, zinc {b}")
    print(f"data loader: {n} loaders compared, {differ} differ")
    return differ == 0


SCHEDULES = {
    "WarmupCosineLR": (WarmupCosineLR, {"total_num_steps": 12, "warmup_num_steps": 4,
                                        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05,
                                        "warmup_type": "linear"}),
    "WarmupLR": (WarmupLR, {"warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                            "warmup_num_steps": 5, "warmup_type": "linear"}),
    # without warmup_max_lr each group warms up to its own lr (DeepSpeed's default there)
    "WarmupLR, no warmup_max_lr": (WarmupLR, {"warmup_min_lr": 1e-4, "warmup_num_steps": 5}),
}


def group_lrs(name, steps=12):
    cls, params = SCHEDULES[name]
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))

    def groups():
        return [{"params": m[0].parameters(), "lr": 5e-3},
                {"params": m[1].parameters(), "lr": 1e-3}]
    opt = torch.optim.AdamW(groups(), lr=3e-3)
    sched = cls(opt, **params)
    theirs = []
    for _ in range(steps):
        theirs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
           "scheduler": {"type": cls.__name__, "params": params}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # WarmupLR's: the groups' own lr is not used
        engine, zopt, _, _ = zinc.initialize(model=m, model_parameters=groups(), config=cfg)
    ours = []
    for _ in range(steps):
        ours.append([g["lr"] for g in zopt.param_groups])
        engine.backward(m(torch.ones(1, 4)).sum())
        engine.step()
    engine.close()
    worst = max(abs(a - b) / max(abs(a), 1e-30) for x, y in zip(theirs, ours)
                for a, b in zip(x, y))
    print(f"{name}: {steps} steps x 2 groups, max relative lr difference DeepSpeed vs zinc "
          f"{worst:.3g}")
    # zinc's group lr is own lr x (zinc's lr / optimizer lr): a multiply and a divide in double
    # more than DeepSpeed's own lr x ratio, a few ulps at most.
    return worst <= 1e-15


def ds_engine(m, cfg, port="29531"):
    """DeepSpeed's engine over m on the CPU, one process (its world needs torchrun's variables,
    which zinc takes for a torchrun launch: build zinc's engines first)."""
    import deepspeed
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", port), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)[0]


# get_global_grad_norm's cases: (stage, bf16), and the relative difference allowed — 0 at stages
# 1-2 (zinc's double rounded as DeepSpeed's float32); at stage 3 and stage 0 in bf16 DeepSpeed
# sums the squares in another order, in double (stage 3) or from float32 pieces (stage 0).
NORM_CASES = ((0, True, 1e-7), (1, False, 0.0), (2, False, 0.0), (3, False, 1e-8))


def grad_norms():
    """get_global_grad_norm() after 2 steps of the same model and batch: of DeepSpeed's type (a
    float at stage 0, a 0-dim float32 tensor at stages 1-2, float64 at 3) and value."""
    got = {}
    for name in ("zinc", "deepspeed"):
        for stage, bf16, _ in NORM_CASES:
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
            cfg = {"train_micro_batch_size_per_gpu": 3, "gradient_clipping": 1.0,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
                   "zero_optimization": {"stage": stage}, "bf16": {"enabled": bf16}}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                engine = (ds_engine(m, cfg) if name == "deepspeed" else
                          zinc.initialize(model=m, model_parameters=m.parameters(),
                                          config=cfg)[0])
            x = torch.ones(3, 4, dtype=torch.bfloat16 if bf16 else torch.float32)
            for _ in range(2):
                engine.backward(engine(x).float().sum())
                engine.step()
            g = engine.get_global_grad_norm()
            got[name, stage] = (type(g).__name__, getattr(g, "dtype", None), float(g))
            if name == "zinc":
                engine.close()
    ok = True
    for stage, bf16, bound in NORM_CASES:
        a, b = got["deepspeed", stage], got["zinc", stage]
        rel = abs(a[2] - b[2]) / a[2]
        good = a[:2] == b[:2] and rel <= bound
        ok = ok and good
        print(f"get_global_grad_norm stage {stage} {'bf16' if bf16 else 'fp32'}: DeepSpeed {a}, "
              f"zinc {b}, relative difference {rel:.3g} (bound {bound:g})"
              f"{'' if good else '  DIFFERS'}")
    return ok


def windows(engine, micro_steps, change_at, new_batch):
    """The micro-steps of each optimizer window over `micro_steps` micro-steps of a one-rank
    engine with gradient accumulation 2, set_train_batch_size(new_batch) called after the
    step() ending micro-step `change_at` (a window's end)."""
    x = torch.ones(1, 4)
    out, n = [], 0
    for i in range(micro_steps):
        boundary = engine.is_gradient_accumulation_boundary()
        engine.backward(engine(x).float().sum())
        engine.step()
        n += 1
        if boundary:
            out.append(n)
            n = 0
        if i + 1 == change_at:
            engine.set_train_batch_size(new_batch)
    return out + ([n] if n else [])


def batch_size_change():
    """set_train_batch_size at a window's end: zinc's next window is the new length; DeepSpeed's
    boundary is (global micro-steps + 1) % new steps == 0, so its first window after a change
    from 2 to 4 steps at micro-step 2 is 2 long (docs/python.md says so; this checks it)."""
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1}}
    got = {}
    for name in ("zinc", "deepspeed"):       # (zinc first: ds_engine)
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name == "deepspeed":
                engine = ds_engine(m, cfg)
            else:
                engine = zinc.initialize(model=m, model_parameters=m.parameters(), config=cfg)[0]
        got[name] = windows(engine, 10, 2, 4)
        if name == "zinc":
            engine.close()
    print(f"set_train_batch_size 2 -> 4 steps after the first window: windows DeepSpeed "
          f"{got['deepspeed']}, zinc {got['zinc']}")
    return got["zinc"] == [2, 4, 4] and got["deepspeed"] == [2, 2, 4, 2]


def main():
    ok = loaders()
    for name in SCHEDULES:
        ok = group_lrs(name) and ok
    ok = batch_size_change() and ok
    ok = grad_norms() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
