"""_torch_dist.py — torch.distributed set up for the training script, as DeepSpeed's
init_distributed does, over the ranks zinc's launcher world already has.

zinc's own communication never goes through torch.distributed (MPI on the CPU, NCCL on GPUs,
set up by libzinc). Scripts written for DeepSpeed still call it for their own needs — the rank
for logging, a barrier, the mean loss over ranks — and expect deepspeed.initialize to have set
it up. The rendezvous:
- launcher environment with MASTER_ADDR and MASTER_PORT (torchrun; or set by hand): env://;
- otherwise (mpirun, or no launcher): rank 0 hosts a torch TCPStore on a free port and the other
  ranks learn its host and port through zinc_world_broadcast (MPI_Bcast), with no port to agree
  on beforehand; ranks on rank 0's host connect to 127.0.0.1;
- a launcher environment without MASTER_ADDR (srun): not set up, with a warning saying what to
  set (zinc itself does not need it).
The backend is DeepSpeed's default, NCCL when torch sees a GPU and gloo otherwise, unless
dist_backend names one; gloo also where ranks share a GPU (mpirun -np 2 on one GPU: zinc stages
its own collectives through host memory there, and NCCL refuses two ranks on one device).

A process group zinc set up is destroyed at exit (atexit) unless the script did it already:
left to the interpreter's finalization, gloo's worker threads can be torn down mid-work and
torch then aborts a process whose run succeeded ("terminate called without an active
exception", exit 134: pytorch/pytorch#190489; seen here in python_zero_torchrun, 1 of 25 runs
under load), and torch 2.x warns that destroy_process_group() was not called.
"""
import atexit
import ctypes
import datetime
import os
import socket
import sys
import warnings

import torch

from . import _world
from ._lib import ZINC_ERR_UNSUPPORTED, lib

_MSG = 512        # bytes of the broadcast "host port" message


def setup(world, backend=None, timeout=None):
    n = lib.zinc_world_size(world)
    rank = _world.rank()
    _check_accelerate(n, rank)
    if not torch.distributed.is_available():
        return
    dist = torch.distributed
    if dist.is_initialized():
        if (dist.get_world_size(), dist.get_rank()) != (n, rank):
            raise ValueError(f"zinc.init_distributed: torch.distributed is already set up as "
                             f"rank {dist.get_rank()} of {dist.get_world_size()}, but the "
                             f"launcher's world makes this process rank {rank} of {n}")
        return
    backend = backend or default_backend()
    timeout = timeout or datetime.timedelta(minutes=30)      # DeepSpeed's default
    if n > 1 and os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=n,
                                timeout=timeout)
    else:
        store = _store_over_world(world, n, rank, timeout)
        if store is None:
            return
        dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)
        _all_set_up(world)
    atexit.register(_destroy_at_exit)


def _all_set_up(world):
    """Waits until every rank is through torch's init_process_group. Rank 0 serves the store,
    and torch's last use of it (gloo's group sequence number, read by the other ranks after rank
    0 wrote it) can still be in flight elsewhere when rank 0 returns: a script whose rank 0 then
    failed and exited ended the store under them, and they died of "Connection reset by peer"
    inside init_distributed instead of reaching their own code (seen on 2 busy cores:
    python_early_all_mpi)."""
    status = lib.zinc_world_barrier(world)
    if status not in (0, ZINC_ERR_UNSUPPORTED):
        raise RuntimeError(f"zinc.init_distributed: waiting for every rank to set up "
                           f"torch.distributed failed: "
                           f"{lib.zinc_last_error(None).decode(errors='replace')}")


