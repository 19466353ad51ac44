"""zinc.comm — DeepSpeed's deepspeed.comm (`import deepspeed.comm as dist`) for the collectives a
script makes itself: its rank for logging, a barrier, the mean loss over ranks.

They are torch.distributed's, over the process group zinc.init_distributed sets up (as
DeepSpeed's init_distributed does; zinc.initialize calls it unless dist_init_required=False;
_torch_dist.py says how the ranks meet). zinc's own communication never goes through them. As in
DeepSpeed, a collective before that set-up raises; get_rank and get_world_size then answer from
the launcher's world (zinc's ranks as mpirun, torchrun or srun started them), which is the
same rank and size torch.distributed gets."""
import torch.distributed as _td

from . import _world
from .engine import init_distributed  # noqa: F401  (DeepSpeed's deepspeed.comm.init_distributed)

ReduceOp = _td.ReduceOp if _td.is_available() else None


def is_available():
    return _td.is_available()


def is_initialized():
    """Whether torch.distributed's process group is set up (DeepSpeed's cdb.is_initialized())."""
    return _td.is_available() and _td.is_initialized()


def _need(what):
    if not is_initialized():
        raise RuntimeError(f"zinc.comm.{what}: torch.distributed is not set up; call "
                           "zinc.init_distributed() or zinc.initialize() first (with "
                           "dist_init_required not False)")


def get_rank(group=None):
    if is_initialized():
        return _td.get_rank(group) if group is not None else _td.get_rank()
    return _world.rank()


def get_world_size(group=None):
    if is_initialized():
        return _td.get_world_size(group) if group is not None else _td.get_world_size()
    return _world.world_size()


def get_local_rank():
    """This process's index on its node (zinc.local_rank(): $LOCAL_RANK, else the MPI launcher's
    or Slurm's node-local rank, else 0)."""
    return _world.local_rank()


def get_global_rank(group=None, group_rank=0):
    _need("get_global_rank")
    if group is None:
        return group_rank
    public = getattr(_td, "get_global_rank", None)       # torch 2.x; 1.13 has the private one
    if public is not None:
        return public(group, group_rank)
    return _td.distributed_c10d._get_global_rank(group, group_rank)


def barrier(group=None, async_op=False, device_ids=None):
    _need("barrier")
    kw = {"device_ids": device_ids} if device_ids is not None else {}
    return _td.barrier(group=group, async_op=async_op, **kw)


def all_reduce(tensor, op=None, group=None, async_op=False):
    _need("all_reduce")
    return _td.all_reduce(tensor, op=_td.ReduceOp.SUM if op is None else op, group=group,
                          async_op=async_op)


def inference_all_reduce(tensor, op=None, group=None):
    return all_reduce(tensor, op, group)


def broadcast(tensor, src, group=None, async_op=False):
    _need("broadcast")
    return _td.broadcast(tensor, src, group=group, async_op=async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    _need("all_gather")
    return _td.all_gather(tensor_list, tensor, group=group, async_op=async_op)


def all_gather_into_tensor(output_tensor, tensor, group=None, async_op=False):
    """DeepSpeed's allgather_fn route: torch's all_gather_into_tensor where torch has it, else
    all_gather into views of the output (torch 1.13's gloo has no _all_gather_base)."""
    _need("all_gather_into_tensor")
    fn = getattr(_td, "all_gather_into_tensor", None)
    if fn is not None and _td.get_backend(group) != "gloo":
        return fn(output_tensor, tensor, group=group, async_op=async_op)
    n = get_world_size(group)
    return _td.all_gather(list(output_tensor.view(n, -1).unbind(0)), tensor.reshape(-1),
                          group=group, async_op=async_op)


def reduce(tensor, dst, op=None, group=None, async_op=False):
    _need("reduce")
    return _td.reduce(tensor, dst, op=_td.ReduceOp.SUM if op is None else op, group=group,
                      async_op=async_op)


def new_group(ranks):
    _need("new_group")
    return _td.new_group(ranks)


def destroy_process_group(group=None):
    if is_initialized():
        _td.destroy_process_group(group)


def get_backend(group=None):
    _need("get_backend")
    return _td.get_backend(group)


def log_summary(show_straggler=False):
    """DeepSpeed's comms-logger summary: zinc has no comms logger (the config's comms_logger
    is accepted with a warning), so there is nothing to print."""


__all__ = ["init_distributed", "is_available", "is_initialized", "get_rank", "get_world_size",
           "get_local_rank", "get_global_rank", "barrier", "all_reduce", "inference_all_reduce",
           "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "new_group",
           "destroy_process_group", "get_backend", "log_summary", "ReduceOp"]
