#!/usr/bin/python3
"""Reader benchmark: ckpt inspect/verify side by side with PyTorch, one run.

Usage: bench/bench_read.py [--mb 1024] [--quick] [--ckpt build/ckpt] [--dir /tmp/ckpt-bench]

Writes a checkpoint of about MB MiB with torch.save (16 float32 tensors plus a
small optimizer-like dict) and its safetensors twin, warms the page cache, then
reports the median of 3 runs of each and the ratios the reader issue asks for:
  inspect (O(header))  vs torch.load                  target: >= 100x faster
  verify .pt (warm)    vs torch.load(weights_only)    target: >= 5x faster
  verify .pt           vs cat FILE > /dev/null         target: <= 2x
  peak RSS of inspect / verify                         target: < 64 MiB + header
  verify, cold page cache, vs cat cold                 target: <= 1.5x
  inspect --hash sha256 vs sha256sum; its peak RSS     target: independent of size
  diff A A (a copy) / diff A B (changed) vs cmp A A    target: <= 1.2x, RSS bounded
Cold: the file's pages are dropped first with posix_fadvise(DONTNEED) after
sync (no root needed; `fincore FILE` shows 0 afterwards). --quick: 64 MiB.
The machine is shared and noisy: read the ratios, not the absolute times.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

import torch

from pagecache import evict


# A child forked from this process starts with its resident set (torch and
# the tensors), which would inflate its peak RSS; so children are started
# from a small launcher process that times them and reports their own peak.
LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(time.perf_counter() - t0, ru.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run_child(argv, ok=(0,)):
    """Runs argv, returns (seconds, peak RSS in MiB) of that child alone."""
    out = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv],
                         capture_output=True, text=True, check=True).stdout.split()
    if int(out[2]) not in ok:
        sys.exit(f"failed: {' '.join(argv)}")
    return float(out[0]), int(out[1]) / 1024.0


def median_child(argv, n=3, ok=(0,)):
    runs = [run_child(argv, ok) for _ in range(n)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def median_py(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make_files(d, mb):
    os.makedirs(d, exist_ok=True)
    pt, st = os.path.join(d, "big.pt"), os.path.join(d, "big.safetensors")
    per = max(1, mb // 16) * (1 << 20) // 4
    if os.path.exists(pt) and abs(os.path.getsize(pt) - mb * (1 << 20)) < (8 << 20):
        return pt, st
    torch.manual_seed(0)
    sd = {f"layer{i}.weight": torch.randn(per) for i in range(16)}
    sd["step"] = torch.tensor(5)
    # no float values: torch 1.13's weights_only unpickler has no BINFLOAT
    torch.save({"model": sd, "epoch": 3, "name": "bench"}, pt)
    # safetensors twin written by a plain writer following the spec
    names = sorted(sd)
    header, off = {}, 0
    for k in names:
        n = sd[k].numel() * sd[k].element_size()
        header[k] = {"dtype": "F32" if sd[k].dtype == torch.float32 else "I64",
                     "shape": list(sd[k].shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for k in names:
            f.write(sd[k].numpy().tobytes())
    return pt, st


def median_cold(argv, path, n=3):
    runs = []
    for _ in range(n):
        evict(path)
        runs.append(run_child(argv))
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def changed_copy(src, dst):
    """dst: src with one byte flipped in the middle of its largest member
    (a tensor's data, far from any header)."""
    import shutil
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(os.path.getsize(dst) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=int(os.environ.get("CKPT_BENCH_MB", "1024")))
    ap.add_argument("--quick", action="store_true", help="a 64 MiB checkpoint")
    ap.add_argument("--ckpt", default=os.path.join(os.path.dirname(__file__), "..", "build", "ckpt"))
    ap.add_argument("--dir", default="/tmp/ckpt-bench")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    a = ap.parse_args()
    if a.quick:
        a.mb = 64
    pt, st = make_files(a.dir, a.mb)
    size = os.path.getsize(pt)
    for p in (pt, st):  # warm page cache
        subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)

    rows = []
    t_cat, _ = median_child(["/bin/cat", pt])
    t_ins, rss_ins = median_child([a.ckpt, "inspect", "--json", pt])
    t_ver, rss_ver = median_child([a.ckpt, "verify", pt])
    t_ver_st, rss_ver_st = median_child([a.ckpt, "verify", st])
    t_ins_st, rss_ins_st = median_child([a.ckpt, "inspect", "--json", st])
    t_cat_cold, _ = median_cold(["/bin/cat", pt], pt)
    t_ver_cold, rss_ver_cold = median_cold([a.ckpt, "verify", pt], pt)
    t_ver_st_cold, _ = median_cold([a.ckpt, "verify", st], st)
    subprocess.run(["cat", pt, st], stdout=subprocess.DEVNULL, check=True)
    t_sha, _ = median_child(["/usr/bin/sha256sum", pt])
    t_hash, rss_hash = median_child([a.ckpt, "inspect", "--hash", "sha256", pt])
    copy, changed = pt + ".copy.pt", pt + ".changed.pt"
    import shutil
    shutil.copyfile(pt, copy)
    changed_copy(pt, changed)
    t_cmp, _ = median_child(["/usr/bin/cmp", pt, copy])
    t_diff_same, rss_diff_same = median_child([a.ckpt, "diff", pt, copy])
    t_diff, rss_diff = median_child([a.ckpt, "diff", pt, changed], ok=(1,))
    for p in (copy, changed):
        os.unlink(p)
    t_load = median_py(lambda: torch.load(pt))
    t_load_wo = median_py(lambda: torch.load(pt, weights_only=True))

    print(f"file: {pt} ({size / 2**20:.0f} MiB), torch {torch.__version__}")
    print(f"{'what':44} {'seconds':>9}  {'peak RSS MiB':>12}")
    for name, t, rss in [
        ("cat FILE > /dev/null (warm)", t_cat, None),
        ("torch.load", t_load, None),
        ("torch.load(weights_only=True)", t_load_wo, None),
        ("ckpt inspect --json (.pt)", t_ins, rss_ins),
        ("ckpt inspect --json (.safetensors)", t_ins_st, rss_ins_st),
        ("ckpt verify (.pt: every member CRC-32)", t_ver, rss_ver),
        ("ckpt verify (.safetensors: every byte)", t_ver_st, rss_ver_st),
        ("cat FILE > /dev/null (cold)", t_cat_cold, None),
        ("ckpt verify (.pt, cold)", t_ver_cold, rss_ver_cold),
        ("ckpt verify (.safetensors, cold)", t_ver_st_cold, None),
        ("sha256sum FILE", t_sha, None),
        ("ckpt inspect --hash sha256", t_hash, rss_hash),
        ("cmp A copy-of-A", t_cmp, None),
        ("ckpt diff A copy-of-A", t_diff_same, rss_diff_same),
        ("ckpt diff A B (one byte changed)", t_diff, rss_diff),
    ]:
        print(f"{name:44} {t:9.4f}  {'' if rss is None else f'{rss:12.1f}'}")
    print()
    print(f"inspect speedup over torch.load:                 {t_load / t_ins:8.1f}x  (target >= 100x)")
    print(f"verify speedup over torch.load(weights_only):    {t_load_wo / t_ver:8.1f}x  (target >= 5x)")
    print(f"verify time / cat time:                          {t_ver / t_cat:8.2f}   (target <= 2)")
    print(f"verify throughput:                               {size / t_ver / 1e9:8.2f} GB/s")
    print(f"peak RSS inspect / verify:                       {rss_ins:.1f} / {rss_ver:.1f} MiB (target < 64 MiB + header)")
    print(f"verify cold / cat cold (.pt, .safetensors):      {t_ver_cold / t_cat_cold:8.2f} {t_ver_st_cold / t_cat_cold:8.2f}   (target <= 1.5)")
    print(f"inspect --hash sha256 / sha256sum:               {t_hash / t_sha:8.2f}   peak RSS {rss_hash:.1f} MiB (target: independent of size)")
    print(f"diff A copy / cmp, diff A B / cmp:               {t_diff_same / t_cmp:8.2f} {t_diff / t_cmp:8.2f}   peak RSS {max(rss_diff_same, rss_diff):.1f} MiB (target <= 1.2)")
    if not a.keep:
        for p in (pt, st):
            os.unlink(p)


if __name__ == "__main__":
    main()
