#!/usr/bin/python3
"""Writes varied checkpoints with PyTorch (the oracle) and, next to each,
FILE.expected.json: torch's own view of the file in the shape of
`ckpt inspect --json --hash sha256`.

    /usr/bin/python3 tests/interop/gen_checkpoints.py OUTDIR

The expected view is always computed from torch.load (or pickle.load for a
raw pickle) of the file just written, never from the object in memory, so
it is what PyTorch itself reads back. Files torch 1.13 cannot write (a
big-endian archive, a deflated archive) are rewritten from one torch wrote;
their expected view is torch's view of the original.

Run with Debian's python3 (which has python3-torch 1.13 and numpy), from a
working directory without a folder named "torch" in it. Deterministic: all
random sources are seeded. Writes < 1 MB in < 10 s.
"""
import collections
import hashlib
import io
import json
import math
import os
import pickle
import random
import sys
import zipfile

import numpy as np
import torch
import torch.nn as nn

# ------------------------------------------------------------------ oracle

TORCH_DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8",
    torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
    torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
    torch.float64: "F64", torch.complex64: "C64", torch.complex128: "C128",
    torch.complex32: "C32",
}

NUMPY_DTYPES = {
    ("b", 1): "BOOL", ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32",
    ("u", 8): "U64", ("i", 1): "I8", ("i", 2): "I16", ("i", 4): "I32",
    ("i", 8): "I64", ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64",
    ("c", 8): "C64", ("c", 16): "C128",
}


def torch_tensor_bytes(t):
    """Logical contents as contiguous row-major little-endian bytes."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype == torch.complex32:
        t = t.view(torch.int16)  # view of the last dim as pairs of halves
    return t.numpy().tobytes()


def numpy_array_bytes(a):
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


def tensor_entry(name, t):
    data = torch_tensor_bytes(t)
    return {"name": name, "dtype": TORCH_DTYPES[t.dtype],
            "shape": list(t.shape), "nbytes": t.numel() * t.element_size(),
            "sha256": hashlib.sha256(data).hexdigest()}


def numpy_entry(name, a):
    data = numpy_array_bytes(a)
    return {"name": name, "dtype": NUMPY_DTYPES[(a.dtype.kind, a.dtype.itemsize)],
            "shape": list(a.shape), "nbytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def float_value(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def view(obj):
    """(tensors, values) of an object as `ckpt inspect` must list them."""
    tensors, values = [], []

    def join(prefix, key):
        return key if prefix is None else prefix + "." + key

    def leaf(name, typ, value):
        values.append({"name": "" if name is None else name, "type": typ,
                       "value": value})

    def walk(x, name):
        if isinstance(x, torch.Tensor):
            tensors.append(tensor_entry("" if name is None else name, x))
        elif isinstance(x, np.ndarray):
            tensors.append(numpy_entry("" if name is None else name, x))
        elif isinstance(x, np.generic):
            if isinstance(x, np.bool_):
                leaf(name, "bool", bool(x))
            elif isinstance(x, np.integer):
                leaf(name, "int", int(x))
            elif isinstance(x, np.floating):
                leaf(name, "float", float_value(x))
            else:
                raise TypeError("numpy scalar %r" % (x,))
        elif x is None:
            leaf(name, "none", None)
        elif isinstance(x, bool):
            leaf(name, "bool", x)
        elif isinstance(x, int):
            leaf(name, "int", int(x))
        elif isinstance(x, float):
            leaf(name, "float", float_value(x))
        elif isinstance(x, str):
            leaf(name, "str", x)
        elif isinstance(x, bytes):
            leaf(name, "bytes", x.hex())
        elif isinstance(x, torch.device):
            leaf(name, "str", str(x))
        elif isinstance(x, torch.dtype):
            leaf(name, "object", str(x))  # "torch.float32"
        elif isinstance(x, dict):
            for k, v in x.items():
                if isinstance(k, bool) or not isinstance(k, (int, str)):
                    raise TypeError("dict key %r" % (k,))
                walk(v, join(name, str(k)))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, join(name, str(i)))
        else:
            raise TypeError("no oracle view for %r" % (type(x),))

    walk(obj, None)
    tensors.sort(key=lambda e: e["name"])
    values.sort(key=lambda e: e["name"])
    names = [e["name"] for e in tensors] + [e["name"] for e in values]
    if len(set(names)) != len(names):
        raise ValueError("duplicate flattened names")
    return tensors, values


def write_expected(path, fmt, obj):
    tensors, values = view(obj)
    doc = {"file": os.path.basename(path), "format": fmt, "tensors": tensors,
           "values": values, "metadata": None}
    with open(path + ".expected.json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False, allow_nan=False)
        f.write("\n")


def torch_case(outdir, name, obj, legacy=False, protocol=None):
    path = os.path.join(outdir, name)
    kw = {}
    if legacy:
        kw["_use_new_zipfile_serialization"] = False
    if protocol is not None:
        kw["pickle_protocol"] = protocol
    torch.save(obj, path, **kw)
    loaded = torch.load(path)
    write_expected(path, "torch-legacy" if legacy else "torch-zip", loaded)
    return path


# ------------------------------------------------------- archive rewriting

STORAGE_ELEMENT = {  # storage class -> bytes swapped as one unit
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1,
    "ByteStorage": 1, "BoolStorage": 1, "BFloat16Storage": 2,
    # torch byteswaps complex storages per component (UntypedStorage.byteswap)
    "ComplexDoubleStorage": 8, "ComplexFloatStorage": 4,
}


class _Opaque:
    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class _StorageKeys(pickle.Unpickler):
    """Reads data.pkl without torch: records storage key -> storage class."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data))
        self.keys = {}

    def find_class(self, module, name):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if name.endswith("Storage"):
            return name
        return _Opaque

    def persistent_load(self, pid):
        assert pid[0] == "storage", pid
        self.keys[str(pid[2])] = pid[1]
        return None


