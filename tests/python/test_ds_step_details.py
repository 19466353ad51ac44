"""test_ds_step_details.py — three details of DeepSpeed 0.19.8's engine a script can see, each
checked at one ZeRO stage (fp32, AdamW, one rank):

    python test_ds_step_details.py STAGE

- An lr written into the optimizer's param groups under the config's scheduler is used by the
  next optimizer step alone: DeepSpeed's scheduler steps after it and writes its own lr back
  (engine._take_model_step). zinc kept the written lr for the rest of the run (the lr
  latched: get_lr() 0.001, 0.001, ... where DeepSpeed's is 0.00667, 0.01).
- A checkpoint's group lr under the config's scheduler (saved by the front-end before
  2026-11-30 once a written lr latched) is the next step's alone: its load latched it again.
- A script's own lr_scheduler.step() on the config's scheduler (DeepSpeed's advances it once more
  per step) does nothing in zinc and warns once (it was silent).
- was_step_applied() is False after a step() inside an accumulation window (DeepSpeed's step()
  sets it False first; zinc said the last window's True), and micro_steps counts the step()
  calls (zinc had none: AttributeError).
- Stage 3: parameters carry DeepSpeed's ds_numel, ds_shape and ds_id (a count of the model's
  parameters by ds_numel gave 0).
- A checkpoint saved inside a window and loaded by a fresh engine starts a new window there:
  DeepSpeed's checkpoint holds no micro-step count. zinc's restored the saved one, so the first
  window after the load ended after one micro-batch, its loss still divided by two.
"""
import sys
import tempfile

from _common import check, finish, torch, zinc

WARMUP = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-2,
                                         "warmup_num_steps": 3, "warmup_type": "linear"}}


