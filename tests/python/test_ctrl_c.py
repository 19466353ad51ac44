"""test_ctrl_c.py — a Ctrl-C or an exception anywhere in an iteration of `import zinc`: the
engine trains on afterwards, on the values a run without it has.

    python test_ctrl_c.py STAGE        (1 rank, fp32, gradient_accumulation_steps 1)

A Ctrl-C (KeyboardInterrupt) lands between two bytecodes. One that came right after a zinc call
returned and before the front-end recorded it (zinc_step and the step counters, zinc_grads_ready
and the group's `done`, zinc_gather and its zinc_release) left the two disagreeing for good:
every later call was refused ("already handed over", "already gathered", "call step()"). Here
each such call in turn raises SIGINT right after it returns (its n-th call in the interrupted
iteration, for every n), and the loop goes on as a user would: the iteration's step went through
(global_steps moved), or its gradients are dropped (zero_grad) and it runs again, or, where its
backward had ended, its step is taken. The weights then are bit for bit those of the run without
the Ctrl-C.

And the exceptions that left wrong values (each failed before its fix):
- zero_grad after a backward that raised midway kept, at stages 2-3, the gradients handed over
  before the error, which the next step applied;
- a backward that raised before any gradient came (a loss computed under no_grad) let step()
  take an Adam step on zero gradients (DeepSpeed's step() raises there);
- stage 3: groups a failed backward, or a Ctrl-C in forward, left gathered kept their values
  across load_checkpoint, and the next forward computed with the old weights; the Ctrl-C in
  forward also made GatheredParameters(modifier_rank=...) refuse as "inside a forward";
- a GatheredParameters(modifier_rank=0) block that raised after changing a weight in place left
  the change in the working copy at stages 0-2 (the next forward used it, the fp32 master did
  not have it);
- a Ctrl-C right after load_checkpoint's zinc_ckpt_load left global_steps at the old count,
  and one inside a custom_load_fn (load_optimizer_states=False) cut the load short there;
- a Ctrl-C in one engine's GatheredParameters exit skipped the other engines' exits, which
  then refused step() for good;
- a Ctrl-C right after zinc_step skipped a client LR scheduler's step (a step behind for good);
- with managed_gradient_accumulation false, a backward that raised before any gradient counted
  its micro-batch in global_samples.
"""
import os
import signal
import sys
import tempfile

from _common import LibCalls, check, check_raises, finish, torch, zinc

STAGE = int(sys.argv[1]) if len(sys.argv) > 1 else 3
ITERS, HIT = 3, 1          # iterations; the one interrupted
MSE = torch.nn.functional.mse_loss


