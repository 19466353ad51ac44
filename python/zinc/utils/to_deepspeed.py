#!/usr/bin/env python3
"""to_deepspeed.py — a zinc checkpoint written as a DeepSpeed universal checkpoint, offline:

    python -m zinc.utils.to_deepspeed ZINC_DIR OUT_DIR [--tag T]

OUT_DIR/T (T: the zinc tag, default the one a load picks: `latest`'s) is what DeepSpeed 0.19.8's
ds_to_universal writes, so DeepSpeed resumes it at any world size and ZeRO stage with
"checkpoint": {"load_universal": true}; OUT_DIR/latest_universal names it.

    T/zero/<param>/fp32.pt, exp_avg.pt, exp_avg_sq.pt   {"param": full fp32 tensor}
    T/zero/<param>/step.pt                              the Adam step (a tensor), stages 1-2
    T/zero/<buffer>/fp32.pt                             as ds_to_universal writes buffers
    T/zero/optimizer_state.pt                           param_groups (lr, betas, eps, weight
                                                        decay per group), the step (stage 3's
                                                        loader reads it there), ds_version
    T/mp_rank_00_model_states.pt and                    the counters, the LR scheduler's
    T/zero_pp_rank_0_mp_rank_00_model_states.pt         position, param_shapes, the module
                                                        state (16-bit weights, buffers),
                                                        client_state (stages 0-2 read the
                                                        first name, stage 3 the second)

The tensors come through libzinc: a one-rank engine registers the checkpoint's tensors (its
manifest's table), loads the tag (checksums verified) and gives each tensor's fp32 master and
Adam moments (zinc_param_get, zinc_param_state_get) and the step count; the buffers, frozen
parameters, counters, lr and client_state come from the blob engine.save_checkpoint writes.
Not carried (documented in docs/deepspeed-checkpoints.md): the fp16 loss scaler's state (it is
a pickled DeepSpeed object, which zinc does not import: DeepSpeed's loss scaler restarts from
its config) and the buffers at DeepSpeed's universal load (DeepSpeed reads weights from zero/
only; the module state holds them for a reader that wants them).
"""
import argparse
import base64
import collections
import ctypes
import errno
import io
import json
import os
import shutil
import sys

import torch

from .._lib import EngineOptions, LoadOptions, check, lib
from .zero_to_fp32 import _find_tag, _saved_module_state, read_manifest

_DS_VERSION = "0.19.8"     # the DeepSpeed whose layout this writes (its loaders check >= 0.3.17)
_CODE = {"fp32": 0, "fp16": 1, "bf16": 2}
_TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _read_zinc(zinc_dir, tag):
    """(manifest, {name: (master, exp_avg, exp_avg_sq)} fp32, Adam step count): a one-rank
    engine over the checkpoint's tensor table loads the tag and hands its values out."""
    manifest = read_manifest(zinc_dir, tag)
    dtype = manifest["dtype"]
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0},
           "optimizer": {"type": "AdamW", "params": {}}}
    if dtype in ("fp16", "bf16"):
        cfg[dtype] = {"enabled": True}
    if dtype == "fp16":
        # a static scale: this engine only reads the values, and a dynamic one at stage 0 made
        # the config warn on every export that fp16.hysteresis has no effect there
        cfg[dtype]["loss_scale"] = 1.0
    e = ctypes.c_void_p()
    opts = EngineOptions(config_path=None, config_json=json.dumps(cfg).encode(), world=None,
                         rank=0, device=b"cpu", threads=0)
    check(lib.zinc_engine_create(ctypes.byref(opts), ctypes.byref(e)))
    try:
        group = ctypes.c_int()
        check(lib.zinc_group_add(e, b"all", ctypes.byref(group)), e)
        pids = []
        for t in manifest["tensors"]:
            shape = (ctypes.c_int64 * len(t["shape"]))(*t["shape"])
            pid = ctypes.c_int()
            check(lib.zinc_param_add(e, group.value, t["name"].encode(), len(t["shape"]), shape,
                                     _CODE[dtype], ctypes.byref(pid)), e)
            pids.append(pid.value)
        check(lib.zinc_finalize(e), e)
        load = LoadOptions(weights_only=0, client_blob=None, client_blob_cap=0, missing_ok=0,
                           keep_optimizer=0, caller_reads_extra=2)   # 2: a reader, no run
        check(lib.zinc_ckpt_load(e, os.fsencode(zinc_dir), tag.encode(), ctypes.byref(load)), e)
        values = {}
        for t, pid in zip(manifest["tensors"], pids):
            out = [torch.empty(t["shape"], dtype=torch.float32) for _ in range(3)]
            check(lib.zinc_param_get(e, pid, ctypes.c_void_p(out[0].data_ptr())), e)
            for which, o in ((0, out[1]), (1, out[2])):
                check(lib.zinc_param_state_get(e, pid, which, ctypes.c_void_p(o.data_ptr())), e)
            values[t["name"]] = out
        step = int(manifest["engine_state"]["step"]) if manifest.get("engine_state") else 0
    finally:
        lib.zinc_engine_destroy(e)
    return manifest, values, step


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2     # <fcntl.h>'s and <linux/fs.h>'s values


