#!/usr/bin/env python3
"""bench_scan.py - `ckpt scan` speed side by side with picklescan and
fickling (issue 11's numbers):
  1. raw pickle streams, protocols 2 and 4: a list of ints and strs, a
     list of ints, and the data.pkl of a big state_dict (20,000 tensors:
     globals, persistent ids and calls); target >= 300 MB/s for ckpt;
  2. a torch.save zip holding a 1 GiB storage: ckpt reads the pickles and
     the directory, never the storage, so it takes milliseconds.
Each tool runs as its user runs it (ckpt and picklescan CLIs, fickling's
own zip/pickle dispatch through its Python API, as bench/peers.py calls
it), the best of --runs warm runs (the page cache holds the files; one run
for a tool past 10 s), with a time limit and a 4 GiB memory limit per run.
Times are CPU seconds (user + system) of the tool's process: the machine
may be shared, and its load inflates wall times far more. Printed:
seconds, MB/s and peer/ckpt ratios, and each tool's start-up time on a
20-byte pickle (included in every time).

Usage: .venv/bin/python bench/bench_scan.py [--ckpt build/ckpt] [--work DIR]
           [--runs 5] [--timeout 300] [--tools ckpt,picklescan,fickling]
The files (about 1.2 GB) go to a temp dir removed afterwards unless --work.
"""
import argparse
import io
import os
import pickle
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers import BIN, FICKLING  # noqa: E402  (one copy of the fickling dispatch)


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def commands(args, path):
    return {"ckpt": [args.ckpt, "scan", path],
            "picklescan": [os.path.join(BIN, "picklescan"), "-p", path],
            "fickling": [os.path.join(BIN, "python"), "-c",
                         FICKLING + "\nimport sys\nprint(check(sys.argv[1]))", path]}


def verdict(tool, rc, out):
    if rc is None:
        return "timeout"
    if tool == "ckpt":
        return out.splitlines()[-1].split()[0].lower() if out and rc in (0, 1) else "error"
    if tool == "fickling":
        return out.split()[-1] if rc == 0 and out.split() else "error"
    return {0: "clean", 1: "flag"}.get(rc, "error")


def cpu_of_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(tool, args, path):
    """(best CPU seconds, verdict) of --runs runs: the CPU time of the
    tool's process (user + system), which a busy shared machine inflates
    far less than the wall time."""
    best, v = None, "?"
    for _ in range(args.runs):
        c = cpu_of_children()
        try:
            p = subprocess.run(commands(args, path)[tool], capture_output=True,
                               timeout=args.timeout, preexec_fn=limit_memory, cwd=args.scratch)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, out = None, ""
        dt = cpu_of_children() - c
        v = verdict(tool, rc, out)
        if rc is None:
            return float(args.timeout), v
        best = dt if best is None else min(best, dt)
        if dt > 10:
            break
    return best, v


def state_dict_pickle():
    """data.pkl of torch.save({name: small tensor} * 20,000)."""
    import torch
    sd = {"layers.%d.%s" % (i // 4, ("weight", "bias", "running_mean", "running_var")[i % 4]):
          torch.zeros(2) for i in range(20000)}
    buf = io.BytesIO()
    torch.save(sd, buf)
    with zipfile.ZipFile(buf) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def big_pt(path):
    """torch.save layout with data.pkl naming one FloatStorage of 2^28
    elements, stored in data/0 (1 GiB of zeros, written in chunks)."""
    numel = 1 << 28
    pkl = (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild_tensor_v2\n"
           b"q\x02((X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04"
           b"X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06J" + struct.pack("<i", numel) +
           b"tq\x07QK\x00J" + struct.pack("<i", numel) + b"\x85K\x01\x85\x89"
           b"ccollections\nOrderedDict\n)Rtq\x08Rq\x09s.")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        z.writestr("big_storage/data.pkl", pkl)
        with z.open(zipfile.ZipInfo("big_storage/data/0"), "w", force_zip64=True) as fh:
            chunk = bytes(1 << 24)
            for _ in range(numel * 4 // len(chunk)):
                fh.write(chunk)
        z.writestr("big_storage/version", "3\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(os.path.dirname(HERE), "build", "ckpt"))
    ap.add_argument("--work")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--tools", default="ckpt,picklescan,fickling")
    args = ap.parse_args()
    tools = args.tools.split(",")
    work = args.work or tempfile.mkdtemp(prefix="ckpt-bench-scan-")
    os.makedirs(work, exist_ok=True)
    args.scratch = tempfile.mkdtemp(dir=work)

    files = []

    def put(name, data):
        path = os.path.join(work, name)
        with open(path, "wb") as fh:
            fh.write(data)
        files.append((name, path))

    mixed = []
    for i in range(1_000_000):
        mixed.append(i * 7919)
        mixed.append("name%07d" % i)
    put("ints_strs_p2.pkl", pickle.dumps(mixed, protocol=2))
    put("ints_strs_p4.pkl", pickle.dumps(mixed, protocol=4))
    del mixed
    ints = list(range(0, 5_000_000 * 7919, 7919))
    put("ints_p2.pkl", pickle.dumps(ints, protocol=2))
    put("ints_p4.pkl", pickle.dumps(ints, protocol=4))
    del ints
    put("state_dict_data.pkl", state_dict_pickle())
    big = os.path.join(work, "big_storage.pt")
    big_pt(big)
    files.append(("big_storage.pt (1 GiB)", big))
    put("tiny.pkl", pickle.dumps({"a": 1}, protocol=2))

    startup = {t: timed(t, args, files[-1][1])[0] for t in tools}
    files.pop()
    print("start-up on a 20-byte pickle (in every time below): " +
          ", ".join("%s %.3f s" % (t, startup[t]) for t in tools))
    print("\n%-24s %8s" % ("file", "MB") + "".join(
        " | %-10s %9s %9s" % (t, "CPU s", "MB/s") + ("" if t == "ckpt" else " %7s" % "x ckpt")
        for t in tools))
    for name, path in files:
        mb = os.path.getsize(path) / 1e6
        row = "%-24s %8.1f" % (name, mb)
        base = None
        for t in tools:
            secs, v = timed(t, args, path)
            base = secs if t == "ckpt" else base
            row += " | %-10s %9.4f %9.1f" % (v, secs, mb / max(secs, 1e-4))
            if t != "ckpt":
                # a timeout's time is the wall-clock limit: a lower bound
                row += " %7s" % (("%s%.0f" % (">" if v == "timeout" else "", secs / base))
                                 if base else "-")
        print(row, flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
