#!/usr/bin/python3
"""ckpt scan, ckpt verify and ckpt.load on directories written by
ckpt.dcp.Writer (one safetensors file per rank; every slice is one
tensor's raw data inside it): scan follows the reader's one rule for what
a slice is (open/dcp.h ckpt_dcp_slice_format), so tensor data that happens
to start like a pickle, a zip or a safetensors header is data, never
scanned as a pickle. Regression: with 12 or more tensors such a directory
scanned UNSCANNABLE ("slice holds no pickle..."), with 20 UNSAFE
("dangerous global ?.ext:..."), while verify passed it.

Also what verify says of a damaged DCP slice: the fqn and the data
file@slice (not tensor ""), every damaged tensor with -v, and a damaged
disk field of a slice's zip end record as corruption naming the field,
not as an unsupported multi-disk archive.

Hostile slices stay caught: a bytes item (torch.save'd, which DCP's
planner loads with weights_only=False) holding a dangerous pickle, as a
torch.save zip or as a raw pickle in place of its bytes.

Needs torch >= 2.4 (the repository's .venv). Environment: CKPT_BIN,
CKPT_SRC, CKPT_LIB.
"""
import os
import sys

SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dcp  # noqa: E402

torch_dcp.require(SRC)

import pickle  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "tests"))
import ckpt  # noqa: E402
import ckpt.dcp  # noqa: E402
import suite  # noqa: E402

warnings.filterwarnings("ignore")
BIN = os.environ.get("CKPT_BIN", "ckpt")
TMP = tempfile.mkdtemp(prefix="ckpt-dcpw-")


def run(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def save(name, state):
    d = os.path.join(TMP, name)
    dcp.save(state, storage_writer=ckpt.dcp.Writer(d))
    return d


def flat(obj, prefix=""):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flat(v, "%s%s." % (prefix, k)))
        return out
    if isinstance(obj, (list, tuple)):
        return flat(dict(enumerate(obj)), prefix)
    return {prefix[:-1]: obj}


def assert_safe_ok_loads(d, state):
    rc, out, err = run("scan", d)
    assert rc == 0 and out.startswith("SAFE ") and "(0 dangerous, 0 suspicious, 0 info)" in out, \
        out + err
    rc, out, err = run("verify", d)
    assert rc == 0 and out.startswith("OK "), out + err
    got, want = flat(ckpt.load(d)), flat(state)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(got[k], v), k
        else:
            assert got[k] == v, (k, got[k], v)


class _System:
    def __reduce__(self):
        return (os.system, ("true",))


def test_writer_dirs_of_many_tensors_scan_safe():
    torch.manual_seed(0)
    for n in (1, 12, 20, 24, 100):
        state = {"t%d" % i: torch.randn(4) for i in range(n)}
        assert_safe_ok_loads(save("n%d" % n, state), state)


def test_model_and_adamw_state_scan_safe():
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(2, 8)).sum().backward()
    opt.step()
    state = {"model": m.state_dict(), "optim": opt.state_dict()}
    assert_safe_ok_loads(save("adamw", state), state)


def test_tensor_data_shaped_like_a_pickle_zip_or_header_is_data():
    evil = pickle.dumps(_System(), protocol=2)
    state = {
        "a_pickle": torch.frombuffer(bytearray(evil), dtype=torch.uint8),
        "b_zip": torch.frombuffer(bytearray(b"PK\3\4" + bytes(60)), dtype=torch.uint8),
        # 8 bytes then '{': what ckpt_detect_format takes for a safetensors file
        "c_header": torch.frombuffer(bytearray(b"\x10" + bytes(7) + b"{}" + bytes(6)),
                                     dtype=torch.uint8),
        "d_proto": torch.frombuffer(bytearray(b"\x80\x04" + bytes(14)), dtype=torch.uint8),
    }
    assert_safe_ok_loads(save("shaped", state), state)


def test_hostile_bytes_item_zip_is_unsafe():
    d = save("hostile_zip", {"w": torch.ones(3), "evil": _System()})
    rc, out, err = run("scan", d)
    assert rc == 1 and "UNSAFE" in out and "__0_0.distcp@" in out and "posix.system" in out, \
        out + err


def test_hostile_bytes_item_raw_pickle_is_unsafe():
    d = save("hostile_raw", {"w": torch.ones(3), "note": "x" * 200})
    meta = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
    info = next(v for k, v in meta.storage_data.items() if k.fqn == "note")
    evil = pickle.dumps(_System(), protocol=2)
    assert len(evil) <= info.length
    with open(os.path.join(d, info.relative_path), "r+b") as fh:
        fh.seek(info.offset)
        fh.write(evil + b" " * (info.length - len(evil)))
    rc, out, err = run("scan", d)
    assert rc == 1 and "UNSAFE" in out and "posix.system" in out, out + err
    assert "__0_0.distcp@%d" % info.offset in out, out
    try:
        ckpt.load(d)
    except ckpt.Error as e:
        assert "note" in str(e) or "posix.system" in str(e), str(e)
    else:
        raise AssertionError("ckpt.load read a bytes item that is a raw pickle")


