"""test_torch_hf_init.py — zinc.zero.Init with models that initialise their weights the way
transformers' PreTrainedModel does (zero.py's _smart_apply_gathered and _apply_gathered).

    python test_torch_hf_init.py            (also under mpirun -np 2)

transformers initialises a model's weights at the end of its constructor, in post_init, each
module through the model's _initialize_weights (which skips a module already marked
`_is_hf_initialized`), in one of three ways by release:
- "5"    (5.x): `torch.nn.Module.smart_apply(fn, is_custom_code)`, an attribute it sets on
  torch.nn.Module when absent: Module.apply's walk (children first) where each sub-model (a
  PreTrainedModel child) is handed its own _initialize_weights;
- "4.52" (4.52 to 4.57): the same smart_apply with fn alone;
- "4.46" (up to 4.51): `self.apply(self._initialize_weights)`.
CI has no transformers, so this test registers a stand-in `transformers.modeling_utils` with
those protocols (the real GPT2LMHeadModel is checked by test_example.py zero-init hf where
transformers is installed). The stand-in model nests a sub-model, and an _init_weights writes a
direct child's parameter (as GPT-2's writes `c_proj.weight`). For each protocol:
- built inside zinc.zero.Init (the ranks seeded apart), every parameter is partitioned (a
  one-element mark) and the values put together are rank 0's model built whole, bit for bit
  (the weight init ran on the whole parameters and rank 0's result was kept);
- trained at stage 3, the same losses, bit for bit, as the model built whole;
- smart_apply is the stand-in's own again after the context (and absent after one opened
  before the stand-in ever defined it); Module.apply is torch's again;
- at "5" the stand-in pads the head's bias by nothing after the init, as 5.x's tie_weights
  does (_adjust_bias), which makes the mark a whole tensor of NaN: it is the mark again at the
  end of the constructor (without that rule the partitioned check fails);
once, a constructor replacing a partitioned parameter's data with values raises at its end,
naming the parameter (without the rule: nothing raised until initialize), but one ending inside
GatheredParameters around partitioned parameters (whole while open) does not (without the
`opened` flag: it raises); and once,
from_pretrained's ways: transformers 5 (and 4.57) builds the model on the meta device, then
gives each parameter its loaded values as a new tensor; 4.46 builds it (partitioned, here) and
replaces each parameter through load_state_dict(assign=True). Loaded inside the context, both
are partitioned at its exit (every parameter a mark, put together the loaded values, no
warning; without partition_tops: whole); a parameter still on the meta device at the exit stays
there with a RuntimeWarning naming the meta device (rank 0), and given values afterwards, the
model trains from them (without the meta rule: the construction raises).
Without _smart_apply_gathered the construction raises (the init writes partitioned parameters);
so it does at "4.46" when Module.apply gathers each module's own parameters only (DeepSpeed's
rule), and at "4.52" when zinc's smart_apply requires is_custom_code.
Exit 77 when torch is not importable.
"""
import sys
import types
import warnings

from _common import check, failures, storage_bytes, torch, zinc


def stand_in_transformers():
    """A `transformers.modeling_utils` module whose PreTrainedModel initialises as transformers
    `PreTrainedModel.protocol` does (the module's docstring): post_init -> initialize_weights ->
    Module.smart_apply, or post_init -> init_weights -> Module.apply."""
    mod = types.ModuleType("transformers.modeling_utils")

    class PreTrainedModel(torch.nn.Module):
        protocol = "5"

        def post_init(self):
            if self.protocol == "4.46":
                with torch.no_grad():
                    self.apply(self._initialize_weights)
            else:
                self.initialize_weights()
            if self.protocol == "5" and hasattr(self, "head"):
                # 5.x's tie_weights pads a tied bias to its weight's rows (_adjust_bias): a
                # padding by nothing, which makes a partitioned parameter's mark whole
                self.head.bias.data = torch.nn.functional.pad(self.head.bias.data, (0, 0))

        @torch.no_grad()
        def initialize_weights(self):
            custom = (False,) if self.protocol == "5" else ()
            if not hasattr(torch.nn.Module, "smart_apply"):
                def smart_apply(module, fn, *is_custom_code):
                    for child in module.children():
                        sub = isinstance(child, PreTrainedModel)
                        smart_apply(child, child._initialize_weights if sub else fn,
                                    *is_custom_code)
                    fn(module, *is_custom_code)
                    return module
                torch.nn.Module.smart_apply = smart_apply
            self.smart_apply(self._initialize_weights, *custom)

        def _initialize_weights(self, module, *is_custom_code):
            if getattr(module, "_is_hf_initialized", False):
                return
            self._init_weights(module)
            module._is_hf_initialized = True

    mod.PreTrainedModel = PreTrainedModel
    sys.modules["transformers.modeling_utils"] = mod
    return PreTrainedModel


