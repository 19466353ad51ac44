"""test_interrupted_backward.py — a backward that raises midway, and a backward given twice.

    python test_interrupted_backward.py STAGE        (1 rank)

A backward can raise after some groups were handed over (an out-of-memory error, an exception
in a hook): the "catch it and go on with the next batch" loop must still work. In plain torch
(and DeepSpeed at stage 0) the gradients the failed backward accumulated stay in `.grad` and add
up with the next backward's; zinc continues the interrupted micro-step the same way. Checked in
fp32 against plain torch (AdamW, clipping, accumulation 1 and 2): after a backward that raised
in a hook between the two layers (the second layer's gradient in, the first's not), the training
goes on and ends with plain torch's weights (within test_torch_parity.py's bound, 4e-6 of each
tensor's largest weight). The old front-end refused every later backward ("already handed over")
at every stage: the engine could not train again.

The same where zinc's own hand-over of a group raises (its add into zinc's gradient memory, where
a GPU's out-of-memory error would come from; after it took the group's bucket at stages 2-3, before
zinc_grads_ready), as the first hand-over and as the second: the front-end had set the group's
`.grad` to None before the add, so the failed backward's part of it was lost (weights 2e-2 off at
every stage), and a zero_grad() after it was refused at stages 2-3 (zinc_grads_clear: "holds
gradients in its bucket"). Also with zero_grad() after the failure (engine's at accumulation 1,
the optimizer's at 2 where DeepSpeed's drops the window as torch's does: stages 0, 1 and 3).
And where the first hand-over's making of its per-parameter views of zinc's gradient memory
raises midway (fail_in_views: the views kept cut short trained only the group's first parameter).

And a second backward without step() in between, where the first ended its micro-step
(accumulation 1): refused with a message that says so, before autograd, and nothing of it is
applied (the old front-end raised from zinc_grads_ready after adding the gradient into zinc's
buffer: the next step applied it, weights off by ~1e-3).
"""
import sys

from _common import check, check_raises, finish, torch, zinc

LR, WD, STEPS = 3e-3, 0.01, 4


class TwoLayers(torch.nn.Module):
    """a, then b; with `fail` set, the gradient reaching a's output raises (b's is in by then)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 6)
        self.b = torch.nn.Linear(6, 4)
        self.fail = False

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.fail:
            def boom(_):
                raise RuntimeError("simulated out of memory")
            h.register_hook(boom)
        return self.b(h)


def batches(n):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)) for _ in range(n)]


def loss_of(f, x, y):
    return torch.nn.functional.mse_loss(f(x), y)


def run(train, ga, data, fail, clear=False):
    """The loop: micro-batch 1 of the first window raises in backward and is skipped (with
    `clear`, zero_grad() follows); the rest train. `train` is (forward, backward, step, zero_grad)
    of plain torch or of zinc; `fail(forward, backward)` runs the failing backward."""
    fwd, bwd, step, zero_grad = train
    for k, (x, y) in enumerate(data):
        if k == 1:
            try:
                fail(fwd, lambda: bwd(loss_of(fwd, x, y)))
            except RuntimeError as ex:
                assert "simulated out of memory" in str(ex), ex
            if clear:
                zero_grad()
            continue
        bwd(loss_of(fwd, x, y))
        step(k)


def fail_in_hook(fwd, backward):
    """The gradient reaching a's output raises: b's gradient is in, a's is not."""
    fwd.fail = True
    try:
        backward()
    finally:
        fwd.fail = False


