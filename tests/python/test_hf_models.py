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
Exit 77 when torch or transformers is not importable (CI has neither transformers).
"""
import sys
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


def main():
    rank = max(0, zinc._lib.lib.zinc_world_rank(zinc.engine._launcher_world()))
    for name, make in MODELS.items():
        torch.manual_seed(0)
        want = {k: v.detach().clone() for k, v in make().state_dict().items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # transformers' own notices
            with zinc.zero.Init():
                torch.manual_seed(0 if rank == 0 else 7 + rank)
                model = make()
        held = [n for n, p in model.named_parameters() if storage_bytes(p) != p.element_size()]
        with zinc.zero.GatheredParameters(list(model.parameters())):
            got = {k: v.detach().clone() for k, v in model.state_dict().items()}
        differ = [k for k in want if k not in got or not torch.equal(want[k], got[k])]
        check(f"transformers {tf.__version__} {name}: built in zinc.zero.Init, partitioned, "
              "and put together it is rank 0's model built whole, bit for bit",
              not held and not differ and set(got) == set(want),
              f"not partitioned: {held[:4]}, differ: {differ[:4]}")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
