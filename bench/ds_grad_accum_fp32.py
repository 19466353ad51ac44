"""ds_grad_accum_fp32.py — bf16 training with data_types.grad_accum_dtype "fp32" under DeepSpeed
0.19.8 and under zinc, the same script (a cross-check run by hand: DeepSpeed is never a
dependency, CI has none):

    DS_ACCELERATOR=cpu ZINC_LIB=build/libzinc.so OMP_NUM_THREADS=1 \
        bench/.venv/bin/python bench/ds_grad_accum_fp32.py

For 1 and 2 ranks, ZeRO stages 2 and 3, each also with offload_optimizer "cpu", with the key
and without it (bf16 sums), 4 accumulation steps: a 3-layer MLP (64 wide, LayerNorm) trains 6
optimizer steps on fixed random data (each rank its own), once with `import deepspeed` and once
with `import zinc`, torch_adam on. One rank: one process each. Two ranks: DeepSpeed's two
processes with its launcher's environment set by hand (gloo), zinc's under `mpirun -np 2`
(zinc's MPI world). At each window's end, before the step, every parameter's gradient is read
back (safe_get_full_grad), and after it the fp32 master (safe_get_full_fp32_param); rank 0
keeps them.

The two engines' Adam kernels round differently in the last bit of the master (zinc's fused
kernel, torch.optim.AdamW's foreach code), so after some steps a bf16 weight rounds the other
way and from there the runs part. Checked: in every window before the first differing bf16
weight the gradients are bitwise DeepSpeed's (at least 3 windows). Printed beside: the largest
relative loss difference over all windows, and how far the key moves DeepSpeed's gradients.
Exits 1 when a check fails.
"""
import os
import subprocess
import sys
import tempfile

STEPS, ACCUM = 6, 4


def train(engine, stage, offload, fp32acc, out):
    import torch
    if engine == "zinc":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import zinc as ds
        from zinc.utils import safe_get_full_fp32_param, safe_get_full_grad
    else:
        import deepspeed as ds
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_grad
        ds.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ACCUM,
              "steps_per_print": 1 << 30, "gradient_clipping": 1.0, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01,
                                                        "torch_adam": True}},
              "zero_optimization": {"stage": stage}}
    if offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if fp32acc:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    eng, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(), config=config)
    g = torch.Generator().manual_seed(1 + 1000 * eng.global_rank)
    windows = []
    for it in range(STEPS * ACCUM):
        x = torch.randn(4, 32, generator=g).to(torch.bfloat16)
        y = torch.randn(4, 8, generator=g).to(torch.bfloat16)
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


def run(engine, stage, offload, fp32acc, tmp, ranks):
    out = os.path.join(tmp, f"{engine}-{stage}-{offload}-{fp32acc}-{ranks}.pt")
    args = [sys.executable, __file__, engine, str(stage), str(offload), str(fp32acc), out]
    port = str(29620 + ranks * 16 + stage * 4 + offload * 2 + fp32acc)
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


def compare(ds, zc):
    """(windows with the same bf16 weights before them whose gradients are bitwise equal, those
    compared, the largest relative loss difference)."""
    import torch
    equal = compared = 0
    for w, (a, b) in enumerate(zip(ds, zc)):
        compared += 1
        equal += all(torch.equal(a["grads"][n], b["grads"][n]) for n in a["grads"])
        if any(not torch.equal(a["masters"][n].bfloat16(), b["masters"][n].bfloat16())
               for n in a["masters"]):
            break          # the next window's backward runs on other weights
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ds, zc))
    return equal, compared, worst


def main():
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for ranks, stage, offload in [(r, s, o) for r in (1, 2) for o in (0, 1) for s in (2, 3)]:
            deepspeed = {}
            where = f", {ranks} rank{'s' if ranks > 1 else ''}" + \
                (", offload_optimizer cpu" if offload else "")
            for fp32acc in (1, 0):
                ds = run("deepspeed", stage, offload, fp32acc, tmp, ranks)
                zc = run("zinc", stage, offload, fp32acc, tmp, ranks)
                deepspeed[fp32acc] = ds
                equal, compared, worst = compare(ds, zc)
                good = equal == compared and compared >= 3
                ok &= good
                print(f"stage {stage}{where}, {'fp32' if fp32acc else 'bf16'} sums: gradients bitwise "
                      f"DeepSpeed's in {equal} of {compared} windows on equal weights "
                      f"({'ok' if good else 'FAILED'}); losses over {STEPS} windows within "
                      f"{worst:.2g} relative")
            moved = max((a["grads"][n] - b["grads"][n]).abs().max().item()
                        for n in deepspeed[1][0]["grads"]
                        for a, b in [(deepspeed[1][0], deepspeed[0][0])])
            print(f"stage {stage}{where}: the key changes DeepSpeed's first gradient by up to "
                  f"{moved:.3g}")
            ok &= moved > 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if len(sys.argv) == 6:
        train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
