#!/usr/bin/env python3
"""gpu_torch.py — real transformers models trained on one GPU through plain PyTorch, `import zinc`
and DeepSpeed, side by side (issue 38, bench/RESULTS.md section gpu_torch).

    python bench/gpu_torch.py cell --framework torch|zinc|deepspeed --model gpt2|llama1b
                                   [--stage 0-3] [--offload] [--variant persist]
                                   [--profile DIR] [--out FILE]
    python bench/gpu_torch.py all --out DIR [--budget SECONDS] [--device cpu] [--only REGEX...]
    python bench/gpu_torch.py report DIR            (the markdown rows, from DIR's cells)

`cell` runs one framework at one setting in this process and prints one JSON line (also written
to --out). `all` runs every cell, each in a process of its own (so each peak is its own), in order
of value (plan() below): the 1B Llama at stages 0-3 beside torch and DeepSpeed first, then the
stage-3 profiles (the 1B's, GPT-2's), GPT-2's optimizer offload beside ZeRO-Offload, GPT-2 at
stages 0-3 (its stage 3 also with every group persistent: --variant persist, below), the 1B's
offload; a cell whose estimate no longer fits in --budget is skipped and listed. `--device cpu` is the dry run: the tiny models, a few steps, on the CPU, to
check every path before a GPU lease.

The models (transformers, built from a config, random initialisation, torch.manual_seed(0)):
  gpt2     GPT2LMHeadModel(GPT2Config()): 124M parameters, vocabulary 50257, context 1024
  llama1b  LlamaForCausalLM: hidden 2048, 16 layers, 32 heads (8 key/value heads), SwiGLU 8192,
           vocabulary 32000, untied head: 1.10B parameters
  tiny-gpt2, tiny-llama   the same classes at toy sizes, for the CPU dry run
The data: synthetic tokens, a learnable rule (each next token the last plus a small random step,
modulo the vocabulary), drawn once with a seeded CPU generator, on the device before timing.
Sequence 1024 (the tiny models: 64), micro-batch --micro-batch, no accumulation.

The same training in each framework: bf16, AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on every parameter), gradient clipping at 1.0, constant LR, mean cross-entropy in fp32.
  torch      fp32 parameters, torch.autocast(bf16), torch.optim.AdamW(fused=True),
             clip_grad_norm_ — a PyTorch user's loop, the baseline
  zinc       zinc.initialize with the DeepSpeed config below ("bf16": enabled, the stage, with
             --offload offload_optimizer cpu (pinned) and at stage 3 offload_param cpu too)
  deepspeed  deepspeed.initialize with the same config; its optimizer torch.optim.AdamW(fused=
             True) through "torch_adam" (DeepSpeed's FusedAdam is a JIT build that a lease has no
             time for; `--ds-adam fused` asks for it); with --offload DeepSpeedCPUAdam (a JIT
             build of its cpu_adam op, timed apart as setup_s)

Timing: each step (forward, backward, step) ends with torch.cuda.synchronize(), a device-wide
wait that covers zinc's streams too; tokens/s is micro-batch x sequence / the median step time of
--steps timed steps after --warmup. Memory: `dev_peak_gib` is torch's max_memory_allocated
over the timed steps (reset after the warm-up) plus zinc's own device bytes (engine.memory(),
allocated outside torch's allocator; 0 for the others); `dev_used_gib` is the device's used
memory at the end (cudaMemGetInfo: context, caches and all); `host_peak_gib` the peak RSS;
`mem_phases_gib` torch's allocated + zinc's own at four points of the last step (before the
forward: the state held between steps; after the forward: + activations; after the backward;
after the step). `host_waits_per_step`: zinc's engine.host_waits() around each timed step;
`hook_ms_per_step`: the host milliseconds inside zinc's torch hooks in each (engine.hook_seconds()).
Losses: every step's, read after the last (no host wait for them inside the loop).
"""
import argparse
import heapq
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)