def _exchange(a, b):
    """Swaps the two paths in one rename (Linux's renameat2 with RENAME_EXCHANGE, as zinc's
    checkpoint writer does). False where the C library or the file system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def _replace(path, write):
    """write(path + ".tmp") (a file or a folder), then put in place of path, so a reader finds
    the old path or the complete new one; a .tmp a crashed run left is removed first. An earlier
    folder at path is exchanged with the new one in one rename and deleted after: deleting it
    first left a half-deleted tag under path, which latest_universal named, when the export
    was killed then. Where the file system cannot exchange, it is moved to path.old first (a
    kill between the two renames leaves path missing, and the new folder whole in path.tmp:
    export again)."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if not os.path.isdir(path) or os.path.islink(path):
        os.replace(tmp, path)
    elif _exchange(tmp, path):
        shutil.rmtree(tmp, ignore_errors=True)          # the earlier export, now there
    else:
        old = path + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)


def _save(obj, path):
    """torch.save through a temporary name, renamed when complete."""
    _replace(path, lambda tmp: torch.save(obj, tmp))


def _save_param(zdir, name, **tensors):
    """zdir/<name>/<key>.pt = {"param": tensor} for each key=tensor, as ds_to_universal writes
    a parameter's or a buffer's files."""
    pdir = os.path.join(zdir, name)
    os.makedirs(pdir, exist_ok=True)
    for key, t in tensors.items():
        _save({"param": t}, os.path.join(pdir, key + ".pt"))


def _write_tag(tmp, values, step, extra, buffers, frozen, states, record):
    """The universal tag folder tmp: zero/ (each trained tensor's master, moments and step; the
    buffers' and frozen parameters' values; optimizer_state.pt) and the model states file
    under both of DeepSpeed's names."""
    zdir = os.path.join(tmp, "zero")
    os.makedirs(zdir)
    for n, (master, m, v) in values.items():
        _save_param(zdir, n, fp32=master, exp_avg=m, exp_avg_sq=v)
        _save(torch.tensor(float(step)), os.path.join(zdir, n, "step.pt"))
    for n in buffers + frozen:
        _save_param(zdir, n, fp32=extra[n].float())
    # The lr the next step takes, as DeepSpeed saves its groups': "lr" is the last applied
    # step's (the next one's only in a checkpoint written before any step, as from_deepspeed's)
    lrs = record.get("group_lr") or record.get("next_lr") or [record.get("lr", 0.0)] * max(
        1, len(record.get("group_adam", [[]])))
    groups = [{"lr": float(lr), "betas": (b1, b2), "eps": eps, "weight_decay": wd}
              for lr, (b1, b2, eps, wd) in zip(lrs, record.get("group_adam", []))]
    _save({"optimizer_state_dict": {"state": {0: {"step": torch.tensor(float(step))}},
                                    "param_groups": groups},
           "param_groups": groups, "ds_version": _DS_VERSION, "dynamic_loss_scale": False,
           "overflow": False}, os.path.join(zdir, "optimizer_state.pt"))
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        _save(states, os.path.join(tmp, name))


