"""test_custom_load.py — load_checkpoint(custom_load_fn=...) trains on as DeepSpeed 0.19.8's does
(zinc/_custom_load.py).

    python test_custom_load.py

Each case of custom_load_cases.py (one rank, accumulation 2, AdamW under WarmupLR, fp32 and
bf16, stages 0-3; load_module_only and load_optimizer_states=False with a function that renames
the checkpoint's keys for a renamed model, the full load and load_module_only with one that
edits a weight and a buffer after loading) against what DeepSpeed itself gave
(ds_fixtures/custom_load.json, written by make_custom_load.py): the lr of each window and the
global_steps equal, every loss within 1e-6 relative and every fp32 master and buffer within 4e-6
of DeepSpeed's (relative to the tensor's largest value: test_ds_load_flags.py's bounds). Where
zinc differs on purpose it is compared with what DeepSpeed does at its other stages: at stage 3
with load_module_only (DeepSpeed leaves the weights as they were) with its stage 2, and at stage
0 in bf16 with load_optimizer_states=False (its optimizer keeps its fp32 copies from before the
load) with its run whose copies were refreshed. Run A's checkpoint is zinc's, then, for the
stage-1 and stage-3 cases, a DeepSpeed checkpoint of run A (zinc.utils.to_deepspeed): both load
the same. Before this, custom_load_fn raised NotImplementedError."""
import glob
import json
import os
import shutil
import sys
import tempfile

from _common import check, finish, torch, zinc  # noqa: F401
from custom_load_cases import (CASES, FLAGS, Renamed, _windows, config, edit, model_a, model_b,
                               remap, run)
from load_flags_cases import (_Scale, make_config, model as scale_model, offsets, train_windows,
                              worst_relative)
import zinc.utils as zu
from zinc.utils.to_deepspeed import convert

LOSS_BOUND, VALUE_BOUND = 1e-6, 4e-6


def compare(label, got, want):
    if "raised" in got:
        check(f"{label}: loads ({got['raised']})", False)
        return
    loss_off, master_off, lrs_same, steps_same = offsets(got, want)
    value_off = max(master_off, worst_relative(got["buffers"], want["buffers"]))
    src_same = (got["src_keys"], got["src_dtype"]) == (want["src_keys"], want["src_dtype"])
    check(f"{label}: DeepSpeed's src ({len(want['src_keys'])} keys, {want['src_dtype']}; zinc "
          f"{len(got['src_keys'])}, {got['src_dtype']}), lr per window and global_steps "
          f"{want['global_steps_at_load']}/{want['global_steps']} (zinc "
          f"{got['global_steps_at_load']}/{got['global_steps']}), losses (worst {loss_off:.1e}, "
          f"bound {LOSS_BOUND}) and fp32 masters and buffers (worst {value_off:.1e}, bound "
          f"{VALUE_BOUND})",
          src_same and lrs_same and steps_same and loss_off <= LOSS_BOUND
          and value_off <= VALUE_BOUND)


def master(_e, p):
    return zu.safe_get_full_fp32_param(p)


def reference(ds, case):
    """DeepSpeed's record zinc is held to, and what it is (see the module's docstring)."""
    c = CASES[case]
    if c["stage"] == 3 and c["flag"] == "module":
        return ds[case.replace("_s3_", "_s2_")], " (DeepSpeed's stage 2)"
    if "refreshed" in ds[case]:
        return ds[case]["refreshed"], " (DeepSpeed's, its fp32 copies refreshed)"
    return ds[case], ""


def to_deepspeed(ckpt_dir):
    """Run A's zinc checkpoint as a DeepSpeed checkpoint folder (zinc.utils.to_deepspeed)."""
    out = os.path.join(ckpt_dir, "ds")
    convert(ckpt_dir, out, tag="a")
    return out


def deepspeeds_own(folder):
    """A checkpoint DeepSpeed 0.19.8 wrote itself (ds_fixtures/lf_*: load_flags_cases.py's model
    after 3 windows), loaded with load_module_only into that model under other names through a
    function that renames the keys: every fp32 master and the first window's losses bit for bit
    those of the same load, without a function, into the model under its own names (which
    test_ds_load_flags.py holds to DeepSpeed's own run)."""
    dtype, stage = os.path.basename(folder).split("_")[1:3]
    cfg = make_config(dtype, int(stage[1:]))
    runs = []
    for m, kw in ((scale_model(0.7), {}), (Renamed(0.7, _Scale), {"custom_load_fn": remap})):
        e = zinc.initialize(model=m, model_parameters=m.parameters(), config=cfg)[0]
        e.load_checkpoint(folder, tag="a", load_module_only=True, **kw)
        masters = [master(e, p).clone() for p in e.module.parameters()]
        runs.append((masters, train_windows(e, dtype, 1, 3)[0]))
        e.close()
    same = (all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0]))
            and runs[0][1] == runs[1][1])
    check(f"DeepSpeed's own {os.path.basename(folder)}, load_module_only through a renaming "
          f"function: masters and losses bit for bit the load without one ({runs[1][1]})", same)


