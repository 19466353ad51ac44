#!/usr/bin/env python3
"""make_fixtures.py — writes the DeepSpeed checkpoints that tests/python/test_ds_import.py loads
without DeepSpeed. Run by hand from a venv with DeepSpeed 0.19.8 (never by CI):

    DS_ACCELERATOR=cpu /work/main/bench/.venv/bin/python tests/python/ds_fixtures/make_fixtures.py \
        tests/python/ds_fixtures [NAME ...]

Each fixture NAME (e.g. s2_bf16) is DeepSpeed itself, 2 ranks on the CPU (gloo), training a tiny
model (the Net below, 217 parameters, one buffer) for 3 steps, then save_checkpoint(NAME/ckpt,
tag "global_step3", client_state), then 3 more steps. NAME/expected.json holds what DeepSpeed's
own objects said at the save (read back through deepspeed.utils.safe_get_full_fp32_param and
safe_get_full_optimizer_state, the engine's counters, lr, loss scale, the buffer), the data of
all 6 steps, and the fp32 master weights after the 3 steps that follow the save: what a run that
resumes the checkpoint must reach (fp16 also: the same 3 steps with DeepSpeed's loss scale update
moved after its unscale, continued_unscale_before_update). Nothing in expected.json is written
by hand.
The checkpoints are torch.save'd by DeepSpeed with the venv's torch; the test reads them with
CI's torch 1.13 (a zip format both read: checked by the test itself).
"""
import json
import os
import socket
import subprocess
import sys

STEPS_BEFORE, STEPS_AFTER, MICRO = 3, 3, 4

# name -> (stage, dtype).
FIXTURES = {f"s{s}_{d}": (s, d) for s in (0, 1, 2, 3) for d in ("fp32", "bf16")}
# fp16 at stage 2, its dynamic loss scaler pickled into the optimizer files. DeepSpeed's CPU
# accelerator says fp16 is unsupported where oneDNN has no fp16 kernels (this machine:
# torch.ops.mkldnn._is_mkldnn_fp16_supported() is False) and initialize refuses it; torch's
# CPU fp16 kernels train the model all the same, so the check alone is overridden
# (fp16_on_cpu) and the rest is DeepSpeed's own code. A short scale window (2) makes the scale
# grow before the save (256 -> 512), so the scaler's fields are not all their initial values.
FIXTURES["s2_fp16"] = (2, "fp16")
# bf16 at stage 1 with fp32 gradient accumulation: DeepSpeed's BF16_Optimizer, whose files are
# bf16_zero_pp_rank_<r>_mp_rank_00_optim_states.pt.
FIXTURES["s1_bf16_fp32acc"] = (1, "bf16_fp32acc")
# DeepSpeed's default Adam (no torch_adam: its FusedAdam, which counts a group's steps on the
# last parameter's state only) at stage 0, where zinc reads that state per parameter.
FIXTURES["s0_fp32_fused"] = (0, "fp32")
# ... and in bf16, its default stage-0 16-bit optimizer (FP16_Optimizer): one flat fp32 copy
# per param group, and the Adam it wraps sees one parameter per group (zinc refused it, reading
# one state entry per parameter, before 2026-11-30).
FIXTURES["s0_bf16_fused"] = (0, "bf16")
TORCH_ADAM_OFF = {"s0_fp32_fused", "s0_bf16_fused"}
# A frozen parameter at stage 3, kept by DeepSpeed as a piece in each rank's model states file
# (frozen_param_fragments; the module state holds an empty placeholder). 65 elements: each
# rank's piece is 33, the last padded.
FIXTURES["s3_fp32_frozen"] = (3, "fp32")
FROZEN = {"s3_fp32_frozen": ["fc2.weight"]}
# Universal checkpoints: DeepSpeed's own ds_to_universal over a fixture above (its expected.json
# holds: the conversion changes no value). --inject_missing_state: a model without Megatron's
# universal_checkpoint_info (ds_to_universal asks for it otherwise).
UNIVERSAL = {"u2_fp32": "s2_fp32", "u3_bf16": "s3_bf16"}
# Saved before the first step (global_step0): Adam has made no state yet, so the optimizer
# files hold none (zinc's reader crashed on them: a KeyError at stages 1-2, an empty torch.cat
# at 3, "not Adam's (keys [])" at 0). Also what an fp16 run whose every step overflowed saves.
for _s in (0, 2, 3):
    FIXTURES[f"s{_s}_fp32_step0"] = (_s, "fp32")


