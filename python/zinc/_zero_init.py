"""_zero_init.py — the parameters zinc.zero.Init partitioned at construction: what each rank keeps
of them until zinc.initialize hands their values to an engine.

Why: without it every rank builds the whole model before initialize shards it, so construction
needs the full model's memory on each rank. Inside zinc.zero.Init, at the end of each module's
constructor, every floating-point parameter of the module not yet partitioned is:
- made the same on every rank: rank 0's values are broadcast (as DeepSpeed's Init does, so the
  ranks need not be seeded alike; initialize takes rank 0's values in any case);
- cut into world-size equal pieces of its flattened values (the last ones shorter or empty), of
  which this rank keeps piece `rank` (`Held.piece`, in the parameter's dtype and device);
- left with a one-element "mark" in place of its data: `param.data` is that element seen with
  the parameter's shape and zero strides, so the shape, dtype and device still read right, the
  memory is one element, and the element is NaN so that a forward run on the unbuilt model
  gives NaN rather than plausible numbers.

A write to a partitioned parameter would be lost (the values are in the pieces), so it is made
to show: most in-place ops on a zero-stride tensor raise in torch ("more than one element of the
written-to tensor refers to a single memory location"), and the rest (fill_, zero_, a slice
written) change the NaN, which `check_untouched` finds before initialize or GatheredParameters
read the pieces. Writes after partitioning go through Module.apply or transformers'
Module.smart_apply (both of which Init wraps) or inside zinc.zero.GatheredParameters (zero.py):
both gather the pieces into a full `param.data` and cut rank 0's (modifier_rank's) values into
new pieces afterwards.

Collectives go through zinc's launcher world (zinc_world_broadcast: mpirun's MPI world, or a
world of one). Under torchrun or srun zinc's ranks meet only inside an engine (its NCCL world),
so there they go through torch.distributed over the same ranks, set up as DeepSpeed's Init does
(init_distributed: env:// from MASTER_ADDR/MASTER_PORT; NCCL on this rank's GPU when torch sees
one, else gloo). Every rank must build the same modules in the same order, as under DeepSpeed.
"""
import ctypes
import math
import weakref

import torch

from ._lib import ZINC_ERR_UNSUPPORTED, check, lib


class Held:
    """What a partitioned parameter carries (as `param._zinc_held`)."""
    __slots__ = ("shape", "piece", "mark", "where", "opened")

    def __init__(self, shape, piece, mark, where):
        self.shape = shape      # the parameter's shape (torch.Size)
        self.piece = piece      # this rank's piece of the flattened values (1-D)
        self.mark = mark        # what param.data is: one NaN element seen with the shape
        self.where = where      # "ClassName.attribute", for messages before names are known
        self.opened = False     # inside GatheredParameters: param.data the full values


# glibc's malloc_trim, called after each module is partitioned or cut again. Why: the parameter
# a module's constructor allocated is freed once cut, but the smaller piece kept is often placed
# inside the freed block, so the heap cannot shrink and the next parameter takes new memory: at
# 4 ranks bench/RESULTS.md section 10's 97 MiB GPT kept 42-133 MiB per rank without it, 31 MiB
# with it (bench/torch_zero3.py --no-trim; docs/python.md). malloc_trim gives the free pages
# inside the heap back. Absent outside glibc: not called.
try:
    _trim = ctypes.CDLL(None).malloc_trim
except (OSError, AttributeError):
    _trim = None


def _world():
    from .engine import _launcher_world     # engine imports this module: resolved at call time
    return _launcher_world()


def world_rank_size():
    w = _world()
    return max(0, lib.zinc_world_rank(w)), lib.zinc_world_size(w)


# Whether Init's collectives go through torch.distributed (torchrun, srun) rather than zinc's
# launcher world; set by can_partition, for the life of the process (the world does not change).
_via_torch = False