def refusals(d):
    """A function that is not callable raises TypeError before anything is loaded; a full load
    with a function into a renamed model raises (the optimizer state is matched by name); a
    missing folder raises as load_checkpoint's own load does, and a damaged one before the
    function runs; an error inside the function comes through and leaves the engine usable."""
    case = "fp32_s1_module_remap"
    m = model_a(1.0)
    a = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    _windows(a, case, 1, 1)
    a.save_checkpoint(d, tag="a")
    m = model_b(case, 0.7)
    b = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    before = {n: p.detach().clone() for n, p in b.module.named_parameters()}
    try:
        b.load_checkpoint(d, tag="a", custom_load_fn="remap")
        said = ""
    except TypeError as ex:
        said = str(ex)
    check(f"a custom_load_fn that is not callable: TypeError ({said})", "not callable" in said)
    try:
        b.load_checkpoint(d, tag="a", custom_load_fn=remap)
        said = ""
    except zinc.ZincError as ex:
        said = str(ex)
    check(f"a full load with a function into a renamed model raises naming a tensor it lacks "
          f"({said[:120]})", "ZINC_ERR_MISMATCH" in said and "first.w" in said)
    try:
        b.load_checkpoint(to_deepspeed(d), tag="a", custom_load_fn=remap)
        said = ""
    except ValueError as ex:
        said = str(ex)
    check(f"the same from DeepSpeed's format: ValueError naming the parameters and the flags that "
          f"take the function's weights ({said[:100]}...)",
          "first.w" in said and "load_module_only=True" in said)

    try:
        b.load_checkpoint(os.path.join(d, "missing"), custom_load_fn=remap)
        said = ""
    except zinc.ZincError as ex:
        said = str(ex)
    check(f"a missing folder raises naming both formats ({said[:90]}...)",
          "nor is it a DeepSpeed checkpoint" in said)
    shard = glob.glob(os.path.join(d, "a", "rank-*.zck"))[0]       # (the tensors' file)
    with open(shard, "rb") as f:
        good = f.read()
    bad = bytearray(good)
    bad[20] ^= 0xFF           # (the masters' first chunk: after the file's 16-byte header)
    with open(shard, "wb") as f:
        f.write(bytes(bad))
    for kw in ({"load_module_only": True}, {"load_optimizer_states": False}):
        try:
            b.load_checkpoint(d, tag="a", custom_load_fn=remap, **kw)
            said = ""
        except zinc.ZincError as ex:
            said = str(ex)
        same = all(torch.equal(before[n], p.detach()) for n, p in b.module.named_parameters())
        check(f"a damaged checkpoint ({kw}) raises ZINC_ERR_CORRUPT before the function runs, "
              f"the weights as they were ({said[:80]}...)", "ZINC_ERR_CORRUPT" in said and same)
    with open(shard, "wb") as f:
        f.write(good)

    def broken(src, dst):
        raise RuntimeError("the function's own error")
    try:
        b.load_checkpoint(d, tag="a", load_module_only=True, custom_load_fn=broken)
        said = ""
    except RuntimeError as ex:
        said = str(ex)
    same = all(torch.equal(before[n], p.detach()) for n, p in b.module.named_parameters())
    losses, _ = _windows(b, case, 1, 3)
    check(f"the function's error comes through ({said}), the weights are as they were and the "
          f"engine trains on (losses {losses})",
          said == "the function's own error" and same and all(x == x for x in losses))