class Three(torch.nn.Module):
    """a, b, c; `fail_bwd` raises at the gradient reaching a's output (c's and b's are handed
    over by then), `fail_fwd` raises that exception after b's forward."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 12)
        self.b = torch.nn.Linear(12, 12)
        self.c = torch.nn.Linear(12, 4)
        self.fail_bwd = self.fail_fwd = None

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.fail_bwd is not None:
            exc = self.fail_bwd

            def boom(_):
                raise exc("boom in backward")
            h.register_hook(boom)
        h = torch.tanh(self.b(h))
        if self.fail_fwd is not None:
            raise self.fail_fwd("boom in forward")
        return self.c(h)


def engine_of():
    torch.manual_seed(0)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
           "gradient_clipping": 1.0,
           "zero_optimization": {"stage": STAGE, "stage3_param_persistence_threshold": 0}}
    return zinc.initialize(model=Three(), config=cfg)[0]


DATA = [(torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g))
        for g in [torch.Generator().manual_seed(3)] for _ in range(ITERS + 1)]


def iteration(engine, k):
    x, y = DATA[k]
    engine.backward(MSE(engine(x), y))
    engine.step()


def weights(engine):
    return {n: t.detach().clone() for n, t in engine.module_state_dict().items()}


def same(a, b):
    return all(torch.equal(a[n], b[n]) for n in a)


def clean():
    engine = engine_of()
    for k in range(ITERS):
        iteration(engine, k)
    w = weights(engine)
    engine.close()
    return w


def Inject(name):
    """LibCalls whose call `at` sends this process SIGINT right after the real call returned
    (Python raises KeyboardInterrupt at the next bytecode: in the front-end's lines after it)."""
    return LibCalls(name, then=lambda: signal.raise_signal(signal.SIGINT))


def calls_in_hit(name):
    """How many times iteration HIT calls lib.<name>."""
    engine = engine_of()
    for k in range(HIT):
        iteration(engine, k)
    with Inject(name) as inj:
        iteration(engine, HIT)
    engine.close()
    return inj.count


def interrupted(name, n):
    """The run with SIGINT after the n-th call of lib.<name> in iteration HIT. Returns the
    weights, global_steps and how the loop went on."""
    engine = engine_of()
    how = "not interrupted"
    with Inject(name) as inj:
        for k in range(ITERS):
            if k == HIT:
                inj.count, inj.at = 0, n
            before = engine.global_steps
            try:
                iteration(engine, k)
                continue
            except KeyboardInterrupt:
                pass
            if engine.global_steps > before:
                how = "its step went through"
                continue
            engine.zero_grad()
            try:
                iteration(engine, k)
                how = "run again"
            except RuntimeError as ex:
                if "without engine.step()" not in str(ex):
                    raise
                engine.step()
                how = "its backward had ended: its step"
    w, steps = weights(engine), engine.global_steps
    engine.close()
    return w, steps, how


def ctrl_c_after_calls(want):
    names = ["zinc_step", "zinc_grads_ready", "zinc_grad_buffer_attach", "zinc_engine_at_boundary"]
    if STAGE >= 2:
        names.append("zinc_grad_bucket")
    if STAGE == 3:
        names += ["zinc_gather", "zinc_release"]
    for name in names:
        total = calls_in_hit(name)
        check(f"stage {STAGE}: iteration {HIT} calls {name}", total > 0, "no call to interrupt")
        for n in range(1, total + 1):
            try:
                w, steps, how = interrupted(name, n)
            except Exception as ex:      # noqa: BLE001 — the engine refused to go on: a failure
                check(f"stage {STAGE}: Ctrl-C after {name} call {n}/{total}: the loop goes on",
                      False, f"{type(ex).__name__}: {ex}")
                continue
            check(f"stage {STAGE}: Ctrl-C after {name} call {n}/{total} ({how}): the weights "
                  f"bit for bit those of the run without it, {ITERS} steps",
                  steps == ITERS and same(w, want), f"{steps} steps, how: {how}")


def zero_grad_after_failed_backward(want):
    engine = engine_of()
    for k in range(ITERS):
        if k == HIT:
            engine.module.fail_bwd = RuntimeError
            try:
                iteration(engine, k)
            except RuntimeError as ex:
                assert "boom in backward" in str(ex), ex
            engine.module.fail_bwd = None
            engine.zero_grad()        # the failed backward's gradients go
        iteration(engine, k)
    check(f"stage {STAGE}: zero_grad after a backward that raised midway drops what it handed "
          f"over (the weights as without it)", same(weights(engine), want))
    engine.close()


def step_after_backward_without_grad(want):
    engine = engine_of()
    for k in range(ITERS):
        if k == HIT:
            x, y = DATA[k]
            with torch.no_grad():
                loss = MSE(engine(x), y)
            check_raises(f"stage {STAGE}: backward of a loss without grad_fn raises (torch's)",
                         lambda: engine.backward(loss), RuntimeError, "grad")
            check_raises(f"stage {STAGE}: step() after it is refused, as with no backward "
                         f"(DeepSpeed's step() raises there)", engine.step, RuntimeError,
                         "no backward() since the last step")
        iteration(engine, k)
    check(f"stage {STAGE}: ... and nothing was applied (the weights as without it)",
          same(weights(engine), want) and engine.global_steps == ITERS,
          f"{engine.global_steps} steps")
    engine.close()


def load_after_failures(root):
    """Stage 3: a failed backward, or a Ctrl-C in forward, then load_checkpoint: the next
    forward computes with the loaded weights."""
    engine = engine_of()
    iteration(engine, 0)
    ck = os.path.join(root, "ck")
    engine.save_checkpoint(ck, tag="one")
    x, y = DATA[1]
    with torch.no_grad():
        engine.eval()
        want = float(MSE(engine(x), y))
        engine.train()
    iteration(engine, 1)               # the weights move past the checkpoint's
    for what, attr, exc in (("a backward that raised midway", "fail_bwd", RuntimeError),
                            ("a Ctrl-C in forward", "fail_fwd", KeyboardInterrupt)):
        setattr(engine.module, attr, exc)
        try:
            iteration(engine, 2)
        except (RuntimeError, KeyboardInterrupt):
            pass
        setattr(engine.module, attr, None)
        if exc is KeyboardInterrupt:
            ok = True
            try:
                with zinc.zero.GatheredParameters([engine.module.a.weight], modifier_rank=0):
                    pass
            except RuntimeError as ex:
                ok = str(ex)
            check(f"stage {STAGE}: GatheredParameters(modifier_rank=0) after {what} (it was "
                  f"refused as inside a forward)", ok is True, str(ok))
        engine.zero_grad()
        engine.load_checkpoint(ck, tag="one")
        with torch.no_grad():
            engine.eval()
            got = float(MSE(engine(x), y))
            engine.train()
        check(f"stage {STAGE}: after {what} and load_checkpoint the forward uses the loaded "
              f"weights", got == want, f"loss {got} vs {want} at the save")
    engine.close()


def gathered_block_that_raises(want):
    engine = engine_of()
    for k in range(ITERS):
        if k == HIT:
            p = engine.module.b.weight
            with zinc.zero.GatheredParameters([p], modifier_rank=0):
                before = p.detach().clone()
            try:
                with zinc.zero.GatheredParameters([p], modifier_rank=0):
                    with torch.no_grad():
                        p.add_(1.0)
                    raise ValueError("boom in the block")
            except ValueError:
                pass
            with zinc.zero.GatheredParameters([p], modifier_rank=0):
                after = p.detach().clone()
            check(f"stage {STAGE}: a GatheredParameters block that raised changes nothing",
                  torch.equal(before, after), f"{float((after - before).abs().max())} off")
        iteration(engine, k)
    check(f"stage {STAGE}: ... and the training is as without it", same(weights(engine), want))
    engine.close()


def ctrl_c_in_context_exit():
    """A GatheredParameters block over two engines' parameters, with a Ctrl-C in the first
    engine's exit (right after its zinc_param_set): the second's exit still runs, so both step
    afterwards (the second counted an open context for good and refused step())."""
    engines = [engine_of(), engine_of()]
    for e in engines:
        iteration(e, 0)
    params = [e.module.a.weight for e in engines]
    with Inject("zinc_param_set") as inj:
        inj.at = 1
        try:
            with zinc.zero.GatheredParameters(params, modifier_rank=0):
                with torch.no_grad():
                    for p in params:
                        p.add_(0.5)
        except KeyboardInterrupt:
            pass
    errors = []
    for e in engines:
        try:
            iteration(e, 1)
        except RuntimeError as ex:
            errors.append(str(ex))
        e.close()
    check(f"stage {STAGE}: a Ctrl-C in one engine's GatheredParameters exit: both engines step "
          f"afterwards", not errors, "; ".join(errors))


def client_scheduler_and_samples():
    """A client LR scheduler stays in step with a Ctrl-C right after zinc_step (it ran after
    the held section and was skipped: a step behind for the rest of the run), and with
    managed_gradient_accumulation false a backward that raised before any gradient does not
    count its micro-batch (global_samples counted it and the next one's)."""
    def run(hit, unmanaged=False):
        torch.manual_seed(0)
        m = Three()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
               "zero_optimization": {"stage": STAGE}}
        if unmanaged:
            cfg["managed_gradient_accumulation"] = False
        engine = zinc.initialize(model=m, optimizer=opt, lr_scheduler=sched, config=cfg)[0]
        with Inject("zinc_step") as inj:
            for k in range(ITERS):
                inj.at = 1 if k == hit else None
                inj.count = 0
                if unmanaged and k == 1:
                    with torch.no_grad():
                        loss = MSE(engine(DATA[k][0]), DATA[k][1])
                    try:
                        engine.backward(loss)
                    except RuntimeError:
                        pass
                try:
                    iteration(engine, k)
                except KeyboardInterrupt:
                    pass
        out = (engine.global_steps, engine.global_samples, sched.last_epoch, engine.get_lr())
        engine.close()
        return out
    want = run(-1)
    got = run(1)
    check(f"stage {STAGE}: a client scheduler after a Ctrl-C right after zinc_step: steps, "
          f"samples, the schedule and the lr as without it", got == want, f"{got} vs {want}")
    got = run(-1, unmanaged=True)
    check(f"stage {STAGE}: managed_gradient_accumulation false, a backward that raised before any "
          f"gradient: global_samples counts the micro-batches that ran", got == want,
          f"{got} vs {want}")


