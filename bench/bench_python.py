#!/usr/bin/python3
"""Python load benchmark: ckpt.load against its peers, side by side, one run.

Usage: CKPT_LIB=build/libckpt.so PYTHONPATH=python .venv/bin/python bench/bench_python.py
           [--quick] [--runs 3] [--dir /tmp/ckpt-bench-py] [--keep]

Cases (inputs written by ckpt.save, as .safetensors and .pt):
  tensor counts  1k, 10k, 100k float32 tensors of 16 elements (per-tensor
                 cost: the files are a few MiB)
  file sizes     64 MiB, 1 GiB in 16 float32 tensors (bytes moved)
--quick: 1k, 10k and 64 MiB only (a few minutes); --counts and --sizes
(comma-separated) choose others.

Each case is loaded warm (page cache filled first) and cold (the file
dropped from the page cache with posix_fadvise(DONTNEED) before each run),
each loader in a fresh process: the median of --runs runs, and the peak RSS
the loads added to the process. Pairs, ckpt first, ratio = ckpt / peer
(below 1.00: ckpt is faster), like with like: a load into private memory
against one, a mapped load against a mapped one:
  .safetensors   ckpt.load            load_file, then a clone of each tensor
  .safetensors   ckpt.load(mmap=True) safetensors.torch.load_file (it maps
                                      the file, MAP_PRIVATE, lazily)
  .pt            ckpt.load            torch.load
  .pt mmap       ckpt.load(mmap=True) torch.load(mmap=True)
and, for the sizes, `read`: the file read into one reused 8 MiB buffer, the
floor for anything that looks at every byte. ckpt.load's default reads
every tensor into private memory, while load_file and mmap=True map the
file and read a page when it is first touched: so at the sizes every load
is timed together with a touch of every page of every tensor; at the
counts the load alone is timed (the bytes are negligible there). Warm, a
mapped load costs page-table entries only, a copying one the copy into
fresh memory (on a VM, first-touch faults dominate that): compare copying
loads with copying loads.
The machine may be shared and noisy: read the ratios.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

from pagecache import evict

COUNTS = [1000, 10000, 100000]
SIZES_MIB = [64, 1024]
PAIRS = [(".safetensors", "ckpt.load", "load_file+copy"),
         (".safetensors", "ckpt.load(mmap)", "load_file"),
         (".pt", "ckpt.load", "torch.load"),
         (".pt", "ckpt.load(mmap)", "torch.load(mmap)")]


def loaders():
    import torch
    import safetensors.torch
    import ckpt
    return {
        "ckpt.load": ckpt.load,
        "ckpt.load(mmap)": lambda p: ckpt.load(p, mmap=True),
        "load_file": safetensors.torch.load_file,
        "load_file+copy": lambda p: {k: v.clone()
                                     for k, v in safetensors.torch.load_file(p).items()},
        "torch.load": torch.load,
        "torch.load(mmap)": lambda p: torch.load(p, mmap=True),
    }


def touch_all(obj):
    """Reads one element of every 4 KiB page of every tensor: what a lazy
    (mapped) load defers to first use, without the arithmetic of a sum
    that would dwarf it on a loaded machine."""
    import torch
    total, stack = 0.0, [obj]
    while stack:
        o = stack.pop()
        # in the file's order, the way first use (load_state_dict) walks
        # it: popped from the end, so pushed reversed
        if isinstance(o, dict):
            stack.extend(reversed(list(o.values())))
        elif isinstance(o, (list, tuple)):
            stack.extend(reversed(o))
        elif isinstance(o, torch.Tensor) and o.numel():
            flat = o.reshape(-1)
            total += float(flat[::max(1, 4096 // flat.element_size())].sum())
    return total


def read_file(path, buf):
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


def status_kib(field):
    """A /proc/self/status field in KiB (VmRSS, VmHWM). Not ru_maxrss: Linux
    carries that across exec from the parent, which built the state dict."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(loader, path, cold, runs, touch):
    """Runs in a fresh process: prints {"time": median s, "peak_mib": MiB}."""
    if loader == "read":
        buf = bytearray(8 << 20)
        fn = lambda p: read_file(p, buf)  # noqa: E731
    else:
        fn = loaders()[loader]
    base = status_kib("VmRSS")
    times = []
    for _ in range(runs):
        if cold:
            evict(path)
        gc.collect()
        t0 = time.perf_counter()
        obj = fn(path)
        if touch and obj is not None:
            touch_all(obj)
        times.append(time.perf_counter() - t0)
        del obj
    peak = status_kib("VmHWM") - base
    print(json.dumps({"time": statistics.median(times), "peak_mib": max(peak, 0) / 1024}))


