"""_direct_backward.py — `loss.backward()` called directly, in place of `engine.backward(loss)`.

DeepSpeed 0.19.8 accepts a plain torch backward at ZeRO stages 1-3 (its engine.py,
`_backward_prologue` and `register_output_backward_hooks`): every forward puts a hook on each
output tensor that needs a gradient; the first of them to fire in a backward runs the work
`engine.backward` does before autograd, and each divides the gradient flowing into its output by
`gradient_accumulation_steps` (as `engine.backward` divides the loss). fp16's loss scale is the
caller's: `engine.scale(loss).backward()`; a dynamic scale without it is refused. Stage 0 refuses
a direct backward (its optimizers are not DeepSpeed's ZeROOptimizer).

zinc does the same with its own hand-over: the first output hook runs `_backward_begin` (what
`engine.backward` does before autograd) and queues `_direct_end` on autograd's engine, which runs
it once the whole graph is done (`_backward_end`: the groups not handed over yet). A direct
backward that raises midway never reaches its end; the next forward, backward, step, zero_grad
or load finds it open and closes it as `engine.backward` closes one that raised
(`_settle_direct`).

Under `engine.backward` the hooks do nothing: the backward began already and its loss carries
the division.

The hooks fire for any autograd pass through the outputs, `torch.autograd.grad` too (a gradient
penalty computed before the loss's backward, under `engine.backward` as well): DeepSpeed's
divide its gradient by the accumulation steps all the same (measured, 2026-12-01: the penalty
`grad(out.sum(), x)` squared came out 1/4 of plain torch's at accumulation 2), and so do
zinc's, for DeepSpeed's numbers. A pass in which no parameter got a gradient is not taken as
the micro-step's backward (`_direct_end`).
"""
import weakref

import torch

from ._lib import lib


def _stage0_refusal():
    return RuntimeError(
        "zinc: loss.backward() called directly is not supported at ZeRO stage 0 (as in "
        "DeepSpeed 0.19.8, whose stage-0 optimizers are not ZeRO optimizers): use "
        "engine.backward(loss)")


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
        for t in _tensors(out):
            if t.grad_fn is not None:
                t.register_hook(self._output_hook(weakref.ref(self)))

    @staticmethod
    def _output_hook(engine):
        def hook(grad):
            eng = engine()
            if eng is None or eng._engine_backward:
                return None
            if not eng._direct_open:
                eng._direct_begin()
            return grad / eng._ga if eng._ga != 1 else None
        return hook

    def _direct_begin(self):
        """The first output hook of a backward engine.backward did not start."""
        self._alive()
        if self._stage == 0:
            raise _stage0_refusal()
        scaled, self._scaled_by_caller = self._scaled_by_caller, False
        if self._code == 1 and not scaled and self.dynamic_loss_scale():
            # refused before anything changes (DeepSpeed 0.19.8 raises the same at the end of
            # autograd, in _backward_post_hook)
            raise RuntimeError(
                "zinc: loss scaling is required for this configuration (fp16 with a dynamic loss "
                "scale), but backward() was called directly without scaling the loss: use "
                "engine.backward(loss), or engine.scale(loss).backward()")
        self._direct_counted = self._backward_begin()
        self._direct_open = True
        # runs after the whole graph (reentrant checkpointing's inner backwards included)
        torch.autograd.Variable._execution_engine.queue_callback(self._direct_end)

    def _direct_end(self):
        if not self._direct_open:
            return
        self._direct_open = False
        self._in_backward = False
        if not self._no_sync and not any(G.got or G.late for G in self._g):
            # No parameter got a gradient: a torch.autograd.grad through the outputs (a
            # gradient penalty, before the loss's backward), not a micro-step's backward. It
            # leaves the micro-step as it found it (engine.backward's or a direct backward
            # follows). (In no_sync the groups record nothing: every backward there counts.)
            self._interrupted, self._resuming = self._resuming, False
            if self._direct_counted:
                self._unmanaged_backwards -= 1
            return
        self._backward_end()

    def _settle_direct(self):
        """A direct backward that raised midway (its _direct_end never ran) is closed as
        engine.backward closes one: the next backward continues its micro-step."""
        if self._direct_open:
            self._direct_open = False
            self._backward_failed(self._direct_counted)

    def scale(self, loss):
        """DeepSpeed's engine.scale: the loss times the fp16 loss scale (1 in bf16 and fp32), for
        a backward the caller runs itself (`engine.scale(loss).backward()`); at ZeRO stage 0 the
        loss as it is (DeepSpeed's stage-0 optimizers are not ZeRO optimizers; a direct backward
        is refused there anyway). The accumulation division is the output hooks'."""
        self._alive()
        if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.grad_fn is not None):
            raise ValueError("zinc: engine.scale(loss): the loss must be a one-element tensor with "
                             "grad_fn (for any other tensor call tensor.backward(gradient))")
        self._scaled_by_caller = True
        if self._stage == 0:
            return loss
        return loss * lib.zinc_engine_loss_scale(self._e)