def can_partition():
    """Whether Init's collectives can run before an engine exists: in mpirun's MPI world or a
    world of one through zinc's world; under torchrun or srun (zinc's world cannot broadcast
    before an engine) through torch.distributed, set up here if the script has not (as
    DeepSpeed's Init calls init_distributed). Without MASTER_ADDR (srun) torch.distributed is
    not set up (with a warning): Init then leaves the model whole. Collective, so every rank
    must ask."""
    global _via_torch
    w = _world()
    if lib.zinc_world_size(w) == 1:
        return True
    dummy = ctypes.c_char()
    status = lib.zinc_world_broadcast(w, ctypes.byref(dummy), 0, 0)
    if status == 0:
        return True
    if status != ZINC_ERR_UNSUPPORTED:
        check(status)
    dist = torch.distributed
    if not dist.is_available():
        return False
    if not dist.is_initialized():
        from . import _torch_dist
        _torch_dist.setup(w)
    _via_torch = dist.is_initialized()
    return _via_torch


def _bcast(t, root):
    """A contiguous CPU tensor's bytes from rank `root` to every rank. Collective."""
    w = _world()
    if lib.zinc_world_size(w) == 1 or not t.numel():
        return
    if not _via_torch:
        check(lib.zinc_world_broadcast(w, ctypes.c_void_p(t.data_ptr()),
                                       t.numel() * t.element_size(), root))
        return
    # As bytes, so that every dtype travels (gloo has no bf16 in older torch); NCCL moves device
    # memory only: through this rank's GPU (the one its engine will use).
    raw = t.reshape(-1).view(torch.uint8)
    if torch.distributed.get_backend() == "nccl":
        from .engine import local_rank
        on_gpu = raw.to(torch.device("cuda", local_rank()))
        torch.distributed.broadcast(on_gpu, root)
        raw.copy_(on_gpu)
    else:
        torch.distributed.broadcast(raw, root)


def held(p):
    return getattr(p, "_zinc_held", None)


def _has_values(p):
    """A parameter with values to cut: floating point, not empty, not lazy."""
    return (p.is_floating_point() and p.numel() > 0
            and not isinstance(p, torch.nn.parameter.UninitializedParameter))


# Parameters on the meta device found at the end of constructors since take_meta_left: they
# have no values to cut (transformers' from_pretrained builds the model there, then gives each
# parameter its loaded values as a new whole tensor), so they are left as they are; Init's exit
# partitions them if they were loaded by then (partition_tops) and names those still on the
# meta device. id -> the first name it was found under.
_meta_left = {}

# The modules built inside the open Init at the top (no other constructor running), as weak
# references: Init's exit partitions what they hold whole by then (partition_tops).
_tops = []


def note_top(mod):
    _tops.append(weakref.ref(mod))


def partition_tops(failed):
    """At Init's exit: the parameters the top modules built inside hold whole by then and not
    yet partitioned — a model from_pretrained loaded after its construction (on the meta device,
    or replaced through load_state_dict(assign=True)), or given afterwards — are partitioned as
    at a constructor's end (rank 0's values), so that the loaded model is not kept whole on
    every rank until initialize; the meta-left record is then what is still on the meta device.
    Not after a failure (the ranks may not all have reached the exit). Collective."""
    tops, _tops[:] = list(_tops), []
    if failed:
        return
    take_meta_left()
    seen = set()
    for ref in reversed(tops):          # the outermost last built: its walk covers the rest
        mod = ref()
        if mod is not None and id(mod) not in seen:
            seen.add(id(mod))
            partition_module(mod)


def take_meta_left():
    """The names of the meta-device parameters left since the last call (see _meta_left)."""
    global _meta_left
    left, _meta_left = _meta_left, {}
    return list(left.values())


def _piece_bounds(numel, rank, size):
    chunk = math.ceil(numel / size)
    return min(numel, rank * chunk), min(numel, (rank + 1) * chunk), chunk