def measure(loader, path, cold, runs, touch):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", loader, path,
           str(int(cold)), str(runs), str(int(touch))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def make_files(d, name, sd):
    import ckpt
    paths = {}
    for ext in (".safetensors", ".pt"):
        paths[ext] = os.path.join(d, name + ext)
        if not os.path.exists(paths[ext]):
            ckpt.save(sd, paths[ext])
    return paths


def cases(args):
    import torch
    torch.manual_seed(0)
    counts = COUNTS[:2] if args.quick else COUNTS
    sizes = SIZES_MIB[:1] if args.quick else SIZES_MIB
    if args.counts is not None:
        counts = [int(x) for x in args.counts.split(",") if x]
    if args.sizes is not None:
        sizes = [int(x) for x in args.sizes.split(",") if x]
    for n in counts:
        label = "%dk tensors" % (n // 1000) if n >= 1000 else "%d tensors" % n
        yield label, False, lambda n=n: {"layers.%d.weight" % i: torch.randn(16)
                                         for i in range(n)}, "n%d" % n
    for mib in sizes:
        per = mib * (1 << 20) // 16 // 4
        yield "%d MiB" % mib if mib < 1024 else "%d GiB" % (mib // 1024), True, \
            lambda per=per: {"layers.%d.weight" % i: torch.randn(per) for i in range(16)}, \
            "s%d" % mib


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        loader, path, cold, runs, touch = sys.argv[2:7]
        child(loader, path, cold == "1", int(runs), touch == "1")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/ckpt-bench-py")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--counts", help="tensor counts, e.g. 1000,100000 (\"\": none)")
    ap.add_argument("--sizes", help="file sizes in MiB, e.g. 64,1024 (\"\": none)")
    args = ap.parse_args()
    import torch
    import safetensors
    os.makedirs(args.dir, exist_ok=True)
    made = []
    print("torch %s, safetensors %s, median of %d runs, each loader in a fresh process; "
          "ratio = ckpt / peer" % (torch.__version__, safetensors.__version__, args.runs))
    print("%-12s %-5s %-22s %9s %9s %7s %10s %10s" % (
        "case", "cache", "file: ckpt vs peer", "ckpt s", "peer s", "ratio", "ckpt MiB", "peer MiB"))
    try:
        for label, touch, build, name in cases(args):
            sd = build()
            paths = make_files(args.dir, name, sd)
            made.extend(paths.values())
            del sd
            gc.collect()
            for cold in (False, True):
                cache = "cold" if cold else "warm"
                if not cold:
                    for p in paths.values():
                        subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)
                if touch:
                    r = measure("read", paths[".safetensors"], cold, args.runs, False)
                    print("%-12s %-5s %-22s %9.3f" % (label, cache, "read (floor)", r["time"]))
                for ext, ours, peer in PAIRS:
                    a = measure(ours, paths[ext], cold, args.runs, touch)
                    b = measure(peer, paths[ext], cold, args.runs, touch)
                    what = "%s %s" % (ext, "mmap" if "mmap" in ours else "")
                    print("%-12s %-5s %-22s %9.3f %9.3f %6.2fx %10.0f %10.0f" % (
                        label, cache, what.strip(), a["time"], b["time"], a["time"] / b["time"],
                        a["peak_mib"], b["peak_mib"]), flush=True)
    finally:
        if not args.keep:
            for p in made:
                if os.path.exists(p):
                    os.unlink(p)
            try:
                os.rmdir(args.dir)
            except OSError:  # not empty: not only ours
                pass


if __name__ == "__main__":
    main()
