"""_common.py — what every tests/python script needs first: torch (exit 77, CTest's skip, when
it is not importable) and the source tree's python/ on sys.path, so `import zinc` finds the
package of this checkout (which finds libzinc.so through $ZINC_LIB, set by tests.cmake), or the
one in $ZINC_PY when set (to run a test against another version of the package).

    from _common import torch, zinc, finish
    from _common import check, failures     # named checks: print each, collect the failed
    from _common import storage_bytes       # the bytes of the storage a tensor's data is in
    from _common import Gain                # an elementwise model, for fp16 on the CPU
    from _common import LibCalls            # count (and act after) a zinc call of the front-end
    from _common import run_torchrun_ranks  # this script's "rank" mode as torchrun's ranks
    from _common import state_kept_past_close  # model.state_dict() read after engine.close()
"""
import os
import socket
import subprocess
import sys

try:
    import torch
except Exception as ex:  # noqa: BLE001 — any failure to import torch means: skip
    print(f"SKIP: no torch ({ex})")
    sys.exit(77)

sys.path.insert(0, os.environ.get("ZINC_PY") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zinc  # noqa: E402

failures = []


class Gain(torch.nn.Module):
    """An elementwise model, x * w + b over 8 features (torch 1.13 has no fp16 matmul on the
    CPU, so fp16 runs use it)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.b = torch.nn.Parameter(torch.zeros(8))

    def forward(self, x):
        return x * self.w + self.b


class LibCalls:
    """Inside its with-block, lib.<name> (the ctypes library every front-end module calls
    through) is a wrapper that counts its calls in `count` and, at call number `at` (set it any
    time; None: never), runs `then()` right after the real call returned. The real function is
    back after the block."""

    def __init__(self, name, then=None):
        from zinc._lib import lib
        self.lib, self.name, self.real = lib, name, getattr(lib, name)
        self.count, self.at, self.then = 0, None, then

    def __enter__(self):
        setattr(self.lib, self.name, self._call)
        return self

    def _call(self, *args):
        status = self.real(*args)
        self.count += 1
        if self.count == self.at and self.then is not None:
            self.at = None
            self.then()
        return status

    def __exit__(self, *exc):
        setattr(self.lib, self.name, self.real)
        return False


def check(name, ok, detail=""):
    """Prints `ok  name` or `FAIL name: detail`; a failed check's name goes into `failures`."""
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}",
          flush=True)
    if not ok:
        failures.append(name)


def storage_bytes(t):
    """The bytes of the storage a tensor's data lives in."""
    d = t.data
    if hasattr(d, "untyped_storage"):
        return d.untyped_storage().nbytes()
    return d.storage().size() * d.element_size()


def state_kept_past_close(engine, model, block_numel):
    """model.state_dict() taken now and kept while `engine` is closed, Python's collector runs
    and memory on the model's device is written over (4 blocks each of block_numel elements, of
    each of zinc's device buffers' sizes and of each entry's, so that memory freed too early is
    handed out again). Returns the names of
    the entries that are not empty and of those whose values changed: zinc's views hold the
    engine's memory (zinc_memory_hold), so none should have."""
    import gc
    dev = next(model.parameters()).device
    sd = model.state_dict()
    ref = {k: v.clone() for k, v in sd.items()}
    views = [k for k, v in sd.items() if v.numel()]
    allocated = [a for _, a in engine.memory().values()]    # the sizes of zinc's device buffers
    engine.close()
    gc.collect()
    sizes = [block_numel] + [(n + 64) // 4 for n in allocated if n] + [ref[k].numel()
                                                                        for k in views]
    churn = [torch.full((n,), 7.0, device=dev) for n in sizes for _ in range(4)]
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    changed = [k for k in views if not torch.equal(sd[k], ref[k])]
    del churn        # (held through the comparison: what freed memory would now hold)
    return views, changed


def check_raises(name, fn, kind, *texts):
    """A check that fn() raises `kind` with each of `texts` in its message."""
    try:
        fn()
    except kind as ex:
        check(name, all(t in str(ex) for t in texts), str(ex))
    else:
        check(name, False, "it did not raise")


def finish():
    """The test's exit status after its checks: 1 (and the failed names) when any failed."""
    if failures:
        print(f"FAILED: {len(failures)}: {', '.join(failures)}")
        return 1
    print("PASS")
    return 0


__all__ = ["torch", "zinc", "check", "check_raises", "failures", "finish", "Gain", "storage_bytes",
           "run_torchrun_ranks"]


def run_torchrun_ranks(script, ranks, wait_s):
    """Runs `script rank` as `ranks` processes with torchrun's environment (RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT on a free local port; mpirun's and slurm's
    variables removed) and returns [(returncode, output)] by rank, each waited for at most
    `wait_s` seconds (then every rank is killed and the output says so)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        for var in [v for v in env if v.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_"))]:
            del env[var]                     # torchrun's environment only, not mpirun's
        procs.append(subprocess.Popen([sys.executable, script, "rank"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n(timed out after {wait_s} s)"
        results.append((p.returncode, out))
    return results
