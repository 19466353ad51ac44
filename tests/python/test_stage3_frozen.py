"""test_stage3_frozen.py — ZeRO stage 3 holds frozen parameters in pieces (python/zinc/_frozen.py),
as DeepSpeed partitions every parameter at stage 3: a LoRA run's base model takes 2/N bytes per
parameter on each rank, where before every rank held it whole.

    python test_stage3_frozen.py            one process, or under mpirun (2 ranks)
    ZINC_TEST_DEVICE=cuda python ...        the model on the GPU of LOCAL_RANK (0 without a
                                            launcher): bench/gpu_session.sh's pycuda phase

The model: a frozen embedding (its weight also read by the head through the module's attribute,
as GPT-2's tied head), blocks of a frozen LayerNorm (persistent at the threshold used) and a
LoRA linear (a frozen base Linear beside two trained rank-8 Linears; the second block under
non-reentrant activation checkpointing), bf16 and fp32. Each run is
compared with the same run with the frozen parameters kept whole (_frozen.PARTITION False, the
front-end before 2026-12-01), which did the same edits and loads. How each check fails:
- losses or final weights (module_state_dict, frozen ones included) not bit for bit the whole
  run's: a gather gives other values, or an edit or load did not reach the pieces;
- a frozen non-persistent parameter not empty between steps, or the frozen engine holding a
  master, Adam state or a gradient, or its 16-bit bytes not the rank's share: nothing
  partitioned;
- under torch >= 2, "Recomputed values ... have different metadata" in the checkpointed block:
  its recomputation's end emptied a frozen weight the recomputed graph had saved itself;
- the last block's frozen base still gathered when the first block's gradient arrives: a group
  gathered for a backward is not let go when its module's backward ends (_frozen_backward_done);
- two engines whose models share a frozen Linear: the second initialize refused, or losses not
  those of the whole run (the base must be whole again: both engines read it);
- a GatheredParameters(modifier_rank=0) write to a frozen weight missing on a rank, a loaded
  checkpoint's frozen values not in place, a closed engine's frozen parameters not marked (the
  next initialize must refuse them by name).
Exit 77 without torch.
"""
import ctypes
import os
import shutil
import sys
import tempfile

from _common import check, check_raises, finish, torch, zinc

from zinc import _frozen  # noqa: E402
from zinc._lib import MEM_CATEGORIES, lib  # noqa: E402

D, V, R, LAYERS = 64, 96, 8, 3
THRESHOLD = 200               # the LayerNorms (128 elements) persistent, nothing else
DEVICE = os.environ.get("ZINC_TEST_DEVICE", "cpu")
if DEVICE == "cuda":
    if not torch.cuda.is_available():
        print("SKIP: ZINC_TEST_DEVICE=cuda and torch has no CUDA device")
        sys.exit(77)
    DEVICE = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


class LoraLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(D, D)
        self.a = torch.nn.Linear(D, R, bias=False)
        self.b = torch.nn.Linear(R, D, bias=False)

    def forward(self, x):
        return self.base(x) + self.b(self.a(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(D) for _ in range(LAYERS))
        self.lins = torch.nn.ModuleList(LoraLinear() for _ in range(LAYERS))
        for n, p in self.named_parameters():
            p.requires_grad_(".a." in n or ".b." in n)
        torch.nn.init.zeros_(self.lins[0].b.weight)     # as LoRA starts (B = 0) for one

    def forward(self, ids):
        x = self.emb(ids)
        for k, (norm, lin) in enumerate(zip(self.norms, self.lins)):
            def block(x, norm=norm, lin=lin):
                return x + torch.nn.functional.gelu(lin(norm(x)))
            # block 1 under non-reentrant activation checkpointing: torch >= 2 saves a frozen
            # Parameter itself in its recomputation (a trained one detached)
            x = (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if k == 1
                 else block(x))
        return x @ self.emb.weight.t()        # the tied head: read through the attribute


def config(bf16, offload=False):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
         "gradient_clipping": 1.0,
         "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": THRESHOLD}}
    if bf16:
        c["bf16"] = {"enabled": True}
    if offload == "nvme":
        # (one path on every rank: the config's hash is compared; each rank's files are its own)
        where = {"device": "nvme", "nvme_path": tempfile.gettempdir()}
        c["zero_optimization"]["offload_optimizer"] = dict(where)
        c["zero_optimization"]["offload_param"] = dict(where)
    elif offload:
        c["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        c["zero_optimization"]["offload_param"] = {"device": "cpu"}
    return c


def frozen_names(m):
    return [n for n, p in m.named_parameters() if not p.requires_grad]


def is_norm(n):
    return n.startswith("norms.")


def run(bf16, partition, probe, offload=False):
    """8 micro-steps (4 optimizer steps) with a modifier write to a frozen weight after step 1,
    a checkpoint saved after step 1 and loaded after step 3 (frozen values edited in between).
    Returns the engine, model, losses and final full weights; `probe` runs the checks."""
    _frozen.PARTITION = partition
    torch.manual_seed(0)
    m = Net().to(DEVICE)
    engine, _, _, _ = zinc.initialize(model=m, config=config(bf16, offload))
    gen = torch.Generator().manual_seed(7 + engine.global_rank)
    rank, losses = engine.global_rank, []
    box = [tempfile.mkdtemp(prefix="zinc-frozen-") if rank == 0 else None]
    torch.distributed.broadcast_object_list(box, 0)     # (initialize set torch.distributed up)
    tmp = box[0]
    for step in range(4):
        for _ in range(2):
            ids = torch.randint(0, V, (4, 6), generator=gen).to(DEVICE)
            logits = engine(ids)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V),
                                                     ids.roll(1, 1).reshape(-1))
            engine.backward(loss)
            engine.step()
            losses.append(float(loss))
        if step == 0:
            w = m.lins[1].base.weight
            with zinc.zero.GatheredParameters([w], modifier_rank=0):
                if rank == 0:
                    w.data[:, :3] = 0.125
            engine.save_checkpoint(tmp, tag="t")
            saved = {n: t.clone() for n, t in engine.module_state_dict().items()}
        if step == 1:
            with zinc.zero.GatheredParameters([m.emb.weight, m.norms[2].weight],
                                              modifier_rank=0):
                if rank == 0:
                    m.emb.weight.data.mul_(2)
                    m.norms[2].weight.data.fill_(0.75)
        if step == 2:
            engine.load_checkpoint(tmp, tag="t")
            if probe:
                full = engine.module_state_dict()
                lost = [n for n in frozen_names(m) if not torch.equal(full[n], saved[n])]
                check(f"{probe}: load_checkpoint gives the saved frozen values", not lost,
                      str(lost))
        if probe:
            probe_between(engine, m, f"{probe}, after step {step + 1}")
    final = {n: t.clone() for n, t in engine.module_state_dict().items()}
    torch.distributed.barrier()
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    return engine, m, losses, final


