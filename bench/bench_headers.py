#!/usr/bin/env python3
"""Many-tensor safetensors headers: ckpt against the reference reader.

usage: .venv/bin/python bench/bench_headers.py [--quick] [--ckpt BIN]

Builds /tmp/ckpt-bench-headers-PID-N.safetensors with the `safetensors`
package's own writer (safetensors.numpy.save_file: N one-element F32
tensors named like a transformer's, plus __metadata__) for N = 1k, 10k,
100k, 1M (--quick: up to 100k), and deletes them afterwards. Then, warm page
cache, best of 3, each in its own process:
  - the peer: safetensors.safe_open(path, framework="numpy") and listing
    its keys, timed inside the process (interpreter start-up and import
    excluded); memory = peak RSS growth over the imported interpreter;
  - `ckpt inspect`, `ckpt verify`, `ckpt doctor` of the file (whole process,
    exec included, stdout to /dev/null); memory = the process's peak RSS
    (GNU time); "startup" is the same for an empty file.
Prints times, ratios against the peer and peak RSS per header byte. Asserts
nothing about time (CI runs no timing tests).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPEAT = 3
TIME = "/usr/bin/time"  # GNU time, for the child's own peak RSS

PEER = r"""
import resource, sys, time
import numpy
from safetensors import safe_open
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
with safe_open(sys.argv[1], framework="numpy") as f:
    n = len(list(f.keys()))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(dt, (peak - base) * 1024, n)
"""


def make_file(path, n):
    import numpy as np
    from safetensors.numpy import save_file
    one = np.zeros(1, dtype=np.float32)
    tensors = {"model.layers.%d.block.%d.weight" % (i // 64, i % 64): one
               for i in range(n)}
    save_file(tensors, path, metadata={"format": "pt"})
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8), "little")


def run_child(cmd):
    """(wall seconds, peak RSS bytes) of one child process. The RSS comes
    from /usr/bin/time: a child forked by Python reports the interpreter's
    pages it had before exec as its own peak."""
    fd, rss_file = tempfile.mkstemp()
    os.close(fd)
    try:
        t0 = time.perf_counter()
        p = subprocess.run([TIME, "-f", "%M", "-o", rss_file] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        with open(rss_file) as fh:
            rss = int(fh.read().split()[-1]) * 1024
    finally:
        os.unlink(rss_file)
    if p.returncode != 0:
        raise SystemExit("%s exited %d: %s" % (" ".join(cmd), p.returncode,
                                               p.stderr.decode(errors="replace")))
    return dt, rss


def best(fn):
    runs = [fn() for _ in range(REPEAT)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def peer(path, n):
    def once():
        out = subprocess.run([sys.executable, "-c", PEER, path], check=True,
                             capture_output=True, text=True).stdout.split()
        if int(out[2]) != n:
            raise SystemExit("peer listed %s keys, expected %d" % (out[2], n))
        return float(out[0]), int(out[1])
    return best(once)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="up to 100k tensors")
    ap.add_argument("--ckpt", default=os.path.join(HERE, "..", "build", "ckpt"))
    args = ap.parse_args()
    counts = [1000, 10000, 100000] + ([] if args.quick else [1000000])
    cmds = ("inspect", "verify", "doctor")
    empty = "/tmp/ckpt-bench-headers-%d-empty.safetensors" % os.getpid()
    try:
        make_file(empty, 0)
        st, srss = best(lambda: run_child([args.ckpt, "inspect", empty]))
    finally:
        os.unlink(empty)
    print("ckpt startup (inspect of an empty file): %.4f s, %.1f MiB peak RSS"
          % (st, srss / 2**20))
    print("%8s %10s | %9s %9s | %s | %s" % (
        "tensors", "header", "peer s", "peer RSS",
        " ".join("%8s %6s" % (c + " s", "x") for c in cmds),
        " ".join("%10s" % (c + " B/hdr") for c in cmds)))
    for n in counts:
        path = "/tmp/ckpt-bench-headers-%d-%d.safetensors" % (os.getpid(), n)
        try:
            hdr = make_file(path, n)
            pt, prss = peer(path, n)
            res = [best(lambda c=c: run_child([args.ckpt, c, path])) for c in cmds]
        finally:
            if os.path.exists(path):
                os.unlink(path)
        print("%8d %10d | %9.4f %8.1fM | %s | %s" % (
            n, hdr, pt, prss / 2**20,
            " ".join("%8.4f %5.2fx" % (t, t / pt) for t, _ in res),
            " ".join("%10.2f" % (r / hdr) for _, r in res)), flush=True)


if __name__ == "__main__":
    main()
