"""test_lifetime.py — what the front-end keeps alive, and for how long (1 rank, stages 0-3).

    python test_lifetime.py

A run that makes engines in a loop (a sweep, an evaluation per checkpoint) must get each one's
memory back, and so must a run that loads checkpoints in a loop:

- An engine dropped without close() (its model dropped with it) is freed by Python's collector,
  with its thread: at stage 3 the hook on each parameter held the engine strongly, where the
  collector cannot see it, so it lived until the process ended (+23 MiB and a thread per engine
  of a 1M-parameter model; with NVMe offload a swap file too).
- load_checkpoint and save_checkpoint leave no buffer alive in a reference cycle: the load's
  64 MiB blob buffer was kept by ctypes.cast's cycle until a full collection, so RSS grew 64 MiB a
  load (3 GB in a loop loading every 10 steps). Checked with the collector off, through weak
  references to every buffer the two make, with a client_state larger than the load's first
  buffer (which it then reads again).
- zinc.initialize called again on a model an engine trains closes that engine (stages 0-2) or
  says what to do (stage 3): again()'s docstring.
"""
import ctypes
import gc
import os
import sys
import tempfile
import time
import warnings
import weakref

from _common import check, check_raises, finish, state_kept_past_close, torch, zinc


def config(stage):
    return {"train_micro_batch_size_per_gpu": 4,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def trained_engine(stage):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    engine, *_ = zinc.initialize(model=model, config=config(stage))
    engine.backward(engine(torch.randn(4, 16)).sum())
    engine.step()
    return engine


def threads():
    return len(os.listdir("/proc/self/task"))


def threads_after(before):
    """The thread count once the threads an engine ended are gone: up to 2 s for it to fall to
    `before`. A worker zinc has joined can still be listed in /proc for a moment (the kernel
    wakes pthread_join before it reaps the thread), and the last view of an engine's memory now
    ends its device, the pool's join included, right before the count (zinc_memory_hold): on
    2 busy cores the count then saw one thread more in 3 of 6 runs, none with 0.3 s between."""
    deadline = time.monotonic() + 2.0
    n = threads()
    while n > before and time.monotonic() < deadline:
        time.sleep(0.01)
        n = threads()
    return n


def dropped(stage):
    gc.collect()
    before = threads()
    engine = trained_engine(stage)
    alive = weakref.ref(engine)
    del engine
    gc.collect()
    check(f"stage {stage}: an engine dropped without close() (and its model) is freed",
          alive() is None, "still referenced after gc.collect()")
    after = threads_after(before)
    check(f"stage {stage}: its threads are gone with it", after <= before,
          f"{before} threads before it, {after} after")


def no_cycles(stage):
    engine = trained_engine(stage)
    with tempfile.TemporaryDirectory() as d:
        # a client state past the load's first buffer (1 MiB): read again with the room
        big = os.urandom(3 << 20)
        engine.save_checkpoint(d, tag="a", client_state={"big": big})
        made, real = [], ctypes.create_string_buffer

        def recorded(*args):
            buf = real(*args)
            made.append(weakref.ref(buf))
            return buf
        ctypes.create_string_buffer = recorded
        gc.collect()
        gc.disable()
        try:
            _, client = engine.load_checkpoint(d, tag="a")
            engine.save_checkpoint(d, tag="b")
            kept = sum(r() is not None for r in made)
        finally:
            gc.enable()
            ctypes.create_string_buffer = real
    engine.close()
    check(f"stage {stage}: a 3 MiB client_state comes back whole (the load's first buffer holds "
          f"1 MiB)", client.get("big") == big)
    check(f"stage {stage}: the buffers of a load and a save are freed when they return, not "
          f"by the cyclic collector", made and kept == 0,
          f"{kept} of {len(made)} still alive with the collector off")


def again(stage):
    """zinc.initialize called again on a model an engine still trains (a notebook cell run
    twice). Stages 0-2: the old engine is closed with one RuntimeWarning, the new one trains the
    model's own parameters, and the old one, dropped, is freed. Before 2026-11-29 both stayed
    alive: the new engine kept the old one's gradient hooks, and so the old engine, alive (+1
    thread and its memory each time), and the old one's close() replaced the new one's views
    with copies, after which the model trained nothing, silently. Stage 3: a ValueError saying
    what to do, as for a model whose parameters a closed stage-3 engine left empty, frozen since
    or not (zinc_param_add said only "dimension 0 has extent 0"). A new engine whose config zinc
    rejects closes nothing (fails_late: one that fails later), and one of another dtype trains
    (it gets its own gradient nodes)."""
    gc.collect()
    before = threads()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    old, *_ = zinc.initialize(model=model, config=config(stage))
    x = torch.randn(4, 16)
    old.backward(old(x).sum())
    old.step()
    if stage == 3:
        check_raises(f"stage {stage}: initialize again on a model a live stage-3 engine trains",
                     lambda: zinc.initialize(model=model, config=config(stage)), ValueError,
                     "live ZeRO stage-3 engine")
        old.close()
        check_raises(f"stage {stage}: initialize on the parameters a closed stage-3 engine left "
                     f"empty", lambda: zinc.initialize(model=model, config=config(stage)),
                     ValueError, "is empty")
        model[0].requires_grad_(False)     # ... also where they are frozen now
        check_raises(f"stage {stage}: ... also frozen", lambda: zinc.initialize(
            model=model, config=config(stage)), ValueError, "'0.weight' is empty")
        return
    # A new engine that fails (here its config) closes nothing: the old one trains on.
    bad = dict(config(stage), zero_optimization={"stage": 9})
    check_raises(f"stage {stage}: initialize again with a config zinc rejects raises",
                 lambda: zinc.initialize(model=model, config=bad), Exception, "stage")
    try:
        old.backward(old(x).sum())
        old.step()
        kept = ""
    except RuntimeError as ex:
        kept = str(ex)
    check(f"stage {stage}: ... and the old engine trains on", not kept, kept)
    # The new engine in bf16 where the old one trained in fp32: the gradient nodes the old
    # engine kept remember fp32, so the new one must get its own.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        new, *_ = zinc.initialize(model=model, config=dict(config(stage), bf16={"enabled": True}))
    said = [str(w.message) for w in said if "trained by an engine made earlier" in str(w.message)]
    check(f"stage {stage}: initialize again on the same model warns once", len(said) == 1,
          f"{said}")
    check_raises(f"stage {stage}: ... and the old engine is closed", lambda e=old: e(x),
                 RuntimeError, "the engine was closed")
    old.close()      # (closed already: nothing; an old engine left alive replaced new's views)
    start = model[0].weight.detach().clone()
    try:
        for _ in range(3):
            new.backward(new(x.bfloat16()).float().sum())
            new.step()
        failed = ""
    except RuntimeError as ex:
        failed = str(ex)
    mine = new.module_state_dict()["0.weight"]
    check(f"stage {stage}: the new engine (bf16, the old one fp32) trains the model's parameters",
          not failed and not torch.equal(model[0].weight.detach(), start) and
          torch.equal(model[0].weight.detach(), mine.to(model[0].weight.dtype)),
          failed or "the model's weight did not move with the engine's")
    gone = weakref.ref(old)
    del old, _
    gc.collect()
    check(f"stage {stage}: the old engine, dropped, is freed while the new one lives",
          gone() is None, "still referenced after gc.collect()")
    new.close()
    after = threads_after(before)
    check(f"stage {stage}: ... with its threads", after <= before,
          f"{before} threads before, {after} after")


def kept_views(stage):
    """Tensors taken from the engine's views and kept past it (model.state_dict()'s entries,
    a .grad's .detach()) keep their values after close() and the engine's collection, as
    torch's do: each view holds zinc's memory (zinc_memory_hold) until torch frees it. Before
    2026-12-01 they read freed memory (a review measured garbage at stage 1; the large weight
    here, above malloc's mmap threshold, faulted). Stage 3 with every group persistent, so its
    parameters are whole views too. Once they are dropped the memory goes, with the engine's
    threads (a hold never released would keep them)."""
    gc.collect()
    before = threads()
    big = 200_000      # 800 KB of fp32: an unmapped block once freed
    model = torch.nn.Sequential(torch.nn.Linear(16, big // 16), torch.nn.ReLU(),
                                torch.nn.Linear(big // 16, 1))
    cfg = dict(config(stage), zero_optimization={
        "stage": stage, "stage3_param_persistence_threshold": 10 * big})
    engine, *_ = zinc.initialize(model=model, config=cfg)
    x = torch.randn(4, 16)
    engine.backward(engine(x).sum())
    grad = model[0].weight.grad
    grad = grad.detach() if grad is not None else None
    grad_ref = grad.clone() if grad is not None else None
    engine.step()
    views, changed = state_kept_past_close(engine, model, big)
    del engine, _
    gc.collect()
    check(f"stage {stage}: model.state_dict() taken before close() keeps its values after the "
          f"engine is closed and collected", views and not changed,
          f"{len(changed)} of {len(views)} tensors changed")
    if grad is not None:
        check(f"stage {stage}: ... and a .grad kept from before the step", torch.equal(
            grad, grad_ref), "changed")
    del grad, grad_ref, model
    gc.collect()
    check(f"stage {stage}: once they are dropped, the engine's threads go with its memory",
          threads_after(before) <= before, f"{before} threads before, {threads()} after")


class _Empty(torch.nn.Module):
    """A module with an empty parameter, which zinc refuses to train (zinc_param_add)."""

    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.empty(0))

    def forward(self, x):
        return x


def fails_late(stage):
    """Stages 0-2: initialize again fails after zinc took its config (zinc_param_add refuses an
    empty parameter): the old engine, closed by then, says so when used, and the model keeps the
    values it trained. 2e89e01 left the old engine running without training the model (the
    failed engine's close() copied the parameters away from the old engine's memory) and no
    longer known as the model's engine."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1), _Empty())
    cfg = dict(config(stage), train_micro_batch_size_per_gpu=4)
    old, *_ = zinc.initialize(model=model, model_parameters=list(model[0].parameters()),
                              config=cfg)
    x = torch.randn(4, 8)
    old.backward(old(x).sum())
    old.step()
    trained = old.module_state_dict()["0.weight"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_raises(f"stage {stage}: initialize again fails on an empty parameter",
                     lambda: zinc.initialize(model=model, config=cfg), Exception, "extent 0")
    gc.collect()
    check_raises(f"stage {stage}: ... after closing the old engine, which says so when used",
                 lambda: old.backward(old(x).sum()), RuntimeError, "the engine was closed")
    check(f"stage {stage}: ... and the model keeps the values it trained",
          torch.equal(model[0].weight.detach(), trained.to(model[0].weight.dtype)))
    old.close()


def main():
    # the threads the first engine starts for the process (torch's pool, zinc's world) stay
    trained_engine(0).close()
    for stage in range(4):
        dropped(stage)
        kept_views(stage)
        no_cycles(stage)
        again(stage)
        if stage < 3:
            fails_late(stage)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