def rewrite_archive(src, dst, big_endian=False, deflate=False):
    """Copies torch zip `src` to `dst` with Python's zipfile: optionally adds
    a `byteorder` record "big" and byte-swaps every data/N storage the way a
    big-endian torch writes it, and/or deflates every member."""
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        prefix = infos[0].filename.split("/", 1)[0] + "/"
        members = [(i.filename, zin.read(i.filename)) for i in infos]
    keys = {}
    if big_endian:
        pk = dict(members)[prefix + "data.pkl"]
        up = _StorageKeys(pk)
        up.load()
        keys = up.keys
    out = []
    for fname, data in members:
        rel = fname[len(prefix):]
        if rel == "byteorder":
            continue
        if big_endian and rel.startswith("data/"):
            esz = STORAGE_ELEMENT[keys[rel[5:]]]
            if esz > 1:
                assert len(data) % esz == 0
                a = np.frombuffer(data, dtype="<u%d" % esz)
                data = a.astype(">u%d" % esz).tobytes()
        out.append((fname, data))
        if big_endian and rel == "data.pkl":
            out.append((prefix + "byteorder", b"big"))
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(dst, "w", compression=method) as zout:
        for fname, data in out:
            zout.writestr(zipfile.ZipInfo(fname, (1980, 1, 1, 0, 0, 0)), data,
                          compress_type=method)


def rewritten_case(outdir, name, src, **kw):
    path = os.path.join(outdir, name)
    rewrite_archive(src, path, **kw)
    write_expected(path, "torch-zip", torch.load(src))  # the original's view
    return path


# ------------------------------------------------------------------ cases

def dtype_tensors():
    f = [0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 65504.0,
         1e-7]
    return {
        "bool": torch.tensor([True, False, True, True, False]),
        "uint8": torch.tensor([[0, 1, 127], [128, 254, 255]], dtype=torch.uint8),
        "int8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "int16": torch.tensor([-32768, -2, 0, 3, 32767], dtype=torch.int16),
        "int32": torch.tensor([[-2**31, -5], [7, 2**31 - 1]], dtype=torch.int32),
        "int64": torch.tensor([-2**63, -1, 0, 2**40 + 3, 2**63 - 1],
                              dtype=torch.int64),
        "float16": torch.tensor(f, dtype=torch.float16),
        "bfloat16": torch.tensor(f[:6] + [3.0e38, 1e-30], dtype=torch.bfloat16),
        "float32": torch.tensor(f + [-0.0, 1e-45, 3.4e38],
                                dtype=torch.float32).reshape(1, 11),
        "float64": torch.tensor(f + [-0.0, 5e-324, 1.7976931348623157e308],
                                dtype=torch.float64),
        "complex64": torch.tensor([1 + 2j, -3.5j, float("inf") + 0j, 0j],
                                  dtype=torch.complex64),
        "complex128": torch.tensor([[1 + 2j, -1e300 + 1e-300j],
                                    [complex(float("nan"), 1), 7j]],
                                   dtype=torch.complex128),
        "randn": torch.randn(3, 4, 5),
    }


