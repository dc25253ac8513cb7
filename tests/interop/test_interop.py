#!/usr/bin/python3
"""PyTorch interop: checkpoints written by torch 1.13 must read back in ckpt
exactly as torch itself reads them.

Runs gen_checkpoints.py into a temporary directory, then for every FILE it
wrote compares `ckpt inspect FILE --json --hash sha256` with
FILE.expected.json (format, tensors with name/dtype/shape/nbytes/sha256 in
name order, values with name/type/value in name order, metadata) and checks
that `ckpt verify FILE` says OK with exit status 0.

Environment: CKPT_BIN (the ckpt binary). Standard library only here; the
generator needs Debian's python3 with torch and numpy (this interpreter).
Prints one line per case and ends with "N passed, N failed".
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402
CKPT = os.environ.get("CKPT_BIN", "ckpt")
TIMEOUT = 60

TALLY = suite.Tally(echo=True)
report = TALLY.report


def same_scalar(typ, exp, got):
    """Exact comparison of one value after JSON parsing."""
    if typ == "float":
        if isinstance(exp, str) or isinstance(got, str):
            return exp == got  # "nan", "inf", "-inf"
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return False
        if float(got) != float(exp):
            return False
        if exp == 0.0 and math.copysign(1.0, exp) != math.copysign(1.0, float(got)):
            return False
        return True
    if typ == "int":
        return type(got) is int and got == exp
    if typ == "bool":
        return type(got) is bool and got == exp
    if typ == "none":
        return got is None
    return type(got) is type(exp) and got == exp


def diff_entries(kind, exp_list, got_list, fields, details):
    exp_by = {}
    for e in exp_list:
        exp_by.setdefault(e["name"], []).append(e)
    got_by = {}
    for g in got_list if isinstance(got_list, list) else []:
        if not isinstance(g, dict) or "name" not in g:
            details.append("%s: malformed entry %r" % (kind, g))
            continue
        got_by.setdefault(g["name"], []).append(g)
    for name in sorted(set(exp_by) | set(got_by)):
        es, gs = exp_by.get(name, []), got_by.get(name, [])
        if not gs:
            details.append("%s %r missing; expected %s" % (kind, name, json.dumps(es[0])))
            continue
        if not es:
            details.append("%s %r unexpected: %s" % (kind, name, json.dumps(gs[0])))
            continue
        if len(gs) != len(es):
            details.append("%s %r listed %d times, expected %d" % (kind, name, len(gs), len(es)))
        e, g = es[0], gs[0]
        for field in fields:
            if field not in g:
                details.append("%s %r: field %r missing" % (kind, name, field))
                continue
            ev, gv = e[field], g[field]
            if field == "value":
                ok = same_scalar(e["type"], ev, gv)
            elif field == "shape":
                ok = isinstance(gv, list) and len(gv) == len(ev) and all(
                    type(a) is int and a == b for a, b in zip(gv, ev))
            else:
                ok = type(gv) is type(ev) and gv == ev
            if not ok:
                details.append("%s %r: %s expected %s, got %s" % (
                    kind, name, field, json.dumps(ev), json.dumps(gv)))
    names = [g.get("name") for g in got_list if isinstance(g, dict)] \
        if isinstance(got_list, list) else []
    if names != sorted(names, key=lambda s: s.encode("utf-8") if isinstance(s, str) else b""):
        details.append("%s not sorted by name: %s" % (kind, names[:20]))


def run(args):
    return subprocess.run([CKPT] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=TIMEOUT)


def check_inspect(path, expected):
    case = "inspect %s" % os.path.basename(path)
    try:
        p = run(["inspect", path, "--json", "--hash", "sha256"])
    except (OSError, subprocess.TimeoutExpired) as e:
        report(False, case, ["could not run ckpt: %s" % e])
        return
    details = []
    # exit 1 with the one stderr line for a file scan calls unsafe (a whole
    # module, TorchScript): inspect still shows its contents
    unsafe = p.returncode == 1 and b": unsafe: " in p.stderr
    # and for a deflated archive: torch.load(mmap=True) would map the
    # compressed bytes of its storage records (the finding verify makes)
    unsafe |= p.returncode == 1 and DEFLATED_FINDING.encode() in p.stderr
    if p.returncode != 0 and not unsafe:
        details.append("exit %d, stderr: %s" % (p.returncode, p.stderr.decode("utf-8", "replace").strip()))
    try:
        got = json.loads(p.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        details.append("stdout is not JSON (%s): %r" % (e, p.stdout[:300]))
        report(False, case, details)
        return
    if not isinstance(got, dict):
        report(False, case, details + ["stdout is not a JSON object"])
        return
    if got.get("format") != expected["format"]:
        details.append("format expected %r, got %r" % (expected["format"], got.get("format")))
    if "metadata" not in got:
        details.append("metadata missing")
    elif got["metadata"] != expected["metadata"]:
        details.append("metadata expected %s, got %s" % (json.dumps(expected["metadata"]), json.dumps(got["metadata"])))
    diff_entries("tensor", expected["tensors"], got.get("tensors"),
                 ("dtype", "shape", "nbytes", "sha256"), details)
    diff_entries("value", expected["values"], got.get("values"),
                 ("type", "value"), details)
    report(not details, case, details)


DEFLATED_FINDING = "storage record is compressed (method 8"


def check_verify(path):
    """OK, except for the rewritten deflated archives (gen_checkpoints.py):
    torch.load inflates their records, torch.load(mmap=True) maps the
    compressed bytes, so verify must call them CORRUPT, naming that."""
    case = "verify %s" % os.path.basename(path)
    try:
        p = run(["verify", path])
    except (OSError, subprocess.TimeoutExpired) as e:
        report(False, case, ["could not run ckpt: %s" % e])
        return
    out = p.stdout.decode("utf-8", "replace")
    if os.path.basename(path).startswith("deflated"):
        ok = p.returncode == 1 and out.startswith("CORRUPT " + path) and DEFLATED_FINDING in out
    else:
        ok = p.returncode == 0 and out.startswith("OK " + path)
    report(ok, case, [] if ok else [
        "exit %d, stdout: %s, stderr: %s" % (p.returncode, out.strip(), p.stderr.decode("utf-8", "replace").strip())])


def main():
    with tempfile.TemporaryDirectory(prefix="ckpt-interop-") as tmp:
        outdir = os.path.join(tmp, "out")
        # cwd = tmp: never run torch from a directory holding a "torch" folder.
        g = subprocess.run([sys.executable, os.path.join(HERE, "gen_checkpoints.py"), outdir],
                           cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=300)
        report(g.returncode == 0, "generate checkpoints with torch",
               g.stdout.decode("utf-8", "replace").splitlines()[-20:])
        if g.returncode == 0:
            for fname in sorted(os.listdir(outdir)):
                if fname.endswith(".expected.json"):
                    continue
                path = os.path.join(outdir, fname)
                exp_path = path + ".expected.json"
                if not os.path.exists(exp_path):
                    report(False, "expected view of %s" % fname, ["missing " + exp_path])
                    continue
                with open(exp_path, encoding="utf-8") as f:
                    expected = json.load(f)
                check_inspect(path, expected)
                check_verify(path)
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
