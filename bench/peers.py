#!/usr/bin/env python3
"""peers.py - `ckpt scan` side by side with picklescan, modelscan,
fickling, modelaudit and torch.load(weights_only=True) on the same
hostile and benign files (issue 11). Not part of CI.

Usage (the project virtualenv: torch 2.x and the four peers):
    .venv/bin/python bench/peers.py [--ckpt build/ckpt] [--work DIR]
        [--jobs 2] [--timeout 60] [--tools ckpt,picklescan,...]
        [--families SUBSTR] [-v]

Files (built in WORK, a temp dir removed afterwards unless --work):
  hostile, one family per class of issue 11: pickle operand syntax
  (tests/craft.py), raw and in a torch zip; torch's legacy stacked streams
  (a call in the second pickle, sys_info, storage keys); the published
  families of tests/scan/gen_hostile.py (every opcode that names or calls a
  global, nested pickles, no PROTO, ...); zip archives with miniz's quirks
  (case-insensitive lookup, duplicate names, local vs central names, ZIP64
  locator tricks, prefixes); torch < 0.4 tar checkpoints; .npy/.npz object
  dtypes (structured ones too); sharded indexes whose JSON (NaN, duplicate
  keys, escapes) names a malicious shard; --allow traps (ckpt is given the
  --allow; the peers have none).
  benign: torch 2.x and 1.13 saves of state_dicts, optimizers, numpy RNG
  state, Lightning-like checkpoints (pathlib, argparse.Namespace), big ints,
  strings that look like pickles, pickles kept as base64/hex/bytes data,
  safetensors, .npy, sharded indexes.

Ground truth comes from the real loaders, never from a scanner: each file
is loaded by its loader (pickle.load, torch.load, np.load(allow_pickle),
json + torch.load of each shard) with find_class recording every global
and returning a stub whose construction is recorded; nothing is imported
or run. A hostile file counts when the loader calls a global outside the
ordinary data builders (torch, numpy, collections, ...); a benign file
when it loads without error and calls nothing else. Built files the
truth does not confirm are left out (counted, listed with -v).

Each peer runs through its Python API in a long-lived worker, verdicts by
its CLI's exit-code rule (checked against the CLIs); --timeout per file.
Verdicts: ckpt `unsafe`/`unscannable` and a peer's finding or error
catch a hostile file; `safe`, `not-a-checkpoint` or a peer's clean/skip
miss it. On a benign file, a finding or an error is a false alarm; ckpt's
`review` (a data-only class such as argparse.Namespace, listed by name)
is neither and is counted apart. torch.load(weights_only=True) is a
"catch" when it refuses to load; it applies to files torch.load reads.
"""
import argparse
import base64
import collections
import concurrent.futures
import io
import json
import os
import pickle
import select
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "scan"))
import craft  # noqa: E402
import gen_hostile  # noqa: E402

BIN = os.path.dirname(os.path.abspath(sys.executable))
TOOLS = ["ckpt", "picklescan", "modelscan", "fickling", "modelaudit", "torch-wo"]
# Calls that only build data: a loader calling anything else runs a payload.
ORDINARY = tuple(m + "." + n for m in ("builtins", "__builtin__") for n in (
    "set", "frozenset", "bytearray", "bytes", "slice", "complex", "range")) + (
    "torch.", "collections.OrderedDict", "numpy.", "_codecs.encode", "copyreg._reconstructor",
    "copy_reg._reconstructor", "argparse.Namespace", "pathlib.")


class Sample:
    def __init__(self, family, name, hostile, loader, data=None, ckpt_args=(), files=None):
        self.family, self.name, self.hostile, self.loader = family, name, hostile, loader
        self.data, self.ckpt_args, self.files = data, list(ckpt_args), files or {}
        self.path = None
        self.results = {}


# ------------------------------------------------------------ families


def torch_zip(pkl, prefix="archive"):
    """A torch.save zip around one data.pkl (no storages)."""
    return craft.zip_archive([(prefix + "/data.pkl", pkl, 0), (prefix + "/version", b"3\n", 0)])


EVIL = craft.SYSTEM + craft.CALL
EVIL_P2 = b"\x80\x02" + EVIL
BENIGN_P2 = b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s."