# name: (transformers class family, config, sequence, default micro-batch)
MODELS = {
    "gpt2": ("gpt2", {}, 1024, 8),
    "llama1b": ("llama", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                              num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
                              max_position_embeddings=1024, tie_word_embeddings=False), 1024, 8),
    "tiny-gpt2": ("gpt2", dict(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=64),
                  64, 2),
    "tiny-llama": ("llama", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                                 max_position_embeddings=64, tie_word_embeddings=False), 64, 2),
}


def build_model(name):
    """The transformers model of MODELS[name], fp32, random init (seeded by the caller)."""
    import transformers
    family, kw, _, _ = MODELS[name]
    if family == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))


def make_tokens(n, b, t, vocab, seed=0):
    """n batches of b sequences of t+1 tokens: a random start, then each token the last plus a
    step drawn from 0..7, modulo vocab (learnable, so the loss falls and the frameworks' curves
    can be compared)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, b, 1), generator=g)
    steps = torch.randint(0, 8, (n, b, t), generator=g)
    return torch.cat([start, start + steps.cumsum(-1)], -1) % vocab


# --variant: a diagnostic change of the zero_optimization section. "persist": every group stays
# gathered (persistence threshold past the model's size), so stage 3's hooks and copies run but
# no group is gathered per use: beside the plain stage-3 cell and stage 2 it splits what stage 3
# costs into the gathers (and their prefetch) and the rest (GPT-2's stage 3 at 0.71x torch).
VARIANTS = {"persist": {"stage3_param_persistence_threshold": 10 ** 12}}


def ds_config(a, micro):
    """The DeepSpeed config every framework reads (DeepSpeed's optimizer keys added apart)."""
    zero = {"stage": a.stage}
    zero.update(VARIANTS.get(getattr(a, "variant", None) or "", {}))
    if a.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if a.stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
            "steps_per_print": 1 << 30, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95],
                                                      "eps": 1e-8, "weight_decay": 0.1}},
            "bf16": {"enabled": True}, "zero_optimization": zero}


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def gpu_idle_report(trace_path, top=6):
    """Where the GPU idles in the profiled step: the union of kernel, memcpy and memset time
    inside the 'train_step' annotation of a torch.profiler chrome trace, the idle fraction and
    the longest gaps with the host op that was running when each began."""
    with open(trace_path) as f:
        ev = json.load(f).get("traceEvents", [])
    steps = [e for e in ev if e.get("name") == "train_step" and e.get("ph") == "X"
             and e.get("cat") in ("user_annotation", "cpu_op")]
    if not steps:
        return {"error": "no train_step annotation in the trace"}
    s0 = min(e["ts"] for e in steps)
    s1 = max(e["ts"] + e["dur"] for e in steps)
    gpu = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in ev
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                 and e["ts"] + e.get("dur", 0) > s0)
    # The host may run ahead: the step ends with the last of its GPU work.
    s1 = max([s1] + [e for _, e in gpu])
    busy, gaps, cur = 0.0, [], s0
    for b, e in gpu:
        b, e = max(b, s0), min(e, s1)
        if b > cur:
            gaps.append((b - cur, cur))
        if e > cur:
            busy += e - max(b, cur)
            cur = e
    if s1 > cur:
        gaps.append((s1 - cur, cur))
    host = sorted(((e["ts"], e.get("dur", 0), e["name"]) for e in ev if e.get("ph") == "X"
                   and e.get("cat") in ("cpu_op", "python_function")), key=lambda h: h[0])
    # The innermost (shortest) host op running at each gap's start, in one sweep over the gaps in
    # time order: a heap of the ops begun so far by duration, whose top is dropped while it has
    # ended (it stays ended for every later gap). With Python stacks a GPT-2 step has tens of
    # thousands of host events and thousands of gaps; scanning them all per gap took seconds.
    running_at, heap, i = {}, [], 0
    for at in sorted({at for _, at in gaps}):
        while i < len(host) and host[i][0] <= at:
            ts, dur, name = host[i]
            heapq.heappush(heap, (dur, ts + dur, i, name))
            i += 1
        while heap and heap[0][1] <= at:
            heapq.heappop(heap)
        running_at[at] = heap[0][3][:80] if heap else "-"

    def host_op_at(ts):
        return running_at.get(ts, "-")
    gaps.sort(reverse=True)
    span = s1 - s0
    # The idle time by what the host was doing when each gap began (the trace is recorded with
    # Python stacks, so a gap inside one of zinc's hooks names the hook's function): where the
    # many short gaps of a host-bound step come from.
    by_op = {}
    for g, at in gaps:
        op = host_op_at(at)
        by_op[op] = by_op.get(op, 0.0) + g
    return {"step_ms": span / 1e3, "gpu_busy_ms": busy / 1e3,
            "idle_frac": 1 - busy / span if span else 0.0, "gaps": len(gaps),
            "longest_gaps": [{"ms": g / 1e3, "at_ms": (at - s0) / 1e3, "host_op": host_op_at(at)}
                             for g, at in gaps[:top]],
            "idle_ms_by_host_op": {k: round(v / 1e3, 3) for k, v in
                                   sorted(by_op.items(), key=lambda kv: -kv[1])[:2 * top]}}