def two_ranks(stage, dtype):
    """Under mpirun -np 2: the function runs on every rank and rank 0's changes are taken (rank
    1 also triples a weight); after each load every rank holds the same weights: A's renamed
    ones, fp32 masters included (load_module_only, load_optimizer_states=False: with A's
    global_steps), or for the full load A's masters with the edited working copy at stage 1
    and A's weights at stage 3, the edited buffer at both; one window on, the ranks' masters
    agree."""
    case = f"{dtype}_s{stage}_module_remap"
    m = model_a(1.0)
    a = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    rank = a.global_rank
    box = [tempfile.mkdtemp(prefix="zinc-custom-") if rank == 0 else None]
    torch.distributed.broadcast_object_list(box, 0)
    d = box[0]
    _windows(a, case, 1, 1 + rank)
    a.save_checkpoint(d, tag="a")
    saved = {k: v.clone() for k, v in a.module_state_dict().items()}
    a_masters = {n: zu.safe_get_full_fp32_param(p).clone() for n, p in a.module.named_parameters()}
    a.close()

    def remap_then_rank1(src, dst):
        remap(src, dst)
        if rank == 1:
            with torch.no_grad():
                dst.first.w.mul_(3)

    def edit_then_rank1(src, dst):
        edit(src, dst)
        if rank == 1:
            with torch.no_grad():
                dst[1].w.mul_(3)

    def gathered(b):
        with zinc.zero.GatheredParameters(list(b.module.parameters())):
            return {n: p.detach().clone() for n, p in b.module.named_parameters()}

    def masters(b):
        return {n: zu.safe_get_full_fp32_param(p).clone() for n, p in b.module.named_parameters()}

    def same_on_ranks(t):
        both = [torch.empty_like(t) for _ in range(2)]
        torch.distributed.all_gather(both, t)
        return torch.equal(both[0], both[1])

    renamed = {("first." if k.startswith("0.") else "second.") + k[2:]: v
               for k, v in saved.items()}
    for flag in ("module", "noopt"):
        m = model_b(case, 0.7)
        b = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
        b.load_checkpoint(d, tag="a", custom_load_fn=remap_then_rank1, **FLAGS[flag])
        w, mw = gathered(b), masters(b)
        ok = all(torch.equal(w[n], renamed[n]) and torch.equal(mw[n], renamed[n].float())
                 for n in w)
        steps = b.global_steps
        _windows(b, case, 1, 5 + rank)
        agree = all(same_on_ranks(t) for t in masters(b).values())
        check(f"{dtype} stage {stage}, {flag}, rank {rank}: A's weights renamed, fp32 masters "
              f"too, rank 1's own change dropped; global_steps {steps}; after a window the "
              f"ranks' masters agree", ok and agree and steps == (1 if flag == "noopt" else 0))
        b.close()
    m = model_a(0.7)
    b = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    b.load_checkpoint(d, tag="a", custom_load_fn=edit_then_rank1)
    w, mw = gathered(b), masters(b)
    want = dict(saved)
    if stage != 3:            # the working copy the first forward runs on (_custom_load.py)
        want["0.w"] = saved["0.w"] * 0.5
        if rank == 1:
            want["1.w"] = saved["1.w"] * 3
    ok = (all(torch.equal(w[n], want[n]) for n in w)
          and all(torch.equal(mw[n], a_masters[n]) for n in mw)
          and torch.equal(dict(b.module.named_buffers())["1.shift"], saved["1.shift"] + 0.25))
    _windows(b, case, 1, 5 + rank)
    agree = all(same_on_ranks(t) for t in masters(b).values())
    check(f"{dtype} stage {stage}, full load, rank {rank}: A's masters, the working copy "
          f"{'A' if stage == 3 else 'the function'}'s, the buffer edited; after a window the "
          f"ranks' masters agree", ok and agree)
    b.close()
    torch.distributed.barrier()
    if rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def main():
    if sys.argv[1:2] == ["mpi"]:
        for stage in (1, 3):
            for dtype in ("fp32", "bf16"):
                two_ranks(stage, dtype)
        finish()
        return
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "ds_fixtures", "custom_load.json")) as f:
        ds = json.load(f)["cases"]
    for case in CASES:
        want, what = reference(ds, case)
        with tempfile.TemporaryDirectory(dir=".") as d:
            compare(case + what, run(zinc.initialize, master, case, d), want)
    for case in CASES:
        if CASES[case]["stage"] in (1, 3):
            want, what = reference(ds, case)
            with tempfile.TemporaryDirectory(dir=".") as d:
                compare(f"{case} from DeepSpeed's format{what}",
                        run(zinc.initialize, master, case, d, export=to_deepspeed), want)
    for saved in ("lf_bf16_s1", "lf_bf16_s3", "lf_fp32_s2"):
        deepspeeds_own(os.path.join(here, "ds_fixtures", saved))
    with tempfile.TemporaryDirectory(dir=".") as d:
        refusals(d)
    finish()


if __name__ == "__main__":
    main()