def hostile_families():
    for i, data in enumerate(craft.pickle_syntax_cases()):
        # each operand form alone (benign), then followed by a call
        yield Sample("pickle operand syntax", "syntax_%03d.pkl" % i, None, "pickle", data)
        if data.startswith(b"\x80\x02"):
            yield Sample("pickle operand syntax, torch zip", "syntax_%03d.pt" % i, None,
                         "torch", torch_zip(data))
    for i, data in enumerate(craft.legacy_stream_cases()):
        yield Sample("legacy torch streams", "legacy_%02d.pt" % i, None, "torch", data)
    for name, data, verdict, _ in gen_hostile.families():
        loader = "torch" if b"PK\x03\x04" in data else "pickle"
        yield Sample("gen_hostile families", name, verdict != "safe", loader, data)
    v = ("archive/version", b"3\n", 0)
    good, bad = ("archive/data.pkl", BENIGN_P2, 0), ("archive/data.pkl", EVIL_P2, 0)
    zips = {
        "upper_case.pt": craft.zip_archive([("archive/DATA.PKL", EVIL_P2, 0), v]),
        "case_dup_evil_second.pt": craft.zip_archive([good, ("archive/Data.pkl", EVIL_P2, 0), v]),
        "case_dup_evil_first.pt": craft.zip_archive([("archive/Data.pkl", EVIL_P2, 0), good, v]),
        "exact_dup_evil_second.pt": craft.zip_archive([good, v, bad]),
        "exact_dup_evil_first.pt": craft.zip_archive([bad, v, good]),
        "local_name_differs.pt": craft.zip_archive(
            [("archive/xata.pkl", EVIL_P2, 0), v], cd_names=["archive/data.pkl", "archive/version"]),
        "central_name_differs.pt": craft.zip_archive(
            [bad, v], cd_names=["archive/data.pkx", "archive/version"]),
        "deflated.pt": craft.zip_archive([("archive/data.pkl", EVIL_P2, 8), v]),
        "prefixed.pt": craft.zip_archive([bad, v], prefix=b"GIF89a;" * 3),
        "prefixed_zip64.pt": craft.zip_archive([bad, v], zip64=True, prefix=BENIGN_P2),
        "zip64_record_in_comment.pt": craft.zip_archive([bad, v], zip64=True,
                                                         record_in_comment=True, locator=0),
        "zip64_locator_nowhere.pt": craft.zip_archive([bad, v], zip64=True, locator=3),
        "fake_end_in_comment.pt": craft.zip_archive([bad, v], comment=b"PK\x05\x06" + b"c" * 40),
        # miniz reads the call, Python's zipfile (the peers' reader) a dict
        "two_directories.pt": craft.zip_two_directories(
            [("archive/data.pkl", b"\x80\x02X\x00\x04\x00\x00" + b"a" * 1024 + b"0" + EVIL, 0), v],
            [good, v]),
    }
    for name, data in zips.items():
        yield Sample("zip (miniz quirks)", name, True, "torch", data)
    for spot in craft.SPOTS:
        if spot:
            for v7 in (False, True):
                yield Sample("legacy tar", "tar_%s%s.pt" % (spot, "_v7" if v7 else ""), True,
                             "torch", craft.legacy_tar(spot, v7=v7))
    yield Sample("legacy tar", "tar_main_dup.pt", True, "torch", craft.legacy_tar("main", dup=True))
    payload = gen_hostile.evil_bytes(2)
    descrs = ["'|O'", "'O'", "'object'", "\"O\"", "'|O8'", "'<O'", "'=O'",
              "[('a', '<i4'), ('b', '|O')]", "[('a', [('b', '|O')])]", "('|O', (2,))",
              "[(('t', 'a'), '|O')]"]
    for i, d in enumerate(descrs):
        head = ("{'descr': %s, 'fortran_order': False, 'shape': (1,), }" % d).encode()
        head += b" " * (63 - len(head) % 64) + b"\n"
        for major in (1, 2):
            yield Sample("npy object dtypes", "obj_%02d_v%d.npy" % (i, major), True, "numpy",
                         craft.npy_file(head, payload, major))
    npz = io.BytesIO()
    import zipfile
    with zipfile.ZipFile(npz, "w") as z:
        z.writestr("w.npy", craft.npy_file(
            b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }" + b" " * 6 + b"\n",
            payload))
    yield Sample("npy object dtypes", "obj.npz", True, "numpy", npz.getvalue())
    for name, doc in craft.index_traps("good.bin", "evil.bin"):
        yield Sample("index JSON", "index_%s/pytorch_model.bin.index.json" % name, True,
                     "index", doc, files={"good.bin": "benign-torch", "evil.bin": EVIL_P2})
    # --allow traps: the allowed name is a decoy, a call elsewhere runs code
    ns = pickle.dumps(argparse.Namespace(lr=0.1), protocol=2)
    yield Sample("--allow traps", "allow_namespace.pkl", True, "pickle",
                 b"\x80\x02(" + ns[2:-1] + EVIL[:-1] + b"l.",
                 ["--allow", "argparse.Namespace"])
    yield Sample("--allow traps", "allow_unknown.pkl", True, "pickle",
                 b"\x80\x02(cmytrainer\nConfig\n)R" + EVIL[:-1] + b"l.",
                 ["--allow", "mytrainer.Config"])
    yield Sample("--allow traps", "allow_main.pt", True, "torch",
                 torch_zip(b"\x80\x02(c__main__\nNet\n)R" + EVIL[:-1] + b"l."),
                 ["--allow", "__main__.Net"])
    yield Sample("--allow traps", "allow_system.pkl", True, "pickle", EVIL_P2,
                 ["--allow", "posix.system", "--allow", "os.system"])
    yield Sample("--allow traps", "allow_policy_namespace.pt", True, "torch",
                 torch_zip(b"\x80\x02(" + ns[2:-1] + EVIL[:-1] + b"l."),
                 ["--allow", "argparse.Namespace", "--allow", "pathlib.PosixPath"])


