"""test_torch_zero.py — DeepSpeed's zero namespace on zinc (zinc.zero: GatheredParameters, Init)
and initialize taking rank 0's parameters.

    python test_torch_zero.py STAGE        (also under mpirun -np 2)

bf16, gradient_accumulation_steps 2, every stage-3 group gathered on demand (persistence
threshold 0, so zinc's traced prefetch runs), a frozen parameter. Each check prints its name and
fails the run (exit 1) when it does not hold:
- initialize takes rank 0's parameters, trained and frozen, as DeepSpeed's: built from another
  seed on every other rank, a run trains bit for bit as the run seeded alike on every rank;
- GatheredParameters without modifier_rank: the full values, bit for bit module_state_dict's
  (the fp32 master cast), on every parameter; at stage 3 emptied again at the exit; contexts
  opened before the first forward (while zinc records its gather order), between the micro-steps
  of a window and after a step leave the training bit for bit as without them;
- modifier_rank (the last rank): the values it wrote into one weight and into the frozen
  parameter are every rank's afterwards — zinc's fp32 master holds them exactly, the forward
  reads them (a plain model loaded with module_state_dict gives the same output, bit for bit)
  — and a parameter inside the context it did not change keeps its fp32 master bit for bit (not
  rounded to bf16); at stages 0-2 a `param.data` it replaced becomes zinc's view again;
- inside a forward: a weight read through a reference kept outside its module (which stage 3
  would otherwise need register_external_parameter for), read inside GatheredParameters with
  fwd_module, trains bit for bit as with register_external_parameter;
- refused: modifier_rank outside the world (ValueError), engine.step() inside (RuntimeError),
  modifier_rank inside a forward at stage 3 (RuntimeError), a shape changed by the modifier
  (ValueError on every rank, nothing taken); training goes on after each;
- zero.Init (python/zinc/_zero_init.py): under mpirun (first in the run) a model built inside
  keeps about 1/N of its bytes in RSS, beside the same model built whole; no warning;
  enabled=False builds whole; each parameter, frozen too, is one NaN element with its shape and
  this rank keeps its piece of rank 0's values; zero_quantized_weights and a modifier_rank
  outside the world raise; GatheredParameters over partitioned parameters gives the full values,
  takes rank 0's write with modifier_rank=0 and drops one without; a model built inside (ranks
  seeded apart) trains bit for bit as the one built whole; an enclosing constructor's write
  raises unless it goes through Module.apply or GatheredParameters(modifier_rank=0), which give
  the model built whole; a write after the construction makes initialize raise naming it; a
  model cast after the construction (.double(), .to(bf16)) keeps one-element marks of the new
  dtype and initialize takes rank 0's values cast the same way (keep_marks_on_moves).
Exit 77 when torch is not importable.
"""
import ctypes
import os
import sys
import warnings

from _common import check, failures, storage_bytes, torch, zinc

MICRO = 4
GA = 2
STEPS = 3


class Net(torch.nn.Module):
    def __init__(self, external=None):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.b = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5, requires_grad=False)
        # external: "gathered" reads a.weight through a reference inside GatheredParameters,
        # "registered" through the same reference declared with register_external_parameter.
        self.external = external
        self.modify_inside = False
        self.refs = [self.a.weight]          # a reference that bypasses the attribute
        if external == "registered":
            zinc.register_external_parameter(self, self.a.weight)

    def forward(self, x):
        h = torch.tanh(self.a(x)) * self.scale.to(x.dtype)
        h = self.head(torch.tanh(self.b(h)))
        if self.modify_inside:
            with zinc.zero.GatheredParameters(self.b.weight, modifier_rank=0):
                pass
        if self.external == "gathered":
            with zinc.zero.GatheredParameters(self.refs[0], fwd_module=self):
                h = h + 0.1 * (x @ self.refs[0].t()).sum(-1, keepdim=True)
        elif self.external == "registered":
            h = h + 0.1 * (x @ self.refs[0].t()).sum(-1, keepdim=True)
        return h


