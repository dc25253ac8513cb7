#!/usr/bin/python3
"""Concurrent writers of one store (issue 12, item 8).

Two `ckpt store commit` loops run at once into one store (with --keep 1
and --keep 3; one loop commits the even steps, the other the odd ones)
while a reader follows LATEST: every LATEST it reads must name a file
that is there (until LATEST moved on twice), the step it names never goes back, and at the end LATEST
names the highest step, which verifies. A step committed twice is refused
unless --replace. gc leaves a temporary file alone while a writer holds
its lock, even when its PID is not visible (another PID namespace).
Environment: CKPT_BIN. Standard library only. Prints "N passed, N failed".
"""
import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
STEPS = 24
TALLY = suite.Tally()


def check(name, cond, detail=""):
    TALLY.report(cond, name, [detail] if detail else ())


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


def safetensors(path, fill):
    """A 2 MiB safetensors file whose bytes are `fill`."""
    n = 1 << 19
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}})
    header += " " * (-len(header) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header.encode() + bytes([fill]) * (4 * n))


def step_of(name):
    m = re.match(r"run-(\d+)\.safetensors$", name)
    return int(m.group(1)) if m else None


def writer(store, src, steps, keep, errors):
    for k in steps:
        r = run("store", "commit", store, "--name", "run", "--step", str(k), "--keep",
                str(keep), src)
        if r.returncode != 0:
            errors.append("step %d: %s" % (k, r.stderr.strip()))


def concurrent(keep_a, keep_b):
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        os.mkdir(store)
        src = os.path.join(d, "src.safetensors")
        safetensors(src, 7)
        errors, seen, dangling = [], [], []
        done = threading.Event()

        def reader():
            latest = os.path.join(store, "LATEST")
            while not done.is_set():
                try:
                    with open(latest) as fh:
                        name = fh.read().strip()
                except FileNotFoundError:
                    continue
                if not os.path.exists(os.path.join(store, name)):
                    # kept until LATEST moved twice: a reader descheduled
                    # for two whole commits cannot be helped
                    with open(latest) as fh:
                        now = step_of(fh.read().strip())
                    if now is None or now <= step_of(name) + 1:
                        dangling.append(name)
                seen.append(step_of(name))
        threads = [threading.Thread(target=writer, args=(store, src, range(0, STEPS, 2),
                                                         keep_a, errors)),
                   threading.Thread(target=writer, args=(store, src, range(1, STEPS, 2),
                                                         keep_b, errors))]
        rt = threading.Thread(target=reader)
        rt.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        rt.join()
        tag = "keep %d and %d: " % (keep_a, keep_b)
        check(tag + "every commit succeeded", not errors, errors[:3])
        check(tag + "LATEST never dangled", not dangling, dangling[:3])
        back = [(a, b) for a, b in zip(seen, seen[1:]) if b is None or a is None or b < a]
        check(tag + "LATEST only moved forward (%d reads)" % len(seen), seen and not back,
              back[:3])
        with open(os.path.join(store, "LATEST")) as fh:
            last = fh.read().strip()
        check(tag + "LATEST names the highest step", step_of(last) == STEPS - 1, last)
        r = run("verify", os.path.join(store, last))
        check(tag + "and it verifies", r.returncode == 0, r.stdout + r.stderr)
        gens = [f for f in os.listdir(store) if step_of(f) is not None]
        check(tag + "pruned to keep + the previous LATEST",
              len(gens) <= max(keep_a, keep_b) + 1, sorted(gens))


def same_step_twice():
    with tempfile.TemporaryDirectory() as d:
        store, src = os.path.join(d, "s"), os.path.join(d, "a.safetensors")
        safetensors(src, 1)
        r1 = run("store", "commit", store, "--name", "run", "--step", "5", src)
        r2 = run("store", "commit", store, "--name", "run", "--step", "5", src)
        check("same step twice: the first succeeds", r1.returncode == 0, r1.stderr)
        check("same step twice: the second is refused",
              r2.returncode != 0 and "already committed" in r2.stderr, r2.stderr)
        safetensors(src, 2)
        r3 = run("store", "commit", store, "--name", "run", "--step", "5", "--replace", src)
        with open(os.path.join(store, "run-5.safetensors"), "rb") as fh:
            data = fh.read()
        check("--replace replaces it", r3.returncode == 0 and data.endswith(b"\x02" * 16),
              r3.stderr)


def gc_respects_lock():
    with tempfile.TemporaryDirectory() as d:
        # a PID that does not exist here: a writer in another PID namespace
        tmp = os.path.join(d, ".run-1.safetensors.tmp-4194000-0123456789abcdef")
        with open(tmp, "wb") as fh:
            fh.write(b"partial")
        fd = os.open(tmp, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = run("store", "gc", d)
        check("gc keeps a locked temporary file", r.returncode == 0 and os.path.exists(tmp),
              r.stdout + r.stderr)
        os.close(fd)  # the writer dies: the kernel drops its lock
        r = run("store", "gc", d)
        check("gc removes it once unlocked", r.returncode == 0 and not os.path.exists(tmp),
              r.stdout + r.stderr)


concurrent(1, 3)
concurrent(1, 1)
same_step_twice()
gc_respects_lock()
sys.exit(TALLY.end())
