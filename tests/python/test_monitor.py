"""test_monitor.py — DeepSpeed's monitors on the Python front-end (python/zinc/_monitor.py).

    python test_monitor.py DIR           (also under mpirun -np 2)

fp16 on an elementwise model (torch 1.13 has no fp16 matmul on the CPU), accumulation 2, a
WarmupLR schedule, 4 optimizer steps, the first one overflowing (skipped), with `csv_monitor`,
`tensorboard` and `wandb` enabled:
- csv: DIR/job/Train_Samples_{train_loss,lr,loss_scale}.csv exactly as DeepSpeed's csvMonitor
  lays them out: a header `step,<name's tail>`, then one row per optimizer step (the skipped one
  too) at global_samples; train_loss is the mean of the losses the script gave backward over
  the window and the ranks (the test's own sum over ranks: torch.distributed's all_reduce of
  each rank's window means, divided by the world size), lr get_lr()[0] and loss_scale
  optimizer.cur_scale, as read after each step(); only rank 0 writes;
- wandb, a stand-in module put in sys.modules["wandb"] that records its calls: rank 0 calls
  init(project, group, entity=team) once with the section's values and log({event: value},
  step=global_samples) for each event of each step, with the csv's values; rank 1 calls neither;
- cost: with a monitor enabled, one zinc_mean_over_ranks and one host read of a tensor
  (Tensor.__float__ or .item, counted while backward and step run) per optimizer step; without
  one, neither;
- packages absent (sys.modules entries of None, whatever this python has): one RuntimeWarning
  each naming tensorboard and wandb, no tb folder, and csv still written; where tensorboard is
  importable, the main run's event file holds the same values (read back with its
  EventAccumulator);
- a bf16 run: no loss_scale file; a run without monitors: no folder;
- an output_path of "" and no job_name: DeepSpeed's ./DeepSpeedJobName in the current folder
  (deepspeed/monitor/csv_monitor.py: os.path.join(output_path, job_name), defaults "" and
  "DeepSpeedJobName"), nothing else there;
- the csv folder comes from the engine's resolved config: with zinc_engine_config_json made to
  answer another job_name than the dict's, the files go under the resolved one;
- zinc train's config warning about tensorboard/wandb is not passed on as a ZincConfigWarning."""
import contextlib
import csv
import importlib
import json
import os
import shutil
import sys
import types
import warnings

from _common import Gain, check, finish, torch, zinc
from zinc._lib import lib

MICRO, GA, STEPS = 4, 2, 4
NAMES = ("train_loss", "lr", "loss_scale")


class FakeWandb(types.ModuleType):
    """A stand-in for the wandb package: records init's keyword arguments and log's calls."""

    def __init__(self):
        super().__init__("wandb")
        self.inits, self.logs = [], []

    def init(self, **kw):
        self.inits.append(kw)

    def log(self, data, step=None, commit=None):
        self.logs.append((dict(data), step))


@contextlib.contextmanager
def modules(**mods):
    """sys.modules entries set for the block (None: the package cannot be imported)."""
    saved = {k: sys.modules.get(k, KeyError) for k in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is KeyError:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class Counts:
    """Counts, while active, zinc_mean_over_ranks calls (the monitor's collective) and host reads
    of a tensor's value (Tensor.__float__, Tensor.item: the monitor's loss read)."""

    def __init__(self):
        self.collectives = self.reads = 0

    @contextlib.contextmanager
    def active(self):
        saved = {n: torch.Tensor.__dict__.get(n) for n in ("__float__", "item")}
        float_of, item_of = torch.Tensor.__float__, torch.Tensor.item
        mean = lib.zinc_mean_over_ranks

        def read(fn):
            def counted(t):
                self.reads += 1
                return fn(t)
            return counted

        def collective(*args):
            self.collectives += 1
            return mean(*args)

        torch.Tensor.__float__, torch.Tensor.item = read(float_of), read(item_of)
        lib.zinc_mean_over_ranks = collective
        try:
            yield
        finally:
            lib.zinc_mean_over_ranks = mean
            for n, v in saved.items():
                if v is None:
                    delattr(torch.Tensor, n)
                else:
                    setattr(torch.Tensor, n, v)


def config(dtype, sections):
    cfg = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3,
                                                         "warmup_max_lr": 1e-2}},
           "zero_optimization": {"stage": 2}, dtype: {"enabled": True}}
    cfg.update(sections)
    return cfg


