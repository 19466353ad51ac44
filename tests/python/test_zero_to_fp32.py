"""test_zero_to_fp32.py — zinc.utils.zero_to_fp32: a zinc checkpoint consolidated into a torch
state_dict without an engine (DeepSpeed's deepspeed.utils.zero_to_fp32 names and meaning).

    python test_zero_to_fp32.py STAGE DTYPE DIR        (also under mpirun -np 2)

A model with a tied weight, a frozen parameter, a 0-dim parameter, a persistent and a
non-persistent buffer trains 3 steps at ZeRO stage STAGE (fp32 or bf16) and saves two tags.
Rank 0 then reads them with no engine:
- get_fp32_state_dict_from_zero_checkpoint has model.state_dict()'s keys; the trained
  parameters equal the engine's fp32 master (module_state_dict in fp32 mode, its bf16 values
  rounded in bf16), the frozen parameter and the buffer as saved, the 0-dim parameter 0-dim, the
  tied names one tensor; tag=None is the newest tag, a tag named is that one;
  exclude_frozen_parameters leaves the frozen one out; lazy_mode reads on contiguous();
- load_state_dict_from_zero_checkpoint fills a fresh model (strict load of its state_dict);
- convert_zero_checkpoint_to_fp32_state_dict writes pytorch_model.bin (torch.load gives the
  same), sharded with an index under a small max_shard_size (the tied names in one shard), bf16
  with dtype;
- `python -m zinc.utils.zero_to_fp32` does the same and exits 0; a missing directory, an empty
  one, a bad tag and a damaged rank file are errors naming them (exit 1 from the command).
Each check prints its name; exit 1 when one fails, 77 without torch.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

from _common import check, check_raises, failures, torch, zinc

from zinc.utils import zero_to_fp32 as z2f


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(16, 8)
        self.body = torch.nn.Linear(8, 8)
        self.frozen = torch.nn.Linear(8, 8)
        self.frozen.requires_grad_(False)
        self.gain = torch.nn.Parameter(torch.tensor(1.5))        # 0-dim
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight                         # tied
        self.register_buffer("count", torch.arange(4, dtype=torch.int64))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)

    def forward(self, idx):
        h = self.emb(idx)
        h = torch.tanh(self.body(h)) + self.frozen(h) * self.gain
        return self.head(h)


def cfg(stage, dtype):
    c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
         "zero_optimization": {"stage": stage}}
    if dtype == "bf16":
        c["bf16"] = {"enabled": True}
    return c


def train(engine, steps):
    g = torch.Generator().manual_seed(engine.global_rank + 10 * engine.global_steps)
    for _ in range(steps):
        idx = torch.randint(0, 16, (2, 5), generator=g)
        loss = engine(idx).float().pow(2).mean()
        engine.backward(loss)
        engine.step()


def equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def saved_state(engine):
    """The engine's module_state_dict at a save: the working dtype's values, which the
    consolidated dict's fp32 master must round to (check_dict)."""
    return {k: v.detach().clone() for k, v in engine.module_state_dict().items()}


def check_dict(what, got, want, dtype, trained):
    check(f"{what}: the model's state_dict keys", set(got) == set(want),
          f"{sorted(set(got) ^ set(want))}")
    bad = []
    for k in set(got) & set(want):
        g, w = got[k], want[k]
        if k in trained:
            ok = g.dtype == torch.float32 and g.shape == w.shape and (
                torch.equal(g, w) if dtype == "fp32" else torch.equal(g.to(torch.bfloat16), w))
        else:
            ok = equal(g, w)
        if not ok:
            bad.append(k)
    check(f"{what}: values (trained: the fp32 master; others as saved)", not bad, f"{bad}")


