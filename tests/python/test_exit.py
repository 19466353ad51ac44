"""test_exit.py — an exception that stops engine.backward half way leaves a process that exits;
an exception nothing catches on one rank stops the others at once.

    python test_exit.py STAGE
    python test_exit.py uncaught MPIEXEC [ARG...]    `MPIEXEC ARG... 2 python ...` runs the MPI
                                                     check (the last ARG: the -n flag)
    python test_exit.py hook                         the hook itself, in one process
    python test_exit.py early one|busy|all|engine|quit|quit-bcast MPIEXEC [ARG...]
                                                     trouble before any engine
    python test_exit.py leave MPIEXEC [ARG...]       a rank that catches an error and exits

Runs itself as a child: a model whose last layer's gradient hook raises, so autograd stops with
the earlier layers' nodes (which saved tensors over zinc's memory) still queued; the child
catches the exception and exits with status 3. The parent wants status 3 within 60 s: neither
the hang at exit torch 1.13 showed nor the crash torch 2.x showed while zinc's views held a
Python object (python/zinc/_memory.py says why). Exit 77 without torch.

uncaught: two ranks under mpirun (comm_timeout_s 60); after a step, rank 1 raises an exception
nothing catches while rank 0 steps on. Rank 0's step must raise ZINC_ERR_ABORTED naming it
("uncaught RuntimeError: ...": zinc's sys.excepthook aborted the world), rank 1 must still print
its traceback, and the job must end within 100 s. Without the hook rank 0 waits out the 60 s and
raises ZINC_ERR_TIMEOUT, and the job takes about two minutes (the exit's grace as well).

early: two ranks under mpirun; right after zinc.init_distributed, before any engine exists,
rank 1 (`one`, `busy`) or both ranks (`all`) raise an exception nothing catches. With `one`,
rank 0 is in zinc.initialize, waiting to create its engine's communicator with rank 1: rank 1's
exit notice, which carries its abort ("uncaught RuntimeError: ..."), must fail that with
ZINC_ERR_ABORTED naming the exception, and both ranks finalize (no MPI_Abort). With `busy`,
rank 0 works outside zinc (a 100 s sleep) and nothing can tell it: rank 1's exit must end the
job (MPI_Abort, logged with the exception) after the 10 s grace, within 60 s. Before either,
rank 1 waited in MPI_Finalize, and rank 0 in the engine's creation or its work, forever. With
`all`, both ranks reach the exit within the grace: MPI_Finalize, no MPI_Abort, and mpirun
exits with Python's status 1. With `engine`, rank 1 calls
zinc_world_abort first: the engines both ranks create then fail at once, naming its reason.
With `quit` and `quit-bcast`, rank 1 catches an error and calls sys.exit(1) (no excepthook, no
abort) while rank 0 creates its engine, or waits for rank 1's zinc_world_broadcast. Rank 0 must
get ZINC_ERR_ABORTED saying rank 1 ended its process (its exit notice) within 20 s, and both
ranks finalize; before, rank 0 blocked in MPI_Comm_dup or MPI_Bcast and rank 1 in the exit
barrier, forever.

leave: two ranks under mpirun (comm_timeout_s 60); after a step rank 1 catches an error and
calls sys.exit(1), which no excepthook sees. Rank 0's next step must raise ZINC_ERR_ABORTED
saying rank 1 ended its process (the exit notice zmpi_finalize sends), within 30 s; without the
notice it raises ZINC_ERR_TIMEOUT after the 60 s, and the job takes two minutes.

hook: the sys.excepthook zinc chains, called directly with zinc_world_abort recorded instead of
called: any exception but zinc's own abort or timeout aborts with "uncaught Type: text" cut to
300 characters, and the previous hook prints every one, after the abort.
"""
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time

from _common import torch, zinc
from zinc._lib import ZINC_ERR_ABORTED, ZINC_ERR_COMM, ZINC_ERR_TIMEOUT, ZincError, lib


class Boom(Exception):
    pass


def child(stage):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                torch.nn.Tanh(), torch.nn.Linear(8, 2))
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage}}
    engine, *_ = zinc.initialize(model=model, config=cfg)
    x = torch.randn(4, 8)
    engine.backward(engine(x).pow(2).mean())      # a whole step first: the normal path works
    engine.step()

    def boom(grad):
        raise Boom("a hook raised in the middle of backward")
    model[4].weight.register_hook(boom)
    try:
        engine.backward(engine(x).pow(2).mean())
    except Exception as ex:   # torch wraps it on some versions
        print(f"backward raised: {type(ex).__name__}: {ex}", flush=True)
        sys.exit(3)
    print("FAIL: the hook did not raise", flush=True)
    sys.exit(1)


