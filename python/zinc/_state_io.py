"""_state_io.py — the model's state out of the engine and back in: module_state_dict and the
consolidated 16-bit state dict (save_16bit_model), and zinc checkpoints (save_checkpoint,
load_checkpoint) with what they carry beside zinc's own tensors: client_state, the module's
buffers and the parameters zinc does not train, the layout zinc.utils.zero_to_fp32 needs, and
the optimizer values carried outside zinc (the groups' lr and Adam settings, a client scheduler).

_StateIOMixin is one of the parts of engine.py's Engine.
"""
import base64
import ctypes
import io
import json
import os
import socket
import time
import warnings

import torch

from . import _partial_load
from ._interrupt import held
from ._lib import LoadOptions, SaveOptions, TrainState, ZincError, lib, read_tensors
from ._memory import _TORCH_DTYPE

# load_checkpoint's first buffer for the checkpoint's client blob (the counters' JSON, and the
# tensors zinc does not register); a larger one fails the load before anything is written, and
# is read again with the room it needs. Zeroed at every load: 64 MiB took 30 ms of a small
# model's 70 ms load.
_BLOB_CAP = 1 << 20


def _tag_text(tag):
    """A tag as zinc's C calls take it: text without NUL (a C string ends there: "good\\0x"
    saved over tag "good" and loaded it, silently)."""
    text = str(tag)
    if "\0" in text:
        raise ValueError(f"zinc: checkpoint tag {text!r} holds a NUL character")
    return text


def _remove_dead_tmps(save_dir, stem, quiet_s=600):
    """save_16bit_model's temporary files (stem + pid) of this host's processes that are gone:
    a save killed before its rename left a full-size hidden file that nothing removed. Only those
    untouched for quiet_s seconds: a live save writes its file all along, and a process of
    another PID namespace (a container with this host's name) is not seen by os.kill. Best
    effort: nothing here fails the save."""
    try:
        names = os.listdir(save_dir)
    except OSError:
        return
    now = time.time()
    for name in names:
        pid = name[len(stem):] if name.startswith(stem) else ""
        if not (pid.isascii() and pid.isdigit() and 0 < len(pid) <= 9) or int(pid) == os.getpid():
            continue
        path = os.path.join(save_dir, name)
        try:
            if now - os.lstat(path).st_mtime < quiet_s:
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            try:
                os.remove(path)
            except OSError:
                pass
        except (OSError, ValueError, OverflowError):   # alive (another user's), or gone
            pass