def offline(d, stage, dtype, want_new, want_old, trained):
    sd = z2f.get_fp32_state_dict_from_zero_checkpoint(d)
    check_dict("tag=None (the newest)", sd, want_new, dtype, trained)
    check("the tied names are one tensor", sd["head.weight"] is sd["emb.weight"])
    check("the 0-dim parameter is 0-dim", sd["gain"].shape == torch.Size([]),
          f"{tuple(sd['gain'].shape)}")
    check("the non-persistent buffer is not there", "scratch" not in sd)
    old = z2f.get_fp32_state_dict_from_zero_checkpoint(d, tag="first")
    check_dict("tag='first'", old, want_old, dtype, trained)
    check("the two tags differ (training moved the weights)",
          not torch.equal(old["body.weight"], sd["body.weight"]))
    nofrozen = z2f.get_fp32_state_dict_from_zero_checkpoint(d, exclude_frozen_parameters=True)
    check("exclude_frozen_parameters leaves out the frozen parameter, keeps the rest",
          set(sd) - set(nofrozen) == {"frozen.weight", "frozen.bias"}, f"{sorted(nofrozen)}")
    lazy = z2f.get_fp32_state_dict_from_zero_checkpoint(d, lazy_mode=True)
    check("lazy_mode: shapes, and contiguous() reads the values",
          lazy["body.weight"].shape == sd["body.weight"].shape and
          torch.equal(lazy["body.weight"].contiguous(), sd["body.weight"]) and
          torch.equal(lazy["gain"].contiguous(), sd["gain"]))

    fresh = Model()
    fresh.body.weight.data.zero_()
    z2f.load_state_dict_from_zero_checkpoint(fresh, d)
    check("load_state_dict_from_zero_checkpoint fills a fresh model",
          torch.equal(fresh.body.weight, sd["body.weight"]) and
          torch.equal(fresh.gain.detach(), sd["gain"]) and fresh.head.weight is fresh.emb.weight)
    strict = Model()
    strict.load_state_dict(sd)       # raises on a missing or unexpected key
    check("a fresh model loads the dict strictly", torch.equal(strict.emb.weight, sd["emb.weight"]))

    # convert writes every floating tensor in its dtype (DeepSpeed's too): a bf16 frozen
    # parameter comes out fp32.
    as32 = {k: v.float() if v.dtype.is_floating_point else v for k, v in sd.items()}
    old32 = {k: v.float() if v.dtype.is_floating_point else v for k, v in old.items()}
    out = os.path.join(d, "..", f"out_{stage}_{dtype}")
    shutil.rmtree(out, ignore_errors=True)
    z2f.convert_zero_checkpoint_to_fp32_state_dict(d, out)
    one = torch.load(os.path.join(out, "pytorch_model.bin"))
    check("convert: pytorch_model.bin holds the same dict, floating tensors fp32",
          set(one) == set(sd) and all(equal(one[k], as32[k]) for k in sd) and
          not glob.glob(os.path.join(out, "*.tmp")))
    z2f.convert_zero_checkpoint_to_fp32_state_dict(d, out + "_sh", max_shard_size=600)
    with open(os.path.join(out + "_sh", "pytorch_model.bin.index.json")) as f:
        index = json.load(f)
    files = sorted(set(index["weight_map"].values()))
    merged = {}
    for fname in files:
        merged.update(torch.load(os.path.join(out + "_sh", fname)))
    check("convert, max_shard_size 600 bytes: several shards, the index maps every key",
          len(files) > 1 and set(index["weight_map"]) == set(sd) and
          all(equal(merged[k], as32[k]) for k in sd), f"{files}")
    check("convert, sharded: the tied names in one shard (the tensor written once)",
          index["weight_map"]["head.weight"] == index["weight_map"]["emb.weight"],
          f"{index['weight_map']['head.weight']} vs {index['weight_map']['emb.weight']}")
    z2f.convert_zero_checkpoint_to_state_dict(d, out + "_bf16", dtype=torch.bfloat16)
    b = torch.load(os.path.join(out + "_bf16", "pytorch_model.bin"))
    check("convert, dtype bfloat16: floating tensors bf16, the int64 buffer kept",
          b["body.weight"].dtype == torch.bfloat16 and b["count"].dtype == torch.int64 and
          torch.equal(b["body.weight"], sd["body.weight"].to(torch.bfloat16)))

    cli = [sys.executable, "-m", "zinc.utils.zero_to_fp32"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(zinc.__file__)))
    r = subprocess.run(cli + [d, out + "_cli", "-t", "first"], env=env, capture_output=True,
                       text=True)
    got = torch.load(os.path.join(out + "_cli", "pytorch_model.bin")) if r.returncode == 0 else {}
    check("python -m zinc.utils.zero_to_fp32 DIR OUT -t first: exit 0, tag first's dict",
          r.returncode == 0 and all(equal(got[k], old32[k]) for k in old), r.stderr[-300:])
    r = subprocess.run(cli + [os.path.join(d, "nowhere"), out + "_x"], env=env,
                       capture_output=True, text=True)
    check("the command on a missing directory: exit 1, naming it",
          r.returncode == 1 and "nowhere" in r.stderr, r.stderr[-300:])

    check_raises("a missing directory raises FileNotFoundError",
                 lambda: z2f.get_fp32_state_dict_from_zero_checkpoint(d + "_none"),
                 FileNotFoundError, d + "_none")
    empty = os.path.join(d, "..", "empty_dir")
    os.makedirs(empty, exist_ok=True)
    check_raises("a directory without a checkpoint raises ZincError naming it",
                 lambda: z2f.get_fp32_state_dict_from_zero_checkpoint(empty), zinc.ZincError,
                 "empty_dir")
    check_raises("a tag that is not there raises ZincError naming it",
                 lambda: z2f.get_fp32_state_dict_from_zero_checkpoint(d, tag="step999"),
                 zinc.ZincError, "step999")
    bad = os.path.join(d, "..", f"damaged_{stage}_{dtype}")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(d, bad)
    rank_file = sorted(glob.glob(os.path.join(bad, "first", "rank-*.zck")))[0]
    with open(rank_file, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    check_raises("a damaged rank file raises ZincError naming the file",
                 lambda: z2f.get_fp32_state_dict_from_zero_checkpoint(bad, tag="first"),
                 zinc.ZincError, os.path.basename(rank_file))


def main():
    stage, dtype, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    model = Model()
    engine, *_ = zinc.initialize(model=model, config=cfg(stage, dtype))
    rank = engine.global_rank
    trained = {n for n, p in model.named_parameters() if p.requires_grad} | {"head.weight"}
    train(engine, 2)
    want_old = saved_state(engine)
    engine.save_checkpoint(d, tag="first")
    train(engine, 1)
    want_new = saved_state(engine)
    engine.save_checkpoint(d, tag="second")
    engine.close()
    if rank == 0:
        offline(d, stage, dtype, want_new, want_old, trained)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
