"""test_torch_data.py — the data loader zinc.initialize(training_data=...) and
engine.deepspeed_io build, with DeepSpeed's meaning (deepspeed/runtime/dataloader.py).

    python test_torch_data.py            (also under mpirun -np 2)

- initialize returns it as its third value; one pass gives this rank ceil(ceil(N/W)/micro)
  batches of train_micro_batch_size_per_gpu samples through initialize's collate_fn, built by
  two worker processes (none with num_local_io_workers=0); the ranks' samples together are the
  whole dataset (DistributedSampler's padding repeats the first ones), each rank's in
  DistributedSampler's shuffled order (seed 0), the same order again in a second pass
  (DeepSpeed never calls set_epoch), another after `loader.data_sampler.set_epoch(1)`;
- one pass of training over it equals plain torch AdamW on the same global batches (the
  ranks' batches together), within the parity bound of test_torch_parity.py (4e-6);
- the "eval" route is in order (rank r: r, r + W, ...); batch_size, num_local_io_workers, a
  list as the dataset; RepeatingLoader starts the loader again;
- 60 passes, each right after a torch.distributed all_gather_object, all finish (a worker
  forked then can hang on CPython 3.11.2 unless the loader lets waiting threads run first);
- the config's dataloader_drop_last drops each rank's last incomplete batch;
- an IterableDataset and a non-dataset are refused before the engine takes the model, a bad
  route or batch size by deepspeed_io, a non-boolean dataloader_drop_last by zinc's config
  check, naming the key;
- DeepSpeed's names: the loader is a DeepSpeedDataLoader (zinc.dataloader's, and
  deepspeed.runtime.dataloader's under zinc.as_deepspeed: an ImportError before 2026-12-01);
  one built with DeepSpeed's constructor reads DistributedSampler's indices of the rank it is
  given, or through a RandomSampler with local_rank -1; curriculum learning is refused;
- an empty dataset gives no loader (None) and a warning, as DeepSpeed's `if training_data:`
  (zinc built a loader that yielded nothing).
Each check prints its name; exit 1 when one fails, 77 without torch.
"""
import math
import multiprocessing
import os
import signal
import sys

from _common import check, failures, torch, zinc

dist = torch.distributed
N, MICRO, FEAT = 21, 4, 5
GATHER_PASSES, PASS_S = 60, 30    # test_pass_after_gather: passes, seconds one may take


class Indexed(torch.utils.data.Dataset):
    """Sample i: (x_i, y_i, i), so a batch tells which samples it holds."""

    def __init__(self):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(N, FEAT, generator=g)
        self.y = torch.randn(N, 1, generator=g)

    def __len__(self):
        return N

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def collate(items):
    """A collate_fn that marks its batches, so the test sees it was used and which worker
    process built each batch (None: the main process)."""
    xs, ys, idx = zip(*items)
    info = torch.utils.data.get_worker_info()
    return {"x": torch.stack(xs), "y": torch.stack(ys), "idx": list(idx), "by": "collate",
            "worker": None if info is None else info.id}


def cfg(**extra):
    return dict({"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
                 "gradient_clipping": 0.0,
                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
                 "zero_optimization": {"stage": 2}}, **extra)


def model_of():
    torch.manual_seed(0)
    return torch.nn.Linear(FEAT, 1)


def indices(batches):
    return [i for b in batches for i in b["idx"]]


def gathered(engine, mine):
    """Every rank's list of sample indices (all of one length: DistributedSampler pads), sent
    through zinc's broadcast, not torch.distributed: on CPython before 3.11.10 (gh-112275;
    Debian 12 has 3.11.2) a DataLoader worker forked just after a gloo all_gather_object can
    hang in the fork itself; docs/python.md has the measurements."""
    every = []
    for root in range(engine.world_size):
        buf = torch.tensor(mine, dtype=torch.int64)
        engine._broadcast(buf, root)
        every.append(buf.tolist())
    return every