TORCH_BENIGN = r'''
import argparse, collections, pathlib, sys, torch
torch.manual_seed(0)
out, legacy = sys.argv[1], sys.argv[2] == "1"
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
net(torch.randn(3, 4)).sum().backward()
opt.step()
sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
net(torch.randn(3, 4)).sum().backward()
sgd.step()
def save(name, obj):
    torch.save(obj, "%s/%s" % (out, name), _use_new_zipfile_serialization=not legacy)
save("state_dict.pt", net.state_dict())
save("half_state_dict.pt", {k: v.half() for k, v in net.state_dict().items()})
save("adam.pt", opt.state_dict())
save("sgd.pt", sgd.state_dict())
save("training.pt", {"epoch": 3, "global_step": 1200, "model": net.state_dict(),
     "optimizer": opt.state_dict(), "torch_rng": torch.get_rng_state(),
     "best": torch.tensor(0.25), "losses": [0.9, 0.5, 0.25]})
save("views.pt", {"a": torch.arange(12.0).reshape(3, 4), "t": torch.arange(12.0).reshape(3, 4).t(),
     "slice": torch.arange(10)[2:5], "bool": torch.tensor([True, False]),
     "int8": torch.tensor([1, -2], dtype=torch.int8)})
save("tensor.pt", torch.ones(2, 3))
if hasattr(torch, "bfloat16"):
    save("bf16.pt", {"w": torch.ones(4, dtype=torch.bfloat16)})
try:
    import numpy as np
    save("numpy_rng.pt", {"np_rng": np.random.RandomState(0).get_state(),
         "np_gen": np.random.default_rng(0).bit_generator.state,
         "arr": np.arange(6.0).reshape(2, 3), "scalar": np.float64(1.5)})
except ImportError:
    pass
save("lightning.pt", {"epoch": 2, "global_step": 10, "pytorch-lightning_version": "2.2.0",
     "state_dict": net.state_dict(), "optimizer_states": [opt.state_dict()],
     "lr_schedulers": [], "hparams_name": "args",
     "hyper_parameters": {"args": argparse.Namespace(lr=0.1, data=pathlib.PosixPath("/data"))},
     "callbacks": {"ModelCheckpoint": {"dirpath": pathlib.PosixPath("/ckpt")}}})
save("lightning_plain.pt", {"epoch": 2, "state_dict": net.state_dict(),
     "hyper_parameters": {"lr": 0.1, "data": "/data"}, "loops": {"fit": {"n": 3}}})
save("big_ints.pt", {"seed": 2 ** 3000 + 7, "neg": -(10 ** 700), "small": [2 ** 63, -2 ** 64]})
evil = b"\x80\x02cposix\nsystem\n(S'ls'\ntR."
save("pickle_like_strings.pt", {"doc": "(Note: see below).", "code": "cos\nsystem\n(S'ls'\ntR.",
     "latin": evil.decode("latin-1"), "blob": evil, "ba": bytearray(evil)})
import base64
save("encoded_pickles.pt", {"b64": base64.b64encode(evil).decode(), "hex": evil.hex(),
     "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"})
'''


