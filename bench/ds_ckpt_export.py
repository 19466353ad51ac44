#!/usr/bin/env python3
"""ds_ckpt_export.py — a zinc checkpoint exported as a DeepSpeed universal checkpoint
(python -m zinc.utils.to_deepspeed) and resumed by DeepSpeed 0.19.8 itself: DeepSpeed
continues from it as it continued from its own save (run by hand from a venv with DeepSpeed;
CI has none).

    DS_ACCELERATOR=cpu ZINC_LIB=build/libzinc.so /work/main/bench/.venv/bin/python \\
        bench/ds_ckpt_export.py [--work DIR] [--stages 1,2,3] [--zinc-python PY] [NAME ...]

For each committed fixture NAME (tests/python/ds_fixtures, default s2_fp32 s3_bf16): zinc
writes DeepSpeed's checkpoint as a zinc checkpoint (python -m zinc.utils.from_deepspeed), then
exports it (to_deepspeed); DeepSpeed, 2 CPU ranks (gloo) at each ZeRO stage of --stages with
"checkpoint": {"load_universal": true}, loads it (tag None: latest_universal) and trains the 3
steps it trained after its own save in make_fixtures.py, on the same data. Prints, per run,
DeepSpeed's counters and lr after the load, and the largest difference of its fp32 master
weights from those it reached from its own save (relative to each tensor's largest value).
Exits 1 when a run fails or differs by more than 1e-6: DeepSpeed resumes the export's fp32
state, and measured it is bitwise or within 9.5e-8 in fp32 and bf16 alike.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "python", "ds_fixtures")
sys.path.insert(0, FIXTURES)
import make_fixtures  # noqa: E402


def rank_main(uc_dir, name, stage, out):
    import torch
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    with open(os.path.join(FIXTURES, name, "expected.json"), encoding="utf-8") as f:
        want = json.load(f)
    cfg = make_fixtures.config(stage, want["dtype"])
    cfg["checkpoint"] = {"load_universal": True}
    torch.manual_seed(5)        # not the saved weights: the load must replace them
    model = make_fixtures.net(torch)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=cfg)
    path, client = engine.load_checkpoint(uc_dir)
    res = {"path": path, "global_steps": engine.global_steps,
           "global_samples": engine.global_samples, "lr": engine.get_lr()[0],
           "client_epoch": (client or {}).get("epoch")}
    cast = torch.bfloat16 if want["dtype"].startswith("bf16") else torch.float32
    micro = want["micro_batch"]
    for x, y in want["data"][3:]:
        x = torch.tensor(x)[rank * micro:(rank + 1) * micro]
        y = torch.tensor(y)[rank * micro:(rank + 1) * micro]
        loss = torch.nn.functional.mse_loss(engine(x.to(cast)).float(), y)
        engine.backward(loss)
        engine.step()
    worst = 0.0
    for n, p in model.named_parameters():
        got = safe_get_full_fp32_param(p).float().flatten()
        ref = torch.tensor(want["continued"][n])
        worst = max(worst, ((got - ref).abs().max() / ref.abs().max()).item())
    res["worst"] = worst
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(res, f)
    torch.distributed.barrier()
    sys.stdout.flush()
    os._exit(0)


def run_ds(uc_dir, name, stage, out):
    port = str(make_fixtures.free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", uc_dir, name,
                                       str(stage), out], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    errs = [p.communicate()[1] for p in procs]
    return [p.returncode for p in procs], errs


def main(argv):
    if argv[:1] == ["--rank"]:
        rank_main(argv[1], argv[2], int(argv[3]), argv[4])
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("--work", default=None)
    p.add_argument("--stages", default="1,2,3",
                   help="DeepSpeed's ZeRO stages (0 fails: DeepSpeed reads universal "
                        "checkpoints only through its ZeRO optimizers)")
    p.add_argument("--zinc-python", default=sys.executable,
                   help="the Python (and so the torch) that runs zinc's converters, e.g. "
                        "CI's /usr/bin/python3 with torch 1.13: DeepSpeed must read its files")
    p.add_argument("names", nargs="*")
    a = p.parse_args(argv)
    work = a.work or tempfile.mkdtemp(prefix="ds_export_")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    bad = 0
    for name in a.names or ["s2_fp32", "s3_bf16"]:
        zdir, udir = os.path.join(work, name, "zinc"), os.path.join(work, name, "universal")
        for mod, args in (("from_deepspeed", [os.path.join(FIXTURES, name, "ckpt"), zdir]),
                          ("to_deepspeed", [zdir, udir])):
            subprocess.run([a.zinc_python, "-m", f"zinc.utils.{mod}"] + args, env=env,
                           check=True, capture_output=True)
        want = json.load(open(os.path.join(FIXTURES, name, "expected.json")))
        tol = 1e-6
        for stage in (int(s) for s in a.stages.split(",")):
            out = os.path.join(work, name, f"ds_stage{stage}.json")
            rcs, errs = run_ds(udir, name, stage, out)
            if any(rcs) or not os.path.exists(out):
                bad += 1
                print(f"{name}: DeepSpeed stage {stage}: FAILED (ranks exited {rcs})\n"
                      f"{errs[0][-3000:]}")
                continue
            res = json.load(open(out))
            ok = (res["worst"] <= tol and res["global_steps"] == want["global_steps"] and
                  abs(res["lr"] - want["lr"]) <= 1e-12 * want["lr"])
            bad += not ok
            print(f"{name}: DeepSpeed stage {stage}, 2 ranks, load_universal: global_steps "
                  f"{res['global_steps']} (saved {want['global_steps']}), global_samples "
                  f"{res['global_samples']}, lr {res['lr']:.6g} (saved {want['lr']:.6g}), "
                  f"client epoch {res['client_epoch']}; after 3 steps worst rel. diff "
                  f"{res['worst']:.2e} (bound {tol:g}) {'ok' if ok else 'FAILED'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