def all_sections(root):
    return {"csv_monitor": {"enabled": True, "output_path": root, "job_name": "job"},
            "tensorboard": {"enabled": True, "output_path": root, "job_name": "tb"},
            "wandb": {"enabled": True, "project": "zinc-test", "group": "grp", "team": "team"}}


def mean_over_ranks(values):
    """Each value averaged over the ranks, through torch.distributed (set up by initialize), not
    zinc's collective."""
    t = torch.tensor(values, dtype=torch.float64)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
        t /= torch.distributed.get_world_size()
    return t.tolist()


def run(dtype="fp16", sections=None, counts=None):
    """STEPS optimizer steps; returns (rank, the warnings of initialize, the values each event
    should have, the global_samples of each step, the skipped steps)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine, opt, _, _ = zinc.initialize(model=Gain(), config=config(dtype, sections or {}))
    rank, world = engine.global_rank, engine.world_size
    counts = counts or Counts()
    want = {"train_loss": [], "lr": [], "loss_scale": []}
    for step in range(STEPS):
        losses = []
        for i in range(GA):
            g = torch.Generator().manual_seed(100 * step + 10 * rank + i)
            x = torch.randn(MICRO, 8, generator=g) * (1e4 if step == 0 else 1.0)
            x = x.half() if dtype == "fp16" else x.to(torch.bfloat16)
            loss = (engine(x).float() ** 2).mean()
            losses.append(loss.item())
            with counts.active():
                engine.backward(loss)
                engine.step()
        want["train_loss"].append(sum(losses) / GA)
        want["lr"].append(engine.get_lr()[0])
        want["loss_scale"].append(opt.cur_scale)
    want["train_loss"] = mean_over_ranks(want["train_loss"])
    tb = MICRO * GA * world
    steps = [tb * (s + 1) for s in range(STEPS)]
    skipped = engine.skipped_steps
    engine.close()
    return rank, caught, want, steps, skipped


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def check_csv(job, want, steps, names=NAMES):
    for name in names:
        path = os.path.join(job, f"Train_Samples_{name}.csv")
        rows = read_csv(path) if os.path.exists(path) else []
        ok = (len(rows) == STEPS + 1 and rows[0] == ["step", name]
              and [int(r[0]) for r in rows[1:]] == steps
              and all(close(float(r[1]), w) for r, w in zip(rows[1:], want[name])))
        check(f"csv {name}: DeepSpeed's layout, one row per step at global_samples",
              ok, f"{rows} vs {steps}, {want[name]}")


def check_main(root):
    """fp16, every monitor, wandb the stand-in."""
    fake, counts = FakeWandb(), Counts()
    with modules(wandb=fake):
        rank, caught, want, steps, skipped = run(sections=all_sections(root), counts=counts)
    check("monitor enabled: one collective and one host read of the loss per step",
          (counts.collectives, counts.reads) == (STEPS, STEPS),
          f"{counts.collectives} collectives, {counts.reads} reads in {STEPS} steps")
    if rank != 0:
        check("rank 1: wandb neither initialised nor logged to", not fake.inits and not fake.logs,
              f"{fake.inits}, {fake.logs}")
        return
    check_csv(os.path.join(root, "job"), want, steps)
    check("one of the steps written was skipped for the overflow", skipped == 1, str(skipped))
    check("wandb.init once, with the section's project, group and team as entity",
          fake.inits == [{"project": "zinc-test", "group": "grp", "entity": "team"}],
          str(fake.inits))
    expect = [(f"Train/Samples/{n}", want[n][s], steps[s]) for s in range(STEPS) for n in NAMES]
    ok = len(fake.logs) == len(expect) and all(
        list(data) == [name] and close(data[name], value) and step == at
        for (data, step), (name, value, at) in zip(fake.logs, expect))
    check("wandb.log({event: value}, step=global_samples) per event and step, csv's values", ok,
          f"{fake.logs} vs {expect}")
    said = [str(w.message) for w in caught]
    check("zinc train's tensorboard/wandb config warning not passed on",
          not any(s.startswith(("zinc config: tensorboard", "zinc config: wandb"))
                  for s in said), str(said))
    if importable("tensorboard"):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(os.path.join(root, "tb"))
        acc.Reload()
        got = {n: [(e.step, e.value) for e in acc.Scalars(f"Train/Samples/{n}")] for n in NAMES}
        ok = all([s for s, _ in got[n]] == steps and
                 all(close(v, w) for (_, v), w in zip(got[n], want[n])) for n in got)
        check("tensorboard: the same events, read back", ok, f"{got} vs {want}")


def importable(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 — any failure: not usable
        return False


def check_absent(root):
    """tensorboard and wandb not importable: a warning each, csv still written."""
    with modules(wandb=None, tensorboard=None):
        rank, caught, want, steps, _ = run(sections=all_sections(root))
    if rank != 0:
        return
    said = [str(w.message) for w in caught]
    for pkg in ("tensorboard", "wandb"):
        n = sum(f"the config's {pkg} section is enabled but {pkg}" in s for s in said)
        check(f"{pkg} not importable: one warning naming it", n == 1, str(said))
    check("tensorboard not importable: no tb folder", not os.path.exists(os.path.join(root, "tb")))
    check_csv(os.path.join(root, "job"), want, steps)


def check_empty_output_path(root):
    """csv_monitor with its defaults, in a folder of its own as the current one (rank 0, the
    only one that writes, changes to it)."""
    here, cwd = os.getcwd(), os.path.join(root, "cwd")
    if zinc._world.rank() == 0:
        os.makedirs(cwd)
        os.chdir(cwd)
    try:
        rank, _, want, steps, _ = run(sections={"csv_monitor": {"enabled": True,
                                                                "output_path": ""}})
    finally:
        os.chdir(here)
    if rank == 0:
        check("output_path \"\": DeepSpeed's ./DeepSpeedJobName, nothing else in the folder",
              os.listdir(cwd) == ["DeepSpeedJobName"], str(os.listdir(cwd)))
        check_csv(os.path.join(cwd, "DeepSpeedJobName"), want, steps, ("lr",))


def check_resolved(root):
    """The csv section read from the engine's resolved config, not from the dict."""
    answer = lib.zinc_engine_config_json

    def resolved(e):
        cfg = json.loads(answer(e).decode())
        cfg["csv_monitor"]["job_name"] = "resolved_job"
        return json.dumps(cfg).encode()

    lib.zinc_engine_config_json = resolved
    try:
        rank, _, want, steps, _ = run(sections={"csv_monitor": {
            "enabled": True, "output_path": root, "job_name": "dict_job"}})
    finally:
        lib.zinc_engine_config_json = answer
    if rank == 0:
        check("csv: the resolved config's job_name is the folder, not the dict's",
              sorted(os.listdir(root)) == ["resolved_job"], str(os.listdir(root)))
        check_csv(os.path.join(root, "resolved_job"), want, steps, ("lr",))


def main():
    root = sys.argv[1]
    rank0 = zinc._world.rank() == 0

    def fresh():
        if rank0:
            shutil.rmtree(root, ignore_errors=True)

    fresh()
    check_main(root)
    fresh()
    check_absent(root)
    # bf16: no loss scale event.
    fresh()
    rank, _, _, _, _ = run("bf16", {"csv_monitor": {"enabled": True, "output_path": root,
                                                    "job_name": "job"}})
    if rank == 0:
        got = sorted(os.listdir(os.path.join(root, "job")))
        check("bf16: train_loss and lr, no loss_scale",
              got == ["Train_Samples_lr.csv", "Train_Samples_train_loss.csv"], str(got))
    fresh()
    counts = Counts()
    rank, _, _, _, _ = run(counts=counts)
    if rank == 0:
        check("no monitor enabled: nothing written", not os.path.exists(root))
    check("no monitor enabled: no collective and no host read of the loss",
          (counts.collectives, counts.reads) == (0, 0),
          f"{counts.collectives} collectives, {counts.reads} reads")
    fresh()
    check_empty_output_path(root)
    fresh()
    check_resolved(root)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
