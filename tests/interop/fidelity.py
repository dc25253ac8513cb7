"""Run by test_fidelity.py under one torch (2.13 or 1.13): writes trusted
files with torch.save (fixed cases and objects generated from a seed),
converts each with `ckpt convert` to .pt and .safetensors, and compares,
type for type, what torch.load(weights_only=False) gives for the original
with what ckpt.load gives for the original and for both converted files,
and with what torch.load gives for the converted .pt (2.x also with
weights_only=True when nothing from numpy is in it). One JSON line per
check: {"case", "check", "ok", "diffs"}.

usage: fidelity.py OUTDIR CKPT_BIN SEED COUNT
(Compare is imported by torch_oracle.py: nothing runs on import.)
"""
import collections
import json
import math
import os
import random
import struct
import subprocess
import sys

import numpy as np
import torch

import ckpt

TORCH2 = int(torch.__version__.split(".")[0]) >= 2


# ------------------------------------------------------------ comparison

def storage_key(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr()


class Compare:
    """Deep, type-exact comparison of `want` (torch.load) and `got`:
    the same classes everywhere (OrderedDict is not dict, a numpy scalar
    is not a float), tensors equal in dtype, shape, strides, bytes,
    requires_grad and class (Parameter), numpy arrays in dtype, shape,
    memory order and bytes, floats bit for bit; which tensors share a
    storage and which containers are the same object must correspond one
    to one. layout=False: strides and numpy memory order are not compared
    (safetensors holds every tensor contiguous; only views that share a
    storage keep theirs)."""

    def __init__(self, layout=True):
        self.layout = layout
        self.diffs = []
        self.pairs = {}    # ("storage"|"obj", id in want) -> id in got
        self.reverse = {}

    def pair(self, kind, a, b, path):
        if self.pairs.setdefault((kind, a), b) != b or self.reverse.setdefault((kind, b), a) != a:
            self.diffs.append("%s: %s sharing differs" % (path or "<root>", kind))

    def run(self, want, got):
        stack = [(want, got, "")]
        while stack and len(self.diffs) < 10:
            a, b, path = stack.pop()
            where = path or "<root>"
            if type(a) is not type(b):
                self.diffs.append("%s: %s, got %s" % (where, type(a).__name__, type(b).__name__))
                continue
            if isinstance(a, torch.Tensor):
                self.tensor(a, b, where)
            elif isinstance(a, np.ndarray):
                if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes() or \
                        (self.layout and a.flags.f_contiguous != b.flags.f_contiguous):
                    self.diffs.append("%s: numpy %s%s, got %s%s" % (where, a.dtype, a.shape,
                                                                   b.dtype, b.shape))
            elif isinstance(a, np.generic):
                if a.dtype != b.dtype or a.tobytes() != b.tobytes():
                    self.diffs.append("%s: %r, got %r" % (where, a, b))
            elif isinstance(a, float):
                if struct.pack("<d", a) != struct.pack("<d", b):
                    self.diffs.append("%s: %r, got %r" % (where, a, b))
            elif isinstance(a, dict):
                self.pair("obj", id(a), id(b), path)
                if list(a) != list(b):
                    self.diffs.append("%s: keys %r, got %r" % (where, list(a)[:5], list(b)[:5]))
                    continue
                for attr in ("_metadata",):
                    if hasattr(a, attr) or hasattr(b, attr):
                        stack.append((getattr(a, attr, None), getattr(b, attr, None),
                                      path + "@" + attr))
                for k in a:
                    stack.append((a[k], b[k], "%s.%s" % (path, k) if path else str(k)))
            elif isinstance(a, (list, tuple)):
                if isinstance(a, list):
                    self.pair("obj", id(a), id(b), path)
                if len(a) != len(b):
                    self.diffs.append("%s: %d items, got %d" % (where, len(a), len(b)))
                    continue
                for i, (x, y) in enumerate(zip(a, b)):
                    stack.append((x, y, "%s.%d" % (path, i) if path else str(i)))
            elif a != b:
                self.diffs.append("%s: %r, got %r" % (where, a, b))
        return self.diffs

    def tensor(self, a, b, where):
        if (a.dtype, tuple(a.shape), a.requires_grad) != (b.dtype, tuple(b.shape), b.requires_grad) \
                or (self.layout and a.stride() != b.stride()):
            self.diffs.append("%s: tensor %s%s%s rg=%s, got %s%s%s rg=%s" % (
                where, a.dtype, list(a.shape), a.stride(), a.requires_grad,
                b.dtype, list(b.shape), b.stride(), b.requires_grad))
            return
        if a.numel() == 0:
            return
        x, y = a.detach().contiguous(), b.detach().contiguous()
        if x.dtype.is_complex:
            x, y = torch.view_as_real(x), torch.view_as_real(y)
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
        if x.dtype == torch.bool:
            same = torch.equal(x, y)
        else:
            same = torch.equal(x.view(bits), y.view(bits))
        if not same:
            self.diffs.append("%s: tensor values differ" % where)
        self.pair("storage", storage_key(a), storage_key(b), where)


# ------------------------------------------------------------ objects

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]
if TORCH2:
    DTYPES += [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
               torch.float8_e5m2]
