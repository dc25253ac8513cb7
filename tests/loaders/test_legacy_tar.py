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
import io
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import tarfile
import tempfile
import types

CKPT = os.environ.get("CKPT_BIN", "ckpt")
RUNS = int(os.environ.get("CKPT_TARDIFF_RUNS", "200"))
SEED = int(os.environ.get("CKPT_TARDIFF_SEED", "1357"))
SPOTS = ["count", "storage", "views", "tensor_count", "tensor", "main", None]


def evil(tag):
    """A protocol 2 pickle calling a distinct global: posix.<tag>()."""
    return b"\x80\x02cposix\n" + tag.encode() + b"\n)R."


def p2(obj):
    return pickle.dumps(obj, protocol=2)


def storages_member(spot):
    out = bytearray()
    out += evil("count_g") if spot == "count" else p2(1)
    if spot == "storage":  # the call stands where the storage class goes
        out += b"\x80\x02(K\x00X\x03\x00\x00\x00cpucposix\nstorage_g\n)R\x87."
    else:
        out += b"\x80\x02(K\x00X\x03\x00\x00\x00cpuctorch\nFloatStorage\n\x87."
    out += struct.pack("<q", 4) + struct.pack("<4f", 1, 2, 3, 4)
    out += evil("views_g") if spot == "views" else p2([])
    return bytes(out)


def tensors_member(spot):
    out = bytearray()
    out += evil("tcount_g") if spot == "tensor_count" else p2(1)
    if spot == "tensor":
        out += b"\x80\x02(K\x01K\x00cposix\ntensor_g\n)R\x87."
    else:
        out += b"\x80\x02(K\x01K\x00ctorch\nFloatTensor\n\x87."
    out += struct.pack("<i", 1) + b"\0" * 4 + struct.pack("<q", 4) + struct.pack("<q", 1)
    out += struct.pack("<q", 0)
    return bytes(out)


def main_member(spot):
    if spot == "main":
        return evil("main_g")
    # {'w': tensor 1}, the tensor as persistent id '1'
    return b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01X\x01\x00\x00\x001Qs."


def build(spot, v7=False, dup=False):
    members = [("sys_info", p2({"protocol_version": 1001, "little_endian": True})),
               ("pickle", main_member(spot)),
               ("storages", storages_member(spot)),
               ("tensors", tensors_member(spot))]
    if dup:  # a benign "pickle" first, the planted one last: tarfile takes the last
        members.insert(0, ("pickle", main_member(None)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = bytearray(buf.getvalue())
    if v7:  # blank the ustar magic and version, fix the checksum
        for off in range(0, len(data) - 512, 512):
            h = data[off:off + 512]
            if h[257:262] == b"ustar":
                h[257:265] = b"\0" * 8
                h[148:156] = b" " * 8
                h[148:156] = b"%06o\0 " % (sum(h) & 0o777777)
                data[off:off + 512] = h
    return bytes(data)


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
    passed = failed = 0
    try:
        import torch
    except ImportError:
        print("SKIP: no torch in this interpreter")
        print("0 passed, 0 failed")
        return 0
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
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL %s (%s): torch resolves %s, ckpt %s with %s"
                  % (label, path, sorted(want), verdict, sorted(got)))
    print("files: %d; %s" % (len(cases), ", ".join("%s %d" % kv for kv in stats.items())))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
