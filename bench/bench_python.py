#!/usr/bin/python3
"""Python binding benchmark: ckpt.load against torch.load, one run.

Usage: CKPT_LIB=build/libckpt.so PYTHONPATH=python bench/bench_python.py [--mb 1024] [--dir /tmp/ckpt-bench-py] [--keep]

Writes a checkpoint of about MB MiB with torch.save (16 float32 tensors) and
its safetensors twin (ckpt.save), warms the page cache, then reports the
median of 3 runs of each, every run touching every tensor (a sum of each):
  read          the file read into one reused buffer (the page-cache read
                time: the floor for any loader that looks at every byte)
  ckpt.load .safetensors + sums      target: close to `read` (private
                                     copies, read with pread)
  ckpt.load .pt + sums
  ckpt.load(mmap=True) .pt + sums    zero-copy views of the mapping
  torch.load .pt + sums              (mmap=True too on torch >= 2.1)
and the ratios torch.load / ckpt.load for both files. The files are removed
afterwards unless --keep. The machine is shared and noisy: read the ratios.
"""
import argparse
import gc
import os
import statistics
import subprocess
import time

import torch

import ckpt


def median(fn, n=3):
    times = []
    for _ in range(n):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def touch_all(obj):
    """Sums every tensor (reads every byte) and returns the total."""
    total = 0.0
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, torch.Tensor) and o.is_floating_point():
            total += float(o.sum())
    return total


def read_file(path, buf):
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dir", default="/tmp/ckpt-bench-py")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    pt = os.path.join(args.dir, "big.pt")
    st = os.path.join(args.dir, "big.safetensors")
    try:
        per = max(1, args.mb // 16) * (1 << 20) // 4
        torch.manual_seed(0)
        sd = {"layer%d.weight" % i: torch.randn(per) for i in range(16)}
        torch.save(sd, pt)
        ckpt.save(sd, st)
        want = touch_all(sd)
        del sd
        for p in (pt, st):  # warm page cache, as for any repeated load
            subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)
        buf = bytearray(8 << 20)
        t_read = median(lambda: read_file(st, buf))
        assert abs(touch_all(ckpt.load(st)) - want) < 1e-3 * max(1.0, abs(want))
        assert abs(touch_all(ckpt.load(pt)) - want) < 1e-3 * max(1.0, abs(want))
        t_ck_st = median(lambda: touch_all(ckpt.load(st)))
        t_ck_pt = median(lambda: touch_all(ckpt.load(pt)))
        t_ck_mmap = median(lambda: touch_all(ckpt.load(pt, mmap=True)))
        t_torch = median(lambda: touch_all(torch.load(pt)))
        has_mmap = "mmap" in torch.load.__code__.co_varnames
        t_torch_mmap = median(lambda: touch_all(torch.load(pt, mmap=True))) if has_mmap else None
        size = os.path.getsize(pt) / (1 << 20)
        print("file: %.0f MiB (.pt), %.0f MiB (.safetensors); torch %s" % (
            size, os.path.getsize(st) / (1 << 20), torch.__version__))
        print("%-36s %8.3f s" % ("read (page cache)", t_read))
        print("%-36s %8.3f s" % ("ckpt.load .safetensors + sums", t_ck_st))
        print("%-36s %8.3f s" % ("ckpt.load .pt + sums", t_ck_pt))
        print("%-36s %8.3f s" % ("ckpt.load(mmap=True) .pt + sums", t_ck_mmap))
        print("%-36s %8.3f s" % ("torch.load .pt + sums", t_torch))
        if t_torch_mmap is not None:
            print("%-36s %8.3f s" % ("torch.load(mmap=True) .pt + sums", t_torch_mmap))
        print("ratio torch.load(.pt) / ckpt.load(.safetensors): %.2fx" % (t_torch / t_ck_st))
        print("ratio torch.load(.pt) / ckpt.load(.pt):          %.2fx" % (t_torch / t_ck_pt))
        print("ratio ckpt.load(.safetensors) / read:            %.2fx" % (t_ck_st / t_read))
        if t_torch_mmap is not None:
            print("ratio torch.load(.pt, mmap) / ckpt.load(.pt):    %.2fx" % (t_torch_mmap / t_ck_pt))
    finally:
        if not args.keep:
            for p in (pt, st):
                if os.path.exists(p):
                    os.unlink(p)
            try:
                os.rmdir(args.dir)
            except OSError:  # not empty: not only ours
                pass


if __name__ == "__main__":
    main()
