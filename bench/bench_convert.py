#!/usr/bin/python3
"""ckpt convert against cp and PyTorch, in one run.

    /usr/bin/python3 bench/bench_convert.py [--gib N[,N...]] [--runs R] [--quick] [--ckpt BIN]

For each size, writes a torch.save checkpoint of N GiB (default 1: 16
float32 tensors and a few values; --gib 0.0625,1,4 for the issue's three
sizes) to a temporary directory under /tmp, then times R rounds (default
5) of, alternating, each with the input read first so that every command
finds it equally warm in the page cache:
  cp         cp IN OUT (not durable: the data is still in the page cache)
  cp+fsync   cp, then fsync of OUT and of its directory (coreutils sync):
             the durability work of ckpt's atomic commit, and no
             interpreter start (a Python peer paid 60-80 ms of it at
             64 MiB and skipped the directory fsync)
  convert    ckpt convert IN OUT.safetensors (atomic: temp file, fsync,
             rename, directory fsync; XXH3-64 of every tensor)
  to .pt     ckpt convert IN OUT.pt (the same, zip writer with CRC-32)
  st to .pt  ckpt convert of convert's output back to OUT.pt (safetensors
             in, its ckpt.structure rebuilding the tree)
  torch      what PyTorch offers: torch.load, then the tensors written as
             safetensors by a plain Python writer, fsync
Every output is removed and os.sync() called between runs, so no run pays
for another's writeback. Prints the median seconds, the peak RSS of each
command (GNU time's %M; ckpt's also sampled as RssAnon, its
anonymous memory: the tensors stream from the input mapping, whose pages
are released as they are written, so neither grows with the file), and the
ratios of wall and of CPU (user + system) time. ckpt reads every byte of
its output back before the rename, while the pages are still cached, and
drops written windows behind (src/container/atomic.h), so its output does
not evict the input at sizes near free memory. The machine is shared:
medians of alternating runs, and CPU time, which load disturbs less; run
it on a quiet machine for stable wall times. cp is not durable: a durable
write cannot beat the disk, so cp+fsync is the fair baseline for an
atomic commit, cp the one the issue names (goal: convert at most 1.1x
cp+fsync at every size: run --gib 0.0625, 1 and 4). --quick: 64 MiB, 3
runs. Files are deleted at the end. Nothing here asserts a time.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

TORCH_CONVERT = r"""
import json, os, struct, sys, torch
src, dst = sys.argv[1], sys.argv[2]
sd = torch.load(src)
items = sorted(((k, v) for k, v in sd.items() if isinstance(v, torch.Tensor)),
               key=lambda kv: kv[0])
header, off = {}, 0
for k, v in items:
    n = v.numel() * v.element_size()
    header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + n]}
    off += n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for k, v in items:
        f.write(v.contiguous().numpy().tobytes())
    f.flush()
    os.fsync(f.fileno())
"""


def make_source(path, gib):
    code = ("import torch, sys\n"
            "n = int(float(sys.argv[2]) * (1 << 30)) // 16 // 4\n"
            "sd = {'layer%02d.weight' % i: torch.arange(n, dtype=torch.float32) * (i + 1)"
            " for i in range(16)}\n"
            "sd['epoch'] = 3\n"
            "torch.save(sd, sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, path, str(gib)], check=True,
                   cwd=os.path.dirname(path))


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


class AnonSampler(threading.Thread):
    """Peak RssAnon of a running process, sampled every 2 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, False

    def run(self):
        while not self.done:
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            self.peak = max(self.peak, int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.002)


TIME = "/usr/bin/time"


