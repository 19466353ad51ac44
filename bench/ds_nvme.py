#!/usr/bin/env python3
"""ds_nvme.py — DeepSpeed's ZeRO-Infinity optimizer tier (offload_optimizer "nvme") on the CPU,
the work of `zinc bench offload --nvme` (bench/RESULTS.md section 8b).

    DS_ACCELERATOR=cpu bench/.venv/bin/python bench/ds_nvme.py --params 1e7,1e8 \\
        --nvme /work/nvtest --stage 2 --dtype bf16 --repeat 5
    DS_ACCELERATOR=cpu bench/.venv/bin/python bench/ds_nvme.py --params 1e7,1e8 \\
        --nvme /work/nvtest --stage 3 --dtype bf16 --repeat 5 --buffer-count 12

What it measures: one rank (world size 1, gloo, DS_ACCELERATOR=cpu) trains a synthetic stack of
16 equal torch.nn.Linear layers without bias, d × d each with 16·d² ≈ P, under
deepspeed.initialize with

    zero_optimization: {stage S, offload_optimizer: {device: nvme, nvme_path: DIR,
                        pipeline_read: true, pipeline_write: true, buffer_count: B},
                        sub_group_size: P/16}
    aio: {block_size: 1048576, queue_depth: 8}, optimizer AdamW, bf16/fp16/fp32

and times engine.step() alone (forward and backward are run, not timed): the median of --repeat
timed steps after one warm-up. sub_group_size P/16 gives stage 3 one optimizer sub-group per layer
group, so its pipelined swapper has 16 pieces to overlap (DeepSpeed's default, 1e9, would make a
single sub-group and nothing to pipeline). B is --buffer-count, DeepSpeed's default 4; in 0.19.8
the pipelined swapper (stage 3) needs 12 here — it holds up to 3 sub-groups (swap-in, prefetch,
swap-out) of 4 tensors (master, m, v, gradient) — and asserts at the first step with 4
(pipelined_optimizer_swapper.py:219) and at the second with 8-11 (line 253, "ran out of swap
buffers"); --no-pipeline runs with 4.

Reported per case (one JSON line): step ms (median, min, max), the step's disk I/O as the
process's own /proc/self/io read_bytes / write_bytes over the timed steps (per step; DeepSpeed
exposes no byte counter of its own), the same over one backward, the bytes DeepSpeed left under
DIR (its swap files), RSS after the steps and peak RSS (VmHWM), and which optimizer and swapper
DeepSpeed built. DeepSpeed 0.19.8 swaps optimizer state only at stage 3 (stage3.py,
_configure_tensor_swapping); at stages 1-2 stage_1_and_2.py turns any offload_optimizer device
that is not "none" into cpu_offload, so "nvme" there keeps the state in host memory and the
swap-file bytes show it (`swapper` null, nothing written under DIR).

Each case runs in a fresh child process (so RSS is the case's own and no two engines share a
process group); the parent prints the children's lines. A case that fails prints a JSON line with
`ok: false`, the exception and DeepSpeed's innermost frame. Needs DeepSpeed's async_io op, which
the CPU accelerator JIT-builds against libaio (Debian: libaio-dev) on first use (minutes).
Exit codes: 0 every case ran, 1 some case failed, 3 deepspeed could not be imported.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback

GROUPS = 16


def read_io():
    """Bytes this process (all its threads) made the block layer read and write so far."""
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v)
    return out["read_bytes"], out["write_bytes"]


def rss_kib():
    """(VmRSS, VmHWM) of this process in KiB."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                vals[k] = int(v.split()[0])
    return vals["VmRSS"], vals["VmHWM"]


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def ds_frame(tb):
    """The innermost frame inside deepspeed/ of a traceback: where DeepSpeed refused."""
    where = None
    for fr in traceback.extract_tb(tb):
        if "/deepspeed/" in fr.filename:
            where = f"{fr.filename.split('/site-packages/')[-1]}:{fr.lineno} ({fr.name})"
    return where