BUG = "rank 1 stops with a bug in its loop"


def rank1_stops_child(how, folder):
    """After a step, rank 1 stops: `raise` (an exception nothing catches) or `exit` (it catches
    an error and calls sys.exit(1)); rank 0 steps on and prints one line saying how that ended.
    Each rank's output goes to its file in `folder` (own_output)."""
    from zinc._world import rank                     # the engine's world, created a bit early
    own_output(rank(), folder)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2}, "zinc": {"comm_timeout_s": 60}}
    engine, *_ = zinc.initialize(model=model, config=cfg)
    x = torch.randn(4, 8)
    engine.backward(engine(x).pow(2).mean())
    engine.step()
    # rank 1 stops only once rank 0 is out of that step: the step's last collective can let
    # rank 1 out while rank 0 is still in it, and an abort then reached rank 0 there, outside
    # the try below (python_uncaught_mpi failed so under load, 2026-11-30)
    stepped = os.path.join(folder, "rank0-stepped")
    if engine.global_rank == 0:
        open(stepped, "w").close()
    else:
        deadline = time.monotonic() + 120
        while not os.path.exists(stepped) and time.monotonic() < deadline:
            time.sleep(0.01)
    if engine.global_rank == 1:
        if how == "raise":
            raise RuntimeError(BUG)
        print("rank 1: caught an error, calling sys.exit(1)", flush=True)
        sys.exit(1)
    t0 = time.monotonic()
    try:
        if how == "exit-save":      # a save instead of steps
            engine.save_checkpoint(os.path.join(folder, "ck"))
            line = "rank 0: saved without rank 1"
        else:
            for _ in range(3):
                engine.backward(engine(x).pow(2).mean())
                engine.step()
            line = "rank 0: the steps went on without rank 1"
    except zinc.ZincError as ex:
        name = lib.zinc_status_string(ex.status).decode()
        line = f"rank 0: {name} after {time.monotonic() - t0:.1f} s: {ex}"
    os.write(1, (line + "\n").encode())     # one write: the ranks share the pipe
    sys.exit(0)


def own_output(rank, folder):
    """Sends this rank's stdout and stderr (Python's and the C library's: file descriptors 1 and
    2) to FOLDER/rank<rank>.txt. Under load mpirun forwards the ranks' pipes in pieces, so two
    ranks' tracebacks printed at once interleaved inside one line and a check on the merged text
    missed a line each rank had printed whole (python_early_all_mpi, issue 40 item 5): with a
    file per rank the checks read what each rank wrote, whatever the launcher does with it."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(os.path.join(folder, f"rank{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run_ranks(args, limit, ranks=2):
    """run_job for a child that calls own_output with the folder given as its last argument:
    (exit status or None, every output as one text, the lines of each source). The sources are
    mpirun's own output and each rank's file, split into lines separately, so no line mixes two
    ranks."""
    with tempfile.TemporaryDirectory(prefix="zinc_exit_") as folder:
        code, out = run_job(args + [folder], limit)
        pieces = [out]
        for r in range(ranks):
            try:
                with open(os.path.join(folder, f"rank{r}.txt"), errors="replace") as f:
                    pieces.append(f"---- rank {r} ----\n" + f.read())
            except OSError:
                pieces.append(f"---- rank {r}: no output file ----\n")
    return code, "\n".join(pieces), [x for p in pieces for x in p.splitlines()]


def run_job(args, limit):
    """(exit status or None, output) of a job run in its own session: past `limit` seconds the
    whole session is killed (mpirun and its ranks), and the output ends with a note saying so.
    The output is stdout then stderr, so that the ranks' printed lines stay whole."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
        return p.returncode, out + err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out + err + f"\n(killed after {limit} s)"


def report(name, checks, t0, code):
    """Prints each (what, good) check and the verdict; the test's exit status."""
    ok = True
    for what, good in checks:
        print(f"{'ok' if good else 'FAIL'}: {what}")
        ok &= good
    print(f"{'PASS' if ok else 'FAIL'}: {name} ({time.monotonic() - t0:.1f} s, status {code})")
    return 0 if ok else 1


