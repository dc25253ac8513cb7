#!/usr/bin/env python3
"""Many-tensor headers: ckpt against the reference reader.

usage: .venv/bin/python bench/bench_headers.py [--quick] [--ckpt BIN] [--format pt]

Builds /tmp/ckpt-bench-headers-PID-N.safetensors with the `safetensors`
package's own writer (safetensors.numpy.save_file: N one-element F32
tensors named like a transformer's, plus __metadata__) for N = 1k, 10k,
100k, 1M (--quick: up to 100k), and deletes them afterwards. Then, best of
3, each in its own process, one row per case with its ratio against its
peer and its peak RSS (per header byte too; the issue's goal: at most 3x):
  - peer: safetensors.safe_open(path, framework="numpy") listing its keys,
    timed inside the process (interpreter start-up and import excluded);
    memory = peak RSS growth over the imported interpreter;
  - `ckpt inspect`, `ckpt verify`, `ckpt doctor` of the file, warm page
    cache (whole process, exec included, stdout to /dev/null); memory =
    the process's peak RSS (GNU time);
  - `ckpt match M --expect M` of the file's manifest (`ckpt inspect
    --json`), against its peer: Python json.load of both and set
    operations (the goal at 1M keys: under 1 s);
  - cold: inspect and verify against `cat FILE` with the file evicted from
    the page cache first (posix_fadvise(POSIX_FADV_DONTNEED) on the whole
    file after sync: drops its clean pages without root; `fincore FILE`
    shows 0 after it). Goal: verify within 1.5x cold cat. Each cold row
    also gives its CPU time (user + sys) against cat's: on a shared
    machine the wall clock also counts waiting for a core.
--format pt: the same with torch.save files (N one-element float32
tensors, one storage member "archive/data/<i>" each; 10k, 100k, 1M,
--quick up to 100k); the peer is torch.load(weights_only=True) in its own
process (import excluded), and "hdr" is data.pkl's size.
"startup" is inspect of a file without tensors. Asserts nothing about time
(CI runs no timing tests); the machine may be shared: read the ratios.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from pagecache import evict

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


PEER_PT = r"""
import resource, sys, time
import torch
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
n = len(torch.load(sys.argv[1], weights_only=True))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(dt, (peak - base) * 1024, n)
"""


def make_pt(path, n):
    """torch.save of n one-element tensors; returns data.pkl's size."""
    import zipfile
    import torch
    tensors = {"model.layers.%d.block.%d.weight" % (i // 64, i % 64): torch.zeros(1)
               for i in range(n)}
    torch.save(tensors, path)
    with zipfile.ZipFile(path) as z:
        return next(i.file_size for i in z.infolist() if i.filename.endswith("/data.pkl"))


def run_child(cmd):
    """(wall seconds, peak RSS bytes, CPU seconds: user + sys) of one child
    process. The RSS comes from /usr/bin/time (a child forked by Python
    reports the interpreter's pages it had before exec as its own peak);
    the CPU time from wait4, in microseconds (time's %U %S are in 10 ms,
    which a cold cat of 30 MB stays under)."""
    fd, rss_file = tempfile.mkstemp()
    os.close(fd)
    try:
        with tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            p = subprocess.Popen([TIME, "-f", "%M", "-o", rss_file] + cmd,
                                 stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(p.pid, 0)
            dt = time.perf_counter() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            errors = err.read()
        with open(rss_file) as fh:
            rss = int(fh.read().split()[-1]) * 1024
    finally:
        os.unlink(rss_file)
    if p.returncode != 0:
        raise SystemExit("%s exited %d: %s" % (" ".join(cmd), p.returncode,
                                               errors.decode(errors="replace")))
    return dt, rss, usage.ru_utime + usage.ru_stime


def best(fn):
    runs = [fn() for _ in range(REPEAT)]
    rss = [r[1] for r in runs if r[1] is not None]
    return min(r[0] for r in runs), max(rss) if rss else None


def peer(path, n, script=PEER):
    def once():
        out = subprocess.run([sys.executable, "-c", script, path], check=True,
                             capture_output=True, text=True).stdout.split()
        if int(out[2]) != n:
            raise SystemExit("peer listed %s keys, expected %d" % (out[2], n))
        return float(out[0]), int(out[1])
    return best(once)


MATCH_PEER = r"""
import json, sys, time
t0 = time.perf_counter()
with open(sys.argv[1]) as fh:
    a = {t["name"] for t in json.load(fh)["tensors"]}
with open(sys.argv[1]) as fh:
    b = {t["name"] for t in json.load(fh)["tensors"]}
missing, unexpected = a - b, b - a
print(time.perf_counter() - t0, len(a & b))
"""


def cold(cmd, path):
    """best() of cold runs, and the least CPU time of them: on a loaded
    machine the wall clock counts waiting for a core, CPU time does not."""
    def once():
        evict(path)
        return run_child(cmd)
    runs = [once() for _ in range(REPEAT)]
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def row(case, t, peer_t, rss, hdr, peer_name):
    ratio = "%7.2fx %-10s" % (t / peer_t, peer_name) if peer_t else " " * 19
    rss_s = "%8.1f MiB %6.2f x hdr" % (rss / 2**20, rss / hdr) if rss is not None else ""
    print("  %-22s %9.4f s  %s %s" % (case, t, ratio, rss_s), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="up to 100k tensors")
    ap.add_argument("--ckpt", default=os.path.join(HERE, "..", "build", "ckpt"))
    ap.add_argument("--format", choices=("safetensors", "pt"), default="safetensors")
    args = ap.parse_args()
    pt = args.format == "pt"
    counts = ([] if pt else [1000]) + [10000, 100000] + ([] if args.quick else [1000000])
    empty = "/tmp/ckpt-bench-headers-%d-empty.safetensors" % os.getpid()
    try:
        make_file(empty, 0)
        st, srss = best(lambda: run_child([args.ckpt, "inspect", empty]))
    finally:
        os.unlink(empty)
    print("ckpt startup (inspect of an empty file): %.4f s, %.1f MiB peak RSS"
          % (st, srss / 2**20))
    for n in counts:
        path = "/tmp/ckpt-bench-headers-%d-%d.%s" % (os.getpid(), n, args.format)
        manifest = path + ".json"
        try:
            hdr = (make_pt if pt else make_file)(path, n)
            print("%d tensors, %s %d bytes (%.1f MiB), file %d bytes" % (
                n, "data.pkl" if pt else "header", hdr, hdr / 2**20, os.path.getsize(path)))
            peer_t, prss = peer(path, n, PEER_PT if pt else PEER)
            row("peer torch.load" if pt else "peer safe_open keys", peer_t, None, prss, hdr, "")
            for c in ("inspect", "verify", "doctor"):
                t, rss = best(lambda c=c: run_child([args.ckpt, c, path]))
                row(c, t, peer_t, rss, hdr, "peer")
            with open(manifest, "w") as fh:
                subprocess.run([args.ckpt, "inspect", "--json", path], stdout=fh, check=True)

            def match_peer():
                out = subprocess.run([sys.executable, "-c", MATCH_PEER, manifest], check=True,
                                     capture_output=True, text=True).stdout.split()
                return float(out[0]), None
            mt, _ = best(match_peer)
            row("python json + sets", mt, None, None, hdr, "")
            t, rss = best(lambda: run_child([args.ckpt, "match", manifest, "--expect", manifest]))
            row("match (manifest)", t, mt, rss, hdr, "json+sets")
            ct, _, ccpu = cold(["cat", path], path)
            row("cat (cold)", ct, None, None, hdr, "")
            for c in ("inspect", "verify"):
                t, rss, cpu = cold([args.ckpt, c, path], path)
                row(c + " (cold)", t, ct, rss, hdr, "cold cat")
                print("  %-22s %9.4f s  %7.2fx cat's (%.4f s)" % (
                    c + " (cold, CPU)", cpu, cpu / ccpu, ccpu), flush=True)
        finally:
            for p in (path, manifest):
                if os.path.exists(p):
                    os.unlink(p)


if __name__ == "__main__":
    main()
