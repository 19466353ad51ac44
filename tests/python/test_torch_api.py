"""test_torch_api.py — the DeepSpeed engine methods a training script (and HF Trainer's DeepSpeed
integration) calls besides the loop: module_state_dict, save_16bit_model, the accessors.

    python test_torch_api.py STAGE DIR     (also under mpirun -np 2)

bf16, gradient_accumulation_steps 2, a model with a tied weight (two keys, one Parameter), a
frozen parameter, a persistent and a non-persistent buffer. Each check prints its name and fails
the run (exit 1) when it does not hold:
- is_gradient_accumulation_boundary() is False, True, False, True, ... around engine.step()
  (the micro-step the next step() ends the window with), global_steps moves only at True;
- a model's attribute and method reach through the engine, as DeepSpeed's passes them through
  (the method runs the forward, gathered at stage 3); a name neither has: AttributeError; the
  DeepSpeed engine methods zinc does not offer raise NotImplementedError naming the method;
  compile() is the engine's, not the model's of that name: at stage 3 NotImplementedError, at
  stages 0-2 RuntimeError on a torch without Module.compile (as DeepSpeed's), else the model's
  Module.compile called by the engine (python_compile trains compiled models);
- train_batch_size() = micro x 2 x world; device is the model's; local_rank is this rank's index
  on the node (one node: the global rank), $LOCAL_RANK when set; zero_grad() clears .grad;
- module_state_dict(): the keys of model.state_dict() in its order (both tied names, the frozen
  parameter and the persistent buffer, not the non-persistent one), bf16 parameters, the buffer
  in fp32 as the module holds it; at stages 0-2 the values equal the model's parameters (zinc's
  working copy); exclude_frozen_parameters drops the frozen one; keep_vars=True is refused;
- save_16bit_model(): returns True, only rank 0 writes (each rank names its own directory; only
  rank 0's exists), no temporary file remains, torch.load gives the same keys and tensors, bit
  for bit, as module_state_dict, and a fresh model loads it; exclude_frozen_parameters leaves
  the frozen parameter out of the file; when rank 0 cannot write, every rank raises OSError;
- stage 3: without stage3_gather_16bit_weights_on_model_save it returns False, warns naming the
  key (rank 0) and writes nothing; _zero3_consolidated_16bit_state_dict gives the same dict on
  rank 0 and None elsewhere (stages 0-2: ValueError);
- evaluation: engine.eval() and a forward under no_grad and inference_mode give the output of a
  plain model loaded with module_state_dict(), bit for bit; training goes on afterwards;
- the config's scheduler through DeepSpeed's API (get_lr, state_dict, last_batch_iteration,
  load_state_dict), None without a scheduler section; fp32 stage 0's grad norm None;
- zero_grad (engine's or the optimizer's) inside an accumulation window drops the window's gradients
  so far where DeepSpeed's does (stages 0-1; stage 3 the optimizer's), else keeps them;
- no_sync (DeepSpeed's, stages 0-1): with gradient_accumulation_steps 1, the first micro-batch's
  backward inside no_sync and the second's outside (each loss halved), then step(), trains bit
  for bit as gradient_accumulation_steps 2 does, and so does running both inside and step()
  after the block; step() inside and entering it twice raise RuntimeError. At stage 3 entering
  it raises RuntimeError (gradient partitioning, as in DeepSpeed);
- checkpoints keep the module's persistent buffer and frozen parameter (rank 0's): both come
  back after the model's were changed, without a warning, also when the blob is larger than
  the reader's first buffer; saved with exclude_frozen_parameters=True, the (strict) load
  raises naming it and load_module_strict=False keeps the model's frozen value, silently; a
  buffer only the model or only the checkpoint has: the strict load raises naming it, the
  non-strict one loads the rest;
- a checkpoint whose trained parameters differ from the loading model's: one trained at the
  save and frozen now gets the saved weight (full load and load_module_only); one frozen at
  the save and trained now gets its saved value with load_module_only and trains on, while the
  full load refuses naming it, and load_module_only raises naming it when the save excluded it
  (not strict: it keeps the engine's value); a checkpoint tensor the model lacks: the strict
  load raises counting it, the non-strict one leaves it;
- DeepSpeed's step counters on fp16 (an elementwise model): a window whose gradient overflows
  is a skipped step that global_steps counts and skipped_steps too; global_samples grows by
  train_batch_size per step, and with managed_gradient_accumulation false by the samples of the
  micro-batches each window ran; the default tag is global_step<global_steps>; a load gives the
  counters back and they go on;
- client_state as DeepSpeed keeps it: tuples, integer keys, tensors, a script's objects come
  back equal (torch.save); JSON values stay JSON in client.bin; an unpicklable one raises.
- a caller-owned accumulation boundary: set_gradient_accumulation_boundary in Hugging Face
  Accelerate's loop and in DeepSpeed's docstring's, and managed_gradient_accumulation false,
  train bit for bit as the count when their windows are its; windows of 1 and 3 give two steps,
  the same in both ways and not the count's; set False then None inside a window trains as the
  count; a forward after the window's last backward before
  step() raises and training goes on; the setting under managed false raises; backward returns
  loss / gradient_accumulation_steps, and scale_wrt_gas=False on a loss halved by the script
  trains as the count;
- set_train_batch_size (DeepSpeed's) to twice the global batch after a window: the next window
  is twice as long, one step, bit for bit the same window and loss scale made by the script;
  the accessors follow; set_train_micro_batch_size keeps the steps; a batch not a multiple of
  micro x ranks, 0, a float and a call inside a window raise, and training goes on.
Exit 77 when torch is not importable.
"""
import copy
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

from _common import Gain, check, check_raises, failures, torch, zinc
from zinc.utils import safe_get_full_optimizer_state  # noqa: E402

MICRO = 4
GA = 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 6)
        self.b = torch.nn.Linear(6, 6)
        self.b.weight = self.a.weight                      # tied: keys a.weight and b.weight
        self.head = torch.nn.Linear(6, 3)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 6), requires_grad=False)
        self.register_buffer("shift", torch.linspace(-1, 1, 6))
        self.register_buffer("scratch", torch.zeros(6), persistent=False)
        self.labels = ("x", "y", "z")     # a plain attribute of the model

    def forward(self, x):
        h = torch.tanh(self.a(x)) * self.scale.to(x.dtype) + self.shift.to(x.dtype)
        return self.head(torch.tanh(self.b(h)))

    def predict(self, x):
        """A method that runs the forward (as HF models' generate())."""
        return self(x).argmax(-1)

    def compile(self, *args, **kwargs):
        """A model method of a name DeepSpeed's engine has (torch 2's Module.compile): the
        engine's must answer, not this one (which the engine's calls, as DeepSpeed's calls
        self.module.compile)."""
        self.compiled_with = kwargs
        return "the model's compile"


def net():
    torch.manual_seed(0)
    return Net()