def probe_between(engine, m, when):
    """Between steps: non-persistent frozen parameters empty, the persistent ones whole with
    the engine's values; the modifier's write on every rank."""
    full = engine.module_state_dict()
    held = [n for n in frozen_names(m) if not is_norm(n)
            and m.get_parameter(n).numel() != 0]
    check(f"{when}: frozen non-persistent parameters empty", not held, str(held))
    wrong = [n for n in frozen_names(m) if is_norm(n)
             and not torch.equal(m.get_parameter(n).detach(), full[n])]
    check(f"{when}: persistent frozen parameters whole, the engine's values", not wrong,
          str(wrong))
    check(f"{when}: the modifier's write to a frozen weight on rank {engine.global_rank}",
          bool(torch.all(full["lins.1.base.weight"][:, :3] == 0.125)))


def check_release(engine, m, name):
    """During backward: when the first block's LoRA gradient arrives (the last of the blocks'
    backwards), the last block's frozen base is empty again."""
    seen = []
    # (taken outside the forward: a read of the module's attribute inside the backward would
    # gather the group itself, as DeepSpeed's does)
    last = m.lins[LAYERS - 1].base.weight
    h = m.lins[0].a.weight.register_hook(lambda g: seen.append(last.numel()) or None)
    ids = torch.randint(0, V, (4, 6)).to(DEVICE)
    loss = engine(ids).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
    h.remove()
    check(f"{name}: the last block's frozen base let go after its backward", seen == [0],
          f"its elements when the first block's gradient came: {seen}")


def check_memory(engine, m, name, offload=False):
    """The frozen engine's memory: its 16-bit shard the rank's share, on the device, or with
    offload_param "cpu" in host memory (zinc_memory_host) and none on the device, or with
    offload_param "nvme" in a scratch file of the frozen engine's own (zinc_nvme_bytes), the
    host holding its staging slots only and the device none of it."""
    n = len(MEM_CATEGORIES)
    planned, alloc, host = ((ctypes.c_uint64 * n)() for _ in range(3))
    lib.zinc_memory(engine._fe, planned, alloc)
    lib.zinc_memory_host(engine._fe, planned, host)
    got, host = dict(zip(MEM_CATEGORIES, alloc)), dict(zip(MEM_CATEGORIES, host))
    file = ctypes.c_uint64()
    lib.zinc_nvme_bytes(engine._fe, ctypes.byref(file), None, None)
    check(f"{name}: the frozen engine's scratch file: {file.value} bytes",
          (file.value > 0) == (offload == "nvme"), "want one with offload_param nvme only")
    if offload:
        check(f"{name}: offload_param: no frozen shard on the device", got["param16"] == 0,
              f"{got['param16']} bytes")
        got["param16"] = host.pop("param16")
    if offload == "nvme":     # the host's are the gathers' staging slots; the shard is the file
        got["param16"] = file.value
    others = {k: v for k, v in host.items() if v}
    what = "its staging slots only" if offload == "nvme" else "the shard only" if offload else "none"
    check(f"{name}: the frozen engine's host memory: {what}",
          not others, str(others))
    trains = [k for k in ("grad", "master", "adam_m", "adam_v", "bucket") if got[k]]
    check(f"{name}: the frozen engine allocates no training state", not trains,
          f"{ {k: got[k] for k in trains} }")
    world = engine.world_size
    esz = 2 if engine.bfloat16_enabled() else 4
    share = sum(p.ds_numel for n, p in m.named_parameters() if not p.requires_grad) * esz / world
    ratio = got["param16"] / share
    # (the file: whole 4096-byte blocks)
    check(f"{name}: the frozen 16-bit shard is the rank's share (x{ratio:.3f})",
          1.0 <= ratio < 1.15 or (offload == "nvme" and share <= got["param16"] < share + 4096),
          f"{got['param16']} bytes for {share:.0f}")
    print(f"{name}: frozen bytes per rank {got['param16']} (share {share:.0f}, x{ratio:.3f}), "
          f"{world} rank(s), {offload if offload == 'nvme' else 'host' if offload else 'device'}")