def cfg(stage):
    return {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": GA,
            "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def build(stage, seed=0, external=None):
    torch.manual_seed(seed)
    model = Net(external)
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    return engine, model


def batch(rank, i):
    g = torch.Generator().manual_seed(1000 * rank + i)
    return (torch.randn(MICRO, 6, generator=g).to(torch.bfloat16),
            torch.randn(MICRO, 3, generator=g).to(torch.bfloat16))


def train(engine, steps=STEPS, between=None):
    """steps optimizer steps of GA micro-steps; between(i) after micro-step i's backward and
    after its step(). Returns the losses (this rank's) and the final module_state_dict."""
    losses = []
    for i in range(steps * GA):
        x, y = batch(engine.global_rank, i)
        loss = ((engine(x) - y) ** 2).mean()
        engine.backward(loss)
        if between:
            between(i, "backward")
        engine.step()
        if between:
            between(i, "step")
        losses.append(loss.item())
    return losses, engine.module_state_dict()


def same(a, b):
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def master(engine, name):
    """zinc's fp32 master of a parameter (zinc_param_get: collective)."""
    for _, params in engine._groups:
        for pid, full, _ in params:
            if full == name:
                buf = torch.empty(zinc._memory._numel(engine._shapes[pid]), dtype=torch.float32)
                zinc._lib.check(zinc._lib.lib.zinc_param_get(engine._e, pid,
                                                             ctypes.c_void_p(buf.data_ptr())),
                                engine._e)
                return buf.view(engine._shapes[pid])
    raise KeyError(name)


def raises(kind, fn):
    try:
        fn()
    except kind as ex:
        return str(ex)
    return None


def init_memory(world):
    """zero.Init's memory at `world` ranks: the RSS a model built inside keeps is about 1/world
    of the model's bytes (the pieces), measured beside the same model built whole, which keeps
    all of them (so the measure is seen to count the parameters). malloc_trim first, so that
    free heap pages from before are not reused unseen."""
    trim = ctypes.CDLL(None).malloc_trim

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def layers():
        return torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(32)])

    trim(0)
    before = rss()
    with zinc.zero.Init():
        model = layers()
    kept_init = rss() - before
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    model.to(torch.bfloat16)            # a cast after the construction: the marks stay marks
    trim(0)
    cast = rss() - before - kept_init
    check(f"zero.Init at {world} ranks: .to(bfloat16) after the construction adds under 1/8 "
          "of the model's bytes (torch's own conversion of the marks: the whole model in bf16, "
          "1/2)", cast < full / 8, f"{cast / 2**20:.1f} MiB, model {full / 2**20:.1f} MiB")
    del model
    trim(0)
    before = rss()
    model = layers()
    kept_whole = rss() - before
    del model
    bound = (1 / world + 0.25) * full
    check(f"zero.Init at {world} ranks keeps under (1/{world} + 1/4) of the model's bytes",
          kept_whole >= 0.9 * full and kept_init < bound,
          f"built in Init {kept_init / 2**20:.1f} MiB, whole {kept_whole / 2**20:.1f} MiB, "
          f"model {full / 2**20:.1f} MiB, bound {bound / 2**20:.1f} MiB")


