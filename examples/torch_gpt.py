#!/usr/bin/env python3
"""torch_gpt.py — a small GPT in plain torch.nn, trained by zinc's ZeRO engine from a DeepSpeed
config: what a DeepSpeed user's script looks like under zinc.

    mpirun -np 4 python examples/torch_gpt.py --deepspeed_config configs/zero3_bf16.json
    python examples/torch_gpt.py --steps 50                 # one process
    python examples/torch_gpt.py --model hf                 # Hugging Face GPT-2, if installed
    python examples/torch_gpt.py --activation-checkpointing # blocks recomputed in backward
    mpirun -np 4 python examples/torch_gpt.py --zero-init   # built partitioned (zinc.zero.Init)
    torchrun --nproc-per-node 2 examples/torch_gpt.py --device cuda   # one GPU per process

`--model hf` builds a tiny `transformers` GPT2LMHeadModel from a GPT2Config (no download; the
same sizes as the plain model, dropout off) and trains it the same way.

The data is zinc's synthetic byte-level task made small: sequences from a fixed random
first-order Markov chain over 32 symbols, so the loss has somewhere to go (ln 32 = 3.47 at the
start). Each rank takes its slice of every global batch. The only lines that differ from a
DeepSpeed script are the import and `zinc.initialize`.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F



class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        causal = torch.ones(t, t, dtype=torch.bool, device=att.device).triu(1)
        att = att.masked_fill(causal, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def gpt2_init(m):
    if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    if isinstance(m, torch.nn.Linear):
        torch.nn.init.zeros_(m.bias)


class GPT(torch.nn.Module):
    def __init__(self, vocab=32, d=64, h=4, layers=2, t=32, checkpoint=None):
        super().__init__()
        self.checkpoint = checkpoint    # e.g. zinc.checkpointing.checkpoint: blocks recomputed
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(t, d)
        self.blocks = torch.nn.ModuleList(Block(d, h) for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(d)
        # GPT-2's initialisation, through Module.apply: inside zinc.zero.Init (--zero-init) it
        # is how an enclosing constructor writes submodules' parameters, already partitioned.
        self.apply(gpt2_init)

    def forward(self, tok):
        x = self.wte(tok) + self.wpe(torch.arange(tok.shape[1], device=tok.device))
        for blk in self.blocks:
            x = self.checkpoint(blk, x) if self.checkpoint and self.training else blk(x)
        return self.lnf(x) @ self.wte.weight.t()       # tied head


def hf_gpt2(vocab=32, d=64, h=4, layers=2, t=32):
    """The same sizes as a transformers GPT-2 built from its config (nothing is downloaded);
    dropout off, so that every rank and every run computes the same thing."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as ex:
        sys.exit(f"torch_gpt.py: --model hf needs the transformers package ({ex})")
    cfg = GPT2Config(vocab_size=vocab, n_positions=t, n_embd=d, n_layer=layers, n_head=h,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    model = GPT2LMHeadModel(cfg)

    class Logits(torch.nn.Module):                      # engine(x) -> logits, as GPT() gives
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tok):
            return self.m(input_ids=tok).logits

    return Logits(model)


def markov_batches(n_seq, t, seed=1):
    g = torch.Generator().manual_seed(seed)
    trans = torch.rand(32, 32, generator=g) ** 8             # a peaked random chain
    trans /= trans.sum(1, keepdim=True)
    step = 0
    while True:
        gs = torch.Generator().manual_seed(seed * 1000003 + step)
        seq = torch.empty(n_seq, t + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, 32, (n_seq,), generator=gs)
        for i in range(t):
            seq[:, i + 1] = torch.multinomial(trans[seq[:, i]], 1, generator=gs).squeeze(1)
        yield seq[:, :-1], seq[:, 1:]
        step += 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--deepspeed_config", default=os.path.join(os.path.dirname(__file__), "..",
                                                              "configs", "zero3_bf16.json"))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--model", choices=["gpt", "hf"], default="gpt",
                   help="gpt: the plain torch.nn GPT above; hf: transformers' GPT2LMHeadModel")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each block's activations in backward (gpt: "
                        "zinc.checkpointing.checkpoint, DeepSpeed's deepspeed.checkpointing; hf: "
                        "transformers' gradient_checkpointing_enable)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: the model on the GPU of the node-local rank (one per process: "
                        "torchrun, srun or mpirun), NCCL between the processes")
    p.add_argument("--zero-init", action="store_true",
                   help="build the model inside zinc.zero.Init (partitioned over the ranks as "
                        "it is built, for a model too large to build whole on every rank)")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no CUDA device")
    # Imported here, not at the top, so that bench/torch_zero3.py can take the GPT class from
    # this file without loading libzinc into the FSDP2 and DeepSpeed processes it measures.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import zinc

    torch.manual_seed(0)                      # (zinc.initialize takes rank 0's weights)
    # --zero-init: each module's parameters are partitioned over the ranks as it is built
    # (rank 0's values), so no rank holds the whole model before initialize.
    with zinc.zero.Init(enabled=args.zero_init):
        if args.model == "gpt":
            model = GPT(checkpoint=zinc.checkpointing.checkpoint
                        if args.activation_checkpointing else None)
        else:
            model = hf_gpt2()
    if args.model == "hf" and args.activation_checkpointing:
        model.m.gradient_checkpointing_enable()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", zinc.local_rank())
        torch.cuda.set_device(device)
        model.to(device)
    engine, _, _, _ = zinc.initialize(args=args, model=model, model_parameters=model.parameters())
    rank, world = engine.global_rank, engine.world_size
    micro = engine.train_micro_batch_size_per_gpu()
    data = markov_batches(micro * world, 32)
    for step in range(1, args.steps + 1):
        for _ in range(engine.gradient_accumulation_steps()):
            x, y = next(data)
            x, y = x[rank * micro:(rank + 1) * micro], y[rank * micro:(rank + 1) * micro]
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(engine(x).float().reshape(-1, 32), y.reshape(-1))
            engine.backward(loss)
            engine.step()
        if rank == 0 and (step % 10 == 0 or step in (1, args.steps)):
            norm = engine.get_global_grad_norm()   # None at stage 0 in fp32, as DeepSpeed's
            print(f"step {step:4d}  loss {float(loss.detach()):.4f}  lr {engine.get_lr()[0]:.2e}  "
                  f"grad norm {'-' if norm is None else format(norm, '.3f')}", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
