"""Helpers for the write-path tests (standard library + numpy only; torch
is imported by the tests themselves).

- decode_pt(path): a torch.save zip read without torch, for the files
  torch 1.13 cannot load (tensors it stores untyped: uint16/32/64, float8,
  complex32 through _rebuild_tensor_v3 on an UntypedStorage). Only the
  globals ckpt's writer emits are resolved; anything else raises.
- canon(obj, tensors): a comparable form of a loaded checkpoint, the same
  for torch.load's objects, numpy values and decode_pt's Tensor records,
  with every tensor also appended to `tensors` for the sharing checks.
  OrderedDict and Counter are told from dict, with their attributes
  (a state dict's _metadata), and nn.Parameter from a tensor. Known
  differences of ckpt's object model, normalised here and nowhere else:
  torch.Size as tuple, torch.device as its str, numpy scalars as Python
  numbers, numpy arrays as tensors of the same dtype, frozenset as set.
- st_read / st_serialize: a safetensors parser and a reference writer that
  follows FORMATS.md §1.5 line by line.
- walk_pickle(data): opcodes and globals of a pickle (pickletools.genops),
  and the weights_only allowlists of FORMATS.md §2.6.
"""
import collections
import io
import json
import math
import pickle
import pickletools
import struct
import zipfile

import numpy as np

# ------------------------------------------------------------------ dtypes

# safetensors name -> numpy dtype holding the element bytes
NP_OF = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2",
    "I32": "<i4", "U32": "<u4", "I64": "<i8", "U64": "<u8", "F16": "<f2",
    "BF16": "<u2", "F32": "<f4", "F64": "<f8", "C32": "<u4", "C64": "<c8",
    "C128": "<c16", "F8_E5M2": "u1", "F8_E4M3": "u1", "F8_E8M0": "u1",
    "F8_E4M3FNUZ": "u1", "F8_E5M2FNUZ": "u1",
}
STORAGE_CLASS = {
    "DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16",
    "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16",
    "CharStorage": "I8", "ByteStorage": "U8", "BoolStorage": "BOOL",
    "BFloat16Storage": "BF16", "ComplexDoubleStorage": "C128",
    "ComplexFloatStorage": "C64",
}
TORCH_DTYPE_NAME = {
    "float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint8": "U8", "bool": "BOOL", "complex64": "C64", "complex128": "C128",
    "complex32": "C32", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
}
NUMPY_NAME = {
    ("b", 1): "BOOL", ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32",
    ("u", 8): "U64", ("i", 1): "I8", ("i", 2): "I16", ("i", 4): "I32",
    ("i", 8): "I64", ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64",
    ("c", 8): "C64", ("c", 16): "C128",
}


def element_size(name):
    return np.dtype(NP_OF[name]).itemsize


# ------------------------------------------------------------------ decode_pt

class DtypeRef:
    """A torch dtype global (torch.uint32...) without needing torch."""

    def __init__(self, name):
        self.name = name


class Storage:
    def __init__(self, data, dtype):
        self.data = data   # bytes
        self.dtype = dtype  # safetensors name of its elements, or None (untyped)


class Tensor:
    """A tensor as decode_pt rebuilds it: a view of a Storage."""

    def __init__(self, storage, dtype, offset, shape, stride, requires_grad):
        self.storage, self.dtype = storage, dtype
        self.offset, self.shape, self.stride = offset, tuple(shape), tuple(stride)
        self.requires_grad = bool(requires_grad)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def logical_bytes(self):
        esz = element_size(self.dtype)
        if self.numel() == 0:
            return b""
        base = np.frombuffer(self.storage.data, dtype=NP_OF[self.dtype])
        view = np.lib.stride_tricks.as_strided(
            base[self.offset:], shape=self.shape,
            strides=[s * esz for s in self.stride])
        return np.ascontiguousarray(view).tobytes()

    def byte_range(self):
        """[lo, hi) bytes of the storage the view touches."""
        esz = element_size(self.dtype)
        if self.numel() == 0:
            return (0, 0)
        last = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        return (self.offset * esz, (last + 1) * esz)


class Parameter(Tensor):
    """What _rebuild_parameter makes of a decoded tensor."""


def _rebuild_parameter(data, requires_grad, hooks):
    return Parameter(data.storage, data.dtype, data.offset, data.shape, data.stride,
                     requires_grad)


def _rebuild_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    return Tensor(storage, storage.dtype, offset, size, stride, requires_grad)


