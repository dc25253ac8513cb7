#!/usr/bin/python3
"""ckpt's weights_only verdict (ckpt.scan(...).weights_only, `ckpt scan`'s
note) against torch 2.13's own torch.load(f, weights_only=True), file by
file: ckpt says "refuses" exactly when torch raises, and names the global
or opcode torch names.

Files, generated here under .venv's torch 2.13: tensors of every dtype,
Parameters, OrderedDict/Counter/set/complex/bytearray/torch.Size/
torch.device/dtype values, numpy scalars, arrays and dtypes, argparse.
Namespace, pathlib paths, a custom class, nested mixes, protocol 3 and 4
saves, legacy (non-zip) saves, a TorchScript archive; then one raw pickle per global (torch's
allowlist, ckpt's, and names off both) and raw pickles of the opcodes it
checks the operands of (APPENDS to an int, BUILD on a dict...), judged against
torch._weights_only_unpickler.load. torch 1.13 (/usr/bin/python3) loads
the refused ones with its default torch.load (weights_only=False): the
verdict is said for torch >= 2.6 only. Without .venv/bin/python the test
is skipped with one printed line. Ends with "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402
VENV = suite.VENV

GEN = r'''
import argparse, collections, io, json, os, pathlib, pickle, sys, warnings
import numpy as np, torch
import torch._weights_only_unpickler as wo
warnings.simplefilter("ignore")
out = sys.argv[1]

class Custom:
    def __init__(self):
        self.x = 1

dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
          torch.complex128, torch.uint16, torch.uint32, torch.uint64,
          torch.float8_e4m3fn, torch.float8_e5m2]
cases = {}
for dt in dtypes:
    cases["dtype_" + str(dt)[6:]] = {"t": torch.zeros(3, dtype=dt), "d": dt}
cases.update({
    "param": {"p": torch.nn.Parameter(torch.ones(2))},
    "module_sd": torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)).state_dict(),
    "ordered": collections.OrderedDict(a=torch.ones(1)),
    "counter": {"c": collections.Counter(a=2)},
    "set": {"s": {1, 2}},
    "frozenset": {"s": frozenset([1])},
    "complex": {"c": 1 + 2j},
    "bytearray": {"b": bytearray(b"ab")},
    "bytes": {"b": b"ab"},
    "size_device": {"s": torch.Size([2, 3]), "d": torch.device("cpu")},
    "view": {"t": torch.arange(6.0)[2:]},
    "np_float64": {"acc": np.float64(0.5), "t": torch.zeros(1)},
    "np_int": {"step": np.int64(3)},
    "np_array": {"a": np.zeros(3)},
    "np_dtype": {"d": np.dtype("float32")},
    "namespace": {"args": argparse.Namespace(lr=0.1)},
    "path": {"p": pathlib.PurePosixPath("/a")},
    "custom": {"c": Custom()},
    "nested_ok": {"a": [1, (2, 3.5), {"b": None, "c": True}], "t": [torch.ones(1)], "s": "x" * 300},
    "nested_np": {"a": [1, {"b": [np.float32(1)]}]},
    "tuple_slice": {"s": slice(1, 2)},
    "bigint": {"i": 2 ** 70, "neg": -5, "big": 70000},
})
for name, obj in cases.items():
    torch.save(obj, os.path.join(out, name + ".pt"))
torch.save(cases["nested_ok"], os.path.join(out, "proto4.pt"), pickle_protocol=4)
torch.save(cases["nested_ok"], os.path.join(out, "proto3.pt"), pickle_protocol=3)
torch.save(cases["module_sd"], os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
torch.save(cases["np_float64"], os.path.join(out, "legacy_np.pt"),
           _use_new_zipfile_serialization=False)
# refused as a TorchScript archive before its data.pkl is read
torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(out, "torchscript.pt"))

names = sorted(wo._get_allowed_globals()) + [
    "builtins.dict", "builtins.list", "builtins.tuple", "builtins.frozenset", "builtins.bytes",
    "builtins.slice", "numpy.dtype", "numpy.ndarray", "numpy.core.multiarray.scalar",
    "numpy._core.multiarray._reconstruct", "torch._utils._rebuild_sparse_csr_tensor",
    "torch.storage._LegacyStorage", "torch.UntypedStorage", "torch.cuda.QInt8Storage",
    "torch.float", "torch.half", "torch.long", "torch.cfloat", "torch.storage.FloatStorage",
    "torch.cuda.sparse.BoolTensor", "torch.sparse.BoolTensor", "argparse.Namespace",
    "os.system", "torch.nn.Linear", "collections.defaultdict", "torch.nn.parameter.Parameter",
]
for i, full in enumerate(names):
    mod, _, name = full.rpartition(".")
    data = b"\x80\x02c" + mod.encode() + b"\n" + name.encode() + b"\n."
    with open(os.path.join(out, "g%03d.pkl" % i), "wb") as f:
        f.write(data)
# what the unpickler checks on the value an opcode acts on: APPEND(S) to a
# list, SETITEM(S) into a dict/OrderedDict/Counter (also with no items,
# which CPython's _pickle skips), BUILD on a tensor/Parameter/OrderedDict/
# allowed class (an OrderedDict's state a dict, not pickle's (state,
# slotstate)), REDUCE/NEWOBJ of a global, SHORT_BINSTRING as UTF-8; and
# what each allows
P2, OD, CT = b"\x80\x02", b"ccollections\nOrderedDict\n)R", b"ccollections\nCounter\n)R"
structural = {
    "appends_empty_int": P2 + b"K\x01(e.", "appends_empty_dict": P2 + b"}(e.",
    "appends_empty_counter": P2 + CT + b"(e.", "appends_empty_odict": P2 + OD + b"(e.",
    "appends_empty_tuple": P2 + b")(e.", "appends_list": P2 + b"](K\x01K\x02e.",
    "setitems_empty_list": P2 + b"](u.", "setitems_empty_int": P2 + b"K\x01(u.",
    "setitems_empty_set": P2 + b"c__builtin__\nset\n]\x85R(u.",
    "setitems_odict": P2 + OD + b"(K\x01K\x02u.", "setitem_counter": P2 + CT + b"K\x01K\x02s.",
    "setitems_dict": P2 + b"}(K\x01K\x02u.",
    "build_none_dict": P2 + b"}Nb.", "build_int": P2 + b"K\x01Nb.", "build_set": P2 + b"\x8fNb.",
    "build_odict_dict": P2 + OD + b"}b.", "build_odict_pair": P2 + OD + b"N}\x86b.",
    "build_odict_pairs": P2 + OD + b"]X\x01\x00\x00\x00aK\x01\x86ab.",
    "build_counter": P2 + CT + b"N}\x86b.",
    "reduce_list": P2 + b"c__builtin__\nset\n])R.",
    "build_codecs_bytes": P2 + b"c_codecs\nencode\nX\x01\x00\x00\x00aX\x06\x00\x00\x00latin1\x86RNb.",
    "build_layout": P2 + b"ctorch.serialization\n_get_layout\nX\x0d\x00\x00\x00torch.strided\x85RNb.",
    "build_size": P2 + b"ctorch\nSize\n)\x85RNb.",
    "short_binstring_bad": P2 + b"U\x01\xff.", "short_binstring_ok": P2 + b"U\x01a.",
}
for name, data in structural.items():
    with open(os.path.join(out, "s_%s.pkl" % name), "wb") as f:
        f.write(data)
# torch maps Python 2 module names whatever the protocol
# (_compat_pickle.IMPORT_MAPPING: UserDict -> collections)
for mod in ("UserDict", "UserList", "UserString"):
    with open(os.path.join(out, "py2name_%s.pkl" % mod), "wb") as f:
        f.write(b"\x80\x02c" + mod.encode() + b"\nOrderedDict\n)R.")
with open(os.path.join(out, "py2name_proto3.pkl"), "wb") as f:
    f.write(b"\x80\x03c__builtin__\nset\n]\x85R.")
json.dump(names, open(os.path.join(out, "names.json"), "w"))
'''

LOAD = r'''
import json, sys, warnings
import torch
import torch._weights_only_unpickler as wo
warnings.simplefilter("ignore")
for path in sys.argv[1:]:
    try:
        if path.endswith(".pkl"):
            wo.load(open(path, "rb"))
        else:
            torch.load(path, weights_only=True, map_location="cpu")
        print(json.dumps({"file": path, "ok": True, "error": ""}))
    except Exception as e:
        print(json.dumps({"file": path, "ok": False, "error": str(e)}))
'''

OLD = r'''
import json, sys, warnings
import torch
warnings.simplefilter("ignore")
for path in sys.argv[1:]:
    try:
        torch.load(path, map_location="cpu")
        ok = True
    except ModuleNotFoundError as e:  # numpy 2's numpy._core under Debian's numpy 1.x
        ok = "numpy._core" in str(e)
    except Exception:
        ok = False
    print(json.dumps({"file": path, "ok": ok}))
'''

TALLY = suite.Tally(echo=False)
report = TALLY.report

# ckpt's reason for an opcode it refuses, and torch's words for it
WHY = [("it reads only the pickle protocol 2", "Unsupported operand"),
       ("APPEND appends only to a list", "Can only append to lists"),
       ("APPENDS extends only a list", "Can only extend lists"),
       ("SETITEM sets items only", "Can only SETITEM for dict"),
       ("SETITEMS sets items only", "Can only SETITEMS for dict"),
       ("BUILD builds only", "Can only build Tensor, Parameter, OrderedDict"),
       ("BUILD updates an OrderedDict's attributes", "dictionary update sequence"),
       ("it calls only an allowed global", "call reduce for unrecognized function"),
       ("decodes SHORT_BINSTRING text as UTF-8", "can't decode byte"),
       ("a TorchScript archive", "Cannot use ``weights_only=True`` with TorchScript archives")]


def doctor(refused, loads):
    """`ckpt doctor` says it (text and --json), `ckpt scan` as a note with
    the verdict and exit status of a safe file."""
    cli = os.environ.get("CKPT_BIN", os.path.join(SRC, "build", "ckpt"))
    run = lambda *a: subprocess.run([cli] + list(a), stdout=subprocess.PIPE, timeout=120)
    p = run("doctor", refused)
    text = p.stdout.decode()
    report("note: torch.load(weights_only=True) of torch >= 2.6 refuses this: global "
           "numpy._core.multiarray.scalar at byte " in text, "doctor text names it", [text])
    files = json.loads(run("doctor", "--json", refused).stdout)["sections"]["safety"]["files"]
    report(files[0]["verdict"] == "safe" and "add_safe_globals([numpy._core.multiarray.scalar])"
           in files[0]["weights_only"], "doctor --json names it", [files])
    files = json.loads(run("doctor", "--json", loads).stdout)["sections"]["safety"]["files"]
    report(files[0]["weights_only"] is None, "doctor --json: nothing for a loadable file", [files])
    p = run("scan", refused)
    out = p.stdout.decode().splitlines()
    report(p.returncode == 0 and out[0].startswith("SAFE") and
           out[-1].startswith("  note       weights-only: torch.load(weights_only=True)"),
           "scan: verdict SAFE, then a note, exit 0", out)


def main():
    if not os.path.exists(VENV):
        print("SKIP weights_only verdict: no %s (run scripts/deps --test)" % VENV)
        return suite.finish(0, 0)
    sys.path.insert(0, os.path.join(SRC, "python"))
    import ckpt
    with tempfile.TemporaryDirectory(prefix="ckpt-wov-") as tmp:
        g = subprocess.run([VENV, "-c", GEN, tmp], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600)
        report(g.returncode == 0, "generate under torch 2.13", g.stdout.decode()[-2000:].split("\n"))
        files = sorted(os.path.join(tmp, n) for n in os.listdir(tmp) if n.endswith((".pt", ".pkl")))
        torch2 = suite.oracle_docs(VENV, ["-c", LOAD], files)
        refused_pt = []
        for path in files:
            t = torch2[path]
            if "ok" not in t:
                report(False, "torch verdict for " + path, [t["error"]])
                continue
            w = ckpt.scan(path).weights_only
            name = os.path.basename(path)
            report((w is None) == t["ok"], "%s: torch %s, ckpt %s" % (
                name, "loads" if t["ok"] else "refuses", w or "loads"), [t["error"]])
            if w and not t["ok"]:
                # the global torch names is the one ckpt names
                named = w.split(" refuses this: ", 1)[1].split(" at byte ")[0].split()[-1]
                # torch writes builtins.X as X
                g = named[len("builtins."):] if named.startswith("builtins.") else named
                torch_says = ("GLOBAL %s " % g in t["error"] or
                              any(why in w and says in t["error"] for why, says in WHY))
                report(torch_says, "%s: ckpt names %s, torch says %s" % (name, named,
                                                                       t["error"][:200]))
                if path.endswith(".pt"):
                    refused_pt.append(path)
        report(len(refused_pt) >= 8, "several files refused", refused_pt)
        doctor(os.path.join(tmp, "np_float64.pt"), os.path.join(tmp, "module_sd.pt"))
        if os.path.exists(suite.DEBIAN) and refused_pt:
            old = suite.oracle_docs(suite.DEBIAN, ["-c", OLD], refused_pt)
            for path in refused_pt:
                if "proto4" in path or old[path].get("ok"):
                    continue
                # torch 1.13 reads no file torch 2.13 wrote with a dtype it lacks
                if any(k in path for k in ("uint16", "uint32", "uint64", "float8", "custom")):
                    continue
                report(False, "torch 1.13's default torch.load loads %s" % path, [old.get(path)])
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
