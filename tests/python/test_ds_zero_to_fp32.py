"""test_ds_zero_to_fp32.py — zinc.utils.zero_to_fp32 reads DeepSpeed's checkpoint folders as
DeepSpeed 0.19.8's own deepspeed.utils.zero_to_fp32 does (it refused them before 2026-12-01:
"holds checkpoints in DeepSpeed's format, not zinc's"), so a script that switched its imports
to zinc keeps converting the DeepSpeed checkpoints it has.

    python test_ds_zero_to_fp32.py

- get_fp32_state_dict_from_zero_checkpoint on the ZeRO stage 1-3 fixtures (fp32, bf16, fp16;
  stage 3 with a frozen parameter), with and without exclude_frozen_parameters: the keys in
  DeepSpeed's order, each tensor's dtype, shape and values bitwise what DeepSpeed's function
  returned (ds_fixtures/zero_to_fp32.json, by make_zero_to_fp32.py);
- the stage-0 and universal fixtures, which DeepSpeed's function does not read: the fp32
  masters and the buffer bitwise the fixture's expected.json (DeepSpeed's own values);
- the command line (python -m zinc.utils.zero_to_fp32) on a DeepSpeed folder writes
  pytorch_model.bin holding the same tensors."""
import json
import os
import subprocess
import sys
import tempfile

from _common import check, finish, torch
from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as to_fp32

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "ds_fixtures")


def same_as_deepspeed(case, got, want):
    keys = [k for k, _, _, _ in want]
    bad = [k for k, dtype, shape, values in want
           if k not in got or str(got[k].dtype).replace("torch.", "") != dtype
           or list(got[k].shape) != shape
           or not torch.equal(got[k].float().flatten(), torch.tensor(values, dtype=torch.float32))]
    check(f"{case}: DeepSpeed's keys in its order and its tensors bitwise (differing: {bad})",
          list(got) == keys and not bad, f"zinc's keys {list(got)}, DeepSpeed's {keys}")


def main():
    with open(os.path.join(FIXTURES, "zero_to_fp32.json")) as f:
        ds = json.load(f)["cases"]
    for case, want in ds.items():
        name = case[:-len("_exclude")] if case.endswith("_exclude") else case
        got = to_fp32(os.path.join(FIXTURES, name, "ckpt"),
                      exclude_frozen_parameters=case.endswith("_exclude"))
        same_as_deepspeed(case, got, want)
    for name in ("s0_fp32", "s0_bf16", "u2_fp32", "u3_bf16"):
        with open(os.path.join(FIXTURES, name, "expected.json")) as f:
            want = json.load(f)
        got = to_fp32(os.path.join(FIXTURES, name, "ckpt"))
        bad = [n for n, v in {**want["master"], **want["buffers"]}.items()
               if n not in got or not torch.equal(got[n].float().flatten(),
                                                  torch.tensor(v, dtype=torch.float32))]
        check(f"{name} (DeepSpeed's zero_to_fp32 does not read it): the fp32 masters and the "
              f"buffer bitwise DeepSpeed's (differing: {bad})",
              not bad and set(got) == set(want["master"]) | set(want["buffers"]), f"{list(got)}")
    with tempfile.TemporaryDirectory(dir=".") as d:
        src = os.path.join(FIXTURES, "s3_fp32_frozen", "ckpt")
        r = subprocess.run([sys.executable, "-m", "zinc.utils.zero_to_fp32", src, d],
                           capture_output=True, text=True)
        path = os.path.join(d, "pytorch_model.bin")
        written = torch.load(path) if r.returncode == 0 and os.path.isfile(path) else {}
        same_as_deepspeed("python -m zinc.utils.zero_to_fp32 s3_fp32_frozen", written,
                          ds["s3_fp32_frozen"])
        if r.returncode:
            print(r.stdout, r.stderr)
    finish()


if __name__ == "__main__":
    main()
