"""_handover.py — gradients from autograd to zinc. A hook on each parameter's AccumulateGrad node
notes when its gradient is complete; when a group's parameters all have theirs, the group is
handed over at once (its gradients added into zinc's gradient views, `.grad` dropped,
zinc_grads_ready), so that at stages 2-3 the reduce-scatter runs while autograd goes on with the
earlier layers. After autograd the groups that got no gradient are handed over with a zero one,
last group first (engine.py's docstring gives the whole backward).

_HandOverMixin is one of the parts of engine.py's Engine; engine.backward and engine.step call
it, Engine.__init__ sets the hooks up (_watch_gradients).
"""
import ctypes
import warnings
import weakref

import torch

from ._hooktime import timed
from ._interrupt import held
from ._lib import lib
from ._memory import _TORCH_DTYPE


class _HandOverMixin:
    """The Engine's gradient hand-over: from autograd's `.grad` into zinc."""

    def _watch_gradients(self):
        """A hook on every parameter's AccumulateGrad node: it fires once per backward, after all
        of the parameter's gradient contributions are summed into `.grad`. The engine keeps the
        nodes (autograd holds them only weakly between graphs), so every backward reuses them.
        Created while `param.data` has its full shape and final dtype: a node remembers both."""
        self._acc_nodes = []
        self._acc_of = {}            # id(param) -> the AccumulateGrad node its hook is on
        for gi, G in enumerate(self._g):
            for pid, _, p in G.params:
                self._watch_node(gi, pid, p)
                if self._stage == 3:
                    self._hooks.append(p.register_hook(self._incoming_hook(gi)))

    def _watch_node(self, gi, pid, p):
        node = p.expand_as(p).grad_fn.next_functions[0][0]
        if node is not self._acc_of.get(id(p)):
            self._hooks.append(node.register_hook(self._accumulated_hook(gi, pid)))
            self._acc_nodes.append(node)
            self._acc_of[id(p)] = node

    def _rewatch(self, params):
        """A GatheredParameters modifier may have set a parameter's `param.data` to a tensor of
        another dtype: torch then drops the parameter's AccumulateGrad node, and the next
        backward made a new one without the hand-over hook, so that rank handed the group over
        out of order (under mpirun the ranks' reduce-scatters then paired wrongly). Each such
        parameter gets its node again, made while `param.data` has the full shape and the
        working dtype (a node remembers both; a temporary tensor where the modifier left
        another one: the caller gives `param.data` its value after)."""
        dtype = _TORCH_DTYPE[self._code]
        for p in params:
            pid = self._pid_of[id(p)]
            shape = tuple(self._shapes[pid])
            if p.dtype != dtype or tuple(p.shape) != shape:
                p.data = torch.empty(shape, dtype=dtype, device=self._device)
            self._watch_node(self._group_of[id(p)], pid, p)

    def _accumulated_hook(self, gi, pid):
        def hook(*_):
            G = self._g[gi]
            if not self._in_backward or self._no_sync:
                return
            if G.done:
                # A gradient after the group's hand-over: reentrant activation checkpointing
                # runs one backward per segment, each with its own AccumulateGrad call, so a
                # module used in two segments gets a contribution from each. This one stays in
                # `.grad` (autograd sums any further ones there) and goes to zinc after autograd
                # (zinc_grads_more, _hand_over_rest); from then on the group waits for the end of
                # autograd every backward, handed over once with the whole sum. (Not learned when
                # the group was handed over by a backward that raised midway: `_resuming`.)
                G.late = True
                G.defer = G.defer or not self._resuming
                return
            G.got.add(pid)
            if len(G.got) == len(G.params) and not G.defer:
                self._hand_over(gi)
        return hook

    def _incoming_hook(self, gi):
        # Stage 3: a gradient reaching a parameter whose group no _regather gathered (its module's
        # output was not a tensor we could wrap): AccumulateGrad needs the full-shaped parameter.
        # `live` is tested here, not only in _materialize, so the common case (gathered already)
        # returns before the hook timer, whose cost would be most of it (as _on_read).
        # The parameter (the user's model) holds the hook in a place the cyclic collector does
        # not see: the engine only weakly, so that an engine dropped without close() is freed
        # (its thread, its device memory, an NVMe swap file) rather than kept as long as the model
        def hook(grad, engine=weakref.ref(self)):
            eng = engine()
            if eng is None:
                return
            G = eng._g[gi]
            if eng._in_backward and (not G.live or G.kept):
                eng._materialize(gi)
        return hook

    @timed
    def _hand_over(self, gi, more=False):
        """Adds the group's gradients into zinc's views, drops `.grad`, zinc_grads_ready (more:
        zinc_grads_more, for gradients that came after this micro-step's hand-over)."""
        G, e = self._g[gi], self._e
        # zinc -> torch (WAR): bucketed (stages 2-3, and stage 1 with fp32 sums) the view is a
        # bucket zinc zeroed on its stream after the zinc_grads_ready that last used it; torch's
        # adds run after that one (the buckets rotate, so not after the reduce of the group just
        # handed over). Otherwise (stages 0-1): zinc queues nothing during backward; the lent
        # buffer was zeroed by zinc_grad_buffer_attach, which torch's stream waits for
        # (_lend_grad_buffer).
        # zinc's hand-over and the group's record of it end together (_interrupt): a Ctrl-C
        # between them left the group refused as handed over already, for good
        with held():
            slot = -1
            st = self._torch_stream()
            self._need_grad_buffer(st)
            if self._bucketed:
                s = ctypes.c_int()
                self._call(lib.zinc_grad_bucket(e, G.gid, ctypes.byref(s)))
                slot = G.slot = s.value
                self._torch_after_bucket(slot, st)
            try:
                had = self._add_into(G)
            except BaseException:
                # An error here (out of memory) leaves the gradients in `.grad`, where the next
                # backward adds to them, as after an error in autograd: torch checks and
                # allocates before its kernels run, so none was added (its per-tensor CPU
                # fallback adds same-shaped tensors in place: nothing to fail midway; at stages
                # 0-1 the lent buffer holds the window's sum, where a partial add could not be
                # undone). Bucketed, the bucket is given back zeroed, in case some were: kept
                # by the group until its next hand-over, it left the other groups one bucket
                # fewer (with zinc.grad_buckets 1, none: step() after the failed backward
                # refused the groups it handed over before this one).
                if slot >= 0:
                    self._give_back_bucket(G, st)
                raise
            for p in had:
                p.grad = None         # freed on torch's stream, after the add that reads it
            # torch -> zinc (RAW): the reduce zinc_grads_ready queues reads the sums torch
            # added.
            self._torch_then_zinc(st)
            self._call((lib.zinc_grads_more if more else lib.zinc_grads_ready)(e, G.gid))
            G.late = False
            if not self._window_grads:   # (the Engine is an nn.Module: a set costs ~3 us)
                self._window_grads = True
            if slot >= 0:
                self._bucket_done(slot)
                G.slot = -1
            G.done = True
            if G.read_hold:           # stage 3: a backward's read held it until here
                G.read_hold = False
                G.holds = max(0, G.holds - 1)
            if self._stage == 3 and G.holds == 0:
                self._release(gi)

    def _grad_views(self, G):
        """Group G's parameters' slices of its gradient memory (its bucket, or its place in the
        lent buffer), made once per span and kept with it."""
        span, layout, views = self._group_span(G, "grad")
        if not views:
            # (built whole, then kept: a list cut short by an error midway would stay)
            # (as_strided counts from the storage's start: a span sliced from the lent tensor
            # starts inside its storage, one over zinc's memory at 0)
            at = span.storage_offset()
            views[:] = [span.as_strided(shape, strides, at + off) for off, shape, strides in layout]
        return views

    def _show_window_grads(self, stepped=False):
        """After a backward, DeepSpeed 0.19.8's `.grad` where it keeps one: at stage 0 (not
        bucketed), and at stage 1 inside a window (its stage 1 reduces at the window's last
        backward and leaves `.grad` None). At stage 0 DeepSpeed all-reduces `.grad` in place at
        the window's last backward: zinc_grads_reduce makes zinc's step's all-reduce there.
        Each trained parameter's `.grad` is then its view of zinc's window sum — the sum so far,
        in DeepSpeed's units — so a script that reads it, edits it in place (a mask) or clips
        it (torch.nn.utils.clip_grad_norm_) between backward and step changes what the step
        applies, as under DeepSpeed. _take_back_grads ends it before zinc adds to or reads the
        sums. stepped: after a step() inside the window, where DeepSpeed's `.grad` stays as the
        backward left it."""
        if (self._bucketed or self._stage > 1 or self._grad_buf is None or self._unsynced or
                self._no_sync or not self._managed):
            return
        if not stepped and lib.zinc_engine_at_boundary(self._e):
            if self._stage == 1:
                return
            if self.world_size > 1:
                self._torch_then_zinc()        # after torch's last adds into the sums
                self._call(lib.zinc_grads_reduce(self._e))
                self._torch_after_zinc()       # torch reads the average zinc's stream made
        shown = {}
        for G in self._g:
            for (_, _, p), v in zip(G.params, self._grad_views(G)):
                if v.shape != p.shape and v.numel() == p.numel():
                    v = v.view(p.shape)       # a 0-dim parameter is registered as (1,)
                if v.dtype == p.dtype and v.shape == p.shape and v.device == p.device:
                    shown[id(p)] = (p, v)
        with held():
            for p, v in shown.values():
                p.grad = v
            self._shown_grads = shown

    def _grad_shown(self, p):
        """Whether p's `.grad` is (or was, until the script replaced it) its view of zinc's
        window sum (_show_window_grads)."""
        return bool(self._shown_grads) and id(p) in self._shown_grads

    def _sync_shown_grads(self):
        """What the script left in the shown `.grad`s made zinc's window sum (an edit in place is
        there already; a tensor put in a `.grad`'s place is copied in; a `.grad` set to None is a
        zero gradient), each `.grad` its view again."""
        for p, v in self._shown_grads.values():
            g = p.grad
            if g is None:
                v.zero_()
            elif g.data_ptr() != v.data_ptr() or g.stride() != v.stride():
                v.copy_(g)
            p.grad = v

    def _lend_back_grads(self):
        """Before a backward inside no_sync after shown `.grad`s: the window's sum so far moves
        into `.grad` (a copy; zinc's part zeroed), where autograd adds the no_sync backward's
        gradient, as DeepSpeed's `.grad` holds the window's whole sum there; the hand-over after
        no_sync adds it all back. (Taken back instead, `.grad` held the no_sync part alone and a
        clip there missed the rest.)"""
        if not self._shown_grads:
            return
        with held():
            self._sync_shown_grads()
            for p, v in self._shown_grads.values():
                p.grad = v.clone()
                v.zero_()
            self._shown_grads = None

    def _take_back_grads(self, keep=True):
        """Ends _show_window_grads (before a backward adds to zinc's sums, and before the step
        or a gradient call reads them): what the script left in `.grad` is zinc's window sum —
        an edit in place is there already, a tensor put in its place is copied in, and a `.grad`
        set to None is a zero gradient (DeepSpeed's step would leave that parameter out of its
        update) — and `.grad` is None again, as the hand-over needs. keep=False (a zero_grad,
        which decides about the sums itself): `.grad` only cleared."""
        if not self._shown_grads:
            return
        with held():
            if keep:
                self._sync_shown_grads()
            for p, _ in self._shown_grads.values():
                p.grad = None
            self._shown_grads = None

    def _add_into(self, G):
        """The group's `.grad`s added into zinc's gradient memory (its bucket, or its place in
        the lent buffer); returns the parameters that had one. All of the group's adds in one
        call (one multi-tensor kernel on a GPU, not one per parameter), into slices of one view
        of the group's gradient memory (_group_span). The slices are made once per span (kept
        with it): about 1.5 us each on the host."""
        dst, src, had = [], [], []
        views = self._grad_views(G)
        dtype = views[0].dtype
        for (_, _, p), v in zip(G.params, views):
            g = p.grad
            if g is not None:
                dst.append(v)
                src.append(g if g.dtype == dtype else g.to(dtype))
                had.append(p)
        if dst:
            torch._foreach_add_(dst, src)
        return had

    def _give_back_bucket(self, G, stream):
        """A hand-over that raised before its zinc_grads_ready: the group's bucket zeroed and
        given back (zinc_grad_bucket_drop), on zinc's stream after torch's adds into it, with
        the bucket's event recorded after the zeroing for the next group that takes it. Should
        that fail too (a device error, which the engine's next call reports again), the group
        keeps the bucket, and the error raised is the hand-over's."""
        try:
            self._torch_then_zinc(stream)
            self._call(lib.zinc_grad_bucket_drop(self._e, G.gid))
        except Exception:
            return
        self._bucket_done(G.slot)
        G.slot = -1

    def _drop_window_grads(self, what):
        """A zero_grad inside an accumulation window, where DeepSpeed 0.19.8's drops the
        gradients the window summed so far: at stages 0-1 they are still the parameters' `.grad`
        there (its engine's and its optimizer's zero_grad set them to None), and at stage 3 its
        optimizer's zero_grad restarts the window's micro-step count, so the next backward
        overwrites the partitioned sum instead of adding to it (stage 2 keeps them: its backward
        moved them out of `.grad`). zinc holds them in its gradient buffer, zeroed here, so the
        step applies what DeepSpeed's applies. Not after the window's last backward (before its
        step): DeepSpeed keeps them there. `what` names the call (engine or optimizer)."""
        self._take_back_grads(keep=False)
        if not self._window_grads:
            return
        if self._interrupted and self._bucketed and any(G.done for G in self._g):
            # A backward raised midway after some groups were handed over: their part of this
            # micro-step is reduced into zinc's window sum already, where the rest of the window
            # is (the next backward would add to it: zinc_grads_more). zinc cannot take back only
            # that part: the window's gradients so far all go, at stage 2 too (DeepSpeed refuses
            # the next backward there). The step then applies the next backward's alone.
            with held():
                self._clear_window_sums()
                self._window_grads = False
            return
        if (self._open_micro or self._awaiting_step) and self._open_at_boundary:
            # between the window's last backward and its step(): DeepSpeed's stage 1 moved the
            # gradients out of `.grad` in that backward, and stage 3's restarted count matters
            # only to a backward that follows, so they stay. (Its stage 0 steps with `.grad`
            # None there, which skips those parameters' update; zinc applies the window.)
            return
        if self._stage < 2 and self._bucketed:
            # stage 1 with fp32 sums: zinc added the hand-overs into the lent buffer on its
            # stream (and a bucket a raised hand-over could not give back): zinc clears both
            self._clear_window_sums()
        elif self._stage < 2:
            if self._grad_buf is not None:   # on torch's stream, after its adds (zinc queues
                self._grad_buf.zero_()       # nothing on it until the step)
        elif self._stage == 3 and what == "optimizer":
            # this rank's reduced slices set to zero, on every rank: one clearing on zinc's
            # stream after the window's reduce-scatters (zinc_grads_clear; torch reads none of
            # it, so no wait). One zinc_param_local_set per parameter made a host wait each on
            # a GPU (an upload), every micro-step of a torch-habit loop.
            self._clear_window_sums()
        else:
            return
        self._window_grads = False

    def _restart_window(self, what, stacklevel=3):
        """After zinc restarted its accumulation window (zinc_ckpt_load and
        zinc_engine_set_train_state drop the gradients of a window in progress; the checkpoint
        holds none): the front-end's record of that window goes too, with gradients still in the
        trained parameters' `.grad` (no_sync's, a failed backward's). `what` names the call in
        the warning given when a window was open (DeepSpeed 0.19.8 keeps its micro-step count
        there, and at some stages those gradients); `stacklevel` is the warning's, the caller's
        caller by default."""
        was_open = (self._awaiting_step or self._open_micro or self._interrupted or
                    self._unsynced or self._window_grads or any(G.slot >= 0 for G in self._g))
        self._shown_grads = None         # (every `.grad` goes below)
        for G in self._g:
            G.done = G.late = False
            G.got.clear()
            G.slot = -1
            for _, _, p in G.params:
                p.grad = None
        self._awaiting_step = self._open_micro = self._open_at_boundary = False
        self._interrupted = self._resuming = self._unsynced = self._window_grads = False
        self._direct.open = False        # a direct backward that raised: its window is gone too
        self._unmanaged_backwards = 0
        if was_open and self.global_rank == 0:
            warnings.warn(f"zinc: {what} inside an accumulation window (after a backward whose "
                          f"window no step() ended): that window's gradients are dropped, as the "
                          f"checkpoint holds none, and the next backward starts the window of "
                          f"the loaded state (DeepSpeed 0.19.8 keeps its micro-step count, and at "
                          f"some stages those gradients)", RuntimeWarning, stacklevel=stacklevel)

    def _clear_window_sums(self):
        """zinc_grads_clear: the window's sums so far dropped, and bucketed a bucket still
        taken by a hand-over that raised before its zinc_grads_ready (G.slot: where
        _give_back_bucket failed too) given back zeroed; torch's adds into that bucket come
        before its zeroing, and torch's next add into it after."""
        held_slots = [G for G in self._g if G.slot >= 0]
        if held_slots:
            self._torch_then_zinc()
        self._call(lib.zinc_grads_clear(self._e))
        for G in held_slots:
            self._bucket_done(G.slot)
            G.slot = -1

    def _need_grad_buffer(self, stream=None):
        """Before zinc reads or writes its gradient buffer in a window: lent, if not yet."""
        if self._grad_buf is None and self._grad_bytes:
            self._lend_grad_buffer(stream)

    def _lend_grad_buffer(self, stream=None):
        """At a window's first hand-over (or gradient set): torch's memory for zinc's gradient
        buffer until the window's step (zinc_grad_buffer_attach; engine.step drops it). Held
        only from the first backward to the step, where DeepSpeed holds its gradients too; the
        rest of the time torch's allocator reuses it for activations. zinc zeroes it on its
        stream: after torch's earlier use of the memory (the allocator may hand out a block
        torch's queued kernels still read), and before torch's first add into it (stages 0-1;
        bucketed, at stages 2-3 and at stage 1 with fp32 sums, torch adds into zinc's buckets
        and only zinc writes this buffer)."""
        buf = torch.empty(self._grad_bytes, dtype=torch.uint8, device=self._device)
        # attached and recorded together (_interrupt)
        with held():
            self._torch_then_zinc(stream)
            self._call(lib.zinc_grad_buffer_attach(self._e, ctypes.c_void_p(buf.data_ptr()),
                                                   self._grad_bytes))
            if self._cuda:    # zinc's stream uses it too: not reused before zinc's work on it
                buf.record_stream(self._zstream)
            self._grad_buf = buf
            if buf.data_ptr() != self._lent_ptr:   # the allocator mostly gives the same block
                self._lent_views, self._lent_ptr = {}, buf.data_ptr()
        if not self._bucketed:
            self._torch_after_zinc(stream)

    def _torch_after_bucket(self, slot, stream=None):
        """CUDA: torch's stream (`stream`, looked up by the caller, or the current one) waits for
        the event recorded after the zinc_grads_ready that last used bucket `slot` (nothing
        before the first). CPU: nothing."""
        ev = self._bucket_events.get(slot) if self._cuda else None
        if ev is not None:
            self._stream_or_current(stream).wait_event(ev)

    def _bucket_done(self, slot):
        """CUDA: an event on zinc's stream after the work zinc_grads_ready queued on bucket
        `slot` (its reduce and zeroing), for the next group that takes that bucket."""
        if self._cuda:
            ev = self._bucket_events.get(slot)
            if ev is None:
                ev = self._bucket_events[slot] = torch.cuda.Event()
            ev.record(self._zstream)

    def _hand_over_rest(self):
        """After autograd: the groups not handed over yet (no gradient this backward, or only
        from no_sync backwards, or waiting for the end of autograd: `defer`) and the gradients
        that came after a group's hand-over (`late`), last group first."""
        # the hand-overs and the micro-step's end recorded together (_interrupt)
        with held():
            for gi in reversed(range(len(self._g))):
                G = self._g[gi]
                if not G.done or G.late:
                    self._hand_over(gi, more=G.done)
            self._unsynced = self._resuming = False
            self._open_micro = not self._managed or self._boundary_set is not None
            self._awaiting_step = not self._open_micro
            self._open_at_boundary = bool(lib.zinc_engine_at_boundary(self._e))
            if self._stage == 3:
                self._drop_params()
