#!/usr/bin/python3
"""Differential test: which torch.save zips torch.load opens at all, by
their record names and version record, against `ckpt verify`.

torch.load lists every record (PyTorchStreamReader::getAllRecords, for its
TorchScript test) before reading data.pkl: a name outside the first
record's "archive_name/" or one that is not UTF-8 (as the C string miniz
copies out: up to a NUL, at most 511 bytes) fails the load, and so does a
missing or unreadable version record (".data/version", else "version"),
and (torch 2.x) a ".storage_alignment" that Python's int() refuses.
`ckpt verify` said OK on such files (a flipped byte in a central-directory
name was enough). Each archive here is loaded by every oracle (torch.load,
weights_only=True): ckpt must say OK exactly when all of them load it.
(A NUL inside a name, which torch reads up to, ckpt's zip reader refuses
outright: not a case here.)

Oracles: this interpreter's torch (Debian's 1.13) and, when the project
virtualenv exists (CKPT_SRC/.venv), torch 2.13.
Environment: CKPT_BIN, CKPT_SRC. Ends with "N passed, N failed".
"""
import os
import subprocess
import sys
import tempfile

CKPT = os.environ.get("CKPT_BIN", "ckpt")
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
VENV_PY = os.path.join(SRC, ".venv", "bin", "python")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from craft import zip_archive  # noqa: E402
import suite  # noqa: E402