def uncaught(mpiexec):
    t0 = time.monotonic()
    code, out, lines = run_ranks(mpiexec + ["2", sys.executable, __file__, "rank1-child",
                                            "raise"], 100)
    print(out)
    line = next((x for x in lines if x.startswith("rank 0:")), "")
    # The traceback's last line, as Python prints it (torch 2.x's hook prefixes "[rank1]: ").
    last = f"RuntimeError: {BUG}"
    return report("uncaught", [
        ("rank 0 raised ZINC_ERR_ABORTED naming the exception",
         "ZINC_ERR_ABORTED" in line and f"uncaught {last}" in line),
        ("rank 1 printed its traceback",
         "Traceback" in out and any(x.split("]: ")[-1] == last for x in lines)),
        ("the job ended", code is not None)], t0, code)


EARLY = "rank {} cannot read its data"


def early_child(who, folder):
    world = zinc.init_distributed()
    rank = zinc._world.rank()
    own_output(rank, folder)
    if who == "all" or (who in ("one", "busy") and rank == 1):
        raise RuntimeError(EARLY.format(rank))
    if who == "busy":
        time.sleep(100)       # rank 0 works outside zinc: nothing of zinc's can tell it
    if who == "engine" and rank == 1:
        lib.zinc_world_abort(world, rank, b"rank 1 gave up")
    if who.startswith("quit") and rank == 1:
        print("rank 1: caught an error, calling sys.exit(1)", flush=True)
        sys.exit(1)
    if who == "quit-bcast":
        buf = ctypes.create_string_buffer(64)
        t0 = time.monotonic()
        status = lib.zinc_world_broadcast(world, buf, 64, 1)   # from the rank that left
        name = lib.zinc_status_string(status).decode()
        os.write(1, (f"rank {rank}: {name} after {time.monotonic() - t0:.1f} s: "
                     f"{lib.zinc_last_error(None).decode()}\n").encode())
        sys.exit(0)
    t0 = time.monotonic()
    model = torch.nn.Linear(8, 2)
    cfg = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {}},
           "zero_optimization": {"stage": 2}, "zinc": {"comm_timeout_s": 60}}
    try:
        engine, *_ = zinc.initialize(model=model, config=cfg)
        x = torch.randn(4, 8)
        engine.backward(engine(x).pow(2).mean())
        engine.step()
        line = f"rank {rank}: stepped"
    except zinc.ZincError as ex:
        line = (f"rank {rank}: {lib.zinc_status_string(ex.status).decode()} after "
                f"{time.monotonic() - t0:.1f} s: {ex}")
    os.write(1, (line + "\n").encode())
    sys.exit(0)


def early(who, mpiexec):
    t0 = time.monotonic()
    # 90 s: a hang's bound, under the 100 s that "busy"'s rank 0 sleeps (the job must end by
    # the abort, not by itself); the cases take 7-28 s, two torch imports and a 10 s grace
    # included, and 60 s left little room on 2 busy cores
    code, out, lines = run_ranks(mpiexec + ["2", sys.executable, __file__, "early-child", who], 90)
    print(out)
    ended = [x for x in lines if "ending the MPI job with MPI_Abort" in x]
    if who.startswith("quit"):
        line = next((x for x in lines if x.startswith("rank 0:")), "")
        took = float(line.split(" after ")[1].split(" s")[0]) if " after " in line else None
        checks = [("rank 0 got ZINC_ERR_ABORTED saying rank 1 ended its process",
                   "ZINC_ERR_ABORTED" in line and "rank 1 ended its process" in line),
                  ("within 20 s", took is not None and took < 20),
                  ("no MPI_Abort: both ranks finalized", not ended),
                  ("the job ended, non-zero", code not in (None, 0))]
    elif who == "engine":
        checks = [(f"rank {r} raised ZINC_ERR_ABORTED naming the reason",
                   any(x.startswith(f"rank {r}: ZINC_ERR_ABORTED") and "rank 1 gave up" in x
                       for x in lines)) for r in (0, 1)]
        checks.append(("the job ended", code is not None))
    else:
        ranks = (0, 1) if who == "all" else (1,)
        # The traceback's last line, whole (each rank's own file; torch 2.x's hook may prefix
        # "[rank<r>]: ").
        checks = [(f"rank {r} printed its traceback",
                   any(x.split("]: ")[-1] == "RuntimeError: " + EARLY.format(r) for x in lines))
                  for r in ranks]
        checks.append(("the job ended, non-zero", code not in (None, 0)))
    uncaught = f"uncaught RuntimeError: {EARLY.format(1)}"
    if who == "one":
        line = next((x for x in lines if x.startswith("rank 0:")), "")
        checks.append(("rank 0 got ZINC_ERR_ABORTED naming rank 1's exception",
                       "ZINC_ERR_ABORTED" in line and "rank 1 ended its process" in line and
                       uncaught in line))
        checks.append(("no MPI_Abort: both ranks finalized", not ended))
    elif who == "busy":
        checks.append(("rank 1 ended the job with MPI_Abort, naming its exception",
                       any(uncaught in x for x in ended)))
    elif who == "all":
        checks.append(("no MPI_Abort: both ranks finalized", not ended))
        checks.append(("mpirun exited with Python's status 1", code == 1))
    return report(f"early {who}", checks, t0, code)