def benign_families(work):
    """torch saves come from the two interpreters' torch (written to disk)."""
    torch2 = os.path.join(BIN, "python")
    makers = [("torch 2.x saves", torch2, "0", ""), ("torch 2.x legacy saves", torch2, "1", "legacy_"),
              ("torch 1.13 saves", "/usr/bin/python3", "0", ""),
              ("torch 1.13 legacy saves", "/usr/bin/python3", "1", "legacy_")]
    for family, python, legacy, tag in makers:
        out = tempfile.mkdtemp(dir=work)
        p = subprocess.run([python, "-c", TORCH_BENIGN, out, legacy], capture_output=True,
                           timeout=300)
        if p.returncode != 0:
            print("note: %s not built (%s)" % (family, p.stderr.decode()[-200:].strip()))
            continue
        for fn in sorted(os.listdir(out)):
            with open(os.path.join(out, fn), "rb") as fh:
                yield Sample(family, "%s%s_%s" % (tag, family.split()[1].replace(".", ""), fn),
                             False, "torch", fh.read())
    import numpy as np
    import torch
    from safetensors.torch import save as st_save
    yield Sample("safetensors", "model.safetensors", False, "safetensors",
                 st_save({"w": torch.ones(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16)}))
    for name, arr in (("float.npy", np.arange(6.0).reshape(2, 3)),
                      ("struct.npy", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))):
        buf = io.BytesIO()
        np.save(buf, arr)
        yield Sample("numpy", name, False, "numpy", buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, w=np.ones(3), rng=np.random.RandomState(1).get_state()[1])
    yield Sample("numpy", "arrays.npz", False, "numpy", buf.getvalue())
    doc = json.dumps({"metadata": {"total_size": 24},
                      "weight_map": {"w": "good.bin", "b": "good.bin"}}).encode()
    yield Sample("index JSON, benign", "index_benign/pytorch_model.bin.index.json", False,
                 "index", doc, files={"good.bin": "benign-torch"})
    yield Sample("index JSON, benign", "index_nan/pytorch_model.bin.index.json", False, "index",
                 b'{"metadata": {"total_size": NaN}, "weight_map": {"w": "good.bin"}}',
                 files={"good.bin": "benign-torch"})
    ser = [("dict.pkl", {"lr": 0.1, "steps": list(range(50)), "name": "run"}),
           ("od.pkl", collections.OrderedDict(a=1, b=[1.5, None])),
           ("big_int.pkl", {"n": 2 ** 4000 - 1}),
           ("note.pkl", ["(Note: a pickle-looking string).", "c" + "os\nsystem\n"]),
           ("b64.pkl", {"p": base64.b64encode(gen_hostile.evil_bytes(4)).decode()})]
    for proto in (0, 2, 4, 5):
        for name, obj in ser:
            yield Sample("plain pickles", "p%d_%s" % (proto, name), False, "pickle",
                         pickle.dumps(obj, protocol=proto))


def write(samples, work):
    benign_pt = torch_zip(BENIGN_P2)
    for s in samples:
        if s.data is not None and s.family.startswith("torch 2.x saves") and \
                s.name.endswith("state_dict.pt"):
            benign_pt = s.data
    seen = set()
    for s in samples:
        name = s.name
        while name in seen:
            name = "x" + name
        seen.add(name)
        s.path = os.path.join(work, "files", name)
        os.makedirs(os.path.dirname(s.path), exist_ok=True)
        with open(s.path, "wb") as fh:
            fh.write(s.data)
        for fn, data in s.files.items():
            with open(os.path.join(os.path.dirname(s.path), fn), "wb") as fh:
                fh.write(benign_pt if data == "benign-torch" else data)
        s.data = None


# ------------------------------------------------------------ truth


