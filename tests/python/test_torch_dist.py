"""test_torch_dist.py — torch.distributed set up for the script, as deepspeed.initialize does.

    python test_torch_dist.py            (also under mpirun -np 2)

- after zinc.initialize, torch.distributed is initialized with the launcher's rank and size (the
  engine's), gloo on a machine without a GPU; an all_reduce of rank + 1 gives n(n+1)/2 on every
  rank and a barrier returns; the engine trains a step afterwards;
- initialize(dist_init_required=False) leaves torch.distributed alone (a child process);
- a process group the script set up itself (init_process_group before initialize) is kept
  (a child process, world of one);
- accelerate's state (stood in for) seeing another world than the launcher's is refused.
Each check prints its name; exit 1 when one fails, 77 without torch.
"""
import os
import subprocess
import sys

from _common import check, check_raises, failures, torch, zinc

dist = torch.distributed


def cfg():
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 2}}


def engine_of(**kw):
    torch.manual_seed(0)
    return zinc.initialize(model=torch.nn.Linear(4, 2), config=cfg(), **kw)[0]


def child(mode):
    if mode == "off":
        engine = engine_of(dist_init_required=False)
        check("dist_init_required=False: torch.distributed not set up",
              not dist.is_initialized())
    else:                       # "preset": the script's own process group is the one used
        store = dist.TCPStore("127.0.0.1", 0, 1, True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        group = dist.group.WORLD
        engine = engine_of()
        check("a process group set up by the script is kept", dist.group.WORLD is group)
    engine.close()
    return 1 if failures else 0


def accelerate_world(n, rank):
    """A script driven by Hugging Face accelerate whose Accelerator sees another world than the
    launcher's (under mpirun without LOCAL_RANK/RANK/WORLD_SIZE it takes each rank for a world
    of one) is refused, saying what to set; one that sees the launcher's world trains, as does
    one whose state has no world yet (accelerate calls init_distributed before it knows it).
    What zinc reads, accelerate.state.PartialState._shared_state["num_processes"], is stood in
    for here (CI has no accelerate); the real one was run by hand (docs/python.md)."""
    import types
    fake = types.ModuleType("accelerate.state")

    class PartialState:
        _shared_state = {}
    fake.PartialState = PartialState
    saved = sys.modules.get("accelerate.state")
    sys.modules["accelerate.state"] = fake
    try:
        wrong = 1 if n > 1 else 2
        PartialState._shared_state["num_processes"] = wrong
        check_raises(f"accelerate seeing {wrong} process(es) of the launcher's {n}: refused, "
                     f"naming what to set", engine_of, ValueError,
                     f"accelerate runs this script as {wrong} process(es), but the launcher "
                     f"started {n} ranks (this is rank {rank})", "LOCAL_RANK",
                     "InitProcessGroupKwargs")
        for shared, what in (({"num_processes": n}, "the launcher's world"),
                             ({}, "no world yet")):
            PartialState._shared_state = shared
            try:
                engine_of().close()
                made = ""
            except ValueError as ex:
                made = str(ex)
            check(f"accelerate seeing {what}: initialize goes on", not made, made)
    finally:
        if saved is None:
            del sys.modules["accelerate.state"]
        else:
            sys.modules["accelerate.state"] = saved


def main():
    if len(sys.argv) > 1:
        return child(sys.argv[1])
    engine = engine_of()
    rank, n = engine.global_rank, engine.world_size
    check("torch.distributed set up by initialize", dist.is_initialized())
    if dist.is_initialized():
        check("its rank and size are the engine's",
              (dist.get_rank(), dist.get_world_size()) == (rank, n),
              f"{dist.get_rank()} of {dist.get_world_size()} vs {rank} of {n}")
        check("backend gloo without a GPU",
              torch.cuda.is_available() or dist.get_backend() == "gloo", dist.get_backend())
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        check("all_reduce of rank + 1", t.item() == n * (n + 1) / 2, str(t.item()))
        dist.barrier()
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(rank))
    engine.backward(engine(x).pow(2).mean())
    engine.step()
    check("the engine trains alongside", engine.global_steps == 1, str(engine.global_steps))
    engine.close()
    accelerate_world(n, rank)
    if n == 1:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
        for mode in ("off", "preset"):
            r = subprocess.run([sys.executable, __file__, mode], env=env, timeout=120,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(r.stdout.strip())
            check(f"child '{mode}' passed", r.returncode == 0, f"exit {r.returncode}")
    print(f"rank {rank}: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