def cfg(stage, gather=None):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
         "bf16": {"enabled": True},
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
         "zero_optimization": {"stage": stage}}
    if gather is not None:
        c["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = gather
    return c


def micro_step(engine, i):
    g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
    x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
    y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
    loss = ((engine(x) - y) ** 2).mean()
    engine.backward(loss)


def same_dicts(a, b):
    """Same keys in the same order, same dtypes and values bit for bit (on the CPU)."""
    if list(a) != list(b):
        return False, f"keys {list(a)} != {list(b)}"
    for k in a:
        x, y = a[k].cpu(), b[k].cpu()
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            return False, f"{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}"
    return True, ""


def check_fp16_accessors(stage):
    """The config accessors on an fp16 config with the optimizer offloaded and clipping: what
    zinc resolved (the batch size derived from micro batch and accumulation, the lr DeepSpeed
    gives Adam when the config has none), and the loss scale in use (2^8) as DeepSpeed's
    optimizer reports it."""
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 3,
         "fp16": {"enabled": True, "initial_scale_power": 8}, "gradient_clipping": 0.5,
         "steps_per_print": 7,
         "optimizer": {"type": "AdamW", "params": {"betas": [0.8, 0.9]}},     # no lr
         "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}
    model = net()
    engine, opt, _, _ = zinc.initialize(model=model, config=c)
    world = engine.world_size
    got = (engine.fp16_enabled(), engine.bfloat16_enabled(), engine.gradient_clipping(),
           engine.steps_per_print(), (engine.zero_offload_optimizer() or {}).get("device"),
           engine.zero_cpu_offload(), engine.loss_scale(), engine.dynamic_loss_scale(),
           engine.get_mom(), opt.cur_scale, opt.loss_scale, engine.train_batch_size(),
           engine.gradient_accumulation_steps(), engine.get_lr())
    want = (True, False, 0.5, 7, "cpu", True, 0.0, True, [(0.8, 0.9)], 256.0, 256.0,
            MICRO * 3 * world, 3, [1e-3])       # DeepSpeed's default lr where the config has none
    check("config accessors (fp16, offloaded, clipping)", got == want, f"{got} != {want}")
    # DeepSpeed's accessors of the optimizer, scheduler and zero sections: the config's values
    # as written, the zero ones as resolved (DeepSpeed's defaults: buckets 5e8, overlap_comm
    # False below stage 3 and True at it, persistence threshold 1e5, prefetch 5e7).
    got = (engine.zero_optimization(), engine.zero_optimization_partition_gradients(),
           engine.zero_optimization_partition_weights(), engine.optimizer_name(),
           engine.optimizer_params(), engine.scheduler_name(), engine.scheduler_params(),
           engine.get_batch_info(), engine.postscale_gradients(),
           engine.gradient_predivide_factor(), engine.zero_reduce_bucket_size(),
           engine.zero_allgather_bucket_size(), engine.zero_overlap_comm(),
           engine.zero_param_persistence_threshold(), engine.zero_prefetch_bucket_size())
    want = (stage > 0, stage >= 2, stage == 3, "adamw", {"betas": [0.8, 0.9]}, None, None,
            (MICRO * 3 * world, MICRO, 3), True, 1.0, 500000000, 500000000, stage == 3, 100000,
            50000000)
    check("DeepSpeed's optimizer, scheduler and zero accessors", got == want, f"{got} != {want}")
    # DeepSpeed 0.19.8's values for this config (its DeepSpeedConfig and engine accessors, read
    # in bench/.venv): the scaler's settings under its key names, the working dtype on the wire,
    # tag validation "Warn", no universal or node-local checkpoints, a data-parallel-only world.
    got = (engine.initial_dynamic_scale(), engine.dynamic_loss_scale_args(),
           engine.communication_data_type, engine.get_data_types(), engine.fp16_auto_cast(),
           engine.checkpoint_tag_validation_enabled(), engine.checkpoint_tag_validation_fail(),
           engine.load_universal_checkpoint(), engine.use_node_local_storage(),
           engine.zero_use_cpu_optimizer(), engine.zero_load_from_fp32_weights(),
           engine.get_data_parallel_rank(), engine.get_model_parallel_rank(),
           engine.get_tensor_parallel_rank(), engine.is_compiled)
    want = (256, {"init_scale": 256, "scale_window": 1000, "delayed_shift": 2,
                  "consecutive_hysteresis": False, "min_scale": 1},
            torch.float16, (torch.float16, torch.float16), False, True, False, False, False,
            True, True, engine.global_rank, 0, 0, False)
    check("DeepSpeed's precision, checkpoint and parallelism accessors", got == want,
          f"{got} != {want}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.save_checkpoint(os.path.join(sys.argv[2], f"ckpt_fp16_{world}"),
                               exclude_frozen_parameters=True)
    said = [str(w.message) for w in caught if "frozen parameters" in str(w.message)]
    check("save_checkpoint(exclude_frozen_parameters=True) warns of nothing", not said, str(said))
    engine.close()


def check_step_counters(stage, root):
    """DeepSpeed's counters on fp16 with an overflow: global_steps counts every optimizer step,
    the one skipped for the overflow too; skipped_steps the skipped; global_samples
    train_batch_size per step (with managed_gradient_accumulation false, the micro-batches each
    window ran). The default checkpoint tag is global_step<global_steps>, and a load gives all
    three back."""
    def build(**extra):
        c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
             "fp16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
             "zero_optimization": {"stage": stage}, **extra}
        return zinc.initialize(model=Gain(), config=c)[0]

    def window(engine, size, big=False):
        for i in range(size):
            g = torch.Generator().manual_seed(10 * engine.global_rank + i)
            # 1e4 at a loss scale of 2^16 overflows fp16's gradient (65504): the step is skipped.
            x = (torch.randn(MICRO, 8, generator=g) * (1e4 if big else 1.0)).half()
            engine.backward((engine(x).float() ** 2).mean())
            engine.step()

    def counters(engine):
        return (engine.global_steps, engine.skipped_steps, engine.global_samples,
                engine.was_step_applied())

    engine = build()
    tb = engine.train_batch_size()
    # DeepSpeed's get_global_grad_norm(): None until the first optimizer step (also after a
    # micro-step inside the first window), inf after the step the overflow skipped, then the
    # step's finite norm.
    norms = [engine.get_global_grad_norm()]
    window(engine, 1)
    norms.append(engine.get_global_grad_norm())
    engine.close()
    engine = build()
    got = []
    for big in (True, False, False):
        window(engine, GA, big)
        got.append(counters(engine))
        norms.append(engine.get_global_grad_norm())
    want = [(1, 1, tb, False), (2, 1, 2 * tb, True), (3, 1, 3 * tb, True)]
    check("global_steps, skipped_steps, global_samples with an fp16 overflow (DeepSpeed's)",
          got == want, f"{got} != {want}")
    # of DeepSpeed 0.19.8's type: a float at stage 0, a 0-dim tensor at stages 1-3 (float32 at
    # 1-2, float64 at 3) whose .item() a script calls
    kind = (float if stage == 0 else
            torch.tensor(0.0, dtype=torch.float64 if stage == 3 else torch.float32).type())
    check(f"get_global_grad_norm: None, None, inf, then finite values > 0 of type {kind} "
          f"(DeepSpeed's)",
          norms[:3] == [None, None, float("inf")]
          and all((type(n) is float if kind is float else
                   isinstance(n, torch.Tensor) and n.dim() == 0 and n.type() == kind)
                  and 0 < float(n) < float("inf") for n in norms[3:]), str(norms))
    ck = os.path.join(root, f"counters{engine.world_size}")
    engine.save_checkpoint(ck)
    # a NUL in a tag: refused by name (the C string ended there: "global_step3\0x" saved over
    # global_step3, and a load by that name took it, silently)
    for call in (lambda: engine.save_checkpoint(ck, tag="global_step3\0x"),
                 lambda: engine.load_checkpoint(ck, tag="global_step3\0x")):
        check_raises("a tag with a NUL refused", call, ValueError, "NUL")
    # a tag that is no directory name, into a save_dir not there yet: refused before anything
    # is made (the front-end made the directory first and left it empty)
    fresh = os.path.join(root, f"refused{engine.world_size}")
    check_raises("a tag with a space at its end refused",
                 lambda: engine.save_checkpoint(fresh, tag="step3 "), zinc.ZincError,
                 "not usable as a directory name")
    check("a refused tag leaves no save directory", not os.path.exists(fresh),
          str(os.listdir(root)))
    engine.close()
    check("the default tag is global_step<global_steps>",
          os.path.isdir(os.path.join(ck, "global_step3")), str(sorted(os.listdir(ck))))
    # `latest` damaged into bytes that are not UTF-8: the load warns and takes the newest tag
    # (the front-end's check for a DeepSpeed folder raised UnicodeDecodeError); each rank puts
    # the same bytes there by a rename of its own file
    mine = os.path.join(ck, f".latest.{os.getpid()}")
    with open(mine, "wb") as fh:
        fh.write(b"x\x01\xffgarbage\n")
    os.replace(mine, os.path.join(ck, "latest"))
    engine = build()
    engine.load_checkpoint(ck)
    check("load_checkpoint gives the counters back",
          counters(engine)[:3] == want[-1][:3], f"{counters(engine)} vs {want[-1]}")
    window(engine, GA)
    check("... and they go on", counters(engine) == (4, 1, 4 * tb, True), str(counters(engine)))
    engine.close()
    # The caller owns the boundary: windows of 1 and 3 micro-batches train on 4 micro-batches
    # of samples (DeepSpeed: train_batch_size / gradient_accumulation_steps per micro-batch).
    engine = build(managed_gradient_accumulation=False)
    for size in (1, 3):
        for i in range(size):
            g = torch.Generator().manual_seed(i)
            engine.backward((engine(torch.randn(MICRO, 8, generator=g).half()).float() ** 2)
                            .mean())
        engine.step()
    check("global_samples with managed_gradient_accumulation false",
          counters(engine)[:3] == (2, 0, 4 * MICRO * engine.world_size), str(counters(engine)))
    engine.close()


def stderr_of(fn):
    """What fn writes to file descriptor 2 (zinc's C log) while it runs."""
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


def check_freeze_changes(stage, root):
    """A checkpoint loaded by a model that freezes what the saving run trained, or trains what
    it froze (DeepSpeed's module state holds every parameter, so both load there):
    - trained at the save, frozen now (a fine-tune with the pretrained body frozen): the full
      load and load_module_only give the frozen parameter the saved weight, in the working
      dtype as module_state_dict gave it at the save;
    - frozen at the save (and changed by the script), trained now: load_module_only gives it the
      saved value and zinc trains it on; the full load refuses naming it (Adam has no state for
      it); saved with exclude_frozen_parameters=True it is nowhere, and load_module_only raises
      ValueError naming it."""
    def build(frozen=()):
        model = net()
        for name in frozen:
            model.get_parameter(name).requires_grad_(False)
        return model, zinc.initialize(model=model, config=cfg(stage))[0]

    def window(engine):
        for i in range(GA):
            micro_step(engine, i)
            engine.step()

    # trained at the save, frozen at the load
    _, engine = build()
    world = engine.world_size
    window(engine)
    want = engine.module_state_dict()
    ck = os.path.join(root, f"freeze{world}")
    engine.save_checkpoint(ck)
    engine.close()
    for kw in ({}, {"load_module_only": True}):
        model, engine = build(["head.weight"])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            err = stderr_of(lambda: engine.load_checkpoint(ck, **kw))
        got = engine.module_state_dict()
        bad = [k for k in want if not torch.equal(got[k], want[k])]
        check(f"trained at the save, frozen now: load_checkpoint({kw}) restores every weight",
              not bad and torch.equal(model.head.weight, want["head.weight"]), f"differ: {bad}")
        # zinc restores head.weight itself: neither C nor Python says the load left a tensor
        said = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
        check(f"... load_checkpoint({kw}) does not say it left a tensor",
              not said and "does not register" not in err, f"{said} {err[-300:]}")
        engine.close()
    # a tensor of the checkpoint that is none of the model's parameters: rank 0 warns
    model = net()
    model.spare = torch.nn.Parameter(torch.ones(5))          # trained at the save, unused
    engine = zinc.initialize(model=model, config=cfg(stage))[0]
    window(engine)
    engine.save_checkpoint(ck, tag="spare")
    engine.close()
    _, engine = build()
    check_raises("a tensor the model lacks: the strict load raises (1 tensor)",
                 lambda: engine.load_checkpoint(ck, tag="spare"), ValueError,
                 "holds 1 tensors that are not parameters of the model")
    engine.close()
    model, engine = build()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine.load_checkpoint(ck, tag="spare", load_module_strict=False)
    said = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    check("... load_module_strict=False leaves it, without a warning", not said, str(said))
    window(engine)                      # it trains on from the checkpoint's weights
    check("... and trains on", all(torch.isfinite(v.float()).all()
                                   for v in engine.module_state_dict().values()))
    engine.close()

    # frozen at the save (and changed by the script), trained at the load
    model, engine = build(["head.weight"])
    # (inside GatheredParameters: at stage 3 a frozen parameter is in pieces, as DeepSpeed's)
    with zinc.zero.GatheredParameters([model.head.weight], modifier_rank=0), torch.no_grad():
        model.head.weight.mul_(2.0)
    window(engine)
    want = engine.module_state_dict()
    engine.save_checkpoint(ck, tag="frozen")
    engine.save_checkpoint(ck, tag="excluded", exclude_frozen_parameters=True)
    engine.close()
    _, engine = build()
    check_raises("frozen at the save, trained now: the full load refuses",
                 lambda: engine.load_checkpoint(ck, tag="frozen"), zinc.ZincError, "head.weight")
    engine.close()
    _, engine = build()
    engine.load_checkpoint(ck, tag="frozen", load_module_only=True)
    got = engine.module_state_dict()
    bad = [k for k in want if not torch.equal(got[k], want[k])]
    check("frozen at the save, trained now: load_module_only restores every weight", not bad,
          f"differ: {bad}")
    window(engine)
    moved = engine.module_state_dict()
    check("... and zinc trains it from there",
          not torch.equal(moved["head.weight"], want["head.weight"])
          and torch.isfinite(moved["head.weight"].float()).all(), "head.weight did not move")
    engine.close()
    _, engine = build()
    check_raises("saved excluded, trained now: load_module_only raises naming it",
                 lambda: engine.load_checkpoint(ck, tag="excluded", load_module_only=True),
                 ValueError, "head.weight")
    engine.close()
    # not strict: head.weight keeps the engine's value, every other weight is the saved one
    model, engine = build()
    mine = engine.module_state_dict()["head.weight"]
    engine.load_checkpoint(ck, tag="excluded", load_module_only=True, load_module_strict=False)
    got = engine.module_state_dict()
    bad = [k for k in want if k != "head.weight" and not torch.equal(got[k], want[k])]
    check("saved excluded, trained now, not strict: head.weight keeps the engine's value, the "
          "rest is the checkpoint's", not bad and torch.equal(got["head.weight"], mine)
          and not torch.equal(mine, want["head.weight"]), f"differ: {bad}")
    engine.close()