def fail_in_hand_over(n):
    """zinc's n-th hand-over of this backward raises in its add (torch._foreach_add_, where a
    GPU's out-of-memory error would come from), after it took the group's bucket (stages 2-3)
    and before zinc_grads_ready. Groups are handed over last layer first: n=1 is b's (autograd
    stops there: as fail_in_hook), n=2 a's (every gradient is in: as a backward that
    completed)."""
    def fail(fwd, backward):
        real, calls = torch._foreach_add_, [0]

        def add(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                raise RuntimeError("simulated out of memory")
            return real(*args, **kwargs)
        torch._foreach_add_ = add
        try:
            backward()
        finally:
            torch._foreach_add_ = real
        assert calls[0] >= n, f"only {calls[0]} hand-overs: the injection did not run"
    return fail


def fail_in_views(engine):
    """The first hand-over's making of its per-parameter views of zinc's gradient memory (kept
    with the memory's view for the hand-overs after) raises at the group's second parameter, as
    an error or a second Ctrl-C midway would: autograd stops there, as fail_in_hook. A front-end
    that kept the list cut short added only the group's first parameter from then on (b's bias
    never trained: 1.5e-2 off)."""
    def fail(fwd, backward):
        real, made = engine._group_span, []
        engine._views.clear()        # each hand-over of this backward makes its views anew
        engine._lent_views.clear()

        def span(G, kind):
            out = real(G, kind)
            if kind == "grad" and not out[2] and not made:
                view, calls = out[0], [0]

                def strided(*args):
                    calls[0] += 1
                    if calls[0] == 2:
                        raise RuntimeError("simulated out of memory")
                    return torch.Tensor.as_strided(view, *args)
                view.as_strided = strided      # (an attribute of this tensor: its calls only)
                made.append(view)
            return out
        engine._group_span = span
        try:
            backward()
        finally:
            del engine._group_span
            for view in made:
                del view.as_strided
        assert made, "no views were made: the injection did not run"
    return fail


def completed(fwd, backward):
    """plain torch's side of fail_in_hand_over(2): every gradient is in `.grad`."""
    backward()
    raise RuntimeError("simulated out of memory")


def plain_torch(ga, data, fail, clear=False):
    torch.manual_seed(0)
    ref = TwoLayers()
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, eps=1e-8, weight_decay=WD)
    seen = [0]

    def step(_):
        seen[0] += 1
        if seen[0] % ga == 0:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    run((ref, lambda loss: (loss / ga).backward(), step, opt.zero_grad), ga, data, fail, clear)
    return ref


def zinc_engine(stage, ga):
    torch.manual_seed(0)
    m = TwoLayers()
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ga,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999],
                                                      "eps": 1e-8, "weight_decay": WD}},
           "gradient_clipping": 1.0,
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    engine, *_ = zinc.initialize(model=m, config=cfg)
    return m, engine


def worst_of(w, ref):
    ref_w = dict(ref.named_parameters())
    worst = {n: float((w[n].float() - ref_w[n]).abs().max() / ref_w[n].abs().max()) for n in ref_w}
    name = max(worst, key=worst.get)
    return name, worst[name]


def interrupted(stage, ga, how="in a hook", clear=None):
    """`how`: where the backward raises — "in a hook" (between the layers), or "in hand-over N"
    (zinc's N-th group hand-over, plain torch's reference as described at fail_in_hand_over).
    `clear`: "engine" or "optimizer", whose zero_grad() follows the failure (None: none)."""
    data = batches(1 + STEPS * ga)
    if how in ("in a hook", "in its views"):
        ref_fail = zinc_fail = fail_in_hook
    else:
        n = int(how.split()[-1])
        ref_fail, zinc_fail = (fail_in_hook if n == 1 else completed), fail_in_hand_over(n)
    ref = plain_torch(ga, data, ref_fail, clear)
    m, engine = zinc_engine(stage, ga)
    if how == "in its views":
        zinc_fail = fail_in_views(engine)
    errors = []

    def step(_):
        engine.step()

    def bwd(loss):
        try:
            engine.backward(loss)
        except RuntimeError as ex:
            if "simulated" not in str(ex):
                errors.append(str(ex))
            raise
    try:
        zero_grad = engine.optimizer.zero_grad if clear == "optimizer" else engine.zero_grad
        run((m, bwd, step, zero_grad), ga, data, zinc_fail, clear)
    except RuntimeError as ex:
        errors.append(str(ex))
    w = engine.module_state_dict()
    steps = engine.global_steps
    engine.close()
    name, worst = worst_of(w, ref)
    what = (f"stage {stage}, accumulation {ga}, raised {how}"
            f"{f', {clear}.zero_grad() after it' if clear else ''}")
    check(f"{what}: training goes on after a backward that raised midway",
          not errors and steps == STEPS, f"{errors}; {steps} steps")
    check(f"{what}: the weights as plain torch's, whose `.grad` kept the failed backward's part "
          f"(worst {worst:.2e} on {name}, bound 4e-06)", worst < 4e-6, f"{worst:.3e} on {name}")