def main():
    stage = int(sys.argv[1])
    world = zinc.world_size()
    if world > 1:
        init_memory(world)
    # ---- rank 0's parameters at initialize ---------------------------------------------------
    engine, _ = build(stage, seed=0)
    rank = engine.global_rank
    last = world - 1
    ref_losses, ref_final = train(engine)
    engine.close()
    engine, model = build(stage, seed=0 if rank == 0 else 10 + rank)
    losses, final = train(engine)
    check("initialize takes rank 0's parameters (others seeded apart): training as seeded alike",
          losses == ref_losses and same(final, ref_final), f"{losses} vs {ref_losses}")
    engine.close()

    # ---- reading: the values, and training undisturbed ---------------------------------------
    engine, model = build(stage)
    reads = []

    def read(i, phase):
        with zinc.zero.GatheredParameters(model.parameters()):
            got = {n: p.detach().clone() for n, p in model.named_parameters()}
        reads.append((i, phase, got))
    read(-1, "initialize")                    # before the first forward: zinc records its order
    losses, final = train(engine, between=read)
    check("GatheredParameters (read) before the first forward, between micro-steps and after "
          "steps: training bit for bit as without", losses == ref_losses and same(final, ref_final),
          f"{losses} vs {ref_losses}")
    sd = engine.module_state_dict()
    got = reads[-1][2]
    if stage < 3:     # the frozen one as the model holds it (bf16; at stage 3 in pieces)
        sd["scale"] = model.scale.detach()
    check("GatheredParameters (read): the full values, module_state_dict's bit for bit",
          all(got[n].shape == sd[n].shape and torch.equal(got[n], sd[n]) for n in got),
          str({n: tuple(got[n].shape) for n in got}))
    # A forward inside the context (an evaluation) leaves the parameters gathered for it.
    with zinc.zero.GatheredParameters(model.parameters()):
        with torch.no_grad():
            engine(batch(rank, 50)[0])
        kept = all(torch.equal(p.detach(), got[n]) for n, p in model.named_parameters())
    check("a forward inside the context leaves its values in place", kept)
    if stage == 3:
        check("stage 3: the trained parameters are empty again after the context",
              all(p.numel() == 0 for n, p in model.named_parameters() if n != "scale"))

    # ---- modifier_rank -------------------------------------------------------------------------
    new_w = torch.linspace(-1, 1, 64).view(8, 8).to(torch.bfloat16)
    new_scale = torch.linspace(2, 3, 8)
    bias_master = master(engine, "head.bias").clone()
    with zinc.zero.GatheredParameters([model.b.weight, model.head.bias, model.scale],
                                      modifier_rank=last):
        if rank == last:
            with torch.no_grad():
                model.b.weight.copy_(new_w)
                if stage < 3:
                    model.scale.data = new_scale.clone()     # replaced, not written in place
                else:
                    model.scale.copy_(new_scale)
    sd = engine.module_state_dict()
    check("modifier_rank: its weight is every rank's (module_state_dict)",
          torch.equal(sd["b.weight"], new_w))
    check("modifier_rank: zinc's fp32 master holds the values written",
          torch.equal(master(engine, "b.weight"), new_w.float()))
    # (at stage 3 the frozen parameter is in pieces, as DeepSpeed's: module_state_dict's value)
    scale = model.scale.detach() if stage < 3 else sd["scale"]
    check("modifier_rank: the frozen parameter is every rank's (in bf16, as the module's)",
          torch.equal(scale, new_scale.to(torch.bfloat16)), f"{scale.dtype}")
    check("modifier_rank: a parameter it did not change keeps its fp32 master (not rounded)",
          torch.equal(master(engine, "head.bias"), bias_master)
          and not torch.equal(bias_master, bias_master.to(torch.bfloat16).float()))
    if stage < 3:
        ptr = ctypes.c_void_p()
        pid = [pid for _, ps in engine._groups for pid, n, _ in ps if n == "b.weight"][0]
        zinc._lib.lib.zinc_param_data(engine._e, pid, ctypes.byref(ptr))
        check("stages 0-2: the weight is zinc's view after the context",
              model.b.weight.data_ptr() == ptr.value)
    plain = Net().to(torch.bfloat16)
    plain.load_state_dict(engine.module_state_dict())
    x, _ = batch(0, 77)
    with torch.no_grad():
        want, out = plain(x), engine(x)
    check("modifier_rank: the forward reads the new values (a plain model's output)",
          torch.equal(out, want), f"max difference {float((out.float() - want.float()).abs().max())}")

    # ---- refused ---------------------------------------------------------------------------
    msg = raises(ValueError, lambda: zinc.zero.GatheredParameters(model.a.weight,
                                                                  modifier_rank=world).__enter__())
    check("modifier_rank outside the world: ValueError", msg is not None and "modifier_rank" in msg,
          str(msg))

    def step_inside():
        with zinc.zero.GatheredParameters(model.a.weight):
            engine.step()
    msg = raises(RuntimeError, step_inside)
    check("engine.step() inside: RuntimeError", msg is not None and "GatheredParameters" in msg,
          str(msg))

    def reshape():
        with zinc.zero.GatheredParameters(model.head.weight, modifier_rank=last):
            if rank == last:
                model.head.weight.data = torch.zeros(2, 2, dtype=torch.bfloat16)
    before = engine.module_state_dict()
    msg = raises(ValueError, reshape)
    check("a shape changed by the modifier: ValueError on every rank, nothing taken",
          msg is not None and "shape" in msg and same(engine.module_state_dict(), before), str(msg))
    if stage == 3:
        model.modify_inside = True
        msg = raises(RuntimeError, lambda: engine(batch(rank, 5)[0]))
        model.modify_inside = False
        check("stage 3: modifier_rank inside a forward: RuntimeError",
              msg is not None and "forward" in msg, str(msg))
    check("every context ended its hold (also the refused ones)",
          engine._contexts == 0 and all(G.ctx == 0 for G in engine._g),
          f"{engine._contexts} open, holds {[G.ctx for G in engine._g]}")
    before = engine.module_state_dict()
    train(engine, steps=1)
    after = engine.module_state_dict()
    check("training goes on after the refusals: a step moves every trained weight, finite",
          all(not torch.equal(before[n], after[n]) and bool(torch.isfinite(after[n].float()).all())
              for n in before if n != "scale"))
    engine.close()

    # ---- inside a forward, with fwd_module ----------------------------------------------------
    engine, _ = build(stage, external="registered")
    want_losses, want_final = train(engine)
    engine.close()
    engine, _ = build(stage, external="gathered")
    losses, final = train(engine)
    check("GatheredParameters(fwd_module=) inside a forward trains as register_external_parameter",
          losses == want_losses and same(final, want_final), f"{losses} vs {want_losses}")
    engine.close()

    # ---- zero.Init ---------------------------------------------------------------------------
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with zinc.zero.Init(enabled=False):
            whole = Net()
        with zinc.zero.Init(config_dict_or_path=cfg(stage)):
            torch.manual_seed(0 if rank == 0 else 20 + rank)
            model = Net()
        said = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    check("zero.Init: no warning (mpirun's world and a world of one partition)", not said,
          str(said))
    check("zero.Init(enabled=False): the model is built whole",
          all(storage_bytes(p) == p.numel() * p.element_size() for p in whole.parameters()))
    torch.manual_seed(0)
    want = Net()                        # rank 0's model
    cut = []
    for (n, p), q in zip(model.named_parameters(), want.parameters()):
        h = p._zinc_held
        chunk = -(-q.numel() // world)
        lo, hi = min(q.numel(), rank * chunk), min(q.numel(), (rank + 1) * chunk)
        cut.append(p.shape == q.shape and storage_bytes(p) == p.element_size()
                   and bool(torch.isnan(p.data.reshape(-1)[:1]).all())
                   and torch.equal(h.piece, q.detach().reshape(-1)[lo:hi]))
    check("zero.Init partitions every parameter (frozen too) at its module's construction: "
          "param.data is one NaN element seen with the shape, and this rank keeps its piece of "
          "rank 0's values", all(cut) and len(cut) == 7, str(cut))
    msg = raises(NotImplementedError, lambda: zinc.zero.Init(zero_quantized_weights=True))
    check("zero.Init(zero_quantized_weights=True): NotImplementedError", msg is not None)
    msg = raises(ValueError, lambda: zinc.zero.GatheredParameters(model.a.weight,
                                                                  modifier_rank=world).__enter__())
    check("GatheredParameters over a partitioned parameter: modifier_rank outside the world "
          "raises ValueError", msg is not None and "modifier_rank" in msg, str(msg))
    with zinc.zero.GatheredParameters(model.a.weight, modifier_rank=0):   # no engine yet
        inside = model.a.weight.detach().clone()
        if rank == 0:
            with torch.no_grad():
                model.a.weight.fill_(0.125)
    with zinc.zero.GatheredParameters(model.b.weight):     # no modifier: a write is dropped
        with torch.no_grad():
            model.b.weight.fill_(7.0)
    check("GatheredParameters over partitioned parameters: the full values inside, the "
          "partition again after", torch.equal(inside, want.a.weight.detach())
          and storage_bytes(model.a.weight) == model.a.weight.element_size())
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    with torch.no_grad():
        want.a.weight.fill_(0.125)
    sd = engine.module_state_dict()
    check("a model built in zero.Init and changed on rank 0 inside GatheredParameters "
          "(modifier_rank=0) starts with rank 0's values, frozen parameter too, and the write "
          "without modifier_rank is dropped", all(torch.equal(sd[k], v.to(torch.bfloat16))
                                                  for k, v in want.state_dict().items())
          and (torch.equal(model.scale.detach(), want.scale.detach().to(torch.bfloat16))
               if stage < 3 else model.scale.numel() == 0))    # stage 3: in pieces
    engine.close()

    with zinc.zero.Init():
        torch.manual_seed(0 if rank == 0 else 30 + rank)
        model = Net()
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    losses, final = train(engine)
    check("a model built in zero.Init (the ranks seeded apart) trains bit for bit as the one "
          "built whole", losses == ref_losses and same(final, ref_final),
          f"{losses} vs {ref_losses}")
    engine.close()

    with zinc.zero.Init():
        torch.manual_seed(0 if rank == 0 else 50 + rank)
        model = Net()
    model.double()                                   # moved and cast after the construction
    model.to(torch.bfloat16)
    marks = [storage_bytes(p) == p.element_size() and p.dtype == torch.bfloat16
             for p in model.parameters()]
    check("zero.Init: a model cast after the construction (.double(), .to(bf16)) keeps one-"
          "element marks, of the new dtype (torch would convert each into a whole tensor)",
          all(marks), str(marks))
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    torch.manual_seed(0)
    want = Net().double().to(torch.bfloat16)
    sd = engine.module_state_dict()
    check("zero.Init: ... and initialize takes rank 0's values, cast as the model built whole "
          "and cast the same way", all(torch.equal(sd[k], v) for k, v in want.state_dict().items()))
    engine.close()

    def halve(mod):
        if isinstance(mod, torch.nn.Linear):
            with torch.no_grad():
                mod.weight.mul_(0.5)

    class Post(Net):
        """An init pass in the enclosing constructor, after the submodules were partitioned:
        written directly, inside GatheredParameters, or through Module.apply."""

        def __init__(self, gathered):
            super().__init__()
            if gathered == "apply":
                self.apply(halve)
                return
            with zinc.zero.GatheredParameters(list(self.parameters()), modifier_rank=0,
                                              enabled=gathered):
                with torch.no_grad():
                    self.b.weight.mul_(0.5)
                    self.scale.add_(1.0)          # not partitioned yet: Post's own parameter

    with zinc.zero.Init():
        msg = raises(RuntimeError, lambda: Post(gathered=False))
    check("zero.Init: an enclosing constructor writing a partitioned parameter outside "
          "GatheredParameters raises, naming the way", msg is not None
          and "GatheredParameters" in msg and "Post" in msg, str(msg))
    with zinc.zero.Init():
        torch.manual_seed(0)
        model = Post(gathered=True)
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    torch.manual_seed(0)
    want = Post(gathered=True)
    sd = engine.module_state_dict()
    check("zero.Init: the same write inside GatheredParameters(modifier_rank=0) gives the "
          "model built whole", all(torch.equal(sd[k], v.to(torch.bfloat16))
                                   for k, v in want.state_dict().items()))
    engine.close()
    with zinc.zero.Init():
        torch.manual_seed(0 if rank == 0 else 40 + rank)
        model = Post(gathered="apply")
    engine, _, _, _ = zinc.initialize(model=model, config=cfg(stage))
    torch.manual_seed(0)
    want = Post(gathered="apply")
    sd = engine.module_state_dict()
    check("zero.Init: Module.apply in an enclosing constructor sees each module's parameters "
          "whole and keeps rank 0's result (DeepSpeed's override_module_apply); apply and the "
          "constructors are torch's again after the context",
          all(torch.equal(sd[k], v.to(torch.bfloat16)) for k, v in want.state_dict().items())
          and torch.nn.Module.apply is zinc.zero._module_apply
          and not hasattr(Post.__init__, "_zinc_orig") and not zinc.zero.Init._patched)
    engine.close()
    with zinc.zero.Init():
        model = Net()
    with torch.no_grad():
        model.head.bias.zero_()                      # a write torch lets through: caught
    msg = raises(RuntimeError, lambda: zinc.initialize(model=model, config=cfg(stage)))
    check("a partitioned parameter written after construction: initialize raises naming it",
          msg is not None and "'head.bias'" in msg and "GatheredParameters" in msg, str(msg))

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