def _is_zinc_tag(path):
    """Whether path holds a zinc checkpoint's manifest (its "format" says so; another
    program's manifest.json is not one)."""
    try:
        with open(os.path.join(path, "manifest.json"), "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"zinc-checkpoint"' in head


def _is_universal(path):
    """Whether path is a folder this converter (or ds_to_universal) wrote: zero/ and a model
    states file, nothing of zinc's."""
    return (os.path.isdir(os.path.join(path, "zero"))
            and os.path.exists(os.path.join(path, "mp_rank_00_model_states.pt"))
            and not _is_zinc_tag(path))


def _check_out(out_dir, tag):
    """Refuses, before anything is written, an output that would replace what is not an
    earlier export of this converter: the zinc checkpoint itself (OUT_DIR the input: its tag
    was deleted and the conversion reported success), a folder inside a zinc tag, or another
    folder at OUT_DIR/TAG (deleted silently before)."""
    target = os.path.join(out_dir, tag)
    here = os.path.realpath(out_dir)
    while True:
        if _is_zinc_tag(here):
            raise ValueError(f"{out_dir} is inside the zinc checkpoint tag {here}: give an "
                             "OUT_DIR outside it")
        up = os.path.dirname(here)
        if up == here:
            break
        here = up
    if _is_zinc_tag(target):
        raise ValueError(f"{target} is a zinc checkpoint (the input itself when OUT_DIR is "
                         f"ZINC_DIR): give another OUT_DIR")
    if os.path.lexists(target) and not _is_universal(target):
        raise ValueError(f"{target} exists and is not an earlier export (no zero/ and "
                         "mp_rank_00_model_states.pt): remove it or give another OUT_DIR")


def _warn(msg):
    print(f"to_deepspeed: warning: {msg}", file=sys.stderr, flush=True)


def convert(zinc_dir, out_dir, tag=None):
    """Writes out_dir/<tag> (the zinc tag) as a DeepSpeed universal checkpoint and
    out_dir/latest_universal; returns the tag. An earlier export of the tag there is replaced;
    anything else there is refused (ValueError), as is a checkpoint without the record the
    Python front-end saves (zinc train's, the C API's)."""
    tag, blob = _find_tag(zinc_dir, tag)
    # T.old is tag T's previous contents, which a load takes while T is missing (a save over T
    # stopped between its renames): exported under T's name
    out = tag[:-4] if tag.endswith(".old") else tag
    _check_out(out_dir, out)
    record, extra = _saved_module_state(blob)
    if not record.get("group_adam"):
        # DeepSpeed's universal load matches its param groups to these: without them it loads
        # no tensor at stages 1-2 (reporting success) and fails at 3.
        raise ValueError(f"{os.path.join(zinc_dir, tag)} holds no param groups (lr, betas, "
                         "eps, weight decay): it was saved by zinc train or the C API, or by "
                         "an import zinc older than the groups' record; load it with import "
                         "zinc and save it again, then convert that")
    manifest, values, step = _read_zinc(zinc_dir, tag)
    scalars = set(record.get("scalar_params", []))
    # A 0-d parameter is stored with one element: DeepSpeed's files give it its shape back.
    values = {n: [t.reshape(()) for t in ts] if n in scalars else ts
              for n, ts in values.items()}
    frozen = sorted(set(record.get("frozen_params", [])) & set(extra))
    buffers = [n for n in extra if n not in frozen and n not in values]
    if "lr_scheduler" in record:         # a client scheduler's own state_dict
        sched = torch.load(io.BytesIO(base64.b64decode(record["lr_scheduler"])))
    else:                                 # DeepSpeed's schedulers: the position alone
        sched_lead = int((manifest.get("engine_state") or {}).get("sched_lead", 0))
        sched = {"last_batch_iteration": step + sched_lead - 1}
    if frozen:
        _warn(f"DeepSpeed 0.19.8's universal load does not restore frozen parameters "
              f"({', '.join(frozen)}): they keep the values the model has; their saved values "
              f"are in {out}/zero/<name>/fp32.pt and the model states file")
    if record.get("moments_over_scale"):
        _warn("saved with fp16 at ZeRO stage 0, whose Adam moments are in units of gradient / "
              "loss scale (as DeepSpeed 0.19.8's stage 0); DeepSpeed resumes a universal "
              "checkpoint at stages 1-3, which take them as gradients (exact only at a loss "
              "scale of 1)")
    adam = record["group_adam"]
    if len(adam) > 1:
        _warn(f"{len(adam)} param groups: DeepSpeed 0.19.8's universal load at ZeRO stage 3 "
              "does not resume a checkpoint of several groups as it was (measured with two "
              "groups of the same settings: losses 1e-3 and masters 2e-2 off the uninterrupted "
              "run; DeepSpeed's own ds_to_universal export alike) and gives every group the "
              "first one's betas, eps and weight decay; resume it at ZeRO stage 1 or 2, which "
              "keep each group's")
    dtype = _TORCH[manifest["dtype"]]
    module = collections.OrderedDict(extra)
    module.update((n, master.to(dtype)) for n, (master, _, _) in values.items())
    states = {}
    if "client_state_torch" in record or "client_state" in record:
        from .._state_io import _client_state_of
        states.update(_client_state_of(record))
    states.update({
        "module": module, "buffer_names": buffers, "optimizer": None,
        "param_shapes": [collections.OrderedDict((n, torch.Size(m.shape))
                                                 for n, (m, _, _) in values.items())],
        "frozen_param_shapes": collections.OrderedDict((n, extra[n].shape) for n in frozen),
        "shared_params": dict(record.get("tied", {})), "frozen_param_fragments": {},
        "lr_scheduler": sched, "data_sampler": None, "random_ltd": None,
        # as DeepSpeed 0.19.8's save (_checkpoint_parallel_metadata): its load hands any key it
        # does not know back as client_state
        "checkpoint_parallel_dimensions": {"pp_degree": 1, "tp_degree": 1},
        "skipped_steps": int(record.get("skipped_steps", 0)),
        "global_steps": int(record.get("global_steps", step)),
        "global_samples": int(record.get("global_samples", 0)),
        "dp_world_size": int(manifest.get("world_size", 1)), "mp_world_size": 1,
        "ds_config": {}, "ds_version": _DS_VERSION})
    # Adam's own count runs ahead of the applied steps by the lead (engine_state.adam_lead: 1
    # after DeepSpeed's 16-bit stage-0 optimizers' step on zero gradients at their construction)
    lead = int((manifest.get("engine_state") or {}).get("adam_lead", 0))
    _replace(os.path.join(out_dir, out), lambda tmp: _write_tag(
        tmp, values, step + lead, extra, buffers, frozen, states, record))

    def write_latest(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(out)
    _replace(os.path.join(out_dir, "latest_universal"), write_latest)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m zinc.utils.to_deepspeed",
        description="Write a zinc checkpoint as a DeepSpeed universal checkpoint "
                    "(DeepSpeed resumes it with checkpoint.load_universal).")
    p.add_argument("zinc_dir", help="zinc's save directory")
    p.add_argument("out_dir", help="where OUT_DIR/TAG and OUT_DIR/latest_universal go")
    p.add_argument("-t", "--tag", default=None, help="the zinc tag (default: latest's, as a load picks it)")
    a = p.parse_args(argv)
    try:
        tag = convert(a.zinc_dir, a.out_dir, a.tag)
    except (OSError, ValueError, RuntimeError) as ex:
        print(f"to_deepspeed: {ex}", file=sys.stderr)
        return 1
    print(f"to_deepspeed: wrote {os.path.join(a.out_dir, tag)} (and latest_universal)",
          flush=True)
    return 0


__all__ = ["convert", "main"]

if __name__ == "__main__":
    sys.exit(main())
