"""test_comm.py — zinc.comm and the accelerator's backend name at 2 ranks on the CPU.

    python test_comm.py            (starts its own 2 ranks)

Two copies of this script with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
a free MASTER_PORT: no MPI needed), as test_torch_zero_torchrun.py starts them. Each rank calls
zinc.init_distributed() (torch.distributed through env://; gloo without a GPU) and checks:
- comm.get_rank(), zinc._world.rank() and torch.distributed's rank are RANK; the size is 2;
- accelerator.communication_backend_name(), for a "cpu" and a "cuda" accelerator alike, asked
  before the set-up and after it, is the backend torch.distributed got (a "cuda" accelerator
  on a machine without a GPU once answered "nccl" while the process group was gloo);
- comm.all_gather_into_tensor on gloo (all_gather into views of the output: torch 1.13's gloo
  has no _all_gather_base): each rank's [10r+1, 10r+2] gives [1, 2, 11, 12] on every rank,
  in rank order; a (2, 3) input into a (4, 3) output stacks the ranks' rows; async_op=True
  returns a work whose wait() leaves the same values;
- reduce_scatter_tensor (on gloo an all_reduce and the rank's part), all_reduce_coalesced,
  all_gather_object,
  broadcast_object_list, get_world_group and the has_* queries (DeepSpeed's; they were missing);
- init_distributed refuses an init_method other than env:// and a rank or size not the
  launcher's, and takes env:// with the launcher's rank and size (refused before 2026-12-01);
- reduce_scatter_tensor's AVG into an int64 output raises (it truncated the mean 0.5 to 0);
  reduce_scatter_tensor and all_gather_into_tensor over a group without this rank do nothing
  (they raised "Invalid process group specified"); send/recv with DeepSpeed's prof, log_name,
  debug; batch_isend_irecv of DeepSpeed's P2POp; gather, scatter; log_summary(return_dict=True).
The parent waits up to 240 s for each rank (2 busy cores); exit 77 without gloo."""
import os
import sys

from _common import check, finish, run_torchrun_ranks, torch, zinc
from zinc.accelerator import ZincAccelerator

RANKS = 2
WAIT_S = 240


