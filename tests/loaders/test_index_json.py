#!/usr/bin/python3
"""Differential test: the shards `ckpt scan` follows from a sharded index
against the shards a loader opens (json.load(open(index, encoding="utf-8"))
["weight_map"].values(), as transformers and safetensors do).

Every shard file is a pickle that calls os.system, each under its own name.
For each generated index (NaN/Infinity, big numbers, duplicate keys at both
levels, escaped names, non-string values, whitespace, then random byte
edits; fixed seed, CKPT_INDEXDIFF_RUNS documents), the loader's set of
opened shards must be a subset of the shards ckpt reports dangerous
findings in, unless ckpt says unscannable. A failing document is printed
and kept under FAILED_DIR.

Environment: CKPT_BIN. Ends with "N passed, N failed".
"""
import json
import os
import random
import subprocess
import sys
import tempfile

CKPT = os.environ.get("CKPT_BIN", "ckpt")
RUNS = int(os.environ.get("CKPT_INDEXDIFF_RUNS", "300"))
SEED = int(os.environ.get("CKPT_INDEXDIFF_SEED", "4321"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from craft import index_traps  # noqa: E402
import suite  # noqa: E402
SHARDS = ["s%d.bin" % i for i in range(6)]


def loader_view(doc):
    """The shard names the loader opens, or None when loading fails."""
    try:
        index = json.loads(doc.decode("utf-8"))
        names = set(index["weight_map"].values())
    except Exception:
        return None
    # a name that is no file here fails to open: only existing shards count
    return {n for n in names if isinstance(n, str) and n in SHARDS}


def escape_some(name, rng):
    return "".join("\\u%04x" % ord(c) if rng.random() < 0.3 else c for c in name)


def rand_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.5:
        return rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "-0.0", "12" * 40,
                           "true", "null", '"\\ud800"', '"x\\"y"', "0", "-12.5e-3"])
    if r < 0.75:
        return "[%s]" % ", ".join(rand_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return "{%s}" % ", ".join('"k%d": %s' % (i, rand_value(rng, depth + 1))
                              for i in range(rng.randrange(3)))


def weight_map(rng):
    items = []
    for _ in range(rng.randrange(1, 6)):
        key = rng.choice(["a", "b", "c", "\\u0061", "model.w"])
        if rng.random() < 0.1:
            val = rand_value(rng)
        else:
            val = '"%s"' % escape_some(rng.choice(SHARDS), rng)
        items.append('"%s":%s%s' % (key, rng.choice(["", " ", "\n\t"]), val))
    return "{%s}" % ",".join(items)


def document(rng):
    parts = []
    for _ in range(rng.randrange(1, 4)):
        k = rng.random()
        if k < 0.6:
            parts.append('"weight_map": %s' % weight_map(rng))
        elif k < 0.7:
            parts.append('"weight_m\\u0061p": %s' % weight_map(rng))
        else:
            parts.append('"metadata": %s' % rand_value(rng))
    rng.shuffle(parts)
    doc = ("{" + ", ".join(parts) + "}" + rng.choice(["", "\n", "  \r\n"])).encode()
    if rng.random() < 0.3:  # byte edits: what json refuses, ckpt may refuse
        b = bytearray(doc)
        for _ in range(rng.randrange(1, 3)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([ord(c) for c in ' ,:{}[]"\\0N-eE'] + [0xff, 0x09])
        doc = bytes(b)
    return doc


def ckpt_view(path):
    out = subprocess.run([CKPT, "scan", "--json", path], capture_output=True, timeout=60)
    rep = json.loads(out.stdout)
    seen = {f["member"] for f in rep["findings"]
            if f["severity"] == "dangerous" and f.get("member")}
    return rep["verdict"], seen


def main():
    tally = suite.Tally(echo=False)
    tmp = tempfile.mkdtemp(prefix="ckpt-indexdiff-")
    for s in SHARDS:
        with open(os.path.join(tmp, s), "wb") as f:
            f.write(b"cos\nsystem\n(S'echo %s'\ntR." % s.encode())
    failed_dir = os.environ.get("CKPT_INDEXDIFF_FAILED", os.path.join(tmp, "failed"))
    rng = random.Random(SEED)
    stats = {"loader opens shards": 0, "loader fails": 0, "ckpt unscannable": 0}
    docs = [doc for _, doc in index_traps("s1.bin", "s2.bin")]
    docs += [document(rng) for _ in range(RUNS)]
    path = os.path.join(tmp, "model.bin.index.json")
    for i, doc in enumerate(docs):
        with open(path, "wb") as f:
            f.write(doc)
        want = loader_view(doc)
        verdict, seen = ckpt_view(path)
        if want is None:
            stats["loader fails"] += 1
        else:
            stats["loader opens shards"] += 1
        if verdict == "unscannable":
            stats["ckpt unscannable"] += 1
        ok = want is None or want <= seen or verdict == "unscannable"
        tally.report(ok, "document %d" % i, [] if ok else [
            "loader opens %s, ckpt %s scanned %s" % (sorted(want), verdict, sorted(seen))])
        if not ok:
            os.makedirs(failed_dir, exist_ok=True)
            keep = os.path.join(failed_dir, "index-%d.json" % i)
            with open(keep, "wb") as f:
                f.write(doc)
            print("    kept as %s" % keep)
    print("documents: %d; %s" % (len(docs), ", ".join("%s %d" % kv for kv in stats.items())))
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
