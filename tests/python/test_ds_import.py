"""test_ds_import.py — DeepSpeed checkpoints loaded by zinc without DeepSpeed.

    python test_ds_import.py load NAME STAGE [bf16]   (world 1, or mpirun -np N): zinc at ZeRO
        STAGE loads ds_fixtures/NAME/ckpt (written by DeepSpeed 0.19.8, 2 ranks; tag None
        through DeepSpeed's `latest`) and must hold what DeepSpeed held at the save, as
        NAME/expected.json recorded it from DeepSpeed's own objects: every parameter's fp32
        master, exp_avg and exp_avg_sq (bitwise), global_steps, global_samples, skipped_steps,
        the lr, the loss scale, the buffer, client_state. Then it trains the 3 steps DeepSpeed
        trained after the save on the same data and must reach DeepSpeed's fp32 master
        weights: relative 1e-6 of each tensor's largest value in fp32 (measured: at most
        1.7e-7), 2^-8 in bf16 — one bf16 rounding step at that largest value: the 16-bit
        forward and backward round differently, and 3 steps moved it less than one step
        (measured: at most 2.6e-3; figures in docs/deepspeed-checkpoints.md). s2_fp16 (fp16,
        DeepSpeed's fp16 check overridden on the CPU: make_fixtures.py) checks the same at the
        load and the loss scaler's hysteresis, cur_iter and last_overflow_iter; its 3 steps
        after run only where torch has CPU fp16 matmul (not 1.13) and must reach DeepSpeed's
        own weights from the same steps within 2^-11 (fp16's rounding step, as bf16's above;
        measured 1.7e-5 at 1 rank, 1.9e-7 at 2, torch 2.15): zinc unscales with the grown
        loss scale on the step that grows it, as DeepSpeed does. DeepSpeed's run with that
        one order changed (unscale, then update) is 8.8e-3 away: the test checks that the
        bound tells the two apart, and prints zinc's distance from it.
    python test_ds_import.py refuse DIR      what zinc cannot carry is refused by name before
        the engine changes: a tensor-parallel rank's file, a pipeline layer file, an expert
        file, another optimizer's type, a rank's file missing; a folder that is no checkpoint
        raises. And zinc_engine_set_train_state (how the import sets the counters and the
        fp16 loss scaler) refuses out-of-range fields by name, and a save keeps what it set;
        a DynamicLossScaler pickled under DeepSpeed's module path (made here: no fp16
        fixture exists) reaches an fp16 engine's scaler, fields and all.
        Refusals told by a key inside a file (refused_keys: a copy of a fixture with one key
        edited): tp_degree, pp_degree, mp_world_size above 1, an expert parameter in the
        module, another optimizer's state keys in one rank's file, Adam step counts that
        differ between param groups; each error names the key and the value refused.
    python test_ds_import.py reads DIR   every file of a checkpoint read once by
        read_deepspeed_checkpoint and by from_deepspeed's convert, which holds one copy of
        the state at a time (counted: torch.load calls, live DeepSpeedState objects).
    python test_ds_import.py export NAME DIR STAGE   from_deepspeed, then python -m
        zinc.utils.to_deepspeed: the universal checkpoint it writes holds DeepSpeed's values
        bitwise (read back by ds_checkpoint's universal reader, which the fixtures DeepSpeed's
        ds_to_universal wrote check), its step, counters, scheduler position and client_state;
        a zinc engine at STAGE resumes it and trains on to DeepSpeed's later weights (as load).
    python test_ds_import.py convert NAME DIR ZINC_CLI   python -m zinc.utils.from_deepspeed
        writes a zinc checkpoint that `zinc ckpt verify` passes and that a zinc engine (and
        zinc.utils.zero_to_fp32) loads with the same values.
Exit 77 when torch is not importable; 1 when a check fails.
"""
import json
import os
import shutil
import subprocess
import sys
import warnings

from _common import check, check_raises, finish, torch, zinc

HERE = os.path.dirname(os.path.abspath(__file__))
# ZINC_DS_FIXTURES: another folder of fixtures (bench/ds_ckpt_roundtrip.py's, fresh from
# DeepSpeed); the model's definition always comes from this checkout's make_fixtures.py.
FIXTURES = os.environ.get("ZINC_DS_FIXTURES") or os.path.join(HERE, "ds_fixtures")
sys.path.insert(0, os.path.join(HERE, "ds_fixtures"))
import make_fixtures  # noqa: E402  (the model's definition; it imports no DeepSpeed at the top)

from zinc.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state  # noqa: E402
from zinc._lib import lib  # noqa: E402
from zinc.utils.ds_checkpoint import (DeepSpeedCheckpointError,  # noqa: E402
                                      read_deepspeed_checkpoint)


