"""ds_grad_accum_fp32.py — bf16 training with data_types.grad_accum_dtype "fp32" under DeepSpeed
0.19.8 and under zinc, the same script (a cross-check run by hand: DeepSpeed is never a
dependency, CI has none):

    DS_ACCELERATOR=cpu ZINC_LIB=build/libzinc.so OMP_NUM_THREADS=1 \
        bench/.venv/bin/python bench/ds_grad_accum_fp32.py

With the argument `wire`, only the two-rank rows with communication_data_type "fp32" as well
(fp32 sums reduced in fp32).

bf16 on 1 and 2 ranks and fp16 (dynamic loss scale from 2^8; DeepSpeed's CPU accelerator told
fp16 is supported, as tests/python/ds_fixtures/make_fixtures.py does) on 1, ZeRO stages 1, 2 and 3
(stage 1: DeepSpeed's BF16_Optimizer for bf16 without offload, stage_1_and_2.py otherwise),
each also with offload_optimizer "cpu", with the key and without it (16-bit sums), 4
accumulation steps: a 3-layer MLP (64 wide, LayerNorm) trains 6
optimizer steps on fixed random data (each rank its own), once with `import deepspeed` and once
with `import zinc`, torch_adam on. One rank: one process each. Two ranks: DeepSpeed's two
processes with its launcher's environment set by hand (gloo), zinc's under `mpirun -np 2`
(zinc's MPI world). At each window's end, before the step, every parameter's gradient is read
back (safe_get_full_grad), and after it the fp32 master (safe_get_full_fp32_param); rank 0
keeps them.

The two engines' Adam kernels round differently in the last bit of the master (zinc's fused
kernel, torch.optim.AdamW's foreach code), so after some steps a 16-bit weight may round the
other way; the next window then runs on other weights. Checked: in every window both runs begin
with the same 16-bit weights, the gradients are bitwise DeepSpeed's (at least 3 such windows). Printed beside: the largest
relative loss difference over all windows, and how far the key moves DeepSpeed's gradients.
Exits 1 when a check fails.
"""
import os
import subprocess
import sys
import tempfile

STEPS, ACCUM = 6, 4


def train(engine, stage, offload, fp32acc, out, dtype):
    import torch
    tdt = getattr(torch, "bfloat16" if dtype == "bf16" else "float16")
    if engine == "zinc":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import zinc as ds
        from zinc.utils import safe_get_full_fp32_param, safe_get_full_grad
    else:
        import deepspeed as ds
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_grad
        from deepspeed.accelerator import get_accelerator
        # its CPU accelerator refuses fp16 where oneDNN lacks fp16 kernels; torch's train anyway
        type(get_accelerator()).is_fp16_supported = lambda self: True
        ds.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ACCUM,
              "steps_per_print": 1 << 30, "gradient_clipping": 1.0,
              dtype: {"enabled": True, **({"initial_scale_power": 8} if dtype == "fp16" else {})},
              "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01,
                                                        "torch_adam": True}},
              "zero_optimization": {"stage": stage}}
    if offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if fp32acc:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    if fp32acc == 2:
        config["communication_data_type"] = "fp32"
    eng, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(), config=config)
    g = torch.Generator().manual_seed(1 + 1000 * eng.global_rank)
    windows = []
    for it in range(STEPS * ACCUM):
        x = torch.randn(4, 32, generator=g).to(tdt)
        y = torch.randn(4, 8, generator=g).to(tdt)
        loss = torch.nn.functional.mse_loss(eng(x).float(), y.float())
        eng.backward(loss)
        end = (it + 1) % ACCUM == 0
        if end:
            grads = {n: safe_get_full_grad(p).float().clone()
                     for n, p in model.named_parameters()}
        eng.step()
        if end:
            masters = {n: safe_get_full_fp32_param(p).float().clone()
                       for n, p in model.named_parameters()}
            windows.append({"grads": grads, "masters": masters, "loss": loss.item()})
    if eng.global_rank == 0:
        torch.save(windows, out)