def flip(path, off):
    with open(path, "r+b") as fh:
        fh.seek(off)
        byte = fh.read(1)
        fh.seek(off)
        fh.write(bytes([byte[0] ^ 0x10]))


def zip_data_offset(path, base, length, suffix):
    """Absolute offset of member `suffix`'s data in the zip at [base, +length)."""
    import io
    import zipfile
    with open(path, "rb") as fh:
        fh.seek(base)
        blob = fh.read(length)
    info = next(i for i in zipfile.ZipFile(io.BytesIO(blob)).infolist()
                if i.filename.endswith(suffix))
    h = info.header_offset
    return base + h + 30 + int.from_bytes(blob[h + 26:h + 28], "little") + \
        int.from_bytes(blob[h + 28:h + 30], "little")


def slice_of(d, fqn):
    meta = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
    return next(v for k, v in meta.storage_data.items() if k.fqn == fqn)


def torch_layout(name):
    """torch's own FileSystemWriter: every chunk a torch.save zip slice."""
    d = os.path.join(TMP, name)
    torch.manual_seed(2)
    m = torch.nn.Module()
    m.fc1 = torch.nn.Linear(8, 16)
    dcp.save({"model": m.state_dict()}, checkpoint_id=d)
    return d


def test_corrupt_torch_slice_names_the_fqn_and_the_file():
    d = torch_layout("corrupt_crc")
    info = slice_of(d, "model.fc1.bias")
    path = os.path.join(d, info.relative_path)
    off = zip_data_offset(path, info.offset, info.length, "/data/0")
    flip(path, off + 3)
    rc, out, err = run("verify", "-v", d)
    part = "%s@%d" % (path, info.offset)
    assert rc == 1 and out.startswith("CORRUPT %s: %s: CRC-32 " % (d, part)), out + err
    assert "the member holds tensor model.fc1.bias (archive/data/0, offset %d)\n"  \
        % (off - info.offset) in out, out
    assert "\n  damaged tensor (1): model.fc1.bias\n" in out, out


def test_corrupt_digest_names_the_fqn():
    # ckpt convert writes torch.save slices with ckpt's XXH3 digests
    src = os.path.join(TMP, "x.pt")
    m = torch.nn.Module()
    m.fc1 = torch.nn.Linear(8, 16)
    torch.save({"model": m.state_dict()}, src)
    d = os.path.join(TMP, "conv.dcp")
    rc, out, err = run("convert", src, d)
    assert rc == 0, out + err
    info = slice_of(d, "model.fc1.weight")
    path = os.path.join(d, info.relative_path)
    flip(path, zip_data_offset(path, info.offset, info.length, "/data/0"))
    rc, out, err = run("verify", d)
    assert rc == 1 and ("%s@%d: tensor \"model.fc1.weight\": XXH3-64 " % (path, info.offset)) \
        in out, out + err
    # a Writer directory: its tensors are named by fqn in the file already
    state = {"t%d" % i: torch.randn(4) for i in range(24)}
    d = save("corrupt_writer", state)
    info = slice_of(d, "t9")
    flip(os.path.join(d, info.relative_path), info.offset + 1)
    rc, out, err = run("verify", "-v", d)
    assert rc == 1 and 'tensor "t9": XXH3-64 ' in out and "(offset %d)" % info.offset in out, \
        out + err
    assert "\n  damaged tensor (1): t9\n" in out, out


def test_damaged_disk_field_of_a_slice_is_corrupt():
    # torch.save writes ZIP64 end records: their disk fields are read
    for field, want in ((16, "number of this disk is 16, expected 0"),
                        (20, "disk of the central directory is 16, expected 0"),
                        (24, "23 entries on this disk and 7 in all")):
        d = torch_layout("disk_%d" % field)
        info = slice_of(d, "model.fc1.bias")
        path = os.path.join(d, info.relative_path)
        with open(path, "rb") as fh:
            blob = fh.read()
        rec = blob.rfind(b"PK\x06\x06", info.offset, info.offset + info.length)
        assert rec > 0
        flip(path, rec + field)
        rc, out, err = run("verify", d)
        assert rc == 1 and out.startswith("CORRUPT ") and want in out, (field, out + err)
        assert "ZIP64 end record" in out and "multi-disk" not in out, out
        # the slice's fqn, and the offset in the slice
        assert "(model.fc1.bias, offset %d)" % (rec - info.offset) in out, out


if __name__ == "__main__":
    try:
        rc = suite.run_cases(globals(), __file__)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
