"""ckpt.save / ckpt.Store / resume: a training run killed and resumed takes
bit-identical steps to an uninterrupted one; weights-only checkpoints are
refused by resume; saves are atomic and verifiable."""
import os
import signal
import subprocess
import sys

import pytest

import ckpt

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))


def torch_load(path):
    """torch.load of a file this test wrote (or the repository ships): the
    full unpickler on every torch version (>= 2.6 defaults to weights_only)."""
    return torch.load(path, weights_only=False)


def train(*args):
    return subprocess.run([sys.executable, os.path.join(HERE, "train_loop.py")] +
                          [str(a) for a in args], capture_output=True, text=True,
                          cwd=str(args[0]), timeout=600)


def test_killed_and_resumed_run_is_bit_identical(tmp_path):
    steps, kill_after = 6, 3
    full_dir, run_dir = tmp_path / "full", tmp_path / "run"
    full_dir.mkdir()
    run_dir.mkdir()
    r = train(full_dir, steps, "full", tmp_path / "full.pt")
    assert r.returncode == 0, r.stderr
    r = train(run_dir, steps, "kill-after", kill_after)
    assert r.returncode == -signal.SIGKILL, r.stderr
    store = ckpt.Store(run_dir, keep=2)
    gens = store.generations()
    assert [g.step for g in gens] == [2, 3] and all(g.ok for g in gens)
    assert store.latest() == str(run_dir / ("ckpt-%d.pt" % kill_after))
    r = train(run_dir, steps, "resume", tmp_path / "resumed.pt")
    assert r.returncode == 0, r.stderr
    assert "resumed %s %d full-resume model,optimizer,scheduler,rng" % (
        run_dir / ("ckpt-%d.pt" % kill_after), kill_after) in r.stdout
    full, resumed = torch_load(tmp_path / "full.pt"), torch_load(tmp_path / "resumed.pt")
    assert sorted(resumed) == list(range(kill_after + 1, steps + 1))
    for s in resumed:  # the next step, and every one after it
        for k in full[s]:
            assert torch.equal(full[s][k], resumed[s][k]), (s, k)
    # the resumed run's step really differs from a fresh optimizer's
    assert not torch.equal(full[kill_after + 1]["0.weight"], full[kill_after]["0.weight"])
    assert [g.step for g in store.generations()] == [5, 6]


def test_resume_refuses_weights_only(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    store = ckpt.Store(tmp_path / "s")
    assert store.resume(model, None) is None  # nothing to resume from
    store.commit(model, 7)  # a module: its weights only
    other = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(other.parameters())
    before = other.weight.detach().clone()
    with pytest.raises(ckpt.ResumeError) as exc:
        store.resume(other, opt)
    assert exc.value.verdict == "weights-only" and "allow_warm_start" in str(exc.value)
    assert torch.equal(other.weight, before)
    r = store.resume(other, opt, allow_warm_start=True)
    assert r.restored == ("model",) and r.verdict == "weights-only"
    assert torch.equal(other.weight, model.weight)
    assert opt.state_dict()["state"] == {}


def flip_middle_byte(path):
    """A byte of tensor data changed: the generation no longer verifies."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_resume_never_starts_fresh_from_a_store_that_does_not_verify(tmp_path):
    """tryout F4: a store whose every generation was corrupt resumed as
    None, a fresh start from step 0, silently (`ckpt store list` exit 1),
    and a fallback past a corrupt newest generation said nothing. None
    means nothing was ever committed; no generation verifying raises,
    naming each; a fallback warns, naming what it skipped and the steps
    lost, and Resumed.skipped lists it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)  # the file is mostly tensor data
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store = ckpt.Store(tmp_path, keep=5)
    saved = {}
    for step in (10, 20, 30):
        model(torch.randn(2, 64)).sum().backward()
        opt.step()
        store.commit({"model": model, "optimizer": opt}, step)
        saved[step] = model.weight.detach().clone()
    flip_middle_byte(tmp_path / "ckpt-30.pt")
    live = torch.nn.Linear(64, 64)
    with pytest.warns(ckpt.ResumeWarning) as w:
        r = store.resume(live, torch.optim.SGD(live.parameters(), lr=0.1, momentum=0.9))
    msg = str(w[0].message)
    assert "resuming from ckpt-20.pt (step 20)" in msg and "ckpt-30.pt (step 30)" in msg, msg
    assert "after step 20 up to step 30 is lost" in msg and "CKPT_E_CHECKSUM" in msg, msg
    assert r.step == 20 and r.path == str(tmp_path / "ckpt-20.pt")
    assert [(g.file, g.step, g.ok) for g in r.skipped] == [("ckpt-30.pt", 30, False)]
    assert isinstance(r.skipped[0].error, ckpt.ChecksumError)
    assert torch.equal(live.weight, saved[20])
    # the newest verifying: no warning, nothing skipped
    store.commit({"model": model, "optimizer": opt}, 40)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = store.resume(live, torch.optim.SGD(live.parameters(), lr=0.1, momentum=0.9))
    assert (r.step, r.skipped) == (40, ())
    # none verifies: an error naming each, nothing restored, never None
    for step in (10, 20, 40):
        flip_middle_byte(tmp_path / ("ckpt-%d.pt" % step))
    fresh = torch.nn.Linear(64, 64)
    before = fresh.weight.detach().clone()
    with pytest.raises(ckpt.ChecksumError) as e:
        store.resume(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))
    msg = str(e.value)
    assert "none of the 4 generations verifies" in msg, msg
    for step in (10, 20, 30, 40):
        assert "ckpt-%d.pt (step %d): " % (step, step) in msg, msg
    assert [g.step for g in e.value.generations] == [10, 20, 30, 40]
    assert not any(g.ok for g in e.value.generations)
    assert torch.equal(fresh.weight, before)
    with pytest.raises(ckpt.ChecksumError):
        store.latest()
    assert ckpt.Store(tmp_path / "empty").latest() is None


