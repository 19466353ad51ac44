#!/usr/bin/env python3
"""zero_to_fp32.py — a zinc checkpoint (or a DeepSpeed one) as one consolidated fp32 torch
state_dict, with DeepSpeed's deepspeed.utils.zero_to_fp32 names and meaning (0.19.8), and no
engine, no launcher and no model needed: any world size and ZeRO stage that saved it.

    from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    state_dict = get_fp32_state_dict_from_zero_checkpoint("checkpoints")    # on the CPU
    model.load_state_dict(state_dict)

    python -m zinc.utils.zero_to_fp32 checkpoints out/ [-t TAG] [--safe_serialization]
                                      [--max_shard_size 5GB] [--exclude_frozen_parameters]

What it holds, as DeepSpeed's does: the model's persistent buffers and the parameters zinc did
not train (as saved: in the model's dtype), then every trained parameter from zinc's fp32 master
weights, then one more key for each further holder of a tied parameter (the same tensor).
The master weights come through libzinc (zinc_ckpt_read_tensors without an engine, each chunk's
checksum verified); the buffers and untrained parameters from the client blob that
engine.save_checkpoint writes (zinc_ckpt_find_tag, its checksum verified).
tag=None takes the tag load_checkpoint takes: the one `latest` names, as DeepSpeed reads it
(a tag saved after `latest` was written first; a damaged one skipped with a warning).
"""
import argparse
import ctypes
import gc
import io
import json
import os
import re
import sys
import warnings

import torch

from .._lib import check, lib, read_tensors
from .ds_checkpoint import find_deepspeed_tag, read_deepspeed_checkpoint

_TAG_CAP = 256


def _find_tag(checkpoint_dir, tag):
    """(tag name, client blob bytes) of checkpoint_dir's tag (None: the one a load takes)."""
    name = ctypes.create_string_buffer(_TAG_CAP)
    size = ctypes.c_size_t()
    d = os.fsencode(checkpoint_dir)
    check(lib.zinc_ckpt_find_tag(d, None if tag is None else str(tag).encode(), name, _TAG_CAP,
                                 None, 0, ctypes.byref(size)))
    blob = b""
    if size.value:
        buf = ctypes.create_string_buffer(size.value)
        check(lib.zinc_ckpt_find_tag(d, name.value, name, _TAG_CAP, buf, size.value,
                                     ctypes.byref(size)))
        blob = buf.raw[:size.value]
    return name.value.decode(), blob


def read_manifest(checkpoint_dir, tag):
    """The tag's manifest.json as a dict (format in docs/checkpoint-format.md), for a caller
    that libzinc has just had verify it (zinc_ckpt_find_tag, zinc_ckpt_load)."""
    with open(os.path.join(checkpoint_dir, tag, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _tensor_table(checkpoint_dir, tag):
    """[(name, shape)] of the tensors zinc trained, from the tag's manifest."""
    return [(t["name"], tuple(t["shape"])) for t in read_manifest(checkpoint_dir, tag)["tensors"]]


def _saved_module_state(blob):
    """engine.save_checkpoint's blob: its JSON record, and the torch.save'd buffers and
    untrained parameters after the NUL (empty when none were saved). A checkpoint that another
    writer saved (`zinc train`, a C program) has neither: its trained tensors are all there is."""
    text, _, raw = blob.partition(b"\0")
    try:
        record = json.loads(text.decode()) if text else {}
    except ValueError:          # a blob of another writer (a C program's own state)
        return {}, {}
    if not isinstance(record, dict):
        return {}, {}
    extra = {}
    if raw:
        extra = torch.load(io.BytesIO(raw))
    return record, extra


def _read_master(checkpoint_dir, tag, wanted):
    """zinc's fp32 master weights of `wanted` [(name, shape)], all in one read."""
    outs = [torch.empty(shape, dtype=torch.float32) for _, shape in wanted]
    found = read_tensors(None, checkpoint_dir, tag, [(n, s, o) for (n, s), o in zip(wanted, outs)])
    lost = [n for (n, _), f in zip(wanted, found) if not f]
    if lost:
        raise ValueError(f"zinc: {os.path.join(checkpoint_dir, tag)} lacks {lost}")
    return outs


class LazyTensor:
    """lazy_mode's value for a trained parameter: its shape and dtype; contiguous() reads it
    (DeepSpeed's GatheredTensor shape)."""

    def __init__(self, checkpoint_dir, tag, name, stored, scalar):
        self.checkpoint_dir, self.tag, self.name, self._stored = checkpoint_dir, tag, name, stored
        self.shape, self.dtype = torch.Size(() if scalar else stored), torch.float32

    def contiguous(self):
        t = _read_master(self.checkpoint_dir, self.tag, [(self.name, self._stored)])[0]
        return t.reshape(self.shape)

    def numel(self):
        return self.shape.numel()


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None,
                                             exclude_frozen_parameters=False, lazy_mode=False):
    """DeepSpeed's: the consolidated state_dict of checkpoint_dir/tag, on the CPU. Trained
    parameters are fp32; buffers and untrained parameters as saved; a tied parameter's other
    names map to the same tensor. exclude_frozen_parameters leaves out the parameters saved as
    frozen. lazy_mode: each trained parameter is a LazyTensor, read by its contiguous()."""
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"zinc: checkpoint directory {checkpoint_dir!r} does not exist")
    if find_deepspeed_tag(checkpoint_dir, None if tag is None else str(tag)) is not None:
        return _deepspeed_state_dict(checkpoint_dir, tag, exclude_frozen_parameters)
    tag, blob = _find_tag(checkpoint_dir, tag)
    record, extra = _saved_module_state(blob)
    table = _tensor_table(checkpoint_dir, tag)
    frozen = set(record.get("frozen_params", []))
    if exclude_frozen_parameters and extra and "frozen_params" not in record:
        warnings.warn(f"zinc: {os.path.join(checkpoint_dir, tag)} was saved before zinc "
                      "recorded which saved tensors are frozen parameters: "
                      "exclude_frozen_parameters leaves none out", RuntimeWarning, stacklevel=2)
    state = {n: t for n, t in extra.items()
             if not (exclude_frozen_parameters and n in frozen)}
    scalars = set(record.get("scalar_params", []))
    if lazy_mode:
        for n, shape in table:
            state[n] = LazyTensor(checkpoint_dir, tag, n, shape, n in scalars)
    else:
        for (n, _), t in zip(table, _read_master(checkpoint_dir, tag, table)):
            state[n] = t.reshape(()) if n in scalars else t
    for alias, owner in record.get("tied", {}).items():
        if owner in state:
            state[alias] = state[owner]
    return state