def check_buffer_strictness(engine, model, ck, root):
    """The module state's buffers, strict and not: a model buffer the checkpoint lacks and a
    checkpoint buffer the model lacks raise naming it (DeepSpeed's strict module load); with
    load_module_strict=False the first keeps the model's value and the second is left, while
    the buffers both have are loaded."""
    want_shift = model.shift.clone()
    model.register_buffer("extra", torch.full((2,), 7.0))       # the checkpoint lacks it
    with torch.no_grad():
        model.shift.add_(1.0)
    check_raises("a buffer the checkpoint lacks: the strict load raises naming it",
                 lambda: engine.load_checkpoint(ck), ValueError, "extra")
    engine.load_checkpoint(ck, load_module_strict=False)
    check("... not strict, it keeps the model's value and the other buffers load",
          torch.equal(model.extra, torch.full((2,), 7.0)) and torch.equal(model.shift, want_shift))
    ck2 = os.path.join(root, f"ckpt_buf{engine.world_size}")
    engine.save_checkpoint(ck2)                 # holds "extra"
    del model._buffers["extra"]
    check_raises("a buffer the model lacks: the strict load raises naming it",
                 lambda: engine.load_checkpoint(ck2), ValueError, "extra")
    with torch.no_grad():
        model.shift.add_(1.0)
    engine.load_checkpoint(ck2, load_module_strict=False)
    check("... not strict, it is left and the other buffers load",
          torch.equal(model.shift, want_shift))


def check_two_engines(stage):
    """Two engines alive in one process, as a GAN's generator and discriminator under DeepSpeed:
    trained in turns, window by window, each ends bit for bit as when trained alone (the
    package before this refused the second engine in a world of one: "rank 0 of this local
    world already has a comm")."""
    def build(seed):
        torch.manual_seed(seed)
        return zinc.initialize(model=Net(), config=cfg(stage))[0]

    def window(engine):
        for i in range(GA):
            micro_step(engine, i)
            engine.step()

    alone = []
    for seed in (0, 1):
        engine = build(seed)
        window(engine)
        window(engine)
        alone.append(engine.module_state_dict())
        engine.close()
    try:
        pair = [build(0), build(1)]
    except zinc.ZincError as ex:
        check("two engines alive in one process", False, str(ex))
        return
    for _ in range(2):
        for engine in pair:
            window(engine)
    together = [engine.module_state_dict() for engine in pair]
    for engine in pair:
        engine.close()
    for k in (0, 1):
        ok, why = same_dicts(together[k], alone[k])
        check(f"two engines trained in turns: engine {k} as when trained alone", ok, why)


