#!/usr/bin/python3
"""Corpus ground truth: `ckpt inspect --json --hash sha256` on every real
checkpoint of $CKPT_CORPUS must agree with expected.jsonl (computed by
PyTorch 1.13 for torch files, by a plain JSON reader for safetensors).

For each record whose file is not under scan/:
  - format "not-a-checkpoint": inspect must fail with exit 1 and print
    nothing on stdout;
  - otherwise: format, tensors (name, dtype, shape, sha256, in name order;
    nbytes consistent with dtype and shape), values (name, type, value;
    ints and floats exact after JSON parsing) and, when the record has
    one, metadata.
Plus the sharded index safetensors/fluxml/sharded/model.safetensors.index.json:
format "safetensors-sharded" and the union of its 6 shards' tensors.

Environment: CKPT_BIN, CKPT_CORPUS. Standard library only. Prints one line
per case and ends with "N passed, N failed".
"""
import json
import math
import os
import subprocess
import sys

import suite

CKPT = os.environ.get("CKPT_BIN", "ckpt")
CORPUS = os.environ.get("CKPT_CORPUS", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "corpus"))
SHARDED_INDEX = "safetensors/fluxml/sharded/model.safetensors.index.json"
TIMEOUT = 60

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "I32": 32,
        "U32": 32, "I64": 64, "U64": 64, "F16": 16, "BF16": 16, "F32": 32,
        "F64": 64, "C32": 32, "C64": 64, "C128": 128, "F8_E5M2": 8,
        "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
        "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}

TALLY = suite.Tally(echo=True)
report = TALLY.report


def same_scalar(typ, exp, got):
    if typ == "float":
        if isinstance(exp, str) or isinstance(got, str):
            return exp == got  # "nan", "inf", "-inf"
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return False
        if float(got) != float(exp):
            return False
        return not (exp == 0.0 and math.copysign(1.0, exp) != math.copysign(1.0, float(got)))
    if typ == "int":
        return type(got) is int and got == exp
    if typ == "bool":
        return type(got) is bool and got == exp
    if typ == "none":
        return got is None
    return type(got) is type(exp) and got == exp


def diff_entries(kind, exp_list, got_list, fields, details):
    if not isinstance(got_list, list):
        details.append("%s: expected a list, got %s" % (kind, json.dumps(got_list)[:200]))
        return
    exp_by, got_by = {}, {}
    for e in exp_list:
        exp_by.setdefault(e["name"], []).append(e)
    for g in got_list:
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            details.append("%s: malformed entry %s" % (kind, json.dumps(g)[:200]))
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
        if kind == "tensor" and "nbytes" in g and g.get("dtype") in BITS \
                and isinstance(g.get("shape"), list):
            numel = 1
            for d in g["shape"]:
                numel *= d if isinstance(d, int) else 0
            want = numel * BITS[g["dtype"]] // 8
            if g["nbytes"] != want:
                details.append("tensor %r: nbytes %s, but %s x %s makes %d" % (
                    name, json.dumps(g["nbytes"]), g["dtype"], g["shape"], want))
    names = [g["name"] for g in got_list if isinstance(g, dict) and isinstance(g.get("name"), str)]
    if names != sorted(names, key=lambda s: s.encode("utf-8")):
        details.append("%s not sorted by name: %s" % (kind, names[:20]))


def inspect(rel):
    path = os.path.join(CORPUS, rel)
    return subprocess.run([CKPT, "inspect", path, "--json", "--hash", "sha256"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=TIMEOUT)


def parse_output(p, details):
    if p.returncode != 0:
        details.append("exit %d, stderr: %s" % (
            p.returncode, p.stderr.decode("utf-8", "replace").strip()[:500]))
    try:
        got = json.loads(p.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        details.append("stdout is not JSON (%s): %r" % (e, p.stdout[:300]))
        return None
    if not isinstance(got, dict):
        details.append("stdout is not a JSON object")
        return None
    return got


def check_record(rec):
    rel = rec["file"]
    case = "inspect %s" % rel
    try:
        p = inspect(rel)
    except (OSError, subprocess.TimeoutExpired) as e:
        report(False, case, ["could not run ckpt: %s" % e])
        return
    details = []
    if rec["format"] == "not-a-checkpoint":
        if p.returncode != 1:
            details.append("exit %d, expected 1" % p.returncode)
        if p.stdout:
            details.append("stdout not empty: %r" % p.stdout[:200])
        report(not details, case + " (not a checkpoint)", details)
        return
    got = parse_output(p, details)
    if got is not None:
        if got.get("format") != rec["format"]:
            details.append("format expected %r, got %r" % (rec["format"], got.get("format")))
        diff_entries("tensor", rec["tensors"], got.get("tensors"),
                     ("dtype", "shape", "sha256"), details)
        diff_entries("value", rec.get("values", []), got.get("values"),
                     ("type", "value"), details)
        if "metadata" in rec:
            if "metadata" not in got:
                details.append("metadata missing")
            elif got["metadata"] != rec["metadata"]:
                details.append("metadata expected %s, got %s" % (
                    json.dumps(rec["metadata"]), json.dumps(got["metadata"])))
    report(not details, case, details)


def check_sharded(records):
    case = "inspect %s (sharded set)" % SHARDED_INDEX
    shard_dir = os.path.dirname(SHARDED_INDEX) + "/"
    shards = [r for r in records if r["file"].startswith(shard_dir)
              and r["file"].endswith(".safetensors")]
    details = []
    if len(shards) != 6:
        details.append("expected.jsonl has %d shard records, expected 6" % len(shards))
    union = [t for r in shards for t in r["tensors"]]
    try:
        p = inspect(SHARDED_INDEX)
    except (OSError, subprocess.TimeoutExpired) as e:
        report(False, case, ["could not run ckpt: %s" % e])
        return
    got = parse_output(p, details)
    if got is not None:
        if got.get("format") != "safetensors-sharded":
            details.append("format expected 'safetensors-sharded', got %r" % got.get("format"))
        diff_entries("tensor", union, got.get("tensors"),
                     ("dtype", "shape", "sha256"), details)
    report(not details, case, details)


def main():
    path = os.path.join(CORPUS, "expected.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        report(False, "read %s" % path, [str(e)])
        records = []
    checked = [r for r in records if not r["file"].startswith("scan/")]
    if records and not checked:
        report(False, "corpus records", ["no record outside scan/"])
    for rec in checked:
        check_record(rec)
    if records:
        check_sharded(records)
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
