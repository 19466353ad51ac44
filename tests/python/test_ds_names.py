"""test_ds_names.py — DeepSpeed's names besides `deepspeed` itself under zinc's paths
(zinc.accelerator, zinc.comm, zinc.ops.adam, zinc.utils, zinc.runtime.zero.partition_parameters)
and `python -m zinc.as_deepspeed`, which runs a DeepSpeed script unedited.

    python test_ds_names.py api                      in one process (world of one)
    python test_ds_names.py runs STAGE [MPIEXEC ARG... -n]
                                                     ds_script.py three ways, world 1 or 2

api: the CPU accelerator answers as DeepSpeed's CPU_Accelerator (device names, backend gloo,
on_accelerator, manual_seed reproducing torch's draws, memory figures, no Stream/Event);
zinc.get_accelerator is it; zinc.comm before torch.distributed is set up raises naming the call,
and afterwards sums, broadcasts and gathers; FusedAdam/DeepSpeedCPUAdam hold DeepSpeed's
defaults, FusedAdam(amsgrad=True) raises as DeepSpeed's, step() outside initialize raises, and
initialize refuses DeepSpeedCPUAdam's amsgrad and fp32_optimizer_states=False by name;
set_z3_leaf_modules flags the classes' instances (and raises when there is none), and at stage 3
a leaf's forward has every expert's parameters gathered when the first expert runs, while
without the flag the second expert's are still empty then; the leaf trains bit for bit as
without; logger, log_dist, RepeatingLoader, ZeroParamStatus; under zinc.as_deepspeed's install()
`deepspeed.moe`, `deepspeed.pipe`, `deepspeed.inference`, `deepspeed.ops.sparse_attention` raise
ImportError naming the module and saying zinc does not offer it, and a zinc private module is
not reachable as deepspeed._lib. The names Hugging Face's Trainer and accelerate take from
deepspeed (api_accelerate_names).

runs: ds_script.py with FusedAdam (AdamW) and with DeepSpeedCPUAdam(adamw_mode=False) (Adam, L2
decay), each run as written through `python -m zinc.as_deepspeed`, with zinc's names, and as
plain zinc with the optimizer in the config: each rank's 7 losses are equal, bit for bit, in the
three runs; the script saw its own argv and __name__ "__main__", the comm results of the world,
and its optimizer's class name."""
import json
import os
import subprocess
import sys
import tempfile

from _common import check, check_raises, failures, torch, zinc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ds_names_model import Experts, MoE  # noqa: E402