def check_client_accessors():
    """With a client optimizer and the config's scheduler: optimizer_name() is its class name
    and optimizer_params() None (DeepSpeed allows no config optimizer beside it)."""
    model = net()
    c = {"train_micro_batch_size_per_gpu": MICRO, "bf16": {"enabled": True},
         "communication_data_type": "BF16",
         "checkpoint": {"tag_validation": "ignore", "load_universal": True},
         "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}}}
    engine, *_ = zinc.initialize(model=model, config=c,
                                 optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
    got = (engine.optimizer_name(), engine.optimizer_params(), engine.scheduler_name(),
           engine.scheduler_params(), engine.communication_data_type, engine.get_data_types(),
           engine.checkpoint_tag_validation_enabled(), engine.checkpoint_tag_validation_fail(),
           engine.load_universal_checkpoint(), engine.initial_dynamic_scale(),
           engine.zero_use_cpu_optimizer())
    # DeepSpeed 0.19.8 gives these too: fp16's default 2^16 start with fp16 off.
    want = ("AdamW", None, "WarmupLR", {"warmup_num_steps": 3}, torch.bfloat16,
            (torch.bfloat16, torch.bfloat16), False, False, True, 65536, False)
    check("accessors with a client optimizer", got == want, f"{got} != {want}")
    engine.close()
    # "fp32", DeepSpeed's upcast reduction (zinc's own arithmetic): accepted, and said back as
    # DeepSpeed's engine says it (it was refused)
    c["communication_data_type"] = "fp32"
    model = net()
    engine, *_ = zinc.initialize(model=model, config=c,
                                 optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
    check("communication_data_type fp32 with bf16",
          engine.communication_data_type == torch.float32, engine.communication_data_type)
    # DeepSpeed's setter: the dtype in force is taken; another would change the reduction, which
    # zinc fixed when the engine was made, so it raises naming the config key.
    engine.communication_data_type = torch.float32
    try:
        engine.communication_data_type = torch.bfloat16
        refused = None
    except NotImplementedError as err:
        refused = str(err)
    check("communication_data_type set to another dtype raises",
          refused is not None and "communication_data_type" in refused
          and engine.communication_data_type == torch.float32, refused)
    # None, DeepSpeed's "the default", would be bf16 here: refused too
    try:
        engine.communication_data_type = None
        refused = None
    except NotImplementedError as err:
        refused = str(err)
    check("communication_data_type None under an fp32 wire raises", refused is not None, refused)
    engine.close()
    # ... and without the key None is the working dtype in force: taken
    del c["communication_data_type"]
    model = net()
    engine, *_ = zinc.initialize(model=model, config=c,
                                 optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
    engine.communication_data_type = None
    check("communication_data_type None without the key is the bf16 in force",
          engine.communication_data_type == torch.bfloat16, engine.communication_data_type)
    engine.close()


def check_grad_accum_fp32(stage):
    """data_types.grad_accum_dtype "fp32" with bf16: at stages 1-3 get_data_types says so and,
    on one rank, the gradient read back before the step is bitwise the fp32 sum of torch's bf16
    gradients of the window's micro-steps, with and without offload_optimizer "cpu" (with the
    key missing, their bf16 sum: the two differ, so the check tells them apart); a gradient set
    with safe_set_full_grad that bf16 cannot hold reads back exactly. At stage 1 those runs set
    communication_data_type "fp32" too (the sums reduced as they are), and one more without it
    reads the sum rounded to bf16, as the step's reduction in the working dtype leaves it
    (DeepSpeed's BF16_Optimizer too), a set gradient too (the step's reduction rounds it: a
    documented departure); no_sync refused at stage 1; refused at stage 0, naming the key."""
    c = cfg(stage)
    c["data_types"] = {"grad_accum_dtype": "fp32"}
    if stage == 0:
        check_raises("grad_accum_dtype fp32 refused at stage 0",
                     lambda: zinc.initialize(model=net(), config=c), Exception,
                     "data_types.grad_accum_dtype", "stage 1, 2 or 3")
        return
    from zinc.utils import safe_get_full_grad, safe_set_full_grad
    sums = {}
    runs = ((True, False, True), (True, True, True), (True, False, False), (False, False, False))
    if stage >= 2:
        runs = ((True, False, False), (True, True, False), (False, False, False))
    for fp32, offload, wire32 in runs:
        model = net()
        ref = net().to(torch.bfloat16)
        ref.scale.requires_grad_(False)
        config = copy.deepcopy(c if fp32 else cfg(stage))
        if offload:
            config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        if wire32:
            config["communication_data_type"] = "fp32"
        rounded = stage == 1 and fp32 and not wire32
        engine, *_ = zinc.initialize(model=model, config=config)
        want = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in ref.named_parameters()
                if p.requires_grad}
        for i in range(GA):
            if i:
                engine.step()       # ends the micro-step before; the last one's comes below
            micro_step(engine, i)
            g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
            x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
            y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
            ref.zero_grad(set_to_none=True)
            (((ref(x) - y) ** 2).mean() * (1.0 / GA)).backward()
            for n, p in ref.named_parameters():
                if n in want:
                    want[n] = (want[n] + p.grad.float()) if fp32 else \
                        (want[n].to(torch.bfloat16) + p.grad).float()
        got = {n: safe_get_full_grad(p).float() for n, p in model.named_parameters()
               if p.requires_grad}
        kind = ("fp32" if fp32 else "bf16") + (" (offload)" if offload else "") + \
            (" reduced in fp32" if wire32 else " reduced in bf16" if rounded else "")
        if fp32 and stage == 1:
            check_raises("no_sync with fp32 sums at stage 1", lambda: engine.no_sync().__enter__(),
                         RuntimeError, "no_sync", "grad_accum_dtype")
        if not offload and not rounded:
            sums[fp32] = want
        if rounded:     # what the step's reduction in bf16 makes of the sums, as DeepSpeed's
            want = {n: w.to(torch.bfloat16).float() for n, w in want.items()}
        if fp32:
            head = model.head.bias
            fine = torch.full(got["head.bias"].shape,     # (at stage 3 head.bias is empty)
                              1 + 2 ** -12)       # fp32 holds it, bf16 does not
            safe_set_full_grad(head, fine)
            back = fine.to(torch.bfloat16).float() if rounded else fine
            check(f"safe_set_full_grad in {kind} sums reads back "
                  f"{'rounded to bf16' if rounded else 'exactly'}",
                  torch.equal(safe_get_full_grad(head).float(), back),
                  str(safe_get_full_grad(head)))
        engine.step()
        check(f"get_data_types with {kind} sums",
              engine.get_data_types() == (torch.bfloat16, getattr(torch, "float32" if fp32
                                                                   else "bfloat16")),
              str(engine.get_data_types()))
        if engine.world_size == 1:
            bad = [n for n in want if not torch.equal(got[n], want[n])]
            check(f"the window's gradient: torch's micro-step gradients summed in {kind}",
                  not bad, f"differ: {bad}")
        engine.close()
    check("fp32 and bf16 sums of the window differ (so the check can fail)",
          any(not torch.equal(sums[True][n], sums[False][n]) for n in sums[True]))
    if stage == 1:
        # zero_grad inside a window drops the fp32 sums so far (zinc clears them on its side,
        # as DeepSpeed's BF16_Optimizer clears its fp32 gradients): the window's last
        # micro-step's gradient alone remains (a single bf16 gradient: the rounding keeps it)
        runs = []
        for drop in (True, False):
            model = net()
            engine, *_ = zinc.initialize(model=model, config=c)
            micro_step(engine, 0)
            if drop:
                engine.zero_grad()
            engine.step()
            micro_step(engine, 1)
            runs.append({n: safe_get_full_grad(p).float().clone()
                         for n, p in model.named_parameters() if p.requires_grad})
            engine.step()
            rank, one = engine.global_rank, engine.world_size == 1
            engine.close()
        ref = net().to(torch.bfloat16)
        ref.scale.requires_grad_(False)
        g = torch.Generator().manual_seed(1000 * rank + 1)
        x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
        y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
        (((ref(x) - y) ** 2).mean() * (1.0 / GA)).backward()
        last = {n: p.grad.float() for n, p in ref.named_parameters() if n in runs[0]}
        if one:
            check("engine.zero_grad() inside a window with fp32 sums at stage 1 drops them: the "
                  "last micro-step's gradient alone",
                  all(torch.equal(runs[0][n], last[n]) for n in last), str(runs[0]))
        check("... and without it the window's two micro-steps' sum (so the check can fail)",
              any(not torch.equal(runs[0][n], runs[1][n]) for n in runs[0]))


def check_client_state(engine, ck):
    """client_state as DeepSpeed keeps it (torch.save): a tuple, an integer key, a tensor and a
    script's own object come back equal; a dict of JSON values comes back equal and stays JSON
    in the checkpoint's client.bin (readable without torch)."""
    import argparse
    rich = {"epoch": 2, "pair": (1, 2), 3: "int key", "t": torch.arange(4),
            "args": argparse.Namespace(lr=0.1, name="run")}
    plain = {"epoch": 2, "note": "hi", "sizes": [1, 2.5]}
    engine.save_checkpoint(ck, tag="rich", client_state=rich)
    engine.save_checkpoint(ck, tag="plain", client_state=plain)
    _, got = engine.load_checkpoint(ck, tag="rich")
    same = (set(got) == set(rich) and got["pair"] == (1, 2) and got[3] == "int key" and
            torch.equal(got["t"], rich["t"]) and got["args"] == rich["args"] and
            got["epoch"] == 2)
    check("client_state with a tuple, an int key, a tensor, an object: back equal", same,
          str(got))
    _, got = engine.load_checkpoint(ck, tag="plain")
    check("client_state of JSON values: back equal", got == plain, str(got))
    if engine.global_rank == 0:
        with open(os.path.join(ck, "plain", "client.bin"), "rb") as f:
            text = f.read().partition(b"\0")[0]
        check("... and stored as JSON in client.bin",
              json.loads(text).get("client_state") == plain, text[:120])
    try:
        engine.save_checkpoint(ck, tag="bad", client_state={"f": lambda: 0})
        check("a client_state torch.save cannot pickle raises TypeError", False)
    except TypeError as ex:
        check("a client_state torch.save cannot pickle raises TypeError", True, str(ex))


def check_no_sync(stage):
    def build(ga):
        c = cfg(stage)
        c["gradient_accumulation_steps"] = ga
        model = net()
        return zinc.initialize(model=model, model_parameters=model.parameters(), config=c)[0]

    if stage >= 2:
        engine = build(1)
        try:
            with engine.no_sync():
                pass
            check(f"no_sync refused at stage {stage}", False, "entered")
        except RuntimeError as ex:
            check(f"no_sync refused at stage {stage}", f"stage {stage}" in str(ex), str(ex))
        engine.close()
        return

    def loss_of(engine, i, scale):
        g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
        x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
        y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
        return ((engine(x) - y) ** 2).mean() * scale

    # DeepSpeed's accumulation (gradient_accumulation_steps 2: zinc halves each loss).
    engine = build(2)
    for i in range(6):
        engine.backward(loss_of(engine, i, 1.0))
        engine.step()
    want = engine.module_state_dict()
    engine.close()
    for inside in (1, 2):              # micro-batches of a step whose backward is in no_sync
        engine = build(1)
        for step in range(3):
            with engine.no_sync():
                for i in range(2 * step, 2 * step + inside):
                    engine.backward(loss_of(engine, i, 0.5))
            for i in range(2 * step + inside, 2 * step + 2):
                engine.backward(loss_of(engine, i, 0.5))
            engine.step()
        got = engine.module_state_dict()
        same, detail = same_dicts(want, got)
        check(f"no_sync with {inside} of 2 backward passes inside: the weights of accumulation "
              "over 2 micro-steps, bit for bit", same and engine.global_steps == 3,
              f"{detail}; global_steps {engine.global_steps}")
        if inside == 2:
            for what, body in (("step() inside no_sync", engine.step),
                               ("no_sync inside no_sync", lambda: engine.no_sync().__enter__())):
                try:
                    with engine.no_sync():
                        body()
                    check(f"{what} raises", False, "accepted")
                except RuntimeError as ex:
                    check(f"{what} raises", "no_sync" in str(ex), str(ex))
        engine.close()


def check_zero_grad_in_window(stage):
    """engine.zero_grad() or optimizer.zero_grad() after every engine.step(), inside windows of
    2 (the torch habit): DeepSpeed 0.19.8 drops what the window summed so far where its
    gradients are still `.grad` (stages 0-1, both calls) or its optimizer's zero_grad restarts
    the window's count (stage 3), and keeps it where its backward moved them already (stage 2;
    engine.zero_grad at stage 3). Dropped: bit for bit the run whose windows' first losses are
    multiplied by 0; kept: the run without the calls (zinc kept them always, training
    differently from DeepSpeed at stages 0, 1 and 3)."""
    def run(call, first_scale, before_last_step=False):
        model = net()
        engine, opt, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                            config=cfg(stage))
        zero = {"engine": engine.zero_grad, "optimizer": opt.zero_grad, None: lambda: None}[call]
        for i in range(3 * GA):
            g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
            x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
            y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
            loss = ((engine(x) - y) ** 2).mean() * (first_scale if i % GA == 0 else 1.0)
            engine.backward(loss)
            last = i % GA == GA - 1
            if before_last_step and last:
                zero()        # after the window's last backward, before its step
            engine.step()
            if not before_last_step:
                zero()
        out = engine.module_state_dict()
        engine.close()
        return out

    kept, dropped = run(None, 1.0), run(None, 0.0)
    same, _ = same_dicts(kept, dropped)
    check("zero_grad in a window: the first micro-batch matters to the plain run", not same)
    for call in ("engine", "optimizer"):
        drops = stage < 2 or (stage == 3 and call == "optimizer")
        same, detail = same_dicts(dropped if drops else kept, run(call, 1.0))
        check(f"{call}.zero_grad() inside a window at stage {stage} "
              f"{'drops' if drops else 'keeps'} the window's gradients so far, as DeepSpeed's",
              same, detail)
        # between the window's last backward and its step DeepSpeed keeps them (stages 1-3; at
        # stage 0 its step skips the parameters whose .grad it set to None: zinc applies them)
        same, detail = same_dicts(kept, run(call, 1.0, before_last_step=True))
        check(f"{call}.zero_grad() between a window's last backward and its step at stage "
              f"{stage} keeps the window's gradients", same, detail)


def check_config_scheduler(stage):
    """The config's scheduler through DeepSpeed's scheduler API: initialize returns the object
    engine.lr_scheduler is; get_lr() and get_last_lr() give the groups' lr; last_batch_iteration
    and state_dict() the position, the applied steps - 1; load_state_dict of that position is
    accepted, of another refused naming it (zinc's position is Adam's count). fp32 at stage 0:
    get_global_grad_norm() is None after a step, as DeepSpeed's plain optimizer there gives it
    (zinc's wrapper lacked get_lr, state_dict and last_batch_iteration, and gave a norm)."""
    c = cfg(stage)
    c["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}
    model = net()
    engine, _, _, sched = zinc.initialize(model=model, model_parameters=model.parameters(),
                                          config=c)
    check("the config's scheduler: initialize's is engine.lr_scheduler",
          sched is not None and sched is engine.lr_scheduler)
    check("before a step: last_batch_iteration -1", sched.last_batch_iteration == -1,
          str(sched.last_batch_iteration))
    for i in range(3 * GA):
        micro_step(engine, i)
        engine.step()
    check("after 3 windows: last_batch_iteration 2, state_dict {'last_batch_iteration': 2}",
          sched.last_batch_iteration == 2 and sched.state_dict() == {"last_batch_iteration": 2},
          f"{sched.last_batch_iteration} {sched.state_dict()}")
    check("get_lr() and get_last_lr() are the groups' lr",
          sched.get_lr() == engine.get_lr() == sched.get_last_lr() and 0 < sched.get_lr()[0] < 1e-2,
          f"{sched.get_lr()} {sched.get_last_lr()} {engine.get_lr()}")
    lr_now = engine.get_lr()
    sched.load_state_dict({"last_batch_iteration": 2})
    for bad in (-2, 2.5, "3", None, 2 ** 60):
        check_raises(f"load_state_dict of a position that is no whole number in -1..2^53 ({bad!r})",
                     lambda: sched.load_state_dict({"last_batch_iteration": bad}), ValueError,
                     f"last_batch_iteration {bad!r}")
    sched.load_state_dict({"last_batch_iteration": 2.0})     # a whole float, as DeepSpeed's
    check("load_state_dict of 2.0: position 2", sched.last_batch_iteration == 2,
          str(sched.last_batch_iteration))
    sched.load_state_dict({"last_batch_iteration": 5})      # (DeepSpeed's: test_ds_load_flags)
    check("load_state_dict of another position moves it; the groups keep their lr",
          sched.last_batch_iteration == 5 and engine.get_lr() == lr_now,
          f"{sched.last_batch_iteration} {engine.get_lr()} {lr_now}")
    engine.close()
    if stage == 0:
        c = cfg(0)
        del c["bf16"]
        model = net()
        engine = zinc.initialize(model=model, model_parameters=model.parameters(), config=c)[0]
        for i in range(GA):
            g = torch.Generator().manual_seed(i)
            engine.backward(((engine(torch.randn(MICRO, 6, generator=g)) -
                              torch.randn(MICRO, 3, generator=g)) ** 2).mean())
            engine.step()
        check("fp32 at stage 0: get_global_grad_norm() is None, as DeepSpeed's",
              engine.get_global_grad_norm() is None, str(engine.get_global_grad_norm()))
        engine.close()


def check_accum_boundary(stage):
    """A caller-owned accumulation boundary: set_gradient_accumulation_boundary (Accelerate's
    and DeepSpeed's docstring's patterns) and managed_gradient_accumulation false train bit for
    bit as zinc's count when they end the window where it would; windows of other lengths give
    one step each, the set and the unmanaged ways alike; the refusals; backward's return value
    and scale_wrt_gas."""
    def build(**extra):
        c = cfg(stage)
        c.update(extra)
        model = net()
        return zinc.initialize(model=model, model_parameters=model.parameters(), config=c)[0]

    def data(engine, i):
        g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
        return (torch.randn(MICRO, 6, generator=g).to(torch.bfloat16),
                torch.randn(MICRO, 3, generator=g).to(torch.bfloat16))

    def loss_of(engine, i):
        x, y = data(engine, i)
        return ((engine(x) - y) ** 2).mean()

    engine = build()                                 # zinc's count: step() after every backward
    for i in range(3 * GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    want = engine.module_state_dict()
    engine.close()

    def accelerate(engine, windows):
        """Hugging Face Accelerate's DeepSpeed loop: forward, set the boundary, backward, and
        step() only when it was the window's last."""
        i, seen = 0, []
        for n in windows:
            for k in range(n):
                loss = loss_of(engine, i)
                engine.set_gradient_accumulation_boundary(k == n - 1)
                seen.append(engine.is_gradient_accumulation_boundary())
                engine.backward(loss)
                i += 1
                if k == n - 1:
                    engine.step()
        return seen

    def docstring(engine, windows):
        """DeepSpeed's docstring: set False, the inner micro-batches, set True, the last, step()."""
        i = 0
        for n in windows:
            engine.set_gradient_accumulation_boundary(False)
            for _ in range(n - 1):
                engine.backward(loss_of(engine, i))
                i += 1
            engine.set_gradient_accumulation_boundary(True)
            engine.backward(loss_of(engine, i))
            i += 1
            engine.step()

    def unmanaged(engine, windows):
        """managed_gradient_accumulation false: backward for each micro-batch, step() at the end."""
        i, seen = 0, []
        for n in windows:
            for _ in range(n):
                seen.append(engine.is_gradient_accumulation_boundary())
                engine.backward(loss_of(engine, i))
                i += 1
            engine.step()
        return seen

    ways = (("set_gradient_accumulation_boundary, Accelerate's loop", accelerate, {}),
            ("set_gradient_accumulation_boundary, DeepSpeed's docstring", docstring, {}),
            ("managed_gradient_accumulation false", unmanaged,
             {"managed_gradient_accumulation": False}))
    for what, run, extra in ways:
        engine = build(**extra)
        seen = run(engine, [GA] * 3)
        same, detail = same_dicts(want, engine.module_state_dict())
        check(f"stage {stage}, {what}: the count's weights, bit for bit", same and
              engine.global_steps == 3, f"{detail}; global_steps {engine.global_steps}")
        if run is accelerate:
            check(f"stage {stage}, {what}: is_gradient_accumulation_boundary() follows the "
                  "setting", seen == [False, True] * 3, str(seen))
        if run is unmanaged:
            check(f"stage {stage}, {what}: is_gradient_accumulation_boundary() is False",
                  seen == [False] * 6 and engine.managed_gradient_accumulation() is False,
                  str(seen))
        engine.close()

    # Windows of 1 and 3 micro-batches (the count's are 2): two steps, the set and the
    # unmanaged ways alike, not the count's weights after the same four micro-batches.
    engine = build()
    for i in range(4):
        engine.backward(loss_of(engine, i))
        engine.step()
    count4 = engine.module_state_dict()
    engine.close()
    got = []
    for what, run, extra in (ways[0], ways[2]):
        engine = build(**extra)
        run(engine, [1, 3])
        got.append(engine.module_state_dict())
        check(f"stage {stage}, {what}, windows 1 and 3: two optimizer steps",
              engine.global_steps == 2, f"global_steps {engine.global_steps}")
        engine.close()
    same, detail = same_dicts(got[0], got[1])
    check(f"stage {stage}, windows 1 and 3: the set and the unmanaged ways agree bit for bit",
          same, detail)
    check(f"stage {stage}, windows 1 and 3: not the count's windows of 2",
          not same_dicts(count4, got[0])[0])

    # Back to the count inside a window: the micro-step set False stays one of the window's,
    # and the count ends the window after it (it trains as the count throughout).
    engine = build()
    engine.set_gradient_accumulation_boundary(False)
    engine.backward(loss_of(engine, 0))
    engine.set_gradient_accumulation_boundary(None)
    engine.backward(loss_of(engine, 1))
    engine.step()
    for i in range(2, 3 * GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    same, detail = same_dicts(want, engine.module_state_dict())
    check(f"stage {stage}: set False, then None inside the window: the count's weights, bit for "
          "bit", same and engine.global_steps == 3, f"{detail}; global_steps {engine.global_steps}")
    engine.close()

    # Refusals: a forward after a backward that ended the window, before step(); the engine
    # goes on after it. The setting under managed_gradient_accumulation false.
    engine = build()
    engine.set_gradient_accumulation_boundary(True)
    engine.backward(loss_of(engine, 0))
    try:
        loss_of(engine, 1)
        check(f"stage {stage}: a forward after the window's last backward, before step(), "
              "raises", False, "accepted")
    except RuntimeError as ex:
        check(f"stage {stage}: a forward after the window's last backward, before step(), "
              "raises", "engine.step()" in str(ex), str(ex))
    engine.step()
    engine.set_gradient_accumulation_boundary(None)        # the count again
    for i in range(GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    check(f"stage {stage}: training goes on after the refusal, with the count again",
          engine.global_steps == 2, f"global_steps {engine.global_steps}")
    engine.close()
    engine = build(managed_gradient_accumulation=False)
    try:
        engine.set_gradient_accumulation_boundary(True)
        check("set_gradient_accumulation_boundary under managed_gradient_accumulation false "
              "raises", False, "accepted")
    except RuntimeError as ex:
        check("set_gradient_accumulation_boundary under managed_gradient_accumulation false "
              "raises", "managed_gradient_accumulation" in str(ex), str(ex))
    engine.close()

    # backward returns the loss over the accumulation steps (DeepSpeed's); scale_wrt_gas=False
    # on a loss the script divided itself trains as the count (the halving is exact in bf16).
    engine = build()
    returned_ok = True
    for i in range(3 * GA):
        loss = loss_of(engine, i)
        half = loss / GA
        ret = engine.backward(half, retain_graph=(i == 0), scale_wrt_gas=False)
        returned_ok = returned_ok and torch.equal(ret, half)
        engine.step()
    same, detail = same_dicts(want, engine.module_state_dict())
    check(f"stage {stage}: backward(scale_wrt_gas=False) of loss / {GA} trains as the count",
          same and returned_ok, detail)
    engine.close()
    engine = build()
    loss = loss_of(engine, 0)
    ret = engine.backward(loss)
    check("backward returns loss / gradient_accumulation_steps", torch.equal(ret, loss / GA),
          f"{ret} vs {loss}")
    engine.step()
    engine.close()


def check_backward_frees_graph(stage):
    """engine.backward without retain_graph detaches the loss it was given (its graph is spent;
    kept alive by the loop's `loss` it pins heap memory through the next forward): the value
    stays, grad_fn goes, the returned loss / GA has none; a view is left as it is; with
    retain_graph=True the graph stays and a second backward through it works (and then
    detaches). Training goes on: a window of GA micro-steps moves the weights."""
    model = net()
    engine = zinc.initialize(model=model, model_parameters=model.parameters(),
                             config=cfg(stage))[0]

    def loss_of(i):
        g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
        x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
        y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
        return ((engine(x) - y) ** 2).mean()

    loss = loss_of(0)
    value = float(loss.detach())
    back = engine.backward(loss)
    engine.step()
    check(f"stage {stage}: engine.backward detaches the loss (value kept, no grad_fn), and "
          "its return (loss / GA) has no graph either",
          loss.grad_fn is None and not loss.requires_grad and float(loss) == value
          and back.grad_fn is None and float(back) == float(torch.tensor(value) / GA))
    view = loss_of(1).reshape(1)[0]      # a view: detach_ would raise on it
    engine.backward(view)                # (raises without the view rule)
    engine.step()
    check(f"stage {stage}: a loss that is a view: backward works and leaves its graph",
          view.grad_fn is not None)
    loss = loss_of(2)
    engine.backward(loss, retain_graph=True)
    engine.step()
    kept = loss.grad_fn is not None
    engine.backward(loss)                # the next micro-step, through the same graph
    engine.step()
    check(f"stage {stage}: retain_graph=True keeps the graph; a second backward through it "
          "works and then detaches", kept and loss.grad_fn is None)
    before = {k: v.clone() for k, v in engine.module_state_dict().items()}
    for i in range(GA):
        engine.backward(loss_of(4 + i))
        engine.step()
    after = engine.module_state_dict()
    check(f"stage {stage}: training goes on after (a window moves the weights)",
          any(not torch.equal(before[k], after[k]) for k in after
              if after[k].is_floating_point()))
    engine.close()


def check_batch_size(stage):
    """set_train_batch_size / set_train_micro_batch_size (DeepSpeed's): after a window of GA,
    set_train_batch_size to twice the global batch makes the next window 2 x GA micro-steps,
    each loss scaled by 1/(2 x GA) — bit for bit the same run made with a caller-owned boundary
    and the loss divided by the script (scale_wrt_gas=False); the accessors follow; the
    refusals (not a multiple, inside a window, below 1) leave training going."""
    def build():
        model = net()
        return zinc.initialize(model=model, model_parameters=model.parameters(),
                               config=cfg(stage))[0]

    def loss_of(engine, i):
        g = torch.Generator().manual_seed(1000 * engine.global_rank + i)
        x = torch.randn(MICRO, 6, generator=g).to(torch.bfloat16)
        y = torch.randn(MICRO, 3, generator=g).to(torch.bfloat16)
        return ((engine(x) - y) ** 2).mean()

    engine = build()
    world = engine.world_size
    for i in range(GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    engine.set_train_batch_size(2 * GA * MICRO * world)
    check("set_train_batch_size: the accessors follow",
          (engine.train_batch_size(), engine.gradient_accumulation_steps(),
           engine.train_micro_batch_size_per_gpu(), engine.get_batch_info())
          == (2 * GA * MICRO * world, 2 * GA, MICRO, (2 * GA * MICRO * world, MICRO, 2 * GA)),
          str(engine.get_batch_info()))
    at = []
    for i in range(GA, 3 * GA):
        at.append(engine.is_gradient_accumulation_boundary())
        engine.backward(loss_of(engine, i))
        engine.step()
    got = engine.module_state_dict()
    check("set_train_batch_size: the next window is 2 x GA micro-steps, one optimizer step",
          at == [False] * (2 * GA - 1) + [True] and engine.global_steps == 2,
          f"{at}, global_steps {engine.global_steps}")
    engine.close()

    engine = build()                 # the same run, the window and the scale by the script
    for i in range(GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    for k, i in enumerate(range(GA, 3 * GA)):
        loss = loss_of(engine, i)
        engine.set_gradient_accumulation_boundary(k == 2 * GA - 1)
        engine.backward(loss / (2 * GA), scale_wrt_gas=False)
        engine.step()
    same, detail = same_dicts(engine.module_state_dict(), got)
    check(f"stage {stage}: set_train_batch_size trains bit for bit as the window and loss scale "
          "set by the script", same, detail)
    engine.close()

    engine = build()
    engine.set_train_micro_batch_size(2 * MICRO)
    check("set_train_micro_batch_size: the micro batch changes, the accumulation steps stay",
          engine.get_batch_info() == (2 * MICRO * GA * world, 2 * MICRO, GA)
          and engine.train_micro_batch_size_per_gpu() == 2 * MICRO,
          str(engine.get_batch_info()))
    engine.set_train_micro_batch_size(MICRO)
    for name, fn, kind, text in (
            ("a batch not a multiple of micro x ranks",
             lambda: engine.set_train_batch_size(MICRO * world + 1), ValueError, "not a multiple"),
            ("a micro batch of 0", lambda: engine.set_train_micro_batch_size(0), ValueError,
             "at least 1"),
            ("a float", lambda: engine.set_train_batch_size(8.0), TypeError, "")):
        msg = None
        try:
            fn()
        except kind as ex:
            msg = str(ex)
        check(f"set_train_batch_size: {name} raises {kind.__name__}",
              msg is not None and text in msg, str(msg))
    engine.backward(loss_of(engine, 0))
    msg = None
    try:
        engine.set_train_batch_size(4 * GA * MICRO * world)
    except RuntimeError as ex:
        msg = str(ex)
    check("set_train_batch_size inside a window raises RuntimeError naming it",
          msg is not None and "accumulation window" in msg, str(msg))
    engine.step()
    for i in range(1, GA):
        engine.backward(loss_of(engine, i))
        engine.step()
    check("training goes on after the refusals, with the batch as it was",
          engine.global_steps == 1 and engine.get_batch_info() == (GA * MICRO * world, MICRO, GA),
          f"global_steps {engine.global_steps}, {engine.get_batch_info()}")
    engine.close()


def check_master_from_16bit(stage):
    """bf16: the fp32 master starts from the weights rounded to bf16, as DeepSpeed's (its module
    is cast before its optimizer copies it); it started from the exact fp32 values, 1 ulp off on
    ~1 in 5 weights."""
    from zinc.utils import safe_get_full_fp32_param
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4))
    exact = {n: p.detach().clone() for n, p in model.named_parameters()}
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
         "bf16": {"enabled": True}, "zero_optimization": {"stage": stage}}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(), config=c)
    bad, moved = [], 0
    for n, p in model.named_parameters():
        want = exact[n].to(torch.bfloat16).float()
        moved += int((want != exact[n]).sum())
        if not torch.equal(safe_get_full_fp32_param(p).float().cpu(), want):
            bad.append(n)
    check(f"bf16 stage {stage}: the fp32 master is the bf16-rounded weights ({moved} of them "
          f"differ from the exact values)", not bad and moved > 0, f"differ: {bad}")
    engine.close()


def check_counters_without_blob(stage, root):
    """A zinc checkpoint saved through the C API (no client blob): global_steps goes on from the
    engine's own count after the load (it restarted at 0 once step() counted on its own)."""
    from zinc._lib import lib
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
         "zero_optimization": {"stage": stage}}
    d = os.path.join(root, f"noblob{stage}")

    def make():
        torch.manual_seed(0)
        return zinc.initialize(model=torch.nn.Linear(4, 2), config=c)[0]

    def one_step(engine):
        engine.backward(engine(torch.ones(1, 4)).sum())
        engine.step()
    engine = make()
    for _ in range(3):
        one_step(engine)
    engine._call(lib.zinc_ckpt_save(engine._e, d.encode(), b"t3", None))
    engine._call(lib.zinc_ckpt_wait(engine._e))
    engine.close()
    engine = make()
    engine.load_checkpoint(d, "t3")
    at_load = engine.global_steps
    one_step(engine)
    check(f"stage {stage}: global_steps after loading a blob-less checkpoint at step 3, then "
          f"one step: 3, 4", (at_load, engine.global_steps) == (3, 4),
          f"{at_load}, {engine.global_steps}")
    engine.close()


def check_stage0_fp16_units(stage, root):
    """fp16 at ZeRO stage 0 as DeepSpeed 0.19.8 runs it: its engine.backward does not scale the
    loss (it scales only for a ZeROOptimizer, which its stage-0 fp16 optimizers are not), yet
    their step divides the gradient by the loss scale, so Adam's first exp_avg is
    (1 - beta1) * g / scale (measured in DeepSpeed: the gradient Adam saw was 127.98x smaller
    than the true one at a static scale of 128); get_global_grad_norm is the unscaled loss's
    gradient norm. At stage 1 the loss is scaled and Adam sees g. zinc scaled the loss at
    stage 0 too: moments in other units than a DeepSpeed checkpoint's (a resume of one went
    another way) and overflows DeepSpeed does not have."""
    if stage != 1:          # (runs stages 0 and 1 itself)
        return
    x = torch.linspace(-1.0, 1.0, 32).reshape(4, 8)
    ref = Gain()
    (ref(x) ** 2).mean().backward()
    g_true = torch.cat([ref.w.grad, ref.b.grad])
    # get_global_grad_norm at stage 0 as DeepSpeed's two fp16 optimizers give it: the config's
    # AdamW is its FusedAdam under FP16_Optimizer (the norm over the scale), torch_adam a torch
    # AdamW under FP16_UnfusedOptimizer (the norm itself); at stage 1 the norm
    for s, divisor, torch_adam, norm_div in ((0, 128.0, False, 128.0), (0, 128.0, True, 1.0),
                                             (1, 1.0, False, 1.0)):
        c = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.0,
             "fp16": {"enabled": True, "loss_scale": 128},
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": torch_adam,
                                                        "weight_decay": 0.0}},
             "zero_optimization": {"stage": s}}
        model = Gain()
        engine = zinc.initialize(model=model, config=c)[0]
        engine.backward((engine(x.half()).float() ** 2).mean())
        engine.step()
        m = torch.cat([safe_get_full_optimizer_state(p, "exp_avg").float().flatten()
                       for p in (model.w, model.b)])
        ratio = float((0.1 * g_true).norm() / m.norm())
        check(f"fp16 stage {s}, torch_adam {torch_adam}: Adam's exp_avg is 0.1 x the gradient "
              f"over {divisor:g} (DeepSpeed's)", abs(ratio / divisor - 1) < 1e-2, f"ratio {ratio}")
        norm = engine.get_global_grad_norm()
        want = float(g_true.norm()) / norm_div
        check(f"fp16 stage {s}, torch_adam {torch_adam}: get_global_grad_norm is the gradient's "
              f"norm over {norm_div:g}", abs(norm / want - 1) < 1e-2, f"{norm} vs {want}")
        engine.save_checkpoint(os.path.join(root, f"units{s}{int(torch_adam)}"), tag="t")
        engine.close()
    # A checkpoint's moments carried between fp16 at stage 0 and another stage change units:
    # the load says so (rank 0), and not between two alike
    for saved, s, warned in (("units00", 1, True), ("units10", 0, True), ("units00", 0, False),
                             ("units10", 1, False)):
        c = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.0,
             "fp16": {"enabled": True, "loss_scale": 128},
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
             "zero_optimization": {"stage": s}}
        engine = zinc.initialize(model=Gain(), config=c)[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.load_checkpoint(os.path.join(root, saved))
        said = any("units" in str(w.message) for w in caught)
        check(f"a stage-{saved[5]} fp16 checkpoint loaded at stage {s}: "
              f"{'a' if warned else 'no'} warning of the moments' units",
              said == (warned and engine.global_rank == 0), str([str(w.message) for w in caught]))
        engine.close()


def check_one_cycle_past_one(stage):
    """The config's OneCycle grows beta1 past 1 after its cycle (decay_mom_rate): the step says
    so naming the scheduler's keys (the front-end blamed param_groups, which the script never
    set)."""
    model = torch.nn.Linear(4, 2)
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
         "zero_optimization": {"stage": stage},
         "scheduler": {"type": "OneCycle", "params": {
             "cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 2,
             "cycle_momentum": True, "decay_step_size": 1, "decay_mom_rate": 0.1}}}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(), config=c)

    def run():
        for i in range(8):
            engine.backward(engine(torch.ones(1, 4) * i).sum())
            engine.step()
    check_raises(f"stage {stage}: OneCycle's beta1 past 1 names decay_mom_rate", run,
                 zinc.ZincError, "OneCycle", "decay_mom_rate")
    engine.close()