def run(engine, stage, offload, fp32acc, tmp, ranks, dtype):
    out = os.path.join(tmp, f"{engine}-{stage}-{offload}-{fp32acc}-{ranks}-{dtype}.pt")
    args = [sys.executable, __file__, engine, str(stage), str(offload), str(fp32acc), out, dtype]
    port = str(29620 + ranks * 16 + stage * 4 + offload * 2 + fp32acc % 2 + 64 * (dtype == "fp16")
               + 128 * (fp32acc == 2))
    if engine == "zinc" and ranks > 1:
        procs = [subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                                   str(ranks)] + args, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)]
    else:
        procs = [subprocess.Popen(args, env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                                                 WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(ranks)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"{engine} stage {stage}, {ranks} ranks: failed\n{err[-3000:]}")
    import torch
    return torch.load(out)


def compare(ds, zc, dtype):
    """(windows whose gradients are bitwise equal among those the two runs begin with the same
    16-bit weights, those windows, the largest relative loss difference). A window after one
    whose update left a 16-bit weight rounded the other way runs its backward on other weights
    and is not compared; the runs may meet again later."""
    import torch
    tdt = getattr(torch, "bfloat16" if dtype == "bf16" else "float16")
    equal = compared = 0
    for w, (a, b) in enumerate(zip(ds, zc)):
        if w and any(not torch.equal(ds[w - 1]["masters"][n].to(tdt),
                                     zc[w - 1]["masters"][n].to(tdt)) for n in a["masters"]):
            continue
        compared += 1
        equal += all(torch.equal(a["grads"][n], b["grads"][n]) for n in a["grads"])
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ds, zc))
    return equal, compared, worst


def first_window_gap(a, b):
    """The largest difference between two runs' gradients of their first window."""
    return max((a[0]["grads"][n] - b[0]["grads"][n]).abs().max().item() for n in a[0]["grads"])


def main(wire_only, only_stage=0):
    ok = True
    sums = {0: None, 1: "fp32", 2: "fp32 reduced in fp32"}
    with tempfile.TemporaryDirectory() as tmp:
        for (ranks, dtype), stage, offload in [(rd, s, o) for rd in ((1, "bf16"), (1, "fp16"),
                                                                      (2, "bf16"))
                                               for o in (0, 1) for s in (1, 2, 3)]:
            if wire_only and ranks == 1 or only_stage and stage != only_stage:
                continue
            deepspeed = {}
            where = f", {dtype}, {ranks} rank{'s' if ranks > 1 else ''}" + \
                (", offload_optimizer cpu" if offload else "")
            # 2: communication_data_type "fp32" too, which matters with more than one rank
            modes = (1, 0) + ((2,) if ranks > 1 else ())
            for fp32acc in (2,) if wire_only else modes:
                ds = run("deepspeed", stage, offload, fp32acc, tmp, ranks, dtype)
                zc = run("zinc", stage, offload, fp32acc, tmp, ranks, dtype)
                deepspeed[fp32acc] = ds
                equal, compared, worst = compare(ds, zc, dtype)
                good = equal == compared and compared >= 3
                ok &= good
                print(f"stage {stage}{where}, {sums[fp32acc] or dtype} sums: gradients bitwise "
                      f"DeepSpeed's in {equal} of {compared} windows on equal weights "
                      f"({'ok' if good else 'FAILED'}); losses over {STEPS} windows within "
                      f"{worst:.2g} relative")
            if wire_only:
                continue
            moved = first_window_gap(deepspeed[1], deepspeed[0])
            print(f"stage {stage}{where}: the key changes DeepSpeed's first gradient by up to "
                  f"{moved:.3g}")
            ok &= moved > 0
            if 2 in deepspeed:
                wired = first_window_gap(deepspeed[2], deepspeed[1])
                print(f"stage {stage}{where}: communication_data_type \"fp32\" changes "
                      f"DeepSpeed's first gradient (fp32 sums) by up to {wired:.3g}")
                ok &= wired > 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if len(sys.argv) == 7:
        train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
              sys.argv[6])
    else:
        # "wire": only the rows with communication_data_type "fp32" (two ranks); "stage1" (2,
        # 3): only that stage's rows
        args = sys.argv[1:]
        main("wire" in args, next((int(a[5:]) for a in args if a.startswith("stage")), 0))
