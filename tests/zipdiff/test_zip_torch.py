#!/usr/bin/python3
"""Differential test: ckpt's zip directory against torch's own reader.

For every archive, torch._C.PyTorchFileReader (miniz) lists the records and
reads each one; ckpt (`test_zip --view`, src/container/zip.c as torch.c
opens it) lists the central directory and reads what a lookup of each name
finds. A failure is an archive that both read and read differently: other
record names, or other bytes for one record. ckpt refusing an archive or a
member torch reads is allowed (scan then says unscannable, verify
CORRUPT) and counted.

Archives: torch.save output and archives built here (case-variant names,
duplicates, ZIP64 locator/record variants, prefixes, comments, deflated
members), then mutated with a fixed seed (CKPT_ZIPDIFF_RUNS mutants, 300
by default; CKPT_ZIPDIFF_SEED). Oracles: Debian's torch 1.13 (this
interpreter) and, when the project virtualenv exists (CKPT_SRC/.venv),
torch 2.x; a line says when it is skipped. A failing mutant is minimised
(edits dropped while it still fails) and written to FAILED_DIR; copy it
into corpus/, which every run replays.

Longer run: CKPT_ZIPDIFF_RUNS=20000 CKPT_ZIPDIFF_SEED=$RANDOM
  /usr/bin/python3 tests/zipdiff/test_zip_torch.py
Environment: CKPT_BUILD (build directory with tests/test_zip), CKPT_SRC.
Ends with "N passed, N failed".
"""
import io
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("CKPT_BUILD", os.path.join(SRC, "build"))
VIEW = os.path.join(BUILD, "tests", "test_zip")
CORPUS = os.path.join(HERE, "corpus")
RUNS = int(os.environ.get("CKPT_ZIPDIFF_RUNS", "300"))
SEED = int(os.environ.get("CKPT_ZIPDIFF_SEED", "1234"))
VENV_PY = os.path.join(SRC, ".venv", "bin", "python")
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402
from craft import zip_archive as build, zip_two_directories  # noqa: E402

TALLY = suite.Tally(echo=False)
report = TALLY.report


# ------------------------------------------------------------ builder

def bases():
    """(name, bytes) archives to mutate."""
    v = ("archive/version", b"3\n", 0)
    pkl = ("archive/data.pkl", b"\x80\x02}q\x00.", 0)
    yield "plain", build([pkl, v, ("archive/data/0", bytes(range(64)), 0)])
    yield "zip64", build([pkl, v, ("archive/data/0", bytes(64), 0)], zip64=True)
    yield "deflated", build([pkl, v, ("archive/data/0", b"ab" * 300, 8)], zip64=True)
    yield "upper", build([("archive/DATA.PKL", b"\x80\x02K\x01.", 0), v])
    yield "case_dups", build([pkl, ("archive/Data.pkl", b"\x80\x02K\x02.", 0),
                              ("archive/DATA.pkl", b"\x80\x02K\x03.", 0), v])
    yield "exact_dups", build([pkl, v, ("archive/data.pkl", b"\x80\x02K\x04.", 0)])
    yield "prefixed", build([pkl, v], prefix=b"GIF89a;" * 3)
    yield "prefixed64", build([pkl, v], zip64=True, prefix=b"\x80\x02K\x05." * 2)
    yield "comment", build([pkl, v], comment=b"PK\x05\x06" + b"c" * 40)
    yield "record_in_comment", build([pkl, v], zip64=True, record_in_comment=True,
                                     locator=0)
    yield "locator_nowhere", build([pkl, v], zip64=True, locator=3)
    yield "name_mismatch", build([pkl, v], cd_names=["archive/data.pkl", "archive/VERSION"])
    # 65 names filed under one slot of ckpt's lookup table: past its 64
    # probes, the table is given up for the sorted order (test_zip's
    # --colliding finds them by ckpt's own hash)
    chain = subprocess.run([VIEW, "--colliding", "65", "archive/c/"], capture_output=True,
                           check=True, timeout=60).stdout.decode().split()
    yield "hash_chain", build([pkl, v] + [(n, bytes([i]), 0) for i, n in enumerate(chain)])
    yield "two_directories", zip_two_directories(
        [("archive/data.pkl", b"\x80\x02X\x00\x01\x00\x00" + b"a" * 256 + b"0K\x06.", 0), v],
        [pkl, v])
    try:
        import torch
        buf = io.BytesIO()
        torch.save({"w": torch.arange(6.0).reshape(2, 3), "step": 3}, buf)
        yield "torch_save", buf.getvalue()
    except ImportError:
        print("torch not importable here: no torch.save base archive")


# ------------------------------------------------------------ mutations

INTERESTING = [0, 1, 0x7F, 0x80, 0xFE, 0xFF, 0x20, 0x41, 0x61, 0x2F]


def mutate(data, rng):
    """A list of (offset, byte) edits, biased to the directory and end
    records (the last 400 bytes) and to name bytes."""
    edits = []
    for _ in range(rng.choice([1, 1, 2, 3, 5])):
        if rng.random() < 0.8:
            off = rng.randrange(max(0, len(data) - 400), len(data))
        else:
            off = rng.randrange(len(data))
        old = data[off]
        kind = rng.random()
        if kind < 0.3:
            new = rng.choice(INTERESTING)
        elif kind < 0.5:
            new = (old + rng.choice([1, -1, 2, -2])) & 0xFF
        elif kind < 0.7 and 0x41 <= (old | 0x20) - 0x20 <= 0x5A:
            new = old ^ 0x20  # flip the case of a letter
        else:
            new = rng.randrange(256)
        edits.append((off, new))
    return edits


