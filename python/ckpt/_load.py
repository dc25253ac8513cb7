"""ckpt.load: a checkpoint as Python objects, nothing executed.

Default: every tensor lives in private memory that does not depend on the
file. libckpt opens the file (its structure only), the converter builds
each tensor as a view of one torch buffer per storage (so tensors that
shared a storage in the file share memory after loading), and one
ckpt_file_read_storages call fills all the buffers in file order with
large sequential preads. The file can then be truncated, rewritten or
replaced (torch.save to the same path) without affecting what was loaded,
and a file that shrinks during the read is an error, not SIGBUS.

mmap=True: zero-copy. The file is mapped copy-on-write (MAP_PRIVATE) by
Python and opened with ckpt_open_memory over that mapping; tensors whose
elements are contiguous little-endian bytes in the mapping are views of it
(a tensor written in place gets private pages). The file must then not
change or shrink while the tensors live: torch.save to the same path, or
another process truncating it, kills the process with SIGBUS.
"""
import collections
import ctypes
import json
import sys
import mmap
import os
import stat

from . import errors
from ._lib import (KIND_BOOL, KIND_BYTES, KIND_DICT, KIND_FLOAT, KIND_INT,
                   KIND_LIST, KIND_NONE, KIND_OBJECT, KIND_SET, KIND_STR,
                   KIND_TENSOR, KIND_TUPLE, NO_OFFSET, c_u64, check, fspath, lib, text)
from ._lib import FORMAT_SAFETENSORS_SHARDED
from . import _scan


# ckpt dtype names -> torch attribute names (absent ones fall back to RawTensor).
_TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16",
    "U16": "uint16", "I32": "int32", "U32": "uint32", "I64": "int64",
    "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "C32": "complex32", "C64": "complex64",
    "C128": "complex128", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


# ckpt dtype names -> numpy dtype codes (little-endian, as ckpt reads them)
_NUMPY_DTYPES = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "I32": "<i4",
    "U32": "<u4", "I64": "<i8", "U64": "<u8", "F16": "<f2", "F32": "<f4", "F64": "<f8",
    "C64": "<c8", "C128": "<c16",
}


def _numpy_dtype(code):
    import numpy as np
    return np.dtype(_NUMPY_DTYPES[text(lib.ckpt_dtype_name(code))])


class Opaque:
    """An object the checkpoint would have built by calling `name`
    ("module.qualname"), which ckpt never calls. `args` and `state` are the
    arguments and BUILD state it would have received, as plain data (they
    may themselves contain Opaque placeholders)."""

    __slots__ = ("name", "args", "state")

    def __init__(self, name, args=None, state=None):
        self.name, self.args, self.state = name, args, state

    def __repr__(self):
        return "<ckpt.Opaque %s (not constructed)>" % self.name


class RawTensor:
    """A tensor whose dtype the installed torch lacks (F8 on old torch,
    F4/F6, quantized, unsigned 16/32/64 on torch < 2.3): `dtype` is the ckpt
    name ("F8_E4M3"), `shape` a tuple, `data` a uint8 tensor of its logical
    contents as contiguous little-endian bytes."""

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, tuple(shape), data

    def __repr__(self):
        return "<ckpt.RawTensor %s%s>" % (self.dtype, list(self.shape))


_dtype_cache = {}
# ckpt_value_dict_class -> the mapping class torch.load would build
_DICT_CLASSES = {b"collections.OrderedDict": collections.OrderedDict,
                 b"collections.Counter": collections.Counter}


def _dtype_info(code):
    """(ckpt name, torch dtype or None, bits) for a ckpt_dtype value."""
    info = _dtype_cache.get(code)
    if info is None:
        import torch
        name = text(lib.ckpt_dtype_name(code))
        attr = _TORCH_DTYPES.get(name)
        info = (name, getattr(torch, attr, None) if attr else None,
                lib.ckpt_dtype_bits(code))
        _dtype_cache[code] = info
    return info


def _torch_dtype(torch, name):
    if name.startswith("torch."):
        dt = getattr(torch, name[6:], None)
        if isinstance(dt, torch.dtype):
            return dt
    return None