def expected(name, root=None):
    with open(os.path.join(root or FIXTURES, name, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def zinc_config(want, stage, world):
    """DeepSpeed's config of the fixture at zinc's stage and world size: the same global
    batch (DeepSpeed's 2 ranks x micro batch) split over zinc's ranks."""
    cfg = json.loads(json.dumps(want["config"]))
    cfg["zero_optimization"] = {"stage": stage}
    cfg["train_micro_batch_size_per_gpu"] = 2 * want["micro_batch"] // world
    cfg["optimizer"]["params"].pop("torch_adam", None)
    cfg.pop("data_types", None)
    return cfg


def engine_for(want, stage):
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.manual_seed(1)     # not DeepSpeed's initial weights: the load must replace them
    model = make_fixtures.net(torch)
    for n, p in model.named_parameters():     # frozen as in DeepSpeed's run
        p.requires_grad_(n not in want.get("frozen", {}))
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(want["dtype"][:4])
    if low is not None:
        model = model.to(low)
        model.shift.data = model.shift.data.float()
    # the fixture's param groups (its GROUPS: with other decays here, which the load replaces
    # with the checkpoint's, as DeepSpeed's load does)
    groups = [p for p in model.parameters() if p.requires_grad]
    if want.get("groups"):
        first, _ = want["groups"]
        groups = [{"params": [p for n, p in model.named_parameters() if n in first]},
                  {"params": [p for n, p in model.named_parameters() if n not in first],
                   "weight_decay": 0.3}]
    engine, *_ = zinc.initialize(model=model, model_parameters=groups,
                                 config=zinc_config(want, stage, world))
    return engine, model, world


def bitwise(got, want):
    return torch.equal(got.detach().float().flatten(), torch.tensor(want, dtype=torch.float32))


def load(name, stage, root=None):
    """root/name/ckpt (root: the fixtures) against root/name/expected.json."""
    root = root or FIXTURES
    want = expected(name, root)
    engine, model, world = engine_for(want, stage)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path, client = engine.load_checkpoint(os.path.join(root, name, "ckpt"))
    other_schedule = [str(w.message) for w in caught
                      if "DeepSpeed's run had the scheduler" in str(w.message)]
    tag = f"{name} at zinc stage {stage}, {world} rank(s)"
    before = want.get("steps_before", 3)    # 0: saved before Adam's first step (no state)
    check(f"{tag}: loaded the tag `latest` (or `latest_universal`) names",
          os.path.basename(path).startswith(f"global_step{before}"), path)
    for key, get in (("master", safe_get_full_fp32_param),
                     ("exp_avg", lambda p: safe_get_full_optimizer_state(p, "exp_avg")),
                     ("exp_avg_sq", lambda p: safe_get_full_optimizer_state(p, "exp_avg_sq"))):
        bad = [n for n, p in model.named_parameters()    # (moments unrecorded: see the fixture)
               if p.requires_grad and n in want[key] and not bitwise(get(p), want[key][n])]
        check(f"{tag}: {key} of every parameter bitwise DeepSpeed's", not bad, f"{bad}")
    # a frozen parameter's value (at stage 3 in pieces over the ranks' model states files)
    for n, value in want.get("frozen", {}).items():
        p = dict(model.named_parameters())[n]
        with zinc.zero.GatheredParameters([p]):
            same = bitwise(p, value)
        check(f"{tag}: frozen {n} bitwise DeepSpeed's", same)
    check(f"{tag}: the buffer", bitwise(model.shift, want["buffers"]["shift"]))
    check(f"{tag}: no word of another scheduler (zinc's config has the checkpoint's)",
          not other_schedule, f"{other_schedule}")
    for key in ("global_steps", "global_samples", "skipped_steps"):
        check(f"{tag}: {key}", getattr(engine, key) == want[key],
              f"{getattr(engine, key)} != {want[key]}")
    check(f"{tag}: client_state", client.get("epoch") == 7 and client.get("note") == "client",
          f"{client}")
    scale = float(engine.optimizer.cur_scale)
    check(f"{tag}: loss scale", scale == want["loss_scale"], f"{scale} != {want['loss_scale']}")
    # DeepSpeed's applied steps; its Adam count leads them by one after its 16-bit stage-0
    # optimizers' step on zero gradients at construction (s0_bf16), which zinc carries as
    # Adam's lead (zinc_engine_set_adam_lead) instead of taking Adam's count for both.
    applied = want["global_steps"] - want["skipped_steps"]
    lead = want["adam_step"] - applied
    check(f"{tag}: Adam's lead is DeepSpeed's Adam count less its applied steps ({lead})",
          lead in (0, 1) and lib.zinc_engine_adam_lead(engine._e) == lead,
          f"{lib.zinc_engine_adam_lead(engine._e)}")
    sched = want.get("lr_scheduler")
    at = sched.get("last_batch_iteration") if isinstance(sched, dict) else None
    # the schedule resumes where DeepSpeed's scheduler was saved (_ds_import._sched_of)
    position = engine.lr_scheduler.last_batch_iteration if engine.lr_scheduler else None
    check(f"{tag}: the schedule's position is DeepSpeed's scheduler's ({at})",
          at is None or position is None or position == at, f"{position}")
    if want["dtype"] == "fp16" and world == 1:      # (a save to one folder of its own)
        fp16_fields(tag, engine, os.path.join(root, name, "ckpt"))
    lr = engine.get_lr()[0]
    check(f"{tag}: lr {lr} is DeepSpeed's {want['lr']}",
          abs(lr - want["lr"]) <= 1e-12 * abs(want["lr"]))
    if want["dtype"] == "fp16" and not cpu_fp16_matmul():
        print(f"note {tag}: this torch ({torch.__version__}) has no fp16 matmul on the CPU, so "
              "the 3 steps after the load are not run (docs/deepspeed-checkpoints.md)")
        return 0
    # The 3 steps DeepSpeed trained after its save, on the same global batches.
    train(engine, model, want, world, want["data"][before:before + 3])
    tol = {"fp32": 1e-6, "fp16": 2.0 ** -11}.get(want["dtype"], 2.0 ** -8)
    got = {n: safe_get_full_fp32_param(p).float().flatten() for n, p in model.named_parameters()
           if p.requires_grad}
    worst = distance(got, want["continued"])
    what = "DeepSpeed's weights"
    if want["dtype"] == "fp16":
        # DeepSpeed 0.19.8 updates its loss scale before it unscales (stage_1_and_2.py step()):
        # step 5 here grows the scale 512 -> 1024 and DeepSpeed divides gradients made at 512
        # by 1024; zinc does the same (engine/step.c). make_fixtures.py also records DeepSpeed's
        # run with that one order changed: its distance from the real one (8.8e-3) shows the
        # bound tells the two orders apart, so an engine unscaling with the old scale fails.
        order = distance(want["continued_unscale_before_update"], want["continued"])
        check(f"{tag}: the bound {tol:g} tells DeepSpeed's two orders apart ({order:.2e})",
              order > 4 * tol)
        print(f"note {tag}: fp16, 3 more steps land "
              f"{distance(got, want['continued_unscale_before_update']):.2e} from the run that "
              "unscales with the scale backward used")
    check(f"{tag}: 3 more steps reach {what} (worst {worst:.2e} of a tensor's largest value, "
          f"bound {tol:g})", worst <= tol)
    check(f"{tag}: lr after them is DeepSpeed's", abs(engine.get_lr()[0] - want["continued_lr"])
          <= 1e-12 * want["continued_lr"], f"{engine.get_lr()[0]} != {want['continued_lr']}")
    return 0


def train(engine, model, want, world, data):
    """One optimizer step per global batch of data, this rank's rows of each."""
    rank, cast = engine.global_rank, next(model.parameters()).dtype
    per = 2 * want["micro_batch"] // world
    for x, y in data:
        x = torch.tensor(x)[rank * per:(rank + 1) * per]
        y = torch.tensor(y)[rank * per:(rank + 1) * per]
        loss = torch.nn.functional.mse_loss(engine(x.to(cast)).float(), y)
        engine.backward(loss)
        engine.step()


def distance(got, want):
    """The largest over tensors of max |got - want| / max |want|: {name: values} each."""
    worst = 0.0
    for n, ref in want.items():
        ref = torch.tensor(ref)
        g = got[n] if torch.is_tensor(got[n]) else torch.tensor(got[n])
        worst = max(worst, ((g - ref).abs().max() / ref.abs().max()).item())
    return worst


def cpu_fp16_matmul():
    """Whether torch multiplies fp16 matrices on the CPU (torch 1.13: "addmm_impl_cpu_" not
    implemented for 'Half')."""
    try:
        torch.ones(2, 2, dtype=torch.float16) @ torch.ones(2, 2, dtype=torch.float16)
        return True
    except RuntimeError:
        return False


def fp16_fields(tag, engine, ckpt):
    """The fp16 loss scaler's fields beyond the scale, against the DynamicLossScaler DeepSpeed
    pickled into rank 0's optimizer file: a zinc save right after the load keeps them."""
    import tempfile
    from zinc.utils import _ds_pickle
    f = os.path.join(ckpt, "global_step3", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    ds = _ds_pickle.load_file(f)["optimizer_state_dict"]["loss_scaler"]
    with tempfile.TemporaryDirectory() as d:
        engine.save_checkpoint(d, tag="t")
        with open(os.path.join(d, "t", "manifest.json"), encoding="utf-8") as fh:
            sc = json.load(fh)["engine_state"]["loss_scaler"]
    got = (sc["cur_scale"], sc["cur_hysteresis"], sc["cur_iter"], sc["last_overflow_iter"])
    want = (ds.cur_scale, ds.cur_hysteresis, ds.cur_iter, ds.last_overflow_iter)
    check(f"{tag}: the loss scaler's scale, hysteresis, cur_iter, last_overflow_iter are "
          f"DeepSpeed's {want}", got == want and ds.cur_scale != 2 ** 8, f"{got}")


def copy_of(src, tmp, name):
    """A fresh copy of the checkpoint folder src as tmp/name."""
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    return d


def refuse(tmp):
    """Each thing zinc cannot carry, added to a copy of a fixture: refused naming it, with the
    engine's weights unchanged."""
    want = expected("s2_fp32")
    engine, model, _ = engine_for(want, 2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    src = os.path.join(FIXTURES, "s2_fp32", "ckpt")
    # A stage-0 checkpoint of two param groups names its parameters only by the order of the
    # groups: from_deepspeed (no engine to give it) refuses it, saying why; the module's order
    # gave the first group's state to the wrong parameters (a shape error, or silently)
    r = subprocess.run([sys.executable, "-m", "zinc.utils.from_deepspeed",
                        os.path.join(FIXTURES, "s0_fp32_groups", "ckpt"),
                        os.path.join(tmp, "s0_groups_zinc")],
                       env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python")),
                       capture_output=True, text=True)
    check("from_deepspeed of a stage-0 checkpoint of 2 param groups refused naming why",
          r.returncode == 1 and "2 param groups" in r.stderr and "same param groups" in r.stderr
          and not os.path.exists(os.path.join(tmp, "s0_groups_zinc")), r.stderr[-500:])
    cases = [("mp_rank_01_model_states.pt", "tensor parallelism"),
             ("layer_01-model_00-model_states.pt", "pipeline parallelism"),
             ("expert_0_mp_rank_00_model_states.pt", "mixture of experts"),
             # DeepSpeed 0.19.8's own name of an expert's file (its _get_expert_ckpt_name): was
             # refused as a pipeline stage's layer file
             ("layer_0_expert_0_mp_rank_00_model_states.pt", "mixture of experts")]
    for extra, why in cases:
        d = os.path.join(tmp, extra.split(".")[0])
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        shutil.copy(os.path.join(d, "global_step3", "mp_rank_00_model_states.pt"),
                    os.path.join(d, "global_step3", extra))
        check_raises(f"refused: {why}", lambda: engine.load_checkpoint(d),
                     DeepSpeedCheckpointError, extra, why)
    # Another optimizer: the config's type says so (before any tensor is read).
    d = os.path.join(tmp, "sgd")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    f = os.path.join(d, "global_step3", "mp_rank_00_model_states.pt")
    from zinc.utils import _ds_pickle
    sd = _ds_pickle.load_file(f)
    sd["ds_config"]["optimizer"]["type"] = "SGD"
    torch.save(sd, f)
    check_raises("refused: another optimizer", lambda: engine.load_checkpoint(d),
                 DeepSpeedCheckpointError, "'SGD'", "mp_rank_00_model_states.pt")
    # Bytes flipped inside a tensor of a file torch still reads (its zip reader checks no
    # CRC-32): refused naming the file and the entry (it loaded the other values in silence).
    for fname in ("zero_pp_rank_0_mp_rank_00_optim_states.pt", "mp_rank_00_model_states.pt"):
        d = os.path.join(tmp, "flipped")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        f = os.path.join(d, "global_step3", fname)
        with open(f, "r+b") as fh:
            data = bytearray(fh.read())
            for i in range(len(data) // 2, len(data) // 2 + 64):
                data[i] ^= 0xFF
            fh.seek(0)
            fh.write(bytes(data))
        before_load = {n: p.detach().clone() for n, p in model.named_parameters()}
        check_raises(f"refused: bytes flipped inside {fname}", lambda: engine.load_checkpoint(d),
                     DeepSpeedCheckpointError, fname, "CRC-32")
        check("... the weights left alone", all(torch.equal(p.detach(), before_load[n])
                                                for n, p in model.named_parameters()))
    # A rank's optimizer file missing.
    d = os.path.join(tmp, "lost")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    os.remove(os.path.join(d, "global_step3", "zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    check_raises("refused: a rank's file missing", lambda: engine.load_checkpoint(d),
                 DeepSpeedCheckpointError, "ranks [0]")
    # ... the last rank's: named (it was "the flat partitions hold 112 elements, ... needs")
    d = copy_of(src, tmp, "lost_last")
    os.remove(os.path.join(d, "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"))
    check_raises("refused: the last rank's file missing, named", lambda: engine.load_checkpoint(d),
                 DeepSpeedCheckpointError, "zero_pp_rank_1_mp_rank_00_optim_states.pt and on "
                 "are missing")
    # A damaged file is named (torch's errors name none: "failed reading zip archive")
    d = copy_of(src, tmp, "truncated")
    f = os.path.join(d, "global_step3", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) // 2)
    check_raises("refused: a truncated file, named", lambda: engine.load_checkpoint(d),
                 DeepSpeedCheckpointError, "zero_pp_rank_0_mp_rank_00_optim_states.pt: not a "
                 "readable torch file")
    # ... cut near its end, where torch's zip reader raises an OSError naming no file ("[Errno
    # 22] Invalid argument"; it went through as that bare OSError, not a ValueError)
    d = copy_of(src, tmp, "truncated_end")
    f = os.path.join(d, "global_step3", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) - 64)
    check_raises("refused: a file cut near its end, named", lambda: engine.load_checkpoint(d),
                 DeepSpeedCheckpointError, "zero_pp_rank_0_mp_rank_00_optim_states.pt: not a "
                 "readable torch file")
    # ... but a client_state class this process cannot import is no damage: its ImportError
    import types
    from zinc.utils import _ds_pickle
    mod = types.ModuleType("zinc_test_usermod")

    class Client:
        pass
    Client.__module__, Client.__qualname__ = mod.__name__, "Client"
    mod.Client = Client
    sys.modules[mod.__name__] = mod
    f = os.path.join(tmp, "client.pt")
    torch.save({"client": Client()}, f)
    del sys.modules[mod.__name__]
    check_raises("a client class that cannot be imported: its ImportError, not 'damaged'",
                 lambda: _ds_pickle.load_file(f), ImportError, "zinc_test_usermod")
    # `latest` naming a tag that is not there, empty, or absent: said, with the tags there (it
    # was zinc's "none of its directories holds a manifest.json")
    for case, text, want_msg in (("latest_missing", "global_step99", "names 'global_step99'"),
                                 ("latest_empty", "", "it is empty"),
                                 ("latest_absent", None, "no `latest` file")):
        d = copy_of(src, tmp, case)
        if text is None:
            os.remove(os.path.join(d, "latest"))
        else:
            with open(os.path.join(d, "latest"), "w", encoding="utf-8") as fh:
                fh.write(text)
        check_raises(f"refused: {case}, the tags there listed",
                     lambda: engine.load_checkpoint(d), DeepSpeedCheckpointError, want_msg,
                     "DeepSpeed tags here: global_step3")
    refused_keys(tmp, engine)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    check("nothing changed by a refused load", not changed, f"{changed}")
    check_raises("a folder that is no checkpoint", lambda: read_deepspeed_checkpoint(tmp),
                 FileNotFoundError, "not a DeepSpeed checkpoint")
    train_state(tmp)
    fp16_scaler(tmp)
    # zinc's config with another scheduler section than the checkpoint's: said (the run went
    # on with zinc's schedule silently)
    other = json.loads(json.dumps(want))
    other["config"]["scheduler"]["params"]["warmup_num_steps"] = 20
    engine2, _, _ = engine_for(other, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine2.load_checkpoint(src)
    said = [str(w.message) for w in caught if "DeepSpeed's run had the scheduler" in
            str(w.message)]
    check("another scheduler section than the checkpoint's is said", len(said) == 1, f"{said}")
    engine2.close()
    return 0


def edited(tmp, case, fixture, edits):
    """A copy of ds_fixtures/fixture/ckpt in tmp/case with edits applied: {file in the tag
    folder: fn(its torch.load'ed dict)}, each file saved back with torch.save."""
    from zinc.utils import _ds_pickle
    d = os.path.join(tmp, case)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(FIXTURES, fixture, "ckpt"), d)
    for name, fn in edits.items():
        f = os.path.join(d, "global_step3", name)
        sd = _ds_pickle.load_file(f)
        fn(sd)
        torch.save(sd, f)
    return d


def refused_keys(tmp, engine):
    """Refusals told by keys inside the files, not by file names: each case edits one key of a
    copy of a fixture, and the error must name the key (and the value that is refused)."""
    states = "mp_rank_00_model_states.pt"
    rank1 = "zero_pp_rank_1_mp_rank_00_optim_states.pt"

    def dims(key):
        return lambda sd: sd["checkpoint_parallel_dimensions"].update({key: 2})

    def expert(sd):
        sd["module"]["moe.experts.0.weight"] = torch.zeros(3)

    def sgd_state(sd):
        # rank 1's state of group 0 as torch's SGD with momentum keeps it
        osd = sd["optimizer_state_dict"]
        base = osd["base_optimizer_state"]
        st = base["state"][0] if isinstance(base, dict) else base[0]
        st["momentum_buffer"] = st.pop("exp_avg")
        del st["exp_avg_sq"]
        # DeepSpeed's pickled objects are stand-ins here, which torch.save cannot write back;
        # the reader takes the scaler and the stage from rank 0's file.
        osd["zero_stage"] = 2
        for key in ("loss_scaler", "param_slice_mappings"):
            osd.pop(key, None)

    def two_groups(sd):
        # stage 0's torch optimizer split in two param groups, the second one step ahead
        opt = sd["optimizer"]
        g0 = opt["param_groups"][0]
        g1 = dict(g0, params=g0["params"][3:])
        g0["params"] = g0["params"][:3]
        opt["param_groups"].append(g1)
        for i in g1["params"]:
            opt["state"][i]["step"] = opt["state"][i]["step"] + 1

    cases = [("tp_degree", "s2_fp32", {states: dims("tp_degree")},
              [states, "tp_degree 2", "tensor parallelism"]),
             ("pp_degree", "s2_fp32", {states: dims("pp_degree")},
              [states, "pp_degree 2", "pipeline parallelism"]),
             ("mp_world_size", "s2_fp32", {states: lambda sd: sd.update(mp_world_size=2)},
              [states, "mp_world_size 2", "tensor parallelism"]),
             ("expert_keys", "s2_fp32", {states: expert},
              [states, "moe.experts.0.weight", "mixture of experts"]),
             ("sgd_state", "s2_fp32", {rank1: sgd_state},
              [rank1, "momentum_buffer", "not Adam's"]),
             ("group_steps", "s0_fp32", {states: two_groups},
              [states, "3 at group 0", "4 at group 1", "differ between parameter groups"])]
    for case, fixture, edits, names in cases:
        d = edited(tmp, case, fixture, edits)
        check_raises(f"refused by key: {case} (the error names {names})",
                     lambda: engine.load_checkpoint(d), DeepSpeedCheckpointError, *names)


def read_once(tmp):
    """Every file of a DeepSpeed checkpoint is read once: by read_deepspeed_checkpoint (rank
    0's optimizer file was read a second time to tell the layout), and by from_deepspeed's
    convert, which read the whole folder, then had engine.load_checkpoint read it again while
    the first copy was still held. Counted by wrapping _ds_pickle.load_file (every torch.load
    of the reader goes through it); the copies held at once by counting the live
    DeepSpeedState objects (weakly) at each file read."""
    import collections
    import weakref
    from zinc.utils import _ds_pickle, ds_checkpoint, from_deepspeed
    reads = collections.Counter()
    live = weakref.WeakSet()
    most = [0]
    load_file, init = _ds_pickle.load_file, ds_checkpoint.DeepSpeedState.__init__

    def counted(path):
        reads[os.path.relpath(path, FIXTURES)] += 1
        most[0] = max(most[0], len(live))
        return load_file(path)

    def tracked(self):
        init(self)
        live.add(self)
    _ds_pickle.load_file, ds_checkpoint.DeepSpeedState.__init__ = counted, tracked
    try:
        for name in ("s0_bf16", "s1_fp32", "s1_bf16_fp32acc", "s2_bf16", "s3_fp32", "u2_fp32"):
            reads.clear()
            read_deepspeed_checkpoint(os.path.join(FIXTURES, name, "ckpt"))
            twice = {f: n for f, n in reads.items() if n != 1}
            check(f"read_deepspeed_checkpoint({name}): each of its {len(reads)} files read "
                  "once", reads and not twice, f"{twice}")
        for name in ("s2_fp32", "s3_bf16"):
            reads.clear()
            most[0] = 0
            from_deepspeed.convert(os.path.join(FIXTURES, name, "ckpt"),
                                   os.path.join(tmp, name))
            twice = {f: n for f, n in reads.items() if n != 1}
            check(f"from_deepspeed {name}: each of its {len(reads)} files read once",
                  reads and not twice, f"{twice}")
            check(f"from_deepspeed {name}: one copy of the checkpoint's state held at a time",
                  most[0] == 1, f"{most[0]} DeepSpeedState objects alive at once")
    finally:
        _ds_pickle.load_file, ds_checkpoint.DeepSpeedState.__init__ = load_file, init
    ds = read_deepspeed_checkpoint(os.path.join(FIXTURES, "s2_fp32", "ckpt"))
    held = sum(t.numel() * t.element_size() for store in (ds.master, ds.exp_avg, ds.exp_avg_sq,
                                                          ds.module) for t in store.values())
    print(f"note: a DeepSpeedState of s2_fp32 holds {held} bytes of tensors (12 bytes a "
          "trained parameter and the module state); from_deepspeed held two of them during "
          "its load, now one")


def fp16_scaler(tmp):
    """DeepSpeed's fp16 loss scaler carried into an fp16 engine. No fixture has one (DeepSpeed's
    CPU accelerator refuses fp16 training), so this one is made here: the s2_fp32 fixture with
    fp16 enabled in its config and, in its optimizer files, a DynamicLossScaler pickled under
    DeepSpeed's module path (a class registered there only while saving), which the load must
    read without deepspeed. Checks the mapping of its fields, not DeepSpeed's arithmetic."""
    import types
    from zinc.utils import _ds_pickle
    d = os.path.join(tmp, "fp16")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(FIXTURES, "s2_fp32", "ckpt"), d)
    step_dir = os.path.join(d, "global_step3")
    mod_name = "deepspeed.runtime.fp16.loss_scaler"
    fake = types.ModuleType(mod_name)

    class DynamicLossScaler:
        pass
    DynamicLossScaler.__module__ = mod_name
    DynamicLossScaler.__qualname__ = "DynamicLossScaler"
    fake.DynamicLossScaler = DynamicLossScaler
    parts = mod_name.split(".")
    added = [".".join(parts[:i + 1]) for i in range(len(parts))
             if ".".join(parts[:i + 1]) not in sys.modules]
    files = [os.path.join(step_dir, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
             for r in (0, 1)]
    states = [_ds_pickle.load_file(f) for f in files]   # before the fake module exists
    try:
        for name in added:
            sys.modules[name] = fake if name == mod_name else types.ModuleType(name)
        for f, sd in zip(files, states):
            osd = sd["optimizer_state_dict"]
            scaler = DynamicLossScaler()
            scaler.__dict__.update(cur_scale=1024.0, cur_iter=9, last_overflow_iter=3,
                                   scale_factor=2.0, scale_window=1000, min_scale=1,
                                   delayed_shift=2, cur_hysteresis=1,
                                   consecutive_hysteresis=False, dynamic=True)
            osd["loss_scaler"] = scaler
            osd["dynamic_loss_scale"] = True
            osd["zero_stage"] = 2             # the stand-ins cannot be pickled again
            osd.pop("param_slice_mappings", None)
            torch.save(sd, f)
    finally:
        for name in added:
            del sys.modules[name]
    f = os.path.join(step_dir, "mp_rank_00_model_states.pt")
    sd = _ds_pickle.load_file(f)
    sd["ds_config"]["fp16"] = {"enabled": True, "loss_scale": 0, "hysteresis": 2}
    torch.save(sd, f)
    want = expected("s2_fp32")
    cfg = zinc_config(want, 1, 1)
    cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 8, "hysteresis": 2}
    model = make_fixtures.net(torch).half()
    model.shift.data = model.shift.data.float()
    engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    engine.load_checkpoint(d)
    bad = [n for n, p in model.named_parameters()
           if not bitwise(safe_get_full_fp32_param(p), want["master"][n])]
    check("fp16: DeepSpeed's fp32 master into an fp16 engine", not bad, f"{bad}")
    check("fp16: the loss scale is the checkpoint's DynamicLossScaler's",
          float(engine.optimizer.cur_scale) == 1024.0, f"{engine.optimizer.cur_scale}")
    out = os.path.join(tmp, "fp16_zinc")
    engine.save_checkpoint(out, tag="t")
    with open(os.path.join(out, "t", "manifest.json"), encoding="utf-8") as f:
        sc = json.load(f)["engine_state"]["loss_scaler"]
    check("fp16: its hysteresis, cur_iter, last_overflow_iter are the engine's (a save keeps "
          "them)", (sc["cur_scale"], sc["cur_hysteresis"], sc["cur_iter"],
                    sc["last_overflow_iter"]) == (1024, 1, 9, 3), f"{sc}")


def train_state(tmp):
    """zinc_engine_set_train_state (the import's way into the engine's counters and fp16 loss
    scaler): out-of-range values are refused naming the field, with nothing changed; values in
    range are the engine's, and a zinc checkpoint saved then keeps them."""
    import ctypes
    from zinc._lib import TrainState, ZincError, lib
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
                                                             "params": {"lr": 1e-3}},
           "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 8,
                    "hysteresis": 2}, "zero_optimization": {"stage": 2}}
    model = make_fixtures.net(torch).half()
    engine, *_ = zinc.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    def put(**kw):
        st = dict(applied=5, skipped=1, scaler_scale=1024.0, scaler_hysteresis=1,
                  scaler_iter=9, scaler_last_overflow_iter=3)
        st.update(kw)
        engine._call(lib.zinc_engine_set_train_state(engine._e, ctypes.byref(TrainState(**st))))

    for field, bad in (("applied", -1), ("skipped", 2 ** 60), ("scaler_scale", float("inf")),
                       ("scaler_hysteresis", 3), ("scaler_last_overflow_iter", 10)):
        check_raises(f"set_train_state refuses {field}={bad}", lambda: put(**{field: bad}),
                     ZincError, field)
    check("nothing set by a refused call", float(engine.optimizer.cur_scale) == 256.0,
          f"{engine.optimizer.cur_scale}")
    put()
    applied, skipped = ctypes.c_int64(), ctypes.c_int64()
    lib.zinc_engine_steps.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                      ctypes.POINTER(ctypes.c_int64)]
    lib.zinc_engine_steps(engine._e, ctypes.byref(applied), ctypes.byref(skipped))
    check("set_train_state: counters and scale are the engine's",
          (applied.value, skipped.value, float(engine.optimizer.cur_scale)) == (5, 1, 1024.0),
          f"{applied.value, skipped.value, engine.optimizer.cur_scale}")
    d = os.path.join(tmp, "zinc_state")
    engine.save_checkpoint(d, tag="t")
    with open(os.path.join(d, "t", "manifest.json"), encoding="utf-8") as f:
        es = json.load(f)["engine_state"]
    sc = es["loss_scaler"]
    check("a zinc checkpoint saved after it keeps them",
          (es["step"], es["skipped"], sc["cur_scale"], sc["cur_hysteresis"], sc["cur_iter"],
           sc["last_overflow_iter"]) == (5, 1, 1024, 1, 9, 3), f"{es}")


