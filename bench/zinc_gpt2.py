"""zinc_gpt2.py — transformers' GPT-2 trained through `import zinc` on the CPU, for the bench
scripts that measure the front-end (stage3_hooks.py: its hooks' host time; step_memory.py: a
step's memory peak). One place for what both train: bf16, AdamW at lr 3e-4, clipping 1.0, one
micro-step per step, a fixed batch of token ids.
"""


def zinc_gpt2(zinc, gpt2, micro, zero):
    """GPT-2 of transformers.GPT2Config(**gpt2) (a sequence of n_positions tokens of its
    vocabulary; the caller seeds torch first) through zinc.initialize with micro-batch `micro`
    and the zero_optimization section `zero`. `zinc` is the module the caller imported (maybe from
    another checkout). Returns (engine, step, params): step() trains one step on the fixed batch
    and returns its loss; params counts the model's elements (before stage 3 empties them)."""
    import torch
    import transformers
    cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0, **gpt2)
    model = transformers.GPT2LMHeadModel(cfg)
    params = sum(p.numel() for p in model.parameters())
    ds = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
          "steps_per_print": 1 << 30, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "bf16": {"enabled": True},
          "zero_optimization": zero}
    engine, _, _, _ = zinc.initialize(model=model, model_parameters=model.parameters(),
                                      config=ds, dist_init_required=False)
    x = torch.randint(0, cfg.vocab_size, (micro, cfg.n_positions),
                      generator=torch.Generator().manual_seed(1))

    def step():
        out = engine(input_ids=x, labels=x)
        engine.backward(out.loss)
        engine.step()
        return float(out.loss)
    return engine, step, params