TRUTH = r'''
import io, json, os, pickle, signal, sys, types
calls, names = [], []
ORDINARY = tuple(json.loads(sys.argv[1]))

def stub(full):
    class Stub:
        def __new__(cls, *a, **k):
            calls.append(full)
            return object.__new__(cls)
        def __init__(self, *a, **k): pass
        def __call__(self, *a, **k): return self
        def __setstate__(self, state): pass
        def __setitem__(self, k, v): pass
        def append(self, x): pass
        def extend(self, x): pass
    return Stub

def recorder(base):
    class Recorder(base):
        def find_class(self, module, name):
            names.append(module + "." + name)
            if module == "torch" and name.endswith("Storage"):
                return getattr(__import__("torch"), name)  # torch's tar reader needs them
            return stub(module + "." + name)
    return Recorder

# no persistent_load method: torch sets its own on the instance
Recorder = recorder(pickle.Unpickler)
recmod = types.ModuleType("recording_pickle")
recmod.Unpickler = Recorder
recmod.load = lambda f, **kw: Recorder(f, **kw).load()
recmod.UnpicklingError = pickle.UnpicklingError

def load_streams(f, cls):
    """Stacked pickles read until the file ends, as a reader calling
    pickle.load in a loop does."""
    while f.peek(1) if hasattr(f, "peek") else f.tell() < len(f.getvalue()):
        u = cls(f, encoding="latin1")
        u.persistent_load = lambda pid: None
        u.load()

def load_torch(path):
    import torch
    torch.load(path, weights_only=False, pickle_module=recmod, map_location="cpu")

def load(loader, path):
    if loader == "pickle":
        with open(path, "rb") as f:
            load_streams(f, Recorder)
        if not [c for c in calls if not c.startswith(ORDINARY)]:
            # a benign file reads the same in the pure-Python unpickler
            # (it refuses an operand crossing a FRAME end, for one)
            with open(path, "rb") as f:
                load_streams(io.BytesIO(f.read()), recorder(pickle._Unpickler))
    elif loader == "torch":
        load_torch(path)
    elif loader == "numpy":
        import numpy as np
        fmt = getattr(np.lib, "_format_impl", None) or np.lib.format
        fmt.pickle = recmod
        got = np.load(path, allow_pickle=True)
        if hasattr(got, "files"):
            for k in got.files:
                got[k]
    elif loader == "index":
        with open(path, encoding="utf-8") as f:
            shards = set(json.load(f)["weight_map"].values())
        for s in sorted(shards):
            load_torch(os.path.join(os.path.dirname(path), s))
    elif loader == "safetensors":
        from safetensors.torch import load_file
        load_file(path)

def alarm(*a):
    raise TimeoutError("timeout")

signal.signal(signal.SIGALRM, alarm)
for line in sys.stdin:
    loader, path = json.loads(line)
    del calls[:], names[:]
    signal.alarm(60)
    try:
        load(loader, path)
        err = None
    except BaseException as e:
        err = "%s: %s" % (type(e).__name__, str(e)[:120])
    signal.alarm(0)
    print(json.dumps({"calls": calls, "names": names, "error": err}), flush=True)
'''


