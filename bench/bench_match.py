#!/usr/bin/python3
"""Key-audit benchmark: `ckpt match` / `ckpt diff --keys-only` on two
1,000,000-key manifests, and `ckpt diff` of two 1 GiB checkpoints.

Usage: bench/bench_match.py [--build /tmp/build] [--keys 1000000]
                            [--mb 1024] [--dir /tmp/ckpt-bench-match]
                            [--skip-keys] [--skip-values] [--quick]

--quick: 100,000 keys and 64 MiB checkpoints. Goals (issue 17): `ckpt
match` of 1M keys under 1 s; `ckpt diff` within 1.2x cmp.

Keys: two manifests in the `ckpt inspect --json` shape are written (the
second with every key under "module."), then, through libckpt (ctypes),
the phases are timed separately: JSON parse (jansson alone), manifest load
(parse + hash index), ckpt_match (identity, and with inference), ckpt_diff
keys-only; then the whole CLI. The torch-free baseline is what a script
does: json.load of both files and Python set operations.

Values: a torch.save checkpoint of MB MiB (16 float32 tensors), an identical
copy and a copy with one element changed per tensor. Timed warm (page
cache): ckpt diff, cmp, and torch.load + torch.equal / abs().max() (the
PyTorch baseline). GB/s is bytes of one file per second.

Median of 3 runs each; the machine is shared and noisy: read the ratios.
Files are deleted afterwards.
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def median(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(argv, expect=None):
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if expect is not None and p.returncode not in expect:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(argv), p.stderr.decode()))


def line(what, secs, base=None, extra=""):
    ratio = "" if base is None else "   %6.2fx vs baseline" % (base / secs)
    print("  %-44s %8.3f s%s%s" % (what, secs, ratio, extra))


# ------------------------------------------------------------------ keys

def write_manifest(path, n, prefix=""):
    """Sorted by name, as `ckpt inspect --json` writes them."""
    tensors = [{"name": "%smodel.layers.%d.block.%d.weight" % (prefix, i // 10, i % 10),
                "dtype": "F32", "shape": [i % 7 + 1, 3], "nbytes": 12 * (i % 7 + 1)}
               for i in range(n)]
    tensors.sort(key=lambda t: t["name"].encode())
    with open(path, "w") as fh:
        json.dump({"file": path, "format": "safetensors", "tensors": tensors,
                   "values": [], "metadata": None}, fh, separators=(",", ":"))


def bench_keys(args, lib):
    P = ctypes.c_void_p
    lib.ckpt_manifest_load.argtypes = [ctypes.POINTER(P), ctypes.c_char_p, P]
    lib.ckpt_manifest_free.argtypes = [P]
    lib.ckpt_match.argtypes = [ctypes.POINTER(P), P, P, P]
    lib.ckpt_match_result_free.argtypes = [P]
    lib.ckpt_match_complete.argtypes = [P]
    lib.ckpt_diff.argtypes = [ctypes.POINTER(P), P, P, P]
    lib.ckpt_diff_result_free.argtypes = [P]

    class MatchOpts(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("normalize", ctypes.c_int), ("allow_missing", P),
                    ("nallow_missing", ctypes.c_size_t), ("allow_unexpected", P),
                    ("nallow_unexpected", ctypes.c_size_t)]

    class DiffOpts(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("rtol", ctypes.c_double),
                    ("atol", ctypes.c_double), ("keys_only", ctypes.c_int),
                    ("normalize", ctypes.c_int), ("exclude", P), ("nexclude", ctypes.c_size_t)]

    jansson = ctypes.CDLL("libjansson.so.4")
    jansson.json_loadb.restype = P
    jansson.json_loadb.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, P]
    jansson.json_decref = None  # a macro: freed via json_delete below
    jansson.json_delete.argtypes = [P]

    a, b = os.path.join(args.dir, "a.json"), os.path.join(args.dir, "b.json")
    write_manifest(a, args.keys)
    write_manifest(b, args.keys, "module.")
    size = os.path.getsize(a)
    print("keys: two manifests of %d keys, %.1f MB each" % (args.keys, size / 1e6))

    with open(a, "rb") as fh:
        data = fh.read()
    buf = ctypes.create_string_buffer(data, len(data))
    errbuf = ctypes.create_string_buffer(256)

    def parse_only():
        doc = jansson.json_loadb(buf, len(data), 0, errbuf)
        jansson.json_delete(doc)

    def load(path):
        m = P()
        if lib.ckpt_manifest_load(ctypes.byref(m), path.encode(), None) != 0:
            sys.exit("load failed: " + path)
        return m

    t_parse = median(parse_only)
    t_load = median(lambda: lib.ckpt_manifest_free(load(a)))
    ma, mb = load(a), load(b)

    def match(c, e, normalize):
        r = P()
        o = MatchOpts(1, normalize, None, 0, None, 0)  # CKPT_MATCH_OPTIONS_VERSION
        if lib.ckpt_match(ctypes.byref(r), c, e, ctypes.byref(o)) != 0:
            sys.exit("ckpt_match failed")
        ok = lib.ckpt_match_complete(r)
        lib.ckpt_match_result_free(r)
        if not ok:
            sys.exit("match not complete")

    def diff(x, y):
        r = P()
        o = DiffOpts(2, 0.0, 0.0, 1, 0, None, 0)  # CKPT_DIFF_OPTIONS_VERSION
        if lib.ckpt_diff(ctypes.byref(r), x, y, ctypes.byref(o)) != 0:
            sys.exit("ckpt_diff failed")
        lib.ckpt_diff_result_free(r)

    t_match = median(lambda: match(ma, ma, 0))
    t_infer = median(lambda: match(mb, ma, 1))
    t_diff = median(lambda: diff(ma, mb))
    lib.ckpt_manifest_free(ma)
    lib.ckpt_manifest_free(mb)

    t_cli_match = median(lambda: run([args.ckpt, "match", a, "--expect", a], {0}))
    t_cli_norm = median(lambda: run([args.ckpt, "match", b, "--expect", a, "--normalize"], {0}))
    t_cli_diff = median(lambda: run([args.ckpt, "diff", a, b, "--keys-only"], {1}))

    def baseline():
        with open(a) as fh:
            ka = {t["name"] for t in json.load(fh)["tensors"]}
        with open(b) as fh:
            kb = {t["name"] for t in json.load(fh)["tensors"]}
        return ka - kb, kb - ka, len(ka & kb)

    t_base = median(baseline)
    print("  phases (libckpt, one manifest unless noted):")
    line("jansson json_loadb alone", t_parse)
    line("ckpt_manifest_load (parse + index)", t_load)
    line("ckpt_match, identical keys (index ready)", t_match)
    line("ckpt_match --normalize, 'module.' inferred", t_infer)
    line("ckpt_diff keys-only (index ready)", t_diff)
    print("  end to end (two manifests each):")
    line("python json.load x2 + set ops (baseline)", t_base)
    line("ckpt match A --expect A", t_cli_match, t_base)
    line("ckpt match B --expect A --normalize", t_cli_norm, t_base)
    line("ckpt diff A B --keys-only", t_cli_diff, t_base)
    print("  JSON parsing is %.0f%% of `ckpt match` (2 x json_loadb / end to end)"
          % (100 * 2 * t_parse / t_cli_match))


# ------------------------------------------------------------------ values

def bench_values(args):
    import torch

    n = 16
    numel = args.mb * (1 << 20) // 4 // n
    a, b, c = (os.path.join(args.dir, x) for x in ("a.pt", "b.pt", "c.pt"))
    torch.manual_seed(0)
    sd = {"t%02d" % i: torch.randn(numel) for i in range(n)}
    torch.save(sd, a)
    shutil.copyfile(a, b)
    for i, t in enumerate(sd.values()):
        t[(i * 7919) % numel] += 1.0
    torch.save(sd, c)
    del sd
    size = os.path.getsize(a)
    print("values: checkpoints of %.2f GiB (%d float32 tensors)" % (size / 2**30, n))
    for f in (a, b, c):  # warm the page cache
        run(["cat", f])

    def gbs(t):
        return "   %5.2f GB/s" % (size / t / 1e9)

    t_cmp = median(lambda: run(["cmp", a, b], {0}))
    t_same = median(lambda: run([args.ckpt, "diff", a, b], {0}))
    t_diff = median(lambda: run([args.ckpt, "diff", a, c], {1}))

    def torch_equal(x, y):
        p, q = torch.load(x), torch.load(y)
        return all(torch.equal(p[k], q[k]) for k in p)

    def torch_values(x, y):
        p, q = torch.load(x), torch.load(y)
        return [((p[k] - q[k]).abs().max().item(), int((p[k] != q[k]).sum())) for k in p]

    t_teq = median(lambda: torch_equal(a, b))
    t_tval = median(lambda: torch_values(a, c))
    line("cmp A B (identical)", t_cmp, None, gbs(t_cmp))
    line("ckpt diff A B (identical: memcmp)", t_same, t_cmp, gbs(t_same) + "  (baseline: cmp)")
    line("torch.load x2 + torch.equal (identical)", t_teq, None, gbs(t_teq))
    line("ckpt diff A B vs torch", t_same, t_teq)
    line("ckpt diff A C (1 element per tensor: values)", t_diff, None, gbs(t_diff))
    line("torch.load x2 + abs().max() + count", t_tval, None, gbs(t_tval))
    line("ckpt diff A C vs torch", t_diff, t_tval)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("CKPT_BUILD", "build"))
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dir", default="/tmp/ckpt-bench-match")
    ap.add_argument("--skip-keys", action="store_true")
    ap.add_argument("--skip-values", action="store_true")
    ap.add_argument("--quick", action="store_true", help="100k keys, 64 MiB")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.mb = 100000, 64
    args.ckpt = os.path.join(args.build, "ckpt")
    os.makedirs(args.dir, exist_ok=True)
    os.chdir(args.dir)  # never a cwd with a "torch" folder
    try:
        if not args.skip_keys:
            bench_keys(args, ctypes.CDLL(os.path.join(args.build, "libckpt.so")))
        if not args.skip_values:
            bench_values(args)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