def twice(stage):
    data = batches(3)

    def weights(extra):
        m, engine = zinc_engine(stage, 1)
        engine.backward(loss_of(engine, *data[0]))
        if extra:
            check_raises(f"stage {stage}: a second backward without step() is refused, saying so",
                         lambda: engine.backward(loss_of(engine, *data[1])), RuntimeError,
                         "backward() again without engine.step()")
        engine.step()
        engine.backward(loss_of(engine, *data[2]))
        engine.step()
        w = engine.module_state_dict()
        engine.close()
        return w
    a, b = weights(False), weights(True)
    same = all(torch.equal(a[n], b[n]) for n in a)
    check(f"stage {stage}: nothing of the refused backward is applied (the weights bit for bit "
          f"as without it)", same,
          str({n: float((a[n] - b[n]).abs().max()) for n in a}))


def misuse(stage):
    """The other ways out of order, each a RuntimeError that says what to do (they were internal
    names: "group 'a' was not handed over with zinc_grads_ready", "zinc_step: engine is NULL";
    a forward after close() ran), and a config file that is not a JSON object (AttributeError
    from inside the front-end)."""
    m, engine = zinc_engine(stage, 1)
    x, y = batches(1)[0]
    check_raises(f"stage {stage}: step() before any backward() says so",
                 engine.step, RuntimeError, "no backward() since the last step")
    engine.backward(loss_of(engine, x, y))
    engine.step()
    check_raises(f"stage {stage}: step() twice says so", engine.step, RuntimeError,
                 "no backward() since the last step")
    engine.backward(loss_of(engine, x, y))       # the engine is fine after those
    engine.step()
    engine.close()
    check_raises(f"stage {stage}: a forward after close() says the engine was closed",
                 lambda: engine(x), RuntimeError, "engine was closed")
    check_raises(f"stage {stage}: step() after close() says the engine was closed",
                 engine.step, RuntimeError, "engine was closed")
    import json
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "list.json")
        with open(path, "w") as f:
            json.dump([1, 2], f)
        check_raises(f"stage {stage}: a config file holding a JSON list is named and refused",
                     lambda: zinc.initialize(model=TwoLayers(), config=path), ValueError,
                     path, "a config is a JSON object")
    cfg = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage}}
    # no optimizer anywhere: refused at stages 1-2, as DeepSpeed's (zinc trained AdamW); at 0
    # and 3 DeepSpeed builds an optimizer-less engine, zinc its AdamW default
    if stage in (1, 2):
        check_raises(f"stage {stage}: no optimizer section and no optimizer= is refused",
                     lambda: zinc.initialize(model=TwoLayers(), config=cfg), ValueError,
                     f"ZeRO stage {stage} needs an optimizer", "\"optimizer\"")
    else:
        engine = zinc.initialize(model=TwoLayers(), config=cfg)[0]
        check(f"stage {stage}: no optimizer anywhere still builds an engine", engine is not None)
        engine.close()
    cfg["optimizer"] = {"type": "AdamW"}
    stray = [torch.nn.Parameter(torch.zeros(3))]
    check_raises(f"stage {stage}: model_parameters that are not the model's are named as such "
                 f"(it said the model has no trainable parameters)",
                 lambda: zinc.initialize(model=TwoLayers(), model_parameters=stray, config=cfg),
                 ValueError, "is a parameter of the model")
    check_raises(f"stage {stage}: a model that is not a torch.nn.Module is refused saying so "
                 f"(an AttributeError from inside the front-end)",
                 lambda: zinc.initialize(model=lambda t: t, config=cfg), TypeError,
                 "model must be a torch.nn.Module; got function")


