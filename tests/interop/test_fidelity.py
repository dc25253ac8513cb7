#!/usr/bin/python3
"""Fidelity of the Python objects (issue 14 item 7): ckpt.load gives what
torch.load(weights_only=False) gives, type for type, under torch 2.13
(.venv/bin/python) and torch 1.13 (Debian's python3); so do the files
`ckpt convert` writes (.pt and .safetensors) and torch.load of the
converted .pt; the converted .pt loads with weights_only=True whenever the
original does. fidelity.py does the work in each torch's process (fixed
cases: a state dict with _metadata, numpy RNG state, numpy scalars and
arrays of every dtype, sets and frozensets, shared lists, tied weights and
a view of them, views of one 0-byte storage, Parameters, a Counter,
torch.device, torch.Size and bytearray; and 60 nested objects generated
from a fixed seed); this script runs it and reports every difference.

Environment: CKPT_BIN, CKPT_SRC, CKPT_LIB. Ends with "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", os.path.join(SRC, "build", "ckpt"))
LIB = os.environ.get("CKPT_LIB", os.path.join(SRC, "build", "libckpt.so"))
VENV = suite.VENV
SEED, COUNT = 1, 60
# checks fidelity.py makes for every case (the weights_only one with torch 2.x)
CHECKS = {"ckpt.load", "ckpt.load of convert .pt", "torch.load of convert .pt",
          "ckpt.load of convert .safetensors"}


def run_fidelity(python):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CKPT_LIB=LIB, PYTHONPATH=os.path.join(SRC, "python"))
        p = subprocess.run([python, os.path.join(HERE, "fidelity.py"), tmp, CKPT, str(SEED),
                            str(COUNT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env, timeout=900)
    rows = [json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith("{")]
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    bad = ["%s / %s: %s" % (r["case"], r["check"], "; ".join(r["diffs"])) for r in rows
           if not r["ok"]]
    assert not bad, "%d of %d checks differ:\n%s" % (len(bad), len(rows), "\n".join(bad[:20]))
    cases = {}
    for r in rows:
        cases.setdefault(r["case"], set()).add(r["check"])
    assert len(cases) == COUNT + 11, sorted(cases)
    for case, done in cases.items():
        assert CHECKS <= done, (case, sorted(CHECKS - done))
    print("    %s: %d cases, %d checks, all equal" % (python, len(cases), len(rows)))


def test_fidelity_torch2():
    if not os.path.exists(VENV):
        print("SKIP torch 2.13: no %s (run scripts/deps --test)" % VENV)
        return
    run_fidelity(VENV)


def test_fidelity_torch1():
    run_fidelity(suite.DEBIAN)


if __name__ == "__main__":
    sys.exit(suite.run_cases(globals(), os.path.abspath(__file__)))
