"""_direct.py — `loss.backward()` called directly instead of `engine.backward(loss)`.

DeepSpeed 0.19.8 accepts it at ZeRO stages 1-3 ("PyTorch-style backward": its engine hooks the
forward's outputs, and the first gradient reaching one starts what engine.backward would). zinc
does the same: the forward's output tensors get a hook; the first gradient that reaches one in a
backward engine.backward did not start begins zinc's backward (Engine._begin_backward), and a
callback queued on autograd's engine ends it when autograd is done (Engine._end_backward).

The scaling by 1/gradient_accumulation_steps that engine.backward puts on the loss is put on the
gradients instead, as each group is handed over (the add into zinc's gradient memory takes it as
its alpha, _handover.py _add_into): every gradient is scaled once, whatever the output's shape.
DeepSpeed divides the gradient reaching each output tensor, so an output computed from another
output (transformers' loss from its logits) has it divided twice there; the accumulation steps
a power of two, zinc's gradients are bit for bit engine.backward's.

Refused, as DeepSpeed refuses them: ZeRO stage 0, and fp16, whose loss scale must be on the loss
(engine.backward(loss)). Also refused: inside no_sync (its `.grad` sums would mix scaled and
unscaled backward passes). A direct backward that raises midway (its callback never runs) is
settled at the engine's next call, as engine.backward's own raise is (_settle_direct_backward).
"""
import dataclasses
import weakref

import torch


def _output_tensors(out, depth=0):
    """The tensors of a forward's output: a tensor, or one inside tuples, lists, dicts (a
    transformers ModelOutput is one) and dataclasses, a few levels deep."""
    if isinstance(out, torch.Tensor):
        yield out
    elif depth < 4:
        if isinstance(out, dict):
            items = list(out.values())
        elif isinstance(out, (tuple, list)):
            items = out
        elif dataclasses.is_dataclass(out) and not isinstance(out, type):
            items = [getattr(out, f.name, None) for f in dataclasses.fields(out)]
        else:
            return
        for item in items:
            yield from _output_tensors(item, depth + 1)


class _DirectBackwardMixin:
    """The Engine's part for a backward the script starts itself (loss.backward())."""

    # engine.backward calls running (any engine's): a gradient reaching this engine's output
    # then is another engine's backward passing through it (a GAN's generator loss through its
    # discriminator's engine), not a backward the script started for this one: left as before
    # (autograd sums it into `.grad`; zero_grad drops it)
    engine_backwards = 0

    def _watch_outputs(self, out):
        """A hook on each tensor of the forward's output autograd can differentiate; returns
        out. The hooks hold the engine weakly (an output kept by the script keeps no engine)."""
        if not torch.is_grad_enabled():
            return out
        for t in _output_tensors(out):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._output_hook())
        return out

    def _output_hook(self):
        def hook(grad, engine=weakref.ref(self)):
            eng = engine()
            if (eng is not None and not eng._in_backward and
                    not _DirectBackwardMixin.engine_backwards):
                eng._begin_direct_backward()
        return hook

    def _begin_direct_backward(self):
        """From the first output's gradient of a backward engine.backward did not start."""
        if self._stage == 0:
            raise RuntimeError("zinc: loss.backward() called directly at ZeRO stage 0: as in "
                               "DeepSpeed 0.19.8, call engine.backward(loss) there")
        if self._code == 1:
            raise RuntimeError("zinc: loss.backward() called directly with fp16: the loss scale "
                               "must be applied to the loss, as DeepSpeed asks; call "
                               "engine.backward(loss)")
        if self._no_sync:
            raise RuntimeError("zinc: loss.backward() called directly inside no_sync: call "
                               "engine.backward(loss) there")
        was_interrupted = self._interrupted
        counted = self._begin_backward()
        self._direct = (counted, was_interrupted)
        self._grad_alpha = 1.0 / self._ga
        # `.grad`s an interrupted backward left (this one continues its micro-step) are in
        # engine.backward's units; in this backward's, the hand-over scales them with the rest
        self._scale_left_grads(self._ga)
        # Runs once autograd has finished this backward (not if it raises: _settle...)
        torch.autograd.Variable._execution_engine.queue_callback(self._finish_direct_backward)

    def _finish_direct_backward(self):
        self._in_backward = False
        if not any(G.got for G in self._g):
            # No parameter of zinc's got a gradient: torch.autograd.grad through the output (a
            # gradient penalty), which runs no AccumulateGrad, not a backward. Undone: the
            # micro-step is as it was (engine.backward(loss) comes next).
            counted, was_interrupted = self._direct
            self._direct, self._grad_alpha = None, 1.0
            if counted:
                self._unmanaged_backwards -= 1
            self._scale_left_grads(1.0 / self._ga)   # (those _begin_direct_backward rescaled)
            self._interrupted, self._resuming = was_interrupted, False
            self._show_window_grads()
            return
        self._interrupted = True   # until the hand-over below (as in engine.backward)
        try:
            self._end_backward()
        except BaseException:
            self._scale_left_grads(self._grad_alpha)
            raise
        finally:
            self._direct, self._grad_alpha = None, 1.0

    def _settle_direct_backward(self):
        """At the engine's next call after a direct backward whose autograd raised midway: as
        engine.backward's own raise (the next backward or step() continues the micro-step),
        the gradients it left in `.grad` scaled as the hand-over would have."""
        if self._direct is None:
            return
        counted, _ = self._direct
        self._in_backward = False
        self._scale_left_grads(self._grad_alpha)
        self._direct, self._grad_alpha = None, 1.0
        self._backward_raised(counted)

    def _scale_left_grads(self, factor):
        """The `.grad`s of zinc's parameters not handed over, times factor: outside a direct
        backward they are in engine.backward's units (its loss carries 1/accumulation steps),
        inside one in the direct backward's (unscaled). Both a power of two apart, exactly."""
        if factor == 1.0:
            return
        with torch.no_grad():
            for G in self._g:
                for _, _, p in G.params:
                    if p.grad is not None:
                        p.grad.mul_(factor)