def _deepspeed_state_dict(checkpoint_dir, tag, exclude_frozen_parameters):
    """get_fp32_state_dict_from_zero_checkpoint of a DeepSpeed checkpoint folder (read by
    ds_checkpoint.py, as engine.load_checkpoint reads it), in DeepSpeed 0.19.8's own order: the
    buffers, the frozen parameters (as saved), the trained parameters' fp32 masters in its
    optimizer's order, then each tied parameter's other name. Also for the ZeRO stage-0 and
    universal checkpoints DeepSpeed's zero_to_fp32 does not read. The tensors are read whole
    (lazy_mode has nothing to save here: the reader holds them already)."""
    ds = read_deepspeed_checkpoint(checkpoint_dir, None if tag is None else str(tag))
    state = {n: ds.module[n] for n in ds.buffer_names if n in ds.module}
    if not exclude_frozen_parameters:
        state.update((n, ds.module[n]) for n in ds.frozen if n in ds.module)
    state.update(ds.master)
    for alias, owner in (ds.client_state.get("shared_params") or {}).items():
        if owner in state:
            state[alias] = state[owner]
    return state


def load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None):
    """DeepSpeed's: moves model to the CPU, loads the consolidated fp32 state_dict into it
    (strict=False, as DeepSpeed) and returns it."""
    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag)
    model = model.cpu()
    model.load_state_dict(state, strict=False)
    return model


_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "B": 1}


