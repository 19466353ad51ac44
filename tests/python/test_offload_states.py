"""test_offload_states.py — engine.offload_states() and reload_states() (DeepSpeed's), at one
ZeRO stage, bf16 and fp32.

    python test_offload_states.py STAGE      one process, or under mpirun (2 ranks)

A small MLP trains 6 steps with AdamW and clipping; after step 3 the optimizer state goes to host
memory, that step's forward and backward run while it is away, and it comes back before the
step's engine.step(). How each check fails:
- losses or final weights not bit for bit those of the same run that kept its state: a copy lost
  or changed bytes, or the reload put them in the wrong place;
- zinc_memory's master, adam_m and adam_v not 0 while away (the master stays where fp32 at
  stages 0 and 3 makes it the working copy, 0 bytes of its own), or zinc_memory_host not up by
  as much, or either not back after: nothing moved, or it stayed in both places;
- module_state_dict() or a GatheredParameters read while away other than before, or refused:
  they read the working copy then (zinc_param_get_working), as DeepSpeed's read its 16-bit weights;
- engine.step(), save_checkpoint() and safe_get_full_optimizer_state() while away not refused
  naming reload_states: they would read freed memory; with accumulation 2 a micro-step's
  step() inside the window refused (DeepSpeed's runs: it needs no optimizer state), or the one
  ending the window not refused, or the run not bit for bit the one that kept its state;
- include=[optim_states] (enum or string) moving the master too, or not the moments;
- no warning naming lp_params, lp_grads and contiguous_grad_buffer (what stays on the device),
  or one per call instead of once;
- DeepSpeed 0.19.8's refusals not made: device "nvme", unknown include names, offload_param at
  stage 3; device "none" moving something; with offload_optimizer something moving.
Exit 77 without torch.
"""
import os
import sys
import tempfile
import warnings

from _common import check, check_raises, finish, torch, zinc
from zinc._lib import MEM_CATEGORIES as NAMES, lib
from zinc.runtime.zero.offload_config import OffloadDeviceEnum, OffloadStateTypeEnum
from zinc.utils import safe_get_full_optimizer_state

AWAY_AT = 3


def config(stage, bf16, offload_opt=False, offload_param=False):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
         "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if bf16:
        c["bf16"] = {"enabled": True}
    if offload_opt:
        c["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        c["zero_optimization"]["offload_param"] = {"device": "cpu"}
    return c


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                               torch.nn.GELU(), torch.nn.Linear(64, 1))


def memory(engine):
    """zinc's allocated bytes by category: (device, host)."""
    return tuple({c: a for c, (_, a) in engine.memory(host).items()} for host in (False, True))


def run(stage, bf16, away=None, name="", **cfg):
    """6 steps; with `away` ("all": include None, else the include list) the state goes away
    after step AWAY_AT and comes back before that step's engine.step(). Returns the losses,
    final weights and what was seen while away."""
    engine, *_ = zinc.initialize(model=model(), config=config(stage, bf16, **cfg))
    gen = torch.Generator().manual_seed(1)
    losses, seen = [], {}
    for step in range(6):
        x, y = torch.randn(4, 16, generator=gen), torch.randn(4, 1, generator=gen)
        if step == AWAY_AT and away is not None:
            seen["before"] = memory(engine)
            sd0 = engine.module_state_dict()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                engine.offload_states(include=None if away == "all" else away)
                engine.offload_states(include=None if away == "all" else away)   # again: no-op
            seen["warned"] = [str(m.message) for m in w]
            seen["away"] = memory(engine)
            seen["offloaded"] = lib.zinc_states_offloaded(engine._e)
            # the weights still read while away (the working copy), as DeepSpeed's do
            sd1 = engine.module_state_dict()
            with zinc.zero.GatheredParameters(list(engine.module.parameters())):
                held = [p.detach().clone() for p in engine.module.parameters()]
            seen["reads"] = (all(torch.equal(sd0[k], sd1[k]) for k in sd0) and
                             all(torch.equal(h, sd0[k]) for h, k in zip(held, sd0)))
        loss = ((engine(x.to(torch.bfloat16 if bf16 else torch.float32)).float() - y) ** 2).mean()
        engine.backward(loss)
        if step == AWAY_AT and away is not None:
            if seen["offloaded"]:
                check_raises(f"{name}: engine.step() while away is refused",
                             engine.step, RuntimeError, "reload_states")
                check_raises(f"{name}: save_checkpoint() while away is refused",
                             lambda: engine.save_checkpoint(tempfile.gettempdir(), "never"),
                             RuntimeError, "reload_states")
                p = next(engine.module.parameters())
                check_raises(f"{name}: safe_get_full_optimizer_state while away is refused",
                             lambda: safe_get_full_optimizer_state(p, "exp_avg"), Exception,
                             "reload_states")
            engine.reload_states()
            seen["back"] = memory(engine)
        engine.step()
        losses.append(float(loss))
    final = {k: v.detach().float().clone() for k, v in engine.module_state_dict().items()}
    engine.close()
    return losses, final, seen