def mark(shape, dtype, device):
    """A one-element NaN seen with `shape` and zero strides."""
    return torch.full((1,), float("nan"), dtype=dtype, device=device).as_strided(
        shape, (0,) * len(shape))


_torch_module_apply = None    # torch.nn.Module._apply before keep_marks_on_moves


def keep_marks_on_moves():
    """Makes Module._apply, behind model.to(), .cuda(), .half(), .bfloat16() and the like, give
    a partitioned parameter a mark of the new dtype and device instead of converting its mark:
    torch converts a zero-stride tensor into a whole one (a 1 GiB NaN tensor per 1 GiB
    parameter), which a move after the construction would otherwise cost on every rank. The
    pieces stay as they are: gather() casts them to the mark's dtype. Installed by the first
    Init that partitions and kept for the life of the process, since the move comes after the
    context; every other tensor goes to torch's conversion as before."""
    global _torch_module_apply
    if _torch_module_apply is not None:
        return
    _torch_module_apply = torch.nn.Module._apply

    def _apply(module, fn, *args, **kwargs):
        if getattr(fn, "_zinc_marks", False):        # torch's _apply recursing into children
            return _torch_module_apply(module, fn, *args, **kwargs)

        def each(t):
            h = held(t) if isinstance(t, torch.nn.Parameter) else None
            if h is None or t.data.data_ptr() != h.mark.data_ptr():
                return fn(t)
            moved = fn(h.mark.as_strided((1,), (1,)))    # the conversion of one element
            h.mark = mark(h.shape, moved.dtype, moved.device)
            return h.mark

        each._zinc_marks = True
        return _torch_module_apply(module, each, *args, **kwargs)

    torch.nn.Module._apply = _apply


def _set_mark(p, shape, dtype, device):
    p.data = mark(shape, dtype, device)
    return p.data


def partition(p, where):
    """Partitions one parameter (see the module's docstring). Collective."""
    rank, size = world_rank_size()
    with torch.no_grad():
        flat = p.detach().reshape(-1)
        if size > 1:
            host = flat.to("cpu").contiguous()
            if host.data_ptr() == flat.data_ptr():
                host = host.clone()            # the broadcast must not write the parameter
            _bcast(host, 0)
            flat = host.to(p.device)
        lo, hi, _ = _piece_bounds(flat.numel(), rank, size)
        piece = flat[lo:hi].clone()
        shape = p.shape
        marked = _set_mark(p, shape, p.dtype, p.device)
    p._zinc_held = Held(shape, piece, marked, where)


def partition_module(mod):
    """At the end of a module's constructor: its parameters, its submodules' included (a
    parameter given to a submodule after the submodule was built), not yet partitioned. A
    partitioned one whose data is no longer its mark goes through check_untouched: a mark made
    whole (transformers 5's tie_weights pads a tied bias's data with nothing, `_adjust_bias`, a
    vocabulary-sized tensor of the mark's NaN) becomes the mark again, a write raises here."""
    cut = False
    for name, p in mod.named_parameters():
        where = f"{type(mod).__name__}.{name}"
        h = held(p)
        if h is not None:
            if not h.opened and p.data.data_ptr() != h.mark.data_ptr():
                check_untouched(p, where)
                cut = True
            continue
        if p.device.type == "meta":
            _meta_left.setdefault(id(p), where)
        elif _has_values(p):
            partition(p, where)
            cut = True
    if cut:
        give_back()


def give_back():
    """Free heap pages back to the system (see _trim), after parameters were cut."""
    if _trim is not None:
        _trim(0)


