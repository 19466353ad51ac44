"""_accessors.py — DeepSpeed's engine accessors: the step counters, the config as zinc resolved it
(fp16_enabled(), zero_optimization_stage(), the zero_* values, ...), the batch sizes and their
setters, deepspeed_io and zero_grad; the model's own attributes passed through (__getattr__);
and the DeepSpeed methods zinc does not offer, each raising NotImplementedError naming it.

_AccessorsMixin is one of the parts of engine.py's Engine; the accessors read what the engine
holds (self._resolved, the config zinc resolved; self._info, the last step's; ...).
"""
import json
import operator
import warnings

import torch

from . import dataloader as _dataloader
from ._lib import ZINC_ERR_INVALID_ARG, ZincError, lib
from ._memory import _TORCH_DTYPE
from ._optimizer import _Scheduler, _scalar
from ._world import local_rank


class _AccessorsMixin:
    """DeepSpeed's engine accessors over what the Engine holds."""

    # ---- DeepSpeed's accessors ------------------------------------------------------------

    def __getattr__(self, name):
        """What the engine does not have comes from the model, as DeepSpeed's engine passes it
        through (engine.generate(...); not engine.config, which is the engine's: `config`).
        Not names with a leading underscore: the engine's own private state must never resolve
        to the model's."""
        try:
            return super().__getattr__(name)     # torch's: parameters, buffers, submodules
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is None or name.startswith("_"):
                raise
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}', "
                                 "nor has its module") from None

    @property
    def config(self):
        """The config as a dict, as DeepSpeed's engine.config is the config it was given, a
        file's read into a dict (the Hugging Face Trainer reads
        engine.config.get("zero_optimization") when it saves). zinc's is a copy, with a client
        optimizer's section where one was given, and without the "scheduler" section where a
        client scheduler replaced it. A model's own `config` (a transformers
        model's) is engine.module.config; before 2026-11-30 engine.config passed through to it."""
        return self._cfg

    @property
    def optimizer(self):
        """What initialize returned as the optimizer (DeepSpeed's engine.optimizer)."""
        return self._opt

    @property
    def lr_scheduler(self):
        """The client LR scheduler, else the config's (DeepSpeed's engine.lr_scheduler); None
        without either, as DeepSpeed's."""
        if self._client_sched is not None:
            return self._client_sched
        if self._resolved.get("scheduler") is None:
            return None
        if self._sched_view is None:
            self._sched_view = _Scheduler(self)
        return self._sched_view

    @property
    def global_steps(self):
        """DeepSpeed's: the optimizer steps taken, those skipped for an fp16 overflow too."""
        return self._steps

    @property
    def skipped_steps(self):
        """DeepSpeed's: the optimizer steps skipped for an fp16 gradient overflow."""
        return self._skipped

    @property
    def global_samples(self):
        """DeepSpeed's: the samples the optimizer steps trained on, train_batch_size per step
        (with managed_gradient_accumulation false, those of the micro-batches each ran)."""
        return self._samples

    def get_lr(self):
        """The lr of each of the optimizer's param groups, as DeepSpeed's."""
        return [float(_scalar(g["lr"])) for g in self._opt.param_groups]

    def was_step_applied(self):
        """DeepSpeed's: whether the last engine.step() applied an optimizer update — False after
        one inside an accumulation window (no update) or skipped for an fp16 overflow."""
        return self._step_applied

    @property
    def micro_steps(self):
        """DeepSpeed's: the micro-steps (engine.step() calls that ended one) since the engine
        was built, not restored by a checkpoint load (DeepSpeed's checkpoint has none)."""
        return self._micro_steps

    def get_global_grad_norm(self):
        """DeepSpeed's: the global L2 norm of the unscaled gradient before clipping, from the
        last optimizer step; None before the engine's first optimizer step (DeepSpeed's engine
        starts with _global_grad_norm = None and sets it only in _take_model_step), and
        float("inf") after a step skipped for a non-finite gradient (DeepSpeed's ZeRO and fp16
        optimizers set inf on overflow; zinc's step reports nan for a nan gradient, which
        DeepSpeed never returns). None at stage 0 in fp32, as DeepSpeed's there.
        Of DeepSpeed 0.19.8's type and precision: at stages 1-2 a 0-dim float32 tensor (its
        ZeRO optimizer divides the norm tensor by the loss scale), at stage 3 a float64 one, on
        the engine's device, so a script's `.item()` works; at stage 0 a float."""
        if not self._info.boundary:
            return None
        if self._stage == 0 and self._code == 0:
            # fp32 at stage 0: DeepSpeed steps a plain optimizer (torch's, or FusedAdam), which
            # has no _global_grad_norm, and its clipping drops the norm clip_grad_norm_ returns
            return None
        if self._info.skipped:
            return float("inf")
        if self._raw_grad_norm:
            # fp16 at stage 0 with DeepSpeed's FP16_UnfusedOptimizer (engine.py): the norm of
            # the unscaled loss's gradient itself; zinc's step reports it divided by the scale
            # after the step's update (FP16_Optimizer's)
            return float(self._info.grad_norm * self._info.next_loss_scale)
        norm = float(self._info.grad_norm)
        if self._stage > 0:
            dtype = torch.float64 if self._stage == 3 else torch.float32
            return torch.tensor(norm, dtype=dtype, device=self._device)
        return norm

    def train_micro_batch_size_per_gpu(self):
        return self._micro

    def gradient_accumulation_steps(self):
        return self._ga

    def zero_optimization_stage(self):
        return self._stage

    @property
    def global_rank(self):
        return lib.zinc_engine_rank(self._e)

    @property
    def world_size(self):
        return lib.zinc_engine_world_size(self._e)

    @property
    def device(self):
        """The torch.device the model is on (DeepSpeed's engine.device): the CPU or the one CUDA
        device zinc opened."""
        return self._device

    @property
    def local_rank(self):
        """This process's index among the ranks of its node (DeepSpeed's engine.local_rank, which
        is int(LOCAL_RANK) once its launcher or MPI discovery has set it). On CUDA the GPU zinc
        opened, which zinc chose by that same index. On the CPU zinc.local_rank(): the
        launcher's environment, else 0 (a world of one: DeepSpeed's MPI discovery of a single
        process)."""
        if self._cuda:
            return lib.zinc_engine_cuda_device(self._e)
        return local_rank()

    def train_batch_size(self):
        """The global batch of one optimizer step: micro batch x accumulation steps x ranks."""
        return int(self._resolved["train_batch_size"])

    def _read_batch(self):
        """The resolved config (zinc_engine_config_json; DeepSpeed's batch rule as zinc's config
        module applied it, or zinc_set_batch_size's values) and the batch sizes from it."""
        self._resolved = json.loads(lib.zinc_engine_config_json(self._e).decode())
        self._micro = int(self._resolved["train_micro_batch_size_per_gpu"])
        self._ga = int(self._resolved["gradient_accumulation_steps"])

    def set_train_batch_size(self, train_batch_size):
        """DeepSpeed's: the global batch from the next accumulation window on, by changing
        gradient_accumulation_steps (the micro batch stays). ValueError, as DeepSpeed's, unless
        it is a multiple of micro batch x ranks. Between windows only (zinc_set_batch_size:
        after the step() that ended one, or before the first backward): inside one, whose losses
        were scaled by the old steps, ZincError (a RuntimeError) — DeepSpeed's takes it anywhere
        and counts the new steps against its global micro-step count, so its first window after
        a change can be shorter. Every rank must pass the same value."""
        n = operator.index(train_batch_size)
        unit = self._micro * self.world_size
        if n % unit != 0:
            raise ValueError("Train batch size must be divisible by micro-batch data parallelism "
                             f"(zinc: {n} is not a multiple of train_micro_batch_size_per_gpu "
                             f"{self._micro} x {self.world_size} ranks)")
        self._set_batch(self._micro, n // unit)

    def set_train_micro_batch_size(self, micro_batch_size):
        """DeepSpeed's: the micro batch from the next accumulation window on, the accumulation
        steps kept (train_batch_size follows). As set_train_batch_size, between windows only.
        The loader initialize(training_data=...) built keeps its batch size, as DeepSpeed's."""
        self._set_batch(operator.index(micro_batch_size), self._ga)

    def _set_batch(self, micro, ga):
        if self._unsynced or self._in_backward:
            raise RuntimeError("zinc: the batch sizes change between accumulation windows only: "
                               "gradients of this window are pending (a backward inside "
                               "no_sync(), or one running); call it after the step that ends "
                               "the window")
        try:
            self._call(lib.zinc_set_batch_size(self._e, micro, ga))
        except ZincError as ex:     # a value below 1 or too large: zinc's message
            if ex.status == ZINC_ERR_INVALID_ARG:
                raise ValueError(str(ex)) from ex
            raise
        self._read_batch()

    def is_gradient_accumulation_boundary(self):
        """True when the current micro-batch ends the accumulation window, so that the next
        engine.step() reduces the gradients and runs the optimizer: what
        set_gradient_accumulation_boundary set, else gradient_accumulation_steps - 1 micro-steps
        since the last one; always False with managed_gradient_accumulation false (DeepSpeed's
        is True only inside step(), which is always the boundary there). zinc_engine_at_boundary,
        the value zinc_step acts on."""
        return bool(lib.zinc_engine_at_boundary(self._e))

    def managed_gradient_accumulation(self):
        """The config's managed_gradient_accumulation (DeepSpeed 0.19.8; default True)."""
        return self._managed

    def zero_gather_16bit_weights_on_model_save(self):
        """The config's zero_optimization.stage3_gather_16bit_weights_on_model_save (or an
        alias), as zinc resolved it."""
        return bool(lib.zinc_engine_gather_16bit_on_save(self._e))

    # DeepSpeed's config accessors, from the resolved config (scripts test fp16_enabled() to
    # cast their inputs, say).

    def fp16_enabled(self):
        return bool(self._resolved["fp16"]["enabled"])

    def bfloat16_enabled(self):
        return bool(self._resolved["bf16"]["enabled"])

    def amp_enabled(self):
        """Always False: zinc refuses the config's "amp" section."""
        return False

    def gradient_clipping(self):
        return float(self._resolved["gradient_clipping"])

    def steps_per_print(self):
        """DeepSpeed 0.19.8's: the config's value, None where it is silent (its default since
        it stopped printing by default; zinc train's progress lines default to 10 instead)."""
        given = self._cfg.get("steps_per_print")
        if given is None:
            return None
        if given == float("inf"):      # accelerate's "never" (_config_json)
            return given
        return int(self._resolved["steps_per_print"])

    def wall_clock_breakdown(self):
        return bool(self._resolved["wall_clock_breakdown"])

    def loss_scale(self):
        """The config's fp16.loss_scale (0: dynamic), as DeepSpeed's; the scale in use is
        engine.optimizer.cur_scale."""
        return float(self._resolved["fp16"]["loss_scale"])

    def dynamic_loss_scale(self):
        return self.loss_scale() == 0

    def zero_offload_optimizer(self):
        """The resolved zero_optimization.offload_optimizer section (a dict) when it offloads,
        else None."""
        sec = self._resolved["zero_optimization"]["offload_optimizer"]
        return dict(sec) if sec.get("device", "none") != "none" else None

    def zero_offload_param(self):
        """The resolved zero_optimization.offload_param section when it offloads, else None."""
        sec = self._resolved["zero_optimization"]["offload_param"]
        return dict(sec) if sec.get("device", "none") != "none" else None

    def zero_cpu_offload(self):
        sec = self.zero_offload_optimizer()
        return sec is not None and sec["device"] == "cpu"

    def zero_optimization(self):
        return self._stage > 0

    def zero_optimization_partition_gradients(self):
        return self._stage >= 2

    def zero_optimization_partition_weights(self):
        return self._stage >= 3

    def optimizer_name(self):
        """A client optimizer's class name, else the config's optimizer type (lower case, as
        DeepSpeed's for its own optimizers)."""
        if self._opt._client is not None:
            return type(self._opt._client).__name__
        return str(self._cfg["optimizer"]["type"]).lower() if "optimizer" in self._cfg else None

    def optimizer_params(self):
        """The config's optimizer params as written (None with a client optimizer, which
        DeepSpeed does not allow beside the config's)."""
        if self._opt._client is not None or "optimizer" not in self._cfg:
            return None
        return self._cfg["optimizer"].get("params")

    def scheduler_name(self):
        return (self._cfg.get("scheduler") or {}).get("type")

    def scheduler_params(self):
        return (self._cfg.get("scheduler") or {}).get("params")

    def get_batch_info(self):
        """(train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps)."""
        return self.train_batch_size(), self._micro, self._ga

    def postscale_gradients(self):
        return not self._resolved["prescale_gradients"]

    def gradient_predivide_factor(self):
        return float(self._resolved["gradient_predivide_factor"])

    def get_mom(self):
        """Adam's betas of each of the optimizer's param groups, as DeepSpeed's."""
        return [tuple(_scalar(b) for b in g["betas"]) for g in self._opt.param_groups]

    @property
    def dp_world_size(self):
        return self.world_size

    def dataloader_drop_last(self):
        return bool(self._resolved.get("dataloader_drop_last", False))

    def get_data_parallel_rank(self):
        """zinc is data parallel only: the data-parallel rank is the global rank."""
        return self.global_rank

    def get_model_parallel_rank(self):
        """Always 0: zinc has no tensor or model parallelism (a group of one)."""
        return 0

    get_tensor_parallel_rank = get_model_parallel_rank

    @property
    def communication_data_type(self):
        """The config's communication_data_type, as DeepSpeed's property: the working dtype (its
        default when the key is not set) or fp32, the two zinc takes (both its one fp32 sum; the
        other 16-bit dtype is refused). A property, as in DeepSpeed 0.19.8: a method here made
        `engine.communication_data_type` a bound method where a script compares a dtype."""
        if str(self._resolved.get("communication_data_type", "")).lower() == "fp32":
            return _TORCH_DTYPE[0]
        return _TORCH_DTYPE[self._code]

    @communication_data_type.setter
    def communication_data_type(self, value):
        """DeepSpeed's setter changes the reduction's dtype from the next step on. zinc fixes it
        when the engine is made (the config's key), so only the dtype in force is taken (None,
        DeepSpeed's "the default", where that is the working dtype); any other raises rather
        than being dropped, since it changes the math."""
        now = self.communication_data_type
        if value == now or (value is None and now == _TORCH_DTYPE[self._code]):
            return
        raise NotImplementedError(
            f"engine.communication_data_type = {value!r}: zinc reduces in {now}, fixed when the "
            "engine is made; give \"communication_data_type\" in the config instead")

    def get_data_types(self):
        """(model dtype, gradient accumulation dtype), as DeepSpeed's: the working dtype twice,
        or with data_types.grad_accum_dtype "fp32" (16-bit training at stages 1-3) fp32 second."""
        acc = self._resolved.get("data_types", {}).get("grad_accum_dtype")
        return _TORCH_DTYPE[self._code], (_TORCH_DTYPE[0] if acc == "fp32"
                                          else _TORCH_DTYPE[self._code])

    def fp16_auto_cast(self):
        """Always False: zinc refuses fp16.auto_cast true (it would change the model's math)."""
        return False

    def initial_dynamic_scale(self):
        """2^fp16.initial_scale_power, the dynamic loss scale's start (with fp16 off too, as
        DeepSpeed's)."""
        return 2 ** int(self._resolved["fp16"]["initial_scale_power"])

    def dynamic_loss_scale_args(self):
        """The dynamic loss scaler's settings under DeepSpeed's key names."""
        fp16 = self._resolved["fp16"]
        return {"init_scale": self.initial_dynamic_scale(),
                "scale_window": int(fp16["loss_scale_window"]),
                "delayed_shift": int(fp16["hysteresis"]),
                "consecutive_hysteresis": bool(fp16["consecutive_hysteresis"]),
                "min_scale": fp16["min_loss_scale"]}

    def checkpoint_tag_validation_enabled(self):
        return self._resolved["checkpoint"]["tag_validation"].lower() != "ignore"

    def checkpoint_tag_validation_fail(self):
        return self._resolved["checkpoint"]["tag_validation"].lower() == "fail"

    def load_universal_checkpoint(self):
        """The config's checkpoint.load_universal. Every zinc checkpoint loads at any world size
        and stage either way."""
        return bool(self._resolved["checkpoint"]["load_universal"])

    def use_node_local_storage(self):
        return bool(self._resolved["checkpoint"]["use_node_local_storage"])

    def zero_use_cpu_optimizer(self):
        """True when the config's offload_optimizer.device is cpu or nvme, as DeepSpeed's (the
        value as configured: docs/config.md says where zinc honours it)."""
        return self.zero_offload_optimizer() is not None

    def zero_load_from_fp32_weights(self):
        """Always True: zinc refuses load_from_fp32_weights false; loads restore the fp32
        master weights."""
        return True

    @property
    def is_compiled(self):
        """True once compile() compiled the model. A property, as DeepSpeed 0.19.8's: as a
        method, `if engine.is_compiled:` was always true."""
        return bool(self.__dict__.get("_zinc_compiled", False))

    def compile(self, backend="inductor", compile_kwargs=None, schedule=None,
                compiled_autograd_enabled=False):
        """DeepSpeed 0.19.8's engine.compile(): the model compiled in place by torch.compile
        (nn.Module.compile, torch 2.2 or later) with `backend` (DeepSpeed's default for the
        CPU and CUDA accelerators: inductor) and compile_kwargs; a second call does nothing.
        ZeRO stages 0-2: the engine's forward is the model's, and its gradient hooks are on the
        parameters' AccumulateGrad nodes, which a compiled backward reaches as an eager one
        does (python_compile checks the training against the uncompiled engine's). Not offered
        (NotImplementedError): stage 3, whose hooks gather and release the parameters around
        each module; DeepCompile's `schedule`; compiled autograd."""
        compile_kwargs = dict(compile_kwargs or {})
        if not hasattr(torch.nn.Module, "compile"):
            raise RuntimeError("compile is not supported in your version of PyTorch.")
        if self._stage == 3:
            raise NotImplementedError("zinc: engine.compile() at ZeRO stage 3: zinc's stage-3 "
                                      "hooks gather and release each module's parameters "
                                      "around its forward and backward, which a compiled graph "
                                      "would not run; compile at stages 0-2")
        if schedule is not None:
            raise NotImplementedError("zinc: engine.compile(schedule=...): DeepSpeed's "
                                      "DeepCompile is not offered")
        if compiled_autograd_enabled:
            raise NotImplementedError("zinc: engine.compile(compiled_autograd_enabled=True): "
                                      "compiled autograd is not offered (zinc's gradient hooks "
                                      "run in the eager backward)")
        if self.is_compiled:
            return
        if "backend" in compile_kwargs:
            warnings.warn("zinc: engine.compile: the `backend` in compile_kwargs is overridden; "
                          "use the backend argument (as DeepSpeed's)", stacklevel=2)
        self.module.compile(**{**compile_kwargs, "backend": backend})
        self.__dict__["_zinc_compiled"] = True    # (not through nn.Module's setter)

    def destroy(self):
        """DeepSpeed's engine.destroy(): releases the engine, as close()."""
        self.close()

    # ---- data -----------------------------------------------------------------------------

    def deepspeed_io(self, dataset, batch_size=None, route="train", pin_memory=True,
                     data_sampler=None, collate_fn=None, num_local_io_workers=None):
        """DeepSpeed's deepspeed_io: a loader giving this rank its part of a map-style dataset,
        in batches of train_micro_batch_size_per_gpu (or batch_size), through a
        DistributedSampler over the ranks (shuffled, seed 0, for "train" and "encode"; in order
        for "eval" and "predict") unless data_sampler is given; the config's
        dataloader_drop_last; two worker processes unless num_local_io_workers; memory pinned
        only on a CUDA engine. dataloader.py says more."""
        return _dataloader.build(
            dataset, batch_size=self._micro if batch_size is None else batch_size,
            rank=self.global_rank, world_size=self.dp_world_size, route=route,
            pin_memory=bool(pin_memory) and self._cuda, data_sampler=data_sampler,
            collate_fn=self.collate_fn if collate_fn is None else collate_fn,
            num_local_io_workers=num_local_io_workers, drop_last=self.dataloader_drop_last())

    def zero_grad(self):
        """DeepSpeed's engine.zero_grad: sets every model parameter's `.grad` to None, and
        inside an accumulation window at ZeRO stages 0-1 drops what the window summed so far, as
        DeepSpeed's does there (_drop_window_grads). zinc's own gradient buffers are zeroed by
        engine.step() at each optimizer step."""
        self._settle_direct()
        for p in self.module.parameters():
            p.grad = None
        self._drop_window_grads("engine")


# DeepSpeed's accessors of zero_optimization values: engine.<name>() is the key's value as
# zinc resolved it (DeepSpeed's default where the config is silent, overlap_comm's by stage).
_ZERO_ACCESSORS = {
    "zero_reduce_bucket_size": "reduce_bucket_size",
    "zero_allgather_bucket_size": "allgather_bucket_size",
    "zero_overlap_comm": "overlap_comm",
    "zero_contiguous_gradients": "contiguous_gradients",
    "zero_reduce_scatter": "reduce_scatter",
    "zero_allgather_partitions": "allgather_partitions",
    "zero_round_robin_gradients": "round_robin_gradients",
    "zero_sub_group_size": "sub_group_size",
    "zero_max_live_parameters": "stage3_max_live_parameters",
    "zero_max_reuse_distance": "stage3_max_reuse_distance",
    "zero_prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "zero_param_persistence_threshold": "stage3_param_persistence_threshold",
}


def _zero_accessor(key):
    def accessor(self):
        return self._resolved["zero_optimization"][key]
    accessor.__doc__ = f"The resolved zero_optimization.{key} (DeepSpeed's accessor)."
    return accessor


for _name, _key in _ZERO_ACCESSORS.items():
    setattr(_AccessorsMixin, _name, _zero_accessor(_key))


# DeepSpeed engine methods zinc does not offer, and why. Each is a method that raises
# NotImplementedError naming it: without it the name would reach the model (__getattr__), or a
# method of torch's Module, and do something else or fail with an AttributeError.
_NOT_OFFERED = {
    "load_module_state_dict": "load the weights with load_checkpoint(load_module_only=True)",
    "allreduce_gradients": "engine.step() reduces the gradients at the accumulation boundary",
    "get_sequence_parallel_group": "zinc has no sequence parallelism",
    "set_data_post_process_func": "zinc has no data efficiency pipeline",
    "set_custom_curriculum_learning_schedule": "zinc has no curriculum learning",
}


def _not_offered(name, reason):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"zinc: engine.{name}() is not offered: {reason}")
    method.__name__ = name
    method.__doc__ = f"Not offered (raises NotImplementedError): {reason}."
    return method


for _name, _reason in _NOT_OFFERED.items():
    setattr(_AccessorsMixin, _name, _not_offered(_name, _reason))
