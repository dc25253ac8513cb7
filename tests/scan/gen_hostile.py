"""Writes hostile (and a few benign) pickles for `ckpt scan` tests.

Each family of FORMATS.md §5.5 is built with Python's own pickle where the
pickler can produce it (pickle.dumps of objects whose __reduce__ names a
dangerous callable: dumps never calls it) and by hand where it cannot
(INST/OBJ, operands from every string opcode, BUILD on a module...).
NOTHING HERE IS EVER LOADED: the files are only written.

    gen_hostile.py OUTDIR     writes the files and OUTDIR/manifest.json

manifest.json: a list of {"file", "verdict", "global"?, "allow"?} where
"global" is the dangerous global `ckpt scan --json` must name ("?" for a
name that cannot be known, matched as a prefix) and "allow" a name that
--allow must accept to turn the file safe.
"""
import base64
import collections
import copyreg
import io
import json
import lzma
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import zipfile
import zlib


class Reduce:
    """An object that pickles as a call of `func(*args)`."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def class_named(module, name):
    """A stand-in class that pickles under the name module.name: it lives
    in a fake module whose name has the same length, swapped in the bytes
    afterwards (so lengths and frames stay right)."""
    import types
    fake = module[:-1] + ("X" if module[-1] != "X" else "Y")
    mod = sys.modules.setdefault(fake, types.ModuleType(fake))
    cls = type(name, (), {"__module__": fake, "__qualname__": name})
    setattr(mod, name, cls)
    return cls, fake.encode(), module.encode()


def swap(data, fake, real):
    assert data.count(fake) == 1
    return data.replace(fake, real)


def newobj(module, name, args, kwargs=None, proto=2):
    """NEWOBJ (or NEWOBJ_EX with kwargs) of module.name(*args, **kwargs)."""
    cls, fake, real = class_named(module, name)

    def reduce_ex(self, p):
        if kwargs is None:
            return copyreg.__newobj__, (cls,) + args
        return copyreg.__newobj_ex__, (cls, args, kwargs)
    cls.__reduce_ex__ = reduce_ex
    return swap(pickle.dumps(cls(), protocol=proto), fake, real)


def qualname(f):
    return "%s.%s" % (f.__module__, f.__qualname__)


SYSTEM = qualname(os.system)  # posix.system on Linux
EVIL = Reduce(os.system, ("touch /tmp/ckpt-pwned",))


def evil_bytes(proto=2):
    return pickle.dumps(EVIL, protocol=proto)


def families():
    """Yields (name, bytes, verdict, global or None)."""
    for proto in range(6):
        yield "system_p%d.pkl" % proto, evil_bytes(proto), "unsafe", SYSTEM
        yield ("eval_p%d.pkl" % proto,
               pickle.dumps(Reduce(eval, ("1+1",)), protocol=proto),
               "unsafe", "builtins.eval")
    yield ("subprocess.pkl",
           pickle.dumps(Reduce(subprocess.check_output, (["id"],)), protocol=4),
           "unsafe", "subprocess.check_output")
    # STACK_GLOBAL operands from the memo: the strings were pickled first
    yield ("memo_stack_global.pkl",
           pickle.dumps(["posix", "system", "torch", "LongStorage", EVIL],
                        protocol=4), "unsafe", SYSTEM)
    # STACK_GLOBAL operands from every string opcode, under several PROTOs
    ops = {
        "string": lambda s: b"S'" + s + b"'\n",
        "binstring": lambda s: b"T" + struct.pack("<I", len(s)) + s,
        "short_binstring": lambda s: b"U" + bytes([len(s)]) + s,
        "unicode": lambda s: b"V" + s + b"\n",
        "binunicode": lambda s: b"X" + struct.pack("<I", len(s)) + s,
        "short_binunicode": lambda s: b"\x8c" + bytes([len(s)]) + s,
        "binunicode8": lambda s: b"\x8d" + struct.pack("<Q", len(s)) + s,
    }
    call = b"\x8c\x02id\x85R."
    for name, op in ops.items():
        for proto in (b"", b"\x80\x02", b"\x80\x04"):
            tag = proto[1:2].hex() or "none"
            yield ("sg_%s_%s.pkl" % (name, tag),
                   proto + op(b"os") + op(b"system") + b"\x93" + call,
                   "unsafe", "os.system")
    # PUT and MEMOIZE mixed, GET and BINGET
    yield ("sg_put_memoize.pkl",
           b"\x80\x04Vos\np0\n0\x8c\x06system\x94" b"0g0\nh\x01\x93" + call,
           "unsafe", "os.system")
    # INST and OBJ (protocol 0/1; Python 3's pickler no longer writes them)
    yield "inst.pkl", b"(S'id'\nios\nsystem\n.", "unsafe", "os.system"
    yield "obj.pkl", b"(cos\nsystem\nS'id'\no.", "unsafe", "os.system"
    yield ("newobj.pkl", newobj("subprocess", "Popen", (["id"],)),
           "unsafe", "subprocess.Popen")
    yield ("newobj_ex.pkl",
           newobj("subprocess", "Popen", (["id"],), {"shell": False}, proto=4),
           "unsafe", "subprocess.Popen")
    # EXT1: the name lives in the loader's extension registry
    copyreg.add_extension("posix", "system", 0xF1)
    try:
        yield ("ext1.pkl", pickle.dumps(EVIL, protocol=2), "unsafe", "?")
    finally:
        copyreg.remove_extension("posix", "system", 0xF1)
    # BUILD on an allowlisted class itself, and on a module
    yield ("build_poison.pkl",
           b"\x80\x02ccollections\nOrderedDict\n}S'fromkeys'\nS'x'\nsb0N.",
           "unsafe", None)
    yield ("build_module.pkl",
           b"\x80\x02ctorch\n_utils\n}S'_rebuild_tensor'\nS'eval'\nsb0N.",
           "unsafe", None)
    # dotted and dunder names
    import bdb
    yield ("dotted.pkl",
           pickle.dumps(Reduce(bdb.Bdb.run, ("id",)), protocol=4),
           "unsafe", "bdb.Bdb.run")
    yield ("dunder.pkl",
           b"\x80\x02ctorch._utils\n_rebuild_tensor_v2.__globals__\n.",
           "unsafe", "torch._utils._rebuild_tensor_v2.__globals__")
    yield "builtin_py2.pkl", b"c__builtin__\neval\n(S'1'\ntR.", "unsafe", "builtins.eval"
    # invalid memo and type confusion
    yield "bad_memo.pkl", b"\x80\x04\x8c\x02os\x94h\x07\x93.", "unscannable", None
    yield ("type_confusion.pkl",
           b"\x80\x04K\x01\x94\x8c\x06system\x94h\x00h\x01\x93" + call,
           "unsafe", "?.system")
    # several streams, junk after STOP
    benign = pickle.dumps(collections.OrderedDict(), protocol=2)
    yield "two_streams.pkl", benign + evil_bytes(), "unsafe", SYSTEM
    yield "junk_after_stop.pkl", evil_bytes() + b"\n\n\t\tjunk", "unsafe", SYSTEM
    # nested pickles: only what an unpickling call receives is a pickle
    inner = evil_bytes(4)
    yield ("nested_bytes.pkl",
           pickle.dumps(Reduce(pickle.loads, (inner,)), protocol=3), "unsafe", SYSTEM)
    yield ("nested_latin1.pkl",
           pickle.dumps(Reduce(pickle.loads, (inner,)), protocol=2), "unsafe", SYSTEM)
    yield ("nested_base64.pkl",
           pickle.dumps({"payload": Reduce(pickle.loads, (Reduce(
               base64.b64decode, (base64.b64encode(inner).decode(),)),))},
               protocol=4), "unsafe", SYSTEM)
    yield ("nested_hex.pkl",
           pickle.dumps([Reduce(pickle.loads, (Reduce(bytes.fromhex, (inner.hex(),)),))],
                        protocol=2), "unsafe", SYSTEM)
    # ... and the same strings as data: no loader unpickles them
    yield "data_bytes.pkl", pickle.dumps(inner, protocol=3), "safe", None
    yield "data_latin1.pkl", pickle.dumps(inner, protocol=2), "safe", None
    yield ("data_base64.pkl",
           pickle.dumps({"payload": base64.b64encode(inner).decode()}, protocol=4),
           "safe", None)
    yield "data_hex.pkl", pickle.dumps([inner.hex()], protocol=2), "safe", None
    yield ("data_note.pkl", pickle.dumps({"doc": "(Note: see below)."}, protocol=0),
           "safe", None)
    # zip tricks
    yield "zip_txt.zip", make_zip({"archive/data.txt": inner}), "unsafe", SYSTEM
    yield ("zip_polyglot.pt", b"GIF89a;" + make_zip({"archive/data.pkl": inner}),
           "unsafe", SYSTEM)
    # archives one downloads and extracts: a zip in a zip (stored and
    # deflated), a tar's pickle member, joblib's compressed dumps
    yield ("zip_in_zip.zip", make_zip({"inner.zip": make_zip({"model.pkl": inner})}),
           "unsafe", SYSTEM)
    yield ("zip_in_zip_deflated.zip",
           make_zip({"inner.zip": make_zip({"model.pkl": inner})}, zipfile.ZIP_DEFLATED),
           "unsafe", SYSTEM)
    yield "tar_member.tar", make_tar({"sys_info": benign, "model.pkl": inner}), "unsafe", SYSTEM
    yield "joblib_zlib.joblib", zlib.compress(inner, 3), "unscannable", None
    yield ("joblib_lzma.joblib", lzma.compress(inner, format=lzma.FORMAT_ALONE),
           "unscannable", None)
    # truncations after the GLOBAL
    for cut in (16, 20, len(evil_bytes(0)) - 1):
        yield ("truncated_%d.pkl" % cut, evil_bytes(0)[:cut], "unsafe", SYSTEM)
    # benign
    yield "benign_dict.pkl", pickle.dumps({"lr": 0.1, "steps": [1, 2]}, 2), "safe", None
    # a big int: its 0xFF bytes land where a tar header keeps its checksum
    # (base-256 -1, matching no sum: not a tar archive)
    for proto in (2, 4):
        yield ("big_int_p%d.pkl" % proto, pickle.dumps({"n": 2 ** 4000 - 1}, protocol=proto),
               "safe", None)
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        yield ("numpy.pkl",
               pickle.dumps({"s": np.float64(1.5), "a": np.arange(6).reshape(2, 3)},
                            protocol=2), "safe", None)


def make_zip(members, method=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def make_tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def torch_families(out):
    """torch.save files, when torch is installed. Yields manifest rows."""
    try:
        import torch
    except ImportError:
        return
    rows = []
    state = collections.OrderedDict(w=torch.arange(6.0).reshape(2, 3))
    for name, obj, legacy, verdict, g in (
            ("torch_benign.pt", state, False, "safe", None),
            ("torch_benign_legacy.pt", state, True, "safe", None),
            ("torch_evil.pt", {"model": state, "x": EVIL}, False, "unsafe", SYSTEM),
            ("torch_evil_legacy.pt", {"model": state, "x": EVIL}, True, "unsafe",
             SYSTEM)):
        torch.save(obj, os.path.join(out, name),
                   _use_new_zipfile_serialization=not legacy)
        rows.append({"file": name, "verdict": verdict, "global": g})
    return rows


def main(out):
    import argparse
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, data, verdict, g in families():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
        rows.append({"file": name, "verdict": verdict, "global": g})
    ns = pickle.dumps({"hparams": argparse.Namespace(lr=0.1)}, protocol=2)
    with open(os.path.join(out, "namespace.pkl"), "wb") as fh:
        fh.write(ns)
    rows.append({"file": "namespace.pkl", "verdict": "review", "global": None,
                 "allow": "argparse.Namespace"})
    rows.extend(torch_families(out) or [])
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_hostile.py OUTDIR")
    main(sys.argv[1])