def api_accelerator():
    acc = zinc.accelerator.get_accelerator()
    check("zinc.get_accelerator() is zinc.accelerator.get_accelerator()",
          zinc.get_accelerator() is acc)
    if acc.device_name() == "cuda":
        print("(a CUDA device: the CPU accelerator's checks are skipped)")
        return
    got = (acc.device_name(), acc.device_name(0), acc.current_device_name(),
           acc.communication_backend_name(), acc.is_available(), acc.is_bf16_supported(),
           acc.Stream, acc.Event, acc.device(), acc.on_accelerator(torch.zeros(1)))
    # DeepSpeed 0.19.8's CPU_Accelerator gives these (read in bench/.venv): device() is None.
    want = ("cpu", "cpu", "cpu", "gloo", True, True, None, None, None, True)
    check("the CPU accelerator (DeepSpeed's CPU_Accelerator answers)", got == want,
          f"{got} != {want}")
    check("device_count() >= 1", acc.device_count() >= 1, str(acc.device_count()))
    check("is_fp16_supported: torch 2 and later (Half CPU kernels)",
          acc.is_fp16_supported() == (int(torch.__version__.split(".")[0]) >= 2))
    acc.manual_seed(123)
    a = torch.randn(4)
    torch.manual_seed(123)
    check("manual_seed seeds torch's generator", torch.equal(a, torch.randn(4)))
    t = torch.ones(3)
    check("pin_memory on the CPU: the tensor itself", acc.pin_memory(t) is t)
    # DeepSpeed 0.19.8's keywords (make_copy, match_shape): TypeError before
    check("pin_memory(t, make_copy=False, match_shape=True): the tensor itself",
          acc.pin_memory(t, make_copy=False, match_shape=True) is t)
    # the tensor types and generator Megatron-style scripts take from the accelerator
    # (AttributeError before), and DeepSpeed's CPU memory_stats entries
    got = (acc.FloatTensor, acc.HalfTensor, acc.BFloat16Tensor, acc.LongTensor, acc.IntTensor,
           acc.ByteTensor, acc.DoubleTensor, acc.default_generator(0))
    want = (torch.FloatTensor, torch.HalfTensor, torch.BFloat16Tensor, torch.LongTensor,
            torch.IntTensor, torch.ByteTensor, torch.DoubleTensor, torch.default_generator)
    check("the CPU accelerator's tensor types and default_generator are torch's", got == want,
          f"{got}")
    stats = acc.memory_stats()
    check("memory_stats: DeepSpeed's CPU entries (current and peak resident bytes)",
          set(stats) == {"allocated_bytes.all.current", "allocated_bytes.all.peak"} and
          0 < stats["allocated_bytes.all.current"] <= stats["allocated_bytes.all.peak"],
          str(stats))
    used = acc.memory_allocated()
    big = torch.ones(64 << 20, dtype=torch.uint8)       # 64 MiB touched
    more = acc.memory_allocated()
    check("memory_allocated: the process's resident bytes, growing with a 64 MiB tensor",
          used > 0 and more - used > 32 << 20, f"{used} -> {more}")
    del big
    check("max_memory_allocated >= memory_allocated",
          acc.max_memory_allocated() >= more, f"{acc.max_memory_allocated()} vs {more}")
    with acc.stream(acc.current_stream()):
        pass
    acc.synchronize()
    acc.empty_cache()
    acc.set_device(0)


def api_comm_before():
    check("zinc.comm.is_initialized() before any set-up", not zinc.comm.is_initialized())
    check("get_rank / get_world_size / get_local_rank from the launcher's world",
          (zinc.comm.get_rank(), zinc.comm.get_world_size(), zinc.comm.get_local_rank())
          == (0, 1, 0))
    check_raises("a collective before the set-up raises naming it",
                 lambda: zinc.comm.all_reduce(torch.ones(1)), RuntimeError,
                 "zinc.comm.all_reduce", "zinc.init_distributed")


def api_comm_after():
    zinc.comm.init_distributed()
    t = torch.tensor([2.0])
    zinc.comm.all_reduce(t)
    b = torch.tensor([7.0])
    zinc.comm.broadcast(b, 0)
    parts = [torch.zeros(2)]
    zinc.comm.all_gather(parts, torch.tensor([1.0, 2.0]))
    out = torch.zeros(2)
    zinc.comm.all_gather_into_tensor(out, torch.tensor([3.0, 4.0]))
    zinc.comm.barrier()
    check("get_global_rank of a new group's rank 0, and of the world's",
          zinc.comm.get_global_rank(zinc.comm.new_group([0]), 0) == 0
          and zinc.comm.get_global_rank(None, 0) == 0)
    check("zinc.comm after init_distributed: all_reduce, broadcast, all_gather, barrier",
          zinc.comm.is_initialized() and t.item() == 2.0 and b.item() == 7.0
          and parts[0].tolist() == [1.0, 2.0] and out.tolist() == [3.0, 4.0],
          f"{t}, {b}, {parts}, {out}")