def shape_tensors():
    base = torch.arange(12, dtype=torch.float32)
    return {
        "scalar_f32": torch.tensor(3.25),
        "scalar_i64": torch.tensor(-7, dtype=torch.int64),
        "scalar_bool": torch.tensor(True),
        "empty_1d": torch.zeros(0),
        "empty_2x0": torch.zeros(2, 0, dtype=torch.int64),
        "empty_0x3": torch.zeros(0, 3, dtype=torch.float16),
        "ones_1x1x1x5": torch.ones(1, 1, 1, 5),
        "element_view": base[5],  # 0-dim view at an offset
        "empty_view": base[3:3],  # 0 elements at an offset
        "param": nn.Parameter(torch.linspace(-1, 1, 6).reshape(2, 3)),
        "frozen_param": nn.Parameter(torch.ones(2), requires_grad=False),
        "6d": torch.arange(64, dtype=torch.int16).reshape(2, 2, 2, 2, 2, 2),
    }


def view_tensors():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    flat = torch.arange(30, dtype=torch.float64) * 0.5
    return {
        "base": base,
        "rows_from_1": base[1:],
        "column_1": base[:, 1],
        "transposed": base.t(),
        "every_2nd_row": base[::2],
        "every_3rd_col": base[:, ::3],
        "block": base[1:3, 2:5],
        "flat_a": flat[2:8],           # two views of one storage, neither
        "flat_b": flat[10:20].view(2, 5),  # covering it whole
        "flat_c": flat[1::7],
        "int_view": torch.arange(20, dtype=torch.int64)[5:15].view(5, 2).t(),
    }


def view_edge_tensors():
    return {
        "expanded": torch.arange(3, dtype=torch.float32).expand(4, 3),  # stride 0
        "channels_last": torch.randn(2, 3, 4, 5).to(
            memory_format=torch.channels_last),
        "permuted": torch.arange(24, dtype=torch.int32).reshape(2, 3, 4).permute(2, 0, 1),
        "unfold": torch.arange(10, dtype=torch.float64).unfold(0, 4, 2),  # overlapping
    }


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def training_checkpoint(opt_name):
    torch.manual_seed(1)
    model = MLP()
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                              weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = torch.randn(10, 8), torch.randint(0, 4, (10,))
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "epoch": 3,
        "step": 3,
        "loss": float(loss),
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
        "metrics": {"best": np.float64(1.5), "count": np.int64(7),
                    "improved": np.bool_(True)},
        "device": torch.device("cpu"),
    }


def mixed_values():
    return {
        "nested": {"a": {"b": {"c": 1, "d": [1, 2, (3, "x")]}},
                   "list_of_dicts": [{"k": 1}, {"k": 2.5}]},
        "ints": {1: 1, 2: -1, 10: 255, 11: 256, 12: 65535, 13: 65536,
                 20: 2**31 - 1, 21: -2**31, 22: 2**31, 23: 2**63 - 1,
                 24: -2**63, 30: 2**70, 31: -2**65, 32: 2**64,
                 33: -2**64 - 1, 40: 0},
        "floats": [0.1, 1.0, -2.5, 1e300, 5e-324, float("nan"),
                   float("inf"), float("-inf"), 123456789.123456789],
        "strs": ["", "plain", "héllo wörld", "ключ", "emoji \U0001F600",
                 "tab\tnew\nline", 'quote " and \\ backslash', "nul\x00in"],
        "bytes": b"\x00\x01\xfe\xffabc",
        "empty_bytes": b"",
        "none": None,
        "flags": (True, False),
        "empty_dict": {},
        "empty_list": [],
        "empty_tuple": (),
        "ключ": "non-ascii key",
        "dtype": torch.float32,
        "device": torch.device("cpu"),
        "np": {"f64": np.float64(1.5), "f32": np.float32(0.1),
               "i64": np.int64(7), "i32": np.int32(-5), "u8": np.uint8(200),
               "bool": np.bool_(True), "false": np.bool_(False)},
        "tensor_in_list": [torch.tensor([1.0, 2.0]), 3, "three"],
        "size": torch.Size([2, 0, 3]),  # a tuple subclass: flattened
        "ordered": collections.OrderedDict([("z", 1), ("a", 2)]),
    }