class Halving:
    """A client scheduler that halves the lr after each step and whose state_dict is that of
    DeepSpeed's schedulers (the fixture's WarmupLR): {"last_batch_iteration": N}."""

    def __init__(self, opt):
        self.opt, self.last_batch_iteration = opt, -1

    def step(self):
        self.last_batch_iteration += 1
        for g in self.opt.param_groups:
            g["lr"] = g["lr"] / 2

    def state_dict(self):
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, sd):
        self.last_batch_iteration = sd["last_batch_iteration"]


def groups():
    """DeepSpeed's load gives its optimizer's param groups the checkpoint's lr, betas, eps and
    weight decay (s2_fp32: lr 0.00477 at the save, betas 0.9/0.95, decay 0.01), and its next
    step runs on them. zinc's run here has other values in its config and a client scheduler
    (or none): the groups show and the first step applies the checkpoint's (it applied the
    config's lr 1e-3 and betas: another run than DeepSpeed's). A checkpoint of one group into
    an optimizer of two is refused before anything is written, as torch's load_state_dict."""
    want = expected("s2_fp32")
    from zinc._lib import lib
    for client in (True, False):
        torch.manual_seed(1)
        model = make_fixtures.net(torch)
        cfg = zinc_config(want, 2, 1)
        cfg.pop("scheduler")
        cfg["optimizer"]["params"].update(lr=1e-3, betas=[0.8, 0.99], weight_decay=0.5)
        opt = sched = None
        if client:
            cfg.pop("optimizer")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.99),
                                    weight_decay=0.5)
            sched = Halving(opt)
        engine, *_ = zinc.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=cfg)
        engine.load_checkpoint(os.path.join(FIXTURES, "s2_fp32", "ckpt"))
        g = engine.optimizer.param_groups[0]
        tag = "a client scheduler" if client else "no scheduler"
        check(f"{tag}: the groups show the checkpoint's lr, betas, weight decay",
              (engine.get_lr()[0], tuple(g["betas"]), g["weight_decay"]) ==
              (want["lr"], (0.9, 0.95), 0.01), f"{engine.get_lr()[0]} {g}")
        train(engine, model, want, 1, want["data"][3:4])
        check(f"{tag}: the first step after the load applied the checkpoint's lr",
              lib.zinc_engine_lr(engine._e) == want["lr"], f"{lib.zinc_engine_lr(engine._e)}")
    torch.manual_seed(1)
    model = make_fixtures.net(torch)
    two = [{"params": [model.fc1.weight, model.fc2.weight]},
           {"params": [p for n, p in model.named_parameters() if n not in
                       ("fc1.weight", "fc2.weight")], "weight_decay": 0.0}]
    engine, *_ = zinc.initialize(model=model, model_parameters=two,
                                 config=zinc_config(want, 2, 1))
    before = safe_get_full_fp32_param(model.fc1.weight).clone()
    check_raises("a one-group checkpoint into two groups",
                 lambda: engine.load_checkpoint(os.path.join(FIXTURES, "s2_fp32", "ckpt")),
                 ValueError, "param groups")
    check("... left the weights alone",
          torch.equal(safe_get_full_fp32_param(model.fc1.weight), before))


