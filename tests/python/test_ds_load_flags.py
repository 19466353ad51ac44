"""test_ds_load_flags.py — load_checkpoint(load_optimizer_states=False) and
(load_lr_scheduler_states=False) train on as DeepSpeed 0.19.8's do (zinc/_partial_load.py):
the weights and counters loaded, Adam's state and count kept (the first update after a fresh
engine's load takes a first step's bias corrections), the schedule's position the checkpoint's
or kept, the first update at the lr the param groups hold.

    python test_ds_load_flags.py

Each case of load_flags_cases.py (one rank, accumulation 2, AdamW, WarmupLR or OneCycle,
fp32 and bf16, stages 0-3, the full load, each flag, both, load_module_only and the scheduler's
load_state_dict, fresh engines and ones that trained first) against what DeepSpeed itself gave
(ds_fixtures/load_flags.json, written by make_load_flags.py): the lr (and OneCycle's beta1) of
each window equal, the global_steps equal, every loss within 1e-6 relative and every fp32
master within 4e-6 of DeepSpeed's (relative to the tensor's largest value: the parity tests'
fp32 bound; measured worst 2.0e-7 and 5.6e-7). Run A is zinc's own and saves a zinc
checkpoint; then run A's DeepSpeed checkpoints (ds_fixtures/lf_*) are loaded with each flag. At stage 0 in bf16 with load_optimizer_states=False
DeepSpeed's optimizer keeps its fp32 copies from before the load, so its next step writes them
over the loaded weights: zinc loads the weights there, and is compared with DeepSpeed's run
whose copies were refreshed from the loaded weights ("refreshed": its ZeRO stages' behaviour).
The package before this raised NotImplementedError for every case with a flag False."""
import json
import os
import tempfile

from _common import check, finish, torch, zinc  # noqa: F401
from load_flags_cases import (CASES, FLAGS, SAVED, STEPS, WARM, _windows, config, model,
                              offsets, run)
import zinc.utils as zu
from zinc.utils.to_deepspeed import convert

LOSS_BOUND, MASTER_BOUND = 1e-6, 4e-6


def compare(label, got, want):
    loss_off, master_off, lrs_same, steps_same = offsets(got, want)
    check(f"{label}: DeepSpeed's lr per window {want['lrs']} (zinc {got['lrs']}), global_steps "
          f"{want['global_steps_at_load']}/{want['global_steps']} (zinc "
          f"{got['global_steps_at_load']}/{got['global_steps']}), losses (worst {loss_off:.1e}, "
          f"bound {LOSS_BOUND}) and fp32 masters (worst {master_off:.1e}, bound {MASTER_BOUND})",
          lrs_same and steps_same and loss_off <= LOSS_BOUND and master_off <= MASTER_BOUND)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "ds_fixtures", "load_flags.json")) as f:
        ds = json.load(f)["cases"]

    def master(_e, p):
        return zu.safe_get_full_fp32_param(p)

    for case, c in CASES.items():
        if "source" in c:         # a DeepSpeed checkpoint of its own
            compare(case, run(zinc.initialize, master, case,
                              os.path.join(here, "ds_fixtures", c["source"]), saved=True),
                    ds[case])
            continue
        want = ds[case].get("refreshed", ds[case])
        with tempfile.TemporaryDirectory(dir=".") as d:
            compare(case, run(zinc.initialize, master, case, d), want)
    # run A's DeepSpeed checkpoint, loaded with each pair of flags
    for saved in SAVED:
        c = CASES[saved]
        folder = os.path.join(here, "ds_fixtures", f"lf_{c['dtype']}_s{c['stage']}")
        for flag in FLAGS:
            case = f"{c['dtype']}_s{c['stage']}_{flag}"
            if case not in CASES:       # (load_module_only at stage 3)
                continue
            compare(f"{case} from DeepSpeed's checkpoint",
                    run(zinc.initialize, master, case, folder, saved=True), ds[case])
    with tempfile.TemporaryDirectory(dir=".") as d:
        kept_position(d)
    for case in ("bf16_s1_noopt_warm", "fp32_s2_nosched"):
        with tempfile.TemporaryDirectory(dir=".") as d:
            saved_after_load(case, d)
    with tempfile.TemporaryDirectory(dir=".") as d:
        strict_refusal(d)
    finish()


def strict_refusal(d):
    """A strict load_optimizer_states=False load of a checkpoint holding a tensor the model
    lacks raises after the weights went in (as every zinc load that raises; docs/python.md):
    the counters and the schedule's position then go with them (the package of f02c234 left
    the schedule at the engine's own while global_steps said the checkpoint's)."""
    case = "fp32_s1_noopt"
    m = torch.nn.Sequential(*model(1.0), *model(1.0))
    a = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    _windows(a, case, STEPS, 1)
    a.save_checkpoint(d, tag="a")
    m = model(0.7)
    b = zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]
    try:
        b.load_checkpoint(d, tag="a", load_optimizer_states=False)
        raised = ""
    except ValueError as ex:
        raised = str(ex)
    got = (b.global_steps, b.lr_scheduler.last_batch_iteration)
    check(f"a strict load_optimizer_states=False load of a larger model's checkpoint raises "
          f"naming the extra tensors, and global_steps and the schedule's position go together "
          f"(3, 2): {got}", "not parameters of the model" in raised and got == (3, 2), raised)


def saved_after_load(case, d):
    """A checkpoint saved right after such a load, before any update, holds the lr the next
    update is to run at (the groups', not yet the schedule's), as DeepSpeed's holds its
    groups': a fresh engine that loads it trains bit for bit as the engine that saved it (the
    package of f02c234 saved no lr there: the first update took the schedule's)."""
    c = CASES[case]

    def engine(at):
        m = model(at)
        return zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]

    a = engine(1.0)
    _windows(a, case, STEPS, 1)
    a.save_checkpoint(d, tag="a")
    b = engine(0.7)
    if c["warm"]:
        _windows(b, case, WARM, 2)
    b.load_checkpoint(d, tag="a", **FLAGS[c["flag"]])
    b.save_checkpoint(d, tag="b")
    f = engine(0.5)
    f.load_checkpoint(d, tag="b")
    runs = [_windows(x, case, STEPS, 3) for x in (b, f)]
    check(f"{case}, saved after the load and loaded whole: the saver's lr per window "
          f"{runs[0][1]} and losses, bit for bit (got {runs[1][1]})", runs[0] == runs[1])


def kept_position(d):
    """A schedule position other than the applied steps' (the scheduler's load_state_dict)
    survives zinc's checkpoint (engine_state.sched_lead) and its DeepSpeed export
    (to_deepspeed: the scheduler's last_batch_iteration)."""
    case = "fp32_s1_sched_state"

    def engine():
        m = model(1.0)
        return zinc.initialize(model=m, model_parameters=m.parameters(), config=config(case))[0]

    e = engine()
    _windows(e, case, 2, 1)
    e.lr_scheduler.load_state_dict({"last_batch_iteration": 6})
    e.save_checkpoint(d, tag="p")
    f = engine()
    f.load_checkpoint(d, tag="p")
    convert(d, os.path.join(d, "ds"), "p")
    g = engine()
    g.load_checkpoint(os.path.join(d, "ds"), tag="p")
    got = [x.lr_scheduler.last_batch_iteration for x in (e, f, g)]
    check(f"the scheduler's position 6 after 2 steps: saved, loaded, exported to DeepSpeed's "
          f"format and loaded ({got})", got == [6, 6, 6] and f.global_steps == g.global_steps == 2)


if __name__ == "__main__":
    main()
