"""zinc.comm — DeepSpeed's deepspeed.comm (`import deepspeed.comm as dist`) for the collectives a
script makes itself: its rank for logging, a barrier, the mean loss over ranks.

They are torch.distributed's, over the process group zinc.init_distributed sets up (as
DeepSpeed's init_distributed does; zinc.initialize calls it unless dist_init_required=False;
_torch_dist.py says how the ranks meet). zinc's own communication never goes through them. As in
DeepSpeed, a collective before that set-up raises; get_rank and get_world_size then answer from
the launcher's world (zinc's ranks as mpirun, torchrun or srun started them), which is the
same rank and size torch.distributed gets.

DeepSpeed's comms-logger keywords on each collective (prof, log_name, debug) are taken and
dropped: they only log, and zinc has no comms logger (_collective)."""
import functools
import sys

import torch
import torch.distributed as _td

from . import _world
from .engine import init_distributed  # noqa: F401  (DeepSpeed's deepspeed.comm.init_distributed)

ReduceOp = _td.ReduceOp if _td.is_available() else None
# DeepSpeed's functions live in deepspeed/comm/comm.py, which scripts also import
# (`from deepspeed.comm import comm`; zinc.as_deepspeed maps deepspeed.comm.comm here): the
# import finds this module as its own attribute, where Python looks for a submodule's name.
comm = sys.modules[__name__]


def is_available():
    return _td.is_available()


def is_initialized():
    """Whether torch.distributed's process group is set up (DeepSpeed's cdb.is_initialized())."""
    return _td.is_available() and _td.is_initialized()


def _collective(fn):
    """A collective of DeepSpeed's deepspeed.comm: refused before the set-up (_need, naming it),
    and DeepSpeed's comms-logger keywords (prof, log_name, debug) accepted and dropped (a script
    passing them got TypeError)."""
    @functools.wraps(fn)
    def call(*args, prof=False, log_name=None, debug=None, **kwargs):
        _need(fn.__name__)
        return fn(*args, **kwargs)
    return call