def cross_precision():
    """A 16-bit DeepSpeed checkpoint loaded into an engine of another precision: with
    load_module_only or load_optimizer_states=False, DeepSpeed 0.19.8 puts the module state's
    16-bit weights into the model (cast to its dtype) and makes each fp32 master from them
    (engine.py: load_module_state_dict, then the refresh): the master is the saved 16-bit
    weight, in the loading engine's dtype (measured by a reviewer in DeepSpeed, bf16 into fp32
    at stage 2). The full load takes the checkpoint's fp32 master. zinc before 2026-12-01 took
    the fp32 master into an fp32 engine there (one bf16 rounding off) and rounded it straight to
    bf16 from an fp16 checkpoint (DeepSpeed rounds the fp16 weight)."""
    for name, dtype, stage in (("s2_bf16", None, 2), ("s2_fp16", "bf16", 1)):
        want = expected(name)
        ds = read_deepspeed_checkpoint(os.path.join(FIXTURES, name, "ckpt"))
        for flags in ({"load_module_only": True}, {"load_optimizer_states": False}, {}):
            torch.manual_seed(1)
            model = make_fixtures.net(torch)
            for n, p in model.named_parameters():
                p.requires_grad_(n not in want.get("frozen", {}))
            cfg = zinc_config(want, stage, 1)
            cfg.pop("fp16", None)
            cfg.pop("bf16", None)
            if dtype:
                cfg[dtype] = {"enabled": True}
            engine, *_ = zinc.initialize(model=model, model_parameters=[
                p for p in model.parameters() if p.requires_grad], config=cfg)
            engine.load_checkpoint(os.path.join(FIXTURES, name, "ckpt"), **flags)
            low = torch.bfloat16 if dtype == "bf16" else torch.float32
            off = []
            for n, p in model.named_parameters():
                if not p.requires_grad:
                    continue
                got = safe_get_full_fp32_param(p)
                ref = (ds.master[n] if not flags else ds.module[n].to(low).float())
                if not torch.equal(got, ref):
                    off.append(n)
            what = ", ".join(f"{k}={v}" for k, v in flags.items()) or "the full load"
            check(f"{name} into {dtype or 'fp32'} at stage {stage}, {what}: every master is "
                  f"{'the fp32 master' if not flags else 'the saved 16-bit weight'}",
                  not off, f"{len(off)} not: {off[:3]}")
            engine.close()