def run_cell(a):
    """One framework at one setting, here: returns the JSON object of the cell."""
    out = {"framework": a.framework, "model": a.model, "stage": a.stage, "offload": a.offload,
           "variant": a.variant}
    family, _, seq, micro = MODELS[a.model]
    micro = a.micro_batch or micro
    out.update(seq=seq, micro_batch=micro)
    import torch
    import torch.nn.functional as F
    import transformers
    out.update(torch=torch.__version__, transformers=transformers.__version__)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        return dict(out, available=False, reason="torch sees no CUDA device")
    # (an index: torch 2.11's set_device and get_device_name refuse a bare "cuda")
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(dev)
        torch.cuda.set_device(dev)
    cfg = ds_config(a, micro)
    t_setup = time.perf_counter()
    if a.framework == "zinc":
        sys.path.insert(0, os.environ.get("ZINC_PY") or os.path.join(ROOT, "python"))
        import zinc
        zinc.init_distributed(dist_init_required=False)
    elif a.framework == "deepspeed":
        if not cuda:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        # A world of one for torch.distributed (zinc's engine reads none of these: with them it
        # would take the process for a torchrun rank).
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        import deepspeed
        out["deepspeed"] = deepspeed.__version__
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
        if a.ds_adam == "torch" and not a.offload:
            cfg["optimizer"]["params"].update(torch_adam=True, fused=cuda)

    torch.manual_seed(0)
    with torch.device(dev):
        model = build_model(a.model)
    vocab = model.config.vocab_size
    nparams = sum(p.numel() for p in model.parameters())
    out.update(params=nparams, attn=getattr(model.config, "_attn_implementation", None))
    n_steps = a.warmup + a.steps
    data = make_tokens(n_steps, micro, seq, vocab).to(dev)

    def loss_of(logits, y):
        return F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))

    # Device memory (torch's allocated + zinc's own) at the phases of the last step, so that a
    # difference in peaks splits into state held between steps and what a step adds (issue 38:
    # zinc's stages 0-2 peak 2.1 GiB over DeepSpeed's). Allocator bookkeeping: no device wait.
    phases = {}

    def mark(name):
        if cuda and phases.get("on"):
            phases[name] = (torch.cuda.memory_allocated(dev) + own_bytes()) / GIB

    if a.framework == "torch":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, fused=cuda)

        def train_step(x, y):
            mark("before forward")
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(input_ids=x).logits
            loss = loss_of(logits, y)
            mark("after forward")
            loss.backward()
            mark("after backward")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            mark("after step")
            return loss
        own_bytes = lambda: 0          # noqa: E731 - everything is torch's
    else:
        if a.framework == "zinc":
            engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                              config=cfg, dist_init_required=False)
            own_bytes = lambda: sum(v[1] for v in engine.memory().values())  # noqa: E731
        else:
            engine, opt, _, _ = deepspeed.initialize(model=model,
                                                     model_parameters=model.parameters(),
                                                     config=cfg)
            out["ds_optimizer"] = type(getattr(opt, "optimizer", opt)).__name__
            own_bytes = lambda: 0      # noqa: E731 - DeepSpeed allocates through torch

        def train_step(x, y):
            mark("before forward")
            loss = loss_of(engine(input_ids=x).logits, y)
            mark("after forward")
            engine.backward(loss)
            mark("after backward")
            engine.step()
            mark("after step")
            return loss
    out["setup_s"] = time.perf_counter() - t_setup

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    # zinc's host waits per optimizer step (issue 38's goal: at most one), counted by the engine.
    waits_of = (engine.host_waits if a.framework == "zinc" and hasattr(engine, "host_waits")
                else None)
    hooks_of = (engine.hook_seconds if a.framework == "zinc" and hasattr(engine, "hook_seconds")
                else None)
    losses, times, waits, hooks = [], [], [], []
    for i in range(n_steps):
        if i == a.warmup and cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        x, y = data[i, :, :-1], data[i, :, 1:]
        sync()
        w0 = waits_of() if waits_of else 0
        h0 = hooks_of() if hooks_of else 0.0
        phases["on"] = i == n_steps - 1
        t0 = time.perf_counter()
        losses.append(train_step(x, y).detach())
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
            if waits_of:
                waits.append(waits_of() - w0)
            if hooks_of:
                hooks.append(round((hooks_of() - h0) * 1e3, 3))
    if waits_of:
        out["host_waits_per_step"] = waits
    if hooks_of:
        out["hook_ms_per_step"] = hooks
    phases.pop("on", None)
    if phases:
        out["mem_phases_gib"] = phases
    med = statistics.median(times)
    out.update(available=True, steps=a.steps, warmup=a.warmup,
               step_ms=[round(t * 1e3, 3) for t in times], median_ms=med * 1e3,
               tokens_per_s=micro * seq / med, losses=[float(v) for v in losses],
               host_peak_gib=peak_rss_gib())
    zb = own_bytes()
    out["zinc_dev_gib"] = zb / GIB
    if cuda:
        free, total = torch.cuda.mem_get_info(dev)
        out.update(dev_peak_gib=(torch.cuda.max_memory_allocated(dev) + zb) / GIB,
                   torch_peak_gib=torch.cuda.max_memory_allocated(dev) / GIB,
                   torch_reserved_gib=torch.cuda.max_memory_reserved(dev) / GIB,
                   dev_used_gib=(total - free) / GIB)

    if a.profile:
        from torch.profiler import ProfilerActivity, profile, record_function
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        os.makedirs(a.profile, exist_ok=True)
        x, y = data[-1, :, :-1], data[-1, :, 1:]
        sync()
        with profile(activities=acts, with_stack=True) as prof:
            with record_function("train_step"):
                train_step(x, y)
            sync()
        tag = f"{a.framework}-{a.model}-z{a.stage}{'-offload' if a.offload else ''}"
        path = os.path.join(a.profile, f"trace-{tag}.json")
        prof.export_chrome_trace(path)
        out["profile"] = gpu_idle_report(path) if cuda else {"trace": path}
        out["profile"]["trace"] = os.path.basename(path)
        subprocess.run(["gzip", "-f", path], check=False)
    if a.framework != "torch" and hasattr(engine, "close"):
        engine.close()
    return out


