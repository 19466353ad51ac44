"""_hooktime.py — the host time the engine's torch hooks take (engine.hook_seconds()).

On a GPU, a training step whose kernels are short can be limited by the host: the Python work of
zinc's hooks (stage 3's gather, copy and release per module, the gradient hand-over per group)
runs between torch's kernel launches. To tell that from a device-side wait (issue 38: GPT-2 at
stage 3 ran at 0.71x torch where the 1B Llama ran at 0.99x), the engine sums the wall time spent
inside its hooks. Only the outermost timed call counts (a gather inside a forward pre-hook is
part of that hook), so nested calls are not counted twice; perf_counter costs about 0.1 us a call.

The sum and the nesting depth live in a HookClock, not on the Engine: the Engine is a
torch.nn.Module, whose __setattr__ costs about 3 us a call, and the timer set two attributes per
hook, outside the time it measured (bench/stage3_hooks.py; docs/python.md gives the figures).
"""
import functools
import time

_now = time.perf_counter


class HookClock:
    """Host seconds inside timed hooks, and whether one is running (its nesting depth)."""
    __slots__ = ("seconds", "depth")

    def __init__(self):
        self.seconds = 0.0
        self.depth = 0


def timed(fn):
    """A method of the Engine whose wall time goes into self._hook_clock (unless a timed call of
    the same engine is already running)."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        clock = self._hook_clock
        if clock.depth:
            return fn(self, *args, **kwargs)
        clock.depth = 1
        t0 = _now()
        try:
            return fn(self, *args, **kwargs)
        finally:
            clock.seconds += _now() - t0
            clock.depth = 0
    return wrapper
