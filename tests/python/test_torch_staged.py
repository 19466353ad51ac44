"""test_torch_staged.py — `import zinc` under mpirun with ranks sharing a device: the staged comm
over MPI (engine/gpu_share.c; docs/comm.md "Ranks sharing a GPU").

    mpirun -np 2 python test_torch_staged.py STAGE            the cpu device (ctest)
    mpirun -np 2 python test_torch_staged.py STAGE --cuda     one GPU shared by both processes

test_torch_parity.py's model, batches and AdamW config (fp32; with --cuda bf16 too), each rank
training on its half of the global batch:
- cpu: trained once with the plain mpi comm and once with ZINC_TEST_STAGED_COMM=1 (the hook puts
  the staged comm over it, as ranks sharing a GPU get; read at engine creation, so one process
  runs both): the engine's comm is "mpi", then "staged/mpi", and the staged run's losses and
  final weights are the plain run's, bit for bit (the staging only moves bytes);
- cuda: the model on cuda:(local rank % GPUs) — cuda:0 in both processes on a one-GPU machine;
  the comm must be "staged/mpi" on that GPU, and against plain torch on the same device with
  the whole global batch in one process (test_torch_cuda.reference): the weights within the
  parity bounds (fp32 4e-6 relative to each tensor's largest weight; bf16 2.5e-2 absolute), the
  losses averaged over the ranks with torch.distributed (gloo: _torch_dist picks it where the
  ranks share a GPU, which NCCL refuses) within 4e-6 (fp32) and 2e-2 (bf16) relative.
Both: torch.distributed's all_reduce and barrier work between the ranks. Exit 77 without torch,
outside a world of 2, or (--cuda) without a CUDA device; 1 on any failure.
"""
import os
import sys

from _common import check, failures, torch, zinc

CUDA = "--cuda" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--cuda"]
sys.argv = sys.argv[:1]         # test_torch_parity reads STAGE and BF16 from argv at import
import test_torch_parity as tp  # noqa: E402
from zinc._lib import lib  # noqa: E402

dist = torch.distributed


def run(dev, stage, bf16):
    """Trains on this rank's half of each global batch; returns (comm, GPU or -1, losses as a
    tensor on dev, the final state_dict)."""
    world = zinc.world_size()
    per = tp.GLOBAL_MICRO // world
    torch.manual_seed(0)
    m = tp.Tiny().to(dev)
    engine, *_ = zinc.initialize(model=m, model_parameters=m.parameters(),
                                 config=tp.config(stage, bf16, per))
    rank = engine.global_rank
    losses = []
    for x, y in tp.batches():
        xs, ys = x[rank * per:(rank + 1) * per].to(dev), y[rank * per:(rank + 1) * per].to(dev)
        loss = tp.loss_fn(engine, xs, ys)
        engine.backward(loss)
        engine.step()
        losses.append(loss.detach())
    comm = lib.zinc_engine_comm(engine._e).decode()
    gpu = lib.zinc_engine_cuda_device(engine._e)
    sd = {k: v.detach().clone() for k, v in engine.module_state_dict().items()}
    engine.close()
    return comm, gpu, torch.stack(losses), sd


def bits_equal(a, b):
    """Bitwise equality (so -0.0 and NaNs count as they are)."""
    ints = {2: torch.int16, 4: torch.int32}
    return (a.dtype == b.dtype and a.shape == b.shape and
            torch.equal(a.contiguous().view(ints[a.element_size()]),
                        b.contiguous().view(ints[b.element_size()])))


def on_cpu(stage):
    dev = torch.device("cpu")
    os.environ.pop("ZINC_TEST_STAGED_COMM", None)
    comm0, _, l0, w0 = run(dev, stage, False)
    os.environ["ZINC_TEST_STAGED_COMM"] = "1"
    comm1, _, l1, w1 = run(dev, stage, False)
    del os.environ["ZINC_TEST_STAGED_COMM"]
    check(f"stage {stage}: the plain run's comm is mpi", comm0 == "mpi", comm0)
    check(f"stage {stage}: the hooked run's comm is staged/mpi", comm1 == "staged/mpi", comm1)
    check(f"stage {stage}: staged/mpi's losses are mpi's, bit for bit", bits_equal(l0, l1),
          f"max difference {float((l0 - l1).abs().max()):.3e}")
    worst = max(float((w0[n] - w1[n]).abs().max()) for n in w0)
    check(f"stage {stage}: staged/mpi's weights are mpi's, bit for bit",
          all(bits_equal(w0[n], w1[n]) for n in w0), f"max difference {worst:.3e}")


def on_cuda(stage, dev):
    import test_torch_cuda as tc
    ref_losses, ref_w = tc.reference(dev)
    world = zinc.world_size()
    for bf16 in (False, True):
        mode = "bf16" if bf16 else "fp32"
        comm, gpu, losses, w = run(dev, stage, bf16)
        check(f"stage {stage} {mode}: the comm is staged/mpi on {dev}",
              (comm, gpu) == ("staged/mpi", dev.index), f"{comm} on GPU {gpu}")
        dist.all_reduce(losses)        # the mean over ranks of each half-batch loss
        worst_l = tp.worst_loss([float(v) / world for v in losses], ref_losses)
        worst_w, bound_w, bound_l, _ = tp.differences(w, ref_w, bf16)
        print(f"stage {stage} {mode}, rank {dist.get_rank()} of {world} on {dev}: loss "
              f"difference {worst_l:.2e} (bound {bound_l:.0e}), weight difference {worst_w:.2e} "
              f"(bound {bound_w:.2g}) against plain torch with the whole batch", flush=True)
        check(f"stage {stage} {mode}: mean loss within {bound_l:.0e} of plain torch",
              worst_l < bound_l, f"{worst_l:.3e}")
        check(f"stage {stage} {mode}: weights within {bound_w:.2g} of plain torch",
              worst_w < bound_w, f"{worst_w:.3e}")


def main():
    stage = int(ARGS[0]) if ARGS else 1
    if CUDA and not torch.cuda.is_available():
        print("SKIP: no CUDA device (torch.cuda.is_available() is false)")
        return 77
    if zinc.world_size() != 2:
        print(f"SKIP: run under mpirun -np 2 (world {zinc.world_size()})")
        return 77
    zinc.init_distributed()
    if CUDA:
        dev = torch.device("cuda", zinc.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False     # fp32 parity: no TF32 matmuls
        torch.backends.cudnn.allow_tf32 = False
        on_cuda(stage, dev)
    else:
        on_cpu(stage)
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    check("torch.distributed all_reduce between the ranks", float(t) == 3.0, str(float(t)))
    dist.barrier()
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} failure(s), stage {stage}, "
          f"{'cuda' if CUDA else 'cpu'}, backend {dist.get_backend()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