PreTrainedModel = stand_in_transformers()


class Attention(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.gain = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return torch.tanh(self.proj(x)) * self.gain


class Body(PreTrainedModel):
    """The inner model: its post_init runs first, inside the outer model's constructor."""

    def __init__(self, d=16):
        super().__init__()
        self.embed = torch.nn.Linear(6, d)
        self.attn = torch.nn.ModuleList([Attention(d) for _ in range(2)])
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, torch.nn.Linear):
            module.weight.normal_(0.0, 0.02)
            module.bias.zero_()
        elif isinstance(module, Attention):    # writes its direct child's parameter too
            module.proj.weight.mul_(3.0)
            module.gain.fill_(0.5)

    def forward(self, x):
        for a in self.attn:
            x = x + a(x)
        return x


class Model(PreTrainedModel):
    """The outer model: smart_apply hands `body` its own init (already done: skipped) and the
    head this model's."""

    def __init__(self, d=16):
        super().__init__()
        self.body = Body(d)
        self.head = torch.nn.Linear(d, 3)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, torch.nn.Linear):
            module.weight.normal_(0.0, 0.5)
            module.bias.fill_(0.1)

    def forward(self, x):
        return self.head(self.body(self.body.embed(x)))


def train(model, rank, steps=3):
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, _, _, _ = zinc.initialize(model=model, config=cfg)
    losses = []
    for i in range(steps):
        g = torch.Generator().manual_seed(100 * i + rank)
        x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
        loss = torch.nn.functional.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    engine.close()
    return losses


def check_protocol(proto, rank):
    """The checks of the module's docstring for one of transformers' init protocols."""
    PreTrainedModel.protocol = proto
    if hasattr(torch.nn.Module, "smart_apply"):    # another protocol's (4.52 and 5 differ)
        del torch.nn.Module.smart_apply
    torch_apply = torch.nn.Module.apply
    smart = proto != "4.46"
    with zinc.zero.Init():            # before the stand-in ever defined smart_apply
        torch.manual_seed(0 if rank == 0 else 10 + rank)
        model = Model()
    check(f"[{proto}] after an Init in which smart_apply was first defined, torch.nn.Module has "
          "none", not hasattr(torch.nn.Module, "smart_apply"))
    torch.manual_seed(0)
    whole = Model()                   # defines the stand-in's smart_apply
    theirs = getattr(torch.nn.Module, "smart_apply", None)
    check(f"[{proto}] the stand-in initialises through smart_apply or Module.apply as said",
          (theirs is not None) == smart)
    marks = [storage_bytes(p) == p.element_size() for p in model.parameters()]
    check(f"[{proto}] built in zinc.zero.Init: each parameter is partitioned (a one-element "
          "mark)", all(marks) and len(marks) == 10, str(marks))
    with zinc.zero.GatheredParameters(list(model.parameters())):
        got = {k: v.detach().clone() for k, v in model.state_dict().items()}
    want = whole.state_dict()
    differ = [k for k, v in want.items() if not torch.equal(got[k], v)]
    check(f"[{proto}] built in zinc.zero.Init (ranks seeded apart): rank 0's model built whole, "
          "bit for bit, the sub-model's init, a child's parameter written by its parent's init "
          "and the outer init included", not differ and set(got) == set(want), str(differ))
    check(f"[{proto}] the values are the init's, not the constructors' (the init pass ran)",
          bool((got["body.attn.0.gain"] == 0.5).all()) and bool((got["head.bias"] == 0.1).all()))
    with zinc.zero.Init():
        torch.manual_seed(0 if rank == 0 else 20 + rank)
        model = Model()
    check(f"[{proto}] after the context, smart_apply is the stand-in's own again and "
          "Module.apply torch's",
          getattr(torch.nn.Module, "smart_apply", None) is theirs
          and torch.nn.Module.apply is torch_apply)
    got_losses = train(model, rank)
    torch.manual_seed(0)
    want_losses = train(Model(), rank)
    check(f"[{proto}] trained at stage 3: the model built in zinc.zero.Init gives the losses of "
          "the model built whole, bit for bit", got_losses == want_losses,
          f"{got_losses} vs {want_losses}")


