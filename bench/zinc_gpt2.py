"""zinc_gpt2.py — transformers' GPT-2 trained through `import zinc` on the CPU, for the bench
scripts that measure the front-end (stage3_hooks.py: its hooks' host time; step_memory.py: a
step's memory peak). One place for what both train: bf16, AdamW at lr 3e-4, clipping 1.0, one
micro-step per step, a fixed batch of token ids; and their common options, --stage and --tree
(another checkout's python/ to import zinc from, for side-by-side runs of two versions).
"""
import os
import sys


def add_args(ap, stage):
    """--stage (default `stage`) and --tree on the argparse parser `ap`."""
    ap.add_argument("--stage", type=int, default=stage, choices=(0, 1, 2, 3))
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def zinc_gpt2(tree, gpt2, micro, zero, threads, package="zinc"):
    """GPT-2 of transformers.GPT2Config(**gpt2) (a sequence of n_positions tokens of its
    vocabulary) through the zinc of `tree`/python's zinc.initialize, with micro-batch `micro`,
    the zero_optimization section `zero`, torch seeded 0 and on `threads` threads. Returns
    (engine, step, params): step() trains one step on the fixed batch and returns its loss (a tensor);
    params counts the model's elements (before stage 3 empties them). `package`: the name to
    import zinc by (a copy of a tree's python/zinc under another name, on sys.path already, for
    two versions in one process: stage3_hooks.py --against); tree None adds nothing to sys.path."""
    if tree is not None:
        sys.path.insert(0, os.path.join(tree, "python"))
    import importlib
    import torch
    import transformers
    zinc = importlib.import_module(package)
    torch.manual_seed(0)
    torch.set_num_threads(threads)
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
        return out.loss.detach()   # read by the caller, outside what it times
    return engine, step, params