def _fsync_dir(path):
    """The directory's entries on disk (a rename is durable only then)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _no_checkpoint_either(err, load_dir):
    """zinc's "no checkpoint in DIR" (it names zinc's manifest.json alone), or a DIR that does not
    exist (a script's first run), said for both formats: load_checkpoint reads DeepSpeed's too,
    and a DeepSpeed script that resumes "if anything is there" meets this where DeepSpeed 0.19.8
    warns and returns (None, None). Told by zinc_ckpt_load's message (ckpt/reader.c, ckpt/api.c);
    other errors are returned as they are."""
    text = str(err)
    if "no checkpoint in" not in text and not ("cannot open the save directory" in text
                                               and not os.path.exists(load_dir)):
        return err
    return ZincError(err.status, f"{text}; nor is it a DeepSpeed checkpoint (no `latest` file "
                                 f"naming a tag folder of {os.fsdecode(load_dir)}). DeepSpeed "
                                 "0.19.8 would warn and return (None, None) here; zinc raises, so "
                                 "check for a checkpoint before loading to start fresh "
                                 "(docs/python.md, load_checkpoint)")


def _client_record(state):
    """save_checkpoint's client_state in the blob's JSON: as JSON when it comes back equal from
    it (readable by `zinc ckpt inspect` and without torch), else, as DeepSpeed keeps it,
    torch.save bytes (base64): tensors, tuples, integer keys, any picklable object."""
    try:
        if json.loads(json.dumps(state)) == state:
            return {"client_state": state}
    except (TypeError, ValueError):
        pass
    raw = io.BytesIO()
    try:
        torch.save(state, raw)
    except Exception as ex:  # noqa: BLE001 — pickling can fail in many ways; say which value
        raise TypeError(f"zinc.save_checkpoint: client_state cannot be saved (torch.save: "
                        f"{ex})") from None
    return {"client_state_torch": base64.b64encode(raw.getvalue()).decode()}


def _client_state_of(saved):
    """The client_state a checkpoint's blob JSON holds (_client_record)."""
    if "client_state_torch" in saved:
        # Not weights_only: client_state holds the script's own objects, as DeepSpeed's
        # checkpoints do; a checkpoint is trusted as the code that wrote it.
        return torch.load(io.BytesIO(base64.b64decode(saved["client_state_torch"])),
                          weights_only=False)
    return saved.get("client_state", {})


class _StateIOMixin:
    """The Engine's state dicts and checkpoints."""

    def _full_state_dict(self, destination, prefix, exclude_frozen, on_host):
        """The model's state_dict with zinc's parameters' full values in (see module_state_dict).
        on_host: every tensor on the CPU (a file's content), else on the model's device.
        Collective."""
        dtype = _TORCH_DTYPE[self._code]
        values = self._zinc_values()
        frozen = {} if exclude_frozen else self._frozen_values()    # stage 3's pieces
        # State-dict key (before `prefix`) of every parameter, under each module that holds it:
        # a tied parameter has one key per holder, as in module.state_dict().
        holder = {}
        for mname, mod in self.module.named_modules(remove_duplicate=False):
            for n, p in mod._parameters.items():
                if p is not None:
                    holder[f"{mname}.{n}" if mname else n] = p
        before = set(destination) if destination is not None else set()
        sd = self.module.state_dict(destination=destination, prefix=prefix)
        added = set(sd).difference(before)
        moved = {}    # id(original) -> its converted tensor: a tied tensor stays one tensor
        device = torch.device("cpu") if on_host else self._device

        def convert(t, cast):
            if id(t) not in moved:
                u = t.detach()
                moved[id(t)] = u.to(device, dtype if cast and u.is_floating_point() else u.dtype)
            return moved[id(t)]

        for key, p in holder.items():
            k = prefix + key
            if k not in sd:            # a module's own _save_to_state_dict left it out
                continue
            if id(p) in self._pid_of:
                sd[k] = values[self._pid_of[id(p)]]
                if not on_host:
                    sd[k] = convert(sd[k], False)
            elif exclude_frozen and not p.requires_grad:
                del sd[k]
            elif id(p) in frozen:
                sd[k] = frozen[id(p)] if on_host else convert(frozen[id(p)], False)
            else:
                # Not trained by zinc (frozen, or left out of model_parameters): the module's own
                # value in the working dtype, as in DeepSpeed, which casts every floating-point
                # parameter of the module to it.
                sd[k] = convert(p, True)
        if on_host:                 # buffers (and extra state): as the module holds them
            for k in added.difference(prefix + key for key in holder):
                if isinstance(sd[k], torch.Tensor):
                    sd[k] = convert(sd[k], False)
        return sd

    def module_state_dict(self, destination=None, prefix="", keep_vars=False,
                          exclude_frozen_parameters=False):
        """DeepSpeed's module_state_dict: the model's state_dict() — its keys (every name of a
        tied parameter), its persistent buffers, frozen parameters (left out with
        exclude_frozen_parameters=True) — on the model's device. zinc's parameters hold their
        full value at every stage (the fp32 master gathered from the shards, cast to the working
        dtype; DeepSpeed's at stage 3 are empty placeholders); parameters zinc does not train
        are the module's own, cast to the working dtype; buffers are as the module holds them.
        `destination` (a dict to fill) and `prefix` (before every key) as in torch. Collective:
        every rank must call it."""
        if keep_vars:
            raise NotImplementedError("zinc: module_state_dict(keep_vars=True): zinc's parameter "
                                      "values are gathered copies, not the module's Parameters")
        return self._full_state_dict(destination, prefix, exclude_frozen_parameters, False)

    # ---- checkpoints ----------------------------------------------------------------------

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """A zinc checkpoint in save_dir/tag (default global_step<N>); client_state (a dict, as
        DeepSpeed's: anything torch.save can pickle) is saved with it and load_checkpoint
        returns it equal. Collective.
        It holds what zinc trains (the parameters, Adam's state, the step and loss scale) and,
        as DeepSpeed's module state does, the rest of the module's state_dict as rank 0 holds
        it: the persistent buffers and the parameters zinc does not train (frozen ones left
        out with exclude_frozen_parameters=True), torch.save bytes in the client blob after
        its JSON.
        save_latest=False (DeepSpeed's) leaves save_dir/latest as it was: a load without a tag
        still takes the tag latest names (a "best" checkpoint beside the run's), and
        zinc.ckpt_keep_last prunes nothing after this save."""
        self._states_home("save_checkpoint()")
        tag = _tag_text(tag if tag is not None else f"global_step{self._steps}")
        extra, untrained = self._persistent_buffers(), self._untrained_params()
        extra.update({n: p for n, p in untrained.items()
                      if p.requires_grad or not exclude_frozen_parameters})
        blob = json.dumps(dict(_client_record(client_state or {}), global_steps=self._steps,
                               skipped_steps=self._skipped, global_samples=self._samples,
                               lr=self._lr, next_lr=self.get_lr(), **self._lr_state(),
                               **self._layout_record(extra))).encode()
        # Also when it is empty (all excluded): the load then names what it did not find.
        if extra or untrained:      # JSON text holds no NUL: the loader splits there
            raw = io.BytesIO()
            torch.save({k: self._untrained_value(t) for k, t in extra.items()}, raw)
            blob += b"\0" + raw.getvalue()
        buf = ctypes.create_string_buffer(blob, len(blob))
        # addressof, not ctypes.cast: cast's result keeps the buffer in a reference cycle, freed
        # only by the cyclic collector (each load held its 64 MiB buffer until then: RSS grew
        # 64 MiB a load, to 3 GB in a loop loading every 10 steps)
        opts = SaveOptions(ctypes.addressof(buf), len(blob), 0, -1, int(not save_latest))
        # save_dir is made by zinc's rank 0 once the tag is found usable: a refused tag leaves
        # no empty directory behind
        # torch -> zinc (RAW): at stages 0-2 the 16-bit stream the save may write is zinc's
        # working copy, which `param.data` views; torch's queued writes to it (an in-place edit
        # of a weight after the step) come first. No host wait.
        self._torch_then_zinc()
        self._call(lib.zinc_ckpt_save(self._e, os.fsencode(save_dir), str(tag).encode(),
                                      ctypes.byref(opts)))
        # True means saved, as DeepSpeed's: zinc.ckpt_async's background write is waited for
        self._call(lib.zinc_ckpt_wait(self._e))
        return True

    def _layout_record(self, extra):
        """What a reader without the model needs to rebuild its state_dict from a checkpoint
        (zinc.utils.zero_to_fp32): the other names of a tied tensor (state_dict has one key per
        holder, the checkpoint one tensor), which saved entries are frozen parameters, and the
        0-dim parameters (zinc stores them with shape (1,))."""
        tied, first = {}, {}
        for n, t in self.module.state_dict(keep_vars=True).items():
            if id(t) in first:
                tied[n] = first[id(t)]
            else:
                first[id(t)] = n
        frozen = sorted(n for n, p in self._untrained_params().items()
                        if n in extra and not p.requires_grad)
        scalars = sorted(n for n, (pid, _) in self._trained_params().items()
                         if len(self._shapes[pid]) == 0)
        return {"tied": tied, "frozen_params": frozen, "scalar_params": scalars}

    def _untrained_params(self):
        """The module's parameters zinc does not train (frozen, or left out of
        model_parameters), by name; a tied one once."""
        return {n: p for n, p in self.module.named_parameters() if id(p) not in self._pid_of}

    def _persistent_buffers(self):
        """The module's buffers its state_dict holds (not the non-persistent ones), by name."""
        saved_by_torch = set(self.module.state_dict(keep_vars=True))
        return {n: b for n, b in self.module.named_buffers() if n in saved_by_torch}

    def _trained_params(self):
        """zinc's parameters by name: (zinc parameter id, the Parameter)."""
        return {name: (pid, p) for _, params in self._groups for pid, name, p in params}

    def _restore_module_state(self, raw, strict):
        """The buffers and untrained parameters a checkpoint saved (rank 0's) copied into this
        module's. Strict (DeepSpeed's default module load), the saved buffers must be the
        model's and every saved entry one of the model's; not strict, the model's buffers the
        checkpoint lacks keep their values and the entries the model lacks are left. A shape
        that differs raises either way (as torch's load_state_dict). Returns the names of the
        untrained parameters it set, and the saved values of the parameters zinc trains now
        but that were frozen at the save (for _set_trained)."""
        saved = torch.load(io.BytesIO(raw))
        buffers, untrained = self._persistent_buffers(), self._untrained_params()
        trained = self._trained_params()
        unknown = sorted(set(saved) - set(buffers) - set(untrained) - set(trained))
        missing = sorted(set(buffers) - set(saved))
        if strict and (unknown or missing):
            raise ValueError(f"zinc: load_checkpoint: the checkpoint's module entries {unknown} "
                             f"are not buffers or untrained parameters of the model, the "
                             f"model's buffers {missing} are not in the checkpoint "
                             f"(load_module_strict=False leaves both)")
        mine = {n: t for n, t in buffers.items() if n in saved}
        mine.update({n: p for n, p in untrained.items() if n in saved})
        for n, t in mine.items():
            if saved[n].shape != self._full_shape(t):
                raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(saved[n].shape)} in "
                                 f"the checkpoint, {tuple(self._full_shape(t))} in the model")
        for n, t in mine.items():
            self._set_untrained(t, saved[n])
        self._zinc_then_torch()      # (the frozen engine's writes too)
        return {n for n in untrained if n in saved}, {n: saved[n] for n in saved if n in trained}

    def _read_saved(self, load_dir, tag, wanted):
        """zinc_ckpt_read_tensors, one read for all of `wanted`, a list of (name, shape, out):
        whether the checkpoint holds each tensor, its fp32 master read into out (a float32 CPU
        tensor of that shape) where out is not None."""
        return read_tensors(self._e, load_dir, tag, wanted)

    def _set_trained(self, load_dir, tag, values, missing, strict):
        """A weights-only load (zinc_ckpt_load with missing_ok) left `missing` of zinc's
        parameters as they were: those frozen when the checkpoint was saved (unfrozen now, as
        when a fine-tune trains more of the model than the run it resumes from). Their saved
        values (`values`, the module state's 16-bit weights) become zinc's, fp32 master
        included, as DeepSpeed's module load and refresh of the fp32 weights do. One the
        checkpoint holds nowhere raises ValueError naming it when strict; not strict, it keeps
        the engine's value (DeepSpeed's non-strict module load)."""
        trained = self._trained_params()
        for n, v in values.items():
            pid, _ = trained[n]
            if v.shape != self._shapes[pid]:     # the Parameter is empty between steps at stage 3
                raise ValueError(f"zinc: load_checkpoint: {n} is {tuple(v.shape)} in the "
                                 f"checkpoint, {tuple(self._shapes[pid])} in the model")
            src = v.to("cpu", torch.float32).contiguous()
            self._call(lib.zinc_param_set(self._e, pid, ctypes.c_void_p(src.data_ptr())))
        if strict and missing > len(values):
            probe = [(n, self._shapes[pid], None) for n, (pid, _) in trained.items()
                     if n not in values]
            lost = [w[0] for w, f in zip(probe, self._read_saved(load_dir, tag, probe)) if not f]
            raise ValueError(f"zinc: load_checkpoint: {os.path.join(load_dir, tag)} holds no "
                             f"value for the parameters {lost} (neither trained nor saved as "
                             f"frozen): a checkpoint of another model? "
                             f"(load_module_strict=False keeps the engine's values)")
        self._zinc_then_torch()

    def _restore_untrained(self, load_dir, tag, done, extra, strict):
        """The untrained parameters the module state did not set (`done`): one that zinc
        trained when the checkpoint was saved (frozen since, as when fine-tuning a pretrained
        model with its body frozen) is a tensor of the checkpoint, read in full
        (zinc_ckpt_read_tensors, all in one read: its fp32 master, cast to the parameter's
        dtype, as DeepSpeed's module state holds the 16-bit weight). As DeepSpeed's module
        load, strict, one the checkpoint holds in neither place (saved with
        exclude_frozen_parameters=True) raises ValueError naming it, and so do the
        checkpoint's `extra` tensors (those zinc does not register) that are none of the
        model's; not strict, the first keeps the model's value and the others are left. The
        checks come before any of these parameters is set, and a read buffer is allocated only
        for a tensor the checkpoint holds (a PEFT model's frozen base, saved excluded, can be
        most of the model)."""
        params = self._untrained_params()
        names = [n for n in params if n not in done]
        found = self._read_saved(load_dir, tag, [(n, self._full_shape(params[n]), None)
                                                 for n in names])
        path = os.path.join(load_dir, tag)
        kept = [n for n, f in zip(names, found) if not f]
        if kept and strict:
            more = f" and {len(kept) - 4} more" if len(kept) > 4 else ""
            raise ValueError(f"zinc: load_checkpoint: {path} holds no value for the parameters "
                             f"zinc does not train {', '.join(kept[:4])}{more} (saved with "
                             f"exclude_frozen_parameters=True?): load_module_strict=False "
                             f"keeps the model's values")
        unknown = extra - sum(found)
        if unknown > 0 and strict:
            raise ValueError(f"zinc: load_checkpoint: {path} holds {unknown} tensors that are "
                             f"not parameters of the model (zinc ckpt inspect lists them): a "
                             f"checkpoint of another model? load_module_strict=False leaves "
                             f"them")
        wanted = [(n, self._full_shape(params[n]),
                   torch.empty(self._full_shape(params[n]), dtype=torch.float32))
                  for n, f in zip(names, found) if f]
        self._read_saved(load_dir, tag, wanted)
        for n, _, out in wanted:
            self._set_untrained(params[n], out.to(params[n].dtype))
        self._zinc_then_torch()      # (the frozen engine's writes too)

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        """Loads load_dir/tag (default: the tag `latest` names, as DeepSpeed; see
        docs/checkpoint-format.md), at any world size and stage.
        Returns (path, client_state). Collective. DeepSpeed's arguments, with its meaning:
        - the defaults load everything: weights, Adam state, the LR schedule's position, the
          step count and the loss scaler;
        - load_module_only=True loads the weights only (warm start; each fp32 master restarts
          from its 16-bit weight, as DeepSpeed's); the Adam state, the schedule's position, the
          counters and the loss scaler stay as they are (fresh in a new engine);
        - load_optimizer_states=False loads the weights (as load_module_only does), the
          counters and the schedule's position, and keeps the engine's
          Adam state and count, loss scaler and param groups; load_lr_scheduler_states=False
          keeps the engine's schedule position (_partial_load.py says what DeepSpeed does).
          The first update after either runs at the lr the groups then show (the
          checkpoint's, or the engine's own with load_optimizer_states=False).
        custom_load_fn (DeepSpeed's): called as custom_load_fn(src=<the checkpoint's module
        state dict, by its own names>, dst=self.module) in place of the module's load, on every
        rank (rank 0's changes are taken); _custom_load.py says where its values go with each
        flag, as in DeepSpeed.
        load_module_strict (DeepSpeed's strict module load): True, a checkpoint must hold the
        model's parameters and buffers, and nothing else, or ValueError names what differs;
        False, what the checkpoint lacks keeps its value (a frozen base saved with
        exclude_frozen_parameters=True, as Hugging Face's Trainer resumes a PEFT model) and
        what the model lacks is left. Either way the full load needs Adam state for every
        parameter zinc trains, and a shape that differs raises. A load that raises may have
        set some of the weights already (as torch's load_state_dict): load again.
        A DeepSpeed checkpoint folder (load_dir/tag, or the tag its `latest` names) loads as it
        is: ZeRO stages 0-3 and universal checkpoints, fp32/fp16/bf16 (_ds_import.py,
        docs/deepspeed-checkpoints.md); what zinc cannot carry raises before anything is set."""
        # What the engine keeps of its own (DeepSpeed's in-between forms; load_module_only
        # keeps all of it): Adam's state and count, and the schedule's position.
        keep_adam = not load_module_only and not load_optimizer_states
        keep_sched = not load_module_only and not load_lr_scheduler_states
        if custom_load_fn is not None and not callable(custom_load_fn):
            raise TypeError(f"zinc: load_checkpoint: custom_load_fn {custom_load_fn!r} is not "
                            f"callable")
        self._no_context("load_checkpoint()")
        self._states_home("load_checkpoint()")
        tag = None if tag is None else _tag_text(tag)
        before, held_before = _partial_load.counts(self), _partial_load.held(self)
        if self._stage == 3:
            # nothing gathered stays: a group a failed forward or backward left gathered kept
            # the values from before the load, which the next forward then computed with
            self._drop_params()
        # At call time: zinc.utils imports the engine, which imports this module.
        from ._ds_import import is_deepspeed, load_deepspeed
        if custom_load_fn is not None:
            from . import _custom_load
            return _custom_load.load(self, custom_load_fn, load_dir, tag,
                                     bool(load_module_only), keep_adam, keep_sched,
                                     bool(load_module_strict), before, held_before)
        if is_deepspeed(load_dir, tag):
            return load_deepspeed(self, load_dir, tag, bool(load_module_strict),
                                  bool(load_module_only), keep_adam, keep_sched)
        return self._load_zinc(load_dir, tag, bool(load_module_strict), bool(load_module_only),
                               keep_adam, keep_sched, before, held_before)

    def _load_zinc(self, load_dir, tag, strict, load_module_only, keep_adam, keep_sched, before,
                   held_before, module=True):
        """load_checkpoint of a zinc checkpoint (its arguments; before, held_before: the
        engine's counts and held lr before the load). module=False: the module state (buffers,
        untrained parameters) is left to a custom_load_fn (a full load only)."""
        # zinc_ckpt_load's weights-only load keeps the optimizer; the counters that go with it
        # are set here (keep_adam)
        weights_only = load_module_only or keep_adam
        cap = _BLOB_CAP
        # zinc's load and the counters read with it change together (_interrupt): a Ctrl-C
        # between them left global_steps behind the loaded state, and the next save's default tag
        # named a step it did not hold
        with held():
            while True:
                buf = ctypes.create_string_buffer(cap)
                # missing_ok: a weights-only load takes what was frozen at the save from the
                # module state (_set_trained). keep_optimizer: DeepSpeed's load_module_only
                # leaves the optimizer state and the counters as they are. caller_reads_extra:
                # _restore_untrained reads the tensors zinc does not register, and says what it
                # leaves.
                opts = LoadOptions(weights_only=int(weights_only),
                                   client_blob=ctypes.addressof(buf),
                                   client_blob_cap=cap, missing_ok=int(weights_only),
                                   keep_optimizer=int(weights_only), caller_reads_extra=1)
                # torch -> zinc (WAR): the load overwrites weights torch's queued kernels may read.
                self._torch_then_zinc()
                status = lib.zinc_ckpt_load(self._e, os.fsencode(load_dir),
                                            None if tag is None else str(tag).encode(),
                                            ctypes.byref(opts))
                if status != 0 and opts.client_blob_bytes > cap:
                    cap = opts.client_blob_bytes       # big buffers: once more, with the room
                    continue
                try:
                    self._call(status)
                except ZincError as err:
                    raise _no_checkpoint_either(err, load_dir) from None
                break
            if not weights_only:       # (its zeroing of a lent buffer: before the wait below)
                self._fresh_window()
            # zinc -> torch (RAW): the loaded weights are in place before torch reads them (and
            # the buckets zinc zeroed, restarting the window, before torch adds into them).
            self._zinc_then_torch()
            self._restart_window("load_checkpoint")
            client, done, frozen_then = {}, set(), {}
            if opts.client_blob_bytes:
                text, _, module_state = buf.raw[:opts.client_blob_bytes].partition(b"\0")
                if module_state and module:
                    done, frozen_then = self._restore_module_state(module_state, strict)
                saved = json.loads(text.decode())
                client = _client_state_of(saved)
                if not load_module_only:
                    self._counters_from(saved)
                    self._load_lr_state(saved, groups=not keep_adam, sched=not keep_sched)
            elif not weights_only:
                # No blob (saved through the C API): DeepSpeed's counters from the engine's own,
                # since step() counts on from here (global_steps restarted at 0 otherwise).
                applied, skipped = ctypes.c_int64(), ctypes.c_int64()
                lib.zinc_engine_steps(self._e, ctypes.byref(applied), ctypes.byref(skipped))
                self._steps = applied.value + skipped.value
                self._skipped = skipped.value
                self._samples = self._steps * self.train_batch_size()
            if weights_only:
                # the weights alone: each fp32 master restarts from its 16-bit weight, as
                # DeepSpeed's refresh_fp32_params / _restore_from_bit16_weights do
                _partial_load.masters_from_16bit(self)
                self._zinc_then_torch()
            # (before the checks below, which may raise: the counters then still go with the
            # weights loaded)
            if keep_adam or keep_sched:
                self._partial_counts(load_dir, opts.loaded_tag.decode(), keep_adam, keep_sched,
                                     before, held_before, bool(opts.client_blob_bytes))
            if opts.missing:
                self._set_trained(load_dir, opts.loaded_tag.decode(), frozen_then, opts.missing,
                                  strict)
            if module:
                self._restore_untrained(load_dir, opts.loaded_tag.decode(), done, opts.extra,
                                        strict)
        return os.path.join(load_dir, opts.loaded_tag.decode()), client

    def _counters_from(self, saved):
        """DeepSpeed's counters from a checkpoint's blob record (save_checkpoint's JSON)."""
        self._steps = int(saved.get("global_steps", 0))
        # As DeepSpeed's load: global_samples defaults to steps x train_batch_size.
        self._skipped = int(saved.get("skipped_steps", 0))
        self._samples = int(saved.get("global_samples", self._steps * self.train_batch_size()))
        self._lr = float(saved.get("lr", self._lr))

    def _partial_counts(self, load_dir, tag, keep_adam, keep_sched, before, held_before,
                        had_blob):
        """After load_checkpoint's zinc load with load_optimizer_states or
        load_lr_scheduler_states False (_partial_load.py): the counts the engine keeps
        (`before`: its counts before the load), the checkpoint's others, and the lr of the
        first update (the engine's own from before, or the checkpoint's)."""
        if not keep_adam:           # a full load, the schedule's position kept
            first = _partial_load.held(self)
            _partial_load.set_sched(self, before.sched)
            _partial_load.first_update(self, first)
            return
        # The weights alone were loaded: the counters and the schedule's position come from
        # the manifest (the engine state every rank's load read)
        from .utils.zero_to_fp32 import read_manifest      # (zinc.utils imports the engine)
        st = read_manifest(load_dir, tag)["engine_state"]
        step, skipped = int(st["step"]), int(st["skipped"])
        if not had_blob:            # saved through the C API: DeepSpeed's counters from these
            self._steps, self._skipped = step + skipped, skipped
            self._samples = self._steps * self.train_batch_size()
        sched = before.sched if keep_sched else step + int(st.get("sched_lead", 0))
        state = TrainState(applied=step, skipped=skipped, scaler_scale=0.0,
                           scaler_hysteresis=1, scaler_iter=0, scaler_last_overflow_iter=-1)
        _partial_load.set_counts(self, state, before.adam, sched)
        _partial_load.first_update(self, held_before)

    def _fresh_window(self):
        """After a full load: the next micro-batch starts an accumulation window, as after
        DeepSpeed 0.19.8's load_checkpoint, whose checkpoint has no micro-step count. zinc's
        holds the count of a window saved midway, which zinc_ckpt_load restored: the first
        window after the load ended early, its loss still divided by the whole window's steps.
        zinc_engine_set_train_state with the counters as they are (a scale of 0 keeps the loss
        scaler) sets it to 0."""
        applied, skipped = ctypes.c_int64(), ctypes.c_int64()
        lib.zinc_engine_steps(self._e, ctypes.byref(applied), ctypes.byref(skipped))
        state = TrainState(applied=applied.value, skipped=skipped.value, scaler_scale=0.0)
        self._call(lib.zinc_engine_set_train_state(self._e, ctypes.byref(state)))

    def _lr_state(self):
        """What the checkpoint keeps of the optimizer values carried outside zinc: each group's
        betas, eps and weight decay, the groups' lr where they drive it or hold one the
        schedule has not written (for the next update alone: after a load with
        load_optimizer_states=False, a load_state_dict, a write), and a client scheduler's
        state_dict (torch.save, base64). DeepSpeed's checkpoint holds its groups' lr
        whatever wrote it; a load runs the next update at it."""
        out = {"group_adam": self._opt._adam_state()}
        if self._unscaled_loss:     # fp16 at stage 0: the moments are in gradient / loss scale
            out["moments_over_scale"] = True
        if self._opt._taken or self._opt._lrs() != self._opt._shown:
            out["group_lr"] = self._opt._lrs()
        if self._client_sched is not None and hasattr(self._client_sched, "state_dict"):
            raw = io.BytesIO()
            torch.save(self._client_sched.state_dict(), raw)
            out["lr_scheduler"] = base64.b64encode(raw.getvalue()).decode()
        return out

    def _load_lr_state(self, saved, groups=True, sched=True):
        if (groups and bool(saved.get("moments_over_scale")) != self._unscaled_loss
                and self.global_rank == 0):     # (the moments loaded: not with groups False)
            # (engine.py, _unscaled_loss; an older checkpoint has no key: gradient units)
            was, now = (("fp16 at ZeRO stage 0", "gradients") if saved.get("moments_over_scale")
                        else ("another setting", "units of gradient / loss scale"))
            warnings.warn(f"zinc: load_checkpoint: the checkpoint was saved with {was}, whose "
                          f"Adam moments are in other units than fp16 at stage 0 keeps them "
                          f"(gradient / loss scale, as DeepSpeed 0.19.8's) or every other "
                          f"setting (gradients); here they go on taken as {now}, exact only at "
                          f"a loss scale of 1", RuntimeWarning, stacklevel=3)
        if self._client_sched is not None and "lr_scheduler" in saved and sched:
            state = torch.load(io.BytesIO(base64.b64decode(saved["lr_scheduler"])))
            self._client_sched.load_state_dict(state)
        if not groups:      # load_optimizer_states=False: the groups keep their values
            return
        if "group_lr" in saved:
            self._opt._restore(saved["group_lr"])
        else:                   # the schedule runs: the groups show the next step's lr
            self._opt._after_step()
        if "group_adam" in saved:
            self._opt._restore_adam(saved["group_adam"])

    def _zero3_consolidated_16bit_state_dict(self, exclude_frozen_parameters=False):
        """DeepSpeed's (called by HF accelerate's get_state_dict at stage 3): the full 16-bit
        state dict on the CPU on rank 0, None on the other ranks. Stage 3 only (ValueError
        otherwise, as DeepSpeed). Collective."""
        if self._stage != 3:
            raise ValueError("zinc: _zero3_consolidated_16bit_state_dict requires ZeRO stage 3")
        sd = self._full_state_dict(None, "", exclude_frozen_parameters, True)
        return sd if self.global_rank == 0 else None

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """DeepSpeed's save_16bit_model: the model's full state dict in the working dtype (what
        module_state_dict returns, every tensor on the CPU) written by rank 0 with torch.save to
        save_dir/save_filename, through a temporary file in save_dir renamed over it (a crash
        leaves the old file or none, never half a file). At stage 3 only when the config sets
        zero_optimization.stage3_gather_16bit_weights_on_model_save: without it, as DeepSpeed,
        nothing is saved and it returns False (with a ZincConfigWarning on rank 0). Returns True
        when saved. Collective: every rank must call it; a failure to write on rank 0 raises on
        every rank."""
        path = os.path.join(save_dir, save_filename)
        if self._stage == 3 and not self.zero_gather_16bit_weights_on_model_save():
            if self.global_rank == 0:
                from .engine import ZincConfigWarning   # engine imports this module: at call time
                warnings.warn(f"zinc: save_16bit_model did not save {path}: at stage 3 it needs "
                              "zero_optimization.stage3_gather_16bit_weights_on_model_save: "
                              "true in the config (as DeepSpeed)", ZincConfigWarning,
                              stacklevel=2)
            return False
        sd = self._full_state_dict(None, "", exclude_frozen_parameters, True)
        failed = None
        if self.global_rank == 0:
            stem = f".{save_filename}.tmp{socket.gethostname()}-"
            tmp = os.path.join(save_dir, f"{stem}{os.getpid()}")
            try:
                os.makedirs(save_dir, exist_ok=True)
                _remove_dead_tmps(save_dir, stem)
                with open(tmp, "wb") as f:
                    torch.save(sd, f)
                    f.flush()
                    os.fsync(f.fileno())   # the bytes are on disk before the name points at them
                os.replace(tmp, path)
                try:
                    _fsync_dir(save_dir)   # ... and the name itself
                except OSError as ex:      # the file is in place: say so, do not fail the save
                    warnings.warn(f"zinc: save_16bit_model: {path} is in place, but syncing "
                                  f"{save_dir} failed ({ex}): a power loss may lose the rename",
                                  RuntimeWarning, stacklevel=2)
            except Exception as ex:    # noqa: BLE001 — reported below, on every rank
                failed = ex
                try:
                    os.remove(tmp)
                except OSError:
                    pass
        # Every rank learns whether rank 0 wrote the file (and waits for it).
        if self._mean_over_ranks([1.0 if failed else 0.0])[0] > 0:
            if failed is not None:
                raise failed
            raise OSError(f"zinc: save_16bit_model: rank 0 could not write {path} (its "
                          "exception says why)")
        return True

    def save_fp16_model(self, save_dir, save_filename="pytorch_model.bin"):
        """DeepSpeed's older name of save_16bit_model."""
        return self.save_16bit_model(save_dir, save_filename)
