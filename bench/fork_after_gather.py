#!/usr/bin/env python3
"""fork_after_gather.py — does this Python and torch hang a DataLoader worker forked just after
a torch.distributed collective? (docs/python.md, "Data"). Nothing of zinc is used.

    mpirun -np 2 python bench/fork_after_gather.py [--passes 200] [--pause S]
                   [--before gather|all_reduce|barrier|none]

Each pass runs one gloo collective (`--before`), sleeps `--pause` seconds if given, then
iterates a fresh DataLoader with 2 worker processes (what zinc's and DeepSpeed's loaders do every
pass). On CPython 3.11 and older without the fix for gh-112275 (merged in September 2024;
Debian 12's 3.11.2 and bench/.venv's 3.11.7 lack it), a worker forked while another thread of
the parent holds the interpreter's thread-list lock never gets past the fork (the issue's
account); the DataLoader's timeout turns that into an error, so the script reports it instead
of waiting for ever.
Rank 0, and a rank whose pass failed, print one JSON line: the versions, the passes every
rank completed, the failure. Exit 1 on a failure: a pass's, or a collective's when another
rank's pass failed and it left.
"""
import argparse
import json
import os
import platform
import sys
import time

import torch
import torch.distributed as dist


def env_rank():
    for rk, sz in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                   ("RANK", "WORLD_SIZE")):
        if rk in os.environ:
            return int(os.environ[rk]), int(os.environ[sz])
    return 0, 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--passes", type=int, default=200)
    p.add_argument("--before", default="gather",
                   choices=["gather", "all_reduce", "barrier", "none"],
                   help="the collective before each pass (gather: all_gather_object)")
    p.add_argument("--pause", type=float, default=None,
                   help="sleep this long between it and the pass (default: no sleep; 0 only "
                        "yields the GIL, as zinc's loader does before it forks)")
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--timeout", type=float, default=20.0,
                   help="seconds a batch may take before the pass counts as hung")
    a = p.parse_args()
    rank, world = env_rank()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=world)
    data = torch.utils.data.TensorDataset(torch.arange(64.0))
    done, failure = 0, None
    for i in range(a.passes):
        try:
            collective(a.before, world)
        except RuntimeError as ex:       # gloo raises when the peer has gone (its pass failed)
            failure = f"rank {rank}, pass {i}: the collective failed (another rank's pass?): {ex}"
            break
        if a.pause is not None:
            time.sleep(a.pause)     # 0: only yield the GIL, as zinc's loader does
        loader = iter(torch.utils.data.DataLoader(data, batch_size=4, num_workers=2,
                                                  timeout=a.timeout))
        try:
            for _ in loader:
                pass
        except RuntimeError as ex:
            failure = f"rank {rank}, pass {i}: {ex}"
            break
        finally:
            del loader          # its workers joined, a hung one terminated
        done += 1
    if failure is not None or rank == 0:
        print(json.dumps({"rank": rank, "python": platform.python_version(),
                          "torch": torch.__version__, "before": a.before, "pause_s": a.pause,
                          "ranks": world, "passes": done, "of": a.passes, "failure": failure}),
              flush=True)
    # Not dist.destroy_process_group(): after a failure the peer may be gone already.
    os._exit(1 if failure else 0)


def collective(kind, world):
    if kind == "gather":
        out = [None] * world
        dist.all_gather_object(out, list(range(10)))
    elif kind == "all_reduce":
        dist.all_reduce(torch.ones(1))
    elif kind == "barrier":
        dist.barrier()

if __name__ == "__main__":
    sys.exit(main())
