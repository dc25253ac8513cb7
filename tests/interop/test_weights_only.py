#!/usr/bin/python3
"""weights_only parity: every corpus file and every interop file goes
through torch 2.13's torch.load(weights_only=True) (wo_load.py, a fresh
process) and through `ckpt scan`.

  - A file torch's allowlist loads is never `unsafe` in ckpt (FAIL).
  - A file ckpt calls safe that torch refuses must match one of the
    justified differences below (FAIL otherwise); each is counted and
    printed, so the list stays honest.
  - ckpt's weights_only verdict (`ckpt scan --json`'s "weights_only") is
    torch's, for every file torch.load gets to unpickle (FAIL otherwise).

Interop files come from gen_checkpoints.py (torch 1.13) and gen_torch2.py
(torch 2.13 and 1.13). Environment: CKPT_BIN, CKPT_SRC, CKPT_CORPUS (the
corpus part is skipped with a printed line when absent). Without
.venv/bin/python the whole test is skipped with one printed line. Ends with
"N passed, N failed".
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_interop as ti  # noqa: E402

SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
VENV = os.path.join(SRC, ".venv", "bin", "python")
CORPUS = os.environ.get("CKPT_CORPUS", os.path.join(SRC, "..", "shared", "corpus"))

# Where ckpt says safe and torch 2.13's weights_only loader refuses: the
# pattern (on torch's error) and why ckpt's verdict is still right.
JUSTIFIED = [
    (r"Unsupported operand (149|140|141|142|148|150|151|152)\b",
     "protocol 4/5 opcodes (FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE, "
     "BINBYTES8, BYTEARRAY8...): torch's unpickler implements a subset of "
     "pickle opcodes; these only build data, and ckpt runs them as CPython does"),
    (r"Unsupported operand (73|76|108|40|70|83|86|100|112|103|97|115|116|117|98|48|46|78)\b",
     "protocol 0/1 text opcodes (INT, LONG, LIST, STRING, UNICODE, PUT, GET...): "
     "data only, outside torch's opcode subset"),
    (r"Unsupported operand 123\b|Unsupported operand 123 ",
     "not a pickle (a JSON index): ckpt scans the shards it lists"),
    (r"Invalid magic number|invalid load key|could not find MARK|"
     r"PytorchStreamReader failed|magic_number",
     "not a torch.save file (a plain pickle, safetensors, numpy...): torch.load "
     "refuses the container, ckpt scans its content"),
    (r"GLOBAL numpy\.",
     "numpy arrays, dtypes and scalars (e.g. the numpy RNG state of a training "
     "checkpoint): ckpt builds them as data; torch leaves numpy off its default "
     "allowlist by choice, not because they run code"),
    (r"GLOBAL (bytes|builtins\.(bytes|list|tuple|dict|frozenset|slice))\b",
     "builtin containers and bytes: data constructors ckpt interprets in C"),
    (r"GLOBAL torch\._utils\._rebuild_sparse_csr_tensor",
     "torch 1.x's CSR rebuild function, gone from torch 2.x: ckpt reads its "
     "parts as data"),
]


def collect(tmp):
    files = []
    if os.path.isdir(CORPUS):
        for root, _, names in os.walk(CORPUS):
            files += [os.path.join(root, n) for n in names
                      if not n.endswith((".md", ".jsonl", ".expected.json"))]
    else:
        print("SKIP corpus files: no %s" % CORPUS)
    gens = [("/usr/bin/python3", "gen_checkpoints.py", "interop1"),
            ("/usr/bin/python3", "gen_torch2.py", "torch1"),
            (VENV, "gen_torch2.py", "torch2")]
    for python, script, name in gens:
        out = os.path.join(tmp, name)
        g = subprocess.run([python, os.path.join(HERE, script), out], cwd=tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        ti.report(g.returncode == 0, "generate %s with %s" % (name, python),
                  g.stdout.decode("utf-8", "replace").splitlines()[-10:])
        if g.returncode == 0:
            files += [os.path.join(out, n) for n in sorted(os.listdir(out))
                      if not n.endswith(".expected.json")]
    return sorted(files)


def verdict(path):
    """`ckpt scan --json`'s verdict (upper case) and weights_only note."""
    p = ti.run(["scan", "--json", path])
    try:
        d = json.loads(p.stdout.decode("utf-8", "replace"))
    except ValueError:
        return "?", None
    if isinstance(d, list):
        d = d[0]
    return d.get("verdict", "?").upper(), d.get("weights_only")


# torch.load refuses the container before any pickle: no weights_only
# question (a plain pickle, JSON, safetensors, numpy, a directory, an
# archive without its version record or with data.pkl at the top)
CONTAINER = (r"Invalid magic number|invalid load key|could not find MARK|"
             r"PytorchStreamReader failed|magic_number|Unsupported operand 123\b|"
             r"Is a directory|EOF|not in a subdirectory|hasRecord\(\"version\"\)")


def main():
    if not os.path.exists(VENV):
        print("SKIP weights_only parity: no %s (run scripts/deps --test)" % VENV)
        print("0 passed, 0 failed")
        return 0
    with tempfile.TemporaryDirectory(prefix="ckpt-wo-") as tmp:
        files = collect(tmp)
        p = subprocess.run([VENV, os.path.join(HERE, "wo_load.py")] + files, cwd=tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=1200)
        torch = {}
        for line in p.stdout.decode("utf-8").splitlines():
            d = json.loads(line)
            torch[d["file"]] = d
        counts = {reason: 0 for _, reason in JUSTIFIED}
        loads = refused_both = 0
        for path in files:
            t = torch.get(path)
            if t is None:
                ti.report(False, "torch verdict for %s" % path, ["wo_load.py printed none"])
                continue
            v, wo = verdict(path)
            if not re.search(CONTAINER, t["error"]) and v not in ("UNSCANNABLE", "NOT-A-CHECKPOINT", "?"):
                # ckpt's weights_only verdict is torch's
                ti.report((wo is None) == t["ok"], "weights_only verdict of %s: torch %s, ckpt %s"
                          % (path, "loads" if t["ok"] else "refuses", wo or "loads"),
                          [t["error"][:600]])
            if t["ok"]:
                loads += 1
                ti.report(v != "UNSAFE", "torch loads %s: ckpt says %s" % (path, v))
                continue
            if v != "SAFE":
                refused_both += 1
                continue
            reason = next((r for pat, r in JUSTIFIED if re.search(pat, t["error"])), None)
            if reason:
                counts[reason] += 1
            else:
                ti.report(False, "ckpt safe, torch refuses %s without a listed reason" % path,
                          [t["error"][:600]])
        print("files: %d; torch loads %d; both refuse %d" % (len(files), loads, refused_both))
        for reason, n in counts.items():
            print("ckpt safe, torch refuses: %3d  %s" % (n, reason))
    return ti.TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