def _rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype,
                metadata=None):
    return Tensor(storage, TORCH_DTYPE_NAME[dtype.name], offset, size, stride,
                  requires_grad)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data, records):
        super().__init__(io.BytesIO(data))
        self.records = records
        self.storages = {}

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":
            return _rebuild_v3
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "collections" and name in ("OrderedDict", "Counter"):
            return getattr(collections, name)
        if module == "_codecs" and name == "encode":
            import codecs
            return codecs.encode
        if module == "builtins" and name == "set":
            return set
        if module == "torch" and (name.endswith("Storage")):
            return name
        if module == "torch.storage" and name == "UntypedStorage":
            return name  # as torch.save writes it, and weights_only allows
        if module == "torch" and name in TORCH_DTYPE_NAME:
            return DtypeRef(name)
        raise pickle.UnpicklingError("unexpected global %s.%s" % (module, name))

    def persistent_load(self, pid):
        tag, cls, key, location, numel = pid
        assert tag == "storage" and location == "cpu", pid
        if key not in self.storages:
            data = self.records["data/" + key]
            dtype = None if cls == "UntypedStorage" else STORAGE_CLASS[cls]
            want = numel if dtype is None else numel * element_size(dtype)
            assert len(data) == want, (key, len(data), want)
            self.storages[key] = Storage(data, dtype)
        return self.storages[key]


def read_zip(path):
    """{name without the archive folder: bytes}, archive folder."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        prefix = names[0].split("/", 1)[0] + "/"
        return {n[len(prefix):]: z.read(n) for n in names}, prefix[:-1]


def decode_pt(path):
    records, _ = read_zip(path)
    return _Unpickler(records["data.pkl"], records).load()


# ------------------------------------------------------------------ canon

def _torch():
    import torch
    return torch


def torch_dtype_name(dt):
    return TORCH_DTYPE_NAME[str(dt).split(".", 1)[1]]


def torch_logical_bytes(t):
    torch = _torch()
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


class TensorRef:
    """One tensor met by canon: identity and the memory it touches."""

    def __init__(self, path, obj, storage_key, lo, hi):
        self.path, self.obj = path, obj
        self.storage_key, self.lo, self.hi = storage_key, lo, hi

    def overlaps(self, other):
        return (self.storage_key is not None and self.storage_key == other.storage_key
                and self.lo < other.hi and other.lo < self.hi)


def _float(x):
    return ("float", struct.pack(">d", float(x)))


def canon(x, tensors, path="", seen=None):
    """Comparable form of x (see the module docstring)."""
    torch = None
    try:
        import torch  # noqa: F811
    except ImportError:
        pass
    if torch is not None and isinstance(x, torch.Tensor):
        esz = x.element_size()
        if x.numel():
            last = x.storage_offset() + sum((n - 1) * s for n, s in zip(x.shape, x.stride()))
            lo = x.data_ptr()
            hi = x.data_ptr() + (last - x.storage_offset() + 1) * esz
        else:
            lo = hi = 0
        tensors.append(TensorRef(path, x, "torch", lo, hi))
        return ("param" if isinstance(x, torch.nn.Parameter) else "tensor",
                torch_dtype_name(x.dtype), tuple(x.shape), torch_logical_bytes(x),
                bool(x.requires_grad))
    if isinstance(x, Tensor):
        lo, hi = x.byte_range()
        tensors.append(TensorRef(path, x, id(x.storage), lo, hi))
        return ("param" if isinstance(x, Parameter) else "tensor", x.dtype, x.shape,
                x.logical_bytes(), x.requires_grad)
    if isinstance(x, np.ndarray):
        tensors.append(TensorRef(path, x, None, 0, 0))
        a = x.copy(order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        return ("tensor", NUMPY_NAME[(a.dtype.kind, a.dtype.itemsize)], tuple(a.shape),
                a.tobytes(), False)
    if isinstance(x, (bool, np.bool_)):
        return ("bool", bool(x))
    if isinstance(x, (int, np.integer)):
        return ("int", int(x))
    if isinstance(x, (float, np.floating)):
        return _float(x)
    if x is None:
        return None
    if isinstance(x, str):
        return ("str", x)
    if isinstance(x, bytes):
        return ("bytes", x)
    if torch is not None and isinstance(x, torch.device):
        return ("str", str(x))
    if torch is not None and isinstance(x, torch.dtype):
        return ("dtype", str(x).split(".", 1)[1])
    if isinstance(x, DtypeRef):
        return ("dtype", x.name)
    if isinstance(x, dict):
        items = tuple((canon(k, [], path), canon(v, tensors, _join(path, k)))
                      for k, v in x.items())
        cls = DICT_CLASSES.get(type(x))
        if cls is None:
            return ("dict", items)
        # attributes (OrderedDict's _metadata): not tensors of the checkpoint
        return (cls, items, canon(dict(vars(x)), [], path))
    if isinstance(x, (list, tuple)):
        kind = "list" if isinstance(x, list) else "tuple"
        return (kind, tuple(canon(v, tensors, _join(path, i)) for i, v in enumerate(x)))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted(repr(canon(v, tensors, path)) for v in x)))
    raise TypeError("no canonical form for %r at %r" % (type(x), path))


# dict classes ckpt keeps (exact types: a subclass would be another object)
DICT_CLASSES = {collections.OrderedDict: "OrderedDict", collections.Counter: "Counter"}


def _join(path, key):
    return str(key) if path == "" else path + "." + str(key)


def sharing(tensors):
    """Pairwise (same object, overlapping memory) relations by position."""
    rel = []
    for i in range(len(tensors)):
        for j in range(i + 1, len(tensors)):
            a, b = tensors[i], tensors[j]
            rel.append((i, j, a.obj is b.obj, a.overlaps(b)))
    return rel


def first_difference(a, b, path="root"):
    """Where two canonical forms differ, for messages."""
    if type(a) is not type(b):
        return "%s: %r vs %r" % (path, _short(a), _short(b))
    if isinstance(a, tuple):
        if len(a) != len(b):
            return "%s: length %d vs %d (%r vs %r)" % (path, len(a), len(b),
                                                       _short(a), _short(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r vs %r" % (path, _short(a), _short(b))


def _short(x):
    r = repr(x)
    return r if len(r) < 160 else r[:160] + "..."


# ------------------------------------------------------------------ safetensors

# FORMATS.md §1.3 enum order; the writer sorts descending on it.
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
               "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
               "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64",
               "U64"]


def st_read(path):
    """(header length N, metadata dict or None in file order,
    [(name, dtype, shape, bytes)] in header order)."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n].decode("utf-8"),
                        object_pairs_hook=collections.OrderedDict)
    meta = header.pop("__metadata__", None)
    tensors = []
    for name, e in header.items():
        lo, hi = e["data_offsets"]
        tensors.append((name, e["dtype"], tuple(e["shape"]), b[8 + n + lo:8 + n + hi]))
    return n, meta, tensors, b


