#!/usr/bin/python3
"""Differential test: torch < 0.4 tar checkpoints, torch.load against
ckpt scan.

Builds legacy tar checkpoints (members sys_info, pickle, storages,
tensors, as torch 0.1-0.3 wrote them) with a global planted in one of the
pickles torch unpickles (the storage count, a storage's tuple, the views,
the tensor count, a tensor's tuple, the main pickle), as V7 headers
without "ustar", with duplicate members (the last one counts) and with
random byte edits (fixed seed, CKPT_TARDIFF_RUNS files). The loader's
view: torch.load with a pickle module whose find_class records each
global and returns a harmless stub (nothing runs); ckpt's: the globals of
`ckpt scan --json`. Every global torch resolves must be among ckpt's,
unless ckpt says unscannable. A benign file loads in torch and scans safe.

Needs this interpreter's torch (Debian's 1.13), which still reads the tar
format. Environment: CKPT_BIN. Ends with "N passed, N failed".
"""
import json
import os
import pickle
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

CKPT = os.environ.get("CKPT_BIN", "ckpt")
RUNS = int(os.environ.get("CKPT_TARDIFF_RUNS", "200"))
SEED = int(os.environ.get("CKPT_TARDIFF_SEED", "1357"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from craft import SPOTS, legacy_tar as build  # noqa: E402
import suite  # noqa: E402
ESIZE = {"FloatStorage": 4, "DoubleStorage": 8, "LongStorage": 8, "IntStorage": 4,
         "ByteStorage": 1, "HalfStorage": 2}


def torch_globals(path):
    """Globals torch.load's legacy_load resolves from the file: its reading
    (tarfile.open, extract "storages" and "tensors", extractfile "pickle",
    or on a TarError the first pickle of the file), replayed with an
    unpickler whose find_class records each global and returns a stub."""
    seen = set()

    class Stub:
        def __init__(self, name):
            self.name = name

        def __call__(self, *a, **k):
            return 1

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add("%s.%s" % (module, name))
            return Stub(name)

        def persistent_load(self, pid):
            return None

    def load(f):
        return Recorder(f).load()

    tmp = tempfile.mkdtemp(prefix="ckpt-tarload-")
    try:
        with open(path, "rb") as raw:
            try:
                tar = tarfile.open(fileobj=raw, mode="r:", format=tarfile.PAX_FORMAT)
            except tarfile.TarError:
                raw.seek(0)
                load(raw)  # the magic number pickle; anything else fails after it
                return seen
            with tar:
                try:
                    tar.extract("storages", path=tmp)
                    with open(os.path.join(tmp, "storages"), "rb", 0) as f:
                        for _ in range(load(f)):
                            _key, _loc, cls = load(f)
                            numel, = struct.unpack("<q", f.read(8))
                            data = f.read(numel * ESIZE[cls.name])
                            if len(data) != numel * ESIZE[cls.name]:
                                raise EOFError
                        for _ in load(f):
                            pass
                    tar.extract("tensors", path=tmp)
                    with open(os.path.join(tmp, "tensors"), "rb", 0) as f:
                        for _ in range(load(f)):
                            _key, _sid, _t = load(f)
                            ndim, = struct.unpack("<i", f.read(4))
                            f.read(4)
                            struct.unpack("<%dq" % ndim, f.read(8 * ndim))
                            struct.unpack("<%dq" % ndim, f.read(8 * ndim))
                            struct.unpack("<q", f.read(8))
                    load(tar.extractfile("pickle"))
                except tarfile.TarError:
                    raw.seek(0)
                    load(raw)
    except Exception:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # one per input: 47k were left in /tmp
    return seen


def ckpt_view(path):
    out = subprocess.run([CKPT, "scan", "--json", path], capture_output=True, timeout=60)
    rep = json.loads(out.stdout)
    # ckpt saying it cannot follow a member (a count that is no int, a
    # stream that does not parse) counts as unscannable even when an
    # earlier finding already made the file unsafe
    lost = any(f["kind"] in ("tar-unfollowed", "parse-error") for f in rep["findings"])
    return "unscannable" if lost else rep["verdict"], set(rep["globals"])


def main():
    tally = suite.Tally(echo=False)
    try:
        import torch
    except ImportError:
        print("SKIP: no torch in this interpreter")
        return tally.end()
    tmp = tempfile.mkdtemp(prefix="ckpt-tardiff-")
    rng = random.Random(SEED)
    cases = []
    for spot in SPOTS:
        for v7 in (False, True):
            cases.append(("%s%s" % (spot, "-v7" if v7 else ""), build(spot, v7=v7)))
    cases.append(("main-dup", build("main", dup=True)))
    for i in range(RUNS):
        data = bytearray(build(rng.choice(SPOTS), v7=rng.random() < 0.5))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cases.append(("mutant-%d" % i, bytes(data)))
    stats = {"torch resolves globals": 0, "ckpt unscannable": 0}
    for label, data in cases:
        path = os.path.join(tmp, label + ".pt")
        with open(path, "wb") as f:
            f.write(data)
        want = torch_globals(path)
        verdict, got = ckpt_view(path)
        stats["torch resolves globals"] += bool(want)
        stats["ckpt unscannable"] += verdict == "unscannable"
        ok = want <= got or verdict == "unscannable"
        if label == "None":  # the benign file: torch loads it, ckpt calls it safe
            t = torch.load(path)
            ok = ok and verdict == "safe" and t["w"].tolist() == [1.0, 2.0, 3.0, 4.0]
        if label.startswith(("count", "storage", "views", "tensor", "main")):
            ok = ok and bool(want) and verdict in ("unsafe", "unscannable") and \
                any(g.startswith("posix.") for g in got)
        tally.report(ok, "%s (%s)" % (label, path), [
            "torch resolves %s, ckpt %s with %s" % (sorted(want), verdict, sorted(got))])
    print("files: %d; %s" % (len(cases), ", ".join("%s %d" % kv for kv in stats.items())))
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
