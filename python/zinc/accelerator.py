"""zinc.accelerator — DeepSpeed's `from deepspeed.accelerator import get_accelerator` (0.19.8's
abstract_accelerator.py names and meanings), for the device calls scripts make through it.

zinc's front-end trains on the CPU or on CUDA devices (docs/python.md), so there are two
accelerators: "cuda" when torch sees a CUDA device, else "cpu" (DeepSpeed picks the same two
that way on such a machine; $DS_ACCELERATOR may name either, as DeepSpeed's). Each method is
torch's own call for that device, as DeepSpeed's CUDA_Accelerator and CPU_Accelerator make it;
where DeepSpeed's CPU accelerator needs a package zinc does not depend on (psutil, oneCCL, NUMA
tools) the answer comes from the process itself, and the docstring says so."""
import contextlib
import functools
import os
import resource

import torch
import torch.distributed


class ZincAccelerator:
    """One device kind, "cuda" or "cpu". Methods take DeepSpeed's arguments."""

    def __init__(self, name):
        if name not in ("cuda", "cpu"):
            raise ValueError(f"zinc.accelerator: accelerator {name!r}: zinc trains on 'cuda' or "
                             "'cpu'")
        self._name = name
        self._cuda = name == "cuda"
        self._peak_rss = 0

    # ---- devices ----
    def device_name(self, device_index=None):
        """'cuda' or 'cuda:<index>'; always 'cpu' on the CPU (DeepSpeed's)."""
        if self._cuda and device_index is not None:
            return f"cuda:{device_index}"
        return self._name

    def device(self, device_index=None):
        """torch.device('cuda', index); None on the CPU, as DeepSpeed's CPU accelerator answers
        (`model.to(None)` leaves the model where it is)."""
        return torch.device("cuda", device_index) if self._cuda else None

    def set_device(self, device_index):
        if self._cuda:
            torch.cuda.set_device(device_index)

    def current_device(self):
        """The CUDA device index; on the CPU this process's local rank (DeepSpeed's reads
        $LOCAL_RANK; zinc's launchers' variables too, as zinc.local_rank())."""
        if self._cuda:
            return torch.cuda.current_device()
        from ._world import local_rank
        return local_rank()

    def current_device_name(self):
        return f"cuda:{torch.cuda.current_device()}" if self._cuda else "cpu"

    def device_count(self):
        """CUDA devices torch sees; on the CPU, $LOCAL_SIZE when set (DeepSpeed's), else 1: one
        CPU device (DeepSpeed's counts NUMA nodes with numactl, which zinc does not use)."""
        if self._cuda:
            return torch.cuda.device_count()
        return int(os.environ.get("LOCAL_SIZE", "0") or 0) or 1

    def is_available(self):
        return torch.cuda.is_available() if self._cuda else True

    def synchronize(self, device_index=None):
        if self._cuda:
            torch.cuda.synchronize(device_index)

    def is_synchronized_device(self):
        return not self._cuda

    def use_host_timers(self):
        return not self._cuda

    def communication_backend_name(self):
        """The torch.distributed backend: the script's process group's once it is set up
        (zinc.init_distributed's choice, dist_backend's, or the script's own), else the one
        zinc.init_distributed would choose (_torch_dist.default_backend: 'nccl' with a GPU the
        ranks do not share, else 'gloo'), whichever device kind this accelerator is.
        DeepSpeed's answers by device kind ('nccl', or 'ccl' with oneCCL) and its
        init_distributed picks that; here the two cannot disagree either."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_backend()
        from ._torch_dist import default_backend
        return default_backend()

    # ---- dtypes ----
    def is_bf16_supported(self):
        if self._cuda and torch.cuda.is_available():
            return torch.cuda.is_bf16_supported()
        return True

    def is_fp16_supported(self):
        """CUDA: compute capability 7 or more (DeepSpeed's rule). CPU: torch 2 or later, whose
        Half CPU kernels zinc's fp16 mode needs (torch 1.13 fails in its own matmul)."""
        if self._cuda and torch.cuda.is_available():
            return torch.cuda.get_device_capability()[0] >= 7
        if self._cuda:
            return True
        return int(torch.__version__.split(".")[0]) >= 2

    def is_fp64_supported(self):
        return True

    def supported_dtypes(self):
        out = [torch.float]
        if self.is_fp16_supported():
            out.append(torch.half)
        if self.is_bf16_supported():
            out.append(torch.bfloat16)
        return out

    # ---- random numbers ----
    def random(self):
        return torch.random

    def manual_seed(self, seed):
        return torch.cuda.manual_seed(seed) if self._cuda else torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        return torch.cuda.manual_seed_all(seed) if self._cuda else torch.manual_seed(seed)

    def initial_seed(self):
        return torch.cuda.initial_seed() if self._cuda else torch.initial_seed()

    def get_rng_state(self, device_index=None):
        if self._cuda:
            return torch.cuda.get_rng_state(device_index or "cuda")
        return torch.get_rng_state()

    def set_rng_state(self, new_state, device_index=None):
        if self._cuda:
            return torch.cuda.set_rng_state(new_state, device_index or "cuda")
        return torch.set_rng_state(new_state)

    # ---- streams and events (None on the CPU, as DeepSpeed's) ----
    @property
    def Stream(self):
        return torch.cuda.Stream if self._cuda else None

    @property
    def Event(self):
        return torch.cuda.Event if self._cuda else None

    def stream(self, stream):
        return torch.cuda.stream(stream) if self._cuda else contextlib.nullcontext()

    def current_stream(self, device_index=None):
        return torch.cuda.current_stream(device_index) if self._cuda else None

    def default_stream(self, device_index=None):
        return torch.cuda.default_stream(device_index) if self._cuda else None

    # ---- memory ----
    def empty_cache(self):
        if self._cuda:
            torch.cuda.empty_cache()

    def _rss(self):
        """This process's resident bytes (/proc/self/statm; DeepSpeed's CPU accelerator asks
        psutil), and the largest seen since the last reset."""
        try:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self._peak_rss = max(self._peak_rss, rss)
        return rss

    def memory_allocated(self, device_index=None):
        return torch.cuda.memory_allocated(device_index) if self._cuda else self._rss()

    def max_memory_allocated(self, device_index=None):
        if self._cuda:
            return torch.cuda.max_memory_allocated(device_index)
        self._rss()
        return self._peak_rss

    def reset_max_memory_allocated(self, device_index=None):
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(device_index)
        else:
            self._peak_rss = 0

    reset_peak_memory_stats = reset_max_memory_allocated

    def memory_stats(self, device_index=None):
        """torch.cuda.memory_stats with CUDA; on the CPU the two entries DeepSpeed's CPU
        accelerator gives (the resident bytes and their peak)."""
        if self._cuda:
            return torch.cuda.memory_stats(device_index)
        return {"allocated_bytes.all.current": self._rss(),
                "allocated_bytes.all.peak": self._peak_rss}

    def memory_reserved(self, device_index=None):
        return torch.cuda.memory_reserved(device_index) if self._cuda else self._rss()

    def total_memory(self, device_index=None):
        if self._cuda:
            return torch.cuda.get_device_properties(device_index or 0).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def available_memory(self, device_index=None):
        if self._cuda:
            free, _ = torch.cuda.mem_get_info(device_index)
            return free
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")

    def pin_memory(self, tensor, make_copy=True, match_shape=True, align_bytes=1):
        """Page-locked host copy with CUDA; the tensor itself on the CPU (DeepSpeed's no-op).
        DeepSpeed 0.19.8's keywords (make_copy, match_shape: its native pinned pool's, which
        zinc has not) and the older align_bytes are taken."""
        return tensor.pin_memory() if self._cuda else tensor

    def default_generator(self, device_index):
        return (torch.cuda.default_generators[device_index] if self._cuda
                else torch.default_generator)

    # ---- tensor types (Megatron-style scripts): torch's CPU classes, or on CUDA a
    # torch.tensor of the dtype on the device, as DeepSpeed's accelerators give them ----
    def _tensor_type(self, cpu_type, dtype):
        if self._cuda:
            return functools.partial(torch.tensor, dtype=dtype, device="cuda")
        return cpu_type

    BFloat16Tensor = property(lambda self: self._tensor_type(torch.BFloat16Tensor,
                                                             torch.bfloat16))
    ByteTensor = property(lambda self: self._tensor_type(torch.ByteTensor, torch.uint8))
    DoubleTensor = property(lambda self: self._tensor_type(torch.DoubleTensor, torch.double))
    FloatTensor = property(lambda self: self._tensor_type(torch.FloatTensor, torch.float))
    HalfTensor = property(lambda self: self._tensor_type(torch.HalfTensor, torch.half))
    IntTensor = property(lambda self: self._tensor_type(torch.IntTensor, torch.int))
    LongTensor = property(lambda self: self._tensor_type(torch.LongTensor, torch.long))

    def is_pinned(self, tensor):
        return tensor.is_pinned() if self._cuda else False

    def on_accelerator(self, tensor):
        """Whether the tensor is on this accelerator's device kind."""
        return tensor.device.type == self._name

    # ---- profiling ranges: no-ops on the CPU, NVTX with CUDA ----
    def range_push(self, msg, domain=None, category=None):
        if self._cuda:
            torch.cuda.nvtx.range_push(msg)

    def range_pop(self, domain=None):
        if self._cuda:
            torch.cuda.nvtx.range_pop()

    def lazy_call(self, callback):
        return callback()

    def __repr__(self):
        return f"<zinc accelerator {self._name}>"


_accelerator = None


def get_accelerator():
    """The process's accelerator, made at the first call: $DS_ACCELERATOR when it names 'cuda'
    or 'cpu' (another name raises ValueError naming it), else 'cuda' when torch sees a CUDA
    device, else 'cpu'."""
    global _accelerator
    if _accelerator is None:
        name = os.environ.get("DS_ACCELERATOR") or (
            "cuda" if torch.cuda.is_available() else "cpu")
        _accelerator = ZincAccelerator(name)
    return _accelerator


def set_accelerator(accel):
    """DeepSpeed's set_accelerator: use this object from now on."""
    global _accelerator
    _accelerator = accel


__all__ = ["get_accelerator", "set_accelerator", "ZincAccelerator"]
