#!/usr/bin/env python3
"""Random-point crash trials of a multi-rank Store commit (not run by
ctest: minutes long). Documented in tests/dcp/test_py_store.py.

    .venv/bin/python tests/dcp/crash_trials.py [--trials 50] [--seed S] [--world 2]

A store holding steps 1 and 2 (2 ranks, gloo) is copied for each trial;
the ranks then commit step 3 and, once the coordinator's staging
directory appears (the commit has begun), one rank chosen at random is
SIGKILLed after a random delay within the commit's measured duration
(plus a margin, so that some trials land after it). The others are killed
too (they wait for the dead one in a collective). After every trial:
LATEST names a generation that ckpt.dcp.verify accepts, step 2 survives
and verifies, and Store.latest answers a verified generation; every 10th
trial then commits step 4, which must succeed and clear the dead
staging directory. Prints one line per trial (where the kill landed:
LATEST before/after) and "N passed, N failed"; exit 1 on any failure."""
import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import dcp_ranks  # noqa: E402
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

STORE_TEST = os.path.join(HERE, "test_py_store.py")


def staging(d):
    return [f for f in os.listdir(d) if f.startswith(".ckpt-3.dcp.tmp-")]


def latest_name(d):
    with open(os.path.join(d, "LATEST")) as f:
        return f.read().strip()


def wait_staging(d, procs, timeout=300):
    t = time.monotonic()
    while not staging(d):
        if time.monotonic() - t > timeout or any(p.poll() is not None for p in procs):
            return None
        time.sleep(0.002)
    return time.monotonic()


def measure(base, tmp, world):
    """Seconds from staging to LATEST naming step 3, in a clean run."""
    d = os.path.join(tmp, "measure")
    shutil.copytree(base, d)
    procs = dcp_ranks.start(STORE_TEST, "rank_commit", world, d, 3)
    t0 = wait_staging(d, procs)
    t1 = None
    while t0 is not None and t1 is None and procs[0].poll() is None:
        if latest_name(d) == "ckpt-3.dcp":
            t1 = time.monotonic()
        time.sleep(0.002)
    for p in procs:
        p.communicate()
    assert all(p.returncode == 0 for p in procs) and t0 and t1, "clean commit failed"
    shutil.rmtree(d)
    return t1 - t0


def check(d):
    import ckpt
    import ckpt.dcp
    named = latest_name(d)
    assert named in ("ckpt-2.dcp", "ckpt-3.dcp"), named
    assert ckpt.dcp.verify(os.path.join(d, named)).ok, named
    assert ckpt.dcp.verify(os.path.join(d, "ckpt-2.dcp")).ok, "step 2 lost"
    got = ckpt.Store(d).latest()
    assert got and ckpt.dcp.verify(got).ok, got
    return named


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("seed %d" % seed)
    tmp = tempfile.mkdtemp(prefix="ckpt-crash-trials-")
    tally = suite.Tally(echo=False)
    try:
        base = os.path.join(tmp, "base")
        dcp_ranks.run(STORE_TEST, "rank_commit", a.world, base, 1, 2)
        span = measure(base, tmp, a.world)
        print("LATEST names step 3 %.3f s after the staging directory appears" % span)
        for i in range(a.trials):
            d = os.path.join(tmp, "t%d" % i)
            shutil.copytree(base, d)
            victim, delay = rng.randrange(a.world), rng.uniform(0, span * 1.2)
            procs = dcp_ranks.start(STORE_TEST, "rank_commit", a.world, d, 3)
            t0 = wait_staging(d, procs)
            if t0 is not None:
                time.sleep(max(0.0, delay - (time.monotonic() - t0)))
            if procs[victim].poll() is None:
                procs[victim].send_signal(signal.SIGKILL)
            for p in procs:
                if p.poll() is None:
                    time.sleep(0.2)  # let a survivor finish what it can alone
                    p.kill()
                p.communicate()
            try:
                named = check(d)
                if i % 10 == 9:
                    dcp_ranks.run(STORE_TEST, "rank_commit", a.world, d, 4)
                    assert latest_name(d) == "ckpt-4.dcp", latest_name(d)
                    assert not [f for f in os.listdir(d) if ".tmp-" in f], os.listdir(d)
                print("ok   trial %d: rank %d killed %.3f s in; LATEST %s" % (
                    i, victim, delay, named))
                tally.report(True, "trial %d" % i)
            except Exception as e:  # report every trial
                tally.report(False, "trial %d: rank %d killed %.3f s in" % (i, victim, delay),
                             [e])
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