class _Source:
    """An opened checkpoint: the ckpt_file handle and where its tensor
    bytes can be viewed from (the Python mapping, or per-shard mappings for a
    sharded set, which libckpt cannot open from memory)."""

    def __init__(self, path, scan=False, allow=(), unsafe_ok=True, mmap=False):
        self.path = _weights_path(os.fspath(path))
        self.handle = ctypes.c_void_p()
        self.mmap = mmap
        self.buf = None     # Python-owned bytes (mmap or bytearray) or None
        self.export = None  # ctypes array over buf, alive while handle is
        self.addr = 0
        self.shards = {}
        self.report = None
        # default: libckpt opens the path and reads tensor bytes with pread
        data = _read(self.path) if mmap else None
        if data is not None:
            self.buf = data
            self.export = (ctypes.c_char * len(data)).from_buffer(data)
            self.addr = ctypes.addressof(self.export)
        try:
            if scan:  # before anything else reads the file's structure
                self.report = (_scan.scan_memory(self.addr, len(data), self.path, allow)
                               if data is not None else _scan.scan(self.path, allow))
                if not unsafe_ok and self.report.verdict in ("unsafe", "review"):
                    raise _scan.unsafe_error(self.report, self.path)
            if data is not None:
                rc = lib.ckpt_open_memory(ctypes.byref(self.handle), self.addr,
                                          len(data), fspath(self.path), None)
                if rc == errors.UnsupportedError.code:
                    rc = self._open_path()  # a sharded index (or a real refusal again)
            else:
                rc = self._open_path()
            check(rc, self.path)
            # content the scan could not examine but the reader could: a
            # corrupt file gets the reader's own error above instead
            if scan and not unsafe_ok and self.report.verdict == "unscannable":
                raise _scan.unsafe_error(self.report, self.path)
        except BaseException:
            self.close()
            raise

    def _open_path(self):
        self.handle = ctypes.c_void_p()
        self.export, self.buf, self.addr = None, None, 0
        return lib.ckpt_open(ctypes.byref(self.handle), fspath(self.path), None)

    def close(self):
        if self.handle:
            lib.ckpt_close(self.handle)
            self.handle = ctypes.c_void_p()
        self.export = None  # releases the buffer export; tensors keep buf alive

    def locate(self, t):
        """(buffer, byte offset of element [0,..,0]) of a contiguous tensor
        of a sharded set (libckpt maps the shards itself, read-only: they are
        mapped again here, copy-on-write), else None."""
        if lib.ckpt_file_format(self.handle) != FORMAT_SAFETENSORS_SHARDED or \
                not lib.ckpt_tensor_is_contiguous(t):
            return None
        off = lib.ckpt_tensor_file_offset(t)
        member = text(lib.ckpt_tensor_member(t))
        if off == NO_OFFSET or not member:
            return None
        if member not in self.shards:
            # libckpt refused names with "..", roots or drives at open
            self.shards[member] = _read(os.path.join(os.path.dirname(self.path), member))
        buf = self.shards[member]
        return (buf, off) if buf is not None else None


def _weights_path(path):
    """A model directory stands for the weights file libckpt opens in it
    (ckpt_open's rule, in transformers' order: model.safetensors, its index,
    pytorch_model.bin, its index)."""
    if not os.path.isdir(path):
        return path
    h = ctypes.c_void_p()
    check(lib.ckpt_open(ctypes.byref(h), fspath(path), None), path)
    try:
        return text(lib.ckpt_file_path(h))
    finally:
        lib.ckpt_close(h)


