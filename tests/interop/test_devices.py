#!/usr/bin/python3
"""Where the storages were saved (issue 14 item 6), with files torch 2.13
(.venv/bin/python) and torch 1.13 (Debian's python3) wrote.

A CPU-only machine cannot make a CUDA checkpoint, so each torch saves on
the CPU and the test rewrites the location torch put in each storage's
persistent id ('storage', type, key, location, numel) from "cpu" to
"cuda:0" (pickle memoizes the string: one literal serves every storage),
leaving everything else byte for byte: exactly what torch.save writes on
a GPU machine. Then
  - `ckpt inspect --json` gives every tensor its "device";
  - `ckpt inspect` adds a DEVICE column, absent for a CPU-only file;
  - `ckpt doctor` (text and JSON) says torch.load needs map_location;
  - torch itself reads the location we wrote (map_location records it);
  - ckpt.load puts the tensors on the CPU, equal to the originals.

Environment: CKPT_BIN, CKPT_SRC, CKPT_LIB. Ends with "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", os.path.join(SRC, "build", "ckpt"))
LIB = os.environ.get("CKPT_LIB", os.path.join(SRC, "build", "libckpt.so"))
VENV = suite.VENV
PYTHONS = [p for p in (VENV, suite.DEBIAN) if os.path.exists(p)]

GEN = r"""
import collections, sys, torch
torch.manual_seed(0)
sd = collections.OrderedDict(w=torch.randn(3, 4), b=torch.arange(4, dtype=torch.int64),
                             h=torch.randn(2, dtype=torch.float16))
torch.save({"model": sd, "step": 7}, sys.argv[1])
"""

# what torch.load saw: the location of each storage, through map_location
SEEN = r"""
import json, sys, torch
seen = []
def where(storage, location):
    seen.append(location)
    return storage
obj = torch.load(sys.argv[1], map_location=where)
print(json.dumps(sorted(seen)))
"""

LOAD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[3])
import ckpt
a = ckpt.load(sys.argv[1])
b = torch.load(sys.argv[2])
out = {k: [str(v.device), bool(torch.equal(v, b["model"][k]))] for k, v in a["model"].items()}
print(json.dumps(out))
"""


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       **kw)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def relocate(src, dst, location):
    """src with the storage location "cpu" replaced by `location`
    (BINUNICODE 'cpu' in data.pkl, written once, then memoized)."""
    old = b"X\x03\x00\x00\x00cpu"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/data.pkl"):
                assert data.count(old) == 1, data.count(old)
                data = data.replace(old, b"X" + len(location).to_bytes(4, "little") +
                                    location.encode())
            zout.writestr(info, data)


def made(python, tmp):
    name = "torch2" if python == VENV else "torch1"
    plain = os.path.join(tmp, name + "_cpu.pt")
    moved = os.path.join(tmp, name + "_cuda.pt")
    rc, out, err = run([python, "-c", GEN, plain])
    assert rc == 0, err
    relocate(plain, moved, "cuda:0")
    return plain, moved


def env():
    e = dict(os.environ, CKPT_LIB=LIB)
    return e


def check_one(python, tmp):
    plain, moved = made(python, tmp)
    # torch reads back the locations the file holds
    rc, out, err = run([python, "-c", SEEN, moved])
    assert rc == 0, err
    assert json.loads(out) == ["cuda:0"] * 3, out

    rc, out, err = run([CKPT, "inspect", "--json", moved])
    assert rc == 0, err
    devices = {t["name"]: t["device"] for t in json.loads(out)["tensors"]}
    assert devices == {"model.w": "cuda:0", "model.b": "cuda:0", "model.h": "cuda:0"}, devices
    rc, out, err = run([CKPT, "inspect", "--json", plain])
    assert {t["device"] for t in json.loads(out)["tensors"]} == {"cpu"}, out

    rc, out, err = run([CKPT, "inspect", moved])
    assert rc == 0, err
    lines = out.splitlines()
    head = next(r for r in lines if r.startswith("NAME"))
    assert head.split() == ["NAME", "DTYPE", "SHAPE", "BYTES", "DEVICE"], head
    row = {r.split()[0]: r.split() for r in lines if r.startswith("model.")}
    assert row["model.w"][-1] == "cuda:0" and row["model.h"][-1] == "cuda:0", out
    rc, out, err = run([CKPT, "inspect", plain])
    assert "NAME" in out and "DEVICE" not in out, out

    rc, out, err = run([CKPT, "doctor", moved])
    assert "3 tensors saved on cuda:0:" in out and "map_location" in out, out
    rc, out, err = run([CKPT, "doctor", "--json", moved])
    notes = json.dumps(json.loads(out))
    assert "saved on cuda:0" in notes and "map_location" in notes, out
    rc, out, err = run([CKPT, "doctor", plain])
    assert "map_location" not in out, out

    rc, out, err = run([python, "-c", LOAD, moved, plain, os.path.join(SRC, "python")],
                       env=env())
    assert rc == 0, err
    got = json.loads(out)
    assert got == {k: ["cpu", True] for k in ("w", "b", "h")}, got


def test_devices_torch2():
    if VENV not in PYTHONS:
        print("SKIP torch 2.13: no %s" % VENV)
        return
    with tempfile.TemporaryDirectory() as tmp:
        check_one(VENV, tmp)


def test_devices_torch1():
    with tempfile.TemporaryDirectory() as tmp:
        check_one(suite.DEBIAN, tmp)


if __name__ == "__main__":
    sys.exit(suite.run_cases(globals(), os.path.abspath(__file__)))
