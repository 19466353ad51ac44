"""frozen_memory.py — where stage 3 keeps a LoRA run's frozen base (bench/RESULTS.md 11j-11l).

    mpirun -np 2 python -m zinc.as_deepspeed bench/frozen_memory.py [none|cpu|nvme DIR]

A 29M-parameter Llama (4 layers, hidden 512, vocabulary 16000) built in zero.Init, LoRA r=8 on
q_proj and v_proj (peft), bf16, stage 3, with offload_param (and offload_optimizer) of the given
device; one step. Prints, per rank, the frozen engine's 16-bit shard on the device, in host
memory and in its NVMe scratch file (zinc_memory, zinc_memory_host, zinc_nvme_bytes), its gather
area, and RSS. Needs transformers and peft (bench/.venv).
"""
import ctypes
import gc
import os
import sys

import torch
import deepspeed
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def rss_mib():
    gc.collect()
    with open("/proc/self/status") as f:
        return int(next(x for x in f if x.startswith("VmRSS")).split()[1]) // 1024


def main():
    where = sys.argv[1] if len(sys.argv) > 1 else "none"
    zero = {"stage": 3}
    if where != "none":
        dev = {"device": where}
        if where == "nvme":
            dev["nvme_path"] = sys.argv[2]
        zero["offload_optimizer"] = dict(dev)
        zero["offload_param"] = dict(dev)
    cfg = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": zero}
    lc = LlamaConfig(num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
                     num_key_value_heads=8, intermediate_size=1376, vocab_size=16000,
                     max_position_embeddings=64, tie_word_embeddings=False)
    with deepspeed.zero.Init(config_dict_or_path=cfg):
        base = LlamaForCausalLM(lc)
    model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    eng, *_ = deepspeed.initialize(model=model, config=cfg,
                                   model_parameters=[p for p in model.parameters()
                                                     if p.requires_grad])
    x = torch.randint(0, 16000, (1, 32))
    out = eng(input_ids=x, labels=x)
    eng.backward(out.loss)
    eng.step()
    from zinc._lib import MEM_CATEGORIES, lib
    n = len(MEM_CATEGORIES)
    planned, dev_b, host_b = ((ctypes.c_uint64 * n)() for _ in range(3))
    lib.zinc_memory(eng._fe, planned, dev_b)
    lib.zinc_memory_host(eng._fe, planned, host_b)
    file = ctypes.c_uint64()
    lib.zinc_nvme_bytes(eng._fe, ctypes.byref(file), None, None)
    dev_b, host_b = dict(zip(MEM_CATEGORIES, dev_b)), dict(zip(MEM_CATEGORIES, host_b))
    mib = 2 ** 20
    print(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK', '0')} offload_param {where}: frozen "
          f"shard device {dev_b['param16'] / mib:.2f} MiB, host {host_b['param16'] / mib:.2f} "
          f"MiB (with NVMe: the gathers' staging slots), file {file.value / mib:.2f} MiB; gather "
          f"area {dev_b['gather'] / mib:.2f} MiB; RSS {rss_mib()} MiB", flush=True)
    eng.close()


if __name__ == "__main__":
    main()
