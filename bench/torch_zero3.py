#!/usr/bin/env python3
"""torch_zero3.py — one rank of a ZeRO-3 training run of a small torch GPT (or transformers'
Llama), under zinc, PyTorch FSDP2 or DeepSpeed, for bench/bench.py's `torch` section (bench/RESULTS.md section 9).

    mpirun -np 2 python bench/torch_zero3.py --framework zinc|fsdp2|deepspeed --dtype fp32|bf16
    mpirun -np 4 python bench/torch_zero3.py --framework zinc|deepspeed --zero-init ...

`--model llama` trains transformers' LlamaForCausalLM (a LlamaConfig of the same sizes, its own
initialisation) instead of the GPT, for the Llama rows of section 9.
`--zero-init` builds the model partitioned (zinc.zero.Init, deepspeed.zero.Init) for bench.py's
`torch_init` section (bench/RESULTS.md section 10); `rss_built_kib` is the RSS right after the
construction, `build_s` its time, `param_bytes_built` the parameter bytes this rank holds then
(zinc's pieces, DeepSpeed's ds_tensor partitions, or the whole tensors). Diagnostics:
`--no-trim` (zinc's Init without malloc_trim), `--trim-after-build` (rss_trimmed_kib).

The same work in every framework: examples/torch_gpt.py's GPT (plain torch.nn, pre-LayerNorm
blocks, explicit causal attention, tied head, GPT-2 initialisation) over a byte vocabulary, built
with torch.manual_seed(0) on every rank; the same synthetic batches (a fixed random first-order
Markov chain over the vocabulary, drawn with Python's `random`, so the data does not depend on
the torch version); the same global batch split into one micro-batch per rank; AdamW (lr 1e-3,
betas 0.9/0.95, eps 1e-8, weight decay 0.01), gradient clipping at 1.0, constant LR, no
accumulation; mean cross-entropy in fp32.

- zinc: `zinc.initialize` with a DeepSpeed config at stage 3 (zinc's MPI world from mpirun;
  dist_init_required=False, so no torch.distributed group in the process measured);
  the package of this checkout's python/, or the one in $ZINC_PY (to time another version).
- fsdp2: `fully_shard` on every block and on the root (torch.distributed.fsdp, or
  torch.distributed._composable.fsdp before torch 2.6), gloo process group; bf16 mode is
  MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16) over fp32 sharded parameters;
  torch.optim.AdamW with its defaults; clip_grad_norm_.
- deepspeed: `deepspeed.initialize` with the same config as zinc (DS_ACCELERATOR=cpu,
  deepspeed.init_distributed(dist_backend="gloo")).

Timing: per-step wall time of forward + backward + optimizer step on each rank, after
--warmup steps. Memory: peak RSS (resource.getrusage, ru_maxrss) and the RSS before the model is
built (after imports and process-group setup), and the framework's own bytes of parameters,
gradients and optimizer state held by this rank where it can be read (`state` in the JSON).
Every rank prints one JSON line; exits 3 (with a JSON reason) when the framework is missing.
"""
import argparse
import bisect
import contextlib
import ctypes
import json
import os
import random
import resource
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib():
    """Current resident set size of this process in KiB (/proc/self/status VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def launcher_env():
    """Rank and world from mpirun (Open MPI) or a torchrun-style environment; the torchrun
    variables are set from Open MPI's so that torch.distributed and DeepSpeed find them."""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    lsize = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                      LOCAL_WORLD_SIZE=str(lsize))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    return rank, world, lsize


def markov_batches(steps, n_seq, t, vocab, seed=1):
    """steps batches of n_seq sequences of t+1 tokens from a fixed random Markov chain."""
    rng = random.Random(seed)
    cum = []
    for _ in range(vocab):
        w = [rng.random() ** 8 for _ in range(vocab)]        # a peaked random chain
        acc, c = 0.0, []
        for x in w:
            acc += x
            c.append(acc)
        cum.append(c)
    out = []
    for _ in range(steps):
        batch = []
        for _ in range(n_seq):
            s = [rng.randrange(vocab)]
            for _ in range(t):
                c = cum[s[-1]]
                s.append(min(bisect.bisect(c, rng.random() * c[-1]), vocab - 1))
            batch.append(s)
        out.append(batch)
    return out