def _read(path):
    """The file mapped copy-on-write, or its bytes in a bytearray when it
    cannot be mapped (pipes); None for an empty or unreadable file (then
    ckpt_open reports the error with its own words)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if st.st_size == 0:
                return None
            return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = bytearray(fh.read())
        except OSError:  # a directory...: ckpt_open words the error
            return None
        return data or None
    finally:
        os.close(fd)


class _Converter:
    """Builds Python objects from the value tree. Iterative (no recursion
    limit to hit), memoised by node so shared sub-objects stay shared and a
    list that contains itself is rebuilt as one, like pickle does."""

    _PENDING = object()

    def __init__(self, src, map_location=None, load_types=True, plan=True):
        import torch
        self.torch = torch
        self.src = src
        # torch.load's types: numpy arrays stay numpy, parameters are
        # nn.Parameter, requires_grad is kept; else plain tensors (ckpt.open:
        # safetensors' get_tensor with framework="pt")
        self.load_types = load_types
        # plan: read_storages() follows the conversion (ckpt.load); else
        # each tensor is a view of the mapping or a copy (ckpt.open)
        self.plan = plan
        self.map_location = map_location
        self.moves = {}  # id(tensor) -> (tensor, target device)
        self.memo = {}
        self.bases = {}
        # default mode: storage id -> its private uint8 buffer, filled by
        # read_storages; bool views whose bytes are normalised after it
        self.buffers = {}
        self.bools = []
        # placeholders mode (StateDictReader): id(meta tensor) -> (meta, t)
        self.placeholders = None
        # out-parameters reused by every ckpt_tensor_data call
        self._p, self._n = ctypes.c_void_p(), ctypes.c_size_t()
        self._pn = (ctypes.byref(self._p), ctypes.byref(self._n))

    def convert(self, root):
        memo, results = self.memo, []
        tasks = [("enter", root)]
        while tasks:
            task = tasks.pop()
            if task[0] != "enter":
                self._finish(task, results)
                continue
            v = task[1]
            hit = memo.get(v, None)
            if hit is self._PENDING:
                raise errors.FormatError("a tuple or set contains itself", self.src.path)
            if hit is not None or v in memo:
                results.append(hit)
                continue
            kind = lib.ckpt_value_kind(v)
            if kind < KIND_LIST or kind == KIND_TENSOR:
                obj = memo[v] = self._leaf(v, kind)
                results.append(obj)
                continue
            n = lib.ckpt_value_len(v)
            if kind == KIND_LIST:
                memo[v] = []
                tasks.append(("list", v, n))
                tasks.extend(("enter", lib.ckpt_value_item(v, i)) for i in reversed(range(n)))
            elif kind == KIND_DICT:
                memo[v] = _DICT_CLASSES.get(lib.ckpt_value_dict_class(v), dict)()
                state = lib.ckpt_value_dict_state(v)
                tasks.append(("dict", v, n))
                if state:  # the attributes BUILD set (a state dict's _metadata)
                    tasks.append(("attrs", v, 1))
                    tasks.append(("enter", state))
                for i in reversed(range(n)):
                    tasks.append(("enter", lib.ckpt_value_item(v, i)))
                    tasks.append(("enter", lib.ckpt_value_key(v, i)))
            elif kind in (KIND_TUPLE, KIND_SET):
                memo[v] = self._PENDING
                op = "tuple" if kind == KIND_TUPLE else \
                    "frozenset" if lib.ckpt_value_is_frozenset(v) else "set"
                tasks.append((op, v, n))
                tasks.extend(("enter", lib.ckpt_value_item(v, i)) for i in reversed(range(n)))
            elif kind == KIND_OBJECT:
                name = text(lib.ckpt_value_object_name(v))
                parts = [lib.ckpt_value_object_args(v), lib.ckpt_value_object_state(v)]
                dt = _torch_dtype(self.torch, name) if not any(parts) else None
                if dt is not None:  # a dtype value (torch.float32): data, not a call
                    results.append(memo.setdefault(v, dt))
                    continue
                memo[v] = Opaque(name)
                tasks.append(("object", v, parts))
                tasks.extend(("enter", p) for p in reversed(parts) if p)
            else:
                raise errors.FormatError("value of unknown kind %d" % kind, self.src.path)
        return results[0]

    def _finish(self, task, results):
        op, v, n = task
        if op == "object":
            obj = self.memo[v]
            got = [results.pop() if p else None for p in reversed(n)][::-1]
            obj.args, obj.state = got
        elif op == "attrs":  # the dict's own entry follows on the stack
            attrs = results.pop()
            obj = self.memo[v]
            for k, val in (attrs.items() if isinstance(attrs, dict) else ()):
                if isinstance(k, str):
                    setattr(obj, k, val)
            return
        else:
            items = results[len(results) - n * (2 if op == "dict" else 1):]
            del results[len(results) - len(items):]
            try:
                if op == "list":
                    obj = self.memo[v]
                    obj.extend(items)
                elif op == "dict":
                    obj = self.memo[v]
                    for i in range(0, len(items), 2):
                        obj[items[i]] = items[i + 1]
                elif op == "tuple":
                    obj = self.memo[v] = tuple(items)
                else:
                    obj = self.memo[v] = (frozenset if op == "frozenset" else set)(items)
            except TypeError as exc:  # an unhashable key or set element
                raise errors.FormatError("%s: %s" % (op, exc), self.src.path) from None
        results.append(obj)

    def _leaf(self, v, kind):
        """NONE, BOOL, INT, FLOAT, STR, BYTES or TENSOR."""
        if kind == KIND_NONE:
            return None
        if kind in (KIND_BOOL, KIND_INT, KIND_FLOAT):
            np_code = lib.ckpt_value_numpy_dtype(v)
            if np_code:  # a numpy scalar: the same type and value back
                return _numpy_dtype(np_code).type(self._scalar(v, kind))
        return self._scalar(v, kind)

    def _scalar(self, v, kind):
        """The Python value of a BOOL, INT, FLOAT, STR, BYTES or TENSOR."""
        if kind == KIND_BOOL:
            out = ctypes.c_int()
            check(lib.ckpt_value_bool(v, ctypes.byref(out)))
            return bool(out.value)
        if kind == KIND_INT:
            out = ctypes.c_int64()
            if lib.ckpt_value_int(v, ctypes.byref(out)) == 0:
                return out.value
            return int(text(lib.ckpt_value_int_decimal(v)))
        if kind == KIND_FLOAT:
            out = ctypes.c_double()
            check(lib.ckpt_value_float(v, ctypes.byref(out)))
            return out.value
        if kind in (KIND_STR, KIND_BYTES):
            n = ctypes.c_size_t()
            p = lib.ckpt_value_str(v, ctypes.byref(n))
            raw = ctypes.string_at(p, n.value) if n.value else b""
            if kind == KIND_BYTES:
                return raw
            try:
                return raw.decode("utf-8", "surrogatepass")  # as pickle decodes
            except UnicodeDecodeError:
                return raw.decode("utf-8", "surrogateescape")
        return self.tensor(lib.ckpt_value_tensor(v))

    def tensor(self, t):
        if self.load_types and lib.ckpt_tensor_is_numpy(t):  # stay numpy, on the CPU
            return self._numpy(t)
        out = self._tensor(t)
        if isinstance(out, RawTensor) or self.placeholders is not None:
            return out
        if self.load_types:
            out = self._as_saved(t, out)
        if self.map_location is None:
            return out
        where = self.map_location
        if isinstance(where, dict):  # torch.load's {saved device: target}
            saved = text(lib.ckpt_tensor_device(t))
            where = where.get(saved, saved)
        # moved once its bytes are read (relocate); tied tensors stay tied
        self.moves[id(out)] = (out, where)
        return out

    def _as_saved(self, t, out):
        """out as torch.load rebuilds it: an nn.Parameter with its
        requires_grad, or a tensor saved with requires_grad=True."""
        requires_grad = bool(lib.ckpt_tensor_requires_grad(t))
        if lib.ckpt_tensor_is_parameter(t):
            return self.torch.nn.Parameter(out, requires_grad=requires_grad)
        if requires_grad and (out.is_floating_point() or out.is_complex()):
            out.requires_grad_(True)
        return out

    def relocate(self, obj):
        """obj with every tensor tensor() planned a move for replaced by
        its moved copy (after read_storages: the bytes are in place).
        Containers are the converter's own, so they are updated in place;
        tuples are rebuilt."""
        if not self.moves:
            return obj
        moved, seen = {}, {}

        def visit(x):
            if id(x) in seen:
                return seen[id(x)]
            if isinstance(x, self.torch.Tensor):
                if id(x) in self.moves and id(x) not in moved:
                    t, where = self.moves[id(x)]
                    # a leaf there, as torch.load rebuilds it: Parameter or
                    # requires_grad kept
                    m = t.detach().to(where)
                    if isinstance(t, self.torch.nn.Parameter):
                        m = self.torch.nn.Parameter(m, requires_grad=t.requires_grad)
                    elif t.requires_grad:
                        m.requires_grad_(True)
                    moved[id(x)] = m
                return moved.get(id(x), x)
            seen[id(x)] = x
            if isinstance(x, dict):
                for k in list(x):
                    x[k] = visit(x[k])
            elif isinstance(x, list):
                for i, v in enumerate(x):
                    x[i] = visit(v)
            elif isinstance(x, tuple):
                seen[id(x)] = type(x)(visit(v) for v in x) if type(x) is tuple else x
            return seen[id(x)]

        stack_limit = sys.getrecursionlimit()
        try:
            sys.setrecursionlimit(max(stack_limit, 100000))
            return visit(obj)
        finally:
            sys.setrecursionlimit(stack_limit)

    def _numpy(self, t):
        """A numpy array saved as one: its own copy (numpy pickles hold
        the bytes), in the saved memory order (C or Fortran)."""
        import numpy as np
        ndim = lib.ckpt_tensor_ndim(t)
        shp, st = lib.ckpt_tensor_shape(t), lib.ckpt_tensor_stride(t)
        shape = tuple(shp[i] for i in range(ndim))
        out = np.empty(shape, dtype=_numpy_dtype(lib.ckpt_tensor_dtype(t)))
        if out.nbytes:
            check(lib.ckpt_tensor_read(t, out.ctypes.data, out.nbytes), self.src.path)
        fortran = [1]
        for d in shape[:-1]:
            fortran.append(fortran[-1] * d)
        if ndim > 1 and not lib.ckpt_tensor_is_contiguous(t) and \
                [st[i] for i in range(ndim)] == fortran:
            out = np.asfortranarray(out)
        return out

    def _tensor(self, t):
        torch = self.torch
        name, tdt, bits = _dtype_info(lib.ckpt_tensor_dtype(t))
        ndim = lib.ckpt_tensor_ndim(t)
        shp = lib.ckpt_tensor_shape(t)
        shape = [shp[i] for i in range(ndim)]
        if tdt is None:
            return RawTensor(name, shape, self._copy(t, torch.uint8, [lib.ckpt_tensor_nbytes(t)]))
        if lib.ckpt_tensor_numel(t) == 0:
            st = lib.ckpt_tensor_stride(t)
            return torch.empty_strided(shape, [st[i] for i in range(ndim)], dtype=tdt)
        view_dt = torch.uint8 if tdt is torch.bool else tdt
        if self.placeholders is not None and bits % 8 == 0:
            meta = torch.empty(shape, dtype=tdt, device="meta")
            self.placeholders[id(meta)] = (meta, t)
            return meta
        # mmap: a view of the mapping when the bytes allow one; else (and by
        # default) a view of the storage's private buffer, so that tensors
        # sharing a storage share memory either way
        out = self._view(t, view_dt, bits // 8, shape) if self.src.mmap else None
        if out is None and self.plan:
            out = self._planned(t, view_dt, bits // 8, shape)
            if out is not None:
                if tdt is torch.bool:  # normalised once the bytes are read
                    self.bools.append(out)
                    return out.view(torch.bool)
                return out
        if out is None:
            out = self._copy(t, view_dt, shape)
        if tdt is torch.bool:
            # a byte other than 0/1 is not a valid torch bool: normalise
            return out.view(torch.bool) if int(out.max()) <= 1 else out != 0
        return out

    def _view(self, t, dt, esz, shape):
        if esz == 0:
            return None
        src = self.src
        if src.buf is not None:
            # zero-copy only when libckpt hands out the bytes (contiguous,
            # little-endian) and they lie in our mapping
            if lib.ckpt_tensor_data(t, *self._pn) != 0:
                return None
            buf, off = src.buf, (self._p.value or 0) - src.addr
            if off < 0 or off + self._n.value > len(buf):
                return None  # bytes libckpt inflated or built itself
        else:
            loc = src.locate(t)
            if loc is None:
                return None
            buf, off = loc
        soff = lib.ckpt_tensor_storage_offset(t)
        start = off - soff * esz
        snbytes = lib.ckpt_tensor_storage_nbytes(t)
        # natural alignment (mappings are page-aligned), storage inside buf
        if start < 0 or start % esz or start + snbytes > len(buf):
            return None
        key = (id(buf), lib.ckpt_tensor_storage_id(t), dt)
        base = self.bases.get(key)
        if base is None:  # one base per storage: views of it share memory
            base = self.torch.frombuffer(buf, dtype=dt, count=snbytes // esz, offset=start)
            self.bases[key] = base
        numel = lib.ckpt_tensor_numel(t)
        if soff + numel > base.numel():
            return None
        return base[soff:soff + numel].view(shape)

    def _planned(self, t, dt, esz, shape):
        """A view of the private buffer of t's storage (allocated here,
        filled by read_storages), or None when t's bytes need converting
        (sub-byte dtype, big-endian storage): then it is copied."""
        if esz == 0:
            return None
        h = self.src.handle
        sid = lib.ckpt_tensor_storage_id(t)
        if not lib.ckpt_file_storage_is_raw(h, sid):
            return None
        torch = self.torch
        raw = self.buffers.get(sid)
        if raw is None:
            raw = self.buffers[sid] = torch.empty(lib.ckpt_tensor_storage_nbytes(t),
                                                   dtype=torch.uint8)
        key = (sid, dt)
        base = self.bases.get(key)
        if base is None:  # one typed base per storage: views of it share memory
            usable = raw.numel() - raw.numel() % esz
            base = self.bases[key] = raw[:usable].view(dt)
        ndim = lib.ckpt_tensor_ndim(t)
        st = lib.ckpt_tensor_stride(t)
        # libckpt checked the view against its storage at open
        return torch.as_strided(base, shape, [st[i] for i in range(ndim)],
                                lib.ckpt_tensor_storage_offset(t))

    def read_storages(self):
        """Fills every planned buffer: one C call, in file order."""
        if self.buffers:
            n = len(self.buffers)
            ids = (c_u64 * n)(*self.buffers.keys())
            dst = (ctypes.c_void_p * n)(*(b.data_ptr() for b in self.buffers.values()))
            check(lib.ckpt_file_read_storages(self.src.handle, n, ids, dst), self.src.path)
        for b in self.bools:  # a byte other than 0/1 is not a valid torch bool
            b.clamp_(max=1)

    def _copy(self, t, dt, shape):
        n = lib.ckpt_tensor_nbytes(t)
        out = self.torch.empty(shape, dtype=dt)
        check(lib.ckpt_tensor_read(t, out.data_ptr(), n), self.src.path)
        return out


def load(path, *, unsafe_ok=False, allow=(), map_location=None, mmap=False, device=None):
    """The whole checkpoint at `path` as Python objects: dicts, lists,
    tuples, sets, ints, floats, strings, bytes, None, torch tensors, and
    ckpt.Opaque placeholders for objects that would have been built by a
    call (never constructed). Nothing in the file is executed, ever.

    The file is scanned first (ckpt.scan): when loading it with torch.load
    would run code (verdict "unsafe"), ckpt.UnsafeError is raised before
    anything else reads it, carrying the scan report; so is a file naming
    data-only classes not in `allow` ("review": pathlib paths,
    argparse.Namespace); when running code cannot be ruled out
    ("unscannable") the file is refused the same way unless the reader
    finds it corrupt (then that error). With unsafe_ok=True the data
    is returned, the offending objects as ckpt.Opaque placeholders. `allow` adds "module.qualname"
    names the scan accepts (they still come back as placeholders).

    Tensors live in private memory read from the file in one pass (large
    sequential reads); tensors that shared a storage in the file share
    memory. They do not depend on the file afterwards: `sd = ckpt.load(p);
    torch.save(sd, p)` is safe, and a file truncated by another process
    after the load changes nothing (during it: ckpt.TruncatedError).

    mmap=True (torch.load's name): zero-copy instead. Tensors are
    copy-on-write views of a private mapping of the file when their bytes
    are contiguous little-endian and naturally aligned there (writes stay in
    this process), copies otherwise. HAZARD: the file must not change or
    shrink while those tensors live; torch.save to the same path or a
    truncation by another process kills the process with SIGBUS, and a
    file rewritten in place changes the tensors' values.

    map_location says where tensors go, as torch.load's does: None keeps
    them on the CPU whatever device they were saved on (a CUDA-saved file
    loads on a CPU-only machine), a device or its name ("cuda:0") moves
    every tensor there, a dict {saved device: target} ({"cuda:1":
    "cuda:0"}) moves those saved on a listed device. Moved tensors are
    copies, one per tensor. device (safetensors' load_file and ckpt.open
    name it so) is map_location given as one device, a name or a
    torch.device; giving both is ckpt.InvalidArgumentError. Raises
    ckpt.Error subclasses."""
    map_location = _where(map_location, device, path)
    src = _Source(path, scan=True, allow=allow, unsafe_ok=unsafe_ok, mmap=mmap)
    try:
        # the tree the file was saved from (for safetensors written by ckpt,
        # decoded from "ckpt.structure" by libckpt)
        conv = _Converter(src, map_location)
        obj = conv.convert(_logical_root(src))
        conv.read_storages()
        return conv.relocate(obj)
    finally:
        src.close()


def _where(map_location, device, path):
    """map_location, or device in its place: one of them, and device one
    device (a mapping of saved devices is map_location's)."""
    if device is None:
        return map_location
    if map_location is not None:
        raise errors.InvalidArgumentError(
            "map_location and device both given: they say the same thing, give one",
            os.fspath(path))
    if isinstance(device, dict):
        raise errors.InvalidArgumentError(
            "device must be one device (\"cpu\", \"cuda:0\", a torch.device); "
            "a mapping of saved devices is map_location's", os.fspath(path))
    return device


class StateDictReader:
    """A checkpoint opened for Module.load_state_dict without loading it:
    `obj` is its tree with every tensor a placeholder on the "meta" device
    (shape and dtype only); fill() then reads the tensors that are really
    needed, straight into the parameters that will receive them when dtype,
    shape and layout match (no intermediate copy of the state dict), in one
    ckpt_file_read_tensors call. Use as a context manager; the file stays
    open until exit."""

    def __init__(self, path, unsafe_ok=False):
        self.src = _Source(path, scan=True, unsafe_ok=unsafe_ok)
        try:
            # every tensor a tensor (numpy arrays too): the key audit's view
            self.conv = _Converter(self.src, load_types=False)
            self.conv.placeholders = {}
            self.obj = self.conv.convert(_logical_root(self.src))
            self.conv.read_storages()
        except BaseException:
            self.src.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.src.close()

    def tie_key(self, t):
        """Which placeholders are one tensor: one storage and offset with
        one dtype and shape, the rule of ckpt_match for files."""
        hit = (self.conv.placeholders or {}).get(id(t))
        if hit is None or hit[0] is not t:
            from ._module import _tie_key
            return _tie_key(t)
        h = hit[1]
        return ("storage", lib.ckpt_tensor_storage_id(h), lib.ckpt_tensor_storage_offset(h),
                t.dtype, tuple(t.shape))

    def fill(self, pairs):
        """{name: (value from obj, destination or None)} -> {name: tensor}:
        a placeholder is read into its destination when that is a CPU
        contiguous tensor of the same dtype and shape (and then returned),
        else into a new tensor; other values are returned as they are."""
        torch = self.conv.torch
        ph = self.conv.placeholders or {}
        out, handles, targets = {}, [], []
        for name, (val, dst) in pairs.items():
            hit = ph.get(id(val))
            if hit is None or hit[0] is not val:
                out[name] = val
                continue
            t = hit[1]
            if not (isinstance(dst, torch.Tensor) and dst.device.type == "cpu" and
                    dst.dtype == val.dtype and tuple(dst.shape) == tuple(val.shape) and
                    dst.is_contiguous() and not dst.is_sparse):
                dst = torch.empty(val.shape, dtype=val.dtype)
            handles.append(t)
            targets.append(dst)
            out[name] = dst
        if handles:
            n = len(handles)
            check(lib.ckpt_file_read_tensors(
                self.src.handle, n, (ctypes.c_void_p * n)(*handles),
                (ctypes.c_void_p * n)(*(d.data_ptr() for d in targets))), self.src.path)
            with torch.no_grad():
                for d in targets:  # a byte other than 0/1 is not a valid torch bool
                    if d.dtype is torch.bool:
                        d.view(torch.uint8).clamp_(max=1)
        return out


def _logical_root(src):
    root = ctypes.c_void_p()
    check(lib.ckpt_file_logical_root(ctypes.byref(root), src.handle), src.path)
    return root.value


def metadata(path):
    """The file's metadata as a dict of str to str (values ckpt.save stored
    as JSON, listed in "ckpt.meta_json", decoded): safetensors
    "__metadata__", a sharded index's "metadata", or the record ckpt writes
    into torch archives (ckpt.save's meta, "ckpt.xxh3" digests); None when
    the file has none."""
    h = ctypes.c_void_p()
    check(lib.ckpt_open(ctypes.byref(h), fspath(path), None), os.fspath(path))
    try:
        return _file_metadata(h) if lib.ckpt_file_has_metadata(h) else None
    finally:
        lib.ckpt_close(h)


def _file_metadata(h):
    """The metadata; the values of the keys "ckpt.meta_json" lists (which
    ckpt.save stored as JSON text) decoded."""
    out = {text(lib.ckpt_file_metadata_key(h, i)): text(lib.ckpt_file_metadata_value(h, i))
           for i in range(lib.ckpt_file_metadata_count(h))}
    try:
        encoded = json.loads(out.get("ckpt.meta_json", "[]"))
    except ValueError:
        encoded = []
    for k in encoded if isinstance(encoded, list) else ():
        if isinstance(k, str) and k in out:
            try:
                out[k] = json.loads(out[k])
            except ValueError:
                pass  # not ckpt.save's JSON text: the string as stored
    return out