def client_state():
    """load_checkpoint's client_state under each load flag: the keys (and their values' types)
    DeepSpeed 0.19.8's gave from the same fixtures (ds_fixtures/client_state.json, written by
    make_client_state.py): "lr_scheduler" and "optimizer" stay where their flag is False, a
    module-only load takes out only "module", a stage-0 load gives the file's "optimizer" back.
    zinc before 2026-12-01 gave the full load's keys whatever the flags (13 of 15 differ)."""
    sys.path.insert(0, FIXTURES)
    import make_client_state
    with open(os.path.join(FIXTURES, "client_state.json"), encoding="utf-8") as f:
        want = json.load(f)
    got = make_client_state.records(zinc.initialize)
    for case in sorted(want):
        check(f"{case}: client_state's keys are DeepSpeed's", got.get(case) == want[case],
              f"zinc {got.get(case)}")


def main(argv):
    mode = argv[0]
    if mode == "load":
        load(argv[1], int(argv[2]))
    elif mode == "refuse":
        os.makedirs(argv[1], exist_ok=True)
        refuse(argv[1])
    elif mode == "groups":
        groups()
    elif mode == "xprec":
        cross_precision()
    elif mode == "client":
        client_state()
    elif mode == "reads":
        shutil.rmtree(argv[1], ignore_errors=True)
        os.makedirs(argv[1])
        read_once(argv[1])
    elif mode == "convert":
        convert(argv[1], argv[2], argv[3])
    elif mode == "export":
        export(argv[1], argv[2], int(argv[3]))
    else:
        raise SystemExit(f"test_ds_import: unknown mode {mode}")
    return finish()


