"""test_host_waits.py — at most one host wait per optimizer step through `import zinc` (issue 38).

On a GPU every host wait stops the host from running ahead of the device: the front-end's stream
hand-overs (stage 3's gathers, the gradient adds, the weights after a step) must be events, and
the one wait of a step is the engine's read of the gradient norm and overflow flag. zinc counts
its host waits on the cpu device too (zinc_host_waits: free there, counted as on a GPU), and the
front-end's ordering calls go to zinc on the cpu as on CUDA, so this test sees, without a GPU,
every wait a GPU would make. A zinc_engine_sync put back into the stage-3 gather (the front-end
before issue 38) makes 2 + 2 x (modules) waits per step here, and fails. Also the launches of
the hooks (check_launches): one copy per stage-3 gather and one multi-tensor add per hand-over,
counted with torch's profiler.

    python test_host_waits.py            (stages 0-3, bf16 and fp32, accumulation 1 and 2, and
                                          zero_grad() after every step(); and
                                          with offload_optimizer "cpu" or "nvme" at stages 1-3:
                                          2 per step)
"""
import sys
import tempfile

from _common import LibCalls, check, finish, torch, zinc
from zinc._lib import lib
from test_torch_parity import Tiny  # several modules: several groups, gathers at stage 3

F = torch.nn.functional


def waits_per_step(stage, dtype, accum, steps=4, offload=False, offload_param=False, nvme=None,
                   zero_grad=False):
    torch.manual_seed(0)
    model = Tiny(vocab=48, d=24, layers=3)
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum,
           "gradient_clipping": 1.0, "steps_per_print": 1 << 30,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "bf16": {"enabled": dtype == "bf16"},
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = (
            {"device": "nvme", "nvme_path": nvme, "pipeline_read": True, "pipeline_write": True}
            if nvme else {"device": "cpu"})
    if offload_param:
        cfg["zero_optimization"]["offload_param"] = {"device": "cpu"}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                      config=cfg, dist_init_required=False)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 48, (2, 9), generator=g) for _ in range(accum)]
    counts, losses, hooks = [], [], []
    for _ in range(steps):          # the same batches each step: the loss must fall
        before, h0 = engine.host_waits(), engine.hook_seconds()
        for x in data:
            loss = F.cross_entropy(engine(x[:, :-1]).float().reshape(-1, 48), x[:, 1:].reshape(-1))
            engine.backward(loss)
            engine.step()
            if zero_grad:      # the torch habit: inside the window it drops the sums so far
                engine.optimizer.zero_grad()
            losses.append(float(loss))
        counts.append(engine.host_waits() - before)
        hooks.append(engine.hook_seconds() - h0)
    # engine.hook_seconds(): every step spends host time in the hooks (the hand-overs at least),
    # and nothing outside a step adds to it.
    idle = engine.hook_seconds()
    engine.global_steps, engine.get_lr()
    check(f"stage {stage} {dtype}: hook_seconds grows in every step and only there",
          all(h > 0 for h in hooks) and engine.hook_seconds() == idle, f"per step {hooks}")
    engine.close()
    return counts, losses


