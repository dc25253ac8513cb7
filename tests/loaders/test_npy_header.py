#!/usr/bin/python3
"""Differential test: .npy headers as numpy reads them against ckpt scan.

Every generated file is a .npy header (versions 1.0/2.0/3.0 and bad ones;
object, plain, structured and sub-array dtypes; reordered, repeated or
missing keys; quoting, spacing, Python 2 'L' ints; then random byte edits
inside the header; fixed seed, CKPT_NPYDIFF_RUNS files) followed by a
pickle of a sentinel string. The loader's view: np.load(allow_pickle=True)
returns the sentinel exactly when it unpickled the data. ckpt's view
(`ckpt scan --json`): an "npy-object" finding means it scanned the data as
a pickle, "npy-header" means it cannot say (unscannable, allowed), none or
"npy-refused" means no pickle. Any other disagreement fails.

Oracles: this interpreter's numpy (Debian's 1.x) and, when the project
virtualenv exists (CKPT_SRC/.venv), its numpy 2.x.
Environment: CKPT_BIN, CKPT_SRC. Ends with "N passed, N failed".
"""
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile

CKPT = os.environ.get("CKPT_BIN", "ckpt")
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
VENV_PY = os.path.join(SRC, ".venv", "bin", "python")
RUNS = int(os.environ.get("CKPT_NPYDIFF_RUNS", "300"))
SEED = int(os.environ.get("CKPT_NPYDIFF_SEED", "2468"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from craft import npy_file  # noqa: E402
import suite  # noqa: E402
SENTINEL = "ckpt-npy-sentinel"
PAYLOAD = pickle.dumps(SENTINEL, protocol=2)

DESCRS = ["'|O'", "'<O'", "'O'", "'|O8'", "'object'", "'>O'", "'=O'", "'O4'", "'<f4'",
          "'|b1'", "'<U5'", "'|S3'", "'|V8'", "'<M8[ns]'", "'<m8[10s]'", "'<i8'", "'f4'",
          "[('a', '<i4'), ('b', '|O')]", "[('a', '<f8', (2,))]", "('<i4', (2,))",
          "('|O', 3)", "[(('t', 'a'), '|O')]", "[('', '|V4'), ('b', '<f4')]", "'float32'",
          "'i4,O'", "'T'", "[['a', '|O']]", "[('a', [('b', '|O')])]", "('|O',)", "'|O '",
          "\"|O\"", "'|o'", "'<c16'", "'<f2'", "'|u1'"]
ORDERS = ["False"] * 4 + ["True"] * 3 + ["0", "None", "'False'"]
SHAPES = ["(1,)"] * 4 + ["()", "(2, 3)", "(1L,)", "[1]", "(1.0,)", "(True,)", "(01,)", "(-1,)"]


def header(rng):
    items = [("descr", rng.choice(DESCRS)), ("fortran_order", rng.choice(ORDERS)),
             ("shape", rng.choice(SHAPES))]
    if rng.random() < 0.05:
        items.pop(rng.randrange(3))
    if rng.random() < 0.05:
        items.append((rng.choice(["descr", "extra", "shape"]), rng.choice(DESCRS)))
    rng.shuffle(items)
    q = rng.choice(["'", "'", '"'])
    body = ", ".join("%s%s%s: %s" % (q, k, q, v) for k, v in items)
    text = "{" + body + rng.choice(["", ", ", ",", " "]) + "}"
    text += " " * rng.randrange(0, 40) + "\n"
    return text.encode("latin-1")


def npy(rng):
    major = rng.choice([1, 1, 1, 1, 2, 3, 4])
    minor = 0 if rng.random() < 0.97 else 1
    h = header(rng)
    if rng.random() < 0.15:
        b = bytearray(h)
        for _ in range(rng.randrange(1, 3)):
            b[rng.randrange(len(b))] = rng.choice(b"'\"(),:[] {}O0L#\\\n\t")
        h = bytes(b)
    return npy_file(h, PAYLOAD, major, minor)


ORACLE = r'''
import sys, json, numpy as np
for path in sys.argv[1:]:
    try:
        got = np.load(path, allow_pickle=True)
        print(json.dumps(isinstance(got, str) and got == %r))
    except Exception:
        print("false")
''' % SENTINEL


def numpy_views(python, paths):
    out = subprocess.run([python, "-c", ORACLE] + paths, capture_output=True, timeout=600)
    lines = out.stdout.decode().split()
    if len(lines) != len(paths):
        raise RuntimeError("numpy oracle under %s failed: %r" % (python, out.stderr[-500:]))
    return [json.loads(l) for l in lines]


def ckpt_view(path):
    out = subprocess.run([CKPT, "scan", "--json", path], capture_output=True, timeout=60)
    kinds = {f["kind"] for f in json.loads(out.stdout)["findings"]}
    if "npy-header" in kinds:
        return "unsure"
    return "object" if "npy-object" in kinds else "plain"


def main():
    tally = suite.Tally(echo=False)
    rng = random.Random(SEED)
    tmp = tempfile.mkdtemp(prefix="ckpt-npydiff-")
    files = [npy(rng) for _ in range(RUNS)]
    paths = []
    for i, data in enumerate(files):
        p = os.path.join(tmp, "%04d.npy" % i)
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    mine = [ckpt_view(p) for p in paths]
    oracles = [("numpy-1.x", sys.executable)]
    if os.path.exists(VENV_PY):
        oracles.append(("numpy-2.x", VENV_PY))
    else:
        print("SKIP numpy 2.x oracle: no project virtualenv at %s" % VENV_PY)
    for name, python in oracles:
        stats = {"unpickled": 0, "not unpickled": 0, "ckpt unsure": 0}
        for p, data, unpickled, view in zip(paths, files, numpy_views(python, paths), mine):
            stats["unpickled" if unpickled else "not unpickled"] += 1
            stats["ckpt unsure"] += view == "unsure"
            ok = view == "unsure" or (view == "object") == unpickled
            tally.report(ok, "%s %s" % (name, p), ["numpy %s, ckpt %s; header %r" % (
                "unpickles" if unpickled else "does not unpickle", view, data[:80])])
        print("%s: %s" % (name, ", ".join("%s %d" % kv for kv in stats.items())))
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
