#!/usr/bin/python3
"""Times `ckpt doctor` step by step on a ~1 GiB training checkpoint, next to
torch.load of the same file in the same run.

usage: cd /tmp && /usr/bin/python3 /path/to/ckpt/bench/bench_doctor.py \\
           [CKPT_BIN] [--mib N]

Writes /tmp/ckpt-bench-doctor-PID.pt (a model of fp32 Linear layers, one real
Adam step, StepLR, epoch/step; model + optimizer state about N MiB, default
1024) and deletes it afterwards. Then, warm page cache, best of 3:
  - torch.load(weights_only=False) of the file (the reference);
  - `ckpt verify FILE` (reads every byte and checks CRC-32s);
  - `ckpt inspect --summary FILE` (components, ratio, resume readiness);
  - `ckpt doctor FILE` with CKPT_DOCTOR_TIMINGS=1, which prints the seconds
    of each step (open, verify, summary, training analysis, each section).
And, with the file's pages dropped from the page cache first
(posix_fadvise DONTNEED on this file only), the bytes each command read from
disk (getrusage ru_inblock of the child): the summary reads the zip
directory and the pickle, not the tensors. Prints ratios against torch.load;
asserts nothing about time.

Run with Debian's python3 (torch 1.13) from a directory without a folder
named "torch". CKPT_BIN defaults to ./build/ckpt of the repository.
"""
import os
import resource
import subprocess
import sys
import time

import torch
import torch.nn as nn

from pagecache import evict

HERE = os.path.dirname(os.path.abspath(__file__))
REPEAT = 3


def make_checkpoint(path, mib):
    # Adam keeps two fp32 moments per parameter: model + state = 3x model.
    width = 2048
    layer_bytes = width * width * 4
    layers = max(1, int(mib * 2**20 / 3 / layer_bytes))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    model(torch.randn(4, width)).sum().backward()
    opt.step()
    sched.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "epoch": 1, "step": 1}, path)
    return layers


def timed(fn):
    best = None
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, out


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, env=env)
    if p.returncode not in (0, 1):
        raise SystemExit("%s failed: %s" % (" ".join(cmd), p.stderr.decode()))
    return p


def disk_bytes(cmd, path):
    """Bytes a command reads from disk with the file out of the cache."""
    evict(path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock
    run(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock
    return (after - before) * 512


def main():
    args = [a for a in sys.argv[1:]]
    mib = 1024
    if "--mib" in args:
        i = args.index("--mib")
        mib = int(args[i + 1])
        del args[i:i + 2]
    ckpt = args[0] if args else os.path.join(os.path.dirname(HERE), "build",
                                             "ckpt")
    path = "/tmp/ckpt-bench-doctor-%d.pt" % os.getpid()
    try:
        layers = make_checkpoint(path, mib)
        size = os.path.getsize(path)
        print("file: %d layers of Linear(2048, 2048) + Adam, %.1f MiB"
              % (layers, size / 2**20))
        t_torch, _ = timed(lambda: torch.load(path))
        t_verify, _ = timed(lambda: run([ckpt, "verify", path]))
        t_summary, _ = timed(lambda: run([ckpt, "inspect", "--summary",
                                          path]))
        env = dict(os.environ, CKPT_DOCTOR_TIMINGS="1")
        t_doctor, p = timed(lambda: run([ckpt, "doctor", path], env=env))
        print("\nwarm cache, best of %d:" % REPEAT)
        print("  %-24s %8.3f s" % ("torch.load", t_torch))
        for name, t in (("ckpt verify", t_verify),
                        ("ckpt inspect --summary", t_summary),
                        ("ckpt doctor", t_doctor)):
            print("  %-24s %8.3f s  (%.3fx torch.load)"
                  % (name, t, t / t_torch))
        print("\nckpt doctor steps (CKPT_DOCTOR_TIMINGS, last run):")
        steps = [l.split() for l in p.stderr.decode().splitlines()
                 if l.startswith("ckpt doctor: ")]
        total = sum(float(s[-2]) for s in steps)
        for s in steps:
            secs = float(s[-2])
            print("  %-16s %9.6f s  %5.1f%%" % (" ".join(s[2:-2]), secs,
                                                100 * secs / total))
        print("\ndisk reads with the file dropped from the page cache:")
        for name, cmd in (("ckpt inspect --summary",
                           [ckpt, "inspect", "--summary", path]),
                          ("ckpt verify", [ckpt, "verify", path])):
            b = disk_bytes(cmd, path)
            print("  %-24s %12d bytes  (%.4f of the file)"
                  % (name, b, b / size))
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