def truth(samples):
    """Each sample's loader run with recording stubs: sets s.truth."""
    p = subprocess.Popen([os.path.join(BIN, "python"), "-c", TRUTH, json.dumps(ORDINARY)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    for s in samples:
        try:
            p.stdin.write((json.dumps([s.loader, s.path]) + "\n").encode())
            p.stdin.flush()
            line = p.stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:  # the loader died (a crafted length): restart, no truth
            p = subprocess.Popen(p.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            s.truth = {"calls": [], "names": [], "error": "loader died"}
        else:
            s.truth = json.loads(line)
    p.stdin.close()
    p.wait()
    for s in samples:
        payload = [c for c in s.truth["calls"] if not c.startswith(ORDINARY)]
        confirmed_hostile = bool(payload)
        confirmed_benign = not payload and s.truth["error"] is None
        if s.hostile is None:  # decided by the loader (the syntax families)
            s.hostile = True if confirmed_hostile else False if confirmed_benign else None
            if s.hostile is False:
                s.family += ", benign"
        elif s.hostile and not confirmed_hostile:
            s.hostile = None
        elif not s.hostile and not confirmed_benign:
            s.hostile = None
        s.payload = payload


# ------------------------------------------------------------ tools


def tool_ckpt(s, args):
    try:
        p = subprocess.run([args.ckpt, "scan", "--json"] + s.ckpt_args + [s.path],
                           capture_output=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "error"
    if p.returncode not in (0, 1):
        return "error"
    v = json.loads(p.stdout)["verdict"]
    return {"safe": "clean", "not-a-checkpoint": "clean", "review": "review",
            "unsafe": "flag", "unscannable": "error"}.get(v, "error")


# Each peer through its Python API in one long-lived worker (their CLIs
# spend 0.1-1 s starting, per file), with the verdict rule of its CLI's
# exit code: a finding ("flag"), an error, nothing scanned ("skip"), clean.
PICKLESCAN = r"""
from picklescan.scanner import scan_file_path
def check(path):
    r = scan_file_path(path)
    return "error" if r.scan_err else "flag" if r.issues_count else "clean"
"""
MODELSCAN = r"""
import copy
from modelscan.modelscan import ModelScan
from modelscan.settings import DEFAULT_SETTINGS
def check(path):
    ms = ModelScan(settings=copy.deepcopy(DEFAULT_SETTINGS))
    ms.scan(path)
    return ("skip" if not ms.scanned else "error" if ms.errors else
            "flag" if ms.issues.all_issues else "clean")
"""
# fickling's own dispatch, as its Hugging Face scan runs it (its plain
# --check-safety reads raw pickles only)
FICKLING = r"""
import os
from pathlib import PurePosixPath
from fickling.cli import HF_RAW_PICKLE_EXTENSIONS, HF_ZIP_PICKLE_EXTENSIONS
from fickling.loader import scan_file, scan_zip_archive
from fickling.polyglot import find_file_properties
def check(path):
    ext = PurePosixPath(path).suffix.lower()
    props = find_file_properties(path)
    if props["is_torch_zip"] or props["is_standard_zip"] or ext in HF_ZIP_PICKLE_EXTENSIONS:
        results = list(scan_zip_archive(path, graceful=True,
                                        json_output_path=os.devnull).values())
    elif props["is_valid_pickle"] or ext in HF_RAW_PICKLE_EXTENSIONS:
        results = [scan_file(path, graceful=True, json_output_path=os.devnull)]
    else:
        return "skip"
    if not all(r.is_safe for r in results):
        return "flag"
    return "error" if any(r.errors for r in results) else "clean"
"""
MODELAUDIT = r"""
import os
os.environ.update(PROMPTFOO_DISABLE_TELEMETRY="1", NO_ANALYTICS="1")
from modelaudit.core import determine_exit_code, scan_model_directory_or_file
def check(path):
    code = determine_exit_code(scan_model_directory_or_file(path))
    return {0: "clean", 1: "flag"}.get(code, "error")
"""
WEIGHTS_ONLY = r"""
import torch
def check(path):
    try:
        torch.load(path, weights_only=True, map_location="cpu")
    except Exception:
        return "flag"  # refused
    return "clean"
"""
LOOP = r"""
import json, os, signal, sys
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the tools' own printing
def alarm(*a):
    raise TimeoutError("timeout")
signal.signal(signal.SIGALRM, alarm)
for line in sys.stdin:
    signal.alarm(int(sys.argv[1]))
    try:
        r = check(json.loads(line))
    except BaseException:
        r = "error"
    signal.alarm(0)
    out.write(r + "\n")
    out.flush()
"""
WORKERS = {"picklescan": PICKLESCAN, "modelscan": MODELSCAN, "fickling": FICKLING,
           "modelaudit": MODELAUDIT, "torch-wo": WEIGHTS_ONLY}


class Worker:
    """One tool's long-lived process: a path in, a verdict line out; a
    worker that dies or hangs answers "error" and is restarted."""

    def __init__(self, tool, args):
        self.cmd = [os.path.join(BIN, "python"), "-c", WORKERS[tool] + LOOP, str(args.timeout)]
        self.cwd, self.timeout, self.p = args.scratch, args.timeout, None

    def ask(self, path):
        if self.p is None:
            self.p = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, cwd=self.cwd)
        try:
            self.p.stdin.write((json.dumps(path) + "\n").encode())
            self.p.stdin.flush()
            ready = select.select([self.p.stdout], [], [], self.timeout + 30)[0]
            line = self.p.stdout.readline().decode().strip() if ready else ""
        except BrokenPipeError:
            line = ""
        if not line:
            self.p.kill()
            self.p.wait()
            self.p = None
            return "error"
        return line

    def close(self):
        if self.p is not None:
            self.p.stdin.close()
            self.p.wait()


def run_tool(tool, samples, args):
    if tool == "ckpt":
        for s in samples:
            s.results[tool] = tool_ckpt(s, args)
        return
    w = Worker(tool, args)
    for s in samples:
        if tool == "torch-wo" and s.loader != "torch":
            s.results[tool] = "n/a"  # a file torch.load does not read
        else:
            s.results[tool] = w.ask(s.path)
    w.close()


# ------------------------------------------------------------ table


def wrong(s, r):
    if r == "n/a":
        return None
    if s.hostile:
        return r in ("clean", "skip")
    return r in ("flag", "error")


def table(samples, tools):
    hostile = [s for s in samples if s.hostile]
    benign = [s for s in samples if s.hostile is False]
    print("\n%d hostile files (the loader calls the payload), %d benign files (the loader "
          "reads them, calls nothing else)" % (len(hostile), len(benign)))
    print("\n%-12s %14s %16s %8s %8s" % ("tool", "misses", "false alarms", "skipped",
                                        "review"))
    for t in tools:
        h = [s for s in hostile if s.results[t] != "n/a"]
        b = [s for s in benign if s.results[t] != "n/a"]
        print("%-12s %6d / %-5d %8d / %-5d %8d %8s" % (
            t, sum(wrong(s, s.results[t]) for s in h), len(h),
            sum(wrong(s, s.results[t]) for s in b), len(b),
            sum(s.results[t] == "skip" for s in h + b),
            sum(s.results[t] == "review" for s in h + b) if t == "ckpt" else "-"))
    print("\nper family: misses (hostile) or false alarms (benign) / files; '-' n/a")
    print("%-38s %5s " % ("family", "files") + " ".join("%10s" % t for t in tools))
    fams = []
    for s in hostile + benign:
        if s.family not in fams:
            fams.append(s.family)
    for f in fams:
        rows = [s for s in hostile + benign if s.family == f]
        cells = []
        for t in tools:
            applied = [s for s in rows if s.results[t] != "n/a"]
            cells.append("%10s" % ("%d/%d" % (sum(wrong(s, s.results[t]) for s in applied),
                                              len(applied)) if applied else "-"))
        print("%-38s %5d " % (f[:38], len(rows)) + " ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(ROOT, "build", "ckpt"))
    ap.add_argument("--work")
    ap.add_argument("--jobs", type=int, default=2, help="tools run at once")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per tool and file")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--families", default="", help="only families containing this text")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every wrong call")
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    work = args.work or tempfile.mkdtemp(prefix="ckpt-peers-")
    os.makedirs(work, exist_ok=True)
    args.scratch = tempfile.mkdtemp(dir=work)  # tools that write reports into their cwd
    samples = [s for s in list(hostile_families()) + list(benign_families(work))
               if args.families in s.family]
    write(samples, work)
    truth(samples)
    left_out = [s for s in samples if s.hostile is None]
    samples = [s for s in samples if s.hostile is not None]
    print("built %d files; %d left out (the loader neither calls a payload nor reads them "
          "cleanly)" % (len(samples) + len(left_out), len(left_out)))
    if args.verbose:
        for s in left_out:
            print("  left out %s: %s" % (s.name, s.truth["error"]))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        for f in [ex.submit(run_tool, t, samples, args) for t in tools]:
            f.result()
    table(samples, tools)
    if args.verbose:
        for t in tools:
            bad = [s for s in samples if wrong(s, s.results[t])]
            for s in bad:
                print("%s %s %s: %s%s" % (t, "MISS" if s.hostile else "FALSE ALARM", s.name,
                                          s.results[t],
                                          " (payload %s)" % s.payload[:2] if s.hostile else ""))
    mine = [s for s in samples if "ckpt" in tools and wrong(s, s.results["ckpt"])]
    for s in mine:
        print("ckpt WRONG: %s %s (%s): %s" % ("miss" if s.hostile else "false alarm", s.name,
                                            s.family, s.results["ckpt"]))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if mine else 0


if __name__ == "__main__":
    sys.exit(main())
