"""dataloader.py — the data loader zinc.initialize(training_data=...) and engine.deepspeed_io
build, with DeepSpeed's meaning (deepspeed/runtime/dataloader.py, 0.19.8):

- each rank reads its own part of the dataset: a torch DistributedSampler over the data-parallel
  world (shuffled with seed 0 for the "train" and "encode" routes, in order for "eval" and
  "predict"), or the data_sampler given;
- batches of train_micro_batch_size_per_gpu samples (or batch_size), collate_fn when given;
- the config's dataloader_drop_last drops each rank's last incomplete batch;
- two worker processes (num_local_io_workers), pinned memory on a CUDA engine;
- every iteration builds a fresh torch DataLoader (after a short wait: see __iter__). Like
  DeepSpeed's, it never calls the sampler's set_epoch: each pass sees the same order unless the
  script calls `loader.data_sampler.set_epoch(epoch)`.
Nothing here touches zinc's engine: it only reads the rank, the world size and the config."""
import math
import sys
import time

from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

ROUTES = ("train", "eval", "predict", "encode")


class RepeatingLoader:
    """DeepSpeed's RepeatingLoader: iterates a loader for ever, starting it again when it
    ends."""

    def __init__(self, loader):
        self.loader = loader
        self.data_iter = iter(loader)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.data_iter)
        except StopIteration:
            self.data_iter = iter(self.loader)
            return next(self.data_iter)


class DeepSpeedDataLoader:
    """DeepSpeed's loader (deepspeed.runtime.dataloader.DeepSpeedDataLoader): its name and
    constructor, for scripts that build one or test isinstance; zinc.initialize and deepspeed_io
    return one. len() is the number of batches this rank reads, iter() starts a pass,
    `data_sampler` is the sampler (set_epoch on it reshuffles). local_rank >= 0: a
    DistributedSampler over data_parallel_world_size ranks at data_parallel_rank
    (torch.distributed's world where None), shuffled with seed 0, unless a data_sampler is
    given; local_rank < 0: a RandomSampler (DeepSpeed also multiplies the batch by its
    accelerator's device count there; zinc keeps batch_size). tput_timer is kept, not used;
    curriculum learning (DeepSpeed's data efficiency) is not offered."""

    def __init__(self, dataset, batch_size, pin_memory, local_rank, tput_timer, collate_fn=None,
                 num_local_io_workers=None, data_sampler=None, data_parallel_world_size=None,
                 data_parallel_rank=None, dataloader_drop_last=False,
                 deepspeed_dataloader_config=None):
        if (deepspeed_dataloader_config or {}).get("curriculum_learning"):
            raise NotImplementedError("zinc: DeepSpeedDataLoader with curriculum_learning "
                                      "(DeepSpeed's data efficiency is not offered)")
        if data_sampler is None:
            data_sampler = (DistributedSampler(dataset, num_replicas=data_parallel_world_size,
                                               rank=data_parallel_rank)
                            if local_rank >= 0 else RandomSampler(dataset))
        self.dataset = dataset
        self.batch_size = batch_size
        self.data_sampler = data_sampler
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.num_local_io_workers = 2 if num_local_io_workers is None else num_local_io_workers
        self.dataloader_drop_last = bool(dataloader_drop_last)
        self.dataloader = None      # the torch DataLoader of the pass under way
        self.data = None            # its iterator
        # DeepSpeed's attributes scripts read: the batch count of a pass, the devices one batch
        # is split over, the data-efficiency settings (none here)
        self.tput_timer = tput_timer
        self.post_process_func = None
        self.deepspeed_dataloader_config = dict(deepspeed_dataloader_config or {})
        self.curriculum_learning_enabled = False
        self.device_count = 1
        self.len = len(self)

    def __len__(self):
        n = len(self.data_sampler)
        return n // self.batch_size if self.dataloader_drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        kw = {} if self.collate_fn is None else {"collate_fn": self.collate_fn}
        if self.num_local_io_workers > 0:
            # Let the threads that wait for the GIL run before the DataLoader forks its
            # workers: on CPython without the fix for gh-112275 (Debian 12's 3.11.2, 3.11.7), a
            # pass started right after a gloo collective had a worker hang in the fork itself
            # (docs/python.md, "Data"). One switch interval (5 ms by default) is the time a
            # waiting thread gives the holder before it asks for the GIL; a bare yield
            # (sleep(0)) still let 1 of 8 runs hang at 4 ranks on 2 busy cores.
            time.sleep(sys.getswitchinterval())
        self.dataloader = DataLoader(self.dataset, batch_size=self.batch_size,
                                     sampler=self.data_sampler, pin_memory=self.pin_memory,
                                     num_workers=self.num_local_io_workers,
                                     drop_last=self.dataloader_drop_last, **kw)
        self.data = iter(self.dataloader)
        return self

    def __next__(self):
        return next(self.data)


def check_dataset(dataset):
    """Refuses what the loader cannot split between ranks, naming it (initialize checks the
    training data before it builds the engine)."""
    if isinstance(dataset, IterableDataset):
        # DeepSpeed's loader puts a DistributedSampler over it, which torch refuses; an
        # iterable stream cannot be split by index: the dataset must shard itself.
        raise NotImplementedError(
            "zinc: an IterableDataset cannot be split between ranks by a sampler; "
            "give a map-style Dataset, or shard the stream per rank yourself and iterate a "
            "torch DataLoader over it")
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise ValueError(f"zinc: training data must be a torch Dataset (with __getitem__ and "
                         f"__len__), not {type(dataset).__name__}")


def build(dataset, *, batch_size, rank, world_size, route, pin_memory, data_sampler, collate_fn,
          num_local_io_workers, drop_last):
    """engine.deepspeed_io's loader, its arguments checked first (errors name what is wrong)."""
    if route not in ROUTES:
        raise ValueError(f"zinc: deepspeed_io: route {route!r} is not one of {ROUTES}")
    check_dataset(dataset)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"zinc: deepspeed_io: batch_size {batch_size!r} is not an integer >= 1")
    if num_local_io_workers is not None and (isinstance(num_local_io_workers, bool) or
                                             not isinstance(num_local_io_workers, int) or
                                             num_local_io_workers < 0):
        raise ValueError(f"zinc: deepspeed_io: num_local_io_workers {num_local_io_workers!r} "
                         "is not an integer >= 0")
    if data_sampler is None:
        data_sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                          shuffle=route not in ("eval", "predict"))
    return DeepSpeedDataLoader(dataset, batch_size, pin_memory, rank, None,
                               collate_fn=collate_fn, num_local_io_workers=num_local_io_workers,
                               data_sampler=data_sampler, data_parallel_world_size=world_size,
                               data_parallel_rank=rank, dataloader_drop_last=drop_last)


__all__ = ["DeepSpeedDataLoader", "RepeatingLoader", "build", "check_dataset"]
