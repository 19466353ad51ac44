#!/usr/bin/env python3
"""from_deepspeed.py — a DeepSpeed checkpoint folder written as a zinc checkpoint, offline (no
model, no launcher, no deepspeed):

    python -m zinc.utils.from_deepspeed DS_DIR ZINC_DIR [--tag T]

DS_DIR/T (default: the tag DeepSpeed's `latest`, else `latest_universal`, names) is read by
zinc.utils.ds_checkpoint (ZeRO stages 0-3, BF16_Optimizer, universal; what zinc cannot carry is
refused by name, and nothing is written) and ZINC_DIR/T is written by zinc's own save, so
`zinc ckpt verify|inspect|export`, the C API, engine.load_checkpoint and
zinc.utils.zero_to_fp32 read it as any zinc checkpoint.

How: a torch module is built from the checkpoint's names alone (a submodule per dotted prefix,
the trained parameters, the frozen ones and the buffers, in DeepSpeed's order and dtype), a
zinc engine of one rank at stage 0 is made for it from DeepSpeed's config (its optimizer,
scheduler and fp16/bf16 sections), sets the state it read the way engine.load_checkpoint does
(the folder is read once), and saves. The group layout does not matter to a reader: a zinc checkpoint stores tensors
in model space (name, element range), so any model that names its parameters as DeepSpeed's
module did loads it at any world size and stage. The client blob holds what
engine.save_checkpoint writes: DeepSpeed's counters, the buffers and frozen parameters, and
client_state (DeepSpeed's meaning: every key of the model states file it does not keep itself).
"""
import argparse
import sys

import torch

from .ds_checkpoint import DeepSpeedCheckpointError, read_deepspeed_checkpoint

_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _module_from_names(ds):
    """A torch module whose state_dict has DeepSpeed's names: trained parameters (requires
    grad), frozen ones (not) and buffers, in the module state's order."""
    root = torch.nn.Module()
    dtype = _DTYPE[ds.dtype]
    order = list(ds.module) + [n for n in ds.master if n not in ds.module]

    def owner(name):
        mod = root
        *path, leaf = name.split(".")
        for part in path:
            if part not in mod._modules:
                mod.add_module(part, torch.nn.Module())
            mod = mod._modules[part]
        return mod, leaf

    for n in order:
        mod, leaf = owner(n)
        if n in ds.master:
            mod.register_parameter(leaf, torch.nn.Parameter(
                ds.master[n].to(dtype).clone(), requires_grad=True))
        elif n in ds.buffer_names:
            mod.register_buffer(leaf, ds.module[n].clone())
        elif ds.module[n].numel() > 0:      # a frozen parameter (stage 3: a placeholder, left)
            mod.register_parameter(leaf, torch.nn.Parameter(ds.module[n].clone(),
                                                            requires_grad=False))
    return root


def _config(ds):
    """zinc's config for the one-rank engine that writes the checkpoint: DeepSpeed's optimizer,
    scheduler and precision sections (what the saved engine_state and lr mean)."""
    src = ds.ds_config or {}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 0},
           "optimizer": src.get("optimizer") or {"type": "AdamW", "params": {}}}
    if src.get("scheduler"):
        cfg["scheduler"] = src["scheduler"]
    for key in ("fp16", "bf16"):
        if (src.get(key) or {}).get("enabled"):
            cfg[key] = src[key]
    cfg["optimizer"] = {"type": cfg["optimizer"].get("type", "AdamW"),
                        "params": {k: v for k, v in (cfg["optimizer"].get("params") or
                                                     {}).items() if k != "torch_adam"}}
    return cfg


def convert(ds_dir, zinc_dir, tag=None):
    """Writes zinc_dir/<tag> from the DeepSpeed checkpoint ds_dir/tag; returns the tag."""
    from .. import initialize          # at call time: zinc.utils is imported by the engine
    from .._ds_import import apply_deepspeed
    ds = read_deepspeed_checkpoint(ds_dir, tag)
    model = _module_from_names(ds)
    params = dict(model.named_parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    # DeepSpeed's param groups where the files name their parameters (a decay and a no-decay
    # group keep their own weight decay and lr; to_deepspeed writes them back), else one
    groups = trained
    if (ds.group_names and len(ds.group_names) == len(ds.param_groups) > 1
            and all(n in params for names in ds.group_names for n in names)):
        groups = [{"params": [params[n] for n in names]} for names in ds.group_names]
    engine, *_ = initialize(model=model, model_parameters=groups, config=_config(ds),
                            dist_init_required=False)
    # The state read above, applied as engine.load_checkpoint(ds_dir) would apply it (strict,
    # everything): the folder is read once and held once.
    apply_deepspeed(engine, ds, strict=True, weights_only=False, converting=True)
    engine.save_checkpoint(zinc_dir, tag=ds.tag, client_state=ds.client_state)
    return ds.tag


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m zinc.utils.from_deepspeed",
        description="Write a DeepSpeed checkpoint (ZeRO 0-3 or universal) as a zinc "
                    "checkpoint.")
    p.add_argument("ds_dir", help="DeepSpeed's save directory (holds the tags and `latest`)")
    p.add_argument("zinc_dir", help="where the zinc checkpoint goes (ZINC_DIR/TAG, `latest`)")
    p.add_argument("-t", "--tag", default=None,
                   help="the DeepSpeed tag (default: the one `latest` names)")
    a = p.parse_args(argv)
    try:
        tag = convert(a.ds_dir, a.zinc_dir, a.tag)
    except (OSError, ValueError, DeepSpeedCheckpointError, RuntimeError) as ex:
        print(f"from_deepspeed: {ex}", file=sys.stderr)
        return 1
    print(f"from_deepspeed: wrote {a.zinc_dir}/{tag}", flush=True)
    return 0


__all__ = ["convert", "main"]

if __name__ == "__main__":
    sys.exit(main())
