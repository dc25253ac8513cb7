#!/usr/bin/python3
"""ckpt.Store.commit under a gloo process group of 2 ranks: each
generation is a DCP directory NAME-STEP.dcp written by ckpt.dcp.Writer;
only rank 0 moves LATEST and prunes (keep=2, verify before delete);
Store.latest, Store.generations and Store.resume read these generations;
Store(distributed=False) lets rank 0 alone commit a file generation.

Crash: one rank SIGKILLed (test hook CKPT_TEST_CRASH_AT / _RANK) at 8
fixed points of the commit of step 3 over a store holding steps 1 and 2
(the kill points inside the C commit are tests/test_store_crash.c's):
LATEST always names a complete generation that verifies, step 2 survives
and verifies, Store.latest answers a verified generation, and a commit
after the crash succeeds. Random points: tests/dcp/crash_trials.py.

Re-runs itself under the project's torch 2.13 (.venv) when started by an
older python; SKIP without it. Ends with "N passed, N failed"."""
import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import dcp_ranks  # noqa: E402
from suite import CORPUS_SUITE, run_cases  # noqa: E402

sys.path.insert(0, os.path.join(dcp_ranks.SRC, "python"))

SCRIPT = os.path.abspath(__file__)
TMP = None
# (point, rank killed): the coordinator's staging, the rank's own file
# (written, verified), the coordinator's .metadata, its commit
# (ckpt_store_commit_dir: every kill point inside it is in
# tests/test_store_crash.c)
POINTS = [("after-stage", 0), ("before-write", 1), ("after-write", 1), ("after-verify", 0),
          ("before-metadata", 0), ("after-metadata", 0), ("before-commit", 0),
          ("after-commit", 0)]


def weights(step):
    import torch
    g = torch.Generator().manual_seed(step)
    return {"weight": torch.randn(6, 4, generator=g), "bias": torch.randn(6, generator=g)}


def state(step):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    w = weights(step)
    return {"model": {"weight": distribute_tensor(w["weight"], mesh, [Shard(0)]),
                      "bias": w["bias"]},
            "note": "step %d" % step}


def rank_commit(dir, *steps, keep=2):
    import ckpt
    s = ckpt.Store(dir, keep=keep)
    for step in map(int, steps):
        path = s.commit(state(step), step)
        assert path == os.path.join(dir, "ckpt-%d.dcp" % step), path


def rank_commit_and_single(dir, single):
    """rank_commit of steps 1, 2, 3; then rank 0 alone commits a file
    generation into another store (distributed=False), as DDP code does;
    steps 1 and 2 into a third store with keep=1."""
    import torch.distributed as dist
    import ckpt
    rank_commit(dir, 1, 2, 3)
    rank_commit(dir + "-keep1", 1, 2, keep=1)
    if dist.get_rank() == 0:
        p = ckpt.Store(single, distributed=False).commit({"w": weights(1)["weight"]}, 1)
        assert p == os.path.join(single, "ckpt-1.pt"), p


