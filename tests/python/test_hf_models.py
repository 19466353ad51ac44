"""test_hf_models.py — real transformers models built inside zinc.zero.Init.

    python test_hf_models.py                 (under mpirun -np 2 as CTest runs it)

Five architectures built from small configs (no download): GPT-2 (its _init_weights writes a
child's `c_proj.weight`), Llama, BERT, T5 (encoder-decoder, shared embeddings; its init writes
children's weights too) and OPT. Each is built inside zinc.zero.Init with the ranks seeded apart
and built whole with rank 0's seed; the values put together with GatheredParameters must be the
whole build's, bit for bit (the init ran on whole parameters and rank 0's result was kept).
transformers has initialised weights three ways (test_torch_hf_init.py checks a stand-in of each
in CI): Module.apply up to 4.51, smart_apply(fn) in 4.52-4.57, smart_apply(fn, is_custom_code)
in 5.x. Run against each with a transformers of that release first on PYTHONPATH (docs/python.md).
GPT-2 saved with save_pretrained (each rank its own copy) and loaded with from_pretrained inside
zinc.zero.Init is partitioned at the context's exit and holds the saved values (transformers
loads after the construction: on the meta device in 4.57 and 5.x, through
load_state_dict(assign=True) in 4.46). Then each trains 4 steps at ZeRO stages 0-3 (fp32,
dropout off: eval mode) beside plain torch (AdamW, clip_grad_norm_ 1.0 = DeepSpeed's default
gradient_clipping, the same global batch): the losses (averaged over the ranks) agree within
1e-6 relative. Both compute the same fp32 function; they differ in the order of fp32 sums (the
ranks' reduction, zinc's Adam kernel), a few ulps a step: measured at most 1.2e-7 (1 and 2
ranks, the three releases, 2026-11-27), so the bound is about 8x that.
Exit 77 when torch or transformers is not importable (CI has no transformers).
"""
import shutil
import sys
import tempfile
import warnings

from _common import check, failures, storage_bytes, torch, zinc

try:
    import transformers as tf
except Exception as ex:  # noqa: BLE001 — any failure to import transformers means: skip
    print(f"SKIP: no transformers ({ex})")
    sys.exit(77)

V = dict(vocab_size=64)
MODELS = {
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=32, n_head=4,
                                                     n_positions=32, **V)),
    "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, **V)),
    "bert": lambda: tf.BertForMaskedLM(tf.BertConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, **V)),
    "t5": lambda: tf.T5ForConditionalGeneration(tf.T5Config(d_model=32, d_ff=64, num_layers=2,
                                                            num_heads=4, d_kv=8, **V)),
    "opt": lambda: tf.OPTForCausalLM(tf.OPTConfig(
        hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, word_embed_proj_dim=32, **V)),
}


STEPS, MICRO, SEQ = 4, 4, 12


def tokens(step, world):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, V["vocab_size"], (MICRO * world, SEQ), generator=g)


def lm_loss(model, name, ids):
    if name == "t5":                  # encoder-decoder: the decoder reads the shifted tokens
        return model(input_ids=ids, decoder_input_ids=ids.roll(1, 1), labels=ids).loss
    return model(input_ids=ids, labels=ids).loss


def train_torch(name, world):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for i in range(STEPS):
        loss = lm_loss(model, name, tokens(i, world))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def train_zinc(name, stage, rank, world):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    cfg = {"train_micro_batch_size_per_gpu": MICRO,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
           "zero_optimization": {"stage": stage}}
    engine, _, _, _ = zinc.initialize(model=model, config=cfg)
    losses = []
    for i in range(STEPS):
        loss = lm_loss(engine, name, tokens(i, world)[rank * MICRO:(rank + 1) * MICRO])
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        if world > 1:
            torch.distributed.all_reduce(mean)
            mean /= world
        losses.append(float(mean))
    engine.close()
    return losses


def check_built_in_init(what, build, want):
    """build() inside zinc.zero.Init: every parameter partitioned, and put together the state
    dict `want`, bit for bit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # transformers' own notices
        with zinc.zero.Init():
            model = build()
    held = [n for n, p in model.named_parameters() if storage_bytes(p) != p.element_size()]
    with zinc.zero.GatheredParameters(list(model.parameters())):
        got = {k: v.detach().clone() for k, v in model.state_dict().items()}
    differ = [k for k in want if k not in got or not torch.equal(want[k], got[k])]
    check(f"transformers {tf.__version__} {what}",
          not held and not differ and set(got) == set(want),
          f"not partitioned: {held[:4]}, differ: {differ[:4]}")


def main():
    rank = zinc._world.rank()
    world = max(1, zinc._lib.lib.zinc_world_size(zinc.engine._launcher_world()))

    def seeded_apart(make):
        torch.manual_seed(0 if rank == 0 else 7 + rank)
        return make()

    for name, make in MODELS.items():
        torch.manual_seed(0)
        want = {k: v.detach().clone() for k, v in make().state_dict().items()}
        check_built_in_init(f"{name}: built in zinc.zero.Init, partitioned, and put together it "
                            "is rank 0's model built whole, bit for bit",
                            lambda make=make: seeded_apart(make), want)
    saved = tempfile.mkdtemp()
    try:
        torch.manual_seed(0)
        MODELS["gpt2"]().save_pretrained(saved)
        want = tf.GPT2LMHeadModel.from_pretrained(saved).state_dict()
        check_built_in_init("gpt2: from_pretrained inside zinc.zero.Init is partitioned at the "
                            "exit and holds the saved values",
                            lambda: tf.GPT2LMHeadModel.from_pretrained(saved), want)
    finally:
        shutil.rmtree(saved, ignore_errors=True)
    for name in MODELS:
        want = train_torch(name, world)
        for stage in range(4):
            got = train_zinc(name, stage, rank, world)
            worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
            check(f"transformers {tf.__version__} {name}: {STEPS} steps at stage {stage}, "
                  f"{world} rank(s): the losses of plain torch within 1e-6 (worst {worst:.1e})",
                  worst < 1e-6, f"{got} vs {want}")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
