#!/usr/bin/env python3
"""Runs two ckpt builds over the same inputs and reports every command
whose output or exit code differs: the check that a change meant to
cost less (one pickle run shared by the reader and the scanner, the
table's output) changed nothing a user sees.

    bench/same_outputs.py OLD_CKPT NEW_CKPT [--mutants N] [--seed S] DIR_OR_FILE...

Inputs: every file under the DIRs and FILEs given (the fuzz corpora, the
checkpoints tests/interop/gen_checkpoints.py, gen_torch2.py and
tests/scan/gen_hostile.py write), plus N mutants of the torch zips among
them, each with one to four bytes changed, half of them inside
data.pkl (the pickle both runs read). Commands: scan --json, inspect,
inspect --json, doctor --json; stdout, stderr and the exit code must be
byte-identical (the file's path is the same for both). Exit 0 when all
agree, 1 with the first differences listed.
"""
import argparse
import concurrent.futures
import os
import random
import subprocess
import sys
import tempfile
import zipfile

COMMANDS = (["scan", "--json"], ["inspect"], ["inspect", "--json"], ["doctor", "--json"])


def inputs(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, _, names in os.walk(p):
            for n in sorted(names):
                yield os.path.join(root, n)


def data_pkl_span(path):
    """(start, end) of data.pkl's bytes in a torch zip, or None."""
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename.endswith("/data.pkl"):
                    with open(path, "rb") as f:
                        f.seek(info.header_offset + 26)
                        head = f.read(4)
                    start = (info.header_offset + 30 + int.from_bytes(head[:2], "little") +
                             int.from_bytes(head[2:], "little"))
                    return start, start + info.compress_size
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    return None


def mutants(files, n, seed, out):
    zips = [(f, s) for f in files if (s := data_pkl_span(f))]
    rng = random.Random(seed)
    made = []
    for i in range(n if zips else 0):
        src, (start, end) = zips[i % len(zips)]
        data = bytearray(open(src, "rb").read())
        for _ in range(rng.randint(1, 4)):
            if i % 2 == 0 and end > start:
                at = rng.randrange(start, end)
            else:
                at = rng.randrange(len(data))
            data[at] = rng.randrange(256) if rng.random() < 0.7 else data[at] ^ (1 << rng.randrange(8))
        path = os.path.join(out, f"m{i:05d}.pt")
        with open(path, "wb") as f:
            f.write(data)
        made.append(path)
    return made


def run(ckpt, cmd, path):
    try:
        p = subprocess.run([ckpt, *cmd, path], capture_output=True, timeout=60)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", b"", b""


def compare(old, new, cmd, path):
    a, b = run(old, cmd, path), run(new, cmd, path)
    return None if a == b else (" ".join(cmd), path, a[0], b[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--mutants", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    files = list(inputs(a.paths))
    with tempfile.TemporaryDirectory() as tmp:
        files += mutants(files, a.mutants, a.seed, tmp)
        jobs = [(c, f) for f in files for c in COMMANDS]
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            diffs = [d for d in ex.map(lambda j: compare(a.old, a.new, *j), jobs) if d]
    rcs = len(jobs)
    for d in diffs[:20]:
        print("DIFF %s %s: exit %s / %s" % d)
    print("%d inputs, %d runs each build, %d differ" % (len(files), rcs, len(diffs)))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
