"""test_tensor_fragment.py — zinc.utils' safe_get_full_fp32_param / safe_set_full_fp32_param
(DeepSpeed's deepspeed.utils calls that take a parameter alone).

    python test_tensor_fragment.py STAGE DTYPE          (also under mpirun -np 2)

After 2 steps at ZeRO stage STAGE (fp32 or bf16), on every rank:
- safe_get_full_fp32_param(p) of each trained parameter is a float32 tensor of p's shape, equal
  to the engine's master (module_state_dict in fp32 mode; its bf16 values are the master
  rounded to bf16), the tied weight once under either name; None for a frozen parameter and
  for a parameter no engine trains;
- safe_set_full_fp32_param(p, v) makes the master v (read back), module_state_dict shows it
  (bf16: rounded), the next forward computes with it (equal to a plain torch model holding
  module_state_dict's values), and training goes on from it (a step moves it); a value of
  another shape raises ValueError naming both shapes;
- the gradient and optimizer-state forms raise NotImplementedError naming themselves;
- after engine.close(), safe_get_full_fp32_param gives None.
Each check prints its name; exit 1 when one fails, 77 without torch.
"""
import sys

from _common import check, check_raises, failures, torch, zinc

import zinc.utils as zu


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(12, 6)
        self.body = torch.nn.Linear(6, 6)
        self.frozen = torch.nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.head = torch.nn.Linear(6, 12, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(torch.tanh(self.body(h)) + self.frozen(h))


def main():
    stage, dtype = int(sys.argv[1]), sys.argv[2]
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
                                                              "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": stage}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    model = Model()
    engine, *_ = zinc.initialize(model=model, config=cfg)
    g = torch.Generator().manual_seed(1 + engine.global_rank)

    def step():
        loss = engine(torch.randint(0, 12, (2, 4), generator=g)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()

    step()
    step()
    sd = engine.module_state_dict()
    trained = {"emb.weight": model.emb.weight, "body.weight": model.body.weight,
               "body.bias": model.body.bias}
    bad = []
    for name, p in trained.items():
        full = zu.safe_get_full_fp32_param(p)
        want = sd[name]
        # want's shape: at stage 3 the Parameter itself is empty between steps
        ok = (full is not None and full.dtype == torch.float32 and full.shape == want.shape and
              (torch.equal(full, want) if dtype == "fp32"
               else torch.equal(full.to(torch.bfloat16), want)))
        if not ok:
            bad.append(name)
    check("safe_get_full_fp32_param: fp32, the parameter's shape, the engine's master", not bad,
          f"{bad}")
    check("the tied weight under either name is the same master",
          torch.equal(zu.safe_get_full_fp32_param(model.head.weight),
                      zu.safe_get_full_fp32_param(model.emb.weight)))
    check("a frozen parameter: None", zu.safe_get_full_fp32_param(model.frozen.weight) is None)
    check("a parameter no engine trains: None",
          zu.safe_get_full_fp32_param(torch.nn.Parameter(torch.ones(3))) is None)

    new = torch.linspace(-1, 1, 36).reshape(6, 6)
    zu.safe_set_full_fp32_param(model.body.weight, new)
    got = zu.safe_get_full_fp32_param(model.body.weight)
    check("safe_set_full_fp32_param: the master reads back as set", torch.equal(got, new))
    sd = engine.module_state_dict()
    work = torch.float32 if dtype == "fp32" else torch.bfloat16
    check("module_state_dict shows the value set (in the working dtype)",
          torch.equal(sd["body.weight"], new.to(work)))
    ref = Model().to(work)
    ref.load_state_dict(sd)
    idx = torch.randint(0, 12, (2, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out, want = engine(idx), ref(idx)
    check("the next forward computes with it (equal to a plain model holding those values)",
          torch.equal(out, want), f"max diff {(out.float() - want.float()).abs().max().item()}")
    step()
    check("training goes on from it (a step moves it)",
          not torch.equal(zu.safe_get_full_fp32_param(model.body.weight), new))
    check_raises("a value of another shape raises ValueError naming both shapes",
                 lambda: zu.safe_set_full_fp32_param(model.body.weight, torch.zeros(3, 6)),
                 ValueError, "(3, 6)", "(6, 6)")
    for name in ("safe_get_full_grad", "safe_get_full_optimizer_state", "safe_get_local_grad",
                 "safe_set_full_grad", "safe_get_local_fp32_param"):
        check_raises(f"{name} raises NotImplementedError naming itself",
                     lambda: getattr(zu, name)(model.body.weight), NotImplementedError, name)
    engine.close()
    check("after engine.close(): None", zu.safe_get_full_fp32_param(model.body.weight) is None)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
