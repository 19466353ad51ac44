#!/usr/bin/env python3
"""torch_gpt.py — zinc's built-in byte-level GPT (docs/train.md) in PyTorch, for tokens/s side by
side with `zinc train --device cuda`.

The same shapes: vocabulary 256, token + position embeddings, L pre-LayerNorm blocks (fused qkv
with bias, causal attention, output projection, MLP D -> 4D -> D with tanh GELU), final LayerNorm,
LM head tied to the token embedding, mean cross-entropy. Trained the way a PyTorch user would:
fp32 parameters, eager mode, bf16 autocast, torch.optim.AdamW(fused=True), attention through
F.scaled_dot_product_attention. Random byte tokens (the speed does not depend on the data).
Prints one JSON object (--json) or a line; exits 3 when torch or CUDA is not there.
"""
import argparse
import json
import re
import statistics
import sys
import time


def parse_spec(s):
    f = dict(re.findall(r"([LDHT])(\d+)", s))
    if set(f) != set("LDHT"):
        raise SystemExit(f"torch_gpt: --model wants L<n>-D<n>-H<n>-T<n>, not '{s}'")
    return int(f["L"]), int(f["D"]), int(f["H"]), int(f["T"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="L2-D64-H4-T64")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=30, help="timed steps, after 5 warm-up steps")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(json.dumps({"available": False, "reason": f"import torch failed: {e}"}))
        return 3
    if not torch.cuda.is_available():
        print(json.dumps({"available": False, "reason": "torch sees no CUDA device"}))
        return 3
    L, D, H, T = parse_spec(a.model)
    B = a.micro_batch
    dev = torch.device("cuda")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-5), nn.LayerNorm(D, eps=1e-5)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.fc_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(256, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(D, eps=1e-5)

        def forward(self, tok, tgt):
            x = self.wte(tok) + self.wpe(torch.arange(T, device=tok.device))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().reshape(-1, 256), tgt.reshape(-1))

    torch.manual_seed(1)
    model = GPT().to(dev)
    nparams = sum(t.numel() for t in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01,
                            fused=True)
    times = []
    for i in range(5 + a.steps):
        data = torch.randint(0, 256, (B, T + 1), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    res = {"available": True, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "model": a.model, "params": nparams, "micro_batch": B, "steps": a.steps,
           "ms_per_step_median": med * 1e3, "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3,
           "tokens_per_s": B * T / med, "final_loss": float(loss)}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {a.model} B={B}: {res['tokens_per_s']:.0f} tok/s, "
              f"{res['ms_per_step_median']:.2f} ms/step (median of {a.steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