def chaining_handler():
    """A script's SIGINT handler that chains to the one it replaced, installed after the engine,
    and a SIGINT inside a zinc call: the script's handler runs once, then Python's, a
    KeyboardInterrupt (zinc's handler, once kept in place and re-wrapped, made the two call each
    other until RecursionError)."""
    engine = engine_of()
    iteration(engine, 0)
    calls = []

    def chained(signum, frame):
        calls.append(signum)
        prev(signum, frame)
    prev = signal.signal(signal.SIGINT, chained)
    what = "nothing"
    try:
        with Inject("zinc_step") as inj:
            inj.at = 1
            iteration(engine, 1)
    except KeyboardInterrupt:
        what = "KeyboardInterrupt"
    except RecursionError:
        what = "RecursionError"
    finally:
        signal.signal(signal.SIGINT, prev)
    check(f"stage {STAGE}: a script's chaining handler: called once, then KeyboardInterrupt",
          what == "KeyboardInterrupt" and len(calls) == 1 and engine.global_steps == 2,
          f"{what}, {len(calls)} calls, {engine.global_steps} steps")
    engine.close()


def swap_races():
    """A SIGINT right before, and right after, a section's swap to zinc's handler (the
    section's entry): before, the script's handler raises and nothing stays changed; after, the
    section holds it. Either way the next section holds a SIGINT again, and Python's handler is
    in place after it (one right after the swap, before the count, left zinc's handler in place
    outside any section and no later section held anything: a stress loop of timed SIGINTs got
    engines refused "already handed over" again)."""
    import zinc._interrupt as zi
    real = zi._setsignal
    results = []
    for when in ("before", "after"):
        def swap(signum, handler, when=when):
            if handler is zi._on_sigint and when == "before":
                signal.raise_signal(signal.SIGINT)
            out = real(signum, handler)
            if handler is zi._on_sigint and when == "after":
                signal.raise_signal(signal.SIGINT)
            return out
        seen = []
        zi._setsignal = swap
        try:
            with zi.held():
                seen.append("inside")
        except KeyboardInterrupt:
            seen.append("KeyboardInterrupt")
        finally:
            zi._setsignal = real
        holds = False
        try:
            with zi.held():
                signal.raise_signal(signal.SIGINT)
                for _ in range(1000):
                    pass
                holds = True
        except KeyboardInterrupt:
            pass
        results.append((when, seen, holds,
                        signal.getsignal(signal.SIGINT) is signal.default_int_handler))
    want = [("before", ["KeyboardInterrupt"], True, True),
            ("after", ["inside", "KeyboardInterrupt"], True, True)]
    check(f"stage {STAGE}: a SIGINT right before / after a section's handler swap",
          results == want, f"{results}")