def api_optimizers():
    from zinc.ops.adam import DeepSpeedCPUAdam, FusedAdam
    m = torch.nn.Linear(2, 2)
    f = FusedAdam(m.parameters())
    c = DeepSpeedCPUAdam(m.parameters())
    got = (isinstance(f, torch.optim.Optimizer), f.defaults, f.adam_w_mode,
           c.defaults, c.adam_w_mode)
    want = (True, dict(lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=0.),
            1, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                    bias_correction=True, amsgrad=False), True)
    check("FusedAdam and DeepSpeedCPUAdam: DeepSpeed's defaults", got == want,
          f"{got} != {want}")
    check_raises("FusedAdam(amsgrad=True) raises as DeepSpeed's",
                 lambda: FusedAdam(m.parameters(), amsgrad=True), RuntimeError, "AMSGrad")
    check_raises("step() outside zinc.initialize raises", f.step, RuntimeError,
                 "FusedAdam", "zinc.initialize(optimizer=...)")
    cfg = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}
    for kw, key in (({"amsgrad": True}, "amsgrad"),
                    ({"fp32_optimizer_states": False}, "fp32_optimizer_states")):
        m = torch.nn.Linear(2, 2)
        check_raises(f"initialize refuses DeepSpeedCPUAdam({key}=...)",
                     lambda: zinc.initialize(model=m, config=cfg,
                                             optimizer=DeepSpeedCPUAdam(m.parameters(), **kw)),
                     NotImplementedError, key)