def reference(ds, global_batches):
    """Plain torch: AdamW on each step's global batch (the mean loss over it: every rank's
    batch has the same size here, so zinc's mean over ranks of each rank's mean is the same)."""
    model = model_of()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    for idx in global_batches:
        loss = torch.nn.functional.mse_loss(model(ds.x[idx]), ds.y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_training_loader(ds):
    model = model_of()
    engine, _, loader, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                           config=cfg(), training_data=ds, collate_fn=collate)
    rank, world = engine.global_rank, engine.world_size
    per_rank = math.ceil(N / world)
    check("initialize returns the loader, also as engine.training_dataloader",
          loader is not None and loader is engine.training_dataloader)
    check("len(loader) = ceil(ceil(N / W) / micro)", len(loader) == math.ceil(per_rank / MICRO),
          f"{len(loader)}")
    first = list(loader)
    check("two worker processes by default build the batches",
          {b["worker"] for b in first} == {0, 1}, str([b["worker"] for b in first]))
    sizes = [len(b["idx"]) for b in first]
    want = [MICRO] * (per_rank // MICRO) + ([per_rank % MICRO] if per_rank % MICRO else [])
    check("batches of the micro batch size, the last one what is left", sizes == want,
          f"{sizes} vs {want}")
    check("initialize's collate_fn makes the batches", all(b["by"] == "collate" for b in first))
    mine = indices(first)
    spec = list(torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank,
                                                    shuffle=True, seed=0))
    check("this rank's samples in DistributedSampler's order (shuffled, seed 0)", mine == spec,
          f"{mine} vs {spec}")
    check("the order is shuffled", mine != sorted(mine))
    every = gathered(engine, mine)
    union = [i for r in every for i in r]
    check("the ranks together read the whole dataset, the padding repeating first samples",
          sorted(set(union)) == list(range(N)) and len(union) == per_rank * world, f"{union}")
    check("a second pass, the same order (no set_epoch, as DeepSpeed)",
          indices(list(loader)) == mine)
    loader.data_sampler.set_epoch(1)
    again = indices(list(loader))
    check("set_epoch(1) on the loader's sampler: another order",
          len(again) == len(mine) and again != mine, f"{again}")
    loader.data_sampler.set_epoch(0)

    # One pass of training over the loader, against plain torch on the same global batches.
    for b in loader:
        loss = torch.nn.functional.mse_loss(engine(b["x"]), b["y"])
        engine.backward(loss)
        engine.step()
    check("a step per batch", engine.global_steps == len(loader), f"{engine.global_steps}")
    per_step = [[i for r in every for i in r[k * MICRO:(k + 1) * MICRO]]
                for k in range(len(loader))]
    want = reference(ds, per_step)
    got = torch.cat([t.float().flatten() for t in engine.module_state_dict().values()])
    err = ((got - want).abs().max() / want.abs().max()).item()
    check("training over the loader = plain torch AdamW on the same global batches", err < 4e-6,
          f"relative error {err:.3g} (bound 4e-6)")

    # The "eval" route: in order; batch_size and num_local_io_workers (initialize's collate_fn
    # is deepspeed_io's default, as in DeepSpeed); a list as the dataset.
    ev = engine.deepspeed_io(ds, route="eval", batch_size=5, num_local_io_workers=0)
    got = indices(ev)
    check("num_local_io_workers=0: the main process builds the batches",
          all(b["worker"] is None for b in ev))
    want = [i % N for i in range(rank, per_rank * world, world)]
    check("route eval: rank r reads r, r + W, ... in batches of batch_size", got == want and
          all(len(b["idx"]) <= 5 for b in ev), f"{got} vs {want}")
    listed = engine.deepspeed_io([(ds.x[i], i) for i in range(N)], route="predict",
                                 collate_fn=torch.utils.data.default_collate)
    got = [i for b in listed for i in b[1].tolist()]
    check("deepspeed_io takes a list (map-style: __getitem__ and __len__), its collate_fn",
          got == want, f"{got} vs {want}")
    rep = zinc.RepeatingLoader(loader)
    got = [next(rep)["idx"] for _ in range(2 * len(loader) + 1)]
    check("RepeatingLoader starts the loader again at its end",
          got[len(loader)] == got[0] and got[2 * len(loader)] == got[0] and
          indices([{"idx": g} for g in got[:len(loader)]]) == mine)
    for route, kw in (("bogus", {}), ("train", {"batch_size": 0}),
                      ("train", {"num_local_io_workers": -1})):
        try:
            engine.deepspeed_io(ds, route=route, **kw)
            check(f"deepspeed_io(route={route!r}, {kw}) raises", False)
        except ValueError as ex:
            check(f"deepspeed_io(route={route!r}, {kw}) raises ValueError", True, str(ex))
    engine.close()
    return world


def test_pass_after_gather(ds):
    """Passes that start right after a torch.distributed all_gather_object (a script's metrics at
    an epoch's end). On CPython before the fix for gh-112275 (Debian 12's 3.11.2 is one) a
    worker forked then can hang in the fork: 13 of 15 runs did without the switch interval
    zinc's loader waits before it forks (docs/python.md, bench/fork_after_gather.py). A pass
    stuck for PASS_S seconds fails the test and ends this rank (the others would wait in the
    next gather)."""
    if not dist.is_initialized():
        check("torch.distributed is set up by initialize", False)
        return
    model = model_of()
    engine, _, loader, _ = zinc.initialize(model=model, config=cfg(), training_data=ds)

    def stuck(*_):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, stuck)
    batches = 0
    for i in range(GATHER_PASSES):
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, i)
        signal.alarm(PASS_S)
        try:
            batches += sum(1 for _ in loader)
        except TimeoutError:
            check(f"pass {i} after an all_gather_object finishes within {PASS_S} s", False,
                  "a worker process is stuck (CPython gh-112275?)")
            sys.stdout.flush()
            for worker in multiprocessing.active_children():
                worker.kill()       # the stuck one would keep the test's output open
            os._exit(1)
        finally:
            signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    check(f"{GATHER_PASSES} passes, each right after an all_gather_object, all finish",
          batches == GATHER_PASSES * len(loader), f"{batches} batches")
    engine.close()