# The cells of `all`, in order of value (issue 38): (framework, model, stage, offload, profile,
# variant).
# The big model at stages 0-3 beside torch and DeepSpeed first, then the stage-3 profile (where
# the GPU idles), then optimizer offload beside ZeRO-Offload on the small model (cheaper; the
# first DeepSpeed offload cell pays cpu_adam's JIT build), then the small model's stages, then
# the big model's offload. (The H100 lease of 2026-11-28 ran the first two groups' cells in
# the older order — big, small, profile, offload — and ran out before the profile.)
def plan(models):
    big, small = models
    cells = [("torch", big, 0, False, False)]
    for s in range(4):
        cells += [("zinc", big, s, False, False), ("deepspeed", big, s, False, False)]
    cells.append(("zinc", big, 3, False, True))
    cells.append(("zinc", small, 3, False, True))      # GPT-2's stage 3 stays at 0.71-0.78x
    for s in (2, 3):
        cells += [("zinc", small, s, True, False), ("deepspeed", small, s, True, False)]
    cells.append(("torch", small, 0, False, False))
    for s in range(4):
        cells += [("zinc", small, s, False, False), ("deepspeed", small, s, False, False)]
    cells = [c + (None,) for c in cells]
    # GPT-2's stage 3 with no gather per use, right after its plain stage-3 cell.
    at = cells.index(("zinc", small, 3, False, False, None)) + 1
    cells.insert(at, ("zinc", small, 3, False, False, "persist"))
    for s in (2, 3):
        cells += [("zinc", big, s, True, False, None), ("deepspeed", big, s, True, False, None)]
    return cells