def run_window(stage, away):
    """Accumulation 2, 4 windows; with `away` the state goes away before window AWAY_AT's first
    micro-batch, whose engine.step() runs while it is away (a micro-step's step() needs no
    optimizer state: DeepSpeed's counts it), and comes back before the step() that ends the
    window, which is refused until then. Returns the losses, final weights and whether each of
    those two step() calls did what it should."""
    cfg = dict(config(stage, True), gradient_accumulation_steps=2)
    engine, *_ = zinc.initialize(model=model(), config=cfg)
    gen = torch.Generator().manual_seed(1)
    losses, ok = [], []
    for step in range(4):
        for micro in range(2):
            x, y = torch.randn(4, 16, generator=gen), torch.randn(4, 1, generator=gen)
            if away and step == AWAY_AT and micro == 0:
                engine.offload_states(include=[OffloadStateTypeEnum.optim_states,
                                               OffloadStateTypeEnum.hp_params])
            loss = ((engine(x.to(torch.bfloat16)).float() - y) ** 2).mean()
            engine.backward(loss)
            if away and step == AWAY_AT and micro == 1:
                try:
                    engine.step()
                    ok.append(False)
                except RuntimeError as ex:
                    ok.append("reload_states" in str(ex))
                engine.reload_states()
            engine.step()
            if away and step == AWAY_AT and micro == 0:
                ok.append(bool(lib.zinc_states_offloaded(engine._e)))
            losses.append(float(loss))
    final = {k: v.detach().float().clone() for k, v in engine.module_state_dict().items()}
    engine.close()
    return losses, final, ok


def same(a, b):
    return a[0] == b[0] and a[1].keys() == b[1].keys() and \
        all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def check_moved(name, seen, moved):
    """The categories in `moved` went from the device to the host and came back; the others
    stayed."""
    (dev0, host0), (dev1, host1) = seen["before"], seen["away"]
    wrong = [c for c in NAMES
             if (c in moved and (dev1[c] != 0 or host1[c] != host0[c] + dev0[c])) or
             (c not in moved and (dev1[c] != dev0[c] or host1[c] != host0[c]))]
    check(f"{name}: away, {sorted(moved) or 'nothing'} moved to host memory, the rest stayed",
          not wrong, f"{wrong}: before {dev0} / {host0}, away {dev1} / {host1}")
    check(f"{name}: zinc_states_offloaded {seen['offloaded']}",
          seen["offloaded"] == (1 if any(dev0[c] for c in moved) else 0))
    check(f"{name}: after reload_states() the memory is as before", seen["back"] == seen["before"],
          f"{seen['back']} vs {seen['before']}")
    check(f"{name}: while away, module_state_dict() and GatheredParameters give the weights of "
          f"before", seen["reads"])


def main():
    stage = int(sys.argv[1])
    for bf16 in (True, False):
        dt = "bf16" if bf16 else "fp32"
        ref = run(stage, bf16)
        # the master is the working copy itself in fp32 at stages 0 and 3: nothing of its own
        master = [] if (not bf16 and stage in (0, 3)) else ["master"]
        for away, moved, label in (("all", master + ["adam_m", "adam_v"], "include None"),
                                   ([OffloadStateTypeEnum.optim_states], ["adam_m", "adam_v"],
                                    "include [optim_states]"),
                                   (["hp_params"], master, "include ['hp_params']")):
            name = f"stage {stage} {dt}, {label}"
            got = run(stage, bf16, away, name)
            check(f"{name}: losses and final weights bit for bit the run that kept its state",
                  same(got, ref), f"{got[0]} vs {ref[0]}")
            seen = got[2]
            dev0 = seen["before"][0]
            check(f"{name}: the state was on the device before",
                  all(dev0[c] > 0 for c in moved), str(dev0))
            check_moved(name, seen, moved)
            stays = away == "all"
            said = [w for w in seen["warned"] if "keeps" in w]
            check(f"{name}: {'one warning naming' if stays else 'no warning of'} what stays",
                  len(said) == (1 if stays else 0) and
                  (not stays or all(t in said[0] for t in ("lp_params", "lp_grads",
                                                           "contiguous_grad_buffer"))),
                  str(seen["warned"]))
    ref, got = run_window(stage, False), run_window(stage, True)
    check(f"stage {stage} bf16, accumulation 2, away inside a window: the micro-step's step() "
          f"runs while away, the window's last is refused until reload_states(), and losses and "
          f"final weights are bit for bit the run that kept its state", same(got, ref) and
          got[2] == [True, True], f"{got[2]}; {got[0]} vs {ref[0]}")
    # DeepSpeed's refusals, and device "none"
    engine, *_ = zinc.initialize(model=model(), config=config(stage, True))
    check_raises(f"stage {stage}: device nvme refused", lambda: engine.offload_states(
        device=OffloadDeviceEnum.nvme), ValueError, "NVMe")
    check_raises(f"stage {stage}: an unknown include refused", lambda: engine.offload_states(
        include=["adam_states"]), ValueError, "adam_states", "optim_states")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        engine.offload_states(device="none")
    check(f"stage {stage}: device 'none' moves nothing, with a warning",
          not lib.zinc_states_offloaded(engine._e) and any("no device" in str(m.message)
                                                            for m in w), str([str(m.message)
                                                                              for m in w]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.offload_states()
    engine.close()       # (away: the host copies freed with the engine)
    if stage >= 1:
        # with offload_optimizer the state is host memory already: nothing moves
        ref = run(stage, True, name="offload_optimizer", offload_opt=True)
        got = run(stage, True, "all", f"stage {stage} offload_optimizer", offload_opt=True)
        check(f"stage {stage} offload_optimizer: the same training", same(got, ref))
        check_moved(f"stage {stage} offload_optimizer", got[2], [])
    if stage == 3:
        engine, *_ = zinc.initialize(model=model(), config=config(3, True, True, True))
        check_raises("stage 3 offload_param: refused, as by DeepSpeed", engine.offload_states,
                     ValueError, "offload_param")
        engine.close()
    return finish()


if __name__ == "__main__":
    if torch is None:
        sys.exit(77)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