def fsdp_training(seed):
    """An FSDP2 (fully_shard) MLP over every rank, AdamW and StepLR."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    fully_shard(model, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)


def train_step(model, opt, sched, x):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def rank_resume_fsdp(dir):
    """Commits steps 1 and 2 of an FSDP2 run, resumes a fresh FSDP2 model
    (other initial weights), optimizer and scheduler from the store on
    every rank: the next step is bitwise the uninterrupted run's. resume
    used to assemble the full tensors in each process and fail in
    load_state_dict ("mixed torch.Tensor and DTensor")."""
    import torch
    import ckpt
    model, opt, sched = fsdp_training(0)
    store = ckpt.Store(dir)
    torch.manual_seed(1)
    for step in (1, 2):
        train_step(model, opt, sched, torch.randn(2, 8))
        store.commit({"model": model, "optimizer": opt, "scheduler": sched}, step)
    model2, opt2, sched2 = fsdp_training(5)
    r = store.resume(model2, opt2, sched2)
    assert (r.step, r.restored) == (2, ("model", "optimizer", "scheduler")), r
    assert sched2.state_dict() == sched.state_dict()
    x = torch.randn(4, 8)
    train_step(model, opt, sched, x)
    train_step(model2, opt2, sched2, x)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a.full_tensor(), b.full_tensor())


def check_store(d, steps, latest):
    import torch
    import ckpt
    import ckpt.dcp
    with open(os.path.join(d, "LATEST")) as f:
        assert f.read() == "ckpt-%d.dcp\n" % latest
    gens = ckpt.Store(d).generations()
    assert [(g.step, g.ok, g.latest) for g in gens] == \
        [(s, True, s == latest) for s in steps], gens
    p = ckpt.Store(d).latest()
    assert p == os.path.join(d, "ckpt-%d.dcp" % latest), p
    sd = ckpt.dcp.load(p)
    assert sd["step"] == latest and sd["note"] == "step %d" % latest
    for k, v in weights(latest).items():
        assert torch.equal(sd["model"][k], v), k


def test_a_commit_prune_resume():
    import torch
    import ckpt
    d = os.path.join(TMP, "store")
    single = os.path.join(TMP, "single")
    dcp_ranks.run(SCRIPT, "rank_commit_and_single", 2, d, single)
    check_store(d, [2, 3], 3)  # keep=2: step 1 pruned after 3 verified
    # keep=1: LATEST's predecessor survives the commit, as after a file commit
    check_store(d + "-keep1", [1, 2], 2)
    assert [g.file for g in ckpt.Store(single).generations()] == ["ckpt-1.pt"]
    assert not [f for f in os.listdir(d) if ".tmp-" in f], os.listdir(d)
    model = torch.nn.Linear(4, 6)
    # judged as `ckpt doctor` judges the directory (the verdict was "")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    try:
        ckpt.Store(d).resume(model, opt)
        raise AssertionError("resumed from weights without optimizer state")
    except ckpt.ResumeError as e:
        assert e.verdict == "weights-only" and "(ckpt: weights-only: " in str(e), e
    r = ckpt.Store(d).resume(model, None, allow_warm_start=True)
    assert r.step == 3 and "model" in r.restored and r.verdict == "weights-only", r
    assert torch.equal(model.weight.detach(), weights(3)["weight"])


def test_c_resume_fsdp():
    dcp_ranks.run(SCRIPT, "rank_resume_fsdp", 2, os.path.join(TMP, "fsdp"))


def test_b_crash_points():
    import ckpt.dcp
    base = os.path.join(TMP, "base")
    dcp_ranks.run(SCRIPT, "rank_commit", 2, base, 1, 2)
    for point, victim in POINTS:
        d = os.path.join(TMP, "crash-" + point)
        shutil.copytree(base, d)
        procs = dcp_ranks.start(SCRIPT, "rank_commit", 2, d, 3,
                                env={"CKPT_TEST_CRASH_AT": point,
                                     "CKPT_TEST_CRASH_RANK": str(victim)})
        try:
            rc = procs[victim].wait(timeout=300)
        finally:
            for p in procs:  # the others wait in a collective for the dead one
                if p.poll() is None:
                    p.kill()
                p.communicate()
        assert rc == -signal.SIGKILL, (point, rc, procs[victim].stdout)
        staged = [f for f in os.listdir(d) if ".dcp.tmp-" in f]
        if victim == 0 and point != "after-commit":
            assert staged, (point, os.listdir(d))  # the dead coordinator's staging
        with open(os.path.join(d, "LATEST")) as f:
            named = f.read().strip()
        assert named in ("ckpt-2.dcp", "ckpt-3.dcp"), (point, named)
        rep = ckpt.dcp.verify(os.path.join(d, named))
        assert rep.ok, (point, rep)
        rep = ckpt.dcp.verify(os.path.join(d, "ckpt-2.dcp"))
        assert rep.ok, (point, "previous", rep)
        got = ckpt.Store(d).latest()
        # the store lock is free: Store's gc removed the dead staging directory
        assert not [f for f in os.listdir(d) if ".tmp-" in f], (point, os.listdir(d))
        assert ckpt.dcp.verify(got).ok and got.endswith(("ckpt-2.dcp", "ckpt-3.dcp")), got
        if point != "after-commit":
            assert got.endswith("ckpt-2.dcp"), (point, got)  # no name before the commit
            assert named == "ckpt-2.dcp", (point, named)
        else:
            assert got.endswith("ckpt-3.dcp") and named == "ckpt-3.dcp", (point, got, named)
    # a commit after a crash goes through
    d = os.path.join(TMP, "crash-before-metadata")
    dcp_ranks.run(SCRIPT, "rank_commit", 2, d, 3)
    check_store(d, [2, 3], 3)
    assert not [f for f in os.listdir(d) if ".tmp-" in f], os.listdir(d)


def main():
    global TMP
    if CORPUS_SUITE:  # no corpus cases: no torch 2 to start
        return run_cases(globals(), SCRIPT)
    dcp_ranks.reexec(SCRIPT)
    dcp_ranks.rank_main(globals())
    import warnings
    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
    TMP = tempfile.mkdtemp(prefix="ckpt-dcp-store-")
    try:
        return run_cases(globals(), SCRIPT)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