def api_leaf():
    from zinc.utils import get_z3_leaf_modules, set_z3_leaf_modules, unset_z3_leaf_modules
    m = MoE()
    got = set_z3_leaf_modules(m, [Experts])
    check("set_z3_leaf_modules returns and flags the instances",
          got == [m.moe] and get_z3_leaf_modules(m) == [m.moe] and m.moe._z3_leaf is True)
    check("... by class name too", set_z3_leaf_modules(MoE(), ["Experts"])[0]._z3_leaf)
    unset_z3_leaf_modules(m, [Experts])
    check("unset_z3_leaf_modules clears it", get_z3_leaf_modules(m) == [])
    check_raises("no instance: ValueError", lambda: set_z3_leaf_modules(m, [torch.nn.GRU]),
                 ValueError, "GRU")
    check("raise_if_not_found=False: []",
          set_z3_leaf_modules(m, [torch.nn.GRU], raise_if_not_found=False) == [])
    from zinc.utils import set_z3_leaf_modules_by_name, set_z3_leaf_modules_by_suffix
    m = MoE()
    got = set_z3_leaf_modules_by_name(m, ["moe", "nothing"], raise_if_not_found=False)
    check("set_z3_leaf_modules_by_name: (modules, names not found)",
          got == ([m.moe], ["nothing"]) and get_z3_leaf_modules(m) == [m.moe], str(got))
    check_raises("... a name not found raises naming it",
                 lambda: set_z3_leaf_modules_by_name(m, ["nothing"]), ValueError, "nothing")
    got = set_z3_leaf_modules_by_suffix(m, ["up"], flag=True)
    check("set_z3_leaf_modules_by_suffix: each expert's 'up'",
          got == ([m.moe.experts[0].up, m.moe.experts[1].up], []), str(got))

    def train(leaf):
        torch.manual_seed(0)
        model = MoE()
        if leaf:
            set_z3_leaf_modules(model, [Experts])
        # The second expert's parameters, held where no module attribute reads them (a read
        # through the attribute would gather them).
        peek = list(model.moe.experts[1].parameters())
        sizes = []
        model.moe.experts[0].register_forward_pre_hook(
            lambda mod, inp: sizes.append(min(p.numel() for p in peek)))
        engine, *_ = zinc.initialize(
            model=model, model_parameters=model.parameters(),
            # (persistence off: the experts are small, and persistent groups are whole in the
            # module for good, so no gather would be seen)
            config={"train_micro_batch_size_per_gpu": 8,
                    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
                    "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}})
        g = torch.Generator().manual_seed(5)
        losses = []
        for _ in range(4):
            x = torch.randn(8, 8, generator=g)
            loss = (engine(x) ** 2).mean()
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        engine.close()
        return sizes, losses

    leaf_sizes, leaf_losses = train(True)
    sizes, losses = train(False)
    check("stage 3 leaf: the second expert is gathered when the first one runs",
          leaf_sizes and min(leaf_sizes) > 0, str(leaf_sizes))
    check("without the flag it is not (each module gathers its own)",
          sizes and max(sizes) == 0, str(sizes))
    check("the leaf trains bit for bit as without", leaf_losses == losses,
          f"{leaf_losses} vs {losses}")


def api_utils():
    import logging

    from zinc.runtime.zero.partition_parameters import ZeroParamStatus
    from zinc.utils import RepeatingLoader, log_dist, logger
    check("logger: a logging.Logger at INFO", isinstance(logger, logging.Logger)
          and logger.getEffectiveLevel() == logging.INFO)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    h = Keep()
    logger.addHandler(h)
    log_dist("to rank 0", ranks=[0])
    log_dist("to rank 1", ranks=[1])
    logger.removeHandler(h)
    check("log_dist logs on the ranks listed", seen == ["[Rank 0] to rank 0"], str(seen))
    # (`from deepspeed import log_dist, logger`, as DeepSpeed's package offers them; before
    # 2026-12-01, fourth session: ImportError under zinc.as_deepspeed)
    check("zinc.log_dist and zinc.logger are zinc.utils'", zinc.log_dist is log_dist
          and zinc.logger is logger)
    loader = RepeatingLoader([1, 2])
    check("RepeatingLoader repeats", [next(loader) for _ in range(5)] == [1, 2, 1, 2, 1])
    check("ZeroParamStatus: DeepSpeed's values",
          [(s.name, s.value) for s in ZeroParamStatus]
          == [("AVAILABLE", 1), ("NOT_AVAILABLE", 2), ("INFLIGHT", 3)])


def api_script_scheduler():
    """A torch scheduler over the client optimizer, stepped by the script after engine.step()
    (accelerate's AcceleratedScheduler): no "lr_scheduler.step() before optimizer.step()"
    warning, since zinc's step is the optimizer's (before 2026-12-01 torch warned at the first
    scheduler step, under zinc only), and the schedule is the script's."""
    import warnings
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = zinc.initialize(model=model, optimizer=opt,
                                      config={"train_micro_batch_size_per_gpu": 2})
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (k + 1))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            engine.backward(engine(torch.ones(2, 4)).sum())
            engine.step()
            sched.step()
    order = [str(w.message)[:60] for w in seen if "lr_scheduler.step()" in str(w.message)]
    check("a script-stepped scheduler over the client optimizer: no warning that it stepped "
          "before the optimizer", not order, f"{order}")
    check("... and the schedule is the script's (lr 1e-2 / 3 after two steps)",
          abs(opt.param_groups[0]["lr"] - 1e-2 / 3) < 1e-12, f"{opt.param_groups[0]['lr']}")
    engine.close()


def api_as_deepspeed():
    import importlib

    from zinc import as_deepspeed
    as_deepspeed.install()
    import deepspeed
    from deepspeed.ops.adam import FusedAdam
    check("deepspeed is zinc, deepspeed.ops.adam.FusedAdam zinc's",
          deepspeed is zinc and FusedAdam is zinc.ops.adam.FusedAdam)
    from deepspeed.comm import comm as ds_comm       # (an ImportError before 2026-12-01)
    import deepspeed.comm.comm as ds_comm2
    check("deepspeed.comm.comm (DeepSpeed's functions' module) is zinc.comm",
          ds_comm is zinc.comm and ds_comm2 is zinc.comm)
    for name in ("deepspeed.moe", "deepspeed.pipe", "deepspeed.inference",
                 "deepspeed.ops.sparse_attention", "deepspeed._lib"):
        check_raises(f"import {name}: ImportError naming it",
                     lambda: importlib.import_module(name), ImportError,
                     f"zinc does not offer the DeepSpeed module '{name}'")
    # The `deepspeed` distribution's metadata (transformers' Trainer requires "deepspeed>=0.9.3"
    # by it, and transformers and accelerate take DeepSpeed as absent without it): without
    # DeepSpeed installed, the Trainer under zinc.as_deepspeed stopped at PackageNotFoundError
    # (before 2026-12-01); with it installed, its version described modules zinc replaced.
    import importlib.metadata as md
    import re
    header = open(os.path.join(HERE, "..", "..", "include", "zinc.h")).read()
    want = ".".join(re.search(rf"#define ZINC_VERSION_{k} (\d+)", header).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))
    check("zinc.__version__ is include/zinc.h's version (deepspeed.__version__ with it)",
          zinc.__version__ == want and deepspeed.__version__ == want,
          f"{zinc.__version__} vs {want}")
    try:
        dist = md.distribution("DeepSpeed")          # (names are matched normalized)
        ver, summary = md.version("deepspeed"), dist.metadata["Summary"]
    except md.PackageNotFoundError as ex:
        check("the deepspeed distribution's metadata is zinc's answer", False, repr(ex))
        return
    check("the deepspeed distribution's metadata: version 0.19.8 (>= the Trainer's 0.9.3), "
          "its summary naming zinc and its version",
          ver == as_deepspeed.DEEPSPEED_VERSION == "0.19.8" and dist.metadata["Name"] ==
          "deepspeed" and tuple(map(int, ver.split("."))) >= (0, 9, 3) and
          summary.startswith(f"zinc {zinc.__version__} "), f"{ver!r} {summary!r}")
    finder = next(f for f in sys.meta_path if isinstance(f, as_deepspeed._NotOffered))
    ask = md.DistributionFinder.Context
    check("zinc's finder answers for deepspeed under its spellings and for no other name",
          [len(list(finder.find_distributions(ask(name=n))))
           for n in ("deepspeed", "DeepSpeed", "DEEPSPEED", "deep-speed", "torch",
                     "deepspeed-kernels")]
          == [1, 1, 1, 0, 0, 0])