NP_DTYPES = ["?", "u1", "i1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8"]


def a_tensor(rng):
    dt = rng.choice(DTYPES)
    shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
    base = torch.randint(0, 100, shape or [], generator=GEN).to(dt) if dt != torch.bool \
        else torch.randint(0, 2, shape or [], generator=GEN).bool()
    r = rng.random()
    if r < 0.15 and base.dim() == 2:
        return base.t()  # non-contiguous view
    if r < 0.25 and dt.is_floating_point and dt.itemsize >= 2 if TORCH2 else dt.is_floating_point:
        return torch.nn.Parameter(base, requires_grad=rng.random() < 0.5)
    return base


def an_array(rng):
    dt = np.dtype(rng.choice(NP_DTYPES))
    shape = tuple(rng.randint(0, 4) for _ in range(rng.randint(0, 3)))
    a = (np.arange(int(np.prod(shape)) if shape else 1) * 37 % 101).astype(dt).reshape(shape)
    if len(shape) == 2 and rng.random() < 0.3:
        a = np.asfortranarray(a)
    return a


def a_scalar(rng):
    code = rng.choice(NP_DTYPES)
    return np.dtype(code).type(rng.choice([0, 1, 7, 100]))


def a_leaf(rng, shared):
    r = rng.randrange(14)
    if r == 0:
        return None
    if r == 1:
        return rng.random() < 0.5
    if r == 2:
        return rng.choice([0, -1, 255, 2 ** 31, -2 ** 63, 2 ** 64 + 5, -(10 ** 30)])
    if r == 3:
        return rng.choice([0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, 1e-310, 3.141592653589793])
    if r == 4:
        return rng.choice(["", "x", "ünï©ødé", "a" * 300])
    if r == 5:
        return rng.choice([b"", b"\x00\xff", bytes(range(256))])
    if r in (6, 7, 8):
        t = a_tensor(rng)
        if rng.random() < 0.3:
            shared.append(t)
        return t
    if r == 9 and shared:
        t = rng.choice(shared)  # the same tensor again, or a view of its storage
        return t if rng.random() < 0.5 or t.dim() == 0 or t.numel() == 0 else t.view(-1)[:1]
    if r == 10:
        return an_array(rng)
    if r == 11:
        return a_scalar(rng)
    if r == 12:
        return rng.choice([torch.float32, torch.int64, torch.bfloat16])
    return rng.randint(-5, 5)


def an_object(rng, depth=0, shared=None):
    shared = [] if shared is None else shared
    if depth > 3 or rng.random() < 0.3:
        return a_leaf(rng, shared)
    n = rng.randint(0, 4)
    kind = rng.randrange(6)
    if kind == 0:
        return {"k%d" % i: an_object(rng, depth + 1, shared) for i in range(n)}
    if kind == 1:
        d = collections.OrderedDict(("w%d" % i, an_object(rng, depth + 1, shared))
                                    for i in range(n))
        if rng.random() < 0.5:
            d._metadata = collections.OrderedDict([("", {"version": 1})])
        return d
    if kind == 2:
        return [an_object(rng, depth + 1, shared) for _ in range(n)]
    if kind == 3:
        return tuple(an_object(rng, depth + 1, shared) for _ in range(n))
    if kind == 4:
        return {rng.choice([1, 2.5, "s", b"b", None, True, (1, "t")]): an_object(rng, depth + 1, shared)
                for _ in range(n)}
    return (set if rng.random() < 0.5 else frozenset)(
        rng.choice([1, 2, "a", b"z", 3.5, None, (1, 2)]) for _ in range(n))