def timed(argv, tmp, sample=False):
    """(wall s, cpu s, peak RSS KiB, peak anonymous RSS KiB or None). GNU
    time measures the command: rusage of a child forked from this Python
    process would count its pages."""
    os.sync()
    report = os.path.join(tmp, "time.txt")
    t0 = time.perf_counter()
    p = subprocess.Popen([TIME, "-f", "%U %S %M", "-o", report] + argv,
                         stdout=subprocess.DEVNULL)
    sampler = None
    if sample:  # the command is time's child
        time.sleep(0.01)
        kids = open("/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split()
        if kids:
            sampler = AnonSampler(int(kids[0]))
            sampler.start()
    # CPU time from the rusage of time's children (the command), in
    # microseconds: time's own %U %S have 10 ms steps, a 64 MiB convert
    # costs a few of them
    _, status, usage = os.wait4(p.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    if sampler:
        sampler.done = True
        sampler.join()
    if rc != 0:
        raise RuntimeError("%s failed" % argv)
    rss = open(report).read().split()[-1]
    return dt, usage.ru_utime + usage.ru_stime, int(rss), sampler.peak if sampler else None


def cp_fsync(src, dst):
    """The work of an atomic commit without its checks: the copy, fsync of
    the file and of its directory (coreutils sync with arguments fsyncs
    each), no interpreter start on either side."""
    return ["sh", "-c", 'cp "$1" "$2" && sync "$2" "$3"', "sh", src, dst,
            os.path.dirname(os.path.abspath(dst))]


def one_size(args, gib):
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-convert-", dir="/tmp")
    try:
        src = os.path.join(tmp, "model.pt")
        make_source(src, gib)
        size = os.path.getsize(src)
        out = os.path.join(tmp, "out")
        st = os.path.join(tmp, "model.safetensors")  # the way back's input
        subprocess.run([args.ckpt, "convert", src, st], check=True, stdout=subprocess.DEVNULL)
        cases = [
            ("cp", lambda: ["cp", src, out], False),
            ("cp+fsync", lambda: cp_fsync(src, out), False),
            ("convert", lambda: [args.ckpt, "convert", src, out + ".safetensors"], True),
            ("to .pt", lambda: [args.ckpt, "convert", src, out + ".pt"], True),
            ("st to .pt", lambda: [args.ckpt, "convert", st, out + ".pt"], True),
            ("torch", lambda: [sys.executable, "-c", TORCH_CONVERT, src, out], False),
        ]
        results = {name: [] for name, _, _ in cases}
        for r in range(args.runs):
            for name, argv, sample in cases:
                warm(st if name == "st to .pt" else src)
                results[name].append(timed(argv(), tmp, sample))
                for suffix in ("", ".safetensors", ".pt"):
                    if os.path.exists(out + suffix):
                        os.unlink(out + suffix)
        # the outputs are right (not timed)
        subprocess.run([args.ckpt, "convert", src, out + ".safetensors"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([args.ckpt, "verify", out + ".safetensors"], check=True,
                       stdout=subprocess.DEVNULL)
        print("input: %s, %.2f GiB torch.save, page cache warm; %d runs, medians"
              % (os.path.basename(src), size / (1 << 30), args.runs))
        med, cpu = {}, {}
        for name, _, _ in cases:
            rows = results[name]
            med[name] = statistics.median(r[0] for r in rows)
            cpu[name] = statistics.median(r[1] for r in rows)
            peak = max(r[2] for r in rows)
            anon = [r[3] for r in rows if r[3] is not None]
            print("  %-9s %7.3f s wall %6.3f s cpu %6.0f MiB/s  peak RSS %7.1f MiB%s" % (
                name, med[name], cpu[name], size / (1 << 20) / med[name], peak / 1024,
                "  (anonymous %.1f MiB)" % (max(anon) / 1024) if anon else ""))
        print("ratios, wall (cpu), lower is better:")
        for name in ("convert", "to .pt", "st to .pt"):
            print("  %-9s / cp %.2f (%.2f)   / cp+fsync %.2f (%.2f)   / torch %.2f (%.2f)" % (
                name, med[name] / med["cp"], cpu[name] / max(cpu["cp"], 1e-3),
                med[name] / med["cp+fsync"], cpu[name] / max(cpu["cp+fsync"], 1e-3),
                med[name] / med["torch"], cpu[name] / cpu["torch"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", default="1", help="sizes in GiB, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ckpt", default=os.environ.get("CKPT_BIN", "ckpt"))
    ap.add_argument("--quick", action="store_true", help="64 MiB, 3 runs")
    args = ap.parse_args()
    if args.quick:
        args.gib, args.runs = "0.0625", 3
    for gib in (float(g) for g in args.gib.split(",") if g):
        one_size(args, gib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
