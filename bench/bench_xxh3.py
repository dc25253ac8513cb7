#!/usr/bin/python3
"""XXH3-64 throughput of ckpt's static and shared builds, side by side with
libxxhash's own baseline (SSE2) and runtime-dispatched (AVX2/AVX-512)
builds, in one run (issue 17: a static libckpt lost the dispatcher).

    /usr/bin/python3 bench/bench_xxh3.py [--mib N] [--rounds R] [--quick] [--build DIR]

ckpt's rates come from build/xxh3_rate_static and xxh3_rate_shared (the
same C program linked against libckpt.a and libckpt.so, best of R rounds
over one N MiB buffer, default 256 MiB, 5 rounds); libxxhash's through
ctypes on the same bytes (one call per round: the call overhead is
nothing next to 256 MiB). Prints GB/s, ratios to libxxhash's dispatcher
and peak RSS; the digests must agree. --quick: 64 MiB, 3 rounds. The
machine may be shared: best-of-R is the least disturbed number. Nothing
here asserts a rate.
"""
import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pattern(n):
    # the bytes xxh3_rate.c hashes: p[i] = i*131 + (i >> 12) mod 256
    import numpy as np
    out = bytearray(n)
    view = np.frombuffer(out, dtype=np.uint8)
    step = 1 << 24
    for at in range(0, n, step):
        i = np.arange(at, min(at + step, n), dtype=np.uint64)
        view[at:at + len(i)] = (i * 131 + (i >> 12)).astype(np.uint8)
    return out


def peer_rate(fn, buf, rounds):
    fn.restype = ctypes.c_uint64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ptr = (ctypes.c_char * len(buf)).from_buffer(buf)
    best, digest = 0.0, 0
    for _ in range(rounds):
        t = time.perf_counter()
        digest ^= fn(ctypes.addressof(ptr), len(buf))
        t = time.perf_counter() - t
        best = max(best, len(buf) / t / 1e9)
    return best, digest


def ckpt_rate(exe, mib, rounds):
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([exe, str(mib), str(rounds)], check=True, capture_output=True,
                         text=True).stdout.split()
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return float(out[0]), int(out[1], 16), max(rss, t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    if a.quick:
        a.mib, a.rounds = 64, 3
    rows = []
    for name in ("static", "shared"):
        exe = os.path.join(a.build, "xxh3_rate_" + name)
        gbps, digest, rss = ckpt_rate(exe, a.mib, a.rounds)
        rows.append(("ckpt " + name, gbps, digest, rss))
    xxh = ctypes.CDLL("libxxhash.so.0")
    buf = pattern(a.mib << 20)
    base = peer_rate(xxh.XXH3_64bits, buf, a.rounds)
    disp = peer_rate(xxh.XXH3_64bits_dispatch, buf, a.rounds)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows.append(("libxxhash baseline", base[0], base[1], rss))
    rows.append(("libxxhash dispatch", disp[0], disp[1], rss))
    print(f"XXH3-64 over {a.mib} MiB, best of {a.rounds} (shared machine)")
    print(f"{'':20} {'GB/s':>7} {'x dispatch':>10} {'peak RSS':>9}")
    for name, gbps, _, rss in rows:
        print(f"{name:20} {gbps:7.2f} {gbps / disp[0]:10.2f} {rss / 1024:7.0f}MB")
    if len({r[2] for r in rows}) != 1:
        print("DIGESTS DIFFER: " + ", ".join(f"{r[0]}={r[2]:016x}" for r in rows))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