# Seconds a cell needs on the GPU, with room (imports, build, initialize, the steps): measured on
# an H100 on 2026-11-28 — the 1B cells 19.5-29.5 s, GPT-2's 16.4-24.4 s, zinc's GPT-2 stage-2
# offload 20.6 s, most of it process start, imports and initialize (the CPU dry run's tiny cells
# take 4-6 s). The offload and profile extras are estimates; the first DeepSpeed offload cell
# also JIT-builds cpu_adam (cached for the next).
def estimate(fw, model, offload, profile):
    base = {"llama1b": 30, "gpt2": 25}.get(model, 10)
    if offload:
        base += 30 if model == "llama1b" else 10
        if fw == "deepspeed":
            base += 45
    return base + (15 if profile else 0)


def cell_name(fw, model, stage, offload, profile, variant=None):
    return (f"{fw}-{model}-z{stage}{'-offload' if offload else ''}"
            f"{'-profile' if profile else ''}{'-' + variant if variant else ''}")


def run_all(a):
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    cpu = a.device == "cpu"
    models = ("tiny-llama", "tiny-gpt2") if cpu else ("llama1b", "gpt2")
    skipped, failed = [], []
    only = [re.compile(p) for p in a.only] if a.only else None
    for fw, model, stage, offload, profile, variant in plan(models):
        if fw == "torch" and stage:
            continue
        name = cell_name(fw, model, stage, offload, profile, variant)
        if only and not any(p.search(name) for p in only):
            continue
        left = a.budget - (time.monotonic() - t0)
        need = estimate(fw, model, offload, profile)
        if need > left:
            skipped.append(name)
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "cell", "--framework", fw,
               "--model", model, "--stage", str(stage), "--device", a.device,
               "--out", os.path.join(a.out, name + ".json")]
        if cpu:
            cmd += ["--warmup", "1", "--steps", "2"]
        if offload:
            cmd.append("--offload")
        if profile:
            cmd += ["--profile", a.out]
        if variant:
            cmd += ["--variant", variant]
        c0 = time.monotonic()
        with open(os.path.join(a.out, name + ".log"), "w") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    timeout=max(10, min(left, 3 * need + 30))).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        dt = time.monotonic() - c0
        print(f"gpu_torch: {name:40s} rc={rc:<3d} {dt:6.1f} s (estimate {need} s)", flush=True)
        if rc != 0:
            failed.append(name)
    if skipped:
        print(f"gpu_torch: skipped (over the {a.budget:.0f} s budget): {' '.join(skipped)}")
    print(f"gpu_torch: {time.monotonic() - t0:.0f} s in all; "
          f"{'every cell rc=0' if not failed else 'failed: ' + ' '.join(failed)}", flush=True)
    print(report(a.out))
    return 1 if failed else 0