# Llama's feed-forward width over the model width (its 8/3 with SwiGLU, rounded up to 64).
LLAMA_FFN = 8 / 3


def build_model(kind, vocab, d, h, layers, t):
    """The model at the given sizes, and its blocks (FSDP2 wraps each): examples/torch_gpt.py's
    GPT, the model a zinc user trains, or transformers' LlamaForCausalLM from a LlamaConfig
    (`--model llama`; its logits as the output). Each initialisation draws from torch's
    generator in the same order in every framework."""
    if kind == "gpt":
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        from torch_gpt import GPT
        model = GPT(vocab=vocab, d=d, h=h, layers=layers, t=t)
        return model, model.blocks
    import torch
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers,
                                   num_attention_heads=h, num_key_value_heads=h,
                                   intermediate_size=(int(LLAMA_FFN * d) + 63) // 64 * 64,
                                   max_position_embeddings=t)

    class Logits(torch.nn.Module):
        """model(x) -> logits, the same call as the GPT's."""

        def __init__(self):
            super().__init__()
            self.m = transformers.LlamaForCausalLM(cfg)

        def forward(self, x):
            return self.m(input_ids=x).logits

    model = Logits()
    model.ffn = cfg.intermediate_size           # for the JSON (bench.py's text says it)
    return model, model.m.model.layers


def engine_train_step(engine, vocab, F):
    """One step the DeepSpeed way (zinc's engine has the same shape): forward, backward, step."""
    def train_step(x, y):
        loss = F.cross_entropy(engine(x).float().reshape(-1, vocab), y.reshape(-1))
        engine.backward(loss)
        engine.step()
        return loss
    return train_step