def api_accelerate_names():
    """What Hugging Face's Trainer and accelerate take from deepspeed (found by running a Trainer
    under `python -m zinc.as_deepspeed`; each was an ImportError or AttributeError before
    2026-11-30): DeepSpeedEngine (accelerate's isinstance to unwrap a model), the schedule names,
    clone_tensors_for_torch_save (its state_dict before torch.save), the two names transformers
    swaps around zero.Init, engine.config as the config dict (the Trainer's save reads
    engine.config.get("zero_optimization"); it was the model's), and steps_per_print infinite
    (accelerate's "never"; zinc's parser refused the Infinity json.dumps writes)."""
    import importlib
    from zinc import as_deepspeed
    as_deepspeed.install()
    eng_mod = importlib.import_module("deepspeed.runtime.engine")
    lrs = importlib.import_module("deepspeed.runtime.lr_schedules")
    utils = importlib.import_module("deepspeed.checkpoint.utils")
    pp = importlib.import_module("deepspeed.runtime.zero.partition_parameters")
    check("deepspeed.DeepSpeedEngine and deepspeed.runtime.engine.DeepSpeedEngine are the engine",
          zinc.DeepSpeedEngine is zinc.Engine and eng_mod.DeepSpeedEngine is zinc.Engine)
    check("VALID_LR_SCHEDULES holds DeepSpeed's five names",
          lrs.VALID_LR_SCHEDULES == ["LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR",
                                     "WarmupCosineLR"], f"{lrs.VALID_LR_SCHEDULES}")
    check("partition_parameters: the constructor wrapper gives the constructor back, "
          "_orig_torch_arange is torch.arange",
          pp.zero_wrapper_for_fp_tensor_constructor(torch.ones, torch.float16) is torch.ones and
          pp._orig_torch_arange is torch.arange and callable(pp.get_accelerator))
    import collections
    base = torch.arange(12.0)
    pair = collections.namedtuple("pair", "t n")
    state = {"a": base[:4].view(2, 2), "b": [base[4:6], pair(base[6:], 3)], "n": 5}
    out = utils.clone_tensors_for_torch_save(state)
    own = [out["a"], out["b"][0], out["b"][1][0]]
    check("clone_tensors_for_torch_save: equal copies, each owning only its elements, "
          "others kept, a namedtuple a plain tuple (as DeepSpeed's; it raised TypeError)",
          torch.equal(out["a"], state["a"]) and torch.equal(out["b"][1][0], base[6:]) and
          all(t.storage().size() == t.numel() for t in own) and out["b"][1][1] == 3 and
          out["n"] == 5 and type(out["b"][1]) is tuple)   # (a namedtuple made a plain tuple)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    cfg = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": float("inf"),
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 1}}
    try:
        engine, *_ = zinc.initialize(model=model, config=cfg)
    except Exception as ex:
        check("steps_per_print infinite (accelerate's never) is accepted", False, str(ex))
        return
    check("engine.config is the config dict (the Trainer's save reads it)",
          engine.config.get("zero_optimization") == {"stage": 1} and
          engine.steps_per_print() == float("inf") and isinstance(engine, eng_mod.DeepSpeedEngine),
          f"{engine.config!r}")
    engine.backward(engine(torch.randn(2, 4)).sum())
    engine.step()
    check("... and it trains", engine.global_steps == 1)
    engine.close()
    # Another nan or infinity (JSON has none) is refused naming its key; the C parser could only
    # say "malformed JSON" at a column of the text json.dumps made.
    for key, bad in (("steps_per_print", float("nan")), ("steps_per_print", float("-inf"))):
        check_raises(f"{key} {bad} refused naming the key",
                     lambda: zinc.initialize(model=torch.nn.Linear(4, 2),
                                             config=dict(cfg, **{key: bad})),
                     ValueError, f"config key {key}: {bad}")
    deep = dict(cfg, optimizer={"type": "AdamW", "params": {"lr": 1e-3,
                                                            "betas": [0.9, float("nan")]}})
    check_raises("a nan inside a list refused naming its path",
                 lambda: zinc.initialize(model=torch.nn.Linear(4, 2), config=deep),
                 ValueError, "config key optimizer.params.betas[1]: nan")