def check_config_error_once(stage):
    """A rejected config raises ZincError naming the key, and zinc's C log does not print the
    same error before it (it printed every config error to stderr, then the exception again);
    with two errors both are logged, since the exception names the first."""
    model = torch.nn.Linear(4, 2)
    for bad, logged in (({"bogus_key": 3}, 0), ({"bogus_key": 3, "other_key": 4}, 2)):
        c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
             "zero_optimization": dict({"stage": stage}, **bad)}
        raised = []

        def create():
            try:
                zinc.initialize(model=model, model_parameters=model.parameters(), config=c)
            except zinc.ZincError as ex:
                raised.append(str(ex))
        err = stderr_of(create)
        check(f"stage {stage}: a config with {len(bad)} bad key(s) raises naming the first, "
              f"{logged} log line(s)", len(raised) == 1 and "zero_optimization.bogus_key" in
              raised[0] and err.count("unknown key") == logged, f"{raised} / log {err!r}")


def check_not_fp32_warned(stage):
    """fp32 mode trains every parameter in float32: a float64 model is cast, which DeepSpeed
    would not do; rank 0 says so once, naming a parameter; a float32 model gets no warning."""
    for dtype, want in ((torch.float64, 1), (torch.float32, 0)):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(dtype)
        c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
             "zero_optimization": {"stage": stage}}
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                              config=c)
        said = [str(w.message) for w in seen if "are not float32" in str(w.message)]
        if engine.global_rank != 0:
            want = 0
        check(f"{dtype} parameters in fp32 mode: {want} warning(s) on rank {engine.global_rank}",
              len(said) == want and all("4 trained parameter(s)" in m and "'0.weight'" in m
                                        for m in said), str(said))
        engine.close()