def numpy_arrays():
    return {
        "f64": np.arange(6, dtype=np.float64).reshape(2, 3) / 3,
        "f32": np.linspace(-1, 1, 5, dtype=np.float32),
        "f16": np.array([1.5, -0.0, np.inf], dtype=np.float16),
        "u32": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
        "i64": np.array([[-2**63], [2**63 - 1]], dtype=np.int64),
        "u8": np.array([0, 128, 255], dtype=np.uint8),
        "bool": np.array([True, False], dtype=np.bool_),
        "c128": np.array([1 + 1j, -2j], dtype=np.complex128),
        "scalar_i32": np.array(5, dtype=np.int32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def numpy_edge_arrays():
    return {
        "fortran": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "big_endian": np.array([1, 256, -2], dtype=">i4"),
        "big_endian_f64": np.array([1.5, -2.0], dtype=">f8"),
    }


def raw_pickle_obj():
    return {"name": "raw", "version": 3, "big": 2**80, "neg": -12345,
            "items": ["a", "b", 1, 2], "nested": {"x": 1, "y": "z"},
            "ratio": 0.25, "ok": True, "nothing": None}


def generate(outdir):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    os.makedirs(outdir, exist_ok=True)
    files = []
    c = lambda *a, **k: files.append(torch_case(outdir, *a, **k))  # noqa: E731

    c("dtypes.pt", dtype_tensors())
    c("dtypes_legacy.pt", dtype_tensors(), legacy=True)
    c("dtypes_p4.pt", dtype_tensors(), protocol=4)
    c("shapes.pt", shape_tensors())
    c("shapes_legacy.pt", shape_tensors(), legacy=True)
    c("views.pt", view_tensors())
    c("views_legacy.pt", view_tensors(), legacy=True)
    c("views_p4.pt", view_tensors(), protocol=4)
    c("views_edge.pt", view_edge_tensors())
    c("channels_last.pt", {"conv.weight": torch.randn(2, 3, 4, 5).to(
        memory_format=torch.channels_last), "conv.bias": torch.randn(2)})

    torch.manual_seed(2)
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    tied = {"embed.weight": emb.weight, "head.weight": head.weight,
            "again": {"w": emb.weight}, "sd": nn.ModuleDict(
                {"embed": emb, "head": head}).state_dict()}
    c("tied.pt", tied)
    c("tied_legacy.pt", tied, legacy=True)

    torch.manual_seed(3)
    dp = nn.DataParallel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3),
                                       nn.ReLU(), nn.Linear(3, 2)))
    c("dataparallel.pt", dp.state_dict())

    c("train_adam.pt", training_checkpoint("adam"))
    c("train_sgd.pt", training_checkpoint("sgd"))
    c("train_adam_legacy.pt", training_checkpoint("adam"), legacy=True)
    c("train_adam_p4.pt", training_checkpoint("adam"), protocol=4)

    c("values.pt", mixed_values())
    c("values_p4.pt", mixed_values(), protocol=4)
    c("values_legacy.pt", mixed_values(), legacy=True)
    c("values_legacy_p4.pt", mixed_values(), legacy=True, protocol=4)

    c("numpy_arrays.pt", numpy_arrays())
    c("numpy_edge.pt", numpy_edge_arrays())

    torch.manual_seed(4)
    c("bare_tensor.pt", torch.randn(3, 2))
    c("bare_tensor_legacy.pt", torch.arange(5, dtype=torch.int32)[1:],
      legacy=True)
    c("bare_list.pt", [torch.ones(2), 5, [torch.zeros(1, dtype=torch.int8)]])

    for proto in (2, 4):
        path = os.path.join(outdir, "raw_p%d.pkl" % proto)
        with open(path, "wb") as f:
            pickle.dump(raw_pickle_obj(), f, protocol=proto)
        with open(path, "rb") as f:
            write_expected(path, "pickle", pickle.load(f))
        files.append(path)

    src = os.path.join(outdir, "dtypes.pt")
    files.append(rewritten_case(outdir, "bigendian_dtypes.pt", src,
                                big_endian=True))
    files.append(rewritten_case(outdir, "bigendian_views.pt",
                                os.path.join(outdir, "views.pt"),
                                big_endian=True))
    files.append(rewritten_case(outdir, "bigendian_train.pt",
                                os.path.join(outdir, "train_adam.pt"),
                                big_endian=True))
    files.append(rewritten_case(outdir, "deflated_dtypes.pt", src,
                                deflate=True))
    return files


def main():
    if len(sys.argv) != 2:
        print("usage: gen_checkpoints.py OUTDIR", file=sys.stderr)
        return 2
    files = generate(sys.argv[1])
    total = sum(os.path.getsize(p) for p in files)
    print("wrote %d checkpoints, %d bytes" % (len(files), total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
