"""_monitor.py — DeepSpeed's monitors (the config's `tensorboard`, `wandb` and `csv_monitor`
sections; deepspeed/monitor/, 0.19.8) for the Python front-end: after every optimizer step
(every step() that ends an accumulation window, skipped ones too) rank 0 writes
- `Train/Samples/train_loss`: the losses given to engine.backward in the window, averaged over
  the window's micro-batches and over the ranks (DeepSpeed 0.19.8's own engine writes no loss
  event; its pipeline engine writes this one with this meaning);
- `Train/Samples/lr`: get_lr()[0] (DeepSpeed's engine.step());
- `Train/Samples/loss_scale`: with fp16 only, the loss scale the next backward uses
  (DeepSpeed's optimizer.cur_scale after the step);
each at step `global_samples` (after the step counted its samples), as DeepSpeed's engine.
Where: `<output_path>/<job_name>` (_log_dir: an output_path of "" puts the job's folder in the
current one, as DeepSpeed's os.path.join gives) — tensorboard through the user's
torch.utils.tensorboard.SummaryWriter (add_scalar, flushed per step); wandb through
wandb.init(project, group, entity=team) and wandb.log({name: value}, step=samples); csv as
DeepSpeed's csvMonitor: one file per event, `Train_Samples_train_loss.csv`, first line
`step,train_loss`, then `samples,value`. The csv section's values are the engine's resolved
config's (zinc_engine_config_json: the C config's, which `zinc train` uses too), so Python and
C cannot read the section differently; tensorboard and wandb, which the C config only warns
about, come from the script's dict.
A section whose package is not importable gets one RuntimeWarning naming the package and is
left out; the others still write.
Cost: an enabled monitor reads the window's loss on the host at each optimizer step (a device
sync on CUDA) and averages it over the ranks (one collective, made on every rank: the config is
the same on every rank), as DeepSpeed's monitors read it. Without one, none of that is done."""
import csv
import importlib
import os
import warnings

EVENTS = ("Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/loss_scale")


def _log_dir(sec):
    """`<output_path>/<job_name>` of a tensorboard or csv section, created: DeepSpeed 0.19.8's
    os.path.join(output_path, job_name) with its defaults "" and "DeepSpeedJobName" (an
    output_path of "" puts the job's folder in the current one)."""
    path = os.path.join(sec.get("output_path") or "", sec.get("job_name") or "DeepSpeedJobName")
    os.makedirs(path, exist_ok=True)
    return path


class _Csv:
    def __init__(self, sec):
        self.dir = _log_dir(sec)
        self.started = set()

    def write(self, events):
        for name, value, step in events:
            fname = name.replace("/", "_").replace(" ", "_")
            with open(os.path.join(self.dir, fname + ".csv"), "a+", newline="") as f:
                w = csv.writer(f)
                if fname not in self.started:     # DeepSpeed's header: step, the name's tail
                    self.started.add(fname)
                    w.writerow(["step", name.split("/")[-1]])
                w.writerow([step, value])

    def close(self):
        pass


class _TensorBoard:
    def __init__(self, sec):
        importlib.import_module("tensorboard")   # torch.utils.tensorboard needs it (DeepSpeed
        from torch.utils.tensorboard import SummaryWriter  # checks it first too)
        self.writer = SummaryWriter(log_dir=_log_dir(sec))

    def write(self, events):
        for name, value, step in events:
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class _Wandb:
    def __init__(self, sec):
        import wandb
        self.wandb = wandb
        wandb.init(project=sec.get("project") or "deepspeed", group=sec.get("group"),
                   entity=sec.get("team"))

    def write(self, events):
        for name, value, step in events:
            self.wandb.log({name: value}, step=step)

    def close(self):
        pass


_KINDS = (("tensorboard", _TensorBoard, "tensorboard (pip install tensorboard)"),
          ("wandb", _Wandb, "wandb (pip install wandb)"),
          ("csv_monitor", _Csv, None))


class Monitors:
    """The enabled monitors of a config: tensorboard and wandb from `cfg` (the dict the script
    gave), csv_monitor from `resolved` (the engine's resolved config). enabled: whether any
    section is (then every rank averages the loss); writers: rank 0's."""

    def __init__(self, cfg, resolved, rank):
        self.enabled = False
        self.writers = []
        self._loss_sum, self._losses = 0.0, 0
        for key, kind, package in _KINDS:
            sec = (resolved if key == "csv_monitor" else cfg).get(key)
            if not isinstance(sec, dict) or not sec.get("enabled"):
                continue
            self.enabled = True
            if rank != 0:
                continue
            try:
                self.writers.append(kind(sec))
            except ImportError as ex:
                warnings.warn(f"zinc: the config's {key} section is enabled but {package} is not "
                              f"importable ({ex}): its events are not written", RuntimeWarning,
                              stacklevel=4)

    def note_loss(self, loss):
        """engine.backward's loss (a tensor; summed on its device, read once per step)."""
        if self.enabled:
            self._loss_sum = self._loss_sum + loss.detach().float().sum()
            self._losses += 1

    def after_step(self, engine):
        """At an optimizer step: the events, written by rank 0. Collective when enabled."""
        if not self.enabled:
            return
        n = max(1, self._losses)
        mine = float(self._loss_sum) / n if self._losses else 0.0
        had = 1.0 if self._losses else 0.0
        self._loss_sum, self._losses = 0.0, 0
        # averaged over the ranks that had a loss: a window of direct loss.backward() calls
        # gives engine.backward no loss, and writes no loss event rather than a 0
        mean, ranks_with = engine._mean_over_ranks([mine, had])
        if not self.writers:
            return
        samples = engine.global_samples
        events = [(EVENTS[1], engine.get_lr()[0], samples)]
        if ranks_with > 0:
            events.insert(0, (EVENTS[0], mean / ranks_with, samples))
        if engine.fp16_enabled():
            events.append((EVENTS[2], engine.optimizer.cur_scale, samples))
        for w in self.writers:
            w.write(events)

    def close(self):
        for w in self.writers:
            w.close()
        self.writers = []