def engine_of(stage, ga=1, scheduler=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": ga,
           "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    if scheduler:
        cfg["scheduler"] = WARMUP
    engine, *_ = zinc.initialize(model=model, config=cfg)
    return engine


def batch(k):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(2, 4, generator=g), torch.randn(2, 2, generator=g)


def micro(engine, k):
    x, y = batch(k)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()


def written_lr(stage):
    """Steps 1-5; before step 2 every group's lr is set to 1e-3 (DeepSpeed's WarmupLR then
    gives 0.00333, 0.00667, 0.01 at steps 2-4 without the write)."""
    def run(write):
        engine = engine_of(stage)
        used, shown = [], []
        for k in range(5):
            if write and k == 1:
                for g in engine.optimizer.param_groups:
                    g["lr"] = 1e-3
            micro(engine, k)
            used.append(engine._info.lr)            # the lr the step applied
            shown.append(engine.get_lr()[0])        # the next step's, as DeepSpeed's groups show
        engine.close()
        return used, shown
    (u0, s0), (u1, s1) = run(False), run(True)
    check(f"stage {stage}: the written lr 1e-3 is the one step 2 applies",
          u1[1] == 1e-3 and u1[0] == u0[0], f"{u1} (without it {u0})")
    check(f"stage {stage}: the schedule's lr after it, as without the write (the lr latched)",
          u1[2:] == u0[2:] and s1[1:] == s0[1:], f"used {u1} shown {s1}; without: {u0} {s0}")


def restored_lr(stage):
    """A checkpoint holding the groups' lr under the config's scheduler (what the front-end
    before 2026-11-30 saved once a written lr had latched; simulated here by setting its
    `_taken`): a fresh engine loading it applies that lr at the next step only, then the
    schedule, as a run without the save and load (its load latched that lr again)."""
    with tempfile.TemporaryDirectory() as d:
        engine = engine_of(stage)
        for k in range(2):
            micro(engine, k)
        engine._opt._taken = True         # the old front-end's state after a written lr
        engine.save_checkpoint(d, tag="t")
        engine.close()
        fresh = engine_of(stage)
        fresh.load_checkpoint(d, tag="t")
        got = []
        for k in range(2, 5):
            micro(fresh, k)
            got.append(fresh._info.lr)
        fresh.close()
    ref = engine_of(stage)
    want = []
    for k in range(5):
        micro(ref, k)
        want.append(ref._info.lr)
    ref.close()
    check(f"stage {stage}: a checkpoint's group lr under the config's scheduler is the next "
          f"step's alone, then the schedule's", got == want[2:], f"{got}, want {want[2:]}")


def scheduler_step_warns(stage):
    """A script's own lr_scheduler.step() on the config's scheduler: DeepSpeed's advances it a
    second time per step; zinc's does nothing, and says so once (it said nothing)."""
    import warnings
    engine = engine_of(stage)
    micro(engine, 0)
    before = engine.get_lr()[0]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine.lr_scheduler.step()
        engine.lr_scheduler.step()
    said = [str(w.message) for w in seen if "lr_scheduler.step()" in str(w.message)]
    after = engine.get_lr()[0]
    engine.close()
    check(f"stage {stage}: lr_scheduler.step() on the config's scheduler warns once, the lr "
          f"unchanged", len(said) == 1 and after == before, f"{said}; lr {before} -> {after}")


def applied_and_micro_steps(stage):
    engine = engine_of(stage, ga=2)
    seen = []
    for k in range(4):
        micro(engine, k)
        seen.append((engine.was_step_applied(), engine.micro_steps, engine.global_steps))
    engine.close()
    want = [(False, 1, 0), (True, 2, 1), (False, 3, 1), (True, 4, 2)]
    check(f"stage {stage}: (was_step_applied, micro_steps, global_steps) after each step() of "
          f"two windows of 2", seen == want, f"{seen}, want {want}")


def load_inside_window(stage):
    """Saved after 3 step() calls of windows of 2 (one micro-step into the second window); a
    fresh engine loads it: its first window is 2 micro-steps, and trains as the saving engine
    trains from its last boundary (the window's gradient is in no checkpoint)."""
    with tempfile.TemporaryDirectory() as d:
        engine = engine_of(stage, ga=2)
        for k in range(3):
            micro(engine, k)
        engine.save_checkpoint(d, tag="mid")
        engine.close()
        fresh = engine_of(stage, ga=2)
        fresh.load_checkpoint(d, tag="mid")
        bnd = fresh.is_gradient_accumulation_boundary()
        steps = []
        for k in range(3, 5):
            micro(fresh, k)
            steps.append(fresh.global_steps)
        w = fresh.module_state_dict()
        fresh.close()
    check(f"stage {stage}: after loading a checkpoint saved inside a window, the next "
          f"micro-batch is not the boundary", bnd is False, f"{bnd}")
    check(f"stage {stage}: ... and the window after the load takes 2 micro-steps (global_steps "
          f"1, 2; was 2, 2 from the saved micro-step count)", steps == [1, 2], f"{steps}")
    # the same two micro-batches from the saving run's last boundary
    ref = engine_of(stage, ga=2)
    for k in range(2):
        micro(ref, k)
    for k in range(3, 5):
        micro(ref, k)
    rw = ref.module_state_dict()
    ref.close()
    check(f"stage {stage}: ... and trains to the weights of the saving run's boundary followed "
          f"by those micro-batches, bit for bit", all(torch.equal(w[n], rw[n]) for n in w),
          str({n: float((w[n] - rw[n]).abs().max()) for n in w}))


def zero3_attributes():
    """Stage 3: every trained parameter carries DeepSpeed's ds_numel, ds_shape (its full ones;
    its own shape is empty between forwards) and a distinct ds_id, so the usual count
    `p.ds_numel if hasattr(p, "ds_numel") else p.numel()` gives the model's (it gave 0)."""
    engine = engine_of(3)
    full = {"0.weight": (8, 4), "0.bias": (8,), "2.weight": (2, 8), "2.bias": (2,)}
    got = {n: (tuple(getattr(p, "ds_shape", ())), getattr(p, "ds_numel", None), p.numel())
           for n, p in engine.module.named_parameters()}
    ids = [getattr(p, "ds_id", None) for p in engine.module.parameters()]
    count = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                for p in engine.module.parameters())
    engine.close()
    check("stage 3: each parameter's ds_shape and ds_numel are its full ones, its own numel 0 "
          "between forwards", all(got[n] == (s, torch.Size(s).numel(), 0) for n, s in full.items()),
          f"{got}")
    check("stage 3: distinct ds_ids", None not in ids and len(set(ids)) == len(ids), f"{ids}")
    check("stage 3: the ds_numel count is the model's 58", count == 58, f"{count}")


def main(stage):
    if stage == 3:
        zero3_attributes()
    written_lr(stage)
    restored_lr(stage)
    scheduler_step_warns(stage)
    applied_and_micro_steps(stage)
    load_inside_window(stage)
    return finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
