"""Runs one function of a test script as every rank of a gloo process group
on this machine: each rank is a subprocess of the project's torch 2.13
(.venv/bin/python, or sys.executable when that is torch 2) with RANK,
WORLD_SIZE and CKPT_TEST_RDZV (a FileStore path of its own) set. A file
rendezvous, not a TCP port: a port found free and released can be taken
by another test's gloo connection before rank 0 binds it."""
import atexit
import os
import subprocess
import sys
import tempfile
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
VENV = os.path.join(SRC, ".venv", "bin", "python")


def python():
    """The torch 2 interpreter, or None."""
    try:
        import torch
        if int(torch.__version__.split(".")[0]) >= 2:
            return sys.executable
    except ImportError:
        pass
    return VENV if os.path.exists(VENV) else None


def reexec(script):
    """Runs `script` again under torch 2 when this interpreter is older;
    returns without doing anything when it already is torch 2. Exits 0
    with one SKIP line when there is no torch 2."""
    py = python()
    if py == sys.executable:
        return
    if py is None:
        print("SKIP: no torch 2 (%s); run scripts/deps --test" % VENV)
        sys.exit(0)
    sys.exit(subprocess.call([py, script] + sys.argv[1:]))


def rendezvous():
    """A fresh path for one process group's FileStore, removed when this
    process exits (the ranks leave the file behind)."""
    path = os.path.join(tempfile.gettempdir(), "ckpt-rdzv-" + uuid.uuid4().hex)
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    return path


def start(script, fn, world, *args, env=None):
    """Starts `script --rank-fn FN ARGS...` as world ranks; returns the
    Popen objects (rank order)."""
    store = rendezvous()
    procs = []
    for rank in range(world):
        e = dict(os.environ, CKPT_TEST_RDZV=store, RANK=str(rank),
                 WORLD_SIZE=str(world), PYTHONPATH=os.path.join(SRC, "python"),
                 OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen([python(), script, "--rank-fn", fn] + [str(a) for a in args],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return procs


def run(script, fn, world, *args, timeout=300):
    """Runs fn on world ranks; raises AssertionError with the ranks' output
    when any fails."""
    procs = start(script, fn, world, *args)
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out.decode("utf-8", "replace")))
    if any(rc != 0 for rc, _ in outs):
        raise AssertionError("%s on %d ranks failed:\n%s" % (fn, world, "\n".join(
            "--- rank %d (exit %s)\n%s" % (i, rc, out[-3000:]) for i, (rc, out) in enumerate(outs))))


def rank_main(namespace):
    """In a rank: when argv is `--rank-fn FN ARGS...`, initialises gloo,
    runs namespace[FN](*ARGS), tears down and exits; else returns."""
    if len(sys.argv) < 3 or sys.argv[1] != "--rank-fn":
        return
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + os.environ["CKPT_TEST_RDZV"],
                            rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    try:
        namespace[sys.argv[2]](*sys.argv[3:])
        dist.barrier()
    except BaseException:
        traceback.print_exc()
        leave(1)
    leave(0)


def leave(code):
    """Ends a rank whose work is done (every rank passed the barrier)
    without the process group's teardown or the interpreter's: there,
    gloo's threads can abort a rank ("terminate called without an active
    exception", no Python frame left; about 1 run in 30 on a loaded
    machine, CI included)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
