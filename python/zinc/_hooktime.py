"""_hooktime.py — the host time the engine's torch hooks take (engine.hook_seconds()).

On a GPU, a training step whose kernels are short can be limited by the host: the Python work of
zinc's hooks (stage 3's gather, copy and release per module, the gradient hand-over per group)
runs between torch's kernel launches. To tell that from a device-side wait (issue 38: GPT-2 at
stage 3 ran at 0.71x torch where the 1B Llama ran at 0.99x), the engine sums the wall time spent
inside its hooks. Only the outermost timed call counts (a gather inside a forward pre-hook is
part of that hook), so nested calls are not counted twice; perf_counter costs about 0.1 us a call.
"""
import functools
import time

_now = time.perf_counter


def timed(fn):
    """A method of the Engine whose wall time goes into self._hook_s (unless a timed call of the
    same engine is already running)."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if self._hook_depth:
            return fn(self, *args, **kwargs)
        self._hook_depth = 1
        t0 = _now()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._hook_s += _now() - t0
            self._hook_depth = 0
    return wrapper