def test_drop_last(ds, world):
    model = model_of()
    engine, _, loader, _ = zinc.initialize(model=model, config=cfg(dataloader_drop_last=True),
                                           training_data=ds)
    per_rank = math.ceil(N / world)
    batches = list(loader)
    check("dataloader_drop_last: len(loader) = ceil(N / W) // micro",
          len(loader) == per_rank // MICRO == len(batches), f"{len(loader)}, {len(batches)}")
    check("dataloader_drop_last: every batch full",
          all(len(b[2]) == MICRO for b in batches))
    check("engine.dataloader_drop_last()", engine.dataloader_drop_last() is True)
    engine.close()


def test_refused(ds):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    model = model_of()
    before = model.weight.detach().clone()
    for data, kind in ((Stream(), NotImplementedError), (42, ValueError)):
        try:
            zinc.initialize(model=model, config=cfg(zero_optimization={"stage": 3}),
                            training_data=data)
            check(f"training_data={type(data).__name__} raises", False)
        except kind as ex:
            check(f"training_data={type(data).__name__} raises {kind.__name__}", True, str(ex))
    check("a refused training_data leaves the model as it was (no engine took it)",
          model.weight.shape == before.shape and torch.equal(model.weight.detach(), before))
    try:
        zinc.initialize(model=model, config=cfg(dataloader_drop_last="yes"), training_data=ds)
        check("dataloader_drop_last: \"yes\" raises", False)
    except zinc.ZincError as ex:
        check("dataloader_drop_last: \"yes\" raises, naming the key",
              "dataloader_drop_last" in str(ex), str(ex))


def test_deepspeed_names(ds):
    from zinc.dataloader import DeepSpeedDataLoader
    model = model_of()
    engine, _, loader, _ = zinc.initialize(model=model, config=cfg(), training_data=ds)
    check("the loader is a DeepSpeedDataLoader", isinstance(loader, DeepSpeedDataLoader),
          type(loader).__name__)
    engine.close()
    own = DeepSpeedDataLoader(ds, MICRO, False, 0, None, data_parallel_world_size=2,
                              data_parallel_rank=1)
    want = list(torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1))
    got = [int(i) for b in own for i in b[2]]
    check("DeepSpeedDataLoader(ds, 4, False, 0, None, world 2, rank 1): rank 1's "
          "DistributedSampler indices, ceil(11/4) batches; DeepSpeed's len, device_count and "
          "curriculum_learning_enabled", got == want and len(own) == 3 and own.len == 3
          and own.device_count == 1 and own.curriculum_learning_enabled is False,
          f"{got} vs {want}, len {len(own)}")
    plain = DeepSpeedDataLoader(ds, MICRO, False, -1, None, num_local_io_workers=0)
    seen = sorted(int(i) for b in plain for i in b[2])
    check("local_rank -1: a RandomSampler over the whole dataset",
          isinstance(plain.data_sampler, torch.utils.data.RandomSampler) and len(plain) == 6
          and seen == list(range(N)), f"{type(plain.data_sampler).__name__}, {len(plain)}")
    try:
        DeepSpeedDataLoader(ds, MICRO, False, 0, None, data_parallel_world_size=1,
                            data_parallel_rank=0,
                            deepspeed_dataloader_config={"curriculum_learning": True})
        check("curriculum_learning refused", False)
    except NotImplementedError as ex:
        check("curriculum_learning refused", "curriculum_learning" in str(ex), str(ex))
    import warnings
    for empty in ([], torch.utils.data.TensorDataset(torch.zeros(0, FEAT))):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            engine, _, loader, _ = zinc.initialize(model=model_of(), config=cfg(),
                                                   training_data=empty)
        check(f"an empty {type(empty).__name__}: no loader, as DeepSpeed's, and a warning",
              loader is None and engine.training_dataloader is None
              and any("training_data is empty" in str(w.message) for w in said),
              f"{loader!r}, {[str(w.message) for w in said]}")
        engine.close()
    from zinc import as_deepspeed
    as_deepspeed.install()
    import importlib
    mod = importlib.import_module("deepspeed.runtime.dataloader")
    check("deepspeed.runtime.dataloader.DeepSpeedDataLoader under zinc.as_deepspeed",
          getattr(mod, "DeepSpeedDataLoader", None) is DeepSpeedDataLoader)


def main():
    ds = Indexed()
    world = test_training_loader(ds)
    test_pass_after_gather(ds)
    test_drop_last(ds, world)
    test_refused(ds)
    test_deepspeed_names(ds)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
