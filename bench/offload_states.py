"""offload_states.py — engine.offload_states() / reload_states(): what moves, and the same
losses as DeepSpeed 0.19.8 with the calls (bench/RESULTS.md 11m).

    python bench/offload_states.py mem
        zinc: a 33.6M-parameter MLP (two 4096x4096 Linears), bf16, one rank, stages 1-3: the
        device and host bytes (engine.memory) before and while away, and the median time of 5
        offload_states() + reload_states() rounds.
    python bench/offload_states.py losses STAGE keep|away        (run it twice:)
        DS_ACCELERATOR=cpu RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \\
            MASTER_PORT=29541 bench/.venv/bin/python bench/offload_states.py losses 2 away
        ZINC_LIB=build/libzinc.so PYTHONPATH=python bench/.venv/bin/python \\
            -m zinc.as_deepspeed bench/offload_states.py losses 2 away
        a small MLP, bf16, AdamW (torch_adam), clipping 1.0, six steps; with `away` the state is
        offloaded before step 4's forward and reloaded before its step(). Prints the losses.
    python bench/offload_states.py losses STAGE keep|away window
        the same with gradient_accumulation_steps 2: away from step 4's first micro-batch until
        before the step() that ends its window (the first micro-batch's step() runs while away).
"""
import statistics
import sys
import time
import warnings

import torch


def mem():
    import zinc
    for stage in (1, 2, 3):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 4096))
        cfg = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": stage}}
        e, *_ = zinc.initialize(model=m, config=cfg)
        x = torch.randn(2, 4096).bfloat16()
        e.backward(e(x).float().pow(2).mean())
        e.step()

        def total(host):
            return sum(a for _, a in e.memory(host).values()) / 2**20

        before = total(False), total(True)
        t_off, t_re = [], []
        for _ in range(5):
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # (what stays on the device: said once)
                e.offload_states()
            t_off.append(time.perf_counter() - t)
            away = total(False), total(True)
            left = {c: round(a / 2**20, 1) for c, (_, a) in e.memory().items() if a}
            t = time.perf_counter()
            e.reload_states()
            t_re.append(time.perf_counter() - t)
        print(f"stage {stage}: device {before[0]:.1f} MiB, host {before[1]:.1f} -> away: device "
              f"{away[0]:.1f} MiB, host {away[1]:.1f} MiB (device left: {left}); offload median "
              f"{statistics.median(t_off) * 1e3:.0f} ms, reload "
              f"{statistics.median(t_re) * 1e3:.0f} ms")
        e.close()


def losses(stage, away, window=False):
    """window: accumulation 2, the state away from step 4's first micro-batch to just before
    the step() that ends its window (the first micro-batch's step() is taken while away)."""
    import deepspeed
    ga = 2 if window else 1
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
           "gradient_clipping": 1.0, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW",
                         "params": {"lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}},
           "zero_optimization": {"stage": stage}}
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    eng, *_ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
    gen = torch.Generator().manual_seed(1)
    out = []
    for step in range(6):
        for micro in range(ga):
            x, y = torch.randn(4, 16, generator=gen).bfloat16(), torch.randn(4, 1, generator=gen)
            if step == 3 and micro == 0 and away:
                eng.offload_states()
            loss = ((eng(x).float() - y) ** 2).mean()
            eng.backward(loss)
            if step == 3 and micro == ga - 1 and away:
                eng.reload_states()
            eng.step()
            out.append(f"{float(loss):.6f}")
    print("LOSSES", deepspeed.__name__, stage, "away" if away else "keep",
          "window" if window else "", " ".join(out))


if __name__ == "__main__":
    if sys.argv[1:2] == ["mem"]:
        mem()
    elif sys.argv[1:2] == ["losses"] and len(sys.argv) in (4, 5):
        losses(int(sys.argv[2]), sys.argv[3] == "away", sys.argv[4:5] == ["window"])
    else:
        sys.exit(__doc__)
