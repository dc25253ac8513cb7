#!/usr/bin/env python3
"""DCP directories: ckpt's C reader against torch.distributed.checkpoint.

usage: .venv/bin/python bench/bench_dcp.py [--mib N] [--quick] [--ckpt BIN]

Writes /tmp/ckpt-bench-dcp-PID/{torch_save,safetensors} with dcp.save
(FileSystemWriter, one process, 16 float32 tensors, N MiB in all; default
256), deletes them afterwards. Then, warm page cache, best of 3:
  - `ckpt inspect DIR` (whole process, exec included) against
    format_utils.dcp_to_torch_save(DIR, out.pt), which is what a user runs
    to look inside one (timed in-process, interpreter start-up and import
    excluded); goal: >= 100x faster (inspect reads .metadata and the
    headers of every slice, not the tensor bytes);
  - `ckpt verify DIR` (every byte read, every zip CRC-32 checked) against
    `cat DIR/* > /dev/null`; goal: within 2x;
  - `ckpt convert SRC.pt OUT.dcp` (whole process; writes, fsyncs, reads
    back and verifies the directory) against torch.load(SRC.pt) +
    dcp.save(OUT) (FileSystemWriter, which fsyncs too; timed in-process),
    SRC.pt being torch.save of the same state dict; with each one's peak
    RSS (torch's includes the ~0.3 GiB of torch itself).
--quick: 16 MiB. Prints times and ratios. Asserts nothing about time (CI runs no timing
tests).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPEAT = 3

PEER = r"""
import sys, time, warnings
warnings.filterwarnings("ignore")
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
t0 = time.perf_counter()
dcp_to_torch_save(sys.argv[1], sys.argv[2])
print(time.perf_counter() - t0)
"""

# torch.load + dcp.save: what converting a .pt to DCP costs in torch
PEER_CONVERT = r"""
import sys, time, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed.checkpoint as dcp
t0 = time.perf_counter()
dcp.save(torch.load(sys.argv[1], weights_only=True), checkpoint_id=sys.argv[2])
print(time.perf_counter() - t0)
"""

MAKE_PT = r"""
import sys, torch
torch.manual_seed(0)
n = int(sys.argv[2]) * (1 << 20) // 4 // 16
torch.save({f"layer{i}.weight": torch.randn(n // 1024, 1024) for i in range(16)}, sys.argv[1])
"""


def best(fn):
    return min(fn() for _ in range(REPEAT))


def timed(cmd):
    def run():
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t0
    return run


def peer(d, out):
    def run():
        p = subprocess.run([sys.executable, "-c", PEER, d, out], check=True,
                           capture_output=True, text=True)
        return float(p.stdout.split()[-1])
    return run


def measured(cmd, out, in_process):
    """Best of REPEAT runs of cmd (a fresh process each, out removed
    before), and the largest peak RSS (MiB); in_process: the time the
    command prints, else the wall time of the process."""
    times, rss = [], 0
    for _ in range(REPEAT):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        text = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            sys.exit("failed: %s" % " ".join(cmd))
        times.append(float(text.split()[-1]) if in_process else wall)
        rss = max(rss, usage.ru_maxrss // 1024)
    shutil.rmtree(out, ignore_errors=True)
    return min(times), rss


def convert_row(a, tmp):
    src = os.path.join(tmp, "src.pt")
    subprocess.run([sys.executable, "-c", MAKE_PT, src, str(a.mib)], check=True)
    subprocess.run(["cat", src], stdout=subprocess.DEVNULL)  # warm the cache
    out = os.path.join(tmp, "out.dcp")
    t_ckpt, rss_ckpt = measured([a.ckpt, "convert", "-q", src, out], out, False)
    t_peer, rss_peer = measured([sys.executable, "-c", PEER_CONVERT, src, out], out, True)
    print(f"{'.pt -> dcp':<12} {'convert vs torch.load + dcp.save':<34} {t_ckpt:9.4f} "
          f"{t_peer:9.4f} {t_peer / t_ckpt:7.2f}x faster")
    print(f"{'':<12} {'peak RSS, MiB':<34} {rss_ckpt:9d} {rss_peer:9d} "
          f"{rss_peer / max(rss_ckpt, 1):7.1f}x less")
    os.remove(src)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="16 MiB")
    ap.add_argument("--ckpt", default=os.path.join(HERE, "..", "build", "ckpt"))
    a = ap.parse_args()
    if a.quick:
        a.mib = 16
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-dcp-")
    try:
        gen = os.path.join(HERE, "..", "tests", "dcp", "dcp_gen.py")
        print(f"{'format':<12} {'what':<34} {'ckpt':>9} {'peer':>9} {'ratio':>8}")
        for fmt in ("torch_save", "safetensors"):
            d = os.path.join(tmp, fmt)
            subprocess.run([sys.executable, gen, "big", d, fmt, str(a.mib)], check=True)
            files = [os.path.join(d, n) for n in sorted(os.listdir(d))]
            subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL)  # warm the cache
            t_inspect = best(timed([a.ckpt, "inspect", d]))
            t_verify = best(timed([a.ckpt, "verify", d]))
            t_cat = best(timed(["sh", "-c", 'cat "$@" > /dev/null', "cat"] + files))
            if fmt == "torch_save":
                t_peer = best(peer(d, os.path.join(tmp, "out.pt")))
                print(f"{fmt:<12} {'inspect vs dcp_to_torch_save':<34} {t_inspect:9.4f} "
                      f"{t_peer:9.4f} {t_peer / t_inspect:7.0f}x faster")
            else:  # FileSystemReader cannot read this format
                print(f"{fmt:<12} {'inspect (no DCP reader peer)':<34} {t_inspect:9.4f} "
                      f"{'-':>9} {'-':>8}")
            print(f"{fmt:<12} {'verify vs cat (%d MiB)' % a.mib:<34} {t_verify:9.4f} "
                  f"{t_cat:9.4f} {t_verify / t_cat:7.2f}x its time")
            shutil.rmtree(d)
        convert_row(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