def _torch_collective(name):
    """torch.distributed.<name> as DeepSpeed's comm.py passes it through to its backend: the
    same name and arguments (an operation the backend lacks, gloo's all_to_all, raises torch's
    error, as under DeepSpeed)."""
    def call(*args, **kwargs):
        return getattr(_td, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"DeepSpeed's deepspeed.comm.{name}: torch.distributed.{name}."
    return _collective(call)


def _outside(group):
    """Whether this rank is not in `group`: torch's collectives do nothing there and return
    None, and so must zinc's own forms (torch's get_backend(group) raised for them)."""
    return group is not None and _td.distributed_c10d._rank_not_in_group(group)


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


@_collective
def barrier(group=None, async_op=False, device_ids=None):
    kw = {"device_ids": device_ids} if device_ids is not None else {}
    return _td.barrier(group=group, async_op=async_op, **kw)


@_collective
def all_reduce(tensor, op=None, group=None, async_op=False):
    return _td.all_reduce(tensor, op=_td.ReduceOp.SUM if op is None else op, group=group,
                          async_op=async_op)


@_collective
def all_reduce_coalesced(tensors, op=None, group=None, async_op=False):
    """DeepSpeed's: torch's all_reduce_coalesced (each tensor of the list reduced across ranks
    in one call); DeepSpeed's RuntimeError where torch has none."""
    fn = getattr(_td, "all_reduce_coalesced", None)
    if fn is None:
        raise RuntimeError(f"zinc.comm.all_reduce_coalesced: torch {torch.__version__} has no "
                           "torch.distributed.all_reduce_coalesced")
    return fn(tensors, op=_td.ReduceOp.SUM if op is None else op, group=group,
              async_op=async_op)


@_collective
def inference_all_reduce(tensor, op=None, group=None):
    return all_reduce(tensor, op, group)


broadcast = _torch_collective("broadcast")
all_gather = _torch_collective("all_gather")


@_collective
def all_gather_into_tensor(output_tensor, tensor, group=None, async_op=False):
    """DeepSpeed's allgather_fn route: torch's all_gather_into_tensor where torch has it, else
    all_gather into views of the output (torch 1.13's gloo has no _all_gather_base)."""
    if _outside(group):
        return None
    fn = getattr(_td, "all_gather_into_tensor", None)
    if fn is not None and _td.get_backend(group) != "gloo":
        return fn(output_tensor, tensor, group=group, async_op=async_op)
    n = get_world_size(group)
    return _td.all_gather(list(output_tensor.view(n, -1).unbind(0)), tensor.reshape(-1),
                          group=group, async_op=async_op)


def has_all_gather_into_tensor():
    """DeepSpeed's: whether the backend gathers into one tensor natively (zinc.comm's
    all_gather_into_tensor works either way)."""
    return hasattr(_td, "all_gather_into_tensor")


def has_reduce_scatter_tensor():
    """DeepSpeed's: whether the backend reduce-scatters one tensor natively (zinc.comm's
    reduce_scatter_tensor works either way)."""
    return hasattr(_td, "reduce_scatter_tensor")


@_collective
def reduce_scatter_tensor(output_tensor, tensor, op=None, group=None, async_op=False):
    """DeepSpeed's: rank r's output_tensor gets part r of the reduction of every rank's
    `tensor` (split along its first dimension into world-size equal parts). torch's
    reduce_scatter_tensor where the backend has it; on gloo (none) an all_reduce of a copy
    and this rank's part of it (async_op then waits, and returns a finished work)."""
    if _outside(group):
        return None
    op = _td.ReduceOp.SUM if op is None else op
    fn = getattr(_td, "reduce_scatter_tensor", None)
    if fn is not None and _td.get_backend(group) != "gloo":
        return fn(output_tensor, tensor, op=op, group=group, async_op=async_op)
    n, r = get_world_size(group), get_rank(group)
    if tensor.numel() != n * output_tensor.numel():
        raise ValueError(f"zinc.comm.reduce_scatter_tensor: the input has {tensor.numel()} "
                         f"elements, not world size {n} x the output's {output_tensor.numel()}")
    whole = tensor.detach().clone().reshape(-1)
    avg = op == getattr(_td.ReduceOp, "AVG", None)     # gloo has no AVG: a sum, divided
    if avg and not output_tensor.is_floating_point():
        # (the division's float result was cast into the integer output: 0.5 became 0, where
        # torch's and DeepSpeed's raise)
        raise RuntimeError(f"zinc.comm.reduce_scatter_tensor: ReduceOp.AVG into a "
                           f"{output_tensor.dtype} output: the mean's result type Float can't "
                           f"be cast to it (as torch refuses); reduce a floating tensor")
    _td.all_reduce(whole, op=_td.ReduceOp.SUM if avg else op, group=group)
    part = whole.view(n, -1)[r]
    output_tensor.view(-1).copy_(part / n if avg else part)
    return _Done(output_tensor) if async_op else None


class _Done:
    """The work an emulated asynchronous collective returns: finished already, with torch's
    Work methods a script calls (its future's value, as torch's reduce_scatter work gives:
    the list holding the output)."""

    def __init__(self, output):
        self._output = output

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def synchronize(self):
        return None

    def result(self):
        return [self._output]

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result([self._output])
        return fut


def all_gather_object(object_list, obj, group=None):
    _need("all_gather_object")
    return _td.all_gather_object(object_list, obj, group=group)


def broadcast_object_list(object_list, src, group=None, device=None):
    _need("broadcast_object_list")
    kw = {"device": device} if device is not None else {}
    return _td.broadcast_object_list(object_list, src, group=group, **kw)


def get_world_group():
    """DeepSpeed's: the group of every rank (torch.distributed's WORLD)."""
    _need("get_world_group")
    return _td.group.WORLD


@_collective
def reduce(tensor, dst, op=None, group=None, async_op=False):
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


def log_summary(show_straggler=False, return_dict=False):
    """DeepSpeed's comms-logger summary: zinc has no comms logger (the config's comms_logger
    is accepted with a warning), so there is nothing to print; with return_dict an empty
    dict (no operation logged)."""
    return {} if return_dict else None


# point-to-point and the other collectives DeepSpeed passes straight to torch.distributed
send = _torch_collective("send")
recv = _torch_collective("recv")
isend = _torch_collective("isend")
irecv = _torch_collective("irecv")
all_to_all = _torch_collective("all_to_all")
gather = _torch_collective("gather")
scatter = _torch_collective("scatter")
monitored_barrier = _torch_collective("monitored_barrier")


class P2POp:
    """DeepSpeed's: one point-to-point operation for batch_isend_irecv; op is zinc.comm's isend
    or irecv (torch's own P2POp is taken as well)."""

    def __init__(self, op, tensor, peer, group=None, tag=0):
        if op not in (isend, irecv):
            raise ValueError("zinc.comm.P2POp: op must be zinc.comm.isend or zinc.comm.irecv")
        self.op = "isend" if op is isend else "irecv"
        self.tensor, self.peer, self.group, self.tag = tensor, peer, group, tag


@_collective
def batch_isend_irecv(p2p_op_list):
    ops = [_td.P2POp(getattr(_td, op.op), op.tensor, op.peer, op.group, op.tag)
           if isinstance(op, P2POp) else op for op in p2p_op_list]
    return _td.batch_isend_irecv(ops)


@_collective
def all_to_all_single(output, tensor, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    return _td.all_to_all_single(output, tensor, output_split_sizes=output_split_sizes,
                                 input_split_sizes=input_split_sizes, group=group,
                                 async_op=async_op)


@_collective
def reduce_scatter(output, input_list, op=None, group=None, async_op=False):
    return _td.reduce_scatter(output, input_list, op=_td.ReduceOp.SUM if op is None else op,
                              group=group, async_op=async_op)


__all__ = ["init_distributed", "is_available", "is_initialized", "get_rank", "get_world_size",
           "get_local_rank", "get_global_rank", "barrier", "all_reduce", "all_reduce_coalesced",
           "inference_all_reduce",
           "broadcast", "all_gather", "all_gather_into_tensor", "has_all_gather_into_tensor",
           "has_reduce_scatter_tensor", "reduce_scatter_tensor", "all_gather_object",
           "broadcast_object_list", "get_world_group", "reduce", "new_group",
           "destroy_process_group", "get_backend", "log_summary", "ReduceOp", "send", "recv",
           "isend", "irecv", "P2POp", "batch_isend_irecv", "all_to_all_single", "all_to_all", "gather",
           "scatter", "monitored_barrier", "reduce_scatter"]