def check_untouched(p, name=None):
    """Raises RuntimeError naming the parameter when something wrote it after it was
    partitioned (the write would be lost). A whole `param.data` replaced by a tensor of the
    same shape that is all NaN is a move or cast of the unbuilt model (model.to(...)): it is
    taken as the parameter's new device and dtype, with the mark moved there. Local."""
    h = held(p)
    d = p.data
    if d.data_ptr() == h.mark.data_ptr() and d.shape == h.shape and not any(d.stride()):
        if bool(torch.isnan(h.mark.as_strided((1,), (1,)))):
            return
    elif d.shape == h.shape and d.is_floating_point() and bool(torch.isnan(d).all()):
        h.mark = _set_mark(p, h.shape, d.dtype, d.device)
        return
    raise RuntimeError(
        f"zinc.zero.Init: parameter '{name or h.where}' {tuple(h.shape)} was written after "
        "zinc.zero.Init partitioned it at the end of its module's constructor, and the write "
        "would be lost: write it through Module.apply(fn) inside zinc.zero.Init or inside "
        "zinc.zero.GatheredParameters(params, modifier_rank=0), or build the model outside "
        "zinc.zero.Init")


def gather(p):
    """The parameter's full values (a CPU tensor of its shape and current dtype), the pieces of
    every rank put together. Collective: every rank in the same order."""
    h = held(p)
    rank, size = world_rank_size()
    numel = h.shape.numel()
    _, _, chunk = _piece_bounds(numel, rank, size)
    out = torch.empty(chunk * size, dtype=h.mark.dtype, device="cpu")   # host, for MPI
    for q in range(size):
        seg = out[q * chunk:(q + 1) * chunk]
        if q == rank:
            seg[:h.piece.numel()].copy_(h.piece)
        _bcast(seg, q)
    return out[:numel].view(h.shape)


def restore(p):
    """The parameter whole again (its full values in `param.data` on its device), no longer
    partitioned. Collective."""
    open_full(p)
    release(p)


def release(p):
    """The parameter no longer partitioned: its values were handed to an engine (which sets
    `param.data` next). Local."""
    del p._zinc_held


def repartition(p, full):
    """New pieces from `full` (the same on every rank), `param.data` the mark again. Local."""
    h = held(p)
    rank, size = world_rank_size()
    lo, hi, _ = _piece_bounds(h.shape.numel(), rank, size)
    with torch.no_grad():
        h.piece = full.reshape(-1)[lo:hi].to(h.mark.device, h.mark.dtype).clone()
    unmark(p)


def unmark(p):
    """`param.data` the mark again, the pieces unchanged (a GatheredParameters context without
    modifier_rank, or one left by an exception). Local."""
    h = held(p)
    h.mark = _set_mark(p, h.shape, h.mark.dtype, h.mark.device)
    h.opened = False


def open_full(p):
    """Inside zinc.zero.GatheredParameters: the full values in `param.data` (on its device),
    the pieces kept. Collective."""
    p.data = gather(p).to(held(p).mark.device)
    held(p).opened = True


def close_full(params, root):
    """At the exit of zinc.zero.GatheredParameters: with `root` (modifier_rank), that rank's
    values of `params` cut into every rank's new pieces; without, the pieces as they were (the
    changes dropped, as DeepSpeed's). `param.data` the mark again either way. Collective when
    root is given: a shape or dtype the modifier changed raises ValueError on every rank, with
    nothing taken."""
    if not params:
        return
    if root is None:
        for p in params:
            unmark(p)
        return
    rank = world_rank_size()[0]
    bad = torch.zeros(1, dtype=torch.int64, device="cpu")
    if rank == root:
        for k, p in enumerate(params):
            h = held(p)
            if p.data.shape != h.shape or p.data.dtype != h.mark.dtype:
                bad[0] = k + 1
                break
    _bcast(bad, root)
    if bad[0]:
        for p in params:
            unmark(p)
        h = held(params[int(bad[0]) - 1])
        raise ValueError(f"zinc.zero.GatheredParameters: rank {root} (modifier_rank) changed "
                         f"the shape or dtype of parameter '{h.where}' {tuple(h.shape)}; "
                         "nothing was taken")
    for p in params:
        full = p.detach().to("cpu").contiguous()   # on the others, written by the broadcast
        _bcast(full, root)
        repartition(p, full)
        del full
    give_back()