# Two param groups, DeepSpeed's usual decay / no-decay split: the weights decay 0.01, the biases
# and the LayerNorm none (each group's values come back at a load; from_deepspeed keeps both).
# At stage 0 DeepSpeed keeps no names: zinc takes the order from the loading engine's groups
# (from_deepspeed refuses it); at stage 2 the files name each group's parameters, and
# DeepSpeed's safe_get_full_optimizer_state fails on the second group's slices on 2 ranks
# ("exp_avg not found in optimizer state fragment"), so only the master is recorded there (the
# 3 steps after the load check the moments).
FIXTURES["s0_fp32_groups"] = (0, "fp32")
FIXTURES["s2_fp32_groups"] = (2, "fp32")
GROUPS = {n: (["fc1.weight", "fc2.weight"], 0.0) for n in ("s0_fp32_groups", "s2_fp32_groups")}


def param_groups(model, name):
    """model_parameters for initialize: one group, or GROUPS[name]'s two (the named weights
    with the config's decay, the rest with the given one)."""
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if name not in GROUPS:
        return [p for _, p in trained]
    first, decay = GROUPS[name]
    return [{"params": [p for n, p in trained if n in first]},
            {"params": [p for n, p in trained if n not in first], "weight_decay": decay}]


def steps_before(name):
    """Steps DeepSpeed takes before its save: 3, or 0 for the *_step0 fixtures."""
    return 0 if name.endswith("_step0") else STEPS_BEFORE


def config(stage, dtype, name=""):
    c = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1,
            "steps_per_print": 1 << 30, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95],
                                                      "eps": 1e-8, "weight_decay": 0.01,
                                                      "torch_adam": name not in TORCH_ADAM_OFF}},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0,
                                                         "warmup_max_lr": 1e-2,
                                                         "warmup_num_steps": 10}},
            "bf16": {"enabled": dtype.startswith("bf16")},
            "zero_optimization": {"stage": stage}}
    if dtype == "fp16":
        c["fp16"] = {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 2,
                     "hysteresis": 2}
    if dtype == "bf16_fp32acc":
        c["data_types"] = {"grad_accum_dtype": "fp32"}
    return c


def net(torch):
    class Net(torch.nn.Module):
        """7 -> 13 -> LayerNorm -> 5 (odd sizes, so DeepSpeed pads its partitions), one buffer."""

        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(7, 13)
            self.norm = torch.nn.LayerNorm(13)
            self.fc2 = torch.nn.Linear(13, 5)
            self.register_buffer("shift", torch.arange(5, dtype=torch.float32) / 10)

        def forward(self, x):
            return self.fc2(self.norm(torch.tanh(self.fc1(x)))) + self.shift
    return Net()


def batches(torch):
    """[(x, y)] of every step: the global batch (rank r's micro-batch is rows r*MICRO...)."""
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(2 * MICRO, 7, generator=g), torch.randn(2 * MICRO, 5, generator=g))
            for _ in range(STEPS_BEFORE + STEPS_AFTER)]


def fp16_on_cpu():
    """DeepSpeed's CPU accelerator's fp16 check answers yes (see FIXTURES["s2_fp16"])."""
    from deepspeed.accelerator import get_accelerator
    type(get_accelerator()).is_fp16_supported = lambda self: True


