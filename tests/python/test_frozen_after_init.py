"""test_frozen_after_init.py STAGE — a parameter zinc trains, frozen (requires_grad False) after
initialize: zinc's groups are fixed at initialize (as DeepSpeed's), so it goes on training it with
a zero gradient (Adam's momentum still moves it, as DeepSpeed 0.19.8's stage 1 does), and says so:
one RuntimeWarning naming the parameter at the next optimizer step, none after (two steps), and
none for a parameter frozen before initialize (zinc never trains it).
"""
import sys
import warnings

from _common import check, finish, torch, zinc

STAGE = int(sys.argv[1])


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3),
                                torch.nn.Linear(3, 3))
    model[3].weight.requires_grad_(False)          # frozen before: not zinc's
    engine, *_ = zinc.initialize(model=model, config={
        "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": STAGE},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}})
    g = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(4):
            if i == 2:
                model[2].weight.requires_grad_(False)
                before = engine.module_state_dict()["2.weight"].clone()
            x, y = torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)
            engine.backward((engine(x) - y).pow(2).mean())
            engine.step()
    said = [str(w.message) for w in seen if w.category is RuntimeWarning]
    named = [m for m in said if "2.weight has requires_grad=False" in m]
    check("a parameter frozen after initialize: one RuntimeWarning naming it over two steps",
          len(named) == 1, f"{said}")
    check("... none for the one frozen before initialize",
          not any("3.weight" in m for m in said), f"{said}")
    check("... and zinc goes on moving it (a zero gradient; momentum)",
          not torch.equal(before, engine.module_state_dict()["2.weight"]))
    engine.close()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