# {"w": tensor([1., 2.])} as torch.save pickles it, storage "0"
PKL = (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02("
       b"(X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x000q\x05"
       b"X\x03\x00\x00\x00cpuq\x06K\x02tq\x07QK\x00K\x02\x85q\x08K\x01\x85q\x09\x89"
       b"ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0ds.")
DATA = b"\x00\x00\x80\x3f\x00\x00\x00\x40"


def archive(extra=(), version=b"3\n", version_name="archive/version", data_name="archive/data/0",
            extra_records=()):
    members = [("archive/data.pkl", PKL, 0), ("archive/byteorder", b"little", 0),
               (data_name, DATA, 0)]
    if version is not None:
        members.append((version_name, version, 0))
    members += [(n, data, 0) for n, data in extra_records]
    return zip_archive(members + [(n, b"x", 0) for n in extra])


def raw_name(z, old, new):
    """z with every occurrence of the name `old` (str) replaced by the
    bytes `new` of the same length: names craft cannot encode."""
    old = old.encode()
    assert len(old) == len(new)
    return z.replace(old, new)


def record(key, cls, skey, numel, size=None):
    """A _rebuild_tensor_v2 record of a 1-d tensor of storage skey (numel
    elements declared; the tensor has `size`, numel unless given), its
    class written as the pickle bytes cls (a GLOBAL or a memo GET)."""
    text = lambda s: b"X" + len(s).to_bytes(4, "little") + s  # noqa: E731
    size = numel if size is None else size
    return (text(key) + b"ctorch._utils\n_rebuild_tensor_v2\n((" + text(b"storage") + cls +
            text(skey) + text(b"cpu") + b"K" + bytes([numel]) + b"tQK\x00K" + bytes([size]) +
            b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR")


def two_records(cls2, data2):
    """{"w": FloatStorage "0", "v": storage "1" of class cls2}: ckpt keeps
    the class the previous id named and checks only a new one."""
    pkl = (b"\x80\x02}(" + record(b"w", b"ctorch\nFloatStorage\nq\x04", b"0", 2) +
           record(b"v", cls2, b"1", 2) + b"u.")
    return zip_archive([("archive/data.pkl", pkl, 0), ("archive/byteorder", b"little", 0),
                        ("archive/data/0", DATA, 0), ("archive/data/1", data2, 0),
                        ("archive/version", b"3\n", 0)])


def shared_key(numel2, size2):
    """{"w": storage "0" of 2 floats, "v": storage "0" again, its id
    declaring numel2 elements, a tensor of size2}: torch loads a key once
    (loaded_storages), the later id's numel is never read; ckpt refused
    any second numel."""
    pkl = (b"\x80\x02}(" + record(b"w", b"ctorch\nFloatStorage\nq\x04", b"0", 2) +
           record(b"v", b"h\x04", b"0", numel2, size2) + b"u.")
    return zip_archive([("archive/data.pkl", pkl, 0), ("archive/byteorder", b"little", 0),
                        ("archive/data/0", DATA, 0), ("archive/version", b"3\n", 0)])


def with_tag(tag):
    """archive() whose persistent id's tag is the str tag, not 'storage'."""
    pkl = PKL.replace(b"X\x07\x00\x00\x00storage", b"X" + len(tag).to_bytes(4, "little") + tag)
    return zip_archive([("archive/data.pkl", pkl, 0), ("archive/byteorder", b"little", 0),
                        ("archive/data/0", DATA, 0), ("archive/version", b"3\n", 0)])


def with_metadata(key):
    """archive() whose _rebuild_tensor_v2 has a 7th argument, the tensor
    metadata {key: True} that torch 2.x writes for a saved x.conj() or a
    neg view: torch 2.13 loads the negation/conjugate of the stored
    values (not [1, 2]), torch 1.13 refuses the argument. ckpt said OK
    and showed the stored values."""
    meta = b"}X" + len(key).to_bytes(4, "little") + key + b"\x88s"
    assert PKL.count(b")Rq\x0bt") == 1
    pkl = PKL.replace(b")Rq\x0bt", b")Rq\x0b" + meta + b"t")
    return zip_archive([("archive/data.pkl", pkl, 0), ("archive/byteorder", b"little", 0),
                        ("archive/data/0", DATA, 0), ("archive/version", b"3\n", 0)])


long_ok = "archive/" + "a" * 503  # 511 bytes: miniz copies it whole
cut = "archive/" + "a" * 502 + "\u00e9"  # 512 bytes: miniz cuts the 2-byte char
CASES = {
    "plain": archive(),
    "outside_prefix": archive(extra=["other/x"]),
    "no_slash": archive(extra=["x"]),
    "prefix_only": archive(extra=["archive"]),
    "latin1_name": raw_name(archive(extra=["archive/X"]), "archive/X", b"archive/\xe9"),
    "utf8_name": archive(extra=["archive/\u00e9t\u00e9"]),
    "surrogate_name": raw_name(archive(extra=["archive/XYZ"]), "archive/XYZ", b"archive/\xed\xa0\x80"),
    "long_name": archive(extra=[long_ok]),
    "long_name_cut_in_char": archive(extra=[cut]),
    "no_version": archive(version=None),
    "data_version_only": archive(version_name="archive/.data/version"),
    "version_11": archive(version=b"11\n"),
    "version_0": archive(version=b"0\n"),
    "version_10": archive(version=b"10"),
    "version_signed": archive(version=b" +3\n"),
    "version_negative": archive(version=b"-3\n"),
    "version_text": archive(version=b"three"),
    "version_empty": archive(version=b""),
    "version_huge": archive(version=b"99999999999999999999999"),
    "alignment_64": archive(extra_records=[("archive/.storage_alignment", b"64")]),
    "alignment_spaced": archive(extra_records=[("archive/.storage_alignment", b" +6_4\n")]),
    "alignment_text": archive(extra_records=[("archive/.storage_alignment", b"abc")]),
    "alignment_hex": archive(extra_records=[("archive/.storage_alignment", b"0x40")]),
    "alignment_double_underscore": archive(extra_records=[("archive/.storage_alignment", b"6__4")]),
    "alignment_empty": archive(extra_records=[("archive/.storage_alignment", b"")]),
    "storage_class_memoized": two_records(b"h\x04", DATA),
    "storage_class_second": two_records(b"ctorch\nHalfStorage\n", b"\x00\x3c\x00\x40"),
    "storage_class_second_unknown": two_records(b"ctorch\nBogusStorage\n", DATA),
    "storage_class_second_not_torch": two_records(b"cbuiltins\nFloatStorage\n", DATA),
    "storage_key_again_smaller": shared_key(1, 1),
    "storage_key_again_zero": shared_key(0, 2),
    "storage_key_again_larger": shared_key(4, 2),
    "storage_key_again_past_storage": shared_key(4, 4),
    # the persistent id's tag is compared as a Python str: 'storage\0' is
    # not 'storage' (torch asserts), though C's strcmp stops at the NUL
    "storage_tag_nul": with_tag(b"storage\x00"),
    "storage_tag_prefix": with_tag(b"stor"),
    "metadata_neg": with_metadata(b"neg"),
    "metadata_conj": with_metadata(b"conj"),
}

PEER = r"""
import sys, warnings, torch
warnings.filterwarnings("ignore")
for p in sys.argv[1:]:
    try:
        v = torch.load(p, weights_only=True)
        ok = v["w"].tolist() == [1.0, 2.0]
    except Exception:
        ok = False
    print("ok" if ok else "fail")
"""


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-zip-records-")
    paths = []
    for name, data in CASES.items():
        p = os.path.join(tmp, name + ".pt")
        with open(p, "wb") as fh:
            fh.write(data)
        paths.append(p)
    oracles = [sys.executable] + ([VENV_PY] if os.path.exists(VENV_PY) else [])
    if len(oracles) == 1:
        print("skip torch 2.13: no %s" % VENV_PY)
    loads = {}
    for py in oracles:
        out = subprocess.run([py, "-c", PEER] + paths, capture_output=True, text=True, check=True)
        for p, r in zip(paths, out.stdout.split()):
            loads.setdefault(p, []).append(r == "ok")
    tally = suite.Tally(echo=False)
    for name, p in zip(CASES, paths):
        rc = subprocess.run([CKPT, "verify", p], capture_output=True).returncode
        want = 0 if all(loads[p]) else 1
        if name == "plain" and want != 0:
            tally.report(False, "plain", [
                "an oracle cannot load the benign archive: the test proves nothing"])
        else:
            tally.report(rc == want, name, [
                "torch loads %s, ckpt verify exits %d" % (loads[p], rc)])
    for p in paths:
        os.unlink(p)
    os.rmdir(tmp)
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
