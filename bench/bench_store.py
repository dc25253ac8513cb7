#!/usr/bin/python3
"""Durable save benchmark: `ckpt store commit` against torch.save, one run.

Usage: bench/bench_store.py [--mb 256] [--ckpt build/ckpt] [--dir /tmp/ckpt-bench-store]

Builds a state dict of about MB MiB (16 float32 tensors) in memory, then
reports the median of 3 runs of:
  torch.save            torch.save(sd, f): serialised into the page cache,
                        no fsync (what training loops usually do)
  torch.save + fsync    the same, then os.fsync of the file (durable, but
                        neither atomic nor verified) - for context
  ckpt store commit     copy of the torch.save file into a store through
                        the atomic commit (temporary file, fsync, rename,
                        fsync of the directory), page cache dropped, full
                        re-read and verification (zip CRC-32 of every
                        member), LATEST replaced atomically, pruning
and the ratios commit / torch.save and commit / (torch.save + fsync).
The disk and the machine are shared and noisy: read the ratios, not the
absolute times. Files are deleted afterwards.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch


def median_time(fn, n=3):
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--ckpt", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "ckpt"))
    ap.add_argument("--dir", default="/tmp/ckpt-bench-store")
    args = ap.parse_args()
    if args.mb > 1024:
        sys.exit("--mb: at most 1024 on this shared machine")
    ckpt = os.path.abspath(args.ckpt)
    if not os.access(ckpt, os.X_OK):
        sys.exit(f"no ckpt binary at {ckpt} (use --ckpt)")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    os.chdir(args.dir)  # not a cwd with a folder named torch
    store = os.path.join(args.dir, "store")
    os.makedirs(store)
    try:
        per = max(1, args.mb // 16) * (1 << 20) // 4
        torch.manual_seed(0)
        sd = {f"layer{i}.weight": torch.randn(per) for i in range(16)}
        src = os.path.join(args.dir, "src.pt")

        def save(i):
            torch.save(sd, src)

        def save_fsync(i):
            with open(src, "wb") as fh:
                torch.save(sd, fh)
                fh.flush()
                os.fsync(fh.fileno())

        def commit(i):
            subprocess.run([ckpt, "store", "commit", store, "--name", "bench", "--step",
                            str(i), "--keep", "1", src], check=True, stdout=subprocess.DEVNULL)

        save(0)  # warm-up: allocator, file creation
        t_save = median_time(save)
        t_fsync = median_time(save_fsync)
        commit(100)  # warm-up: binary in cache
        t_commit = median_time(commit)
        mib = os.path.getsize(src) / (1 << 20)
        print(f"checkpoint: {mib:.0f} MiB torch zip (16 float32 tensors), median of 3")
        print(f"  torch.save (no fsync)      {t_save * 1e3:9.1f} ms  {mib / t_save:8.0f} MiB/s")
        print(f"  torch.save + fsync         {t_fsync * 1e3:9.1f} ms  {mib / t_fsync:8.0f} MiB/s")
        print(f"  ckpt store commit          {t_commit * 1e3:9.1f} ms  {mib / t_commit:8.0f} MiB/s"
              "  (atomic, fsync, re-read, verified)")
        print(f"ratio commit / torch.save:          {t_commit / t_save:.2f}x")
        print(f"ratio commit / (torch.save + fsync): {t_commit / t_fsync:.2f}x")
    finally:
        os.chdir("/")
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