def launches_per_step(stage):
    """(torch copies, torch multi-tensor adds, zinc_gather calls, zinc_grads_ready calls) in one
    optimizer step after a first one: torch's op counts from its profiler, zinc's calls counted
    by wrapping the front-end's library functions."""
    torch.manual_seed(0)
    model = Tiny(vocab=48, d=24, layers=3)
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "steps_per_print": 1 << 30, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                      config=cfg, dist_init_required=False)
    x = torch.randint(0, 48, (2, 9), generator=torch.Generator().manual_seed(1))

    def step():
        loss = F.cross_entropy(engine(x[:, :-1]).float().reshape(-1, 48), x[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
    step()
    with LibCalls("zinc_gather") as gathers, LibCalls("zinc_grads_ready") as hand_overs:
        with torch.autograd.profiler.profile() as prof:
            step()
    engine.close()
    ops = [e.name for e in prof.function_events]
    return (ops.count("aten::clone"), ops.count("aten::_foreach_add_"), gathers.count,
            hand_overs.count)


def check_launches():
    """On a GPU each torch op of a hook is a kernel launch on the host's critical path, so the
    hooks launch per group, not per parameter: stage 3 copies a gathered group once (its
    parameters are slices of the copy) and every hand-over adds a group's gradients with one
    multi-tensor add. Tiny's groups hold two parameters but the embedding's one: copying each
    parameter (the front-end before 2026-11-28) makes the stage-3 copies about twice the
    gathers, a loop of add_ no _foreach_add_ at all, and both fail. The copies the model and the
    loss make themselves are those of stage 2, which gathers nothing."""
    copies2, adds2, _, ready2 = launches_per_step(2)
    copies3, adds3, gathers3, ready3 = launches_per_step(3)
    check("stage 3: one copy per gathered group", gathers3 > 0 and copies3 - copies2 == gathers3,
          f"{copies3} copies at stage 3, {copies2} at stage 2, {gathers3} gathers")
    check("stages 2-3: one multi-tensor add per hand-over", ready2 > 0 and adds2 == ready2 and
          adds3 == ready3, f"stage 2: {adds2} adds, {ready2} hand-overs; stage 3: {adds3}, {ready3}")


def settle_before_host_write():
    """Optimizer offload, fp32, stage 3, no offload_param: the step's Adam runs on the host and
    queues the uploads of its own slices from the host master (the working copy's source in
    fp32 mode) without waiting for them. A host write of the master right after the step
    (zinc_param_local_set, safe_set_local_fp32_param's call) must wait for those uploads first,
    once: on a GPU it would otherwise change the master under a copy still reading it. A second
    write finds nothing pending and does not wait. (The engine that settled only with
    offload_param: 0 waits, fails.)"""
    import ctypes
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    cfg = {"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1 << 30,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    engine, _, _, _ = zinc.initialize(model=model, config=cfg, dist_init_required=False)
    engine.backward(engine(torch.randn(4, 8)).sum())
    engine.step()
    pid = engine._pid_of[id(model[0].weight)]
    lo, hi = engine._local_range(pid)
    master = torch.zeros(hi - lo)
    waits = []
    for _ in range(2):
        h0 = engine.host_waits()
        st = lib.zinc_param_local_set(engine._e, pid, 2,      # ZINC_STATE_MASTER
                                      ctypes.c_void_p(master.data_ptr()))
        waits.append((st, engine.host_waits() - h0))
    engine.close()
    check("stage 3 fp32 offload_optimizer: a host write of the master after a step waits for "
          "the step's uploads once, a second one not", waits == [(0, 1), (0, 0)],
          f"(status, waits) per write {waits}")


def main():
    check_launches()
    settle_before_host_write()
    for stage in (0, 1, 2, 3):
        for dtype in ("fp32", "bf16"):
            for accum in (1, 2):
                counts, losses = waits_per_step(stage, dtype, accum)
                check(f"stage {stage} {dtype} accumulation {accum}: one host wait per optimizer "
                      f"step", counts == [1] * len(counts), f"per step {counts}")
                check(f"stage {stage} {dtype} accumulation {accum}: it trained",
                      losses[-1] < losses[0], f"losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    # The torch habit, optimizer.zero_grad() after every engine.step() with accumulation 2: it
    # drops the window's sums so far (as DeepSpeed's), and that costs no host wait — at stage 3
    # one clearing queued on zinc's stream (zinc_grads_clear; a zinc_param_local_set per
    # parameter, an upload each, made 22 here). The losses are stage 0's: the same math — in
    # bf16 stage 1's, as stage 0 there takes DeepSpeed's first Adam step on zero gradients
    # (_Optimizer._ds_first_step), which stages 1-3 do not.
    ref = {}
    for stage in (0, 1, 2, 3):
        for dtype in ("fp32", "bf16"):
            counts, losses = waits_per_step(stage, dtype, 2, zero_grad=True)
            check(f"stage {stage} {dtype} accumulation 2, zero_grad after every step(): one host "
                  f"wait per optimizer step", counts == [1] * len(counts), f"per step {counts}")
            first = 0 if dtype == "fp32" else 1
            if stage == first:
                ref[dtype] = losses
            elif stage > first and stage != 2:   # stage 2 keeps the sums, as DeepSpeed's
                check(f"stage {stage} {dtype} zero_grad after every step(): stage {first}'s "
                      "losses", losses == ref[dtype], f"{losses} vs {ref[dtype]}")
    # ... with optimizer offload the sums are in host memory: one wait for their downloads
    counts, _ = waits_per_step(3, "bf16", 2, offload=True, zero_grad=True)
    check("stage 3 bf16 offload_optimizer, zero_grad after every step(): three host waits per "
          "optimizer step (the two below and the drop's)", counts == [3] * len(counts),
          f"per step {counts}")
    # Optimizer offload adds one wait: at stage 1 for the gradient download before the host
    # Adam, at stages 2-3 before the host reads the gradient it accumulates (the statistics);
    # nothing for the copies and joins each zinc_grads_ready queues, which a GPU waits for on
    # the device (the cpu device counting them: 2 + 2 x groups per step, fails). With the state
    # on NVMe the disk's waits are the file's, not the device's: still two.
    with tempfile.TemporaryDirectory() as nvme:
        for stage in (1, 2, 3):
            for where in (None, nvme):
                counts, _ = waits_per_step(stage, "bf16", 2, offload=True, nvme=where)
                check(f"stage {stage} bf16 offload_optimizer {'nvme' if where else 'cpu'}: two "
                      f"host waits per optimizer step", counts == [2] * len(counts),
                      f"per step {counts}")
    # offload_param too: each gather uploads the group's slice from the host shard on the copy
    # stream and the all-gather waits for it on the device (no host wait per gather: a blocking
    # upload there made 2 + 2 x (gathers) here); the step's waits stay the two above.
    for dtype in ("bf16", "fp32"):
        counts, losses = waits_per_step(3, dtype, 2, offload=True, offload_param=True)
        check(f"stage 3 {dtype} offload_optimizer + offload_param: two host waits per optimizer "
              f"step", counts == [2] * len(counts), f"per step {counts}")
        check(f"stage 3 {dtype} offload_param: it trained", losses[-1] < losses[0],
              f"losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
