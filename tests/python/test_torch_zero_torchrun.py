"""test_torch_zero_torchrun.py — zinc.zero.Init under torchrun's environment (no MPI).

    python test_torch_zero_torchrun.py          (starts its own 2 ranks)

Under torchrun (or srun) zinc's ranks meet only inside an engine (NCCL on GPUs), so Init's
collectives go through torch.distributed, which Init sets up as DeepSpeed's does (env:// from
MASTER_ADDR/MASTER_PORT; gloo on the CPU). This script starts two copies of itself with
torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, a free MASTER_PORT) — what
torchrun sets, without needing its launcher (Debian's torch 1.13 torchrun fails on Python 3.11).
Each rank, seeded apart, checks:
- no "built whole" warning, and torch.distributed set up (gloo) by Init;
- every parameter of a model built inside (fp32, and a bf16 one) is a one-element mark, and the
  values put together with GatheredParameters are rank 0's model built whole, bit for bit;
- an init pass through Module.apply in an enclosing constructor gives the whole build's values;
- a write inside GatheredParameters(modifier_rank=1) reaches every rank;
- zinc.initialize of that CPU model still refuses torchrun's ranks, naming mpirun (zinc connects
  torchrun's ranks with NCCL only);
- at exit the process group Init set up is destroyed before the interpreter's finalization
  (left to it, torch 1.13's gloo aborted rank 1 after "all passed" in 1 of 25 runs under load:
  "terminate called without an active exception"), and every rank exits 0.
Without the torch.distributed route the model is built whole with a warning and the first two
checks fail. Exit 77 when torch (or its gloo backend) is not there.
"""
import atexit
import os
import sys
import warnings

from _common import check, failures, run_torchrun_ranks, storage_bytes, torch, zinc

RANKS = 2


class Net(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.a = torch.nn.Linear(24, 40, dtype=dtype)
        self.b = torch.nn.Linear(40, 7, dtype=dtype)


class Scaled(torch.nn.Module):
    """An enclosing constructor's init pass over its children through Module.apply."""

    def __init__(self):
        super().__init__()
        self.net = Net()
        self.apply(self._init)

    @staticmethod
    @torch.no_grad()
    def _init(m):
        if isinstance(m, torch.nn.Linear):
            m.weight.mul_(2.0)
            m.bias.fill_(0.25)


def build():
    """The models, in one order (each takes its values from the generator in turn)."""
    return {"fp32": Net(), "bf16": Net(torch.bfloat16), "apply": Scaled()}


def gathered(model):
    with zinc.zero.GatheredParameters(list(model.parameters())):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(got, want):
    return set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


def at_exit():
    """Registered before Init sets torch.distributed up, so it runs after zinc's own exit
    handler (atexit is last in, first out): the process group must be gone by then."""
    alive = torch.distributed.is_initialized()
    print(f"at exit: process group {'still alive' if alive else 'destroyed'}", flush=True)


def rank_main():
    rank = int(os.environ["RANK"])
    atexit.register(at_exit)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with zinc.zero.Init():
            torch.manual_seed(0 if rank == 0 else 100 + rank)
            models = build()
    torch.manual_seed(0)
    wholes = build()
    whole_said = [str(w.message) for w in said if "built whole" in str(w.message)]
    check(f"rank {rank}: no 'built whole' warning", not whole_said, str(whole_said))
    dist = torch.distributed
    check(f"rank {rank}: Init set up torch.distributed (gloo) for its collectives",
          dist.is_initialized() and dist.get_backend() == "gloo"
          and dist.get_rank() == rank and dist.get_world_size() == RANKS)
    for name, model in models.items():
        marks = [storage_bytes(p) == p.element_size() for p in model.parameters()]
        check(f"rank {rank} {name}: every parameter is partitioned (a one-element mark)",
              all(marks), str(marks))
        check(f"rank {rank} {name}: put together, rank 0's model built whole, bit for bit",
              same(gathered(model), wholes[name].state_dict()))
    model = models["fp32"]
    with zinc.zero.GatheredParameters([model.b.bias], modifier_rank=1), torch.no_grad():
        if rank == 1:
            model.b.bias.fill_(3.5)
    check(f"rank {rank}: a write inside GatheredParameters(modifier_rank=1) reaches every rank",
          bool((gathered(model)["b.bias"] == 3.5).all()))
    try:
        zinc.initialize(model=model, config={"train_micro_batch_size_per_gpu": 2,
                                             "optimizer": {"type": "AdamW",
                                                           "params": {"lr": 1e-3}},
                                             "zero_optimization": {"stage": 3}})
        raised = ""
    except zinc.ZincError as ex:
        raised = str(ex)
    check(f"rank {rank}: initialize of a CPU model refuses torchrun's ranks naming mpirun",
          "mpirun" in raised, raised or "nothing raised")
    print(f"{len(failures)} failed" if failures else "all passed", flush=True)
    return 1 if failures else 0


def main():
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        print("SKIP: torch without gloo")
        return 77
    rc = 0
    for r, (code, out) in enumerate(run_torchrun_ranks(__file__, RANKS, 120)):
        print(f"---- rank {r} (rc {code})\n{out.rstrip()}")
        rc = rc or (code != 0)
        if "at exit: process group destroyed" not in out:
            print(f"FAIL: rank {r}: the process group zinc set up was not destroyed at exit "
                  "(torch can abort the process in its finalization: exit 134)")
            rc = 1
    print("PASS" if not rc else "FAIL")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(rank_main() if sys.argv[1:] == ["rank"] else main())