def main():
    stage, root = int(sys.argv[1]), sys.argv[2]
    model = net()
    engine, opt, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                        config=cfg(stage, True if stage == 3 else None))
    rank, world = engine.global_rank, engine.world_size
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
    engine._mean_over_ranks([0.0])      # a barrier: the directory is gone on every rank

    # ---- accessors -------------------------------------------------------------------------
    seen, steps = [], []
    for i in range(3 * GA):
        micro_step(engine, i)
        seen.append(engine.is_gradient_accumulation_boundary())
        engine.step()
        steps.append(engine.global_steps)
    check("is_gradient_accumulation_boundary", seen == [False, True] * 3, str(seen))
    check("global_steps at the boundaries", steps == [0, 1, 1, 2, 2, 3], str(steps))
    check("train_batch_size", engine.train_batch_size() == MICRO * GA * world,
          str(engine.train_batch_size()))
    check("device", engine.device == torch.device("cpu"), str(engine.device))
    check("engine.optimizer is initialize's, its groups carry the lr",
          engine.optimizer is opt and engine.optimizer.param_groups[0]["lr"] == engine.get_lr()[0],
          f"{engine.optimizer.param_groups[0]['lr']} vs {engine.get_lr()}")
    check("no scheduler section: engine.lr_scheduler is None, as DeepSpeed's",
          engine.lr_scheduler is None, repr(engine.lr_scheduler))
    # DeepSpeed's engine passes what it does not have through to the module.
    x = torch.randn(MICRO, 6).to(torch.bfloat16)
    check("a module attribute through the engine", engine.labels == ("x", "y", "z"))
    check("a module method through the engine runs the forward (gathered at stage 3)",
          torch.equal(engine.predict(x), engine(x).argmax(-1)))
    try:
        engine.no_such_thing
        check("a name neither has raises AttributeError", False)
    except AttributeError as ex:
        check("a name neither has raises AttributeError", "no_such_thing" in str(ex), str(ex))
    # DeepSpeed engine methods zinc does not offer raise NotImplementedError naming the method,
    # whatever the arguments.
    for name, args in (("load_module_state_dict", ({},)), ("allreduce_gradients", ()),
                       ("get_sequence_parallel_group", ()),
                       ("set_data_post_process_func", (None,)),
                       ("set_custom_curriculum_learning_schedule", ({},))):
        try:
            got = getattr(engine, name)(*args)
            check(f"engine.{name}() raises NotImplementedError", False, f"returned {got!r}")
        except NotImplementedError as ex:
            check(f"engine.{name}() raises NotImplementedError", f"engine.{name}()" in str(ex),
                  str(ex))
        except Exception as ex:        # an AttributeError: the name fell through to the model
            check(f"engine.{name}() raises NotImplementedError", False, repr(ex))
    # compile(): the engine's, where the model has the name too
    try:
        got = engine.compile()
        ok = (engine._stage < 3 and hasattr(torch.nn.Module, "compile") and got is None and
              engine.is_compiled and engine.module.compiled_with == {"backend": "inductor"})
        check("engine.compile(): the engine's, calling the model's compile(backend='inductor')",
              ok, f"returned {got!r}, is_compiled {engine.is_compiled}")
    except NotImplementedError as ex:
        check("engine.compile() at stage 3 raises NotImplementedError naming it",
              engine._stage == 3 and "engine.compile() at ZeRO stage 3" in str(ex)
              and not engine.is_compiled, str(ex))
    except RuntimeError as ex:
        check("engine.compile() without Module.compile (torch < 2.2) raises RuntimeError",
              not hasattr(torch.nn.Module, "compile") and "not supported in your version of "
              "PyTorch" in str(ex) and not engine.is_compiled, str(ex))
    # DeepSpeed's defaults where the config is silent: clipping 1.0 (since 0.19.3),
    # steps_per_print None (constants.py STEPS_PER_PRINT_DEFAULT; zinc said 10), Adam's betas
    # (0.9, 0.999); the loss scale 1 without fp16.
    check("config accessors (bf16 config)",
          (engine.bfloat16_enabled(), engine.fp16_enabled(), engine.amp_enabled(),
           engine.gradient_clipping(), engine.steps_per_print(), engine.zero_offload_optimizer(),
           engine.zero_offload_param(), engine.zero_cpu_offload(), engine.get_mom(),
           engine.dp_world_size, opt.cur_scale)
          == (True, False, False, 1.0, None, None, None, False, [(0.9, 0.999)], world, 1.0),
          str((engine.bfloat16_enabled(), engine.fp16_enabled(), engine.gradient_clipping(),
               engine.steps_per_print(), engine.zero_offload_optimizer(), engine.get_mom(),
               engine.dp_world_size, opt.cur_scale)))
    check("local_rank (one node: the global rank)", engine.local_rank == rank == zinc.local_rank(),
          f"{engine.local_rank}, zinc.local_rank() {zinc.local_rank()} on rank {rank}")
    if world == 1:
        os.environ["LOCAL_RANK"] = "3"
        check("local_rank is $LOCAL_RANK", engine.local_rank == 3 == zinc.local_rank(),
              f"{engine.local_rank}, zinc.local_rank() {zinc.local_rank()}")
        del os.environ["LOCAL_RANK"]
    if stage < 3:
        model.head.bias.grad = torch.ones_like(model.head.bias)
        engine.zero_grad()
        check("zero_grad", model.head.bias.grad is None)

    # ---- module_state_dict -------------------------------------------------------------------
    sd = engine.module_state_dict()
    want = list(net().state_dict())
    check("module_state_dict keys are model.state_dict()'s", list(sd) == want,
          f"{list(sd)} != {want}")
    check("no non-persistent buffer", "scratch" not in sd)
    check("parameters bf16, the buffer as the module holds it (fp32)",
          all(sd[k].dtype == torch.bfloat16 for k in sd if k != "shift")
          and sd["shift"].dtype == torch.float32 and torch.equal(sd["shift"], model.shift),
          str({k: v.dtype for k, v in sd.items()}))
    check("tied keys hold the same value", torch.equal(sd["a.weight"], sd["b.weight"]))
    check("frozen parameter: the module's, in bf16",
          torch.equal(sd["scale"], model.scale.detach().to(torch.bfloat16)))
    if stage < 3:
        bad = [n for n, p in model.named_parameters()
               if p.requires_grad and not torch.equal(sd[n], p.detach())]
        check("values equal the model's parameters (zinc's working copy)", not bad, str(bad))
    else:
        ok = all(sd[n].shape == p.shape for n, p in net().named_parameters())
        check("stage 3: full shapes", ok)
    ex = engine.module_state_dict(exclude_frozen_parameters=True)
    check("exclude_frozen_parameters", list(ex) == [k for k in want if k != "scale"], str(list(ex)))
    pre = engine.module_state_dict(prefix="module.")
    check("prefix", list(pre) == ["module." + k for k in want], str(list(pre)))
    try:
        engine.module_state_dict(keep_vars=True)
        check("keep_vars=True refused", False, "no exception")
    except NotImplementedError as e:
        check("keep_vars=True refused", "keep_vars" in str(e), str(e))

    # ---- save_16bit_model --------------------------------------------------------------------
    mine = os.path.join(root, f"rank{rank}")
    ok = engine.save_16bit_model(mine)
    check("save_16bit_model returns True", ok is True, str(ok))
    f = os.path.join(root, "rank0", "pytorch_model.bin")
    if rank == 0:
        check("rank 0 wrote the file, no temporary file left",
              os.listdir(os.path.join(root, "rank0")) == ["pytorch_model.bin"],
              str(os.listdir(os.path.join(root, "rank0"))))
        loaded = torch.load(f)
        check("the file's tensors equal module_state_dict", *same_dicts(loaded, sd))
        fresh = Net()
        fresh.load_state_dict(loaded)
        check("a fresh model loads it",
              torch.equal(fresh.head.weight.detach(), sd["head.weight"].float()))
    else:
        check("only rank 0 writes", not os.path.exists(mine), f"{mine} exists")
    # a save killed before its rename left its hidden temporary file: the next save removes
    # those of this host's processes that are gone, and keeps a live one's (nothing removed
    # them: a full-size file per crash)
    if rank == 0:
        import socket
        import subprocess
        gone, recent = subprocess.Popen(["true"]), subprocess.Popen(["true"])
        gone.wait()
        recent.wait()
        with open(f"{os.path.join(mine, '.frozen_out.bin.tmp')}{socket.gethostname()}-"
                  f"{recent.pid}", "wb") as t:    # a dead process's, but written just now
            t.write(b"x")
        stem = os.path.join(mine, f".frozen_out.bin.tmp{socket.gethostname()}-")
        for pid in (gone.pid, os.getppid()):
            with open(f"{stem}{pid}", "wb") as t:
                t.write(b"half a file")
            old = time.time() - 7200      # untouched for two hours (a live save writes on)
            os.utime(f"{stem}{pid}", (old, old))
        with open(f"{stem}{gone.pid + 1}x", "wb") as t:   # not a pid: left alone, no failure
            t.write(b"x")
    engine.save_16bit_model(mine, "frozen_out.bin", exclude_frozen_parameters=True)
    if rank == 0:
        check("save_16bit_model removes a dead process's old temporary file, keeps a live "
              "one's, a recent one's and a name that is no pid",
              not os.path.exists(f"{stem}{gone.pid}") and os.path.exists(f"{stem}{os.getppid()}")
              and os.path.exists(f"{stem}{recent.pid}") and os.path.exists(f"{stem}{gone.pid + 1}x"),
              str(sorted(os.listdir(mine))))
        os.remove(f"{stem}{recent.pid}")
        os.remove(f"{stem}{os.getppid()}")
        os.remove(f"{stem}{gone.pid + 1}x")
        keys = list(torch.load(os.path.join(root, "rank0", "frozen_out.bin")))
        check("save_16bit_model(exclude_frozen_parameters=True)", "scale" not in keys and
              len(keys) == len(want) - 1, str(keys))

    # rank 0 cannot write (the directory would be under a regular file): every rank raises
    blocker = os.path.join(root, "a_file")
    if rank == 0:
        open(blocker, "w").close()
    try:
        engine.save_16bit_model(os.path.join(blocker, "sub"))
        check("a failed write raises on every rank", False, "no exception")
    except OSError:
        check("a failed write raises on every rank", True)

    if stage == 3:
        full = engine._zero3_consolidated_16bit_state_dict()
        if rank == 0:
            check("_zero3_consolidated_16bit_state_dict on rank 0", *same_dicts(full, sd))
        else:
            check("_zero3_consolidated_16bit_state_dict elsewhere None", full is None)
        engine.close()
        model = net()
        engine, *_ = zinc.initialize(model=model, config=cfg(3))
        micro_step(engine, 0)
        engine.step()
        off = os.path.join(root, f"off{rank}")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = engine.save_16bit_model(off)
        named = [x for x in w if "stage3_gather_16bit_weights_on_model_save" in str(x.message)]
        check("stage 3 without the key: False, nothing written",
              r is False and not os.path.exists(off), f"returned {r}")
        check("stage 3 without the key: a warning naming it (rank 0)",
              len(named) == (1 if rank == 0 else 0), str([str(x.message) for x in w]))
    else:
        try:
            engine._zero3_consolidated_16bit_state_dict()
            check("_zero3_consolidated_16bit_state_dict refused below stage 3", False)
        except ValueError:
            check("_zero3_consolidated_16bit_state_dict refused below stage 3", True)
    # ---- evaluation -------------------------------------------------------------------------
    # engine.eval() and a forward under no_grad / inference_mode (a validation loop): at stage 3
    # the hooks gather and release without autograd; the output is the plain model's with
    # module_state_dict's weights; training goes on afterwards.
    plain = net().to(torch.bfloat16)
    plain.load_state_dict(engine.module_state_dict())
    x = torch.randn(MICRO, 6, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    with torch.no_grad():
        want = plain(x)
    returned = engine.eval()
    # As DeepSpeed 0.19.8's: the model's flag changes, the engine's own stays, None returned
    # (zinc's, torch's Module.eval, returned the engine and cleared engine.training).
    check("engine.eval(): the model in eval mode, engine.training kept, None returned",
          not engine.module.training and engine.training and returned is None,
          f"module {engine.module.training} engine {engine.training} returned {returned!r}")
    for name, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
        with ctx():
            out = engine(x)
        check(f"eval under {name}: the plain model's output", torch.equal(out, want),
              f"max difference {float((out.float() - want.float()).abs().max())}")
    returned = engine.train()
    check("engine.train(): the model in training mode, None returned",
          engine.module.training and engine.training and returned is None)
    before = engine.module_state_dict()
    for i in range(GA):                  # one whole accumulation window: an optimizer step
        micro_step(engine, 99 + i)
        engine.step()
    after = engine.module_state_dict()
    moved = [k for k in before if before[k].is_floating_point() and not torch.equal(before[k], after[k])]
    check("training after evaluation: the step moved the weights, all finite",
          "head.weight" in moved and all(torch.isfinite(v.float()).all() for v in after.values()),
          f"moved {moved}")
    # save_checkpoint keeps the persistent buffer and the frozen parameter (rank 0's), as
    # DeepSpeed's module state; load_checkpoint puts them back, without a warning.
    ck = os.path.join(root, f"ckpt{world}")
    engine.save_checkpoint(ck)
    want, want_scale = model.shift.clone(), model.scale.detach().clone()
    with torch.no_grad():
        model.shift.add_(1.0)
        model.scale.mul_(3.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.load_checkpoint(ck)
    check("load_checkpoint restores the persistent buffer", torch.equal(model.shift, want),
          f"{model.shift} vs {want}")
    check("load_checkpoint restores the frozen parameter", torch.equal(model.scale, want_scale),
          f"{model.scale} vs {want_scale}")
    said = [str(w.message) for w in caught if "does not train" in str(w.message)]
    check("a checkpoint holding the frozen parameter loads without a warning", not said,
          str(said))
    # Saved with exclude_frozen_parameters=True: the strict load raises naming the parameter
    # (DeepSpeed's strict module load: a missing key); load_module_strict=False (how Hugging
    # Face's Trainer resumes a PEFT model) keeps the model's value, without a warning.
    ck_ex = os.path.join(root, f"ckpt_ex{world}")
    engine.save_checkpoint(ck_ex, exclude_frozen_parameters=True)
    with torch.no_grad():
        model.scale.mul_(3.0)
    changed = model.scale.detach().clone()
    check_raises("exclude_frozen_parameters=True: the strict load raises naming it",
                 lambda: engine.load_checkpoint(ck_ex), ValueError, "scale",
                 "load_module_strict=False")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.load_checkpoint(ck_ex, load_module_strict=False)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    check("... load_module_strict=False keeps the model's frozen parameter, without a warning",
          torch.equal(model.scale, changed) and not said, str(said))
    engine.load_checkpoint(ck)
    check_buffer_strictness(engine, model, ck, root)
    # A blob larger than the reader's first buffer (big buffers): read again with the room.
    import zinc._state_io as zio
    cap, zio._BLOB_CAP = zio._BLOB_CAP, 256
    with torch.no_grad():
        model.shift.add_(1.0)
        model.scale.mul_(3.0)
    try:
        engine.load_checkpoint(ck)
    finally:
        zio._BLOB_CAP = cap
    check("load_checkpoint of a blob over the first buffer's size",
          torch.equal(model.shift, want) and torch.equal(model.scale, want_scale))
    check_client_state(engine, os.path.join(root, f"ckpt_client{world}"))
    engine.close()
    check_fp16_accessors(stage)
    check_step_counters(stage, root)
    check_client_accessors()
    check_grad_accum_fp32(stage)
    check_freeze_changes(stage, root)
    check_no_sync(stage)
    check_zero_grad_in_window(stage)
    check_config_scheduler(stage)
    check_accum_boundary(stage)
    check_batch_size(stage)
    check_backward_frees_graph(stage)
    check_two_engines(stage)
    check_not_fp32_warned(stage)
    check_config_error_once(stage)
    check_master_from_16bit(stage)
    check_one_cycle_past_one(stage)
    check_stage0_fp16_units(stage, root)
    check_counters_without_blob(stage, root)
    print(f"rank {rank}: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