def rank_main(out, stage, dtype):
    import torch
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    if dtype == "fp16":
        fp16_on_cpu()
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    name = os.path.basename(os.path.normpath(out))
    torch.manual_seed(0)
    model = net(torch)
    frozen = FROZEN.get(name, [])
    for n, p in model.named_parameters():
        p.requires_grad_(n not in frozen)
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=param_groups(model, name),
        config=config(stage, dtype, name))
    data = batches(torch)
    cast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype[:4], torch.float32)
    before = steps_before(name)

    def step(i):
        x, y = data[i]
        x, y = x[rank * MICRO:(rank + 1) * MICRO], y[rank * MICRO:(rank + 1) * MICRO]
        loss = torch.nn.functional.mse_loss(engine(x.to(cast)).float(), y)
        engine.backward(loss)
        engine.step()

    for i in range(before):
        step(i)
    engine.save_checkpoint(os.path.join(out, "ckpt"), tag=f"global_step{before}",
                           client_state={"epoch": 7, "note": "client"})
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)

    def full(p, key=None):
        """DeepSpeed's own full fp32 value of p (key None: the master) or of its Adam state;
        at fp32 stage 0 (no ZeRO optimizer, so the accessors give None) the parameter itself
        and torch's optimizer state."""
        if key is not None and before == 0:
            # before the first step the optimizer holds no state (checked here; DeepSpeed's
            # accessors fail on it), and Adam's moments start at zero
            assert not inner.state, "a state before the first step"
            return [0.0] * (p.ds_numel if hasattr(p, "ds_numel") else p.numel())
        v = (safe_get_full_fp32_param(p) if key is None
             else safe_get_full_optimizer_state(p, key))
        if v is None and hasattr(engine.optimizer, "fp32_groups_flat"):
            # FP16_Optimizer (bf16 at stage 0, DeepSpeed's FusedAdam) keeps one flat fp32 copy
            # per group, its fp16_groups' parameters one after another; the Adam it wraps keeps
            # its state per flat copy.
            for lows, flat in zip(engine.optimizer.fp16_groups, engine.optimizer.fp32_groups_flat):
                at = 0
                for low in lows:
                    if low is p:
                        src = flat if key is None else inner.state[flat][key]
                        v = src.detach()[at:at + p.numel()]
                    at += low.numel()
        if v is None:
            # FP16_UnfusedOptimizer (bf16 at stage 0) keeps an fp32 copy per parameter, in
            # its fp32_groups beside fp16_groups.
            fp32 = p
            for lows, highs in zip(getattr(engine.optimizer, "fp16_groups", []),
                                   getattr(engine.optimizer, "fp32_groups", [])):
                for low, high in zip(lows, highs):
                    if low is p:
                        fp32 = high
            v = fp32.detach() if key is None else inner.state[fp32][key]
        return v.float().flatten().tolist()
    rec = {"stage": stage, "dtype": dtype, "world_size": 2, "micro_batch": MICRO,
           "deepspeed": deepspeed.__version__, "torch": torch.__version__,
           "global_steps": engine.global_steps, "global_samples": engine.global_samples,
           "skipped_steps": engine.skipped_steps, "lr": engine.get_lr()[0],
           "loss_scale": float(getattr(engine.optimizer, "cur_scale", 1.0)),
           "config": config(stage, dtype, name), "steps_before": before,
           "groups": GROUPS.get(name),
           "data": [[x.tolist(), y.tolist()] for x, y in data],
           "buffers": {n: b.tolist() for n, b in model.named_buffers()},
           "shapes": {}, "master": {}, "exp_avg": {}, "exp_avg_sq": {}, "frozen": {}}
    for n, p in model.named_parameters():
        rec["shapes"][n] = list(p.ds_shape if hasattr(p, "ds_shape") else p.shape)
        if not p.requires_grad:     # no master or Adam state: its value, gathered at stage 3
            with deepspeed.zero.GatheredParameters([p], enabled=hasattr(p, "ds_id")):
                rec["frozen"][n] = p.detach().float().flatten().tolist()
            continue
        rec["master"][n] = full(p)
        if name in GROUPS and stage > 0:
            continue
        rec["exp_avg"][n] = full(p, "exp_avg")
        rec["exp_avg_sq"][n] = full(p, "exp_avg_sq")
    # The Adam step count as the optimizer inside DeepSpeed holds it: FusedAdam counts on a
    # group's last parameter only (the others stay 0), torch's Adam on every one alike.
    rec["adam_step"] = max((int(st["step"]) for st in inner.state.values() if "step" in st),
                           default=0)
    for i in range(before, before + STEPS_AFTER):
        step(i)
    rec["continued"] = {n: full(p) for n, p in model.named_parameters() if p.requires_grad}
    rec["continued_lr"] = engine.get_lr()[0]
    if dtype == "fp16":
        # DeepSpeed's fp16 step updates the loss scale before it unscales the gradients
        # (stage_1_and_2.py step(): _update_scale, then unscale_and_clip_grads, which divides
        # by self.loss_scale), so a step where the scale grows divides by twice the scale its
        # backward used. The same 3 steps again from the checkpoint (DeepSpeed's load of it
        # gives the same continuation bit for bit), with the one change that the unscale sees
        # the scale backward used: what zinc's order (unscale, then update) must reach.
        engine.load_checkpoint(os.path.join(out, "ckpt"))
        unscale, used = engine.optimizer.unscale_and_clip_grads, {}

        def unscale_before_update(grads, norm):
            after = engine.optimizer.loss_scaler.cur_scale
            engine.optimizer.loss_scaler.cur_scale = used["scale"]
            try:
                unscale(grads, norm)
            finally:
                engine.optimizer.loss_scaler.cur_scale = after
        engine.optimizer.unscale_and_clip_grads = unscale_before_update
        for i in range(before, before + STEPS_AFTER):
            used["scale"] = engine.optimizer.loss_scaler.cur_scale
            step(i)
        rec["continued_unscale_before_update"] = {n: full(p)
                                                  for n, p in model.named_parameters()}
    assert len(names) == len(rec["master"])
    if name in GROUPS:
        rec["moments_unrecorded"] = stage > 0
    if rank == 0:
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(rec, f)
            f.write("\n")
    torch.distributed.barrier()
    # Skip the interpreter's teardown: a rank's gloo/shm threads sometimes abort it
    # ("terminate called without an active exception") after everything is written.
    sys.stdout.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out, stage, dtype):
    """Two ranks of rank_main, DeepSpeed's launcher environment set by hand (gloo, CPU)."""
    os.makedirs(out, exist_ok=True)
    port = str(free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", out, str(stage),
                                       dtype], env=env))
    rcs = [p.wait() for p in procs]
    if any(rcs):
        raise SystemExit(f"make_fixtures: {out}: ranks exited {rcs}")
    # DeepSpeed copies its zero_to_fp32.py / zero_to_torch.py into every save folder: 40 kB of
    # its source the fixtures need not carry.
    for helper in ("zero_to_fp32.py", "zero_to_torch.py"):
        path = os.path.join(out, "ckpt", helper)
        if os.path.exists(path):
            os.remove(path)


def universal(root, name, source):
    """root/name/ckpt/global_step<N>_universal (and latest_universal) from root/source's
    checkpoint, by DeepSpeed's ds_to_universal."""
    import shutil
    src = os.path.join(root, source, "ckpt", f"global_step{STEPS_BEFORE}")
    out = os.path.join(root, name, "ckpt", f"global_step{STEPS_BEFORE}_universal")
    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    os.makedirs(os.path.dirname(out))
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                    "--input_folder", src, "--output_folder", out, "--num_extract_workers", "1",
                    "--num_merge_workers", "1", "--inject_missing_state"], check=True,
                   env=dict(os.environ, DS_ACCELERATOR="cpu"))
    shutil.copy(os.path.join(root, source, "expected.json"), os.path.join(root, name))


def main(argv):
    if argv[:1] == ["--rank"]:
        rank_main(argv[1], int(argv[2]), argv[3])
        return 0
    root, names = argv[0], argv[1:] or list(FIXTURES) + list(UNIVERSAL)
    for name in names:
        if name in UNIVERSAL:
            universal(root, name, UNIVERSAL[name])
        else:
            launch(os.path.join(root, name), *FIXTURES[name])
        print(f"make_fixtures: wrote {os.path.join(root, name)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