def shared_run(partition):
    """Two engines whose models share one frozen Linear (a base two heads train on, each
    engine its own head): losses of 3 alternating steps, and whether the base is whole after."""
    _frozen.PARTITION = partition
    cfg = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
                                                                "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    torch.manual_seed(0)
    base = torch.nn.Linear(16, 16).requires_grad_(False).to(DEVICE)
    ma = torch.nn.Sequential(base, torch.nn.Linear(16, 4)).to(DEVICE)
    mb = torch.nn.Sequential(base, torch.nn.Linear(16, 4)).to(DEVICE)
    ea, *_ = zinc.initialize(model=ma, model_parameters=list(ma[1].parameters()), config=cfg)
    eb, *_ = zinc.initialize(model=mb, model_parameters=list(mb[1].parameters()), config=cfg)
    x = torch.randn(2, 16).to(DEVICE)
    losses = []
    for _ in range(3):
        for e in (ea, eb):
            loss = e(x).pow(2).mean()
            e.backward(loss)
            e.step()
            losses.append(float(loss))
    whole = base.weight.numel() == 16 * 16
    ea.close()
    eb.close()
    return losses, whole


def main():
    for bf16 in (True, False):
        name = "bf16" if bf16 else "fp32"
        ref = run(bf16, False, None)
        engine, m, losses, final = run(bf16, True, name)
        check(f"{name}: losses bit for bit the whole-frozen run's", losses == ref[2],
              f"{losses} vs {ref[2]}")
        diff = [n for n in final if not torch.equal(final[n], ref[3][n])]
        check(f"{name}: final weights (frozen ones too) bit for bit the whole-frozen run's",
              not diff, str(diff))
        check_memory(engine, m, name)
        check_release(engine, m, name)
        ref[0].close()
        keep = {n: t.clone() for n, t in engine.module_state_dict().items()}
        engine.close()
        kept = [n for n in frozen_names(m) if is_norm(n)
                and not torch.equal(m.get_parameter(n).detach(), keep[n])]
        check(f"{name}: after close() persistent frozen parameters keep their values",
              not kept, str(kept))
        check_raises(f"{name}: initialize again over the emptied frozen parameters refuses",
                     lambda: zinc.initialize(model=m, config=config(bf16)), ValueError,
                     "emb.weight", "empty")
    # offload_param: the frozen pieces in host memory, as DeepSpeed moves them (bf16)
    ref = run(True, False, None, offload=True)
    engine, m, losses, final = run(True, True, "bf16 offload_param", offload=True)
    check("bf16 offload_param: losses bit for bit the whole-frozen run's", losses == ref[2],
          f"{losses} vs {ref[2]}")
    diff = [n for n in final if not torch.equal(final[n], ref[3][n])]
    check("bf16 offload_param: final weights bit for bit the whole-frozen run's", not diff,
          str(diff))
    check_memory(engine, m, "bf16 offload_param", offload=True)
    ref[0].close()
    engine.close()
    # offload_param nvme: the frozen pieces in a scratch file of the frozen engine's own
    ref = run(True, False, None, offload="nvme")
    engine, m, losses, final = run(True, True, "bf16 offload_param nvme", offload="nvme")
    check("bf16 offload_param nvme: losses bit for bit the whole-frozen run's", losses == ref[2],
          f"{losses} vs {ref[2]}")
    diff = [n for n in final if not torch.equal(final[n], ref[3][n])]
    check("bf16 offload_param nvme: final weights bit for bit the whole-frozen run's", not diff,
          str(diff))
    check_memory(engine, m, "bf16 offload_param nvme", offload="nvme")
    ref[0].close()
    engine.close()
    losses, whole = shared_run(True)
    ref, _ = shared_run(False)
    check("a frozen base two live engines share: held whole by the module (the second "
          "initialize takes it back from the first engine's pieces), training as before",
          whole and losses == ref, f"whole {whole}, {losses} vs {ref}")
    _frozen.PARTITION = True
    return finish()


if __name__ == "__main__":
    sys.exit(main())
