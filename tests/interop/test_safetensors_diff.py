#!/usr/bin/python3
"""Differential test: ckpt's safetensors header parser against the
reference reader (the `safetensors` package's Rust core, safe_open).

Files: headers generated here (escapes, surrogate pairs, whitespace and
space padding, metadata, zero-size and rank-0 tensors, every dtype both
know), then mutated with a fixed seed (CKPT_STDIFF_RUNS mutants, 400 by
default; CKPT_STDIFF_SEED): bytes flipped, inserted, deleted, spans
duplicated, numbers rewritten (-0, 1.0, 1e0, 2^64), escapes and nesting
added. For each file both readers must agree on accept/reject, and on an
accepted file list the same tensors (name, dtype, shape) and metadata.

Allowed differences, counted: ckpt refuses duplicate keys (the reference
keeps the last; FORMATS.md §1.2) and \\u0000 in a string (names are C
strings). The reference runs in the project virtualenv
(CKPT_SRC/.venv/bin/python); without it a line says the test is skipped.
Ends with "N passed, N failed".
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
BIN = os.environ.get("CKPT_BIN", os.path.join(SRC, "build", "ckpt"))
VENV_PY = os.path.join(SRC, ".venv", "bin", "python")
RUNS = int(os.environ.get("CKPT_STDIFF_RUNS", "400"))
SEED = int(os.environ.get("CKPT_STDIFF_SEED", "17"))

# dtype -> bits; both readers know these (safetensors 0.4+)
DTYPES = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
          "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
          "F32": 32, "F64": 64, "I64": 64, "U64": 64}

PEER = r"""
import json, sys
from safetensors import safe_open
out = []
for path in sys.argv[1:]:
    try:
        with safe_open(path, framework="numpy") as f:
            ts = sorted([k, f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())]
                        for k in f.keys())
            out.append({"ok": True, "tensors": ts, "metadata": f.metadata() or {}})
    except Exception as e:
        out.append({"ok": False, "error": str(e)[:200]})
print(json.dumps(out))
"""


def ckpt_view(path):
    p = subprocess.run([BIN, "inspect", "--json", path], capture_output=True)
    if p.returncode != 0:
        return {"ok": False, "error": p.stderr.decode(errors="replace")[:300]}
    doc = json.loads(p.stdout)
    ts = sorted([t["name"], t["dtype"], t["shape"]] for t in doc["tensors"])
    return {"ok": True, "tensors": ts, "metadata": doc.get("metadata") or {}}


def name(rng, i):
    base = rng.choice(["model.layers.%d.w" % i, "emb\\u00e9%d" % i,
                       "k\\ud83d\\ude00%d" % i, "tab\\t%d" % i,
                       "q\\\"uote%d" % i, "\u00fcnicode%d" % i, "s/%d" % i])
    return base


def make(rng):
    """(header text, data bytes) of a valid file."""
    n = rng.randint(0, 6)
    parts, off = [], 0
    if rng.random() < 0.5:
        md = {"format": "pt", "k\\u00e9y": "v\\n"}
        parts.append('"__metadata__":{%s}' % ",".join(
            '"%s":"%s"' % kv for kv in md.items()))
    for i in range(n):
        dt = rng.choice(sorted(DTYPES))
        shape = rng.choice([[], [0], [2, 0], [1], [2, 3], [3, 1, 2]])
        numel = 1
        for d in shape:
            numel *= d
        nb = numel * DTYPES[dt] // 8
        entry = ['"dtype":"%s"' % dt, '"shape":%s' % json.dumps(shape),
                 '"data_offsets":[%d,%d]' % (off, off + nb)]
        if rng.random() < 0.2:
            entry.append('"extra":{"a":[1,2.5,null,true,"x"]}')
        rng.shuffle(entry)
        ws = rng.choice(["", " ", "\n\t"])
        parts.append('"%s":%s{%s}' % (name(rng, i), ws, ("," + ws).join(entry)))
        off += nb
    rng.shuffle(parts)
    text = "{" + ",".join(parts) + "}"
    if rng.random() < 0.3:
        text = rng.choice([" ", "\t\n", "\r "]) + text
    text += " " * rng.randint(0, 7)
    return text.encode(), bytes(rng.randrange(256) for _ in range(off))


SNIPPETS = [b"-0", b"1.0", b"1e0", b"18446744073709551615", b"18446744073709551616",
            b"\\ud800", b"\\udc00", b"\\u0041", b"\\x", b"\x00", b"\xff", b"\xc3\xa9",
            b"[[[[", b"]]]]", b",", b":", b"{}", b"[]", b"null", b"\"", b"\\",
            b" ", b"\"__metadata__\"", b"\"dtype\":\"F32\"", b"\"shape\":[1]"]


def mutate(rng, header):
    h = bytearray(header)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(6)
        pos = rng.randrange(len(h) + 1)
        if k == 0 and h:
            h[min(pos, len(h) - 1)] = rng.randrange(256)
        elif k == 1:
            h[pos:pos] = rng.choice(SNIPPETS)
        elif k == 2 and h:
            del h[pos:pos + rng.randint(1, 4)]
        elif k == 3 and h:
            a = rng.randrange(len(h))
            b = min(len(h), a + rng.randint(1, 60))
            h[pos:pos] = h[a:b]
        elif k == 4:
            # rewrite a number
            digits = [i for i, c in enumerate(h) if 0x30 <= c <= 0x39]
            if digits:
                i = rng.choice(digits)
                h[i:i + 1] = rng.choice(SNIPPETS[:5])
        else:
            # duplicate one whole top-level member
            text = bytes(h)
            i = text.find(b'":{')
            j = text.find(b'}', i + 3)
            s = text.rfind(b'"', 0, i)
            if i > 0 and j > 0 and s >= 0:
                h[len(h) - 1:len(h) - 1] = b"," + text[s:j + 1]
    return bytes(h)


def has_duplicate_keys(header):
    def hook(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate")
        return dict(pairs)
    try:
        json.loads(header.decode("utf-8"), object_pairs_hook=hook)
    except ValueError as e:
        return "duplicate" in str(e)
    return False


def main():
    if not os.path.exists(VENV_PY):
        print("skipped: no project virtualenv at %s (the reference reader, "
              "safetensors, lives there)" % VENV_PY)
        return 0
    rng = random.Random(SEED)
    cases = []
    for i in range(RUNS):
        header, data = make(rng)
        if i % 4:
            header = mutate(rng, header)
        cases.append(struct.pack("<Q", len(header)) + header + data)
    passed = failed = allowed = 0
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, blob in enumerate(cases):
            p = os.path.join(d, "c%04d.safetensors" % i)
            with open(p, "wb") as f:
                f.write(blob)
            paths.append(p)
        peer = json.loads(subprocess.run([VENV_PY, "-c", PEER] + paths, check=True,
                                         capture_output=True, text=True).stdout)
        for p, blob, ref in zip(paths, cases, peer):
            mine = ckpt_view(p)
            header = blob[8:8 + struct.unpack("<Q", blob[:8])[0]]
            if mine == ref or (not mine["ok"] and not ref["ok"]):
                passed += 1
                continue
            if ref["ok"] and not mine["ok"] and (
                    has_duplicate_keys(header) or b"\\u0000" in header):
                allowed += 1
                continue
            failed += 1
            if failed <= 5:
                print("FAIL seed %d %s\n  header %r\n  ckpt %s\n  reference %s" % (
                    SEED, os.path.basename(p), header[:300], mine, ref))
    print("%d agreed, %d allowed differences (duplicate keys, \\u0000)" % (passed, allowed))
    print("%d passed, %d failed" % (passed + allowed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