def fixed_cases():
    np.random.seed(1)
    sd = collections.OrderedDict(weight=torch.randn(3, 2), bias=torch.zeros(3))
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    lst = [1, 2]
    return {
        "state_dict": sd,
        "rng_states": {"numpy": np.random.get_state(), "python": (3, tuple(range(5)), None),
                       "torch": torch.get_rng_state()},
        "numpy_scalars": {c: np.dtype(c).type(1) for c in NP_DTYPES},
        "numpy_arrays": [np.zeros((2, 3), "f4"), np.asfortranarray(np.ones((2, 3), "i8")),
                         np.array(5, "u8"), np.arange(4, dtype="u4")],
        "sets": {"s": {1, "a"}, "f": frozenset({2, b"b"}), "e": set(), "fe": frozenset()},
        "shared": {"a": lst, "b": lst, "t": (lst, lst)},
        "tied": (lambda w: {"enc": w, "dec": w, "view": w[0]})(torch.randn(4, 4)),
        "parameter": {"p": torch.nn.Parameter(torch.ones(2)),
                      "q": torch.nn.Parameter(torch.ones(2), requires_grad=False)},
        "counter": collections.Counter({"a": 3, "b": 1}),
        # views of one 0-byte storage (a 0-numel view may sit at any
        # offset, torch checks no bounds for it), and 0-numel views at and
        # past the end of a storage with bytes
        "shared_empty": (lambda x, z: {
            "a": x, "b": x[0:0], "c": x.view(0, 3)[:, 1:], "d": x.as_strided((0,), (1,), 5),
            "z": z, "end": z[4:], "past": z.as_strided((0, 2), (2, 1), 9)})(
                torch.empty(0), torch.zeros(4)),
        # classes torch.load gives back that are not their kind's plain one
        # (were a str, a tuple and bytes)
        "torch_types": {"cuda1": torch.device("cuda", 1), "cpu": torch.device("cpu"),
                        "size": torch.Size([2, 3]), "size0": torch.Size([]),
                        "bytearray": bytearray(b"\x00\xffa"), "empty": bytearray(),
                        "bytes": b"xy", "tuple": (2, 3), "str": "cuda:1"},
    }


# ------------------------------------------------------------ checks

def emit(case, check, diffs):
    print(json.dumps({"case": case, "check": check, "ok": not diffs, "diffs": diffs[:5]}),
          flush=True)


def has_numpy(obj):
    stack, seen = [obj], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (np.ndarray, np.generic)):
            return True
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
            stack.extend(getattr(x, "__dict__", {}).values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
    return False


def weights_only_parity(src, dst, want):
    """The converted .pt loads with weights_only=True whenever the original
    does (then equal to it); ckpt may do better (empty bytes are written
    through _codecs.encode, which torch allows, not builtins.bytes)."""
    got = []
    for path in (src, dst):
        try:
            got.append(torch.load(path, weights_only=True))
        except Exception as e:  # noqa: BLE001 (a refusal is compared)
            line = [x for x in str(e).splitlines() if "GLOBAL" in x or "Unsupported" in x]
            got.append(Refused((line or [str(e)])[0].strip()[:200]))
    if isinstance(got[1], Refused):
        return [] if isinstance(got[0], Refused) else ["refused: " + got[1]]
    return Compare().run(want, got[1])


class Refused(str):
    """torch.load(weights_only=True) refused the file: its message."""


def check(case, obj):
    src = os.path.join(OUT, case + ".pt")
    torch.save(obj, src)
    want = torch.load(src, weights_only=False)  # a trusted file we made
    emit(case, "ckpt.load", Compare().run(want, ckpt.load(src)))
    for ext in (".pt", ".safetensors"):
        dst = os.path.join(OUT, case + ".converted" + ext)
        p = subprocess.run([CKPT_BIN, "convert", "-q", src, dst], stderr=subprocess.PIPE)
        if p.returncode != 0:
            emit(case, "convert to " + ext, [p.stderr.decode()[-300:]])
            continue
        emit(case, "ckpt.load of convert " + ext,
             Compare(layout=ext == ".pt").run(want, ckpt.load(dst)))
        if ext == ".pt":
            emit(case, "torch.load of convert .pt",
                 Compare().run(want, torch.load(dst, weights_only=False)))
            if TORCH2:  # refused exactly when the original is (numpy, frozenset)
                emit(case, "torch.load(weights_only=True) of convert .pt",
                     weights_only_parity(src, dst, want))


def main():
    global GEN, OUT, CKPT_BIN
    OUT, CKPT_BIN, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    GEN = torch.Generator().manual_seed(seed)
    for name, obj in fixed_cases().items():
        check(name, obj)
    rng = random.Random(seed)
    for i in range(count):
        check("generated%03d" % i, an_object(rng))


if __name__ == "__main__":
    main()