def main():
    rank = max(0, zinc._lib.lib.zinc_world_rank(zinc.engine._launcher_world()))
    for proto in ("5", "4.52", "4.46"):
        check_protocol(proto, rank)
    class Overwrites(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.lin.bias.data = torch.ones(4)     # replaces a partitioned parameter's data
    try:
        with zinc.zero.Init():
            Overwrites()
        raised = ""
    except RuntimeError as ex:
        raised = str(ex)
    check("zinc.zero.Init: a constructor that replaces a partitioned parameter's data with "
          "values raises at its end, naming the parameter", "'Overwrites.lin.bias'" in raised
          and "written after" in raised, raised)

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.extra = torch.nn.Linear(4, 4)

    with zinc.zero.Init():
        torch.manual_seed(0)
        inner = torch.nn.Linear(4, 4)
        with zinc.zero.GatheredParameters(list(inner.parameters())):
            wrap = Wrap(inner)            # its end walks inner's parameters, open and whole
    torch.manual_seed(0)
    want = torch.nn.Linear(4, 4).state_dict()
    with zinc.zero.GatheredParameters(list(wrap.inner.parameters())):
        got = {k: v.detach().clone() for k, v in wrap.inner.state_dict().items()}
    check("zinc.zero.Init: a module built inside GatheredParameters around partitioned "
          "parameters (open, whole) does not take them for a write, and they keep their values",
          all(torch.equal(got[k], v) for k, v in want.items())
          and all(storage_bytes(p) == p.element_size() for p in wrap.parameters()))
    loaded = {"weight": torch.full((3, 6), 0.25), "bias": torch.arange(3.0)}
    for way in ("meta", "assign"):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with zinc.zero.Init():
                lin = torch.nn.Linear(6, 3, device="meta" if way == "meta" else "cpu")
                for name, value in loaded.items():     # from_pretrained's load, a new tensor
                    setattr(lin, name, torch.nn.Parameter(value.clone()))
        marks = [storage_bytes(p) == p.element_size() for p in lin.parameters()]
        with zinc.zero.GatheredParameters(list(lin.parameters())):
            got = {k: v.detach().clone() for k, v in lin.state_dict().items()}
        check(f"zinc.zero.Init: a model loaded inside the context ({way}) is partitioned at its "
              "exit, and put together it holds the loaded values; no warning",
              all(marks) and all(torch.equal(got[k], v) for k, v in loaded.items())
              and not said, f"{marks} {[str(w.message) for w in said]}")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with zinc.zero.Init():
            lin = torch.nn.Linear(6, 3, device="meta")
    meta = [w for w in said if "meta device" in str(w.message)]
    check("zinc.zero.Init: parameters built on the meta device are left there, with a warning "
          "on rank 0", lin.weight.device.type == "meta" and lin.bias.device.type == "meta"
          and len(meta) == (1 if rank == 0 else 0), str([str(w.message) for w in said]))
    lin.weight = torch.nn.Parameter(torch.full((3, 6), 0.25))    # the loaded values
    lin.bias = torch.nn.Parameter(torch.zeros(3))
    cfg = {"train_micro_batch_size_per_gpu": 4,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": 3}}
    engine, _, _, _ = zinc.initialize(model=lin, config=cfg)
    sd = engine.module_state_dict()
    check("the model loaded after a construction on the meta device starts from the loaded "
          "values", bool((sd["weight"] == 0.25).all()) and bool((sd["bias"] == 0).all()))
    engine.close()
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