def _check_accelerate(n, rank):
    """A script driven by Hugging Face accelerate (its Accelerator made before initialize) must
    see the launcher's world too: accelerate takes its own from LOCAL_RANK, RANK and
    WORLD_SIZE, which mpirun does not set, and then runs each rank as a world of one, whose
    batches are the same on every rank and whose saves write the same files, while zinc trains
    over all of them: no error anywhere (a review, 2026-12-01). Refused here with what to
    set. Nothing when accelerate set up no state, or while it
    does (its own init_distributed call comes before it knows its world)."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None)
    try:
        seen = shared.get("num_processes") if shared else None
    except Exception:  # noqa: BLE001 — another accelerate's internals: then no check
        return
    if not isinstance(seen, int) or seen == n:
        return
    raise ValueError(
        f"zinc: accelerate runs this script as {seen} process(es), but the launcher started "
        f"{n} ranks (this is rank {rank}): each would train on the same batches and write the "
        f"same files. Under mpirun, accelerate reads LOCAL_RANK, RANK and WORLD_SIZE, which "
        f"mpirun does not set: export them from Open MPI's (LOCAL_RANK="
        f"$OMPI_COMM_WORLD_LOCAL_RANK RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE="
        f"$OMPI_COMM_WORLD_SIZE, in a wrapper script mpirun runs), and on the CPU give the "
        f"Accelerator kwargs_handlers=[InitProcessGroupKwargs(backend=\"gloo\")] "
        f"(docs/python.md)")


def default_backend():
    """The backend setup() picks when the script names none, DeepSpeed's default: 'nccl' when
    torch sees a GPU and zinc's ranks do not share one, else 'gloo'. zinc.accelerator's
    communication_backend_name() answers it too, before a process group exists."""
    return "nccl" if torch.cuda.is_available() and not _ranks_share_gpu() else "gloo"


def _ranks_share_gpu():
    """Whether zinc's ranks share GPUs on this node (more of them than torch sees GPUs, or
    ZINC_SHARE_DEVICE=1; engine/gpu_share.c decides the same for zinc's own comm): NCCL refuses
    two ranks on one GPU, so the script's torch.distributed then gets gloo."""
    setting = os.environ.get("ZINC_SHARE_DEVICE", "")
    if setting in ("0", "1"):
        return setting == "1"
    for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var]) > torch.cuda.device_count()
    return False


def _destroy_at_exit():
    """The process group zinc set up, destroyed while the interpreter is still whole (see the
    module's text); nothing when the script destroyed it itself."""
    dist = torch.distributed
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as ex:  # noqa: BLE001 — at exit there is no caller left to raise to
            warnings.warn(f"zinc: destroying torch.distributed's process group at exit failed: "
                          f"{ex}", RuntimeWarning)


def _store_over_world(world, n, rank, timeout):
    """Rank 0's TCPStore, its address broadcast over zinc's world. Every rank takes part in the
    broadcast even when rank 0 failed to open the store (an empty message), so that all raise
    rather than wait."""
    store, failure = None, None
    msg = b""
    if rank == 0:
        try:
            # Not waiting for the others here: they learn the port only afterwards.
            store = torch.distributed.TCPStore("0.0.0.0" if n > 1 else "127.0.0.1", 0, n, True,
                                               timeout, wait_for_workers=False)
            msg = f"{socket.gethostname()} {store.port}".encode()
        except (RuntimeError, OSError) as ex:
            failure = ex
    buf = ctypes.create_string_buffer(msg, _MSG)
    status = lib.zinc_world_broadcast(world, buf, _MSG, 0)
    if status == ZINC_ERR_UNSUPPORTED:      # a launcher environment without MASTER_ADDR
        warnings.warn("zinc: torch.distributed is not set up for the script: this launcher "
                      "gave no MASTER_ADDR/MASTER_PORT (set them to rank 0's host and a free "
                      "port to have it); zinc itself does not need them", RuntimeWarning,
                      stacklevel=4)
        return None
    if status != 0:
        raise RuntimeError(f"zinc.init_distributed: broadcasting the torch.distributed store's "
                           f"address failed: {lib.zinc_last_error(None).decode(errors='replace')}")
    if failure is not None:
        raise RuntimeError(f"zinc.init_distributed: rank 0 could not open a TCPStore for "
                           f"torch.distributed: {failure}") from failure
    if not buf.value:
        raise RuntimeError("zinc.init_distributed: rank 0 could not open a TCPStore for "
                           "torch.distributed (see rank 0's error)")
    if rank == 0:
        return store
    host, port = buf.value.decode().rsplit(" ", 1)
    if host == socket.gethostname():
        host = "127.0.0.1"
    return torch.distributed.TCPStore(host, int(port), n, False, timeout)