def report(d):
    """Markdown rows of DIR's cells: tokens/s and its ratio to torch's on the same model, memory,
    the first and last loss."""
    cells = []
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and not f.startswith("trace-"):
            with open(os.path.join(d, f)) as fh:
                cells.append(json.load(fh))
    base = {c["model"]: c["tokens_per_s"] for c in cells
            if c.get("framework") == "torch" and c.get("available")}
    ds = {(c["model"], c["stage"], c["offload"]): c["tokens_per_s"] for c in cells
          if c.get("framework") == "deepspeed" and c.get("available")}
    order = {"torch": 0, "zinc": 1, "deepspeed": 2}
    cells.sort(key=lambda c: (c["model"], c.get("offload", False), c.get("stage", 0),
                              bool(c.get("variant")),
                              order.get(c["framework"], 9)))
    rows = ["| model | framework | stage | offload | tokens/s | × torch | × DeepSpeed | "
            "ms/step (median) | device peak GiB (zinc's) | device used GiB | host peak GiB | "
            "loss first → last |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if not c.get("available"):
            variant = f" ({c['variant']})" if c.get("variant") else ""
            rows.append(f"| {c.get('model')} | {c.get('framework')} | {c.get('stage')}{variant} | "
                        f"{'yes' if c.get('offload') else ''} | not measured: "
                        f"{str(c.get('reason', '?'))[:160]} |||||||")
            continue
        tps = c["tokens_per_s"]
        xt = tps / base[c["model"]] if c["model"] in base else None
        xd = (tps / ds[(c["model"], c["stage"], c["offload"])]
              if c["framework"] == "zinc" and not c.get("variant")
              and (c["model"], c["stage"], c["offload"]) in ds else None)
        fmt = lambda v, p=2: "" if v is None else f"{v:.{p}f}"       # noqa: E731
        stage = "" if c["framework"] == "torch" else c["stage"]
        if c.get("profile"):
            stage = f"{stage} (profiled run)"
        if c.get("variant") == "persist":
            stage = f"{stage} (every group persistent)"
        rows.append(f"| {c['model']} | {c['framework']} | {stage} | "
                    f"{'yes' if c['offload'] else ''} | {tps:,.0f} | {fmt(xt)} | {fmt(xd)} | "
                    f"{c['median_ms']:.1f} | {fmt(c.get('dev_peak_gib'))} "
                    f"({fmt(c.get('zinc_dev_gib'))}) | {fmt(c.get('dev_used_gib'))} | "
                    f"{c['host_peak_gib']:.2f} | {c['losses'][0]:.3f} → {c['losses'][-1]:.3f} |")
    def per_cell(title, key, show):
        """One line over the zinc cells that recorded `key`: each cell's `show(values)`."""
        with_key = [c for c in cells if c.get(key)]
        if with_key:
            rows.extend(["", title + ": " + "; ".join(
                f"{c['model']} stage {c['stage']}{' offload' if c['offload'] else ''}"
                f"{' profiled' if c.get('profile') else ''}"
                f"{' (' + c['variant'] + ')' if c.get('variant') else ''} "
                f"{show(c[key], c)}" for c in with_key)])

    per_cell("zinc's host waits per optimizer step (engine.host_waits() around each timed step)",
             "host_waits_per_step", lambda v, c: "/".join(str(n) for n in sorted(set(v))))
    per_cell("Host time inside zinc's torch hooks per step (engine.hook_seconds(), median ms; "
             "beside the step's median)", "hook_ms_per_step",
             lambda v, c: f"{statistics.median(v):.1f} of {c['median_ms']:.1f}")
    phased = [c for c in cells if c.get("mem_phases_gib")]
    if phased:
        rows.append("")
        rows.append("Device memory at the phases of the last step (torch's allocated + zinc's own, "
                    "GiB; before forward = what is held between steps):")
        for c in phased:
            ph = c["mem_phases_gib"]
            rows.append(f"- {c['model']} {c['framework']}"
                        f"{'' if c['framework'] == 'torch' else ' stage ' + str(c['stage'])}"
                        f"{' offload' if c['offload'] else ''}"
                        f"{' profiled' if c.get('profile') else ''}"
                        f"{' (' + c['variant'] + ')' if c.get('variant') else ''}: "
                        + ", ".join(f"{k} {v:.2f}" for k, v in ph.items()))
    prof = [c for c in cells if c.get("profile", {}).get("step_ms")]     # GPU traces only
    for c in prof:
        p = c["profile"]
        rows.append("")
        rows.append(f"Profile of one step, {c['framework']} {c['model']} stage {c['stage']} "
                    f"(torch.profiler, {p.get('trace')}.gz): step {p.get('step_ms', 0):.1f} ms, "
                    f"GPU busy {p.get('gpu_busy_ms', 0):.1f} ms (idle "
                    f"{100 * p.get('idle_frac', 0):.1f} %, {p.get('gaps', 0)} gaps); longest: "
                    + "; ".join(f"{g['ms']:.2f} ms at {g['at_ms']:.1f} ms ({g['host_op']})"
                                for g in p.get("longest_gaps", [])))
        if p.get("idle_ms_by_host_op"):
            rows.append("Idle time by what the host was running when the gap began: "
                        + "; ".join(f"{op} {ms:.2f} ms"
                                    for op, ms in p["idle_ms_by_host_op"].items()))
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cell", help="one framework at one setting, in this process")
    c.add_argument("--framework", required=True, choices=["torch", "zinc", "deepspeed"])
    c.add_argument("--model", required=True, choices=sorted(MODELS))
    c.add_argument("--stage", type=int, default=0, choices=[0, 1, 2, 3])
    c.add_argument("--variant", choices=sorted(VARIANTS),
                   help="a diagnostic change of the zero config (VARIANTS above)")
    c.add_argument("--offload", action="store_true",
                   help="offload_optimizer cpu (pinned); at stage 3 offload_param cpu too")
    c.add_argument("--micro-batch", type=int, default=0, help="default: the model's (8; 2 tiny)")
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--steps", type=int, default=8, help="timed steps after --warmup")
    c.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    c.add_argument("--ds-adam", default="torch", choices=["torch", "fused"],
                   help="DeepSpeed's optimizer: torch.optim.AdamW(fused=True) through "
                        "torch_adam (default), or its own FusedAdam (a JIT build)")
    c.add_argument("--profile", metavar="DIR",
                   help="after the timed steps, one more under torch.profiler: its trace in DIR "
                        "and where the GPU idles in the JSON")
    c.add_argument("--out", help="also write the JSON line to this file")
    al = sub.add_parser("all", help="every cell, each in its own process, in order of value")
    al.add_argument("--out", required=True, help="a folder for each cell's JSON and log")
    al.add_argument("--budget", type=float,
                    default=float(os.environ.get("ZINC_PHASE_BUDGET", "420")),
                    help="seconds for all the cells (default $ZINC_PHASE_BUDGET or 420)")
    al.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: the dry run (tiny models, 1 + 2 steps)")
    al.add_argument("--only", nargs="+", metavar="REGEX",
                    default=os.environ.get("ZINC_GPU_TORCH_ONLY", "").split() or None,
                    help="run only the cells whose name (framework-model-zS[-offload]"
                         "[-profile][-VARIANT], e.g. deepspeed-gpt2-z2-offload, "
                         "zinc-gpt2-z3-persist) matches one of these "
                         "regular expressions, in the plan's order (default "
                         "$ZINC_GPU_TORCH_ONLY, space-separated; unset: every cell)")
    r = sub.add_parser("report", help="the markdown rows of a folder of cells")
    r.add_argument("dir")
    a = p.parse_args()
    if a.cmd == "all":
        return run_all(a)
    if a.cmd == "report":
        print(report(a.dir))
        return 0
    if a.offload and a.stage == 0:
        p.error("--offload needs a ZeRO stage of 1-3")
    try:
        out = run_cell(a)
    except Exception as e:  # noqa: BLE001 - the cell's failure is its row
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        out = {"framework": a.framework, "model": a.model, "stage": a.stage,
               "offload": a.offload, "variant": a.variant, "available": False,
               "reason": f"{type(e).__name__}: {e}".replace("\n", " ")[:400]}
    line = json.dumps(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    return 0 if out.get("available") else 1


if __name__ == "__main__":
    sys.exit(main())
