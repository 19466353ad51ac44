#!/usr/bin/env python3
"""make_client_state.py — writes client_state.json: the keys (and their values' type names) of
the client_state DeepSpeed 0.19.8's load_checkpoint returns for each load flag (the full load,
load_optimizer_states=False, load_lr_scheduler_states=False, both, load_module_only=True) from
three fixtures: lf_fp32_s2 (ZeRO-2), lf_bf16_s1 (ZeRO-1, bf16) and s0_fp32 (stage 0, whose
model states file holds the optimizer's state). test_ds_import.py's `client` mode loads the same
with zinc and compares. Run by hand from a venv with DeepSpeed 0.19.8 (never by CI):

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29877 DS_ACCELERATOR=cpu \\
        /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_client_state.py \\
        tests/python/ds_fixtures/client_state.json

Nothing in the file is written by hand.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def records(initialize):
    """{"<fixture> <flag>": [[key, type name], ...] sorted} for each fixture and flag, the
    engines made by `initialize` (DeepSpeed's or zinc's)."""
    import torch
    import make_fixtures
    from load_flags_cases import FLAGS, config, model
    out = {}
    for name, case in (("lf_fp32_s2", "fp32_s2_noopt"), ("lf_bf16_s1", "bf16_s1_noopt"),
                       ("s0_fp32", None)):
        for flag, kw in FLAGS.items():
            if case is None:
                with open(os.path.join(HERE, name, "expected.json"), encoding="utf-8") as f:
                    want = json.load(f)
                cfg = json.loads(json.dumps(want["config"]))
                cfg["train_micro_batch_size_per_gpu"] = 2 * want["micro_batch"]
                m, d = make_fixtures.net(torch), os.path.join(HERE, name, "ckpt")
            else:
                m, cfg, d = model(1.0), config(case), os.path.join(HERE, name)
            engine, *_ = initialize(model=m, model_parameters=m.parameters(), config=cfg)
            _, cs = engine.load_checkpoint(d, **kw)
            out[f"{name} {flag}"] = sorted([k, type(v).__name__] for k, v in cs.items())
            if hasattr(engine, "close"):
                engine.close()
    return out


def main(argv):
    import deepspeed
    rec = records(deepspeed.initialize)
    with open(argv[1], "w", encoding="utf-8") as f:     # one line per record
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in
                                    sorted(rec.items())) + "\n}\n")


if __name__ == "__main__":
    main(sys.argv)
