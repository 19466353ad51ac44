"""Ctrl-C held back while a zinc call and the front-end's record of it change together.

A KeyboardInterrupt is raised between two bytecodes of the main thread: one that came right
after a zinc call returned (zinc_step, zinc_grads_ready, zinc_gather, ...) and before the lines
that record it (the step counters, a group's `done`, `live` and its zinc_release) left the
engine disagreeing with zinc for good: every later call was refused ("already handed over",
"already gathered", "call step()"). Inside `held()` the first SIGINT is only noted, and the
handler installed before runs when the outermost `held()` ends, once both sides agree. A second
SIGINT inside goes through at once: a user who presses Ctrl-C twice wants out.

How: zinc's SIGINT handler wraps the one it found (installed at the first `held()`, and again
should a script install its own later). Outside `held()` it calls that one at once, so nothing
changes there; `held()` itself counts and looks the handler up (~0.5 us; signal.signal per section
cost ~19 us, and a stage-3 step has hundreds). Only the main thread installs handlers, and only it receives
KeyboardInterrupt: elsewhere (autograd's device threads run a CUDA backward's hand-over hooks)
`held()` does nothing. SIG_IGN is left as it is; SIG_DFL is raised again, as it would end the
process."""

import os
import signal
import threading

try:                 # the C module's: signal.getsignal's enum conversion cost ~6 us a call
    from _signal import getsignal as _getsignal
except ImportError:  # pragma: no cover (CPython has it)
    _getsignal = signal.getsignal

_MAIN = threading.main_thread().ident
_depth = 0          # nesting of held() in the main thread
_before = None      # the handler zinc's wraps
_pending = None     # (signum, frame) of a SIGINT noted inside held()


def _run(handler, signum, frame):
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:    # ends the process, as it would have
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def _on_sigint(signum, frame):
    global _pending
    if _depth == 0:
        _run(_before, signum, frame)
    elif _pending is None:
        _pending = (signum, frame)
    else:                               # the second one: at once
        _pending = None
        _run(_before, signum, frame)


def _install():
    """zinc's handler in place, wrapping the current one; False where it cannot be (SIG_IGN, a
    handler not set from Python, an interpreter without signals)."""
    global _before
    try:
        now = _getsignal(signal.SIGINT)
        if now is _on_sigint:
            return True
        if now in (signal.SIG_IGN, None):
            return False
        signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):
        return False
    _before = now
    return True


class _Held:
    __slots__ = ("mine",)

    def __enter__(self):
        global _depth
        self.mine = threading.get_ident() == _MAIN and (_depth > 0 or _install())
        if self.mine:
            _depth += 1
        return self

    def __exit__(self, *exc):
        global _depth, _pending
        if not self.mine:
            return False
        _depth -= 1
        if _depth == 0 and _pending is not None:
            pending, _pending = _pending, None
            _run(_before, *pending)
        return False


def held():
    """A with-block in which a SIGINT waits for the block's end (see the module's text)."""
    return _Held()
