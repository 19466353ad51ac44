"""Ctrl-C held back while a zinc call and the front-end's record of it change together.

A KeyboardInterrupt is raised between two bytecodes of the main thread: one that came right
after a zinc call returned (zinc_step, zinc_grads_ready, zinc_gather, ...) and before the lines
that record it (the step counters, a group's `done`, `live` and its zinc_release) left the
engine disagreeing with zinc for good: every later call was refused ("already handed over",
"already gathered", "call step()"). Inside `held()` the first SIGINT is only noted, and the
script's handler runs when the outermost `held()` ends, once both sides agree. A second SIGINT
inside goes through at once: a user who presses Ctrl-C twice wants out.

How: the outermost `held()` puts zinc's handler in place and its end puts the script's back
(through the C module `_signal`: ~1.2 us a section; `signal.signal`'s enum conversions cost
3 us a call). Outside zinc's sections the handler is the script's own, so a handler a script
installs, chains or saves and restores sees nothing of zinc's (a handler installed for good
and re-wrapped at each section made a chaining script handler call itself forever). Only
the main thread installs handlers, and only it receives KeyboardInterrupt: elsewhere
(autograd's device threads run a CUDA backward's hand-over hooks) `held()` does nothing.
SIG_IGN and SIG_DFL are left as they are: the first drops the signal, the second ends the
process at once, a zinc call included, where a Python handler would wait for it to return."""

import signal
import threading

try:                 # the C module's: signal's wrappers convert to enums, ~3 us a call
    from _signal import getsignal as _getsignal, signal as _setsignal
except ImportError:  # pragma: no cover (CPython has it)
    _getsignal, _setsignal = signal.getsignal, signal.signal

_MAIN = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
_depth = 0          # nesting of held() in the main thread
_before = None      # the script's handler while zinc's is in place
_pending = None     # (signum, frame) of a SIGINT noted inside held()


def _on_sigint(signum, frame):
    global _pending
    before = _before if callable(_before) else signal.default_int_handler
    if _depth == 0:              # left in place outside a section: the script's back, and run
        _pending = None
        _setsignal(_SIGINT, before)
        before(signum, frame)
    elif _pending is not None:   # the second one: at once
        _pending = None
        before(signum, frame)
    else:
        _pending = (signum, frame)


class _Held:
    __slots__ = ("mine",)

    def __enter__(self):
        global _depth, _before, _pending
        self.mine = False
        if threading.get_ident() != _MAIN:
            return self
        try:
            now = _getsignal(_SIGINT)
        except (ValueError, OSError):          # an interpreter without signals
            return self
        if _depth > 0 and now is _on_sigint:   # inside another section
            _depth += 1
            self.mine = True
            return self
        # The outermost. A signal that cut a section's entry or exit short can leave zinc's
        # handler in place, or a count without it (a stress loop of timed SIGINTs found the
        # first: from then on no section held anything): both start again here.
        if now is _on_sigint:
            now = _before
        if not callable(now):                  # SIG_IGN, SIG_DFL, None
            _depth = 0
            return self
        _before, _pending = now, None
        try:
            _depth = 1                         # first: a SIGINT right after the swap is held
            _setsignal(_SIGINT, _on_sigint)
        except BaseException:                  # one before it: the script's handler raised
            _depth = 0
            _setsignal(_SIGINT, now)
            raise
        self.mine = True
        return self

    def __exit__(self, *exc):
        global _depth, _pending
        if not self.mine:
            return False
        if _depth > 1:
            _depth -= 1
            return False
        before, pending = _before, None
        try:
            _setsignal(_SIGINT, before)     # from here a SIGINT goes to the script's handler
        finally:
            _depth = 0
            pending, _pending = _pending, None
        if pending is not None:
            before(*pending)
        return False


def held():
    """A with-block in which a SIGINT waits for the block's end (see the module's text)."""
    return _Held()
