"""examples/hf_trainer/train.py — a Hugging Face Trainer run with a DeepSpeed config, the same
script for DeepSpeed and for zinc:

    python train.py ds_zero2.json OUT                          DeepSpeed 0.19.8
    python -m zinc.as_deepspeed train.py ds_zero2.json OUT     zinc, the script unedited

(one process: set RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500, and
DS_ACCELERATOR=cpu without a GPU; needs transformers and accelerate). A 2-layer GPT-2 of
transformers (width 64, vocabulary 256) trains 6 steps on fixed random token ids, saving at
steps 3 and 6 and at the end; FROM_CONFIG=1 builds it through from_config, which enters
zero.Init at ZeRO stage 3. The config is the Trainer's kind, with "auto" values the Trainer
fills. Prints the 6 losses as `LOSSES [...]` (docs/python.md, "The Hugging Face Trainer", gives
both engines' figures)."""
import json
import os
import sys

import torch
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, Trainer,
                          TrainerCallback, TrainingArguments)


class Tokens(torch.utils.data.Dataset):
    """32 sequences of 16 token ids, the same every run."""

    def __init__(self, n=32, length=16):
        self.x = torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Losses(TrainerCallback):
    def __init__(self):
        self.seen = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.seen.append(logs["loss"])


def main(config, out):
    torch.manual_seed(0)
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=2, max_steps=6,
                             deepspeed=config, use_cpu=not torch.cuda.is_available(),
                             report_to=[], logging_steps=1, save_strategy="steps", save_steps=3,
                             learning_rate=1e-3, seed=0)
    shape = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32)
    model = (AutoModelForCausalLM.from_config(shape) if os.environ.get("FROM_CONFIG")
             else GPT2LMHeadModel(shape))
    losses = Losses()
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[losses])
    trainer.train()
    trainer.save_model(os.path.join(out, "final"))
    print("LOSSES", json.dumps(losses.seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