def rank_main():
    rank = int(os.environ["RANK"])
    before = [ZincAccelerator(k).communication_backend_name() for k in ("cpu", "cuda")]
    for kw in ({"init_method": "tcp://127.0.0.1:1"}, {"rank": rank + 5}, {"world_size": 7}):
        try:
            zinc.init_distributed(**kw)
            check(f"rank {rank}: init_distributed({kw}) refused", False, "accepted")
        except NotImplementedError as ex:
            check(f"rank {rank}: init_distributed({kw}) refused naming it",
                  list(kw)[0] in str(ex), str(ex))
    # DeepSpeed's init_method "env://" and the launcher's own rank and size are taken (they
    # raised NotImplementedError)
    zinc.init_distributed(init_method="env://", rank=rank, world_size=RANKS)
    dist = torch.distributed
    check(f"rank {rank}: torch.distributed set up at 2 ranks",
          dist.is_initialized() and dist.get_world_size() == RANKS)
    got = (zinc.comm.get_rank(), zinc._world.rank(), dist.get_rank(), zinc.comm.get_world_size())
    check(f"rank {rank}: comm.get_rank, _world.rank, torch's rank; the size",
          got == (rank, rank, rank, RANKS), str(got))
    backend = dist.get_backend()
    after = [ZincAccelerator(k).communication_backend_name() for k in ("cpu", "cuda")]
    check(f"rank {rank}: communication_backend_name() is torch.distributed's {backend}, "
          "before the set-up and after, for either device kind",
          before == after == [backend, backend], f"before {before}, after {after}")
    if backend != "gloo":
        print(f"(backend {backend}: the gloo checks are skipped)")
        return finish()
    out = torch.zeros(2 * RANKS)
    zinc.comm.all_gather_into_tensor(out, torch.tensor([10.0 * rank + 1, 10.0 * rank + 2]))
    want = [v for r in range(RANKS) for v in (10.0 * r + 1, 10.0 * r + 2)]
    check(f"rank {rank}: all_gather_into_tensor on gloo, in rank order", out.tolist() == want,
          f"{out.tolist()} != {want}")
    mine = torch.arange(6, dtype=torch.float32).view(2, 3) + 100 * rank
    out2 = torch.zeros(2 * RANKS, 3)
    zinc.comm.all_gather_into_tensor(out2, mine)
    want2 = torch.cat([torch.arange(6, dtype=torch.float32).view(2, 3) + 100 * r
                       for r in range(RANKS)])
    check(f"rank {rank}: a (2, 3) input into a (4, 3) output: the ranks' rows stacked",
          torch.equal(out2, want2), f"{out2.tolist()}")
    out3 = torch.zeros(2 * RANKS)
    work = zinc.comm.all_gather_into_tensor(out3, torch.tensor([10.0 * rank + 1,
                                                                10.0 * rank + 2]), async_op=True)
    work.wait()
    check(f"rank {rank}: async_op=True, then wait(): the same values", out3.tolist() == want,
          f"{out3.tolist()}")
    # DeepSpeed's other collectives a script makes (they were AttributeErrors)
    full = torch.arange(2.0 * RANKS) + rank               # rank r: [r, r+1, r+2, r+3]
    part = torch.zeros(2)
    zinc.comm.reduce_scatter_tensor(part, full)
    want = [sum(2.0 * rank + k + q for q in range(RANKS)) for k in (0, 1)]
    check(f"rank {rank}: reduce_scatter_tensor (gloo: an all_reduce and this rank's part): "
          f"part {rank} of the sum", part.tolist() == want, f"{part.tolist()} != {want}")
    # async_op=True: a work with torch's methods (the emulated one on gloo had only wait and
    # is_completed: is_success, exception and get_future were AttributeErrors)
    part2 = torch.zeros(2)
    work = zinc.comm.reduce_scatter_tensor(part2, full, async_op=True)
    work.wait()
    fut = work.get_future().wait()
    check(f"rank {rank}: reduce_scatter_tensor async: the values, and the work's is_success, "
          f"exception and future (the output) as torch's",
          part2.tolist() == want and work.is_completed() and work.is_success() and
          work.exception() is None and len(fut) == 1 and fut[0].tolist() == want,
          f"{part2.tolist()} {fut}")
    if hasattr(dist.ReduceOp, "AVG"):      # gloo has none: the sum's part, divided
        zinc.comm.reduce_scatter_tensor(part, full, op=dist.ReduceOp.AVG)
        check(f"rank {rank}: reduce_scatter_tensor with AVG: part {rank} of the mean",
              part.tolist() == [w / RANKS for w in want], f"{part.tolist()}")
    pair = [torch.tensor([1.0 + rank]), torch.tensor([[10.0 * rank, 1.0], [2.0, 3.0]])]
    zinc.comm.all_reduce_coalesced(pair)
    sums = [sum(1.0 + r for r in range(RANKS)), sum(10.0 * r for r in range(RANKS))]
    check(f"rank {rank}: all_reduce_coalesced sums each tensor of the list",
          pair[0].tolist() == [sums[0]] and
          pair[1].tolist() == [[sums[1], RANKS * 1.0], [RANKS * 2.0, RANKS * 3.0]],
          f"{[t.tolist() for t in pair]}")
    objs = [None] * RANKS
    zinc.comm.all_gather_object(objs, {"rank": rank})
    check(f"rank {rank}: all_gather_object", objs == [{"rank": r} for r in range(RANKS)],
          str(objs))
    box = [f"from {rank}", rank]
    zinc.comm.broadcast_object_list(box, src=1)
    check(f"rank {rank}: broadcast_object_list from rank 1", box == ["from 1", 1], str(box))
    check(f"rank {rank}: get_world_group is torch's WORLD; has_* answer bools",
          zinc.comm.get_world_group() is dist.group.WORLD and
          isinstance(zinc.comm.has_all_gather_into_tensor(), bool) and
          isinstance(zinc.comm.has_reduce_scatter_tensor(), bool))
    # AVG into an integer output raises, as torch's and DeepSpeed's (the mean 0.5 became 0)
    ints = torch.full((RANKS,), rank, dtype=torch.int64)
    out_i = torch.zeros(1, dtype=torch.int64)
    if hasattr(dist.ReduceOp, "AVG"):
        try:
            zinc.comm.reduce_scatter_tensor(out_i, ints, op=dist.ReduceOp.AVG)
            check(f"rank {rank}: reduce_scatter_tensor AVG into int64 raises", False,
                  f"gave {out_i.tolist()}")
        except RuntimeError as ex:
            check(f"rank {rank}: reduce_scatter_tensor AVG into int64 raises", "cast" in str(ex),
                  str(ex))
    # a group without this rank: nothing done, None (torch's collectives there; zinc's own forms
    # raised "Invalid process group specified")
    only0 = zinc.comm.new_group([0])
    keep = torch.full((2,), -7.0)
    got = (zinc.comm.reduce_scatter_tensor(keep, torch.ones(2), group=only0),
           zinc.comm.all_gather_into_tensor(keep, torch.ones(2), group=only0)) if rank else None
    check(f"rank {rank}: reduce_scatter_tensor / all_gather_into_tensor over a group without "
          f"this rank do nothing", rank == 0 or (got == (None, None) and keep.tolist() ==
                                                 [-7.0, -7.0]), f"{got} {keep.tolist()}")
    # DeepSpeed's comms-logger keywords are taken; point-to-point as DeepSpeed's names them
    peer = 1 - rank
    box = torch.tensor([float(rank)])
    if rank == 0:
        zinc.comm.send(box + 5, peer, prof=True, log_name="x", debug="y")
        zinc.comm.recv(box, src=peer)
    else:
        got_p = torch.zeros(1)
        zinc.comm.recv(got_p, src=peer, log_name="r")
        zinc.comm.send(got_p * 2, peer)
        box = got_p
    check(f"rank {rank}: send / recv (with prof, log_name, debug)",
          box.tolist() == ([10.0] if rank == 0 else [5.0]), str(box.tolist()))
    buf = torch.zeros(1)
    reqs = zinc.comm.batch_isend_irecv([
        zinc.comm.P2POp(zinc.comm.isend, torch.tensor([100.0 + rank]), peer),
        zinc.comm.P2POp(zinc.comm.irecv, buf, peer)])
    for q in reqs:
        q.wait()
    check(f"rank {rank}: batch_isend_irecv of DeepSpeed's P2POp", buf.tolist() == [100.0 + peer],
          str(buf.tolist()))
    gl = [torch.zeros(1) for _ in range(RANKS)] if rank == 0 else None
    zinc.comm.gather(torch.tensor([float(rank)]), gather_list=gl, dst=0)
    check(f"rank {rank}: gather to rank 0", rank != 0 or [t.item() for t in gl] ==
          [float(r) for r in range(RANKS)], str(gl))
    sc = torch.zeros(1)
    zinc.comm.scatter(sc, [torch.tensor([3.0 * r]) for r in range(RANKS)] if rank == 0 else None,
                      src=0)
    check(f"rank {rank}: scatter from rank 0", sc.tolist() == [3.0 * rank], str(sc.tolist()))
    check(f"rank {rank}: log_summary(return_dict=True) is a dict",
          zinc.comm.log_summary(return_dict=True) == {})
    zinc.comm.barrier(prof=False, log_name="barrier")
    return finish()


def main():
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        print("SKIP: torch without gloo")
        return 77
    for r, (rc, out) in enumerate(run_torchrun_ranks(__file__, RANKS, WAIT_S)):
        print(f"---- rank {r} (rc {rc})\n{out.rstrip()}", flush=True)
        check(f"rank {r} passed", rc == 0, f"exit {rc}")
    return finish()


if __name__ == "__main__":
    sys.exit(rank_main() if sys.argv[1:] == ["rank"] else main())
