"""lora_time.py — the step time of a LoRA model at stage 3 on the CPU, and the host time
inside zinc's hooks (bench/RESULTS.md 11j).

    TAG=now python bench/lora_time.py [STEPS]        (default 30; bench/.venv: peft, transformers)

transformers' GPT-2 (4 layers of 256, vocabulary 8000) with PEFT LoRA r=8 on c_attn and c_fc (the
base frozen: stage 3 keeps it in the frozen engine's pieces), bf16, one rank, STEPS steps of
2 x 64 random tokens. Prints the median step after the first 3, the hooks' host time per step
(engine.hook_seconds) and the last loss, after TAG. To compare two front-ends, run it alternately
with PYTHONPATH naming each one's python/.
"""
import os
import statistics
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

import zinc


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=8000,
                                   n_positions=128))
    m = get_peft_model(m, LoraConfig(r=8, target_modules=["c_attn", "c_fc"],
                                     fan_in_fan_out=True))
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}
    e, *_ = zinc.initialize(model=m, config=cfg,
                            model_parameters=[p for p in m.parameters() if p.requires_grad])
    times = []
    for _ in range(steps):
        x = torch.randint(0, 8000, (2, 64))
        t0 = time.perf_counter()
        loss = e(input_ids=x, labels=x).loss
        e.backward(loss)
        e.step()
        times.append(time.perf_counter() - t0)
    print(f"RESULT {os.environ.get('TAG', '')} median {statistics.median(times[3:]) * 1e3:.1f} ms "
          f"hooks {e.hook_seconds() / len(times) * 1e3:.2f} ms/step loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