def convert(name, out, cli):
    """from_deepspeed, then zinc's own readers."""
    want = expected(name)
    shutil.rmtree(out, ignore_errors=True)
    # A zinc train checkpoint has no param groups for DeepSpeed (no Python record): to_deepspeed
    # refuses it, writing nothing (it exited 0 with no groups, and DeepSpeed's universal load
    # then loaded no tensor at stages 1-2 and failed at 3).
    ztrain, zout = out + "_ztrain", out + "_ztrain_universal"
    shutil.rmtree(ztrain, ignore_errors=True)
    shutil.rmtree(zout, ignore_errors=True)
    r = subprocess.run([cli, "train", "--model", "L1-D16-H2-T16", "--steps", "1", "--ranks", "1",
                        "--save-dir", ztrain], capture_output=True, text=True)
    check(f"{name}: zinc train saves", r.returncode == 0, r.stderr[-500:])
    r = subprocess.run([sys.executable, "-m", "zinc.utils.to_deepspeed", ztrain, zout],
                       env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python")),
                       capture_output=True, text=True)
    check(f"{name}: to_deepspeed of a zinc train checkpoint refused, nothing written",
          r.returncode == 1 and "no param groups" in r.stderr and not os.path.exists(zout),
          f"exit {r.returncode}: {r.stderr[-500:]}")
    # zinc's own tools on the DeepSpeed folder say what it is (they called its tag damaged, exit 1)
    tagdir = [n for n in sorted(os.listdir(os.path.join(FIXTURES, name, "ckpt")))
              if n.startswith("global_step")][0]
    for arg in ("ckpt", f"ckpt/{tagdir}"):
        r = subprocess.run([cli, "ckpt", "verify", os.path.join(FIXTURES, name, arg)],
                           capture_output=True, text=True)
        check(f"{name}: zinc ckpt verify {arg}: exit 2, DeepSpeed's format named",
              r.returncode == 2 and "DeepSpeed's format" in r.stderr and
              "from_deepspeed" in r.stderr and "damaged" not in r.stderr,
              f"exit {r.returncode}: {r.stderr[-500:]}")
    r = subprocess.run([sys.executable, "-m", "zinc.utils.from_deepspeed",
                        os.path.join(FIXTURES, name, "ckpt"), out],
                       env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python")),
                       capture_output=True, text=True)
    check(f"{name}: from_deepspeed exits 0", r.returncode == 0, r.stderr[-2000:])
    r = subprocess.run([cli, "ckpt", "verify", out], capture_output=True, text=True)
    check(f"{name}: zinc ckpt verify passes the converted checkpoint", r.returncode == 0,
          r.stdout[-1000:] + r.stderr[-1000:])
    from zinc.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    sd = get_fp32_state_dict_from_zero_checkpoint(out)
    bad = [n for n in want["master"] if n not in sd or not bitwise(sd[n], want["master"][n])]
    check(f"{name}: zero_to_fp32 of it: DeepSpeed's fp32 master", not bad, f"{bad}")
    check(f"{name}: zero_to_fp32 of it: the buffer", "shift" in sd and
          bitwise(sd["shift"], want["buffers"]["shift"]))
    # a frozen parameter is carried (from stage 3's pieces it was dropped, exit 0)
    bad = [n for n, v in want.get("frozen", {}).items() if n not in sd or not bitwise(sd[n], v)]
    check(f"{name}: zero_to_fp32 of it: the frozen parameters", not bad, f"{bad}")
    engine, model, _ = engine_for(want, 1)
    _, client = engine.load_checkpoint(out)
    for key, get in (("master", safe_get_full_fp32_param),
                     ("exp_avg", lambda p: safe_get_full_optimizer_state(p, "exp_avg")),
                     ("exp_avg_sq", lambda p: safe_get_full_optimizer_state(p, "exp_avg_sq"))):
        bad = [n for n, p in model.named_parameters()    # (moments unrecorded: see the fixture)
               if p.requires_grad and n in want[key] and not bitwise(get(p), want[key][n])]
        check(f"{name}: the zinc checkpoint loads {key} bitwise DeepSpeed's", not bad, f"{bad}")
    bad = [n for n, p in model.named_parameters()
           if n in want.get("frozen", {}) and not bitwise(p, want["frozen"][n])]
    check(f"{name}: ... and the frozen parameters", not bad, f"{bad}")
    check(f"{name}: its counters", (engine.global_steps, engine.global_samples) ==
          (want["global_steps"], want["global_samples"]),
          f"{engine.global_steps, engine.global_samples}")
    check(f"{name}: its client_state", client.get("epoch") == 7, f"{client}")


