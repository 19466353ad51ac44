"""ds_direct_backward.py — one run of a small MLP (Linear, LayerNorm, Linear; AdamW with
torch_adam, clipping 1.0, accumulation ACC, 3 optimizer steps) through DeepSpeed 0.19.8 or
`import zinc`, the backward taken as MODE: `engine` (engine.backward(loss)), `direct`
(loss.backward()) or `scaled` (engine.scale(loss).backward()). Prints one line
`RESULT {"losses": [...], "w": [per-tensor weight sums], "err": ...}`; compare the lines of the
two frameworks (docs/python.md, "loss.backward() called directly"). One process per run:

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29701 DS_ACCELERATOR=cpu \
        ZINC_LIB=build/libzinc.so.0.1.0 PYTHONPATH=python OMP_NUM_THREADS=1 \
        bench/.venv/bin/python bench/ds_direct_backward.py ds|zinc STAGE fp32|bf16|fp16 ACC MODE
"""
import json
import sys
fw, stage, dtype, ga = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
mode = sys.argv[5] if len(sys.argv) > 5 else "direct"
import torch  # noqa: E402
if fw == "ds":
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    type(get_accelerator()).is_fp16_supported = lambda self: True
else:
    import zinc as deepspeed
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
       "gradient_clipping": 1.0, "zero_optimization": {"stage": stage}}
if dtype == "bf16": cfg["bf16"] = {"enabled": True}
if dtype == "fp16": cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
eng, *_ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
g = torch.Generator().manual_seed(1)
losses = []
err = None
try:
    for i in range(3 * ga):
        x = torch.randn(4, 8, generator=g); y = torch.randn(4, 4, generator=g)
        if dtype != "fp32": x = x.to(torch.bfloat16 if dtype == "bf16" else torch.float16)
        out = eng(x)
        loss = ((out.float() - y) ** 2).mean()
        if mode == "direct":
            loss.backward()
        elif mode == "scaled":
            eng.scale(loss).backward()
        else:
            eng.backward(loss)
        eng.step()
        losses.append(loss.item())
except Exception as ex:
    err = f"{type(ex).__name__}: {ex}"[:300]
sd = None
if err is None:
    if stage == 3 and fw == "ds":
        sd = eng._zero3_consolidated_16bit_state_dict()
    else:
        sd = eng.module_state_dict()
    ws = [float(v.double().sum()) for v in sd.values()]
else:
    ws = None
print("RESULT " + json.dumps({"losses": losses, "w": ws, "err": err}))