def leave(mpiexec, save=False):
    """Rank 1 ends its process after a step; rank 0 steps on, or (save) saves a checkpoint,
    whose error said "the previous background save failed on another rank" (there was none)."""
    t0 = time.monotonic()
    code, out, lines = run_ranks(mpiexec + ["2", sys.executable, __file__, "rank1-child",
                                            "exit-save" if save else "exit"], 150)
    print(out)
    line = next((x for x in lines if x.startswith("rank 0:")), "")
    took = float(line.split(" after ")[1].split(" s")[0]) if " after " in line else None
    checks = [("rank 0 raised ZINC_ERR_ABORTED saying rank 1 ended its process",
               "ZINC_ERR_ABORTED" in line and "rank 1 ended its process" in line),
              ("within 30 s (comm_timeout_s is 60)", took is not None and took < 30),
              ("the job ended, non-zero", code not in (None, 0))]
    if save:
        checks.append(("the save says not every rank is in it (no background save is blamed)",
                       "not every rank is in this save" in line and "background" not in line))
    return report("leave-save" if save else "leave", checks, t0, code)


def hook():
    import zinc._world as ze
    seen = []
    sys.excepthook = lambda kind, value, tb: seen.append(("printed", kind.__name__))
    ze.lib.zinc_world_abort = lambda w, rank, why: seen.append(("abort", why.decode()))
    ze._launcher_world()          # a world of one installs no hook: installed here by hand
    ze._abort_on_uncaught()
    long_text = "x" * 1000
    cases = [(RuntimeError(long_text),
              [("abort", ("uncaught RuntimeError: " + long_text)[:297] + "..."),
               ("printed", "RuntimeError")]),
             (KeyError("k"), [("abort", "uncaught KeyError: 'k'"), ("printed", "KeyError")]),
             (ZincError(ZINC_ERR_COMM, "zinc_step: MPI failed"),
              [("abort", "uncaught ZincError: zinc_step: MPI failed"), ("printed", "ZincError")]),
             (ZincError(ZINC_ERR_ABORTED, "the world was aborted"), [("printed", "ZincError")]),
             (ZincError(ZINC_ERR_TIMEOUT, "timed out"), [("printed", "ZincError")])]
    bad = 0
    for ex, want in cases:
        seen.clear()
        sys.excepthook(type(ex), ex, None)
        good = seen == want
        print(f"{'ok' if good else 'FAIL'}: {type(ex).__name__}: {seen}")
        bad += not good
    print("PASS: hook" if not bad else f"FAIL: hook ({bad} cases)")
    return 1 if bad else 0


def main():
    if sys.argv[1:2] == ["hook"]:
        return hook()
    if sys.argv[1:2] == ["rank1-child"]:
        rank1_stops_child(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["leave"]:
        return leave(sys.argv[2:])
    if sys.argv[1:2] == ["leave-save"]:
        return leave(sys.argv[2:], save=True)
    if sys.argv[1:2] == ["early-child"]:
        early_child(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["early"]:
        return early(sys.argv[2], sys.argv[3:])
    if sys.argv[1:2] == ["uncaught"]:
        return uncaught(sys.argv[2:])
    if len(sys.argv) > 2 and sys.argv[2] == "child":
        child(int(sys.argv[1]))
    stage = int(sys.argv[1])
    try:
        r = subprocess.run([sys.executable, __file__, str(stage), "child"], timeout=60)
        code = r.returncode
    except subprocess.TimeoutExpired:
        code = "a hang (killed after 60 s)"
    print(f"stage {stage}: the child exited with {code} (want 3)")
    return 0 if code == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