def apply(data, edits):
    b = bytearray(data)
    for off, new in edits:
        b[off] = new
    return bytes(b)


# ------------------------------------------------------------ views

def ckpt_views(paths):
    out = subprocess.run([VIEW, "--view"] + paths, capture_output=True, timeout=600)
    lines = out.stdout.decode().splitlines()
    if out.returncode != 0 or len(lines) != len(paths):
        raise RuntimeError("test_zip --view failed: %r" % out.stderr[-500:])
    return [json.loads(l) for l in lines]


def torch_views(python, paths, listfile):
    with open(listfile, "w") as f:
        f.write("\n".join(paths) + "\n")
    out = subprocess.run([python, os.path.join(HERE, "torch_view.py"), listfile],
                         capture_output=True, timeout=1200)
    lines = out.stdout.decode().splitlines()
    if len(lines) != len(paths):
        raise RuntimeError("torch_view.py under %s failed: %r" % (python, out.stderr[-800:]))
    return [json.loads(l) for l in lines]


def disagreement(t, c):
    """None when ckpt's view c agrees with torch's view t, else why not."""
    if not t["ok"] or not c["ok"]:
        return None  # a refusal on either side is no second reading
    names = c["names"]
    if not names or "/" not in names[0]:
        return None
    prefix = names[0].split("/", 1)[0] + "/"
    mine = {}
    for name, read in zip(names, c["reads"]):
        if name.startswith(prefix):
            mine.setdefault(name[len(prefix):], read)
    want = [n for n in (x[len(prefix):] for x in names if x.startswith(prefix))]
    got = [r for r in t["records"]]
    if [r for r in got if not r.endswith(".debug_pkl")] != \
            [r for r in want if not r.endswith(".debug_pkl")]:
        return "records: torch %r, ckpt %r" % (got[:8], want[:8])
    for name, read in zip(t["records"], t["reads"]):
        if read is None or mine.get(name) is None:
            continue
        if read != mine[name]:
            return "record %r: torch reads %s..., ckpt %s..." % (name, read[:40], mine[name][:40])
    return None


# ------------------------------------------------------------ run

def main():
    if not os.path.exists(VIEW):
        print("SKIP: %s is not built" % VIEW)
        return 0
    oracles = [("torch-1.13", sys.executable)]
    if os.path.exists(VENV_PY):
        oracles.append(("torch-2.x", VENV_PY))
    else:
        print("SKIP torch 2.x oracle: no project virtualenv at %s" % VENV_PY)
    tmp = tempfile.mkdtemp(prefix="ckpt-zipdiff-")
    failed_dir = os.environ.get("CKPT_ZIPDIFF_FAILED", os.path.join(tmp, "failed"))
    rng = random.Random(SEED)
    cases = []  # (label, base bytes, edits)
    base_list = list(bases())
    for label, data in base_list:
        cases.append((label, data, []))
    if os.path.isdir(CORPUS):
        for fn in sorted(os.listdir(CORPUS)):
            with open(os.path.join(CORPUS, fn), "rb") as f:
                cases.append(("corpus/" + fn, f.read(), []))
    for i in range(RUNS):
        label, data = base_list[i % len(base_list)]
        cases.append(("%s~%d" % (label, i), data, mutate(data, rng)))
    paths = []
    for i, (label, data, edits) in enumerate(cases):
        p = os.path.join(tmp, "%05d.zip" % i)
        with open(p, "wb") as f:
            f.write(apply(data, edits))
        paths.append(p)
    mine = ckpt_views(paths)
    stats = {"both read": 0, "ckpt refuses": 0, "torch refuses": 0, "both refuse": 0}
    for name, python in oracles:
        theirs = torch_views(python, paths, os.path.join(tmp, "list.txt"))
        for (label, data, edits), t, c, p in zip(cases, theirs, mine, paths):
            key = ("both read" if t["ok"] and c["ok"] else "ckpt refuses" if t["ok"]
                   else "torch refuses" if c["ok"] else "both refuse")
            stats[key] += 1
            why = disagreement(t, c)
            if why and edits:
                edits = minimise(data, edits, python, tmp)
                os.makedirs(failed_dir, exist_ok=True)
                out = os.path.join(failed_dir, "%s-%s.zip" % (name, label.replace("/", "_")))
                with open(out, "wb") as f:
                    f.write(apply(data, edits))
                why += " (minimised to %d edits: %s)" % (len(edits), out)
            report(why is None, "%s %s" % (name, label), [why] if why else ())
    print("cases per oracle: %d; %s" % (len(cases), ", ".join(
        "%s %d" % kv for kv in stats.items())))
    return TALLY.end()


def minimise(data, edits, python, tmp):
    """Drops edits one at a time while the disagreement remains."""
    p = os.path.join(tmp, "min.zip")
    i = 0
    while i < len(edits) and len(edits) > 1:
        trial = edits[:i] + edits[i + 1:]
        with open(p, "wb") as f:
            f.write(apply(data, trial))
        if disagreement(torch_views(python, [p], os.path.join(tmp, "min.txt"))[0],
                        ckpt_views([p])[0]):
            edits = trial
        else:
            i += 1
    return edits


if __name__ == "__main__":
    sys.exit(main())