def st_serialize(tensors, metadata):
    """The reference writer (safetensors `prepare` + `serialize`, FORMATS.md
    §1.5): sort by dtype descending then name (byte order), offsets from 0,
    compact serde_json header with __metadata__ first, spaces to a multiple
    of 8. tensors: [(name, dtype, shape, bytes)]."""
    items = sorted(tensors, key=lambda t: (-DTYPE_ORDER.index(t[1]), t[0].encode("utf-8")))
    header = collections.OrderedDict()
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dtype, shape, data in items:
        header[name] = collections.OrderedDict(
            [("dtype", dtype), ("shape", list(shape)), ("data_offsets", [off, off + len(data)])])
        off += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in items)


# ------------------------------------------------------------------ pickles

# FORMATS.md §2.6, WO-new: the opcodes torch's weights_only unpickler runs.
WO_OPCODES = {
    "PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS",
    "SETITEM", "SETITEMS", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE",
    "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET",
    "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING",
    "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1",
}
_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16",
           "int8", "uint8", "bool", "complex64", "complex128", "qint8", "quint8",
           "qint32", "quint4x2", "quint2x4", "float8_e5m2", "float8_e4m3fn",
           "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu",
           "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
           "complex32", "uint16", "uint32", "uint64"] + \
          ["uint%d" % i for i in range(1, 8)] + ["int%d" % i for i in range(1, 8)]
_STORAGES = list(STORAGE_CLASS) + ["QInt8Storage", "QInt32Storage", "QUInt8Storage",
                                   "QUInt4x2Storage", "QUInt2x4Storage"]
# FORMATS.md §2.6 _get_allowed_globals() (tensor classes omitted: never written)
WO_GLOBALS = {
    "collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device",
    "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    "torch.storage.UntypedStorage", "torch.storage.TypedStorage", "torch.per_tensor_affine",
    "torch.per_tensor_symmetric", "torch.per_channel_affine",
    "torch.per_channel_symmetric", "torch.per_channel_affine_float_qparams",
    "torch._tensor._rebuild_from_type_v2",
} | {"torch." + d for d in _DTYPES} | {"torch." + s for s in _STORAGES} | {
    "torch._utils." + f for f in (
        "_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor",
        "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
        "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
        "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
        "_rebuild_device_tensor_from_cpu_tensor")}
# Python 2 names pickle protocol 2 writes, mapped as _compat_pickle does.
_MODULE_MAP = {"__builtin__": "builtins", "copy_reg": "copyreg"}


def walk_pickle(data):
    """(set of opcode names, set of "module.name" globals) of one pickle."""
    ops, globs = set(), set()
    for op, arg, _ in pickletools.genops(data):
        ops.add(op.name)
        if op.name == "GLOBAL":
            module, name = arg.split(" ", 1)
            globs.add(_MODULE_MAP.get(module, module) + "." + name)
    return ops, globs


def float_repr(x):
    return "nan" if math.isnan(x) else repr(x)