def _size_bytes(size):
    """max_shard_size as bytes: an int, or "5GB" / "500MiB" (GB = 10^9, GiB = 2^30, as
    huggingface_hub reads it)."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)\s*", str(size).upper())
    if not m:
        raise ValueError(f"zinc: max_shard_size {size!r} is not a size such as 5GB or 500MiB")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _shards(state, dtype, max_bytes):
    """[[names]]: state's tensors in order, a new shard started when the next would pass
    max_bytes (one larger than it alone in a shard). A tied name joins its tensor's shard, so
    each tensor is written once."""
    shards, size, home = [[]], 0, {}
    for n, t in state.items():
        if id(t) in home:
            shards[home[id(t)]].append(n)
            continue
        item = torch.empty((), dtype=dtype if t.dtype.is_floating_point else t.dtype)
        nbytes = t.numel() * item.element_size()
        if shards[-1] and max_bytes is not None and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(n)
        home[id(t)] = len(shards) - 1
        size += nbytes
    return shards


def _materialize(state, names, dtype, safe):
    """One shard's tensors, floating ones in dtype; its LazyTensors read in one read (each
    chunk decoded once)."""
    lazy = {id(t): t for t in (state[n] for n in names) if isinstance(t, LazyTensor)}
    if lazy:
        first = next(iter(lazy.values()))
        read = _read_master(first.checkpoint_dir, first.tag,
                            [(t.name, t._stored) for t in lazy.values()])
        lazy = {i: v.reshape(t.shape) for (i, t), v in zip(lazy.items(), read)}
    out, done = {}, {}
    for n in names:
        t = state[n]
        if id(t) in done:          # a tied name: the same tensor (safetensors: a copy)
            out[n] = out[done[id(t)]].clone() if safe else out[done[id(t)]]
            continue
        done[id(t)] = n
        v = lazy.get(id(t), t)
        out[n] = v.to(dtype) if v.dtype.is_floating_point and v.dtype != dtype else v
    return out


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
           "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def _output_dtype(dtype):
    """A torch dtype, or its name as DeepSpeed takes it ("bf16", "torch.bfloat16", ...)."""
    if isinstance(dtype, str):
        dtype = _DTYPES.get(dtype.lower().replace("torch.", "", 1), dtype)
    if dtype not in set(_DTYPES.values()):
        raise ValueError(f"zinc: output dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    return dtype


def convert_zero_checkpoint_to_state_dict(checkpoint_dir, output_dir, dtype=torch.float32,
                                          max_shard_size="5GB", safe_serialization=False,
                                          tag=None, exclude_frozen_parameters=False):
    """DeepSpeed's: writes the consolidated state_dict into output_dir as pytorch_model.bin
    (torch.save) or model.safetensors (safe_serialization; needs the safetensors package),
    floating tensors in dtype, sharded (name-NNNNN-of-NNNNN and an .index.json, as Hugging
    Face's) when it is larger than max_shard_size (None: never sharded). Each file is written
    under a temporary name and renamed when complete."""
    dtype = _output_dtype(dtype)
    if safe_serialization:
        try:
            from safetensors.torch import save_file
        except ImportError as ex:
            raise ImportError("zinc: safe_serialization=True needs the safetensors package "
                              "(pip install safetensors)") from ex

        def save(tensors, path):
            save_file(tensors, path, metadata={"format": "pt"})
    else:
        save = torch.save
    max_bytes = None if max_shard_size is None else _size_bytes(max_shard_size)
    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag,
                                                     exclude_frozen_parameters, lazy_mode=True)
    weights = "model.safetensors" if safe_serialization else "pytorch_model.bin"
    shards = _shards(state, dtype, max_bytes)
    os.makedirs(output_dir, exist_ok=True)
    stem, ext = os.path.splitext(weights)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        fname = weights if len(shards) == 1 else f"{stem}-{i + 1:05d}-of-{len(shards):05d}{ext}"
        tensors = _materialize(state, names, dtype, safe_serialization)
        total += sum(t.numel() * t.element_size()
                     for t in {id(t): t for t in tensors.values()}.values())
        path = os.path.join(output_dir, fname)
        save(tensors, path + ".tmp")
        os.replace(path + ".tmp", path)
        weight_map.update({n: fname for n in names})
        print(f"zinc: wrote {path} ({len(names)} tensors, shard {i + 1} of {len(shards)})",
              flush=True)
        del tensors
        gc.collect()
    if len(shards) > 1:
        index = os.path.join(output_dir, weights + ".index.json")
        with open(index + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f,
                      indent=2, sort_keys=True)
            f.write("\n")
        os.replace(index + ".tmp", index)


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir, output_dir, max_shard_size="5GB",
                                               safe_serialization=False, tag=None,
                                               exclude_frozen_parameters=False):
    """DeepSpeed's: convert_zero_checkpoint_to_state_dict with dtype float32."""
    return convert_zero_checkpoint_to_state_dict(checkpoint_dir, output_dir, torch.float32,
                                                 max_shard_size, safe_serialization, tag,
                                                 exclude_frozen_parameters)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m zinc.utils.zero_to_fp32",
        description="Write a zinc (or DeepSpeed) checkpoint's weights as one consolidated "
                    "torch state_dict (DeepSpeed's zero_to_fp32.py).")
    p.add_argument("checkpoint_dir", help="the save directory (holds the tags and `latest`)")
    p.add_argument("output_dir", help="where pytorch_model.bin (or model.safetensors) goes")
    p.add_argument("--max_shard_size", default="5GB",
                   help="shard above this size, e.g. 5GB or 500MiB (default 5GB)")
    p.add_argument("--safe_serialization", action="store_true",
                   help="write safetensors (needs the safetensors package)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("-t", "--tag", default=None,
                   help="the tag to convert (default: the one a load takes, latest's)")
    p.add_argument("--exclude_frozen_parameters", action="store_true",
                   help="leave out the parameters saved as frozen")
    p.add_argument("-d", "--debug", action="store_true",
                   help="accepted for DeepSpeed's command line; no effect")
    a = p.parse_args(argv)
    try:
        convert_zero_checkpoint_to_state_dict(a.checkpoint_dir, a.output_dir, a.dtype,
                                              a.max_shard_size, a.safe_serialization, a.tag,
                                              a.exclude_frozen_parameters)
    except (OSError, ValueError, ImportError, RuntimeError) as ex:
        print(f"zero_to_fp32: {ex}", file=sys.stderr)
        return 1
    return 0


__all__ = ["get_fp32_state_dict_from_zero_checkpoint", "load_state_dict_from_zero_checkpoint",
           "convert_zero_checkpoint_to_state_dict", "convert_zero_checkpoint_to_fp32_state_dict",
           "LazyTensor"]

if __name__ == "__main__":
    sys.exit(main())