def ctrl_c_in_load(root):
    """SIGINT right after zinc_ckpt_load: the counters are the checkpoint's (a save's default
    tag named the step before the load)."""
    engine = engine_of()
    for k in range(2):
        iteration(engine, k)
    ck = os.path.join(root, "ck_load")
    engine.save_checkpoint(ck)
    iteration(engine, 2)
    with Inject("zinc_ckpt_load") as inj:
        inj.at = 1
        try:
            engine.load_checkpoint(ck)
        except KeyboardInterrupt:
            pass
    check(f"stage {STAGE}: a Ctrl-C in load_checkpoint after zinc's load: global_steps is the "
          f"checkpoint's", engine.global_steps == 2, f"{engine.global_steps}")
    engine.close()


def ctrl_c_in_custom_load(root):
    """SIGINT inside a custom_load_fn (load_optimizer_states=False): the KeyboardInterrupt comes
    after the load, with the function's weights, the masters made from them and the
    checkpoint's global_steps together (before, it cut the function short and left the counters
    at the engine's own)."""
    engine = engine_of()
    for k in range(2):
        iteration(engine, k)
    ck = os.path.join(root, "ck_custom")
    engine.save_checkpoint(ck)
    saved = weights(engine)
    iteration(engine, 2)

    def fn(src, dst):
        signal.raise_signal(signal.SIGINT)
        dst.load_state_dict(src)
    raised = False
    try:
        engine.load_checkpoint(ck, load_optimizer_states=False, custom_load_fn=fn)
    except KeyboardInterrupt:
        raised = True
    from zinc.utils import safe_get_full_fp32_param
    masters = {n: safe_get_full_fp32_param(p) for n, p in engine.module.named_parameters()}
    check(f"stage {STAGE}: a Ctrl-C in load_checkpoint's custom_load_fn: raised after the load, "
          f"global_steps the checkpoint's, the weights and fp32 masters its too",
          raised and engine.global_steps == 2 and same(saved, weights(engine))
          and same(saved, masters), f"raised {raised}, global_steps {engine.global_steps}")
    engine.close()


def main():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)    # a launcher may ignore it
    want = clean()
    ctrl_c_after_calls(want)
    zero_grad_after_failed_backward(want)
    step_after_backward_without_grad(want)
    gathered_block_that_raises(want)
    ctrl_c_in_context_exit()
    client_scheduler_and_samples()
    chaining_handler()
    swap_races()
    with tempfile.TemporaryDirectory() as root:
        if STAGE == 3:
            load_after_failures(root)
        ctrl_c_in_load(root)
        ctrl_c_in_custom_load(root)
    raised = False
    try:        # outside zinc's calls a SIGINT is the KeyboardInterrupt it was, at once
        signal.raise_signal(signal.SIGINT)
        for _ in range(1000):
            pass
    except KeyboardInterrupt:
        raised = True
    check(f"stage {STAGE}: a SIGINT between zinc's calls raises KeyboardInterrupt at once, "
          f"Python's handler in place", raised and
          signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