def api():
    api_accelerator()
    api_comm_before()
    api_optimizers()
    api_leaf()
    api_utils()
    api_comm_after()
    api_as_deepspeed()
    api_script_scheduler()
    api_accelerate_names()


def runs(stage, mpiexec):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(zinc.__file__)))] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    script = os.path.join(HERE, "ds_script.py")
    world = 2 if mpiexec else 1
    launch = mpiexec + ["2"] if mpiexec else []
    for opt in ("fused", "cpu"):
        results = {}
        for how, pre, extra in (("as_deepspeed", ["-m", "zinc.as_deepspeed"], []),
                                ("zinc names", [], ["--zinc-names"]),
                                ("plain zinc", [], ["--reference"])):
            with tempfile.TemporaryDirectory(prefix="zinc_ds_") as out:
                args = [script, "--stage", str(stage), "--opt", opt, "--out", out] + extra
                r = subprocess.run(launch + [sys.executable] + pre + args, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=200)
                files = []
                for rank in range(world):
                    try:
                        with open(os.path.join(out, f"rank{rank}.txt")) as f:
                            files.append(f.read().splitlines())
                    except OSError:
                        files.append([])
            ok = r.returncode == 0 and all(files)
            check(f"{opt}, {how}: ran", ok, r.stdout[-3000:])
            if not ok:
                continue
            results[how] = [[x for x in f if x.startswith("loss ")] for f in files]
            seen = [json.loads(f[-1][len("seen "):]) for f in files]
            n = world
            want = [{"argv": args, "name": "__main__", "initialized": True, "rank": r,
                     "world": n, "local_rank": r, "all_reduce": n * (n + 1) / 2,
                     "broadcast": 5.0, "all_gather": [float(i) for i in range(n)],
                     "device": "cpu", "on_accelerator": True, "status": [1, 2],
                     "optimizer": {("fused", True): "adamw", ("cpu", True): "adam",
                                   ("fused", False): "FusedAdam",
                                   ("cpu", False): "DeepSpeedCPUAdam"}[opt, how == "plain zinc"]}
                    for r in range(n)]
            check(f"{opt}, {how}: argv, __name__, comm and optimizer as the script saw them",
                  seen == want, f"{seen} != {want}")
        if len(results) == 3:
            ref = results["plain zinc"]
            check(f"{opt}: 7 losses per rank", all(len(x) == 7 for x in ref), str(ref))
            for how in ("as_deepspeed", "zinc names"):
                check(f"{opt}, {how}: losses equal plain zinc's, bit for bit",
                      results[how] == ref, f"{results[how]} vs {ref}")


def main():
    if sys.argv[1] == "api":
        api()
    elif sys.argv[1] == "runs":
        runs(int(sys.argv[2]), sys.argv[3:])
    print("PASS" if not failures else f"FAIL: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
