"""ds_script.py — a training script written for DeepSpeed 0.19.8, using the DeepSpeed names
scripts import besides `deepspeed` itself: the accelerator, deepspeed.comm, FusedAdam or
DeepSpeedCPUAdam handed to initialize, logger, RepeatingLoader, set_z3_leaf_modules,
ZeroParamStatus. test_ds_names.py runs it three ways:

    python -m zinc.as_deepspeed ds_script.py ARGS    as written (`import deepspeed` ...)
    python ds_script.py --zinc-names ARGS            the same names under zinc's paths
    python ds_script.py --reference ARGS             plain zinc: the optimizer in the config,
                                                     no leaf modules, no DeepSpeed names

ARGS: --stage S --opt fused|cpu --out DIR. Each rank writes DIR/rank<r>.txt: one line
"loss <step> <float.hex>" per step, then what the script saw of itself (argv, __name__) and of
the names (the comm results), so the driver compares files, not a shared pipe."""
import argparse
import json
import sys

import torch

if "--zinc-names" in sys.argv or "--reference" in sys.argv:
    import zinc as deepspeed
    import zinc.comm as dist
    from zinc.accelerator import get_accelerator
    from zinc.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from zinc.runtime.zero.partition_parameters import ZeroParamStatus
    from zinc.utils import RepeatingLoader, logger, set_z3_leaf_modules
else:            # DeepSpeed's own names: this branch is the unedited script
    import deepspeed
    import deepspeed.comm as dist
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from deepspeed.utils import RepeatingLoader, logger, set_z3_leaf_modules

from ds_names_model import Experts, MoE, dataset

HYPER = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stage", type=int, required=True)
    p.add_argument("--opt", choices=("fused", "cpu"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--zinc-names", action="store_true")
    p.add_argument("--reference", action="store_true")
    p = deepspeed.add_config_arguments(p)
    args = p.parse_args()

    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    acc = get_accelerator()
    device = acc.device_name()
    acc.manual_seed(0)
    model = MoE().to(device)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
           "zero_optimization": {"stage": args.stage}}
    if args.reference:
        # What the client optimizer must amount to: FusedAdam is AdamW, DeepSpeedCPUAdam with
        # adamw_mode=False is Adam with L2 decay.
        cfg["optimizer"] = {"type": "AdamW" if args.opt == "fused" else "Adam",
                            "params": dict(HYPER, betas=list(HYPER["betas"]),
                                           adam_w_mode=args.opt == "fused")}
        engine, _, _, _ = deepspeed.initialize(model=model, config=cfg,
                                               model_parameters=model.parameters())
    else:
        set_z3_leaf_modules(model, [Experts])
        if args.opt == "fused":
            opt = FusedAdam(model.parameters(), **HYPER)
        else:
            opt = DeepSpeedCPUAdam(model.parameters(), adamw_mode=False, **HYPER)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)

    data = dataset(rank)
    loader = RepeatingLoader(torch.utils.data.DataLoader(data, batch_size=4))
    lines = []
    it = iter(loader)
    for step in range(args.steps):          # 7 steps over 3 batches: the loader repeats
        x, y = next(it)
        x, y = x.to(device), y.to(device)
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        engine.step()
        lines.append(f"loss {step} {loss.item().hex()}")
        if rank == 0 and step % 3 == 0:
            logger.info(f"step {step} loss {loss.item():.5f}")

    # deepspeed.comm: sums, broadcast, gather, barrier over the ranks.
    t = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(t)
    b = torch.tensor([10.0 * rank + 5], device=device)
    dist.broadcast(b, 0)
    parts = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([float(rank)], device=device))
    dist.barrier()
    seen = {"argv": sys.argv, "name": __name__, "initialized": dist.is_initialized(),
            "rank": rank, "world": world, "local_rank": dist.get_local_rank(),
            "all_reduce": t.item(), "broadcast": b.item(), "all_gather": [q.item() for q in parts],
            "device": device, "on_accelerator": acc.on_accelerator(x),
            "status": [ZeroParamStatus.AVAILABLE.value, ZeroParamStatus.NOT_AVAILABLE.value],
            "optimizer": engine.optimizer_name()}
    with open(f"{args.out}/rank{rank}.txt", "w") as f:
        f.write("\n".join(lines) + "\n" + "seen " + json.dumps(seen) + "\n")


if __name__ == "__main__":
    main()