def export(name, work, stage):
    """from_deepspeed then to_deepspeed: the universal checkpoint written holds DeepSpeed's
    values (read back by ds_checkpoint, whose universal reader the fixtures made by DeepSpeed's
    ds_to_universal check), and a zinc engine resumes it to DeepSpeed's later weights."""
    want = expected(name)
    zdir, udir = os.path.join(work, "zinc"), os.path.join(work, "universal")
    shutil.rmtree(work, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    for mod, args in (("from_deepspeed", [os.path.join(FIXTURES, name, "ckpt"), zdir]),
                      ("to_deepspeed", [zdir, udir])):
        r = subprocess.run([sys.executable, "-m", f"zinc.utils.{mod}"] + args, env=env,
                           capture_output=True, text=True)
        check(f"{name}: {mod} exits 0", r.returncode == 0, r.stderr[-2000:])
    with open(os.path.join(udir, "latest_universal"), encoding="utf-8") as f:
        check(f"{name}: latest_universal names the tag", f.read() == "global_step3")
    ds = read_deepspeed_checkpoint(udir)
    check(f"{name}: read back as a universal checkpoint", ds.kind == "universal", ds.kind)
    # The model-states file holds the keys DeepSpeed's own save writes, no other: DeepSpeed's
    # load hands every key it does not know back as client_state (the export wrote
    # sparse_tensor_module_names, which 0.19.8 no longer saves, and left out
    # checkpoint_parallel_dimensions).
    from zinc.utils import _ds_pickle

    def states_keys(tagdir):
        files = sorted(f for f in os.listdir(tagdir) if f.endswith("model_states.pt"))
        return set(_ds_pickle.load_file(os.path.join(tagdir, files[0])))
    native = states_keys(os.path.join(FIXTURES, name, "ckpt", "global_step3"))
    exported = states_keys(os.path.join(udir, "global_step3"))
    check(f"{name}: the exported model states hold DeepSpeed's keys", exported == native,
          f"extra {sorted(exported - native)}, missing {sorted(native - exported)}")
    for key in ("master", "exp_avg", "exp_avg_sq"):
        got = getattr(ds, key)
        bad = [n for n in want[key] if n not in got or not bitwise(got[n], want[key][n])]
        check(f"{name}: its {key} is DeepSpeed's, bitwise", not bad, f"{bad}")
    check(f"{name}: its step, counters, scheduler position, client_state",
          (ds.adam_step, ds.global_steps, ds.global_samples, ds.lr_scheduler,
           ds.client_state.get("epoch")) == (want["adam_step"], want["global_steps"],
                                             want["global_samples"],
                                             {"last_batch_iteration": 2}, 7),
          f"{ds.adam_step, ds.global_steps, ds.global_samples, ds.lr_scheduler}")
    # zinc resumes the exported folder as DeepSpeed resumed its own save.
    os.makedirs(os.path.join(work, name))
    os.rename(udir, os.path.join(work, name, "ckpt"))
    shutil.copy(os.path.join(FIXTURES, name, "expected.json"), os.path.join(work, name))
    load(name, stage, work)
    # A checkpoint zinc trained itself (not one from_deepspeed wrote): the lr DeepSpeed's groups
    # get is the next step's, what get_lr() says at the save and DeepSpeed saves; it was the
    # last applied step's, so DeepSpeed took its next step at the step before's lr.
    engine, model, world = engine_for(want, stage)
    train(engine, model, want, world, want["data"][:3])
    nxt, last = engine.get_lr()[0], engine._lr
    zn, un = os.path.join(work, "native"), os.path.join(work, "native_universal")
    engine.save_checkpoint(zn, tag="t3")
    r = subprocess.run([sys.executable, "-m", "zinc.utils.to_deepspeed", zn, un], env=env,
                       capture_output=True, text=True)
    check(f"{name}: to_deepspeed of zinc's own checkpoint exits 0", r.returncode == 0,
          r.stderr[-2000:])
    if r.returncode == 0:      # DeepSpeed's keys less the fixtures' client_state (none saved)
        client = {"epoch", "note"}                          # make_fixtures.py's client_state
        own = states_keys(os.path.join(un, "t3"))
        check(f"{name}: zinc's own export holds DeepSpeed's keys", own == native - client,
              f"extra {sorted(own - (native - client))}, missing {sorted(native - client - own)}")
    # its one-rank reader engine has a config of its own: no "saved with another config"
    # (it was printed on every export)
    check(f"{name}: to_deepspeed says nothing of another config",
          "another config" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-1000:])
    # DeepSpeed's stage-3 universal load does not resume several groups (measured with two
    # groups of the same settings too): said for every export of more than one group
    ngroups = len(engine.optimizer.param_groups)
    check(f"{name}: to_deepspeed warns of DeepSpeed's stage 3 exactly when there are several "
          f"groups ({ngroups})", ("resume it at ZeRO stage 1 or 2" in r.stderr) == (ngroups > 1),
          r.stderr[-1000:])
    groups = torch.load(os.path.join(un, "t3", "zero", "optimizer_state.pt"))["param_groups"]
    check(f"{name}: ... its lr is the next step's {nxt} (the last step's was {last})",
          nxt != last and all(g["lr"] == nxt for g in groups), f"{[g['lr'] for g in groups]}")
    export_refused(name, zn, un, env)
    replace_killed(name, work)
    export_fp16_quiet(name, work, env)
    # t3 missing, its previous contents whole in t3.old (a save over t3 that could not exchange
    # the two stopped between its renames): exported under t3's name (it was t3.old)
    os.rename(os.path.join(zn, "t3"), os.path.join(zn, "t3.old"))
    un2 = os.path.join(work, "from_old")
    r = subprocess.run([sys.executable, "-m", "zinc.utils.to_deepspeed", zn, un2], env=env,
                       capture_output=True, text=True)
    with open(os.path.join(un2, "latest_universal"), encoding="utf-8") as f:
        check(f"{name}: to_deepspeed of t3.old (t3 missing) writes t3",
              r.returncode == 0 and os.path.isdir(os.path.join(un2, "t3")) and f.read() == "t3",
              r.stderr[-2000:])


