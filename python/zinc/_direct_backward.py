"""_direct_backward.py — `loss.backward()` called directly, in place of `engine.backward(loss)`.

DeepSpeed 0.19.8 accepts a plain torch backward at ZeRO stages 1-3 (its engine.py,
`_backward_prologue` and `register_output_backward_hooks`): every forward puts a hook on each
output tensor; the first of them to fire in a backward runs the work `engine.backward` does
before autograd. fp16's loss scale is the caller's: `engine.scale(loss).backward()`; a dynamic
scale without it is refused. Stage 0 refuses a direct backward (its optimizers are not
DeepSpeed's ZeROOptimizer).

zinc does the same with its own hand-over: the first output hook of a backward runs
`_backward_begin` (what `engine.backward` does before autograd) and queues `_direct_end` on
autograd's engine, which runs it once the whole graph is done (`_backward_end`: the groups not
handed over yet). A direct backward that raises midway never reaches its end; the next forward,
backward, step, zero_grad or load finds it open and closes it as `engine.backward` closes one
that raised (`_settle_direct`).

The division by gradient_accumulation_steps that engine.backward puts on the loss is put on
each trained parameter's gradient instead (a hook on the parameter, before autograd adds it
into `.grad`), once per contribution: the gradient is engine.backward's however the outputs
are used. DeepSpeed's hooks divide the gradient reaching each output: where one output feeds
another (transformers' hidden states, returned beside the logits made from them), or the
engine's output goes through the engine again, a gradient is divided twice or more (a
reviewer's GPT-2 with output_hidden_states: DeepSpeed's stage 2 off its own engine.backward
from the third step; its stage 3, which wraps each output anew, not). For one output and an
accumulation that is a power of two the two divisions give the same bits.

The output hooks fire for any autograd pass through the outputs, `torch.autograd.grad` too (a
gradient penalty computed before the loss's backward). Such a pass, in which no trained
parameter gets a gradient, is not the micro-step's backward: it is left as it found the step
(`_direct_end`), and its values are plain torch's. (DeepSpeed's hooks divide that pass too: its
penalty `grad(out.sum(), x)` squared came out 1/4 of torch's at accumulation 2.) The refusals
(stage 0, fp16 without engine.scale) wait for the first parameter gradient for the same reason.

Under `engine.backward` the hooks do nothing: the backward began already and its loss carries
the division.
"""
import weakref

import torch

from ._lib import lib


class _Direct:
    """A direct backward's state, kept off the Engine (a torch Module, whose attribute writes
    cost ~3 us): whether one is open, whether its refusal checks ran, and whether the
    parameter hooks exist."""
    __slots__ = ("open", "checked", "hooked", "counted", "scaled", "output_hook")

    def __init__(self):
        self.open = self.checked = self.hooked = self.counted = self.scaled = False
        self.output_hook = None     # the hook every forward puts on its outputs (one closure)


def _tensors(out):
    """The tensors of a forward's output (a tensor, or lists, tuples and dicts of them, as
    DeepSpeed's hook manager walks them: a ModelOutput is a dict)."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from _tensors(v)
    elif isinstance(out, dict):
        for v in out.values():
            yield from _tensors(v)


class _DirectBackwardMixin:
    """The Engine's support of a backward it did not start."""

    def _watch_outputs(self, out):
        """After a forward with autograd on: a hook on every output tensor autograd will give a
        gradient (one with grad_fn). The hook holds the engine weakly: the graph may outlive
        it."""
        if not torch.is_grad_enabled():
            return
        hook = self._direct.output_hook
        if hook is None:
            hook = self._direct.output_hook = self._output_hook(weakref.ref(self))
        for t in _tensors(out):
            if t.grad_fn is not None:
                t.register_hook(hook)

    @staticmethod
    def _output_hook(engine):
        def hook(_grad):
            eng = engine()
            if eng is not None and not eng._engine_backward and not eng._direct.open:
                eng._direct_begin()
        return hook

    def _direct_begin(self):
        """The first output hook of a backward engine.backward did not start."""
        self._alive()
        d = self._direct
        d.counted = self._backward_begin()
        d.open, d.checked = True, False
        if not d.hooked:
            self._hook_parameters()
        # runs after the whole graph (reentrant checkpointing's inner backwards included)
        torch.autograd.Variable._execution_engine.queue_callback(self._direct_end)

    def _hook_parameters(self):
        """Once, at the engine's first direct backward: a hook on each trained parameter that,
        inside a direct backward, divides each gradient reaching it by the accumulation steps
        (after the refusal checks, at the backward's first). Holds the engine weakly, as the
        model holds the hook."""
        ref = weakref.ref(self)

        def hook(grad):
            eng = ref()
            if eng is None:
                return None
            d = eng._direct
            if not d.open or eng._engine_backward:
                return None
            if not d.checked:
                eng._direct_check()
            return grad / eng._ga if eng._ga != 1 else None

        for G in self._g:
            for _, _, p in G.params:
                self._hooks.append(p.register_hook(hook))
        self._direct.hooked = True

    def _direct_check(self):
        """At a direct backward's first parameter gradient, before it is added anywhere."""
        if self._stage == 0:
            raise RuntimeError(
                "zinc: loss.backward() called directly is not supported at ZeRO stage 0 (as in "
                "DeepSpeed 0.19.8, whose stage-0 optimizers are not ZeRO optimizers): use "
                "engine.backward(loss)")
        if self._code == 1 and not self._direct.scaled and self.dynamic_loss_scale():
            # (DeepSpeed 0.19.8 raises the same at the end of autograd, _backward_post_hook)
            raise RuntimeError(
                "zinc: loss scaling is required for this configuration (fp16 with a dynamic loss "
                "scale), but backward() was called directly without scaling the loss: use "
                "engine.backward(loss), or engine.scale(loss).backward()")
        self._direct.checked = True

    def _direct_end(self):
        d = self._direct
        if not d.open:
            return
        d.open = False
        self._in_backward = False
        if not self._no_sync and not any(G.got or G.late for G in self._g):
            # No parameter got a gradient: a torch.autograd.grad through the outputs (a
            # gradient penalty, before the loss's backward), not a micro-step's backward. It
            # leaves the micro-step as it found it (engine.backward's or a direct backward
            # follows). (In no_sync the groups record nothing: every backward there counts.)
            self._interrupted, self._resuming = self._resuming, False
            if d.counted:
                self._unmanaged_backwards -= 1
            return
        d.scaled = False
        self._backward_end()

    def _settle_direct(self):
        """A direct backward that raised midway (its _direct_end never ran) is closed as
        engine.backward closes one: the next backward continues its micro-step."""
        d = self._direct
        if d.open:
            d.open = False
            self._backward_failed(d.counted)

    def scale(self, loss):
        """DeepSpeed's engine.scale: the loss times the fp16 loss scale (1 in bf16 and fp32), for
        a backward the caller runs itself (`engine.scale(loss).backward()`); at ZeRO stage 0 the
        loss as it is (DeepSpeed's stage-0 optimizers are not ZeRO optimizers; a direct backward
        is refused there anyway). The accumulation division is the parameter hooks'."""
        self._alive()
        if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.grad_fn is not None):
            raise ValueError("zinc: engine.scale(loss): the loss must be a one-element tensor with "
                             "grad_fn (for any other tensor call tensor.backward(gradient))")
        self._direct.scaled = True
        if self._stage == 0:
            return loss
        return loss * lib.zinc_engine_loss_scale(self._e)