class BackwardFirst(torch.nn.Module):
    """TwoLayers with b registered first: b's group (0) is the first handed over in backward,
    and the last in _hand_over_rest's order (last group first)."""

    def __init__(self):
        super().__init__()
        self.b = torch.nn.Linear(6, 4)
        self.a = torch.nn.Linear(8, 6)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def one_bucket(stage):
    """zinc.grad_buckets 1 (stage 1 bucketed by bf16 with fp32 sums): b's hand-over, the
    backward's first, raises in its add after it took the one bucket, and step() follows at
    once, handing over a (with a zero gradient) and then b. The front-end that kept the bucket
    with b refused a's hand-over there ("all 1 gradient buckets hold groups ... raise
    zinc.grad_buckets"); now it is given back (zinc_grad_bucket_drop). Training then goes on,
    with the weights bit for bit those of the default two buckets, where it worked before."""
    data = batches(4)
    dt = torch.bfloat16 if stage == 1 else torch.float32

    def loss(f, x, y):
        return ((f(x.to(dt)).float() - y) ** 2).mean()

    def weights(buckets):
        torch.manual_seed(0)
        m = BackwardFirst()
        cfg = {"train_micro_batch_size_per_gpu": 4,
               "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WD}},
               "gradient_clipping": 1.0, "zinc": {"grad_buckets": buckets},
               "zero_optimization": {"stage": stage}}
        if stage == 1:
            cfg.update({"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}})
        engine, *_ = zinc.initialize(model=m, config=cfg)
        errors = []
        try:
            fail_in_hand_over(1)(engine, lambda: engine.backward(loss(engine, *data[0])))
        except RuntimeError as ex:
            if "simulated out of memory" not in str(ex):
                errors.append(str(ex))
        try:
            engine.step()
            for x, y in data[1:]:
                engine.backward(loss(engine, x, y))
                engine.step()
        except RuntimeError as ex:
            errors.append(str(ex))
        w, steps = engine.module_state_dict(), engine.global_steps
        engine.close()
        return w, steps, errors
    (w1, steps1, err1), (w2, steps2, err2) = weights(1), weights(2)
    check(f"stage {stage}, zinc.grad_buckets 1: step() after a backward whose first hand-over "
          f"raised in its add, and training after it", not err1 and steps1 == 4,
          f"{err1}; {steps1} steps")
    check(f"stage {stage}, zinc.grad_buckets 2: the same", not err2 and steps2 == 4,
          f"{err2}; {steps2} steps")
    if not (err1 or err2):
        check(f"stage {stage}: one bucket trains bit for bit as two",
              all(torch.equal(w1[n], w2[n]) for n in w1),
              str({n: float((w1[n].float() - w2[n].float()).abs().max()) for n in w1}))


def main(stage):
    for ga in (1, 2):
        interrupted(stage, ga)
        for n in (1, 2):
            interrupted(stage, ga, f"in hand-over {n}")
        interrupted(stage, ga, "in its views")
    # zero_grad() after it drops what the window summed: at accumulation 1 that is the failed
    # backward's part alone, as plain torch's zero_grad. With 2, the window's earlier micro-step
    # goes too, as torch's, where DeepSpeed's zero_grad drops it: stages 0-1, and stage 3's
    # optimizer.zero_grad (the old zinc_grads_clear refused there with the bucket of the failed
    # hand-over taken).
    for how in ("in a hook", "in hand-over 1", "in hand-over 2"):
        interrupted(stage, 1, how, clear="engine")
        if stage != 2:
            interrupted(stage, 2, how, clear="optimizer")
    if stage >= 1:
        one_bucket(stage)
    twice(stage)
    misuse(stage)
    return finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