def test_resumed_step_is_the_generation_step(tmp_path):
    """tryout F5: Resumed.step was the file's "step" entry: 2 for a file
    holding step=2 committed as step 700, None without one (`r.step + 1`
    raised). It is the step the generation was committed as; the file's
    entry stays in r.state. And a commit below LATEST's step warns, as
    `ckpt store commit` notes it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    store = ckpt.Store(tmp_path)
    store.commit({"model": model, "optimizer": opt, "step": 2}, 700)
    r = store.resume(torch.nn.Linear(4, 2), torch.optim.Adam(torch.nn.Linear(4, 2).parameters()))
    assert r.step == 700 and r.state["step"] == 2
    store.commit(model, 800)  # weights only: no "step" entry in the file
    r = store.resume(torch.nn.Linear(4, 2), None)
    assert r.step == 800 and "step" not in r.state
    with pytest.warns(ckpt.StoreWarning, match=r"LATEST stays at ckpt-800\.pt, a higher step; "
                      r"ckpt-5\.pt is committed beside it"):
        assert store.commit(model, 5) == str(tmp_path / "ckpt-5.pt")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.commit(model, 900)
    assert store.resume(torch.nn.Linear(4, 2), None).step == 900


def test_save_atomic_digests_and_formats(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    state = {"model": m, "optimizer": opt, "epoch": 2, "note": "héllo", "shape": (2, 4)}
    for ext in (".pt", ".safetensors"):
        path = tmp_path / ("s" + ext)
        path.write_bytes(b"old")
        ckpt.save(state, path, meta={"arch": "linear"})
        rep = ckpt.verify(path)
        assert rep.ok and rep.tensors >= 3, ext
        assert ckpt.metadata(path)["arch"] == "linear"
        assert "ckpt.xxh3" in ckpt.metadata(path)
        got = ckpt.load(path)
        assert got["epoch"] == 2 and got["note"] == "héllo" and got["shape"] == (2, 4)
        assert torch.equal(got["model"]["weight"], m.weight)
        mom = opt.state_dict()["state"][0]["momentum_buffer"]
        assert torch.equal(got["optimizer"]["state"][0]["momentum_buffer"], mom)
        assert got["optimizer"]["param_groups"][0]["momentum"] == 0.9
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # torch reads ckpt's torch files as they were saved
    back = torch_load(tmp_path / "s.pt")
    assert back["epoch"] == 2 and back["shape"] == (2, 4)
    assert back["optimizer"]["param_groups"] == opt.state_dict()["param_groups"]
    with pytest.raises(ckpt.UnsupportedError) as exc:
        ckpt.save({"x": object()}, tmp_path / "bad.pt")
    assert "x: builtins.object" in str(exc.value)
    assert not (tmp_path / "bad.pt").exists()
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.save({}, tmp_path / "x.npz")
    with pytest.raises(ckpt.FileError):  # unwritable: the old file stays
        ckpt.save({"w": m.weight}, tmp_path / "nodir" / "w.pt")


def test_store_removes_staging_files_of_dead_writers(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / (".ckpt-staging.tmp-%d-0123456789abcdef" % dead.pid)
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / (".ckpt-staging.tmp-%d-0123456789abcdef" % os.getpid())
    live.write_bytes(b"being written")
    ckpt.Store(tmp_path)
    assert not stale.exists() and live.exists()


def test_async_commit_snapshots_and_surfaces_errors(tmp_path):
    store = ckpt.Store(tmp_path, keep=3)
    sd = {"w": torch.arange(1000, dtype=torch.float32), "n": 7}
    future = store.async_commit(sd, 1)
    sd["w"].add_(1)  # the training step goes on: generation 1 keeps the old values
    assert future.result() == str(tmp_path / "ckpt-1.pt")
    assert store.wait() == str(tmp_path / "ckpt-1.pt")
    assert store.wait() is None
    got = torch_load(tmp_path / "ckpt-1.pt")
    assert torch.equal(got["w"], torch.arange(1000, dtype=torch.float32)) and got["n"] == 7
    assert (tmp_path / "LATEST").read_text() == "ckpt-1.pt\n"
    # a failure in the background reaches the next call, once
    store.async_commit(sd, 1)
    with pytest.raises(ckpt.InvalidArgumentError, match="already committed"):
        store.commit(sd, 2)
    assert store.commit(sd, 2) == str(tmp_path / "ckpt-2.pt")
    store.async_commit(sd, 2)
    # the way out is named for Python too, not only the CLI flag
    with pytest.raises(ckpt.InvalidArgumentError, match=r"already committed .*replace=True"):
        store.wait()
    # the next commit waits for the previous one: LATEST moves in order
    for step in (3, 4, 5):
        store.async_commit({"w": torch.full((100,), float(step))}, step)
    assert store.commit({"w": torch.zeros(1)}, 6) == str(tmp_path / "ckpt-6.pt")
    assert [g.step for g in store.generations()] == [4, 5, 6]
    assert all(g.ok for g in store.generations())
    assert torch.equal(torch_load(tmp_path / "ckpt-5.pt")["w"], torch.full((100,), 5.0))
    assert (tmp_path / "LATEST").read_text() == "ckpt-6.pt\n"


_ASYNC_CHILD = r"""
import os, resource, signal, sys
import torch
import ckpt
store = ckpt.Store(sys.argv[1], keep=2)
store.commit({"w": torch.ones(10)}, 1)
state = {"w%d" % i: torch.randn(1 << 20) for i in range(16)}  # 64 MiB
if sys.argv[2] == "kill":
    store.async_commit(state, 2)
    os.kill(os.getpid(), signal.SIGKILL)  # the write runs in the background
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # writes fail past 1 MiB
store.async_commit(state, 2)
try:
    store.wait()
except ckpt.FileError as e:
    print("FileError", e)
"""


@pytest.mark.parametrize("how", ["kill", "write-error"])
def test_async_commit_killed_or_failing_keeps_the_store(tmp_path, how):
    """SIGKILL while async_commit writes in the background, and a write
    error in it (RLIMIT_FSIZE): the previous generation stays, LATEST names
    a generation that verifies, and the error reaches wait()."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(ckpt.__path__[0]))
    r = subprocess.run([sys.executable, "-c", _ASYNC_CHILD, str(tmp_path), how],
                       capture_output=True, text=True, timeout=600, env=env)
    if how == "kill":
        assert r.returncode == -signal.SIGKILL, r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("FileError") and "ckpt-2.pt" in r.stdout, r.stdout
    latest = (tmp_path / "LATEST").read_text().strip()
    assert latest in ("ckpt-1.pt", "ckpt-2.pt")
    if how == "write-error":
        assert latest == "ckpt-1.pt" and not (tmp_path / "ckpt-2.pt").exists()
    store = ckpt.Store(tmp_path, keep=2)  # gc: the killed writer's temporary file
    gens = store.generations()
    assert all(g.ok for g in gens) and gens[0].step == 1
    assert store.latest() == str(tmp_path / latest)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