class _Scale(torch.nn.Module):
    """x * w + b: fp16 through torch's CPU kernels (no half matmul there)."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 8))
        self.b = torch.nn.Parameter(torch.linspace(0, 1, 8))

    def forward(self, x):
        return x * self.w + self.b


def export_fp16_quiet(name, work, env):
    """to_deepspeed of an fp16 checkpoint (dynamic loss scale) prints no config warning: its
    reader engine's config warned on every export that fp16.hysteresis has no effect at stage 0
    (the reader's stage, not the run's)."""
    zn, un = os.path.join(work, "fp16"), os.path.join(work, "fp16_universal")
    engine, *_ = zinc.initialize(model=_Scale(), config={
        "train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}})
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        engine.backward(engine(torch.randn(2, 8, generator=g).half()).float().pow(2).mean())
        engine.step()
    engine.save_checkpoint(zn)
    engine.close()
    r = subprocess.run([sys.executable, "-m", "zinc.utils.to_deepspeed", zn, un], env=env,
                       capture_output=True, text=True)
    check(f"{name}: to_deepspeed of an fp16 checkpoint exits 0 and warns of nothing",
          r.returncode == 0 and "warning" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-800:])


def replace_killed(name, work):
    """to_deepspeed's _replace of an earlier export's tag folder, killed while it removes the
    earlier folder (its rmtree raising after the first file, as a SIGKILL there): the tag's name
    holds the whole new folder, with the exchange and with the fallback through T.old (before,
    the earlier folder was deleted first and a kill left it half-deleted under the name
    latest_universal gives); an export run again after leaves no T.tmp or T.old."""
    from zinc.utils import to_deepspeed as td
    real_rmtree, real_exchange = td.shutil.rmtree, td._exchange

    def write(files):
        def into(tmp):
            os.makedirs(tmp)
            for f in files:
                with open(os.path.join(tmp, f), "w", encoding="utf-8") as fh:
                    fh.write(f)
        return into

    def killed_rmtree(p, ignore_errors=False):
        if not os.path.isdir(p):
            return real_rmtree(p, ignore_errors=ignore_errors)
        first = sorted(os.listdir(p))[:1]
        for f in first:
            os.unlink(os.path.join(p, f))
        raise KeyboardInterrupt(f"killed while removing {p}")

    for how, exchange in (("exchanged", real_exchange), ("moved aside", lambda a, b: False)):
        tag = os.path.join(work, f"replace_{how.replace(' ', '_')}", "t")
        real_rmtree(os.path.dirname(tag), ignore_errors=True)
        td._replace(tag, write(["a_old", "b_old"]))
        td.shutil.rmtree, td._exchange = killed_rmtree, exchange
        try:
            td._replace(tag, write(["a_new", "b_new"]))
        except KeyboardInterrupt:
            pass
        finally:
            td.shutil.rmtree, td._exchange = real_rmtree, real_exchange
        check(f"{name}: an export killed while removing the earlier tag ({how}) leaves the new "
              f"one whole under its name", sorted(os.listdir(tag)) == ["a_new", "b_new"],
              f"{sorted(os.listdir(tag))}")
        td._exchange = exchange
        try:
            td._replace(tag, write(["c"]))
        finally:
            td._exchange = real_exchange
        check(f"{name}: ... and the next export ({how}) leaves no .tmp or .old",
              sorted(os.listdir(os.path.dirname(tag))) == ["t"] and os.listdir(tag) == ["c"],
              f"{sorted(os.listdir(os.path.dirname(tag)))}")


def export_refused(name, zn, un, env):
    """What to_deepspeed refuses before writing (exit 1, nothing changed): OUT_DIR the zinc
    folder itself (its tag was deleted, exit 0), OUT_DIR inside a zinc tag, an OUT_DIR/TAG that
    is not an earlier export (deleted silently); an earlier export is replaced."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "zinc.utils.to_deepspeed", *args], env=env,
                              capture_output=True, text=True)
    manifest = os.path.join(zn, "t3", "manifest.json")
    with open(manifest, "rb") as f:
        before = f.read()
    for out, why in ((zn, "is a zinc checkpoint"), (os.path.join(zn, "t3", "ds"), "inside")):
        r = run(zn, out)
        with open(manifest, "rb") as f:
            kept = f.read() == before
        check(f"{name}: to_deepspeed to {os.path.relpath(out, zn) or '.'} of the input refused "
              f"({why}), the checkpoint kept", r.returncode == 1 and why in r.stderr and kept and
              not os.path.exists(os.path.join(zn, "t3", "ds")), r.stderr[-500:])
    other = os.path.join(un + "_other", "t3")
    os.makedirs(other)
    with open(os.path.join(other, "mine.txt"), "w", encoding="utf-8") as f:
        f.write("mine")
    r = run(zn, un + "_other")
    check(f"{name}: an OUT_DIR/TAG that is no export is refused and kept",
          r.returncode == 1 and "not an earlier export" in r.stderr
          and os.path.exists(os.path.join(other, "mine.txt")), r.stderr[-500:])
    r = run(zn, un)
    check(f"{name}: an earlier export is replaced", r.returncode == 0, r.stderr[-500:])

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
