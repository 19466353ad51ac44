"""_world.py — the launcher's world, one per process: zinc's ranks as mpirun, torchrun or srun
started them (a world of one without a launcher). Created at the first initialize or
init_distributed (engine.py), destroyed at exit after the engines that use it; with more than
one rank, an exception nothing catches aborts it, so the other ranks stop waiting for this one.
"""
import atexit
import ctypes
import os
import sys
import weakref

from ._lib import ZINC_ERR_ABORTED, ZINC_ERR_TIMEOUT, ZincError, check, lib

_world = None
_engines = weakref.WeakSet()   # live engines: destroyed before the world they use


def _destroy_world():
    global _world
    for e in list(_engines):
        e.close()
    if _world is not None:
        lib.zinc_world_destroy(_world)
        _world = None


def _launcher_world():
    """zinc's world of the launcher's ranks, created once (torch.distributed untouched)."""
    global _world
    if _world is None:
        w = ctypes.c_void_p()
        check(lib.zinc_world_create_launched(ctypes.byref(w)))
        _world = w
        atexit.register(_destroy_world)
        if lib.zinc_world_size(w) > 1:
            _abort_on_uncaught()
    return _world


# What the world learns of an exception nothing caught: its type and the start of its text.
_ABORT_WHY_CHARS = 300


def _abort_on_uncaught():
    """Chains sys.excepthook so that an exception nothing catches aborts zinc's world before
    the traceback is printed: the other ranks, blocked in a collective this rank will never
    join, then raise ZINC_ERR_ABORTED naming it within a poll interval, instead of waiting
    comm_timeout_s (300 s by default) and then the exit's grace. An exception that is itself
    zinc's abort or timeout is not sent back: the world knows."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        known = isinstance(value, ZincError) and value.status in (ZINC_ERR_ABORTED,
                                                                  ZINC_ERR_TIMEOUT)
        if _world is not None and not known:
            why = f"uncaught {kind.__name__}: {value}"
            if len(why) > _ABORT_WHY_CHARS:
                why = why[:_ABORT_WHY_CHARS - 3] + "..."
            lib.zinc_world_abort(_world, lib.zinc_world_rank(_world), why.encode(errors="replace"))
        previous(kind, value, tb)

    sys.excepthook = hook


def world_size():
    """Ranks in the launcher's world (1 without a launcher)."""
    return lib.zinc_world_size(_launcher_world())


def rank():
    """This process's rank in the launcher's world (0 without a launcher: zinc's local world
    answers -1 there, which no caller wants)."""
    return max(0, lib.zinc_world_rank(_launcher_world()))


def local_rank():
    """This process's index among the ranks of its node, from the launcher's environment:
    $LOCAL_RANK (torchrun), else the MPI launcher's node-local rank (OMPI_COMM_WORLD_LOCAL_RANK,
    MPI_LOCALRANKID), else SLURM_LOCALID, else 0. The GPU a CUDA model goes on before
    initialize (torch.cuda.set_device(zinc.local_rank()))."""
    for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if os.environ.get(var, "") != "":
            return int(os.environ[var])
    return 0
