#!/usr/bin/env python3
"""Durable, verified save benchmark: ckpt.Store.commit against torch.save.

Usage: bench/bench_store.py [--sizes 64,256,1024] [--runs 3] [--quick]
                            [--dir /tmp/ckpt-bench-store]

For each size (MiB of model + Adam state: a stack of Linear layers, its
parameters a third of the total, exp_avg and exp_avg_sq the rest), in one
run, side by side, the median of --runs runs of:
  baseline        torch.save({"model", "optimizer"}, f), flush, os.fsync,
                  then one sequential read of the file (what a durable save
                  that is read back once costs)
  Store.commit    ckpt's commit of the same dict: written by the C writer
                  into a temporary file, fsync, rename, fsync of the
                  directory, re-read and verified (CRC-32 of every member
                  and XXH3 of every tensor), LATEST moved, pruned (keep 1)
  async_commit    Store.async_commit: the time the training loop waits
                  (snapshot to host memory), then the time until wait()
and the ratios commit / baseline (the goal: at most 1.5x) and
async stall / baseline. --quick: 64 MiB, one run (a smoke test).
The disk and the machine are shared and noisy: read the ratios, not the
absolute times. Files are deleted afterwards.
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ckpt  # noqa: E402

WIDTH = 1024
READ_CHUNK = 16 << 20


def training_state(mib):
    """{"model": ..., "optimizer": ...} of about `mib` MiB (float32)."""
    params = mib * (1 << 20) // 4 // 3
    layers = max(1, params // (WIDTH * WIDTH + WIDTH))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    return model, opt


def read_sequentially(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while os.read(fd, READ_CHUNK):
            pass
    finally:
        os.close(fd)


def median_time(fn, runs):
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(mib, runs, root):
    model, opt = training_state(mib)
    state = lambda: {"model": model.state_dict(), "optimizer": opt.state_dict()}  # noqa: E731
    src = os.path.join(root, "torch.pt")
    store = ckpt.Store(os.path.join(root, "store"), keep=1)
    stalls = []

    def baseline(i):
        with open(src, "wb") as fh:
            torch.save(state(), fh)
            fh.flush()
            os.fsync(fh.fileno())
        read_sequentially(src)

    def commit(i):
        store.commit(state(), 1000 * mib + i)

    def async_commit(i):
        t0 = time.perf_counter()
        store.async_commit(state(), 2000 * mib + i)
        stalls.append(time.perf_counter() - t0)
        store.wait()

    baseline(-1)  # warm-up: allocator, file creation
    commit(-1)
    t_base = median_time(baseline, runs)
    t_commit = median_time(commit, runs)
    t_async = median_time(async_commit, runs)
    size = os.path.getsize(src) / (1 << 20)
    stall = statistics.median(stalls)
    print(f"{mib} MiB state (model + Adam, {size:.0f} MiB file), median of {runs}:")
    print(f"  torch.save + fsync + read  {t_base * 1e3:9.1f} ms  {size / t_base:7.0f} MiB/s")
    print(f"  Store.commit               {t_commit * 1e3:9.1f} ms  {size / t_commit:7.0f} MiB/s"
          "  (atomic, fsync, re-read, verified)")
    print(f"  Store.async_commit stall   {stall * 1e3:9.1f} ms  (then {t_async * 1e3:.1f} ms "
          "until wait() returns)")
    print(f"  ratio commit / baseline:      {t_commit / t_base:.2f}x  (goal <= 1.5x)")
    print(f"  ratio async stall / baseline: {stall / t_base:.2f}x")
    shutil.rmtree(os.path.join(root, "store"), ignore_errors=True)
    os.unlink(src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default="/tmp/ckpt-bench-store")
    args = ap.parse_args()
    sizes = [64] if args.quick else [int(s) for s in args.sizes.split(",")]
    runs = 1 if args.quick else args.runs
    if max(sizes) > 1024:
        sys.exit("--sizes: at most 1024 MiB on this shared machine")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    try:
        for mib in sizes:
            bench(mib, runs, args.dir)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