def tensor_bytes(t):
    if t is None:
        return 0
    if hasattr(t, "to_local"):                  # DTensor (FSDP2): this rank's shard
        t = t.to_local()
    return t.numel() * t.element_size()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--framework", required=True, choices=["zinc", "fsdp2", "deepspeed"])
    p.add_argument("--model", default="gpt", choices=["gpt", "llama"],
                   help="gpt: examples/torch_gpt.py's GPT; llama: transformers' "
                        "LlamaForCausalLM from a LlamaConfig of the same sizes")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps after --warmup")
    p.add_argument("--zero-init", action="store_true",
                   help="build the model partitioned: inside zinc.zero.Init (zinc) or "
                        "deepspeed.zero.Init with the same config (deepspeed); FSDP2 has no "
                        "such context (its large-model path builds on the meta device and "
                        "initialises the shards afterwards, with other random values)")
    p.add_argument("--no-trim", action="store_true",
                   help="zinc only, a diagnostic: zinc.zero.Init without its malloc_trim calls "
                        "(docs/python.md: why it trims)")
    p.add_argument("--trim-after-build", action="store_true",
                   help="a diagnostic: malloc_trim(0) after the construction, its RSS as "
                        "rss_trimmed_kib (what the heap kept of freed parameters)")
    p.add_argument("--out", help="also write this rank's JSON to OUT.rank<r>.json (ranks' stdout "
                                 "lines can interleave under mpirun)")
    a = p.parse_args()

    rank, world, lsize = launcher_env()
    out = {"framework": a.framework, "dtype": a.dtype, "rank": rank, "world": world}

    def emit():
        line = json.dumps(out)
        if a.out:
            with open(f"{a.out}.rank{rank}.json", "w") as f:
                f.write(line + "\n")
        print(line, flush=True)

    def fail(reason, code=3):
        out.update(available=False, reason=reason)
        emit()
        return code

    if a.zero_init and a.framework == "fsdp2":
        return fail("--zero-init: FSDP2 has no partitioned construction context")
    if a.global_batch % world:
        return fail(f"--global-batch {a.global_batch} is not a multiple of {world} ranks", 2)
    micro = a.global_batch // world
    threads = max(1, (os.cpu_count() or 1) // lsize)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        return fail(f"import torch failed: {e}")
    torch.set_num_threads(threads)
    F = torch.nn.functional
    out.update(torch=torch.__version__, python=sys.version.split()[0], threads=threads)

    cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
           "steps_per_print": 1 << 30, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95],
                                                     "eps": 1e-8, "weight_decay": 0.01}},
           "bf16": {"enabled": a.dtype == "bf16"},
           "zero_optimization": {"stage": 3}}
    try:
        if a.framework == "zinc":
            sys.path.insert(0, os.environ.get("ZINC_PY") or os.path.join(ROOT, "python"))
            import zinc
            # zinc's engine does not use torch.distributed; leave it down (no gloo group in
            # the process measured), as initialize below does.
            zinc.init_distributed(dist_init_required=False)
            if a.no_trim:
                zinc._zero_init._trim = None
        elif a.framework == "fsdp2":
            import torch.distributed as dist
            try:
                from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            except ImportError:
                from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
            dist.init_process_group("gloo", rank=rank, world_size=world)
        else:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            import deepspeed
            out["deepspeed"] = deepspeed.__version__
            deepspeed.init_distributed(dist_backend="gloo")
    except Exception as e:  # noqa: BLE001
        return fail(f"{a.framework} setup failed: {type(e).__name__}: {e}")
    rss0 = rss_kib()

    data = markov_batches(a.warmup + a.steps, a.global_batch, a.seq, a.vocab)
    torch.manual_seed(0)                         # the same initial weights on every rank
    building = contextlib.nullcontext()
    if a.zero_init:
        building = (zinc.zero.Init() if a.framework == "zinc"
                    else deepspeed.zero.Init(config_dict_or_path=cfg))
    t_build = time.perf_counter()
    if a.model == "llama":
        try:
            import transformers
            out["transformers"] = transformers.__version__
        except Exception as e:  # noqa: BLE001 - any import failure means "not available"
            return fail(f"--model llama: import transformers failed: {e}")
    with building:
        model, blocks = build_model(a.model, a.vocab, a.dim, a.heads, a.layers, a.seq)
    out["build_s"] = time.perf_counter() - t_build
    rss_built = rss_kib()
    if a.trim_after_build:
        ctypes.CDLL(None).malloc_trim(0)
        out["rss_trimmed_kib"] = rss_kib()
    # DeepSpeed's partitioned parameters are empty tensors with the count in ds_numel and this
    # rank's partition in ds_tensor; zinc's keep their shape (one element seen with it) and this
    # rank's piece in _zinc_held.
    nparams = sum(getattr(q, "ds_numel", q.numel()) for q in model.parameters())
    out["param_bytes_built"] = sum(
        tensor_bytes(q._zinc_held.piece) if hasattr(q, "_zinc_held")
        else tensor_bytes(q.ds_tensor) if hasattr(q, "ds_tensor") else tensor_bytes(q)
        for q in model.parameters())
    fingerprint = (None if a.zero_init else
                   float(sum(q.detach().double().square().sum() for q in model.parameters())))
    if a.model == "llama":
        out["ffn"] = model.ffn
    out.update(params=nparams, init_sumsq=fingerprint, micro_batch=micro,
               zero_init=a.zero_init, rss_built_kib=rss_built,
               global_batch=a.global_batch,
               model=f"{'Llama ' if a.model == 'llama' else ''}"
                     f"L{a.layers}-D{a.dim}-H{a.heads}-T{a.seq}-V{a.vocab}")

    try:
        if a.framework == "zinc":
            engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                              config=cfg, dist_init_required=False)

            train_step = engine_train_step(engine, a.vocab, F)

            def state_bytes():
                m = {k: v[1] for k, v in engine.memory().items()}
                return {"params": m["param16"], "grads": m["grad"],
                        "optimizer": m["master"] + m["adam_m"] + m["adam_v"],
                        "buffers": m["bucket"] + m["gather"],
                        "how": "engine.memory() (zinc_memory, allocated): params = param16 (the "
                               "shard of the working copy; in fp32 mode that is the fp32 master "
                               "itself and master is 0), grads = grad, optimizer = master + "
                               "adam_m + adam_v, buffers = bucket + gather"}
        elif a.framework == "fsdp2":
            mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
                  if a.dtype == "bf16" else MixedPrecisionPolicy())
            for blk in blocks:
                fully_shard(blk, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                    weight_decay=0.01)

            def train_step(x, y):
                loss = F.cross_entropy(model(x).float().reshape(-1, a.vocab), y.reshape(-1))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss

            grads_seen = [0]
            orig_step = opt.step

            def step_counting(*args, **kw):      # sharded gradient bytes, read before zero_grad
                grads_seen[0] = sum(tensor_bytes(q.grad) for q in model.parameters())
                return orig_step(*args, **kw)
            opt.step = step_counting

            def state_bytes():
                return {"params": sum(tensor_bytes(q) for q in model.parameters()),
                        "grads": grads_seen[0],
                        "optimizer": sum(tensor_bytes(v) for s in opt.state.values()
                                         for v in s.values() if torch.is_tensor(v) and v.dim() > 0),
                        "buffers": None,
                        "how": "the DTensor shards' local bytes: params = sharded fp32 parameters "
                               "(the master), grads = sharded .grad before zero_grad, optimizer = "
                               "AdamW's exp_avg + exp_avg_sq; the unsharded (bf16 or fp32) "
                               "parameters of a gathered block are transient and not counted"}
        else:
            engine, opt, _, _ = deepspeed.initialize(model=model,
                                                     model_parameters=model.parameters(),
                                                     config=cfg)
            out["ds_optimizer"] = type(getattr(opt, "optimizer", opt)).__name__

            train_step = engine_train_step(engine, a.vocab, F)

            def state_bytes():
                zopt = engine.optimizer
                params = sum(tensor_bytes(getattr(q, "ds_tensor", None)) for q in model.parameters())
                master = sum(tensor_bytes(t) for t in getattr(zopt, "fp32_partitioned_groups_flat", []))
                inner = getattr(zopt, "optimizer", None)
                moments = sum(tensor_bytes(v) for s in getattr(inner, "state", {}).values()
                              for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
                gbuf = getattr(zopt, "grad_partitions_flat_buffer", None)
                return {"params": params, "grads": tensor_bytes(gbuf),
                        "optimizer": master + moments, "buffers": None,
                        "how": "params = the ds_tensor partitions (working dtype), grads = "
                               "grad_partitions_flat_buffer, optimizer = "
                               "fp32_partitioned_groups_flat + the inner optimizer's state "
                               "tensors; persistent (un-partitioned) small parameters and "
                               "DeepSpeed's buckets are not counted"}
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exc().strip().splitlines()
        return fail(f"{a.framework} initialize failed: {type(e).__name__}: {e} "
                    f"[{' | '.join(tb[-4:])}]", 4)

    # The high-water mark through construction and initialize, before any step's activations:
    # where a model built whole and one built partitioned differ.
    out["peak_rss_init_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, losses = [], []
    for i, batch in enumerate(data):
        seq = torch.tensor(batch[rank * micro:(rank + 1) * micro], dtype=torch.long)
        x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        t0 = time.perf_counter()
        loss = train_step(x, y)
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if i >= a.warmup:
            times.append(dt * 1e3)
    state = state_bytes()
    out.update(available=True, ms_all=times, loss_first=losses[0], loss_last=losses[-1],
               losses=losses, rss0_kib=rss0,
               peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, state=state)
    emit()
    if a.framework == "zinc":
        engine.close()
    elif a.framework == "fsdp2":
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