def run_case(a, params):
    """Build the engine for one parameter count, time its steps, print one JSON line."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(a.port))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    rec = {"ok": False, "params_asked": params, "stage": a.stage, "dtype": a.dtype,
           "nvme": a.nvme}
    try:
        import torch
        import deepspeed
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        rec["error"] = f"import failed: {e}"
        print(json.dumps(rec), flush=True)
        return 3
    rec.update(deepspeed=deepspeed.__version__, torch=torch.__version__,
               threads=torch.get_num_threads())
    swap_dir = os.path.join(a.nvme, f"ds_nvme_{os.getpid()}")
    try:
        deepspeed.init_distributed(dist_backend="gloo")
        d = int(round((params / GROUPS) ** 0.5))
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(GROUPS)])
        n = sum(p.numel() for p in model.parameters())
        rec.update(params=n, width=d)
        os.makedirs(swap_dir, exist_ok=True)
        cfg = {
            "train_micro_batch_size_per_gpu": a.batch,
            "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999],
                                                      "eps": 1e-8, "weight_decay": 0.01}},
            "zero_optimization": {
                "stage": a.stage,
                "offload_optimizer": {"device": "nvme", "nvme_path": swap_dir,
                                      "pipeline_read": a.pipeline, "pipeline_write": a.pipeline,
                                      "buffer_count": a.buffer_count},
                "sub_group_size": a.sub_group_size or max(1, n // GROUPS),
            },
            "aio": {"block_size": 1048576, "queue_depth": 8},
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }
        if a.dtype == "bf16":
            cfg["bf16"] = {"enabled": True}
        elif a.dtype == "fp16":
            cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
        rec["config"] = cfg
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                 config=cfg)
        inner = getattr(opt, "optimizer", None)
        swapper = getattr(opt, "optimizer_swapper", None)
        rec.update(zero_optimizer=type(opt).__name__, optimizer=type(inner).__name__,
                   swapper=type(swapper).__name__ if swapper is not None else None)
        wdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
        x = torch.randn(a.batch, d, generator=torch.Generator().manual_seed(1)).to(wdt)
        times, step_io, bwd_io = [], [], []
        for r in range(a.repeat + 1):  # r = 0 warms up: state creation, first swap-out
            rec["failed_at_step"] = r
            loss = engine(x).float().pow(2).mean()
            io0 = read_io()
            engine.backward(loss)
            io1 = read_io()
            t0 = time.perf_counter()
            engine.step()
            t1 = time.perf_counter()
            io2 = read_io()
            if r > 0:
                times.append(t1 - t0)
                bwd_io.append((io1[0] - io0[0], io1[1] - io0[1]))
                step_io.append((io2[0] - io1[0], io2[1] - io1[1]))
        del rec["failed_at_step"]
        rss, hwm = rss_kib()
        med = statistics.median(times)
        rec.update(
            ok=True,
            step_ms=med * 1e3, step_ms_min=min(times) * 1e3, step_ms_max=max(times) * 1e3,
            step_read_bytes=statistics.median(b[0] for b in step_io),
            step_write_bytes=statistics.median(b[1] for b in step_io),
            backward_read_bytes=statistics.median(b[0] for b in bwd_io),
            backward_write_bytes=statistics.median(b[1] for b in bwd_io),
            io_formula_bytes=2 * 12 * n,
            swap_dir_bytes=dir_bytes(swap_dir),
            rss_gb=rss * 1024 / 1e9, peak_rss_gb=hwm * 1024 / 1e9,
            loss=float(loss.detach()))
    except Exception as e:  # noqa: BLE001 - the refusal itself is the result
        rec.update(error=f"{type(e).__name__}: {e}"[:2000], where=ds_frame(e.__traceback__))
    finally:
        shutil.rmtree(swap_dir, ignore_errors=True)
    print(json.dumps(rec), flush=True)
    return 0 if rec["ok"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", default="1e7,1e8",
                   help="comma-separated parameter counts (default 1e7,1e8)")
    p.add_argument("--nvme", default="/work/nvtest",
                   help="nvme_path: a directory on the disk to measure (default /work/nvtest)")
    p.add_argument("--repeat", type=int, default=5, help="timed steps after one warm-up (default 5)")
    p.add_argument("--stage", type=int, default=2, choices=[1, 2, 3], help="ZeRO stage (default 2)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"],
                   help="working dtype (default bf16)")
    p.add_argument("--batch", type=int, default=4, help="rows of the synthetic input (default 4)")
    p.add_argument("--sub-group-size", type=int, default=0,
                   help="zero_optimization.sub_group_size (default 0 = params / 16)")
    p.add_argument("--buffer-count", type=int, default=4,
                   help="offload_optimizer.buffer_count (default 4, DeepSpeed's)")
    p.add_argument("--no-pipeline", dest="pipeline", action="store_false",
                   help="pipeline_read and pipeline_write false (default true)")
    p.add_argument("--port", type=int, default=29631, help="MASTER_PORT if unset (default 29631)")
    p.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one is not None:
        return run_case(a, int(a.one))
    os.makedirs(a.nvme, exist_ok=True)
    worst = 0
    for s in a.params.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--one", s, "--nvme", a.nvme,
               "--repeat", str(a.repeat), "--stage", str(a.stage), "--dtype", a.dtype,
               "--batch", str(a.batch), "--sub-group-size", str(a.sub_group_size),
               "--buffer-count", str(a.buffer_count), "--port", str(a.port)]
        if not a.pipeline:
            cmd.append("--no-pipeline")
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if lines:
            print(lines[-1], flush=True)
        else:
            print(json.dumps({"ok": False, "params_asked": float(s), "stage": a.stage,
                              "dtype": a.dtype, "error": f"child exited {r.returncode}, no JSON"}),
                  flush=True)
        worst = max(worst, r.returncode if r.returncode in (0, 1, 3) else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
